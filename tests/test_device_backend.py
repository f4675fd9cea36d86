"""The device backend against the NumPy backend, through the whole Pegasos solver.

Every test runs the device orchestration on the CPU kernel emulator
(``"emulated"``); the same tests run on a real GPU (``"cupy"``, marked ``gpu``)
whenever CuPy sees a CUDA device.  Same seed, same batches: the float64 runs
must agree with the NumPy backend to 1e-5 relative (they agree to ~1e-13: the
only differences are the order of float64 additions).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import PegasosSVC
from gpusvm.backends import cuda_available, make_backend
from gpusvm.backends._state import S_A
from gpusvm.backends.base import PegasosPlan
from gpusvm.backends.device import DeviceBackend, estimate_device_bytes, make_device_backend
from gpusvm.solvers import pegasos as pegasos_module
from gpusvm.solvers._sampling import CounterSampler
from gpusvm.solvers.pegasos import pegasos

REPO = Path(__file__).resolve().parents[1]
N_ROWS = 6000           # a9a slice: n >= 4096 so that k = 4096 is a true mini-batch
T = 200

BACKENDS = [
    "emulated",
    pytest.param("cupy", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not cuda_available(), reason="no CUDA device")]),
]

#: solver options covering projection, the bias modes, averaging, sampling and renormalisation
CONFIGS = {
    "plain": dict(),
    "unreg-tail-noproj": dict(bias="unregularized", averaging="tail", projection=False),
    "optimal-all-iid": dict(bias="optimal", averaging="all", sampling="with_replacement"),
    "augmented": dict(augment=True),
    "epochs-tail": dict(sampling="epoch", averaging="tail"),   # drawn by the margin kernel
    # 1 - eta lam = 0.01: |a| drops below 1e-6 every few steps and is folded into v
    "renormalizing": dict(schedule="constant", eta0=99.0, projection=False, averaging="all"),
}


@pytest.fixture(scope="module")
def a9a_slice(a9a):
    """First rows of a9a (float64, labels in {-1, +1}) and the same with a constant feature."""
    X = a9a.X[:N_ROWS].astype(np.float64)
    y = a9a.y[:N_ROWS].astype(np.float64)
    assert set(np.unique(y)) == {-1.0, 1.0}
    X_aug = sp.hstack([X, np.ones((N_ROWS, 1))], format="csr")
    return X, y, X_aug


def run(name, X, y, k, opts, **backend_opts):
    opts = dict(opts)
    be = make_backend(name, X, y) if not backend_opts else make_device_backend(name, X, y,
                                                                                **backend_opts)
    res = pegasos(be, lam=1e-2, k=k, max_iter=T, seed=7, eval_every=T // 2, **opts)
    return be, res


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


# ------------------------------------------------------------------ parity through the solver
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("k", [1, 64, 4096])
def test_solver_matches_numpy_float64(a9a_slice, backend, config, k):
    X, y, X_aug = a9a_slice
    opts = dict(CONFIGS[config])
    if opts.pop("augment", False):
        X = X_aug
    _, ref = run("numpy", X, y, k, opts)
    be, res = run(backend, X, y, k, opts)
    assert res.n_iter == ref.n_iter == T
    if np.linalg.norm(ref.w) > 0:
        assert rel(res.w, ref.w) <= 1e-5
    else:                                      # k = 1 with the optimal bias: w stays 0
        assert np.linalg.norm(res.w) == 0
    assert res.b == pytest.approx(ref.b, rel=1e-5, abs=1e-12)
    assert [h[0] for h in res.history] == [h[0] for h in ref.history]
    np.testing.assert_allclose([h[1] for h in res.history], [h[1] for h in ref.history], rtol=1e-5)
    if config == "renormalizing":
        s = be.to_host(be.sm)[:, 0]
        assert 1e-6 <= s[S_A] <= 1.0           # a shrinks 100x per step: it was folded into v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", ["plain", "optimal-all-iid"])
@pytest.mark.parametrize("k", [1, 64, 4096])
def test_solver_matches_numpy_float32(a9a_slice, backend, config, k):
    """float32: ``v`` differs by rounding, so the tolerance grows with k.

    Each float32 atomic addition rounds to 2**-24 of a partial sum, where the NumPy
    backend adds a coordinate's contributions in float64 and rounds once; a
    coordinate of a9a receives up to ~0.1 k additions per step.  The difference
    then moves margins that sit within ~1e-7 of 1 across the hinge, which changes
    the active set.  Bound: ``||w - w_numpy|| <= 1e-6 (k + 1) ||w||`` (measured:
    7e-8 at k = 1, 4e-6 at k = 64, 8e-4 at k = 4096), and the objective, which is
    insensitive to such changes, to 1e-4 relative.
    """
    X, y, _ = a9a_slice
    X, y = X.astype(np.float32), y.astype(np.float32)
    opts = CONFIGS[config]
    _, ref = run("numpy", X, y, k, opts)
    _, res = run(backend, X, y, k, opts)
    if np.linalg.norm(ref.w) > 0:
        assert rel(res.w, ref.w) <= 1e-6 * (k + 1)
    np.testing.assert_allclose([h[1] for h in res.history], [h[1] for h in ref.history], rtol=1e-4)


# ------------------------------------------------------------------ no synchronisation
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bias", ["unregularized", "optimal"])
def test_no_transfer_between_evaluations(a9a_slice, backend, bias):
    """Device-to-host copies happen only inside evaluations; a segment only launches kernels:
    2 per iteration (margins, which draw the batch, and the step with the renormalisation folded
    in), 3 with the optimal bias, plus reset_scale in every iteration of the segment that holds
    t = 1: the launches of the balanced kernels of one output."""
    X, y, _ = a9a_slice
    be = make_backend(backend, X, y)
    events, launches = [], []
    orig_segment, orig_evaluate, orig_to_host = be.pegasos_segment_m, be.evaluate_m, be.to_host

    def segment(sampler, t0, t1, plan):
        events.append("S")
        before = be.launches
        orig_segment(sampler, t0, t1, plan)
        launches.append((t1 - t0, be.launches - before))

    def evaluate(*args, **kwargs):
        events.append("E")
        return orig_evaluate(*args, **kwargs)

    def to_host(a):
        events.append("H")
        return orig_to_host(a)

    be.pegasos_segment_m, be.evaluate_m, be.to_host = segment, evaluate, to_host
    pegasos(be, lam=1e-2, k=256, max_iter=60, seed=1, eval_every=20, averaging="tail", bias=bias)
    trace = "".join(events)
    assert trace.count("S") == 3 and trace.count("E") == 3
    # before the loop one copy: the class weights S+ and S- of the projection radius
    setup, *loop = trace.split("S")
    assert setup == "H", trace
    # in the loop a copy happens only where an evaluation runs, never inside a segment
    for part in loop:
        if "H" in part:
            assert "E" in part, trace
    assert len(be.transfers) == trace.count("H")
    # each evaluation copies the objective once (the optimal bias over all rows stays on the
    # device); at the end w and b
    assert trace.count("H") == 1 + 3 + 2
    # sample (drawn by the margin kernel), margins, (optimal bias), step; the first segment also
    # resets the scale (eta_1 lam = 1)
    per = 3 if bias == "optimal" else 2
    assert launches == [(20, (per + 1) * 20), (20, per * 20), (20, per * 20)]


# ------------------------------------------------------------------ inputs and errors
@pytest.mark.parametrize("form", ["dense", "csr_int64", "csc", "coo_f32"])
def test_accepts_host_inputs(form):
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(50, 30)) * (rng.random((50, 30)) < 0.3)
    y = np.where(rng.random(50) < 0.5, -1.0, 1.0)
    X = {"dense": dense, "csc": sp.csc_matrix(dense),
         "csr_int64": sp.csr_matrix(dense), "coo_f32": sp.coo_matrix(dense.astype(np.float32))}[form]
    if form == "csr_int64":
        X.indices, X.indptr = X.indices.astype(np.int64), X.indptr.astype(np.int64)
    be = make_device_backend("emulated", X, y)
    assert be.dtype == (np.float32 if form == "coo_f32" else np.float64)
    w = rng.normal(size=30)
    z = be.to_host(be.decision_function_m(w[:, None], 0.5))[:, 0]
    np.testing.assert_allclose(z, dense.astype(be.dtype) @ w + 0.5, rtol=1e-6 if form == "coo_f32"
                               else 1e-12)
    np.testing.assert_allclose(be.to_host(be.row_sq_norms),
                               (dense.astype(be.dtype).astype(np.float64) ** 2).sum(axis=1),
                               rtol=1e-12)


def test_memory_check_names_needed_and_free_bytes():
    X = sp.random(1000, 500, density=0.05, format="csr", random_state=0)
    y = np.ones(1000)
    need = estimate_device_bytes(1000, 500, X.nnz, 8)["total"]
    with pytest.raises(MemoryError, match=r"needs about .* MiB .* only .* MiB are free.*"
                                          r"the CPU backend \(backend='numba' or 'numpy'\), or a Dask cluster of GPUs"):
        DeviceBackend(X, y, "emulated", free_memory=need - 1)
    DeviceBackend(X, y, "emulated", free_memory=need)      # fits exactly


def test_rejects_unknown_lane_count_and_backend():
    X = sp.random(20, 10, density=0.3, format="csr", random_state=0)
    with pytest.raises(ValueError, match="lanes"):
        make_device_backend("emulated", X, np.ones(20), lanes=5)
    with pytest.raises(ValueError, match="cupy"):
        make_device_backend("numpy", X, np.ones(20))


# ------------------------------------------------------------------ estimator, end to end
@pytest.mark.parametrize("backend", BACKENDS)
def test_estimator_on_the_device_backend(a9a, backend):
    X, y = a9a.X[:3000], a9a.y[:3000]
    kw = dict(lam=1e-3, batch_size=128, max_iter=150, random_state=0, dtype="float64",
              averaging="tail")
    ref = PegasosSVC(backend="numpy", **kw).fit(X, y)
    clf = PegasosSVC(backend=backend, **kw).fit(X, y)
    assert clf.backend_ == backend
    assert rel(clf.coef_, ref.coef_) <= 1e-5
    assert clf.intercept_[0] == pytest.approx(ref.intercept_[0], rel=1e-5)
    assert clf.score(a9a.X_test, a9a.y_test) == pytest.approx(ref.score(a9a.X_test, a9a.y_test))


# ------------------------------------------------------------------ real GPU only
@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_cupy_inputs_stay_on_the_device(a9a_slice):
    import cupy
    import cupyx.scipy.sparse as csp
    X, y, _ = a9a_slice
    Xd = csp.csr_matrix(X)
    yd = cupy.asarray(y)
    be = make_device_backend("cupy", Xd, yd)
    assert be._data.data.ptr == Xd.data.data.ptr          # used in place, not copied
    assert be.X is Xd
    _, ref = run("numpy", X, y, 64, {})
    res = pegasos(be, lam=1e-2, k=64, max_iter=T, seed=7, eval_every=T // 2)
    assert rel(res.w, ref.w) <= 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_cupy_iterations_never_synchronize(a9a_slice):
    import cupyx
    X, y, _ = a9a_slice
    be = make_backend("cupy", X, y)
    be.init_state_m(averaging=True)
    sampler = CounterSampler(N_ROWS, 512, "with_replacement", 0)
    plan = PegasosPlan(lam=1e-2, k=512, optimal=True, radius=10.0, averaged=True, t_avg=1,
                       renorm_threshold=pegasos_module.RENORM_THRESHOLD)
    guard = getattr(cupyx, "allow_synchronize", None)    # deprecated in CuPy 10, may go
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = guard(False) if guard is not None else contextlib.nullcontext()
    with ctx:
        be.pegasos_segment_m(sampler, 0, 20, plan)
        be.output_m(True)
    assert be.transfers == []
    assert be.to_host(be.sm)[S_A, 0] > 0


class _FakeBindings:
    """``cuda.bindings.runtime`` as far as the WHILE graph uses it: records the calls, in order,
    and each call's outcome (a real module's enums and parameter objects)."""

    def __init__(self, cr, cuda13=True, fail=None):
        self._cr, self._cuda13, self._fail, self.calls = cr, cuda13, fail, []

    def __getattr__(self, name):
        if not name.startswith("cuda") or name in ("cudaGraphNodeParams",):
            return getattr(self._cr, name)
        if name.endswith(("Type", "Flags", "Mode")):
            return getattr(self._cr, name)

        def call(*args):
            self.calls.append((name, args))
            if name == "cudaGraphAddNode" and len(args) != (5 if self._cuda13 else 4):
                raise TypeError("other bindings' signature")
            if name == self._fail:
                return (self._cr.cudaError_t.cudaErrorNotSupported, None)
            out = {"cudaGraphCreate": "graph", "cudaGraphConditionalHandleCreate":
                   self._cr.cudaGraphConditionalHandle(77), "cudaGraphInstantiate": "exec",
                   "cudaStreamEndCapture": "body"}.get(name)
            return (self._cr.cudaError_t.cudaSuccess,) if out is None and name in (
                "cudaStreamBeginCaptureToGraph", "cudaGraphUpload", "cudaGraphLaunch",
                "cudaGraphExecDestroy", "cudaGraphDestroy") else (self._cr.cudaError_t.cudaSuccess, out)
        return call


@pytest.mark.parametrize("cuda13", [True, False])
def test_the_cupy_while_graph_follows_cuda_s_sequence(monkeypatch, cuda13):
    """Without a GPU, against cuda-python's own enums and parameter objects: a graph, a handle
    with the default 1, one WHILE node (either bindings' signature), the body captured from
    the backend's stream (the segment's launches, then the count-down kernel with the
    handle's value), instantiated and uploaded once; ``run`` sets the count on the stream,
    then launches; an error in the body's capture ends the capture and is raised as itself."""
    from cuda.bindings import runtime as cr      # the test extra installs it
    import sys as _sys
    import types
    from gpusvm import _kernels
    from gpusvm.backends.device import runtime as rtm
    fake = _FakeBindings(cr, cuda13)
    pkg = types.ModuleType("cuda.bindings")
    pkg.runtime = fake
    monkeypatch.setitem(_sys.modules, "cuda.bindings", pkg)
    monkeypatch.setitem(_sys.modules, "cuda.bindings.runtime", fake)
    events = []

    class Stream:
        ptr = 1234

        def __enter__(self):
            events.append("enter")

        def __exit__(self, *exc):
            events.append("exit")

    class Left(np.ndarray):
        def fill(self, v):
            events.append(("fill", v))
            super().fill(v)

    class Kernel:
        def __call__(self, grid, block, args):
            events.append(("more", int(args[0]), args[1] is loop_left[0]))

    class Module:
        def get_function(self, name):
            assert name == _kernels.WHILE_KERNEL
            return Kernel()

    monkeypatch.setattr(_kernels, "load_while_module", lambda kind: Module())
    rt = types.SimpleNamespace(stream=Stream(), xp=types.SimpleNamespace(
        zeros=lambda n, dtype: np.zeros(n, dtype=dtype).view(Left)))
    loop_left = [None]
    orig_zeros = rt.xp.zeros

    def zeros(n, dtype):
        loop_left[0] = orig_zeros(n, dtype)
        return loop_left[0]

    rt.xp.zeros = zeros
    loop = rtm._CupyWhileGraph(rt, lambda chunk: events.append(("record", chunk)), 16)
    names = [c[0] for c in fake.calls]
    assert names == ["cudaGraphCreate", "cudaGraphConditionalHandleCreate"] + (
        ["cudaGraphAddNode"] if cuda13 else ["cudaGraphAddNode", "cudaGraphAddNode"]) + [
        "cudaStreamBeginCaptureToGraph", "cudaStreamEndCapture", "cudaGraphInstantiate",
        "cudaGraphUpload"]
    assert fake.calls[1][1] == ("graph", 1, 1)                 # default 1, AssignDefault
    params = fake.calls[2 if cuda13 else 3][1][-1]
    assert params.type == cr.cudaGraphNodeType.cudaGraphNodeTypeConditional
    assert params.conditional.type == cr.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile
    assert int(params.conditional.handle) == 77 and params.conditional.size == 1
    begin = fake.calls[names.index("cudaStreamBeginCaptureToGraph")][1]
    assert begin[0] == 1234 and begin[-1] == cr.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
    # the count zeroed on the stream, then the body captured from it
    assert events == ["enter", "exit", "enter", ("record", 16), ("more", 77, True), "exit"]
    events.clear()
    fake.calls.clear()
    loop.run(5)
    assert events == ["enter", ("fill", 5), "exit"] and int(loop.left[0]) == 5
    assert [c[0] for c in fake.calls] == ["cudaGraphLaunch"] and fake.calls[0][1] == ("exec", 1234)

    class Boom(Exception):
        pass

    def bad(chunk):
        raise Boom
    fake.calls.clear()
    with pytest.raises(Boom):
        rtm._CupyWhileGraph(rt, bad, 16)
    names = [c[0] for c in fake.calls]
    assert names.index("cudaStreamEndCapture") > names.index("cudaStreamBeginCaptureToGraph")
    fake._fail = "cudaGraphInstantiate"
    with pytest.raises(RuntimeError, match="cudaGraphInstantiate failed: .*NotSupported"):
        rtm._CupyWhileGraph(rt, lambda chunk: None, 16)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_cupy_while_segments_leave_the_state_of_chunked_graphs(a9a_slice, monkeypatch):
    """GPUSVM_GRAPH_WHILE=1 on a GPU: where cuda-python is installed (the GPU machines' image has
    cuda-bindings) a segment of many chunks is at most log2(C) + 1 graph launches and leaves the
    state chunked graphs leave, to the rounding of the kernels' atomic sums; without it, one
    RuntimeWarning says why and the chunked graphs run."""
    import importlib.util
    X, y, _ = a9a_slice
    states = {}
    for setting in ("0", "1"):
        monkeypatch.setenv("GPUSVM_GRAPH_WHILE", setting)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            be = make_backend("cupy", X, y)
        if setting == "1" and importlib.util.find_spec("cuda.bindings") is None:
            assert not be.runtime.while_nodes
            assert any("CUDA graph WHILE nodes are not available" in str(w.message) for w in caught)
            return
        assert be.runtime.while_nodes == (setting == "1")
        be.init_state_m(averaging=True)
        sampler = CounterSampler(N_ROWS, 64, "with_replacement", 0)
        plan = PegasosPlan(lam=1e-2, k=64, optimal=True, radius=10.0, averaged=True, t_avg=1,
                           renorm_threshold=pegasos_module.RENORM_THRESHOLD)
        with be.runtime.activate():
            be.pegasos_segment_m(sampler, 0, 1, plan)
            g0 = be.graph_stats["graph_launches"]
            be.pegasos_segment_m(sampler, 1, 1 + 40 * 64 + 5, plan)
        launched = be.graph_stats["graph_launches"] - g0
        chunk = min(v[0].chunk for key, v in be._graphs.items() if key != "sampler")
        if setting == "1":
            assert launched <= int(np.log2(chunk)) + 1, (launched, chunk)
        assert int(be.to_host(be._counter)[0]) == 1 + 40 * 64 + 5
        states[setting] = (be.to_host(be.V).astype(np.float64), be.to_host(be.U))
    for a, b in zip(states["1"], states["0"]):
        assert rel(a, b) <= 1e-5


# ------------------------------------------------------------------ benchmark smoke run
def test_benchmark_smoke_mode_runs_on_the_emulator(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), "--smoke",
                           "--backend", "emulated", "--json", str(tmp_path / "out.json")],
                          capture_output=True, text=True, cwd=REPO, timeout=600, check=False,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["backend"] == "emulated"
    assert {"per_iteration", "time_to_eps", "kernels"} <= set(out)
    assert all(r["seconds_per_iteration"] > 0 for r in out["per_iteration"])
    assert {r["solver"] for r in out["per_iteration"]} == {"pegasos", "sdca-aggressive"}
    # the kernels timed are the segments' own launches, one per kernel the model counts
    timed = [(r["kernel"].split("<")[0], r["model_kernel"]) for r in out["kernels"]]
    assert timed == [("gpusvm_margins", "margins"),
                     ("gpusvm_pegasos_step", "pegasos_step"),
                     ("evaluate_m() (X @ W + reductions + copy)", "evaluation"),
                     ("gpusvm_sdca_margins", "sdca_margins"),
                     ("gpusvm_sdca_rho", "sdca_rho"),
                     ("gpusvm_sdca_apply", "sdca_apply (with the steps)"),
                     ("gpusvm_sdca_apply", "sdca_apply (settle, zeroing)")]
    # the one-output instances: the tiles balanced by nonzeros
    assert all(r["kernel"].rstrip(">").split(",")[1] == "1" for r in out["kernels"]
               if "<" in r["kernel"])
    # time to eps: setup and run measured, the model's time for the same counts beside them
    for r in out["time_to_eps"]:
        assert r["reached"], r
        assert r["wall_seconds"] == pytest.approx(r["setup_seconds"] + r["seconds"])
        assert r["modelled"]["iterations"] == r["iterations"] > 0
        assert r["modelled"]["evaluations"] == r["evaluations"] > 0


