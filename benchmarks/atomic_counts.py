"""Atomics per launch of the device backend's kernels, counted by the CPU kernel emulator.

Runs Pegasos and SDCA on the emulated device backend over a Zipf-hot sparse set
(gpusvm.datasets.make_sparse_classification), for one output (M = 1: the balanced tiles) and
for M outputs (the pair form), and prints per kernel the atomics of one launch (the mean over
its launches) and the worst counts seen:

  global     atomics on global memory (the launch's argument arrays)
  returning  of these the value-returning ones (ATOM), red the non-returning (RED)
  per_block  the most atomics one block made on one global address in one launch
  per_addr   the most atomics one global address received in one launch

Usage: python benchmarks/atomic_counts.py [--k 2000] [--n 4000] [--d 20000] [--iters 3] [--M 3]
(the emulator runs every CUDA thread as a fiber: k = 10^5 takes minutes per iteration).
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from gpusvm.backends import make_backend
from gpusvm.datasets import make_sparse_classification
from gpusvm.solvers.pegasos import pegasos
from gpusvm.solvers.sdca import sdca
from gpusvm_emulator import count_atomics


def zipf_set(n, d, M, nnz, seed=0):
    """A Zipf-hot float64 CSR set and labels in {-1, +1} (n x M: M one-vs-rest outputs)."""
    X, y = make_sparse_classification(n, d, nnz_per_row=nnz, random_state=seed, dtype=np.float64)
    rng = np.random.default_rng(seed)
    y = np.where(y > 0, 1.0, -1.0)
    if M == 1:
        return X, y
    cols = [y] + [np.where(rng.random(n) < 0.5, 1.0, -1.0) for _ in range(M - 1)]
    return X, np.stack(cols, axis=1)


def run_counts(solver, X, Y, **kw):
    """The records of every emulated launch of one solver run."""
    with count_atomics() as records:
        if solver == "pegasos":
            pegasos(make_backend("emulated", X, Y), **kw)
        else:
            sdca(make_backend("emulated", X, Y), **kw)
    return records


def table(records):
    """Per kernel: launches, mean global/returning/red atomics per launch, worst per_block/per_addr."""
    by = defaultdict(list)
    for r in records:
        by[r["kernel"]].append(r)
    rows = []
    for name, rs in sorted(by.items()):
        rows.append((name, len(rs), np.mean([r["global"] for r in rs]),
                     np.mean([r["returning"] for r in rs]), np.mean([r["red"] for r in rs]),
                     max(r["max_per_block"] for r in rs), max(r["max_per_address"] for r in rs),
                     max(r["grid"] for r in rs)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--d", type=int, default=20000)
    ap.add_argument("--k", type=int, default=2000)
    ap.add_argument("--nnz", type=int, default=60)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--M", type=int, default=3)
    a = ap.parse_args(argv)
    for M in (1, a.M):
        X, Y = zipf_set(a.n, a.d, M, a.nnz)
        for solver, kw in (("pegasos", dict(lam=1e-4, k=a.k, max_iter=a.iters, seed=1)),
                           ("sdca", dict(lam=1e-4, b=a.k, max_iter=a.iters, seed=1, tol=0.0))):
            print(f"\n{solver}, M = {M}, n = {a.n}, d = {a.d}, k = {a.k}, {a.iters} iterations")
            print(f"{'kernel':58s} {'launch':>6s} {'global':>9s} {'return':>9s} {'red':>9s} "
                  f"{'per_blk':>7s} {'per_adr':>7s} {'grid':>5s}")
            for name, n, g, ret, red, pb, pa, grid in table(run_counts(solver, X, Y, **kw)):
                print(f"{name[:58]:58s} {n:6d} {g:9.0f} {ret:9.0f} {red:9.0f} {pb:7d} {pa:7d} "
                      f"{grid:5d}")


if __name__ == "__main__":
    main()
