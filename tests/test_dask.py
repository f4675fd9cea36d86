"""gpusvm.dask on a two-process LocalCluster: certificates, agreement with an independent optimum,
determinism, dask-array input, model export, faults and bad input.

One LocalCluster (2 worker processes, 1 thread each) serves the whole module and is shut
down at its end.  Independent optima come from scikit-learn's LinearSVC (LIBLINEAR, hinge
loss, no intercept, ``C = 1/(lam n)``); every comparison is bounded by the certificate:
``||w - w*||^2 <= 2 (P(w) - P*) / lam <= 2 gap / lam`` (strong convexity of ``P``).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
import warnings

import dask.array as da
import distributed
import numpy as np
import pytest
import scipy.sparse as sp

import gpusvm.dask as gd
from gpusvm.dask._blocks import block_seed
from gpusvm.solvers._sampling import CounterSampler
from gpusvm.model_io import load_model, save_model

from conftest import assert_near_w_alpha

LAM = 1e-4


@pytest.fixture(scope="module")
def client():
    """One LocalCluster with 2 worker processes for the module; closed at its end."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        c.wait_for_workers(2, timeout=120)
        yield c


@pytest.fixture
def own_cluster():
    """A cluster of its own for a test that kills a worker, so that the module's cluster stays
    whole whatever the nanny does (restarting a killed worker can take minutes on a loaded
    machine)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=120)
        yield c


@pytest.fixture
def two_workers(client):
    """The module's client, with both workers up (a fault test may have killed one: its nanny
    starts a new one, which takes longer on a loaded machine)."""
    client.wait_for_workers(2, timeout=300)
    return client


def primal(X, y, w, lam):
    """``P(w)`` computed here in float64, independently of the package."""
    m = y * np.asarray(X @ w).ravel()
    return 0.5 * lam * float(w @ w) + float(np.maximum(0.0, 1.0 - m).mean())


def dual(X, y, alpha, lam):
    """``D(alpha)`` and ``w(alpha)``, computed here in float64."""
    n = X.shape[0]
    w = np.asarray(X.T @ (alpha * y)).ravel() / (lam * n)
    return float(alpha.sum()) / n - 0.5 * lam * float(w @ w), w


def liblinear_w(X, y, lam):
    """An independent optimum: LIBLINEAR's dual CD for the hinge loss, no intercept."""
    from sklearn.svm import LinearSVC
    n = X.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LinearSVC(loss="hinge", C=1.0 / (lam * n), fit_intercept=False, tol=1e-8,
                        max_iter=200_000, dual=True).fit(X, y)
    return clf.coef_.ravel().astype(np.float64)


def check_certificate_and_optimum(clf, X, y, lam, tol):
    """The certificate is genuine and ``w`` lies within its bound of LIBLINEAR's optimum."""
    X64 = X.astype(np.float64)
    w = clf.coef_.ravel()
    assert clf.stop_reason_ == "tol"
    assert clf.duality_gap_ <= tol
    assert np.all((clf.alpha_ >= 0) & (clf.alpha_ <= 1))
    # recompute everything from alpha_ here: the gap is P(w) - D(alpha)
    D, w_alpha = dual(X64, y, clf.alpha_, lam)
    P = primal(X64, y, w, lam)
    assert P - D == pytest.approx(clf.duality_gap_, abs=1e-9)
    assert P - D <= tol
    assert_near_w_alpha(w, w_alpha, P - D, lam)
    # LIBLINEAR's w*: P(w_ref) - P* <= P(w_ref) - D(alpha_) (D is a lower bound of P*)
    w_ref = liblinear_w(X64, y, lam)
    eps_ref = max(0.0, primal(X64, y, w_ref, lam) - D)
    bound = np.sqrt(2 * (P - D) / lam) + np.sqrt(2 * eps_ref / lam)
    assert np.linalg.norm(w - w_ref) <= bound
    return w_ref


# ------------------------------------------------------------------ SDCA (CoCoA+)
def test_sdca_rcv1_small_certified_and_optimal(two_workers, rcv1_small):
    X, y = rcv1_small.X, rcv1_small.y
    clf = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", random_state=0).fit(X, y)
    assert clf.n_blocks_ == 2
    w_ref = check_certificate_and_optimum(clf, X, y, LAM, 1e-3)
    # a good model, as LIBLINEAR's
    ref_acc = np.mean(np.sign(rcv1_small.X_test @ w_ref) == rcv1_small.y_test)
    assert clf.score(rcv1_small.X_test, rcv1_small.y_test) >= ref_acc - 0.02


