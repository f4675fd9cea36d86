"""The general path of the solvers: sample weights, the squared hinge, M outputs, warm starts.

docs/algorithms.md, "Weights, and the squared hinge" and "Many outputs at once".  Optima
are checked against LIBLINEAR (scikit-learn's LinearSVC), against the closed form
of a one-example problem, against duplicated rows, and against a dense textbook
implementation; the M-output runs against M binary runs on the same batches.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from gpusvm.backends import make_backend
from gpusvm.solvers._sampling import CounterSampler
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca

BACKENDS = ["numpy", "numba"]
EPS = np.finfo(np.float64).eps


def toy(n=300, d=40, seed=0):
    """A sparse problem with a linear signal, canonical CSR, float64."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.15, format="csr", random_state=seed + 1)
    X.sort_indices()
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def three_outputs(y, seed=0):
    """Three label columns on the same rows: y, -y and an unrelated one (one-vs-rest like)."""
    rng = np.random.default_rng(seed)
    return np.stack([y, -y, np.where(rng.random(y.size) < 0.3, 1.0, -1.0)], axis=1)


def objective(X, y, w, lam, s=None, loss="hinge", b=0.0):
    """``P_s(w) = lam/2 ||w||^2 + (1/n) sum_i s_i loss_i``, straight from the definition."""
    slack = np.maximum(0.0, 1.0 - y * (X @ w + b))
    if loss == "squared_hinge":
        slack = slack ** 2
    s = np.ones(X.shape[0]) if s is None else s
    return 0.5 * lam * w @ w + np.mean(s * slack)


def liblinear(X, y, lam, loss, s=None):
    """LIBLINEAR's optimum with ``C = 1/(lam n)`` (and the same ``sample_weight``)."""
    svc = LinearSVC(loss=loss, C=1.0 / (lam * X.shape[0]), fit_intercept=False, tol=1e-12,
                    max_iter=10**6, random_state=0)   # liblinear permutes rows at random
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)   # tol=1e-12 is below its habit
        svc.fit(X, y, sample_weight=s)
    return svc.coef_.ravel()


@pytest.fixture(scope="module")
def a9a_slice(a9a):
    """1000 rows of a9a, float64, unit rows (conftest data)."""
    X = sp.csr_matrix(a9a.X[:1000], dtype=np.float64)
    nrm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1.0 / nrm) @ X)
    X.sort_indices()
    return X, np.where(a9a.y[:1000] > 0, 1.0, -1.0)


