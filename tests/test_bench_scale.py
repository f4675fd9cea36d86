"""benchmarks/bench_scale.py on a tiny generated set: the cells' records, the objective of
every system against the best, the skip by budget, and the resumed run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_scale  # noqa: E402


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale")
    argv = ["--out", str(out), "--nnz", "2e4", "6e4", "--losses", "squared_hinge",
            "--peer-python", str(out / "no-such-python"), "--threads", "1", "--budget", "0"]
    bench_scale.main(argv)
    return out, argv


def _cells(out):
    return {p.name: json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))}


def test_every_cell_is_recorded(ran):
    out, _ = ran
    cells = _cells(out)
    systems = bench_scale.gpusvm_systems("cpu") + bench_scale.peer_systems("squared_hinge")
    assert len(cells) == 2 * len(systems)
    small = {c["system"]: c for c in cells.values() if c["nnz_target"] == 2e4}
    best = min(c["objective"] for c in small.values() if c.get("objective") is not None)
    for name in bench_scale.gpusvm_systems("cpu") + ["sklearn-LinearSVC"]:
        c = small[name]
        assert c["objective"] <= best * 1.01                    # all near the one optimum
        assert 0.5 < c["test_accuracy"] <= 1.0
    assert small["gpusvm-SDCASVC-cpu"]["passes"] > 0
    assert small["gpusvm-SDCASVC-cpu"]["fraction_of_traffic_limit"] > 0
    assert "FileNotFoundError" in small["liblinear-mc-s1"]["error"]   # no such interpreter
    assert not list(out.glob("set-*"))                        # the peers' copy is removed


def test_objective_is_the_linearsvc_primal(ran):
    """``objective`` against sklearn's LinearSVC primal written out by hand on a small set."""
    X, y, *_ = bench_scale.make_set(5e3, 0.1)
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal(X.shape[1]), 0.3
    dense = X.toarray().astype(np.float64)
    hand = 0.5 * (w @ w + b * b) + sum(max(0.0, 1 - y[i] * (dense[i] @ w + b)) ** 2
                                       for i in range(X.shape[0]))
    assert bench_scale.objective(X.astype(np.float64), y, w, b, 1.0, "squared_hinge") == \
        pytest.approx(hand, rel=1e-12)


def test_budget_skips_the_larger_size(ran):
    out, _ = ran
    big = [c for c in _cells(out).values() if c["nnz_target"] == 6e4]
    assert big and all(c.get("seconds") is None for c in big)
    assert all(c["skipped"].startswith("predicted") or "error" in c for c in big)


def test_rerun_resumes(ran, capsys):
    out, argv = ran
    before = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    bench_scale.main(argv)
    after = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    assert after == before                                     # nothing measured again
    assert "2e+04 squared_hinge: gpusvm-LinearSVC-cpu / sklearn LinearSVC time = " in \
        capsys.readouterr().out                                # the table, from the records


def test_systems_selects_and_orders_the_cells(tmp_path, capsys):
    """``--systems`` runs only the systems it names (the device suffix optional), in its order."""
    bench_scale.main(["--out", str(tmp_path), "--nnz", "2e4", "--losses", "squared_hinge",
                      "--peer-python", str(tmp_path / "no-such-python"), "--threads", "1",
                      "--systems", "liblinear-mc-s2", "gpusvm-SDCASVC"])
    assert sorted(c["system"] for c in _cells(tmp_path).values()) == \
        ["gpusvm-SDCASVC-cpu", "liblinear-mc-s2"]
    out = capsys.readouterr().out
    assert out.index("liblinear-mc-s2 squared_hinge:") < out.index("gpusvm-SDCASVC-cpu squared_hinge:")
