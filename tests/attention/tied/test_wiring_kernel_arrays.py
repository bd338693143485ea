"""Read-only and memory-mapped arrays where compiled kernels are entered (issue D12): they
matched no numba signature ("No matching definition") and are now copied into plain arrays."""

import numpy as np
import pytest

import attndyn


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


@pytest.fixture(scope="module")
def model():
    return attndyn.TiedModel(2, [0], square)


def _readonly(a):
    a = np.array(a, dtype=np.float64)
    a.setflags(write=False)
    return a


def _memmap(tmp_path, a, name):
    a = np.asarray(a, dtype=np.float64)
    mm = np.memmap(tmp_path / name, dtype=np.float64, mode="w+", shape=a.shape)
    mm[...] = a
    mm.flush()
    return np.memmap(tmp_path / name, dtype=np.float64, mode="r", shape=a.shape)


def test_gamma_accepts_readonly_and_memmap(model, tmp_path):
    q = np.array([[0.5, 0.1], [0.1, 0.7]])
    ref = model.gamma(q)
    assert np.array_equal(model.gamma(_readonly(q)), ref)
    assert np.array_equal(model.gamma(_memmap(tmp_path, q, "q.bin")), ref)
    with pytest.raises(ValueError, match=r"q must have shape \(2, 2\)"):
        model.gamma(np.zeros(3))
    with pytest.raises(ValueError, match="q must be finite"):
        model.gamma(np.full((2, 2), np.nan))


def test_rhs_and_integrate_accept_readonly_and_memmap(model, tmp_path):
    h = model.hierarchy(4)
    S = [np.diag([1.0, 0.5, 0.2]), np.diag([0.3, 0.8, 0.1])]
    y = h.initial_state(S)
    ref = h.rhs(y)
    assert np.array_equal(h.rhs(_readonly(y)), ref)
    assert np.array_equal(h.rhs(_memmap(tmp_path, y, "y.bin")), ref)
    t = np.linspace(0.0, 0.5, 4)
    base = h.integrate(y, t, check=None, method="truncation")
    for y0, tt in ((_readonly(y), _readonly(t)),
                   (_memmap(tmp_path, y, "y0.bin"), _memmap(tmp_path, t, "t.bin"))):
        r = h.integrate(y0, tt, check=None, method="truncation")
        assert r.status == 0 and np.array_equal(r.y, base.y)
    # read-only matrices S_k as the initial state (moments, then the kernel)
    ro = [_readonly(s) for s in S]
    assert np.array_equal(h.initial_state(ro), y)
    r = h.integrate(ro, _readonly(t), check=None, method="truncation")
    assert r.status == 0 and np.array_equal(r.y, base.y)


def test_hermite_gamma_accepts_readonly(tmp_path):
    from attndyn.numeric.attention.potentials.hermite import hermite_potential
    from attndyn.symbolic.losses import mse_teacher_student
    pot = hermite_potential(mse_teacher_student("erf"), 2, 1, q_max=1.0)
    q = np.array([[0.5, 0.1], [0.1, 0.7]])
    ref = pot.gamma(q)
    assert np.array_equal(pot.gamma(_readonly(q)), ref)
    assert np.array_equal(pot.gamma(_memmap(tmp_path, q, "hq.bin")), ref)
