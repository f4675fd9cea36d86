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
per class), plus SDCA at ``batch_size`` 64 and 1024 (and 64 on letter), and Pegasos at
the default batch size, with ``gpusvm demo``'s batches of 256, with replacement and with the
optimal bias on a9a.

``--instructions`` counts instead of timing (host load cannot move it): each checkout's
fit runs once, after its warm-up fit, under ``valgrind --tool=callgrind`` with the
instrumentation switched on for that fit only (a client request from a small C helper the
script compiles; needs ``valgrind``, its headers and a C compiler), and the table gives the
instructions the fit executed, all of them and those of the compiled (numba) code alone.
Instructions are not time (cache misses and dependency chains are not counted), but a loop
that executes more of them for the same iterates is doing more work.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
# the batches drawn inside the loop (not the epochs' orders of one-row batches)
CASES["a9a-pegasos-demo"] = ("a9a", "PegasosSVC", {"lam": 1e-3, "batch_size": 256,
                                                   "max_iter": 12720, "averaging": "tail"})
CASES["a9a-pegasos-replacement"] = ("a9a", "PegasosSVC", {"sampling": "with_replacement"})
CASES["a9a-pegasos-optimal"] = ("a9a", "PegasosSVC", {"bias": "optimal"})
CASES["letter-sdca-b64"] = ("letter", "SDCASVC", {"batch_size": 64})


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
    if os.environ.get("BENCH_MERGE_CALLGRIND"):                      # --instructions
        import ctypes
        helper = ctypes.CDLL(os.environ["BENCH_MERGE_CALLGRIND"])
        model = make(backend="numba", random_state=0, **kw)
        helper.cg_start()
        model.fit(X, y)
        helper.cg_stop()
        np.save(out, model.coef_)
        print(json.dumps({"seconds": 0.0, "package": str(Path(gpusvm.__file__).parent)}))
        return
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


#: the client requests that count one fit only (valgrind/callgrind.h)
_HELPER = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("fit"); }
"""


def _count(case: str, checkouts, tmp: Path):
    """Per checkout, ``(instructions of the fit, of its compiled code, coef_)``, the
    checkouts' processes run side by side (counts do not depend on load)."""
    helper = tmp / "libcg.so"
    if not helper.exists():
        (tmp / "cg.c").write_text(_HELPER)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(helper), str(tmp / "cg.c")],
                       check=True)
    procs = []
    for i, checkout in enumerate(checkouts):
        env = dict(os.environ, PYTHONPATH=str(checkout), BENCH_MERGE_CALLGRIND=str(helper),
                   GPUSVM_COMPILE_AHEAD="0")
        out, prof = tmp / f"coef{i}.npy", tmp / f"cg{i}.out"
        for old in tmp.glob(f"cg{i}.out*"):
            old.unlink()
        warm = subprocess.run([sys.executable, __file__, "--child", case, "--repeats", "1",
                               "--out", str(out)], env=env, capture_output=True, text=True,
                              check=False)                                # warm the cache
        if warm.returncode != 0:
            raise SystemExit(f"{case} with {checkout} failed:\n{warm.stderr[-3000:]}")
        procs.append((subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={prof}", sys.executable, __file__, "--child", case,
             "--repeats", "1", "--out", str(out)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True), out, prof))
    results = []
    for proc, out, prof in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{case} under callgrind failed:\n{err[-3000:]}")
        dump, = prof.parent.glob(prof.name + ".*")
        ann = subprocess.run(["callgrind_annotate", "--threshold=100", str(dump)],
                             capture_output=True, text=True, check=True).stdout
        total = compiled = 0
        for line in ann.splitlines():
            m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$", line)
            if m is None:
                continue
            count = int(m.group(1).replace(",", ""))
            if m.group(2).startswith("PROGRAM TOTALS"):
                total = count
            elif re.fullmatch(r"\?\?\?:0x[0-9a-f]+ \[\?\?\?\]", m.group(2).strip()):
                compiled += count                   # numba's code: no symbol and no file
        results.append((total, compiled, np.load(out)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="checkout of the code before the change")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under callgrind instead of timing")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats, args.out)
        return
    if args.before is None:
        parser.error("--before PATH is needed (a checkout of the old code)")
    if args.instructions:
        print("| case | before, fit | after, fit | ratio | before, compiled code | after, "
              "compiled code | ratio | max abs coef diff |")
        print("|---|---|---|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            for case in args.cases:
                (a0, b0, c0), (a1, b1, c1) = _count(case, (args.before, ROOT), Path(tmp))
                diff = float(np.max(np.abs(c1 - c0))) if c0.shape == c1.shape else float("nan")
                print(f"| {case} | {a0 / 1e6:.1f}M | {a1 / 1e6:.1f}M | {a1 / a0:.3f} | "
                      f"{b0 / 1e6:.1f}M | {b1 / 1e6:.1f}M | {b1 / max(b0, 1):.3f} | {diff:.1e} |",
                      flush=True)
        return
    print("| case | before s | after s | ratio | max abs coef diff |")
    print("|---|---|---|---|---|")
    for case in args.cases:
        t0, c0 = run(case, args.before, args.repeats)
        t1, c1 = run(case, ROOT, args.repeats)
        diff = float(np.max(np.abs(c1 - c0))) if c0.shape == c1.shape else float("nan")
        print(f"| {case} | {t0:.3f} | {t1:.3f} | {t1 / t0:.2f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
