"""What a user who sets nothing gets: resolved defaults, stopping rules, shrinking, warnings."""

from __future__ import annotations

import math
import time
import types
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from gpusvm import PegasosSVC
from gpusvm.backends import _loops_nb, numpy_
from gpusvm.backends.numba_ import NumbaBackend
from gpusvm.backends.numpy_ import NumpyBackend
from gpusvm.datasets import normalize_rows
from gpusvm.estimators import DataScaleWarning
from gpusvm import SDCASVC
from gpusvm.solvers.pegasos import doubling_estimate, pegasos
from gpusvm.solvers.sdca import CertificateCosts, next_certificate, sdca

LAM = 1e-4


def primal(X, y, w, lam):
    return 0.5 * lam * float(w @ w) + float(np.mean(np.maximum(0.0, 1.0 - y * (X @ w))))


@pytest.fixture(scope="module")
def a9a_part(a9a):
    X = sp.csr_matrix(a9a.X[:8000], dtype=np.float64)
    y = a9a.y[:8000].astype(np.float64)
    lin = LinearSVC(C=1.0 / (LAM * X.shape[0]), loss="hinge", dual=True, fit_intercept=False,
                    tol=1e-10, max_iter=200_000).fit(X, y)
    return X, y, primal(X, y, lin.coef_.ravel(), LAM)


