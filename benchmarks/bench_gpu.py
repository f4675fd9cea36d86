"""GPU benchmark of the device backend as the segments run it, each figure beside the model's.

On a CUDA machine (``--backend cupy``, the default when a device exists)::

    python benchmarks/bench_gpu.py                      # imdb and news20
    python benchmarks/bench_gpu.py --json gpu.json      # also write the results

Measures, for mini-batch Pegasos and aggressive mini-batch SDCA (the solvers of the GPU
section of BENCHMARKS.md), each beside the performance model's figure for the design the
backend runs (``benchmarks/roofline.py``: the kernels balanced by nonzeros, replayed as a
captured graph, the gather drawing its own batch), for the device the model knows by name
(H100, H200; others are compared with the H100 figures and say so):

  * **seconds per iteration** of a replayed segment (the solver's own launch sequence, the
    CUDA graph of :meth:`DeviceBackend.pegasos_segment_m` / ``sdca_segment_m``), timed with CUDA
    events on the backend's stream after a run of the solver has put the state where a run
    is (its active rows, its step sizes); the fraction of the traffic roofline it reaches;
  * **each kernel of one iteration**, timed inside the real iteration: consecutive iterations
    of the solver's launch sequence, one kernel at a time with CUDA events between them (the
    state advances as in a run), against the model's time for that kernel and its bytes (the
    achieved bandwidth on the model's byte count);
    ``evaluate_m()`` (the product ``X W``, its reductions and one copy to the host) timed as
    the whole call and labelled so;
  * **time to** ``P(w) - P* <= eps``, setup included (the upload; NVRTC's compilation is
    left out by a warm-up run), with the solver's own evaluation cadence, as
    :func:`roofline.measure_iterations` runs it, against LinearSVC's one-core CPU
    time at its defaults on the same machine (``P*`` from LinearSVC at ``tol=1e-8``), and
    the model's time for the same iteration and evaluation counts.

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
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import roofline  # noqa: E402
from gpusvm import _kernels  # noqa: E402
from gpusvm.backends import cuda_available, make_backend  # noqa: E402
from gpusvm.datasets import load_svmlight  # noqa: E402
from gpusvm.solvers.pegasos import pegasos  # noqa: E402
from gpusvm.solvers.sdca import sdca  # noqa: E402

#: ``$GPUSVM_DATA`` when set, else ``<repo>/../shared/data``
DATA = Path(os.environ["GPUSVM_DATA"]) if os.environ.get("GPUSVM_DATA") else \
    REPO.parent / "shared" / "data"
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
    from roofline import DEVICES
    if "H200" in name:
        return DEVICES["h200"], ""
    if "H100" in name:
        return DEVICES["h100"], ""
    return DEVICES["h100"], " (model: H100 figures)"


#: the solvers measured, by the model's names
SOLVERS = ("pegasos", "sdca-aggressive")


def run_solver(backend, solver: str, lam: float, k: int, max_iter: int, eval_every: int):
    """A run of ``solver`` as the model counts it; returns the segment call and its arguments.

    The backend's segment method is wrapped for the run to record the sampler and plan the
    solver passed, so that the very launch sequence of the run can be replayed and timed.
    """
    name = "pegasos_segment_m" if solver == "pegasos" else "sdca_segment_m"
    segment = getattr(backend, name)
    seen = {}

    def spy(sampler, t0, t1, plan):
        seen["sampler"], seen["plan"] = sampler, plan
        return segment(sampler, t0, t1, plan)

    setattr(backend, name, spy)
    try:
        if solver == "pegasos":
            pegasos(backend, lam=lam, k=k, max_iter=max_iter, seed=1, averaging="doubling",
                    eval_every=eval_every)
        else:
            sdca(backend, lam=lam, b=k, max_iter=max_iter, variant="aggressive", seed=1,
                 tol=0.0, eval_every=eval_every)
    finally:
        delattr(backend, name)                       # the class's method again
    return segment, seen["sampler"], seen["plan"]


class Timer:
    """Seconds of a call that launches work on the backend's stream (CUDA events on a GPU,
    wall time on the emulator, which runs every launch before it returns)."""

    def __init__(self, backend):
        self.be = backend
        self.gpu = backend.runtime.name == "cupy"

    def __call__(self, fn, repeat: int) -> float:
        """Median seconds of ``fn()`` over ``repeat`` calls (after one call not counted)."""
        fn()
        times = []
        if self.gpu:
            import cupy
            stream = self.be.runtime.stream
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            for _ in range(repeat):
                start.record(stream)
                fn()
                end.record(stream)
                end.synchronize()
                times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
        else:
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return float(np.median(times))


def modelled(X, k: int, solver: str, dev) -> tuple[dict, list]:
    """The model's iteration (``summarise``) and kernels for the built design."""
    stats = roofline.batch_stats(X, k, batches=2, blocks=dev.sms * 4)
    costs = roofline.iteration_costs(X, stats, dev, solver=solver)
    return roofline.summarise(costs, dev), costs


