"""The untied theory (paper 003, section 4, appendix F): the finite-d flow of the pairs
on the fast time (``"flow"``), its slaved limit ``m = m*(q)`` on the slow time
(``"slaved"``), the slow hierarchy truncated at ``order`` (``"hierarchy"``) and the
``d -> infinity`` limit of the slaved flow from the law of the pairs (``"limit"``), with the
mini-batch noise correction (``"noise"``, :mod:`.noise`). Built by ``UntiedModel.theory``."""

from __future__ import annotations

from functools import cached_property

from attndyn.numeric.attention.base import NONE, FeasibleSpec, Theory
from attndyn.numeric.attention.untied.assumptions import untied_diagnostics
from attndyn.numeric.attention.untied.coefficients import (UntiedCoefficients, UntiedTrajectory,
                                                          with_loss_row)
from attndyn.numeric.attention.untied.fastslow import untied_flow
from attndyn.numeric.attention.untied.finite_width import UntiedFiniteWidth
from attndyn.numeric.attention.untied.hierarchy import hierarchy
from attndyn.numeric.attention.untied.noise import UntiedNoise
from attndyn.numeric.core.validate import check_t_eval
from attndyn.symbolic import untied as su

__all__ = ["UntiedTheory", "THEORIES", "check_theory", "compare_theory"]


THEORIES = ("flow", "slaved", "hierarchy", "limit")


def check_theory(theory, order):
    """``(theory, order)`` for :func:`attndyn.numeric.compare` with an untied model:
    ``"flow"`` (the full finite-d flow, default), ``"slaved"`` (its slow limit with
    ``m = m*(q)``), ``"hierarchy"`` (the truncation at ``order``, default 4) or ``"limit"``
    (``d -> infinity`` from the law of the pairs, :mod:`.limit`)."""
    theory = "flow" if theory is None else theory
    if theory not in THEORIES:
        raise ValueError(f"theory for an UntiedModel must be one of {THEORIES}, got {theory!r}")
    if order is None:
        order = 4 if theory == "hierarchy" else 2
    order = su.check_order(order, "order")
    if theory == "hierarchy":
        su.check_untied_order(order, "order")
    return theory, order


def compare_theory(model, init, t, *, theory: str, order: int, check="auto", words=None,
                   time: str = "slow", correction=None, eta=None, batch=None,
                   **kwargs) -> UntiedTrajectory:
    """The theory trajectory from the SGD pairs ``init`` at the SGD times ``t``.

    ``t`` is on the SGD's time scale: slow ``tau = eta n / d`` (the default of
    :func:`attndyn.sgd`) or fast ``t = eta n``. The full flow runs on the fast
    time (``t * d`` for slow times) and so includes the fast boundary layer; the
    slaved flow, the hierarchy and the limit start on the critical manifold (``m = m*``)
    and need slow times. ``"limit"`` runs :func:`~.limit.limit_flow` from
    ``theory_kwargs["law"]`` or, by default, the Gaussian law of the pairs
    (:func:`~.limit.law_of_pairs`: scales measured, means 0 as in the law). Rows are
    named as the SGD observables, with ``loss = Phi(m, q1, q2)`` appended.

    ``correction="noise"`` (with ``eta``, ``batch``; issue 16, slow time only): the
    mini-batch noise terms of :mod:`attndyn.numeric.attention.untied.noise`, to first
    order in ``eta d / B``. ``theory="hierarchy"``: the truncated hierarchy with the
    noise terms (:func:`~attndyn.numeric.attention.untied.noise.noise_hierarchy`);
    ``"flow"``/``"slaved"``: the flow plus a noise shift chosen by ``noise_method``:
    ``"hierarchy"``, the truncated hierarchy's shift at ``noise_order`` (default
    ``max(order, 6)``, checked against ``noise_order - 1`` unless ``noise_check`` is False;
    :func:`~attndyn.numeric.attention.untied.noise.noise_shift`), a short-time tool;
    ``"flow"``, the linear-noise flow on the pairs at any horizon
    (:func:`~attndyn.numeric.attention.untied.noise_flow.noise_flow_shift`, options
    ``noise_seed``, ``noise_paths``, ``noise_dt``, ``noise_sub_batch``); ``"auto"``
    (default), the hierarchy's where it reaches the horizon with a truncation gap below its
    shift, the flow's otherwise.
    """
    if time not in ("slow", "fast"):
        raise ValueError(f"time must be 'slow' or 'fast', got {time!r}")
    th = model.theory
    return th.correction(correction).apply(th, init, t, name=theory, order=order, check=check,
                                           words=words, eta=eta, batch=batch, time=time,
                                           **kwargs)


