"""The device backend's general path (M outputs, weights, the squared hinge) on the kernel emulator.

The emulated backend runs the segment kernels (kernels/outputs.cuh's pair form for M outputs,
the tiles for one) on the CPU; every run is checked against the NumPy
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
    gpusvm_pegasos_step's last block folds it into V (and A_c V into U), as renormalize_m."""
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
