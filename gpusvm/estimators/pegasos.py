"""PegasosSVC: the scikit-learn estimator of mini-batch Pegasos (validation and bookkeeping only)."""

from __future__ import annotations

import math
import warnings
from numbers import Real

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from .. import spectral
from .._arrays import warn_if_rows_unscaled
from ..backends import make_backend, resolve_backend_name
from ..backends.base import SCHEDULES
from ..solvers.pegasos import AVERAGING, pegasos
from ..solvers.policy import CPU_BACKENDS, MIN_OPTIMAL_BIAS_BATCH, pegasos_settings
from ._base import _LinearSVCBase, _progress_bar, warn_short_tail


class PegasosSVC(_LinearSVCBase):
    r"""Linear SVM trained by mini-batch Pegasos.

    Minimises the primal SVM objective (Shalev-Shwartz, Singer & Srebro 2007, eq. 1)

    .. math:: P(w) = \frac{\lambda}{2}\|w\|^2 + \frac{1}{n}\sum_i \max(0, 1 - y_i \langle w, x_i\rangle)

    by Pegasos (Fig. 1) with mini-batches of ``batch_size`` examples, keeping
    ``w = a v`` so that an iteration costs O(nnz of the batch).

    Parameters
    ----------
    lam, C, loss, class_weight, multi_class, callback, backend, random_state, device
        As in :class:`~gpusvm.SDCASVC` (``callback`` gets ``P(w)``).
    max_time : float or None, default=None
        Time budget in seconds (checked at evaluations).
    batch_size : int or "auto", default="auto"
        Mini-batch size ``k`` from 1 to ``n`` (``n``: the deterministic subgradient
        method).  ``"auto"``: on a CPU ``n`` for ``fit`` on at most 64 rows, else 1;
        on a GPU the batch that minimises the predicted device time
        (:func:`gpusvm.solvers.policy.device_batch`; docs/estimators.md, "Defaults").
    max_iter : int or None, default=None
        Number of iterations ``T``; None means up to 64 epochs with the doubling average,
        else ten epochs (a full batch: 4096 iterations, 640 without the doubling average);
        on a GPU an epoch is ``n beta_k / k`` iterations
        (:func:`gpusvm.solvers.policy.epoch_iterations`).
    sampling : {"without_replacement", "with_replacement", "epoch"}, default="epoch"
        Each ``A_t`` a uniform k-subset (Takáč et al. 2013), k i.i.d. indices (Pegasos
        Sec. 2.3), or a slice of a per-epoch permutation (fewer epochs).
    projection : bool, default=True
        Project onto a ball that holds the optimum (Fig. 1, step 5): radius
        ``1/sqrt(lam)`` or smaller (:func:`gpusvm.solvers.pegasos.projection_radius`).
    averaging : {"auto", "none", "all", "tail", "doubling"}, default="auto"
        The last iterate, the average of all iterates, of the last half (Takáč et al.
        Theorem 1; a run stopped before ``T/2`` warns and returns the last iterate), or
        that tail average for ``T = 1, 2, 4, ...`` epochs until the rule of ``tol`` holds
        (:func:`gpusvm.solvers.pegasos.doubling_estimate`).  ``"auto"``: ``"doubling"``
        when ``max_iter`` is None, else ``"tail"``.
    tol : float or None, default=1e-3
        The doubling average's rule: stop when the suboptimality left, estimated from
        how the objective falls between doublings, is at most ``tol`` (per unit of
        weight, ``P_s / mean(s)``).  An estimate, not a certificate (SDCASVC's).
    schedule : {"pegasos", "norma", "constant"}, default="pegasos"
        ``eta_t = 1/(lam t)``; NORMA's ``p/(lam sqrt t)``; a constant ``eta0``.
    eta0 : float or None, default=None
        Step size of the constant schedule (required there).
    norma_p : float, default=0.7
        NORMA's ``p``.
    bias : {"none", "augmented", "unregularized", "optimal"}, default="augmented"
        Pegasos Sec. 4: no intercept; a regularised one, the weight of a constant
        feature ``intercept_scaling``; an unregularised ``b`` stepped with the batch
        subgradient; or the optimal ``b`` of each batch (needs ``batch_size >= 8``).
    intercept_scaling : float, default=1.0
        Value of the constant feature, whose weight ``fit`` returns minimising the
        objective given the others (:func:`gpusvm.solvers.pegasos.polished_augmented_bias`).
    eval_every : int or None, default=None
        Iterations between evaluations of the objective (``history_``, stopping rules,
        callback), a GPU run's only host synchronisations; None means once per epoch.
    target_objective : float or None, default=None
        Stop once ``P(w) <= target_objective`` at an evaluation.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the data and of ``v``; scalars and reductions are float64.
    verbose : int, default=0
        Progress bar with the live objective when > 0.
    n_jobs : int or None, default=None
        Accepted for the interface every gpusvm estimator shares (scikit-learn's
        convention, checked as theirs: 0 or a bool is an error); Pegasos' iterations run
        on one thread (``n_threads_`` is 1): a step depends on the last, and its batches
        are too small to split.

    Attributes
    ----------
    coef_, intercept_, classes_, lam_, n_iter_, batch_size_, n_features_in_
        As in :class:`~gpusvm.SDCASVC`.
    t_ : int
        Iterations of the step-size schedule so far (``partial_fit`` continues from it).
    n_threads_ : int
        Threads the fit ran on (1).
    history_ : list of (int, float, float), or a list of such lists
        ``(iteration, objective, elapsed seconds)`` at every evaluation, per output.
    stop_reason_ : str
        Why the run ended (``"tol"``: the doubling average's stopping rule).
    averaging_ : str
        ``averaging`` resolved.

    Notes
    -----
    ``objective`` values are those of the training problem: with
    ``bias="augmented"`` the intercept is part of ``w`` and regularised.
    The CPU (NumPy) backend is deterministic for a given seed; the GPU backend
    accumulates with atomics and is not bitwise repeatable.

    References
    ----------
    S. Shalev-Shwartz, Y. Singer, N. Srebro. Pegasos: Primal Estimated
    sub-GrAdient SOlver for SVM. ICML 2007.
    M. Takáč, A. Bijral, P. Richtárik, N. Srebro. Mini-Batch Primal and Dual
    Methods for SVMs. ICML 2013.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from gpusvm import PegasosSVC
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = PegasosSVC(lam=1e-2, batch_size=16, random_state=0, backend="numpy").fit(X, y)
    >>> clf.score(X, y) > 0.8
    True
    """

    _MULTICLASS = True

    _parameter_constraints: dict = {
        **_LinearSVCBase._parameter_constraints,
        "projection": ["boolean"],
        "averaging": [StrOptions(set(AVERAGING) | {"auto"})],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "schedule": [StrOptions(set(SCHEDULES))],
        "eta0": [Interval(Real, 0, None, closed="neither"), None],
        "norma_p": [Interval(Real, 0, None, closed="neither")],
        "target_objective": [Real, None],
    }

    def __init__(self, *, lam=None, C=None, loss="hinge", class_weight=None, multi_class="ovr",
                 batch_size="auto", max_iter=None, sampling="epoch",
                 projection=True, averaging="auto", tol=1e-3, schedule="pegasos", eta0=None,
                 norma_p=0.7, bias="augmented", intercept_scaling=1.0, eval_every=None,
                 max_time=None, target_objective=None, callback=None, backend="auto",
                 dtype="float32", random_state=None, verbose=0, device=None, n_jobs=None):
        self.lam = lam
        self.C = C
        self.loss = loss
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.sampling = sampling
        self.projection = projection
        self.averaging = averaging
        self.tol = tol
        self.schedule = schedule
        self.eta0 = eta0
        self.norma_p = norma_p
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.eval_every = eval_every
        self.max_time = max_time
        self.target_objective = target_objective
        self.callback = callback
        self.backend = backend
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.n_jobs = n_jobs

    def _initial_point(self, coef_init, intercept_init, d_aug, lam, clip=False):
        if coef_init is None and intercept_init is None:
            return None, 0.0
        w0 = np.zeros(d_aug, dtype=np.float64)
        b0 = 0.0
        if coef_init is not None:
            c = np.asarray(coef_init, dtype=np.float64).ravel()     # its size checked by warm
            if not np.all(np.isfinite(c)):
                raise ValueError("coef_init contains NaN or infinity")
            w0[:c.size] = c
        if intercept_init is not None:
            b0 = float(np.asarray(intercept_init, dtype=np.float64).ravel()[0])
            if self.bias == "augmented":
                w0[-1] = b0 / self.intercept_scaling
                b0 = 0.0
            elif self.bias == "none":
                raise ValueError("intercept_init was given but bias='none'; use another bias mode")
        if self.projection and not clip:     # partial_fit continues the solver's own point
            norm = float(np.linalg.norm(w0))
            radius = 1.0 / math.sqrt(lam)
            if norm > radius * (1 + 1e-12):
                raise ValueError(
                    f"the initial w has norm {norm:.6g} > 1/sqrt(lam) = {radius:.6g}; Pegasos "
                    "starts inside that ball: scale coef_init down or set projection=False")
        return w0, b0

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None, coef_init=None, intercept_init=None):
        """Fit the SVM by mini-batch Pegasos.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; sparse input is converted to CSR once.
        y : array-like of shape (n_samples,)
            Class labels (two or more classes).
        sample_weight : array-like of shape (n_samples,) or None
            Non-negative row weights (multiplied by ``class_weight``).
        coef_init : array-like of shape (n_features,) or (n_outputs, n_features), optional
            Initial ``w_1``; with projection it must satisfy ``||w_1|| <= 1/sqrt(lam)``.
        intercept_init : float or array-like of shape (n_outputs,), optional
            Initial bias.

        Returns
        -------
        self : PegasosSVC
        """
        self._check_options()
        self._averaging = None
        self.t_ = 0
        warm = None if coef_init is None and intercept_init is None else \
            self._warm_from(coef_init, intercept_init)
        common, per = self._fit_outputs(X, y, sample_weight, warm=warm)
        self._store(common, per)
        self.n_threads_ = 1
        return self

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One more epoch of Pegasos over ``X``, continuing the step-size schedule.

        As SGDClassifier's: the first call needs ``classes`` (all the labels of the
        stream) and starts from ``w = 0``; each runs ``ceil(n / k)`` iterations after
        the ``t_`` of the earlier calls and returns the last iterate (``averaging="auto"``
        means ``"none"``).  With ``C``, ``lam = 1/(C n)`` takes the first call's ``n``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,) or None
            Required on the first call, ignored afterwards.
        sample_weight : array-like of shape (n_samples,) or None

        Returns
        -------
        self : PegasosSVC
        """
        first = not hasattr(self, "t_") or not hasattr(self, "coef_")
        if first:
            self._validate_params()
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit: "
                                 "all the labels the data will hold, e.g. classes=np.unique(y)")
            classes = np.unique(np.asarray(classes))
            if classes.size < 2:
                raise ValueError(f"classes must hold at least 2 labels; got {classes.tolist()}")
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(f"classes={np.asarray(classes).tolist()} differs from the classes "
                             f"{self.classes_.tolist()} of the first partial_fit call")
        self._check_options()
        n_classes = (classes if first else self.classes_).size
        if n_classes > 2 and self.multi_class != "ovr":
            raise ValueError(
                f"partial_fit fits one-vs-rest outputs only (every call's rows serve every "
                f"output); multi_class={self.multi_class!r} needs fit on all the data")
        self._averaging = self.averaging           # partial_fit: one chunk of a stream
        t0 = 0 if first else self.t_
        old = None if first else (np.array(self._coef_array()), self.intercept_.copy(), self.lam_)

        def warm(start, m, multi, rows):
            if old is None:                      # the first call starts from w = 0
                return None
            inits = [(old[0][start + c], None if self.bias == "none" else old[1][start + c], t0)
                     for c in range(m)]
            return inits if multi else inits[0]

        saved_lam, saved_c = self.lam, self.C
        try:
            if not first and self.C is not None:     # keep the lam of the first call
                self.lam, self.C = float(np.max(self.lam_)), None
            common, per = self._fit_outputs(X, y, sample_weight, warm=warm,
                                            classes=classes if first else self.classes_,
                                            reset=first)
        finally:
            self.lam, self.C = saved_lam, saved_c
        if old is not None and np.ndim(old[2]) == np.ndim(self.lam_):
            self.lam_ = old[2]
        self._store(common, per)
        self.t_ = t0 + self.n_iter_
        return self

    # ------------------------------------------------------------ internals
    def _check_options(self):
        if self.schedule == "constant" and self.eta0 is None:
            raise ValueError("schedule='constant' needs eta0, the fixed step size")
        if (self.bias == "optimal" and self.batch_size != "auto"
                and self.batch_size < MIN_OPTIMAL_BIAS_BATCH):
            raise ValueError(
                f"bias='optimal' needs batch_size >= {MIN_OPTIMAL_BIAS_BATCH}, got "
                f"batch_size={self.batch_size}: the optimal bias of a small batch puts its "
                "margins at 1, so w barely moves (with one row, never) and the model predicts "
                "the majority class; use bias='unregularized' or bias='augmented', or a larger "
                "batch_size")

    def _warm_from(self, coef_init, intercept_init):
        """``warm`` of :meth:`_fit_outputs` from ``coef_init`` and ``intercept_init``."""
        def warm(start, m, multi, rows):
            d = self.n_features_in_
            inits = []
            for c in range(start, start + m):
                coef = None
                if coef_init is not None:
                    coef = np.asarray(coef_init, dtype=np.float64)
                    if coef.ndim == 2:
                        if coef.shape[0] <= c:
                            raise ValueError(f"coef_init has {coef.shape[0]} rows but the fit "
                                             f"has more outputs (at least {c + 1})")
                        coef = coef[c]
                    if coef.size != d:
                        raise ValueError(f"coef_init has {coef.size} values but X has {d} "
                                         "features")
                b = None
                if intercept_init is not None:
                    arr = np.atleast_1d(np.asarray(intercept_init, dtype=np.float64)).ravel()
                    b = arr[c] if arr.size > 1 else arr[0]
                inits.append((coef, b, 0))
            return inits if multi else inits[0]
        return warm

    def _solve(self, Xs, Y, s, lam, init):
        return self._solve_columns(Xs, Y, s, lam, init, self._solve_one,
                                   native=self._native_ovr())

    def _solve_one(self, Xs, y, s, lam, init, output_scale=None):
        """One Pegasos run on the rows ``Xs`` with labels ``y`` (one output, or M natively;
        ``output_scale``: see :func:`~gpusvm.solvers.pegasos.pegasos`)."""
        n = Xs.shape[0]
        backend = resolve_backend_name(self.backend)
        stream = self._averaging is not None                 # partial_fit
        data = {}
        if backend not in CPU_BACKENDS and not stream and (
                self.batch_size == "auto" or self.max_iter is None):   # the device's batch, cap
            data = {"lam": float(lam), "sigma2": spectral.sigma_squared(Xs, normalize=True),
                    "mean_row_nnz": Xs.nnz / max(n, 1)}
        k, averaging, max_iter = pegasos_settings(backend, n, self.batch_size, self.averaging,
                                                  self.max_iter, self.bias, stream, **data)
        w0, b0, t_start = None, 0.0, 0
        if isinstance(init, list):               # M outputs in one native call
            points = [self._initial_point(coef, b, Xs.shape[1], lam, clip=t > 0)
                      for coef, b, t in init]
            t_start = init[0][2]
            if any(w is not None for w, _ in points):
                w0 = np.column_stack([np.zeros(Xs.shape[1]) if w is None else w
                                      for w, _ in points])
                b0 = np.array([b for _, b in points], dtype=np.float64)
        elif init is not None:
            coef, b, t_start = init
            w0, b0 = self._initial_point(coef, b, Xs.shape[1], lam, clip=t_start > 0)
        extra = {}
        be = make_backend(backend, Xs, y, sample_weight=s, device=self.device)
        if self.loss != "hinge":
            extra["loss"] = self.loss
        if t_start:
            extra["t_start"] = int(t_start)
        if self.bias == "augmented":
            extra["intercept_scaling"] = float(self.intercept_scaling)
        if stream:                               # one chunk of a stream
            extra["whole_problem"] = False
        if output_scale is not None:
            extra["output_scale"] = output_scale
        progress, close = _progress_bar(self.verbose, max_iter)
        try:
            res = pegasos(be, lam=float(lam), k=k, max_iter=max_iter, sampling=self.sampling,
                          seed=self._seed(), projection=bool(self.projection),
                          averaging=averaging, schedule=self.schedule, eta0=self.eta0,
                          norma_p=float(self.norma_p), bias=self.bias, w0=w0, b0=b0,
                          eval_every=self.eval_every, max_time=self.max_time,
                          target_objective=self.target_objective, callback=self.callback,
                          progress=progress, tol=self.tol, **extra)
        finally:
            close()
        if not np.all(np.isfinite(res.w)) or not np.all(np.isfinite(res.b)):
            if self.schedule == "constant":
                advice = "lower eta0, or use schedule='pegasos'"
            else:
                advice = (f"the steps 1/(lam t) are too large for dtype={self.dtype!s} with "
                          f"lam={lam!r}: use a larger lam or dtype='float64'")
            raise FloatingPointError(f"Pegasos diverged (non-finite weights); {advice}")
        warn_short_tail(averaging, res.n_iter, max_iter, res.stop_reason)
        W = np.asarray(res.w, dtype=np.float64)
        W = W.reshape(-1, 1) if W.ndim == 1 else W
        m = W.shape[1]
        b = np.broadcast_to(np.asarray(res.b, dtype=np.float64), (m,)).copy()
        common = {"backend": be.name, "batch_size": k, "averaging": averaging,
                  "max_iter": max_iter, "n": n}
        per = {"n_iter": [res.n_iter] * m,
               "history": res.extra.get("histories") or [res.history] * m,
               "stop_reason": [res.stop_reason] * m}
        return W, b, common, per

    def _store(self, common, per):
        self._per_output_attributes(per)
        for key in ("backend", "batch_size", "averaging"):
            setattr(self, f"{key}_", common[key])
        self.t_ = self.n_iter_
        if common["averaging"] == "doubling" and self.stop_reason_ == "max_iter" \
                and self.tol is not None:
            max_iter, k, n = common["max_iter"], common["batch_size"], common["n"]
            warnings.warn(
                f"Pegasos stopped after max_iter={max_iter} iterations ({max_iter * k / n:.3g} "
                f"epochs) with the objective still falling by more than tol={self.tol} per "
                "doubling; increase max_iter, scale the data (gpusvm.datasets.normalize_rows), "
                "or use SDCASVC, which certifies its result", ConvergenceWarning, stacklevel=3)
            warn_if_rows_unscaled(math.sqrt(getattr(self, "_max_sq", 0.0)), unconverged=True)


__all__ = ["PegasosSVC"]
