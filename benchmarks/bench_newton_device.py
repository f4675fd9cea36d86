"""Primal Newton on a device against the CPU on n >> d data: LinearSVC and LinearSVCCV.

Run from the repository root::

    # on a GPU machine: 10^6 rows x 1,000 features, 100 nonzeros a row (10^8 nonzeros)
    python benchmarks/bench_newton_device.py --backend cupy --n 1000000 --d 1000 --row-nnz 100 \\
        --threads 16 --cv --json benchmarks/results/newton_device_1e8.json
    # 10^9 nonzeros: the device and liblinear-multicore alone (one single-threaded fit of
    # scikit-learn or of the CPU backend takes minutes there)
    python benchmarks/bench_newton_device.py --backend cupy --n 10000000 --d 1000 --row-nnz 100 \\
        --threads 16 --cpu-backend none --no-sklearn --repeats 1 \\
        --json benchmarks/results/newton_device_1e9.json
    # anywhere, small: the same rows on the emulated device or the compiled CPU backend
    python benchmarks/bench_newton_device.py --backend emulated --n 20000 --d 200 --row-nnz 20

The data: ``n`` rows of ``row_nnz`` nonzeros at uniformly drawn columns (standard normal
values, a constant feature appended by the estimators' intercept), labels the signs of a
random linear model plus 10% label noise, all from ``--seed``; ``--generator
module:function`` takes any ``function(n, d, row_nnz, seed) -> (X csr, y)`` instead.

Rows of the table (each the median of ``--repeats`` fits; each backend first fits the first
20,000 rows, untimed, so that compilation is not counted):

* ``gpusvm LinearSVC`` on ``--backend`` and on the CPU backend (``--cpu-backend``), its
  default solver choice (Newton for n >> d at ``C`` above the SDCA crossover);
* ``sklearn LinearSVC`` (liblinear's primal Newton, ``-s 2``, one thread) at the same
  ``C`` and ``tol``;
* ``liblinear-multicore -s 2 -m T`` through ``--mc-python`` or ``$LIBLINEAR_MC_PYTHON`` (a
  Python with the liblinear-multicore bindings, ``pip install liblinear-multicore``;
  skipped, and said so, when none is given);
* with ``--cv``: ``LinearSVCCV`` on both backends over ``--Cs`` and ``--folds``, and
  with ``--mc-search`` liblinear-multicore's ``-C`` search (``-s 2 -C -v folds -m T``;
  its conversion of the rows is not timed, nor is any row's).

Every row reports seconds, LinearSVC's objective ``1/2 ||w||^2 + C sum max(0, 1 - y
<w, x>)^2`` (the intercept a regularised feature) relative to the smallest found, and the
training accuracy.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpusvm  # noqa: E402
from gpusvm import LinearSVC, LinearSVCCV  # noqa: E402


def make_data(n: int, d: int, row_nnz: int, seed: int):
    """``n`` rows of ``row_nnz`` nonzeros at uniform columns, labels of a random linear model
    with 10% of them flipped (float32 CSR, labels in {-1, +1})."""
    rng = np.random.default_rng(seed)
    k = min(row_nnz, d)
    cols = rng.integers(0, d, size=(n, k), dtype=np.int32)
    cols.sort(axis=1)
    data = rng.standard_normal(n * k, dtype=np.float32)
    X = sp.csr_matrix((data, cols.ravel(), np.arange(0, n * k + 1, k, dtype=np.int64)),
                      shape=(n, d))
    X.sum_duplicates()
    w = rng.standard_normal(d).astype(np.float32)
    y = np.where(X @ w > 0, 1.0, -1.0)
    flip = rng.random(n) < 0.1
    y[flip] = -y[flip]
    return X, y


def objective(X, y, coef, intercept, C):
    w = np.asarray(coef, dtype=np.float64).ravel()
    b = float(np.ravel(intercept)[0])
    m = y * (X @ w + b)
    h = np.maximum(0.0, 1.0 - m)
    return 0.5 * (w @ w + b * b) + C * float(h @ h)


def _device_name():
    """The CUDA device's name, or None without CuPy or a device."""
    try:
        import cupy  # noqa: PLC0415
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001  (no CuPy, no driver, no device)
        return None


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


