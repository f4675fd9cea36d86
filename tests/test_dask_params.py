"""gpusvm.dask with what users have on one machine: M outputs (one-vs-rest), C, losses, class and
sample weights, the emulated device backend in the workers, sorted chunks, svmlight files read on
the workers and the README's dask-array recipe.

One LocalCluster (2 worker processes, 1 thread each) serves the module.  Every comparison with
the local :class:`gpusvm.SDCASVC` is bounded by the two certificates: ``P`` is ``lam``-strongly
convex, so ``||w - w*|| <= sqrt(2 gap / lam)`` for each of the two fits.  Certificates are
recomputed here from ``alpha_`` and ``coef_`` with the formulas of docs/algorithms.md ("Weights").
"""

from __future__ import annotations

import warnings

import dask.array as da
import distributed
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, load_svmlight_file
from sklearn.exceptions import ConvergenceWarning

import gpusvm.dask as gd
from conftest import assert_near_w_alpha, shared_data_dir
from gpusvm import SDCASVC as LocalSDCASVC


@pytest.fixture(scope="module")
def client():
    """One LocalCluster with 2 worker processes for the module; closed at its end."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        c.wait_for_workers(2, timeout=120)
        yield c


def certificate(X, Y, s, alpha, W, lam, loss):
    """``(P, D)`` per output, computed here (docs/algorithms.md, "Weights"), and ``W(alpha)``."""
    n = X.shape[0]
    X = sp.csr_matrix(X, dtype=np.float64)
    Y = Y.reshape(n, -1)
    alpha = alpha.reshape(n, -1)
    s = np.ones(n) if s is None else s
    W_alpha = np.asarray(X.T @ (alpha * Y)) / (lam * n)
    slack = np.maximum(0.0, 1.0 - Y * np.asarray(X @ W))
    if loss == "squared_hinge":
        P = 0.5 * lam * (W * W).sum(0) + (s[:, None] * slack ** 2).mean(0)
        lin = np.where(s[:, None] > 0, alpha - alpha ** 2 / (4 * np.where(s > 0, s, 1)[:, None]),
                       0.0)
    else:
        P = 0.5 * lam * (W * W).sum(0) + (s[:, None] * slack).mean(0)
        lin = alpha
    D = lin.sum(0) / n - 0.5 * lam * (W_alpha * W_alpha).sum(0)
    return P, D, W_alpha


def ovr_labels(y, classes):
    return np.where(np.asarray(y)[:, None] == classes[None, :], 1.0, -1.0) if classes.size > 2 \
        else np.where(np.asarray(y) == classes[1], 1.0, -1.0)[:, None]


def check_against_local(dist, local, X, y, s, lam, loss, tol):
    """Both certificates hold and the two models lie within their bounds of each other."""
    Y = ovr_labels(y, dist.classes_)
    W = dist.coef_.T
    P, D, W_alpha = certificate(X, Y, s, np.asarray(dist.alpha_), W, lam, loss)
    assert np.all(P - D <= tol)
    assert_near_w_alpha(W, W_alpha, P - D, lam)
    np.testing.assert_allclose(P - D, np.atleast_1d(dist.duality_gap_), rtol=0, atol=1e-9)
    assert dist.stop_reason_ == "tol"
    assert np.all(np.atleast_1d(local.duality_gap_) <= tol)
    bound = np.sqrt(2 * (P - D) / lam) + np.sqrt(2 * np.atleast_1d(local.duality_gap_) / lam)
    dist_w = np.linalg.norm(dist.coef_ - local.coef_, axis=1)
    assert np.all(dist_w <= bound), (dist_w, bound)


def local_fit(**params):
    return LocalSDCASVC(bias="none", dtype="float64", backend="numba", random_state=0,
                        **params)


@pytest.fixture(scope="module")
def letter_small():
    X, y = load_svmlight_file(str(shared_data_dir() / "letter" / "letter.scale"), n_features=16)
    return X[:1500].astype(np.float64), y[:1500]


def test_multiclass_ovr_is_one_pass_of_m_outputs(client, letter_small):
    """26 classes: one distributed fit of 26 outputs, each certified, each within its bound of
    the local SDCASVC's; predictions by the largest score; to_local keeps it all."""
    X, y = letter_small
    lam, tol = 1e-2, 1e-3
    dist = gd.SDCASVC(lam=lam, tol=tol, random_state=0).fit(X, y)
    local = local_fit(lam=lam, tol=tol).fit(X, y)
    assert dist.coef_.shape == (26, 16) and np.asarray(dist.duality_gap_).shape == (26,)
    assert np.asarray(dist.alpha_).shape == (1500, 26)
    check_against_local(dist, local, X, y, None, lam, "hinge", tol)
    scores = dist.decision_function(X)
    np.testing.assert_array_equal(dist.predict(X), dist.classes_[np.argmax(scores, axis=1)])
    back = dist.to_local()
    np.testing.assert_array_equal(back.predict(X), dist.predict(X))
    np.testing.assert_array_equal(back.duality_gap_, dist.duality_gap_)
    lazy = dist.predict(da.from_array(X.toarray(), chunks=(500, 16)))
    np.testing.assert_array_equal(lazy.compute(), dist.predict(X))


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_c_weights_and_loss_give_the_local_model(client, rcv1_small, loss):
    """C, class_weight="balanced", a sample_weight given as a dask array aligned with X, and
    the loss: the distributed model is the local estimator's within the certificates."""
    X, y = rcv1_small.X.astype(np.float64), rcv1_small.y
    n = X.shape[0]
    w = np.random.default_rng(0).uniform(0.2, 2.0, n)
    C, tol = 5.0, 1e-3
    Xd = da.from_array(X, chunks=(n // 2, X.shape[1]), asarray=False)
    wd = da.from_array(w, chunks=n // 2)
    dist = gd.SDCASVC(C=C, loss=loss, class_weight="balanced", tol=tol, local_epochs=2.0,
                      random_state=0).fit(Xd, y, sample_weight=wd)
    local = local_fit(C=C, loss=loss, class_weight="balanced", tol=tol).fit(
        X, y, sample_weight=w)
    lam = 1.0 / (C * n)
    assert dist.lam_ == pytest.approx(lam, rel=1e-15)
    cls = (y > 0).astype(int)           # "balanced" with weights: weighted class counts
    s = w * (w.sum() / (2.0 * np.bincount(cls, weights=w)))[cls]
    check_against_local(dist, local, X, y, s, lam, loss, tol)
    if loss == "hinge":
        assert np.all((dist.alpha_ >= 0) & (dist.alpha_ <= s * (1 + 1e-12)))
    else:
        assert np.all(dist.alpha_ >= 0)


def weighted_problem(n=1500):
    """A small a8a-like set (123 columns, about 12 nonzeros a row), its sample weights and the
    row weights ``s`` that ``class_weight="balanced"`` makes of them."""
    from gpusvm.datasets import make_sparse_classification
    X, y = make_sparse_classification(n, 123, nnz_per_row=14, random_state=3, dtype=np.float64)
    w = np.random.default_rng(0).uniform(0.5, 2.0, n)
    cls = (y > 0).astype(int)
    return X, y, w, w * (w.sum() / (2.0 * np.bincount(cls, weights=w)))[cls]


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_weighted_fit_above_tol_warns_with_its_certified_gap(client, loss):
    """A weighted fit stopped by max_iter above tol says so (gap, tol, what to change); its
    reported gap is the certificate recomputed here from ``coef_`` and ``alpha_``."""
    X, y, w, s = weighted_problem()
    with pytest.warns(ConvergenceWarning, match=r"stopped after max_iter=3 rounds with duality "
                                                r"gap \S+ > tol=1e-06; increase max_iter"):
        clf = gd.SDCASVC(loss=loss, class_weight="balanced", tol=1e-6, max_iter=3,
                         random_state=0).fit(X, y, sample_weight=w)
    assert clf.stop_reason_ == "max_iter" and clf.duality_gap_ > 1e-6
    P, D, _ = certificate(X, ovr_labels(y, clf.classes_), s, clf.alpha_, clf.coef_.T,
                          clf.lam_, loss)
    np.testing.assert_allclose([clf.primal_objective_, clf.dual_objective_],
                               [P[0], D[0]], rtol=1e-10)


def test_callback_stop_above_tol_warns(client):
    """A callback that stops the fit above tol: a ConvergenceWarning naming the gap and tol."""
    X, y, w, _ = weighted_problem()
    with pytest.warns(ConvergenceWarning, match=r"stopped by its callback at round 1 with "
                                                r"duality gap \S+ > tol=0.001"):
        clf = gd.SDCASVC(tol=1e-3, callback=lambda r, gap, t: r < 1, random_state=0).fit(
            X, y, sample_weight=w)
    assert clf.stop_reason_ == "callback" and clf.duality_gap_ > 1e-3


def test_emulated_device_backend_in_the_workers(client, rcv1_small):
    """backend="emulated": the device backend's segment on the CPU kernel emulator in every
    worker takes the steps the compiled CPU backend takes (same seed, same blocks), with 3
    one-vs-rest outputs, C, class and sample weights and the squared hinge."""
    X, y = rcv1_small.X[:160].astype(np.float64), rcv1_small.y[:160]
    y3 = np.where(y > 0, 2, np.arange(160) % 2)
    s = np.linspace(0.5, 1.5, 160)
    kw = dict(C=0.5, loss="squared_hinge", class_weight="balanced", tol=1e-6, max_iter=3,
              random_state=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # 3 rounds do not reach tol
        emu = gd.SDCASVC(backend="emulated", **kw).fit(X, y3, sample_weight=s)
        cpu = gd.SDCASVC(backend="numba", **kw).fit(X, y3, sample_weight=s)
    assert emu.n_iter_ == cpu.n_iter_ == 3 and emu.coef_.shape == (3, X.shape[1])
    np.testing.assert_allclose(emu.alpha_, cpu.alpha_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(emu.coef_, cpu.coef_, rtol=1e-9, atol=1e-12)
    cw = s.sum() / (3.0 * np.bincount(y3, weights=s))
    P, D, _ = certificate(X, ovr_labels(y3, emu.classes_), s * cw[y3], emu.alpha_, emu.coef_.T,
                          emu.lam_, "squared_hinge")
    np.testing.assert_allclose(P - D, emu.duality_gap_, rtol=0, atol=1e-9)


def test_sorted_chunks_are_dealt_out_afresh(client, rcv1_small):
    """A dask array sorted by label in 2 chunks (one class each) is rebalanced once: the fit
    certifies within the default rounds and alpha_ is in the caller's row order."""
    order = np.argsort(rcv1_small.y, kind="stable")
    X, y = rcv1_small.X[order].astype(np.float64), rcv1_small.y[order]
    n = X.shape[0]
    first = int(np.sum(y < 0))
    Xd = da.from_array(X, chunks=((first, n - first), (X.shape[1],)), asarray=False)
    clf = gd.SDCASVC(lam=1e-4, tol=1e-3, random_state=0).fit(Xd, y)
    assert clf.rebalanced_ and clf.stop_reason_ == "tol"
    P, D, W_alpha = certificate(X, y[:, None], None, clf.alpha_, clf.coef_.T, 1e-4, "hinge")
    assert float(P[0] - D[0]) <= 1e-3
    assert_near_w_alpha(clf.coef_.T, W_alpha, P - D, 1e-4)
    kept = gd.SDCASVC(lam=1e-4, tol=1e-3, rebalance=False, max_iter=3,
                      random_state=0)
    with pytest.warns(Warning, match="set rebalance='auto' if the blocks' class mixes differ"):
        kept.fit(Xd, y)
    assert not kept.rebalanced_


def test_rebalanced_blocks_do_not_depend_on_the_seed(client, rcv1_small):
    """Issue 50: CoCoA's rounds to tol follow the partition (news20 in 2 halves dealt by a
    seeded shuffle: 16 to 200+ rounds across seeds 0-9), so a rebalanced dask array is dealt
    out strided, as in-memory input is: for every seed the fit is, bit for bit, the in-memory
    fit of the same seed (same blocks, same rows in the same order), it certifies tol within
    3x the median seed's rounds, and a fixed seed repeats itself."""
    order = np.argsort(rcv1_small.y, kind="stable")
    X, y = rcv1_small.X[order].astype(np.float64), rcv1_small.y[order]
    n = X.shape[0]
    Xd = da.from_array(X, chunks=((n // 2, n - n // 2), (X.shape[1],)), asarray=False)
    rounds = []
    for seed in (0, 1, 2):
        clf = gd.SDCASVC(lam=1e-4, tol=1e-3, random_state=seed).fit(Xd, y)
        assert clf.rebalanced_ and clf.stop_reason_ == "tol"
        P, D, _ = certificate(X, y[:, None], None, clf.alpha_, clf.coef_.T, 1e-4, "hinge")
        assert float(P[0] - D[0]) <= 1e-3
        local = gd.SDCASVC(lam=1e-4, tol=1e-3, n_partitions=2, random_state=seed).fit(X, y)
        np.testing.assert_array_equal(clf.alpha_, local.alpha_)
        np.testing.assert_array_equal(clf.coef_, local.coef_)
        assert clf.n_iter_ == local.n_iter_
        rounds.append(clf.n_iter_)
    assert max(rounds) <= 3 * np.median(rounds), rounds
    again = gd.SDCASVC(lam=1e-4, tol=1e-3, random_state=2).fit(Xd, y)
    np.testing.assert_array_equal(again.alpha_, clf.alpha_)
    np.testing.assert_array_equal(again.coef_, clf.coef_)


@pytest.mark.slow
def test_acceptance_news20_halves_every_seed(client, news20):
    """Done-when (issue 50): news20 as stored, cut in two halves (one class each), on 2
    single-threaded workers: SDCASVC(tol=1e-3, random_state=seed) certifies tol for every seed
    0-9 within 3x the median seed's rounds (a seeded deal stalled at gaps 1.3-1.5e-3 after 200
    rounds for seeds 2 and 8); a fixed seed repeats itself."""
    X, y = news20.X.astype(np.float64), news20.y
    n = X.shape[0]
    Xd = da.from_array(X, chunks=(-(-n // 2), X.shape[1]), asarray=False)
    rounds, fits = [], {}
    for seed in range(10):
        clf = gd.SDCASVC(tol=1e-3, random_state=seed).fit(Xd, y)
        assert clf.rebalanced_ and clf.stop_reason_ == "tol", (seed, clf.duality_gap_)
        P, D, _ = certificate(X, np.where(y > 0, 1.0, -1.0)[:, None], None, clf.alpha_,
                              clf.coef_.T, clf.lam_, "hinge")
        assert float(P[0] - D[0]) <= 1e-3
        rounds.append(clf.n_iter_)
        fits[seed] = clf
    assert max(rounds) <= 3 * np.median(rounds), rounds
    again = gd.SDCASVC(tol=1e-3, random_state=7).fit(Xd, y)
    assert again.n_iter_ == fits[7].n_iter_
    np.testing.assert_array_equal(again.coef_, fits[7].coef_)


def test_read_svmlight_on_the_workers(client, rcv1_small, tmp_path):
    """Files read by the workers give the same blocks, hence the same model, as the same rows
    in memory cut at the same places."""
    X, y = rcv1_small.X, rcv1_small.y
    paths = []
    for p, rows in enumerate((slice(0, 400), slice(400, 1000))):
        path = tmp_path / f"part-{p}.svm"
        dump_svmlight_file(X[rows], y[rows], str(path), zero_based=False)
        paths.append(path)
    Xd, yd = gd.read_svmlight(paths, n_features=X.shape[1])
    assert Xd.shape == X.shape and Xd.chunks[0] == (400, 600)
    kw = dict(lam=1e-4, tol=1e-3, local_epochs=1.0, rebalance=False, random_state=1)
    a = gd.SDCASVC(**kw).fit(Xd, yd)
    Xm = da.from_array(X.astype(np.float64), chunks=((400, 600), (X.shape[1],)), asarray=False)
    b = gd.SDCASVC(**kw).fit(Xm, y)
    np.testing.assert_array_equal(a.alpha_, b.alpha_)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    Xw, _ = gd.read_svmlight([str(p) for p in paths])
    assert Xw.shape[1] == max(int(X[:400].indices.max()), int(X[400:].indices.max())) + 1


def test_readme_recipe_sends_no_large_graph(client):
    """da.from_array(X, chunks=..., asarray=False) embeds X in the graph: the fit sends the
    chunks to the workers instead of the graph (distributed warns from 10 MB on)."""
    rng = np.random.default_rng(0)
    X = sp.random(4000, 60000, density=0.01, format="csr", random_state=rng)
    y = np.where(rng.random(4000) < 0.5, 1, -1)
    Xd = da.from_array(X, chunks=(2000, X.shape[1]), asarray=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gd.SDCASVC(lam=1e-2, tol=1e-1, max_iter=5, random_state=0).fit(Xd, y)
    assert not [w for w in caught if "large graph" in str(w.message)]


def test_pegasos_multiclass_weights_exact_objective(client, letter_small):
    """Distributed Pegasos with M outputs, class weights and the squared hinge: the reported
    objective of every output is P_s computed here."""
    X, y = letter_small
    clf = gd.PegasosSVC(lam=1e-2, loss="squared_hinge", class_weight="balanced",
                        batch_size=128, max_iter=60, random_state=0).fit(X, y)
    classes = clf.classes_
    idx = np.searchsorted(classes, y)
    counts = np.bincount(idx, minlength=classes.size)
    s = (X.shape[0] / (classes.size * counts))[idx]
    P, _, _ = certificate(X, ovr_labels(y, classes), s, np.zeros((X.shape[0], classes.size)),
                          clf.coef_.T, 1e-2, "squared_hinge")
    np.testing.assert_allclose(clf.objective_, P, rtol=1e-9)
    assert clf.score(X, y) > 0.5


# ------------------------------------------------------------------ acceptance (slow)
def _news20_multiclass():
    from sklearn.model_selection import train_test_split

    from gpusvm.datasets import normalize_rows
    X, y = load_svmlight_file(str(shared_data_dir() / "news20_multiclass" / "news20.bz2"))
    X = normalize_rows(X.astype(np.float64))
    return train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["letter", "news20_multiclass"])
@pytest.mark.parametrize("backend", ["auto"])
def test_acceptance_multiclass_matches_local(client, name, backend):
    """Done-when: every output's gap <= 1e-3, the models within their certificates' bounds of
    the local SDCASVC's, and the test accuracy within 0.003 of the local one.

    On letter (16 features, lam = 1e-4, no intercept: many class scores nearly tie) fits
    certified to a gap of 1e-3 differ in test accuracy by the seed alone (the local SDCASVC's
    seeds 0-2: 0.6250, 0.6210, 0.6148; the distributed fit 0.6040), so both fits there are
    certified to 1e-4 (a gap <= 1e-3 still): the distributed fit 0.6206 against the local
    0.6232 (seeds 1-2: 0.6214; to a gap of 1e-5 both reach 0.6218)."""
    if name == "letter":
        X, y = load_svmlight_file(str(shared_data_dir() / "letter" / "letter.scale"),
                                  n_features=16)
        Xt, yt = load_svmlight_file(str(shared_data_dir() / "letter" / "letter.scale.t"),
                                    n_features=16)
        tol = 1e-4
    else:
        X, Xt, y, yt = _news20_multiclass()
        tol = 1e-3
    lam = 1e-4
    dist = gd.SDCASVC(lam=lam, tol=tol, random_state=0, backend=backend,
                      max_iter=1000).fit(X, y)
    local = LocalSDCASVC(lam=lam, tol=tol, bias="none", dtype="float64",
                         random_state=0).fit(X, y)
    assert np.all(dist.duality_gap_ <= tol) and np.asarray(dist.duality_gap_).size > 2
    check_against_local(dist, local, X, y, None, lam, "hinge", tol)
    assert abs(dist.score(Xt, yt) - local.score(Xt, yt)) <= 0.003


@pytest.mark.slow
@pytest.mark.parametrize("name", ["imdb", "news20"])
def test_acceptance_stored_order_one_class_per_partition(client, name, request):
    """Done-when: imdb and news20 as stored (sorted by label), in 2 partitions of one class
    each: a certified gap <= 1e-3 within the default rounds."""
    ds = request.getfixturevalue(name)
    X, y = ds.X.astype(np.float64), ds.y
    change = np.flatnonzero(np.diff(y)) + 1
    assert change.size == 1                        # the file is sorted by label
    cut = int(change[0])
    Xd = da.from_array(X, chunks=((cut, X.shape[0] - cut), (X.shape[1],)), asarray=False)
    clf = gd.SDCASVC(lam=1e-4, tol=1e-3, random_state=0).fit(Xd, y)
    assert clf.rebalanced_ and clf.stop_reason_ == "tol" and clf.n_iter_ < 200
    P, D, W_alpha = certificate(X, y[:, None], None, clf.alpha_, clf.coef_.T, 1e-4, "hinge")
    assert float(P[0] - D[0]) <= 1e-3
    assert_near_w_alpha(clf.coef_.T, W_alpha, P - D, 1e-4)


def _held_out_accuracy_bounds(X, y, tr, te, classes, C, gaps, s_tr, **local):
    """The held-out accuracy of a tightly certified ``SDCASVC(C=C)`` on the fold's training
    rows, and the fraction of held-out rows whose prediction a model within the two
    certificates' bounds of it (``||w_c - w*_c|| <= sqrt(2 gap_c / lam)`` for each,
    ``lam = 1/(C n_tr)``) may flip."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # short of 1e-7: its own gap enters the bound
        ref = LocalSDCASVC(C=C, tol=1e-7, bias="none", dtype="float64", backend="numba",
                           random_state=0, **local).fit(X[tr], y[tr], sample_weight=s_tr)
    Z = np.asarray(X[te] @ ref.coef_.T).reshape(te.size, -1)
    lam = 1.0 / (C * tr.size)
    r = np.sqrt(2 * np.asarray(gaps) / lam) + np.sqrt(2 * np.atleast_1d(ref.duality_gap_) / lam)
    xn = np.sqrt(np.asarray(X[te].multiply(X[te]).sum(axis=1))).ravel()
    if Z.shape[1] == 1:
        pred = classes[(Z[:, 0] > 0).astype(int)]
        loose = np.abs(Z[:, 0]) <= xn * r[0]
    else:
        top = np.argmax(Z, axis=1)
        pred = classes[top]
        lead = Z[np.arange(te.size), top][:, None] - Z          # top's lead over each class
        reach = xn[:, None] * (r[top][:, None] + r[None, :])
        loose = np.any((lead <= reach) & (np.arange(Z.shape[1])[None, :] != top[:, None]),
                       axis=1)
    return float(np.mean(pred == y[te])), float(np.mean(loose))


@pytest.mark.parametrize("problem", ["binary", "binary squared hinge", "multiclass"])
def test_cv_search_scores_each_model_within_its_certificate(client, rcv1_small, letter_small,
                                                             problem):
    """gd.SDCASVCCV: every (fold, C, class) model certified to tol in the units of
    SDCASVC(C=C) on the fold's training rows; its held-out accuracy that of the exact
    optimum up to the rows the certificate lets flip; C_ the best mean; the refit the
    distributed SDCASVC at C_ (same seed: the same model)."""
    from sklearn.model_selection import StratifiedKFold
    if problem.startswith("binary"):
        X, y = rcv1_small.X.astype(np.float64), rcv1_small.y
        Cs, extra = [0.1, 1.0], {}
        if problem.endswith("squared hinge"):      # duals unbounded, held-out rows' s = 0
            extra = {"loss": "squared_hinge"}
    else:
        X, y = letter_small
        X = sp.csr_matrix(X)
        Cs, extra = [0.02, 0.2], {"class_weight": "balanced"}
    w = np.random.default_rng(1).uniform(0.5, 1.5, X.shape[0])
    cv = StratifiedKFold(3)
    tol = 1e-5                     # a certificate tight enough to bound the held-out accuracy
    search = gd.SDCASVCCV(Cs=Cs, cv=cv, tol=tol, random_state=0, max_iter=1000, **extra).fit(
        X, y, sample_weight=w)
    classes = np.unique(y)
    n_P = 1 if classes.size == 2 else classes.size
    assert search.duality_gaps_.shape == (3, 2, n_P) and np.all(search.duality_gaps_ <= tol)
    np.testing.assert_array_equal(search.Cs_, Cs)
    for f, (tr, te) in enumerate(cv.split(X, y)):
        for ci, C in enumerate(Cs):
            acc, loose = _held_out_accuracy_bounds(X, y, tr, te, classes, C,
                                                   search.duality_gaps_[f, ci], w[tr], **extra)
            assert abs(search.scores_[f, ci] - acc) <= loose, (f, C, search.scores_[f, ci],
                                                                acc, loose)
    mean = search.scores_.mean(axis=0)
    assert search.C_ == Cs[int(np.flatnonzero(mean == mean.max())[0])]
    refit = gd.SDCASVC(C=search.C_, tol=tol, random_state=0, max_iter=1000, **extra).fit(
        X, y, sample_weight=w)
    np.testing.assert_allclose(search.coef_, refit.coef_, rtol=0, atol=1e-12)
    assert search.lam_ == refit.lam_ and np.all(np.atleast_1d(search.duality_gap_) <= tol)
    assert search.to_local().C == search.C_


def test_cv_search_refuses_what_it_cannot_do(client, rcv1_small):
    """One-line errors: folds of one class, a bad grid, another multi_class mode."""
    X, y = rcv1_small.X.astype(np.float64), rcv1_small.y
    order = np.argsort(y, kind="stable")
    from sklearn.model_selection import KFold
    with pytest.raises(ValueError, match=r"^fold \d of cv trains on one class only \("):
        gd.SDCASVCCV(Cs=[1.0], cv=KFold(2)).fit(X[order], y[order])
    with pytest.raises(ValueError, match=r"^Cs must hold finite values > 0"):
        gd.SDCASVCCV(Cs=[0.0, 1.0]).fit(X, y)
    y3 = np.arange(y.size) % 3
    with pytest.raises(ValueError, match=r"^SDCASVCCV fits more than two classes one-vs-rest "
                                         r"only"):
        gd.SDCASVCCV(Cs=[1.0], multi_class="ovo").fit(X, y3)
    search = gd.SDCASVCCV(Cs=[1.0], cv=2, refit=False, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match=r"^to_local needs the model refitted at C_"):
        search.to_local()


def test_cv_search_on_a_dask_array(client, rcv1_small):
    """A dask array in: the default grid from the rows' largest norm (computed on the workers),
    the held-out scores from the workers' chunks, the same as for the rows in memory."""
    from sklearn.model_selection import StratifiedKFold

    from gpusvm.dask._cv import _max_sq_norm, _scores_at
    from gpusvm.estimators.cv import default_Cs
    X, y = rcv1_small.X.astype(np.float64), rcv1_small.y
    Xd = da.from_array(X, chunks=(300, X.shape[1]), asarray=False)
    sq = float(np.max(np.asarray(X.multiply(X).sum(axis=1))))
    assert _max_sq_norm(Xd) == pytest.approx(sq, rel=1e-15)
    rows = np.array([5, 700, 3, 999])
    coef, b = np.random.default_rng(2).normal(size=(X.shape[1], 3)), np.array([1.0, 0, -1])
    np.testing.assert_allclose(_scores_at(Xd, rows, coef, b), _scores_at(X, rows, coef, b),
                               rtol=1e-12, atol=1e-12)
    search = gd.SDCASVCCV(Cs=2, cv=StratifiedKFold(2), refit=False, random_state=0,
                          max_iter=1000).fit(Xd, y)
    np.testing.assert_allclose(search.Cs_, default_Cs(2, X.shape[0], sq, "hinge"), rtol=1e-12)
    assert search.scores_.shape == (2, 2) and np.all(search.duality_gaps_ <= search.tol)
    assert search.coef_.shape == (1, X.shape[1]) and search.lam_ == 1 / (search.C_ * X.shape[0])


def test_read_svmlight_takes_the_binary_form(client, rcv1_small, tmp_path):
    """A part saved by gpusvm.datasets.save_binary (``gpusvm convert``) is read by its worker
    memory-mapped, beside a text part: the same rows as in memory."""
    from gpusvm.datasets import save_binary
    X, y = rcv1_small.X, rcv1_small.y
    text = tmp_path / "part-0.svm"
    dump_svmlight_file(X[:400], y[:400], str(text), zero_based=False)
    binary = save_binary(tmp_path / "part-1.gsvm", X[400:], y[400:])
    Xd, yd = gd.read_svmlight([text, binary], n_features=X.shape[1])
    assert Xd.chunks[0] == (400, X.shape[0] - 400)
    for block, rows in ((0, slice(0, 400)), (1, slice(400, None))):
        got = Xd.blocks[block].compute()
        assert (got != X[rows]).nnz == 0 and got.dtype == X.dtype
    np.testing.assert_array_equal(yd.compute(), y)
