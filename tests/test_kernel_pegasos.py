"""Kernelized Pegasos (Pegasos Sec. 4): solver and KernelPegasosSVC."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from sklearn.datasets import make_circles, make_classification
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.svm import SVC
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpusvm import KernelPegasosSVC, PegasosSVC
from gpusvm.solvers._sampling import CounterSampler
from gpusvm.solvers.kernel_pegasos import kernel_pegasos, make_kernel, resolve_gamma


# ---------------------------------------------------------------- references
def gram(kernel, A, B, gamma=0.5, degree=3, coef0=1.0):
    """Textbook Gram matrices, written out (dense)."""
    dot = A @ B.T
    if kernel == "rbf":
        sq = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * dot
        return np.exp(-gamma * sq)
    if kernel == "poly":
        return (gamma * dot + coef0) ** degree
    if kernel == "sigmoid":
        return np.tanh(gamma * dot + coef0)
    if kernel == "cosine":
        return dot / np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1))
    return dot


def batches(n, k, sampling, seed, T):
    """The first T batches of the seeded stream every solver uses."""
    return list(CounterSampler(n, k, sampling, seed).batches(0, T)[0])


def textbook_pegasos(K, y, lam, k, A, projection=False, tail_from=None):
    """Pegasos Fig. 1 on the coefficients beta of w = sum_j beta_j y_j phi(x_j), dense.

    Returns the integer counts alpha (meaningful without projection), the final
    beta and, when ``tail_from`` is given, the average of the iterates w_{t+1}, t >= tail_from.
    """
    n = len(y)
    alpha, beta, beta_sum, count = np.zeros(n, dtype=np.int64), np.zeros(n), np.zeros(n), 0
    for t, batch in enumerate(A, start=1):
        margins = y[batch] * (K[batch] @ (beta * y))              # step 2, all at w_t
        beta *= 1.0 - 1.0 / t                                      # step 4: (1 - eta lam) w_t
        for i, m in zip(batch, margins):
            if m < 1.0:
                alpha[i] += 1
                beta[i] += 1.0 / (lam * t * k)                     # + (eta/k) y_i phi(x_i)
        if projection:                                             # step 5
            norm = np.sqrt((beta * y) @ K @ (beta * y))
            beta *= min(1.0, 1.0 / (np.sqrt(lam) * norm))
        if tail_from is not None and t >= tail_from:
            beta_sum += beta
            count += 1
    return alpha, beta, (beta_sum / count if tail_from is not None else None)


def primal(K, y, lam, coef_y, b=0.0):
    """P(w) for w = sum_j coef_y_j phi(x_j), computed from the full kernel matrix."""
    f = K @ coef_y + b
    return 0.5 * lam * coef_y @ K @ coef_y + np.mean(np.maximum(0.0, 1.0 - y * f))


def full_coef_y(clf, n):
    c = np.zeros(n)
    c[clf.support_] = clf.dual_coef_[0]
    return c


@pytest.fixture(scope="module")
def small():
    X, y = make_classification(n_samples=90, n_features=6, random_state=0)
    return X, np.where(y == 1, 1.0, -1.0)


@pytest.fixture(scope="module")
def circles():
    X, y = make_circles(n_samples=600, factor=0.5, noise=0.15, random_state=0)
    return X[:400], y[:400], X[400:], y[400:]


# ---------------------------------------------------------------- (a) textbook agreement
@pytest.mark.parametrize("kernel", ["rbf", "poly", "linear", "sigmoid", "cosine"])
@pytest.mark.parametrize("sampling,k", [("without_replacement", 8), ("with_replacement", 8),
                                        ("epoch", 7), ("without_replacement", 1),
                                        ("without_replacement", 90)])
def test_alpha_matches_textbook(small, kernel, sampling, k):
    X, y = small
    lam, T, seed = 0.05, 60, 11
    K = gram(kernel, X, X)
    alpha_ref, beta_ref, _ = textbook_pegasos(K, y, lam, k, batches(len(y), k, sampling, seed, T))
    res = kernel_pegasos(X, y, lam=lam, k=k, max_iter=T, kernel=kernel, gamma=0.5, coef0=1.0,
                         sampling=sampling, seed=seed)
    assert res.alpha.dtype == np.int64
    np.testing.assert_array_equal(res.alpha, alpha_ref)
    # w_{T+1} = (1/(lam T k)) sum_j alpha_j y_j phi(x_j)
    np.testing.assert_allclose(res.coef, alpha_ref / (lam * T * k), rtol=1e-12)
    np.testing.assert_allclose(res.coef, beta_ref, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(res.decision, K @ (beta_ref * y), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("sampling", ["without_replacement", "with_replacement"])
def test_projection_and_tail_average_match_textbook(small, sampling):
    X, y = small
    lam, k, T, seed = 0.05, 8, 50, 4
    K = gram("rbf", X, X)
    A = batches(len(y), k, sampling, seed, T)
    _, beta_ref, avg_ref = textbook_pegasos(K, y, lam, k, A, projection=True,
                                            tail_from=T // 2 + 1)
    last = kernel_pegasos(X, y, lam=lam, k=k, max_iter=T, gamma=0.5, sampling=sampling,
                          seed=seed, projection=True)
    np.testing.assert_allclose(last.coef, beta_ref, rtol=1e-9, atol=1e-14)
    tail = kernel_pegasos(X, y, lam=lam, k=k, max_iter=T, gamma=0.5, sampling=sampling,
                          seed=seed, projection=True, averaging="tail")
    np.testing.assert_allclose(tail.coef, avg_ref, rtol=1e-9, atol=1e-14)


# ---------------------------------------------------------------- (b) linear kernel
@pytest.mark.parametrize("projection,averaging,bias,sampling", [
    (False, "none", "none", "without_replacement"),
    (False, "none", "none", "with_replacement"),
    (False, "none", "none", "epoch"),
    (False, "all", "none", "without_replacement"),
    (False, "tail", "unregularized", "epoch"),
    (True, "none", "none", "with_replacement"),
    (True, "tail", "unregularized", "without_replacement"),
])
@pytest.mark.parametrize("sparse", [False, True])
def test_linear_kernel_reproduces_linear_pegasos(small, projection, averaging, bias, sampling,
                                                 sparse):
    X, y = small
    Xs = sp.csr_matrix(X) if sparse else X
    kw = dict(lam=1e-2, batch_size=7, max_iter=150, sampling=sampling, random_state=3,
              projection=projection, averaging=averaging, bias=bias)
    kern = KernelPegasosSVC(kernel="linear", **kw).fit(Xs, y)
    lin = PegasosSVC(backend="numpy", dtype="float64", **kw).fit(Xs, y)
    d_lin = lin.decision_function(X)
    np.testing.assert_allclose(kern.decision_function(Xs), d_lin, rtol=1e-8,
                               atol=1e-8 * np.abs(d_lin).max())
    # w = sum_j dual_coef_j x_j is the linear solver's coef_
    np.testing.assert_allclose(kern.dual_coef_[0] @ X[kern.support_], lin.coef_[0],
                               rtol=1e-8, atol=1e-8 * np.abs(lin.coef_).max())
    np.testing.assert_allclose(kern.objective_, lin.history_[-1][1], rtol=1e-10)


# ---------------------------------------------------------------- (c) against SVC
def test_rbf_with_bias_reaches_svc_objective_and_accuracy(circles):
    Xtr, ytr, Xte, yte = circles
    n, lam, gamma = len(ytr), 1e-2, 1.0
    y = np.where(ytr == 1, 1.0, -1.0)
    K = rbf_kernel(Xtr, gamma=gamma)
    svc = SVC(C=1 / (lam * n), kernel="rbf", gamma=gamma, tol=1e-8).fit(Xtr, ytr)
    p_svc = primal(K, y, lam, full_coef_y(svc, n), svc.intercept_[0])
    clf = KernelPegasosSVC(lam=lam, gamma=gamma, batch_size=64, max_iter=2000, averaging="tail",
                           bias="unregularized", random_state=0).fit(Xtr, ytr)
    p = primal(K, y, lam, full_coef_y(clf, n), clf.intercept_[0])
    assert clf.objective_ == pytest.approx(p, rel=1e-10)
    # SVC solves this problem (unregularised bias): P(ours) - P* in [0, 5e-4] (P* ~ 0.31)
    assert p_svc - 1e-7 <= p <= p_svc + 5e-4
    assert abs(clf.score(Xte, yte) - svc.score(Xte, yte)) <= 0.02


def test_rbf_without_bias_reaches_dual_optimum(circles):
    Xtr, ytr, _, _ = circles
    n, lam, gamma = len(ytr), 1e-2, 1.0
    y = np.where(ytr == 1, 1.0, -1.0)
    K = rbf_kernel(Xtr, gamma=gamma)
    Q = K * np.outer(y, y)

    def neg_dual(a):  # D(a) = mean(a) - ||w(a)||^2 lam/2, w(a) = sum a_i y_i phi(x_i)/(lam n)
        Qa = Q @ a
        return -(a.mean() - a @ Qa / (2 * lam * n * n)), -(1.0 / n - Qa / (lam * n * n))

    opt = minimize(neg_dual, np.full(n, 0.5), jac=True, method="L-BFGS-B", bounds=[(0, 1)] * n,
                   options=dict(maxiter=5000, ftol=1e-15, gtol=1e-12))
    p_star = primal(K, y, lam, opt.x * y / (lam * n))
    assert p_star + opt.fun <= 1e-7                     # duality-gap certificate of p_star
    svc = SVC(C=1 / (lam * n), kernel="rbf", gamma=gamma, tol=1e-8).fit(Xtr, ytr)
    a_svc = np.zeros(n)
    a_svc[svc.support_] = np.abs(svc.dual_coef_[0]) * lam * n   # feasible for the no-bias dual

    clf = KernelPegasosSVC(lam=lam, gamma=gamma, batch_size=64, max_iter=2000, averaging="tail",
                           random_state=0).fit(Xtr, ytr)
    p = primal(K, y, lam, full_coef_y(clf, n))
    assert -neg_dual(a_svc)[0] <= p                    # weak duality
    assert p_star - 1e-9 <= p <= p_star + 2e-4          # P* ~ 0.344


def test_a9a_subset_accuracy_close_to_svc(a9a):
    X, y, Xt, yt = a9a.X[:2000], a9a.y[:2000], a9a.X_test[:2000], a9a.y_test[:2000]
    lam = 1e-3
    svc = SVC(C=1 / (lam * X.shape[0]), gamma="scale").fit(X, y)
    clf = KernelPegasosSVC(lam=lam, batch_size=64, random_state=0).fit(X, y)
    assert clf.gamma_ == pytest.approx(svc._gamma, rel=1e-12)
    assert clf.score(Xt, yt) >= svc.score(Xt, yt) - 0.01
    assert sp.issparse(clf.support_vectors_)
    # dense and CSR input: the same run
    kw = dict(lam=lam, batch_size=16, max_iter=100, random_state=0)
    sparse = KernelPegasosSVC(**kw).fit(X[:500], y[:500])
    dense = KernelPegasosSVC(**kw).fit(X[:500].toarray(), y[:500])
    np.testing.assert_array_equal(dense.alpha_, sparse.alpha_)
    np.testing.assert_allclose(dense.decision_function(Xt[:200].toarray()),
                               sparse.decision_function(Xt[:200]), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- (d) projection
def test_projection_keeps_norm_in_ball(small):
    X, y = small
    lam, gamma = 0.02, 0.5
    K = gram("rbf", X, X, gamma=gamma)
    radius_sq = 1.0 / lam
    for T in (1, 2, 3, 5, 8, 13, 21, 34):
        kw = dict(lam=lam, gamma=gamma, batch_size=10, max_iter=T, random_state=1)
        proj = KernelPegasosSVC(projection=True, **kw).fit(X, y)
        c = full_coef_y(proj, len(y))
        assert c @ K @ c <= radius_sq * (1 + 1e-10)
        if T == 1:  # w_2 = (1/(lam k)) sum y_i phi(x_i) lies outside: projected onto the sphere
            free = full_coef_y(KernelPegasosSVC(projection=False, **kw).fit(X, y), len(y))
            assert free @ K @ free > radius_sq
            assert c @ K @ c == pytest.approx(radius_sq, rel=1e-10)


# ---------------------------------------------------------------- (e) bad input
def invalid_parameter_message(err, name, options, tail):
    """Check sklearn's message exactly, up to the (hash-dependent) order of the options."""
    m = re.fullmatch(rf"The '{name}' parameter of KernelPegasosSVC must be a str among "
                     rf"\{{(.*)\}} {re.escape(tail)}", str(err.value))
    assert m is not None, str(err.value)
    assert sorted(m.group(1).split(", ")) == sorted(repr(o) for o in options)


