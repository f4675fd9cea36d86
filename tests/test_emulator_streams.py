"""Streams, events and graph capture of the emulated runtime (gpusvm_emulator.streams).

The emulated device backend stands in for CuPy: its launches wait on their stream until
something synchronises, and an operation outside the stream order raises (``strict``) or
reads stale memory (``poison``).  These tests check the model on a small kernel, then
that the device backend follows the stream rule (docs/gpu.md, "The stream rule"), that it
would be caught if it did not, that no device operation of any estimator's fit runs on the
legacy default stream (:class:`LegacyOps`, even where no race shows), and that a segment of any length costs a bounded number of
graph launches and captures.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm_emulator import EmulatedModule
from gpusvm_emulator import streams as es
from gpusvm.backends import base, make_backend
from gpusvm.backends.device import runtime as device_module
from gpusvm.backends.base import PegasosPlan, SDCAPlan
from gpusvm.solvers._sampling import CounterSampler
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca

SCALE = r"""
extern "C" __global__ void scale(const double* __restrict__ x, double* __restrict__ out,
                                 const double c, const int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = c * x[i];
}
"""


@pytest.fixture(scope="module")
def scale():
    return es.StreamModule(EmulatedModule(code=SCALE)).get_function("scale")


@pytest.fixture(autouse=True)
def strict():
    with es.using_mode("strict"):
        es.races.clear()
        yield


def launch(kernel, x, out, c=2.0):
    kernel((1,), (32,), (x, out, np.float64(c), np.int32(x.shape[0])))


# ------------------------------------------------------------------------- the stream model
def test_a_launch_waits_on_its_stream_until_synchronised(scale):
    with es.Stream(non_blocking=True) as s:
        x = es.upload(np.arange(4.0), np.float64)
        out = es.xp.zeros(4)
        launch(scale, x, out)
        assert s.pending == 1
    np.testing.assert_array_equal(out.view(np.ndarray), 0.0)       # nothing ran yet
    s.synchronize()
    np.testing.assert_array_equal(out.view(np.ndarray), [0.0, 2.0, 4.0, 6.0])


def test_a_legacy_read_of_a_pending_write_is_a_race(scale):
    s = es.Stream(non_blocking=True)
    with s:
        x = es.upload(np.arange(4.0), np.float64)
        out = es.xp.zeros(4)
        launch(scale, x, out)
    with pytest.raises(es.StreamOrderError, match=r"np.add.reduce on the legacy default stream "
                                                   r"uses an array that scale \(launched on"):
        out.sum()
    s.synchronize()


def test_poison_mode_reads_the_stale_contents(scale):
    with es.using_mode("poison"):
        s = es.Stream(non_blocking=True)
        with s:
            x = es.upload(np.arange(4.0), np.float64)
            out = es.xp.zeros(4)
            launch(scale, x, out)
        assert float(out.sum()) == 0.0                  # the kernel has not run: a wrong answer
        assert len(es.races) >= 1 and "scale" in es.races[0]
        s.synchronize()
        assert float(out.sum()) == 12.0


def test_an_event_orders_the_legacy_stream_after_the_launch(scale):
    s = es.Stream(non_blocking=True)
    with s:
        x = es.upload(np.arange(4.0), np.float64)
        out = es.xp.zeros(4)
        launch(scale, x, out)
    ev = es.Event()
    ev.record(s)
    es.null.wait_event(ev)
    assert float(out.sum()) == 12.0                      # the wait ran the launch first
    assert es.races == []


def test_a_launch_after_an_unjoined_legacy_write_is_a_race(scale):
    s = es.Stream(non_blocking=True)
    x = es.xp.arange(4.0)                                 # made on the legacy stream
    with s:
        out = es.xp.zeros(4)
        with pytest.raises(es.StreamOrderError, match="written on the legacy default stream"):
            launch(scale, x, out)
    ev = es.Event()
    ev.record(es.null)
    s.wait_event(ev)                                      # joined: no race
    with s:
        launch(scale, x, out)
    s.synchronize()
    assert float(out.sum()) == 12.0


def test_an_operation_on_the_stream_is_ordered_after_its_launches(scale):
    with es.Stream(non_blocking=True) as s:
        x = es.upload(np.arange(4.0), np.float64)
        out = es.xp.zeros(4)
        launch(scale, x, out)
        assert float(out.sum()) == 12.0                   # queued after the launch
        assert s.pending == 0


# ------------------------------------------------------------------------- capture rules
def test_capture_records_and_the_graph_replays(scale):
    s = es.Stream(non_blocking=True)
    with s:
        x = es.upload(np.arange(4.0), np.float64)
        out = es.xp.zeros(4)
        s.begin_capture()
        launch(scale, x, out, 3.0)
        graph = s.end_capture()
        assert s.pending == 0 and graph.nodes == 1        # nothing ran while capturing
        graph.launch(s)
    s.synchronize()
    assert float(out.view(np.ndarray).sum()) == 18.0


@pytest.mark.parametrize("what, call", [
    ("an allocation", lambda s, x: es.xp.zeros(3)),
    ("a stream synchronisation", lambda s, x: s.synchronize()),
    ("a device-to-host copy", lambda s, x: es.download(x, s)),
    ("np.add.reduce", lambda s, x: x.sum()),
])
def test_what_capture_forbids_raises_and_invalidates_it(scale, what, call):
    x = es.upload(np.arange(4.0), np.float64)
    s = es.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        with pytest.raises(es.CaptureError, match=f"{what}.*while .* is capturing a graph"):
            call(s, x)
        with pytest.raises(es.CaptureError, match="invalidated"):
            s.end_capture()


def test_legacy_stream_work_during_a_capture_raises(scale):
    x = es.upload(np.arange(4.0), np.float64)
    s = es.Stream(non_blocking=True)
    s.begin_capture()
    with pytest.raises(es.CaptureError, match="capturing"):
        x * 2.0                                             # on the legacy stream
    with pytest.raises(es.CaptureError):
        s.end_capture()
    with pytest.raises(es.CaptureError, match="legacy default stream cannot be captured"):
        es.null.begin_capture()


# ------------------------------------------------------------------------- the device backend
class LegacyOps:
    """Every device operation issued while the current stream is the legacy default stream.

    Hooks the emulated runtime where CuPy's entry points would be: array operations and
    reads (``host_op``), allocations and results (``created``), uploads, downloads and
    launches on the legacy stream.  Recording is on only inside :meth:`watch`.
    """

    def __init__(self, monkeypatch):
        self.ops, self.on = [], False
        for name in ("host_op", "created", "upload"):
            monkeypatch.setattr(es, name, self._spy(getattr(es, name), name))
        download = es.download

        def spy_download(a, stream):
            if self.on and stream is es.null:
                self.ops.append("a download on the legacy stream")
            return download(a, stream)
        monkeypatch.setattr(es, "download", spy_download)

        launch = es.Stream.launch

        def spy_launch(stream, kernel, *args, **kwargs):
            if self.on and stream is es.null:
                self.ops.append(f"launch of {kernel.name}")
            return launch(stream, kernel, *args, **kwargs)
        monkeypatch.setattr(es.Stream, "launch", spy_launch)

    def _spy(self, original, name):
        def spy(*args, **kwargs):
            if self.on and es.get_current_stream() is es.null:
                if name == "host_op":
                    reads, writes = args[0], args[1]
                    if reads or writes:
                        self.ops.append(args[2] if len(args) > 2 else kwargs.get("what", name))
                elif name != "created" or args[0]:
                    self.ops.append(name)
            return original(*args, **kwargs)
        return spy

    @contextlib.contextmanager
    def watch(self):
        self.on = True
        try:
            yield
        finally:
            self.on = False


def problem(n=300, d=30, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, random_state=seed, format="csr", dtype=np.float64)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return X, y


def _fits(M=1):
    X, y = problem()
    if M > 1:
        Y = np.stack([y, -y * np.sign(X[:, 0].toarray().ravel() - 0.1)], axis=1)
        y = Y
    be = make_backend("emulated", X, y)
    pegasos(be, lam=1e-2, k=16, max_iter=60, seed=3, eval_every=25)
    be = make_backend("emulated", X, y)
    return sdca(be, lam=1e-2, b=16, max_iter=60, seed=3, tol=1e-12)


@contextlib.contextmanager
def without_the_stream_rule(monkeypatch):
    """The backend as it was before the rule: solvers on the legacy stream, no joins."""
    monkeypatch.setattr(base, "backend_stream", lambda backend: contextlib.nullcontext())

    @contextlib.contextmanager
    def activate(self):
        with self.stream:
            yield self
    monkeypatch.setattr(device_module._StreamRuntime, "activate", activate)
    yield


@pytest.mark.parametrize("M", [1, 2])
def test_reverting_the_stream_rule_is_caught(monkeypatch, M):
    """Point 1 reverted (no solver on the backend's stream, no joins): the emulator raises."""
    with without_the_stream_rule(monkeypatch):
        with pytest.raises(es.StreamOrderError, match="legacy default stream"):
            _fits(M)


@pytest.mark.parametrize("M", [1, 2])
def test_every_device_operation_of_a_fit_runs_on_the_backend_stream(monkeypatch, M):
    """No legacy-stream work in the solvers: the current stream at every device operation."""
    spy = LegacyOps(monkeypatch)
    with spy.watch():
        res = _fits(M)
    assert np.all(np.asarray(res.extra["gap"]) >= -1e-12)       # a certificate was computed
    assert spy.ops == [], spy.ops[:5]
    assert es.races == []


def segment_setup(kind, k=4, **plan):
    X, y = problem()
    be = make_backend("emulated", X, y)
    sampler = CounterSampler(X.shape[0], k, "without_replacement", 1)
    if kind == "pegasos":
        be.init_state_m(averaging=plan.get("averaged", False))
        return be, sampler, PegasosPlan(lam=1e-2, k=k, **plan), be.pegasos_segment_m
    be.init_state_m()
    be.init_dual_m(plan.get("beta_b", 1.0))
    return be, sampler, SDCAPlan(lam=1e-2, **plan), be.sdca_segment_m


def _segment_graphs(be):
    return [v[0] for key, v in be._graphs.items() if key != "sampler"]


PLANS = [("pegasos", dict(optimal=True)), ("sdca", dict(aggressive=True, beta_b=3.0))]


@pytest.mark.parametrize("kind, plan", PLANS)
def test_a_segment_of_any_length_is_a_fixed_number_of_graph_launches(kind, plan):
    """WHILE nodes: the whole chunks of any segment are one launch, so a segment costs at
    most log2(C) + 1 graph launches whatever its length, and a fit captures at most
    log2(C) + 2 graphs per sequence (a new length at every segment adds no capture)."""
    be, sampler, p, run = segment_setup(kind, **plan)
    assert be.runtime.while_nodes
    run(sampler, 0, 1, p)                                   # t = 1: Pegasos' reset sequence
    t = 1
    lengths = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 377]   # a new length each time
    for length in lengths:
        g0 = be.graph_stats["graph_launches"]
        run(sampler, t, t + length, p)
        t += length
        chunk = min(g.chunk for g in _segment_graphs(be))
        assert be.graph_stats["graph_launches"] - g0 <= int(math.log2(chunk)) + 1
        assert int(be.to_host(be._counter)[0]) == t          # every iteration ran, once
    graphs = _segment_graphs(be)
    assert all(g.chunk >= 16 for g in graphs)
    assert max(lengths) > 10 * max(g.chunk for g in graphs)   # many chunks in one launch
    assert be.graph_stats["captures"] == sum(g.captures for g in graphs)
    for g in graphs:
        assert g.captures <= int(math.log2(g.chunk)) + 2, (g.captures, g.chunk)
    # replaying more never captures again
    before = be.graph_stats["captures"]
    run(sampler, t, t + 99, p)
    assert be.graph_stats["captures"] == before


