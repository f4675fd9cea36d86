"""Can a segment be one graph launch? A probe of CUDA graph WHILE nodes from Python, on a GPU.

A captured segment costs ``L // C + popcount(L % C)`` graph launches today (chunks of ``C``
iterations and their binary remainders).  One launch per segment of any length needs the
loop on the device: a conditional WHILE node (CUDA 12.4+) whose body is one iteration and
whose condition the iteration's last kernel sets with ``cudaGraphSetConditional``.  CuPy
exposes no conditional nodes, so this probe builds one through ``cuda.bindings`` (the CUDA
Python bindings) around a kernel that CuPy compiles with NVRTC, and reports each stage:

1. NVRTC compiles a kernel that calls ``cudaGraphSetConditional`` (which header, which
   include folder; whether the call stays an unresolved external);
2. the runtime creates a graph, a conditional handle and a WHILE node;
3. a CuPy launch is captured into the node's body (``cudaStreamBeginCaptureToGraph``);
4. the graph runs ``N`` iterations in one launch: the kernel's counter reads ``N``, and the
   time of one launch against ``N`` launches of the kernel alone.

Usage (on a machine with an NVIDIA GPU, CuPy and cuda-python)::

    python benchmarks/graph_while_probe.py [--out DIR]

Prints one line per stage and writes ``DIR/graph_while.json``; exit status 0 when the
WHILE loop ran ``N`` iterations.  Nothing here is used by gpusvm yet: it measures whether
the constant-launch segment can be built on the machines users have.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

KERNEL = r"""
extern "C" __global__ void probe_step(cudaGraphConditionalHandle handle, int* counter,
                                      const int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const int c = counter[0] + 1;
        counter[0] = c;
        cudaGraphSetConditional(handle, c < n ? 1u : 0u);
    }
}

extern "C" __global__ void probe_plain(int* counter) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        counter[0] = counter[0] + 1;
    }
}
"""
HEADERS = ("cuda_device_runtime_api.h", "cuda_runtime.h")
N = 1000


def _include_dirs():
    """Folders that may hold the CUDA runtime headers on this machine."""
    found = []
    for base in ("/usr/local/cuda/include", *sorted(str(p) for p in
                                                    Path("/usr/local").glob("cuda-*/include"))):
        if Path(base, "cuda_runtime.h").exists():
            found.append(base)
    try:
        import nvidia.cuda_runtime  # noqa: PLC0415  (the pip wheel's headers)
        base = Path(nvidia.cuda_runtime.__path__[0], "include")
        if (base / "cuda_runtime.h").exists():
            found.append(str(base))
    except ImportError:
        pass
    return found


def _ok(err) -> bool:
    return int(err) == 0


def probe(report: dict) -> bool:
    import cupy  # noqa: PLC0415
    report["cupy"] = cupy.__version__
    report["runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    # 1. the kernel
    kernel, tried = None, []
    for inc in _include_dirs() or [None]:
        for header in HEADERS:
            opts = ("--std=c++17",) + ((f"-I{inc}",) if inc else ())
            try:
                mod = cupy.RawModule(code=f"#include <{header}>\n" + KERNEL, options=opts)
                kernel = mod.get_function("probe_step")
                plain = mod.get_function("probe_plain")
                tried.append(f"{header} from {inc}: compiled and loaded")
                break
            except Exception as exc:  # every failure is a finding
                tried.append(f"{header} from {inc}: {type(exc).__name__}: {str(exc)[:300]}")
        if kernel is not None:
            break
    report["kernel"] = tried
    print("1. kernel:", tried[-1], flush=True)
    if kernel is None:
        return False
    # 2. the graph, the handle and the WHILE node
    try:
        from cuda.bindings import runtime as rt  # noqa: PLC0415
    except ImportError:
        from cuda import cudart as rt  # noqa: PLC0415  (cuda-python before 12.6)
    err, graph = rt.cudaGraphCreate(0)
    err2, handle = rt.cudaGraphConditionalHandleCreate(
        graph, 1, rt.cudaGraphConditionalHandleFlags.cudaGraphCondAssignDefault)
    params = rt.cudaGraphNodeParams()
    params.type = rt.cudaGraphNodeType.cudaGraphNodeTypeConditional
    params.conditional.handle = handle
    params.conditional.type = rt.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile
    params.conditional.size = 1
    try:
        err3, node = rt.cudaGraphAddNode(graph, None, 0, params)
    except TypeError:                 # CUDA 13: (graph, dependencies, edge data, count, params)
        err3, node = rt.cudaGraphAddNode(graph, None, None, 0, params)
    report["graph"] = [int(err), int(err2), int(err3)]
    print("2. graph, handle, WHILE node:", report["graph"], flush=True)
    if not (_ok(err) and _ok(err2) and _ok(err3)):
        return False
    body = params.conditional.phGraph_out[0]
    # 3. the body: one launch of the kernel, captured from CuPy's stream
    counter = cupy.zeros(1, dtype=cupy.int32)
    stream = cupy.cuda.Stream(non_blocking=True)
    err, = rt.cudaStreamBeginCaptureToGraph(stream.ptr, body, None, None, 0,
                                            rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed)
    with stream:
        kernel((1,), (32,), (cupy.uint64(int(handle)), counter, cupy.int32(N)))
    err2, _ = rt.cudaStreamEndCapture(stream.ptr)
    report["capture"] = [int(err), int(err2)]
    print("3. body captured:", report["capture"], flush=True)
    if not (_ok(err) and _ok(err2)):
        return False
    # 4. one launch, N iterations
    err, exe = rt.cudaGraphInstantiate(graph, 0)
    if not _ok(err):
        report["instantiate"] = int(err)
        print("4. instantiate failed:", int(err), flush=True)
        return False
    counter[...] = 0
    stream.synchronize()
    t = time.perf_counter()
    err, = rt.cudaGraphLaunch(exe, stream.ptr)
    stream.synchronize()
    one = time.perf_counter() - t
    ran = int(counter.get()[0])
    counter[...] = 0
    with stream:
        t = time.perf_counter()
        for _ in range(N):
            plain((1,), (32,), (counter,))
        stream.synchronize()
    plain = time.perf_counter() - t
    report.update(launch=int(err), iterations=ran, one_launch_s=one, plain_launches_s=plain)
    print(f"4. one graph launch ran {ran} of {N} iterations in {one * 1e3:.2f} ms "
          f"({N} plain launches of the kernel: {plain * 1e3:.2f} ms)", flush=True)
    return _ok(err) and ran == N


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    report: dict = {}
    try:
        ok = probe(report)
    except Exception as exc:  # a finding, recorded
        report["error"] = f"{type(exc).__name__}: {exc}"[:600]
        print("probe raised:", report["error"], flush=True)
        ok = False
    report["ok"] = ok
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "graph_while.json").write_text(json.dumps(report, indent=1, default=str))
    print("WHILE node:", "works" if ok else "NOT available", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
