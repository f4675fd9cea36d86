"""gpusvm.datasets: svmlight loading, row normalisation, the shipped a9a copy."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import re
from importlib import resources

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from gpusvm.datasets import A9A_N_FEATURES, A9A_SHA256, load_a9a, load_svmlight, normalize_rows

SMALL = b"# a comment line\n+1 1:0.5 3:2\n-1 2:1.5 # trailing comment\n+1 qid:7 1:1 2:1 3:1\n"


def _write(tmp_path, name, content: bytes):
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(content))
    elif name.endswith(".bz2"):
        path.write_bytes(bz2.compress(content))
    else:
        path.write_bytes(content)
    return path


# ------------------------------------------------------------------ load_svmlight
@pytest.mark.parametrize("name", ["small.svm", "small.svm.gz", "small.svm.bz2"])
def test_load_svmlight_values_and_index_types(tmp_path, name):
    X, y = load_svmlight(_write(tmp_path, name, SMALL))
    assert sp.isspmatrix_csr(X)
    assert X.dtype == np.float32
    assert X.indices.dtype == np.int32 and X.indptr.dtype == np.int32
    np.testing.assert_array_equal(X.toarray(), [[0.5, 0, 2], [0, 1.5, 0], [1, 1, 1]])
    np.testing.assert_array_equal(y, [1, -1, 1])


def test_load_svmlight_keeps_labels_as_given(tmp_path):
    path = _write(tmp_path, "labels.svm", b"0 1:1\n2 2:1\n7.5 1:1\n")
    _, y = load_svmlight(path)
    np.testing.assert_array_equal(y, [0, 2, 7.5])


def test_load_svmlight_n_features_and_dtype(tmp_path):
    path = _write(tmp_path, "small.svm", SMALL)
    X, _ = load_svmlight(path, n_features=10, dtype=np.float64)
    assert X.shape == (3, 10) and X.dtype == np.float64


def test_load_svmlight_matches_sklearn_on_a9a(shared_data, a9a):
    X_ref, y_ref = load_svmlight_file(str(shared_data / "a9a" / "a9a"), n_features=123)
    assert (a9a.X != X_ref).nnz == 0
    np.testing.assert_array_equal(a9a.y, y_ref)
    assert a9a.X.indices.dtype == np.int32 and a9a.X.has_sorted_indices
    # the test file uses only 122 columns: n_features=123 keeps the shapes aligned
    assert a9a.X_test.shape == (16281, 123)


@pytest.mark.parametrize("content, line, reason", [
    (b"+1 1:1\n-1 2:abc\n", 2, "feature value 'abc' in '2:abc' is not a number"),
    (b"+1 1:1\nfoo 2:3\n", 2, "label 'foo' is not a number"),
    (b"+1 1:1\n\n# only a comment\n-1 2\n", 4, "term '2' is not of the form index:value"),
    (b"+1 1:1 3:1 2:1\n", 1, "feature indices must be sorted and unique, but 2 follows 3"),
    (b"+1 1:1 1:2\n", 1, "feature indices must be sorted and unique, but 1 follows 1"),
    (b"+1 1:1\n-1 x:1\n", 2, "feature index 'x' in 'x:1' is not an integer"),
    (b"+1 1:1\n-1 -3:1\n", 2, "invalid feature index -3 in '-3:1'"),
    (b"+1 1:1\n-1 2147483648:1\n", 2,
     "feature index 2147483648 in '2147483648:1' is too large (the largest is 2147483647)"),
    (b"+1 qid:3 1:1\n-1 qid:3 1:1:2\n", 2, "feature value '1:2' in '1:1:2' is not a number"),
])
def test_malformed_file_names_file_and_line(tmp_path, content, line, reason):
    path = _write(tmp_path, "bad.svm", content)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{path}, line {line}: {reason}')}$"):
        load_svmlight(path)


def test_malformed_gzip_file_names_file_and_line(tmp_path):
    path = _write(tmp_path, "bad.svm.gz", b"+1 1:1\n+1 2:1\n-1 3:zz\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}, line 3: feature value 'zz' in '3:zz' is not a number")):
        load_svmlight(path)


def test_too_many_features_names_the_line(tmp_path):
    path = _write(tmp_path, "wide.svm", b"+1 1:1\n-1 2:1 9:1\n+1 4:1\n")
    expected = (f"{path}, line 2: feature index 9 needs 9 features but n_features=5; pass "
                "n_features >= 9 (or the training set's n_features)")
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        load_svmlight(path, n_features=5)


def test_truncated_gzip(tmp_path):
    full = gzip.compress(b"".join(b"+1 1:1 2:1 3:%d\n" % i for i in range(20000)))
    path = tmp_path / "cut.svm.gz"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}, after line \d+: cannot be "
                                         r"read as a \(compressed\) svmlight file .*the file may "
                                         r"be truncated or corrupted$"):
        load_svmlight(path)


def test_binary_file_without_suffix(tmp_path):
    path = _write(tmp_path, "data.svm", gzip.compress(b"+1 1:1\n"))
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 1: not ASCII text")):
        load_svmlight(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.svm"
    with pytest.raises(FileNotFoundError,
                       match=f"^svmlight file not found: {re.escape(str(path))}$"):
        load_svmlight(path)


def test_empty_file(tmp_path):
    path = _write(tmp_path, "empty.svm", b"# nothing here\n\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: no examples found (the file is empty or holds only comments)")):
        load_svmlight(path)


def test_bad_n_features_and_dtype(tmp_path):
    path = _write(tmp_path, "small.svm", SMALL)
    with pytest.raises(ValueError, match=r"^n_features must be a positive integer or None, got 0$"):
        load_svmlight(path, n_features=0)
    with pytest.raises(ValueError, match=r"^dtype must be float32 or float64, got int32$"):
        load_svmlight(path, dtype=np.int32)


# ------------------------------------------------------------------ normalize_rows
ROWS = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.0, -2.0]])


@pytest.mark.parametrize("to_input", [np.asarray, sp.csr_matrix], ids=["dense", "csr"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normalize_rows_all(to_input, dtype):
    X = to_input(ROWS.astype(dtype))
    Z = normalize_rows(X)
    dense = Z.toarray() if sp.issparse(Z) else Z
    assert dense.dtype == dtype and type(Z) is type(X)
    norms = np.linalg.norm(dense, axis=1)
    np.testing.assert_allclose(norms, [1, 0, 1, 1], rtol=1e-6)
    np.testing.assert_allclose(dense[0], [0.6, 0.8, 0], rtol=1e-6)
    # the input is not modified
    np.testing.assert_array_equal(X.toarray() if sp.issparse(X) else X, ROWS.astype(dtype))


@pytest.mark.parametrize("to_input", [np.asarray, sp.csr_matrix], ids=["dense", "csr"])
def test_normalize_rows_above_only_shrinks_long_rows(to_input):
    Z = normalize_rows(to_input(ROWS), max_norm=1.5, mode="above")
    dense = Z.toarray() if sp.issparse(Z) else Z
    np.testing.assert_allclose(np.linalg.norm(dense, axis=1), [1.5, 0, 0.1, 1.5])
    np.testing.assert_array_equal(dense[2], ROWS[2])


def test_normalize_rows_max_norm_scales_all_rows():
    Z = normalize_rows(ROWS, max_norm=2.0)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), [2, 0, 2, 2])


def test_normalize_rows_bad_arguments():
    with pytest.raises(ValueError, match=r"^max_norm must be a finite number > 0, got 0$"):
        normalize_rows(ROWS, max_norm=0)
    with pytest.raises(ValueError, match=r"^mode must be 'all' or 'above', got 'clip'$"):
        normalize_rows(ROWS, mode="clip")
    bad = ROWS.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"^X contains NaN or infinity; clean the data before "
                                         r"normalising it$"):
        normalize_rows(sp.csr_matrix(bad))


def test_normalize_rows_on_a9a_gives_unit_rows(a9a):
    Z = normalize_rows(a9a.X)
    norms = np.sqrt(np.asarray(Z.multiply(Z).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, rtol=1e-6)
    assert Z.indices.dtype == np.int32


# ------------------------------------------------------------------ the shipped a9a
@pytest.mark.parametrize("split, n, n_pos", [("train", 32561, 7841), ("test", 16281, 3846)])
def test_load_a9a_statistics(split, n, n_pos):
    X, y = load_a9a(split)
    assert X.shape == (n, A9A_N_FEATURES) == (n, 123)
    assert X.indices.dtype == np.int32 and X.dtype == np.float32
    assert set(np.unique(y)) == {-1.0, 1.0} and int((y == 1).sum()) == n_pos
    np.testing.assert_array_equal(np.unique(X.data), [1.0])


@pytest.mark.parametrize("split, filename", [("train", "a9a"), ("test", "a9a.t")])
def test_shipped_a9a_equals_the_shared_copy(shared_data, split, filename):
    original = (shared_data / "a9a" / filename).read_bytes()
    shipped = gzip.decompress(
        resources.files("gpusvm").joinpath("data", f"{filename}.gz").read_bytes())
    assert shipped == original
    assert hashlib.sha256(original).hexdigest() == A9A_SHA256[split]


def test_provenance_records_the_checksums_and_licence():
    text = resources.files("gpusvm").joinpath("data", "PROVENANCE.txt").read_text("utf-8")
    for digest in A9A_SHA256.values():
        assert digest in text
    assert "CC BY 4.0" in text and "UCI" in text


def test_load_a9a_detects_a_damaged_file(monkeypatch):
    import gpusvm.datasets as datasets
    monkeypatch.setitem(datasets.A9A_SHA256, "test", "0" * 64)
    with pytest.raises(ValueError, match=r"^the shipped a9a test file \(.*a9a\.t\.gz\) is "
                                         r"damaged: sha256 1f448a15\w+ differs from 0{64}; "
                                         r"reinstall gpusvm$"):
        load_a9a("test")


def test_load_a9a_unknown_split():
    with pytest.raises(ValueError, match=r"^split must be 'train' or 'test', got 'valid'$"):
        load_a9a("valid")


# ------------------------------------------------------------------ the index base
def test_the_base_is_explicit_and_returned(tmp_path):
    path = _write(tmp_path, "one.svm", b"+1 1:1 3:2\n-1 2:1\n")
    X, y, zero_based = load_svmlight(path, return_zero_based=True)
    assert zero_based is False and X.shape == (2, 3)
    np.testing.assert_array_equal(X.toarray(), [[1, 0, 2], [0, 1, 0]])
    X, y, zero_based = load_svmlight(path, zero_based=True, return_zero_based=True)
    assert zero_based is True and X.shape == (2, 4)
    np.testing.assert_array_equal(X.toarray(), [[0, 1, 0, 2], [0, 0, 1, 0]])


def test_a_stray_index_0_warns_with_auto_and_is_refused_one_based(tmp_path):
    path = _write(tmp_path, "stray.svm", b"+1 1:1 3:2\n# comment\n-1 0:5 2:1\n+1 3:1\n")
    with pytest.warns(UserWarning) as record:
        X, y, zero_based = load_svmlight(path, return_zero_based=True)
    assert [str(w.message) for w in record] == [
        f"{path}: index 0 occurs (first on line 3), so the whole file is read as zero-based; if "
        "it is a one-based (LIBSVM) file, that line is an error and every column would shift "
        "by one: pass zero_based=False to refuse index 0, or zero_based=True to read the file "
        "as zero-based without this warning"]
    assert zero_based is True and X.shape == (3, 4)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}, line 3: feature index 0 in "
                                         r"'0:5', but the file is read as one-based \(LIBSVM: "
                                         r"indices start at 1\); pass zero_based=True if the "
                                         r"file is zero-based$"):
        load_svmlight(path, zero_based=False)
    with pytest.raises(ValueError, match=r"^zero_based must be True, False or 'auto', got 'yes'$"):
        load_svmlight(path, zero_based="yes")


def test_columns_are_bounded_by_the_file_unless_n_features_is_given(tmp_path):
    path = _write(tmp_path, "wide.svm", b"+1 1:1\n-1 3:1 2000000000:1\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}, line 2: feature index "
                                         r"2000000000 makes the data 2000000000 columns wide for "
                                         r"2 rows and 3 nonzeros \(a weight vector alone would "
                                         r"take 14\.9 GiB\); if the data really has that many "
                                         r"features, pass n_features explicitly$"):
        load_svmlight(path)
    X, _ = load_svmlight(path, n_features=2_000_000_000)
    assert X.shape == (2, 2_000_000_000) and X.indices.dtype == np.int32
