"""CUDA streams, events and graph capture, emulated: launches wait until something synchronises.

The emulated device backend (``runtime="emulated"``) stands in for CuPy through this module,
so that reading a buffer before the kernel writing it has finished (a stream race on a GPU)
fails here too. docs/gpu.md ("The emulator sees asynchrony") states the model: a launch on a
:class:`Stream` other than the legacy :data:`null` is queued until something synchronises
with it; every operation on a :class:`DeviceArray` (made by :data:`xp`) checks the stream
order (:func:`host_op`, :meth:`Stream.launch`); graph capture follows CUDA's rules
(:class:`CaptureError`).

Modes (``GPUSVM_EMU_STREAMS``, or :func:`set_mode`): ``"strict"`` (default) raises
:class:`StreamOrderError` at the racing operation, naming it and the pending kernel;
``"poison"`` records it in :data:`races` and lets the operation read the stale contents
(the pending launch has not run), so that the race gives wrong numbers; ``"sync"`` runs
every launch at once (the emulator before streams were modelled).

Limits: ``np.asarray`` of a :class:`DeviceArray` and SciPy functions given one read it
without the check (a CuPy array cannot take either path; the products of a
:class:`DeviceCSR` do check); one legacy stream, no per-thread default
stream; events order whole launches, not parts of them.
"""

from __future__ import annotations

import contextlib
import os
import threading
import types
import weakref

import numpy as np
import scipy.sparse as sp

__all__ = ["CaptureError", "DeviceArray", "DeviceCSR", "Event", "Graph", "Stream", "StreamOrderError",
           "get_current_stream", "mode", "null", "races", "set_mode", "stats", "xp"]

MODES = ("strict", "poison", "sync")


class StreamOrderError(RuntimeError):
    """An operation used an array outside the order of the stream that writes or reads it."""


class CaptureError(RuntimeError):
    """What CUDA refuses while a stream is capturing (``cudaErrorStreamCapture*``)."""


def _valid_mode(value, what):
    if value not in MODES:
        raise ValueError(f"{what} must be one of {', '.join(MODES)}, got {value!r}")
    return value


_lock = threading.RLock()
_tls = threading.local()
_mode = [_valid_mode(os.environ.get("GPUSVM_EMU_STREAMS", "strict"), "GPUSVM_EMU_STREAMS")]
#: races seen in ``"poison"`` mode (and in ``"strict"`` mode before raising), as messages
races: list = []
#: counters: launches queued, launches run, graph captures, graph launches, downloads
#: (:func:`download`, ``cupy.ndarray.get``) and implicit reads (a device array's value taken
#: by ``float``, ``int``, ``bool``, ``item``, ``tolist``, iteration: on a GPU each one is a
#: device-to-host copy and a synchronisation)
stats = {"launches": 0, "deferred": 0, "captures": 0, "graph_launches": 0, "downloads": 0,
         "implicit_reads": 0}
_streams: "weakref.WeakSet[Stream]" = weakref.WeakSet()
_capturing: set = set()
_clock = [0]                       # legacy-stream operations that wrote arrays
_legacy_written: dict = {}          # id(root) -> (weakref(root), clock)


def mode() -> str:
    """The current mode: ``"strict"``, ``"poison"`` or ``"sync"``."""
    return _mode[0]


def set_mode(value: str) -> None:
    """Set the mode (see the module's docstring); pending launches run first."""
    _valid_mode(value, "mode")
    for s in list(_streams):
        s.flush()
    _mode[0] = value


@contextlib.contextmanager
def using_mode(value: str):
    """Context in which :func:`mode` is ``value`` (restored after, pending launches run)."""
    old = mode()
    set_mode(value)
    try:
        yield
    finally:
        set_mode(old)


def _stack():
    st = getattr(_tls, "stack", None)
    if st is None:
        st = _tls.stack = []
    return st


def get_current_stream():
    """The stream made current by ``with stream:`` (the legacy :data:`null` stream by default)."""
    st = _stack()
    return st[-1] if st else null


