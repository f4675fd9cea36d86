"""Hostile input to the svmlight reader and the binary store (third round).

Each test reproduces one defect: a store read as float32 that overflowed to ``inf``
silently, a header's ``finite`` trusted, raw Python errors from damaged header fields, the
line blamed after a ``qid`` term, a corrupt store that crashed SciPy, checks the binary route
skipped, and ``gpusvm convert`` replacing its input.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusvm.cli import main
from gpusvm.datasets import BINARY_MAGIC, load_binary, load_svmlight, save_binary

ADVICE = "remove or impute the missing values first (pass finite=False to load them)"
REWRITE = "write it again with `gpusvm convert` (or gpusvm.datasets.save_binary)"


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def exactly(message):
    return f"^{re.escape(message)}$"


def _store(tmp_path, dtype=np.float64, name="set.gsvm"):
    X = sp.csr_matrix(np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0], [0.0, 0.0, 4.0]], dtype))
    return save_binary(tmp_path / name, X, np.array([1.0, -1.0, 1.0])), X


def _rewrite_header(path, change):
    """``change(header)`` applied in place (the header may grow into the zeros before the
    first array)."""
    raw = open(path, "rb").read()
    start = len(BINARY_MAGIC) + 4
    length = int.from_bytes(raw[len(BINARY_MAGIC):start], "little")
    header = json.loads(raw[start:start + length])
    change(header)
    text = json.dumps(header, sort_keys=True).encode()
    first = min(spec["offset"] for spec in json.loads(raw[start:start + length])["arrays"].values())
    assert start + len(text) <= first                  # the header grows into its padding
    open(path, "wb").write(raw[:len(BINARY_MAGIC)] + len(text).to_bytes(4, "little") + text
                           + b"\0" * (first - start - len(text)) + raw[first:])


def _poke(path, name, position, value):
    """Write ``value`` into element ``position`` of the store's array ``name``."""
    raw = bytearray(open(path, "rb").read())
    start = len(BINARY_MAGIC) + 4
    header = json.loads(raw[start:start + int.from_bytes(raw[len(BINARY_MAGIC):start], "little")])
    spec = header["arrays"][name]
    dtype = np.dtype(spec["dtype"])
    at = spec["offset"] + position * dtype.itemsize
    raw[at:at + dtype.itemsize] = np.array([value], dtype).tobytes()
    open(path, "wb").write(bytes(raw))


# ------------------------------------------------------------------ float32 overflow
def test_float64_store_above_float32_range_is_refused_as_float32(tmp_path):
    path, X = _store(tmp_path)
    _poke(path, "data", 2, 5e38)                       # row 1, feature index 3 (one-based)
    with pytest.raises(ValueError, match=exactly(
            f"{path}: the value 5e+38 of row 1 (counting from 0), feature index 3 overflows "
            "float32; scale the data, or read it with dtype=numpy.float64")):
        load_svmlight(path, dtype=np.float32)
    assert load_svmlight(path, dtype=np.float64)[0].data[2] == 5e38
    assert np.isinf(load_svmlight(path, dtype=np.float32, finite=False)[0].data[2])
    text = tmp_path / "big.svm"                      # the text route refuses the same value
    text.write_text("1 3:5e38\n")
    with pytest.raises(ValueError, match="overflows float32"):
        load_svmlight(text, dtype=np.float32)


# ------------------------------------------------------------------ "finite": true trusted
@pytest.mark.parametrize("name, position, message", [
    ("data", 3, "the value nan of row 2 (counting from 0), feature index 3 is not finite"),
    ("y", 1, "the label of row 1 (counting from 0), nan, is not finite")])
def test_nan_written_into_a_finite_store_is_found(tmp_path, name, position, message):
    path, _ = _store(tmp_path)
    _poke(path, name, position, np.nan)                 # the header still says finite: true
    with pytest.raises(ValueError, match=exactly(f"{path}: {message}; {ADVICE}")):
        load_svmlight(path)
    X, y = load_svmlight(path, finite=False)
    assert np.isnan(X.data if name == "data" else y).sum() == 1


# ------------------------------------------------------------------ damaged header fields
def _set(*keys, value):
    def change(header):
        for key in keys[:-1]:
            header = header[key]
        header[keys[-1]] = value
    return change


def _drop(*keys):
    def change(header):
        for key in keys[:-1]:
            header = header[key]
        del header[keys[-1]]
    return change


