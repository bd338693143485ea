"""The first-touch order of the moments (kernels/rhs.py, ``touch_order``): from
``PERMUTE_TERMS`` terms on the kernels run on the state renumbered so that a run of rows
reads nearby sources. Each row keeps its terms in their order, so the RHS and the Taylor
integrator give the state-order bits; the Runge-Kutta error norm sums in another order, so
DP5(4) and DOP853 agree to rounding."""

import numpy as np
import pytest

from attndyn.kernels import rhs as R
from attndyn.kernels.integrate import run_rk
from attndyn.kernels.taylor import run_taylor


def _tied(order, loss, weight_decay=0.0):
    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    m = attndyn.TiedModel(2, [0], loss, weight_decay=weight_decay)
    h = m.hierarchy(order)
    return h, h.initial_state(FreeInit([wishart(0.5, 0.5), scalar(1)]))


def _linear(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def _quartic(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2 + (G[0, 0, 0] - G[0, 0, 1]) ** 4 / 4


def _bits(a):
    return np.ascontiguousarray(a).view(np.int64)


def test_touch_order_is_a_renumbering():
    rng = np.random.default_rng(3)
    n = 300
    rows = rng.permutation(n).astype(np.uint32)
    src = rng.integers(0, n // 2, 2000).astype(np.uint32)  # half the moments never read
    gather = np.array([5, -1, 17, 299], dtype=np.int64)
    o = R.touch_order(rows, src, gather, n)
    assert np.array_equal(np.sort(o.new), np.arange(n))
    assert np.array_equal(o.perm[o.new], np.arange(n))
    assert np.array_equal(o.src, o.new[src]) and np.array_equal(o.rows, o.new[rows])
    assert o.gather.tolist() == [o.new[5], -1, o.new[17], o.new[299]]
    # first references get 0, 1, 2, ... in the order of the terms
    first = list(dict.fromkeys(src.tolist()))
    assert np.array_equal(o.new[first], np.arange(len(first)))
    assert o.src.dtype == np.uint32 and o.gather.dtype == np.int64


@pytest.mark.parametrize("loss", [_linear, _quartic])
def test_first_touch_order_gives_the_same_bits(monkeypatch, loss):
    h, y0 = _tied(8, loss, weight_decay=0.5)
    s = R.fused_system(h._system)
    t = np.array([0.0, 0.03, 0.1])
    prog = h._gamma_program
    assert prog is not None
    ref_dy = R.rhs_into(s, y0, threads=1)
    ref_ty = run_taylor(s, prog, y0, t, 1e-10, 1000, 1e100, np.inf, threads=1)
    ref_rk = {m: run_rk(m, s, y0, t, 1e-10, 1e-12, 10 ** 5, 1e100, np.inf, threads=1)
              for m in ("dopri5", "dop853")}
    monkeypatch.setattr(R, "PERMUTE_TERMS", 0)
    touch = R.permuted_args(s)[0]
    assert touch is not None and not np.array_equal(touch.perm, np.arange(y0.size))
    dy = np.full(y0.size, np.nan)
    R.rhs_into(s, y0, dy=dy, threads=1)
    assert np.array_equal(_bits(dy), _bits(ref_dy))
    ty = run_taylor(s, prog, y0, t, 1e-10, 1000, 1e100, np.inf, threads=1)
    for a, b in zip(ty[:4], ref_ty[:4]):
        assert np.array_equal(_bits(a), _bits(b))
    assert ty[0].flags.c_contiguous  # back in state order, still C-ordered
    for m, ref in ref_rk.items():
        got = run_rk(m, s, y0, t, 1e-10, 1e-12, 10 ** 5, 1e100, np.inf, threads=1)
        assert got[0].flags.c_contiguous
        assert got[1][0] == 0 and got[1][1] == t.size
        assert abs(int(got[1][2]) - int(ref[1][2])) <= 1  # steps: the same up to rounding
        assert np.allclose(got[0], ref[0], rtol=1e-9, atol=1e-12)
        assert np.allclose(got[3], ref[3], rtol=1e-9, atol=1e-12)
