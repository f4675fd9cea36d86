"""The device backend's general path (M outputs, weights, the squared hinge) on the kernel emulator.

The emulated backend runs kernels/margins_multi.cu, accumulate_multi.cu and
sdca_deltas_multi.cu on the CPU; every run is checked against the NumPy
reference on the same batches (float64 data: the emulated atomics round each
addition, the reference once per column, so the two agree to rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm.backends import make_backend
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca


def small(seed=0, n=40, d=15):
    """40 rows, three outputs, weights with a zero, a zero row (the emulator is slow: keep it small)."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, format="lil", random_state=seed + 1)
    X[7, :] = 0
    X = sp.csr_matrix(X)
    X.sort_indices()
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    Y = np.stack([y, -y, np.where(rng.random(n) < 0.3, 1.0, -1.0)], axis=1)
    s = rng.uniform(0.0, 2.0, n)
    s[3] = 0.0
    return X, Y, s


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("variant,b,sampling", [("safe", 4, "without_replacement"),
                                                ("aggressive", 4, "with_replacement"),
                                                ("naive", 1, "epoch"),
                                                ("aggressive", 8, "epoch")])
@pytest.mark.parametrize("weighted", [False, True])
def test_emulated_sdca_equals_numpy(loss, variant, b, sampling, weighted):
    X, Y, s = small()
    s = s if weighted else None
    kw = dict(lam=1e-2, b=b, max_iter=25, variant=variant, tol=0.0, eval_every=10, seed=3,
              loss=loss, sampling=sampling)
    ref = sdca(make_backend("numpy", X, Y, s), **kw)
    emu = sdca(make_backend("emulated", X, Y, s), **kw)
    np.testing.assert_allclose(emu.extra["alpha"], ref.extra["alpha"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(emu.extra["gap"], ref.extra["gap"], rtol=1e-8, atol=1e-13)
    np.testing.assert_array_equal(emu.extra["n_rejected"], ref.extra["n_rejected"])
    np.testing.assert_allclose(emu.extra["beta"], ref.extra["beta"], rtol=1e-12)


@pytest.mark.parametrize("loss,bias", [("hinge", "none"), ("hinge", "optimal"),
                                       ("squared_hinge", "unregularized")])
@pytest.mark.parametrize("averaging,projection", [("tail", True), ("none", False)])
@pytest.mark.parametrize("k", [1, 4])
def test_emulated_pegasos_equals_numpy(loss, bias, averaging, projection, k):
    X, Y, s = small(1)
    kw = dict(lam=5e-2, k=k, max_iter=24, averaging=averaging, bias=bias, seed=3, loss=loss,
              projection=projection, eval_every=12, sampling="epoch")
    ref = pegasos(make_backend("numpy", X, Y, s), **kw)
    emu = pegasos(make_backend("emulated", X, Y, s), **kw)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(emu.b, ref.b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(emu.extra["objectives"], ref.extra["objectives"], rtol=1e-9)


@pytest.mark.parametrize("averaging", ["tail", "none"])
def test_emulated_pegasos_folds_small_scales_like_numpy(averaging):
    """1 - eta lam = 0.01 per step: every few iterations |a_c| falls below the threshold and
    the scalars kernel folds it into V (and A_c V into U) in its one block, as renormalize_m."""
    X, Y, s = small(1)
    kw = dict(lam=1e-2, k=4, max_iter=24, averaging=averaging, seed=3, schedule="constant",
              eta0=99.0, projection=False, eval_every=12, sampling="epoch")
    ref = pegasos(make_backend("numpy", X, Y, s), **kw)
    emu = pegasos(make_backend("emulated", X, Y, s), **kw)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(emu.extra["objectives"], ref.extra["objectives"], rtol=1e-9)


def test_emulated_binary_weighted_squared_fit_is_one_dimensional_like_numpy():
    X, Y, s = small(2)
    kw = dict(lam=1e-2, b=4, max_iter=20, variant="aggressive", tol=0.0, eval_every=10, seed=1,
              loss="squared_hinge")
    ref = sdca(make_backend("numpy", X, Y[:, 0], s), **kw)
    emu = sdca(make_backend("emulated", X, Y[:, 0], s), **kw)
    assert emu.w.shape == (15,) and isinstance(emu.extra["gap"], float)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-10, atol=1e-13)


def test_emulated_warm_start_resumes_the_dual():
    X, Y, s = small(3)
    kw = dict(lam=1e-2, b=4, variant="safe", tol=0.0, eval_every=10, seed=4)
    first = sdca(make_backend("numpy", X, Y, s), max_iter=20, **kw)
    ref = sdca(make_backend("numpy", X, Y, s), max_iter=10, alpha0=first.extra["alpha"], **kw)
    emu = sdca(make_backend("emulated", X, Y, s), max_iter=10, alpha0=first.extra["alpha"], **kw)
    np.testing.assert_allclose(emu.extra["alpha"], ref.extra["alpha"], rtol=1e-10, atol=1e-13)


def test_emulated_binary_warm_start_equals_numpy():
    X, Y, _ = small(4)
    y = Y[:, 0]
    kw = dict(lam=1e-2, b=4, variant="safe", tol=0.0, eval_every=10, seed=4)
    first = sdca(make_backend("numpy", X, y), max_iter=20, **kw)
    ref = sdca(make_backend("numpy", X, y), max_iter=10, alpha0=first.extra["alpha"], **kw)
    emu = sdca(make_backend("emulated", X, y), max_iter=10, alpha0=first.extra["alpha"], **kw)
    np.testing.assert_allclose(emu.extra["alpha"], ref.extra["alpha"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-10, atol=1e-13)


def test_device_backend_checks_the_shapes_of_y_and_weights():
    X, Y, s = small()
    with pytest.raises(ValueError, match=r"y must have shape \(40,\) or \(40, M\)"):
        make_backend("emulated", X, Y[:30])
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(40,\)"):
        make_backend("emulated", X, Y, s[:5])


@pytest.mark.parametrize("averaging", [False, True])
def test_emulated_renormalize_folds_only_the_small_scales_like_numpy(averaging):
    X, Y, s = small(5)
    rng = np.random.default_rng(0)
    W0 = rng.standard_normal((15, 3))
    bes = [make_backend(name, X, Y, s) for name in ("numpy", "emulated")]
    for be in bes:
        be.init_state_m(W0, 0.0, averaging=averaging)
        be.sm[0] = [1e-7, 0.5, 1e-9]                      # S_A: outputs 0 and 2 are below 1e-6
        be.sm[3] = [2.0, 3.0, 4.0]                        # S_ASUM
        if averaging:
            be.U[...] = 1.0
        be.renormalize_m(1e-6)
    ref, emu = bes
    np.testing.assert_array_equal(emu.sm, ref.sm)
    np.testing.assert_array_equal(emu.V, ref.V)
    assert list(ref.sm[0]) == [1.0, 0.5, 1.0] and ref.V[0, 1] == W0[0, 1]
    if averaging:
        np.testing.assert_array_equal(emu.U, ref.U)
    for be in bes:                                        # nothing below: nothing changes
        before = be.V.copy()
        be.renormalize_m(1e-12)
        np.testing.assert_array_equal(be.V, before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tsan_is_silent_on_the_multi_output_kernels(a9a, dtype):
    # the kernels of the general path once each, on 4-block grids, with repeated batch
    # rows (concurrent atomics on the same V[j, c]) and a fold of two of the three outputs
    from gpusvm import _kernels
    from tsan_runner import check_launches
    from gpusvm.backends._state import N_SLOTS, S_A, S_ASUM, S_BETA

    rng = np.random.default_rng(3)
    X = a9a.X[:96].astype(dtype)
    n, d, M = X.shape[0], X.shape[1], 3
    vt = _kernels.VALUE_TYPES[np.dtype(dtype).name]
    ip, ix, dx = X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data
    Y = np.where(rng.random((n, M)) < 0.5, -1.0, 1.0).astype(dtype)
    V = (0.1 * rng.normal(size=(d, M))).astype(dtype)
    U = rng.normal(size=(d, M))
    sm = np.zeros((N_SLOTS, M))
    sm[S_A] = [1e-7, 0.5, 1e-8]
    sm[S_ASUM] = 2.0
    sm[S_BETA] = 1.5
    k = n
    rows = rng.integers(0, n, size=k).astype(np.int32)
    rows[:4] = rows[4]
    m = np.empty((k, M))
    coef = rng.normal(size=(k, M))
    delta = np.empty((k, M))
    alpha = rng.uniform(0, 1, size=(n, M))
    row_sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    sw = rng.uniform(0, 2, (n, M))                        # s_ic: a weight per row and output
    first = np.ones(k, dtype=np.int32)
    dn, ticket = np.zeros(M), np.zeros(1, dtype=np.uint32)
    name = {op: _kernels.vector_kernel(op, vt) for op in _kernels.MULTI_KERNELS}
    B, kk, MM = _kernels.BLOCK, np.int32(k), np.int32(M)
    from gpusvm.solvers._sampling import CounterSampler, feistel_shape
    half, mask = feistel_shape(n)
    drawn, drawn_first = np.zeros(k, np.int32), np.zeros(k, np.int32)
    dcounter, dticket = np.array([1], np.int64), np.zeros(1, np.uint32)
    launches = [
        (name["gpusvm_margins_multi"], 4, B, (ip, ix, dx, Y, V, rows, kk, MM, sm, m, np.int32(-1),
                                               np.uint64(0), np.int32(n), np.int32(1),
                                               np.uint32(1), dcounter, dticket, first)),
        # batch 1 of the epochs stream drawn by the gather: M threads per row, one records it
        (name["gpusvm_margins_multi"], 4, B, (ip, ix, dx, Y, V, drawn, kk, MM, sm, np.empty((k, M)),
                                               np.int32(2), np.uint64(5), np.int32(n),
                                               np.int32(half), np.uint32(mask), dcounter, dticket,
                                               drawn_first)),
        (name["gpusvm_sdca_deltas_multi"], 4, B, (rows, kk, MM, m, alpha, row_sq, sw,
                                                   np.int32(1), first, np.int32(1), sm,
                                                   np.float64(0.5), np.int32(1), delta)),
        (name["gpusvm_accumulate_multi"], 4, B, (ip, ix, dx, rows, kk, MM, coef, V, U, sm[S_ASUM],
                                                  np.int32(1), np.int32(0), dn)),
        (name["gpusvm_renormalize_multi"], 4, B, (V, U, np.int32(1), np.int64(d), MM, sm, ticket,
                                                   np.float64(1e-6))),
    ]
    # the kernels of a recorded general-path segment: the counter at t = 1 (pegasos schedule: a
    # zero shrink, so the reset runs), the per-output atomics of the coefficient kernels from
    # 4 blocks, the weighted radix selection (one block per output), the last-block finish
    counter = np.ones(1, dtype=np.int64)
    sched = (np.int32(0), np.float64(0.1), np.float64(0.0), np.float64(0.7))
    acc, dn2, ticket2 = np.zeros(4 * M), np.zeros(M), np.zeros(1, dtype=np.uint32)
    coef2, undo, bp = np.empty((k, M)), np.empty((k, M)), np.empty((M, k))
    m2 = rng.normal(1.0, 1.0, size=(k, M))
    delta2 = rng.normal(0.0, 0.1, size=(k, M))
    delta2[:4] = 0.0                                    # the repeated rows: first-occurrence mask
    one, zero = np.int32(1), np.int32(0)
    lam, nn, eps = np.float64(0.1), np.float64(n), np.float64(np.finfo(dtype).eps)
    launches += [
        (name["gpusvm_reset_scale_multi_next"], 4, B, (V, U, one, np.int64(d), MM, sm, counter)
         + sched),
        (name["gpusvm_optimal_bias_multi"], M, B, (Y, sw, one, rows, kk, MM, sm, m2, bp)),
        (name["gpusvm_pegasos_coef_multi"], 4, B, (rows, kk, MM, Y, sw, one, m2, sm, counter,
                                                    np.float64(k)) + sched
         + (one, coef2, acc, dn)),
        # the scalars with the fold of every output (threshold 10 > |a'_c|) in their one block
        (name["gpusvm_pegasos_scalars_multi"], 1, B, (counter, MM, np.float64(k)) + sched
         + (one, np.float64(5.0), one, np.int64(1), dn, sm, acc, V, U, one, np.int64(d),
            np.float64(10.0))),
        (name["gpusvm_sdca_coef_multi"], 4, B, (rows, kk, MM, Y, delta2, alpha, row_sq, sw, one,
                                                 sm, lam, nn, one, zero, coef2, acc, dn, dn2)),
        (name["gpusvm_sdca_rho_multi"], 1, B, (MM, dn2, np.float64(3.0), np.float64(0.5), sm,
                                                acc)),
        (name["gpusvm_sdca_coef_multi"], 4, B, (rows, kk, MM, Y, delta2, alpha, row_sq, sw, one,
                                                 sm, lam, nn, one, one, coef2, acc, dn, dn2)),
        (name["gpusvm_sdca_check_multi"], 4, B, (kk, MM, coef2, acc, dn, sm, lam, nn, eps, undo)),
        (name["gpusvm_sdca_finish_multi"], 4, B, (rows, kk, MM, delta2, dn, dn2, lam, nn, eps, one,
                                                   alpha, sm, acc, ticket2)),
    ]
    rep = check_launches(code=_kernels.module_source(), launches=launches,
                         name_expressions=sorted(name.values()),
                         options=_kernels.compile_options())
    assert rep.ok, rep.output
    ref_rows, ref_first = CounterSampler(n, k, "epoch", 5).batch(1)
    np.testing.assert_array_equal(rep.arrays[1][5], ref_rows)
    assert rep.arrays[1][15][0] == 2 and rep.arrays[1][16][0] == 0    # counter advanced, ticket
    assert rep.arrays[1][17].all() == (ref_first is None or ref_first.all())
