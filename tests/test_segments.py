"""Inside a segment no Python of the package runs per iteration.

The solvers drive every backend through one segment call between two
evaluations (``pegasos_segment_m``, ``sdca_segment_m``).  On the compiled CPU
backend a segment is one compiled call: the number of package functions
called during it must not grow with its length.  On the emulated device backend
a segment's launch sequence is captured once per power-of-two length and replayed
(as CUDA graphs are on a GPU): a segment is a few graph launches, and no package
function runs per iteration.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import gpusvm
from gpusvm.backends import make_backend
from gpusvm.backends.base import PegasosPlan, SDCAPlan
from gpusvm.solvers._sampling import SAMPLING_MODES, CounterSampler

PACKAGE = str(Path(gpusvm.__file__).resolve().parent)
#: what a kernel launched from Python calls (the backend's helpers, the emulator's argument check)
PER_LAUNCH = {"_call", "_draw", "_launch", "_kernel", "_convert"}


def problem(n=300, d=40, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, random_state=rng, format="csr", dtype=np.float64)
    X.sort_indices()
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return X, y


def package_calls(fn):
    """Run ``fn()``; return the package functions called, as (caller, callee) name pairs."""
    calls = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            back = frame.f_back
            calls.append((back.f_code.co_name if back else "", frame.f_code.co_name))

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def segment_calls(be, kind, sampler, plan, t0, t1):
    run = be.pegasos_segment_m if kind == "pegasos" else be.sdca_segment_m
    return package_calls(lambda: run(sampler, t0, t1, plan))


def setup(backend, kind, mode, k, **plan):
    X, y = problem()
    be = make_backend(backend, X, y)
    if kind == "pegasos":
        be.init_state_m(averaging=plan.get("averaged", False))
        p = PegasosPlan(lam=1e-2, k=k, **plan)
    else:
        be.init_state_m()
        be.init_dual_m(plan.get("beta_b", 1.0))
        p = SDCAPlan(lam=1e-2, **plan)
    return be, CounterSampler(X.shape[0], k, mode, 1), p


PEGASOS_PLANS = [dict(), dict(averaged=True, t_avg=3, radius=10.0), dict(unreg_bias=True),
                 dict(optimal=True), dict(schedule="norma"), dict(schedule="constant", eta0=0.1)]
SDCA_PLANS = [dict(), dict(aggressive=True, beta_b=3.0)]


@pytest.mark.parametrize("mode", SAMPLING_MODES)
@pytest.mark.parametrize("k", [1, 8])
@pytest.mark.parametrize("kind, plan", [("pegasos", p) for p in PEGASOS_PLANS]
                         + [("sdca", p) for p in SDCA_PLANS])
def test_numba_segment_runs_no_python_per_iteration(kind, plan, k, mode):
    be, sampler, p = setup("numba", kind, mode, k, **plan)
    # first call: buffers, compilation (not under the profile hook, which makes numba's
    # compiler, Python code, several times slower)
    (be.pegasos_segment_m if kind == "pegasos" else be.sdca_segment_m)(sampler, 0, 5, p)
    short = segment_calls(be, kind, sampler, p, 5, 15)         # 10 iterations
    long = segment_calls(be, kind, sampler, p, 15, 215)        # 200 iterations
    # "epoch" sampling: the host makes each epoch's order once, however many batches read it
    # (k = 8: the 200 iterations span 1,600 positions, 5 or 6 epochs of 300 rows)
    orders = [c for c in long if c[1] == "epoch_order"]
    assert len(orders) <= (-(-215 * k // 300) - 15 * k // 300), long
    long = [c for c in long if c[1] != "epoch_order"]
    short = [c for c in short if c[1] != "epoch_order"]
    assert len(long) == len(short), (short, long)
    assert len(long) <= 13, long                               # a handful per call, not per step


SDCA_VARIANTS = [dict(), dict(beta_b=3.0), dict(aggressive=True, beta_b=3.0)]   # naive, safe, Alg. 2


@pytest.mark.parametrize("mode", SAMPLING_MODES)
@pytest.mark.parametrize("kind, plan", [("pegasos", p) for p in PEGASOS_PLANS]
                         + [("sdca", p) for p in SDCA_VARIANTS])
def test_emulated_segment_runs_no_python_per_iteration(kind, plan, mode):
    """The segment's launches are recorded once and replayed by the emulator: the package
    functions a segment calls are the same, in number and name, for 1, 4 and 8 iterations."""
    be, sampler, p = setup("emulated", kind, mode, 8, **plan)
    segment_calls(be, kind, sampler, p, 0, 2)                 # records the sequence with t = 1
    segment_calls(be, kind, sampler, p, 2, 17)                # and the graphs of 1 to 8 steps
    runs, t = {}, 17
    for steps in (1, 4, 8):
        runs[steps] = sorted(segment_calls(be, kind, sampler, p, t, t + steps))
        t += steps
    assert runs[1] == runs[4] == runs[8], runs                  # one graph launch each
    assert len(runs[8]) <= 60, runs[8]         # a handful per segment (joins, one graph launch)
    assert not {callee for _, callee in runs[8]} & PER_LAUNCH


@pytest.mark.parametrize("kind, plan", [("pegasos", dict(optimal=True, averaged=True, t_avg=3)),
                                        ("sdca", dict(aggressive=True, beta_b=3.0))])
def test_emulated_replay_matches_the_numpy_reference(kind, plan):
    """Replayed segments of several lengths give the NumPy backend's iterate (one output)."""
    out = {}
    for backend in ("numpy", "emulated"):
        be, sampler, p = setup(backend, kind, "with_replacement", 8, **plan)
        for t0, t1 in ((0, 1), (1, 5), (5, 30), (30, 31)):
            run = be.pegasos_segment_m if kind == "pegasos" else be.sdca_segment_m
            run(sampler, t0, t1, p)
        w, b = be.output_m(averaged=kind == "pegasos")
        out[backend] = (be.to_host(w), float(be.to_host(b)[0]))
    np.testing.assert_allclose(out["emulated"][0], out["numpy"][0], rtol=1e-10, atol=1e-12)
    assert out["emulated"][1] == pytest.approx(out["numpy"][1], rel=1e-12, abs=1e-12)


