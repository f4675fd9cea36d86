"""Mini-batches from a counter: the rows of ``A_t`` as a pure function of ``(seed, t, j)``.

Every backend computes the batches where it uses them, with the same unsigned
integer arithmetic (wrapping ``uint64`` and ``uint32``), so a seed gives every
backend bit-identical batches with no per-iteration host work and no batch
uploads (../shared/ALGORITHMS.md, "Mini-batches from a counter"):

* this module is the NumPy reference (vectorised over ``j``);
* :mod:`gpusvm.backends.numba_` has the same functions compiled (``_nb_batch``);
* ``kernels/sampler.cuh`` has them as CUDA device functions (``gpusvm_sample``).

The arithmetic, with ``M64`` the splitmix64 finaliser and ``F32`` the murmur3
finaliser:

``key(seed, c) = M64(seed ^ M64(c))``
    the key of a batch (``c = t``, the 0-based iteration) or of an epoch (``c = e``).
``rk_r = low32(M64(key + (r + 1) G))``, ``r = 0 .. 5``
    the round keys of a 6-round Feistel network (``G = 0x9E3779B97F4A7C15``).
``pi_key(q)``
    a keyed bijection of ``{0 .. n-1}``: ``x = q``; repeat ``x = feistel(x)`` while
    ``x >= n`` ("cycle walking"). ``feistel`` permutes ``{0 .. 2^h - 1}``, ``h`` the
    smallest even number ``>= 2`` with ``2^h >= n``, by ROUNDS = 6 rounds
    ``(L, R) <- (R, L ^ (F32(R ^ rk_r) & mask))`` on halves of ``h/2`` bits. As
    ``2^h < 4n``, fewer than 4 walks are needed on average.
``"without_replacement"`` (Rand(k) of Takáč et al. 2013)
    ``A_t = {pi_key(seed, t)(j) : j < k}``: ``k`` distinct rows, a uniformly
    random ``k``-subset when ``pi`` is a random permutation.
``"epoch"``
    position ``p = t k + j``, epoch ``e = p div n``, ``q = p mod n``,
    row ``pi_key(seed, e)(q)``: a fresh permutation every epoch. A batch that
    straddles two epochs may repeat a row; the occurrence from epoch ``e + 1``
    is a repeat exactly when ``pi_e^{-1}(row) >= q_0``, the first position of the
    batch in epoch ``e`` (an O(1) test, with the inverse network).
``"with_replacement"`` (Pegasos Sec. 2.3)
    ``u = M64(key(seed, t) ^ M64(j + G))``, row ``= floor(u n / 2^64)`` (the high
    word of a 64 x 64-bit product, computed from 32-bit halves: no modulo bias).
    Repeats are marked by a first-occurrence mask.

The mask of first occurrences (``first``, used by SDCA, whose repeated rows must
not step twice) is ``None`` when a batch holds no repeat by construction.
"""

from __future__ import annotations

import numpy as np

SAMPLING_MODES = ("without_replacement", "with_replacement", "epoch")
#: the int codes of the compiled and CUDA samplers, in the order of :data:`SAMPLING_MODES`
MODE_CODES = {mode: code for code, mode in enumerate(SAMPLING_MODES)}

_U64 = np.uint64
_MASK64 = (1 << 64) - 1
#: the golden-ratio increment of splitmix64
GOLDEN = 0x9E3779B97F4A7C15
#: Feistel rounds (4 suffice on wide halves; tiny domains, h = 4 for n <= 16, need 6 to
#: pass the uniformity tests)
ROUNDS = 6


def seed_u64(seed) -> int:
    """The 64-bit seed of the counter streams: an int modulo ``2^64``, one 64-bit draw
    of a generator (seeded alike: the same stream), or fresh OS entropy for None.
    """
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return int(seed) & _MASK64
    if isinstance(seed, np.random.RandomState):
        return int(seed.randint(0, 2**63 - 1, dtype=np.int64)) << 1 | int(seed.randint(0, 2))
    rng = np.random.default_rng(seed)
    return int(rng.integers(0, 2**64, dtype=np.uint64))


