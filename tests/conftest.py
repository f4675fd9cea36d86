"""Shared fixtures: the real data sets in ``../shared/data``, each loaded at most once per session.

The data directory sits beside the repository (``<repo>/../shared/data``). Tests
that need it FAIL, never skip, when it is missing: the real-data tests are part
of the contract.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm.datasets import load_svmlight

REPO_ROOT = Path(__file__).resolve().parents[1]
#: ``$GPUSVM_DATA`` when set (a machine with the data inside the checkout, as the GPU session
#: stages it), else ``<repo>/../shared/data``
SHARED_DATA = Path(os.environ["GPUSVM_DATA"]).resolve() if os.environ.get("GPUSVM_DATA") else \
    (REPO_ROOT / ".." / "shared" / "data").resolve()


def pytest_configure(config):
    """Stop at once, with what to install, when the CPU kernel emulator (``emulator/``, the
    device tests' runtime and its own tests' subject) is missing, rather than failing its
    three hundred tests one by one."""
    import importlib.util  # noqa: PLC0415
    if importlib.util.find_spec("gpusvm_emulator") is None:
        raise pytest.UsageError(
            "the tests need gpusvm's CPU kernel emulator, a package of its own in emulator/: "
            "pip install ./emulator (the README's test command installs it with the test extra)")


class Dataset(NamedTuple):
    """A train/test pair of a real data set (CSR float32, int32 indices; labels in {-1, +1}).

    Shared by every test of the session: never modify the arrays in place (copy first).
    """

    name: str
    X: sp.csr_matrix
    y: np.ndarray
    X_test: sp.csr_matrix
    y_test: np.ndarray


#: file names and feature counts (from each folder's PROVENANCE.txt)
DATASETS = {
    "a9a": ("a9a/a9a", "a9a/a9a.t", 123),
    "rcv1_small": ("rcv1_small/vw_rcv1_small.svm", "rcv1_small/vw_rcv1_small_test.svm", 47236),
    "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", "imdb/imdb_tfidf_unigram.test.svm.gz", 74849),
    "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz",
               "news20/news20bydate_binary_uni+bigram.test.svm.gz", 1181833),
}


def shared_data_dir() -> Path:
    """``<repo>/../shared/data``; fails the calling test with a clear message when missing."""
    if not SHARED_DATA.is_dir():
        pytest.fail(
            f"the real data sets are missing: expected the directory {SHARED_DATA} "
            "(../shared/data relative to the repository root, with a9a/, rcv1_small/, imdb/, "
            "news20/ ...); place the shared data folder beside the repository and rerun",
            pytrace=False)
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ``../shared/data`` (relative to the repository root); FAILS when it is missing."""
    return shared_data_dir()


_CACHE: dict = {}


def load_dataset(name: str) -> Dataset:
    """Load a real data set once per session (train and test, with the recorded n_features)."""
    if name not in _CACHE:
        root = shared_data_dir()
        train, test, d = DATASETS[name]
        for rel in (train, test):
            if not (root / rel).is_file():
                pytest.fail(f"data file {root / rel} is missing from the shared data folder",
                            pytrace=False)
        X, y = load_svmlight(root / train, n_features=d)
        X_test, y_test = load_svmlight(root / test, n_features=d)
        _CACHE[name] = Dataset(name, X, y, X_test, y_test)
    return _CACHE[name]


@pytest.fixture(scope="session")
def a9a() -> Dataset:
    """a9a from ../shared/data: 32,561 train / 16,281 test rows, 123 features."""
    return load_dataset("a9a")


@pytest.fixture(scope="session")
def rcv1_small() -> Dataset:
    """RCV1 CCAT slices: 1,000 train / 500 test unit rows, 47,236 features."""
    return load_dataset("rcv1_small")


@pytest.fixture(scope="session")
def imdb() -> Dataset:
    """IMDB TF-IDF unigrams: 25,000 / 25,000 unit rows, 74,849 features."""
    return load_dataset("imdb")


@pytest.fixture(scope="session")
def news20() -> Dataset:
    """20 Newsgroups binary, unigrams+bigrams: 11,314 / 7,532 unit rows, 1,181,833 features."""
    return load_dataset("news20")


def assert_near_w_alpha(W, W_alpha, gap, lam):
    """Per output, a certified model and ``w(alpha)`` lie within the certificate's bound of
    each other: both are within ``sqrt(2 gap / lam)`` of ``w*`` (``lam/2 ||w - w*||^2 <=
    P(w) - P*`` and ``lam/2 ||w(alpha) - w*||^2 <= D* - D(alpha)``, each at most the gap)."""
    W_alpha = np.asarray(W_alpha).reshape(np.shape(W_alpha)[0], -1)
    dist = np.linalg.norm(np.asarray(W).reshape(W_alpha.shape) - W_alpha, axis=0)
    bound = 2 * np.sqrt(2 * np.maximum(np.ravel(gap), 0.0) / lam) + 1e-12
    assert np.all(dist <= bound), (dist, bound)


def zipf_rows(n, d, M, seed=0, max_row=8):
    """A small CSR whose columns follow a Zipf law (column 0 in nearly every row: the hot
    columns of the device kernels' tests), rows of 1 to ``max_row - 1`` distinct columns, and
    M random one-vs-rest label columns (n, M) in {-1, +1}."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, d + 1)
    p /= p.sum()
    rows = [np.unique(rng.choice(d, size=rng.integers(1, max_row), p=p)) for _ in range(n)]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    X = sp.csr_matrix((rng.uniform(0.1, 1.0, indptr[-1]), np.concatenate(rows), indptr),
                      shape=(n, d))
    return X, np.where(rng.random((n, M)) < 0.5, -1.0, 1.0)
