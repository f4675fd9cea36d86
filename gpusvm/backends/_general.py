"""The one state and objective of every backend, and what the backends share to evaluate it.

Every fit runs on this state (docs/algorithms.md, "Weights, and the squared hinge" and "Many
outputs at once"); a binary, unweighted hinge fit is ``M = 1`` with ``s_i = 1``.  The loops
over it are :class:`~gpusvm.backends.numpy_.NumpyBackend`'s (the reference), the numba
backend's and the device backend's.  State, in the backend's array module:

``V`` : (d, M), the data's dtype, row-major
    ``W = V diag(a)``: column ``c`` is output ``c``'s ``v``; a nonzero ``x_ij`` reads the
    ``M`` entries ``V[j, :]`` contiguously.
``sm`` : (N_SLOTS, M) float64
    One column of the slots of :mod:`gpusvm.backends._state` per output (``sm[S_A]`` the M
    scales, ...); ``sm[S_NAVG]`` is the same in every column.
``U`` : (d, M) float64 or None
    Averaging (``S = A v - u`` per column).
``alpha`` : (n, M) float64
    SDCA's dual variables, one column per output.

The objective of output ``c`` with weights ``s_i >= 0`` (scikit-learn's ``sample_weight``)
is ``P_s(w) = lam/2 ||w||^2 + (1/n) sum_i s_i loss_i(w)`` with ``loss_i`` the hinge
``max(0, 1 - m_i)`` or the squared hinge ``max(0, 1 - m_i)^2``, ``m_i = y_ic (<w_c, x_i> + b_c)``.

Pegasos (Shalev-Shwartz et al. 2007, Fig. 1, steps 4-5, per output): the subgradient of a
violated example is ``-s_i y_i x_i`` (hinge) or ``-2 s_i (1 - m_i) y_i x_i`` (squared hinge);
the shrink ``1 - eta_t lam`` is common to the outputs, the projection scales each column alone.

SDCA (Takáč et al. 2013, eq. 15, per output): hinge ``delta`` clipped to ``[-alpha_i, s_i -
alpha_i]``; squared hinge ``delta = lam n (1 - m_i - alpha_i/(2 s_i)) / (lam n/(2 s_i) + beta
||x_i||^2)``, computed as ``(2 s_i (1 - m_i) - alpha_i) / (1 + 2 s_i beta ||x_i||^2 / (lam n))``
(no division by ``s_i``: a zero weight gives ``delta = -alpha_i``, a zero row ``2 s_i -
alpha_i``), then ``alpha_i + delta >= 0``; dual ``D2(alpha) = (1/n) sum_i (alpha_i -
alpha_i^2/(4 s_i)) - lam/2 ||w(alpha)||^2``.
"""

from __future__ import annotations

import numpy as np

from ._state import S_A, S_ASUM, S_ASUMD, S_B, S_BSUM, S_NAVG, S_VSQ

#: losses by int code (the compiled loops and kernels take the code)
LOSSES = ("hinge", "squared_hinge")


def as_2d_labels(y, n: int, dtype) -> np.ndarray:
    """Labels in {-1, +1} as a C-contiguous ``(n, M)`` array (a 1-D ``y`` is one column)."""
    y = np.asarray(y, dtype=dtype)
    if y.ndim == 1:
        y = y.reshape(-1, 1)
    if y.ndim != 2 or y.shape[0] != n or y.shape[1] < 1:
        raise ValueError(f"y must have shape ({n},) or ({n}, M) with M >= 1 outputs, "
                         f"got {tuple(np.shape(y))}")
    return np.ascontiguousarray(y)


