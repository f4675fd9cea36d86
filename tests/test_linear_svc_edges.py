"""gpusvm.LinearSVC at the edges of its parameters, against scikit-learn's LinearSVC."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC as SkLinearSVC

from gpusvm import LinearSVC


@pytest.fixture(scope="module")
def three_classes():
    return make_classification(n_samples=120, n_classes=3, n_informative=4, random_state=0)


def _fit(est, X, y, **kw):
    """The fitted estimator and the messages of its ConvergenceWarnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y, **kw)
    return est, [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


@pytest.mark.parametrize("dual, loss", [(True, "squared_hinge"), (True, "hinge"),
                                        (False, "squared_hinge"), ("auto", "squared_hinge")])
def test_max_iter_zero_returns_sklearns_zeros_and_warns(three_classes, dual, loss):
    X, y = three_classes
    ref, ref_warned = _fit(SkLinearSVC(max_iter=0, dual=dual, loss=loss), X, y)
    est, warned = _fit(LinearSVC(max_iter=0, dual=dual, loss=loss), X, y)
    assert ref.n_iter_ == 0 == est.n_iter_ and isinstance(est.n_iter_, int)
    assert np.array_equal(est.coef_, ref.coef_) and np.array_equal(est.intercept_, ref.intercept_)
    assert len(ref_warned) == 1 and len(warned) == 1
    assert warned[0].startswith("gpusvm.LinearSVC did not converge: 0 ")
    if est.solver_ == "sdca":       # alpha = 0: the gap is P(0) = C n, relative 1
        assert np.array_equal(est.duality_gap_, np.ones(3))
    assert np.all((0 < est.duality_gap_) & (est.duality_gap_ <= 1))
