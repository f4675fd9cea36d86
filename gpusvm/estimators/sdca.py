"""SDCASVC: the scikit-learn estimator of mini-batch SDCA (validation and bookkeeping only)."""

from __future__ import annotations

import math
import warnings
from numbers import Real

from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

import numpy as np

from .._arrays import warn_if_rows_unscaled
from ..backends import make_backend, resolve_backend_name
from ..solvers.newton import DEFAULT_MAX_ITER as DEFAULT_NEWTON_ITER
from ..solvers.newton import newton
from ..solvers.policy import sdca_settings
from ..solvers.sdca import VARIANTS, sdca
from ._base import _gap_progress_bar, _LinearSVCBase

#: the solvers of SDCASVC: mini-batch SDCA on the dual, primal Newton for the squared hinge
SOLVERS = ("sdca", "newton")


#: bias modes SDCA supports (the others have no box-constrained dual)
SDCA_BIAS_MODES = ("none", "augmented")


class SDCASVC(_LinearSVCBase):
    r"""Linear SVM trained by mini-batch stochastic dual coordinate ascent, with a certificate.

    Minimises the primal SVM objective through its dual (Takáč, Bijral,
    Richtárik & Srebro 2013, eqs. 1-2)

    .. math::

        P(w) = \frac{\lambda}{2}\|w\|^2 + \frac{1}{n}\sum_i \max(0, 1 - y_i \langle w, x_i\rangle),
        \qquad
        D(\alpha) = \frac1n\sum_i \alpha_i - \frac{\lambda}{2}\|w(\alpha)\|^2,\ \alpha\in[0,1]^n,

    with ``w(alpha) = (1/(lam n)) sum_i alpha_i y_i x_i``, updating ``batch_size``
    dual coordinates per iteration, and stops once the duality gap
    ``P(w) - D(alpha)`` of its best primal point ``w`` (``coef_``), an upper bound on
    ``P(w) - P(w*)``, is ``<= tol``.

    Parameters
    ----------
    lam : float or None, default=None
        Regularisation parameter ``lambda > 0``; None means ``1e-4`` unless ``C`` is given.
    C : float or None, default=None
        LinearSVC's regularisation, instead of ``lam``: ``lam = 1/(C n)`` with the
        ``n`` of each fit (of each pair for ``multi_class="ovo"``/``"ordinal"``).
        Giving both is an error.
    loss : {"hinge", "squared_hinge"}, default="hinge"
        ``max(0, 1 - m)`` or ``max(0, 1 - m)^2`` (LinearSVC's default is the squared
        hinge; ALGORITHMS.md gives both duals and certificates).
    solver : {"sdca", "newton"}, default="sdca"
        ``"sdca"``: mini-batch SDCA on the dual (both losses).  ``"newton"``: primal
        truncated Newton (:func:`gpusvm.solvers.newton.newton`, ``loss="squared_hinge"``
        only), LinearSVC's ``dual=False``: few iterations, each two sparse products per
        CG step; it certifies its result by the same duality gap.  With it
        ``max_iter`` counts Newton iterations (default 100), and ``batch_size``,
        ``variant``, ``theta``, ``sigma2``, ``sampling``, ``eval_every`` and
        ``shrinking`` have no effect.
    class_weight : dict, "balanced" or None, default=None
        Weight of each class's rows, as in LinearSVC: ``{label: weight}`` or
        ``"balanced"`` (``n / (n_classes * count)``); multiplies ``sample_weight``.
    multi_class : {"ovr", "ovo", "ordinal"}, default="ovr"
        More than two classes: one-vs-rest (one output per class on all rows),
        one-vs-one (a problem per pair of classes, on its rows; scikit-learn's vote
        rule), or ordinal (ordered labels: a problem per pair of neighbouring classes,
        Duros & Katzman 2014; decision rule :func:`gpusvm.estimators._base.ordinal_scores`).
    warm_start : bool, default=False
        Start the next ``fit`` from this fit's solution: ``alpha_`` for SDCA (with
        ``coef_`` and ``intercept_`` as the first best primal point, so a certified
        fit certifies again at once), ``coef_`` and ``intercept_`` for Newton (the
        same rows and classes are expected).
    batch_size : int or "auto", default="auto"
        Mini-batch size ``b``, from 1 to ``n``; ``b = 1`` is plain SDCA.  ``"auto"``:
        1 on a CPU backend (the fewest epochs; BENCHMARKS.md), ``min(n, 4096)`` on a
        GPU (``batch_size_`` tells which).
    variant : {"auto", "naive", "safe", "aggressive"}, default="auto"
        Step parameter ``beta`` of eq. (15): ``1`` (naive, Sec. 4.1; may oscillate
        for large ``b``), ``beta_b`` of eq. (11) (safe, Theorem 2), or adapted in
        ``[1, beta_b]`` to the measured interaction of the batch, rejecting steps
        that lower ``D`` (aggressive, Algorithm 2).  ``"auto"``: ``"safe"`` at
        ``b = 1`` (where all three take the same step, and the aggressive test only
        adds work), ``"aggressive"`` otherwise (``variant_``).
    theta : float, default=0.5
        Aggressive variant: ``beta <- beta^theta rho^(1 - theta)``, in ``(0, 1)``.
    tol : float, default=1e-3
        Stop when the duality gap is ``<= tol``: then ``P(w) - P(w*) <= tol`` is
        certified (the paper's primal suboptimality 0.001).
    sigma2 : float or None, default=None
        ``sigma^2 = ||X_hat||^2 / n`` of the row-normalised training matrix
        (with the bias column when ``bias="augmented"``); ``None`` computes it by
        Lanczos (:func:`gpusvm.spectral.sigma_squared`) when needed (safe and
        aggressive with ``batch_size > 1``).
    max_iter : int or None, default=None
        Iteration cap; ``None`` means 100 epochs, ``ceil(100 n / b)``, enough for
        the aggressive variant; the safe variant with large batches may need more
        (IMDB, ``b = 1024``, ``lam = 1e-4``: 277 epochs to a gap of 1e-3).
    sampling : {"without_replacement", "with_replacement", "epoch"}, default="epoch"
        How each batch is drawn: a uniform b-subset (Rand(b) of the paper), b
        i.i.d. indices, or consecutive slices of a per-epoch permutation (every
        example visited once per epoch: noticeably faster for small ``b``, 5
        epochs against 8 on IMDB).
        A row repeated inside a batch steps once.
    bias : {"none", "augmented"}, default="augmented"
        No intercept, or a constant feature ``intercept_scaling`` appended to
        every row (the intercept is regularised and part of ``w``).
    intercept_scaling : float, default=1.0
        Value of the appended constant feature for ``bias="augmented"``.
    eval_every : int or None, default=None
        Iterations between two certificates (``history_``, stopping rules,
        callback); ``None`` adapts the cadence to the gap: one epoch, then as many
        epochs as the gap's rate of decrease says are left (at most 4 times the
        last interval), so that far from ``tol`` few certificates are computed. A
        certificate costs about one pass over the data and is the only host
        synchronisation of a GPU run.
    max_time : float or None, default=None
        Time budget in seconds (checked at evaluations).  A run that stops on
        ``max_iter``, ``max_time`` or the callback with a gap above ``tol`` warns
        (``ConvergenceWarning``) with what to change.
    callback : callable or None, default=None
        ``callback(iteration, objective, elapsed)`` at each evaluation, with
        ``objective = P(w(alpha))`` (PegasosSVC's convention); return ``False``
        to stop.  The gap of every evaluation is in ``history_``.
    backend : {"auto", "numpy", "numba", "cupy", "emulated"}, default="auto"
        Where to run: CuPy when a CUDA device exists, else the compiled CPU
        backend (numba, installed with gpusvm), else NumPy/SciPy if numba cannot load.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the data and of ``w``; ``alpha``, scalars, reductions and
        certificates are float64.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the batch stream; the same seed gives every backend the same batches.
    verbose : int, default=0
        Progress bar with the live duality gap when > 0.
    shrinking : bool, default=True
        With ``batch_size=1`` on a CPU backend: LIBLINEAR's shrinking (Hsieh et al.
        2008, Sec. 3.2): rows whose dual coordinate sits at a bound and is pushed
        further out stop being visited until the active set converges.  It changes
        the iterates, not the certificate, which is computed on every row.
    device : int or None, default=None
        CUDA device id of ``backend="cupy"`` (as ``cupy.cuda.Device(id)``; None: the
        current device): every allocation and launch of the fit happens on that device,
        on a stream of its own, so one process can fit on several GPUs at once.
        ``backend="emulated"`` is device 0; a CPU backend refuses a device id.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features) or (n_outputs, n_features)
        One row for two classes; one per class (``"ovr"``), per pair of classes
        (``"ovo"``) or per pair of neighbouring classes (``"ordinal"``) otherwise.
        Per output, the best primal point of the fit: the certified points
        ``w(alpha)`` combined along the way, each with the best point before it, at
        the minimiser of ``P`` on the segment between them (``P(w(alpha))`` is noisy
        at small batches; see :class:`~gpusvm.solvers.sdca.BestPoints`).  With
        ``warm_start=True`` the next fit starts from it as well as from ``alpha_``.
    intercept_ : ndarray of shape (1,) or (n_outputs,)
    classes_ : ndarray of shape (n_classes,)
    alpha_ : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        Dual variables (in ``[0, s_i]`` for the hinge, ``>= 0`` for the squared
        hinge); one column per output, 0 for rows outside a pair's problem.
    lam_ : float or ndarray of shape (n_problems,)
        The ``lam`` each problem was fitted with (``C`` resolved).
    n_iter_ : int
        Iterations performed.
    history_ : list of (int, float, float, float, float), or a list of such lists
        ``(iteration, P, D, gap, elapsed seconds)`` at every evaluation; with more
        than one output, one such list per output, each with that output's own
        figures (its last ``gap`` is its ``duality_gap_``).
    primal_objective_, dual_objective_, duality_gap_ : float or ndarray of shape (n_outputs,)
        ``P(coef_)``, ``D(alpha_)`` and their difference, the certificate:
        ``P(coef_) - P* <= duality_gap_`` by weak duality; one per output for more
        than two classes.
    sigma2_ : float or None
        ``sigma^2`` of the row-normalised training matrix (None when not needed).
    beta_b_ : float
        ``beta_b`` of eq. (11) for this batch size (1 for naive or ``b = 1``).
    beta_ : float or ndarray of shape (n_outputs,)
        Final step parameter ``beta``.
    n_rejected_ : int or ndarray of shape (n_outputs,)
        Steps rejected by the aggressive variant.
    solver_ : str
        The solver used.
    stop_reason_ : str
        ``"tol"``, ``"max_iter"``, ``"max_time"`` or ``"callback"``.
    batch_size_ : int
        The batch size used (``batch_size="auto"`` resolved).
    variant_ : str
        The variant used (``variant="auto"`` resolved).
    n_features_in_ : int

    Notes
    -----
    *Row norms.* The data are never rescaled.  The step divides by
    ``||x_i||^2``, so the safe ``beta_b`` is that of the row-normalised data for
    any row norms (Lemma 1 applied to the unit-diagonal normalised Gram matrix);
    it equals the paper's ``beta_b`` when rows have unit norm.  Rows that are
    all zero start (and stay) at their optimum ``alpha_i = 1``.

    *Which settings are fastest on a CPU.* Measured on IMDB (n = 25,000 TF-IDF
    rows of unit norm, ``sigma^2 = 0.12``, ``1/sigma^2 = 8.4``) at ``lam = 1e-4``,
    ``tol = 1e-3``, NumPy backend, float32, CPU seconds of one core:

    ==========  ============  ==================  ======  =======  ============
    batch_size  variant       sampling            epochs  seconds  final beta
    ==========  ============  ==================  ======  =======  ============
    1           (any)         epoch                  6      8.5    1
    1           (any)         without_replacement    9     14.2    1
    16          aggressive    epoch                  6      2.6    1.0
    64          aggressive    epoch                  5      1.7    1.2
    64          aggressive    without_replacement    9      3.0    1.2
    64          safe          epoch                 19      5.6    8.5
    256         aggressive    epoch                 15      3.7    1.3
    256         safe          epoch                 69     12.7    31.5
    1024        aggressive    epoch                 61      9.5    9.9
    1024        aggressive    without_replacement   67     10.4    8.7
    1024        safe          without_replacement  277     38.0    123.2
    ==========  ============  ==================  ======  =======  ============

    (plus 0.5 s for ``sigma^2`` by Lanczos when ``b > 1``).  The fastest is
    ``variant="aggressive"``, ``batch_size=64``, ``sampling="epoch"``.  Why:
    an iteration costs a fixed Python/NumPy overhead (tens of microseconds)
    plus work proportional to the batch's nonzeros, so ``b = 1`` spends most
    of its time in overhead; up to about
    ``b ~ 1/sigma^2`` the batch's rows barely interact, the aggressive ``beta``
    stays near 1 and the number of epochs is that of ``b = 1``, so the overhead
    is amortised for free.  Beyond it the measured interaction raises ``beta``
    and the epochs grow.  The safe variant uses the worst-case ``beta_b`` of
    eq. (11) (31 for ``b = 256``, while the aggressive variant measures about
    1.3) and needs several times more epochs.  ``"epoch"`` sampling visits every
    example once per pass, which removes the tail of examples that i.i.d.
    batches leave unvisited for long.  On a GPU an iteration costs about the
    same for ``b = 1024`` as for ``b = 1``, so the trade-off moves to large
    batches.  The compiled CPU backend (``backend="numba"``) has no such
    overhead: there ``batch_size=1``, ``variant="safe"``, ``sampling="epoch"``
    is fastest (5 epochs, ~0.06 s on imdb; see :func:`gpusvm.solvers.sdca.sdca`).

    *Badly scaled data.*  Like every dual coordinate method, SDCA converges
    slowly when the features have very different scales (e.g. raw features of
    magnitude 100 next to the intercept column): scale the features or
    normalise the rows first.

    The CPU (NumPy) backend is deterministic for a given seed; the GPU backend
    accumulates with atomics and is not bitwise repeatable.

    References
    ----------
    M. Takáč, A. Bijral, P. Richtárik, N. Srebro. Mini-Batch Primal and Dual
    Methods for SVMs. ICML 2013.
    S. Shalev-Shwartz, T. Zhang. Stochastic Dual Coordinate Ascent Methods for
    Regularized Loss Minimization. JMLR 2013.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from gpusvm import SDCASVC
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = SDCASVC(lam=1e-2, batch_size=16, random_state=0, backend="numpy").fit(X, y)
    >>> bool(clf.duality_gap_ <= 1e-3)
    True
    """

    _MULTICLASS = True

    _parameter_constraints: dict = {
        **_LinearSVCBase._parameter_constraints,
        "solver": [StrOptions(set(SOLVERS))],
        "warm_start": ["boolean"],
        "variant": [StrOptions(set(VARIANTS) | {"auto"})],
        "theta": [Interval(Real, 0, 1, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "shrinking": ["boolean"],
        "sigma2": [Interval(Real, 0, 1, closed="right"), None],
    }

    #: ``handover(history) -> bool`` for :func:`~gpusvm.solvers.sdca.sdca` (None: never);
    #: :class:`~gpusvm.estimators.linear_svc.LinearSVC` sets it on the SDCASVC it runs
    _handover = None

    def __init__(self, *, lam=None, C=None, loss="hinge", solver="sdca", class_weight=None,
                 multi_class="ovr", warm_start=False, batch_size="auto", variant="auto", theta=0.5, tol=1e-3,
                 sigma2=None, max_iter=None, sampling="epoch", bias="augmented",
                 intercept_scaling=1.0, eval_every=None, max_time=None, callback=None,
                 backend="auto", dtype="float32", random_state=None, verbose=0, shrinking=True,
                 device=None):
        self.device = device
        self.shrinking = shrinking
        self.lam = lam
        self.C = C
        self.loss = loss
        self.solver = solver
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.warm_start = warm_start
        self.batch_size = batch_size
        self.variant = variant
        self.theta = theta
        self.tol = tol
        self.sigma2 = sigma2
        self.max_iter = max_iter
        self.sampling = sampling
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.eval_every = eval_every
        self.max_time = max_time
        self.callback = callback
        self.backend = backend
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the SVM until the duality gap is ``<= tol`` (SDCA, or Newton for the squared hinge).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; sparse input is converted to CSR once.
        y : array-like of shape (n_samples,)
            Class labels (two or more classes).
        sample_weight : array-like of shape (n_samples,) or None
            Non-negative row weights (multiplied by ``class_weight``).

        Returns
        -------
        self : SDCASVC
        """
        if self.bias not in SDCA_BIAS_MODES:
            raise ValueError(
                f"SDCASVC supports bias='none' or bias='augmented', got bias={self.bias!r}: an "
                "unregularised intercept adds the constraint sum_i alpha_i y_i = 0 to the dual, "
                "which coordinate steps cannot keep; use bias='augmented' (a regularised "
                "intercept), or PegasosSVC for the other bias modes")
        if self.solver == "newton" and self.loss != "squared_hinge":
            raise ValueError(
                f"solver='newton' minimises the squared hinge, but loss={self.loss!r}: the "
                "hinge is not differentiable; use loss='squared_hinge' with solver='newton', "
                "or solver='sdca' for the hinge")
        warm = self._warm() if self.warm_start and hasattr(self, "coef_") else None
        common, per = self._fit_outputs(X, y, sample_weight, warm=warm)
        self._per_output_attributes(per, scalars=(
            ("primal", "primal_objective_"), ("dual", "dual_objective_"),
            ("gap", "duality_gap_"), ("beta", "beta_"), ("n_rejected", "n_rejected_")))
        alphas = per["alpha"]
        if len(alphas) == 1:
            self.alpha_ = alphas[0]
        elif self._problem_rows[0] is None:                  # one-vs-rest: all rows
            self.alpha_ = np.column_stack(alphas)
        else:                                                # pairs: 0 outside their rows
            self.alpha_ = np.zeros((self._n_rows, len(alphas)), dtype=np.float64)
            for p, (rows, a) in enumerate(zip(self._problem_rows, alphas)):
                self.alpha_[rows, p] = a
        self.sigma2_ = common["sigma2"]
        self.beta_b_ = common["beta_b"]
        self.backend_ = common["backend"]
        self.batch_size_ = common["batch_size"]
        self.variant_ = common["variant"]
        self.solver_ = self.solver
        message = self._uncertified_message(common, per)
        if message is not None:
            warnings.warn(message, ConvergenceWarning, stacklevel=2)
            warn_if_rows_unscaled(math.sqrt(getattr(self, "_max_sq", 0.0)), unconverged=True)
        return self

    # ------------------------------------------------------------ internals
    def _warm(self):
        """``warm`` of :meth:`_fit_outputs` from the last fit (``warm_start=True``)."""
        alpha = np.asarray(self.alpha_)
        alpha = alpha.reshape(-1, 1) if alpha.ndim == 1 else alpha
        coef, intercept = self.coef_, self.intercept_

        def warm(start, m, multi, rows):
            if start + m > alpha.shape[1]:
                raise ValueError(
                    f"warm_start: the last fit had {alpha.shape[1]} outputs, this one has more; "
                    "fit with the same classes, or set warm_start=False")
            inits = []
            for c in range(start, start + m):
                a = alpha[:, c] if rows is None else alpha[rows, c]
                w = np.append(coef[c], intercept[c] / self.intercept_scaling) \
                    if self.bias == "augmented" else coef[c].copy()
                inits.append({"alpha": a, "w": w})
            return inits if multi else inits[0]
        return warm

    def _solve(self, Xs, Y, s, lam, init):
        if self.solver == "newton":
            return self._solve_newton(Xs, Y, s, lam, init)
        return self._solve_columns(Xs, Y, s, lam, init, self._solve_sdca,
                                   native=self._native_ovr())

    def _solve_newton(self, Xs, Y, s, lam, init):
        """The primal Newton solver on one problem (M outputs one after the other)."""
        n = Xs.shape[0]
        backend = resolve_backend_name(self.backend)
        be = make_backend(backend, Xs, Y if Y.ndim == 1 else np.ascontiguousarray(Y[:, 0]),
                          device=self.device)
        w0 = None
        if init is not None:
            inits = init if isinstance(init, list) else [init]
            if inits[0]["w"].shape[0] != Xs.shape[1]:
                raise ValueError(
                    f"warm_start: the last fit had {inits[0]['w'].shape[0]} weights, this one "
                    f"has {Xs.shape[1]}; fit the same features, or set warm_start=False")
            w0 = np.column_stack([i["w"] for i in inits])
        max_iter = self.max_iter if self.max_iter is not None else DEFAULT_NEWTON_ITER
        progress, close = _gap_progress_bar(self.verbose, max_iter * (Y.shape[1] if Y.ndim == 2
                                                                      else 1))
        try:
            res = newton(be, lam=float(lam), tol=float(self.tol), max_iter=max_iter, y=Y,
                         sample_weight=s, w0=w0, max_time=self.max_time,
                         callback=self.callback, progress=progress)
        finally:
            close()
        ex = res.extra
        W = res.w.reshape(Xs.shape[1], -1)
        m = W.shape[1]
        alpha = ex["alpha"].reshape(n, -1)
        common = {"sigma2": None, "beta_b": 1.0, "backend": be.name, "batch_size": n,
                  "variant": "newton", "max_iter": max_iter}
        per = {"n_iter": list(ex["n_iters"]), "history": list(ex["histories"]),
               "stop_reason": list(ex["stop_reasons"]),
               "primal": list(np.atleast_1d(ex["primal"])), "dual": list(np.atleast_1d(ex["dual"])),
               "gap": list(np.atleast_1d(ex["gap"])), "beta": [1.0] * m, "n_rejected": [0] * m,
               "alpha": [alpha[:, c].copy() for c in range(m)]}
        return W, np.zeros(m), common, per

    def _solve_sdca(self, Xs, y, s, lam, init):
        """One mini-batch SDCA run on the rows ``Xs`` (one output, or M natively)."""
        n = Xs.shape[0]
        backend = resolve_backend_name(self.backend)
        b, variant, max_iter, shrinking = sdca_settings(backend, n, self.batch_size, self.variant,
                                                        self.max_iter, self.shrinking)
        extra = {}
        be = make_backend(backend, Xs, y, sample_weight=s, device=self.device)
        if self.loss != "hinge":
            extra["loss"] = self.loss
        if init is not None:
            inits = init if isinstance(init, list) else [init]
            alpha0 = np.column_stack([i["alpha"] for i in inits]) if y.ndim == 2 \
                else inits[0]["alpha"]
            if alpha0.shape[0] != n:
                raise ValueError(
                    f"warm_start: the last fit had {alpha0.shape[0]} rows, this one has {n}; "
                    "warm starts need the same rows (set warm_start=False)")
            extra["alpha0"] = alpha0
            w0 = np.column_stack([i["w"] for i in inits]) if y.ndim == 2 else inits[0]["w"]
            if w0.shape[0] != Xs.shape[1]:
                raise ValueError(
                    f"warm_start: the last fit had {w0.shape[0]} weights, this one has "
                    f"{Xs.shape[1]}; fit the same features, or set warm_start=False")
            extra["w0"] = w0
        progress, close = _gap_progress_bar(self.verbose, max_iter)
        try:
            res = sdca(be, lam=float(lam), b=b, max_iter=max_iter, variant=variant,
                       theta=float(self.theta), sigma2=self.sigma2, tol=float(self.tol),
                       sampling=self.sampling, seed=self._seed(), eval_every=self.eval_every,
                       max_time=self.max_time, callback=self.callback, progress=progress,
                       shrinking=shrinking, handover=self._handover,
                       **extra)
        finally:
            close()
        ex = res.extra
        W = np.asarray(res.w, dtype=np.float64)
        W = W.reshape(-1, 1) if W.ndim == 1 else W
        m = W.shape[1]
        alpha = np.asarray(ex["alpha"]).reshape(n, -1)

        def per_output(value):
            return list(np.broadcast_to(np.asarray(value), (m,)))

        common = {"sigma2": ex["sigma2"], "beta_b": ex["beta_b"], "backend": be.name,
                  "batch_size": b, "variant": variant, "max_iter": max_iter}
        per = {"n_iter": [res.n_iter] * m,
               "history": ex.get("histories") or [res.history] * m,
               "stop_reason": [res.stop_reason] * m, "primal": per_output(ex["primal"]),
               "dual": per_output(ex["dual"]), "gap": per_output(ex["gap"]),
               "beta": per_output(ex["beta"]), "n_rejected": per_output(ex["n_rejected"]),
               "alpha": [alpha[:, c].copy() for c in range(m)]}
        return W, np.zeros(m), common, per

    def _uncertified_message(self, common, per):
        """The ConvergenceWarning of a run that ended with a gap above ``tol``, or None."""
        gaps = np.asarray(per["gap"], dtype=np.float64)
        worst = int(np.argmax(np.where(np.isfinite(gaps), gaps, np.inf)))
        reason = per["stop_reason"][worst]
        gap = float(gaps[worst])
        if reason == "tol" or gap <= self.tol:
            return None
        max_iter, variant, b = common["max_iter"], common["variant"], common["batch_size"]
        n_iter = per["n_iter"][worst]
        name = "Newton" if variant == "newton" else "SDCA"
        # alpha = 0, w = 0 has P = 1 and D = 0 (less with zero rows at alpha_i = 1): a gap above
        # 1 is worse than the starting point, i.e. the steps are too long
        diverged = not math.isfinite(gap) or gap > 1.0
        given = (f"sigma2={self.sigma2!r} was given: if it is below the sigma^2 of the "
                 "row-normalised data, the safe step is too long; pass sigma2=None to compute "
                 "it") if self.sigma2 is not None and variant != "naive" else None
        if diverged and variant == "naive":
            advice = ("the gap is above 1, that of the starting point: the naive step "
                      f"(beta = 1) diverges when the rows of a batch of {b} "
                      "interact; use variant='safe' or variant='aggressive', or a smaller "
                      "batch_size")
        elif diverged and given:
            advice = f"the gap is above 1, that of the starting point: {given}"
        elif reason == "max_iter" and variant == "newton":
            advice = "increase max_iter"
        elif reason == "max_iter":
            if b == 1:          # every variant takes the same step: only the problem is slow
                advice = ("increase max_iter; at batch_size=1 every variant takes the same step "
                          "(with a small lam, loss='squared_hinge' and solver='newton' take few "
                          "iterations)")
            elif variant == "aggressive":
                advice = "increase max_iter, or use a smaller batch_size"
            else:
                advice = "increase max_iter, or use the aggressive variant or a smaller batch_size"
            advice += f"; {given}" if given else ""
        elif reason == "max_time":
            advice = f"the time budget max_time={self.max_time!r} ran out; give it more time"
        else:
            advice = "the callback stopped it; let the run continue to certify the solution"
        head = (f"{name} stopped after max_iter={max_iter} iterations" if reason == "max_iter"
                else f"{name} stopped by {reason} after {n_iter} iterations")
        return f"{head} with duality gap {gap:.3g} > tol={self.tol}; {advice}"


__all__ = ["SDCASVC"]
