"""The distribution of the weak-recovery (escape) time at finite ``d``: direct S, linear loss.

Setting: Corollary 7 case 1 (appendix E), one trainable ``S_1``, a fixed teacher
``S_2``, ``L = 1``, the linear teacher-student loss ``(1/2)(G_1 - G_2)^2``, independent
square Gaussian starts with entries ``N(0, s_1^2/d)`` and ``N(0, s_2^2/d)``, online SGD
with step ``eta`` and batch ``B``, time ``tau = eta n / d``. The escape time ``T`` is the
first ``tau`` with ``max(|p_Psi_12|, |p_Omega_12|) >= c`` (eq. 413).

Derivation (docs/theorems.md, "Escape-time distribution"). For this loss
``A = B = H/2`` are constant (``H_11 = 1``, ``H_12 = -1``), so the flow
``dS_1/dtau = -2 sum_l (A_1l S_l + B_1l S_l^T)`` is linear:
``dS_1/dtau = -(S_1 + S_1^T) + (S_2 + S_2^T)``. Split ``S = Sym + Anti``: the
antisymmetric part of ``S_1`` is frozen and ``Sym_1(tau) = Sym_2 + (Sym_1(0) - Sym_2) E``,
``E = exp(-2 tau)``: the linearised flow around the uninformative start is the flow.
With ``sigma = <Sym_1, Sym_2>/d``, ``alpha = <Anti_1, Anti_2>/d``,
``a = |Sym_2|^2/d`` and ``b = <Sym_1(0), Sym_2>/d``,

    Psi_12 = sigma - alpha,  Omega_12 = sigma + alpha,
    sigma(tau) = a (1 - E) + b E + xi(tau),     t_1(tau) = t_2 + (t_1(0) - t_2) E,

so ``X = max(|p_Psi|, |p_Omega|) = sigma + |alpha| - t_1 t_2`` once positive, and
``T = (1/2) log((a - b) / (a - c + |alpha| + xi - t_1 t_2))`` (``xi`` taken at ``T``).
The initial spread (exact moments of the Gaussian draw):

    E a = s_2^2 (d + 1)/(2 d),       Var a = s_2^4 (d + 1)/d^3,
    Var b = s_1^2 s_2^2 (d + 1)/(2 d^3),   Var alpha = s_1^2 s_2^2 (d - 1)/(2 d^3),
    Var t_k(0) = s_k^2 / d^2,

``b``, ``alpha``, ``t_k`` centred; ``a`` and ``b`` uncorrelated, ``alpha`` independent of both;
each is taken Gaussian (sums of ``O(d^2)`` independent terms; the correlations of
``t_k`` with ``a``, ``b`` are ``O(d^-2)`` and dropped). The SGD noise: one step changes
``sigma`` by ``-(eta/(B d)) sum_b e_b G_2b`` (``e = G_1 - G_2``), whose mean is the flow
and whose variance per unit ``tau`` is ``(eta/(d B)) V(tau)``,
``V = Var(e) Var(G_2) + Cov(e, G_2)^2`` (Isserlis) with ``Var G_2 = s_2^2``,
``Cov(G_1, G_2) = s_2^2 (1 - E)``, ``Var G_1 = s_2^2 (1 - E)^2 + s_1^2 E^2`` at the limit.
Through ``dsigma = 2 (a - sigma) dtau + dM``,
``Var xi(T) = int_0^T exp(-4 (T - u)) (eta/(d B)) V(u) du``: at ``eta = c0/(d log d)`` a
``1/(d sqrt(B log d))`` term, next to the ``1/d`` of the start. The noise does not shift
the mean (the overlaps are linear in ``S_1``): the noise correction of docs/finite-eta.md
is zero for them here. Both spreads are ``O(1/d)`` in ``T``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from attndyn.numeric.core.validate import resolve_seed

__all__ = ["EscapeLaw", "direct_escape_law", "compare_escape", "QUANTILES"]

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def _pos(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class EscapeLaw:
    """The predicted law of the escape time ``T`` (module docstring), labelled.

    ``T_inf`` is the ``d -> infinity`` crossing time; ``moments`` the means and
    standard deviations of ``a, b, alpha, t_1, t_2`` and ``noise_sd`` the SD of
    ``xi(T_inf)``. :meth:`sample` draws ``T``; :meth:`quantiles`, :meth:`cdf` use a
    seeded Monte Carlo sample of the Gaussian variables (no SGD, no matrices)."""

    parameterisation: str
    c: float
    d: int
    eta: float
    batch: int
    T_inf: float
    moments: dict
    noise_sd: float
    extra: dict = field(default_factory=dict)

    def sample(self, n: int, seed=0, *, noise: bool = True, initial: bool = True) -> np.ndarray:
        """``n`` draws of ``T`` (``noise``/``initial`` switch the two sources off)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 10**8:
            raise ValueError(f"n must be an int in 1..1e8, got {n!r}")
        rng = np.random.default_rng(resolve_seed(seed))
        m = self.moments
        f = 1.0 if initial else 0.0

        def g(key):
            return m[key][0] + f * m[key][1] * rng.standard_normal(n)
        a, b, al, t1, t2 = g("a"), g("b"), g("alpha"), g("t1"), g("t2")
        xi = (self.noise_sd if noise else 0.0) * rng.standard_normal(n)
        # t_1(T) t_2 with t_1(T) = t_2 + (t_1(0) - t_2) E(T_inf): an O(d^-2) term
        E = math.exp(-2 * self.T_inf)
        tt = (t2 + (t1 - t2) * E) * t2
        den = a - self.c + np.abs(al) + xi - tt
        with np.errstate(divide="ignore", invalid="ignore"):
            T = 0.5 * np.log((a - b) / den)
        T = np.where(den > 0, T, 0.0)  # already above c at the start
        return T

    def quantiles(self, q=QUANTILES, n: int = 200_000, seed=0) -> np.ndarray:
        return np.quantile(self.sample(n, seed), np.asarray(q, float))

    def cdf(self, n: int = 200_000, seed=0):
        """The Monte Carlo CDF of ``T`` as a function (``n`` draws; error ``~ 1/sqrt(n)``)."""
        s = np.sort(self.sample(n, seed))
        return lambda x: np.searchsorted(s, np.asarray(x, float), side="right") / s.size

    def as_dict(self) -> dict:
        from attndyn.numeric.core.labelled import jsonable
        return jsonable(self.__dict__)

    def save(self, path) -> str:
        from attndyn.numeric.core.safeio import atomic_write_text
        return atomic_write_text(path, json.dumps({"kind": "escape_law", **self.as_dict()}))

    @classmethod
    def load(cls, path) -> "EscapeLaw":
        from attndyn.numeric.core.safeio import load_json
        raw = load_json(path, "escape-time law")
        if not isinstance(raw, dict) or raw.get("kind") != "escape_law":
            raise ValueError(f"{path}: not a saved escape-time law")
        try:
            mom = {k: (float(v[0]), float(v[1])) for k, v in raw["moments"].items()}
            if set(mom) != {"a", "b", "alpha", "t1", "t2"}:
                raise ValueError("moments")
            return cls(str(raw["parameterisation"]), float(raw["c"]), int(raw["d"]),
                       float(raw["eta"]), int(raw["batch"]), float(raw["T_inf"]), mom,
                       float(raw["noise_sd"]), dict(raw.get("extra", {})))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"{path}: malformed escape-time law ({exc})") from None


