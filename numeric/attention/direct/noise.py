"""Finite learning rate: the mini-batch noise term of direct-S SGD (issue 16).

One direct-S SGD step (paper 003, appendix E, eq. 395; ``kernels/sgd.py:s_steps``) on a
trainable index ``k`` (``chi_k = 1``; teachers ``chi_k = 0`` stay fixed) is

    S_k' = c S_k - eta chi_k A_k,   c = 1 - eta chi_k gamma / d,
    A_k = (1/B) sum_b a_k(x_b),     a_k = sum_ij l_ijk (x_i x_j^T - C_ij I) / sqrt(d),

with ``l_ijk = dloss/dG_ijk`` at the sample. The update is *linear* in ``A``, so the mean
matrix follows the drift exactly, ``t_k = Tr S_k/d`` and every overlap with a fixed teacher
are linear in ``S_k'`` and get no noise term, and the only second-order terms are

    Psi_kl'   ... + eta^2 chi_k chi_l Tr(A_k A_l)/d,
    Omega_kl' ... + eta^2 chi_k chi_l Tr(A_k A_l^T)/d,

(``Psi_kl = Tr(S_k S_l)/d``, ``Omega_kl = Tr(S_k S_l^T)/d``). With ``Abar = E[a]`` and the
batch of ``B`` independent samples, ``E Tr(A_k A_l) = Tr(Abar_k Abar_l) + (E Tr(a_k a_l) -
Tr(Abar_k Abar_l)) / B``. At leading order in ``1/d`` (``x_i . x_j = d C_ij + O(sqrt d)``)

    E Tr(a_k a_l^T)/d -> Lambda^Omega_kl = sum_{ij i'j'} C_ii' C_jj' E[l_ijk l_i'j'l],
    E Tr(a_k a_l)/d   -> Lambda^Psi_kl   = sum_{ij i'j'} C_ij' C_ji' E[l_ijk l_i'j'l],

Gaussian expectations at the current ``(Psi, Omega)``: the direct potential (eq. 399) of
the function ``sum C C l l'`` instead of the loss (:func:`noise_coefficients`). The term
``Tr(Abar Abar)/d`` is ``O(1/d^2)``. Per unit of ``tau = eta n / d`` the closed ODE
(402)-(404) therefore gains

    dPsi_kl/dtau   += (eta d / B) chi_k chi_l Lambda^Psi_kl,
    dOmega_kl/dtau += (eta d / B) chi_k chi_l Lambda^Omega_kl,      dt_k/dtau += 0,

a correction of relative order ``eta d / B`` (:func:`noise_rhs`, :func:`noise_text`;
``SModel.integrate(..., correction="noise", eta=, batch=)``). Left out: the
learning-rate terms of order ``eta / d`` (``Tr(Abar Abar)``, the Euler step of the drift)
and the ``O(1/sqrt d)`` finite-width parts of ``E[a]`` and ``E Tr(a a)``.

``correction="noise+finite-d"`` (``L = 1``, losses of degree <= 2 in ``G``) replaces
``Lambda`` by the exact finite-d ``E Tr(a_k a_l)/d`` (still closed in ``t, Psi, Omega``) and
adds both ``O(eta/d)`` terms (:func:`finite_d_terms`, :func:`noise_setup`). For these
losses drift and noise are (apart from the small ``8 tau_k tau_l / d`` term) linear in
the overlaps, so this ODE follows the SGD mean at every ``eta d / B``, up to
``O(eta^2/d^2)`` and the ``O(eps/d^3)`` covariance of the ``t_k`` in that term (measured: within 2.5 standard errors of 64
SGD seeds at ``eta d / B = 0.25, 0.5, 1``, ``d = 50..200``).

This module also has the exact finite-d mean one-step change at fixed ``S`` for losses of
degree <= 2 in ``G`` with ``L = 1`` (:func:`one_step_prediction`, from the joint moments of
Gaussian quadratic forms, :func:`attndyn.numeric.attention.corrections.qf_moment`; exact, since
the observables are at most quadratic in the update) and the vectorised empirical mean
over many batches with standard errors (:func:`one_step_empirical`).
"""

from __future__ import annotations

import math

import numpy as np

from attndyn.numeric.attention.base import check_model, Correction, obs_key
from attndyn.numeric.attention.corrections import BatchMeans, qf_moment, quadratic_loss
from attndyn.numeric.attention.direct.runner import direct_order_parameters

__all__ = ["noise_coefficients", "one_step_prediction", "one_step_empirical", "noise_rhs",
           "noise_text", "one_step_check", "check_table", "check_noise_args", "random_configs",
           "finite_d_terms", "noise_setup",
           "DirectNoiseCoefficients", "DirectNoise", "DirectNoiseFiniteD"]


# ---------------------------------------------------------------------------
# argument checks

def _check_s_model(model):
    model = check_model(model)
    # the closed (t, Psi, Omega) ODE of appendix E that this module extends: a theory
    # that lists the direct noise correction
    if not any(isinstance(c, DirectNoise) for c in model.theory.corrections.values()):
        raise ValueError(f"model must be a direct-S model (SModel) with the noise correction, "
                         f"got {type(model).__name__}")
    if model.loss is None:
        raise ValueError("model: the noise correction needs the model's loss callable")
    return model


