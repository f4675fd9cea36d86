"""The checks every estimator makes of its input, and input that already lives on a GPU.

Checks: :func:`as_dtype`, :func:`check_sparse_structure` (also of restored models), the
32-bit index bound :data:`INT32_MAX` and the row-norm warning (:class:`DataScaleWarning`).
Device input (CuPy arrays, ``cupyx.scipy.sparse`` matrices), detected by protocol without
importing CuPy: :func:`prepare`, :func:`decision_function` and :func:`predict` work on the
device with ``backend="cupy"`` and copy ``X`` to the host once otherwise.  ``coef_`` and
``intercept_`` stay NumPy arrays whatever the input.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import scipy.sparse as sp

from .backends import resolve_backend_name

__all__ = ["INT32_MAX", "DataScaleWarning", "as_dtype", "check_sparse_structure",
           "decision_function", "is_device", "is_device_sparse", "predict", "prepare", "to_host",
           "warn_if_rows_unscaled"]


def dense_to_csr(X, dtype) -> sp.csr_matrix:
    """``scipy.sparse.csr_matrix(X, dtype=dtype)`` of a 2-D array with a column, by one mask of
    its nonzeros: SciPy's arrays without its detour through COO (ijcnn1: 6-7 against 19 ms),
    32-bit indices while they fit.  NaN is nonzero, -0.0 zero, as in SciPy."""
    X = np.ascontiguousarray(X)
    n, d = X.shape
    mask = X != 0
    counts = np.count_nonzero(mask, axis=1)
    nnz = int(counts.sum())
    index = np.int32 if nnz <= INT32_MAX and n * d <= INT32_MAX else np.int64
    indptr = np.zeros(n + 1, dtype=index)
    np.cumsum(counts, out=indptr[1:])
    indices = np.broadcast_to(np.arange(d, dtype=index), (n, d))[mask]
    out = sp.csr_matrix((X[mask].astype(dtype, copy=False), indices, indptr), shape=(n, d))
    out.has_canonical_format = True     # sorted, no duplicates: by construction, not checked
    return out


def append_constant_column(Xc, value) -> sp.csr_matrix:
    """``scipy.sparse.hstack([Xc, full((n, 1), value)], format="csr")`` by two masked copies
    (news20: 14 against 31 ms); int64 indices where the nonzeros or columns pass int32's."""
    n, d = Xc.shape
    indptr = Xc.indptr.astype(np.int64) + np.arange(n + 1)
    ends = indptr[1:] - 1                                  # the new entries
    keep = np.ones(int(indptr[-1]), dtype=bool)
    keep[ends] = False
    data = np.empty(keep.size, dtype=Xc.dtype)
    data[keep] = Xc.data
    data[ends] = value
    index = np.int32 if keep.size <= INT32_MAX and d + 1 <= INT32_MAX else np.int64
    indices = np.empty(keep.size, dtype=index)
    indices[keep] = Xc.indices
    indices[ends] = d
    out = sp.csr_matrix((data, indices, indptr.astype(index)), shape=(n, d + 1))
    out.has_canonical_format = Xc.has_canonical_format      # the new entries come last
    return out


def col_dots(xp, A, B):
    """``<A[:, j], B[:, j]>`` for every column ``j`` of two ``(m, M)`` arrays of the array
    module ``xp`` (one column: BLAS's dot, 6x faster than einsum over an ``(m, 1)`` view)."""
    if A.shape[1] == 1:
        return (A[:, 0] @ B[:, 0]).reshape(1)
    return xp.einsum("ij,ij->j", A, B)


