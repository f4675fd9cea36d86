"""gpusvm.model_io: round trips, the file layout, and every way a model file can be bad."""

from __future__ import annotations

import importlib
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_circles, make_classification
from sklearn.exceptions import NotFittedError
from sklearn.svm import LinearSVC

import gpusvm
from gpusvm import model_io
from gpusvm import KernelPegasosSVC, PegasosSVC, __version__
from gpusvm import SDCASVC
from gpusvm.model_io import (FORMAT_NAME, FORMAT_VERSION, METADATA_MEMBER, load_model,
                             read_model_metadata, save_model)


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=120, n_features=7, random_state=0)
    return X, y


@pytest.fixture
def fitted(data):
    X, y = data
    return PegasosSVC(lam=1e-2, batch_size=8, backend="numpy", random_state=0).fit(X, y)


def _rewrite_metadata(path, **changes):
    """Rewrite a model file with some metadata fields changed (``None`` deletes)."""
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(arrays[METADATA_MEMBER].tobytes())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    arrays[METADATA_MEMBER] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("labels", [
    np.array([-1, 1]), np.array([0.0, 1.0]), np.array(["ham", "spam"]),
    np.array(["ham", "spam"], dtype=object)], ids=["int", "float", "str", "object"])
def test_pegasos_round_trip(tmp_path, data, labels):
    X, y = data
    est = PegasosSVC(lam=1e-2, batch_size=8, backend="numpy", random_state=0,
                     dtype="float64").fit(X, labels[y])
    path = tmp_path / "model.npz"
    assert save_model(est, path) == str(path)
    loaded = load_model(path)
    assert type(loaded) is PegasosSVC
    assert loaded.get_params() == est.get_params()
    np.testing.assert_array_equal(loaded.coef_, est.coef_)
    np.testing.assert_array_equal(loaded.intercept_, est.intercept_)
    np.testing.assert_array_equal(loaded.classes_, est.classes_)
    assert loaded.classes_.dtype == est.classes_.dtype
    assert loaded.n_features_in_ == 7 and loaded.n_iter_ == est.n_iter_
    assert loaded.history_ == est.history_ and loaded.stop_reason_ == est.stop_reason_
    assert loaded.backend_ == est.backend_
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


def test_sdca_round_trip(tmp_path, data):
    X, y = data
    est = SDCASVC(lam=1e-2, batch_size=8, backend="numpy", random_state=0).fit(X, y)
    save_model(est, tmp_path / "s.npz")
    loaded = load_model(tmp_path / "s.npz")
    assert type(loaded) is SDCASVC and loaded.get_params() == est.get_params()
    np.testing.assert_array_equal(loaded.coef_, est.coef_)
    np.testing.assert_array_equal(loaded.alpha_, est.alpha_)
    assert loaded.duality_gap_ == est.duality_gap_ and loaded.history_ == est.history_
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


