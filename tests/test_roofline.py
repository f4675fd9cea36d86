"""The performance model's arithmetic on a matrix small enough to count by hand.

The model describes the segment kernels the device backend runs (balanced by nonzeros, the
batch drawn by the gather, a tile's updates summed per column before one atomic).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import roofline  # noqa: E402
from roofline import Device, KernelCost, batch_stats, iteration_costs, summarise  # noqa: E402

#: round numbers: 1 GB/s of HBM, 2 GB/s of L2, 1 us per graph node
DEV = Device(name="toy", hbm_bandwidth=1e9, l2_bytes=1 << 20, l2_bandwidth=2e9, sms=1,
             graph_node_s=1e-6, atomic_same_address_s=1e-9,
             lane_step_s=1e-7, upload_bandwidth=1e9)


@pytest.fixture()
def tiny():
    """4 rows of lengths 1, 2, 3, 2 (8 nonzeros) over 3 columns; column 0 is in rows 0, 1, 2."""
    dense = np.array([[1, 0, 0],
                      [1, 1, 0],
                      [1, 1, 1],
                      [0, 1, 1]], dtype=np.float32)
    return sp.csr_matrix(dense)


def test_batch_stats_of_the_whole_matrix(tiny):
    s = batch_stats(tiny, k=4, batches=3)          # without replacement, k = n: every row
    assert (s.k, s.nnz, s.max_row, s.batches) == (4, 8.0, 3.0, 3)
    assert s.hot == 3.0                            # columns 0 and 1 are in 3 rows each


def test_kernel_seconds_take_the_largest_bound():
    c = KernelCost("k", hbm_bytes=2000.0, l2_bytes=1000.0, launches=2, hot_atomics=100,
                   chain_s=1e-6)
    # bounds: 2 us HBM, 0.5 us L2, 1 us chain, 0.1 us atomics; plus 2 graph nodes
    assert c.seconds(DEV) == pytest.approx(2e-6 + 2e-6)
    assert c.roofline(DEV) == pytest.approx(2e-6)


def test_pegasos_iteration_bytes_by_hand(tiny):
    s = batch_stats(tiny, k=4, batches=1)
    costs = {c.kernel: c for c in iteration_costs(tiny, s, DEV, solver="pegasos", active=1.0)}
    assert list(costs) == ["margins", "pegasos_step"]          # the gather draws the batch
    # per row: rows 4 + indptr 16 + y 4 + m 8; rows[j] drawn 4; per nonzero: index 4 + value 4;
    # v (12 B) in L2
    assert costs["margins"].hbm_bytes == 4 * (4 + 16 + 4) + 4 * 4 + 8 * 8 + 4 * 8
    # one sector per request: a row's (<= 32) nonzeros are read at once, its columns in one sector
    assert costs["margins"].l2_bytes == 4 * 32
    # step: rows + m, every row active (indptr, y), its nonzeros, read-modify-write of v in L2
    # (tiles of one row: 4 rows over 4 blocks, no two updates of a column summed)
    assert costs["pegasos_step"].hbm_bytes == 4 * (4 + 8) + 4 * (4 + 16 + 4) + 8 * 8
    assert costs["pegasos_step"].l2_bytes == 2 * 8 * 32
    assert costs["pegasos_step"].hot_atomics == 3                   # column 0 or 1: 3 rows
    assert all(c.chain_s == 0 for c in costs.values())
    tot = summarise(list(costs.values()), DEV)
    assert tot["launches"] == 2
    assert tot["hbm_bytes"] == 208 + 208
    assert tot["roofline_seconds"] == pytest.approx(416 / 1e9)
    assert tot["seconds"] == pytest.approx(sum(c.seconds(DEV) for c in costs.values()))
    assert tot["fraction_of_roofline"] == pytest.approx(tot["roofline_seconds"] / tot["seconds"])


def test_pegasos_step_caps_the_hot_column_at_one_atomic_per_block():
    X = sp.csr_matrix(np.ones((10, 2), dtype=np.float32))      # both columns in all 10 rows
    s = batch_stats(X, k=10, batches=1)
    assert s.hot == 10.0
    step = {c.kernel: c for c in iteration_costs(X, s, DEV, active=1.0)}
    assert step["pegasos_step"].hot_atomics == 4 * DEV.sms       # one per block of the grid


def test_sdca_iteration_folds_the_steps_and_the_zeroing(tiny):
    """Aggressive SDCA: the gather, rho's scatter, the step computing the adapted steps, and
    the settle zeroing rho's scratch; no sampler and no kernel of the steps alone."""
    s = batch_stats(tiny, k=4, batches=1)
    costs = iteration_costs(tiny, s, DEV, solver="sdca-aggressive", active=1.0)
    assert [c.kernel for c in costs] == ["sdca_margins", "sdca_rho", "sdca_apply (with the steps)",
                                         "sdca_apply (settle, zeroing)"]
    assert all(c.chain_s == 0 for c in costs)
    assert max(c.hot_atomics for c in costs) == 3        # 3 rows < 4 blocks: no cap reached
    row = 4 + 16 + 4                                      # rows, indptr, y
    # gather: rows, rows[j] drawn, the CSR nonzeros, m, m's pair and the 16 B of the step's inputs
    assert costs[0].hbm_bytes == 4 * row + 4 * 4 + 8 * 8 + 4 * (8 + 8 + 16)
    assert costs[1].hbm_bytes == 4 * (4 + 8) + 4 * row + 8 * 8
    # the step reads m, alpha and row_sq (3 x 8 B a row) on top of the plain step
    assert costs[2].hbm_bytes == 4 * (4 + 8) + 4 * row + 4 * 8 + 8 * 8 + 4 * 8 * 3
    # the settle: rows and alpha, delta, the zeroing (16 B a row, an index a nonzero)
    assert costs[3].hbm_bytes == 4 * (4 + 8) + 4 * 8 + 4 * 8 + 4 * 16 + 8 * 4
    safe = iteration_costs(tiny, s, DEV, solver="sdca-safe", active=1.0)
    assert [c.kernel for c in safe] == ["sdca_margins", "sdca_apply"]


