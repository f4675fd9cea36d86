"""Each CUDA kernel against a NumPy computation, run on the CPU kernel emulator.

The inputs are random CSR matrices with empty rows and rows longer than 1024
nonzeros; batches of one row, of all rows, and drawn i.i.d. (repeated rows, so
the atomics collide); float32 and float64; every lane count; grids of one and
of several blocks.  The kernels are launched through
:class:`gpusvm.backends.device.DeviceBackend` with a chosen lane count and grid
cap, and, where the launch geometry itself is the point, directly.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import _kernels
from gpusvm.backends import _state
from gpusvm.backends._state import (N_SLOTS, S_A, S_ASUM, S_B, S_BSUM, S_DNORM, S_LOSS, S_NACT,
                                    S_NAVG, S_VSQ, S_YACT)
from gpusvm.backends.device import DeviceBackend, _EmulatedRuntime, choose_lanes
from gpusvm.backends.numpy_ import NumpyBackend

REPO = Path(__file__).resolve().parents[1]
DTYPES = (np.float32, np.float64)
LONG_ROW = 7        # index of a row with more than 1024 nonzeros
N, D = 240, 1500


def random_csr(dtype, seed=0):
    """CSR with ~15% empty rows, short rows, and three rows of 1100-1400 nonzeros."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=N)
    lengths[rng.random(N) < 0.15] = 0
    lengths[[LONG_ROW, 100, N - 1]] = (1400, 1100, 1200)
    rows = []
    for length in lengths:
        rows.append(np.sort(rng.choice(D, size=length, replace=False)))
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate(rows).astype(np.int32)
    data = rng.normal(size=indices.size).astype(dtype)
    X = sp.csr_matrix((data, indices, indptr), shape=(N, D))
    y = np.where(rng.random(N) < 0.5, -1.0, 1.0).astype(dtype)
    return X, y


def batch(kind, seed=1):
    """Row indices: one long row, all rows (k = n), or k = n i.i.d. draws with repeats."""
    rng = np.random.default_rng(seed)
    if kind == "one":
        return np.array([LONG_ROW], dtype=np.int32)
    if kind == "all":
        return np.arange(N, dtype=np.int32)
    rows = rng.integers(0, N, size=N).astype(np.int32)
    rows[:6] = LONG_ROW                         # a long row six times: colliding atomics
    return rows


def emulated(X, y, lanes, blocks=3):
    return DeviceBackend(X, y, _EmulatedRuntime(max_blocks=blocks), lanes=lanes)


def start_state(be, rng, *, averaging, a=0.8, b=0.1):
    """Random v, optional u, and a state with every slot set."""
    v0 = (0.05 * rng.normal(size=be.d)).astype(be.dtype)
    be.init_state(w0=v0, b0=b, averaging=averaging)
    s = be.s
    s[S_A] = a
    s[S_ASUM], s[S_NAVG], s[S_BSUM] = (2.5, 3.0, 0.2) if averaging else (0.0, 0.0, 0.0)
    if averaging:
        be.u[:] = rng.normal(size=be.d)
    return v0


def twin(X, y, dev):
    """A NumpyBackend holding copies of ``dev``'s v, u and state."""
    ref = NumpyBackend(X, y)
    ref.init_state(dev.v.copy(), 0.0, averaging=dev.u is not None)
    ref.s = dev.s.copy()
    if dev.u is not None:
        ref.u = dev.u.copy()
    return ref


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
    for op in _kernels.ROW_KERNELS + _kernels.VECTOR_KERNELS:
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


