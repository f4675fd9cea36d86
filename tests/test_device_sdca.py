"""The SDCA primitives of the device backend against the NumPy backend: kernel by kernel, and
through the whole mini-batch SDCA solver (Takáč et al. 2013).

The kernels (``kernels/sdca_*.cu``) run on the CPU kernel emulator (``"emulated"``); the same
tests run on a real GPU (``"cupy"``, marked ``gpu``) whenever CuPy sees a CUDA device.  Kernel
tests use random CSR matrices with empty rows and rows longer than 1024 nonzeros, batches of one
row, of all rows and drawn i.i.d. (repeated rows), float32 and float64 and every lane count.
Solver tests use the same batches on both backends: float64 runs agree with the NumPy backend to
1e-5 relative (measured: ~1e-14, ~1e-8 for the naive step with b = 1024, whose oscillation
amplifies rounding tenfold every ten iterations; the compiled CPU backend shows the same
growth against the NumPy one).
"""

from __future__ import annotations

import contextlib
import types
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import _kernels, spectral
from gpusvm.backends import cuda_available, make_backend
from gpusvm.backends._state import (S_A, S_ASUMD, S_B, S_BETA, S_DNORM, S_NREJ, S_TMP0, S_VSQ)
from gpusvm.backends.base import SDCAPlan
from gpusvm.backends.device import SDCA_ACC_SLOTS, DeviceBackend, _EmulatedRuntime
from gpusvm.backends.numpy_ import NumpyBackend
from gpusvm import SDCASVC
from gpusvm.solvers._sampling import CounterSampler
from gpusvm.solvers.sdca import first_occurrences, sdca

BACKENDS = [
    "emulated",
    pytest.param("cupy", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not cuda_available(), reason="no CUDA device")]),
]
DTYPES = (np.float32, np.float64)
N, D = 200, 1500
LONG_ROW = 7          # a row with more than 1024 nonzeros
EMPTY_ROW = 3         # a row without nonzeros (in every batch kind)


# ------------------------------------------------------------------ data
def random_csr(dtype, seed=0):
    """CSR with ~15% empty rows, short rows and three rows of 1100-1400 nonzeros."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=N)
    lengths[rng.random(N) < 0.15] = 0
    lengths[[LONG_ROW, 100, N - 1]] = (1400, 1100, 1200)
    lengths[EMPTY_ROW] = 0
    indices = np.concatenate([np.sort(rng.choice(D, size=m, replace=False)) for m in lengths])
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    data = rng.normal(size=indices.size).astype(dtype)
    X = sp.csr_matrix((data, indices.astype(np.int32), indptr.astype(np.int32)), shape=(N, D))
    y = np.where(rng.random(N) < 0.5, -1.0, 1.0).astype(dtype)
    return X, y


def batch(kind, seed=1):
    """Row indices: one long row (k = 1), all rows (k = n), or k = n i.i.d. draws with repeats."""
    if kind == "one":
        return np.array([LONG_ROW], dtype=np.int32)
    if kind == "all":
        return np.arange(N, dtype=np.int32)
    rows = np.random.default_rng(seed).integers(0, N, size=N).astype(np.int32)
    rows[:6] = LONG_ROW                         # a long row six times: colliding atomics
    rows[6:8] = EMPTY_ROW
    return rows


def mask_of(kind, rows):
    """The solver's first-occurrence mask for i.i.d. batches, None otherwise."""
    return first_occurrences(rows[None, :])[0] if kind == "iid" else None


def device(backend, X, y, lanes, blocks=3):
    if backend == "emulated":
        return DeviceBackend(X, y, _EmulatedRuntime(max_blocks=blocks), lanes=lanes)
    return DeviceBackend(X, y, "cupy", lanes=lanes)


def host(be, a):
    return be.to_host(a) if isinstance(be, DeviceBackend) else np.asarray(a)


