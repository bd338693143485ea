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

import math

import numpy as np

from attndyn.numeric.attention.base import check_model, obs_key, resolve_seed
from attndyn.numeric.attention.corrections import BatchMeans, qf_moment, quadratic_loss

__all__ = ["one_step_prediction", "one_step_empirical", "noise_potential", "noise_terms",
           "noise_text", "random_configs", "one_step_check"]


# ---------------------------------------------------------------------------
# exact moments of Gaussian quadratic forms


# ---------------------------------------------------------------------------
# losses of degree <= 2 in G


def _one_student(model, W):
    model = check_model(model)
    if model.sgd_form != "factors":  # the formulas assume W_k' = (c I - eta A_k) W_k
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


def check_eta_batch(eta, batch):
    from attndyn.numeric.core.validate import check_batch, check_eta
    return check_eta(eta), check_batch(batch)


def obs_keys(K, k):
    keys = [("t", k), ("q", k, k)] + [("q", k, l) for l in range(K) if l != k]
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

    from attndyn.symbolic.potential import RouteError, call_loss, g_array, tied_potential
    model = check_model(model)
    if model.L != 1 or model.loss is None:
        raise ValueError("noise_potential needs L = 1 and the model's loss callable")
    K = model.K
    psyms = [sp.Symbol(str(k), real=True) for k in model.params]
    values = [float(v) for v in model.params.values()]
    G = g_array(1, K)
    base = call_loss(model.loss, G)
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
                from attndyn.numeric.attention.potentials import tied_potential as numeric_tied
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

def _drift_matrix(model, S, k, d, exact):
    """``(M, beta, Lambda_kk)`` of :func:`one_step_prediction`: ``M = sum_l H_kl S_l`` and
    ``beta = b_k`` of a quadratic loss (exact), or ``sum_l Gamma_kl S_l``, ``0`` and
    ``Lambda_kk`` from :func:`noise_potential` (leading order; ``Lambda_kk`` is ``None`` when
    exact)."""
    K = model.K
    lam_kk = None
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
    return M, beta, lam_kk


def _single_sample_F(M, beta, d, exact, lam_kk):
    """``F(X, Y) = E Tr(a X a Y)`` of one sample (:func:`one_step_prediction`): exact by
    :func:`qf_moment`, or at leading order in ``1/d`` from ``Lambda_kk``."""
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
    return F


def _mean_matrix_changes(keys, k, flow, noise, Sk, ES1, ETr2, M, beta, exact, lam_kk, Abar,
                         eta, B, d):
    """The traces of the mean matrix ``E[S'] = ES1 + eta^2 E[A S A]``: linear traces are the
    corrected ones; ``q_kk(E[S']) = Tr(ES1^2)/d + 2 eta^2 E Tr(A S A ES1)/d
    + eta^4 Tr(E[ASA]^2)/d`` (the last, ``O(eta^4)``, at leading order in ``1/d``)."""
    I = np.eye(d)
    mean_m = []
    lam_lead = (2.0 * float(np.trace(M @ M)) / d + beta ** 2) if exact else lam_kk
    m = Abar @ Sk @ Abar
    EASA = m + (4.0 * lam_lead * (np.trace(Sk) * I + Sk) / d - m) / B
    for j, key in enumerate(keys):
        if key[0] == "q" and key[2] == k:
            mean_m.append((np.trace(ES1 @ ES1) + 2.0 * eta ** 2 * ETr2(Sk, ES1)
                           + eta ** 4 * np.trace(EASA @ EASA) - np.trace(Sk @ Sk)) / d)
        else:
            mean_m.append(flow[j] + noise[j])
    return mean_m


def _eta3_mean(F, Abar, Sk, M, beta, B, d):
    """``E Tr(A S A^2 S)`` of the batch mean ``A = Abar + dA`` (``E[dA (x) dA] = C2/B``, third
    central moment ``kappa_3/B^2``), for the ``eta^3`` term of ``q_kk`` (exact route)."""
    I = np.eye(d)

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
    return T0 + c2 / B + k3 / B ** 2


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
    eta, B = check_eta_batch(eta, batch)
    k, S = _one_student(model, W)
    K = model.K
    d = S[0].shape[0]
    g = model.weight_decay
    c = 1.0 - eta * g / d
    I = np.eye(d)
    Sk = S[k]
    M, beta, lam_kk = _drift_matrix(model, S, k, d, exact)
    Abar = 4.0 * M / d
    F = _single_sample_F(M, beta, d, exact, lam_kk)

    def ETr2(X, Y):
        m = float(np.trace(Abar @ X @ Abar @ Y))
        return m + (F(X, Y) - m) / B

    keys, names = obs_keys(K, k)
    flow, noise = [], []
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
    mean_m = _mean_matrix_changes(keys, k, flow, noise, Sk, ES1, ETr2, M, beta, exact, lam_kk,
                                  Abar, eta, B, d)
    flow, noise, mean_m = (np.array(v, dtype=float) for v in (flow, noise, mean_m))
    # the eta^3 term of q_kk, -4 c eta^3 E Tr(A S A^2 S)/d (exact route only)
    eta3 = np.zeros_like(flow)
    if exact:
        ET = _eta3_mean(F, Abar, Sk, M, beta, B, d)
        for j, key in enumerate(keys):
            if key[0] == "q" and key[2] == k:
                eta3[j] = -4.0 * c * eta ** 3 * ET / d
    return {"names": names, "flow": flow, "noise": noise, "corrected": flow + noise + eta3,
            "eta3": eta3,
            "mean_matrix": mean_m, "eta": eta, "batch": B, "d": d, "exact": bool(exact),
            "eta_d_over_B": eta * d / B}


# ---------------------------------------------------------------------------
# the empirical mean over batches


def _batch_orders(XS, X3, u, s, keys, k, c, alpha, traces, eta, d):
    """The ``eta^p`` parts (``p = 0..4``) of the one-step change of each observable, per batch
    of a chunk (:func:`one_step_empirical`): ``(n_batches, n_obs, 5)``."""
    trS, trS2, trSSl = traces
    nb, n_obs = XS.shape[0], len(keys)
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
    return ords


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
    eta, B = check_eta_batch(eta, batch)
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
    rng = np.random.default_rng(resolve_seed(seed))
    c = 1.0 - eta * model.weight_decay / d
    sqd = math.sqrt(d)
    alpha = 2.0 / (B * sqd)
    Sk = S[k]
    others = [l for l in range(K) if l != k]
    trS, trS2 = float(np.trace(Sk)), float(np.trace(Sk @ Sk))
    trM = sum(H[k, l] * np.trace(S[l]) for l in range(K))
    Scat = np.ascontiguousarray(np.hstack([S[l] for l in range(K)]))  # d x (K d)
    keys, names = obs_keys(K, k)
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
        ords = _batch_orders(XS, X3, u, s, keys, k, c, alpha, (trS, trS2, trSSl), eta, d)
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


# ---------------------------------------------------------------------------
# the noise-corrected moment-level flow (tied, one trainable index, Gamma constant)


# ---------------------------------------------------------------------------
# the noise terms inside the truncated hierarchy (any tied L = 1 loss)