def direct_escape_law(c: float, d: int, *, scale_student: float = 1.0,
                      scale_teacher: float = 1.0, eta=None, c0: float = 1.0,
                      batch: int = 16, n_quad: int = 400) -> EscapeLaw:
    """The predicted law of the direct-S escape time at dimension ``d`` (module docstring).

    ``eta`` defaults to ``c0 / (d log d)``. Needs ``0 < c < E a`` (the limit overlap
    ``s_2^2 / 2`` must exceed the threshold) and ``d >= 4``. ``n_quad``: trapezoid
    points of the noise integral.
    """
    c = _pos("c", c)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 4:
        raise ValueError(f"d must be an int >= 4, got {d!r}")
    d = int(d)
    s1, s2 = _pos("scale_student", scale_student), _pos("scale_teacher", scale_teacher)
    c0 = _pos("c0", c0)
    eta = c0 / (d * math.log(d)) if eta is None else _pos("eta", eta)
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    if isinstance(n_quad, bool) or not isinstance(n_quad, (int, np.integer)) or n_quad < 10:
        raise ValueError(f"n_quad must be an int >= 10, got {n_quad!r}")
    a_inf = s2 ** 2 / 2
    if not c < a_inf:
        raise ValueError(f"c must be below the limit overlap scale_teacher^2/2 = {a_inf:g}, got {c!r}")
    T_inf = 0.5 * math.log(a_inf / (a_inf - c))
    mom = {"a": (s2 ** 2 * (d + 1) / (2 * d), s2 ** 2 * math.sqrt((d + 1) / d ** 3)),
           "b": (0.0, s1 * s2 * math.sqrt((d + 1) / (2 * d ** 3))),
           "alpha": (0.0, s1 * s2 * math.sqrt((d - 1) / (2 * d ** 3))),
           "t1": (0.0, s1 / d), "t2": (0.0, s2 / d)}
    u = np.linspace(0.0, T_inf, int(n_quad))
    E = np.exp(-2 * u)
    vg2 = s2 ** 2
    cov = s2 ** 2 * (1 - E)
    vg1 = s2 ** 2 * (1 - E) ** 2 + s1 ** 2 * E ** 2
    ve = vg1 + vg2 - 2 * cov
    V = ve * vg2 + (cov - vg2) ** 2
    f = np.exp(-4 * (T_inf - u)) * (eta / (d * batch)) * V
    var_xi = float(np.sum((f[1:] + f[:-1]) * np.diff(u)) / 2)
    return EscapeLaw("direct S, linear loss", c, d, float(eta), int(batch), T_inf, mom,
                     math.sqrt(var_xi), {"scale_student": s1, "scale_teacher": s2,
                                         "slope_at_T": 2 * (a_inf - c)})


