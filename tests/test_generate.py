"""gpusvm.datasets.make_sparse_classification: the law's properties, reproducibility, the
64-bit index path, and the refusals of bad parameters."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import SDCASVC
from gpusvm._generate import BLOCK_ROWS, LENGTH_SIGMA, _row_lengths
from gpusvm.datasets import make_sparse_classification, zipf_column_probabilities

N, D, M = 10_000, 3_000, 20.0     # n not a multiple of BLOCK_ROWS: a partial last block


@pytest.fixture(scope="module")
def made():
    return make_sparse_classification(N, D, nnz_per_row=M, zipf_exponent=1.1, flip_y=0.1,
                                      random_state=3, return_coef=True)


def test_canonical_unit_rows_of_positive_values(made):
    X, y, w, b = made
    assert sp.isspmatrix_csr(X) and X.shape == (N, D) and X.dtype == np.float32
    assert X.indices.dtype == np.int32 and X.indptr.dtype == np.int32
    X.check_format(full_check=True)
    assert X.has_canonical_format
    rows = X.copy()
    rows.sum_duplicates()
    rows.sort_indices()
    np.testing.assert_array_equal(rows.indices, X.indices)      # sorted, no duplicates
    assert np.all(X.data > 0)
    sq = np.asarray(X.multiply(X).astype(np.float64).sum(axis=1)).ravel()
    np.testing.assert_allclose(sq, 1.0, rtol=1e-6)              # unit rows, float32 rounding
    assert set(np.unique(y)) == {0, 1} and y.dtype == np.int64
    assert w.shape == (D,) and np.isfinite(b)


def test_row_lengths_vary_with_the_law_s_mean(made):
    X = made[0]
    lengths = np.diff(X.indptr)
    assert lengths.min() >= 1
    # repeated columns merge, so a row holds at most its draws: the mean is at most m ...
    draws = _row_lengths(np, np.random.default_rng(0), 200_000, M)
    assert abs(draws.mean() - M) < 5 * draws.std() / np.sqrt(draws.size)
    assert lengths.mean() <= M
    # ... and the lengths spread more than a Poisson law's (the log-normal factor)
    assert lengths.var() > 1.5 * lengths.mean()
    assert LENGTH_SIGMA > 0


def test_same_seed_same_set_whatever_the_chunks():
    kw = dict(nnz_per_row=15, random_state=11, flip_y=0.05)
    X1, y1 = make_sparse_classification(9_000, 2_000, chunk_rows=1, **kw)   # one block a chunk
    X2, y2 = make_sparse_classification(9_000, 2_000, chunk_rows=10 ** 6, **kw)
    for a in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(X1, a), getattr(X2, a))
    np.testing.assert_array_equal(y1, y2)
    X3, _ = make_sparse_classification(9_000, 2_000, nnz_per_row=15, random_state=12)
    assert X3.nnz != X1.nnz or not np.array_equal(X3.indices, X1.indices)


def test_random_state_forms():
    a = make_sparse_classification(500, 300, nnz_per_row=5, random_state=np.random.RandomState(1))
    b = make_sparse_classification(500, 300, nnz_per_row=5, random_state=np.random.RandomState(1))
    np.testing.assert_array_equal(a[0].indices, b[0].indices)
    c = make_sparse_classification(500, 300, nnz_per_row=5, random_state=np.random.default_rng(1))
    assert c[0].shape == (500, 300)


def test_zipf_head_matches_the_law(made):
    """Rows holding each hot column, against ``E_L[1 - (1 - P(j))^L]`` over the law's lengths
    (drawn independently), and the tail's share of the nonzeros."""
    X = made[0]
    counts = np.bincount(X.indices, minlength=D)
    P = zipf_column_probabilities(np.arange(D), D, 1.1)
    assert P.sum() == pytest.approx(1.0)
    assert np.all(np.diff(P) < 0)                               # column 0 the hottest
    L = _row_lengths(np, np.random.default_rng(123), 400_000, M)
    head = np.arange(20)
    expect = np.array([np.mean(1.0 - (1.0 - P[j]) ** L) for j in head])
    got = counts[head] / N
    sigma = np.sqrt(expect * (1 - expect) / N)
    assert np.all(np.abs(got - expect) < 5 * sigma + 2e-3)
    # beyond column 200 a column is rarely drawn twice in a row: nonzeros ~ draws there
    tail = np.arange(200, D)
    expect_tail = N * np.sum(1.0 - np.exp(-np.outer(P[tail], L[:4_000])).mean(axis=1))
    assert counts[tail].sum() == pytest.approx(expect_tail, rel=0.02)


