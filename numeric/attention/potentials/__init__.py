"""The Gamma routes: every way the project evaluates ``Phi = E[loss(G)]`` and its gradients.

- :mod:`.numeric`: compiled Gaussian quadrature for any loss (the numeric route) and the
  builders a model's ``potential=`` goes through (:func:`build_potential`,
  :func:`as_potential`, :func:`tied_potential`, ...);
- :mod:`.quadrature`: the rules (tensor Gauss-Hermite, Smolyak, RQMC) and their choice;
- :mod:`.hermite`: compiled Mehler (Hermite) series for activation losses;
- :mod:`.surrogate`: certified Chebyshev surrogates on a box of overlap space;
- :mod:`.cache`: the on-disk cache of derived potentials keyed by the traced loss.

The names below are the numeric route's public face; the other routes are imported from
their modules.
"""

import importlib

__all__ = ["NumericPotential", "numeric_potential", "check_continuity", "build_potential",
           "tied_potential", "untied_potential", "direct_potential", "general_potential",
           "potential", "as_potential", "error_report", "record_error", "run_tracked",
           "CompiledExact"]


def __getattr__(name: str):
    # Lazy: the cache and the compiled routes are imported on a warm start without SymPy,
    # which the numeric route imports at its top.
    if name in __all__:
        return getattr(importlib.import_module(".numeric", __name__), name)
    if name in ("numeric", "quadrature", "hermite", "surrogate", "cache"):
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
