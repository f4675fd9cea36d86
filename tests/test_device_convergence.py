"""The device's defaults reach their tolerance on every data shape (the emulated device).

On overlapping rows (a9a: 14 of 123 features a row, ``sigma^2`` about 0.49 with the bias
column) a batch of ``n`` rows buys ``n / beta_n = 1 / sigma^2``, about two, coordinate steps:
a fixed batch of the whole set with a cap of 100 such iterations stopped far above ``tol``.
The device's ``batch_size="auto"`` is the batch the cost model chooses
(:func:`gpusvm.solvers.policy.device_batch`), and its cap allows the progress of as many
single-row epochs (:func:`gpusvm.solvers.policy.epoch_iterations`).  The emulator is slow:
the fast tests take a few hundred rows, the slow-marked ones the sets of the report.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from gpusvm import LinearSVC, PegasosSVC, SDCASVC, spectral
from gpusvm.solvers.policy import (DEVICE_AUTO_BATCH, MAX_EPOCHS_DOUBLING, SDCA_EPOCHS,
                                   device_batch_size, pegasos_settings, sdca_settings)


def _beta(b, n, s2):
    """eq. (11), written out here."""
    return 1.0 + (b - 1) * (n * s2 - 1.0) / (n - 1)


def _augmented(X):
    return sp.hstack([X, np.ones((X.shape[0], 1))]).tocsr()


# ------------------------------------------------------------------ the policy
@pytest.mark.parametrize("n, s2, nnz", [(4000, 0.49, 15.0), (25000, 0.556, 139.0),
                                        (300, 0.5, 15.0)])
def test_device_sdca_settings_are_the_models_batch_and_a_cap_in_single_row_epochs(n, s2, nnz):
    lam = 1.0 / n
    got = sdca_settings("emulated", n, "auto", "auto", None, True, lam=lam, sigma2=s2,
                        mean_row_nnz=nnz)
    b = device_batch_size(n, lam, s2, nnz, "sdca")
    assert (got.b, got.variant, got.shrinking) == (b, "aggressive" if b > 1 else "safe", False)
    assert math.isclose(got.epoch, n * _beta(b, n, s2) / b, rel_tol=1e-12)
    assert got.max_iter == math.ceil(SDCA_EPOCHS * got.epoch)
    full = sdca_settings("cupy", n, n, "auto", None, True, lam=lam, sigma2=s2, mean_row_nnz=nnz)
    assert math.isclose(full.epoch, n * s2, rel_tol=1e-12)          # beta_n = n sigma^2
    assert sdca_settings("emulated", n, "auto", "auto", None, True, lam=lam, sigma2=s2,
                         mean_row_nnz=nnz, epochs=7).max_iter == math.ceil(7 * got.epoch)


def test_cpu_settings_and_the_device_without_data_keep_their_rules():
    n = 5000
    cpu = sdca_settings("numba", n, "auto", "auto", None, True, lam=1e-3, sigma2=0.5,
                        mean_row_nnz=10.0)
    assert (cpu.b, cpu.max_iter, cpu.shrinking, cpu.epoch) == (1, SDCA_EPOCHS * n, True, n)
    blind = sdca_settings("emulated", n, "auto", "auto", None, True)
    b = min(n, DEVICE_AUTO_BATCH)
    assert (blind.b, blind.max_iter) == (b, math.ceil(SDCA_EPOCHS * n / b))


def test_device_pegasos_settings():
    n, lam, s2, nnz = 4000, 2.5e-4, 0.49, 15.0
    k, averaging, max_iter = pegasos_settings("emulated", n, "auto", "auto", None, "augmented",
                                              lam=lam, sigma2=s2, mean_row_nnz=nnz)
    assert k == device_batch_size(n, lam, s2, nnz, "pegasos") and averaging == "doubling"
    assert max_iter == math.ceil(MAX_EPOCHS_DOUBLING * n * _beta(k, n, s2) / k)
    # one chunk of a stream keeps its epoch of n / k iterations
    assert pegasos_settings("emulated", n, "auto", "auto", None, "augmented", True) == (
        min(n, DEVICE_AUTO_BATCH), "none", 1)
    assert pegasos_settings("numba", n, "auto", "auto", None, "augmented", lam=lam,
                            sigma2=s2, mean_row_nnz=nnz) == (1, "doubling",
                                                             MAX_EPOCHS_DOUBLING * n)


def test_all_zero_rows_do_not_break_the_choice():
    """``sigma^2 = 0`` (no row has a nonzero): the model takes ``1/n``, eq. (11)'s floor."""
    got = sdca_settings("emulated", 50, "auto", "auto", None, True, lam=0.1, sigma2=0.0,
                        mean_row_nnz=0.0)
    assert got.b == 50 and got.epoch == 1.0