# ---------------------------------------------------------------- the general path
# M outputs, example weights, the squared hinge: the *_m primitives of the device backend record
# their segment as the binary path does (kernels only, every scalar on the device).

def setup_general(backend, kind, mode, k, M=2, weighted=True, **plan):
    X, y = problem()
    rng = np.random.default_rng(5)
    Y = np.stack([y] + [np.where(rng.random(y.size) < 0.5, 1.0, -1.0) for _ in range(M - 1)],
                 axis=1) if M > 1 else y
    s = rng.uniform(0.0, 2.0, y.size) if weighted else None
    if s is not None:
        s[:5] = 0.0
    be = make_backend(backend, X, Y, sample_weight=s) if weighted or M > 1 else \
        make_backend(backend, X, y, sample_weight=np.ones(y.size))
    if kind == "pegasos":
        be.init_state_m(averaging=plan.get("averaged", False))
        p = PegasosPlan(lam=1e-2, k=k, **plan)
    else:
        be.init_state_m()
        be.init_dual_m(plan.get("beta_b", 1.0), loss=plan.get("loss", "hinge"))
        p = SDCAPlan(lam=1e-2, **plan)
    return be, CounterSampler(X.shape[0], k, mode, 1), p


GENERAL_CASES = (
    [("pegasos", M, w, p) for M, w, p in [
        (2, True, dict()),
        (3, False, dict(averaged=True, t_avg=3, radius=10.0, loss="squared_hinge")),
        (1, True, dict(unreg_bias=True, loss="squared_hinge")),
        (2, True, dict(optimal=True)),
        (2, False, dict(schedule="norma")),
        (1, True, dict(schedule="constant", eta0=0.1))]]
    + [("sdca", M, w, p) for M, w, p in [
        (2, True, dict()),
        (3, False, dict(beta_b=3.0, loss="squared_hinge")),
        (2, True, dict(aggressive=True, beta_b=3.0)),
        (1, True, dict(aggressive=True, beta_b=3.0, loss="squared_hinge"))]])


def general_segment_calls(be, kind, sampler, plan, t0, t1):
    run = be.pegasos_segment_m if kind == "pegasos" else be.sdca_segment_m
    return package_calls(lambda: run(sampler, t0, t1, plan))


@pytest.mark.parametrize("mode", SAMPLING_MODES)
@pytest.mark.parametrize("kind, M, weighted, plan", GENERAL_CASES)
def test_emulated_general_segment_runs_no_python_per_iteration(kind, M, weighted, plan, mode):
    """The general path's segments are recorded and replayed too: the same package calls, in
    number and name, for 1, 4 and 40 iterations, and no launch from Python inside them."""
    be, sampler, p = setup_general("emulated", kind, mode, 8, M, weighted, **plan)
    general_segment_calls(be, kind, sampler, p, 0, 2)          # records with t = 1
    general_segment_calls(be, kind, sampler, p, 2, 17)         # and the graphs of 1 to 8 steps
    runs, t = {}, 17
    for steps in (1, 4, 8):
        runs[steps] = sorted(general_segment_calls(be, kind, sampler, p, t, t + steps))
        t += steps
    assert runs[1] == runs[4] == runs[8], runs                  # one graph launch each
    assert len(runs[8]) <= 60, runs[8]
    assert not {callee for _, callee in runs[8]} & (PER_LAUNCH | {"_multi"})


@pytest.mark.parametrize("kind, M, weighted, plan",
                         [("pegasos", 3, True, dict(optimal=True, averaged=True, t_avg=3,
                                                    loss="squared_hinge")),
                          ("pegasos", 2, False, dict(unreg_bias=True, radius=2.0)),
                          ("sdca", 3, True, dict(aggressive=True, beta_b=3.0,
                                                 loss="squared_hinge")),
                          ("sdca", 2, True, dict(beta_b=3.0))])
def test_emulated_general_replay_matches_the_numpy_reference(kind, M, weighted, plan):
    """Replayed general-path segments of several lengths give the NumPy backend's iterate."""
    out = {}
    for backend in ("numpy", "emulated"):
        be, sampler, p = setup_general(backend, kind, "with_replacement", 8, M, weighted, **plan)
        run = be.pegasos_segment_m if kind == "pegasos" else be.sdca_segment_m
        for t0, t1 in ((0, 1), (1, 5), (5, 30), (30, 31)):
            run(sampler, t0, t1, p)
        W, b = be.output_m(averaged=kind == "pegasos")
        host = be.to_host if backend == "emulated" else np.asarray
        out[backend] = (host(W), host(b), host(be.sm),
                        host(be.alpha) if kind == "sdca" else None)
    np.testing.assert_allclose(out["emulated"][0], out["numpy"][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["emulated"][1], out["numpy"][1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["emulated"][2], out["numpy"][2], rtol=1e-9, atol=1e-10)
    if kind == "sdca":
        np.testing.assert_allclose(out["emulated"][3], out["numpy"][3], rtol=1e-10, atol=1e-12)
