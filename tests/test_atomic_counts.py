"""The emulator's atomic counts (gpusvm_emulator.count_atomics) and the kernels' use of RED.

The counts are checked against numbers computed independently from each launch's inputs; the
kernels are checked to discard no atomicAdd's result (such an addition is gpusvm::red_add, which
the emulator counts as the non-returning reduction).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

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
