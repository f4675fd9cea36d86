"""SDCA on several threads of one process: CoCoA+ rounds over row blocks, as :mod:`gpusvm.dask`.

:class:`BlockSDCA` runs the iterations of :func:`gpusvm.solvers.sdca.sdca` (batches of one
row) as rounds: each of ``k`` contiguous row blocks (about equal nonzeros) runs its backend's
own SDCA segment (``sdca_segment_m``, the one source) on its local subproblem (Ma et al.
2015, eq. 9) from the round's ``w``, on its own thread; the round then moves every block's
duals by the ``gamma`` in ``[0, 1]`` that maximises the dual along the sum of their changes
(:func:`gpusvm.solvers._cocoa.line_search`, the distributed SDCA's aggregation), so the dual
never decreases.  The subproblems' ``sigma'`` follows the blocks' measured interaction: it
starts at 1 (plain SDCA on each block) and is then, each round, the last round's
``||sum_k u_k||^2 / sum_k ||u_k||^2`` clipped to ``[1, k]`` (``u_k`` a block's change of
``w``; ``k`` is CoCoA+'s safe value, reached when the blocks move ``w`` alike), as the
aggressive variant adapts ``beta`` to the batch (Takáč et al. 2013, Alg. 2).  Rounds are
short (:data:`ROUND_EPOCHS`).  The duality-gap certificate of
:func:`~gpusvm.solvers.sdca.sdca` is computed as on one thread and stays the stopping rule.

Off by default (:data:`gpusvm._threads.SDCA_THREAD_MIN_NNZ`, with the measurements): the
epochs are nearly those of one thread (22.7 against 21 on 1.7 x 10^7 nonzeros), but each
round's bookkeeping (the blocks' ``alpha`` before and after, ``w`` copied and compared) reads
every row and column where it should read only what the round touched, and rounds this long
stall near the optimum (the blocks' steps on the columns most rows share disagree).  What
would pay, measured with a prototype of this class on ``bench_threads.py``'s set (1.56 x
10^7 nonzeros, 10^5 columns, no intercept, sigma' = 1.15, gamma = 1): the blocks keep their
own ``w`` between rounds, the 1,024 most frequent columns are combined every 0.002 passes and
all columns every 0.05; the gap then follows full combinations every 0.002 passes (3.7e-6
against 3.5e-6 after 16 epochs; one thread 1.1e-6).  With 0.002 passes (about 65 us of a
block's work) a round needs a barrier of a microsecond or two, which only compiled code
(atomics) gives; Python's cost 15-35 us.

Determinism: a block's rows, sampler seed and counter positions, the rounds' lengths and the
order of every sum over blocks are functions of the data, the seed and ``k`` only, so a fit
with the same seed and the same ``k`` is the same bit for bit.  It is not the one-thread fit
(another sequence of coordinate steps, certified to the same ``tol``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .._threads import nnz_blocks
from ..backends._state import S_A, S_ASUMD, S_VSQ
from ..backends.base import SDCAPlan
from ._cocoa import commit, line_search, step_sums
from ._sampling import CounterSampler, stream_key


#: the coordinate steps of a round, in passes over the rows (each block its share): shorter
#: rounds keep the blocks' points closer.  2 blocks, squared hinge, tol 1e-6: on 1,500 rows
#: (tests/test_threads.py's set) one-pass rounds took 76 epochs without an intercept and
#: did not certify in 100 with one, rounds of 0.02 passes 17.5 and 51.5 (one thread: 16.5
#: and 27.4); on 1.7 x 10^5 rows (benchmarks/bench_threads.py's set) 25.7 against 18.6.  A
#: round costs a few passes over ``w``, so it holds at least :data:`ROUND_MIN_D` times ``d``
#: nonzeros
ROUND_EPOCHS = 0.02
ROUND_MIN_D = 4


def block_seed(seed: int, block: int) -> int:
    """The counter stream's seed of one block (as the distributed SDCA's)."""
    return stream_key(int(seed) & (2**64 - 1), int(block))


def row_block(X, lo: int, hi: int):
    """Rows ``lo .. hi`` of the CSR ``X`` sharing its ``data`` and ``indices`` (no copy)."""
    a, b = int(X.indptr[lo]), int(X.indptr[hi])
    blk = sp.csr_matrix((X.data[a:b], X.indices[a:b], X.indptr[lo:hi + 1] - a),
                        shape=(hi - lo, X.shape[1]), copy=False)
    blk.has_canonical_format = X.has_canonical_format
    blk.has_sorted_indices = X.has_sorted_indices
    return blk


class BlockSDCA:
    """The segments of a one-output, one-row-batch SDCA fit on ``pool``'s threads.

    Parameters
    ----------
    backend : NumbaBackend
        The fit's backend, its dual state initialised (``init_dual_m``); its ``alpha`` is
        updated in place by every segment and its ``V`` left at the running ``w(alpha)``.
    pool : gpusvm._threads.BlockPool
        ``k = pool.k`` threads and blocks.
    lam : float
    plan : SDCAPlan
        The fit's plan (its ``loss`` and ``shrinking``, each block's own active set; the
        blocks take ``beta = 1``).
    sampling : str
    seed : int
    """

    def __init__(self, backend, pool, lam, plan, sampling, seed):
        self.backend, self.pool, self.k = backend, pool, pool.k
        self.lam, self.loss = float(lam), plan.loss
        X, n = backend.X, backend.n
        self.n = n
        self.bounds = nnz_blocks(X.indptr, self.k)
        sw = backend.sample_weight
        self.blocks, self.samplers, self.position = [], [], []
        for i in range(self.k):
            lo, hi = int(self.bounds[i]), int(self.bounds[i + 1])
            if hi <= lo:
                continue
            be = type(backend)(row_block(X, lo, hi), backend.y[lo:hi],
                               None if sw is None else sw[lo:hi])
            be.init_state_m()
            be.init_dual_m(1.0, plan.loss)
            be.alpha = backend.alpha[lo:hi]              # a view: the blocks' steps are the fit's
            self.blocks.append((be, lo, hi))
            self.samplers.append(CounterSampler(hi - lo, 1, sampling, block_seed(seed, i)))
            self.position.append(0)
        self.plan = plan
        self.sigma = 1.0
        self.rounds = 0
        self.gammas: list = []

    def segment(self, t0: int, t1: int) -> None:
        """``t1 - t0`` coordinate steps, shared by the blocks in proportion to their rows, as
        rounds of about :data:`ROUND_EPOCHS` passes (``V`` left at the new ``w``)."""
        steps = int(t1) - int(t0)
        if steps <= 0:
            return
        be = self.backend
        per_row = max(1.0, self.backend.X.nnz / self.n)
        length = max(self.n * ROUND_EPOCHS, ROUND_MIN_D * self.backend.d / per_row)
        rounds = max(1, math.ceil(steps / length))
        W = np.asarray(be.V, dtype=np.float64) * be.sm[S_A]
        for r in range(rounds):
            share = (steps * (r + 1)) // rounds - (steps * r) // rounds
            W = self._round(W, share)
        be._resync(W)                                   # V = w(alpha) as rounded, its norms

    def _round(self, W, share: int):
        """One CoCoA+ round of ``share`` coordinate steps in all; returns the new ``w``."""
        V0 = W.astype(self.backend.V.dtype)
        Wb = V0.astype(np.float64)                      # the round's point, as the blocks hold it
        n = self.n
        lens = [max(1, (share * (hi - lo)) // n) for _, lo, hi in self.blocks]
        sigma = self.sigma
        pl = self.plan
        plans = [SDCAPlan(lam=self.lam * n / (sigma * (hi - lo)), beta_b=1.0, theta=pl.theta,
                          aggressive=False, shrinking=pl.shrinking, loss=pl.loss)
                 for _, lo, hi in self.blocks]

        def run(i):
            be, lo, hi = self.blocks[i]
            be.V[...] = V0
            be.sm[S_A] = 1.0
            be.sm[S_VSQ] = np.einsum("ij,ij->j", Wb, Wb)
            be.sm[S_ASUMD] = be.alpha.sum(axis=0)
            before = be.alpha.copy()
            p = self.position[i]
            be.sdca_segment_m(self.samplers[i], p, p + lens[i], plans[i])
            after = be.alpha.copy()
            u = np.asarray(be.V, dtype=np.float64)
            u *= be.sm[S_A]
            u -= Wb
            u /= sigma
            b, q = step_sums(before, after, None if be.sample_weight is None
                             else be.sample_weight, self.loss)
            return before, after, u, b, q, np.einsum("ij,ij->", u, u)

        res = self.pool.run(run, len(self.blocks))
        parts = np.array([x[5] for x in res])
        U = res[0][2]
        for x in res[1:]:                               # in block order
            U += x[2]
        b, q = res[0][3], res[0][4]
        for x in res[1:]:
            b, q = b + x[3], q + x[4]
        wu = np.einsum("ij,ij->j", Wb, U)
        uu = np.einsum("ij,ij->j", U, U)
        gamma = line_search(wu, uu, b, q, self.lam, n)
        if parts.sum() > 0:
            self.sigma = float(min(len(res), max(1.0, uu.sum() / parts.sum())))
        for (be, _, _), x in zip(self.blocks, res):
            be.alpha[...] = commit(x[0], x[1], gamma)
        for i in range(len(self.blocks)):
            self.position[i] += lens[i]
        self.rounds += 1
        self.gammas.append(float(np.min(gamma)))
        Wb += gamma * U
        return Wb

    def sdca_unshrink_m(self) -> None:
        """Every block's rows back into its active set (``sdca_unshrink_m``)."""
        for be, _, _ in self.blocks:
            be.sdca_unshrink_m()


__all__ = ["BlockSDCA", "block_seed", "row_block"]