@pytest.mark.parametrize("make", [
    lambda: gpusvm.LinearSVC(backend="numpy"),
    lambda: gpusvm.LinearSVC(C=0.1, fit_intercept=False, backend="numpy"),
    lambda: gpusvm.SDCASVCCV(Cs=[0.1, 1.0], cv=3, backend="numba", random_state=0),
    lambda: gpusvm.PegasosSVCCV(Cs=[0.1, 1.0], cv=3, max_iter=200, backend="numba",
                                random_state=0),
    lambda: gpusvm.LinearSVCCV(Cs=[0.1, 1.0], cv=3, backend="numba", random_state=0),
], ids=["LinearSVC", "LinearSVC-no-intercept", "SDCASVCCV", "PegasosSVCCV", "LinearSVCCV"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_linear_svc_and_searches_round_trip(tmp_path, make, n_classes):
    """``gpusvm.LinearSVC`` and the C searches save and load, binary and multiclass, with every
    fitted attribute (the search's ``Cs_``, ``C_`` and ``scores_`` too) and the same predictions."""
    X, y = make_classification(n_samples=150, n_features=6, n_informative=4,
                               n_classes=n_classes, random_state=1)
    est = make().fit(X, y)
    save_model(est, tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert type(loaded) is type(est) and loaded.get_params() == est.get_params()
    fitted = sorted(k for k in vars(est) if k.endswith("_") and not k.startswith("_"))
    assert sorted(k for k in vars(loaded) if k.endswith("_") and not k.startswith("_")) == fitted
    for key in ("coef_", "intercept_", "classes_") + (("Cs_", "scores_") if "Cs_" in fitted
                                                         else ()):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(est, key))
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


def test_every_public_estimator_is_known_to_the_model_files():
    # a class missing from ESTIMATOR_MODULES saves, but its multiclass files do not load and
    # skops does not trust it
    public = {name for name in gpusvm.__all__ if isinstance(getattr(gpusvm, name), type)}
    assert public - {"__version__"} == set(model_io.ESTIMATOR_MODULES)
    for name, module in model_io.ESTIMATOR_MODULES.items():
        assert getattr(importlib.import_module(module), name) is getattr(gpusvm, name)
    assert set(model_io.skops_trusted_types()) == {
        f"{cls.__module__}.{cls.__name__}" for cls in (getattr(gpusvm, n) for n in public)}


def test_dtype_given_as_a_type_round_trips(tmp_path, data):
    X, y = data
    est = PegasosSVC(dtype=np.float64, batch_size=8, backend="numpy", random_state=0).fit(X, y)
    save_model(est, tmp_path / "m.npz")
    assert load_model(tmp_path / "m.npz").dtype is np.float64


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_kernel_pegasos_round_trip(tmp_path, sparse):
    X, y = make_circles(n_samples=120, factor=0.5, noise=0.05, random_state=0)
    X = sp.csr_matrix(X) if sparse else X
    est = KernelPegasosSVC(lam=1e-2, batch_size=16, random_state=0).fit(X, y)
    save_model(est, tmp_path / "k.npz")
    loaded = load_model(tmp_path / "k.npz")
    assert type(loaded) is KernelPegasosSVC
    assert sp.issparse(loaded.support_vectors_) == sparse
    np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))
    assert loaded.gamma_ == est.gamma_ and loaded.objective_ == est.objective_


def test_file_layout_is_plain_npz_with_json_metadata(tmp_path, fitted):
    path = tmp_path / "model.npz"
    save_model(fitted, path, extra={"normalize": True})
    with np.load(path, allow_pickle=False) as f:
        assert set(f.files) == {"coef", "intercept", "classes", METADATA_MEMBER}
        np.testing.assert_array_equal(f["coef"], fitted.coef_)
        meta = json.loads(f[METADATA_MEMBER].tobytes().decode("utf-8"))
    assert meta["format"] == FORMAT_NAME == "gpusvm-model"
    assert meta["format_version"] == FORMAT_VERSION
    assert meta["gpusvm_version"] == __version__
    assert meta["estimator"] == "PegasosSVC"
    assert meta["params"]["lam"] == 1e-2 and meta["params"]["batch_size"] == 8
    assert meta["attributes"]["n_features_in_"] == 7
    assert meta["attributes"]["n_iter_"] == fitted.n_iter_
    assert meta["extra"] == {"normalize": True}
    assert read_model_metadata(path) == meta


def test_path_is_written_exactly_as_given(tmp_path, fitted):
    path = tmp_path / "model.bin"
    save_model(fitted, path)
    assert path.is_file() and not (tmp_path / "model.bin.npz").exists()
    assert load_model(path).n_features_in_ == 7
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]  # no temporary file left


def test_callback_is_dropped_and_listed(tmp_path, data):
    X, y = data
    est = PegasosSVC(batch_size=8, backend="numpy", random_state=np.random.RandomState(0),
                     callback=lambda *a: None).fit(X, y)
    save_model(est, tmp_path / "m.npz")
    meta = read_model_metadata(tmp_path / "m.npz")
    assert sorted(meta["dropped_params"]) == ["callback", "random_state"]
    loaded = load_model(tmp_path / "m.npz")
    assert loaded.callback is None and loaded.random_state is None
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


