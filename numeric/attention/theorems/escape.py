"""The distribution of the weak-recovery (escape) time at finite ``d``: direct S and tied,
linear loss (issue 27 item 4).

Direct S (:func:`direct_escape_law`). Setting: Corollary 7 case 1 (appendix E), one
trainable ``S_1``, a fixed teacher
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

Tied (:func:`tied_escape_law`). Setting: Corollary 3 (``theorems/cor3.py``), one trainable
``S_1 = W_1 W_1^T``, a fixed teacher ``S_2 = W_2 W_2^T``, square Gaussian factors with entries
``N(0, s^2/d)``, ``L = 1``, ``(1/2)(G_1 - G_2)^2``, online SGD on ``W_1`` in
``t = 4 eta n / d``; ``T`` is the first ``t`` with ``|p_12| >= c``, ``p_12 = q_12 - t_1 t_2``
(eq. 18). Here ``Gamma_11 = 1``, ``Gamma_12 = -1`` and the flow is the matrix Riccati
equation ``dS/dt = -(2 S^2 - S S_2 - S_2 S)``, not linear: no three scalars carry the start.
But ``R = S^-1`` solves ``dR/dt = 2 I - (S_2 R + R S_2)``, so the finite-d flow is closed form
(:func:`riccati_overlap`), and the law of ``T`` is built from two pieces:

1. the start: ``n_draws`` independent draws of ``(W_1, W_2)`` at the same ``d``, each pushed
   through the closed-form flow to its crossing time (bracketed, then Brent): the start's law
   exactly, its ``O(1/d)`` mean offset and its spread included;
2. the SGD noise, to first order around the flow from each start. One step moves
   ``W_1`` by ``-(2 eta/(B sqrt d)) sum_b e_b (x_b x_b^T - I) W_1``, ``e = G_1 - G_2``, and
   moves ``p_12(T)`` by ``Tr(dS N)/d`` with ``N = d p_12(T)/d S(u)`` (times ``d``) the tangent of
   the closed form over ``T - u``: ``N = A^-1 diag(e^{2 lam (T-u)} (lam - t_2)) A^-T``,
   ``A = I + diag((e^{2 lam (T-u)} - 1)/lam) S(u)`` in the teacher's eigenbasis. Per unit
   ``t`` the variance of ``p_12(T)`` grows by ``(4 eta/(B d^3)) Var(Q_D Q_M)``,
   ``D = S - S_2``, ``M = sym(S N)``, ``Q_Z = x^T Z x - Tr Z``, with
   ``Var(Q_D Q_M) = 4 Tr D^2 Tr M^2 + 4 Tr(DM)^2 + 32 Tr(D^2 M^2) + 16 Tr(DMDM)`` (the joint
   cumulants of Gaussian quadratic forms, fourth cumulant included). Divided by the slope
   ``dp_12/dt`` at ``T`` it is the SD of ``T`` (``noise_sd``, the mean over ``n_noise``
   starts); the mean shift (``noise_shift``) is the crossing time of the noise-corrected
   moment flow (``correction="noise+finite-d"``, exact for this degree-2 loss) minus the
   flow's, averaged over ``n_shift`` starts.

``T = T_start + noise_shift + noise_sd xi``, ``xi ~ N(0, 1)``. Unlike direct S, the start's
spread falls slower than ``1/d`` at small ``d`` (SD 0.132, 0.078, 0.039 at ``d = 24, 40, 80``),
and the noise is 2.6% (``d = 24``) to 1.4% (``d = 80``) of the variance.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from attndyn.numeric.core.validate import resolve_seed

__all__ = ["EscapeLaw", "direct_escape_law", "TiedEscapeLaw", "tied_escape_law",
           "riccati_overlap", "compare_escape", "load_escape_law", "QUANTILES"]

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def _pos(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


def _int(name, v, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo \
            or (hi is not None and v > hi):
        rng = f"in {lo}..{hi:g}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be an int {rng}, got {v!r}")
    return int(v)


def _check_n(n):
    return _int("n", n, 1, 10**8)


class _LawMethods:
    """What every escape-time law shares: quantiles and CDF from its seeded Monte Carlo
    sample, and the labelled JSON record (``_KIND`` names it)."""

    _KIND = ""

    def quantiles(self, q=QUANTILES, n: int = 200_000, seed=0) -> np.ndarray:
        """Quantiles ``q`` of ``T`` from ``n`` seeded draws."""
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
        return atomic_write_text(path, json.dumps({"kind": self._KIND, **self.as_dict()}))

    @classmethod
    def load(cls, path):
        """The law saved at ``path`` (``ValueError`` if it is another kind or malformed)."""
        law = load_escape_law(path)
        if not isinstance(law, cls):
            raise ValueError(f"{path}: not a saved {cls._KIND.replace('_', ' ')}")
        return law


@dataclass(frozen=True)
class EscapeLaw(_LawMethods):
    """The predicted law of the escape time ``T`` (module docstring), labelled.

    ``T_inf`` is the ``d -> infinity`` crossing time; ``moments`` the means and
    standard deviations of ``a, b, alpha, t_1, t_2`` and ``noise_sd`` the SD of
    ``xi(T_inf)``. :meth:`sample` draws ``T``; :meth:`quantiles`, :meth:`cdf` use a
    seeded Monte Carlo sample of the Gaussian variables (no SGD, no matrices).

        >>> law = direct_escape_law(0.2, 40, batch=16)
        >>> isinstance(law, EscapeLaw), law.sample(3, seed=0).shape
        (True, (3,))
    """

    parameterisation: str
    c: float
    d: int
    eta: float
    batch: int
    T_inf: float
    moments: dict
    noise_sd: float
    extra: dict = field(default_factory=dict)

    _KIND = "escape_law"

    def sample(self, n: int, seed=0, *, noise: bool = True, initial: bool = True) -> np.ndarray:
        """``n`` draws of ``T`` (``noise``/``initial`` switch the two sources off)."""
        n = _check_n(n)
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

    @classmethod
    def _from_raw(cls, raw) -> "EscapeLaw":
        mom = {k: (float(v[0]), float(v[1])) for k, v in raw["moments"].items()}
        if set(mom) != {"a", "b", "alpha", "t1", "t2"}:
            raise ValueError("moments")
        return cls(str(raw["parameterisation"]), float(raw["c"]), int(raw["d"]),
                   float(raw["eta"]), int(raw["batch"]), float(raw["T_inf"]), mom,
                   float(raw["noise_sd"]), dict(raw.get("extra", {})))


def direct_escape_law(c: float, d: int, *, scale_student: float = 1.0,
                      scale_teacher: float = 1.0, eta=None, c0: float = 1.0,
                      batch: int = 16, n_quad: int = 400) -> EscapeLaw:
    """The predicted law of the direct-S escape time at dimension ``d`` (Corollary 7's
    setting, overlap of eq. 413; module docstring).

    ``eta`` defaults to ``c0 / (d log d)``. Needs ``0 < c < E a`` (the limit overlap
    ``s_2^2 / 2`` must exceed the threshold) and ``d >= 4``. ``n_quad``: trapezoid
    points of the noise integral.

        >>> law = direct_escape_law(0.2, 40, batch=16)
        >>> law.parameterisation, law.d, round(law.T_inf, 3)
        ('direct S, linear loss', 40, 0.255)
        >>> bool(np.all(np.diff(law.quantiles()) > 0))
        True
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
    SD in seed units (``z_mean = (mean - E T) / (SD T / sqrt n)``).

        >>> law = direct_escape_law(0.2, 40, batch=16)
        >>> T = law.sample(200, seed=1)
        >>> cmp = compare_escape(law, T, n_mc=20000)
        >>> bool(abs(cmp["z_mean"]) < 4), sorted(cmp)[:3]
        (True, ['T_inf', 'd', 'ks'])
    """
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


# ---------------------------------------------------------------------------
# tied, linear activation: the Riccati flow from the finite-d start

def _riccati_basis(S1, S2):
    """``(S0, lam)``: the student in the eigenbasis of the teacher, the teacher's spectrum."""
    lam, Q = np.linalg.eigh(S2)
    S0 = Q.T @ S1 @ Q
    return (S0 + S0.T) / 2, lam