MC_SCRIPT = r"""
import json, sys, time
import numpy as np, scipy.sparse as sp
from liblinear.liblinearutil import train, problem, parameter
z = np.load(sys.argv[1])
X = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
y = z["y"]
opts, repeats = sys.argv[2], int(sys.argv[3])
times = []
prob = problem(y, X)                  # the conversion to liblinear's rows, not timed
for _ in range(repeats):
    t = time.perf_counter()
    m = train(prob, parameter(opts))
    times.append(time.perf_counter() - t)
out = {"seconds": sorted(times)[len(times) // 2]}
if isinstance(m, tuple):          # -C: (best C, best p, accuracy)
    out["best_C"], out["cv_accuracy"] = float(m[0]), float(m[2])
else:
    w = np.array([m.get_decfun_coef(j + 1) for j in range(X.shape[1])])
    b = m.get_decfun_bias()
    lab = m.get_labels()
    sign = 1.0 if lab[0] == 1 else -1.0
    out["w"], out["b"] = (sign * w).tolist(), sign * b
print(json.dumps(out))
"""


def run_multicore(python, X, y, opts, repeats):
    """liblinear-multicore's ``train`` with ``opts`` in another interpreter: its result, or
    why not."""
    if not python or not Path(python).exists():
        return {"skipped": f"no liblinear-multicore Python at {python!r}"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        X = X.tocsr()
        np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr,
                 shape=np.array(X.shape), y=y)
        script = os.path.join(tmp, "mc.py")
        Path(script).write_text(MC_SCRIPT)
        proc = subprocess.run([python, script, path, opts, str(repeats)], capture_output=True,
                              text=True, check=False)
    if proc.returncode != 0:
        return {"skipped": "liblinear-multicore failed: " + proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=200)
    ap.add_argument("--row-nnz", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--generator", default=None,
                    help="module:function(n, d, row_nnz, seed) -> (X, y) instead of the built-in")
    ap.add_argument("--backend", default="cupy", help="the device backend: cupy or emulated "
                    "(numba or numpy time the CPU alone)")
    ap.add_argument("--cpu-backend", default="numba", help="the CPU backend beside it, or none")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--mc-python", default=os.environ.get("LIBLINEAR_MC_PYTHON", ""),
                    help="a Python with the liblinear-multicore bindings (default: "
                         "$LIBLINEAR_MC_PYTHON; none: the rows are skipped, and said so)")
    ap.add_argument("--no-sklearn", action="store_true", help="skip scikit-learn's LinearSVC")
    ap.add_argument("--cv", action="store_true", help="also time LinearSVCCV")
    ap.add_argument("--Cs", default="0.01,0.1,1,10")
    ap.add_argument("--mc-search", action="store_true",
                    help="with --cv, also time liblinear-multicore's own C search (-C; slow: "
                         "it walks C up from a small value until the accuracy stops changing)")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--machine", default="", help="what to call the machine in the JSON")
    args = ap.parse_args(argv)

    if args.generator:
        mod, fn = args.generator.split(":")
        X, y = getattr(importlib.import_module(mod), fn)(args.n, args.d, args.row_nnz, args.seed)
    else:
        X, y = make_data(args.n, args.d, args.row_nnz, args.seed)
    X = sp.csr_matrix(X)
    print(f"data: n={X.shape[0]:,} d={X.shape[1]:,} nnz={X.nnz:,} ({X.dtype}), seed {args.seed}")
    rows = []

    def save():
        """The JSON record of the rows so far (rewritten after each: a run stopped early keeps
        what finished)."""
        if not args.json:
            return
        record = {"date": time.strftime("%Y-%m-%d"), "machine": args.machine or
                  f"{os.cpu_count()} cores, {platform.machine()}", "device": _device_name(),
                  "gpusvm": gpusvm.__version__,
                  "args": {k: v for k, v in vars(args).items() if k != "mc_python"},
                  "data": {"n": X.shape[0], "d": X.shape[1], "nnz": int(X.nnz)}, "rows": rows}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1))

    def add(name, seconds, coef=None, intercept=None, **extra):
        row = {"name": name, "seconds": seconds, **extra}
        if coef is not None:
            row["objective"] = objective(X, y, coef, intercept, args.C)
            row["accuracy"] = float(np.mean(np.where(X @ np.ravel(coef) + np.ravel(intercept)[0]
                                                     > 0, 1.0, -1.0) == y))
        rows.append(row)
        save()
        print(f"  {name}: {seconds:.3f} s {extra}", flush=True)

    def gpusvm_fit(backend):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return LinearSVC(C=args.C, tol=args.tol, backend=backend).fit(X, y)

    backends = [args.backend] + ([args.cpu_backend]
                                 if args.cpu_backend not in (args.backend, "none") else [])
    head = min(X.shape[0], 20000)
    for be in backends:                 # compile (kernels, numba, CuPy's), untimed, on a slice
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            LinearSVC(C=args.C, tol=args.tol, backend=be).fit(X[:head], y[:head])
    for be in backends:
        sec, m = timed(lambda be=be: gpusvm_fit(be), args.repeats)
        add(f"gpusvm LinearSVC ({be})", sec, m.coef_, m.intercept_, solver=m.solver_,
            n_iter=int(m.n_iter_))
    if not args.no_sklearn:
        from sklearn.svm import LinearSVC as SkLinearSVC  # noqa: PLC0415
        sec, m = timed(lambda: SkLinearSVC(C=args.C, tol=args.tol, dual=False).fit(X, y),
                       args.repeats)
        add("sklearn LinearSVC (-s 2, 1 thread)", sec, m.coef_, m.intercept_)
    mc = run_multicore(args.mc_python, X, y, f"-s 2 -c {args.C} -e {args.tol} -B 1 "
                       f"-m {args.threads} -q", args.repeats)
    if "skipped" in mc:
        print("  liblinear-multicore:", mc["skipped"])
    else:
        add(f"liblinear-multicore -s 2 -m {args.threads}", mc["seconds"], np.array(mc["w"]),
            np.array([mc["b"]]))
    if args.cv:
        Cs = [float(c) for c in args.Cs.split(",")]
        for be in backends:
            def search(be=be):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return LinearSVCCV(Cs=Cs, cv=args.folds, tol=args.tol, backend=be).fit(X, y)
            sec, m = timed(search, args.repeats)
            rows.append({"name": f"gpusvm LinearSVCCV ({be})", "seconds": sec, "C_": m.C_,
                         "solver": m.solver_})
            save()
            print(f"  LinearSVCCV ({be}): {sec:.3f} s, C_={m.C_}", flush=True)
        mc = run_multicore(args.mc_python, X, y, f"-s 2 -C -v {args.folds} -B 1 "
                           f"-m {args.threads} -q", args.repeats) if args.mc_search else \
            {"skipped": "not run (--mc-search runs it)"}
        if "skipped" in mc:
            print("  liblinear-multicore -C:", mc["skipped"])
        else:
            rows.append({"name": f"liblinear-multicore -s 2 -C -v {args.folds} -m {args.threads}",
                         "seconds": mc["seconds"], "C_": mc["best_C"]})
    best = min((r["objective"] for r in rows if "objective" in r), default=None)
    print()
    print(f"{'what':48s} {'seconds':>9s} {'rel. objective':>15s} {'accuracy':>9s}")
    for r in rows:
        rel = (r["objective"] - best) / best if "objective" in r else float("nan")
        r["relative_objective"] = rel
        acc = r.get("accuracy", float("nan"))
        print(f"{r['name']:48s} {r['seconds']:9.3f} {rel:15.2e} {acc:9.4f}")
    if args.json:
        save()
        print("wrote", args.json)


if __name__ == "__main__":
    main()
