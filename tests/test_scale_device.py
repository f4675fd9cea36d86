"""The device backend at scale, on the CPU kernel emulator: generated Zipf-hot data (a few
columns in nearly every row: the scatter's worst case) with 64-bit index arrays, against the
NumPy backend through the solvers; and the refusal of data that would not fit the device,
made before anything is uploaded."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpusvm import SDCASVC, PegasosSVC
from gpusvm.backends import cuda_available, make_backend
from gpusvm.backends.device import DeviceBackend, estimate_device_bytes
from gpusvm.backends.device.runtime import FREE_MEMORY_ENV, EmulatedRuntime
from gpusvm.datasets import make_sparse_classification
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca

BACKENDS = [
    "emulated",
    pytest.param("cupy", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not cuda_available(), reason="no CUDA device")]),
]
T = 60


@pytest.fixture(scope="module")
def hot64():
    """A generated set with int64 ``indices`` and ``indptr`` and very hot head columns
    (``s = 1.3``: column 0 in nearly every row), float64, labels in {-1, +1}."""
    X, y = make_sparse_classification(3_000, 2_000, nnz_per_row=30, zipf_exponent=1.3,
                                      flip_y=0.05, random_state=8, dtype=np.float64,
                                      index_dtype=np.int64)
    assert X.indptr.dtype == np.int64 and X.indices.dtype == np.int64
    assert np.bincount(X.indices)[0] > 0.95 * X.shape[0]
    return X, np.where(y > 0, 1.0, -1.0)


def rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 256])
def test_pegasos_on_hot_int64_data_matches_numpy(hot64, backend, k):
    X, y = hot64
    opts = dict(lam=1e-3, k=k, max_iter=T, seed=5, eval_every=T // 2)
    ref = pegasos(make_backend("numpy", X, y), **opts)
    res = pegasos(make_backend(backend, X, y), **opts)
    assert rel(res.w, ref.w) <= 1e-9
    np.testing.assert_allclose(np.array(res.history)[:, 1], np.array(ref.history)[:, 1], rtol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_sdca_on_hot_int64_data_matches_numpy(hot64, backend, loss):
    X, y = hot64
    opts = dict(lam=1e-3, b=512, variant="safe", sigma2=1.0, max_iter=T, eval_every=T // 2,
                seed=5, tol=0.0, loss=loss)
    ref = sdca(make_backend("numpy", X, y), **opts)
    res = sdca(make_backend(backend, X, y), **opts)
    assert rel(res.w, ref.w) <= 1e-9
    assert rel(res.extra["alpha"], ref.extra["alpha"]) <= 1e-9


def test_estimator_on_int64_input_matches_int32(hot64):
    """The estimator's device fit of the int64 set equals the NumPy backend's of the same set
    with int32 indices (the estimator converts offsets below 2**31 exactly)."""
    X, y = hot64
    X32 = X.copy()
    X32.indices, X32.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)
    kw = dict(C=1.0, batch_size=128, max_iter=40, random_state=0, dtype="float64", tol=0.0)
    with pytest.warns(Warning):
        ref = SDCASVC(backend="numpy", **kw).fit(X32, y)
    with pytest.warns(Warning):
        clf = SDCASVC(backend="emulated", **kw).fit(X, y)
    assert rel(clf.coef_, ref.coef_) <= 1e-9
    assert clf.intercept_[0] == pytest.approx(ref.intercept_[0], rel=1e-9)


# ------------------------------------------------------------------ memory said before it runs out
def _refusal(need_mib, free_mib, float32_hint):
    smaller = "dtype='float32' (half the bytes of the values and state), " if float32_hint else ""
    return (rf"the emulated backend needs about {need_mib} MiB of device memory \(CSR \d+ MiB, "
            rf"vectors \d+ MiB, buffers \d+ MiB\) but only {free_mib} MiB are free; use "
            + re.escape(f"{smaller}the CPU backend (backend='numba' or 'numpy'), or a Dask "
                        "cluster of GPUs (gpusvm.dask, the rows split across devices); or free "
                        "device memory held by other processes or CuPy's pool "
                        "(cupy.get_default_memory_pool().free_all_blocks())") + "$")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_estimator_refuses_data_the_device_cannot_hold(monkeypatch, dtype):
    X, y = make_sparse_classification(2_000, 1_000, nnz_per_row=20, random_state=1, dtype=dtype)
    n, d = X.shape
    # the estimator appends the bias column: one more column, one more nonzero a row
    need = estimate_device_bytes(n, d + 1, X.nnz + n, np.dtype(dtype).itemsize)["total"]
    free = need - 2**20
    monkeypatch.setenv(FREE_MEMORY_ENV, str(free))
    calls = []
    monkeypatch.setattr(EmulatedRuntime, "upload", lambda *a: calls.append(a))
    for est in (SDCASVC(backend="emulated", dtype=np.dtype(dtype).name),
                PegasosSVC(backend="emulated", dtype=np.dtype(dtype).name)):
        with pytest.raises(MemoryError, match=_refusal(round(need / 2**20), round(free / 2**20),
                                                       dtype == np.float64)):
            est.fit(X, y)
    assert calls == []                                   # refused before any upload
    monkeypatch.undo()
    monkeypatch.setenv(FREE_MEMORY_ENV, str(need))       # fits exactly
    SDCASVC(backend="emulated", dtype=np.dtype(dtype).name, max_iter=2, tol=1.0).fit(X, y)


def test_backend_refusal_is_one_line():
    X, y = make_sparse_classification(500, 300, nnz_per_row=5, random_state=0, dtype=np.float64)
    need = estimate_device_bytes(500, 300, X.nnz, 8)["total"]
    with pytest.raises(MemoryError, match=_refusal(round(need / 2**20), round((need - 1) / 2**20),
                                                   True)) as info:
        DeviceBackend(X, np.where(y > 0, 1.0, -1.0), "emulated", free_memory=need - 1)
    assert "\n" not in str(info.value)


def test_emulated_runtime_pretends_free_memory():
    assert EmulatedRuntime(free_memory=123).free_bytes() == 123


def test_device_input_is_refused_before_its_copies():
    """CuPy input: the prepared copies and the fit's buffers against the free bytes, the same
    one-line refusal (checked here by its function: the call site needs CuPy)."""
    from gpusvm._arrays import PREPARE_COPIES, check_device_room
    n, d, nnz = 10 ** 6, 10 ** 5, 5 * 10 ** 7
    base = estimate_device_bytes(n, d + 1, nnz + n, 4, csr_resident=True)["total"]
    need = base + PREPARE_COPIES * ((nnz + n) * 8 + (n + 1) * 8)
    check_device_room(n, d, nnz, 4, need, True, "emulated")          # fits exactly
    check_device_room(n, d, nnz, 4, None, True, "emulated")          # no figure, no check
    with pytest.raises(MemoryError, match=_refusal(round(need / 2**20), round((need - 1) / 2**20),
                                                   False)):
        check_device_room(n, d, nnz, 4, need - 1, True, "emulated")
