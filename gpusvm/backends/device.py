"""Device backend: the Pegasos and SDCA primitives as CUDA kernels on a CuPy CSR matrix.

One class, :class:`DeviceBackend`, drives the kernels of ``kernels/*.cu`` with
the semantics of :class:`gpusvm.backends.numpy_.NumpyBackend`.  It is written
against an array module ``xp`` and a kernel module, so the very orchestration
that runs on a GPU (``xp = cupy``, kernels compiled by NVRTC) also runs in CI
with ``xp = numpy`` and the kernels on the CPU emulator (``"emulated"``).

A segment (the iterations between two evaluations) runs on the device alone.
Every quantity that changes from one iteration to the next lives in device
memory: the batch index ``t`` (a counter that the iteration's first kernel reads and
advances; the batch is a function of ``(seed, t, j)``), the step sizes
(computed from ``t`` in the step kernel, ``kernels/schedule.cuh``) and every
scalar (the state vector).  An iteration is therefore a fixed sequence of
launches with fixed arguments:

* Pegasos: ``gpusvm_margins_balanced``, which also draws the batch (sampling
  without replacement or by epochs: the thread of a batch position computes its row
  from ``(seed, t)``, ``kernels/segment_batch.cuh``'s ``SegmentBatch``; i.i.d. batches,
  whose first-occurrence stamps need the whole batch, keep a ``gpusvm_sample_next``
  launch before it), (``gpusvm_optimal_bias``: one block, radix selection in O(k)),
  (``gpusvm_reset_scale_next`` in a segment that holds an iteration with
  ``1 - eta_t lam = 0``), and ``gpusvm_pegasos_segment_step``, whose last block also
  does the scalar part of the step and folds ``a`` into ``v`` when ``|a|`` falls below
  the threshold (what ``renormalize`` did in a launch of its own): 2 to 4 launches
  (one more for i.i.d. batches).  The margin
  and step kernels are balanced by nonzeros (``kernels/balanced.cuh``: tiles of
  the batch whose nonzeros the whole block walks, so a 14,000-nonzero row of
  news20 no longer holds its kernel for the time of 440 dependent steps of 32
  lanes) and the step sums each tile's contributions per column in shared
  memory before one atomic per column (the hot columns of text data, in 91-100%
  of the rows, no longer take one same-address atomic per row);
* SDCA (Takáč et al. 2013; the contract is in :mod:`gpusvm.solvers.sdca`):
  ``gpusvm_sdca_margins_balanced`` (margins and the steps of eq. 15 in one pass;
  it draws the batch as Pegasos' margins do, or reads what ``gpusvm_sample_next``
  and ``gpusvm_sample_firsts_next`` drew for i.i.d. batches)
  and ``gpusvm_sdca_apply_balanced``; the aggressive variant adds
  ``gpusvm_sdca_rho_balanced`` and the settling ``gpusvm_sdca_apply_balanced``
  (its step computes the steps with the adapted beta, its settle cleans rho's
  scratch): 2 or 4 launches (2 more for i.i.d. batches), all balanced by nonzeros as
  Pegasos' are, and the scatters (``rho``'s scratch, the step into ``v``) sum
  a tile's updates per column before one atomic, through the same code of
  ``kernels/balanced.cuh`` as Pegasos' step.  The separate SDCA primitives keep
  the per-row kernels.

The sequence is captured once per run and replayed: as CUDA graphs of ``2**j``
iterations captured on the backend's own non-blocking stream (:class:`_SegmentGraph`: a
segment of any length is a few graph launches, the captures happen at most
``log2 C + 1`` times per fit), on the emulated backend by the emulated runtime's
streams and graphs (:mod:`gpusvm._emulator.streams`), so that no Python function
of the package runs per iteration inside a segment on either.

Streams: every public method and property runs with the backend's stream current,
joined to the caller's stream with events at the boundary (the rule of
:mod:`gpusvm.backends.base`).

Why a graph and not a persistent cooperative kernel: the performance model
(``benchmarks/roofline.py``) puts a replayed kernel node at about 1.5 us, and a
grid-wide barrier of a persistent kernel costs about 1 us in published
measurements, so a persistent kernel would save well under 1 us per kernel
boundary, while it would cap the grid at
the blocks that are co-resident (a cooperative launch), keep every stage's
registers live in one kernel (spills under the 64-register bound of
``MIN_BLOCKS``), and need a grid barrier the emulator cannot run (fibers switch
only at barriers of one block).  At ``k >= 4096`` the traffic of a batch is
microseconds, so the launch boundaries cost a fraction the model states per
data set; the graph keeps every kernel separately verifiable.

Only :meth:`DeviceBackend.to_host` copies from the device, and it records each
copy, so that a test can check that nothing is copied between two evaluations.
Certificates use ``gpusvm_sdca_dual_weights``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import time

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from ._state import N_SLOTS, S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_BSUM, S_NAVG, S_NREJ, S_VSQ
from ._general_device import DeviceGeneralPath
from .base import SCHEDULES, Evaluation, step_sizes

#: grid-stride kernels launch at most this many blocks per streaming multiprocessor
BLOCKS_PER_SM = 4
#: blocks of an emulated launch (small: each emulated thread costs a fiber)
EMULATED_MAX_BLOCKS = 4
#: slots of the SDCA kernels' accumulator vector (``gpusvm::N_ACC`` in kernels/sdca_common.cuh)
SDCA_ACC_SLOTS = 5


def choose_lanes(mean_row_nnz: float) -> int:
    """Lanes per CSR row for a mean row length: about two nonzeros per lane, 4 to 32.

    Parameters
    ----------
    mean_row_nnz : float
        ``nnz / n``.

    Returns
    -------
    int
        One of :data:`gpusvm._kernels.LANE_COUNTS`.

    Notes
    -----
    A group of lanes reads a row's nonzeros with coalesced loads and sums them
    with ``log2(lanes)`` shuffles; two or more nonzeros per lane keep several
    gathers of ``v`` in flight per thread (a9a, 14 per row: 8 lanes; the text
    sets, 138 to 415 per row: 32 lanes).
    """
    want = max(1.0, mean_row_nnz / 2.0)
    for lanes in _kernels.LANE_COUNTS:
        if lanes >= want:
            return lanes
    return _kernels.LANE_COUNTS[-1]


def estimate_device_bytes(n: int, d: int, nnz: int, itemsize: int, *, csr_resident: bool = False,
                          batch_rows: int = 1 << 20, n_outputs: int = 1,
                          weighted: bool = False) -> dict:
    """Device memory the backend allocates, by part.

    Parameters
    ----------
    n, d, nnz : int
        Shape and nonzeros of ``X``.
    itemsize : int
        4 for float32 data, 8 for float64.
    csr_resident : bool
        The CSR arrays are already on the device (CuPy input): not counted.
    batch_rows : int
        Row indices of one uploaded chunk of batches.
    n_outputs : int
        ``M``, the outputs of one fit (one-vs-rest with ``M`` classes): the labels,
        SDCA's ``alpha``, the margins and decision values are ``n x M``, the weights
        ``V``, the averages or SDCA's scratch and the dense output ``W`` are ``d x M``.
    weighted : bool
        Example weights are held (``n`` float64).

    Returns
    -------
    dict
        ``{"csr", "vectors", "buffers", "total"}`` in bytes.
    """
    M = max(1, int(n_outputs))
    csr = 0 if csr_resident else nnz * (itemsize + 4) + (n + 1) * 8
    # per row: y (n x M), row norm, SDCA's alpha (n x M), the weights; per column and output:
    # V in the data's dtype, U (averaging) or SDCA's float64 scratch, dense float64 W
    vectors = n * (itemsize * M + 8 + 8 * M + (8 if weighted else 0)) + d * M * (itemsize + 8 + 8)
    # batch chunk, margins, decision values of an evaluation (n x M each), state and small scratch
    buffers = batch_rows * 4 + 2 * n * 8 * M + 4096 * M
    return {"csr": csr, "vectors": vectors, "buffers": buffers, "total": csr + vectors + buffers}


class _SegmentGraph:
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

    #: kernel nodes a segment graph holds at most (its chunk of iterations, see _SegmentGraph)
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
        return _SegmentGraph(self, launches)


class _CupyRuntime(_StreamRuntime):
    """Arrays in CuPy, kernels compiled by NVRTC for one device, launched on its own stream."""

    name = "cupy"
    keeps_host_X = False
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


class _EmulatedRuntime(_StreamRuntime):
    """Arrays standing for CuPy's (:class:`gpusvm._emulator.streams.DeviceArray`), kernels on the CPU
    emulator, launched on an emulated non-blocking stream (deferred until synchronised)."""

    name = "emulated"
    keeps_host_X = True
    #: small graphs: each captured launch costs the emulator an argument conversion
    graph_nodes = 128

    def __init__(self, max_blocks: int = EMULATED_MAX_BLOCKS, device: int | None = None):
        if device is not None and int(device) != 0:
            raise ValueError(f"device={device}: the emulated backend emulates one device, id 0")
        from .._emulator import streams  # noqa: PLC0415
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


def _on_device(method):
    """Run ``method`` with the runtime's device and stream current, joined at the boundary."""
    @functools.wraps(method)
    def bound(self, *args, **kwargs):
        with self.runtime.activate():
            return method(self, *args, **kwargs)
    bound._on_device = True
    return bound


