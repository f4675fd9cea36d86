"""The counter-based batches of every solver: gpusvm.solvers._sampling and its compiled twins.

A row of ``A_t`` is a pure function of ``(seed, t, j)``.  These tests check the
bijection it is built on, the distribution of the batches (chi-square tests with
fixed seeds, deterministic, at a 0.1% level: a correct sampler passes them by
construction of the seed, a biased one fails them by far), the first-occurrence
masks, and that the NumPy reference, the compiled CPU sampler and the CUDA
kernel (on the CPU emulator) draw bit-identical batches.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chi2

from gpusvm.solvers._sampling import (SAMPLING_MODES, CounterSampler, feistel_shape,
                                      first_occurrences, permute, seed_u64, stream_key)


def stream(n, k, mode, seed, batches):
    """The first ``batches`` batches, stacked: shape (batches, k)."""
    return CounterSampler(n, k, mode, seed).batches(0, batches)[0]


def chi2_statistic(counts, expected):
    counts = np.asarray(counts, dtype=np.float64)
    return float(np.sum((counts - expected) ** 2 / expected))


def assert_uniform(counts, level=1e-3):
    """Pearson's chi-square test of equal cell probabilities."""
    counts = np.asarray(counts)
    expected = counts.sum() / counts.size
    assert expected >= 20, "too few draws for the test"
    stat = chi2_statistic(counts, expected)
    assert stat <= chi2.ppf(1 - level, counts.size - 1), (stat, counts)


# ---------------------------------------------------------------------------- the bijection

@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 15, 16, 17, 64, 65, 1000, 4097, 100_003])
def test_permute_is_a_bijection_and_inverse_undoes_it(n):
    for key in (0, 1, 2**64 - 1, stream_key(7, 3)):
        q = np.arange(n)
        p = permute(q, n, key)
        np.testing.assert_array_equal(np.sort(p), q)
        np.testing.assert_array_equal(permute(p, n, key, inverse=True), q)


@pytest.mark.parametrize("n, h", [(1, 2), (4, 2), (5, 4), (16, 4), (17, 6), (2**20, 20),
                                  (2**20 + 1, 22), (2**31 - 1, 32)])
def test_feistel_domain_is_the_smallest_even_power_of_two(n, h):
    half, mask = feistel_shape(n)
    assert 2 * half == h and mask == 2**half - 1
    assert 2**h < 4 * n or h == 2            # fewer than 4 walks on average


def test_keys_of_neighbouring_counters_give_unrelated_permutations():
    """Permutations of consecutive batches share no more fixed positions than chance."""
    n = 1000
    perms = [permute(np.arange(n), n, stream_key(5, t)) for t in range(40)]
    same = [np.mean(a == b) for a, b in zip(perms, perms[1:])]
    assert max(same) < 0.02                  # chance: 1/n per position


# ---------------------------------------------------------------------------- seeds

@pytest.mark.parametrize("mode", SAMPLING_MODES)
def test_same_seed_same_batches(mode):
    a = stream(97, 5, mode, 123, 300)
    np.testing.assert_array_equal(a, stream(97, 5, mode, 123, 300))
    # a Generator seeded alike gives the same stream as another one seeded alike
    g1 = stream(97, 5, mode, np.random.default_rng(123), 50)
    g2 = stream(97, 5, mode, np.random.default_rng(123), 50)
    np.testing.assert_array_equal(g1, g2)
    # and another seed another stream
    assert not np.array_equal(a[:50], stream(97, 5, mode, 124, 50))


def test_seed_u64_wraps_ints_and_draws_from_generators():
    assert seed_u64(5) == 5
    assert seed_u64(-1) == 2**64 - 1
    assert seed_u64(np.int64(9)) == 9
    assert seed_u64(np.random.default_rng(1)) == seed_u64(np.random.default_rng(1))
    assert 0 <= seed_u64(None) < 2**64


@pytest.mark.parametrize("mode", SAMPLING_MODES)
@pytest.mark.parametrize("n, k", [(1, 1), (10, 1), (10, 3), (10, 10), (1000, 7), (50000, 300)])
def test_batch_shape_dtype_and_range(mode, n, k):
    rows, first = CounterSampler(n, k, mode, 0).batches(0, 20)
    assert rows.dtype == np.int32 and rows.shape == (20, k)
    assert rows.min() >= 0 and rows.max() < n
    assert first.dtype == bool and first.shape == (20, k)


@pytest.mark.parametrize("mode", SAMPLING_MODES)
@pytest.mark.parametrize("k", [0, 11])
def test_batch_size_outside_1_n_is_refused(mode, k):
    with pytest.raises(ValueError, match=r"batch size must satisfy 1 <= k <= n=10, got k=" + str(k)):
        CounterSampler(10, k, mode, 0)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="sampling must be one of"):
        CounterSampler(10, 2, "bootstrap", 0)


# ---------------------------------------------------------------------------- without replacement

