r"""The experiments of the Pegasos paper (Shalev-Shwartz, Singer & Srebro, ICML 2007, Sec. 5).

:func:`pegasos_k_study` (Figure 3: the objective against the mini-batch size ``k``, with ``T``
or ``kT`` fixed) and :func:`schedules_study` (Figure 2: Pegasos against NORMA,
``eta_t = p/(lam sqrt t)``, and against fixed step sizes).  Pegasos runs as in the paper's
Fig. 1, with projection and the last iterate; NORMA and the fixed steps run without projection.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..backends import make_backend, resolve_backend_name
from ..solvers.pegasos import pegasos
from .plots import plot_pegasos_k, plot_schedules, plots_wanted
from .problem import fingerprint
from .report import fmt_num, write_outputs
from .runner import run_cells
from .scaling import (StudyResult, _check_jobs, _check_positive, _unique_ints,
                      certified_optimum, check_batch_sizes, check_seeds, ensure_problem, machine,
                      spectral_sigma2, versions)
from .search import RunSpec, trace_run
from .store import _utc_now, cell_key, locked_study

__all__ = ["pegasos_k_study", "schedules_study", "norma_p"]

PAPER_T_VALUES = (1250, 31250)
PAPER_KT_VALUES = (10_000, 100_000, 1_000_000)
PAPER_ETAS = (0.001, 0.01, 0.1, 1.0, 10.0)


def norma_p(T: int) -> float:
    """NORMA's optimal ``p = 0.5 (2 + 0.5 T^{-1/2})^{1/2}`` for ``T`` iterations (Pegasos paper, Sec. 5)."""
    return 0.5 * math.sqrt(2.0 + 0.5 / math.sqrt(T))


def _median(vals):
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return float(np.median(vals)) if vals else None


