"""GPU benchmark of mini-batch Pegasos: time per iteration against k, time to eps, kernel bandwidth.

On a CUDA machine (``--backend cupy``, the default when a device exists)::

    python benchmarks/bench_gpu.py                      # imdb and news20, k = 1 .. 16384
    python benchmarks/bench_gpu.py --json gpu.json      # also write the results

Measures
  * seconds per iteration of the whole solver loop (2 launches per iteration, no host
    synchronisation) for each batch size k;
  * time and iterations to primal suboptimality eps (Takáč et al. 2013 use eps = 1e-3)
    on imdb and news20, against ``P*`` from LIBLINEAR (``LinearSVC``, hinge loss, no
    intercept, ``C = 1 / (lam n)``: the same minimiser);
  * each kernel alone (``cupyx.profiler.benchmark`` around exactly one launch), the
    bytes it must move (the traffic model in its header comment) and the achieved
    bandwidth against the device's peak; ``evaluate()`` (the hinge-sum kernel plus
    its reductions and one device-to-host copy) is timed and labelled as such.

Beside every measured figure stands the performance model's prediction
(:mod:`gpusvm.roofline`, "modelled"), for the device the model knows by name (H100,
H200; others are compared with the H100 figures and say so).

Peak bandwidth: CUDA 13 removed ``memoryClockRate`` from the device properties, so
the peak is read, in this order, from the properties (CUDA <= 12), the device
attribute ``cudaDevAttrMemoryClockRate`` with ``cudaDevAttrGlobalMemoryBusWidth``,
NVML (``nvmlDeviceGetMaxClockInfo`` of the memory clock and
``nvmlDeviceGetMemoryBusWidth``), or a table of datasheet figures by device name
(:data:`DATASHEET_BANDWIDTH`); the output names the source.

``--smoke`` runs everything end to end on small data (a slice of a9a) with few
iterations; with ``--backend emulated`` it runs on the CPU kernel emulator, which is
how CI checks that this script works.  Emulated timings say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gpusvm import _kernels  # noqa: E402
from gpusvm.backends import cuda_available, make_backend  # noqa: E402
from gpusvm.datasets import load_svmlight  # noqa: E402
from gpusvm.solvers.pegasos import pegasos  # noqa: E402

DATA = REPO.parent / "shared" / "data"
FILES = {
    "a9a": ("a9a/a9a", 123),
    "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", 74849),
    "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz", 1181833),
}


def load(name: str, rows: int | None = None):
    """A training set as float32 CSR and labels in {-1, +1} (optionally its first rows)."""
    rel, d = FILES[name]
    X, y = load_svmlight(DATA / rel, n_features=d, dtype=np.float32)
    classes = np.unique(y)
    y = np.where(y == classes[-1], 1.0, -1.0).astype(np.float32)
    if rows is not None:
        X, y = X[:rows], y[:rows]
    return X, y


def sync(be) -> None:
    """Wait for the device (a small copy through the backend's recorded path)."""
    be.to_host(be.s[:1])


def per_iteration(backend: str, X, y, ks, iterations: int, lam: float):
    """Seconds per solver iteration for each k (one evaluation, at the end, excluded)."""
    out = []
    for k in ks:
        if k > X.shape[0]:
            continue
        be = make_backend(backend, X, y)
        pegasos(be, lam=lam, k=k, max_iter=2, seed=0, eval_every=2)      # warm up, compile
        res = pegasos(be, lam=lam, k=k, max_iter=iterations, seed=1, eval_every=iterations)
        t_loop = res.history[-1][2]
        t0 = time.perf_counter()
        w, b = be.output(False)
        be.evaluate(w, b, lam)
        t_eval = time.perf_counter() - t0
        sec = max(t_loop - t_eval, 1e-12) / iterations
        out.append({"k": int(k), "iterations": int(iterations), "seconds_per_iteration": sec,
                    "rows_per_second": k / sec})
    return out


def reference_optimum(X, y, lam: float) -> float:
    """``P*`` of ``lam/2 ||w||^2 + mean hinge`` from LIBLINEAR's dual coordinate descent."""
    from sklearn.svm import LinearSVC
    n = X.shape[0]
    clf = LinearSVC(C=1.0 / (lam * n), loss="hinge", fit_intercept=False, tol=1e-8,
                    max_iter=200_000, dual=True).fit(X.astype(np.float64), y)
    w = clf.coef_.ravel()
    loss = np.maximum(0.0, 1.0 - y * (X @ w)).mean()
    return float(0.5 * lam * w @ w + loss)


def time_to_eps(backend: str, name: str, X, y, lam: float, k: int, eps: float, max_iter: int):
    """Wall time and iterations until ``P(w) - P* <= eps`` (checked once per epoch)."""
    p_star = reference_optimum(X, y, lam)
    be = make_backend(backend, X, y)
    pegasos(be, lam=lam, k=k, max_iter=2, seed=0, eval_every=2)          # warm up
    res = pegasos(be, lam=lam, k=k, max_iter=max_iter, seed=1, averaging="tail",
                  eval_every=max(1, math.ceil(X.shape[0] / k)),
                  target_objective=p_star + eps)
    return {"data": name, "k": int(k), "lam": lam, "eps": eps, "p_star": p_star,
            "objective": res.history[-1][1], "iterations": res.n_iter,
            "seconds": res.history[-1][2], "reached": res.stop_reason == "target_objective"}


#: datasheet peak bandwidth (bytes/s) by a substring of the device name, the last resort
DATASHEET_BANDWIDTH = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12, "H100 PCIe": 2.0e12,
                       "H100 NVL": 3.9e12, "A100-SXM4-80GB": 2.039e12, "A100-SXM4-40GB": 1.555e12,
                       "A100-PCIE-40GB": 1.555e12, "A100 80GB PCIe": 1.935e12, "L40S": 0.864e12}
