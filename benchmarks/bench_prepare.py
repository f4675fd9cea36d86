"""A fit's input preparation alone: validation, CSR conversion, the intercept column.

Run from the repository root (the data sets are read from ``../shared/data``)::

    python benchmarks/bench_prepare.py                              # this checkout
    python benchmarks/bench_prepare.py --before /tmp/gpusvm_old     # and an older one, alternated

Times ``SDCASVC(bias="augmented")._prepare(X, y)`` (what every estimator's ``fit`` runs
before its solver: scikit-learn's validation, the CSR conversion of ``X``, the structure
and row-norm checks, the intercept column) on the data of ``bench_linearsvc.py`` as its
users load them (``_linearsvc_data.py``), in float64 and float32, the median of ``--repeats``
calls in a fresh process per checkout and run.  ``--before PATH`` runs the ``gpusvm`` package
of another checkout (``git archive <commit> gpusvm | tar -x -C PATH``) in the same run,
alternated with this one ``--runs`` times, so that both columns share the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("a9a", "ijcnn1", "imdb", "news20", "letter", "news20_multiclass")


def child(names, repeats: int) -> dict:
    """Median milliseconds of ``_prepare`` per data set and dtype, in this process."""
    import numpy as np  # noqa: PLC0415

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _linearsvc_data import load  # noqa: PLC0415

    from gpusvm import SDCASVC  # noqa: PLC0415
    out = {}
    for name in names:
        X, y = load(name)[:2]
        for dtype in ("float64", "float32"):
            est = SDCASVC(bias="augmented", dtype=dtype)
            est._prepare(X, y)
            times = []
            for _ in range(repeats):
                start = time.process_time()
                est._prepare(X, y)
                times.append(time.process_time() - start)
            out[f"{name} {dtype}"] = 1e3 * float(np.median(times))
    return out


def run(package_root: Path, names, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(package_root),
                                                         os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, "--child", "--datasets", *names,
                           "--repeats", str(repeats)], env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--repeats", type=int, default=21, help="calls per data set and run")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per checkout")
    parser.add_argument("--before", type=Path, default=None,
                        help="root of an older checkout, measured alternately")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.datasets, args.repeats)))
        return
    sides = [("after", ROOT)] + ([("before", args.before)] if args.before else [])
    results = {side: [] for side, _ in sides}
    for _ in range(args.runs):
        for side, root in reversed(sides):
            results[side].append(run(root, args.datasets, args.repeats))
            print(f"  {side}: " + ", ".join(f"{k} {v:.1f}" for k, v in results[side][-1].items()),
                  flush=True)
    keys = list(results["after"][0])
    head = "| data, dtype | " + " | ".join(f"{s} ms (runs)" for s, _ in reversed(sides)) + " |"
    print(head)
    print("|---" * (len(sides) + 1) + "|")
    for k in keys:
        cells = [", ".join(f"{r[k]:.1f}" for r in results[s]) for s, _ in reversed(sides)]
        print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
