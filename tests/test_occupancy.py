"""Grids sized per kernel: the occupancy rule and the device backend's use of it.

``resident_blocks`` is checked on the cases CUDA's occupancy calculator gives for 256-thread
blocks on sm_90 (64 registers: 4 blocks, 50 %; 32: 8 blocks, 100 %; shared memory and the block
limit bounding it); the backend is checked to give each kernel of an iteration the grid its own
``blocks_for`` allows and still agree with the NumPy reference (kernels whose grids differ
within one iteration share nothing through the grid).
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import zipf_rows
from gpusvm.backends import make_backend
from gpusvm.backends.device import runtime as rt
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca


@pytest.mark.parametrize("regs,shared,blocks", [
    (64, 0, 4),          # the MIN_BLOCKS launch bound's worst case: half the SM's threads
    (32, 0, 8),          # all 2048 threads
    (16, 0, 8),          # threads bound it
    (40, 0, 6),          # 40 x 32 = 1280 registers a warp (5 units), 65536 / (1280 x 8)
    (255, 0, 1),         # 255 -> 256 a thread: one block
    (32, 30_000, 7),     # 233472 / (30000 + 1024) (the balanced scatter's tables)
    (32, 120_000, 1),
])
def test_resident_blocks_follow_cuda_occupancy(regs, shared, blocks):
    assert rt.resident_blocks(regs, shared, 256) == blocks


def test_resident_blocks_take_the_device_limits():
    assert rt.resident_blocks(32, 0, 256, {"MaxThreadsPerMultiProcessor": 1536}) == 6
    assert rt.resident_blocks(32, 0, 64, {"MaxBlocksPerMultiprocessor": 16}) == 16


def zipf_small(seed=0, n=120, d=60, M=1):
    """Rows whose columns follow a Zipf law (column 0 in nearly every row)."""
    X, Y = zipf_rows(n, d, M, seed, max_row=12)
    return X, (Y[:, 0] if M == 1 else Y)


def per_kernel_blocks(monkeypatch):
    """Make the emulated runtime give each named kernel its own grid cap; return the grids seen."""
    caps = {"gpusvm_margins": 3, "gpusvm_pegasos_step": 2, "gpusvm_sdca_margins": 3,
            "gpusvm_sdca_rho": 1, "gpusvm_sdca_apply": 2, "gpusvm_reset_scale": 1,
            "gpusvm_row_sq_norms": 1}
    seen = {}

    def blocks_for(self, fn):
        if fn is None:
            return self.max_blocks
        base = fn.name.split("<")[0]
        seen[base] = caps[base]
        return caps[base]
    monkeypatch.setattr(rt.EmulatedRuntime, "blocks_for", blocks_for)
    return seen


@pytest.mark.parametrize("M", [1, 3])
def test_per_kernel_grids_keep_pegasos_equal_to_numpy(monkeypatch, M):
    X, Y = zipf_small(M=M)
    seen = per_kernel_blocks(monkeypatch)
    kw = dict(lam=1e-2, k=40, max_iter=6, seed=2, eval_every=3)
    ref = pegasos(make_backend("numpy", X, Y), **kw)
    emu = pegasos(make_backend("emulated", X, Y), **kw)
    assert {"gpusvm_margins", "gpusvm_pegasos_step"} <= set(seen)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("M", [1, 3])
def test_per_kernel_grids_keep_sdca_equal_to_numpy(monkeypatch, M):
    X, Y = zipf_small(M=M)
    seen = per_kernel_blocks(monkeypatch)
    kw = dict(lam=1e-2, b=40, max_iter=6, seed=2, tol=0.0, eval_every=3, variant="aggressive")
    ref = sdca(make_backend("numpy", X, Y), **kw)
    emu = sdca(make_backend("emulated", X, Y), **kw)
    assert {"gpusvm_sdca_margins", "gpusvm_sdca_rho", "gpusvm_sdca_apply"} <= set(seen)
    np.testing.assert_allclose(emu.extra["alpha"], ref.extra["alpha"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(emu.w, ref.w, rtol=1e-10, atol=1e-13)
