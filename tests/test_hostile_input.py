"""Careless and hostile input on the multiclass surface: model files, data files, the CLI, C.

One regression test (or a few) per defect of the second bad-input round: each gives a right
result or one clear error naming what is wrong and what to do.
"""

from __future__ import annotations

import bz2
import gzip
import os
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, make_classification
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.svm import LinearSVC

from gpusvm import KernelPegasosSVC, PegasosSVC
from gpusvm.cli import main
from gpusvm.datasets import load_svmlight
from gpusvm import SDCASVC
from gpusvm.model_io import load_model, save_model


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def exactly(message):
    return f"^{re.escape(message)}$"


@pytest.fixture(scope="module")
def three_classes():
    X, y = make_classification(n_samples=240, n_features=6, n_informative=4, n_redundant=0,
                               n_classes=3, random_state=3)
    return X / np.abs(X).max(), y + 1


@pytest.fixture(scope="module")
def three_class_file(tmp_path_factory, three_classes):
    X, y = three_classes
    path = tmp_path_factory.mktemp("data") / "three.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return path


@pytest.fixture(scope="module")
def binary_file(tmp_path_factory):
    X, y = make_classification(n_samples=80, n_features=5, random_state=0)
    path = tmp_path_factory.mktemp("data") / "two.svm"
    dump_svmlight_file(X / np.abs(X).max(), np.where(y == 1, 1, -1), str(path),
                       zero_based=False)
    return path


# ------------------------------------------------------------------ 1: per-output histories
@pytest.mark.parametrize("make", [
    lambda: SDCASVC(C=1.0, backend="numpy", random_state=0, eval_every=240),
    lambda: SDCASVC(C=1.0, loss="squared_hinge", backend="numba", random_state=0),
    lambda: PegasosSVC(lam=1e-2, batch_size=8, max_iter=300, eval_every=100, backend="numpy",
                       random_state=0),
], ids=["sdca-hinge", "sdca-squared", "pegasos"])
def test_one_vs_rest_history_is_each_outputs_own(three_classes, make):
    X, y = three_classes
    est = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    assert isinstance(est.history_, list) and len(est.history_) == 3
    assert all(isinstance(h, list) and all(isinstance(row, tuple) for row in h)
               for h in est.history_)
    last = [h[-1] for h in est.history_]
    assert len({row[1] for row in last}) == 3             # three problems, three objectives
    assert [row[0] for row in last] == [est.n_iter_] * 3
    if isinstance(est, SDCASVC):
        # the last row of each output is that output's certificate
        np.testing.assert_allclose([row[3] for row in last], est.duality_gap_, rtol=1e-12)
        np.testing.assert_allclose([row[2] for row in last], est.dual_objective_, rtol=1e-12)
    else:
        # each output's objective, recomputed in float64 from its own weights (the augmented
        # bias, intercept_scaling=1, is regularised with them)
        assert est.bias == "augmented" and est.intercept_scaling == 1.0
        for c, row in enumerate(last):
            yc = np.where(y == est.classes_[c], 1.0, -1.0)
            margins = yc * (X @ est.coef_[c] + est.intercept_[c])
            objective = 0.5 * est.lam_ * (est.coef_[c] @ est.coef_[c] + est.intercept_[c] ** 2) \
                + np.maximum(0.0, 1.0 - margins).mean()
            assert row[1] == pytest.approx(objective, rel=1e-4)


def test_cli_prints_each_outputs_certificate(capsys, tmp_path, three_class_file):
    model = tmp_path / "m.npz"
    status, out, err = run(capsys, "fit", three_class_file, "--solver", "sdca", "--C", "1",
                           "--loss", "squared_hinge", "--backend", "numpy", "--out", model)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[2] == "3 outputs (ovr), last evaluation of each:"
    rows = [line.split() for line in lines[4:7]]
    assert [r[0] for r in rows] == ["1", "2", "3"]
    est = load_model(model)
    assert [float(r[-1]) for r in rows] == pytest.approx(est.duality_gap_, rel=1e-3)
    assert [float(r[-3]) for r in rows] == pytest.approx(est.primal_objective_, rel=1e-7)
    assert len({r[-1] for r in rows}) == 3