def per_iteration(backend: str, X, y, solver: str, k: int, iterations: int, lam: float, dev,
                  repeat: int) -> dict:
    """Seconds per iteration of the replayed segment, with the model's figures beside it.

    The events enclose the whole segment call, so the host's part of it (the step sizes'
    check, the counter's reset, the graph launch: tens of microseconds, while the device
    waits) is counted too, about 0.05 us an iteration over ``iterations = 1000``.
    """
    be = make_backend(backend, X, y)
    epoch = max(1, math.ceil(X.shape[0] / k))
    warm = max(2 * epoch, 4)                       # past the first large steps
    segment, sampler, plan = run_solver(be, solver, lam, k, warm, warm)
    t = [warm]

    def replay():
        with be.runtime.activate():
            segment(sampler, t[0], t[0] + iterations, plan)
        t[0] += iterations

    sec = Timer(be)(replay, repeat) / iterations
    model, _ = modelled(X, k, solver, dev)
    return {"solver": solver, "k": int(k), "iterations": int(iterations),
            "seconds_per_iteration": sec, "launches_per_iteration": model["launches"],
            "modelled_seconds_per_iteration": model["seconds"],
            "roofline_seconds": model["roofline_seconds"],
            "fraction_of_roofline": model["roofline_seconds"] / sec,
            "model_error": model["seconds"] / sec - 1.0}


