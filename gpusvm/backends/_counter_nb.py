"""The counter-based batches of :mod:`gpusvm.solvers._sampling`, compiled: the reference's
integer arithmetic on scalars, bit for bit the batches every backend sees.  State:

* ``rk`` (``uint64[3, ROUNDS]``): round keys, row 0 for ``"without_replacement"``'s batch,
  row ``1 + (e & 1)`` for epoch ``e`` (recorded in ``ecache[e & 1]``; ``ecache[2]``: the
  epoch in ``order[0]``);
* ``stamp[r]`` (``"with_replacement"``): the position ``t k + j`` of row ``r``'s last first
  occurrence: one at ``t k + j`` repeats its batch's exactly when ``t k <= stamp[r] < t k + j``;
* ``order`` (``int32[E, n]``): whole epochs' rows (:func:`epoch_order`, from ``table``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _compile_nb  # noqa: F401  (the collector paused while this compiles)

# literals, not imports (numba's disk cache is keyed on this file: an imported constant could
# change under it); tests/test_sampling.py checks they equal gpusvm.solvers._sampling's
GOLDEN = 0x9E3779B97F4A7C15
ROUNDS = 6

_S13, _S16, _S27, _S30, _S31, _S32 = (np.uint64(s) for s in (13, 16, 27, 30, 31, 32))
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_F1, _F2, _M32 = np.uint64(0x85EBCA6B), np.uint64(0xC2B2AE35), np.uint64(0xFFFFFFFF)
_G = np.uint64(GOLDEN)
_U13, _U16 = np.uint32(13), np.uint32(16)
_F1U, _F2U = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)


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
def fmix32_u32(x):
    """:func:`fmix32` on a ``uint32``: the same bits, in 32-bit arithmetic (half the cost of the
    64-bit multiplies and masks; :func:`epoch_order`'s table)."""
    x = x ^ (x >> _U16)
    x = np.uint32(x * _F1U)
    x = x ^ (x >> _U13)
    x = np.uint32(x * _F2U)
    return x ^ (x >> _U16)


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
def batch_with(n, k, seed, t, rows, first, stamp):
    """:func:`_batch` of ``"with_replacement"``: a hash per position; True."""
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


@njit(cache=True, inline="always")
def batch_perm(code, n, k, seed, half, mask, t, rows, first, rk, ecache):
    """:func:`_batch` of ``"without_replacement"`` (``code`` 0) and ``"epoch"`` (2)."""
    if code == 0:                                     # without replacement: k images of pi_t
        slot = 0
        e0 = q0 = 0
        tail = k
    else:                                             # epochs: position p = t k + j
        p0 = np.int64(t) * k
        e0 = p0 // n
        q0 = p0 - e0 * n
        tail = min(k, n - q0)                         # the positions left in epoch e0
        slot = 1 + (e0 & 1)
    for s in range(1 if tail == k else 2):            # pi_t's, or epoch e0's and e0 + 1's keys
        ks = slot if s == 0 else 3 - slot
        c = t if code == 0 else e0 + s
        if code == 0 or ecache[ks - 1] != c:
            set_round_keys(stream_key(seed, c), rk, ks)
            if code != 0:
                ecache[ks - 1] = c
    for j in range(k):
        if j < tail:
            rows[j] = permute(q0 + j, n, rk, slot, half, mask)
            first[j] = True
        else:                                         # epoch e0 + 1, first unless in e0's tail
            r = permute(j - tail, n, rk, 3 - slot, half, mask)
            rows[j] = r
            first[j] = permute_inverse(r, n, rk, slot, half, mask) < q0
    return tail < k


def _batch(code, n, k, seed, half, mask, t, rows, first, rk, ecache, stamp):
    """``A_t`` (0-based ``t``) into ``rows``, its first occurrences into ``first``; False: distinct.

    :data:`batch` is compiled once for every loop of batches of several rows (its types do not
    depend on the data); a loop of one-row batches inlines :func:`batch_with` or
    :func:`batch_perm`, the one its sampling needs (a call per row would cost 10% of a
    one-row epoch with replacement; both inlined compiled 1 s longer)."""
    if code == 1:
        return batch_with(n, k, seed, t, rows, first, stamp)
    return batch_perm(code, n, k, seed, half, mask, t, rows, first, rk, ecache)


batch = njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)(_batch)



