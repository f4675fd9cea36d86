"""The general path of the CPU backends: M outputs, example weights and the squared hinge.

ALGORITHMS.md, "Weights, and the squared hinge" and "Many outputs at once".  The
solvers take this path whenever a fit is not the binary, unweighted hinge one
(``y`` of shape ``(n, M)``, a ``sample_weight``, or ``loss="squared_hinge"``);
the binary unweighted hinge keeps the specialised primitives of
:class:`~gpusvm.backends.numpy_.NumpyBackend`, which compute the same iterates
as this path with ``M = 1`` and ``s_i = 1`` (a test checks the agreement to
rounding).

State (all in the backend's array module, host NumPy here):

``V`` : (d, M), the data's dtype, row-major
    ``W = V diag(a)``: column ``c`` is output ``c``'s ``v``; a nonzero ``x_ij``
    reads the ``M`` entries ``V[j, :]`` contiguously.
``sm`` : (N_SLOTS, M) float64
    One column of the scalar slots of :mod:`gpusvm.backends._state` per output
    (``sm[S_A]`` the M scales, ``sm[S_VSQ]`` the M squared norms, ...);
    ``sm[S_NAVG]`` is the same in every column.
``U`` : (d, M) float64 or None
    Averaging (``S = A v - u`` per column).
``alpha`` : (n, M) float64
    SDCA's dual variables, one column per output.

The objective of output ``c`` with weights ``s_i >= 0`` (scikit-learn's
``sample_weight``) is ``P_s(w) = lam/2 ||w||^2 + (1/n) sum_i s_i loss_i(w)``
with ``loss_i`` the hinge ``max(0, 1 - m_i)`` or the squared hinge
``max(0, 1 - m_i)^2``, ``m_i = y_ic (<w_c, x_i> + b_c)``.

Pegasos (Shalev-Shwartz et al. 2007, Fig. 1, steps 4-5, per output): the
subgradient of a violated example is ``-s_i y_i x_i`` (hinge) or
``-2 s_i (1 - m_i) y_i x_i`` (squared hinge); the shrink ``1 - eta_t lam`` is
common to the outputs, the projection scales each column alone.

SDCA (Takáč et al. 2013, eq. 15, per output): hinge ``delta`` clipped to
``[-alpha_i, s_i - alpha_i]``; squared hinge
``delta = lam n (1 - m_i - alpha_i/(2 s_i)) / (lam n/(2 s_i) + beta ||x_i||^2)``,
computed as ``(2 s_i (1 - m_i) - alpha_i) / (1 + 2 s_i beta ||x_i||^2 / (lam n))``
(no division by ``s_i``: a zero weight gives ``delta = -alpha_i``, a zero row
``2 s_i - alpha_i``), then ``alpha_i + delta >= 0``; dual
``D2(alpha) = (1/n) sum_i (alpha_i - alpha_i^2/(4 s_i)) - lam/2 ||w(alpha)||^2``.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ._state import (N_SLOTS, S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_BSUM, S_DNORM, S_LOSS,
                     S_NACT, S_NAVG, S_NREJ, S_TMP0, S_VSQ, S_YACT)
from .base import step_size

_EPS64 = float(np.finfo(np.float64).eps)

#: losses by int code (the compiled loops and kernels take the code)
LOSSES = ("hinge", "squared_hinge")


def as_2d_labels(y, n: int, dtype) -> np.ndarray:
    """Labels as an ``(n, M)`` array (a view of a 1-D ``y`` as one column); checks the shape.

    Parameters
    ----------
    y : array of shape (n,) or (n, M)
        Values in {-1, +1}.
    n : int
    dtype : numpy dtype

    Returns
    -------
    ndarray of shape (n, M), C-contiguous
    """
    y = np.asarray(y, dtype=dtype)
    if y.ndim == 1:
        y = y.reshape(-1, 1)
    if y.ndim != 2 or y.shape[0] != n or y.shape[1] < 1:
        raise ValueError(f"y must have shape ({n},) or ({n}, M) with M >= 1 outputs, "
                         f"got {tuple(np.shape(y))}")
    return np.ascontiguousarray(y)


def check_sample_weight(sample_weight, n: int, M: int = 1):
    """``sample_weight`` as float64 ``(n, M)`` (C order), or None; clear errors for bad values.

    A weight of shape ``(n,)`` is one weight per row, shared by every output (it is
    repeated across the ``M`` columns); ``(n, M)`` gives each output its own row
    weights ``s_ic`` (ALGORITHMS.md, "Model selection in one pass": a fold's rows have
    weight 0 for the outputs that hold it out, and a value of ``C`` scales an output's
    weights).
    """
    if sample_weight is None:
        return None
    s = np.asarray(sample_weight, dtype=np.float64)
    if s.shape not in ((n,), (n, M)):
        raise ValueError(f"sample_weight must have shape ({n},) (one weight per row, shared by "
                         f"every output) or ({n}, {M}) (one per row and output), got {s.shape}")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("sample_weight must be finite and >= 0; a row with weight 0 is ignored, "
                         "a negative weight has no meaning in the objective")
    if s.ndim == 1:
        s = np.repeat(s[:, None], M, axis=1)
    return np.ascontiguousarray(s)


def optimal_bias_weighted_xp(xp, y_b, sc, wts):
    """Minimiser of the weighted batch hinge loss ``sum_i s_i [1 - y_i (sc_i + b)]_+`` over ``b``.

    The weighted form of :func:`gpusvm.backends.numpy_.optimal_bias_xp` (Pegasos
    Sec. 4): the right derivative at ``b`` is ``sum{s_i : y_i = -1, b_i <= b} -
    sum{s_i : y_i = +1, b_i > b}`` with the breakpoints ``b_i = y_i - sc_i``;
    the smallest breakpoint where it is ``>= 0`` is returned.  With unit
    weights it returns exactly ``optimal_bias_xp``'s value.

    Parameters
    ----------
    xp : module
        NumPy or CuPy (the arrays' module; the result stays there, no synchronisation).
    y_b, sc, wts : arrays of float64, shape (k,)
        Labels, raw scores and weights of the batch.

    Returns
    -------
    0-d array of ``xp``
    """
    bp = y_b - sc
    order = xp.argsort(bp, kind="stable") if getattr(xp, "stable_argsort", xp is np) else xp.argsort(bp)
    ys = y_b[order]
    ws = wts[order]
    neg_le = xp.cumsum(xp.where(ys < 0, ws, 0.0))
    pos = xp.where(ys > 0, ws, 0.0)
    pos_gt = pos.sum() - xp.cumsum(pos)
    j = xp.argmax(neg_le - pos_gt >= 0)
    return bp[order[j]]


def regularized_bias_xp(xp, y, sc, wts, lam: float, c: float, loss: str = "hinge"):
    """Minimiser over ``beta`` of ``lam/2 beta^2 + (1/n) sum_i s_i L(1 - y_i (sc_i + c beta))``.

    The weight ``beta`` of a constant feature of value ``c`` (the augmented bias, which
    is regularised), the rest of ``w`` fixed: ``sc_i`` are the margins without it and
    ``L`` the hinge or the squared hinge.  The function is convex; its breakpoints are
    ``beta_i = (y_i - sc_i) / c`` (row ``i`` is violated for ``beta < beta_i`` when
    ``y_i = +1``, for ``beta > beta_i`` when ``y_i = -1``).  Between two sorted
    breakpoints the derivative is ``A_j beta - B_j`` with

    * hinge: ``A_j = lam``, ``B_j = (c/n) (S+_j - S-_j)``,
    * squared hinge: ``A_j = lam + (2 c^2/n) S_j``, ``B_j = (2 c^2/n) sum_viol s_i beta_i``,

    where ``S+_j`` (``S-_j``) is the weight of the violated positive (negative) rows on
    interval ``j`` and ``S_j = S+_j + S-_j``.  The derivative does not decrease, so the
    minimiser is ``max(lo_j, B_j / A_j)`` on the first interval ``[lo_j, hi_j)`` where
    ``A_j hi_j - B_j >= 0`` (a kink at ``lo_j`` or the root inside).

    Parameters
    ----------
    xp : module
        NumPy or CuPy (the arrays' module; the result stays there).
    y, sc, wts : arrays of float64, shape (n,)
        Labels in {-1, +1}, margins without the constant feature, sample weights.
    lam : float
    c : float
        Value of the constant feature (``intercept_scaling``).
    loss : {"hinge", "squared_hinge"}

    Returns
    -------
    0-d array of ``xp``
    """
    n = y.shape[0]
    bp = (y - sc) / c
    order = xp.argsort(bp, kind="stable") if getattr(xp, "stable_argsort", xp is np) else xp.argsort(bp)
    bps, ys, ws = bp[order], y[order], wts[order]
    pos = xp.where(ys > 0, ws, 0.0)
    neg = xp.where(ys < 0, ws, 0.0)
    zero = xp.zeros(1)
    # interval j = 0..n lies between bps[j-1] and bps[j]: violated are the positives of
    # index >= j and the negatives of index < j
    pos_ge = xp.concatenate([xp.cumsum(pos[::-1])[::-1], zero])
    neg_lt = xp.concatenate([zero, xp.cumsum(neg)])
    if loss == "squared_hinge":
        pos_b = xp.concatenate([xp.cumsum((pos * bps)[::-1])[::-1], zero])
        neg_b = xp.concatenate([zero, xp.cumsum(neg * bps)])
        A = lam + (2.0 * c * c / n) * (pos_ge + neg_lt)
        B = (2.0 * c * c / n) * (pos_b + neg_b)
    else:
        A = xp.full(n + 1, lam)
        B = (c / n) * (pos_ge - neg_lt)
    hi = xp.concatenate([bps, xp.full(1, xp.inf)])
    lo = xp.concatenate([xp.full(1, -xp.inf), bps])
    j = xp.argmax(A * hi - B >= 0)
    return xp.maximum(lo[j], B[j] / A[j])


def optimal_bias_weighted(y_b, sc, wts) -> float:
    """:func:`optimal_bias_weighted_xp` on host arrays, as a float."""
    return float(optimal_bias_weighted_xp(np, y_b, sc, wts))


class GeneralEvaluation:
    """What the general path's host and device forms share: outputs, objectives, certificates.

    Written once against the host class's array module ``xp`` (NumPy for
    :class:`GeneralPath`, CuPy or NumPy for the device backend's
    :class:`~gpusvm.backends.device.DeviceBackend`); none of these
    methods synchronises a device.  Needs ``xp``, ``X``, ``n``, ``Y`` (n, M),
    ``sample_weight`` (float64 (n, M) or None, in ``xp``), ``V``, ``U``, ``sm`` and
    ``alpha`` from the host class.
    """

    @property
    def n_outputs(self) -> int:
        """``M``, the number of outputs (1 for 1-D labels)."""
        return int(self.Y.shape[1])

    def _weights(self):
        """``s``, float64 (n, M) in ``xp``: each output's row weights, or ones."""
        if self.sample_weight is not None:
            return self.sample_weight
        shape = (self.n, self.n_outputs)
        if getattr(self, "_ones", None) is None or self._ones.shape != shape:
            self._ones = self.xp.ones(shape, dtype=np.float64)
        return self._ones

    def reset_average_m(self) -> None:
        """Empty the running averages of every output (no synchronisation)."""
        if self.U is not None:
            self.U[...] = 0.0
        self.sm[S_ASUM] = 0.0
        self.sm[S_NAVG] = 0.0
        self.sm[S_BSUM] = 0.0

    def output_m(self, averaged: bool):
        """Dense float64 ``W`` (d, M) and ``b`` (M,) of the last iterate or of the average
        (the last iterate while no iterate was averaged yet, decided without a host read)."""
        xp = self.xp
        sm = self.sm
        last = sm[S_A] * self.V.astype(np.float64)
        if averaged and self.U is not None:
            some = sm[S_NAVG] > 0
            navg = xp.where(some, sm[S_NAVG], 1.0)
            W = xp.where(some, (sm[S_ASUM] * self.V.astype(np.float64) - self.U) / navg, last)
            return W, xp.where(some, sm[S_BSUM] / navg, sm[S_B])
        return last, sm[S_B].copy()

    def decision_function_m(self, W, b):
        """``<w_c, x_i> + b_c`` on all rows, float64 (n, M)."""
        xp = self.xp
        W = xp.asarray(W, dtype=np.float64)
        return xp.asarray(self.X @ W, dtype=np.float64) + b

    def col_sq_norms_m(self, W):
        """``||w_c||^2`` of every column of ``W`` (d, M), float64 (M,) in ``xp``."""
        W = self.xp.asarray(W, dtype=np.float64)
        return self.xp.einsum("ij,ij->j", W, W)

    def evaluate_m(self, W, b, lam: float, loss: str = "hinge", reg_bias: bool = False):
        """Weighted primal objective of every output (ALGORITHMS.md, "Weights").

        Returns
        -------
        objective, loss, sq_norm : arrays of float64, shape (M,)
            ``P_s(w_c)``, ``(1/n) sum_i s_i loss_i(w_c)`` and ``||w_c||^2`` (plus
            ``b_c^2`` when ``reg_bias``).
        """
        xp = self.xp
        Z = self.decision_function_m(W, b)
        slack = xp.maximum(0.0, 1.0 - self.Y * Z)
        if loss == "squared_hinge":
            slack = slack * slack
        if self.sample_weight is not None:
            slack = self.sample_weight * slack
        lval = slack.mean(axis=0)
        W = xp.asarray(W, dtype=np.float64)
        sq = self.col_sq_norms_m(W) + (xp.asarray(b) ** 2 if reg_bias else 0.0)
        return 0.5 * lam * sq + lval, lval, sq

    def final_optimal_bias_m(self, W):
        """Per output, the optimal bias of ``w_c`` over all rows (weighted, Pegasos Sec. 4)."""
        xp = self.xp
        Z = self.decision_function_m(W, 0.0)
        Y = self.Y.astype(np.float64)
        wts = self._weights()
        return xp.stack([optimal_bias_weighted_xp(xp, Y[:, c], Z[:, c], wts[:, c])
                         for c in range(self.n_outputs)])

    def regularized_bias_m(self, W, lam: float, c: float, loss: str = "hinge"):
        """Per output, the best weight of the constant feature ``c`` (the last row of ``W``)
        given the other weights (:func:`regularized_bias_xp`), shape (M,)."""
        xp = self.xp
        Z = self.decision_function_m(W, 0.0) - c * W[-1][None, :]
        Y = self.Y.astype(np.float64)
        wts = self._weights()
        return xp.stack([regularized_bias_xp(xp, Y[:, m], Z[:, m], wts[:, m], lam, c, loss)
                         for m in range(self.n_outputs)])

    def dual_weights_m(self, lam: float):
        """``W(alpha) = X^T (alpha * Y) / (lam n)`` (float64 (d, M)); resynchronises ``V``."""
        xp = self.xp
        A = self.alpha * self.Y.astype(np.float64)
        W = xp.asarray(self.X.T @ A, dtype=np.float64) / (lam * self.n)
        self.V[...] = W
        v64 = self.V.astype(np.float64)
        self.sm[S_A] = 1.0
        self.sm[S_VSQ] = xp.einsum("ij,ij->j", v64, v64)
        self.sm[S_ASUMD] = self.alpha.sum(axis=0)
        return W

    def col_dots_m(self, A, a_cols, B):
        """``<A[:, a_cols[q]], B[:, q]>`` for every column ``q`` of ``B``, float64 (q,) in ``xp``
        (``A`` and ``B`` float64 ``(d, .)`` arrays of the backend)."""
        return self.xp.einsum("ij,ij->j", A[:, a_cols], B)

    def mix_columns_m(self, dst, dst_cols, src, t) -> None:
        """``dst[:, dst_cols[q]] += t_q (src[:, q] - dst[:, dst_cols[q]])`` in place, for the
        host weights ``0 <= t_q <= 1``: ``t_q = 1`` copies the column exactly, ``t_q = 0``
        leaves it (``dst``, ``src``: float64 ``(d, .)`` arrays of the backend)."""
        t = np.asarray(t, dtype=np.float64)
        cols = np.asarray(dst_cols, dtype=np.intp)
        copy, mix = np.flatnonzero(t == 1.0), np.flatnonzero((t > 0.0) & (t < 1.0))
        if copy.size:
            dst[:, cols[copy]] = src[:, copy]
        if mix.size:
            old = dst[:, cols[mix]]
            dst[:, cols[mix]] = old + self.xp.asarray(t[mix]) * (src[:, mix] - old)

    def dual_objective_m(self, lam: float, W, loss: str = "hinge", sq=None):
        """``D(alpha)`` (hinge) or ``D2(alpha)`` (squared hinge) of every output (M,);
        ``sq``: the ``||w_c||^2`` of ``W`` when the caller has them (a pass less)."""
        xp = self.xp
        lin = self.alpha
        if loss == "squared_hinge":
            s = self._weights()
            with np.errstate(divide="ignore", invalid="ignore"):
                lin = xp.where(s > 0.0,
                               self.alpha - self.alpha ** 2 / (4.0 * xp.where(s > 0, s, 1.0)), 0.0)
        if sq is None:
            sq = self.col_sq_norms_m(xp.asarray(W, dtype=np.float64))
        return lin.sum(axis=0) / self.n - 0.5 * lam * xp.asarray(sq)


class GeneralPath(GeneralEvaluation):
    """Mixin of :class:`~gpusvm.backends.numpy_.NumpyBackend`: the general-path primitives.

    Needs ``X``, ``n``, ``d``, ``dtype``, ``row_sq_norms``, ``Y`` (n, M),
    ``sample_weight`` (float64 (n, M) or None) and ``_batch(rows)`` from the host
    class.  Every method name ends in ``_m``; the solvers call them through
    :data:`GENERAL_PRIMITIVES`.
    """

    # ------------------------------------------------------------ state
    def init_state_m(self, w0=None, b0=0.0, averaging: bool = False) -> None:
        """``V = W0`` (d, M) (zero by default), ``a = 1``, ``b = b0``, ``U = 0`` if averaging."""
        M = self.n_outputs
        if w0 is None:
            self.V = np.zeros((self.d, M), dtype=self.dtype)
        else:
            self.V = np.array(np.reshape(w0, (self.d, M)), dtype=self.dtype, order="C")
        self.sm = np.zeros((N_SLOTS, M), dtype=np.float64)
        self.sm[S_A] = 1.0
        self.sm[S_VSQ] = 0.0 if w0 is None else self.col_sq_norms_m(self.V)
        self.sm[S_B] = np.broadcast_to(np.asarray(b0, dtype=np.float64), (M,))
        self.U = np.zeros((self.d, M), dtype=np.float64) if averaging else None

    # ------------------------------------------------------------ Pegasos
    def margins_m(self, rows: np.ndarray) -> np.ndarray:
        """``m_ic = y_ic (a_c <v_c, x_i> + b_c)`` (float64, shape (k, M)): one gather per row."""
        owner, cols, vals = self._batch(rows)
        z = np.zeros((rows.size, self.n_outputs), dtype=np.float64)
        np.add.at(z, owner, vals[:, None] * self.V[cols])
        return self.Y[rows].astype(np.float64) * (self.sm[S_A] * z + self.sm[S_B])

    def optimal_bias_m(self, rows: np.ndarray, m: np.ndarray) -> None:
        """Per output: the batch-optimal bias of the weighted hinge; ``m`` shifted in place."""
        y_b = self.Y[rows].astype(np.float64)
        wts = self._weights()[rows]
        for c in range(self.n_outputs):
            yc = y_b[:, c]
            sc = yc * m[:, c] - self.sm[S_B, c]
            b = optimal_bias_weighted(yc, sc, wts[:, c])
            m[:, c] = 1.0 + yc * (b - (yc - sc))
            self.sm[S_B, c] = b

    def reset_scale_m(self) -> None:
        """``W = 0`` for every output, the running averages kept (``U -= A V``)."""
        if self.U is not None:
            self.U -= self.sm[S_ASUM] * self.V
        self.V[:] = 0
        self.sm[S_VSQ] = 0.0
        self.sm[S_A] = 1.0

    def add_rows_m(self, rows: np.ndarray, coef: np.ndarray, u_scale=None) -> np.ndarray:
        """``V[:, c] += sum_i coef_ic x_{rows_i}``; the exact change of each ``||v_c||^2`` (M,).

        When ``u_scale`` (M,) is given, ``U[:, c] += u_scale_c *`` the same sum.
        """
        owner, cols, vals = self._batch(rows)
        M = self.n_outputs
        if cols.size == 0:
            return np.zeros(M)
        uniq, inv = np.unique(cols, return_inverse=True)
        agg = np.zeros((uniq.size, M), dtype=np.float64)
        np.add.at(agg, inv, vals[:, None].astype(np.float64) * coef[owner])
        old = self.V[uniq].astype(np.float64)
        self.V[uniq] = old + agg
        new = self.V[uniq].astype(np.float64)
        if u_scale is not None and self.U is not None:
            self.U[uniq] += u_scale * agg
        return np.sum((new - old) * (new + old), axis=0)

    def pegasos_step_m(self, rows, m, eta: float, shrink: float, k: int, unreg_bias: bool,
                       radius: float, average: bool, squared: bool) -> None:
        """Steps 4-5 of Pegasos Fig. 1 for every output, weighted, per loss (module docstring)."""
        sm = self.sm
        y_b = self.Y[rows].astype(np.float64)
        s_b = self._weights()[rows]
        active = m < 1.0
        slack = np.maximum(0.0, 1.0 - m)
        sm[S_NACT] = np.count_nonzero(active, axis=0)
        if squared:
            g = 2.0 * s_b * slack                              # -d loss_i / d m_i
            sm[S_LOSS] = np.sum(s_b * slack * slack, axis=0)
        else:
            g = s_b * active
            sm[S_LOSS] = np.sum(s_b * slack, axis=0)
        a = sm[S_A] * shrink                                   # (1 - eta_t lam) w_t
        coef = np.where(active, (g * y_b) * (eta / (k * a)), 0.0)
        dn = self.add_rows_m(rows, coef, u_scale=sm[S_ASUM])
        sm[S_DNORM] = dn
        sm[S_VSQ] += dn
        sm[S_A] = a
        if unreg_bias:
            sm[S_YACT] = np.sum(np.where(active, g * y_b, 0.0), axis=0)
            sm[S_B] += eta * sm[S_YACT] / k
        if radius > 0.0:                                       # step 5, each column alone
            wsq = a * a * sm[S_VSQ]
            over = wsq > radius * radius
            sm[S_A] = np.where(over, a * (radius / np.sqrt(np.where(over, wsq, 1.0))), a)
        if average:
            sm[S_ASUM] += sm[S_A]
            sm[S_NAVG] += 1.0
            sm[S_BSUM] += sm[S_B]

    def renormalize_m(self, threshold: float) -> None:
        """Fold ``a_c`` into column ``c`` of ``V`` for each output with ``|a_c| < threshold``."""
        sm = self.sm
        for c in np.flatnonzero(np.abs(sm[S_A]) < threshold):
            a = sm[S_A, c]
            if self.U is not None:
                self.U[:, c] -= sm[S_ASUM, c] * self.V[:, c].astype(np.float64)
            self.V[:, c] *= self.dtype.type(a)
            sm[S_VSQ, c] *= a * a
            sm[S_ASUM, c] = 0.0
            sm[S_A, c] = 1.0

    def pegasos_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` on the general path, step by step.

        The M-output, weighted, per-loss form of
        :meth:`NumpyBackend.pegasos_segment <gpusvm.backends.numpy_.NumpyBackend.pegasos_segment>`
        (Shalev-Shwartz et al. 2007, Fig. 1); ``plan.loss`` picks the loss.
        """
        p = plan
        squared = p.loss == "squared_hinge"
        for t in range(t0 + 1, t1 + 1):
            rows, _ = sampler.batch(t - 1)                                    # step 1: A_t
            m = self.margins_m(rows)                                          # step 2
            if p.optimal:
                self.optimal_bias_m(rows, m)                                  # Sec. 4
            eta, shrink = step_size(p.schedule, t, p.lam, p.eta0, p.norma_p)  # step 3
            if shrink == 0.0:
                self.reset_scale_m()
                shrink = 1.0
            self.pegasos_step_m(rows, m, eta, shrink, p.k, p.unreg_bias, p.radius,   # steps 4-5
                                p.averaged and t >= p.t_avg, squared)
            self.renormalize_m(p.renorm_threshold)

    # ------------------------------------------------------------ SDCA
    def init_dual_m(self, beta0: float, loss: str = "hinge", alpha0=None, lam=None) -> None:
        """Start SDCA: ``alpha = alpha0`` (n, M), or 0 with zero rows at their optimum.

        A zero row's dual term does not interact with ``w``; its optimum is
        ``alpha_i = s_i`` (hinge) or ``2 s_i`` (squared hinge).  With ``alpha0``
        the iterate is set to ``w(alpha0)`` (``lam`` needed).  ``sm[S_BETA] = beta0``,
        ``sm[S_NREJ] = 0``.
        """
        M = self.n_outputs
        s = self._weights()
        if alpha0 is None:
            zero = (self.row_sq_norms == 0).astype(np.float64)
            top = 2.0 * s if loss == "squared_hinge" else s
            self.alpha = np.ascontiguousarray(zero[:, None] * top)
        else:
            self.alpha = np.array(np.reshape(alpha0, (self.n, M)), dtype=np.float64, order="C")
        with np.errstate(divide="ignore"):
            self._inv_q = 1.0 / self.row_sq_norms
        self._eps = float(np.finfo(self.dtype).eps)
        self.sm[S_ASUMD] = self.alpha.sum(axis=0)
        self.sm[S_BETA] = float(beta0)
        self.sm[S_NREJ] = 0.0
        if alpha0 is not None:
            self.dual_weights_m(lam)

    def sdca_deltas_m(self, rows, m, lam: float, first=None, squared: bool = False):
        """Eq. (15) per output with ``beta_c = sm[S_BETA, c]``, weighted, per loss (k, M)."""
        A = self.alpha[rows]
        s = self._weights()[rows]
        q = self.row_sq_norms[rows][:, None]
        beta = self.sm[S_BETA]
        lamn = lam * self.n
        if squared:
            delta = (2.0 * s * (1.0 - m) - A) / (1.0 + 2.0 * s * beta * q / lamn)
            delta = np.maximum(delta, -A)
        else:
            raw = (lamn / beta) * (1.0 - m) * self._inv_q[rows][:, None]
            with np.errstate(invalid="ignore"):
                delta = np.minimum(np.maximum(raw, -A), s - A)
            delta = np.where(q == 0.0, s - A, delta)
        if first is not None:
            delta = np.where(np.asarray(first, dtype=bool)[:, None], delta, 0.0)
        return delta

    def _sum_sq_norms_m(self, rows, coef) -> np.ndarray:
        """``||sum_i coef_ic x_{rows_i}||^2`` per output (M,)."""
        owner, cols, vals = self._batch(rows)
        if cols.size == 0:
            return np.zeros(self.n_outputs)
        uniq, inv = np.unique(cols, return_inverse=True)
        agg = np.zeros((uniq.size, self.n_outputs), dtype=np.float64)
        np.add.at(agg, inv, vals[:, None].astype(np.float64) * coef[owner])
        return np.sum(agg * agg, axis=0)

    def sdca_adapt_beta_m(self, rows, delta, beta_b: float, theta: float) -> None:
        """Alg. 2 per output: ``beta_c <- beta_c^theta rho_c^(1-theta)`` where ``den_c > 0``."""
        sm = self.sm
        den = np.sum(delta * delta * self.row_sq_norms[rows][:, None], axis=0)
        num = self._sum_sq_norms_m(rows, delta * self.Y[rows].astype(np.float64))
        for c in np.flatnonzero(den > 0.0):
            rho = min(max(num[c] / den[c], 1.0), beta_b)
            sm[S_TMP0, c] = rho
            beta = sm[S_BETA, c] ** theta * rho ** (1.0 - theta)
            sm[S_BETA, c] = min(max(beta, 1.0), beta_b)

    def _dual_gain_linear(self, rows, delta, squared: bool) -> np.ndarray:
        """``n`` times the change of the separable part of ``D`` for the step (M,)."""
        if not squared:
            return delta.sum(axis=0)
        A = self.alpha[rows]
        s = self._weights()[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            quad = np.where(s > 0.0, delta * (2.0 * A + delta) / (4.0 * np.where(s > 0, s, 1.0)),
                            0.0)
        return np.sum(delta - quad, axis=0)

    def sdca_apply_m(self, rows, delta, lam: float, check: bool, squared: bool = False) -> None:
        """``alpha += delta``, ``W += (1/(lam n)) sum_i delta_ic y_ic x_i`` per output.

        When ``check``, output ``c``'s step is undone (and ``sm[S_NREJ, c]``
        counts it) if its ``Delta D_c < -tau_c`` (the test of
        :meth:`NumpyBackend.sdca_apply <gpusvm.backends.numpy_.NumpyBackend.sdca_apply>`,
        with the squared hinge's separable term).
        """
        sm = self.sm
        n, a = self.n, sm[S_A]
        coef = delta * self.Y[rows].astype(np.float64) * (1.0 / (lam * n * a))
        vsq = sm[S_VSQ].copy()
        dn = self.add_rows_m(rows, coef)
        sm[S_DNORM] = dn
        ok = np.ones(self.n_outputs, dtype=bool)
        if check:
            gain = self._dual_gain_linear(rows, delta, squared)
            tau = 4.0 * (self._eps * lam * a * a * vsq + _EPS64 * np.abs(delta).sum(axis=0) / n)
            ok = gain / n - 0.5 * lam * a * a * dn >= -tau
            if not ok.all():
                dn2 = self.add_rows_m(rows, np.where(ok, 0.0, -coef))
                dn = dn + dn2
                sm[S_NREJ] += ~ok
        sm[S_VSQ] += dn
        kept = np.where(ok, delta, 0.0)
        np.add.at(self.alpha, rows, kept)
        sm[S_ASUMD] += kept.sum(axis=0)

    def sdca_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` on the general path (Takáč et al. 2013, eq. 15 / Alg. 2)."""
        p = plan
        squared = p.loss == "squared_hinge"
        for t in range(t0, t1):
            rows, first = sampler.batch(t)                                        # A_t
            m = self.margins_m(rows)                                              # y_ic <w_c, x_i>
            delta = self.sdca_deltas_m(rows, m, p.lam, first, squared)            # eq. (15)
            if p.aggressive:
                self.sdca_adapt_beta_m(rows, delta, p.beta_b, p.theta)            # Alg. 2
                delta = self.sdca_deltas_m(rows, m, p.lam, first, squared)
            self.sdca_apply_m(rows, delta, p.lam, p.aggressive, squared)

    @contextlib.contextmanager
    def outputs_m(self, outputs):
        """Within the block the backend holds the listed outputs only (``Y``, ``V``, ``alpha``
        and ``sm`` restricted to those columns); on exit their columns are written back and
        the other outputs are as they were.

        One-vs-rest outputs are independent problems that share the sampled rows, so an
        output whose certificate is below ``tol`` can stop while the others go on: the SDCA
        solver runs its segments inside this block with the outputs not yet certified,
        which then cost the margins and updates of those outputs only.
        """
        outputs = np.asarray(outputs, dtype=np.intp)
        full = (self.Y, self.V, self.alpha, self.sm, self.sample_weight)
        if full[4] is not None:               # each output keeps its own row weights
            self.sample_weight = np.ascontiguousarray(full[4][:, outputs])
        self.Y = np.ascontiguousarray(full[0][:, outputs])
        self.V = np.ascontiguousarray(full[1][:, outputs])
        self.alpha = np.ascontiguousarray(full[2][:, outputs])
        self.sm = np.ascontiguousarray(full[3][:, outputs])
        try:
            yield self
        finally:
            full[1][:, outputs] = self.V
            full[2][:, outputs] = self.alpha
            full[3][:, outputs] = self.sm
            self.Y, self.V, self.alpha, self.sm, self.sample_weight = full


#: what a backend must implement for the general path (the solvers check it)
GENERAL_PRIMITIVES = ("init_state_m", "pegasos_segment_m", "reset_average_m", "output_m",
                      "evaluate_m", "final_optimal_bias_m", "init_dual_m", "sdca_segment_m",
                      "dual_weights_m", "dual_objective_m")
