"""Finite learning rate: the mini-batch noise term of tied SGD (issue 16).

One tied SGD step on the trainable factor ``W = W_k`` (paper 003, eq. 7, ``L = 1``,
``C = 1``, learning rate ``eta``, batch ``B``, weight decay ``gamma``) is exactly

    W' = N W,   N = c I - eta A,   c = 1 - eta gamma / d,
    A = (1/B) sum_b a_b,   a_b = (2/sqrt d) l_k(G_b) (x_b x_b^T - I),

with ``l_k = dloss/dG_k`` at sample ``b``; so ``S' = W'W'^T = N S N`` and

    S' = c^2 S - c eta (A S + S A) + eta^2 A S A.

The paper's flow (eq. 11, time ``t = 4 eta n / d``) keeps the mean of the
first-order term. The ``eta^2`` term is where the batch noise enters: ``E[A X A] =
Abar X Abar + (E[a X a] - Abar X Abar) / B``, and ``E[a X a] ~ 4 E[l_k^2] t_k I``, so
per unit of ODE time it adds ``(eta d / B) E[l_k^2] t_k I`` to ``dS_k/dt``: an
``O(eta d / B)`` correction. The observables are traces of products of ``S``,
so the noise also enters through the *variance* of the update:
``E[q_kk(S')] != q_kk(E[S'])``.

This module has

- the exact finite-d mean one-step change of ``t_k, q_kk, q_kl`` through
  ``eta^2`` for losses that are polynomials of degree <= 2 in ``G`` (``D.3`` and
  its relatives), from the exact joint moments of Gaussian quadratic forms
  (:func:`qf_moment`): :func:`one_step_prediction`;
- the same at leading order in ``1/d`` for any loss, with the coefficients
  ``Lambda_kl(q) = E[dl/dG_k dl/dG_l]`` from the Gaussian engine
  (:func:`noise_potential`);
- the empirical mean over many batches at fixed weights, vectorised:
  :func:`one_step_empirical` (the realised change of every batch, split by the
  power of ``eta``, with standard errors);
- the traced noise terms of the hierarchy, with their order ``eta d / B``:
  :func:`noise_terms`, :func:`noise_text`, and the truncated hierarchy with them
  (:class:`NoiseRows`, :func:`noise_hierarchy`; any ``L = 1`` loss);
- the moment-level flow over long horizons, first order in ``eta d / B``
  (:func:`noise_corrected_flow`; constant ``Gamma`` by congruence, ``q``-dependent
  ``Gamma`` with the Volterra feedback of :func:`_gamma_feedback`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .base import check_model

__all__ = ["qf_moment", "quadratic_loss", "one_step_prediction", "one_step_empirical",
           "noise_potential", "noise_terms", "noise_text", "NoiseRows", "noise_hierarchy",
           "noise_corrected_flow", "check_correction", "CORRECTIONS", "fig4_noise_check",
           "plot_noise_check", "OBSERVABLES"]

#: the one-step observables, by kind: ("t", k), ("q", k, k), ("q", k, l)
OBSERVABLES = ("t", "q_self", "q_cross")


# ---------------------------------------------------------------------------
# exact moments of Gaussian quadratic forms

def _partitions(items):
    """All set partitions of the list ``items`` (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first]] + part
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]


def qf_moment(mats, centred=None) -> float:
    """``E[prod_i (x^T Z_i x - [centred_i] Tr Z_i)]`` for ``x ~ N(0, I_d)``, exactly.

    Joint cumulants of Gaussian quadratic forms with symmetric ``Z_i``:
    ``kappa(Q_1) = Tr Z_1`` and, for ``n >= 2``,
    ``kappa(Q_1, ..., Q_n) = 2^(n-1) sum_{sigma in S_(n-1)} Tr(Z_1 Z_sigma(2) ... Z_sigma(n))``;
    moments are sums over set partitions of products of cumulants. A centred
    factor has first cumulant 0. Up to 6 factors (Bell(6) = 203 partitions).
    """
    mats = [np.asarray(m, dtype=np.float64) for m in mats]
    n = len(mats)
    if n > 6:
        raise ValueError(f"qf_moment: at most 6 factors, got {n}")
    centred = [False] * n if centred is None else [bool(c) for c in centred]
    if len(centred) != n:
        raise ValueError("centred must have one flag per matrix")
    sym = [0.5 * (m + m.T) for m in mats]
    cache = {}

    def kappa(block):
        key = tuple(block)
        if key in cache:
            return cache[key]
        if len(block) == 1:
            i = block[0]
            v = 0.0 if centred[i] else float(np.trace(sym[i]))
        else:
            f, rest = block[0], block[1:]
            v = 0.0
            for perm in itertools.permutations(rest):
                P = sym[f]
                for j in perm:
                    P = P @ sym[j]
                v += float(np.trace(P))
            v *= 2.0 ** (len(block) - 1)
        cache[key] = v
        return v

    total = 0.0
    for part in _partitions(list(range(n))):
        prod = 1.0
        for block in part:
            prod *= kappa(sorted(block))
            if prod == 0.0:
                break
        total += prod
    return total


# ---------------------------------------------------------------------------
# losses of degree <= 2 in G

def quadratic_loss(model):
    """``(H, b)`` of a tied loss that is a polynomial of degree <= 2 in ``G`` (``L = 1``):
    ``dloss/dG_k = sum_l H_kl G_l + b_k`` exactly. ``ValueError`` otherwise."""
    import sympy as sp

    from attndyn.symbolic.potential import _call_loss, g_array
    model = check_model(model)
    if model.L != 1:
        raise ValueError(f"the exact one-step noise term needs L = 1, got L = {model.L}")
    if model.loss is None:
        raise ValueError("the exact one-step noise term needs the model's loss callable")
    K = model.K
    G = g_array(1, K)
    syms = [G[0, 0, k] for k in range(K)]
    expr = _call_loss(model.loss, G)
    subs = {sp.Symbol(str(k), real=True): float(v) for k, v in model.params.items()}
    expr = sp.expand(expr.subs(subs))
    try:
        poly = sp.Poly(expr, *syms)
    except sp.PolynomialError:
        poly = None
    if poly is None or poly.total_degree() > 2 or poly.free_symbols - set(syms):
        raise ValueError("the exact finite-d one-step prediction needs a loss that is a "
                         "polynomial of degree <= 2 in G (e.g. (G1 - G2)^2); this loss is not; "
                         "use exact=False (leading order in 1/d)")
    H = np.zeros((K, K))
    b = np.zeros(K)
    for k in range(K):
        dk = sp.diff(expr, syms[k])
        b[k] = float(dk.subs({s: 0 for s in syms}))
        for l in range(K):
            H[k, l] = float(sp.diff(dk, syms[l]))
    return H, b


def _one_student(model, W):
    model = check_model(model)
    if not model.tied_factors:  # the capability the formulas assume, not a kind
        raise ValueError(f"the tied one-step noise term needs S_k = W_k W_k^T moved by "
                         f"W_k' = (c I - eta A) W_k (TiedModel); {type(model).__name__} is "
                         "not (see noise_direct / noise_untied)")
    if len(model.trainable) != 1:
        raise ValueError(f"the one-step noise term needs exactly one trainable index, got "
                         f"{list(model.trainable)}")
    Ws = model.check_init(W, "W")
    k = model.trainable[0]
    S = [w @ w.T for w in Ws]
    return k, S


def _check_eta_batch(eta, batch):
    from .training import _check_batch, _check_eta
    return _check_eta(eta), _check_batch(batch)


def _obs_keys(K, k):
    keys = [("t", k), ("q", k, k)] + [("q", k, l) for l in range(K) if l != k]
    from .base import obs_key
    names = [obs_key("mu", k) if key[0] == "t" else obs_key("q", *sorted(key[1:]))
             for key in keys]
    return keys, names


# ---------------------------------------------------------------------------
# the Gaussian engine: Lambda_kl(q) = E[dl/dG_k dl/dG_l]

def noise_potential(model):
    """The noise coefficients ``Lambda_kl(q) = E[dloss/dG_k dloss/dG_l]`` (``L = 1``) for
    the trainable pairs ``k, l`` (the others are 0: a fixed teacher gets no noise): each
    entry is the Gaussian-equivalent potential of the product of two first derivatives
    (paper 003, Theorem 1, applied to the function ``l_k l_l`` instead of the loss). A
    closed form where the exact routes have one (polynomials, products of erf/ReLU/...),
    the compiled Gaussian quadrature of the numeric route otherwise (``tanh``, ``erf``
    derivatives, ...). Returns a callable ``q -> K x K array`` with ``.text()``."""
    import sympy as sp

    from attndyn.symbolic.potential import RouteError, _call_loss, g_array, tied_potential
    model = check_model(model)
    if model.L != 1 or model.loss is None:
        raise ValueError("noise_potential needs L = 1 and the model's loss callable")
    K = model.K
    psyms = [sp.Symbol(str(k), real=True) for k in model.params]
    values = [float(v) for v in model.params.values()]
    G = g_array(1, K)
    base = _call_loss(model.loss, G)
    syms = [G[0, 0, k] for k in range(K)]
    ders = [sp.diff(base, s) for s in syms]
    tr = sorted(model.trainable)
    entries = {}
    for ai, k in enumerate(tr):
        for l in tr[ai:]:
            f = sp.expand(ders[k] * ders[l])

            def fun(G2, f=f):
                return f.subs({syms[m]: G2[0, 0, m] for m in range(K)})
            try:
                pot = tied_potential(fun, K, 1, None, params=psyms, route="exact")
                entries[(k, l)] = ("exact", pot.phi, pot.q)
            except RouteError:
                from .potentials import tied_potential as numeric_tied
                pot = numeric_tied(fun, K, 1, None, params=psyms, route="numeric",
                                   param_values=dict(zip(psyms, values)) if psyms else None)
                entries[(k, l)] = ("numeric", pot, f)
    return _NoisePotential(K, entries, tuple(psyms), values)