def test_full_batch_without_replacement_is_every_row_every_time():
    """k = n without replacement: each A_t is the whole set, whatever the seed."""
    for seed in (0, 1, None):
        rows = stream(13, 13, "without_replacement", seed, 5)
        np.testing.assert_array_equal(np.sort(rows, axis=1), np.broadcast_to(np.arange(13), (5, 13)))


@pytest.mark.parametrize("n, k", [(10, 3), (10, 9), (20000, 3), (20000, 600)])
def test_without_replacement_has_distinct_rows_and_no_mask(n, k):
    s = CounterSampler(n, k, "without_replacement", 0)
    for t in range(30):
        rows, first = s.batch(t)
        assert first is None
        assert np.unique(rows).size == k


def test_without_replacement_is_a_uniform_k_subset():
    """n = 10, k = 3: every index, every pair and every one of the 120 subsets is
    equally likely (Rand(k) of Takáč et al.)."""
    n, k = 10, 3
    c = stream(n, k, "without_replacement", 2024, 16384)
    assert_uniform(np.bincount(c.ravel(), minlength=n))
    pairs = {p: i for i, p in enumerate(itertools.combinations(range(n), 2))}
    pair_counts = np.zeros(len(pairs), dtype=np.int64)
    subset_counts = {}
    for row in np.sort(c, axis=1):
        for p in itertools.combinations(row.tolist(), 2):
            pair_counts[pairs[p]] += 1
        key = tuple(row.tolist())
        subset_counts[key] = subset_counts.get(key, 0) + 1
    assert_uniform(pair_counts)
    assert len(subset_counts) == math.comb(n, k)
    assert_uniform(list(subset_counts.values()))