def check_noise_args(eta, batch):
    """``(eta, batch)`` validated (``eta`` a finite real > 0, ``batch`` an int >= 1)."""
    from attndyn.numeric.core.validate import check_batch, check_eta
    if eta is None:
        raise ValueError("eta (learning rate) is required for correction='noise'")
    if batch is None:
        raise ValueError("batch is required for correction='noise'")
    return check_eta(eta), check_batch(batch)


def _loss_expr(model):
    """The loss in the ``G`` symbols with its parameters' values substituted, and the
    flat list of ``G`` symbols in the order ``(i, j, k)``."""
    import sympy as sp

    from attndyn.symbolic.potential import call_loss, g_array
    L, K = model.L, model.K
    G = g_array(L, K)
    expr = call_loss(model.loss, G)
    subs = {sp.Symbol(str(k), real=True): sp.Float(float(v)) for k, v in model.params.items()}
    expr = expr.xreplace(subs) if subs else expr
    syms = [G[i, j, k] for i in range(L) for j in range(L) for k in range(K)]
    return expr, G, syms


# ---------------------------------------------------------------------------
# the Gaussian engine: Lambda^Psi, Lambda^Omega

class DirectNoiseCoefficients:
    """``Lambda^Psi_kl(Psi, Omega)`` and ``Lambda^Omega_kl(Psi, Omega)`` (``K x K``,
    symmetric; only pairs of trainable indices are computed, the rest are 0).

    ``exprs[("Psi"|"Omega", k, l)]`` is the closed form (a SymPy expression in the direct
    law's ``Omega_kl``, ``Psi_kl``) when the Gaussian engine has one, else ``None`` (the
    compiled quadrature of the numeric route evaluates it)."""

    def __init__(self, model):
        import sympy as sp

        from attndyn.symbolic.potential import direct_potential
        from attndyn.numeric.attention.potentials import build_potential
        model = _check_s_model(model)
        self.K, self.L = model.K, model.L
        L, K = self.L, self.K
        C = np.array(model.C.evalf(), dtype=float)
        expr, G, syms = _loss_expr(model)
        der = {}
        for i in range(L):
            for j in range(L):
                for k in model.trainable:
                    der[(i, j, k)] = sp.diff(expr, G[i, j, k])
        self.trainable = tuple(model.trainable)
        self.exprs, self._eval = {}, {}
        gset = set(syms)
        tr = list(model.trainable)
        for a, k in enumerate(tr):
            for l in tr[a:]:
                for kind in ("Omega", "Psi"):
                    f = sp.Integer(0)
                    for i in range(L):
                        for j in range(L):
                            for i2 in range(L):
                                for j2 in range(L):
                                    w = (C[i, i2] * C[j, j2] if kind == "Omega"
                                         else C[i, j2] * C[j, i2])
                                    if w != 0.0:
                                        f += sp.Float(w) * der[(i, j, k)] * der[(i2, j2, l)]
                    f = sp.expand(f)
                    key = (kind, k, l)
                    if not (f.free_symbols & gset):  # a constant (linear loss)
                        self.exprs[key] = f
                        self._eval[key] = ("const", float(f))
                        continue
                    pot = direct_potential(f, K, L, model.C)
                    if getattr(pot, "route", None) == "numeric":
                        pot = build_potential(pot)
                        self.exprs[key] = None
                        self._eval[key] = ("numeric", pot)
                    else:
                        self.exprs[key] = pot.phi
                        self._eval[key] = ("symbolic", pot)
        # one lambdified function for every symbolic entry
        law_syms = None
        for v in self._eval.values():
            if v[0] == "symbolic":
                law_syms = v[1].law.order_parameters
                break
        self._fun = None
        if law_syms is not None:
            self._Om, self._Ps = law_syms["Omega"], law_syms["Psi"]
            args = [self._Om[k, l] for k in range(K) for l in range(k, K)] + \
                   [self._Ps[k, l] for k in range(K) for l in range(k, K)]
            keys = [key for key, v in self._eval.items() if v[0] == "symbolic"]
            self._keys = keys
            self._fun = sp.lambdify(args, [self.exprs[key] for key in keys],
                                    modules=["scipy", "numpy"])

    def __call__(self, Psi, Omega):
        """``(Lambda^Psi, Lambda^Omega)`` at numeric ``Psi``, ``Omega`` (``K x K``)."""
        K = self.K
        Psi = np.asarray(Psi, dtype=float)
        Omega = np.asarray(Omega, dtype=float)
        if Psi.shape != (K, K) or Omega.shape != (K, K):
            raise ValueError(f"Psi and Omega must have shape ({K}, {K})")
        Psi = 0.5 * (Psi + Psi.T)
        Omega = 0.5 * (Omega + Omega.T)
        out = {"Psi": np.zeros((K, K)), "Omega": np.zeros((K, K))}
        if self._fun is not None:
            args = [Omega[k, l] for k in range(K) for l in range(k, K)] + \
                   [Psi[k, l] for k in range(K) for l in range(k, K)]
            vals = self._fun(*args)
            for key, v in zip(self._keys, vals):
                kind, k, l = key
                out[kind][k, l] = out[kind][l, k] = float(v)
        for key, (how, obj) in self._eval.items():
            kind, k, l = key
            if how == "const":
                out[kind][k, l] = out[kind][l, k] = obj
            elif how == "numeric":
                v = float(obj.phi_at(Omega=Omega, Psi=Psi))
                out[kind][k, l] = out[kind][l, k] = v
        return out["Psi"], out["Omega"]

    def text(self) -> str:
        import sympy as sp
        lines = []
        for (kind, k, l), e in self.exprs.items():
            s = "(numeric quadrature)" if e is None else sp.sstr(e)
            lines.append(f"Lambda^{kind}_{k + 1}{l + 1} = {s}")
        return "\n".join(lines)