# ------------------------------------------------------------------ margins
@pytest.mark.parametrize("kind", ["one", "all", "iid"])
@pytest.mark.parametrize("lanes", _kernels.LANE_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_margins(dtype, lanes, kind):
    X, y = random_csr(dtype)
    be = emulated(X, y, lanes)
    rng = np.random.default_rng(2)
    v0 = start_state(be, rng, averaging=False, a=0.7, b=-0.3)
    rows = batch(kind)
    m = be.margins(rows)
    X64 = X.astype(np.float64)[rows]
    v64 = v0.astype(np.float64)
    ref = y[rows] * (0.7 * (X64 @ v64) - 0.3)
    scale = 0.7 * (abs(X64) @ abs(v64)) + 0.3
    assert m.dtype == np.float64 and m.shape == rows.shape
    assert np.all(np.abs(m - ref) <= 1e-13 * scale + 1e-300)


def test_margins_grid_past_the_end_writes_nothing_more():
    X, y = random_csr(np.float32)
    mod = _kernels.load_module("emulated")
    rng = np.random.default_rng(3)
    v = rng.normal(size=D).astype(np.float32)
    s = np.zeros(N_SLOTS)
    s[S_A], s[S_B] = 1.0, 0.5
    rows = np.array([LONG_ROW, 0, 100], dtype=np.int32)
    m = np.full(8, np.nan)
    fn = mod.get_function("gpusvm_margins<4,float>")
    fn((5,), (_kernels.BLOCK,), (X.indptr.astype(np.int64), X.indices, X.data, y, v, rows,
                                 np.int32(3), s, m))
    ref = y[rows] * (X.astype(np.float64)[rows] @ v.astype(np.float64) + 0.5)
    np.testing.assert_allclose(m[:3], ref, rtol=1e-12)
    assert np.isnan(m[3:]).all()


# ------------------------------------------------------------------ pegasos step
@pytest.mark.parametrize("mode", ["plain", "full"])
@pytest.mark.parametrize("kind", ["one", "all", "iid"])
@pytest.mark.parametrize("lanes", _kernels.LANE_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pegasos_step(dtype, lanes, kind, mode):
    """Atomic scatter-add with exact norm change, diagnostics and the scalar finish."""
    X, y = random_csr(dtype)
    full = mode == "full"                     # averaging, unregularised bias, projection
    be = emulated(X, y, lanes)
    rng = np.random.default_rng(4)
    v0 = start_state(be, rng, averaging=full)
    rows = batch(kind)
    k = rows.size
    m = rng.uniform(-1.0, 3.0, size=k)
    m[::5] = 1.0                              # margin exactly 1: not active
    if kind == "one":
        m[:] = 0.25
    ref = twin(X, y, be)
    wsq = 0.8 * 0.8 * float(ref.s[S_VSQ])
    radius = 0.5 * np.sqrt(wsq) if full else 0.0
    args = dict(eta=0.5, shrink=0.9, k=k, unreg_bias=full, radius=radius, average=full)
    be.pegasos_step(rows, m, **args)
    ref.pegasos_step(rows, m.copy(), **args)

    # v: the same additions, rounded once per addition (device) or once per coordinate (NumPy)
    active = m < 1.0
    c = np.where(active, y[rows] * 0.5 / (k * 0.8 * 0.9), 0.0)
    A = X.astype(np.float64)[rows]
    absum = np.abs(v0.astype(np.float64)) + abs(A).T @ np.abs(c)
    count = (A[active] != 0).sum(axis=0).A1 if active.any() else np.zeros(D)
    eps = np.finfo(dtype).eps
    assert np.all(np.abs(be.v.astype(np.float64) - ref.v) <= eps * (count + 1) * absum + 1e-300)
    if full:
        np.testing.assert_allclose(be.u, ref.u, rtol=1e-13, atol=1e-13 * np.abs(ref.u).max())

    # the change of ||v||^2 is exact for the values the atomics stored
    old, new = v0.astype(np.float64), be.v.astype(np.float64)
    exact = new @ new - old @ old
    assert abs(be.s[S_DNORM] - exact) <= 1e-12 * (new @ new + old @ old)
    assert abs(be.s[S_VSQ] - (old @ old + exact)) <= 1e-12 * (new @ new + old @ old)

    # diagnostics and the scalar part, as NumpyBackend.pegasos_step
    assert be.s[S_NACT] == ref.s[S_NACT] == active.sum()
    np.testing.assert_allclose(be.s[S_LOSS], ref.s[S_LOSS], rtol=1e-13)
    assert be.s[S_YACT] == ref.s[S_YACT]
    tol = 1e-12 if dtype == np.float64 else 1e-5     # the projection reads ||v||^2
    np.testing.assert_allclose(be.s, ref.s, rtol=tol, atol=1e-14 * np.abs(ref.s[S_DNORM]))
    if full:
        assert be.s[S_A] < 0.8 * 0.9                  # the projection was taken
        assert be.s[S_NAVG] == 4.0
    # scratch left clean for the next launch
    assert not be._acc.any() and not be._ticket.any()


def test_pegasos_step_without_active_rows_only_shrinks():
    X, y = random_csr(np.float64)
    be = emulated(X, y, 8)
    v0 = start_state(be, np.random.default_rng(5), averaging=False)
    vsq = float(be.s[S_VSQ])
    rows = batch("all")
    be.pegasos_step(rows, np.full(rows.size, 2.0), 0.5, 0.9, rows.size, False, 0.0, False)
    assert np.array_equal(be.v, v0)
    assert be.s[S_A] == 0.8 * 0.9 and be.s[S_VSQ] == vsq
    assert be.s[S_NACT] == 0 and be.s[S_LOSS] == 0 and be.s[S_DNORM] == 0


# ------------------------------------------------------------------ renormalize
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("blocks", [1, 4])
def test_renormalize(dtype, blocks):
    X, y = random_csr(dtype)
    be = emulated(X, y, 8, blocks=blocks)
    rng = np.random.default_rng(6)
    v0 = start_state(be, rng, averaging=True, a=3e-7)
    s0, u0 = be.s.copy(), be.u.copy()
    be.renormalize(1e-6)
    assert np.array_equal(be.v, v0 * dtype(3e-7))
    assert np.array_equal(be.u, u0 - s0[S_ASUM] * v0.astype(np.float64))
    assert be.s[S_A] == 1.0
    assert be.s[S_VSQ] == s0[S_VSQ] * (3e-7 * 3e-7)
    assert be.s[S_ASUM] == 0.0
    assert not be._ticket.any()
    # |a| >= threshold: nothing moves
    v1, s1 = be.v.copy(), be.s.copy()
    be.s[S_A] = -2e-6
    s1[S_A] = -2e-6
    be.renormalize(1e-6)
    assert np.array_equal(be.v, v1) and np.array_equal(be.s, s1)
    # a negative a below the threshold folds in with its sign
    be.s[S_A] = -5e-7
    be.renormalize(1e-6)
    assert np.array_equal(be.v, v1 * dtype(-5e-7)) and be.s[S_A] == 1.0


def test_renormalize_matches_numpy_backend():
    X, y = random_csr(np.float32)
    be = emulated(X, y, 8)
    start_state(be, np.random.default_rng(7), averaging=True, a=1e-8)
    ref = twin(X, y, be)
    be.renormalize(1e-6)
    ref.renormalize(1e-6)
    assert np.array_equal(be.v, ref.v)
    np.testing.assert_array_equal(be.u, ref.u)
    np.testing.assert_array_equal(be.s, ref.s)


# ------------------------------------------------------------------ reset, output
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("averaging", [False, True])
def test_reset_scale(dtype, averaging):
    X, y = random_csr(dtype)
    be = emulated(X, y, 8)
    start_state(be, np.random.default_rng(8), averaging=averaging)
    ref = twin(X, y, be)
    be.reset_scale()
    ref.reset_scale()
    assert not be.v.any()
    np.testing.assert_array_equal(be.s, ref.s)
    if averaging:
        np.testing.assert_array_equal(be.u, ref.u)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("averaged", [False, True])
@pytest.mark.parametrize("navg", [0.0, 3.0])
def test_output(dtype, averaged, navg):
    X, y = random_csr(dtype)
    be = emulated(X, y, 8)
    start_state(be, np.random.default_rng(9), averaging=True)
    be.s[S_NAVG] = navg
    ref = twin(X, y, be)
    w, b = be.output(averaged)
    w_ref, b_ref = ref.output(averaged)
    assert w.dtype == np.float64 and b.shape == ()
    np.testing.assert_allclose(w, w_ref, rtol=1e-15, atol=0)
    assert float(b) == pytest.approx(b_ref, rel=1e-15)


# ------------------------------------------------------------------ decision values, objective
@pytest.mark.parametrize("lanes", _kernels.LANE_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_decision_and_objective(dtype, lanes):
    X, y = random_csr(dtype)
    rng = np.random.default_rng(10)
    w = rng.normal(size=D)
    ref = NumpyBackend(X, y)
    for blocks in (1, 4):
        be = emulated(X, y, lanes, blocks=blocks)
        z = be.decision_function(w, 0.25)
        np.testing.assert_allclose(z, ref.decision_function(w, 0.25), rtol=1e-12, atol=1e-12)
        for reg_bias in (False, True):
            ev = be.evaluate(w, np.float64(0.25), 1e-3, reg_bias)
            ev_ref = ref.evaluate(w, 0.25, 1e-3, reg_bias)
            assert ev.loss == pytest.approx(ev_ref.loss, rel=1e-12)
            assert ev.sq_norm == pytest.approx(ev_ref.sq_norm, rel=1e-12)
            assert ev.objective == pytest.approx(ev_ref.objective, rel=1e-12)


def test_hinge_partials_are_repeatable():
    X, y = random_csr(np.float32)
    be = emulated(X, y, 16, blocks=4)
    w = np.random.default_rng(11).normal(size=D)
    first = be.evaluate(w, 0.0, 1e-2)
    assert all(be.evaluate(w, 0.0, 1e-2) == first for _ in range(3))


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


# ------------------------------------------------------------------ ThreadSanitizer
def tsan_launches(X, y, lanes, value_type, rng):
    """Every shipped kernel once, on 4-block grids, as the device backend launches them."""
    n, d = X.shape
    dt = X.dtype
    ip, ix, dx = X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data
    v = (0.1 * rng.normal(size=d)).astype(dt)
    u = rng.normal(size=d)
    s = np.zeros(N_SLOTS)
    s[S_A], s[S_VSQ], s[S_B], s[S_ASUM], s[S_NAVG] = 1.0, float(v.astype(np.float64) @ v), 0.1, 2.0, 1.0
    rows = rng.integers(0, n, size=n).astype(np.int32)      # i.i.d.: repeated rows
    rows[:4] = rows[4]
    m = np.empty(n)
    acc, ticket = np.zeros(4), np.zeros(2, dtype=np.uint32)
    w, b, z, part = np.empty(d), np.empty(1), np.empty(n), np.empty(4)
    sq = np.empty(n)
    nr, nd = np.int32(n), np.int64(d)
    row = lambda op: _kernels.row_kernel(op, lanes, value_type)     # noqa: E731
    vec = lambda op: _kernels.vector_kernel(op, value_type)         # noqa: E731
    B = _kernels.BLOCK
    return [
        (row("gpusvm_margins"), 4, B, (ip, ix, dx, y, v, rows, nr, s, m)),
        (row("gpusvm_pegasos_step"), 4, B, (ip, ix, dx, y, rows, nr, np.float64(n), m, v, u,
                                           np.int32(1), s, acc, ticket[0:1], np.float64(0.5),
                                           np.float64(1e-7), np.int32(1), np.float64(1e-3),
                                           np.int32(1))),
        (vec("gpusvm_renormalize"), 4, B, (v, u, np.int32(1), nd, s, ticket[1:2],
                                          np.float64(1e-6))),
        (vec("gpusvm_output"), 4, B, (v, u, np.int32(1), nd, s, w, b)),
        (row("gpusvm_decision"), 4, B, (ip, ix, dx, nr, w, b, z)),
        (row("gpusvm_hinge_sum"), 4, B, (ip, ix, dx, y, nr, w, b, part)),
        (row("gpusvm_row_sq_norms"), 4, B, (ip, dx, nr, sq)),
        (vec("gpusvm_reset_scale"), 4, B, (v, u, np.int32(1), nd, s)),
    ]


TSAN_CASES = [("a9a", 8, np.float32), ("rcv1_small", 32, np.float64)]
#: one ThreadSanitizer build serves every case
TSAN_INSTANCES = sorted(
    _kernels.row_kernel(op, lanes, _kernels.VALUE_TYPES[np.dtype(dt).name])
    for _, lanes, dt in TSAN_CASES for op in _kernels.ROW_KERNELS) + sorted(
    _kernels.vector_kernel(op, _kernels.VALUE_TYPES[np.dtype(dt).name])
    for _, _, dt in TSAN_CASES for op in _kernels.VECTOR_KERNELS)


@pytest.mark.parametrize("data, lanes, dtype", TSAN_CASES)
def test_tsan_is_silent_on_every_kernel(request, data, lanes, dtype):
    from tsan_runner import check_launches
    ds = request.getfixturevalue(data)
    X = ds.X[:96].astype(dtype)
    y = ds.y[:96].astype(dtype)
    value_type = _kernels.VALUE_TYPES[np.dtype(dtype).name]
    launches = tsan_launches(X, y, lanes, value_type, np.random.default_rng(12))
    names = [name for name, *_ in launches]
    assert {nm.split("<")[0] for nm in names} == set(_kernels.ROW_KERNELS + _kernels.VECTOR_KERNELS)
    assert set(names) <= set(TSAN_INSTANCES)
    rep = check_launches(code=_kernels.module_source(), launches=launches,
                         name_expressions=TSAN_INSTANCES, options=_kernels.compile_options())
    assert rep.ok, rep.output
    # the run did the work: the step shrank a below the threshold and renormalize folded it in
    s_after = rep.arrays[1][11]
    assert s_after[S_NACT] > 0 and s_after[S_NAVG] == 2.0
    assert s_after[S_ASUM] == 0.0         # the fold happened (then reset_scale kept A = 0)
    assert not rep.arrays[1][13].any()    # both tickets back to zero
