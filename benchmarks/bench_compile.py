"""The first fit from a cold numba cache: how long each path waits for compilation.

Run from the repository root (the data sets are read from ``../shared/data``)::

    python benchmarks/bench_compile.py                          # every path, this checkout
    python benchmarks/bench_compile.py --before /tmp/gpusvm_old # and an older checkout, interleaved
    python benchmarks/bench_compile.py --paths sdca pegasos --detail
    python benchmarks/bench_compile.py --cpus 0,1 --repeat 3   # wall as a 2-core user waits it

Every path runs in a fresh Python process with ``NUMBA_CACHE_DIR`` set to a new,
empty temporary directory, so nothing compiled by an earlier run (or another
path) is reused.  In that process the data are loaded and converted first (not
timed), then the estimator is fitted twice on the same data:

* ``wait s``: what a user waits, in wall time: the first ``fit`` less the second
  (compilation, loading of the compiled code, the helpers' NumPy equivalents, any
  wait for a compilation elsewhere); the figure the compile notice states, to be
  measured on an otherwise idle machine (``--cpus 0,1``: a 2-core host);
* ``compile s``: the seconds the fitting thread spends compiling during the
  first fit (numba's ``numba:compile`` events, nested compilations counted
  once), as wall time and as CPU time of that thread (the CPU time does not
  grow when other processes share the cores);
* ``fit CPU s``: the CPU time of the fitting thread over the first fit, less the
  second's (its share of ``wait s`` that no other core can take);
* ``ahead s``: the CPU seconds compiled ahead while the fit goes on
  (``gpusvm.backends._compile_nb.AHEAD``: the helpers a fit calls after its
  loop): by the compiling process (``ahead process CPU s``, the whole process,
  its start included) and by a background thread of the fit's process
  (``ahead thread CPU s``), and ``after fit s``: how long they were still busy
  once the first fit had returned;
* ``first fit s``, ``warm fit s``: the wall times of the two fits.

Paths (the ones ``gpusvm.LinearSVC`` dispatches to, Pegasos, ``gpusvm demo``'s options,
the options that change the compiled loop, and every other estimator of ``gpusvm.__all__``
on its defaults): binary data are a9a (32,561 x 123; its first 2,000 rows for
``KernelPegasosSVC``), multiclass data are letter (15,000 x 16, 26 classes); ``C = 1``
(``lam`` where a path sets it); float32 unless the name ends in ``_f64``.  The
``linearsvc_<set>`` paths fit ``gpusvm.LinearSVC()`` on each data set of
``bench_linearsvc.py`` as it is loaded there (float64, the split's training
part), whichever solver the estimator picks for it.

``--repeat K`` runs every path K times a side (alternated) and reports the run of
median compile CPU time, with every run's figure on the progress line.

``--before PATH`` runs the same paths with the ``gpusvm`` package of another
checkout (for example ``git archive <commit> | tar -x -C PATH``) in the same
run, each before/after pair back to back, so that both columns share the
machine's load.  ``--detail`` prints, per path, the functions compiled and
their seconds (outermost compilations only).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"

#: path -> (estimator, keyword arguments, data set)
PATHS = {
    "sdca": ("SDCASVC", {}, "a9a"),
    "sdca_sqhinge": ("SDCASVC", {"loss": "squared_hinge"}, "a9a"),
    "sdca_multiclass": ("SDCASVC", {"loss": "squared_hinge"}, "letter"),
    "newton": ("SDCASVC", {"loss": "squared_hinge", "solver": "newton"}, "a9a"),
    "pegasos": ("PegasosSVC", {}, "a9a"),
    "pegasos_multiclass": ("PegasosSVC", {}, "letter"),
    "sdca_f64": ("SDCASVC", {"dtype": "float64"}, "a9a"),
    "sdca_sqhinge_f64": ("SDCASVC", {"loss": "squared_hinge", "dtype": "float64"}, "a9a"),
    "sdca_multiclass_f64": ("SDCASVC", {"loss": "squared_hinge", "dtype": "float64"}, "letter"),
    "newton_f64": ("SDCASVC", {"loss": "squared_hinge", "solver": "newton", "dtype": "float64"},
                   "a9a"),
    "pegasos_f64": ("PegasosSVC", {"dtype": "float64"}, "a9a"),
    # ``gpusvm demo``'s options (cli.DEMO): batches of 256, tail averaging, augmented bias
    "demo": ("PegasosSVC", {"lam": 1e-3, "batch_size": 256, "max_iter": 12720,
                            "averaging": "tail", "bias": "augmented", "eval_every": 1272},
             "a9a"),
    # documented options that change the compiled loop: batches drawn inside it, the
    # batch-optimal bias, Alg. 2's aggressive steps, several outputs of a batch
    "pegasos_optimal": ("PegasosSVC", {"bias": "optimal"}, "a9a"),
    "pegasos_replacement": ("PegasosSVC", {"sampling": "with_replacement"}, "a9a"),
    "pegasos_b64_multiclass": ("PegasosSVC", {"batch_size": 64}, "letter"),
    "sdca_b64": ("SDCASVC", {"batch_size": 64}, "a9a"),
    "sdca_b64_multiclass": ("SDCASVC", {"batch_size": 64}, "letter"),
    # batches drawn inside the loop (sampling other than "epoch"), several rows
    "sdca_b64_replacement": ("SDCASVC", {"batch_size": 64, "sampling": "with_replacement"},
                             "a9a"),
    "pegasos_b64_replacement": ("PegasosSVC", {"batch_size": 64,
                                               "sampling": "with_replacement"}, "a9a"),
    # the other estimators of gpusvm.__all__ on their defaults
    "linearsvccv": ("LinearSVCCV", {}, "a9a"),
    "sdcasvccv": ("SDCASVCCV", {}, "a9a"),
    "pegasossvccv": ("PegasosSVCCV", {}, "a9a"),
    "kernel": ("KernelPegasosSVC", {}, "a9a_2000"),
}
#: ``gpusvm.LinearSVC()`` on the data of ``bench_linearsvc.py``, as its users load them
#: (float64; the solver the estimator picks: Newton, SDCA or SDCA then Newton)
for _name in ("a9a", "w8a", "ijcnn1", "imdb", "news20", "letter", "pendigits",
              "news20_multiclass", "news20_tfidf"):
    PATHS[f"linearsvc_{_name}"] = ("LinearSVC", {}, f"linearsvc:{_name}")


def _load(name):
    from sklearn.datasets import load_svmlight_file  # noqa: PLC0415

    if name.startswith("linearsvc:"):
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from _linearsvc_data import load  # noqa: PLC0415
        return load(name.partition(":")[2])[:2]
    if name.startswith("a9a"):
        X, y = load_svmlight_file(str(DATA / "a9a" / "a9a"), n_features=123)
        if name == "a9a_2000":                  # kernel Pegasos: an n x n kernel's worth
            X, y = X[:2000], y[:2000]
    else:
        X, y = load_svmlight_file(str(DATA / "letter" / "letter.scale"))
    return X, y


def child(path: str) -> dict:
    """Fit one path twice in this (fresh) process; the figures as a dict."""
    import numpy as np  # noqa: PLC0415

    est_name, kwargs, data = PATHS[path]
    X, y = _load(data)
    if not data.startswith("linearsvc:"):
        dtype = np.float64 if kwargs.get("dtype") == "float64" else np.float32
        X = X.astype(dtype)
        X.indices = X.indices.astype(np.int32)
        X.indptr = X.indptr.astype(np.int32)

    t = time.perf_counter()
    import gpusvm  # noqa: PLC0415
    t_import = time.perf_counter() - t
    from numba.core import event  # noqa: PLC0415

    main = threading.get_ident()

    class Compiles(event.Listener):
        """Outermost ``numba:compile`` events: seconds of the fitting thread and of others
        (numba's compiler lock serialises them), and per function."""

        def __init__(self):
            self.depth, self.per = 0, []
            self.total = self.cpu = self.bg_total = self.bg_cpu = 0.0

        def on_start(self, ev):
            if self.depth == 0:
                self.t0, self.c0 = time.perf_counter(), time.thread_time()
                disp = (ev.data or {}).get("dispatcher")
                self.name = getattr(disp, "__qualname__", None) or getattr(
                    getattr(disp, "py_func", None), "__qualname__", "?")
            self.depth += 1

        def on_end(self, ev):
            self.depth -= 1
            if self.depth == 0:
                dt = time.perf_counter() - self.t0
                cpu = time.thread_time() - self.c0
                if threading.get_ident() == main:
                    self.total += dt
                    self.cpu += cpu
                    self.per.append((self.name, round(dt, 2)))
                else:
                    self.bg_total += dt
                    self.bg_cpu += cpu
                    self.per.append((self.name + " (ahead)", round(dt, 2)))

    est_cls = getattr(gpusvm, est_name)
    params = est_cls().get_params()
    base = {"random_state": 0}
    if "C" in params and "lam" not in kwargs:
        base["C"] = 1.0
    kwargs = {**base, **kwargs}
    fits = []
    listener = Compiles()
    cpus = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with event.install_listener("numba:compile", listener):
            t, c = time.perf_counter(), time.thread_time()
            est_cls(**kwargs).fit(X, y)
            fits.append(time.perf_counter() - t)
            cpus.append(time.thread_time() - c)
            t = time.perf_counter()
            ahead = getattr(importlib.import_module("gpusvm.backends._compile_nb"), "AHEAD",
                            None)
            if ahead is not None:                       # an older checkout has none
                ahead.wait()
            after = time.perf_counter() - t
        t, c = time.perf_counter(), time.thread_time()
        est_cls(**kwargs).fit(X, y)
        fits.append(time.perf_counter() - t)
        cpus.append(time.thread_time() - c)
    child_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    notices = [str(w.message) for w in caught if type(w.message).__name__ == "CompilationNotice"]
    return {"path": path, "import_s": t_import, "compile_s": listener.total,
            "compile_cpu_s": listener.cpu, "ahead_s": listener.bg_total,
            "ahead_cpu_s": listener.bg_cpu, "after_fit_s": after,
            "process_cpu_s": child_cpu.ru_utime + child_cpu.ru_stime,
            "fit_cpu_s": cpus[0] - cpus[1], "wait_s": fits[0] - fits[1],
            "first_s": fits[0], "warm_s": fits[1], "compiled": listener.per,
            "notices": notices}


def run_path(path: str, package_root: Path, cpus=None) -> dict:
    """One path in a fresh process with an empty numba cache (and the given checkout), on
    the CPUs ``cpus`` (None: any)."""
    with tempfile.TemporaryDirectory(prefix="gpusvm-bench-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")]))
        pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", path],
                             env=env, capture_output=True, text=True, check=False,
                             preexec_fn=pin)
    if out.returncode != 0:
        raise RuntimeError(f"path {path} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=list(PATHS))
    parser.add_argument("--before", type=Path, default=None,
                        help="root of an older checkout to measure in the same run")
    parser.add_argument("--after", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--detail", action="store_true", help="list the functions compiled")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per path and side, alternated; the run of median compile "
                             "CPU is reported (this machine's compile times vary by +-0.3 s)")
    parser.add_argument("--cpus", default=None,
                        help="run every fit on these CPUs only, e.g. 0,1 (a 2-core host)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cpus = None if args.cpus is None else {int(c) for c in args.cpus.split(",")}
    if args.child:
        print(json.dumps(child(args.child)))
        return

    rows = []
    def median_run(runs):
        return sorted(runs, key=lambda r: r["compile_cpu_s"])[(len(runs) - 1) // 2] if runs \
            else None

    for path in args.paths:
        runs_b, runs_a = [], []
        for _ in range(max(1, args.repeat)):
            if args.before:
                runs_b.append(run_path(path, args.before, cpus))
            runs_a.append(run_path(path, args.after, cpus))
        before, after = median_run(runs_b), median_run(runs_a)
        rows.append((path, before, after))
        every = " / ".join(
            f"{label} " + ", ".join(f"{r['compile_cpu_s']:.2f}" for r in runs)
            for label, runs in (("before", runs_b), ("after", runs_a)) if runs)
        print(f"  {path}: compile CPU s {before['compile_cpu_s'] if before else float('nan'):.2f} "
              f"-> {after['compile_cpu_s']:.2f}, wait s "
              f"{before['wait_s'] if before else float('nan'):.2f} -> {after['wait_s']:.2f}"
              f"  (every run: {every})", file=sys.stderr, flush=True)
        if args.json:                 # after every path, so that a long run keeps its figures
            args.json.write_text(json.dumps(rows, indent=1))

    def cell(r, key):
        return f"{r[key]:.2f}" if r and key in r else "-"

    cols = [("wait_s", "wait s"), ("compile_cpu_s", "compile CPU s"), ("compile_s", "compile s"),
            ("fit_cpu_s", "fit CPU s"), ("process_cpu_s", "ahead process CPU s"),
            ("ahead_cpu_s", "ahead thread CPU s"), ("after_fit_s", "after fit s"),
            ("first_s", "first fit s"), ("warm_s", "warm fit s")]
    sides = [("before", 1), ("after", 2)] if args.before else [("", 2)]
    head = [f"{name} {label}".strip() for key, name in cols for label, _ in sides]
    print("| path | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for row in rows:
        print(f"| {row[0]} | " + " | ".join(cell(row[i], key) for key, _ in cols
                                            for _, i in sides) + " |")
    print(f"\nimport gpusvm: {sum(a['import_s'] for _, _, a in rows) / len(rows):.2f} s (mean)")
    if args.detail:
        for path, b, a in rows:
            for label, r in (("before", b), ("after", a)):
                if r:
                    print(f"\n{path} ({label}): {r['compiled']}")
                    for n in r["notices"]:
                        print(f"  notice: {n}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
