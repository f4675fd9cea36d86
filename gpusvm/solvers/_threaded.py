"""SDCA on several threads of one process: row blocks, each thread its own copy of ``v``, the
copies combined at compiled barriers.

:class:`BlockSDCA` runs the iterations of :func:`gpusvm.solvers.sdca.sdca` (batches of one
row, ``"epoch"`` sampling) on ``k`` row blocks of about equal nonzeros, one thread each
(a block: runs of :data:`ROW_RUN` rows taken in a seeded random order, so every block is a
sample of the data whatever the rows' order: contiguous ranges of a set sorted by its labels
held one class each, and the fit stalled above ``tol``), in one compiled call per segment
(:func:`gpusvm.backends._sdca_threads_nb.sdca_block`, whose docstring has the arithmetic).  A thread steps through its block's rows (the block's
own epochs, a permutation each, shuffled by the thread from the block's seed) against its own
copy of ``v``; after every round (:data:`ROUND_NNZ` nonzeros of a thread's steps, at most
:data:`ROUND_EPOCHS` of a pass over its block) the threads meet at a barrier and add up their
changes to the :data:`HOT_COLUMNS` columns that most rows share, and to every column every
:data:`FULL_EVERY_D` ``d`` nonzeros (and at the segment's end).  The blocks' steps are SDCA
steps (Takáč et al. 2013, eq. 15, ``b = 1``) on the CoCoA+ subproblem (Ma et al. 2015, eq. 9,
``gamma = 1``): each block's step is ``sigma'`` times shorter and moves its own copy ``sigma'``
times as far, its change enters the combination divided by ``sigma'``.  ``sigma'`` starts at
:func:`start_sigma`: 1.1 on 2 threads; on more, the :data:`HOT_COLUMNS` (flagged in a bitset
the steps read) take at least ``0.55 k``, the others ``1 + 0.1 (k - 1)``.  The certificate of
:func:`~gpusvm.solvers.sdca.sdca` (``w(alpha)`` recomputed from ``alpha``, on the threads) is
unchanged and stays the stopping rule; a segment after which the dual fell is undone and taken
again with a larger ``sigma'`` (:meth:`BlockSDCA.undo`), so the certified duals never fall.

Why these rounds (measured on ``benchmarks/bench_threads.py``'s set, 1.56 x 10^7 nonzeros,
10^5 columns, squared hinge): CoCoA+ rounds of 0.02 passes through Python (the previous form
of this class) stall near the optimum (the blocks' steps on the shared columns disagree for
too long), rounds of 0.001-0.002 passes keep pace with one thread's epochs, and only compiled
barriers make rounds that short cheap (a Python round trip costs 15-35 us, a round here is
about 100 us of a thread's work); the columns few rows share interact little and are
combined rarely.  ``sigma' = 1`` diverges there (every block moves the intercept's column, in
every row, for the others too), 1.1 takes about 10 % more epochs than one thread, and with
CoCoA+'s safe ``sigma' = k`` the gap crawls near the optimum.  Each thread's rows cost no more than one thread's:
2 threads ran an epoch 2.35-2.45x faster than the one-thread loop (BENCHMARKS.md).

Determinism: the blocks, their rows' order, the rounds and the order of every sum are
functions of the data, the seed and ``k`` only, so a fit with the same seed and the same ``k``
is the same bit for bit.  It is not the one-thread fit (another sequence of coordinate
steps), and is certified to the same ``tol``.
"""

from __future__ import annotations

import math

import numpy as np

from .._threads import nnz_blocks
from ..backends._state import S_A, S_ASUMD, S_B, S_VSQ
from ._sampling import block_seed

