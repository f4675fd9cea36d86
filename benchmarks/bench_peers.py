"""Time to primal suboptimality eps on a CPU: gpusvm's solvers against LIBLINEAR, SGD and Snap ML.

Run from the repository root (the data sets are read from ``../shared/data``)::

    python benchmarks/bench_peers.py                     # a9a, w8a, imdb, news20; prints the table
    python benchmarks/bench_peers.py --json peers.json   # also keep every measurement
    python benchmarks/bench_peers.py --datasets imdb --repeats 3
    python benchmarks/bench_peers.py --defaults-only --repeats 3   # the first table only

Two tables, in this order: every estimator on its **defaults** (only ``lam`` and
``bias="none"`` set, as a new user would) against LinearSVC at its default
tolerance, with the settings each default resolved to; then the **tuned**
settings below.

Problem: every method minimises the same objective,
``P(w) = lam/2 ||w||^2 + (1/n) sum_i max(0, 1 - y_i <w, x_i>)`` with ``lam = 1e-4``
and no intercept:

* LIBLINEAR: ``sklearn.svm.LinearSVC(C=1/(lam n), loss="hinge", dual=True,
  fit_intercept=False)`` (dual coordinate descent with shrinking);
* SGD: ``sklearn.linear_model.SGDClassifier(loss="hinge", alpha=lam,
  fit_intercept=False, tol=None)`` (its objective is ``mean hinge + alpha/2 ||w||^2``);
* Snap ML: ``snapml.SupportVectorMachine(regularizer=lam n, fit_intercept=False,
  n_jobs=1)``: Snap ML minimises ``sum_i hinge + regularizer/2 ||w||^2``, i.e.
  ``n`` times ``P`` when ``regularizer = lam n`` (checked: a tight Snap ML fit
  lands within 1e-5 of ``P*``; with ``regularizer = lam`` it is off by 0.04-0.9);
  optional (skipped, and said so, when ``snapml`` is not installed);
* gpusvm: :class:`gpusvm.SDCASVC` and :class:`gpusvm.PegasosSVC`
  on the compiled CPU backend (``backend="numba"``), ``bias="none"``.

Methodology

1. ``P*``: ``P(w)`` of a tight LinearSVC (``tol=1e-8``), cross-checked by a dual
   certificate: SDCA run to a duality gap of 1e-5 gives ``D(alpha) <= P* <= P(w)``;
   the table reports the width of that bracket.
2. For each method, the cheapest setting that reaches ``P(w) - P* <= eps``
   (``eps = 1e-3``, absolute): the loosest LIBLINEAR ``tol``, the fewest epochs for
   SGD, Snap ML and gpusvm (gpusvm then evaluates ``P`` once, at the end), found by
   doubling then bisection on a grid.  gpusvm's solvers are searched over batch
   sizes too and reported at the fastest one.  One more row runs SDCA as a user
   would, with no knowledge of ``P*``: ``tol=eps`` on its own duality gap (a
   certificate per epoch; it stops once the gap, which bounds ``P - P*``, is
   below eps).
3. Each chosen setting is timed ``--repeats`` times (default 7), round-robin over
   the methods so that load on the machine hits them alike: the whole ``fit()``
   call, input validation included, on the data in the method's own precision
   (float64 for the peers, float32 for gpusvm; both CSR with int32 indices);
   ``P`` is always evaluated on the float64 data.
   Reported: the median wall time, the median CPU time of the process (every
   method here is single-threaded, so CPU time is robust to other load), their
   ratios to LIBLINEAR's, and the worst ``P - P*`` over the timed runs.
4. numba's compilation happens before any timing (the search phase runs every
   solver first); its one-off cost is measured separately in a child process
   with an empty cache (cold) and with the on-disk cache (warm).
5. Peak memory of one fit, in a child process per (data set, method):
   ``VmHWM`` after resetting it (``/proc/self/clear_refs``) right before ``fit``,
   minus the resident size at that moment; reported in MiB and as a multiple of
   the CSR data's own size (``data + indices + indptr`` bytes).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gpusvm.datasets import load_svmlight  # noqa: E402

DATA = REPO.parent / "shared" / "data"
FILES = {
    "a9a": ("a9a/a9a", 123),
    "w8a": ("w8a/w8a", 300),
    "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", 74849),
    "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz", 1181833),
}
LAM = 1e-4
EPS = 1e-3
#: epochs tried by the search (SGD, Snap ML, gpusvm)
EPOCHS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 40, 48, 64)
#: LIBLINEAR stopping tolerances tried, loosest (cheapest) first
LIBLINEAR_TOLS = (1.0, 0.7, 0.5, 0.3, 0.2, 0.15, 0.1, 0.07, 0.05, 0.03, 0.02, 0.01,
                  5e-3, 3e-3, 1e-3, 1e-4)
#: batch sizes searched for each gpusvm solver
SDCA_BATCHES = (1, 16, 256)
PEGASOS_BATCHES = (1, 16, 256)


# ---------------------------------------------------------------------- data
def data_dir() -> Path:
    """``../shared/data`` beside the repository; exits with an error when it is missing."""
    if not DATA.is_dir():
        sys.exit(f"bench_peers: the real data sets are missing: expected {DATA} "
                 "(../shared/data relative to the repository root)")
    return DATA


def load(name: str):
    """Training set ``name`` as float64 CSR (int32 indices) and labels in {-1, +1}."""
    rel, d = FILES[name]
    path = data_dir() / rel
    if not path.is_file():
        sys.exit(f"bench_peers: data file {path} is missing")
    X, y = load_svmlight(path, n_features=d, dtype=np.float64)
    X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                      shape=X.shape)
    y = np.where(y == np.max(y), 1.0, -1.0)
    return X, y


def as_float32(X: sp.csr_matrix) -> sp.csr_matrix:
    """The same CSR with float32 values (indices shared, not copied)."""
    return sp.csr_matrix((X.data.astype(np.float32), X.indices, X.indptr), shape=X.shape)


def csr_bytes(X: sp.csr_matrix) -> int:
    """Bytes of the CSR arrays themselves: ``data + indices + indptr``."""
    return int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes)


def primal(X, y, w, lam: float = LAM) -> float:
    """``P(w) = lam/2 ||w||^2 + mean hinge`` in float64."""
    w = np.asarray(w, dtype=np.float64).ravel()
    z = X @ w
    return 0.5 * lam * float(w @ w) + float(np.mean(np.maximum(0.0, 1.0 - y * z)))


# ---------------------------------------------------------------------- methods
@dataclass
class Method:
    """One solver with an ordered grid of settings, cheapest first."""

    name: str
    dtype: str                      # precision of the data it is given
    settings: tuple                 # grid searched for the cheapest one reaching eps
    label: str                      # how a setting is printed, with {s}
    kwargs: dict = field(default_factory=dict)
    group: str = ""                 # methods of one group: only the fastest is timed

    def make(self, setting, n: int):
        """A fresh estimator for ``setting`` on ``n`` rows."""
        return MAKERS[self.kind](setting, n, **self.kwargs)

    @property
    def kind(self) -> str:
        return self.kwargs.get("_kind", self.name)


def _liblinear(tol, n):
    from sklearn.svm import LinearSVC
    return LinearSVC(C=1.0 / (LAM * n), loss="hinge", dual=True, fit_intercept=False, tol=tol,
                     max_iter=100_000, random_state=0)


def _sgd(epochs, n):
    from sklearn.linear_model import SGDClassifier
    return SGDClassifier(loss="hinge", alpha=LAM, fit_intercept=False, max_iter=epochs, tol=None,
                         random_state=0)


def _snapml(epochs, n):
    from snapml import SupportVectorMachine
    return SupportVectorMachine(regularizer=LAM * n, fit_intercept=False, max_iter=epochs,
                                tol=1e-12, n_jobs=1, random_state=0)


def _sdca(epochs, n, *, b, variant, tol=EPS, certified=False, _kind=None):
    from gpusvm import SDCASVC
    if certified:       # as a user runs it: a certificate per epoch, stop once gap <= tol
        return SDCASVC(lam=LAM, batch_size=b, variant=variant, tol=tol, sampling="epoch",
                       bias="none", backend="numba", random_state=0)
    T = math.ceil(epochs * n / b)
    return SDCASVC(lam=LAM, batch_size=b, variant=variant, tol=tol, max_iter=T, eval_every=T,
                   sampling="epoch", bias="none", backend="numba", random_state=0)


def _pegasos(epochs, n, *, k, averaging, _kind=None):
    from gpusvm import PegasosSVC
    T = math.ceil(epochs * n / k)
    return PegasosSVC(lam=LAM, batch_size=k, max_iter=T, eval_every=T, averaging=averaging,
                      sampling="epoch", bias="none", backend="numba", random_state=0)


MAKERS = {"LIBLINEAR": _liblinear, "SGDClassifier": _sgd, "Snap ML": _snapml,
          "sdca": _sdca, "pegasos": _pegasos}


def snapml_available() -> bool:
    try:
        import snapml  # noqa: F401
        return True
    except ImportError:
        return False


def methods() -> list[Method]:
    """Every method of the comparison, LIBLINEAR first (the reference of the ratios)."""
    out = [Method("LIBLINEAR", "float64", LIBLINEAR_TOLS, "tol={s:g}"),
           Method("SGDClassifier", "float64", EPOCHS, "{s} epochs")]
    if snapml_available():
        out.append(Method("Snap ML", "float64", EPOCHS, "{s} epochs"))
    for b in SDCA_BATCHES:
        variant = "safe" if b == 1 else "aggressive"
        out.append(Method(f"gpusvm SDCA b={b}", "float32", EPOCHS,
                          f"b={b} {variant}, {{s}} epochs",
                          {"_kind": "sdca", "b": b, "variant": variant}, group="gpusvm SDCA"))
    out.append(Method("gpusvm SDCA, tol=eps", "float32", (None,),
                      "b=1 safe, stops on its own gap",
                      {"_kind": "sdca", "b": 1, "variant": "safe", "certified": True}))
    for k in PEGASOS_BATCHES:
        out.append(Method(f"gpusvm Pegasos k={k}", "float32", EPOCHS,
                          f"k={k} tail avg, {{s}} epochs",
                          {"_kind": "pegasos", "k": k, "averaging": "tail"},
                          group="gpusvm Pegasos"))
    return out


# ---------------------------------------------------------------------- measuring
def timed_fit(est, X, y):
    """Fit once; return ``(wall seconds, CPU seconds, coef)``."""
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w0, c0 = time.perf_counter(), time.process_time()
        est.fit(X, y)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return wall, cpu, np.asarray(est.coef_, dtype=np.float64).ravel()


def find_cheapest(method: Method, X, y, p_star: float, eps: float, log, X_eval=None):
    """Smallest index of ``method.settings`` whose fit reaches ``P - P* <= eps``.

    ``X`` is what the method trains on; ``P`` is evaluated on ``X_eval`` (the
    float64 data of ``P*``; default ``X``).

    Doubling then bisection over the grid (reaching eps is taken as monotone in
    the grid's order).  Returns ``(index or None, {index: (subopt, wall)})``.
    """
    n = X.shape[0]
    tried: dict = {}

    def reaches(i):
        if i not in tried:
            wall, _, w = timed_fit(method.make(method.settings[i], n), X, y)
            tried[i] = (primal(X if X_eval is None else X_eval, y, w) - p_star, wall)
            log(f"    {method.name:24s} {method.label.format(s=method.settings[i]):32s} "
                f"P-P* = {tried[i][0]:9.2e}  {wall:7.3f} s")
        return tried[i][0] <= eps

    last = len(method.settings) - 1
    hi, lo = 0, -1
    while not reaches(hi):
        if hi == last:
            return None, tried
        lo, hi = hi, min(last, 2 * hi + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reaches(mid):
            hi = mid
        else:
            lo = mid
    return hi, tried


def profile_fit(est, X, y) -> dict:
    """CPU seconds of one SDCA fit split into iterations, certificates and the rest (cProfile)."""
    import cProfile
    import pstats
    prof = cProfile.Profile(timer=time.process_time)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()
        prof.enable()
        est.fit(X, y)
        prof.disable()
    stats = pstats.Stats(prof).stats        # {(file, line, func): (cc, nc, tt, ct, callers)}

    def cum(func: str, file_part: str) -> float:
        return sum(v[3] for k, v in stats.items() if k[2] == func and file_part in k[0])

    total = cum("fit", "estimators/sdca")
    out = {"total": total,
           "iterations": cum("sdca_iterations", "backends") + cum("next_chunk", "_sampling")
           + cum("first_occurrences", "sdca"),
           "certificates": cum("certificate", "solvers"),
           "setup": cum("_prepare", "estimators") + cum("make_backend", "backends")
           + cum("init_state", "backends") + cum("init_dual", "backends")}
    out["other"] = total - out["iterations"] - out["certificates"] - out["setup"]
    return out


def reference_optimum(X, y, log):
    """``P*`` from a tight LIBLINEAR, and the width of its certified bracket ``[D, P*]``."""
    from sklearn.svm import LinearSVC

    from gpusvm import SDCASVC
    n = X.shape[0]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lin = LinearSVC(C=1.0 / (LAM * n), loss="hinge", dual=True, fit_intercept=False, tol=1e-8,
                        max_iter=1_000_000, random_state=0).fit(X, y)
        p_lin = primal(X, y, lin.coef_)
        cert = SDCASVC(lam=LAM, batch_size=1, variant="safe", tol=1e-5, sampling="epoch",
                       bias="none", backend="numba", dtype="float64", max_iter=2000 * n,
                       random_state=0).fit(X, y)
    p_star = min(p_lin, cert.primal_objective_)
    log(f"  P* = {p_star:.10f} (LIBLINEAR tol=1e-8: {p_lin:.10f}); SDCA certificate "
        f"D = {cert.dual_objective_:.10f}, gap {cert.duality_gap_:.1e} "
        f"({time.perf_counter() - t0:.1f} s)")
    if cert.dual_objective_ > p_lin + 1e-9:
        raise RuntimeError(f"the dual bound {cert.dual_objective_} exceeds LIBLINEAR's P* {p_lin}:"
                           " the two solvers do not solve the same problem")
    return p_star, p_star - cert.dual_objective_


# ---------------------------------------------------------------------- child processes
def _status_kib(field_name: str) -> int:
    m = re.search(rf"^{field_name}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1))


def memory_child(npz: str, dtype: str, kind: str, setting, kwargs: dict) -> None:
    """Child process: one fit after a warm-up; print its peak RSS increase (JSON)."""
    z = np.load(npz)
    X = sp.csr_matrix((z["data"].astype(dtype), z["indices"], z["indptr"]), shape=tuple(z["shape"]))
    y = z["y"]
    n = X.shape[0]
    kwargs = {k: v for k, v in kwargs.items() if k != "_kind"}
    # warm-up (imports, JIT) on a small problem with few columns too, so that the fit
    # measured below cannot reuse freed n- or d-sized buffers of the warm-up
    small, y_small = warmup_problem(X, y, d=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MAKERS[kind](setting, small.shape[0], **kwargs).fit(small, y_small)
        est = MAKERS[kind](setting, n, **kwargs)
        del small, y_small
        gc.collect()
        rss0 = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")           # VmHWM := VmRSS
        est.fit(X, y)
        peak = _status_kib("VmHWM")
    print(json.dumps({"peak_mib": (peak - rss0) / 1024, "csr_mib": csr_bytes(X) / 2**20}))


def warmup_problem(X, y, rows: int = 2000, d: int | None = None):
    """Every ``n // rows``-th row (both classes: the files are sorted by label), and
    only the first ``d`` columns when given; int32 CSR of ``X``'s dtype."""
    step = max(1, X.shape[0] // rows)
    Xs, ys = X[::step], y[::step]
    if d is not None:
        Xs = Xs[:, :d]
    Xs = sp.csr_matrix((Xs.data, Xs.indices.astype(np.int32), Xs.indptr.astype(np.int32)),
                       shape=Xs.shape)
    return Xs, ys


def jit_child(npz: str) -> None:
    """Child process: first and second fit of each gpusvm solver on a small slice (JSON)."""
    z = np.load(npz)
    X = sp.csr_matrix((z["data"].astype(np.float32), z["indices"], z["indptr"]),
                      shape=tuple(z["shape"]))
    X, y = warmup_problem(X, z["y"])
    out = {}
    t0 = time.perf_counter()
    import gpusvm.backends.numba_  # noqa: F401
    out["import"] = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n = X.shape[0]
        for name, make in (("sdca", lambda: _sdca(2, n, b=1, variant="safe")),
                           ("pegasos", lambda: _pegasos(2, n, k=1, averaging="tail"))):
            t = []
            for _ in range(2):
                w0 = time.perf_counter()
                make().fit(X, y)
                t.append(time.perf_counter() - w0)
            out[name] = t[0] - t[1]
    print(json.dumps(out))


def run_child(args: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=str(REPO))
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def save_npz(X, y, path: Path) -> None:
    np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape), y=y)


