"""Every scaling-law bound at extreme arguments against mpmath (issue 25, item 4): inputs
whose plain formula overflows or underflows in an intermediate (so the extended-exponent path
runs) while the true value is a normal float. Each reference is the documented formula
evaluated at 60 digits from the exact float inputs.
"""

import math

import mpmath
import numpy as np
import pytest

from attndyn.numeric.scaling import bounds as sb

mp = mpmath.mp


def F(x):
    return mpmath.mpf(float(x))


def W(z):
    return mpmath.lambertw(z).real


def n_star(C, xi, L, d):
    C, xi, L, d = F(C), F(xi), F(L), F(d)
    return xi ** 2 / (L * d) * mpmath.exp(W(6 * (L * d) ** 6 * C / xi ** 10) / 6)


def n_paper(C, xi):
    C, xi = F(C), F(xi)
    return xi ** 2 * mpmath.exp(W(C / xi ** 10) / 6)


def c_star(N, xi, L, d):
    N, xi, L, d = F(N), F(xi), F(L), F(d)
    return N ** 6 * mpmath.log(N * L * d / xi ** 2) / xi ** 2


def stage1(C, N, xi, alpha, prefactor, loss0):
    return F(prefactor) * F(loss0) * mpmath.exp(-F(alpha) * F(xi) ** 2 * F(C) / F(N) ** 6)


N53 = 10.0 ** (320 / 6)        # N^6 = 1e320: xi = 1e160 gives xi^2 C / N^6 ~ C

