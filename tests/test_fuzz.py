"""Bounded fuzzing of the two readers of untrusted files: svmlight data and model files.

Whatever the input, a reader must end in a result that is consistent, or in a
``ValueError`` whose message is one line; never in a crash, another exception,
or an allocation out of proportion to the input. The examples are derived from
a fixed seed (``derandomize=True``), so every run checks the same inputs; the
whole module runs in well under a minute.
"""

from __future__ import annotations

import io
import json
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_circles

from gpusvm import KernelPegasosSVC, PegasosSVC
from gpusvm.datasets import load_svmlight
from gpusvm.model_io import METADATA_MEMBER, load_model, save_model

FUZZ = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

#: no input of a few kilobytes may make a reader allocate more than this
PEAK_LIMIT = 64 << 20


def _bounded(fn):
    """Run ``fn``; return its result or its ValueError, and check the allocation peak."""
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                result = fn()
            except ValueError as exc:
                result = exc
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_LIMIT, f"{peak} bytes allocated"
    if isinstance(result, ValueError):
        message = str(result)
        assert message and "\n" not in message, repr(message)
    return result


# ------------------------------------------------------------------ svmlight
_number = st.one_of(st.integers(-3, 12).map(str), st.sampled_from(
    ["0", "1", "-1", "+1", "2147483647", "2147483648", "99999999999", "1e5", "nan", "inf",
     "-0", "1.5", "", "x", "0x10", "1e309"]))
_term = st.one_of(
    st.tuples(_number, _number).map(lambda t: f"{t[0]}:{t[1]}"),
    st.sampled_from(["qid:1", "qid:x", ":", "1:", ":1", "1:2:3", "#", "# c"]),
    _number)
_line = st.tuples(st.sampled_from(["+1", "-1", "1", "0", "2.5", "abc", "", "nan", "#"]),
                  st.lists(_term, max_size=6)).map(lambda t: " ".join([t[0], *t[1]]))
_text = st.lists(_line, min_size=0, max_size=12).map("\n".join)


def _check_svmlight(path):
    result = _bounded(lambda: load_svmlight(path, return_zero_based=True))
    if isinstance(result, ValueError):
        return
    X, y, zero_based = result
    assert isinstance(zero_based, bool)
    assert sp.isspmatrix_csr(X) and X.shape[0] == y.shape[0] >= 1
    X.check_format(full_check=True)                  # indices in range, indptr monotone
    assert X.has_canonical_format
    assert np.all(np.isfinite(y)) or np.isnan(y).any() or np.isinf(y).any()


@FUZZ
@given(text=_text)
def test_svmlight_reader_on_generated_lines(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("svm") / "data.svm"
    path.write_text(text)
    _check_svmlight(path)


@FUZZ
@given(raw=st.binary(max_size=300))
def test_svmlight_reader_on_arbitrary_bytes(tmp_path_factory, raw):
    directory = tmp_path_factory.mktemp("svm")
    for name in ("data.svm", "data.svm.gz"):
        path = directory / name
        path.write_bytes(raw)
        _check_svmlight(path)


# ------------------------------------------------------------------ model files
@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """A linear and a sparse kernel model, as (members, metadata) to mutate."""
    out = {}
    X, y = make_circles(n_samples=60, factor=0.5, noise=0.05, random_state=0)
    directory = tmp_path_factory.mktemp("models")
    for name, est, data in (
            ("linear", PegasosSVC(batch_size=4, backend="numpy", random_state=0), X),
            ("kernel", KernelPegasosSVC(lam=1e-2, batch_size=4, random_state=0),
             sp.csr_matrix(X))):
        path = directory / f"{name}.npz"
        save_model(est.fit(data, y), path)
        with np.load(path) as f:
            members = {k: f[k] for k in f.files}
        meta = json.loads(members.pop(METADATA_MEMBER).tobytes())
        out[name] = (members, meta, path.read_bytes())
    return out, X


def _write_model(path, members, meta):
    blob = json.dumps(meta).encode() if not isinstance(meta, bytes) else meta
    with open(path, "wb") as fh:
        np.savez(fh, **members, **{METADATA_MEMBER: np.frombuffer(blob, dtype=np.uint8)})


def _check_model(path, X):
    result = _bounded(lambda: load_model(path))
    if isinstance(result, ValueError):
        return
    sv = getattr(result, "support_vectors_", None)
    if sp.issparse(sv):                 # scipy's own full check: indices in range, indptr sorted
        sv.check_format(full_check=True)
    # a model that loads predicts without crashing, or refuses X with one line
    prediction = _bounded(lambda: result.predict(X))
    if not isinstance(prediction, ValueError):
        assert prediction.shape == (X.shape[0],)
        assert set(np.unique(prediction)) <= set(result.classes_.tolist())


_small_ints = st.integers(-5, 70)
_int_array = st.lists(_small_ints, max_size=12).map(lambda v: np.array(v, dtype=np.int64))
_float_array = st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64),
                        max_size=12).map(lambda v: np.array(v, dtype=np.float64))
