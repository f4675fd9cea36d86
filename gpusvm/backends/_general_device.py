"""The general path (M outputs, example weights, the squared hinge) on the device backend.

:class:`DeviceGeneralPath` gives :class:`~gpusvm.backends.device.DeviceBackend`
the primitives of :mod:`gpusvm.backends._general` with the state on the device.
A segment is kernels only, recorded once and replayed as the binary path's
segments are (a CUDA graph on a GPU, :class:`gpusvm._emulator.EmulatedGraph`
when emulated; ``DeviceBackend._replay``): the M margins of each batch row from
one gather (``kernels/margins_multi.cu``), the M updates of each row in one pass
with the exact changes of the M squared norms (``accumulate_multi.cu``),
SDCA's weighted steps for either loss (``sdca_deltas_multi.cu``), and the
bookkeeping of each output's scalars in kernels of their own
(``pegasos_coef_multi.cu``, ``pegasos_scalars_multi.cu``,
``reset_scale_multi_next.cu``, ``optimal_bias_multi.cu``, ``sdca_coef_multi.cu``,
``sdca_rho_multi.cu``, ``sdca_check_multi.cu``, ``sdca_finish_multi.cu``,
``renormalize_multi.cu``), every one reading the iteration from the device
counter.  Nothing in a segment synchronises the device, and no Python runs per
iteration.  Evaluations (outputs, objectives, certificates) are array
operations of the backend's array module (CuPy, or NumPy when emulated).

Differences from the reference, at the rounding level: the additions into
``V`` are atomics rounded to ``V``'s dtype one by one (the reference sums a
batch per column in float64 and rounds once), and the per-output sums of a
batch (losses, Alg. 2's sums) are added by atomics in any order.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from ._general import GeneralEvaluation, check_sample_weight
from ._state import N_SLOTS, S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_NREJ, S_VSQ
from .base import SCHEDULES, step_sizes


class DeviceGeneralPath(GeneralEvaluation):
    """Mixin of the device backend: the ``*_m`` primitives of the general path.

    The segments and the state are the device's own; outputs, objectives and
    certificates are :class:`~gpusvm.backends._general.GeneralEvaluation`'s,
    shared with the host backends.  Needs from the host class: ``xp``,
    ``runtime``, ``n``, ``d``, ``dtype``, ``value_type``, ``X``,
    ``row_sq_norms``, the CSR arrays ``_indptr``, ``_indices``, ``_data``,
    ``_graphs``, ``_counter`` and the launch helpers ``_function``, ``_call``,
    ``_rows``, ``_sampler_buffers``, ``_sample_launches`` and ``_replay``.
    """

    def _init_general_data(self, y, sample_weight) -> None:
        """``Y`` (n x M) and the weights on the device; checks their shapes (constructor)."""
        xp = self.xp
        if self.y.ndim == 2 and self.y.shape[0] == self.n and self.y.shape[1] >= 1:
            self.Y = xp.ascontiguousarray(self.y)
        elif tuple(self.y.shape) != (self.n,):
            raise ValueError(f"y must have shape ({self.n},) or ({self.n}, M) with M >= 1 "
                             f"outputs, got {tuple(self.y.shape)}")
        else:
            self.Y = self.y.reshape(self.n, 1)
        if sample_weight is None:
            self.sample_weight = None
        else:
            host = sample_weight if isinstance(sample_weight, np.ndarray) else \
                self.runtime.download(sample_weight)
            self.sample_weight = self.runtime.upload(check_sample_weight(host, self.n, self.Y.shape[1]),
                                                     np.float64)

    def _multi(self, op: str):
        return self._function(_kernels.vector_kernel(op, self.value_type))

    def _pair_grid(self, k: int) -> int:
        pairs = k * self.n_outputs
        return max(1, min(math.ceil(pairs / _kernels.BLOCK), self.runtime.max_blocks))

    # ------------------------------------------------------------ state
    def init_state_m(self, w0=None, b0=0.0, averaging: bool = False) -> None:
        """``V = W0`` (d x M, zero by default), ``a = 1``, ``b = b0``, ``U = 0`` if averaging."""
        xp = self.xp
        M = self.n_outputs
        if w0 is None:
            self.V = xp.zeros((self.d, M), dtype=self.dtype)
        else:
            self.V = xp.ascontiguousarray(
                self.runtime.upload(np.reshape(w0, (self.d, M)), self.dtype))
        sm = np.zeros((N_SLOTS, M), dtype=np.float64)
        sm[S_A] = 1.0
        sm[S_B] = np.broadcast_to(np.asarray(b0, dtype=np.float64), (M,))
        self.sm = self.runtime.upload(sm, np.float64)
        v64 = self.V.astype(np.float64)
        self.sm[S_VSQ] = xp.sum(v64 * v64, axis=0)
        self.U = xp.zeros((self.d, M), dtype=np.float64) if averaging else None
        self._dn = xp.zeros(M, dtype=np.float64)
        self._dn2 = xp.zeros(M, dtype=np.float64)
        self._no_u = xp.zeros(1, dtype=np.float64)
        self._acc_m = xp.zeros(4 * M, dtype=np.float64)       # sdca_coef_multi.cu: N_MACC x M
        self._ticket_m = xp.zeros(1, dtype=np.uint32)
        self._renorm_ticket = xp.zeros(1, dtype=np.uint32)
        self._buffers_m = None
        self._graphs.clear()                 # recorded segments hold the old arrays

    # ------------------------------------------------------------ kernels
    def _margins_into(self, rows, k: int, m) -> None:
        self._call(self._multi("gpusvm_margins_multi"), self._pair_grid(k),
                   (self._indptr, self._indices, self._data, self.Y, self.V, rows, np.int32(k),
                    np.int32(self.n_outputs), self.sm, m)
                   + (np.int32(-1), np.uint64(0), np.int32(self.n), np.int32(1), np.uint32(1),
                      self._counter, self._sample_ticket, rows))   # read rows (nothing written)

    def margins_m(self, rows):
        """``m_ic = y_ic (a_c <v_c, x_i> + b_c)``, (k, M) float64 on the device (one launch)."""
        rows = self._rows(rows)
        k = int(rows.shape[0])
        m = self.xp.empty((k, self.n_outputs), dtype=np.float64)
        self._margins_into(rows, k, m)
        return m

    # ------------------------------------------------------------ Pegasos
    def renormalize_m(self, threshold: float) -> None:
        """Fold ``a_c`` into column ``c`` of ``V`` where ``|a_c| < threshold``, decided on the device
        (``gpusvm_renormalize_multi``: every thread exits at once when no scale is that small)."""
        use_u = self.U is not None
        self._call(self._multi("gpusvm_renormalize_multi"), self._entry_grid(),
                   (self.V, self.U if use_u else self._no_u, np.int32(use_u), np.int64(self.d),
                    np.int32(self.n_outputs), self.sm, self._renorm_ticket,
                    np.float64(threshold)))

    def _segment_buffers_m(self, k: int):
        """The (k, M) buffers of a recorded general-path iteration: margins, steps, two sets of
        coefficients and the breakpoints of the optimal bias (allocated once per batch size)."""
        if self._buffers_m is None or self._buffers_m[0].shape[0] != k:
            M = self.n_outputs
            self._buffers_m = tuple(self.xp.empty((k, M), dtype=np.float64) for _ in range(5))
        return self._buffers_m

    def _schedule_args(self, p):
        return (np.int32(SCHEDULES.index(p.schedule)), np.float64(p.lam),
                np.float64(p.eta0 or 0.0), np.float64(p.norma_p))

    def pegasos_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` on the general path (Fig. 1 for M outputs).

        Per iteration, all kernels reading ``t`` from the device counter:
        ``gpusvm_margins_multi`` (which draws the batch, or reads what ``gpusvm_sample_next``
        drew for i.i.d. batches), (``gpusvm_optimal_bias_multi``),
        (``gpusvm_reset_scale_multi_next`` in a segment holding an iteration with
        ``1 - eta_t lam = 0``), ``gpusvm_pegasos_coef_multi``, ``gpusvm_accumulate_multi``,
        and ``gpusvm_pegasos_scalars_multi``, whose one block also folds a small scale into
        ``V`` (what ``gpusvm_renormalize_multi`` does in a launch of its own): 4 to 6 launches
        (one more for i.i.d. batches),
        recorded once per (sampler, plan) and replayed as the binary path's are (``_replay``).
        """
        p = plan
        _, shrinks = step_sizes(p.schedule, t0 + 1, t1 + 1, p.lam, p.eta0, p.norma_p)
        reset = bool(np.any(shrinks == 0.0))
        key = ("pegasos_m", sampler, p, reset)
        self._replay(key, lambda: self._pegasos_launches_m(sampler, p, reset), t0, t1)

    def _pegasos_launches_m(self, sampler, p, reset: bool):
        """One general-path Pegasos iteration as (kernel, grid, args) launches."""
        rows, first = self._sampler_buffers(sampler)[:2]
        k = int(sampler.k)
        M = np.int32(self.n_outputs)
        m, _, coef, _, bp = self._segment_buffers_m(k)
        sched = self._schedule_args(p)
        weighted = np.int32(self.sample_weight is not None)
        use_u = self.U is not None
        U = self.U if use_u else self._no_u
        pairs = self._pair_grid(k)
        out, draw = self._draw_args(sampler, needs_first=False)                # step 1: A_t
        out.append((self._multi("gpusvm_margins_multi"), pairs,                 # step 2
                    (self._indptr, self._indices, self._data, self.Y, self.V, rows, np.int32(k),
                     M, self.sm, m) + draw + (first,)))
        if p.optimal:                                                           # Sec. 4
            out.append((self._multi("gpusvm_optimal_bias_multi"), int(M),
                        (self.Y, self._weights(), weighted, rows, np.int32(k), M, self.sm,
                         m, bp)))
        if reset:                                                               # eta_t lam = 1
            out.append((self._multi("gpusvm_reset_scale_multi_next"), self._entry_grid(),
                        (self.V, U, np.int32(use_u), np.int64(self.d), M, self.sm,
                         self._counter) + sched))
        out.append((self._multi("gpusvm_pegasos_coef_multi"), pairs,            # steps 3-4
                    (rows, np.int32(k), M, self.Y, self._weights(), weighted, m, self.sm,
                     self._counter, np.float64(p.k)) + sched
                    + (np.int32(p.loss == "squared_hinge"), coef, self._acc_m, self._dn)))
        out.append((self._multi("gpusvm_accumulate_multi"), pairs,
                    (self._indptr, self._indices, self._data, rows, np.int32(k), M, coef, self.V,
                     U, self.sm[S_ASUM] if use_u else self._no_u, np.int32(use_u), np.int32(0),
                     self._dn)))
        out.append((self._multi("gpusvm_pegasos_scalars_multi"), 1,             # steps 4-5
                    (self._counter, M, np.float64(p.k)) + sched
                    + (np.int32(bool(p.unreg_bias)), np.float64(p.radius),
                       np.int32(bool(p.averaged)), np.int64(p.t_avg), self._dn, self.sm,
                       self._acc_m, self.V, U, np.int32(use_u), np.int64(self.d),
                       np.float64(p.renorm_threshold))))                  # + renormalize
        return out

    def _entry_grid(self) -> int:
        return max(1, min(math.ceil(self.d * self.n_outputs / _kernels.BLOCK),
                          self.runtime.max_blocks))

    # ------------------------------------------------------------ SDCA
    def init_dual_m(self, beta0: float, loss: str = "hinge", alpha0=None, lam=None) -> None:
        """Start SDCA as :meth:`GeneralPath.init_dual_m <gpusvm.backends._general.GeneralPath.init_dual_m>`."""
        xp = self.xp
        M = self.n_outputs
        s = self._weights()
        if alpha0 is None:
            zero = (self.row_sq_norms == 0).astype(np.float64)
            top = 2.0 * s if loss == "squared_hinge" else s
            self.alpha = xp.ascontiguousarray(zero[:, None] * top)
        else:
            self.alpha = xp.ascontiguousarray(
                self.runtime.upload(np.reshape(alpha0, (self.n, M)), np.float64))
        self._eps = float(np.finfo(self.dtype).eps)
        self._scratch_m = None
        self._no_mask = xp.zeros(1, dtype=np.int32)
        self._graphs.clear()                 # recorded segments hold the old alpha
        self.sm[S_ASUMD] = xp.sum(self.alpha, axis=0)
        self.sm[S_BETA] = float(beta0)
        self.sm[S_NREJ] = 0.0
        if alpha0 is not None:
            self.dual_weights_m(lam)

    def load_dual(self, alpha0, lam: float) -> None:
        """Warm start of the binary path: ``alpha = alpha0`` (n,) and ``w(alpha0)`` (after ``init_dual``)."""
        self.alpha[...] = self.runtime.upload(np.asarray(alpha0, dtype=np.float64), np.float64)
        self.dual_weights(lam)

    def sdca_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` on the general path (eq. 15 / Alg. 2 per output).

        Per iteration: ``gpusvm_margins_multi``, which draws the batch (i.i.d. batches: the
        sampler and the first-occurrence mask in two launches before it),
        ``gpusvm_sdca_deltas_multi``; for Alg. 2 the measure of ``rho``
        (``gpusvm_sdca_coef_multi`` with ``den``, ``gpusvm_accumulate_multi`` into the zeroed
        scratch matrix, whose exact norm change is ``||sum_i delta_ic y_ic x_i||^2``, the same
        launch zeroing it again, ``gpusvm_sdca_rho_multi``) and a second
        ``gpusvm_sdca_deltas_multi``; then ``gpusvm_sdca_coef_multi``,
        ``gpusvm_accumulate_multi`` into ``V``, for Alg. 2 ``gpusvm_sdca_check_multi`` and one
        more ``gpusvm_accumulate_multi`` undoing the outputs whose dual would drop, and
        ``gpusvm_sdca_finish_multi`` (``alpha`` and the scalars): 5 to 13 launches, recorded
        once per (sampler, plan) and replayed (``_replay``).
        """
        if plan.aggressive and self._scratch_m is None:
            self._scratch_m = self.xp.zeros((self.d, self.n_outputs), dtype=self.dtype)
        key = ("sdca_m", sampler, plan)
        self._replay(key, lambda: self._sdca_launches_m(sampler, plan), t0, t1)

    def _sdca_launches_m(self, sampler, p):
        """One general-path SDCA iteration as (kernel, grid, args) launches."""
        buffers = self._sampler_buffers(sampler)
        rows, first = buffers[0], buffers[1]
        k = int(sampler.k)
        M = np.int32(self.n_outputs)
        m, delta, coef, undo, _ = self._segment_buffers_m(k)
        squared = np.int32(p.loss == "squared_hinge")
        weighted = np.int32(self.sample_weight is not None)
        sw = self._weights()
        lam, n = np.float64(p.lam), np.float64(self.n)
        eps = np.float64(self._eps)
        pairs = self._pair_grid(k)
        kk = np.int32(k)
        deltas = (self._multi("gpusvm_sdca_deltas_multi"), pairs,                    # eq. (15)
                  (rows, kk, M, m, self.alpha, self.row_sq_norms, sw, weighted, first,
                   np.int32(sampler.code != 0), self.sm, np.float64(p.lam * self.n), squared,
                   delta))
        coef_fn = self._multi("gpusvm_sdca_coef_multi")
        acc_fn = self._multi("gpusvm_accumulate_multi")
        csr = (self._indptr, self._indices, self._data, rows, kk, M)

        def coefs(mode):
            return (coef_fn, pairs, (rows, kk, M, self.Y, delta, self.alpha, self.row_sq_norms, sw,
                                     weighted, self.sm, lam, n, squared, np.int32(mode), coef,
                                     self._acc_m, self._dn, self._dn2))

        def accumulate(c, target, dn, zero=0):
            return (acc_fn, pairs, csr + (c, target, self._no_u, self._no_u, np.int32(0),
                                          np.int32(zero), dn))

        out, draw = self._draw_args(sampler, needs_first=True)                        # A_t
        out.append((self._multi("gpusvm_margins_multi"), pairs,                        # y <w, x>
                    (self._indptr, self._indices, self._data, self.Y, self.V, rows, kk, M,
                     self.sm, m) + draw + (first,)))
        out.append(deltas)
        if p.aggressive:                                                               # Alg. 2
            out.append(coefs(0))
            out.append(accumulate(coef, self._scratch_m, self._dn2))
            out.append(accumulate(coef, self._scratch_m, self._dn, zero=1))
            out.append((self._multi("gpusvm_sdca_rho_multi"), 1,
                        (M, self._dn2, np.float64(p.beta_b), np.float64(p.theta), self.sm,
                         self._acc_m)))
            out.append(deltas)
        out.append(coefs(1))                                                           # the step
        out.append(accumulate(coef, self.V, self._dn))
        if p.aggressive:                                                               # keep?
            out.append((self._multi("gpusvm_sdca_check_multi"), pairs,
                        (kk, M, coef, self._acc_m, self._dn, self.sm, lam, n, eps, undo)))
            out.append(accumulate(undo, self.V, self._dn2))
        out.append((self._multi("gpusvm_sdca_finish_multi"), pairs,
                    (rows, kk, M, delta, self._dn, self._dn2, lam, n, eps,
                     np.int32(bool(p.aggressive)), self.alpha, self.sm, self._acc_m,
                     self._ticket_m)))
        return out