def test_defaults_resolve_to_the_documented_settings(a9a_part):
    X, y, p_star = a9a_part
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        sd = SDCASVC(lam=LAM, bias="none", random_state=0, backend="numba").fit(X, y)
    assert (sd.batch_size_, sd.variant_, sd.stop_reason_) == (1, "safe", "tol")
    assert sd.duality_gap_ <= 1e-3
    assert primal(X, y, sd.coef_.ravel(), LAM) - p_star <= sd.duality_gap_ + 1e-12
    # Pegasos on unit rows (its theory's setting; a9a's rows have norm 3.7, which slows it down
    # by R^2 = 14 and ends in a ConvergenceWarning after 64 epochs)
    Xn = normalize_rows(X)
    lam = 1e-3
    lin = LinearSVC(C=1.0 / (lam * Xn.shape[0]), loss="hinge", dual=True, fit_intercept=False,
                    tol=1e-10, max_iter=200_000).fit(Xn, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        pg = PegasosSVC(lam=lam, bias="none", random_state=0, backend="numba").fit(Xn, y)
    assert (pg.batch_size_, pg.averaging_, pg.stop_reason_) == (1, "doubling", "tol")
    # the doubling rule evaluates at T = 1, 2, 4, ... epochs only, and stopped on a decrease <= tol
    epochs = [t / Xn.shape[0] for t, *_ in pg.history_]
    assert all(math.log2(e).is_integer() for e in epochs), epochs
    p = [h[1] for h in pg.history_]
    assert doubling_estimate(p) <= 1e-3 < doubling_estimate(p[:-1])
    assert primal(Xn, y, pg.coef_.ravel(), lam) - primal(Xn, y, lin.coef_.ravel(), lam) <= 2e-3


def test_pegasos_max_iter_at_a_doubling_reads_its_last_evaluation(a9a_part):
    """A max_iter that ends at a T_j (as the default 64 epochs do) lets the stopping rule read
    that last evaluation: a run that settled there stops by tol, without a warning."""
    X, y, _ = a9a_part
    Xn, lam = normalize_rows(X), 1e-3
    free = PegasosSVC(lam=lam, bias="none", random_state=0, backend="numba").fit(Xn, y)
    assert free.stop_reason_ == "tol"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        capped = PegasosSVC(lam=lam, bias="none", random_state=0, backend="numba",
                            max_iter=free.n_iter_, averaging="doubling").fit(Xn, y)
    assert (capped.stop_reason_, capped.n_iter_) == ("tol", free.n_iter_)
    np.testing.assert_array_equal(capped.coef_, free.coef_)
    # one iteration short of that T_j the last average is not a doubling's: no estimate
    with pytest.warns(ConvergenceWarning, match="objective still falling by more than tol"):
        short = PegasosSVC(lam=lam, bias="none", random_state=0, backend="numba",
                           max_iter=free.n_iter_ - 1, averaging="doubling").fit(Xn, y)
    assert short.stop_reason_ == "max_iter"


def test_pegasos_that_does_not_settle_warns(a9a_part):
    X, y, _ = a9a_part
    with pytest.warns(ConvergenceWarning, match="objective still falling by more than tol"):
        PegasosSVC(lam=LAM, bias="none", random_state=0, backend="numba", tol=1e-6,
                   max_iter=8 * X.shape[0], averaging="doubling").fit(X, y)


def test_device_auto_batch_is_large():
    X = sp.random(50, 8, density=0.5, random_state=0, format="csr")
    y = np.where(np.arange(50) % 2 == 0, 1, -1)
    est = SDCASVC(lam=1e-2, backend="emulated", max_iter=3, eval_every=1, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert est.batch_size_ == 50 and est.variant_ == "aggressive"


def test_unscaled_rows_warn_and_name_the_fix():
    X, y = load_breast_cancer(return_X_y=True)
    with pytest.warns(DataScaleWarning, match=r"largest row norm of X is .*normalize_rows.*"
                                               r"StandardScaler"):
        PegasosSVC(lam=1e-3, random_state=0, max_iter=200).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataScaleWarning)
        PegasosSVC(lam=1e-3, random_state=0, max_iter=200).fit(X / 4000.0, y)


def test_pegasos_doubling_is_the_tail_average_of_each_doubling(a9a_part):
    """At T_j = 2^j epochs the output is the tail average of the iterates after T_j / 2:
    the same w as averaging="tail" run with max_iter = T_j."""
    X, y, _ = a9a_part
    X, y = X[:2000], y[:2000]
    n = X.shape[0]
    d = pegasos(NumpyBackend(X, y), lam=1e-3, k=4, max_iter=4 * n // 4, sampling="epoch",
                seed=2, averaging="doubling", tol=None)
    t = pegasos(NumpyBackend(X, y), lam=1e-3, k=4, max_iter=4 * n // 4, sampling="epoch",
                seed=2, averaging="tail")
    np.testing.assert_allclose(d.w, t.w, rtol=1e-10, atol=1e-12)
    assert [h[0] for h in d.history] == [n // 4, 2 * n // 4, 4 * n // 4]


def test_shrinking_compiled_equals_reference_and_really_shrinks(a9a_part):
    X, y, _ = a9a_part
    X, y = X[:3000], y[:3000]
    kw = dict(lam=1e-4, b=1, max_iter=10 * 3000, variant="safe", sampling="epoch", seed=1,
              tol=0.0, shrinking=True, eval_every=10 * 3000)
    ref_be, be = NumpyBackend(X, y), NumbaBackend(X, y)
    ref, got = sdca(ref_be, **kw), sdca(be, **kw)
    np.testing.assert_allclose(got.w, ref.w, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(be._active, ref_be._active)
    assert 0 < (~be._active).sum()                     # rows were taken out of the active set
    plain = sdca(NumbaBackend(X, y), **{**kw, "shrinking": False})
    assert not np.array_equal(plain.w, got.w)


def test_shrinking_keeps_the_certificate(a9a_part):
    X, y, _ = a9a_part
    X, y = X[:3000], y[:3000]
    res = sdca(NumbaBackend(X, y), lam=1e-3, b=1, max_iter=200 * 3000, variant="safe",
               sampling="epoch", seed=1, tol=1e-3, shrinking=True)
    assert res.stop_reason == "tol" and res.extra["gap"] <= 1e-3
    lin = LinearSVC(C=1.0 / (1e-3 * 3000), loss="hinge", dual=True, fit_intercept=False,
                    tol=1e-10, max_iter=200_000).fit(X, y)
    assert primal(X, y, res.w, 1e-3) - primal(X, y, lin.coef_.ravel(), 1e-3) <= res.extra["gap"]


def test_shrinking_constants_of_the_compiled_loop_are_the_reference_ones():
    assert _loops_nb.SHRINK_EPS == numpy_.SHRINK_EPS
    assert _loops_nb.UPPER_SLACK == numpy_.UPPER_SLACK


def test_certificate_cadence_adapts_to_the_gap():
    epoch = 100
    assert next_certificate([], 1e-3, epoch) == epoch
    # after the first: the rate from the starting gap 1; 1 -> 0.5 in an epoch, 0.5 -> 1e-3 is
    # log2(500) = 9 epochs away: 1.2 of it, but at most 4 times the last interval
    assert next_certificate([(100, 1, 0, 0.5, 0)], 1e-3, epoch) == 400
    # the gap halves per epoch: 0.02 -> 1e-3 is 4.3 epochs away, at most 4 times the last
    # interval; 0.002 -> 1e-3 is one epoch away: 1.2 of it
    assert next_certificate([(100, 1, 0, 0.04, 0), (200, 1, 0, 0.02, 0)], 1e-3, epoch) == 400
    assert next_certificate([(100, 1, 0, 0.004, 0), (200, 1, 0, 0.002, 0)], 1e-3, epoch) == 120
    assert next_certificate([(100, 1, 0, 0.0016, 0), (200, 1, 0, 0.0012, 0)], 1e-3, epoch) == 76
    # the certified gap (of the best primal point) is not noisy: a slow rate near tol is
    # believed (1.05 -> 1 at the rate 1.1 -> 1.05 took: 1.05 epochs, 1.2 of it)
    assert next_certificate([(100, 1, 0, 0.0011, 0), (200, 1, 0, 0.00105, 0)], 1e-3, epoch) == 125
    # never below half an epoch (a certificate costs about that much: 0.00101 -> 1e-3 is 6
    # iterations away); a gap that did not fall keeps the last interval
    assert next_certificate([(100, 1, 0, 0.0012, 0), (200, 1, 0, 0.00101, 0)], 1e-3,
                            epoch) == 50
    assert next_certificate([(100, 1, 0, 0.1, 0), (300, 1, 0, 0.2, 0)], 1e-3, epoch) == 200
    # from the third certificate on, the rate is that since the first: a lucky fall of the
    # best point's gap (0.1 -> 0.004) followed by a slow interval (0.004 -> 0.0035) would
    # predict 2800 iterations more (capped at 4 x 300); the steady rate predicts 1.2 x 262
    history = [(100, 1, 0, 0.1, 0), (500, 1, 0, 0.004, 0), (800, 1, 0, 0.0035, 0)]
    steady = math.log(0.1 / 0.0035) / 700
    assert next_certificate(history, 1e-3, epoch) == int(1.2 * math.log(3.5) / steady) == 313


def test_certificate_cadence_never_certifies_sooner_than_the_balance():
    epoch = 100
    # the measured balance lifts both rules: far from tol (rate-based) and with tol = 0
    assert next_certificate([(100, 1, 0, 0.0016, 0), (200, 1, 0, 0.0012, 0)], 1e-3, epoch,
                            balance=300) == 300
    assert next_certificate([(100, 1, 0, 0.5, 0)], 0.0, epoch, balance=350) == 350
    # up to 4 times the last interval
    assert next_certificate([(100, 1, 0, 0.5, 0)], 0.0, epoch, balance=7000) == 400
    assert next_certificate([(100, 1, 0, 0.0016, 0), (200, 1, 0, 0.0012, 0)], 1e-3, epoch,
                            balance=900) == 400
    # and never lowers them
    assert next_certificate([(100, 1, 0, 0.5, 0)], 1e-3, epoch, balance=10) == 400


def test_certificate_costs_balance_is_the_certificate_in_iterations():
    costs = CertificateCosts()
    assert costs.balance() == 0                       # nothing measured
    now = time.perf_counter()
    costs.segment(10, now - 5.0)                      # the first segment (compiles) is set aside
    costs.segment(1000, time.perf_counter() - 1.0)    # 1 ms an iteration
    costs.certificate(time.perf_counter() - 9.0)      # alone, the first counts
    assert 8990 <= costs.balance() <= 9000
    costs.certificate(time.perf_counter() - 0.25)     # then the median of the others
    costs.certificate(time.perf_counter() - 0.5)
    costs.certificate(time.perf_counter() - 30.0)     # (one that paid a compile)
    assert 495 <= costs.balance() <= 500


class _TimedNumpy(NumpyBackend):
    """The reference backend timed as a GPU's (``synchronize``, ``times_certificates``) with a
    slow certificate (``delay`` seconds more)."""

    times_certificates = True
    delay = 0.25

    def synchronize(self):
        pass

    def dual_weights_m(self, lam):
        time.sleep(self.delay)
        return super().dual_weights_m(lam)


def test_sdca_spaces_costly_certificates_by_their_measured_cost(a9a_part):
    X, y, _ = a9a_part
    b = 64
    epoch = math.ceil(X.shape[0] / b)
    # tol = 0: a certificate an epoch, where a certificate's cost does not say otherwise
    plain = sdca(NumpyBackend(X, y), lam=1e-3, b=b, max_iter=8 * epoch, seed=0, tol=0.0)
    # a certificate worth three of this host's epochs: a fixed 0.25 s was under one epoch
    # while the host ran slowly, and the cadence rightly stayed at one certificate an epoch
    timed_be = _TimedNumpy(X, y)
    timed_be.delay = max(0.25, 3.0 * plain.history[-1][4] / 8)
    timed = sdca(timed_be, lam=1e-3, b=b, max_iter=8 * epoch, seed=0, tol=0.0)
    assert [h[0] for h in plain.history] == [epoch * (i + 1) for i in range(8)]
    ends = [h[0] for h in timed.history]
    steps = np.diff([0] + ends)
    per_step = timed.history[-1][4] / timed.n_iter       # an upper bound: certificates included
    # once a certificate is measured, no interval is shorter than a certificate's worth of
    # iterations (``delay`` seconds of sleep each), but the last, cut by max_iter
    assert all(s >= timed_be.delay / per_step for s in steps[1:-1])
    assert steps[-1] == 8 * epoch - ends[-2]
    assert len(timed.history) < len(plain.history)
    # a CPU backend (no clock) keeps the cadence that depends on the gaps alone: a
    # second fit repeats the first to the bit
    again = sdca(NumpyBackend(X, y), lam=1e-3, b=b, max_iter=8 * epoch, seed=0, tol=0.0)
    assert [h[0] for h in again.history] == [h[0] for h in plain.history]
    np.testing.assert_array_equal(again.w, plain.w)


def test_emulated_fits_keep_the_reference_cadence_whatever_a_certificate_costs(monkeypatch):
    # the emulator runs the GPU's kernels on a CPU: its seconds say nothing of a GPU's and its
    # sums run in a fixed order, so its certificates come when the NumPy reference's do and
    # its fit equals the reference's however long a certificate takes.  The solver's clock is
    # a fake one that only a certificate advances (a second each), so the test reads the
    # policy, not the machine's load
    from gpusvm.backends.device.backend import DeviceBackend  # noqa: PLC0415
    from gpusvm.backends.device.runtime import CupyRuntime  # noqa: PLC0415
    from gpusvm.solvers import sdca as sdca_module  # noqa: PLC0415
    X, y = make_classification(n_samples=120, n_features=5, random_state=0)
    X = sp.csr_matrix(X / np.linalg.norm(X, axis=1).max())
    y = 2.0 * y - 1.0
    b, epoch = 8, 15
    clock = [0.0]
    monkeypatch.setattr(sdca_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def slowed(backend):
        dual_weights_m = backend.dual_weights_m

        def slow(lam):
            clock[0] += 1.0
            return dual_weights_m(lam)
        backend.dual_weights_m = slow
        return backend

    kw = dict(lam=1e-2, b=b, max_iter=8 * epoch, seed=0, tol=0.0)
    ref = sdca(NumpyBackend(X, y), **kw)
    emulated = slowed(DeviceBackend(X, y, "emulated"))
    assert not emulated.times_certificates and CupyRuntime.times_certificates
    emu = sdca(emulated, **kw)
    assert [h[0] for h in emu.history] == [h[0] for h in ref.history] \
        == [epoch * (i + 1) for i in range(8)]
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-12, atol=1e-14)
    # the same backend timed as a GPU's spaces those costly certificates out: each interval
    # four times the last (the cap), as the iterations cost nothing on this clock
    timed = slowed(DeviceBackend(X, y, "emulated"))
    timed.times_certificates = True
    spaced = [h[0] for h in sdca(timed, **kw).history]
    assert spaced == [epoch, epoch + 4 * epoch, 8 * epoch]     # the last at max_iter


def test_doubling_estimate_reads_the_rate_from_the_decreases():
    assert doubling_estimate([1.0]) == math.inf
    assert doubling_estimate([1.0, 0.9]) == pytest.approx(0.1)
    # errors 0.4, 0.2, 0.1 above P* = 0 (rate 1/2): the estimate is the last decrease, 0.1
    assert doubling_estimate([0.4, 0.2, 0.1]) == pytest.approx(0.1)
    # errors 0.9, 0.3, 0.1 (rate 1/3): d = 0.2, r = 1/3: 0.2 * (1/3) / (2/3) = 0.1, exact
    assert doubling_estimate([0.9, 0.3, 0.1]) == pytest.approx(0.1)
    # faster than 1/3 per doubling is not believed: the estimate stays at d / 2
    assert doubling_estimate([1.0, 0.1, 0.01]) == pytest.approx(0.045)
    # a decrease that grows: no estimate
    assert doubling_estimate([0.3, 0.29, 0.2]) == math.inf


def test_doubling_estimate_waits_out_the_transient_of_the_first_steps():
    # the first doubling raised the objective (the first steps 1/(lam t) overshoot): no estimate
    # (it used to read as "nothing left" and stopped fits on small data at T = 2 epochs)
    assert doubling_estimate([1.0, 12.0]) == math.inf
    # an increase after a decrease: the noise floor of a stochastic run ...
    assert doubling_estimate([1.0, 0.5, 0.6]) == 0.0
    # ... but a full-batch (deterministic) run has none: still the transient
    assert doubling_estimate([1.0, 0.5, 0.6], noise_floor=False) == math.inf
    assert doubling_estimate([0.4, 0.2, 0.1], noise_floor=False) == pytest.approx(0.1)


def test_small_single_row_fit_does_not_stop_on_the_first_rise(a9a):
    """50 rows of a9a at lam = 1e-4 with single rows: the objective rises from epoch 1 to 2."""
    idx = np.random.RandomState(1).choice(a9a.X.shape[0], 50, replace=False)
    X, y = sp.csr_matrix(a9a.X[idx], dtype=np.float64), a9a.y[idx].astype(np.float64)
    ref = SDCASVC(lam=LAM, backend="numba", tol=1e-9, max_iter=10**7, dtype="float64",
                  random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pg = PegasosSVC(lam=LAM, backend="numba", batch_size=1, dtype="float64",
                        random_state=0).fit(X, y)
    p = [h[1] for h in pg.history_]
    assert p[1] > p[0]                                  # the rise that used to stop the fit
    assert pg.n_iter_ > 2 * X.shape[0]

    def obj(est):
        w = np.append(est.coef_.ravel(), est.intercept_[0])
        m = np.asarray(X @ est.coef_.ravel()).ravel() + est.intercept_[0]
        return 0.5 * LAM * w @ w + np.mean(np.maximum(0.0, 1.0 - y * m))

    assert obj(pg) - obj(ref) < 1.0                     # was 20 after 2 epochs