@pytest.mark.parametrize("kind, plan", PLANS)
def test_chunked_graphs_without_while_nodes(monkeypatch, kind, plan):
    """GPUSVM_GRAPH_WHILE=0: whole chunks are launched one by one (L // C + log2 C + 1)."""
    monkeypatch.setenv("GPUSVM_GRAPH_WHILE", "0")
    be, sampler, p, run = segment_setup(kind, **plan)
    assert not be.runtime.while_nodes
    run(sampler, 0, 1, p)
    t = 1
    for length in [1, 3, 21, 144]:
        g0 = be.graph_stats["graph_launches"]
        run(sampler, t, t + length, p)
        t += length
        chunk = min(g.chunk for g in _segment_graphs(be))
        launched = be.graph_stats["graph_launches"] - g0
        assert launched == length // chunk + bin(length % chunk).count("1")
    for g in _segment_graphs(be):
        assert g.captures <= int(math.log2(g.chunk)) + 1, (g.captures, g.chunk)


def _state(be):
    names = ("V", "U", "sm", "alpha", "_counter")
    return {n: be.to_host(getattr(be, n)).copy() for n in names if getattr(be, n, None) is not None}


@pytest.mark.parametrize("kind, plan", PLANS + [("pegasos", dict(averaged=True))])
def test_while_nodes_replay_the_same_iterations_as_chunked_graphs(monkeypatch, kind, plan):
    """Bit for bit the state of chunked graphs, over segments of one, several and many chunks
    (one emulator worker: with several, the order of SDCA's atomic sums varies by rounding)."""
    monkeypatch.setenv("GPUSVM_EMU_WORKERS", "1")
    states = []
    for setting in ("1", "0"):
        monkeypatch.setenv("GPUSVM_GRAPH_WHILE", setting)
        be, sampler, p, run = segment_setup(kind, **plan)
        assert be.runtime.while_nodes == (setting == "1")
        t = 0
        for length in (1, 7, 45, 330):             # within one chunk (32 here), several, many
            run(sampler, t, t + length, p)
            t += length
        states.append(_state(be))
    assert states[0].keys() == states[1].keys()
    for name in states[0]:
        np.testing.assert_array_equal(states[0][name], states[1][name], err_msg=name)


