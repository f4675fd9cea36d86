"""The kernels of a captured segment, one by one, against the NumPy reference; and under TSAN.

``gpusvm_sample_next`` / ``gpusvm_sample_firsts_next`` (the batch from a device counter),
``gpusvm_optimal_bias`` (radix selection, counted or weighted), ``gpusvm_reset_scale``,
``gpusvm_margins`` / ``gpusvm_sdca_margins`` (the gathers that draw their batch) and
``gpusvm_pegasos_step`` / ``gpusvm_sdca_rho`` / ``gpusvm_sdca_apply`` (the scatters, with
their last-block finishes), in both specialisations of kernels/outputs.cuh (``M1 = 1``: tiles
balanced by nonzeros; ``M1 = 0``: one thread per row and output), run on the CPU emulator.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import _kernels
from gpusvm.backends import make_backend
from gpusvm.backends._state import N_SLOTS, S_A, S_ASUM, S_B, S_VSQ
from gpusvm.backends.base import step_size
from gpusvm.backends._general import optimal_bias_weighted_xp
from gpusvm.solvers._sampling import CounterSampler, feistel_shape

B = _kernels.BLOCK


@pytest.fixture(scope="module")
def mod():
    return _kernels.load_module("emulated")


@pytest.mark.parametrize("code, mode", [(0, "without_replacement"), (1, "with_replacement"),
                                        (2, "epoch")])
def test_sample_next_reads_and_advances_the_counter(mod, code, mode):
    n, k, seed = 97, 40, 12345
    sampler = CounterSampler(n, k, mode, seed)
    half, mask = feistel_shape(n)
    rows, first = np.zeros(k, np.int32), np.ones(k, np.int32)
    stamp = np.zeros(n, np.uint64)
    counter, ticket = np.array([5], np.int64), np.zeros(1, np.uint32)
    fn = mod.get_function(_kernels.SEGMENT_SAMPLER_KERNELS[code])
    firsts = mod.get_function(_kernels.SEGMENT_SAMPLER_KERNELS[3])
    for t in (5, 6, 7):
        bump = np.int32(code != 1)
        fn((3,), (B,), (np.uint64(seed), np.int32(n), np.int32(k), np.int32(half), np.uint32(mask),
                        counter, ticket, bump, rows, first, stamp))
        if code == 1:
            assert counter[0] == t                       # the firsts kernel advances it
            firsts((3,), (B,), (rows, stamp, np.int32(k), counter, ticket, first))
        assert counter[0] == t + 1 and ticket[0] == 0
        ref_rows, ref_first = sampler.batch(t)
        np.testing.assert_array_equal(rows, ref_rows)
        if ref_first is not None:
            np.testing.assert_array_equal(first.astype(bool), ref_first)


@pytest.mark.parametrize("k", [1, 2, 7, 300, 1000])
@pytest.mark.parametrize("ties", [False, True])
def test_optimal_bias_kernel_matches_the_sorting_reference(mod, k, ties):
    rng = np.random.default_rng(k + 7 * ties)
    for trial in range(4):
        n = 2 * k + 3
        y = np.where(rng.random(n) < (0.5 if trial < 3 else 0.0), 1.0, -1.0)   # last: no positive
        rows = rng.integers(0, n, size=k).astype(np.int32)
        m = rng.normal(size=k) * 2.0
        if ties:
            m = np.round(m, 1)                                   # many equal breakpoints
        state = np.zeros(N_SLOTS)
        state[S_B] = rng.normal()
        y_b = y[rows]
        s = y_b * m - state[S_B]
        b_ref = float(optimal_bias_weighted_xp(np, y_b, s, np.ones(k)))
        m_ref = 1.0 + y_b * (b_ref - (y_b - s))
        for wt in (0, 1):                                        # unit weights: the same b
            m_dev, st, bp = m.copy(), state.copy(), np.empty(k)
            mod.get_function(f"gpusvm_optimal_bias<double,{wt}>")(
                (1,), (B,), (y, np.ones(n), rows, np.int32(k), np.int32(1), st, m_dev, bp))
            assert st[S_B] == b_ref
            np.testing.assert_array_equal(m_dev, m_ref)


@pytest.mark.parametrize("schedule, eta0, p, t, resets", [
    ("pegasos", 0.0, 0.7, 1, True), ("pegasos", 0.0, 0.7, 2, False),
    ("norma", 0.0, 1.0, 1, True), ("norma", 0.0, 0.7, 1, False),
    ("constant", 100.0, 0.7, 9, True), ("constant", 0.5, 0.7, 9, False)])
def test_reset_scale_only_where_the_shrink_is_zero(mod, schedule, eta0, p, t, resets):
    lam, d = 1e-2, 300
    rng = np.random.default_rng(0)
    v, u = rng.normal(size=d), rng.normal(size=d)
    s = np.zeros(N_SLOTS)
    s[S_A], s[S_VSQ], s[S_ASUM] = 0.5, float(v @ v), 2.0
    v0, u0, s0 = v.copy(), u.copy(), s.copy()
    code = ("pegasos", "norma", "constant").index(schedule)
    mod.get_function("gpusvm_reset_scale<double>")(
        (2,), (B,), (v, u, np.int32(1), np.int64(d), np.int32(1), s, np.array([t], np.int64),
                     np.int32(code), np.float64(lam), np.float64(eta0), np.float64(p)))
    assert (step_size(schedule, t, lam, eta0, p)[1] == 0.0) == resets
    if resets:
        assert not v.any() and s[S_A] == 1.0 and s[S_VSQ] == 0.0
        np.testing.assert_allclose(u, u0 - 2.0 * v0)
    else:
        np.testing.assert_array_equal(v, v0)
        np.testing.assert_array_equal(u, u0)
        np.testing.assert_array_equal(s, s0)


@pytest.mark.parametrize("outputs", [1, 3])
def test_segment_step_folds_the_renormalisation_into_its_last_block(outputs):
    """A threshold above |a| makes every step fold a into v: the NumPy backend's
    renormalize after every step, with the averaging vector kept consistent."""
    rng = np.random.default_rng(3)
    X = sp.random(200, 30, density=0.3, random_state=rng, format="csr")
    X.sort_indices()
    y = np.where(rng.random((200, outputs)) < 0.5, 1.0, -1.0)
    from gpusvm.backends.base import PegasosPlan
    plan = PegasosPlan(lam=1e-2, k=16, averaged=True, t_avg=2, renorm_threshold=2.0)
    out = {}
    for name in ("numpy", "emulated"):
        be = make_backend(name, X, y)
        be.init_state_m(averaging=True)
        sampler = CounterSampler(200, 16, "epoch", 4)
        be.pegasos_segment_m(sampler, 0, 3, plan)
        be.pegasos_segment_m(sampler, 3, 12, plan)
        s = be.to_host(be.sm) if name == "emulated" else be.sm
        w, b = be.output_m(averaged=True)
        out[name] = (np.asarray(be.to_host(w) if name == "emulated" else w), s[S_A])
    assert (out["emulated"][1] == 1.0).all() and (out["numpy"][1] == 1.0).all()   # folded
    np.testing.assert_allclose(out["emulated"][0], out["numpy"][0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("M, flags", [(1, "0,0"), (3, "1,1")])
def test_tsan_is_silent_on_the_segment_kernels(M, flags):
    """A Pegasos iteration of each specialisation (one output, unweighted hinge; three outputs,
    weighted squared hinge) under ThreadSanitizer, the last block folding every scale."""
    from tsan_runner import check_launches
    rng = np.random.default_rng(5)
    n, d, k = 96, 50, 96
    X = sp.random(n, d, density=0.2, random_state=rng, format="csr", dtype=np.float32)
    X.sort_indices()
    ip, ix, dx = X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data
    Y = np.where(rng.random((n, M)) < 0.5, 1.0, -1.0).astype(np.float32)
    sw = rng.uniform(0.0, 2.0, size=(n, M))
    half, mask = feistel_shape(n)
    rows, first, stamp = np.zeros(k, np.int32), np.ones(k, np.int32), np.zeros(n, np.uint64)
    counter, sticket = np.array([0], np.int64), np.zeros(1, np.uint32)
    V = (0.1 * rng.normal(size=(d, M))).astype(np.float32)
    U = np.zeros((d, M))
    s = np.zeros((N_SLOTS, M))
    s[S_A], s[S_VSQ], s[S_ASUM] = 1.0, (V.astype(np.float64) ** 2).sum(axis=0), 1.0
    m = rng.normal(size=(k, M)) * 0.5
    acc, ticket, bp = np.zeros(7 * M), np.zeros(1, np.uint32), np.empty((M, k))
    head = (np.uint64(9), np.int32(n), np.int32(k), np.int32(half), np.uint32(mask), counter,
            sticket)
    sched = (np.int32(0), np.float64(1e-2), np.float64(0.0), np.float64(0.7))
    m1 = int(M == 1)
    tile = np.int32(24)                                  # M = 1: 4 tiles of 24 rows, 4 blocks
    m_g, m_g2 = np.empty((k, M)), np.empty((k, M))
    gather = f"gpusvm_margins<float,{m1}>"
    csr = (ip, ix, dx)
    launches = [
        ("gpusvm_sample_next<1>", 4, B, head + (np.int32(0), rows, first, stamp)),
        ("gpusvm_sample_firsts_next", 4, B, (rows, stamp, np.int32(k), counter, sticket, first)),
        (f"gpusvm_optimal_bias<float,{flags[-1]}>", M, B, (Y, sw, rows, np.int32(k), np.int32(M),
                                                          s, m, bp)),
        ("gpusvm_reset_scale<float>", 4, B, (V, U, np.int32(1), np.int64(d), np.int32(M), s,
                                             counter) + sched),
        # batch 1 of the epochs stream drawn by the gather itself (it advances the counter)
        (gather, 4, B, csr + (Y, V, rows, np.int32(k), tile, np.int32(M), s, m_g, np.int32(2))
         + head[:2] + head[3:] + (first,)),
        (gather, 4, B, csr + (Y, V, rows, np.int32(k), tile, np.int32(M), s, m_g2, np.int32(-1))
         + head[:2] + head[3:] + (first,)),
        (f"gpusvm_pegasos_step<float,{m1},{flags}>", 4, B,
         csr + (Y, sw, rows, np.int32(k), tile, np.int32(M), np.float64(k), m, V, U, np.int32(1),
                np.int64(d), s, acc, ticket, counter) + sched
         + (np.int32(1), np.float64(10.0), np.int32(1), np.int64(1), np.float64(1e300))),
    ]
    names = sorted({name for name, *_ in launches})
    rep = check_launches(code=_kernels.module_source(), launches=launches, name_expressions=names,
                         options=_kernels.compile_options())
    assert rep.ok, rep.output
    step = rep.arrays[6]
    assert step[18][0] == 2                              # two batches drawn
    assert (step[15][S_A] == 1.0).all() and (step[15][S_ASUM] == 0.0).all()   # folded
    assert not step[16].any() and step[17][0] == 0      # acc, ticket clean
    assert rep.arrays[4][-2][0] == 0                     # the sampler's ticket clean
    drawn, _ = CounterSampler(n, k, "epoch", 9).batch(1)
    np.testing.assert_array_equal(rep.arrays[4][5], drawn)
    assert np.isfinite(rep.arrays[4][10]).all()         # every margin written
    np.testing.assert_array_equal(rep.arrays[5][10], rep.arrays[4][10])   # read rows = drawn


@pytest.mark.parametrize("m1", [1, 0])
@pytest.mark.parametrize("k, tile, dtype", [(1, 1, np.float64), (37, 10, np.float64),
                                            (300, 75, np.float32), (300, 256, np.float64)])
def test_margins_match_the_definition(mod, k, tile, dtype, m1):
    rng = np.random.default_rng(k)
    n, d = 400, 60
    lengths = rng.integers(0, 12, size=n)
    lengths[5] = 60                                       # a long row, in every batch below
    lengths[9] = 0                                        # an empty row
    X = sp.lil_matrix((n, d))
    for r, ln in enumerate(lengths):
        X[r, rng.choice(d, size=ln, replace=False)] = rng.normal(size=ln)
    X = sp.csr_matrix(X, dtype=dtype)
    X.sort_indices()
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0).astype(dtype)
    v = rng.normal(size=d).astype(dtype)
    rows = rng.integers(0, n, size=k).astype(np.int32)
    rows[0] = 5
    if k > 2:
        rows[1] = 9
    s = np.zeros(N_SLOTS)
    s[S_A], s[S_B] = 0.7, -0.2
    m = np.full(k, np.nan)
    grid = max(1, -(-k // tile))
    vt = _kernels.VALUE_TYPES[np.dtype(dtype).name]
    mod.get_function(f"gpusvm_margins<{vt},{m1}>")(
        (min(grid, 4),), (B,), (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y,
                                v, rows, np.int32(k), np.int32(tile), np.int32(1), s, m,
                                np.int32(-1),
                                np.uint64(0), np.int32(n), np.int32(1), np.uint32(1),
                                np.zeros(1, np.int64), np.zeros(1, np.uint32),
                                np.ones(k, np.int32)))
    ref = y[rows].astype(np.float64) * (0.7 * (X.astype(np.float64) @ v.astype(np.float64))[rows]
                                        + (-0.2))
    np.testing.assert_allclose(m, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k, tile", [(3, 3), (24, 6)])
def test_margins_of_rows_over_many_chunks_and_windows(mod, k, tile):
    """The one-output gather on rows of several 32-nonzero chunks (a partial last chunk) and on
    a row of more chunks than the block's window of chunk sums (2,063 chunks: two windows of
    CHUNK_WINDOW = 2048): every margin is the float64 dot product of its row."""
    rng = np.random.default_rng(k)
    n, d = 40, 70_000
    lengths = rng.integers(100, 700, size=n)
    lengths[3] = 66_000                                   # 2,063 chunks > CHUNK_WINDOW
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = np.concatenate([np.sort(rng.choice(d, size=ln, replace=False))
                              for ln in lengths]).astype(np.int32)
    X = sp.csr_matrix((rng.normal(size=indptr[-1]), indices, indptr), shape=(n, d))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    v = rng.normal(size=d)
    rows = rng.integers(0, n, size=k).astype(np.int32)
    rows[0] = 3
    s = np.zeros(N_SLOTS)
    s[S_A], s[S_B] = 1.3, 0.1
    m = np.full(k, np.nan)
    mod.get_function("gpusvm_margins<double,1>")(
        (-(-k // tile),), (B,), (indptr, indices, X.data, y, v, rows, np.int32(k),
                                 np.int32(tile), np.int32(1), s, m, np.int32(-1), np.uint64(0),
                                 np.int32(n), np.int32(1), np.uint32(1), np.zeros(1, np.int64),
                                 np.zeros(1, np.uint32), np.ones(k, np.int32)))
    ref = y[rows] * (1.3 * (X @ v)[rows] + 0.1)
    np.testing.assert_allclose(m, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m1", [1, 0])
@pytest.mark.parametrize("code, mode", [(0, "without_replacement"), (2, "epoch")])
@pytest.mark.parametrize("kernel", ["margins", "sdca_margins"])
def test_gather_draws_the_batch_the_sampler_draws(mod, code, mode, kernel, m1):
    """A gather that draws its batch (draw = mode code) writes the sampler's rows and
    first-occurrence mask for every position (batches across epoch boundaries, with repeats),
    gives the margins of the drawn rows, and advances the counter once, leaving its ticket clean."""
    from gpusvm.backends._state import S_BETA
    rng = np.random.default_rng(code + 3)
    n, d, k, tile = 400, 30, 300, 40          # 8 tiles over 4 blocks; epochs of 400 rows
    X = sp.random(n, d, density=0.2, random_state=rng, format="csr", dtype=np.float64)
    X.sort_indices()
    ip, ix = X.indptr.astype(np.int64), X.indices.astype(np.int32)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    v = rng.normal(size=d)
    s = np.zeros(N_SLOTS)
    s[S_A], s[S_B], s[S_BETA] = 0.7, -0.2, 3.0
    q = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    alpha = rng.uniform(0.0, 1.0, size=n)
    half, mask = feistel_shape(n)
    sampler = CounterSampler(n, k, mode, 11)
    counter, ticket = np.zeros(1, np.int64), np.zeros(1, np.uint32)
    draw = (np.int32(code), np.uint64(11), np.int32(n), np.int32(half), np.uint32(mask), counter,
            ticket)
    seen_repeat = False
    for t in range(4):                          # batch 1 (positions 300-599) crosses an epoch
        rows, first = np.full(k, -1, np.int32), np.full(k, -1, np.int32)
        m, delta = np.full(k, np.nan), np.full(k, np.nan)
        counter[0] = t
        head = (ip, ix, X.data, y, v, rows, np.int32(k), np.int32(tile), np.int32(1), s)
        if kernel == "margins":
            mod.get_function(f"gpusvm_margins<double,{m1}>")((4,), (B,), head + (m,) + draw
                                                             + (first,))
        else:
            mod.get_function(f"gpusvm_sdca_margins<double,{m1},0,0>")(
                (4,), (B,), head + (alpha, q, np.zeros(1), first, np.int32(code != 0),
                                    np.float64(1e-2 * n), m, delta) + draw)
        ref_rows, ref_first = sampler.batch(t)
        ref_first = np.ones(k, bool) if ref_first is None else ref_first
        seen_repeat |= not ref_first.all()
        np.testing.assert_array_equal(rows, ref_rows)
        np.testing.assert_array_equal(first, ref_first.astype(np.int32))
        assert counter[0] == t + 1 and ticket[0] == 0
        ref_m = y[ref_rows] * (0.7 * (X @ v)[ref_rows] - 0.2)
        np.testing.assert_allclose(m, ref_m, rtol=1e-12, atol=1e-12)
        if kernel == "sdca_margins":
            c = 1e-2 * n / 3.0
            with np.errstate(divide="ignore"):                 # zero rows: 1 - alpha
                ref_d = np.clip(c * (1 - ref_m) / q[ref_rows], -alpha[ref_rows],
                                1 - alpha[ref_rows])
            ref_d[~ref_first] = 0.0
            np.testing.assert_allclose(delta, ref_d, rtol=1e-12, atol=1e-12)
    assert seen_repeat == (code == 2)


@pytest.mark.parametrize("M, flags", [(1, "0,0"), (3, "0,1")])
def test_tsan_is_silent_on_the_sdca_kernels(M, flags):
    """An aggressive SDCA iteration of each specialisation (a rejected and an accepted checked
    step, an unchecked one), with repeated rows and a zero row, under ThreadSanitizer."""
    from tsan_runner import check_launches
    from gpusvm.backends._state import S_BETA, S_NREJ
    from gpusvm.solvers._sampling import first_occurrences
    rng = np.random.default_rng(8)
    n, d = 96, 40
    X = sp.random(n, d, density=0.25, random_state=rng, format="csr", dtype=np.float32)
    X.data[X.indptr[5]:X.indptr[6]] = 0.0
    X.eliminate_zeros()
    X.sort_indices()
    csr = (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data)
    Y = np.where(rng.random((n, M)) < 0.5, 1.0, -1.0).astype(np.float32)
    sw = np.ones((n, M))
    V = (0.1 * rng.normal(size=(d, M))).astype(np.float32)
    s = np.zeros((N_SLOTS, M))
    s[S_A], s[S_VSQ], s[S_BETA] = 1.0, (V.astype(np.float64) ** 2).sum(axis=0), 4.0
    q = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    alpha = np.where(q[:, None] == 0, 1.0, rng.uniform(0.0, 0.5, size=(n, M)))
    rows = rng.integers(0, n, size=n).astype(np.int32)
    rows[:4] = rows[4]
    first = first_occurrences(rows[None, :])[0].astype(np.int32)
    m, tentative, final = np.empty((n, M)), np.empty((n, M)), np.empty((n, M))
    scratch, acc, ticket = np.zeros((d, M)), np.zeros(7 * M), np.zeros(1, np.uint32)
    k, nd, lam, tile, MM = np.int32(n), np.float64(n), 1e-2, np.int32(24), np.int32(M)
    m1 = int(M == 1)

    def apply(lam_, check, phase, fused=0):
        return (f"gpusvm_sdca_apply<float,{m1},{flags}>", 4, B,
                csr + (Y, sw, rows, k, tile, MM, final, V, alpha, s, acc, ticket,
                       np.float64(lam_), nd, np.int32(check), np.int32(phase), m, q, first,
                       np.int32(1), scratch, tentative, np.int32(fused)))

    launches = [
        (f"gpusvm_sdca_margins<float,{m1},{flags}>", 4, B,
         csr + (Y, V, rows, k, tile, MM, s, alpha, q, sw, first, np.int32(1),
                np.float64(lam * n), m, tentative, np.int32(-1), np.uint64(0), k, np.int32(1),
                np.uint32(1), np.zeros(1, np.int64), np.zeros(1, np.uint32))),
        (f"gpusvm_sdca_rho<float,{m1}>", 4, B,
         csr + (Y, rows, k, tile, MM, tentative, q, scratch, s, acc, ticket, np.float64(8.0),
                np.float64(0.5))),
        apply(1e-2, 1, 0, 1), apply(1e-2, 1, 1, 1),         # the steps with the adapted beta
        #                                                     computed, then rho's scratch cleaned
        apply(1e-4, 1, 0), apply(1e-4, 1, 1),               # D drops: rejected, undone
        apply(1e3, 1, 0), apply(1e3, 1, 1),                 # D grows: accepted
        apply(1e3, 0, 0),                                   # unchecked
    ]
    names = sorted({name for name, *_ in launches})
    rep = check_launches(code=_kernels.module_source(), launches=launches, name_expressions=names,
                         options=_kernels.compile_options())
    assert rep.ok, rep.output
    st, scr, ac, tk = rep.arrays[1][11], rep.arrays[1][10], rep.arrays[1][12], rep.arrays[1][13]
    assert (st[S_NREJ] == 1.0).all() and (1.0 <= st[S_BETA]).all() and (st[S_BETA] <= 8.0).all()
    assert not scr.any() and not ac.any() and not tk.any()  # the scratch is clean again
    assert (rep.arrays[0][10][5] == 1.0).all()              # the zero row stays at alpha = 1


@pytest.mark.parametrize("kind", ["pegasos", "sdca"])
def test_column_table_crowded_and_hot_columns_match_numpy(kind):
    """The scatters of balanced.cuh (Pegasos' step, SDCA's rho and apply, one output) with a tile whose
    columns overflow the shared table (the fallback atomics) and a column in every row (the
    aggregated atomic): a replayed segment gives the NumPy backend's iterate."""
    import scipy.sparse as sp

    from gpusvm.backends import make_backend
    from gpusvm.backends.base import PegasosPlan, SDCAPlan
    from gpusvm.solvers._sampling import CounterSampler

    rng = np.random.default_rng(7)
    n, d = 300, 6000
    X = sp.random(n, d, density=0.015, format="csr", random_state=rng, dtype=np.float64)
    X = sp.hstack([X, sp.csr_matrix(np.full((n, 1), 0.5))], format="csr")   # a hot column
    X.sort_indices()
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    k = 256                        # 4 emulated blocks: tiles of 64 rows, ~5,800 nonzeros each
    out = {}
    for backend in ("numpy", "emulated"):
        be = make_backend(backend, X, y)
        be.init_state_m()
        if kind == "pegasos":
            p = PegasosPlan(lam=1e-2, k=k)
            run = be.pegasos_segment_m
        else:
            be.init_dual_m(3.0)
            p = SDCAPlan(lam=1e-2, beta_b=3.0, aggressive=True)
            run = be.sdca_segment_m
        sampler = CounterSampler(n, k, "without_replacement", 2)
        run(sampler, 0, 3, p)
        w, b = be.output_m(False)
        out[backend] = (np.asarray(be.to_host(w) if backend == "emulated" else w),
                        np.asarray(be.to_host(be.sm) if backend == "emulated" else be.sm))
    np.testing.assert_allclose(out["emulated"][0], out["numpy"][0], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(out["emulated"][1], out["numpy"][1], rtol=1e-9, atol=1e-12)