def noise_coefficients(model) -> DirectNoiseCoefficients:
    """The noise coefficients of a direct-S model (see the module docstring):
    ``Lambda^Omega_kl = sum C_ii' C_jj' E[l_ijk l_i'j'l]``,
    ``Lambda^Psi_kl = sum C_ij' C_ji' E[l_ijk l_i'j'l]``, Gaussian expectations under the
    direct law (eqs. 397, 399) from :func:`attndyn.symbolic.potential.direct_potential`
    applied to the function ``sum C C l l'``. Cached on the model."""
    return _check_s_model(model).theory.noise_coefficients


# ---------------------------------------------------------------------------
# the corrected closed ODE

def noise_rhs(model, Psi, Omega, eta, batch, d):
    """The noise terms ``(dPsi, dOmega)`` added to eqs. (403)-(404) per unit of
    ``tau = eta n / d``: ``(eta d / B) chi_k chi_l Lambda^{Psi,Omega}_kl``."""
    lp, lo = noise_coefficients(model)(Psi, Omega)
    eps = eta * d / batch
    cc = np.outer(model.chi, model.chi)
    return eps * cc * lp, eps * cc * lo


def noise_text(model) -> str:
    """The extra terms of the corrected closed ODE, one line each, with their order
    ``eta d / B`` (leading order in ``1/d``)."""
    import sympy as sp
    model = _check_s_model(model)
    lam = noise_coefficients(model)
    lines = []
    for k in range(model.K):
        if k in model.trainable:
            lines.append(f"d t_{k + 1}/dtau += 0   (the update is linear in S: no noise term)")
    for (kind, k, l), e in lam.exprs.items():
        s = "Lambda (numeric quadrature)" if e is None else sp.sstr(e)
        lines.append(f"d {kind}_{k + 1}{l + 1}/dtau += (eta d / B) * [{s}]")
    lines.append("# left out: O(eta/d) learning-rate terms and O(1/sqrt(d)) finite-width terms")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# the one-step observables

def obs(model):
    """The one-step observables: ``("t", k)`` for trainable ``k``, ``("Psi"|"Omega", k, l)``
    for trainable ``k`` and every ``l`` (``k <= l`` when both train)."""
    tr = list(model.trainable)
    keys = [("t", k) for k in tr]
    for kind in ("Psi", "Omega"):
        for k in tr:
            for l in range(model.K):
                if l in tr and l < k:
                    continue
                keys.append((kind, k, l))
    names = [obs_key(*key) for key in keys]
    return keys, names


def _quadratic_loss(model):
    """``(H, b)`` with ``dloss/dG_k = sum_l H_kl G_l + b_k`` exactly (``L = 1``, a loss
    of degree <= 2 in G; :func:`attndyn.numeric.attention.corrections.quadratic_loss`);
    ``ValueError`` otherwise, naming the leading-order routes."""
    try:
        return quadratic_loss(model)
    except ValueError as exc:
        raise ValueError(f"{exc}; the leading-order routes (exact=False, correction='noise') "
                         "take any loss") from None


def _matrices(model, S):
    mats = model.check_matrices(S, "S")
    if not model.trainable:
        raise ValueError("model has no trainable index: nothing moves")
    return mats


