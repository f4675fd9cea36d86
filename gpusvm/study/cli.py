"""The ``gpusvm study`` subcommand (also ``python -m gpusvm.study``): :func:`add_cli` registers
it on the ``gpusvm`` parser, :func:`run_cli` runs it; both are called from :mod:`gpusvm.cli`."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys

from .search import METHODS

__all__ = ["add_cli", "run_cli", "parse_int_list", "parse_float_list"]

EXPERIMENTS = ("scaling", "pegasos-k", "schedules")
EXIT_INTERRUPTED = 130


def parse_int_list(text: str, option: str = "--batch-sizes") -> list[int]:
    """Parse ``"1,2,4,...,1024"`` or ``"1,10,100"`` into a list of integers.

    ``a,b,...,z`` continues the series of ``a, b`` up to ``z`` (included): geometric when ``z``
    is one of its terms (``1,2,...,16``: powers of two), else arithmetic.  A token that is not
    an integer, or a ``...`` that cannot be continued, raises ValueError naming ``option``.
    """
    tokens = iter([t.strip() for t in text.split(",") if t.strip()])
    out: list[int] = []
    for tok in tokens:
        if tok not in ("...", "…"):
            out.append(_int(tok, option))
            continue
        end = next(tokens, None)
        if len(out) < 2 or end is None:
            raise ValueError(f"{option}: '...' needs two values before it and one after it, "
                             "e.g. 1,2,4,...,1024")
        end = _int(end, option)
        out += _continue_series(out, end, option) + [end]
    return out


def _continue_series(head: list, end: int, option: str) -> list:
    """Terms after ``head`` up to ``end`` (excluded), geometric or else arithmetic."""
    a, b = head[-2], head[-1]
    if b <= a:
        raise ValueError(f"{option}: the values before '...' must increase, got {a},{b}")
    if end <= b:
        raise ValueError(f"{option}: the value after '...' must exceed {b}, got {end}")
    if a > 0 and b % a == 0:
        r, terms, nxt = b // a, [], b * (b // a)
        while nxt < end:
            terms.append(nxt)
            nxt *= r
        if nxt == end:
            return terms
    if (end - b) % (b - a) == 0:
        return list(range(b + (b - a), end, b - a))
    raise ValueError(f"{option}: {end} does not continue the series {a},{b},... "
                     "(geometric or arithmetic)")


def _int(tok: str, option: str) -> int:
    try:
        if float(tok).is_integer():
            return int(float(tok))
    except ValueError:
        pass
    raise ValueError(f"{option}: {tok!r} is not an integer")


def parse_float_list(text: str, option: str) -> list[float]:
    """Parse ``"0.001,0.01,0.1"`` into floats."""
    out = []
    for tok in filter(None, (t.strip() for t in text.split(","))):
        try:
            out.append(float(tok))
        except ValueError:
            raise ValueError(f"{option}: {tok!r} is not a number") from None
    return out


def add_cli(subparsers) -> None:
    """Register the ``study`` subcommand (``func=run_cli``) on ``parser.add_subparsers()``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
    """
    p = subparsers.add_parser(
        "study", help="batch-size scaling study (Takáč et al. 2013, Fig. 1) and the Pegasos "
                      "paper's experiments, with tables, plots and resumable runs",
        description="Measure, for each method, batch size b and seed, the first iteration T at "
                    "which P(w_T) - P* <= eps (Takáč, Bijral, Richtárik & Srebro 2013, Fig. 1), "
                    "beside the theory (sigma^2, beta_b/b, predicted speedup b/beta_b); or run "
                    "the Pegasos paper's experiments (--experiment pegasos-k: Fig. 3; "
                    "--experiment schedules: Fig. 2).  Writes results.csv, results.json, "
                    "results.md and PNG plots to --out; finished cells are kept in OUT/cells and "
                    "a rerun of the same command resumes.  Rows are scaled to unit norm unless "
                    "--no-normalize (the theory assumes max ||x_i|| <= 1).")
    p.add_argument("data", metavar="DATA", help="training data, svmlight/LIBSVM (.gz/.bz2 too)")
    p.add_argument("--experiment", choices=EXPERIMENTS, default="scaling",
                   help="scaling (default), pegasos-k or schedules")
    p.add_argument("--lam", type=float, required=True, help="regularisation lambda > 0")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--eps", type=float, default=1e-3,
                   help="scaling: target suboptimality P - P* (default 1e-3)")
    p.add_argument("--batch-sizes", metavar="LIST", help="e.g. 1,2,4,...,16384 (default: powers "
                   "of 2 up to min(16384, n); pegasos-k: up to 1024)")
    p.add_argument("--methods", default=",".join(METHODS), help="scaling: comma-separated subset "
                   "of pegasos, sdca-naive, sdca-safe, sdca-aggressive (default: all)")
    p.add_argument("--seeds", help="number of seeds (0..k-1) or a comma-separated list (default 3; "
                                   "schedules: 1)")
    p.add_argument("--backend", default="numpy", help="numpy (default), cupy, emulated or auto")
    p.add_argument("--n-features", type=int, help="number of features (default: from the file)")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=True,
                   help="scale rows to unit L2 norm (default: yes)")
    p.add_argument("--name", help="data set name in the outputs")
    p.add_argument("--max-epochs", type=float, default=100.0,
                   help="scaling: cap on the data accesses b*T per cell, in passes (default 100)")
    p.add_argument("--max-iter", type=int, help="scaling: cap on T per cell")
    p.add_argument("--max-seconds", type=float,
                   help="scaling: wall-clock cap per cell (machine dependent; default none)")
    p.add_argument("--pegasos-output", choices=("tail", "last"), default="tail",
                   help="scaling: Pegasos iterate evaluated, the tail average of Takáč et al.'s "
                        "Theorem 1 (default) or the last one")
    p.add_argument("--pstar-gap", type=float, default=1e-8,
                   help="duality gap to which P* is certified (default 1e-8)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--T-values", dest="T_values", help="pegasos-k: fixed T values (default 1250,31250)")
    p.add_argument("--kT-values", dest="kT_values",
                   help="pegasos-k: fixed kT values (default 10000,100000,1000000)")
    p.add_argument("--T-max", type=int, default=1_000_000, dest="T_max",
                   help="schedules: iterations per run (default 1000000)")
    p.add_argument("--etas", help="schedules: fixed step sizes (default 0.001,0.01,0.1,1,10)")
    p.add_argument("--norma-p", type=float,
                   help="schedules: NORMA's p (default 0.5 (2 + 0.5/sqrt(T_max))^(1/2))")
    p.add_argument("--test", metavar="FILE", help="schedules: test data for the test hinge loss")
    p.add_argument("--plots", action=argparse.BooleanOptionalAction, default=None,
                   help="write the PNG plots (needs matplotlib; default: when it is installed)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction,
                   help="progress bar over the cells on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=run_cli)


def _parsed(text, parse, option, default):
    return default if text is None else parse(text, option)


def _seeds(text, default):
    if text is None:
        return default
    vals = parse_int_list(text, "--seeds")
    return vals[0] if len(vals) == 1 and "," not in text else vals


def command_line(args) -> str:
    """The ``gpusvm study ...`` command equivalent to ``args`` (recorded in the outputs)."""
    parts = ["gpusvm", "study", args.data, "--experiment", args.experiment, "--lam",
             repr(args.lam), "--out", args.out]
    opts = [("--eps", args.eps if args.experiment == "scaling" else None),
            ("--batch-sizes", args.batch_sizes), ("--seeds", args.seeds),
            ("--backend", args.backend), ("--n-features", args.n_features),
            ("--name", args.name), ("--pstar-gap", args.pstar_gap), ("--jobs", args.jobs)]
    opts += {"scaling": [("--methods", args.methods), ("--max-epochs", args.max_epochs),
                         ("--max-iter", args.max_iter), ("--max-seconds", args.max_seconds),
                         ("--pegasos-output", args.pegasos_output)],
             "pegasos-k": [("--T-values", args.T_values), ("--kT-values", args.kT_values)],
             "schedules": [("--T-max", args.T_max), ("--etas", args.etas),
                           ("--norma-p", args.norma_p), ("--test", args.test)]}[args.experiment]
    for flag, value in opts:
        if value is not None:
            parts += [flag, str(value)]
    if not args.normalize:
        parts.append("--no-normalize")
    if args.plots is not None:
        parts.append("--plots" if args.plots else "--no-plots")
    return shlex.join(parts)


def run_cli(args) -> int:
    """Run ``gpusvm study`` with the ``args`` of the parser built by :func:`add_cli`.

    Returns
    -------
    int
        0 on success, 130 when interrupted (finished cells are kept).  Bad input raises
        ValueError (or OSError), which :func:`gpusvm.cli.main` turns into one line and status 2.
    """
    from .experiments import (PAPER_ETAS, PAPER_KT_VALUES, PAPER_T_VALUES,  # noqa: PLC0415
                              pegasos_k_study, schedules_study)
    from .plots import plots_wanted  # noqa: PLC0415
    from .problem import load_problem  # noqa: PLC0415
    from .scaling import check_methods, scaling_study  # noqa: PLC0415
    progress = sys.stderr.isatty() if args.progress is None else bool(args.progress)
    sizes = _parsed(args.batch_sizes, parse_int_list, "--batch-sizes", None)
    if args.experiment == "scaling":
        methods = check_methods(args.methods)        # fail before loading the data
    problem = load_problem(args.data, n_features=args.n_features, normalize=args.normalize,
                           name=args.name)
    command = command_line(args)
    common = dict(backend=args.backend, out_dir=args.out, pstar_gap=args.pstar_gap,
                  jobs=args.jobs, plots=args.plots, progress=progress, command=command)
    print(f"gpusvm study ({args.experiment}): {args.data}: n={problem.n} d={problem.d} "
          f"nnz={problem.nnz}; rows "
          + ("scaled to unit L2 norm (the theory assumes max ||x_i|| <= 1)" if problem.normalized
             else f"used as given (max row norm {problem.max_row_norm:.4g})"))
    if args.plots is None and not plots_wanted(None):
        print("gpusvm study: no PNG plots, since matplotlib is not installed (pip install "
              "'gpusvm[plot]'); the tables are written")
    previous = _sigterm_as_interrupt()
    try:
        if args.experiment == "scaling":
            res = scaling_study(problem, lam=args.lam, eps=args.eps, batch_sizes=sizes,
                                methods=methods, seeds=_seeds(args.seeds, 3),
                                max_epochs=args.max_epochs, max_iter=args.max_iter,
                                max_seconds=args.max_seconds, pegasos_output=args.pegasos_output,
                                **common)
        elif args.experiment == "pegasos-k":
            res = pegasos_k_study(
                problem, lam=args.lam, batch_sizes=sizes, seeds=_seeds(args.seeds, 3),
                T_values=_parsed(args.T_values, parse_int_list, "--T-values", PAPER_T_VALUES),
                kT_values=_parsed(args.kT_values, parse_int_list, "--kT-values", PAPER_KT_VALUES),
                **common)
        else:
            X_test = y_test = None
            if args.test is not None:
                from ..datasets import load_svmlight  # noqa: PLC0415
                X_test, y_test = load_svmlight(args.test, n_features=problem.d)
            res = schedules_study(
                problem, lam=args.lam, T_max=args.T_max, seeds=_seeds(args.seeds, 1),
                etas=_parsed(args.etas, parse_float_list, "--etas", PAPER_ETAS), p=args.norma_p,
                X_test=X_test, y_test=y_test, **common)
    except KeyboardInterrupt:
        print(f"gpusvm study: interrupted; the finished cells are kept in {args.out}/cells: rerun "
              "the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(f"P* = {res.metadata['p_star']:.10f} (duality gap {res.metadata['optimum']['gap']:.2e})")
    print(f"cells: {res.computed} computed, {res.reused} reused; {res.metadata['seconds']:.1f} s")
    if args.experiment == "scaling":
        _print_table(res)
    print("written: " + ", ".join(str(f) for f in res.files))
    print(f"report: {res.out_dir / 'results.md'}")
    return 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _sigterm_as_interrupt():
    """Treat SIGTERM like Ctrl-C while a study runs (returns the previous handler, or None)."""
    try:
        return signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:          # not in the main thread: leave the handler alone
        return None


def _print_table(res) -> None:
    from .report import _t_cell  # noqa: PLC0415
    methods = res.metadata["methods"]
    by = {(r["method"], r["b"]): r for r in res.summary}
    print(f"median T to P - P* <= {res.metadata['eps']:g} (pred = predicted speedup b/beta_b):")
    print(f"{'b':>7} {'beta_b/b':>9} {'pred':>7} " + " ".join(f"{m:>16}" for m in methods))
    for b in res.metadata["batch_sizes"]:
        r0 = by[(methods[0], b)]
        print(f"{b:>7} {r0['beta_b_over_b']:>9.4g} {r0['predicted_speedup']:>7.3g} "
              + " ".join(f"{_t_cell(by[(m, b)]):>16}" for m in methods))
