"""Batch-size scaling studies and the Pegasos paper's experiments (docs/studies.md).

``gpusvm study`` (and :func:`scaling_study`) reproduces Figure 1 of Takáč, Bijral, Richtárik &
Srebro (ICML 2013) on given data: the iterations ``T`` that mini-batch Pegasos and naive, safe
and aggressive mini-batch SDCA need to reach ``P(w_T) - P* <= eps`` against the batch size
``b``, beside the theory (``sigma^2``, ``beta_b / b``, predicted speedup ``b / beta_b``).
:func:`pegasos_k_study` and :func:`schedules_study` are Figures 3 and 2 of the Pegasos paper
(Shalev-Shwartz, Singer & Srebro, ICML 2007).  Every study writes tables and PNG plots to its
output directory and keeps each finished *cell* in ``DIR/cells/``, so a rerun resumes.
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
