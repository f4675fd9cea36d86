"""PegasosSVC: the scikit-learn estimator of mini-batch Pegasos (validation and bookkeeping only)."""

from __future__ import annotations

import math
import warnings
from numbers import Real

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from ..backends import make_backend
from ..solvers.pegasos import AVERAGING, SCHEDULES, pegasos
from ._base import (MAX_EPOCHS_DOUBLING, MIN_OPTIMAL_BIAS_BATCH, _LinearSVCBase, _progress_bar,
                    warn_short_tail)


class PegasosSVC(_LinearSVCBase):
    r"""Linear SVM trained by mini-batch Pegasos.

    Minimises the primal SVM objective (Shalev-Shwartz, Singer & Srebro 2007, eq. 1)

    .. math:: P(w) = \frac{\lambda}{2}\|w\|^2 + \frac{1}{n}\sum_i \max(0, 1 - y_i \langle w, x_i\rangle)

    by Pegasos (Fig. 1) with mini-batches of ``batch_size`` examples, keeping
    ``w = a v`` so that an iteration costs O(nnz of the batch).

    Parameters
    ----------
    lam : float, default=1e-4
        Regularisation parameter ``lambda > 0`` (LinearSVC's ``C = 1/(lam n)``).
    batch_size : int or "auto", default="auto"
        Mini-batch size ``k``, from 1 to ``n``; ``k = n`` without replacement is the
        deterministic subgradient method.  ``"auto"``: 1 on a CPU backend (one core
        does the same work per epoch for any ``k``, and the fewest epochs win),
        ``min(n, 4096)`` on a GPU (``batch_size_`` tells which).
    max_iter : int or None, default=None
        Number of iterations ``T``; ``None`` means up to 64 epochs with the doubling
        average and its stopping rule (see ``averaging``), ten epochs otherwise.
    sampling : {"without_replacement", "with_replacement", "epoch"}, default="epoch"
        How each ``A_t`` is drawn: a uniform k-subset (Takáč et al. 2013), k i.i.d.
        indices (Pegasos Sec. 2.3), or consecutive slices of a per-epoch permutation
        (every example once per epoch: fewer epochs to a given accuracy).
    projection : bool, default=True
        Project onto the ball of radius ``1/sqrt(lam)`` (Fig. 1, step 5).
    averaging : {"auto", "none", "all", "tail", "doubling"}, default="auto"
        Return the last iterate, the average of all iterates, the average of the
        last half (``t > T/2``, Takáč et al. Theorem 1), or that tail average for
        ``T = 1, 2, 4, ...`` epochs in turn, stopping once the decreases of the objective
        between doublings put the suboptimality left at most ``tol`` (``"doubling"``,
        :func:`gpusvm.solvers.pegasos.doubling_estimate`).  ``"auto"``:
        ``"doubling"`` when ``max_iter`` is None, else ``"tail"`` (``averaging_``).
        A ``"tail"`` run stopped (``max_time``, ``target_objective``, ``callback``)
        before ``T/2`` has no tail: it returns the last iterate, with a
        ``ConvergenceWarning``.
    tol : float or None, default=1e-3
        The doubling average's stopping rule: stop when the suboptimality left,
        estimated from how the objective falls from one doubling of ``T`` to the
        next (the error of the tail average shrinks by a steady factor), is at most
        ``tol``.  An estimate, not a certificate: SDCASVC certifies its result.
    schedule : {"pegasos", "norma", "constant"}, default="pegasos"
        ``eta_t = 1/(lam t)``; NORMA's ``p/(lam sqrt t)``; a constant ``eta0``.
    eta0 : float or None, default=None
        Step size of the constant schedule (required there).
    norma_p : float, default=0.7
        NORMA's ``p``.
    bias : {"none", "augmented", "unregularized", "optimal"}, default="augmented"
        Pegasos Sec. 4: no intercept; a constant feature ``intercept_scaling``
        appended to every row (the intercept is regularised); an unregularised
        ``b`` stepped with the batch subgradient; or the optimal ``b`` of each batch
        (which needs ``batch_size >= 8``: a smaller batch's optimal bias puts its
        margins at 1 and ``w`` barely moves).
    intercept_scaling : float, default=1.0
        Value of the appended constant feature for ``bias="augmented"``.
    eval_every : int or None, default=None
        Iterations between evaluations of the objective (``history_``, stopping
        rules, callback); ``None`` means once per epoch. Evaluations are the only
        host synchronisations of a GPU run.
    max_time : float or None, default=None
        Time budget in seconds (checked at evaluations).
    target_objective : float or None, default=None
        Stop once ``P(w) <= target_objective`` at an evaluation.
    callback : callable or None, default=None
        ``callback(iteration, objective, elapsed)`` at each evaluation; return
        ``False`` to stop.
    backend : {"auto", "numpy", "numba", "cupy", "emulated"}, default="auto"
        Where to run: CuPy when a CUDA device exists, else the compiled CPU
        backend (numba, installed with gpusvm), else NumPy/SciPy if numba cannot load.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the data and of ``v``; scalars and reductions are float64.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the batch stream; the same seed gives every backend the same batches.
    verbose : int, default=0
        Progress bar with the live objective when > 0.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features)
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,)
    n_iter_ : int
        Iterations performed.
    history_ : list of (int, float, float)
        ``(iteration, objective, elapsed seconds)`` at every evaluation.
    stop_reason_ : str
        Why the run ended (``"tol"``: the doubling average's stopping rule).
    batch_size_ : int
        The batch size used (``batch_size="auto"`` resolved).
    averaging_ : str
        The averaging used (``averaging="auto"`` resolved).
    n_features_in_ : int

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

    def __init__(self, *, lam=1e-4, batch_size="auto", max_iter=None, sampling="epoch",
                 projection=True, averaging="auto", tol=1e-3, schedule="pegasos", eta0=None,
                 norma_p=0.7, bias="augmented", intercept_scaling=1.0, eval_every=None,
                 max_time=None, target_objective=None, callback=None, backend="auto",
                 dtype="float32", random_state=None, verbose=0):
        self.lam = lam
        self.tol = tol
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.sampling = sampling
        self.projection = projection
        self.averaging = averaging
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

    def _initial_point(self, coef_init, intercept_init, d_aug):
        if coef_init is None and intercept_init is None:
            return None, 0.0
        w0 = np.zeros(d_aug, dtype=np.float64)
        b0 = 0.0
        if coef_init is not None:
            c = np.asarray(coef_init, dtype=np.float64).ravel()
            if c.size != self.n_features_in_:
                raise ValueError(
                    f"coef_init has {c.size} values but X has {self.n_features_in_} features")
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
        if self.projection:
            norm = float(np.linalg.norm(w0))
            radius = 1.0 / math.sqrt(self.lam)
            if norm > radius * (1 + 1e-12):
                raise ValueError(
                    f"the initial w has norm {norm:.6g} > 1/sqrt(lam) = {radius:.6g}; Pegasos "
                    "starts inside that ball: scale coef_init down or set projection=False")
        return w0, b0

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, coef_init=None, intercept_init=None):
        """Fit the SVM by mini-batch Pegasos.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; sparse input is converted to CSR once.
        y : array-like of shape (n_samples,)
            Two class labels.
        coef_init : array-like of shape (n_features,), optional
            Initial ``w_1``; with projection it must satisfy ``||w_1|| <= 1/sqrt(lam)``.
        intercept_init : float, optional
            Initial bias.

        Returns
        -------
        self : PegasosSVC
        """
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
        Xc, y_pm = self._prepare(X, y)
        n = Xc.shape[0]
        backend, k = self._resolve(n)
        if self.bias == "optimal" and self.batch_size == "auto":   # the batch needs rows
            k = max(k, min(n, MIN_OPTIMAL_BIAS_BATCH))
        averaging = self.averaging
        if averaging == "auto":
            averaging = "doubling" if self.max_iter is None else "tail"
        epochs = MAX_EPOCHS_DOUBLING if averaging == "doubling" else 10
        max_iter = self.max_iter if self.max_iter is not None else math.ceil(epochs * n / k)
        w0, b0 = self._initial_point(coef_init, intercept_init, Xc.shape[1])
        be = make_backend(backend, Xc, y_pm)
        progress, close = _progress_bar(self.verbose, max_iter)
        try:
            res = pegasos(be, lam=float(self.lam), k=k, max_iter=max_iter, sampling=self.sampling,
                          seed=self._seed(), projection=bool(self.projection),
                          averaging=averaging, schedule=self.schedule, eta0=self.eta0,
                          norma_p=float(self.norma_p), bias=self.bias, w0=w0, b0=b0,
                          eval_every=self.eval_every, max_time=self.max_time,
                          target_objective=self.target_objective, callback=self.callback,
                          progress=progress, tol=self.tol)
        finally:
            close()
        if not np.all(np.isfinite(res.w)) or not math.isfinite(res.b):
            if self.schedule == "constant":
                advice = "lower eta0, or use schedule='pegasos'"
            else:
                advice = (f"the steps 1/(lam t) are too large for dtype={self.dtype!s} with "
                          f"lam={self.lam!r}: use a larger lam or dtype='float64'")
            raise FloatingPointError(f"Pegasos diverged (non-finite weights); {advice}")
        warn_short_tail(averaging, res.n_iter, max_iter, res.stop_reason)
        self._set_solution(res.w, res.b)
        self.n_iter_ = res.n_iter
        self.history_ = res.history
        self.stop_reason_ = res.stop_reason
        self.backend_ = be.name
        self.batch_size_ = k
        self.averaging_ = averaging
        if averaging == "doubling" and res.stop_reason == "max_iter" and self.tol is not None:
            warnings.warn(
                f"Pegasos stopped after max_iter={max_iter} iterations ({max_iter * k / n:.3g} "
                f"epochs) with the objective still falling by more than tol={self.tol} per "
                "doubling; increase max_iter, scale the data (gpusvm.datasets.normalize_rows), "
                "or use SDCASVC, which certifies its result", ConvergenceWarning, stacklevel=2)
        return self


__all__ = ["PegasosSVC"]
