"""What every gpusvm estimator shares: validation, labels, data preparation, prediction and
progress bars (no mathematics)."""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from ..backends import BACKENDS, resolve_backend_name
from ..solvers._sampling import SAMPLING_MODES
from ..solvers.pegasos import BIAS_MODES


def _as_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return dt


_INT32_MAX = int(np.iinfo(np.int32).max)

#: the largest ``max_iter``: iteration counters are 64-bit integers in the compiled loops
MAX_ITER = 2**62

#: the smallest batch for ``bias="optimal"``: the optimal bias of a batch puts a margin at
#: exactly 1, so a batch of one row never moves ``w``, and on a9a batches of 2 and 4 stay at
#: the majority class's accuracy
MIN_OPTIMAL_BIAS_BATCH = 8


def check_sparse_structure(X) -> None:
    """Check the index arrays of a sparse matrix before any compiled code reads them.

    scipy checks only their lengths when a matrix is built, and not at all
    when the arrays are changed afterwards; an index out of range or a
    decreasing ``indptr`` makes compiled loops (scipy's, numba's, the CUDA
    kernels) read and write out of bounds. The check is O(nnz) and vectorised.

    Parameters
    ----------
    X : object
        Anything; only CSR, CSC and COO matrices are checked.

    Raises
    ------
    ValueError
        When an index is out of range or the index pointer is not a
        non-decreasing sequence from 0 to nnz.
    """
    if not sp.issparse(X):
        return
    fmt = X.format
    if fmt == "coo":
        for name, idx, bound in (("row", X.row, X.shape[0]), ("column", X.col, X.shape[1])):
            if idx.size and (idx.min() < 0 or idx.max() >= bound):
                raise ValueError(f"X has {name} indices outside [0, {bound}) (a corrupted COO "
                                 "matrix); rebuild it with scipy.sparse.coo_matrix")
        return
    if fmt not in ("csr", "csc"):
        return
    major, minor = X.shape if fmt == "csr" else X.shape[::-1]
    what = "column" if fmt == "csr" else "row"
    indptr, indices = np.asarray(X.indptr), np.asarray(X.indices)
    if indptr.ndim != 1 or indptr.size != major + 1 or indptr[0] != 0 \
            or indptr[-1] > indices.size or indptr[-1] > np.asarray(X.data).size \
            or np.any(np.diff(indptr) < 0):
        raise ValueError(f"X is a corrupted {fmt.upper()} matrix: its indptr is not a "
                         f"non-decreasing sequence of {major + 1} offsets from 0 to at most its "
                         f"{indices.size} indices; rebuild it with scipy.sparse.{fmt}_matrix")
    used = indices[:indptr[-1]]
    if used.size and (used.min() < 0 or used.max() >= minor):
        raise ValueError(f"X is a corrupted {fmt.upper()} matrix: it has {what} indices outside "
                         f"[0, {minor}); rebuild it with scipy.sparse.{fmt}_matrix")


def _max_squared_row_norm(X) -> float:
    """Largest ``||x_i||^2`` of a CSR matrix, in float64 (inf when it overflows)."""
    if X.nnz == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        data = X.data.astype(np.float64)
        sq = np.add.reduceat(data * data, X.indptr[:-1][np.diff(X.indptr) > 0])
    return float(np.max(sq))


def binary_labels(y, estimator_name: str):
    """Map two class labels to {-1, +1}.

    Parameters
    ----------
    y : array-like of shape (n,)
    estimator_name : str
        Used in the error messages.

    Returns
    -------
    classes : ndarray of shape (2,)
        Sorted class labels; ``classes[1]`` is the positive class.
    y_pm : ndarray of float64
        Labels in {-1, +1}.
    """
    y = np.asarray(y)
    target = type_of_target(y, input_name="y")
    if target not in ("binary", "multiclass"):
        raise ValueError(f"Unknown label type: {estimator_name} needs class labels; got targets "
                         f"of type {target!r}")
    classes, inv = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise ValueError(
            f"{estimator_name} needs samples of 2 classes, but the data contains only one "
            f"class: {classes.tolist()[0]!r}")
    if classes.size > 2:
        raise ValueError(
            f"Only binary classification is supported. {estimator_name} got y with "
            f"{classes.size} classes: wrap the estimator in sklearn.multiclass.OneVsRestClassifier")
    return classes, np.where(inv == 1, 1.0, -1.0)