def test_sdca_a9a_certified_and_optimal(two_workers, a9a):
    X, y = a9a.X, a9a.y
    clf = gd.SDCASVC(lam=1e-3, tol=1e-3, bias="none", local_epochs=2.0,
                     random_state=0).fit(X, y)
    check_certificate_and_optimum(clf, X, y, 1e-3, 1e-3)
    # every recorded gap is P - D >= 0, and the line search never lowers the dual
    assert all(h[3] >= -1e-12 for h in clf.history_)
    dual_values = np.array([h[2] for h in clf.history_])
    assert np.all(np.diff(dual_values) >= -1e-12)
    assert np.all((clf.steps_ >= 0) & (clf.steps_ <= 1))


def test_sdca_same_seed_same_model(two_workers, rcv1_small):
    X, y = rcv1_small.X, rcv1_small.y
    a = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", local_epochs=1.0, random_state=7).fit(X, y)
    b = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", local_epochs=1.0, random_state=7).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.alpha_, b.alpha_)
    assert a.history_[-1][1:4] == b.history_[-1][1:4]
    c = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", local_epochs=1.0, random_state=8).fit(X, y)
    assert not np.array_equal(a.alpha_, c.alpha_)


def test_sdca_progress_bar_shows_the_gap(two_workers, rcv1_small, capfd):
    clf = gd.SDCASVC(lam=1e-3, tol=1e-3, verbose=1, random_state=0).fit(rcv1_small.X,
                                                                        rcv1_small.y)
    err = capfd.readouterr().err
    assert "gpusvm dask sdca" in err and "gap=" in err
    assert clf.duality_gap_ <= 1e-3


def test_sdca_one_block_is_plain_sdca(two_workers, rcv1_small):
    """K = 1: CoCoA+ is SDCA; its w must be the same optimum (within the certificates)."""
    X, y = rcv1_small.X, rcv1_small.y
    one = gd.SDCASVC(lam=LAM, tol=1e-4, bias="none", n_partitions=1, random_state=0).fit(X, y)
    four = gd.SDCASVC(lam=LAM, tol=1e-4, bias="none", n_partitions=4, random_state=0).fit(X, y)
    assert one.n_blocks_ == 1 and four.n_blocks_ == 4
    gap = one.duality_gap_ + four.duality_gap_
    d = one.coef_.ravel() - four.coef_.ravel()
    assert d @ d <= 2 * gap / LAM * 2


def test_sdca_augmented_bias(two_workers, rcv1_small):
    """bias="augmented": the intercept is w's last entry; the certificate is that of [X, 1]."""
    X, y = rcv1_small.X.astype(np.float64), rcv1_small.y
    clf = gd.SDCASVC(lam=LAM, tol=1e-3, bias="augmented", n_partitions=1,
                     random_state=0).fit(X, y)
    Xa = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")
    D, w_alpha = dual(Xa, y, clf.alpha_, LAM)
    w = np.concatenate([clf.coef_.ravel(), clf.intercept_])
    gap = primal(Xa, y, w, LAM) - D
    assert gap <= 1e-3
    assert_near_w_alpha(w, w_alpha, gap, LAM)
    np.testing.assert_allclose(clf.decision_function(X), X @ clf.coef_.ravel() + clf.intercept_,
                               rtol=1e-12)


def test_sdca_dask_array_input_and_export(two_workers, rcv1_small, tmp_path):
    # rows shuffled across the chunks: blocks with different label mixes slow CoCoA+ down
    perm = np.random.default_rng(0).permutation(rcv1_small.X.shape[0])
    X, y = rcv1_small.X[perm].astype(np.float64), rcv1_small.y[perm]
    Xd = da.from_array(X, chunks=(500, X.shape[1]), asarray=False)
    yd = da.from_array(np.where(y > 0, "pos", "neg"), chunks=500)
    clf = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", random_state=0).fit(Xd, yd)
    assert clf.n_blocks_ == 2  # the dask array's row chunks are the blocks
    assert clf.duality_gap_ <= 1e-3
    assert list(clf.classes_) == ["neg", "pos"]
    # lazy scores over a dask array equal the in-memory ones
    Xt = rcv1_small.X_test.astype(np.float64)
    lazy = clf.decision_function(da.from_array(Xt, chunks=(200, Xt.shape[1]), asarray=False))
    np.testing.assert_allclose(lazy.compute(), clf.decision_function(Xt), rtol=1e-12)
    # an ordinary fitted gpusvm.SDCASVC, saved and loaded
    local = clf.to_local()
    path = save_model(local, tmp_path / "m.npz")
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict(Xt), clf.predict(Xt))
    assert loaded.duality_gap_ == clf.duality_gap_


