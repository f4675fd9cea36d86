"""The bad-input catalogue: every bad input gets a clear error with an exact, tested message.

Messages from scikit-learn's validation are matched on their stable first
sentence; gpusvm's own messages are matched whole.
"""

from __future__ import annotations

import re
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils._param_validation import InvalidParameterError

import gpusvm.backends
from gpusvm import KernelPegasosSVC, PegasosSVC
from gpusvm.backends import make_backend, resolve_backend_name
from gpusvm.datasets import load_svmlight
from gpusvm import SDCASVC
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


def test_more_than_two_classes_kernel():
    # the linear estimators fit many classes (tests/test_multiclass.py); the kernel one is binary
    with pytest.raises(ValueError, match=exactly(
            "Only binary classification is supported. KernelPegasosSVC got y with 3 classes: "
            "wrap the estimator in sklearn.multiclass.OneVsRestClassifier")):
        kernel_pegasos().fit(X4, np.array([0, 1, 2, 0]))


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
    # None (the default) means 1e-4, or lam = 1/(C n) when C is given
    allowed = " or None" if name != "KernelPegasosSVC" else ""
    with pytest.raises(InvalidParameterError, match=exactly(
            f"The 'lam' parameter of {name} must be a float in the range (0.0, inf){allowed}. "
            f"Got {lam!r} instead.")):
        make(lam=lam).fit(X4, Y4)


@each_estimator
def test_batch_size_below_one(name, make):
    auto = "" if name == "KernelPegasosSVC" else " or a str among {'auto'}"
    with pytest.raises(InvalidParameterError, match=exactly(
            f"The 'batch_size' parameter of {name} must be an int in the range [1, inf){auto}. "
            "Got 0 instead.")):
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
    monkeypatch.setattr(gpusvm.backends, "_problem", [gpusvm.backends.NO_CUPY])
    with pytest.raises(RuntimeError, match=exactly(
            "backend='cupy' needs CuPy and a CUDA device, and none was found; install "
            "gpusvm[cuda12] or gpusvm[cuda13] on a CUDA machine, or use backend='numpy' (run "
            "`gpusvm info` to see which backends can run here)")):
        resolve_backend_name("cupy")
    assert resolve_backend_name("auto") != "cupy"


@pytest.mark.parametrize("cause", [
    "the CUDA driver cannot be used (CUDARuntimeError: cudaErrorInsufficientDriver)",
    "the GPU's compute capability 5.2 is below 6.0, which the kernels' double-precision "
    "atomics need",
    "the CUDA kernels do not compile for this GPU (CompileException: nvrtc: error)",
])
def test_an_unusable_gpu_falls_back_with_one_warning(monkeypatch, cause):
    """CuPy present but the driver, the architecture or the compile fails: ``auto`` runs on the
    CPU and says why, once; ``cupy`` raises one error naming the cause, without CuPy's traceback."""
    monkeypatch.setattr(gpusvm.backends, "_problem", [cause])
    monkeypatch.setattr(gpusvm.backends, "_warned", [])
    with pytest.warns(RuntimeWarning) as record:
        assert resolve_backend_name("auto") in ("numba", "numpy")
        assert resolve_backend_name("auto") in ("numba", "numpy")
    assert len(record) == 1
    fallback = "numba" if gpusvm.backends.numba_available() else "numpy"
    assert str(record[0].message) == (f"backend='auto' runs on the CPU ('{fallback}'): CuPy is "
                                      f"installed but {cause}")
    with pytest.raises(RuntimeError, match=exactly(
            f"backend='cupy' cannot run here: {cause}; install gpusvm[cuda12] or gpusvm[cuda13] "
            "on a CUDA machine, or use backend='numpy' (run `gpusvm info` to see which backends "
            "can run here)")) as info:
        resolve_backend_name("cupy")
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_probe_names_a_failing_compile(monkeypatch):
    """The probe turns an exception from inside CuPy into its one-line cause."""
    import sys
    import types

    fake = types.ModuleType("cupy")

    class Device:
        compute_capability = "90"
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
                                      Device=Device)
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def fail(kind="cupy"):
        raise RuntimeError("nvrtc: error: invalid value for --gpu-architecture\nmore lines")
    monkeypatch.setattr("gpusvm._kernels.load_module", fail)
    assert gpusvm.backends._probe_device() == (
        "the CUDA kernels do not compile for this GPU (RuntimeError: nvrtc: error: invalid value "
        "for --gpu-architecture)")
    Device.compute_capability = "52"
    assert "compute capability 5.2 is below 6.0" in gpusvm.backends._probe_device()


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