#: cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth (driver_types.h)
ATTR_MEMORY_CLOCK, ATTR_BUS_WIDTH = 36, 37


def peak_bandwidth_source(backend: str):
    """Device peak memory bandwidth in bytes/s, the device name and where the figure came from."""
    if backend != "cupy":
        return None, "CPU kernel emulator", "none"
    import cupy
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    bus = props.get("memoryBusWidth")
    if props.get("memoryClockRate") and bus:                           # CUDA <= 12
        return 2.0 * props["memoryClockRate"] * 1e3 * bus / 8.0, name, "device properties"
    try:
        clock = cupy.cuda.runtime.deviceGetAttribute(ATTR_MEMORY_CLOCK, dev.id)   # kHz
        width = cupy.cuda.runtime.deviceGetAttribute(ATTR_BUS_WIDTH, dev.id)
        if clock and width:
            return 2.0 * clock * 1e3 * width / 8.0, name, "device attributes"
    except Exception:                      # noqa: BLE001  (attribute gone in this CUDA)
        pass
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(dev.id)
        clock = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)      # MHz
        width = pynvml.nvmlDeviceGetMemoryBusWidth(h)
        if clock and width:
            return 2.0 * clock * 1e6 * width / 8.0, name, "NVML"
    except Exception:                      # noqa: BLE001  (no NVML)
        pass
    for key, bw in DATASHEET_BANDWIDTH.items():
        if key in name:
            return bw, name, "datasheet table"
    return None, name, "unknown"


def peak_bandwidth(backend: str):
    """Device peak memory bandwidth in bytes/s (None when unknown or emulated) and the device name."""
    peak, name, _ = peak_bandwidth_source(backend)
    return peak, name


def model_device(name: str):
    """The performance model's device for a device name (the H100's figures otherwise) and a note."""
    from gpusvm.roofline import DEVICES
    if "H200" in name:
        return DEVICES["h200"], ""
    if "H100" in name:
        return DEVICES["h100"], ""
    return DEVICES["h100"], " (model: H100 figures)"


