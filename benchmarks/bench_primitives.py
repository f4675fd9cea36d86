"""pytest-benchmark suite: each backend primitive, and solver iterations per second against k.

Run from the repository root (imdb is read from ``../shared/data``; the suite fails
when it is missing)::

    python -m pytest benchmarks/bench_primitives.py --benchmark-columns=min,median,rounds
    python -m pytest benchmarks/bench_primitives.py -k "iterations" --benchmark-group-by=param:k

Backends: ``numpy`` (the reference), ``numba`` (the compiled CPU backend) and,
for the solver loops only and on a machine where CuPy sees a CUDA device, ``cupy``
(on any other machine the cupy cases are not generated at all).  Data: the imdb training set (25,000
TF-IDF rows, 74,849 columns, 138 nonzeros per row), float32 as the estimators
use it.

* ``test_primitive``: one call of a primitive on a batch of ``k`` rows, for
  ``k`` in 1, 64, 1024; the per-iteration primitives of Pegasos (margins, step,
  renormalisation) and of SDCA (deltas, Alg. 2's adaptation, the checked step),
  and the once-per-evaluation ones (objective, ``w(alpha)``).
* ``test_iterations``: a whole solver loop (Pegasos and aggressive SDCA) of
  ``T`` iterations at batch size ``k``; ``extra_info`` holds iterations and
  examples (``k T``) per second.  On a CPU the cost of an iteration of the NumPy
  backend is dominated by a constant ~40-80 us of interpreter work, so its
  iterations per second stay flat up to ``k`` of a few hundred; the compiled
  backend's cost is proportional to the nonzeros of the batch from ``k = 1``.

Speed is never asserted (the machine may be shared): each case only checks that
its result is a valid iterate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from bench_peers import DATA, FILES

from gpusvm.backends import cuda_available, make_backend
from gpusvm.backends.numpy_ import NumpyBackend
from gpusvm.datasets import load_svmlight
from gpusvm.solvers._sampling import CounterSampler
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca

LAM = 1e-4
#: the backends with per-step primitives; the device backend runs whole segments only
HOST_BACKENDS = ["numpy", "numba"]
BACKENDS = HOST_BACKENDS + (["cupy"] if cuda_available() else [])
PRIMITIVE_K = [1, 64, 1024]
ITERATION_K = [1, 16, 256, 4096]


@pytest.fixture(scope="module")
def imdb():
    """imdb training set, float32 CSR with int32 indices, labels in {-1, +1}."""
    rel, d = FILES["imdb"]
    path = DATA / rel
    if not path.is_file():
        pytest.fail(f"the imdb data set is missing: expected {path} (../shared/data beside the "
                    "repository)", pytrace=False)
    X, y = load_svmlight(path, n_features=d, dtype=np.float32)
    X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                      shape=X.shape)
    return X, np.where(y > 0, 1.0, -1.0).astype(np.float32)


def backend_for(name: str, X, y):
    if name == "cupy":
        import cupy
        import cupyx.scipy.sparse as csp
        return make_backend("cupy", csp.csr_matrix(X), cupy.asarray(y))
    return make_backend(name, X, y)


def prepared(name, X, y, k, seed=0):
    """A backend mid-run (a few epochs of Pegasos and SDCA state) and one batch of k rows."""
    be = backend_for(name, X, y)
    be.init_state(averaging=True)
    be.init_dual(1.0)
    rows = CounterSampler(X.shape[0], k, "without_replacement", seed).batch(0)[0]
    return be, (be._rows(rows) if hasattr(be, "_rows") else rows)


@pytest.mark.parametrize("k", PRIMITIVE_K)
@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("primitive", ["margins", "pegasos_step", "renormalize",
                                       "sdca_deltas", "sdca_adapt_beta", "sdca_apply"])
def test_primitive(benchmark, imdb, backend, primitive, k):
    X, y = imdb
    be, rows = prepared(backend, X, y, k)
    m = be.margins(rows)
    benchmark.group = f"primitive {primitive}"
    benchmark.extra_info.update(k=k, backend=backend)
    if primitive == "margins":
        out = benchmark(be.margins, rows)
        assert out.shape == (k,) and bool(np.all(np.isfinite(be.to_host(out))))
    elif primitive == "pegasos_step":
        # eta_t and the shrink of a late iteration, so that a stays far from 0
        benchmark(be.pegasos_step, rows, m, 1.0 / (LAM * 1e6), 1.0 - 1e-6, k, False,
                  1.0 / math.sqrt(LAM), True)
        assert 0.0 < float(be.to_host(be.s)[0]) <= 1.0
    elif primitive == "renormalize":
        benchmark(be.renormalize, 1e-6)
        assert float(be.to_host(be.s)[0]) > 0.0
    elif primitive == "sdca_deltas":
        delta = benchmark(be.sdca_deltas, rows, m, LAM)
        d = be.to_host(delta)
        assert d.shape == (k,) and np.all(d >= -1e-12) and np.all(d <= 1.0 + 1e-12)
    elif primitive == "sdca_adapt_beta":
        delta = be.sdca_deltas(rows, m, LAM)
        benchmark(be.sdca_adapt_beta, rows, delta, float(k), 0.5)
        beta = float(be.to_host(be.s)[10])
        assert 1.0 <= beta <= max(1.0, float(k))
    else:
        def setup():
            mm = be.margins(rows)
            return (rows, be.sdca_deltas(rows, mm, LAM), LAM, True), {}
        benchmark.pedantic(be.sdca_apply, setup=setup, rounds=50)
        alpha = be.to_host(be.alpha)
        assert alpha.min() >= -1e-12 and alpha.max() <= 1.0 + 1e-12


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("what", ["evaluate", "dual_weights"])
def test_evaluation(benchmark, imdb, backend, what):
    """The once-per-evaluation passes over all of X (a synchronisation point on a device)."""
    X, y = imdb
    be, _ = prepared(backend, X, y, 1)
    be.alpha[:] = 0.5
    benchmark.group = f"evaluation {what}"
    if what == "evaluate":
        w = be.dual_weights(LAM)
        ev = benchmark(be.evaluate, w, 0.0, LAM)
        assert 0.0 < ev.objective < float("inf")
    else:
        w = benchmark(be.dual_weights, LAM)
        assert float(be.to_host(w) @ be.to_host(w)) > 0.0


@pytest.mark.parametrize("k", ITERATION_K)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("solver", ["pegasos", "sdca"])
def test_iterations(benchmark, imdb, backend, solver, k):
    """A solver loop of ``T`` iterations (one evaluation at the end) at batch size ``k``."""
    X, y = imdb
    n = X.shape[0]
    if backend == "numpy":          # ~40-80 us of interpreter work per iteration
        T = max(20, min(2000, 400_000 // (k * 138)))
    else:
        T = max(20, min(25_000, 4_000_000 // (k * 138)))
    benchmark.group = f"iterations {solver}"
    benchmark.extra_info.update(k=k, backend=backend, iterations=T)
    be = backend_for(backend, X, y)
    if solver == "pegasos":
        def run():
            return pegasos(be, lam=LAM, k=k, max_iter=T, eval_every=T, sampling="epoch", seed=0)
    else:
        def run():
            return sdca(be, lam=LAM, b=k, max_iter=T, eval_every=T, variant="aggressive",
                        sigma2=0.12, tol=0.0, sampling="epoch", seed=0)
    res = benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    assert res.n_iter == T and math.isfinite(res.history[-1][1])
    if benchmark.stats is not None:          # None under --benchmark-disable (a smoke run)
        mean = benchmark.stats.stats.mean
        benchmark.extra_info.update(iterations_per_second=T / mean,
                                    examples_per_second=T * k / mean)


def test_reference_backend_is_the_numpy_one(imdb):
    """The comparisons above are against the reference: make sure "numpy" is it."""
    X, y = imdb
    assert type(make_backend("numpy", X[:10], y[:10])) is NumpyBackend
