"""Pegasos with sample weights: full batches, the projection radius and the stopping rule.

A row of integer weight ``m`` and ``m`` repeated copies of it define the same problem when
``lam = 1/(C n)`` follows the number of rows.  With full batches (``k = n``) Pegasos takes
the same steps on both: ``eta_t / k = C n / (t n) = C / t`` whatever ``n``, and the batch
subgradient ``sum_i s_i y_i x_i`` is the same sum.  The projection radius
``sqrt(mean(s) / lam) = sqrt(C sum_i s_i)`` and the doubling average's stopping rule, read
on ``P_s / mean(s)``, are the same on both sides too, so the two fits agree to rounding.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from gpusvm import PegasosSVC
from gpusvm.backends import make_backend
from gpusvm.solvers.policy import FULL_BATCH_ROWS
from gpusvm import SDCASVC
from gpusvm.solvers.pegasos import pegasos, projection_radius, weight_scale
from gpusvm.solvers.sdca import sdca


def small_problem(n=24, d=12, seed=0):
    """Rows of norm about 1 with a linear signal, integer weights 0..4 (0 drops a row)."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.5, format="csr", random_state=seed + 1)
    X = sp.csr_matrix(sp.diags(1.0 / np.maximum(np.sqrt(X.multiply(X).sum(axis=1).A1), 1e-12))
                      @ X)
    X.sort_indices()
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    s = rng.integers(0, 5, n).astype(float)
    s[:2] = [3.0, 0.0]
    return X, y, s


def repeated(X, y, s):
    rep = np.repeat(np.arange(X.shape[0]), s.astype(int))
    return X[rep], y[rep]


def objective(X, y, w, lam, s=None, b=0.0):
    slack = np.maximum(0.0, 1.0 - y * (X @ w + b))
    s = np.ones(X.shape[0]) if s is None else s
    return 0.5 * lam * w @ w + np.mean(s * slack)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
# the squared hinge with an unregularised bias is left out: its first full-batch steps (1/(lam t)
# times a slack that grows with |b|, and no projection on b) drive b to 1e24 and back, and the
# rounding at that magnitude leaves the two runs 1e-7 apart afterwards
@pytest.mark.parametrize("loss,bias", [("hinge", "none"), ("hinge", "unregularized"),
                                       ("squared_hinge", "none")])
@pytest.mark.parametrize("averaging", ["tail", "doubling"])
def test_full_batch_integer_weights_take_the_steps_of_repeated_rows(backend, loss, bias,
                                                                    averaging):
    X, y, s = small_problem()
    Xd, yd = repeated(X, y, s)
    C = 2.0
    kw = dict(max_iter=512, sampling="epoch", seed=3, projection=True, averaging=averaging,
              bias=bias, loss=loss, tol=1e-4)
    rw = pegasos(make_backend(backend, X, y, s), lam=1.0 / (C * X.shape[0]), k=X.shape[0], **kw)
    rd = pegasos(make_backend(backend, Xd, yd), lam=1.0 / (C * Xd.shape[0]), k=Xd.shape[0], **kw)
    assert rw.n_iter == rd.n_iter and rw.stop_reason == rd.stop_reason
    scale = np.linalg.norm(rd.w)
    assert np.linalg.norm(rw.w - rd.w) <= 1e-10 * scale
    assert abs(rw.b - rd.b) <= 1e-10 * max(1.0, abs(rd.b))
    # the objectives differ by the factor n / sum(s); per unit of weight they agree
    mw = weight_scale(make_backend(backend, X, y, s))
    assert mw == pytest.approx(s.mean())
    assert [h[1] / mw for h in rw.history] == pytest.approx([h[1] for h in rd.history],
                                                            rel=1e-10)


def test_projection_radius_is_the_mean_weight_bound_and_holds_the_optimum():
    X, y, s = small_problem(n=60, seed=2)
    s = s * 10.0 + np.where(y > 0, 50.0, 0.0)        # uneven weights: mean(s) << max(s)
    lam = 1e-2
    be = make_backend("numpy", X, y, s)
    r = projection_radius(be, lam)
    assert r == pytest.approx(math.sqrt(s.mean() / lam))
    assert r < math.sqrt(s.max() / lam)
    assert projection_radius(make_backend("numpy", X, y), lam) == 1.0 / math.sqrt(lam)
    opt = sdca(make_backend("numba", X, y, s), lam=lam, b=1, max_iter=10**6, tol=1e-10,
               variant="safe")
    assert opt.stop_reason == "tol"
    # strong duality: lam ||w*||^2 <= (1/n) sum alpha_i <= mean(s)
    assert np.linalg.norm(opt.w) <= r
    # with lam = 1/(C n) the radius is sqrt(C sum s): the same for the repeated rows
    C = 1.0
    Xd, yd = repeated(X, y, np.round(s))
    rw = projection_radius(make_backend("numpy", X, y, np.round(s)), 1.0 / (C * X.shape[0]))
    rd = projection_radius(make_backend("numpy", Xd, yd), 1.0 / (C * Xd.shape[0]))
    assert rw == pytest.approx(rd, rel=1e-12)


