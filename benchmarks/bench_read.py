"""Reading svmlight text: gpusvm's compiled reader against scikit-learn's, and the binary form.

Run from the repository root::

    python benchmarks/bench_read.py                     # a generated 1.1 GB file in /tmp
    python benchmarks/bench_read.py --gb 2 --rounds 5 --json benchmarks/results/read.json
    python benchmarks/bench_read.py --small             # also the first read of small files

The script writes a svmlight file of ``--gb`` gigabytes (seeded: the same bytes on every
run; rows of 48 nonzeros each, column indices up to 10^6, values with
six significant digits, as text sets are written) to ``--dir`` (default ``/tmp``), checks that
``gpusvm.datasets.load_svmlight`` and scikit-learn's ``load_svmlight_file`` give the same matrix
bit for bit (values, labels, indices, row pointers, shape), then times, in ``--rounds`` rounds,
each round running every reader once in a rotating order so that the machine's load falls on
all of them alike:

* ``sklearn``: ``sklearn.datasets.load_svmlight_file`` (one core);
* ``gpusvm t=1``, ``t=2``, ...: ``load_svmlight`` with numba limited to that many threads
  (``numba.set_num_threads``; the compiled code is loaded before the rounds);

and prints the median seconds, MB/s, the median of the per-round ratios to scikit-learn and
the CPU seconds of all the process's threads (on a shared machine the wall-clock ratio of one
thread against scikit-learn is the load-free ratio of the CPU seconds).
Then it saves the set in the binary form (``gpusvm.datasets.save_binary``) and times
reopening it (``load_svmlight`` on the ``.gsvm`` file: memory map plus the header and CSR
checks; median of 5) and reopening plus one pass over the values (the pages read).

``--small`` adds the first read of a file in a fresh process (numba's import and the loading
of its cached code included) for prefixes of the file from 1 to 32 MB, scikit-learn's path
against the compiled one: where ``datasets.PARALLEL_MIN_BYTES`` should sit.

``--long sklearn`` (or ``--long repr``) replaces the six-digit file by one of ``--nnz``
nonzeros (default 10^7) of long decimals, written by scikit-learn's ``dump_svmlight_file``
(16 significant digits) or as ``repr`` writes float64 (up to 17): the numbers that need the
compiled parser's Eisel-Lemire rounding rather than Clinger's fast path.

The generated files are deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sklearn.datasets import load_svmlight_file  # noqa: E402

from gpusvm import datasets  # noqa: E402

NNZ_PER_ROW, N_COLS, BLOCK_ROWS = 48, 10**6, 20_000


def generate(path: Path, gigabytes: float, seed: int = 0) -> None:
    """A seeded svmlight file of about ``gigabytes`` GB (``10**9`` bytes)."""
    rng = np.random.default_rng(seed)
    values = [f"{v:.6g}" for v in rng.random(1 << 16)]
    target = int(gigabytes * 1e9)
    written = 0
    with open(path, "w") as f:
        while written < target:
            cols = np.sort(rng.integers(1, N_COLS - NNZ_PER_ROW, size=(BLOCK_ROWS, NNZ_PER_ROW)),
                           axis=1) + np.arange(NNZ_PER_ROW)      # strictly increasing
            picks = rng.integers(0, len(values), size=(BLOCK_ROWS, NNZ_PER_ROW))
            labels = np.where(rng.random(BLOCK_ROWS) < 0.5, "-1", "+1")
            lines = [label + " " + " ".join(f"{c}:{values[k]}" for c, k in zip(row, pick))
                     for label, row, pick in zip(labels, cols.tolist(), picks.tolist())]
            text = "\n".join(lines) + "\n"
            f.write(text)
            written += len(text)


def generate_long(path: Path, nnz: int, writer: str, seed: int = 0) -> None:
    """A seeded file of about ``nnz`` nonzeros of long decimals: ``writer="sklearn"`` by
    ``sklearn.datasets.dump_svmlight_file`` (``%.16g``: 16 significant digits), ``"repr"`` as
    Python's ``repr`` writes float64 (up to 17 digits; gpusvm's own text output)."""
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file
    rng = np.random.default_rng(seed)
    rows = max(1, nnz // NNZ_PER_ROW)
    with open(path, "wb") as f:
        for r0 in range(0, rows, BLOCK_ROWS):
            k = min(BLOCK_ROWS, rows - r0)
            cols = np.sort(rng.integers(0, N_COLS - NNZ_PER_ROW, size=(k, NNZ_PER_ROW)),
                           axis=1) + np.arange(NNZ_PER_ROW)
            vals = rng.random((k, NNZ_PER_ROW)) * 10.0 ** rng.integers(-3, 1, (k, NNZ_PER_ROW))
            y = np.where(rng.random(k) < 0.5, -1.0, 1.0)
            if writer == "sklearn":
                X = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(k + 1) * NNZ_PER_ROW),
                                  shape=(k, N_COLS))
                dump_svmlight_file(X, y, f, zero_based=False)
            else:
                f.write("".join(f"{int(t)} " + " ".join(f"{c + 1}:{v!r}" for c, v in zip(cr, vr))
                                + "\n" for t, cr, vr in zip(y, cols.tolist(), vals.tolist())
                                ).encode())


def assert_same(path: Path) -> None:
    """gpusvm's matrix equals scikit-learn's, bit for bit."""
    Xs, ys = load_svmlight_file(str(path), dtype=np.float32)
    Xg, yg = datasets.load_svmlight(path)
    assert Xg.shape == Xs.shape, (Xg.shape, Xs.shape)
    assert Xg.data.dtype == Xs.data.dtype and Xg.data.tobytes() == Xs.data.tobytes()
    assert np.array_equal(Xg.indices, Xs.indices) and np.array_equal(Xg.indptr, Xs.indptr)
    assert yg.tobytes() == ys.tobytes()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed_cpu(fn) -> tuple[float, float]:
    """Wall and CPU seconds (every thread of the process) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def read_rounds(path: Path, rounds: int, threads: list[int], sklearn: bool = True) -> dict:
    from numba import set_num_threads
    readers = {"sklearn": lambda: load_svmlight_file(str(path), dtype=np.float32)} if sklearn else {}
    for t in threads:
        def ours(t=t):
            set_num_threads(t)
            datasets.load_svmlight(path)
        readers[f"gpusvm t={t}"] = ours
    names = list(readers)
    times = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            wall, used = timed_cpu(readers[name])
            times[name].append(wall)
            cpu[name].append(used)
            print(f"  round {r + 1}: {name}: {wall:.2f} s, CPU {used:.2f} s", file=sys.stderr,
                  flush=True)
    return times, cpu