# ------------------------------------------------------------------ what cannot be saved
def test_save_unfitted_estimator(tmp_path):
    with pytest.raises(NotFittedError, match="This PegasosSVC instance is not fitted yet"):
        save_model(PegasosSVC(), tmp_path / "m.npz")


def test_save_foreign_estimator(tmp_path, data):
    X, y = data
    with pytest.raises(TypeError, match=r"^save_model saves gpusvm estimators; got "
                                        r"sklearn\.svm\._classes\.LinearSVC: save a Pipeline or "
                                        r"any other scikit-learn object holding gpusvm "
                                        r"estimators without pickle with skops: "):
        save_model(LinearSVC().fit(X, y), tmp_path / "m.npz")


def test_save_callable_kernel_is_refused(tmp_path):
    X, y = make_circles(n_samples=60, factor=0.5, noise=0.05, random_state=0)
    est = KernelPegasosSVC(kernel=lambda a, b: a @ b.T, batch_size=8, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match=r"^cannot save KernelPegasosSVC: its parameter "
                                         r"kernel=<function .*> \(a function\) has no file "
                                         r"representation; use a built-in option for it$"):
        save_model(est, tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()


def test_save_extra_must_be_json(tmp_path, fitted):
    with pytest.raises(ValueError, match=r"^extra metadata must be JSON-representable; it holds "
                                         r"a set$"):
        save_model(fitted, tmp_path / "m.npz", extra={"bad": {1, 2}})


# ------------------------------------------------------------------ bad files
AGAIN = re.escape("save the model again with gpusvm.model_io.save_model (or `gpusvm fit`)")


def test_missing_model_file(tmp_path):
    path = tmp_path / "none.npz"
    with pytest.raises(FileNotFoundError, match=f"^model file not found: {re.escape(str(path))}$"):
        load_model(path)


def test_truncated_model_file(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=f"^cannot read model file {re.escape(str(path))}: it is "
                                         r"not a valid \.npz archive \(File is not a zip file\); "
                                         f"the file is truncated, corrupted or not a gpusvm "
                                         f"model: {AGAIN}$"):
        load_model(path)


def test_corrupted_member(tmp_path):
    X, y = make_classification(n_samples=60, n_features=400, random_state=0)
    est = PegasosSVC(batch_size=8, backend="numpy", random_state=0).fit(X, y)
    path = tmp_path / "m.npz"
    save_model(est, path)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("coef.npy")
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 20, start + 60):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"^model file {re.escape(str(path))} is corrupted "
                                         rf"\(member 'coef': .+\); {AGAIN}$"):
        load_model(path)


def test_garbage_file(tmp_path):
    path = tmp_path / "m.npz"
    path.write_bytes(b"this is not a model at all\n" * 10)
    with pytest.raises(ValueError, match=f"^cannot read model file {re.escape(str(path))}: it is "
                                         r"not a \.npz archive \(it starts with b'this is not a "
                                         r"mo'\); load files written by gpusvm\.model_io\."
                                         r"save_model or `gpusvm fit`$"):
        load_model(path)


def test_foreign_npz(tmp_path):
    path = tmp_path / "weights.npz"
    np.savez(path, coef=np.ones(3))
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} is a .npz archive but not a "
                                         r"gpusvm model \(it has no gpusvm metadata\); load files "
                                         r"written by gpusvm\.model_io\.save_model or `gpusvm "
                                         r"fit`$"):
        load_model(path)


def test_plain_npy_file(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, np.ones(3))
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} holds a single NumPy array, "
                                         "not a gpusvm model"):
        load_model(path)


