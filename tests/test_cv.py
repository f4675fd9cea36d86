"""Choosing C in one pass: per-output row weights on every backend, and SDCASVCCV.

docs/algorithms.md, "Model selection in one pass".  The per-output weights are checked
against one fit per output on the same batches (numpy, numba and the emulated
device), the folded ``lam`` against LIBLINEAR at each ``C`` on each fold's training
rows, the search against scikit-learn's GridSearchCV on the same folds, and the
errors against their exact messages.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.svm import LinearSVC

from gpusvm import SDCASVCCV
from gpusvm.backends import make_backend
from gpusvm.estimators.cv import check_Cs, default_Cs
from gpusvm.solvers.newton import newton
from gpusvm.solvers.sdca import sdca


def toy(n=240, d=30, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, format="csr", random_state=seed + 1, dtype=np.float64)
    X.sort_indices()
    z = X @ rng.standard_normal((d, classes)) + 0.3 * rng.standard_normal((n, classes))
    y = np.argmax(z, axis=1) if classes > 2 else np.where(z[:, 0] > 0, 1, 0)
    return X, y


# ----------------------------------------------------------------- per-output weights
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("backend", ["numpy", "numba", "emulated"])
def test_per_output_weights_equal_one_fit_per_output(backend, loss):
    """Output c with weights S[:, c] takes the steps of a fit with the weights S[:, c] alone
    (the same rows in the same order): columns of the M-output solution agree to rounding."""
    X, y = toy(n=120 if backend == "emulated" else 240)
    n = X.shape[0]
    yy = np.where(y == 1, 1.0, -1.0)
    rng = np.random.default_rng(5)
    S = rng.uniform(0.0, 2.0, (n, 3))
    S[rng.random(n) < 0.2, 1] = 0.0                  # a held-out fold of output 1
    Y = np.column_stack([yy, -yy, yy])
    kw = dict(lam=1e-2, b=1 if backend != "emulated" else 8, max_iter=6 * n, variant="safe",
              sampling="epoch", tol=1e-14, eval_every=2 * n, seed=3, loss=loss,
              sigma2=1.0)
    multi = sdca(make_backend(backend, X, Y, sample_weight=S), **kw)
    for c in range(3):
        one = sdca(make_backend(backend, X, Y[:, c], sample_weight=S[:, c]), **kw)
        np.testing.assert_allclose(multi.w[:, c], one.w, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(multi.extra["alpha"][:, c], one.extra["alpha"], rtol=1e-6,
                                   atol=1e-9)
    assert np.all(multi.extra["alpha"][S[:, 1] == 0, 1] == 0.0)   # weight 0: never moved


def test_output_scale_reports_each_output_in_its_own_units():
    """Weights g * s at lam_ref = lam / g is the problem lam with weights s, times g: the
    scaled run reaches the same w, and reports P, D and the gap divided by g."""
    X, y = toy()
    yy = np.where(y == 1, 1.0, -1.0)
    lam, g = 1e-2, np.array([1.0, 0.25])
    Y = np.column_stack([yy, yy])
    S = np.column_stack([np.ones(X.shape[0]), np.ones(X.shape[0])]) * g
    kw = dict(b=1, max_iter=400 * X.shape[0], variant="safe", sampling="epoch", tol=1e-9,
              seed=1, loss="squared_hinge")
    res = sdca(make_backend("numba", X, Y, sample_weight=S), lam=lam, output_scale=1.0 / g, **kw)
    ref = sdca(make_backend("numba", X, yy), lam=lam / g[1], **kw)
    np.testing.assert_allclose(res.w[:, 1], ref.w, rtol=0, atol=1e-4)
    np.testing.assert_allclose(res.extra["primal"][1], ref.extra["primal"], rtol=1e-6)
    assert np.all(res.extra["gap"] <= 1e-9)
    with pytest.raises(ValueError, match="output_scale must be positive and finite, one value "
                                         "per output"):
        sdca(make_backend("numba", X, Y, sample_weight=S), lam=lam, output_scale=[1.0], **kw)


def test_newton_takes_per_output_weights_and_tolerances():
    X, y = toy()
    yy = np.where(y == 1, 1.0, -1.0)
    S = np.random.default_rng(0).uniform(0.5, 1.5, (X.shape[0], 2))
    be = make_backend("numpy", X, yy)
    both = newton(be, lam=1e-2, tol=np.array([1e-10, 1e-10]), y=np.column_stack([yy, yy]),
                  sample_weight=S)
    for c in range(2):
        one = newton(be, lam=1e-2, tol=1e-10, y=yy, sample_weight=S[:, c])
        np.testing.assert_allclose(both.w[:, c], one.w, rtol=1e-8, atol=1e-10)


# ----------------------------------------------------------------- the search
def _grid(X, y, Cs, cv, loss="squared_hinge"):
    g = GridSearchCV(LinearSVC(loss=loss, tol=1e-8, max_iter=100000), {"C": list(Cs)}, cv=cv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        g.fit(X, y)
    scores = np.stack([g.cv_results_[f"split{f}_test_score"] for f in range(cv.n_splits)])
    return g, scores


@pytest.mark.parametrize("solver", ["sdca", "newton"])
def test_search_scores_every_fold_as_gridsearch_does(a9a, solver):
    """Every (fold, C) model is LinearSVC(C)'s on the fold's training rows, so the fold scores
    agree with GridSearchCV(LinearSVC) on the same folds (to the few rows near the boundary
    that a certified gap of 1e-5 leaves), and the chosen C is one of equal score."""
    X, y = a9a.X[:2000], a9a.y[:2000]
    Cs = 2.0 ** np.arange(-4, 3)
    cv = StratifiedKFold(4, shuffle=True, random_state=0)
    tol = 1e-5 if solver == "sdca" else 1e-6
    m = SDCASVCCV(Cs=Cs, cv=cv, loss="squared_hinge", solver=solver, tol=tol,
                  random_state=0).fit(X, y)
    g, scores = _grid(X, y, Cs, cv)
    assert m.scores_.shape == (4, Cs.size)
    assert np.abs(m.scores_ - scores).max() <= 2.5 / 500       # two rows of a 500-row fold
    assert np.all(m.duality_gaps_ <= tol)
    best = g.cv_results_["mean_test_score"].max()
    assert g.cv_results_["mean_test_score"][list(Cs).index(m.C_)] >= best - 0.003
    np.testing.assert_array_equal(m.Cs_, Cs)


def test_fold_model_is_liblinear_at_its_C(a9a):
    """The stored (fold, C) model is LinearSVC(C) on that fold's training rows."""
    X, y = a9a.X[:1500], a9a.y[:1500]
    Cs = [0.05, 2.0]
    cv = KFold(3, shuffle=True, random_state=1)
    m = SDCASVCCV(Cs=Cs, cv=cv, loss="squared_hinge", tol=1e-8, refit=False,
                  random_state=0).fit(X, y)
    m2 = SDCASVCCV(Cs=Cs, cv=cv, loss="squared_hinge", tol=1e-8, refit=False, n_jobs=1,
                   random_state=0)
    m2.fit(X, y)
    for f, (tr, te) in enumerate(cv.split(X)):
        for ci, C in enumerate(Cs):
            ref = LinearSVC(C=C, tol=1e-10, max_iter=10**6).fit(X[tr], y[tr])
            acc = (ref.predict(X[te]) == y[te]).mean()
            assert abs(m.scores_[f, ci] - acc) <= 1.5 / te.size
    np.testing.assert_allclose(m.scores_, m2.scores_)


