"""Device backend: the Pegasos and SDCA segments as CUDA kernels on a CSR matrix (CuPy or emulated).

:class:`DeviceBackend` implements the ``*_m`` primitives of :mod:`gpusvm.backends._general`
with the state on the device.  It is written against an array module ``xp`` and a runtime
(:mod:`.runtime`), so the orchestration that runs on a GPU (``xp = cupy``, kernels compiled by
NVRTC) also runs in CI with ``xp = numpy`` and the kernels on the CPU emulator.

A segment runs on the device alone: the batch index ``t`` is a device counter that the
iteration's first kernel reads and advances, the step sizes come from ``t``
(``kernels/schedule.cuh``), every scalar lives in ``sm``.  An iteration is a fixed sequence
of launches (docs/gpu.md, "One kernel family"), captured once and replayed as graphs
(:class:`~.runtime.SegmentGraph`).  A graph rather than a persistent cooperative kernel: the
performance model (``benchmarks/roofline.py``) puts a replayed kernel node at about 1.5 us
and a grid barrier at about 1 us, while a persistent kernel would cap the grid at the
co-resident blocks, keep every stage's registers live (spills under the 64-register bound of
``MIN_BLOCKS``) and need a grid barrier the emulator cannot run.  Every public method and
property runs on the backend's stream (docs/gpu.md, "The stream rule").
"""

from __future__ import annotations

import functools
import inspect
import math
import os

import numpy as np
import scipy.sparse as sp

from ... import _kernels
from .._general import GeneralEvaluation, check_sample_weight
from .._state import N_SLOTS, S_A, S_ASUMD, S_B, S_BETA, S_NREJ, S_VSQ
from ..base import SCHEDULES, step_sizes
from .runtime import CupyRuntime, EmulatedRuntime

#: accumulator rows of the segment kernels (``gpusvm::N_ACC`` in kernels/outputs.cuh)
N_ACC = 7
#: environment variable lowering the bound from which the backend indexes with int64 (default
#: 2**31): a test hook, so that the int64 path (kernels, products, certificates, Newton) runs on
#: small data on the emulator
INT32_LIMIT_ENV = "GPUSVM_DEVICE_INT32_LIMIT"
#: rows are int32 everywhere (the batch sampler's draws, :mod:`gpusvm.solvers._sampling`)
MAX_ROWS = 2**31 - 1


def int32_limit() -> int:
    """The count from which the device backend indexes with int64: ``2**31``, or the value of
    ``GPUSVM_DEVICE_INT32_LIMIT`` (at least 1).

    Returns
    -------
    int
        Column indices are int64 when ``d`` reaches it; the CSR matrix of the products
        (certificates, Newton) has int64 indices and row pointers when ``nnz`` or ``d`` does.
    """
    raw = os.environ.get(INT32_LIMIT_ENV, "").strip()
    if not raw:
        return 2**31
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{INT32_LIMIT_ENV}={raw!r}: set a positive integer (the count from "
                         "which the device backend indexes with int64), or unset it")
    return min(value, 2**31)


def choose_lanes(mean_row_nnz: float) -> int:
    """Lanes per CSR row of the row-norm kernel for a mean row length: about two nonzeros per lane.

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
    A group of lanes reads a row's nonzeros with coalesced loads and sums them with
    ``log2(lanes)`` shuffles (a9a, 14 per row: 8 lanes; the text sets, 138 to 415 per row:
    32 lanes).  The segment kernels balance by nonzeros instead.
    """
    want = max(1.0, mean_row_nnz / 2.0)
    for lanes in _kernels.LANE_COUNTS:
        if lanes >= want:
            return lanes
    return _kernels.LANE_COUNTS[-1]