def test_the_while_graph_runs_its_body_once_per_chunk(monkeypatch):
    """The emulated WHILE node: the condition starts at its default 1 (the body runs once even
    if nothing sets it), the kernel of kernels/while_more.cu counts the chunks down."""
    be, sampler, p, run = segment_setup("sdca")
    run(sampler, 0, 5 * 16 * 8, p)                       # several whole chunks
    (seg,) = _segment_graphs(be)
    loop = seg._loop
    assert loop is not None and loop.graph.passes == (5 * 16 * 8) // seg.chunk
    assert int(be.to_host(loop.left)[0]) == 0 and loop.cond[0] == 0
    with be.runtime.stream:
        be.runtime.stream.begin_capture()
        with pytest.raises(es.CaptureError, match="launched, not captured"):
            loop.graph.launch(be.runtime.stream)
        with contextlib.suppress(es.CaptureError):
            be.runtime.stream.end_capture()


def test_a_bad_graph_while_setting_is_refused(monkeypatch):
    monkeypatch.setenv("GPUSVM_GRAPH_WHILE", "maybe")
    with pytest.raises(ValueError, match=r"GPUSVM_GRAPH_WHILE='maybe': set 1 \(WHILE nodes\) or 0"):
        segment_setup("sdca")


def test_an_error_during_a_capture_is_raised_as_itself(monkeypatch):
    be, sampler, p, run = segment_setup("sdca")

    class Boom(Exception):
        pass

    def fail(self, kernel, grid, block, args, shared_mem=0):
        if self.is_capturing:
            raise Boom("the launch failed")
        return original(self, kernel, grid, block, args, shared_mem)
    original = es.Stream.launch
    monkeypatch.setattr(es.Stream, "launch", fail)
    with pytest.raises(Boom, match="the launch failed"):
        run(sampler, 0, 5, p)
    assert not be.runtime.stream.is_capturing


