"""CoCoA+'s aggregation of row blocks' dual steps (Ma et al. 2015; Smith et al. 2018): the
exact line search along the sum of the blocks' changes, used by the distributed SDCA of
:mod:`gpusvm.dask` (the threads of one fit, :mod:`gpusvm.solvers._threaded`, combine at every
round with ``gamma = 1`` instead)."""

from __future__ import annotations

import numpy as np

from .._arrays import col_dots
from .sdca import BestPoints


def _as_columns(s, n):
    """Row weights as a column (n, 1) shared by the outputs or (n, M) per output."""
    if s is None:
        return np.ones((n, 1))
    return s if s.ndim == 2 else s[:, None]


def commit(before, after, gamma):
    """``before + gamma (after - before)``: the committed duals, the same arithmetic on the
    block and on the driver (so the driver's copy is the block's, bit for bit)."""
    return before + gamma * (after - before)


def step_sums(before, after, s, loss: str):
    """``(b, q)`` of the change ``d = after - before``: the separable part of ``n D`` moves by
    ``gamma b - gamma^2 q`` along ``gamma d`` (hinge: ``b = sum d``, ``q = 0``; squared hinge:
    ``b = sum (d - alpha d / (2 s))``, ``q = sum d^2 / (4 s)`` over ``s > 0``; ``s`` as in
    :func:`loss_sums`)."""
    d = after - before
    if loss != "squared_hinge":
        return d.sum(axis=0), np.zeros(d.shape[1])
    w = _as_columns(s, d.shape[0])
    pos = w > 0
    inv = 1.0 / np.where(pos, w, 1.0)
    b = np.where(pos, d - before * d * inv / 2.0, 0.0).sum(axis=0)
    q = np.where(pos, d * d * inv / 4.0, 0.0).sum(axis=0)
    return b, q


def line_search(wu, uu, b, q, lam, n):
    """The step ``gamma`` in ``[0, 1]`` maximising ``D`` along the round's change, per output.

    With ``w(alpha) = W``, ``U = w(alpha + d) - w(alpha)``, ``wu = <W, U>`` and ``uu = ||U||^2``
    per output, ``n (D(alpha + gamma d) - D(alpha)) = gamma b - gamma^2 q - lam n (gamma wu +
    gamma^2 uu / 2)``, a concave quadratic; ``[0, 1]`` keeps ``alpha + gamma d`` feasible.
    """
    slope = b / n - lam * wu
    curve = 2.0 * q / n + lam * uu
    with np.errstate(divide="ignore", invalid="ignore"):
        gamma = np.where(curve > 0, slope / np.where(curve > 0, curve, 1.0),
                         np.where(slope > 0, 1.0, 0.0))
    return np.clip(gamma, 0.0, 1.0)


class HostPoints:
    """The column products :class:`~gpusvm.solvers.sdca.BestPoints` asks of a backend, on the
    dask driver's host arrays; the driver offers every output at once."""

    xp = np

    @staticmethod
    def to_host(a):
        """``a`` itself (already on the host)."""
        return np.asarray(a)

    @staticmethod
    def col_dots_m(A, cols, B):
        """``<A[:, c], B[:, c]>`` per output (``cols``: every column of ``A``, in order)."""
        return col_dots(np, A, B)

    @staticmethod
    def mix_columns_m(dst, cols, src, t) -> None:
        """``dst[:, c] += t_c (src[:, c] - dst[:, c])`` in place; ``t_c = 1`` copies exactly."""
        t = np.asarray(t, dtype=np.float64)
        for c in np.flatnonzero(t > 0.0):
            if t[c] == 1.0:
                dst[:, c] = src[:, c]
            else:
                dst[:, c] += t[c] * (src[:, c] - dst[:, c])


def best_points(lam, loss, s):
    """The driver's lowest-``P`` point over the rounds (:class:`BestPoints` on host arrays,
    ``s`` the rows' weights in block order or None).

    CoCoA+'s broadcast points alternate around the optimum (news20: every other round's
    ``P`` is higher) and ``P`` lags the dual, so ``P`` at the round's point alone certifies
    rounds late; the minimiser of ``P`` on the segment between the best point and each new
    one, from the margins the blocks compute anyway (no pass over the data), certifies with
    the same dual at every round."""
    return BestPoints(HostPoints(), lam, loss, s)


__all__ = ["commit", "step_sums", "line_search", "best_points", "HostPoints"]