def test_sdca_survives_a_killed_worker(own_cluster, rcv1_small):
    """SIGKILL one worker mid-fit: the fit resumes from the last committed round, and the model
    is the one of an undisturbed run (same seed), bit for bit."""
    X, y = rcv1_small.X, rcv1_small.y
    ref = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", local_epochs=1.0, random_state=3,
                     client=own_cluster).fit(X, y)
    pids = own_cluster.run(os.getpid)
    victim = pids[sorted(pids)[1]]
    killed = []

    def kill(round_, gap, elapsed):
        if round_ == 3 and not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(time.monotonic())

    with pytest.warns(RuntimeWarning, match="worker was lost"):
        clf = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", local_epochs=1.0, random_state=3,
                         callback=kill, client=own_cluster).fit(X, y)
    assert killed and clf.n_recoveries_ >= 1
    assert time.monotonic() - killed[0] <= 60          # recovered within a bounded time
    assert clf.duality_gap_ <= 1e-3
    np.testing.assert_array_equal(clf.coef_, ref.coef_)
    np.testing.assert_array_equal(clf.alpha_, ref.alpha_)


def test_sdca_lost_worker_without_recoveries_is_an_error(own_cluster, rcv1_small):
    X, y = rcv1_small.X, rcv1_small.y
    pids = own_cluster.run(os.getpid)
    victim = pids[sorted(pids)[0]]

    killed = []

    def kill(round_, gap, elapsed):
        if round_ == 2:
            os.kill(victim, signal.SIGKILL)
            killed.append(time.monotonic())

    with pytest.raises(gd.DistributedFitError, match="max_recoveries=0"):
        gd.SDCASVC(lam=LAM, tol=1e-6, bias="none", max_recoveries=0, random_state=0,
                   callback=kill, client=own_cluster).fit(X, y)
    assert killed and time.monotonic() - killed[0] <= 60  # one clear error, in bounded time


# ------------------------------------------------------------------ Pegasos
def counter_batch(seed, b, size, k, t):
    """Block b's batch of iteration t (1-based): the counter stream keyed by (seed, block)."""
    return CounterSampler(size, k, "without_replacement", block_seed(seed, b)).batch(t - 1)[0]


def reference_pegasos(X, y, blocks, shares, seed, lam, T):
    """Stratified mini-batch Pegasos in plain NumPy (dense w), same batches as the blocks."""
    n, d = X.shape
    w = np.zeros(d)
    for t in range(1, T + 1):
        g = np.zeros(d)
        for b, rows in enumerate(blocks):
            pick = rows[counter_batch(seed, b, rows.size, shares[b], t)]
            m = y[pick] * (X[pick] @ w)
            act = pick[m < 1]
            g += rows.size / (n * shares[b]) * np.asarray(X[act].T @ y[act]).ravel()
        eta = 1.0 / (lam * t)
        w = (1 - eta * lam) * w + eta * g
        norm = np.linalg.norm(w)
        if norm > 1 / np.sqrt(lam):
            w *= (1 / np.sqrt(lam)) / norm
    return w


def test_pegasos_is_exact_synchronous_pegasos(two_workers, rcv1_small):
    """Every replica applies the same all-reduced step: w equals the single-process iteration."""
    X, y = rcv1_small.X.astype(np.float64), rcv1_small.y.astype(np.float64)
    lam, k, T, seed = 1e-3, 64, 60, 11
    clf = gd.PegasosSVC(lam=lam, batch_size=k, max_iter=T, averaging="none", bias="none",
                        random_state=seed, n_partitions=2).fit(X, y)
    n = X.shape[0]
    blocks = [np.arange(b, n, 2) for b in range(2)]
    shares = [int(np.ceil(k * r.size / n)) for r in blocks]
    w_ref = reference_pegasos(X, y, blocks, shares, seed, lam, T)
    np.testing.assert_allclose(clf.coef_.ravel(), w_ref, rtol=0, atol=1e-9)
    assert clf.objective_ == pytest.approx(primal(X, y, w_ref, lam), rel=1e-9)


