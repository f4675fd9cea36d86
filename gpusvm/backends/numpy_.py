"""NumPy/SciPy reference backend: the readable implementation of every primitive."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._state import (N_SLOTS, S_A, S_ASUM, S_B, S_BSUM, S_DNORM, S_LOSS, S_NACT,
                     S_NAVG, S_VSQ, S_YACT)
from ._state import S_ASUMD, S_BETA, S_NREJ, S_TMP0
from ._general import GeneralPath, as_2d_labels, check_sample_weight
from .base import Evaluation, step_size

_EPS64 = float(np.finfo(np.float64).eps)
#: shrinking: unshrink every row once the projected gradients of the active set span at most
#: this (LIBLINEAR's default stopping tolerance of its dual solvers)
SHRINK_EPS = 0.1
#: shrinking: alpha_i counts as at its upper bound 1 within this (alpha_i += 1 - alpha_i rounds)
UPPER_SLACK = 4 * _EPS64


def _csr_rows_nnz(X: sp.csr_matrix, rows: np.ndarray):
    """Gather the nonzeros of ``rows`` of CSR ``X``.

    Returns
    -------
    owner : ndarray of intp
        For each gathered nonzero, the position of its row in ``rows``.
    cols, vals : ndarray
        Column indices and values of the gathered nonzeros.
    """
    starts = X.indptr[rows]
    lens = X.indptr[rows + 1] - starts
    total = int(lens.sum())
    owner = np.repeat(np.arange(rows.size), lens)
    # position of each nonzero inside X.indices: start of its row + rank inside row
    offs = np.cumsum(lens) - lens
    pos = np.arange(total) - np.repeat(offs - starts, lens)
    return owner, X.indices[pos], X.data[pos]


def optimal_bias_xp(xp, y_b, s):
    """Minimiser of the batch hinge loss over the bias (Pegasos Sec. 4).

    ``g(b) = (1/k) sum_i [1 - y_i (s_i + b)]_+`` is convex piecewise linear with
    breakpoints ``b_i = y_i - s_i``; its right derivative at ``b`` is
    ``#{y_i = -1 : b_i <= b} - #{y_i = +1 : b_i > b}``.  The canonical minimiser
    returned is the smallest breakpoint whose right derivative is ``>= 0`` (a
    weighted median of the breakpoints).

    Parameters
    ----------
    xp : module
        Array module (numpy or cupy); only device-side operations are used, so
        the result stays on the device.
    y_b, s : arrays of shape (k,)
        Labels and raw scores ``a <v, x_i>`` of the batch.

    Returns
    -------
    array of shape ()
        The optimal bias, in ``xp``.
    """
    bp = y_b - s
    order = xp.argsort(bp, kind="stable") if getattr(xp, "stable_argsort", xp is np) else xp.argsort(bp)
    bps = bp[order]
    ys = y_b[order]
    neg_le = xp.cumsum(ys < 0)
    pos_gt = xp.sum(ys > 0) - xp.cumsum(ys > 0)
    deriv = neg_le.astype(xp.int64) - pos_gt.astype(xp.int64)
    j = xp.argmax(deriv >= 0)
    return bps[j]


class NumpyBackend(GeneralPath):
    """Reference backend on NumPy and SciPy CSR.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        Training data, CSR with sorted indices, dtype float32 or float64.
    y : ndarray of shape (n,) or (n, M)
        Labels in {-1, +1}, same dtype as ``X``; one column per output.
    sample_weight : ndarray of shape (n,), optional
        Example weights ``s_i >= 0`` shared by every output (ALGORITHMS.md, "Weights").

    Attributes
    ----------
    Y : ndarray of shape (n, M)
        The labels with one column per output (a view of a 1-D ``y``).
    n_outputs : int
        ``M``.

    Notes
    -----
    ``v`` is kept in the data's dtype; scalars, margins and the exact change of
    ``||v||^2`` are computed in float64.
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

    # ------------------------------------------------------------ transfers
    def to_host(self, a):
        """Return ``a`` as a host NumPy array (a no-op here)."""
        return np.asarray(a)

    # ------------------------------------------------------------ state
    def init_state(self, w0=None, b0: float = 0.0, averaging: bool = False) -> None:
        """Allocate ``v`` (= ``w0``), the scalars (``a = 1``) and, if needed, ``u``."""
        self.v = np.zeros(self.d, dtype=self.dtype) if w0 is None else np.array(w0, dtype=self.dtype)
        self.s = np.zeros(N_SLOTS, dtype=np.float64)
        self.s[S_A] = 1.0
        self.s[S_VSQ] = float(np.dot(self.v.astype(np.float64), self.v.astype(np.float64)))
        self.s[S_B] = b0
        self.u = np.zeros(self.d, dtype=np.float64) if averaging else None

    def _batch(self, rows):
        if self._gather_rows is not rows:
            self._gather = _csr_rows_nnz(self.X, rows)
            self._gather_rows = rows
        return self._gather

    # ------------------------------------------------------------ Pegasos
    def margins(self, rows: np.ndarray) -> np.ndarray:
        """``m_i = y_i (a <v, x_i> + b)`` for ``i`` in ``rows`` (float64)."""
        owner, cols, vals = self._batch(rows)
        z = np.bincount(owner, weights=vals * self.v[cols], minlength=rows.size)
        return self.y[rows] * (self.s[S_A] * z + self.s[S_B])

    def optimal_bias(self, rows: np.ndarray, m: np.ndarray) -> None:
        """Set ``b`` to the batch-optimal bias and shift ``m`` to it, in place."""
        y_b = self.y[rows].astype(np.float64)
        s = y_b * m - self.s[S_B]
        b = float(optimal_bias_xp(np, y_b, s))
        # y_i (s_i + b) written as 1 + y_i (b - b_i) with the breakpoints b_i = y_i - s_i:
        # exactly 1 (so not in A_t^+) for the rows whose breakpoint is b, whatever the rounding
        m[:] = 1.0 + y_b * (b - (y_b - s))
        self.s[S_B] = b

    def reset_scale(self) -> None:
        """Set ``w = 0`` keeping the running average consistent (``u -= A v``)."""
        if self.u is not None:
            self.u -= self.s[S_ASUM] * self.v
        self.v[:] = 0
        self.s[S_VSQ] = 0.0
        self.s[S_A] = 1.0

    def add_rows(self, rows: np.ndarray, coef: np.ndarray, u_scale: float | None = None) -> float:
        """``v += sum_i coef_i x_{rows_i}``; return the exact change of ``||v||^2``.

        When ``u_scale`` is given, ``u += u_scale * (the same sum)`` too.
        """
        owner, cols, vals = self._batch(rows)
        contrib = vals * coef[owner]
        keep = contrib != 0
        if not keep.all():
            cols, contrib = cols[keep], contrib[keep]
        if cols.size == 0:
            return 0.0
        uniq, inv = np.unique(cols, return_inverse=True)
        agg = np.bincount(inv, weights=contrib, minlength=uniq.size)
        old = self.v[uniq].astype(np.float64)
        self.v[uniq] = old + agg
        new = self.v[uniq].astype(np.float64)
        if u_scale is not None and self.u is not None:
            self.u[uniq] += u_scale * agg
        # per column (new - old)(new + old): rounding relative to the change, not to ||v||^2,
        # and no BLAS call (np.dot on ~10^4 entries wakes its thread pool: ms per step)
        return float(np.sum((new - old) * (new + old)))

    def pegasos_step(self, rows, m, eta: float, shrink: float, k: int,
                     unreg_bias: bool, radius: float, average: bool) -> None:
        """Steps 4-5 of Pegasos Fig. 1 in the sparse form (see :mod:`.base`)."""
        s = self.s
        y_b = self.y[rows].astype(np.float64)
        active = m < 1.0
        s[S_NACT] = np.count_nonzero(active)
        s[S_LOSS] = np.sum(np.maximum(0.0, 1.0 - m))
        a = s[S_A] * shrink                                   # (1 - eta_t lam) w_t
        coef = np.where(active, y_b * (eta / (k * a)), 0.0)    # (eta_t / k) y_i, in units of a
        dn = self.add_rows(rows, coef, u_scale=s[S_ASUM])
        s[S_DNORM] = dn
        s[S_VSQ] += dn
        s[S_A] = a
        if unreg_bias:
            s[S_YACT] = np.sum(y_b[active])
            s[S_B] += eta * s[S_YACT] / k                     # b - eta_t * d/db of the batch loss
        if radius > 0.0:                                      # step 5: projection
            wsq = a * a * s[S_VSQ]
            if wsq > radius * radius:
                s[S_A] = a * (radius / np.sqrt(wsq))
        if average:
            s[S_ASUM] += s[S_A]
            s[S_NAVG] += 1.0
            s[S_BSUM] += s[S_B]

    def renormalize(self, threshold: float) -> None:
        """Fold ``a`` into ``v`` when ``|a| < threshold``; the running sum ``S = A v - u``
        moves into ``u`` alone (``u <- u - A v``, ``A <- 0``), so that ``A v`` and ``u``
        never grow apart from ``S`` across renormalisations (rescaling ``A`` by ``1/a``
        instead loses every digit of ``S`` to cancellation, then overflows)."""
        a = self.s[S_A]
        if abs(a) < threshold:
            if self.u is not None:
                self.u -= self.s[S_ASUM] * self.v.astype(np.float64)
            self.v *= self.dtype.type(a)
            self.s[S_VSQ] *= a * a
            self.s[S_ASUM] = 0.0
            self.s[S_A] = 1.0

    def pegasos_segment(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` (Shalev-Shwartz et al. 2007, Fig. 1), step by step.

        The reference of every backend's segment: the mini-batch Pegasos
        iteration spelled out over the primitives of :mod:`gpusvm.backends.base`.

        Parameters
        ----------
        sampler : gpusvm.solvers._sampling.CounterSampler
            ``A_t`` is ``sampler.batch(t - 1)``.
        t0, t1 : int
            Iterations done before and after the segment.
        plan : gpusvm.backends.base.PegasosPlan
        """
        p = plan
        for t in range(t0 + 1, t1 + 1):
            rows, _ = sampler.batch(t - 1)                                    # step 1: A_t
            m = self.margins(rows)                                            # step 2: margins
            if p.optimal:
                self.optimal_bias(rows, m)                                    # Sec. 4: b* of A_t
            eta, shrink = step_size(p.schedule, t, p.lam, p.eta0, p.norma_p)  # step 3
            if shrink == 0.0:
                self.reset_scale()
                shrink = 1.0
            self.pegasos_step(rows, m, eta, shrink, p.k, p.unreg_bias,        # steps 4-5
                              p.radius, p.averaged and t >= p.t_avg)
            self.renormalize(p.renorm_threshold)                              # keep v in range

    def reset_average(self) -> None:
        """Empty the running average (``u = 0``, ``A = 0``, no iterate, no bias summed)."""
        if self.u is not None:
            self.u[...] = 0.0
        self.s[S_ASUM] = 0.0
        self.s[S_NAVG] = 0.0
        self.s[S_BSUM] = 0.0

    def output(self, averaged: bool):
        """Dense float64 ``w`` and float ``b`` of the last iterate or of the average."""
        s = self.s
        if averaged and s[S_NAVG] > 0:
            w = (s[S_ASUM] * self.v.astype(np.float64) - self.u) / s[S_NAVG]
            return w, s[S_BSUM] / s[S_NAVG]
        return s[S_A] * self.v.astype(np.float64), float(s[S_B])

    def decision_function(self, w, b) -> np.ndarray:
        """``<w, x_i> + b`` on all rows."""
        return self.X @ np.asarray(w, dtype=np.float64) + b

    def evaluate(self, w, b, lam: float, reg_bias: bool = False) -> Evaluation:
        """Primal objective ``P(w)`` on all rows (ALGORITHMS.md, Notation)."""
        z = self.decision_function(w, b)
        loss = float(np.mean(np.maximum(0.0, 1.0 - self.y * z)))
        sq = float(np.dot(w, w)) + (b * b if reg_bias else 0.0)
        return Evaluation(0.5 * lam * sq + loss, loss, sq)

    # ------------------------------------------------------------ SDCA (Takáč et al. 2013)
    # The contract of these primitives is written out in gpusvm/solvers/sdca.py.
    def init_dual(self, beta0: float) -> None:
        """Start SDCA at ``alpha = 0`` (``w = 0``; call after :meth:`init_state`).

        Rows with ``||x_i|| = 0`` start at ``alpha_i = 1``, their optimum: their
        dual term ``alpha_i / n`` does not interact with ``w``.  Sets
        ``S_ASUMD = sum alpha``, ``S_BETA = beta0`` and ``S_NREJ = 0``.
        """
        self.alpha = (self.row_sq_norms == 0).astype(np.float64)
        self._active = np.ones(self.n, dtype=np.bool_)
        self._shr = np.array([np.inf, -np.inf, -np.inf, np.inf])
        with np.errstate(divide="ignore"):
            self._inv_q = 1.0 / self.row_sq_norms     # inf on zero rows: their step is 1 - alpha_i
        self._y64 = self.y.astype(np.float64)
        self._eps = float(np.finfo(self.dtype).eps)
        self._canonical = bool(self.X.has_canonical_format)
        self._scratch = np.zeros(self.d, dtype=np.float64)
        self._count = np.zeros(self.d, dtype=np.float64)
        self._count_rows = self._count_k = None
        self._rows_of_xb = self._xb = self._xb_cols = None
        self.s[S_ASUMD] = float(self.alpha.sum())
        self.s[S_BETA] = float(beta0)
        self.s[S_NREJ] = 0.0

    def load_dual(self, alpha0, lam: float) -> None:
        """Warm start: ``alpha = alpha0`` (n,) and the iterate ``w(alpha0)`` (after :meth:`init_dual`)."""
        self.alpha[:] = np.asarray(alpha0, dtype=np.float64)
        self.dual_weights(lam)

    def sdca_deltas(self, rows: np.ndarray, m: np.ndarray, lam: float,
                    first: np.ndarray | None = None) -> np.ndarray:
        """Coordinate steps of eq. (15) with ``beta = S_BETA`` (float64, shape (b,)).

        ``delta_i = clip_[-alpha_i, 1 - alpha_i](lam n (1 - m_i) / (beta ||x_i||^2))``;
        a zero row gets ``1 - alpha_i`` (the limit ``||x_i|| -> 0``); where
        ``first`` is given and 0/False (a repeated row of the batch) ``delta_i = 0``.
        """
        a_b = self.alpha[rows]
        raw = (lam * self.n / self.s[S_BETA]) * (1.0 - m) * self._inv_q[rows]
        with np.errstate(invalid="ignore"):
            delta = np.minimum(np.maximum(raw, -a_b), 1.0 - a_b)    # clip to the box
        delta = np.where(self.row_sq_norms[rows] == 0.0, 1.0 - a_b, delta)   # zero rows, any m
        if first is not None:
            delta = np.where(first, delta, 0.0)
        return delta

    def _batch_sum(self, rows: np.ndarray, coef: np.ndarray):
        """``u = sum_i coef_i x_{rows_i}`` as ``(cols, vals, k)``: each column of ``u``
        appears ``k`` times in ``cols`` with the same value (``sum`` of ``vals**2 / k``
        is ``||u||^2``).

        Small batches add into a zeroed scratch vector (``np.add.at``), O(nnz of the
        rows), and zero it again; batches whose nonzeros exceed ``d/8`` use SciPy's
        ``X[rows].T @ coef`` read at the batch's columns (O(nnz + d) = O(nnz) for
        them, in C, faster on a CPU).
        """
        owner, cols, vals = self._batch(rows)
        if rows.size == 1 and self._canonical:          # one row: its columns are distinct
            return cols, vals * coef[0], 1.0
        if 8 * cols.size > self.d:
            if self._rows_of_xb is not rows:                # once per batch: X[rows], its columns
                self._xb = self.X[rows]
                mark = np.zeros(self.d, dtype=bool)
                mark[cols] = True
                self._xb_cols = np.flatnonzero(mark)
                self._rows_of_xb = rows
            u = np.asarray(self._xb.T @ coef, dtype=np.float64).ravel()
            return self._xb_cols, u[self._xb_cols], 1.0
        if self._count_rows is not rows:                # multiplicity of each column in the batch
            count = self._count
            np.add.at(count, cols, 1.0)
            self._count_k = count[cols]
            count[cols] = 0.0
            self._count_rows = rows
        scratch = self._scratch
        np.add.at(scratch, cols, vals * coef[owner])
        agg = scratch[cols]
        scratch[cols] = 0.0
        return cols, agg, self._count_k

    def _scatter_sdca(self, rows: np.ndarray, coef: np.ndarray, into_v: bool) -> float:
        """``||u||^2`` for ``u = sum_i coef_i x_{rows_i}`` (``into_v=False``), or ``v += u``
        and the exact change of ``||v||^2`` (``into_v=True``); O(nnz of the rows) work
        on ``v`` either way (see :meth:`_batch_sum`)."""
        cols, agg, k = self._batch_sum(rows, coef)
        if not into_v:
            return float(np.sum(agg * agg / k))
        old = self.v[cols].astype(np.float64)
        self.v[cols] = old + agg
        new = self.v[cols].astype(np.float64)
        return float(np.sum((new - old) * (new + old) / k))

    def sdca_adapt_beta(self, rows: np.ndarray, delta: np.ndarray, beta_b: float,
                        theta: float) -> None:
        """Alg. 2: ``beta <- beta^theta rho^(1-theta)`` from the tentative step ``delta``.

        ``rho = ||sum_i delta_i y_i x_i||^2 / sum_i delta_i^2 ||x_i||^2`` clipped
        to ``[1, beta_b]`` (stored in ``S_TMP0``); the new ``beta`` is clipped to
        ``[1, beta_b]`` against rounding; ``beta`` is unchanged when the
        denominator is 0 (a null tentative step).
        """
        s = self.s
        den = float(np.dot(delta * delta, self.row_sq_norms[rows]))
        if den <= 0.0:
            return
        num = self._scatter_sdca(rows, delta * self._y64[rows], into_v=False)
        rho = min(max(num / den, 1.0), beta_b)
        s[S_TMP0] = rho
        beta = s[S_BETA] ** theta * rho ** (1.0 - theta)
        s[S_BETA] = min(max(beta, 1.0), beta_b)                   # stays in [1, beta_b] despite rounding

    def sdca_apply(self, rows: np.ndarray, delta: np.ndarray, lam: float, check: bool) -> None:
        """``alpha_A += delta``, ``w += (1/(lam n)) sum_i delta_i y_i x_i`` (``v`` in units of ``a``).

        ``S_VSQ`` and ``S_ASUMD`` follow exactly.  When ``check``, the step is
        rejected if ``Delta D = (1/n) sum delta_i - (lam/2)(||w + u||^2 - ||w||^2)
        < -tau`` (with the exact norm change, computed as :meth:`add_rows` does),
        ``tau = 4 eps lam a^2 ||v||^2 + 4 eps_64 sum |delta_i| / n`` the rounding
        of that difference (``eps`` of ``v``'s dtype): then ``v`` gets the
        opposite addition, ``alpha`` is left alone and ``S_NREJ`` counts it.
        """
        s = self.s
        n, a = self.n, s[S_A]
        coef = delta * self._y64[rows] * (1.0 / (lam * n * a))
        vsq = s[S_VSQ]
        dn = self._scatter_sdca(rows, coef, into_v=True)
        s[S_DNORM] = dn
        if check and (float(delta.sum()) / n - 0.5 * lam * a * a * dn
                      < -4.0 * (self._eps * lam * a * a * vsq + _EPS64 * float(np.abs(delta).sum()) / n)):
            s[S_VSQ] += dn + self._scatter_sdca(rows, -coef, into_v=True)
            s[S_NREJ] += 1.0
            return
        s[S_VSQ] += dn
        np.add.at(self.alpha, rows, delta)
        s[S_ASUMD] += float(delta.sum())

    def sdca_segment(self, sampler, t0: int, t1: int, plan) -> None:
        """Mini-batch SDCA iterations ``t0 + 1 .. t1`` (Takáč et al. 2013), step by step.

        The reference of every backend's segment: eq. (15) with ``beta = beta_b``
        (safe, Theorem 2) or 1 (naive), or Algorithm 2 (aggressive), over the
        SDCA primitives of :mod:`gpusvm.solvers.sdca`.

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
        if p.shrinking:
            self._sdca_segment_shrinking(sampler, t0, t1, p)
            return
        for t in range(t0, t1):
            rows, first = sampler.batch(t)                                    # A_t, Rand(b)
            m = self.margins(rows)                                            # y_i <w, x_i>
            delta = self.sdca_deltas(rows, m, p.lam, first)                   # eq. (15), beta^(t)
            if p.aggressive:
                self.sdca_adapt_beta(rows, delta, p.beta_b, p.theta)          # Alg. 2: beta^(t+1)
                delta = self.sdca_deltas(rows, m, p.lam, first)               # Alg. 2: delta
            self.sdca_apply(rows, delta, p.lam, check=p.aggressive)           # keep if D grows

    def _sdca_segment_shrinking(self, sampler, t0: int, t1: int, p) -> None:
        """:meth:`sdca_segment` for one-row batches with LIBLINEAR's shrinking.

        A row whose dual coordinate sits at a bound while its gradient
        ``G_i = y_i <w, x_i> - 1`` pushes it further out, by more than the
        largest projected gradient of the previous epoch, leaves the active set
        (Hsieh et al. 2008, Sec. 3.2): its margin is no longer computed.  Every
        ``n`` iterations (an epoch) the bounds roll over; once the projected
        gradients of the active set span at most :data:`SHRINK_EPS`, every row
        comes back (:meth:`sdca_unshrink`).
        """
        n = self.n
        for t in range(t0, t1):
            rows, _ = sampler.batch(t)                                        # A_t = {r}
            r = rows[0]
            if self._active[r]:
                m = self.margins(rows)                                        # y_r <w, x_r>
                if not self._shrink_test(r, float(m[0])):
                    delta = self.sdca_deltas(rows, m, p.lam)                  # eq. (15)
                    self.sdca_apply(rows, delta, p.lam, check=p.aggressive)
            if (t + 1) % n == 0:                                              # an epoch ends
                self._shrink_epoch()

    def _shrink_test(self, r: int, m_r: float) -> bool:
        """LIBLINEAR's shrinking test of row ``r`` (True: it leaves the active set)."""
        sh = self._shr
        g = m_r - 1.0
        a = self.alpha[r]
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
            self.sdca_unshrink()
            return
        sh[0] = sh[2] if sh[2] > 0.0 else np.inf
        sh[1] = sh[3] if sh[3] < 0.0 else -np.inf
        sh[2] = -np.inf
        sh[3] = np.inf

    def sdca_unshrink(self) -> None:
        """Bring every row back into the active set of shrinking and forget the bounds."""
        self._active[:] = True
        self._shr[:] = (np.inf, -np.inf, -np.inf, np.inf)

    def dual_weights(self, lam: float) -> np.ndarray:
        """``w(alpha) = (1/(lam n)) sum_i alpha_i y_i x_i`` recomputed in float64 (O(nnz)).

        Also resynchronises the iterate with it (``v = w``, ``a = 1``,
        ``S_VSQ = ||v||^2``, ``S_ASUMD = sum alpha``), which removes the rounding
        that the incremental updates accumulate.
        """
        w = np.asarray(self.X.T @ (self.alpha * self.y.astype(np.float64)),
                       dtype=np.float64).ravel() / (lam * self.n)
        self.v[:] = w
        v64 = self.v.astype(np.float64)
        self.s[S_A] = 1.0
        self.s[S_VSQ] = float(np.dot(v64, v64))
        self.s[S_ASUMD] = float(self.alpha.sum())
        return w

    def dual_objective(self, lam: float, w: np.ndarray) -> float:
        """``D(alpha) = (1/n) sum_i alpha_i - (lam/2) ||w||^2`` with ``w = w(alpha)`` (host float)."""
        return float(self.alpha.sum()) / self.n - 0.5 * lam * float(np.dot(w, w))