def test_time_to_eps_adds_setup_iterations_and_evaluations(tiny):
    out = roofline.time_to_eps(tiny, 5e-6, iterations=100, evaluations=2, dev=DEV)
    upload = 8 * (4 + 4) + 5 * 8 + 4 * (4 + 8)                     # CSR, indptr, y, row norms
    assert out["setup_s"] == pytest.approx(upload / 1e9 + 2e-6)
    assert out["loop_s"] == pytest.approx(5e-4)
    assert out["total_s"] == pytest.approx(out["setup_s"] + out["loop_s"] + out["evaluation_s"])
    assert out["evaluation_s"] == pytest.approx(2 * roofline.evaluation_seconds(tiny, DEV))


def test_cli_prints_the_model(tmp_path, capsys, tiny):
    path = tmp_path / "tiny.svm"
    from sklearn.datasets import dump_svmlight_file
    dump_svmlight_file(tiny, np.array([1, -1, 1, -1]), str(path))
    out_json = tmp_path / "model.json"
    assert roofline.main([str(path), "--batch-sizes", "2,4", "--solvers", "pegasos",
                          "--batches", "2", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "# modelled on NVIDIA H100" in text
    assert "## pegasos  k=4  (batch: 8 nnz" in text and "roofline" in text
    rows = json.loads(out_json.read_text())["rows"]
    assert [(r["solver"], r["k"]) for r in rows] == [("pegasos", 2), ("pegasos", 4)]


def test_sdca_scatters_cap_the_hot_column_at_one_atomic_per_block():
    """sdca_rho and sdca_apply sum a tile's updates per column, as Pegasos' step does."""
    X = sp.csr_matrix(np.ones((10, 2), dtype=np.float32))
    s = batch_stats(X, k=10, batches=1)
    costs = {c.kernel: c for c in iteration_costs(X, s, DEV, solver="sdca-aggressive",
                                                  active=1.0)}
    assert costs["sdca_rho"].hot_atomics == costs["sdca_apply (with the steps)"].hot_atomics \
        == 4 * DEV.sms


@pytest.mark.parametrize("solver", ["pegasos", "sdca-aggressive"])
def test_measured_runs_count_the_evaluations_the_solver_made(solver):
    """--measure-iterations runs the solver on its own cadence and keeps its history's count."""
    from sklearn.datasets import make_classification
    Xd, yd = make_classification(n_samples=400, n_features=20, random_state=0)
    X = sp.csr_matrix((Xd / np.linalg.norm(Xd, axis=1, keepdims=True)).astype(np.float32))
    y = np.where(yd == 1, 1.0, -1.0).astype(np.float32)
    r = roofline.measure_iterations(X, y, 1e-2, 16, solver, p_star=0.0, eps=10.0, max_epochs=64)
    assert r["cadence"] == "solver" and r["reached"]
    assert r["evaluations"] >= 1
    epochs = r["iterations"] / 25                                   # 400 rows / k = 16
    if solver == "pegasos":            # the doubling average evaluates at 2^j epochs only
        assert r["evaluations"] == 1 and r["iterations"] == 25
    else:                              # the adapted cadence: fewer certificates than epochs
        assert r["evaluations"] <= max(1.0, epochs)
    far = roofline.measure_iterations(X, y, 1e-2, 16, solver, p_star=-1.0, eps=1e-9,
                                      max_epochs=8)
    assert not far["reached"] and far["iterations"] is None
    assert far["evaluations"] < 8 * 25                              # never one per iteration


def test_printed_time_to_eps_says_whose_cadence(tmp_path, capsys, tiny):
    path = tmp_path / "tiny.svm"
    from sklearn.datasets import dump_svmlight_file
    dump_svmlight_file(tiny, np.array([1, -1, 1, -1]), str(path))
    its = tmp_path / "its.json"
    its.write_text(json.dumps({"pegasos@2": {"iterations": 10, "evaluations": 3,
                                             "cadence": "solver"},
                               "pegasos@4": {"iterations": 10, "evaluations": 5}}))
    assert roofline.main([str(path), "--batch-sizes", "2,4", "--solvers", "pegasos",
                          "--batches", "2", "--iterations", str(its)]) == 0
    text = capsys.readouterr().out
    assert "3 evaluations (as the measured run made them, on the solver's own cadence)" in text
    assert "5 evaluations (one per epoch, as recorded)" in text


def test_aggregated_counts_one_atomic_per_distinct_column_of_a_tile():
    """Tiles of 2 rows (10 rows over 5 blocks) sharing both columns: half the nonzeros become
    atomics; a tile with more distinct columns than half the shared table gets no credit."""
    X = sp.csr_matrix(np.ones((10, 2), dtype=np.float32))
    s = batch_stats(X, k=10, batches=1, active=1.0, blocks=5)
    assert s.aggregated == 0.5
    step = {c.kernel: c for c in iteration_costs(X, s, DEV, active=1.0)}["pegasos_step"]
    assert step.l2_bytes == 2 * (0.5 * 20) * roofline.SECTOR     # read-modify-write per atomic
    wide = sp.csr_matrix(np.ones((2, roofline.TABLE // 2 + 1), dtype=np.float32))
    assert batch_stats(wide, k=2, batches=1, active=1.0, blocks=1).aggregated == 1.0
    narrow = sp.csr_matrix(np.ones((2, roofline.TABLE // 2), dtype=np.float32))
    assert batch_stats(narrow, k=2, batches=1, active=1.0, blocks=1).aggregated == 0.5


def test_coalesced_counts_the_sectors_of_each_request():
    """A request reads 32 consecutive nonzeros of a row (a warp on a chunk); columns
    that share a 32 B sector (8 float32 or 4 float64 values) cost one sector."""
    X = sp.csr_matrix((np.ones(64, np.float32), np.arange(64), [0, 64]), shape=(1, 64))
    s = batch_stats(X, k=1, batches=1)
    assert s.coalesced[(32, 4)] == 8 / 64          # 2 chunks of 32 columns, 4 sectors each
    assert s.coalesced[(32, 8)] == 16 / 64
    spread = sp.csr_matrix((np.ones(3, np.float32), [0, 8, 16], [0, 3]), shape=(1, 24))
    assert batch_stats(spread, k=1, batches=1).coalesced[(32, 4)] == 1.0
    costs = {c.kernel: c for c in iteration_costs(X, s, DEV, active=1.0)}
    assert costs["margins"].l2_bytes == 8 * 32


def test_break_even_node_cost_solves_the_affine_time():
    # 3 us of body and 2 nodes: within 8 us for nodes of at most 2.5 us; never within 2 us
    def seconds_at(c):
        return 3e-6 + 2 * c
    assert roofline.break_even_node_cost(seconds_at, 8e-6) == pytest.approx(2.5e-6)
    assert roofline.break_even_node_cost(seconds_at, 2e-6) is None
    assert roofline.break_even_node_cost(lambda c: 1e-6, 2e-6) == float("inf")


def test_model_rows_give_the_node_cost_at_which_the_targets_hold(tmp_path, tiny):
    """At the node cost the row gives, the iteration is exactly at half its roofline and
    exactly at 1/20 of LinearSVC's time to eps."""
    from dataclasses import replace
    its = {"pegasos@4": {"iterations": 10, "evaluations": 3, "cadence": "solver"},
           "liblinear": {"seconds": 0.02}}
    rows = roofline.model_table(tiny, [4], DEV, ("pegasos",), iterations=its, batches=2)
    [built] = rows
    c = built["node_cost_for_half_roofline"]
    stats = batch_stats(tiny, 4, batches=2, blocks=DEV.sms * 4)
    dev = replace(DEV, graph_node_s=c)
    tot = summarise(iteration_costs(tiny, stats, dev, solver="pegasos"), dev)
    assert tot["fraction_of_roofline"] == pytest.approx(0.5)
    c20 = built["time_to_eps"]["node_cost_for_twentieth"]
    dev20 = replace(DEV, graph_node_s=c20)
    per_it = summarise(iteration_costs(tiny, stats, dev20, solver="pegasos"), dev20)["seconds"]
    total = roofline.time_to_eps(tiny, per_it, 10, 3, dev20)["total_s"]
    assert total == pytest.approx(0.02 / 20)
