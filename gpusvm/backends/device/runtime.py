"""Where the device backend's kernels run: CuPy on a GPU, or the CPU emulator, on a stream of its own.

A runtime holds the array module ``xp``, the compiled kernel module (:func:`gpusvm._kernels.load_module`,
kernels looked up by NVRTC name expression), a non-blocking stream joined to the caller's at the
boundary (docs/gpu.md, "The stream rule") and the graphs that replay a segment's launches
(:class:`SegmentGraph`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
import warnings

import numpy as np

from ... import _kernels

#: blocks per streaming multiprocessor of a launch whose kernel is not named (the batch
#: samplers'); a named kernel's grid holds the blocks its registers and shared memory let an SM
#: keep resident (:func:`resident_blocks`)
BLOCKS_PER_SM = 4
#: an SM's limits where the device does not report them (sm_90's)
SM_LIMITS = {"MaxThreadsPerMultiProcessor": 2048, "MaxRegistersPerMultiprocessor": 65536,
             "MaxSharedMemoryPerMultiprocessor": 233472, "MaxBlocksPerMultiprocessor": 32,
             "ReservedSharedMemoryPerBlock": 1024}
#: registers are given to a warp in units of this many
REGISTER_UNIT = 256
#: blocks of an emulated launch (small: each emulated thread costs a fiber)
EMULATED_MAX_BLOCKS = 4
#: device id -> "" where WHILE graph nodes passed their self-test, else why not
_WHILE_CHECKED: dict = {}
#: environment variable: the seconds the WHILE self-test may take (default
#: :data:`WHILE_SELFTEST_SECONDS`) before it counts as failed
WHILE_SELFTEST_ENV = "GPUSVM_WHILE_SELFTEST_SECONDS"
WHILE_SELFTEST_SECONDS = 10.0
#: self-test graphs that did not finish: kept alive (destroying a running graph is undefined)
_HUNG: list = []


def resident_blocks(num_regs: int, shared_bytes: int, block: int, limits=None) -> int:
    """Blocks of ``block`` threads one SM keeps resident at once (CUDA's occupancy rules).

    Parameters
    ----------
    num_regs : int
        Registers per thread of the kernel (``RawKernel.num_regs``).
    shared_bytes : int
        Static shared memory per block (``RawKernel.shared_size_bytes``).
    block : int
        Threads per block.
    limits : dict, optional
        The SM's limits by CUDA device attribute name; missing ones are :data:`SM_LIMITS`'.

    Returns
    -------
    int
        The least of the limits by threads, registers (a warp's rounded up to
        :data:`REGISTER_UNIT`), shared memory (plus the block's reserved share) and blocks;
        at least 1.
    """
    lim = {**SM_LIMITS, **(limits or {})}
    warps = -(-int(block) // 32)
    by_threads = lim["MaxThreadsPerMultiProcessor"] // (32 * warps)
    per_warp = -(-max(int(num_regs), 1) * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by_regs = lim["MaxRegistersPerMultiprocessor"] // (per_warp * warps)
    by_shared = lim["MaxSharedMemoryPerMultiprocessor"] // (
        int(shared_bytes) + lim["ReservedSharedMemoryPerBlock"])
    return max(1, min(by_threads, by_regs, by_shared, lim["MaxBlocksPerMultiprocessor"]))


def _wait(query, seconds: float, sleep=time.sleep) -> bool:
    """Poll ``query()`` until it is true or ``seconds`` have passed; whether it became true."""
    deadline = time.monotonic() + seconds
    while not query():
        if time.monotonic() >= deadline:
            return False
        sleep(0.002)
    return True


def _selftest_seconds() -> float:
    raw = os.environ.get(WHILE_SELFTEST_ENV, "").strip()
    try:
        value = float(raw) if raw else WHILE_SELFTEST_SECONDS
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{WHILE_SELFTEST_ENV}={raw!r}: set the seconds (> 0) the WHILE graph "
                         "self-test may take")
    return value


@contextlib.contextmanager
def _capturing(end_capture):
    """The body of a capture: its error is re-raised as itself, not masked by ``end_capture``'s."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            end_capture()
        raise


class SegmentGraph:
    """A segment's launch sequence as a fixed set of graphs, each captured once and replayed.

    Graph ``G_j`` holds ``2**j`` iterations (``j = 0 .. log2 C``, ``C`` the largest power of
    two with ``C`` iterations in at most the runtime's ``graph_nodes`` kernel nodes), captured
    on the backend's stream the first time a segment needs it.  A segment of ``L`` iterations
    runs its ``L // C`` whole chunks (one launch of a WHILE node where the runtime has
    :attr:`_StreamRuntime.while_nodes`, else ``G_log2C`` ``L // C`` times), then one ``G_j``
    per set bit of ``L % C``: at most ``log2 C + 2`` captures per sequence whatever the
    segment lengths (docs/gpu.md, "Segments as a fixed set of graphs").  Every argument that
    changes between iterations lives in device memory, so the captured launches are valid for
    any position in the run.

    Attributes
    ----------
    captures, launches : int
        Graphs captured, graph launches so far.
    capture_seconds : float
        Host time spent capturing and instantiating.
    """

    def __init__(self, runtime, launches):
        self._rt = runtime
        self._launches = tuple(launches)
        per_iteration = max(1, len(self._launches))
        chunk = max(1, runtime.graph_nodes // per_iteration)
        self.chunk = 1 << (chunk.bit_length() - 1)           # a power of two
        self._graphs: dict = {}
        self._loop = None
        self.captures = 0
        self.launches = 0
        self.capture_seconds = 0.0

    def _record(self, times: int) -> None:
        """Launch ``times`` iterations of the sequence on the current (capturing) stream."""
        for _ in range(times):
            for fn, grid, args in self._launches:
                fn((grid,), (_kernels.BLOCK,), args)

    def _count_capture(self, start: float) -> None:
        seconds = time.perf_counter() - start
        self.capture_seconds += seconds
        self.captures += 1
        self._rt.captures += 1
        self._rt.capture_seconds += seconds

    def _graph(self, times: int):
        graph = self._graphs.get(times)
        if graph is None:
            stream = self._rt.stream
            start = time.perf_counter()
            stream.begin_capture()
            with _capturing(stream.end_capture):
                self._record(times)
            graph = stream.end_capture()
            if hasattr(graph, "upload"):
                graph.upload(stream)                      # instantiate now, not at the first replay
            self._count_capture(start)
            self._graphs[times] = graph
        return graph

    def _while(self):
        """The WHILE graph of whole chunks (captured on first use), or None where it cannot be built."""
        if self._loop is None:
            start = time.perf_counter()
            self._loop = self._rt.while_graph(self._record, self.chunk)
            if self._loop is not None:
                self._count_capture(start)
        return self._loop

    def launch(self, times: int) -> None:
        times = int(times)
        if times <= 0:
            return
        stream = self._rt.stream
        chunks, rest = divmod(times, self.chunk)
        parts = [1 << j for j in range(rest.bit_length()) if rest >> j & 1]
        loop = self._while() if chunks and self._rt.while_nodes else None
        if loop is not None:
            loop.run(chunks)
        else:
            parts = [self.chunk] * chunks + parts
        for size in parts:
            self._graph(size).launch(stream)
        count = len(parts) + (loop is not None)
        self.launches += count
        self._rt.graph_launches += count


def _graph_while_setting(default: bool) -> bool:
    """``GPUSVM_GRAPH_WHILE``: ``1`` replays whole chunks through a WHILE node, ``0`` does not."""
    value = os.environ.get("GPUSVM_GRAPH_WHILE", "").strip().lower()
    if value in ("", "auto"):
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"GPUSVM_GRAPH_WHILE={value!r}: set 1 (WHILE nodes) or 0 (chunked graphs)")


def _check(result, what: str):
    """The values of a ``cuda.bindings`` call, or a RuntimeError naming the call and its error."""
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err!r}")
    return values[0] if len(values) == 1 else tuple(values)


class _CupyWhileGraph:
    """A CUDA graph of one WHILE node, built through ``cuda.bindings`` (CuPy has no conditional
    nodes): its body, captured from the backend's stream, is ``chunk`` iterations followed by
    ``gpusvm_while_more``, which counts the chunks in ``left`` down and sets the condition."""

    def __init__(self, rt, record, chunk):
        from cuda.bindings import runtime as cr  # noqa: PLC0415  (optional: cuda-python)
        self._cr = cr
        self._stream = rt.stream
        with self._stream:                                  # zeroed on the stream it is used on
            self.left = rt.xp.zeros(1, dtype=np.int64)
        more = _kernels.load_while_module("cupy").get_function(_kernels.WHILE_KERNEL)
        graph = _check(cr.cudaGraphCreate(0), "cudaGraphCreate")
        self._graph, self._exec = graph, None
        handle = _check(cr.cudaGraphConditionalHandleCreate(
            graph, 1, int(cr.cudaGraphConditionalHandleFlags.cudaGraphCondAssignDefault)),
            "cudaGraphConditionalHandleCreate")
        params = cr.cudaGraphNodeParams()
        params.type = cr.cudaGraphNodeType.cudaGraphNodeTypeConditional
        params.conditional.handle = handle
        params.conditional.type = cr.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile
        params.conditional.size = 1
        try:                                       # CUDA 13 bindings: (graph, deps, edge data, n, params)
            _check(cr.cudaGraphAddNode(graph, None, None, 0, params), "cudaGraphAddNode")
        except TypeError:                          # CUDA 12 bindings: (graph, deps, n, params)
            _check(cr.cudaGraphAddNode(graph, None, 0, params), "cudaGraphAddNode")
        body = params.conditional.phGraph_out[0]
        ptr = self._stream.ptr
        _check(cr.cudaStreamBeginCaptureToGraph(
            ptr, body, None, None, 0, cr.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal),
            "cudaStreamBeginCaptureToGraph")
        with _capturing(lambda: cr.cudaStreamEndCapture(ptr)), self._stream:
            record(chunk)
            more((1,), (32,), (np.uint64(int(handle)), self.left))
        _check(cr.cudaStreamEndCapture(ptr), "cudaStreamEndCapture")
        self._exec = _check(cr.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")
        _check(cr.cudaGraphUpload(self._exec, ptr), "cudaGraphUpload")

    def run(self, chunks: int) -> None:
        """Run ``chunks`` passes of the body: one graph launch on the backend's stream."""
        with self._stream:
            self.left.fill(int(chunks))
        _check(self._cr.cudaGraphLaunch(self._exec, self._stream.ptr), "cudaGraphLaunch")

    def __del__(self):
        cr = getattr(self, "_cr", None)
        if cr is None:
            return
        with contextlib.suppress(Exception):
            if self._exec is not None:
                cr.cudaGraphExecDestroy(self._exec)
            cr.cudaGraphDestroy(self._graph)


class _EmulatedWhileGraph:
    """The emulator's WHILE graph (:class:`gpusvm_emulator.streams.WhileGraph`), captured from the
    backend's emulated stream as CuPy's is: ``chunk`` iterations, then ``gpusvm_while_more``."""

    def __init__(self, rt, record, chunk):
        streams = rt._streams
        self._stream = rt.stream
        self.cond = np.zeros(1, dtype=np.uint32)          # the conditional handle's storage
        self.left = rt.xp.zeros(1, dtype=np.int64)
        more = streams.StreamKernel(
            _kernels.load_while_module("emulated").get_function(_kernels.WHILE_KERNEL))
        self._stream.begin_capture()
        with _capturing(self._stream.end_capture), self._stream:
            record(chunk)
            more((1,), (32,), (np.uint64(self.cond.ctypes.data), self.left))
        self.graph = streams.WhileGraph(self._stream.end_capture(), self.cond)

    def run(self, chunks: int) -> None:
        """Run ``chunks`` passes of the body: one graph launch on the backend's stream."""
        with self._stream:
            self.left[...] = int(chunks)
        self.graph.launch(self._stream)


class _StreamRuntime:
    """What both runtimes share: a stream of the backend's own, joined to the caller's at the boundary.

    Attributes
    ----------
    captures, graph_launches : int
        Graphs captured and launched by the backends of this runtime.
    capture_seconds : float
        Host time spent capturing graphs.
    """

    #: kernel nodes a segment graph holds at most (its chunk of iterations, see SegmentGraph;
    #: capture and instantiation once per fit: about 10 us per node on a GPU)
    graph_nodes = 1024
    #: whether a segment's whole chunks are one launch of a WHILE node (see SegmentGraph); set
    #: per runtime from ``GPUSVM_GRAPH_WHILE`` and what the machine supports
    while_nodes = False

    def _init_streams(self, streams) -> None:
        self._streams = streams                  # cupy.cuda or gpusvm_emulator.streams
        self.stream = streams.Stream(non_blocking=True)
        self._enter_event = streams.Event(block=False, disable_timing=True)
        self._exit_event = streams.Event(block=False, disable_timing=True)
        self._depth = 0
        self.captures = 0
        self.graph_launches = 0
        self.capture_seconds = 0.0

    def _device_context(self):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def activate(self):
        """Context that makes this runtime's device and stream current, joined to the caller's stream.

        On the outermost entry the backend's stream waits for the caller's (an event), on
        its exit the caller's stream waits for the backend's (docs/gpu.md, "The stream rule").
        """
        with self._device_context():
            caller = self._streams.get_current_stream()
            outer = self._depth == 0 and not self._same(caller, self.stream)
            if outer:
                self._enter_event.record(caller)
                self.stream.wait_event(self._enter_event)
            self._depth += 1
            try:
                with self.stream:
                    yield self
            finally:
                self._depth -= 1
                if outer:
                    self._exit_event.record(self.stream)
                    caller.wait_event(self._exit_event)

    @staticmethod
    def _same(a, b) -> bool:
        ptr = getattr(a, "ptr", None)
        return a is b or (ptr is not None and ptr == getattr(b, "ptr", None))

    def graph(self, launches):
        return SegmentGraph(self, launches)

    def blocks_for(self, fn) -> int:
        """The most blocks a grid-stride launch of kernel ``fn`` uses: ``max_blocks`` (the
        emulator's fixed stand-in, and the grid of a launch whose kernel is None)."""
        return self.max_blocks

    def wide_module(self):
        """The module of the kernels' int64-index instances, loaded on first use (a matrix of
        2**31 columns or more; :func:`gpusvm._kernels.load_module`)."""
        mod = getattr(self, "_wide_module", None)
        if mod is None:
            mod = self._wide_module = self._load_wide()
        return mod

    def while_graph(self, record, chunk):
        """A graph of one WHILE node whose body is ``record(chunk)``'s launches; its
        ``run(chunks)`` replays the body ``chunks`` times in one graph launch."""
        raise NotImplementedError


class CupyRuntime(_StreamRuntime):
    """Arrays in CuPy, kernels compiled by NVRTC for one device, launched on its own stream."""

    name = "cupy"
    keeps_host_X = False
    #: SDCA's certificate cadence weighs the measured seconds of a certificate against those
    #: of the iterations (:class:`~gpusvm.solvers.sdca.CertificateCosts`)
    times_certificates = True

    def __init__(self, device: int | None = None):
        import cupy  # noqa: PLC0415  (optional dependency)
        import cupyx.scipy.sparse as csp  # noqa: PLC0415
        self.xp = cupy
        self.csp = csp
        self.device = cupy.cuda.Device(int(device)) if device is not None else cupy.cuda.Device()
        self.device_id = int(self.device.id)
        with self.device:
            self.module = _kernels.load_module("cupy")
            self._init_streams(cupy.cuda)
            self._sms = int(self.device.attributes["MultiProcessorCount"])
            self.max_blocks = self._sms * BLOCKS_PER_SM
            self._limits = {name: int(self.device.attributes[name]) for name in SM_LIMITS
                            if name in self.device.attributes}
            self._blocks_for = {}
            asked = os.environ.get("GPUSVM_GRAPH_WHILE", "").strip() != ""
            if _graph_while_setting(True):
                self.while_nodes = self._while_available(warn=asked)

    def blocks_for(self, fn) -> int:
        """The blocks of ``fn`` (a ``cupy.RawKernel``) the device keeps resident at once: the
        SMs times :func:`resident_blocks` of its registers and static shared memory (looked up
        once per kernel); ``max_blocks`` for None."""
        if fn is None:
            return self.max_blocks
        key = getattr(fn, "name", None) or id(fn)
        n = self._blocks_for.get(key)
        if n is None:
            n = self._sms * resident_blocks(fn.num_regs, fn.shared_size_bytes, _kernels.BLOCK,
                                            self._limits)
            self._blocks_for[key] = n
        return n

    def while_graph(self, record, chunk):
        """As :meth:`_StreamRuntime.while_graph`; where CUDA refuses, None, with one
        RuntimeWarning, and this runtime's segments replay chunked graphs."""
        try:
            return _CupyWhileGraph(self, record, chunk)
        except Exception as exc:  # noqa: BLE001  (whatever CUDA says, chunked graphs still work)
            warnings.warn(f"a CUDA graph WHILE node could not be built ({type(exc).__name__}: "
                          f"{exc}); segments replay chunked graphs", RuntimeWarning, stacklevel=2)
            self.while_nodes = False
            return None

    def _while_available(self, warn: bool) -> bool:
        """Whether WHILE nodes pass their self-test here (once per process and device; docs/gpu.md),
        with a RuntimeWarning naming the cause when not and ``warn``."""
        found = _WHILE_CHECKED.get(self.device_id)
        if found is None:
            limit = _selftest_seconds()
            own = self.stream       # a stream of the test's own: a graph that never ends
            self.stream = self._streams.Stream(non_blocking=True)   # leaves the runtime's free
            try:
                importlib.import_module("cuda.bindings.runtime")
                driver = int(self.xp.cuda.runtime.driverGetVersion())
                if driver < 12040:
                    raise RuntimeError(f"the driver supports CUDA {driver // 1000}."
                                       f"{driver % 1000 // 10}; conditional graph nodes need 12.4")
                with self.stream:                    # every operation on the test's stream
                    passes = self.xp.zeros(1, dtype=np.int64)
                    self.xp.add(passes, 0, out=passes)   # CuPy's kernel loaded before the capture
                loop = _CupyWhileGraph(self, lambda chunk: self.xp.add(passes, 1, out=passes), 1)
                loop.run(3)
                done = self._streams.Event(block=False, disable_timing=True)
                done.record(self.stream)
                if not _wait(lambda: done.done, limit):     # never a wait without end
                    _HUNG.append((loop, self.stream))
                    raise RuntimeError(f"the self-test's graph did not finish in {limit:g} s "
                                       f"({WHILE_SELFTEST_ENV})")
                got = (int(passes.get(stream=self.stream)[0]),
                       int(loop.left.get(stream=self.stream)[0]))
                if got != (3, 0):
                    raise RuntimeError(f"the self-test's body ran {got[0]} times for 3 passes "
                                       f"(count left {got[1]})")
                found = ""
            except Exception as exc:  # noqa: BLE001  (any failure means: not here)
                found = f"{type(exc).__name__}: {exc}"
            finally:
                self.stream = own
            _WHILE_CHECKED[self.device_id] = found
        if found and warn:
            warnings.warn(f"CUDA graph WHILE nodes are not available ({found}); segments replay "
                          "chunked graphs (cuda-python provides the bindings)", RuntimeWarning,
                          stacklevel=3)
        return not found

    def _device_context(self):
        return self.device

    def _load_wide(self):
        with self.device:
            return _kernels.load_module("cupy", "int64")

    def is_device(self, a) -> bool:
        return isinstance(a, self.xp.ndarray)

    def is_device_sparse(self, X) -> bool:
        return self.csp.issparse(X)

    def upload(self, a, dtype):
        return self.xp.ascontiguousarray(self.xp.asarray(a, dtype=dtype))

    def download(self, a) -> np.ndarray:
        return a.get(stream=self.stream)  # ordered on the backend's stream, then synchronises it

    def free_bytes(self):
        return int(self.xp.cuda.runtime.memGetInfo()[0])


def while_self_test(device: int | None = None) -> str:
    """The WHILE-node self-test of :class:`CupyRuntime` alone, without compiling the kernel
    module: ``""`` where WHILE nodes work on ``device`` (default: the current one), else why
    not (capped by ``GPUSVM_WHILE_SELFTEST_SECONDS``; ``benchmarks/gpu_session.sh`` runs it
    first and turns the nodes off for its later steps when it fails)."""
    import cupy  # noqa: PLC0415  (optional dependency)
    rt = CupyRuntime.__new__(CupyRuntime)
    rt.xp = cupy
    rt.device = cupy.cuda.Device(int(device)) if device is not None else cupy.cuda.Device()
    rt.device_id = int(rt.device.id)
    with rt.device:
        rt._init_streams(cupy.cuda)
        rt._while_available(warn=False)
    return _WHILE_CHECKED[rt.device_id]


#: environment variable: the free bytes an emulated device pretends to have (the estimators'
#: memory check, tested without a GPU)
FREE_MEMORY_ENV = "GPUSVM_EMULATED_FREE_MEMORY"


class EmulatedRuntime(_StreamRuntime):
    """Arrays standing for CuPy's (``gpusvm_emulator.streams.DeviceArray``), kernels on the CPU
    emulator, launched on an emulated non-blocking stream (deferred until synchronised).

    ``free_memory`` (default: the environment variable ``GPUSVM_EMULATED_FREE_MEMORY``, else
    unbounded) is the free device memory it reports to the backend's memory check.
    """

    name = "emulated"
    keeps_host_X = True
    #: no clock in the cadence (the emulator's seconds say nothing of a GPU's), so an emulated
    #: fit is repeatable and equals the NumPy reference's
    times_certificates = False
    #: small graphs: each captured launch costs the emulator an argument conversion
    graph_nodes = 128

    def __init__(self, max_blocks: int = EMULATED_MAX_BLOCKS, device: int | None = None,
                 free_memory: int | None = None):
        if device is not None and int(device) != 0:
            raise ValueError(f"device={device}: the emulated backend emulates one device, id 0")
        if free_memory is None and os.environ.get(FREE_MEMORY_ENV):
            free_memory = int(os.environ[FREE_MEMORY_ENV])
        #: the free memory the emulated device pretends to have (None: unbounded), so that the
        #: refusal of data that would not fit runs on the CPU
        self.free_memory = None if free_memory is None else int(free_memory)
        from gpusvm_emulator import streams  # noqa: PLC0415  (emulator/)
        self.device_id = 0
        self.xp = streams.xp
        self.module = streams.StreamModule(_kernels.load_module("emulated"))
        self.max_blocks = int(max_blocks)
        self._init_streams(streams)
        self.while_nodes = _graph_while_setting(True)

    def while_graph(self, record, chunk):
        return _EmulatedWhileGraph(self, record, chunk)

    def _load_wide(self):
        return self._streams.StreamModule(_kernels.load_module("emulated", "int64"))

    def is_device(self, a) -> bool:
        return False

    def is_device_sparse(self, X) -> bool:
        return False

    def upload(self, a, dtype):
        return self._streams.upload(a, dtype)

    def download(self, a) -> np.ndarray:
        return self._streams.download(a, self.stream)

    def free_bytes(self):
        return self.free_memory

    def device_csr(self, X, index_dtype=np.int32):
        """The host CSR matrix as the emulated stand-in for a ``cupyx`` one (its products
        checked), its indices and row pointers of ``index_dtype`` (SciPy's constructor would
        narrow int64 ones that fit in int32, so they are set after it)."""
        out = self._streams.DeviceCSR(X)
        if np.dtype(index_dtype) == np.int64:
            out.indices = np.asarray(out.indices, dtype=np.int64)
            out.indptr = np.asarray(out.indptr, dtype=np.int64)
        return out