def test_multiclass_ovr_search_and_refit(shared_data):
    from gpusvm.datasets import load_svmlight
    X, y = load_svmlight(str(shared_data / "letter" / "letter.scale"))[:2]
    X, y = X[:1500], y[:1500]
    keep = np.isin(y, np.unique(y)[:5])                   # five classes
    X, y = X[keep], y[keep]
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    m = SDCASVCCV(Cs=[0.1, 1.0], cv=cv, loss="squared_hinge", random_state=0).fit(X, y)
    assert m.duality_gaps_.shape == (3, 2, np.unique(y).size)
    assert np.all(m.duality_gaps_ <= m.tol)
    assert m.coef_.shape == (np.unique(y).size, X.shape[1])
    assert m.duality_gap_.max() <= m.tol                  # the refit's certificates
    assert m.score(X, y) > 0.5


def test_auto_solvers_of_the_search_and_of_the_refit():
    from gpusvm.solvers.policy import choose_cv_solver  # noqa: PLC0415

    # the search: Newton on n >> d (a9a, w8a, letter's 26 classes alike), SDCA on text
    assert choose_cv_solver("squared_hinge", 15000, 17, 26) == "newton"
    assert choose_cv_solver("squared_hinge", 25000, 74850, 1) == "sdca"
    assert choose_cv_solver("hinge", 15000, 17, 26) == "sdca"
    assert choose_cv_solver("squared_hinge", 15000, 17, 26, "sdca") == "sdca"
    # a search on SDCA (4 d > n) whose refit at a large C is LinearSVC's choice, Newton: the
    # refit is the fit at C_ (LIBLINEAR's optimum, certified)
    X, y = toy(n=200, d=60)
    m = SDCASVCCV(Cs=[10.0, 100.0], cv=3, loss="squared_hinge", tol=1e-8,
                  random_state=0).fit(X, y)
    assert (m.solver_, m.refit_solver_) == ("sdca", "newton")
    ref = LinearSVC(C=m.C_, tol=1e-12, max_iter=10**6).fit(X, y)
    assert m.duality_gap_ <= 1e-8
    np.testing.assert_allclose(m.decision_function(X), ref.decision_function(X), atol=1e-3)
    forced = SDCASVCCV(Cs=[10.0, 100.0], cv=3, loss="squared_hinge", solver="sdca",
                       random_state=0).fit(X, y)
    assert (forced.solver_, forced.refit_solver_) == ("sdca", "sdca")
    # max_iter counts the search's SDCA iterations: a Newton refit runs on its own default
    with pytest.warns(ConvergenceWarning, match="models of the search ended above tol"):
        capped = SDCASVCCV(Cs=[10.0, 100.0], cv=3, loss="squared_hinge", max_iter=1,
                           random_state=0).fit(X, y)
    assert capped.refit_solver_ == "newton" and capped.stop_reason_ == "tol"
    assert capped.duality_gap_ <= capped.tol


