"""CPU emulator for gpusvm's CUDA kernels (docs/backends.md, "Execution").

The very same ``.cu`` sources that CuPy compiles with NVRTC are compiled by the host C++
compiler through ``cuda_emu.h`` and launched with ``cupy.RawKernel``'s calling convention::

    mod = EmulatedModule(path="kernels/row_sq_norms.cu",
                         name_expressions=("gpusvm_row_sq_norms<32,double>",))
    kern = mod.get_function("gpusvm_row_sq_norms<32,double>")
    kern(((n + 7) // 8,), (256,), (indptr, data, np.int32(n), sq))   # 8 rows of 32 lanes a block

``cuda_emu.h``'s header comment describes the execution model (a fiber per CUDA thread,
blocks taken by one worker thread per core, real barriers: a deadlock raises a
``RuntimeError`` saying where each group of threads waits) and its limits. Launches are
synchronous and release the GIL. Built with ``tsan=True`` a module runs under
ThreadSanitizer (``tests/tsan_runner.py``), which is how data races are found: a racy kernel
practically never gives wrong numbers in a plain run (nor does an intra-warp race between
barriers, which only TSAN sees). Further limits: atomics are relaxed C++ atomics and
``__threadfence`` a seq_cst fence; a thread spinning on another (a spin lock, a flag loop)
hangs, since fibers switch only at barriers; static ``__shared__`` variables persist per
worker between blocks (their size is not checked); device-side ``assert`` aborts the process
and ``printf`` is not ordered across workers; g++ does not contract multiply-adds into FMA as
NVRTC does, so compare with GPU results using tolerances, never bit for bit.

Environment: ``GPUSVM_EMU_WORKERS`` (worker threads, default ``os.cpu_count()``),
``GPUSVM_EMU_CACHE`` (build cache, default ``~/.cache/gpusvm/emulator``), ``GPUSVM_EMU_CXX``
(compiler, default ``g++``), ``GPUSVM_EMU_STACK_KB`` (fiber stack, default 256, 512 under
TSAN; an overflow hits a guard page and crashes the process).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from . import atomic_counts
from .atomic_counts import count_atomics

__all__ = ["EmulatedGraph", "EmulatedKernel", "EmulatedModule", "EmulatorBuildError", "cache_dir",
           "count_atomics", "default_workers", "find_compiler"]

_HEADER = Path(__file__).resolve().with_name("cuda_emu.h")
_ABI = "gpusvm-emu-abi-1"
_MAX_DYNAMIC_SHARED = 232448
_COMMON_FLAGS = ("-std=c++20", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden",
                 "-fvisibility-inlines-hidden", "-fno-gnu-unique", "-fno-strict-aliasing",
                 "-fno-math-errno", "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function",
                 "-Wno-unused-variable")
_PLAIN_FLAGS = ("-O2",)
_TSAN_FLAGS = ("-fsanitize=thread", "-O1", "-g", "-fno-omit-frame-pointer")


class EmulatorBuildError(RuntimeError):
    """The host compiler rejected an emulated module; the message holds its output."""


def cache_dir():
    """Directory of built modules: ``$GPUSVM_EMU_CACHE``, else ``~/.cache/gpusvm/emulator``."""
    env = os.environ.get("GPUSVM_EMU_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gpusvm" / "emulator"


def default_workers():
    """OS worker threads of a launch: ``$GPUSVM_EMU_WORKERS``, else ``os.cpu_count()``."""
    env = os.environ.get("GPUSVM_EMU_WORKERS")
    if env:
        n = int(env)
        if n < 1:
            raise ValueError(f"GPUSVM_EMU_WORKERS must be >= 1, got {env!r}")
        return n
    return os.cpu_count() or 1


def _compiler():
    return os.environ.get("GPUSVM_EMU_CXX", "g++")


def find_compiler():
    """Absolute path of ``$GPUSVM_EMU_CXX`` (default ``g++``), or None when not found."""
    return shutil.which(_compiler())


@functools.lru_cache(maxsize=None)
def _compiler_id(cxx):
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                             env=_clean_env(), check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise EmulatorBuildError(f"cannot run the host compiler {cxx!r}: {exc}") from exc
    return out.splitlines()[0] if out else cxx


def _clean_env():
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}      # never the compiler under TSAN


# ---------------------------------------------------------------------------- source scanning
_LEXEME = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def _strip(src):
    """Blank comments and literals (keeping ``"C"`` and all offsets and newlines)."""
    def blank(m):
        t = m.group(0)
        if t == '"C"':
            return t
        keep = t[0] if t[0] in "\"'" else ""
        body = re.sub(r"[^\n]", " ", t[len(keep):len(t) - len(keep)] if keep else t)
        return keep + body + keep
    return _LEXEME.sub(blank, src)


_ARG_MACROS = {"__launch_bounds__", "__attribute__", "__align__", "__declspec", "alignas"}
_IDENT = re.compile(r"[A-Za-z_]\w*")
_SPACE = re.compile(r"[ \t\r\n]*")
_SPACE_OR_DECLARATOR = re.compile(r"[ \t\r\n*&]*")


def _skip_parens(text, i):
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _decl_name(text, i):
    """Name of the function declared from offset i and the specifiers before it."""
    specs = []
    while i < len(text):
        m = _IDENT.match(text, _SPACE_OR_DECLARATOR.match(text, i).end())
        if not m:
            return None, specs
        word, i = m.group(0), m.end()
        j = _SPACE.match(text, i).end()
        if j < len(text) and text[j] == "(":
            if word in _ARG_MACROS:
                i = _skip_parens(text, j)
                specs.append(word)
                continue
            return word, specs
        specs.append(word)
    return None, specs


def _statement_start(text, pos):
    return max(text.rfind(";", 0, pos), text.rfind("{", 0, pos), text.rfind("}", 0, pos)) + 1


def _brace_kinds(text):
    """The braces as (offset, char, kind), kind "ns", "externC" or "code"."""
    out = []
    for m in re.finditer(r"[{}]", text):
        kind = "code"
        if m.group(0) == "{":
            head = text[_statement_start(text, m.start()):m.start()]
            if re.search(r"\bnamespace\b[^()]*$", head) or re.search(r'\bextern\s*"C"\s*$', head):
                kind = "externC" if "extern" in head else "ns"
        out.append((m.start(), m.group(0), kind))
    return out


def _context(braces, pos):
    stack = []
    for off, ch, kind in braces:
        if off >= pos:
            break
        if ch == "{":
            stack.append(kind)
        elif stack:
            stack.pop()
    return stack


def _find_kernels(text):
    """Names of the ``extern "C" __global__`` kernels in stripped source text."""
    names = []
    braces = _brace_kinds(text)
    for m in re.finditer(r'\bextern\s*"C"', text):
        if text[m.end():].lstrip().startswith("{"):
            continue
        name, specs = _decl_name(text, m.end())
        if name and "__global__" in specs:
            names.append(name)
    for m in re.finditer(r"\b__global__\b", text):
        ctx = _context(braces, m.start())
        if "externC" not in ctx or "code" in ctx:
            continue
        if re.search(r"\btemplate\b|\bextern\b", text[_statement_start(text, m.start()):m.start()]):
            continue
        name, _ = _decl_name(text, m.end())
        if name:
            names.append(name)
    return list(dict.fromkeys(names))


_EXTERN_SHARED = re.compile(
    r"\bextern\b(?P<pre>[^;{}]*?)\b__shared__\b(?P<post>[^;{}]*?)\b(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;")


def _rewrite_extern_shared(src, text):
    """Turn ``extern __shared__ T name[];`` into a pointer to the worker's dynamic buffer
    (a local constant in a function, a ``static thread_local`` at namespace scope)."""
    braces = _brace_kinds(text)
    pieces, last = [], 0
    for m in _EXTERN_SHARED.finditer(text):
        ctype = " ".join((m.group("pre") + " " + m.group("post")).split())
        ctype = re.sub(r"\b__align__\s*\(\s*\w+\s*\)", "", ctype).strip() or "unsigned char"
        storage = "" if "code" in _context(braces, m.start()) else "static thread_local "
        repl = (f"{storage}{ctype}* const {m.group('name')} = "
                f"reinterpret_cast<{ctype}*>(::gpusvm_emu::dynamic_shared());")
        pieces += [src[last:m.start()], repl + "\n" * m.group(0).count("\n")]
        last = m.end()
    pieces.append(src[last:])
    return "".join(pieces)


def _local_includes(src, dirs, seen=None, depth=0):
    """Contents of ``#include "..."`` files found in dirs (recursively), for the cache key."""
    seen = set() if seen is None else seen
    out = []
    if depth > 16:
        return out
    for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', src, re.M):
        for d in dirs:
            p = (Path(d) / inc).resolve()
            if p.is_file():
                if p not in seen:
                    seen.add(p)
                    text = p.read_text(errors="replace")
                    out.append(f"{p}\n{text}")
                    out.extend(_local_includes(text, [p.parent, *dirs], seen, depth + 1))
                break
    return out


