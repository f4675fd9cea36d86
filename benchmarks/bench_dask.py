"""Distributed SDCA (CoCoA+) and Pegasos on a dask LocalCluster: rounds, time and bytes to eps.

Usage::

    python benchmarks/bench_dask.py                         # imdb, 1 and 2 workers, H = 0.5, 1, 2
    python benchmarks/bench_dask.py --datasets imdb,news20 --blocks 4,8,16,32,64
    python benchmarks/bench_dask.py --markdown              # the tables as Markdown (BENCHMARKS.md)

Three tables:

1. *Measured*: for every data set, number of workers (a ``LocalCluster`` with one
   single-threaded worker process each, one block per worker) and ``H``
   (``local_epochs``), the CoCoA+ rounds and the wall time to a certified duality
   gap ``<= tol``, the workers' compute time (sum over rounds of the slowest
   block), and the bytes of one round, *computed* as ``2 K d 8`` (``w`` to every
   block and one ``d``-vector back) plus ``8 n`` (the ``dalpha`` kept by the driver).
2. *Measured rounds against K*: ``K`` blocks on the same two workers (rounds do
   not depend on where a block runs), ``H = 1``.
3. *Modelled* time per round and to eps for ``K = 8 .. 64`` GPU workers, from the
   measured rounds of table 2, the measured per-worker throughput of table 1
   (nonzeros per second of a block's round) scaled by ``--gpu-speedup``, and a
   star all-reduce through the driver at ``--bandwidth`` bytes/s plus
   ``--latency`` seconds per round.  Nothing in table 3 is measured.

The data are read from ``../shared/data`` (see its README.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = (ROOT / ".." / "shared" / "data").resolve()
FILES = {
    "a9a": ("a9a/a9a", 123),
    "rcv1_small": ("rcv1_small/vw_rcv1_small.svm", 47236),
    "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", 74849),
    "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz", 1181833),
}


def load(name):
    """Training rows of a shared data set (CSR float64, labels in {-1, +1})."""
    from gpusvm.datasets import load_svmlight
    rel, d = FILES[name]
    X, y = load_svmlight(DATA / rel, n_features=d)
    return X.astype(np.float64), y.astype(np.float64)


def run_sdca(X, y, lam, tol, H, n_partitions, max_rounds):
    """One distributed SDCA fit; returns its measurements."""
    from gpusvm.dask import SDCASVC
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SDCASVC(lam=lam, tol=tol, local_epochs=H, bias="none", n_partitions=n_partitions,
                      max_iter=max_rounds, random_state=0).fit(X, y)
    wall = time.perf_counter() - t
    return {"rounds": clf.n_iter_, "reached": clf.stop_reason_ == "tol", "wall": wall,
            "worker": clf.worker_seconds_, "gap": clf.duality_gap_,
            "bytes": clf.bytes_per_round_, "K": clf.n_blocks_}


def table(rows, header, markdown):
    """Print rows as an aligned text table or as Markdown."""
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            print("| " + " | ".join(str(c) for c in r) + " |")
    else:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for r in rows:
            print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))
    print()


def main(argv=None):
    """Run the benchmark and print the three tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="imdb")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--H", default="0.5,1,2", help="local epochs per round")
    ap.add_argument("--blocks", default="4,8,16,32,64",
                    help="K for the rounds-against-K table (on two workers)")
    ap.add_argument("--lam", type=float, default=1e-4)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--max-rounds", type=int, default=400)
    ap.add_argument("--gpu-speedup", type=float, default=20.0,
                    help="assumed GPU / one-CPU-core throughput ratio of a local round (model)")
    ap.add_argument("--bandwidth", type=float, default=10e9,
                    help="assumed driver network bandwidth, bytes/s (model)")
    ap.add_argument("--latency", type=float, default=2e-3,
                    help="assumed fixed cost of one round, seconds (model)")
    ap.add_argument("--pegasos", default="",
                    help="also time PegasosSVC on this data set (e.g. news20): the synchronous "
                         "variant against local steps, P - P* against a single-process SDCA "
                         "lower bound (several minutes)")
    ap.add_argument("--pegasos-runs", default="1:3000,1:6000,50:6000,50:8000",
                    help="local_steps:max_iter pairs for --pegasos (batch 256)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)

    from distributed import Client, LocalCluster

    names = [s for s in args.datasets.split(",") if s]
    workers = [int(s) for s in args.workers.split(",") if s]
    Hs = [float(s) for s in args.H.split(",") if s]
    Ks = [int(s) for s in args.blocks.split(",") if s]
    data = {name: load(name) for name in names}
    measured, throughput, by_K = [], {}, {}
    for W in workers:
        with LocalCluster(n_workers=W, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            client.wait_for_workers(W, timeout=120)
            for name in names:
                X, y = data[name]
                run_sdca(X, y, args.lam, 1.0, 1.0, W, 2)  # warm up (numba cache, imports)
                for H in Hs:
                    r = run_sdca(X, y, args.lam, args.tol, H, W, args.max_rounds)
                    rounds = r["rounds"] if r["reached"] else f">{r['rounds']}"
                    measured.append((name, W, H, rounds, f"{r['wall']:.1f}",
                                     f"{r['worker']:.1f}", f"{r['bytes'] / 1e6:.2f}",
                                     f"{r['gap']:.2g}"))
                    if H == 1.0 and r["rounds"]:
                        # nonzeros one block processes per second of its round (H epoch +
                        # hinge + X^T(alpha y): about (H + 2) passes over its nonzeros)
                        per_round = r["worker"] / r["rounds"]
                        throughput[name] = (H + 2) * X.nnz / W / per_round
            if W == max(workers):
                for name in names:
                    X, y = data[name]
                    by_K[name] = {}
                    for K in Ks:
                        r = run_sdca(X, y, args.lam, args.tol, 1.0, K, args.max_rounds)
                        by_K[name][K] = r
    print(f"lam = {args.lam}, tol = {args.tol}; one single-threaded worker process per worker, "
          f"{os.cpu_count()} cores")
    print()
    print("Measured: rounds and time to a certified gap <= tol (bytes per round computed: "
          "2 K d 8 + 8 n)")
    table(measured, ["data", "workers", "H", "rounds", "wall s", "worker s", "MB/round",
                     "gap"], args.markdown)
    rows = []
    for name in names:
        for K, r in by_K.get(name, {}).items():
            rows.append((name, K, r["rounds"] if r["reached"] else f">{r['rounds']}",
                         f"{r['bytes'] / 1e6:.1f}"))
    if rows:
        print(f"Measured: CoCoA+ rounds to gap <= tol against the number of blocks K (H = 1, "
              f"blocks on {max(workers)} workers)")
        table(rows, ["data", "K", "rounds", "MB/round"], args.markdown)
    rows = []
    for name in names:
        if name not in throughput:
            continue
        X, y = data[name]
        n, d = X.shape
        thr = throughput[name] * args.gpu_speedup
        for K, r in by_K.get(name, {}).items():
            if K < 8:
                continue
            compute = 3 * X.nnz / K / thr
            comm = 2 * K * d * 8 / args.bandwidth + 8 * n / args.bandwidth
            per_round = compute + comm + args.latency
            rounds = r["rounds"]
            rows.append((name, K, rounds if r["reached"] else f">{rounds}",
                         f"{2 * K * d * 8 / 1e6:.1f}", f"{compute * 1e3:.2f}",
                         f"{comm * 1e3:.2f}", f"{per_round * 1e3:.2f}",
                         f"{rounds * per_round:.2f}"))
    if rows:
        print(f"Modelled (not measured): K GPU workers, throughput {args.gpu_speedup:g} x the "
              f"measured CPU worker, driver bandwidth {args.bandwidth / 1e9:g} GB/s, "
              f"{args.latency * 1e3:g} ms per round")
        table(rows, ["data", "K", "rounds (measured)", "MB/round", "compute ms", "comm ms",
                     "round ms", "time to eps s"], args.markdown)
    for name, thr in throughput.items():
        print(f"measured per-worker throughput on {name}: {thr / 1e6:.1f} M nonzeros/s")
    if args.pegasos:
        print()
        pegasos_table(args, args.pegasos)


def pegasos_table(args, name):
    """PegasosSVC on two workers: synchronous (local_steps=1) against local steps."""
    from distributed import Client, LocalCluster

    from gpusvm import SDCASVC as LocalSDCA
    from gpusvm.dask import PegasosSVC
    X, y = load(name)
    lower = LocalSDCA(lam=args.lam, tol=1e-5, bias="none", backend="numba", dtype="float64",
                      sampling="epoch", variant="safe", random_state=0,
                      max_iter=500 * X.shape[0]).fit(X, y).dual_objective_
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        PegasosSVC(lam=args.lam, batch_size=256, max_iter=4, bias="none").fit(X, y)  # warm up
        for pair in args.pegasos_runs.split(","):
            H, T = (int(v) for v in pair.split(":"))
            t = time.perf_counter()
            clf = PegasosSVC(lam=args.lam, batch_size=256, max_iter=T, local_steps=H,
                             bias="none", random_state=0).fit(X, y)
            wall = time.perf_counter() - t
            rows.append((name, H, T, f"{clf.objective_ - lower:.2e}", f"{wall:.0f}",
                         f"{1e3 * wall / T:.1f}"))
    print(f"Measured: PegasosSVC on 2 workers, batch 256, tail averaging; P - P* bounded by "
          f"P - D(alpha) of a single-process SDCA run (gap 1e-5)")
    table(rows, ["data", "local_steps", "iterations", "P - P* (<=)", "wall s", "ms/iteration"],
          args.markdown)


if __name__ == "__main__":
    main()
