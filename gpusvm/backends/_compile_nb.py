"""How gpusvm's numba functions are compiled: the collector paused, helpers ahead.

**The collector paused.**  Python's cyclic garbage collector is paused while numba
compiles gpusvm's functions.
numba's compiler builds and drops hundreds of thousands of small objects (IR nodes,
types, LLVM wrappers); each generational collection they trigger also walks every
object the process already holds (SciPy, scikit-learn, the user's data structures), so
in a fitting process a cold first fit spent about a fifth of its compile time in the
collector (BENCHMARKS.md, "One-off compilation").  The listener below disables the
collector from the start of the outermost compilation of a function defined in
``gpusvm`` to its end (nested compilations of numba's own helpers included) and then
restores it as it was: nothing is collected late, only later (the compiler's garbage,
some tens of MB, goes at the next collection).  Other libraries' compilations are left
alone, and calls that compile nothing never reach it.

**Helpers compiled ahead.**  :data:`AHEAD` (:class:`CompileAhead`) compiles the
functions a fit calls after its loop (the certificates' products, the epochs'
orders) in a background thread, while the fit runs on their NumPy equivalents
(the same numbers bit for bit), so that a cold first fit waits for its loop only.
"""

from __future__ import annotations

import gc
import os
import threading

from numba.core import event


class _PauseCollector(event.Listener):
    """``numba:compile`` listener: the collector off during gpusvm's outermost compilations.

    numba's compiler lock serialises compilations, so one depth counter serves all threads.
    """

    def __init__(self):
        self.depth = 0
        self.was_enabled = False

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


#: registered once, when the first compiled module of gpusvm is imported
LISTENER = _PauseCollector()
event.register("numba:compile", LISTENER)


# ---------------------------------------------------------------- compiled ahead
def compile_ahead_setting() -> bool:
    """``GPUSVM_COMPILE_AHEAD``: ``1`` (default) compiles a fit's helpers in a background
    thread, ``0`` compiles each where it is first called."""
    value = os.environ.get("GPUSVM_COMPILE_AHEAD", "").strip().lower()
    if value in ("", "1"):
        return True
    if value == "0":
        return False
    raise ValueError(f"GPUSVM_COMPILE_AHEAD={value!r}: set 1 (compile a fit's helpers in a "
                     "background thread) or 0 (compile each where it is first called)")


def _in_disk_cache(dispatcher, sig) -> bool:
    """Whether numba's on-disk cache holds ``dispatcher``'s machine code for ``sig``."""
    cache = dispatcher._cache
    if not hasattr(cache, "_cache_file"):            # numba's NullCache: cache=False
        return False
    return cache._index_key(sig, dispatcher.targetctx.codegen()) in \
        cache._cache_file._load_index()


class CompileAhead:
    """A fit's helpers compiled in one background thread while the fit goes on.

    A cold first fit must wait for its segment loop, but not for the functions it
    calls later (the certificates' products, the epochs' orders): each of those
    has a NumPy equivalent that gives the same numbers bit for bit.  A backend
    asks :meth:`ready` before each call: True when the machine code for the
    call's argument types is compiled in this process or in numba's on-disk
    cache (then the compiled function runs), else False, and the compilation is
    queued for a background thread (then the NumPy equivalent runs this time).
    A later call finds it compiled.  The thread starts when a compilation is
    queued, runs the queue in order and ends when it is empty; numba's compiler
    lock serialises it with any compilation of the fitting thread, so a backend
    asks for its helpers only once its loop is compiled.

    ``GPUSVM_COMPILE_AHEAD=0`` turns it off (:meth:`ready` is always True: each
    helper compiles where it is first called).  A compilation that fails in the
    thread is not queued again: the next call compiles in the caller's thread,
    where the error is raised as usual.  Before the process forks, the queue is
    finished (a child must not inherit numba's compiler lock held).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list = []
        self._asked: set = set()
        self._failed: set = set()
        self._thread: threading.Thread | None = None
        self._running = False

    def ready(self, dispatcher, args) -> bool:
        """Whether ``dispatcher(*args)`` runs compiled code now (module docstring)."""
        if not compile_ahead_setting():
            return True
        try:
            sig = tuple(dispatcher.typeof_pyval(a) for a in args)
            key = (id(dispatcher), sig)
            if sig in dispatcher.overloads or key in self._failed or \
                    _in_disk_cache(dispatcher, sig):
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


#: the process's background compilations
AHEAD = CompileAhead()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=AHEAD.wait)
