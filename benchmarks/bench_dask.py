"""Distributed SDCA on a dask LocalCluster against the local SDCASVC: rounds and time to a gap.

Usage::

    python benchmarks/bench_dask.py                                  # imdb, news20, news20_multiclass
    python benchmarks/bench_dask.py --datasets imdb --blocks 4,8,16,32,64
    python benchmarks/bench_dask.py --markdown                       # tables as Markdown
    python benchmarks/bench_dask.py --datasets news20 --seeds 0-9    # rounds by seed only

Three tables:

1. *Measured*: for every data set, row order (``stored``: the file's order, cut into one
   contiguous chunk per worker, so a file sorted by label gives blocks of one class;
   ``shuffled``: the rows permuted by a seeded permutation first) and number of workers (a
   ``LocalCluster`` of single-threaded worker processes, one block each), the rounds and
   the wall time of ``gpusvm.dask.SDCASVC().fit`` to a certified duality gap ``<= tol``
   (everything: placing the blocks, the rounds, the certificates; the cluster is warmed
   up first), the workers' solver time (sum over rounds of the slowest block), whether
   the rows were rebalanced, and the local ``gpusvm.SDCASVC`` on the same rows, same
   ``lam``, ``tol`` and ``bias="none"``, timed in the same run, with the ratio of the two.
2. *Measured rounds against K*: ``K`` blocks on the same two workers (rounds do not
   depend on where a block runs), ``sigma' = 1`` with the line search (the default)
   against CoCoA+'s ``sigma' = K``.
3. *Modelled* time per round and to eps for ``K`` GPU workers, from the measured rounds
   of table 2, the measured solver throughput of table 1 (nonzeros per second of a
   block's local epoch) scaled by ``--gpu-speedup``, and a star all-reduce through the
   driver at ``--bandwidth`` bytes/s plus ``--latency`` seconds per round.  Nothing in
   table 3 is measured.

With ``--seeds``, one table instead: for every data set in every ``--orders`` order, cut
into one chunk per worker, the rounds, final gap and wall time of
``SDCASVC(random_state=seed)`` for each seed (the partition of a rebalanced dask array does
not depend on the seed; the local solvers' streams do), the local ``gpusvm.SDCASVC`` with
the same seed timed just before it and their ratio, and each seed's rounds over the
median's; ``--json PATH`` writes the rows.

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
    """Training rows of a shared data set (CSR float64, labels as stored)."""
    if name == "news20_multiclass":            # 20 classes; the 80% training split (seed 0)
        from sklearn.datasets import load_svmlight_file
        from sklearn.model_selection import train_test_split

        from gpusvm.datasets import normalize_rows
        X, y = load_svmlight_file(str(DATA / "news20_multiclass" / "news20.bz2"))
        X = normalize_rows(X.astype(np.float64))
        idx = np.arange(X.shape[0])
        train, _ = train_test_split(idx, test_size=0.2, random_state=0, stratify=y)
        train.sort()                               # the stored order of the kept rows
        return X[train], y[train]
    from gpusvm.datasets import load_svmlight
    rel, d = FILES[name]
    X, y = load_svmlight(DATA / rel, n_features=d)
    return X.astype(np.float64), y.astype(np.float64)


def fit_dask(X, y, parts, lam, tol, max_rounds, sigma=1.0, n_partitions=None, random_state=0,
             **params):
    """One distributed fit on a dask array of ``parts`` contiguous chunks; its measurements."""
    import dask.array as da

    from gpusvm.dask import SDCASVC
    n = X.shape[0]
    Xd = da.from_array(X, chunks=(-(-n // parts), X.shape[1]), asarray=False)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SDCASVC(lam=lam, tol=tol, sigma=sigma, max_iter=max_rounds,
                      random_state=random_state, **params).fit(Xd, y)
    wall = time.perf_counter() - t
    gap = float(np.max(clf.duality_gap_))
    return {"rounds": clf.n_iter_, "reached": clf.stop_reason_ == "tol", "wall": wall,
            "worker": clf.worker_seconds_, "gap": gap, "bytes": clf.bytes_per_round_,
            "K": clf.n_blocks_, "rebalanced": clf.rebalanced_}


def _number(text):
    """``--local-epochs``: a number, or a word the estimator takes (``"auto"``)."""
    try:
        return float(text)
    except ValueError:
        return text


def fit_local(X, y, lam, tol, random_state=0):
    """The local SDCASVC on the same problem (its defaults otherwise); wall time and epochs."""
    from gpusvm import SDCASVC
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SDCASVC(lam=lam, tol=tol, bias="none", random_state=random_state).fit(X, y)
    return time.perf_counter() - t, clf.n_iter_ / X.shape[0]


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


def by_seed(args):
    """The rounds-by-seed table (``--seeds``): every data set in every ``--orders`` order, one
    chunk a worker, each seed's distributed fit alternated with a local fit of the same rows
    (the same ``lam``, ``tol`` and seed); ``--json`` writes the rows."""
    import json

    from distributed import Client, LocalCluster

    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    W = max(int(s) for s in args.workers.split(",") if s)
    orders = [s for s in args.orders.split(",") if s]
    rows, record = [], []
    with LocalCluster(n_workers=W, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(W, timeout=120)
        for name in [s for s in args.datasets.split(",") if s]:
            X0, y0 = load(name)
            perm = np.random.default_rng(0).permutation(X0.shape[0])
            fit_dask(X0[perm[:2000]], y0[perm[:2000]], W, args.lam, 1e-1, 2)   # warm up
            fit_local(X0[perm[:2000]], y0[perm[:2000]], args.lam, 1.0)
            for order in orders:
                X, y = (X0, y0) if order == "stored" else (X0[perm], y0[perm])
                runs = []
                for seed in seeds:
                    local, _ = fit_local(X, y, args.lam, args.tol, random_state=seed)
                    r = fit_dask(X, y, W, args.lam, args.tol, args.max_rounds, random_state=seed)
                    r["local"], r["ratio"] = local, r["wall"] / local
                    runs.append(r)
                    print("seed:", name, order, seed, r, file=sys.stderr, flush=True)
                median = float(np.median([r["rounds"] for r in runs]))
                for seed, r in zip(seeds, runs):
                    rows.append((name, order, W, seed,
                                 r["rounds"] if r["reached"] else f">{r['rounds']}",
                                 f"{r['gap']:.3g}", f"{r['wall']:.2f}", f"{r['local']:.2f}",
                                 f"{r['ratio']:.2f}", "yes" if r["rebalanced"] else "no",
                                 f"{r['rounds'] / median:.2f}"))
                    record.append({"data": name, "order": order, "workers": W, "seed": seed,
                                   "lam": args.lam, "tol": args.tol, **r})
    print(f"lam = {args.lam}, tol = {args.tol}, bias='none'; {W} single-threaded worker "
          f"processes, {os.cpu_count()} cores; one chunk per worker (shuffled: rows permuted "
          "by seed 0 first); local: gpusvm.SDCASVC, same seed, in the same run")
    print()
    table(rows, ["data", "order", "workers", "seed", "rounds", "gap", "fit s", "local s",
                 "ratio", "rebalanced", "rounds / median"], args.markdown)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


def main(argv=None):
    """Run the benchmark and print the three tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="imdb,news20,news20_multiclass")
    ap.add_argument("--orders", default="stored,shuffled")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--blocks", default="4,8",
                    help="K for the rounds-against-K table (on two workers)")
    ap.add_argument("--blocks-datasets", default="imdb",
                    help="data sets of the rounds-against-K table")
    ap.add_argument("--lam", type=float, default=1e-4)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--gpu-speedup", type=float, default=20.0,
                    help="assumed GPU / one-CPU-core throughput ratio of a local epoch (model)")
    ap.add_argument("--bandwidth", type=float, default=10e9,
                    help="assumed driver network bandwidth, bytes/s (model)")
    ap.add_argument("--latency", type=float, default=2e-3,
                    help="assumed fixed cost of one round, seconds (model)")
    ap.add_argument("--local-epochs", default=None,
                    help="the distributed fit's local_epochs (default: the estimator's)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="fits of each side per row, alternated; the table shows each side's "
                         "best and the median of the runs' ratios")
    ap.add_argument("--seeds", default=None,
                    help="e.g. 0-9: only the rounds-by-seed table, on max(--workers) workers")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", default=None, help="with --seeds: write the rows to this file")
    args = ap.parse_args(argv)
    if args.seeds is not None:
        return by_seed(args)

    from distributed import Client, LocalCluster

    names = [s for s in args.datasets.split(",") if s]
    extra = {} if args.local_epochs is None else {"local_epochs": _number(args.local_epochs)}
    orders = [s for s in args.orders.split(",") if s]
    workers = [int(s) for s in args.workers.split(",") if s]
    Ks = [int(s) for s in args.blocks.split(",") if s]
    k_names = [s for s in args.blocks_datasets.split(",") if s]
    data = {name: load(name) for name in sorted(set(names) | set(k_names))}
    shuffled = {}
    for name, (X, y) in data.items():
        perm = np.random.default_rng(0).permutation(X.shape[0])
        shuffled[name] = (X[perm], y[perm])
    warm = {name: shuffled[name][0][:2000] for name in data}       # mixed classes
    warm_y = {name: shuffled[name][1][:2000] for name in data}
    for name in names:                                         # warm the local loops up
        fit_local(warm[name], warm_y[name], args.lam, 1.0)
    measured, throughput, by_K = [], {}, {}
    for W in workers:
        with LocalCluster(n_workers=W, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            client.wait_for_workers(W, timeout=120)
            for name in names:
                fit_dask(warm[name], warm_y[name], W, args.lam, 1.0, 2)  # warm up (numba cache)
                for order in orders:
                    X, y = data[name] if order == "stored" else shuffled[name]
                    # the two fits alternate, each its best of --repeats (timeit's rule: the
                    # least disturbed run), and the median of the runs' own ratios beside it
                    pairs = []
                    for _ in range(max(1, args.repeats)):
                        local, epochs = fit_local(X, y, args.lam, args.tol)
                        pairs.append((local, fit_dask(X, y, W, args.lam, args.tol,
                                                      args.max_rounds, **extra)))
                    local = min(p[0] for p in pairs)
                    r = min((p[1] for p in pairs), key=lambda q: q["wall"])
                    median = float(np.median([p[1]["wall"] / p[0] for p in pairs]))
                    rounds = r["rounds"] if r["reached"] else f">{r['rounds']}"
                    measured.append((name, order, W, rounds, f"{r['wall']:.2f}",
                                     f"{r['worker']:.2f}", "yes" if r["rebalanced"] else "no",
                                     f"{r['bytes'] / 1e6:.1f}", f"{r['gap']:.2g}",
                                     f"{local:.2f}", f"{epochs:.1f}",
                                     f"{r['wall'] / local:.1f}", f"{median:.1f}"))
                    print("measured:", measured[-1], file=sys.stderr, flush=True)
                    if r["rounds"]:
                        throughput[name] = X.nnz / W / (r["worker"] / r["rounds"])
            if W == max(workers):
                for name in k_names:
                    fit_dask(warm[name], warm_y[name], W, args.lam, 1.0, 2)
                    X, y = shuffled[name]
                    by_K[name] = {}
                    for K in Ks:
                        by_K[name][K] = (fit_dask(X, y, K, args.lam, args.tol, args.max_rounds),
                                         fit_dask(X, y, K, args.lam, args.tol, args.max_rounds,
                                                  sigma="K"))
                        print("by K:", name, K, by_K[name][K], file=sys.stderr, flush=True)
    print(f"lam = {args.lam}, tol = {args.tol}, bias='none'; one single-threaded worker "
          f"process per worker, {os.cpu_count()} cores; local: gpusvm.SDCASVC defaults "
          "(numba, float32, b = 1) in the driver process")
    print()
    print("Measured: rounds and wall time of the distributed fit to a certified gap <= tol, "
          f"against the local fit of the same rows in the same run (best of {args.repeats} "
          "alternated fits each; ratio: of the bests)")
    table(measured, ["data", "order", "workers", "rounds", "fit s", "solver s", "rebalanced",
                     "MB/round", "gap", "local s", "local epochs", "ratio",
                     "median ratio"], args.markdown)
    if any(by_K.values()):
        rows = []
        for name, per in by_K.items():
            for K, (ls, plus) in per.items():
                def shown(r):
                    return r["rounds"] if r["reached"] else f">{r['rounds']}"
                rows.append((name, K, shown(ls), f"{ls['wall']:.1f}", shown(plus),
                             f"{plus['wall']:.1f}"))
        print("Measured rounds against K (K blocks on the workers, rows shuffled): sigma' = 1 "
              "with the line search (default) and CoCoA+'s sigma' = K")
        table(rows, ["data", "K", "rounds (default)", "s", "rounds (sigma'=K)", "s"],
              args.markdown)
        rows = []
        for name, per in by_K.items():
            X, _ = data[name]
            nnz, d = X.nnz, X.shape[1]
            tput = throughput.get(name, float("nan")) * args.gpu_speedup
            for K, (ls, _) in per.items():
                compute = nnz / K / tput
                comm = args.latency + 3 * K * min(d, nnz / K) * 8 / args.bandwidth
                per_round = compute + comm
                rows.append((name, K, ls["rounds"], f"{compute * 1e3:.2f}", f"{comm * 1e3:.2f}",
                             f"{per_round * ls['rounds']:.2f}"))
        print(f"Modelled (not measured): K GPU workers at {args.gpu_speedup:g}x the measured "
              f"per-core solver throughput, star all-reduce at {args.bandwidth / 1e9:g} GB/s "
              f"+ {args.latency * 1e3:g} ms per round, 3 vectors of min(d, nnz/K) per block")
        table(rows, ["data", "K", "rounds", "solver ms/round", "comm ms/round", "s to eps"],
              args.markdown)


if __name__ == "__main__":
    main()
