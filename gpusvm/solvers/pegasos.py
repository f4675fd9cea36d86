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
from typing import Callable

import numpy as np

from ..backends.base import PegasosPlan, on_backend_stream
from ._common import (LOSSES, SolverResult, check_output_scale, default_eval_every, run_output,
                      segment_length)
from ._sampling import CounterSampler

AVERAGING = ("none", "all", "tail", "doubling")
BIAS_MODES = ("none", "augmented", "unregularized", "optimal")

#: fold ``a`` back into ``v`` when ``|a|`` falls below this (checked after every step;
#: a device backend does it in a kernel that exits at once when it is not needed)
RENORM_THRESHOLD = 1e-6


def doubling_estimate(levels: list, noise_floor: bool = True) -> float:
    """Suboptimality left at the last of the objectives ``levels = [P_0, ..., P_j]`` at
    ``T_j = 2^j`` epochs.

    With ``d_j = P_{j-1} - P_j``, an error that shrinks by ``r`` per doubling is ``e_j = d_j
    r / (1 - r)``, ``r = d_j / d_{j-1}`` taken at least 1/3 (the first doublings fall
    fastest); with one decrease, ``r = 1/2`` (the tail average's ``O(1/T)``, Takáč et al.
    2013, Theorem 1): ``e_j = d_j``.  A decrease that does not shrink gives ``inf``; an
    increase after a decrease is the noise floor (``0``) when ``noise_floor`` (batches
    smaller than ``n``), else, like a first rise (the transient), ``inf``.
    """
    if len(levels) < 2:
        return math.inf
    d = levels[-2] - levels[-1]
    if len(levels) < 3:               # a first rise is the transient (steps 1/(lam t) overshoot)
        return d if d > 0.0 else math.inf
    d_prev = levels[-3] - levels[-2]
    if d <= 0.0:
        return 0.0 if (d_prev > 0.0 and noise_floor) else math.inf
    if not d < d_prev:
        return math.inf
    r = max(d / d_prev, 1.0 / 3.0)    # early decreases overstate the rate: never below d/2
    return d * r / (1.0 - r)