def one_step_prediction(model, S, *, eta, batch, exact: bool = True) -> dict:
    """Predicted mean one-step change of ``t_k``, ``Psi_kl``, ``Omega_kl`` at fixed ``S``.

    With ``S_k' = c_k S_k - eta chi_k A_k`` (``c_k = 1 - eta chi_k gamma/d``):

    - ``t_k' - t_k = (c_k - 1) t_k - eta Tr(A_k)/d``;
    - ``Psi_kl' - Psi_kl = (c_k c_l - 1) Psi_kl - eta [c_l chi_k Tr(A_k S_l) + c_k chi_l
      Tr(S_k A_l)]/d + eta^2 chi_k chi_l Tr(A_k A_l)/d`` and the same for ``Omega`` with
      ``S_l^T``, ``A_l^T``.

    ``flow`` is the change without the ``eta^2`` term (``A -> Abar``, what the closed ODE
    predicts per step), ``noise`` the ``eta^2`` term, ``corrected = flow + noise``.

    ``exact=True`` (``L = 1``, loss of degree <= 2 in G, ``dloss/dG_k = Qc(M_k)/sqrt d +
    beta_k`` with ``M_k = sum_m H_km (S_m + S_m^T)/2``): ``Abar_k = 2 M_k / d`` (Stein) and
    ``E Tr(a_k a_l) = E[l_k l_l (Q_I^2 - 2 Q_I + d)]/d`` from the exact moments of Gaussian
    quadratic forms; ``a`` is symmetric, so ``Tr(a_k a_l^T) = Tr(a_k a_l)``. Exact at finite
    ``d`` (the observables are at most quadratic in the update).
    ``exact=False``: ``Abar_k = (2/d) sum_m (A_km S_m + B_km S_m^T)`` (``A, B`` the
    potential's gradients, eqs. 402-404) and ``E Tr(A_k A_l)/d = Lambda^Psi_kl / B``,
    ``E Tr(A_k A_l^T)/d = Lambda^Omega_kl / B`` (:func:`noise_coefficients`): leading
    order in ``1/d``, any loss and ``L``.
    """
    eta, B = check_noise_args(eta, batch)
    model = _check_s_model(model)
    mats = _matrices(model, S)
    d = mats[0].shape[0]
    c = 1.0 - eta * model.chi * model.weight_decay / d
    keys, names = obs(model)
    t0, Psi0, Om0 = direct_order_parameters(mats)
    Abar, ETr_aa = (_abar_exact(model, mats) if exact
                    else _abar_leading(model, mats, Psi0, Om0))
    flow, noise = _predicted_rows(model, mats, keys, Abar, ETr_aa, c, eta, B,
                                  (t0, Psi0, Om0), exact)
    return {"names": names, "flow": flow, "noise": noise, "corrected": flow + noise,
            "eta": eta, "batch": B, "d": d, "exact": bool(exact), "eta_d_over_B": eta * d / B}


def _abar_exact(model, mats):
    """``(Abar, ETr_aa)`` at finite ``d``: ``Abar_k = 2 M_k / d`` (Stein) and the single-sample
    ``E Tr(a_k a_l^(T))`` from quadratic-form moments (``L = 1``, degree <= 2)."""
    K = model.K
    d = mats[0].shape[0]
    I = np.eye(d)
    H, beta = _quadratic_loss(model)
    sym = [0.5 * (m + m.T) for m in mats]
    Ms = {k: sum(H[k, m] * sym[m] for m in range(K)) for k in model.trainable}
    Abar = {k: 2.0 * Ms[k] / d for k in model.trainable}

    def ETr_aa(k, l, transpose):  # single sample E Tr(a_k a_l^(T)), exact
        Mk, Ml = Ms[k], Ms[l]
        sd = math.sqrt(d)
        tot = 0.0
        for extra, coef in (([I, I], 1.0), ([I], -2.0), ([], float(d))):
            cent = [False] * len(extra)
            e = qf_moment([Mk, Ml] + extra, [True, True] + cent) / d
            e += beta[l] * qf_moment([Mk] + extra, [True] + cent) / sd
            e += beta[k] * qf_moment([Ml] + extra, [True] + cent) / sd
            e += beta[k] * beta[l] * (qf_moment(extra, cent) if extra else 1.0)
            tot += coef * e
        return tot / d
    return Abar, ETr_aa


def _abar_leading(model, mats, Psi0, Om0):
    """``(Abar, ETr_aa)`` at leading order in ``1/d``: the potential's gradients and
    ``d Lambda`` (:func:`noise_coefficients`)."""
    K = model.K
    d = mats[0].shape[0]
    Am, Bm, _ = model.gradients(Psi0, Om0)
    Abar = {k: (2.0 / d) * sum(Am[k, m] * mats[m] + Bm[k, m] * mats[m].T for m in range(K))
            for k in model.trainable}
    lp, lo = noise_coefficients(model)(Psi0, Om0)

    def ETr_aa(k, l, transpose):
        return d * (lo[k, l] if transpose else lp[k, l])
    return Abar, ETr_aa


def _predicted_rows(model, mats, keys, Abar, ETr_aa, c, eta, B, order_params, exact):
    """The ``flow`` and ``noise`` arrays of :func:`one_step_prediction`, one entry per key."""
    d = mats[0].shape[0]
    t0, Psi0, Om0 = order_params
    flow, noise = [], []
    for key in keys:
        if key[0] == "t":
            k = key[1]
            flow.append((c[k] - 1.0) * t0[k] - eta * np.trace(Abar[k]) / d)
            noise.append(0.0)
            continue
        kind, k, l = key
        T = kind == "Omega"
        Sl = mats[l].T if T else mats[l]
        Sk = mats[k]
        base = Om0[k, l] if T else Psi0[k, l]
        f = (c[k] * c[l] - 1.0) * base - eta * c[l] * np.sum(Abar[k] * Sl.T) / d
        if l in model.trainable:
            Al = Abar[l].T if T else Abar[l]
            f -= eta * c[k] * np.sum(Sk * Al.T) / d
            m = float(np.sum(Abar[k] * (Abar[l] if T else Abar[l].T)))  # Tr(Abar_k Abar_l^(T))
            if exact:
                etaa = m + (ETr_aa(k, l, T) - m) / B
            else:
                etaa = ETr_aa(k, l, T) / B  # leading order: Tr(Abar Abar) is O(1/d) smaller
            noise.append(eta ** 2 * etaa / d)
        else:
            noise.append(0.0)
        flow.append(f)
    return np.array(flow, dtype=float), np.array(noise, dtype=float)


# ---------------------------------------------------------------------------
# the empirical mean over batches

