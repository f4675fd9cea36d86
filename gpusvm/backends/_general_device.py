"""The general path (M outputs, example weights, the squared hinge) on the device backend.

:class:`DeviceGeneralPath` gives :class:`~gpusvm.backends.device.DeviceBackend`
the primitives of :mod:`gpusvm.backends._general` with the state on the device:
the heavy parts are kernels (``kernels/margins_multi.cu``: the M margins of
each batch row from one gather; ``kernels/accumulate_multi.cu``: the M updates
of each row in one pass, with the exact changes of the M squared norms;
``kernels/sdca_deltas_multi.cu``: SDCA's weighted steps for either loss), the
O(k M) bookkeeping of the scalars of each output is array operations of the
backend's array module (CuPy, or NumPy for the emulated backend).  Nothing in
a segment synchronises the device.

Differences from the reference, at the rounding level: the additions into
``V`` are atomics rounded to ``V``'s dtype one by one (the reference sums a
batch per column in float64 and rounds once).  Cost: Pegasos' renormalisation
check is an O(d M) pass of array operations per iteration (a kernel that exits
early, as ``gpusvm_renormalize`` does for the binary path, would remove it).
"""

from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from ._general import check_sample_weight
from ._state import (N_SLOTS, S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_BSUM, S_DNORM, S_LOSS,
                     S_NACT, S_NAVG, S_NREJ, S_TMP0, S_VSQ, S_YACT)
from .base import step_sizes

_EPS64 = float(np.finfo(np.float64).eps)


def scatter_add(xp, a, idx, vals) -> None:
    """``a[idx] += vals`` with repeated indices added (``np.add.at`` / ``cupyx.scatter_add``)."""
    if xp is np:
        np.add.at(a, idx, vals)
    else:  # pragma: no cover - needs a GPU
        import cupyx  # noqa: PLC0415
        cupyx.scatter_add(a, idx, vals)


def optimal_bias_weighted_xp(xp, y_b, sc, wts):
    """:func:`gpusvm.backends._general.optimal_bias_weighted` in ``xp``, the result on the device."""
    bp = y_b - sc
    order = xp.argsort(bp, kind="stable") if xp is np else xp.argsort(bp)
    ys = y_b[order]
    ws = wts[order]
    neg_le = xp.cumsum(xp.where(ys < 0, ws, 0.0))
    pos = xp.where(ys > 0, ws, 0.0)
    pos_gt = pos.sum() - xp.cumsum(pos)
    j = xp.argmax(neg_le - pos_gt >= 0)
    return bp[order[j]]


