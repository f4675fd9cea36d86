"""The gpusvm command: fit, predict, demo, info, spectral wiring, and its error contract."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file, make_classification

import gpusvm
import gpusvm.backends
from gpusvm import __version__
from gpusvm.cli import default_model_path, format_label, main
from gpusvm.model_io import load_model, read_model_metadata


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    X, y = make_classification(n_samples=300, n_features=12, n_informative=6, random_state=0)
    path = tmp_path_factory.mktemp("data") / "toy.train.svm"
    dump_svmlight_file(X, np.where(y == 1, 1, -1), str(path), zero_based=False)
    return path


def run(capsys, *argv):
    """Run ``gpusvm argv...``; return (status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status, err, message):
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.strip() == message


# ------------------------------------------------------------------ fit / predict
def test_fit_reports_trace_accuracy_and_writes_default_model(capsys, tmp_path, monkeypatch,
                                                             train_file):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "fit", train_file, "--solver", "pegasos", "--lam", "1e-2",
                           "--batch-size", "16", "--max-iter", "200", "--eval-every", "50",
                           "--backend", "numpy")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == (f"gpusvm fit: {train_file}: n=300 d=12 nnz=3600; PegasosSVC(lam=0.01, "
                        "batch_size=16, max_iter=200, eval_every=50, backend='numpy', "
                        "random_state=0)")
    assert lines[1] == "backend: numpy"
    assert lines[2].split() == ["iteration", "objective", "P(w)", "seconds"]
    assert [int(line.split()[0]) for line in lines[3:7]] == [50, 100, 150, 200]
    assert re.fullmatch(r"stopped after 200 iterations \(max_iter\), \d+\.\d\d s", lines[7])
    accuracy = float(re.fullmatch(r"training accuracy: (\d\.\d{4})", lines[8]).group(1))
    assert lines[9] == "model written to toy.train.npz"
    model = load_model(tmp_path / "toy.train.npz")
    assert model.n_iter_ == 200 and model.lam == 1e-2 and model.random_state == 0
    assert [round(h[1], 8) for h in model.history_] == [float(line.split()[1])
                                                         for line in lines[3:7]]
    assert accuracy > 0.8


def test_fit_then_predict(capsys, tmp_path, train_file):
    model = tmp_path / "m.npz"
    status, out, _ = run(capsys, "fit", train_file, "--solver", "pegasos", "--lam", "1e-2",
                         "--batch-size", "32", "--normalize", "--backend", "numpy", "--out",
                         model, "--dtype", "float64")
    assert status == 0
    train_acc = re.search(r"training accuracy: (\S+)", out).group(1)
    assert read_model_metadata(model)["extra"]["normalize"] is True
    preds = tmp_path / "pred.txt"
    status, out, err = run(capsys, "predict", model, train_file, "--out", preds)
    assert status == 0 and err == ""
    assert out.splitlines() == [
        f"gpusvm predict: {train_file}: n=300 with {model} (PegasosSVC, 12 features)",
        f"accuracy: {train_acc}",  # the same rows, normalised the same way
        f"predictions written to {preds}"]
    written = preds.read_text().splitlines()
    assert len(written) == 300 and set(written) <= {"-1", "1"}


def test_predict_labels_that_are_not_the_classes(capsys, tmp_path, train_file):
    model = tmp_path / "m.npz"
    assert run(capsys, "fit", train_file, "--backend", "numpy", "--out", model)[0] == 0
    unlabelled = tmp_path / "new.svm"
    unlabelled.write_text("0 1:0.5 3:1\n0 2:1\n")
    status, out, _ = run(capsys, "predict", model, unlabelled)
    assert status == 0
    assert ("accuracy: not computed (the labels of DATA are not the model's classes -1, 1)"
            in out.splitlines())


