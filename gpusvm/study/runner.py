"""Running the cells of a study: skip the finished ones, compute the rest (optionally in parallel).

A task is a plain dict with its ``key`` and all its compute function needs but the data, which
every worker holds once (inherited through ``fork`` where available).  Whoever computes a cell
saves it at once, so an interrupt at any moment loses at most the cells in progress.
"""

from __future__ import annotations

import multiprocessing
import platform
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from .store import CellStore, _utc_now

__all__ = ["run_cells"]

_WORKER: dict = {}


def _init_worker(problem, compute, store_dir) -> None:
    # Ctrl-C reaches the parent, which terminates the workers; SIGTERM kills a worker at once
    # (a fork would otherwise inherit the parent's handler that turns it into an exception)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _single_thread_blas()
    _WORKER["problem"] = problem
    _WORKER["compute"] = compute
    _WORKER["store"] = CellStore(store_dir)


def _single_thread_blas():
    """Limit BLAS to one thread (a ``threadpool_limits``, also usable as a context manager).

    Per-iteration dot products of a few thousand entries take 0.6 ms instead of 3 us on a
    multi-threaded BLAS, and its summation order would depend on the thread count.
    """
    from threadpoolctl import threadpool_limits  # noqa: PLC0415  (a scikit-learn dependency)
    return threadpool_limits(limits=1, user_api="blas")


def _work(task: dict) -> dict:
    cell = _finish(_WORKER["compute"](_WORKER["problem"], task), task)
    _WORKER["store"].save(cell)
    return cell


def _finish(cell: dict, task: dict) -> dict:
    cell = {**cell, "key": task["key"]}
    cell.setdefault("params", task.get("params"))
    return {**cell, "computed_at": _utc_now(), "host": platform.node()}


def run_cells(problem, tasks: list, compute, *, out_dir, jobs: int = 1, progress: bool = True,
              on_cell=None, desc: str = "cells"):
    """Compute every task whose cell file is missing, load the others: ``(cells, counts)``, the
    counts of cells ``computed``, ``reused`` and in ``total``.

    ``compute(problem, task) -> dict`` must be a module-level function (workers run it); cells
    come in the order of ``tasks``; ``on_cell(cell)`` runs after each newly computed cell is
    saved (an exception raised there stops the study, as an interrupt would).
    """
    from tqdm.auto import tqdm  # noqa: PLC0415
    store = CellStore(out_dir)
    keys = [t["key"] for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate cells in the study (repeated batch sizes, methods or seeds?)")
    done = {t["key"]: cell for t in tasks if (cell := store.load(t["key"])) is not None}
    pending = [t for t in tasks if t["key"] not in done]
    counts = {"computed": 0, "reused": len(done), "total": len(tasks)}
    bar = tqdm(total=len(tasks), initial=len(done), desc=desc, unit="cell", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    try:
        if jobs <= 1 or len(pending) <= 1:
            limits = _single_thread_blas()                 # restored in the finally clause
            for task in pending:
                bar.set_postfix_str(task.get("label", task["key"]), refresh=True)
                cell = _finish(compute(problem, task), task)
                store.save(cell)
                done[task["key"]] = cell
                counts["computed"] += 1
                bar.update(1)
                if on_cell is not None:
                    on_cell(cell)
        else:
            _run_parallel(problem, pending, compute, store, jobs, done, counts, bar, on_cell)
    finally:
        bar.close()
        if "limits" in locals():
            limits.restore_original_limits()
    return [done[k] for k in keys], counts


def _run_parallel(problem, pending, compute, store, jobs, done, counts, bar, on_cell):
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(pending)), mp_context=ctx,
                               initializer=_init_worker,
                               initargs=(problem, compute, str(store.dir.parent)))
    try:
        futures = {pool.submit(_work, task): task for task in pending}
        remaining = set(futures)
        while remaining:
            finished, remaining = wait(remaining, return_when=FIRST_COMPLETED)
            for fut in finished:
                cell = fut.result()
                done[cell["key"]] = cell
                counts["computed"] += 1
                bar.set_postfix_str(futures[fut].get("label", cell["key"]), refresh=False)
                bar.update(1)
                if on_cell is not None:
                    on_cell(cell)
    except BaseException:
        # an interrupt: stop the running cells too (leaving only *.tmp files); the executor has
        # no public way to stop running tasks, so its worker processes are terminated directly
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            if proc.is_alive():
                proc.terminate()
        for proc in workers:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        raise
    pool.shutdown(wait=True)
