"""The backend primitives every solver is written against.

A backend owns the data (CSR ``X``, labels ``y`` in {-1, +1}, squared row norms)
and the solver state (``v``, the averaging vector ``u``, the dual ``alpha`` and
the scalar slots of :mod:`gpusvm.backends._state`), all in its own array module
``xp``.  Solvers call only the methods below; only :meth:`Backend.to_host` (and
the methods documented as returning host values) may synchronise a device.

Primitives (Pegasos, Shalev-Shwartz et al. 2007, Fig. 1, in the sparse form
``w = a v``):

``margins(rows)``
    ``m_i = y_i (a <v, x_i> + b)`` for the sampled rows (step 2 of Fig. 1).
``optimal_bias(rows, m)``
    set ``b`` to the minimiser of the batch hinge loss (Sec. 4) and shift ``m``.
``reset_scale()``
    ``w <- 0`` (used when ``1 - eta_t lam == 0``, e.g. ``t = 1`` of Pegasos).
``pegasos_step(rows, m, eta, shrink, k, unreg_bias, radius, average)``
    steps 4-5 of Fig. 1: ``a <- shrink a``; ``v += eta/(k a) sum_{m_i<1} y_i x_i``
    with the exact change of ``||v||^2``; the unregularised bias step; the
    projection onto the ball of radius ``radius`` (``0`` = none); and, when
    ``average``, the new iterate is added to the running average.
``renormalize(threshold)``
    fold ``a`` back into ``v`` when ``|a| < threshold``.
``output(averaged)``
    the dense ``w`` and ``b`` of the last iterate or of the average.
``evaluate(w, b, lam, reg_bias)``
    primal objective on all rows (a host float: a synchronisation point).

SDCA primitives (Takáč et al. 2013) are documented in :mod:`gpusvm.solvers.sdca`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Evaluation:
    """Objective of one iterate on all training rows.

    Attributes
    ----------
    objective : float
        ``P(w) = lam/2 ||w||^2 (+ lam/2 b^2 if the bias is regularised) + mean hinge``.
    loss : float
        Mean hinge loss ``(1/n) sum_i max(0, 1 - y_i (<w, x_i> + b))``.
    sq_norm : float
        ``||w||^2``.
    """

    objective: float
    loss: float
    sq_norm: float
