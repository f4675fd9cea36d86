"""Threads inside one fit: time to the same objective for 1, 2, ... threads, against peers.

Run from the repository root::

    python benchmarks/bench_threads.py                       # 2 x 10^7 nonzeros, 1 and 2 threads
    python benchmarks/bench_threads.py --nnz 4.8e7 --threads 1 2 4 8 16
    python benchmarks/bench_threads.py --repeats 3 --json benchmarks/results/threads.json
    python benchmarks/bench_threads.py --dataset news20      # a set of ../shared/data

The data: the seeded set of :func:`make_data` (Zipf-like columns, unit rows, labels from a
planted ``w`` with 5% flipped; every figure recorded so far), or with ``--scale-generator``
``gpusvm.datasets.make_sparse_classification`` (50 nonzeros a row, 10^5 columns), split 80/20.  Rows, one per solver and thread count, fitted ``--repeats``
times in turn (round-robin, so that other load hits every row alike), median wall seconds:

* ``gpusvm SDCA``: ``SDCASVC(loss="squared_hinge", C=C, tol=...)``, ``n_jobs=k``: the
  certified duality gap ``<= tol`` (the same certificate for every ``k``); on ``k > 1``
  threads its row blocks (``gpusvm.solvers._threaded``) from
  ``gpusvm._threads.SDCA_THREAD_MIN_NNZ`` nonzeros;
* ``gpusvm Newton``: the same with ``solver="newton"``, the same certified gap;
* ``sklearn LinearSVC``: ``dual=True`` and ``dual=False`` (liblinear, one thread), at
  ``tol`` such that its objective reaches at least gpusvm's (``P`` printed for each row);
* ``liblinear-mc -s 1 / -s 2``: liblinear-multicore with ``-m k`` threads, run by
  the Python of ``--mc-python`` (default ``$LIBLINEAR_MC_PYTHON``; a Python with
  liblinear-multicore installed) in a subprocess on the same data (an
  svmlight file written once), its fit timed inside the subprocess.

Every row prints the primal objective ``P`` (the squared-hinge objective in LinearSVC's
units, ``1/2 ||w||^2 + C sum_i max(0, 1 - y_i w.x_i)^2``, intercept a regularised feature),
the test accuracy and the speed-up of ``k`` threads over one of the same solver.  numba's
one-off compilation is excluded (every path is fitted once on a small slice first).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import gpusvm  # noqa: E402
from gpusvm import SDCASVC  # noqa: E402

DATA = REPO.parent / "shared" / "data"


def make_data(nnz: float, density_per_row: int = 48, d: int | None = None, seed: int = 0,
              flip: float = 0.05, dtype=np.float32):
    """A seeded sparse binary set of about ``nnz`` nonzeros: ``nnz / density_per_row`` rows,
    columns drawn Zipf-like (column ``j`` with probability ~ ``1 / (j + 10)``), positive
    values, unit rows, labels ``sign(x w*)`` of a planted Gaussian ``w*`` with ``flip`` of
    them flipped."""
    rng = np.random.default_rng(seed)
    n = int(nnz // density_per_row)
    d = int(d or max(1000, n // 4))
    ranks = np.arange(d, dtype=np.float64)
    p = 1.0 / (ranks + 10.0)
    cdf = np.cumsum(p / p.sum())
    counts = rng.poisson(density_per_row - 1, n) + 1
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cols = np.searchsorted(cdf, rng.random(indptr[-1])).astype(np.int32)
    cols = np.minimum(cols, d - 1)
    cols = rng.permutation(d).astype(np.int32)[cols]            # frequent columns spread out
    vals = rng.random(indptr[-1]).astype(np.float64) + 0.1
    X = sp.csr_matrix((vals, cols, indptr), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    w = rng.standard_normal(d)
    y = np.where(X @ w >= 0, 1, -1)
    y[rng.random(n) < flip] *= -1
    X = X.astype(dtype).tocsr()
    X.sort_indices()
    return X, y


def load_data(args):
    """``(X_train, y_train, X_test, y_test, name)``."""
    if args.dataset:
        from gpusvm.datasets import load_svmlight  # noqa: PLC0415
        folder = DATA / args.dataset
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.endswith(".md"))
        X, y = load_svmlight(str(files[0]))[:2]
        y = np.where(y == y.max(), 1, -1)
        name = args.dataset
    else:
        if args.scale_generator:
            from gpusvm.datasets import make_sparse_classification  # noqa: PLC0415
            rows = max(1000, int(args.nnz // 50))
            X, y = make_sparse_classification(rows, 100_000, nnz_per_row=50,
                                              random_state=args.seed)[:2]
            name = f"make_sparse_classification({rows}, 100000, nnz_per_row=50)"
        else:
            X, y = make_data(args.nnz, seed=args.seed)
            name = f"make_data(nnz={args.nnz:.3g})"
    X = sp.csr_matrix(X, dtype=np.float32)
    n = X.shape[0]
    cut = int(0.8 * n)
    return X[:cut], y[:cut], X[cut:], y[cut:], name


def objective(X, y, w, b, C):
    """LinearSVC's squared-hinge objective with a regularised intercept (liblinear's)."""
    m = y * (X @ w + b)
    return 0.5 * (w @ w + b * b) + C * float(np.sum(np.maximum(0.0, 1.0 - m) ** 2))


def run_gpusvm(X, y, Xt, yt, C, tol, solver, k, seed):
    est = SDCASVC(C=C, loss="squared_hinge", solver=solver, tol=tol, n_jobs=k,
                  random_state=seed, dtype="float32")
    t0 = time.perf_counter()
    est.fit(X, y)
    sec = time.perf_counter() - t0
    w, b = est.coef_.ravel().astype(np.float64), float(est.intercept_[0])
    return dict(seconds=sec, P=objective(X, y, w, b, C), acc=float(np.mean(est.predict(Xt) == yt)),
                threads=int(getattr(est, "n_threads_", 1)), gap=float(np.max(est.duality_gap_)))


def run_sklearn(X, y, Xt, yt, C, tol, dual):
    from sklearn.svm import LinearSVC  # noqa: PLC0415
    est = LinearSVC(C=C, dual=dual, tol=tol, max_iter=10_000)
    t0 = time.perf_counter()
    est.fit(X, y)
    sec = time.perf_counter() - t0
    w, b = est.coef_.ravel().astype(np.float64), float(est.intercept_[0])
    return dict(seconds=sec, P=objective(X, y, w, b, C), acc=float(np.mean(est.predict(Xt) == yt)),
                threads=1, gap=float("nan"))


_MC_SCRIPT = r"""
import sys, time, json
import numpy as np
from liblinear.liblinearutil import svm_read_problem, problem, parameter, train
y, x = svm_read_problem(sys.argv[1], return_scipy=True)
prob = problem(y, x)
out = []
for opts in sys.argv[2:]:
    t0 = time.perf_counter()
    m = train(prob, parameter(opts + " -q"))
    sec = time.perf_counter() - t0
    w = np.array([m.w[i] for i in range(m.nr_feature + (1 if m.bias >= 0 else 0))])
    lab = m.get_labels()
    out.append(dict(opts=opts, seconds=sec, w=w.tolist(), sign=1.0 if lab[0] == 1 else -1.0))
