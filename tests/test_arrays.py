"""Inputs on a GPU (CuPy arrays, cupyx.scipy.sparse matrices): gpusvm._arrays and the estimators.

Without CuPy the protocol is exercised with a shim (an object with
``__cuda_array_interface__`` and ``get()``, and one of a ``cupyx.scipy.sparse`` class): on
the CPU backends (numpy, numba, emulated) device input is copied to the host once and gives
exactly the host result.  The tests that need CuPy and a device are marked ``gpu``.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import PegasosSVC, SDCASVC, _arrays
from gpusvm.backends import cuda_available


class DeviceArrayShim:
    """What gpusvm._arrays reads of a CuPy ndarray: the CUDA array interface and get()."""

    def __init__(self, a):
        self._a = np.asarray(a)
        self.shape, self.ndim, self.dtype = self._a.shape, self._a.ndim, self._a.dtype

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}

    def get(self):
        return self._a.copy()


class DeviceSparseShim:
    """What gpusvm._arrays reads of a cupyx.scipy.sparse matrix: its class's module and get()."""

    def __init__(self, X):
        self._X = sp.csr_matrix(X)
        self.shape = self._X.shape

    def get(self):
        return self._X.copy()


DeviceSparseShim.__module__ = "cupyx.scipy.sparse._csr"


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = sp.random(200, 15, density=0.4, random_state=rng, format="csr")
    y = np.where(X @ rng.normal(size=15) > 0, 3, 7)
    return X, y


def test_detection_and_copy(data):
    X, y = data
    dense, sparse = DeviceArrayShim(X.toarray()), DeviceSparseShim(X)
    assert _arrays.is_device(dense) and _arrays.is_device(sparse)
    assert _arrays.is_device_sparse(sparse) and not _arrays.is_device_sparse(dense)
    assert not _arrays.is_device(X) and not _arrays.is_device(X.toarray())
    assert not _arrays.is_device([[1.0]])
    np.testing.assert_array_equal(_arrays.to_host(dense), X.toarray())
    assert sp.issparse(_arrays.to_host(sparse))
    assert (_arrays.to_host(sparse) != X).nnz == 0
    assert _arrays.to_host(X) is X


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("backend", ["numpy", "emulated"])
@pytest.mark.parametrize("Est, kw", [(PegasosSVC, dict(batch_size=8, max_iter=60)),
                                     (SDCASVC, dict(batch_size=8, max_iter=60, tol=1e-12))])
@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_device_input_on_a_cpu_backend_moves_to_the_host(data, backend, Est, kw, form):
    X, y = data
    Xd = DeviceArrayShim(X.toarray()) if form == "dense" else DeviceSparseShim(X)
    common = dict(lam=1e-2, backend=backend, random_state=0, dtype="float64", **kw)
    ref = Est(**common).fit(X, y)
    clf = Est(**common).fit(Xd, DeviceArrayShim(y))
    assert type(clf.coef_) is np.ndarray and type(clf.intercept_) is np.ndarray
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(clf.classes_, [3, 7])
    z = clf.decision_function(Xd)
    assert type(z) is np.ndarray
    np.testing.assert_allclose(z, ref.decision_function(X), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(Xd), ref.predict(X))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device")
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("form", ["dense", "sparse"])
@pytest.mark.parametrize("Est", [PegasosSVC, SDCASVC])
def test_cupy_input_stays_on_the_device(data, form, Est):
    import cupy
    import cupyx.scipy.sparse as csp
    X, y = data
    Xd = cupy.asarray(X.toarray()) if form == "dense" else csp.csr_matrix(X)
    kw = dict(lam=1e-2, batch_size=8, max_iter=60, random_state=0, dtype="float64")
    ref = Est(backend="numpy", **kw).fit(X, y)
    clf = Est(backend="cupy", **kw).fit(Xd, cupy.asarray(y))
    assert type(clf.coef_) is np.ndarray                     # the model stays NumPy
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-5, atol=1e-8)
    z = clf.decision_function(Xd)
    assert isinstance(z, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(z), ref.decision_function(X), rtol=1e-5, atol=1e-8)
    labels = clf.predict(Xd)
    assert isinstance(labels, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(labels), ref.predict(X))



class _FakeCupy(types.ModuleType):
    """What gpusvm._arrays calls of CuPy, recording the device current at each call."""

    def __init__(self):
        super().__init__("cupy")
        self.current, self.seen, self.float64 = None, [], np.float64
        fake = self

        class Device:
            def __init__(self, device_id):
                self.id = device_id

            def __enter__(self):
                self.previous, fake.current = fake.current, self.id
                return self

            def __exit__(self, *exc):
                fake.current = self.previous

        self.cuda = types.SimpleNamespace(
            Device=Device, runtime=types.SimpleNamespace(getDevice=lambda: fake.current or 0))
        self.copied = []

    def asarray(self, a):
        self.seen.append(self.current)
        return np.asarray(a)

    def copy(self, a):
        """A copy on the current device (CuPy copies across devices)."""
        self.copied.append((a.device.id, self.current or 0))
        out = np.array(a).view(type(a))
        out.on = self.current or 0
        return out


