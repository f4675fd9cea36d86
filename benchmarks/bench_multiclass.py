"""Multiclass accuracy and fit time: gpusvm's estimators against LinearSVC and the OvR wrapper.

Run from the repository root (the data sets are read from ``../shared/data``)::

    python benchmarks/bench_multiclass.py                       # news20_raw, letter, news20_multiclass
    python benchmarks/bench_multiclass.py --datasets letter     # one data set
    python benchmarks/bench_multiclass.py --json multiclass.json

Data sets:

* ``news20_raw``: 20 Newsgroups "bydate" (raw text, 20 classes, 11,314 train /
  7,532 test documents) through ``TfidfVectorizer()`` (scikit-learn's defaults:
  unit-norm TF-IDF rows), fitted once on the training text;
* ``letter``: 26 classes, 16 dense features in [-1, 1] (15,000 / 5,000);
* ``news20_multiclass``: LIBSVM's news20 (20 classes, 62,061 term-count features,
  train file only), rows scaled to unit norm, split 80/20 with a fixed seed.

Rows, in this order: every estimator on its **defaults** first (LinearSVC(),
SDCASVC(), PegasosSVC(), and ``OneVsRestClassifier`` around the binary
estimator on its defaults, the way a multiclass fit had to be done before),
then the same ``C`` for all (``C = 1``): LinearSVC with the hinge and with the
squared hinge, SDCASVC (hinge, SDCA), SDCASVC (squared hinge, primal Newton),
each row naming the settings it ran with.  After each table, the ratio the issue
asks about: ``SDCASVC()`` against ``OneVsRestClassifier(SDCASVC())``, both on their
defaults with the same ``random_state``, interleaved over ``--ratio-seeds`` seeds
(the defaults' ``random_state=None`` draws another batch stream on every fit, and
the number of epochs, 10-18 on 20 Newsgroups, moves the time by half).  Every gpusvm row is first fitted once
on 300 training rows, so that numba's one-off compilation (cached on disk after
the first run on a machine) is not in the times.  Fit time is the ``fit`` call on the
prepared matrix (the TF-IDF transform is the same for every row and is timed
once, separately); wall seconds and CPU seconds of the process (every method
is single-threaded, so CPU time is robust to other load on the machine).  One
run per row.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.base import clone
from sklearn.datasets import load_svmlight_file
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import train_test_split
from sklearn.multiclass import OneVsRestClassifier
from sklearn.svm import LinearSVC

from gpusvm import PegasosSVC, SDCASVC
from gpusvm.datasets import normalize_rows, read_20newsgroups_tar

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
DATASETS = ("news20_raw", "letter", "news20_multiclass")


def load(name):
    """``(X_train, y_train, X_test, y_test, note)`` of a data set."""
    if name == "news20_raw":
        tar = DATA / "news20_raw" / "20news-bydate.tar.gz"
        train, y_train = read_20newsgroups_tar(tar, "train")
        test, y_test = read_20newsgroups_tar(tar, "test")
        start = time.perf_counter()
        vec = TfidfVectorizer()
        X_train = vec.fit_transform(train)
        X_test = vec.transform(test)
        note = f"TfidfVectorizer() fit+transform {time.perf_counter() - start:.1f} s"
        return X_train, y_train, X_test, y_test, note
    if name == "letter":
        X_train, y_train = load_svmlight_file(str(DATA / "letter" / "letter.scale"),
                                              n_features=16)
        X_test, y_test = load_svmlight_file(str(DATA / "letter" / "letter.scale.t"),
                                            n_features=16)
        return X_train.toarray(), y_train, X_test.toarray(), y_test, "dense, [-1, 1]"
    X, y = load_svmlight_file(str(DATA / "news20_multiclass" / "news20.bz2"))
    X = normalize_rows(X.astype(np.float64))
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0,
                                                        stratify=y)
    return X_train, y_train, X_test, y_test, "unit rows, 80/20 split (seed 0)"


def rows(C):
    """``(label, settings, estimator)`` of every row, defaults first."""
    return [
        ("LinearSVC", "defaults: C=1, squared hinge, dual='auto'", LinearSVC()),
        ("SDCASVC", "defaults: lam=1e-4, hinge, ovr, tol=1e-3", SDCASVC()),
        ("PegasosSVC", "defaults: lam=1e-4, hinge, ovr, doubling average", PegasosSVC()),
        ("OvR(SDCASVC)", "OneVsRestClassifier(SDCASVC()), defaults",
         OneVsRestClassifier(SDCASVC())),
        ("LinearSVC", f"C={C:g}, hinge", LinearSVC(C=C, loss="hinge")),
        ("LinearSVC", f"C={C:g}, squared hinge", LinearSVC(C=C)),
        ("SDCASVC", f"C={C:g}, hinge, sdca", SDCASVC(C=C)),
        ("SDCASVC", f"C={C:g}, squared hinge, newton",
         SDCASVC(C=C, loss="squared_hinge", solver="newton")),
    ]


def run(datasets, C, skip, seeds=0):
    results = []
    for name in datasets:
        X_train, y_train, X_test, y_test, note = load(name)
        n_classes = np.unique(y_train).size
        print(f"\n{name}: n={X_train.shape[0]} / {X_test.shape[0]}, d={X_train.shape[1]}, "
              f"{n_classes} classes; {note}")
        print(f"{'estimator':<14} {'settings':<50} {'accuracy':>9} {'wall s':>8} {'cpu s':>8}")
        chosen = [r for r in rows(C) if not any(s in f"{r[0]} {r[1]}" for s in skip)]
        few = np.linspace(0, X_train.shape[0] - 1, 300).astype(int)   # rows of every class
        with warnings.catch_warnings():               # compile the loops the rows will run
            warnings.simplefilter("ignore")
            for label, _, est in chosen:
                if not label.startswith("LinearSVC"):
                    clone(est).fit(X_train[few], y_train[few])
        for label, settings, est in chosen:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                wall, cpu = time.perf_counter(), time.process_time()
                est.fit(X_train, y_train)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            accuracy = float(np.mean(est.predict(X_test) == y_test))
            flags = sorted({w.category.__name__ for w in caught
                            if issubclass(w.category, Warning)
                            and w.category.__name__ == "ConvergenceWarning"})
            mark = " *" if flags else ""
            print(f"{label:<14} {settings:<50} {accuracy:>9.4f} {wall:>8.2f} {cpu:>8.2f}{mark}",
                  flush=True)
            results.append(dict(dataset=name, estimator=label, settings=settings,
                                accuracy=accuracy, wall_s=wall, cpu_s=cpu,
                                convergence_warning=bool(flags)))
        if seeds:
            ratio_rows(name, X_train, y_train, seeds, results)
    if any(r.get("convergence_warning") for r in results):
        print("\n* the fit ended with a ConvergenceWarning (max_iter reached before tol)")
    return results


def ratio_rows(name, X_train, y_train, seeds, results):
    """Native one-vs-rest against the wrapper, both on their defaults with the same
    ``random_state``, interleaved seed by seed (CPU seconds: robust to other load)."""
    print("SDCASVC() / OneVsRestClassifier(SDCASVC()), same random_state, CPU s:")
    ratios = []
    for seed in range(seeds):
        cpu = []
        for est in (SDCASVC(random_state=seed), OneVsRestClassifier(SDCASVC(random_state=seed))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.process_time()
                est.fit(X_train, y_train)
                cpu.append(time.process_time() - start)
        ratios.append(cpu[0] / cpu[1])
        print(f"  random_state={seed}: native {cpu[0]:.2f}  wrapper {cpu[1]:.2f}  "
              f"ratio {ratios[-1]:.3f}", flush=True)
        results.append(dict(dataset=name, estimator="ratio", seed=seed, native_cpu_s=cpu[0],
                            wrapper_cpu_s=cpu[1], ratio=ratios[-1]))
    print(f"  median ratio {np.median(ratios):.3f} (target <= 1/3)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--C", type=float, default=1.0, help="the common C (default 1)")
    parser.add_argument("--skip", nargs="*", default=[],
                        help="leave out rows whose label or settings contain one of these")
    parser.add_argument("--json", help="also write the measurements to this file")
    parser.add_argument("--ratio-seeds", type=int, default=3,
                        help="seeds of the native / wrapper comparison after each table "
                             "(default 3; 0 leaves it out)")
    args = parser.parse_args(argv)
    results = run(args.datasets, args.C, args.skip, args.ratio_seeds)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