CASES = [
    # threshold and inverses
    ("threshold_compute", dict(N=1e60, xi=1e28, L=1.0, d=1.0), lambda a: c_star(**a)),
    ("threshold_compute", dict(N=1e-20, xi=1e-30, L=3.0, d=1e5), lambda a: c_star(**a)),
    ("critical_data_size", dict(C=1e-10, xi=1e-40, L=2.0, d=3.0), lambda a: n_star(**a)),
    ("critical_data_size", dict(C=1e300, xi=1e30, L=1e3, d=1e3), lambda a: n_star(**a)),
    ("paper_critical_data_size", dict(C=1e-10, xi=1e-40), lambda a: n_paper(**a)),
    ("paper_form_ratio", dict(C=1e-10, xi=1e-40, L=2.0, d=3.0),
     lambda a: n_paper(a["C"], a["xi"]) / n_star(**a)),
    ("threshold_time", dict(N=1e170, xi=1e80, L=1.0, d=1.0),
     lambda a: F(a["N"]) ** 2 * mpmath.log(F(a["N"]) / F(a["xi"]) ** 2) / F(a["xi"]) ** 2),
    # bounds
    ("training_loss_bound", dict(T=1e-310, eps=1e155, alpha=1.0, loss0=2.0),
     lambda a: F(a["loss0"]) * mpmath.exp(-F(a["alpha"]) * F(a["eps"]) ** 2 * F(a["T"]))),
    ("training_loss_bound", dict(T=1e300, eps=1e-160, alpha=3.0, loss0=1e300),
     lambda a: F(a["loss0"]) * mpmath.exp(-F(a["alpha"]) * F(a["eps"]) ** 2 * F(a["T"]))),
    ("approximation_bound", dict(M=3e-154), lambda a: 1 / F(a["M"]) ** 2),
    ("generalisation_bound", dict(M=1.0, N=1e250, xi=1e-100, L=1e200, d=1e200),
     lambda a: (4 / F(a["M"]) + F(a["xi"])) / F(a["M"]) + F(a["L"]) * F(a["d"]) * F(a["xi"]) / F(a["N"])),
    ("stage_one_bound", dict(C=1.0, N=N53, xi=1e160, alpha=1.0, prefactor=1.0, loss0=1.0),
     lambda a: stage1(**a)),
    ("stage_one_bound", dict(C=2.5, N=N53, xi=1e160, alpha=0.7, prefactor=3.0, loss0=0.5),
     lambda a: stage1(**a)),
    ("stage_one_bound", dict(C=1e300, N=1e-3, xi=1e-170, alpha=1.0, prefactor=1.0, loss0=1.0),
     lambda a: stage1(**a)),
    ("stage_one_bound", dict(C=500.0, N=1.0, xi=1.0, alpha=1.0, prefactor=1e200, loss0=1e200),
     lambda a: stage1(**a)),
    ("stage_two_bound", dict(C=1e-10, xi=1e-40, L=2.0, d=3.0, c_stat=0.7),
     lambda a: F(a["c_stat"]) * F(a["xi"]) ** 2 / n_star(a["C"], a["xi"], a["L"], a["d"])),
    ("stage_two_bound_paper", dict(C=1e-10, xi=1e-40, c_stat=0.7),
     lambda a: F(a["c_stat"]) * F(a["xi"]) ** 2 / n_paper(a["C"], a["xi"])),
    ("threshold_jump", dict(N=1e10, xi=1e-5, L=1e200, d=1e200, alpha=0.8, prefactor=1e300,
                            loss0=1.0, c_stat=0.5),
     lambda a: F(a["prefactor"]) * F(a["loss0"]) / (F(a["c_stat"]) * F(a["L"]) * F(a["d"]))
     * (F(a["N"]) * F(a["L"]) * F(a["d"]) / F(a["xi"]) ** 2) ** (1 - F(a["alpha"]))),
    ("continuity_constant", dict(L=1e200, d=1e200, prefactor=1e300, loss0=1e5),
     lambda a: F(a["prefactor"]) * F(a["loss0"]) / (F(a["L"]) * F(a["d"]))),
    # laws
    ("time_law", dict(T=1e-20, N=1e190, xi=1e200, c_stat=1e-300, alpha=1.0, prefactor=1.0,
                      loss0=1.0),
     lambda a: mpmath.exp(-F(a["alpha"]) * (F(a["xi"]) / F(a["N"])) ** 2 * F(a["T"]))
     + F(a["c_stat"]) * F(a["xi"]) ** 2 / F(a["N"])),
    ("time_law", dict(T=1e-40, N=1e190, xi=1e200, c_stat=1e-300, literal=True),
     lambda a: mpmath.exp(-(F(a["xi"]) / F(a["N"])) ** 4 * F(a["T"]))
     + F(a["c_stat"]) * F(a["xi"]) ** 2 / F(a["N"])),
    ("data_law", dict(N=1e250, xi=1e200, c_stat=3.0),
     lambda a: F(a["c_stat"]) * F(a["xi"]) ** 2 / F(a["N"])),
    ("model_law", dict(M=1e308, xi=1e200, zeta=0.33),
     lambda a: F(a["xi"]) ** 2 * F(a["M"]) ** (-F(a["zeta"]))),
    ("model_law_boundary", dict(N=1e30, zeta=0.2), lambda a: F(a["N"]) ** (F(1.5) / F(a["zeta"]))),
    ("model_law_crossover", dict(N=1e30, zeta=0.2), lambda a: F(a["N"]) ** (1 / F(a["zeta"]))),
    ("noise_drag_data", dict(N=1e300, xi0=1e200, power=0.2, c_stat=1.0),
     lambda a: F(a["c_stat"]) * F(a["xi0"]) ** 2 * F(a["N"]) ** (2 * F(a["power"]) - 1)),
    ("noise_drag_compute", dict(C=1e-10, xi0=1e-38, L=2.0, d=3.0, power=0.2, c_stat=0.7),
     lambda a: (lambda xi: F(a["c_stat"]) * xi ** 2 / n_star(a["C"], xi, a["L"], a["d"]))(
         F(a["xi0"]) * F(a["C"]) ** F(a["power"]))),
    # the inverse problem on the frontier: C*(N_t), N_t = c_stat xi^2 / target
    ("compute_for_target", dict(target=1e-100, xi=1e-30, L=1.0, d=1.0, c_stat=1.0),
     lambda a: c_star(F(a["c_stat"]) * F(a["xi"]) ** 2 / F(a["target"]), a["xi"], a["L"], a["d"])),
]