_shape = st.lists(st.integers(-2, 1 << 40), min_size=0, max_size=3).map(
    lambda v: np.array(v, dtype=np.int64))


@FUZZ
@given(part=st.sampled_from(["data", "indices", "indptr", "shape"]), data=st.data())
def test_sparse_support_vectors(tmp_path_factory, model_files, part, data):
    models, X = model_files
    members, meta, _ = models["kernel"]
    members = dict(members)
    key = f"support_vectors__{part}"
    if part in ("indices", "indptr") and data.draw(st.booleans()):
        # same length, a few values changed: only a check of the values can tell
        value = members[key].copy()
        for _ in range(data.draw(st.integers(1, 3))):
            value[data.draw(st.integers(0, value.size - 1))] = data.draw(
                st.sampled_from([-1, -(1 << 31), 2, 3, 1 << 30, value.max() + 1]))
        members[key] = value
    else:
        members[key] = data.draw({"data": _float_array, "indices": _int_array,
                                  "indptr": _int_array, "shape": _shape}[part])
    path = tmp_path_factory.mktemp("m") / "k.npz"
    _write_model(path, members, meta)
    _check_model(path, X)


_json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10, 1 << 62), st.floats(),
              st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)


@FUZZ
@given(which=st.sampled_from(["linear", "kernel"]), data=st.data())
def test_metadata_fields(tmp_path_factory, model_files, which, data):
    models, X = model_files
    members, meta, _ = models[which]
    meta = json.loads(json.dumps(meta))
    section = data.draw(st.sampled_from(["params", "arrays", "sparse", "json_arrays",
                                         "attributes", "estimator", "format_version"]))
    if isinstance(meta.get(section), dict) and meta[section] and data.draw(st.booleans()):
        name = data.draw(st.sampled_from(sorted(meta[section])))
        meta[section][name] = data.draw(_json_value)
    else:
        meta[section] = data.draw(_json_value)
    path = tmp_path_factory.mktemp("m") / "m.npz"
    _write_model(path, members, meta)
    _check_model(path, X)


@FUZZ
@given(which=st.sampled_from(["linear", "kernel"]), data=st.data())
def test_member_arrays(tmp_path_factory, model_files, which, data):
    models, X = model_files
    members, meta, _ = models[which]
    members = dict(members)
    name = data.draw(st.sampled_from(sorted(members)))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), max_size=3)))
    dtype = data.draw(st.sampled_from([np.float64, np.float32, np.int64, np.int8, np.bool_,
                                       np.complex128]))
    members[name] = np.asarray(
        np.random.default_rng(data.draw(st.integers(0, 9))).normal(size=shape) * 40).astype(dtype)
    path = tmp_path_factory.mktemp("m") / "m.npz"
    _write_model(path, members, meta)
    _check_model(path, X)


@FUZZ
@given(which=st.sampled_from(["linear", "kernel"]), data=st.data())
def test_damaged_bytes(tmp_path_factory, model_files, which, data):
    models, X = model_files
    raw = bytearray(models[which][2])
    for _ in range(data.draw(st.integers(1, 8))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    path = tmp_path_factory.mktemp("m") / "m.npz"
    path.write_bytes(bytes(raw))
    _check_model(path, X)


@FUZZ
@given(shape=st.lists(st.integers(0, 1 << 40), min_size=1, max_size=3),
       dtype=st.sampled_from(["<f8", "<i4", "|u1"]))
def test_declared_npy_shapes(tmp_path_factory, model_files, shape, dtype):
    """An npy header may declare any shape; the reader allocates only what the file holds."""
    models, X = model_files
    members, meta, _ = models["linear"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, value in members.items():
            with z.open(name + ".npy", "w") as out:
                if name == "coef":
                    np.lib.format.write_array_header_1_0(
                        out, {"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
                    out.write(b"\0" * 64)
                else:
                    np.lib.format.write_array(out, value)
        with z.open(METADATA_MEMBER + ".npy", "w") as out:
            np.lib.format.write_array(out, np.frombuffer(json.dumps(meta).encode(), np.uint8))
    path = tmp_path_factory.mktemp("m") / "m.npz"
    path.write_bytes(buffer.getvalue())
    _check_model(path, X)
