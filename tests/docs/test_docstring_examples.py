"""Docstring examples beyond ``attndyn.__all__`` (issue 30, item 2).

The public callables of the layers a user calls directly each carry a docstring with a
``>>>`` example, and the examples run:

- ``attndyn.symbolic``: the callables of every module's ``__all__`` (defined in that
  module, not re-exported);
- paper 003's theorem checks: ``__all__`` of every module of
  ``attndyn.numeric.attention.theorems``;
- paper 000: ``__all__`` of the modules of ``attndyn.numeric.scaling`` and of
  ``attndyn.numeric.transformer`` (with the names of ``attndyn.numeric.transformer.__all__``);
- ``attndyn.numeric.core``: ``__all__`` of the labelled exports, results, plots, claims,
  the check registry, notebook display, threads, compile-and-cache and progress.

``EXEMPT`` lists the callables without an example (one line of reason each: an example
would cost more than about 2 s). ``SLOW`` lists those whose example runs only with
``-m slow``. The examples run with ELLIPSIS and NORMALIZE_WHITESPACE in the globals of
their module, as ``python -m doctest`` would; names already in ``attndyn.__all__`` are run
by test_public_doctests.py and are only counted here. Measured with one numba and BLAS
thread: the 348 default examples take about 17 s of CPU once the numba caches are warm
(the first load of the scaling kernels in a process included, about 2-3 s of it); with
cold caches (after a kernel changed) about 48 s, the compilations being shared with the
rest of the suite.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import matplotlib
import pytest

import attndyn

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

#: callable -> why it has no example (each would cost more than about 2 s)
EXEMPT: dict[str, str] = {}

#: callables whose example runs only in the slow suite (about 3 s of CPU or more each: the
#: small budget of an SGD d-scan or of the untied truncation ladder, transformer training
#: over several depths or data sizes)
SLOW: set[str] = {
    "attndyn.numeric.attention.theorems.cor3.check_cor3",
    "attndyn.numeric.attention.theorems.cor4.check_cor4",
    "attndyn.numeric.attention.theorems.cor7.check_cor7",
    "attndyn.numeric.attention.theorems.cor8_bound.check_cor8",
    "attndyn.numeric.attention.theorems.cor8_bound.truncation_ladder",
    "attndyn.numeric.transformer.ntk.rate_vs_depth",
    "attndyn.numeric.transformer.regime_scaling.scaling_empirical_figure",
}


def _own(module) -> list[str]:
    """The callables of ``module.__all__`` defined in ``module`` (not re-exported)."""
    names = []
    for n in getattr(module, "__all__", ()):
        obj = getattr(module, n)
        if callable(obj) and getattr(obj, "__module__", None) == module.__name__:
            names.append(n)
    return names


def _submodules(package: str) -> list:
    pkg = importlib.import_module(package)
    return [importlib.import_module(f"{package}.{m.name}")
            for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]


def _scope() -> dict[str, object]:
    """Qualified name -> callable, for every callable that must carry an example."""
    out: dict[str, object] = {}
    for package in ("attndyn.symbolic", "attndyn.numeric.attention.theorems",
                    "attndyn.numeric.scaling", "attndyn.numeric.transformer"):
        for mod in _submodules(package):
            for n in _own(mod):
                out[f"{mod.__name__}.{n}"] = getattr(mod, n)
    tr = importlib.import_module("attndyn.numeric.transformer")
    for n in tr.__all__:
        obj = getattr(tr, n)
        out[f"{obj.__module__}.{n}"] = obj
    for m in ("labelled", "results", "plots", "claims", "checks", "display", "threads",
              "compile", "progress"):
        mod = importlib.import_module(f"attndyn.numeric.core.{m}")
        for n in _own(mod):
            out[f"{mod.__name__}.{n}"] = getattr(mod, n)
    return out


def _has_example(obj) -> bool:
    return ">>>" in (obj.__doc__ or "")


SCOPE = _scope()
_TOP = {id(getattr(attndyn, n)) for n in attndyn.__all__ if n != "__version__"}
RUN = sorted(q for q, obj in SCOPE.items() if q not in EXEMPT and id(obj) not in _TOP)


def _tests(qualname: str) -> list:
    obj = SCOPE[qualname]
    finder = doctest.DocTestFinder(recurse=False, exclude_empty=True)
    return [t for t in finder.find(obj, qualname, module=inspect.getmodule(obj)) if t.examples]


def test_scope_is_what_the_rule_says():
    """The rule finds the layers' callables (a broken walk would find none) and the
    exemptions name real callables with a reason."""
    for prefix, least in (("attndyn.symbolic.", 150), ("attndyn.numeric.attention.theorems.", 40),
                          ("attndyn.numeric.scaling.", 30), ("attndyn.numeric.transformer.", 35),
                          ("attndyn.numeric.core.", 10)):
        assert sum(q.startswith(prefix) for q in SCOPE) >= least, prefix
    assert set(EXEMPT) <= set(SCOPE) and all(len(r) > 10 for r in EXEMPT.values())
    assert SLOW <= set(RUN)


def test_every_callable_has_an_example():
    missing = sorted(q for q, obj in SCOPE.items() if q not in EXEMPT and not _has_example(obj))
    assert not missing, f"{len(missing)} of {len(SCOPE)} without a docstring example: {missing}"


def _run(qualname: str) -> None:
    tests = _tests(qualname)
    assert tests, f"{qualname}: the docstring has no example"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for t in tests:
        runner.run(t, out=lambda s: print(s, end=""))
    res = runner.summarize(verbose=False)
    plt.close("all")  # the plotting examples' figures
    assert res.failed == 0 and res.attempted >= 1, (qualname, res)


@pytest.mark.parametrize("qualname", [q for q in RUN if q not in SLOW and _has_example(SCOPE[q])])
def test_example_runs(qualname):
    _run(qualname)


@pytest.mark.slow
@pytest.mark.parametrize("qualname", sorted(SLOW))
def test_slow_example_runs(qualname):
    _run(qualname)