#: a round's nonzeros per thread between two combinations of the hot columns (about 100 us of
#: a thread's steps; 4,096 took as many epochs, 16,384 fewer barriers)
ROUND_NNZ = 16_384
#: ... and at most this share of a pass over a thread's block: longer rounds stall near the
#: optimum (their steps on shared columns disagree for too long; measured: rounds of 0.02
#: passes stalled, of 0.005 and 0.001 kept pace with one thread)
ROUND_EPOCHS = 0.002
#: rows go to the blocks in runs of this many consecutive rows (runs in a seeded random
#: order): each block a sample of the data, while a thread's duals fill whole cache lines
ROW_RUN = 64
#: the columns combined after every round: the most frequent (ties: the lower index)
HOT_COLUMNS = 1024
#: every column is combined after at least this many times ``d`` nonzeros of a thread's
#: steps (a full combination reads and writes ``3 d`` values; 1 and 4 took as many epochs
#: as 16, and longer)
FULL_EVERY_D = 16.0
#: ``sigma' = 1 + SIGMA_PER_THREAD (k - 1)`` at the start of a fit on ``k`` threads, for the
#: columns other than the hot ones: the blocks' steps on them shortened by ``sigma'``
#: (CoCoA+'s subproblem; ``k`` is its safe value).  Measured on 2 threads (squared hinge,
#: 1.56 x 10^7 nonzeros, an intercept): ``sigma' = 1`` diverges, 1.05 and 1.1 take about 10 %
#: more epochs than one thread to a gap of 1e-4, 1.3 about 20 %
SIGMA_PER_THREAD = 0.1
#: the hot columns' ``sigma'`` is at least this times ``k``: a column that many rows share
#: (the intercept's is in every row) is moved by every block for the others too, within a
#: round each block moving it about as far as it alone would, ``k / sigma'`` times in all;
#: above 2 the moves grow from round to round.  On 4 threads a uniform 1.3 overflowed within
#: an epoch; 2.2 on every column took 41 epochs where one thread takes 18.5
SIGMA_SHARE = 0.55


def start_sigma(k: int) -> tuple[float, float]:
    """``(sigma'`` of the columns, ``sigma'`` of the hot columns``)`` on ``k`` threads:
    ``1 + SIGMA_PER_THREAD (k - 1)`` and at least ``SIGMA_SHARE k``, both at most ``k``."""
    cold = min(float(k), 1.0 + SIGMA_PER_THREAD * (k - 1))
    return cold, float(min(k, max(cold, SIGMA_SHARE * k)))


def ask_ahead(backend) -> None:
    """Have the block loop :class:`BlockSDCA` runs on ``backend``'s arrays (a one-output
    numba SDCA fit on one thread, its dual initialised) compiled ahead into numba's disk
    cache by the compiling process (:class:`gpusvm.backends._compile_nb.CompileAhead`), on a
    host where fits may run on threads: a fit of more nonzeros loads it rather than
    compiling at its size (3 s).  The arguments have the types :meth:`BlockSDCA.segment`
    passes; their sizes do not matter."""
    from .._threads import affinity_cores  # noqa: PLC0415
    if affinity_cores() < 2:
        return
    from ..backends import _sdca_threads_nb as nb  # noqa: PLC0415
    from ..backends._compile_nb import AHEAD  # noqa: PLC0415

    def ask(dispatcher, args):
        AHEAD.ready(dispatcher, args, early=True, later=True)

    indptr, indices, data, yf, sw, af, inv_q, row_sq, active = backend.sdca_block_arrays()
    dt = backend.V.dtype
    i64, f64 = np.zeros(1, dtype=np.int64), np.zeros(1)
    bits = np.zeros(1, dtype=np.uint8)
    ask(nb.column_counts, (indices, 1))
    ask(nb.hot_row_sq, (indptr, indices, data, bits, f64))
    ask(nb.sdca_block, (
        0, 2, indptr, indices, data, yf, sw, af, inv_q, row_sq, np.zeros(1, dtype=np.int32),
        np.zeros(1, dtype=np.int32), np.uint64(0), i64, np.zeros((1, 1), dtype=dt), np.zeros((1, 1), dtype=dt),
        np.zeros((1, 2, 1)), i64.copy(), bits, f64, 1, i64.copy(), np.zeros(8), active,
        np.zeros(4), False, False, False))