def twins(backend, dtype, lanes, *, a=1.0, beta=1.0, blocks=3, seed=0, v_scale=0.05):
    """A device backend and a NumpyBackend with the same data, v, a, beta and a random alpha."""
    X, y = random_csr(dtype, seed)
    dev = device(backend, X, y, lanes, blocks)
    ref = NumpyBackend(X, y)
    rng = np.random.default_rng(seed + 1)
    v0 = (v_scale * rng.normal(size=D)).astype(dtype)
    alpha = rng.uniform(0.0, 1.0, size=N)
    alpha[rng.random(N) < 0.3] = 0.0
    alpha[rng.random(N) < 0.1] = 1.0
    alpha[LONG_ROW] = 0.25                   # the k = 1 batch steps in either direction
    for be in (dev, ref):
        be.init_state(w0=v0)
        be.s[S_A] = a
        be.init_dual(beta)
        be.alpha[...] = be.xp.asarray(alpha)
        be.s[S_ASUMD] = float(alpha.sum())
    return X, y, v0, alpha, dev, ref


def assert_scratch_clean(dev):
    assert not host(dev, dev._sdca_acc).any()
    assert not host(dev, dev._sdca_ticket).any()


# ------------------------------------------------------------------ registration
def test_every_sdca_kernel_is_registered_compiled_and_documented():
    """Each kernel is in the module, in the NVRTC/ptxas check (every lane count and type) and in
    its own ``sdca_*.cu`` file that opens with the standard comment (test_nvrtc, test_kernels)."""
    src = _kernels.module_source()
    exprs = set(_kernels.name_expressions())
    for op in _kernels.SDCA_KERNELS:
        file = op[len("gpusvm_"):] + ".cu"
        assert file in _kernels.KERNEL_FILES
        assert f"void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) {op}(" in src
        for t in _kernels.VALUE_TYPES.values():
            assert {_kernels.row_kernel(op, lanes, t) for lanes in _kernels.LANE_COUNTS} <= exprs
        assert set(_kernels.file_name_expressions(file)) == {
            _kernels.row_kernel(op, lanes, t) for lanes in _kernels.LANE_COUNTS
            for t in _kernels.VALUE_TYPES.values()}
    assert src.count("#define GPUSVM_SDCA_COMMON_CUH") == 1
    assert f"N_ACC = {SDCA_ACC_SLOTS}," in src


# ------------------------------------------------------------------ init_dual
@pytest.mark.parametrize("backend", BACKENDS)
def test_init_dual_starts_zero_rows_at_one(backend):
    X, y = random_csr(np.float64)
    dev, ref = device(backend, X, y, 8), NumpyBackend(X, y)
    for be in (dev, ref):
        be.init_state()
        be.init_dual(3.5)
    np.testing.assert_array_equal(host(dev, dev.alpha), ref.alpha)
    assert ref.alpha[EMPTY_ROW] == 1.0 and ref.alpha.sum() == np.count_nonzero(X.getnnz(axis=1) == 0)
    s = host(dev, dev.s)
    assert s[S_ASUMD] == ref.s[S_ASUMD] and s[S_BETA] == 3.5 and s[S_NREJ] == 0.0
    assert not host(dev, dev._scratch).any()
    assert_scratch_clean(dev)