def test_zipf_exponent_zero_is_uniform():
    X, _ = make_sparse_classification(4_000, 50, nnz_per_row=2, zipf_exponent=0.0, random_state=0)
    np.testing.assert_allclose(zipf_column_probabilities(np.arange(50), 50, 0.0), 1 / 50)
    counts = np.bincount(X.indices, minlength=50)
    assert counts.min() > 0.7 * counts.mean() and counts.max() < 1.3 * counts.mean()


def test_label_noise_rate_and_balance(made):
    X, y, w, b = made
    clean = (X.astype(np.float64) @ w + b > 0).astype(np.int64)
    rate = np.mean(clean != y)
    # a fraction flip_y = 0.1 gets a random label: half of those change
    assert abs(rate - 0.05) < 5 * np.sqrt(0.05 * 0.95 / N)
    assert abs(y.mean() - 0.5) < 0.05                           # the threshold balances
    X0, y0, w0, b0 = make_sparse_classification(N, D, nnz_per_row=M, zipf_exponent=1.1, flip_y=0.0,
                                                random_state=3, return_coef=True)
    scores = X0.astype(np.float64) @ w0 + b0
    keep = np.abs(scores) > 1e-6                                 # float32 rounding of the values
    np.testing.assert_array_equal((scores[keep] > 0).astype(np.int64), y0[keep])


def test_float64_values():
    X32, _ = make_sparse_classification(2_000, 500, nnz_per_row=8, random_state=5)
    X64, _ = make_sparse_classification(2_000, 500, nnz_per_row=8, random_state=5, dtype=np.float64)
    assert X64.dtype == np.float64
    np.testing.assert_array_equal(X64.indices, X32.indices)
    np.testing.assert_array_equal(X64.data.astype(np.float32), X32.data)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_forced_int64_indices_same_set_same_fit():
    kw = dict(nnz_per_row=12, random_state=2, flip_y=0.02)
    X32, y = make_sparse_classification(3_000, 800, **kw)
    X64, y64 = make_sparse_classification(3_000, 800, index_dtype=np.int64, **kw)
    assert X64.indices.dtype == np.int64 and X64.indptr.dtype == np.int64
    np.testing.assert_array_equal(y, y64)
    np.testing.assert_array_equal(X64.indptr, X32.indptr)
    np.testing.assert_array_equal(X64.data, X32.data)
    est = dict(C=1.0, random_state=0, backend="numpy", dtype="float64", batch_size=64,
               max_iter=100)
    a = SDCASVC(**est).fit(X32, y)
    c = SDCASVC(**est).fit(X64, y)
    np.testing.assert_array_equal(a.coef_, c.coef_)
    np.testing.assert_array_equal(a.intercept_, c.intercept_)


def test_density_gives_the_mean_draws():
    X1, _ = make_sparse_classification(1_000, 400, density=0.025, random_state=4)
    X2, _ = make_sparse_classification(1_000, 400, nnz_per_row=10, random_state=4)
    np.testing.assert_array_equal(X1.indices, X2.indices)


