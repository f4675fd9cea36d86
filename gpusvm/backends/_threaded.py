"""Sparse products of a CSR matrix on a :class:`gpusvm._threads.BlockPool`, row blocks fixed.

:class:`ThreadedCSR` cuts the rows (or a list of rows) into the pool's ``k`` blocks of about
equal nonzeros (:func:`gpusvm._threads.nnz_blocks`) and runs the compiled passes of
:mod:`gpusvm.backends._threads_nb` on them: ``X B`` equals SciPy's bit for bit; ``X^T U``
adds the blocks' partial sums in block order, so it depends on ``k`` (and on nothing else).
"""

from __future__ import annotations

import numpy as np

from .._threads import nnz_blocks

_EMPTY_ROWS = np.empty(0, dtype=np.int64)


def _kernels():
    from . import _threads_nb  # noqa: PLC0415  (compiled when a fit first runs on threads)
    return _threads_nb


class ThreadedCSR:
    """``X B``, ``X^T U`` and ``(X * X)^T U`` of the CSR ``X`` on ``pool``'s threads.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        float32 or float64 (read as float64, never copied).
    pool : gpusvm._threads.BlockPool
    """

    def __init__(self, X, pool):
        self.indptr, self.indices, self.data = X.indptr, X.indices, X.data
        self.n, self.d = X.shape
        self.pool = pool
        self.k = pool.k
        self._bounds = nnz_blocks(X.indptr, self.k)
        self._parts = None
        self._nb = _kernels()

    def bounds(self, rows=None):
        """The blocks' boundaries over all rows, or over the positions of ``rows``."""
        return self._bounds if rows is None else nnz_blocks(self.indptr, self.k, rows)

    def mm(self, B, rows=None, bounds=None, out=None):
        """``X B`` (float64 (n, M)), or ``X[rows] B`` (``bounds``: :meth:`bounds` of ``rows``)."""
        B = np.ascontiguousarray(B, dtype=np.float64)
        if B.ndim == 1:
            B = B.reshape(-1, 1)
        r = _EMPTY_ROWS if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
        m = self.n if rows is None else r.size
        bnd = self.bounds(rows) if bounds is None else bounds
        if out is None:
            out = np.empty((m, B.shape[1]))
        nb = self._nb

        def block(i):
            nb.mm_block(self.indptr, self.indices, self.data, r, B, out, bnd[i], bnd[i + 1])
        self.pool.run(block)
        return out

    def _partials(self, M):
        if self._parts is None or self._parts.shape[2] != M:
            self._parts = np.empty((self.k, self.d, M))
        return self._parts

    def rmm(self, U, rows=None, bounds=None, square=False, out=None, scale=None):
        """``X^T U`` (float64 (d, M); ``square``: ``(X * X)^T U``), or ``X[rows]^T U``; with
        ``out`` and ``scale``, ``out += scale X^T U`` instead."""
        U = np.ascontiguousarray(U, dtype=np.float64)
        if U.ndim == 1:
            U = U.reshape(-1, 1)
        M = U.shape[1]
        r = _EMPTY_ROWS if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
        bnd = self.bounds(rows) if bounds is None else bounds
        parts = self._partials(M)
        nb = self._nb

        def block(i):
            nb.rmm_block(self.indptr, self.indices, self.data, r, U, parts[i], bnd[i],
                         bnd[i + 1], square)
        self.pool.run(block)
        add = out is not None and scale is not None
        if out is None:
            out = np.empty((self.d, M))
        cols = np.linspace(0, self.d, self.k + 1).astype(np.int64)

        def total(i):
            if add:
                nb.add_parts_scaled(parts, out, float(scale), cols[i], cols[i + 1])
            else:
                nb.sum_parts(parts, out, cols[i], cols[i + 1])
        self.pool.run(total)
        return out


__all__ = ["ThreadedCSR"]