def test_unknown_kernel(small):
    X, y = small
    with pytest.raises(InvalidParameterError) as err:
        KernelPegasosSVC(kernel="laplace").fit(X, y)
    invalid_parameter_message(err, "kernel", ["cosine", "linear", "poly", "rbf", "sigmoid"],
                              "or a callable. Got 'laplace' instead.")
    with pytest.raises(ValueError, match=re.escape(
            "unknown kernel 'laplace'; choose one of rbf, poly, linear, sigmoid, cosine or pass "
            "a callable kernel(A, B) returning the Gram matrix")):
        make_kernel("laplace")


def test_batch_larger_than_n(small):
    X, y = small
    with pytest.raises(ValueError, match=re.escape(
            "batch_size=91 exceeds the number of samples n=90; choose 1 <= batch_size <= 90")):
        KernelPegasosSVC(batch_size=91).fit(X, y)
    with pytest.raises(ValueError, match=re.escape(
            "batch size must satisfy 1 <= k <= n=90, got k=91")):
        kernel_pegasos(X, y, lam=0.1, k=91, max_iter=1)


@pytest.mark.parametrize("gamma", [0.0, -1.0])
def test_gamma_not_positive(small, gamma):
    X, y = small
    with pytest.raises(InvalidParameterError) as err:
        KernelPegasosSVC(gamma=gamma).fit(X, y)
    invalid_parameter_message(err, "gamma", ["auto", "scale"],
                              f"or a float in the range (0.0, inf). Got {gamma!r} instead.")
    with pytest.raises(ValueError, match=re.escape(f"gamma must be > 0, got {gamma!r}")):
        resolve_gamma(gamma, X)


