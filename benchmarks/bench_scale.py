"""Generated sets of 10^7 to 10^9 nonzeros fitted by gpusvm (GPU or CPU), scikit-learn's
LinearSVC and liblinear-multicore: fit time, objective, test accuracy, memory, time per pass.

Run from the repository root::

    python benchmarks/bench_scale.py --out scale-results                      # CPU, 1e7 nonzeros
    python benchmarks/bench_scale.py --out scale-results --nnz 1e7 1e8 --threads 2
    python benchmarks/bench_scale.py --out scale-results --device cuda --nnz 1e7 1e8 1e9 \\
        --threads 16 --deadline 450                                          # the GPU session
    python benchmarks/bench_scale.py --out scale-results --table              # the table only

The sets: :func:`gpusvm.datasets.make_sparse_classification` with ``n`` rows of 50 draws
(about 45 nonzeros), ``n`` columns, Zipf exponent 1, ``flip_y = 0.02``, seed 0; the last
``--test-fraction`` of the rows are the test set.  ``--device cuda`` generates on the GPU and
copies the set to the host for the CPU systems (the same numbers everywhere in a run).

The systems, each at LinearSVC's defaults (``C = 1``, an intercept fitted as a regularised
constant feature) with the squared hinge and with the hinge:

* ``gpusvm.LinearSVC`` (its default path), ``gpusvm.SDCASVC(C=1)``, ``gpusvm.PegasosSVC(C=1)``
  on ``--device`` (``cuda``: ``backend="cupy"``, the set resident on the GPU; ``cpu``:
  the compiled CPU backend, ``backend="numba"``; ``emulated``: the kernel emulator, a smoke
  test only), and ``gpusvm.LinearSVC(backend="numba")`` beside a GPU;
* ``sklearn.svm.LinearSVC`` (LIBLINEAR, one thread);
* liblinear-multicore with ``--threads`` threads (``-s 1`` and ``-s 2``; the hinge: ``-s 3``),
  run by ``--peer-python`` (default ``$LIBLINEAR_MC_PYTHON``) in a child process that
  reads the training set from ``.npy`` files the run writes once a size (``OUT/set-<nnz>``,
  removed when the size is done), with ``OMP_WAIT_POLICY=passive`` unless
  ``--omp-wait-policy active``.

Every cell (size, system, loss) is one JSON record under ``OUT/cells``, written as it
finishes; a rerun skips the cells it finds (the run resumes).  A cell is skipped, and said
so, when the system's time at the previous size, grown linearly, exceeds ``--budget``
seconds, or when it would end past ``--deadline`` seconds from the start.

The objective of every fit: ``P(w, b) = (||w||^2 + b^2) / 2 + C sum_i loss(y_i (x_i . w + b))``
on the float64 training set, reported relative to the best any system reached on that set
and loss.  Time per pass: the fit time over the passes over the data (epochs of SDCA and
Pegasos; LinearSVC's when it ended in SDCA), against the traffic limit of a pass,
``8 bytes * nnz / --bandwidth`` (float32 value and int32 index of each nonzero).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DRAWS_PER_ROW = 50
#: nonzeros per row of the generated law at 50 draws, n = d (repeated columns merge)
NNZ_PER_ROW = 45.0
SEED = 0
FLIP_Y = 0.02
LOSSES = ("squared_hinge", "hinge")
PEER_PYTHON = os.environ.get("LIBLINEAR_MC_PYTHON", "")
#: bytes a pass must read per nonzero: a float32 value and an int32 index
BYTES_PER_NNZ = 8


# ------------------------------------------------------------------ the data
def _generator():
    """``gpusvm._generate`` loaded from its file: the child process of the peers imports no
    more of gpusvm than the generator (its interpreter may lack numba)."""
    spec = importlib.util.spec_from_file_location("_gpusvm_generate", REPO / "gpusvm" / "_generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_set(nnz: float, test_fraction: float, device: str | None = None):
    """``(X_train, y_train, X_test, y_test, info)`` of the set of about ``nnz`` nonzeros, labels
    in {-1, +1}; on the device with ``device="cuda"``."""
    n_total = max(1000, int(round(nnz / NNZ_PER_ROW / (1.0 - test_fraction))))
    n_test = max(1, int(n_total * test_fraction))
    t = time.perf_counter()
    X, y = _generator().make_sparse_classification(
        n_total, n_total, nnz_per_row=DRAWS_PER_ROW, zipf_exponent=1.0, flip_y=FLIP_Y,
        random_state=SEED, device=device)
    xp = np if device is None else __import__("cupy")
    y = (2 * y - 1).astype(np.float64)
    if device is not None:
        xp.cuda.Device().synchronize()
    seconds = time.perf_counter() - t
    n = n_total - n_test
    X_train, X_test = X[:n], X[n:]
    info = {"n_train": n, "n_test": n_test, "d": n_total, "nnz_train": int(X_train.nnz),
            "generate_seconds": seconds, "generated_on": device or "cpu"}
    return X_train, y[:n], X_test, y[n:], info


def objective(X, y, w, b, C, loss) -> float:
    """``(||w||^2 + b^2) / 2 + C sum loss(y (X w + b))`` in float64 on the host."""
    m = y * (X @ np.asarray(w, dtype=np.float64) + b)
    xi = np.maximum(0.0, 1.0 - m)
    total = np.sum(xi * xi) if loss == "squared_hinge" else np.sum(xi)
    return float(0.5 * (np.dot(w, w) + b * b) + C * total)


# ------------------------------------------------------------------ memory
def _host_peak_reset():
    try:
        Path("/proc/self/clear_refs").write_text("5")        # VmHWM := VmRSS
        return _status_kib("VmRSS")
    except OSError:
        return None


def _status_kib(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


# ------------------------------------------------------------------ the systems
def gpusvm_systems(device: str) -> list[str]:
    if device == "cuda":
        return ["gpusvm-LinearSVC-gpu", "gpusvm-SDCASVC-gpu", "gpusvm-PegasosSVC-gpu",
                "gpusvm-LinearSVC-cpu"]
    if device == "emulated":
        return ["gpusvm-LinearSVC-emulated", "gpusvm-SDCASVC-emulated"]
    return ["gpusvm-LinearSVC-cpu", "gpusvm-SDCASVC-cpu", "gpusvm-PegasosSVC-cpu"]


def peer_systems(loss: str) -> list[str]:
    dual = "s1" if loss == "squared_hinge" else "s3"
    return ["sklearn-LinearSVC"] + [f"liblinear-mc-{s}" for s in
                                    ((dual, "s2") if loss == "squared_hinge" else (dual,))]


def fit_gpusvm(system, loss, data):
    """Fit one gpusvm system; ``(w, b, seconds, passes, device_bytes)``."""
    import gpusvm  # noqa: PLC0415
    _, name, where = system.split("-")
    backend = {"gpu": "cupy", "cpu": "numba", "emulated": "emulated"}[where]
    X = data["X_dev"] if where == "gpu" else data["X"]
    y = data["y_dev"] if where == "gpu" else data["y"]
    est = {"LinearSVC": lambda: gpusvm.LinearSVC(loss=loss, backend=backend),
           "SDCASVC": lambda: gpusvm.SDCASVC(C=1.0, loss=loss, backend=backend),
           "PegasosSVC": lambda: gpusvm.PegasosSVC(C=1.0, loss=loss, backend=backend)}[name]()
    pool = None
    if where == "gpu":                 # the pool's high-water mark: the set and the fit's own
        import cupy  # noqa: PLC0415
        pool = cupy.get_default_memory_pool()
        cupy.cuda.Device().synchronize()
        pool.free_all_blocks()
    t = time.perf_counter()
    est.fit(X, y)
    seconds = time.perf_counter() - t
    device_bytes = None if pool is None else int(pool.total_bytes())   # data and fit
    n = data["info"]["n_train"]
    if name == "LinearSVC":
        passes = float(est.n_iter_) if getattr(est, "solver_", "") == "sdca" else None
    else:
        passes = est.n_iter_ * est.batch_size_ / n
    return (np.asarray(est.coef_, dtype=np.float64).ravel(), float(est.intercept_[0]), seconds,
            passes, device_bytes, {"solver": getattr(est, "solver_", None), "n_iter": int(est.n_iter_)})


_WARM: set = set()


def warm_up(system, loss, data):
    """One untimed fit of ``system`` on the first 2000 rows, once a process: numba's and
    NVRTC's compiles (cached on disk after the first run) stay out of the timed fits."""
    if (system, loss) in _WARM:
        return
    rows = min(2000, data["info"]["n_train"])
    small = {"info": {**data["info"], "n_train": rows}, "X": data["X"][:rows],
             "y": data["y"][:rows]}
    if "X_dev" in data:
        small.update(X_dev=data["X_dev"][:rows], y_dev=data["y_dev"][:rows])
    import warnings  # noqa: PLC0415
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpusvm(system, loss, small)
    _WARM.add((system, loss))


