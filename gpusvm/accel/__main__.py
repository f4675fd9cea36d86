"""``python -m gpusvm.accel [-v] script.py [args ...]``: run a script with ``sklearn.svm.LinearSVC``
resolved to gpusvm's (``-m module`` runs a module instead, as ``python -m`` does)."""

from __future__ import annotations

import argparse
import atexit
import runpy
import sys
from pathlib import Path

from . import _enable_log, fit_counts, patch_sklearn


def main(argv=None) -> int:
    """Parse the command line, patch scikit-learn, run the script; return its exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m gpusvm.accel",
        description="Run an unmodified scikit-learn script with sklearn.svm.LinearSVC "
                    "resolved to gpusvm.LinearSVC (falling back to scikit-learn's for "
                    "parameters gpusvm cannot honour).")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log every LinearSVC fit (which implementation ran it) and a "
                             "summary at exit, on stderr")
    parser.add_argument("-m", dest="module", help="run this module as a script instead")
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    opts = parser.parse_args(argv)
    if opts.module is None and opts.script is None:
        parser.error("give a script to run (or -m module)")
    if opts.module is not None and opts.script is not None:
        opts.args = [opts.script, *opts.args]
    patch_sklearn()
    if opts.verbose:
        _enable_log()
        atexit.register(_summary)
    if opts.module is not None:
        sys.argv = [opts.module, *opts.args]
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        return 0
    path = Path(opts.script)
    if not path.is_file():
        print(f"python -m gpusvm.accel: no such script: {opts.script}", file=sys.stderr)
        return 2
    sys.argv = [opts.script, *opts.args]
    sys.path.insert(0, str(path.resolve().parent))
    runpy.run_path(str(path), run_name="__main__")
    return 0


def _summary() -> None:
    counts = fit_counts()
    print(f"gpusvm.accel: {counts['gpusvm']} LinearSVC fit(s) by gpusvm, {counts['sklearn']} by "
          "scikit-learn", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