def test_cupy_backend_refused(small):
    X, y = small
    with pytest.raises(ValueError, match=re.escape(
            "backend='cupy' is not available for KernelPegasosSVC: kernel Pegasos runs on the "
            "NumPy backend only; use backend='numpy' or 'auto'")):
        KernelPegasosSVC(backend="cupy").fit(X, y)


def test_multiclass_and_continuous_targets_refused(small):
    X, _ = small
    with pytest.raises(ValueError, match=re.escape(
            "Only binary classification is supported. KernelPegasosSVC got y with 3 classes: "
            "wrap the estimator in sklearn.multiclass.OneVsRestClassifier")):
        KernelPegasosSVC().fit(X, np.arange(90) % 3)
    with pytest.raises(ValueError, match=re.escape(
            "Unknown label type: KernelPegasosSVC needs class labels; got targets of type "
            "'continuous'")):
        KernelPegasosSVC().fit(X, np.linspace(0, 1, 90))


# ---------------------------------------------------------------- estimator behaviour
def test_attributes_labels_and_svc_conventions(small):
    X, y = small
    labels = np.where(y > 0, "spam", "ham")
    clf = KernelPegasosSVC(lam=0.05, batch_size=8, max_iter=60, gamma=0.5,
                           random_state=11).fit(X, labels)
    np.testing.assert_array_equal(clf.classes_, ["ham", "spam"])
    assert set(clf.predict(X)) <= {"ham", "spam"}
    K = gram("rbf", X, X)
    alpha_ref, _, _ = textbook_pegasos(K, y, 0.05, 8, batches(90, 8, "without_replacement", 11, 60))
    np.testing.assert_array_equal(clf.alpha_, alpha_ref)
    np.testing.assert_array_equal(clf.support_, np.flatnonzero(alpha_ref))
    np.testing.assert_allclose(clf.dual_coef_[0], (y * alpha_ref / (0.05 * 60 * 8))[clf.support_])
    np.testing.assert_array_equal(clf.support_vectors_, X[clf.support_])
    assert clf.n_support_.tolist() == [np.sum(alpha_ref[y < 0] > 0), np.sum(alpha_ref[y > 0] > 0)]
    assert clf.n_iter_ == 60 and clf.stop_reason_ == "max_iter"


