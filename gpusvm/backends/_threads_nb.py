"""Compiled row-block products of a fit on several threads (no GIL held, no solver logic).

Each function works on the contiguous block ``lo .. hi`` of the rows (or of the row list
``rows``) that a thread owns: ``X B`` writes its own rows of ``out``; ``X^T U`` adds into a
partial ``(d, M)`` array of its own, and :func:`sum_parts` adds the partials in block order
over a range of columns.  The sums of a row run in the order of SciPy's CSR products
(one accumulator from 0, the nonzeros in order, ``X``'s values in float64), so ``X B`` is
SciPy's bit for bit and ``X^T U`` of one block is too.  Compiled only when a fit runs on
several threads (:mod:`gpusvm._threads`).
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
    for k in range(lo, hi):
        r = k if every else rows[k]
        if M == 1:
            acc = 0.0
            for p in range(indptr[r], indptr[r + 1]):
                acc += np.float64(data[p]) * B[indices[p], 0]
            out[k, 0] = acc
            continue
        for c in range(M):
            out[k, c] = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            x = np.float64(data[p])
            j = indices[p]
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
    for k in range(lo, hi):
        r = k if every else rows[k]
        if M == 1:
            u = U[k, 0]
            if u == 0.0:
                continue
            for p in range(indptr[r], indptr[r + 1]):
                x = np.float64(data[p])
                if square:
                    x = x * x
                part[indices[p], 0] += x * u
            continue
        for p in range(indptr[r], indptr[r + 1]):
            x = np.float64(data[p])
            if square:
                x = x * x
            j = indices[p]
            for c in range(M):
                part[j, c] += x * U[k, c]


@njit(cache=True, nogil=True)
def sum_parts(parts, out, lo, hi):  # pragma: no cover
    """``out[j] = parts[0, j] + parts[1, j] + ...`` (in that order) for ``j`` in ``lo .. hi``."""
    K = parts.shape[0]
    M = out.shape[1]
    for j in range(lo, hi):
        for c in range(M):
            acc = parts[0, j, c]
            for b in range(1, K):
                acc += parts[b, j, c]
            out[j, c] = acc


@njit(cache=True, nogil=True)
def add_parts_scaled(parts, out, scale, lo, hi):  # pragma: no cover
    """``out[j] += scale * (parts[0, j] + parts[1, j] + ...)`` for ``j`` in ``lo .. hi``."""
    K = parts.shape[0]
    M = out.shape[1]
    for j in range(lo, hi):
        for c in range(M):
            acc = parts[0, j, c]
            for b in range(1, K):
                acc += parts[b, j, c]
            out[j, c] += scale * acc
