"""Compiled CPU backend: the general path of :mod:`gpusvm.backends._general` as numba loops.

:class:`NumbaBackend` runs the NumPy reference's segments and products as compiled loops
(:mod:`gpusvm.backends._loops_nb`, :mod:`gpusvm.backends._csr_nb`), the iterates equal to
rounding: a NumPy iteration pays 80-160 us of overhead where a row's work is under a
microsecond.  Compilation: :class:`CompilationNotice`, docs/architecture.md, BENCHMARKS.md.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np

from . import numba_available
from ._state import S_A, S_ASUMD, S_VSQ
from .numpy_ import NumpyBackend

try:
    import numba
except ImportError:  # pragma: no cover - exercised through a monkeypatched import in the tests
    numba = None

NUMBA_MISSING = ("backend='numba' needs numba, which cannot be imported; install it with "
                 "`pip install \"numba>=0.59\"` (a dependency of gpusvm), or use backend='numpy'")

if numba is not None:
    from . import _csr_nb as csr
    from ._compile_nb import AHEAD, in_disk_cache
    from ._counter_nb import drawn_rows, epoch_order, sampler_state
    from ._loops_nb import N_WORK, SCHEDULE_CODES, pegasos_loop, sdca_loop

#: epoch-order entries (int32) held at once, 32 MiB (one epoch at least): longer runs are split
ORDER_ENTRIES = 1 << 23
#: batches whose drawn rows NumPy makes at once while :func:`drawn_rows` compiles ahead
DRAWN_BY_NUMPY = 1024


class NumbaBackend(NumpyBackend):
    """The NumPy reference backend with its segments and products compiled by numba.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        Training data, CSR (canonical, as the estimators prepare it), float32 or float64.
    y : ndarray of shape (n,) or (n, M)
        Labels in {-1, +1}, same dtype as ``X``.
    sample_weight : ndarray of shape (n,) or (n, M), optional

    Raises
    ------
    ImportError
        When numba cannot be imported.

    Notes
    -----
    The reference's state and dtypes; ``X`` never copied.  Deterministic: one thread, no
    atomics, no BLAS.  Batches of several rows add an int32 ``d``-vector and a column scratch.
    """

    name = "numba"

    def __init__(self, X, y, sample_weight=None) -> None:
        if numba is None or not numba_available():
            raise ImportError(NUMBA_MISSING)
        super().__init__(X, y, sample_weight)
        self._nb_canonical = bool(X.has_canonical_format)
        # several outputs narrowed to one (``outputs_m``) keep their loop and products: a
        # multiclass fit compiles no one-output code (2.5-3.5 s) for its last segments
        self._nb_one = self.n_outputs == 1
        self._nb_smp = self._nb_key = None
        self._nb_held = (0, 0)            # the epochs whose rows the order holds: first, count
        self._nb_asked = False            # the products asked for ahead (CompileAhead)
        self._nb_loops = set()            # the loops made ready (compiled or loaded)
        self._nb_eo = False               # epoch_order compiled for this backend's arrays
        self._nb_dr = False               # drawn_rows compiled for them
        self._nb_threaded = None          # the certificates' products on threads (use_threads)
        self._nb_ready = set()            # helpers compiled for them: not asked again (its
                                          # argument types cost ~0.5 ms a certificate)
        self._nb_seg = None               # the segment minimum's scratch (segment_point_one)

    def use_threads(self, pool) -> int:
        """Run the certificates' products (``decision_function_m``, ``dual_weights_m``) on the
        threads of ``pool`` (a :class:`gpusvm._threads.BlockPool`; None: one thread, as by
        default); returns the threads they use.  ``X w`` stays bit for bit; ``X^T (alpha y)``
        adds row blocks' partial sums in block order (:mod:`gpusvm.backends._threaded`)."""
        from ._threaded import ThreadedCSR  # noqa: PLC0415  (only a threaded fit needs it)
        self._nb_threaded = None if pool is None or pool.k <= 1 else ThreadedCSR(self.X, pool)
        return 1 if self._nb_threaded is None else pool.k

    def _row_sq_norms(self) -> np.ndarray:
        """``||x_i||^2`` in float64 straight from ``X.data``."""
        out = np.empty(self.n, dtype=np.float64)
        csr.row_sq_norms(self.X.indptr, self.X.data, out)
        return out

    def _nb_csr(self):
        return self.X.indptr, self.X.indices, self.X.data

    def _nb_labels(self):
        """``(Y, Y flat, weights)``; weights an empty (0, 0) array when there are none."""
        sw = self.sample_weight
        return self.Y, self.Y.reshape(-1), np.empty((0, 0)) if sw is None else sw

    def _nb_prefetch_v(self) -> bool:
        """Whether ``V`` exceeds the L2 cache (then the loops prefetch its lines)."""
        return self.V.nbytes > l2_cache_bytes()

    def _nb_work(self, k: int):
        """Work arrays of the loops for batches of ``k`` rows (once per ``k`` and ``M``)."""
        M = self.n_outputs
        if self._nb_key != (k, M):
            row = k == 1 and self._nb_canonical
            cap = M if row else max(M, min(self.d, k * int(np.diff(self.X.indptr).max(initial=0))))
            self._nb_wrk = {
                "m": np.empty((k, M)), "delta": np.empty((k, M)), "coef": np.empty((k, M)),
                "slot": np.full(0 if row else self.d, -1, dtype=np.int32),
                "acc": np.empty((cap, M)), "touched": np.empty(cap, dtype=np.int32),
                "wk": np.zeros((N_WORK, M)), "tmp": np.empty(1, dtype=self.dtype), "z": np.empty(M),
                "opt": np.empty((4, k)), "so": np.empty(2 * k, dtype=np.int64)}
            self._nb_key = (k, M)
        return self._nb_wrk

    def _nb_sampler(self, sampler):
        """``(smp, ring, ringf, ringh, rk, ecache, stamp, order, table)`` of ``sampler``: its
        parameters, the batches drawn ahead, the state of ``_counter_nb``, made once."""
        if self._nb_smp is None or self._nb_smp[0] is not sampler:
            k = sampler.k
            smp = (int(sampler.code), int(sampler.n), int(k), np.uint64(sampler.seed),
                   int(sampler.half), int(sampler.mask))
            ring = np.zeros((csr.RING, k), dtype=np.int32)
            ringf = np.ones((csr.RING, k), dtype=np.bool_)
            ringh = np.zeros(csr.RING, dtype=np.bool_)
            # batches of several rows (or of one row of a CSR that is not canonical) are read
            # from orders made here, whatever the sampling: ``"epoch"``'s epochs
            # (:meth:`_nb_orders`) or the drawn batches' rows (:meth:`_nb_drawn`)
            read = sampler.code == 2 or not (k == 1 and self._nb_canonical)
            stamped = sampler.code == 1 or k > 1
            state = sampler_state(sampler.n if stamped else 1, sampler.n if read else 0,
                                  int(sampler.half))
            if sampler.code != 2:                   # no epoch table
                state = (*state[:4], np.zeros(0, dtype=np.uint32))
            self._nb_smp = (sampler, (smp, ring, ringf, ringh, *state))
            self._nb_held = (0, 0)
        return self._nb_smp[1]

    def _nb_orders(self, sampler, sam, t0: int, t1: int):
        """The epochs' rows of batches ``t0 .. t_end - 1`` (positions ``t0 k .. t_end k - 1``)
        into ``order`` (``order[i]``: epoch ``ecache[2] + i``); returns ``(t_end, sam)``,
        ``sam`` new when ``order`` grew and ``t_end`` ``t1`` or the last batch whose epochs
        :data:`ORDER_ENTRIES` has room for (two epochs at least when a batch straddles)."""
        n, k = sampler.n, sampler.k
        e0 = t0 * k // n
        count = min((t1 * k - 1) // n - e0 + 1, max(1, ORDER_ENTRIES // n))
        if (e0 + count) * n // k <= t0:                # batch t0 runs into the next epoch
            count += 1
        first, held = self._nb_held
        order = sam[7]
        if order.shape[0] < count:            # room for the run's epochs, the held ones kept
            grown = np.empty((count, n), dtype=np.int32)
            grown[:held] = order[:held]
            order = grown
            self._nb_smp = (sampler, (*sam[:7], order, sam[8]))
            sam = self._nb_smp[1]
        smp, rk, ecache, table = sam[0], sam[4], sam[5], sam[8]
        for i in range(count):
            e = e0 + i
            if first <= e0 and e < first + held:          # held in a row at or after i
                if e - first != i:
                    order[i] = order[e - first]
                continue
            args = (n, smp[3], smp[4], smp[5], e, rk, ecache, table, order[i])
            if self._nb_eo or AHEAD.ready(epoch_order, args):
                self._nb_eo = True                # compiled: no more asking
                epoch_order(*args)
            else:
                order[i] = sampler.epoch(e)
        ecache[2] = e0
        self._nb_held = (e0, count)
        return min(t1, (e0 + count) * n // k), sam

    def _nb_drawn(self, sampler, sam, t0: int, t1: int):
        """:meth:`_nb_orders` for ``"with_replacement"`` and ``"without_replacement"``: the rows
        of batches ``t0 .. t_end - 1`` drawn here, position ``p = t k + j`` at ``order[p // n -
        ecache[2], p % n]`` (as an ``"epoch"`` order: the loop reads them alike); returns
        ``(t_end, sam)``."""
        n, k = sampler.n, sampler.k
        e0 = t0 * k // n
        count = min((t1 * k - 1) // n - e0 + 1, max(1, ORDER_ENTRIES // n))
        if (e0 + count) * n // k <= t0:                # batch t0 runs into the next block
            count += 1
        end = min(t1, (e0 + count) * n // k)
        order = sam[7]
        if order.shape[0] < count:        # zeros: the loop prefetches rows past t_end's
            order = np.zeros((count, n), dtype=np.int32)
            self._nb_smp = (sampler, (*sam[:7], order, sam[8]))
            sam = self._nb_smp[1]
        smp, rk, ecache, base = sam[0], sam[4], sam[5], e0 * n
        flat = order.reshape(-1)
        args = (smp[0], n, k, smp[3], smp[4], smp[5], t0, end, base, rk, flat)
        if self._nb_dr or AHEAD.ready(drawn_rows, args):
            self._nb_dr = True
            drawn_rows(*args)
        else:                             # the same rows from NumPy, a few batches at a time
            end = min(end, t0 + DRAWN_BY_NUMPY)
            flat[t0 * k - base:end * k - base] = sampler.batches(t0, end)[0].reshape(-1)
        ecache[2] = e0
        return end, sam

    def _nb_run(self, loop, sampler, by_epoch, csr_, lab, st, t0, t1, prm, wrk,
                seconds=None) -> None:
        """Run ``loop`` over batches ``t0 .. t1 - 1``, compiled first (``"epoch"``: by held
        epochs; ``seconds``: what the compile notice says the loop takes)."""
        t, t1 = int(t0), int(t1)
        full = self._nb_sampler(sampler)
        # a loop reading the epochs' orders gets None for what it never reads (the stamps:
        # the repeats of a batch that straddles two epochs)
        sam = (*full[:3], None, None, *full[5:8], None) if by_epoch else full
        if loop not in self._nb_loops:
            self._nb_loops.add(loop)
            if by_epoch:              # the helpers to a compiling process, before the loop
                self._nb_ask_orders(sampler, full, t)
            self._nb_ask_ahead(early=True)
            _ready_loop(loop, (csr_, lab, st, sam, t, t1, prm, wrk), seconds or COMPILE_SECONDS)
        while t < t1:
            end = t1
            if by_epoch:
                orders = self._nb_orders if sampler.code == 2 else self._nb_drawn
                end, full = orders(sampler, full, t, t1)
                sam = (*full[:3], None, None, *full[5:8], None)
            if not self._nb_asked:
                self._nb_ask_ahead()
            loop(csr_, lab, st, sam, t, end, prm, wrk)
            t = end

    def _nb_ask_orders(self, sampler, full, t: int) -> None:
        """Ask early (:meth:`CompileAhead.ready`) for the function that makes the epochs' or
        drawn batches' rows: a compiling process has it while this one compiles the loop."""
        smp, rk, ecache, order, table = full[0], full[4], full[5], full[7], full[8]
        row = order[0] if order.shape[0] else np.zeros(0, dtype=np.int32)
        if sampler.code == 2:
            AHEAD.ready(epoch_order, (sampler.n, smp[3], smp[4], smp[5], 0, rk, ecache, table,
                                      row), early=True)
        else:
            AHEAD.ready(drawn_rows, (smp[0], sampler.n, sampler.k, smp[3], smp[4], smp[5], t, t,
                                     0, rk, order.reshape(-1)), early=True)

    def _nb_ask_ahead(self, early: bool = False) -> None:
        """Ask once for the certificates' products ahead (not ``X w`` of one output: not NumPy's);
        ``early``: before the loop compiles, for a compiling process only (asked again after)."""
        self._nb_asked = not early
        dual = getattr(self, "alpha", None) is not None          # SDCA's certificates
        if self._nb_one:
            AHEAD.ready(csr.csr_matvec, self._matvec_args(np.zeros(1), 0.0, np.zeros(1)),
                        early=early)
            if dual:
                AHEAD.ready(csr.csr_rmatvec, self._rmatvec_args(np.zeros(1)), early=early)
                AHEAD.ready(csr.segment_point_one, self._segment_args(
                    np.zeros((1, 1)), np.zeros((1, 1)), self.sample_weight, np.zeros(1),
                    np.zeros(1), np.zeros(1), 1.0, "hinge"), early=early)
            return
        M = self.n_outputs
        if dual:
            AHEAD.ready(csr.dual_weights, self._dual_args(1.0, np.zeros((1, M)), np.zeros(M)),
                        early=early)
        AHEAD.ready(csr.csr_matmat, self._matmat_args(np.zeros((1, M)), np.zeros(M),
                                                      np.zeros((1, M))), early=early)

    def _nb_flags(self, sampler):
        """``(one, row, by_epoch, weighted)`` of this fit's segments."""
        sam = self._nb_sampler(sampler)
        row = sampler.k == 1 and self._nb_canonical
        return (self._nb_one, row, sam[7].size > 0, self.sample_weight is not None)

    def pegasos_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` in one compiled call (``NumpyBackend``'s steps)."""
        p = plan
        one, row, by_epoch, weighted = self._nb_flags(sampler)
        loop = pegasos_loop(one, row, by_epoch, bool(p.optimal),
                            row and not by_epoch and sampler.code == 1)
        U = self.U if self.U is not None else np.empty((0, 0))
        w = self._nb_work(p.k)
        prm = (float(p.lam), int(p.k), SCHEDULE_CODES[p.schedule], float(p.eta0 or 0.0),
               float(p.norma_p), bool(p.unreg_bias), float(p.radius), bool(p.averaged),
               int(p.t_avg), float(p.renorm_threshold), self._nb_prefetch_v(), weighted,
               p.loss == "squared_hinge")
        # None for the arrays this loop never reads (each array argument is unboxed by code
        # compiled with the loop): one output and one row read ``tmp`` alone
        if one and row and not p.optimal:
            wrk = (None,) * 6 + (w["tmp"],) + (None,) * 3
        else:
            wrk = (w["m"], w["coef"], None if row else w["slot"], w["acc"], w["touched"],
                   w["wk"], w["tmp"], None if one else w["z"])
            wrk += (w["opt"], w["so"]) if p.optimal else (None, None)
        self._nb_run(loop, sampler, by_epoch, self._nb_csr(), self._nb_labels(),
                     (self.V, self.V.reshape(-1), U, U.reshape(-1), self.sm), t0, t1, prm, wrk,
                     COMPILE_SECONDS if (row or by_epoch and one) and not p.optimal
                     else BATCH_COMPILE_SECONDS)

    def sdca_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` in one compiled call (``NumpyBackend``'s steps)."""
        p = plan
        one, row, by_epoch, weighted = self._nb_flags(sampler)
        squared = p.loss == "squared_hinge"
        shrinking = bool(p.shrinking) and one and row and not weighted and not squared
        loop = sdca_loop(one, row, by_epoch, bool(p.aggressive),
                         row and not by_epoch and sampler.code == 1)
        w = self._nb_work(sampler.k)
        prm = (float(p.lam), self.n, float(p.beta_b), float(p.theta), self._eps,
               self._nb_prefetch_v(), self._active, self._shr, weighted, squared, shrinking)
        # None for the arrays this loop never reads: each array argument is unboxed by code
        # compiled with the loop (a cold multiclass compilation 0.2-0.4 s shorter)
        scalar, fused = one and row, row and not p.aggressive
        wrk = ((None,) * 5 if scalar or fused else
               (w["m"], w["delta"], w["coef"], w["slot"], w["acc"]))
        wrk += (None, None, None) if scalar else (w["touched"], w["wk"], w["z"])
        st = (self.V, self.V.reshape(-1), self.sm, self.alpha, self.alpha.reshape(-1),
              self._inv_q, self.row_sq_norms)
        self._nb_run(loop, sampler, by_epoch, self._nb_csr(), self._nb_labels(), st, t0, t1,
                     prm, wrk, COMPILE_SECONDS if row else BATCH_COMPILE_SECONDS)

    def decision_function_m(self, W, b) -> np.ndarray:
        """``<w_c, x_i> + b_c`` on all rows, float64 (n, M), without an upcast copy of ``X``."""
        W = np.ascontiguousarray(W, dtype=np.float64)
        if self._nb_threaded is not None:
            return self._nb_threaded.mm(W) + np.asarray(b, dtype=np.float64)
        out = np.empty((self.n, W.shape[1]), dtype=np.float64)
        # a writable copy: numba types a read-only array anew (one more compile)
        bb = np.array(np.broadcast_to(np.asarray(b, dtype=np.float64), (W.shape[1],)))
        if self._nb_one and W.shape[1] == 1:
            args = self._matvec_args(W.reshape(-1), float(bb[0]), out.reshape(-1))
            if self._nb_compiled(csr.csr_matvec, args):
                csr.csr_matvec(*args)
            else:                                       # compiling ahead: the same sums
                out[:, 0] = four_lane_matvec(*self._nb_csr(), W.reshape(-1), float(bb[0]))
            return out
        args = self._matmat_args(W, bb, out)
        if not self._nb_compiled(csr.csr_matmat, args):     # compiling ahead: the same sums
            return super().decision_function_m(W, bb)
        csr.csr_matmat(*args)
        return out

    def _matvec_args(self, w, b, out):
        return (*self._nb_csr(), w, b, out, w.nbytes > l2_cache_bytes())

    def _matmat_args(self, W, bb, out):
        return (*self._nb_csr(), W, W.reshape(-1), bb, out, np.empty(W.shape[1]),
                W.nbytes > l2_cache_bytes())

    def _rmatvec_args(self, w):
        return (*self._nb_csr(), self.alpha.reshape(-1), self.Y.reshape(-1), w,
                w.nbytes > l2_cache_bytes())

    def _dual_args(self, lamn, W, vsq):
        M = self.n_outputs
        return (*self._nb_csr(), self.alpha, self.Y, lamn, W, W.reshape(-1), self.V, vsq,
                np.empty(M, dtype=np.int64), np.empty(M), W.nbytes > l2_cache_bytes())

    def _nb_compiled(self, dispatcher, args) -> bool:
        """``AHEAD.ready(dispatcher, args)``, remembered once True (the arguments of each helper
        keep their types for this backend's arrays)."""
        if dispatcher in self._nb_ready:
            return True
        if AHEAD.ready(dispatcher, args):
            self._nb_ready.add(dispatcher)
            return True
        return False

    def _segment_args(self, A0, A1, s, sq0, cross, sq1, lam, loss):
        n = A0.shape[1]
        if self._nb_seg is None or self._nb_seg[0].size != n:     # the scratch, once a fit
            F = np.empty((12, n))
            self._nb_seg = (np.empty(n), F, F.view(np.uint64), np.empty((2, n), dtype=np.int64),
                            np.empty((6, 2049), dtype=np.int64),
                            np.empty((3, 64), dtype=np.int64), np.empty(64))
        sw = np.empty(0) if s is None else np.ascontiguousarray(s, dtype=np.float64).reshape(-1)
        q1, q2 = cross - sq0, sq1 - 2.0 * cross + sq0           # as segment_point forms them
        return (A0[0], A1[0], sw, s is not None, loss == "squared_hinge", n * lam, lam,
                float(q1[0]), float(q2[0]), float(sq0[0]), *self._nb_seg)

    def segment_point_one(self, A0, A1, s, sq0, cross, sq1, lam: float, loss: str):
        """:func:`gpusvm.solvers.sdca.segment_point` of one output from both ends' margins
        ``A0``, ``A1`` (1, n), compiled (:func:`gpusvm.backends._csr_nb.segment_point_one`;
        a certificate's fifty NumPy passes and calls in one), the same numbers bit for bit;
        None while it compiles ahead (the caller runs NumPy's)."""
        args = self._segment_args(A0, A1, s, sq0, cross, sq1, lam, loss)
        if not self._nb_compiled(csr.segment_point_one, args):
            return None
        t, sqt, pt = csr.segment_point_one(*args)
        return np.array([t]), args[10].reshape(1, -1), np.array([sqt]), np.array([pt])

    def sdca_block_arrays(self):
        """The arrays of a one-output SDCA fit that the threads' block loop reads and steps
        (:func:`gpusvm.backends._sdca_threads_nb.sdca_block`, driven by
        :class:`gpusvm.solvers._threaded.BlockSDCA`): ``(indptr, indices, data, y, weights,
        alpha, 1/||x_i||^2, ||x_i||^2, active)``, ``y`` and ``alpha`` flat views, the weights
        flat float64 (empty without), ``active`` the shrinking set (after ``init_dual_m``)."""
        sw = self.sample_weight
        sw = np.empty(0) if sw is None else np.ascontiguousarray(sw, dtype=np.float64).reshape(-1)
        return (self.X.indptr, self.X.indices, self.X.data, self.Y.reshape(-1), sw,
                self.alpha.reshape(-1), self._inv_q, self.row_sq_norms, self._active)

    def dual_weights_m(self, lam: float) -> np.ndarray:
        """``W(alpha) = X^T (alpha * Y) / (lam n)`` in float64 (d, M), resynchronising ``V``."""
        if self._nb_threaded is not None:
            W = self._nb_threaded.rmm(self.alpha * self.Y.astype(np.float64))
            W /= lam * self.n
            self._resync(W)
            return W
        W = np.zeros((self.d, self.n_outputs), dtype=np.float64)
        if self._nb_one:                 # one column: NumPy's resync, a compile less
            args = self._rmatvec_args(W.reshape(-1))
            if not self._nb_compiled(csr.csr_rmatvec, args):  # compiling ahead: the same sums
                return super().dual_weights_m(lam)
            csr.csr_rmatvec(*args)
            W /= lam * self.n
            self._resync(W)
            return W
        vsq = np.empty(self.n_outputs)
        args = self._dual_args(lam * self.n, W, vsq)
        if not self._nb_compiled(csr.dual_weights, args):     # compiling ahead: the same sums
            return super().dual_weights_m(lam)
        csr.dual_weights(*args)
        self.sm[S_A] = 1.0
        self.sm[S_VSQ] = vsq
        self.sm[S_ASUMD] = self.alpha.sum(axis=0)
        return W


def four_lane_matvec(indptr, indices, data, w, b) -> np.ndarray:
    """``X w + b`` in float64 with :func:`gpusvm.backends._csr_nb.csr_matvec`'s sums, bit for
    bit: per row, four running sums over the positions of its whole blocks of four (lane
    ``p mod 4``), the last ``len mod 4`` products added to the first, then ``(z0 + z1) + (z2
    + z3) + b``; vectorised over the rows (the fit's ``X w`` while that function compiles)."""
    n = indptr.size - 1
    prod = data.astype(np.float64) * w[indices]
    length = np.diff(indptr).astype(np.int64)
    blocks = length // 4
    order = np.argsort(-blocks, kind="stable")          # rows with the most blocks first
    lo, nb = indptr[:-1].astype(np.int64)[order], blocks[order]
    z = np.zeros((4, n))
    for s in range(int(nb[0]) if n else 0):             # the rows that have a block s
        live = int(np.searchsorted(-nb, -s, side="left"))
        at = lo[:live] + 4 * s
        for lane in range(4):
            z[lane, :live] += prod[at + lane]
    start, tail = lo + 4 * nb, length[order] - 4 * nb
    for q in range(3):
        live = tail > q
        z[0, live] += prod[start[live] + q]
    out = np.empty(n)
    out[order] = ((z[0] + z[1]) + (z[2] + z[3])) + b
    return out


class CompilationNotice(UserWarning):
    """The compiled CPU loops are being compiled (once; numba caches them on disk)."""


_announced: set = set()

#: what the notice says a cold first fit waits for compilation, in wall time: ``wait s`` of
#: ``benchmarks/bench_compile.py --cpus 0,1`` (the first fit less a warm one, an empty numba
#: cache, an otherwise idle 2-core host; the helpers compile beside the fit in a second
#: process): one row a batch (every estimator's default, any sampling) and Pegasos' binary
#: batches of several rows, of any sampling (``gpusvm demo``) ...
COMPILE_SECONDS = "2-3 s"
#: ... and the other loops of batches of several rows (SDCA's, Pegasos' with several outputs
#: or with ``bias="optimal"``)
BATCH_COMPILE_SECONDS = "3-5 s"


def _ready_loop(dispatcher, args, seconds=COMPILE_SECONDS) -> None:
    """Compile (or load) ``dispatcher`` for ``args`` now, so that helpers may compile ahead."""
    dtype = args[0][2].dtype
    if _announce_compilation((id(dispatcher), str(dtype)), dispatcher, args, dtype,
                             seconds=seconds, stacklevel=6):
        try:
            sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        except Exception:             # noqa: BLE001  another numba: its first call compiles
            return
        if sig not in dispatcher.overloads:
            dispatcher.compile(sig)


def call_compiled(dispatcher, dtype, *args, what: str = "the CPU loops of this solver",
                  seconds: str = COMPILE_SECONDS, stacklevel: int = 6, group=None):
    """``dispatcher(*args)``, first announced (once per function or ``group``, ``dtype`` and
    process) when it will compile: ``what``, about ``seconds`` of wall time; the notice is
    attributed to the frame ``stacklevel`` above :func:`warnings.warn`."""
    _announce_compilation((id(dispatcher) if group is None else group, str(dtype)), dispatcher,
                          args, dtype, what, seconds, stacklevel)
    return dispatcher(*args)


def _announce_compilation(key, dispatcher, args, dtype, what="the CPU loops of this solver",
                          seconds=COMPILE_SECONDS, stacklevel=6) -> bool:
    """Once per ``key`` (else False), warn (:class:`CompilationNotice`) when ``dispatcher(*args)``
    is neither compiled in this process nor in numba's on-disk cache."""
    if key in _announced:
        return False
    _announced.add(key)
    try:
        sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        if sig in dispatcher.overloads or in_disk_cache(dispatcher, sig, True):
            return True
    except Exception:                 # noqa: BLE001  another numba: say nothing rather than guess
        return True
    warnings.warn(f"gpusvm: compiling {what} for {dtype} data, once: this first fit takes "
                  f"about {seconds} longer than the next ones (wall time, an empty numba cache "
                  "on an otherwise idle 2-core host, as benchmarks/bench_compile.py measures "
                  "it; longer when other work shares the cores); numba caches the code on disk "
                  "for later runs", CompilationNotice, stacklevel=stacklevel)
    return True


@functools.lru_cache(maxsize=None)
def l2_cache_bytes() -> int:
    """Size of the L2 cache of CPU 0 from sysfs (512 KiB when it cannot be read)."""
    try:
        for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                scale = {"K": 1024, "M": 1024 ** 2}.get(text[-1], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return 512 * 1024
