"""Run emulated kernels under ThreadSanitizer (the tests' race checker).

:func:`check_launches` builds the ``tsan=True`` module here (a compile error raises at
once), pickles the launches and replays them in a fresh ``python tests/tsan_runner.py
--job ...`` subprocess on the real interpreter with
``LD_PRELOAD=$(g++ -print-file-name=libtsan.so)`` and :data:`TSAN_OPTIONS`; the report
counts ``WARNING: ThreadSanitizer: data race`` blocks in its output.  The subprocess loads
``gpusvm_emulator`` only (gpusvm itself would be slow to import under TSAN).

Under TSAN each emulated CUDA thread is a TSAN fiber; barriers, warp intrinsics and block
boundaries publish happens-before edges and atomics are C++ atomics, so correct kernels
are silent.  At least two workers run: blocks that one worker runs in turn are ordered (it
reuses their shared memory), so races between blocks show when they ran on different
workers.  Cost: about 2 s to start, 1.5 ms per fiber (created once per worker), a few
microseconds per barrier and thread: keep launches to a few blocks of the real size.

Command line (one launch, arguments from an ``.npz``; exit status 66 when TSAN reported
something)::

    python tests/tsan_runner.py FILE.cu --kernel NAME --grid 8 --block 128 --npz args.npz \\
        [--args x,y,n] [--shared-mem 0] [--name-expression 'k<32>'] [--option -DFOO=1]
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


from gpusvm_emulator import (EmulatedModule, _clean_env, _compiler, _ensure_built, _Spec,
                             _tsan_loaded)


_FAILED = "gpusvm tsan_runner: failed"
TSAN_OPTIONS = "halt_on_error=0 exitcode=66 report_signal_unsafe=0"
_RACE = "WARNING: ThreadSanitizer: data race"


@dataclass
class TsanReport:
    """Outcome of :func:`check_launches`.

    Attributes
    ----------
    races : int
        Number of ``WARNING: ThreadSanitizer: data race`` reports.
    warnings : int
        Number of ThreadSanitizer warnings of any kind.
    output : str
        Everything the subprocess wrote (stdout, then stderr).
    returncode : int
        Exit status of the subprocess (66 when TSAN reported something).
    arrays : list
        The launches' argument tuples after the run (outputs written), in
        launch order; arrays shared between launches stay shared.
    """

    races: int
    warnings: int
    output: str
    returncode: int
    arrays: list = field(default_factory=list, repr=False)

    @property
    def ok(self):
        """bool: True when TSAN reported nothing."""
        return self.warnings == 0


def tsan_runtime():
    """Path of the compiler's ThreadSanitizer runtime.

    Returns
    -------
    str
        Absolute path of ``libtsan.so``.

    Raises
    ------
    RuntimeError
        The compiler does not know a TSAN runtime.
    """
    out = subprocess.run([_compiler(), "-print-file-name=libtsan.so"], capture_output=True,
                         text=True, env=_clean_env()).stdout.strip()
    if not out or not os.path.isabs(out) or not os.path.exists(out):
        raise RuntimeError(f"{_compiler()} has no ThreadSanitizer runtime (libtsan.so): got {out!r}")
    return os.path.realpath(out)


def _real_python():
    """sys.executable, checked to be a binary (a venv symlink is fine, a shell shim is not)."""
    with open(os.path.realpath(sys.executable), "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            raise RuntimeError(
                f"sys.executable {sys.executable!r} is not an ELF binary (a shim script?); "
                "LD_PRELOAD of libtsan needs the real python binary")
    return sys.executable


def check_launches(cu_path=None, launches=(), name_expressions=(), options=(), *, code=None,
                   include_dirs=(), workers=2, timeout=600.0):
    """Run kernel launches under ThreadSanitizer in a subprocess.

    Parameters
    ----------
    cu_path : str or os.PathLike, optional
        The ``.cu`` file (or give ``code``).
    launches : sequence of tuple
        ``(kernel_name, grid, block, args)`` or
        ``(kernel_name, grid, block, args, shared_mem)``, run in order; args
        as for :meth:`gpusvm_emulator.EmulatedKernel.__call__` (NumPy arrays
        and NumPy scalars, picklable).
    name_expressions, options, include_dirs
        As for :class:`gpusvm_emulator.EmulatedModule`.
    code : str, optional
        CUDA source text instead of ``cu_path``.
    workers : int, optional
        Worker threads in the subprocess; at least 2 are used.
    timeout : float, optional
        Seconds before the subprocess is killed.

    Returns
    -------
    TsanReport

    Raises
    ------
    EmulatorBuildError
        The source does not compile with ``-fsanitize=thread``.
    RuntimeError
        The subprocess failed for another reason than a TSAN report (a kernel
        error such as a deadlock, a crash, a missing TSAN runtime); the message
        holds its output.
    """
    spec = _Spec(code, cu_path, name_expressions, options, True, include_dirs)
    _ensure_built(spec)          # compile errors surface here, without TSAN
    norm = []
    for item in launches:
        if len(item) == 4:
            item = (*item, 0)
        if len(item) != 5:
            raise ValueError(f"a launch is (name, grid, block, args[, shared_mem]), got {item!r}")
        name, grid, block, args, shared = item
        norm.append((str(name), grid, block, tuple(args), int(shared)))
    job = {
        "code": code,
        "path": None if cu_path is None else str(Path(cu_path).resolve()),
        "name_expressions": tuple(name_expressions),
        "options": tuple(options),
        "include_dirs": tuple(str(d) for d in include_dirs),
        "launches": norm,
    }
    env = _clean_env()
    env["LD_PRELOAD"] = tsan_runtime()
    env["TSAN_OPTIONS"] = TSAN_OPTIONS
    root = str(Path(sys.modules["gpusvm_emulator"].__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["GPUSVM_EMU_WORKERS"] = str(max(2, int(workers)))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    with tempfile.TemporaryDirectory(prefix="gpusvm-tsan-") as td:
        job_path = Path(td) / "job.pkl"
        out_path = Path(td) / "out.pkl"
        with open(job_path, "wb") as fh:
            pickle.dump(job, fh, protocol=pickle.HIGHEST_PROTOCOL)
        cmd = [_real_python(), str(Path(__file__).resolve()), "--job", str(job_path),
               "--out", str(out_path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"TSAN run timed out after {timeout} s:\n{exc.stdout}\n{exc.stderr}") from exc
        output = proc.stdout + proc.stderr
        races = output.count(_RACE)
        n_warn = len(re.findall(r"WARNING: ThreadSanitizer:", output))
        failed = [ln for ln in output.splitlines() if ln.startswith(_FAILED)]
        if failed:
            raise RuntimeError(failed[0][len(_FAILED):].strip() + "\n--- TSAN subprocess output ---\n" + output)
        if proc.returncode not in (0, 66) or not out_path.exists():
            raise RuntimeError(f"TSAN subprocess failed (exit {proc.returncode}):\n{output}")
        with open(out_path, "rb") as fh:
            arrays = pickle.load(fh)
    return TsanReport(races=races, warnings=n_warn, output=output, returncode=proc.returncode,
                      arrays=arrays)


def _run_job(job_path, out_path):
    if not _tsan_loaded():
        print("gpusvm tsan_runner: the ThreadSanitizer runtime is not preloaded "
              "(run through check_launches)", file=sys.stderr)
        return 2
    with open(job_path, "rb") as fh:
        job = pickle.load(fh)
    mod = EmulatedModule(code=job["code"], path=job["path"], name_expressions=job["name_expressions"],
                         options=job["options"], tsan=True, include_dirs=job["include_dirs"])
    done = []
    for i, (name, grid, block, args, shared) in enumerate(job["launches"]):
        try:
            mod.get_function(name)(grid, block, args, shared_mem=shared)
        except (RuntimeError, TypeError, ValueError, KeyError) as exc:
            print(f"{_FAILED} launch {i} ({name}): {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 3
        done.append(args)
    if out_path:
        with open(out_path, "wb") as fh:
            pickle.dump(done, fh, protocol=pickle.HIGHEST_PROTOCOL)
    print(f"gpusvm tsan_runner: {len(done)} launch(es) done", flush=True)
    return 0


def _dims(text):
    return tuple(int(v) for v in text.split(","))


def main(argv=None):
    """Entry point; returns the exit status (see the module docstring).

    Parameters
    ----------
    argv : list of str, optional
        Arguments, default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 when TSAN was silent, 66 when it reported something, 2 on misuse.
    """
    ap = argparse.ArgumentParser(prog="python tests/tsan_runner.py",
                                 description="Run an emulated CUDA kernel under ThreadSanitizer.")
    ap.add_argument("source", nargs="?", help=".cu file")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--kernel", help="kernel name or name expression")
    ap.add_argument("--grid", type=_dims, default=(1,), help="e.g. 8 or 4,2")
    ap.add_argument("--block", type=_dims, default=(32,), help="e.g. 128 or 32,4")
    ap.add_argument("--npz", help="arguments saved with np.savez")
    ap.add_argument("--args", help="comma-separated npz keys in argument order")
    ap.add_argument("--shared-mem", type=int, default=0)
    ap.add_argument("--name-expression", action="append", default=[])
    ap.add_argument("--option", action="append", default=[])
    ap.add_argument("--workers", type=int, default=2)
    ns = ap.parse_args(argv)
    if ns.job:
        return _run_job(ns.job, ns.out)
    if not ns.source or not ns.kernel or not ns.npz:
        ap.error("FILE.cu, --kernel and --npz are required")

    with np.load(ns.npz) as data:
        keys = ns.args.split(",") if ns.args else sorted(
            data.files, key=lambda k: int(k.split("_")[1]) if k.startswith("arr_") else k)
        args = tuple(data[k][()] if data[k].ndim == 0 else np.ascontiguousarray(data[k]) for k in keys)
    names = list(ns.name_expression)
    if "<" in ns.kernel and ns.kernel not in names:
        names.append(ns.kernel)
    rep = check_launches(ns.source, [(ns.kernel, ns.grid, ns.block, args, ns.shared_mem)],
                         name_expressions=names, options=ns.option, workers=ns.workers)
    sys.stdout.write(rep.output)
    print(f"gpusvm tsan_runner: {rep.races} data race report(s), {rep.warnings} TSAN warning(s)")
    return 66 if rep.warnings else 0


if __name__ == "__main__":
    sys.exit(main())
