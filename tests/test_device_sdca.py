"""The device backend's SDCA segments against the NumPy backend through the whole mini-batch
SDCA solver (Takáč et al. 2013); the kernels one by one are in tests/test_segment_kernels.py.

The kernels (``kernels/sdca_*.cu``) run on the CPU kernel emulator (``"emulated"``); the same
tests run on a real GPU (``"cupy"``, marked ``gpu``) whenever CuPy sees a CUDA device.
Solver tests use the same batches on both backends: float64 runs agree with the NumPy backend to
1e-5 relative (measured: ~1e-14, ~1e-8 for the naive step with b = 1024, whose oscillation
amplifies rounding tenfold every ten iterations; the compiled CPU backend shows the same
growth against the NumPy one).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import _kernels, spectral
from gpusvm.backends import cuda_available, make_backend
from gpusvm import SDCASVC
from gpusvm.solvers.sdca import sdca

BACKENDS = [
    "emulated",
    pytest.param("cupy", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not cuda_available(), reason="no CUDA device")]),
]
DTYPES = (np.float32, np.float64)
N, D = 200, 1500
LONG_ROW = 7          # a row with more than 1024 nonzeros
EMPTY_ROW = 3         # a row without nonzeros (in every batch kind)


# ------------------------------------------------------------------ the whole solver
N_ROWS = 4000     # a9a slice: b = 1024 is a true mini-batch
T = 150
LAM = 1e-2        # at 1e-3 the naive step with b = 1024 oscillates chaotically (see the docstring)


@pytest.fixture(scope="module")
def a9a_unit(a9a):
    """The first rows of a9a, float64, each row scaled to unit norm, and sigma^2 of them."""
    X = sp.csr_matrix(a9a.X[:N_ROWS], dtype=np.float64)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1.0 / norms) @ X)
    X.sort_indices()
    y = np.where(a9a.y[:N_ROWS] > 0, 1.0, -1.0)
    return X, y, spectral.sigma_squared(X, normalize=True)


def run(name, X, y, sigma2, variant, b, **opts):
    be = make_backend(name, X, y)
    opts = {"max_iter": T, "eval_every": T // 3, "seed": 3, "tol": 0.0, **opts}
    return be, sdca(be, lam=LAM, b=b, variant=variant, sigma2=sigma2, **opts)


def rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b)


def assert_same_run(res, ref, tol, gap_atol=1e-12):
    """Same iterates, certificates, rejections and beta; the gap ``P - D`` to the accuracy of
    ``P`` (``gap_atol``: a small gap is a difference of two numbers near P)."""
    assert res.n_iter == ref.n_iter == T
    assert rel(res.w, ref.w) <= tol
    assert rel(res.extra["alpha"], ref.extra["alpha"]) <= tol
    assert [h[0] for h in res.history] == [h[0] for h in ref.history]
    hist, hist_ref = np.array(res.history)[:, 1:4], np.array(ref.history)[:, 1:4]
    np.testing.assert_allclose(hist[:, :2], hist_ref[:, :2], rtol=tol)              # P, D
    np.testing.assert_allclose(hist[:, 2], hist_ref[:, 2], rtol=tol, atol=gap_atol)  # gap
    assert res.extra["n_rejected"] == ref.extra["n_rejected"]
    assert res.extra["beta"] == pytest.approx(ref.extra["beta"], rel=tol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["naive", "safe", "aggressive"])
@pytest.mark.parametrize("b", [1, 64, 1024])
def test_solver_matches_numpy_float64(a9a_unit, backend, variant, b):
    X, y, sigma2 = a9a_unit
    _, ref = run("numpy", X, y, sigma2, variant, b)
    be, res = run(backend, X, y, sigma2, variant, b)
    assert_same_run(res, ref, 1e-5)
    assert res.history[-1][3] >= -1e-12                    # the gap is a certificate
    if variant == "aggressive" and b > 1:
        assert res.extra["beta"] < res.extra["beta_b"]     # beta adapted on the device


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["safe", "aggressive"])
@pytest.mark.parametrize("sampling", ["with_replacement", "epoch"])
def test_solver_repeated_rows(a9a_unit, backend, variant, sampling):
    """Batches with repeated rows (the first-occurrence mask): drawn by the sampler's kernels
    (i.i.d.) or by the gather itself (epochs)."""
    X, y, sigma2 = a9a_unit
    _, ref = run("numpy", X, y, sigma2, variant, 1024, sampling=sampling)
    _, res = run(backend, X, y, sigma2, variant, 1024, sampling=sampling)
    assert_same_run(res, ref, 1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["safe", "aggressive"])
@pytest.mark.parametrize("b", [64, 1024])
def test_solver_matches_numpy_float32(a9a_unit, backend, variant, b):
    """float32 ``v``: each atomic addition rounds to float32 where the NumPy backend rounds a
    coordinate's batch sum once, in an order that changes from run to run (measured: 2e-7 to
    1e-6 relative on w and alpha, 2e-6 on P and D, gaps within 8e-8 P)."""
    X, y, sigma2 = a9a_unit
    X, y = X.astype(np.float32), y.astype(np.float32)
    _, ref = run("numpy", X, y, sigma2, variant, b)
    _, res = run(backend, X, y, sigma2, variant, b)
    assert_same_run(res, ref, 1e-4, gap_atol=1e-6 * ref.history[0][1])


# ------------------------------------------------------------------ no synchronisation
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant, per_iteration", [("naive", 2), ("safe", 2), ("aggressive", 4)])
@pytest.mark.parametrize("sampling, sample_launches", [("with_replacement", 2), ("epoch", 0)])
def test_no_transfer_between_evaluations(a9a_unit, backend, variant, per_iteration, sampling,
                                         sample_launches):
    """Device-to-host copies happen only in certificates; 2 or 4 launches per iteration, none of
    them waiting for the host; i.i.d. batches add the sampler's two launches, epochs none (the
    gather draws them)."""
    X, y, sigma2 = a9a_unit
    be = make_backend(backend, X, y)
    events, per_call = [], []
    orig_dual, orig_to_host, orig_segment = be.dual_weights_m, be.to_host, be.sdca_segment_m

    def dual_weights(lam):
        events.append("W")
        return orig_dual(lam)

    def to_host(a):
        events.append("H")
        return orig_to_host(a)

    def segment(sampler, t0, t1, plan):
        events.append("I")
        before = be.launches
        orig_segment(sampler, t0, t1, plan)
        per_call.append((be.launches - before) / (t1 - t0))

    be.dual_weights_m, be.to_host, be.sdca_segment_m = dual_weights, to_host, segment
    sdca(be, lam=LAM, b=256, max_iter=60, variant=variant, sigma2=sigma2, eval_every=20,
         sampling=sampling, seed=1, tol=0.0)
    trace = "".join(events)
    assert trace.count("W") == 3 and trace.count("I") == 3
    for part in trace.split("I")[1:]:          # after a segment, copies only in a certificate
        if "H" in part:
            assert part.startswith("W"), trace
    # each certificate copies P(w(alpha)) with ||w||^2, and D; from the second on, the best
    # point's combination (t, its P and norm) once more; the end copies sm, w and alpha
    assert trace.count("H") == len(be.transfers) == 2 + 2 * 3 + 3, trace
    assert per_call == [per_iteration + sample_launches] * 3


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_cupy_sdca_iterations_never_synchronize(a9a_unit):
    import contextlib
    import warnings

    import cupyx

    from gpusvm.backends._state import S_ASUMD
    from gpusvm.backends.base import SDCAPlan
    from gpusvm.solvers._sampling import CounterSampler
    X, y, sigma2 = a9a_unit
    be = make_backend("cupy", X, y)
    beta_b = spectral.beta_b(512, N_ROWS, sigma2)
    be.init_state_m()
    be.init_dual_m(beta_b)
    sampler = CounterSampler(N_ROWS, 512, "with_replacement", 0)
    plan = SDCAPlan(lam=LAM, beta_b=beta_b, theta=0.5, aggressive=True)
    guard = getattr(cupyx, "allow_synchronize", None)    # deprecated in CuPy 10, may go
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = guard(False) if guard is not None else contextlib.nullcontext()
    with ctx:
        be.sdca_segment_m(sampler, 0, 20, plan)
    assert be.transfers == []
    assert be.to_host(be.sm)[S_ASUMD, 0] > 0


# ------------------------------------------------------------------ estimator, end to end
def test_sdcasvc_on_the_emulator_certifies_a_small_gap(rcv1_small):
    X = rcv1_small.X.astype(np.float64)
    y = np.where(rcv1_small.y > 0, 1.0, -1.0)
    kw = dict(lam=1e-2, batch_size=64, tol=1e-4, bias="none", dtype="float64", random_state=0)
    ref = SDCASVC(backend="numpy", **kw).fit(X, y)
    clf = SDCASVC(backend="emulated", **kw).fit(X, y)
    assert clf.backend_ == "emulated" and clf.stop_reason_ == "tol"
    assert 0.0 <= clf.duality_gap_ <= 1e-4
    # the certificate from the definitions, on the host
    lam, n = 1e-2, X.shape[0]
    w = clf.coef_.ravel()
    primal = 0.5 * lam * w @ w + np.mean(np.maximum(0.0, 1.0 - y * (X @ w)))
    w_alpha = X.T @ (clf.alpha_ * y) / (lam * n)
    dual = clf.alpha_.mean() - 0.5 * lam * w_alpha @ w_alpha
    assert np.all((clf.alpha_ >= 0.0) & (clf.alpha_ <= 1.0))
    # the best point (BestPoints) is no worse than the last certified point w(alpha)
    assert primal <= 0.5 * lam * w_alpha @ w_alpha + np.mean(
        np.maximum(0.0, 1.0 - y * (X @ w_alpha))) + 1e-12
    assert primal - dual == pytest.approx(clf.duality_gap_, rel=1e-6, abs=1e-12)
    assert primal - dual <= 1e-4
    assert clf.n_iter_ == ref.n_iter_
    assert rel(clf.coef_, ref.coef_) <= 1e-5
