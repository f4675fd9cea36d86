"""Accelerator mode: patch_sklearn / unpatch_sklearn and ``python -m gpusvm.accel script.py``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import sklearn.svm
import sklearn.svm._classes
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

import gpusvm
import gpusvm.accel
from gpusvm.accel import fit_counts, is_patched

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "sklearn_grid_script.py"
ORIGINAL = sklearn.svm._classes.LinearSVC


@pytest.fixture
def patched():
    gpusvm.patch_sklearn()
    try:
        yield
    finally:
        gpusvm.unpatch_sklearn()


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_patch_and_unpatch_replace_both_attributes():
    assert sklearn.svm.LinearSVC is ORIGINAL and not is_patched()
    gpusvm.patch_sklearn()
    gpusvm.patch_sklearn()                      # twice: still undone by one unpatch
    try:
        assert sklearn.svm.LinearSVC is gpusvm.accel.LinearSVC
        assert sklearn.svm._classes.LinearSVC is gpusvm.accel.LinearSVC
        assert is_patched()
        from sklearn.svm import LinearSVC       # noqa: PLC0415  (what a script does)
        assert issubclass(LinearSVC, gpusvm.LinearSVC)
    finally:
        gpusvm.unpatch_sklearn()
    assert sklearn.svm.LinearSVC is ORIGINAL and sklearn.svm._classes.LinearSVC is ORIGINAL
    assert not is_patched()


def test_patched_class_fits_with_gpusvm(patched, cancer, caplog):
    X, y = cancer
    before = fit_counts()
    with caplog.at_level(logging.INFO, logger="gpusvm.accel"):
        est = sklearn.svm.LinearSVC(C=0.1).fit(X, y)
    assert est.fitted_by_ == "gpusvm" and est.solver_ in ("sdca", "newton")
    assert fit_counts()["gpusvm"] == before["gpusvm"] + 1
    assert caplog.messages == [f"LinearSVC fitted by gpusvm (solver_={est.solver_!r}, "
                               f"backend_={est.backend_!r}, n_iter_={est.n_iter_})"]
    ref = ORIGINAL(C=0.1).fit(X, y)
    assert np.mean(est.predict(X) == ref.predict(X)) >= 0.99


def test_unsupported_parameters_fall_back_to_sklearn(patched, cancer, caplog):
    X, y = cancer
    with caplog.at_level(logging.INFO, logger="gpusvm.accel"):
        est = sklearn.svm.LinearSVC(penalty="l1", dual=False, C=0.1, random_state=0).fit(X, y)
    assert est.fitted_by_ == "sklearn" and est.solver_ == "liblinear"
    assert caplog.messages == [
        "LinearSVC fitted by scikit-learn: penalty='l1' (sparse weights) is not available in "
        "gpusvm.LinearSVC, which solves the L2-regularised problem; use "
        "sklearn.svm.LinearSVC(penalty='l1', dual=False) for an L1 penalty"]
    ref = ORIGINAL(penalty="l1", dual=False, C=0.1, random_state=0).fit(X, y)
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    np.testing.assert_array_equal(est.decision_function(X), ref.decision_function(X))
    # the next fit with parameters gpusvm honours is gpusvm's again
    est.set_params(penalty="l2").fit(X, y)
    assert est.fitted_by_ == "gpusvm"


def test_fallback_logs_one_line_at_verbose(patched, cancer, capsys):
    X, y = cancer
    sklearn.svm.LinearSVC(multi_class="crammer_singer", verbose=1).fit(X, y)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gpusvm.accel: LinearSVC fitted by scikit-learn: "
                              "multi_class='crammer_singer' is not available")


def test_unmodified_script_runs_under_python_m_gpusvm_accel(tmp_path):
    """A Pipeline + GridSearchCV script that imports sklearn.svm.LinearSVC fits with gpusvm."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([sys.executable, "-m", "gpusvm.accel", "-v", str(SCRIPT), "--flag", "x"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert "estimator: gpusvm.accel.LinearSVC" in out
    assert "arguments: ['--flag', 'x']" in out
    accuracy = float(next(line for line in out if line.startswith("test accuracy")).split()[-1])
    assert accuracy >= 0.95
    log = done.stderr.splitlines()
    fits = [line for line in log if line.startswith("gpusvm.accel: LinearSVC fitted by gpusvm")]
    assert len(fits) == 3 * 3 + 1                  # 3 folds x 3 values of C, and the refit
    assert log[-1] == "gpusvm.accel: 10 LinearSVC fit(s) by gpusvm, 0 by scikit-learn"
    # the same script without the accelerator: scikit-learn's class
    plain = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=600)
    assert "estimator: sklearn.svm._classes.LinearSVC" in plain.stdout.splitlines()


def test_accel_without_a_script_is_an_error():
    done = subprocess.run([sys.executable, "-m", "gpusvm.accel"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "python -m gpusvm.accel: error: give a script to run (or -m module)")


def test_convergence_warning_starts_with_sklearns_text(patched, cancer):
    # the text scikit-learn's own LinearSVC warns with when it stops at max_iter
    X, y = cancer
    with pytest.warns(ConvergenceWarning) as theirs:
        ORIGINAL(C=100.0, dual=True, max_iter=2, random_state=0).fit(X, y)
    sklearn_text = [str(w.message) for w in theirs if w.category is ConvergenceWarning][0]
    with pytest.warns(ConvergenceWarning) as ours:
        sklearn.svm.LinearSVC(C=100.0, dual=True, max_iter=2, random_state=0).fit(X, y)
    message = [str(w.message) for w in ours if w.category is ConvergenceWarning][0]
    assert message.startswith(sklearn_text)
    assert message.startswith(gpusvm.accel.SKLEARN_CONVERGENCE_MESSAGE)
    assert "gpusvm.LinearSVC did not converge: 2 epochs" in message   # and says more


def test_sklearn_style_warning_filter_silences_the_fit(patched, cancer):
    X, y = cancer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="Liblinear failed to converge")
        clf = sklearn.svm.LinearSVC(C=100.0, dual=True, max_iter=2, random_state=0).fit(X, y)
    assert clf.fitted_by_ == "gpusvm" and clf.stop_reason_ == "max_iter"
    assert [w for w in caught if issubclass(w.category, ConvergenceWarning)] == []
