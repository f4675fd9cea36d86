"""Peak memory of a fit over its data: every solver, one thread and two, in a fresh process each.

A generated set (:func:`gpusvm.datasets.make_sparse_classification`) is written once as the
binary store; each fit runs in its own subprocess, which imports gpusvm, compiles on a tiny
fit, reads its resident set (``base``), loads the store into memory, resets the kernel's
high-water mark (``/proc/self/clear_refs``), fits, and reports ``VmHWM``.  ``rss_ratio`` is
``(VmHWM - base) / data`` (the caller's CSR counted once: data, indices, indptr), ``numpy_ratio``
the peak of the fit's own allocations by :mod:`tracemalloc` over the same bytes.  ``--ref``
runs every fit also on another checkout (its ``PYTHONPATH``), interleaved, for before/after
ratios of memory and time in the same run.

    nice python benchmarks/bench_memory.py --nnz 2e7 --repeats 2 --ref /work/main \\
        --out benchmarks/results/memory-2026-12-02.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _vm(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def child(path, dual, n_jobs):
    """One fit of the store ``path`` in this process; prints a JSON line."""
    import tracemalloc  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    import gpusvm  # noqa: PLC0415
    from gpusvm.datasets import load_binary, make_sparse_classification  # noqa: PLC0415

    Xs, ys = make_sparse_classification(2000, 500, nnz_per_row=20, random_state=1)
    gpusvm.LinearSVC(dual=dual, n_jobs=n_jobs).fit(Xs, ys)      # compiled before measuring
    base = _vm("VmRSS")
    X, y = load_binary(path)
    X = X.tocsr()
    X.data = np.array(X.data)       # in memory (a mapped store's pages count only once read)
    X.indices, X.indptr = np.array(X.indices), np.array(X.indptr)
    data = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    loaded = _vm("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                # VmHWM := VmRSS
    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    est = gpusvm.LinearSVC(dual=dual, n_jobs=n_jobs, random_state=0).fit(X, y)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    _, numpy_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    hwm = _vm("VmHWM")
    dec = est.decision_function(X[:1000])
    print(json.dumps(dict(
        solver=getattr(est, "solver_", None) or str(dual), n_jobs=n_jobs, nnz=int(X.nnz),
        data_bytes=data, base=base, loaded=loaded, hwm=hwm,
        rss_ratio=(hwm - base) / data, numpy_ratio=numpy_peak / data, wall_s=wall, cpu_s=cpu,
        n_iter=int(np.max(est.n_iter_)), coef_sum=float(np.sum(est.coef_, dtype=np.float64)),
        intercept=float(np.ravel(est.intercept_)[0]), decision_head=float(dec[0]))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nnz", type=float, default=2e7, help="nonzeros of the generated set")
    p.add_argument("--nnz-per-row", type=int, default=57)
    p.add_argument("--jobs", default="1,2")
    p.add_argument("--duals", default="False,True", help="False: Newton, True: SDCA")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ref", default=None, help="another checkout, measured interleaved")
    p.add_argument("--out", default=None)
    p.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child[0], a.child[1] == "True", int(a.child[2]))
    import numpy as np  # noqa: PLC0415

    from gpusvm.datasets import make_sparse_classification, save_binary  # noqa: PLC0415
    n = int(a.nnz / a.nnz_per_row)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("new", here)] + ([("ref", os.path.abspath(a.ref))] if a.ref else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "set.gsvm")
        X, y = make_sparse_classification(n, max(n // 4, 1000), nnz_per_row=a.nnz_per_row,
                                          random_state=0)
        save_binary(path, X, y)
        del X, y
        for rep in range(a.repeats):
            for dual in a.duals.split(","):
                for jobs in a.jobs.split(","):
                    for name, tree in (trees if rep % 2 == 0 else trees[::-1]):
                        env = dict(os.environ, PYTHONPATH=tree)
                        out = subprocess.run([sys.executable, os.path.abspath(__file__),
                                              "--child", path, dual, jobs], env=env,
                                             capture_output=True, text=True, cwd=tree)
                        if out.returncode:
                            row = dict(error=out.stderr.strip().splitlines()[-1:],
                                       rc=out.returncode)
                        else:
                            row = json.loads(out.stdout.strip().splitlines()[-1])
                        row.update(tree=name, dual=dual, repeat=rep)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    record = dict(nnz=a.nnz, nnz_per_row=a.nnz_per_row, n=n, when=time.strftime("%Y-%m-%d %H:%M"),
                  rows=rows, numpy=np.__version__)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
