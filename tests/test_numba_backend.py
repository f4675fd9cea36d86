"""The compiled CPU backend: the reference iterates in every specialisation of its loops."""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import numba  # noqa: F401  (a test dependency: without it this module fails, it never skips)

from gpusvm import PegasosSVC  # noqa: E402
from gpusvm import backends  # noqa: E402
from gpusvm.backends import make_backend, resolve_backend_name  # noqa: E402
from gpusvm.backends import _loops_nb  # noqa: E402
from gpusvm.backends._state import S_NREJ  # noqa: E402
from gpusvm.backends import numba_  # noqa: E402
from gpusvm.backends.numba_ import NUMBA_MISSING, CompilationNotice, NumbaBackend  # noqa: E402
from gpusvm.backends.numpy_ import NumpyBackend  # noqa: E402
from gpusvm import SDCASVC  # noqa: E402
from gpusvm.solvers._sampling import CounterSampler  # noqa: E402
from gpusvm.solvers.pegasos import pegasos, segment_length  # noqa: E402
from gpusvm.solvers.sdca import sdca  # noqa: E402

LAM = 1e-3


def as64(ds, rows=None):
    """float64 int32 CSR copy of a conftest data set (optionally its first ``rows`` rows)."""
    X = sp.csr_matrix(ds.X, dtype=np.float64)
    y = np.where(ds.y > 0, 1.0, -1.0)
    if rows is not None:
        X, y = X[:rows], y[:rows]
    X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                      shape=X.shape)
    return X, y


@pytest.fixture(scope="module")
def rcv1_64(rcv1_small):
    """The RCV1 slice (1,000 unit rows, 47,236 features) in float64."""
    return as64(rcv1_small)


@pytest.fixture(scope="module")
def a9a_64(a9a):
    """The first 3,000 rows of a9a (binary features, norm ~3.7), float64."""
    return as64(a9a, rows=3000)


@pytest.fixture(scope="module")
def odd_matrix():
    """A CSR with duplicate entries in rows (not canonical), all-zero rows and explicit zeros."""
    rng = np.random.default_rng(7)
    n, d = 240, 40
    rows, cols, vals = [], [], []
    for i in range(n):
        if i % 17 == 0:
            continue                                        # an all-zero row
        k = rng.integers(1, 9)
        c = rng.integers(0, d, size=k)
        c = np.concatenate([c, c[:1]])                      # a duplicated column
        rows += [i] * c.size
        cols += c.tolist()
        vals += rng.normal(size=c.size).tolist()
    vals[3] = 0.0                                           # an explicit zero
    X = sp.csr_matrix((np.array(vals), (np.array(rows), np.array(cols))), shape=(n, d))
    X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                      shape=X.shape)
    X.has_canonical_format = False
    y = np.where(rng.random(n) < 0.4, 1.0, -1.0)
    return X, y


def general_form(be):
    """Make ``be`` run its loops without the ``M = 1`` specialisation (the slots in ``sm``,
    the ``M`` loops kept, a row's dot product as one running sum)."""
    flags = be._nb_flags

    def no_one(sampler):
        return (False,) + flags(sampler)[1:]

    be._nb_flags = no_one
    return be


def assert_same_run(r1, r2, rtol=1e-9, atol=1e-12):
    """Same iterates: ``w`` to ``rtol`` of its largest entry (an averaged ``w`` is a difference
    ``A v - u`` whose small entries carry the rounding of the large ones), same history."""
    np.testing.assert_allclose(r2.w, r1.w, rtol=rtol, atol=max(atol, rtol * np.abs(r1.w).max()))
    assert r2.b == pytest.approx(r1.b, rel=rtol, abs=atol)
    assert r2.n_iter == r1.n_iter
    assert [h[0] for h in r2.history] == [h[0] for h in r1.history]
    np.testing.assert_allclose([h[1] for h in r2.history], [h[1] for h in r1.history],
                               rtol=rtol, atol=atol)
    assert r2.stop_reason == r1.stop_reason


def case_id(case: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in case.items())


