"""Threads inside one fit: n_jobs, fixed row blocks, repeatable results (issue: every core)."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import LinearSVC, PegasosSVC, SDCASVC, _threads
from gpusvm._threads import BlockPool, nnz_blocks, resolve_n_jobs, usable_cores

numba = pytest.importorskip("numba")

from gpusvm.backends._threaded import ThreadedCSR  # noqa: E402


def _data(n=1500, d=300, density=0.04, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed, dtype=np.float64)
    X.data += 0.1
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X, dtype=dtype)
    X.sum_duplicates()                           # canonical, as the estimators hand it on
    w = rng.standard_normal(d)
    y = np.where(X @ w > 0, 1, -1)
    y[rng.random(n) < 0.05] *= -1
    return X, y


@pytest.fixture
def small_threshold(monkeypatch):
    """Threads for every fit of more than 1,000 nonzeros (the test sets are small), up to 8
    of them whatever the cores (the blocks' arithmetic does not depend on the cores)."""
    monkeypatch.setattr(_threads, "usable_cores", lambda: 8)
    monkeypatch.setattr(_threads, "THREAD_MIN_NNZ", 1000)
    monkeypatch.setattr(_threads, "SDCA_THREAD_MIN_NNZ", 1000)
    monkeypatch.setattr(_threads, "SDCA_MIN_NNZ_PER_FEATURE", 0)
    monkeypatch.setattr(_threads, "SDCA_MAX_THREADS", 8)


# ------------------------------------------------------------------ n_jobs
def test_n_jobs_follows_scikit_learns_convention():
    cores = usable_cores()
    assert resolve_n_jobs(None) == cores == resolve_n_jobs(-1)
    assert resolve_n_jobs(-2) == max(1, cores - 1)
    assert resolve_n_jobs(3) == min(3, cores) and resolve_n_jobs(1) == 1
    with pytest.raises(ValueError, match=r"^n_jobs == 0 has no meaning"):
        resolve_n_jobs(0)
    with pytest.raises(ValueError, match=r"^n_jobs must be an int or None, got 1.5"):
        resolve_n_jobs(1.5)


def test_usable_cores_respects_affinity_and_an_openmp_limit(monkeypatch):
    import os  # noqa: PLC0415

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this OS")
    assert usable_cores() <= len(os.sched_getaffinity(0))

    class Limited:
        def info(self):
            return [{"user_api": "blas", "num_threads": 64},
                    {"user_api": "openmp", "num_threads": 1}]
    monkeypatch.setattr(_threads, "_controller", lambda: Limited())
    assert usable_cores() == 1 and resolve_n_jobs(None) == 1


def test_a_small_fit_does_not_probe_the_cores(monkeypatch):
    def probe():
        raise AssertionError("the cores were probed")
    monkeypatch.setattr(_threads, "usable_cores", probe)
    assert _threads.fit_n_jobs(None, 10) == 1 == _threads.fit_n_jobs(-1, 10)
    X, y = _data(n=100, d=20, density=0.2)
    assert SDCASVC(backend="numba").fit(X, y).n_threads_ == 1
    with pytest.raises(AssertionError, match="probed"):
        _threads.fit_n_jobs(None, _threads.THREAD_MIN_NNZ)


def test_estimators_reject_n_jobs_zero_with_the_convention_in_the_message():
    X, y = _data(n=100, d=20, density=0.2)
    with pytest.raises(ValueError, match=r"^n_jobs == 0 has no meaning; use n_jobs=None"):
        SDCASVC(n_jobs=0, backend="numba").fit(X, y)


# ------------------------------------------------------------------ blocks and products
def test_nnz_blocks_cover_the_rows_in_order_with_balanced_nonzeros():
    X, _ = _data(n=1000)
    for k in (1, 2, 3, 7):
        b = nnz_blocks(X.indptr, k)
        assert b[0] == 0 and b[-1] == X.shape[0] and b.size == k + 1
        assert np.all(np.diff(b) >= 0)
        per = np.diff(X.indptr[b])
        assert per.max() - per.min() <= 2 * np.diff(X.indptr).max()
    rows = np.arange(0, 1000, 3)
    b = nnz_blocks(X.indptr, 4, rows)
    assert b[0] == 0 and b[-1] == rows.size


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threaded_products_are_scipys_and_sum_blocks_in_order(dtype):
    """``X B`` is SciPy's bit for bit; ``X^T U`` on k blocks is the in-order sum of SciPy's
    product of each block (one block: SciPy's bit for bit); on a list of rows, the same."""
    X, _ = _data(n=900, d=120, dtype=dtype)
    X64 = X.astype(np.float64)
    rng = np.random.default_rng(1)
    with BlockPool(3) as pool:
        T = ThreadedCSR(X, pool)
        for M in (1, 3):
            B = rng.standard_normal((X.shape[1], M))
            U = rng.standard_normal((X.shape[0], M))
            U[::5] = 0.0
            assert np.array_equal(T.mm(B), X64 @ B if M > 1 else (X64 @ B[:, 0])[:, None])
            want = None
            b = T.bounds()
            for i in range(3):
                part = X64[b[i]:b[i + 1]].T @ U[b[i]:b[i + 1]]
                want = part if want is None else want + part
            assert np.array_equal(T.rmm(U), want)
            sq = X64.multiply(X64).tocsr()
            want_sq = sum((sq[b[i]:b[i + 1]].T @ U[b[i]:b[i + 1]] for i in range(1, 3)),
                          sq[b[0]:b[1]].T @ U[b[0]:b[1]])
            assert np.allclose(T.rmm(U, square=True), want_sq, rtol=1e-13, atol=1e-13)
            rows = np.flatnonzero(rng.random(X.shape[0]) < 0.4)
            Ur = U[rows]
            assert np.array_equal(T.mm(B, rows), X64[rows] @ B)
            assert np.allclose(T.rmm(Ur, rows), X64[rows].T @ Ur, rtol=1e-13, atol=1e-13)
    with BlockPool(1) as one:
        U = rng.standard_normal((X.shape[0], 1))
        assert np.array_equal(ThreadedCSR(X, one).rmm(U)[:, 0], X64.T @ U[:, 0])


# ------------------------------------------------------------------ fits
@pytest.mark.parametrize("solver", ["sdca", "newton"])
def test_same_seed_and_n_jobs_give_the_same_model_bit_for_bit(small_threshold, solver):
    X, y = _data()
    fits = [SDCASVC(C=1.0, loss="squared_hinge", solver=solver, tol=1e-6, n_jobs=2,
                    random_state=3, backend="numba").fit(X, y) for _ in range(2)]
    assert fits[0].n_threads_ == fits[1].n_threads_ == 2
    assert np.array_equal(fits[0].coef_, fits[1].coef_)
    assert np.array_equal(fits[0].intercept_, fits[1].intercept_)
    if solver == "sdca":
        assert np.array_equal(fits[0].alpha_, fits[1].alpha_)


@pytest.mark.parametrize("solver, loss", [("sdca", "hinge"), ("sdca", "squared_hinge"),
                                          ("newton", "squared_hinge")])
def test_threaded_fit_is_certified_and_reaches_the_one_thread_objective(small_threshold,
                                                                          solver, loss):
    """What the docstring says: not the one-thread model, but both certified to ``tol``, so
    their objectives differ by at most the two gaps."""
    X, y = _data(seed=2)
    tol = 1e-6 if loss == "squared_hinge" else 1e-4
    cap = None if solver == "newton" else 400 * X.shape[0]
    one = SDCASVC(C=1.0, loss=loss, solver=solver, tol=tol, n_jobs=1, random_state=0,
                  backend="numba", dtype="float64", max_iter=cap).fit(X, y)
    two = SDCASVC(C=1.0, loss=loss, solver=solver, tol=tol, n_jobs=2, random_state=0,
                  backend="numba", dtype="float64", max_iter=cap).fit(X, y)
    assert one.n_threads_ == 1 and two.n_threads_ == 2
    assert one.stop_reason_ == two.stop_reason_ == "tol"
    assert one.duality_gap_ <= tol and two.duality_gap_ <= tol
    assert abs(one.primal_objective_ - two.primal_objective_) <= 2 * tol
    # the primal of each model, recomputed here from its coef_ (an independent evaluation)
    n = X.shape[0]

    def primal(est):
        w, b = est.coef_.ravel(), float(est.intercept_[0])
        slack = np.maximum(0.0, 1.0 - y * (X @ w + b))
        if loss == "squared_hinge":
            slack = slack ** 2
        return 0.5 / n * (w @ w + b * b) + slack.mean()     # lam = 1 / (C n), intercept 1
    assert abs(primal(one) - primal(two)) <= 2 * tol


def test_threaded_sdca_never_lowers_the_dual(small_threshold):
    X, y = _data(seed=4)
    est = SDCASVC(C=10.0, loss="hinge", tol=1e-7, n_jobs=3, random_state=0, backend="numba",
                  dtype="float64", eval_every=200).fit(X, y)
    assert est.n_threads_ == 3
    dual = np.array([row[2] for row in est.history_])
    assert dual.size > 3 and np.all(np.diff(dual) >= -1e-12)


def test_weighted_threaded_sdca_is_certified(small_threshold):
    X, y = _data(seed=5)
    s = np.random.default_rng(0).uniform(0.2, 3.0, X.shape[0])
    for k in (1, 2):
        est = SDCASVC(C=1.0, loss="squared_hinge", tol=1e-6, n_jobs=k, random_state=0,
                      backend="numba", dtype="float64", max_iter=400 * X.shape[0]
                      ).fit(X, y, sample_weight=s)
        assert est.n_threads_ == k and est.duality_gap_ <= 1e-6


def test_sdca_threads_need_nonzeros_and_nonzeros_per_feature():
    X, _ = _data()
    big = _threads.SDCA_THREAD_MIN_NNZ
    assert _threads.sdca_threads(4, X, "numba") == 1                 # too few nonzeros
    wide = SimpleNamespace(nnz=big, shape=(big, big // 2))         # only these are read
    assert _threads.sdca_threads(4, wide, "numba") == 1              # 2 per column
    long = SimpleNamespace(nnz=big, shape=(big, 100))
    assert _threads.sdca_threads(4, long, "numba") == _threads.SDCA_MAX_THREADS == 2
    assert _threads.sdca_threads(4, long, "numpy") == 1
    assert _threads.sdca_threads(1, long, "numba") == 1
    snug = SimpleNamespace(nnz=big, shape=(big, big // 16))        # 16 a column: the copies
    assert _threads.sdca_threads(8, snug, "numba") == min(5, _threads.SDCA_MAX_THREADS)
    assert _threads.sdca_threads(8, SimpleNamespace(nnz=big, shape=(big, big // 5)),
                                 "numba") == 1


def test_small_sets_keep_the_single_thread_path_and_its_results():
    """Below the threshold of nonzeros ``n_jobs`` changes nothing, bit for bit."""
    X, y = _data()
    assert X.nnz < _threads.THREAD_MIN_NNZ
    for solver in ("sdca", "newton"):
        one, two = (SDCASVC(C=1.0, loss="squared_hinge", solver=solver, tol=1e-5, n_jobs=k,
                            random_state=0, backend="numba").fit(X, y) for k in (1, 2))
        assert two.n_threads_ == 1
        assert np.array_equal(one.coef_, two.coef_)


def test_newton_on_one_thread_over_the_threshold_is_todays(monkeypatch):
    """``n_jobs=1`` keeps SciPy's products whatever the size, bit for bit."""
    X, y = _data(seed=6)
    fits = []
    for threshold in (10**12, 1000):
        monkeypatch.setattr(_threads, "THREAD_MIN_NNZ", threshold)
        fits.append(SDCASVC(C=10.0, loss="squared_hinge", solver="newton", tol=1e-8,
                            n_jobs=1, backend="numba").fit(X, y))
    assert fits[1].n_threads_ == 1
    assert np.array_equal(fits[0].coef_, fits[1].coef_)


def test_linear_svc_passes_n_jobs_and_says_the_threads_when_verbose(small_threshold):
    X, y = _data(seed=7)
    est = LinearSVC(C=0.5, n_jobs=2, random_state=0, backend="numba").fit(X, y)
    assert est.n_threads_ == 2
    buf = io.StringIO()
    with redirect_stdout(buf):
        SDCASVC(C=0.5, loss="squared_hinge", n_jobs=2, random_state=0, backend="numba",
                verbose=1).fit(X, y)
    assert re.search(r"gpusvm sdca: fit on 2 threads \(n_jobs=2\)", buf.getvalue())
    assert PegasosSVC(n_jobs=2, max_iter=50, backend="numba").fit(X, y).n_threads_ == 1


def test_multiclass_newton_threads_every_output(small_threshold):
    X, _ = _data(seed=8)
    y = np.random.default_rng(0).integers(0, 3, X.shape[0])
    a, b = (SDCASVC(C=1.0, loss="squared_hinge", solver="newton", tol=1e-6, n_jobs=2,
                    backend="numba").fit(X, y) for _ in range(2))
    assert a.n_threads_ == 2 and np.array_equal(a.coef_, b.coef_)
    assert np.all(a.duality_gap_ <= 1e-6)


# ------------------------------------------------------------------ SDCA's row blocks
def test_barrier_holds_every_thread_until_all_arrive():
    """Each of 3 threads (more than this machine's 2 cores: the yield path) writes its round
    number, waits, and must then read every other thread's: no thread runs a round ahead."""
    from numba import njit  # noqa: PLC0415

    from gpusvm.backends._sdca_threads_nb import barrier  # noqa: PLC0415

    @njit(nogil=True)
    def rounds(tid, k, seen, bar, n):
        bad = 0
        for r in range(1, n + 1):
            seen[tid] = r
            barrier(bar, k)
            for u in range(k):
                if seen[u] < r:
                    bad += 1
            barrier(bar, k)                 # nobody writes r + 1 before all have read
        return bad

    k, n = 3, 2000
    seen = np.zeros(k, dtype=np.int64)
    bar = np.zeros(16, dtype=np.int64)
    with BlockPool(k) as pool:
        bad = pool.run(lambda i: rounds(i, k, seen, bar, n))
    assert bad == [0, 0, 0] and np.all(seen == n)
    assert bar[0] == 0 and bar[8] == 2 * n            # the count reset, one generation a wait


def test_block_epochs_are_permutations_fixed_by_key_and_epoch():
    from gpusvm.backends._sdca_threads_nb import block_epoch  # noqa: PLC0415

    def order(nb, key, e):
        perm = np.full(nb + 3, -1, dtype=np.int32)
        block_epoch(perm, nb, np.uint64(key), e)
        assert np.all(perm[nb:] == -1)              # only the block's rows written
        return perm[:nb]

    a = order(1000, 7, 0)
    assert np.array_equal(np.sort(a), np.arange(1000))
    assert np.array_equal(a, order(1000, 7, 0))
    assert not np.array_equal(a, order(1000, 7, 1)) and not np.array_equal(a, order(1000, 8, 0))
    assert not np.array_equal(a, np.arange(1000))
    # each row about equally likely in each position (a uniform shuffle): position 0's row
    firsts = np.bincount([order(10, 3, e)[0] for e in range(4000)], minlength=10)
    assert firsts.min() > 300 and firsts.max() < 500


def _blocks(X, y, k, sigma_per_thread=None, monkeypatch=None, loss="squared_hinge"):
    from gpusvm.backends.base import SDCAPlan  # noqa: PLC0415
    from gpusvm.backends.numba_ import NumbaBackend  # noqa: PLC0415
    from gpusvm.solvers import _threaded  # noqa: PLC0415

    if sigma_per_thread is not None:
        monkeypatch.setattr(_threaded, "SIGMA_PER_THREAD", sigma_per_thread)
    n = X.shape[0]
    lam = 1.0 / n
    be = NumbaBackend(X, y.astype(np.float64))
    be.init_state_m()
    be.init_dual_m(1.0, loss, None, lam)
    plan = SDCAPlan(lam=lam, beta_b=1.0, theta=0.5, aggressive=False, shrinking=False,
                    loss=loss)
    pool = BlockPool(k)
    return be, pool, _threaded.BlockSDCA(be, pool, lam, plan, "epoch", 0), lam


def test_a_segment_leaves_v_at_w_of_alpha_and_the_state_undoes_exactly():
    """After a segment every thread's copy holds ``w(alpha) = X^T (alpha y) / (lam n)``
    (computed here with SciPy) to float64 rounding; :meth:`undo` restores alpha, v and the
    scalars bit for bit and doubles sigma' - 1 up to k, then refuses."""
    X, y = _data(n=2000, d=400, seed=11)
    be, pool, blocks, lam = _blocks(X, y, 2)
    with pool:
        n = X.shape[0]
        blocks.segment(0, 3 * n // 2)
        assert blocks.rounds > 10 and np.all(be.alpha >= 0) and np.any(be.alpha > 0)
        want = X.T @ (be.alpha[:, 0] * y) / (lam * n)
        assert np.allclose(be.V[:, 0] * be.sm[0, 0], want, rtol=0, atol=1e-12 * np.abs(want).max())
        assert np.array_equal(blocks.W[0], blocks.W[1])
        state = (be.alpha.copy(), be.V.copy(), be.sm.copy())
        blocks.segment(3 * n // 2, 2 * n)
        assert not np.array_equal(be.alpha, state[0])
        assert blocks.sigma == 1.1 and blocks.undo() and blocks.sigma == pytest.approx(1.2)
        for now, before in zip((be.alpha, be.V, be.sm), state):
            assert np.array_equal(now, before)
        sigmas = []
        for i in range(3):
            blocks.segment((2 + i) * n, (3 + i) * n)
            assert blocks.undo()
            sigmas.append(blocks.sigma)
        assert sigmas == pytest.approx([1.4, 1.8, 2.0])
        blocks.segment(5 * n, 6 * n)
        assert not blocks.undo() and blocks.undone == 4       # sigma' = k: CoCoA+'s safe value


def test_too_long_steps_are_undone_and_the_fit_still_certifies(small_threshold, monkeypatch):
    """sigma' = 1 on 2 blocks sharing an intercept column in every row, with rounds of 0.01
    passes, lowers the dual (each block moves the intercept for the other too): the solver
    undoes those segments, raises sigma' to 1.1 and certifies; the recorded duals never fall."""
    from gpusvm.solvers import _threaded  # noqa: PLC0415

    monkeypatch.setattr(_threaded, "SIGMA_PER_THREAD", 0.0)
    monkeypatch.setattr(_threaded, "SIGMA_SHARE", 0.0)
    monkeypatch.setattr(_threaded, "ROUND_EPOCHS", 0.01)
    X, y = _data(n=6000, d=200, density=0.05, seed=12)
    undone = []
    real = _threaded.BlockSDCA.undo

    def spy(self):
        ok = real(self)
        undone.append((ok, self.sigma))
        return ok
    monkeypatch.setattr(_threaded.BlockSDCA, "undo", spy)
    # 300 epochs: rounds 5x the default's and sigma' from 1 take 80 to over 100 epochs to
    # 1e-6 on most partitions of these rows (the contiguous halves of five shuffles of them
    # too); this order's contiguous halves took 37-77. At the defaults, about 35 either way
    est = SDCASVC(C=1.0, loss="squared_hinge", tol=1e-6, n_jobs=2, random_state=0,
                  backend="numba", dtype="float64", eval_every=3000,
                  max_iter=300 * X.shape[0]).fit(X, y)
    assert est.n_threads_ == 2 and est.stop_reason_ == "tol" and est.duality_gap_ <= 1e-6
    assert undone and undone[0][0] and undone[-1][1] == pytest.approx(1.1)
    dual = np.array([row[2] for row in est.history_])
    assert np.all(np.diff(dual) >= 0)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_threaded_sdca_certifies_rows_sorted_by_class(small_threshold, loss):
    """Rows sorted by their labels: blocks cut as contiguous row ranges held one class each,
    their steps on the intercept and the shared columns disagreed, and the fit stopped at
    max_iter with a gap of 7.6e-3 (hinge) and 3.4e-2 (squared hinge) above ``tol`` (1e-3)
    and a warning.  The blocks are now samples of the rows: the default fit certifies, and
    each block holds both classes in about the set's proportion."""
    import warnings  # noqa: PLC0415

    from gpusvm.backends.numba_ import CompilationNotice  # noqa: PLC0415
    from gpusvm.datasets import make_sparse_classification  # noqa: PLC0415

    X, y = make_sparse_classification(120_000, 20_000, nnz_per_row=5, flip_y=0.0,
                                      random_state=0)
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = SDCASVC(C=1.0, loss=loss, n_jobs=2, random_state=0, backend="numba").fit(X, y)
    assert [w for w in caught if not issubclass(w.category, CompilationNotice)] == []
    assert est.n_threads_ == 2 and est.stop_reason_ == "tol" and est.duality_gap_ <= est.tol
    be, pool, blocks, _ = _blocks(X, np.where(y > 0, 1.0, -1.0), 2)
    pool.close()
    for lo, hi in blocks.blocks:
        rows = blocks.rows[lo:hi]
        assert np.all(np.diff(rows) > 0)                        # each row once, ascending
        assert abs(y[rows].mean() - y.mean()) < 0.05            # both classes, as in the set
    assert np.array_equal(np.sort(blocks.rows), np.arange(X.shape[0]))


def test_sdca_runs_on_at_most_sdca_max_threads():
    big = _threads.SDCA_THREAD_MIN_NNZ
    long = SimpleNamespace(nnz=big, shape=(big, 100))
    assert _threads.SDCA_MAX_THREADS == 2
    assert _threads.sdca_threads(16, long, "numba") == 2


def test_four_blocks_take_longer_steps_on_the_hot_columns_and_certify(small_threshold,
                                                                      monkeypatch):
    """On 4 threads the hot columns' sigma' is 0.55 k = 2.2, the others' 1.3: the blocks'
    steps read the hot columns' bitset, and the fit certifies."""
    from gpusvm.solvers import _threaded  # noqa: PLC0415

    assert _threaded.start_sigma(2) == (1.1, 1.1) and _threaded.start_sigma(4) == (1.3, 2.2)
    monkeypatch.setattr(_threaded, "HOT_COLUMNS", 16)           # a subset of the 300 columns
    X, y = _data(n=4000, d=300, seed=13)
    est = SDCASVC(C=1.0, loss="squared_hinge", tol=1e-6, n_jobs=4, random_state=0,
                  backend="numba", dtype="float64", max_iter=200 * X.shape[0]).fit(X, y)
    one = SDCASVC(C=1.0, loss="squared_hinge", tol=1e-6, n_jobs=1, random_state=0,
                  backend="numba", dtype="float64", max_iter=200 * X.shape[0]).fit(X, y)
    assert est.n_threads_ == 4 and est.stop_reason_ == "tol" and est.duality_gap_ <= 1e-6
    assert abs(est.primal_objective_ - one.primal_objective_) <= 2e-6


def test_blocks_that_overflow_in_their_first_segment_are_undone(small_threshold, monkeypatch):
    """sigma' = 1 on every column of 4 blocks, rounds of 0.05 passes, a certificate every 2
    epochs: the first segment's dual falls below its start (0, at alpha = 0); it is undone
    (there is no certificate before it) and sigma' raised until the dual rises; the fit
    certifies with finite objectives throughout and duals that never fall."""
    from gpusvm.solvers import _threaded  # noqa: PLC0415

    monkeypatch.setattr(_threaded, "SIGMA_PER_THREAD", 0.0)
    monkeypatch.setattr(_threaded, "SIGMA_SHARE", 0.0)
    monkeypatch.setattr(_threaded, "ROUND_EPOCHS", 0.05)
    calls = []
    real = _threaded.BlockSDCA.undo

    def spy(self):
        calls.append(self.rounds)
        return real(self)
    monkeypatch.setattr(_threaded.BlockSDCA, "undo", spy)
    X, y = _data(n=4000, d=300, seed=13)
    est = SDCASVC(C=1.0, loss="squared_hinge", tol=1e-5, n_jobs=4, random_state=0,
                  backend="numba", dtype="float64", eval_every=2 * X.shape[0],
                  max_iter=400 * X.shape[0]).fit(X, y)
    hist = np.array([row[1:4] for row in est.history_])
    assert est.n_threads_ == 4 and est.stop_reason_ == "tol"
    assert calls[0] == 40                          # the first segment's 2 epochs: 20 rounds each
    assert np.all(np.isfinite(hist)) and hist[0, 1] >= 0 and np.all(np.diff(hist[:, 1]) >= 0)


@pytest.mark.parametrize("bad", [0, True, False])
@pytest.mark.parametrize("cls", [PegasosSVC, SDCASVC, LinearSVC])
def test_every_estimator_refuses_the_same_n_jobs(cls, bad):
    X, y = _data(n=60, d=5, density=1.0)
    expected = ("^n_jobs == 0 has no meaning" if bad is 0 else
                f"^n_jobs must be an int or None, got {bad!r}$")
    with pytest.raises(ValueError, match=expected):
        cls(n_jobs=bad).fit(X, y)


def test_n_jobs_is_capped_at_the_usable_cores(monkeypatch):
    monkeypatch.setattr(_threads, "usable_cores", lambda: 3)
    assert resolve_n_jobs(1000) == 3 == _threads.fit_n_jobs(1000, _threads.THREAD_MIN_NNZ)
    assert resolve_n_jobs(2) == 2 and resolve_n_jobs(-1) == 3
    monkeypatch.setattr(_threads, "THREAD_MIN_NNZ", 1000)
    X, y = _data()
    est = SDCASVC(loss="squared_hinge", solver="newton", n_jobs=1000, backend="numba",
                  random_state=0).fit(X, y)
    assert est.n_threads_ == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_newton_compiled_products_on_one_thread_are_scipys_bit_for_bit(monkeypatch, dtype):
    """One thread's compiled passes (``X`` read in its dtype, the active rows in place) give
    the fit of SciPy's products on the float64 copies, weights and several classes too."""
    from gpusvm.solvers import newton as newton_mod  # noqa: PLC0415
    X, y = _data(seed=9)
    X = X.astype(dtype)
    w = np.random.default_rng(1).uniform(0.1, 3.0, X.shape[0])
    y3 = np.random.default_rng(2).integers(0, 3, X.shape[0])
    fits = []
    for compiled in (False, True):
        monkeypatch.setattr(newton_mod, "_compiled_products",
                            lambda X, xp, bias=None, c=compiled: c and sp.issparse(X))
        fits.append([SDCASVC(C=10.0, loss="squared_hinge", solver="newton", tol=1e-8,
                             dtype=dtype, backend="numba").fit(X, yy, sample_weight=ww)
                     for yy, ww in ((y, None), (y, w), (y3, None))])
    for old, new in zip(*fits):
        assert np.array_equal(old.n_iter_, new.n_iter_)
        assert np.array_equal(old.coef_, new.coef_)
        assert np.array_equal(old.duality_gap_, new.duality_gap_)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_an_implicit_bias_column_gives_the_appended_columns_products_bit_for_bit(k):
    """``ThreadedCSR(X, bias=v)``: the products of ``X`` with the column stored, every block,
    row list and gathered copy included, float32 values and ``v`` rounded to them."""
    from gpusvm._arrays import append_constant_column  # noqa: PLC0415
    X, _ = _data(seed=10)
    X = X.astype(np.float32)
    rng = np.random.default_rng(3)
    rows = np.sort(rng.choice(X.shape[0], X.shape[0] // 3, replace=False))
    with BlockPool(k) as pool:
        implicit = ThreadedCSR(X, pool, bias=0.3)
        stored = ThreadedCSR(append_constant_column(X, 0.3), pool)
        assert implicit.d == stored.d == X.shape[1] + 1
        for M in (1, 3):
            B = rng.standard_normal((X.shape[1] + 1, M))
            U = rng.standard_normal((X.shape[0], M)) * (rng.random((X.shape[0], 1)) < 0.7)
            assert np.array_equal(implicit.mm(B), stored.mm(B))
            for square in (False, True):
                assert np.array_equal(implicit.rmm(U, square=square),
                                      stored.rmm(U, square=square))
                assert np.array_equal(implicit.rmm(U[rows], rows, square=square),
                                      stored.rmm(U[rows], rows, square=square))
            assert np.array_equal(implicit.mm(B, rows), stored.mm(B, rows))
            a, b = implicit.gather(rows), stored.gather(rows)
            assert np.array_equal(a.mm(B), b.mm(B))
            assert np.array_equal(a.rmm(U[rows]), b.rmm(U[rows]))
