"""Primal Newton on the device backend (run here on the CPU kernel emulator's runtime): the
same iterations as the CPU Newton, a fixed number of host reads per Newton iteration, the CPU's
errors for bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import LinearSVC, LinearSVCCV
from gpusvm.backends import make_backend
from gpusvm.solvers import _newton_device as dev
from gpusvm.solvers import newton as newton_module
from gpusvm.solvers.newton import newton


@pytest.fixture(scope="module")
def a9a_rows(a9a):
    X = sp.csr_matrix(a9a.X[:8000], dtype=np.float64)
    y = np.where(a9a.y[:8000] > 0, 1.0, -1.0)
    return X, y


def sparse_classes(n=900, d=40, k=3, seed=0):
    """A sparse ``k``-class set (a tenth of the entries nonzero, below the density at which
    the CPU multiplies densely and solves small problems by Cholesky, where the device runs
    CG) with class-dependent means."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    mask = rng.random((n, d)) < 0.1
    X = (rng.normal(size=(n, d)) + 0.8 * np.eye(k, d)[y] * 3) * mask
    return sp.csr_matrix(X), y


def with_bias(X):
    return sp.hstack([X, np.ones((X.shape[0], 1))]).tocsr()


def test_line_search_and_cg_are_the_cpu_forms():
    """The device line search (every breakpoint sorted on the device) finds the CPU's exact
    step to rounding; the device CG (columns frozen on the device, live ones read per batch)
    makes the CPU CG's iterates and step count."""
    rng = np.random.default_rng(3)
    n, d = 3000, 15
    for _ in range(4):
        w, p = rng.normal(size=d), rng.normal(size=d)
        z, q, s = 2 * rng.normal(size=n), 0.5 * rng.normal(size=n), rng.random(n)
        t_cpu = newton_module._line_search(np, 1e-3, n, w, p, z, q, s)
        t_dev = dev.line_search(np, 1e-3, n, w[:, None], p[:, None], z[:, None], q[:, None],
                                s[:, None])
        assert t_dev.shape == (1,)
        np.testing.assert_allclose(t_dev[0], t_cpu, rtol=1e-12)
    # a zero direction takes no step (the CPU form divides 0 by 0 there)
    zero = dev.line_search(np, 1e-3, n, w[:, None], np.zeros((d, 1)), z[:, None],
                           np.zeros((n, 1)), s[:, None])
    assert zero[0] == 0.0
    X = sp.random(400, 30, density=0.3, random_state=4, format="csr")
    prod = newton_module._Products(X, direct=False)
    SA = (rng.random((400, 2)) < 0.6) * 2.0 / 400
    lam = 1e-3
    inv = 1.0 / (lam + prod.sq_rmm(SA))
    G = rng.normal(size=(30, 2))
    reads = []

    def read(a):
        reads.append(a)
        return np.array(a)

    for eta in (1e-1, 1e-3):
        eta = np.array([eta, eta / 10])
        P_cpu, k_cpu = newton_module._cg(np, lambda V, c: lam * V + prod.rmm(SA[:, c] * prod.mm(V)),
                                         -G, eta, 250, inv)
        reads.clear()
        P_dev, k_dev = dev.cg(np, lambda V, c: lam * V + prod.rmm(SA[:, c] * prod.mm(V)),
                              -G, eta, 250, inv, read, dev.CG_FIRST_BATCH)
        # the same operations; a column's dot products may sum in another order while a
        # frozen one still shares its block (BLAS's dot against einsum)
        np.testing.assert_allclose(P_dev, P_cpu, rtol=1e-10, atol=0)
        assert k_dev == k_cpu
        assert len(reads) <= min(dev.cg_reads_bound(250), k_cpu)


@pytest.mark.parametrize("C", [0.1, 1.0])
def test_device_newton_equals_the_cpu_newton_on_a9a(a9a_rows, C):
    """LinearSVC's primal Newton on the emulated device against the CPU (NumPy) backend: the
    same Newton iterations and coefficients to 1e-6 relative.  At a certified optimum: a9a's
    one-hot columns leave directions that only ``lam`` curves, along which a gap of 1e-8
    still pins the coefficients only to about 1e-4 (1e-10: about 1e-6), and the two forms'
    roundings (the line search sums in another order) pick different points there."""
    X, y = a9a_rows
    kw = dict(dual=False, C=C, tol=1e-14, max_iter=50)
    cpu = LinearSVC(backend="numpy", **kw).fit(X, y)
    emu = LinearSVC(backend="emulated", **kw).fit(X, y)
    assert (cpu.backend_, emu.backend_) == ("numpy", "emulated")
    assert cpu.solver_ == emu.solver_ == "newton"
    assert emu.n_iter_ == cpu.n_iter_
    scale = np.abs(cpu.coef_).max()
    assert np.abs(emu.coef_ - cpu.coef_).max() <= 1e-6 * scale
    assert abs(emu.intercept_[0] - cpu.intercept_[0]) <= 1e-6 * scale


