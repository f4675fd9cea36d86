"""Tests of the CPU kernel emulator (gpusvm_emulator) against NumPy.

The kernels live in ``tests/emulator_kernels/*.cu``. Built modules are cached
(``$GPUSVM_EMU_CACHE`` or ``~/.cache/gpusvm/emulator``), so only the first run
compiles; the session fixture builds all of them in parallel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import gpusvm_emulator as emulator
from gpusvm_emulator import EmulatedModule, EmulatorBuildError, _ensure_built, _Spec
from tsan_runner import check_launches

KDIR = Path(__file__).resolve().parent / "emulator_kernels"
SPMV_NAMES = ("emu_spmv<float, 4>", "emu_spmv<float, 8>", "emu_spmv<float, 16>",
              "emu_spmv<float, 32>", "emu_spmv<double, 32>")
FULL = 0xFFFFFFFF


@pytest.fixture(scope="session")
def mods():
    """All test modules, built (or loaded from the cache) two at a time."""
    specs = {
        "spmv": dict(path=KDIR / "spmv.cu", name_expressions=SPMV_NAMES),
        "reduce": dict(path=KDIR / "reduce.cu"),
        "atomics": dict(path=KDIR / "atomics.cu"),
        "warp": dict(path=KDIR / "warp.cu"),
        "deadlock": dict(path=KDIR / "deadlock.cu"),
    }
    with ThreadPoolExecutor(max_workers=2) as ex:
        futures = {k: ex.submit(EmulatedModule, **v) for k, v in specs.items()}
        # the ThreadSanitizer build of racy.cu, used by the TSAN tests in subprocesses
        tsan = ex.submit(_ensure_built, _Spec(None, KDIR / "racy.cu", (), (), True, ()))
        out = {k: f.result() for k, f in futures.items()}
        tsan.result()
    return out


def marker_line(name, marker):
    """1-based line of the first line in a kernel file containing marker."""
    for i, line in enumerate((KDIR / name).read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


# ---------------------------------------------------------------------------
# warp-per-row CSR SpMV
# ---------------------------------------------------------------------------
def random_csr(rng, n_rows=300, n_cols=500, long_row=1500):
    lengths = rng.integers(0, 25, n_rows)
    lengths[rng.choice(n_rows, 40, replace=False)] = 0          # empty rows
    lengths[7] = long_row                                         # longer than 1024 nonzeros
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate([rng.choice(n_cols, k, replace=k > n_cols) for k in lengths]).astype(np.int32)
    data = rng.standard_normal(indptr[-1])
    return indptr, indices, data


def csr_dense(indptr, indices, data, n_cols):
    a = np.zeros((len(indptr) - 1, n_cols))
    for r in range(len(indptr) - 1):
        np.add.at(a[r], indices[indptr[r]:indptr[r + 1]], data[indptr[r]:indptr[r + 1]])
    return a


@pytest.mark.parametrize("name", SPMV_NAMES)
def test_spmv_warp_per_row(mods, name):
    rng = np.random.default_rng(0)
    n_rows, n_cols = 300, 500
    indptr, indices, data = random_csr(rng, n_rows, n_cols)
    dtype = np.float64 if "double" in name else np.float32
    lanes = int(re.search(r"(\d+)>", name).group(1))
    x = rng.standard_normal(n_cols).astype(dtype)
    y = np.full(n_rows, np.nan, dtype)
    block = 128
    grid = -(-n_rows * lanes // block)
    mods["spmv"].get_function(name)((grid,), (block,),
                                    (indptr, indices, data.astype(dtype), x, y, np.int32(n_rows)))
    ref = csr_dense(indptr, indices, data.astype(dtype).astype(np.float64), n_cols) @ x.astype(np.float64)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * np.abs(ref).max())
    assert np.all(y[np.diff(indptr) == 0] == 0)


# ---------------------------------------------------------------------------
# shared memory and block barriers
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kernel,block", [("block_sum_static", 256), ("block_sum_static", 64),
                                          ("block_sum_dynamic", 1024), ("block_sum_dynamic", 32)])
def test_block_reduction(mods, kernel, block):
    rng = np.random.default_rng(1)
    n = 5000
    x = rng.standard_normal(n).astype(np.float32)
    grid = -(-n // block)
    out = np.zeros(grid, np.float32)
    shared = 4 * block if kernel.endswith("dynamic") else 0
    mods["reduce"].get_function(kernel)(grid, block, (x, out, np.int32(n)), shared_mem=shared)
    ref = np.pad(x.astype(np.float64), (0, grid * block - n)).reshape(grid, block).sum(1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


def test_block_reduction_warps_in_double(mods):
    rng = np.random.default_rng(2)
    n, block = 3000, 256
    x = rng.standard_normal(n).astype(np.float32)
    grid = -(-n // block)
    out = np.zeros(grid)
    mods["reduce"].get_function("block_sum_warps")(grid, block, (x, out, np.int32(n)),
                                                   shared_mem=8 * block // 32)
    ref = np.pad(x.astype(np.float64), (0, grid * block - n)).reshape(grid, block).sum(1)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_namespace_scope_dynamic_shared(mods):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(8 * 128).astype(np.float32)
    out = np.zeros(8, np.float32)
    mods["reduce"].get_function("block_max_global_dyn")(8, 128, (x, out), shared_mem=4 * 128)
    np.testing.assert_array_equal(out, x.reshape(8, 128).max(1))


def test_unwritten_dynamic_shared_reads_nan(mods):
    out = np.zeros(4 * 64, np.float32)
    mods["reduce"].get_function("read_unwritten_shared")(4, 64, (out,), shared_mem=4 * 64)
    assert np.isnan(out).all()


def test_syncthreads_count_and_or_with_exited_threads(mods):
    rng = np.random.default_rng(4)
    block, n = 64, 3 * 64 - 10           # the last block has 10 threads that exit at once
    pred = (rng.random(n) < 0.5).astype(np.int32)
    pred[:64] = 1                          # block 0: all true
    pred[64:128] = 0                       # block 1: all false
    out = np.zeros(3 * n, np.int32)
    mods["reduce"].get_function("sync_votes")(3, block, (pred, out, np.int32(n)))
    out = out.reshape(n, 3)
    for b in range(3):
        p = pred[b * block:(b + 1) * block]
        np.testing.assert_array_equal(out[b * block:b * block + len(p)],
                                      np.tile([p.sum(), p.all(), p.any()], (len(p), 1)))


# ---------------------------------------------------------------------------
# atomics
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_atomic_scatter_exact_norm_change(mods, dtype):
    rng = np.random.default_rng(5)
    n, slots = 20000, 97                 # many collisions
    idx = rng.integers(0, slots, n).astype(np.int32)
    c = rng.standard_normal(n).astype(dtype)
    v0 = rng.standard_normal(slots).astype(dtype)
    v = v0.copy()
    dsq = np.zeros(1)
    kern = "scatter_sq_f32" if dtype == np.float32 else "scatter_sq_f64"
    mods["atomics"].get_function(kern)(-(-n // 256), 256, (idx, c, v, dsq, np.int32(n)))
    ref = v0.astype(np.float64)
    np.add.at(ref, idx, c.astype(np.float64))
    np.testing.assert_allclose(v, ref, rtol=1e-4 if dtype == np.float32 else 1e-11, atol=1e-4)
    # the old values returned by atomicAdd telescope to the exact change of ||v||^2
    exact = np.sum(v.astype(np.float64) ** 2) - np.sum(v0.astype(np.float64) ** 2)
    np.testing.assert_allclose(dsq[0], exact, rtol=1e-9, atol=1e-9)


def test_integer_atomics(mods):
    n = 1000
    ic = np.array([0, -5, 5, 10, -1, 0, 0, 0], np.int32)
    uc = np.array([0, 0, 4000000000, 0xFFFFFFFF, 0], np.uint32)
    ull = np.zeros(3, np.uint64)
    fc = np.zeros(1, np.float32)
    ex_old = np.zeros(n, np.int32)
    mods["atomics"].get_function("atomic_misc")(-(-n // 128), 128, (ic, uc, ull, fc, ex_old, np.int32(n)))
    i = np.arange(n)
    assert ic[0] == n and ic[1] == n - 1 and ic[2] == -(n - 1) and ic[3] == 10 + 2 * n
    assert sorted(np.append(ex_old, ic[4])) == sorted(np.append(i, -1))   # exchanges permute
    assert ic[5] == -3 * n
    assert ic[6] == np.bitwise_or.reduce(1 << (i % 31)).astype(np.int32)
    assert ic[7] == np.bitwise_xor.reduce(i)
    assert uc[0] == 3 * n and uc[1] == 7 * (n - 1) and uc[2] == 5 and uc[3] == 0
    assert uc[4] == n % 10
    assert ull[0] == n << 33 and ull[1] == 1 and ull[2] == 1
    assert fc[0] == 2.5


def test_float_atomics_bitwise_repeatable_with_one_worker(mods, monkeypatch):
    monkeypatch.setenv("GPUSVM_EMU_WORKERS", "1")
    rng = np.random.default_rng(6)
    n = 40000
    idx = rng.integers(0, 64, n).astype(np.int32)
    c = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 4, n)).astype(np.float32)
    kern = mods["atomics"].get_function("scatter_sq_f32")
    results = []
    for _ in range(3):
        v = np.zeros(64, np.float32)
        dsq = np.zeros(1)
        kern(-(-n // 128), 128, (idx, c, v, dsq, np.int32(n)))
        results.append((v.tobytes(), dsq.tobytes()))
    assert results[0] == results[1] == results[2]


# ---------------------------------------------------------------------------
# warp intrinsics
# ---------------------------------------------------------------------------
def shfl_ref(v, mode, arg, width):
    """Per-lane source of CUDA's __shfl*_sync (CUDA C++ Programming Guide semantics)."""
    t = np.arange(len(v))
    lane = t % 32
    base = t - lane
    seg = lane & ~(width - 1)
    if mode == "idx":
        src = seg + (arg & (width - 1))
    elif mode == "up":         # the lower `arg` lanes of each segment keep their value
        src = np.where(lane - seg >= arg, lane - arg, lane)
    elif mode == "down":       # no wrap past the end of the segment
        src = np.where(lane - seg + arg < width, lane + arg, lane)
    else:                      # xor: later segments are out of reach
        j = lane ^ arg
        src = np.where(j < seg + width, j, lane)
    return v[base + src]