def _bind_public(cls):
    """Wrap every public method and property of ``cls`` (inherited ones too) in :func:`_on_device`.

    The rule of :mod:`gpusvm.backends.base` by construction: whatever a caller reaches of
    the backend runs on the backend's stream, joined to the caller's stream at entry and
    exit, so no method can be added that forgets it.
    """
    for name in dir(cls):
        if name.startswith("_") or name in ("activate",):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, (staticmethod, classmethod)):
            continue
        if inspect.isfunction(attr) and not getattr(attr, "_on_device", False):
            setattr(cls, name, _on_device(attr))
        elif isinstance(attr, property) and attr.fget is not None \
                and not getattr(attr.fget, "_on_device", False):
            setattr(cls, name, property(_on_device(attr.fget), attr.fset, attr.fdel, attr.__doc__))
    return cls


@_bind_public
class DeviceBackend(DeviceGeneralPath):
    """Pegasos and SDCA primitives as CUDA kernels (see :mod:`gpusvm.backends.base` and
    :mod:`gpusvm.solvers.sdca`).

    Parameters
    ----------
    X : scipy.sparse matrix, ndarray, cupyx.scipy.sparse matrix or cupy.ndarray
        Training data (n, d), float32 or float64 (other dtypes become float64).
        Host input is copied to the device once; device input is used in place.
    y : array of shape (n,) or (n, M)
        Labels in {-1, +1}; one column per output (the general path of
        :mod:`gpusvm.backends._general_device`).
    runtime : {"cupy", "emulated"} or runtime object
        Where the kernels run.
    lanes : int, optional
        Lanes per CSR row (4, 8, 16 or 32); default from the mean row length
        (:func:`choose_lanes`).
    free_memory : int, optional
        Free device bytes to check the estimate against; default: what the
        device reports (``cupy.cuda.runtime.memGetInfo``), no check when emulated.
    device : int, optional
        CUDA device id the backend is bound to (default: the current device;
        the ``"emulated"`` runtime is device 0 and refuses any other id).  Every allocation, compilation and launch of the backend
        happens on that device and on the backend's own non-blocking stream, so one
        process can drive one backend per GPU.
    sample_weight : array of shape (n,), optional
        Example weights ``s_i >= 0`` shared by every output (the general path).

    Attributes
    ----------
    transfers : list of int
        Bytes of every device-to-host copy made by :meth:`to_host`, in order.
    launches : int
        Number of kernel launches so far.
    device_id : int
        The CUDA device the backend is bound to (0 when emulated).

    Raises
    ------
    MemoryError
        When the data, vectors and buffers would not fit in free device memory.

    Notes
    -----
    ``v`` is kept in the data's dtype, the averaging vector ``u``, the margins
    and every scalar in float64 (the state vector of
    :mod:`gpusvm.backends._state`).  The updates of ``v`` are float atomics, so
    runs are not bitwise repeatable: sums agree up to rounding in any order.
    With float32 data each atomic addition rounds to float32, where the NumPy
    backend adds the batch's contributions to a coordinate in float64 and rounds
    once.
    """

    def __init__(self, X, y, runtime="cupy", *, lanes: int | None = None,
                 free_memory: int | None = None, device: int | None = None,
                 sample_weight=None) -> None:
        if isinstance(runtime, str):
            if runtime not in ("cupy", "emulated"):
                raise ValueError(f"runtime must be 'cupy' or 'emulated', got {runtime!r}")
            runtime = _CupyRuntime(device) if runtime == "cupy" else _EmulatedRuntime(device=device)
        elif device is not None and getattr(runtime, "device_id", None) != int(device):
            raise ValueError(f"device={device} differs from the given runtime's device "
                             f"{getattr(runtime, 'device_id', None)}")
        self.runtime = runtime
        with runtime.activate():
            self._setup(X, y, lanes, free_memory, sample_weight)

    def _setup(self, X, y, lanes, free_memory, sample_weight) -> None:
        runtime = self.runtime
        self.name = runtime.name
        self.device_id = runtime.device_id
        self.xp = runtime.xp
        self.transfers: list[int] = []
        self.launches = 0
        self._functions: dict = {}

        X, resident = self._as_csr(X)
        data, indices, indptr, shape = X.data, X.indices, X.indptr, X.shape
        self.n, self.d = int(shape[0]), int(shape[1])
        nnz = int(data.shape[0])
        self.dtype = np.dtype(data.dtype) if np.dtype(data.dtype) in (np.float32, np.float64) \
            else np.dtype(np.float64)
        if nnz >= 2**31 or self.d >= 2**31 or self.n >= 2**31:
            raise ValueError("the kernels index rows and columns with int32: n, d and nnz must be "
                             f"below 2**31 (got n={self.n}, d={self.d}, nnz={nnz})")
        self.nnz = nnz
        self.lanes = int(lanes) if lanes is not None else choose_lanes(nnz / max(self.n, 1))
        if self.lanes not in _kernels.LANE_COUNTS:
            raise ValueError(f"lanes must be one of {_kernels.LANE_COUNTS}, got {lanes}")
        self.value_type = _kernels.VALUE_TYPES[self.dtype.name]

        y_shape = tuple(getattr(y, "shape", np.shape(y)))
        need = estimate_device_bytes(self.n, self.d, nnz, self.dtype.itemsize,
                                     csr_resident=resident,
                                     n_outputs=y_shape[1] if len(y_shape) == 2 else 1,
                                     weighted=sample_weight is not None)
        free = free_memory if free_memory is not None else runtime.free_bytes()
        if free is not None and need["total"] > free:
            mib = 2.0**20
            raise MemoryError(
                f"the {self.name} backend needs about {need['total'] / mib:.0f} MiB of device memory "
                f"(CSR {need['csr'] / mib:.0f} MiB, vectors {need['vectors'] / mib:.0f} MiB, "
                f"buffers {need['buffers'] / mib:.0f} MiB) but only {free / mib:.0f} MiB are free; "
                "free device memory held by other processes or CuPy's pool "
                "(cupy.get_default_memory_pool().free_all_blocks()), use dtype='float32', "
                "train on fewer rows or features, or use backend='numpy'")

        up = runtime.upload
        self._data = up(data, self.dtype)                       # copied once
        self._indices = up(indices, np.int32)
        self._indptr = up(indptr, np.int64)
        self.y = up(y, self.dtype)
        self._init_general_data(y, sample_weight)           # Y (n x M), weights; checks shapes
        self._X = X if resident else None                       # host CSR on a GPU: not kept
        if runtime.keeps_host_X:
            self._X = runtime.device_csr(X)
        self._row_sq_norms = None
        # scratch of the kernels: accumulators of the step and the last-block tickets
        self._acc = self.xp.zeros(4, dtype=np.float64)
        self._ticket = self.xp.zeros(2, dtype=np.uint32)
        self._dummy = self.xp.zeros(1, dtype=np.float64)
        # a captured segment: the batch counter its kernels read and advance, the sampler's ticket
        self._counter = self.xp.zeros(1, dtype=np.int64)
        self._sample_ticket = self.xp.zeros(1, dtype=np.uint32)
        self._graphs: dict = {}
        self._bp = None
        self.v = None
        self.u = None
        self.s = None
        self._smp = None
        self._m = None

    # ------------------------------------------------------------ streams
    def activate(self):
        """Context in which the caller's CuPy work runs on the backend's stream (see :mod:`.base`).

        The solvers run a whole fit in it (:func:`gpusvm.backends.base.on_backend_stream`),
        so their array operations are ordered with the kernels without any join; entering
        and leaving it joins the caller's stream with events (a few microseconds).
        """
        return self.runtime.activate()

    @property
    def graph_stats(self) -> dict:
        """Graphs captured and launched so far and the host time of the captures.

        Returns
        -------
        dict
            ``{"captures", "graph_launches", "capture_seconds"}``.
        """
        rt = self.runtime
        return {"captures": rt.captures, "graph_launches": rt.graph_launches,
                "capture_seconds": rt.capture_seconds}

    # ------------------------------------------------------------ input
    def _as_csr(self, X):
        """``X`` as a CSR matrix and whether it already lives on the device."""
        rt = self.runtime
        if rt.is_device_sparse(X):
            return X.tocsr(), True
        if rt.is_device(X):
            if X.dtype not in (np.float32, np.float64):   # cupyx's csr_matrix takes no ints, float16
                X = X.astype(np.float64)
            return rt.csp.csr_matrix(X), True
        if not sp.issparse(X):
            X = sp.csr_matrix(np.asarray(X))
        return X.tocsr(), False

    @property
    def X(self):
        """The training matrix as CSR in ``xp`` (built on first use from the device arrays)."""
        if self._X is None:
            indptr = self._indptr.astype(np.int32)
            self._X = self.runtime.csp.csr_matrix((self._data, self._indices, indptr),
                                                  shape=(self.n, self.d))
        return self._X

    @property
    def row_sq_norms(self):
        """``||x_i||^2`` of every row, float64 on the device (computed on first use)."""
        if self._row_sq_norms is None:
            sq = self.xp.empty(self.n, dtype=np.float64)      # the n doubles of the estimate
            if self.n:
                self._launch("gpusvm_row_sq_norms", self._row_grid(self.n),
                             (self._indptr, self._data, np.int32(self.n), sq))
            self._row_sq_norms = sq
        return self._row_sq_norms

    # ------------------------------------------------------------ transfers
    @_on_device
    def to_host(self, a):
        """Copy ``a`` to the host as a NumPy array (the only device-to-host copy).

        Every call is recorded in :attr:`transfers` (bytes copied).

        Notes
        -----
        Synchronises the device.
        """
        out = self.runtime.download(a)
        self.transfers.append(int(out.nbytes))
        return out

    # ------------------------------------------------------------ batches from the counter
    def _sampler_buffers(self, sampler):
        """Device buffers of the batches of ``sampler`` and the sampler's launch arguments.

        Made once per sampler (a run): ``rows`` and ``first`` (int32, ``k``), the
        stamps of i.i.d. batches (uint64, ``n``, zero), and the argument tuple of
        ``gpusvm_sample<MODE>`` without ``t``.
        """
        if self._smp is None or self._smp[0] is not sampler:
            xp = self.xp
            k = int(sampler.k)
            rows = xp.zeros(k, dtype=np.int32)
            first = xp.ones(k, dtype=np.int32)
            stamp = xp.zeros(self.n if sampler.code == 1 else 1, dtype=np.uint64)
            head = (np.uint64(sampler.seed), np.int32(sampler.n), np.int32(k),
                    np.int32(sampler.half), np.uint32(sampler.mask))
            grid = max(1, min(math.ceil(k / _kernels.BLOCK), self.runtime.max_blocks))
            fn = self._function(_kernels.sampler_kernel(sampler.code))
            firsts = self._function("gpusvm_sample_firsts") if sampler.code == 1 else None
            self._smp = (sampler, (rows, first, stamp, head, grid, fn, firsts))
        return self._smp[1]

    def _draw(self, buffers, code: int, t: int) -> None:
        """Launch the sampler for batch ``t`` (and, for i.i.d. batches, its first-occurrence mask)."""
        rows, first, stamp, head, grid, fn, firsts = buffers
        self._call(fn, grid, head + (np.int64(t), rows, first, stamp))
        if firsts is not None:
            self._call(firsts, grid, (rows, stamp, head[2], np.int64(t), first))

    # ------------------------------------------------------------ launches
    def _function(self, name: str):
        """The compiled kernel ``name`` (a name expression), looked up once."""
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.runtime.module.get_function(name)
        return fn

    def _call(self, fn, grid: int, args) -> None:
        """Launch a looked-up kernel: the only thing a segment does per iteration."""
        fn((grid,), (_kernels.BLOCK,), args)
        self.launches += 1

    def _kernel(self, op: str):
        """The instance of ``op`` for this backend's lanes and value type."""
        name = (_kernels.row_kernel(op, self.lanes, self.value_type)
                if op in _kernels.ROW_KERNELS or op in _kernels.SDCA_KERNELS
                else _kernels.vector_kernel(op, self.value_type))
        return self._function(name)

    def _launch(self, op: str, grid: int, args) -> None:
        self._call(self._kernel(op), int(grid), tuple(args))

    def _row_grid(self, rows: int) -> int:
        groups_per_block = _kernels.BLOCK // self.lanes
        return max(1, min(math.ceil(rows / groups_per_block), self.runtime.max_blocks))

    def _vector_grid(self) -> int:
        return max(1, min(math.ceil(self.d / _kernels.BLOCK), self.runtime.max_blocks))

    def _rows(self, rows):
        if isinstance(rows, self.xp.ndarray) and rows.dtype == np.int32 and rows.flags.c_contiguous:
            return rows
        return self.runtime.upload(rows, np.int32)

    def _vec64(self, w):
        if isinstance(w, self.xp.ndarray) and w.dtype == np.float64 and w.flags.c_contiguous:
            return w
        return self.runtime.upload(w, np.float64)

    def _scalar64(self, b):
        xp = self.xp
        if isinstance(b, xp.ndarray):
            return xp.ascontiguousarray(b.reshape(1).astype(np.float64))
        return xp.full(1, float(b), dtype=np.float64)

    # ------------------------------------------------------------ state
    @_on_device
    def init_state(self, w0=None, b0: float = 0.0, averaging: bool = False) -> None:
        """Allocate ``v`` (= ``w0``), the scalars (``a = 1``) and, if needed, ``u``."""
        xp = self.xp
        s = np.zeros(N_SLOTS, dtype=np.float64)
        s[S_A] = 1.0
        s[S_B] = float(b0)
        self.s = self.runtime.upload(s, np.float64)
        if w0 is None:
            self.v = xp.zeros(self.d, dtype=self.dtype)
        else:
            self.v = self.runtime.upload(w0, self.dtype)
            v64 = self.v.astype(np.float64)
            self.s[S_VSQ] = xp.dot(v64, v64)
        self.u = xp.zeros(self.d, dtype=np.float64) if averaging else None
        self._acc[:] = 0.0
        self._ticket[:] = 0
        self._graphs.clear()                 # recorded segments hold the old arrays

    def _u_args(self):
        return (self.u if self.u is not None else self._dummy), np.int32(self.u is not None)

    # ------------------------------------------------------------ Pegasos
    @_on_device
    def margins(self, rows):
        """``m_i = y_i (a <v, x_i> + b)`` for ``i`` in ``rows`` (float64, on the device)."""
        rows = self._rows(rows)
        k = int(rows.shape[0])
        m = self.xp.empty(k, dtype=np.float64)
        self._launch("gpusvm_margins", self._row_grid(k),
                     (self._indptr, self._indices, self._data, self.y, self.v, rows, np.int32(k),
                      self.s, m))
        return m

    @_on_device
    def optimal_bias(self, rows, m) -> None:
        """Set ``b`` to the batch-optimal bias and shift ``m`` to it, in place (no sync).

        One launch of ``gpusvm_optimal_bias`` (one block): the minimiser is an order
        statistic of the batch's breakpoints, found by radix selection in O(k), with
        :func:`gpusvm.backends.numpy_.optimal_bias_xp`'s tie rule.
        """
        rows = self._rows(rows)
        k = int(rows.shape[0])
        m = self._vec64(m) if not isinstance(m, self.xp.ndarray) else m
        self._launch("gpusvm_optimal_bias", 1, (self.y, rows, np.int32(k), self.s, m,
                                                 self._breakpoints(k)))

    def _breakpoints(self, k: int):
        """Scratch of ``gpusvm_optimal_bias`` (k doubles), allocated once per batch size."""
        if self._bp is None or self._bp.shape[0] < k:
            self._bp = self.xp.empty(k, dtype=np.float64)
        return self._bp

    @_on_device
    def reset_scale(self) -> None:
        """Set ``w = 0`` keeping the running average consistent (``u -= A v``)."""
        u, u_on = self._u_args()
        self._launch("gpusvm_reset_scale", self._vector_grid(),
                     (self.v, u, u_on, np.int64(self.d), self.s))

    @_on_device
    def pegasos_step(self, rows, m, eta: float, shrink: float, k: int,
                     unreg_bias: bool, radius: float, average: bool) -> None:
        """Steps 4-5 of Pegasos Fig. 1 in the sparse form, in one launch (see :mod:`.base`)."""
        rows = self._rows(rows)
        nrows = int(rows.shape[0])
        u, u_on = self._u_args()
        self._launch("gpusvm_pegasos_step", self._row_grid(nrows),
                     (self._indptr, self._indices, self._data, self.y, rows, np.int32(nrows),
                      np.float64(k), m, self.v, u, u_on, self.s, self._acc, self._ticket[0:1],
                      np.float64(eta), np.float64(shrink), np.int32(bool(unreg_bias)),
                      np.float64(radius), np.int32(bool(average))))

    @_on_device
    def renormalize(self, threshold: float) -> None:
        """Fold ``a`` into ``v`` when ``|a| < threshold`` (and ``A v`` into ``u``), decided on the device."""
        u, u_on = self._u_args()
        self._launch("gpusvm_renormalize", self._vector_grid(),
                     (self.v, u, u_on, np.int64(self.d), self.s, self._ticket[1:2],
                      np.float64(threshold)))

    #: sampling mode codes whose batches a segment's gather kernel draws itself (without
    #: replacement, epochs: kernels/segment_batch.cuh's SegmentBatch); i.i.d. batches (code 1) keep
    #: the sampler's launches, whose first-occurrence stamps need the whole batch
    DRAWN_IN_GATHER = (0, 2)

    def _draw_args(self, sampler, needs_first: bool):
        """The sampling arguments of a balanced gather kernel: it draws the batch, or reads it.

        Returns ``(launches, args)``: no launch and ``(mode, seed, n, half, mask, counter,
        ticket)`` when the gather draws the batch (:data:`DRAWN_IN_GATHER`), else the
        sampler's launches (:meth:`_sample_launches`; with the first-occurrence mask of
        i.i.d. batches when ``needs_first``) and ``mode = -1``.
        """
        seed, n, _, half, mask = self._sampler_buffers(sampler)[3]
        tail = (seed, n, half, mask, self._counter, self._sample_ticket)
        if sampler.code in self.DRAWN_IN_GATHER:
            return [], (np.int32(sampler.code),) + tail
        return self._sample_launches(sampler, bump_in_firsts=needs_first), (np.int32(-1),) + tail

    def _sample_launches(self, sampler, bump_in_firsts: bool):
        """The launches that draw a batch from the device counter (and advance it)."""
        rows, first, stamp, head, grid, _, _ = self._sampler_buffers(sampler)
        iid = sampler.code == 1 and bump_in_firsts
        out = [(self._function(_kernels.SEGMENT_SAMPLER_KERNELS[sampler.code]), grid,
                head + (self._counter, self._sample_ticket, np.int32(not iid), rows, first,
                        stamp))]
        if iid:
            out.append((self._function(_kernels.SEGMENT_SAMPLER_KERNELS[3]), grid,
                        (rows, stamp, head[2], self._counter, self._sample_ticket, first)))
        return out

    def _replay(self, key, build, t0: int, t1: int) -> None:
        """Run iterations ``t0 + 1 .. t1``: the recorded sequence of ``key`` replayed ``t1 - t0`` times.

        The sequence is built and recorded (a CUDA graph, or the emulator's recording) the
        first time ``key`` is seen; the batch counter is set to ``t0`` and the recording
        replayed: the same number of Python calls whatever the segment's length.
        """
        if self._graphs.get("sampler") is not key[1]:
            self._graphs.clear()             # a new run: new batch buffers and stamps
            self._graphs["sampler"] = key[1]
        rec = self._graphs.get(key)
        if rec is None:
            launches = build()
            rec = self._graphs[key] = (self.runtime.graph(launches), len(launches))
        graph, per_iteration = rec
        self._counter[...] = t0
        graph.launch(t1 - t0)
        self.launches += per_iteration * (t1 - t0)

    @_on_device
    def pegasos_segment(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` on the device alone (no sync, no upload).

        Per iteration: ``gpusvm_margins_balanced`` draws ``A_t`` from ``(seed, t)``
        with ``t`` read from a device counter (and advances it; i.i.d. batches:
        ``gpusvm_sample_next`` does, in a launch of its own) and computes the margins,
        ``gpusvm_optimal_bias`` (``bias="optimal"``), ``gpusvm_reset_scale_next`` (only
        in a segment that holds an iteration with ``1 - eta_t lam = 0``) and
        ``gpusvm_pegasos_segment_step``, which computes ``eta_t`` from ``t`` and folds
        ``renormalize`` into its last block: 2 to 4 launches (3 to 5 for i.i.d.
        batches).  The sequence is recorded once per (sampler, plan) and replayed (see
        :meth:`_replay`).

        Parameters
        ----------
        sampler : gpusvm.solvers._sampling.CounterSampler
        t0, t1 : int
            Iterations done before and after the segment.
        plan : gpusvm.backends.base.PegasosPlan
        """
        p = plan
        _, shrinks = step_sizes(p.schedule, t0 + 1, t1 + 1, p.lam, p.eta0, p.norma_p)
        reset = bool(np.any(shrinks == 0.0))
        key = ("pegasos", sampler, p, reset)
        self._replay(key, lambda: self._pegasos_launches(sampler, p, reset), t0, t1)

    def _tile_grid(self, k: int):
        """Grid and rows per tile of the kernels balanced by nonzeros (kernels/balanced.cuh)."""
        grid = max(1, min(k, self.runtime.max_blocks))
        return grid, np.int32(min(_kernels.BLOCK, math.ceil(k / grid)))

    def _pegasos_launches(self, sampler, p, reset: bool):
        """One Pegasos iteration as (kernel, grid, args) launches reading ``t`` on the device."""
        buffers = self._sampler_buffers(sampler)
        rows = buffers[0]
        k = int(sampler.k)
        if self._m is None or self._m.shape[0] != k:
            self._m = self.xp.empty(k, dtype=np.float64)
        m = self._m
        u, u_on = self._u_args()
        grid, tile = self._tile_grid(k)
        sched = (np.int32(SCHEDULES.index(p.schedule)), np.float64(p.lam),
                 np.float64(p.eta0 or 0.0), np.float64(p.norma_p))
        out, draw = self._draw_args(sampler, needs_first=False)            # step 1: A_t
        out.append((self._kernel("gpusvm_margins_balanced"), grid,        # step 2
                    (self._indptr, self._indices, self._data, self.y, self.v, rows, np.int32(k),
                     tile, self.s, m) + draw + (buffers[1],)))
        if p.optimal:                                                     # Sec. 4
            out.append((self._kernel("gpusvm_optimal_bias"), 1,
                        (self.y, rows, np.int32(k), self.s, m, self._breakpoints(k))))
        if reset:                                                         # step 3, eta lam = 1
            out.append((self._kernel("gpusvm_reset_scale_next"), int(self._vector_grid()),
                        (self.v, u, u_on, np.int64(self.d), self.s, self._counter) + sched))
        out.append((self._kernel("gpusvm_pegasos_segment_step"), grid,       # steps 3-5
                    (self._indptr, self._indices, self._data, self.y, rows, np.int32(k), tile,
                     np.float64(p.k), m, self.v, u, u_on, np.int64(self.d), self.s, self._acc,
                     self._ticket[0:1], self._counter) + sched
                    + (np.int32(bool(p.unreg_bias)), np.float64(p.radius),
                       np.int32(bool(p.averaged)), np.int64(p.t_avg),
                       np.float64(p.renorm_threshold))))
        return out

    @_on_device
    def reset_average(self) -> None:
        """Empty the running average (``u = 0``, ``A = 0``, no iterate, no bias summed); no sync."""
        if self.u is not None:
            self.u[...] = 0.0
        self.s[S_ASUM] = 0.0
        self.s[S_NAVG] = 0.0
        self.s[S_BSUM] = 0.0

    @_on_device
    def output(self, averaged: bool):
        """Dense float64 ``w`` and the bias (a 0-d device array) of the last iterate or the average."""
        xp = self.xp
        w = xp.empty(self.d, dtype=np.float64)
        b = xp.empty(1, dtype=np.float64)
        u, u_on = self._u_args()
        self._launch("gpusvm_output", self._vector_grid(),
                     (self.v, u, np.int32(bool(averaged) and self.u is not None),
                      np.int64(self.d), self.s, w, b))
        return w, b.reshape(())

    @_on_device
    def decision_function(self, w, b):
        """``<w, x_i> + b`` on all rows (float64, on the device)."""
        w = self._vec64(w)
        bd = self._scalar64(b)
        z = self.xp.empty(self.n, dtype=np.float64)
        self._launch("gpusvm_decision", self._row_grid(self.n),
                     (self._indptr, self._indices, self._data, np.int32(self.n), w, bd, z))
        return z

    @_on_device
    def evaluate(self, w, b, lam: float, reg_bias: bool = False) -> Evaluation:
        """Primal objective ``P(w)`` on all rows: one device-to-host copy (a sync point)."""
        xp = self.xp
        w = self._vec64(w)
        bd = self._scalar64(b)
        grid = self._row_grid(self.n)
        partial = xp.empty(grid, dtype=np.float64)
        self._launch("gpusvm_hinge_sum", grid,
                     (self._indptr, self._indices, self._data, self.y, np.int32(self.n), w, bd,
                      partial))
        packed = xp.stack([xp.sum(partial), xp.dot(w, w), bd[0]])
        hinge, wsq, bh = (float(x) for x in self.to_host(packed))
        loss = hinge / self.n
        sq = wsq + (bh * bh if reg_bias else 0.0)
        return Evaluation(0.5 * lam * sq + loss, loss, sq)


    # ------------------------------------------------------------ SDCA (Takáč et al. 2013)
    # The contract of these primitives is written out in gpusvm/solvers/sdca.py; the kernels are
    # kernels/sdca_*.cu.  An iteration launches, with the fused sdca_iterations (what the solver
    # uses): naive and safe 2 kernels (sdca_margins, sdca_apply), aggressive 5 (sdca_margins,
    # sdca_rho, sdca_deltas, which also zeroes rho's scratch, and sdca_apply's step and settle);
    # through the separate primitives one more (margins and sdca_deltas instead of sdca_margins).
    def _mask(self, first):
        """The first-occurrence mask as device int32 0/1 and its flag (a dummy when None)."""
        if first is None:
            return self._no_mask, np.int32(0)
        return self._rows(first), np.int32(1)

    def _clean_scratch(self) -> None:
        """Zero the whole scratch vector of :meth:`sdca_adapt_beta` if it still holds a sum.

        Only when the rows of the next :meth:`sdca_deltas` are not those of the last
        :meth:`sdca_adapt_beta` (never in the solver, whose ``sdca_deltas`` zeroes the
        touched entries in its own launch): one O(d) fill.
        """
        if self._dirty is not None:
            self._scratch[...] = 0.0
            self._dirty = None

    @_on_device
    def init_dual(self, beta0: float) -> None:
        """Start SDCA at ``alpha = 0`` (``w = 0``; call after :meth:`init_state`).

        Rows with ``||x_i|| = 0`` start at ``alpha_i = 1`` (their optimum); sets
        ``S_ASUMD = sum alpha``, ``S_BETA = beta0`` and ``S_NREJ = 0``, and allocates
        the device buffers of the SDCA kernels (``alpha``, rho's scratch vector, the
        accumulators and the ticket).  No synchronisation.
        """
        xp = self.xp
        self.alpha = (self.row_sq_norms == 0).astype(np.float64)
        self._scratch = xp.zeros(self.d, dtype=np.float64)
        self._sdca_acc = xp.zeros(SDCA_ACC_SLOTS, dtype=np.float64)
        self._sdca_ticket = xp.zeros(1, dtype=np.uint32)
        self._no_mask = xp.zeros(1, dtype=np.int32)
        self._dirty = None            # (rows, delta) of a sdca_rho launch not yet cleaned up
        self._sdca_buffers = None
        self._graphs.clear()
        self.s[S_ASUMD] = xp.sum(self.alpha)
        self.s[S_BETA] = float(beta0)
        self.s[S_NREJ] = 0.0

    def _margins_deltas_into(self, rows, lam: float, first, m, delta) -> None:
        k = int(rows.shape[0])
        mask, has_first = self._mask(first)
        self._launch("gpusvm_sdca_margins", self._row_grid(k),
                          (self._indptr, self._indices, self._data, self.y, self.v, rows,
                           np.int32(k), self.s, self.alpha, self.row_sq_norms, mask, has_first,
                           np.float64(lam), np.float64(self.n), m, delta))

    @_on_device
    def sdca_margins_deltas(self, rows, lam: float, first=None):
        """:meth:`margins` and :meth:`sdca_deltas` in one launch: ``(m, delta)``, float64 on the device.

        One group of lanes per row computes ``m_i = y_i (a <v, x_i> + b)`` and then
        ``delta_i`` of eq. (15) with ``beta = S_BETA`` (``gpusvm_sdca_margins``).
        """
        rows = self._rows(rows)
        k = int(rows.shape[0])
        m = self.xp.empty(k, dtype=np.float64)
        delta = self.xp.empty(k, dtype=np.float64)
        self._margins_deltas_into(rows, lam, first, m, delta)
        return m, delta

    def _deltas_into(self, rows, m, lam: float, first, out) -> None:
        k = int(rows.shape[0])
        old, zero = self._dummy, np.int32(0)
        if self._dirty is not None:
            dirty_rows, dirty_delta = self._dirty
            if dirty_rows is rows and dirty_delta is not out:
                old, zero = dirty_delta, np.int32(1)       # zero rho's entries in this launch
                self._dirty = None
            else:
                self._clean_scratch()
        mask, has_first = self._mask(first)
        self._launch("gpusvm_sdca_deltas", self._row_grid(k),
                          (self._indptr, self._indices, rows, np.int32(k), m, self.alpha,
                           self.row_sq_norms, mask, has_first, self.s, np.float64(lam),
                           np.float64(self.n), out, self._scratch, old, zero))

    @_on_device
    def sdca_deltas(self, rows, m, lam: float, first=None):
        """Coordinate steps of eq. (15) with ``beta = S_BETA`` (float64, on the device).

        ``delta_i = clip_[-alpha_i, 1 - alpha_i](lam n (1 - m_i) / (beta ||x_i||^2))``;
        a zero row gets ``1 - alpha_i``; ``delta_i = 0`` where ``first`` is 0/False.
        After :meth:`sdca_adapt_beta` on the same ``rows`` (the same array object), the
        launch also zeroes the scratch vector at the columns that call touched.
        """
        rows = self._rows(rows)
        delta = self.xp.empty(int(rows.shape[0]), dtype=np.float64)
        self._deltas_into(rows, self._vec64(m), lam, first, delta)
        return delta

    @_on_device
    def sdca_adapt_beta(self, rows, delta, beta_b: float, theta: float) -> None:
        """Alg. 2: ``beta <- beta^theta rho^(1-theta)`` from the tentative step ``delta``, on the device.

        ``rho = ||sum_i delta_i y_i x_i||^2 / sum_i delta_i^2 ||x_i||^2`` clipped to
        ``[1, beta_b]`` (``S_TMP0``), the numerator the exact norm change of adding the
        sum into the all-zero scratch vector; ``beta`` stays when the denominator is 0.
        One launch (``gpusvm_sdca_rho``, whose last block updates beta); the scratch is
        zeroed again by the next :meth:`sdca_deltas` on the same ``rows`` (``delta`` must
        not be modified in place until then; the solver never does).
        """
        rows = self._rows(rows)
        delta = self._vec64(delta)
        self._clean_scratch()
        k = int(rows.shape[0])
        self._launch("gpusvm_sdca_rho", self._row_grid(k),
                          (self._indptr, self._indices, self._data, self.y, rows, np.int32(k),
                           delta, self.row_sq_norms, self._scratch, self.s, self._sdca_acc,
                           self._sdca_ticket, np.float64(beta_b), np.float64(theta)))
        self._dirty = (rows, delta)

    @_on_device
    def sdca_apply(self, rows, delta, lam: float, check: bool) -> None:
        """``alpha_A += delta``, ``w += (1/(lam n)) sum_i delta_i y_i x_i``, decided on the device.

        ``gpusvm_sdca_apply`` adds the step into ``v`` with the exact change of
        ``||v||^2`` (``S_DNORM``); its last block updates the scalars.  When ``check``
        (Alg. 2) that block also decides whether ``D`` drops (``Delta D < -tau``, as
        :meth:`NumpyBackend.sdca_apply <gpusvm.backends.numpy_.NumpyBackend.sdca_apply>`),
        and a second launch reads the decision: it updates ``alpha`` on acceptance, or
        adds the opposite coefficients to ``v`` on rejection (``S_NREJ`` counts it).
        No synchronisation.
        """
        rows = self._rows(rows)
        delta = self._vec64(delta)
        k = int(rows.shape[0])
        grid = self._row_grid(k)
        for phase in ((0, 1) if check else (0,)):
            self._launch("gpusvm_sdca_apply", grid,
                              (self._indptr, self._indices, self._data, self.y, rows,
                               np.int32(k), delta, self.v, self.alpha, self.s, self._sdca_acc,
                               self._sdca_ticket, np.float64(lam), np.float64(self.n),
                               np.int32(bool(check)), np.int32(phase)))

    @_on_device
    def sdca_segment(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` on the device alone (no sync, no upload).

        Per iteration: ``gpusvm_sdca_margins_balanced`` (which draws the batch from the
        device batch counter and advances it; i.i.d. batches: ``gpusvm_sample_next`` and
        ``gpusvm_sample_firsts_next`` before it; then the margins and the steps of eq. 15
        with ``beta^(t)``) and ``gpusvm_sdca_apply_balanced`` (naive, safe: 2 launches),
        or for the aggressive variant ``gpusvm_sdca_rho_balanced`` and two
        ``gpusvm_sdca_apply_balanced`` launches: the step, which computes the steps of
        eq. 15 with the adapted ``beta^(t+1)`` before adding them, then the settle, which
        also zeroes rho's scratch: 4.  i.i.d. batches add 2.
        The sequence is recorded once per (sampler, plan) and replayed (:meth:`_replay`).

        Parameters
        ----------
        sampler : gpusvm.solvers._sampling.CounterSampler
        t0, t1 : int
            Iterations done before and after the segment.
        plan : gpusvm.backends.base.SDCAPlan
        """
        self._clean_scratch()
        key = ("sdca", sampler, plan)
        self._replay(key, lambda: self._sdca_launches(sampler, plan), t0, t1)

    def _sdca_launches(self, sampler, p):
        """One SDCA iteration as (kernel, grid, args) launches (no scalar changes with ``t``)."""
        buffers = self._sampler_buffers(sampler)
        rows, first = buffers[0], buffers[1]
        k = int(sampler.k)
        if self._sdca_buffers is None or self._sdca_buffers[0].shape[0] != k:
            self._sdca_buffers = tuple(self.xp.empty(k, dtype=np.float64) for _ in range(3))
        m, tentative, final = self._sdca_buffers
        has_first = np.int32(sampler.code != 0)
        lam, n = np.float64(p.lam), np.float64(self.n)
        grid, tile = self._tile_grid(k)
        out, draw = self._draw_args(sampler, needs_first=True)              # A_t
        out.append((self._kernel("gpusvm_sdca_margins_balanced"), grid,    # eq. (15), beta^(t)
                    (self._indptr, self._indices, self._data, self.y, self.v, rows, np.int32(k),
                     tile, self.s, self.alpha, self.row_sq_norms, first, has_first, lam, n, m,
                     tentative) + draw))
        delta = final if p.aggressive else tentative
        if p.aggressive:
            out.append((self._kernel("gpusvm_sdca_rho_balanced"), grid,    # Alg. 2: beta^(t+1)
                        (self._indptr, self._indices, self._data, self.y, rows, np.int32(k),
                         tile, tentative, self.row_sq_norms, self._scratch, self.s, self._sdca_acc,
                         self._sdca_ticket, np.float64(p.beta_b), np.float64(p.theta))))
        apply_head = (self._indptr, self._indices, self._data, self.y, rows, np.int32(k), tile,
                      delta, self.v, self.alpha, self.s, self._sdca_acc, self._sdca_ticket, lam, n,
                      np.int32(bool(p.aggressive)))
        # aggressive: the step computes delta with beta^(t+1) itself, and the settle cleans rho's
        # scratch (gpusvm_sdca_deltas folded into them: 4 launches, not 5)
        apply_tail = (m, self.row_sq_norms, first, has_first, self._scratch, tentative,
                      np.int32(bool(p.aggressive)))
        apply = self._kernel("gpusvm_sdca_apply_balanced")
        out.append((apply, grid, apply_head + (np.int32(0),) + apply_tail))   # (delta,) step
        if p.aggressive:
            out.append((apply, grid, apply_head + (np.int32(1),) + apply_tail))   # keep if D grows
        return out

    @_on_device
    def dual_weights(self, lam: float):
        """``w(alpha) = X^T (alpha y) / (lam n)`` in float64 on the device (an evaluation).

        A CSR transpose-multiply by rows (``gpusvm_sdca_dual_weights``: double atomics,
        rows with ``alpha_i = 0`` skipped, a float32 ``X`` read as it is), then the
        iterate is resynchronised with it: ``v = w`` (cast), ``a = 1``,
        ``S_VSQ = ||v||^2``, ``S_ASUMD = sum alpha``.  No synchronisation.

        Notes
        -----
        A kernel by rows rather than cupyx's sparse transpose-product: it reads only
        the rows with ``alpha_i != 0`` (the support vectors, a fraction of the rows
        near the optimum), makes no float64 copy of a float32 ``X``, and is the very
        code the emulated backend runs, so the certificate's path is verified without
        a GPU.  Its double atomics make ``w`` repeatable only up to rounding (about
        1e-16 relative); the NumPy backend is the deterministic path.
        """
        xp = self.xp
        w = xp.zeros(self.d, dtype=np.float64)
        self._launch("gpusvm_sdca_dual_weights", self._row_grid(self.n),
                          (self._indptr, self._indices, self._data, self.y, np.int32(self.n),
                           self.alpha, np.float64(lam * self.n), w))
        self.v[...] = w
        v64 = self.v if self.v.dtype == np.float64 else self.v.astype(np.float64)
        self.s[S_A] = 1.0
        self.s[S_VSQ] = xp.dot(v64, v64)
        self.s[S_ASUMD] = xp.sum(self.alpha)
        return w

    @_on_device
    def dual_objective(self, lam: float, w) -> float:
        """``D(alpha) = (1/n) sum_i alpha_i - (lam/2) ||w||^2`` with ``w = w(alpha)``.

        One device-to-host copy (a synchronisation point).
        """
        xp = self.xp
        w = self._vec64(w)
        asum, wsq = (float(x) for x in self.to_host(xp.stack([xp.sum(self.alpha), xp.dot(w, w)])))
        return asum / self.n - 0.5 * lam * wsq


def make_device_backend(name: str, X, y, **options) -> DeviceBackend:
    """Build the device backend ``"cupy"`` (a GPU) or ``"emulated"`` (the CPU kernel emulator).

    Parameters
    ----------
    name : {"cupy", "emulated"}
    X, y
        See :class:`DeviceBackend`.
    **options
        ``lanes``, ``free_memory``, ``device``, ``sample_weight``: see :class:`DeviceBackend`.

    Returns
    -------
    DeviceBackend
    """
    if name not in ("cupy", "emulated"):
        raise ValueError(f"device backend must be 'cupy' or 'emulated', got {name!r}")
    return DeviceBackend(X, y, name, **options)