# ------------------------------------------------------------------ hostile arrays and settings
LINEAR = [("PegasosSVC", pegasos), ("SDCASVC", sdca)]
each_linear = pytest.mark.parametrize("name, make", LINEAR, ids=[n for n, _ in LINEAR])


def _csr4():
    return sp.csr_matrix(X4)


@each_estimator
@pytest.mark.parametrize("damage, message", [
    (lambda X: X.indices.__setitem__(0, 3),
     "X is a corrupted CSR matrix: it has column indices outside [0, 3); rebuild it with "
     "scipy.sparse.csr_matrix"),
    (lambda X: X.indices.__setitem__(1, -1),
     "X is a corrupted CSR matrix: it has column indices outside [0, 3); rebuild it with "
     "scipy.sparse.csr_matrix"),
    (lambda X: X.indices.__setitem__(2, 10**9),
     "X is a corrupted CSR matrix: it has column indices outside [0, 3); rebuild it with "
     "scipy.sparse.csr_matrix"),
    (lambda X: X.indptr.__setitem__(2, 0),
     "X is a corrupted CSR matrix: its indptr is not a non-decreasing sequence of 5 offsets "
     "from 0 to at most its 7 indices; rebuild it with scipy.sparse.csr_matrix"),
], ids=["index-d", "index-negative", "index-huge", "indptr-decreasing"])
def test_out_of_range_csr_indices(name, make, damage, message):
    X = _csr4()
    damage(X)                                      # scipy does not look at the arrays again
    with pytest.raises(ValueError, match=exactly(message)):
        make(batch_size=2).fit(X, Y4)
    est = make(batch_size=2).fit(_csr4(), Y4)
    with pytest.raises(ValueError, match=exactly(message)):
        est.predict(X)


@each_linear
def test_more_columns_than_int32_indices(name, make):
    d = 2**31 + 5
    X = sp.csr_matrix((np.ones(4), np.array([0, 7, d - 1, 3], dtype=np.int64),
                       np.arange(5, dtype=np.int64)), shape=(4, d))
    with pytest.raises(ValueError, match=exactly(
            f"X has {d} columns and 4 nonzeros (plus the bias column); gpusvm's CPU backends "
            "index them with 32-bit integers, so both must stay below 2147483647: drop unused "
            "columns (e.g. re-index the features), split the data, or fit on a GPU "
            "(backend='cupy' indexes with int64)")):
        make(batch_size=2).fit(X, Y4)


@each_estimator
@pytest.mark.parametrize("own", [True, False])
def test_fit_leaves_the_callers_matrix_alone(name, make, own):
    """The estimator's own dtype, and the other one (whose values are converted: scipy's
    astype would first sum the caller's duplicate entries in place)."""
    ours = np.float64 if name == "KernelPegasosSVC" else np.float32
    dtype = ours if own else ({np.float32: np.float64, np.float64: np.float32}[ours])
    X = sp.csr_matrix((np.array([1.0, 0.5, 2.0, 0.25, 1.0, 3.0, 1.0], dtype=dtype),
                       np.array([2, 0, 1, 1, 0, 0, 2]), np.array([0, 2, 5, 6, 7])), shape=(4, 3))
    assert not X.has_sorted_indices                     # unsorted, with a duplicate in row 1
    before = (X.data.copy(), X.indices.copy(), X.indptr.copy())
    est = make(batch_size=2).fit(X, Y4)
    for after, was in zip((X.data, X.indices, X.indptr), before):
        np.testing.assert_array_equal(after, was)
    np.testing.assert_array_equal(est.predict(X), est.predict(X.toarray()))


