"""gpusvm.LinearSVC: scikit-learn's LinearSVC interface, the problem it solves, the solver rule."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC as SkLinearSVC

import gpusvm
from gpusvm import LinearSVC
from gpusvm.solvers.policy import DUAL_MAX_C_SQNORM, choose_solver


def objective(X, y, coef, intercept, C, loss="squared_hinge", intercept_scaling=1.0,
              fit_intercept=True):
    """LinearSVC's objective ``1/2 ||w||^2 + C sum loss`` (the intercept regularised as a
    weight ``intercept / intercept_scaling`` of the constant feature, as liblinear)."""
    w = np.asarray(coef, dtype=np.float64).ravel()
    b = float(np.ravel(intercept)[0]) if fit_intercept else 0.0
    m = y * (X @ w + b)
    hinge = np.maximum(0.0, 1.0 - m)
    loss_sum = np.sum(hinge ** 2 if loss == "squared_hinge" else hinge)
    reg = w @ w + ((b / intercept_scaling) ** 2 if fit_intercept else 0.0)
    return 0.5 * reg + C * loss_sum


@pytest.fixture(scope="module")
def a9a_part(a9a):
    X = sp.csr_matrix(a9a.X[:4000], dtype=np.float64)
    y = np.where(a9a.y[:4000] > 0, 1.0, -1.0)
    return X, y


def test_signature_is_sklearns_plus_backend_device_and_threads():
    ours = inspect.signature(LinearSVC).parameters
    theirs = inspect.signature(SkLinearSVC).parameters
    assert list(ours)[:len(theirs)] == list(theirs)
    for name, p in theirs.items():
        assert (ours[name].default, ours[name].kind) == (p.default, p.kind), name
    assert list(ours)[len(theirs):] == ["backend", "device", "n_jobs"]
    assert gpusvm.LinearSVC is LinearSVC


@pytest.mark.parametrize("dual", [True, False, "auto"])
@pytest.mark.parametrize("C", [0.01, 1.0])
def test_solves_linearsvcs_problem(a9a_part, dual, C):
    """Both solvers reach liblinear's optimum of the same objective, within the certificate."""
    X, y = a9a_part
    ref = SkLinearSVC(C=C, tol=1e-10, max_iter=100_000, dual=True).fit(X, y)
    f_star = objective(X, y, ref.coef_, ref.intercept_, C)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = LinearSVC(C=C, dual=dual, random_state=0).fit(X, y)
    expected = {True: "sdca", False: "newton"}.get(dual, choose_solver(
        *X.shape, C, X.multiply(X).sum() / X.shape[0] + 1.0))
    assert est.solver_ == expected
    f = objective(X, y, est.coef_, est.intercept_, C)
    # tol bounds the gap relative to C n; float32 data add a little rounding
    assert f_star - 1e-6 * f_star <= f <= f_star + 1.5e-4 * C * X.shape[0]
    assert est.duality_gap_ <= 1e-4
    assert np.mean(est.predict(X) == ref.predict(X)) >= 0.995
    assert est.coef_.shape == (1, X.shape[1]) and est.intercept_.shape == (1,)


def test_hinge_and_intercept_settings(a9a_part):
    X, y = a9a_part
    C = 0.1
    for kwargs in (dict(loss="hinge"), dict(fit_intercept=False),
                   dict(intercept_scaling=10.0)):
        ref = SkLinearSVC(C=C, tol=1e-10, max_iter=100_000, dual=True, **kwargs).fit(X, y)
        est = LinearSVC(C=C, random_state=0, **kwargs).fit(X, y)
        args = dict(loss=kwargs.get("loss", "squared_hinge"),
                    intercept_scaling=kwargs.get("intercept_scaling", 1.0),
                    fit_intercept=kwargs.get("fit_intercept", True))
        f_star = objective(X, y, ref.coef_, ref.intercept_, C, **args)
        f = objective(X, y, est.coef_, est.intercept_, C, **args)
        assert f_star * (1 - 1e-6) <= f <= f_star + 1.5e-4 * C * X.shape[0], kwargs
        if kwargs.get("fit_intercept") is False:
            np.testing.assert_array_equal(est.intercept_, [0.0])
        if kwargs.get("loss") == "hinge":
            assert est.solver_ == "sdca"


