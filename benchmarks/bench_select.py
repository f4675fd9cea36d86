"""Choosing C by cross-validation: SDCASVCCV against GridSearchCV(LinearSVC) and LIBLINEAR's search.

Run from the repository root (the data sets are read from ``../shared/data``)::

    python benchmarks/bench_select.py                        # every data set
    python benchmarks/bench_select.py --datasets a9a imdb    # some
    python benchmarks/bench_select.py --scaling a9a          # SDCASVCCV on 1 .. all cores
    python benchmarks/bench_select.py --defaults-only        # SDCASVCCV's default solver only
    python benchmarks/bench_select.py --json select.json

The task (issue "Many models in one pass"): 12 values of ``C`` from 2^-6 to 2^5, 5
stratified folds (``StratifiedKFold(5, shuffle=True, random_state=0)``), the squared
hinge, on the training file of each data set.  Rows, in this order:

* ``SDCASVCCV(Cs=..., cv=..., loss="squared_hinge")`` on its defaults otherwise
  (solver and ``n_jobs`` chosen by the estimator), then with ``solver="newton"``
  and ``solver="sdca"`` where the default is the other one;
* ``GridSearchCV(LinearSVC(), {"C": Cs}, cv=cv)`` (one core, refit included);
* modelled, not measured: the time an H100 would spend in the Newton search's
  sparse-times-block products (their count and width as the CPU run made them, each
  modelled by :func:`roofline.block_product_seconds` (``benchmarks/roofline.py``); the host's share of the
  search, line searches and scoring, left out);
* LIBLINEAR's own warm-start search, ``train -s 2 -C -v 5`` (liblinear-official;
  the squared hinge, primal solver), which picks its own grid (from its smallest
  useful ``C`` up to 1024, stopping early) and its own folds: its time, chosen ``C``
  and CV accuracy are reported as it gives them (multiclass: LIBLINEAR's
  one-vs-rest).

Each row: wall seconds of the whole search and refit, the chosen ``C``, its mean CV
accuracy on the common folds (LIBLINEAR's: on its own folds), and the ratio of the
time to GridSearchCV's and to LIBLINEAR's (the issue's targets: at most 1/8 of
GridSearchCV's, at most LIBLINEAR's).  One run per row; every gpusvm estimator is
first fitted once on a few hundred rows so that numba's one-off compilation is not
in the times.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.svm import LinearSVC

from gpusvm import SDCASVCCV
from gpusvm.datasets import load_svmlight, normalize_rows

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
DATASETS = ("a9a", "w8a", "imdb", "news20", "letter", "news20_multiclass")
CS = 2.0 ** np.arange(-6, 6)


def load(name):
    """``(X, y)``: the training rows of a data set (CSR float32)."""
    files = {
        "a9a": ("a9a/a9a", 123),
        "w8a": ("w8a/w8a", 300),
        "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", 74849),
        "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz", 1181833),
        "letter": ("letter/letter.scale", 16),
    }
    if name == "news20_multiclass":
        X, y = load_svmlight(str(DATA / "news20_multiclass" / "news20.bz2"))[:2]
        return normalize_rows(X.astype(np.float32)), y
    path, d = files[name]
    X, y = load_svmlight(str(DATA / path), n_features=d)[:2]
    return X, y


def liblinear_search(X, y):
    """LIBLINEAR's ``train -s 2 -C -v 5``: seconds, chosen C, CV accuracy."""
    from liblinear.liblinearutil import parameter, problem, train  # noqa: PLC0415

    prob = problem(np.asarray(y, dtype=np.float64), sp.csr_matrix(X, dtype=np.float64))
    start = time.perf_counter()
    best_c, _, rate = train(prob, parameter("-s 2 -C -v 5 -q"))
    return time.perf_counter() - start, float(best_c), float(rate)


def gridsearch(X, y, cv):
    est = GridSearchCV(LinearSVC(), {"C": list(CS)}, cv=cv)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    seconds = time.perf_counter() - start
    return seconds, float(est.best_params_["C"]), float(est.best_score_), est


def ours(X, y, cv, **kw):
    est = SDCASVCCV(Cs=CS, cv=cv, loss="squared_hinge", random_state=0, **kw)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est.fit(X, y)
    seconds = time.perf_counter() - start
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return seconds, est.C_, float(est.scores_.mean(axis=0).max()), est, warned