@each_linear
def test_values_whose_squares_overflow(name, make):
    X = X4 * 1e300
    with pytest.raises(ValueError, match=exactly(
            "X has values so large that the squared norm of a row overflows float64 (e.g. "
            "1e300); scale the features (sklearn.preprocessing.MaxAbsScaler) or normalise the "
            "rows (gpusvm.datasets.normalize_rows) first")):
        make(dtype="float64").fit(X, Y4)
    # 1e100 still fits: the model is finite
    est = make(dtype="float64", batch_size=2, max_iter=20).fit(X4 * 1e100, Y4)
    assert np.all(np.isfinite(est.coef_))


@each_linear
def test_lam_too_small_for_the_precision(name, make):
    with pytest.raises(ValueError, match=exactly(
            "lam=1e-300 is too small for dtype=float32: a step of size 1/lam on rows of norm up "
            "to 1.41 overflows; use lam >= 7.7e-20")):
        make(lam=1e-300).fit(X4, Y4)
    with pytest.raises(ValueError, match=exactly(
            "lam=1e-300 is too small for dtype=float64: a step of size 1/lam on rows of norm up "
            "to 1.41 overflows; use lam >= 1.1e-154")):
        make(lam=1e-300, dtype="float64").fit(X4, Y4)


@each_estimator
def test_max_iter_beyond_64_bits(name, make):
    with pytest.raises(InvalidParameterError, match=exactly(
            f"The 'max_iter' parameter of {name} must be an int in the range "
            f"[{0 if name == 'SDCASVC' else 1}, "
            "4611686018427387904] or None. Got 100000000000000000000 instead.")):
        make(max_iter=10**20).fit(X4, Y4)


@pytest.mark.parametrize("cls", [PegasosSVC, KernelPegasosSVC, SDCASVC])
def test_random_state_generator_is_accepted(cls):
    X, y = make_classification(n_samples=60, random_state=0)
    name = cls.__name__
    kw = {} if cls is KernelPegasosSVC else {"backend": "numpy"}
    first = cls(batch_size=4, random_state=np.random.default_rng(7), max_iter=40, **kw).fit(X, y)
    again = cls(batch_size=4, random_state=np.random.default_rng(7), max_iter=40, **kw).fit(X, y)
    attr = "dual_coef_" if name == "KernelPegasosSVC" else "coef_"
    np.testing.assert_array_equal(getattr(first, attr), getattr(again, attr))


@pytest.mark.parametrize("k", [1, 2, 7])
def test_optimal_bias_needs_a_batch(k):
    with pytest.raises(ValueError, match=exactly(
            f"bias='optimal' needs batch_size >= 8, got batch_size={k}: the optimal bias of a "
            "small batch puts its margins at 1, so w barely moves (with one row, never) and the "
            "model predicts the majority class; use bias='unregularized' or bias='augmented', or "
            "a larger batch_size")):
        pegasos(bias="optimal", batch_size=k).fit(X4, Y4)


@pytest.mark.parametrize("name, make", [("PegasosSVC", pegasos),
                                        ("KernelPegasosSVC", kernel_pegasos)])
def test_tail_average_cut_short_warns(name, make):
    X, y = make_classification(n_samples=100, random_state=0)
    stop_at_10 = lambda t, objective, elapsed: t < 10  # noqa: E731
    with pytest.warns(ConvergenceWarning) as record:
        est = make(batch_size=1, averaging="tail", max_iter=1000, eval_every=5,
                   callback=stop_at_10).fit(X, y)
    assert est.n_iter_ == 10 and est.stop_reason_ == "callback"
    assert [str(w.message) for w in record if w.category is ConvergenceWarning] == [
        "averaging='tail' averages the iterates after iteration 500 = max_iter/2, but the run "
        "stopped at iteration 10 (callback): the last iterate is returned, not an average; give "
        "the run more time, lower max_iter, or use averaging='all'"]


def test_kernel_pegasos_honours_max_time_without_evaluations():
    X, y = make_classification(n_samples=200, random_state=0)
    start = time.perf_counter()
    est = kernel_pegasos(max_iter=10**7, max_time=0.5).fit(X, y)
    assert time.perf_counter() - start < 5
    assert est.stop_reason_ == "max_time" and 0 < est.n_iter_ < 10**7


