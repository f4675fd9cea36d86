"""Mini-batches from a counter: the rows of ``A_t`` as a pure function of ``(seed, t, j)``.

Every backend computes the batches where it uses them with the same wrapping ``uint64`` /
``uint32`` arithmetic, so a seed gives every backend bit-identical batches with no host work
per iteration (docs/algorithms.md, "Mini-batches from a counter").  This module is the NumPy
reference (vectorised over ``j``); :mod:`gpusvm.backends._counter_nb` has it compiled and
``kernels/sampler.cuh`` as CUDA device functions (``gpusvm_sample``).

``M64`` is splitmix64's finaliser, ``F32`` murmur3's.  A batch (``c = t``) or an epoch
(``c = e``) has the key :func:`stream_key`; ``pi_key`` is a keyed bijection of
``{0 .. n-1}``: a ROUNDS-round Feistel network on ``{0 .. 2^h - 1}`` (:func:`feistel_shape`,
:func:`round_keys`) re-applied while ``x >= n`` (cycle walking; ``2^h < 4n``, so fewer than 4
walks on average).  ``"without_replacement"``: ``A_t = {pi_key(seed, t)(j) : j < k}``;
``"epoch"``: position ``p = t k + j`` is row ``pi_key(seed, e)(p mod n)`` of epoch ``e = p div
n``, and a row from epoch ``e + 1`` repeats one of epoch ``e``'s exactly when its inverse
image under ``pi_e`` is ``>= q_0``, the batch's first position in epoch ``e`` (an O(1) test);
``"with_replacement"``: :func:`uniform_rows`.  The mask of first occurrences (SDCA's repeated
rows must not step twice) is None when a batch holds no repeat by construction.
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
    of a generator (seeded alike: the same stream), or fresh OS entropy for None."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return int(seed) & _MASK64
    if isinstance(seed, np.random.RandomState):
        return int(seed.randint(0, 2**63 - 1, dtype=np.int64)) << 1 | int(seed.randint(0, 2))
    rng = np.random.default_rng(seed)
    return int(rng.integers(0, 2**64, dtype=np.uint64))


def feistel_shape(n: int) -> tuple[int, int]:
    """``(half, mask) = (h/2, 2^(h/2) - 1)`` of the Feistel network on ``{0 .. 2^h - 1}``,
    ``h`` the smallest even number ``>= 2`` with ``2^h >= n``."""
    h = 2
    while (1 << h) < n:
        h += 2
    return h // 2, (1 << (h // 2)) - 1


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


def block_seed(seed: int, block: int) -> int:
    """The counter stream's seed of row block ``block``: ``key(seed, block)``, a stream per
    block (the distributed SDCA's blocks and the threads' of one fit)."""
    return stream_key(int(seed) & (2**64 - 1), int(block))


def round_keys(key: int) -> np.ndarray:
    """The ``ROUNDS`` 32-bit round keys ``low32(M64(key + (r + 1) G))`` (``uint64`` array)."""
    r = np.arange(1, ROUNDS + 1, dtype=_U64)
    with np.errstate(over="ignore"):
        z = _U64(key) + r * _U64(GOLDEN)
    return mix64(z) & _U64(0xFFFFFFFF)


def _feistel(x, rk, half: int, mask: int, inverse: bool = False):
    hs, mk = _U64(half), _U64(mask)
    left, right = x >> hs, x & mk
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
    hi, lo, nn = u >> _U64(32), u & _U64(0xFFFFFFFF), _U64(n)   # 64 x 64-bit product's high word
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
    permutation every epoch, read k rows at a time).  ``seed``: see :func:`seed_u64`; ``t`` is
    0-based (the solvers' iteration ``t + 1``).  Attributes: ``seed``, the 64-bit seed every
    backend uses; ``code = MODE_CODES[mode]``; ``half, mask = feistel_shape(n)``.
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
        """Rows (int32, (k,)) of ``A_t`` and their first-occurrence mask (None: no repeat)."""
        n, k = self.n, self.k
        j = np.arange(k, dtype=np.int64)
        if self.mode == "without_replacement":
            return permute(j, n, stream_key(self.seed, t)).astype(np.int32), None
        if self.mode == "with_replacement":
            rows = uniform_rows(n, stream_key(self.seed, t), j).astype(np.int32)
            return rows, first_occurrences(rows)
        e0, q0 = divmod(t * k, n)
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
        """The rows of epoch ``e`` of ``"epoch"`` sampling in order, int32 (n,): those of the
        positions ``e n .. e n + n - 1``, all at once."""
        return permute(np.arange(self.n), self.n, stream_key(self.seed, e)).astype(np.int32)

    def batches(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """The batches ``t0 .. t1 - 1`` stacked: ``(rows, first)`` of shape ``(t1 - t0, k)``,
        ``first`` all True where :meth:`batch` returns None."""
        rows = np.empty((t1 - t0, self.k), dtype=np.int32)
        first = np.ones((t1 - t0, self.k), dtype=bool)
        for i, t in enumerate(range(t0, t1)):
            r, f = self.batch(t)
            rows[i] = r
            if f is not None:
                first[i] = f
        return rows, first
