"""The steps of ``benchmarks/gpu_session.sh``: the first GPU hour, measured, each step resumable.

Each step writes ``OUT/<step>.json`` (``{"step", "status": "pass"|"fail", "line", ...}``) and
its log; ``summary`` prints one line per step and exits 1 if any failed or is missing::

    python benchmarks/gpu_session.py --out gpu-results env
    python benchmarks/gpu_session.py --out gpu-results --emulated parity

Steps: ``env`` (driver, CUDA, NVRTC, CuPy and library versions, clocks), ``compile`` (the
first fit's compile in a fresh process with an empty cache, then again: the disk cache),
``tests`` (the ``gpu``-marked tests), ``parity`` (whole fits on imdb and news20 against the
numba backend, same seed and iterations: ``w``, ``P(w)``, SDCA's ``P``, ``D`` and gap; binary
and the general path: two outputs, weights, the squared hinge), ``sanitizer``
(compute-sanitizer memcheck, racecheck and synccheck on a short fit), ``iterations`` (seconds
per iteration against the performance model for the same ``k``), ``eps`` (time to
``P - P* <= 1e-3`` against LinearSVC on the CPU of the same machine, three repeats, split
into compile, upload, capture, replay and evaluations; ``P*`` shipped in
``benchmarks/gpu_session_pstar.json``; a case that does not reach ``eps`` in its epochs fails
unless the numba backend, run with the same seed, batches and epochs, does not reach it either
and ends at the same objective: the expected outcome, said so in the step's line, as for
Pegasos on the emulated slices, whose ``lam n = 0.03`` its ``O(1 / (lam T))`` rate cannot
bring within ``eps`` in 30 epochs, and on news20 at ``k = 4096``), ``profile`` (Nsight
Compute, clocks left alone, on three replayed iterations at ``k = 256`` of Pegasos and SDCA on
imdb and news20: each kernel's duration, memory and compute throughput, cache hit rates,
occupancy and cycles per issued instruction; CSV and JSON under ``--out``), ``while``
(``graph_while_probe.py``: whether a CUDA graph WHILE node, which makes a segment of any
length one graph launch, can be built here from Python; where it can, the backend's WHILE
segments, ``GPUSVM_GRAPH_WHILE=1``, against its chunked graphs: the same state, the graph
launches and the seconds per iteration both ways), ``scale`` (``bench_scale.py``: generated
sets of 10^7, 10^8 and 10^9 nonzeros, generated on the GPU, fitted by gpusvm there, by its
CPU backend, scikit-learn's LinearSVC and liblinear-multicore on every core, cells skipped
past a budget, no cell started after :data:`SCALE_DEADLINE` seconds; resumable: its cells
under ``OUT/scale/cells``), ``summary``.

``--emulated`` runs every step with the emulated runtime standing in for CuPy, on slices of
the data (its timings say nothing about a GPU; compute-sanitizer is replaced by the
emulator's stream-order check).  Data: ``$GPUSVM_DATA``, else ``.gpudata/`` in the checkout,
else ``../shared/data``.  Nothing is written outside ``--out`` (CuPy's and the emulator's
caches of the compile step included).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STEPS = ("env", "compile", "tests", "parity", "sanitizer", "iterations", "eps", "profile",
         "while", "scale")
LAM = 1e-4
EPS = 1e-3
PSTAR_FILE = Path(__file__).with_name("gpu_session_pstar.json")
#: rows of each data set on the emulator
EMULATED_ROWS = 300


def data_dir() -> Path:
    env = os.environ.get("GPUSVM_DATA")
    if env:
        return Path(env)
    staged = REPO / ".gpudata"
    return staged if staged.is_dir() else REPO.parent / "shared" / "data"


def backend_name(args) -> str:
    return "emulated" if args.emulated else "cupy"


def load(name: str, args, dtype=np.float64):
    os.environ.setdefault("GPUSVM_DATA", str(data_dir()))
    import bench_gpu  # noqa: PLC0415  (benchmarks/ is on the path when run as a script)
    bench_gpu.DATA = data_dir()
    X, y = bench_gpu.load(name)
    if args.emulated:               # rows of both classes (the files are sorted by label)
        pick = np.sort(np.random.default_rng(0).choice(X.shape[0], EMULATED_ROWS, replace=False))
        X, y = X[pick], y[pick]
    return X.astype(dtype), y.astype(np.float64)


def write(out: Path, step: str, status: bool, line: str, **fields) -> dict:
    rec = {"step": step, "status": "pass" if status else "fail", "line": line, **fields}
    (out / f"{step}.json").write_text(json.dumps(rec, indent=1, default=float))
    print(f"[{step}] {rec['status'].upper()}: {line}", flush=True)
    return rec


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


# ---------------------------------------------------------------------------- env
def step_env(args, out):
    import numba  # noqa: PLC0415
    import scipy  # noqa: PLC0415
    import sklearn  # noqa: PLC0415

    from gpusvm import _kernels  # noqa: PLC0415
    info = {"python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "numba": numba.__version__,
            "scikit-learn": sklearn.__version__, "kernels_sha256": _kernels.source_hash(),
            "pytest_xdist": _has("xdist")}
    if args.emulated:
        from gpusvm_emulator import _compiler_id, find_compiler  # noqa: PLC0415
        cxx = find_compiler()
        info.update(device="CPU kernel emulator (no GPU)", compiler=cxx and _compiler_id(cxx))
        ok = cxx is not None
    else:
        import cupy  # noqa: PLC0415
        rt = cupy.cuda.runtime
        props = rt.getDeviceProperties(0)
        dev = cupy.cuda.Device(0)
        info.update(device=props["name"].decode() if isinstance(props["name"], bytes)
                    else str(props["name"]), cupy=cupy.__version__,
                    driver=rt.driverGetVersion(), cuda_runtime=rt.runtimeGetVersion(),
                    nvrtc=".".join(map(str, cupy.cuda.nvrtc.getVersion())),
                    compute_capability=dev.compute_capability,
                    sms=dev.attributes["MultiProcessorCount"],
                    clock_khz=dev.attributes.get("ClockRate"),
                    memory_clock_khz=dev.attributes.get("MemoryClockRate"),
                    cupy_caches_module=_kernels.cupy_caches_module(cupy.__version__))
        smi = shutil.which("nvidia-smi")
        if smi:
            q = subprocess.run([smi, "--query-gpu=name,driver_version,clocks.sm,clocks.mem,"
                                "clocks.max.sm,clocks.max.mem,power.limit", "--format=csv"],
                               capture_output=True, text=True)
            info["nvidia_smi"] = q.stdout.strip()
        ok = True
    line = ", ".join(f"{k} {v}" for k, v in info.items() if k in (
        "device", "driver", "cuda_runtime", "nvrtc", "cupy", "compiler", "numba"))
    return write(out, "env", ok, line, **info)


def _has(module: str) -> bool:
    import importlib.util  # noqa: PLC0415
    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------------------- compile
#: the module's compile (load_module compiles, or loads CuPy's disk cache, before it returns),
#: timed apart from the imports
_COMPILE = ("import json, time, sys; sys.path.insert(0, {repo!r}); "
            "from gpusvm import _kernels; {pre}t = time.perf_counter(); "
            "_kernels.load_module({kind!r}); print(json.dumps(time.perf_counter() - t))")


def step_compile(args, out):
    kind = backend_name(args)
    env = dict(os.environ)
    cache = out / ("emulator_cache" if args.emulated else "cupy_cache")
    shutil.rmtree(cache, ignore_errors=True)
    env["GPUSVM_EMU_CACHE" if args.emulated else "CUPY_CACHE_DIR"] = str(cache)
    times = []
    for _ in range(2):                       # an empty cache, then the one the first filled
        pre = "" if args.emulated else "import cupy; cupy.zeros(1); "   # the CUDA context
        r = subprocess.run([sys.executable, "-c", _COMPILE.format(repo=str(REPO), kind=kind,
                                                                  pre=pre)],
                           capture_output=True, text=True, env=env)
        if r.returncode:
            return write(out, "compile", False, f"the module did not compile: {r.stderr[-400:]}")
        times.append(float(r.stdout.strip().splitlines()[-1]))
    cached = times[1] < 0.5 * times[0]
    return write(out, "compile", cached,
                 f"first fit's compile {times[0]:.1f} s in a fresh process, {times[1]:.2f} s in "
                 f"the next ({'cached on disk' if cached else 'NOT cached: compiled again'})",
                 cold_seconds=times[0], warm_seconds=times[1])


# ---------------------------------------------------------------------------- tests
def step_tests(args, out):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra"]
    if args.emulated:        # the stream model and the estimator end to end on the emulator
        cmd += ["tests/test_emulator_streams.py",
                "tests/test_device_backend.py::test_estimator_on_the_device_backend"]
    else:
        cmd += ["-m", "gpu and not slow", "tests"]
        if not _has("dask"):       # no gpu-marked test there; unimportable modules stop pytest
            cmd += [f"--ignore={p.relative_to(REPO)}" for p in sorted(REPO.glob("tests/test_dask*.py"))]
    env = dict(os.environ, GPUSVM_DATA=str(data_dir()))
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    (out / "tests.log").write_text(r.stdout + r.stderr)
    tail = [ln for ln in r.stdout.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    return write(out, "tests", r.returncode == 0, f"{tail[0]} ({time.perf_counter() - start:.0f} s)",
                 returncode=r.returncode)


# ---------------------------------------------------------------------------- parity
def _fit(name, X, Y, solver, weights, loss, k, iters):
    from gpusvm.backends import make_backend  # noqa: PLC0415
    from gpusvm.solvers.pegasos import pegasos  # noqa: PLC0415
    from gpusvm.solvers.sdca import sdca  # noqa: PLC0415
    be = make_backend(name, X, Y, sample_weight=weights)
    if solver == "pegasos":
        r = pegasos(be, lam=LAM, k=k, max_iter=iters, seed=1, eval_every=max(1, iters // 3),
                    loss=loss)
        return {"w": r.w, "P": r.extra["objective"]}
    r = sdca(be, lam=LAM, b=k, max_iter=iters, seed=1, tol=0.0, eval_every=max(1, iters // 3),
             loss=loss, variant="aggressive")
    return {"w": r.w, "P": r.extra["primal"], "D": r.extra["dual"], "gap": r.extra["gap"]}


def step_parity(args, out):
    rows, ok = [], True
    k = 16 if args.emulated else 1024
    for data in ("imdb", "news20"):
        X, y = load(data, args)
        n = X.shape[0]
        iters = 3 * math.ceil(n / k) if args.emulated else 20 * math.ceil(n / k)
        rng = np.random.default_rng(0)
        Y2 = np.stack([y, np.where(rng.random(n) < 0.3, -y, y)], axis=1)
        s = rng.uniform(0.5, 1.5, size=n)
        cases = [("pegasos", "binary", y, None, "hinge"), ("sdca", "binary", y, None, "hinge"),
                 ("pegasos", "2 outputs, weights", Y2, s, "hinge"),
                 ("sdca", "2 outputs, weights, squared hinge", Y2, s, "squared_hinge")]
        for solver, path, Y, weights, loss in cases:
            ref = _fit("numba", X, Y, solver, weights, loss, k, iters)
            dev = _fit(backend_name(args), X, Y, solver, weights, loss, k, iters)
            row = {"data": data, "solver": solver, "path": path, "k": k, "iterations": iters,
                   "w_rel": rel(dev["w"], ref["w"]),
                   "P_rel": rel(np.ravel(dev["P"]), np.ravel(ref["P"]))}
            good = row["w_rel"] <= (1e-5 if solver == "pegasos" else 1e-6) and row["P_rel"] <= 1e-8
            if solver == "sdca":
                row["D_rel"] = rel(np.ravel(dev["D"]), np.ravel(ref["D"]))
                row["gap_diff"] = float(np.max(np.abs(np.ravel(dev["gap"]) - np.ravel(ref["gap"]))))
                good = good and row["D_rel"] <= 1e-8 and row["gap_diff"] <= 1e-8
            row["pass"] = bool(good)
            ok = ok and good
            rows.append(row)
            print(json.dumps(row, default=float), flush=True)
    worst = max(rows, key=lambda r: r["w_rel"])
    return write(out, "parity", ok, f"{sum(r['pass'] for r in rows)}/{len(rows)} fits agree with "
                 f"the numba backend (worst w: {worst['w_rel']:.1e}, {worst['data']} "
                 f"{worst['solver']} {worst['path']})", rows=rows)


# ---------------------------------------------------------------------------- sanitizer
def short_fit(args):
    """A short fit of each path on the device (what compute-sanitizer watches)."""
    X, y = load("imdb", args)
    step = max(1, X.shape[0] // 2000)               # about 2000 rows of both classes
    X, y = X[::step], y[::step]
    rng = np.random.default_rng(0)
    Y2 = np.stack([y, -y], axis=1)
    s = rng.uniform(0.5, 1.5, size=X.shape[0])
    for solver in ("pegasos", "sdca"):
        _fit(backend_name(args), X, y, solver, None, "hinge", 64, 40)
        _fit(backend_name(args), X, Y2, solver, s, "squared_hinge", 64, 40)


def step_sanitizer(args, out):
    if args.emulated:
        from gpusvm_emulator import streams  # noqa: PLC0415
        streams.races.clear()
        with streams.using_mode("strict"):
            short_fit(args)
        ok = not streams.races
        return write(out, "sanitizer", ok, "emulated: stream-order check of a short fit "
                     f"({len(streams.races)} races); compute-sanitizer runs on a GPU only",
                     races=streams.races)
    tool = shutil.which("compute-sanitizer") or next(
        (str(p) for p in Path("/usr/local").glob("cuda*/bin/compute-sanitizer")), None)
    if tool is None:
        return write(out, "sanitizer", False, "compute-sanitizer not found (PATH, /usr/local/cuda*)")
    results, ok = {}, True
    for check in ("memcheck", "racecheck", "synccheck"):
        r = subprocess.run([tool, "--tool", check, "--error-exitcode", "9", sys.executable,
                            __file__, "--out", str(out), "shortfit"], cwd=REPO,
                           capture_output=True, text=True)
        (out / f"sanitizer_{check}.log").write_text(r.stdout + r.stderr)
        text = r.stdout + r.stderr
        summary = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln or
                   "RACECHECK SUMMARY" in ln]
        results[check] = summary[-1].strip(" =") if summary else f"exit {r.returncode}"
        passed = r.returncode == 0
        if check == "racecheck" and not passed:
            passed, note = racecheck_verdict(text)
            results[check] += note
        ok = ok and passed
    return write(out, "sanitizer", ok, "; ".join(f"{k}: {v}" for k, v in results.items()),
                 results=results)


def racecheck_verdict(text: str) -> tuple[bool, str]:
    """Whether racecheck's report clears gpusvm's kernels, and a note on what it flagged.

    racecheck exits non-zero on warnings too (possible hazards, such as a warp-synchronous
    scan); a report passes when it counts no error and no hazard names a kernel of ours
    (every one is named ``gpusvm_*``).
    """
    import re  # noqa: PLC0415
    m = re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
                  text)
    if m is None:
        return False, " (no racecheck summary in its log)"
    hazards = [ln.split(" at ", 1)[-1].strip() for ln in text.splitlines()
               if "Race reported" in ln]
    mine = sorted({h for h in hazards if "gpusvm_" in h})      # every kernel of ours is gpusvm_*
    others = sorted({re.split(r"[+(<]", h)[0] for h in hazards if "gpusvm_" not in h})
    ok = int(m.group(1)) == 0 and not mine
    return ok, (f" (warnings in gpusvm kernels: {', '.join(mine)})" if mine else "") + \
        (f" (warnings in library kernels only: {', '.join(others)})" if others else "")


# ---------------------------------------------------------------------------- iterations
def step_iterations(args, out):
    import bench_gpu  # noqa: PLC0415
    dev, note = bench_gpu.model_device("H100" if args.emulated else _device_name())
    rows = []
    ks = (16,) if args.emulated else (256, 4096)
    for data in ("imdb", "news20"):
        X, y = load(data, args, np.float32)
        for solver in bench_gpu.SOLVERS:
            for k in ks:
                r = bench_gpu.per_iteration(backend_name(args), X, y, solver, k,
                                            10 if args.emulated else 1000, LAM, dev,
                                            1 if args.emulated else 3)
                r["data"] = data
                r["ratio_to_model"] = r["seconds_per_iteration"] / r["modelled_seconds_per_iteration"]
                rows.append(r)
                print(json.dumps(r, default=float), flush=True)
    # on a GPU, more than 4x the model is a finding to explain before any figure is published
    ok = args.emulated or all(r["ratio_to_model"] <= 4.0 for r in rows)
    worst = max(rows, key=lambda r: r["ratio_to_model"])
    return write(out, "iterations", ok, f"{len(rows)} timings; worst {worst['ratio_to_model']:.2f}x "
                 f"the model ({worst['data']} {worst['solver']} k={worst['k']})"
                 + (" [emulated: timings say nothing about a GPU]" if args.emulated else ""),
                 rows=rows, model_note=note)


def _device_name() -> str:
    import cupy  # noqa: PLC0415
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


# ---------------------------------------------------------------------------- time to eps
def p_star(data: str, X, y, args) -> float:
    if not args.emulated:
        return float(json.loads(PSTAR_FILE.read_text())[data]["p_star"])
    from sklearn.svm import LinearSVC  # noqa: PLC0415   (a slice: computed here, in seconds)
    clf = LinearSVC(C=1.0 / (LAM * X.shape[0]), loss="hinge", fit_intercept=False, tol=1e-10,
                    max_iter=200000, dual=True).fit(X, y)
    w = clf.coef_.ravel()
    return float(0.5 * LAM * w @ w + np.mean(np.maximum(0.0, 1.0 - y * (X @ w))))


def liblinear_seconds(X, y) -> float:
    import warnings  # noqa: PLC0415

    from sklearn.svm import LinearSVC  # noqa: PLC0415
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LinearSVC(C=1.0 / (LAM * X.shape[0]), loss="hinge", fit_intercept=False).fit(X, y)
    return time.perf_counter() - start


def _solve(be, solver, k, target, max_iter):
    """``solver`` on ``be`` until ``P <= target`` (or ``max_iter``): (result, objective)."""
    from gpusvm.solvers.pegasos import pegasos  # noqa: PLC0415
    from gpusvm.solvers.sdca import sdca  # noqa: PLC0415
    if solver == "pegasos":
        r = pegasos(be, lam=LAM, k=k, max_iter=max_iter, seed=1, averaging="doubling",
                    target_objective=target)
        return r, float(r.extra["objective"])
    r = sdca(be, lam=LAM, b=k, max_iter=max_iter, seed=1, variant="aggressive", tol=0.0,
             callback=lambda t, obj, el: obj > target)
    return r, float(r.extra["primal"])


def timed_run(name, X, y, solver, k, target, max_epochs):
    """One run to ``P <= target``: its time split into upload, capture, replay, evaluations."""
    from gpusvm.backends import make_backend  # noqa: PLC0415
    t0 = time.perf_counter()
    be = make_backend(name, X, y)
    upload = time.perf_counter() - t0
    seg_name = "pegasos_segment_m" if solver == "pegasos" else "sdca_segment_m"
    segment, in_segments = getattr(be, seg_name), [0.0]

    def timed(*a):
        s = time.perf_counter()
        segment(*a)
        be.runtime.stream.synchronize()
        in_segments[0] += time.perf_counter() - s
    setattr(be, seg_name, timed)
    t1 = time.perf_counter()
    r, objective = _solve(be, solver, k, target, max_epochs * math.ceil(X.shape[0] / k))
    run = time.perf_counter() - t1
    capture = be.graph_stats["capture_seconds"]
    return {"upload": upload, "capture": capture, "replay": in_segments[0] - capture,
            "evaluations": run - in_segments[0], "total": upload + run,
            "iterations": r.n_iter, "evaluations_count": len(r.history), "objective": objective,
            "reached": bool(objective <= target)}


def _outcome(row) -> str:
    if row["reached"]:
        return "reached"
    ref = row.get("reference")
    gap = row["runs"][0]["objective"] - row["p_star"]
    text = f"NOT reached: P - P* = {gap:.2g} > eps = {EPS:g} after {row['epochs']} epochs"
    if ref is None:
        return text
    return (text + f", numba backend with the same batches {ref['objective'] - row['p_star']:.2g}"
            + (": expected" if row["expected"] else ": a FAILURE"))


def step_eps(args, out):
    from gpusvm import _kernels  # noqa: PLC0415
    from gpusvm.backends import make_backend  # noqa: PLC0415
    name = backend_name(args)
    rows, ok = [], True
    for data in ("imdb", "news20"):
        X, y = load(data, args, np.float32)
        ps = p_star(data, X.astype(np.float64), y, args)
        lib = float(np.median([liblinear_seconds(X, y) for _ in range(3)]))
        for solver, k in (("sdca", 16 if args.emulated else 4096),
                          ("pegasos", 16 if args.emulated else 4096)):
            k = min(k, X.shape[0])
            first = time.perf_counter()
            _kernels.load_module(name)               # the compile (or the disk cache), once
            compile_s = _kernels.compile_seconds.get("emulated" if args.emulated else 0,
                                                     time.perf_counter() - first)
            epochs = 30 if args.emulated else (1500 if solver == "sdca" else 300)
            runs = [timed_run(name, X, y, solver, k, ps + EPS, epochs) for _ in range(3)]
            med = {key: float(np.median([r[key] for r in runs])) for key in
                   ("upload", "capture", "replay", "evaluations", "total", "iterations",
                    "evaluations_count")}
            row = {"data": data, "solver": solver, "k": k, "n": X.shape[0], "epochs": epochs,
                   "p_star": ps, **med,
                   "compile": compile_s, "liblinear_seconds": lib,
                   "ratio_to_liblinear": lib / med["total"],
                   "reached": all(r["reached"] for r in runs), "runs": runs}
            if not row["reached"]:
                # expected only if the CPU, same seed, batches and epochs, stops short too, at
                # the same objective (the iterates agree up to rounding: see the parity step)
                _, cpu = _solve(make_backend("numba", X, y), solver, k, ps + EPS,
                                epochs * math.ceil(X.shape[0] / k))
                row["reference"] = {"objective": cpu, "reached": cpu <= ps + EPS}
                # float32 sums in another order: the same progress (suboptimality within
                # 5 %), not the same bits, over hundreds of epochs of atomics
                row["expected"] = bool(cpu > ps + EPS and all(
                    abs(r["objective"] - cpu) <= 0.05 * (cpu - ps) for r in runs))
            rows.append(row)
            ok = ok and (row["reached"] or row["expected"])
            print(json.dumps({k2: v for k2, v in row.items() if k2 != "runs"}, default=float),
                  flush=True)
    line = "; ".join(f"{r['data']} {r['solver']} k={r['k']}: {r['total']:.2f} s = upload "
                     f"{r['upload']:.2f} + capture {r['capture']:.2f} + replay {r['replay']:.2f} "
                     f"+ evaluations {r['evaluations']:.2f} ({r['evaluations_count']:.0f}, "
                     f"{r['iterations'] / math.ceil(r['n'] / r['k']):.0f} epochs; {_outcome(r)}; compile "
                     f"{r['compile']:.1f} s before; LinearSVC {r['liblinear_seconds']:.2f} s)"
                     for r in rows)
    return write(out, "eps", ok, f"P - P* <= {EPS:g}: " + line, rows=rows)


# ---------------------------------------------------------------------------- profile
#: what the profile step reads of each kernel launch (Nsight Compute's "details" page)
PROFILE_METRICS = ("Duration", "Memory Throughput", "DRAM Throughput", "L1/TEX Hit Rate",
                   "L2 Hit Rate", "Compute (SM) Throughput", "Achieved Occupancy",
                   "Warp Cycles Per Issued Instruction", "Registers Per Thread", "Grid Size")
PROFILE_CASES = (("imdb", "pegasos"), ("imdb", "sdca-aggressive"), ("news20", "pegasos"),
                 ("news20", "sdca-aggressive"))


def profile_fit(args, data, solver):
    """The iterations Nsight Compute profiles: ``solver`` at k = 256 on ``data`` (float32),
    warmed up for two epochs as the iterations step, then a captured segment of 3 iterations
    replayed once outside the profiled range and once inside it (cudaProfilerStart/Stop)."""
    import bench_gpu  # noqa: PLC0415

    from gpusvm.backends import make_backend  # noqa: PLC0415
    X, y = load(data, args, np.float32)
    k = min(16 if args.emulated else 256, X.shape[0])
    be = make_backend(backend_name(args), X, y)
    warm = 2 * max(1, math.ceil(X.shape[0] / k))
    segment, sampler, plan = bench_gpu.run_solver(be, solver, LAM, k, warm, warm)
    profiler = None
    if not args.emulated:
        import cupy  # noqa: PLC0415
        profiler = cupy.cuda.profiler
    with be.runtime.activate():
        segment(sampler, warm, warm + 3, plan)             # captures the graphs, not profiled
        be.runtime.stream.synchronize()
        if profiler is not None:
            profiler.start()
        segment(sampler, warm + 3, warm + 6, plan)         # the replay that is profiled
        be.runtime.stream.synchronize()
        if profiler is not None:
            profiler.stop()


def _profile_rows(csv_text: str) -> dict:
    """Per kernel (name without its template arguments' spaces): the median of each metric of
    PROFILE_METRICS over its launches, from ``ncu --csv --page details``."""
    import csv  # noqa: PLC0415
    import io  # noqa: PLC0415
    import re  # noqa: PLC0415
    to_us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    start = csv_text.find('"ID"')
    values: dict = {}
    for row in csv.DictReader(io.StringIO(csv_text[start:] if start >= 0 else "")):
        metric = row.get("Metric Name", "")
        found = re.search(r"gpusvm_\w+(?:<[^>]*>)?", row.get("Kernel Name", ""))
        if metric not in PROFILE_METRICS or found is None:
            continue
        try:
            value = float(str(row.get("Metric Value", "")).replace(",", ""))
        except ValueError:
            continue
        unit = row.get("Metric Unit", "")
        if metric == "Duration" and unit in to_us:
            value, unit = value * to_us[unit], "us"
        key = f"{metric} ({unit})" if unit else metric
        kernel = found.group(0).replace(" ", "")
        values.setdefault(kernel, {}).setdefault(key, []).append(value)
    return {kern: {m: float(np.median(v)) for m, v in ms.items()} for kern, ms in values.items()}


def step_profile(args, out):
    """Nsight Compute on the replayed iterations of PROFILE_CASES (one process each):
    duration, memory and compute throughput, cache hit rates, occupancy and issue stalls of
    every gpusvm kernel; on the emulator the profiled replay runs without the profiler."""
    if args.emulated:
        for data, solver in PROFILE_CASES:
            profile_fit(args, data, solver)
        return write(out, "profile", True, f"emulated: the {len(PROFILE_CASES)} profiled "
                     "replays ran; Nsight Compute runs on a GPU only")
    tool = shutil.which("ncu") or next(
        (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/ncu"))), None)
    if tool is None:
        return write(out, "profile", False, "ncu (Nsight Compute) not found (PATH, /usr/local/cuda*)")
    cases, ok = {}, True
    for data, solver in PROFILE_CASES:
        tag = f"{data}-{solver}"
        r = subprocess.run(
            [tool, "--clock-control", "none", "--profile-from-start", "off",
             "--target-processes", "all", "--kernel-name", "regex:gpusvm_",
             *[a for sec in ("SpeedOfLight", "MemoryWorkloadAnalysis", "WarpStateStats",
                             "LaunchStats", "Occupancy") for a in ("--section", sec)],
             "--csv", "--page", "details", "--log-file", str(out / f"profile-{tag}.csv"),
             sys.executable, __file__, "--out", str(out), "profilefit", "--case", tag],
            cwd=REPO, capture_output=True, text=True)
        (out / f"profile-{tag}.log").write_text(r.stdout[-20000:] + r.stderr[-20000:])
        path = out / f"profile-{tag}.csv"
        rows = _profile_rows(path.read_text()) if path.exists() else {}
        cases[tag] = rows
        ok = ok and r.returncode == 0 and bool(rows)
    line = "; ".join(
        f"{tag}: " + ", ".join(f"{k.split('<')[0].replace('gpusvm_', '')} "
                               f"{m.get('Duration (us)', float('nan')):.1f} us"
                               for k, m in rows.items())
        for tag, rows in cases.items())
    return write(out, "profile", ok, (line or "no kernel profiled")[:600], cases=cases)


# ---------------------------------------------------------------------------- while
#: (data, solver, k) of the backend's WHILE segments against its chunked graphs
WHILE_CASES = (("imdb", "pegasos", 256), ("imdb", "sdca-aggressive", 256),
               ("news20", "sdca-aggressive", 4096))


def _while_segments(args, out) -> tuple[bool, str, list]:
    """The backend's segments with ``GPUSVM_GRAPH_WHILE=1`` against ``=0`` on the same device:
    the batch counter and the state after a segment of many chunks (to 1e-4 in float32: the
    kernels' atomic sums round in any order), the graph launches of that segment (at most
    ``log2 C + 1`` with WHILE nodes) and the seconds per iteration both ways
    (``bench_gpu.per_iteration``)."""
    import bench_gpu  # noqa: PLC0415
    from gpusvm.backends import make_backend  # noqa: PLC0415
    dev, _ = bench_gpu.model_device("H100" if args.emulated else _device_name())
    rows, ok = [], True
    saved = os.environ.get("GPUSVM_GRAPH_WHILE")
    try:
        for data, solver, k in WHILE_CASES[:1] if args.emulated else WHILE_CASES:
            X, y = load(data, args, np.float32)
            row = {"data": data, "solver": solver, "k": k}
            states = {}
            for setting in ("0", "1"):
                os.environ["GPUSVM_GRAPH_WHILE"] = setting
                be = make_backend(backend_name(args), X, y)
                if be.runtime.while_nodes != (setting == "1"):
                    return False, f"GPUSVM_GRAPH_WHILE={setting} not honoured", rows
                warm = max(2, math.ceil(X.shape[0] / k))
                segment, sampler, plan = bench_gpu.run_solver(be, solver, LAM, k, warm, warm)
                length = 3 * 64 + 3 if args.emulated else 5 * 1024 + 3
                g0 = be.graph_stats["graph_launches"]
                with be.runtime.activate():
                    segment(sampler, warm, warm + length, plan)
                row[f"graph_launches_{setting}"] = be.graph_stats["graph_launches"] - g0
                row[f"counter_{setting}"] = int(be.to_host(be._counter)[0])
                states[setting] = be.to_host(be.V).astype(np.float64)
                timing = bench_gpu.per_iteration(backend_name(args), X, y, solver, k,
                                                 10 if args.emulated else 1000, LAM, dev,
                                                 1 if args.emulated else 3)
                row[f"seconds_per_iteration_{setting}"] = timing["seconds_per_iteration"]
            row["rel_diff"] = rel(states["1"], states["0"])
            # every iteration once (the device counter), the same state up to float32 rounding
            # of the kernels' atomic sums in another order, the chunks in one launch
            row["ok"] = (row["rel_diff"] <= 1e-4 and row["graph_launches_1"] <= 11
                         and row["counter_0"] == row["counter_1"] == warm + length)
            ok = ok and row["ok"]
            rows.append(row)
            print(json.dumps(row, default=float), flush=True)
    finally:
        if saved is None:
            os.environ.pop("GPUSVM_GRAPH_WHILE", None)
        else:
            os.environ["GPUSVM_GRAPH_WHILE"] = saved
    line = "; ".join(f"{r['data']} {r['solver']} k={r['k']}: rel {r['rel_diff']:.1e}, launches "
                     f"{r['graph_launches_0']} -> {r['graph_launches_1']}, "
                     f"{r['seconds_per_iteration_0'] * 1e6:.1f} -> "
                     f"{r['seconds_per_iteration_1'] * 1e6:.1f} us/it" for r in rows)
    return ok, line, rows


def step_while(args, out):
    """A segment as one graph launch: on a GPU, graph_while_probe.py first (a CUDA graph WHILE
    node built through cuda-python around an NVRTC kernel, each stage reported); where it
    works, the backend's own WHILE segments (``GPUSVM_GRAPH_WHILE=1``) against its chunked
    graphs (:func:`_while_segments`).  Where WHILE nodes are not available the probe's answer
    is the result and the step passes (the backend keeps its chunked graphs); it fails if the
    probe did not report, or if the backend's WHILE segments disagree with its chunked ones."""
    if args.emulated:
        ok, line, rows = _while_segments(args, out)
        return write(out, "while", ok, "emulated: " + line, rows=rows)
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("graph_while_probe.py")),
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    (out / "while.log").write_text(r.stdout + r.stderr)
    path = out / "graph_while.json"
    if not path.exists():
        return write(out, "while", False, f"the probe did not report: {r.stderr[-300:]}")
    rep = json.loads(path.read_text())
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    if not rep.get("ok"):
        return write(out, "while", True, "WHILE node NOT available: " + " | ".join(lines)[-500:],
                     probe=rep)
    ok, line, rows = _while_segments(args, out)
    return write(out, "while", ok, ("WHILE node works; backend: " + line)[:700], probe=rep,
                 rows=rows)


