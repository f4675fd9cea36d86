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
from ._common import LOSSES, SolverResult, default_eval_every, run_output, segment_length
from ._sampling import CounterSampler

AVERAGING = ("none", "all", "tail", "doubling")
BIAS_MODES = ("none", "augmented", "unregularized", "optimal")

#: fold ``a`` back into ``v`` when ``|a|`` falls below this (checked after every step;
#: a device backend does it in a kernel that exits at once when it is not needed)
RENORM_THRESHOLD = 1e-6


def doubling_estimate(levels: list, noise_floor: bool = True) -> float:
    """Suboptimality left at the last of the objectives ``P_j`` at ``T_j = 2^j`` epochs.

    With the decreases ``d_j = P_{j-1} - P_j``, an error that shrinks by a
    factor ``r`` per doubling gives ``d_j = e_j (1/r - 1)``, so
    ``e_j = d_j r / (1 - r)``; ``r`` is estimated as ``d_j / d_{j-1}``.  The
    ``O(1/T)`` rate of the tail average (Takáč et al. 2013, Theorem 1) is
    ``r = 1/2``, ``e_j = d_j``, which is also the estimate while only one
    decrease is known; ``r`` is taken at least 1/3 (the first doublings fall
    fastest, and would understate the error), and a decrease that does not
    shrink gives ``inf``.  An increase after a decrease is read as the noise
    floor of a stochastic run (``0``) when ``noise_floor``; an increase at the
    first doubling, before any decrease, is the transient of the first large
    steps (``inf``), and so is every increase of a deterministic run
    (``noise_floor=False``: full batches, which have no noise floor).

    Parameters
    ----------
    levels : list of float
        ``P_0, P_1, ..., P_j``.
    noise_floor : bool, default=True
        Whether the objectives carry sampling noise (mini-batches smaller than ``n``).

    Returns
    -------
    float
    """
    if len(levels) < 2:
        return math.inf
    d = levels[-2] - levels[-1]
    if len(levels) < 3:
        # a first doubling that raised the objective is still the transient (the first
        # steps 1/(lam t) overshoot), not the noise floor: no estimate yet
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
        Holds ``X`` (with the constant feature appended when ``bias="augmented"``),
        ``y`` of shape ``(n,)`` or ``(n, M)`` (``M`` outputs trained at once on
        the same batches) and optional sample weights ``s``.
    lam : float
        Regularisation ``lam > 0`` of
        ``P_s(w) = lam/2 ||w||^2 + (1/n) sum_i s_i loss_i(w)`` (``s_i = 1`` without weights).
    k : int
        Mini-batch size, ``1 <= k <= n``.
    max_iter : int
        Number of iterations ``T``.
    sampling : str
        See :class:`gpusvm.solvers._sampling.CounterSampler`.
    seed : int or numpy.random.Generator
        Seed of the counter-based batch stream (:func:`gpusvm.solvers._sampling.seed_u64`).
    projection : bool
        Project onto a ball that holds the optimum (Fig. 1, step 5): radius
        ``1/sqrt(lam)``; ``sqrt(mean(s) / lam)`` with weights; ``sqrt(2 mean(s) / lam)``
        for the squared hinge; smaller where the best constant predictor (the bias
        alone) has a small objective, as with imbalanced classes
        (:func:`projection_radius`).
    averaging : {"none", "all", "tail", "doubling"}
        Output the last iterate, the average of all iterates ``w_2..w_{T+1}``
        (Corollary 1), or the average of the iterates after steps
        ``t > T/2`` (Takáč et al. 2013, Theorem 1), with ``T = max_iter``.
        ``"doubling"``: the tail average for ``T = 1, 2, 4, 8, ...`` epochs
        (``ceil(n/k)`` iterations each) in turn: the average restarts at every
        ``T_j``, so that at ``T_{j+1} = 2 T_j`` it is the tail average of the
        iterates after ``T_{j+1}/2``; the objective is evaluated at each ``T_j``
        only (``eval_every`` and ``eval_at`` are ignored) and the run stops there
        once :func:`doubling_estimate` of the suboptimality left is ``<= tol``
        (from the decreases of the objective between doublings; a stopping rule,
        not a certificate).
    schedule, eta0, norma_p
        See :func:`step_size`.
    bias : {"none", "augmented", "unregularized", "optimal"}
        Sec. 4: no bias; a constant feature in ``X`` (handled by the caller);
        an unregularised ``b`` updated with the batch subgradient
        ``-(1/k) sum_{A_t^+} y_i``; the optimal ``b`` of each batch (a weighted
        median of the breakpoints ``y_i - <w, x_i>``).
    w0, b0
        Initial point; ``||w0|| <= 1/sqrt(lam)`` is the caller's check.  Shapes
        ``(d,)`` and float for 1-D ``y``, ``(d, M)`` and ``(M,)`` for 2-D ``y``.
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
    tol : float, optional
        ``averaging="doubling"``: stop once :func:`doubling_estimate` of the
        suboptimality left is at most ``tol`` (``stop_reason="tol"``), read on
        ``P_s / mean(s)`` (:func:`weight_scale`): unchanged without weights, and
        the same for a row of integer weight ``m`` as for ``m`` repeated rows
        with ``lam = 1/(C n)``; and never while an output's objective is above that
        of ``w = 0, b = 0`` (``mean(s)``, an upper bound of ``P*``).
    loss : {"hinge", "squared_hinge"}, default="hinge"
        The subgradient of a violated example is ``-s_i y_i x_i`` (hinge) or
        ``-2 s_i (1 - m_i) y_i x_i`` (squared hinge).  ``bias="optimal"``
        minimises the batch hinge loss and takes the hinge only.
    t_start : int, default=0
        Iterations already done (``partial_fit``): the run performs iterations
        ``t_start + 1 .. t_start + max_iter`` on the batches ``t_start ..`` of
        the stream, with their step sizes, from ``w0``/``b0``; two runs of
        ``T/2`` chained this way take the steps of one run of ``T`` (averages
        restart with each run).
    intercept_scaling : float, default=1.0
        ``bias="augmented"``: the value of the constant feature, the last column of
        ``X`` (it tightens the projection radius, :func:`projection_radius`).
    whole_problem : bool, default=True
        The rows are the whole problem (``fit``).  ``False`` for one chunk of a stream
        (``partial_fit``), whose optimum is not that of the chunk alone: the projection
        radius is the dual bound only (the constant-predictor bound of
        :func:`projection_radius` reads the chunk's labels), and the returned point keeps
        Pegasos' bias (:func:`polished_augmented_bias` would fit it to the chunk), so
        that the next chunk goes on from the solver's own point.
    output_scale : array of shape (M,), optional
        Output ``c``'s objective is evaluated, reported and read by the
        stopping rule multiplied by ``output_scale[c] > 0`` (the one-pass search, whose
        outputs minimise positive multiples of their own objectives; see
        :func:`gpusvm.solvers.sdca.sdca`).

    Returns
    -------
    SolverResult
        ``w`` of shape ``(d,)`` and float ``b`` for 1-D ``y``; ``(d, M)`` and
        ``(M,)`` for 2-D ``y``.  The objective values of ``history`` (and
        ``extra["objective"]``, the callbacks' and ``target_objective``'s) are
        the mean over the outputs when ``M > 1``; ``extra["objectives"]`` has
        every output's, and ``extra["histories"]`` every output's own rows
        ``(iteration, objective, elapsed_seconds)``.  ``n_iter`` counts the
        iterations of this run.

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
    reg_bias = False  # an augmented bias is part of w; the others are not regularised
    averaged = averaging != "none"
    t_avg = t_start + (1 if averaging in ("all", "doubling") else max_iter // 2 + 1)
    levels: list = []                 # doubling: the objectives at the previous T_j
    # the stopping rule reads P_s / mean(s): the objective per unit of weight, which an integer
    # weight and as many repeated rows give alike (weight_scale)
    per_weight = 1.0 / weight_scale(backend)
    scale = None
    if output_scale is not None:      # each output's objective in its own fit's units
        scale = np.asarray(output_scale, dtype=np.float64)
        if scale.shape != (backend.n_outputs,) or \
                not np.all(np.isfinite(scale) & (scale > 0)):
            raise ValueError("output_scale must be positive and finite, one value per output")
        per_weight = 1.0
    # every batch holds every row: a deterministic run, whose objective has no noise floor
    full_batch = k >= n and sampling != "with_replacement"
    # one chunk of a stream (partial_fit) does not bound the whole problem's constant predictor
    radius_bias = bias if whole_problem else "none"
    radius = projection_radius(backend, lam, loss, radius_bias, intercept_scaling) \
        if projection else 0.0
    unreg = bias == "unregularized"
    optimal = bias == "optimal"

    backend.init_state_m(w0, b0, averaging=averaged)
    sampler = CounterSampler(n, k, sampling, seed)                            # A_t from (seed, t)
    plan = PegasosPlan(lam=lam, k=k, schedule=schedule, eta0=0.0 if eta0 is None else eta0,
                       norma_p=norma_p, unreg_bias=unreg, optimal=optimal, radius=radius,
                       averaged=averaged, t_avg=t_avg, renorm_threshold=RENORM_THRESHOLD,
                       loss=loss)
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
        objs = np.asarray(backend.to_host(backend.evaluate_m(W, b, lam, loss, reg_bias)[0]),
                          dtype=np.float64)
        if scale is not None:
            objs = objs * scale
        return W, b, float(np.mean(objs)), objs

    zero = None                       # P(0, 0) per output: every slack is 1, so mean(s_c)

    def settled(obj, objs):
        """The doubling rule's ``tol`` test, never passed by an output whose objective is above
        ``P(0, 0) >= P*`` (it is then at least that far from the optimum, whatever the
        estimate reads from a run that rose and fell)."""
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
            elapsed = time.perf_counter() - start
            history.append((t, obj, elapsed))
            for m, rows in enumerate(histories or ()):
                rows.append((t, float(objs[m]), elapsed))
            if progress is not None:
                progress(t, obj)
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
    # max_iter at a T_j (the default's 64 epochs): the stopping rule reads that last evaluation
    # too, as it reads every earlier one, instead of calling the run unsettled unseen
    if stop == "max_iter" and at_level and tol is not None and settled(obj, objs):
        stop = "tol"
    if history and history[-1][0] == t:
        history[-1] = (t, obj, history[-1][2])       # the point returned, bias polished
        for m, rows in enumerate(histories or ()):
            rows[-1] = (t, float(objs[m]), rows[-1][2])
    else:
        elapsed = time.perf_counter() - start
        history.append((t, obj, elapsed))
        for m, rows in enumerate(histories or ()):
            rows.append((t, float(objs[m]), elapsed))
        if progress is not None:
            progress(t, obj)
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
    """``mean(s)``, the mean sample weight of the backend's rows (1 without weights; with
    weights per output, the largest of the outputs' means).

    ``P_s(w) / mean(s) = (lam / (2 mean(s))) ||w||^2 + sum_i s_i loss_i / sum_i s_i``
    is the objective per unit of weight.  With ``lam = 1/(C n)`` it is
    ``(||w||^2 / (2C) + sum_i s_i loss_i) / sum_i s_i``: a row of integer weight
    ``m`` and ``m`` repeated rows of weight 1 give the same value, where ``P_s``
    itself differs by the factor ``n / sum_i s_i``.

    Parameters
    ----------
    backend : Backend
        Its ``sample_weight`` (None for unit weights) is read.

    Returns
    -------
    float
    """
    s = getattr(backend, "sample_weight", None)
    if s is None:
        return 1.0
    s = np.asarray(backend.to_host(s), dtype=np.float64)
    # per output (s of shape (n, M)): the largest of the outputs' means bounds them all
    return float(np.max(np.mean(s.reshape(s.shape[0], -1), axis=0)))


@on_backend_stream
def projection_radius(backend, lam: float, loss: str = "hinge", bias: str = "none",
                      intercept_scaling: float = 1.0) -> float:
    """Radius of a ball that holds the optimum (Fig. 1 step 5; ALGORITHMS.md, "Weights").

    The smaller of two bounds on ``||w*||``:

    * the dual bound, ``sqrt(mean(s) / lam)`` for the hinge: strong duality gives
      ``lam ||w*||^2 <= (1/n) sum_i alpha_i <= mean(s)`` (dual box ``0 <= alpha_i <= s_i``),
      which is the paper's ``1/sqrt(lam)`` without weights; ``sqrt(2 mean(s) / lam)``
      for the squared hinge (``lam/2 ||w*||^2 <= P_s(0) = mean(s)``);
    * the constant-predictor bound ``sqrt(2 P_s(u) / lam)``: ``lam/2 ||w*||^2 <=
      P_s(w*) <= P_s(u)`` for any point ``u`` whose margins are a constant, the bias
      alone (``w = 0`` with the best free ``b`` for ``bias="unregularized"`` or
      ``"optimal"``; ``w = c e_bias``, only the constant feature of value
      ``intercept_scaling``, for ``"augmented"``).  Its loss depends only on the
      weights of the two classes, ``S+`` and ``S-``, and its best value has a closed
      form (:func:`_constant_objective`).  With balanced classes it is no tighter
      than the dual bound; with imbalanced ones (or large class weights) much tighter:
      ``sqrt(2 (2 S- / n) / lam)`` against ``sqrt(mean(s) / lam)`` for a free bias and
      a minority class of weight ``S-``.

    ALGORITHMS.md states the looser ``sqrt(max_i s_i / lam)``.  Both bounds are, with
    ``lam = 1/(C n)``, the same for integer weights as for repeated rows (they depend
    on ``n lam`` and the class weights ``S+``, ``S-``), so the projection keeps that
    equivalence.  With ``M`` outputs the largest radius of the outputs serves all.

    Parameters
    ----------
    backend : Backend
        Its ``y`` and ``sample_weight`` (None for unit weights) are read.
    lam : float
    loss : {"hinge", "squared_hinge"}
    bias : {"none", "augmented", "unregularized", "optimal"}, default="none"
    intercept_scaling : float, default=1.0
        Value of the constant feature (the last column of ``X``) for ``"augmented"``.

    Returns
    -------
    float
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
    """The least objective of a constant margin, an upper bound of ``P_s(w*)``.

    The margin ``y_i u`` is the same ``u`` for every row: ``P(u) = R(u) + p L(1 - u) +
    q L(1 + u)`` with ``p = S+/n``, ``q = S-/n``, ``L`` the hinge or the squared hinge,
    and ``R(u) = lam/2 (u/c)^2`` for the augmented bias (the constant feature ``c``
    carries ``u`` with weight ``u/c``), ``R = 0`` for a free bias (``c`` None).  Both
    are convex in ``u`` with their minimum in ``[-1, 1]`` (outside it one loss term
    is zero and the other, with ``R``, grows), where the loss terms are linear
    (hinge) or quadratic (squared hinge): the minimiser is the stationary point of
    that piece, clipped to ``[-1, 1]``.
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
    """``w`` with its augmented-bias weight (last entry) the exact minimiser of ``P_s``.

    ``bias="augmented"`` regularises the bias: it is the weight ``beta`` of the constant
    feature ``c = intercept_scaling``, the last column of ``X``.  Given the other weights,
    ``P_s`` is a convex one-dimensional function of ``beta``, minimised exactly by
    :func:`~gpusvm.backends._general.regularized_bias_xp` (one sort of the ``n``
    breakpoints); the objective of the returned point is never above the one of ``w``.
    Pegasos' last steps ``1/(lam t)`` still move ``beta`` by up to ``||x_i||/(lam t)``, far
    from its best value where rows are long or weights large (class weights of 1000);
    the other weights keep Pegasos' values (Fig. 1).

    Parameters
    ----------
    backend : Backend
    w : array of shape (d, M)
        Pegasos' output points (the tail average, or the last iterate).
    lam : float
    loss : {"hinge", "squared_hinge"}
    intercept_scaling : float

    Returns
    -------
    array of shape (d, M)
        A copy, last row replaced.
    """
    w = backend.xp.array(w, dtype=backend.xp.float64, copy=True)
    w[-1] = backend.regularized_bias_m(w, lam, float(intercept_scaling), loss)
    return w
