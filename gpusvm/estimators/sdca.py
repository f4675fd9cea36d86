"""SDCASVC: the scikit-learn estimator of mini-batch SDCA (validation and bookkeeping only)."""

from __future__ import annotations

import math
import warnings
from numbers import Real

from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from ..backends import make_backend
from ..solvers.sdca import VARIANTS, default_max_iter, sdca
from ._base import _gap_progress_bar, _LinearSVCBase

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
    ``P(w(alpha)) - D(alpha)``, an upper bound on ``P(w) - P(w*)``, is ``<= tol``.

    Parameters
    ----------
    lam : float, default=1e-4
        Regularisation parameter ``lambda > 0`` (LinearSVC's ``C = 1/(lam n)``).
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

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features)
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,)
    alpha_ : ndarray of shape (n_samples,)
        Dual variables in ``[0, 1]``.
    n_iter_ : int
        Iterations performed.
    history_ : list of (int, float, float, float, float)
        ``(iteration, P, D, gap, elapsed seconds)`` at every evaluation.
    primal_objective_, dual_objective_, duality_gap_ : float
        At the returned solution (``duality_gap_`` is the certificate).
    sigma2_ : float or None
        ``sigma^2`` of the row-normalised training matrix (None when not needed).
    beta_b_ : float
        ``beta_b`` of eq. (11) for this batch size (1 for naive or ``b = 1``).
    beta_ : float
        Final step parameter ``beta``.
    n_rejected_ : int
        Steps rejected by the aggressive variant.
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

    _parameter_constraints: dict = {
        **_LinearSVCBase._parameter_constraints,
        "variant": [StrOptions(set(VARIANTS) | {"auto"})],
        "theta": [Interval(Real, 0, 1, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "shrinking": ["boolean"],
        "sigma2": [Interval(Real, 0, 1, closed="right"), None],
    }

    def __init__(self, *, lam=1e-4, batch_size="auto", variant="auto", theta=0.5, tol=1e-3,
                 sigma2=None, max_iter=None, sampling="epoch", bias="augmented",
                 intercept_scaling=1.0, eval_every=None, max_time=None, callback=None,
                 backend="auto", dtype="float32", random_state=None, verbose=0, shrinking=True):
        self.shrinking = shrinking
        self.lam = lam
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
    def fit(self, X, y):
        """Fit the SVM by mini-batch SDCA until the duality gap is ``<= tol``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; sparse input is converted to CSR once.
        y : array-like of shape (n_samples,)
            Two class labels.

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
        Xc, y_pm = self._prepare(X, y)
        n = Xc.shape[0]
        backend, b = self._resolve(n)
        variant = self.variant
        if variant == "auto":                 # at b = 1 every variant takes the same step
            variant = "safe" if b == 1 else "aggressive"
        max_iter = self.max_iter if self.max_iter is not None else default_max_iter(n, b)
        be = make_backend(backend, Xc, y_pm)
        progress, close = _gap_progress_bar(self.verbose, max_iter)
        try:
            res = sdca(be, lam=float(self.lam), b=b, max_iter=max_iter, variant=variant,
                       theta=float(self.theta), sigma2=self.sigma2, tol=float(self.tol),
                       sampling=self.sampling, seed=self._seed(), eval_every=self.eval_every,
                       max_time=self.max_time, callback=self.callback, progress=progress,
                       shrinking=bool(self.shrinking) and backend in ("numpy", "numba"))
        finally:
            close()
        self._set_solution(res.w, 0.0)
        ex = res.extra
        self.alpha_ = ex["alpha"]
        self.n_iter_ = res.n_iter
        self.history_ = res.history
        self.stop_reason_ = res.stop_reason
        self.primal_objective_ = ex["primal"]
        self.dual_objective_ = ex["dual"]
        self.duality_gap_ = ex["gap"]
        self.sigma2_ = ex["sigma2"]
        self.beta_b_ = ex["beta_b"]
        self.beta_ = ex["beta"]
        self.n_rejected_ = ex["n_rejected"]
        self.backend_ = be.name
        self.batch_size_ = b
        self.variant_ = variant
        message = self._uncertified_message(res, max_iter, variant, b)
        if message is not None:
            warnings.warn(message, ConvergenceWarning, stacklevel=2)
        return self

    def _uncertified_message(self, res, max_iter, variant, b):
        """The ConvergenceWarning of a run that ended with a gap above ``tol``, or None."""
        gap = res.extra["gap"]
        if res.stop_reason == "tol" or gap <= self.tol:
            return None
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
        elif res.stop_reason == "max_iter":
            advice = ("increase max_iter, or use the aggressive variant or a smaller batch_size"
                      + (f"; {given}" if given else ""))
        elif res.stop_reason == "max_time":
            advice = f"the time budget max_time={self.max_time!r} ran out; give it more time"
        else:
            advice = "the callback stopped it; let the run continue to certify the solution"
        head = (f"SDCA stopped after max_iter={max_iter} iterations" if res.stop_reason ==
                "max_iter" else f"SDCA stopped by {res.stop_reason} after {res.n_iter} iterations")
        return f"{head} with duality gap {gap:.3g} > tol={self.tol}; {advice}"


__all__ = ["SDCASVC"]