# every option value of the Pegasos solver appears at least once, with k = 1 and k > 1
PEGASOS_CASES = [
    dict(k=1),
    dict(k=1, averaging="tail", sampling="epoch"),
    dict(k=2, bias="optimal", schedule="norma"),
    dict(k=8),
    dict(k=8, averaging="all", sampling="with_replacement"),
    dict(k=8, averaging="tail", bias="unregularized"),
    dict(k=8, bias="optimal", averaging="all"),
    dict(k=16, schedule="norma", projection=False, sampling="epoch"),
    dict(k=5, schedule="constant", eta0=0.05, projection=False),
    dict(k=5, schedule="constant", eta0=0.05, bias="unregularized", averaging="tail"),
    dict(k=64, sampling="with_replacement", bias="optimal"),
    dict(k=3, projection=True, averaging="all", schedule="norma", norma_p=0.71),
]


@pytest.mark.parametrize("case", PEGASOS_CASES, ids=case_id)
def test_pegasos_same_iterates_as_numpy(rcv1_64, case):
    X, y = rcv1_64
    kw = dict(lam=LAM, max_iter=700, seed=3, eval_every=97, **case)
    ref = pegasos(NumpyBackend(X, y), **kw)
    be = NumbaBackend(X, y)
    got = pegasos(be, **kw)
    assert_same_run(ref, got)
    assert np.abs(got.w).max() > 0                          # a real run, not a zero vector


@pytest.mark.parametrize("case", PEGASOS_CASES[:6], ids=case_id)
def test_pegasos_same_iterates_on_a_non_canonical_matrix(odd_matrix, case):
    X, y = odd_matrix
    kw = dict(lam=0.05, max_iter=300, seed=5, eval_every=41, **case)
    assert_same_run(pegasos(NumpyBackend(X, y), **kw), pegasos(NumbaBackend(X, y), **kw))


