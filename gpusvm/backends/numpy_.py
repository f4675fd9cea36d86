"""NumPy/SciPy reference backend: one readable loop per solver over M outputs.

The state and the objective are those of :mod:`gpusvm.backends._general`.  Every other
backend computes the iterates of these loops on the same batches, up to the order of
floating-point sums.
"""

from __future__ import annotations

import contextlib

import numpy as np
import scipy.sparse as sp

from ._general import GeneralEvaluation, as_2d_labels, check_sample_weight, optimal_bias_weighted
from ._state import (N_SLOTS, S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_BSUM, S_DNORM, S_LOSS,
                     S_NACT, S_NAVG, S_NREJ, S_TMP0, S_VSQ, S_YACT)
from .base import step_size

_EPS64 = float(np.finfo(np.float64).eps)
#: shrinking: unshrink every row once the projected gradients of the active set span at most
#: this (LIBLINEAR's default stopping tolerance of its dual solvers)
SHRINK_EPS = 0.1
#: shrinking: alpha_i counts as at its upper bound 1 within this (alpha_i += 1 - alpha_i rounds)
UPPER_SLACK = 4 * _EPS64


def _csr_rows_nnz(X: sp.csr_matrix, rows: np.ndarray):
    """The nonzeros of ``rows`` of CSR ``X``: ``owner`` (position in ``rows``), ``cols``, ``vals``."""
    starts = X.indptr[rows]
    lens = X.indptr[rows + 1] - starts
    owner = np.repeat(np.arange(rows.size), lens)
    # position of each nonzero inside X.indices: start of its row + rank inside row
    offs = np.cumsum(lens) - lens
    pos = np.arange(int(lens.sum())) - np.repeat(offs - starts, lens)
    return owner, X.indices[pos], X.data[pos]


def _sum_by(index, values, size: int) -> np.ndarray:
    """``out[j, c] = sum of values[i, c] over index[i] == j`` in float64, in the order of ``i``
    (a product with the 0/1 CSC matrix: bitwise one ``bincount`` per output, in one pass)."""
    S = sp.csc_matrix((np.ones(index.size), index, np.arange(index.size + 1)),
                      shape=(size, index.size))
    return S @ values.astype(np.float64, copy=False)