INT = "not an integer from 0 to 2**62"
DAMAGE = [
    (_drop("arrays", "data", "offset"), "the header has no arrays.data.offset field"),
    (_drop("nnz"), "the header has no nnz field"),
    (_set("arrays", "indices", "offset", value=None),
     f"the header's arrays.indices.offset field is None, {INT}"),
    (_set("arrays", "y", "count", value="3"), f"the header's arrays.y.count field is '3', {INT}"),
    (_set("arrays", "y", "count", value=3.0), f"the header's arrays.y.count field is 3.0, {INT}"),
    (_set("shape", value=[1e300, 3]), f"the header's shape[0] field is 1e+300, {INT}"),
    (_set("shape", value=[3, 2**70]),
     f"the header's shape[1] field is 1180591620717411303424, {INT}"),
    (_set("shape", value=[3, -1]), f"the header's shape[1] field is -1, {INT}"),
    (_set("shape", value=3), "the header's shape field is 3, not a list of two integers"),
    (_set("nnz", value=True), f"the header's nnz field is True, {INT}"),
    (_set("size", value=[]), f"the header's size field is [], {INT}"),
    (_set("zero_based", value="no"), "the header's zero_based field is 'no', not true or false"),
    (_set("arrays", "data", "dtype", value="<f2"),
     "the header's arrays.data.dtype field is '<f2', not one of <f4, <f8"),
    (_set("arrays", "indptr", "dtype", value=7),
     "the header's arrays.indptr.dtype field is 7, not one of <i4, <i8"),
    (_set("arrays", "indices", value=[]), "the header has no arrays.indices.dtype field"),
    (_set("arrays", value=None), "the header has no arrays.data.dtype field"),
]


@pytest.mark.parametrize("change, message", DAMAGE)
def test_damaged_header_field_is_named(tmp_path, capsys, change, message):
    path, _ = _store(tmp_path)
    _rewrite_header(path, change)
    with pytest.raises(ValueError, match=exactly(f"{path}: {message}; {REWRITE}")):
        load_binary(path)
    status, out, err = run(capsys, "fit", path, "--backend", "numpy", "--out", tmp_path / "m.npz")
    assert status == 2 and out == ""
    assert err == f"gpusvm fit: error: {path}: {message}; {REWRITE}\n"


@pytest.mark.parametrize("header", [b"[" * 100_000, b"[1, 2]", b'"text"', b"null"])
def test_header_that_is_no_object_is_damaged(tmp_path, header):
    path, _ = _store(tmp_path)
    raw = open(path, "rb").read()
    start = len(BINARY_MAGIC) + 4
    length = int.from_bytes(raw[len(BINARY_MAGIC):start], "little")
    open(path, "wb").write(raw[:len(BINARY_MAGIC)] + len(header).to_bytes(4, "little") + header
                           + raw[start + length:])
    with pytest.raises(ValueError, match=exactly(f"{path}: the header is damaged; {REWRITE}")):
        load_binary(path)


# ------------------------------------------------------------------ the line after a qid
def test_error_after_qid_prefixed_terms_names_the_bad_line(tmp_path):
    """scikit-learn takes a first term starting with ``qid`` (``qidx:1`` too) as the query
    id; the locator took only ``qid:`` and blamed line 1."""
    path = tmp_path / "qid.svm"
    path.write_bytes(b"1 qidx:1 1:1\n-1 qid:x 2:1\n1 qidy:3 3:1\n1 2:1 1:2\n")
    with pytest.raises(ValueError, match=exactly(
            f"{path}, line 4: feature indices must be sorted and unique, but 1 follows 2")):
        load_svmlight(path)
    path.write_bytes(b"1 qidx:nan 1:1\n-1 2:nan\n")     # a query id's value is never read
    with pytest.raises(ValueError, match=exactly(
            f"{path}, line 2: feature value 'nan' in '2:nan' is not finite; {ADVICE}")):
        load_svmlight(path)
    path.write_bytes(b"1 qid:1 1:1\n1 qid 1:1\n")
    with pytest.raises(ValueError, match=exactly(
            f"{path}, line 2: term 'qid' is not of the form qid:value")):
        load_svmlight(path)


# ------------------------------------------------------------------ corrupt CSR arrays
def test_decreasing_indptr_is_refused_even_unchecked(tmp_path):
    """``check=False`` handed SciPy a matrix whose ``toarray()`` crashed the process."""
    path, _ = _store(tmp_path)
    _poke(path, "indptr", 1, 4)                        # indptr 0, 4, 3, 5
    for check in (True, False):
        with pytest.raises(ValueError, match=exactly(
                f"{path}: its index arrays are not a valid CSR matrix; {REWRITE}")):
            load_binary(path, check=check)