def feistel_shape(n: int) -> tuple[int, int]:
    """``(half, mask)`` of the Feistel network on ``{0 .. 2^h - 1}`` for ``n`` rows.

    ``h`` is the smallest even number ``>= 2`` with ``2^h >= n``; ``half = h/2``
    and ``mask = 2^half - 1``.
    """
    h = 2
    while (1 << h) < n:
        h += 2
    half = h // 2
    return half, (1 << half) - 1


def mix64(z):
    """splitmix64's finaliser on ``uint64`` (array or scalar), wrapping."""
    z = np.asarray(z, dtype=_U64)
    with np.errstate(over="ignore"):
        z = z ^ (z >> _U64(30))
        z = z * _U64(0xBF58476D1CE4E5B9)
        z = z ^ (z >> _U64(27))
        z = z * _U64(0x94D049BB133111EB)
        z = z ^ (z >> _U64(31))
    return z


def fmix32(x):
    """murmur3's 32-bit finaliser on ``uint32`` values held in ``uint64`` (array), wrapping."""
    m32 = _U64(0xFFFFFFFF)
    x = np.asarray(x, dtype=_U64) & m32
    x ^= x >> _U64(16)
    x = (x * _U64(0x85EBCA6B)) & m32
    x ^= x >> _U64(13)
    x = (x * _U64(0xC2B2AE35)) & m32
    x ^= x >> _U64(16)
    return x


def stream_key(seed: int, counter: int) -> int:
    """``key(seed, c) = M64(seed ^ M64(c))`` as a Python int."""
    return int(mix64(_U64(seed) ^ mix64(_U64(counter & _MASK64))))


def round_keys(key: int) -> np.ndarray:
    """The ``ROUNDS`` 32-bit round keys ``low32(M64(key + (r + 1) G))`` (``uint64`` array)."""
    r = np.arange(1, ROUNDS + 1, dtype=_U64)
    with np.errstate(over="ignore"):
        z = _U64(key) + r * _U64(GOLDEN)
    return mix64(z) & _U64(0xFFFFFFFF)


def _feistel(x, rk, half: int, mask: int, inverse: bool = False):
    hs, mk = _U64(half), _U64(mask)
    left = x >> hs
    right = x & mk
    if not inverse:
        for r in range(ROUNDS):
            left, right = right, left ^ (fmix32(right ^ rk[r]) & mk)
    else:
        for r in reversed(range(ROUNDS)):
            left, right = right ^ (fmix32(left ^ rk[r]) & mk), left
    return (left << hs) | right


def permute(q, n: int, key: int, inverse: bool = False) -> np.ndarray:
    """``pi_key(q)`` (or its inverse) for positions ``0 <= q < n``, by cycle walking (int64)."""
    half, mask = feistel_shape(n)
    rk = round_keys(key)
    x = np.asarray(q, dtype=_U64).copy()
    todo = np.ones(x.shape, dtype=bool)
    while True:
        x[todo] = _feistel(x[todo], rk, half, mask, inverse)
        todo = x >= _U64(n)
        if not todo.any():
            return x.astype(np.int64)


def uniform_rows(n: int, key: int, j) -> np.ndarray:
    """``floor(M64(key ^ M64(j + G)) n / 2^64)`` for the positions ``j`` (int64)."""
    with np.errstate(over="ignore"):
        u = mix64(_U64(key) ^ mix64(np.asarray(j, dtype=_U64) + _U64(GOLDEN)))
    hi = u >> _U64(32)
    lo = u & _U64(0xFFFFFFFF)
    nn = _U64(n)
    return (hi * nn + ((lo * nn) >> _U64(32))).astype(np.int64) >> 32