@pytest.mark.parametrize("variant", ["naive", "safe", "aggressive"])
@pytest.mark.parametrize("b", [1, 8, 128])
@pytest.mark.parametrize("sampling", ["without_replacement", "epoch", "with_replacement"])
def test_sdca_same_iterates_as_numpy(rcv1_64, variant, b, sampling):
    X, y = rcv1_64
    kw = dict(lam=LAM, b=b, max_iter=max(40, 3000 // b), variant=variant, sampling=sampling,
              tol=0.0, seed=11, eval_every=max(1, 700 // b), sigma2=0.05)
    ref = sdca(NumpyBackend(X, y), **kw)
    got = sdca(NumbaBackend(X, y), **kw)
    np.testing.assert_allclose(got.w, ref.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.extra["alpha"], ref.extra["alpha"], rtol=1e-9, atol=1e-12)
    assert got.extra["n_rejected"] == ref.extra["n_rejected"]
    assert got.extra["beta"] == pytest.approx(ref.extra["beta"], rel=1e-9)
    np.testing.assert_allclose([h[3] for h in got.history], [h[3] for h in ref.history],
                               rtol=1e-7, atol=1e-12)       # the duality gaps
    assert got.extra["alpha"].max() > 0


@pytest.mark.parametrize("variant", ["naive", "safe", "aggressive"])
@pytest.mark.parametrize("b", [1, 6])
def test_sdca_same_iterates_on_rows_with_other_norms(a9a_64, odd_matrix, variant, b):
    """a9a (norms ~3.7) and a non-canonical matrix with zero rows and explicit zeros."""
    for X, y, lam in (a9a_64 + (1e-4,), odd_matrix + (0.05,)):
        kw = dict(lam=lam, b=b, max_iter=1500 // b, variant=variant, sampling="epoch",
                  tol=0.0, seed=2, eval_every=251 // b, sigma2=0.3)
        ref = sdca(NumpyBackend(X, y), **kw)
        got = sdca(NumbaBackend(X, y), **kw)
        np.testing.assert_allclose(got.w, ref.w, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got.extra["alpha"], ref.extra["alpha"], rtol=1e-9, atol=1e-12)
        assert got.extra["n_rejected"] == ref.extra["n_rejected"]


def test_the_aggressive_rejection_is_exercised_and_agrees(rcv1_64):
    """A large batch with a too-small beta (sigma2 understated as 1/n) forces rejected steps."""
    X, y = rcv1_64
    kw = dict(lam=LAM, b=256, max_iter=60, variant="aggressive", sampling="without_replacement",
              tol=0.0, seed=1, sigma2=1.0 / X.shape[0])
    ref = sdca(NumpyBackend(X, y), **kw)
    got = sdca(NumbaBackend(X, y), **kw)
    assert ref.extra["n_rejected"] > 0
    assert got.extra["n_rejected"] == ref.extra["n_rejected"]
    np.testing.assert_allclose(got.w, ref.w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", PEGASOS_CASES, ids=case_id)
def test_pegasos_one_output_specialisation_equals_the_general_form(rcv1_64, case):
    """The M = 1 loop (slots in registers, four partial sums) against the same source with
    the M loops kept: the same iterates to the rounding of a dot product."""
    X, y = rcv1_64
    kw = dict(lam=LAM, max_iter=500, seed=4, eval_every=61, **case)
    a = pegasos(NumbaBackend(X, y), **kw)
    b = pegasos(general_form(NumbaBackend(X, y)), **kw)
    assert_same_run(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("variant", ["naive", "safe", "aggressive"])
@pytest.mark.parametrize("b", [1, 8])
@pytest.mark.parametrize("sampling", ["without_replacement", "epoch", "with_replacement"])
def test_sdca_one_output_specialisation_equals_the_general_form(rcv1_64, variant, b, sampling):
    X, y = rcv1_64
    kw = dict(lam=LAM, b=b, max_iter=2000 // b, variant=variant, sampling=sampling, tol=0.0,
              seed=9, eval_every=333 // b, sigma2=0.05)
    one, gen = NumbaBackend(X, y), general_form(NumbaBackend(X, y))
    a, c = sdca(one, **kw), sdca(gen, **kw)
    np.testing.assert_allclose(a.w, c.w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.extra["alpha"], c.extra["alpha"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(one.sm, gen.sm, rtol=1e-10, atol=1e-14)
    assert a.extra["n_rejected"] == c.extra["n_rejected"]
    assert [h[0] for h in a.history] == [h[0] for h in c.history]


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_unit_weights_and_stacked_outputs_give_the_single_output_iterates(rcv1_64, loss):
    """The weighted specialisation with unit weights, and each column of an M-output fit,
    give the plain single-output fit's iterates (to rounding: the M-output loop sums a
    row's products in one running sum)."""
    X, y = rcv1_64
    Y = np.stack([y, -y, y], axis=1)
    for solver, kw in ((sdca, dict(lam=LAM, b=1, max_iter=3000, variant="safe", tol=0.0,
                                   sampling="epoch", seed=3, loss=loss)),
                       (sdca, dict(lam=LAM, b=16, max_iter=200, variant="aggressive", tol=0.0,
                                   seed=3, sigma2=0.05, loss=loss)),
                       (pegasos, dict(lam=LAM, k=1, max_iter=2000, seed=3, averaging="tail",
                                      sampling="epoch", loss=loss)),
                       (pegasos, dict(lam=LAM, k=8, max_iter=300, seed=3, loss=loss))):
        plain = solver(NumbaBackend(X, y), **kw)
        unit = solver(NumbaBackend(X, y, np.ones(y.size)), **kw)
        many = solver(NumbaBackend(X, Y), **kw)
        np.testing.assert_allclose(unit.w, plain.w, rtol=1e-12, atol=1e-14)
        for c, sign in enumerate((1, -1, 1)):
            want = plain.w if sign == 1 else solver(NumbaBackend(X, -y), **kw).w
            np.testing.assert_allclose(many.w[:, c], want, rtol=1e-9, atol=1e-12)


def _shrinking_reference(X, y, lam, epochs, seed):
    """Safe SDCA with b = 1 over the "epoch" order and LIBLINEAR's shrinking (Hsieh et al.
    2008, Alg. 3 with the bounds of Sec. 3.2), written out in Python on a dense ``w``."""
    n = X.shape[0]
    sampler = CounterSampler(n, 1, "epoch", seed)
    q = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    w = np.zeros(X.shape[1])
    alpha = (q == 0).astype(np.float64)
    active = np.ones(n, dtype=bool)
    hi_bar, lo_bar, pg_max, pg_min = np.inf, -np.inf, -np.inf, np.inf
    for t in range(epochs * n):
        r = int(sampler.batch(t)[0][0])
        if active[r]:
            lo, hi = X.indptr[r], X.indptr[r + 1]
            cols, vals = X.indices[lo:hi], X.data[lo:hi]
            g = y[r] * float(np.dot(vals, w[cols])) - 1.0
            shrink, pg = False, g
            if alpha[r] <= 0.0:
                shrink, pg = g > hi_bar, min(g, 0.0)
            elif alpha[r] >= 1.0 - _loops_nb.UPPER_SLACK:
                shrink, pg = g < lo_bar, max(g, 0.0)
            if shrink:
                active[r] = False
            else:
                pg_max, pg_min = max(pg_max, pg), min(pg_min, pg)
                delta = min(max(lam * n * (-g) / q[r], -alpha[r]), 1.0 - alpha[r])
                alpha[r] += delta
                w[cols] += delta * y[r] * vals / (lam * n)
        if (t + 1) % n == 0:
            if pg_max - pg_min <= _loops_nb.SHRINK_EPS:
                active[:] = True
                hi_bar, lo_bar = np.inf, -np.inf
            else:
                hi_bar = pg_max if pg_max > 0 else np.inf
                lo_bar = pg_min if pg_min < 0 else -np.inf
            pg_max, pg_min = -np.inf, np.inf
    return w, alpha, active


def test_shrinking_follows_the_textbook_active_set(a9a_64):
    X, y = a9a_64
    n = X.shape[0]
    be = NumbaBackend(X, y)
    got = sdca(be, lam=1e-4, b=1, max_iter=6 * n, variant="safe", sampling="epoch", seed=1,
               tol=0.0, shrinking=True, eval_every=6 * n)
    w, alpha, active = _shrinking_reference(X, y, 1e-4, 6, 1)
    np.testing.assert_array_equal(be._active, active)
    assert 0 < (~active).sum()                          # rows were taken out of the active set
    np.testing.assert_allclose(got.extra["alpha"], alpha, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.w, w, rtol=1e-10, atol=1e-12)
    plain = sdca(NumbaBackend(X, y), lam=1e-4, b=1, max_iter=6 * n, variant="safe",
                 sampling="epoch", seed=1, tol=0.0, eval_every=6 * n)
    assert not np.array_equal(plain.w, got.w)


def test_fused_path_respects_eval_at_and_odd_eval_every(rcv1_64):
    """Evaluations at arbitrary iterations (eval_at) and an eval_every not dividing the chunk."""
    X, y = rcv1_64
    marks = {3, 4, 50, 333, 334, 1000}
    kw = dict(lam=LAM, k=2, max_iter=1200, seed=0, averaging="tail")
    a = pegasos(NumbaBackend(X, y), eval_at=lambda t: t in marks, **kw)
    assert [h[0] for h in a.history] == sorted(marks) + [1200]
    c = sdca(NumbaBackend(X, y), lam=LAM, b=1, max_iter=2500, tol=0.0, eval_every=777, seed=0)
    assert [h[0] for h in c.history] == [777, 1554, 2331, 2500]


def test_segment_length():
    assert segment_length(0, 100, 10) == 10
    assert segment_length(7, 100, 10) == 3
    assert segment_length(7, 2, 10) == 2
    assert segment_length(5, 100, 10, eval_at=lambda t: t == 9) == 4
    assert segment_length(5, 3, 10, eval_at=lambda t: t == 9) == 3


def test_prefetching_v_changes_nothing(rcv1_64):
    """The prefetch of v's entries (on when v exceeds the L2 cache) is a pure hint."""
    X, y = rcv1_64
    kw = dict(lam=LAM, b=1, max_iter=3000, variant="safe", sampling="epoch", tol=0.0, seed=3)
    off, on = NumbaBackend(X, y), NumbaBackend(X, y)
    off._nb_prefetch_v, on._nb_prefetch_v = (lambda: False), (lambda: True)
    a, b = sdca(off, **kw), sdca(on, **kw)
    np.testing.assert_array_equal(a.w, b.w)
    p_off = pegasos(off, lam=LAM, k=4, max_iter=400, seed=1)
    p_on = pegasos(on, lam=LAM, k=4, max_iter=400, seed=1)
    np.testing.assert_array_equal(p_off.w, p_on.w)


def test_evaluation_primitives_match_numpy(rcv1_64):
    X, y = rcv1_64
    Y = np.stack([y, -y], axis=1)
    for labels in (y, Y):
        ref, be = NumpyBackend(X, labels), NumbaBackend(X, labels)
        np.testing.assert_allclose(be.row_sq_norms, ref.row_sq_norms, rtol=1e-14)
        W = np.random.default_rng(0).normal(size=(X.shape[1], ref.n_outputs))
        np.testing.assert_allclose(be.decision_function_m(W, 0.25),
                                   ref.decision_function_m(W, 0.25), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(be.col_sq_norms_m(W), ref.col_sq_norms_m(W), rtol=1e-12)
        for b_ in (ref, be):
            b_.init_state_m()
            b_.init_dual_m(1.0)
            b_.alpha[:] = np.random.default_rng(1).random(b_.alpha.shape)
        w1, w2 = ref.dual_weights_m(LAM), be.dual_weights_m(LAM)
        np.testing.assert_allclose(w2, w1, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(be.sm, ref.sm, rtol=1e-12)     # S_VSQ resynchronised


def test_float32_agrees_with_the_reference_to_float32_rounding(rcv1_small):
    X = sp.csr_matrix(rcv1_small.X, dtype=np.float32)
    y = np.where(rcv1_small.y > 0, 1.0, -1.0).astype(np.float32)
    kw = dict(lam=LAM, b=1, max_iter=3000, variant="aggressive", sampling="epoch", tol=0.0, seed=2)
    ref, got = sdca(NumpyBackend(X, y), **kw), sdca(NumbaBackend(X, y), **kw)
    np.testing.assert_allclose(got.w, ref.w, rtol=1e-4, atol=1e-6)
    assert got.extra["gap"] == pytest.approx(ref.extra["gap"], rel=1e-3)
    p1 = pegasos(NumpyBackend(X, y), lam=LAM, k=4, max_iter=500, seed=2, averaging="tail")
    p2 = pegasos(NumbaBackend(X, y), lam=LAM, k=4, max_iter=500, seed=2, averaging="tail")
    np.testing.assert_allclose(p2.w, p1.w, rtol=1e-4, atol=1e-6)


def test_data_is_not_copied(rcv1_64):
    X, y = rcv1_64
    be = NumbaBackend(X, y)
    assert be.X is X
    assert np.shares_memory(be.X.data, X.data) and np.shares_memory(be.X.indices, X.indices)
    sdca(be, lam=LAM, b=1, max_iter=500, tol=0.0)
    assert be._nb_wrk["slot"].size == 0       # b = 1 on a canonical CSR needs no d-sized scratch


def test_estimators_on_numba_match_numpy_and_certify(a9a):
    X = sp.csr_matrix(a9a.X[:3000], dtype=np.float64)      # the NumPy backend steps in Python
    y = a9a.y[:3000]
    kw = dict(lam=1e-3, batch_size=1, variant="safe", sampling="epoch", tol=1e-3, dtype="float64",
              random_state=0)
    a = SDCASVC(backend="numpy", **kw).fit(X, y)
    b = SDCASVC(backend="numba", **kw).fit(X, y)
    assert b.backend_ == "numba"
    assert b.duality_gap_ <= 1e-3
    assert b.n_iter_ == a.n_iter_
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(b.intercept_, a.intercept_, rtol=1e-8, atol=1e-10)
    kw = dict(lam=1e-4, batch_size=32, max_iter=2000, averaging="tail", bias="augmented",
              dtype="float64", random_state=0)
    c = PegasosSVC(backend="numpy", **kw).fit(X, y)
    d = PegasosSVC(backend="numba", **kw).fit(X, y)
    np.testing.assert_allclose(d.coef_, c.coef_, rtol=1e-8, atol=1e-10)
    assert d.score(X, y) == c.score(X, y) > 0.8


def test_auto_picks_numba_without_a_device(monkeypatch):
    monkeypatch.setattr(backends, "cuda_available", lambda: False)
    assert resolve_backend_name("auto") == "numba"
    assert "numba" in backends.BACKENDS


def test_without_numba_the_backend_says_what_to_install_and_auto_falls_back(monkeypatch, rcv1_64):
    X, y = rcv1_64
    monkeypatch.setattr(backends, "cuda_available", lambda: False)
    monkeypatch.setitem(sys.modules, "numba", None)          # `import numba` now raises ImportError
    assert not backends.numba_available()
    assert resolve_backend_name("auto") == "numpy"
    with pytest.raises(ImportError, match=r'pip install "numba>=0.59"') as err:
        make_backend("numba", X, y)
    assert str(err.value) == NUMBA_MISSING
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SDCASVC(lam=1e-2, tol=1e-2, random_state=0).fit(X, y)
    assert est.backend_ == "numpy"


def test_rejections_slot_is_kept_in_the_state(rcv1_64):
    """The state vector carries S_NREJ like the reference (read by the solver's result)."""
    X, y = rcv1_64
    be = NumbaBackend(X, y)
    res = sdca(be, lam=LAM, b=256, max_iter=40, variant="aggressive", tol=0.0, seed=1,
               sigma2=1.0 / X.shape[0])
    assert res.extra["n_rejected"] == int(be.sm[S_NREJ, 0]) > 0


def _segment_cases(rng):
    """``(A0, A1, s, sq0, cross, sq1, lam)`` of one output: margins with many crossings of 1,
    none (the same point twice), ties (margins at exactly 1), the minimum at either end or
    inside, with and without row weights."""
    n, d = 500, 12
    X = rng.standard_normal((n, d))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    w_a, w_b = 0.2 * rng.standard_normal(d), 0.2 * rng.standard_normal(d)
    g = X.T @ y / n
    pairs = [(w_a, w_b), (w_a, w_a), (0.01 * w_b, 3.0 * w_b), (np.zeros(d), -g),
             (np.zeros(d), 1e-3 * g), (w_b, w_a)]
    for lam in (1e-4, 1e-2):
        for k, (w0, w1) in enumerate(pairs):
            A0, A1 = (y * (X @ w0))[None, :], (y * (X @ w1))[None, :]
            if k == 0:
                A0[0, :20] = 1.0                            # ties at the crossing points
            for s in (None, rng.uniform(0.0, 2.0, n)):
                yield (A0, A1, s, np.array([w0 @ w0]), np.array([w0 @ w1]),
                       np.array([w1 @ w1]), lam)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_the_compiled_segment_point_is_the_reference_bit_for_bit(loss):
    """BestPoints' compiled segment minimum (one output) returns NumPy's numbers exactly: the
    first fit of a process runs NumPy's while it compiles ahead, and a seed must give the
    same model either way."""
    from gpusvm.backends import _compile_nb  # noqa: PLC0415
    from gpusvm.solvers.sdca import segment_point  # noqa: PLC0415

    rng = np.random.default_rng(5)
    be = NumbaBackend(sp.csr_matrix(np.eye(3)), np.array([1.0, -1.0, 1.0]))
    ts = []
    for A0, A1, s, sq0, cross, sq1, lam in _segment_cases(rng):
        ref = segment_point(np, A0, A1 - A0, s, sq0, cross, sq1, lam, loss)
        got = be.segment_point_one(A0, A1, s, sq0, cross, sq1, lam, loss)
        if got is None:                                     # compiling ahead: wait for it
            _compile_nb.AHEAD.wait()
            got = be.segment_point_one(A0, A1, s, sq0, cross, sq1, lam, loss)
        for r, g_ in zip(ref, got):
            np.testing.assert_array_equal(np.asarray(g_), np.asarray(r))
        ts.append(float(ref[0][0]))
    ts = np.array(ts)
    assert (ts == 0.0).any() and (ts == 1.0).any() and ((ts > 0.0) & (ts < 1.0)).any()


def test_the_crossings_stable_order_is_numpys():
    """The radix sort of the crossings' ``t`` is NumPy's stable argsort: ties kept in order
    (``0.0`` and ``-0.0`` tie), values over many binades, negative values, infinities and
    NaNs (last, tied, whatever their bits)."""
    from gpusvm.backends._csr_nb import stable_order  # noqa: PLC0415

    rng = np.random.default_rng(9)
    for k in (0, 1, 2, 7, 300, 5000):
        for case in range(4):
            t = rng.random(k) ** 8                      # down to ~1e-30: every digit varies
            if case == 1:
                t = np.round(t, 3)                      # many ties
            elif case == 2 and k:
                t[::3], t[1::3] = -0.0, 0.0
            elif case == 3 and k:
                t[k // 2] = -1.0
                t[::5] *= -1.0
                t[1::7] = np.inf
                t[2::7] = -np.inf
                t[3::11] = np.nan
                t[4::11] = -np.nan
            keyf, idx = np.empty(k), np.empty((2, k), dtype=np.int64)
            got = stable_order(t, k, keyf, keyf.view(np.uint64), np.empty(k, dtype=np.uint64),
                               idx[0], idx[1], np.empty((6, 2049), dtype=np.int64))
            np.testing.assert_array_equal(got, np.argsort(t, kind="stable"))


def test_a_fit_is_the_same_with_the_numpy_segment_point(a9a_64, monkeypatch):
    """The compiled segment minimum changes no bit of a fit (weighted, both losses)."""
    from gpusvm.backends import _compile_nb  # noqa: PLC0415

    X, y = a9a_64
    s = np.random.default_rng(2).uniform(0.5, 1.5, X.shape[0])
    for loss, weights in (("hinge", None), ("squared_hinge", s)):
        kw = dict(lam=1e-3, b=1, max_iter=10 * X.shape[0], tol=0.0, seed=4, loss=loss,
                  eval_every=X.shape[0] // 2)
        compiled = []
        real = NumbaBackend.segment_point_one

        def counted(self, *args):
            got = real(self, *args)
            if got is None:                                 # compiling ahead: wait for it
                _compile_nb.AHEAD.wait()
                got = real(self, *args)
            compiled.append(got is not None)
            return got
        with monkeypatch.context() as m:
            m.setattr(NumbaBackend, "segment_point_one", counted)
            fast = sdca(NumbaBackend(X, y, sample_weight=weights), **kw)
        assert len(compiled) == 19 and all(compiled)
        with monkeypatch.context() as m:
            m.setattr(NumbaBackend, "segment_point_one", lambda self, *a: None)
            slow = sdca(NumbaBackend(X, y, sample_weight=weights), **kw)
        assert len(fast.history) == 20 and fast.n_iter == slow.n_iter
        np.testing.assert_array_equal(fast.w, slow.w)
        assert [h[:4] for h in fast.history] == [h[:4] for h in slow.history]


_TINY_LOOP = """
from numba import njit


@njit(cache=True)
def tiny_loop(csr):
    data = csr[2]
    acc = 0.0
    for p in range(data.size):
        acc += data[p]
    return acc
"""


def call_loop(dispatcher, *args):
    """The loop made ready as a segment makes it (announced, compiled or loaded), then called."""
    numba_._ready_loop(dispatcher, args)
    return dispatcher(*args)


def test_compile_notice_fires_exactly_when_numba_compiles(tmp_path, monkeypatch):
    """The notice says so when a call has no entry in numba's cache (a cold cache, or another
    dtype beside a cached one, whose index file already exists), names the dtype, and says
    nothing when the call's machine code is loaded from the cache (as in a later process)."""
    (tmp_path / "gpusvm_tiny_loop.py").write_text(_TINY_LOOP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(numba_, "_announced", set())
    import importlib  # noqa: PLC0415

    ip = np.array([0, 1], dtype=np.int32)
    ix = np.array([0], dtype=np.int32)
    try:
        mod = importlib.import_module("gpusvm_tiny_loop")
        with pytest.warns(CompilationNotice, match=r"compiling the CPU loops of this solver for "
                          r"float32 data, once: this first fit takes about \d+-\d+ s longer "
                          r"than the next ones \(wall time, an empty numba cache"):
            assert call_loop(mod.tiny_loop, (ip, ix, np.ones(1, np.float32))) == 1.0
        old = mod.tiny_loop                 # kept alive, so that its id is not reused
        fresh = importlib.reload(mod).tiny_loop
        assert fresh is not old
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationNotice)
            assert call_loop(fresh, (ip, ix, np.full(1, 2.0, np.float32))) == 2.0
        assert sum(fresh.stats.cache_hits.values()) == 1 and not fresh.stats.cache_misses
        with pytest.warns(CompilationNotice, match="for float64 data"):
            assert call_loop(fresh, (ip, ix, np.ones(1))) == 1.0
        assert sum(fresh.stats.cache_misses.values()) == 1
    finally:
        sys.modules.pop("gpusvm_tiny_loop", None)


def test_a_multiclass_fit_narrowed_to_one_output_keeps_the_multi_output_loop(monkeypatch):
    """Letter, 26 classes: the last output still above ``tol`` runs alone (``outputs_m``) for
    an epoch; it keeps the M-output loop and products, so a multiclass fit never compiles the
    one-output code as well (2.5-3.5 s cold), and still certifies every output."""
    from sklearn.datasets import load_svmlight_file

    from conftest import shared_data_dir
    X, y = load_svmlight_file(str(shared_data_dir() / "letter" / "letter.scale"), n_features=16)
    flags, live = [], []
    loop = numba_.sdca_loop
    monkeypatch.setattr(numba_, "sdca_loop", lambda *f: (flags.append(f), loop(*f))[1])
    segment = NumbaBackend.sdca_segment_m

    def counting(self, *args):
        live.append(self.n_outputs)
        return segment(self, *args)

    monkeypatch.setattr(NumbaBackend, "sdca_segment_m", counting)
    clf = SDCASVC(backend="numba", random_state=0).fit(X, y)
    assert min(live) == 1 and max(live) == 26          # the case: narrowed to one output
    assert flags and not any(one for one, *_ in flags)
    assert np.all(clf.duality_gap_ <= clf.tol)


def test_the_collector_is_paused_only_while_gpusvm_compiles():
    """Python's collector is off from the start to the end of the outermost compilation of a
    function defined in gpusvm (a function of another package compiled inside it included),
    back as it was afterwards, and left on for another package's compilation."""
    import gc

    from numba import njit
    from numba.core import event

    from gpusvm.backends import _compile_nb

    def helper(x):
        return x + 1.0

    def ours(x):
        return helper_nb(x) * 2.0

    def theirs(x):
        return x - 1.0

    ours.__module__ = "gpusvm.backends._probe"
    helper_nb = njit(helper)
    ours_nb, theirs_nb = njit(ours), njit(theirs)
    seen = {}
    _compile_nb.AHEAD.wait()          # an earlier fit's helpers compile with the collector off

    class Probe(event.Listener):
        def on_start(self, ev):
            seen[ev.data["dispatcher"].py_func.__name__] = gc.isenabled()

        def on_end(self, ev):
            pass

    assert gc.isenabled()
    with event.install_listener("numba:compile", Probe()):
        assert ours_nb(1.0) == 4.0
        assert gc.isenabled() and _compile_nb.LISTENER.depth == 0
        assert theirs_nb(1.0) == 0.0
    assert seen == {"ours": False, "helper": False, "theirs": True}
    assert gc.isenabled()
    gc.disable()                       # a collector the caller turned off stays off
    try:
        assert njit(ours)(2.0) == 6.0
        assert not gc.isenabled()
    finally:
        gc.enable()