def test_device_newton_equals_the_cpu_newton_on_three_classes():
    """One-vs-rest: every output's Newton iterations and coefficients as on the CPU."""
    X, y = sparse_classes()
    kw = dict(dual=False, C=0.5, tol=1e-14, max_iter=50)
    cpu = LinearSVC(backend="numpy", **kw).fit(X, y)
    emu = LinearSVC(backend="emulated", **kw).fit(X, y)
    iterations = [[rows[-1][0] for rows in est._inner_estimator.history_] for est in (cpu, emu)]
    assert len(iterations[0]) == 3 and iterations[0] == iterations[1]
    np.testing.assert_allclose(emu.coef_, cpu.coef_, rtol=0, atol=1e-6 * np.abs(cpu.coef_).max())
    np.testing.assert_allclose(emu.intercept_, cpu.intercept_, rtol=0,
                               atol=1e-6 * np.abs(cpu.coef_).max())
    assert (emu.predict(X) == cpu.predict(X)).all()


def test_float32_data_multiplies_in_float64(a9a_rows):
    """float32 data: the device's products run on a float64 copy, as the CPU's, so the two
    fits are the float64 ones (the same iterations, coefficients to 1e-6)."""
    X, y = a9a_rows
    X32 = X[:3000].astype(np.float32)
    y = y[:3000]
    kw = dict(dual=False, C=0.1, tol=1e-14)
    cpu = LinearSVC(backend="numpy", **kw).fit(X32, y)
    emu = LinearSVC(backend="emulated", **kw).fit(X32, y)
    assert emu.n_iter_ == cpu.n_iter_
    assert np.abs(emu.coef_ - cpu.coef_).max() <= 1e-6 * np.abs(cpu.coef_).max()


def test_host_reads_per_newton_iteration_are_bounded(a9a_rows):
    """Every value the device Newton reads goes through the backend's counted ``to_host``,
    no device array is read implicitly (``float``, ``bool``, ``item``: each a copy and a
    synchronisation on a GPU), and the reads of a Newton iteration are at most
    :func:`reads_per_iteration_bound` (its certificate, CG's batches) however many CG steps
    it takes."""
    from gpusvm_emulator import streams  # noqa: PLC0415

    X, y = a9a_rows
    X = with_bias(X[:4000])
    y = y[:4000]
    n = X.shape[0]
    for lam, tol in ((1.0 / n, 1e-6), (1.0 / (50.0 * n), 1e-12)):
        be = make_backend("emulated", X, y)
        implicit = streams.stats["implicit_reads"]
        res = newton(be, lam=lam, tol=tol)
        assert streams.stats["implicit_reads"] == implicit
        assert res.stop_reason == "tol"
        reads = len(be.transfers) - 2                 # the result's w and alpha
        iterations = res.n_iter
        assert reads <= 1 + iterations * dev.reads_per_iteration_bound(newton_module.MAX_CG_ITER)
        assert res.extra["cg_iter"] > 2 * reads       # far fewer reads than CG steps
        cpu = newton(make_backend("numpy", X, y), lam=lam, tol=tol)
        assert cpu.n_iter == res.n_iter


def test_bad_input_as_on_the_cpu(a9a_rows):
    """The device Newton refuses what the CPU Newton refuses, with the same messages."""
    X, y = a9a_rows
    X, y = X[:200], y[:200]
    for name in ("numpy", "emulated"):
        be = make_backend(name, X, y)
        with pytest.raises(ValueError, match=r"^lam must be > 0, got -1\.0$"):
            newton(be, lam=-1.0)
        with pytest.raises(ValueError, match=r"^max_iter must be a non-negative integer, got -1$"):
            newton(be, lam=1.0, max_iter=-1)
        zero = newton(be, lam=1.0, max_iter=0)      # w0 = 0 certified, as LinearSVC(max_iter=0)
        assert zero.n_iter == 0 and zero.stop_reason == "max_iter" and not zero.w.any()
    bad = X.copy()
    bad.data[0] = np.nan
    messages = []
    for name in ("numpy", "emulated"):
        with pytest.raises(ValueError) as info:
            LinearSVC(dual=False, backend=name).fit(bad, y)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    messages = []
    for name in ("numpy", "emulated"):
        with pytest.raises(ValueError) as info:
            LinearSVC(dual=False, backend=name).fit(X, y, sample_weight=-np.ones(200))
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_newton_block_on_the_device_equals_the_cpu_block(a9a_rows):
    """The C search's Newton block (folds of one ``C`` as the columns of one d x M block):
    on the device the same per-output iterations and weights as the CPU block, converged
    outputs dropped at the host's reads."""
    X, y = a9a_rows
    X = with_bias(X[:3000])
    y = y[:3000]
    n = X.shape[0]
    rng = np.random.default_rng(0)
    fold = rng.integers(0, 3, n)
    S = np.column_stack([(fold != f).astype(np.float64) for f in range(3)] + [np.ones(n)])
    Y = np.repeat(y[:, None], 4, axis=1)
    lam = 1.0 / (0.2 * n)
    tol = np.array([1e-12, 1e-12, 1e-12, 1e-6])
    cpu = newton_module.newton_block(X, Y, S, lam, tol)
    be = make_backend("emulated", X, y)
    got = newton_module.newton_block(None, Y, S, lam, tol,
                                     products=newton_module.device_block_products(be))
    np.testing.assert_array_equal(got["n_iter"], cpu["n_iter"])
    assert isinstance(got["w"], np.ndarray)
    pinned = slice(0, 3)                  # the outputs certified to 1e-12
    np.testing.assert_allclose(got["w"][:, pinned], cpu["w"][:, pinned], rtol=0,
                               atol=1e-6 * np.abs(cpu["w"]).max())
    assert (got["gap"] <= tol).all()