# ------------------------------------------------------------------ end to end, emulated
@pytest.fixture(scope="module")
def overlapping(a9a):
    """400 rows of a9a, float64 labels in {-1, 1}: rows that share most features."""
    X = sp.csr_matrix(a9a.X[:400], dtype=np.float64)
    y = np.where(a9a.y[:400] > 0, 1.0, -1.0)
    return X, y


def _quiet(est, X, y):
    """Fit, failing on a ConvergenceWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.filterwarnings("ignore", message=".*compil")
        return est.fit(X, y)


def _primal(X, y, coef, intercept, lam, loss):
    """SDCASVC's ``P(w)`` of the augmented problem, from the definitions."""
    w = np.append(np.ravel(coef), np.ravel(intercept))
    m = np.maximum(0.0, 1.0 - y * (_augmented(X) @ w))
    return 0.5 * lam * w @ w + np.mean(m if loss == "hinge" else m * m)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_sdcasvc_default_certifies_on_overlapping_rows(overlapping, loss):
    """The old default (a batch of all 400 rows, 100 iterations) stopped at a gap far above
    ``tol``; the chosen batch and cap reach the CPU's certified gap, and the two primal
    objectives agree within the gaps (each bounds its distance to ``P*``)."""
    X, y = overlapping
    kw = dict(C=0.1, loss=loss, random_state=0)
    cpu = _quiet(SDCASVC(backend="numba", **kw), X, y)
    emu = _quiet(SDCASVC(backend="emulated", **kw), X, y)
    assert emu.backend_ == "emulated" and emu.stop_reason_ == cpu.stop_reason_ == "tol"
    assert emu.duality_gap_ <= emu.tol
    s2 = spectral.sigma_squared(_augmented(X))
    assert emu.sigma2_ == pytest.approx(s2, rel=1e-9)
    assert emu.batch_size_ == device_batch_size(400, emu.lam_, s2, _augmented(X).nnz / 400)
    p_emu = _primal(X, y, emu.coef_, emu.intercept_, emu.lam_, loss)
    p_cpu = _primal(X, y, cpu.coef_, cpu.intercept_, cpu.lam_, loss)
    assert p_emu == pytest.approx(emu.primal_objective_, rel=1e-6)
    assert abs(p_emu - p_cpu) <= max(emu.duality_gap_, cpu.duality_gap_) + 1e-6


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_linearsvc_dual_default_certifies_on_overlapping_rows(overlapping, loss):
    """``LinearSVC(dual=True)`` on the device: its ``tol`` (1e-4 relative), no warning, and
    the objective within 1e-4 relative of the CPU's (``C = 0.5``, where the old cap of 1,000
    epochs stopped at relative gaps of 2e-3 and 4e-2, is in the slow tests)."""
    X, y = overlapping
    C = 0.1
    cpu = _quiet(LinearSVC(dual=True, C=C, loss=loss, backend="numba", random_state=0), X, y)
    emu = _quiet(LinearSVC(dual=True, C=C, loss=loss, backend="emulated", random_state=0), X, y)
    assert emu.solver_ == "sdca" and emu.stop_reason_ == "tol" and emu.duality_gap_ <= 1e-4
    lam = 1.0 / (C * X.shape[0])
    p_emu = _primal(X, y, emu.coef_, emu.intercept_, lam, loss)
    p_cpu = _primal(X, y, cpu.coef_, cpu.intercept_, lam, loss)
    assert abs(p_emu - p_cpu) <= 1e-4 * p_cpu


def test_pegasos_default_reaches_the_cpus_objective(overlapping):
    """PegasosSVC's doubling average on the device stops by its rule (no warning) at an
    objective no worse than the CPU's default fit, to the rule's ``tol`` (the old default,
    64 iterations of all 400 rows, stopped at the cap above the CPU's objective)."""
    X, y = overlapping
    kw = dict(C=0.1, random_state=0)
    cpu = _quiet(PegasosSVC(backend="numba", **kw), X, y)
    emu = _quiet(PegasosSVC(backend="emulated", **kw), X, y)
    assert emu.stop_reason_ == cpu.stop_reason_ == "tol"
    lam = float(emu.lam_)
    p_emu = _primal(X, y, emu.coef_, emu.intercept_, lam, "hinge")
    p_cpu = _primal(X, y, cpu.coef_, cpu.intercept_, lam, "hinge")
    assert p_emu <= p_cpu + emu.tol