def test_without_replacement_is_uniform_on_a_large_set():
    """n = 20,000, k = 3: indices uniform over 20 bins, every position of a batch too,
    and ordered pairs of positions (0, 1) uniform over 10 x 10 bins."""
    n, k = 20000, 3
    c = stream(n, k, "without_replacement", 7, 8192).astype(np.int64)
    assert_uniform(np.bincount(c.ravel() * 20 // n, minlength=20))
    for col in range(k):
        assert_uniform(np.bincount(c[:, col] * 20 // n, minlength=20))
    assert_uniform(np.bincount((c[:, 0] * 10 // n) * 10 + c[:, 1] * 10 // n, minlength=100))


# ---------------------------------------------------------------------------- with replacement

def test_with_replacement_is_iid_uniform_and_repeats():
    """k i.i.d. uniform draws: uniform indices, uniform pairs of positions (independence),
    and repeated rows inside a batch as often as the birthday probability says."""
    n, k = 10, 4
    c = stream(n, k, "with_replacement", 11, 16384)
    assert_uniform(np.bincount(c.ravel(), minlength=n))
    assert_uniform(np.bincount(c[:, 0] * n + c[:, 1], minlength=n * n))
    repeated = np.mean([np.unique(r).size < k for r in c])
    p = 1 - math.perm(n, k) / n**k                                # 0.496
    sd = math.sqrt(p * (1 - p) / c.shape[0])
    assert abs(repeated - p) < 5 * sd, (repeated, p)


def test_with_replacement_masks_exactly_the_later_occurrences():
    s = CounterSampler(10, 8, "with_replacement", 3)
    for t in range(50):
        rows, first = s.batch(t)
        np.testing.assert_array_equal(first, first_occurrences(rows))


def test_first_occurrences_marks_repeats_only():
    chunk = np.array([[3, 1, 3, 3, 0], [2, 2, 1, 0, 4]], dtype=np.int32)
    expected = np.array([[1, 1, 0, 0, 1], [1, 0, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(first_occurrences(chunk), expected)
    np.testing.assert_array_equal(first_occurrences(chunk[0]), expected[0])


# ---------------------------------------------------------------------------- epochs

@pytest.mark.parametrize("n, k", [(12, 4), (12, 12), (30, 1), (1000, 8)])
def test_epoch_covers_every_row_once_per_epoch(n, k):
    """k divides n: each run of n/k consecutive batches is a permutation of the rows."""
    per = n // k
    c = stream(n, k, "epoch", 3, 6 * per)
    epochs = c.reshape(-1, n)
    np.testing.assert_array_equal(np.sort(epochs, axis=1),
                                  np.broadcast_to(np.arange(n), epochs.shape))
    assert len({tuple(e) for e in epochs.tolist()}) > 1        # freshly shuffled


def test_epoch_straddling_batches_mask_exactly_the_repeats():
    """k does not divide n: the rows, read in order, are one permutation after another; a
    batch that straddles two epochs is masked exactly at its repeated rows."""
    n, k = 10, 4
    s = CounterSampler(n, k, "epoch", 5)
    rows, first = s.batches(0, 60)
    flat = rows.ravel()
    blocks = flat[:(flat.size // n) * n].reshape(-1, n)
    np.testing.assert_array_equal(np.sort(blocks, axis=1), np.broadcast_to(np.arange(n), blocks.shape))
    np.testing.assert_array_equal(first, first_occurrences(rows))
    assert not first.all()                                     # some straddle repeats a row
    for t in range(60):
        straddles = (t * k) % n + k > n
        assert (s.batch(t)[1] is None) == (not straddles)


def test_epoch_permutations_are_uniform():
    """Position 0 and position 3 of each epoch are uniform over the rows, and jointly."""
    n = 8
    c = stream(n, 1, "epoch", 9, 8 * 4096).ravel().reshape(-1, n)
    assert_uniform(np.bincount(c[:, 0], minlength=n))
    assert_uniform(np.bincount(c[:, 3], minlength=n))
    assert_uniform(np.bincount(c[:, 0] * n + c[:, 3], minlength=n * n)[
        [a * n + b for a in range(n) for b in range(n) if a != b]])


# ---------------------------------------------------------------------------- every backend

CASES = [(mode, n, k) for mode in SAMPLING_MODES
         for n, k in [(1, 1), (10, 4), (17, 17), (1000, 1), (1000, 7), (5000, 333)]]


@pytest.mark.parametrize("mode, n, k", CASES)
def test_compiled_sampler_draws_the_reference_batches(mode, n, k):
    nb = pytest.importorskip("gpusvm.backends._counter_nb")
    from numba import njit
    draw = njit(lambda *args: nb.batch(*args))      # compiled for loops only: no Python entry
    s = CounterSampler(n, k, mode, 12345)
    rk, ecache, stamp, _, _ = nb.sampler_state(n)
    rows = np.empty(k, dtype=np.int32)
    first = np.ones(k, dtype=bool)
    # out of order too: the compiled state (cached epoch keys, stamps) must not leak
    for t in list(range(30)) + [5, 4, 1000, 3, 29]:
        ref_rows, ref_first = s.batch(t)
        has = draw(s.code, n, k, np.uint64(s.seed), s.half, s.mask, t, rows, first, rk,
                   ecache, stamp)
        np.testing.assert_array_equal(rows, ref_rows)
        if ref_first is None:
            assert not has or first.all()
        else:
            assert has
            np.testing.assert_array_equal(first, ref_first)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 255, 256, 1000, 1025])
@pytest.mark.parametrize("with_table", [True, False])
def test_epoch_order_is_the_reference_permutation(n, with_table):
    """A whole epoch drawn at once (table of the Feistel network, then lookups) gives the
    rows of the reference's epoch batches, position by position, epoch after epoch."""
    nb = pytest.importorskip("gpusvm.backends._counter_nb")
    s = CounterSampler(n, 1, "epoch", 987)
    rk, ecache, _, orders, table = nb.sampler_state(1, n, s.half)
    order = orders[0]
    assert table.size == (1 << (2 * s.half))
    if not with_table:
        table = table[:0]
    for e in (0, 1, 7, 2):
        nb.epoch_order(n, np.uint64(s.seed), s.half, s.mask, e, rk, ecache, table, order)
        assert ecache[2] == e
        expected = np.concatenate([s.batch(e * n + q)[0] for q in range(n)])
        np.testing.assert_array_equal(order, expected)
        np.testing.assert_array_equal(s.epoch(e), expected)      # the host's, in NumPy
        np.testing.assert_array_equal(np.sort(order), np.arange(n))


def test_epoch_table_is_capped():
    nb = pytest.importorskip("gpusvm.backends._counter_nb")
    half = 13                                       # 2^26 > MAX_TABLE entries: no table
    assert nb.sampler_state(1, 10, half)[4].size == 0
    assert nb.sampler_state(1, 10, 12)[4].size == 1 << 24 == nb.MAX_TABLE


@pytest.mark.parametrize("mode, n, k", [c for c in CASES if c[1] <= 1000])
def test_cuda_sampler_on_the_emulator_draws_the_reference_batches(mode, n, k):
    """The kernels gpusvm_sample_next<MODE> and gpusvm_sample_firsts_next, run by the CPU emulator."""
    import scipy.sparse as sp

    from gpusvm.backends.device import make_device_backend
    X = sp.csr_matrix(np.ones((n, 2)))
    be = make_device_backend("emulated", X, np.ones(n))
    s = CounterSampler(n, k, mode, 99)
    buffers = be._sampler_buffers(s)
    for t in list(range(12)) + [40, 41]:
        be._counter[...] = t
        for fn, grid, args in be._sample_launches(s, bump_in_firsts=True):
            be._call(fn, grid, args)
        ref_rows, ref_first = s.batch(t)
        np.testing.assert_array_equal(buffers[0], ref_rows)
        if mode != "without_replacement":
            expect = np.ones(k, dtype=bool) if ref_first is None else ref_first
            np.testing.assert_array_equal(buffers[1].astype(bool), expect)


def test_compiled_sampler_constants_are_the_reference_ones():
    """The compiled sampler spells its constants out (numba caches by file): they must agree."""
    nb = pytest.importorskip("gpusvm.backends._counter_nb")
    from gpusvm.solvers import _sampling
    assert (nb.GOLDEN, nb.ROUNDS) == (_sampling.GOLDEN, _sampling.ROUNDS)