def test_overlapping_newton_calls_restore_blas_threads_after_the_last():
    """Two threads' Newton calls overlapping (enter A, enter B, leave A, leave B): BLAS stays
    on one thread until the last leaves, then has its own count again (each restoring what
    it found left it on 1 for good after a threaded search)."""
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    from gpusvm.solvers.newton import _BLAS_ONE_THREAD  # noqa: PLC0415

    def blas():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = blas()
    _BLAS_ONE_THREAD.__enter__()                       # A
    _BLAS_ONE_THREAD.__enter__()                       # B
    assert set(blas()) <= {1}
    _BLAS_ONE_THREAD.__exit__(None, None, None)        # A leaves first
    assert set(blas()) <= {1}
    _BLAS_ONE_THREAD.__exit__(None, None, None)        # then B
    assert blas() == before
    X, y = toy(n=2000, d=20)
    for _ in range(3):                                 # a threaded Newton search, end to end
        m = SDCASVCCV(Cs=[0.1, 1.0, 10.0, 100.0], cv=5, loss="squared_hinge", n_jobs=2).fit(X, y)
        assert m.solver_ == "newton" and blas() == before


def test_refit_is_the_fit_at_the_chosen_C(a9a):
    X, y = a9a.X[:1500], a9a.y[:1500]
    m = SDCASVCCV(Cs=[0.1, 1.0], cv=3, loss="squared_hinge", tol=1e-6, random_state=0).fit(X, y)
    ref = LinearSVC(C=m.C_, tol=1e-10, max_iter=10**6).fit(X, y)
    assert m.duality_gap_ <= 1e-6
    np.testing.assert_allclose(m.coef_.ravel(), ref.coef_.ravel(), atol=2e-2)
    assert (m.predict(X) == ref.predict(X)).mean() >= 0.99