def estimate_device_bytes(n: int, d: int, nnz: int, itemsize: int, *, csr_resident: bool = False,
                          batch_rows: int = 1 << 20, n_outputs: int = 1,
                          weighted: bool = False, index_bytes: int = 4) -> dict:
    """Device memory the backend allocates, by part.

    Parameters
    ----------
    n, d, nnz, itemsize : int
        Shape and nonzeros of ``X``; 4 for float32 data, 8 for float64.
    csr_resident : bool
        The CSR arrays are already on the device (CuPy input): not counted.
    batch_rows : int
        Row indices of one uploaded chunk of batches.
    n_outputs : int
        ``M``, the outputs of one fit: per row, ``y``, SDCA's ``alpha``, the margins and the
        decision values are ``M`` wide (with the row norm); per column, ``V`` (the data's
        dtype), ``U`` or SDCA's float64 scratch and the dense float64 ``W`` are ``M`` wide.
    weighted : bool
        Example weights are held (``n`` float64).
    index_bytes : int
        Bytes of a column index: 4, or 8 for a matrix of 2**31 columns or more.

    Returns
    -------
    dict
        ``{"csr", "vectors", "buffers", "total"}`` in bytes (``buffers``: the batch chunk,
        an evaluation's margins and decision values, the state and small scratch).
    """
    M = max(1, int(n_outputs))
    csr = 0 if csr_resident else nnz * (itemsize + index_bytes) + (n + 1) * 8
    vectors = n * (itemsize * M + 8 + 8 * M + (8 if weighted else 0)) + d * M * (itemsize + 8 + 8)
    buffers = batch_rows * 4 + 2 * n * 8 * M + 4096 * M
    return {"csr": csr, "vectors": vectors, "buffers": buffers, "total": csr + vectors + buffers}


def memory_refusal(name: str, need: dict, free: int, itemsize: int) -> str:
    """The one-line refusal of a fit whose data, state and scratch (``need``, from
    :func:`estimate_device_bytes`) exceed the ``free`` device bytes, naming the remedies."""
    mib = 2.0**20
    smaller = ("dtype='float32' (half the bytes of the values and state), "
               if itemsize > 4 else "")
    return (f"the {name} backend needs about {need['total'] / mib:.0f} MiB of device memory "
            f"(CSR {need['csr'] / mib:.0f} MiB, vectors {need['vectors'] / mib:.0f} MiB, "
            f"buffers {need['buffers'] / mib:.0f} MiB) but only {free / mib:.0f} MiB are free; "
            f"use {smaller}the CPU backend (backend='numba' or 'numpy'), or a Dask cluster of "
            "GPUs (gpusvm.dask, the rows split across devices); or free device memory held by "
            "other processes or CuPy's pool (cupy.get_default_memory_pool().free_all_blocks())")


def _on_device(method):
    """Run ``method`` with the runtime's device and stream current, joined at the boundary."""
    @functools.wraps(method)
    def bound(self, *args, **kwargs):
        with self.runtime.activate():
            return method(self, *args, **kwargs)
    bound._on_device = True
    return bound