def _dloss_function(model):
    """Vectorised ``l_ijk = dloss/dG_ijk`` for the trainable ``k``: ``f(G) -> (n, B, L, L,
    n_tr)`` from ``G`` of shape ``(n, B, L, L, K)`` (SymPy derivatives of the model's loss,
    lambdified; the loss is never a string)."""
    import sympy as sp
    expr, G, syms = _loss_expr(model)
    L, K = model.L, model.K
    tr = list(model.trainable)
    ders = [sp.diff(expr, G[i, j, k]) for i in range(L) for j in range(L) for k in tr]
    fn = sp.lambdify(syms, ders, modules=["numpy"])

    def f(Gv):
        args = [Gv[..., i, j, k] for i in range(L) for j in range(L) for k in range(K)]
        vals = fn(*args)
        out = np.empty(Gv.shape[:-3] + (L, L, len(tr)))
        n = 0
        for i in range(L):
            for j in range(L):
                for a in range(len(tr)):
                    out[..., i, j, a] = vals[n]  # broadcasts a constant derivative
                    n += 1
        return out
    return f


def one_step_empirical(model, S, *, eta, batch, n_batches: int, seed=None,
                       chunk: int | None = None) -> dict:
    """Mean one-step change of the observables of :func:`one_step_prediction` over
    ``n_batches`` independent batches at the fixed matrices ``S``, with standard errors.

    Every batch's change is computed exactly from the batch: with the ``BL x BL`` Gram
    matrix ``Gm`` of the tokens and the block-diagonal ``D_k`` of the ``l_bijk``,
    ``B sqrt(d) A_k = X^T D_k X - s_k I`` (``s_k = sum_b sum_ij l_bijk C_ij``), so
    ``Tr(A_k A_l^(T)) = [Tr(D_k Gm D_l^(T) Gm) - s_l Tr(D_k Gm) - s_k Tr(D_l Gm) + s_k s_l
    d] / (B^2 d)`` and ``Tr(A_k S_m^(T))`` from ``x_bj^T S_m x_bi``. ``by_order[i, p]`` is
    the mean of the ``eta^p`` part (``p = 0, 1, 2``; ``p = 0`` holds the weight decay's
    ``c_k c_l - 1``). Tokens ``x ~ N(0, C (x) I_d)`` as in :func:`~attndyn.sgd`. Any loss
    (its derivatives are evaluated per sample). Vectorised over chunks of batches.
    """
    from attndyn.numeric.core.validate import check_batch, check_eta, resolve_seed
    eta, B = check_eta(eta), check_batch(batch)
    if isinstance(n_batches, bool) or not isinstance(n_batches, (int, np.integer)) \
            or n_batches < 2:
        raise ValueError(f"n_batches must be an int >= 2, got {n_batches!r}")
    n_batches = int(n_batches)
    model = _check_s_model(model)
    mats = _matrices(model, S)
    d = mats[0].shape[0]
    chunk = _empirical_chunk(model, d, B, n_batches, chunk)
    rng = np.random.default_rng(resolve_seed(seed))
    C = np.array(model.C.evalf(), dtype=float)
    w, V = np.linalg.eigh(C)
    F = V * np.sqrt(np.maximum(w, 0.0))  # F F^T = C (C is PSD)
    setup = {"mats": mats, "C": C, "F": F, "eta": eta, "B": B, "d": d,
             "c": 1.0 - eta * model.chi * model.weight_decay / d,
             "slot": {k: a for a, k in enumerate(model.trainable)},
             "dl": _dloss_function(model), "trS": np.array([np.trace(m) for m in mats]),
             "op": direct_order_parameters(mats), "keys": obs(model)[0], "Scat": np.hstack(mats)}
    names = obs(model)[1]
    acc = BatchMeans(len(setup["keys"]), 3)
    done = 0
    while done < n_batches:
        nb = min(chunk, n_batches - done)
        acc.add(_chunk_orders(model, setup, _sample_chunk(model, setup, rng, nb)))
        done += nb
    return {"names": names, **acc.result(), "eta": eta, "batch": B, "d": d}