@pytest.mark.parametrize("backend", ["numpy", "numba", "emulated"])
def test_in_a_pipeline_on_every_backend(backend):
    X, y = toy(n=150, classes=3)
    pipe = make_pipeline(MaxAbsScaler(), SDCASVCCV(Cs=[0.5, 5.0], cv=3, backend=backend,
                                                   batch_size=8 if backend == "emulated"
                                                   else "auto", random_state=0))
    pipe.fit(X, y)
    m = pipe[-1]
    assert m.scores_.shape == (3, 2) and m.C_ in (0.5, 5.0)
    assert pipe.score(X, y) > 0.5


def test_uncertified_models_are_named_in_one_warning(a9a):
    X, y = a9a.X[:1000], a9a.y[:1000]
    with pytest.warns(ConvergenceWarning, match=r"of the 6 models of the search ended above "
                                                r"tol=1e-12, e\.g\. C=.* on fold \d"):
        SDCASVCCV(Cs=[0.1, 1.0], cv=3, tol=1e-12, max_iter=2000, refit=False).fit(X, y)


def test_class_weight_is_computed_on_each_training_fold():
    X, y = toy(n=200)
    y[:150] = 0
    m = SDCASVCCV(Cs=[1.0], cv=4, class_weight="balanced", loss="squared_hinge", solver="newton",
                  tol=1e-10, refit=False).fit(X, y)
    for f, (tr, te) in enumerate(StratifiedKFold(4).split(X, y)):
        ref = LinearSVC(C=1.0, class_weight="balanced", tol=1e-12, max_iter=10**6)
        ref.fit(X[tr], y[tr])
        assert abs(m.scores_[f, 0] - (ref.predict(X[te]) == y[te]).mean()) <= 1.5 / te.size


def test_default_grid_ends_come_from_the_data(a9a):
    Cs = default_Cs(10, 32561, 15.0, "squared_hinge")
    assert Cs.size == 10 and Cs[-1] == 1024.0
    assert Cs[0] == 2.0 ** np.floor(np.log2(1.0 / (2 * 32561 * 15.0)))   # LIBLINEAR's start
    m = SDCASVCCV(Cs=3, cv=2, solver="newton", loss="squared_hinge", refit=False)
    m.fit(a9a.X[:600], a9a.y[:600])
    assert m.Cs_.size == 3 and m.Cs_[-1] == 1024.0


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("Cs, message", [
    ([], "Cs must be a positive int or a non-empty list of positive values of C, got []"),
    ([1.0, -2.0], "Cs must hold finite values > 0 (C = 1/(lam n)), got -2.0"),
    ([np.nan], "Cs must hold finite values > 0 (C = 1/(lam n)), got nan"),
    ([1.0, np.inf], "Cs must hold finite values > 0 (C = 1/(lam n)), got inf"),
])
def test_bad_Cs_get_one_line(Cs, message):
    X, y = toy(n=60)
    with pytest.raises(ValueError, match=re.escape(message)):
        SDCASVCCV(Cs=Cs).fit(X, y)


def test_cv_larger_than_the_smallest_class():
    X, y = toy(n=60)
    y[:] = 0
    y[:3] = 1
    with pytest.raises(ValueError, match=re.escape(
            "cv=5 folds, but class 1 has only 3 rows: each stratified fold needs rows of every "
            "class; use cv <= 3, or more data")):
        SDCASVCCV(Cs=[1.0]).fit(X, y)


def test_a_fold_with_one_class():
    X, y = toy(n=60)
    y = np.where(np.arange(60) < 30, 0, 1)
    with pytest.raises(ValueError, match=re.escape(
            "fold 0 of cv trains on one class only (1): every training fold needs two classes; "
            "use a stratified splitter (cv=int does) or fewer folds")):
        SDCASVCCV(Cs=[1.0], cv=KFold(2)).fit(X, y)