# ------------------------------------------------------------------ 2: --out /dev/null
@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null on this platform")
def test_model_written_through_dev_null(capsys, binary_file):
    status, out, err = run(capsys, "fit", binary_file, "--solver", "newton", "--backend",
                           "numpy", "--out", "/dev/null")
    # nothing on stderr but, on an empty numba cache, the one-off compilation notice
    lines = [line for line in err.splitlines() if "gpusvm: compiling " not in line]
    assert (status, lines) == (0, [])
    assert out.splitlines()[-1] == "model written to /dev/null"


def test_written_through_output_is_a_complete_archive(tmp_path, monkeypatch, three_classes):
    """Written through (a device or FIFO), the archive is streamed without seeking back, so
    a device that accepts seek() but keeps no position (/dev/null) is no problem and what a
    FIFO's reader gets loads."""
    import gpusvm._output as output

    X, y = three_classes
    est = SDCASVC(solver="newton", loss="squared_hinge", backend="numpy").fit(X, y)
    target = tmp_path / "through.npz"
    monkeypatch.setattr(output, "_target", lambda path, what: (path, True))
    assert save_model(est, target) == str(target)
    np.testing.assert_array_equal(load_model(target).coef_, est.coef_)


# ------------------------------------------------------------------ 3: no advice to unpickle
@pytest.mark.parametrize("content", [b"hello\n", b"\x93NUMPY\x01\x00garbage"],
                         ids=["text", "bad-npy"])
def test_a_non_model_file_is_not_advised_to_be_unpickled(tmp_path, capsys, content,
                                                         binary_file):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        load_model(path)
    message = str(info.value)
    assert "pickle" not in message.lower()
    assert message.startswith(f"cannot read model file {path}: it is not a")
    status, _, err = run(capsys, "predict", path, binary_file)
    assert status == 2 and "pickle" not in err.lower() and err.count("\n") == 1


