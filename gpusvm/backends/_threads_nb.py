"""Compiled row-block products of a fit on several threads (no GIL held, no solver logic).

Each function works on the contiguous block ``lo .. hi`` of the rows (or of the row list
``rows``) that a thread owns: ``X B`` writes its own rows of ``out``; ``X^T U`` adds into a
partial ``(d, M)`` array of its own (block 0 into the output), and :func:`add_parts` adds
the other blocks' partials in block order over a range of columns.  The sums of a row run in
the order of SciPy's CSR products (one accumulator from 0, the nonzeros in order, ``X``'s
values in float64), so ``X B`` is SciPy's bit for bit and ``X^T U`` of one block is too.
Indices are read as unsigned: numba then drops its negative-index wraparound, which made
these loops 1.5x slower than SciPy's.  Compiled only when a fit first needs them
(:mod:`gpusvm._threads`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _compile_nb  # noqa: F401  (the collector paused, the cache stamped)


@njit(cache=True, nogil=True)
def mm_block(indptr, indices, data, rows, B, out, lo, hi):  # pragma: no cover (compiled)
    """``out[k, :] = x_r B`` for ``k`` in ``lo .. hi``, ``r = rows[k]`` (every row: ``rows``
    empty, ``r = k``); float64."""
    M = B.shape[1]
    every = rows.size == 0
    if M == 1:                        # flat: no stride arithmetic in the inner loop
        bf = B.reshape(-1)
        of = out.reshape(-1)
        for k in range(lo, hi):
            r = np.uint64(k if every else rows[k])
            acc = 0.0
            for p in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
                acc += np.float64(data[p]) * bf[np.uint64(indices[p])]
            of[k] = acc
        return
    for k in range(lo, hi):
        r = np.uint64(k if every else rows[k])
        for c in range(M):
            out[k, c] = 0.0
        for p in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
            x = np.float64(data[p])
            j = np.uint64(indices[p])
            for c in range(M):
                out[k, c] += x * B[j, c]


@njit(cache=True, nogil=True)
def rmm_block(indptr, indices, data, rows, U, part, lo, hi, square):  # pragma: no cover
    """``part = sum_k x_r^T U[k, :]`` over ``k`` in ``lo .. hi`` (``r`` as in :func:`mm_block`;
    ``square``: the squares of ``x_r``), ``part`` (d, M) zeroed first; rows whose ``U`` row is
    all zero are passed over (they add nothing)."""
    M = U.shape[1]
    every = rows.size == 0
    part[:, :] = 0.0
    if M == 1:                        # flat: no stride arithmetic in the inner loop
        uf = U.reshape(-1)
        pf = part.reshape(-1)
        for k in range(lo, hi):
            r = np.uint64(k if every else rows[k])
            u = uf[k]
            if u == 0.0:
                continue
            if square:
                for p in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
                    x = np.float64(data[p])
                    pf[np.uint64(indices[p])] += (x * x) * u
            else:
                for p in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
                    pf[np.uint64(indices[p])] += np.float64(data[p]) * u
        return
    for k in range(lo, hi):
        r = np.uint64(k if every else rows[k])
        for p in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
            x = np.float64(data[p])
            if square:
                x = x * x
            j = np.uint64(indices[p])
            for c in range(M):
                part[j, c] += x * U[k, c]


@njit(cache=True, nogil=True)
def add_parts(parts, out, lo, hi):  # pragma: no cover
    """``out[j] += parts[0, j]``, then ``+= parts[1, j]`` ... (in that order) for ``j`` in
    ``lo .. hi``: block 0's sum already in ``out``, the others' added in block order."""
    K = parts.shape[0]
    M = out.shape[1]
    for j in range(lo, hi):
        for c in range(M):
            acc = out[j, c]
            for b in range(K):
                acc += parts[b, j, c]
            out[j, c] = acc


@njit(cache=True, nogil=True)
def gather_rows(indptr, indices, data, rows, newptr, new_indices, new_data, lo,
                hi):  # pragma: no cover
    """Rows ``rows[lo:hi]`` of the CSR ``X`` into a compact CSR (``newptr`` made by the
    caller), values in float64."""
    for k in range(lo, hi):
        r = np.uint64(rows[k])
        a = np.uint64(indptr[r])
        b = np.uint64(newptr[k])
        for p in range(np.uint64(indptr[r + 1]) - a):
            new_indices[b + p] = indices[a + p]
            new_data[b + p] = np.float64(data[a + p])