@pytest.mark.parametrize("loss, classes, weighted, averaging", [
    ("hinge", 2, True, "tail"), ("squared_hinge", 3, False, "none")])
def test_pegasos_one_block_is_the_reference_segment(two_workers, rcv1_small, loss, classes,
                                                    weighted, averaging):
    """One block: the synchronous fit is NumpyBackend's Pegasos segment on the same batches
    (the blocks and the driver run the reference's step functions), bit for bit."""
    from gpusvm.backends.base import PegasosPlan
    from gpusvm.backends.numpy_ import NumpyBackend
    X = sp.csr_matrix(rcv1_small.X[:2000], dtype=np.float64)
    X.sort_indices()
    n = X.shape[0]
    rng = np.random.default_rng(1)
    y = rcv1_small.y[:n] if classes == 2 else rng.integers(0, classes, n)
    s = rng.random(n) + 0.5 if weighted else None
    lam, k, T, seed = 1e-3, 50, 80, 7
    clf = gd.PegasosSVC(lam=lam, loss=loss, batch_size=k, max_iter=T, averaging=averaging,
                        bias="none", n_partitions=1, rebalance=False,
                        random_state=seed).fit(X, y, sample_weight=s)
    Y = np.where(y[:, None] == clf.classes_[None, -1 if classes == 2 else slice(None)], 1.0, -1.0)
    be = NumpyBackend(X, Y, s)
    be.init_state_m(averaging=averaging == "tail")
    mean_s = 1.0 if s is None else s.mean()
    radius = np.sqrt((2.0 if loss == "squared_hinge" else 1.0) * mean_s / lam)
    plan = PegasosPlan(lam=lam, k=k, radius=radius, averaged=averaging == "tail",
                       t_avg=T // 2, loss=loss)
    be.pegasos_segment_m(CounterSampler(n, k, "without_replacement", block_seed(seed, 0)), 0, T,
                         plan)
    W, _ = be.output_m(averaging == "tail")
    np.testing.assert_array_equal(clf.coef_, W.T)


def test_pegasos_converges_and_is_deterministic(two_workers, rcv1_small):
    X, y = rcv1_small.X, rcv1_small.y
    lam = 1e-3
    kw = dict(lam=lam, batch_size=200, bias="none", random_state=2)
    a = gd.PegasosSVC(max_iter=600, **kw).fit(X, y)
    b1 = gd.PegasosSVC(max_iter=40, **kw).fit(X, y)
    b2 = gd.PegasosSVC(max_iter=40, **kw).fit(X, y)
    np.testing.assert_array_equal(b1.coef_, b2.coef_)
    sd = gd.SDCASVC(lam=lam, tol=1e-5, bias="none", random_state=0).fit(X, y)
    # P(w_pegasos) - P* <= P(w_pegasos) - D(alpha_sdca)
    assert a.objective_ - sd.dual_objective_ <= 2e-3
    assert a.objective_ == pytest.approx(primal(X.astype(np.float64), y, a.coef_.ravel(), lam),
                                         rel=1e-9)
    assert isinstance(a.to_local().predict(X), np.ndarray)


@pytest.mark.parametrize("est, kw", [(gd.PegasosSVC, {"batch_size": 100}), (gd.SDCASVC, {})])
def test_a_fit_leaves_no_block_on_the_workers(two_workers, rcv1_small, est, kw):
    # the workers drop every block's rows when fit returns, without waiting for Python's cyclic
    # collector (dask's actor handles sit in cycles of their call closures): gc is off here
    def n_actors():
        return sum(two_workers.run(lambda dask_worker: len(dask_worker.state.actors)).values())

    gc.collect()
    gc.disable()
    try:
        clf = est(lam=1e-3, max_iter=5, bias="none", random_state=0, **kw).fit(rcv1_small.X, rcv1_small.y)
        deadline = time.monotonic() + 10    # the release travels through the scheduler
        while n_actors() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert n_actors() == 0
    finally:
        gc.enable()
    assert clf.predict(rcv1_small.X).shape == rcv1_small.y.shape


def test_pegasos_default_batch_is_at_most_the_rows(two_workers, rcv1_small):
    X, y = rcv1_small.X[:600], rcv1_small.y[:600]
    kw = dict(lam=1e-3, max_iter=20, bias="none", random_state=0)
    auto = gd.PegasosSVC(**kw).fit(X, y)                  # batch_size="auto": min(1024, n)
    assert auto.batch_size_ == 600
    np.testing.assert_array_equal(auto.coef_, gd.PegasosSVC(batch_size=600, **kw).fit(X, y).coef_)
    local = auto.to_local()
    assert local.batch_size == local.batch_size_ == 600
    np.testing.assert_array_equal(local.predict(X), auto.predict(X))


def test_pegasos_survives_a_killed_worker(own_cluster, rcv1_small):
    X, y = rcv1_small.X, rcv1_small.y
    kw = dict(lam=1e-3, batch_size=64, max_iter=40, eval_every=5, bias="none", random_state=5,
              client=own_cluster)
    ref = gd.PegasosSVC(**kw).fit(X, y)
    pids = own_cluster.run(os.getpid)
    victim = pids[sorted(pids)[1]]
    killed = []

    def kill(t, objective, elapsed):
        if t >= 10 and not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(t)

    with pytest.warns(RuntimeWarning, match="worker was lost"):
        clf = gd.PegasosSVC(callback=kill, **kw).fit(X, y)
    assert killed and clf.n_recoveries_ >= 1
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=0, atol=1e-12)


