"""No code runs from text nested anywhere in a constructor argument (issue 23, D1).

A payload that would create a marker file if it were ever evaluated is nested at depths
1-50 in lists, tuples, dicts and object arrays, and placed past the first 100,000 entries
of an object array, in every argument of the public model constructors."""
import numpy as np
import pytest

from attndyn.numeric import SModel, TiedModel, UntiedModel
from attndyn.symbolic.gaussian import check_covariance
from attndyn.symbolic.parse import as_sympy, reject_strings


def _loss(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def _payload(marker):
    return f"__import__('pathlib').Path({str(marker)!r}).touch()"


def _nest(value, depth, kind):
    for _ in range(depth):
        if kind == "list":
            value = [value]
        elif kind == "tuple":
            value = (value,)
        elif kind == "dict":
            value = {"k": value}
        else:  # object array
            arr = np.empty(1, dtype=object)
            arr[0] = value
            value = arr
    return value


def _matrix_with(value):
    """A 1 x 1 'matrix' whose entry is ``value`` (lists), the shape L = 1 expects."""
    return [[value]]


CONSTRUCTORS = {
    "TiedModel": lambda **kw: TiedModel(kw.pop("K", 2), kw.pop("trainable", [0]),
                                        kw.pop("loss", _loss), **kw),
    "SModel": lambda **kw: SModel(kw.pop("K", 2), kw.pop("trainable", [0]),
                                  kw.pop("loss", _loss), **kw),
    "UntiedModel": lambda **kw: UntiedModel(kw.pop("K", 2), kw.pop("trainable", [0]),
                                            kw.pop("loss", _loss), **kw),
}
ARGS = ["K", "trainable", "L", "C", "weight_decay"]
DEPTHS = [1, 2, 8, 9, 10, 20, 50]
KINDS = ["list", "tuple", "dict", "object-array"]


@pytest.mark.parametrize("ctor", sorted(CONSTRUCTORS))
@pytest.mark.parametrize("arg", ARGS)
def test_nested_text_never_runs(ctor, arg, tmp_path):
    marker = tmp_path / "ran"
    for kind in KINDS:
        for depth in DEPTHS:
            bad = _nest(_payload(marker), depth, kind)
            if arg == "C":
                bad = _matrix_with(bad)
            with pytest.raises((TypeError, ValueError)):
                CONSTRUCTORS[ctor](**{arg: bad})
            assert not marker.exists(), (ctor, arg, kind, depth)


@pytest.mark.parametrize("ctor", sorted(CONSTRUCTORS))
def test_text_past_100000_entries_never_runs(ctor, tmp_path):
    marker = tmp_path / "ran"
    L = 400
    C = np.empty((L, L), dtype=object)
    C[...] = 0.0
    for i in range(L):
        C[i, i] = 1.0
    C[L - 1, L - 1] = _payload(marker)       # entry 159,999: past the first 100,000
    with pytest.raises(TypeError, match=r"C\[399\]\[399\]"):
        CONSTRUCTORS[ctor](K=2, trainable=[0], loss=lambda G: G[0, 0, 0] ** 2, L=L, C=C)
    assert not marker.exists()


def test_covariance_reader_keeps_exact_numbers():
    from fractions import Fraction

    import sympy as sp
    M = check_covariance([[1, Fraction(1, 2)], [sp.Rational(1, 2), 1]], 2)
    assert M[0, 1] == sp.Rational(1, 2) and M[1, 0] == sp.Rational(1, 2)
    M = check_covariance(np.array([[2.0, 0.5], [0.5, 1.0]]), 2)
    assert float(M[0, 0]) == 2.0
    with pytest.raises(ValueError, match="shape"):
        check_covariance([[1, 0, 0], [0, 1, 0]], 2)
    with pytest.raises(TypeError, match="dtype"):
        check_covariance(np.array([["1", "0"], ["0", "1"]]), 2)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth", [1, 9, 50])
def test_as_sympy_and_reject_strings_refuse_nested_text(kind, depth, tmp_path):
    marker = tmp_path / "ran"
    bad = _nest(_payload(marker), depth, kind)
    with pytest.raises(TypeError):
        reject_strings(bad, "value")
    with pytest.raises(TypeError):
        as_sympy(bad, "value")
    assert not marker.exists()