def _classes(n, c, seed):
    y = np.random.default_rng(seed).integers(0, c, n)
    return y if c > 2 else np.where(y == 1, 1, -1)


def _est_cases():
    from gpusvm import LinearSVC, PegasosSVC, PegasosSVCCV, SDCASVC, SDCASVCCV
    sd = dict(backend="emulated", random_state=0, max_iter=8, batch_size=8)
    pg = dict(backend="emulated", random_state=0, max_iter=30, batch_size=8)
    cv = dict(backend="emulated", random_state=0, max_iter=6, batch_size=8, Cs=[0.1, 1.0], cv=2)
    return {
        "sdca binary": (lambda: SDCASVC(C=1.0, eval_every=2, **sd), 2, False),
        "sdca multiclass weighted": (lambda: SDCASVC(C=1.0, **sd), 3, True),
        "sdca squared hinge weighted": (lambda: SDCASVC(C=1.0, loss="squared_hinge", **sd), 2, True),
        "sdca newton": (lambda: SDCASVC(C=1.0, solver="newton", loss="squared_hinge",
                                                 backend="emulated", max_iter=5), 3, False),
        "pegasos binary": (lambda: PegasosSVC(C=1.0, eval_every=10, **pg), 2, False),
        "pegasos multiclass weighted squared": (
            lambda: PegasosSVC(C=1.0, loss="squared_hinge", class_weight="balanced", **pg), 3, True),
        "linear svc": (lambda: LinearSVC(C=1.0, backend="emulated", max_iter=5, random_state=0), 3, False),
        "sdca cv binary": (lambda: SDCASVCCV(solver="sdca", **cv), 2, False),
        "sdca cv multiclass weighted": (lambda: SDCASVCCV(solver="sdca", **cv), 3, True),
        "pegasos cv": (lambda: PegasosSVCCV(backend="emulated", random_state=0, max_iter=20,
                                            batch_size=8, Cs=[0.1, 1.0], cv=2), 2, False),
    }


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("case", list(_est_cases()))
def test_no_device_operation_of_an_estimator_runs_on_the_legacy_stream(monkeypatch, case):
    """Fit (certificates and the C search included) and decision_function of every estimator
    on the device: each array operation, allocation, upload, download and launch is issued
    on the backend's stream, none on the legacy default stream."""
    make, n_classes, weighted = _est_cases()[case]
    X, _ = problem(n=120, d=12)
    y = _classes(120, n_classes, 1)
    sw = np.random.default_rng(2).uniform(0.5, 2.0, 120) if weighted else None
    spy = LegacyOps(monkeypatch)
    est = make()
    with spy.watch():
        est.fit(X, y, sample_weight=sw)
        D = est.decision_function(X)
    assert est.backend_ == "emulated"
    assert D.shape == ((120,) if n_classes == 2 else (120, n_classes))
    assert spy.ops == [], spy.ops[:5]
    assert es.races == []


