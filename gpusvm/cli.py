"""The ``gpusvm`` command: fit, predict, select, convert, demo, info, spectral and study.

Every subcommand turns its arguments into one estimator call and a short report
on stdout. Problems with the input (a missing or malformed file, a bad
parameter) print one line on stderr and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import spectral, study
from .backends import wait_for_compiles
from ._version import __version__

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
#: a reader that closed the pipe (``gpusvm ... | head``): silent, like a program killed by SIGPIPE
EXIT_BROKEN_PIPE = 141

ZERO_BASED = {"auto": "auto", "yes": True, "no": False}

SOLVERS = ("auto", "pegasos", "sdca", "newton")

#: demo settings: a9a, lam = 1e-3 (C = 1/(lam n) = 0.0307 in LinearSVC terms), 100 epochs of
#: batches of 256 with tail averaging (Takáč et al. 2013, Theorem 1): about 3 s on 2 CPU cores
DEMO = {"lam": 1e-3, "batch_size": 256, "epochs": 100, "averaging": "tail", "bias": "augmented",
        "evaluations": 10}


class _UsageError(Exception):
    """Raised instead of argparse's exit, so that ``main`` can return the status."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(f"{self.prog}: error: {message} (see `{self.prog} --help`)")


# --------------------------------------------------------------------- parser
def output_path(text: str) -> str:
    """argparse type of ``--out``: a non-empty path (an empty one would mean the default)."""
    if text == "":
        raise argparse.ArgumentTypeError("the path is empty; pass a file name, or leave --out "
                                         "out for the default")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gpusvm`` command and its subcommands."""
    parser = _Parser(
        prog="gpusvm",
        description="Train and apply linear SVMs by large mini-batch Pegasos and SDCA.")
    parser.add_argument("--version", action="version", version=f"gpusvm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    fit = sub.add_parser("fit", help="train a linear SVM on a svmlight/LIBSVM file",
                         description="Train a linear SVM on a svmlight/LIBSVM file (.gz and .bz2 "
                                     "accepted), print the objective trace and the training "
                                     "accuracy, and save the model as .npz.")
    fit.add_argument("--solver", choices=SOLVERS, default="auto",
                     help="auto (default: the solver gpusvm.LinearSVC chooses for the data, sdca or "
                          "newton, on LinearSVC's model: squared hinge, C=1, tol=1e-4), pegasos "
                          "(PegasosSVC), sdca (SDCASVC) or newton (SDCASVC(solver='newton'): "
                          "primal Newton, squared hinge only)")
    fit.add_argument("--lam", type=float, help="regularisation lambda > 0 (default 1e-4)")
    fit.add_argument("--C", dest="C", type=float, help="LinearSVC's C instead of --lam: lam = 1/(C n)")
    fit.add_argument("--loss", choices=("hinge", "squared_hinge"),
                     help="hinge (default of pegasos and sdca) or squared_hinge (default of auto "
                          "and newton)")
    fit.add_argument("--batch-size", type=_batch_size, help="mini-batch size k, 1 <= k <= n, or auto "
                                                           "(default: 1 on a CPU, n for Pegasos on "
                                                           "<= 64 rows)")
    fit.add_argument("--max-iter", type=int, help="iteration cap (default: the estimator's, in epochs)")
    fit.add_argument("--sampling", choices=("epoch", "without_replacement", "with_replacement"),
                     help="how batches are drawn (default epoch)")
    fit.add_argument("--tol", type=float, help="stop at this duality gap (sdca) or objective "
                                               "decrease per doubling (pegasos); default 1e-3")
    fit.add_argument("--bias", help="intercept handling, e.g. none or augmented (see the "
                                    "estimator's documentation)")
    fit.add_argument("--averaging", help="pegasos: auto, none, all, tail or doubling")
    fit.add_argument("--eval-every", type=int, help="iterations between objective evaluations "
                                                    "(default: once per epoch)")
    fit.add_argument("--max-time", type=float, help="time budget in seconds")
    fit.add_argument("--dtype", choices=("float32", "float64"), help="precision (default float32)")
    fit.add_argument("--seed", type=int, default=0, help="seed of the batch stream (default 0)")
    fit.add_argument("--n-jobs", type=int, help="threads of the fit (default: every core; large "
                     "sparse fits on the numba backend use them)")
    _add_training_options(fit)
    _add_progress(fit)

    pred = sub.add_parser("predict", help="apply a saved model to a svmlight/LIBSVM file",
                          description="Predict the labels of DATA with MODEL; print the accuracy "
                                      "when DATA's labels are the model's classes.")
    pred.add_argument("model", metavar="MODEL", help="model file written by `gpusvm fit`")
    pred.add_argument("data", metavar="DATA", help="data in svmlight/LIBSVM format, or a binary "
                                                   "data file of `gpusvm convert`")
    pred.add_argument("--out", metavar="FILE", type=output_path,
                      help="write the predictions, one per line (a regular file is replaced "
                           "atomically, a device or FIFO is written through)")

    sel = sub.add_parser("select", help="choose C by cross-validation (every C and fold in one "
                                        "pass) and save the model refitted at it",
                         description="Score values of C on stratified folds of DATA with SDCASVCCV "
                                     "(every (C, fold) model an output of one pass), print the "
                                     "mean and spread of the CV score per C, mark the chosen C, "
                                     "refit on all of DATA at it and save the model.")
    sel.add_argument("--Cs", type=_cs, default=None, metavar="CS",
                     help="the values of C: a count for a log grid whose ends come from the data "
                          "(LIBLINEAR's smallest useful C to 1024), or values separated by "
                          "commas (e.g. 0.01,0.1,1,10); default 12 values 2^-6 .. 2^5")
    sel.add_argument("--folds", type=int, default=5, help="stratified folds (default 5)")
    sel.add_argument("--loss", choices=("hinge", "squared_hinge"), default="squared_hinge",
                     help="squared_hinge (LinearSVC's, default) or hinge")
    sel.add_argument("--solver", choices=("auto", "sdca", "newton"), default="auto",
                     help="auto (default: chosen from the data), sdca or newton (squared hinge)")
    sel.add_argument("--scoring", default=None, help="a scikit-learn scorer name (default accuracy)")
    sel.add_argument("--tol", type=float, help="duality gap of every model (default 1e-3)")
    sel.add_argument("--n-jobs", type=int, help="threads (default: every core)")
    sel.add_argument("--seed", type=int, default=0, help="seed of the folds and batches (default 0)")
    _add_training_options(sel)
    sel.add_argument("--plot", metavar="FILE", type=output_path,
                     help="draw the validation curve (mean CV score against C, with its spread "
                          "over the folds) to FILE (.png, .pdf, .svg; needs matplotlib)")

    conv = sub.add_parser("convert", help="save a svmlight/LIBSVM file in gpusvm's binary form, "
                                          "which fit, select and predict open in a moment",
                          description="Read DATA (svmlight/LIBSVM, .gz and .bz2 accepted) once and "
                                      "write its matrix and labels to OUT in gpusvm's binary form "
                                      "(.gsvm by convention): fit, select and predict, given OUT "
                                      "instead of DATA, map it from the disk instead of parsing "
                                      "text.")
    conv.add_argument("data", metavar="DATA", help="svmlight/LIBSVM file to convert")
    conv.add_argument("out", metavar="OUT", type=output_path,
                      help="binary data file to write (a regular file is replaced atomically)")
    conv.add_argument("--n-features", type=int, help="number of features (default: from the file)")
    conv.add_argument("--zero-based", choices=tuple(ZERO_BASED), default="auto",
                      help="whether DATA's feature indices start at 0: yes, no or auto (default), "
                           "as for fit; the base is stored in OUT")
    conv.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                      help="precision of the stored values (default float32, what fit reads)")
    conv.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="progress bar while reading on stderr (default: for large files, when "
                           "stderr is a terminal)")

    demo = sub.add_parser("demo", help="train on the shipped a9a data set and compare with the "
                                       "optimum",
                          description="Train PegasosSVC on a9a (UCI Adult, shipped with gpusvm), "
                                      "print the objective trace, the test accuracy and the "
                                      "distance P(w) - P* to the optimum computed by "
                                      "scikit-learn's LinearSVC on the same objective.")
    demo.add_argument("--backend", default="auto", help=f"{_backend_choices()} (default auto)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the batch stream (default 0)")
    _add_progress(demo)

    sub.add_parser("info", help="versions, devices and the backends that can run here",
                   description="Print the versions of gpusvm and its dependencies, whether a CUDA "
                               "device was found, which backends can run here, and where the "
                               "CUDA kernel sources are.")

    spectral.add_cli(sub)
    study.add_cli(sub)
    return parser


def _backend_choices() -> str:
    from .backends import BACKENDS
    return ", ".join(BACKENDS)


def _add_training_options(parser):
    """The arguments ``fit`` and ``select`` share: DATA, classes, backend, how DATA is read, --out."""
    parser.add_argument("data", metavar="DATA", help="training data in svmlight/LIBSVM format, or "
                                                     "a binary data file of `gpusvm convert`")
    parser.add_argument("--class-weight", type=_class_weight, metavar="WEIGHTS",
                        help="balanced, or LABEL:WEIGHT pairs separated by commas (e.g. 1:5,-1:1); "
                             "unlisted classes weigh 1")
    parser.add_argument("--multi-class", choices=("ovr", "ovo", "ordinal"),
                        help="more than two classes: ovr (one-vs-rest, default), ovo (one-vs-one) "
                             "or ordinal (ordered labels, neighbouring pairs)")
    parser.add_argument("--backend", help=f"{_backend_choices()} (default auto)")
    parser.add_argument("--n-features", type=int, help="number of features (default: from the file)")
    parser.add_argument("--zero-based", choices=tuple(ZERO_BASED), default="auto",
                        help="whether DATA's feature indices start at 0: yes, no (LIBSVM's one-based "
                             "indices; index 0 is an error) or auto (one-based unless index 0 "
                             "occurs, with a warning; default). The base is stored in the model "
                             "and predict reads its data with it")
    parser.add_argument("--normalize", action="store_true",
                        help="scale every row to unit L2 norm (stored in the model; predict applies "
                             "it too)")
    parser.add_argument("--out", metavar="MODEL", type=output_path,
                        help="model file to write (default: DATA's stem + .npz in the current "
                             "directory); a regular file is replaced atomically, a symbolic link "
                             "is followed, a device or FIFO is written through")


def _read_training_data(args):
    """DATA as ``fit`` and ``select`` read it: ``(X, y, zero_based)``, rows normalised on request;
    a ``--backend`` that cannot run here (no GPU, no emulator) is refused before the file is read."""
    from .backends import resolve_backend_name
    from .datasets import load_svmlight, normalize_rows
    if args.backend is not None:
        resolve_backend_name(args.backend)
    X, y, zero_based = load_svmlight(args.data, n_features=args.n_features,
                                     zero_based=ZERO_BASED[args.zero_based], return_zero_based=True)
    return (normalize_rows(X) if args.normalize else X), y, zero_based


def _save(est, args, out, zero_based) -> None:
    from .model_io import save_model
    save_model(est, out, extra={"normalize": bool(args.normalize), "trained_on": str(args.data),
                                "zero_based": zero_based})
    print(f"model written to {out}")


def _add_progress(parser):
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar with the live objective on stderr (default: when "
                             "stderr is a terminal)")


# --------------------------------------------------------------------- main
def main(argv=None) -> int:
    """Run the ``gpusvm`` command.

    Parameters
    ----------
    argv : list of str or None, default=None
        Arguments without the program name; ``None`` reads ``sys.argv[1:]``.

    Returns
    -------
    int
        0 on success, 2 on a usage or input error (one line on stderr), 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    commands = {"fit": cmd_fit, "predict": cmd_predict, "demo": cmd_demo, "info": cmd_info,
                "select": cmd_select, "convert": cmd_convert, "study": study.run_cli,
                "spectral": spectral.run_cli}

    def show_warning(message, category, filename, lineno, file=None, line=None):
        print(f"gpusvm {args.command}: warning: {_one_line(message)}", file=sys.stderr)

    try:
        wait_for_compiles()         # no compilation swaps the handler while this one holds
        with warnings.catch_warnings():
            warnings.showwarning = show_warning  # one line per warning, no source line
            try:
                status = commands[args.command](args)
            finally:                # warnings caught by a compilation are shown again when
                wait_for_compiles()  # it ends: through this handler
            sys.stdout.flush()      # a closed pipe shows here, not at the interpreter's exit
        return EXIT_OK if status is None else int(status)
    except KeyboardInterrupt:
        print(f"gpusvm {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except MemoryError as exc:
        detail = _one_line(exc) if str(exc) else "MemoryError"
        print(f"gpusvm {args.command}: error: out of memory ({detail}); use smaller data (check "
              "DATA's largest feature index: it sets the number of columns) or a machine with "
              "more memory", file=sys.stderr)
        return EXIT_ERROR
    except (ValueError, TypeError, OSError, RuntimeError, ArithmeticError, ImportError) as exc:
        print(f"gpusvm {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # the promise holds for every failure: one line, status 2
        print(f"gpusvm {args.command}: error: unexpected {type(exc).__name__}: {_one_line(exc)}",
              file=sys.stderr)
        return EXIT_ERROR


def _silence_stdout():
    """Point stdout at /dev/null, so that flushing it at exit raises no second BrokenPipeError."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no real file descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _one_line(exc) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, FileNotFoundError) and exc.filename and not text.startswith(("svmlight", "model")):
        text = f"file not found: {exc.filename}"
    return text or type(exc).__name__


def _show_progress(flag) -> bool:
    return sys.stderr.isatty() if flag is None else bool(flag)


# --------------------------------------------------------------------- fit
def default_model_path(data) -> str:
    """Default model file of ``gpusvm fit DATA``: DATA's stem (``.gz``/``.bz2`` dropped first)
    + ``.npz``, in the current directory."""
    name = Path(data).name
    for suffix in (".gz", ".bz2"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return Path(name).stem + ".npz"


def _class_weight(text: str):
    """``--class-weight``: ``balanced`` or ``LABEL:WEIGHT,...`` (labels as in the data file)."""
    if text == "balanced":
        return text
    weights = {}
    for item in text.split(","):
        label, sep, weight = item.rpartition(":")
        try:
            if not sep or not label:
                raise ValueError
            value, key = float(weight), float(label)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected balanced or LABEL:WEIGHT pairs separated by commas (e.g. 1:5,-1:1), "
                f"got {text!r}") from None
        weights[int(key) if key.is_integer() else key] = value
    return weights


def _batch_size(text: str):
    """``--batch-size``: a positive int or ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}")


def cmd_fit(args) -> int:
    """``gpusvm fit DATA``: train, report the objective trace and accuracy, save the model."""
    from ._output import check_output
    from .estimators import PegasosSVC, SDCASVC

    auto = args.solver == "auto"
    cls = PegasosSVC if args.solver == "pegasos" else SDCASVC
    loss, C, tol = args.loss, args.C, args.tol
    if args.solver in ("newton", "auto") and loss is None:
        loss = "squared_hinge"
    if auto:               # gpusvm.LinearSVC's model: squared hinge, C = 1, tol = 1e-4
        C = 1.0 if C is None and args.lam is None else C
        tol = 1e-4 if tol is None else tol
    options = {"lam": args.lam, "C": C, "loss": loss, "class_weight": args.class_weight,
               "multi_class": args.multi_class, "solver": "newton" if args.solver == "newton" else None,
               "batch_size": args.batch_size, "max_iter": args.max_iter, "sampling": args.sampling,
               "tol": tol, "bias": args.bias, "averaging": args.averaging,
               "eval_every": args.eval_every, "max_time": args.max_time, "backend": args.backend,
               "dtype": args.dtype, "n_jobs": getattr(args, "n_jobs", None)}
    accepted = cls().get_params(deep=False)
    params = {name: value for name, value in options.items() if value is not None}
    unknown = next((name for name in params if name not in accepted), None)
    if unknown is not None:
        what = "sdca and newton solvers (SDCASVC) that --solver auto chooses from" if auto \
            else f"{args.solver} solver ({cls.__name__})"
        raise ValueError(f"--{unknown.replace('_', '-')} is not an option of the {what}")
    params["random_state"] = args.seed
    out = args.out if args.out is not None else default_model_path(args.data)
    check_output(out, what="model")           # before the training, not after it
    est = cls(**params, verbose=int(_show_progress(args.progress)))
    est._validate_params()            # a bad parameter is reported before a large file is read
    X, y, zero_based = _read_training_data(args)
    n, d = X.shape
    if auto:
        params["solver"] = _auto_solver(X, y, params)
        est.set_params(solver=params["solver"])
    print(f"gpusvm fit: {args.data}: n={n} d={d} nnz={X.nnz}; "
          f"{cls.__name__}({', '.join(f'{k}={v!r}' for k, v in params.items())})")
    start = time.perf_counter()
    est.fit(X, y)
    seconds = time.perf_counter() - start
    threads = getattr(est, "n_threads_", 1)
    print(f"backend: {getattr(est, 'backend_', '?')}" + (f", {threads} threads" if threads > 1
                                                          else ""))
    if len(est.classes_) > 2:
        _print_outputs(est)
    else:
        _print_trace(est.history_)
    print(f"stopped after {est.n_iter_} iterations ({getattr(est, 'stop_reason_', '?')}), {seconds:.2f} s")
    print(f"training accuracy: {est.score(X, y):.4f}")
    _save(est, args, out, zero_based)
    return EXIT_OK


def _auto_solver(X, y, params) -> str:
    """``--solver auto``: the solver :func:`gpusvm.solvers.policy.choose_solver` picks, as
    gpusvm.LinearSVC would for this data and these settings."""
    from .estimators._base import _mean_sq_norm  # noqa: PLC0415
    from .solvers.policy import choose_solver  # noqa: PLC0415

    n, d = X.shape
    C = params["C"] if params.get("C") is not None else 1.0 / (params["lam"] * n)
    intercept = 0.0 if params.get("bias") == "none" else 1.0
    return choose_solver(n, d, C, _mean_sq_norm(X, intercept), np.unique(y).size,
                         params.get("loss", "hinge"), "auto")


def _print_outputs(est):
    """One line per output of a multiclass model: its problem and its last evaluation."""
    classes = [format_label(c) for c in est.classes_]
    mode = getattr(est, "multi_class", "ovr")
    if mode == "ovr":
        names = [f"{c} vs rest" for c in classes]
    elif mode == "ovo":
        names = [f"{classes[b]} vs {classes[a]}" for a in range(len(classes))
                 for b in range(a + 1, len(classes))]
    else:
        names = [f"{classes[k + 1]} vs {classes[k]}" for k in range(len(classes) - 1)]
    # a certified fit reports each output's certificate: P of its coef_ row, D, their gap
    certificate = [np.ravel(getattr(est, attr, [])) for attr in
                   ("primal_objective_", "dual_objective_", "duality_gap_")]
    dual = all(c.size == len(names) for c in certificate)
    print(f"{len(names)} outputs ({mode}), last evaluation of each:")
    print(f"{'output':>24} {'iteration':>10} {'objective P(w)':>15}"
          + (f" {'dual D(alpha)':>15} {'gap':>10}" if dual else ""))
    for m, (name, history) in enumerate(zip(names, est.history_)):
        row = history[-1]
        if dual:
            print(f"{name:>24} {row[0]:>10d} {certificate[0][m]:>15.8f} "
                  f"{certificate[1][m]:>15.8f} {certificate[2][m]:>10.3e}")
        else:
            print(f"{name:>24} {row[0]:>10d} {row[1]:>15.8f}")


def _print_trace(history, p_star=None, epoch_size=None):
    """Print the ``history_`` rows, ``(iteration, P, seconds)`` (Pegasos) or ``(iteration, P, D,
    gap, seconds)`` (SDCA), with P - P* when it is known."""
    dual = bool(history) and len(history[0]) == 5
    head = f"{'iteration':>10}" + (f" {'epoch':>7}" if epoch_size else "") + f" {'objective P(w)':>15}"
    if dual:
        head += f" {'dual D(alpha)':>15} {'gap':>10}"
    if p_star is not None:
        head += f" {'P(w) - P*':>11}"
    print(head + f" {'seconds':>8}")
    for row in history:
        it, obj, elapsed = row[0], row[1], row[-1]
        line = f"{it:>10d}" + (f" {it / epoch_size:>7.1f}" if epoch_size else "") + f" {obj:>15.8f}"
        if dual:
            line += f" {row[2]:>15.8f} {row[3]:>10.3e}"
        if p_star is not None:
            line += f" {obj - p_star:>11.3e}"
        print(line + f" {elapsed:>8.2f}")


# --------------------------------------------------------------------- predict
def format_label(value) -> str:
    """A label as written in LIBSVM files: integral floats without the ``.0``."""
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return str(int(value))
    return str(value.item() if isinstance(value, np.generic) else value)


def _cs(text: str):
    """``--Cs``: a count (int >= 1) or values of C separated by commas."""
    try:
        if "," not in text and text.strip().isdigit():
            count = int(text)
            if count < 1:
                raise ValueError
            return count
        values = [float(v) for v in text.split(",") if v.strip()]
        if not values:
            raise ValueError
        return values
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count of values (e.g. 12) or values of C "
                                         f"separated by commas (e.g. 0.01,0.1,1), got {text!r}") \
            from None


