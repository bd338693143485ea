"""Every public name (``attndyn.__all__``) carries a docstring example that runs (issue 30,
item 2): the doctests of each object's own docstring, found by ``doctest.DocTestFinder``
(methods not included), run with ELLIPSIS and NORMALIZE_WHITESPACE. The examples are
small (d <= 16, a few steps): about 2 s of CPU for all of them once the numba caches are
warm. The public callables of the layers below (symbolic, theorem checks, scaling,
transformer, core) are covered by test_docstring_examples.py."""

from __future__ import annotations

import doctest
import inspect

import matplotlib
import pytest

import attndyn

matplotlib.use("Agg")

#: public names that cannot carry a docstring of their own (a ``str``)
NO_DOCSTRING = {"__version__"}
PUBLIC = [n for n in attndyn.__all__ if n not in NO_DOCSTRING]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _tests(name: str) -> list:
    obj = getattr(attndyn, name)
    finder = doctest.DocTestFinder(recurse=False, exclude_empty=True)
    # the globals of the defining module, as ``python -m doctest`` would use
    return [t for t in finder.find(obj, name, module=inspect.getmodule(obj)) if t.examples]


def test_every_public_name_is_covered():
    assert set(attndyn.__all__) - NO_DOCSTRING == set(PUBLIC)
    assert isinstance(attndyn.__version__, str)
    assert len(PUBLIC) >= 35


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_example_runs(name):
    tests = _tests(name)
    assert tests, f"attndyn.{name}: the docstring has no example"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for t in tests:
        runner.run(t, out=lambda s: print(s, end=""))
    res = runner.summarize(verbose=False)
    assert res.failed == 0 and res.attempted >= 1, (name, res)


def test_a_wrong_example_fails():
    """The runner reports a wrong expected output (so a pass means something)."""
    t = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "probe", None, 0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(t, out=lambda s: None)
    assert runner.summarize(verbose=False).failed == 1