def kernel_timings(backend: str, X, y, solver: str, k: int, lam: float, dev, repeat: int,
                   peak: float | None, copies: int = 20) -> list[dict]:
    """Each launch of one iteration, timed inside the real iteration.

    After a run of the solver has put the state where a run is, ``copies`` consecutive
    iterations of the solver's own launch sequence are launched one kernel at a time on the
    backend's stream, with a CUDA event between every two kernels (wall time and a stream
    synchronisation on the emulator), ``repeat`` times; each kernel's time is the median of
    its intervals.  The state advances as in a run (the batch counter, the step sizes,
    SDCA's dual variables and rho's scratch, which the settle cleans), so no kernel is timed
    on a state it left behind, as replaying one stateful kernel alone would.  The intervals
    include any gap where the device waited for the host to launch the next kernel (about
    5 us a launch): at small batches they are an upper bound.
    """
    be = make_backend(backend, X, y)
    epoch = max(1, math.ceil(X.shape[0] / k))
    warm = 2 * epoch
    _, sampler, plan = run_solver(be, solver, lam, k, warm, warm)
    with be.runtime.activate():
        launches = (be._pegasos_launches(sampler, plan, reset=False) if solver == "pegasos"
                    else be._sdca_launches(sampler, plan))
    names = {id(fn): name for name, fn in be._functions.items()}
    _, costs = modelled(X, k, solver, dev)
    if len(costs) != len(launches):
        raise RuntimeError(f"{solver}: the backend launches {len(launches)} kernels an iteration, "
                           f"the model counts {len(costs)}: the model is out of date")
    gpu = be.runtime.name == "cupy"
    samples = [[] for _ in launches]
    with be.runtime.activate():
        stream = be.runtime.stream
        be._counter[...] = warm
        for round_ in range(repeat + 1):                 # the first round is not counted
            marks = []
            for _ in range(copies):
                for j, (fn, grid, args) in enumerate(launches):
                    if gpu:
                        import cupy
                        ev = cupy.cuda.Event()
                        ev.record(stream)
                        marks.append((j, ev))
                        fn((grid,), (_kernels.BLOCK,), args)
                    else:
                        t0 = time.perf_counter()
                        fn((grid,), (_kernels.BLOCK,), args)
                        stream.synchronize()
                        marks.append((j, time.perf_counter() - t0))
            if gpu:
                end = cupy.cuda.Event()
                end.record(stream)
                end.synchronize()
                events = [ev for _, ev in marks] + [end]
                marks = [(j, cupy.cuda.get_elapsed_time(events[i], events[i + 1]) * 1e-3)
                         for i, (j, _) in enumerate(marks)]
            if round_ > 0 or repeat == 0:
                for j, sec in marks:
                    samples[j].append(sec)
    out = []
    for (fn, grid, _), cost, secs in zip(launches, costs, samples):
        sec = float(np.median(secs))
        nbytes = cost.hbm_bytes
        out.append({"solver": solver, "kernel": names.get(id(fn), "?"), "model_kernel": cost.kernel,
                    "k": int(k), "grid": int(grid), "seconds": sec,
                    "modelled_seconds": cost.seconds(dev), "model_hbm_bytes": nbytes,
                    "GBps": nbytes / sec / 1e9,
                    "fraction_of_peak": nbytes / sec / peak if peak else None})
    timer = Timer(be)
    if solver == "pegasos":
        w, b = be.output_m(False)
        sec = timer(lambda: be.to_host(be.evaluate_m(w, b, lam)[0]), repeat)
        out.append({"solver": solver, "kernel": "evaluate_m() (X @ W + reductions + copy)",
                    "model_kernel": "evaluation", "k": int(k), "grid": None, "seconds": sec,
                    "modelled_seconds": roofline.evaluation_seconds(X, dev),
                    "model_hbm_bytes": None, "GBps": None, "fraction_of_peak": None})
    return out


def time_to_eps(backend: str, X, y, solver: str, k: int, lam: float, eps: float,
                reference: dict, dev, max_epochs: int) -> dict:
    """Measured wall time to ``P - P* <= eps`` (setup included), with the model's time."""
    warm_rows = min(X.shape[0], max(k, 64))
    roofline.measure_iterations(X[:warm_rows], y[:warm_rows], lam, min(k, warm_rows), solver,
                                p_star=0.0, eps=1e30, max_epochs=1,
                                backend=backend)     # compiles the kernels (once per process)
    r = roofline.measure_iterations(X, y, lam, k, solver, reference["p_star"], eps,
                                    max_epochs=max_epochs, backend=backend)
    r["wall_seconds"] = r["setup_seconds"] + r["seconds"]
    r["liblinear_seconds"] = reference["seconds"]
    r["ratio_to_liblinear"] = reference["seconds"] / r["wall_seconds"] if r["reached"] else None
    if r["reached"]:
        model, _ = modelled(X, k, solver, dev)
        r["modelled"] = roofline.time_to_eps(X, model["seconds"], r["iterations"],
                                             r["evaluations"], dev)
    return r