def compare_escape(law: EscapeLaw, T_sgd, *, n_mc: int = 200_000, seed=0) -> dict:
    """Predicted against measured escape times: quantiles side by side, the KS distance
    (and its p-value against the law's Monte Carlo CDF, ``n_mc`` draws) and the mean and
    SD in seed units (``z_mean = (mean - E T) / (SD T / sqrt n)``)."""
    from scipy.stats import kstest
    T = np.asarray(T_sgd, float)
    if T.ndim != 1 or T.size < 2 or not np.all(np.isfinite(T)):
        raise ValueError("T_sgd must be >= 2 finite crossing times")
    s = law.sample(int(n_mc), seed)
    cdf = law.cdf(int(n_mc), seed)
    ks = kstest(T, cdf)
    mu, sd = float(s.mean()), float(s.std())
    return {"d": law.d, "n": int(T.size), "quantiles": list(QUANTILES),
            "predicted": np.quantile(s, QUANTILES).tolist(),
            "measured": np.quantile(T, QUANTILES).tolist(),
            "mean_pred": mu, "sd_pred": sd, "mean_sgd": float(T.mean()),
            "sd_sgd": float(T.std(ddof=1)), "z_mean": float((T.mean() - mu) / (sd / math.sqrt(T.size))),
            "sd_ratio": float(T.std(ddof=1) / sd), "ks": float(ks.statistic),
            "ks_pvalue": float(ks.pvalue), "T_inf": law.T_inf,
            "sd_initial_only": float(law.sample(int(n_mc), seed, noise=False).std()),
            "sd_noise_only": float(law.sample(int(n_mc), seed, initial=False).std())}
