"""SDCASVC: the scikit-learn estimator of mini-batch SDCA (validation and bookkeeping only)."""

from __future__ import annotations

import functools
import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from .. import spectral
from .._arrays import warn_if_rows_unscaled
from .._threads import fit_n_jobs
from ..backends import make_backend, resolve_backend_name
from ..solvers.newton import DEFAULT_MAX_ITER as DEFAULT_NEWTON_ITER
from ..solvers.newton import newton
from ..solvers.policy import CPU_BACKENDS, sdca_hands_over, sdca_settings
from ..solvers.sdca import VARIANTS, sdca
from ._base import MAX_ITER, _LinearSVCBase, _progress_bar

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

    with ``w(alpha) = (1/(lam n)) sum_i alpha_i y_i x_i``, updating ``batch_size`` dual
    coordinates per iteration, until the duality gap ``P(w) - D(alpha)`` of its best
    primal point ``w`` (``coef_``), a bound on ``P(w) - P(w*)``, is ``<= tol``.

    Parameters
    ----------
    lam : float or None, default=None
        Regularisation ``lambda > 0``; None means ``1e-4`` unless ``C`` is given.
    C : float or None, default=None
        LinearSVC's regularisation instead: ``lam = 1/(C n)`` with the ``n`` of each fit
        (of each pair for "ovo" and "ordinal"), so a cross-validation fold keeps its
        meaning.  Giving both is an error.
    loss : {"hinge", "squared_hinge"}, default="hinge"
        ``max(0, 1 - m)`` or ``max(0, 1 - m)^2`` (LinearSVC's default).
    solver : {"sdca", "newton"}, default="sdca"
        Mini-batch SDCA on the dual, or primal truncated Newton
        (:func:`gpusvm.solvers.newton.newton`; squared hinge only, LinearSVC's
        ``dual=False``), certified by the same gap; with Newton ``max_iter`` counts its
        iterations (default 100) and ``batch_size``, ``variant``, ``theta``, ``sigma2``,
        ``sampling``, ``eval_every`` and ``shrinking`` have no effect.
    class_weight : dict, "balanced" or None, default=None
        Weight of each class's rows, as in LinearSVC (``"balanced"``: ``n / (n_classes *
        count)``); multiplies ``sample_weight``.
    multi_class : {"ovr", "ovo", "ordinal"}, default="ovr"
        One output per class, a problem per pair of classes (scikit-learn's vote), or per
        pair of neighbouring ordered classes (:func:`gpusvm.estimators._base.ordinal_scores`).
    warm_start : bool, default=False
        Start the next ``fit`` (same rows and classes) from this fit's ``alpha_`` and
        ``coef_`` (SDCA: a certified fit certifies again at once) or ``coef_`` (Newton).
    batch_size : int or "auto", default="auto"
        Mini-batch size ``b`` from 1 (plain SDCA) to ``n``; ``"auto"``: 1 on a CPU, on a
        GPU the batch that minimises the predicted device time
        (:func:`gpusvm.solvers.policy.device_batch`, from ``sigma^2`` and ``lam``).
    variant : {"auto", "naive", "safe", "aggressive"}, default="auto"
        Step parameter ``beta`` of eq. (15): 1 (naive, Sec. 4.1; may oscillate for large
        ``b``), ``beta_b`` of eq. (11) (safe, Theorem 2), or adapted in ``[1, beta_b]``
        to the batch, rejecting steps that lower ``D`` (aggressive, Algorithm 2).
        ``"auto"``: safe at ``b = 1`` (all three take the same step), else aggressive.
    theta : float, default=0.5
        Aggressive variant: ``beta <- beta^theta rho^(1 - theta)``, in ``(0, 1)``.
    tol : float, default=1e-3
        Stop when the duality gap, a certified bound on ``P(w) - P(w*)``, is ``<= tol``.
    sigma2 : float or None, default=None
        ``sigma^2 = ||X_hat||^2 / n`` of the row-normalised training matrix (bias column
        included); None computes it by Lanczos when the safe or aggressive step, or a GPU's
        default batch or cap, needs it.
    max_iter : int or None, default=None
        Iteration cap; None means 100 epochs, ``ceil(100 n / b)``, enough for the
        aggressive variant (the safe one at IMDB, ``b = 1024``, needed 277); on a GPU
        ``ceil(100 n beta_b / b)``, the progress of 100 single-row epochs
        (:func:`gpusvm.solvers.policy.epoch_iterations`).
        ``0`` runs no iteration: the model is the starting point (zeros, or the warm
        start), certified.
    sampling : {"without_replacement", "with_replacement", "epoch"}, default="epoch"
        Each batch a uniform b-subset (Rand(b) of the paper), b i.i.d. indices, or a
        slice of a per-epoch permutation (fewer epochs).  A repeated row steps once.
    bias : {"none", "augmented"}, default="augmented"
        No intercept, or a constant feature ``intercept_scaling`` appended to every row
        (a regularised intercept, part of ``w``).
    intercept_scaling : float, default=1.0
        Value of that constant feature.
    eval_every : int or None, default=None
        Iterations between certificates (``history_``, stopping rules, callback); None
        adapts the cadence to the gap's rate (at most 4 times the last interval).  A
        certificate costs about one pass and is the only host synchronisation on a GPU.
    max_time : float or None, default=None
        Time budget in seconds (checked at evaluations).  A run that stops above
        ``tol`` warns (``ConvergenceWarning``) with what to change.
    callback : callable or None, default=None
        ``callback(iteration, objective, elapsed)`` at each evaluation, with
        ``objective = P(w(alpha))``; return ``False`` to stop.
    backend : {"auto", "numpy", "numba", "cupy", "emulated"}, default="auto"
        Where to run: CuPy when a CUDA device exists, else the compiled CPU backend
        (numba), else NumPy/SciPy.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the data and of ``w``; ``alpha``, scalars, reductions and
        certificates are float64.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the batch stream; the same seed gives every backend the same batches.
    verbose : int, default=0
        Progress bar with the live duality gap when > 0; the fit then also says on how
        many threads it ran.
    n_jobs : int or None, default=None
        Threads of one fit, scikit-learn's convention: None or -1 every core this process
        may use (its CPU affinity, at most a ``threadpoolctl`` limit of OpenMP), ``-k``
        all but ``k - 1``, a positive int that many but at most the usable cores (more
        threads than cores only wait for each other).  Used on the compiled CPU backend
        (``"numba"``) by Newton fits of at least :data:`gpusvm._threads.THREAD_MIN_NNZ`
        nonzeros, whose sparse products run on ``n_jobs`` row blocks, and by SDCA fits of
        one output with ``batch_size=1`` and ``sampling="epoch"`` (the defaults on a CPU)
        of at least :data:`gpusvm._threads.SDCA_THREAD_MIN_NNZ` nonzeros, whose threads (at
        most :data:`gpusvm._threads.SDCA_MAX_THREADS`) each step through a block of rows and
        combine their changes at compiled barriers (:mod:`gpusvm.solvers._threaded`); smaller fits run today's single-thread
        path, whose results they keep.  The same ``random_state`` and ``n_jobs`` give the
        same model bit for bit; a fit on several threads is not the one-thread model
        (Newton sums ``X^T u`` by blocks, SDCA takes other coordinate steps) but is
        certified to the same ``tol``.
        ``n_threads_`` says how many ran.
    shrinking : bool, default=True
        At ``batch_size=1`` on a CPU backend, LIBLINEAR's shrinking (Hsieh et al. 2008,
        Sec. 3.2): rows at a bound and pushed out are skipped for a while.
    device : int or None, default=None
        CUDA device id of ``backend="cupy"`` (None: the current one), where the fit
        allocates and launches on a stream of its own (one process can fit on several
        GPUs at once).  ``"emulated"`` is device 0; a CPU backend refuses an id.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features) or (n_outputs, n_features)
        One row for two classes, else one per class (``"ovr"``), per pair of classes
        (``"ovo"``: (0, 1), (0, 2), ..., (1, 2), ...) or per neighbouring pair
        (``"ordinal"``).  SDCA's is the best primal point of the fit
        (:class:`~gpusvm.solvers.sdca.BestPoints`).
    intercept_ : ndarray of shape (1,) or (n_outputs,)
    classes_ : ndarray of shape (n_classes,)
    alpha_ : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        Dual variables (0 for rows outside a pair's problem).
    lam_ : float or ndarray of shape (n_problems,)
        The ``lam`` of each problem (``C`` resolved).
    n_iter_ : int
        Iterations performed (the most of any output).
    n_threads_ : int
        Threads the fit ran on (``n_jobs`` resolved, or 1 where threads do not pay).
    history_ : list of (int, float, float, float, float), or a list of such lists
        ``(iteration, P, D, gap, elapsed seconds)`` at every evaluation, per output.
    primal_objective_, dual_objective_, duality_gap_ : float or ndarray of shape (n_outputs,)
        ``P(coef_)``, ``D(alpha_)`` and the certificate ``P(coef_) - P* <= duality_gap_``.
    sigma2_, beta_b_ : float or None, float
        ``sigma^2`` (None when not needed); ``beta_b`` of eq. (11) for this batch size.
    beta_, n_rejected_ : float or ndarray of shape (n_outputs,)
        Final ``beta``; steps rejected by the aggressive variant.
    solver_, stop_reason_ : str
        The solver; ``"tol"``, ``"max_iter"``, ``"max_time"`` or ``"callback"``.
    batch_size_, variant_ : int, str
        ``batch_size`` and ``variant`` resolved.
    n_features_in_ : int

    Notes
    -----
    The data are never rescaled: the step divides by ``||x_i||^2``, so the safe
    ``beta_b`` is that of the row-normalised data (Lemma 1 on the normalised Gram
    matrix); all-zero rows stay at their optimum ``alpha_i = 1``.  Like every dual
    coordinate method, SDCA is slow on badly scaled features: scale them first.

    Where an iteration has a fixed cost (NumPy, a GPU), batches up to ``b ~ 1/sigma^2``
    take the epochs of ``b = 1`` with the aggressive variant, whose ``beta`` stays near
    1 (the safe ``beta_b`` is the worst case: 31 against 1.3 at ``b = 256`` on imdb).
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
        # 0: the starting point, certified (scikit-learn's LinearSVC(max_iter=0) returns zeros)
        "max_iter": [Interval(Integral, 0, MAX_ITER, closed="both"), None],
    }

    #: :class:`~gpusvm.estimators.linear_svc.LinearSVC` sets these on the SDCASVC it runs:
    #: the cap in epochs (replacing ``max_iter``; :func:`~gpusvm.solvers.policy.sdca_settings`),
    #: and the ``tol`` of :func:`~gpusvm.solvers.policy.sdca_hands_over` (None: never hand over)
    _epochs = None
    _handover_tol = None

    def __init__(self, *, lam=None, C=None, loss="hinge", solver="sdca", class_weight=None,
                 multi_class="ovr", warm_start=False, batch_size="auto", variant="auto", theta=0.5, tol=1e-3,
                 sigma2=None, max_iter=None, sampling="epoch", bias="augmented",
                 intercept_scaling=1.0, eval_every=None, max_time=None, callback=None,
                 backend="auto", dtype="float32", random_state=None, verbose=0, shrinking=True,
                 device=None, n_jobs=None):
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
        self.shrinking = shrinking
        self.device = device
        self.n_jobs = n_jobs

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
        for key in ("sigma2", "beta_b", "backend", "batch_size", "variant"):
            setattr(self, f"{key}_", common[key])
        self.solver_ = self.solver
        self.n_threads_ = int(common.get("threads", 1))
        if self.verbose:
            print(f"gpusvm {self.solver}: fit on {self.n_threads_} thread"
                  f"{'s' if self.n_threads_ > 1 else ''} (n_jobs={self.n_jobs!r})")
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
        coef, intercept = self._coef_array(), self.intercept_

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

    def _implicit_bias(self) -> bool:
        """Newton on the CPU adds the bias column in its products: no copy of ``X``."""
        return self.solver == "newton" and self.bias == "augmented" and \
            resolve_backend_name(self.backend) in ("numba", "numpy")

    def _solve_newton(self, Xs, Y, s, lam, init):
        """The primal Newton solver on one problem (M outputs one after the other)."""
        n = Xs.shape[0]
        bias = getattr(self, "_bias_value", None)       # the column left to the products
        d_aug = Xs.shape[1] + (bias is not None)
        backend = resolve_backend_name(self.backend)
        be = make_backend(backend, Xs, Y if Y.ndim == 1 else np.ascontiguousarray(Y[:, 0]),
                          device=self.device)
        w0 = None
        if init is not None:
            w0 = _warm_weights(init if isinstance(init, list) else [init], d_aug, True)
        max_iter = self.max_iter if self.max_iter is not None else DEFAULT_NEWTON_ITER
        progress, close = _progress_bar(self.verbose, max_iter * (Y.shape[1] if Y.ndim == 2 else 1),
                                        gap=True)
        try:
            res = newton(be, lam=float(lam), tol=float(self.tol), max_iter=max_iter, y=Y,
                         sample_weight=s, w0=w0, max_time=self.max_time,
                         callback=self.callback, progress=progress,
                         n_jobs=fit_n_jobs(getattr(self, "n_jobs", None), Xs.nnz), bias=bias)
        finally:
            close()
        ex = res.extra
        W = res.w.reshape(d_aug, -1)
        m = W.shape[1]
        alpha = ex["alpha"].reshape(n, -1)
        common = {"sigma2": None, "beta_b": 1.0, "backend": be.name, "batch_size": n,
                  "variant": "newton", "max_iter": max_iter, "threads": ex["threads"]}
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
        sigma2 = self.sigma2
        if sigma2 is None and backend not in CPU_BACKENDS and (     # the device's batch or cap
                self.batch_size == "auto" or self.max_iter is None or self._epochs is not None):
            sigma2 = spectral.sigma_squared(Xs, normalize=True)
        b, variant, max_iter, shrinking, epoch = sdca_settings(
            backend, n, self.batch_size, self.variant, self.max_iter, self.shrinking,
            lam=float(lam), sigma2=sigma2, mean_row_nnz=Xs.nnz / max(n, 1), epochs=self._epochs)
        handover = None
        if self._handover_tol is not None:
            handover = functools.partial(sdca_hands_over, iterations_per_epoch=epoch,
                                         tol=self._handover_tol)
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
            extra["w0"] = _warm_weights(inits, Xs.shape[1], y.ndim == 2)
        progress, close = _progress_bar(self.verbose, max_iter, gap=True)
        try:
            res = sdca(be, lam=float(lam), b=b, max_iter=max_iter, variant=variant,
                       theta=float(self.theta), sigma2=sigma2, tol=float(self.tol),
                       sampling=self.sampling, seed=self._seed(), eval_every=self.eval_every,
                       max_time=self.max_time, callback=self.callback, progress=progress,
                       shrinking=shrinking, handover=handover,
                       n_jobs=fit_n_jobs(getattr(self, "n_jobs", None), Xs.nnz), **extra)
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
                  "batch_size": b, "variant": variant, "max_iter": max_iter,
                  "threads": ex["threads"]}
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


def _warm_weights(inits, d, stack):
    """The warm start's weights: one column per init (``stack``) or the first init's."""
    w0 = np.column_stack([i["w"] for i in inits]) if stack else inits[0]["w"]
    if w0.shape[0] != d:
        raise ValueError(f"warm_start: the last fit had {w0.shape[0]} weights, this one has "
                         f"{d}; fit the same features, or set warm_start=False")
    return w0


__all__ = ["SDCASVC"]
