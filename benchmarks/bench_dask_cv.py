"""The C search on a dask LocalCluster against a distributed fit per (C, fold) and the local search.

Usage::

    python benchmarks/bench_dask_cv.py                       # imdb and news20, shuffled rows
    python benchmarks/bench_dask_cv.py --datasets imdb --Cs 0.25,1,4 --folds 5 --markdown
    python benchmarks/bench_dask_cv.py --defaults --datasets imdb   # defaults vs LinearSVC

For each data set (its rows permuted by a seeded permutation, as a cluster's partitions of
mixed rows), on a ``LocalCluster`` of ``--workers`` single-threaded worker processes:

* ``gpusvm.dask.SDCASVCCV(Cs, cv=StratifiedKFold(folds), refit=False)``: the fold models of
  each C outputs of one distributed fit, C ascending with warm starts (wall time, rounds of
  its fits);
* the same models one distributed fit each, ``gpusvm.dask.SDCASVC(C=C)`` on the fold's
  training rows, as a grid search over the distributed estimator runs them (wall time
  summed, rounds summed);
* the local ``gpusvm.SDCASVCCV`` (SDCA, ``bias="none"``) on the same folds, for scale.

Every fit stops at a certified gap ``<= tol`` in its own units (or at ``max_iter``); the
table gives the worst certified gap of the search's models, and the largest difference
between a (fold, C) held-out accuracy of the search and of the per-model fit (two models
certified to ``tol``, not the same point).  Best of ``--repeats`` runs of each side, alternated.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dask import load, table  # noqa: E402


def one_pass(X, y, Cs, cv, tol):
    from gpusvm.dask import SDCASVCCV
    t = time.perf_counter()
    search = SDCASVCCV(Cs=Cs, cv=cv, tol=tol, refit=False, random_state=0).fit(X, y)
    return time.perf_counter() - t, search


def per_model(X, y, Cs, cv, tol):
    """Every (fold, C) model as its own distributed fit; its held-out accuracy."""
    from gpusvm.dask import SDCASVC
    scores, rounds = np.empty((cv.get_n_splits(), len(Cs))), 0
    t = time.perf_counter()
    for f, (tr, te) in enumerate(cv.split(X, y)):
        for ci, C in enumerate(Cs):
            clf = SDCASVC(C=C, tol=tol, random_state=0).fit(X[tr], y[tr])
            rounds += clf.n_iter_
            scores[f, ci] = clf.score(X[te], y[te])
    return time.perf_counter() - t, scores, rounds


def local_search(X, y, Cs, cv, tol):
    from gpusvm import SDCASVCCV
    t = time.perf_counter()
    SDCASVCCV(Cs=Cs, cv=cv, tol=tol, refit=False, solver="sdca", bias="none",
              random_state=0).fit(X, y)
    return time.perf_counter() - t


def defaults(names, workers, markdown):
    """Defaults first: ``SDCASVCCV()`` with nothing set against ``GridSearchCV(LinearSVC())``
    on the same values of C and folds, and the local ``gpusvm.SDCASVCCV()``, in one run."""
    from distributed import Client, LocalCluster
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import LinearSVC

    import gpusvm
    from gpusvm.dask import SDCASVCCV
    rows = []
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        for name in names:
            X, y = load(name)
            perm = np.random.default_rng(0).permutation(X.shape[0])
            X, y = X[perm], y[perm]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t = time.perf_counter()
                dist = SDCASVCCV().fit(X, y)
                t_dist = time.perf_counter() - t
            above = int(np.sum(dist.duality_gaps_ > dist.tol))
            warned = any("models of the search ended above" in str(w.message) for w in caught)
            t = time.perf_counter()
            local = gpusvm.SDCASVCCV().fit(X, y)
            t_local = time.perf_counter() - t
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = time.perf_counter()
                grid = GridSearchCV(LinearSVC(), {"C": list(dist.Cs_)},
                                    cv=StratifiedKFold(5)).fit(X, y)
                t_grid = time.perf_counter() - t
            rows.append((name, f"{t_dist:.1f}", f"{dist.C_:.3g}",
                         f"{dist.scores_.mean(axis=0).max():.4f}",
                         "+".join(str(r) for r in dist.search_rounds_),
                         f"{above}/{dist.duality_gaps_.size}" + (" (warned)" if warned else ""),
                         f"{t_grid:.1f}", f"{grid.best_params_['C']:.3g}",
                         f"{grid.best_score_:.4f}", f"{t_grid / t_dist:.2f}",
                         f"{t_local:.1f}", f"{local.C_:.3g}"))
            print("measured:", rows[-1], flush=True)
    print(f"{workers} workers; every search on its defaults; GridSearchCV over the dask "
          "search's Cs_ with 5 stratified folds")
    table(rows, ["data", "dask search s", "C_", "best mean", "rounds per C",
                 "models above tol", "GridSearchCV(LinearSVC) s", "its C", "its best",
                 "GridSearchCV / dask", "local search s", "its C_"], markdown)


def main(argv=None):
    """Run the comparison and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="imdb,news20")
    ap.add_argument("--Cs", default="0.25,0.5,1,2")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--defaults", action="store_true",
                    help="the searches on their defaults against GridSearchCV(LinearSVC())")
    args = ap.parse_args(argv)
    if args.defaults:
        defaults([d for d in args.datasets.split(",") if d], args.workers, args.markdown)
        return
    from distributed import Client, LocalCluster
    from sklearn.model_selection import StratifiedKFold

    Cs = [float(c) for c in args.Cs.split(",")]
    cv = StratifiedKFold(args.folds)
    rows = []
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        for name in [d for d in args.datasets.split(",") if d]:
            X, y = load(name)
            perm = np.random.default_rng(0).permutation(X.shape[0])
            X, y = X[perm], y[perm]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                one_pass(X[:2000], y[:2000], Cs[:1], StratifiedKFold(2), args.tol)  # warm-up
                best_s, best_p, best_l = np.inf, np.inf, np.inf
                for _ in range(args.repeats):
                    s, search = one_pass(X, y, Cs, cv, args.tol)
                    p, scores, rounds = per_model(X, y, Cs, cv, args.tol)
                    best_s, best_p = min(best_s, s), min(best_p, p)
                    best_l = min(best_l, local_search(X, y, Cs, cv, args.tol))
            diff = float(np.max(np.abs(search.scores_ - scores)))
            rows.append((name, X.shape[0], f"{len(Cs)} x {args.folds}", f"{best_s:.2f}",
                         "+".join(str(r) for r in search.search_rounds_), f"{best_p:.2f}",
                         rounds, f"{best_p / best_s:.1f}",
                         f"{float(search.duality_gaps_.max()):.2g}",
                         f"{diff:.4f}", f"{best_l:.2f}"))
            print("measured:", rows[-1], flush=True)
    print(f"{args.workers} workers (single-threaded processes), tol = {args.tol:g}, Cs = {Cs}, "
          f"StratifiedKFold({args.folds}) on the shuffled rows; best of {args.repeats}")
    table(rows, ["data", "n", "models (C x fold)", "search s", "its rounds",
                 "per model s", "their rounds", "per model / search", "worst gap",
                 "max score difference", "local search s"], args.markdown)


if __name__ == "__main__":
    main()