def _flow_rows(model, init, t, *, theory, order, check, words, time, **kwargs):
    """The uncorrected theory ``theory`` from the pairs ``init`` at the SGD times ``t``."""
    if time not in ("slow", "fast"):
        raise ValueError(f"time must be 'slow' or 'fast', got {time!r}")
    pairs = model.check_factors(init, "init")
    d = pairs[0][0].shape[0]
    t = check_t_eval(t)
    wl = None if words is None else [w for w in words if len(w)]
    if theory == "flow":
        tf = t * d if time == "slow" else t
        res = untied_flow(model, pairs, tf, mode="full", order=order, words=wl, **kwargs)
        res.t = res.t / d if time == "slow" else res.t
        res.params["time"] = "tau = eta * n / d (slow)" if time == "slow" else "t = eta * n (fast)"
        return res
    if time != "slow":
        raise ValueError(f"theory {theory!r} lives on the slow time (tau = eta n / d); "
                         "use theory='flow' for the fast time")
    if theory == "slaved":
        return untied_flow(model, pairs, t, mode="slaved", order=order, words=wl, **kwargs)
    if theory == "limit":
        from attndyn.numeric.attention.untied.limit import limit_theory  # scipy: lazily
        return limit_theory(model, pairs, t, order=order, words=wl, **kwargs)
    return hierarchy(model, order).integrate(pairs, t, check=check, **kwargs)


class UntiedTheory(Theory):
    """The theories of an :class:`~attndyn.UntiedModel` (see :func:`compare_theory`) and its
    compiled potential (:attr:`coefficients`)."""

    names = THEORIES
    corrections = {"none": NONE, "noise": UntiedNoise(), "finite-d": UntiedFiniteWidth()}
    feasible = FeasibleSpec(grams=(("q1", "q2", +1), ("q1", "q2", -1)), free=("m",),
                           text="untied: m free; (q1 + q2)/2 and (q1 - q2)/2 PSD (Gram "
                                "matrices of the symmetric and antisymmetric parts of M); exact")

    def _repr_html_(self):
        from attndyn.numeric.core.display import html_summary
        return html_summary("UntiedTheory", {"methods": list(self.names),
                                         "corrections": list(self.corrections),
                                         "model": repr(self.model)})

    @cached_property
    def noise_cache(self) -> dict:
        """The noise coefficients of :mod:`.noise`, built on first use."""
        return {}

    @cached_property
    def coefficients(self) -> UntiedCoefficients:
        """The compiled potential and the maps of eqs. (27)-(30), built once."""
        return UntiedCoefficients(self.model)

    def check(self, name, order):
        return check_theory(name, order)

    def uncorrected(self, init, t, *, name, order, check, words, time="slow", **options):
        return with_loss_row(self.model, _flow_rows(self.model, init, t, theory=name, order=order,
                                                 check=check, words=words, time=time,
                                                 **options))

    def matrix_flow(self, matrices, t_eval, **options):
        """The finite-d untied flow from pairs ``(U_k, V_k)`` (``mode="full"``: fast time
        ``t = eta n``; ``mode="slaved"``: slow time); see
        :func:`~attndyn.numeric.attention.untied.fastslow.untied_flow`."""
        return untied_flow(self.model, matrices, t_eval, **options)

    def hierarchy(self, order: int, letters=None):
        """The slow hierarchy (31)-(32) truncated at ``order`` (eq. 892)."""
        return hierarchy(self.model, order, letters)

    def limit_flow(self, law, t_eval, *args, panels=None, per_panel=None, blowup=None,
                   **options):
        """The ``d -> infinity`` limit of the slaved flow from a law (:mod:`.limit`);
        ``panels``, ``per_panel`` and ``blowup`` (tied options) do not apply."""
        from attndyn.numeric.attention.untied.limit import limit_flow  # scipy: lazily
        return limit_flow(self.model, law, t_eval, *args, **options)

    def spectral_density(self, law, t_eval, **options):
        """The spectral law of ``S_k(tau) = U_k V_k^T`` (symmetric part or singular values):
        :func:`~attndyn.numeric.attention.untied.limit.spectral_density`."""
        from attndyn.numeric.attention.untied.limit import spectral_density
        return spectral_density(self.model, law, t_eval, **options)

    def assumptions(self, init, quick: bool = False) -> list:
        """Theorem 3's Assumptions 4.1, 4.2, 4.4, 5 and 6 at ``init`` (untied pairs)."""
        return untied_diagnostics(self.model, init, quick)

    def landscape_potential(self):
        """The untied potential's ``phi`` in (m, q1, q2), without the m-Hessian."""
        from attndyn.symbolic.potential import untied_potential  # SymPy: lazily
        m = self.model
        return untied_potential(m.loss, m.K, m.L, m.C, hessian=False)