class _NoisePotential:
    """``Lambda(q)`` (``K x K``): lambdified closed forms and compiled quadratures."""

    def __init__(self, K, entries, params, values):
        import sympy as sp
        self.K, self.params, self.values = K, params, values
        self.entries = entries
        self._f = {}
        for key, (route, a, b) in entries.items():
            if route == "exact":
                q = b
                args = [q[k, l] for k in range(K) for l in range(k, K)] + list(params)
                self._f[key] = (route, sp.lambdify(args, a, "numpy"))
            else:
                self._f[key] = (route, a)

    @property
    def q(self):
        """The overlap symbols of the closed forms (``None`` if every entry is numeric)."""
        return next((b for route, a, b in self.entries.values() if route == "exact"), None)

    @property
    def lam(self):
        """``Lambda`` as a ``K x K`` SymPy matrix in ``q`` (closed forms only)."""
        import sympy as sp
        if any(v[0] != "exact" for v in self.entries.values()):
            raise ValueError("Lambda has no closed form for this loss (numeric route)")
        out = sp.zeros(self.K, self.K)
        for (k, l), (_, a, _) in self.entries.items():
            out[k, l] = out[l, k] = a
        return sp.ImmutableMatrix(out)

    @property
    def routes(self) -> dict:
        """``{(k, l): "exact" | "numeric"}``."""
        return {k: v[0] for k, v in self.entries.items()}

    def __call__(self, q) -> np.ndarray:
        q = np.asarray(q, dtype=float)
        out = np.zeros((self.K, self.K))
        args = None
        for (k, l), (route, f) in self._f.items():
            if route == "exact":
                if args is None:
                    args = [q[a, b] for a in range(self.K) for b in range(a, self.K)]
                v = float(f(*args, *self.values))
            else:
                v = f.phi_at(q=0.5 * (q + q.T))
            out[k, l] = out[l, k] = v
        return out

    def text(self) -> str:
        lines = []
        for (k, l), (route, a, b) in self.entries.items():
            expr = a if route == "exact" else f"E[{b}] (Gaussian quadrature)"
            lines.append(f"Lambda_{k + 1}{l + 1} = {expr}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# the predicted mean one-step change

def one_step_prediction(model, W, *, eta, batch, exact: bool = True) -> dict:
    """Predicted mean one-step change of ``t_k, q_kk, q_kl`` (``k`` the trainable index).

    Returns ``{"names", "flow", "mean_matrix", "noise", "corrected", "orders"}``:

    - ``flow``: the first-order (drift) change, ``-2 c eta Tr(Abar X)/d + (c^2 - 1) ...``,
      what the matrix flow predicts for one step (``Abar = E[a] = 4 M / d`` with
      ``M = sum_l H_kl S_l``, exact for a quadratic loss by Stein's identity);
    - ``noise``: the ``eta^2`` terms, ``eta^2 E[Tr(A X A Y)]/d`` with
      ``E[Tr(AXAY)] = Tr(Abar X Abar Y) + (F(X, Y) - Tr(Abar X Abar Y))/B``,
      ``F(X, Y) = E Tr(a X a Y) = (4/d) E[u^2 (Q_X Q_Y - 2 Q_sym(XY) + Tr XY)]``,
      ``u = l_k``, ``Q_Z = x^T Z x`` (exact by :func:`qf_moment` when ``exact``; at
      leading order in ``1/d``, ``F(X, Y) = 4 Lambda_kk (Tr X Tr Y + Tr XY)/d`` with
      ``Lambda`` from :func:`noise_potential`, otherwise);
    - ``mean_matrix``: the change of the traces of the mean update ``E[S']`` (what a
      corrected flow of the mean matrix alone predicts: for ``q_kk`` it misses the
      variance of the update);
    - ``eta3``: the ``eta^3`` term of ``q_kk``, ``-4 c eta^3 E Tr(A S A^2 S)/d``, from the
      batch mean's second and third central moments (``1/B``, ``1/B^2``) with the
      single-sample ``E Tr(a S a a S)`` from six-factor quadratic-form moments (exact
      route only; zero for ``t_k``, ``q_kl``, which are quadratic in ``N``);
    - ``corrected = flow + noise + eta3``: exact through ``eta^3`` (``q_kk`` has an
      ``eta^4`` term left out).

    ``q_kk``: ``Tr(N^2 S N^2 S)/d`` with ``N^2 = c^2 - 2 c eta A + eta^2 A^2``, so its
    ``eta^2`` term is ``c^2 (2 E Tr(A^2 S^2) + 4 E Tr(ASAS))/d``.
    """
    eta, B = _check_eta_batch(eta, batch)
    k, S = _one_student(model, W)
    K = model.K
    d = S[0].shape[0]
    g = model.weight_decay
    c = 1.0 - eta * g / d
    I = np.eye(d)
    Sk = S[k]
    if exact:
        H, b = quadratic_loss(model)
        M = sum(H[k, l] * S[l] for l in range(K))
        beta = b[k]
    else:
        lamf = noise_potential(model)
        q = np.array([[np.trace(S[a] @ S[bb]) / d for bb in range(K)] for a in range(K)])
        lam_kk = float(lamf(q)[k, k])
        beta = 0.0
        Gam = model.gamma(q)
        M = sum(Gam[k, l] * S[l] for l in range(K))
    Abar = 4.0 * M / d

    def F(X, Y):
        if not exact:
            return 4.0 * lam_kk * (np.trace(X) * np.trace(Y) + np.trace(X @ Y)) / d
        XY = 0.5 * (X @ Y + Y @ X)
        txy = float(np.trace(X @ Y))

        def Eu2(extra, cent):
            # E[u^2 * prod(extra)], u = Qc_M / sqrt(d) + beta
            e2 = qf_moment([M, M] + extra, [True, True] + cent) / d
            e1 = qf_moment([M] + extra, [True] + cent) * (2.0 * beta / math.sqrt(d))
            e0 = (qf_moment(extra, cent) if extra else 1.0) * beta ** 2
            return e2 + e1 + e0
        val = (Eu2([X, Y], [False, False]) - 2.0 * Eu2([XY], [False]) + txy * Eu2([], []))
        return 4.0 * val / d

    def ETr2(X, Y):
        m = float(np.trace(Abar @ X @ Abar @ Y))
        return m + (F(X, Y) - m) / B

    keys, names = _obs_keys(K, k)
    flow, noise, mean_m = [], [], []
    SA = Sk @ Abar
    ES1 = c * c * Sk - c * eta * (Abar @ Sk + SA)  # E[S'] without the eta^2 term
    for key in keys:
        if key[0] == "t":
            flow.append(((c * c - 1.0) * np.trace(Sk) - 2.0 * c * eta * np.trace(SA)) / d)
            noise.append(eta ** 2 * ETr2(Sk, I) / d)
        elif key[2] == k:
            flow.append(((c ** 4 - 1.0) * np.trace(Sk @ Sk)
                         - 4.0 * c ** 3 * eta * np.trace(SA @ Sk)) / d)
            noise.append(eta ** 2 * c * c * (2.0 * ETr2(I, Sk @ Sk) + 4.0 * ETr2(Sk, Sk)) / d)
        else:
            Sl = S[key[2]]
            flow.append(((c * c - 1.0) * np.trace(Sk @ Sl)
                         - c * eta * (np.trace(Abar @ Sk @ Sl) + np.trace(Abar @ Sl @ Sk))) / d)
            noise.append(eta ** 2 * ETr2(Sk, Sl) / d)
    # the traces of the mean matrix E[S'] = ES1 + eta^2 E[A S A]: linear traces are the
    # corrected ones; q_kk(E[S']) = Tr(ES1^2)/d + 2 eta^2 E Tr(A S A ES1)/d + eta^4 Tr(E[ASA]^2)/d
    # (the last, O(eta^4), at leading order in 1/d)
    lam_lead = (2.0 * float(np.trace(M @ M)) / d + beta ** 2) if exact else lam_kk
    m = Abar @ Sk @ Abar
    EASA = m + (4.0 * lam_lead * (np.trace(Sk) * I + Sk) / d - m) / B
    for j, key in enumerate(keys):
        if key[0] == "q" and key[2] == k:
            mean_m.append((np.trace(ES1 @ ES1) + 2.0 * eta ** 2 * ETr2(Sk, ES1)
                           + eta ** 4 * np.trace(EASA @ EASA) - np.trace(Sk @ Sk)) / d)
        else:
            mean_m.append(flow[j] + noise[j])
    flow, noise, mean_m = (np.array(v, dtype=float) for v in (flow, noise, mean_m))
    # the eta^3 term of q_kk, -4 c eta^3 E Tr(A S A^2 S)/d (exact route only): batch mean
    # A = Abar + dA with E[dA (x) dA] = C2/B and third central moment kappa_3/B^2
    eta3 = np.zeros_like(flow)
    if exact:
        def F0(X, Y):  # single-sample E Tr(a X a Y) - Tr(Abar X Abar Y), X symmetric
            Ys = 0.5 * (Y + Y.T)
            return F(X, Ys) - float(np.trace(Abar @ X @ Abar @ Ys))
        SA_ = Sk @ Abar
        T0 = float(np.trace(Abar @ Sk @ Abar @ Abar @ Sk))
        c2 = (F0(Sk, Abar @ Sk) + F0(0.5 * (SA_ + SA_.T), Sk) + F0(I, Sk @ Abar @ Sk))
        # single-sample E Tr(a S a a S) = (8/d^(3/2)) E[u^3 (Q_I Q_S^2 - 2 Q_S^2 - Q_I Q_S2
        #                                                    + 3 Q_S2 - Tr S^2)]
        S2 = Sk @ Sk
        trS2 = float(np.trace(S2))
        sd = math.sqrt(d)

        def Eu3(extra, cent):
            out = qf_moment([M] * 3 + extra, [True] * 3 + cent) / sd ** 3
            if beta != 0.0:
                out += 3 * beta * qf_moment([M] * 2 + extra, [True] * 2 + cent) / d
                out += 3 * beta ** 2 * qf_moment([M] + extra, [True] + cent) / sd
                out += beta ** 3 * (qf_moment(extra, cent) if extra else 1.0)
            return out
        Eaaa = (8.0 / sd ** 3) * (Eu3([I, Sk, Sk], [False] * 3) - 2.0 * Eu3([Sk, Sk], [False] * 2)
                                  - Eu3([I, S2], [False] * 2) + 3.0 * Eu3([S2], [False])
                                  - trS2 * Eu3([], []))
        # third central moment of one sample: E T(a,a,a) - [E T(Abar,a,a) + E T(a,Abar,a)
        # + E T(a,a,Abar)] + 2 T(Abar,Abar,Abar); the bracket is c2 + 3 T0 in F0 terms
        k3 = Eaaa - (c2 + 3.0 * T0) + 2.0 * T0
        ET = T0 + c2 / B + k3 / B ** 2
        for j, key in enumerate(keys):
            if key[0] == "q" and key[2] == k:
                eta3[j] = -4.0 * c * eta ** 3 * ET / d
    return {"names": names, "flow": flow, "noise": noise, "corrected": flow + noise + eta3,
            "eta3": eta3,
            "mean_matrix": mean_m, "eta": eta, "batch": B, "d": d, "exact": bool(exact),
            "eta_d_over_B": eta * d / B}


# ---------------------------------------------------------------------------
# the empirical mean over batches

class BatchMeans:
    """Running means and standard errors of per-batch one-step changes split by the power
    of ``eta``: :meth:`add` takes ``(n_batches, n_obs, n_orders)`` parts, :meth:`result`
    returns ``mean`` (sum over orders), ``se``, ``by_order``, ``se_by_order``
    (shared by the tied, direct-S and untied one-step checks)."""

    def __init__(self, n_obs: int, n_orders: int):
        self.sums = np.zeros((n_obs, n_orders))
        self.sqo = np.zeros((n_obs, n_orders))
        self.sq = np.zeros(n_obs)
        self.n = 0

    def add(self, ords) -> None:
        tot = ords.sum(axis=2)
        self.sums += ords.sum(axis=0)
        self.sqo += (ords ** 2).sum(axis=0)
        self.sq += (tot ** 2).sum(axis=0)
        self.n += ords.shape[0]

    def result(self) -> dict:
        n = float(self.n)
        by_order = self.sums / n
        mean = by_order.sum(axis=1)
        var = np.maximum(self.sq / n - mean ** 2, 0.0) * n / (n - 1.0)
        var_o = np.maximum(self.sqo / n - by_order ** 2, 0.0) * n / (n - 1.0)
        return {"mean": mean, "se": np.sqrt(var / n), "by_order": by_order,
                "se_by_order": np.sqrt(var_o / n), "n_batches": self.n}


def one_step_empirical(model, W, *, eta, batch, n_batches: int, seed=None,
                       chunk: int | None = None) -> dict:
    """Mean one-step change of ``t_k, q_kk, q_kl`` over ``n_batches`` independent
    batches at the fixed weights ``W``, with standard errors.

    Each batch's change is computed exactly from the ``B x B`` Gram matrices
    ``X Z X^T`` (``X`` the batch, ``Z in {I, S_k, S_k^2, S_l}``; ``A = alpha (K -
    s I)`` with ``K = X^T D X``, ``D = diag(u_b)``, ``s = sum u_b``, ``alpha = 2/(B
    sqrt d)``), split by powers of ``eta``: ``by_order[name][p]`` is the mean of
    the ``eta^p`` part (``p = 0..4``). Vectorised over chunks of batches (BLAS);
    memory about ``chunk * B * d * 8 * 4`` bytes. Needs a loss of degree <= 2 in
    ``G`` (the per-sample ``l_k`` is computed from ``(H, b)``).
    """
    eta, B = _check_eta_batch(eta, batch)
    if isinstance(n_batches, bool) or not isinstance(n_batches, (int, np.integer)) \
            or n_batches < 2:
        raise ValueError(f"n_batches must be an int >= 2, got {n_batches!r}")
    n_batches = int(n_batches)
    k, S = _one_student(model, W)
    H, b = quadratic_loss(model)
    K = model.K
    d = S[0].shape[0]
    if chunk is None:
        chunk = max(1, min(n_batches, int(2e7 // (B * d * 4))))
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    from .base import resolve_seed
    rng = np.random.default_rng(resolve_seed(seed))
    c = 1.0 - eta * model.weight_decay / d
    sqd = math.sqrt(d)
    alpha = 2.0 / (B * sqd)
    Sk = S[k]
    others = [l for l in range(K) if l != k]
    trS, trS2 = float(np.trace(Sk)), float(np.trace(Sk @ Sk))
    trM = sum(H[k, l] * np.trace(S[l]) for l in range(K))
    Scat = np.ascontiguousarray(np.hstack([S[l] for l in range(K)]))  # d x (K d)
    keys, names = _obs_keys(K, k)
    n_obs = len(keys)
    acc = BatchMeans(n_obs, 5)
    trSSl = {l: float(np.trace(Sk @ S[l])) for l in others}
    done = 0
    while done < n_batches:
        nb = min(chunk, n_batches - done)
        X = rng.standard_normal((nb * B, d))
        XS = (X @ Scat).reshape(nb, B, K, d)
        X3 = X.reshape(nb, B, d)
        diag = np.einsum("nbkd,nbd->nbk", XS, X3)  # x^T S_l x
        u = (diag @ H[k] - trM) / sqd + b[k]     # l_k per sample
        s = u.sum(axis=1)
        XSk = XS[:, :, k, :]
        GI = X3 @ X3.transpose(0, 2, 1)
        GS = XSk @ X3.transpose(0, 2, 1)
        GSS = XSk @ XSk.transpose(0, 2, 1)
        D = u[:, :, None]
        hI, hS, hSS = D * GI, D * GS, D * GSS
        tr = lambda P: np.einsum("nii->n", P)  # noqa: E731
        trp = lambda P, Q: np.einsum("nij,nji->n", P, Q)  # noqa: E731
        tKS, tKSS = tr(hS), tr(hSS)
        tK2S = trp(hI, hS)
        tKSKS = trp(hS, hS)
        tK2S2 = trp(hI, hSS)
        hShI = hS @ hI
        tKSK2S = trp(hShI, hS)
        tK2SK2S = trp(hShI, hShI)
        ords = np.zeros((nb, n_obs, 5))
        for j, key in enumerate(keys):
            if key[0] == "t":
                ords[:, j, 0] = (c * c - 1.0) * trS
                ords[:, j, 1] = -2.0 * c * alpha * (tKS - s * trS)
                ords[:, j, 2] = alpha ** 2 * (tK2S - 2.0 * s * tKS + s * s * trS)
            elif key[2] == k:
                ords[:, j, 0] = (c ** 4 - 1.0) * trS2
                ords[:, j, 1] = -4.0 * c ** 3 * alpha * (tKSS - s * trS2)
                a2s2 = alpha ** 2 * (tK2S2 - 2.0 * s * tKSS + s * s * trS2)
                asas = alpha ** 2 * (tKSKS - 2.0 * s * tKSS + s * s * trS2)
                ords[:, j, 2] = c * c * (2.0 * a2s2 + 4.0 * asas)
                ords[:, j, 3] = -4.0 * c * alpha ** 3 * (tKSK2S - 2.0 * s * tKSKS - s * tK2S2
                                                        + 3.0 * s * s * tKSS - s ** 3 * trS2)
                ords[:, j, 4] = alpha ** 4 * (tK2SK2S - 4.0 * s * tKSK2S + 4.0 * s * s * tKSKS
                                              + 2.0 * s * s * tK2S2 - 4.0 * s ** 3 * tKSS
                                              + s ** 4 * trS2)
            else:
                l = key[2]
                XSl = XS[:, :, l, :]
                cross = np.einsum("nbd,nbd->n", D * XSk, XSl)  # sum_b u_b (XS)_b . (XS_l)_b
                hSl = D * (XSl @ X3.transpose(0, 2, 1))
                ords[:, j, 0] = (c * c - 1.0) * trSSl[l]
                ords[:, j, 1] = -c * alpha * (2.0 * cross - 2.0 * s * trSSl[l])
                ords[:, j, 2] = alpha ** 2 * (trp(hS, hSl) - 2.0 * s * cross + s * s * trSSl[l])
        ords /= d
        ords *= eta ** np.arange(5)
        acc.add(ords)
        done += nb
    return {"names": names, **acc.result(), "eta": eta, "batch": B, "d": d}


# ---------------------------------------------------------------------------
# the traced noise terms of the hierarchy

def noise_terms(word, trainable):
    """The noise terms ``N_alpha`` of ``d mu_alpha / dt`` for one word (tuple of
    0-based letters), at leading order in ``1/d``: a list of ``(coef, k, l, w1, w2)``
    meaning ``coef * Lambda_kl * mu_w1 * mu_w2`` (``mu_() = 1``), the whole multiplied
    by ``eta d / B``.

    From the step ``S_k -> N_k S_k N_k`` with the batch fluctuation ``dA_k`` of
    covariance ``E[dA_k,ij dA_l,mn] = (4 Lambda_kl/(d B)) (delta_im delta_jn + delta_in
    delta_jm)`` (leading order) and ``E Tr(dA X dA Y) = (4 Lambda/(dB)) Tr X Tr Y``:

    - one letter ``k`` (trainable) at a time, ``eta^2 dA S_k dA``: ``Lambda_kk t_k
      mu(word without that letter)``;
    - two letters ``k`` at position ``i`` and ``l`` at ``j`` (both trainable), ``P``
      the letters between them and ``Q`` the rest: ``Lambda_kl [mu(kP) mu(lQ) +
      mu(kPl) mu(Q) + mu(P) mu(lQk) + mu(Pl) mu(Qk)]``.

    Per step (``dt = 4 eta / d``) the change is ``4 eta^2 N_alpha / B``.
    """
    from attndyn.symbolic.words import canonical
    w = tuple(word)
    tr = set(trainable)
    n = len(w)
    out = []

    def can(x):
        return tuple(canonical(tuple(x))) if x else ()
    for i in range(n):
        if w[i] in tr:
            out.append((1.0, w[i], w[i], (w[i],), can(w[:i] + w[i + 1:])))
    for i in range(n):
        for j in range(i + 1, n):
            k, l = w[i], w[j]
            if k not in tr or l not in tr:
                continue
            P = w[i + 1:j]
            Q = w[j + 1:] + w[:i]
            for a, bb in (((k,) + P, (l,) + Q), ((k,) + P + (l,), Q), (P, (l,) + Q + (k,)),
                          (P + (l,), Q + (k,))):
                out.append((1.0, k, l, can(a), can(bb)))
    # merge equal terms
    merged = {}
    for coef, k, l, a, bb in out:
        key = (min(k, l), max(k, l)) + tuple(sorted([a, bb]))
        merged[key] = merged.get(key, 0.0) + coef
    return [(v, key[0], key[1], key[2], key[3]) for key, v in merged.items()]


def noise_text(model, order: int = 2) -> str:
    """The noise terms of every word up to ``order``, one line each, with their order
    ``eta d / B`` (leading order in ``1/d``)."""
    from attndyn.symbolic.printing import word_label
    model = check_model(model)
    K = model.K
    lines = []

    def lab(w):
        return "1" if not w else word_label(w, K)
    for w in model.words(order):
        terms = noise_terms(w, model.trainable)
        if not terms:
            continue
        parts = []
        for coef, k, l, a, bb in terms:
            f = "" if coef == 1 else f"{coef:g} "
            mus = " ".join(lab(x) for x in (a, bb) if x)
            parts.append(f"{f}Lambda_{k + 1}{l + 1} {mus}".strip())
        lines.append(f"d {word_label(w, K)}/dt += (eta d / B) * [" + " + ".join(parts) + "]")
    return "\n".join(lines)


def random_configs(model, d: int, n: int, seed=0) -> list:
    """``n`` random tied weight configurations for the one-step check: every factor
    ``d x d`` Gaussian (:meth:`gaussian_init`) with its scale drawn uniformly in
    ``[0.5, 1.2]`` (so ``t_k`` in about ``[0.25, 1.4]``)."""
    from .base import resolve_seed
    model = check_model(model)
    rng = np.random.default_rng(resolve_seed(seed))
    out = []
    for _ in range(int(n)):
        scales = list(rng.uniform(0.5, 1.2, size=model.K))
        out.append(model.gaussian_init(d, scale=scales, seed=int(rng.integers(2 ** 31))))
    return out


def one_step_check(model, configs, *, eta, batches=(16, 64), n_batches: int = 100_000,
                   seed=0) -> list:
    """The one-step check of issue 16: for every weight configuration and batch size,
    the empirical mean change over ``n_batches`` batches (:func:`one_step_empirical`)
    against :func:`one_step_prediction` (exact through ``eta^2``). Returns one dict per
    (configuration, batch, observable) with ``empirical``, ``se``, ``flow``,
    ``corrected``, ``mean_matrix``, the z-scores ``z_flow``, ``z_corrected``,
    ``z_mean_matrix`` (difference over the standard error), and the predicted and
    measured ``eta^3`` parts and the measured ``eta^4`` part (not in the prediction) over
    the standard error."""
    ss = np.random.SeedSequence(seed if not isinstance(seed, np.random.SeedSequence)
                                else seed.entropy)
    rows = []
    for ci, W in enumerate(configs):
        for B in batches:
            p = one_step_prediction(model, W, eta=eta, batch=B)
            e = one_step_empirical(model, W, eta=eta, batch=B, n_batches=n_batches,
                                   seed=ss.spawn(1)[0])
            for i, name in enumerate(p["names"]):
                se = float(e["se"][i])
                rows.append({
                    "config": ci, "batch": B, "name": name, "empirical": float(e["mean"][i]),
                    "se": se, "flow": float(p["flow"][i]), "corrected": float(p["corrected"][i]),
                    "mean_matrix": float(p["mean_matrix"][i]),
                    "z_flow": (e["mean"][i] - p["flow"][i]) / se,
                    "z_corrected": (e["mean"][i] - p["corrected"][i]) / se,
                    "z_mean_matrix": (e["mean"][i] - p["mean_matrix"][i]) / se,
                    "eta3_pred_over_se": float(p["eta3"][i]) / se,
                    "eta3_over_se": float(e["by_order"][i, 3]) / se,
                    "eta4_over_se": float(e["by_order"][i, 4]) / se})
    return rows


def check_table(rows) -> str:
    """:func:`one_step_check` rows as a text table."""
    head = (f"{'cfg':>3} {'B':>4} {'obs':<6}{'empirical':>12}{'se':>10}{'z flow':>9}"
            f"{'z mean-S':>10}{'z corr':>8}{'eta3 pred':>10}{'eta3 meas':>10}{'eta4':>7}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['config']:>3} {r['batch']:>4} {r['name']:<6}{r['empirical']:>12.4e}"
                     f"{r['se']:>10.2e}{r['z_flow']:>9.1f}{r['z_mean_matrix']:>10.1f}"
                     f"{r['z_corrected']:>8.2f}{r['eta3_pred_over_se']:>10.2f}"
                     f"{r['eta3_over_se']:>10.2f}{r['eta4_over_se']:>7.2f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# the noise-corrected moment-level flow (tied, one trainable index, Gamma constant)

CORRECTIONS = ("none", "noise", "noise+finite-d", "finite-d")


def check_correction(correction) -> str:
    """``correction`` validated: ``"none"``, ``"noise"``, ``"noise+finite-d"`` (both: the
    moment-level flow, quadratic losses) or ``"finite-d"`` (the finite-width potential of
    :mod:`attndyn.numeric.attention.finite_width`, polynomial losses of degree <= 4)."""
    if correction is None:
        return "none"
    if not isinstance(correction, str) or correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    return correction


def _exact_EaXa(X, M, beta, d):
    """``E[a X a]`` for one sample, exactly (``X`` symmetric, loss of degree <= 2 in G):
    ``(4/d) { E[f] (Tr X I + X) + (8/d) [Tr(M^2 X) I + Tr X M^2 + 2 M X M + Tr(MX) M
    + M^2 X + X M^2] + (4 beta/sqrt d) [Tr(MX) I + Tr X M + M X + X M] }``,
    ``E[f] = E[l_k^2] = 2 Tr(M^2)/d + beta^2`` (Stein's identity twice)."""
    I = np.eye(d)
    M2 = M @ M
    Ef = 2.0 * float(np.trace(M2)) / d + beta ** 2
    trX = float(np.trace(X))
    out = Ef * (trX * I + X)
    out = out + (8.0 / d) * (float(np.trace(M2 @ X)) * I + trX * M2 + 2.0 * M @ X @ M
                             + float(np.trace(M @ X)) * M + M2 @ X + X @ M2)
    if beta != 0.0:
        out = out + (4.0 * beta / math.sqrt(d)) * (float(np.trace(M @ X)) * I + trX * M
                                                   + M @ X + X @ M)
    return 4.0 * out / d


def noise_corrected_flow(model, matrices, t_eval, *, eta, batch, correction="noise",
                         refine: int = 2, rtol: float = 1e-9, atol: float = 1e-12,
                         raise_on_failure: bool = False):
    """The moment-level flow: ``t_k, q_kk, q_kl`` of tied SGD to first order in
    ``eps = eta d / B`` around the finite-d matrix flow (issue 16).

    The SGD mean is ``S_f + eps Delta`` plus a fluctuation ``dS`` of covariance
    ``O(eps)``. Per unit of ``t = 4 eta n / d`` the batch noise is a symmetric
    matrix white noise ``dZ`` with ``E[dZ_ij dZ_mn] = (eta Lambda/B)(delta_im
    delta_jn + delta_in delta_jm) dt`` (``Lambda = E[l_k^2]``, Gaussian engine), which
    kicks ``dS = -(dZ S + S dZ)`` and, through ``eta^2 dA S dA``, shifts the mean by
    ``eps Lambda t_k I``. With the tangent flow ``dU/dt = -R U``, ``R = 2 Gamma_kk S +
    sum_{l != k} Gamma_kl S_l + gamma/4`` (exact for constant ``Gamma``), ``U(t, s) =
    U(t) U(s)^-1`` carries both, and every trace reduces to inner products
    ``<P_j(s), Q_Y(t)>`` of ``P_j = U(s)^-1 S(s)^j U(s)^-T`` and ``Q_Y = U(t)^T Y U(t)``:

    - ``E Tr(dS(t)^2)/d = (eps/d^2) int_0^t Lambda (2 <P_1,Q>^2 + 2 <P_0,Q> <P_2,Q>) ds``;
    - ``Delta(t) = int_0^t U(t,s) [Lambda t_k I - 2 Gamma_kk Pi(s)] U(t,s)^T ds`` with
      ``eps Pi = E[dS dS]`` (the flow's own curvature ``-2 Gamma_kk S^2`` acting on the
      fluctuation), itself a double integral of the same inner products;
    - ``E t_k = t_k(S_f) + eps tau(Delta)``, ``E q_kl = q_kl(S_f) + eps tau(Delta S_l)``,
      ``E q_kk = q_kk(S_f) + 2 eps tau(S_f Delta) + E Tr(dS^2)/d``.

    ``correction="noise+finite-d"`` (a loss of degree <= 2) adds the finite-d parts of the
    one-step second moment: the exact mean kick ``(eta d/4) E[A S A]``
    (:func:`_exact_EaXa`, including the learning-rate term ``eta^2 Abar S Abar``), the
    ``(8/d) [Tr(M^2 X) Tr Y + Tr X Tr(M^2 Y) + Tr(MX) Tr(MY)]`` terms of the
    fluctuation, and the single-trace pieces ``c Tr(A^T B)`` of ``E Tr(dZ A dZ B)`` in
    the fluctuation (``2 Tr(P_2 Q P_0 Q) + 2 Tr(P_1 Q P_1 Q)``) and in ``Pi``
    (``P_0 Q P_2 + 2 P_1 Q P_1 + P_2 Q P_0``), one matrix product per pair of grid
    times; the single-trace parts of the ``8/d`` terms (``O(1/d^2)``) are left out. For
    a loss of degree 3-4 it adds the finite-width potential's correction instead.

    When ``Gamma`` depends on ``q`` (any other loss; ``"noise"`` only) the flow and the
    tangent flow run with ``Gamma(q(t))``, ``Lambda`` comes from :func:`noise_potential`,
    and the shift of the overlaps by the correction itself moves ``Gamma``; that
    feedback is a linear Volterra equation on the same grid (:func:`_gamma_feedback`).

    Supported: tied, ``L = 1``, ``C = I``, one trainable index; ``"noise+finite-d"``
    needs a loss of degree <= 2 in ``G``; anything else raises ``ValueError`` naming this.
    Returns a Trajectory with rows ``mu_k, q_kk, q_kl`` (flow values in
    ``diagnostics["flow"]``).
    """
    from ..core.results import IntegrationError, Trajectory
    from ..core.validate import check_t_eval
    from .flow import solve_flow
    correction = check_correction(correction)
    if correction in ("none", "finite-d"):
        raise ValueError("noise_corrected_flow needs correction='noise' or 'noise+finite-d'")
    eta, B = _check_eta_batch(eta, batch)
    model = check_model(model)
    if not model.tied_factors or len(model.trainable) != 1:
        raise ValueError("correction='noise' is implemented for tied models with one trainable "
                         f"index (the moment-level flow); got {type(model).__name__} with "
                         f"trainable {list(getattr(model, 'trainable', []))}")
    const = True  # a loss of degree <= 2 in G: constant Gamma, the congruence is exact
    try:
        H, b = quadratic_loss(model)
    except ValueError as exc:
        if correction == "noise+finite-d":
            # degree 3-4: the finite-width potential's correction is added (first order in
            # both, the cross term eps/d left out); beyond: no finite-width term is exact
            from .finite_width import finite_width_coefficients
            try:
                finite_width_coefficients(model)
            except ValueError:
                raise ValueError("correction='noise+finite-d' needs a loss that is a polynomial "
                                 "of degree <= 4 in G (degree <= 2: the finite-d one-step terms; "
                                 f"3-4: plus the finite-width potential): {exc}") from None
        const = False
        H = b = None
        lamf = noise_potential(model)  # Lambda_kk(q): closed form or Gaussian quadrature
    C = np.array(model.C.evalf(), dtype=float)
    if not np.array_equal(C, np.eye(1)):
        raise ValueError("correction='noise' needs L = 1 and C = 1")
    if isinstance(refine, bool) or not isinstance(refine, (int, np.integer)) or refine < 1:
        raise ValueError(f"refine must be an int >= 1, got {refine!r}")
    mats = model.check_matrices(matrices)
    t_eval = check_t_eval(t_eval)
    K, k = model.K, model.trainable[0]
    d = mats[0].shape[0]
    gam = model.weight_decay
    others = [l for l in range(K) if l != k]
    # the grid: every output time, each interval split in `refine`
    te = np.unique(np.concatenate([[0.0], t_eval]))
    grid = [te[0]]
    for a, c in zip(te[:-1], te[1:]):
        grid.extend(list(np.linspace(a, c, refine + 1)[1:]))
    grid = np.array(grid)
    N = grid.size
    nbytes = 8.0 * d * d * N * (2 + 2 + len(others) + (8 if correction == "noise+finite-d" else 0))
    if nbytes > 4e9:
        raise ValueError(f"noise_corrected_flow would need about {nbytes / 1e9:.1f} GB "
                         f"(d = {d}, {N} grid times); use fewer output times or refine=1")
    Sl = {l: mats[l] for l in others}
    dd = d * d
    q_fix = np.array([[np.sum(a * c) / d for c in mats] for a in mats])

    def gamma_at(S):
        """``Gamma(q)`` at the student ``S`` (the teachers' overlaps fixed)."""
        q = q_fix.copy()
        q[k, k] = np.sum(S * S) / d
        for l in others:
            q[k, l] = q[l, k] = np.sum(S * Sl[l]) / d
        return q, model.gamma(q)
    if const:
        Rfix = sum(H[k, l] * mats[l] for l in others) if others else np.zeros((d, d))
        Rfix = Rfix + (gam / 4.0) * np.eye(d)
        Mfix = sum(H[k, l] * mats[l] for l in others) if others else np.zeros((d, d))

    def rhs(t, y):
        S = y[:dd].reshape(d, d)
        U = y[dd:].reshape(d, d)
        if const:
            g_kk = H[k, k]
            R = 2.0 * g_kk * S + Rfix
        else:
            Gm = gamma_at(S)[1]
            g_kk = Gm[k, k]
            R = 2.0 * g_kk * S + (gam / 4.0) * np.eye(d)
            for l in others:
                R = R + Gm[k, l] * Sl[l]
        RS = R @ S
        dS = -(RS + RS.T) + 2.0 * g_kk * (S @ S)
        # dS/dt = -2 Gamma_kk S^2 - sum_l Gamma_kl (S_l S + S S_l) - gamma/2 S
        #       = -(R S + S R) + 2 Gamma_kk S^2  (R carries 2 Gamma_kk S and gamma/4)
        return np.concatenate([dS.ravel(), (-(R @ U)).ravel()])
    y0 = np.concatenate([mats[k].ravel(), np.eye(d).ravel()])
    sol = solve_flow(rhs, y0, grid, rtol=rtol, atol=atol, what="tied tangent flow")
    if sol.status != 0 or sol.t.size < N:
        if raise_on_failure:
            raise IntegrationError(sol.message)
        from attndyn.symbolic.printing import word_label
        from attndyn.symbolic.words import canonical_words
        words = [tuple(w) for w in canonical_words(2, model.alphabet)]
        return Trajectory(t=np.zeros(0), y=np.zeros((len(words), 0)),
                          names=[word_label(w, K) for w in words], words=words,
                          kind="noise_flow", params={"correction": correction},
                          status=sol.status, message=sol.message)
    Ss = sol.y[:dd].T.reshape(N, d, d)
    Us = sol.y[dd:].T.reshape(N, d, d)
    Ss = 0.5 * (Ss + Ss.transpose(0, 2, 1))
    lam = np.empty(N)
    tk = np.empty(N)
    gkk = np.empty(N)
    Ms, qs = [], []
    for i in range(N):
        tk[i] = float(np.trace(Ss[i])) / d
        if const:
            M = H[k, k] * Ss[i] + Mfix
            Ms.append(M)
            lam[i] = 2.0 * float(np.sum(M * M)) / d + b[k] ** 2  # E[l_k^2] (exact = Gaussian)
            gkk[i] = H[k, k]
        else:
            q, Gm = gamma_at(Ss[i])
            qs.append(q)
            lam[i] = float(lamf(q)[k, k])
            gkk[i] = Gm[k, k]
    fin = correction == "noise+finite-d" and const  # the finite-d one-step second moment
    # Q families at every grid time: Q_I, Q_{S_f}, Q_{S_l}
    names_Y = ["I", "f"] + [f"l{l}" for l in others]
    nY = len(names_Y)
    Q = np.empty((nY, N, dd))
    for i in range(N):
        U = Us[i]
        Q[0, i] = (U.T @ U).ravel()
        Q[1, i] = (U.T @ Ss[i] @ U).ravel()
        for j, l in enumerate(others):
            Q[2 + j, i] = (U.T @ Sl[l] @ U).ravel()
    # P families at every grid time: P_0, P_1, P_2 and (finite-d) the mean kick J and
    # the M-weighted P_M = U^-1 M U^-T, P_M2 = U^-1 M^2 U^-T
    nP = 10 if fin else (3 if const else 3 + len(others))
    X = np.empty((nP, N, nY, N))
    if fin:  # P_0, P_1, P_2 as matrices, for the single-trace pieces below
        P012 = np.empty((3, N, d, d))
    for r in range(N):
        Ui = np.linalg.inv(Us[r])
        S = Ss[r]
        fam = [Ui @ Ui.T, Ui @ S @ Ui.T, Ui @ (S @ S) @ Ui.T]
        if fin:
            for j in range(3):
                P012[j, r] = fam[j]
        if not const:  # P_{M_l}, M_l = S_l S + S S_l: the directions Gamma_kl's change drives
            fam += [Ui @ (Sl[l] @ S + S @ Sl[l]) @ Ui.T for l in others]
        if fin:
            M = Ms[r]
            M2 = M @ M
            Abar = 4.0 * M / d
            EaSa = _exact_EaXa(S, M, b[k], d)
            m = Abar @ S @ Abar
            J = (eta * d / 4.0) * (m + (EaSa - m) / B)  # the exact mean kick per unit time
            sym = lambda Z: 0.5 * (Z + Z.T)  # noqa: E731
            fam += [Ui @ J @ Ui.T, Ui @ M @ Ui.T, Ui @ M2 @ Ui.T, Ui @ sym(M2 @ S) @ Ui.T,
                    Ui @ sym(M @ S) @ Ui.T, Ui @ (S @ M2 @ S) @ Ui.T, Ui @ (S @ M @ S) @ Ui.T]
        Pm = np.stack([f.ravel() for f in fam])           # (nP, dd)
        X[:, r] = np.einsum("pa,yna->pyn", Pm, Q)          # <P_p(r), Q_y(n)>
    eps = eta * d / B
    # trapezoid weights w[r, n]: int_0^{grid[n]} f(r) dr ~ sum_r w[r, n] f(r)
    w = np.zeros((N, N))
    for n in range(1, N):
        h = np.diff(grid[:n + 1])
        w[:n, n] += h / 2.0
        w[1:n + 1, n] += h / 2.0
    W0, W1, W2 = X[0, :, 0, :], X[1, :, 0, :], X[2, :, 0, :]   # (r, n) with Y = I
    # the fluctuation of q_kk: (eps/d^2) int [Lambda g + finite-d], g = 2 W1^2 + 2 W0 W2
    g_fl = lam[:, None] * (2.0 * W1 ** 2 + 2.0 * W0 * W2)
    if fin:
        TM, TM2, TM2S, TMS, TSM2S, TSMS = (X[p, :, 0, :] for p in range(4, 10))
        # the product-of-traces parts of E Tr(dA X dA Y), X, Y in {SV, VS, SVS, V}
        g_fl = g_fl + (16.0 / d) * (2.0 * TM2S * W1 + TMS ** 2 + TSM2S * W0 + W2 * TM2
                                    + TSMS * TM)
        if b[k] != 0.0:
            g_fl = g_fl + (8.0 * b[k] / math.sqrt(d)) * (2.0 * TMS * W1 + TSMS * W0 + W2 * TM)
        # the single-trace pieces, E Tr(dZ A dZ B) = c (Tr A Tr B + Tr(A^T B)): in the
        # fluctuation 2 Tr(P_2 Q P_0 Q) + 2 Tr(P_1 Q P_1 Q) (Q = Q_I(n)), and in Pi the
        # matrix K(r, s) = P_0 Q P_2 + 2 P_1 Q P_1 + P_2 Q P_0 (Q = Q_I(s)); O(1/d) relative
        QI = Q[0].reshape(N, d, d)
        single = np.zeros((N, N))
        for r in range(N):
            A1_ = P012[1, r] @ QI[r:]
            A2_ = P012[2, r] @ QI[r:]
            A0_ = P012[0, r] @ QI[r:]
            single[r, r:] = (2.0 * np.einsum("nij,nji->n", A2_, A0_)
                             + 2.0 * np.einsum("nij,nji->n", A1_, A1_))
        g_fl = g_fl + lam[:, None] * single
        Kin = np.zeros((nY, N, N))   # Kin[y, s, n] = sum_r w[r, s] Lambda(r)/d <K(r, s), Q_y(n)>
        for s_ in range(1, N):
            m_ = s_ + 1
            wr = (w[:m_, s_] * lam[:m_] / d)[:, None, None]

            def wsum(Pa, Pb):  # sum_r wr_r Pa_r Q_I(s) Pb_r as one matrix product
                left = (wr * (Pa[:m_] @ QI[s_])).transpose(1, 0, 2).reshape(d, m_ * d)
                return left @ Pb[:m_].reshape(m_ * d, d)
            K02 = wsum(P012[0], P012[2])
            Ksum = K02 + K02.T + 2.0 * wsum(P012[1], P012[1])
            Kin[:, s_, :] = Q @ Ksum.ravel()
    fluct = (eps / d ** 2) * np.einsum("rn,rn->n", w, g_fl)
    # Pi(s) kernel: Pi~(s) = int_0^s (Lambda(r)/d) [2 W1(r,s) P_1(r) + W2(r,s) P_0(r)
    #                                                 + W0(r,s) P_2(r)] dr
    # tau(Delta(t) Y) = (1/d) [ int_0^t kick(s) . Q_Y(t) ds - 2 Gamma_kk int_0^t <Pi~(s), Q_Y(t)> ds ]
    out_Y = {}
    for y in range(nY):
        X0, X1, X2 = X[0, :, y, :], X[1, :, y, :], X[2, :, y, :]
        if fin:
            kick = X[3, :, y, :] / eps           # (eta d/4) E[A S A] in units of eps
        else:
            kick = (lam * tk)[:, None] * X0      # Lambda t_k I
        first = np.einsum("sn,sn->n", w, kick)
        # inner[s, n] = int_0^s (Lambda(r)/d)(2 W1(r,s) X1(r,n) + W2(r,s) X0(r,n) + W0(r,s) X2(r,n)) dr
        A1 = w * lam[:, None] / d                 # w[r, s] Lambda(r)/d
        inner = (np.einsum("rs,rs,rn->sn", A1, 2.0 * W1, X1)
                 + np.einsum("rs,rs,rn->sn", A1, W2, X0)
                 + np.einsum("rs,rs,rn->sn", A1, W0, X2))
        if fin:
            inner = inner + Kin[y]
        second = np.einsum("sn,s,sn->n", w, gkk, inner)
        out_Y[names_Y[y]] = (first - 2.0 * second) / d
    if not const:
        out_Y = _gamma_feedback(model, k, others, qs, X, w, out_Y, fluct / eps, d)
    # flow values and corrected observables at the grid, then at t_eval
    tf = np.array([np.trace(S) / d for S in Ss])
    qkk = np.array([np.sum(S * S) / d for S in Ss])
    qkl = {l: np.array([np.sum(S * Sl[l]) / d for S in Ss]) for l in others}
    keys, names = _obs_keys(K, k)
    rows_f, rows_c = [], []
    for key in keys:
        if key[0] == "t":
            rows_f.append(tf)
            rows_c.append(tf + eps * out_Y["I"])
        elif key[2] == k:
            rows_f.append(qkk)
            rows_c.append(qkk + 2.0 * eps * out_Y["f"] + fluct)
        else:
            l = key[2]
            rows_f.append(qkl[l])
            rows_c.append(qkl[l] + eps * out_Y[f"l{l}"])
    idx = np.minimum(np.searchsorted(grid, t_eval), N - 1)
    yf = np.array(rows_f)[:, idx]
    yc = np.array(rows_c)[:, idx]
    # every canonical word of length <= 2: the student's corrected, the teachers' constant
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical_words
    words = [tuple(w) for w in canonical_words(2, model.alphabet)]
    pos = {}
    for j, key in enumerate(keys):
        pos[(k,) if key[0] == "t" else tuple(sorted(key[1:]))] = j
    y = np.empty((len(words), t_eval.size))
    y_flow = np.empty_like(y)
    for i, w in enumerate(words):
        if w in pos:
            y[i], y_flow[i] = yc[pos[w]], yf[pos[w]]
        else:  # teachers only: constant
            P = mats[w[0]] if len(w) == 1 else mats[w[0]] @ mats[w[1]]
            y[i] = y_flow[i] = float(np.trace(P)) / d
    if correction == "noise+finite-d" and not const:  # plus the finite-width potential
        from .finite_width import finite_width_flow
        fw = finite_width_flow(model, mats, t_eval, rtol=rtol, atol=atol)
        if fw.status != 0:
            if raise_on_failure:
                raise IntegrationError(fw.message)
            return Trajectory(t=np.zeros(0), y=np.zeros((len(words), 0)),
                              names=[word_label(w, K) for w in words], words=words,
                              kind="noise_flow", params={"correction": correction},
                              status=fw.status, message=fw.message)
        for i, w in enumerate(words):
            y[i] = y[i] + (fw.moment(w) - y_flow[i])
    params = model.params_dict()
    params.update({"d": d, "eta": eta, "batch": B, "correction": correction,
                   "eta_d_over_B": eps, "refine": int(refine), "rtol": rtol, "atol": atol})
    return Trajectory(t=np.asarray(t_eval, float), y=y, names=[word_label(w, K) for w in words],
                      words=words, kind="noise_flow", params=params, status=0,
                      message=f"success: moment-level flow with correction={correction!r} "
                              f"(first order in eta d / B = {eps:.3g})",
                      diagnostics={"flow": y_flow, "grid": grid, "d": d})


def _gamma_feedback(model, k, others, qs, X, w, out_Y, F_over_eps, d):
    """The correction of ``tau(Delta Y)`` when ``Gamma`` depends on ``q`` (issue 16).

    The mean shift ``eps Delta`` and the fluctuation ``F = E Tr(dS^2)/d`` move the
    overlaps by ``delta q_kk = eps (2 tau(S Delta) + F/eps)``, ``delta q_kl = eps tau(S_l
    Delta)``, and so ``Gamma`` by ``delta Gamma_km = sum_j dGamma_km/dq_j delta q_j``, which
    adds ``-sum_m delta Gamma_km M_m``, ``M_k = 2 S^2``, ``M_l = S_l S + S S_l``, to the
    drift of ``Delta``. Carried by the tangent flow, ``tau(Delta_1(t) Y) = -(1/d) sum_m
    int_0^t c_m(s) <P_{M_m}(s), Q_Y(t)> ds`` with ``c_m = delta Gamma_km / eps``: a linear
    Volterra equation for the overlaps on the trapezoid grid, solved at once. The
    fluctuation's own feedback is ``O(eps/d)`` and left out."""
    K = model.K
    N = len(qs)
    pairs = [(k, k)] + [(k, l) for l in others]    # the moving overlaps j
    alpha = np.array([2.0] + [1.0] * len(others))  # delta q_j = alpha_j x_j + beta_j
    beta = np.zeros((len(pairs), N))
    beta[0] = F_over_eps
    # J[s, m, j] = dGamma_km / dq_j at q(s), central differences (q_kl = q_lk moved together)
    J = np.empty((N, len(pairs), len(pairs)))
    ms = [k] + list(others)
    for s_ in range(N):
        q = qs[s_]
        for j, (a, c) in enumerate(pairs):
            h = 1e-5 * max(1.0, abs(q[a, c]))
            qp, qm = q.copy(), q.copy()
            qp[a, c] += h
            qm[a, c] -= h
            if a != c:
                qp[c, a] += h
                qm[c, a] -= h
            dG = (model.gamma(qp) - model.gamma(qm)) / (2.0 * h)
            J[s_, :, j] = [dG[k, m] for m in ms]
    # Z[m, y, s, n] = <P_{M_m}(s), Q_y(n)>: P families 2 (P_2, doubled) and 3.. (P_{M_l})
    nY = X.shape[2]
    Z = np.empty((len(ms), nY, N, N))
    Z[0] = 2.0 * X[2].transpose(1, 0, 2)   # X[p, s, y, n]
    for i in range(len(others)):
        Z[1 + i] = X[3 + i].transpose(1, 0, 2)
    # the feedback rows y = 1 (f: S) and 2.. (S_l) belong to pairs j = 0, 1..
    fb = list(range(1, 1 + len(pairs)))
    nJ = len(pairs)
    # x_y(n) = x0_y(n) - (1/d) sum_{m, s} w[s, n] Z[m, y, s, n] sum_j J[s, m, j] (alpha_j x_j(s) + beta_j(s))
    A = np.zeros((nJ, N, nJ, N))
    g = np.zeros((nJ, N))
    for yi, y in enumerate(fb):
        # kern[m, s, n] = w[s, n] Z[m, y, s, n]
        kern = w[None, :, :] * Z[:, y]
        A[yi] = -np.einsum("msn,smj->njs", kern, J * alpha[None, None, :]) / d
        g[yi] = -np.einsum("msn,smj,js->n", kern, J, beta) / d
    x0 = np.array([out_Y[list(out_Y)[y]] for y in fb])
    Mat = np.eye(nJ * N) - A.reshape(nJ * N, nJ * N)
    x = np.linalg.solve(Mat, (x0 + g).ravel()).reshape(nJ, N)
    c = np.einsum("smj,js->ms", J, alpha[:, None] * x + beta)   # delta Gamma_km / eps
    keys = list(out_Y)
    new = dict(out_Y)
    for y in range(nY):
        if y in fb:
            new[keys[y]] = x[fb.index(y)]
        else:
            kern = w[None, :, :] * Z[:, y]
            new[keys[y]] = out_Y[keys[y]] - np.einsum("msn,ms->n", kern, c) / d
    return new


def fig4_noise_check(*, d: int = 400, eta: float = 0.01, batch: int = 512, T: float = 1.0,
                     n_t: int = 41, seeds: int = 8, scale: float = 0.5, threads=1,
                     corrections=("noise", "noise+finite-d")) -> dict:
    """Issue 16's flow acceptance at Figure 4's settings (D.3 loss ``(G1 - G2)^2``, tied,
    student 0 and fixed teacher 1, both ``gaussian_init(scale=0.5, seed=1000 + d)`` as
    in :func:`attndyn.numeric.attention.figures.fig4`): ``seeds`` SGD runs (seeds
    ``0..seeds-1``), their mean and standard error, the uncorrected matrix flow and
    the corrected moment-level flows, and the max errors on ``mu_1, q_11, q_12``."""
    from .figures import _d3_model
    from .training import gaussian_init, sgd
    model = _d3_model()
    W = gaussian_init(model, d, scale=scale, seed=1000 + d)
    S = [w @ w.T for w in W]
    t_eval = np.linspace(0.0, T, n_t)
    names = ["mu_1", "q_11", "q_12"]
    runs = [sgd(model, W, eta=eta, batch=batch, t_eval=t_eval, seed=sd, threads=threads)
            for sd in range(seeds)]
    t = runs[0].t
    Y = np.array([[r.observable(n) for n in names] for r in runs])
    mean = Y.mean(axis=0)
    se = Y.std(axis=0, ddof=1) / math.sqrt(seeds) if seeds > 1 else np.zeros_like(mean)
    theories = {}
    for c in corrections:
        th = noise_corrected_flow(model, S, t, eta=eta, batch=batch, correction=c)
        theories[c] = np.array([th.observable(n) for n in names])
        flow = np.array([th.diagnostics["flow"][th.names.index(n)] for n in names])
    theories["none"] = flow
    out = {"t": t, "names": names, "sgd_mean": mean, "sgd_se": se, "theories": theories,
           "params": {"d": d, "eta": eta, "batch": batch, "T": T, "seeds": seeds,
                      "scale": scale, "eta_d_over_B": eta * d / batch}}
    err = {}
    for c, y in theories.items():
        e = np.abs(mean - y)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, e / np.where(se > 0, se, 1.0), 0.0)
        err[c] = {"max_abs": {n: float(e[i].max()) for i, n in enumerate(names)},
                  "max_z": {n: float(z[i, 1:].max()) for i, n in enumerate(names)}}
    out["errors"] = err
    return out


def plot_noise_check(res: dict, ax=None):
    """SGD mean +- standard error and the uncorrected and corrected theories of
    :func:`fig4_noise_check`, as the difference to the uncorrected flow (three panels
    when ``ax`` is None). Returns the axes."""
    import matplotlib.pyplot as plt
    names = res["names"]
    if ax is None:
        _, ax = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4))
    axes = np.atleast_1d(ax)
    t = res["t"]
    base = res["theories"]["none"]
    for i, n in enumerate(names[:len(axes)]):
        a = axes[i]
        m, se = res["sgd_mean"][i] - base[i], res["sgd_se"][i]
        a.fill_between(t, m - se, m + se, color="0.8", label="SGD mean +- s.e.")
        a.plot(t, m, "k.", ms=3)
        a.plot(t, np.zeros_like(t), "C0-", label="flow (no correction)")
        for j, (c, y) in enumerate(res["theories"].items()):
            if c != "none":
                a.plot(t, y[i] - base[i], f"C{j + 1}--", label=f"correction={c}")
        a.set_xlabel("t = 4 eta n / d")
        a.set_title(f"{n} minus the matrix flow")
    axes[0].legend(fontsize=7)
    return ax


# ---------------------------------------------------------------------------
# the noise terms inside the truncated hierarchy (any tied L = 1 loss)

class NoiseRows:
    """The noise terms of a truncated tied hierarchy as arrays (:func:`noise_terms` per
    word): ``dN[target[j]] += coef[j] * Lambda[k[j], l[j]] * y[a[j]] * y[b[j]]``, with index
    ``n_moments`` standing for the empty word (``mu_() = 1``). Every word in a term has
    at most the length of its row, so the rows close within the truncation."""

    def __init__(self, hierarchy):
        model = hierarchy.model
        words = hierarchy.words
        n = len(words)
        pos = {tuple(w): i for i, w in enumerate(words)}
        alpha = model.alphabet

        def idx(w):
            if not w:
                return n
            return pos[tuple(canonical(tuple(w), alpha))]
        from attndyn.symbolic.words import canonical
        tgt, coef, kk, ll, ia, ib = [], [], [], [], [], []
        for i, w in enumerate(words):
            for c, k, l, a, b in noise_terms(w, model.trainable):
                tgt.append(i)
                coef.append(c)
                kk.append(k)
                ll.append(l)
                ia.append(idx(a))
                ib.append(idx(b))
        self.n = n
        self.K = model.K
        self.target = np.array(tgt, dtype=np.int64)
        self.coef = np.array(coef, dtype=np.float64)
        self.kl = np.array(kk, dtype=np.int64) * model.K + np.array(ll, dtype=np.int64)
        self.a = np.array(ia, dtype=np.int64)
        self.b = np.array(ib, dtype=np.int64)
        self.q_index = np.array([[idx((k, l)) for l in range(model.K)]
                                 for k in range(model.K)], dtype=np.int64)
        self._ext = np.ones(n + 1)

    @property
    def n_terms(self) -> int:
        return int(self.target.size)

    def q(self, y) -> np.ndarray:
        """The overlaps ``q_kl`` (words of length 2) of the state ``y``."""
        return np.asarray(y)[self.q_index]

    def __call__(self, y, lam) -> np.ndarray:
        """``N(y)`` with the ``K x K`` coefficients ``lam`` (the hierarchy's noise rows)."""
        ext = self._ext
        ext[:self.n] = y
        vals = self.coef * np.asarray(lam, dtype=float).ravel()[self.kl] * ext[self.a] * ext[self.b]
        return np.bincount(self.target, weights=vals, minlength=self.n)


def noise_hierarchy(hierarchy, mu0, t_eval, *, eta, batch, d=None, rtol: float = 1e-10,
                    atol: float = 1e-12, check="auto", conv_tol: float = 1e-6,
                    blowup: float = 1e100, method: str = "DOP853",
                    raise_on_failure: bool = False):
    """The truncated tied hierarchy with the mini-batch noise terms (issue 16):

        d mu_alpha/dt = [eq. (11), truncated] + (eta d / B) N_alpha(mu),

    ``N_alpha`` from :func:`noise_terms` with ``Lambda_kl(q) = E[l_k l_l]`` from the
    Gaussian engine (:func:`noise_potential`), at leading order in ``1/d``. The
    fluctuations of the normalised traces are ``O(sqrt(eps / d))``, so ``E[Gamma(q) mu]
    = Gamma(E q) E mu`` at that order: for any loss and any set of trainable indices
    these rows describe the SGD mean of the moments to first order in ``eps = eta d /
    B``, the variance effect (``E q_kk != q_kk(E S)``) included, since the rows are
    written for ``E mu`` itself. ``d`` enters only through ``eps``.

    ``mu0``: as for :meth:`TiedHierarchy.integrate` (the ``K`` matrices ``S_k``, a law,
    a moment array or dict); ``d`` is read from matrices and must be given otherwise.
    ``check="auto"``: the same corrected system at ``order - 2`` (order >= 4), and status
    2 where the moments of length <= 2 differ by more than ``conv_tol * max(1, |mu|)``
    (``diagnostics["truncation_error"]``); ``None``: no check. Returns a
    :class:`Trajectory` (``kind = "hierarchy_noise"``) with status and message (blow-up
    -3, solver failure -1), or raises with ``raise_on_failure``.
    """
    from attndyn.kernels.rhs import rhs_into

    from ..core.results import IntegrationError, Trajectory, TruncationNotConverged
    from ..core.validate import _check_pos_float, check_t_eval
    from .flow import solve_flow
    from .tied import NOT_CONVERGED
    eta, B = _check_eta_batch(eta, batch)
    h = hierarchy
    model = getattr(h, "model", None)
    if not getattr(model, "tied_factors", False):
        raise TypeError("noise_hierarchy needs a tied hierarchy (TiedModel.hierarchy(order)); "
                        f"got {type(h).__name__}")
    if model.L != 1:
        raise ValueError(f"correction='noise' in the hierarchy needs L = 1, got L = {model.L}")
    t_eval = check_t_eval(t_eval)
    conv_tol = _check_pos_float(conv_tol, "conv_tol")
    if check not in (None, "auto"):
        raise ValueError(f"check must be None or 'auto' with correction='noise', got {check!r}")
    is_mats = isinstance(mu0, (list, tuple)) and len(mu0) == model.K and all(
        np.ndim(m) == 2 for m in mu0)
    if is_mats:
        d_m = int(np.shape(mu0[0])[0])
        if d is not None and int(d) != d_m:
            raise ValueError(f"d = {d} but the matrices are {d_m} x {d_m}")
        d = d_m
    if d is None:
        raise ValueError("correction='noise' needs the width d (eps = eta d / B): give mu0 "
                         "as the K matrices S_k, or pass d=")
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    d = int(d)
    eps = eta * d / B
    lamf = noise_potential(model)

    def run(hh, y_init, rows):
        system = hh._system

        def rhs(t, y):
            y = np.ascontiguousarray(y)
            return rhs_into(system, y) + eps * rows(y, lamf(rows.q(y)))
        return solve_flow(rhs, y_init, t_eval, rtol=rtol, atol=atol, method=method,
                          blowup=blowup, what=f"noise-corrected hierarchy (order {hh.order})")
    y0 = h.initial_state(mu0)
    rows = NoiseRows(h)
    sol = run(h, y0, rows)
    params = h.model.params_dict()
    params.update({"order": h.order, "correction": "noise", "d": d, "eta": eta, "batch": B,
                   "eta_d_over_B": eps, "rtol": rtol, "atol": atol})
    n_out = sol.t.size
    res = Trajectory(t=t_eval[:n_out].copy(), y=np.asarray(sol.y, float).reshape(len(y0), n_out),
                     names=list(h.names), words=list(h.words), kind="hierarchy_noise",
                     params=params, status=int(sol.status),
                     message=(f"success: truncated hierarchy (order {h.order}) with the noise "
                              f"terms, first order in eta d / B = {eps:.3g}"
                              if sol.status == 0 else sol.message),
                     diagnostics={"eta_d_over_B": eps, "noise_terms": rows.n_terms})
    if sol.status == 0 and check == "auto" and h.order >= 4:
        low = model.hierarchy(h.order - 2)
        pos = {tuple(w): i for i, w in enumerate(h.words)}
        sub = np.array([pos[tuple(w)] for w in low.words])
        sl = run(low, y0[sub], NoiseRows(low))
        short = [i for i, w in enumerate(low.words) if len(w) <= 2]
        err = {}
        if sl.status == 0:
            diff = np.abs(sol.y[sub[short]] - sl.y[short])
            scale = np.maximum(1.0, np.abs(sol.y[sub[short]]))
            bad = np.any(diff > conv_tol * scale, axis=0)
            err = {low.names[i]: float(diff[j].max()) for j, i in enumerate(short)}
            res.diagnostics["truncation_error"] = err
            if bad.any():
                t_bad = float(t_eval[int(np.argmax(bad))])
                res.status = NOT_CONVERGED
                res.message = (f"truncation not converged: orders {h.order} and {h.order - 2} "
                               f"differ by more than conv_tol = {conv_tol:g} from t = "
                               f"{t_bad:.4g} on (max {max(err.values()):.3g})")
                res.diagnostics["t_converged"] = float(t_eval[max(int(np.argmax(bad)) - 1, 0)])
        else:
            res.message += f"; convergence not checked: order {h.order - 2} failed ({sl.message})"
    elif sol.status == 0 and check == "auto":
        res.message += "; convergence not checked (order < 4)"
    if raise_on_failure and res.status != 0:
        exc = TruncationNotConverged if res.status == NOT_CONVERGED else IntegrationError
        raise exc(res.message)
    return res