# ---------------------------------------------------------------------------- options
_IGNORED_PREFIXES = (
    "-std", "--std", "-ftz", "--ftz", "-prec-div", "--prec-div", "-prec-sqrt", "--prec-sqrt",
    "-fmad", "--fmad", "-use_fast_math", "--use_fast_math", "-arch", "--gpu-architecture",
    "-lineinfo", "--generate-line-info", "-G", "--device-debug", "-rdc", "--relocatable-device-code",
    "-dlto", "--dlink-time-opt", "-maxrregcount", "--maxrregcount", "-restrict", "--restrict",
    "-default-device", "--device-as-default-execution-space", "-extra-device-vectorization",
    "--extra-device-vectorization", "-dopt", "--dopt", "-w", "--disable-warnings", "-Werror",
    "-builtin", "--builtin", "-minimal", "--minimal", "-time", "--time", "-split-compile",
    "--split-compile", "-fdevice-syntax-only", "-ewp", "--extensible-whole-program",
    "-no-source-include", "--no-source-include", "-lto", "-opt-info", "-jump-table-density",
    "-Xptxas", "--ptxas-options", "-diag-", "--diag-", "-pch", "--pch", "-create-pch",
    "-use-pch", "-pch-dir", "-instantiation-dir",
)
_VALUE_OPTIONS = {"-D": "-D", "--define-macro": "-D", "-U": "-U", "--undefine-macro": "-U",
                  "-I": "-I", "--include-path": "-I"}