def fit_sklearn(loss, data):
    from sklearn.svm import LinearSVC  # noqa: PLC0415
    est = LinearSVC(loss=loss, dual=True)      # one thread; the hinge needs the dual
    t = time.perf_counter()
    est.fit(data["X"], data["y"])
    seconds = time.perf_counter() - t
    return (est.coef_.ravel().astype(np.float64), float(est.intercept_[0]), seconds, None, None,
            {"n_iter": int(est.n_iter_)})


def fit_peer(system, loss, args, data):
    """liblinear-multicore in a child process (``--peer-python``) that regenerates the set."""
    solver = system.rsplit("-", 1)[1][1:]
    cmd = [args.peer_python, __file__, "--peer", solver, "--threads", str(args.threads),
           "--nnz", str(data["nnz_target"]), "--test-fraction", str(args.test_fraction),
           "--out", str(args.out), "--peer-data", str(share_set(args, data))]
    env = dict(os.environ, OMP_WAIT_POLICY=args.omp_wait_policy.upper())
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.budget * 3 + 120, env=env)
    if r.returncode:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"liblinear-multicore failed ({args.peer_python}): {last[-300:]}")
    rec = json.loads(r.stdout.strip().splitlines()[-1])
    return (np.asarray(rec["w"]), rec["b"], rec["seconds"], None, None,
            {"threads": args.threads, "host_peak_mib": rec["host_peak_mib"],
             "problem_seconds": rec["problem_seconds"], "cpu_seconds": rec.get("cpu_seconds")})


