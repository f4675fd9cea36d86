"""20 Newsgroups from raw text: a multiclass linear SVM in a scikit-learn Pipeline.

Twenty classes, one estimator: ``gpusvm.LinearSVC`` fits one-vs-rest itself (no
``OneVsRestClassifier`` needed), on LinearSVC's model and defaults, and certifies every
class's output by its duality gap.  Run from the repository root::

    python examples/news20_raw.py
    python examples/news20_raw.py --data ../shared/data/news20_raw/20news-bydate.tar.gz

It prints the test accuracy and fit time of the pipeline, the solver that ran and the worst
duality gap of the 20 outputs, and the same pipeline with scikit-learn's ``LinearSVC()`` on
its defaults (the same ``C``) for comparison.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC

import gpusvm
from gpusvm.datasets import read_20newsgroups_tar

DEFAULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "news20_raw" / \
    "20news-bydate.tar.gz"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DEFAULT), help="20news-bydate.tar.gz")
    parser.add_argument("--C", type=float, default=1.0, help="LinearSVC's C (default 1)")
    args = parser.parse_args(argv)

    train, y_train = read_20newsgroups_tar(args.data, "train")
    test, y_test = read_20newsgroups_tar(args.data, "test")
    print(f"20 Newsgroups: {len(train)} training and {len(test)} test documents, "
          f"{np.unique(y_train).size} groups")

    for name, clf in [("gpusvm.LinearSVC", gpusvm.LinearSVC(C=args.C)),
                      ("sklearn.svm.LinearSVC", LinearSVC(C=args.C))]:
        pipe = make_pipeline(TfidfVectorizer(), clf)
        start = time.perf_counter()
        pipe.fit(train, y_train)
        seconds = time.perf_counter() - start
        accuracy = pipe.score(test, y_test)
        print(f"{name:<24} C={args.C:g}: test accuracy {accuracy:.4f}, pipeline fit "
              f"{seconds:.1f} s")
        if isinstance(clf, gpusvm.LinearSVC):
            print(f"{'':<24} solver {clf.solver_}, {clf.coef_.shape[0]} outputs, worst "
                  f"duality gap {np.max(clf.duality_gap_):.2e} (tol {clf.tol:g}), backend "
                  f"{clf.backend_}")


if __name__ == "__main__":
    main()