def test_make_backend_threads_the_device_id():
    """``device=`` reaches the device backend (the emulator is device 0) and is refused elsewhere."""
    X = sp.random(30, 8, density=0.4, format="csr", random_state=1)
    y = np.where(np.arange(30) % 2 == 0, 1.0, -1.0)
    be = make_backend("emulated", X, y, device=0)
    assert be.device_id == 0
    with pytest.raises(ValueError, match="one device, id 0"):
        make_backend("emulated", X, y, device=1)
    with pytest.raises(ValueError, match="one device, id 0"):      # the general path too
        make_backend("emulated", X, np.stack([y, -y], axis=1), device=2)
    with pytest.raises(ValueError, match="runs on the CPU"):
        make_backend("numpy", X, y, device=0)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", ["SDCASVC", "PegasosSVC"])
def test_estimator_passes_device_to_the_backend(monkeypatch, name):
    import gpusvm
    from gpusvm.backends import device as device_module

    Est = getattr(gpusvm, name)

    seen = []
    real = device_module.make_device_backend

    def spy(name, X, y, **options):
        seen.append(options.get("device"))
        return real(name, X, y, **options)

    monkeypatch.setattr(device_module, "make_device_backend", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5))
    y = (X[:, 0] > 0).astype(int)
    clf = Est(lam=1e-2, backend="emulated", device=0, max_iter=2, batch_size=8,
              random_state=0).fit(X, y)
    assert seen == [0] and clf.backend_ == "emulated"
    with pytest.raises(ValueError, match="one device, id 0"):
        Est(lam=1e-2, backend="emulated", device=1, max_iter=2).fit(X, y)
    with pytest.raises(ValueError, match="runs on the CPU"):
        Est(lam=1e-2, backend="numpy", device=0, max_iter=2).fit(X, y)
    with pytest.raises(ValueError, match="device"):            # a GPU id is an integer >= 0
        Est(lam=1e-2, backend="emulated", device=-1, max_iter=2).fit(X, y)


