"""How gpusvm's numba functions are compiled: the collector paused, helpers ahead.

Python's collector is paused during the outermost compilation of a function of ``gpusvm``
(numba's compiler makes so many objects that the collections, each walking the process's
objects, took a fifth of a cold fit's compile time: BENCHMARKS.md, "One-off compilation").
:data:`AHEAD` compiles a fit's helpers in a background thread (docs/architecture.md).
"""

from __future__ import annotations

import gc
import os
import threading

from numba.core import event


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


def compile_ahead_setting() -> bool:
    """``GPUSVM_COMPILE_AHEAD``: ``1`` (default, helpers in a background thread) or ``0``."""
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


class CompileAhead:
    """A fit's helpers (each with a NumPy equivalent, the same numbers bit for bit) compiled
    in one background thread while the fit goes on: :meth:`ready` is True when the call's
    code is compiled (in this process or on disk), else False with the compilation queued,
    run in order by a thread that ends with the queue (serialised with the fitting thread's:
    ask once the loop is compiled).  Always True with ``GPUSVM_COMPILE_AHEAD=0``, and for a
    failed compilation (the caller's thread compiles and raises).  A fork waits for the queue
    (the child must not inherit the compiler lock held)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list = []
        self._asked: set = set()
        self._failed: set = set()
        self._thread: threading.Thread | None = None
        self._running = False

    def ready(self, dispatcher, args) -> bool:
        """Whether ``dispatcher(*args)`` runs compiled code now (class docstring)."""
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
        with self._lock:
            if key not in self._asked:
                self._asked.add(key)
                self._queue.append((dispatcher, sig, key))
            if self._queue and not self._running:
                self._running = True
                self._thread = threading.Thread(target=self._work, name="gpusvm-compile")
                self._thread.start()
        return False

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

    def wait(self) -> None:
        """Block until every queued compilation has ended."""
        while True:
            with self._lock:
                thread = self._thread if self._running else None
            if thread is None:
                return
            thread.join()


AHEAD = CompileAhead()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=AHEAD.wait)
