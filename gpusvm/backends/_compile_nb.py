"""How gpusvm's numba functions are compiled and cached: the collector paused, helpers
ahead, the disk cache stamped with every file the compiled code is made of.

Python's collector is paused during the outermost compilation of a function of ``gpusvm``
(numba's compiler makes so many objects that the collections, each walking the process's
objects, took a fifth of a cold fit's compile time: BENCHMARKS.md, "One-off compilation").
:data:`AHEAD` compiles a fit's helpers in a background thread (docs/architecture.md).
:class:`FamilyStampLocator` keeps numba's disk cache of the backend true to its sources.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import os
import sys
import threading

from numba.core import caching, event


class _PauseCollector(event.Listener):
    """The collector off during gpusvm's outermost compilations (serialised: one counter)."""

    def __init__(self):
        self.depth, self.was_enabled = 0, False

    def on_start(self, ev):
        if self.depth:
            self.depth += 1
            return
        disp = (ev.data or {}).get("dispatcher")
        module = getattr(getattr(disp, "py_func", None), "__module__", None) or ""
        if module.partition(".")[0] == "gpusvm":
            self.depth = 1
            self.was_enabled = gc.isenabled()
            gc.disable()

    def on_end(self, ev):
        if self.depth:
            self.depth -= 1
            if self.depth == 0 and self.was_enabled:
                gc.enable()


LISTENER = _PauseCollector()
event.register("numba:compile", LISTENER)

#: the files whose code or constants the backend's compiled functions are made of: the loops of
#: ``_loops_nb`` inline helpers of ``_csr_nb`` and ``_counter_nb`` and read the slot numbers of
#: ``_state`` (listed as absolute paths; tests/test_compile_ahead.py checks the list is whole)
FAMILY = [os.path.join(os.path.dirname(os.path.abspath(__file__)), name) for name in
          ("_counter_nb.py", "_csr_nb.py", "_loops_nb.py", "_newton_nb.py",
           "_sdca_threads_nb.py", "_state.py", "_threads_nb.py")]
#: and the svmlight parser of ``gpusvm.datasets`` (every file of cached code is of the family)
FAMILY.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "_svmlight_nb.py"))


@functools.lru_cache(maxsize=None)
def _digest(stamps):
    """SHA-256 of the contents of the files of ``stamps`` (``(path, mtime_ns, size)``, the
    key: a file changed while the process runs is read again)."""
    h = hashlib.sha256()
    for path, _, _ in stamps:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def family_digest() -> str:
    """The digest of every file of :data:`FAMILY`, as they are now."""
    stamps = []
    for path in FAMILY:
        st = os.stat(path)
        stamps.append((path, st.st_mtime_ns, st.st_size))
    return _digest(tuple(stamps))


class FamilyStampLocator(caching._CacheLocator):
    """numba's cache locator for the functions of :data:`FAMILY`: the one numba would choose,
    its source stamp joined with :func:`family_digest`.

    numba stamps a cached function with its own file only, so after an upgrade or an edit
    that changed ``_csr_nb.py`` (or a slot number in ``_state.py``) alone, ``_loops_nb``'s
    cached loops were loaded with the old helpers compiled into them: the fit ran old
    code.  Now a change to any file of the family makes every entry stale (recompiled
    once).  Put first in numba's list of locators when this module is imported, which the
    numba modules do before they define a function.
    """

    def __init__(self, inner):
        self._inner = inner

    @classmethod
    def from_function(cls, py_func, py_file):
        """The locator for ``py_func`` when ``py_file`` is of :data:`FAMILY`, else None."""
        if os.path.abspath(py_file) not in FAMILY:
            return None
        for other in _LOCATORS:
            if other is not cls:
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None

    def ensure_cache_path(self):
        """As the inner locator."""
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        """As the inner locator."""
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        """The inner locator's stamp and the family's digest."""
        return self._inner.get_source_stamp(), family_digest()

    def get_disambiguator(self):
        """As the inner locator."""
        return self._inner.get_disambiguator()


#: numba's list of locators (of ``CacheImpl``, ``_CacheImpl`` in older numba; a numba with
#: neither keeps its own stamps)
_LOCATORS = getattr(getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None),
                    "_locator_classes", [])
if FamilyStampLocator not in _LOCATORS:
    _LOCATORS.insert(0, FamilyStampLocator)


def compile_ahead_setting() -> bool:
    """``GPUSVM_COMPILE_AHEAD``: ``1`` (default, helpers compiled ahead) or ``0``."""
    value = os.environ.get("GPUSVM_COMPILE_AHEAD", "").strip().lower()
    if value in ("", "0", "1"):
        return value != "0"
    raise ValueError(f"GPUSVM_COMPILE_AHEAD={value!r}: set 1 (compile a fit's helpers in a "
                     "background thread) or 0 (compile each where it is first called)")


