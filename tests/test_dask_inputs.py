"""The input contract of gpusvm.dask's estimators, through their public API only.

Empty partitions, partitions holding one class, chunks of y that do not line up with X's,
weights (which the distributed estimators do not take), non-finite blocks, no rows, and a
worker lost mid-fit on such data: each either fits a model that is certified and as good
as LinearSVC's on the same objective, or raises one clear error naming what is wrong.

One LocalCluster (2 worker processes, 1 thread each) serves the module; the worker-loss test
has a cluster of its own. The objective of the comparison is that of the estimators with
``bias="none"``: ``P(w) = lam/2 ||w||^2 + (1/n) sum_i max(0, 1 - y_i <w, x_i>)``.
"""

from __future__ import annotations

import os
import re
import signal
import warnings

import dask.array as da
import distributed
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification
from sklearn.svm import LinearSVC

import gpusvm.dask as gd

LAM = 1e-2
TOL = 1e-3

_COMMON = dict(deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        c.wait_for_workers(2, timeout=120)
        yield c


@pytest.fixture(scope="module")
def problem():
    X, y = make_classification(n_samples=240, n_features=6, n_informative=4, random_state=0)
    X /= np.abs(X).max()
    return X, np.where(y == 1, 1, -1)


def primal(X, y, w):
    return 0.5 * LAM * float(w @ w) + float(np.maximum(0.0, 1.0 - y * (X @ w)).mean())


def optimum(X, y):
    """``P*`` from LIBLINEAR (hinge, no intercept, ``C = 1/(lam n)``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LinearSVC(loss="hinge", C=1.0 / (LAM * X.shape[0]), fit_intercept=False,
                        tol=1e-10, max_iter=500_000).fit(X, y)
    return primal(X, y, ref.coef_.ravel())


def check_certified(clf, X, y):
    """A certified model, within its gap of LinearSVC's optimum."""
    assert clf.stop_reason_ == "tol" and clf.duality_gap_ <= TOL
    assert primal(X, y, clf.coef_.ravel()) <= optimum(X, y) + TOL + 1e-9


def sdca(client, **params):
    return gd.SDCASVC(lam=LAM, tol=TOL, random_state=0, client=client, **params)


def exactly(message):
    return f"^{re.escape(message)}$"


# ------------------------------------------------------------------ partitions
def test_empty_partitions_are_skipped(client, problem):
    X, y = problem
    plain = sdca(client).fit(da.from_array(X, chunks=(120, 6)), y)
    gapped = sdca(client).fit(da.from_array(X, chunks=((0, 120, 0, 120, 0), (6,))), y)
    check_certified(gapped, X, y)
    assert gapped.n_blocks_ == 2
    np.testing.assert_array_equal(gapped.coef_, plain.coef_)


@pytest.mark.parametrize("make", [sdca, lambda c: gd.PegasosSVC(
    lam=LAM, batch_size=16, max_iter=400, random_state=0, client=c)], ids=["sdca", "pegasos"])
def test_one_class_partitions(client, problem, make):
    """Rows sorted by label: every partition holds one class; the problem is the same."""
    X, y = problem
    order = np.argsort(y, kind="stable")
    Xs, ys = X[order], y[order]
    clf = make(client).fit(da.from_array(Xs, chunks=(120, 6)), ys)
    if isinstance(clf, gd.SDCASVC):
        check_certified(clf, Xs, ys)
    else:                       # Pegasos: most of the way from w = 0 (P = 1) to the optimum
        p_star = optimum(Xs, ys)
        assert primal(Xs, ys, clf.coef_.ravel()) - p_star <= 0.1 * (1.0 - p_star)
    assert set(np.unique(clf.predict(X))) == {-1, 1}


def test_y_chunked_unlike_x(client, problem):
    X, y = problem
    ref = sdca(client).fit(da.from_array(X, chunks=(60, 6)), y)
    clf = sdca(client).fit(da.from_array(X, chunks=(60, 6)), da.from_array(y, chunks=77))
    np.testing.assert_array_equal(clf.coef_, ref.coef_)
    check_certified(clf, X, y)


def test_misaligned_lengths_and_weights(client, problem):
    X, y = problem
    Xd = da.from_array(X, chunks=(60, 6))
    with pytest.raises(ValueError, match=exactly(
            "y must have shape (240,) to match X's rows, got (237,)")):
        sdca(client).fit(Xd, da.from_array(y[:-3], chunks=50))
    with pytest.raises(ValueError, match=exactly(
            "y must have shape (240,) to match X's rows, got (240, 1)")):
        sdca(client).fit(X, y[:, None])
    # row weights must match X's rows, as the labels must
    for cls in (gd.SDCASVC, gd.PegasosSVC):
        with pytest.raises(ValueError, match=exactly(
                "sample_weight must have shape (240,) to match X's rows, got (239,)")):
            cls(client=client).fit(Xd, y, sample_weight=np.ones(239))


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_block(client, problem, value):
    X, y = problem
    X = X.copy()
    X[130, 2] = value
    with pytest.raises(ValueError, match=exactly(
            "X contains NaN or infinity; clean the data before fitting")):
        sdca(client).fit(da.from_array(X, chunks=(60, 6)), y)


def test_no_rows(client, problem):
    X, y = problem
    for cls in (gd.SDCASVC, gd.PegasosSVC):
        with pytest.raises(ValueError, match=exactly(
                f"{cls.__name__} needs samples of 2 classes, but y is empty; pass at least one "
                "sample of each class")):
            cls(client=client).fit(da.from_array(X[:0], chunks=(60, 6)), y[:0])


def test_one_class_overall(client, problem):
    X, _ = problem
    with pytest.raises(ValueError, match=exactly(
            "SDCASVC needs samples of 2 classes, but the data contains only one class: 1")):
        sdca(client).fit(da.from_array(X, chunks=(60, 6)), np.ones(240, dtype=int))


# ------------------------------------------------------------------ random partitions
def _chunks(data, n):
    """Random row chunks of ``n`` rows, empty ones included."""
    cuts = sorted(data.draw(st.lists(st.integers(0, n), min_size=0, max_size=5), "cuts"))
    bounds = [0, *cuts, n]
    return tuple(b - a for a, b in zip(bounds[:-1], bounds[1:]))


def _partition_case(client, problem, data):
    X, y = problem
    n = data.draw(st.integers(1, X.shape[0]), "rows")
    X, y = X[:n], y[:n]
    if data.draw(st.booleans(), "sorted by label"):
        order = np.argsort(y, kind="stable")
        X, y = X[order], y[order]
    chunks = _chunks(data, n)
    Xd = da.from_array(X, chunks=(chunks, (6,)))
    y_in = da.from_array(y, chunks=_chunks(data, n)) if data.draw(st.booleans(), "dask y") \
        else y
    try:
        clf = sdca(client).fit(Xd, y_in)
    except ValueError as exc:
        # the only refusal of valid-looking data: one class among the rows drawn
        assert np.unique(y).size < 2, str(exc)
        assert str(exc) == ("SDCASVC needs samples of 2 classes, but the data contains only "
                            f"one class: {int(y[0])}")
        return
    assert clf.n_blocks_ == sum(1 for c in chunks if c > 0)
    check_certified(clf, X, y)


@settings(max_examples=6, **_COMMON)
@given(data=st.data())
def test_random_partitions(client, problem, data):
    _partition_case(client, problem, data)


@pytest.mark.slow
@settings(max_examples=60, **_COMMON)
@given(data=st.data())
def test_random_partitions_long(client, problem, data):
    _partition_case(client, problem, data)


# ------------------------------------------------------------------ a worker lost mid-fit
@pytest.mark.parametrize("as_dask", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["scattered", "dask-array"])
def test_worker_lost_on_one_class_partitions(problem, as_dask):
    """A worker killed mid-fit, with every partition of one class: the fit recovers to a
    certified model or says which limit it hit, never a wrong model."""
    X, y = problem
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as own:
        own.wait_for_workers(2, timeout=120)
        pids = own.run(os.getpid)
        victim = pids[sorted(pids)[1]]
        killed = []

        def kill(round_, gap, elapsed):
            if round_ == 2 and not killed:
                os.kill(victim, signal.SIGKILL)
                killed.append(round_)

        est = gd.SDCASVC(lam=LAM, tol=TOL, max_iter=1000, random_state=0, callback=kill,
                         client=own, n_partitions=2)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                clf = est.fit(da.from_array(X, chunks=(120, 6)) if as_dask else X, y)
        except gd.DistributedFitError as exc:
            assert "worker" in str(exc) or "timeout" in str(exc), str(exc)
            return
        assert killed and clf.n_recoveries_ >= 1
        check_certified(clf, X, y)
