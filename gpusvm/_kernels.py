"""Find, assemble and load the CUDA kernels of ``kernels/*.cu``.

The kernels ship as CUDA C++ files: at the top of a source checkout (``<repo>/kernels``) and
inside an installed wheel (``gpusvm/kernels``, mapped there by the build).
:func:`module_source` joins every ``.cu`` file into one text with the ``#include "..."``
lines replaced by the included files, so that a compiler cache keyed on the source text
(CuPy's is) sees every change; :func:`compile_options` adds a hash of all kernel files as a
``-D`` define for good measure. :func:`load_module` compiles that text once per device, with
CuPy's NVRTC for a GPU, or with the CPU kernel emulator.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from functools import lru_cache
from pathlib import Path

#: kernel files, one ``gpusvm_<op>`` kernel template per file (a file after those it includes)
KERNEL_FILES = ("margins.cu", "sdca_margins.cu", "pegasos_step.cu", "optimal_bias.cu",
                "reset_scale.cu", "sdca_rho.cu", "sdca_apply.cu", "row_sq_norms.cu",
                "sample_next.cu", "sample_firsts_next.cu")
#: lane counts of the row kernel (lanes of a warp that share one CSR row)
LANE_COUNTS = (4, 8, 16, 32)
#: C++ value types of the data and of ``V``, by NumPy dtype name
VALUE_TYPES = {"float32": "float", "float64": "double"}
#: the kernels of a captured segment and their compile-time flags after ``T`` (kernels/outputs.cuh):
#: ``M1`` one output (tiles balanced by nonzeros) or M (one thread per row and output), ``SQ`` the
#: squared hinge, ``WT`` example weights; every combination is compiled
SEGMENT_KERNELS = {"gpusvm_margins": ("M1",), "gpusvm_sdca_margins": ("M1", "SQ", "WT"),
                   "gpusvm_pegasos_step": ("M1", "SQ", "WT"), "gpusvm_optimal_bias": ("WT",),
                   "gpusvm_reset_scale": (), "gpusvm_sdca_rho": ("M1",),
                   "gpusvm_sdca_apply": ("M1", "SQ", "WT")}
#: C++ types of the CSR column indices the kernels read, by NumPy dtype name: int32, or int64 for
#: a matrix of 2**31 columns or more (the kernels of :data:`INDEXED_KERNELS` take it as their last
#: template parameter, default ``int``; the int64 instances are a module of their own, compiled
#: only by a fit that needs them: :func:`load_module`)
INDEX_TYPES = {"int32": "int", "int64": "long long"}
#: the segment kernels that read column indices (their last template parameter, ``I``)
INDEXED_KERNELS = ("gpusvm_margins", "gpusvm_sdca_margins", "gpusvm_pegasos_step",
                   "gpusvm_sdca_rho", "gpusvm_sdca_apply")
#: the counter-based sampler reading the batch index from device memory (kernels/sample_next.cu,
#: templated over the sampling mode code of gpusvm.solvers._sampling.MODE_CODES) and the
#: first-occurrence mask of i.i.d. batches
SEGMENT_SAMPLER_KERNELS = ("gpusvm_sample_next<0>", "gpusvm_sample_next<1>",
                           "gpusvm_sample_next<2>", "gpusvm_sample_firsts_next")
#: the kernel that sets the condition of a segment's WHILE graph node, in a module of its own
#: (a driver without conditional nodes still loads the main module)
WHILE_FILE = "while_more.cu"
WHILE_KERNEL = "gpusvm_while_more"
#: threads per block of every kernel (``gpusvm::BLOCK`` in ``common.cuh``)
BLOCK = 256

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)


def kernel_dir() -> Path:
    """Directory of the ``.cu`` files: ``gpusvm/kernels`` next to this module in an installed
    wheel, else ``<repo>/kernels`` in a source checkout; FileNotFoundError when neither has them."""
    here = Path(__file__).resolve().parent
    candidates = (here / "kernels", here.parent / "kernels")
    for cand in candidates:
        if (cand / KERNEL_FILES[0]).is_file():
            return cand
    raise FileNotFoundError(
        "the CUDA kernel sources (margins.cu, ...) were found neither in "
        f"{candidates[0]} (installed wheel) nor in {candidates[1]} (source checkout); "
        "reinstall gpusvm")


def _inline(path: Path, seen: set) -> str:
    """Text of ``path`` with its quoted includes replaced by their text (each file once)."""
    seen.add(path.name)

    def repl(match):
        name = match.group(1)
        if name in seen:
            return f"// (already included: {name})"
        return f"// ---- begin {name}\n{_inline(path.parent / name, seen)}\n// ---- end {name}"

    return _INCLUDE.sub(repl, path.read_text(encoding="utf-8"))


def read_source(name: str) -> str:
    """Self-contained text of the kernel file ``name`` (e.g. ``"margins.cu"``), includes inlined."""
    return _inline(kernel_dir() / name, set())


def source_hash() -> str:
    """SHA-256 of every kernel file (``.cu`` and ``.cuh``, sorted by name: names and contents), hex."""
    h = hashlib.sha256()
    root = kernel_dir()
    for path in sorted(list(root.glob("*.cu")) + list(root.glob("*.cuh"))):
        for part in (path.name.encode(), path.read_bytes()):
            h.update(part)
            h.update(b"\0")
    return h.hexdigest()


def module_source() -> str:
    """All kernel files joined into one self-contained text (each include inlined once)."""
    seen: set = set()
    parts = [f"// gpusvm kernels, sha256 {source_hash()}"]
    for name in KERNEL_FILES:
        parts.append(f"// ==== {name}\n" + _inline(kernel_dir() / name, seen))
    return "\n".join(parts) + "\n"


def compile_options() -> tuple:
    """Compiler options of the kernel module (the NVRTC test uses the same);
    ``-DGPUSVM_KERNELS_SHA256=<hash>`` keys any compiler cache on every kernel file."""
    return ("-std=c++17", f"-DGPUSVM_KERNELS_SHA256={source_hash()[:16]}")


def row_kernel(op: str, lanes: int, value_type: str) -> str:
    """Name expression of a ``<LANES, T>`` kernel, e.g. ``gpusvm_row_sq_norms<8,float>``."""
    return f"{op}<{int(lanes)},{value_type}>"


def segment_kernel(op: str, value_type: str, index: str = "int32", **flags) -> str:
    """Name expression of the segment kernel ``op`` (a key of :data:`SEGMENT_KERNELS`), e.g.
    ``gpusvm_pegasos_step<float,1,0,0>``; ``flags`` sets ``M1``, ``SQ``, ``WT`` (default 0;
    those ``op`` does not take are ignored); ``index="int64"`` names the instance with int64
    column indices of an op of :data:`INDEXED_KERNELS` (``..., long long>``; the others have
    one instance)."""
    args = [value_type] + [str(int(bool(flags.get(f, 0)))) for f in SEGMENT_KERNELS[op]]
    if index != "int32" and op in INDEXED_KERNELS:
        args.append(INDEX_TYPES[index])
    return "<".join((op, ",".join(args))) + ">"


def name_expressions(index: str = "int32") -> list[str]:
    """Every template instance of one module the device backend may launch: ``"int32"`` the main
    module (int32 column indices), ``"int64"`` the module of the int64 instances of
    :data:`INDEXED_KERNELS` (a matrix of 2**31 columns or more)."""
    if index not in INDEX_TYPES:
        raise ValueError(f"index must be one of {sorted(INDEX_TYPES)}, got {index!r}")
    names = []
    for t in VALUE_TYPES.values():
        if index == "int32":
            names.extend(row_kernel("gpusvm_row_sq_norms", lanes, t) for lanes in LANE_COUNTS)
        for op, flags in SEGMENT_KERNELS.items():
            if index != "int32" and op not in INDEXED_KERNELS:
                continue
            for bits in range(1 << len(flags)):
                names.append(segment_kernel(op, t, index,
                                            **{f: bits >> i & 1 for i, f in enumerate(flags)}))
    if index == "int32":
        names.extend(SEGMENT_SAMPLER_KERNELS)
    return names


def all_name_expressions() -> list[str]:
    """The instances of both modules (:func:`name_expressions` of every index type)."""
    return [e for index in INDEX_TYPES for e in name_expressions(index)]


def file_name_expressions(name: str) -> list[str]:
    """The template instances defined in one kernel file (``gpusvm_<op>`` in ``<op>.cu``), of
    both modules."""
    op = "gpusvm_" + name[:-3]
    return [e for e in all_name_expressions() if e.split("<")[0] == op]


_lock = threading.Lock()
_cupy_modules: dict = {}
#: seconds :func:`load_module` spent building the module, by device id (``"emulated"`` for the
#: emulator): the whole NVRTC and ptxas compile on a cold cache, a disk-cache load after
compile_seconds: dict = {}

#: CuPy's first version whose disk cache covers modules compiled with ``name_expressions``
CUPY_CACHING_NAME_EXPRESSIONS = (14, 2)


def cupy_caches_module(version: str) -> bool:
    """Whether CuPy ``version`` (``cupy.__version__``) keeps this module in its disk cache."""
    parts = re.findall(r"\d+", version)[:2]
    return tuple(int(p) for p in parts) >= CUPY_CACHING_NAME_EXPRESSIONS


def load_module(kind: str = "cupy", index: str = "int32"):
    """The compiled kernel module, built once per device: for ``kind="cupy"`` a
    :class:`cupy.RawModule` for the current CUDA device (memoised per device id; CuPy also
    caches the binary on disk), for ``"emulated"`` a :class:`gpusvm_emulator.EmulatedModule`
    running the same source on the CPU (memoised per process). Its ``get_function(name
    expression)`` gives kernels called as ``kernel(grid, block, args, shared_mem=0)``.
    ``index="int64"``: the module of the int64-index instances (:func:`name_expressions`),
    the same source, compiled apart on first use (only a matrix of 2**31 columns or more needs
    it).
    """
    if index not in INDEX_TYPES:
        raise ValueError(f"index must be one of {sorted(INDEX_TYPES)}, got {index!r}")
    if kind == "emulated":
        return _emulated_module() if index == "int32" else _emulated_wide_module()
    if kind != "cupy":
        raise ValueError(f"kind must be 'cupy' or 'emulated', got {kind!r}")
    import cupy  # noqa: PLC0415  (optional dependency)
    dev = cupy.cuda.Device().id
    if index != "int32":
        with _lock:
            return _cupy_module((index, dev), module_source(), name_expressions(index))
    with _lock:
        if dev not in _cupy_modules:
            start = time.perf_counter()
            _cupy_module(dev, module_source(), name_expressions())
            compile_seconds[dev] = time.perf_counter() - start
            if not cupy_caches_module(cupy.__version__):
                import warnings  # noqa: PLC0415
                warnings.warn(
                    f"CuPy {cupy.__version__} does not cache modules compiled with name "
                    "expressions, so every process compiles gpusvm's kernels anew "
                    f"({compile_seconds[dev]:.1f} s here); install CuPy >= 14.2 "
                    "(pip install 'gpusvm[cuda12]' or 'gpusvm[cuda13]')", RuntimeWarning,
                    stacklevel=2)
        return _cupy_modules[dev]


def _cupy_module(key, code: str, names: list):
    """``cupy.RawModule(code, name_expressions=names)``, compiled once per ``key`` (the caller
    holds ``_lock``). CuPy compiles on the first ``get_function``, so that is called here: the
    compile (or disk-cache load) happens, and is timed, before the first fit's clock starts."""
    import cupy  # noqa: PLC0415  (optional dependency)
    mod = _cupy_modules.get(key)
    if mod is None:
        mod = cupy.RawModule(code=code, options=compile_options(), name_expressions=names)
        mod.get_function(names[0])
        _cupy_modules[key] = mod
    return mod