def augmented(X, c):
    """``X`` with the constant feature ``c`` appended (the estimators' augmented bias)."""
    return sp.hstack([X, sp.csr_matrix(np.full((X.shape[0], 1), c))], format="csr")


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("bias", ["augmented", "unregularized"])
def test_projection_radius_of_the_constant_predictor_holds_the_optimum(loss, bias):
    """Imbalanced weights: ``lam/2 ||w*||^2 <= P_s(best constant)``, a smaller ball."""
    X, y, s = small_problem(n=60, seed=4)
    s = np.where(y > 0, 200.0, 0.01) * (1.0 + s)        # one class dominates the loss
    lam, c = 1e-2, 2.0
    r_dual = projection_radius(make_backend("numpy", X, y, s), lam, loss)
    r = projection_radius(make_backend("numpy", X, y, s), lam, loss, bias, c)
    assert r < 0.2 * r_dual
    # brute force: the constant predictor's best objective on a fine grid of its margin u
    u = np.linspace(-1.5, 1.5, 300_001)
    slack = np.maximum(0.0, 1.0 - y[:, None] * u[None, :])
    if loss == "squared_hinge":
        slack = slack ** 2
    values = (s[:, None] * slack).mean(axis=0)
    if bias == "augmented":
        values = values + 0.5 * lam * (u / c) ** 2
    assert r == pytest.approx(math.sqrt(2.0 * values.min() / lam), rel=1e-6)
    if bias == "augmented":              # the optimum of the augmented problem, from SDCA
        opt = sdca(make_backend("numba", augmented(X, c), y, s), lam=lam, b=1, max_iter=10**6,
                   tol=1e-10, variant="safe", loss=loss)
        assert opt.stop_reason == "tol"
        assert np.linalg.norm(opt.w) <= r


def brute_minimum(y, sc, s, lam, c, loss):
    """``min_beta lam/2 beta^2 + mean(s L(1 - y (sc + c beta)))`` by bounded Brent search."""
    from scipy.optimize import minimize_scalar

    def f(beta):
        slack = np.maximum(0.0, 1.0 - y * (sc + c * beta))
        return 0.5 * lam * beta * beta + np.mean(s * (slack ** 2 if loss == "squared_hinge"
                                                       else slack))
    bound = (np.abs(sc).max() + 1.0) / c + 1.0
    res = minimize_scalar(f, bounds=(-bound, bound), method="bounded",
                          options={"xatol": 1e-12, "maxiter": 10_000})
    return f, res.fun


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("seed", range(4))
def test_regularized_bias_is_the_exact_minimiser(loss, seed):
    from gpusvm.backends._general import regularized_bias_xp
    rng = np.random.default_rng(seed)
    n = 40
    y = np.where(rng.random(n) < 0.3, 1.0, -1.0)
    sc = rng.normal(scale=2.0, size=n)
    s = rng.integers(0, 4, n) * rng.choice([0.01, 1.0, 100.0], n)
    lam, c = 10.0 ** rng.uniform(-3, 0), rng.choice([0.5, 1.0, 3.0])
    beta = float(regularized_bias_xp(np, y, sc, s, lam, c, loss))
    f, best = brute_minimum(y, sc, s, lam, c, loss)
    assert f(beta) <= best + 1e-12 * max(1.0, abs(best))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("weights", [False, True])
