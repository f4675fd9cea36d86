r"""Batch-size scaling study: Takáč, Bijral, Richtárik & Srebro (2013), Figure 1, on given data.

For every method, batch size ``b`` and seed: the first iteration ``T`` with ``P(w_T) - P* <= eps``
(:mod:`gpusvm.study.search`), the data accesses ``b T`` and the training time, beside the theory:
``sigma^2 = ||X||^2 / n``, ``beta_b`` (eq. 11), ``beta_b / b`` (the leading term of Theorems 1-2,
the right axis of Figure 1) and the predicted speedup ``b / beta_b``.  Shared helpers of the
other studies (validation, metadata, the cached ``sigma^2`` and ``P*`` cells) live here too.
"""

from __future__ import annotations

import math
import os
import platform
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import report
from .problem import Problem, prepare_problem
from .search import METHODS, PEGASOS_OUTPUTS, RunSpec, SearchSettings, find_crossing
from .store import CellStore, _utc_now, cell_key, iteration_cap, locked_study

__all__ = ["scaling_study", "StudyResult", "default_batch_sizes", "check_methods",
           "check_batch_sizes", "check_seeds"]

#: the largest batch size of the default list (the paper's Figure 1 goes to about 10^4)
DEFAULT_MAX_B = 16384


@dataclass
class StudyResult:
    """What a study returns.

    Attributes
    ----------
    out_dir : pathlib.Path
        Where the outputs are.
    cells, summary : list of dict
        One per cell, as stored in ``out_dir/cells``; the rows aggregated over seeds.
    metadata : dict
        Data set, parameters, ``P*`` certificate, versions, command line, timing.
    computed, reused : int
        Cells computed by this call, and cells found finished in ``out_dir/cells``.
    files : list of pathlib.Path
        Output files written.
    """

    out_dir: Path
    cells: list
    summary: list
    metadata: dict
    computed: int = 0
    reused: int = 0
    files: list = field(default_factory=list)


def default_batch_sizes(n: int, max_b: int = DEFAULT_MAX_B) -> list[int]:
    """``1, 2, 4, ...`` up to ``min(max_b, n)``."""
    return [1 << k for k in range(int(math.floor(math.log2(min(max_b, n)))) + 1)]


def check_methods(methods) -> list[str]:
    """Validate method names (a list, or a comma-separated string): unique, order kept."""
    if isinstance(methods, str):
        methods = [m for m in methods.split(",") if m.strip()]
    methods = [str(m).strip() for m in methods]
    if not methods:
        raise ValueError(f"methods is empty; choose from {', '.join(METHODS)}")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    return list(dict.fromkeys(methods))


def check_batch_sizes(batch_sizes, n: int) -> list[int]:
    """Validate batch sizes against ``n``: sorted, duplicates removed."""
    sizes = list(batch_sizes)
    if not sizes:
        raise ValueError("batch_sizes is empty; give at least one batch size, e.g. 1,2,4,...,1024")
    out = set()
    for b in sizes:
        if isinstance(b, bool) or not float(b).is_integer() or int(b) < 1:
            raise ValueError(f"batch sizes must be positive integers, got {b!r}")
        b = int(b)
        if b > n:
            raise ValueError(f"batch size {b} exceeds the number of examples n={n}; "
                             f"use batch sizes <= {n}")
        out.add(b)
    return sorted(out)


def check_seeds(seeds) -> list[int]:
    """``seeds`` as a list (unique, order kept): an int ``k`` means ``0..k-1``."""
    if isinstance(seeds, bool):
        raise ValueError(f"seeds must be a positive integer or a list of integers, got {seeds!r}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {seeds}")
        return list(range(seeds))
    out = _unique_ints(seeds, 0, "seeds must be non-negative integers")
    if not out:
        raise ValueError("seeds is empty; give a number of seeds or a list of seeds")
    return out


def _unique_ints(values, minimum: int, message: str) -> list[int]:
    """``values`` as distinct ints ``>= minimum``, order kept; else ``ValueError(message, got v)``."""
    out = []
    for v in values:
        if isinstance(v, bool) or not float(v).is_integer() or int(v) < minimum:
            raise ValueError(f"{message}, got {v!r}")
        if int(v) not in out:
            out.append(int(v))
    return out