#: Pegasos' default cap with the doubling tail average: 2^6 epochs
MAX_EPOCHS_DOUBLING = 64
#: rows longer than this (Euclidean norm) are "far above 1": the estimators warn
ROW_NORM_WARNING = 100.0
#: batch_size="auto" on a device backend (an iteration costs about as much for 4096 rows as for 1)
DEVICE_AUTO_BATCH = 4096


def warn_if_rows_unscaled(max_row_norm: float) -> None:
    """Warn when the largest row norm is far above 1, naming the fixes.

    The step sizes of Pegasos and the mini-batch theory of both papers assume
    ``max_i ||x_i|| <= 1`` (Pegasos Theorem 1's ``R``; Takáč et al. Sec. 2);
    rows of norm in the thousands (raw measurements) leave Pegasos at the
    majority class for any practical number of epochs.

    Parameters
    ----------
    max_row_norm : float
        The largest Euclidean row norm of the training data (bias column excluded).
    """
    if max_row_norm > ROW_NORM_WARNING:
        warnings.warn(
            f"the largest row norm of X is {max_row_norm:.3g}, far above 1, which the step sizes "
            "and the mini-batch theory assume (max ||x_i|| <= 1): the fit may stay near the "
            "majority class or need many more epochs; scale the rows with "
            "gpusvm.datasets.normalize_rows(X) or the features with "
            "sklearn.preprocessing.StandardScaler (or MaxAbsScaler for sparse X) in a Pipeline",
            DataScaleWarning, stacklevel=4)


class DataScaleWarning(UserWarning):
    """The training rows are far longer than the unit norm the solvers assume."""


class _LinearSVCBase(ClassifierMixin, BaseEstimator):
    """Shared validation, data preparation and prediction of the linear estimators."""

    _parameter_constraints: dict = {
        "lam": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "max_iter": [Interval(Integral, 1, MAX_ITER, closed="both"), None],
        "sampling": [StrOptions(set(SAMPLING_MODES))],
        "bias": [StrOptions(set(BIAS_MODES))],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "eval_every": [Interval(Integral, 1, None, closed="left"), None],
        "max_time": [Interval(Real, 0, None, closed="neither"), None],
        "callback": [callable, None],
        "backend": [StrOptions(set(BACKENDS))],
        "dtype": [StrOptions({"float32", "float64"}), type],
        "random_state": ["random_state", np.random.Generator],
        "verbose": ["verbose"],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = False
        return tags

    # ------------------------------------------------------------ helpers
    def _prepare(self, X, y):
        """Validate, convert to CSR once, map labels, append the bias feature.

        The caller's matrix is never modified: a CSR matrix with unsorted or
        duplicate indices is copied before it is put in canonical form.
        """
        dtype = _as_dtype(self.dtype)
        check_sparse_structure(X)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=dtype, order="C",
                             y_numeric=False)
        classes, y_pm = binary_labels(y, type(self).__name__)
        Xc = sp.csr_matrix(X, dtype=dtype) if not sp.issparse(X) else X.tocsr().astype(dtype, copy=False)
        check_sparse_structure(Xc)
        n, d = Xc.shape
        d_aug = d + (self.bias == "augmented")
        nnz_aug = Xc.nnz + n * (self.bias == "augmented")
        if d_aug > _INT32_MAX or nnz_aug > _INT32_MAX:
            bias_column = " (plus the bias column)" if d_aug > d else ""
            raise ValueError(
                f"X has {d} columns and {Xc.nnz} nonzeros{bias_column}; gpusvm indexes them "
                f"with 32-bit integers, so both must stay below {_INT32_MAX}: drop unused "
                "columns (e.g. re-index the features) or split the data")
        if Xc.indices.dtype != np.int32 or Xc.indptr.dtype != np.int32:
            Xc = sp.csr_matrix((Xc.data, Xc.indices.astype(np.int32), Xc.indptr.astype(np.int32)),
                               shape=Xc.shape)
        if not Xc.has_canonical_format:    # order a copy: Xc may share arrays with the caller's X
            Xc = sp.csr_matrix((Xc.data.copy(), Xc.indices.copy(), Xc.indptr.copy()),
                               shape=Xc.shape)
            Xc.sum_duplicates()
            Xc.sort_indices()
        k = self.batch_size
        if k != "auto" and k > n:
            raise ValueError(
                f"batch_size={k} exceeds the number of samples n={n}; choose 1 <= batch_size <= {n}")
        max_sq = _max_squared_row_norm(Xc)
        if math.isfinite(max_sq):
            warn_if_rows_unscaled(math.sqrt(max_sq))
        else:
            raise ValueError(
                "X has values so large that the squared norm of a row overflows float64 (e.g. "
                "1e300); scale the features (sklearn.preprocessing.MaxAbsScaler) or normalise "
                "the rows (gpusvm.datasets.normalize_rows) first")
        step = math.sqrt(max(max_sq, 1.0)) / self.lam
        if not step * step < np.finfo(dtype).max:
            smallest = math.sqrt(max(max_sq, 1.0) / np.finfo(dtype).max)
            raise ValueError(
                f"lam={self.lam!r} is too small for dtype={dtype.name}: a step of size 1/lam on "
                f"rows of norm up to {math.sqrt(max_sq):.3g} overflows; use lam >= "
                f"{smallest:.1e}")
        if self.bias == "augmented":
            col = sp.csr_matrix(np.full((n, 1), self.intercept_scaling, dtype=dtype))
            Xc = sp.hstack([Xc, col], format="csr", dtype=dtype)
            Xc.indices = Xc.indices.astype(np.int32)
            Xc.indptr = Xc.indptr.astype(np.int32)
        self.classes_ = classes
        return Xc, y_pm.astype(dtype)

    def _resolve(self, n: int):
        """The backend name and the batch size the fit runs with (``"auto"`` resolved).

        ``batch_size="auto"``: 1 on a CPU backend, where every row costs the same
        whatever the batch and the fewest epochs win (BENCHMARKS.md), and
        ``min(n, DEVICE_AUTO_BATCH)`` on a device, where an iteration costs about as
        much for thousands of rows as for one.
        """
        backend = resolve_backend_name(self.backend)
        k = self.batch_size
        if k == "auto":
            k = 1 if backend in ("numpy", "numba") else min(n, DEVICE_AUTO_BATCH)
        return backend, int(k)

    def _seed(self):
        rs = self.random_state
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(0, 2**31 - 1))
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(0, 2**31 - 1))
        return rs

    def _set_solution(self, w, b):
        if self.bias == "augmented":
            self.coef_ = w[:-1].reshape(1, -1)
            self.intercept_ = np.array([w[-1] * self.intercept_scaling])
        else:
            self.coef_ = w.reshape(1, -1)
            self.intercept_ = np.array([b])

    # ------------------------------------------------------------ prediction
    def decision_function(self, X):
        """Signed distance ``<w, x> + b``; positive means ``classes_[1]``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        check_sparse_structure(X)
        X = validate_data(self, X, accept_sparse="csr", reset=False,
                          dtype=[np.float64, np.float32])
        return np.asarray(X @ self.coef_[0].astype(X.dtype, copy=False)).ravel().astype(np.float64) \
            + self.intercept_[0]

    def predict(self, X):
        """Predict class labels.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