def _parse_options(options):
    """Split cupy-style options into g++ preprocessor flags and include dirs; NVRTC-only
    ones are dropped."""
    opts = [options] if isinstance(options, str) else list(options)
    flags, includes = [], []
    i = 0
    while i < len(opts):
        opt = opts[i]
        if not isinstance(opt, str):
            raise TypeError(f"options must be strings, got {opt!r}")
        i += 1
        name, eq, value = opt.partition("=")
        if opt in _VALUE_OPTIONS:
            if i == len(opts):
                raise ValueError(f"option {opt} needs a value")
            flag, value = _VALUE_OPTIONS[opt], opts[i]
            i += 1
        elif eq and name in ("--define-macro", "--undefine-macro", "--include-path"):
            flag = _VALUE_OPTIONS[name]
        elif opt.startswith(("-D", "-U", "-I")):
            flag, value = opt[:2], opt[2:]
        else:
            if not opt.startswith(_IGNORED_PREFIXES):
                warnings.warn(f"option {opt!r} is ignored by the CPU kernel emulator", RuntimeWarning,
                              stacklevel=4)
            continue
        if flag == "-I":
            includes.append(value)
        else:
            flags.append(flag + value)
    return flags, includes


# ---------------------------------------------------------------------------- build
class _Spec:
    """Everything that determines one emulated shared object."""

    def __init__(self, code, path, name_expressions, options, tsan, include_dirs):
        if (code is None) == (path is None):
            raise TypeError("give exactly one of code= and path=")
        if path is not None:
            path = Path(path).resolve()
            src, src_name, dirs, stem = path.read_text(), str(path), [str(path.parent)], path.stem
        else:
            if not isinstance(code, str):
                raise TypeError(f"code must be a str, got {type(code).__name__}")
            src, dirs, stem = code, [], "emulated"
            src_name = f"emulated_{hashlib.sha256(code.encode()).hexdigest()[:12]}.cu"
        if isinstance(name_expressions, str):
            name_expressions = (name_expressions,)
        self.name_expressions = tuple(" ".join(e.split()) for e in name_expressions)
        defines, opt_includes = _parse_options(options)
        dirs += [str(Path(d).resolve()) for d in (*include_dirs, *opt_includes)]
        self.tsan = bool(tsan)
        text = _strip(src)
        self.kernels = _find_kernels(text)
        if not self.kernels and not self.name_expressions:
            warnings.warn(f'{src_name}: no extern "C" __global__ kernel found and no name_expressions given',
                          RuntimeWarning, stacklevel=3)
        body = _rewrite_extern_shared(src, text)
        self.names = (*self.kernels, *(e for e in self.name_expressions if e not in self.kernels))
        reg = ",\n        ".join(f'gpusvm_emu::make_entry("{n}", &{n})' for n in self.names)
        self.cpp = (
            "// generated by gpusvm_emulator: cuda_emu.h + kernel source + kernel table\n"
            f'#include "{_HEADER}"\n'
            f'#line 1 "{src_name}"\n'
            f"{body}\n"
            '#line 1 "gpusvm_emulator_kernel_table.cpp"\n'
            "static const std::vector<gpusvm_emu::KernelEntry>& gpusvm_emu_kernel_table() {\n"
            "    static const std::vector<gpusvm_emu::KernelEntry> table = {\n"
            f"        {reg}\n"
            "    };\n"
            "    return table;\n"
            "}\n"
        )
        self.cxx = _compiler()
        self.flags = [*_COMMON_FLAGS, *(_TSAN_FLAGS if self.tsan else _PLAIN_FLAGS),
                      *defines, *(f"-I{d}" for d in dirs)]
        h = hashlib.sha256()
        for part in (_ABI, _HEADER.read_text(), self.cpp, "\0".join(self.flags),
                     self.cxx, _compiler_id(self.cxx), "tsan" if self.tsan else "plain",
                     *_local_includes(src, dirs)):
            h.update(part.encode())
            h.update(b"\0")
        self.key = h.hexdigest()
        self.so_path = cache_dir() / f"{stem}-{self.key[:32]}{'-tsan' if self.tsan else ''}.so"
        self.src_name = src_name