def first_occurrences(batch: np.ndarray) -> np.ndarray:
    """False exactly at the repeated entries of a batch (k,) or of each row of (c, k)."""
    chunk = np.atleast_2d(batch)
    order = np.argsort(chunk, axis=1, kind="stable")
    srt = np.take_along_axis(chunk, order, axis=1)
    repeat = np.zeros(srt.shape, dtype=bool)
    repeat[:, 1:] = srt[:, 1:] == srt[:, :-1]
    first = np.empty_like(repeat)
    np.put_along_axis(first, order, ~repeat, axis=1)
    return first.reshape(np.shape(batch))


class CounterSampler:
    """The batches ``A_t`` of size ``k`` out of ``n`` rows, as a function of ``(seed, t)``.

    ``mode``: ``"without_replacement"`` (a uniformly random k-subset, Takáč et al. 2013,
    Rand(b)), ``"with_replacement"`` (k i.i.d. rows, Pegasos Sec. 2.3) or ``"epoch"`` (a fresh
    permutation every epoch, read k rows at a time; a batch straddling two epochs may repeat a
    row).  ``seed``: see :func:`seed_u64`; ``t`` is 0-based (the solvers' iteration ``t + 1``).

    Attributes
    ----------
    seed : int
        The 64-bit seed every backend uses.
    code : int
        ``MODE_CODES[mode]``.
    half, mask : int
        :func:`feistel_shape` of ``n``.
    """

    def __init__(self, n: int, k: int, mode: str, seed) -> None:
        if mode not in SAMPLING_MODES:
            raise ValueError(f"sampling must be one of {SAMPLING_MODES}, got {mode!r}")
        if not 1 <= k <= n:
            raise ValueError(f"batch size must satisfy 1 <= k <= n={n}, got k={k}")
        if n >= 2**31:
            raise ValueError(f"at most 2^31 - 1 rows are supported, got n={n}")
        self.n, self.k, self.mode = int(n), int(k), mode
        self.code = MODE_CODES[mode]
        self.seed = seed_u64(seed)
        self.half, self.mask = feistel_shape(self.n)

    def batch(self, t: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows (int32, (k,)) of ``A_t`` and their first-occurrence mask, None when
        the batch cannot hold a repeat.
        """
        n, k = self.n, self.k
        j = np.arange(k, dtype=np.int64)
        if self.mode == "without_replacement":
            return permute(j, n, stream_key(self.seed, t)).astype(np.int32), None
        if self.mode == "with_replacement":
            rows = uniform_rows(n, stream_key(self.seed, t), j).astype(np.int32)
            return rows, first_occurrences(rows)
        p0 = t * k
        e0, q0 = divmod(p0, n)
        if q0 + k <= n:                                            # inside epoch e0
            return permute(q0 + j, n, stream_key(self.seed, e0)).astype(np.int32), None
        tail = n - q0                                              # straddles e0 and e0 + 1
        rows = np.empty(k, dtype=np.int64)
        rows[:tail] = permute(q0 + j[:tail], n, stream_key(self.seed, e0))
        rows[tail:] = permute(j[:k - tail], n, stream_key(self.seed, e0 + 1))
        first = np.ones(k, dtype=bool)
        first[tail:] = permute(rows[tail:], n, stream_key(self.seed, e0), inverse=True) < q0
        return rows.astype(np.int32), first

    def epoch(self, e: int) -> np.ndarray:
        """The rows of epoch ``e`` of ``"epoch"`` sampling in order, int32 (n,): the rows of
        the batches of one row ``e n .. e n + n - 1``, all at once."""
        return permute(np.arange(self.n), self.n, stream_key(self.seed, e)).astype(np.int32)

    def batches(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """The batches ``t0 .. t1 - 1`` stacked: ``(rows, first)`` of shape ``(t1 - t0, k)``.

        ``first`` is all True where :meth:`batch` returns None.
        """
        rows = np.empty((t1 - t0, self.k), dtype=np.int32)
        first = np.ones((t1 - t0, self.k), dtype=bool)
        for i, t in enumerate(range(t0, t1)):
            r, f = self.batch(t)
            rows[i] = r
            if f is not None:
                first[i] = f
        return rows, first
