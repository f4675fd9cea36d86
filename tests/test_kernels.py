"""The kernel sources and loader, and the row-norm kernel on the CPU kernel emulator.

The segment kernels are tested one by one in tests/test_segment_kernels.py and
through the solvers in tests/test_device_*.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import _kernels
from gpusvm.backends import _state
from gpusvm.backends.device import DeviceBackend, choose_lanes
from gpusvm.backends.device.runtime import EmulatedRuntime

REPO = Path(__file__).resolve().parents[1]
DTYPES = (np.float32, np.float64)
N, D = 240, 1500


def random_csr(dtype, seed=0):
    """CSR with ~15% empty rows, short rows, and three rows of 1100-1400 nonzeros."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=N)
    lengths[rng.random(N) < 0.15] = 0
    lengths[[7, 100, N - 1]] = (1400, 1100, 1200)
    rows = []
    for length in lengths:
        rows.append(np.sort(rng.choice(D, size=length, replace=False)))
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate(rows).astype(np.int32)
    data = rng.normal(size=indices.size).astype(dtype)
    X = sp.csr_matrix((data, indices, indptr), shape=(N, D))
    y = np.where(rng.random(N) < 0.5, -1.0, 1.0).astype(dtype)
    return X, y


def emulated(X, y, lanes, blocks=3):
    return DeviceBackend(X, y, EmulatedRuntime(max_blocks=blocks), lanes=lanes)


# ------------------------------------------------------------------ shared definitions
def test_state_slots_agree_with_common_cuh():
    text = (REPO / "kernels" / "common.cuh").read_text()
    enum = text[text.index("enum Slot"):]
    enum = enum[:enum.index("};")]
    cuh = {name: int(val) for name, val in re.findall(r"\b(S_\w+|N_SLOTS)\s*=\s*(\d+)", enum)}
    py = dict(_state.SLOTS, N_SLOTS=_state.N_SLOTS)
    assert cuh == py


def test_lane_choice_follows_the_mean_row_length():
    assert [choose_lanes(m) for m in (1, 8, 14, 30, 64, 138, 415)] == [4, 4, 8, 16, 32, 32, 32]


def test_inlined_module_source_has_no_include_and_every_kernel():
    src = _kernels.module_source()
    assert "#include" not in src
    assert src.count("#define GPUSVM_COMMON_CUH") == 1
    for op in list(_kernels.SEGMENT_KERNELS) + ["gpusvm_row_sq_norms"]:
        assert f"void __launch_bounds__(gpusvm::BLOCK, gpusvm::MIN_BLOCKS) {op}(" in src
    assert _kernels.source_hash()[:16] in " ".join(_kernels.compile_options())


def test_every_kernel_file_opens_with_its_description():
    for name in _kernels.KERNEL_FILES:
        lines = (REPO / "kernels" / name).read_text().splitlines()
        head = lines[:next(i for i, line in enumerate(lines) if not line.startswith("//"))]
        text = "\n".join(head)
        assert head[0].startswith(f"// {name}:"), name
        for word in ("grid:", "in", "traffic:", "determinism:"):
            assert word in text, (name, word)


@pytest.mark.parametrize("lanes", [4, 32])
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_sq_norms_in_one_kernel(dtype, lanes):
    """``||x_i||^2`` by one launch and no scratch per nonzero, an empty matrix included."""
    X, y = random_csr(dtype)
    be = emulated(X, y, lanes, blocks=4)
    launches = be.launches
    sq = be.to_host(be.row_sq_norms)
    assert be.launches == launches + 1
    ref = np.asarray(X.astype(np.float64).multiply(X.astype(np.float64)).sum(axis=1)).ravel()
    np.testing.assert_allclose(sq, ref, rtol=1e-13, atol=0.0)
    empty = sp.csr_matrix((5, 3), dtype=dtype)
    be = emulated(empty, np.array([1.0, -1.0, 1.0, 1.0, -1.0], dtype=dtype), lanes, blocks=2)
    np.testing.assert_array_equal(be.to_host(be.row_sq_norms), np.zeros(5))


def test_cupy_modules_compile_once_per_device_at_load(monkeypatch):
    """Against a stand-in for CuPy: the main and the WHILE module are each compiled once per
    device, at load (their first ``get_function``), from their own sources and names; the
    main module's compile is timed; a CuPy without the name-expression cache warns."""
    import types
    from gpusvm import _kernels
    made = []

    class RawModule:
        def __init__(self, code, options, name_expressions):
            self.code, self.names, self.loaded = code, list(name_expressions), []
            assert options == _kernels.compile_options()
            made.append(self)

        def get_function(self, name):
            self.loaded.append(name)
            return name

    device = types.SimpleNamespace(id=0)
    fake = types.SimpleNamespace(__version__="14.2.0", RawModule=RawModule,
                                 cuda=types.SimpleNamespace(Device=lambda: device))
    monkeypatch.setitem(__import__("sys").modules, "cupy", fake)
    monkeypatch.setattr(_kernels, "_cupy_modules", {})
    monkeypatch.setattr(_kernels, "compile_seconds", {})
    main = _kernels.load_module("cupy")
    loop = _kernels.load_while_module("cupy")
    assert _kernels.load_module("cupy") is main and _kernels.load_while_module("cupy") is loop
    assert len(made) == 2 and main.names == _kernels.name_expressions()
    assert main.loaded == main.names[:1] and "gpusvm_margins" in main.code
    assert loop.names == loop.loaded == [_kernels.WHILE_KERNEL]
    assert "cudaGraphSetConditional" in loop.code and "gpusvm_margins" not in loop.code
    assert _kernels.compile_seconds[0] >= 0.0
    device.id = 1                                         # another device: compiled again
    fake.__version__ = "13.6.0"
    with pytest.warns(RuntimeWarning, match="does not cache modules compiled with name"):
        assert _kernels.load_module("cupy") is not main
    assert _kernels.load_while_module("cupy") is not loop and len(made) == 4
    wide = _kernels.load_module("cupy", "int64")           # the int64 instances: on first use
    assert _kernels.load_module("cupy", "int64") is wide and len(made) == 5
    assert wide.names == _kernels.name_expressions("int64") and wide.code == main.code