def in_disk_cache(dispatcher, sig, uncached=False) -> bool:
    """Whether numba's on-disk cache holds ``dispatcher``'s code for ``sig``; ``uncached`` when
    the dispatcher has no disk cache (``cache=False``)."""
    cache = dispatcher._cache
    if not hasattr(cache, "_cache_file"):            # numba's NullCache
        return uncached
    return cache._index_key(sig, dispatcher.targetctx.codegen()) in \
        cache._cache_file._load_index()


def _by_name(dispatcher):
    """``(module, name)`` when ``dispatcher`` is a module-level function of ``gpusvm`` with a
    disk cache (a compiling process can find it and leave its code where this one loads
    it), else None."""
    py_func = getattr(dispatcher, "py_func", None)
    module = getattr(py_func, "__module__", "") or ""
    name = getattr(py_func, "__qualname__", "")
    if module.partition(".")[0] != "gpusvm" or "<" in name or \
            not hasattr(getattr(dispatcher, "_cache", None), "_cache_file"):
        return None
    mod = sys.modules.get(module)
    return (module, name) if getattr(mod, name, None) is dispatcher else None


def _serve() -> None:
    """The compiling process: compile each ``(module, name, sig)`` line of stdin (base64
    pickles) into numba's disk cache, answer ``ok`` or ``failed``; end with stdin."""
    import base64  # noqa: PLC0415
    import importlib  # noqa: PLC0415
    import pickle  # noqa: PLC0415

    with contextlib.suppress(OSError, AttributeError):      # (no os.nice on Windows)
        os.nice(10)                   # the fit's own threads first
    for line in sys.stdin:
        try:
            module, name, sig = pickle.loads(base64.b64decode(line))   # noqa: S301  (our pipe)
            getattr(importlib.import_module(module), name).compile(sig)
            answer = "ok"
        except Exception:             # noqa: BLE001  the parent compiles it itself
            answer = "failed"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


