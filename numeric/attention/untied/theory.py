"""The untied theories."""

from __future__ import annotations

import numpy as np

from attndyn.numeric.attention.untied.coefficients import theory, UntiedTrajectory
from attndyn.numeric.attention.untied.fastslow import untied_flow
from attndyn.numeric.attention.untied.hierarchy import hierarchy
from attndyn.numeric.core.validate import check_t_eval
from attndyn.symbolic import untied as su

__all__ = []


THEORIES = ("flow", "slaved", "hierarchy")


def check_theory(theory, order):
    """``(theory, order)`` for :func:`attndyn.numeric.compare` with an untied model:
    ``"flow"`` (the full finite-d flow, default), ``"slaved"`` (its slow limit with
    ``m = m*(q)``) or ``"hierarchy"`` (the truncation at ``order``, default 4)."""
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
                   time: str = "slow", **kwargs) -> UntiedTrajectory:
    """The theory trajectory from the SGD pairs ``init`` at the SGD times ``t``.

    ``t`` is on the SGD's time scale: slow ``tau = eta n / d`` (the default of
    :func:`attndyn.sgd`) or fast ``t = eta n``. The full flow runs on the fast
    time (``t * d`` for slow times) and so includes the fast boundary layer; the
    slaved flow and the hierarchy start on the critical manifold (``m = m*``)
    and need slow times. Rows are named as the SGD observables, with ``loss =
    Phi(m, q1, q2)`` appended.

    ``correction="noise"`` (with ``eta``, ``batch``; issue 16, slow time only): the
    mini-batch noise terms of :mod:`attndyn.numeric.attention.noise_untied`, to first
    order in ``eta d / B``. ``theory="hierarchy"``: the truncated hierarchy with the
    noise terms (:func:`~attndyn.numeric.attention.noise_untied.noise_hierarchy`);
    ``"flow"``/``"slaved"``: the flow plus the hierarchy's noise shift at ``noise_order``
    (default ``max(order, 6)``, checked against ``noise_order - 1`` unless ``noise_check``
    is False; :func:`~attndyn.numeric.attention.noise_untied.noise_shift`).
    """
    if time not in ("slow", "fast"):
        raise ValueError(f"time must be 'slow' or 'fast', got {time!r}")
    correction = kwargs.pop("correction", "none") or "none"
    eta, batch = kwargs.pop("eta", None), kwargs.pop("batch", None)
    noise_order = kwargs.pop("noise_order", None)
    noise_check = kwargs.pop("noise_check", True)
    if correction not in ("none", "noise"):
        raise ValueError(f"correction for an UntiedModel must be 'none' or 'noise', got "
                         f"{correction!r}")
    if correction == "noise" and (time != "slow" or eta is None or batch is None):
        raise ValueError("correction='noise' (untied) needs eta, batch and the slow time")
    pairs = model.check_factors(init, "init")
    d = pairs[0][0].shape[0]
    t = check_t_eval(t)
    K = model.K
    wl = None if words is None else [w for w in words if len(w)]
    if correction == "noise":
        from attndyn.numeric.attention.untied.noise import noise_hierarchy, noise_shift
        if theory == "hierarchy":
            res = noise_hierarchy(model, pairs, t, eta=eta, batch=batch, order=order,
                                  check=check is not None, **kwargs)
        else:
            res = compare_theory(model, pairs, t, theory=theory, order=order, check=check,
                                 words=words, time=time, **kwargs)
            sh = noise_shift(model, pairs, t[:res.t.size] if res.t.size else t[:1],
                             eta=eta, batch=batch, check=bool(noise_check),
                             order=max(int(order), 6) if noise_order is None else noise_order)
            names = list(res.names)
            for name, row in zip(sh["names"], sh["delta"]):
                if name in names and res.t.size:
                    res.y[names.index(name)] = res.y[names.index(name)] + row[:res.t.size]
            res.params.update({"correction": "noise", "eta": float(eta), "batch": int(batch),
                               "eta_d_over_B": float(eta) * d / int(batch)})
            res.diagnostics["noise_truncation_gap"] = sh["truncation_gap"]
            gap = sh["truncation_gap"]
            res.message += (f"; plus the noise shift of the order-{sh['order']} hierarchy "
                            f"(eta d / B = {sh['eta_d_over_B']:.3g}, truncation gap "
                            + ("not checked)" if gap is None else f"{gap:.2g})"))
            return res
    elif theory == "flow":
        tf = t * d if time == "slow" else t
        res = untied_flow(model, pairs, tf, mode="full", order=order, words=wl, **kwargs)
        res.t = res.t / d if time == "slow" else res.t
        res.params["time"] = "tau = eta * n / d (slow)" if time == "slow" else "t = eta * n (fast)"
    else:
        if time != "slow":
            raise ValueError(f"theory {theory!r} lives on the slow time (tau = eta n / d); "
                             "use theory='flow' for the fast time")
        if theory == "slaved":
            res = untied_flow(model, pairs, t, mode="slaved", order=order, words=wl, **kwargs)
        else:
            res = hierarchy(model, order).integrate(pairs, t, check=check, **kwargs)
    th = theory_of(model)
    loss = np.full(res.t.size, np.nan)
    for j in range(res.t.size):
        m = np.array([res.observable("m", k)[j] for k in range(K)])
        q1 = np.array([[res.observable("q1", k, l)[j] for l in range(K)] for k in range(K)])
        q2 = np.array([[res.observable("q2", k, l)[j] for l in range(K)] for k in range(K)])
        if np.all(np.isfinite(m)) and np.all(np.isfinite(q1)) and np.all(np.isfinite(q2)):
            try:
                loss[j] = th.phi(m, q1, q2)
            except (AttributeError, TypeError, ValueError):
                loss[:] = np.nan
                break
    if np.all(np.isfinite(loss)):
        res.y = np.vstack([res.y, loss[None, :]])
        res.names = list(res.names) + ["loss"]
    return res


theory_of = theory
