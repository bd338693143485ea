"""Numeric layer: joins the symbolic generators and the numba kernels.

Models, compiled integration drivers, the finite-d matrix-flow oracle,
SGD-vs-theory comparison, scaling-law bounds and plots.
"""

from .flow import matrix_flow
from .models import TiedHierarchy, TiedModel
from .results import IntegrationError, Trajectory, TruncationNotConverged, load_result

__all__ = ["TiedModel", "TiedHierarchy", "matrix_flow", "Trajectory", "load_result",
           "IntegrationError", "TruncationNotConverged"]
