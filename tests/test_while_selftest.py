"""The CUDA graph WHILE self-test of the CuPy runtime is capped: a graph that never finishes
makes it fail after ``GPUSVM_WHILE_SELFTEST_SECONDS`` (segments then replay chunked graphs),
on a stream of its own, instead of blocking the process without end.  Against stand-ins for
CuPy and cuda-python (no GPU here)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from gpusvm.backends.device import runtime


class _Stream:
    def __init__(self, non_blocking=True):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event:
    """An event that never completes: the graph recorded before it runs for ever."""

    def __init__(self, **kw):
        self.done = False

    def record(self, stream):
        self.stream = stream


def _fake_runtime():
    xp = types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(driverGetVersion=lambda: 12080)),
        zeros=lambda n, dtype: np.zeros(n, dtype), add=lambda a, b, out: np.add(a, b, out=out))
    rt = types.SimpleNamespace(device_id=99, xp=xp, stream=_Stream(),
                               _streams=types.SimpleNamespace(Stream=_Stream, Event=_Event))
    return rt


def test_a_while_graph_that_never_finishes_fails_the_self_test_in_time(monkeypatch):
    class Loop:
        def __init__(self, rt, record, chunk):
            self.stream = rt.stream

        def run(self, chunks):
            pass

    monkeypatch.setattr(runtime, "_CupyWhileGraph", Loop)
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.ModuleType("cuda.bindings"))
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", types.ModuleType("cuda.bindings.runtime"))
    monkeypatch.setattr(runtime, "_WHILE_CHECKED", {})
    monkeypatch.setattr(runtime, "_HUNG", [])
    monkeypatch.setenv(runtime.WHILE_SELFTEST_ENV, "0.05")
    rt = _fake_runtime()
    own = rt.stream
    with pytest.warns(RuntimeWarning, match=r"WHILE nodes are not available \(RuntimeError: the "
                                            r"self-test's graph did not finish in 0.05 s"):
        assert runtime.CupyRuntime._while_available(rt, warn=True) is False
    assert rt.stream is own                       # the runtime's stream was never the test's
    (loop, stream), = runtime._HUNG
    assert loop.stream is stream and stream is not own
    assert runtime.CupyRuntime._while_available(rt, warn=False) is False   # once per device


def test_wait_polls_until_true_or_the_time_is_up():
    calls = []
    assert runtime._wait(lambda: len(calls) > 2 or calls.append(1), 5.0, sleep=lambda s: None)
    assert runtime._wait(lambda: False, 0.01) is False


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_self_test_time_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv(runtime.WHILE_SELFTEST_ENV, value)
    with pytest.raises(ValueError, match=rf"^{runtime.WHILE_SELFTEST_ENV}='{value}': set the "
                                         r"seconds \(> 0\)"):
        runtime._selftest_seconds()
