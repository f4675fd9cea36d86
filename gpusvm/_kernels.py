"""Find, assemble and load the CUDA kernels of ``kernels/*.cu``.

The kernels ship as CUDA C++ files: at the top of a source checkout
(``<repo>/kernels``) and inside an installed wheel (``gpusvm/kernels``, mapped
there by the build).  :func:`module_source` joins every ``.cu`` file into one
text with the ``#include "..."`` lines replaced by the included files, so that
a compiler cache keyed on the source text (CuPy's is) sees every change, and
:func:`compile_options` adds a hash of all kernel files as a ``-D`` define for
good measure.  :func:`load_module` compiles that text once per device, with
CuPy's NVRTC for a GPU, or with the CPU kernel emulator.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from functools import lru_cache
from pathlib import Path

#: kernel files, one ``gpusvm_<op>`` kernel template per file
KERNEL_FILES = ("margins.cu", "pegasos_step.cu", "renormalize.cu", "reset_scale.cu",
                "output.cu", "decision.cu", "hinge_sum.cu", "row_sq_norms.cu",
                "sdca_margins.cu", "sdca_deltas.cu", "sdca_rho.cu", "sdca_apply.cu",
                "sdca_dual_weights.cu", "sample.cu", "sample_firsts.cu",
                # the kernels of a captured segment (after the files they include)
                "sample_next.cu", "sample_firsts_next.cu", "pegasos_segment_step.cu",
                "reset_scale_next.cu", "optimal_bias.cu", "margins_balanced.cu",
                "sdca_margins_balanced.cu", "sdca_rho_balanced.cu", "sdca_apply_balanced.cu",
                "margins_multi.cu", "accumulate_multi.cu", "sdca_deltas_multi.cu",
                "renormalize_multi.cu",
                # the general path's captured segments (after the files they include)
                "pegasos_coef_multi.cu", "pegasos_scalars_multi.cu", "reset_scale_multi_next.cu",
                "optimal_bias_multi.cu", "sdca_coef_multi.cu", "sdca_rho_multi.cu",
                "sdca_check_multi.cu", "sdca_finish_multi.cu")
#: lane counts of the row kernels (lanes of a warp that share one CSR row)
LANE_COUNTS = (4, 8, 16, 32)
#: C++ value types of the data and of ``v``, by NumPy dtype name
VALUE_TYPES = {"float32": "float", "float64": "double"}
#: kernels templated over ``<LANES, T>``; the others are templated over ``<T>``
ROW_KERNELS = ("gpusvm_margins", "gpusvm_pegasos_step", "gpusvm_decision", "gpusvm_hinge_sum",
               "gpusvm_row_sq_norms")
VECTOR_KERNELS = ("gpusvm_renormalize", "gpusvm_reset_scale", "gpusvm_output")
#: the kernels of a captured Pegasos segment, templated over ``<T>``: the two balanced by
#: nonzeros (kernels/balanced.cuh; their grids are tiles of the batch, not groups of lanes per
#: row), the conditional reset and the one-block optimal bias (their ThreadSanitizer run is in
#: tests/test_segment_kernels.py)
SEGMENT_KERNELS = ("gpusvm_margins_balanced", "gpusvm_pegasos_segment_step",
                   "gpusvm_reset_scale_next", "gpusvm_optimal_bias",
                   "gpusvm_sdca_margins_balanced", "gpusvm_sdca_rho_balanced",
                   "gpusvm_sdca_apply_balanced")
#: the general path (M outputs, weights, the squared hinge), templated over ``<T>``: one thread per
#: (batch row, output) pair, or one block for the scalars (launched by
#: gpusvm/backends/_general_device.py, whose segments are recorded and replayed as the binary
#: path's are)
MULTI_KERNELS = ("gpusvm_margins_multi", "gpusvm_accumulate_multi", "gpusvm_sdca_deltas_multi",
                 "gpusvm_renormalize_multi", "gpusvm_pegasos_coef_multi",
                 "gpusvm_pegasos_scalars_multi", "gpusvm_reset_scale_multi_next",
                 "gpusvm_optimal_bias_multi", "gpusvm_sdca_coef_multi", "gpusvm_sdca_rho_multi",
                 "gpusvm_sdca_check_multi", "gpusvm_sdca_finish_multi")
#: mini-batch SDCA kernels, templated over ``<LANES, T>`` like :data:`ROW_KERNELS` (launched by
#: the SDCA methods of the device backend; their ThreadSanitizer run is in tests/test_device_sdca.py)
SDCA_KERNELS = ("gpusvm_sdca_margins", "gpusvm_sdca_deltas", "gpusvm_sdca_rho", "gpusvm_sdca_apply",
                "gpusvm_sdca_dual_weights")
#: the counter-based sampler (kernels/sample.cu, templated over the sampling mode code of
#: gpusvm.solvers._sampling.MODE_CODES) and the first-occurrence mask of i.i.d. batches
SAMPLER_KERNELS = ("gpusvm_sample<0>", "gpusvm_sample<1>", "gpusvm_sample<2>",
                   "gpusvm_sample_firsts")
#: the same reading the batch index from device memory (a captured segment's launches)
SEGMENT_SAMPLER_KERNELS = ("gpusvm_sample_next<0>", "gpusvm_sample_next<1>",
                           "gpusvm_sample_next<2>", "gpusvm_sample_firsts_next")
#: threads per block of every kernel (``gpusvm::BLOCK`` in ``common.cuh``)
BLOCK = 256

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)


def kernel_dir() -> Path:
    """Directory holding the ``.cu`` files.

    Returns
    -------
    pathlib.Path
        ``gpusvm/kernels`` next to this module in an installed wheel, else
        ``<repo>/kernels`` in a source checkout.

    Raises
    ------
    FileNotFoundError
        When neither location holds the kernel files.
    """
    here = Path(__file__).resolve().parent
    candidates = (here / "kernels", here.parent / "kernels")
    for cand in candidates:
        if (cand / KERNEL_FILES[0]).is_file():
            return cand
    raise FileNotFoundError(
        "the CUDA kernel sources (margins.cu, ...) were found neither in "
        f"{candidates[0]} (installed wheel) nor in {candidates[1]} (source checkout); "
        "reinstall gpusvm")


def kernel_files() -> list[Path]:
    """Every kernel source file (``.cu`` and ``.cuh``), sorted by name."""
    root = kernel_dir()
    return sorted(list(root.glob("*.cu")) + list(root.glob("*.cuh")))


def _inline(path: Path, seen: set) -> str:
    """Text of ``path`` with its quoted includes replaced by their text (each file once)."""
    seen.add(path.name)

    def repl(match):
        name = match.group(1)
        if name in seen:
            return f"// (already included: {name})"
        inc = path.parent / name
        return f"// ---- begin {name}\n{_inline(inc, seen)}\n// ---- end {name}"

    return _INCLUDE.sub(repl, path.read_text(encoding="utf-8"))


def read_source(name: str) -> str:
    """Text of one kernel file with its includes inlined.

    Parameters
    ----------
    name : str
        File name in the kernel directory, e.g. ``"margins.cu"``.

    Returns
    -------
    str
        Self-contained CUDA C++ text.
    """
    return _inline(kernel_dir() / name, set())


def source_hash() -> str:
    """SHA-256 of every kernel file (names and contents), hex."""
    h = hashlib.sha256()
    for path in kernel_files():
        h.update(path.name.encode())
        h.update(b"\0")
        h.update(path.read_bytes())
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
    """Compiler options of the kernel module (the NVRTC test uses the same).

    ``-DGPUSVM_KERNELS_SHA256=<hash>`` keys any compiler cache on the sources of
    every kernel file, included headers too.
    """
    return ("-std=c++17", f"-DGPUSVM_KERNELS_SHA256={source_hash()[:16]}")


def row_kernel(op: str, lanes: int, value_type: str) -> str:
    """Name expression of a ``<LANES, T>`` kernel, e.g. ``gpusvm_margins<8,float>``."""
    return f"{op}<{int(lanes)},{value_type}>"


def vector_kernel(op: str, value_type: str) -> str:
    """Name expression of a ``<T>`` kernel, e.g. ``gpusvm_output<double>``."""
    return f"{op}<{value_type}>"


def name_expressions() -> list[str]:
    """Every template instance the device backend may launch."""
    names = []
    for t in VALUE_TYPES.values():
        for op in ROW_KERNELS + SDCA_KERNELS:
            names.extend(row_kernel(op, lanes, t) for lanes in LANE_COUNTS)
        names.extend(vector_kernel(op, t)
                     for op in VECTOR_KERNELS + SEGMENT_KERNELS + MULTI_KERNELS)
    names.extend(SAMPLER_KERNELS)
    names.extend(SEGMENT_SAMPLER_KERNELS)
    return names


def file_name_expressions(name: str) -> list[str]:
    """The template instances defined in one kernel file (``gpusvm_<op>`` in ``<op>.cu``)."""
    op = "gpusvm_" + name[:-3]
    return [e for e in name_expressions() if e.split("<")[0] == op]


def sampler_kernel(code: int) -> str:
    """Name expression of the sampler kernel for a sampling mode code."""
    return SAMPLER_KERNELS[int(code)]


_lock = threading.Lock()
_cupy_modules: dict = {}
#: seconds :func:`load_module` spent building the module, by device id (``"emulated"`` for the
#: emulator): the whole NVRTC and ptxas compile on a cold cache, a disk-cache load after
compile_seconds: dict = {}

#: CuPy's first version whose disk cache covers modules compiled with ``name_expressions``
CUPY_CACHING_NAME_EXPRESSIONS = (14, 2)


def cupy_caches_module(version: str) -> bool:
    """Whether CuPy ``version`` keeps this module in its disk cache (one compile per machine).

    Parameters
    ----------
    version : str
        ``cupy.__version__``.

    Returns
    -------
    bool
    """
    parts = re.findall(r"\d+", version)[:2]
    return tuple(int(p) for p in parts) >= CUPY_CACHING_NAME_EXPRESSIONS


def load_module(kind: str = "cupy"):
    """The compiled kernel module, built once per device.

    Parameters
    ----------
    kind : {"cupy", "emulated"}
        ``"cupy"``: a :class:`cupy.RawModule` for the current CUDA device
        (memoised per device id; CuPy also caches the binary on disk);
        ``"emulated"``: a :class:`gpusvm._emulator.EmulatedModule` running
        the same source on the CPU (memoised per process).

    Returns
    -------
    module
        An object with ``get_function(name_expression)``; the returned kernels
        are called as ``kernel(grid, block, args, shared_mem=0)``.
    """
    if kind == "emulated":
        return _emulated_module()
    if kind != "cupy":
        raise ValueError(f"kind must be 'cupy' or 'emulated', got {kind!r}")
    import cupy  # noqa: PLC0415  (optional dependency)
    dev = cupy.cuda.Device().id
    with _lock:
        mod = _cupy_modules.get(dev)
        if mod is None:
            start = time.perf_counter()
            mod = cupy.RawModule(code=module_source(), options=compile_options(),
                                 name_expressions=name_expressions())
            compile_seconds[dev] = time.perf_counter() - start
            _cupy_modules[dev] = mod
            if not cupy_caches_module(cupy.__version__):
                import warnings  # noqa: PLC0415
                warnings.warn(
                    f"CuPy {cupy.__version__} does not cache modules compiled with name "
                    "expressions, so every process compiles gpusvm's kernels anew "
                    f"({compile_seconds[dev]:.1f} s here); install CuPy >= 14.2 "
                    "(pip install 'gpusvm[cuda12]' or 'gpusvm[cuda13]')", RuntimeWarning,
                    stacklevel=2)
    return mod


@lru_cache(maxsize=None)
def _emulated_module():
    from ._emulator import EmulatedModule  # noqa: PLC0415  (builds a shared library)
    start = time.perf_counter()
    try:
        return EmulatedModule(code=module_source(), options=compile_options(),
                              name_expressions=tuple(name_expressions()))
    finally:
        compile_seconds["emulated"] = time.perf_counter() - start
