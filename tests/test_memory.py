"""The memory a fit needs, estimated before it starts and refused when it is not there."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from gpusvm import SDCASVC, _memory
from gpusvm.datasets import make_sparse_classification


def _data(n=20_000, d=5_000, m=30):
    return make_sparse_classification(n, d, nnz_per_row=m, random_state=3)


@pytest.mark.parametrize("solver", ["sdca", "newton"])
def test_the_estimate_is_within_a_factor_of_the_measured_peak(solver):
    """tracemalloc's peak of a fit (numpy's allocations beyond ``X``) against the estimate."""
    X, y = _data()
    est = SDCASVC(solver=solver, loss="squared_hinge", backend="numba", tol=1e-3)
    est.fit(X[:500], y[:500])                 # compiled before measuring
    tracemalloc.start()
    est.fit(X, y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    need = _memory.fit_peak_bytes(*X.shape, X.nnz, 4, solver=solver,
                                  bias=not est._implicit_bias())
    assert peak / 2 <= need <= 2 * peak, (peak, need)


def test_a_fit_that_would_not_fit_is_refused_in_one_line(monkeypatch):
    X, y = _data()
    monkeypatch.setattr(_memory, "available_memory", lambda xp=np: 1 << 20)
    need = _memory.fit_peak_bytes(*X.shape, X.nnz, 4, solver="newton", bias=False)
    with pytest.raises(MemoryError) as err:
        SDCASVC(solver="newton", loss="squared_hinge").fit(X, y)
    assert str(err.value) == (
        f"this newton fit of 20000 x 5000 with {X.nnz} nonzeros needs about "
        f"{need / 2**20:.0f} MiB beyond X, but 1 MiB is available: fit a sample of the rows, "
        "the dual (dual=True: SDCA), or on a machine with more memory (out of core fitting "
        "is not available yet)")


def test_the_cgroup_limit_caps_the_available_memory(monkeypatch):
    monkeypatch.setattr(_memory, "_host_available", lambda: 8 << 30)
    monkeypatch.setattr(_memory, "cgroup_available", lambda: 1 << 30)
    assert _memory.available_memory() == 1 << 30
    monkeypatch.setattr(_memory, "cgroup_available", lambda: None)
    assert _memory.available_memory() == 8 << 30


def test_cgroup_room_is_limit_minus_usage(monkeypatch, tmp_path):
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    limit.write_text("1073741824\n")
    usage.write_text("73741824\n")
    monkeypatch.setattr(_memory, "_CGROUP_FILES", ((str(limit), str(usage)),))
    assert _memory.cgroup_available() == 1_000_000_000
    limit.write_text("max\n")
    assert _memory.cgroup_available() is None


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_newton_fit_makes_no_copy_of_x(monkeypatch, n_jobs):
    """All a Newton fit allocates (tracemalloc) stays below one float64 array of X's
    nonzeros: no float64 copy, no bias column appended, no squares, no active rows' copy
    of the whole (each of these alone was larger)."""
    from gpusvm import _threads  # noqa: PLC0415
    monkeypatch.setattr(_threads, "THREAD_MIN_NNZ", 1000)
    X, y = _data(20_000, 2_000, 60)
    est = SDCASVC(solver="newton", loss="squared_hinge", backend="numba", n_jobs=n_jobs)
    est.fit(X[:500], y[:500])
    tracemalloc.start()
    est.fit(X, y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert est.n_threads_ == n_jobs
    assert peak < 8 * X.nnz, (peak, 8 * X.nnz)