# ---------------------------------------------------------------------------- scale
#: seconds after which the scale step starts no cell (the step stays within 8 minutes)
SCALE_DEADLINE = 330
#: seconds a cell of the scale step may be predicted to take
SCALE_BUDGET = 120


def step_scale(args, out):
    """``bench_scale.py`` on the device (``--emulated``: a set of 2e4 nonzeros, the squared
    hinge, on the emulator): passes when every gpusvm cell was measured or skipped by the
    budget; the line gives gpusvm.LinearSVC's time over LIBLINEAR's and liblinear-multicore's
    at each size.  liblinear-multicore runs with ``$PEER_PYTHON`` (default: this interpreter;
    its cells fail, and are said to, where the ``liblinear`` module is missing)."""
    cells = out / "scale"
    cmd = [sys.executable, str(Path(__file__).with_name("bench_scale.py")), "--out", str(cells),
           "--peer-python", os.environ.get("PEER_PYTHON", sys.executable),
           "--threads", str(os.cpu_count()), "--deadline", str(SCALE_DEADLINE),
           "--budget", str(SCALE_BUDGET)]
    cmd += (["--device", "emulated", "--nnz", "2e4", "--losses", "squared_hinge"]
            if args.emulated else ["--device", "cuda", "--nnz", "1e7", "1e8", "1e9"])
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    (out / "scale_table.txt").write_text(r.stdout + r.stderr)
    print(r.stdout[-3000:], r.stderr[-2000:], flush=True)
    recs = [json.loads(p.read_text()) for p in sorted((cells / "cells").glob("*.json"))]
    mine = [c for c in recs if c["system"].startswith("gpusvm")]
    failed = [c for c in mine if c.get("error")]
    ok = r.returncode == 0 and bool(mine) and not failed
    by = {(c["nnz_target"], c["loss"], c["system"]): c for c in recs if c.get("seconds")}
    parts = []
    for (nnz, loss, system), c in sorted(by.items()):
        if system != "gpusvm-LinearSVC-" + ("emulated" if args.emulated else "gpu"):
            continue
        peers = {p: by.get((nnz, loss, p)) for p in ("sklearn-LinearSVC", "liblinear-mc-s1",
                                                     "liblinear-mc-s2", "liblinear-mc-s3")}
        ratio = ", ".join(f"{p} {c['seconds'] / q['seconds']:.2f}x" for p, q in peers.items() if q)
        parts.append(f"{nnz:.0e} {loss}: {c['seconds']:.2f} s" + (f" ({ratio})" if ratio else ""))
    line = "; ".join(parts) or "no gpusvm cell measured"
    if failed:
        line = f"{len(failed)} gpusvm cells failed ({failed[0]['error'][:120]}); " + line
    return write(out, "scale", ok, line[:700], cells=len(recs))