def _check_positive(name, value, *, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def _check_jobs(jobs) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")


def versions() -> dict:
    """Versions of gpusvm, Python and the libraries a study depends on."""
    import numpy  # noqa: PLC0415
    import scipy  # noqa: PLC0415
    import sklearn  # noqa: PLC0415

    from .._version import __version__  # noqa: PLC0415
    out = {"gpusvm": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
           "scipy": scipy.__version__, "scikit-learn": sklearn.__version__}
    try:
        import matplotlib  # noqa: PLC0415
        out["matplotlib"] = matplotlib.__version__
    except ImportError:
        out["matplotlib"] = None
    return out


def machine() -> dict:
    """Platform and CPU count (timings depend on them)."""
    return {"platform": platform.platform(), "processor": platform.processor() or None,
            "cpus": os.cpu_count()}


def ensure_problem(X, y, *, normalize: bool, name: str | None) -> Problem:
    """``X`` if it is already a :class:`Problem`, else :func:`prepare_problem`."""
    if isinstance(X, Problem):
        if y is not None:
            raise ValueError("pass y=None when X is a Problem (it holds the labels)")
        return X
    if y is None:
        raise ValueError("y is required when X is a matrix")
    return prepare_problem(X, y, normalize=normalize, name=name)


def spectral_sigma2(problem: Problem, out_dir: Path) -> dict:
    """``sigma^2`` of the row-normalised data (cached in ``out_dir/cells``)."""
    from .. import spectral  # noqa: PLC0415
    store = CellStore(out_dir)
    key = cell_key("sigma2", {"data": problem.fingerprint})
    cell = store.load(key)
    if cell is None:
        t0 = time.perf_counter()
        s2 = float(spectral.sigma_squared(problem.X, normalize=True))
        cell = {"key": key, "sigma2": s2, "method": "gpusvm.spectral.sigma_squared (Lanczos, "
                "scipy svds) on the row-normalised data", "seconds": time.perf_counter() - t0}
        store.save(cell)
    return cell


def certified_optimum(problem: Problem, lam: float, out_dir: Path, *, gap_tol: float,
                      sigma2: float, backend: str) -> dict:
    """:func:`gpusvm.study.optimum.certify_optimum`, cached in ``out_dir/cells``."""
    from .optimum import certify_optimum  # noqa: PLC0415
    store = CellStore(out_dir)
    key = cell_key("optimum", {"data": problem.fingerprint, "lam": lam, "gap_tol": gap_tol,
                               "backend": backend})
    cell = store.load(key)
    if cell is not None and not certificate_holds(cell):
        warnings.warn(f"the P* cell {store.path(key)} does not agree with its own certificate "
                      "(p_star - lower_bound != gap); it is computed again", UserWarning,
                      stacklevel=2)
        cell = None
    if cell is None:
        cell = {"key": key, **certify_optimum(problem, lam, gap_tol=gap_tol, sigma2=sigma2,
                                              backend=backend)}
        store.save(cell)
    return cell


def certificate_holds(cell: dict) -> bool:
    """Whether a P* cell agrees with its certificate (``lower_bound <= p_star = lower_bound + gap``)."""
    values = [cell.get(k) for k in ("p_star", "lower_bound", "gap")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in values):
        return False
    p_star, lower, gap = values
    return lower <= p_star and abs((p_star - lower) - gap) <= 1e-12 * max(1.0, abs(p_star))


def _compute_scaling_cell(problem: Problem, task: dict) -> dict:
    spec = RunSpec(**task["spec"])
    res = find_crossing(problem, spec, p_star=task["p_star"], eps=task["eps"], cap=task["cap"],
                        settings=SearchSettings(**task["search"]),
                        max_seconds=task["max_seconds"])
    return {"kind": "scaling", "method": spec.method, "b": spec.b, "seed": spec.seed,
            "cap": task["cap"], "accesses": (spec.b * res["T"]) if res["T"] is not None else None,
            "failed": res["status"] in ("diverged", "stalled"), **res}


@locked_study
def scaling_study(X, y=None, *, lam: float, eps: float = 1e-3, batch_sizes=None,
                  methods=METHODS, seeds=3, backend: str = "numpy", out_dir,
                  max_epochs: float | None = 100.0, max_iter: int | None = None,
                  max_seconds: float | None = None, pegasos_output: str = "tail",
                  normalize: bool = True, name: str | None = None,
                  search: SearchSettings | None = None, pstar_gap: float = 1e-8,
                  jobs: int = 1, plots: bool | None = None, progress: bool = True, on_cell=None,
                  command: str | None = None) -> StudyResult:
    r"""Iterations to reach ``P(w) - P* <= eps`` against the batch size (Takáč et al. 2013, Fig. 1).

    Parameters
    ----------
    X : {sparse matrix, array-like} of shape (n, d), or Problem
    y : array-like of shape (n,), optional
        Training data and its two class labels (``y=None`` when ``X`` is a
        :class:`~gpusvm.study.problem.Problem`, e.g. from :func:`~gpusvm.study.load_problem`).
    lam : float
        Regularisation of ``P(w) = lam/2 ||w||^2 + (1/n) sum_i max(0, 1 - y_i <w, x_i>)``.
    eps : float, default=1e-3
        Target primal suboptimality (absolute, as in the paper).
    batch_sizes : iterable of int, optional
        Default ``1, 2, 4, ...`` up to ``min(16384, n)``.
    methods : iterable of str, default=all four
        Among ``"pegasos"``, ``"sdca-naive"``, ``"sdca-safe"``, ``"sdca-aggressive"``.
    seeds : int or iterable of int, default=3
        Number of seeds (``0..seeds-1``) or the seeds themselves.
    backend : str, default="numpy"
        Backend name (:func:`gpusvm.backends.make_backend`).  The ``T`` guarantee needs a
        deterministic backend; ``replay_consistent`` records it.
    out_dir : str or os.PathLike
        Output directory (created); finished cells go to ``out_dir/cells``.
    max_epochs : float or None, default=100
        Cap on the data accesses ``b T`` of a cell, in passes over the data.
    max_iter : int or None, default=None
        Cap on ``T``.  At least one cap is required; a cell that hits it is ``"not_reached"``.
    max_seconds : float, optional
        Wall-clock cap of a cell (status ``"time_cap"``; machine dependent).
    pegasos_output : {"tail", "last"}, default="tail"
        Pegasos iterate evaluated: the tail average of Theorem 1 or ``w_{T+1}``.
    normalize : bool, default=True
        Scale the rows to unit norm (the theory assumes ``max ||x_i|| <= 1``).
    name : str, optional
        Data set name in the outputs.
    search : SearchSettings, optional
        Crossing-search settings.
    pstar_gap : float, default=1e-8
        Duality gap to which ``P*`` is certified; must be ``<= eps / 100``.
    jobs : int, default=1
        Worker processes.
    plots : bool, optional
        Write the PNG plots (matplotlib, the ``plot`` extra); default: when matplotlib is
        installed. ``True`` without it raises an ImportError before any cell runs.
    progress : bool, default=True
        Show a tqdm bar over the cells.
    on_cell, command : callable, str, optional
        ``on_cell(cell)`` after each newly computed cell is saved; the command line to record.

    Returns
    -------
    StudyResult

    Notes
    -----
    Pegasos runs as Takáč et al.'s Algorithm 1 (no projection, ``A_t`` a random b-subset);
    aggressive SDCA uses ``theta = 0.5``.  A rerun with the same arguments and ``out_dir``
    skips the finished cells; any change of data or settings makes new cells.

    References
    ----------
    M. Takáč, A. Bijral, P. Richtárik, N. Srebro. Mini-Batch Primal and Dual Methods for SVMs.
    ICML 2013.
    """
    started = time.perf_counter()
    started_at = _utc_now()
    lam = _check_positive("lam", lam)
    eps = _check_positive("eps", eps)
    pstar_gap = _check_positive("pstar_gap", pstar_gap)
    methods = check_methods(methods)
    seeds = check_seeds(seeds)
    if pegasos_output not in PEGASOS_OUTPUTS:
        raise ValueError(f"pegasos_output must be one of {', '.join(PEGASOS_OUTPUTS)}, "
                         f"got {pegasos_output!r}")
    _check_positive("max_epochs", max_epochs, allow_none=True)
    _check_positive("max_seconds", max_seconds, allow_none=True)
    if max_iter is not None and (isinstance(max_iter, bool) or int(max_iter) != max_iter
                                 or max_iter < 1):
        raise ValueError(f"max_iter must be a positive integer or None, got {max_iter!r}")
    if max_epochs is None and max_iter is None:
        raise ValueError("give max_epochs or max_iter: every cell needs an iteration cap")
    _check_jobs(jobs)
    plots = report.plotting.plots_wanted(plots)
    if pstar_gap > eps / 100:
        raise ValueError(f"pstar_gap={pstar_gap:g} is too loose for eps={eps:g}: P* must be "
                         f"certified to eps/100 = {eps / 100:g} or better")
    from ..backends import resolve_backend_name  # noqa: PLC0415
    backend = resolve_backend_name(backend)
    if out_dir is None:
        raise ValueError("out_dir is required: the study writes its cells and results there")
    problem = ensure_problem(X, y, normalize=normalize, name=name)
    n = problem.n
    batch_sizes = check_batch_sizes(default_batch_sizes(n) if batch_sizes is None
                                    else batch_sizes, n)
    search = search or SearchSettings()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sig = spectral_sigma2(problem, out)
    sigma2 = sig["sigma2"]
    opt = certified_optimum(problem, lam, out, gap_tol=pstar_gap, sigma2=sigma2, backend=backend)
    if opt["gap"] > eps / 100:
        raise RuntimeError(f"could not certify P* to eps/100 = {eps / 100:g}: the best duality "
                           f"gap is {opt['gap']:.3g}; see {out / 'cells'}")
    p_star = opt["p_star"]
    tasks = []
    for b in batch_sizes:
        for method in methods:
            for seed in seeds:
                spec = RunSpec(method=method, b=b, seed=seed, lam=lam, backend=backend,
                               pegasos_output=pegasos_output if method == "pegasos" else "tail",
                               sigma2=sigma2 if method in ("sdca-safe", "sdca-aggressive")
                               else None)
                cap = iteration_cap(n, b, max_epochs, max_iter)
                params = {"kind": "scaling", "data": problem.fingerprint, "lam": lam, "eps": eps,
                          "optimum": opt["key"], "spec": spec.__dict__, "cap": cap,
                          "max_seconds": max_seconds, "search": search.as_dict()}
                tasks.append({"key": cell_key(f"{method}-b{b}-s{seed}", params), "params": params,
                              "spec": dict(spec.__dict__), "cap": cap, "p_star": p_star,
                              "eps": eps, "search": search.as_dict(), "max_seconds": max_seconds,
                              "label": f"{method} b={b} seed={seed}"})
    from .runner import run_cells  # noqa: PLC0415
    cells, counts = run_cells(problem, tasks, _compute_scaling_cell, out_dir=out, jobs=jobs,
                              progress=progress, on_cell=on_cell, desc=f"study {problem.name}")
    summary = report.summarize_scaling(cells, methods=methods, batch_sizes=batch_sizes, n=n,
                                       sigma2=sigma2)
    metadata = {
        "study": "scaling", "reproduces": "Takáč, Bijral, Richtárik & Srebro (ICML 2013), Figure 1",
        "dataset": problem.describe(),
        "normalization": ("rows scaled to unit L2 norm (the theory assumes max ||x_i|| <= 1)"
                          if problem.normalized else
                          f"rows used as given (max row norm {problem.max_row_norm:.4g}); the "
                          "theory columns use sigma^2 of the row-normalised data"),
        "objective": "P(w) = lam/2 ||w||^2 + (1/n) sum_i max(0, 1 - y_i <w, x_i>), no bias",
        "lam": lam, "eps": eps, "optimum": opt, "p_star": p_star, "sigma2": sigma2,
        "one_over_sigma2": 1.0 / sigma2 if sigma2 > 0 else None, "sigma2_method": sig["method"],
        "batch_sizes": batch_sizes, "methods": methods, "seeds": seeds,
        "caps": {"max_epochs": max_epochs, "max_iter": max_iter, "max_seconds": max_seconds},
        "search": {**search.as_dict(), "guarantee": (
            f"T is a verified crossing (P(w_T) - P* <= eps); from the last evaluation above "
            f"{search.dense_below:g} eps up to T the evaluations are at most {search.rel_step:.1%} "
            f"of t apart and all above eps, so T is within {search.rel_step:.1%} of the first "
            f"crossing unless P - P* dips below eps for less than {search.rel_step:.1%} of the "
            f"iterations, or falls from above {search.dense_below:g} eps to below eps and back "
            "between two probe evaluations (see gpusvm.study.search)")},
        "pegasos": {"algorithm": "Takáč et al. 2013, Algorithm 1: w_1 = 0, eta_t = 1/(lam t), "
                                 "no projection, A_t uniform b-subset (Rand(b))",
                    "iterate": ("tail average of the last half of the iterates (Theorem 1; the "
                                "last 50-52.5% with the snapshot grid)" if pegasos_output == "tail"
                                else "last iterate w_{T+1}"),
                    "output": pegasos_output},
        "sdca": {"start": "alpha = 0", "safe_beta": "beta_b (eq. 11)",
                 "aggressive_theta": 0.5, "iterate": "w(alpha_T)",
                 "sampling": "A_t uniform b-subset (Rand(b))"},
        "backend": backend, "versions": versions(), "machine": machine(),
        "command": command or "python: gpusvm.study.scaling_study(...)",
        "started": started_at, "finished": _utc_now(), "seconds": time.perf_counter() - started,
        "cells_total": counts["total"], "cells_computed": counts["computed"],
        "cells_reused": counts["reused"], "jobs": jobs,
        "cells_seconds": sum(c.get("cell_seconds") or 0.0 for c in cells),
    }
    return StudyResult(out, cells, summary, metadata, counts["computed"], counts["reused"],
                       report.write_scaling_outputs(out, metadata, cells, summary, plots=plots))


def load_results(path) -> dict:
    """Read a ``results.json`` written by a study.

    Parameters
    ----------
    path : str or os.PathLike
        The file, or the study directory holding it.

    Returns
    -------
    dict
        With ``metadata``, ``summary`` and ``cells``.
    """
    import json  # noqa: PLC0415
    p = Path(path)
    return json.loads((p / "results.json" if p.is_dir() else p).read_text(encoding="utf-8"))