def modelled_h100(X, est):
    """Modelled seconds of the Newton search's sparse-times-block products on an H100: the
    products it made (``search_products_``, counted on the CPU) at their mean width, each
    as :func:`roofline.block_product_seconds` (``benchmarks/roofline.py``) models it.  Not measured."""
    from roofline import DEVICES, block_product_seconds  # noqa: PLC0415

    products, columns = est.search_products_
    if not products:
        return None
    width = max(1, round(columns / products))
    return products * block_product_seconds(X, width, DEVICES["h100"])


def warm_up(X, y):
    """Compile the loops a search runs (numba caches them on disk afterwards)."""
    rows = np.random.default_rng(0).permutation(X.shape[0])[:400]
    for solver in ("sdca", "newton"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            SDCASVCCV(Cs=[1.0], cv=2, loss="squared_hinge", solver=solver).fit(X[rows], y[rows])


def run(name, *, peers=True, extra=True):
    X, y = load(name)
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    warm_up(X, y)
    rows = []
    t, c, acc, est, warned = ours(X, y, cv)
    rows.append(("SDCASVCCV (defaults: solver=%s)" % est.solver_, t, c, acc, warned))
    newton_est = est
    if extra:
        other = "sdca" if est.solver_ == "newton" else "newton"
        t2, c2, acc2, est2, warned2 = ours(X, y, cv, solver=other)
        rows.append((f"SDCASVCCV (solver={other!r})", t2, c2, acc2, warned2))
        newton_est = est2 if other == "newton" else est
    modelled = modelled_h100(X, newton_est) if newton_est.solver_ == "newton" else None
    grid = lib = None
    if peers:
        grid = gridsearch(X, y, cv)
        rows.append(("GridSearchCV(LinearSVC())", grid[0], grid[1], grid[2], False))
        try:
            lib = liblinear_search(X, y)
            rows.append(("LIBLINEAR train -s 2 -C -v 5 (own grid, folds)", lib[0], lib[1],
                         lib[2], False))
        except ImportError:
            print("  (liblinear-official is not installed: pip install liblinear-official)")
    print(f"\n{name}: {X.shape[0]} x {X.shape[1]}, {np.unique(y).size} classes, "
          f"{len(CS)} C x 5 folds")
    print(f"{'method':52s} {'seconds':>8s} {'C':>9s} {'CV acc':>7s} {'/grid':>6s} {'/liblin':>7s}")
    if modelled is not None:
        rows.append(("  modelled, H100: the Newton search's block products", modelled,
                     newton_est.C_, float("nan"), False))
    out = []
    for label, seconds, c, acc, warned in rows:
        r_grid = seconds / grid[0] if grid else float("nan")
        r_lib = seconds / lib[0] if lib else float("nan")
        flag = " (ConvergenceWarning)" if warned else ""
        print(f"{label:52s} {seconds:8.2f} {c:9.4g} {acc:7.4f} {r_grid:6.3f} {r_lib:7.3f}{flag}")
        out.append(dict(dataset=name, method=label, seconds=seconds, C=c, cv_accuracy=acc,
                        ratio_grid=r_grid, ratio_liblinear=r_lib, convergence_warning=warned))
    return out


def scaling(name):
    """SDCASVCCV's time on 1 .. all cores (``n_jobs``)."""
    X, y = load(name)
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    warm_up(X, y)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"\n{name}: SDCASVCCV against n_jobs")
    base = None
    out = []
    for jobs in range(1, cores + 1):
        t, c, acc, est, _ = ours(X, y, cv, n_jobs=jobs)
        base = base or t
        print(f"  n_jobs={jobs}: {t:7.2f} s  speed-up {base / t:4.2f}  (solver={est.solver_})")
        out.append(dict(dataset=name, n_jobs=jobs, seconds=t, speedup=base / t))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--scaling", nargs="*", default=None, choices=DATASETS,
                        help="time SDCASVCCV on 1 .. all cores for these data sets")
    parser.add_argument("--no-peers", action="store_true", help="gpusvm's rows only")
    parser.add_argument("--defaults-only", action="store_true",
                        help="SDCASVCCV on its defaults only (not the other solver too)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    results = []
    if args.scaling is not None:
        for name in args.scaling or ["a9a"]:
            results += scaling(name)
    else:
        for name in args.datasets:
            results += run(name, peers=not args.no_peers, extra=not args.defaults_only)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
