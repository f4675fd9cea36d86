"""NumPy/SciPy reference backend: the readable implementation of every primitive."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._state import (N_SLOTS, S_A, S_ASUM, S_B, S_BSUM, S_DNORM, S_LOSS, S_NACT,
                     S_NAVG, S_VSQ, S_YACT)
from .base import Evaluation


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
    order = xp.argsort(bp, kind="stable") if xp is np else xp.argsort(bp)
    bps = bp[order]
    ys = y_b[order]
    neg_le = xp.cumsum(ys < 0)
    pos_gt = xp.sum(ys > 0) - xp.cumsum(ys > 0)
    deriv = neg_le.astype(xp.int64) - pos_gt.astype(xp.int64)
    j = xp.argmax(deriv >= 0)
    return bps[j]


class NumpyBackend:
    """Reference backend on NumPy and SciPy CSR.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        Training data, CSR with sorted indices, dtype float32 or float64.
    y : ndarray of shape (n,)
        Labels in {-1, +1}, same dtype as ``X``.

    Notes
    -----
    ``v`` is kept in the data's dtype; scalars, margins and the exact change of
    ``||v||^2`` are computed in float64.
    """

    name = "numpy"
    xp = np

    def __init__(self, X: sp.csr_matrix, y: np.ndarray) -> None:
        self.X = X
        self.y = np.asarray(y, dtype=X.dtype)
        self.n, self.d = X.shape
        self.dtype = X.dtype
        self.row_sq_norms = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
        self._gather_rows = None
        self._gather = None

    # ------------------------------------------------------------ transfers
    def to_host(self, a):
        """Return ``a`` as a host NumPy array (a no-op here)."""
        return np.asarray(a)

    def upload_batches(self, chunk: np.ndarray) -> np.ndarray:
        """Make a chunk of batch indices available to the backend."""
        return chunk

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
        m += y_b * (b - self.s[S_B])
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
        return float(np.dot(new, new) - np.dot(old, old))

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
        """Fold ``a`` into ``v`` when ``|a| < threshold`` (``A`` rescaled to match)."""
        a = self.s[S_A]
        if abs(a) < threshold:
            self.v *= self.dtype.type(a)
            self.s[S_VSQ] *= a * a
            self.s[S_ASUM] /= a
            self.s[S_A] = 1.0

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