_build_locks = {}
_build_locks_guard = threading.Lock()


def _ensure_built(spec):
    """Build spec's shared object unless cached; return (path, seconds spent, compiler log)."""
    if spec.so_path.exists():
        return spec.so_path, 0.0, ""
    with _build_locks_guard:
        lock = _build_locks.setdefault(spec.so_path, threading.Lock())
    with lock:
        if spec.so_path.exists():
            return spec.so_path, 0.0, ""
        t0 = time.perf_counter()
        spec.so_path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="gpusvm-emu-") as td:
            cpp = Path(td) / (spec.so_path.stem + ".cpp")
            cpp.write_text(spec.cpp)
            fd, tmp = tempfile.mkstemp(dir=spec.so_path.parent, prefix=spec.so_path.stem + ".",
                                       suffix=".tmp")
            os.close(fd)
            cmd = [spec.cxx, *spec.flags, "-o", tmp, str(cpp)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=td, env=_clean_env())
            except OSError as exc:
                os.unlink(tmp)
                raise EmulatorBuildError(f"cannot run {spec.cxx!r}: {exc}") from exc
            log = proc.stdout + proc.stderr
            if proc.returncode != 0:
                os.unlink(tmp)
                raise EmulatorBuildError(
                    f"compiling {spec.src_name} for the CPU emulator failed "
                    f"(exit {proc.returncode}):\n{log}\ncommand: {' '.join(cmd)}")
            os.replace(tmp, spec.so_path)   # atomic: parallel builders agree
        return spec.so_path, time.perf_counter() - t0, log


