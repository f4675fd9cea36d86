"""The row-norm hint (DataScaleWarning) fires when the scale of the rows is the cause of a slow
fit, and not on well-scaled data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

from gpusvm import PegasosSVC, SDCASVC
from gpusvm.datasets import normalize_rows
from gpusvm._arrays import ROW_NORM_HINT, ROW_NORM_WARNING, DataScaleWarning


def categories(est, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return [w for w in caught if issubclass(w.category, (ConvergenceWarning, DataScaleWarning))]


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X, y


def test_raw_digits_get_the_hint_with_the_convergence_warning(digits):
    X, y = digits
    norm = float(np.sqrt((X ** 2).sum(axis=1)).max())
    assert ROW_NORM_HINT < norm <= ROW_NORM_WARNING          # 76.9: no warning before the fit
    for est in (SDCASVC(random_state=0), PegasosSVC(random_state=0)):
        caught = categories(est, X, y)
        assert [w.category for w in caught] == [ConvergenceWarning, DataScaleWarning], est
        assert str(caught[1].message) == (
            f"the fit did not converge, and the largest row norm of X is {norm:.3g}, far above "
            "1, which the step sizes and the mini-batch theory assume (max ||x_i|| <= 1): the "
            "row norms are the likely cause; scale the rows with "
            "gpusvm.datasets.normalize_rows(X) or the features with "
            "sklearn.preprocessing.StandardScaler (or MaxAbsScaler for sparse X) in a Pipeline")


def test_unit_rows_converge_without_any_warning(digits):
    X, y = digits
    assert categories(SDCASVC(random_state=0), normalize_rows(X), y) == []


def test_no_hint_on_well_scaled_rows_that_stop_early(a9a):
    """a9a (rows of norm 3.7) stopped by max_iter: a ConvergenceWarning, no row-norm hint."""
    X = sp.csr_matrix(a9a.X[:3000])
    caught = categories(SDCASVC(C=1.0, max_iter=10, random_state=0), X, a9a.y[:3000])
    assert [w.category for w in caught] == [ConvergenceWarning]


def test_rows_above_the_warning_norm_warn_once(digits):
    X, y = digits
    caught = categories(SDCASVC(random_state=0, max_iter=5), X * 2.0, y)       # norm 154
    assert [w.category for w in caught].count(DataScaleWarning) == 1
    assert str(next(w.message for w in caught if w.category is DataScaleWarning)).startswith(
        "the largest row norm of X is 154, far above 1")
