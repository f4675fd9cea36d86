"""Ctrl-C stops a threaded C search promptly: the lanes stop at their next segment."""

from __future__ import annotations

import _thread
import time

import pytest
from sklearn.datasets import make_classification

from gpusvm import LinearSVCCV, SDCASVCCV, _threads
from gpusvm.estimators import cv as cv_module


@pytest.mark.parametrize("make", [
    lambda: LinearSVCCV(Cs=12, cv=4, n_jobs=2, dual=False, tol=1e-8, random_state=0),
    lambda: SDCASVCCV(Cs=12, cv=4, n_jobs=2, solver="sdca", tol=1e-8, random_state=0,
                      backend="numpy"),
], ids=["newton", "sdca"])
def test_keyboard_interrupt_stops_the_lanes(monkeypatch, make):
    """The main thread is interrupted when the first model is recorded, every level made to
    take 0.3 s: the search raises KeyboardInterrupt, and the lanes record at most a level or
    two more each (they ran every level of every lane before: the interrupt took effect
    only when all had ended)."""
    monkeypatch.setattr(_threads, "usable_cores", lambda: 4)     # two lanes' threads anywhere
    X, y = make_classification(n_samples=400, n_features=20, random_state=0)
    calls = []
    real = cv_module._SearchResult.record

    def record(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            _thread.interrupt_main()
        time.sleep(0.3)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(cv_module._SearchResult, "record", record)
    with pytest.raises(KeyboardInterrupt):
        make().fit(X, y)
    every = 2 * 12                                 # two groups of lanes, 12 levels each
    assert 1 <= len(calls) <= 6 < every