@pytest.mark.parametrize("M, weighted", [(1, False), (3, False), (4, True)])
def test_memory_estimate_counts_every_output(M, weighted):
    """``y`` (n x M), ``alpha`` (n x M), ``V``/``U``/``W`` (d x M), margins and decision values
    (n x M) grow with M; the estimate is what the check compares with the free memory."""
    n, d, nnz = 1000, 500, 20000
    one = estimate_device_bytes(n, d, nnz, 4)
    est = estimate_device_bytes(n, d, nnz, 4, n_outputs=M, weighted=weighted)
    assert est["csr"] == one["csr"]
    extra = (M - 1) * (n * (4 + 8) + d * (4 + 8 + 8) + 2 * n * 8 + 4096) + (8 * n if weighted else 0)
    assert est["total"] - one["total"] == extra
    X = sp.random(n, d, density=nnz / (n * d), format="csr", random_state=0)
    Y = np.where(np.random.default_rng(0).random((n, M)) < 0.5, -1.0, 1.0)
    s = np.ones(n) if weighted else None
    need = estimate_device_bytes(n, d, X.nnz, 8, n_outputs=M, weighted=weighted)["total"]
    with pytest.raises(MemoryError):
        DeviceBackend(X, Y if M > 1 else Y[:, 0], "emulated", free_memory=need - 1,
                      sample_weight=s)
    DeviceBackend(X, Y if M > 1 else Y[:, 0], "emulated", free_memory=need, sample_weight=s)