def test_pegasos_returns_the_best_augmented_bias_of_its_point(backend, weights):
    """The returned point's bias weight minimises ``P_s`` given the other weights."""
    from gpusvm.backends._general import regularized_bias_xp
    X, y, s = small_problem(n=50, seed=6)
    c, lam = 1.5, 1e-3
    Xa = augmented(X, c)
    s = s if weights else None
    res = pegasos(make_backend(backend, Xa, y, s), lam=lam, k=4, max_iter=300, seed=1,
                  averaging="tail", bias="augmented", intercept_scaling=c)
    w = res.w
    sc = X @ w[:-1]
    wts = np.ones(len(y)) if s is None else s
    f, best = brute_minimum(y, sc, wts, lam, c, "hinge")
    assert f(w[-1]) <= best + 1e-9 * max(1.0, abs(best))
    assert w[-1] == pytest.approx(float(regularized_bias_xp(np, y, sc, wts, lam, c)), abs=1e-12)
    # the history's last objective is the returned point's
    assert res.history[-1][1] == pytest.approx(objective(Xa, y, w, lam, wts), rel=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("sparse", [False, True])
def test_estimator_integer_weights_equal_repeated_rows(backend, sparse):
    """scikit-learn's sample-weight equivalence, three classes, defaults (full batch)."""
    X, y, s = small_problem(n=20, d=10, seed=5)
    y3 = np.arange(20) % 3
    Xd, yd = repeated(X, y3, s)
    conv = (lambda a: a) if sparse else (lambda a: a.toarray())
    est = dict(backend=backend, C=1.0, dtype="float64", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = PegasosSVC(**est).fit(conv(X), y3, sample_weight=s)
        b = PegasosSVC(**est).fit(conv(Xd), yd)
    assert (a.batch_size_, b.batch_size_) == (X.shape[0], Xd.shape[0])
    assert a.n_iter_ == b.n_iter_ and a.stop_reason_ == b.stop_reason_
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-10,
                               atol=1e-12)


def test_auto_batch_is_the_full_batch_on_small_data_only():
    X, y, _ = small_problem(n=FULL_BATCH_ROWS + 1, seed=1)
    kw = dict(backend="numba", lam=1e-2, random_state=0, max_iter=50)
    small = PegasosSVC(**kw).fit(X[:FULL_BATCH_ROWS], y[:FULL_BATCH_ROWS])
    assert small.batch_size_ == FULL_BATCH_ROWS
    assert PegasosSVC(**kw).fit(X, y).batch_size_ == 1
    assert PegasosSVC(**{**kw, "batch_size": 4}).fit(X[:20], y[:20]).batch_size_ == 4
    # partial_fit streams chunks: one full-batch step per call would be one step per chunk
    pf = PegasosSVC(backend="numba", lam=1e-2, random_state=0).partial_fit(
        X[:20], y[:20], classes=[-1.0, 1.0])
    assert pf.batch_size_ == 1 and pf.n_iter_ == 20


@pytest.mark.parametrize("C", [1.0, 100.0])
def test_weighted_full_batch_default_is_close_to_the_optimum(C):
    X, y, s = small_problem(n=48, d=12, seed=7)
    s = s + 0.5
    ref = SDCASVC(backend="numba", C=C, tol=1e-10, max_iter=10**7, dtype="float64",
                  random_state=0, bias="none").fit(X, y, sample_weight=s)
    lam = float(ref.lam_)
    p_star = objective(X, y, ref.coef_.ravel(), lam, s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = PegasosSVC(backend="numba", C=C, dtype="float64", random_state=0,
                         bias="none").fit(X, y, sample_weight=s)
    assert est.batch_size_ == X.shape[0]
    gap = objective(X, y, est.coef_.ravel(), lam, s) - p_star
    # tol = 1e-3 on P_s / mean(s): the gap in P_s is about mean(s) times that, an estimate
    assert 0.0 <= gap <= 3e-3 * s.mean()


def test_doubling_rule_never_settles_above_the_zero_model():
    """Pegasos' doubling estimate reads a run that rose and fell as settled: on these 17 rows
    (squared hinge, a class weight, lam = 1e-4, unscaled rows) it stopped with
    ``stop_reason_="tol"`` at P = 3.6 against P(0, 0) = mean(s) = 2.18, a worse model than
    zero and no warning.  P(0, 0) >= P*, so such a point is never settled: the run goes on
    and ends with a ConvergenceWarning, and the hint that names the cause (the row norms)."""
    rng = np.random.default_rng(9)                     # 17 rows of one unscaled feature
    n = int(rng.integers(8, 30))
    X = rng.normal(size=(n, 1)) * rng.choice([0.1, 1, 10])
    y = rng.integers(0, 2, n)
    assert n == 17 and rng.choice([0.2, 1, 5]) == 5
    cw = {0: 5.0, 1: 1.0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = PegasosSVC(loss="squared_hinge", class_weight=cw, backend="numpy",
                         random_state=0).fit(X, y)
    s = np.where(y == 0, 5.0, 1.0)
    Y = np.where(y == 1, 1.0, -1.0)
    w, b = est.coef_.ravel(), float(est.intercept_[0])
    slack = np.maximum(0.0, 1.0 - Y * (X @ w + b))
    p = 0.5 * est.lam_ * (w @ w + b * b) + np.mean(s * slack * slack)   # augmented bias
    p_zero = np.mean(s)                                                  # 2.18
    assert est.stop_reason_ != "tol" or p <= p_zero, (est.stop_reason_, p, p_zero)
    assert est.stop_reason_ == "max_iter"
    messages = {type(w.message).__name__: str(w.message) for w in caught}
    assert "scale the data" in messages["ConvergenceWarning"]
    assert "the largest row norm of X is 25.2" in messages["DataScaleWarning"]