@pytest.mark.parametrize("width", [32, 16, 8, 4, 2, 1])
def test_warp_intrinsics(mods, width):
    rng = np.random.default_rng(7 + width)
    blocks, block = 2, 64
    n = blocks * block
    vi = rng.integers(-1000, 1000, n).astype(np.int32)
    vf = rng.standard_normal(n).astype(np.float32)
    vd = rng.standard_normal(n)
    vl = rng.integers(-2**62, 2**62, n).astype(np.int64)
    vu = rng.integers(0, 2**32, n).astype(np.uint32)
    pred = (rng.random(n) < 0.4).astype(np.int32)
    pred[:32] = 1      # warp 0: all true
    pred[32:64] = 0    # warp 1: all false
    oi = np.zeros(11 * n, np.int32)
    of = np.zeros(4 * n, np.float32)
    od = np.zeros(4 * n)
    ol = np.zeros(4 * n, np.int64)
    ou = np.zeros(7 * n, np.uint32)
    mods["warp"].get_function("warp_ops")(blocks, block, (vi, vf, vd, vl, vu, pred, np.int32(width),
                                                          oi, of, od, ol, ou, np.int32(n)))
    oi, of, od, ol, ou = (a.reshape(-1, n) for a in (oi, of, od, ol, ou))
    lane = np.arange(n) % 32
    ops = [("idx", (lane * 7 + 3) % 40), ("up", 3), ("down", 5), ("xor", 5)]
    for k, (mode, arg) in enumerate(ops):
        for got, v in ((oi, vi), (of, vf), (od, vd), (ol, vl), (ou, vu)):
            np.testing.assert_array_equal(got[k], shfl_ref(v, mode, arg, width), err_msg=f"{mode} {v.dtype}")
    warps = pred.reshape(-1, 32).astype(bool)
    ballot = (warps * (1 << np.arange(32, dtype=np.uint64))).sum(1).astype(np.uint32)
    per_lane = np.repeat(ballot, 32)
    np.testing.assert_array_equal(ou[4], per_lane)
    np.testing.assert_array_equal(oi[4], np.repeat(warps.any(1), 32))
    np.testing.assert_array_equal(oi[5], np.repeat(warps.all(1), 32))
    np.testing.assert_array_equal(oi[6], [bin(int(b)).count("1") for b in per_lane])
    np.testing.assert_array_equal(oi[7], [(int(b) & -int(b)).bit_length() for b in per_lane])   # __ffs
    np.testing.assert_array_equal(oi[8], [32 - int(b).bit_length() for b in per_lane])         # __clz
    np.testing.assert_array_equal(ou[5], np.full(n, FULL, np.uint32))                           # __activemask
    key = (vi & 3).reshape(-1, 32)
    match = [(sum(1 << j for j in range(32) if key[w, j] == key[w, l])) for w in range(n // 32)
             for l in range(32)]
    np.testing.assert_array_equal(ou[6], np.array(match, np.uint64).astype(np.uint32))
    # partial mask: the lanes with pred set, reading from the lowest of them / summing over them
    lowest = np.array([vi[w * 32 + np.argmax(warps[w])] if warps[w].any() else 0 for w in range(n // 32)])
    sums = np.array([vi[w * 32:(w + 1) * 32][warps[w]].sum() for w in range(n // 32)])
    np.testing.assert_array_equal(oi[9], np.where(pred == 1, np.repeat(lowest, 32), -7))
    np.testing.assert_array_equal(oi[10], np.where(pred == 1, np.repeat(sums, 32), -7))


def test_multidimensional_builtins(mods):
    grid, block = (3, 2, 2), (4, 3, 2)
    tpb, nblk = 24, 12
    out = np.full(14 * tpb * nblk, -1, np.int32)
    mods["warp"].get_function("builtins")(grid, block, (out,))
    out = out.reshape(nblk, tpb, 14)
    for bz in range(2):
        for by in range(2):
            for bx in range(3):
                blk = bx + 3 * (by + 2 * bz)
                for tz in range(2):
                    for ty in range(3):
                        for tx in range(4):
                            lin = tx + 4 * (ty + 3 * tz)
                            exp = [tx, ty, tz, bx, by, bz, *block, *grid, lin // 32, lin % 32]
                            assert list(out[blk, lin]) == exp


def test_printf_is_flushed(mods, capfd):
    mods["warp"].get_function("hello")(3, 32, (np.int32(7),))
    lines = sorted(capfd.readouterr().out.splitlines())
    assert lines == [f"hello from block {b} tag 7" for b in range(3)]


# ---------------------------------------------------------------------------
# deadlocks and misuse become errors, promptly
# ---------------------------------------------------------------------------
def test_divergent_syncthreads_deadlock(mods):
    x = np.zeros(64, np.float32)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError) as err:
        mods["deadlock"].get_function("divergent_sync")(4, 64, (x,))
    assert time.perf_counter() - t0 < 5.0
    msg = str(err.value)
    assert "deadlock" in msg and "divergent" in msg
    for marker in ("DIVERGENT_ODD", "DIVERGENT_EVEN"):
        assert f"32 threads in __syncthreads at {KDIR / 'deadlock.cu'}:{marker_line('deadlock.cu', marker)}" in msg


def test_full_mask_naming_exited_lanes(mods):
    x = np.ones(32, np.float32)
    with pytest.raises(RuntimeError) as err:
        mods["deadlock"].get_function("shfl_after_exit")(1, 32, (x,))
    msg = str(err.value)
    line = marker_line("deadlock.cu", "EXITED_SHFL")
    assert f"16 threads in __shfl_xor_sync at {KDIR / 'deadlock.cu'}:{line}" in msg
    assert "lanes 16-31 named in the mask have exited" in msg


def test_full_mask_in_partial_warp(mods):
    x = np.ones(48, np.float32)
    with pytest.raises(RuntimeError, match=r"lanes 16-31 named in the mask do not exist \(block has 48"):
        mods["deadlock"].get_function("full_mask_partial_warp")(1, 48, (x,))


def test_mask_without_calling_lane(mods):
    x = np.ones(32, np.float32)
    with pytest.raises(RuntimeError, match=r"thread \(1,0,0\).*mask 0x00000001.*calling lane 1"):
        mods["deadlock"].get_function("mask_without_caller")(1, 32, (x,))


def test_trap_and_recovery(mods):
    x = np.zeros(8 * 32, np.float32)
    with pytest.raises(RuntimeError, match=r"block \(2,0,0\), thread \(5,0,0\): __trap\(\)"):
        mods["deadlock"].get_function("trap_in_block_2")(8, 32, (x,))
    # the module keeps working after failed launches (fibers are reset)
    y = np.arange(64, dtype=np.float32)
    mods["deadlock"].get_function("fine")(1, 64, (y,))
    np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32)[::-1])


# ---------------------------------------------------------------------------
# argument checks (CuPy would silently pass a Python float as 8 bytes)
# ---------------------------------------------------------------------------
def test_signature_and_names(mods):
    assert mods["spmv"].kernel_names == SPMV_NAMES
    assert mods["spmv"].get_function("emu_spmv<float,4>").signature == \
        "(const int*, const int*, const float*, const float*, float*, int)"
    assert mods["warp"].get_function("axpy").signature == "(float, const float*, float*, int)"
    assert mods["warp"].kernel_names == ("warp_ops", "builtins", "hello", "axpy")
    with pytest.raises(KeyError, match="registered: warp_ops"):
        mods["warp"].get_function("nope")


def test_argument_checks(mods):
    axpy = mods["warp"].get_function("axpy")
    x = np.ones(10, np.float32)
    y = np.zeros(10, np.float32)
    axpy(1, 32, (np.float32(2), x, y, np.int32(10)))
    np.testing.assert_array_equal(y, 2)
    with pytest.raises(TypeError, match=r"argument 0 needs np\.float32.*Python float 2\.0.*np\.float32\(\.\.\.\) explicitly"):
        axpy(1, 32, (2.0, x, y, np.int32(10)))
    with pytest.raises(TypeError, match=r"argument 3 needs np\.int32.*Python int"):
        axpy(1, 32, (np.float32(2), x, y, 10))
    with pytest.raises(TypeError, match=r"argument 0 needs np\.float32.*float64"):
        axpy(1, 32, (np.float64(2), x, y, np.int32(10)))
    with pytest.raises(TypeError, match=r"argument 1 needs a float32 array for 'const float\*', got .*float64"):
        axpy(1, 32, (np.float32(2), x.astype(np.float64), y, np.int32(10)))
    with pytest.raises(TypeError, match="non-C-contiguous"):
        axpy(1, 32, (np.float32(2), np.ones(20, np.float32)[::2], y, np.int32(10)))
    with pytest.raises(TypeError, match="scalar .* for a pointer parameter"):
        axpy(1, 32, (np.float32(2), np.float32(1), y, np.int32(10)))
    with pytest.raises(TypeError, match="an array for a scalar parameter"):
        axpy(1, 32, (x, x, y, np.int32(10)))
    with pytest.raises(TypeError, match="takes 4 arguments, 3 given"):
        axpy(1, 32, (np.float32(2), x, y))
    with pytest.raises(ValueError, match="block"):
        axpy(1, 1025, (np.float32(2), x, y, np.int32(10)))
    with pytest.raises(ValueError, match="block"):
        axpy(1, (32, 32, 2), (np.float32(2), x, y, np.int32(10)))
    with pytest.raises(ValueError, match="zero"):
        axpy(0, 32, (np.float32(2), x, y, np.int32(10)))
    with pytest.raises(ValueError, match="zero"):
        axpy((2, 0), 32, (np.float32(2), x, y, np.int32(10)))


# ---------------------------------------------------------------------------
# build: options, errors, isolation, cache
# ---------------------------------------------------------------------------
COUNTER_SRC = r"""
#ifndef SCALE
#error SCALE must be defined
#endif
__device__ int calls;   // a device global: one per module, never shared between modules
extern "C" __global__ void count(int* out) { out[0] = SCALE * (++calls); }
"""


def test_defines_nvrtc_options_and_module_isolation(recwarn):
    nvrtc = ("--std=c++17", "-ftz=true", "--use_fast_math", "-arch=sm_80")
    with ThreadPoolExecutor(max_workers=2) as ex:   # two builds at once
        fa = ex.submit(EmulatedModule, code=COUNTER_SRC, options=("-DSCALE=2", *nvrtc))
        fb = ex.submit(EmulatedModule, code=COUNTER_SRC, options=("-D", "SCALE=3", *nvrtc))
        a, b = fa.result(), fb.result()
    assert not [w for w in recwarn if "emulator" in str(w.message)]
    out = np.zeros(1, np.int32)
    ka, kb = a.get_function("count"), b.get_function("count")
    ka(1, 1, (out,))
    assert out[0] == 2
    ka(1, 1, (out,))
    assert out[0] == 4
    kb(1, 1, (out,))
    assert out[0] == 3            # b's own counter and kernel table
    ka(1, 1, (out,))
    assert out[0] == 6


def test_compile_error_carries_compiler_message():
    with pytest.raises(EmulatorBuildError, match=r"no_such_name.*not declared"):
        EmulatedModule(code='extern "C" __global__ void k(float* x) { x[0] = no_such_name; }')


def test_cache_hit(mods):
    again = EmulatedModule(path=KDIR / "spmv.cu", name_expressions=SPMV_NAMES)
    assert again.build_seconds == 0.0
    assert again.so_path == mods["spmv"].so_path


# ---------------------------------------------------------------------------
# ThreadSanitizer
# ---------------------------------------------------------------------------
def scatter_args(rng, n=3000, slots=40):
    return (rng.integers(0, slots, n).astype(np.int32), rng.standard_normal(n).astype(np.float32),
            np.zeros(slots, np.float32), np.int32(n))


def test_tsan_silent_on_correct_kernels(mods):
    rng = np.random.default_rng(8)
    x = rng.standard_normal(16 * 128).astype(np.float32)
    out = np.zeros(16, np.float32)
    sc = scatter_args(rng)
    rep = check_launches(KDIR / "racy.cu", [("scatter_atomic", 24, 128, sc), ("reduce_ok", 16, 128, (x, out))])
    assert rep.returncode == 0 and rep.races == 0 and rep.warnings == 0, rep.output
    v = np.zeros(40)
    np.add.at(v, sc[0], sc[1].astype(np.float64))
    np.testing.assert_allclose(rep.arrays[0][2], v, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rep.arrays[1][1], x.reshape(16, 128).sum(1), rtol=1e-4, atol=1e-4)


def test_tsan_reports_racy_scatter(mods, tmp_path):
    # through the command line form: exit status 66 and the race in the output
    np.savez(tmp_path / "args.npz", *scatter_args(np.random.default_rng(9)))
    root = Path(emulator.__file__).resolve().parents[1]      # where this emulator was imported from
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("tsan_runner.py")), str(KDIR / "racy.cu"),
                           "--kernel", "scatter_racy", "--grid", "24", "--block", "128",
                           "--npz", str(tmp_path / "args.npz")], capture_output=True, text=True, env=env)
    assert proc.returncode == 66, proc.stdout + proc.stderr
    assert "WARNING: ThreadSanitizer: data race" in proc.stdout
    assert "scatter_racy" in proc.stdout and "racy.cu" in proc.stdout


def test_tsan_reports_missing_syncthreads(mods):
    rng = np.random.default_rng(10)
    x = rng.standard_normal(8 * 128).astype(np.float32)
    rep = check_launches(KDIR / "racy.cu", [("reduce_nosync", 8, 128, (x, np.zeros(8, np.float32)))])
    assert rep.races >= 1 and rep.returncode == 66, rep.output
    assert "reduce_nosync" in rep.output


# ---------------------------------------------------------------------------
# recorded launch sequences (the emulator's CUDA graph replay)
# ---------------------------------------------------------------------------
def test_graph_replays_the_recorded_sequence(mods):
    n = 1000
    ic = np.zeros(8, np.int32)
    uc = np.zeros(5, np.uint32)
    ull = np.zeros(3, np.uint64)
    fc = np.zeros(1, np.float32)
    ex_old = np.zeros(n, np.int32)
    y = np.arange(64, dtype=np.float32)
    g = mods["atomics"].graph()
    g.add(mods["atomics"].get_function("atomic_misc"), -(-n // 128), 128,
          (ic, uc, ull, fc, ex_old, np.int32(n)))
    assert g.launches == 1
    g.launch(5)
    assert ic[0] == 5 * n                         # atomicAdd(+1) by every thread, 5 replays
    assert uc[0] == 5 * 3 * n
    g.launch(0)                                   # nothing
    assert ic[0] == 5 * n
    h = mods["deadlock"].graph()
    h.add(mods["deadlock"].get_function("fine"), 1, 64, (y,))
    h.launch(3)                                   # reversed three times = reversed once
    np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32)[::-1])
    with pytest.raises(ValueError, match="belongs to another module"):
        h.add(mods["atomics"].get_function("atomic_misc"), 1, 32,
              (ic, uc, ull, fc, ex_old, np.int32(n)))
    with pytest.raises(TypeError, match="argument 0 needs"):
        h.add(mods["deadlock"].get_function("fine"), 1, 64, (np.zeros(4, np.int32),))


def test_graph_names_the_failing_launch(mods):
    x = np.zeros(8 * 32, np.float32)
    g = mods["deadlock"].graph()
    g.add(mods["deadlock"].get_function("fine"), 1, 64, (np.zeros(64, np.float32),))
    g.add(mods["deadlock"].get_function("trap_in_block_2"), 8, 32, (x,))
    with pytest.raises(RuntimeError, match=r"replay 0, launch 1: .*__trap\(\)"):
        g.launch(2)