def as_dtype(dtype) -> np.dtype:
    """``dtype`` as a NumPy dtype, refused unless float32 or float64."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return dt


#: the bound of the 32-bit column indices and offsets the kernels and compiled loops use
INT32_MAX = int(np.iinfo(np.int32).max)


def check_sparse_structure(X) -> None:
    """Raise a ValueError for a CSR, CSC or COO ``X`` (anything else passes) with an index out
    of range or an ``indptr`` that is not non-decreasing from 0 to nnz: scipy checks only the
    lengths when a matrix is built, and compiled loops (scipy's, numba's, the CUDA kernels)
    would read and write out of bounds. O(nnz), vectorised."""
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


#: rows longer than this (Euclidean norm) are "far above 1": the estimators warn
ROW_NORM_WARNING = 100.0
#: a fit that stops without converging, on rows longer than this, gets the same hint: the
#: length of the rows is then the likely cause (raw digits, norm 77, SDCA's gap 0.1 after 100
#: epochs; the well-scaled sets stay below: a9a 3.7, w8a 10.7, the text sets 1)
ROW_NORM_HINT = 20.0


def warn_if_rows_unscaled(max_row_norm: float, *, unconverged: bool = False) -> None:
    """Warn when the largest row norm (bias column excluded) is far above 1, naming the fixes.

    Pegasos' step sizes and the mini-batch theory assume ``max_i ||x_i|| <= 1`` (Pegasos
    Theorem 1's ``R``; Takáč et al. Sec. 2): rows of norm in the thousands leave Pegasos at
    the majority class, and SDCA's progress per epoch falls with ``R^2 / (lam n)``.  Before a
    fit the warning needs norms above :data:`ROW_NORM_WARNING`; after a fit that stopped
    without converging (``unconverged=True``), above :data:`ROW_NORM_HINT` (and at most
    :data:`ROW_NORM_WARNING`, which warned before the fit).
    """
    fix = ("scale the rows with gpusvm.datasets.normalize_rows(X) or the features with "
           "sklearn.preprocessing.StandardScaler (or MaxAbsScaler for sparse X) in a Pipeline")
    if unconverged and ROW_NORM_HINT < max_row_norm <= ROW_NORM_WARNING:
        warnings.warn(
            f"the fit did not converge, and the largest row norm of X is {max_row_norm:.3g}, far "
            "above 1, which the step sizes and the mini-batch theory assume (max ||x_i|| <= 1): "
            f"the row norms are the likely cause; {fix}", DataScaleWarning, stacklevel=4)
    elif not unconverged and max_row_norm > ROW_NORM_WARNING:
        warnings.warn(
            f"the largest row norm of X is {max_row_norm:.3g}, far above 1, which the step sizes "
            "and the mini-batch theory assume (max ||x_i|| <= 1): the fit may stay near the "
            f"majority class or need many more epochs; {fix}", DataScaleWarning, stacklevel=4)


class DataScaleWarning(UserWarning):
    """The training rows are far longer than the unit norm the solvers assume."""


def is_device_sparse(X) -> bool:
    """True for a ``cupyx.scipy.sparse`` matrix."""
    return type(X).__module__.startswith("cupyx.scipy.sparse") and hasattr(X, "get")


def is_device(X) -> bool:
    """True for a CuPy array or a ``cupyx.scipy.sparse`` matrix (data in GPU memory)."""
    return (hasattr(X, "__cuda_array_interface__") and hasattr(X, "get")) or is_device_sparse(X)


def to_host(X):
    """A device array or sparse matrix as a NumPy array or SciPy sparse matrix (one copy);
    host input as it is."""
    if not is_device(X):
        return X
    out = X.get()
    return out if sp.issparse(out) else np.asarray(out)


def _backend_name(estimator) -> str:
    return resolve_backend_name(estimator.backend)


def _on_device(estimator):
    """``cupy.cuda.Device(estimator.device)``, or a no-op without a device id (then CuPy is
    not imported)."""
    device = getattr(estimator, "device", None)
    if device is None:
        return contextlib.nullcontext()
    import cupy  # noqa: PLC0415  (only reached with device input)
    return cupy.cuda.Device(device)


def _to_current_device(X):
    """``X`` on the current CuPy device: as it is when it lives there, else copied across once
    (``cupy.copy`` copies between devices)."""
    import cupy  # noqa: PLC0415  (only reached with device input)
    here = cupy.cuda.runtime.getDevice()
    if is_device_sparse(X):
        X = X.tocsr()
        if X.data.device.id == here:
            return X
        import cupyx.scipy.sparse as csp  # noqa: PLC0415
        return csp.csr_matrix((cupy.copy(X.data), cupy.copy(X.indices), cupy.copy(X.indptr)), shape=X.shape)
    return X if X.device.id == here else cupy.copy(X)


def prepare(estimator, X, y, reset=True):
    """``estimator._prepare(X, y, reset)`` for device input: ``(Xc, y)``, ``Xc`` canonical CSR
    (int32 indices, bias column appended for ``bias="augmented"``), kept on the device for
    the cupy backend, and ``y`` on the host as given."""
    if not is_device(X) or _backend_name(estimator) != "cupy":
        return estimator._prepare(to_host(X), to_host(y), reset=reset)
    with _on_device(estimator):
        return _prepare_on_device(estimator, X, to_host(y), reset)


#: copies of the prepared CSR that :func:`_prepare_on_device` holds at its peak (the typed
#: copy, the squares for the row norms, the copy with the bias column)
PREPARE_COPIES = 3


def check_device_room(n: int, d: int, nnz: int, itemsize: int, free: int | None,
                      augmented: bool, name: str = "cupy") -> None:
    """Refuse, before any device copy, input whose preparation and fit would not fit in the
    ``free`` device bytes (``None``: no check): the CSR of device input is resident, its
    prepared copies (:data:`PREPARE_COPIES`) and the backend's vectors and buffers
    (:func:`gpusvm.backends.device.estimate_device_bytes`) are not.

    Raises
    ------
    MemoryError
        The one-line refusal of :func:`gpusvm.backends.device.backend.memory_refusal`.
    """
    from .backends.device.backend import estimate_device_bytes, memory_refusal  # noqa: PLC0415
    if free is None:
        return
    n_aug, d_aug = nnz + n * augmented, d + augmented
    need = estimate_device_bytes(n, d_aug, n_aug, itemsize, csr_resident=True)
    copy = n_aug * (itemsize + 4) + (n + 1) * 8
    need = {**need, "csr": PREPARE_COPIES * copy, "total": need["total"] + PREPARE_COPIES * copy}
    if need["total"] > free:
        raise MemoryError(memory_refusal(name, need, free, itemsize))


def _prepare_on_device(estimator, X, y, reset):
    """The checks and conversions of ``_prepare`` done with CuPy on the device."""
    import cupy  # noqa: PLC0415  (only reached with device input)
    import cupyx.scipy.sparse as csp  # noqa: PLC0415

    dtype = as_dtype(estimator.dtype)
    if getattr(X, "ndim", 2) != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead")
    X = _to_current_device(X)
    y = np.asarray(y).ravel()
    n, d = int(X.shape[0]), int(X.shape[1])
    nnz = int(X.nnz) if is_device_sparse(X) else n * d          # dense input: at most n d
    pool = cupy.get_default_memory_pool()
    check_device_room(n, d, nnz, dtype.itemsize,
                      int(cupy.cuda.runtime.memGetInfo()[0]) + int(pool.free_bytes()),
                      estimator.bias == "augmented")
    if y.shape[0] != n:
        raise ValueError(f"Found input variables with inconsistent numbers of samples: [{n}, {y.shape[0]}]")
    Xc = X.tocsr() if is_device_sparse(X) else csp.csr_matrix(cupy.asarray(X))
    Xc = Xc.astype(dtype)
    if not bool(cupy.isfinite(Xc.data).all()):           # one scalar to the host
        raise ValueError("Input X contains NaN or infinity.")
    if Xc.nnz + n * (estimator.bias == "augmented") > INT32_MAX or d + 1 > INT32_MAX:
        raise ValueError(f"X has {d} columns and {Xc.nnz} nonzeros; gpusvm indexes them with "
                         f"32-bit integers, so both must stay below {INT32_MAX}")
    Xc = csp.csr_matrix((Xc.data.copy(), Xc.indices.astype(np.int32), Xc.indptr.astype(np.int32)),
                        shape=(n, d))
    Xc.sum_duplicates()
    Xc.sort_indices()
    max_sq = float((Xc.multiply(Xc)).sum(axis=1).max()) if Xc.nnz else 0.0
    if not math.isfinite(max_sq):
        raise ValueError("X has values so large that the squared norm of a row overflows float64")
    warn_if_rows_unscaled(math.sqrt(max_sq))
    if estimator.bias == "augmented":
        col = csp.csr_matrix(cupy.full((n, 1), estimator.intercept_scaling, dtype=dtype))
        Xc = csp.hstack([Xc, col], format="csr").astype(dtype)
    if reset:
        estimator.n_features_in_ = d
    elif d != estimator.n_features_in_:
        raise ValueError(f"X has {d} features, but {type(estimator).__name__} is expecting "
                         f"{estimator.n_features_in_} features as input")
    estimator._max_sq = max_sq
    return Xc, y


def decision_function(estimator, X):
    """Scores of a fitted estimator for device input: with ``backend="cupy"`` a float64 CuPy
    array computed on the device (one-vs-one and ordinal scores on the host), else NumPy
    scores of ``X`` copied to the host."""
    if _backend_name(estimator) != "cupy":
        return type(estimator).decision_function(estimator, to_host(X))
    with _on_device(estimator):
        return _decision_function_on_device(estimator, X)


def _decision_function_on_device(estimator, X):
    """The CuPy products of :func:`decision_function` (on the current device)."""
    import cupy  # noqa: PLC0415

    if int(X.shape[1]) != estimator.n_features_in_:
        raise ValueError(f"X has {X.shape[1]} features, but {type(estimator).__name__} is "
                         f"expecting {estimator.n_features_in_} features as input")
    X = _to_current_device(X)
    coef = cupy.asarray(estimator._coef_array()).astype(X.dtype)
    scores = (X @ coef.T).reshape(int(X.shape[0]), -1).astype(cupy.float64) \
        + cupy.asarray(estimator.intercept_)
    if len(estimator.classes_) == 2:
        return scores[:, 0]
    if getattr(estimator, "multi_class", "ovr") == "ovr":
        return scores
    return type(estimator).decision_function(estimator, to_host(X))


def predict(estimator, X):
    """Class labels for device input: a CuPy array with ``backend="cupy"`` and numeric classes,
    else NumPy labels."""
    if _backend_name(estimator) != "cupy":
        return type(estimator).predict(estimator, to_host(X))
    import cupy  # noqa: PLC0415

    with _on_device(estimator):
        scores = decision_function(estimator, X)
        index = (scores > 0).astype(np.int64) if scores.ndim == 1 else scores.argmax(axis=1)
        if estimator.classes_.dtype.kind in "biuf":
            return cupy.asarray(estimator.classes_)[cupy.asarray(index)]
        return estimator.classes_[to_host(index)]
