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
    from ._compile_nb import AHEAD  # noqa: PLC0415
    AHEAD.settle((_threads_nb.mm_block, _threads_nb.rmm_block, _threads_nb.add_parts,
                  _threads_nb.gather_rows))              # asked ahead by a smaller fit
    return _threads_nb


def ask_ahead(X, gather: bool = False) -> None:
    """Have the passes :class:`ThreadedCSR` runs on ``X`` (``gather``: and on its gathered
    float64 rows) compiled ahead into numba's disk cache by the compiling process
    (:class:`gpusvm.backends._compile_nb.CompileAhead`), on a host where fits may run on
    threads: a fit of more nonzeros later loads them rather than compiling at its size."""
    from .._threads import affinity_cores  # noqa: PLC0415
    if affinity_cores() < 2:
        return
    from . import _threads_nb as nb  # noqa: PLC0415
    from ._compile_nb import AHEAD  # noqa: PLC0415

    def ask(dispatcher, args):
        AHEAD.ready(dispatcher, args, early=True, later=True)

    i64 = np.zeros(1, dtype=np.int64)
    B, parts = np.zeros((1, 1)), np.zeros((1, 1, 1))
    ptr, ind = np.zeros(2, dtype=X.indptr.dtype), np.zeros(1, dtype=X.indices.dtype)
    pairs = [(ptr, np.zeros(1, dtype=X.data.dtype))]
    if gather:                          # the gathered rows: X's dtype, pointers of the indices'
        pairs.append((np.zeros(2, dtype=X.indices.dtype), np.zeros(1, dtype=X.data.dtype)))
        ask(nb.gather_rows, (ptr, ind, pairs[0][1], i64, pairs[1][0], ind.copy(),
                             pairs[1][1], 0, 1))
    for p, data in pairs:
        ask(nb.mm_block, (p, ind, data, i64, B, B.copy(), 0, 1))
        for square in (False, True) if gather else (False,):
            ask(nb.rmm_block, (p, ind, data, i64, B, B.copy(), 0, 1, square))
    ask(nb.add_parts, (parts, B, 0, 1))


class ThreadedCSR:
    """``X B``, ``X^T U`` and ``(X * X)^T U`` of the CSR ``X`` on ``pool``'s threads.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        float32 or float64 (read as float64, never copied).
    pool : gpusvm._threads.BlockPool
    bias : float, optional
        A constant last column of this value, not stored: the products equal those of
        ``X`` with the column appended (in ``X``'s dtype) bit for bit, blocks included.
    """

    def __init__(self, X, pool, bias=None):
        self.indptr, self.indices, self.data = X.indptr, X.indices, X.data
        self.n, self.d = X.shape
        self.bias = None if bias is None else float(X.dtype.type(bias))
        self.d += self.bias is not None
        self.pool = pool
        self.k = pool.k
        self._bounds = self.bounds()
        self._parts = None
        self._owner = self                  # whose partial sums' buffer (gather shares it)
        self._nb = _kernels()

    def gather(self, rows):
        """The rows ``rows`` as a compact :class:`ThreadedCSR` in ``X``'s dtype, copied on the
        threads (a product over a list of rows reads them scattered: twice as long)."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        lens = self.indptr[rows + 1] - self.indptr[rows]
        newptr = np.zeros(rows.size + 1, dtype=self.indices.dtype
                          if int(lens.sum()) < np.iinfo(self.indices.dtype).max else np.int64)
        np.cumsum(lens, out=newptr[1:])
        nnz = int(newptr[-1])
        new_indices = np.empty(nnz, dtype=self.indices.dtype)
        new_data = np.empty(nnz, dtype=self.data.dtype)
        bnd = nnz_blocks(self._counts(newptr), self.k)
        nb = self._nb
        self.pool.run(lambda i: nb.gather_rows(self.indptr, self.indices, self.data, rows,
                                                newptr, new_indices, new_data, bnd[i],
                                                bnd[i + 1]))
        sub = ThreadedCSR.__new__(ThreadedCSR)
        sub.__dict__.update(self.__dict__)
        sub.indptr, sub.indices, sub.data = newptr, new_indices, new_data
        sub.n = rows.size
        sub._bounds = bnd
        return sub

    def _counts(self, indptr):
        """Row pointers counting the implicit bias column's entries (the blocks' weights)."""
        if self.bias is None:
            return indptr
        return indptr.astype(np.int64) + np.arange(indptr.size, dtype=np.int64)

    def bounds(self, rows=None):
        """The blocks' boundaries over all rows, or over the positions of ``rows``."""
        if rows is None and getattr(self, "_bounds", None) is not None:
            return self._bounds
        return nnz_blocks(self._counts(self.indptr), self.k, rows)

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
        if self.bias is not None:       # the last term of every row's sum, as if stored
            out += self.bias * B[-1]
        return out

    def _partials(self, M):
        """The partial sums of blocks 1 .. k - 1 (block 0 sums into the output)."""
        owner = self._owner
        if owner._parts is None or owner._parts.shape[2] != M:
            owner._parts = np.empty((self.k - 1, self.d, M))
        return owner._parts

    def rmm(self, U, rows=None, bounds=None, square=False):
        """``X^T U`` (float64 (d, M); ``square``: ``(X * X)^T U``), or ``X[rows]^T U``:
        block 0 sums into the output, the others into partials added after it in block
        order."""
        U = np.ascontiguousarray(U, dtype=np.float64)
        if U.ndim == 1:
            U = U.reshape(-1, 1)
        M = U.shape[1]
        r = _EMPTY_ROWS if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
        bnd = self.bounds(rows) if bounds is None else bounds
        out = np.empty((self.d, M))
        parts = self._partials(M) if self.k > 1 else None
        nb = self._nb

        def block(i):
            part = out if i == 0 else parts[i - 1]
            nb.rmm_block(self.indptr, self.indices, self.data, r, U, part, bnd[i],
                         bnd[i + 1], square)
            if self.bias is not None:   # the block's rows in order, from 0 (a running sum)
                v = self.bias * self.bias if square else self.bias
                lo, hi = bnd[i], bnd[i + 1]
                part[-1] = 0.0 if hi == lo else \
                    0.0 + np.add.accumulate(v * U[lo:hi], axis=0)[-1]
        self.pool.run(block)
        if self.k > 1:
            cols = np.linspace(0, self.d, self.k + 1).astype(np.int64)
            self.pool.run(lambda i: nb.add_parts(parts, out, cols[i], cols[i + 1]))
        return out


__all__ = ["ThreadedCSR", "ask_ahead"]