def test_multiclass_agrees_with_liblinear():
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X) / 8.0
    ref = SkLinearSVC(tol=1e-10, max_iter=100_000).fit(X, y)
    est = LinearSVC(random_state=0).fit(X, y)
    assert est.coef_.shape == (10, 64) and est.intercept_.shape == (10,)
    np.testing.assert_array_equal(est.classes_, np.arange(10))
    assert np.mean(est.predict(X) == ref.predict(X)) >= 0.99
    for c in range(10):                 # each one-vs-rest output at liblinear's optimum
        yc = np.where(y == c, 1.0, -1.0)
        f_star = objective(X, yc, ref.coef_[c], ref.intercept_[c:c + 1], 1.0)
        f = objective(X, yc, est.coef_[c], est.intercept_[c:c + 1], 1.0)
        assert f_star * (1 - 1e-6) <= f <= f_star + 1.5e-4 * X.shape[0], c


def test_n_iter_counts_epochs_and_max_iter_caps_them(a9a_part):
    X, y = a9a_part
    est = LinearSVC(C=1.0, dual=True, random_state=0).fit(X, y)
    inner = est._inner_estimator
    assert est.n_iter_ == -(-inner.n_iter_ // X.shape[0]) and 1 < est.n_iter_ < 1000
    with pytest.warns(ConvergenceWarning) as caught:
        capped = LinearSVC(C=1.0, dual=True, max_iter=2, random_state=0).fit(X, y)
    assert capped.n_iter_ == 2 and capped.stop_reason_ == "max_iter"
    message = str(caught[0].message)
    assert message.startswith("gpusvm.LinearSVC did not converge: 2 epochs of the dual solver "
                              "(SDCA) ended with relative duality gap ")
    assert message.endswith(f"> tol=0.0001; increase max_iter, or use dual=False (the primal "
                            "Newton solver, faster for large C when n_samples >= n_features), "
                            "or scale the data")
    newton = LinearSVC(C=1.0, dual=False).fit(X, y)
    assert newton.n_iter_ == newton._inner_estimator.n_iter_ <= 20


@pytest.mark.parametrize("params, message", [
    (dict(penalty="l1"), "penalty='l1' (sparse weights) is not available in gpusvm.LinearSVC, "
     "which solves the L2-regularised problem; use sklearn.svm.LinearSVC(penalty='l1', "
     "dual=False) for an L1 penalty"),
    (dict(multi_class="crammer_singer"), "multi_class='crammer_singer' is not available in "
     "gpusvm.LinearSVC; use multi_class='ovr' (one-vs-rest), or "
     "sklearn.svm.LinearSVC(multi_class='crammer_singer') for the joint problem"),
    (dict(loss="hinge", dual=False), "loss='hinge' has no primal solver (the hinge is not "
     "differentiable), as in sklearn.svm.LinearSVC: use dual=True or dual='auto', or "
     "loss='squared_hinge' with dual=False"),
])
def test_what_gpusvm_cannot_honour_names_the_alternative(params, message):
    X, y = load_digits(n_class=2, return_X_y=True)
    with pytest.raises(ValueError) as info:
        LinearSVC(**params).fit(X, y)
    assert str(info.value) == message


def test_choose_solver_rule():
    assert choose_solver(100, 10, 1e3, 1e3, loss="hinge") == "sdca"
    assert choose_solver(100, 10, 1e3, 1e3, dual=True) == "sdca"
    assert choose_solver(100, 10_000, 1e-3, 1e-3, dual=False) == "newton"
    assert choose_solver(100, 10_000, 100.0, 1.0) == "sdca"            # wide: the dual
    bound = DUAL_MAX_C_SQNORM
    for n_classes in (2, 26):
        assert choose_solver(10_000, 100, 1.0, bound, n_classes) == "sdca"
        assert choose_solver(10_000, 100, 1.0, bound * 1.01, n_classes) == "newton"


def test_newton_dense_direct_steps_reach_the_cg_optimum(monkeypatch):
    """Dense data with few columns: exact Newton steps on a dense copy find the optimum that CG
    on the CSR matrix finds (the same certified objective)."""
    from gpusvm.backends import make_backend  # noqa: PLC0415
    from gpusvm.solvers import newton as newton_mod  # noqa: PLC0415

    X, y = load_digits(n_class=3, return_X_y=True)
    X = sp.csr_matrix(X / 16.0)
    y = np.where(y == 1, 1.0, -1.0)
    lam = 1.0 / X.shape[0]
    assert newton_mod._Products(X).direct
    direct = newton_mod.newton(make_backend("numpy", X, y), lam=lam, tol=1e-12)
    monkeypatch.setattr(newton_mod, "DENSE_MIN_DENSITY", 2.0)        # never dense: CG on CSR
    assert not newton_mod._Products(X).direct
    cg = newton_mod.newton(make_backend("numpy", X, y), lam=lam, tol=1e-12)
    assert direct.extra["gap"] <= 1e-12 and cg.extra["gap"] <= 1e-12
    assert direct.extra["cg_iter"] == 0 < cg.extra["cg_iter"]
    assert abs(direct.extra["primal"] - cg.extra["primal"]) <= 1e-11
    np.testing.assert_allclose(direct.w, cg.w, atol=1e-5)


@pytest.mark.parametrize("limit", [1, 16, 10**6])
def test_newton_line_search_finds_the_exact_minimiser(monkeypatch, limit):
    """The bracketed line search (breakpoints sorted inside a bisected bracket only) returns the
    root of phi', checked against the objective along the line, for any bracket size."""
    from gpusvm.solvers import newton as newton_mod  # noqa: PLC0415

    monkeypatch.setattr(newton_mod, "LINE_SEARCH_EVENTS", limit)
    rng = np.random.default_rng(0)
    n, d, lam = 2000, 30, 1e-3
    for trial in range(5):
        X = rng.standard_normal((n, d))
        y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
        s = rng.random(n) + 0.5
        w = rng.standard_normal(d) * 0.3
        z = y * (X @ w)
        g = lam * w - (2.0 / n) * X.T @ (s * np.maximum(0.0, 1.0 - z) * y)
        p = -g * (1.0 + trial)                  # a descent direction of several lengths
        q = y * (X @ p)
        t = newton_mod._line_search(np, lam, n, w, p, z, q, s)

        def phi(t):
            v = w + t * p
            return 0.5 * lam * v @ v + np.sum(s * np.maximum(0.0, 1.0 - y * (X @ v)) ** 2) / n

        slope = lam * (w @ p + t * (p @ p)) - (2.0 / n) * np.sum(
            s * q * np.maximum(0.0, 1.0 - z - t * q))
        assert t > 0 and abs(slope) <= 1e-10 * (1.0 + abs(lam * (w @ p)))
        for other in (t * 0.999, t * 1.001, t * 0.5, t * 2.0):
            assert phi(t) <= phi(other)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_line_searches_equal_the_array_form_and_minimise(seed):
    """The CPU's block line search (one pass, quickselect of the breakpoints on the side of 1
    where phi'(1) puts the minimiser) returns, for every output, the step of the array-module
    form (bracket and sort) and a minimum of the objective along the line: with weights 0,
    ties and exact zeros among the margins, minimisers before and after 1."""
    from gpusvm.backends._newton_nb import line_searches  # noqa: PLC0415
    from gpusvm.solvers import newton as newton_mod  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    sides = set()
    for trial in range(150):
        n, M = int(rng.integers(1, 300)), int(rng.integers(1, 6))
        lam, scale = 10 ** rng.uniform(-5, 0), 10 ** rng.uniform(-2, 1)
        Z, Q = rng.normal(1, 1, (n, M)), rng.normal(0, scale, (n, M))
        if trial % 3 == 0:                          # ties, and margins exactly at 1
            Z, Q = np.round(Z, 1), np.round(Q, 1)
        S = rng.uniform(0, 2, (n, M))
        S[rng.random((n, M)) < 0.2] = 0.0
        W, P = rng.normal(size=(7, M)), rng.normal(size=(7, M))
        # descent directions, as Newton's are: phi'(0) < 0 (-p and -q where it is not)
        slope0 = lam * np.einsum("ij,ij->j", W, P) - (2.0 / n) * np.sum(
            S * Q * np.maximum(0.0, 1.0 - Z), axis=0)
        P, Q = P * -np.sign(slope0), Q * -np.sign(slope0)
        cols = np.arange(M, dtype=np.int64)
        out = np.empty(M)
        line_searches(Z, Q, S, cols, cols, lam * np.einsum("ij,ij->j", W, P),
                      lam * np.einsum("ij,ij->j", P, P), 2.0 / n, out)
        for j in range(M):
            ref = newton_mod._line_search(np, lam, n, W[:, j], P[:, j], Z[:, j], Q[:, j],
                                          S[:, j])

            def phi(t, j=j):
                v = W[:, j] + t * P[:, j]
                return 0.5 * lam * v @ v + np.sum(
                    S[:, j] * np.maximum(0.0, 1.0 - Z[:, j] - t * Q[:, j]) ** 2) / n

            assert out[j] == pytest.approx(ref, rel=1e-12, abs=1e-14)
            assert out[j] >= 0.0
            for other in (out[j] - 1e-3, out[j] + 1e-3, 0.0, 1.0, 2.0 * out[j]):
                assert phi(out[j]) <= phi(other) + 1e-13 * abs(phi(other))
            sides.add(bool(out[j] > 1.0))
    assert sides == {False, True}


def test_compiled_certificate_terms_equal_the_numpy_expressions():
    from gpusvm.backends._newton_nb import certificate_terms, hessian_weights  # noqa: PLC0415

    rng = np.random.default_rng(1)
    n, M = 500, 4
    Z, Y = rng.normal(1, 1, (n, M)), np.where(rng.random((n, M)) < 0.5, 1.0, -1.0)
    Z[:20] = 1.0                                      # exactly on the margin: inactive
    S = rng.uniform(0, 2, (n, 1))
    cols, scols = np.array([3, 1], dtype=np.int64), np.zeros(2, dtype=np.int64)
    A, AY, loss, asum = np.empty((n, 2)), np.empty((n, 2)), np.empty(2), np.empty(2)
    certificate_terms(Z, Y, S, cols, scols, A, AY, loss, asum)
    R = np.maximum(0.0, 1.0 - Z[:, cols])
    np.testing.assert_allclose(A, 2.0 * S * R, rtol=1e-15)
    np.testing.assert_allclose(AY, 2.0 * S * R * Y[:, cols], rtol=1e-15)
    np.testing.assert_allclose(loss, np.sum(S * R * R, axis=0), rtol=1e-13)
    np.testing.assert_allclose(asum, np.sum(2.0 * S * R, axis=0), rtol=1e-13)
    SA = np.empty((n, 2))
    rows = hessian_weights(Z, S, cols, scols, 0.5, SA)
    np.testing.assert_array_equal(SA, 0.5 * S * (Z[:, cols] < 1.0))
    np.testing.assert_array_equal(rows, np.flatnonzero((Z[:, cols] < 1.0).any(axis=1)))


def test_one_output_hessian_weights_are_the_compiled_ones_without_compiling(monkeypatch):
    """One live output (every step of newton()) takes the array expressions: the compiled
    pass's numbers bit for bit, without calling it (one function fewer for a first fit to
    compile); several outputs take the compiled pass."""
    from gpusvm.backends._newton_nb import hessian_weights  # noqa: PLC0415
    from gpusvm.solvers import newton as newton_module  # noqa: PLC0415

    rng = np.random.default_rng(2)
    n, M = 400, 3
    Z = rng.normal(1, 1, (n, M))
    Z[:15] = 1.0                                      # exactly on the margin: inactive
    for S in (rng.uniform(0, 2, (n, 1)), rng.uniform(0, 2, (n, M))):
        for j in range(M):
            SA_ref = np.empty((n, 1))
            rows_ref = hessian_weights(Z, S, np.array([j]), np.array([j if S.shape[1] > 1 else 0]),
                                       2.0 / n, SA_ref)
            calls = []
            monkeypatch.setattr(newton_module, "_compiled", lambda *a: calls.append(a[0]))
            SA, rows = newton_module._hessian_weights(np, Z, S, np.array([j]), 2.0 / n)
            monkeypatch.undo()
            assert calls == []
            np.testing.assert_array_equal(SA, SA_ref)
            np.testing.assert_array_equal(rows, rows_ref)
            assert rows.dtype == rows_ref.dtype
    calls = []
    monkeypatch.setattr(newton_module, "_compiled", lambda *a: calls.append(a[0]) or np.arange(0))
    newton_module._hessian_weights(np, Z, S, np.array([0, 2]), 2.0 / n)
    assert calls == ["hessian_weights"]


def test_newton_on_the_emulated_device_equals_the_cpu(a9a_part):
    """The array-module Newton (line searches, certificates and Hessian weights as array
    operations, the form a GPU runs) against the CPU's compiled passes: the same iterations
    and the same optimum."""
    X, y = a9a_part
    X, y = X[:600], y[:600]
    kw = dict(C=2.0, loss="squared_hinge", solver="newton", tol=1e-8, dtype="float64")
    cpu = gpusvm.SDCASVC(backend="numpy", **kw).fit(X, y)
    emu = gpusvm.SDCASVC(backend="emulated", **kw).fit(X, y)
    assert emu.backend_ == "emulated" and cpu.n_iter_ == emu.n_iter_
    # each certified to 1e-8: each primal within 1e-8 of P*, so of the other's; and a gap g
    # bounds ||w - w*||^2 <= 2 g / lam (lam = 1 / (C n)), here 5e-3 (CG's rounding differs
    # between the two forms, and its stopping rule with it)
    assert emu.duality_gap_ <= 1e-8 and cpu.duality_gap_ <= 1e-8
    assert abs(emu.primal_objective_ - cpu.primal_objective_) <= 1e-8
    lam = 1.0 / (2.0 * X.shape[0])
    assert np.linalg.norm(emu.coef_ - cpu.coef_) <= np.sqrt(2 * 2e-8 / lam)


def test_linear_svc_cv_has_linear_svc_parameters_with_cs_for_c():
    from gpusvm import LinearSVCCV, SDCASVCCV  # noqa: PLC0415

    base = inspect.signature(LinearSVC).parameters
    cv = inspect.signature(LinearSVCCV).parameters
    assert set(cv) == (set(base) - {"C"}) | {"Cs", "cv", "scoring", "refit", "n_jobs"}
    for name in set(base) - {"C"}:
        assert cv[name].default == base[name].default, name
    for name in ("Cs", "cv", "scoring", "refit", "n_jobs"):
        assert cv[name].default == inspect.signature(SDCASVCCV).parameters[name].default
    with pytest.raises(ValueError, match=r"^penalty='l1' .* gpusvm.LinearSVCCV"):
        LinearSVCCV(penalty="l1").fit(np.eye(4), [0, 1, 0, 1])


@pytest.mark.parametrize("dual", ["auto", True])
def test_linear_svc_cv_chooses_c_as_the_search_and_refits_linear_svc(a9a_part, dual):
    """LinearSVCCV is SDCASVCCV with LinearSVC's settings: the same scores and C_ on the same
    folds, and the refit is LinearSVC's optimum at C_ (liblinear's, to its certificate)."""
    from sklearn.model_selection import StratifiedKFold  # noqa: PLC0415

    from gpusvm import LinearSVCCV, SDCASVCCV  # noqa: PLC0415

    X, y = a9a_part
    X, y = X[:2000], y[:2000]
    folds = StratifiedKFold(3, shuffle=True, random_state=0)
    Cs = [0.01, 0.1, 1.0]
    ours = LinearSVCCV(Cs=Cs, cv=folds, dual=dual, random_state=0).fit(X, y)
    same = SDCASVCCV(Cs=Cs, cv=folds, loss="squared_hinge", tol=1e-4, random_state=0,
                     solver="auto" if dual == "auto" else "sdca").fit(X, y)
    assert ours.solver_ == same.solver_ == ("newton" if dual == "auto" else "sdca")
    np.testing.assert_allclose(ours.scores_, same.scores_)
    assert ours.C_ == same.C_ and ours.Cs_.tolist() == Cs
    assert ours.duality_gaps_.shape == (3, 3, 1) and np.all(ours.duality_gaps_ <= 1e-4)
    ref = SkLinearSVC(C=ours.C_, tol=1e-10, max_iter=10**6).fit(X, y)
    assert ours.duality_gap_ <= 1e-4
    assert np.mean(ours.predict(X) == ref.predict(X)) >= 0.995
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=0.05)
    # n_iter_ as LinearSVC reports it: epochs of SDCA, or Newton iterations
    assert 1 <= ours.n_iter_ <= 1000