class DeviceGeneralPath:
    """Mixin of the device backend: the ``*_m`` primitives of the general path.

    Needs from the host class: ``xp``, ``runtime``, ``n``, ``d``, ``dtype``,
    ``value_type``, ``X``, ``row_sq_norms``, the CSR arrays ``_indptr``,
    ``_indices``, ``_data``, ``Y`` (n x M on the device), ``sample_weight``
    (device float64 or None) and the launch helpers ``_function``, ``_call``,
    ``_sampler_buffers``, ``_draw``.
    """

    @property
    def n_outputs(self) -> int:
        """``M``, the number of outputs (1 for 1-D labels)."""
        return int(self.Y.shape[1])

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
            self.sample_weight = self.runtime.upload(check_sample_weight(host, self.n),
                                                     np.float64)

    def _weights_dev(self):
        if self.sample_weight is not None:
            return self.sample_weight
        if getattr(self, "_ones_dev", None) is None:
            self._ones_dev = self.xp.ones(self.n, dtype=np.float64)
        return self._ones_dev

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
        self._no_u = xp.zeros(1, dtype=np.float64)

    # ------------------------------------------------------------ kernels
    def _margins_into(self, rows, k: int, m) -> None:
        self._call(self._multi("gpusvm_margins_multi"), self._pair_grid(k),
                   (self._indptr, self._indices, self._data, self.Y, self.V, rows, np.int32(k),
                    np.int32(self.n_outputs), self.sm, m))

    def _accumulate(self, rows, k: int, coef, target, dn, u_scale=None, zero: bool = False):
        """``target[:, c] += sum_i coef_ic x_i`` (kernel ``gpusvm_accumulate_multi``); ``dn`` zeroed
        first gets the exact changes of the M squared norms."""
        dn[...] = 0.0
        use_u = u_scale is not None and self.U is not None
        self._call(self._multi("gpusvm_accumulate_multi"), self._pair_grid(k),
                   (self._indptr, self._indices, self._data, rows, np.int32(k),
                    np.int32(self.n_outputs), coef, target, self.U if use_u else self._no_u,
                    u_scale if use_u else self._no_u, np.int32(use_u), np.int32(zero), dn))
        return dn

    def margins_m(self, rows):
        """``m_ic = y_ic (a_c <v_c, x_i> + b_c)``, (k, M) float64 on the device (one launch)."""
        rows = self._rows(rows)
        k = int(rows.shape[0])
        m = self.xp.empty((k, self.n_outputs), dtype=np.float64)
        self._margins_into(rows, k, m)
        return m

    # ------------------------------------------------------------ Pegasos
    def _optimal_bias_m(self, rows, m) -> None:
        xp = self.xp
        y_b = self.Y[rows].astype(np.float64)
        wts = self._weights_dev()[rows]
        for c in range(self.n_outputs):
            yc = y_b[:, c]
            sc = yc * m[:, c] - self.sm[S_B, c]
            b = optimal_bias_weighted_xp(xp, yc, sc, wts)
            m[:, c] = 1.0 + yc * (b - (yc - sc))
            self.sm[S_B, c] = b

    def _reset_scale_m(self) -> None:
        if self.U is not None:
            self.U -= self.sm[S_ASUM] * self.V
        self.V[...] = 0
        self.sm[S_VSQ] = 0.0
        self.sm[S_A] = 1.0

    def _pegasos_step_m(self, rows, k, m, eta, shrink, kk, unreg, radius, average, squared):
        xp = self.xp
        sm = self.sm
        y_b = self.Y[rows].astype(np.float64)
        s_b = self._weights_dev()[rows][:, None]
        active = m < 1.0
        slack = xp.maximum(0.0, 1.0 - m)
        sm[S_NACT] = xp.sum(active, axis=0)
        if squared:
            g = 2.0 * s_b * slack
            sm[S_LOSS] = xp.sum(s_b * slack * slack, axis=0)
        else:
            g = s_b * active
            sm[S_LOSS] = xp.sum(s_b * slack, axis=0)
        a = sm[S_A] * shrink
        coef = xp.ascontiguousarray(xp.where(active, (g * y_b) * (eta / (kk * a)), 0.0))
        dn = self._accumulate(rows, k, coef, self.V, self._dn, u_scale=xp.ascontiguousarray(sm[S_ASUM]))
        sm[S_DNORM] = dn
        sm[S_VSQ] += dn
        sm[S_A] = a
        if unreg:
            sm[S_YACT] = xp.sum(xp.where(active, g * y_b, 0.0), axis=0)
            sm[S_B] += eta * sm[S_YACT] / kk
        if radius > 0.0:
            wsq = a * a * sm[S_VSQ]
            over = wsq > radius * radius
            sm[S_A] = xp.where(over, a * (radius / xp.sqrt(xp.where(over, wsq, 1.0))), a)
        if average:
            sm[S_ASUM] += sm[S_A]
            sm[S_NAVG] += 1.0
            sm[S_BSUM] += sm[S_B]

    def renormalize_m(self, threshold: float) -> None:
        """Fold ``a_c`` into column ``c`` of ``V`` where ``|a_c| < threshold`` (O(d M), no sync)."""
        xp = self.xp
        sm = self.sm
        low = xp.abs(sm[S_A]) < threshold
        if self.U is not None:
            self.U -= xp.where(low, sm[S_ASUM], 0.0) * self.V.astype(np.float64)
        self.V *= xp.where(low, sm[S_A], 1.0).astype(self.dtype)
        sm[S_VSQ] *= xp.where(low, sm[S_A] * sm[S_A], 1.0)
        sm[S_ASUM] = xp.where(low, 0.0, sm[S_ASUM])
        sm[S_A] = xp.where(low, 1.0, sm[S_A])

    def pegasos_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` on the general path (Fig. 1 for M outputs).

        Per iteration: the sampler, ``gpusvm_margins_multi``, the array operations
        of the step's scalars, ``gpusvm_accumulate_multi`` and :meth:`renormalize_m`
        (an O(d M) pass of array operations: deciding on the host would synchronise).
        """
        p = plan
        squared = p.loss == "squared_hinge"
        buffers = self._sampler_buffers(sampler)
        rows = buffers[0]
        k = int(sampler.k)
        m = self.xp.empty((k, self.n_outputs), dtype=np.float64)
        etas, shrinks = step_sizes(p.schedule, t0 + 1, t1 + 1, p.lam, p.eta0, p.norma_p)
        for i, t in enumerate(range(t0 + 1, t1 + 1)):
            self._draw(buffers, sampler.code, t - 1)                          # step 1: A_t
            self._margins_into(rows, k, m)                                    # step 2
            if p.optimal:
                self._optimal_bias_m(rows, m)                                 # Sec. 4
            shrink = float(shrinks[i])                                        # step 3
            if shrink == 0.0:
                self._reset_scale_m()
                shrink = 1.0
            self._pegasos_step_m(rows, k, m, float(etas[i]), shrink, p.k, p.unreg_bias,
                                 p.radius, p.averaged and t >= p.t_avg, squared)   # steps 4-5
            self.renormalize_m(p.renorm_threshold)                            # keep V in range

    def reset_average_m(self) -> None:
        """Empty the running averages of every output (no sync)."""
        if self.U is not None:
            self.U[...] = 0.0
        self.sm[S_ASUM] = 0.0
        self.sm[S_NAVG] = 0.0
        self.sm[S_BSUM] = 0.0

    def output_m(self, averaged: bool):
        """Dense float64 ``W`` (d, M) and ``b`` (M,) on the device, last iterate or average."""
        xp = self.xp
        sm = self.sm
        last = sm[S_A] * self.V.astype(np.float64)
        if averaged and self.U is not None:             # no iterate averaged yet: the last one
            some = sm[S_NAVG] > 0
            navg = xp.where(some, sm[S_NAVG], 1.0)
            W = xp.where(some, (sm[S_ASUM] * self.V.astype(np.float64) - self.U) / navg, last)
            return W, xp.where(some, sm[S_BSUM] / navg, sm[S_B])
        return last, sm[S_B].copy()

    def decision_function_m(self, W, b):
        """``<w_c, x_i> + b_c`` on all rows, float64 (n, M) on the device."""
        W = self.xp.asarray(W, dtype=np.float64)
        return self.xp.asarray(self.X @ W, dtype=np.float64) + b

    def evaluate_m(self, W, b, lam: float, loss: str = "hinge", reg_bias: bool = False):
        """Weighted primal objective of every output: ``(objective, loss, sq_norm)``, (M,) each,
        on the device (the solver copies the objective to the host: a sync point)."""
        xp = self.xp
        Z = self.decision_function_m(W, b)
        slack = xp.maximum(0.0, 1.0 - self.Y * Z)
        if loss == "squared_hinge":
            slack = slack * slack
        if self.sample_weight is not None:
            slack = self.sample_weight[:, None] * slack
        lval = slack.mean(axis=0)
        W = xp.asarray(W, dtype=np.float64)
        sq = xp.sum(W * W, axis=0) + (xp.asarray(b) ** 2 if reg_bias else 0.0)
        return 0.5 * lam * sq + lval, lval, sq

    def final_optimal_bias_m(self, W):
        """Per output, the optimal bias of ``w_c`` over all rows (weighted, Pegasos Sec. 4)."""
        xp = self.xp
        Z = self.decision_function_m(W, 0.0)
        Y = self.Y.astype(np.float64)
        wts = self._weights_dev()
        return xp.stack([optimal_bias_weighted_xp(xp, Y[:, c], Z[:, c], wts)
                         for c in range(self.n_outputs)])

    # ------------------------------------------------------------ SDCA
    def init_dual_m(self, beta0: float, loss: str = "hinge", alpha0=None, lam=None) -> None:
        """Start SDCA as :meth:`GeneralPath.init_dual_m <gpusvm.backends._general.GeneralPath.init_dual_m>`."""
        xp = self.xp
        M = self.n_outputs
        s = self._weights_dev()
        if alpha0 is None:
            zero = (self.row_sq_norms == 0).astype(np.float64)
            top = 2.0 * s if loss == "squared_hinge" else s
            self.alpha = xp.ascontiguousarray(xp.repeat((zero * top)[:, None], M, axis=1))
        else:
            self.alpha = xp.ascontiguousarray(
                self.runtime.upload(np.reshape(alpha0, (self.n, M)), np.float64))
        self._eps = float(np.finfo(self.dtype).eps)
        self._scratch_m = None
        self._dn2 = xp.zeros(M, dtype=np.float64)
        self._no_mask = xp.zeros(1, dtype=np.int32)
        self.sm[S_ASUMD] = xp.sum(self.alpha, axis=0)
        self.sm[S_BETA] = float(beta0)
        self.sm[S_NREJ] = 0.0
        if alpha0 is not None:
            self.dual_weights_m(lam)

    def _deltas_m_into(self, rows, k, m, lamn, first, has_first, squared, out) -> None:
        self._call(self._multi("gpusvm_sdca_deltas_multi"), self._pair_grid(k),
                   (rows, np.int32(k), np.int32(self.n_outputs), m, self.alpha,
                    self.row_sq_norms, self._weights_dev(), np.int32(self.sample_weight is not None),
                    first, np.int32(has_first), self.sm, np.float64(lamn), np.int32(squared), out))

    def sdca_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` on the general path (eq. 15 / Alg. 2 per output).

        Per iteration: the sampler, ``gpusvm_margins_multi``, ``gpusvm_sdca_deltas_multi``,
        for Alg. 2 the measure of ``rho`` by ``gpusvm_accumulate_multi`` into a zeroed
        scratch matrix (the exact change of its squared norms is ``||sum_i delta_ic y_ic x_i||^2``)
        and a second ``gpusvm_sdca_deltas_multi``, then ``gpusvm_accumulate_multi`` into
        ``V`` (and once more to undo the outputs whose dual would drop).
        """
        xp = self.xp
        p = plan
        squared = p.loss == "squared_hinge"
        buffers = self._sampler_buffers(sampler)
        rows, first = buffers[0], buffers[1]
        has_first = sampler.code != 0
        k = int(sampler.k)
        M = self.n_outputs
        n = self.n
        lam = p.lam
        lamn = lam * n
        m = xp.empty((k, M), dtype=np.float64)
        delta = xp.empty((k, M), dtype=np.float64)
        if p.aggressive and self._scratch_m is None:
            self._scratch_m = xp.zeros((self.d, M), dtype=self.dtype)
        sw = self._weights_dev()
        for t in range(t0, t1):
            self._draw(buffers, sampler.code, t)                              # A_t
            self._margins_into(rows, k, m)                                    # y_ic <w_c, x_i>
            self._deltas_m_into(rows, k, m, lamn, first, has_first, squared, delta)   # eq. (15)
            y_b = self.Y[rows].astype(np.float64)
            if p.aggressive:                                                  # Alg. 2
                q = self.row_sq_norms[rows][:, None]
                den = xp.sum(delta * delta * q, axis=0)
                num = self._accumulate(rows, k, xp.ascontiguousarray(delta * y_b),
                                       self._scratch_m, self._dn2)
                self._accumulate(rows, k, delta, self._scratch_m, self._dn, zero=True)
                pos = den > 0.0
                rho = xp.minimum(xp.maximum(num / xp.where(pos, den, 1.0), 1.0), p.beta_b)
                self.sm[S_TMP0] = xp.where(pos, rho, self.sm[S_TMP0])
                beta = self.sm[S_BETA] ** p.theta * rho ** (1.0 - p.theta)
                self.sm[S_BETA] = xp.where(pos, xp.minimum(xp.maximum(beta, 1.0), p.beta_b),
                                           self.sm[S_BETA])
                self._deltas_m_into(rows, k, m, lamn, first, has_first, squared, delta)
            self._apply_m(rows, k, delta, y_b, sw, lam, n, p.aggressive, squared)

    def _apply_m(self, rows, k, delta, y_b, sw, lam, n, check, squared) -> None:
        xp = self.xp
        sm = self.sm
        a = sm[S_A]
        coef = xp.ascontiguousarray(delta * y_b * (1.0 / (lam * n * a)))
        vsq = sm[S_VSQ].copy()
        dn = self._accumulate(rows, k, coef, self.V, self._dn)
        sm[S_DNORM] = dn
        kept = delta
        if check:
            if squared:
                A = self.alpha[rows]
                s = sw[rows][:, None]
                quad = xp.where(s > 0.0, delta * (2.0 * A + delta) / (4.0 * xp.where(s > 0, s, 1.0)),
                                0.0)
                gain = xp.sum(delta - quad, axis=0)
            else:
                gain = xp.sum(delta, axis=0)
            tau = 4.0 * (self._eps * lam * a * a * vsq + _EPS64 * xp.sum(xp.abs(delta), axis=0) / n)
            ok = gain / n - 0.5 * lam * a * a * dn >= -tau
            dn2 = self._accumulate(rows, k, xp.ascontiguousarray(xp.where(ok, 0.0, -coef)), self.V,
                                   self._dn2)
            dn = dn + dn2
            sm[S_NREJ] += ~ok
            kept = xp.where(ok, delta, 0.0)
        sm[S_VSQ] += dn
        scatter_add(xp, self.alpha, rows, kept)
        sm[S_ASUMD] += xp.sum(kept, axis=0)

    def dual_weights_m(self, lam: float):
        """``W(alpha) = X^T (alpha * Y) / (lam n)`` (float64 (d, M), device); resynchronises ``V``."""
        xp = self.xp
        A = self.alpha * self.Y.astype(np.float64)
        W = xp.asarray(self.X.T @ A, dtype=np.float64) / (lam * self.n)
        self.V[...] = W
        v64 = self.V.astype(np.float64)
        self.sm[S_A] = 1.0
        self.sm[S_VSQ] = xp.sum(v64 * v64, axis=0)
        self.sm[S_ASUMD] = xp.sum(self.alpha, axis=0)
        return W

    def dual_objective_m(self, lam: float, W, loss: str = "hinge"):
        """``D(alpha)`` or ``D2(alpha)`` of every output, (M,) on the device."""
        xp = self.xp
        W = xp.asarray(W, dtype=np.float64)
        lin = self.alpha
        if loss == "squared_hinge":
            s = self._weights_dev()[:, None]
            lin = xp.where(s > 0.0, self.alpha - self.alpha ** 2 / (4.0 * xp.where(s > 0, s, 1.0)),
                           0.0)
        return xp.sum(lin, axis=0) / self.n - 0.5 * lam * xp.sum(W * W, axis=0)
