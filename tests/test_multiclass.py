"""The LinearSVC user's interface: C, weights, losses, multiclass modes, warm starts, Newton.

References are independent implementations: scikit-learn's LinearSVC (liblinear) for the
squared-hinge optima, OneVsOneClassifier for the one-vs-one vote, binary fits for the
one-vs-rest outputs, and row duplication for integer weights.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file, make_blobs, make_classification
from sklearn.multiclass import OneVsOneClassifier
from sklearn.svm import LinearSVC

from conftest import SHARED_DATA

from gpusvm import PegasosSVC, SDCASVC
from gpusvm.backends import make_backend
from gpusvm.datasets import load_a9a
from gpusvm.estimators._base import ordinal_scores, output_problems, resolve_lam
from gpusvm.solvers.newton import newton, primal_dual

LETTER = str(SHARED_DATA / "letter" / "letter.scale")


def exactly(message):
    return f"^{re.escape(message)}$"


def squared_hinge_objective(X, y, w, b, lam, s=None):
    """``P_2`` of docs/algorithms.md with the intercept regularised (bias="augmented")."""
    s = np.ones(X.shape[0]) if s is None else s
    r = np.maximum(0.0, 1.0 - y * (X @ w + b))
    return 0.5 * lam * (w @ w + b * b) + float(np.sum(s * r * r)) / X.shape[0]


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=240, centers=4, n_features=5, cluster_std=2.5, random_state=1)
    return X / np.abs(X).max(), y


@pytest.fixture(scope="module")
def letter():
    X, y = load_svmlight_file(LETTER, n_features=16)
    return X[:3000].toarray(), y[:3000]


def newton_svc(**params):
    params = {"tol": 1e-10, **params}
    return SDCASVC(solver="newton", loss="squared_hinge", dtype="float64", backend="numpy",
                   **params)


# ------------------------------------------------------------------ C and lam
def test_c_means_lam_one_over_c_n(blobs):
    X, y = blobs
    n = X.shape[0]
    by_c = newton_svc(C=0.5).fit(X, y)
    by_lam = newton_svc(lam=1.0 / (0.5 * n)).fit(X, y)
    np.testing.assert_array_equal(by_c.coef_, by_lam.coef_)
    assert by_c.lam_ == pytest.approx(1.0 / (0.5 * n), rel=1e-15)


@pytest.mark.parametrize("cls", [PegasosSVC, SDCASVC])
def test_c_and_lam_together_is_an_error(cls, blobs):
    X, y = blobs
    with pytest.raises(ValueError, match=exactly(
            "lam=0.01 and C=1.0 were both given, but they set the same regularisation "
            "(lam = 1/(C n), n the number of training rows): pass only one of them")):
        cls(lam=0.01, C=1.0, backend="numpy").fit(X, y)


def test_default_lam_is_1e_4():
    assert resolve_lam(None, None, 10) == 1e-4
    assert resolve_lam(0.5, None, 10) == 0.5
    assert resolve_lam(None, 2.0, 10) == 1.0 / 20


# ------------------------------------------------------------------ Newton against LinearSVC
def test_newton_matches_linearsvc_on_a9a_weighted_and_not():
    X, y = load_a9a(dtype=np.float64)
    n = X.shape[0]
    C = 0.1
    s = np.random.default_rng(0).integers(0, 4, n).astype(np.float64)
    for weights in (None, s):
        est = newton_svc(C=C).fit(X, y, sample_weight=weights)
        lin = LinearSVC(C=C, loss="squared_hinge", tol=1e-10, dual=False,
                        max_iter=100_000).fit(X, y, sample_weight=weights)
        y_pm = np.where(y == est.classes_[1], 1.0, -1.0)
        lam = 1.0 / (C * n)
        ours = squared_hinge_objective(X, y_pm, est.coef_[0], est.intercept_[0], lam, weights)
        theirs = squared_hinge_objective(X, y_pm, lin.coef_[0], lin.intercept_[0], lam, weights)
        assert abs(ours - theirs) <= 1e-6 * max(1.0, theirs)
        assert est.duality_gap_ <= 1e-10 and ours - theirs <= est.duality_gap_ + 1e-12


@pytest.mark.parametrize("class_weight", [None, "balanced", {1.0: 3.0, 5.0: 0.5}])
def test_newton_matches_linearsvc_one_vs_rest_on_letter(letter, class_weight):
    X, y = letter
    n, C = X.shape[0], 1.0
    est = newton_svc(C=C, class_weight=class_weight).fit(X, y)
    assert est.coef_.shape == (26, 16)
    classes = np.unique(y)
    np.testing.assert_array_equal(est.classes_, classes)
    if class_weight is None:    # LinearSVC's own one-vs-rest
        lin = LinearSVC(C=C, loss="squared_hinge", tol=1e-10, dual=False,
                        max_iter=100_000).fit(X, y)
        refs = [(lin.coef_[k], lin.intercept_[k]) for k in range(26)]
        s = np.ones(n)
        assert np.mean(est.predict(X) == lin.predict(X)) >= 0.99
    else:
        # a row's weight s_i = class_weight[y_i] holds in every output (scikit-learn's sample
        # weight meaning); liblinear's own one-vs-rest weights only the positive class of each
        # output, so the reference is a binary LinearSVC per class with sample_weight=s
        idx = np.searchsorted(classes, y)
        if class_weight == "balanced":
            cw = n / (26 * np.bincount(idx))
        else:
            cw = np.array([class_weight.get(c, 1.0) for c in classes])
        s = cw[idx]
        refs = []
        for c in classes:
            lin = LinearSVC(C=C, loss="squared_hinge", tol=1e-10, dual=False,
                            max_iter=100_000).fit(X, y == c, sample_weight=s)
            refs.append((lin.coef_[0], lin.intercept_[0]))
    for k, c in enumerate(classes):
        y_pm = np.where(y == c, 1.0, -1.0)
        ours = squared_hinge_objective(X, y_pm, est.coef_[k], est.intercept_[k], 1 / (C * n), s)
        theirs = squared_hinge_objective(X, y_pm, *refs[k], 1 / (C * n), s)
        assert abs(ours - theirs) <= 1e-6 * max(1.0, theirs), (c, ours, theirs)


def test_newton_runs_blas_on_one_thread_and_restores_it(letter):
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    assert before, "threadpoolctl finds no BLAS library under NumPy"
    seen = []
    X, y = letter[0][:2000], letter[1][:2000]
    be = make_backend("numpy", sp.csr_matrix(X), np.where(y == y[0], 1.0, -1.0))
    newton(be, lam=1e-3, tol=1e-6, callback=lambda *a: seen.append(blas_threads()))
    assert seen and all(threads == [1] * len(before) for threads in seen)
    assert blas_threads() == before


def test_newton_certificate_is_zero_at_the_closed_form_optimum():
    # docs/algorithms.md's check: n = 1, x = y = s = 1: w* = 2 / (lam + 2), P2* = D2* = lam / (lam + 2)
    lam = 0.3
    X = sp.csr_matrix(np.ones((1, 1)))
    be = make_backend("numpy", X, np.ones(1))
    res = newton(be, lam=lam, tol=1e-14)
    assert res.w[0] == pytest.approx(2 / (lam + 2), rel=1e-12)
    assert res.extra["primal"] == pytest.approx(lam / (lam + 2), rel=1e-12)
    assert res.extra["dual"] == pytest.approx(lam / (lam + 2), rel=1e-12)
    primal, dual, _ = primal_dual(res.extra["products"], np.ones(1), np.ones(1), lam,
                                  np.array([0.5]))
    assert primal - dual > 0       # away from the optimum the gap is positive


def test_integer_weights_equal_duplicated_rows(blobs):
    X, y = blobs
    s = np.random.default_rng(3).integers(0, 4, X.shape[0])
    weighted = newton_svc(C=0.7).fit(X, y, sample_weight=s)
    repeated = newton_svc(C=0.7).fit(np.repeat(X, s, axis=0), np.repeat(y, s))
    np.testing.assert_allclose(weighted.decision_function(X), repeated.decision_function(X),
                               rtol=1e-7, atol=1e-8)


def test_newton_needs_the_squared_hinge(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match=exactly(
            "solver='newton' minimises the squared hinge, but loss='hinge': the hinge is not "
            "differentiable; use loss='squared_hinge' with solver='newton', or solver='sdca' "
            "for the hinge")):
        SDCASVC(solver="newton").fit(X, y)


def test_newton_warm_start_resumes_at_the_optimum(letter):
    X, y = letter
    est = newton_svc(C=1.0, warm_start=True, tol=1e-8).fit(X, y)
    cold_iter, cold_primal = est.n_iter_, est.primal_objective_.copy()
    assert cold_iter >= 5
    est.fit(X, y)                  # starts where the first fit ended: already certified
    assert est.n_iter_ <= 1
    assert np.all(est.primal_objective_ <= cold_primal + 1e-12)
    assert np.all(est.duality_gap_ <= 1e-8)


# ------------------------------------------------------------------ multiclass modes
@pytest.mark.parametrize("native", [True, False], ids=["one-call", "per-class"])
def test_one_vs_rest_equals_binary_fits_with_the_same_seed(blobs, native):
    X, y = blobs
    for cls, params in ((SDCASVC, dict(lam=1e-2, max_iter=300, tol=0.0)),
                        (PegasosSVC, dict(lam=1e-2, max_iter=300, averaging="tail"))):
        ovr = cls(backend="numpy", dtype="float64", random_state=5, **params)
        ovr._ovr_native = native          # the M-output solver call where the solver has it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # not certified at max_iter: no matter here
            ovr.fit(X, y)
        assert ovr.coef_.shape == (4, 5) and ovr.decision_function(X).shape == (240, 4)
        for k, c in enumerate(ovr.classes_):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                one = cls(backend="numpy", dtype="float64", random_state=5,
                          **params).fit(X, (y == c).astype(int))
            np.testing.assert_allclose(ovr.coef_[k], one.coef_[0], rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(ovr.intercept_[k], one.intercept_[0], rtol=1e-6,
                                       atol=1e-9)


def test_one_vs_one_equals_scikit_learns_wrapper(blobs):
    X, y = blobs
    ours = newton_svc(lam=1e-2, multi_class="ovo").fit(X, y)
    theirs = OneVsOneClassifier(newton_svc(lam=1e-2)).fit(X, y)
    assert ours.coef_.shape == (6, 5)
    np.testing.assert_allclose(ours.decision_function(X), theirs.decision_function(X),
                               rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))


def test_one_vs_one_with_c_uses_each_pairs_rows(blobs):
    X, y = blobs
    est = newton_svc(C=1.0, multi_class="ovo").fit(X, y)
    counts = np.bincount(y)
    expected = [1.0 / (counts[a] + counts[b]) for a in range(4) for b in range(a + 1, 4)]
    np.testing.assert_allclose(est.lam_, expected, rtol=1e-15)


def test_ordinal_decision_rule():
    # consistent signs: the class is the number of thresholds passed
    f = np.array([[1.0, 2.0, -1.0], [-1.0, -2.0, -3.0], [3.0, 1.0, 0.5]])
    scores = ordinal_scores(f)
    np.testing.assert_array_equal(np.argmax(scores, axis=1), [2, 0, 3])
    # inconsistent signs: the class the margins agree with most
    np.testing.assert_allclose(ordinal_scores(np.array([[-0.5, 2.0, -1.0]])),
                               [[0.0, -0.5, 1.5, 0.5]])


def test_ordinal_problems_are_neighbouring_pairs():
    y_idx = np.array([0, 1, 2, 3, 1, 2])
    problems = output_problems(4, y_idx, "ordinal")
    assert [rows.tolist() for rows, _ in problems] == [[0, 1, 4], [1, 2, 4, 5], [2, 3, 5]]
    assert [lab.tolist() for _, lab in problems] == [[-1, 1, 1], [-1, 1, -1, 1], [-1, 1, -1]]


def test_ordinal_fit_on_ordered_labels():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(600, 3))
    score = X @ np.array([1.0, -0.5, 0.25])
    y = np.digitize(score, [-0.6, -0.2, 0.2, 0.6])            # 5 ordered grades
    est = newton_svc(C=10.0, multi_class="ordinal").fit(X, y)
    assert est.coef_.shape == (4, 3) and est.decision_function(X).shape == (600, 5)
    assert est.score(X, y) >= 0.9


# ------------------------------------------------------------------ partial_fit
def test_partial_fit_needs_classes_first(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match=exactly(
            "classes must be passed on the first call to partial_fit: all the labels the data "
            "will hold, e.g. classes=np.unique(y)")):
        PegasosSVC(backend="numpy").partial_fit(X, y)


def test_class_weight_must_name_known_classes(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="not in class_weight|not present"):
        newton_svc(class_weight={7: 2.0}).fit(X, y)


def test_all_zero_weights_are_refused(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match=exactly(
            "Sample weights must contain at least one non-zero number.")):
        newton_svc().fit(X, y, sample_weight=np.zeros(X.shape[0]))


# ------------------------------------------------------------------ binary stays as it was
def test_binary_shapes_are_unchanged():
    X, y = make_classification(n_samples=120, random_state=0)
    est = newton_svc(C=1.0).fit(X, y)
    assert est.coef_.shape == (1, 20) and est.intercept_.shape == (1,)
    assert est.decision_function(X).shape == (120,) and np.ndim(est.duality_gap_) == 0
    assert est.alpha_.shape == (120,)


# ------------------------------------------------------------------ warm starts of the mini-batch solvers
@pytest.mark.parametrize("bias", ["augmented", "unregularized"])
def test_two_partial_fits_equal_one_fit_of_two_epochs(blobs, bias):
    X, y = blobs
    lam = 1e-2
    params = dict(lam=lam, batch_size=16, averaging="none", backend="numpy", dtype="float64",
                  random_state=4, bias=bias)
    inc = PegasosSVC(**params)
    inc.partial_fit(X, y, classes=np.unique(y)).partial_fit(X, y)
    assert inc.t_ == 2 * 15
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = PegasosSVC(max_iter=30, **params).fit(X, y)
    np.testing.assert_allclose(inc.coef_, full.coef_, rtol=1e-9, atol=1e-12)
    if bias == "unregularized":
        np.testing.assert_allclose(inc.intercept_, full.intercept_, rtol=1e-9, atol=1e-12)
        return
    # fit returns the best augmented bias of its point; partial_fit keeps Pegasos' own, to go on
    Y = np.where(y[:, None] == inc.classes_[None, :], 1.0, -1.0)

    def objectives(est):
        Z = X @ est.coef_.T + est.intercept_
        return 0.5 * lam * ((est.coef_ ** 2).sum(axis=1) + est.intercept_ ** 2) + \
            np.maximum(0.0, 1.0 - Y * Z).mean(axis=0)
    assert np.all(objectives(full) <= objectives(inc) + 1e-12)
    assert np.any(objectives(full) < objectives(inc) - 1e-6)


def test_partial_fit_bounds_the_stream_not_its_chunk(blobs, monkeypatch):
    """A chunk of one class would put the constant-predictor ball around a tiny radius (the
    chunk's best constant fits it perfectly) and shrink the model: partial_fit projects onto
    the dual bound only and keeps Pegasos' bias, fit uses both refinements."""
    import gpusvm.solvers.pegasos as solver
    X, y = blobs
    seen = []
    real = solver.projection_radius

    def spy(backend, lam, loss="hinge", bias="none", intercept_scaling=1.0):
        seen.append(bias)
        return real(backend, lam, loss, bias, intercept_scaling)
    monkeypatch.setattr(solver, "projection_radius", spy)
    params = dict(lam=1e-2, batch_size=16, backend="numpy", random_state=0)
    est = PegasosSVC(**params).partial_fit(X, y, classes=np.unique(y))
    one = y == y[0]
    before = np.linalg.norm(est.coef_)
    est.partial_fit(X[one], y[one])
    assert seen == ["none", "none"]
    assert np.linalg.norm(est.coef_) > 0.5 * before     # the model is not shrunk to the chunk
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PegasosSVC(max_iter=30, **params).fit(X, y)
    assert seen[-1] == "augmented"


def test_sdca_warm_start_resumes_from_alpha(blobs):
    X, y = blobs
    est = SDCASVC(lam=1e-2, warm_start=True, backend="numpy", random_state=0).fit(X, y)
    assert np.all(est.duality_gap_ <= 1e-3)
    cold_iter = est.n_iter_
    est.fit(X, y)
    assert est.n_iter_ <= cold_iter / 2           # it resumes: far fewer steps than from 0
    assert np.all(est.duality_gap_ <= 1e-3)


@pytest.mark.parametrize("backend", ["numba", "emulated"])
def test_newton_on_every_backend_equals_numpy(blobs, backend):
    # the products run on each backend's own CSR matrix (the emulated device backend keeps it on
    # the host, as a CUDA device keeps it in cuSPARSE form)
    X, y = blobs
    s = np.random.default_rng(1).uniform(0.5, 2.0, X.shape[0])
    ref = newton_svc(C=1.0).fit(X, y, sample_weight=s)
    other = newton_svc(C=1.0).set_params(backend=backend).fit(X, y, sample_weight=s)
    assert other.backend_ == backend
    np.testing.assert_allclose(other.coef_, ref.coef_, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(other.duality_gap_, ref.duality_gap_, atol=1e-12)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_sdca_integer_weights_equal_duplicated_rows(blobs, loss):
    X, y = blobs
    s = np.random.default_rng(3).integers(0, 4, X.shape[0])
    params = dict(C=0.7, loss=loss, tol=1e-11, max_iter=10**7, dtype="float64",
                  backend="numba", random_state=0)
    weighted = SDCASVC(**params).fit(X, y, sample_weight=s)
    repeated = SDCASVC(**params).fit(np.repeat(X, s, axis=0), np.repeat(y, s))
    assert np.all(weighted.duality_gap_ <= 1e-11) and np.all(repeated.duality_gap_ <= 1e-11)
    # a gap g bounds ||w - w*||^2 <= 2 g / lam: here ||w - w*|| <= 6e-5 for each fit, and rows
    # (bias column included) have norm <= 2.5
    np.testing.assert_allclose(weighted.decision_function(X), repeated.decision_function(X),
                               rtol=0, atol=3e-4)
    assert np.mean(weighted.predict(X) == repeated.predict(X)) >= 0.99


def test_sdca_squared_hinge_matches_newton(letter):
    X, y = letter
    sdca = SDCASVC(C=1.0, loss="squared_hinge", tol=1e-6, dtype="float64", backend="numba",
                   random_state=0, max_iter=10**7).fit(X, y)
    newt = newton_svc(C=1.0).fit(X, y)
    # both certified: each primal is within its gap of the common optimum
    assert np.all(np.abs(sdca.primal_objective_ - newt.primal_objective_) <= 1e-6)


@pytest.mark.parametrize("cls, params", [
    (SDCASVC, dict(max_iter=200, tol=0.0, batch_size=8)),
    (PegasosSVC, dict(max_iter=200, averaging="tail", batch_size=8)),
], ids=["sdca", "pegasos"])
def test_weighted_one_vs_rest_on_the_emulated_device_equals_numpy(cls, params):
    # the CUDA kernels of the M-output path, run by the CPU emulator, against the NumPy reference
    X, y = make_blobs(n_samples=120, centers=3, n_features=5, cluster_std=2.5, random_state=1)
    X = X / np.abs(X).max()
    s = np.random.default_rng(0).uniform(0.5, 2.0, X.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        device = cls(backend="emulated", dtype="float64", random_state=3, C=1.0,
                     **params).fit(X, y, sample_weight=s)
        ref = cls(backend="numpy", dtype="float64", random_state=3, C=1.0,
                  **params).fit(X, y, sample_weight=s)
    assert device.backend_ == "emulated" and device.coef_.shape == (3, 5)
    np.testing.assert_allclose(device.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(device.intercept_, ref.intercept_, rtol=1e-9, atol=1e-12)