def _common_setup(X, y, *, lam, seeds, backend, out_dir, normalize, name, pstar_gap, jobs):
    lam = _check_positive("lam", lam)
    pstar_gap = _check_positive("pstar_gap", pstar_gap)
    seeds = check_seeds(seeds)
    _check_jobs(jobs)
    if out_dir is None:
        raise ValueError("out_dir is required: the study writes its cells and results there")
    backend = resolve_backend_name(backend)
    problem = ensure_problem(X, y, normalize=normalize, name=name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sig = spectral_sigma2(problem, out)
    opt = certified_optimum(problem, lam, out, gap_tol=pstar_gap, sigma2=sig["sigma2"],
                            backend=backend)
    return lam, seeds, backend, problem, out, sig, opt


def _base_metadata(kind, figure, problem, lam, opt, sig, seeds, backend, command, started,
                   started_at, counts, jobs):
    return {
        "study": kind, "reproduces": f"Shalev-Shwartz, Singer & Srebro (ICML 2007), Figure {figure}",
        "dataset": problem.describe(),
        "normalization": ("rows scaled to unit L2 norm" if problem.normalized
                          else f"rows used as given (max row norm {problem.max_row_norm:.4g})"),
        "objective": "P(w) = lam/2 ||w||^2 + (1/n) sum_i max(0, 1 - y_i <w, x_i>), no bias",
        "lam": lam, "optimum": opt, "p_star": opt["p_star"], "sigma2": sig["sigma2"],
        "seeds": seeds, "backend": backend, "versions": versions(), "machine": machine(),
        "command": command or f"python: gpusvm.study.{kind.replace('-', '_')}_study(...)",
        "started": started_at, "finished": _utc_now(), "seconds": time.perf_counter() - started,
        "cells_total": counts["total"], "cells_computed": counts["computed"],
        "cells_reused": counts["reused"], "jobs": jobs}


def _compute_k_cell(problem, task: dict) -> dict:
    spec = RunSpec(**task["spec"])
    T = task["T"]
    be = make_backend(spec.backend, problem.X, problem.y)
    t0 = time.perf_counter()
    res = pegasos(be, lam=spec.lam, k=spec.b, max_iter=T, sampling=spec.sampling, seed=spec.seed,
                  projection=spec.projection, averaging="none", bias="none", eval_every=T)
    seconds = time.perf_counter() - t0
    obj = float(res.extra["objective"])
    return {"kind": "pegasos-k", "setting": task["setting"], "value": task["value"],
            "k": spec.b, "T": T, "seed": spec.seed,
            "objective": obj if math.isfinite(obj) else None,
            "subopt": (obj - task["p_star"]) if math.isfinite(obj) else None,
            "seconds": seconds, "cell_seconds": seconds}


@locked_study
def pegasos_k_study(X, y=None, *, lam: float, batch_sizes=None, T_values=PAPER_T_VALUES,
                    kT_values=PAPER_KT_VALUES, seeds=3, backend: str = "numpy", out_dir,
                    normalize: bool = True, name: str | None = None, pstar_gap: float = 1e-8,
                    jobs: int = 1, plots: bool | None = None, progress: bool = True, on_cell=None,
                    command: str | None = None) -> StudyResult:
    """Pegasos paper, Figure 3: the objective reached against ``k``, with ``T`` or ``kT`` fixed.

    Parameters
    ----------
    X : {sparse matrix, array-like} or Problem
    y : array-like, optional
        Training data and labels, as in :func:`gpusvm.study.scaling_study`.
    lam : float
        Regularisation (the paper used ``2e-4`` on Astro-Physics).
    batch_sizes : iterable of int, optional
        Values of ``k``; default ``1, 2, 4, ..., 1024`` (at most ``n``).
    T_values : iterable of int, default=(1250, 31250)
        Fixed ``T`` of the left panel (the paper's values).
    kT_values : iterable of int, default=(10**4, 10**5, 10**6)
        Fixed ``kT`` of the right panel; ``T = floor(kT / k)`` for each ``k <= kT``.
    seeds : int or iterable of int, default=3
    pstar_gap : float, default=1e-8
        Certificate of ``P*`` (drawn as a reference line).
    backend, out_dir, normalize, name, jobs, plots, progress, on_cell, command
        As in :func:`gpusvm.study.scaling_study`.

    Returns
    -------
    StudyResult
        ``summary`` rows: ``setting`` (``"T"`` or ``"kT"``), ``value``, ``k``, ``T``,
        ``objective_median``/``_min``/``_max``, ``subopt_median``, ``seconds_median``.

    References
    ----------
    S. Shalev-Shwartz, Y. Singer, N. Srebro. Pegasos. ICML 2007, Sec. 5 and Fig. 3.
    """
    started = time.perf_counter()
    started_at = _utc_now()
    plots = plots_wanted(plots)
    lam, seeds, backend, problem, out, sig, opt = _common_setup(
        X, y, lam=lam, seeds=seeds, backend=backend, out_dir=out_dir, normalize=normalize,
        name=name, pstar_gap=pstar_gap, jobs=jobs)
    n = problem.n
    ks = check_batch_sizes([b for b in (1 << j for j in range(11)) if b <= n]
                           if batch_sizes is None else batch_sizes, n)
    T_values = _unique_ints(T_values, 1, "T_values must hold positive integers")
    kT_values = _unique_ints(kT_values, 1, "kT_values must hold positive integers")
    if not T_values and not kT_values:
        raise ValueError("T_values and kT_values are both empty; give at least one")
    tasks = []
    for setting, values in (("T", T_values), ("kT", kT_values)):
        for v in values:
            for k in ks:
                T = v if setting == "T" else v // k
                if T < 1:
                    continue
                for seed in seeds:
                    spec = RunSpec(method="pegasos", b=k, seed=seed, lam=lam, backend=backend,
                                   pegasos_output="last", projection=True,
                                   sampling="with_replacement")
                    params = {"kind": "pegasos-k", "data": problem.fingerprint,
                              "spec": spec.__dict__, "T": T, "optimum": opt["key"]}
                    tasks.append({"key": cell_key(f"pegasos-k-{setting}{v}-k{k}-s{seed}", params),
                                  "params": params, "spec": dict(spec.__dict__), "T": T,
                                  "setting": setting, "value": v, "p_star": opt["p_star"],
                                  "label": f"{setting}={v} k={k} seed={seed}"})
    cells, counts = run_cells(problem, tasks, _compute_k_cell, out_dir=out, jobs=jobs,
                              progress=progress, on_cell=on_cell,
                              desc=f"pegasos-k {problem.name}")
    groups: dict = {}                   # cells come in the order of the tasks
    for c in cells:
        groups.setdefault((c["setting"], c["value"], c["k"]), []).append(c)
    summary = []
    for (setting, v, k), group in groups.items():
        objs = [c["objective"] for c in group]
        fin = [o for o in objs if o is not None]
        summary.append({"setting": setting, "value": v, "k": k, "T": group[0]["T"],
                        "seeds": len(group), "objective_median": _median(objs),
                        "objective_min": min(fin) if fin else None,
                        "objective_max": max(fin) if fin else None,
                        "subopt_median": _median([c["subopt"] for c in group]),
                        "seconds_median": _median([c["seconds"] for c in group])})
    metadata = _base_metadata("pegasos-k", 3, problem, lam, opt, sig, seeds, backend, command,
                              started, started_at, counts, jobs)
    metadata.update({"batch_sizes": ks, "T_values": T_values, "kT_values": kT_values, "pegasos": {
        "algorithm": "Pegasos Fig. 1: w_1 = 0, eta_t = 1/(lam t), projection onto the ball of "
                     "radius 1/sqrt(lam), A_t = k examples drawn i.i.d. (with replacement)",
        "iterate": "last iterate w_{T+1}"}})
    return StudyResult(out, cells, summary, metadata, counts["computed"], counts["reused"],
                       _write_k_outputs(out, metadata, cells, summary, plots))


def _write_k_outputs(out, metadata, cells, summary, plots):
    name = metadata["dataset"]["name"]
    cols = ["dataset", "setting", "value", "k", "T", "seed", "objective", "subopt", "seconds",
            "key"]
    scols = ["dataset", "setting", "value", "k", "T", "seeds", "objective_median", "objective_min",
             "objective_max", "subopt_median", "seconds_median"]
    ds = metadata["dataset"]
    lines = [f"# Pegasos: the effect of k ({name})", "",
             f"Reproduces {metadata['reproduces']}: the objective P(w_{{T+1}}) reached by Pegasos "
             "against the mini-batch size k, with T fixed (left) and with kT fixed (right).", "",
             f"- data: `{ds['source'] or name}`: n = {ds['n']}, d = {ds['d']}; "
             f"{metadata['normalization']}",
             f"- lam = {metadata['lam']:g}; P* = {metadata['p_star']:.8f} (gap "
             f"{metadata['optimum']['gap']:.1e})",
             f"- Pegasos: {metadata['pegasos']['algorithm']}; {metadata['pegasos']['iterate']}",
             f"- seeds: {', '.join(map(str, metadata['seeds']))} (median shown)",
             f"- command: `{metadata['command']}`", ""]
    by = {(r["setting"], r["value"], r["k"]): r for r in summary}
    for setting, values in (("T", metadata["T_values"]), ("kT", metadata["kT_values"])):
        if not values:
            continue
        lines += [f"## {setting} fixed: median objective", "",
                  "| k | " + " | ".join(f"{setting}={v}" for v in values) + " |",
                  "|---:|" + "---:|" * len(values)]
        for k in metadata["batch_sizes"]:
            rs = (by.get((setting, v, k)) for v in values)
            lines.append(f"| {k} | " + " | ".join(
                "-" if r is None else "NA" if r["objective_median"] is None
                else f"{r['objective_median']:.5f}" for r in rs) + " |")
        lines.append("")
    return write_outputs(out, metadata, cells, summary, [
        ("results.csv", cols, [{**c, "dataset": name} for c in cells]),
        ("summary.csv", scols, [{**r, "dataset": name} for r in summary])],
        [(plot_pegasos_k, out / "pegasos_k.png")] if plots else [], lines)


def _log_points(T_max: int, per_decade: int = 4, start: int = 10) -> list[int]:
    pts = set()
    e = math.log10(start)
    while 10 ** e <= T_max * (1 + 1e-12):
        pts.add(int(round(10 ** e)))
        e += 1.0 / per_decade
    pts.add(int(T_max))
    return sorted(p for p in pts if 1 <= p <= T_max)


def _test_loss_fn(X_test, y_test):
    def extra(w):
        margins = y_test * (X_test @ np.asarray(w, dtype=np.float64))
        return {"test_loss": float(np.mean(np.maximum(0.0, 1.0 - margins))),
                "test_error": float(np.mean(margins <= 0))}
    return extra


_TEST: dict = {}


def _compute_schedule_cell(problem, task: dict) -> dict:
    spec = RunSpec(**task["spec"])
    if task["params"]["test"] is not None and _TEST.get("data") is None:
        raise RuntimeError("the test data did not reach this worker process; run the "
                           "schedules study with jobs=1")
    extra = _test_loss_fn(*_TEST["data"]) if task["params"]["test"] is not None else None
    t0 = time.perf_counter()
    hist = trace_run(problem, spec, points=task["points"], max_iter=task["T_max"],
                     p_star=task["p_star"], extra_eval=extra)
    trace = [{"T": int(t), "objective": P if math.isfinite(P) else None,
              "subopt": f if math.isfinite(f) else None, "train_seconds": train, **(extras or {})}
             for t, f, P, train, extras in hist]
    return {"kind": "schedules", "label": task["label"], "group": task["group"],
            "schedule": spec.schedule, "eta0": spec.eta0, "norma_p": spec.norma_p,
            "projection": spec.projection, "seed": spec.seed, "trace": trace,
            "cell_seconds": time.perf_counter() - t0}


@locked_study
def schedules_study(X, y=None, *, lam: float, T_max: int = 1_000_000, etas=PAPER_ETAS,
                    p: float | None = None, seeds=1, X_test=None, y_test=None,
                    backend: str = "numpy", out_dir, normalize: bool = True,
                    name: str | None = None, pstar_gap: float = 1e-8, jobs: int = 1,
                    plots: bool | None = None, progress: bool = True, on_cell=None,
                    command: str | None = None) -> StudyResult:
    """Pegasos paper, Figure 2: Pegasos against NORMA and against fixed step sizes.

    Parameters
    ----------
    X : {sparse matrix, array-like} or Problem
    y : array-like, optional
        Training data and labels, as in :func:`pegasos_k_study`.
    lam : float
        Regularisation (the paper: ``2e-4`` on Astro-Physics).
    T_max : int, default=10**6
        Iterations of every run (``k = 1``); the objective is recorded at four log-spaced
        points per decade from 10 to ``T_max``.
    etas : iterable of float, default=(0.001, 0.01, 0.1, 1, 10)
        Fixed step sizes (each needs ``eta lam < 1``).
    p : float, optional
        NORMA's ``p``; default the paper's optimal :func:`norma_p` of ``T_max``.
    seeds : int or iterable of int, default=1
    X_test, y_test : {sparse matrix, array-like}, optional
        Test data (same features and classes) for the test hinge loss of the left panel;
        its rows are normalised like the training rows.
    backend, out_dir, normalize, name, pstar_gap, jobs, plots, progress, on_cell, command
        As in :func:`pegasos_k_study`.

    Returns
    -------
    StudyResult
        ``summary`` holds one trace per run label (medians over seeds): ``label``,
        ``group``, ``T``, ``objective``, ``test_loss``.

    References
    ----------
    S. Shalev-Shwartz, Y. Singer, N. Srebro. Pegasos. ICML 2007, Sec. 5 and Fig. 2.
    """
    started = time.perf_counter()
    started_at = _utc_now()
    if isinstance(T_max, bool) or not float(T_max).is_integer() or int(T_max) < 10:
        raise ValueError(f"T_max must be an integer >= 10, got {T_max!r}")
    T_max = int(T_max)
    lam_checked = _check_positive("lam", lam)
    etas = [float(_check_positive("etas", e)) for e in etas]
    for e in etas:
        if e * lam_checked >= 1.0:
            raise ValueError(f"a fixed step eta={e:g} needs eta * lam < 1 (lam={lam_checked:g})")
    p = norma_p(T_max) if p is None else float(_check_positive("p", p))
    plots = plots_wanted(plots)
    lam, seeds, backend, problem, out, sig, opt = _common_setup(
        X, y, lam=lam, seeds=seeds, backend=backend, out_dir=out_dir, normalize=normalize,
        name=name, pstar_gap=pstar_gap, jobs=jobs)
    test = _prepare_test(problem, X_test, y_test)
    _TEST["data"] = test
    points = _log_points(T_max)
    runs = [("pegasos", "Pegasos", dict(schedule="pegasos", projection=True)),
            ("norma", f"NORMA (p={p:.4f})", dict(schedule="norma", projection=False, norma_p=p))]
    runs += [("constant", f"fixed eta={e:g}", dict(schedule="constant", projection=False, eta0=e))
             for e in etas]
    tasks = []
    for group, label, opts in runs:
        for seed in seeds:
            spec = RunSpec(method="pegasos", b=1, seed=seed, lam=lam, backend=backend,
                           pegasos_output="last", sampling="with_replacement", **opts)
            params = {"kind": "schedules", "data": problem.fingerprint, "spec": spec.__dict__,
                      "T_max": T_max, "points": points, "optimum": opt["key"],
                      "test": None if test is None else fingerprint(test[0], test[1], False)}
            slug = f"{group}-{opts.get('eta0', '')}".rstrip("-").replace(".", "p")
            tasks.append({"key": cell_key(f"schedules-{slug}-s{seed}", params), "params": params,
                          "spec": dict(spec.__dict__), "T_max": T_max, "points": points,
                          "p_star": opt["p_star"], "label": label, "group": group})
    try:
        cells, counts = run_cells(problem, tasks, _compute_schedule_cell, out_dir=out, jobs=jobs,
                                  progress=progress, on_cell=on_cell,
                                  desc=f"schedules {problem.name}")
    finally:
        _TEST.pop("data", None)
    summary = []
    for group, label, _ in runs:
        by_t = [{r["T"]: r for r in c["trace"]} for c in cells if c["label"] == label]
        Ts = sorted({t for d in by_t for t in d})
        rows = [[d[t] for d in by_t if t in d] for t in Ts]
        summary.append({"label": label, "group": group, "T": Ts,
                        "objective": [_median([r["objective"] for r in rs]) for rs in rows],
                        "test_loss": None if test is None else
                        [_median([r.get("test_loss") for r in rs]) for rs in rows]})
    metadata = _base_metadata("schedules", 2, problem, lam, opt, sig, seeds, backend, command,
                              started, started_at, counts, jobs)
    metadata.update({
        "T_max": T_max, "points": points, "etas": etas, "norma_p": p,
        "test": None if test is None else {"n": int(test[0].shape[0])},
        "runs": {"pegasos": "Fig. 1: eta_t = 1/(lam t), projection, k = 1, last iterate",
                 "norma": "eta_t = p/(lam sqrt(t)), no projection, k = 1, last iterate",
                 "constant": "eta_t = eta fixed (Zhang 2004), no projection, k = 1, last iterate",
                 "sampling": "i.i.d. (with replacement)"}})
    return StudyResult(out, cells, summary, metadata, counts["computed"], counts["reused"],
                       _write_schedule_outputs(out, metadata, cells, summary, plots))


def _prepare_test(problem, X_test, y_test):
    if X_test is None and y_test is None:
        return None
    if X_test is None or y_test is None:
        raise ValueError("give both X_test and y_test, or neither")
    from ..datasets import normalize_rows  # noqa: PLC0415
    Xt = sp.csr_matrix(X_test, dtype=np.float64)
    if Xt.shape[1] != problem.d:
        raise ValueError(f"X_test has {Xt.shape[1]} features but the training data has "
                         f"{problem.d}; load it with n_features={problem.d}")
    if problem.normalized:
        Xt = normalize_rows(Xt)
    yt = np.asarray(y_test)
    classes = list(problem.classes)
    unknown = set(np.unique(yt).tolist()) - set(classes)
    if unknown:
        raise ValueError(f"y_test has labels {sorted(unknown)!r} that are not the training "
                         f"classes {classes!r}")
    return Xt, np.where(yt == classes[1], 1.0, -1.0)


def _write_schedule_outputs(out, metadata, cells, summary, plots):
    name = metadata["dataset"]["name"]
    rows = [{"dataset": name, "label": c["label"], "group": c["group"], "seed": c["seed"], **r,
             "key": c["key"]} for c in cells for r in c["trace"]]
    cols = ["dataset", "label", "group", "seed", "T", "objective", "subopt", "test_loss",
            "test_error", "train_seconds", "key"]
    ds = metadata["dataset"]
    show = [t for t in metadata["points"] if math.log10(t).is_integer() or t == metadata["T_max"]]
    lines = [f"# Pegasos against NORMA and fixed step sizes ({name})", "",
             f"Reproduces {metadata['reproduces']}: the objective of the last iterate against "
             "the number of iterations T (k = 1).", "",
             f"- data: `{ds['source'] or name}`: n = {ds['n']}, d = {ds['d']}; "
             f"{metadata['normalization']}",
             f"- lam = {metadata['lam']:g}; P* = {metadata['p_star']:.8f}",
             f"- runs: Pegasos ({metadata['runs']['pegasos']}); "
             f"NORMA ({metadata['runs']['norma']}, "
             f"p = {metadata['norma_p']:.4f}); fixed eta ({metadata['runs']['constant']}); "
             f"sampling {metadata['runs']['sampling']}",
             f"- seeds: {', '.join(map(str, metadata['seeds']))} (median shown)",
             f"- command: `{metadata['command']}`"]
    tables = [("Objective P(w_T)", "objective")]
    if metadata["test"] is not None:
        tables.append(("Test hinge loss", "test_loss"))
    for title, key in tables:
        lines += ["", f"## {title} (median over seeds)", "",
                  "| run | " + " | ".join(f"T={fmt_num(t)}" for t in show) + " |",
                  "|---|" + "---:|" * len(show)]
        for tr in summary:
            vals = [tr[key][tr["T"].index(t)] if t in tr["T"] else None for t in show]
            lines.append(f"| {tr['label']} | "
                         + " | ".join("NA" if v is None else f"{v:.4g}" for v in vals) + " |")
    lines.append("")
    return write_outputs(out, metadata, cells, summary, [("results.csv", cols, rows)],
                         [(plot_schedules, out / "schedules.png")] if plots else [], lines)
