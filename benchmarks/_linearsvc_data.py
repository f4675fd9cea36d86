"""The data sets of ``bench_linearsvc.py``: train/test splits as a LinearSVC user would load them.

Every loader returns ``(X_train, y_train, X_test, y_test, note)`` with float64 data (CSR for
the sparse sets, dense arrays for the dense ones), read from ``../shared/data``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sklearn.model_selection import train_test_split

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

#: name: (train file, test file or None (80/20 split), n_features, dense, note)
SVMLIGHT = {
    "a9a": ("a9a/a9a", "a9a/a9a.t", 123, False, "binary features"),
    "w8a": ("w8a/w8a", None, 300, False, "80/20 stratified split (seed 0)"),
    "ijcnn1": ("ijcnn1/ijcnn1.trn.bz2", "ijcnn1/ijcnn1.tst.bz2", 22, True, "dense"),
    "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", "imdb/imdb_tfidf_unigram.test.svm.gz",
             74849, False, "TF-IDF, unit rows"),
    "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz",
               "news20/news20bydate_binary_uni+bigram.test.svm.gz", 1181833, False,
               "binary, uni+bigrams, unit rows"),
    "letter": ("letter/letter.scale", "letter/letter.scale.t", 16, True,
               "26 classes, dense, [-1, 1]"),
    "pendigits": ("pendigits/pendigits", "pendigits/pendigits.t", 16, True,
                  "10 classes, dense, scaled to [0, 1] (x / 100)"),
    "news20_multiclass": ("news20_multiclass/news20.bz2", None, 62061, False,
                          "20 classes, unit rows, 80/20 stratified split (seed 0)"),
}
#: every data set, in the order of the table
DATASETS = ("a9a", "w8a", "ijcnn1", "imdb", "news20", "letter", "pendigits",
            "news20_multiclass", "news20_tfidf")
#: data sets outside the default table (``--datasets`` names them)
EXTRA = ("a9a_separable",)


def _read(rel, d):
    X, y = load_svmlight_file(str(DATA / rel), n_features=d, dtype=np.float64)
    X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                      shape=X.shape)     # scikit-learn reads int64 indices; LinearSVC wants int32
    return X, y


def separable(n_train=6500, n_test=3000, margin=1.0, seed=0):
    """A linearly separable set of a9a's dimensions: ``(X, y, X_test, y_test, note)``.

    a9a's rows (123 binary features, train and test files) with 3 random binary features
    more (126), labelled by the sign of ``<w, x> + b`` for a planted ``w`` (seeded normal
    weights, ``b`` to put a quarter of the rows positive, as a9a), keeping only the rows at
    least ``margin`` from the hyperplane: separable with a margin, as many rows as a9a's
    files hold at that distance, the first ``n_train`` for training and the next
    ``n_test`` for testing.
    """
    rng = np.random.default_rng(seed)
    X1, _ = _read(*SVMLIGHT["a9a"][0:3:2])
    X2, _ = _read(SVMLIGHT["a9a"][1], SVMLIGHT["a9a"][2])
    X = sp.vstack([X1, X2]).tocsr()
    extra = sp.csr_matrix((rng.random((X.shape[0], 3)) < 0.5).astype(np.float64))
    X = sp.hstack([X, extra]).tocsr()
    X = X[rng.permutation(X.shape[0])]
    w = rng.standard_normal(X.shape[1])
    score = X @ w
    score -= np.quantile(score, 0.75)
    keep = np.flatnonzero(np.abs(score) >= margin)[:n_train + n_test]
    X, y = X[keep], np.where(score[keep] > 0, 1.0, -1.0)
    X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                      shape=X.shape)
    note = (f"a9a's rows, 3 random binary features more, labelled by a planted w (seed {seed}); "
            f"separable with margin {margin} / ||w|| = {margin / np.linalg.norm(w):.3f}")
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:], note


def load(name):
    """``(X_train, y_train, X_test, y_test, note)`` of the data set ``name``."""
    if not DATA.is_dir():
        raise SystemExit(f"the real data sets are missing: expected {DATA}")
    if name == "a9a_separable":
        return separable()
    if name == "news20_tfidf":
        from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: PLC0415

        from gpusvm.datasets import read_20newsgroups_tar  # noqa: PLC0415
        tar = DATA / "news20_raw" / "20news-bydate.tar.gz"
        train, y_train = read_20newsgroups_tar(tar, "train")
        test, y_test = read_20newsgroups_tar(tar, "test")
        start = time.perf_counter()
        vec = TfidfVectorizer()
        X_train = vec.fit_transform(train)
        X_test = vec.transform(test)
        note = (f"20 classes, TfidfVectorizer() (fit+transform "
                f"{time.perf_counter() - start:.1f} s)")
        return X_train, y_train, X_test, y_test, note
    train, test, d, dense, note = SVMLIGHT[name]
    X, y = _read(train, d)
    if test is None:
        X, X_test, y, y_test = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    else:
        X_test, y_test = _read(test, d)
    if name == "news20_multiclass":
        from gpusvm.datasets import normalize_rows  # noqa: PLC0415
        X, X_test = normalize_rows(X), normalize_rows(X_test)
    if dense:
        X, X_test = X.toarray(), X_test.toarray()
    if name == "pendigits":
        X, X_test = X / 100.0, X_test / 100.0
    return X, y, X_test, y_test, note


def load_raw_pendigits():
    """pendigits as read (values 0-100, dense): the unscaled case of the row-norm hint."""
    X, y = _read(SVMLIGHT["pendigits"][0], 16)
    X_test, y_test = _read(SVMLIGHT["pendigits"][1], 16)
    return X.toarray(), y, X_test.toarray(), y_test


def describe(X):
    """``n x d, nnz per row`` in words."""
    nnz = X.nnz if sp.issparse(X) else int(np.count_nonzero(X))
    return f"{X.shape[0]} x {X.shape[1]}, {nnz / X.shape[0]:.0f} nnz/row"