def test_blocks_are_the_unit_of_the_seed():
    """The first block's rows do not depend on ``n``: a longer set extends a shorter one."""
    a, _ = make_sparse_classification(BLOCK_ROWS, 500, nnz_per_row=6, random_state=9)
    b, _ = make_sparse_classification(BLOCK_ROWS + 7, 500, nnz_per_row=6, random_state=9)
    np.testing.assert_array_equal(b[:BLOCK_ROWS].toarray(), a.toarray())


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(n_samples=0), "n_samples must be an integer >= 1, got 0"),
    (dict(n_features=2.5), "n_features must be an integer >= 1, got 2.5"),
    (dict(n_features=2**31), "n_features must be below 2**31 (column ids are int32), got 2147483648"),
    (dict(nnz_per_row=0.5), "nnz_per_row must be a finite number in [1.0, 6400.0], got 0.5"),
    (dict(nnz_per_row=5, density=0.1), "give nnz_per_row or density, not both"),
    (dict(density=0.0), "density must be a finite number in (0.0, 1.0], got 0.0"),
    (dict(density=0.001), "density * n_features must be at least 1 (one nonzero per row), "
                          "got 0.001 * 100 = 0.1"),
    (dict(zipf_exponent=-1), "zipf_exponent must be a finite number in [0.0, 10.0], got -1"),
    (dict(flip_y=1.5), "flip_y must be a finite number in [0.0, 1.0], got 1.5"),
    (dict(flip_y=float("nan")), "flip_y must be a finite number in [0.0, 1.0], got nan"),
    (dict(chunk_rows=0), "chunk_rows must be an integer >= 1, got 0"),
    (dict(dtype=np.int32), "dtype must be float32 or float64, got <class 'numpy.int32'>"),
    (dict(index_dtype=np.int16), "index_dtype must be None, numpy.int32 or numpy.int64, got "
                                 "<class 'numpy.int16'>"),
    (dict(random_state=-1), "random_state must be a non-negative integer, got -1"),
    (dict(random_state="x"), "random_state must be None, a non-negative integer, a numpy "
                             "RandomState or a numpy Generator, got 'x'"),
    (dict(device="gpu"), "device must be None, 'cpu' or 'cuda', got 'gpu'"),
])
def test_bad_parameters(kwargs, message):
    args = dict(n_samples=10, n_features=100, nnz_per_row=None)
    args.update(kwargs)
    if "density" in kwargs and "nnz_per_row" not in kwargs:
        args.pop("nnz_per_row")
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        make_sparse_classification(**args)


def test_int32_refused_past_its_offsets(monkeypatch):
    import gpusvm._generate as gen
    monkeypatch.setattr(gen, "_INT32_MAX", 100)
    with pytest.raises(ValueError, match=r"the set draws \d+ nonzeros, more than int32 offsets "
                                         r"hold \(100\); use index_dtype=numpy.int64 or None"):
        make_sparse_classification(50, 100, nnz_per_row=5, random_state=0, index_dtype=np.int32)
    X, _ = make_sparse_classification(50, 100, nnz_per_row=5, random_state=0)
    assert X.indptr.dtype == np.int64 and X.indices.dtype == np.int64    # chosen by the bound


# ------------------------------------------------------------------ the device path, with NumPy as CuPy
class _FakeRandomState:
    """CuPy's ``RandomState`` signatures (a ``dtype`` on every draw) over NumPy's."""

    def __init__(self, seed):
        self._rs = np.random.RandomState(seed % 2**32)

    def standard_normal(self, size, dtype):
        return self._rs.standard_normal(size).astype(dtype)

    def poisson(self, lam, dtype):
        return self._rs.poisson(lam).astype(dtype)

    def random_sample(self, size, dtype):
        return self._rs.random_sample(size).astype(dtype)


class _FakeCupy:
    """NumPy standing for CuPy: the array functions the law calls, and cuRAND's RandomState."""

    class random:  # noqa: N801  (cupy.random)
        RandomState = _FakeRandomState

    def __getattr__(self, name):
        return getattr(np, name)