def _riccati_parts(S0, lam, t):
    """``(e, A)`` of ``S(t) = diag(e) S0 A^-1 diag(e)``: ``e = exp(lam t)``,
    ``A = I + diag((exp(2 lam t) - 1)/lam) S0`` (``2 t`` where ``lam = 0``)."""
    x = 2.0 * lam * t
    dp = np.where(np.abs(x) > 1e-12, np.expm1(x) / np.where(lam == 0, 1.0, lam), 2.0 * t)
    return np.exp(lam * t), np.eye(lam.size) + dp[:, None] * S0


def _riccati_S(S0, lam, t):
    """The student ``S(t)`` in the teacher's eigenbasis."""
    e, A = _riccati_parts(S0, lam, t)
    Y = np.linalg.solve(A.T, S0).T          # S0 A^-1 (S0 symmetric)
    S = e[:, None] * Y * e[None, :]
    return (S + S.T) / 2


def _riccati_p(S0, lam, t):
    """``p_12(t) = Tr(S(t) (S_2 - t_2 I))/d`` without forming ``S(t)`` (its diagonal only)."""
    e, A = _riccati_parts(S0, lam, t)
    diag = np.diagonal(np.linalg.solve(A.T, S0)) * e * e
    return float(np.dot(diag, lam - lam.mean()) / lam.size)