# ---------------------------------------------------------------------- report
def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    import scipy
    import sklearn
    vers = f"Python {platform.python_version()}, NumPy {np.__version__}, SciPy {scipy.__version__}, " \
           f"scikit-learn {sklearn.__version__}, numba {numba.__version__}"
    try:
        from importlib.metadata import version
        vers += f", snapml {version('snapml')}"
    except Exception:
        pass
    load = os.getloadavg()
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; {vers}; "
            f"load average at the end {load[0]:.1f}")


def fmt_table(rows: list[dict]) -> str:
    head = ("| data | method | setting | wall (s) | CPU (s) | wall / LIBLINEAR | CPU / LIBLINEAR "
            "| P - P* (worst) | peak MiB | x CSR |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        if r.get("time") is None:
            lines.append(f"| {r['data']} | {r['method']} | {r['setting']} | - | - | - | - | "
                         f"{r['subopt']} | - | - |")
            continue
        mem = r.get("mem")
        lines.append(
            f"| {r['data']} | {r['method']} | {r['setting']} | {r['time']:.3f} | {r['cpu']:.3f} | "
            f"{r['ratio']:.2f} | {r['cpu_ratio']:.2f} | {r['subopt']:.1e} | "
            + (f"{mem['peak_mib']:.1f} | {mem['peak_mib'] / mem['csr_mib']:.2f} |"
               if mem else "- | - |"))
    return "\n".join(lines)


# ---------------------------------------------------------------------- main
def defaults_table(names: list[str], repeats: int, log) -> list[dict]:
    """Every estimator on its defaults (only ``lam`` and ``bias="none"`` set), and
    SGDClassifier on its own, against LinearSVC(loss="hinge") at its default tolerance: median wall time of ``repeats``
    round-robin fits on the float64 data as a user holds it, and ``P - P*``."""
    from sklearn.linear_model import SGDClassifier  # noqa: PLC0415
    from sklearn.svm import LinearSVC  # noqa: PLC0415

    from gpusvm import PegasosSVC  # noqa: PLC0415
    from gpusvm import SDCASVC  # noqa: PLC0415

    def makers(n):
        return [("LIBLINEAR (LinearSVC defaults)", "loss='hinge', C=1/(lam n)",
                 lambda: LinearSVC(C=1.0 / (LAM * n), loss="hinge", dual=True,
                                   fit_intercept=False)),
                ("SDCASVC defaults", "lam, bias='none'",
                 lambda: SDCASVC(lam=LAM, bias="none", random_state=0)),
                ("PegasosSVC defaults", "lam, bias='none'",
                 lambda: PegasosSVC(lam=LAM, bias="none", random_state=0)),
                # the stochastic peer on its own defaults (max_iter=1000, tol=1e-3: it stops
                # when the training loss has not improved by tol for 5 epochs)
                ("SGDClassifier defaults", "loss='hinge', alpha=lam",
                 lambda: SGDClassifier(loss="hinge", alpha=LAM, fit_intercept=False,
                                       random_state=0))]

    Xw, yw = warmup_problem(*load("a9a"))           # compile (or load) numba before any timing
    for _, _, make in makers(Xw.shape[0])[1:3]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            make().fit(Xw, yw)
    rows = []
    for name in names:
        X, y = load(name)
        n = X.shape[0]
        p_star, _ = reference_optimum(X, y, log)
        runs = {label: [] for label, _, _ in makers(n)}
        extra = {}
        for _ in range(repeats):
            for label, _, make in makers(n):
                est = make()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    t0 = time.perf_counter()
                    est.fit(X, y)
                    wall = time.perf_counter() - t0
                runs[label].append((wall, primal(X, y, est.coef_) - p_star))
                extra[label] = (getattr(est, "batch_size_", None), getattr(est, "n_iter_", None),
                                getattr(est, "stop_reason_", None),
                                sorted({type(c.message).__name__ for c in caught}))
        ref = float(np.median([r[0] for r in runs[makers(n)[0][0]]]))
        for label, setting, _ in makers(n):
            wall = float(np.median([r[0] for r in runs[label]]))
            b, it, why, warned = extra[label]
            if b is not None:
                setting += f" -> batch {b}, {it * b / n:.1f} epochs, stop: {why}"
            elif label.startswith("SGD"):
                setting += f" -> {it} epochs"
            if warned:
                setting += f", warned: {', '.join(warned)}"
            rows.append({"data": name, "method": label, "setting": setting, "time": wall,
                         "ratio": wall / ref, "subopt": max(r[1] for r in runs[label])})
            log(f"  {name:7s} {label:32s} {wall:7.3f} s  x{wall / ref:.2f}  "
                f"P - P* = {rows[-1]['subopt']:.1e}")
    return rows


def fmt_defaults(rows: list[dict]) -> str:
    """Markdown table of :func:`defaults_table`."""
    out = ["| data | method | settings used | wall (s) | ratio to LIBLINEAR | P - P* |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['data']} | {r['method']} | {r['setting']} | {r['time']:.3f} | "
                   f"{r['ratio']:.2f}x | {r['subopt']:.1e} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="a9a,w8a,imdb,news20")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per method (>= 3)")
    ap.add_argument("--eps", type=float, default=EPS)
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory children")
    ap.add_argument("--json", help="write every measurement to this file")
    ap.add_argument("--quiet", action="store_true", help="print the tables only")
    ap.add_argument("--defaults-only", action="store_true",
                    help="print the table of the estimators' defaults only (fast)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if args.child[0] == "memory":
            _, npz, dtype, kind, setting, kwargs = args.child
            memory_child(npz, dtype, kind, json.loads(setting), json.loads(kwargs))
        else:
            jit_child(args.child[1])
        return 0
    if args.repeats < 3:
        ap.error("--repeats must be >= 3 (the table reports medians)")
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    names = [s.strip() for s in args.datasets.split(",") if s.strip()]
    for name in names:
        if name not in FILES:
            ap.error(f"unknown data set {name!r}; choose from {', '.join(FILES)}")
    data_dir()
    log("Defaults: every estimator with only lam and bias='none' set")
    default_rows = defaults_table(names, args.repeats, log)
    print(f"\nDefaults first: time to fit and P(w) - P* (lam = {LAM:g}, no intercept), median "
          f"of {args.repeats} runs, one run of this script\n")
    print(fmt_defaults(default_rows))
    if args.defaults_only:
        if args.json:
            Path(args.json).write_text(json.dumps({"defaults": default_rows}, indent=1))
        return 0
    if not snapml_available():
        log("Snap ML is not installed (pip install snapml): its rows are skipped")
    results = {"machine": None, "lam": LAM, "eps": args.eps, "repeats": args.repeats,
               "datasets": {}, "jit": None}
    rows, sweep = [], []
    tmp = tempfile.TemporaryDirectory(prefix="gpusvm-bench-")
    for name in names:
        t0 = time.perf_counter()
        X64, y = load(name)
        X32 = as_float32(X64)
        data = {"float64": X64, "float32": X32}
        npz = Path(tmp.name) / f"{name}.npz"
        save_npz(X64, y, npz)
        log(f"\n{name}: n = {X64.shape[0]}, d = {X64.shape[1]}, nnz = {X64.nnz} "
            f"(loaded in {time.perf_counter() - t0:.1f} s)")
        p_star, width = reference_optimum(X64, y, log)
        ds = {"n": X64.shape[0], "d": X64.shape[1], "nnz": int(X64.nnz), "p_star": p_star,
              "bracket": width, "methods": {}}
        results["datasets"][name] = ds
        # -- search: cheapest setting of every method (also compiles and warms everything)
        chosen, missed = [], {}
        for order_i, m in enumerate(methods()):
            idx, tried = find_cheapest(m, data[m.dtype], y, p_star, args.eps, log, X_eval=X64)
            ds["methods"][m.name] = {"setting": None if idx is None else m.settings[idx],
                                     "tried": {str(m.settings[i]): v for i, v in tried.items()}}
            sweep.append({"data": name, "method": m.name,
                          "setting": "not reached" if idx is None
                          else m.label.format(s=m.settings[idx]),
                          "wall": None if idx is None else tried[idx][1]})
            if idx is None:
                last = len(m.settings) - 1
                missed.setdefault(m.group or m.name, (order_i, m, tried[last][0]))
            else:
                chosen.append((order_i, m, idx, tried[idx][1]))
        # -- keep the fastest batch size of each gpusvm solver (the search's single fit)
        best: dict = {}
        for order_i, m, idx, wall in chosen:
            key = m.group or m.name
            if key not in best or wall < best[key][3]:
                best[key] = (min(order_i, best.get(key, (order_i,))[0]), m, idx, wall)
        timed = sorted(best.values(), key=lambda b: b[0])
        for key, (order_i, m, subopt) in missed.items():
            if key not in best:
                rows.append({"data": name, "order": order_i, "method": key, "time": None,
                             "setting": f"not within {m.label.format(s=m.settings[-1])}",
                             "subopt": f"{subopt:.1e}"})
        # -- timing, round-robin over the methods
        runs = {m.name: [] for _, m, _, _ in timed}
        for _ in range(args.repeats):
            for _, m, idx, _ in timed:
                X = data[m.dtype]
                wall, cpu, w = timed_fit(m.make(m.settings[idx], X.shape[0]), X, y)
                runs[m.name].append((wall, cpu, primal(X64, y, w) - p_star))
        ref = runs.get("LIBLINEAR")
        ref_wall = float(np.median([r[0] for r in ref])) if ref else float("nan")
        ref_cpu = float(np.median([r[1] for r in ref])) if ref else float("nan")
        for order_i, m, idx, _ in timed:
            r = runs[m.name]
            wall = float(np.median([x[0] for x in r]))
            cpu = float(np.median([x[1] for x in r]))
            row = {"data": name, "order": order_i, "method": m.group or m.name,
                   "setting": m.label.format(s=m.settings[idx]), "time": wall, "cpu": cpu,
                   "ratio": wall / ref_wall, "cpu_ratio": cpu / ref_cpu,
                   "subopt": max(x[2] for x in r), "runs": r}
            if not args.no_memory:
                row["mem"] = run_child(["--child", "memory", str(npz), m.dtype, m.kind,
                                        json.dumps(m.settings[idx]), json.dumps(m.kwargs)])
            if m.kind == "sdca":
                row["profile"] = profile_fit(m.make(m.settings[idx], X32.shape[0]), X32, y)
            rows.append(row)
            ds["methods"][m.name].update({k: row[k] for k in row if k not in ("data",)})
            log(f"  {row['method']:24s} {row['setting']:32s} {wall:7.3f} s wall "
                f"{cpu:7.3f} s CPU  x{row['ratio']:.2f} / x{row['cpu_ratio']:.2f}")
        del data, X32, X64
        gc.collect()
    # -- one-off compilation cost
    if names:
        cold = tempfile.TemporaryDirectory(prefix="gpusvm-numba-cache-")
        npz = Path(tmp.name) / f"{names[0]}.npz"
        results["jit"] = {"cold": run_child(["--child", "jit", str(npz)],
                                            env={"NUMBA_CACHE_DIR": cold.name}),
                          "warm": run_child(["--child", "jit", str(npz)])}
        cold.cleanup()
    tmp.cleanup()
    results["machine"] = machine()
    order = {n: i for i, n in enumerate(names)}
    rows.sort(key=lambda r: (order[r["data"]], r["order"]))
    print(f"\nTuned settings second: time to P(w) - P* <= {args.eps:g} (lam = {LAM:g}, no "
          f"intercept), median of {args.repeats} runs\n")
    print(fmt_table(rows))
    print("\nWhere the time of the gpusvm SDCA fits goes (CPU seconds of one profiled fit):\n")
    print("| data | setting | total | iterations | certificates | validation + setup | other |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        pr = r.get("profile")
        if pr:
            print(f"| {r['data']} | {r['setting']} | {pr['total']:.3f} | "
                  f"{pr['iterations']:.3f} ({pr['iterations'] / pr['total']:.0%}) | "
                  f"{pr['certificates']:.3f} ({pr['certificates'] / pr['total']:.0%}) | "
                  f"{pr['setup']:.3f} ({pr['setup'] / pr['total']:.0%}) | "
                  f"{pr['other']:.3f} |")
    print("\nBatch-size search (one fit each, wall seconds of the cheapest setting found):\n")
    print("| data | method | cheapest setting | wall (s) |\n|---|---|---|---|")
    for sw in sweep:
        if sw["method"].startswith("gpusvm"):
            w = "-" if sw["wall"] is None else f"{sw['wall']:.3f}"
            print(f"| {sw['data']} | {sw['method']} | {sw['setting']} | {w} |")
    if results["jit"]:
        c, w = results["jit"]["cold"], results["jit"]["warm"]
        print(f"\nOne-off numba cost (first fit minus second, on 2,000 rows): empty cache "
              f"(compilation) SDCA {c['sdca']:.1f} s, then Pegasos {c['pegasos']:.1f} s; "
              f"cache on disk (loading) SDCA {w['sdca']:.2f} s, Pegasos {w['pegasos']:.2f} s; "
              f"importing the backend {w['import']:.2f} s")
    print(f"\nMachine: {results['machine']}")
    for name in names:
        ds = results["datasets"][name]
        print(f"P* {name}: {ds['p_star']:.10f} (certified bracket width {ds['bracket']:.1e})")
    if args.json:
        results["rows"] = rows
        results["defaults"] = default_rows
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
