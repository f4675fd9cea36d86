"""The batch stream of every solver: gpusvm.solvers._sampling.BatchSampler.

Uniformity checks are chi-square tests with fixed seeds (deterministic), at a
0.1% level: a correct sampler passes them by construction of the seed, a biased
one (a skewed index, a repeated row, a missed row) fails them by far.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chi2

from gpusvm.solvers._sampling import CHUNK_ROWS, SAMPLING_MODES, BatchSampler, chunk_length


def stream(n, k, mode, seed, chunks):
    """``chunks`` consecutive chunks, stacked: shape (chunks * c, k)."""
    s = BatchSampler(n, k, mode, seed)
    return np.concatenate([s.next_chunk() for _ in range(chunks)])


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


# ---------------------------------------------------------------------------- shapes

@pytest.mark.parametrize("mode", SAMPLING_MODES)
@pytest.mark.parametrize("n, k", [(1, 1), (10, 1), (10, 3), (10, 10), (1000, 7), (50000, 300)])
def test_chunk_shape_dtype_and_range(mode, n, k):
    s = BatchSampler(n, k, mode, 0)
    c = s.next_chunk()
    assert c.dtype == np.int32 and c.ndim == 2
    assert c.shape == (chunk_length(n, k), k)
    assert c.min() >= 0 and c.max() < n


@pytest.mark.parametrize("n, k", [(10, 1), (10, 3), (1000, 7), (50000, 300), (10**6, 10**5),
                                  (10**7, 2 * CHUNK_ROWS)])
def test_chunk_length_depends_only_on_n_and_k(n, k):
    """Every mode and seed draws chunks of the same length, ``chunk_length(n, k)``,
    which keeps a chunk within CHUNK_ROWS indices (or one batch)."""
    c = chunk_length(n, k)
    assert c >= 1
    assert c * k <= CHUNK_ROWS or c == 1
    if k > CHUNK_ROWS:
        return                        # a single huge batch: not drawn here (memory)
    for mode in SAMPLING_MODES:
        for seed in (0, 1, np.random.default_rng(5)):
            s = BatchSampler(n, k, mode, seed)
            assert s.chunk == c
            if n * k <= 10**7:
                assert s.next_chunk().shape == (c, k)
                assert s.next_chunk().shape == (c, k)      # the second chunk too


@pytest.mark.parametrize("mode", SAMPLING_MODES)
def test_shorter_chunk_on_request(mode):
    s = BatchSampler(100, 5, mode, 0)
    assert s.next_chunk(17).shape == (17, 5)
    assert s.next_chunk(10**9).shape == (chunk_length(100, 5), 5)


@pytest.mark.parametrize("k", [0, -1, 11, 100])
@pytest.mark.parametrize("mode", SAMPLING_MODES)
def test_bad_batch_size_raises(mode, k):
    with pytest.raises(ValueError, match="batch size"):
        BatchSampler(10, k, mode, 0)


def test_bad_mode_raises():
    with pytest.raises(ValueError, match="sampling must be one of"):
        BatchSampler(10, 2, "bootstrap", 0)


# ---------------------------------------------------------------------------- reproducibility

@pytest.mark.parametrize("mode", SAMPLING_MODES)
def test_same_seed_same_batches(mode):
    a = stream(97, 5, mode, 123, chunks=3)
    b = stream(97, 5, mode, 123, chunks=3)
    np.testing.assert_array_equal(a, b)
    # a Generator seeded alike gives the same stream as the integer seed
    c = stream(97, 5, mode, np.random.default_rng(123), chunks=3)
    np.testing.assert_array_equal(a, c)
    # and another seed another stream
    d = stream(97, 5, mode, 124, chunks=1)
    assert not np.array_equal(a[:d.shape[0]], d)


def test_full_batch_without_replacement_is_every_row_every_time():
    """k = n without replacement: each A_t is the whole set, whatever the seed."""
    for seed in (0, 1, None):
        c = BatchSampler(13, 13, "without_replacement", seed).next_chunk()
        np.testing.assert_array_equal(c, np.broadcast_to(np.arange(13), c.shape))


# ---------------------------------------------------------------------------- without replacement

@pytest.mark.parametrize("n, k", [(10, 3), (10, 9), (20000, 3), (20000, 600)])
def test_without_replacement_has_distinct_rows(n, k):
    c = stream(n, k, "without_replacement", 0, chunks=1)
    s = np.sort(c, axis=1)
    assert np.all(s[:, 1:] != s[:, :-1])


def test_without_replacement_is_a_uniform_k_subset():
    """n = 10, k = 3: every index, every pair and every one of the 120 subsets is
    equally likely (Rand(k) of Takáč et al.)."""
    n, k = 10, 3
    c = stream(n, k, "without_replacement", 2024, chunks=4)       # 16,384 batches
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
    """n = 20,000 and k = 3 (NumPy draws such subsets differently from small ones):
    indices uniform over 20 bins, and the order inside a batch carries no bias."""
    n, k = 20000, 3
    c = stream(n, k, "without_replacement", 7, chunks=2)
    assert_uniform(np.bincount(c.ravel() * 20 // n, minlength=20))
    for col in range(k):
        assert_uniform(np.bincount(c[:, col] * 20 // n, minlength=20))


# ---------------------------------------------------------------------------- with replacement

def test_with_replacement_is_iid_uniform_and_repeats():
    """k i.i.d. uniform draws: uniform indices, uniform pairs of positions (independence),
    and repeated rows inside a batch as often as the birthday probability says."""
    n, k = 10, 4
    c = stream(n, k, "with_replacement", 11, chunks=4)             # 16,384 batches
    assert_uniform(np.bincount(c.ravel(), minlength=n))
    assert_uniform(np.bincount(c[:, 0] * n + c[:, 1], minlength=n * n))
    repeated = np.mean([np.unique(r).size < k for r in c])
    p = 1 - math.perm(n, k) / n**k                                # 0.496
    sd = math.sqrt(p * (1 - p) / c.shape[0])
    assert abs(repeated - p) < 5 * sd, (repeated, p)


def test_with_replacement_full_batch_is_not_the_whole_set():
    c = stream(50, 50, "with_replacement", 0, chunks=1)
    assert all(np.unique(r).size < 50 for r in c[:100])


# ---------------------------------------------------------------------------- epochs

@pytest.mark.parametrize("n, k", [(12, 4), (12, 12), (30, 1), (1000, 8)])
def test_epoch_covers_every_row_once_per_epoch(n, k):
    """k divides n: each run of n/k consecutive batches is a permutation of the rows,
    across chunk boundaries too."""
    c = stream(n, k, "epoch", 3, chunks=2)
    per = n // k
    epochs = c[:(c.shape[0] // per) * per].reshape(-1, n)
    assert epochs.shape[0] >= 2 * chunk_length(n, k) // per - 1
    np.testing.assert_array_equal(np.sort(epochs, axis=1),
                                  np.broadcast_to(np.arange(n), epochs.shape))
    # epochs are freshly shuffled, not one permutation repeated
    assert len({tuple(e) for e in epochs[:20].tolist()}) > 1


def test_epoch_stream_is_a_sequence_of_permutations_when_k_does_not_divide_n():
    """k does not divide n: the rows, read in order, are still one permutation of the
    n rows after another (a batch that straddles two epochs may repeat a row)."""
    n, k = 10, 4
    rows = stream(n, k, "epoch", 5, chunks=2).ravel()
    blocks = rows[:(rows.size // n) * n].reshape(-1, n)
    np.testing.assert_array_equal(np.sort(blocks, axis=1),
                                  np.broadcast_to(np.arange(n), blocks.shape))
    batches = rows[:(rows.size // k) * k].reshape(-1, k)
    assert any(np.unique(b).size < k for b in batches)


def test_epoch_permutations_are_uniform():
    """Position 0 of each epoch is uniform over the rows."""
    n = 8
    c = stream(n, 1, "epoch", 9, chunks=8).ravel()          # 4096 epochs of 8 batches of 1
    assert_uniform(np.bincount(c[::n], minlength=n))