@njit(cache=True, nogil=True)
def drawn_rows(code, n, k, seed, half, mask, t0, t1, base, rk, out):
    """The rows of the batches ``t0 .. t1 - 1`` of ``"without_replacement"`` (``code`` 0) or
    ``"with_replacement"`` (1) sampling, position ``t k + j`` at ``out[t k + j - base]``: the
    batches a loop reads as it reads an ``"epoch"`` order (rk's row 0 overwritten)."""
    for t in range(t0, t1):
        key = stream_key(seed, t)
        at = np.int64(t) * k - base
        if code == 1:
            for j in range(k):
                out[at + j] = uniform_row(n, key, j)
        else:
            set_round_keys(key, rk, 0)
            for j in range(k):
                out[at + j] = permute(j, n, rk, 0, half, mask)

#: entries of :func:`epoch_order`'s table at most (64 MiB); a larger domain uses :func:`permute`
MAX_TABLE = 1 << 24


@njit(cache=True, inline="always")
def _feistel_table(rk, slot, half, mask, table):
    """``table[x]`` = :func:`permute`'s rounds on every ``x < 2^(2 half)``, without cycle walk.

    A round's function ``fmix32(right ^ key) & mask`` takes one of ``2^half`` values of
    ``right``: it is tabulated first (``ROUNDS 2^half`` hashes, in 32-bit arithmetic, the same
    bits), and every entry then costs ``ROUNDS`` lookups in a few kilobytes (a9a's 65,536
    entries and their walk: 0.47 ms an epoch against 0.62 ms hashing every round of every entry)."""
    hs = np.uint32(half)
    mk = np.uint32(mask)
    f = np.empty((ROUNDS, mask + 1), dtype=np.uint32)
    for r in range(ROUNDS):
        key = np.uint32(rk[slot, r])
        for v in range(mask + 1):
            f[r, v] = fmix32_u32(np.uint32(v) ^ key) & mk
    for x in range(table.size):
        xx = np.uint32(x)
        left = xx >> hs
        right = xx & mk
        for r in range(ROUNDS):
            nr = left ^ f[r, right]
            left = right
            right = nr
        table[x] = (left << hs) | right


@njit(cache=True)
def epoch_order(n, seed, half, mask, e, rk, ecache, table, order):
    """``order[q] = pi_e(q)``, ``q < n``, by lookups in ``table`` (a third of :func:`permute`'s
    cost, which serves when ``table`` is empty); ``ecache[2] = e``."""
    slot = _epoch_slot(seed, e, rk, ecache)
    if table.size > 0:
        _feistel_table(rk, slot, half, mask, table)
        # the cycle walk in rounds over the rows still outside ``[0, n)``, appended without a
        # branch: a walk per row mispredicts on about every other row (a9a: 0.36 ms an epoch
        # against 0.07 ms)
        nn = np.uint32(n)
        pending = np.empty(n, dtype=np.int32)
        count = 0
        for q in range(n):
            x = table[q]
            order[q] = x
            pending[count] = q
            count += x >= nn
        while count > 0:
            left = 0
            for i in range(count):
                q = pending[i]
                x = table[order[q]]
                order[q] = x
                pending[left] = q
                left += x >= nn
            count = left
    else:
        for q in range(n):
            order[q] = permute(q, n, rk, slot, half, mask)
    ecache[2] = e


def sampler_state(n: int, epoch_rows: int = 0, half: int = 0):
    """Fresh ``(rk, ecache, stamp, order, table)``: ``stamp`` of ``n`` (the rows of
    ``"with_replacement"`` sampling, else 1), ``order`` of ``(1, epoch_rows)`` (an ``"epoch"``
    run's rows, else none) and ``table`` of ``2^(2 half)`` when that fits :data:`MAX_TABLE`."""
    rk = np.zeros((3, ROUNDS), dtype=np.uint64)
    ecache = np.full(3, -1, dtype=np.int64)
    stamp = np.full(n, -1, dtype=np.int64)
    order = np.zeros((1 if epoch_rows else 0, epoch_rows), dtype=np.int32)
    size = 1 << (2 * half)
    table = np.zeros(size if epoch_rows > 0 and size <= MAX_TABLE else 0, dtype=np.uint32)
    return rk, ecache, stamp, order, table