def _tsan_loaded():
    try:
        with open("/proc/self/maps") as fh:
            return "libtsan" in fh.read()
    except OSError:
        return False


_loaded = {}
_load_lock = threading.Lock()
_UINTS = ctypes.POINTER(ctypes.c_uint)
_ERR = (ctypes.c_char_p, ctypes.c_size_t)       # message buffer and its size
#: entry points of a built module: name -> (restype, argtypes)
_ENTRY_POINTS = {
    "gpusvm_emu_num_kernels": (ctypes.c_int, None),
    "gpusvm_emu_kernel_name": (ctypes.c_char_p, [ctypes.c_int]),
    "gpusvm_emu_kernel_signature": (ctypes.c_char_p, [ctypes.c_int]),
    "gpusvm_emu_launch": (ctypes.c_int, [ctypes.c_int, _UINTS, _UINTS, ctypes.c_ulonglong,
                                         ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, *_ERR]),
    "gpusvm_emu_replay": (ctypes.c_int, [
        ctypes.c_int, ctypes.POINTER(ctypes.c_int), _UINTS, _UINTS, ctypes.POINTER(ctypes.c_ulonglong),
        ctypes.POINTER(ctypes.c_void_p), ctypes.c_longlong, ctypes.c_int, *_ERR]),
}