def cmd_select(args) -> int:
    """``gpusvm select DATA``: choose C by cross-validation in one pass, refit, save."""
    from sklearn.model_selection import StratifiedKFold

    from ._output import check_output
    from .estimators.cv import SDCASVCCV

    if args.folds < 2:
        raise ValueError(f"--folds must be at least 2, got {args.folds}")
    Cs = args.Cs if args.Cs is not None else list(2.0 ** np.arange(-6, 6))
    params = {"Cs": Cs, "loss": args.loss, "solver": args.solver, "scoring": args.scoring,
              "class_weight": args.class_weight, "multi_class": args.multi_class,
              "tol": args.tol, "n_jobs": args.n_jobs, "backend": args.backend}
    params = {k: v for k, v in params.items() if v is not None}
    out = args.out if args.out is not None else default_model_path(args.data)
    check_output(out, what="model")
    if args.plot is not None:
        check_output(args.plot, what="plot")
        if importlib.util.find_spec("matplotlib") is None:
            raise ImportError("--plot needs matplotlib: pip install 'gpusvm[plot]'")
    est = SDCASVCCV(**params, cv=StratifiedKFold(args.folds, shuffle=True, random_state=args.seed),
                    random_state=args.seed)
    est._validate_params()
    X, y, zero_based = _read_training_data(args)
    n, d = X.shape
    grid = f"{len(Cs)} values" if not isinstance(Cs, int) else f"{Cs} values from the data"
    print(f"gpusvm select: {args.data}: n={n} d={d} nnz={X.nnz}; C: {grid}, {args.folds} "
          f"stratified folds, loss={args.loss}")
    start = time.perf_counter()
    est.fit(X, y)
    seconds = time.perf_counter() - start
    mean, std = est.scores_.mean(axis=0), est.scores_.std(axis=0)
    name = args.scoring or "accuracy"
    print(f"{'C':>12} {'mean ' + name:>16} {'std':>8}")
    for C, m, s_ in zip(est.Cs_, mean, std):
        mark = "  <- chosen" if C == est.C_ else ""
        print(f"{C:>12.6g} {m:>16.4f} {s_:>8.4f}{mark}")
    gaps = est.duality_gaps_
    print(f"chosen C = {est.C_:.6g}; {gaps.size} models certified to a duality gap <= "
          f"{np.nanmax(gaps):.2g}; search and refit {seconds:.2f} s (solver {est.solver_}, "
          f"backend {getattr(est, 'backend_', '?')})")
    _save(est.to_estimator(), args, out, zero_based)
    if args.plot is not None:
        _plot_validation_curve(est, args.plot, name)
        print(f"validation curve written to {args.plot}")
    return EXIT_OK


