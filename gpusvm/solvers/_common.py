"""What the stochastic solvers share: the result, the evaluation schedule, the output shape."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

#: the losses (docs/algorithms.md, "Weights, and the squared hinge")
LOSSES = ("hinge", "squared_hinge")


@dataclass
class SolverResult:
    """What a solver returns.

    Attributes
    ----------
    w, b : ndarray of float64 of shape (d,) and float, or (d, M) and (M,)
        The output point (last iterate or average), one column per output for 2-D labels.
    n_iter : int
        Iterations performed.
    history : list of tuple
        ``(iteration, objective, elapsed_seconds)`` at every evaluation.
    stop_reason : str
        ``"max_iter"``, ``"max_time"``, ``"target_objective"``, ``"tol"`` or ``"callback"``.
    extra : dict
        Solver-specific values (e.g. the dual objective and gap for SDCA).
    """

    w: np.ndarray
    b: float
    n_iter: int
    history: list = field(default_factory=list)
    stop_reason: str = "max_iter"
    extra: dict = field(default_factory=dict)


def default_eval_every(n: int, k: int, max_iter: int) -> int:
    """Evaluate the objective about once per epoch (a full pass costs one epoch)."""
    return int(max(1, min(max_iter, math.ceil(n / k))))


def segment_length(t: int, limit: int, eval_every: int, eval_at: Callable | None = None) -> int:
    """Iterations ``t + 1 .. t + s`` of the next segment, ``s >= 1``: up to the next evaluation
    (at ``t % eval_every == 0``, or where ``eval_at(t)``, a pure predicate of ``t`` asked
    about iterations ahead), at most ``limit``."""
    if eval_at is None:
        return int(min(limit, eval_every - t % eval_every))
    for s in range(1, limit + 1):
        if eval_at(t + s):
            return s
    return limit


def check_output_scale(output_scale, n_outputs: int):
    """``output_scale`` as float64 (M,), positive and finite, or None."""
    if output_scale is None:
        return None
    scale = np.asarray(output_scale, dtype=np.float64)
    if scale.shape != (n_outputs,) or not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError("output_scale must be positive and finite, one value per output")
    return scale


def run_output(backend, W, b):
    """The returned point on the host in float64: ``W`` (d, M) and ``b`` (M,), or ``w`` (d,)
    and a float ``b`` when the backend's labels are 1-D (one output); ``b`` None: zeros (no copy)."""
    W = np.asarray(backend.to_host(W), dtype=np.float64)
    b = np.zeros(W.shape[1]) if b is None else \
        np.asarray(backend.to_host(b), dtype=np.float64).reshape(-1)
    if np.ndim(backend.y) == 1:
        return W[:, 0], float(b[0])
    return W, b


def retire(ran, primal, dual, tols, reasons, n_iter, after):
    """The outputs of a Newton block still to iterate after the step that moved ``ran``: those
    whose gap ``primal - dual`` is above their ``tols`` (the others' reason becomes ``"tol"``),
    unless ``after(ran, live, n_iter, primal, dual)`` names a reason to stop them all (then
    theirs).  Shared by the host and the device Newton (``newton.py``, ``_newton_device.py``).
    """
    converged = primal[ran] - dual[ran] <= tols[ran]
    reasons[ran[converged]] = "tol"
    live = ran[~converged]
    stop = after(ran, live, n_iter, primal, dual) if after is not None else None
    if stop:
        reasons[live] = stop
        live = live[:0]
    return live
