"""Batch-size scaling studies and the Pegasos paper's experiments.

``gpusvm study`` (and :func:`scaling_study`) reproduces Figure 1 of Takáč,
Bijral, Richtárik & Srebro (ICML 2013) on given data: the iterations ``T`` that
mini-batch Pegasos and naive, safe and aggressive mini-batch SDCA need to reach
``P(w_T) - P* <= eps``, against the batch size ``b``, beside the theory
(``sigma^2``, ``beta_b / b``, predicted speedup ``b / beta_b``).
:func:`pegasos_k_study` and :func:`schedules_study` are the experiments of the
Pegasos paper (Shalev-Shwartz, Singer & Srebro, ICML 2007): Figure 3 (the effect
of k, with T fixed and with kT fixed) and Figure 2 (Pegasos against NORMA and
against fixed step sizes).

Every study writes ``results.csv``, ``results.json``, ``results.md`` and PNG
plots to its output directory, and stores each finished unit of work (a
*cell*) atomically in ``DIR/cells/``, so an interrupted study resumes where it
stopped when rerun with the same arguments.
"""

from .cli import add_cli, run_cli
from .experiments import pegasos_k_study, schedules_study
from .optimum import certify_optimum
from .problem import Problem, load_problem, prepare_problem
from .scaling import StudyResult, load_results, scaling_study
from .search import METHODS, RunSpec, SearchSettings, find_crossing

__all__ = ["scaling_study", "pegasos_k_study", "schedules_study", "certify_optimum",
           "find_crossing", "load_problem", "prepare_problem", "load_results", "Problem",
           "RunSpec", "SearchSettings", "StudyResult", "METHODS", "add_cli", "run_cli"]
