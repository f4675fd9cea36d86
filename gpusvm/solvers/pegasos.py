"""Mini-batch Pegasos, written once against the backend primitives.

Implements Fig. 1 of Shalev-Shwartz, Singer & Srebro, "Pegasos: Primal
Estimated sub-GrAdient SOlver for SVM" (ICML 2007), with the mini-batch
extension of Sec. 2.3, the sparse scaled representation of Sec. 2.4, the bias
variants of Sec. 4, the step-size schedules compared in Sec. 5 (Fig. 2), and the
averaged outputs of Corollary 1 and of Takáč et al. (2013, Theorem 1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ._sampling import BatchSampler

SCHEDULES = ("pegasos", "norma", "constant")
AVERAGING = ("none", "all", "tail")
BIAS_MODES = ("none", "augmented", "unregularized", "optimal")

#: fold ``a`` back into ``v`` when ``|a|`` falls below this (checked after every step;
#: a device backend does it in a kernel that exits at once when it is not needed)
RENORM_THRESHOLD = 1e-6


@dataclass
class SolverResult:
    """What a solver returns.

    Attributes
    ----------
    w : ndarray of float64, shape (d,)
        The output weight vector (last iterate or average).
    b : float
        The output bias.
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


def step_size(schedule: str, t: int, lam: float, eta0: float | None, norma_p: float):
    """Step size ``eta_t`` and the shrink factor ``1 - eta_t lam`` of iteration ``t``.

    Parameters
    ----------
    schedule : {"pegasos", "norma", "constant"}
        ``"pegasos"``: ``eta_t = 1/(lam t)`` (Fig. 1, step 3);
        ``"norma"``: ``eta_t = p/(lam sqrt(t))`` (Kivinen et al., as in Fig. 2);
        ``"constant"``: ``eta_t = eta0`` (Zhang 2004, as in Fig. 2).
    t : int
        Iteration, starting at 1.
    lam : float
        Regularisation parameter.
    eta0 : float or None
        The constant step size.
    norma_p : float
        NORMA's ``p``.

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


def default_eval_every(n: int, k: int, max_iter: int) -> int:
    """Evaluate the objective about once per epoch (a full pass costs one epoch)."""
    return int(max(1, min(max_iter, math.ceil(n / k))))


def segment_length(t: int, limit: int, eval_every: int, eval_at: Callable | None = None) -> int:
    """Iterations ``t + 1 .. t + s`` that a fused backend call may run: up to the next evaluation.

    Parameters
    ----------
    t : int
        Iterations done so far.
    limit : int
        At most this many (the rest of the chunk, or of ``max_iter``).
    eval_every : int
        Evaluate when ``t % eval_every == 0`` ...
    eval_at : callable, optional
        ... or, when given, when ``eval_at(t)`` is True.

    Returns
    -------
    int
        ``s >= 1``: the smallest with an evaluation after iteration ``t + s``, or ``limit``.
    """
    if eval_at is None:
        return int(min(limit, eval_every - t % eval_every))
    for s in range(1, limit + 1):
        if eval_at(t + s):
            return s
    return limit


def pegasos(backend, *, lam: float, k: int, max_iter: int, sampling: str = "without_replacement",
            seed=0, projection: bool = True, averaging: str = "none", schedule: str = "pegasos",
            eta0: float | None = None, norma_p: float = 0.7, bias: str = "none",
            w0=None, b0: float = 0.0, eval_every: int | None = None, max_time: float | None = None,
            target_objective: float | None = None, callback: Callable | None = None,
            progress=None, eval_at: Callable[[int], bool] | None = None) -> SolverResult:
    """Run mini-batch Pegasos on a prepared backend.

    Parameters
    ----------
    backend : Backend
        Holds ``X`` (with the constant feature appended when ``bias="augmented"``) and ``y``.
    lam : float
        Regularisation ``lam > 0`` of ``P(w) = lam/2 ||w||^2 + (1/n) sum hinge``.
    k : int
        Mini-batch size, ``1 <= k <= n``.
    max_iter : int
        Number of iterations ``T``.
    sampling : str
        See :class:`gpusvm.solvers._sampling.BatchSampler`.
    seed : int
        Seed of the batch stream.
    projection : bool
        Project onto the ball of radius ``1/sqrt(lam)`` (Fig. 1, step 5).
    averaging : {"none", "all", "tail"}
        Output the last iterate, the average of all iterates ``w_2..w_{T+1}``
        (Corollary 1), or the average of the iterates after steps
        ``t > T/2`` (Takáč et al. 2013, Theorem 1), with ``T = max_iter``.
    schedule, eta0, norma_p
        See :func:`step_size`.
    bias : {"none", "augmented", "unregularized", "optimal"}
        Sec. 4: no bias; a constant feature in ``X`` (handled by the caller);
        an unregularised ``b`` updated with the batch subgradient
        ``-(1/k) sum_{A_t^+} y_i``; the optimal ``b`` of each batch (a weighted
        median of the breakpoints ``y_i - <w, x_i>``).
    w0, b0
        Initial point; ``||w0|| <= 1/sqrt(lam)`` is the caller's check.
    eval_every : int, optional
        Iterations between two evaluations of the objective (the only
        synchronisation points of a device backend). Default: once per epoch.
    max_time : float, optional
        Time budget in seconds, checked at evaluations.
    target_objective : float, optional
        Stop at the first evaluation with ``P(w) <= target_objective``.
    callback : callable, optional
        ``callback(iteration, objective, elapsed)`` at each evaluation; returning
        ``False`` stops the run.
    progress : callable, optional
        ``progress(iterations_done, objective)`` at each evaluation (progress bars).
    eval_at : callable, optional
        ``eval_at(t) -> bool``, called after every iteration ``t``; when given it
        replaces ``eval_every``: the objective is evaluated exactly at the
        iterations where it returns True (e.g. geometrically spaced ones).

    Returns
    -------
    SolverResult

    Notes
    -----
    *Fastest settings on a CPU* (the compiled backend, ``backend="numba"``;
    measurements in BENCHMARKS.md, ``lam = 1e-4``, eps = 1e-3): ``k`` from 1 to
    16, ``averaging="tail"``, ``sampling="epoch"``; k = 16 was fastest on a9a
    and w8a, k = 1 on imdb and news20.  One core does the same work per epoch
    for every ``k`` (a margin per row, an update per active row), so what
    matters is the number of epochs, which grows once ``k`` exceeds about
    ``1/sigma^2`` (8 on imdb, 11 on news20; Takáč et al. 2013, Theorem 1:
    the speedup per iteration is ``k / beta_k``), and the constant cost of an
    iteration, which ``k = 16`` amortises on short rows (12-14 nonzeros).  The
    tail average removes most of the last iterate's noise.  Pegasos still
    needs 3-6 times the epochs of SDCA at this ``lam`` (16 on imdb, 48 on
    news20), so on a CPU mini-batch SDCA is the faster solver of this
    objective; Pegasos' large ``k`` pays off on a GPU.
    """
    n = backend.n
    if eval_every is None:
        eval_every = default_eval_every(n, k, max_iter)
    reg_bias = False  # an augmented bias is part of w; the others are not regularised
    averaged = averaging != "none"
    t_avg = 1 if averaging == "all" else max_iter // 2 + 1
    radius = 1.0 / math.sqrt(lam) if projection else 0.0
    unreg = bias == "unregularized"
    optimal = bias == "optimal"

    backend.init_state(w0, b0, averaging=averaged)
    sampler = BatchSampler(n, k, sampling, seed)
    history: list = []
    start = time.perf_counter()
    t = 0
    stop = "max_iter"

    def evaluate():
        w, b = backend.output(averaged and t >= t_avg)
        if optimal and t > 0:
            b = final_optimal_bias(backend, w)
        ev = backend.evaluate(w, b, lam, reg_bias)
        return w, b, ev

    fused = getattr(backend, "pegasos_iterations", None)    # compiled CPU backend (numba_.py)
    while t < max_iter:
        chunk = backend.upload_batches(sampler.next_chunk())
        j = 0
        while j < chunk.shape[0] and t < max_iter:
            if fused is not None:           # the same iterations, up to the next evaluation, in one call
                steps = segment_length(t, min(chunk.shape[0] - j, max_iter - t), eval_every, eval_at)
                fused(chunk, j, j + steps, t, lam=lam, k=k, schedule=schedule, eta0=eta0,
                      norma_p=norma_p, unreg_bias=unreg, optimal=optimal, radius=radius,
                      averaged=averaged, t_avg=t_avg, renorm_threshold=RENORM_THRESHOLD)
                t += steps
                j += steps
            else:
                t += 1
                rows = chunk[j]                                               # A_t
                j += 1
                m = backend.margins(rows)                                     # Fig. 1 step 2
                if optimal:
                    backend.optimal_bias(rows, m)                             # Sec. 4, b*
                eta, shrink = step_size(schedule, t, lam, eta0, norma_p)      # step 3
                if shrink == 0.0:
                    backend.reset_scale()
                    shrink = 1.0
                backend.pegasos_step(rows, m, eta, shrink, k, unreg, radius,  # steps 4-5
                                     averaged and t >= t_avg)
                backend.renormalize(RENORM_THRESHOLD)                         # keep v in range
            if (t % eval_every == 0 if eval_at is None else eval_at(t)) and t < max_iter:
                _, _, ev = evaluate()
                elapsed = time.perf_counter() - start
                history.append((t, ev.objective, elapsed))
                if progress is not None:
                    progress(t, ev.objective)
                if callback is not None and callback(t, ev.objective, elapsed) is False:
                    stop = "callback"
                elif target_objective is not None and ev.objective <= target_objective:
                    stop = "target_objective"
                elif max_time is not None and elapsed >= max_time:
                    stop = "max_time"
                if stop != "max_iter":
                    break
        if stop != "max_iter":
            break

    w, b, ev = evaluate()
    if not history or history[-1][0] != t:
        elapsed = time.perf_counter() - start
        history.append((t, ev.objective, elapsed))
        if progress is not None:
            progress(t, ev.objective)
        if callback is not None:
            callback(t, ev.objective, elapsed)        # the run ends here whatever it returns
    if stop == "max_iter" and target_objective is not None and ev.objective <= target_objective:
        stop = "target_objective"
    w = backend.to_host(w).astype(np.float64)
    b = float(backend.to_host(b))                       # a 0-d device array on a device backend
    return SolverResult(w=w, b=b, n_iter=t, history=history, stop_reason=stop,
                        extra={"objective": ev.objective})


def final_optimal_bias(backend, w) -> float:
    """Optimal bias of ``w`` over all rows (Pegasos Sec. 4 applied to the whole set)."""
    from ..backends.numpy_ import optimal_bias_xp
    xp = backend.xp
    s = backend.decision_function(w, 0.0)
    y = backend.y.astype(xp.float64)
    return float(backend.to_host(optimal_bias_xp(xp, y, s)))
