"""Regenerate the studies of docs/studies.md and the figures in docs/figures/.

Runs, on the NumPy backend:

* ``gpusvm study`` (Takáč et al. 2013, Figure 1) on imdb, news20, a9a and w8a
  from ``../shared/data``;
* ``gpusvm study --experiment pegasos-k`` (Pegasos paper, Figure 3) and
  ``--experiment schedules`` (Figure 2) on a9a;

then copies the plots to ``docs/figures/`` and draws ``figure1.png``, the four
scaling studies side by side.  Every study keeps its finished cells in
``OUT/<name>/cells``, so an interrupted run resumes where it stopped when the
script is run again.

Usage (from the repository root)::

    PYTHONPATH=. python benchmarks/run_studies.py [--out studies_out] [--jobs 2]
        [--only imdb,news20,a9a,w8a,pegasos-k,schedules,imdb-lam1e-4] [--no-figures]

``imdb-lam1e-4`` (imdb at lam = 1e-4, one seed, b = 1, 16, 256, 4096) runs only when
named with ``--only``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = (REPO / ".." / "shared" / "data").resolve()
FIGURES = REPO / "docs" / "figures"

#: lam and eps of every scaling study (see docs/studies.md for why this lam)
LAM = "1e-3"
EPS = "1e-3"
#: the scaling studies: name -> (training file, extra arguments)
SCALING = {
    "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", ["--batch-sizes", "1,4,...,16384"]),
    "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz",
               ["--batch-sizes", "1,4,...,4096,8192"]),
    "a9a": ("a9a/a9a", ["--n-features", "123", "--batch-sizes", "1,4,...,16384"]),
    "w8a": ("w8a/w8a", ["--n-features", "300", "--batch-sizes", "1,4,...,16384"]),
}
COMMON = ["--lam", LAM, "--eps", EPS, "--seeds", "3", "--max-epochs", "300"]
#: studies run only when named with --only
OPTIONAL = ("imdb-lam1e-4",)
#: the Pegasos-paper experiments, on a9a
PEGASOS_K = ["--experiment", "pegasos-k", "--n-features", "123", "--lam", "1e-4",
             "--batch-sizes", "1,4,...,1024", "--T-values", "1250,5000",
             "--kT-values", "10000,100000,1000000", "--seeds", "3"]
SCHEDULES = ["--experiment", "schedules", "--n-features", "123", "--lam", "1e-4",
             "--T-max", "100000", "--seeds", "1", "--test", str(DATA / "a9a" / "a9a.t")]


def commands(out: Path, jobs: int) -> dict:
    """The ``gpusvm study`` command line of every study, by name."""
    cmds = {}
    for name, (path, extra) in SCALING.items():
        cmds[name] = ["gpusvm", "study", str(DATA / path), "--name", name, *COMMON, *extra,
                      "--jobs", str(jobs), "--out", str(out / name)]
    cmds["pegasos-k"] = ["gpusvm", "study", str(DATA / "a9a" / "a9a"), "--name", "a9a",
                         *PEGASOS_K, "--jobs", str(jobs), "--out", str(out / "pegasos-k")]
    # optional (not in the default set): imdb at the smaller lam = 1e-4, one seed
    cmds["imdb-lam1e-4"] = ["gpusvm", "study", str(DATA / SCALING["imdb"][0]), "--name",
                            "imdb-lam1e-4", "--lam", "1e-4", "--eps", EPS, "--seeds", "1",
                            "--max-epochs", "300", "--batch-sizes", "1,16,...,4096",
                            "--jobs", str(jobs), "--out", str(out / "imdb-lam1e-4")]
    cmds["schedules"] = ["gpusvm", "study", str(DATA / "a9a" / "a9a"), "--name", "a9a",
                         *SCHEDULES, "--jobs", str(jobs), "--out", str(out / "schedules")]
    return cmds


def run(cmd: list) -> float:
    """Run one study through ``python -m gpusvm`` (the ``gpusvm`` command); return its seconds."""
    print("$ " + shlex.join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpusvm", *cmd[1:]], check=True, cwd=REPO)
    return time.perf_counter() - t0


def copy_figures(out: Path, names) -> None:
    """Copy the study plots to docs/figures and draw the combined Figure 1."""
    from gpusvm.study.plots import plot_figure1
    from gpusvm.study.scaling import load_results

    FIGURES.mkdir(parents=True, exist_ok=True)
    for name in names:
        for png in sorted((out / name).glob("*.png")):
            own = png.stem.replace("_", "-") == name          # pegasos_k.png, schedules.png
            shutil.copyfile(png, FIGURES / (png.name if own else f"{name}_{png.name}"))
    scaling = [n for n in SCALING if n in names and (out / n / "results.json").exists()]
    if scaling:
        plot_figure1([load_results(out / n) for n in scaling], FIGURES / "figure1.png")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "studies_out"),
                        help="where the studies write (default: studies_out/)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--only", default=None,
                        help="comma-separated studies to run (default: all but the optional "
                             "imdb-lam1e-4)")
    parser.add_argument("--figures", action=argparse.BooleanOptionalAction, default=True,
                        help="copy the plots to docs/figures (default: yes)")
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        print(f"the data sets are missing: {DATA}", file=sys.stderr)
        return 2
    out = Path(args.out)
    cmds = commands(out, args.jobs)
    names = ([n for n in cmds if n not in OPTIONAL] if args.only is None
             else [n.strip() for n in args.only.split(",")])
    unknown = [n for n in names if n not in cmds]
    if unknown:
        print(f"unknown studies {unknown}; choose from {', '.join(cmds)}", file=sys.stderr)
        return 2
    seconds = {}
    for name in names:
        seconds[name] = run(cmds[name])
    if args.figures:
        copy_figures(out, names)
    print(json.dumps({k: round(v, 1) for k, v in seconds.items()}, indent=1))
    print(f"total {sum(seconds.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