def riccati_overlap(S1, S2, t) -> np.ndarray:
    """``p_12(t) = q_12 - t_1 t_2`` along the tied flow of the linear loss, in closed form.

    For ``(1/2)(G_1 - G_2)^2`` (``Gamma_11 = 1``, ``Gamma_12 = -1``, ``gamma = 0``) the tied
    flow (eq. 11) of the student is the matrix Riccati equation
    ``dS/dt = -(2 S^2 - S S_2 - S_2 S)``; ``R = S^-1`` obeys the linear
    ``dR/dt = 2 I - (S_2 R + R S_2)``, so in the eigenbasis of ``S_2 = diag(lam)``
    ``S(t) = E S_0 (I + Delta S_0)^-1 E``, ``E = diag(e^{lam t})``,
    ``Delta = diag((e^{2 lam t} - 1)/lam)`` (no inverse of ``S_0`` is formed).

        >>> from scipy.integrate import solve_ivp
        >>> rng = np.random.default_rng(0)
        >>> A, B = rng.standard_normal((2, 3, 3))
        >>> S1, S2 = A @ A.T / 3, B @ B.T / 3
        >>> def rhs(t, y):
        ...     S = y.reshape(3, 3)
        ...     return -(2 * S @ S - S @ S2 - S2 @ S).ravel()
        ...
        >>> sol = solve_ivp(rhs, (0.0, 1.0), S1.ravel(), rtol=1e-11, atol=1e-12)
        >>> S = sol.y[:, -1].reshape(3, 3)
        >>> p_flow = np.trace(S @ S2) / 3 - (np.trace(S) / 3) * (np.trace(S2) / 3)
        >>> p = riccati_overlap(S1, S2, np.array([0.0, 1.0]))
        >>> bool(abs(p[1] - p_flow) < 1e-8), p.shape
        (True, (2,))
    """
    S1, S2 = np.asarray(S1, float), np.asarray(S2, float)
    if S1.ndim != 2 or S1.shape[0] != S1.shape[1] or S1.shape != S2.shape:
        raise ValueError(f"S1 and S2 must be square matrices of one shape, got {S1.shape}, "
                         f"{S2.shape}")
    S0, lam = _riccati_basis(S1, S2)
    return np.array([_riccati_p(S0, lam, float(u)) for u in np.atleast_1d(t)])


def _riccati_crossing(S0, lam, c, T_max, n_grid=33):
    """First ``t`` with ``p_12(t) >= c`` (bracketed on a grid, then Brent to 1e-10); ``inf``
    when not before ``T_max``; ``0`` when already there."""
    from scipy.optimize import brentq
    grid = np.linspace(0.0, T_max, n_grid)
    prev = _riccati_p(S0, lam, 0.0)
    if abs(prev) >= c:
        return 0.0
    for a, b in zip(grid[:-1], grid[1:]):
        pb = _riccati_p(S0, lam, b)
        if abs(pb) >= c:
            sgn = 1.0 if pb > 0 else -1.0
            return float(brentq(lambda u: sgn * _riccati_p(S0, lam, u) - c, a, b, xtol=1e-10))
    return math.inf