def test_device_path_runs_the_same_law_on_the_array_module(monkeypatch):
    import types

    import gpusvm._generate as gen
    made = []

    def csr_matrix(arrays, shape, copy):
        made.append(copy)
        return sp.csr_matrix(arrays, shape=shape)

    fake = (_FakeCupy(), types.SimpleNamespace(csr_matrix=csr_matrix))
    monkeypatch.setattr(gen, "_array_module", lambda device: fake if device == "cuda" else (np, None))
    X, y, w, b = make_sparse_classification(6_000, 1_500, nnz_per_row=12, random_state=4,
                                            flip_y=0.0, device="cuda", return_coef=True)
    assert made == [False]                                      # the device's arrays, no copy
    X.check_format(full_check=True)
    assert X.indptr.dtype == np.int32 and np.all(X.data > 0)
    sq = np.asarray(X.multiply(X).astype(np.float64).sum(axis=1)).ravel()
    np.testing.assert_allclose(sq, 1.0, rtol=1e-6)
    scores = X.astype(np.float64) @ w + b
    keep = np.abs(scores) > 1e-6
    np.testing.assert_array_equal((scores[keep] > 0).astype(np.int64), y[keep])
    host, _ = make_sparse_classification(6_000, 1_500, nnz_per_row=12, random_state=4)
    # the same law (other generators): the head columns' row fractions agree
    hot = np.bincount(X.indices, minlength=1_500)[:5] / 6_000
    hot_host = np.bincount(host.indices, minlength=1_500)[:5] / 6_000
    np.testing.assert_allclose(hot, hot_host, atol=0.03)
    fake[0].__version__ = "14.0.2"                # before int64 sparse indices: refused
    with pytest.raises(ValueError, match=r"^the set draws \d+ nonzeros, which need int64 "
                                         r"indices, and CuPy 14.0.2's cupyx.scipy.sparse holds "
                                         r"int32 ones only; install CuPy >= 14.1"):
        make_sparse_classification(100, 100, nnz_per_row=3, device="cuda", index_dtype=np.int64)
    fake[0].__version__ = "14.1.0"                # int64 on the device: the same set
    seen = []
    fake[1].csr_matrix = lambda arrays, shape, copy: seen.append(arrays[1].dtype) or \
        sp.csr_matrix(arrays, shape=shape)
    X64, _ = make_sparse_classification(6_000, 1_500, nnz_per_row=12, random_state=4,
                                        flip_y=0.0, device="cuda", index_dtype=np.int64)
    assert seen == [np.int64]
    assert (X64 != X).nnz == 0


# ------------------------------------------------------------------ balance, sizes, noise
@pytest.mark.parametrize("zipf_exponent", [8.0, 10.0])
def test_a_very_hot_head_still_gives_balanced_classes(zipf_exponent):
    """With s >= 8 most rows hold column 0 alone: identical rows, tied at the threshold, that
    ``score > t`` labelled 0 (98-99 % of one class).  The tied rows now take the share of
    label 1 that balances the classes; every untied row keeps the planted model's label."""
    X, y, w, b = make_sparse_classification(20_000, 1_000, nnz_per_row=5, flip_y=0.0,
                                            zipf_exponent=zipf_exponent, random_state=0,
                                            return_coef=True)
    only_0 = (np.diff(X.indptr) == 1) & (X.indices[X.indptr[:-1]] == 0)
    assert only_0.mean() > 0.5                                 # the tie is most of the set
    assert abs(y.mean() - 0.5) < 0.02
    assert 0.4 < y[only_0].mean() < 0.6
    score = X.astype(np.float64) @ w + b
    clear = ~only_0 & (np.abs(score) > 1e-6)
    np.testing.assert_array_equal(y[clear], (score[clear] > 0).astype(np.int64))


def test_one_feature_is_refused():
    with pytest.raises(ValueError, match=r"^n_features must be at least 2, got 1: with one "
                                         r"column every unit row is the same \[1\.0\]"):
        make_sparse_classification(100, 1, nnz_per_row=1)


