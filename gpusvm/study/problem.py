"""The data of a study: validated CSR matrix, labels in {-1, +1}, fingerprint, row norms.

Every study works on float64 data (so runs of the reference backend are bitwise repeatable for
a seed).  The theory of Takáč et al. (2013) assumes ``max_i ||x_i|| <= 1``, so rows are scaled
to unit L2 norm unless the caller asks otherwise; whether they were is part of the fingerprint
and of every output.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

__all__ = ["Problem", "prepare_problem", "load_problem", "fingerprint"]


@dataclass
class Problem:
    """Training data of a study, ready for a backend.

    Attributes
    ----------
    X : scipy.sparse.csr_matrix of float64, shape (n, d)
        Sorted, duplicate-free CSR (rows scaled to unit norm when ``normalized``).
    y : ndarray of float64, shape (n,)
        Labels in {-1, +1}.
    name, source : str, str or None
        Short name used in titles and tables; path of the file the data came from, if any.
    normalized : bool
        Whether the rows were scaled to unit L2 norm.
    max_row_norm : float
        ``max_i ||x_i||`` of ``X`` as used.
    fingerprint : str
        sha256 of the matrix, the labels and ``normalized`` (see :func:`fingerprint`).
    classes : list
        The two original labels; ``classes[1]`` maps to +1.
    """

    X: sp.csr_matrix
    y: np.ndarray
    name: str
    source: str | None
    normalized: bool
    max_row_norm: float
    fingerprint: str
    classes: list = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of examples."""
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        """Number of features."""
        return int(self.X.shape[1])

    @property
    def nnz(self) -> int:
        """Number of stored nonzeros."""
        return int(self.X.nnz)

    def describe(self) -> dict:
        """JSON-ready description (no arrays)."""
        return {"name": self.name, "source": self.source, "n": self.n, "d": self.d,
                "nnz": self.nnz, "normalized": self.normalized,
                "max_row_norm": self.max_row_norm, "fingerprint": self.fingerprint,
                "classes": [c.item() if isinstance(c, np.generic) else c for c in self.classes]}


def fingerprint(X: sp.csr_matrix, y: np.ndarray, normalized: bool) -> str:
    """sha256 (64 hex digits) of canonical CSR data, its labels and the ``normalized`` flag."""
    h = hashlib.sha256()
    h.update(f"csr:{X.shape[0]}x{X.shape[1]}:nnz={X.nnz}:normalized={bool(normalized)}".encode())
    for arr, dtype in ((X.indptr, np.int64), (X.indices, np.int64), (X.data, np.float64),
                       (y, np.float64)):
        h.update(np.ascontiguousarray(arr, dtype=dtype).tobytes())
    return h.hexdigest()


def prepare_problem(X, y, *, normalize: bool = True, name: str | None = None,
                    source: str | None = None) -> Problem:
    """Validate data for a study and put it in the form every backend accepts.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n, d)
        Training data.
    y : array-like of shape (n,)
        Two class labels (any two values; the larger one becomes +1).
    normalize : bool, default=True
        Scale every nonzero row to unit L2 norm (the theory assumes ``max ||x_i|| <= 1``).
    name, source : str, optional
        Name used in outputs (default ``"data"``); path of the file the data came from.

    Returns
    -------
    Problem

    Raises
    ------
    ValueError
        For empty data, mismatched lengths, non-finite values or not exactly two classes.
    """
    from ..datasets import normalize_rows          # noqa: PLC0415  (keeps import light)
    from ..estimators._base import binary_labels   # noqa: PLC0415
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
    else:
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2:
            raise ValueError(f"X must be a 2-d matrix, got an array of shape {arr.shape}")
        X = sp.csr_matrix(arr)
    n, d = X.shape
    if n == 0 or d == 0:
        raise ValueError(f"X must have at least one row and one column, got shape {(n, d)}")
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"y must be a 1-d array of length n={n}, got shape {y.shape}")
    if not np.all(np.isfinite(X.data)):
        raise ValueError("X contains NaN or infinity; clean the data first")
    classes, y_pm = binary_labels(y, "gpusvm study")
    X.sum_duplicates()
    X.sort_indices()
    if normalize:
        X = normalize_rows(X)
    X = sp.csr_matrix(X, dtype=np.float64)
    if X.nnz < np.iinfo(np.int32).max and X.indices.dtype != np.int32:
        X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                          shape=X.shape)
    sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    max_norm = float(np.sqrt(sq.max())) if sq.size else 0.0
    y_pm = np.ascontiguousarray(y_pm, dtype=np.float64)
    return Problem(X=X, y=y_pm, name=name or "data", source=source, normalized=bool(normalize),
                   max_row_norm=max_norm, fingerprint=fingerprint(X, y_pm, normalize),
                   classes=list(classes))


def load_problem(path, *, n_features: int | None = None, normalize: bool = True,
                 name: str | None = None) -> Problem:
    """Read a svmlight/LIBSVM file (plain or compressed) into a :class:`Problem`.

    Parameters
    ----------
    path : str or os.PathLike
        The training file.
    n_features : int, optional
        Number of columns (default: the largest index in the file).
    normalize, name
        As in :func:`prepare_problem`; the name defaults to the file name without
        ``.gz``, ``.bz2``, ``.svm``, ``.txt``.

    Returns
    -------
    Problem
    """
    from ..datasets import load_svmlight           # noqa: PLC0415
    path = os.fspath(path)
    X, y = load_svmlight(path, n_features=n_features, dtype=np.float64)
    return prepare_problem(X, y, normalize=normalize, name=name or dataset_name(path),
                           source=path)


def dataset_name(path) -> str:
    """Short name of a data file (``a9a.t.gz`` -> ``a9a.t``, ``x.train.svm`` -> ``x.train``)."""
    base = os.path.basename(os.fspath(path))
    for suffix in (".gz", ".bz2", ".svm", ".txt", ".libsvm"):
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
    return base