@pytest.mark.parametrize("M", [1, 3])
def test_no_backend_call_runs_on_the_legacy_stream(monkeypatch, M):
    """The backend's own entry points (decision function, evaluation) run on its stream."""
    X, y = problem()
    Y = y if M == 1 else np.stack([y, -y, y * np.sign(X[:, 1].toarray().ravel() - 0.05)], axis=1)
    spy = LegacyOps(monkeypatch)
    with spy.watch():
        be = make_backend("emulated", X, Y, np.linspace(0.5, 2.0, X.shape[0]))
        res = sdca(be, lam=1e-2, b=8, max_iter=6, seed=1, tol=0.0, loss="squared_hinge")
        W = np.asarray(res.w, dtype=np.float64).reshape(X.shape[1], M)
        D = be.runtime.download(be.decision_function_m(W, np.zeros(M)))
        P = be.runtime.download(be.evaluate_m(W, np.zeros(M), 1e-2, "squared_hinge")[0])
    np.testing.assert_allclose(D, X @ W, rtol=1e-12, atol=1e-12)
    assert P.shape == (M,) and np.isfinite(res.extra["gap"]).all()
    assert spy.ops == [], spy.ops[:5]


def test_the_legacy_stream_spy_sees_work_the_race_check_cannot(monkeypatch):
    """Sensitivity: with the solvers taken off the backend's stream, in "sync" mode (no race
    can be seen, the emulator before streams were modelled), the spy still finds their work."""
    spy = LegacyOps(monkeypatch)
    with without_the_stream_rule(monkeypatch), es.using_mode("sync"), spy.watch():
        _fits(1)
    assert spy.ops and any("np." in op for op in spy.ops), spy.ops[:5]