def test_slow_sdca_hands_over_to_newton(monkeypatch, a9a_part):
    """dual='auto' on wide data: SDCA that has not converged after SWITCH_EPOCHS epochs hands over
    to Newton, which finishes from its point at liblinear's optimum."""
    from gpusvm.estimators import linear_svc  # noqa: PLC0415

    X, y = a9a_part
    X, y = X[:100], y[:100]                     # 100 rows, 123 columns: the dual is chosen
    C = 1.0
    assert LinearSVC(C=C, random_state=0).fit(X, y).solver_ == "sdca"
    monkeypatch.setattr(linear_svc, "SWITCH_EPOCHS", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no warning from the SDCA stage
        est = LinearSVC(C=C, random_state=0).fit(X, y)
    assert est.solver_ == "sdca+newton" and est.stop_reason_ == "tol"
    inner = est._inner_estimator
    assert est.n_iter_ == 2 + inner.n_iter_
    ref = SkLinearSVC(C=C, dual=False, tol=1e-12, max_iter=10_000).fit(X.toarray(), y)
    f_star = objective(X, y, ref.coef_, ref.intercept_, C)
    f = objective(X, y, est.coef_, est.intercept_, C)
    assert f_star * (1 - 1e-6) <= f <= f_star + 1.5e-4 * C * X.shape[0]
    # a user's max_iter below the hand-over leaves SDCA alone (and warns as LinearSVC would)
    with pytest.warns(ConvergenceWarning):
        capped = LinearSVC(C=C, random_state=0, max_iter=1).fit(X, y)
    assert capped.solver_ == "sdca"


def _geometric_history(g0, rate, epochs, every=5):
    """Certificates ``(t, P, D, gap, s)`` of a gap ``g0 exp(-rate e)`` every ``every`` epochs
    (one iteration per row, 1,000 rows)."""
    return [(e * 1000, 1.0, 1.0 - g0 * np.exp(-rate * e), g0 * np.exp(-rate * e), 0.0)
            for e in range(every, epochs + 1, every)]


def test_sdca_hands_over_projects_the_gap_at_its_rate():
    """On an exactly geometric gap the projection is exact: SDCA hands over once the epoch at
    which the gap reaches tol lies beyond HANDOVER_PROJECTED_EPOCHS, never before
    HANDOVER_MIN_EPOCHS, never once the gap is at tol; and a gap that stopped falling hands
    over."""
    from gpusvm.solvers import policy  # noqa: PLC0415

    tol, g0 = 1e-4, 1.0
    horizon = policy.HANDOVER_PROJECTED_EPOCHS
    for reach, expected in ((horizon - 5, False), (horizon + 5, True)):
        rate = np.log(g0 / tol) / reach              # the gap reaches tol at epoch `reach`
        history = _geometric_history(g0, rate, 100)
        assert policy.sdca_hands_over(history, 1000, tol) is expected
        early = [row for row in history if row[0] < policy.HANDOVER_MIN_EPOCHS * 1000]
        assert not any(policy.sdca_hands_over(early[:k], 1000, tol)
                       for k in range(1, len(early) + 1))
    converged = _geometric_history(g0, np.log(g0 / tol) / 50, 60)
    assert not policy.sdca_hands_over(converged, 1000, tol)          # gap <= tol at 60
    stalled = [(e * 1000, 1.0, 0.99, 1e-2, 0.0) for e in (10, 30, 60)]
    assert policy.sdca_hands_over(stalled, 1000, tol)


def test_sdca_hands_over_on_the_measured_certificates():
    """The certificates of two C = 100 fits (docs/benchmarks-history.md): news20 with 20 classes, whose
    SDCA had a gap of 5.6e-3 after 300 epochs, hands over at its certificate of epoch 72; 20
    Newsgroups TF-IDF, which SDCA certifies at epoch 154, never does."""
    from gpusvm.solvers.policy import sdca_hands_over  # noqa: PLC0415

    def rows(pairs):
        return [(e, 1.0, 1.0 - g, g, 0.0) for e, g in pairs]

    news20_20 = rows([(1, 3.1e-1), (5, 4.2e-2), (19, 2.9e-2), (72, 2.0e-2), (237, 8.3e-3)])
    decisions = [sdca_hands_over(news20_20[:k], 1.0, 1e-4) for k in range(1, 6)]
    assert decisions == [False, False, False, True, True]
    tfidf = rows([(1, 2.7e-1), (5, 3.5e-3), (9, 1.3e-3), (13, 8.9e-4), (19, 7.6e-4),
                  (27, 5.7e-4), (35, 4.9e-4), (46, 4.3e-4), (58, 3.3e-4), (70, 2.7e-4),
                  (82, 2.3e-4), (93, 2.0e-4), (104, 1.9e-4), (115, 1.6e-4), (124, 1.4e-4),
                  (131, 1.3e-4), (136, 1.2e-4), (141, 1.15e-4), (145, 1.1e-4),
                  (149, 1.05e-4), (152, 1.02e-4)])
    assert not any(sdca_hands_over(tfidf[:k], 1.0, 1e-4) for k in range(1, len(tfidf) + 1))


def test_slow_sdca_hands_over_before_switch_epochs(monkeypatch, a9a_part):
    """dual='auto': SDCA whose gap falls too slowly stops at a certificate (stop reason
    'handover'), before SWITCH_EPOCHS, and Newton finishes at liblinear's optimum; SDCASVC
    on its own never hands over."""
    from gpusvm import SDCASVC  # noqa: PLC0415
    from gpusvm.solvers import policy  # noqa: PLC0415
    from gpusvm.solvers import sdca as sdca_module  # noqa: PLC0415

    X, y = a9a_part
    X, y = X[:100], y[:100]
    C = 1.0
    plain = LinearSVC(C=C, random_state=0).fit(X, y)
    assert plain.solver_ == "sdca"
    monkeypatch.setattr(policy, "HANDOVER_MIN_EPOCHS", 1)
    monkeypatch.setattr(policy, "HANDOVER_PROJECTED_EPOCHS", 2)
    reasons = []
    real = sdca_module.sdca

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        reasons.append(res.stop_reason)
        return res

    monkeypatch.setattr("gpusvm.estimators.sdca.sdca", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = LinearSVC(C=C, random_state=0).fit(X, y)
    assert reasons == ["handover"]
    assert est.solver_ == "sdca+newton" and est.stop_reason_ == "tol"
    sdca_epochs = est.n_iter_ - est._inner_estimator.n_iter_
    assert 1 <= sdca_epochs < min(plain.n_iter_, 200)
    ref = SkLinearSVC(C=C, dual=False, tol=1e-12, max_iter=10_000).fit(X.toarray(), y)
    f_star = objective(X, y, ref.coef_, ref.intercept_, C)
    f = objective(X, y, est.coef_, est.intercept_, C)
    assert f_star * (1 - 1e-6) <= f <= f_star + 1.5e-4 * C * X.shape[0]
    reasons.clear()
    SDCASVC(C=C, loss="squared_hinge", random_state=0, max_iter=30_000).fit(X, y)
    assert reasons and "handover" not in reasons


# scikit-learn's test_linearsvm_liblinear_sample_weight (sklearn/svm/tests/test_svm.py): the
# 16 rows, then each again with the other label and weight 0
_SW_X = np.array([[1, 3]] * 4 + [[2, 1]] * 4 + [[3, 3]] * 4 + [[4, 1]] * 4, dtype=np.float64)
_SW_Y = np.array([1] * 4 + [2] * 4 + [1] * 4 + [2] * 4)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("loss, dual", [("hinge", True), ("squared_hinge", False)])
def test_zero_weight_rows_are_as_removed_at_tight_tol(seed, loss, dual):
    from sklearn.utils import shuffle   # noqa: PLC0415
    X2, y2 = np.vstack([_SW_X, _SW_X]), np.hstack([_SW_Y, 3 - _SW_Y])
    weight = np.r_[np.ones(16), np.zeros(16)]
    X2, y2, weight = shuffle(X2, y2, weight, random_state=seed)
    params = dict(loss=loss, dual=dual, tol=1e-12, max_iter=1000, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)     # certified, not stopped
        removed = LinearSVC(**params).fit(_SW_X, _SW_Y)
        weighted = LinearSVC(**params).fit(X2, y2, sample_weight=weight)
    for method in ("predict", "decision_function"):
        np.testing.assert_allclose(getattr(weighted, method)(_SW_X),
                                   getattr(removed, method)(_SW_X), rtol=1e-6)
    # and both are liblinear's optimum
    ref = SkLinearSVC(**params).fit(_SW_X, _SW_Y)
    np.testing.assert_allclose(removed.decision_function(_SW_X), ref.decision_function(_SW_X),
                               rtol=1e-6)


def test_tight_tol_iterates_in_float64():
    # float32 margins stall the hinge dual near a relative gap of 1e-7 (FLOAT32_MIN_TOL)
    from gpusvm.solvers.policy import FLOAT32_MIN_TOL  # noqa: PLC0415
    tight = LinearSVC(loss="hinge", tol=FLOAT32_MIN_TOL / 10, random_state=0).fit(_SW_X, _SW_Y)
    default = LinearSVC(loss="hinge", random_state=0).fit(_SW_X, _SW_Y)
    assert tight._inner_estimator.dtype == "float64"
    assert default._inner_estimator.dtype == "float32"
    assert tight.duality_gap_ <= FLOAT32_MIN_TOL / 10


def test_newton_certifies_with_the_best_multiple_of_its_dual_point():
    # separable rows at a large C: alpha(w) = 2 max(0, 1 - m) times a few tiny slacks is a poor
    # dual point; the certificate takes t* alpha, the best multiple, and stays a valid bound
    rng = np.random.default_rng(0)
    X = (rng.random((900, 20)) < 0.3).astype(np.float64)
    w_true = rng.standard_normal(20)
    score = X @ w_true - np.median(X @ w_true)
    keep = np.abs(score) > 0.5
    X, y = X[keep], np.where(score[keep] > 0, 1.0, -1.0)
    n, C = X.shape[0], 100.0
    est = gpusvm.SDCASVC(solver="newton", loss="squared_hinge", C=C, tol=1e-4, bias="none",
                         backend="numpy", dtype="float64").fit(X, y)
    ref = SkLinearSVC(C=C, dual=False, tol=1e-12, max_iter=10_000, fit_intercept=False).fit(X, y)
    p_star = objective(X, y, ref.coef_, 0.0, C, fit_intercept=False) / (C * n)
    assert est.duality_gap_ <= 1e-4
    assert est.dual_objective_ <= p_star * (1 + 1e-9)                       # a lower bound
    assert est.primal_objective_ - p_star <= est.duality_gap_ + 1e-12
    # away from the optimum the best multiple is far better than alpha(w) itself
    from gpusvm.solvers import newton as newton_mod  # noqa: PLC0415
    lam = 1.0 / (C * n)
    products = newton_mod._Products(sp.csr_matrix(X))
    rng = np.random.default_rng(1)
    for w in (1.3 * ref.coef_.ravel(), ref.coef_.ravel() + 0.05 * rng.standard_normal(20)):
        _, dual, _ = newton_mod.primal_dual(products, y, np.ones(n), lam, w)
        alpha = 2.0 * np.maximum(0.0, 1.0 - y * (X @ w))
        w_alpha = X.T @ (alpha * y) * C                   # (1 / (lam n)) sum alpha_i y_i x_i
        L = alpha.sum() / n
        Q = (alpha ** 2).sum() / (4.0 * n) + 0.5 * lam * w_alpha @ w_alpha
        assert L - Q < L * L / (4.0 * Q) <= p_star       # D2(alpha(w)) < max_t D2(t alpha(w))
        np.testing.assert_allclose(dual, L * L / (4.0 * Q), rtol=1e-9)