def test_callable_kernel_returning_nan():
    X, y = make_classification(n_samples=40, random_state=0)
    with pytest.raises(ValueError, match=exactly(
            "the kernel returned NaN or infinity; every kernel value must be finite: check a "
            "callable kernel, or scale X (e.g. for 'poly')")):
        kernel_pegasos(kernel=lambda A, B: np.full((A.shape[0], B.shape[0]), np.nan)).fit(X, y)
    with pytest.raises(ValueError, match=exactly(
            "the callable kernel returned an array of shape (3,) for 1 and 40 rows; kernel(A, "
            "B) must return the Gram matrix of shape (1, 40)")):
        kernel_pegasos(kernel=lambda A, B: np.ones(3)).fit(X, y)


@pytest.fixture(scope="module")
def a9a_unit():
    from gpusvm.datasets import load_a9a, normalize_rows
    X, y = load_a9a("train")
    return normalize_rows(X), y


def _convergence_messages(est, X, y):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est.fit(X, y)
    return [str(w.message) for w in record if w.category is ConvergenceWarning]


def test_sdca_stopped_by_time_or_callback_warns(a9a_unit):
    X, y = a9a_unit
    est = sdca(lam=1e-4, batch_size=64, tol=1e-9, eval_every=50, max_time=1e-9)
    [message] = _convergence_messages(est, X, y)
    assert message == (f"SDCA stopped by max_time after 50 iterations with duality gap "
                       f"{est.duality_gap_:.3g} > tol=1e-09; the time budget max_time=1e-09 ran "
                       "out; give it more time")
    est = sdca(lam=1e-4, batch_size=64, tol=1e-9, eval_every=50, callback=lambda *a: False)
    [message] = _convergence_messages(est, X, y)
    assert message == (f"SDCA stopped by callback after 50 iterations with duality gap "
                       f"{est.duality_gap_:.3g} > tol=1e-09; the callback stopped it; let the "
                       "run continue to certify the solution")


@pytest.mark.parametrize("b, variant, advice", [
    (1, "auto", "increase max_iter; at batch_size=1 every variant takes the same step (with a "
                "small lam, loss='squared_hinge' and solver='newton' take few iterations)"),
    (64, "safe", "increase max_iter, or use the aggressive variant or a smaller batch_size"),
    (64, "aggressive", "increase max_iter, or use a smaller batch_size"),
])
def test_sdca_max_iter_advice_names_only_what_can_help(a9a_unit, b, variant, advice):
    # at batch size 1 the variants coincide and no batch is smaller: neither is advised
    X, y = a9a_unit
    est = sdca(lam=1e-4, batch_size=b, variant=variant, max_iter=40, eval_every=20,
               shrinking=False)
    [message] = _convergence_messages(est, X, y)
    assert message == (f"SDCA stopped after max_iter=40 iterations with duality gap "
                       f"{est.duality_gap_:.3g} > tol=0.001; {advice}")


def test_sdca_divergence_advice(a9a_unit):
    X, y = a9a_unit
    est = sdca(lam=1e-4, batch_size=4096, variant="naive", max_iter=40, eval_every=8)
    [message] = _convergence_messages(est, X, y)
    assert est.duality_gap_ > 1
    assert message == (f"SDCA stopped after max_iter=40 iterations with duality gap "
                       f"{est.duality_gap_:.3g} > tol=0.001; the gap is above 1, that of the "
                       "starting point: the naive step (beta = 1) diverges when the rows of a "
                       "batch of 4096 interact; use variant='safe' or variant='aggressive', or a "
                       "smaller batch_size")
    est = sdca(lam=1e-4, batch_size=4096, variant="safe", sigma2=4e-5, max_iter=40, eval_every=8)
    [message] = _convergence_messages(est, X, y)
    assert est.duality_gap_ > 1
    assert message == (f"SDCA stopped after max_iter=40 iterations with duality gap "
                       f"{est.duality_gap_:.3g} > tol=0.001; the gap is above 1, that of the "
                       "starting point: sigma2=4e-05 was given: if it is below the sigma^2 of "
                       "the row-normalised data, the safe step is too long; pass sigma2=None to "
                       "compute it")
