"""scikit-learn estimator of kernelized Pegasos: validation and bookkeeping only."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..solvers.kernel_pegasos import (KERNEL_BIAS_MODES, KERNELS, NONFINITE_KERNEL, kernel_blocks,
                                     kernel_pegasos, make_kernel, resolve_gamma)
from ..solvers.pegasos import AVERAGING
from .._arrays import check_sparse_structure
from ._base import (_LinearSVCBase, _progress_bar, binary_labels, check_batch_size,
                    seed_of, warn_short_tail)


class KernelPegasosSVC(ClassifierMixin, BaseEstimator):
    r"""Kernel SVM trained by mini-batch Pegasos in its Mercer-kernel form.

    Minimises the primal SVM objective in the feature space of the kernel
    (Shalev-Shwartz, Singer & Srebro 2007, eq. 1 and Sec. 4)

    .. math:: P(w) = \frac{\lambda}{2}\|w\|^2
              + \frac{1}{n}\sum_i \max(0, 1 - y_i (\langle w, \phi(x_i)\rangle + b)),
              \qquad K(x, x') = \langle \phi(x), \phi(x')\rangle,

    with ``b = 0`` unless ``bias="unregularized"``.  From ``w_1 = 0`` every iterate is
    ``w_{t+1} = (1/(lam t k)) sum_j alpha_j y_j phi(x_j)``, ``alpha_j`` counting the
    iterations in which ``j`` violated the margin: the solver keeps ``alpha`` and the
    kernel scores of the training rows.

    Parameters
    ----------
    lam : float, default=1e-4
        Regularisation parameter ``lambda > 0`` (SVC's ``C = 1/(lam n)``).
    batch_size : int, default=1
        Mini-batch size ``k``, from 1 to ``n``.
    max_iter : int or None, default=None
        Number of iterations ``T``; None means ten epochs, ``ceil(10 n / k)``.
    sampling : {"without_replacement", "with_replacement", "epoch"}, default="without_replacement"
        As in :class:`gpusvm.PegasosSVC` (same seed, same batches).
    kernel : {"rbf", "poly", "linear", "sigmoid", "cosine"} or callable, default="rbf"
        As in :class:`sklearn.svm.SVC`; a callable returns the Gram matrix ``kernel(A, B)``.
    gamma : {"scale", "auto"} or float, default="scale"
        Coefficient of "rbf", "poly", "sigmoid": "scale" is ``1 / (n_features * X.var())``,
        "auto" ``1 / n_features``.
    degree : int, default=3
        Degree of "poly".
    coef0 : float, default=0.0
        Constant term of "poly" and "sigmoid".
    projection : bool, default=False
        Project onto the ball of radius ``1/sqrt(lam)`` (Fig. 1, step 5): O(n) per
        iteration and no kernel evaluation, but ``alpha`` stops being integer.
    averaging : {"none", "all", "tail"}, default="none"
        Return the last iterate, the average of all iterates, or of the last half.
    bias : {"none", "unregularized"}, default="none"
        No intercept (the paper's experiments), or an unregularised ``b`` stepped with
        the batch subgradient (Sec. 4; slower, ``O(1/sqrt(T))``).
    eval_every : int or None, default=None
        Iterations between evaluations of the objective (``history_``, stopping rules,
        callback), O(n) each; None means only at the end.
    max_time : float or None, default=None
        Time budget in seconds, checked after every iteration.
    target_objective, callback, verbose
        As in :class:`gpusvm.PegasosSVC`.
    cache_size : float, default=200
        MiB of training-kernel columns kept between iterations (as in SVC).
    backend : {"auto", "numpy"}, default="auto"
        Kernel Pegasos runs on the NumPy backend only.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the batch stream.

    Attributes
    ----------
    support_, support_vectors_, dual_coef_, intercept_, n_support_
        As in :class:`sklearn.svm.SVC` (the support vectors: ``alpha_j > 0``).
    alpha_ : ndarray of shape (n_samples,)
        The counts ``alpha_j`` of the last iterate (int without projection).
    gamma_ : float
        The numeric ``gamma`` used.
    objective_ : float
        ``P(w)`` of the output on the training data.
    classes_, n_iter_, history_, stop_reason_, n_features_in_
        As in :class:`gpusvm.PegasosSVC` (two classes).

    Notes
    -----
    Step 4 adds the kernel columns of the margin violators (cached) into the scores of
    the ``n`` training rows: memory O(n + cache).  The sigmoid kernel is not positive
    semidefinite (the projection is then approximate).

    References
    ----------
    S. Shalev-Shwartz, Y. Singer, N. Srebro. Pegasos: Primal Estimated
    sub-GrAdient SOlver for SVM. ICML 2007 (Sec. 4, "Using Mercer kernels").
    M. Takáč, A. Bijral, P. Richtárik, N. Srebro. Mini-Batch Primal and Dual
    Methods for SVMs. ICML 2013.

    Examples
    --------
    >>> from sklearn.datasets import make_circles
    >>> from gpusvm import KernelPegasosSVC
    >>> X, y = make_circles(n_samples=200, factor=0.5, noise=0.05, random_state=0)
    >>> clf = KernelPegasosSVC(lam=1e-2, batch_size=16, random_state=0).fit(X, y)
    >>> clf.score(X, y) > 0.9
    True
    """

    _parameter_constraints: dict = {
        **{k: _LinearSVCBase._parameter_constraints[k] for k in (
            "max_iter", "sampling", "eval_every", "max_time", "callback", "backend",
            "random_state", "verbose")},
        "lam": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "kernel": [StrOptions(set(KERNELS)), callable],
        "gamma": [StrOptions({"scale", "auto"}), Interval(Real, 0, None, closed="neither")],
        "degree": [Interval(Integral, 0, None, closed="left")],
        "coef0": [Real],
        "projection": ["boolean"],
        "averaging": [StrOptions(set(AVERAGING))],
        "bias": [StrOptions(set(KERNEL_BIAS_MODES))],
        "target_objective": [Real, None],
        "cache_size": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, *, lam=1e-4, batch_size=1, max_iter=None, sampling="without_replacement",
                 kernel="rbf", gamma="scale", degree=3, coef0=0.0, projection=False,
                 averaging="none", bias="none", eval_every=None, max_time=None,
                 target_objective=None, callback=None, cache_size=200, backend="auto",
                 random_state=None, verbose=0):
        self.lam = lam
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.sampling = sampling
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.projection = projection
        self.averaging = averaging
        self.bias = bias
        self.eval_every = eval_every
        self.max_time = max_time
        self.target_objective = target_objective
        self.callback = callback
        self.cache_size = cache_size
        self.backend = backend
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = False
        return tags

    def __setstate__(self, state):
        """Restore (pickle, skops), checking a fitted state like a model file's."""
        super().__setstate__(state)
        if "support_vectors_" in state:
            from ..model_io import check_restored  # noqa: PLC0415
            check_restored(self)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the kernel SVM by mini-batch Pegasos.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data (float64; sparse input is used as CSR).
        y : array-like of shape (n_samples,)
            Two class labels.

        Returns
        -------
        self : KernelPegasosSVC
        """
        if self.backend not in ("auto", "numpy"):
            raise ValueError(
                f"backend={self.backend!r} is not available for KernelPegasosSVC: kernel Pegasos "
                "runs on the NumPy backend only; use backend='numpy' or 'auto'")
        check_sparse_structure(X)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, order="C")
        check_sparse_structure(X)
        self.classes_, y_pm = binary_labels(y, type(self).__name__)
        n = X.shape[0]
        k = self.batch_size
        check_batch_size(k, n)
        self.gamma_ = resolve_gamma(self.gamma, X)
        max_iter = self.max_iter if self.max_iter is not None else math.ceil(10 * n / k)
        progress, close = _progress_bar(self.verbose, max_iter)
        try:
            res = kernel_pegasos(X, y_pm, lam=float(self.lam), k=k, max_iter=max_iter,
                                 kernel=self.kernel, gamma=self.gamma_, degree=self.degree,
                                 coef0=float(self.coef0), sampling=self.sampling,
                                 seed=seed_of(self.random_state), projection=bool(self.projection),
                                 averaging=self.averaging, bias=self.bias,
                                 eval_every=self.eval_every, max_time=self.max_time,
                                 target_objective=self.target_objective, callback=self.callback,
                                 cache_size=float(self.cache_size), progress=progress)
        finally:
            close()
        if not (np.all(np.isfinite(res.coef)) and math.isfinite(res.b)):
            raise FloatingPointError(
                "kernel Pegasos produced non-finite coefficients; check that the kernel "
                "returns finite values on X (e.g. scale X for 'poly' or a callable kernel)")
        warn_short_tail(self.averaging, res.n_iter, max_iter, res.stop_reason)
        self.support_ = np.flatnonzero(res.coef).astype(np.int32)
        self.support_vectors_ = X[self.support_]
        self.dual_coef_ = (res.coef * y_pm)[self.support_].reshape(1, -1)
        self.intercept_ = np.array([res.b])
        self.n_support_ = np.array([np.sum(y_pm[self.support_] < 0),
                                    np.sum(y_pm[self.support_] > 0)], dtype=np.int32)
        self.alpha_ = res.alpha
        self.n_iter_ = res.n_iter
        self.history_ = res.history
        self.objective_ = res.extra["objective"]
        self.stop_reason_ = res.stop_reason
        return self

    # ------------------------------------------------------------ prediction
    def decision_function(self, X):
        """``sum_j dual_coef_j K(sv_j, x) + intercept_``; positive means ``classes_[1]``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        check_sparse_structure(X)
        X = validate_data(self, X, accept_sparse="csr", reset=False, dtype=np.float64)
        if self.support_.size == 0:
            return np.full(X.shape[0], self.intercept_[0])
        gram = make_kernel(self.kernel, gamma=self.gamma_, degree=self.degree, coef0=self.coef0)
        K = kernel_blocks(gram, X, self.support_vectors_)
        if not np.all(np.isfinite(K)):
            raise ValueError(NONFINITE_KERNEL)
        return K @ self.dual_coef_[0] + self.intercept_[0]

    def predict(self, X):
        """Predict class labels.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]


__all__ = ["KernelPegasosSVC"]