def reopen(path: Path, gsvm: Path) -> dict:
    X, y, zero_based = datasets.load_svmlight(path, return_zero_based=True)
    save = timed(lambda: datasets.save_binary(gsvm, X, y, zero_based=zero_based))
    del X, y
    opens = [timed(lambda: datasets.load_svmlight(gsvm)) for _ in range(5)]
    unchecked = [timed(lambda: datasets.load_binary(gsvm, check=False)) for _ in range(5)]
    passes = [timed(lambda: float(datasets.load_svmlight(gsvm)[0].data.sum(dtype=np.float64)))
              for _ in range(3)]
    return {"save_s": save, "reopen_s": statistics.median(opens),
            "reopen_unchecked_s": statistics.median(unchecked),
            "reopen_and_pass_s": statistics.median(passes), "gsvm_bytes": gsvm.stat().st_size}


_CHILD = """
import sys, time
from pathlib import Path
import numpy as np
import gpusvm.datasets as d
path, mode = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if mode == "sklearn":
    d._read_sklearn(path, np.dtype(np.float32), None, "auto")
else:
    d._read_compiled(path, np.dtype(np.float32), min_bytes=0, chunk_bytes=d.CHUNK_BYTES)
print(time.perf_counter() - start)
"""


def small_files(path: Path, rounds: int) -> list[dict]:
    rows = []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(path, "rb") as f:
        head = f.read(40 << 20)
    for mb in (1, 2, 4, 8, 16, 32):
        cut = head[: head.rindex(b"\n", 0, mb << 20) + 1]
        part = path.with_name(f"{path.stem}_{mb}mb.svm")
        part.write_bytes(cut)
        t = {"sklearn": [], "compiled": []}
        for r in range(rounds):
            for mode in (("sklearn", "compiled") if r % 2 == 0 else ("compiled", "sklearn")):
                out = subprocess.run([sys.executable, "-c", _CHILD, str(part), mode], env=env,
                                     capture_output=True, text=True, check=True)
                t[mode].append(float(out.stdout.split()[-1]))
        part.unlink()
        rows.append({"mb": mb, "sklearn_s": statistics.median(t["sklearn"]),
                     "compiled_s": statistics.median(t["compiled"]),
                     "ratio": statistics.median(s / c for s, c in zip(t["sklearn"], t["compiled"]))})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=1.1, help="size of the generated file (GB)")
    parser.add_argument("--dir", default="/tmp", help="where to write it (default /tmp)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (default 3)")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="thread counts of gpusvm's reader (default 1 and every core)")
    parser.add_argument("--small", action="store_true", help="also the small-file first reads")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--long", choices=["sklearn", "repr"],
                        help="instead of --gb of six-digit values: a file of --nnz long decimals "
                             "written by scikit-learn's dump_svmlight_file (16 digits) or by repr")
    parser.add_argument("--nnz", type=float, default=1e7,
                        help="nonzeros of the --long file (default 1e7)")
    parser.add_argument("--no-sklearn", action="store_true",
                        help="neither the equality check nor the timing of scikit-learn's reader "
                             "(gpusvm's MB/s alone, where its minutes of one core do not fit)")
    args = parser.parse_args(argv)
    from numba import config
    threads = args.threads or sorted({1, config.NUMBA_NUM_THREADS})
    name = f"{args.long}_{args.nnz:g}nnz" if args.long else f"{args.gb:g}gb"
    path = Path(args.dir) / f"gpusvm_bench_read_{name}.svm"
    gsvm = path.with_suffix(".gsvm")
    try:
        if not path.exists():
            print(f"writing {path} ...", file=sys.stderr, flush=True)
            if args.long:
                generate_long(path, int(args.nnz), args.long)
            else:
                generate(path, args.gb)
        size = path.stat().st_size
        if not args.no_sklearn:
            print(f"checking bit-for-bit equality with scikit-learn on {path} ...", file=sys.stderr)
            assert_same(path)
        datasets.load_svmlight(path)            # the compiled code loaded, the file cached
        times, cpu = read_rounds(path, args.rounds, threads, not args.no_sklearn)
        binary = reopen(path, gsvm)
        small = small_files(path, args.rounds) if args.small else []
    finally:
        if not args.keep:
            for p in (path, gsvm):
                p.unlink(missing_ok=True)
    sk = times.get("sklearn")
    print(f"\n{size / 1e9:.2f} GB svmlight text, {os.cpu_count()} cores "
          f"({platform.processor() or platform.machine()}), {args.rounds} rounds, same matrix "
          "as scikit-learn bit for bit\n")
    print("| reader | median s | MB/s | x scikit-learn (median of rounds) | CPU s (all threads) |")
    print("|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        ratio = statistics.median(s / t for s, t in zip(sk, ts)) if sk else float("nan")
        print(f"| {name} | {statistics.median(ts):.2f} | {size / 1e6 / statistics.median(ts):.0f} "
              f"| {ratio:.2f} | {statistics.median(cpu[name]):.2f} |")
    print(f"\nbinary form ({binary['gsvm_bytes'] / 1e9:.2f} GB): written in {binary['save_s']:.2f} s, "
          f"reopened in {binary['reopen_s']:.3f} s ({binary['reopen_unchecked_s']:.4f} s without "
          f"the CSR check), reopened + one pass over the values {binary['reopen_and_pass_s']:.3f} s")
    if small:
        print("\nfirst read in a fresh process (imports excluded, numba's import and cache load "
              "included)\n\n| MB | sklearn s | compiled s | sklearn / compiled |\n|---:|---:|---:|---:|")
        for row in small:
            print(f"| {row['mb']} | {row['sklearn_s']:.3f} | {row['compiled_s']:.3f} | "
                  f"{row['ratio']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "bytes": size, "rounds": args.rounds, "times_s": times, "cpu_s": cpu, "binary": binary,
            "small": small, "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
