"""CoCoA+'s aggregation of row blocks' dual steps (Ma et al. 2015; Smith et al. 2018): the
exact line search along the sum of the blocks' changes, used by the distributed SDCA of
:mod:`gpusvm.dask` (the threads of one fit, :mod:`gpusvm.solvers._threaded`, combine at every
round with ``gamma = 1`` instead)."""

from __future__ import annotations

import numpy as np


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


__all__ = ["commit", "step_sums", "line_search"]