class _Compiler:
    """A Python process that compiles into numba's disk cache (:func:`_serve`), started on the
    first job; ``None`` from :meth:`compile` when it cannot start or died."""

    def __init__(self) -> None:
        self._proc = None

    def compile(self, module, name, sig):
        """Compile ``module.name`` for ``sig`` there: True (cached), False (failed) or None."""
        import base64  # noqa: PLC0415
        import pickle  # noqa: PLC0415
        import subprocess  # noqa: PLC0415

        try:
            if self._proc is None:
                # gpusvm as a bare package: the numba modules without the estimators'
                # imports (scikit-learn: 2 s of a start of 3)
                package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
                code = ("import sys, types\n"
                        "package = types.ModuleType('gpusvm')\n"
                        f"package.__path__ = [{package!r}]\n"
                        "sys.modules['gpusvm'] = package\n"
                        "from gpusvm.backends._compile_nb import _serve\n"
                        "_serve()\n")
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL, text=True, cwd=os.path.dirname(package))
            self._proc.stdin.write(base64.b64encode(pickle.dumps((module, name, sig))).decode()
                                   + "\n")
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline().strip()
        except (OSError, ValueError, pickle.PicklingError):
            answer = ""
        if answer in ("ok", "failed"):
            return answer == "ok"
        self.close()
        return None

    def close(self) -> None:
        """End the process (its stdin closed: it ends after the job in hand)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()
            with contextlib.suppress(OSError, ValueError):
                proc.stdout.close()
            with contextlib.suppress(Exception):     # idle or dead: it ends at once
                proc.wait(timeout=30)


class CompileAhead:
    """A fit's helpers (each with a NumPy equivalent, the same numbers bit for bit) compiled
    ahead while the fit goes on: :meth:`ready` is True when the call's code is compiled (in
    this process or on disk), else False with the compilation queued.

    A helper that a process can find by name (a module-level function of ``gpusvm`` with a
    disk cache) is compiled by a second Python process into numba's disk cache, then loaded
    here on the next :meth:`ready`: numba compiles one function at a time in a process (its
    compiler lock), so only another process compiles beside the fit's own compilation (two
    cores: both at once), and nothing there touches this process's warning handler, so the
    fit returns without waiting for it.  Any other helper, and one that process failed to
    cache, is compiled by a thread of this process (serialised with the fitting thread's
    compilations: asked for once the loop is compiled), which the fit waits for
    (:meth:`wait_here`).  Jobs for a later, larger fit (``later``: what it runs on threads)
    come after the fit's own; that fit waits for them (:meth:`settle`).  The process runs at a lower
    priority (the fit's own threads first) and ends with its queue.  Always True with
    ``GPUSVM_COMPILE_AHEAD=0``, and for a failed
    compilation (the caller's thread compiles and raises).  A fork waits for this process's
    queue (the child must not inherit the compiler lock held)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list = []                  # compiled by a thread of this process
        self._remote: list = []                 # by the compiling process
        self._asked: set = set()
        self._failed: set = set()
        self._thread: threading.Thread | None = None
        self._running = False
        self._rthread: threading.Thread | None = None
        self._rrunning = False
        self._compiler = _Compiler()
        self._pending: dict = {}                # key -> dispatcher, the process's jobs
        self._done = threading.Condition(self._lock)
        #: compile in another process where a helper can be found by name
        self.processes = bool(sys.executable)

    def ready(self, dispatcher, args, early=False, later=False) -> bool:
        """Whether ``dispatcher(*args)`` runs compiled code now (class docstring); ``early``:
        asked before the fit's own compilation, queued only for the compiling process;
        ``later``: for another fit (a larger one), compiled after this fit's helpers."""
        if not compile_ahead_setting():
            return True
        try:
            sig = tuple(dispatcher.typeof_pyval(a) for a in args)
            key = (id(dispatcher), sig)
            if sig in dispatcher.overloads or key in self._failed or \
                    in_disk_cache(dispatcher, sig):
                return True
        except Exception:             # noqa: BLE001  another numba: compile where called
            return True
        named = _by_name(dispatcher) if self.processes else None
        with self._lock:
            if key not in self._asked and (named is not None or not early):
                self._asked.add(key)
                if named is not None:
                    job = (dispatcher, sig, key, named, later)
                    at = len(self._remote) if later else next(
                        (i for i, j in enumerate(self._remote) if j[4]), len(self._remote))
                    self._remote.insert(at, job)
                    self._pending[key] = dispatcher
                else:
                    self._queue.append((dispatcher, sig, key))
            if self._remote and not self._rrunning:
                self._rrunning = True
                self._rthread = threading.Thread(target=self._work_remote, daemon=True,
                                                 name="gpusvm-compile-process")
                self._rthread.start()
            self._start()
        return False

    def _start(self) -> None:
        """Start this process's compiling thread when there is work (the lock held)."""
        if self._queue and not self._running:
            self._running = True
            self._thread = threading.Thread(target=self._work, name="gpusvm-compile")
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                dispatcher, sig, key = self._queue.pop(0)
            try:
                dispatcher.compile(sig)
            except Exception:         # noqa: BLE001  raised again where the caller compiles
                self._failed.add(key)

    def _work_remote(self) -> None:
        while True:
            with self._lock:
                if not self._remote:
                    self._rrunning = False
                    self._compiler.close()
                    return
                dispatcher, sig, key, (module, name), _ = self._remote.pop(0)
            ok = self._compiler.compile(module, name, sig)
            try:
                cached = bool(ok) and in_disk_cache(dispatcher, sig)
            except Exception:         # noqa: BLE001
                cached = False
            with self._lock:
                if not cached:        # no process, or no cache to leave it in: here
                    self._queue.append((dispatcher, sig, key))
                    self._start()
                self._pending.pop(key, None)
                self._done.notify_all()

    def settle(self, dispatchers, seconds: float = 300.0) -> None:
        """Block while the compiling process has a job for one of ``dispatchers`` (a fit about
        to call them loads that job's code rather than compiling it a second time), for
        ``seconds`` at most (then the caller compiles)."""
        import time  # noqa: PLC0415

        ids = {id(d) for d in dispatchers}
        end = time.monotonic() + seconds
        with self._lock:
            while any(id(d) in ids for d in self._pending.values()):
                left = end - time.monotonic()
                if left <= 0:
                    return
                self._done.wait(left)

    def forget_process(self) -> None:
        """In a forked child: the parent's compiling process and its jobs are not this
        process's (the thread that talks to it was not copied); they are asked for anew."""
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._remote, self._pending, self._asked = [], {}, set()
        self._rrunning, self._rthread = False, None
        self._compiler = _Compiler()

    def wait_here(self) -> None:
        """Block until every compilation queued for this process's thread has ended (a
        compiling process's jobs go on: they leave this process's state alone)."""
        while True:
            with self._lock:
                thread = self._thread if self._running else None
            if thread is None:
                return
            thread.join()

    def wait(self) -> None:
        """Block until every queued compilation has ended, the compiling process's too."""
        while True:
            with self._lock:
                rthread = self._rthread if self._rrunning else None
            if rthread is None:
                break
            rthread.join()
        self.wait_here()


AHEAD = CompileAhead()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=AHEAD.wait_here, after_in_child=AHEAD.forget_process)
