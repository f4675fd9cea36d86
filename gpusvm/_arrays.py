"""Inputs that already live on a GPU: CuPy arrays and ``cupyx.scipy.sparse`` matrices.

The estimators call three hooks:

* :func:`prepare_fit` in ``fit``, in place of ``self._prepare(X, y)``: with
  ``backend="cupy"`` a device ``X`` is validated and put in canonical CSR form on
  the device (no host copy of ``X``; the labels, ``n`` values, are read on the
  host to find the classes) and handed to the device backend as it is; with any
  other backend a device ``X`` is copied to the host once and takes the usual path;
* :func:`decision_function` and :func:`predict`, which the estimators' methods
  call first for device input: the products run on the device and the result is a
  CuPy array (``predict``: the class labels, as a CuPy array when they are numbers).

``coef_`` and ``intercept_`` stay NumPy arrays whatever the input: a fitted
model is small, is pickled, and is used on hosts without a GPU; the device
products above copy ``coef_`` to the device once per call (``d`` values).

Detection is by protocol, without importing CuPy: a dense device array has
``__cuda_array_interface__`` and ``get()`` (CuPy's ndarray); a device sparse
matrix is an object of a ``cupyx.scipy.sparse`` class with ``get()``.

The CuPy work of these hooks runs on the estimator's ``device`` (the GPU the fit runs
on), not on whichever device is current, so that the data are validated, converted and
multiplied where the device backend will read them; input that lives on another GPU
is copied to that device once (:func:`_to_current_device`).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import scipy.sparse as sp

__all__ = ["decision_function", "is_device", "is_device_sparse", "predict", "prepare_fit",
           "to_host"]


def is_device_sparse(X) -> bool:
    """True for a ``cupyx.scipy.sparse`` matrix."""
    return type(X).__module__.startswith("cupyx.scipy.sparse") and hasattr(X, "get")


def is_device(X) -> bool:
    """True for a CuPy array or a ``cupyx.scipy.sparse`` matrix (data in GPU memory)."""
    return (hasattr(X, "__cuda_array_interface__") and hasattr(X, "get")) or is_device_sparse(X)


def to_host(X):
    """A device array or sparse matrix as a NumPy array or SciPy sparse matrix (one copy).

    Host input is returned as it is.
    """
    if not is_device(X):
        return X
    out = X.get()
    return out if sp.issparse(out) else np.asarray(out)


def _backend_name(estimator) -> str:
    from .backends import resolve_backend_name  # noqa: PLC0415
    return resolve_backend_name(estimator.backend)


def _on_device(estimator):
    """A context in which CuPy works on ``estimator.device``.

    ``cupy.cuda.Device(estimator.device)``, or a no-op for ``device=None`` (the current
    device) and for estimators without a ``device`` parameter; CuPy is imported only
    when a device id is given.
    """
    device = getattr(estimator, "device", None)
    if device is None:
        return contextlib.nullcontext()
    import cupy  # noqa: PLC0415  (only reached with device input)
    return cupy.cuda.Device(device)


def _to_current_device(X):
    """``X`` on the current CuPy device: as it is when it lives there, else a copy there.

    Data on another GPU than the estimator's ``device`` are copied across once
    (``cupy.copy`` copies between devices), as the fit and the products read them
    on that device.
    """
    import cupy  # noqa: PLC0415  (only reached with device input)
    here = cupy.cuda.runtime.getDevice()
    if is_device_sparse(X):
        X = X.tocsr()
        if X.data.device.id == here:
            return X
        import cupyx.scipy.sparse as csp  # noqa: PLC0415
        return csp.csr_matrix((cupy.copy(X.data), cupy.copy(X.indices), cupy.copy(X.indptr)),
                              shape=X.shape)
    return X if X.device.id == here else cupy.copy(X)


def prepare(estimator, X, y, reset=True):
    """``estimator._prepare(X, y)`` for device input, kept on the device for the cupy backend.

    Parameters
    ----------
    estimator : PegasosSVC or SDCASVC
    X : CuPy array or cupyx.scipy.sparse matrix (or host input with device labels)
    y : array-like (host or device)
    reset : bool
        Whether ``n_features_in_`` is set anew (False: checked against it).

    Returns
    -------
    Xc : scipy.sparse.csr_matrix or cupyx.scipy.sparse.csr_matrix
        Canonical CSR (int32 indices, sorted, no duplicates), with the bias column
        appended for ``bias="augmented"``.
    y : ndarray
        The labels as given, on the host (the estimator maps them to classes).
    """
    if not is_device(X) or _backend_name(estimator) != "cupy":
        return estimator._prepare(to_host(X), to_host(y), reset=reset)
    with _on_device(estimator):
        return _prepare_on_device(estimator, X, to_host(y), reset)


def _prepare_on_device(estimator, X, y, reset):
    """The checks and conversions of ``_prepare`` done with CuPy on the device."""
    import cupy  # noqa: PLC0415  (only reached with device input)
    import cupyx.scipy.sparse as csp  # noqa: PLC0415

    from .estimators._base import _INT32_MAX, _as_dtype, warn_if_rows_unscaled  # noqa: PLC0415

    dtype = _as_dtype(estimator.dtype)
    if getattr(X, "ndim", 2) != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead")
    X = _to_current_device(X)
    y = np.asarray(y).ravel()
    n, d = int(X.shape[0]), int(X.shape[1])
    if y.shape[0] != n:
        raise ValueError("Found input variables with inconsistent numbers of samples: "
                         f"[{n}, {y.shape[0]}]")
    Xc = X.tocsr() if is_device_sparse(X) else csp.csr_matrix(cupy.asarray(X))
    Xc = Xc.astype(dtype)
    if not bool(cupy.isfinite(Xc.data).all()):           # one scalar to the host
        raise ValueError("Input X contains NaN or infinity.")
    if Xc.nnz + n * (estimator.bias == "augmented") > _INT32_MAX or d + 1 > _INT32_MAX:
        raise ValueError(f"X has {d} columns and {Xc.nnz} nonzeros; gpusvm indexes them with "
                         f"32-bit integers, so both must stay below {_INT32_MAX}")
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
    """Scores of a fitted estimator for device input (see ``decision_function``).

    With ``backend="cupy"`` computed on the device (a CuPy array, float64; the
    one-vs-one and ordinal scores are computed on the host from the device's
    outputs); with any other backend ``X`` is copied to the host and the
    estimator's host path answers (NumPy).
    """
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
    coef = cupy.asarray(estimator.coef_).astype(X.dtype)
    scores = (X @ coef.T).reshape(int(X.shape[0]), -1).astype(cupy.float64) \
        + cupy.asarray(estimator.intercept_)
    if len(estimator.classes_) == 2:
        return scores[:, 0]
    if getattr(estimator, "multi_class", "ovr") == "ovr":
        return scores
    return type(estimator).decision_function(estimator, to_host(X))


def predict(estimator, X):
    """Class labels of a fitted estimator for device input.

    With ``backend="cupy"``: a CuPy array (numeric classes; other classes come back as a
    NumPy array); with any other backend ``X`` is copied to the host (NumPy labels).
    """
    if _backend_name(estimator) != "cupy":
        return type(estimator).predict(estimator, to_host(X))
    import cupy  # noqa: PLC0415

    with _on_device(estimator):
        scores = decision_function(estimator, X)
        index = (scores > 0).astype(np.int64) if scores.ndim == 1 else scores.argmax(axis=1)
        if estimator.classes_.dtype.kind in "biuf":
            return cupy.asarray(estimator.classes_)[cupy.asarray(index)]
        return estimator.classes_[to_host(index)]
