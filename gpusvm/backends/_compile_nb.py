"""Python's cyclic garbage collector paused while numba compiles gpusvm's functions.

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
"""

from __future__ import annotations

import gc

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