def _root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _arrays_in(obj, out):
    if isinstance(obj, DeviceArray):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _arrays_in(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _arrays_in(o, out)
    return out


def _ids(arrays):
    return {id(_root(a)) for a in arrays}


def _race(message):
    races.append(message)
    if _mode[0] == "strict":
        raise StreamOrderError(message)


def _check_capture(what):
    if _capturing:
        s = next(iter(_capturing))
        err = CaptureError(f"{what} while {s!r} is capturing a graph (CUDA: operation not "
                           "permitted when stream is capturing); capture only kernel launches")
        for c in list(_capturing):
            if c._capture is not None and c._capture.error is None:
                c._capture.error = err
        raise err


def _forget(key):
    return lambda _ref: _legacy_written.pop(key, None)


def _mark_legacy(arrays):
    _clock[0] += 1
    for a in arrays:
        r = _root(a)
        key = id(r)
        old = _legacy_written.get(key)
        ref = old[0] if old is not None and old[0]() is r else weakref.ref(r, _forget(key))
        _legacy_written[key] = (ref, _clock[0])      # dropped when the array is freed


def _legacy_write_unjoined(a, stream):
    """Whether ``a`` was written on the legacy stream after ``stream`` last joined it."""
    rec = _legacy_written.get(id(_root(a)))
    return rec is not None and rec[0]() is _root(a) and rec[1] > stream._joined


def _launch_access(args, params):
    """Root ids of the arrays a launch reads and of those it writes (non-const pointers)."""
    reads, writes = set(), set()
    for a, p in zip(args, params):
        if isinstance(a, np.ndarray):
            reads.add(id(_root(a)))
            if p.pointer and "const" not in p.ctype.split():
                writes.add(id(_root(a)))
    return reads, writes


def host_op(reads, writes, what="an array operation"):
    """Order a host-issued operation on device arrays after what it depends on.

    On a current non-legacy stream its pending launches run first (the operation is queued
    after them). On the legacy stream the events it waits on are honoured, then a pending
    launch that writes an array the operation uses, or reads one it writes, is a race.
    """
    if _mode[0] == "sync" or not (reads or writes):
        return
    with _lock:
        _check_capture(what)
        cur = get_current_stream()
        if cur is not null:
            cur.flush()
            return
        null._honour_waits()
        used = _ids(reads) | _ids(writes)
        written = _ids(writes)
        for s in list(_streams):
            for e in s._pending:
                if e.kind != "launch":
                    continue
                if (e.writes & used) or (e.reads & written):
                    _race(f"{what} on the legacy default stream uses an array that {e.name} "
                          f"(launched on {s!r}, not yet synchronised) "
                          f"{'writes' if e.writes & used else 'reads'}: run it on the stream "
                          "(with stream:) or make the legacy stream wait on an event recorded "
                          "after the launch")
                    break
        if writes:
            _mark_legacy(writes)


def created(arrays):
    """Register arrays just made by a host operation on the current stream."""
    if _mode[0] == "sync" or not arrays:
        return
    if get_current_stream() is null:
        with _lock:
            _mark_legacy(arrays)


class _Entry:
    __slots__ = ("kind", "run", "name", "reads", "writes", "event")

    def __init__(self, kind, run=None, name="", reads=frozenset(), writes=frozenset(), event=None):
        self.kind, self.run, self.name = kind, run, name
        self.reads, self.writes, self.event = reads, writes, event


class Stream:
    """An emulated CUDA stream (``cupy.cuda.Stream``'s interface as the backend uses it).

    ``null=True`` makes the legacy default stream (use :data:`null`, the only one).
    ``non_blocking`` is accepted for ``cupy.cuda.Stream``'s signature; every stream other than
    the legacy one behaves as a non-blocking stream (no implicit ordering with it).
    """

    def __init__(self, null=False, non_blocking=False, *, _legacy=False):
        self._legacy = bool(_legacy)
        self._pending: list = []
        self._seq = 0            # entries ever queued
        self._done = 0           # entries run
        self._joined = 0         # legacy clock this stream has waited for
        self._waits: list = []   # legacy stream: (stream, seq) it must wait for
        self._capture = None
        self.captures = 0
        self.graph_launches = 0
        if not self._legacy:
            _streams.add(self)

    def __repr__(self):
        return "<legacy default stream>" if self._legacy else f"<emulated stream {id(self):#x}>"

    def __enter__(self):
        return self.use()

    def __exit__(self, *exc):
        _stack().pop()
        return False

    def use(self):
        _stack().append(self)
        return self

    def _enqueue(self, entry):
        self._pending.append(entry)
        self._seq += 1
        if _mode[0] == "sync":
            self.flush()

    def flush(self, upto=None):
        """Run the pending entries (those queued up to sequence number ``upto``)."""
        with _lock:
            upto = self._seq if upto is None else upto
            while self._pending and self._done < upto:
                e = self._pending.pop(0)
                self._done += 1
                if e.kind == "launch":
                    e.run()
                elif e.kind == "wait":
                    stream, seq = e.event
                    stream.flush(seq)

    def _honour_waits(self):
        waits, self._waits = self._waits, []
        for stream, seq in waits:
            stream.flush(seq)

    @property
    def pending(self) -> int:
        """Entries queued and not yet run."""
        return len(self._pending)

    def synchronize(self):
        """Run everything queued on the stream (``cudaStreamSynchronize``)."""
        with _lock:
            _check_capture("a stream synchronisation")
            self._honour_waits()
            self.flush()

    def wait_event(self, event):
        """Order the stream's later work after what ``event`` recorded."""
        if event._at is None:
            return
        stream, seq, clock = event._at
        with _lock:
            if self._legacy:
                if stream is not null:      # at once: a read NumPy does not route through
                    stream.flush(seq)       # DeviceArray (np.asarray, SciPy) sees the result
            elif stream is null:
                self._joined = max(self._joined, clock)
            elif stream is not self:
                self._enqueue(_Entry("wait", event=(stream, seq)))

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def launch(self, kernel, grid, block, args, shared_mem=0):
        """Queue (or capture, or on the legacy stream run) one launch of an emulated kernel.

        A queued launch that uses an array written on the legacy stream after this stream
        last joined it (waited on an event recorded there) is a race.
        """
        params = kernel._params
        arrays = [a for a, _ in zip(args, params) if isinstance(a, np.ndarray)]
        reads, writes = _launch_access(args, params)
        with _lock:
            stats["launches"] += 1
            if self._legacy:
                host_op([a for a in arrays if isinstance(a, DeviceArray)],
                        [a for a, p in zip(args, params) if isinstance(a, DeviceArray)
                         and "const" not in p.ctype.split()], f"launch of {kernel.name}")
                kernel(grid, block, args, shared_mem=shared_mem)
                return
            if self._capture is not None:
                kernel._convert(args)            # argument errors at the call, as CuPy's
                self._capture.entries.append((kernel, grid, block, tuple(args), shared_mem))
                return
            if _mode[0] != "sync":
                for a in arrays:
                    if _legacy_write_unjoined(a, self):
                        _race(f"{kernel.name} launched on {self!r} uses an array written on the "
                              "legacy default stream after the stream last waited on it: record "
                              "an event on the legacy stream and wait on it, or write the array "
                              "on the stream")
                        break
            kernel._convert(args)
            keep = tuple(args)
            stats["deferred"] += 1
            self._enqueue(_Entry("launch", lambda: kernel(grid, block, keep, shared_mem=shared_mem),
                                 kernel.name, frozenset(reads), frozenset(writes)))

    @property
    def is_capturing(self) -> bool:
        return self._capture is not None

    def begin_capture(self, mode=None):
        """Start recording the stream's launches into a graph (nothing runs)."""
        if self._legacy:
            raise CaptureError("the legacy default stream cannot be captured "
                               "(cudaErrorStreamCaptureUnsupported): capture on a stream of its own")
        with _lock:
            if self._capture is not None:
                raise CaptureError(f"{self!r} is already capturing")
            # entries: (kernel, grid, block, args, shared_mem); error: what invalidated it
            self._capture = types.SimpleNamespace(entries=[], error=None)
            _capturing.add(self)

    def end_capture(self):
        """Stop recording; the :class:`Graph` of the launches (raises if the capture was invalidated)."""
        with _lock:
            cap, self._capture = self._capture, None
            _capturing.discard(self)
            if cap is None:
                raise CaptureError(f"{self!r} is not capturing")
            if cap.error is not None:
                raise CaptureError(f"the capture was invalidated (cudaErrorStreamCaptureInvalidated) "
                                   f"by: {cap.error}")
            self.captures += 1
            stats["captures"] += 1
            return Graph(cap.entries)


#: the legacy default stream
null = Stream(_legacy=True)


class Event:
    """An emulated CUDA event: a position in a stream's queue."""

    def __init__(self, block=False, disable_timing=True, interprocess=False):
        self._at = None

    def record(self, stream=None):
        stream = stream if stream is not None else get_current_stream()
        with _lock:
            if stream.is_capturing:
                return          # an event node of the capture: nothing to order here
            self._at = (stream, stream._seq, _clock[0])

    def synchronize(self):
        if self._at is None:
            return
        with _lock:
            _check_capture("an event synchronisation")
            stream, seq, _ = self._at
            stream.flush(seq)

    @property
    def done(self) -> bool:
        return self._at is None or self._at[0]._done >= self._at[1]


class Graph:
    """A captured sequence of launches (``cupy.cuda.graph.Graph``): :meth:`launch` queues it whole."""

    def __init__(self, entries):
        self._entries = list(entries)
        self._graph = None
        self.nodes = len(self._entries)
        reads, writes = set(), set()
        for kernel, _, _, args, _ in self._entries:
            r, w = _launch_access(args, kernel._params)
            reads |= r
            writes |= w
        self._reads, self._writes = frozenset(reads), frozenset(writes)

    def _emulated(self):
        """The native recordings of the launches, one per run of kernels of the same module."""
        if self._graph is None:
            graphs, module = [], None
            for kernel, grid, block, args, shared in self._entries:
                if kernel._module is not module:
                    module = kernel._module
                    graphs.append(module.graph())
                graphs[-1].add(kernel, grid, block, args, shared_mem=shared)
            self._graph = graphs
        return self._graph

    def _replay(self):
        for g in self._emulated():
            g.launch(1)

    def launch(self, stream=None):
        """Queue one replay of the graph on ``stream`` (default: the current stream)."""
        stream = stream if stream is not None else get_current_stream()
        with _lock:
            if stream._legacy:
                host_op([], [], "a graph launch")
            if stream.is_capturing:
                stream._capture.entries.extend(self._entries)
                return
            stream.graph_launches += 1
            stats["graph_launches"] += 1
            if not self._entries:
                return
            stream._enqueue(_Entry("launch", self._replay, f"graph of {self.nodes} launches",
                                   self._reads, self._writes))
            if stream._legacy:
                stream.flush()


class WhileGraph(Graph):
    """A graph of one conditional WHILE node (CUDA 12.4's ``cudaGraphCondTypeWhile``): ``body``
    (a captured :class:`Graph` whose last kernel sets the condition) replayed, without the host,
    while the condition is non-zero.

    The condition is ``cond`` (one ``uint32``), the storage of the node's conditional handle:
    ``np.uint64(cond.ctypes.data)`` is the handle kernels receive, and ``cuda_emu.h``'s
    ``cudaGraphSetConditional(handle, value)`` stores to it. Each launch first assigns the
    handle's default, 1 (``cudaGraphCondAssignDefault``), so the body runs at least once per
    launch. ``passes`` counts the passes of the body over every launch.
    """

    def __init__(self, body, cond):
        super().__init__(body._entries)
        self._cond = cond
        self.passes = 0

    def _replay(self):
        self._cond[0] = 1
        while self._cond[0]:
            super()._replay()
            self.passes += 1

    def launch(self, stream=None):
        """Queue one launch of the node (the body's passes run when the stream runs it)."""
        stream = stream if stream is not None else get_current_stream()
        if stream.is_capturing:
            raise CaptureError("a WHILE graph is launched, not captured into another graph")
        super().launch(stream)


class StreamModule:
    """An :class:`~gpusvm_emulator.EmulatedModule` whose kernels launch on the current stream."""

    def __init__(self, module):
        self._module = module
        self._kernels: dict = {}

    def get_function(self, name):
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = StreamKernel(self._module.get_function(name))
        return k


class StreamKernel:
    """A kernel called as ``cupy.RawKernel``: launched on the current emulated stream."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.name = kernel.name

    def __call__(self, grid, block, args, *, shared_mem=0):
        get_current_stream().launch(self.kernel, grid, block, tuple(args), shared_mem)


# ---------------------------------------------------------------------------- device arrays
def _each(obj, leaf):
    """``leaf`` applied to ``obj``, or to the items of (nested) tuples and lists."""
    if isinstance(obj, tuple):
        return tuple(_each(o, leaf) for o in obj)
    if isinstance(obj, list):
        return [_each(o, leaf) for o in obj]
    return leaf(obj)


def _plain(obj):
    return _each(obj, lambda a: a.view(np.ndarray) if isinstance(a, DeviceArray) else a)


def _device(obj):
    return _each(obj, lambda a: a.view(DeviceArray)
                 if isinstance(a, np.ndarray) and not isinstance(a, DeviceArray) else a)


def _new_arrays(result, inputs):
    """The arrays of ``result`` that are new (not views of an input)."""
    found = _arrays_in(result, [])
    if not found:
        return []
    roots = _ids(inputs)
    return [a for a in found if id(_root(a)) not in roots]


#: NumPy functions that write into their first argument
_WRITE_FIRST = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis"}


class DeviceArray(np.ndarray):
    """A NumPy array that stands for a CuPy array: every operation on it checks the stream order.

    Made by :data:`xp` and :func:`upload`; its views are device arrays of the same memory."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out", ())
        reads = _arrays_in(inputs, [])
        writes = _arrays_in(out, [])
        host_op(reads, writes, f"np.{ufunc.__name__}.{method}" if method != "__call__"
                else f"np.{ufunc.__name__}")
        if out:
            kwargs["out"] = tuple(_plain(o) for o in out)
        result = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        if out:
            if isinstance(result, tuple):
                return tuple(o if isinstance(o, DeviceArray) else r for o, r in zip(out, result))
            return out[0] if isinstance(out[0], DeviceArray) else result
        result = _device(result)
        created(_arrays_in(result, []))
        return result

    def __array_function__(self, func, types_, args, kwargs):
        reads = _arrays_in(args, []) + _arrays_in(kwargs, [])
        writes = _arrays_in(kwargs.get("out"), [])
        if func.__name__ in _WRITE_FIRST and args and isinstance(args[0], DeviceArray):
            writes.append(args[0])
        host_op(reads, writes, f"np.{func.__name__}")
        result = func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        if kwargs.get("out") is not None:
            return kwargs["out"]
        result = _device(result)
        created(_new_arrays(result, reads))
        return result

    def __getitem__(self, key):
        plain = self.view(np.ndarray)
        key = _plain(key)
        res = plain[key]
        if isinstance(res, np.ndarray) and res.base is not None and _root(res) is _root(plain):
            return res.view(DeviceArray)          # a view: nothing read
        host_op([self] + _arrays_in(key, []), [], "indexing")
        res = _device(plain[key])
        if isinstance(res, DeviceArray):
            created([res])
        return res

    def __setitem__(self, key, value):
        host_op([self] + _arrays_in((key, value), []), [self], "an assignment into an array")
        self.view(np.ndarray)[_plain(key)] = _plain(value)


