"""Before/after one path: the same solver runs on the code found on PYTHONPATH, timed and saved.

Run it once per code version, then compare the two files::

    PYTHONPATH=<old tree> python benchmarks/bench_one_path.py --out old.npz
    PYTHONPATH=<new tree> python benchmarks/bench_one_path.py --out new.npz
    python benchmarks/bench_one_path.py --compare old.npz new.npz

Each case runs a solver for a fixed number of iterations (no early stop) and records the
best CPU time (``time.process_time``) of ``--repeat`` runs and the returned ``w``, ``b``;
``--compare`` prints the time ratio and ``||w_new - w_old|| / ||w_old||`` per case.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"

#: (name, backend, data set, solver, keywords)
CASES = [
    ("pegasos k=1 tail", "numpy", "a9a", "pegasos",
     dict(lam=1e-4, k=1, max_iter=3000, averaging="tail", sampling="epoch")),
    ("pegasos k=64 unreg", "numpy", "a9a", "pegasos",
     dict(lam=1e-4, k=64, max_iter=500, bias="unregularized")),
    ("pegasos k=64 optimal", "numpy", "a9a", "pegasos",
     dict(lam=1e-4, k=64, max_iter=300, bias="optimal", averaging="all")),
    ("sdca b=1 safe", "numpy", "a9a", "sdca",
     dict(lam=1e-4, b=1, max_iter=3000, variant="safe", sampling="epoch", tol=0.0)),
    ("sdca b=1 shrinking", "numpy", "a9a", "sdca",
     dict(lam=1e-4, b=1, max_iter=3000, variant="safe", sampling="epoch", tol=0.0,
          shrinking=True, eval_every=1000)),
    ("sdca b=64 aggressive", "numpy", "a9a", "sdca",
     dict(lam=1e-4, b=64, max_iter=300, variant="aggressive", tol=0.0, sigma2=0.1)),
    ("numba pegasos k=1 tail", "numba", "a9a", "pegasos",
     dict(lam=1e-4, k=1, max_iter=10 * 32561, averaging="tail", sampling="epoch")),
    ("numba sdca b=1 shrinking", "numba", "a9a", "sdca",
     dict(lam=1e-4, b=1, max_iter=10 * 32561, variant="safe", sampling="epoch", tol=0.0,
          shrinking=True)),
    ("numba sdca b=64 aggressive", "numba", "a9a", "sdca",
     dict(lam=1e-4, b=64, max_iter=5000, variant="aggressive", tol=0.0, sigma2=0.1)),
]


def load(name):
    from gpusvm.datasets import load_svmlight
    X, y = load_svmlight(DATA / name / name, n_features=123)
    return X.astype(np.float64), np.where(y > 0, 1.0, -1.0)


def run(repeat: int, only: str | None):
    from gpusvm.backends import make_backend
    from gpusvm.solvers.pegasos import pegasos
    from gpusvm.solvers.sdca import sdca
    X, y = load("a9a")
    out = {}
    for name, backend, _, solver, kw in CASES:
        if only and only not in name:
            continue
        fn = pegasos if solver == "pegasos" else sdca
        best, res = np.inf, None
        for _ in range(repeat):
            be = make_backend(backend, X, y)
            c0 = time.process_time()
            res = fn(be, seed=3, **kw)
            best = min(best, time.process_time() - c0)
        out[name] = (best, np.asarray(res.w, dtype=np.float64), float(res.b))
        print(f"{name:28s} {best:8.3f} s CPU", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only")
    ap.add_argument("--compare", nargs=2)
    a = ap.parse_args()
    if a.compare:
        old, new = (np.load(f, allow_pickle=True)["runs"].item() for f in a.compare)
        print(f"{'case':28s} {'old s':>8s} {'new s':>8s} {'new/old':>8s} {'|dw|/|w|':>10s} {'|db|':>9s}")
        for name in old:
            if name not in new:
                continue
            (t0, w0, b0), (t1, w1, b1) = old[name], new[name]
            dw = np.linalg.norm(w1 - w0) / max(np.linalg.norm(w0), 1e-300)
            print(f"{name:28s} {t0:8.3f} {t1:8.3f} {t1 / t0:8.2f} {dw:10.2e} {abs(b1 - b0):9.2e}")
        return
    runs = run(a.repeat, a.only)
    np.savez(a.out, runs=np.array(runs, dtype=object))


if __name__ == "__main__":
    main()
