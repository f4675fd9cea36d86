"""int64 indices end to end on the device backend, run on the emulator through the test hook
``GPUSVM_DEVICE_INT32_LIMIT`` (the count from which the backend indexes with int64, 2**31 by
default): the kernels' int64 column instances, the int64 CSR of the products (certificates,
Newton) and the estimators give the int32 path's models."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import LinearSVC, _kernels
from gpusvm.backends import make_backend
from gpusvm.backends.device import backend as device_backend
from gpusvm.solvers.newton import newton
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca

LIMIT = device_backend.INT32_LIMIT_ENV


def sparse_set(n=240, d=50, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.15, format="csr", random_state=rng, dtype=np.float64)
    X.data = rng.normal(size=X.nnz)
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.1 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def int64_csr(X):
    """``X`` with int64 indices and row pointers (SciPy's constructor would narrow them)."""
    out = sp.csr_matrix(X, copy=True)
    out.indices = out.indices.astype(np.int64)
    out.indptr = out.indptr.astype(np.int64)
    return out


def fits(X, y, weights=None):
    """SDCA (aggressive, with its certificate), Pegasos and Newton on the emulated backend."""
    Y = y if weights is None else np.stack([y, -y], axis=1)
    out = {}
    be = make_backend("emulated", X, Y, sample_weight=weights)
    r = sdca(be, lam=1e-2, b=16, max_iter=60, seed=1, tol=0.0, eval_every=20,
             loss="squared_hinge" if weights is not None else "hinge", variant="aggressive")
    out["sdca"] = (r.w, r.extra["primal"], r.extra["dual"], r.extra["gap"])
    be = make_backend("emulated", X, Y, sample_weight=weights)
    r = pegasos(be, lam=1e-2, k=16, max_iter=60, seed=1, eval_every=20)
    out["pegasos"] = (r.w, r.extra["objective"])
    if weights is None:
        be = make_backend("emulated", X, y)
        r = newton(be, lam=1e-2, tol=1e-12)
        out["newton"] = (r.w,)
    return out, be


def test_name_expressions_of_the_int64_instances():
    assert _kernels.segment_kernel("gpusvm_margins", "float", "int64", M1=1) == \
        "gpusvm_margins<float,1,long long>"
    assert _kernels.segment_kernel("gpusvm_optimal_bias", "float", "int64", WT=1) == \
        "gpusvm_optimal_bias<float,1>"                      # reads no column index
    wide = _kernels.name_expressions("int64")
    assert all(e.endswith(",long long>") for e in wide)
    assert {e.split("<")[0] for e in wide} == set(_kernels.INDEXED_KERNELS)
    assert not set(wide) & set(_kernels.name_expressions())


@pytest.mark.parametrize("weights", [None, "two outputs"])
def test_the_int64_path_gives_the_int32_models(monkeypatch, weights):
    """SDCA (binary hinge: the balanced tiles; two weighted outputs, squared hinge: one thread per
    pair and the aggressive settle), Pegasos and Newton through the lowered threshold: the
    models, objectives and certificates of the int32 path."""
    X, y = sparse_set()
    s = None if weights is None else np.random.default_rng(2).uniform(0.5, 1.5, X.shape[0])
    narrow, be32 = fits(X, y, s)
    assert be32.index == "int32" and be32.X.indices.dtype == np.int32
    monkeypatch.setenv(LIMIT, "16")                 # d = 50 and nnz >= 16: int64 everywhere
    wide, be64 = fits(X, y, s)
    assert be64.index == "int64" and be64._indices.dtype == np.int64
    assert be64.X.indices.dtype == np.int64 and be64.X.indptr.dtype == np.int64
    assert set(wide) == set(narrow)
    for name in narrow:
        for a, b in zip(wide[name], narrow[name]):
            np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float),
                                       rtol=1e-10, atol=1e-12, err_msg=name)


def test_kernels_of_the_int64_path_are_the_long_long_instances(monkeypatch):
    monkeypatch.setenv(LIMIT, "16")
    X, y = sparse_set()
    be = make_backend("emulated", X, y)
    sdca(be, lam=1e-2, b=16, max_iter=20, seed=1, tol=0.0, eval_every=10)
    used = [name for name in be._functions if name.split("<")[0] in _kernels.INDEXED_KERNELS]
    assert used and all(name.endswith(",long long>") for name in used)


def test_int64_products_only_from_many_nonzeros(monkeypatch):
    """nnz at the threshold, d below it: int32 column indices in the kernels, an int64 CSR for
    the products (its row pointers pass 2**31)."""
    X, y = sparse_set()
    monkeypatch.setenv(LIMIT, str(X.nnz))
    be = make_backend("emulated", X, y)
    assert be.index == "int32" and be._indices.dtype == np.int32
    assert be.X.indptr.dtype == np.int64 and be.X.indices.dtype == np.int64


def test_linear_svc_on_int64_indexed_csr_equals_the_cpu_model(monkeypatch):
    X, y = sparse_set(n=400)
    X64 = int64_csr(X)
    assert X64.indices.dtype == np.int64
    kw = dict(C=0.5, random_state=0, tol=1e-8, max_iter=400)
    cpu = LinearSVC(backend="numpy", **kw).fit(X, y)
    emu = LinearSVC(backend="emulated", **kw).fit(X64, y)
    monkeypatch.setenv(LIMIT, "16")
    wide = LinearSVC(backend="emulated", **kw).fit(X64, y)
    assert cpu.solver_ == emu.solver_ == wide.solver_
    scale = np.abs(cpu.coef_).max()
    for est in (emu, wide):
        assert np.abs(est.coef_ - cpu.coef_).max() <= 1e-6 * scale
        assert abs(est.intercept_[0] - cpu.intercept_[0]) <= 1e-6 * scale
        assert (est.predict(X64) == cpu.predict(X)).all()


def test_only_the_rows_keep_a_32_bit_bound(monkeypatch):
    X, y = sparse_set()
    monkeypatch.setattr(device_backend, "MAX_ROWS", 100)
    with pytest.raises(ValueError, match=r"^X has 240 rows; the batch samplers draw row ids as "
                                         r"int32, so n must be at most 100: split the rows"):
        make_backend("emulated", X, y)


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_threshold_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv(LIMIT, value)
    X, y = sparse_set()
    with pytest.raises(ValueError, match=rf"^{LIMIT}='{value}': set a positive integer"):
        make_backend("emulated", X, y)


def test_estimators_pass_data_past_the_int32_bound_to_the_device_backends(monkeypatch):
    """With the estimators' 32-bit bound lowered below the data's nonzeros: the device backend
    fits (it indexes with int64 there) and gives the CPU model of the data; a CPU backend
    refuses, naming the GPU."""
    from gpusvm.estimators import _base
    X, y = sparse_set(n=400)
    kw = dict(C=0.5, random_state=0, tol=1e-8, max_iter=400)
    cpu = LinearSVC(backend="numpy", **kw).fit(X, y)
    monkeypatch.setattr(_base, "INT32_MAX", X.nnz // 2)
    monkeypatch.setenv(LIMIT, str(X.nnz // 2))
    emu = LinearSVC(backend="emulated", **kw).fit(int64_csr(X), y)
    scale = np.abs(cpu.coef_).max()
    assert np.abs(emu.coef_ - cpu.coef_).max() <= 1e-6 * scale
    with pytest.raises(ValueError, match=r"gpusvm's CPU backends index them with 32-bit "
                                         r"integers, .* or fit on a GPU \(backend='cupy' indexes "
                                         r"with int64\)$"):
        LinearSVC(backend="numpy", **kw).fit(X, y)
