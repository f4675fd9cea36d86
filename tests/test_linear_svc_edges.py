"""gpusvm.LinearSVC at the edges of its parameters, against scikit-learn's LinearSVC."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC as SkLinearSVC

from gpusvm import SDCASVC, LinearSVC, LinearSVCCV


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


def test_huge_sample_weights_fit_as_the_same_large_c():
    """Constant weights ``k`` are ``C * k``: the fit at sample_weight = 1e200 (Newton's CG
    residuals and line-search curvatures overflowed or cancelled to 0: ZeroDivisionError)
    is the fit at C = 1e100 with weights 1e100, and finite; so is one at sample_weight = 1e30
    (CG steps: 150 columns)."""
    X, y = make_classification(n_samples=300, n_features=150, random_state=0)
    weighted, _ = _fit(LinearSVC(dual=False), X, y, sample_weight=np.full(300, 1e200))
    large_c, _ = _fit(LinearSVC(dual=False, C=1e100), X, y, sample_weight=np.full(300, 1e100))
    assert np.all(np.isfinite(weighted.coef_)) and np.all(np.isfinite(weighted.intercept_))
    np.testing.assert_allclose(weighted.coef_, large_c.coef_, rtol=0,
                               atol=1e-5 * np.abs(large_c.coef_).max())    # lam rounded apart
    assert weighted.score(X, y) == large_c.score(X, y) == 1.0
    est, _ = _fit(LinearSVC(dual=False, max_iter=30), X, y, sample_weight=np.full(300, 1e30))
    assert np.all(np.isfinite(est.coef_)) and est.score(X, y) == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("C", [1e-30, 1e-10, 1e10, 1e30])
def test_every_c_sklearn_fits_is_fitted(dtype, C):
    """C = 1e30 on float32 data was refused (the step 1/lam overflows float32): it fits in
    float64 as liblinear does, as separable data's sklearn fit, and so does every C."""
    X, y = make_classification(n_samples=200, random_state=0, class_sep=3.0, flip_y=0)
    X = X.astype(dtype)
    ref = SkLinearSVC(C=C, max_iter=200).fit(X, y)
    est, _ = _fit(LinearSVC(C=C, max_iter=200), X, y)
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    assert est.score(X, y) >= ref.score(X, y) - 0.01


@pytest.mark.parametrize("dual", [False, True])
def test_huge_intercept_scaling_fits_finite_or_says_the_limit(dual):
    """intercept_scaling = 1e40 overflowed float32's constant column (NaN coefficients from
    a "fitted" model); 1e300 raised a raw OverflowError; LinearSVCCV named a C of its grid."""
    X, y = make_classification(n_samples=200, random_state=0)
    est, _ = _fit(LinearSVC(intercept_scaling=1e40, dual=dual, max_iter=100), X, y)
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    ref = SkLinearSVC(intercept_scaling=1e40, dual=dual, max_iter=100).fit(X, y)
    assert est.score(X, y) >= ref.score(X, y)
    message = ("intercept_scaling=1e+300 is too large for float64: the constant column's "
               "products overflow; use intercept_scaling < 1.16e+77 (already at 1e3 the "
               "intercept is all but unregularised)")
    for cls in (LinearSVC, LinearSVCCV):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            cls(intercept_scaling=1e300, dual=dual).fit(X, y)
    with pytest.raises(ValueError, match=re.escape("is too large for float32: the constant "
                                                   "column's products overflow; use "
                                                   "intercept_scaling < 4.29e+09 (or "
                                                   "dtype='float64')")):
        SDCASVC(intercept_scaling=1e40).fit(X, y)
    search, _ = _fit(LinearSVCCV(intercept_scaling=1e40, dual=dual, Cs=2, cv=2, max_iter=50), X, y)
    assert np.all(np.isfinite(search.coef_))