@on_backend_stream
def pegasos(backend, *, lam: float, k: int, max_iter: int, sampling: str = "without_replacement",
            seed=0, projection: bool = True, averaging: str = "none", schedule: str = "pegasos",
            eta0: float | None = None, norma_p: float = 0.7, bias: str = "none",
            w0=None, b0: float = 0.0, eval_every: int | None = None, max_time: float | None = None,
            target_objective: float | None = None, callback: Callable | None = None,
            progress=None, eval_at: Callable[[int], bool] | None = None,
            tol: float | None = None, loss: str = "hinge", t_start: int = 0,
            intercept_scaling: float = 1.0, whole_problem: bool = True,
            output_scale=None) -> SolverResult:
    """Run mini-batch Pegasos on a prepared backend.

    Parameters
    ----------
    backend : Backend
        Holds ``X`` (with the constant feature when ``bias="augmented"``), ``y`` (n,) or
        (n, M) (``M`` outputs on the same batches) and optional sample weights ``s``.
    lam : float
        Regularisation ``lam > 0`` of ``P_s(w) = lam/2 ||w||^2 + (1/n) sum_i s_i loss_i(w)``.
    k, max_iter : int
        Mini-batch size ``1 <= k <= n`` and number of iterations ``T``.
    sampling, seed
        The batch stream (:class:`gpusvm.solvers._sampling.CounterSampler`, ``seed`` an int
        or a generator, :func:`gpusvm.solvers._sampling.seed_u64`).
    projection : bool
        Project onto a ball that holds the optimum (Fig. 1, step 5; :func:`projection_radius`).
    averaging : {"none", "all", "tail", "doubling"}
        The last iterate, the average of all iterates ``w_2..w_{T+1}`` (Corollary 1), or of
        those after steps ``t > T/2`` (Takáč et al. 2013, Theorem 1), ``T = max_iter``.
        ``"doubling"``: the tail average for ``T = 1, 2, 4, ...`` epochs (``ceil(n/k)``
        iterations) in turn, restarted at every ``T_j``, the objective evaluated there only
        (``eval_every`` and ``eval_at`` ignored) and the run stopped once
        :func:`doubling_estimate` is ``<= tol`` (a stopping rule, not a certificate).
    schedule, eta0, norma_p
        See :func:`gpusvm.backends.base.step_size`.
    bias : {"none", "augmented", "unregularized", "optimal"}
        Sec. 4: no bias; a constant feature in ``X`` (added by the caller); an
        unregularised ``b`` stepped with ``-(1/k) sum_{A_t^+} y_i``; the optimal ``b`` of
        each batch (a weighted median of the breakpoints ``y_i - <w, x_i>``).
    w0, b0
        Initial point: ``(d,)`` and a float for 1-D ``y``, ``(d, M)`` and ``(M,)`` for 2-D.
    eval_every : int, optional
        Iterations between two evaluations (a device backend's only synchronisation
        points); default: once per epoch.
    max_time, target_objective : float, optional
        Stop at the first evaluation past the time budget (seconds) or with ``P(w) <=
        target_objective``.
    callback, progress : callable, optional
        At each evaluation, ``callback(iteration, objective, elapsed)`` (``False`` stops)
        and ``progress(iterations_done, objective)``.
    eval_at : callable, optional
        ``eval_at(t) -> bool``: evaluate exactly where it is True (replaces ``eval_every``).
    tol : float, optional
        ``averaging="doubling"``'s stopping threshold, read on ``P_s / mean(s)``
        (:func:`weight_scale`), and never passed while an output's objective is above
        ``P_s(0, 0) = mean(s)``, an upper bound of ``P*``.
    loss : {"hinge", "squared_hinge"}, default="hinge"
        The subgradient of a violated example is ``-s_i y_i x_i`` or ``-2 s_i (1 - m_i) y_i
        x_i``.  ``bias="optimal"`` takes the hinge only.
    t_start : int, default=0
        Iterations already done (``partial_fit``): this run takes the batches and steps of
        iterations ``t_start + 1 .. t_start + max_iter`` (averages restart).
    intercept_scaling : float, default=1.0
        ``bias="augmented"``: the value of the constant feature, the last column of ``X``.
    whole_problem : bool, default=True
        False for one chunk of a stream (``partial_fit``): the projection takes the dual
        bound only and the bias is not polished to the chunk
        (:func:`polished_augmented_bias`).
    output_scale : array of shape (M,), optional
        Each output's objective is reported and read by the stopping rule times
        ``output_scale[c] > 0`` (the one-pass search; :func:`gpusvm.solvers.sdca.sdca`).

    Returns
    -------
    SolverResult
        With ``M > 1`` the objectives of ``history``, ``extra["objective"]``, the callbacks
        and ``target_objective`` are the mean over the outputs; ``extra["objectives"]`` and
        ``extra["histories"]`` hold every output's.  ``n_iter`` counts this run's iterations.

    Notes
    -----
    On a CPU one core does the same work per epoch for every ``k``, and the epochs grow once
    ``k`` exceeds about ``1/sigma^2`` (Takáč et al. 2013, Theorem 1): ``k`` from 1 to 16,
    ``averaging="tail"`` and ``sampling="epoch"`` are fastest (BENCHMARKS.md).
    """
    n = backend.n
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    if loss != "hinge" and bias == "optimal":
        raise ValueError("bias='optimal' minimises the batch hinge loss over b; with "
                         "loss='squared_hinge' use bias='unregularized' or 'augmented'")
    if not (isinstance(t_start, (int, np.integer)) and t_start >= 0):
        raise ValueError(f"t_start must be an int >= 0 (iterations already done), got {t_start!r}")
    t_start = int(t_start)
    t_end = t_start + max_iter
    doubling = averaging == "doubling"
    if doubling:                      # evaluations at T_j = 2^j epochs (of this run) only
        epoch = math.ceil(n / k)
        eval_every, eval_at = None, None
    elif eval_every is None:
        eval_every = default_eval_every(n, k, max_iter)
    averaged = averaging != "none"
    t_avg = t_start + (1 if averaging in ("all", "doubling") else max_iter // 2 + 1)
    levels: list = []                 # doubling: the objectives at the previous T_j
    per_weight = 1.0 / weight_scale(backend)      # the stopping rule reads P_s / mean(s)
    scale = check_output_scale(output_scale, backend.n_outputs)
    if scale is not None:             # each output's objective in its own fit's units
        per_weight = 1.0
    # every batch holds every row: a deterministic run, whose objective has no noise floor
    full_batch = k >= n and sampling != "with_replacement"
    # one chunk of a stream (partial_fit) does not bound the whole problem's constant predictor
    radius = projection_radius(backend, lam, loss, bias if whole_problem else "none",
                               intercept_scaling) if projection else 0.0
    optimal = bias == "optimal"

    backend.init_state_m(w0, b0, averaging=averaged)
    sampler = CounterSampler(n, k, sampling, seed)                            # A_t from (seed, t)
    plan = PegasosPlan(lam=lam, k=k, schedule=schedule, eta0=0.0 if eta0 is None else eta0,
                       norma_p=norma_p, unreg_bias=bias == "unregularized", optimal=optimal,
                       radius=radius, averaged=averaged, t_avg=t_avg,
                       renorm_threshold=RENORM_THRESHOLD, loss=loss)
    history: list = []
    # M outputs: every output's own rows (t, P, seconds) besides the mean of ``history``
    histories = [[] for _ in range(backend.n_outputs)] if np.ndim(backend.y) == 2 else None
    start = time.perf_counter()
    t = t_start
    stop = "max_iter"
    # the returned point's augmented bias is the exact minimiser given the rest of w
    polish = whole_problem and bias == "augmented" and t_end > t_start

    def evaluate(final=False):
        W, b = backend.output_m(averaged and t >= t_avg)
        if optimal and t > 0:
            b = backend.final_optimal_bias_m(W)                               # Sec. 4, all rows
        if final and polish:
            W = polished_augmented_bias(backend, W, lam, loss, intercept_scaling)
        # reg_bias False: an augmented bias is part of w, the others are not regularised
        objs = np.asarray(backend.to_host(backend.evaluate_m(W, b, lam, loss, False)[0]),
                          dtype=np.float64)
        if scale is not None:
            objs = objs * scale
        return W, b, float(np.mean(objs)), objs

    def record(obj, objs):
        elapsed = time.perf_counter() - start
        history.append((t, obj, elapsed))
        for m, rows in enumerate(histories or ()):
            rows.append((t, float(objs[m]), elapsed))
        if progress is not None:
            progress(t, obj)
        return elapsed

    zero = None                       # P(0, 0) per output: every slack is 1, so mean(s_c)

    def settled(obj, objs):
        """The doubling rule's ``tol`` test, never passed by an output whose objective is above
        ``P(0, 0) >= P*`` (it is then at least that far from the optimum)."""
        nonlocal zero
        if doubling_estimate(levels + [obj * per_weight], not full_batch) > tol:
            return False
        if zero is None:
            sw = backend.sample_weight
            zero = np.ones(backend.n_outputs) if sw is None else np.mean(
                np.asarray(backend.to_host(sw), dtype=np.float64).reshape(n, -1), axis=0)
            if scale is not None:
                zero = zero * scale
        return bool(np.all(objs <= zero))

    at_level = False                  # doubling: the run's last segment ended at a T_j
    while t < t_end:
        if doubling:                  # up to the next T_j = 2^j epochs of this run
            level = epoch
            while t_start + level <= t:
                level *= 2
            steps = min(t_end - t, t_start + level - t)
        else:
            steps = segment_length(t - t_start, t_end - t, eval_every, eval_at)
        backend.pegasos_segment_m(sampler, t, t + steps, plan)                # Fig. 1, steps 1-5
        t += steps
        at_level = doubling and t == t_start + level
        if t < t_end:
            _, _, obj, objs = evaluate()
            elapsed = record(obj, objs)
            if callback is not None and callback(t, obj, elapsed) is False:
                stop = "callback"
            elif target_objective is not None and obj <= target_objective:
                stop = "target_objective"
            elif doubling and tol is not None and settled(obj, objs):
                stop = "tol"
            elif max_time is not None and elapsed >= max_time:
                stop = "max_time"
            if stop != "max_iter":
                break
            if doubling:              # the next tail average starts here
                levels.append(obj * per_weight)
                backend.reset_average_m()

    w, b, obj, objs = evaluate(final=True)
    # max_iter at a T_j (the default's 64 epochs): the stopping rule reads that evaluation too
    if stop == "max_iter" and at_level and tol is not None and settled(obj, objs):
        stop = "tol"
    if history and history[-1][0] == t:
        history[-1] = (t, obj, history[-1][2])       # the point returned, bias polished
        for m, rows in enumerate(histories or ()):
            rows[-1] = (t, float(objs[m]), rows[-1][2])
    else:
        elapsed = record(obj, objs)
        if callback is not None:
            callback(t, obj, elapsed)                 # the run ends here whatever it returns
    if stop == "max_iter" and target_objective is not None and obj <= target_objective:
        stop = "target_objective"
    extra = {"objective": obj}
    if histories is not None:
        extra["objectives"] = objs
        extra["histories"] = histories
    w, b = run_output(backend, w, b)
    return SolverResult(w=w, b=b, n_iter=t - t_start, history=history, stop_reason=stop,
                        extra=extra)


@on_backend_stream
def weight_scale(backend) -> float:
    """``mean(s)`` of the backend's sample weights (1 without; per output, the largest mean).

    ``P_s(w) / mean(s)`` is the objective per unit of weight: with ``lam = 1/(C n)`` a row of
    integer weight ``m`` and ``m`` repeated rows give the same value (``P_s`` differs by
    ``n / sum_i s_i``).
    """
    s = getattr(backend, "sample_weight", None)
    if s is None:
        return 1.0
    s = np.asarray(backend.to_host(s), dtype=np.float64)
    return float(np.max(np.mean(s.reshape(s.shape[0], -1), axis=0)))


@on_backend_stream
def projection_radius(backend, lam: float, loss: str = "hinge", bias: str = "none",
                      intercept_scaling: float = 1.0) -> float:
    """Radius of a ball that holds the optimum (Fig. 1 step 5; docs/algorithms.md, "Weights"):
    the smaller of two bounds on ``||w*||``.

    * The dual bound: ``sqrt(mean(s) / lam)`` for the hinge (strong duality, ``lam ||w*||^2
      <= (1/n) sum_i alpha_i <= mean(s)``; the paper's ``1/sqrt(lam)`` without weights),
      ``sqrt(2 mean(s) / lam)`` for the squared hinge (``lam/2 ||w*||^2 <= P_s(0)``).
    * The constant-predictor bound ``sqrt(2 P_s(u) / lam)``, ``u`` the best point whose
      margins are a constant (the bias alone: a free ``b``, or for ``"augmented"`` only the
      constant feature of value ``intercept_scaling``), in closed form
      (:func:`_constant_objective`): much tighter with imbalanced classes.

    Both depend on ``n lam`` and the class weights only, so with ``lam = 1/(C n)`` integer
    weights and repeated rows keep the same radius (``sqrt(max_i s_i / lam)`` is looser).
    With ``M`` outputs the largest radius serves all.
    """
    mean_s = weight_scale(backend)
    if loss == "squared_hinge":
        dual = 2.0 * mean_s / lam
    elif getattr(backend, "sample_weight", None) is None:
        dual = 1.0 / lam
    else:
        dual = mean_s / lam
    if bias == "none":
        return math.sqrt(dual)
    xp = backend.xp
    y = backend.y.reshape(backend.y.shape[0], -1)
    s = getattr(backend, "sample_weight", None)
    s = 1.0 if s is None else (s if s.ndim == 2 else s[:, None])
    # S+/n and S-/n of each output, summed where the labels are: one copy of 2 M numbers
    sums = xp.stack([xp.sum(xp.where(y > 0, s, 0.0), axis=0, dtype=xp.float64),
                     xp.sum(xp.where(y < 0, s, 0.0), axis=0, dtype=xp.float64)])
    s_pos, s_neg = np.asarray(backend.to_host(sums), dtype=np.float64) / y.shape[0]
    c = float(intercept_scaling) if bias == "augmented" else None
    best = max(_constant_objective(p, q, lam, loss, c) for p, q in zip(s_pos, s_neg))
    return math.sqrt(min(dual, 2.0 * best / lam)) if best > 0.0 else math.sqrt(dual)


def _constant_objective(p: float, q: float, lam: float, loss: str, c: float | None) -> float:
    """The least objective of a constant margin ``u``, an upper bound of ``P_s(w*)``.

    ``P(u) = R(u) + p L(1 - u) + q L(1 + u)``, ``p = S+/n``, ``q = S-/n``, ``R(u) = lam/2
    (u/c)^2`` for the augmented bias (feature ``c``), 0 for a free bias (``c`` None).  Convex,
    with its minimum in ``[-1, 1]``, where ``L`` is linear or quadratic: the stationary point
    of that piece, clipped to ``[-1, 1]``.
    """
    r = 0.0 if c is None else lam / (c * c)            # R(u) = r/2 u^2
    if loss == "squared_hinge":                        # r u - 2p (1 - u) + 2q (1 + u) = 0
        u = 2.0 * (p - q) / (r + 2.0 * (p + q)) if r + p + q > 0 else 0.0
    elif r > 0:                                        # r u - p + q = 0
        u = (p - q) / r
    else:                                              # linear: the end the larger class wants
        u = 1.0 if p >= q else -1.0
    u = min(1.0, max(-1.0, u))
    if loss == "squared_hinge":
        losses = p * (1.0 - u) ** 2 + q * (1.0 + u) ** 2
    else:
        losses = p * (1.0 - u) + q * (1.0 + u)
    return 0.5 * r * u * u + losses


@on_backend_stream
def polished_augmented_bias(backend, w, lam: float, loss: str, intercept_scaling: float):
    """A copy of Pegasos' output points ``w`` (d, M) whose augmented-bias weight (last row) is
    the exact minimiser of ``P_s`` given the other weights.

    ``P_s`` is convex in the weight of the constant feature ``intercept_scaling``, minimised
    by :func:`~gpusvm.backends._general.regularized_bias_xp` (one sort of the ``n``
    breakpoints), so the objective never rises.  Pegasos' last steps still move that weight
    by up to ``||x_i||/(lam t)``, far from its best value where rows are long or weights large.
    """
    w = backend.xp.array(w, dtype=backend.xp.float64, copy=True)
    w[-1] = backend.regularized_bias_m(w, lam, float(intercept_scaling), loss)
    return w
