"""The direct-S theory (paper 003, appendix E): the closed ODE (402)-(404) in ``(t, Psi,
Omega)`` (``"ode"``) and the S matrix flow (``"flow"``), with the mini-batch noise
corrections of :mod:`.noise` (``"noise"``, ``"noise+finite-d"``) and Assumption 9.4.
Built by ``SModel.theory``."""

from __future__ import annotations

from functools import cached_property

from attndyn.numeric.attention.assumptions import (Verdict, assumption_2_1, poly_bounds,
                                                   spectral_norm)
from attndyn.numeric.attention.base import FeasibleSpec, NONE, Theory
from attndyn.numeric.attention.direct.noise import (DirectNoise, DirectNoiseCoefficients,
                                                    DirectNoiseFiniteD)

__all__ = ["DirectTheory", "assumption_9_4", "direct_diagnostics"]


def assumption_9_4(model, init) -> Verdict:
    """``gamma > gamma*`` for direct optimisation over ``S`` (Assumption 9.4), with the
    sufficient value of the proof (eq. 448): ``C_* = 2 C_0 + 1`` (``C_0 = max_k
    ||S_k(0)||_op``) and ``C_H / gamma <= (C_* - C_0)/4``, where ``C_H`` bounds
    ``||sum_l H_kl (S_l + S_l^T)||_op <= 2 C_* max_k sum_l sup |H_kl|`` over
    ``|Psi|, |Omega| <= C_*^2`` (``H_kl = E[d^2 loss/dG_k dG_l]``, polynomial bound)."""

    mats = model.check_matrices(init)
    C0 = max(spectral_norm(S) for S in mats)
    Cs = 2.0 * C0 + 1.0
    gamma = float(model.weight_decay)
    pot = model.potential
    grad = getattr(pot, "gradients", {}).get("Omega") if pot is not None else None
    K = model.K
    if grad is None or getattr(pot, "params", ()):
        return Verdict("9.4", None, f"gamma = {gamma:g}; no closed-form H: gamma* not computed",
                       {"gamma": gamma, "C0": C0})
    syms = sorted(set().union(*[grad[k, l].free_symbols for k in range(K) for l in range(K)])
                  | set(pot.phi.free_symbols), key=lambda s: s.name)
    rowsum = 0.0
    for k in range(K):
        tot = 0.0
        for l in range(K):
            b = poly_bounds(2 * grad[k, l], syms, Cs * Cs)   # H = 2 grad_Omega Phi
            if b is None:
                return Verdict("9.4", None, f"gamma = {gamma:g}; H is not a polynomial in "
                               "(Psi, Omega): gamma* not computed", {"gamma": gamma})
            tot += b[0]
        rowsum = max(rowsum, tot)
    CH = 2.0 * Cs * rowsum
    gstar = 4.0 * CH / (Cs - C0)
    ok = gamma > gstar
    msg = (f"gamma = {gamma:g} {'>' if ok else '<='} gamma* = {gstar:.4g} (sufficient value "
           f"from eq. 448: C_0 = {C0:.3g}, C_* = {Cs:.3g}, C_H = {CH:.4g})"
           + ("" if ok else "; the spectral control of Theorem 4's proof does not apply"))
    return Verdict("9.4", bool(ok), msg, {"gamma": gamma, "gamma_star": gstar, "C0": C0,
                                          "C_star": Cs, "C_H": CH})


def direct_diagnostics(model, init, quick=False):
    """Theorem 4 (direct S): Assumptions 9.1 and 9.4."""
    return [assumption_2_1(model, label="9.1"), assumption_9_4(model, init)]


class DirectTheory(Theory):
    """The theories of an :class:`~attndyn.SModel`: the closed ODE (402)-(404) (``"ode"``,
    default) and the S matrix flow (``"flow"``); the noise corrections apply to the
    closed ODE."""

    names = ("ode", "flow")
    corrections = {"none": NONE, "noise": DirectNoise(), "noise+finite-d": DirectNoiseFiniteD()}
    feasible = FeasibleSpec(grams=(("Omega", "Psi", +1), ("Omega", "Psi", -1)),
                           text="direct S: (Omega + Psi)/2 and (Omega - Psi)/2 PSD (Gram "
                                "matrices of the symmetric and antisymmetric parts); exact")

    def _repr_html_(self):
        from attndyn.numeric.core.display import html_summary
        return html_summary("DirectTheory", {"methods": list(self.names),
                                         "corrections": list(self.corrections),
                                         "model": repr(self.model)})

    @cached_property
    def noise_coefficients(self) -> DirectNoiseCoefficients:
        """The noise coefficients ``Lambda^{Psi,Omega}`` of the model, built once."""
        return DirectNoiseCoefficients(self.model)

    def check(self, name, order):
        name = "ode" if name is None else name
        if name not in self.names:
            raise ValueError(f"theory for an SModel must be 'ode' or 'flow', got {name!r}")
        if order is not None:
            raise ValueError("order does not apply to an SModel")
        return name, None

    def uncorrected(self, init, t, *, name, order, check, words, **options):
        """The closed ODE (``"ode"``) or the S matrix flow (``"flow"``)."""
        if name == "ode":
            return self.model.integrate(init, t, **options)
        return self.model.matrix_flow(init, t, **options)

    def matrix_flow(self, matrices, t_eval, **options):
        return self.model.matrix_flow(matrices, t_eval, **options)

    def assumptions(self, init, quick: bool = False) -> list:
        """Theorem 4's Assumptions 9.1 and 9.4 at ``init`` (the matrices S_k)."""
        return direct_diagnostics(self.model, init, quick)

    def landscape_potential(self):
        return self.model.potential