def test_unknown_scorer():
    X, y = toy(n=60)
    with pytest.raises(ValueError, match="'no_such_score' is not a valid scoring value"):
        SDCASVCCV(Cs=[1.0], scoring="no_such_score").fit(X, y)


def test_check_Cs_sorts_and_dedups():
    np.testing.assert_array_equal(check_Cs([4, 1, 4, 0.5]), [0.5, 1.0, 4.0])


# ----------------------------------------------------------------- Pegasos
def test_pegasos_search_matches_its_own_fits_per_fold(a9a):
    """PegasosSVCCV's (fold, C) models are those of PegasosSVC(C) fitted on the fold's training
    rows with the folds' weights: same rows, same objective; its scores agree with them to
    the few rows near the boundary that Pegasos' stopping leaves."""
    from gpusvm import PegasosSVC, PegasosSVCCV
    X, y = a9a.X[:1500], a9a.y[:1500]
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    m = PegasosSVCCV(Cs=[0.1, 1.0], cv=cv, random_state=0, refit=False).fit(X, y)
    assert m.scores_.shape == (3, 2)
    for f, (tr, te) in enumerate(cv.split(X, y)):
        for ci, C in enumerate([0.1, 1.0]):
            ref = LinearSVC(C=C, loss="hinge", tol=1e-8, max_iter=10**6).fit(X[tr], y[tr])
            acc = (ref.predict(X[te]) == y[te]).mean()
            assert abs(m.scores_[f, ci] - acc) <= 0.02
    assert not hasattr(m, "duality_gaps_")


def test_pegasos_search_refits_at_the_chosen_C(a9a):
    from gpusvm import PegasosSVCCV
    X, y = a9a.X[:1200], a9a.y[:1200]
    m = PegasosSVCCV(Cs=[0.05, 0.5], cv=3, random_state=0).fit(X, y)
    assert m.C_ in (0.05, 0.5)
    assert m.lam_ == pytest.approx(1.0 / (m.C_ * X.shape[0]))
    assert m.to_estimator().score(X, y) == m.score(X, y)


# ----------------------------------------------------------------- CLI
def test_cli_select_prints_the_curve_marks_the_choice_and_saves_the_refit(tmp_path, capsys,
                                                                          shared_data):
    from gpusvm.cli import main
    from gpusvm.datasets import load_svmlight
    from gpusvm.model_io import load_model
    out, plot = tmp_path / "m.npz", tmp_path / "curve.png"
    status = main(["select", str(shared_data / "a9a" / "a9a.t"), "--Cs", "0.03,0.3,3",
                   "--folds", "3", "--out", str(out), "--plot", str(plot), "--n-jobs", "1"])
    text = capsys.readouterr().out
    assert status == 0, text
    assert text.count("<- chosen") == 1
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert [float(r[0]) for r in rows[:3]] == [0.03, 0.3, 3.0]
    chosen = float(next(r for r in rows if r[-1] == "chosen")[0])
    model = load_model(out)
    assert model.C == chosen
    X, y = load_svmlight(str(shared_data / "a9a" / "a9a.t"))[:2]
    assert model.score(X, y) > 0.8
    assert plot.stat().st_size > 1000


def test_cli_select_bad_Cs_is_one_line(capsys):
    from gpusvm.cli import main
    assert main(["select", "no.svm", "--Cs", "a,b"]) == 2
    err = capsys.readouterr().err
    assert "expected a count of values (e.g. 12) or values of C separated by commas" in err
    assert len(err.strip().splitlines()) == 1


def test_hinge_refit_with_fold_class_weights_starts_inside_its_box():
    """Balanced class weights differ between a fold and all rows; the refit's warm start is
    clipped to the refit's dual box (the hinge's [0, s_i]) and certifies."""
    X, y = toy(n=200)
    y[:140] = 0
    m = SDCASVCCV(Cs=[0.1, 0.5], cv=4, class_weight="balanced", tol=1e-4,
                  random_state=0).fit(X, y)
    assert m.duality_gap_ <= 1e-4
    assert np.all(m.alpha_ >= 0)