@pytest.mark.parametrize(("kwargs", "name"), [
    (dict(n_samples=10 ** 15, n_features=1000), "n_samples=1000000000000000"),
    (dict(n_samples=1000, n_features=2 ** 31 - 1), "n_features=2147483647"),
])
def test_sizes_beyond_memory_are_refused_before_any_draw(monkeypatch, kwargs, name):
    """10**15 rows ran the first pass on for days, 2**31 - 1 columns allocated two 16 GiB
    tables: both refused at once, naming the parameter and the bytes."""
    import gpusvm._generate as gen
    monkeypatch.setattr(gen, "available_memory", lambda xp=np: 8 << 30)
    monkeypatch.setattr(gen._Law, "lengths", lambda *a: pytest.fail("a draw was made"))
    with pytest.raises(ValueError) as info:
        make_sparse_classification(nnz_per_row=5, **kwargs)
    msg = str(info.value)
    need = int(re.search(r"needs about (\d+) bytes", msg).group(1))
    n, d = kwargs["n_samples"], kwargs["n_features"]
    assert msg.startswith(name + " needs about") and "\n" not in msg
    assert need >= max(8 * n * 5, 8 * d)                       # the CSR's values and indices, w
    assert msg.endswith(f"more than the {8 << 30} bytes of memory available; ask a smaller "
                        f"{name.split('=')[0]}")
    assert gen.available_memory() is None or gen.available_memory() > 0


def test_more_columns_than_draws_need_no_idf_table(monkeypatch):
    """A set drawing fewer nonzeros than it has columns computes each nonzero's idf (the
    same function) instead of a table of d values: the values agree with the table's."""
    import gpusvm._generate as gen
    kw = dict(nnz_per_row=5, random_state=2, dtype=np.float64)
    X, y = make_sparse_classification(100, 100_000, **kw)
    tables = []
    real = gen._Law.idf

    def forced(self):
        self.n, n = 10 ** 6, self.n                 # as if the set drew more: the table
        try:
            table = real(self)
        finally:
            self.n = n
        tables.append(table.size)
        return table
    monkeypatch.setattr(gen._Law, "idf", forced)
    X2, y2 = make_sparse_classification(100, 100_000, **kw)
    assert tables == [100_000]
    np.testing.assert_array_equal(X.indices, X2.indices)
    np.testing.assert_allclose(X.data, X2.data, rtol=1e-14)
    np.testing.assert_array_equal(y, y2)


def test_margin_noise_mislabels_near_the_boundary_and_keeps_the_rest():
    """``margin_noise`` r: a row's label is the planted model's sign of ``x . w + b + r sigma
    Z``: with r = 0 the default set itself; with r > 0 the disagreement with the planted
    model grows with r, is balanced, and concentrates at small margins."""
    kw = dict(nnz_per_row=10, flip_y=0.0, random_state=5, return_coef=True)
    X, y0, w, b = make_sparse_classification(20_000, 2_000, **kw)
    _, y_same, _, _ = make_sparse_classification(20_000, 2_000, margin_noise=0.0, **kw)
    np.testing.assert_array_equal(y0, y_same)
    score = X.astype(np.float64) @ w + b
    sigma = score[:BLOCK_ROWS].std()
    wrong = []
    for r in (0.1, 0.3, 1.0):
        X_r, y_r, w_r, b_r = make_sparse_classification(20_000, 2_000, margin_noise=r, **kw)
        assert (X_r != X).nnz == 0 and np.array_equal(w_r, w) and b_r == b
        bad = y_r != y0
        wrong.append(bad.mean())
        near = np.abs(score) < r * sigma
        assert bad[near].mean() > 2 * bad[~near].mean()
        # P(label differs) = P(|r sigma Z| pushes across) = E Phi(-|s| / (r sigma)): independent
        from scipy.stats import norm
        expect = norm.cdf(-np.abs(score) / (r * sigma)).mean()
        assert abs(bad.mean() - expect) < 4 * np.sqrt(expect / 20_000) + 0.002
    assert wrong[0] < wrong[1] < wrong[2]
    with pytest.raises(ValueError, match=r"^margin_noise must be a finite number in \[0.0, "):
        make_sparse_classification(10, 100, margin_noise=-0.1)