def _riccati_noise(S0, lam, T, n_u=17):
    """``(int_0^T V(u) du, dp/dt(T))``: the SGD noise of ``p_12(T)`` without its prefactor
    ``4 eta/(B d^3)`` (module docstring, tied part) and the slope at the crossing."""
    d = lam.size
    S2 = np.diag(lam)
    lc = lam - lam.mean()
    us = np.linspace(0.0, T, n_u)
    V = np.empty(n_u)
    for i, u in enumerate(us):
        S = _riccati_S(S0, lam, u)
        # N = d p_12(T)/d S(u) (times d): the tangent of the closed form over T - u
        _, A = _riccati_parts(S, lam, T - u)
        X = np.exp(2 * lam * (T - u)) * lc
        Ai = np.linalg.inv(A)
        N = (Ai * X[None, :]) @ Ai.T
        M = S @ N
        M = (M + M.T) / 2
        D = S - S2
        DM = D @ M
        # Var(Q_D Q_M) of two Gaussian quadratic forms: the two-point terms and the
        # fourth joint cumulant 32 Tr(D^2 M^2) + 16 Tr(DMDM)
        V[i] = (4 * np.sum(D * D) * np.sum(M * M) + 4 * np.trace(DM) ** 2
                + 32 * np.sum((D @ D) * (M @ M)) + 16 * np.sum(DM * DM.T))
    S = _riccati_S(S0, lam, T)
    D = S - S2
    slope = -float(np.trace((S @ D + D @ S) @ np.diag(lc))) / d
    return float(np.sum((V[1:] + V[:-1]) * np.diff(us)) / 2), slope


@dataclass(frozen=True)
class TiedEscapeLaw(_LawMethods):
    """The predicted law of the tied escape time ``T`` (Corollary 3, eq. 18; linear
    activation; module docstring).

    ``start`` holds the finite-d flow's crossing times from ``len(start)`` independent draws
    of the start at dimension ``d`` (the start's law pushed through the closed-form flow);
    ``noise_shift`` and ``noise_sd`` are the mean and SD the SGD noise adds (in ``t``).
    ``T_inf`` is the ``d -> infinity`` crossing time (``nan`` when not computed).
    :meth:`sample` resamples ``start`` and adds the Gaussian noise.

        >>> law = tied_escape_law(0.1, 16, n_draws=50, n_noise=2, n_shift=1, seed=4, limit=False)
        >>> isinstance(law, TiedEscapeLaw), law.sample(3, seed=0).shape
        (True, (3,))
    """

    parameterisation: str
    c: float
    d: int
    eta: float
    batch: int
    T_inf: float
    start: tuple
    noise_shift: float
    noise_sd: float
    extra: dict = field(default_factory=dict)

    _KIND = "tied_escape_law"

    def sample(self, n: int, seed=0, *, noise: bool = True, initial: bool = True) -> np.ndarray:
        """``n`` draws of ``T`` (``noise``/``initial`` switch the two sources off; without the
        start every draw starts from the mean of ``start``)."""
        n = _check_n(n)
        rng = np.random.default_rng(resolve_seed(seed))
        st = np.asarray(self.start, float)
        T0 = st[rng.integers(st.size, size=n)] if initial else np.full(n, st.mean())
        if noise:
            T0 = T0 + self.noise_shift + self.noise_sd * rng.standard_normal(n)
        return T0

    @classmethod
    def _from_raw(cls, raw) -> "TiedEscapeLaw":
        start = tuple(float(v) for v in raw["start"])
        if not start or not all(math.isfinite(v) for v in start):
            raise ValueError("start")
        return cls(str(raw["parameterisation"]), float(raw["c"]), int(raw["d"]),
                   float(raw["eta"]), int(raw["batch"]), float(raw["T_inf"]), start,
                   float(raw["noise_shift"]), float(raw["noise_sd"]), dict(raw.get("extra", {})))


def _tied_noise_shift(model, mats, c, T_max, eta, batch):
    """Crossing time of the noise-corrected moment flow minus the flow's, from one start
    (``correction="noise+finite-d"``, exact for a loss of degree 2; 41-point grid, both
    crossings interpolated alike)."""
    from attndyn.numeric.attention.flow import matrix_flow
    from attndyn.numeric.attention.theorems.cor3 import crossing_time
    grid = np.linspace(0.0, T_max, 41)
    r = matrix_flow(model, mats, grid, correction="noise+finite-d", eta=eta, batch=batch)
    if r.status != 0:
        raise RuntimeError(f"noise-corrected flow failed: {r.message}")
    f = np.asarray(r.diagnostics["flow"])
    pc = r.y[3] - r.y[0] * r.y[1]
    pf = f[3] - f[0] * f[1]
    return crossing_time(grid, pc, c) - crossing_time(grid, pf, c)


