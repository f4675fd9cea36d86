r"""The first iteration ``T`` with ``P(w_T) - P* <= eps``, without evaluating ``P`` every iteration.

The method and its guarantee are told in docs/studies.md ("What is measured, and how").  With
``f(t) = P(w_t) - P*`` and ``G = dense_below * eps``, the probe pass evaluates at
``t_{j+1} = max(t_j + 1, ceil(r t_j))``, but one dense step (``max(1, floor(rel_step t))``) apart
once ``f <= r^2 G`` or where a local power-law fit ``f ~ t^-p`` predicts ``f <= G`` within a
factor ``r^2``.  Unless dense steps cover everything after ``t_G`` (the last evaluation before
the first with ``f <= G``), a replay with the same seed evaluates every dense step from ``t_G``
to the first evaluation with ``f <= eps``; ``replay_consistent`` records whether it reproduced
``P(w_{t_G})`` to 1e-9 relative (SDCA recomputes ``w(alpha)``, so it agrees to rounding only).
The solver is driven only through ``eval_at`` (a pure predicate) and ``callback``, so backends
that fuse iterations work too.  The Pegasos tail average snapshots every iteration up to 16,
then on the ``snapshot_ratio`` grid; it is the solver's ``averaging="tail"`` when ``floor(T/2)``
is a snapshot.  ``seconds`` excludes the time spent in the callbacks.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import asdict, dataclass

__all__ = ["METHODS", "RunSpec", "SearchSettings", "find_crossing", "trace_run", "dense_step"]

#: the methods of Takáč et al. (2013), Figure 1
METHODS = ("pegasos", "sdca-naive", "sdca-safe", "sdca-aggressive")
PEGASOS_OUTPUTS = ("tail", "last")


@dataclass(frozen=True)
class SearchSettings:
    """Settings of the crossing search (all of them enter the cell keys).

    Attributes
    ----------
    probe_ratio : float
        Ratio ``r > 1`` between successive probe evaluations.
    rel_step : float
        Dense step as a fraction of ``t``: ``T`` is within ``rel_step`` of the first crossing.
    snapshot_ratio : float
        Ratio of the snapshot grid of the Pegasos tail average.
    explode : float or None
        SDCA runs with ``P > explode`` are ``diverged`` (``P(0) = 1``); ``P`` not finite always is.
    stall_window, stall_min_epochs : float
        ``stalled`` when, after ``stall_min_epochs`` passes over the data, no evaluation in the
        last ``1 - 1/stall_window`` of the run improved on the best one before (None: never).
    dense_below : float
        Once ``f <= dense_below * eps``, every later evaluation is one dense step apart.
    predict_dense : bool
        Also take dense steps where a power-law fit predicts the crossing within
        ``probe_ratio^2`` (False: bracket and replay instead; slower, same guarantee).
    """

    probe_ratio: float = 1.25
    rel_step: float = 0.005
    snapshot_ratio: float = 1.05
    explode: float | None = 10.0
    stall_window: float | None = 4.0
    stall_min_epochs: float = 10.0
    dense_below: float = 2.0
    predict_dense: bool = True

    def __post_init__(self):
        if not self.probe_ratio > 1.0:
            raise ValueError(f"probe_ratio must be > 1, got {self.probe_ratio!r}")
        if not 0.0 < self.rel_step <= 0.01:
            raise ValueError(f"rel_step must lie in (0, 0.01] (the 1% guarantee), got "
                             f"{self.rel_step!r}")
        if not self.snapshot_ratio > 1.0:
            raise ValueError(f"snapshot_ratio must be > 1, got {self.snapshot_ratio!r}")
        if self.explode is not None and not self.explode > 1.0:
            raise ValueError(f"explode must be > 1 or None, got {self.explode!r}")
        if self.stall_window is not None and not self.stall_window > 1.0:
            raise ValueError(f"stall_window must be > 1 or None, got {self.stall_window!r}")
        if not self.dense_below >= 1.0:
            raise ValueError(f"dense_below must be >= 1, got {self.dense_below!r}")

    def as_dict(self) -> dict:
        """Plain dict (for keys and metadata)."""
        return asdict(self)


@dataclass(frozen=True)
class RunSpec:
    """One solver run: the method, its batch size and seed, and the options it needs.

    Attributes
    ----------
    method : str
        One of :data:`METHODS`.
    b, seed : int
        Mini-batch size and seed of the batch stream.
    lam : float
        Regularisation.
    backend : str
        Backend name for :func:`gpusvm.backends.make_backend`.
    pegasos_output : {"tail", "last"}
        Which Pegasos iterate is evaluated.
    projection, schedule, eta0, norma_p
        Pegasos' projection step (Takáč et al.: off; Pegasos Fig. 1: on), step sizes
        (``"pegasos"``, ``"norma"`` or ``"constant"``), constant step and NORMA's ``p``.
    sampling : str
        Batch sampling (Rand(b) = ``"without_replacement"``).
    theta, sigma2 : float
        Aggressive SDCA's adaptation weight; ``sigma^2`` of the row-normalised data, for SDCA.
    """

    method: str
    b: int
    seed: int
    lam: float
    backend: str = "numpy"
    pegasos_output: str = "tail"
    projection: bool = False
    schedule: str = "pegasos"
    eta0: float | None = None
    norma_p: float = 0.7
    sampling: str = "without_replacement"
    theta: float = 0.5
    sigma2: float | None = None

    @property
    def is_sdca(self) -> bool:
        """Whether the method is one of the SDCA variants."""
        return self.method.startswith("sdca-")


def dense_step(t: int, rel: float) -> int:
    """Dense evaluation step at iteration ``t``: ``max(1, floor(rel t))``."""
    return max(1, int(math.floor(rel * t)))


class _LastIterate:
    """The current iterate (SDCA's ``w(alpha)``, Pegasos' ``w_{t+1}``): the solver's objective."""

    averaging = "none"
    uses_solver_objective = True
    next_snap = -1                # no snapshots

    def __init__(self, backend, lam: float) -> None:
        self.backend, self.lam = backend, lam

    def weights(self, t: int):
        return self.backend.output_m(False)[0][:, 0]