class NumpyBackend(GeneralEvaluation):
    """Reference backend on NumPy and SciPy CSR.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        Training data, CSR with sorted indices, dtype float32 or float64.
    y : ndarray of shape (n,) or (n, M)
        Labels in {-1, +1}, same dtype as ``X``; one column per output.
    sample_weight : ndarray of shape (n,) or (n, M), optional
        Example weights ``s_i >= 0`` (docs/algorithms.md, "Weights").

    Attributes
    ----------
    Y : ndarray of shape (n, M)
        The labels with one column per output (a view of a 1-D ``y``).

    Notes
    -----
    ``V`` is kept in the data's dtype; scalars, margins and the exact changes of ``||v_c||^2``
    are computed in float64.
    """

    name = "numpy"
    xp = np

    def __init__(self, X: sp.csr_matrix, y: np.ndarray, sample_weight=None) -> None:
        self.X = X
        self.n, self.d = X.shape
        self.Y = as_2d_labels(y, self.n, X.dtype)
        self.y = self.Y.ravel() if np.ndim(y) == 1 else self.Y
        self.sample_weight = check_sample_weight(sample_weight, self.n, self.Y.shape[1])
        self.dtype = X.dtype
        self.row_sq_norms = self._row_sq_norms()
        self._gather_rows = None
        self._gather = None

    def _row_sq_norms(self) -> np.ndarray:
        """``||x_i||^2`` in float64; copies only ``X.data`` (squared), not the whole of ``X``."""
        X = self.X
        sq = sp.csr_matrix((np.square(X.data, dtype=np.float64), X.indices, X.indptr), shape=X.shape)
        return np.asarray(sq.sum(axis=1), dtype=np.float64).ravel()

    def to_host(self, a):
        """Return ``a`` as a host NumPy array (a no-op here)."""
        return np.asarray(a)

    def _batch(self, rows):
        if self._gather_rows is not rows:
            self._gather = _csr_rows_nnz(self.X, rows)
            self._gather_rows = rows
        return self._gather

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

    def margins_m(self, rows: np.ndarray) -> np.ndarray:
        """``m_ic = y_ic (a_c <v_c, x_i> + b_c)`` (float64, shape (k, M)): one gather per row."""
        owner, cols, vals = self._batch(rows)
        z = _sum_by(owner, vals[:, None] * self.V[cols], rows.size)
        return self.Y[rows].astype(np.float64) * (self.sm[S_A] * z + self.sm[S_B])

    def add_rows_m(self, rows: np.ndarray, coef: np.ndarray, u_scale=None) -> np.ndarray:
        """``V[:, c] += sum_i coef_ic x_{rows_i}``; the exact change of each ``||v_c||^2`` (M,)."""
        return self.add_sparse_m(*self.row_sum_m(rows, coef), u_scale)

    def row_sum_m(self, rows: np.ndarray, coef: np.ndarray):
        """``sum_i coef_ic x_{rows_i}`` as ``(idx, agg)``: the sorted columns that a row with
        a nonzero coefficient touches (int64) and the sums there, float64 (q, M)."""
        owner, cols, vals = self._batch(rows)
        live = np.any(coef != 0.0, axis=1)             # inactive rows add nothing
        if not live.all():
            keep = live[owner]
            owner, cols, vals = owner[keep], cols[keep], vals[keep]
        uniq, inv = np.unique(cols, return_inverse=True)
        return uniq.astype(np.int64), _sum_by(inv.ravel(), vals[:, None] * coef[owner], uniq.size)

    def add_sparse_m(self, idx: np.ndarray, agg: np.ndarray, u_scale=None) -> np.ndarray:
        """``V[idx] += agg`` (and ``U[idx] += u_scale agg``); the exact change of each ``||v_c||^2``.

        Summed per column as ``(new - old)(new + old)``: its rounding is relative to the
        change, not to ``||v_c||^2``.
        """
        if idx.size == 0:
            return np.zeros(self.n_outputs)
        old = self.V[idx].astype(np.float64, copy=False)
        new = old + agg
        self.V[idx] = new
        if self.dtype != np.float64:                   # the stored (rounded) values
            new = self.V[idx].astype(np.float64)
        if u_scale is not None and self.U is not None:
            self.U[idx] += u_scale * agg
        return np.sum((new - old) * (new + old), axis=0)

    # ------------------------------------------------------------ Pegasos
    def optimal_bias_m(self, rows: np.ndarray, m: np.ndarray) -> None:
        """Per output: the batch-optimal bias of the weighted hinge (Sec. 4); ``m`` shifted.

        ``y_i (sc_i + b)`` is written ``1 + y_i (b - b_i)`` with ``b_i = y_i - sc_i``: exactly
        1 (so not in ``A_t^+``) for the rows whose breakpoint is ``b``, whatever the rounding.
        """
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

    def pegasos_coef_m(self, rows, m, scale, squared: bool):
        """Step 4's coefficients ``(scale gy, gy)``; the active count and loss sum into ``sm``.

        ``gy_ic = g_ic y_ic`` on ``m_ic < 1`` (0 elsewhere), ``g_ic = -d loss_i / d m_i``:
        ``s_i`` (hinge) or ``2 s_i (1 - m_ic)`` (squared hinge).
        """
        sm = self.sm
        y_b = self.Y[rows].astype(np.float64)
        s_b = self._weights()[rows]
        active = m < 1.0
        slack = np.maximum(0.0, 1.0 - m)
        sm[S_NACT] = np.count_nonzero(active, axis=0)
        if squared:
            g = 2.0 * s_b * slack
            sm[S_LOSS] = np.sum(s_b * slack * slack, axis=0)
        else:
            g = s_b * active
            sm[S_LOSS] = np.sum(s_b * slack, axis=0)
        gy = np.where(active, g * y_b, 0.0)
        return gy * scale, gy

    def pegasos_update_m(self, idx, agg, a, radius: float, average: bool) -> None:
        """Steps 4-5 from a sparse step: ``V[idx] += agg``, the scale ``a = (1 - eta_t lam) a_t``,
        each column projected onto the ball of radius ``radius`` (0: none), the new iterate
        into the running average when ``average``."""
        sm = self.sm
        dn = self.add_sparse_m(idx, agg, u_scale=sm[S_ASUM])
        sm[S_DNORM] = dn
        sm[S_VSQ] += dn
        sm[S_A] = a
        if radius > 0.0:                                       # step 5, each column alone
            wsq = a * a * sm[S_VSQ]
            over = wsq > radius * radius
            sm[S_A] = np.where(over, a * (radius / np.sqrt(np.where(over, wsq, 1.0))), a)
        if average:
            sm[S_ASUM] += sm[S_A]
            sm[S_NAVG] += 1.0
            sm[S_BSUM] += sm[S_B]

    def pegasos_step_m(self, rows, m, eta: float, shrink: float, k: int, unreg_bias: bool,
                       radius: float, average: bool, squared: bool) -> None:
        """Steps 4-5 of Pegasos Fig. 1: ``a <- shrink a``, ``v_c += eta/(k a_c) sum_i gy_ic x_i``,
        the unregularised bias step, :meth:`pegasos_update_m`."""
        sm = self.sm
        a = sm[S_A] * shrink                                   # (1 - eta_t lam) w_t
        coef, gy = self.pegasos_coef_m(rows, m, eta / (k * a), squared)
        if unreg_bias:                                         # b - eta_t d/db of the batch loss
            sm[S_YACT] = np.sum(gy, axis=0)
            sm[S_B] += eta * sm[S_YACT] / k
        self.pegasos_update_m(*self.row_sum_m(rows, coef), a, radius, average)

    def renormalize_m(self, threshold: float) -> None:
        """Fold ``a_c`` into column ``c`` of ``V`` for each output with ``|a_c| < threshold``.

        The running sum ``S = A v - u`` moves into ``u`` alone (``u <- u - A v``, ``A <- 0``):
        rescaling ``A`` by ``1/a`` instead loses every digit of ``S`` to cancellation.
        """
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
        """Pegasos iterations ``t0 + 1 .. t1`` (Shalev-Shwartz et al. 2007, Fig. 1), step by step:
        the reference of every backend's segment.

        Parameters
        ----------
        sampler : gpusvm.solvers._sampling.CounterSampler
            ``A_t`` is ``sampler.batch(t - 1)``.
        t0, t1 : int
            Iterations done before and after the segment.
        plan : gpusvm.backends.base.PegasosPlan
        """
        p = plan
        squared = p.loss == "squared_hinge"
        for t in range(t0 + 1, t1 + 1):
            rows, _ = sampler.batch(t - 1)                                    # step 1: A_t
            m = self.margins_m(rows)                                          # step 2
            if p.optimal:
                self.optimal_bias_m(rows, m)                                  # Sec. 4: b* of A_t
            eta, shrink = step_size(p.schedule, t, p.lam, p.eta0, p.norma_p)  # step 3
            if shrink == 0.0:
                self.reset_scale_m()
                shrink = 1.0
            self.pegasos_step_m(rows, m, eta, shrink, p.k, p.unreg_bias, p.radius,   # steps 4-5
                                p.averaged and t >= p.t_avg, squared)
            self.renormalize_m(p.renorm_threshold)                            # keep v in range

    # ------------------------------------------------------------ SDCA (Takáč et al. 2013)
    def init_dual_m(self, beta0: float, loss: str = "hinge", alpha0=None, lam=None) -> None:
        """Start SDCA: ``alpha = alpha0`` (n, M), or 0 with zero rows at their optimum.

        A zero row's dual term does not interact with ``w``; its optimum is ``alpha_i = s_i``
        (hinge) or ``2 s_i`` (squared hinge).  With ``alpha0`` the iterate is set to
        ``w(alpha0)`` (``lam`` needed).  ``beta0`` is SDCA's ``beta^(0)`` (``sm[S_BETA]``),
        ``sm[S_NREJ] = 0``.  Every row starts in the active set of shrinking.
        """
        s = self._weights()
        if alpha0 is None:
            zero = (self.row_sq_norms == 0).astype(np.float64)
            top = 2.0 * s if loss == "squared_hinge" else s
            self.alpha = np.ascontiguousarray(zero[:, None] * top)
        else:
            self.alpha = np.array(np.reshape(alpha0, (self.n, self.n_outputs)), dtype=np.float64,
                                  order="C")
        with np.errstate(divide="ignore"):
            self._inv_q = 1.0 / self.row_sq_norms     # inf on zero rows: their step is s_i - alpha_i
        self._eps = float(np.finfo(self.dtype).eps)
        self._active = np.ones(self.n, dtype=np.bool_)
        self._shr = np.array([np.inf, -np.inf, -np.inf, np.inf])
        self.sm[S_ASUMD] = self.alpha.sum(axis=0)
        self.sm[S_BETA] = float(beta0)
        self.sm[S_NREJ] = 0.0
        if alpha0 is not None:
            self.dual_weights_m(lam)

    def sdca_deltas_m(self, rows, m, lam: float, first=None, squared: bool = False):
        """Eq. (15) per output with ``beta_c = sm[S_BETA, c]`` (k, M).

        Hinge: ``clip_[-alpha_i, s_i - alpha_i](lam n (1 - m_i) / (beta ||x_i||^2))``, ``s_i -
        alpha_i`` on a zero row; squared hinge: the closed form of :mod:`._general`.  ``delta
        = 0`` where ``first`` is 0/False (a repeated row of the batch).
        """
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

    def sdca_adapt_beta_m(self, rows, delta, beta_b: float, theta: float) -> None:
        """Alg. 2 per output: ``beta_c <- clip(beta_c^theta rho_c^(1-theta), 1, beta_b)``.

        ``rho_c = ||sum_i delta_ic y_ic x_i||^2 / sum_i delta_ic^2 ||x_i||^2`` clipped to ``[1,
        beta_b]`` (in ``sm[S_TMP0]``); ``beta_c`` stays where the denominator is 0.
        """
        sm = self.sm
        den = np.sum(delta * delta * self.row_sq_norms[rows][:, None], axis=0)
        owner, cols, vals = self._batch(rows)
        num = np.zeros(self.n_outputs)
        if cols.size:
            uniq, inv = np.unique(cols, return_inverse=True)
            coef = delta * self.Y[rows].astype(np.float64)
            agg = _sum_by(inv, vals[:, None] * coef[owner], uniq.size)
            num = np.sum(agg * agg, axis=0)
        for c in np.flatnonzero(den > 0.0):
            rho = min(max(num[c] / den[c], 1.0), beta_b)
            sm[S_TMP0, c] = rho
            beta = sm[S_BETA, c] ** theta * rho ** (1.0 - theta)
            sm[S_BETA, c] = min(max(beta, 1.0), beta_b)

    def sdca_apply_m(self, rows, delta, lam: float, check: bool, squared: bool = False) -> None:
        """``alpha += delta``, ``W += (1/(lam n)) sum_i delta_ic y_ic x_i`` per output.

        When ``check``, output ``c``'s step is undone (``V`` gets the opposite addition,
        ``alpha`` is left, ``sm[S_NREJ, c]`` counts it) if ``Delta D_c < -tau_c``, ``tau_c =
        4 eps lam a_c^2 ||v_c||^2 + 4 eps_64 sum_i |delta_ic| / n`` the rounding of that
        difference (``eps`` of ``V``'s dtype); with ``squared`` ``Delta D_c`` has the squared
        hinge's separable term.
        """
        sm = self.sm
        n, a = self.n, sm[S_A]
        coef = delta * self.Y[rows].astype(np.float64) * (1.0 / (lam * n * a))
        vsq = sm[S_VSQ].copy()
        dn = self.add_rows_m(rows, coef)
        sm[S_DNORM] = dn
        ok = np.ones(self.n_outputs, dtype=bool)
        if check:
            gain = delta.sum(axis=0)                        # n times the separable change of D
            if squared:
                A, s = self.alpha[rows], self._weights()[rows]
                with np.errstate(divide="ignore", invalid="ignore"):
                    gain = gain - np.sum(np.where(s > 0.0, delta * (2.0 * A + delta) /
                                                  (4.0 * np.where(s > 0, s, 1.0)), 0.0), axis=0)
            tau = 4.0 * (self._eps * lam * a * a * vsq + _EPS64 * np.abs(delta).sum(axis=0) / n)
            ok = gain / n - 0.5 * lam * a * a * dn >= -tau
            if not ok.all():
                dn = dn + self.add_rows_m(rows, np.where(ok, 0.0, -coef))
                sm[S_NREJ] += ~ok
        sm[S_VSQ] += dn
        kept = np.where(ok, delta, 0.0)
        np.add.at(self.alpha, rows, kept)
        sm[S_ASUMD] += kept.sum(axis=0)

    def sdca_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """Mini-batch SDCA iterations ``t0 + 1 .. t1`` (Takáč et al. 2013), step by step.

        Eq. (15) with ``beta = beta_b`` (safe, Theorem 2) or 1 (naive), or Algorithm 2
        (aggressive); the reference of every backend's segment.  ``plan.shrinking`` is
        LIBLINEAR's shrinking (Hsieh et al. 2008, Sec. 3.2): a row whose dual coordinate sits
        at a bound while its gradient ``G_i = m_i - 1`` pushes it further out, by more than
        the largest projected gradient of the previous epoch, is skipped; every ``n``
        iterations the bounds roll over, and once the projected gradients of the active set
        span at most :data:`SHRINK_EPS` every row comes back (:meth:`sdca_unshrink_m`).

        Parameters
        ----------
        sampler : gpusvm.solvers._sampling.CounterSampler
            ``A_t`` is ``sampler.batch(t - 1)``; its first-occurrence mask keeps a
            repeated row from stepping twice.
        t0, t1 : int
            Iterations done before and after the segment.
        plan : gpusvm.backends.base.SDCAPlan
        """
        p = plan
        squared = p.loss == "squared_hinge"
        for t in range(t0, t1):
            rows, first = sampler.batch(t)                                    # A_t
            if not p.shrinking or self._active[rows[0]]:
                m = self.margins_m(rows)                                      # y_ic <w_c, x_i>
                if not p.shrinking or not self._shrink_test(rows[0], m[0, 0]):
                    delta = self.sdca_deltas_m(rows, m, p.lam, first, squared)    # eq. (15)
                    if p.aggressive:
                        self.sdca_adapt_beta_m(rows, delta, p.beta_b, p.theta)    # Alg. 2
                        delta = self.sdca_deltas_m(rows, m, p.lam, first, squared)
                    self.sdca_apply_m(rows, delta, p.lam, p.aggressive, squared)  # keep if D grows
            if p.shrinking and (t + 1) % self.n == 0:                         # an epoch ends
                self._shrink_epoch()

    def _shrink_test(self, r: int, m_r: float) -> bool:
        """LIBLINEAR's shrinking test of row ``r`` (True: it leaves the active set)."""
        sh = self._shr
        g = m_r - 1.0
        a = self.alpha[r, 0]
        if a <= 0.0:
            if g > sh[0]:
                self._active[r] = False
                return True
            pg = min(g, 0.0)
        elif a >= 1.0 - UPPER_SLACK:
            if g < sh[1]:
                self._active[r] = False
                return True
            pg = max(g, 0.0)
        else:
            pg = g
        sh[2] = max(sh[2], pg)
        sh[3] = min(sh[3], pg)
        return False

    def _shrink_epoch(self) -> None:
        """Roll the bounds of the shrinking test over at the end of an epoch."""
        sh = self._shr
        if sh[2] - sh[3] <= SHRINK_EPS:
            self.sdca_unshrink_m()
            return
        sh[0] = sh[2] if sh[2] > 0.0 else np.inf
        sh[1] = sh[3] if sh[3] < 0.0 else -np.inf
        sh[2] = -np.inf
        sh[3] = np.inf

    def sdca_unshrink_m(self) -> None:
        """Bring every row back into the active set of shrinking and forget the bounds."""
        self._active[:] = True
        self._shr[:] = (np.inf, -np.inf, -np.inf, np.inf)

    @contextlib.contextmanager
    def outputs_m(self, outputs):
        """Within the block the backend holds the listed outputs only (``Y``, ``V``, ``alpha``,
        ``sm``, the weights); on exit their columns are written back, the others as they were.

        The SDCA solver runs its segments inside it with the one-vs-rest outputs not yet
        certified, which then cost the margins and updates of those outputs only.
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
