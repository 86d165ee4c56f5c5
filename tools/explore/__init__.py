"""Design-space studies on Ray: systems x models x strategies, one compile + simulation a point.

``study`` reads the study file and builds each point's system, ``trial`` compiles (or reuses a
cached plan) and simulates one point, ``engine`` runs the points on Ray (tasks for grid and
random search, Ray Tune with Optuna's TPE for ``tpe``), ``results`` writes the table, the
Pareto plots and the report. ``tvmc explore`` is the command line.
"""

from tvm_chiplet.tools.explore.engine import RayUnavailableError, StudyRun, run_study
from tvm_chiplet.tools.explore.results import (
    best_points,
    format_report,
    pareto_front,
    plot_pareto,
    read_results,
)
from tvm_chiplet.tools.explore.study import PARAMETERS, Study, StudyError, load_study
from tvm_chiplet.tools.explore.trial import run_trial

__all__ = [
    "PARAMETERS",
    "RayUnavailableError",
    "Study",
    "StudyError",
    "StudyRun",
    "best_points",
    "format_report",
    "load_study",
    "pareto_front",
    "plot_pareto",
    "read_results",
    "run_study",
    "run_trial",
]
