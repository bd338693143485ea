"""The per-call path of ``TiedHierarchy.integrate`` (issue 29 item 6): kept chunk runners,
one-pass bound checks, fewer copies and conversions. Each result must be what the plain
composition gives, bit for bit: the kernel's own output, the old four-reduction growth
flag, the old messages and diagnostics, and the old errors for bad arguments."""

import re

import numpy as np
import pytest

import attndyn
from attndyn.kernels.integrate import run_rk, status_message
from attndyn.kernels.taylor import run_taylor, taylor_order
from attndyn.numeric.attention.tied.hierarchy import GROWTH_PER_LETTER, bound_code
from attndyn.numeric.core.validate import check_max_steps, check_pos_float
from attndyn.symbolic.initial import FreeInit, scalar, wishart

LAW = FreeInit([wishart(0.5, 0.5), scalar(1)])
UNCHECKED = ("success: the integration reached the last output time; convergence not "
             "checked: the truncation order was not compared with another one (check=None) "
             "(pass check=order+2 with matrices or a moment function)")
KEYS = ["steps", "nfev", "rejected", "t_reached", "order", "integrator", "taylor_order",
        "threads", "potential"]


def linear(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


@pytest.fixture(scope="module")
def model():
    return attndyn.TiedModel(2, [0], linear)


def test_bound_code_is_the_min_max_test():
    """``bound_code(a, b) == 2`` iff ``-b <= a.min() and a.max() <= b`` (False with a NaN,
    as numpy's reductions are NaN then), ``== 0`` iff an entry is not finite."""
    rng = np.random.default_rng(7)
    cases = [np.array([1.0]), np.array([-1.0, 1.0]), np.array([1.0000000000000002]),
             np.array([-0.0]), np.array([np.nan]), np.array([0.5, np.inf]),
             np.array([-np.inf, 0.0]), np.array([2.0, np.nan, -3.0]),
             np.array([1e4, -1e4]), np.array([1e4 * (1 + 2e-16)])]
    for n in (1, 7, 64, 1000):
        a = rng.uniform(-1.2, 1.2, n)
        cases += [a, a * 1e4, np.clip(a, -1, 1)]
        for bad in (np.nan, np.inf, -np.inf, 5.0):
            b = np.clip(a, -1, 1)
            b[rng.integers(n)] = bad
            cases.append(b)
    for a in cases:
        for bound in (1.0, GROWTH_PER_LETTER):
            code = bound_code(a, bound)
            assert (code == 2) == bool(-bound <= a.min() and a.max() <= bound), (a, bound)
            assert (code == 0) == (not np.isfinite(a).all()), (a, bound)
    assert bound_code(np.zeros(0), 1.0) == 2  # no entry outside


def _same_result(r, ys, info, tinfo, t, order, name, rtol, atol, p):
    n = int(info[1])
    assert r.status == 0 and n == len(t)
    assert r.y.flags.c_contiguous and r.y.tobytes() == ys[:n].T.copy().tobytes()
    assert r.t.tobytes() == np.asarray(t, dtype=float).tobytes()
    assert r.message == UNCHECKED
    keys = KEYS if name == "taylor" else [k for k in KEYS if k != "taylor_order"]
    assert list(r.diagnostics) == keys
    d = r.diagnostics
    assert (d["steps"], d["nfev"], d["rejected"]) == tuple(int(v) for v in info[2:5])
    assert d["t_reached"] == float(tinfo[0]) and d["order"] == order
    assert d["integrator"] == name and d["threads"] == 1
    assert all(type(d[k]) is int for k in ("steps", "nfev", "rejected", "threads"))
    if name == "taylor":
        assert d["taylor_order"] == p
    assert list(r.params)[-4:] == ["order", "rtol", "atol", "integrator"]
    assert (r.params["order"], r.params["rtol"], r.params["atol"],
            r.params["integrator"]) == (order, rtol, atol, name)


@pytest.mark.parametrize("order", [4, 8, 12])
def test_each_run_is_the_kernels_own_result(model, order):
    """Alternating integrators and tolerances (the kept runners are reused and told
    apart), lists and arrays of times: every result is the kernel's, unchanged."""
    h = model.hierarchy(order)
    y0 = h.initial_state(LAW)
    for name, rtol, t in [("taylor", 1e-10, [0.0, 0.05, 0.1]), ("taylor", 1e-8, [0.0, 0.1]),
                          ("dopri5", 1e-10, np.array([0.0, 0.1])),
                          ("taylor", 1e-10, np.array([0.02, 0.1])),
                          ("dop853", 1e-8, [0.0, 0.1]), ("taylor", 1e-8, [0.1])]:
        atol = rtol * 1e-2
        r = h.integrate(y0, t, rtol=rtol, atol=atol, check=None, method="truncation",
                        integrator=name)
        te = np.array(t, dtype=float)
        if name == "taylor":
            ys, info, tinfo, _, p = run_taylor(h._taylor_system, h._gamma_program, y0, te,
                                               rtol, 200, 1e100, np.inf)
            assert p == taylor_order(rtol)
        else:
            ys, info, tinfo, _ = run_rk(name, h._system, y0, te, rtol, atol, 200, 1e100,
                                        np.inf)
            p = None
        _same_result(r, ys, info, tinfo, t, order, name, rtol, atol, p)
        if isinstance(t, np.ndarray):
            assert r.t is not t and not np.shares_memory(r.t, t)


def test_results_share_nothing(model):
    h = model.hierarchy(8)
    y0 = h.initial_state(LAW)
    r1, r2 = (h.integrate(y0, [0.0, 0.1], check=None, method="truncation") for _ in range(2))
    assert not np.shares_memory(r1.y, r2.y) and not np.shares_memory(r1.t, r2.t)
    assert r1.params == r2.params and r1.params is not r2.params
    assert r1.params["trainable"] is not r2.params["trainable"]
    assert r1.diagnostics is not r2.diagnostics
    y, params = r2.y.copy(), dict(r2.params)
    r1.y[:] = 0.0
    r1.params["trainable"].append(1)
    r1.diagnostics["steps"] = -1
    assert np.array_equal(r2.y, y) and r2.params == params and r2.diagnostics["steps"] > 0
    assert not np.shares_memory(h.integrate(y0, [0.0, 0.1], check=None).y, y0)


def _old_growth_flag(lens, y0, Y):
    """The flag as it was: four numpy reductions, then the bound entry by entry.
    ``(r0, j, i)``: first time past it and the worst moment there, or None."""
    bound = GROWTH_PER_LETTER ** lens
    if y0.size and not (-1.0 <= y0.min() and y0.max() <= 1.0):
        with np.errstate(divide="ignore"):
            r0 = max(1.0, float(np.max(np.abs(y0) ** (1.0 / lens))))
        bound = (GROWTH_PER_LETTER * r0) ** lens
    else:
        r0 = 1.0
        if -GROWTH_PER_LETTER <= Y.min() and Y.max() <= GROWTH_PER_LETTER:
            return None
    ok = np.abs(Y) <= bound[:, None]
    if ok.all():
        return None
    j = int(np.argmax(~ok.all(axis=0)))
    ratio = np.abs(Y[:, j]) / bound
    return r0, j, int(np.nanargmax(np.where(np.isfinite(ratio), ratio, np.inf)))


@pytest.mark.parametrize("scale,T", [(1.0, 5.0), (1.0, 10.0), (3.0, 5.0), (3.0, 10.0)])
def test_growth_flag_is_the_four_reduction_flag(model, scale, T):
    """Both branches (a start within [-1, 1], r0 = 1; and beyond it), with and without
    growth past the bound: the same cut, word, status and message as the old flag on the
    same unflagged run (a lower-order check keeps every output time)."""
    h = model.hierarchy(8)
    y0 = h.initial_state(LAW) * scale
    t = np.linspace(0.0, T, 9)
    full = h.integrate(y0, t, check=[6], method="truncation")
    r = h.integrate(y0, t, check=None, method="truncation")
    lens = np.array([len(w) for w in h.words], dtype=float)
    old = _old_growth_flag(lens, y0, full.y)
    if old is None:
        assert r.status == 0 and r.y.tobytes() == full.y.tobytes()
        assert "growth_bound" not in r.diagnostics
        return
    r0, j, i = old
    assert j > 0 and r.status == -3
    assert r.t.tobytes() == t[:j].tobytes() and r.y.tobytes() == full.y[:, :j].tobytes()
    assert r.diagnostics["growth_bound"] == {"r0": r0, "per_letter": GROWTH_PER_LETTER,
                                             "t": float(t[j]), "word": h.names[i]}
    assert r.message.startswith(f"the moments grew beyond (1e4 r0)^n on words of length n "
                                f"(r0 = {r0:.3g}, the initial scale): {h.names[i]} = "
                                f"{full.y[i, j]:.3g} at t = {t[j]:.4g}; ")


BAD_FLOATS = [0.0, -1.0, np.nan, np.inf, -np.inf, True, "1e-8", None, 1j, np.float64(np.nan),
              np.float32(-1.0)]


@pytest.mark.parametrize("name", ["rtol", "atol", "blowup", "conv_tol"])
def test_bad_tolerances_meet_the_full_check(model, name):
    h = model.hierarchy(4)
    y0 = h.initial_state(LAW)
    for bad in BAD_FLOATS:
        with pytest.raises((TypeError, ValueError)) as want:
            check_pos_float(bad, name)
        with pytest.raises(want.type, match=re.escape(str(want.value))):
            h.integrate(y0, [0.0, 0.1], **{name: bad})


def test_bad_step_caps_meet_the_full_check(model):
    h = model.hierarchy(4)
    y0 = h.initial_state(LAW)
    for bad in [0, -3, 2 ** 62 + 1, True, 1.0, np.float64(5.0), "10", None]:
        with pytest.raises((TypeError, ValueError)) as want:
            check_max_steps(bad)
        with pytest.raises(want.type, match=re.escape(str(want.value))):
            h.integrate(y0, [0.0, 0.1], max_steps=bad)


def test_numpy_scalars_give_the_python_number_result(model):
    h = model.hierarchy(8)
    y0 = h.initial_state(LAW)
    kw = dict(check=None, method="truncation")
    a = h.integrate(y0, [0.0, 0.1], rtol=1e-9, atol=1e-11, max_steps=1000, blowup=1e50, **kw)
    b = h.integrate(y0, [0.0, 0.1], rtol=np.float64(1e-9), atol=np.float64(1e-11),
                    max_steps=np.int64(1000), blowup=np.float64(1e50), **kw)
    assert a.y.tobytes() == b.y.tobytes() and a.diagnostics == b.diagnostics
    assert a.params == b.params and type(b.params["rtol"]) is float
    assert status_message(0, 0.0) in a.message


def test_kept_runners_stay_few(model):
    """The chunk runners kept per (integrator, tolerances, blowup, h_max) are bounded."""
    h = model.hierarchy(4)
    y0 = h.initial_state(LAW)
    for k in range(40):
        r = h.integrate(y0, [0.0, 0.1], rtol=10.0 ** (-6 - k / 8), check=None,
                        method="truncation")
        assert r.diagnostics["taylor_order"] == taylor_order(10.0 ** (-6 - k / 8))
    assert 1 <= len(h._runners) <= 16
