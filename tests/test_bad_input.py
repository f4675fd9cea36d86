"""The bad-input catalogue: every bad input gets a clear error with an exact, tested message.

Messages from scikit-learn's validation are matched on their stable first
sentence; gpusvm's own messages are matched whole.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import InvalidParameterError

import gpusvm.backends
from gpusvm import KernelPegasosSVC, PegasosSVC
from gpusvm.backends import make_backend, resolve_backend_name
from gpusvm.datasets import load_svmlight
from gpusvm.estimators_sdca import SDCASVC
from gpusvm.model_io import load_model

X4 = np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 0.5], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
Y4 = np.array([0, 1, 1, 0])


def pegasos(**params):
    return PegasosSVC(backend="numpy", random_state=0, **params)


def kernel_pegasos(**params):
    return KernelPegasosSVC(random_state=0, **params)


def sdca(**params):
    return SDCASVC(backend="numpy", random_state=0, **params)


# every estimator, for the validation they share
ESTIMATORS = [("PegasosSVC", pegasos), ("KernelPegasosSVC", kernel_pegasos), ("SDCASVC", sdca)]
each_estimator = pytest.mark.parametrize("name, make", ESTIMATORS, ids=[n for n, _ in ESTIMATORS])


def exactly(message):
    return f"^{re.escape(message)}$"


# ------------------------------------------------------------------ X and y
@each_estimator
@pytest.mark.parametrize("to_input", [np.asarray, sp.csr_matrix], ids=["dense", "csr"])
def test_nan_in_X(name, make, to_input):
    X = X4.copy()
    X[2, 1] = np.nan
    with pytest.raises(ValueError, match=re.escape(
            f"Input X contains NaN.\n{name} does not accept missing values encoded as NaN")):
        make().fit(to_input(X), Y4)


@each_estimator
@pytest.mark.parametrize("to_input", [np.asarray, sp.csr_matrix], ids=["dense", "csr"])
def test_inf_in_X(name, make, to_input):
    X = X4.copy()
    X[0, 0] = -np.inf
    with pytest.raises(ValueError, match=r"^Input X contains infinity or a value too large for "
                                         r"dtype\('float(32|64)'\)\.$"):
        make().fit(to_input(X), Y4)


@each_estimator
def test_nan_in_y(name, make):
    with pytest.raises(ValueError, match=exactly("Input y contains NaN.")):
        make().fit(X4, np.array([0.0, 1.0, np.nan, 0.0]))


@each_estimator
def test_no_rows(name, make):
    with pytest.raises(ValueError, match=exactly(
            f"Found array with 0 sample(s) (shape=(0, 3)) while a minimum of 1 is required by "
            f"{name}.")):
        make().fit(np.zeros((0, 3)), np.zeros(0))


@each_estimator
@pytest.mark.parametrize("to_input", [np.zeros, sp.csr_matrix], ids=["dense", "csr"])
def test_no_features(name, make, to_input):
    with pytest.raises(ValueError, match=exactly(
            f"Found array with 0 feature(s) (shape=(4, 0)) while a minimum of 1 is required by "
            f"{name}.")):
        make().fit(to_input((4, 0)), Y4)


@each_estimator
def test_one_class_only(name, make):
    with pytest.raises(ValueError, match=exactly(
            f"{name} needs samples of 2 classes, but the data contains only one class: 1")):
        make().fit(X4, np.ones(4, dtype=int))


@each_estimator
def test_more_than_two_classes(name, make):
    with pytest.raises(ValueError, match=exactly(
            f"Only binary classification is supported. {name} got y with 3 classes: wrap the "
            "estimator in sklearn.multiclass.OneVsRestClassifier")):
        make().fit(X4, np.array([0, 1, 2, 0]))


def test_continuous_targets():
    with pytest.raises(ValueError, match=exactly(
            "Unknown label type: PegasosSVC needs class labels; got targets of type "
            "'continuous'")):
        pegasos().fit(X4, np.array([0.1, 0.7, 0.2, 0.9]))


@each_estimator
def test_mismatched_lengths(name, make):
    with pytest.raises(ValueError, match=exactly(
            "Found input variables with inconsistent numbers of samples: [4, 3]")):
        make().fit(X4, Y4[:3])


def test_one_dimensional_X():
    with pytest.raises(ValueError, match=r"^Expected 2D array, got 1D array instead:"):
        pegasos().fit(np.ones(4), Y4)


def test_predict_with_other_feature_count():
    est = pegasos(batch_size=2).fit(X4, Y4)
    with pytest.raises(ValueError, match=exactly(
            "X has 5 features, but PegasosSVC is expecting 3 features as input.")):
        est.predict(np.ones((2, 5)))


def test_predict_before_fit():
    with pytest.raises(NotFittedError, match=r"^This PegasosSVC instance is not fitted yet\."):
        pegasos().predict(X4)


# ------------------------------------------------------------------ parameters
@each_estimator
@pytest.mark.parametrize("lam", [0, -1.0])
def test_lam_not_positive(name, make, lam):
    with pytest.raises(InvalidParameterError, match=exactly(
            f"The 'lam' parameter of {name} must be a float in the range (0.0, inf). Got {lam!r} "
            "instead.")):
        make(lam=lam).fit(X4, Y4)


@each_estimator
def test_batch_size_below_one(name, make):
    with pytest.raises(InvalidParameterError, match=exactly(
            f"The 'batch_size' parameter of {name} must be an int in the range [1, inf). Got 0 "
            "instead.")):
        make(batch_size=0).fit(X4, Y4)


@each_estimator
def test_batch_size_above_n(name, make):
    with pytest.raises(ValueError, match=exactly(
            "batch_size=5 exceeds the number of samples n=4; choose 1 <= batch_size <= 4")):
        make(batch_size=5).fit(X4, Y4)


def test_unknown_backend_in_estimator():
    # the order of the allowed values in scikit-learn's message is a set's order
    with pytest.raises(InvalidParameterError, match=r"^The 'backend' parameter of PegasosSVC "
                                                    r"must be a str among \{.*'numpy'.*\}\. "
                                                    r"Got 'gpu' instead\.$"):
        PegasosSVC(backend="gpu").fit(X4, Y4)


def test_unknown_backend_name():
    assert {"auto", "numpy", "cupy", "emulated"} <= set(gpusvm.backends.BACKENDS)
    with pytest.raises(ValueError, match=exactly(
            f"unknown backend 'gpu'; choose one of {', '.join(gpusvm.backends.BACKENDS)}")):
        make_backend("gpu", sp.csr_matrix(X4), np.where(Y4 == 1, 1.0, -1.0))


def test_cupy_backend_without_a_device(monkeypatch):
    monkeypatch.setattr(gpusvm.backends, "cuda_available", lambda: False)
    with pytest.raises(RuntimeError, match=exactly(
            "backend='cupy' needs CuPy and a CUDA device, and none was found; install "
            "gpusvm[cuda12] or gpusvm[cuda13] on a CUDA machine, or use backend='numpy' (run "
            "`gpusvm info` to see which backends can run here)")):
        resolve_backend_name("cupy")
    assert resolve_backend_name("auto") != "cupy"


def test_coef_init_outside_the_ball():
    with pytest.raises(ValueError, match=exactly(
            "the initial w has norm 5 > 1/sqrt(lam) = 1; Pegasos starts inside that ball: scale "
            "coef_init down or set projection=False")):
        pegasos(lam=1.0).fit(X4, Y4, coef_init=np.array([3.0, 4.0, 0.0]))
    # the same start is accepted without the projection
    est = pegasos(lam=1.0, projection=False, max_iter=3).fit(X4, Y4,
                                                             coef_init=np.array([3.0, 4.0, 0.0]))
    assert est.n_iter_ == 3


def test_coef_init_of_the_wrong_size():
    with pytest.raises(ValueError, match=exactly("coef_init has 2 values but X has 3 features")):
        pegasos().fit(X4, Y4, coef_init=np.zeros(2))


def test_coef_init_not_finite():
    with pytest.raises(ValueError, match=exactly("coef_init contains NaN or infinity")):
        pegasos().fit(X4, Y4, coef_init=np.array([0.0, np.nan, 0.0]))


def test_intercept_init_without_bias():
    with pytest.raises(ValueError, match=exactly(
            "intercept_init was given but bias='none'; use another bias mode")):
        pegasos(bias="none").fit(X4, Y4, intercept_init=0.5)


def test_constant_schedule_without_eta0():
    with pytest.raises(ValueError, match=exactly(
            "schedule='constant' needs eta0, the fixed step size")):
        pegasos(schedule="constant").fit(X4, Y4)


def test_negative_eta0():
    with pytest.raises(InvalidParameterError, match=exactly(
            "The 'eta0' parameter of PegasosSVC must be a float in the range (0.0, inf) or None. "
            "Got -1.0 instead.")):
        pegasos(schedule="constant", eta0=-1.0).fit(X4, Y4)


# ------------------------------------------------------------------ files
def test_malformed_svmlight_names_file_and_line(tmp_path):
    path = tmp_path / "bad.svm"
    path.write_text("+1 1:1 2:1\n-1 3:1\n+1 2:1 1:1\n")
    with pytest.raises(ValueError, match=exactly(
            f"{path}, line 3: feature indices must be sorted and unique, but 1 follows 2")):
        load_svmlight(path)


def test_corrupted_model_file(tmp_path):
    path = tmp_path / "model.npz"
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    with pytest.raises(ValueError, match=f"^cannot read model file {re.escape(str(path))}: it is "
                                         r"not a valid \.npz archive \(.+\); the file is "
                                         r"truncated, corrupted or not a gpusvm model: save the "
                                         r"model again with gpusvm\.model_io\.save_model "
                                         r"\(or `gpusvm fit`\)$"):
        load_model(path)


def test_foreign_model_file(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, w=np.zeros(3), b=np.zeros(1))
    with pytest.raises(ValueError, match=exactly(
            f"{path} is a .npz archive but not a gpusvm model (it has no gpusvm metadata); load "
            "files written by gpusvm.model_io.save_model or `gpusvm fit`")):
        load_model(path)