def _load(so_path):
    with _load_lock:
        lib = _loaded.get(so_path)
        if lib is None:
            lib = ctypes.CDLL(str(so_path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
            for name, (restype, argtypes) in _ENTRY_POINTS.items():
                getattr(lib, name).restype = restype
                if argtypes is not None:
                    getattr(lib, name).argtypes = argtypes
            _loaded[so_path] = lib
        return lib


# ---------------------------------------------------------------------------- parameters and arguments
_CTYPE_DTYPES = {ctype: np.dtype(t) for t, ctypes_ in (
    (np.float32, ("float",)), (np.float64, ("double",)),
    (np.int32, ("int",)), (np.uint32, ("unsigned int", "unsigned")),
    (np.int64, ("long int", "long", "long long int", "long long")),
    (np.uint64, ("long unsigned int", "unsigned long", "long long unsigned int", "unsigned long long")),
    (np.int16, ("short int", "short")), (np.uint16, ("short unsigned int", "unsigned short")),
    (np.int8, ("signed char", "char")), (np.uint8, ("unsigned char",)), (np.bool_, ("bool",)),
) for ctype in ctypes_}
_BYTE_TYPES = {"char", "signed char", "unsigned char"}


class _Param:
    """One kernel parameter, parsed from the signature the shared object reports."""

    def __init__(self, ctype, size):
        ctype = " ".join(re.sub(r"\b__restrict(__)?\b", " ", ctype).split())
        self.ctype = ctype = ctype.replace(" *", "*")
        self.size = size
        self.pointer = ctype.endswith("*")
        base = ctype[:-1] if self.pointer else ctype
        self.base = " ".join(w for w in base.split() if w not in ("const", "volatile"))
        self.dtype = _CTYPE_DTYPES.get(self.base)

    def need(self):
        if self.dtype is None:
            return f"an array (any dtype) for {self.ctype!r}" if self.pointer else \
                f"a NumPy scalar of {self.size} bytes for {self.ctype!r}"
        if self.pointer:
            if self.base in _BYTE_TYPES:
                return f"a 1-byte array for {self.ctype!r}"
            return f"a {self.dtype.name} array for {self.ctype!r}"
        return f"np.{self.dtype.name} for {self.ctype!r}"


def _canon(name):
    """Lookup key of a kernel name: ``"k<float, 4>"`` and ``"k<float,4>"`` are the same."""
    return re.sub(r"\s*([<>,()*&])\s*", r"\1", " ".join(str(name).split()))


def _dims(value, what):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        dims = (int(value),)
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        dims = tuple(int(v) for v in value)
    else:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = dims + (1,) * (3 - len(dims))
    if any(d < 0 for d in dims) or any(d >= 2**32 for d in dims):
        raise ValueError(f"invalid {what} {dims}")
    return dims


def _run(module, entry_point, *args):
    """Call a launching entry point of module's shared object; raise what it reports."""
    err = ctypes.create_string_buffer(16384)
    rc = getattr(module._lib, entry_point)(*args, module._workers or default_workers(), err, len(err))
    if rc == 1:
        raise RuntimeError(err.value.decode(errors="replace"))
    if rc != 0:
        raise ValueError(err.value.decode(errors="replace"))


class EmulatedKernel:
    """A kernel of an :class:`EmulatedModule` (from :meth:`~EmulatedModule.get_function`),
    called like ``cupy.RawKernel``; ``name`` is its name or name expression, ``signature`` the
    parameter types the compiler deduced, e.g. ``"(const float*, int, float*)"``.
    """

    def __init__(self, module, index, name, signature):
        self._module = module
        self._index = index
        self.name = name
        items = [item.rpartition("|") for item in signature.split(";")] if signature else []
        self._params = [_Param(ctype, int(size)) for ctype, _, size in items]
        self.signature = "(" + ", ".join(p.ctype for p in self._params) + ")"

    def __repr__(self):
        return f"<EmulatedKernel {self.name}{self.signature}>"

    def _arg_error(self, i, p, a, why=None):
        got = why or (f"{type(a).__module__}.{type(a).__name__}"
                      + (f" of dtype {a.dtype}" if isinstance(a, (np.ndarray, np.generic)) else ""))
        return TypeError(f"{self.name}{self.signature}: argument {i} needs {p.need()}, got {got}")

    def _convert(self, args):
        """The checked arguments as a ``void*[]`` and the objects it points into."""
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"args must be a tuple of arguments, got {type(args).__name__}")
        if len(args) != len(self._params):
            raise TypeError(f"{self.name}{self.signature} takes {len(self._params)} arguments, "
                            f"{len(args)} given")
        argv = (ctypes.c_void_p * max(len(args), 1))()
        keep = []
        for i, (a, p) in enumerate(zip(args, self._params)):
            if p.pointer:
                if not isinstance(a, np.ndarray):
                    scalar = isinstance(a, (bool, int, float, complex, np.generic))
                    raise self._arg_error(i, p, a, f"the scalar {a!r} for a pointer parameter"
                                          if scalar else None)
                if not a.flags.c_contiguous:
                    raise self._arg_error(i, p, a, "a non-C-contiguous array "
                                                   "(pass np.ascontiguousarray(...))")
                if p.dtype is not None and not (
                        a.dtype.itemsize == 1 if p.base in _BYTE_TYPES else a.dtype == p.dtype):
                    raise self._arg_error(i, p, a)
                holder = ctypes.c_void_p(a.ctypes.data)
                argv[i] = ctypes.addressof(holder)
            else:
                if not isinstance(a, np.generic):
                    if isinstance(a, (bool, int, float, complex)):
                        hint = f"np.{p.dtype.name}" if p.dtype is not None else "a NumPy scalar"
                        raise self._arg_error(
                            i, p, a, f"the Python {type(a).__name__} {a!r}: pass {hint}(...) explicitly "
                                     f"(CuPy would pass a Python {type(a).__name__} as 8 bytes)")
                    if isinstance(a, np.ndarray):
                        raise self._arg_error(i, p, a, "an array for a scalar parameter")
                    raise self._arg_error(i, p, a)
                if p.dtype is not None:
                    ok = (a.dtype.kind in "iu" and a.dtype.itemsize == 1) if p.base == "char" \
                        else a.dtype == p.dtype
                else:
                    ok = a.dtype.itemsize == p.size
                if not ok:
                    raise self._arg_error(i, p, a)
                holder = np.array(a)
                argv[i] = holder.ctypes.data
            keep.append(holder)
        return argv, keep

    def __call__(self, grid, block, args, *, shared_mem=0, enable_cooperative_groups=False):
        """Launch the kernel on ``grid`` x ``block`` (up to 3 dimensions, at most 1024 threads a
        block) and wait for it.

        ``args``: C-contiguous NumPy arrays for pointer parameters (dtype of the pointee) and NumPy
        scalars of exactly the parameter's type for the others (Python scalars are refused);
        ``shared_mem``: bytes of ``extern __shared__`` per block. Raises TypeError for wrong
        arguments, ValueError for an invalid configuration, NotImplementedError for a cooperative
        launch and RuntimeError, saying where, when the kernel deadlocked, trapped or misused a
        warp intrinsic.
        """
        if enable_cooperative_groups:
            raise NotImplementedError("cooperative launches are not emulated")
        g = _dims(grid, "grid")
        b = _dims(block, "block")
        if 0 in g:
            raise ValueError(f"grid {g} has a zero dimension")
        if g[0] > 2**31 - 1 or g[1] > 65535 or g[2] > 65535:
            raise ValueError(f"grid {g} exceeds CUDA's limits (2**31-1, 65535, 65535)")
        if 0 in b or b[0] * b[1] * b[2] > 1024 or b[2] > 64:
            raise ValueError(f"block {b} is invalid: 1 to 1024 threads per block, z at most 64")
        shared_mem = int(shared_mem)
        if not 0 <= shared_mem <= _MAX_DYNAMIC_SHARED:
            raise ValueError(f"shared_mem={shared_mem} is outside [0, {_MAX_DYNAMIC_SHARED}]")
        argv, keep = self._convert(args)
        counting = atomic_counts.active()
        if counting:
            atomic_counts.before(self._module._lib)
        _run(self._module, "gpusvm_emu_launch", self._index, (ctypes.c_uint * 3)(*g),
             (ctypes.c_uint * 3)(*b), shared_mem, argv)
        if counting:
            atomic_counts.after(self._module._lib, self.name, g, args)
        del keep


class EmulatedGraph:
    """A recorded sequence of launches of ``module``'s kernels, replayed without Python between.

    The emulator's counterpart of a captured CUDA graph: :meth:`add` checks and converts each
    launch's arguments once (arrays are bound by address: a replay reads and writes their
    contents at that time); :meth:`launch` runs the whole sequence ``times`` times in order in
    one call into the shared object. ``launches`` counts the launches recorded.
    """

    def __init__(self, module):
        self._module = module
        self._entries = []        # (index, grid, block, shared, argv, keep)
        self._packed = None

    @property
    def launches(self):
        return len(self._entries)

    def add(self, kernel, grid, block, args, *, shared_mem=0):
        """Record one launch of ``kernel`` (an :class:`EmulatedKernel` of the same module),
        checked as :meth:`EmulatedKernel.__call__` checks it. The arrays must stay alive and in
        place as long as the graph is replayed (the graph keeps references).
        """
        if kernel._module is not self._module:
            raise ValueError(f"{kernel.name} belongs to another module")
        g = _dims(grid, "grid")
        b = _dims(block, "block")
        if 0 in g or 0 in b or b[0] * b[1] * b[2] > 1024:
            raise ValueError(f"invalid launch configuration grid {g}, block {b}")
        argv, keep = kernel._convert(args)
        self._entries.append((kernel._index, g, b, int(shared_mem), argv, (keep, args)))
        self._packed = None

    def launch(self, times=1):
        """Replay the recorded launches ``times`` times (synchronous); a failed launch raises
        RuntimeError naming the repetition and the launch."""
        times = int(times)
        if times <= 0 or not self._entries:
            return
        if atomic_counts.active():                     # launch by launch, each one counted
            lib = self._module._lib
            atomic_counts.before(lib)
            for _ in range(times):
                for index, g, b, shared, argv, (_, args) in self._entries:
                    _run(self._module, "gpusvm_emu_launch", index, (ctypes.c_uint * 3)(*g),
                         (ctypes.c_uint * 3)(*b), shared, argv)
                    atomic_counts.after(lib, self._module.kernel_names[index], g, args)
            return
        if self._packed is None:
            e = self._entries
            n = len(e)
            self._packed = (n, (ctypes.c_int * n)(*[x[0] for x in e]),
                            (ctypes.c_uint * (3 * n))(*[v for x in e for v in x[1]]),
                            (ctypes.c_uint * (3 * n))(*[v for x in e for v in x[2]]),
                            (ctypes.c_ulonglong * n)(*[x[3] for x in e]),
                            (ctypes.c_void_p * n)(*[ctypes.cast(x[4], ctypes.c_void_p) for x in e]))
        _run(self._module, "gpusvm_emu_replay", *self._packed, times)


class EmulatedModule:
    """CUDA source compiled for the CPU emulator; mirrors ``cupy.RawModule``.

    Parameters
    ----------
    code, path : str, optional
        CUDA source text or a ``.cu`` file (its directory on the include path): exactly one.
    name_expressions : sequence of str, optional
        Template kernel instances to register, e.g. ``("gpusvm_row_sq_norms<32,double>",)``; every
        ``extern "C" __global__`` kernel is registered anyway.
    options : sequence of str, optional
        NVRTC-style options: ``-DNAME[=VALUE]``, ``-UNAME``, ``-I<dir>`` honoured, NVRTC-only
        ones ignored.
    tsan : bool, optional
        Build with ThreadSanitizer; such a module loads only into a process started with
        libtsan preloaded (``tests/tsan_runner.py`` starts one).
    include_dirs : sequence of path, optional
    workers : int, optional
        OS worker threads per launch; default :func:`default_workers` at each launch.

    Raises ``EmulatorBuildError`` (with the compiler's output) when the build fails. Attributes:
    ``kernel_names`` (registered kernels, in source order, then name expressions), ``so_path``,
    ``build_seconds`` (0.0 on a cache hit) and ``build_log``. Builds are cached under
    :func:`cache_dir`, keyed by a SHA-256 of the header, the sources (local includes too), the
    options, the compiler version and the tsan flag; parallel processes build to temporary files
    renamed atomically.
    """

    def __init__(self, code=None, path=None, name_expressions=(), options=(), tsan=False,
                 include_dirs=(), *, workers=None):
        if workers is not None and int(workers) < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._workers = None if workers is None else int(workers)
        spec = _Spec(code, path, name_expressions, options, tsan, include_dirs)
        self.so_path, self.build_seconds, self.build_log = _ensure_built(spec)
        if spec.tsan and not _tsan_loaded():
            raise RuntimeError(
                "a tsan=True module needs the ThreadSanitizer runtime preloaded into the process "
                "(LD_PRELOAD=$(g++ -print-file-name=libtsan.so) on the real python binary); "
                "tests/tsan_runner.py's check_launches() runs kernels under TSAN")
        self._lib = _load(self.so_path)
        self._kernels = {}
        names = []
        for i in range(self._lib.gpusvm_emu_num_kernels()):
            name = self._lib.gpusvm_emu_kernel_name(i).decode()
            sig = self._lib.gpusvm_emu_kernel_signature(i).decode()
            self._kernels[_canon(name)] = EmulatedKernel(self, i, name, sig)
            names.append(name)
        self.kernel_names = tuple(names)

    def get_function(self, name):
        """The kernel ``name`` (an ``extern "C"`` name or a name expression, spaces
        around ``<>,`` ignored); KeyError listing the registered ones otherwise.
        """
        try:
            return self._kernels[_canon(name)]
        except KeyError:
            raise KeyError(f"no kernel {name!r} in {self.so_path.name}; "
                           f"registered: {', '.join(self.kernel_names)}") from None

    def graph(self):
        """A new, empty :class:`EmulatedGraph` of this module's kernels."""
        return EmulatedGraph(self)

    def __repr__(self):
        return f"<EmulatedModule {self.so_path.name} kernels={list(self.kernel_names)}>"