def _plot_validation_curve(est, path, name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean, std = est.scores_.mean(axis=0), est.scores_.std(axis=0)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.semilogx(est.Cs_, mean, "o-", label=f"mean over {est.scores_.shape[0]} folds")
    ax.fill_between(est.Cs_, mean - std, mean + std, alpha=0.25, label="+- one std")
    ax.axvline(est.C_, color="k", lw=0.8, ls="--", label=f"chosen C = {est.C_:.4g}")
    ax.set_xlabel("C")
    ax.set_ylabel(f"CV {name}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def cmd_predict(args) -> int:
    """``gpusvm predict MODEL DATA``: predictions, and the accuracy when labels match."""
    from ._output import check_output, write_output
    from .datasets import _is_binary, _locate_error, load_svmlight, normalize_rows
    from .model_io import load_model, read_model_metadata

    if args.out is not None:
        check_output(args.out, what="predictions")
    est = load_model(args.model)
    extra = read_model_metadata(args.model).get("extra") or {}
    n_features = est.n_features_in_
    zero_based = extra.get("zero_based", "auto")      # models of gpusvm <= 0.1 lack it
    if zero_based not in (True, False):
        zero_based = "auto"
    X, y, zero_based = load_svmlight(args.data, zero_based=zero_based, return_zero_based=True)
    if X.shape[1] > n_features and _is_binary(args.data):
        raise ValueError(f"{args.data}: the data has {X.shape[1]} features but the model "
                         f"{args.model} was trained on {n_features}; DATA must use the training "
                         "data's features")
    if X.shape[1] > n_features:
        first = 0 if zero_based else 1
        raise ValueError(_locate_error(
            args.data, None, n_features, zero_based,
            limit=f"the model {args.model} was trained on {n_features} features (indices "
                  f"{first} to {n_features - 1 + first}); DATA must use the training data's "
                  "features"))
    if X.shape[1] < n_features:            # a test file need not use the last features
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    if extra.get("normalize"):
        X = normalize_rows(X)
    pred = est.predict(X)
    print(f"gpusvm predict: {args.data}: n={X.shape[0]} with {args.model} "
          f"({type(est).__name__}, {n_features} features)")
    if set(np.unique(y).tolist()) <= set(np.asarray(est.classes_).tolist()):
        print(f"accuracy: {float(np.mean(pred == y)):.4f}")
    else:
        print("accuracy: not computed (the labels of DATA are not the model's classes "
              f"{', '.join(format_label(c) for c in est.classes_)})")
    if args.out is not None:
        write_output(args.out, lambda f: f.writelines(format_label(p) + "\n" for p in pred),
                     what="predictions", binary=False)
        print(f"predictions written to {args.out}")
    return EXIT_OK


# --------------------------------------------------------------------- convert
def cmd_convert(args) -> int:
    """``gpusvm convert DATA OUT``: DATA read once, saved in the binary form."""
    from ._output import check_output
    from .datasets import load_svmlight, save_binary

    check_output(args.out, what="binary data")
    with contextlib.suppress(OSError):          # a missing DATA or OUT: named below, or new
        if os.path.samefile(args.data, args.out):
            raise ValueError(f"OUT {args.out} is DATA {args.data}: converting would replace "
                             "the text with its binary form; pass another OUT (e.g. a .gsvm file)")
    start = time.perf_counter()
    X, y, zero_based = load_svmlight(args.data, n_features=args.n_features,
                                     dtype=np.dtype(args.dtype),
                                     zero_based=ZERO_BASED[args.zero_based],
                                     return_zero_based=True, progress=args.progress)
    read = time.perf_counter() - start
    save_binary(args.out, X, y, zero_based=zero_based)
    print(f"gpusvm convert: {args.data}: n={X.shape[0]}, d={X.shape[1]}, nnz={X.nnz}, "
          f"{'zero' if zero_based else 'one'}-based, read in {read:.2f} s")
    print(f"binary data written to {args.out}")
    return EXIT_OK


# --------------------------------------------------------------------- demo
def _augmented_objective(X, y, coef, intercept, lam):
    """``lam/2 (||w||^2 + b^2) + mean hinge``: the objective of ``bias="augmented"``, in float64."""
    w = np.asarray(coef, dtype=np.float64).ravel()
    margins = y * (X.astype(np.float64) @ w + intercept)
    return float(0.5 * lam * (w @ w + intercept * intercept) + np.maximum(0.0, 1.0 - margins).mean())


def _reference_optimum(X, y, lam):
    """``P*`` of the demo's objective from scikit-learn's LinearSVC (liblinear, ``tol=1e-10``).

    With ``fit_intercept=True, intercept_scaling=1`` liblinear minimises
    ``1/2 (||w||^2 + b^2) + C sum_i hinge_i`` (the intercept regularised as an appended
    constant feature): ``P / lam`` of ``bias="augmented"`` at ``C = 1/(lam n)``.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    ref = LinearSVC(loss="hinge", C=1.0 / (lam * X.shape[0]), fit_intercept=True,
                    intercept_scaling=1.0, dual=True, tol=1e-10, max_iter=1_000_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref.fit(X.astype(np.float64), y)
    return _augmented_objective(X, y, ref.coef_.ravel(), float(ref.intercept_[0]), lam)


def cmd_demo(args) -> int:
    """``gpusvm demo``: PegasosSVC on the shipped a9a, against the optimum of LinearSVC."""
    from .datasets import load_a9a
    from .estimators import PegasosSVC

    X, y = load_a9a("train")
    X_test, y_test = load_a9a("test")
    n, d = X.shape
    lam, k = DEMO["lam"], DEMO["batch_size"]
    epoch = n / k
    max_iter = math.ceil(DEMO["epochs"] * epoch)
    eval_every = math.ceil(max_iter / DEMO["evaluations"])
    est = PegasosSVC(lam=lam, batch_size=k, max_iter=max_iter, averaging=DEMO["averaging"],
                     bias=DEMO["bias"], eval_every=eval_every, backend=args.backend,
                     random_state=args.seed, verbose=int(_show_progress(args.progress)))
    print("gpusvm demo: mini-batch Pegasos on a9a (UCI Adult, LIBSVM binarisation, shipped with gpusvm)")
    print(f"  train n={n} d={d}, test n={X_test.shape[0]}; lam={lam:g} (C = 1/(lam n) = "
          f"{1 / (lam * n):.4g}), batch_size={k}, {max_iter} iterations ({DEMO['epochs']} "
          f"epochs), averaging={DEMO['averaging']!r}, bias={DEMO['bias']!r}")
    start = time.perf_counter()
    est.fit(X, y)
    seconds = time.perf_counter() - start
    p_star = _reference_optimum(X, y, lam)
    p_final = _augmented_objective(X, y, est.coef_.ravel(), float(est.intercept_[0]), lam)
    print(f"  backend: {est.backend_}; training took {seconds:.2f} s")
    _print_trace(est.history_, p_star=p_star, epoch_size=epoch)
    print(f"reference optimum P* = {p_star:.8f} (scikit-learn LinearSVC, hinge loss, "
          "C = 1/(lam n), intercept regularised like bias='augmented', tol=1e-10)")
    print(f"final objective P(w) = {p_final:.8f}; P(w) - P* = {p_final - p_star:.3e} "
          f"(relative {(p_final - p_star) / p_star:.2e})")
    print(f"training accuracy: {est.score(X, y):.4f}")
    print(f"a9a test accuracy: {est.score(X_test, y_test):.4f}")
    return EXIT_OK


# --------------------------------------------------------------------- info
def _version_of(module_name):
    try:
        spec = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:        # "cuda.bindings" without the "cuda" namespace package
        spec = None
    if spec is None:
        return "not installed"
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a broken optional install must not break `info`
        return f"installed but fails to import ({_one_line(exc)})"
    return getattr(module, "__version__", "unknown version")


def _cuda_devices():
    """Names of the CUDA devices CuPy sees (empty without CuPy or a device)."""
    from .backends import cuda_available
    if not cuda_available():
        return []
    import cupy
    names = [cupy.cuda.runtime.getDeviceProperties(i)["name"]
             for i in range(cupy.cuda.runtime.getDeviceCount())]
    return [name.decode() if isinstance(name, bytes) else str(name) for name in names]


def cmd_info(args) -> int:
    """``gpusvm info``: versions, devices, runnable backends, kernel location."""
    from . import _kernels, backends

    print(f"gpusvm       {__version__}")
    print(f"python       {sys.version.split()[0]}")
    for name in ("numpy", "scipy", "sklearn", "tqdm", "cupy"):
        print(f"{name:<12} {_version_of(name)}")
    # cuda-python's bindings: the device backend's segments as CUDA graph WHILE nodes
    print(f"{'cuda-python':<12} {_version_of('cuda.bindings')}")
    devices = _cuda_devices()
    print(f"GPU          {len(devices)} CUDA device(s): {', '.join(devices)}" if devices else
          "GPU          none found (no CuPy, no driver, or no CUDA device)")
    if backends.emulator_available():
        import gpusvm_emulator  # noqa: PLC0415
        compiler = gpusvm_emulator.find_compiler()
        emulated = (f"yes (the CUDA kernels on the CPU kernel emulator, compiler {compiler})"
                    if compiler else "no (the CPU kernel emulator needs a C++ compiler; none found)")
    else:
        emulated = "no (the CPU kernel emulator is a package of its own: pip install ./emulator)"
    print("backends:")
    print("  numpy      yes (NumPy/SciPy reference backend, always available)")
    print("  numba      " + ("yes (compiled CPU backend)" if backends.numba_available() else
                             "no (the compiled CPU backend needs the numba package)"))
    print("  cupy       " + ("yes (custom CUDA kernels on the GPU)" if devices else
                             "no (needs CuPy and a CUDA device: pip install \"gpusvm[cuda12]\" "
                             "or \"gpusvm[cuda13]\" on a CUDA machine)"))
    print("  emulated   " + emulated)
    print(f"  auto       -> {backends.resolve_backend_name('auto')}")
    from ._threads import THREAD_MIN_NNZ, resolve_n_jobs  # noqa: PLC0415
    print(f"threads      {resolve_n_jobs(None)} (n_jobs=None: the cores this process may use); "
          f"Newton fits of {THREAD_MIN_NNZ:,} nonzeros or more on numba run on them")
    try:
        kdir = _kernels.kernel_dir()
    except FileNotFoundError:
        print("kernels      not found")
    else:
        count = len(list(kdir.glob("*.cu")))
        print(f"kernels      {kdir} ({count} .cu file{'s' if count != 1 else ''})")
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