def share_set(args, data) -> Path:
    """The training set as ``.npy`` files under ``OUT/set-<nnz>`` (written once a size, read
    by the child with memory maps: faster than generating it again on the host, and the set
    generated on a GPU is not the host generator's)."""
    folder = args.out / f"set-{data['nnz_target']:.0e}".replace("+", "")
    if not (folder / "y.npy").exists():
        folder.mkdir(parents=True, exist_ok=True)
        X = data["X"]
        for name in ("data", "indices", "indptr"):
            np.save(folder / f"{name}.npy", getattr(X, name))
        np.save(folder / "shape.npy", np.asarray(X.shape, dtype=np.int64))
        np.save(folder / "y.npy", data["y"])                    # last: the folder is complete
    return folder


def drop_shared_set(args, nnz) -> None:
    folder = args.out / f"set-{nnz:.0e}".replace("+", "")
    for f in folder.glob("*.npy") if folder.is_dir() else ():
        f.unlink()
    if folder.is_dir():
        folder.rmdir()


def peer_main(args) -> int:
    """The child: read (or build) the set, fit with liblinear-multicore, print one JSON line."""
    from liblinear.liblinearutil import parameter, problem, train  # noqa: PLC0415
    if args.peer_data:
        f = Path(args.peer_data)
        X = sp.csr_matrix(tuple(np.load(f / f"{a}.npy", mmap_mode="r") for a in
                                ("data", "indices", "indptr")),
                          shape=tuple(np.load(f / "shape.npy")))
        y = np.load(f / "y.npy")
    else:
        X, y, _, _, _ = make_set(args.nnz[0], args.test_fraction)
    X = sp.csr_matrix(X, dtype=np.float64)
    base = _host_peak_reset()
    t, cpu = time.perf_counter(), time.process_time()     # the CPU time of every thread
    prob = problem(y, X)
    t_prob = time.perf_counter() - t
    model = train(prob, parameter(f"-s {args.peer} -c 1 -B 1 -m {args.threads} -q"))
    seconds = time.perf_counter() - t
    cpu = time.process_time() - cpu
    peak = _status_kib("VmHWM")
    d = X.shape[1]
    w = np.ctypeslib.as_array(model.w, shape=(d + 1,)).astype(np.float64)
    if model.get_labels()[0] != 1:                       # liblinear's w scores its first label
        w = -w
    print(json.dumps({"w": w[:d].tolist(), "b": float(w[d]), "seconds": seconds,
                      "problem_seconds": t_prob, "cpu_seconds": cpu,
                      "host_peak_mib": None if base is None else (peak - base) / 1024}))
    return 0


