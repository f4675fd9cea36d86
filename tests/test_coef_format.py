"""``sparsify()`` and ``densify()``: ``coef_`` to CSR and back, as scikit-learn's linear classifiers
(``SparseCoefMixin``), checked against ``sklearn.linear_model.SGDClassifier`` on the same data."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.datasets import make_classification
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import SGDClassifier

import gpusvm
import gpusvm.accel
from gpusvm.model_io import load_model, save_model


def _estimators():
    return [
        gpusvm.SDCASVC(C=1.0, solver="newton", loss="squared_hinge", backend="numpy"),
        gpusvm.PegasosSVC(lam=1e-2, batch_size=32, max_iter=50, backend="numpy",
                          multi_class="ovr", random_state=0),
        gpusvm.LinearSVC(backend="numpy", random_state=0),
        gpusvm.accel.LinearSVC(backend="numpy", random_state=0),
    ]


ESTIMATORS = pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__module__
                                     .split(".")[1] + "." + type(e).__name__)


@pytest.fixture(scope="module", params=[2, 3], ids=["binary", "3 classes"])
def data(request):
    X, y = make_classification(n_samples=150, n_features=12, n_informative=6,
                               n_classes=request.param, random_state=0)
    X[:, 3] = 0.0                       # a feature no model weighs: a structural zero of coef_
    return X, y


def _error(est, method):
    with pytest.raises(NotFittedError) as info:
        getattr(est, method)()
    return str(info.value)


@ESTIMATORS
@pytest.mark.parametrize("method", ["sparsify", "densify"])
def test_unfitted_error_is_sklearns(est, method):
    theirs = _error(SGDClassifier(), method).replace("SGDClassifier", type(est).__name__)
    assert _error(sklearn.clone(est), method) == theirs


@ESTIMATORS
def test_sparsify_and_densify_as_sklearn(est, data):
    X, y = data
    est = sklearn.clone(est).fit(X, y)
    ref = SGDClassifier(random_state=0).fit(X, y)
    dense, scores, labels = est.coef_.copy(), est.decision_function(X), est.predict(X)

    assert est.sparsify() is est and ref.sparsify() is ref
    assert type(est.coef_) is type(ref.coef_) and est.coef_.format == ref.coef_.format == "csr"
    assert est.coef_.shape == ref.coef_.shape == dense.shape
    np.testing.assert_array_equal(est.coef_.toarray(), dense)
    for Xp in (X, sp.csr_matrix(X), X.astype(np.float32)):
        np.testing.assert_allclose(est.decision_function(Xp), scores, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(est.predict(Xp), labels)
    ref_scores = ref.decision_function(X)
    ref.densify()
    np.testing.assert_allclose(ref.decision_function(X), ref_scores)

    assert est.densify() is est
    assert type(est.coef_) is type(ref.coef_) is np.ndarray
    np.testing.assert_array_equal(est.coef_, dense)
    before = est.coef_
    assert est.densify().coef_ is before            # dense already: a no-op, as scikit-learn's


@ESTIMATORS
def test_sparse_interface_follows_sklearns_configuration(est, data):
    X, y = data
    est = sklearn.clone(est).fit(X, y)
    ref = SGDClassifier(random_state=0).fit(X, y)
    with sklearn.config_context(sparse_interface="sparray"):
        assert type(est.sparsify().coef_) is type(ref.sparsify().coef_)
    np.testing.assert_array_equal(est.predict(X), est.densify().predict(X))


@pytest.mark.parametrize("est", _estimators()[:3], ids=lambda e: type(e).__name__)
def test_sparse_coef_saves_loads_and_pickles(est, data, tmp_path):
    X, y = data
    est = sklearn.clone(est).fit(X, y)
    scores = est.decision_function(X)
    est.sparsify()
    path = save_model(est, tmp_path / "model.npz")
    for back in (load_model(path), pickle.loads(pickle.dumps(est))):
        assert sp.issparse(back.coef_)
        np.testing.assert_array_equal(back.coef_.toarray(), est.coef_.toarray())
        np.testing.assert_allclose(back.decision_function(X), scores, rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(back.densify().coef_, est.coef_.toarray())


def test_a_sparse_coef_with_bad_values_is_refused_on_load(data, tmp_path):
    X, y = data
    est = sklearn.clone(_estimators()[0]).fit(X, y).sparsify()
    est.coef_.data[0] = np.nan
    path = save_model(est, tmp_path / "model.npz")
    with pytest.raises(ValueError, match="coef is not a finite float CSR matrix"):
        load_model(path)


def test_warm_start_and_partial_fit_after_sparsify(data):
    X, y = data
    cold = gpusvm.SDCASVC(C=0.1, batch_size=50, max_iter=30, backend="numpy", random_state=0,
                          warm_start=True).fit(X, y)
    warm = pickle.loads(pickle.dumps(cold))
    cold.fit(X, y)
    warm.sparsify().fit(X, y)                        # starts from the same (dense) point
    np.testing.assert_allclose(warm.coef_, cold.coef_)
    classes = np.unique(y)
    a = sklearn.clone(_estimators()[1]).partial_fit(X, y, classes)
    b = pickle.loads(pickle.dumps(a)).sparsify()
    a.partial_fit(X, y)
    b.partial_fit(X, y)
    np.testing.assert_allclose(b.coef_, a.coef_)