@pytest.mark.parametrize("position, value", [(0, 7), (0, -1), (2, 0), (1, 2)])
def test_index_out_of_range_or_unsorted_is_refused(tmp_path, position, value):
    path, _ = _store(tmp_path)                         # indices 1 | 0 2 | 2
    _poke(path, "indices", position, value)
    with pytest.raises(ValueError, match=exactly(
            f"{path}: its index arrays are not a valid CSR matrix; {REWRITE}")):
        load_binary(path)
    X, _ = load_binary(path, check=False)             # the caller's risk, as documented
    assert X.indices[position] == value


def test_index_check_agrees_with_scipy_on_random_matrices(tmp_path):
    rng = np.random.default_rng(0)
    from gpusvm._binary import _indices_valid
    for trial in range(200):
        X = sp.random(rng.integers(1, 30), 20, density=rng.random(), format="csr",
                      random_state=trial)
        X.sort_indices()
        if X.nnz and trial % 2:
            X.indices[rng.integers(X.nnz)] = rng.integers(-2, 23)
        expect = bool(np.all((X.indices >= 0) & (X.indices < 20))) and all(
            np.all(np.diff(X.indices[a:b]) > 0) for a, b in zip(X.indptr[:-1], X.indptr[1:]))
        for block in (1, 3, 1 << 24):
            assert _indices_valid(X.indices, X.indptr, 20, block) == expect


# ------------------------------------------------------------------ the text route's checks
def test_binary_route_refuses_a_store_without_rows(tmp_path):
    path = save_binary(tmp_path / "empty.gsvm", sp.csr_matrix((0, 4), dtype=np.float32),
                       np.zeros(0))
    with pytest.raises(ValueError, match=exactly(
            f"{path}: no examples found (the binary data file holds no rows)")):
        load_svmlight(path)
    assert load_binary(path)[0].shape == (0, 4)


def test_binary_route_refuses_a_width_no_model_can_hold(tmp_path):
    X = sp.csr_matrix((np.ones(2, np.float32), np.array([0, 2**40 - 1]), np.array([0, 1, 2])),
                      shape=(2, 2**40))
    path = save_binary(tmp_path / "wide.gsvm", X, np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match=exactly(
            f"{path}: the data is {2**40} columns wide for 2 rows and 2 nonzeros (a weight "
            "vector alone would take 8192.0 GiB); if the data really has that many features, "
            "pass n_features explicitly")):
        load_svmlight(path)
    assert load_svmlight(path, n_features=2**40)[0].shape == (2, 2**40)


# ------------------------------------------------------------------ convert onto itself
@pytest.mark.parametrize("how", ["same", "relative", "hardlink"])
def test_convert_refuses_to_replace_its_input(tmp_path, capsys, monkeypatch, how):
    data = tmp_path / "a.svm"
    data.write_bytes(b"1 1:0.5\n-1 2:0.25\n")
    monkeypatch.chdir(tmp_path)
    out = {"same": data, "relative": "./a.svm", "hardlink": tmp_path / "b.svm"}[how]
    if how == "hardlink":
        os.link(data, out)
    status, stdout, err = run(capsys, "convert", data, out)
    assert status == 2 and stdout == ""
    assert err == (f"gpusvm convert: error: OUT {out} is DATA {data}: converting would replace "
                   "the text with its binary form; pass another OUT (e.g. a .gsvm file)\n")
    assert data.read_bytes() == b"1 1:0.5\n-1 2:0.25\n"
    assert run(capsys, "convert", data, tmp_path / "a.gsvm")[0] == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1,
                      max_size=6))
def test_random_header_damage_is_one_line_naming_the_file(tmp_path, edits):
    """Bytes of the length field and the JSON header overwritten at random: the store opens
    (and its matrix converts) or a one-line ValueError names the file, nothing else."""
    path, _ = _store(tmp_path, name="fuzz.gsvm")
    raw = bytearray(open(path, "rb").read())
    for at, byte in edits:
        raw[len(BINARY_MAGIC) + at % (len(raw) - len(BINARY_MAGIC))] = byte
    open(path, "wb").write(bytes(raw))
    try:
        X, y = load_binary(path)
    except ValueError as exc:
        assert str(exc).startswith(f"{path}") and "\n" not in str(exc)
    else:
        assert X.toarray().shape == X.shape and y.shape == (X.shape[0],)