# ------------------------------------------------------------------ the run
def selected(args, system: str) -> bool:
    """Whether ``--systems`` names ``system`` (in full, or without its ``-gpu``/``-cpu``/
    ``-emulated`` suffix); every system when it names none."""
    if not args.systems:
        return True
    return system in args.systems or system.rsplit("-", 1)[0] in args.systems


def cell_path(args, nnz, system, loss) -> Path:
    return args.out / "cells" / f"{nnz:.0e}-{system}-{loss}.json".replace("+", "")


def predicted_seconds(args, sizes_done, system, loss, nnz):
    """The system's time at the largest smaller size done, grown linearly in nnz."""
    prev = [(s, cell_path(args, s, system, loss)) for s in sizes_done if s < nnz]
    for s, path in reversed(prev):
        if path.exists():
            rec = json.loads(path.read_text())
            if rec.get("seconds") is None:
                return math.inf                          # skipped there: skipped here
            return rec["seconds"] * nnz / s
    return 0.0


def run(args) -> None:
    start = time.perf_counter()
    (args.out / "cells").mkdir(parents=True, exist_ok=True)
    args.bandwidth = args.bandwidth or (4.3e12 if args.device == "cuda" else 2.0e10)
    for i, nnz in enumerate(args.nnz):
        todo = [(system, loss) for loss in args.losses
                for system in gpusvm_systems(args.device) + peer_systems(loss)
                if selected(args, system) and not cell_path(args, nnz, system, loss).exists()]
        if args.systems:                 # in the order --systems names them
            todo.sort(key=lambda sl: next(i for i, s in enumerate(args.systems)
                                          if s in (sl[0], sl[0].rsplit("-", 1)[0])))
        if not todo:
            continue
        if time.perf_counter() - start > args.deadline:
            print(f"[{nnz:.0e}] past the deadline: not started", flush=True)
            break
        data = load_data(args, nnz)
        for system, loss in todo:
            path = cell_path(args, nnz, system, loss)
            rec = {"nnz_target": nnz, "system": system, "loss": loss, **data["info"],
                   "bandwidth": args.bandwidth, "date": time.strftime("%Y-%m-%d")}
            guess = predicted_seconds(args, args.nnz[:i], system, loss, nnz)
            left = args.deadline - (time.perf_counter() - start)
            if guess > args.budget or guess > left:
                rec.update(seconds=None, skipped=f"predicted {guess:.0f} s > budget "
                           f"{args.budget:.0f} s or the {left:.0f} s left")
                if guess <= args.budget:     # only the deadline: try again on a rerun
                    print(f"[{nnz:.0e}] {system} {loss}: {rec['skipped']}", flush=True)
                    continue
            else:
                try:
                    rec.update(measure(system, loss, args, data))
                except Exception as exc:  # a failed cell is a result: recorded, the run goes on
                    rec.update(seconds=None, error=f"{type(exc).__name__}: {exc}"[:400])
            path.write_text(json.dumps(rec, indent=1, default=float))
            print(f"[{nnz:.0e}] {system} {loss}: " + (
                f"{rec['seconds']:.2f} s" if rec.get("seconds") is not None
                else rec.get("skipped") or rec.get("error")), flush=True)
        del data
        drop_shared_set(args, nnz)