def test_linear_svc_cv_searches_on_the_device(monkeypatch):
    """LinearSVCCV with a device backend: the Newton search's blocks (one per ``C``, every
    fold an output) and the refit run there (no warning), choosing the CPU's ``C``."""
    X, y = sparse_classes(n=600, d=20, k=2, seed=1)
    kw = dict(Cs=[0.01, 0.1, 1.0], cv=3, tol=1e-8)
    cpu = LinearSVCCV(backend="numpy", **kw).fit(X, y)
    blocks = []
    run = dev.iterate

    def spy(prod, Y, *args, **kwargs):
        blocks.append((type(Y).__module__, Y.shape[1]))
        return run(prod, Y, *args, **kwargs)

    monkeypatch.setattr(dev, "iterate", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        emu = LinearSVCCV(backend="emulated", **kw).fit(X, y)
    assert blocks[:3] == [("gpusvm_emulator.streams", 3)] * 3    # the search: 3 C x 3 folds
    assert len(blocks) == 4                                     # and the refit, on the device
    assert emu.solver_ == cpu.solver_ == "newton"
    assert emu.C_ == cpu.C_
    np.testing.assert_allclose(emu.coef_, cpu.coef_, rtol=0, atol=1e-5 * np.abs(cpu.coef_).max())


def test_hand_over_from_sdca_to_newton_stays_on_the_device(monkeypatch, a9a_rows):
    """``dual="auto"`` on the device: SDCA's segments, then Newton from its point, both on
    the device backend (no warning, no CPU backend made), at the optimum the CPU reaches."""
    from gpusvm import backends  # noqa: PLC0415
    from gpusvm.estimators import linear_svc  # noqa: PLC0415

    X, y = a9a_rows
    X, y = X[:100], y[:100]                     # 100 rows, 123 columns: the dual is chosen
    monkeypatch.setattr(linear_svc, "SWITCH_EPOCHS", 2)
    made = []
    real = backends.make_backend

    def spy(name, *args, **kwargs):
        be = real(name, *args, **kwargs)
        made.append(be.name)
        return be

    monkeypatch.setattr("gpusvm.estimators.sdca.make_backend", spy)
    newton_blocks = []
    run = dev.iterate
    monkeypatch.setattr(dev, "iterate", lambda *a, **k: newton_blocks.append(1) or run(*a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = LinearSVC(C=1.0, random_state=0, backend="emulated").fit(X, y)
    assert est.solver_ == "sdca+newton" and est.stop_reason_ == "tol"
    assert set(made) == {"emulated"} and len(made) >= 2 and newton_blocks
    cpu = LinearSVC(C=1.0, dual=False, tol=1e-10, backend="numpy").fit(X, y)
    assert est.duality_gap_ <= 1e-4
    np.testing.assert_allclose(est.decision_function(X), cpu.decision_function(X), atol=0.05)


def test_too_little_device_memory_is_one_clear_error(monkeypatch, a9a_rows):
    """A device without room for the float64 copies the Newton fit makes: one MemoryError
    that says how much, and what to do, before anything is allocated."""
    X, y = a9a_rows
    X, y = X[:300], y[:300]
    be = make_backend("emulated", X, y)
    need = dev.device_bytes(be.n, be.d, be.nnz)
    assert need > 1 << 17
    monkeypatch.setattr(be.runtime, "free_bytes", lambda: 1 << 17)
    with pytest.raises(MemoryError, match=rf"^primal Newton on the emulated backend needs about "
                       rf"{need / 2.0**20:.0f} MiB of device memory beside the data .* but only "
                       r"0 MiB are "
                       r"free; use dual=True .*backend='numba' \(Newton on the CPU\)$"):
        newton(be, lam=1e-3)
    with pytest.raises(MemoryError, match="^primal Newton on the emulated backend"):
        newton_module.device_block_products(be)
