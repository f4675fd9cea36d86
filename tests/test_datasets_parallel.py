"""The compiled svmlight reader (every core, chunks cut at line starts) and the binary form.

The compiled reader must give scikit-learn's matrix bit for bit (values, labels, the order and
types of the arrays) whatever the chunk size, on the real files and on generated ones, and must
leave every error to the one-core reader, whose messages name the file and the line.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusvm import datasets
from gpusvm.cli import main
from gpusvm.datasets import (BINARY_MAGIC, BINARY_VERSION, load_binary, load_svmlight,
                             save_binary)


def _compiled(path, dtype=np.float32, chunk_bytes=64):
    return datasets._read_compiled(str(path), np.dtype(dtype), min_bytes=0,
                                   chunk_bytes=chunk_bytes, hard_fraction=1.0)


def _sklearn(path, dtype=np.float32):
    return datasets._read_sklearn(str(path), np.dtype(dtype), None, "auto")


def _assert_same(got, ref):
    (Xg, yg), (Xr, yr) = got, ref
    assert Xg.shape == Xr.shape and Xg.dtype == Xr.dtype
    np.testing.assert_array_equal(Xg.indptr, Xr.indptr)
    np.testing.assert_array_equal(Xg.indices, Xr.indices)
    assert Xg.data.tobytes() == Xr.data.tobytes()       # bit for bit: -0.0, NaN payloads
    assert yg.dtype == yr.dtype == np.float64 and yg.tobytes() == yr.tobytes()


def _write(tmp_path, name, content: bytes):
    path = tmp_path / name
    opener = {".gz": gzip.compress, ".bz2": bz2.compress}.get(path.suffix, lambda b: b)
    path.write_bytes(opener(content))
    return path


# ------------------------------------------------------------------ the real files
SMALL_FILES = ["a9a/a9a", "a9a/a9a.t", "w8a/w8a", "letter/letter.scale", "pendigits/pendigits",
               "ijcnn1/ijcnn1.trn.bz2", "rcv1_small/vw_rcv1_small.svm",
               "rcv1_small/libsvm_rcv1_train_head100.svm"]


@pytest.mark.parametrize("name", SMALL_FILES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_reader_equals_sklearn_on_real_files(shared_data, name, dtype):
    path = shared_data / name
    ref = _sklearn(path, dtype)
    for chunk_bytes in (4099, 1 << 20):          # many chunks cut inside lines, and one or few
        got = _compiled(path, dtype, chunk_bytes)
        assert got is not None
        _assert_same(got, ref)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["imdb/imdb_tfidf_unigram.train.svm.gz",
                                  "news20/news20bydate_binary_uni+bigram.train.svm.gz",
                                  "news20_multiclass/news20.bz2"])
def test_compiled_reader_equals_sklearn_on_large_real_files(shared_data, name):
    path = shared_data / name
    _assert_same(_compiled(path, np.float32, 1 << 18), _sklearn(path, np.float32))


def test_load_svmlight_equals_old_path_on_a9a(shared_data, monkeypatch):
    path = shared_data / "a9a" / "a9a"
    X_old, y_old = load_svmlight(path)           # 2.3 MB: below the threshold, the old path
    monkeypatch.setattr(datasets, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(datasets, "CHUNK_BYTES", 1000)
    X_new, y_new = load_svmlight(path)
    _assert_same((X_new, y_new), (X_old, y_old))
    assert X_new.indices.dtype == X_new.indptr.dtype == np.int32 and X_new.has_sorted_indices


def test_compiled_reader_is_the_same_on_one_and_two_threads(shared_data):
    from numba import get_num_threads, set_num_threads
    path = shared_data / "w8a" / "w8a"
    before = get_num_threads()
    try:
        set_num_threads(1)
        one = _compiled(path, np.float32, 8191)
        set_num_threads(min(2, before))
        two = _compiled(path, np.float32, 8191)
    finally:
        set_num_threads(before)
    _assert_same(one, two)


# ------------------------------------------------------------------ numbers
# decimal strings of every shape the fast path meets or refuses: long mantissas, leading and
# trailing zeros, exponents near the exact range's ends, and Python's other spellings
DECIMAL = st.from_regex(r"\A[+-]?[0-9]{0,24}(\.[0-9]{0,24})?([eE][+-]?[0-9]{1,3})?\Z").filter(
    lambda s: any(ch.isdigit() for ch in s.split("e")[0].split("E")[0]))
NUMBER = st.one_of(
    DECIMAL,
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.9g}"),
    st.tuples(st.integers(0, 10**17), st.integers(-30, 30)).map(lambda t: f"{t[0]}e{t[1]}"),
    st.sampled_from(["inf", "-Infinity", "nan", "1_000.5", "-0", "+.5", "5.", "0e999",
                     "1e-400", "1e400", "9007199254740993", "3.4028236e38", "1.4e-45"]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(numbers=st.lists(NUMBER, min_size=1, max_size=20))
def test_numbers_round_as_python_float(tmp_path_factory, numbers):
    text = "".join(f"{v} 1:{v}\n" for v in numbers).encode()
    path = _write(tmp_path_factory.mktemp("num"), "numbers.svm", text)
    expect = np.array([float(v) for v in numbers])
    for dtype in (np.float32, np.float64):
        got = _compiled(path, dtype, 16)
        assert got is not None
        X, y = got
        assert y.tobytes() == expect.tobytes()
        with np.errstate(over="ignore"):
            assert X.data.tobytes() == expect.astype(dtype).tobytes()
        _assert_same(got, _sklearn(path, dtype))


# ------------------------------------------------------------------ generated files
SPACE = st.sampled_from([" ", "  ", "\t", " \t", "\x0b", "\x0c", " \r"])


@st.composite
def svmlight_text(draw):
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["row", "row", "row", "blank", "comment"]))
        if kind == "blank":
            lines.append(draw(st.sampled_from(["", " ", "\t", "\r"])))
            continue
        if kind == "comment":
            lines.append(draw(st.sampled_from(["#", "# a comment", "  # x:y 1:2"])))
            continue
        parts = [draw(NUMBER)]
        if draw(st.booleans()) and draw(st.booleans()):
            parts.append(draw(st.sampled_from(["qid:3", "qid:17", "qid:x"])))
        idx = sorted(draw(st.sets(st.integers(0, 60), max_size=8)))
        parts += [f"{i}:{draw(NUMBER)}" for i in idx]
        line = draw(st.sampled_from(["", " ", "\t"])) + "".join(
            p + (draw(SPACE) if k < len(parts) - 1 else "") for k, p in enumerate(parts))
        line += draw(st.sampled_from(["", " ", " # trailing", "#c 1:2", "\r"]))
        lines.append(line)
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join(lines) + draw(st.sampled_from(["", end]))
    return text.encode()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=svmlight_text(), chunk_bytes=st.integers(1, 97))
def test_compiled_reader_equals_sklearn_on_generated_files(tmp_path_factory, text, chunk_bytes):
    path = _write(tmp_path_factory.mktemp("gen"), "gen.svm", text)
    got = _compiled(path, np.float64, chunk_bytes)
    assert got is not None                       # every generated line is in the fast grammar
    _assert_same(got, _sklearn(path, np.float64))
    _assert_same(_compiled(path, np.float32, chunk_bytes), _sklearn(path, np.float32))


# ------------------------------------------------------------------ errors and odd lines
ODD = [
    b"+1 1:0.5\n-1 2:abc\n",                     # a value that is not a number
    b"+1 1:0.5\nabc 2:1\n",                      # a label that is not a number
    b"+1 3:1 2:1\n",                             # indices not increasing
    b"+1 1:1 1:2\n",                             # a repeated index
    b"+1 1:1 junk\n",                            # a term without ':'
    b"+1 1:1\n-1 -3:1\n",                        # a negative index
    b"+1 2147483648:1\n",                        # an index beyond int32
    b"+1 1:1\n-1 2:1\x00\n",                     # a NUL byte
    b"+1 qid:\x00 1:1 # c\n",                    # a NUL byte in a qid term before a comment
    b"+1 1:\xc3\xa9\n",                          # not ASCII
    b"+1 1:1 qid:3\n",                           # qid after a term
    b"+1 qid 1:1\n",                             # qid without ':'
    b"+1 :1\n", b"+1 1:\n", b"+1 1:1:2\n",
    b"+1 +2:1\n", b"+1 0_2:1\n",                 # index spellings int() takes: read the old way
    b"+1 007:1 0000000002147483647:2\n",         # leading zeros, the largest index
    b"+1 0:1 2:1\n",                             # index 0 (auto: zero-based with a warning)
    b"# only a comment\n\n",                     # no examples
]


@pytest.mark.parametrize("content", ODD)
@pytest.mark.parametrize("zero_based", ["auto", False, True])
def test_odd_files_read_or_fail_exactly_as_before(tmp_path, monkeypatch, content, zero_based):
    path = _write(tmp_path, "odd.svm", content)

    def outcome():
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                X, y = load_svmlight(path, zero_based=zero_based)
                result = (X.toarray().tobytes(), X.shape, y.tobytes())
            except ValueError as exc:
                result = str(exc)
        return result, [str(w.message) for w in caught]

    old = outcome()
    monkeypatch.setattr(datasets, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(datasets, "CHUNK_BYTES", 3)
    assert outcome() == old


def test_bad_line_is_named_from_the_compiled_path(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "PARALLEL_MIN_BYTES", 0)
    path = _write(tmp_path, "bad.svm.gz", b"+1 1:0.5\n" * 50 + b"-1 2:zz\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}, line 51: feature value 'zz' in '2:zz' is not a number")):
        load_svmlight(path)


@pytest.mark.parametrize("suffix", [".gz", ".bz2"])
def test_compressed_and_bom_files_equal_plain(tmp_path, shared_data, suffix):
    raw = (shared_data / "a9a" / "a9a.t").read_bytes()
    plain = _compiled(_write(tmp_path, "p.svm", raw), chunk_bytes=5000)
    packed = _compiled(_write(tmp_path, "p.svm" + suffix, b"\xef\xbb\xbf" + raw), chunk_bytes=5000)
    _assert_same(packed, plain)


def test_truncated_gzip_is_named_as_before(tmp_path, monkeypatch):
    packed = gzip.compress(b"+1 1:0.5 2:1\n" * 2000)
    path = tmp_path / "cut.svm.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValueError) as old:
        load_svmlight(path)
    monkeypatch.setattr(datasets, "PARALLEL_MIN_BYTES", 0)
    with pytest.raises(ValueError) as new:
        load_svmlight(path)
    assert str(new.value) == str(old.value) and "truncated or corrupted" in str(old.value)


def test_files_of_mostly_hard_numbers_go_to_the_one_core_reader(tmp_path, monkeypatch):
    """Values only Python's float reads (underscores) mostly: scikit-learn's path reads the
    file; 20-digit values, rounded in the compiled path, no longer do."""
    long = _write(tmp_path, "long.svm", b"".join(
        b"+1 1:%.20g 2:%.20g\n" % (0.1 + k / 7, 0.3 + k / 9) for k in range(50)))
    _assert_same(datasets._read_compiled(str(long), np.dtype(np.float64), min_bytes=0,
                                         chunk_bytes=64), _sklearn(long, np.float64))
    path = _write(tmp_path, "hard.svm", b"".join(
        b"+1 1:1_%d.5 2:%d_0\n" % (k, k + 1) for k in range(50)))
    assert datasets._read_compiled(str(path), np.dtype(np.float64), min_bytes=0,
                                   chunk_bytes=64) is None
    _assert_same(_compiled(path, np.float64), _sklearn(path, np.float64))


def test_progress_bar_on_request(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(datasets, "PARALLEL_MIN_BYTES", 0)
    path = _write(tmp_path, "bar.svm", b"+1 1:0.5\n" * 100)
    load_svmlight(path, progress=True)
    assert "reading bar.svm" in capsys.readouterr().err
    load_svmlight(path)                          # small file, not a terminal: no bar
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------ the binary form
def _small_set():
    X = sp.random(40, 30, density=0.2, format="csr", dtype=np.float32, random_state=1)
    X.data[0] = -0.0
    return X, np.arange(40, dtype=np.float64) % 3 - 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_round_trip_is_exact_and_mapped(tmp_path, dtype):
    X, y = _small_set()
    X = X.astype(dtype)
    path = save_binary(tmp_path / "set.gsvm", X, y, zero_based=True)
    X2, y2, zero_based = load_binary(path, return_zero_based=True)
    _assert_same((X2, y2), (datasets._to_int32_csr(X), y))
    assert zero_based is True and X2.indices.dtype == np.int32
    assert X2.data.flags.writeable                  # copy-on-write: the file never changes
    base = X2.data
    while base.base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)
    X2.data[:] = 7
    _assert_same(load_binary(path), (datasets._to_int32_csr(X), y))


def test_load_svmlight_opens_the_binary_form(tmp_path, shared_data):
    X, y, zb = load_svmlight(shared_data / "a9a" / "a9a.t", return_zero_based=True)
    path = save_binary(tmp_path / "a9a.t.gsvm", X, y, zero_based=zb)
    _assert_same(load_svmlight(path), (X, y))
    X64, _ = load_svmlight(path, n_features=200, dtype=np.float64)
    assert X64.shape == (X.shape[0], 200) and X64.dtype == np.float64
    assert (X64[:, :X.shape[1]] != X).nnz == 0
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: the data has {X.shape[1]} features but n_features=5; pass n_features >= "
            f"{X.shape[1]} (or the training set's n_features)")):
        load_svmlight(path, n_features=5)
    with pytest.raises(ValueError, match=re.escape(
            f"{path} was converted from a one-based svmlight file, but zero_based=True was "
            "asked; convert the text again with the base wanted")):
        load_svmlight(path, zero_based=True)


def test_binary_refuses_nan_unless_asked(tmp_path):
    X, y = _small_set()
    X.data[3] = np.nan
    path = save_binary(tmp_path / "nan.gsvm", X, y)
    row = int(np.searchsorted(X.indptr, 3, side="right")) - 1
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: the value nan of row {row} (counting from 0), feature index "
            f"{X.indices[3] + 1} is not finite; remove or impute the missing values "
            "first (pass finite=False to load them)")):
        load_svmlight(path)
    assert np.isnan(load_svmlight(path, finite=False)[0].data).sum() == 1


def test_binary_truncated_file(tmp_path):
    path = tmp_path / "set.gsvm"
    save_binary(path, *_small_set())
    full = path.read_bytes()
    path.write_bytes(full[:-100])
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: the file is truncated ({len(full) - 100} of {len(full)} bytes); write it "
            "again with `gpusvm convert` (or gpusvm.datasets.save_binary)")):
        load_binary(path)
    path.write_bytes(full[:20])
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: the file is truncated (20 bytes, shorter than its header)")):
        load_svmlight(path)


def _rewrite_header(path, change):
    raw = path.read_bytes()
    start = len(BINARY_MAGIC) + 4
    length = int.from_bytes(raw[len(BINARY_MAGIC):start], "little")
    header = json.loads(raw[start:start + length])
    change(header)
    text = json.dumps(header, sort_keys=True).encode().ljust(length)
    assert len(text) == length
    path.write_bytes(raw[:start] + text + raw[start + length:])


def test_binary_wrong_version(tmp_path):
    path = tmp_path / "set.gsvm"
    save_binary(path, *_small_set())
    _rewrite_header(path, lambda h: h.update(version=BINARY_VERSION + 1))
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: binary data format version {BINARY_VERSION + 1}, but this gpusvm reads "
            f"version {BINARY_VERSION}; convert the svmlight file again with this gpusvm's "
            "`gpusvm convert`")):
        load_binary(path)


def test_binary_damaged_header_and_arrays(tmp_path):
    path = tmp_path / "set.gsvm"
    save_binary(path, *_small_set())
    good = path.read_bytes()
    _rewrite_header(path, lambda h: h["arrays"]["indices"].update(count=3))
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: the header's indices array is inconsistent; write it again")):
        load_binary(path)
    path.write_bytes(good)
    _rewrite_header(path, lambda h: h.update(shape=[40, 2]))   # indices beyond the width
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: its index arrays are not a valid CSR matrix; write it again")):
        load_binary(path)
    path.write_bytes(good[:len(BINARY_MAGIC) + 4] + b"{not json" + good[len(BINARY_MAGIC) + 13:])
    with pytest.raises(ValueError, match=re.escape(f"{path}: the header is damaged; write it")):
        load_binary(path)
    text = tmp_path / "text.svm"
    text.write_bytes(b"+1 1:1\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{text}: not a gpusvm binary data file (it does not start with")):
        load_binary(text)


# ------------------------------------------------------------------ the command line
def test_cli_convert_then_fit_select_predict(tmp_path, shared_data, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train = shared_data / "a9a" / "a9a.t"
    assert main(["convert", str(train), "t.gsvm"]) == 0
    out = capsys.readouterr().out
    assert "n=16281, d=122, nnz=225731, one-based" in out and "written to t.gsvm" in out
    _assert_same(load_svmlight("t.gsvm"), load_svmlight(train))
    assert main(["fit", "t.gsvm", "--solver", "sdca", "--out", "bin.npz"]) == 0
    assert main(["fit", str(train), "--solver", "sdca", "--out", "text.npz"]) == 0
    capsys.readouterr()
    assert main(["predict", "bin.npz", str(train)]) == 0
    from_text = capsys.readouterr().out.splitlines()[-1]
    assert main(["predict", "text.npz", "t.gsvm"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == from_text and "accuracy" in from_text
    assert main(["select", "t.gsvm", "--Cs", "0.1,1", "--folds", "2", "--out", "sel.npz"]) == 0
    assert "chosen" in capsys.readouterr().out.lower()


def test_cli_predict_refuses_a_wider_binary_set(tmp_path, shared_data, capsys):
    narrow = tmp_path / "narrow.svm"
    narrow.write_bytes(b"+1 1:1\n-1 2:1\n+1 1:1 2:0.5\n-1 2:2\n")
    wide = tmp_path / "wide.gsvm"
    assert main(["fit", str(narrow), "--solver", "sdca", "--out", str(tmp_path / "m.npz")]) == 0
    assert main(["convert", str(narrow), str(wide), "--n-features", "5"]) == 0
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "m.npz"), str(wide)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"gpusvm predict: error: {wide}: the data has 5 features but the model "
        f"{tmp_path / 'm.npz'} was trained on 2; DATA must use the training data's features")