# ------------------------------------------------------------------ slow: the report's sets
def _dense_ish(name, a9a):
    if name == "a9a-4000":
        X, y = a9a.X[:4000], a9a.y[:4000]
    else:                                   # 6,000 rows, 100 features, about 14 a row
        from gpusvm.datasets import make_sparse_classification
        X, y = make_sparse_classification(6000, 100, nnz_per_row=16, random_state=0,
                                          dtype=np.float64)
    return sp.csr_matrix(X, dtype=np.float64), np.where(np.asarray(y) > 0, 1.0, -1.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["a9a-4000", "generated-6000"])
@pytest.mark.parametrize("C", [0.1, 1.0])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_linearsvc_dual_on_dense_ish_sets(a9a, name, C, loss):
    """The issue's sets: the CPU certified 1e-4 in 17 to 296 epochs where the device's old
    default ended 1,000 epochs at relative gaps of 0.17 to 0.39."""
    X, y = _dense_ish(name, a9a)
    cpu = _quiet(LinearSVC(dual=True, C=C, loss=loss, backend="numba", random_state=0), X, y)
    emu = _quiet(LinearSVC(dual=True, C=C, loss=loss, backend="emulated", random_state=0), X, y)
    assert emu.stop_reason_ == "tol" and emu.duality_gap_ <= 1e-4
    lam = 1.0 / (C * X.shape[0])
    p_emu = _primal(X, y, emu.coef_, emu.intercept_, lam, loss)
    p_cpu = _primal(X, y, cpu.coef_, cpu.intercept_, lam, loss)
    assert abs(p_emu - p_cpu) <= 1e-4 * p_cpu


@pytest.mark.slow
@pytest.mark.parametrize("name, rows", [("imdb", 3000), ("news20", 2000),
                                        ("imdb", None), ("news20", None)])
def test_text_sets_on_the_device(request, name, rows):
    """SDCASVC, LinearSVC (``dual="auto"``: SDCA, handing over to Newton as on the CPU) and
    PegasosSVC on the text sets (a subset, then the whole set)."""
    data = request.getfixturevalue(name)
    n = data.X.shape[0]             # the files are sorted by class: a random subset
    take = np.sort(np.random.default_rng(0).permutation(n)[:rows]) if rows else slice(None)
    X = sp.csr_matrix(data.X[take], dtype=np.float64)
    y = np.where(np.asarray(data.y)[take] > 0, 1.0, -1.0)
    cpu = _quiet(SDCASVC(C=1.0, backend="numba", random_state=0), X, y)
    emu = _quiet(SDCASVC(C=1.0, backend="emulated", random_state=0), X, y)
    assert emu.stop_reason_ == "tol"
    assert abs(emu.primal_objective_ - cpu.primal_objective_) <= max(emu.duality_gap_,
                                                                     cpu.duality_gap_)
    cpu = _quiet(LinearSVC(C=1.0, backend="numba", random_state=0), X, y)
    emu = _quiet(LinearSVC(C=1.0, backend="emulated", random_state=0), X, y)
    assert emu.solver_ == cpu.solver_ and emu.duality_gap_ <= 1e-4
    lam = 1.0 / X.shape[0]
    p_emu = _primal(X, y, emu.coef_, emu.intercept_, lam, "squared_hinge")
    p_cpu = _primal(X, y, cpu.coef_, cpu.intercept_, lam, "squared_hinge")
    assert abs(p_emu - p_cpu) <= 1e-4 * p_cpu
    cpu = _quiet(PegasosSVC(C=0.1, backend="numba", random_state=0), X, y)
    emu = _quiet(PegasosSVC(C=0.1, backend="emulated", random_state=0), X, y)
    lam = float(emu.lam_)
    assert emu.stop_reason_ == "tol"
    assert _primal(X, y, emu.coef_, emu.intercept_, lam, "hinge") <= \
        _primal(X, y, cpu.coef_, cpu.intercept_, lam, "hinge") + emu.tol