# ---------------------------------------------------------------------------- summary
def step_summary(args, out):
    print(f"GPU session summary ({'emulated' if args.emulated else 'GPU'}), {out}:")
    failed = 0
    for step in STEPS:
        f = out / f"{step}.json"
        if not f.exists():
            print(f"  {step:<11} MISSING (the step did not finish: see its log)")
            failed += 1
            continue
        rec = json.loads(f.read_text())
        print(f"  {step:<11} {rec['status'].upper():<5} {rec['line']}")
        failed += rec["status"] != "pass"
    print(f"{len(STEPS) - failed}/{len(STEPS)} steps passed")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=STEPS + ("summary", "shortfit", "profilefit"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--case", default="imdb-pegasos",
                        help="profilefit: DATA-SOLVER, one of PROFILE_CASES")
    parser.add_argument("--emulated", action="store_true",
                        help="the emulated runtime in place of CuPy, on slices of the data")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.step == "summary":
        return step_summary(args, args.out)
    if args.step == "shortfit":
        short_fit(args)
        return 0
    if args.step == "profilefit":
        data, solver = args.case.split("-", 1)
        profile_fit(args, data, solver)
        return 0
    try:
        rec = globals()[f"step_{args.step}"](args, args.out)
    except Exception as exc:  # the step's failure is a result: recorded, the session goes on
        import traceback  # noqa: PLC0415
        traceback.print_exc()
        rec = write(args.out, args.step, False, f"raised {type(exc).__name__}: {exc}"[:300])
    return 0 if rec["status"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