# ------------------------------------------------------------------ margins + deltas (fused)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["one", "all", "iid"])
@pytest.mark.parametrize("lanes", _kernels.LANE_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sdca_margins_fuses_margins_and_deltas(backend, dtype, lanes, kind):
    X, y, v0, alpha, dev, ref = twins(backend, dtype, lanes, a=0.8, beta=2.5, v_scale=0.3)
    rows = batch(kind)
    first = mask_of(kind, rows)
    lam = 0.05
    launches = dev.launches
    m, delta = (host(dev, a) for a in dev.sdca_margins_deltas(rows, lam, first))
    assert dev.launches == launches + 1
    # margins: y_i a <v, x_i> in double (as gpusvm_margins; NumpyBackend.margins rounds the
    # products of float32 data to float32 first)
    X64 = X.astype(np.float64)[rows]
    v64 = v0.astype(np.float64)
    scale = 0.8 * (abs(X64) @ np.abs(v64))
    assert np.all(np.abs(m - y[rows] * (0.8 * (X64 @ v64))) <= 1e-13 * scale + 1e-300)
    np.testing.assert_allclose(m, host(dev, dev.margins(rows)), rtol=1e-14, atol=1e-14 * scale.max())
    # deltas: eq. (15) of the reference on the same margins
    np.testing.assert_allclose(delta, ref.sdca_deltas(rows, m, lam, first), rtol=1e-13, atol=1e-15)
    # the rules: the box, zero rows to alpha = 1, repeats do not step
    a_b = alpha[rows]
    assert np.all(delta >= -a_b) and np.all(delta <= 1.0 - a_b)
    steps = np.ones(rows.size, dtype=bool) if first is None else first
    empty = X.getnnz(axis=1)[rows] == 0
    np.testing.assert_array_equal(delta[empty & steps], 1.0 - a_b[empty & steps])
    assert np.all(delta[~steps] == 0.0)
    if kind == "all":                        # every regime of the clip is exercised
        inner = (delta > -a_b) & (delta < 1.0 - a_b) & ~empty
        assert inner.sum() > 10 and (delta == 1.0 - a_b)[~empty].sum() > 10
        assert ((delta == -a_b) & (a_b > 0)).sum() > 0


# ------------------------------------------------------------------ deltas from given margins
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["one", "all", "iid"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sdca_deltas_from_given_margins(backend, dtype, kind):
    X, y, _, alpha, dev, ref = twins(backend, dtype, 8, beta=1.7)
    rows = batch(kind)
    first = mask_of(kind, rows)
    rng = np.random.default_rng(5)
    m = rng.uniform(-1.0, 3.0, size=rows.size)
    m[::7] = 1.0                                     # no loss: raw step 0
    # a zero row's margin is y_i b = 0 in SDCA (the reference's inf * (1 - m) is its limit, and
    # the contract's "1 - alpha_i", only for m < 1)
    m[X.getnnz(axis=1)[rows] == 0] = 0.0
    delta = host(dev, dev.sdca_deltas(rows, m, 0.02, first))
    np.testing.assert_allclose(delta, ref.sdca_deltas(rows, m, 0.02, first), rtol=1e-13, atol=1e-15)
    assert delta.dtype == np.float64 and delta.shape == rows.shape
    if first is not None:
        assert np.all(delta[~first] == 0.0)


# ------------------------------------------------------------------ Alg. 2: rho and beta
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["one", "all", "iid"])
@pytest.mark.parametrize("lanes", _kernels.LANE_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_adapt_beta(backend, dtype, lanes, kind):
    """rho from the exact norm of the sum added into the zeroed scratch; the scratch is clean after
    the following deltas launch, which zeroes it in the same launch."""
    beta_b, theta, lam = 40.0, 0.3, 0.05
    X, y, _, alpha, dev, ref = twins(backend, dtype, lanes, beta=12.0, blocks=4)
    rows = dev._rows(batch(kind))
    rows_h = batch(kind)
    first = mask_of(kind, rows_h)
    m, tentative = dev.sdca_margins_deltas(rows, lam, first)
    delta = host(dev, tentative)
    dev.sdca_adapt_beta(rows, tentative, beta_b, theta)
    ref.sdca_adapt_beta(rows_h, delta, beta_b, theta)
    s, s_ref = host(dev, dev.s), ref.s
    assert s[S_TMP0] == pytest.approx(s_ref[S_TMP0], rel=1e-12)
    assert s[S_BETA] == pytest.approx(s_ref[S_BETA], rel=1e-12)
    assert 1.0 <= s[S_BETA] <= beta_b and s[S_BETA] != 12.0
    # the scratch holds u = sum_i delta_i y_i x_i
    Xb = X.astype(np.float64)[rows_h]
    u = Xb.T @ (delta * y[rows_h])
    scratch = host(dev, dev._scratch)
    np.testing.assert_allclose(scratch, u, rtol=1e-12, atol=1e-13 * np.abs(u).max())
    assert_scratch_clean(dev)
    # Alg. 2 goes on with the steps of the new beta; that launch zeroes the scratch
    launches = dev.launches
    final = host(dev, dev.sdca_deltas(rows, m, lam, first))
    assert dev.launches == launches + 1
    assert not host(dev, dev._scratch).any()
    np.testing.assert_allclose(final, ref.sdca_deltas(rows_h, host(dev, m), lam, first),
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adapt_beta_clips_rho_and_keeps_beta_on_a_null_step(backend):
    X, y, _, _, dev, ref = twins(backend, np.float64, 8, beta=1.2)
    rows = np.arange(N, dtype=np.int32)
    for be in (dev, ref):
        be.s[S_TMP0] = -7.0
        be.sdca_adapt_beta(rows, np.zeros(N), 1.5, 0.5)        # den = 0: nothing moves
    assert host(dev, dev.s)[S_BETA] == 1.2 and host(dev, dev.s)[S_TMP0] == -7.0
    # nearly orthogonal random rows with random signs: rho below 1, clipped to 1
    delta = np.where(X.getnnz(axis=1) > 0, 0.5, 0.0)
    for be in (dev, ref):
        be.sdca_adapt_beta(rows, delta, 1.5, 0.5)
    s = host(dev, dev.s)
    assert s[S_TMP0] == ref.s[S_TMP0] == 1.0
    assert s[S_BETA] == pytest.approx(ref.s[S_BETA], rel=1e-15)
    # one row four times (no mask): ||4 d y x||^2 / (4 d^2 ||x||^2) = 4, clipped to beta_b = 1.5
    four = np.full(4, LONG_ROW, dtype=np.int32)
    for be in (dev, ref):
        be.sdca_adapt_beta(four, np.full(4, 0.5), 1.5, 0.5)
    s = host(dev, dev.s)
    assert s[S_TMP0] == ref.s[S_TMP0] == 1.5
    assert s[S_BETA] == pytest.approx(ref.s[S_BETA], rel=1e-15) and 1.0 < s[S_BETA] < 1.5
    # the next deltas comes with other rows: the whole scratch is cleared instead
    dev.sdca_deltas(rows[:5], np.zeros(5), 0.1)
    assert not host(dev, dev._scratch).any()


# ------------------------------------------------------------------ the step
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["unchecked", "accepted", "rejected"])
@pytest.mark.parametrize("kind", ["one", "all", "iid"])
@pytest.mark.parametrize("lanes", _kernels.LANE_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sdca_apply(backend, dtype, lanes, kind, mode):
    """Accumulation with coef_i = delta_i y_i / (lam n a), exact ||v||^2 change, and Alg. 2's
    decision on the device: a rejected step is undone and leaves alpha alone."""
    X, y, v0, alpha, dev, ref = twins(backend, dtype, lanes, a=0.8)
    rows = batch(kind)
    first = mask_of(kind, rows)
    # a large lam makes the quadratic term small (D grows); a small one makes D drop
    lam = 1e-6 if mode == "rejected" else (10.0 if mode == "accepted" else 0.05)
    # coordinate steps of eq. (15): delta_i (1 - m_i) >= 0, so D grows unless lam is small
    delta = ref.sdca_deltas(rows, ref.margins(rows), 0.05, first)
    assert np.count_nonzero(delta) >= min(rows.size, 10)
    check = mode != "unchecked"
    vsq0 = float(ref.s[S_VSQ])
    launches = dev.launches
    dev.sdca_apply(rows, delta, lam, check)
    ref.sdca_apply(rows, delta, lam, check)
    assert dev.launches == launches + (2 if check else 1)
    s, s_ref = host(dev, dev.s), ref.s
    assert s[S_NREJ] == s_ref[S_NREJ] == (1.0 if mode == "rejected" else 0.0)

    v, v_ref = host(dev, dev.v).astype(np.float64), ref.v.astype(np.float64)
    coef = delta * y[rows].astype(np.float64) / (lam * N * 0.8)
    A = X.astype(np.float64)[rows]
    absum = np.abs(v0.astype(np.float64)) + abs(A).T @ np.abs(coef)
    count = (A[delta != 0] != 0).sum(axis=0).A1
    eps = np.finfo(dtype).eps
    rounds = 2 if mode == "rejected" else 1                     # the undo adds the same again
    assert np.all(np.abs(v - v_ref) <= eps * (rounds * count + 1) * absum + 1e-300)
    # the change of ||v||^2 is exact for the values the atomics stored
    old = v0.astype(np.float64)
    big = v @ v + old @ old + (s[S_DNORM] if mode == "rejected" else 0.0)
    assert abs(s[S_VSQ] - v @ v) <= 1e-12 * big
    if mode == "rejected":
        np.testing.assert_array_equal(host(dev, dev.alpha), alpha)      # alpha untouched
        assert s[S_ASUMD] == alpha.sum()
        assert s[S_DNORM] == pytest.approx(s_ref[S_DNORM], rel=1e-5 if dtype == np.float32 else 1e-10)
        assert np.all(np.abs(v - old) <= 2 * eps * (count + 1) * absum + 1e-300)   # undone
    else:
        assert abs(s[S_DNORM] - (v @ v - vsq0)) <= 1e-12 * big
        np.testing.assert_allclose(host(dev, dev.alpha), ref.alpha, rtol=1e-15, atol=1e-15)
        assert s[S_ASUMD] == pytest.approx(s_ref[S_ASUMD], rel=1e-14)
    # both changes of ||v||^2 are exact for their own v: they differ by ||v||^2 - ||v_ref||^2
    if mode != "rejected":
        gap = np.linalg.norm(v - v_ref) * np.linalg.norm(v + v_ref)
        assert abs(s[S_DNORM] - s_ref[S_DNORM]) <= 1.01 * gap + 1e-12 * big
    others = np.arange(s.size) != S_DNORM
    np.testing.assert_allclose(s[others], s_ref[others], rtol=1e-5 if dtype == np.float32 else 1e-11,
                               atol=1e-12 * max(abs(s_ref[S_DNORM]), 1.0))
    assert_scratch_clean(dev)


# ------------------------------------------------------------------ certificate
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("blocks", [1, 4])
@pytest.mark.parametrize("lanes", _kernels.LANE_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dual_weights_and_dual_objective(backend, dtype, lanes, blocks):
    X, y, _, alpha, dev, ref = twins(backend, dtype, lanes, a=0.3, blocks=blocks)
    w = host(dev, dev.dual_weights(0.01))
    w_ref = ref.dual_weights(0.01)
    assert w.dtype == np.float64 and w.shape == (D,)
    scale = (abs(X.astype(np.float64)).T @ alpha) / (0.01 * N)
    assert np.all(np.abs(w - w_ref) <= 1e-14 * scale + 1e-300)
    # the iterate is resynchronised with w(alpha)
    np.testing.assert_array_equal(host(dev, dev.v), w.astype(dtype))
    s = host(dev, dev.s)
    assert s[S_A] == 1.0 and s[S_B] == 0.0
    assert s[S_VSQ] == pytest.approx(ref.s[S_VSQ], rel=1e-6 if dtype == np.float32 else 1e-13)
    assert s[S_ASUMD] == pytest.approx(alpha.sum(), rel=1e-15)
    transfers = len(dev.transfers)
    d_obj = dev.dual_objective(0.01, dev.xp.asarray(w))
    assert len(dev.transfers) == transfers + 1
    assert d_obj == pytest.approx(ref.dual_objective(0.01, w_ref), rel=1e-12)


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


def run(name, X, y, sigma2, variant, b, *, fused=True, **opts):
    be = make_backend(name, X, y)
    if not fused:                          # the reference segment calls the separate primitives
        be.sdca_segment = types.MethodType(NumpyBackend.sdca_segment, be)
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
@pytest.mark.parametrize("fused", [True, False])
def test_solver_repeated_rows(a9a_unit, backend, variant, sampling, fused):
    """Batches with repeated rows (the first-occurrence mask): drawn by the sampler's kernels
    (i.i.d.) or by the gather itself (epochs) in a segment, or through the separate primitives."""
    X, y, sigma2 = a9a_unit
    _, ref = run("numpy", X, y, sigma2, variant, 1024, sampling=sampling)
    _, res = run(backend, X, y, sigma2, variant, 1024, sampling=sampling, fused=fused)
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
@pytest.mark.parametrize("variant, per_iteration, separate", [("naive", 2, 3), ("safe", 2, 3),
                                                              ("aggressive", 4, 6)])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("sampling, sample_launches", [("with_replacement", 2), ("epoch", 0)])
def test_no_transfer_between_evaluations(a9a_unit, backend, variant, per_iteration, separate,
                                         fused, sampling, sample_launches):
    """Device-to-host copies happen only in certificates; 2 or 4 launches per iteration (3 or
    6 through the separate primitives), none of them waiting for the host; i.i.d. batches
    add the sampler's two launches, epochs none (the gather draws them)."""
    X, y, sigma2 = a9a_unit
    be = make_backend(backend, X, y)
    events, per_call = [], []
    orig_dual, orig_to_host = be.dual_weights, be.to_host

    def dual_weights(lam):
        events.append("W")
        return orig_dual(lam)

    def to_host(a):
        events.append("H")
        return orig_to_host(a)

    if fused:
        orig_segment = be.sdca_segment

        def segment(sampler, t0, t1, plan):
            events.append("I")
            before = be.launches
            orig_segment(sampler, t0, t1, plan)
            per_call.append((be.launches - before) / (t1 - t0))
        be.sdca_segment = segment
    else:
        be.sdca_segment = types.MethodType(NumpyBackend.sdca_segment, be)
        orig_margins = be.margins

        def margins(rows):
            events.append("I")
            per_call.append(be.launches)
            return orig_margins(rows)
        be.margins = margins
    be.dual_weights, be.to_host = dual_weights, to_host
    sdca(be, lam=LAM, b=256, max_iter=60, variant=variant, sigma2=sigma2, eval_every=20,
         sampling=sampling, seed=1, tol=0.0)
    trace = "".join(events)
    assert trace.count("W") == 3
    assert trace.count("I") == (3 if fused else 60)
    for segment in trace.split("I")[1:]:       # after an iteration, copies only in a certificate
        if "H" in segment:
            assert segment.startswith("W"), trace
    # each certificate copies P(w(alpha)) with ||w||^2, and D; from the second on, the
    # best point's combination (t, its P and norm) once more; the end copies s, w and alpha
    assert trace.count("H") == len(be.transfers) == 2 + 2 * 3 + 3
    if fused:                                  # + the sampler and the i.i.d. first mask
        assert per_call == [per_iteration + sample_launches] * 3
    else:
        steps = np.diff(per_call)
        # one iteration, plus the 2 launches of a certificate after iterations 20 and 40
        assert sorted(set(steps)) == [separate, separate + 2]
        assert (steps == separate + 2).sum() == 2


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_cupy_sdca_iterations_never_synchronize(a9a_unit):
    import cupyx
    X, y, sigma2 = a9a_unit
    be = make_backend("cupy", X, y)
    be.init_state()
    be.init_dual(spectral.beta_b(512, N_ROWS, sigma2))
    sampler = CounterSampler(N_ROWS, 512, "with_replacement", 0)
    plan = SDCAPlan(lam=LAM, beta_b=spectral.beta_b(512, N_ROWS, sigma2), theta=0.5,
                    aggressive=True)
    guard = getattr(cupyx, "allow_synchronize", None)    # deprecated in CuPy 10, may go
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = guard(False) if guard is not None else contextlib.nullcontext()
    with ctx:
        be.sdca_segment(sampler, 0, 20, plan)
    assert be.transfers == []
    assert be.to_host(be.s)[S_ASUMD] > 0


# ------------------------------------------------------------------ ThreadSanitizer
def tsan_launches(X, y, lanes, value_type, rng):
    """Every SDCA kernel on 4-block grids, in the order of an aggressive iteration: a rejected
    and an accepted checked step, an unchecked one, then the certificate's w(alpha)."""
    n, d = X.shape
    ip, ix, dx = X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data
    v = (0.1 * rng.normal(size=d)).astype(X.dtype)
    s = np.zeros(16)
    s[S_A], s[S_VSQ], s[S_BETA] = 1.0, float(v.astype(np.float64) @ v), 4.0
    q = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    alpha = np.where(q == 0, 1.0, rng.uniform(0.0, 0.5, size=n))
    rows = rng.integers(0, n, size=n).astype(np.int32)              # i.i.d.: repeated rows
    rows[:4] = rows[4]
    first = first_occurrences(rows[None, :])[0].astype(np.int32)
    m, tentative, final = np.empty(n), np.empty(n), np.empty(n)
    scratch, acc, ticket, w = np.zeros(d), np.zeros(SDCA_ACC_SLOTS), np.zeros(1, np.uint32), np.zeros(d)
    k, nd, lam = np.int32(n), np.float64(n), np.float64(1e-2)
    name = lambda op: _kernels.row_kernel(op, lanes, value_type)     # noqa: E731
    B = _kernels.BLOCK
    apply = lambda lam_, check, phase: (                              # noqa: E731
        name("gpusvm_sdca_apply"), 4, B, (ip, ix, dx, y, rows, k, final, v, alpha, s, acc, ticket,
                                          np.float64(lam_), nd, np.int32(check), np.int32(phase)))
    return [
        (name("gpusvm_sdca_margins"), 4, B, (ip, ix, dx, y, v, rows, k, s, alpha, q, first,
                                             np.int32(1), lam, nd, m, tentative)),
        (name("gpusvm_sdca_rho"), 4, B, (ip, ix, dx, y, rows, k, tentative, q, scratch, s, acc,
                                         ticket, np.float64(8.0), np.float64(0.5))),
        (name("gpusvm_sdca_deltas"), 4, B, (ip, ix, rows, k, m, alpha, q, first, np.int32(1), s,
                                            lam, nd, final, scratch, tentative, np.int32(1))),
        apply(1e-4, 1, 0), apply(1e-4, 1, 1),               # D drops: rejected, undone
        apply(1e3, 1, 0), apply(1e3, 1, 1),                 # D grows: accepted, alpha moves
        apply(1e3, 0, 0),                                   # unchecked
        (name("gpusvm_sdca_dual_weights"), 4, B, (ip, ix, dx, y, k, alpha, np.float64(lam * n), w)),
    ]


def test_tsan_is_silent_on_the_sdca_kernels(a9a, rcv1_small):
    from tsan_runner import check_launches
    rng = np.random.default_rng(12)
    launches, states = [], []
    for ds, lanes, dtype in ((a9a, 8, np.float32), (rcv1_small, 32, np.float64)):
        X = sp.csr_matrix(ds.X[:96], dtype=dtype)
        X.data[X.indptr[5]:X.indptr[6]] = 0.0               # row 5 becomes a zero row
        X.eliminate_zeros()
        y = np.where(ds.y[:96] > 0, 1.0, -1.0).astype(dtype)
        states.append(len(launches))
        launches += tsan_launches(X, y, lanes, _kernels.VALUE_TYPES[np.dtype(dtype).name], rng)
    names = sorted({name for name, *_ in launches})
    assert {nm.split("<")[0] for nm in names} == set(_kernels.SDCA_KERNELS)
    rep = check_launches(code=_kernels.module_source(), launches=launches, name_expressions=names,
                         options=_kernels.compile_options())
    assert rep.ok, rep.output
    for start in states:                     # the run did the work and left the scratch clean
        margins_args, rho_args = rep.arrays[start], rep.arrays[start + 1]
        s, scratch, acc, ticket = rho_args[9], rho_args[8], rho_args[10], rho_args[11]
        assert s[S_NREJ] == 1.0 and 1.0 <= s[S_BETA] <= 8.0 and s[S_TMP0] >= 1.0
        assert not scratch.any() and not acc.any() and not ticket.any()
        alpha = margins_args[8]
        assert alpha[5] == 1.0                              # a zero row starts and stays at 1
        assert np.abs(rep.arrays[start + 8][7]).sum() > 0        # w(alpha)


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