def test_predict_data_with_too_many_features(capsys, tmp_path, train_file):
    model = tmp_path / "m.npz"
    assert run(capsys, "fit", train_file, "--backend", "numpy", "--out", model)[0] == 0
    wide = tmp_path / "wide.svm"
    wide.write_text("1 1:1\n-1 2:1 40:1\n")
    status, _, err = run(capsys, "predict", model, wide)
    # predict has no --n-features option: the message must not suggest one
    assert_one_line_error(status, err, (
        f"gpusvm predict: error: {wide}, line 2: feature index 40 needs 40 features but the "
        f"model {model} was trained on 12 features (indices 1 to 12); DATA must use the "
        "training data's features"))


def test_fit_progress_bar_shows_the_objective(capsys, tmp_path, train_file):
    status, _, err = run(capsys, "fit", train_file, "--solver", "pegasos", "--backend", "numpy",
                         "--batch-size", "8", "--out", tmp_path / "m.npz", "--progress")
    assert status == 0
    assert "objective=" in err and "100%" in err


@pytest.mark.parametrize("C", ["1", "0.001"])
def test_fit_default_solver_is_the_one_linearsvc_chooses(capsys, tmp_path, train_file, C):
    from gpusvm import LinearSVC
    from gpusvm.datasets import load_svmlight

    model = tmp_path / "m.npz"
    status, out, _ = run(capsys, "fit", train_file, "--C", C, "--backend", "numpy", "--out",
                         model)
    assert status == 0
    X, y = load_svmlight(train_file)
    chosen = LinearSVC(C=float(C), backend="numpy").fit(X, y).solver_
    assert out.splitlines()[0].endswith(
        f"SDCASVC(C={float(C)}, loss='squared_hinge', tol=0.0001, backend='numpy', "
        f"random_state=0, solver={chosen!r})")
    assert load_model(model).solver == chosen
    assert {"1": "newton", "0.001": "sdca"}[C] == chosen      # both branches of the rule


def test_fit_sdca(capsys, tmp_path, train_file):
    model = tmp_path / "s.npz"
    status, out, _ = run(capsys, "fit", train_file, "--solver", "sdca", "--lam", "1e-2",
                         "--batch-size", "8", "--backend", "numpy", "--out", model)
    assert status == 0
    lines = out.splitlines()
    assert lines[2].split() == ["iteration", "objective", "P(w)", "dual", "D(alpha)", "gap",
                                "seconds"]
    est = load_model(model)
    assert type(est).__name__ == "SDCASVC"
    first = lines[3].split()
    assert [int(first[0]), float(first[1]), float(first[2])] == [
        est.history_[0][0], round(est.history_[0][1], 8), round(est.history_[0][2], 8)]
    assert float(first[3]) == pytest.approx(est.history_[0][3], rel=1e-3)


def test_a_compilation_in_the_background_does_not_swallow_the_warnings(capsys, tmp_path,
                                                                        train_file, monkeypatch):
    """numba compiles inside ``warnings.catch_warnings(record=True)``, which swaps the process'
    warning handler and puts the old one back when it ends.  A compilation queued by an earlier
    fit (``AHEAD``) that began before the command and ended during it put back the handler of
    before the command, and the command's warning went there.  The command now waits for the
    queue first, so its warning is still one line of its own."""
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    from gpusvm import cli  # noqa: PLC0415
    from gpusvm.backends import _compile_nb  # noqa: PLC0415

    monkeypatch.setenv("GPUSVM_COMPILE_AHEAD", "1")
    inside, reading = threading.Event(), threading.Event()

    class Compilation:                       # what numba's WarningsFixer does around a pass
        overloads: dict = {}

        def typeof_pyval(self, value):
            return type(value)

        def compile(self, sig):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                inside.set()
                reading.wait(timeout=1.0)    # the command reads its data meanwhile
            for w in caught:
                warnings.warn_explicit(str(w.message), w.category, w.filename, w.lineno)

    monkeypatch.setattr(_compile_nb, "in_disk_cache", lambda *a, **k: False)
    real_read = cli._read_training_data

    def read(args):
        reading.set()
        time.sleep(0.2)                      # the compilation ends here, without the wait
        return real_read(args)
    monkeypatch.setattr(cli, "_read_training_data", read)
    assert not _compile_nb.AHEAD.ready(Compilation(), (1.0,))
    assert inside.wait(timeout=5.0)
    status, _, err = run(capsys, "fit", train_file, "--solver", "sdca", "--max-iter", "3",
                         "--backend", "numpy", "--out", tmp_path / "s.npz")
    assert status == 0
    assert err.startswith("gpusvm fit: warning: SDCA stopped after max_iter=3 iterations")
    assert err.count("\n") == 1


