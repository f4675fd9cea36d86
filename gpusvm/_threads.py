"""Threads of one fit: how many (``n_jobs``), and a pool that runs fixed row blocks on them.

A fit with ``n_jobs`` threads cuts its rows into ``n_jobs`` blocks whose boundaries depend on
the data and ``n_jobs`` only, and every sum over blocks is added in block order: the same
seed and the same ``n_jobs`` give the same model bit for bit, whatever the scheduler does.
The blocks' work is compiled code that releases the GIL (numba ``nogil``).
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: the fewest nonzeros of a training matrix for which a fit uses more than one thread: below
#: it a product takes under ~1 ms and dispatching blocks to threads costs more than it saves
#: (measured: benchmarks/bench_threads.py)
THREAD_MIN_NNZ = 2_000_000
#: the fewest nonzeros for SDCA's row blocks on threads (:mod:`gpusvm.solvers._threaded`).
#: Measured with ``benchmarks/bench_threads.py``'s generated sets (squared hinge, tol 1e-4, 2
#: cores, median of 3; BENCHMARKS.md, "Threads inside one fit"): 2.3 x 10^6 training nonzeros
#: 0.77x (slower), 4.6 x 10^6 and 9.3 x 10^6 1.54x, 1.56 x 10^7 2.03x, 4.7 x 10^7 1.90x
SDCA_THREAD_MIN_NNZ = 4_000_000
#: ... and the fewest per column: a round combines the blocks' copies of the hot columns, and
#: every column after :data:`gpusvm.solvers._threaded.FULL_EVERY_D` ``d`` nonzeros of a
#: thread's steps (a pass over ``w``), which must stay a small part of the steps' time
SDCA_MIN_NNZ_PER_FEATURE = 16
#: ... and at most this many threads, whatever ``n_jobs``: on 2 threads the blocks take about
#: 10 % more epochs than one thread (2.0x faster on 2 cores), on 4 (measured on 2 cores,
#: where only the epochs mean anything) 34 epochs where one thread takes 18.5 with an
#: intercept, and without one a gap 2,000x one thread's after 16 epochs: more threads wait
#: for rounds that keep the blocks' shared columns closer (16-core measurements)
SDCA_MAX_THREADS = 2


def affinity_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one), without
    probing the loaded thread pools: the cheap test a small fit may make (whether fits at
    size could run on threads, so that their loops are worth compiling ahead)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                         # not Linux
        return max(1, os.cpu_count() or 1)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one,
    ``os.process_cpu_count`` or ``os.cpu_count`` elsewhere), at most the thread limit of a
    loaded OpenMP runtime (``threadpoolctl.threadpool_limits``, ``OMP_NUM_THREADS``), as
    scikit-learn's ``n_jobs=None`` on its OpenMP estimators."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                         # not Linux
        cores = getattr(os, "process_cpu_count", os.cpu_count)() or 1
    try:
        for pool in _controller().info():
            if pool.get("user_api") == "openmp" and pool.get("num_threads"):
                cores = min(cores, int(pool["num_threads"]))
    except Exception:                              # noqa: BLE001  no threadpoolctl: affinity only
        pass
    return max(1, cores)


@functools.lru_cache(maxsize=1)
def _controller():
    from threadpoolctl import ThreadpoolController  # noqa: PLC0415  (a scikit-learn dependency)
    return ThreadpoolController()


def check_n_jobs(n_jobs) -> None:
    """Refuse an ``n_jobs`` that means nothing (every estimator's one check of it).

    Raises
    ------
    ValueError
        For ``n_jobs=0``, a bool, or a value that is neither an integer nor None.
    """
    if n_jobs is None:
        return
    if isinstance(n_jobs, (bool, np.bool_)) or not isinstance(n_jobs, (int, np.integer)):
        raise ValueError(f"n_jobs must be an int or None, got {n_jobs!r}")
    if n_jobs == 0:
        raise ValueError("n_jobs == 0 has no meaning; use n_jobs=None (all cores), -1 (all "
                         "cores) or a positive number of threads")


def resolve_n_jobs(n_jobs) -> int:
    """Threads for ``n_jobs`` in scikit-learn's convention: None or -1 every usable core
    (:func:`usable_cores`), ``-k`` all but ``k - 1`` of them, a positive int itself but at
    most the usable cores (more threads than cores only wait for each other: 1,000 asked
    for on 2 cores ran 10 times slower).

    Raises
    ------
    ValueError
        For ``n_jobs=0`` or a value that is not an integer (:func:`check_n_jobs`).
    """
    check_n_jobs(n_jobs)
    if n_jobs is None:
        return usable_cores()
    if n_jobs < 0:
        return max(1, usable_cores() + 1 + int(n_jobs))
    return min(int(n_jobs), usable_cores()) if n_jobs > 1 else 1


def fit_n_jobs(n_jobs, nnz: int) -> int:
    """:func:`resolve_n_jobs` for a fit of ``nnz`` nonzeros: 1 below :data:`THREAD_MIN_NNZ`
    (no fit that small uses threads: the cores are not probed), ``n_jobs`` checked anyway."""
    check_n_jobs(n_jobs)
    if nnz < THREAD_MIN_NNZ:
        return 1
    return resolve_n_jobs(n_jobs)


def fit_threads(n_jobs: int, nnz: int, backend_name: str, min_nnz: int | None = None) -> int:
    """Threads one fit runs with: ``n_jobs`` on the compiled CPU backend when the matrix has
    at least ``min_nnz`` (default :data:`THREAD_MIN_NNZ`) nonzeros, else 1 (today's
    single-thread path)."""
    min_nnz = THREAD_MIN_NNZ if min_nnz is None else min_nnz
    if n_jobs <= 1 or backend_name != "numba" or nnz < min_nnz:
        return 1
    return int(n_jobs)


def sdca_threads(n_jobs: int, X, backend_name: str) -> int:
    """:func:`fit_threads` for SDCA's row blocks: at least :data:`SDCA_THREAD_MIN_NNZ`
    nonzeros and :data:`SDCA_MIN_NNZ_PER_FEATURE` per column of ``X``, and at most
    :data:`SDCA_MAX_THREADS` and ``nnz / (3 d)`` threads (each keeps 24 bytes per column: its copy of ``w``, the last
    combined ``w`` and two float64 buffers of changes, at most ``X``'s own 8 per nonzero)."""
    d = max(1, X.shape[1])
    if X.nnz < SDCA_MIN_NNZ_PER_FEATURE * d:
        return 1
    k = min(fit_threads(n_jobs, X.nnz, backend_name, SDCA_THREAD_MIN_NNZ), X.nnz // (3 * d),
            SDCA_MAX_THREADS)
    return k if k > 1 else 1


def nnz_blocks(indptr, k: int, rows=None) -> np.ndarray:
    """``k + 1`` boundaries cutting the rows (or the positions of ``rows`` in ``indptr``'s
    matrix) into ``k`` contiguous blocks of about equal nonzeros (int64, a function of the
    data and ``k`` only)."""
    indptr = np.asarray(indptr)
    if rows is None:
        cum = indptr.astype(np.int64)
    else:
        rows = np.asarray(rows)
        cum = np.concatenate([[0], np.cumsum(indptr[rows + 1] - indptr[rows], dtype=np.int64)])
    total = cum[-1]
    m = cum.size - 1
    if total == 0:
        return np.linspace(0, m, k + 1).astype(np.int64)
    targets = (np.arange(k + 1, dtype=np.float64) * (total / k))
    bounds = np.searchsorted(cum, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, m
    return np.maximum.accumulate(np.minimum(bounds, m))


class BlockPool:
    """``k`` threads (the caller and ``k - 1`` workers) running one function on ``k`` blocks.

    :meth:`run` calls ``fn(i)`` for ``i < k`` (block 0 on the calling thread) and returns
    their results in block order; the first exception of a block is raised.  ``fn`` should
    spend its time in code that releases the GIL.
    """

    def __init__(self, k: int):
        self.k = int(k)
        self._pool = ThreadPoolExecutor(max_workers=self.k - 1, thread_name_prefix="gpusvm-fit") \
            if self.k > 1 else None

    def run(self, fn, k: int | None = None):
        """``[fn(0), ..., fn(k - 1)]``, ``k`` at most the pool's (default: all)."""
        k = self.k if k is None else k
        if self._pool is None or k == 1:
            return [fn(i) for i in range(k)]
        futures = [self._pool.submit(fn, i) for i in range(1, k)]
        first = fn(0)
        return [first] + [f.result() for f in futures]

    def close(self) -> None:
        """Stop the workers."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["THREAD_MIN_NNZ", "SDCA_THREAD_MIN_NNZ", "SDCA_MAX_THREADS", "affinity_cores",
           "usable_cores", "check_n_jobs", "resolve_n_jobs", "fit_n_jobs", "fit_threads",
           "sdca_threads", "nnz_blocks", "BlockPool"]
