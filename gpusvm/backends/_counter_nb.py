"""The counter-based batches of :mod:`gpusvm.solvers._sampling`, compiled (numba).

The same integer arithmetic as the NumPy reference, on scalars, so that the
compiled segment loops of :mod:`gpusvm.backends.numba_` compute each ``A_t``
where they use it, bit for bit the batches every other backend sees.  Imported
only when numba is available.

State the loops carry between batches (all preallocated by the backend):

``rk`` (``uint64[3, ROUNDS]``)
    round keys: row 0 for the batch key of ``"without_replacement"``, rows
    ``1 + (e & 1)`` for the epoch ``e`` of ``"epoch"`` (cached in ``ecache``).
``ecache`` (``int64[3]``)
    the epoch whose round keys sit in ``rk[1 + (e & 1)]`` (``-1``: none), and in
    ``ecache[2]`` the epoch whose rows ``order`` holds.
``stamp`` (``int64[n]``, ``"with_replacement"`` only)
    ``stamp[r]`` is the global position ``t k + j`` of the last first occurrence
    of row ``r``: an occurrence at ``t k + j`` repeats an earlier one of its own
    batch exactly when ``t k <= stamp[r] < t k + j``.
``order`` (``int32[E, n]``), ``table`` (``uint32[2^h]``)
    ``"epoch"`` sampling with one row per batch: the rows of whole epochs, in
    order (:func:`epoch_order`, one epoch a row, ``order[i]`` holding epoch
    ``ecache[2] + i``), so that an iteration reads its row instead of computing
    it, and the Feistel network over the whole domain they come from.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _compile_nb  # noqa: F401  (the collector paused while this compiles)

# Literals, not imports: numba's on-disk cache is keyed on this file, so a constant imported
# from another module could change under a stale cache.  tests/test_sampling.py checks that
# they equal gpusvm.solvers._sampling.GOLDEN and ROUNDS.
GOLDEN = 0x9E3779B97F4A7C15
ROUNDS = 6

_S16 = np.uint64(16)
_S13 = np.uint64(13)
_S27 = np.uint64(27)
_S30 = np.uint64(30)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_F1 = np.uint64(0x85EBCA6B)
_F2 = np.uint64(0xC2B2AE35)
_M32 = np.uint64(0xFFFFFFFF)
_G = np.uint64(GOLDEN)
_ONE = np.uint64(1)


@njit(cache=True, inline="always")
def mix64(z):
    """splitmix64's finaliser (``uint64``, wrapping)."""
    z = z ^ (z >> _S30)
    z = z * _M1
    z = z ^ (z >> _S27)
    z = z * _M2
    return z ^ (z >> _S31)


@njit(cache=True, inline="always")
def fmix32(x):
    """murmur3's 32-bit finaliser on a ``uint32`` held in a ``uint64``."""
    x = x & _M32
    x = x ^ (x >> _S16)
    x = (x * _F1) & _M32
    x = x ^ (x >> _S13)
    x = (x * _F2) & _M32
    return x ^ (x >> _S16)


@njit(cache=True, inline="always")
def stream_key(seed, c):
    """``M64(seed ^ M64(c))`` for a non-negative counter ``c``."""
    return mix64(seed ^ mix64(np.uint64(c)))


@njit(cache=True, inline="always")
def set_round_keys(key, rk, slot):
    """``rk[slot, r] = low32(M64(key + (r + 1) G))``."""
    for r in range(ROUNDS):
        rk[slot, r] = mix64(key + np.uint64(r + 1) * _G) & _M32


@njit(cache=True, inline="always")
def permute(q, n, rk, slot, half, mask):
    """``pi(q)``: ROUNDS Feistel rounds on ``h = 2 half`` bits, walked until ``< n``."""
    x = np.uint64(q)
    hs = np.uint64(half)
    mk = np.uint64(mask)
    nn = np.uint64(n)
    while True:
        left = x >> hs
        right = x & mk
        for r in range(ROUNDS):
            nr = left ^ (fmix32(right ^ rk[slot, r]) & mk)
            left = right
            right = nr
        x = (left << hs) | right
        if x < nn:
            return np.int64(x)


@njit(cache=True, inline="always")
def permute_inverse(q, n, rk, slot, half, mask):
    """``pi^{-1}(q)``: the rounds backwards, walked until ``< n``."""
    x = np.uint64(q)
    hs = np.uint64(half)
    mk = np.uint64(mask)
    nn = np.uint64(n)
    while True:
        left = x >> hs
        right = x & mk
        for rr in range(ROUNDS):
            r = ROUNDS - 1 - rr
            nl = right ^ (fmix32(left ^ rk[slot, r]) & mk)
            right = left
            left = nl
        x = (left << hs) | right
        if x < nn:
            return np.int64(x)


@njit(cache=True, inline="always")
def uniform_row(n, key, j):
    """``floor(M64(key ^ M64(j + G)) n / 2^64)`` from 32-bit halves (exact)."""
    u = mix64(key ^ mix64(np.uint64(j) + _G))
    nn = np.uint64(n)
    hi = u >> _S32
    lo = u & _M32
    return np.int64((hi * nn + ((lo * nn) >> _S32)) >> _S32)