class BlockSDCA:
    """The segments of a one-output, one-row-batch SDCA fit on ``pool``'s threads.

    Parameters
    ----------
    backend : NumbaBackend
        The fit's backend, its dual state initialised (``init_dual_m``); its ``alpha`` is
        updated in place by every segment and its ``V`` left at the combined ``v`` (its norm
        and ``sum alpha`` recomputed).
    pool : gpusvm._threads.BlockPool
        ``k = pool.k`` threads and blocks.
    lam : float
    plan : SDCAPlan
        The fit's plan: its ``loss`` and ``shrinking`` (each block its own bounds, the active
        set shared, each row in one block); the blocks take ``beta = sigma'``.
    sampling : str
        ``"epoch"`` only (the blocks' permutations).
    seed : int
    """

    def __init__(self, backend, pool, lam, plan, sampling, seed):
        from ..backends import _sdca_threads_nb as nb  # noqa: PLC0415  (threads only)
        from ..backends._compile_nb import AHEAD  # noqa: PLC0415
        AHEAD.settle((nb.column_counts, nb.sdca_block, nb.hot_row_sq))   # asked by ask_ahead
        column_counts = nb.column_counts

        if sampling != "epoch":
            raise ValueError(f"threaded SDCA samples by epoch, got sampling={sampling!r}")
        self.backend, self.pool = backend, pool
        X, n, d = backend.X, backend.n, backend.d
        self.n = n
        # the blocks: runs of a seeded permutation of the rows (each ascending), so that every
        # block is a random sample of the data: contiguous row ranges of a set sorted by class
        # gave each block one class, and the blocks' steps then disagree on the intercept
        # and the shared columns for as long as the fit runs (it stalled above tol)
        # (by runs of ROW_RUN rows: two threads writing the duals of neighbouring rows shared
        # their cache lines, and a thread's rows spread over the whole matrix)
        from ..backends._sdca_threads_nb import block_epoch  # noqa: PLC0415  (threads only)
        runs = np.empty(-(-n // ROW_RUN), dtype=np.int32)
        block_epoch(runs, runs.size, np.uint64(block_seed(seed, -1)), pool.k)
        rows = (runs[:, None].astype(np.int64) * ROW_RUN + np.arange(ROW_RUN)).ravel()
        self.rows = rows[rows < n].astype(np.int32)
        bounds = nnz_blocks(X.indptr, pool.k, self.rows)
        self.blocks = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
        for lo, hi in self.blocks:
            self.rows[lo:hi].sort()      # ascending within a block: its rows in storage order
        self.k = k = len(self.blocks)
        self.keys = [np.uint64(block_seed(seed, i)) for i in range(k)]
        self.perm = np.empty((k, max(hi - lo for lo, hi in self.blocks)), dtype=np.int32)
        self.position = [0] * k
        counts = column_counts(X.indices, d)
        self.hot = np.sort(np.argsort(-counts, kind="stable")[:min(d, HOT_COLUMNS)])
        dt = backend.V.dtype
        self.W = np.empty((k, d), dtype=dt)
        self.base = np.empty((k, d), dtype=dt)
        self.D = np.zeros((k, 2, d))
        self.bar = np.zeros(16, dtype=np.int64)
        self.shr = np.tile(np.array([np.inf, -np.inf, -np.inf, np.inf]), (k, 1))
        self.per_row = max(1.0, X.nnz / max(n, 1))
        self.squared = plan.loss == "squared_hinge"
        self.weighted = backend.sample_weight is not None
        self.shrinking = bool(plan.shrinking) and not self.weighted and not self.squared
        self.lam = float(lam)
        self.rounds = 0
        self.sigma, self.sigma_hot = start_sigma(k)
        from ..backends._sdca_threads_nb import hot_row_sq  # noqa: PLC0415  (threads only)
        self.bits = np.zeros((d + 7) // 8, dtype=np.uint8)
        np.bitwise_or.at(self.bits, self.hot >> 3, (1 << (self.hot & 7)).astype(np.uint8))
        self.hot_sq = np.zeros(n if self.sigma_hot != self.sigma else 0)   # read only then
        if self.hot_sq.size:
            hot_row_sq(X.indptr, X.indices, X.data, self.bits, self.hot_sq)
        self.undone = 0
        self._saved = None

    def segment(self, t0: int, t1: int) -> None:
        """``t1 - t0`` coordinate steps shared by the blocks in proportion to their rows
        (``V`` left at the combined ``v``); the state before them is kept for :meth:`undo`."""
        from ..backends._sdca_threads_nb import sdca_block  # noqa: PLC0415  (threads only)
        from ..backends.numba_ import (BATCH_COMPILE_SECONDS,  # noqa: PLC0415
                                       _announce_compilation)

        steps = int(t1) - int(t0)
        if steps <= 0:
            return
        be, k, n = self.backend, self.k, self.n
        self._saved = (be.alpha.copy(), be.V.copy(), be.sm.copy())
        shares = [(steps * hi) // n - (steps * lo) // n for lo, hi in self.blocks]
        length = min(ROUND_NNZ, max(self.per_row, ROUND_EPOCHS * be.X.nnz / k))
        rounds = max(1, math.ceil(steps * self.per_row / k / length))
        full_every = max(1, math.ceil(FULL_EVERY_D * be.d / length))
        cums = [(s * np.arange(rounds + 1, dtype=np.int64)) // rounds for s in shares]
        v = be.V.reshape(-1)
        self.W[...] = v
        self.base[...] = v
        self.bar[:] = 0
        indptr, indices, data, yf, sw, af, inv_q, row_sq, active = be.sdca_block_arrays()

        def args(i):
            lo, hi = self.blocks[i]
            fprm = np.array([self.lam * n, be.sm[S_A, 0], be.sm[S_B, 0], self.sigma, hi - lo,
                             self.position[i], lo, self.sigma_hot])
            return (i, k, indptr, indices, data, yf, sw, af, inv_q, row_sq, self.rows, self.perm[i],
                    self.keys[i], cums[i], self.W, self.base, self.D, self.hot, self.bits,
                    self.hot_sq, full_every,
                    self.bar, fprm, active, self.shr[i],
                    self.weighted, self.squared, self.shrinking)

        first = args(0)
        sig = tuple(sdca_block.typeof_pyval(a) for a in first)
        if sig not in sdca_block.overloads:          # compiled (or loaded) before the threads
            _announce_compilation((id(sdca_block), str(data.dtype)), sdca_block, first,
                                  data.dtype, "the threaded SDCA loop",   # 3.0 s measured
                                  seconds=BATCH_COMPILE_SECONDS, stacklevel=5)
            sdca_block.compile(sig)
        self.pool.run(lambda i: sdca_block(*(first if i == 0 else args(i))), k)
        for i, s in enumerate(shares):
            self.position[i] += s
        self.rounds += rounds
        v[...] = self.W[0]                             # every copy holds the combined v
        w64 = self.W[0].astype(np.float64)
        be.sm[S_VSQ, 0] = float(np.einsum("i,i->", w64, w64))
        be.sm[S_ASUMD] = be.alpha.sum(axis=0)

    def undo(self) -> bool:
        """Undo the last segment (its dual fell: the blocks' steps were too long for how much
        they interact) and double ``sigma' - 1`` (at least to ``1.1``, at most ``k``, CoCoA+'s
        safe value, which keeps the dual from falling but slows every step; the hot columns'
        at least as large); False, and nothing undone, when ``sigma'`` is ``k`` already."""
        if self._saved is None or self.sigma >= self.k:
            return False
        be = self.backend
        be.alpha[...], be.V[...], be.sm[...] = self._saved
        self._saved = None
        self.sigma = min(float(self.k), 1.0 + 2.0 * max(self.sigma - 1.0, 0.05))
        self.sigma_hot = max(self.sigma_hot, self.sigma)    # hot_sq: read while they differ,
        self.undone += 1                                     # as they did from the start
        return True

    def sdca_unshrink_m(self) -> None:
        """Every row back into the active set, every block's bounds forgotten."""
        self.backend.sdca_unshrink_m()
        self.shr[:] = (np.inf, -np.inf, -np.inf, np.inf)


__all__ = ["BlockSDCA", "ROW_RUN", "ask_ahead", "ROUND_NNZ", "ROUND_EPOCHS", "HOT_COLUMNS",
           "FULL_EVERY_D",
           "SIGMA_PER_THREAD", "SIGMA_SHARE", "start_sigma"]