def certificate_parts(backend: str, X, y, k: int, lam: float, repeat: int) -> list[dict]:
    """Seconds of each part of one SDCA certificate (``certificate_m`` and the best point).

    After two epochs of SDCA at batch size ``k``, each part runs alone ``repeat`` times
    (after one call not counted), timed as :class:`Timer` times a segment: the margins'
    pass, ``W(alpha)``, the norms, the primal and dual objectives with their downloads, and
    :class:`~gpusvm.solvers.sdca.BestPoints`' segment minimum, beside the whole.
    """
    from gpusvm.solvers.sdca import BestPoints, certificate_m, primal_from_margins  # noqa: PLC0415
    be = make_backend(backend, X, y)
    epoch = max(1, math.ceil(X.shape[0] / k))
    run_solver(be, "sdca-aggressive", lam, k, 2 * epoch, epoch)
    timer = Timer(be)
    loss = "hinge"
    W = be.dual_weights_m(lam)
    with be.runtime.activate():
        A = be.xp.ascontiguousarray((be.decision_function_m(W, 0.0) * be.Y).T)
        sq = be.xp.asarray(be.col_sq_norms_m(W))
    best = BestPoints(be, lam, loss, be.sample_weight)
    cert = certificate_m(be, lam, loss)
    best.offer(np.arange(1), cert[0], cert[4], cert[1], cert[5])

    def offer():
        best.offer(np.arange(1), cert[0], cert[4], cert[1], cert[5])

    def primal():
        with be.runtime.activate():
            be.to_host(primal_from_margins(be.xp, A, be.sample_weight, sq, lam, loss))

    parts = {"certificate_m (all below but the best point)": lambda: certificate_m(be, lam, loss),
             "dual_weights_m: W(alpha), float64": lambda: be.dual_weights_m(lam),
             "decision_function_m * Y: the margins": lambda: be.decision_function_m(W, 0.0),
             "col_sq_norms_m": lambda: be.col_sq_norms_m(W),
             "primal_from_margins + to_host": primal,
             "dual_objective_m + to_host": lambda: be.to_host(
                 be.dual_objective_m(lam, W, loss, sq=np.ones(1))),
             "BestPoints.offer: segment minimum": offer}
    rows = []
    for name, fn in parts.items():
        rows.append({"part": name, "k": k, "seconds": timer(fn, repeat)})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("cupy", "emulated"),
                        default="cupy" if cuda_available() else "emulated")
    parser.add_argument("--smoke", action="store_true",
                        help="small data (2000 rows of a9a, lam = 1e-2), few iterations: "
                             "seconds on the emulator")
    parser.add_argument("--lam", type=float, default=1e-4)
    parser.add_argument("--eps", type=float, default=1e-3)
    parser.add_argument("--datasets", default="imdb,news20")
    parser.add_argument("--parts", default="iterations,kernels,eps",
                        help="which tables: iterations, kernels, eps, certificate "
                             "(comma-separated)")
    parser.add_argument("--kernel-k", type=int, default=None,
                        help="the batch size of the kernels' and the certificate's tables "
                             "(default 4096; 256 with --smoke)")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))

    if args.smoke:
        sets = {"a9a": load("a9a", rows=2000)}
        ks, iters, repeat, copies = [64, 256], 4, 2, 2
        args.lam = 1e-2
        eps_runs, eps, max_epochs = [256], 0.02, 50
        kernel_k = 256
    else:
        if args.backend != "cupy":
            parser.error("the full benchmark needs a CUDA device; use --smoke on the emulator")
        sets = {name: load(name) for name in args.datasets.split(",") if name}
        ks, iters, repeat, copies = [256, 1024, 4096, 8192, 16384], 1000, 10, 100
        eps_runs, eps, max_epochs = [1024, 4096], args.eps, 300
        kernel_k = 4096
    peak, device, peak_source = peak_bandwidth_source(args.backend)
    dev, note = model_device(device)
    results = {"backend": args.backend, "device": device, "smoke": args.smoke,
               "model_device": dev.name + note, "lam": args.lam, "eps": eps,
               "peak_bandwidth_GBps": peak / 1e9 if peak else None,
               "peak_bandwidth_source": peak_source,
               "per_iteration": [], "time_to_eps": [], "kernels": [], "certificate": []}
    if args.kernel_k:
        kernel_k = args.kernel_k

    def save():
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))

    print(f"# {device} ({args.backend})" + (f", peak {peak / 1e9:.0f} GB/s ({peak_source})"
                                            if peak else "") + f"; model: {dev.name}{note}")
    if "iterations" in parts:
        print("\n## seconds per iteration: replayed segment (measured), model beside it")
        print(f"{'data':<8} {'solver':<16} {'k':>6} {'launches':>8} {'us/iter':>9} "
              f"{'modelled':>9} {'roofline':>9} {'of roof':>8} {'model err':>9}")
        for name, (X, y) in sets.items():
            for solver in SOLVERS:
                for k in ks:
                    if k > X.shape[0]:
                        continue
                    r = per_iteration(args.backend, X, y, solver, k, iters, args.lam, dev,
                                      repeat)
                    r["data"] = name
                    results["per_iteration"].append(r)
                    save()
                    print(f"{name:<8} {solver:<16} {k:>6} {r['launches_per_iteration']:>8} "
                          f"{r['seconds_per_iteration'] * 1e6:>9.2f} "
                          f"{r['modelled_seconds_per_iteration'] * 1e6:>9.2f} "
                          f"{r['roofline_seconds'] * 1e6:>9.2f} "
                          f"{100 * r['fraction_of_roofline']:>7.0f}% "
                          f"{100 * r['model_error']:>+8.0f}%", flush=True)

    if "kernels" in parts:
        print(f"\n## each kernel of an iteration, replayed alone (k = {kernel_k}); bytes: the "
              "model's count")
        print(f"{'data':<8} {'kernel':<52} {'us':>8} {'modelled':>9} {'MB':>7} {'GB/s':>7} "
              f"{'of peak':>8}")
        for name, (X, y) in sets.items():
            for solver in SOLVERS:
                for r in kernel_timings(args.backend, X, y, solver, min(kernel_k, X.shape[0]),
                                        args.lam, dev, repeat, peak, copies):
                    r["data"] = name
                    results["kernels"].append(r)
                    mb = f"{r['model_hbm_bytes'] / 1e6:.2f}" if r["model_hbm_bytes"] else "-"
                    gbps = f"{r['GBps']:.0f}" if r["GBps"] else "-"
                    frac = f"{100 * r['fraction_of_peak']:.0f}%" if r["fraction_of_peak"] else "-"
                    label = f"{r['kernel']} [{r['model_kernel']}]"
                    print(f"{name:<8} {label[:52]:<52} {r['seconds'] * 1e6:>8.2f} "
                          f"{r['modelled_seconds'] * 1e6:>9.2f} {mb:>7} {gbps:>7} {frac:>8}",
                          flush=True)
            save()

    if "certificate" in parts:
        print(f"\n## the parts of one SDCA certificate (k = {kernel_k}), each alone")
        print(f"{'data':<8} {'part':<48} {'ms':>9}")
        for name, (X, y) in sets.items():
            for r in certificate_parts(args.backend, X, y, min(kernel_k, X.shape[0]), args.lam,
                                       repeat):
                r["data"] = name
                results["certificate"].append(r)
                print(f"{name:<8} {r['part']:<48} {r['seconds'] * 1e3:>9.3f}", flush=True)
            save()

    if "eps" in parts:
        print(f"\n## time to P(w) - P* <= {eps:g} (lam = {args.lam:g}), setup included; "
              "LinearSVC: one core, its defaults")
        print(f"{'data':<8} {'solver':<16} {'k':>6} {'iters':>7} {'evals':>5} {'ms':>9} "
              f"{'modelled':>9} {'LinearSVC ms':>12} {'ratio':>7}")
        for name, (X, y) in sets.items():
            reference = roofline.liblinear_reference(X, y, args.lam)
            for solver in SOLVERS:
                for k in eps_runs:
                    if k > X.shape[0]:
                        continue
                    r = time_to_eps(args.backend, X, y, solver, k, args.lam, eps, reference,
                                    dev, max_epochs)
                    r["data"] = name
                    results["time_to_eps"].append(r)
                    save()
                    mod = f"{r['modelled']['total_s'] * 1e3:.2f}" if r.get("modelled") else "-"
                    ratio = (f"{r['ratio_to_liblinear']:.1f}x" if r["ratio_to_liblinear"]
                             else "not reached")
                    its = r["iterations"] if r["iterations"] is not None else "-"
                    print(f"{name:<8} {solver:<16} {k:>6} {its:>7} {r['evaluations']:>5} "
                          f"{r['wall_seconds'] * 1e3:>9.2f} {mod:>9} "
                          f"{reference['seconds'] * 1e3:>12.1f} {ratio:>7}", flush=True)
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