@pytest.mark.parametrize("name,args,ref", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bound_at_extreme_arguments_against_mpmath(name, args, ref):
    with mpmath.workdps(60):
        want = ref(args)
    want = float(want)
    assert math.isfinite(want) and want != 0.0 and abs(want) > 1e-300, (name, want)
    got = float(getattr(sb, name)(**args))
    assert got == pytest.approx(want, rel=1e-12), (name, args, got, want)


def test_stage_one_extreme_cases_leave_the_plain_float_range():
    """The stage-I cases above take the extended path: xi^2 or N^6 or prefactor * loss0 is
    outside the float range in the plain formula (so a slip there is what is tested)."""
    with np.errstate(over="ignore", under="ignore"):
        assert not np.isfinite(np.float64(1e160) ** 2)
        assert np.float64(1e-170) ** 2 < 1e-300
        assert not np.isfinite(np.float64(1e200) * 1e200)


def test_stage_and_validity_flags_at_extreme_arguments():
    """stage, time_law_valid, data_law_valid, model_law_valid decided on either side of
    thresholds that only exist beyond the float range of their plain intermediates."""
    N, xi = 1e60, 1e28
    with mpmath.workdps(60):
        cs = float(c_star(N, xi, 1.0, 1.0))
    assert sb.stage(0.999 * cs, N, xi, 1.0, 1.0) == 1
    assert sb.stage(1.001 * cs, N, xi, 1.0, 1.0) == 2
    # M >= m_const N^3 with N^3 = 1e360
    assert bool(sb.time_law_valid(1e300, 1e120, m_const=0.99e-60)) is True
    assert bool(sb.time_law_valid(1e300, 1e120, m_const=1.01e-60)) is False
    # T >= t_const N^2 / xi with N^2 = 1e240, xi = 1e140
    assert bool(sb.data_law_valid(1e300, 1e120, 1e100, 1e140, m_const=1e-70,
                                  t_const=0.99)) is True
    assert bool(sb.data_law_valid(1e300, 1e120, 1e100, 1e140, m_const=1e-70,
                                  t_const=1.01)) is False
    # M < N^(3/(2 zeta)) = 1e225
    assert bool(sb.model_law_valid(0.99e225, 1e30, 0.2)) is True
    assert bool(sb.model_law_valid(1.01e225, 1e30, 0.2)) is False


def test_two_stage_bound_and_fixed_n_inverse_at_extreme_arguments():
    """Below C*(N) the two-stage bound is stage I, above it c_stat xi^2 / N; the fixed-N
    inverse is N^6 log(prefactor loss0 / target) / (alpha xi^2) when that is below C*(N)."""
    N, xi, L, d = N53, 1e160, 1e200, 1e200
    kw = dict(alpha=1.0, prefactor=1.0, loss0=1.0, c_stat=1e-300)
    with mpmath.workdps(60):
        cs = c_star(N, xi, L, d)
        assert cs > 10
        want1 = float(stage1(2.0, N, xi, 1.0, 1.0, 1.0))
        want2 = float(F(1e-300) * F(xi) ** 2 / F(N))
        c1 = float(F(N) ** 6 * mpmath.log(1 / F(1e-3)) / F(xi) ** 2)
    assert float(sb.two_stage_bound(2.0, N, xi, L, d, **kw)) == pytest.approx(want1, rel=1e-12)
    assert float(sb.two_stage_bound(float(cs) * 1.01, N, xi, L, d, **kw)) == pytest.approx(
        want2, rel=1e-12)
    got = float(sb.compute_for_target(1e-3, xi, L, d, N=N, **kw))
    assert got == pytest.approx(c1, rel=1e-12)
