"""gpusvm.solvers.policy.device_batch_size: the batch that minimises the predicted device time."""

from __future__ import annotations

import math

import pytest

from gpusvm.solvers.policy import (DEVICE_ITERATION_SECONDS, DEVICE_SECONDS_PER_NNZ,
                                   device_batch_size, predicted_device_seconds)


@pytest.mark.parametrize("sigma2", [0.05, 0.3, 0.9])
@pytest.mark.parametrize("nnz", [20.0, 400.0])
def test_choice_is_the_closed_form_minimiser(sigma2, nnz):
    """For large ``n`` the prediction is ``A t0 / b + B c b + const``: the chosen power of two
    lies within a factor sqrt(2) of ``sqrt(A t0 / (B c))``, and no power of two is better."""
    n = 10 ** 7
    lam = 1.0 / n
    b = device_batch_size(n, lam, sigma2, nnz)
    A = n + (1 - sigma2) / lam
    B = sigma2 / lam
    t0, c = DEVICE_ITERATION_SECONDS["sdca"], nnz * DEVICE_SECONDS_PER_NNZ
    star = math.sqrt(A * t0 / (B * c))
    assert star / math.sqrt(2) <= b <= star * math.sqrt(2)
    best = predicted_device_seconds(b, n, lam, sigma2, nnz)
    for j in range(24):
        assert predicted_device_seconds(1 << j, n, lam, sigma2, nnz) >= best


def test_orthogonal_rows_take_every_row():
    """``sigma^2 = 1/n`` (``beta_b = 1``): a batch costs less per row the larger it is."""
    n = 5000
    assert device_batch_size(n, 1e-4, 1.0 / n, 50.0) == n


def test_rows_alike_or_costly_take_smaller_batches():
    n, lam = 10 ** 6, 1e-6
    sizes = [device_batch_size(n, lam, s2, 50.0) for s2 in (0.01, 0.1, 0.5, 1.0)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    assert device_batch_size(n, lam, 0.1, 500.0) < device_batch_size(n, lam, 0.1, 5.0)
    assert device_batch_size(n, lam, 0.1, 50.0, t0=1e-3) > device_batch_size(n, lam, 0.1, 50.0)


def test_bounds_and_bad_input():
    assert device_batch_size(1, 1.0, 1.0, 3.0) == 1
    assert 1 <= device_batch_size(37, 1e-2, 0.5, 3.0) <= 37
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        device_batch_size(0, 1.0, 1.0, 1.0)