@njit(cache=True, inline="always")
def _epoch_slot(seed, e, rk, ecache):
    slot = 1 + (e & 1)
    if ecache[slot - 1] != e:
        set_round_keys(stream_key(seed, e), rk, slot)
        ecache[slot - 1] = e
    return slot


@njit(cache=True, inline="always")
def batch(code, n, k, seed, half, mask, t, rows, first, rk, ecache, stamp):
    """Write ``A_t`` (0-based ``t``) into ``rows`` and its first-occurrence mask into ``first``.

    Returns True when ``first`` is meaningful (the batch may hold a repeat),
    False when every row of the batch is distinct by construction.
    """
    if code == 0:                                     # without replacement: k images of pi_t
        set_round_keys(stream_key(seed, t), rk, 0)
        for j in range(k):
            rows[j] = permute(j, n, rk, 0, half, mask)
        return False
    if code == 1:                                     # with replacement: a hash per position
        key = stream_key(seed, t)
        base = np.int64(t) * k
        for j in range(k):
            r = uniform_row(n, key, j)
            rows[j] = r
            st = stamp[r]
            if st >= base and st < base + j:
                first[j] = False
            else:
                first[j] = True
                stamp[r] = base + j
        return True
    p0 = np.int64(t) * k                              # epochs: position p = t k + j
    e0 = p0 // n
    q0 = p0 - e0 * n
    slot = _epoch_slot(seed, e0, rk, ecache)
    if q0 + k <= n:
        for j in range(k):
            rows[j] = permute(q0 + j, n, rk, slot, half, mask)
        return False
    tail = n - q0
    for j in range(tail):
        rows[j] = permute(q0 + j, n, rk, slot, half, mask)
        first[j] = True
    slot1 = _epoch_slot(seed, e0 + 1, rk, ecache)
    for j in range(tail, k):
        r = permute(j - tail, n, rk, slot1, half, mask)
        rows[j] = r
        first[j] = permute_inverse(r, n, rk, slot, half, mask) < q0
    return True


#: the epoch table of :func:`epoch_order` holds at most this many entries (64 MiB of uint32);
#: a larger domain computes each row by :func:`permute` directly (the same values, slower)
MAX_TABLE = 1 << 24

_M32_U = np.uint32(0xFFFFFFFF)


@njit(cache=True, inline="always")
def _feistel_table(rk, slot, half, mask, table):
    """``table[x]`` = the ROUNDS Feistel rounds of :func:`permute` on every ``x < 2^(2 half)``.

    No cycle walking and no branches: the rounds on 32-bit words (``fmix32``'s
    wrapping products spelled with a mask), one independent chain per ``x``, so
    the loop runs at the multiplier's throughput rather than its latency.
    """
    hs = np.uint64(half)
    mk = np.uint64(mask)
    for x in range(table.size):
        xx = np.uint64(x)
        left = xx >> hs
        right = xx & mk
        for r in range(ROUNDS):
            nr = left ^ (fmix32(right ^ rk[slot, r]) & mk)
            left = right
            right = nr
        table[x] = np.uint32((left << hs) | right)


@njit(cache=True)
def epoch_order(n, seed, half, mask, e, rk, ecache, table, order):
    """``order[q] = pi_e(q)`` for every position ``q < n`` of epoch ``e`` (``"epoch"`` sampling).

    The rows :func:`batch` draws for epoch ``e``, all at once: the Feistel
    network over the whole ``2^h`` domain into ``table`` (when it has room),
    then the cycle walk of every ``q`` by lookups, bitwise :func:`permute`'s
    values at about a third of its cost per row.  With an empty ``table`` each
    row comes from :func:`permute`.  ``ecache[2]`` records ``e``.
    """
    slot = _epoch_slot(seed, e, rk, ecache)
    if table.size > 0:
        _feistel_table(rk, slot, half, mask, table)
        nn = np.uint32(n)
        for q in range(n):
            x = table[q]
            while x >= nn:
                x = table[x]
            order[q] = x
    else:
        for q in range(n):
            order[q] = permute(q, n, rk, slot, half, mask)
    ecache[2] = e


def sampler_state(n: int, epoch_rows: int = 0, half: int = 0):
    """Fresh ``(rk, ecache, stamp, order, table)`` for :func:`batch` and :func:`epoch_order`
    (``order``: room for one epoch, ``(1, epoch_rows)``; none when ``epoch_rows`` is 0).

    Parameters
    ----------
    n : int
        Size of ``stamp`` (the rows of ``"with_replacement"`` sampling, else 1).
    epoch_rows : int
        Size of ``order`` (the rows of an ``"epoch"`` run drawn an epoch at a
        time, else 0).
    half : int
        The sampler's half width: ``table`` gets ``2^(2 half)`` entries when
        ``epoch_rows > 0`` and that is at most :data:`MAX_TABLE`.
    """
    rk = np.zeros((3, ROUNDS), dtype=np.uint64)
    ecache = np.full(3, -1, dtype=np.int64)
    stamp = np.full(n, -1, dtype=np.int64)
    order = np.zeros((1 if epoch_rows else 0, epoch_rows), dtype=np.int32)
    size = 1 << (2 * half)
    table = np.zeros(size if epoch_rows > 0 and size <= MAX_TABLE else 0, dtype=np.uint32)
    return rk, ecache, stamp, order, table
