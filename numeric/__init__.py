"""Numeric layer: joins the symbolic generators and the numba kernels.

Models, compiled integration drivers, the finite-d matrix-flow oracle,
SGD-vs-theory comparison, scaling-law bounds and plots.
"""

from .compare import Comparison, compare
from .flow import matrix_flow
from .models import TiedHierarchy, TiedModel
from .results import IntegrationError, Trajectory, TruncationNotConverged, load_result
from .sgd import gaussian_init, sgd, sgd_runs
from .smodel import SModel
from .untied import UntiedModel

__all__ = ["TiedModel", "TiedHierarchy", "SModel", "UntiedModel", "matrix_flow", "sgd",
           "sgd_runs", "gaussian_init", "compare", "Comparison", "Trajectory", "load_result",
           "IntegrationError", "TruncationNotConverged"]