def test_a_text_file_as_model_message(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(ValueError, match=exactly(
            f"cannot read model file {path}: it is not a .npz archive (it starts with b'hello\\n'"
            "); load files written by gpusvm.model_io.save_model or `gpusvm fit`")):
        load_model(path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=exactly(
            f"cannot read model file {path}: it is not a .npz archive (it is empty); load files "
            "written by gpusvm.model_io.save_model or `gpusvm fit`")):
        load_model(path)


# ------------------------------------------------------------------ 4: UTF-8 byte-order mark
@pytest.mark.parametrize("opener", [open, gzip.open, bz2.open], ids=["plain", "gz", "bz2"])
def test_utf8_byte_order_mark_is_skipped(tmp_path, opener):
    text = b"+1 1:0.5 3:1\n-1 2:0.25 # comment\n+1 qid:2 1:1\n"
    suffix = {open: "", gzip.open: ".gz", bz2.open: ".bz2"}[opener]
    plain, marked = tmp_path / f"plain.svm{suffix}", tmp_path / f"bom.svm{suffix}"
    with opener(plain, "wb") as f:
        f.write(text)
    with opener(marked, "wb") as f:
        f.write(b"\xef\xbb\xbf" + text)
    X0, y0 = load_svmlight(plain)
    X1, y1 = load_svmlight(marked)
    np.testing.assert_array_equal(y0, y1)
    assert (X0 != X1).nnz == 0 and X0.shape == X1.shape == (3, 3)


def test_byte_order_mark_then_a_bad_line_is_located(tmp_path):
    path = tmp_path / "bom.svm"
    path.write_bytes(b"\xef\xbb\xbf+1 1:0.5\n-1 2:x\n")
    with pytest.raises(ValueError, match=exactly(
            f"{path}, line 2: feature value 'x' in '2:x' is not a number")):
        load_svmlight(path)


def test_a_byte_order_mark_inside_the_file_is_still_refused(tmp_path):
    path = tmp_path / "bom.svm"
    path.write_bytes(b"+1 1:0.5\n\xef\xbb\xbf-1 2:1\n")
    with pytest.raises(ValueError, match=exactly(
            f"{path}, line 2: not ASCII text (is this a binary or compressed file without a "
            ".gz/.bz2 suffix?)")):
        load_svmlight(path)


# ------------------------------------------------------------------ 5: NaN in a data file
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e309"])
def test_non_finite_values_in_a_data_file_name_the_line(tmp_path, capsys, value):
    path = tmp_path / "d.svm"
    path.write_text(f"+1 1:0.5\n-1 1:0.25 2:{value}\n")
    message = (f"{path}, line 2: feature value {value!r} in '2:{value}' is not finite; remove "
               "or impute the missing values first (pass finite=False to load them)")
    with pytest.raises(ValueError, match=exactly(message)):
        load_svmlight(path)
    status, _, err = run(capsys, "fit", path, "--out", tmp_path / "m.npz")
    assert (status, err) == (2, f"gpusvm fit: error: {message}\n")
    X, _ = load_svmlight(path, finite=False)
    assert not np.isfinite(X.data).all()


def test_non_finite_label_names_the_line(tmp_path):
    path = tmp_path / "d.svm"
    path.write_text("+1 1:0.5\nnan 1:0.25\n")
    with pytest.raises(ValueError, match=exactly(
            f"{path}, line 2: label 'nan' is not finite; remove or impute the missing values "
            "first (pass finite=False to load them)")):
        load_svmlight(path)


# ------------------------------------------------------------------ 6: uncreatable --out
@pytest.mark.skipif(not os.path.isfile("/proc/version"), reason="needs Linux's /proc")
def test_out_where_nothing_can_be_created(capsys, binary_file):
    status, out, err = run(capsys, "fit", binary_file, "--backend", "numpy", "--out",
                           "/proc/version")
    assert status == 2 and out == ""                       # refused before the fit
    assert err == ("gpusvm fit: error: cannot write the model to /proc/version: a file cannot be "
                   "created in /proc ([Errno 2] No such file or directory); pass a path in a "
                   "writable directory\n")


def test_failed_temporary_file_names_the_target(tmp_path, monkeypatch, three_classes):
    """Creating the temporary file fails after the check (the directory vanished, a full
    inode table): the error names the target and the cause, never the temporary name."""
    import gpusvm._output as output

    X, y = three_classes
    est = SDCASVC(solver="newton", loss="squared_hinge", backend="numpy").fit(X, y)
    target = tmp_path / "m.npz"

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(output.tempfile, "mkstemp", refuse)
    with pytest.raises(OSError, match=exactly(
            f"cannot write the model to {target}: a file cannot be created in {tmp_path} "
            "([Errno 13] Permission denied); pass a path in a writable directory")):
        save_model(est, target)


# ------------------------------------------------------------------ 7: absurd C
@pytest.fixture(scope="module")
def three_hundred():
    X, y = make_classification(n_samples=300, n_features=10, weights=[0.54], random_state=0)
    return X, y


@pytest.mark.parametrize("cls", [PegasosSVC, SDCASVC])
def test_a_regularisation_the_dtype_cannot_carry_is_refused(three_hundred, cls):
    X, y = three_hundred
    with pytest.raises(ValueError, match=exactly(
            "C=1e-300 (lam = 1/(C n) = 3.33e+297) is too large a regularisation for "
            "dtype=float32: the weights, of size about max ||x_i|| / lam = 1.95e-297, have "
            "squares below the smallest normal float32 (weights below 1.08e-19); use C >= "
            "5.6e-23 or dtype='float64'")):
        cls(C=1e-300, backend="numpy", random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="lam=1e\\+40 is too large a regularisation for "
                                         "dtype=float32"):
        cls(lam=1e40, backend="numpy", random_state=0).fit(X, y)
    with pytest.raises(ValueError, match=re.escape(
            "C=1e-300 (lam = 1/(C n) = 3.33e+297) is too large a regularisation for "
            "dtype=float64: the weights, of size about max ||x_i|| / lam = 1.95e-297, have "
            "squares below the smallest normal float64 (weights below 1.49e-154); use C >= ")):
        cls(C=1e-300, dtype="float64", backend="numpy", random_state=0).fit(X, y)


def test_newton_with_a_huge_regularisation(three_hundred):
    """Found by the property-based tests: the Newton step's curvature lam ||p||^2 underflowed
    to 0 at C=1e-300 in float64 (ZeroDivisionError)."""
    X, y = three_hundred
    with pytest.raises(ValueError, match="too large a regularisation for dtype=float64"):
        SDCASVC(C=1e-300, loss="squared_hinge", solver="newton", dtype="float64").fit(X, y)
    est = SDCASVC(C=1e-100, loss="squared_hinge", solver="newton", dtype="float64").fit(X, y)
    # every margin is about 0, so w = (2/(lam n)) sum_i y_i x_i (1 - m_i) = 2 C sum_i y_i x_i
    # to 1e-90 (LinearSVC's primal solver returns w = 0 at this C)
    signs = np.where(y == 1, 1.0, -1.0)
    augmented = np.hstack([X, np.ones((X.shape[0], 1))])
    expected = 2e-100 * (augmented.T @ signs)
    np.testing.assert_allclose(np.append(est.coef_[0], est.intercept_[0]), expected, rtol=1e-9)


@pytest.mark.parametrize("cls", [PegasosSVC, SDCASVC])
def test_tiny_c_in_float64_agrees_with_linearsvc(three_hundred, cls):
    X, y = three_hundred
    ref = LinearSVC(C=1e-100, loss="hinge").fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = cls(C=1e-100, dtype="float64", backend="numpy", random_state=0, max_iter=50,
                  batch_size=32).fit(X, y)
    agreement = np.mean(est.predict(X) == ref.predict(X))
    assert agreement >= 0.97 and est.score(X, y) >= ref.score(X, y) - 0.02


# ------------------------------------------------------------------ 8: pipelines via skops
def test_save_model_of_a_pipeline_points_to_skops(three_classes):
    X, y = three_classes
    pipe = make_pipeline(MaxAbsScaler(), PegasosSVC(max_iter=100, batch_size=16, backend="numpy",
                                                    random_state=0)).fit(X, y)
    with pytest.raises(TypeError, match=exactly(
            "save_model saves gpusvm estimators; got sklearn.pipeline.Pipeline: save a "
            "Pipeline or any other scikit-learn object holding gpusvm estimators without pickle "
            "with skops: skops.io.dump(obj, path), then skops.io.load(path, "
            "trusted=gpusvm.model_io.skops_trusted_types()) (pip install \"gpusvm[skops]\")")):
        save_model(pipe, "never.npz")


def test_pipelines_round_trip_through_skops(tmp_path, three_classes):
    sio = pytest.importorskip("skops.io", reason="the [test] extra installs skops")
    from gpusvm.model_io import skops_trusted_types

    X, y = three_classes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = make_pipeline(MaxAbsScaler(), SDCASVC(C=1.0, loss="squared_hinge",
                                                     solver="newton", multi_class="ovo",
                                                     backend="numpy")).fit(X, y)
        kernel = KernelPegasosSVC(max_iter=200, batch_size=8, random_state=0).fit(X, y == 1)
    path = tmp_path / "pipe.skops"
    sio.dump(pipe, path)
    untrusted = sio.get_untrusted_types(file=path)
    assert untrusted == ["gpusvm.estimators.sdca.SDCASVC"]
    with pytest.raises(Exception, match="Untrusted types found"):
        sio.load(path)
    assert set(untrusted) <= set(skops_trusted_types())
    restored = sio.load(path, trusted=skops_trusted_types())
    np.testing.assert_array_equal(restored.predict(X), pipe.predict(X))
    np.testing.assert_array_equal(restored[-1].coef_, pipe[-1].coef_)
    blob = sio.dumps(kernel)
    np.testing.assert_array_equal(sio.loads(blob, trusted=skops_trusted_types()).predict(X),
                                  kernel.predict(X))


def test_skops_state_is_checked_like_a_model_file(three_classes):
    """A tampered skops file reaches the estimator through ``__setstate__``: its fitted
    arrays are checked as :func:`load_model` checks a model file's."""
    X, y = three_classes
    est = PegasosSVC(max_iter=100, batch_size=16, backend="numpy", random_state=0).fit(X, y)
    state = est.__getstate__()
    state["coef_"] = state["coef_"][:2]
    with pytest.raises(ValueError, match=exactly(
            "the restored PegasosSVC is inconsistent (coef has shape (2, 6), expected (3, 6)); "
            "it was altered or not written by gpusvm: fit the estimator again")):
        PegasosSVC.__new__(PegasosSVC).__setstate__(state)
    kernel = KernelPegasosSVC(max_iter=200, batch_size=8, random_state=0).fit(sp.csr_matrix(X),
                                                                              y == 1)
    state = kernel.__getstate__()
    sv = state["support_vectors_"].copy()
    sv.indices[0] = 10**6
    state["support_vectors_"] = sv
    with pytest.raises(ValueError, match="the restored KernelPegasosSVC is inconsistent"):
        KernelPegasosSVC.__new__(KernelPegasosSVC).__setstate__(state)
    unfitted = PegasosSVC(C=2.0)
    clone = PegasosSVC.__new__(PegasosSVC)
    clone.__setstate__(unfitted.__getstate__())
    assert clone.C == 2.0