# ---------------------------------------------------------------- the squared hinge
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lam", [0.5, 1e-2])
def test_squared_hinge_one_example_closed_form(backend, lam):
    # docs/algorithms.md: n = 1, x = y = s = 1: P2* = D2* = lam/(lam + 2), w* = 2/(lam + 2)
    X = sp.csr_matrix(np.ones((1, 1)))
    res = sdca(make_backend(backend, X, np.ones(1)), lam=lam, b=1, max_iter=200, variant="safe",
               tol=1e-14, loss="squared_hinge")
    assert res.stop_reason == "tol"
    assert res.w[0] == pytest.approx(2.0 / (lam + 2.0), rel=1e-12)
    assert res.extra["primal"] == pytest.approx(lam / (lam + 2.0), rel=1e-12)
    assert res.extra["dual"] == pytest.approx(lam / (lam + 2.0), rel=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_sdca_optimum_matches_liblinear(a9a_slice, weighted, loss):
    # the compiled backend (the NumPy reference's iterates are checked against it below)
    backend = "numba"
    X, y = a9a_slice
    n = X.shape[0]
    lam = 1e-2
    s = np.random.default_rng(3).uniform(0.0, 3.0, n) if weighted else None
    res = sdca(make_backend(backend, X, y, s), lam=lam, b=1, max_iter=10**7, variant="safe",
               tol=1e-8, sampling="epoch", loss=loss, seed=0)
    assert res.stop_reason == "tol"
    w_ll = liblinear(X, y, lam, loss, s)
    p_ours = objective(X, y, res.w, lam, s, loss)
    p_ll = objective(X, y, w_ll, lam, s, loss)
    assert res.extra["primal"] == pytest.approx(p_ours, rel=1e-10)
    assert p_ours == pytest.approx(p_ll, rel=1e-6)
    assert p_ours <= p_ll + 1e-8                       # certified to 1e-8: at most LIBLINEAR's + gap


@pytest.mark.parametrize("backend", ["numba"])     # runs to 1e-7: the compiled backend
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("b,variant", [(1, "safe"), (4, "aggressive"), (8, "naive")])
def test_integer_weights_equal_duplicated_rows(backend, loss, b, variant):
    X, y = toy()
    n = X.shape[0]
    s = np.random.default_rng(7).integers(0, 4, n).astype(float)    # 0 drops a row
    rep = np.repeat(np.arange(n), s.astype(int))
    Xd, yd = X[rep], y[rep]
    C = 1.0                                         # the same C: lam = 1/(C n) on each side
    lam_w, lam_d = 1.0 / (C * n), 1.0 / (C * Xd.shape[0])
    kw = dict(b=b, max_iter=10**6, variant=variant, tol=1e-7, loss=loss, seed=1)
    rw = sdca(make_backend(backend, X, y, s), lam=lam_w, **kw)
    rd = sdca(make_backend(backend, Xd, yd), lam=lam_d, **kw)
    assert rw.stop_reason == rd.stop_reason == "tol"
    # n P_s(w) = n' P_dup(w) for every w: both certified optima of one objective
    pw = n * objective(X, y, rw.w, lam_w, s, loss)
    pd = n * objective(X, y, rd.w, lam_w, s, loss)
    assert pd == pytest.approx(Xd.shape[0] * objective(Xd, yd, rd.w, lam_d, loss=loss), rel=1e-12)
    assert abs(pw - pd) <= n * rw.extra["gap"] + Xd.shape[0] * rd.extra["gap"] + 1e-9
    # strong convexity: lam/2 ||w - w*||^2 <= gap
    bound = math.sqrt(2 * rw.extra["gap"] / lam_w) + math.sqrt(2 * rd.extra["gap"] / lam_d)
    assert np.linalg.norm(rw.w - rd.w) <= bound + 1e-9


# ---------------------------------------------------------------- a textbook twin
def textbook_sdca(X, y, s, lam, b, variant, theta, beta_b, T, sampling, seed, loss):
    """Weighted mini-batch SDCA for either loss, dense, one coordinate at a time (docs/algorithms.md)."""
    X = X.toarray()
    n = X.shape[0]
    q = np.einsum("ij,ij->i", X, X)
    sq = loss == "squared_hinge"
    alpha = np.where(q == 0, 2 * s if sq else s, 0.0)

    def w_of(a):
        return X.T @ (a * y) / (lam * n)

    def D(a):
        w = w_of(a)
        lin = np.where(s > 0, a - a * a / (4 * np.where(s > 0, s, 1)), 0.0) if sq else a
        return lin.sum() / n - 0.5 * lam * w @ w

    beta = 1.0 if variant == "naive" else beta_b
    rejected = 0
    sampler = CounterSampler(n, b, sampling, seed)
    for t in range(T):
        A = sampler.batch(t)[0]
        w = w_of(alpha)
        seen: set = set()
        steps = [i not in seen and not seen.add(i) for i in A]

        def deltas(beta):
            out = np.zeros(len(A))
            for k, i in enumerate(A):
                if not steps[k]:
                    continue
                m = y[i] * (X[i] @ w)
                if sq:
                    g = lam * n * (1 - m - (alpha[i] / (2 * s[i]) if s[i] > 0 else 0.0))
                    den = (lam * n / (2 * s[i]) if s[i] > 0 else math.inf) + beta * q[i]
                    out[k] = max(g / den if s[i] > 0 else -alpha[i], -alpha[i])
                elif q[i] == 0:
                    out[k] = s[i] - alpha[i]
                else:
                    g = lam * n * (1 - m) / (beta * q[i])
                    out[k] = min(max(g, -alpha[i]), s[i] - alpha[i])
            return out

        delta = deltas(beta)
        if variant == "aggressive":
            den = sum(delta[k] ** 2 * q[i] for k, i in enumerate(A))
            if den > 0:
                u = sum(delta[k] * y[i] * X[i] for k, i in enumerate(A))
                rho = min(max(u @ u / den, 1.0), beta_b)
                beta = min(max(beta ** theta * rho ** (1 - theta), 1.0), beta_b)
            delta = deltas(beta)
        new = alpha.copy()
        for k, i in enumerate(A):
            new[i] += delta[k]
        if variant == "aggressive":
            tau = 4 * EPS * (lam * w @ w + np.abs(delta).sum() / n)
            if D(new) - D(alpha) < -tau:
                rejected += 1
                continue
        alpha = new
    return alpha, w_of(alpha), beta, rejected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("variant", ["naive", "safe", "aggressive"])
@pytest.mark.parametrize("b,sampling", [(1, "epoch"), (7, "without_replacement"),
                                        (16, "with_replacement")])
def test_weighted_sdca_matches_the_textbook_on_the_same_batches(backend, loss, variant, b,
                                                                sampling):
    rng = np.random.default_rng(b)
    X, y = toy(60, 12, seed=b)
    X = sp.lil_matrix(X)
    X[3, :] = 0                                                  # a zero row
    X = sp.csr_matrix(X)
    X.sort_indices()
    s = rng.uniform(0.0, 2.5, 60)
    s[5] = 0.0                                                   # a zero weight
    Xn = X.toarray() / np.maximum(np.linalg.norm(X.toarray(), axis=1), 1e-300)[:, None]
    sigma2 = np.linalg.svd(Xn, compute_uv=False)[0] ** 2 / 60
    beta_b = 1 + (b - 1) * (60 * sigma2 - 1) / 59
    lam, T, theta = 3e-3, 40, 0.3
    res = sdca(make_backend(backend, X, y, s), lam=lam, b=b, max_iter=T, variant=variant,
               theta=theta, sigma2=sigma2, tol=0.0, sampling=sampling, seed=11, eval_every=10**6,
               loss=loss)
    alpha, w, beta, rejected = textbook_sdca(X, y, s, lam, b, variant, theta,
                                             1.0 if variant == "naive" else beta_b, T, sampling,
                                             11, loss)
    np.testing.assert_allclose(res.extra["alpha"], alpha, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(res.w, w, rtol=1e-9, atol=1e-11)
    assert res.extra["n_rejected"] == rejected
    if variant == "aggressive":
        assert res.extra["beta"] == pytest.approx(beta, rel=1e-9)
    assert res.extra["alpha"][5] == 0.0                          # s_i = 0: alpha_i stays 0
    assert res.extra["alpha"][3] == (2 * s[3] if loss == "squared_hinge" else s[3])


# ---------------------------------------------------------------- M outputs in one pass
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["naive", "safe", "aggressive"])
@pytest.mark.parametrize("b,sampling", [(1, "epoch"), (8, "without_replacement"),
                                        (8, "with_replacement")])
def test_sdca_m_outputs_equal_m_binary_fits(backend, variant, b, sampling):
    X, y = toy()
    Y = three_outputs(y)
    kw = dict(lam=1e-2, b=b, max_iter=400, variant=variant, tol=0.0, eval_every=100, seed=3,
              sampling=sampling)
    singles = [sdca(make_backend(backend, X, Y[:, c]), **kw) for c in range(3)]
    multi = sdca(make_backend(backend, X, Y), **kw)
    assert multi.w.shape == (40, 3) and multi.extra["alpha"].shape == (300, 3)
    for c, r in enumerate(singles):
        np.testing.assert_allclose(multi.w[:, c], r.w, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(multi.extra["alpha"][:, c], r.extra["alpha"], rtol=1e-12,
                                   atol=1e-14)
        assert multi.extra["gap"][c] == pytest.approx(r.extra["gap"], rel=1e-9, abs=1e-14)
        assert multi.extra["n_rejected"][c] == r.extra["n_rejected"]
    assert multi.history[-1][3] == pytest.approx(max(multi.extra["gap"]), rel=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_sdca_outputs_certified_below_tol_stop_where_they_were(backend, loss):
    """One-vs-rest outputs are independent problems on the same batches: an output certified
    below ``tol`` stops (its ``alpha`` and ``w`` stay those of that certificate) while the
    others go on, so each output ends exactly as its own binary fit stopped on its own gap."""
    X, y = toy()
    Y = three_outputs(y)
    kw = dict(lam=1e-2, b=8, variant="safe", seed=3, eval_every=20, max_iter=10**5,
              tol=1e-3, loss=loss)
    multi = sdca(make_backend(backend, X, Y), **kw)
    singles = [sdca(make_backend(backend, X, Y[:, c]), **kw) for c in range(3)]
    assert len({r.n_iter for r in singles}) > 1                  # they do stop apart
    assert multi.n_iter == max(r.n_iter for r in singles)
    for c, r in enumerate(singles):
        np.testing.assert_allclose(multi.extra["alpha"][:, c], r.extra["alpha"], rtol=1e-12,
                                   atol=1e-14)
        np.testing.assert_allclose(multi.w[:, c], r.w, rtol=1e-10, atol=1e-13)
        assert multi.extra["gap"][c] == pytest.approx(r.extra["gap"], rel=1e-9, abs=1e-14)
        assert multi.extra["gap"][c] <= 1e-3


def test_numba_column_norms_and_resynchronisation_match_numpy():
    X, y = toy()
    Y = three_outputs(y)
    a, b = (make_backend(name, X, Y) for name in BACKENDS)
    W = np.random.default_rng(0).standard_normal((40, 3))
    np.testing.assert_allclose(b.col_sq_norms_m(W), np.einsum("ij,ij->j", W, W), rtol=1e-13)
    res = sdca(a, lam=1e-2, b=1, max_iter=300, variant="safe", tol=0.0, seed=1)
    for be in (a, b):
        be.init_state_m()
        be.init_dual_m(1.0)
        be.alpha[...] = res.extra["alpha"]
    Wa, Wb = a.dual_weights_m(1e-2), b.dual_weights_m(1e-2)
    np.testing.assert_allclose(Wb, Wa, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(b.V, a.V, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(b.sm, a.sm, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("cols", [[4, 0, 2], [0, 1, 2, 3, 4]], ids=["some", "every"])
def test_column_dots_and_combinations_by_the_textbook(cols):
    """``<A[:, cols_q], B[:, q]>`` and ``dst[:, cols_q] += t_q (src_q - dst[:, cols_q])`` on
    some columns (gathered) and on every column in order (whole-array passes): ``t = 1``
    copies exactly, ``t = 0`` leaves the column bit for bit."""
    X, y = toy()
    rng = np.random.default_rng(2)
    cols = np.array(cols)
    dst, src = rng.standard_normal((40, 5)), rng.standard_normal((40, cols.size))
    t = np.array([0.25, 1.0, 0.0, 0.5, 1.0])[:cols.size]
    expect = dst.copy()
    for q, c in enumerate(cols):
        expect[:, c] = (src[:, q] if t[q] == 1.0 else
                        dst[:, c] + t[q] * (src[:, q] - dst[:, c]) if t[q] > 0.0 else dst[:, c])
    dots = [sum(dst[j, c] * src[j, q] for j in range(40)) for q, c in enumerate(cols)]
    for name in BACKENDS:
        be = make_backend(name, X, three_outputs(y))
        np.testing.assert_allclose(be.col_dots_m(dst, cols, src), dots, rtol=1e-13)
        out = dst.copy()
        be.mix_columns_m(out, cols, src, t)
        np.testing.assert_array_equal(out, expect)


@pytest.mark.parametrize("backend", ["numba"])     # runs to 1e-6: the compiled backend
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_sdca_m_outputs_weighted_equal_m_weighted_fits_and_stop_on_every_gap(backend, loss):
    X, y = toy()
    Y = three_outputs(y)
    s = np.random.default_rng(1).uniform(0.2, 2.0, 300)
    kw = dict(lam=1e-2, b=4, max_iter=10**5, variant="aggressive", tol=1e-6, eval_every=75,
              seed=3, loss=loss)
    singles = [sdca(make_backend(backend, X, Y[:, c], s), **kw) for c in range(3)]
    multi = sdca(make_backend(backend, X, Y, s), **kw)
    assert multi.stop_reason == "tol"
    assert np.all(multi.extra["gap"] <= 1e-6)
    assert multi.n_iter == max(r.n_iter for r in singles)   # runs until the slowest output is done
    slowest = singles[int(np.argmax([r.n_iter for r in singles]))]
    c = int(np.argmax([r.n_iter for r in singles]))
    np.testing.assert_allclose(multi.w[:, c], slowest.w, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("averaging,bias,projection", [
    ("none", "none", True), ("none", "unregularized", False), ("tail", "optimal", True),
    ("all", "none", False), ("tail", "unregularized", True)])
@pytest.mark.parametrize("k,sampling", [(1, "epoch"), (8, "without_replacement")])
def test_pegasos_m_outputs_equal_m_binary_fits(backend, averaging, bias, projection, k,
                                                sampling):
    X, y = toy()
    Y = three_outputs(y)
    kw = dict(lam=1e-2, k=k, max_iter=600, averaging=averaging, bias=bias, seed=3,
              projection=projection, sampling=sampling, eval_every=200)
    singles = [pegasos(make_backend(backend, X, Y[:, c]), **kw) for c in range(3)]
    multi = pegasos(make_backend(backend, X, Y), **kw)
    assert multi.w.shape == (40, 3) and multi.b.shape == (3,)
    for c, r in enumerate(singles):
        np.testing.assert_allclose(multi.w[:, c], r.w, rtol=1e-12, atol=1e-14)
        assert multi.b[c] == pytest.approx(r.b, rel=1e-12, abs=1e-14)
        assert multi.extra["objectives"][c] == pytest.approx(r.extra["objective"], rel=1e-12)
    assert multi.extra["objective"] == pytest.approx(np.mean(multi.extra["objectives"]))


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("k,bias", [(1, "none"), (8, "unregularized"), (8, "none")])
def test_general_path_numba_matches_numpy(loss, k, bias):
    X, y = toy()
    X = sp.csr_matrix(X, dtype=np.float32)
    Y = three_outputs(y).astype(np.float32)
    s = np.random.default_rng(2).uniform(0.0, 2.0, 300)
    kw = dict(lam=1e-2, k=k, max_iter=500, averaging="tail", bias=bias, seed=5, loss=loss)
    a, b = (pegasos(make_backend(name, X, Y, s), **kw) for name in BACKENDS)
    np.testing.assert_allclose(a.w, b.w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.b, b.b, rtol=1e-5, atol=1e-6)
    kw = dict(lam=1e-2, b=k, max_iter=500, variant="aggressive", tol=0.0, seed=5, loss=loss,
              eval_every=250)
    a, b = (sdca(make_backend(name, X, Y, s), **kw) for name in BACKENDS)
    np.testing.assert_allclose(a.extra["alpha"], b.extra["alpha"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(a.extra["gap"], b.extra["gap"], rtol=1e-4, atol=1e-8)


@pytest.mark.parametrize("backend", ["numba"])
def test_weighted_pegasos_approaches_the_weighted_optimum(backend):
    X, y = toy()
    s = np.random.default_rng(4).uniform(0.0, 3.0, 300)
    lam = 1e-2
    p_star = sdca(make_backend(backend, X, y, s), lam=lam, b=1, max_iter=10**6, tol=1e-10,
                  variant="safe").extra["primal"]
    for loss in ("hinge", "squared_hinge"):
        if loss == "squared_hinge":
            p_star = sdca(make_backend(backend, X, y, s), lam=lam, b=1, max_iter=10**6,
                          tol=1e-10, variant="safe", loss=loss).extra["primal"]
        res = pegasos(make_backend(backend, X, y, s), lam=lam, k=8, max_iter=40000,
                      averaging="tail", loss=loss, seed=0)
        assert 0.0 <= objective(X, y, res.w, lam, s, loss) - p_star < 2e-3


# ---------------------------------------------------------------- warm starts
@pytest.mark.parametrize("backend", ["numba"])     # runs to 1e-7: the compiled backend
@pytest.mark.parametrize("multi,loss", [(False, "hinge"), (True, "hinge"),
                                        (False, "squared_hinge")])
def test_sdca_warm_start_from_a_converged_alpha_certifies_at_once(backend, multi, loss):
    X, y = toy()
    yy = three_outputs(y) if multi else y
    kw = dict(lam=1e-2, b=1, max_iter=10**6, variant="safe", tol=1e-7, loss=loss, seed=0)
    cold = sdca(make_backend(backend, X, yy), **kw)
    assert cold.stop_reason == "tol" and cold.n_iter > 300
    warm = sdca(make_backend(backend, X, yy), alpha0=cold.extra["alpha"], w0=cold.w,
                eval_every=1, **kw)
    assert warm.stop_reason == "tol" and warm.n_iter == 1
    with pytest.raises(ValueError, match=re.escape("w0 must come with alpha0 and be finite")):
        sdca(make_backend(backend, X, yy), w0=cold.w, **kw)
    with pytest.raises(ValueError, match=re.escape("of shape (40,")):
        sdca(make_backend(backend, X, yy), alpha0=cold.extra["alpha"], w0=cold.w[:-1], **kw)
    # both within their gaps of the one optimum: lam/2 ||w - w*||^2 <= gap
    gaps = np.atleast_1d(cold.extra["gap"]) + np.atleast_1d(warm.extra["gap"])
    dist = np.linalg.norm(np.reshape(warm.w - cold.w, (40, -1)), axis=0)
    assert np.all(dist <= 2 * np.sqrt(2 * gaps / 1e-2))
    assert np.all(np.atleast_1d(warm.extra["gap"]) <= 1e-7)
    # a warm start with another lam starts from a feasible point, and converges
    other = sdca(make_backend(backend, X, yy), **{**kw, "lam": 2e-2},
                 alpha0=cold.extra["alpha"])
    assert other.stop_reason == "tol"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multi,weighted,bias", [(False, False, "none"),
                                                 (False, False, "unregularized"),
                                                 (True, False, "unregularized"),
                                                 (False, True, "none")])
@pytest.mark.parametrize("k", [1, 8])
def test_pegasos_t_start_continues_the_run(backend, multi, weighted, bias, k):
    X, y = toy()
    yy = three_outputs(y) if multi else y
    s = np.random.default_rng(0).uniform(0.5, 2.0, 300) if weighted else None
    kw = dict(lam=1e-2, k=k, seed=9, sampling="epoch", bias=bias)
    one = pegasos(make_backend(backend, X, yy, s), max_iter=800, **kw)
    half = pegasos(make_backend(backend, X, yy, s), max_iter=400, **kw)
    two = pegasos(make_backend(backend, X, yy, s), max_iter=400, t_start=400, w0=half.w,
                  b0=half.b, **kw)
    assert two.n_iter == 400 and two.history[-1][0] == 800
    np.testing.assert_allclose(two.w, one.w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(two.b, one.b, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- bad input
def test_bad_input_messages():
    X, y = toy()
    with pytest.raises(ValueError, match=r"loss must be one of hinge, squared_hinge, got 'log'"):
        sdca(make_backend("numpy", X, y), lam=1e-2, b=1, max_iter=10, loss="log")
    with pytest.raises(ValueError, match=r"loss must be one of hinge, squared_hinge"):
        pegasos(make_backend("numpy", X, y), lam=1e-2, k=1, max_iter=10, loss="log")
    with pytest.raises(ValueError, match=r"bias='optimal' minimises the batch hinge loss"):
        pegasos(make_backend("numpy", X, y), lam=1e-2, k=4, max_iter=10, bias="optimal",
                loss="squared_hinge")
    with pytest.raises(ValueError, match=r"alpha0 must have the shape of y, \(300,\), got \(299,\)"):
        sdca(make_backend("numpy", X, y), lam=1e-2, b=1, max_iter=10, alpha0=np.zeros(299))
    with pytest.raises(ValueError, match=r"alpha0 lies outside the hinge dual's box \[0, s_i\]"):
        sdca(make_backend("numpy", X, y), lam=1e-2, b=1, max_iter=10, alpha0=np.full(300, 2.0))
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(300,\)"):
        make_backend("numpy", X, y, np.ones(3))
    with pytest.raises(ValueError, match=r"sample_weight must be finite and >= 0"):
        make_backend("numba", X, y, -np.ones(300))
    with pytest.raises(ValueError, match=r"y must have shape \(300,\) or \(300, M\)"):
        make_backend("numpy", X, np.ones((300, 2, 1)))
    with pytest.raises(ValueError, match=r"t_start must be an int >= 0"):
        pegasos(make_backend("numpy", X, y), lam=1e-2, k=1, max_iter=10, t_start=-1)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("outputs", [1, 3])
def test_general_path_epoch_order_draws_the_rows_bit_for_bit(loss, outputs, monkeypatch):
    """One-row batches of "epoch" sampling read the epoch's order, as the binary loops do,
    instead of drawing each row: the same rows in the same order, so the very same fit
    (segments that start inside an epoch and cross into the next ones included)."""
    from gpusvm.backends.numba_ import NumbaBackend
    X, y = toy()
    X = sp.csr_matrix(X, dtype=np.float32)
    Y = (three_outputs(y) if outputs == 3 else y).astype(np.float32)
    s = np.random.default_rng(2).uniform(0.0, 2.0, 300)            # weights: the general path

    def fit():
        p = pegasos(make_backend("numba", X, Y, s), lam=1e-2, k=1, max_iter=700,
                    sampling="epoch", seed=5, loss=loss, averaging="tail", eval_every=250)
        d = sdca(make_backend("numba", X, Y, s), lam=1e-2, b=1, max_iter=700, variant="safe",
                 sampling="epoch", seed=5, loss=loss, tol=0.0, eval_every=350)
        return p, d

    by_order = fit()
    drawn = NumbaBackend._nb_sampler

    def no_order(self, sampler):                  # the epoch's order withheld: rows drawn
        state = drawn(self, sampler)
        assert state[7].size == 300               # the order the loops read otherwise
        return state[:7] + (np.zeros(0, np.int32), np.zeros(0, np.uint32))

    monkeypatch.setattr(NumbaBackend, "_nb_sampler", no_order)
    by_draw = fit()
    for a, b in zip(by_order, by_draw):
        np.testing.assert_array_equal(a.w, b.w)
        assert [h[:2] for h in a.history] == [h[:2] for h in b.history]    # (t, objective)
    np.testing.assert_array_equal(by_order[1].extra["alpha"], by_draw[1].extra["alpha"])


@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("k, bias, variant, entries", [
    (7, "unregularized", "safe", 1 << 23), (64, "optimal", "aggressive", 300),
    (64, "none", "safe", 301)])
def test_batches_read_from_the_epoch_order_bit_for_bit(outputs, k, bias, variant, entries,
                                                       monkeypatch):
    """Batches of several rows of "epoch" sampling are read from the epochs' orders the host
    makes (no drawing compiled into the loops): the rows the counter draws and, for SDCA, the
    same repeats of a batch that straddles two epochs, so the very same fits, with orders
    held one epoch (and the next where a batch straddles) at a time."""
    from gpusvm.backends import numba_
    from gpusvm.backends.numba_ import NumbaBackend
    X, y = toy()
    X = sp.csr_matrix(X, dtype=np.float32)
    Y = (three_outputs(y) if outputs == 3 else y).astype(np.float32)

    def fit():
        p = pegasos(make_backend("numba", X, Y), lam=1e-2, k=k, max_iter=230,
                    sampling="epoch", seed=3, averaging="tail", bias=bias, eval_every=60)
        d = sdca(make_backend("numba", X, Y), lam=1e-2, b=k, max_iter=230, variant=variant,
                 sampling="epoch", seed=3, tol=0.0, eval_every=60)
        return p, d

    monkeypatch.setattr(numba_, "ORDER_ENTRIES", entries)
    by_order = fit()
    drawn = NumbaBackend._nb_sampler

    def no_order(self, sampler):                  # the epoch's order withheld: rows drawn
        state = drawn(self, sampler)
        assert state[7].size >= 300               # the order the loops read otherwise
        return state[:7] + (np.zeros((0, 0), np.int32), np.zeros(0, np.uint32))

    monkeypatch.setattr(NumbaBackend, "_nb_sampler", no_order)
    by_draw = fit()
    for a, b in zip(by_order, by_draw):
        np.testing.assert_array_equal(a.w, b.w)
        np.testing.assert_array_equal(a.b, b.b)
        assert [h[:2] for h in a.history] == [h[:2] for h in b.history]
    np.testing.assert_array_equal(by_order[1].extra["alpha"], by_draw[1].extra["alpha"])


@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
@pytest.mark.parametrize("k, bias, variant, entries, by_numpy", [
    (7, "unregularized", "safe", 1 << 23, False), (64, "optimal", "aggressive", 300, False),
    (64, "none", "safe", 301, True)])
def test_drawn_batches_read_from_the_host_bit_for_bit(outputs, sampling, k, bias, variant,
                                                      entries, by_numpy, monkeypatch):
    """Batches of several rows drawn with or without replacement are drawn by the host
    (``drawn_rows``, or NumPy's sampler while it compiles) and read as an epoch's order: the
    rows the loop drew itself and, for SDCA, the same first occurrences, so the very same fits,
    in blocks of one "epoch" of positions (and the next where a batch straddles) at a time."""
    from gpusvm.backends import numba_
    from gpusvm.backends.numba_ import NumbaBackend
    X, y = toy()
    X = sp.csr_matrix(X, dtype=np.float32)
    Y = (three_outputs(y) if outputs == 3 else y).astype(np.float32)

    def fit():
        p = pegasos(make_backend("numba", X, Y), lam=1e-2, k=k, max_iter=230,
                    sampling=sampling, seed=3, averaging="tail", bias=bias, eval_every=60)
        d = sdca(make_backend("numba", X, Y), lam=1e-2, b=k, max_iter=230, variant=variant,
                 sampling=sampling, seed=3, tol=0.0, eval_every=60)
        return p, d

    monkeypatch.setattr(numba_, "ORDER_ENTRIES", entries)
    if by_numpy:                                  # drawn_rows not compiled yet: NumPy's rows
        ready = numba_.AHEAD.ready
        monkeypatch.setattr(numba_.AHEAD, "ready", lambda f, args, **kw:
                            f is not numba_.drawn_rows and ready(f, args, **kw))
        monkeypatch.setattr(numba_, "DRAWN_BY_NUMPY", 5)
    by_host = fit()
    monkeypatch.undo()
    drawn = NumbaBackend._nb_sampler

    def no_order(self, sampler):                  # no order: the loop draws the rows
        state = drawn(self, sampler)
        assert state[7].size >= 300               # the order the loops read otherwise
        return state[:7] + (np.zeros((0, 0), np.int32), np.zeros(0, np.uint32))

    monkeypatch.setattr(NumbaBackend, "_nb_sampler", no_order)
    by_draw = fit()
    for a, b in zip(by_host, by_draw):
        np.testing.assert_array_equal(a.w, b.w)
        np.testing.assert_array_equal(a.b, b.b)
        assert [h[:2] for h in a.history] == [h[:2] for h in b.history]
    np.testing.assert_array_equal(by_host[1].extra["alpha"], by_draw[1].extra["alpha"])

