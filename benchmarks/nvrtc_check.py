"""Compile the kernels with NVRTC and report registers and spills, without a GPU.

NVRTC (the runtime compiler CuPy uses) is loaded through :mod:`ctypes` from the
``nvidia-cuda-nvrtc-cu12`` wheel, a CUDA toolkit, or ``$GPUSVM_NVRTC``; ptxas
comes from the ``nvidia-cuda-nvcc-cu12`` wheel, a CUDA toolkit, or
``$GPUSVM_PTXAS``.  CUDA 12.x still accepts ``compute_70`` (CUDA 13 dropped it).

Run ``python benchmarks/nvrtc_check.py`` for a table of kernel, architecture, registers
and spill bytes of every template instance the device backend launches.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gpusvm import _kernels  # noqa: E402

#: virtual architectures the kernels are always checked for (Volta, Turing, Ampere, Hopper)
ARCHS = ("compute_70", "compute_75", "compute_80", "compute_90")
#: checked too where the installed NVRTC knows them (Blackwell: data centre, consumer)
OPTIONAL_ARCHS = ("compute_100", "compute_120")
#: real architectures ptxas always reports on
SM_ARCHS = ("sm_75", "sm_80", "sm_90")


#: the one line NVRTC 12.8+ prints for any architecture before compute_75, whatever the source;
#: it has no option to silence it, so it is the only line :func:`warnings_in` ignores
DEPRECATION_NOTICE = ("nvrtc: warning: Architectures prior to '<compute/sm>_75' are deprecated "
                      "and may be removed in a future release")


def warnings_in(log: str) -> str:
    """NVRTC log without the architecture deprecation notice (empty for a clean compilation)."""
    return "\n".join(line for line in log.splitlines()
                     if line.strip() and line.strip() != DEPRECATION_NOTICE)


class NVRTCError(RuntimeError):
    """NVRTC failed, or is not installed."""


def _site_dirs() -> list[Path]:
    import site  # noqa: PLC0415
    dirs = [Path(p) for p in sys.path if p]
    try:
        dirs += [Path(p) for p in site.getsitepackages()]
    except AttributeError:  # virtualenv without getsitepackages
        pass
    return dirs


def find_nvrtc() -> str:
    """Path (or soname) of libnvrtc.

    Returns
    -------
    str

    Raises
    ------
    NVRTCError
        When no libnvrtc is found; install ``nvidia-cuda-nvrtc-cu12``.
    """
    env = os.environ.get("GPUSVM_NVRTC")
    if env:
        return env
    pats = ["nvidia/cuda_nvrtc/lib/libnvrtc.so*", "nvidia/cu*/lib/libnvrtc.so*"]
    for d in _site_dirs():
        for pat in pats:
            hits = sorted(h for h in glob.glob(str(d / pat)) if "alt" not in Path(h).name
                          and "builtins" not in Path(h).name)
            if hits:
                return hits[-1]
    for pat in ("/usr/local/cuda/lib64/libnvrtc.so*", "/usr/local/cuda-12*/lib64/libnvrtc.so*"):
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[-1]
    name = ctypes.util.find_library("nvrtc")
    if name:
        return name
    raise NVRTCError("libnvrtc not found: pip install nvidia-cuda-nvrtc-cu12 (or set GPUSVM_NVRTC)")


def find_ptxas() -> str:
    """Path of ptxas, preferring the one that matches the NVRTC wheel.

    Raises
    ------
    FileNotFoundError
        When no ptxas is found; install ``nvidia-cuda-nvcc-cu12``.
    """
    env = os.environ.get("GPUSVM_PTXAS")
    if env:
        return env
    for d in _site_dirs():
        cand = d / "nvidia" / "cuda_nvcc" / "bin" / "ptxas"
        if cand.is_file():
            return str(cand)
    for cand in ("/usr/local/cuda/bin/ptxas", shutil.which("ptxas")):
        if cand and Path(cand).is_file():
            return cand
    raise FileNotFoundError("ptxas not found: pip install nvidia-cuda-nvcc-cu12 (or set GPUSVM_PTXAS)")


@lru_cache(maxsize=1)
def _lib():
    lib = ctypes.CDLL(find_nvrtc())
    c_p, c_char_p, c_int, c_size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
    sigs = {
        "nvrtcVersion": [ctypes.POINTER(c_int), ctypes.POINTER(c_int)],
        "nvrtcCreateProgram": [ctypes.POINTER(c_p), c_char_p, c_char_p, c_int,
                               ctypes.POINTER(c_char_p), ctypes.POINTER(c_char_p)],
        "nvrtcDestroyProgram": [ctypes.POINTER(c_p)],
        "nvrtcAddNameExpression": [c_p, c_char_p],
        "nvrtcCompileProgram": [c_p, c_int, ctypes.POINTER(c_char_p)],
        "nvrtcGetProgramLogSize": [c_p, ctypes.POINTER(c_size)],
        "nvrtcGetProgramLog": [c_p, c_char_p],
        "nvrtcGetPTXSize": [c_p, ctypes.POINTER(c_size)],
        "nvrtcGetPTX": [c_p, c_char_p],
        "nvrtcGetLoweredName": [c_p, c_char_p, ctypes.POINTER(c_char_p)],
    }
    for fn, args in sigs.items():
        getattr(lib, fn).argtypes = args
        getattr(lib, fn).restype = c_int
    lib.nvrtcGetErrorString.argtypes = [c_int]
    lib.nvrtcGetErrorString.restype = c_char_p
    return lib


def version() -> tuple[int, int]:
    """NVRTC version ``(major, minor)``."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def supported() -> tuple[int, ...]:
    """Compute capabilities the installed NVRTC compiles for (e.g. ``(75, 80, ..., 120)``)."""
    lib = _lib()
    n = ctypes.c_int()
    lib.nvrtcGetNumSupportedArchs.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.nvrtcGetNumSupportedArchs.restype = ctypes.c_int
    _check(lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
    out = (ctypes.c_int * max(n.value, 1))()
    lib.nvrtcGetSupportedArchs.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.nvrtcGetSupportedArchs.restype = ctypes.c_int
    _check(lib.nvrtcGetSupportedArchs(out), "nvrtcGetSupportedArchs")
    return tuple(int(x) for x in out[:n.value])


def archs() -> tuple[str, ...]:
    """:data:`ARCHS` plus those of :data:`OPTIONAL_ARCHS` that the installed NVRTC knows."""
    known = set(supported())
    return ARCHS + tuple(a for a in OPTIONAL_ARCHS if int(a.split("_")[1]) in known)


def sm_archs() -> tuple[str, ...]:
    """:data:`SM_ARCHS` plus the real architectures of the optional ones NVRTC knows."""
    return SM_ARCHS + tuple("sm_" + a.split("_")[1] for a in archs() if a in OPTIONAL_ARCHS)


def _check(status: int, what: str, log: str = "") -> None:
    if status != 0:
        msg = _lib().nvrtcGetErrorString(status).decode()
        raise NVRTCError(f"{what} failed: {msg}" + (f"\n{log}" if log else ""))


@dataclass
class CompileResult:
    """PTX of one compilation.

    Attributes
    ----------
    ptx : str
    log : str
        NVRTC's log (empty when there is no warning).
    lowered : dict
        Name expression -> mangled name of each requested template instance.
    """

    ptx: str
    log: str
    lowered: dict


def compile_ptx(source: str, arch: str, options=(), name_expressions=(), name: str = "gpusvm.cu"):
    """Compile CUDA C++ text to PTX with NVRTC.

    Parameters
    ----------
    source : str
        Self-contained source (includes already inlined).
    arch : str
        Virtual architecture, e.g. ``"compute_80"``.
    options : sequence of str
        Further NVRTC options (those of :func:`gpusvm._kernels.compile_options`).
    name_expressions : sequence of str
        Template instances to instantiate, e.g. ``"gpusvm_margins<8,float>"``.
    name : str
        File name shown in diagnostics.

    Returns
    -------
    CompileResult

    Raises
    ------
    NVRTCError
        When compilation fails (the log is in the message).
    """
    lib = _lib()
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(lib.nvrtcAddNameExpression(prog, expr.encode()), f"nvrtcAddNameExpression({expr})")
        opts = [f"--gpu-architecture={arch}", *options]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        status = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.value.decode(errors="replace").strip()
        _check(status, f"compiling {name} for {arch}", log)
        _check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        ptx = buf.value.decode()
        lowered = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            _check(lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)),
                   f"nvrtcGetLoweredName({expr})")
            lowered[expr] = out.value.decode()
        return CompileResult(ptx, log, lowered)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