def load_data(args, nnz):
    dev = "cuda" if args.device == "cuda" else None
    X, y, X_test, y_test, info = make_set(nnz, args.test_fraction, dev)
    data = {"nnz_target": nnz, "info": info}
    if dev:
        data.update(X_dev=X, y_dev=y)
        X, y, X_test, y_test = X.get(), y.get(), X_test.get(), y_test.get()
    data.update(X=X, y=y, X_test=X_test, y_test=y_test, X64=X.astype(np.float64))
    print(f"[{nnz:.0e}] {info['n_train']} x {info['d']}, {info['nnz_train']} nonzeros, generated "
          f"on {info['generated_on']} in {info['generate_seconds']:.1f} s", flush=True)
    return data


def measure(system, loss, args, data) -> dict:
    if system.startswith("gpusvm"):
        warm_up(system, loss, data)
    base = _host_peak_reset()
    cpu = time.process_time()
    if system.startswith("gpusvm"):
        w, b, seconds, passes, dev_bytes, extra = fit_gpusvm(system, loss, data)
    elif system == "sklearn-LinearSVC":
        w, b, seconds, passes, dev_bytes, extra = fit_sklearn(loss, data)
    else:
        w, b, seconds, passes, dev_bytes, extra = fit_peer(system, loss, args, data)
    peak = _status_kib("VmHWM")
    extra.setdefault("cpu_seconds", time.process_time() - cpu)   # the child's: its own
    if base is not None and "host_peak_mib" not in extra:
        extra["host_peak_mib"] = (peak - base) / 1024
    scores = data["X_test"] @ w.astype(data["X_test"].dtype) + b
    out = {"seconds": seconds, "objective": objective(data["X64"], data["y"], w, b, 1.0, loss),
           "test_accuracy": float(np.mean(np.where(scores > 0, 1.0, -1.0) == data["y_test"])),
           "passes": passes, "device_mib": None if dev_bytes is None else dev_bytes / 2**20,
           **extra}
    if passes:
        limit = BYTES_PER_NNZ * data["info"]["nnz_train"] / args.bandwidth
        out["seconds_per_pass"] = seconds / passes
        out["fraction_of_traffic_limit"] = limit / out["seconds_per_pass"]
    return out