def test_fit_sdca_rejects_pegasos_options(capsys, tmp_path, train_file):
    status, _, err = run(capsys, "fit", train_file, "--solver", "sdca", "--averaging", "tail",
                         "--out", tmp_path / "s.npz")
    assert_one_line_error(status, err, "gpusvm fit: error: --averaging is not an option of the "
                                       "sdca solver (SDCASVC)")


def test_warnings_are_one_line(capsys, tmp_path, train_file):
    status, _, err = run(capsys, "fit", train_file, "--solver", "sdca", "--max-iter", "3",
                         "--backend", "numpy", "--out", tmp_path / "s.npz")
    assert status == 0
    assert err == ("gpusvm fit: warning: SDCA stopped after max_iter=3 iterations with duality "
                   f"gap {load_model(tmp_path / 's.npz').duality_gap_:.3g} > tol=0.001; increase "
                   "max_iter; at batch_size=1 every variant takes the same step (with a small "
                   "lam, loss='squared_hinge' and solver='newton' take few iterations)\n")


# ------------------------------------------------------------------ errors: one line, exit 2
@pytest.mark.parametrize("argv, message", [
    (["fit", "missing.svm"], "gpusvm fit: error: svmlight file not found: missing.svm"),
    (["fit", "{train}", "--lam", "-1"],
     "gpusvm fit: error: The 'lam' parameter of SDCASVC must be a float in the range "
     "(0.0, inf) or None. Got -1.0 instead."),
    (["fit", "{train}", "--batch-size", "301", "--backend", "numpy"],
     "gpusvm fit: error: batch_size=301 exceeds the number of samples n=300; choose 1 <= "
     "batch_size <= 300"),
    (["fit", "{train}", "--lam", "abc"],
     "gpusvm fit: error: argument --lam: invalid float value: 'abc' (see `gpusvm fit --help`)"),
    (["fit", "{train}", "--solver", "svm"],  # argparse quotes the choices on newer Pythons
     re.compile(r"gpusvm fit: error: argument --solver: invalid choice: 'svm' \(choose from "
                r"'?auto'?, '?pegasos'?, '?sdca'?, '?newton'?\) \(see `gpusvm fit --help`\)")),
    (["predict", "missing.npz", "{train}"],
     "gpusvm predict: error: model file not found: missing.npz"),
    ([], "gpusvm: error: the following arguments are required: COMMAND (see `gpusvm --help`)"),
    (["train"], re.compile(r"gpusvm: error: argument COMMAND: invalid choice: 'train' .*"
                           r"\(see `gpusvm --help`\)")),
])
def test_errors_print_one_line_and_exit_2(capsys, train_file, argv, message):
    status, out, err = run(capsys, *[a.format(train=train_file) for a in argv])
    if isinstance(message, re.Pattern):
        assert status == 2 and err.count("\n") == 1
        assert message.fullmatch(err.strip()), err
    else:
        assert_one_line_error(status, err, message)
    if "--batch-size" not in argv:  # the others fail before any work is reported
        assert out == ""


def test_malformed_data_file(capsys, tmp_path):
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:1\n-1 2:oops\n")
    status, _, err = run(capsys, "fit", bad)
    assert_one_line_error(status, err, (f"gpusvm fit: error: {bad}, line 2: feature value "
                                        "'oops' in '2:oops' is not a number"))


def test_corrupted_model_file(capsys, tmp_path, train_file):
    model = tmp_path / "m.npz"
    model.write_bytes(b"PK\x03\x04 broken")
    status, _, err = run(capsys, "predict", model, train_file)
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(f"gpusvm predict: error: cannot read model file {model}: it is not a "
                          "valid .npz archive")


