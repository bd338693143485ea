"""Paper 000's transformer (eq. 1): model, exact gradients (Lemma B.4), training
(eq. 2), layer kernels (Definition B.5), the lemmas measured numerically, and the
empirical scaling beside the bounds of Theorems 7.1 / 7.2.

Imports :mod:`attndyn.numeric.core` and :mod:`attndyn.numeric.scaling`, never
:mod:`attndyn.numeric.attention`. See docs/transformer.md.
"""

from .data import SeqData, make_data, rms_normalise
from .empirical_scaling import plot_scaling, scaling_sweep
from .gradients import (finite_difference_gradients, kink_margin, lemma_adjoints,
                        lemma_gradients, relative_error)
from .kernel import (assumption_lambda, block_output, exact_kernel, exact_kernel_parts,
                     kernel_along, kernel_eigenvalues, kernel_parts, layer_kernel, lemma41,
                     min_eigenvalue)
from .lemmas import (assumption_sweep, build, check_setup, definition52, lemma41_sweep, lemma53,
                     log10_required_width, required_width, theorem55)
from .premises import PremiseReport, load_premises, part16_sweep, premises
from .model import ForwardCache, Transformer, good_scalings, positional_embedding
from .results import Sweep, fit_power_law, load_sweep
from .training import excess_risk, flow_work_estimate, train

__all__ = [
    "Transformer", "ForwardCache", "good_scalings", "positional_embedding",
    "lemma_gradients", "lemma_adjoints", "finite_difference_gradients", "kink_margin",
    "relative_error",
    "layer_kernel", "kernel_parts", "kernel_along", "kernel_eigenvalues", "assumption_lambda", "lemma41",
    "min_eigenvalue", "exact_kernel", "exact_kernel_parts", "block_output",
    "premises", "PremiseReport", "load_premises", "part16_sweep",
    "train", "excess_risk", "flow_work_estimate",
    "SeqData", "make_data", "rms_normalise",
    "build", "check_setup", "lemma41_sweep", "assumption_sweep", "lemma53", "theorem55",
    "required_width", "log10_required_width", "definition52",
    "scaling_sweep", "plot_scaling",
    "Sweep", "load_sweep", "fit_power_law",
]