print(json.dumps(out))
"""


def run_mc(path, X, y, Xt, yt, C, tol, s, k, mc_python):
    opts = f"-s {s} -c {C} -e {tol} -B 1 -m {k}"
    proc = subprocess.run([mc_python, "-c", _MC_SCRIPT, path, opts], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        return dict(seconds=float("nan"), P=float("nan"), acc=float("nan"), threads=k,
                    gap=float("nan"), error=proc.stderr.strip().splitlines()[-1:])
    res = json.loads(proc.stdout.strip().splitlines()[-1])[0]
    wb = np.asarray(res["w"]) * res["sign"]
    w, b = wb[:-1], float(wb[-1])
    w = np.concatenate([w, np.zeros(max(0, X.shape[1] - w.size))])[:X.shape[1]]
    acc = float(np.mean(np.where(Xt @ w + b >= 0, 1, -1) == yt))
    return dict(seconds=res["seconds"], P=objective(X, y, w, b, C), acc=acc, threads=k,
                gap=float("nan"))


def warm_up(X, y, threads, C):
    """Compile every path on a slice (a threaded fit needs as many nonzeros as the threshold)."""
    from gpusvm._threads import THREAD_MIN_NNZ  # noqa: PLC0415
    rows = min(X.shape[0], max(2000, int(THREAD_MIN_NNZ / max(X.nnz / X.shape[0], 1)) + 10))
    Xs, ys = X[:rows], y[:rows]
    for solver in ("sdca", "newton"):
        for k in sorted(set(threads)):
            SDCASVC(C=C, loss="squared_hinge", solver=solver, tol=1e-2, n_jobs=k, max_iter=None
                    if solver == "sdca" else 3, random_state=0).fit(Xs, ys)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nnz", type=float, default=2e7,
                    help="nonzeros of the generated set (80%% train)")
    ap.add_argument("--dataset", default=None, help="a data set of ../shared/data instead")
    ap.add_argument("--scale-generator", action="store_true",
                    help="gpusvm.datasets.make_sparse_classification instead of make_data")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="gpusvm's relative certified gap (LinearSVC's tol)")
    ap.add_argument("--solvers", nargs="+", default=["sdca", "newton"])
    ap.add_argument("--peers", nargs="*", default=["sklearn", "mc"],
                    help="sklearn (LinearSVC dual=True/False), mc (liblinear-multicore)")
    ap.add_argument("--mc-python", default=os.environ.get("LIBLINEAR_MC_PYTHON", ""))
    ap.add_argument("--peer-tol", type=float, default=1e-4, help="liblinear's -e (and "
                    "sklearn's tol); lower it until the peers' P matches gpusvm's")
    ap.add_argument("--sdca-max-threads", type=int, default=None,
                    help="lift SDCA's cap on threads (gpusvm._threads.SDCA_MAX_THREADS) for "
                         "this run, to measure its row blocks on more threads")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    if args.sdca_max_threads is not None:
        from gpusvm import _threads  # noqa: PLC0415
        _threads.SDCA_MAX_THREADS = args.sdca_max_threads
    X, y, Xt, yt, name = load_data(args)
    print(f"# {name}: {X.shape[0]} x {X.shape[1]} train, {X.nnz:,} nonzeros; "
          f"{platform.node()}, {len(os.sched_getaffinity(0))} usable cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    warm_up(X, y, args.threads, args.C)
    jobs = []
    for solver in args.solvers:
        for k in args.threads:
            jobs.append((f"gpusvm {solver}", k, lambda s=solver, k=k: run_gpusvm(
                X, y, Xt, yt, args.C, args.tol, s, k, args.seed)))
    if "sklearn" in args.peers:
        for dual in (True, False):
            jobs.append((f"sklearn LinearSVC dual={dual}", 1, lambda dual=dual: run_sklearn(
                X, y, Xt, yt, args.C, args.peer_tol, dual)))
    tmp = None
    if "mc" in args.peers and args.mc_python and Path(args.mc_python).exists():
        from sklearn.datasets import dump_svmlight_file  # noqa: PLC0415
        tmp = tempfile.NamedTemporaryFile(suffix=".svm", delete=False)
        tmp.close()
        dump_svmlight_file(X, y, tmp.name, zero_based=False)   # LIBSVM's one-based indices
        for s in (1, 2):
            for k in args.threads:
                jobs.append((f"liblinear-mc -s {s}", k, lambda s=s, k=k: run_mc(
                    tmp.name, X, y, Xt, yt, args.C, args.peer_tol, s, k, args.mc_python)))
    results = {(label, k): [] for label, k, _ in jobs}
    try:
        for _ in range(args.repeats):
            for label, k, job in jobs:
                r = job()
                results[(label, k)].append(r)
                print(f"  {label} k={k}: {r['seconds']:.3f} s, P={r['P']:.6f}", file=sys.stderr,
                      flush=True)
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    rows = []
    print(f"{'solver':32s} {'threads':>7s} {'ran':>4s} {'seconds':>9s} {'speed-up':>9s} "
          f"{'P':>14s} {'gap/(Cn)':>10s} {'accuracy':>9s}")
    for (label, k), runs in results.items():
        sec = float(np.median([r["seconds"] for r in runs]))
        base = results.get((label, min(args.threads)))
        one = float(np.median([r["seconds"] for r in base])) if base else float("nan")
        r = runs[-1]
        rows.append(dict(solver=label, threads=k, ran=r["threads"], seconds=sec,
                         speedup=one / sec, P=r["P"], gap=r["gap"], accuracy=r["acc"],
                         runs=[x["seconds"] for x in runs]))
        print(f"{label:32s} {k:7d} {r['threads']:4d} {sec:9.3f} {one / sec:9.2f} "
              f"{r['P']:14.6f} {r['gap']:10.2e} {r['acc']:9.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(data=name, shape=list(X.shape), nnz=int(X.nnz),
                                                   rows=rows), indent=1))


if __name__ == "__main__":
    main()
