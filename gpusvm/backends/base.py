"""The interface every solver is written against: one state, one segment per solver.

A backend owns the data (CSR ``X``, labels ``Y`` (n, M) in {-1, +1}, optional weights ``s``
(n, M), squared row norms) and the state of :mod:`gpusvm.backends._general` (``V`` (d, M)
with the scales ``a_c`` of the sparse form ``w_c = a_c v_c`` of Pegasos Sec. 2.4, ``U``,
``alpha`` (n, M), the slots ``sm`` of :mod:`gpusvm.backends._state`), all in its array module
``xp``.  Only :meth:`to_host` (and methods documented as returning host values) may
synchronise a device.  The solvers call ``init_state_m(w0, b0, averaging)`` and
``init_dual_m(beta0, loss, alpha0, lam)`` (the starting points), ``pegasos_segment_m`` and
``sdca_segment_m(sampler, t0, t1, plan)`` (iterations ``t0 + 1 .. t1`` on the batches ``t0 ..
t1 - 1`` of the :class:`~gpusvm.solvers._sampling.CounterSampler`, ``plan`` a
:class:`PegasosPlan` or :class:`SDCAPlan`, with no Python per iteration on the compiled
backends), and the evaluations, certificates and output selection of
:class:`~gpusvm.backends._general.GeneralEvaluation`; ``outputs_m``, ``sdca_unshrink_m``
(shrinking, CPU backends) and ``segment_point_one`` (the best point's segment minimum of one
output, compiled; :class:`~gpusvm.solvers.sdca.BestPoints`) are optional, and device backends
add ``synchronize`` and
``times_certificates`` (to time a segment; whether the certificate cadence reads the clock).

Streams: a device backend runs every device operation on a non-blocking stream of its own,
joined to the caller's stream with events where they meet, and the host reads device memory
only through ``to_host`` (the rule, and how the emulator checks it: docs/gpu.md, "The stream
rule").
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass


def backend_stream(backend):
    """``backend.activate()`` for a device backend (its stream current), else a null context."""
    activate = getattr(backend, "activate", None)
    return activate() if activate is not None else contextlib.nullcontext()


def on_backend_stream(func):
    """Decorator: run ``func(backend, ...)`` inside :func:`backend_stream` of its first argument.

    The solvers' entry points use it, so that their own array operations are ordered
    with the backend's kernels.
    """
    @functools.wraps(func)
    def run(backend, *args, **kwargs):
        with backend_stream(backend):
            return func(backend, *args, **kwargs)
    return run


#: step-size schedules (Pegasos Fig. 1 step 3, and the Fig. 2 comparisons), by int code
SCHEDULES = ("pegasos", "norma", "constant")


def step_size(schedule: str, t: int, lam: float, eta0: float | None, norma_p: float):
    """Step size ``eta_t`` and the shrink factor ``1 - eta_t lam`` of iteration ``t``.

    Parameters
    ----------
    schedule : {"pegasos", "norma", "constant"}
        ``"pegasos"``: ``eta_t = 1/(lam t)`` (Fig. 1, step 3);
        ``"norma"``: ``eta_t = p/(lam sqrt(t))`` (Kivinen et al., as in Fig. 2);
        ``"constant"``: ``eta_t = eta0`` (Zhang 2004, as in Fig. 2).
    t, lam : int, float
        Iteration (starting at 1); regularisation parameter.
    eta0, norma_p : float
        The constant step size (or None for the other schedules); NORMA's ``p``.

    Returns
    -------
    eta : float
    shrink : float
        ``1 - eta lam`` computed without cancellation (exactly 0 at ``t = 1`` of Pegasos).
    """
    if schedule == "pegasos":
        return 1.0 / (lam * t), 1.0 - 1.0 / t
    if schedule == "norma":
        return norma_p / (lam * math.sqrt(t)), 1.0 - norma_p / math.sqrt(t)
    return eta0, 1.0 - eta0 * lam


def step_sizes(schedule: str, t0: int, t1: int, lam: float, eta0: float | None, norma_p: float):
    """:func:`step_size` for the iterations ``t0 .. t1 - 1`` at once, as float64 arrays.

    The same IEEE operations elementwise, so the values are bitwise those of the scalar
    function.

    Returns
    -------
    etas, shrinks : ndarray of float64, shape (t1 - t0,)
    """
    import numpy as np  # noqa: PLC0415  (this module otherwise needs no NumPy)

    t = np.arange(t0, t1, dtype=np.float64)
    if schedule == "pegasos":
        return 1.0 / (lam * t), 1.0 - 1.0 / t
    if schedule == "norma":
        root = np.sqrt(t)
        return norma_p / (lam * root), 1.0 - norma_p / root
    return np.full(t.size, eta0, dtype=np.float64), np.full(t.size, 1.0 - eta0 * lam)


@dataclass(frozen=True)
class PegasosPlan:
    """What every Pegasos iteration of a run needs, fixed for the whole run.

    Attributes
    ----------
    lam, k : float, int
        Regularisation; mini-batch size.
    schedule, eta0, norma_p : str, float, float
        One of :data:`SCHEDULES` and its parameters (see :func:`step_size`).
    unreg_bias, optimal : bool
        ``bias="unregularized"`` / ``bias="optimal"`` (Pegasos Sec. 4).
    radius : float
        Projection radius (Fig. 1 step 5), 0 for none.
    averaged, t_avg : bool, int
        Whether the output is an average; iterates from ``t_avg`` on enter it.
    renorm_threshold : float
        Fold ``a`` into ``v`` when ``|a|`` falls below it.
    loss : {"hinge", "squared_hinge"}
    """

    lam: float
    k: int
    schedule: str = "pegasos"
    eta0: float = 0.0
    norma_p: float = 0.7
    unreg_bias: bool = False
    optimal: bool = False
    radius: float = 0.0
    averaged: bool = False
    t_avg: int = 1
    renorm_threshold: float = 1e-6
    loss: str = "hinge"


@dataclass(frozen=True)
class SDCAPlan:
    """What every mini-batch SDCA iteration of a run needs (Takáč et al. 2013).

    Attributes
    ----------
    lam : float
        Regularisation.
    beta_b, theta : float
        eq. (11): the safe step's beta, the upper bound of the aggressive one; Alg. 2's
        ``beta <- beta^theta rho^(1 - theta)``.
    aggressive : bool
        Alg. 2 (adapt beta, reject steps that lower ``D``).
    shrinking : bool
        One unweighted output, batches of one row, the hinge: skip the rows that
        LIBLINEAR's shrinking test (Hsieh et al. 2008, Sec. 3.2) takes out of the active
        set (:meth:`gpusvm.backends.numpy_.NumpyBackend.sdca_segment_m`); the certificate
        still covers every row, so it stays exact.
    loss : {"hinge", "squared_hinge"}
    """

    lam: float
    beta_b: float = 1.0
    theta: float = 0.5
    aggressive: bool = False
    shrinking: bool = False
    loss: str = "hinge"