def test_other_format_name(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    _rewrite_metadata(path, format="other-tool")
    with pytest.raises(ValueError, match=r"is a \.npz archive but not a gpusvm model \(format "
                                         r"'other-tool', expected 'gpusvm-model'\)"):
        load_model(path)


def test_newer_format_version(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    _rewrite_metadata(path, format_version=FORMAT_VERSION + 1, gpusvm_version="9.0.0")
    expected = (f"{path} was written by gpusvm 9.0.0 in model format version "
                f"{FORMAT_VERSION + 1}, but this gpusvm {__version__} reads format versions up "
                f"to {FORMAT_VERSION}; upgrade gpusvm (pip install -U gpusvm) to load it")
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        load_model(path)


def test_unknown_estimator_class(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    _rewrite_metadata(path, estimator="FancySVC", module="gpusvm.fancy")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} holds a 'FancySVC' estimator, "
                                         f"which this gpusvm {re.escape(__version__)} does not "
                                         r"provide \(known: .*PegasosSVC.*\); upgrade gpusvm"):
        load_model(path)


def test_estimator_outside_gpusvm_is_never_imported(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    # (SVC: gpusvm has a LinearSVC of its own, which a file naming sklearn.svm.LinearSVC gets)
    _rewrite_metadata(path, estimator="SVC", module="sklearn.svm")
    with pytest.raises(ValueError, match="holds a 'SVC' estimator, which this gpusvm"):
        load_model(path)


def test_unknown_parameter(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    meta = read_model_metadata(path)
    _rewrite_metadata(path, params={**meta["params"], "turbo": True})
    with pytest.raises(ValueError, match=r"sets parameters turbo that PegasosSVC of gpusvm .* "
                                         r"does not have; upgrade gpusvm to load it$"):
        load_model(path)


def test_missing_metadata_fields(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    _rewrite_metadata(path, params=None)
    with pytest.raises(ValueError, match=f"is corrupted \\(metadata lacks params\\); {AGAIN}$"):
        load_model(path)


def test_unreadable_metadata(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    arrays[METADATA_MEMBER] = np.frombuffer(b"{not json", dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=r"is corrupted \(unreadable metadata: "):
        load_model(path)


def test_inconsistent_shapes(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    meta = read_model_metadata(path)
    _rewrite_metadata(path, attributes={**meta["attributes"], "n_features_in_": 5})
    with pytest.raises(ValueError, match=r"is corrupted \(coef has 7 features but "
                                         f"n_features_in_ = 5\\); {AGAIN}$"):
        load_model(path)


# ------------------------------------------------------------------ hostile model files
def _rewrite(path, meta_changes=None, **array_changes):
    """Rewrite a model file with members replaced (``None`` deletes) and metadata changed."""
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(arrays[METADATA_MEMBER].tobytes())
    meta.update(meta_changes or {})
    arrays[METADATA_MEMBER] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    for name, value in array_changes.items():
        if value is None:
            arrays.pop(name, None)
        else:
            arrays[name] = value
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


@pytest.fixture
def sparse_kernel_model(tmp_path):
    X, y = make_circles(n_samples=80, factor=0.5, noise=0.05, random_state=0)
    est = KernelPegasosSVC(lam=1e-2, batch_size=8, random_state=0).fit(sp.csr_matrix(X), y)
    path = tmp_path / "k.npz"
    save_model(est, path)
    with np.load(path) as f:
        parts = {p: f[f"support_vectors__{p}"] for p in ("data", "indices", "indptr")}
    assert parts["indices"].size > 2 and parts["indptr"].size > 3
    return path, parts, X


@pytest.mark.parametrize("damage, detail", [
    (lambda p: p["indices"].__setitem__(1, 2), "support_vectors has column indices outside "
                                                "[0, 2)"),
    (lambda p: p["indices"].__setitem__(0, 1 << 30), "support_vectors has column indices "
                                                     "outside [0, 2)"),
    (lambda p: p["indices"].__setitem__(0, -5), "support_vectors has column indices outside "
                                                "[0, 2)"),
    (lambda p: p["indptr"].__setitem__(2, p["indptr"][1] - 1),
     "the indptr of support_vectors is not a non-decreasing sequence from 0 to {nnz}"),
    (lambda p: p["indptr"].__setitem__(-1, p["indptr"][-1] + 7),
     "the indptr of support_vectors is not a non-decreasing sequence from 0 to {nnz}"),
], ids=["index-d", "index-huge", "index-negative", "indptr-decreasing", "indptr-past-the-end"])
def test_sparse_support_vectors_out_of_range_are_refused(sparse_kernel_model, damage, detail):
    path, parts, X = sparse_kernel_model
    damage(parts)
    _rewrite(path, **{f"support_vectors__{p}": v for p, v in parts.items()})
    detail = detail.format(nnz=parts["indices"].size)
    with pytest.raises(ValueError, match=f"^model file {re.escape(str(path))} is corrupted "
                                         f"\\({re.escape(detail)}\\); {AGAIN}$"):
        load_model(path)


def _peak_bytes(fn):
    import tracemalloc
    tracemalloc.start()
    try:
        fn()
    except ValueError as exc:
        error = exc
    else:
        error = None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return error, peak


def test_declared_json_array_shape_is_bounded_by_the_file(tmp_path, data):
    X, y = data
    est = PegasosSVC(batch_size=8, backend="numpy", random_state=0).fit(
        X, np.array(["ham", "spam"])[y])
    path = tmp_path / "m.npz"
    save_model(est, path)
    meta = read_model_metadata(path)
    spec = meta["json_arrays"]["classes_"]
    _rewrite(path, {"json_arrays": {"classes_": {**spec, "shape": [100_000, 50_000]}}})
    assert path.stat().st_size < 4096
    error, peak = _peak_bytes(lambda: load_model(path))
    assert peak < 20 << 20
    assert str(error) == (f"model file {path} is corrupted (classes declares shape (100000, "
                          "50000) but holds values of another shape); save the model again with "
                          "gpusvm.model_io.save_model (or `gpusvm fit`)")


def test_declared_member_shape_is_bounded_by_the_file(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    with zipfile.ZipFile(path, "w") as z:
        for name, value in arrays.items():
            with z.open(name + ".npy", "w") as out:
                if name == "coef":  # an npy header that claims 2**31 values, and 56 bytes
                    np.lib.format.write_array_header_1_0(
                        out, {"descr": "<f8", "fortran_order": False, "shape": (1, 1 << 31)})
                    out.write(value.tobytes())
                else:
                    np.lib.format.write_array(out, value)
    error, peak = _peak_bytes(lambda: load_model(path))
    assert peak < 20 << 20
    assert str(error) == (f"model file {path} is corrupted (member 'coef' declares shape (1, "
                          f"{1 << 31}) ({8 << 31} bytes) but holds 184 bytes); save the model "
                          "again with gpusvm.model_io.save_model (or `gpusvm fit`)")


def test_deeply_nested_metadata(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    blob = b'{"format": "gpusvm-model", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    _rewrite(path, **{METADATA_MEMBER: np.frombuffer(blob, dtype=np.uint8)})
    with pytest.raises(ValueError, match=f"^model file {re.escape(str(path))} is corrupted "
                                         rf"\(unreadable metadata: JSON nested too deeply\); "
                                         f"{AGAIN}$"):
        load_model(path)


def test_model_of_one_class(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    _rewrite(path, classes=np.array([1]))
    with pytest.raises(ValueError, match=r"is corrupted \(classes holds 1 values; a model "
                                         rf"separates 2 or more distinct classes\); {AGAIN}$"):
        load_model(path)
    _rewrite(path, classes=np.array([1, 1]))
    with pytest.raises(ValueError, match=r"is corrupted \(classes holds 2 values; a model "
                                         rf"separates 2 or more distinct classes\); {AGAIN}$"):
        load_model(path)


@pytest.mark.parametrize("field, change, detail", [
    ("attributes", {"predict": 1}, "'predict' is not a fitted attribute of PegasosSVC"),
    ("attributes", {"__class__": "x"}, "'__class__' is not a fitted attribute of PegasosSVC"),
    ("attributes", {"n_features_in_": "7"}, "n_features_in_ = '7'"),
    ("arrays", {"coef_": "intercept"}, "coef has shape (1,), expected (1, 7)"),
    ("arrays", {"coef_": "classes"}, "coef is missing or not a float array"),
    ("params", {"lam": -1.0}, "The 'lam' parameter of PegasosSVC must be a float in the range "
                              "(0.0, inf) or None. Got -1.0 instead."),
], ids=["method", "dunder", "n-features-type", "coef-shape", "coef-dtype", "param"])
def test_tampered_attributes(tmp_path, fitted, field, change, detail):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    meta = read_model_metadata(path)
    _rewrite(path, {field: {**meta[field], **change}})
    with pytest.raises(ValueError, match=f"^model file {re.escape(str(path))} is corrupted "
                                         f"\\({re.escape(detail)}\\); {AGAIN}$"):
        load_model(path)


def test_non_finite_coefficients(tmp_path, fitted):
    path = tmp_path / "m.npz"
    save_model(fitted, path)
    _rewrite(path, coef=np.full((1, 7), np.nan))
    with pytest.raises(ValueError, match=rf"is corrupted \(coef holds NaN or infinity\); {AGAIN}$"):
        load_model(path)


# ------------------------------------------------------------------ format 2: multiclass models
DATA_DIR = Path(__file__).parent / "data"


@pytest.mark.parametrize("multi_class, n_outputs", [("ovr", 4), ("ovo", 6), ("ordinal", 3)])
def test_multiclass_round_trip(tmp_path, multi_class, n_outputs):
    X, y = make_classification(n_samples=200, n_features=6, n_informative=4, n_classes=4,
                               random_state=0)
    labels = np.array(["a", "b", "c", "d"])[y]
    est = SDCASVC(C=2.0, loss="squared_hinge", solver="newton", multi_class=multi_class,
                  class_weight="balanced", backend="numpy").fit(X, labels)
    path = tmp_path / "mc.npz"
    save_model(est, path)
    loaded = load_model(path)
    assert loaded.coef_.shape == (n_outputs, 6) and loaded.intercept_.shape == (n_outputs,)
    assert loaded.get_params() == est.get_params()
    np.testing.assert_array_equal(loaded.classes_, est.classes_)
    np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    meta = read_model_metadata(path)
    assert meta["format_version"] == FORMAT_VERSION == 2
    assert meta["model"] == {"n_classes": 4, "n_outputs": n_outputs, "loss": "squared_hinge",
                             "multi_class": multi_class, "C": 2.0,
                             "lam": np.asarray(est.lam_).tolist()}


def test_multiclass_coef_of_the_wrong_number_of_outputs_is_refused(tmp_path):
    X, y = make_classification(n_samples=150, n_features=5, n_informative=3, n_classes=3,
                               random_state=1)
    est = SDCASVC(loss="squared_hinge", solver="newton", multi_class="ovo",
                  backend="numpy").fit(X, y)
    path = tmp_path / "mc.npz"
    save_model(est, path)
    _rewrite(path, {"params": {**read_model_metadata(path)["params"], "multi_class": "ordinal"}})
    with pytest.raises(ValueError, match=r"is corrupted \(coef has shape \(3, 5\), expected "
                                         rf"\(2, 5\)\); {AGAIN}$"):
        load_model(path)


@pytest.mark.parametrize("name, cls", [("pegasos", PegasosSVC), ("sdca", SDCASVC),
                                       ("kernel", KernelPegasosSVC)])
def test_format_1_files_still_load(name, cls):
    # written by gpusvm 0.x with model format version 1 (binary models, no C, loss or
    # multi_class parameters), with the decision values they gave then
    path = DATA_DIR / f"model_v1_{name}.npz"
    assert read_model_metadata(path)["format_version"] == 1
    with np.load(DATA_DIR / "model_v1_data.npz") as f:
        X, labels = f["X"], f["y"]
    model = load_model(path)
    assert type(model) is cls
    np.testing.assert_array_equal(model.classes_, ["ham", "spam"])
    np.testing.assert_allclose(model.decision_function(X),
                               np.load(DATA_DIR / f"model_v1_{name}_decision.npy"),
                               rtol=1e-12, atol=1e-12)
    assert model.score(X, labels) > 0.8