@dataclass
class KernelResources:
    """What ptxas reports for one kernel on one real architecture."""

    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int
    shared_bytes: int


_FUNC = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def ptxas_resources(ptx: str, sm_arch: str, names: dict | None = None) -> list[KernelResources]:
    """Assemble PTX with ``ptxas -v`` and parse registers and spills per kernel.

    Parameters
    ----------
    ptx : str
    sm_arch : str
        Real architecture, e.g. ``"sm_90"``.
    names : dict, optional
        Mangled name -> readable name (the inverse of ``CompileResult.lowered``).

    Returns
    -------
    list of KernelResources
    """
    names = names or {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run([find_ptxas(), "-v", f"-arch={sm_arch}", str(src),
                               "-o", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed for {sm_arch}:\n{proc.stderr}")
    out = []
    current = None
    frame = None
    for line in proc.stderr.splitlines():
        m = _FUNC.search(line)
        if m:
            current, frame = m.group(1), None
            continue
        m = _FRAME.search(line)
        if m and current:
            frame = tuple(int(g) for g in m.groups())
            continue
        m = _USED.search(line)
        if m and current:
            fr = frame or (0, 0, 0)
            out.append(KernelResources(names.get(current, current), sm_arch, int(m.group(1)),
                                       fr[1], fr[2], fr[0], int(m.group(2) or 0)))
            current = None
    return out


#: the architecture each kernel file is compiled for on its own (the module, which holds every
#: file, is compiled for every architecture of :func:`archs`)
FILE_ARCH = "compute_90"


def check_all(archs=None, sm_archs=None, file_arch=FILE_ARCH):
    """Compile every kernel file and the whole module, as the backend does, and run ptxas.

    Each file is compiled on its own once, for ``file_arch`` (it must hold its includes
    and template instances); the module, the concatenation of every file that the
    backend loads, for each architecture of ``archs``, so every kernel is checked for
    every architecture.  The compilations and the ptxas runs go on in a pool of
    threads, one per core: NVRTC calls through ctypes release the GIL, and calls on
    distinct programs may run concurrently (NVRTC User Guide, "Thread Safety").

    Returns
    -------
    logs : dict
        ``(file, file_arch)`` and ``("module", arch)`` -> NVRTC log (empty when clean).
    resources : list of KernelResources
        ptxas report of every template instance of the module for each ``sm_archs``.
    """
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    archs = globals()["archs"]() if archs is None else tuple(archs)
    sm_archs = globals()["sm_archs"]() if sm_archs is None else tuple(sm_archs)
    opts = _kernels.compile_options()
    exprs = _kernels.all_name_expressions()    # both modules' instances (the same source)
    module = _kernels.module_source()

    def one_file(name):
        res = compile_ptx(_kernels.read_source(name), file_arch, opts,
                          _kernels.file_name_expressions(name), name)
        return (name, file_arch), res.log, []

    def whole_module(arch):
        res = compile_ptx(module, arch, opts, exprs, "gpusvm_kernels.cu")
        sm = "sm_" + arch.split("_")[1]
        found = []
        if sm in sm_archs:
            inverse = {v: k for k, v in res.lowered.items()}
            found = ptxas_resources(res.ptx, sm, inverse)
        return ("module", arch), res.log, found

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        jobs = [pool.submit(whole_module, arch) for arch in archs]
        jobs += [pool.submit(one_file, name) for name in _kernels.KERNEL_FILES]
        done = [job.result() for job in jobs]
    logs = {key: log for key, log, _ in done}
    resources = [r for _, _, found in done for r in found]
    return logs, resources


def format_table(resources) -> str:
    """Plain-text table of :class:`KernelResources`."""
    head = f"{'kernel':<36} {'arch':<6} {'regs':>4} {'spill st':>8} {'spill ld':>8} {'stack':>5} {'smem':>5}"
    lines = [head, "-" * len(head)]
    for r in sorted(resources, key=lambda r: (r.kernel, r.arch)):
        lines.append(f"{r.kernel:<36} {r.arch:<6} {r.registers:>4} {r.spill_stores:>8} "
                     f"{r.spill_loads:>8} {r.stack_frame:>5} {r.shared_bytes:>5}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command line: compile every kernel with NVRTC and print the ptxas table."""
    parser = argparse.ArgumentParser(prog="python benchmarks/nvrtc_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", action="append", choices=ARCHS + OPTIONAL_ARCHS,
                        help="virtual architecture(s) to compile for (default: all)")
    args = parser.parse_args(argv)
    chosen = tuple(args.arch) if args.arch else archs()
    major, minor = version()
    print(f"NVRTC {major}.{minor}; ptxas {find_ptxas()}")
    logs, resources = check_all(chosen)
    warned = {k: warnings_in(v) for k, v in logs.items() if warnings_in(v)}
    for (name, arch), log in warned.items():
        print(f"--- NVRTC log for {name} ({arch}):\n{log}")
    print(format_table(resources))
    spills = [r for r in resources if r.spill_stores or r.spill_loads]
    print(f"{len(resources)} kernel instances; {len(warned)} compilations with warnings; "
          f"{len(spills)} with spills")
    return 1 if warned or spills else 0


if __name__ == "__main__":
    raise SystemExit(main())
