"""The emulator's atomic counts (gpusvm_emulator.count_atomics) and the kernels' use of RED.

The counts are checked against numbers computed independently from each launch's inputs; the
kernels are checked to discard no atomicAdd's result (such an addition is gpusvm::red_add, which
the emulator counts as the non-returning reduction).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import zipf_rows
from gpusvm_emulator import EmulatedModule, count_atomics

REPO = Path(__file__).resolve().parents[1]
KDIR = Path(__file__).resolve().parent / "emulator_kernels"

RED_CODE = r"""
extern "C" __global__ void block_total(double* __restrict__ out) {
    __shared__ double s;
    if (threadIdx.x == 0) s = 0.0;
    __syncthreads();
    atomicAdd(&s, 1.0);                       // shared, returning
    __syncthreads();
    if (threadIdx.x == 0) gpusvm_emu_red_add(out, s);   // global, RED, one per block
}
"""


def test_counts_of_a_scatter_match_its_indices():
    mod = EmulatedModule(path=KDIR / "atomics.cu")
    rng = np.random.default_rng(0)
    n, slots, block = 3000, 37, 256
    idx = rng.integers(0, slots, n).astype(np.int32)
    c = rng.standard_normal(n)
    v = np.zeros(slots)
    dsq = np.zeros(1)
    with count_atomics() as rec:
        mod.get_function("scatter_sq_f64")(-(-n // block), block, (idx, c, v, dsq, np.int32(n)))
    assert len(rec) == 1
    r = rec[0]
    assert (r["global"], r["returning"], r["red"], r["shared"]) == (2 * n, 2 * n, 0, 0)
    assert r["max_per_address"] == n                       # dsq: one per update
    assert r["max_per_block"] == block                     # dsq, by each full block
    assert r["grid"] == -(-n // block)


def test_counts_tell_red_from_returning_and_shared_from_global():
    mod = EmulatedModule(code=RED_CODE)
    out = np.zeros(1)
    with count_atomics() as rec:
        mod.get_function("block_total")(5, 64, (out,))
    assert out[0] == 5 * 64
    r = rec[0]
    assert (r["global"], r["returning"], r["red"], r["shared"]) == (5, 0, 5, 5 * 64)
    assert (r["max_per_block"], r["max_per_address"]) == (1, 5)


def test_counting_stops_with_its_block():
    mod = EmulatedModule(code=RED_CODE)
    out = np.zeros(1)
    with count_atomics() as rec:
        pass
    mod.get_function("block_total")(2, 32, (out,))
    assert rec == [] and out[0] == 64


def test_no_kernel_discards_an_atomic_add_result():
    """An atomicAdd as a statement of its own discards the old value: it must be red_add."""
    found = []
    for path in sorted((REPO / "kernels").glob("*.cu*")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if path.name == "common.cuh" and "compiled to RED" in line:
                continue                                   # red_add's own CUDA form
            if re.match(r"\s*(gpusvm::)?atomicAdd\(", line):
                found.append(f"{path.name}:{no}: {line.strip()}")
    assert found == []


def _zipf_outputs(M, n=40, d=20, seed=0):
    """Rows whose columns follow a Zipf law, M random one-vs-rest label columns."""
    return zipf_rows(n, d, M, seed, max_row=8)


@pytest.mark.parametrize("M", [3, 300, 1100])       # < BLOCK, >= BLOCK, > the grid's threads
@pytest.mark.parametrize("solver", ["pegasos", "sdca"])
def test_output_sums_one_atomic_per_block_and_output(solver, M):
    """The M-output kernels' sums (acc) get at most one atomic per block and address when the
    grid has at least M threads, and agree with the NumPy reference in every case."""
    from gpusvm.backends import make_backend  # noqa: PLC0415
    from gpusvm.solvers.pegasos import pegasos  # noqa: PLC0415
    from gpusvm.solvers.sdca import sdca  # noqa: PLC0415
    X, Y = _zipf_outputs(M)
    if solver == "pegasos":
        run, kw = pegasos, dict(lam=1e-2, k=8, max_iter=4, seed=2, eval_every=2)
    else:
        run, kw = sdca, dict(lam=1e-2, b=8, max_iter=4, seed=2, tol=0.0, eval_every=2,
                             variant="aggressive")
    ref = run(make_backend("numpy", X, Y), **kw)
    backend = make_backend("emulated", X, Y)
    with count_atomics() as rec:
        emu = run(backend, **kw)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-9, atol=1e-12)
    acc = backend._acc.ctypes.data
    threads = backend.runtime.max_blocks * 256
    on_acc = [r["by_array"][acc] for r in rec if acc in r["by_array"]
              and r["kernel"].split("<")[0] != "gpusvm_optimal_bias"]
    assert on_acc
    if M <= threads:
        assert max(per_block for _, per_block in on_acc) == 1
    else:
        assert max(per_block for _, per_block in on_acc) > 1     # the fallback: one per add


def test_hot_columns_off_their_home_slot_get_one_atomic_per_tile():
    """M = 1: columns 0 and 2048 share their home slot in the tile's column table and are in every
    row, with more distinct columns per tile than the table holds: each still gets one global
    atomic per tile (block) on V, as does every column."""
    import scipy.sparse as sp  # noqa: PLC0415
    from gpusvm.backends import make_backend  # noqa: PLC0415
    from gpusvm.solvers.pegasos import pegasos  # noqa: PLC0415
    n, tail = 1024, 12                               # 4 blocks x one tile of 256 rows
    rng = np.random.default_rng(0)
    cols = [np.r_[0, 2048, 4096 + tail * i + np.arange(tail)] for i in range(n)]
    X = sp.csr_matrix((rng.uniform(0.1, 1.0, n * (tail + 2)), np.concatenate(cols),
                       np.arange(n + 1) * (tail + 2)), shape=(n, 4096 + tail * n))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    kw = dict(lam=1e-2, k=n, max_iter=1, seed=1)
    backend = make_backend("emulated", X, y)
    with count_atomics() as rec:
        emu = pegasos(backend, **kw)
    ref = pegasos(make_backend("numpy", X, y), **kw)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-9, atol=1e-12)
    V = backend.V.ctypes.data
    steps = [r["by_array"][V] for r in rec if r["kernel"].startswith("gpusvm_pegasos_step")]
    assert len(steps) == 1 and steps[0][1] == 1
