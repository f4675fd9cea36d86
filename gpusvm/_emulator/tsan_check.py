"""Command line: run emulated kernel launches under ThreadSanitizer.

Two forms::

    python -m gpusvm._emulator.tsan_check FILE.cu --kernel NAME --grid 8 --block 128 \\
        --npz inputs.npz [--args x,y,n] [--shared-mem 0] [--name-expression 'k<32>'] \\
        [--option -DFOO=1] [--workers 2]

runs one launch whose arguments are the arrays of ``inputs.npz`` (``arr_0``,
``arr_1``, ... or the keys named by ``--args``; 0-d arrays become NumPy
scalars) and prints the TSAN output; the exit status is 66 when TSAN reported
something, 0 otherwise. It re-runs itself with libtsan preloaded through
:func:`gpusvm._emulator.tsan.check_launches`.

``--job JOB.pkl --out OUT.pkl`` is the internal form that
:func:`~gpusvm._emulator.tsan.check_launches` runs inside the preloaded
subprocess, as a script path (``python .../tsan_check.py``) so that the
package ``gpusvm/__init__.py`` and its imports are not loaded under TSAN.
"""

from __future__ import annotations

import argparse
import pickle
import sys


_FAILED = "gpusvm tsan_check: failed"


def _run_job(job_path, out_path):
    from . import EmulatedModule, _tsan_loaded

    if not _tsan_loaded():
        print("gpusvm tsan_check: the ThreadSanitizer runtime is not preloaded "
              "(run through gpusvm._emulator.tsan.check_launches)", file=sys.stderr)
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
    print(f"gpusvm tsan_check: {len(done)} launch(es) done", flush=True)
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
    ap = argparse.ArgumentParser(prog="python -m gpusvm._emulator.tsan_check",
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

    import numpy as np

    from .tsan import check_launches

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
    print(f"gpusvm tsan_check: {rep.races} data race report(s), {rep.warnings} TSAN warning(s)")
    return 66 if rep.warnings else 0


def _bootstrap():
    """Import this package without running ``gpusvm/__init__.py`` (slow under TSAN)."""
    import types
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if "gpusvm" not in sys.modules:
        stub = types.ModuleType("gpusvm")
        stub.__path__ = [str(root)]
        sys.modules["gpusvm"] = stub
    from gpusvm._emulator import tsan_check

    return tsan_check.main()


if __name__ == "__main__":
    sys.exit(_bootstrap() if not __package__ else main())
