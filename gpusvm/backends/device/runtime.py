"""Where the device backend's kernels run: CuPy on a GPU, or the CPU emulator, on a stream of its own.

A runtime holds the array module ``xp``, the compiled kernel module (:func:`gpusvm._kernels.load_module`,
kernels looked up by NVRTC name expression), a non-blocking stream joined to the caller's at the
boundary (the rule of :mod:`gpusvm.backends.base`) and the graphs that replay a segment's launches
(:class:`SegmentGraph`).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ... import _kernels

#: grid-stride kernels launch at most this many blocks per streaming multiprocessor
BLOCKS_PER_SM = 4
#: blocks of an emulated launch (small: each emulated thread costs a fiber)
EMULATED_MAX_BLOCKS = 4


class SegmentGraph:
    """A segment's launch sequence as a fixed set of graphs, each captured once and replayed.

    Graph ``G_j`` holds ``2**j`` iterations (``j = 0 .. log2 C``, ``C`` the largest power of two
    with ``C`` iterations in at most the runtime's ``graph_nodes`` kernel nodes), captured on the backend's stream the first time a segment needs it
    (``Stream.begin_capture`` / ``end_capture``: nothing runs while capturing).  A segment of
    ``L`` iterations launches ``G_log2C`` ``L // C`` times and one ``G_j`` per set bit of
    ``L % C``: at most ``L // C + log2 C + 1`` graph launches, and at most ``log2 C + 1``
    captures per sequence whatever the segment lengths (Pegasos' doubling average and
    SDCA's adaptive certificates change the length at nearly every segment).  Every
    argument that changes between iterations lives in device memory (the batch counter,
    the state vector), so the captured launches are valid for any position in the run.

    Attributes
    ----------
    captures : int
        Graphs captured so far.
    launches : int
        Graph launches so far.
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
        self.captures = 0
        self.launches = 0
        self.capture_seconds = 0.0

    def _graph(self, times: int):
        graph = self._graphs.get(times)
        if graph is None:
            stream = self._rt.stream
            start = time.perf_counter()
            stream.begin_capture()
            try:
                for _ in range(times):
                    for fn, grid, args in self._launches:
                        fn((grid,), (_kernels.BLOCK,), args)
            except BaseException:
                with contextlib.suppress(Exception):     # the capture's own error would mask it
                    stream.end_capture()
                raise
            graph = stream.end_capture()
            if hasattr(graph, "upload"):
                graph.upload(stream)                      # instantiate now, not at the first replay
            self.capture_seconds += time.perf_counter() - start
            self.captures += 1
            self._rt.captures += 1
            self._rt.capture_seconds += time.perf_counter() - start
            self._graphs[times] = graph
        return graph

    def launch(self, times: int) -> None:
        times = int(times)
        if times <= 0:
            return
        stream = self._rt.stream
        chunks, rest = divmod(times, self.chunk)
        parts = [self.chunk] * chunks + [1 << j for j in range(rest.bit_length()) if rest >> j & 1]
        for size in parts:
            self._graph(size).launch(stream)
        self.launches += len(parts)
        self._rt.graph_launches += len(parts)


class _StreamRuntime:
    """What both runtimes share: a stream of the backend's own, joined to the caller's at the boundary.

    Attributes
    ----------
    captures, graph_launches : int
        Graphs captured and launched by the backends of this runtime.
    capture_seconds : float
        Host time spent capturing graphs.
    """

    #: kernel nodes a segment graph holds at most (its chunk of iterations, see SegmentGraph)
    graph_nodes = 1024

    def _init_streams(self, streams) -> None:
        self._streams = streams                  # cupy.cuda or gpusvm._emulator.streams
        self.stream = streams.Stream(non_blocking=True)
        self._enter_event = streams.Event(block=False, disable_timing=True)
        self._exit_event = streams.Event(block=False, disable_timing=True)
        self._depth = 0
        self._callers: list = []
        self.captures = 0
        self.graph_launches = 0
        self.capture_seconds = 0.0

    def _device_context(self):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def activate(self):
        """Context that makes this runtime's device and stream current, joined to the caller's stream.

        On the outermost entry the backend's stream waits on an event recorded on the
        caller's current stream (the work queued before, such as the preparation of device
        inputs, comes first); on its exit the caller's stream waits on an event recorded on
        the backend's stream (what the caller does next with the backend's arrays comes
        after the backend's kernels).  A few microseconds per call, nothing per iteration.
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
        return a is b or (getattr(a, "ptr", None) is not None and getattr(a, "ptr", None) == getattr(b, "ptr", None))

    def graph(self, launches):
        return SegmentGraph(self, launches)


class CupyRuntime(_StreamRuntime):
    """Arrays in CuPy, kernels compiled by NVRTC for one device, launched on its own stream."""

    name = "cupy"
    keeps_host_X = False
    #: SDCA's certificate cadence weighs the measured seconds of a certificate against those
    #: of the iterations (:class:`~gpusvm.solvers.sdca.CertificateCosts`)
    times_certificates = True
    #: a segment graph holds at most this many kernel nodes (capture and instantiation once per
    #: fit: about 10 us per node)
    graph_nodes = 1024

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
            self.max_blocks = int(self.device.attributes["MultiProcessorCount"]) * BLOCKS_PER_SM

    def _device_context(self):
        return self.device

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


class EmulatedRuntime(_StreamRuntime):
    """Arrays standing for CuPy's (:class:`gpusvm._emulator.streams.DeviceArray`), kernels on the CPU
    emulator, launched on an emulated non-blocking stream (deferred until synchronised)."""

    name = "emulated"
    keeps_host_X = True
    #: the emulator's seconds say nothing of a GPU's, and its sums run in a fixed order: its
    #: cadence is the CPU backends' (no clock), so an emulated fit is repeatable and equals
    #: the NumPy reference's
    times_certificates = False
    #: small graphs: each captured launch costs the emulator an argument conversion
    graph_nodes = 128

    def __init__(self, max_blocks: int = EMULATED_MAX_BLOCKS, device: int | None = None):
        if device is not None and int(device) != 0:
            raise ValueError(f"device={device}: the emulated backend emulates one device, id 0")
        from ..._emulator import streams  # noqa: PLC0415
        self.device_id = 0
        self.xp = streams.xp
        self.module = streams.StreamModule(_kernels.load_module("emulated"))
        self.max_blocks = int(max_blocks)
        self._init_streams(streams)

    def is_device(self, a) -> bool:
        return False

    def is_device_sparse(self, X) -> bool:
        return False

    def upload(self, a, dtype):
        return self._streams.upload(a, dtype)

    def download(self, a) -> np.ndarray:
        return self._streams.download(a, self.stream)

    def free_bytes(self):
        return None

    def device_csr(self, X):
        """The host CSR matrix as the emulated stand-in for a ``cupyx`` one (its products checked)."""
        return self._streams.DeviceCSR(X)