def warn_short_tail(averaging, n_iter, max_iter, stop_reason) -> None:
    """Warn when ``averaging="tail"`` stopped before ``T/2``: the last iterate is returned.

    Parameters
    ----------
    averaging : str
    n_iter : int
        Iterations performed.
    max_iter : int
        ``T``; the tail average starts after iteration ``T // 2``.
    stop_reason : str
    """
    if averaging == "tail" and n_iter <= max_iter // 2:
        warnings.warn(
            f"averaging='tail' averages the iterates after iteration {max_iter // 2} = "
            f"max_iter/2, but the run stopped at iteration {n_iter} ({stop_reason}): the last "
            "iterate is returned, not an average; give the run more time, lower max_iter, or "
            "use averaging='all'", ConvergenceWarning, stacklevel=3)


def _progress_bar(verbose, total):
    """A tqdm bar showing the live objective when ``verbose``; no-op callables otherwise."""
    if not verbose:
        return None, lambda: None
    from tqdm.auto import tqdm
    bar = tqdm(total=total, unit="it", desc="gpusvm")
    state = {"done": 0}

    def update(t, objective):
        bar.update(t - state["done"])
        state["done"] = t
        bar.set_postfix(objective=f"{objective:.6g}")

    def close():
        if 0 < state["done"] < bar.total:     # stopped early (tol): the run is complete
            bar.total = state["done"]
            bar.refresh()
        bar.close()

    return update, close


def _gap_progress_bar(verbose, total):
    """A tqdm bar showing the live duality gap when ``verbose``; no-op callables otherwise."""
    if not verbose:
        return None, lambda: None
    from tqdm.auto import tqdm  # noqa: PLC0415
    bar = tqdm(total=total, unit="it", desc="gpusvm sdca")
    state = {"done": 0}

    def update(t, primal, gap):
        bar.update(t - state["done"])
        state["done"] = t
        bar.set_postfix(primal=f"{primal:.6g}", gap=f"{gap:.3g}")

    return update, bar.close