def tied_escape_law(c: float, d: int, *, scale: float = math.sqrt(0.5), eta=None,
                    c0: float = 1.0, batch: int = 16, n_draws: int = 2000, n_noise: int = 16,
                    n_shift: int = 4, seed=0, T_max: float = 2.0,
                    limit: bool = True) -> TiedEscapeLaw:
    """The predicted law of the tied escape time at dimension ``d`` (Corollary 3's setting,
    linear activation ``h1``; module docstring, tied part).

    Student and teacher ``S_k = W_k W_k^T`` with square Gaussian factors, entries
    ``N(0, scale^2/d)``; ``T`` is the first ``t = 4 eta n/d`` with ``|p_12| >= c``;
    ``eta`` defaults to ``c0/(d log d)``. ``n_draws`` independent starts are pushed through
    the closed-form flow (:func:`riccati_overlap`); the SGD noise's SD is the mean over the
    first ``n_noise`` of them, its mean shift (the noise correction) over the first
    ``n_shift``. ``limit=True`` adds the ``d -> infinity`` time of ``cor3``. Randomness from
    ``seed`` only. ``d`` in 4..2000.

        >>> law = tied_escape_law(0.1, 16, n_draws=50, n_noise=2, n_shift=1, seed=4, limit=False)
        >>> law.parameterisation, law.d, len(law.start)
        ('tied, linear activation h1', 16, 50)
    """
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.symbolic.losses import mse_teacher_student
    c = _pos("c", c)
    d = _int("d", d, 4, 2000)
    scale, c0, T_max = _pos("scale", scale), _pos("c0", c0), _pos("T_max", T_max)
    eta = c0 / (d * math.log(d)) if eta is None else _pos("eta", eta)
    batch = _int("batch", batch, 1)
    n_draws = _int("n_draws", n_draws, 2, 10**6)
    n_noise = _int("n_noise", n_noise, 1, n_draws)
    n_shift = _int("n_shift", n_shift, 0, n_draws)
    if c >= scale ** 4 / 2:
        raise ValueError(f"c must be below the limit overlap scale^4/2 = {scale ** 4 / 2:g}, "
                         f"got {c!r}")
    model = TiedModel(2, [0], mse_teacher_student("h1"))
    rng = np.random.default_rng(resolve_seed(seed))
    start, var_T, shifts = [], [], []
    for i in range(n_draws):
        W1, W2 = rng.standard_normal((2, d, d)) * (scale / math.sqrt(d))
        S1, S2 = W1 @ W1.T, W2 @ W2.T
        S0, lam = _riccati_basis(S1, S2)
        T = _riccati_crossing(S0, lam, c, T_max)
        if not math.isfinite(T):
            raise RuntimeError(f"a start did not reach c = {c:g} before T_max = {T_max:g}")
        start.append(T)
        if i < n_noise:
            integral, slope = _riccati_noise(S0, lam, T)
            var_T.append(4 * eta / (batch * d ** 3) * integral / slope ** 2)
        if i < n_shift:
            shifts.append(_tied_noise_shift(model, [S1, S2], c, min(T_max, 1.6 * T), eta, batch))
    T_inf = math.nan
    if limit:
        from attndyn.numeric.attention.theorems.cor3 import weak_recovery_theory
        T_inf = float(weak_recovery_theory(model, c, scale=scale, T_max=T_max)["T_inf"])
    return TiedEscapeLaw("tied, linear activation h1", c, d, float(eta), batch, T_inf,
                         tuple(start), float(np.mean(shifts)) if shifts else 0.0,
                         math.sqrt(float(np.mean(var_T))),
                         {"scale": scale, "n_draws": n_draws, "n_noise": n_noise,
                          "n_shift": n_shift, "noise_shifts": shifts})


def load_escape_law(path):
    """An :class:`EscapeLaw` or :class:`TiedEscapeLaw` saved with ``save``.

        >>> import os, tempfile
        >>> law = direct_escape_law(0.2, 40, batch=16)
        >>> path = os.path.join(tempfile.mkdtemp(), "law.json")
        >>> _ = law.save(path)
        >>> load_escape_law(path).T_inf == law.T_inf
        True
    """
    from attndyn.numeric.core.safeio import load_json
    raw = load_json(path, "escape-time law")
    kinds = {cls._KIND: cls for cls in (EscapeLaw, TiedEscapeLaw)}
    if not isinstance(raw, dict) or raw.get("kind") not in kinds:
        raise ValueError(f"{path}: not a saved escape-time law")
    try:
        return kinds[raw["kind"]]._from_raw(raw)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"{path}: malformed escape-time law ({exc})") from None