def test_help_and_version(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    for command in ("fit", "predict", "demo", "info", "spectral"):
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), command
    status, out, _ = run(capsys, "--version")
    assert status == 0 and out.strip() == f"gpusvm {__version__}"


def test_python_dash_m(tmp_path):
    # run the gpusvm under test, wherever it is imported from
    root = str(Path(gpusvm.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "gpusvm", "fit", "nope.svm"], cwd=tmp_path,
                          capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 2
    assert proc.stderr == "gpusvm fit: error: svmlight file not found: nope.svm\n"


# ------------------------------------------------------------------ info, spectral, demo
def test_info(capsys):
    status, out, _ = run(capsys, "info")
    assert status == 0
    assert f"gpusvm       {__version__}" in out.splitlines()
    for name in ("numpy", "scipy", "sklearn", "cupy", "cuda-python"):
        assert re.search(rf"^{name}\s+\S", out, re.MULTILINE), name
    assert "  numpy      yes (NumPy/SciPy reference backend, always available)" in out
    assert re.search(r"^GPU\s+", out, re.MULTILINE)
    assert re.search(r"^  cupy       (yes|no) ", out, re.MULTILINE)
    assert re.search(r"^  emulated   (yes|no) ", out, re.MULTILINE)
    if "numba" in gpusvm.backends.BACKENDS:
        assert re.search(r"^  numba      (yes|no) ", out, re.MULTILINE)
    assert f"  auto       -> {gpusvm.backends.resolve_backend_name('auto')}" in out.splitlines()


@pytest.mark.parametrize("command", ["fit", "select"])
def test_a_backend_that_cannot_run_is_refused_before_the_data_is_read(capsys, monkeypatch,
                                                                        tmp_path, command):
    monkeypatch.setitem(sys.modules, "gpusvm_emulator", None)
    status, _, err = run(capsys, command, str(tmp_path / "not_read.svm"), "--backend", "emulated")
    assert status == 2
    assert err.strip().splitlines()[-1] == (f"gpusvm {command}: error: "
                                            + gpusvm.backends.NO_EMULATOR)


def test_info_on_a_plain_install(capsys, monkeypatch):
    # `pip install gpusvm` alone: neither cuda-python (whose `cuda` namespace is then missing,
    # so that finding "cuda.bindings" raises) nor the kernel emulator
    for name in [m for m in sys.modules if m.startswith("cuda.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "gpusvm_emulator", None)
    status, out, err = run(capsys, "info")
    assert status == 0, err
    assert re.search(r"^cuda-python\s+not installed$", out, re.MULTILINE)
    assert ("  emulated   no (the CPU kernel emulator is a package of its own: "
            "pip install ./emulator)") in out.splitlines()
    assert re.search(r"^kernels      .*kernels \(\d+ \.cu files?\)$", out, re.MULTILINE)


def test_spectral_subcommand_is_wired(capsys, train_file):
    status, out, _ = run(capsys, "spectral", train_file)
    assert status == 0
    assert re.search(r"^sigma\^2 = .* = \d", out, re.MULTILINE)


def test_demo(capsys):
    status, out, _ = run(capsys, "demo", "--backend", "numpy")
    assert status == 0
    trace = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d+\.\d\s", line)]
    assert len(trace) == 10 and float(trace[-1][1]) == 100.0
    gap = float(re.search(r"P\(w\) - P\* = (\S+) ", out).group(1))
    test_accuracy = float(re.search(r"^a9a test accuracy: (\S+)$", out, re.MULTILINE).group(1))
    assert test_accuracy >= 0.84
    assert 0 <= gap < 1e-3
    assert float(trace[-1][3]) == pytest.approx(gap, rel=1e-3)  # the trace's last P - P*


# ------------------------------------------------------------------ helpers
@pytest.mark.parametrize("data, model", [
    ("a9a", "a9a.npz"), ("/x/y/a9a.t", "a9a.npz"), ("train.svm.gz", "train.npz"),
    ("dir/imdb.train.svm.bz2", "imdb.train.npz"), ("data.svm", "data.npz")])
def test_default_model_path(data, model):
    assert default_model_path(data) == model


@pytest.mark.parametrize("value, text", [(1.0, "1"), (-1.0, "-1"), (np.float64(2.5), "2.5"),
                                         (np.int64(3), "3"), ("spam", "spam")])
def test_format_label(value, text):
    assert format_label(value) == text


# ------------------------------------------------------------------ hostile inputs and outputs
def test_out_follows_a_symbolic_link(capsys, tmp_path, train_file):
    target = tmp_path / "real.npz"
    target.write_bytes(b"old")
    link = tmp_path / "link.npz"
    link.symlink_to(target)
    status, _, err = run(capsys, "fit", train_file, "--backend", "numpy", "--out", link)
    assert status == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert load_model(target).n_features_in_ == 12


def test_out_writes_through_a_fifo(capsys, tmp_path, train_file):
    import threading
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    status, _, err = run(capsys, "fit", train_file, "--backend", "numpy", "--out", fifo)
    reader.join(timeout=30)
    assert status == 0, err
    assert fifo.is_fifo()                                    # not replaced by a regular file
    copy = tmp_path / "copy.npz"
    copy.write_bytes(received[0])
    assert load_model(copy).n_features_in_ == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.npz", "pipe"]


def test_out_writes_through_a_character_device(capsys, tmp_path, train_file):
    model = tmp_path / "m.npz"
    assert run(capsys, "fit", train_file, "--backend", "numpy", "--out", model)[0] == 0
    status, out, err = run(capsys, "predict", model, train_file, "--out", os.devnull)
    assert status == 0, err
    assert Path(os.devnull).is_char_device()
    assert f"predictions written to {os.devnull}" in out


def test_out_directory_and_empty_path_are_refused(capsys, tmp_path, train_file):
    status, out, err = run(capsys, "fit", train_file, "--backend", "numpy", "--out", tmp_path)
    assert_one_line_error(status, err, (
        f"gpusvm fit: error: cannot write the model to {tmp_path}: it is a directory; pass a "
        "file name"))
    assert out == ""                                     # refused before any training
    status, out, err = run(capsys, "fit", train_file, "--out", "")
    assert_one_line_error(status, err, (
        "gpusvm fit: error: argument --out: the path is empty; pass a file name, or leave --out "
        "out for the default (see `gpusvm fit --help`)"))
    assert out == ""


def test_predict_out_is_atomic(capsys, tmp_path, train_file, monkeypatch):
    model = tmp_path / "m.npz"
    assert run(capsys, "fit", train_file, "--backend", "numpy", "--out", model)[0] == 0
    preds = tmp_path / "pred.txt"
    preds.write_text("old predictions\n")
    calls = {"n": 0}
    real = gpusvm.cli.format_label

    def disk_full_after_100(value):
        calls["n"] += 1
        if calls["n"] > 100:
            raise OSError(28, "No space left on device")
        return real(value)

    monkeypatch.setattr(gpusvm.cli, "format_label", disk_full_after_100)
    status, _, err = run(capsys, "predict", model, train_file, "--out", preds)
    assert_one_line_error(status, err, "gpusvm predict: error: [Errno 28] No space left on device")
    assert preds.read_text() == "old predictions\n"             # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz", "pred.txt"]  # no half file
    monkeypatch.setattr(gpusvm.cli, "format_label", real)
    assert run(capsys, "predict", model, train_file, "--out", preds)[0] == 0
    assert len(preds.read_text().splitlines()) == 300


def test_output_files_follow_the_umask(capsys, tmp_path, train_file):
    old = os.umask(0o027)
    try:
        model, preds = tmp_path / "m.npz", tmp_path / "p.txt"
        assert run(capsys, "fit", train_file, "--backend", "numpy", "--out", model)[0] == 0
        assert run(capsys, "predict", model, train_file, "--out", preds)[0] == 0
    finally:
        os.umask(old)
    assert model.stat().st_mode & 0o777 == 0o640
    assert preds.stat().st_mode & 0o777 == 0o640


def test_a_stray_index_0_does_not_shift_the_columns(capsys, tmp_path, shared_data):
    """a9a.t with one stray ``0:`` term: predict reads it with the model's (one-based) base."""
    import gzip
    train = shared_data / "a9a" / "a9a"
    model = tmp_path / "a9a.npz"
    status, out, err = run(capsys, "fit", train, "--backend", "numpy", "--batch-size", "64",
                           "--lam", "1e-4", "--max-iter", "500", "--out", model)
    assert status == 0 and err == ""
    assert read_model_metadata(model)["extra"]["zero_based"] is False
    lines = (shared_data / "a9a" / "a9a.t").read_text().splitlines(keepends=True)
    label, rest = lines[4].split(" ", 1)
    lines[4] = f"{label} 0:1 {rest}"
    stray = tmp_path / "a9a.t.gz"
    stray.write_bytes(gzip.compress("".join(lines).encode()))
    status, out, err = run(capsys, "predict", model, stray)
    assert_one_line_error(status, err, (
        f"gpusvm predict: error: {stray}, line 5: feature index 0 in '0:1', but the file is read "
        "as one-based (LIBSVM: indices start at 1); pass zero_based=True if the file is "
        "zero-based"))
    # fit with --zero-based auto warns on one line and records the base it chose
    status, out, err = run(capsys, "fit", stray, "--backend", "numpy", "--max-iter", "10",
                           "--out", tmp_path / "z.npz")
    assert status == 0
    assert err == (f"gpusvm fit: warning: {stray}: index 0 occurs (first on line 5), so the "
                   "whole file is read as zero-based; if it is a one-based (LIBSVM) file, that "
                   "line is an error and every column would shift by one: pass "
                   "zero_based=False to refuse index 0, or zero_based=True to read the file as "
                   "zero-based without this warning\n")
    assert read_model_metadata(tmp_path / "z.npz")["extra"]["zero_based"] is True
    status, _, err = run(capsys, "fit", stray, "--zero-based", "no", "--out", tmp_path / "n.npz")
    assert status == 2 and "line 5: feature index 0 in '0:1'" in err


def test_a_huge_index_in_a_tiny_file_allocates_nothing(capsys, tmp_path):
    wide = tmp_path / "wide.svm"
    wide.write_text("+1 2000000000:1\n-1 1:1\n")            # 24 bytes, 2e9 columns
    status, out, err = run(capsys, "fit", wide, "--backend", "numpy", "--dtype", "float64",
                           "--out", tmp_path / "m.npz")
    assert_one_line_error(status, err, (
        f"gpusvm fit: error: {wide}, line 1: feature index 2000000000 makes the data 2000000000 "
        "columns wide for 2 rows and 2 nonzeros (a weight vector alone would take 14.9 GiB); if "
        "the data really has that many features, pass n_features explicitly"))


def test_memory_error_is_one_line(capsys, tmp_path, train_file, monkeypatch):
    import gpusvm.datasets

    def no_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(gpusvm.datasets, "load_svmlight", no_memory)
    status, _, err = run(capsys, "fit", train_file, "--out", tmp_path / "m.npz")
    assert_one_line_error(status, err, (
        "gpusvm fit: error: out of memory (MemoryError); use smaller data (check DATA's largest "
        "feature index: it sets the number of columns) or a machine with more memory"))


def test_closed_pipe_is_silent(train_file):
    env = {**os.environ, "PYTHONPATH": str(Path(gpusvm.__file__).parent.parent)}
    proc = subprocess.Popen([sys.executable, "-m", "gpusvm", "spectral", str(train_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()                                   # `| head -0`: the reader is gone
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


# ------------------------------------------------------------------ multiclass models
@pytest.fixture(scope="module")
def multiclass_file(tmp_path_factory):
    X, y = make_classification(n_samples=300, n_features=8, n_informative=5, n_classes=4,
                               random_state=2)
    path = tmp_path_factory.mktemp("data") / "four.svm"
    dump_svmlight_file(X / np.abs(X).max(), y + 1, str(path), zero_based=False)
    return path


@pytest.mark.parametrize("mode, outputs", [("ovr", ["1 vs rest", "2 vs rest", "3 vs rest",
                                                     "4 vs rest"]),
                                           ("ovo", ["2 vs 1", "3 vs 1", "4 vs 1", "3 vs 2",
                                                    "4 vs 2", "4 vs 3"]),
                                           ("ordinal", ["2 vs 1", "3 vs 2", "4 vs 3"])])
def test_fit_and_predict_a_multiclass_model(capsys, tmp_path, multiclass_file, mode, outputs):
    model = tmp_path / "m.npz"
    status, out, err = run(capsys, "fit", multiclass_file, "--solver", "newton", "--C", "1",
                           "--multi-class", mode, "--class-weight", "balanced", "--backend",
                           "numpy", "--out", model)
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == (f"gpusvm fit: {multiclass_file}: n=300 d=8 nnz=2400; SDCASVC(C=1.0, "
                        f"loss='squared_hinge', class_weight='balanced', multi_class='{mode}', "
                        "solver='newton', backend='numpy', random_state=0)")
    assert lines[2] == f"{len(outputs)} outputs ({mode}), last evaluation of each:"
    assert [line[:24].strip() for line in lines[4:4 + len(outputs)]] == outputs
    train_acc = re.search(r"training accuracy: (\S+)", out).group(1)
    est = load_model(model)
    assert est.coef_.shape == (len(outputs), 8) and list(est.classes_) == [1, 2, 3, 4]
    preds = tmp_path / "p.txt"
    status, out, err = run(capsys, "predict", model, multiclass_file, "--out", preds)
    assert status == 0 and err == ""
    assert out.splitlines()[1] == f"accuracy: {train_acc}"
    assert set(preds.read_text().split()) <= {"1", "2", "3", "4"}


def test_class_weight_pairs(capsys, tmp_path, train_file):
    model = tmp_path / "w.npz"
    status, _, err = run(capsys, "fit", train_file, "--solver", "newton", "--class-weight",
                         "1:3,-1:0.5", "--backend", "numpy", "--out", model)
    assert status == 0 and err == ""
    assert load_model(model).class_weight == {1: 3.0, -1: 0.5}


@pytest.mark.parametrize("argv, message", [
    (["--class-weight", "heavy"],
     "gpusvm fit: error: argument --class-weight: expected balanced or LABEL:WEIGHT pairs "
     "separated by commas (e.g. 1:5,-1:1), got 'heavy' (see `gpusvm fit --help`)"),
    (["--C", "1", "--lam", "0.1"],
     "gpusvm fit: error: lam=0.1 and C=1.0 were both given, but they set the same "
     "regularisation (lam = 1/(C n), n the number of training rows): pass only one of them"),
    (["--solver", "newton", "--loss", "hinge"],
     "gpusvm fit: error: solver='newton' minimises the squared hinge, but loss='hinge': the "
     "hinge is not differentiable; use loss='squared_hinge' with solver='newton', or "
     "solver='sdca' for the hinge"),
    (["--solver", "pegasos", "--multi-class", "diagonal"],  # argparse quotes on newer Pythons
     re.compile(r"gpusvm fit: error: argument --multi-class: invalid choice: 'diagonal' "
                r"\(choose from '?ovr'?, '?ovo'?, '?ordinal'?\) \(see `gpusvm fit --help`\)")),
])
def test_multiclass_option_errors(capsys, tmp_path, train_file, argv, message):
    status, _, err = run(capsys, "fit", train_file, *argv, "--backend", "numpy", "--out",
                         tmp_path / "x.npz")
    if isinstance(message, re.Pattern):
        assert status == 2 and err.count("\n") == 1 and message.fullmatch(err.strip())
    else:
        assert_one_line_error(status, err, message)
