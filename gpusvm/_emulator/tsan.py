"""Run emulated kernels under ThreadSanitizer.

A module built with ``tsan=True`` must be loaded into a process that has the
TSAN runtime preloaded, so :func:`check_launches` builds the module here (a
compile error raises at once), pickles the launches to a temporary file and
replays them in a fresh ``python .../gpusvm/_emulator/tsan_check.py`` subprocess
started on the real interpreter (``sys.executable``) with
``LD_PRELOAD=$(g++ -print-file-name=libtsan.so)`` and
``TSAN_OPTIONS=halt_on_error=0 exitcode=66 report_signal_unsafe=0``. The
report counts ``WARNING: ThreadSanitizer: data race`` blocks in its output.

Under TSAN each emulated CUDA thread is a TSAN fiber; barriers, warp
intrinsics and block boundaries publish explicit happens-before edges, and
atomics are C++ atomics, so correct kernels are silent. At least two workers
run, because blocks that one worker runs one after the other are ordered (it
reuses their shared memory): races between blocks are seen when the blocks
ran on different workers, which with many blocks is practically always.

Cost: the subprocess starts in about 2 s; every emulated thread slot is a TSAN
fiber, created once per worker (about 1.5 ms each, so the first launch with
1024-thread blocks takes seconds) and a barrier costs a few microseconds per
thread. Keep TSAN launches small: a few blocks of the real block size.

Example
-------
>>> from gpusvm._emulator.tsan import check_launches
>>> rep = check_launches("tests/emulator_kernels/racy.cu",
...                      [("scatter_racy", 8, 128, (idx, c, v, np.int32(n)), 0)])
>>> rep.races > 0
True
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import _clean_env, _ensure_built, _Spec
from .tsan_check import _FAILED

__all__ = ["TsanReport", "check_launches", "tsan_runtime"]

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
    from . import _compiler

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
        as for :meth:`gpusvm._emulator.EmulatedKernel.__call__` (NumPy arrays
        and NumPy scalars, picklable).
    name_expressions, options, include_dirs
        As for :class:`gpusvm._emulator.EmulatedModule`.
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
    env["GPUSVM_EMU_WORKERS"] = str(max(2, int(workers)))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    with tempfile.TemporaryDirectory(prefix="gpusvm-tsan-") as td:
        job_path = Path(td) / "job.pkl"
        out_path = Path(td) / "out.pkl"
        with open(job_path, "wb") as fh:
            pickle.dump(job, fh, protocol=pickle.HIGHEST_PROTOCOL)
        cmd = [_real_python(), str(Path(__file__).with_name("tsan_check.py")), "--job", str(job_path),
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

