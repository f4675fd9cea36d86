"""The numba backend before and after a change of its loops: CPU time and iterates, one run.

Run from the repository root (the data sets are read from ``../shared/data``)::

    python benchmarks/bench_merge.py --before /tmp/gpusvm_old     # a checkout of the old code
    python benchmarks/bench_merge.py --before /tmp/gpusvm_old --cases a9a-sdca letter-sdca

Every case fits an estimator with ``backend="numba"`` and ``random_state=0`` on the
training part of a data set (``benchmarks/_linearsvc_data.py``), float32, in a fresh
Python process per checkout (``PYTHONPATH`` set to it); the process fits once to
compile (not timed), then ``--repeats`` times, and reports the best CPU time of the
fits (``time.process_time``: it does not grow when other processes share the cores)
and the ``coef_`` of the last fit.  The two checkouts of a case run back to back, so
they share the machine's load; the table gives both times, their ratio and the
largest ``|coef_ before - coef_ after|`` (0, or rounding, when the iterates agree).

Cases: the defaults of ``SDCASVC()`` and ``PegasosSVC()`` on the binary sets (a9a,
w8a, imdb, news20) and on the multiclass ones (letter, news20_multiclass, one output
per class), plus SDCA at ``batch_size`` 64 and 1024 and Pegasos at the default batch
size on a9a.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: case -> (data set, estimator, keyword arguments)
CASES = {f"{d}-{e}": (d, est, {}) for d in ("a9a", "w8a", "imdb", "news20", "letter",
                                           "news20_multiclass")
         for e, est in (("sdca", "SDCASVC"), ("pegasos", "PegasosSVC"))}
CASES["a9a-sdca-b64"] = ("a9a", "SDCASVC", {"batch_size": 64})
CASES["a9a-sdca-b1024"] = ("a9a", "SDCASVC", {"batch_size": 1024})


def child(case: str, repeats: int, out: str) -> None:
    """Fit one case in this process; write ``{"seconds": best CPU s, "coef": ...}`` to ``out``."""
    import time
    import warnings

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpusvm
    from _linearsvc_data import load

    data, est, kw = CASES[case]
    X, y = load(data)[:2]
    warnings.simplefilter("ignore")
    make = getattr(gpusvm, est)
    make(backend="numba", random_state=0, **kw).fit(X, y)           # compile, load
    best = np.inf
    for _ in range(repeats):
        model = make(backend="numba", random_state=0, **kw)
        start = time.process_time()
        model.fit(X, y)
        best = min(best, time.process_time() - start)
    np.save(out, model.coef_)
    print(json.dumps({"seconds": best, "package": str(Path(gpusvm.__file__).parent)}))


def run(case: str, checkout: Path, repeats: int):
    """``(best CPU s, coef_)`` of the case with the ``gpusvm`` package of ``checkout``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "coef.npy")
        env = dict(os.environ, PYTHONPATH=str(checkout))
        proc = subprocess.run([sys.executable, __file__, "--child", case, "--repeats",
                               str(repeats), "--out", out], env=env, capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{case} with {checkout} failed:\n{proc.stderr[-3000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        if Path(res["package"]).parent.resolve() != checkout.resolve():
            raise SystemExit(f"{checkout} did not provide gpusvm (got {res['package']})")
        return res["seconds"], np.load(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="checkout of the code before the change")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats, args.out)
        return
    if args.before is None:
        parser.error("--before PATH is needed (a checkout of the old code)")
    print("| case | before s | after s | ratio | max abs coef diff |")
    print("|---|---|---|---|---|")
    for case in args.cases:
        t0, c0 = run(case, args.before, args.repeats)
        t1, c1 = run(case, ROOT, args.repeats)
        diff = float(np.max(np.abs(c1 - c0))) if c0.shape == c1.shape else float("nan")
        print(f"| {case} | {t0:.3f} | {t1:.3f} | {t1 / t0:.2f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