def test_callable_kernel_and_gamma_scale(small):
    X, y = small
    named = KernelPegasosSVC(lam=0.05, batch_size=8, max_iter=40, gamma=0.3,
                             random_state=0).fit(X, y)
    call = KernelPegasosSVC(lam=0.05, batch_size=8, max_iter=40, random_state=0,
                            kernel=lambda A, B: rbf_kernel(A, B, gamma=0.3)).fit(X, y)
    np.testing.assert_array_equal(named.alpha_, call.alpha_)
    np.testing.assert_allclose(named.decision_function(X), call.decision_function(X), rtol=1e-12)
    for Xin in (X, sp.csr_matrix(X)):
        scaled = KernelPegasosSVC(max_iter=1).fit(Xin, y)
        assert scaled.gamma_ == pytest.approx(SVC().fit(Xin, y)._gamma, rel=1e-12)
    assert KernelPegasosSVC(gamma="auto", max_iter=1).fit(X, y).gamma_ == 1.0 / X.shape[1]


def test_history_and_stopping_rules(small):
    X, y = small
    lam = 0.05
    K = gram("rbf", X, X, gamma=0.5)
    clf = KernelPegasosSVC(lam=lam, gamma=0.5, batch_size=8, max_iter=50, eval_every=10,
                           random_state=0).fit(X, y)
    assert [h[0] for h in clf.history_] == [10, 20, 30, 40, 50]
    assert clf.history_[-1][1] == pytest.approx(primal(K, y, lam, full_coef_y(clf, 90)), rel=1e-10)
    stopped = KernelPegasosSVC(lam=lam, gamma=0.5, batch_size=8, max_iter=50, eval_every=10,
                               random_state=0, callback=lambda t, obj, el: t < 20).fit(X, y)
    assert stopped.n_iter_ == 20 and stopped.stop_reason_ == "callback"
    target = KernelPegasosSVC(lam=lam, gamma=0.5, batch_size=8, max_iter=50, eval_every=10,
                              random_state=0, target_objective=clf.history_[2][1]).fit(X, y)
    assert target.n_iter_ <= 30 and target.stop_reason_ == "target_objective"


def test_column_cache_is_transparent(circles):
    Xtr, ytr, _, _ = circles
    y = np.where(ytr == 1, 1.0, -1.0)
    kw = dict(lam=1e-2, k=32, max_iter=300, gamma=1.0, seed=5)
    cached = kernel_pegasos(Xtr, y, **kw)
    # every column is computed once: n kernel values per row that ever violated the margin
    assert cached.extra["kernel_evaluations"] == len(y) * np.count_nonzero(cached.alpha)
    tiny = kernel_pegasos(Xtr, y, cache_size=0.05, **kw)   # 16 columns: constant eviction
    uncached = kernel_pegasos(Xtr, y, cache_size=0, **kw)
    for other in (tiny, uncached):
        np.testing.assert_array_equal(other.alpha, cached.alpha)
        np.testing.assert_allclose(other.decision, cached.decision, rtol=1e-10, atol=1e-12)
    assert uncached.extra["kernel_evaluations"] > cached.extra["kernel_evaluations"]


# ---------------------------------------------------------------- (f) scikit-learn API
@parametrize_with_checks([KernelPegasosSVC(lam=1e-3, batch_size=8, random_state=0)])
def test_sklearn_compatible(estimator, check):
    check(estimator)