def test_pegasos_local_steps_average_of_block_iterations(two_workers, rcv1_small):
    """local_steps = H: the result is the n_k/n-weighted average of each block's own H Pegasos
    iterations from the broadcast w (checked for one round against NumPy)."""
    X, y = rcv1_small.X.astype(np.float64), rcv1_small.y.astype(np.float64)
    lam, k, H, seed = 1e-3, 64, 7, 4
    clf = gd.PegasosSVC(lam=lam, batch_size=k, max_iter=H, local_steps=H, averaging="none",
                        bias="none", random_state=seed).fit(X, y)
    n = X.shape[0]
    w_avg = np.zeros(X.shape[1])
    for b in range(2):
        rows = np.arange(b, n, 2)
        kb = int(np.ceil(k * rows.size / n))
        w = np.zeros(X.shape[1])
        for t in range(1, H + 1):
            pick = rows[counter_batch(seed, b, rows.size, kb, t)]
            act = pick[y[pick] * (X[pick] @ w) < 1]
            eta = 1.0 / (lam * t)
            w = (1 - eta * lam) * w + eta / kb * np.asarray(X[act].T @ y[act]).ravel()
            w *= min(1.0, (1 / np.sqrt(lam)) / max(np.linalg.norm(w), 1e-300))
        w_avg += rows.size / n * w
    np.testing.assert_allclose(clf.coef_.ravel(), w_avg, rtol=0, atol=1e-9)


# ------------------------------------------------------------------ bad input, imports
def test_bad_input_is_reported(two_workers, rcv1_small):
    X, y = rcv1_small.X, rcv1_small.y
    with pytest.raises(ValueError, match="one-vs-rest only .* needs gpusvm.SDCASVC"
                                         r"\(multi_class='ovo'\) on one machine"):
        gd.SDCASVC(multi_class="ovo").fit(X[:30], np.arange(30) % 3)
    with pytest.raises(ValueError, match="pass only one of them"):
        gd.SDCASVC(lam=1e-4, C=1.0).fit(X, y)
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        gd.SDCASVC().fit(X, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="to match X's rows"):
        gd.SDCASVC().fit(X, y[:-1])
    with pytest.raises(ValueError, match="batch_size"):
        gd.PegasosSVC(batch_size=X.shape[0] + 1).fit(X, y)
    with pytest.raises(ValueError, match="n_partitions"):
        gd.SDCASVC(n_partitions=X.shape[0] + 1).fit(X, y)
    with pytest.raises(ValueError, match="bias"):
        gd.SDCASVC(bias="unregularized").fit(X, y)
    Xd = da.from_array(X, chunks=(500, X.shape[1]), asarray=False)
    Xd = Xd[da.from_array(np.ones(X.shape[0], dtype=bool), chunks=500)]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        gd.SDCASVC().fit(Xd, y)