class _TailAverage:
    """Tail average of the Pegasos iterates from snapshots of their running sum.

    The solver runs with ``averaging="all"``, so ``S_t = t * output_m(True)`` is the sum of
    the iterates after steps ``1..t``; a snapshot point is also an evaluation point.
    """

    averaging = "all"
    uses_solver_objective = False
    exact_upto = 16

    def __init__(self, backend, lam: float, ratio: float) -> None:
        self.backend, self.lam, self.ratio = backend, lam, ratio
        self.keys: list[int] = [0]
        self.snaps: dict = {0: None}     # S_0 = 0
        self.next_snap = 1

    def _sum(self, t: int):
        return self.backend.output_m(True)[0][:, 0] * float(t)

    def snapshot(self, t: int) -> None:
        if t != self.next_snap:
            return
        self.snaps[t] = self._sum(t)
        self.keys.append(t)
        self.next_snap = t + 1 if t < self.exact_upto else max(t + 1, int(t * self.ratio))
        # evaluations at T >= t use the largest key <= T // 2 >= t // 2: drop the older keys
        j = bisect.bisect_right(self.keys, t // 2) - 1       # >= 0: keys[0] <= t // 2
        for old in self.keys[:j]:
            del self.snaps[old]
        del self.keys[:j]

    def weights(self, t: int):
        q = self.keys[bisect.bisect_right(self.keys, t // 2) - 1]
        s_t, s_q = self._sum(t), self.snaps[q]
        return (s_t if s_q is None else s_t - s_q) / float(t - q)


class _ProbePlan:
    """Geometric probes, dense steps where the crossing is predicted (a plan: ``first``, then
    ``next_after`` each evaluation)."""

    first = 1

    def __init__(self, settings: SearchSettings, eps: float) -> None:
        self.r, self.rel, self.eps = settings.probe_ratio, settings.rel_step, eps
        self.predict = settings.predict_dense
        self.near = settings.dense_below * eps
        self.dense = False            # sticky once f <= dense_below * eps was seen

    def next_after(self, t: int, hist: list) -> int:
        # dense steps must already be running when f first falls below dense_below * eps
        # (the guarantee needs dense coverage from the evaluation before that point)
        if hist[-1][1] <= self.near * self.r * self.r:
            self.dense = True
        if self.dense or self._predicted_soon(t, hist):
            return t + dense_step(t, self.rel)
        return max(t + 1, int(math.ceil(t * self.r)))

    def _predicted_soon(self, t: int, hist: list) -> bool:
        if not self.predict:
            return False
        f = hist[-1][1]
        limit = t / math.sqrt(self.r)
        ref = next(((tt, ff) for tt, ff, *_ in reversed(hist[:-1]) if tt <= limit), None)
        if ref is None or not (ref[1] > f > 0) or not math.isfinite(ref[1]):
            return False
        p = math.log(ref[1] / f) / math.log(t / ref[0])          # f ~ t^-p locally
        return math.log(f / self.near) / p <= 2.0 * math.log(self.r)


class _DensePlan:
    """Every dense step from ``lo`` (included) to ``hi``."""

    def __init__(self, lo: int, hi: int, rel: float) -> None:
        self.first, self.hi, self.rel = max(1, lo), hi, rel

    def next_after(self, t: int, hist: list) -> int:
        return min(self.hi, t + dense_step(t, self.rel))


class _EveryPlan:
    """Every iteration (the brute-force reference of the tests)."""

    first = 1

    def next_after(self, t: int, hist: list) -> int:
        return t + 1


class _FixedPlan:
    """A given sorted list of iterations."""

    def __init__(self, points) -> None:
        self.points = sorted({int(p) for p in points if int(p) >= 1})
        if not self.points:
            raise ValueError("no evaluation point >= 1")
        self.first = self.points[0]

    def next_after(self, t: int, hist: list) -> int:
        j = bisect.bisect_right(self.points, t)
        return self.points[j] if j < len(self.points) else 0


class _Observer:
    """Decides where the solver evaluates (``due``, its ``eval_at``) and reads the evaluations.

    ``due(t)`` is pure between two evaluations (a fused backend may ask it about iterations
    ahead); ``callback`` snapshots, records ``P`` and decides; returning False stops the run.
    """

    def __init__(self, *, plan, spec: RunSpec, n: int, cap: int, settings: SearchSettings,
                 p_star: float = 0.0, eps: float | None = None, replay: bool = False,
                 max_seconds: float | None = None, extra_eval=None) -> None:
        self.plan, self.spec, self.n, self.cap = plan, spec, n, cap
        self.settings, self.p_star, self.eps, self.replay = settings, p_star, eps, replay
        self.max_seconds, self.extra_eval = max_seconds, extra_eval
        self.hist: list = []          # (t, f, P, train_seconds, extras)
        self.status = self.T = self.T_lower = self.bracket = self.region_start = None
        self.stop, self.excluded, self.next_snap, self.last_t = False, 0.0, -1, 0
        self.next_eval = plan.first

    def attach(self, backend) -> None:
        if self.spec.method == "pegasos" and self.spec.pegasos_output == "tail":
            self.iterate = _TailAverage(backend, self.spec.lam, self.settings.snapshot_ratio)
        else:
            self.iterate = _LastIterate(backend, self.spec.lam)
        self.next_snap = self.iterate.next_snap

    def due(self, t: int) -> bool:
        """Whether the solver evaluates after iteration ``t`` (pure between evaluations)."""
        return t == self.next_eval or t == self.next_snap or t == self.cap

    def callback(self, t, objective, elapsed) -> bool:
        if self.stop or t <= self.last_t:       # the solver's final call after a stop
            return not self.stop
        c0 = time.perf_counter()
        self.last_t = t
        train = elapsed - self.excluded
        if t == self.next_snap:
            self.iterate.snapshot(t)
            self.next_snap = self.iterate.next_snap
        if t == self.next_eval or t == self.cap:
            self._evaluate(t, objective, train)
        if not self.stop and self.max_seconds is not None and train > self.max_seconds:
            self._finish("time_cap")
        self.excluded += time.perf_counter() - c0
        return not self.stop

    def _finish(self, status: str) -> None:
        self.status = status
        self.stop = True

    def _evaluate(self, t: int, objective, train: float) -> None:
        w = None
        if self.iterate.uses_solver_objective:
            P = float(objective)
        else:
            w = self.iterate.weights(t)
            P = float(self.iterate.backend.evaluate_m(w[:, None], 0.0, self.spec.lam)[0][0])
        extras = None if self.extra_eval is None else self.extra_eval(
            self.iterate.weights(t) if w is None else w)
        f = P - self.p_star
        prev_t = self.hist[-1][0] if self.hist else 0
        self.hist.append((t, f, P, train, extras))
        if self.eps is None:                                   # a trace: record only
            nxt = self.plan.next_after(t, self.hist)
            self.next_eval = nxt if nxt and nxt <= self.cap else -1
            if not math.isfinite(P):
                self._finish("diverged")
            return
        if self.region_start is None and f <= self.settings.dense_below * self.eps:
            self.region_start = prev_t          # the first crossing lies after this evaluation
        if not math.isfinite(P) or (self.spec.is_sdca and self.settings.explode is not None
                                    and P > self.settings.explode):
            self._finish("diverged")
            return
        if f <= self.eps:
            if self.replay or self._covered(self.region_start):
                self.T, self.T_lower = t, (prev_t if self.hist[:-1] else 0)
                self._finish("reached")
            else:
                self.bracket = (self.region_start, t)
                self._finish("bracket")
            return
        if t >= self.cap:
            self._finish("not_reached")
            return
        if not self.replay and self._stalled(t):
            self._finish("stalled")
            return
        self.next_eval = min(self.cap, self.plan.next_after(t, self.hist))

    def _covered(self, start: int) -> bool:
        """Whether the evaluations after ``start`` are at most one dense step apart."""
        ts = [0] + [h[0] for h in self.hist]
        return all(t <= start or t - prev <= dense_step(prev, self.settings.rel_step)
                   for prev, t in zip(ts, ts[1:]))

    def _stalled(self, t: int) -> bool:
        win = self.settings.stall_window
        if win is None or t * self.spec.b < self.settings.stall_min_epochs * self.n:
            return False
        cut = t / win
        old = [h[1] for h in self.hist if h[0] <= cut]
        recent = [h[1] for h in self.hist if h[0] > cut]
        return bool(old) and len(recent) >= 3 and min(recent) >= min(old)


def run_solver(problem, spec: RunSpec, observer: _Observer, max_iter: int):
    """Run ``spec`` from scratch on a fresh backend for at most ``max_iter`` iterations, BLAS on
    one thread; ``observer.due`` is the solver's ``eval_at``, ``observer.callback`` its callback."""
    from ..backends import make_backend          # noqa: PLC0415
    from ..solvers.pegasos import pegasos        # noqa: PLC0415
    from ..solvers.sdca import sdca              # noqa: PLC0415
    from .runner import _single_thread_blas      # noqa: PLC0415
    with _single_thread_blas():
        backend = make_backend(spec.backend, problem.X, problem.y)
        observer.attach(backend)
        if spec.method == "pegasos":
            return pegasos(backend, lam=spec.lam, k=spec.b, max_iter=max_iter,
                           sampling=spec.sampling, seed=spec.seed, projection=spec.projection,
                           averaging=observer.iterate.averaging, schedule=spec.schedule,
                           eta0=spec.eta0, norma_p=spec.norma_p, bias="none",
                           eval_at=observer.due, callback=observer.callback)
        return sdca(backend, lam=spec.lam, b=spec.b, max_iter=max_iter,
                    variant=spec.method[len("sdca-"):], theta=spec.theta, sigma2=spec.sigma2,
                    tol=0.0, sampling=spec.sampling, seed=spec.seed, eval_at=observer.due,
                    callback=observer.callback)


def find_crossing(problem, spec: RunSpec, *, p_star: float, eps: float, cap: int,
                  settings: SearchSettings | None = None,
                  max_seconds: float | None = None) -> dict:
    """First iteration ``T`` with ``P(w_T) - P* <= eps`` (probe pass, then replay if needed).

    Parameters
    ----------
    problem : Problem
    spec : RunSpec
    p_star, eps : float
        The certified optimum and the target suboptimality (absolute).
    cap : int
        Iteration cap; not reaching ``eps`` by then gives ``T = None``.
    settings : SearchSettings, optional
    max_seconds : float, optional
        Wall-clock cap of the cell (evaluations excluded).

    Returns
    -------
    dict
        ``status`` (``reached``, ``not_reached``, ``diverged``, ``stalled`` or ``time_cap``),
        ``T`` and ``T_lower`` (the evaluation before; None unless reached), ``seconds``,
        ``iterations_run``, ``final_subopt``, ``best_subopt``, ``evaluations``, ``replay``,
        ``replay_consistent``, ``trace`` (``[t, P - P*]`` of the probe pass), ``cell_seconds``.
    """
    settings = settings or SearchSettings()
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    if cap < 1:
        raise ValueError(f"the iteration cap must be >= 1, got {cap}")
    t0 = time.perf_counter()
    obs = _Observer(plan=_ProbePlan(settings, eps), spec=spec, n=problem.n, cap=cap,
                    settings=settings, p_star=p_star, eps=eps, max_seconds=max_seconds)
    run_solver(problem, spec, obs, cap)
    if obs.status is None:      # the solver stopped without a decision (cannot happen: t == cap)
        obs.status = "not_reached"
    result = {"replay": False, "replay_consistent": None}
    final, evaluations = obs, len(obs.hist)
    if obs.status == "bracket":
        lo, hi = obs.bracket
        rep = _Observer(plan=_DensePlan(lo, hi, settings.rel_step), spec=spec, n=problem.n,
                        cap=hi, settings=settings, p_star=p_star, eps=eps, replay=True)
        run_solver(problem, spec, rep, hi)
        evaluations += len(rep.hist)
        result["replay"] = True
        P_lo = next((h[2] for h in obs.hist if h[0] == lo), None)       # None when lo < 1
        P_rep = rep.hist[0][2] if rep.hist and rep.hist[0][0] == lo else None
        result["replay_consistent"] = lo < 1 or (P_lo is not None and P_rep is not None and
                                                 abs(P_lo - P_rep) <= 1e-9 * max(1.0, abs(P_lo)))
        if rep.status == "reached":
            if rep.T == lo and lo >= 1:          # replay disagrees with the probe pass
                rep.T_lower = None
            final = rep
        else:                                    # inconsistent replay: keep the probe crossing
            obs.T, obs.T_lower, obs.status = hi, lo, "reached"
    status = "reached" if final.status in ("reached", "bracket") else final.status
    T = final.T if status == "reached" else None
    seconds = None if T is None else next((h[3] for h in final.hist if h[0] == T), None)
    fs = [h[1] for h in obs.hist if math.isfinite(h[1])]
    result.update({
        "status": status, "T": T, "T_lower": final.T_lower if T is not None else None,
        "seconds": seconds, "iterations_run": int(obs.last_t),
        "final_subopt": obs.hist[-1][1] if obs.hist else None,
        "best_subopt": min(fs) if fs else None, "evaluations": evaluations,
        "trace": [[int(h[0]), h[1]] for h in obs.hist], "cell_seconds": time.perf_counter() - t0})
    return result


def trace_run(problem, spec: RunSpec, *, points, max_iter: int, p_star: float = 0.0,
              extra_eval=None, every: bool = False) -> list:
    """Run ``spec`` for ``max_iter`` iterations, evaluating at ``points`` (after every iteration
    when ``every``): ``(t, P - p_star, P, train_seconds, extras)`` per evaluation, where
    ``extras = extra_eval(w)`` (e.g. the test loss) or None."""
    plan = _EveryPlan() if every else _FixedPlan([p for p in points if p <= max_iter])
    obs = _Observer(plan=plan, spec=spec, n=problem.n, cap=max_iter,
                    settings=SearchSettings(), p_star=p_star, eps=None, extra_eval=extra_eval)
    run_solver(problem, spec, obs, max_iter)
    return obs.hist