# ------------------------------------------------------------------ the table
def table(args) -> list[dict]:
    recs = [json.loads(p.read_text()) for p in sorted((args.out / "cells").glob("*.json"))]
    best = {}
    for r in recs:
        if r.get("objective") is not None:
            key = (r["nnz_target"], r["loss"])
            best[key] = min(best.get(key, math.inf), r["objective"])
    print(f"{'nnz':>8} {'loss':<13} {'system':<26} {'fit s':>8} {'cpu s':>8} {'P/P_best-1':>10} "
          f"{'test acc':>8} {'passes':>7} {'s/pass':>8} {'% limit':>7} {'dev MiB':>8} "
          f"{'host MiB':>8}")
    order = {s: i for i, s in enumerate(gpusvm_systems(args.device) + ["gpusvm-LinearSVC-cpu",
                                        "sklearn-LinearSVC", "liblinear-mc-s1", "liblinear-mc-s2",
                                        "liblinear-mc-s3"])}
    recs.sort(key=lambda r: (r["nnz_target"], r["loss"], order.get(r["system"], 99)))
    fmt = lambda v, f: "-" if v is None else format(v, f)   # noqa: E731
    for r in recs:
        if r.get("seconds") is None:
            print(f"{r['nnz_target']:>8.0e} {r['loss']:<13} {r['system']:<26} "
                  f"{(r.get('skipped') or r.get('error') or '')[:70]}")
            continue
        gap = r["objective"] / best[(r["nnz_target"], r["loss"])] - 1.0
        frac = r.get("fraction_of_traffic_limit")
        print(f"{r['nnz_target']:>8.0e} {r['loss']:<13} {r['system']:<26} {r['seconds']:>8.2f} "
              f"{fmt(r.get('cpu_seconds'), '8.2f'):>8} {gap:>10.1e} {r['test_accuracy']:>8.4f} {fmt(r.get('passes'), '7.1f'):>7} "
              f"{fmt(r.get('seconds_per_pass'), '8.3f'):>8} "
              f"{fmt(None if frac is None else 100 * frac, '7.2f'):>7} "
              f"{fmt(r.get('device_mib'), '8.0f'):>8} {fmt(r.get('host_peak_mib'), '8.0f'):>8}")
    for (nnz, loss) in sorted(best):
        cell = {r["system"]: r for r in recs if r["nnz_target"] == nnz and r["loss"] == loss
                and r.get("seconds") is not None}
        ref = cell.get("sklearn-LinearSVC")
        for name in ("gpusvm-LinearSVC-gpu", "gpusvm-LinearSVC-cpu"):
            if ref and name in cell:
                print(f"{nnz:.0e} {loss}: {name} / sklearn LinearSVC time = "
                      f"{cell[name]['seconds'] / ref['seconds']:.2f}x (objective "
                      f"{cell[name]['objective'] / ref['objective'] - 1:+.1e} relative, accuracy "
                      f"{cell[name]['test_accuracy'] - ref['test_accuracy']:+.4f})")
    return recs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the cells' records")
    parser.add_argument("--nnz", type=float, nargs="+", default=[1e7], help="sizes (nonzeros)")
    parser.add_argument("--device", choices=("cpu", "cuda", "emulated"), default="cpu")
    parser.add_argument("--losses", nargs="+", choices=LOSSES, default=list(LOSSES))
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="liblinear-multicore's threads (-m)")
    parser.add_argument("--peer-python", default=PEER_PYTHON,
                        help="interpreter with liblinear-multicore (the liblinear module)")
    parser.add_argument("--omp-wait-policy", choices=("passive", "active"), default="passive",
                        help="OMP_WAIT_POLICY of liblinear-multicore (active threads spin at "
                             "barriers: on a loaded host -m 2 ran 28x slower than -m 1)")
    parser.add_argument("--bandwidth", type=float, default=None,
                        help="bytes/s of the traffic limit (default: 4.3e12 on cuda, 2e10 else)")
    parser.add_argument("--budget", type=float, default=300.0,
                        help="seconds a cell may be predicted to take")
    parser.add_argument("--deadline", type=float, default=math.inf,
                        help="seconds after which no cell starts")
    parser.add_argument("--systems", nargs="+", default=None,
                        help="only these systems, in their order of the table (e.g. "
                             "gpusvm-LinearSVC liblinear-mc-s2; the -gpu/-cpu suffix optional)")
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--table", action="store_true", help="print the table of OUT only")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--peer-data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer:
        return peer_main(args)
    if not args.table:
        if not (args.peer_python and Path(args.peer_python).exists()):
            print(f"--peer-python {args.peer_python} not found: liblinear-multicore skipped",
                  flush=True)
        run(args)
    table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