def test_no_client_is_a_clear_error():
    code = ("import numpy as np, scipy.sparse as sp\n"
            "import gpusvm.dask as gd\n"
            "try:\n"
            "    gd.SDCASVC().fit(sp.eye(4, format='csr'), np.array([0, 1, 0, 1]))\n"
            "except ValueError as e:\n"
            "    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "DASK_SCHEDULER_ADDRESS": ""})
    assert "found no dask client" in out.stdout, out.stderr


@pytest.mark.parametrize("M", [1, 3])
def test_driver_sums_the_blocks_parts_at_their_columns(M):
    """The driver keeps ``w`` on the union of the blocks' columns: each block's part lands on
    its own columns, overlapping columns get the sum (against a dense textbook sum)."""
    from gpusvm.dask._estimators import _assemble, _column_map
    rng = np.random.default_rng(0)
    d = 50
    cols = [np.sort(rng.choice(d, k, replace=False)) for k in (20, 30, 1)]
    parts = [rng.standard_normal((c.size, M)).astype(dt)
             for c, dt in zip(cols, (np.float32, np.float64, np.float32))]
    union, pos = _column_map(d, cols)
    dense = np.zeros((d, M))
    for c, p in zip(cols, parts):
        dense[c] += p
    np.testing.assert_array_equal(union, np.flatnonzero(np.any(dense != 0, axis=1)))
    for c, p in zip(cols, pos):
        np.testing.assert_array_equal(union[p], c)
    np.testing.assert_allclose(_assemble(union.size, M, pos, parts), dense[union], rtol=1e-15)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("weighted", [False, True])
def test_driver_best_point_is_the_segments_lowest(loss, weighted):
    """The driver's best point (``best_points``): offered two rounds' points with the blocks'
    margins, its objective is that of its ``W`` recomputed from the data, and
    no point of a fine grid on the segment between the two is lower."""
    from gpusvm.solvers._cocoa import best_points
    rng = np.random.default_rng(1)
    n, d, M, lam = 300, 40, 3, 1e-2
    X = sp.random(n, d, density=0.2, format="csr", random_state=2)
    Y = np.where(rng.random((n, M)) < 0.5, -1.0, 1.0)
    s = rng.uniform(0.0, 2.0, n) if weighted else None
    center, step = 0.1 * rng.standard_normal((d, M)), rng.standard_normal((d, M))
    W0, W1 = center + step, center - step     # two rounds' points: either side
    A0, A1 = Y * (X @ W0), Y * (X @ W1)

    def objective(W):
        slack = np.maximum(0.0, 1.0 - Y * (X @ W))
        slack = slack ** 2 if loss == "squared_hinge" else slack
        sw = np.ones(n) if s is None else s
        return 0.5 * lam * (W * W).sum(0) + (sw[:, None] * slack).mean(0)

    best = best_points(lam, loss, s)
    every = np.arange(M)
    best.offer(every, W0.copy(), np.ascontiguousarray(A0.T), objective(W0), (W0 * W0).sum(0))
    best.offer(every, W1, np.ascontiguousarray(A1.T), objective(W1), (W1 * W1).sum(0))
    W, P = best.W, best.P
    np.testing.assert_allclose(P, objective(W), rtol=1e-12)
    grid = np.array([objective(W0 + t * (W1 - W0)) for t in np.linspace(0.0, 1.0, 401)])
    assert np.all(P <= grid.min(axis=0) + 1e-12)
    assert np.all(P < np.minimum(objective(W0), objective(W1)))      # inside, for this data


def test_block_columns_localised_without_a_copy_of_a_received_block():
    """A block whose arrays sit in a larger uint8 buffer (as dask delivers them) keeps them:
    SciPy's prune would copy them; its columns are those ``np.unique`` finds, re-indexed."""
    from gpusvm.dask._blocks import block_csr, local_columns
    X = sp.random(200, 5000, density=0.01, format="csr", random_state=3)
    raw = [np.frombuffer(a.tobytes(), dtype=np.uint8).copy() for a in (X.data, X.indices,
                                                                        X.indptr)]
    data, indices, indptr = (r.view(a.dtype) for r, a in zip(raw, (X.data, X.indices,
                                                                   X.indptr)))
    received = sp.csr_matrix((X.shape))
    received.data, received.indices, received.indptr = data, indices, indptr
    Xc = block_csr(received, "none", 1.0)
    assert np.shares_memory(Xc.data, raw[0]) and np.shares_memory(Xc.indices, raw[1])
    cols, Xl = local_columns(Xc)
    np.testing.assert_array_equal(cols, np.unique(X.indices))
    np.testing.assert_array_equal(cols[Xl.indices], X.indices)
    v = np.arange(cols.size, dtype=np.float64)                # w on the block's columns
    np.testing.assert_allclose(Xl @ v, X @ np.bincount(cols, weights=v, minlength=X.shape[1]),
                               rtol=1e-15)


def test_import_gpusvm_does_not_import_dask():
    code = "import sys, gpusvm; print('dask' in sys.modules, 'distributed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr


# ------------------------------------------------------------------ acceptance (slow)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["imdb", "news20"])
def test_sdca_acceptance_gap(two_workers, name, request):
    ds = request.getfixturevalue(name)
    clf = gd.SDCASVC(lam=LAM, tol=1e-3, bias="none", random_state=0).fit(ds.X, ds.y)
    assert clf.stop_reason_ == "tol" and clf.duality_gap_ <= 1e-3
    D, w_alpha = dual(ds.X.astype(np.float64), ds.y, clf.alpha_, LAM)
    P = primal(ds.X.astype(np.float64), ds.y, clf.coef_.ravel(), LAM)
    assert P - D <= 1e-3
    assert_near_w_alpha(clf.coef_, w_alpha, P - D, LAM)


@pytest.mark.slow
def test_pegasos_acceptance_news20(two_workers, news20):
    """news20, lam = 1e-4: P(w) - P* <= 2e-3 with the local-steps variant (50 iterations of
    batch 256 between averages, 8,000 iterations; the synchronous variant gets there too, at
    6,000 iterations, but with one round trip per iteration it takes about 5 minutes here)."""
    X, y = news20.X, news20.y
    from gpusvm import SDCASVC as LocalSDCA
    # a lower bound of P*: the dual value of a single-process SDCA run (independent code path)
    lower = LocalSDCA(lam=LAM, tol=1e-5, bias="none", backend="numba", dtype="float64",
                      sampling="epoch", variant="safe", random_state=0,
                      max_iter=500 * X.shape[0]).fit(X, y).dual_objective_
    clf = gd.PegasosSVC(lam=LAM, batch_size=256, max_iter=8000, local_steps=50, bias="none",
                        random_state=0).fit(X, y)
    assert clf.objective_ == pytest.approx(primal(X.astype(np.float64), y, clf.coef_.ravel(),
                                                  LAM), rel=1e-9)
    assert clf.objective_ - lower <= 2e-3


class _DevicePartition:
    """Stands for a CuPy array or cupyx sparse matrix (dask-cuda's partitions): only ``get()``
    reaches the host; an implicit conversion raises, as CuPy's does."""

    __module__ = "cupyx.scipy.sparse._csr"

    def __init__(self, host):
        self.host = host
        self.shape = host.shape

    def get(self):
        return self.host

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed")


def test_device_partitions_are_built_on_the_host_once(rcv1_small):
    """A partition in GPU memory is copied to the host where its block is built (and in the
    rebalance's row moves, the scores and the search's norms); the block is the one a host
    partition gives, its backend then holds it wherever it runs."""
    from gpusvm.dask._blocks import SDCABlock, block_csr
    from gpusvm.dask._cv import _max_sq_norm
    from gpusvm.dask._estimators import _block_scores, _take_rows
    X = rcv1_small.X[:200].astype(np.float64)
    y = rcv1_small.y[:200][:, None]
    dev = _DevicePartition(X)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(dev)
    a, b = block_csr(dev, "augmented", 2.0), block_csr(X, "augmented", 2.0)
    assert (a != b).nnz == 0 and a.shape == b.shape
    idx = np.array([3, 1, 4])
    assert (_take_rows(dev, idx) != X[idx]).nnz == 0
    coef, off = np.random.default_rng(0).normal(size=(X.shape[1], 2)), np.array([0.5, -1.0])
    np.testing.assert_array_equal(_block_scores(dev, coef, off), _block_scores(X, coef, off))
    assert _max_sq_norm(dev) == _max_sq_norm(X)
    blocks = [SDCABlock(p, y, None, 0, 200, 1e-3, 1.0, 0, "none", 1.0, "hinge", "numba", None,
                        0) for p in (dev, X)]
    np.testing.assert_array_equal(blocks[0].info()[3], blocks[1].info()[3])