def load_while_module(kind: str = "cupy"):
    """The module of :data:`WHILE_KERNEL`, built once per device (``kind`` as for
    :func:`load_module`). Apart from the main module: its kernel calls the device runtime's
    ``cudaGraphSetConditional`` (CUDA 12.4), which a driver without conditional graph nodes may
    refuse to load, and only segments replayed through a WHILE node need it."""
    if kind == "emulated":
        return _emulated_while_module()
    if kind != "cupy":
        raise ValueError(f"kind must be 'cupy' or 'emulated', got {kind!r}")
    import cupy  # noqa: PLC0415  (optional dependency)
    with _lock:
        return _cupy_module(("while", cupy.cuda.Device().id), read_source(WHILE_FILE),
                            [WHILE_KERNEL])


@lru_cache(maxsize=None)
def _emulated_while_module():
    from gpusvm_emulator import EmulatedModule  # noqa: PLC0415  (builds a shared library)
    return EmulatedModule(code=read_source(WHILE_FILE), options=compile_options(),
                          name_expressions=(WHILE_KERNEL,))


@lru_cache(maxsize=None)
def _emulated_wide_module():
    from gpusvm_emulator import EmulatedModule  # noqa: PLC0415  (builds a shared library)
    return EmulatedModule(code=module_source(), options=compile_options(),
                          name_expressions=tuple(name_expressions("int64")))


@lru_cache(maxsize=None)
def _emulated_module():
    from gpusvm_emulator import EmulatedModule  # noqa: PLC0415  (builds a shared library)
    start = time.perf_counter()
    try:
        return EmulatedModule(code=module_source(), options=compile_options(),
                              name_expressions=tuple(name_expressions()))
    finally:
        compile_seconds["emulated"] = time.perf_counter() - start