def _bind_public(cls):
    """Wrap every public method and property of ``cls`` (inherited ones too) in :func:`_on_device`:
    the stream rule by construction, so no method can be added that forgets it."""
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
class DeviceBackend(GeneralEvaluation):
    """Pegasos and SDCA segments as CUDA kernels (the ``*_m`` primitives of :mod:`gpusvm.backends.base`).

    Parameters
    ----------
    X : scipy.sparse matrix, ndarray, cupyx.scipy.sparse matrix or cupy.ndarray
        Training data (n, d), float32 or float64 (other dtypes become float64); host input
        is copied to the device once, device input is used in place.
    y : array of shape (n,) or (n, M)
        Labels in {-1, +1}; one column per output.
    runtime : {"cupy", "emulated"} or runtime object
        Where the kernels run (:mod:`.runtime`).
    lanes : int, optional
        Lanes per CSR row of the row-norm kernel (4, 8, 16 or 32; default: :func:`choose_lanes`).
    free_memory : int, optional
        Free device bytes to check the estimate against, before anything is uploaded
        (default: what the runtime reports: ``cupy.cuda.runtime.memGetInfo``, or the emulated
        device's pretended figure, unbounded unless set).
    device : int, optional
        CUDA device id the backend is bound to (default: the current device; ``"emulated"``
        is device 0 and refuses any other id).  Every allocation, compilation and launch
        happens there, on the backend's own non-blocking stream, so one process can drive one
        backend per GPU.
    sample_weight : array of shape (n,) or (n, M), optional
        Example weights ``s_i >= 0``.

    Attributes
    ----------
    transfers : list of int
        Bytes of every device-to-host copy made by :meth:`to_host`, in order.
    launches, device_id : int
        Kernel launches so far; the CUDA device the backend is bound to (0 when emulated).
    times_certificates : bool
        Whether SDCA's certificate cadence weighs measured seconds (a GPU: yes; the emulator:
        no, so that its fits are repeatable and equal the NumPy reference's).

    Raises
    ------
    MemoryError
        When the data, vectors and buffers would not fit in free device memory.

    Notes
    -----
    The updates of ``V`` are float atomics, so runs are not bitwise repeatable: sums agree up
    to rounding in any order.  With float32 data each atomic addition rounds to float32,
    where the NumPy backend sums a batch's contributions to a coordinate in float64 and
    rounds once.
    """

    def __init__(self, X, y, runtime="cupy", *, lanes: int | None = None,
                 free_memory: int | None = None, device: int | None = None,
                 sample_weight=None) -> None:
        if isinstance(runtime, str):
            if runtime not in ("cupy", "emulated"):
                raise ValueError(f"runtime must be 'cupy' or 'emulated', got {runtime!r}")
            runtime = CupyRuntime(device) if runtime == "cupy" else EmulatedRuntime(device=device)
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
        self.times_certificates = bool(getattr(runtime, "times_certificates", False))
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
        if self.n > MAX_ROWS:
            raise ValueError(f"X has {self.n} rows; the batch samplers draw row ids as int32, so "
                             f"n must be at most {MAX_ROWS}: split the rows (gpusvm.dask)")
        limit = int32_limit()
        #: the kernels' column index type: int64 from 2**31 columns on (their int64 instances)
        self.index = "int64" if self.d >= limit else "int32"
        #: the index type of the CSR matrix of the products: int64 from 2**31 nonzeros (its
        #: row pointers) or columns on
        self.csr_index = np.dtype(np.int64 if self.index == "int64" or nnz >= limit
                                  else np.int32)
        self.nnz = nnz
        self.lanes = int(lanes) if lanes is not None else choose_lanes(nnz / max(self.n, 1))
        if self.lanes not in _kernels.LANE_COUNTS:
            raise ValueError(f"lanes must be one of {_kernels.LANE_COUNTS}, got {lanes}")
        self.value_type = _kernels.VALUE_TYPES[self.dtype.name]
        y_shape = tuple(getattr(y, "shape", np.shape(y)))
        need = estimate_device_bytes(self.n, self.d, nnz, self.dtype.itemsize,
                                     csr_resident=resident,
                                     n_outputs=y_shape[1] if len(y_shape) == 2 else 1,
                                     weighted=sample_weight is not None,
                                     index_bytes=8 if self.index == "int64" else 4)
        free = free_memory if free_memory is not None else runtime.free_bytes()
        if free is not None and need["total"] > free:
            raise MemoryError(memory_refusal(self.name, need, free, self.dtype.itemsize))
        up = runtime.upload
        self._data = up(data, self.dtype)                       # copied once
        self._indices = up(indices, np.int64 if self.index == "int64" else np.int32)
        self._indptr = up(indptr, np.int64)
        self.y = up(y, self.dtype)
        self._init_labels(sample_weight)                    # Y (n x M), weights; checks shapes
        # the emulator keeps the host CSR as its device stand-in; a GPU keeps no host CSR
        if runtime.keeps_host_X:
            self._X = runtime.device_csr(X, self.csr_index)
        else:       # device input of the right index type serves as it is
            self._X = X if resident and X.indices.dtype == self.csr_index else None
        self._row_sq_norms = None
        # a captured segment: the batch counter its kernels read and advance, the tickets of the
        # last-block finishes ([0] the step kernels, [1] the gather that draws the batch)
        self._counter = self.xp.zeros(1, dtype=np.int64)
        self._ticket = self.xp.zeros(2, dtype=np.uint32)
        self._dummy = self.xp.zeros(1, dtype=np.float64)
        self._graphs: dict = {}
        self._smp = None
        self._buffers = None
        self.V = self.U = self.sm = self.alpha = None

    def _init_labels(self, sample_weight) -> None:
        """``Y`` (n x M) and the weights on the device; checks their shapes (constructor)."""
        if self.y.ndim == 2 and self.y.shape[0] == self.n and self.y.shape[1] >= 1:
            self.Y = self.xp.ascontiguousarray(self.y)
        elif tuple(self.y.shape) != (self.n,):
            raise ValueError(f"y must have shape ({self.n},) or ({self.n}, M) with M >= 1 "
                             f"outputs, got {tuple(self.y.shape)}")
        else:
            self.Y = self.y.reshape(self.n, 1)
        self.sample_weight = None
        if sample_weight is not None:
            host = sample_weight if isinstance(sample_weight, np.ndarray) else \
                self.runtime.download(sample_weight)
            self.sample_weight = self.runtime.upload(
                check_sample_weight(host, self.n, self.Y.shape[1]), np.float64)

    def _segment_kernel(self, op: str, loss: str = "hinge"):
        """The instance of segment kernel ``op`` for this fit's outputs, weights and ``loss``."""
        return self._function(_kernels.segment_kernel(
            op, self.value_type, self.index, M1=self.n_outputs == 1, SQ=loss == "squared_hinge",
            WT=self.sample_weight is not None))

    def _grid(self, k: int, fn=None):
        """Grid and tile rows of segment kernel ``fn`` over ``k`` batch rows: tiles balanced by
        nonzeros for one output (balanced.cuh), else one thread per (row, output) pair; at most
        the blocks the device holds at once of ``fn`` (the runtime's ``blocks_for``)."""
        cap = self.runtime.blocks_for(fn)
        if self.n_outputs == 1:
            grid = max(1, min(k, cap))
            return grid, np.int32(min(_kernels.BLOCK, math.ceil(k / grid)))
        pairs = k * self.n_outputs
        grid = self._blocks(pairs, fn=fn)
        if pairs + grid * _kernels.BLOCK >= 2**31:
            raise ValueError(f"a batch of {k} rows and {self.n_outputs} outputs exceeds the 2**31 "
                             "(row, output) pairs the kernels index with int32; use a smaller batch")
        return grid, np.int32(0)

    def _blocks(self, work: int, per_block: int = _kernels.BLOCK, fn=None) -> int:
        """Blocks of a grid-stride launch of ``fn`` over ``work`` items, at most the blocks the
        device holds at once (the runtime's ``blocks_for(fn)``)."""
        return max(1, min(math.ceil(work / per_block), self.runtime.blocks_for(fn)))

    # ------------------------------------------------------------ streams
    def activate(self):
        """Context in which the caller's CuPy work runs on the backend's stream (see :mod:`.base`).

        The solvers run a whole fit in it (:func:`gpusvm.backends.base.on_backend_stream`);
        entering and leaving it joins the caller's stream with events (a few microseconds).
        """
        return self.runtime.activate()

    @property
    def graph_stats(self) -> dict:
        """``{"captures", "graph_launches", "capture_seconds"}``: graphs captured and launched so
        far and the host time of the captures."""
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
        if self._X is None:         # int64 indices: cupyx.scipy.sparse of CuPy >= 14.1
            idx = self.csr_index
            indices = self._indices if self._indices.dtype == idx else self._indices.astype(idx)
            indptr = self._indptr if self._indptr.dtype == idx else self._indptr.astype(idx)
            self._X = self.runtime.csp.csr_matrix((self._data, indices, indptr),
                                                  shape=(self.n, self.d))
        return self._X

    @property
    def row_sq_norms(self):
        """``||x_i||^2`` of every row, float64 on the device (computed on first use)."""
        if self._row_sq_norms is None:
            sq = self.xp.empty(self.n, dtype=np.float64)      # the n doubles of the estimate
            if self.n:
                fn = self._function(_kernels.row_kernel("gpusvm_row_sq_norms", self.lanes,
                                                        self.value_type))
                self._call(fn, self._blocks(self.n, _kernels.BLOCK // self.lanes, fn),
                           (self._indptr, self._data, np.int32(self.n), sq))
            self._row_sq_norms = sq
        return self._row_sq_norms

    # ------------------------------------------------------------ transfers
    def synchronize(self) -> None:
        """Wait until the work launched on the backend's stream has run (no copy).

        The solvers call it only to time their parts (the certificate cadence of
        :func:`~gpusvm.solvers.sdca.sdca`, where :attr:`times_certificates`).
        """
        self.runtime.stream.synchronize()

    def to_host(self, a):
        """Copy ``a`` to the host as a NumPy array (the only device-to-host copy).

        Every call is recorded in :attr:`transfers` (bytes copied).  Synchronises the device.
        """
        out = self.runtime.download(a)
        self.transfers.append(int(out.nbytes))
        return out

    # ------------------------------------------------------------ batches from the counter
    def _sampler_buffers(self, sampler):
        """The batch buffers of ``sampler`` (a run), made once: ``(rows, first, stamp, head, grid)``.

        ``rows``, ``first`` (int32, ``k``), the stamps of i.i.d. batches (uint64, ``n``),
        the sampler's arguments ``head = (seed, n, k, half, mask)`` and its grid.
        """
        if self._smp is None or self._smp[0] is not sampler:
            xp = self.xp
            k = int(sampler.k)
            rows = xp.zeros(k, dtype=np.int32)
            first = xp.ones(k, dtype=np.int32)
            stamp = xp.zeros(self.n if sampler.code == 1 else 1, dtype=np.uint64)
            head = (np.uint64(sampler.seed), np.int32(sampler.n), np.int32(k),
                    np.int32(sampler.half), np.uint32(sampler.mask))
            self._smp = (sampler, (rows, first, stamp, head, self._blocks(k)))
        return self._smp[1]

    # ------------------------------------------------------------ launches
    def _function(self, name: str):
        """The compiled kernel ``name`` (a name expression), looked up once."""
        fn = self._functions.get(name)
        if fn is None:
            wide = name.endswith(f",{_kernels.INDEX_TYPES['int64']}>")
            module = self.runtime.wide_module() if wide else self.runtime.module
            fn = self._functions[name] = module.get_function(name)
        return fn

    def _call(self, fn, grid: int, args) -> None:
        """Launch a looked-up kernel (and count it)."""
        fn((grid,), (_kernels.BLOCK,), args)
        self.launches += 1

    #: sampling modes whose batches the gather kernel draws itself (without replacement, epochs:
    #: kernels/segment_batch.cuh); i.i.d. batches (code 1) keep the sampler's launches, whose
    #: first-occurrence stamps need the whole batch
    DRAWN_IN_GATHER = (0, 2)

    def _draw_args(self, sampler, needs_first: bool):
        """``(launches, args)`` of a gather kernel: no launch and ``(mode, seed, n, half, mask,
        counter, ticket)`` when it draws the batch, else the sampler's launches (with the
        first-occurrence mask of i.i.d. batches when ``needs_first``) and ``mode = -1``."""
        seed, n, _, half, mask = self._sampler_buffers(sampler)[3]
        tail = (seed, n, half, mask, self._counter, self._ticket[1:2])
        if sampler.code in self.DRAWN_IN_GATHER:
            return [], (np.int32(sampler.code),) + tail
        return self._sample_launches(sampler, bump_in_firsts=needs_first), (np.int32(-1),) + tail

    def _sample_launches(self, sampler, bump_in_firsts: bool):
        """The launches that draw a batch from the device counter (and advance it)."""
        rows, first, stamp, head, grid = self._sampler_buffers(sampler)
        iid = sampler.code == 1 and bump_in_firsts
        out = [(self._function(_kernels.SEGMENT_SAMPLER_KERNELS[sampler.code]), grid,
                head + (self._counter, self._ticket[1:2], np.int32(not iid), rows, first,
                        stamp))]
        if iid:
            out.append((self._function(_kernels.SEGMENT_SAMPLER_KERNELS[3]), grid,
                        (rows, stamp, head[2], self._counter, self._ticket[1:2], first)))
        return out

    def _replay(self, key, build, t0: int, t1: int) -> None:
        """Run iterations ``t0 + 1 .. t1``: the sequence of ``key`` (recorded as graphs the first
        time) replayed ``t1 - t0`` times from the batch counter set to ``t0``."""
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

    # ------------------------------------------------------------ state
    def init_state_m(self, w0=None, b0=0.0, averaging: bool = False) -> None:
        """``V = W0`` (d x M, zero by default), ``a = 1``, ``b = b0``, ``U = 0`` if averaging."""
        xp = self.xp
        M = self.n_outputs
        if w0 is None:
            self.V = xp.zeros((self.d, M), dtype=self.dtype)
        else:
            self.V = xp.ascontiguousarray(
                self.runtime.upload(np.reshape(w0, (self.d, M)), self.dtype))
        sm = np.zeros((N_SLOTS, M), dtype=np.float64)
        sm[S_A] = 1.0
        sm[S_B] = np.broadcast_to(np.asarray(b0, dtype=np.float64), (M,))
        self.sm = self.runtime.upload(sm, np.float64)
        v64 = self.V.astype(np.float64)
        self.sm[S_VSQ] = xp.sum(v64 * v64, axis=0)
        self.U = xp.zeros((self.d, M), dtype=np.float64) if averaging else None
        self._acc = xp.zeros(N_ACC * M, dtype=np.float64)
        self._ticket[...] = 0
        self._buffers = None
        self._graphs.clear()                 # recorded segments hold the old arrays

    def _segment_buffers(self, k: int):
        """The (k, M) float64 margins, steps, tentative steps and optimal-bias breakpoints of an
        iteration (allocated once per batch size)."""
        if self._buffers is None or self._buffers[0].shape[0] != k:
            self._buffers = tuple(self.xp.empty((k, self.n_outputs), dtype=np.float64)
                                  for _ in range(4))
        return self._buffers

    # ------------------------------------------------------------ Pegasos
    def pegasos_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` on the device alone (Fig. 1 for M outputs).

        Per iteration: ``gpusvm_margins`` (step 2; it draws ``A_t``, or reads what
        ``gpusvm_sample_next`` drew for i.i.d. batches), (``gpusvm_optimal_bias``: Sec. 4, radix
        selection in O(k)), (``gpusvm_reset_scale`` where ``1 - eta_t lam = 0``) and
        ``gpusvm_pegasos_step`` (steps 3-5; its last block finishes the scalars and folds a
        small scale into ``V``), recorded once per (sampler, plan) and replayed.

        Parameters
        ----------
        sampler, t0, t1, plan
            As :meth:`gpusvm.backends.numpy_.NumpyBackend.pegasos_segment_m`.
        """
        p = plan
        _, shrinks = step_sizes(p.schedule, t0 + 1, t1 + 1, p.lam, p.eta0, p.norma_p)
        reset = bool(np.any(shrinks == 0.0))
        key = ("pegasos", sampler, p, reset)
        self._replay(key, lambda: self._pegasos_launches(sampler, p, reset), t0, t1)

    def _pegasos_launches(self, sampler, p, reset: bool):
        """One Pegasos iteration as (kernel, grid, args) launches."""
        rows, first = self._sampler_buffers(sampler)[:2]
        k = int(sampler.k)
        M = np.int32(self.n_outputs)
        m, _, _, bp = self._segment_buffers(k)
        margins = self._segment_kernel("gpusvm_margins")
        step = self._segment_kernel("gpusvm_pegasos_step", p.loss)
        use_u = self.U is not None
        U = self.U if use_u else self._dummy
        sw = self.sample_weight if self.sample_weight is not None else self._dummy
        sched = (np.int32(SCHEDULES.index(p.schedule)), np.float64(p.lam),
                 np.float64(p.eta0 or 0.0), np.float64(p.norma_p))
        csr = (self._indptr, self._indices, self._data)
        out, draw = self._draw_args(sampler, needs_first=False)               # step 1: A_t
        grid, tile = self._grid(k, margins)
        out.append((margins, grid,                                               # step 2
                    csr + (self.Y, self.V, rows, np.int32(k), tile, M, self.sm, m) + draw
                    + (first,)))
        if p.optimal:                                                          # Sec. 4
            out.append((self._segment_kernel("gpusvm_optimal_bias"), int(M),
                        (self.Y, sw, rows, np.int32(k), M, self.sm, m, bp)))
        if reset:                                                              # eta_t lam = 1
            reset_fn = self._segment_kernel("gpusvm_reset_scale")
            out.append((reset_fn, self._blocks(self.d * self.n_outputs, fn=reset_fn),
                        (self.V, U, np.int32(use_u), np.int64(self.d), M, self.sm,
                         self._counter) + sched))
        grid, tile = self._grid(k, step)
        out.append((step, grid,                                                  # steps 3-5
                    csr + (self.Y, sw, rows, np.int32(k), tile, M, np.float64(p.k), m, self.V,
                           U, np.int32(use_u), np.int64(self.d), self.sm, self._acc,
                           self._ticket[0:1], self._counter) + sched
                    + (np.int32(bool(p.unreg_bias)), np.float64(p.radius),
                       np.int32(bool(p.averaged)), np.int64(p.t_avg),
                       np.float64(p.renorm_threshold))))
        return out

    # ------------------------------------------------------------ SDCA
    def init_dual_m(self, beta0: float, loss: str = "hinge", alpha0=None, lam=None) -> None:
        """Start SDCA as :meth:`NumpyBackend.init_dual_m <gpusvm.backends.numpy_.NumpyBackend.init_dual_m>`
        (after :meth:`init_state_m`): ``alpha = alpha0``, else 0 but at the rows with
        ``||x_i|| = 0`` (their optimum ``s_i``, or ``2 s_i`` for the squared hinge)."""
        xp = self.xp
        M = self.n_outputs
        if alpha0 is None:
            zero = (self.row_sq_norms == 0).astype(np.float64)
            s = self._weights()
            self.alpha = xp.ascontiguousarray(zero[:, None] * (2.0 * s if loss == "squared_hinge"
                                                               else s))
        else:
            self.alpha = xp.ascontiguousarray(
                self.runtime.upload(np.reshape(alpha0, (self.n, M)), np.float64))
        self._scratch = None
        self._graphs.clear()                 # recorded segments hold the old alpha
        self.sm[S_ASUMD] = xp.sum(self.alpha, axis=0)
        self.sm[S_BETA] = float(beta0)
        self.sm[S_NREJ] = 0.0
        if alpha0 is not None:
            self.dual_weights_m(lam)

    def sdca_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` on the device alone (eq. 15 / Alg. 2 per output).

        Per iteration: ``gpusvm_sdca_margins`` (it draws the batch, or reads what the
        sampler's two launches drew for i.i.d. batches; then the margins and the steps of eq. 15
        with ``beta^(t)``) and ``gpusvm_sdca_apply``; the aggressive variant adds
        ``gpusvm_sdca_rho`` before it, so that the step uses the adapted ``beta^(t+1)``, and a
        second ``gpusvm_sdca_apply`` that keeps or undoes the step per output and zeroes rho's
        scratch.  Recorded once per (sampler, plan) and replayed; the contract is in
        :mod:`gpusvm.solvers.sdca`.

        Parameters
        ----------
        sampler, t0, t1, plan
            As :meth:`gpusvm.backends.numpy_.NumpyBackend.sdca_segment_m`.
        """
        if plan.aggressive and self._scratch is None:
            self._scratch = self.xp.zeros((self.d, self.n_outputs), dtype=np.float64)
        key = ("sdca", sampler, plan)
        self._replay(key, lambda: self._sdca_launches(sampler, plan), t0, t1)

    def _sdca_launches(self, sampler, p):
        """One SDCA iteration as (kernel, grid, args) launches."""
        rows, first = self._sampler_buffers(sampler)[:2]
        k = int(sampler.k)
        M = np.int32(self.n_outputs)
        m, tentative, final, _ = self._segment_buffers(k)
        has_first = np.int32(sampler.code != 0)
        lam, n = np.float64(p.lam), np.float64(self.n)
        sw = self.sample_weight if self.sample_weight is not None else self._dummy
        scratch = self._scratch if p.aggressive else self._dummy
        csr = (self._indptr, self._indices, self._data)
        out, draw = self._draw_args(sampler, needs_first=True)                 # A_t
        margins = self._segment_kernel("gpusvm_sdca_margins", p.loss)
        grid, tile = self._grid(k, margins)
        out.append((margins, grid,                                               # eq. (15), beta^(t)
                    csr + (self.Y, self.V, rows, np.int32(k), tile, M, self.sm, self.alpha,
                           self.row_sq_norms, sw, first, has_first, np.float64(p.lam * self.n),
                           m, tentative) + draw))
        if p.aggressive:                                                        # Alg. 2: beta^(t+1)
            rho = self._segment_kernel("gpusvm_sdca_rho")
            grid, tile = self._grid(k, rho)
            out.append((rho, grid,
                        csr + (self.Y, rows, np.int32(k), tile, M, tentative, self.row_sq_norms,
                               scratch, self.sm, self._acc, self._ticket[0:1],
                               np.float64(p.beta_b), np.float64(p.theta))))
        delta = final if p.aggressive else tentative
        apply = self._segment_kernel("gpusvm_sdca_apply", p.loss)
        grid, tile = self._grid(k, apply)
        head = csr + (self.Y, sw, rows, np.int32(k), tile, M, delta, self.V, self.alpha, self.sm,
                      self._acc, self._ticket[0:1], lam, n, np.int32(bool(p.aggressive)))
        # aggressive: the step computes delta with beta^(t+1) itself, the settle cleans rho's scratch
        tail = (m, self.row_sq_norms, first, has_first, scratch, tentative,
                np.int32(bool(p.aggressive)))
        out.append((apply, grid, head + (np.int32(0),) + tail))                 # the step
        if p.aggressive:
            out.append((apply, grid, head + (np.int32(1),) + tail))             # keep or undo
        return out


def make_device_backend(name: str, X, y, **options) -> DeviceBackend:
    """Build the device backend ``"cupy"`` (a GPU) or ``"emulated"`` (the CPU kernel emulator).

    Parameters
    ----------
    name : {"cupy", "emulated"}
    X, y, **options
        ``X``, ``y``, ``lanes``, ``free_memory``, ``device``, ``sample_weight``: see
        :class:`DeviceBackend`.

    Returns
    -------
    DeviceBackend
    """
    if name not in ("cupy", "emulated"):
        raise ValueError(f"device backend must be 'cupy' or 'emulated', got {name!r}")
    return DeviceBackend(X, y, name, **options)