#: the methods by which a device array's values reach the host (CuPy copies them there)
_IMPLICIT_READS = {"item", "tolist", "tobytes", "__float__", "__int__", "__bool__", "__index__",
                   "__complex__", "__iter__"}


def _reader(name, write=False, device_result=True):
    base = getattr(np.ndarray, name)
    reads_host = name in _IMPLICIT_READS

    def method(self, *args, **kwargs):
        if reads_host:
            stats["implicit_reads"] += 1
        host_op([self] + _arrays_in(args, []), [self] if write else [], f"ndarray.{name}")
        res = base(self.view(np.ndarray), *_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        if device_result:
            res = _device(res)
            created(_new_arrays(res, [self]))
        return res

    method.__name__ = name
    return method


for _name in ("astype", "copy", "dot", "argmax", "argmin", "argsort", "nonzero", "searchsorted",
              "cumsum", "cumprod", "flatten", "take", "repeat", "compress", "diagonal", "trace",
              "round", "__copy__", "__deepcopy__"):
    setattr(DeviceArray, _name, _reader(_name))
for _name in ("item", "tolist", "tobytes", "__float__", "__int__", "__bool__", "__index__",
              "__complex__", "__repr__", "__str__", "__format__", "__iter__", "__reduce__",
              "__reduce_ex__"):
    setattr(DeviceArray, _name, _reader(_name, device_result=False))
for _name in ("fill", "sort", "partition", "put", "resize"):
    setattr(DeviceArray, _name, _reader(_name, write=True, device_result=False))


# ---------------------------------------------------------------------------- array module
class _UfuncProxy:
    def __init__(self, ufunc):
        self._ufunc = ufunc

    def __call__(self, *args, **kwargs):
        return _module_call(self._ufunc, args, kwargs)

    def __getattr__(self, name):
        attr = getattr(self._ufunc, name)
        if callable(attr):
            return lambda *a, **k: _module_call(attr, a, k)
        return attr


def _module_call(func, args, kwargs):
    name = getattr(func, "__name__", "function")
    _check_capture(f"np.{name} (an allocation)")
    inputs = _arrays_in(args, []) + _arrays_in(kwargs, [])
    if inputs:          # np.array, np.asarray & co. read without dispatching to DeviceArray
        host_op(inputs, _arrays_in(kwargs.get("out"), []), f"np.{name}")
    result = func(*args, **kwargs)
    if kwargs.get("out") is not None:
        return kwargs["out"]
    result = _device(result)
    created(_new_arrays(result, inputs))
    return result


class _ArrayModule(types.ModuleType):
    """NumPy as a CuPy stand-in: what its functions return are :class:`DeviceArray`."""

    def __init__(self):
        super().__init__("gpusvm_emulator.streams.xp")
        self._cache: dict = {}
        #: NumPy's sorts take ``kind="stable"`` (the reference backend's tie order)
        self.stable_argsort = True
        #: as ``cupy.ndarray``: a host ``numpy.ndarray`` is not one (it must be uploaded)
        self.ndarray = DeviceArray

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        cache = self.__dict__["_cache"]
        if name in cache:
            return cache[name]
        attr = getattr(np, name)
        if isinstance(attr, np.ufunc):
            out = _UfuncProxy(attr)
        elif isinstance(attr, types.FunctionType) or (callable(attr) and type(attr).__name__ in (
                "_ArrayFunctionDispatcher", "builtin_function_or_method")):
            def out(*a, _f=attr, **k):
                return _module_call(_f, a, k)
            out.__name__ = name
        else:
            out = attr
        cache[name] = out
        return out


#: NumPy as the emulated backend's array module (``xp``): results are :class:`DeviceArray`
xp = _ArrayModule()


def upload(a, dtype):
    """A host array copied to a new device array on the current stream."""
    _check_capture("an upload (an allocation)")
    plain = _plain(a) if isinstance(a, DeviceArray) else a
    if isinstance(a, DeviceArray):
        host_op([a], [], "a device-to-device copy")
    out = np.array(plain, dtype=dtype, order="C", copy=True).view(DeviceArray)
    created([out])
    return out


def download(a, stream):
    """``a`` as a host array after ``stream``'s work (``cupy.ndarray.get(stream=...)``)."""
    with _lock:
        _check_capture("a device-to-host copy (a host synchronisation)")
        if (isinstance(a, DeviceArray) and _mode[0] != "sync" and stream is not null
                and _legacy_write_unjoined(a, stream)):
            _race(f"a download on {stream!r} of an array written on the legacy default stream "
                  "after the stream last waited on it")
        stream.synchronize()
        stats["downloads"] += 1
        if stream is null and isinstance(a, DeviceArray):
            host_op([a], [], "a download")
        return np.array(_plain(a), copy=True)


class DeviceCSR(sp.csr_matrix):
    """A SciPy CSR matrix standing for a ``cupyx`` one: its products with a :class:`DeviceArray`
    are array operations on the current stream returning device arrays; its transpose and row
    selections are :class:`DeviceCSR` too."""

    def _product(self, dispatch, other):
        host_op(_arrays_in(other, []), [], "a sparse product")
        res = dispatch(_plain(other))
        if isinstance(res, np.ndarray):
            res = _device(res)
            created([res])
        return res

    def _matmul_dispatch(self, other):
        return self._product(super()._matmul_dispatch, other)

    def _rmatmul_dispatch(self, other):
        return self._product(super()._rmatmul_dispatch, other)

    def transpose(self, axes=None, copy=False):
        return DeviceCSR(sp.csr_matrix(self).transpose(axes=axes, copy=copy).tocsr())

    def __getitem__(self, key):
        if _arrays_in(key, []):
            host_op(_arrays_in(key, []), [], "indexing a sparse matrix")
        res = sp.csr_matrix(self)[_plain(key)]
        return DeviceCSR(res) if sp.issparse(res) and res.format == "csr" else res