def time_call(backend: str, fn, repeat: int) -> float:
    """Median seconds of ``fn()``: CUDA events on a GPU, wall time when emulated."""
    if backend == "cupy":
        from cupyx.profiler import benchmark
        r = benchmark(fn, n_repeat=repeat, n_warmup=max(1, repeat // 10))
        return float(np.median(r.gpu_times[0]))
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def kernel_timings(backend: str, X, y, k: int, lam: float, repeat: int, device_name: str = ""):
    """Each kernel alone (exactly one launch) on one batch of k rows, with its minimal traffic,
    bandwidth and the model's time; ``evaluate()`` timed whole and labelled as such."""
    from gpusvm import roofline
    be = make_backend(backend, X, y)
    be.init_state(averaging=True)
    rng = np.random.default_rng(0)
    rows = be._rows(rng.choice(X.shape[0], size=k, replace=False).astype(np.int32))
    rows_h = be.to_host(rows)
    nnz_b = int((X.indptr[rows_h + 1] - X.indptr[rows_h]).sum())
    item = X.dtype.itemsize
    xp = be.xp
    m = be.margins(rows)
    m_all_active = xp.zeros(k, dtype=np.float64)                       # every row adds
    w, b = be.output(False)
    n, nnz, d = X.shape[0], X.nnz, X.shape[1]
    bd = be._scalar64(b)
    grid = be._row_grid(n)
    partial = xp.empty(grid, dtype=np.float64)
    hinge = be._kernel("gpusvm_hinge_sum")
    hinge_args = (be._indptr, be._indices, be._data, be.y, np.int32(n), w, bd, partial)
    bp = xp.empty(k, dtype=np.float64)
    m_copy = m.copy()
    cases = {
        "gpusvm_margins": (lambda: be.margins(rows),
                           k * (4 + 16 + item + 8) + nnz_b * (4 + 2 * item)),
        "gpusvm_pegasos_step": (lambda: be.pegasos_step(rows, m_all_active, 1.0 / lam, 1.0, k,
                                                        False, 0.0, True),
                                k * (4 + 8 + 16 + item) + nnz_b * (4 + item + 2 * item + 16)),
        "gpusvm_optimal_bias": (lambda: be._launch("gpusvm_optimal_bias", 1,
                                                   (be.y, rows, np.int32(k), be.s, m_copy, bp)),
                                k * (4 + item + 8 + 8 + 8 * 8 + 8)),
        "gpusvm_renormalize": (lambda: be.renormalize(1e-300), 0),      # the no-op path
        "gpusvm_output": (lambda: be.output(True), d * (item + 8 + 8)),
        "gpusvm_hinge_sum": (lambda: be._call(hinge, grid, hinge_args),
                             n * (16 + item) + nnz * (4 + item + 8)),
        "evaluate() (hinge_sum + 2 reductions + copy)": (lambda: be.evaluate(w, b, lam), 0),
    }
    del m
    peak, _ = peak_bandwidth(backend)
    dev, note = model_device(device_name)
    stats = roofline.batch_stats(X, k, batches=1)
    model = {c.kernel: c for c in roofline.iteration_costs(X, stats, dev, solver="pegasos-optimal",
                                                           balanced=False, active=1.0)}
    model_s = {"gpusvm_margins": model["margins"].seconds(dev),
               "gpusvm_pegasos_step": model["pegasos_step"].seconds(dev),
               "gpusvm_optimal_bias": model["optimal_bias"].seconds(dev),
               "gpusvm_hinge_sum": roofline.evaluation_seconds(X, dev)}
    out = []
    for name, (fn, nbytes) in cases.items():
        sec = time_call(backend, fn, repeat)
        if name in _kernels.ROW_KERNELS:
            label = _kernels.row_kernel(name, be.lanes, be.value_type)
        elif name in _kernels.VECTOR_KERNELS:
            label = _kernels.vector_kernel(name, be.value_type)
        else:
            label = name
        row = {"kernel": label, "k": int(k), "seconds": sec,
               "bytes": int(nbytes), "GBps": nbytes / sec / 1e9 if nbytes else None,
               "modelled_seconds": model_s.get(name), "model_device": dev.name + note}
        row["fraction_of_peak"] = (nbytes / sec / peak) if (peak and nbytes) else None
        out.append(row)
    return out


def modelled_per_iteration(X, k: int, device_name: str) -> float:
    """The model's seconds per Pegasos iteration (current kernels, captured segment)."""
    from gpusvm import roofline
    dev, _ = model_device(device_name)
    stats = roofline.batch_stats(X, k, batches=2)
    costs = roofline.iteration_costs(X, stats, dev, solver="pegasos", balanced=False)
    return roofline.summarise(costs, dev)["seconds"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("cupy", "emulated"),
                        default="cupy" if cuda_available() else "emulated")
    parser.add_argument("--smoke", action="store_true",
                        help="small data (2000 rows of a9a, lam = 1e-2), few iterations: seconds on the emulator")
    parser.add_argument("--lam", type=float, default=1e-4)
    parser.add_argument("--eps", type=float, default=1e-3)
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)

    if args.smoke:
        sets = {"a9a": load("a9a", rows=2000)}
        ks, iters, repeat = [1, 64, 512], 10, 3
        args.lam = 1e-2
        eps_runs = [("a9a", 256, 0.02, 400)]
        kernel_k = 256
    else:
        if args.backend != "cupy":
            parser.error("the full benchmark needs a CUDA device; use --smoke on the emulator")
        sets = {"imdb": load("imdb"), "news20": load("news20")}
        ks, iters, repeat = [1, 16, 64, 256, 1024, 4096, 16384], 500, 50
        eps_runs = [(name, k, args.eps, 200_000) for name in sets for k in (64, 1024, 8192)]
        kernel_k = 4096
    peak, device, peak_source = peak_bandwidth_source(args.backend)
    results = {"backend": args.backend, "device": device, "smoke": args.smoke,
               "peak_bandwidth_GBps": peak / 1e9 if peak else None,
               "peak_bandwidth_source": peak_source,
               "per_iteration": [], "time_to_eps": [], "kernels": []}

    print(f"# {device} ({args.backend})" + (f", peak {peak / 1e9:.0f} GB/s ({peak_source})"
                                            if peak else ""))
    print("\n## seconds per iteration (measured; modelled beside it)")
    print(f"{'data':<8} {'k':>6} {'s/iter':>10} {'modelled':>10} {'rows/s':>12}")
    for name, (X, y) in sets.items():
        for r in per_iteration(args.backend, X, y, ks, iters, args.lam):
            r["data"] = name
            r["modelled_seconds_per_iteration"] = modelled_per_iteration(X, r["k"], device)
            results["per_iteration"].append(r)
            print(f"{name:<8} {r['k']:>6} {r['seconds_per_iteration']:>10.3e} "
                  f"{r['modelled_seconds_per_iteration']:>10.3e} {r['rows_per_second']:>12.3e}")

    print(f"\n## time to P(w) - P* <= eps (lam = {args.lam:g})")
    print(f"{'data':<8} {'k':>6} {'eps':>7} {'iters':>8} {'seconds':>9} reached")
    for name, k, eps, max_iter in eps_runs:
        X, y = sets[name]
        r = time_to_eps(args.backend, name, X, y, args.lam, k, eps, max_iter)
        results["time_to_eps"].append(r)
        print(f"{name:<8} {k:>6} {eps:>7.0e} {r['iterations']:>8} {r['seconds']:>9.3f} {r['reached']}")

    print(f"\n## kernels (k = {kernel_k})")
    print(f"{'kernel':<46} {'seconds':>10} {'modelled':>10} {'MB':>8} {'GB/s':>8} {'of peak':>8}")
    for name, (X, y) in sets.items():
        for r in kernel_timings(args.backend, X, y, min(kernel_k, X.shape[0]), args.lam, repeat,
                                device):
            r["data"] = name
            results["kernels"].append(r)
            gbps = f"{r['GBps']:.1f}" if r["GBps"] else "-"
            frac = f"{100 * r['fraction_of_peak']:.0f}%" if r["fraction_of_peak"] else "-"
            mod = f"{r['modelled_seconds']:.3e}" if r["modelled_seconds"] else "-"
            print(f"{r['kernel']:<46} {r['seconds']:>10.3e} {mod:>10} {r['bytes'] / 1e6:>8.2f} "
                  f"{gbps:>8} {frac:>8}")

    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