class _HostBackedDeviceArray(np.ndarray):
    """A NumPy array that gpusvm._arrays takes for a CuPy array (for the products' path)."""

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}

    def get(self):
        return np.asarray(self).copy()

    @property
    def device(self):
        return types.SimpleNamespace(id=getattr(self, "on", 0))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("Est", [PegasosSVC, SDCASVC])
@pytest.mark.parametrize("device", [None, 2])
def test_device_input_is_handled_on_the_estimators_device(monkeypatch, data, Est, device):
    """With ``backend="cupy"`` the checks and products run under ``cupy.cuda.Device(device)``
    (the current device when ``device=None``), observed through a stand-in for CuPy."""
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_arrays, "_backend_name", lambda estimator: "cupy")
    X, y = data

    class Validated(Exception):
        pass

    def on_device(estimator, X, y, reset):
        fake.seen.append(fake.current)
        raise Validated

    monkeypatch.setattr(_arrays, "_prepare_on_device", on_device)
    with pytest.raises(Validated):
        Est(lam=1e-2, backend="cupy", device=device).fit(DeviceArrayShim(X.toarray()), y)
    assert fake.seen == [device] and fake.current is None

    clf = Est(lam=1e-2, backend="numpy", batch_size=8, max_iter=20, random_state=0).fit(X, y)
    clf.set_params(device=device)
    Xd = X.toarray().view(_HostBackedDeviceArray)
    fake.seen.clear()
    np.testing.assert_allclose(np.asarray(clf.decision_function(Xd)),
                               clf.decision_function(X), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(clf.predict(Xd)), clf.predict(X))
    assert fake.seen and set(fake.seen) == {device} and fake.current is None


@pytest.mark.parametrize("on", [0, 1])
def test_input_on_another_gpu_is_copied_to_the_estimators_device(monkeypatch, data, on):
    """``device=2`` and data on GPU ``on``: one copy to device 2 before the products."""
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_arrays, "_backend_name", lambda estimator: "cupy")
    X, y = data
    clf = PegasosSVC(lam=1e-2, backend="numpy", batch_size=8, max_iter=20, random_state=0)
    clf.fit(X, y).set_params(device=2)
    Xd = X.toarray().view(_HostBackedDeviceArray)
    Xd.on = on
    np.testing.assert_allclose(np.asarray(clf.decision_function(Xd)), clf.decision_function(X),
                               rtol=1e-6)
    assert fake.copied == [(on, 2)]
    here = X.toarray().view(_HostBackedDeviceArray)
    here.on = 2                                   # already there: no copy
    fake.copied.clear()
    clf.decision_function(here)
    assert fake.copied == []


# ------------------------------------------------------------------ conversions of a fit's X
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (7, 1), (1, 9), (40, 13), (5, 3)])
def test_dense_to_csr_is_scipys_conversion(dtype, shape):
    """The same indptr, indices and data as ``csr_matrix(X, dtype=dtype)``: zero rows, all-zero
    and all-nonzero rows, -0.0 (a zero), a float64 value that is tiny in float32."""
    from gpusvm._arrays import dense_to_csr
    rng = np.random.default_rng(sum(shape))
    X = rng.normal(size=shape) * (rng.random(shape) < 0.4)
    X[0, 0] = -0.0
    if shape[0] > 2:
        X[1] = 0.0
        X[2] = rng.normal(size=shape[1]) + 5.0
    if X.size > 3:
        X.flat[3] = 1e-300
    ref = sp.csr_matrix(X, dtype=dtype)
    got = dense_to_csr(X, dtype)
    assert got.dtype == dtype and got.shape == ref.shape
    # marked canonical without a check: a fresh matrix on the same arrays checks it so
    assert got.has_canonical_format
    assert sp.csr_matrix((got.data, got.indices, got.indptr), shape=got.shape).has_canonical_format
    assert got.indices.dtype == np.int32 and got.indptr.dtype == np.int32
    np.testing.assert_array_equal(got.indptr, ref.indptr)
    np.testing.assert_array_equal(got.indices, ref.indices)
    np.testing.assert_array_equal(got.data, ref.data)


@pytest.mark.parametrize("value", [1.0, 0.25, 1e3])
def test_append_constant_column_is_scipys_stack(value):
    """``hstack([X, value * ones((n, 1))])``: rows empty, full, unsorted and with duplicates
    (the new entry after a row's others, as SciPy's stack puts it)."""
    from gpusvm._arrays import append_constant_column
    X = sp.random(30, 11, density=0.3, random_state=3, format="csr", dtype=np.float32)
    X = sp.csr_matrix(X)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    lo, hi = X.indptr[4], X.indptr[5]
    X.indices[lo:hi] = X.indices[lo:hi][::-1].copy()           # an unsorted row
    ref = sp.hstack([X, sp.csr_matrix(np.full((30, 1), value, dtype=np.float32))], format="csr")
    got = append_constant_column(X, value)
    assert got.dtype == np.float32 and got.shape == (30, 12)
    assert not got.has_canonical_format                        # the unsorted row stays so
    fresh = sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)
    fresh.sort_indices()
    assert append_constant_column(fresh, value).has_canonical_format
    assert got.indices.dtype == np.int32 and got.indptr.dtype == np.int32
    np.testing.assert_array_equal(got.indptr, ref.indptr)
    np.testing.assert_array_equal(got.indices, ref.indices)
    np.testing.assert_array_equal(got.data, ref.data)