def check_sample_weight(sample_weight, n: int, M: int = 1):
    """``sample_weight`` as float64 ``(n, M)`` (C order), or None; clear errors for bad values.

    Shape ``(n,)`` is one weight per row, repeated for the ``M`` outputs; ``(n, M)`` gives
    each output its own row weights ``s_ic`` (docs/algorithms.md, "Model selection in one pass").
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

    Pegasos Sec. 4, weighted: the right derivative at ``b`` is ``sum{s_i : y_i = -1,
    b_i <= b} - sum{s_i : y_i = +1, b_i > b}`` with the breakpoints ``b_i = y_i - sc_i``;
    the smallest breakpoint where it is ``>= 0`` is returned (a weighted median).
    ``xp`` is the arrays' module (NumPy or CuPy), ``y_b, sc, wts`` float64 (k,); the
    result is a 0-d array of ``xp`` (no synchronisation).
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

    ``beta`` is the weight of a constant feature of value ``c`` (the augmented bias, which is
    regularised), the rest of ``w`` fixed: ``sc_i`` are the margins without it, ``L`` the
    hinge or the squared hinge.  The function is convex with breakpoints ``beta_i = (y_i -
    sc_i) / c`` (row ``i`` is violated for ``beta < beta_i`` when ``y_i = +1``, for ``beta >
    beta_i`` when ``y_i = -1``); between two sorted breakpoints the derivative is ``A_j beta
    - B_j`` with ``A_j = lam``, ``B_j = (c/n) (S+_j - S-_j)`` (hinge) or ``A_j = lam + (2
    c^2/n) S_j``, ``B_j = (2 c^2/n) sum_viol s_i beta_i`` (squared hinge), where ``S+_j``
    (``S-_j``) is the weight of the violated positive (negative) rows on interval ``j`` and
    ``S_j = S+_j + S-_j``.  The derivative does not decrease, so the minimiser is ``max(lo_j,
    B_j / A_j)`` on the first interval ``[lo_j, hi_j)`` where ``A_j hi_j - B_j >= 0`` (a kink
    at ``lo_j`` or the root inside).

    Parameters
    ----------
    xp : module
        NumPy or CuPy (the arrays' module; the result stays there, a 0-d array).
    y, sc, wts : arrays of float64, shape (n,)
        Labels in {-1, +1}, margins without the constant feature, sample weights.
    lam, c : float
        Regularisation; the value of the constant feature (``intercept_scaling``).
    loss : {"hinge", "squared_hinge"}
    """
    n = y.shape[0]
    bp = (y - sc) / c
    order = xp.argsort(bp, kind="stable") if getattr(xp, "stable_argsort", xp is np) else xp.argsort(bp)
    bps, ys, ws = bp[order], y[order], wts[order]
    pos = xp.where(ys > 0, ws, 0.0)
    neg = xp.where(ys < 0, ws, 0.0)
    zero = xp.zeros(1)
    # interval j = 0..n, between bps[j-1] and bps[j]: positives of index >= j, negatives < j violated
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

    Written once against the host class's array module ``xp`` (NumPy; for the device backend
    CuPy, or the emulator's NumPy stand-in); none of these methods synchronises a device.
    Needs ``xp``, ``X``, ``n``, ``Y`` (n, M), ``sample_weight`` (float64 (n, M) or None),
    ``V``, ``U``, ``sm`` and ``alpha``.
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
        """Weighted primal objective of every output (docs/algorithms.md, "Weights").

        Returns
        -------
        objective, loss, sq_norm : arrays of float64, shape (M,)
            ``P_s(w_c)``, ``(1/n) sum_i s_i loss_i(w_c)``, ``||w_c||^2`` (+ ``b_c^2`` if ``reg_bias``).
        """
        xp = self.xp
        Z = self.decision_function_m(W, b)
        slack = xp.maximum(0.0, 1.0 - self.Y * Z)
        if loss == "squared_hinge":
            slack = slack * slack
        if self.sample_weight is not None:
            slack = self.sample_weight * slack
        lval = slack.mean(axis=0)
        sq = self.col_sq_norms_m(W) + (xp.asarray(b) ** 2 if reg_bias else 0.0)
        return 0.5 * lam * sq + lval, lval, sq

    def final_optimal_bias_m(self, W):
        """Per output, the optimal bias of ``w_c`` over all rows (weighted, Pegasos Sec. 4)."""
        return self._per_output(optimal_bias_weighted_xp, self.decision_function_m(W, 0.0))

    def regularized_bias_m(self, W, lam: float, c: float, loss: str = "hinge"):
        """Per output, the best weight of the constant feature ``c`` (the last row of ``W``)
        given the other weights (:func:`regularized_bias_xp`), shape (M,)."""
        Z = self.decision_function_m(W, 0.0) - c * W[-1][None, :]
        return self._per_output(regularized_bias_xp, Z, lam, c, loss)

    def _per_output(self, solve, Z, *args):
        """``solve(xp, y_c, Z_c, s_c, *args)`` of every output, stacked."""
        Y = self.Y.astype(np.float64)
        wts = self._weights()
        return self.xp.stack([solve(self.xp, Y[:, c], Z[:, c], wts[:, c], *args)
                              for c in range(self.n_outputs)])

    def dual_weights_m(self, lam: float):
        """``W(alpha) = X^T (alpha * Y) / (lam n)`` (float64 (d, M)); resynchronises ``V``."""
        xp = self.xp
        A = self.alpha * self.Y.astype(np.float64)
        W = xp.asarray(self.X.T @ A, dtype=np.float64) / (lam * self.n)
        self._resync(W)
        return W

    def _resync(self, W) -> None:
        """The state after a certificate: ``V = W(alpha)`` rounded, ``a = 1``, its norms, ``sum alpha``."""
        self.V[...] = W
        self.sm[S_A] = 1.0
        self.sm[S_VSQ] = self.col_sq_norms_m(self.V)
        self.sm[S_ASUMD] = self.alpha.sum(axis=0)

    def col_dots_m(self, A, a_cols, B):
        """``<A[:, a_cols[q]], B[:, q]>`` for every column ``q`` of ``B``, float64 (q,) in ``xp``
        (``A`` and ``B`` float64 ``(d, .)`` arrays of the backend)."""
        cols = np.asarray(a_cols, dtype=np.intp).reshape(-1)
        if _all_in_order(cols, A):                   # every column: no gathered copy
            return self.xp.einsum("ij,ij->j", A, B)
        if cols.size == 1:                           # a view, not a gathered copy
            return self.xp.einsum("ij,ij->j", A[:, cols[0]:cols[0] + 1], B)
        return self.xp.einsum("ij,ij->j", A[:, cols], B)

    def mix_columns_m(self, dst, dst_cols, src, t) -> None:
        """``dst[:, dst_cols[q]] += t_q (src[:, q] - dst[:, dst_cols[q]])`` in place, for the
        host weights ``0 <= t_q <= 1``: ``t_q = 1`` copies the column exactly, ``t_q = 0``
        leaves it (``dst``, ``src``: float64 ``(d, .)`` arrays of the backend)."""
        xp = self.xp
        t = np.asarray(t, dtype=np.float64)
        cols = np.asarray(dst_cols, dtype=np.intp)
        copy, mix = np.flatnonzero(t == 1.0), np.flatnonzero((t > 0.0) & (t < 1.0))
        if _all_in_order(cols, dst) and mix.size + copy.size > 1:
            # every column, as whole-array passes (a gather and a scatter per column cost
            # 17 ms on 20 columns of news20): adding 0 * (src - dst) leaves a column as it is
            if mix.size:
                dst += xp.asarray(np.where((t > 0.0) & (t < 1.0), t, 0.0)) * (src - dst)
            if copy.size:
                xp.copyto(dst, src, where=xp.asarray(t == 1.0))
            return
        if copy.size:
            dst[:, cols[copy]] = src[:, copy]
        if mix.size:
            old = dst[:, cols[mix]]
            dst[:, cols[mix]] = old + xp.asarray(t[mix]) * (src[:, mix] - old)

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


def _all_in_order(cols, A) -> bool:
    """Whether ``cols`` names every column of ``A`` in order (``A[:, cols]`` is ``A``)."""
    return cols.size == A.shape[1] and bool(np.all(cols == np.arange(cols.size)))