def _empirical_chunk(model, d, B, n_batches, chunk):
    """The number of batches per vectorised chunk (about 200 MB), validated and bounded."""
    BL = B * model.L
    n_tr = len(model.trainable)
    # bytes per batch: tokens and X S (BL d (K + 2)), the Gram matrix and D_k Gm, D_k^T Gm
    # ((2 + 2 n_tr) (BL)^2), the G and l arrays
    per = 8.0 * (BL * d * (model.K + 2) + (2 + 2 * n_tr) * BL * BL
                 + 4 * BL * model.L * (model.K + n_tr))
    if chunk is None:
        chunk = max(1, min(n_batches, int(2e8 // per)))
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    if chunk * per > 4e9:
        raise ValueError(f"chunk = {chunk} would need about {chunk * per / 1e9:.1f} GB; "
                         "use a smaller chunk")
    return chunk


def _sample_chunk(model, setup, rng, nb):
    """``nb`` batches of tokens and the per-sample quantities the traces need: ``P`` (the
    bilinear forms ``x_bi^T S_m x_bj``), ``lv`` (the loss derivatives), the Gram matrices."""
    K, L = model.K, model.L
    B, d, C = setup["B"], setup["d"], setup["C"]
    BL = B * L
    Z = rng.standard_normal((nb, B, L, d))
    X = np.einsum("ij,nbjd->nbid", setup["F"], Z) if L > 1 else Z * setup["F"][0, 0]
    Xf = X.reshape(nb * BL, d)
    XS = (Xf @ setup["Scat"]).reshape(nb, B, L, K, d)
    # P[n,b,i,j,m] = x_bi^T S_m x_bj
    P = np.einsum("nbimd,nbjd->nbijm", XS, X)
    Gv = (P - C[None, None, :, :, None] * setup["trS"][None, None, None, None, :]) / math.sqrt(d)
    lv = setup["dl"](Gv)                                              # (nb, B, L, L, n_tr)
    if not np.all(np.isfinite(lv)):
        raise ValueError("one_step_empirical: the loss derivative is not finite at some "
                         "sample (S too large for this loss?)")
    Xb = X.reshape(nb, BL, d)
    Gm = np.matmul(Xb, Xb.transpose(0, 2, 1)).reshape(nb, B, L, B, L)
    Gin = np.einsum("nbibj->nbij", Gm)                                # x_bi . x_bj
    s = np.einsum("nbija,ij->na", lv, C)
    TD = np.einsum("nbija,nbji->na", lv, Gin)                         # Tr(D_k Gm)
    DG = np.einsum("nbija,nbjcp->nabicp", lv, Gm)                     # D_k Gm
    DtG = np.einsum("nbjia,nbjcp->nabicp", lv, Gm)                    # D_k^T Gm
    return {"nb": nb, "P": P, "lv": lv, "s": s, "TD": TD, "DG": DG, "DtG": DtG}


def _chunk_orders(model, setup, ch):
    """Each batch's exact change of every observable, split by power of ``eta``:
    ``(nb, n_obs, 3)``."""
    B, d, eta, c = setup["B"], setup["d"], setup["eta"], setup["c"]
    slot, trS, keys = setup["slot"], setup["trS"], setup["keys"]
    t0, Psi0, Om0 = setup["op"]
    nb, P, lv, s, TD = ch["nb"], ch["P"], ch["lv"], ch["s"], ch["TD"]
    sqd = math.sqrt(d)
    ords = np.zeros((nb, len(keys), 3))
    for j, key in enumerate(keys):
        if key[0] == "t":
            a = slot[key[1]]
            trA = (TD[:, a] - s[:, a] * d) / (B * sqd)
            ords[:, j, 0] = (c[key[1]] - 1.0) * t0[key[1]]
            ords[:, j, 1] = -eta * trA / d
            continue
        kind, k, l = key
        T = kind == "Omega"
        a = slot[k]
        base = Om0[k, l] if T else Psi0[k, l]
        # Tr(A_k S_l) = sum l_bijk x_bj^T S_l x_bi; Tr(A_k S_l^T) = sum l_bijk x_bi^T S_l x_bj
        Pl = P[..., l]
        tAS = (np.einsum("nbij,nbji->n", lv[..., a], Pl) if not T
               else np.einsum("nbij,nbij->n", lv[..., a], Pl))
        tAS = (tAS - s[:, a] * trS[l]) / (B * sqd)
        lin = -eta * c[l] * tAS
        quad = np.zeros(nb)
        if l in slot:
            bq = slot[l]
            Pk = P[..., k]
            # Tr(S_k A_l) = Tr(A_l S_k); Tr(S_k A_l^T) = Tr(A_l S_k^T)
            tSA = (np.einsum("nbij,nbji->n", lv[..., bq], Pk) if not T
                   else np.einsum("nbij,nbij->n", lv[..., bq], Pk))
            tSA = (tSA - s[:, bq] * trS[k]) / (B * sqd)
            lin = lin - eta * c[k] * tSA
            # Tr(D_k Gm D_l Gm) or Tr(D_k Gm D_l^T Gm)
            other = ch["DtG"][:, bq] if T else ch["DG"][:, bq]
            tDD = np.einsum("nbicp,ncpbi->n", ch["DG"][:, a], other)
            taa = (tDD - s[:, bq] * TD[:, a] - s[:, a] * TD[:, bq]
                   + s[:, a] * s[:, bq] * d) / (B * B * d)
            quad = eta ** 2 * taa / d
        ords[:, j, 0] = (c[k] * c[l] - 1.0) * base
        ords[:, j, 1] = lin / d
        ords[:, j, 2] = quad
    return ords


def random_configs(model, d: int, n: int, seed=0) -> list:
    """``n`` random direct-S configurations for the one-step check: ``S_k = s_k Z_k +
    h_k I`` with ``Z_k`` of i.i.d. ``N(0, 1/d)`` entries (not symmetric), ``s_k`` uniform
    in ``[0.5, 1.2]`` and ``h_k`` uniform in ``[-0.5, 0.5]`` (so ``t_k = h_k + O(1/d)`` and
    ``Omega_kk ~ s_k^2 + h_k^2``)."""
    from attndyn.numeric.core.validate import resolve_seed
    model = _check_s_model(model)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    rng = np.random.default_rng(resolve_seed(seed))
    out = []
    for _ in range(int(n)):
        sc = rng.uniform(0.5, 1.2, size=model.K)
        sh = rng.uniform(-0.5, 0.5, size=model.K)
        out.append([sc[k] * rng.standard_normal((d, d)) / math.sqrt(d) + sh[k] * np.eye(d)
                    for k in range(model.K)])
    return out


def one_step_check(model, configs, *, eta, batches=(16, 64), n_batches: int = 100_000,
                   seed=0, exact: bool = True) -> list:
    """The one-step check: for every configuration ``S`` and batch size, the empirical mean
    change (:func:`one_step_empirical`) against :func:`one_step_prediction`. One dict per
    (configuration, batch, observable) with ``empirical``, ``se``, ``flow``, ``corrected``,
    the z-scores ``z_flow``, ``z_corrected`` and the measured and predicted ``eta^2`` parts
    with the standard error of the measured one."""
    ss = np.random.SeedSequence(seed if not isinstance(seed, np.random.SeedSequence)
                                else seed.entropy)
    rows = []
    for ci, S in enumerate(configs):
        for B in batches:
            p = one_step_prediction(model, S, eta=eta, batch=B, exact=exact)
            e = one_step_empirical(model, S, eta=eta, batch=B, n_batches=n_batches,
                                   seed=ss.spawn(1)[0])
            for i, name in enumerate(p["names"]):
                se = float(e["se"][i])
                rows.append({
                    "config": ci, "batch": B, "name": name, "empirical": float(e["mean"][i]),
                    "se": se, "flow": float(p["flow"][i]), "corrected": float(p["corrected"][i]),
                    "z_flow": (e["mean"][i] - p["flow"][i]) / se if se > 0 else 0.0,
                    "z_corrected": (e["mean"][i] - p["corrected"][i]) / se if se > 0 else 0.0,
                    "eta2_measured": float(e["by_order"][i, 2]),
                    "eta2_se": float(e["se_by_order"][i, 2]),
                    "eta2_predicted": float(p["noise"][i])})
    return rows


def check_table(rows) -> str:
    """:func:`one_step_check` rows as a text table."""
    head = (f"{'cfg':>3} {'B':>4} {'obs':<10}{'empirical':>12}{'se':>10}{'z flow':>9}"
            f"{'z corr':>8}{'eta2 meas':>12}{'eta2 pred':>12}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['config']:>3} {r['batch']:>4} {r['name']:<10}{r['empirical']:>12.4e}"
                     f"{r['se']:>10.2e}{r['z_flow']:>9.1f}{r['z_corrected']:>8.2f}"
                     f"{r['eta2_measured']:>12.4e}{r['eta2_predicted']:>12.4e}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# hooks of SModel.integrate / SModel.theory

def finite_d_terms(model, t, Psi, Omega, *, eta, batch, d, H=None, beta=None):
    """The exact finite-d second-order terms per unit of ``tau`` for ``L = 1`` and a loss
    of degree <= 2 in ``G`` (``correction="noise+finite-d"``), closed in ``(t, Psi, Omega)``.

    With ``l_k = Qc(M_k)/sqrt d + beta_k``, ``M_k = sum_m H_km (S_m + S_m^T)/2``,
    ``m_kl/d = Tr(M_k M_l)/d = sum_ab H_ka H_lb (Psi_ab + Omega_ab)/2`` and
    ``tau_k = Tr M_k / d = sum_a H_ka t_a``, the joint cumulants of Gaussian quadratic forms
    give exactly (``Q_I = x.x``)

        E Tr(a_k a_l)/d = E[l_k l_l (Q_I^2 - 2 Q_I + d)]/d^2
          = (2 m_kl/d)(1 + 9/d + 16/d^2) + 8 tau_k tau_l / d
            + 4 (beta_l tau_k + beta_k tau_l)(1 + 1/d)/sqrt(d) + beta_k beta_l (1 + 1/d),

    (the leading order is ``Lambda_kl = 2 m_kl/d + beta_k beta_l = E[l_k l_l]``) and
    ``Tr(Abar_k Abar_l)/d = 4 (m_kl/d)/d^2``. Per unit ``tau`` ``Psi_kl`` and ``Omega_kl``
    (``a`` is symmetric for ``L = 1``) gain ``chi_k chi_l [(eta d/B) E Tr(a_k a_l)/d +
    4 eta (1 - 1/B)(m_kl/d)/d]``: the noise at finite ``d`` and the learning-rate term.
    (:func:`noise_setup` adds the Euler step's own ``O(eta/d)`` term, ``-(h/2) J_G G``.)
    Returns ``(dPsi, dOmega)``; ``ValueError`` for another loss or ``L``."""
    if H is None or beta is None:
        H, beta = _quadratic_loss(model)
    B = batch
    mm = H @ (0.5 * (Psi + Omega)) @ H.T
    tau = H @ np.asarray(t, dtype=float)
    sd = math.sqrt(d)
    e = ((2.0 * mm) * (1.0 + 9.0 / d + 16.0 / d ** 2) + 8.0 * np.outer(tau, tau) / d
         + 4.0 * (np.outer(tau, beta) + np.outer(beta, tau)) * (1.0 + 1.0 / d) / sd
         + np.outer(beta, beta) * (1.0 + 1.0 / d))
    cc = np.outer(model.chi, model.chi)
    out = cc * ((eta * d / B) * e + 4.0 * eta * (1.0 - 1.0 / B) * mm / d)
    return out, out.copy()


def noise_setup(model, init, *, correction, eta, batch, d):
    """Validate the noise options of :meth:`SModel.integrate` and return ``(ode, params)``:
    the corrected right-hand side in the packed ``[t, Psi, Omega]`` layout and the record
    of the options. ``d`` is taken from ``init`` when it holds the matrices ``S_k``
    (``d`` given too must agree), and is required for an ``(t, Psi, Omega)`` start.
    ``correction="noise"``: the leading-order terms ``(eta d / B) chi chi Lambda`` (any
    loss, any ``L``); ``"noise+finite-d"``: :func:`finite_d_terms` (``L = 1``, losses of
    degree <= 2 in ``G``) and the ``O(eta/d)`` term of the Euler step: the mean of SGD
    follows the map ``y -> y + h G(y) + O(h^2)`` (``h = eta/d``, ``G`` the corrected
    right-hand side), whose modified equation is ``dy/dtau = G - (h/2) J_G G + O(h^2)``
    (``J_G G`` by a central difference along ``G``). With both, the ODE is exact through
    ``O(eta/d)`` and at every order in ``eta d / B`` for these losses (their drift and
    noise coefficients are linear in the overlaps, so fluctuations do not enter the mean)."""
    model = _check_s_model(model)
    corr = model.theory.correction(correction)
    if not isinstance(corr, DirectNoise):
        raise ValueError(f"correction for an SModel must be 'none', 'noise' or "
                         f"'noise+finite-d', got {corr.name!r}")
    eta, B = check_noise_args(eta, batch)
    d_init = None
    if not isinstance(init, (dict, tuple)):
        d_init = model.check_matrices(init)[0].shape[0]
    if d is not None:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
            raise ValueError(f"d must be an int >= 2, got {d!r}")
        if d_init is not None and int(d) != d_init:
            raise ValueError(f"d = {d} disagrees with the matrices in init (d = {d_init})")
        d_init = int(d)
    if d_init is None:
        raise ValueError("d (the dimension) is required for correction='noise' when init is "
                         "(t, Psi, Omega): the correction is of order eta d / B")
    K = model.K
    eps = eta * d_init / B
    cc = np.outer(model.chi, model.chi)
    if not corr.finite_d:
        lam = noise_coefficients(model)

        def terms(t, Psi, Om):
            lp, lo = lam(Psi, Om)
            return eps * cc * lp, eps * cc * lo
    else:
        try:
            H, beta = _quadratic_loss(model)
        except ValueError as exc:
            raise ValueError(f"correction='noise+finite-d' for an SModel needs L = 1 and a "
                             f"loss of degree <= 2 in G: {exc}") from None

        def terms(t, Psi, Om):
            return finite_d_terms(model, t, Psi, Om, eta=eta, batch=B, d=d_init, H=H,
                                  beta=beta)

    def rhs(tau, y):
        dy = model._ode(tau, y)
        t = y[:K]
        Psi = y[K:K + K * K].reshape(K, K)
        Om = y[K + K * K:].reshape(K, K)
        ap, ao = terms(t, Psi, Om)
        dy[K:K + K * K] += ap.ravel()
        dy[K + K * K:] += ao.ravel()
        return dy
    ode = rhs
    if corr.finite_d:
        h = eta / d_init  # one step in tau

        def ode(tau, y):
            # the Euler step's own O(h) term (backward error analysis of y' = y + h G(y)):
            # dy/dtau = G - (h/2) J_G G, J_G G by a central difference along G
            g = rhs(tau, y)
            nrm = float(np.max(np.abs(g)))
            if nrm == 0.0:
                return g
            dlt = 1e-5 * max(1.0, float(np.max(np.abs(y)))) / nrm
            jg = (rhs(tau, y + dlt * g) - rhs(tau, y - dlt * g)) / (2.0 * dlt)
            return g - 0.5 * h * jg
    return ode, {"correction": corr.name, "eta": eta, "batch": B, "d": d_init,
                 "eta_d_over_B": eps}


class DirectNoise(Correction):
    """``correction="noise"`` of the direct-S closed ODE: the leading-order mini-batch
    noise terms ``(eta d / B) chi_k chi_l Lambda^{Psi,Omega}_kl`` (any loss, any ``L``;
    :func:`noise_setup`)."""

    name = "noise"
    #: adds :func:`finite_d_terms` and the Euler step's O(eta/d) term
    finite_d = False

    def check(self, theory, order):
        if theory != "ode":
            raise ValueError(f"correction={self.name!r} for an SModel applies to "
                             f"theory='ode' (the closed ODE), got theory={theory!r}")

    def apply(self, theory, init, t, *, name, order, check, words, eta=None, batch=None,
              **options):
        self.check(name, order)
        return theory.model.integrate(init, t, correction=self, eta=eta, batch=batch,
                                      **options)


class DirectNoiseFiniteD(DirectNoise):
    """``correction="noise+finite-d"``: :class:`DirectNoise` exact in ``d`` for ``L = 1``
    losses of degree <= 2 (:func:`finite_d_terms` and the Euler step's own term)."""

    name = "noise+finite-d"
    finite_d = True
