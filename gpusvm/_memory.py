"""The host memory a new allocation may take, and the peak a CPU fit needs, checked before it.

:func:`available_memory` reads the host's available memory and, inside a memory cgroup (a
container, a batch job), the cgroup's limit minus its usage, whichever is smaller.
:func:`fit_peak_bytes` estimates what a CPU fit adds to the caller's matrix (the prepared copy
with the bias column, the solver's vectors and the products' scratch; measured against
``benchmarks/bench_memory.py``), and :func:`check_fit_memory` refuses, before any copy, a fit
that would not fit.
"""

from __future__ import annotations

import os

import numpy as np

#: cgroup v2's and v1's limit and usage files of this process's memory cgroup
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_int(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None        # "max": no limit


def cgroup_available() -> int | None:
    """Bytes left under this process's memory cgroup limit (limit minus usage), or None
    when no limit is set or none can be read."""
    for limit_path, usage_path in _CGROUP_FILES:
        limit = _read_int(limit_path)
        if limit is None or limit >= 1 << 60:           # v1 writes "no limit" as ~2^63
            continue
        usage = _read_int(usage_path)
        return max(limit - (usage or 0), 0)
    return None


def available_memory(xp=np):
    """Bytes of memory a new allocation may take: the host's available memory (``psutil``'s,
    else ``MemAvailable`` of ``/proc/meminfo``, else the free pages), capped by the cgroup's
    room (:func:`cgroup_available`); the current device's free memory for CuPy; None when it
    cannot be read (nothing is then refused)."""
    if xp is not np:
        try:
            return int(xp.cuda.runtime.memGetInfo()[0])
        except Exception:                       # noqa: BLE001  (no device query: no check)
            return None
    host = _host_available()
    room = cgroup_available()
    if room is None:
        return host
    return room if host is None else min(host, room)


def _host_available():
    try:
        import psutil  # noqa: PLC0415  (optional)
        return int(psutil.virtual_memory().available)
    except Exception:                           # noqa: BLE001
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def fit_peak_bytes(n: int, d: int, nnz: int, itemsize: int, *, solver: str = "sdca",
                   n_jobs: int = 1, outputs: int = 1, bias: bool = True) -> int:
    """Bytes a CPU fit allocates beyond the caller's CSR matrix at its peak (an estimate).

    Parameters
    ----------
    n, d, nnz : int
        Rows, columns and nonzeros of the matrix.
    itemsize : int
        Bytes of one value in the fit's dtype (4: float32, 8: float64).
    solver : {"sdca", "newton", "pegasos"}
    n_jobs : int
        Threads of the fit.
    outputs : int
        Outputs (one-vs-rest classes; 1 for two classes).
    bias : bool
        Whether the bias column is appended (a copy of the matrix with ``n`` more nonzeros).

    Returns
    -------
    int
        The prepared copy (values, int32 indices, its building mask and int64 row pointers),
        the solver's per-row and per-column float64 vectors, and for Newton the active rows'
        copy (a quarter of the nonzeros at most) and the threads' partial sums.
    """
    n, d, nnz, k, m = int(n), int(d), int(nnz), max(int(n_jobs), 1), max(int(outputs), 1)
    d_aug = d + bool(bias)
    total = 0
    if bias:
        entries = nnz + n
        total += entries * (itemsize + 4) + entries + (n + 1) * 12
    if solver == "newton":
        # Y, S, Z, Q, A, AY, the Hessian weights and their rows, alpha: n-vectors per output;
        # W, w(alpha), G, P and CG's R, Zr, Dr, inv_diag, H d: d-vectors
        total += 12 * 8 * n + 10 * 8 * d_aug + 8 * m * (n + d_aug)
        # a step's active rows copied when they hold at most a quarter of the nonzeros
        # (solvers.newton.GATHER_MAX_FRACTION); the blocks' partial sums
        total += nnz * (itemsize + 4) // 4 + (n + 1) * 8 + (k - 1) * 8 * d_aug
        from . import _threads  # noqa: PLC0415
        if nnz < _threads.THREAD_MIN_NNZ:
            # below it SciPy multiplies (solvers.newton._compiled_products): the bias column
            # appended, a float64 copy, its squares' and the active rows' float64 copies
            entries = nnz + n
            total += (0 if bias else entries * (itemsize + 4) + (n + 1) * 8) + \
                (3 * 12 * entries if itemsize == 4 else 2 * 12 * entries)
    else:
        # labels, weights, duals, margins, the epochs' orders, a segment's 12 float64 a row
        # (NumbaBackend._segment_args); w and every thread's copy of it
        total += 6 * 8 * n * m + 12 * 8 * n + 4 * 4 * n + (2 + 2 * k) * 8 * d_aug * m
    return total


def _fmt(b):
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def check_fit_memory(n: int, d: int, nnz: int, itemsize: int, *, solver: str = "sdca",
                     n_jobs: int = 1, outputs: int = 1, bias: bool = True,
                     available: int | None = None) -> int:
    """Raise a one-line MemoryError, before any copy, when :func:`fit_peak_bytes` exceeds the
    memory available (:func:`available_memory` unless given); returns the estimate."""
    need = fit_peak_bytes(n, d, nnz, itemsize, solver=solver, n_jobs=n_jobs, outputs=outputs,
                          bias=bias)
    room = available_memory() if available is None else available
    if room is not None and need > room:
        ways = ["a sample of the rows"] + (["float32"] if itemsize > 4 else []) + \
            (["the dual (dual=True: SDCA)"] if solver == "newton" else []) + \
            (["fewer threads (n_jobs)"] if n_jobs > 1 else [])
        raise MemoryError(
            f"this {solver} fit of {n} x {d} with {nnz} nonzeros needs about {_fmt(need)} "
            f"beyond X, but {_fmt(room)} is available: fit {', '.join(ways)}, or on a machine "
            "with more memory (out of core fitting is not available yet)")
    return need


__all__ = ["available_memory", "cgroup_available", "fit_peak_bytes", "check_fit_memory"]
