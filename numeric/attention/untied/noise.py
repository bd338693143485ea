"""Finite learning rate: the mini-batch noise term of untied SGD (issue 16).

Untied attention ``S_k = U_k V_k^T`` (paper 003, section 4, eqs. 24-25), one
token (``L = 1``, ``C = 1``), ``G_j = x^T M_j x / sqrt d`` with ``M_j = U_j
V_j^T`` (not centred: ``E G_j = m_j``). The gradient of the loss in ``U_k`` is
``l_k x x^T V_k / sqrt d`` and in ``V_k`` it is ``l_k x x^T U_k / sqrt d``
(``l_k = dloss/dG_k``), so one SGD step with learning rate ``eta``, batch ``B``
and weight decay ``gamma`` is exactly

    U' = c U - eta Z V,   V' = c V - eta Z U,   c = 1 - eta gamma / d,
    Z = (1/B) sum_b z_b,  z_b = l_k(G_b) x_b x_b^T / sqrt d   (symmetric).

With the letters ``M = U V^T``, ``A = U U^T``, ``B = V V^T`` every letter moves
as ``X -> c^2 X - c eta (L_X Z + Z R_X) + eta^2 Z C_X Z``:

=========  =======  =======  =======
letter     ``L``    ``R``    ``C``
=========  =======  =======  =======
``M``      ``A``    ``B``    ``M^T``
``M^T``    ``B``    ``A``    ``M``
``A``      ``M``    ``M^T``  ``B``
``B``      ``M^T``  ``M``    ``A``
=========  =======  =======  =======

(tied ``S -> S - eta (A S + S A) + eta^2 A S A`` is the case ``L = R = C = S``).
The flow (fast time ``t = eta n`` for the means, slow ``tau = eta n / d`` for
the traces) keeps the mean of the first-order term, ``E Z = Zbar``. The
``eta^2`` term holds the batch noise: ``E[Z X Z] = Zbar X Zbar + (E[z X z] -
Zbar X Zbar) / B`` with ``Tr(z X z Y) = l^2 (x^T X x)(x^T Y x) / d``; at leading
order in ``1/d``, ``E Tr(dZ X dZ Y) = (Lambda / (d B)) Tr X Tr Y`` with
``Lambda = E[l_k^2]`` (the Gaussian engine).

This module has

- :func:`one_step_prediction`: the mean one-step change of ``m_k, tA_k, tB_k,
  q1_kk, q2_kk, q1_kl, q2_kl`` (``k`` trainable, ``l`` a teacher) at fixed
  weights, split into the flow (first order), the learning-rate part of the
  ``eta^2`` term (``Zbar X Zbar``), its batch-noise part (``1/B``) and the
  ``eta^3`` term of ``q1_kk, q2_kk``; exact at finite ``d`` for a loss of degree
  <= 2 in ``G`` (joint moments of Gaussian quadratic forms,
  :func:`attndyn.numeric.attention.corrections.qf_moment`), or at leading order in
  ``1/d`` with the Gaussian engine;
- :func:`one_step_empirical`: the mean over many batches at fixed weights,
  vectorised (``B x B`` Gram matrices), split by the power of ``eta``, with
  standard errors; :func:`one_step_check` and :func:`check_table` put the two
  side by side;
- :func:`noise_terms`, :func:`noise_text`: the noise terms of the untied slow
  hierarchy (words over ``M_k, M_k^T, A_k, B_k``), of order ``eta d / B`` on the
  slow time; :func:`noise_rhs` evaluates them at finite-d weights;
- :func:`noise_hierarchy` (the truncated slow hierarchy plus the noise terms) and
  :func:`noise_shift` (its first-order response, which ``compare(..., correction="noise")``
  adds to the finite-d flow).

Time scales: the noise moves ``tA_k, tB_k, q1_kk, q2_kk`` at ``O(eta d / B)`` on the slow
time; the means ``m_k`` get ``O(eta / B)`` on the fast time (their slaved value shifts the
bias ``beta_k`` by ``O(eta sqrt(d) / B)``) and the cross overlaps with a teacher
``O(eta / B)`` on the slow time.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from attndyn.numeric.attention.base import check_model, Correction, obs_key, resolve_seed
from attndyn.numeric.attention.corrections import BatchMeans, qf_moment, quadratic_loss
from attndyn.numeric.attention.untied.coefficients import (H_FAIL, HEAD, kernel_rhs,
                                                           low_from_words, obs, NOT_CONVERGED,
                                                           RootError, with_loss_row)
from attndyn.numeric.attention.untied.fastslow import critical_mean
from attndyn.numeric.attention.untied.hierarchy import hierarchy
from attndyn.numeric.core.results import IntegrationError, TruncationNotConverged
from attndyn.numeric.core.validate import check_batch, check_eta, check_t_eval
from attndyn.symbolic import untied as su

__all__ = ["one_step_prediction", "one_step_empirical", "one_step_check", "check_table",
           "noise_coefficients", "noise_terms", "noise_text", "noise_rhs", "random_configs",
           "LETTER_RULES", "noise_hierarchy", "noise_shift", "UntiedNoise"]

M_, MT_, A_, B_ = 0, 1, 2, 3  # letter kinds; letter = 4 k + kind

#: per letter kind: (L, R, C) kinds of ``X -> X - eta (L Z + Z R) + eta^2 Z C Z``
LETTER_RULES = {M_: (A_, B_, MT_), MT_: (B_, A_, M_), A_: (M_, MT_, B_), B_: (MT_, M_, A_)}


# ---------------------------------------------------------------------------
# validation

def _check_untied(model, what="noise_untied"):
    """The model if its SGD moves pairs ``(U_k, V_k)`` (``sgd_form``), else a ValueError."""
    model = check_model(model)
    if model.sgd_form != "pairs":
        raise ValueError(f"{what} needs an UntiedModel (pairs U_k, V_k), got "
                         f"{type(model).__name__}")
    return model


def _untied_one_student(model, pairs):
    model = _check_untied(model)
    if model.L != 1:
        raise ValueError(f"the untied one-step noise term needs L = 1, got L = {model.L}")
    C = np.array(model.C.evalf(), dtype=float) if hasattr(model.C, "evalf") else np.asarray(
        model.C, float)
    if C.shape != (1, 1) or C[0, 0] != 1.0:
        raise ValueError("the untied one-step noise term needs L = 1 and C = 1")
    if len(model.trainable) != 1:
        raise ValueError(f"the untied one-step noise term needs exactly one trainable index, "
                         f"got {list(model.trainable)}")
    pairs = model.check_factors(pairs, "pairs")
    return model, model.trainable[0], pairs


def check_eta_batch(eta, batch):
    return check_eta(eta), check_batch(batch)


def _obs_names(K, k):
    teachers = [l for l in range(K) if l != k]
    keys = [("m",), ("tA",), ("tB",), ("q1s",), ("q2s",)]
    names = [obs_key("m", k), obs_key("tA", k), obs_key("tB", k), obs_key("q1", k, k),
             obs_key("q2", k, k)]
    for l in teachers:
        keys += [("q1t", l), ("q2t", l)]
        names += [obs_key("q1", k, l), obs_key("q2", k, l)]
    return keys, names


# ---------------------------------------------------------------------------
# the Gaussian engine: Lambda_kl = E[l_k l_l] and friends

def _untied_expectation(model, expr_fn):
    """``E f(G)`` over the untied Gaussian-equivalent ``G`` (means ``m``, covariance
    ``q1 + q2``) as a callable of ``(m, q1, q2)``; ``expr_fn(G)`` a SymPy expression."""
    import sympy as sp

    from attndyn.symbolic.potential import untied_potential
    psyms = [sp.Symbol(str(k), real=True) for k in model.params]
    vals = [float(v) for v in model.params.values()]
    pot = untied_potential(expr_fn, model.K, 1, None, params=psyms, hessian=False)
    K = model.K
    if isinstance(getattr(pot, "phi", None), sp.Expr):
        # a symbolic route: lambdify once (pot.evaluate validates on every call, ~5 ms)
        op = pot.order_parameters() if callable(pot.order_parameters) else pot.order_parameters
        args = [op["m"][k] for k in range(K)]
        args += [op["q1"][k, l] for k in range(K) for l in range(k, K)]
        args += [op["q2"][k, l] for k in range(K) for l in range(k, K)]
        fn = sp.lambdify(args + psyms, pot.phi, "numpy")
        iu = np.triu_indices(K)

        def f(m, q1, q2):
            q1 = np.asarray(q1, float)
            q2 = np.asarray(q2, float)
            return float(fn(*np.asarray(m, float).reshape(K), *q1[iu], *q2[iu], *vals))
        return f

    def f(m, q1, q2):
        return float(pot.evaluate(vals, m=np.asarray(m, float), q1=np.asarray(q1, float),
                                  q2=np.asarray(q2, float))["phi"])
    return f


def noise_coefficients(model):
    """``Lambda(m, q1, q2)``: the ``K x K`` matrix ``E[dloss/dG_k dloss/dG_l]`` of the
    untied Gaussian-equivalent pre-activations (paper 003, Theorem 1 applied to the
    function ``l_k l_l``), as a callable. Cached on the model's theory."""
    cache = model.theory.noise_cache
    if "lambda" in cache:
        return cache["lambda"]
    import sympy as sp

    from attndyn.symbolic.potential import call_loss, g_array
    if model.L != 1 or model.loss is None:
        raise ValueError("noise_coefficients needs L = 1 and the model's loss callable")
    K = model.K
    G = g_array(1, K)
    syms = [G[0, 0, j] for j in range(K)]
    ders = [sp.diff(call_loss(model.loss, G), s) for s in syms]
    fns = {}
    for a in range(K):
        for b in range(a, K):
            f = sp.expand(ders[a] * ders[b])
            fns[(a, b)] = _untied_expectation(
                model, lambda G2, f=f: f.subs({syms[j]: G2[0, 0, j] for j in range(K)}))

    def lam(m, q1, q2):
        out = np.empty((K, K))
        for (a, b), f in fns.items():
            out[a, b] = out[b, a] = f(m, q1, q2)
        return out
    cache["lambda"] = lam
    return lam


def _lead_moments(model, k):
    """Gaussian-engine ``E[l_k^2]``, ``E[l_k^2 G_j]``, ``E[l_k^2 G_i G_j]`` (leading order)."""
    cache = model.theory.noise_cache
    key = ("lead", k)
    if key in cache:
        return cache[key]
    import sympy as sp

    from attndyn.symbolic.potential import call_loss, g_array
    K = model.K
    G = g_array(1, K)
    syms = [G[0, 0, j] for j in range(K)]
    l2 = sp.expand(sp.diff(call_loss(model.loss, G), syms[k]) ** 2)

    def mk(extra):
        f = sp.expand(l2 * extra)
        return _untied_expectation(model,
                                   lambda G2, f=f: f.subs({syms[j]: G2[0, 0, j] for j in range(K)}))
    out = {(): mk(1)}
    for i in range(K):
        out[(i,)] = mk(syms[i])
        for j in range(i, K):
            out[(i, j)] = mk(syms[i] * syms[j])
    cache[key] = out
    return out


# ---------------------------------------------------------------------------
# the predicted mean one-step change

def _sym(X):
    return 0.5 * (X + X.T)


def one_step_prediction(model, pairs, *, eta, batch, exact: bool = True,
                        third: bool = True) -> dict:
    """Predicted mean one-step change of ``m_k, tA_k, tB_k, q1_kk, q2_kk, q1_kl, q2_kl``.

    ``k`` is the trainable index, ``l`` runs over the teachers. With ``Z`` the batch
    matrix of the module docstring, ``c = 1 - eta gamma / d`` and
    ``D1 = -c (A Z + Z B)``, ``D2 = Z M^T Z`` (so ``M' = c^2 M + eta D1 + eta^2 D2``):

    ==========  =============================  =======================================================
    observable  first order (``eta``)          ``eta^2``
    ==========  =============================  =======================================================
    ``m``       ``-c Tr((A+B) Z)/sqrt d``      ``Tr(Z M^T Z)/sqrt d``
    ``tA``      ``-2c Tr(M Z)/d``              ``Tr(Z B Z)/d``
    ``tB``      ``-2c Tr(M Z)/d``              ``Tr(Z A Z)/d``
    ``q1_kl``   ``-c Tr(Z(T^T A + B T^T))/d``  ``Tr(Z M^T Z T^T)/d``  (``T = M_l``)
    ``q2_kl``   ``-c Tr(Z(T A + B T))/d``      ``Tr(Z M^T Z T)/d``
    ``q1_kk``   ``-2c^3 Tr(Z(AM + MB))/d``     ``c^2 Tr(Z A^2 Z + 2 Z A Z B + Z B^2 Z + 2 Z M Z M)/d``
    ``q2_kk``   ``-2c^3 Tr(Z(MA + BM))/d``     ``c^2 Tr(ZAZA + 2 Z BA Z + ZBZB + 2 Z M^T Z M)/d``
    ==========  =============================  =======================================================

    plus ``(c^2 - 1)`` (``c^4 - 1`` for ``q*_kk``) times the observable at order 0. The
    ``q*_kk`` rows also have ``eta^3`` terms ``-2c Tr(Z Z M Z A + Z B Z M Z)/d`` (``M``
    replaced by ``M^T`` for ``q2``) and ``eta^4`` terms ``Tr(Z M^T Z Z M Z)/d`` (left out).

    Expectations: ``E Tr(Z X) = Tr(Zbar X)``, ``E Tr(Z X Z Y) = Tr(Zbar X Zbar Y) +
    (F(X, Y) - Tr(Zbar X Zbar Y)) / B`` with ``F(X, Y) = E[l^2 Q_X Q_Y] / d``, ``Q_X =
    x^T X x``, and the three-``Z`` traces from the batch mean's second (``1/B``) and
    third (``1/B^2``) central moments with ``E[l^3 Q_X Q_Y Q_W] / d^(3/2)``.

    ``exact=True`` (a loss of degree <= 2 in ``G``, ``l_k = x^T N x / sqrt d + b``
    with ``N = sum_j H_kj M_j``): ``Zbar = [(Tr N / sqrt d + b) I + 2 sym(N) / sqrt d]
    / sqrt d`` (Stein) and every moment by :func:`qf_moment`: exact through ``eta^3``.
    ``exact=False`` (any loss, leading order in ``1/d``): ``Zbar = Phi_m I / sqrt d + 2
    P / d`` as in the flow, ``F(X, Y) = E[l^2 q_X q_Y] / d`` with ``q_X = sqrt d G_j``
    for ``X = M_j, M_j^T`` and ``q_X = Tr X`` otherwise (Gaussian engine); no
    ``eta^3`` term. ``third=False`` skips the ``eta^3`` term (six-factor moments, the
    costly part at large ``d``).

    Returns ``{"names", "flow", "lr", "noise", "eta3", "corrected", "eta", "batch", "d",
    "exact", "eta_d_over_B"}``:
    ``flow`` the first-order (drift) change with the weight-decay ``c`` factors,
    ``lr`` the ``eta^2`` part without the batch noise (``Zbar X Zbar``), ``noise`` its
    ``1/B`` part, ``corrected = flow + lr + noise + eta3``.
    """
    eta, Bsz = check_eta_batch(eta, batch)
    model, k, pairs = _untied_one_student(model, pairs)
    mom = _StepMoments(model, k, pairs, exact, Bsz)
    flow, lr, noise, eta3 = _prediction_rows(mom, eta, model.weight_decay, exact and third)
    d = mom.d
    return {"names": mom.names, "flow": flow, "lr": lr, "noise": noise, "eta3": eta3,
            "corrected": flow + lr + noise + eta3, "eta": eta, "batch": Bsz, "d": d,
            "exact": bool(exact), "eta_d_over_B": eta * d / Bsz}


class _StepMoments:
    """The expectations of one untied SGD step at fixed weights: ``Zbar`` and the traces
    ``E Tr(Z X)``, ``E Tr(Z X Z Y)``, ``E Tr(Z X Z Y Z W)`` (:func:`one_step_prediction`)."""

    def __init__(self, model, k, pairs, exact, Bsz):
        K = model.K
        self.k, self.K, self.exact, self.Bsz = k, K, exact, Bsz
        self.d = d = pairs[0][0].shape[0]
        self.sd = sd = math.sqrt(d)
        self.I = np.eye(d)
        self.Ms = Ms = [U @ V.T for U, V in pairs]
        U, V = pairs[k]
        self.M = Ms[k]
        self.Am, self.Bm = U @ U.T, V @ V.T
        self.keys, self.names = _obs_names(K, k)
        if exact:
            H, b = quadratic_loss(model)
            N = sum(H[k, j] * Ms[j] for j in range(K))
            self.Ns = Ns = _sym(N)
            self.beta = beta = float(b[k])
            El = float(np.trace(N)) / sd + beta
            self.Zb = (El * self.I + 2.0 * Ns / sd) / sd
        else:
            th = model.theory.coefficients
            m = np.array([np.trace(X) for X in Ms]) / sd
            q1 = np.array([[np.sum(Ms[i] * Ms[j]) for j in range(K)] for i in range(K)]) / d
            q2 = np.array([[np.sum(Ms[i] * Ms[j].T) for j in range(K)] for i in range(K)]) / d
            g = th.gradients(m, q1, q2)
            P = sum(g["a1"][k, j] * Ms[j] + g["a2"][k, j] * Ms[j].T for j in range(K))
            self.Zb = g["grad_m"][k] * self.I / sd + 2.0 * P / d
            lead = _lead_moments(model, k)
            self.lv = {key: f(m, q1, q2) for key, f in lead.items()}

    def F(self, X, Y, jx=None, jy=None):
        """``E[l^2 Q_X Q_Y] / d`` (``jx``: ``X`` is ``M_jx`` or its transpose)."""
        d, sd = self.d, self.sd
        if not self.exact:
            vals = []
            for j, Z_ in ((jx, X), (jy, Y)):
                vals.append(("G", j) if j is not None else ("T", float(np.trace(Z_))))
            gi = [v[1] for v in vals if v[0] == "G"]
            tr = [v[1] for v in vals if v[0] == "T"]
            e = self.lv[tuple(sorted(gi))] * (sd ** len(gi))
            for t_ in tr:
                e *= t_
            return e / d
        Ns, beta = self.Ns, self.beta
        Xs, Ys = _sym(X), _sym(Y)
        e2 = qf_moment([Ns, Ns, Xs, Ys]) / d
        e1 = 2.0 * beta * qf_moment([Ns, Xs, Ys]) / sd if beta != 0.0 else 0.0
        e0 = beta ** 2 * qf_moment([Xs, Ys]) if beta != 0.0 else 0.0
        return (e2 + e1 + e0) / d

    def E3(self, X, Y, W):
        """single-sample ``E Tr(z X z Y z W) = E[l^3 Q_X Q_Y Q_W] / d^(3/2)`` (exact route)."""
        d, sd, Ns, beta = self.d, self.sd, self.Ns, self.beta
        ex = [_sym(X), _sym(Y), _sym(W)]
        out = qf_moment([Ns] * 3 + ex) / sd ** 3
        if beta != 0.0:
            out += 3.0 * beta * qf_moment([Ns] * 2 + ex) / d
            out += 3.0 * beta ** 2 * qf_moment([Ns] + ex) / sd
            out += beta ** 3 * qf_moment(ex)
        return out / sd ** 3

    def tr1(self, Y):
        """``E Tr(Z Y) = Tr(Zbar Y)``."""
        return float(np.sum(self.Zb * Y.T))

    def T2(self, X, Y):
        """``Tr(Zbar X Zbar Y)``."""
        Zb = self.Zb
        return float(np.sum((Zb @ X) * (Zb @ Y).T))

    def tr2(self, X, Y, jx=None, jy=None):
        """``E Tr(Z X Z Y)`` as ``(mean part, batch part)``: mean + batch / B."""
        t0 = self.T2(X, Y)
        return t0, self.F(X, Y, jx, jy) - t0

    def tr3(self, X, Y, W):
        """``E Tr(Z X Z Y Z W)`` from the batch mean's second and third central moments."""
        Zb, Bsz = self.Zb, self.Bsz
        T0 = float(np.trace(Zb @ X @ Zb @ Y @ Zb @ W))

        def C2(P_, Q_):
            return self.F(P_, Q_) - self.T2(P_, Q_)
        c2 = C2(X, Y @ Zb @ W) + C2(Y, W @ Zb @ X) + C2(W, X @ Zb @ Y)
        k3 = self.E3(X, Y, W) - c2 - T0
        return T0 + c2 / Bsz + k3 / Bsz ** 2


def _prediction_rows(mom, eta, weight_decay, third):
    """The rows ``flow, lr, noise, eta3`` of :func:`one_step_prediction` (its table)."""
    d, sd, Bsz, I, M, Am, Bm = mom.d, mom.sd, mom.Bsz, mom.I, mom.M, mom.Am, mom.Bm
    c = 1.0 - eta * weight_decay / d
    tr1, tr2, tr3 = mom.tr1, mom.tr2, mom.tr3
    flow, lr, noise, eta3 = [], [], [], []
    trA, trB, trM = float(np.trace(Am)), float(np.trace(Bm)), float(np.trace(M))
    A2, B2, BA = Am @ Am, Bm @ Bm, Bm @ Am

    def add(o0, o1, pairs2, o3=0.0):
        flow.append(o0 + eta * o1)
        mean = sum(w * p[0] for w, p in pairs2)
        bat = sum(w * p[1] for w, p in pairs2)
        lr.append(eta ** 2 * mean)
        noise.append(eta ** 2 * bat / Bsz)
        eta3.append(eta ** 3 * o3)

    jk = mom.k
    for key in mom.keys:
        if key[0] == "m":
            add((c * c - 1.0) * trM / sd, -c * tr1(Am + Bm) / sd,
                [(1.0 / sd, tr2(M.T, I, jx=jk))])
        elif key[0] == "tA":
            add((c * c - 1.0) * trA / d, -2.0 * c * tr1(M) / d, [(1.0 / d, tr2(Bm, I))])
        elif key[0] == "tB":
            add((c * c - 1.0) * trB / d, -2.0 * c * tr1(M) / d, [(1.0 / d, tr2(Am, I))])
        elif key[0] == "q1s":
            o3 = -2.0 * c * (tr3(I, M, Am) + tr3(Bm, M, I)) / d if third else 0.0
            add((c ** 4 - 1.0) * np.sum(M * M) / d,
                -2.0 * c ** 3 * (tr1(Am @ M) + tr1(M @ Bm)) / d,
                [(c * c / d, tr2(A2, I)), (2.0 * c * c / d, tr2(Am, Bm)),
                 (c * c / d, tr2(B2, I)), (2.0 * c * c / d, tr2(M, M, jx=jk, jy=jk))], o3)
        elif key[0] == "q2s":
            o3 = -2.0 * c * (tr3(I, M.T, Am) + tr3(Bm, M.T, I)) / d if third else 0.0
            add((c ** 4 - 1.0) * np.sum(M * M.T) / d,
                -2.0 * c ** 3 * (tr1(M @ Am) + tr1(Bm @ M)) / d,
                [(c * c / d, tr2(Am, Am)), (2.0 * c * c / d, tr2(BA, I)),
                 (c * c / d, tr2(Bm, Bm)), (2.0 * c * c / d, tr2(M.T, M, jx=jk, jy=jk))], o3)
        else:
            l = key[1]
            T = mom.Ms[l]
            Y = T.T if key[0] == "q1t" else T
            add((c * c - 1.0) * np.sum(M * Y.T) / d, -c * (tr1(Y @ Am) + tr1(Bm @ Y)) / d,
                [(1.0 / d, tr2(M.T, Y, jx=jk, jy=l))])
    return tuple(np.array(v, dtype=float) for v in (flow, lr, noise, eta3))


# ---------------------------------------------------------------------------
# the empirical mean over batches

def one_step_empirical(model, pairs, *, eta, batch, n_batches: int, seed=None,
                       chunk: int | None = None) -> dict:
    """Mean one-step change of the :func:`one_step_prediction` observables over
    ``n_batches`` independent batches at the fixed weights ``pairs``, with standard
    errors.

    Every batch's change is computed exactly from ``B x B`` Gram matrices: with the
    batch ``X`` (``B x d``), ``D = diag(l_k(G_b))`` and ``alpha = 1/(B sqrt d)``,
    ``Z = alpha X^T D X``, so ``Tr(Z Y) = alpha sum_b D_b x_b^T Y x_b`` and
    ``Tr(Z X_1 Z X_2 ...) = alpha^n Tr(D G_1 D G_2 ...)`` with ``G_i = X X_i X^T``.
    ``by_order[i, p]`` is the mean of the ``eta^p`` part (``p = 0..4``; the weight
    decay's ``c`` kept inside). Vectorised over chunks of batches (BLAS); memory
    about ``chunk * B * d * 8 * (8 + 2 (K - 1))`` bytes. Needs a loss of degree <= 2
    in ``G`` (``l_k`` per sample from ``(H, b)``).
    """
    eta, Bsz = check_eta_batch(eta, batch)
    if isinstance(n_batches, bool) or not isinstance(n_batches, (int, np.integer)) \
            or n_batches < 2:
        raise ValueError(f"n_batches must be an int >= 2, got {n_batches!r}")
    n_batches = int(n_batches)
    model, k, pairs = _untied_one_student(model, pairs)
    H, b = quadratic_loss(model)
    d = pairs[0][0].shape[0]
    teachers = [l for l in range(model.K) if l != k]
    nmat = 4 + 2 * len(teachers)
    if chunk is None:
        chunk = max(1, min(n_batches, int(3e7 // (Bsz * d * (nmat + 4)))))
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    rng = np.random.default_rng(resolve_seed(seed))
    st = _EmpiricalState(model, k, pairs, H[k], float(b[k]), teachers, eta, Bsz)
    acc = BatchMeans(len(st.keys), 5)
    done = 0
    while done < n_batches:
        nb = min(chunk, n_batches - done)
        acc.add(st.orders(rng.standard_normal((nb, Bsz, d))))
        done += nb
    return {"names": st.names, **acc.result(), "eta": eta, "batch": Bsz, "d": d}


def _rd(P, Q):
    """Row dots: ``(nb, B, d) x (nb, B, d) -> (nb, B)``."""
    return np.einsum("nbd,nbd->nb", P, Q)


def _t2(u, GX, GY):
    """``sum_bb' u_b GX[b,b'] u_b' GY[b',b]`` per batch."""
    return np.einsum("nb,nbc,nc,ncb->n", u, GX, u, GY, optimize=True)


def _chain(u, *Gs):
    """``Tr(D G_1 D G_2 ...)`` per batch, ``D = diag(u)``."""
    P = u[:, :, None] * Gs[0]
    for G_ in Gs[1:]:
        P = P @ (u[:, :, None] * G_)
    return np.einsum("nii->n", P)


class _EmpiricalState:
    """The fixed weights of :func:`one_step_empirical` and the exact change of every
    observable, split by the power of ``eta``, for a chunk of batches."""

    def __init__(self, model, k, pairs, Hk, bk, teachers, eta, Bsz):
        self.k, self.K, self.Hk, self.bk, self.teachers = k, model.K, Hk, bk, teachers
        self.eta, self.Bsz = eta, Bsz
        self.d = d = pairs[0][0].shape[0]
        self.c = 1.0 - eta * model.weight_decay / d
        self.sd = math.sqrt(d)
        self.alpha = 1.0 / (Bsz * self.sd)
        self.Ms = Ms = [U @ V.T for U, V in pairs]
        U, V = pairs[k]
        self.M = M = Ms[k]
        self.Am, self.Bm = U @ U.T, V @ V.T
        # X @ [A, B, M^T, M, T_l^T, T_l, ...]: rows (A x), (B x), (M x), (M^T x), (T x), (T^T x)
        cat = [self.Am, self.Bm, M.T, M]
        for l in teachers:
            cat += [Ms[l].T, Ms[l]]
        self.Cat = np.ascontiguousarray(np.hstack(cat))
        self.n_cat = len(cat)
        self.keys, self.names = _obs_names(model.K, k)
        self.trA, self.trB = float(np.trace(self.Am)), float(np.trace(self.Bm))
        self.trM = float(np.trace(M))
        self.q1s0, self.q2s0 = float(np.sum(M * M)), float(np.sum(M * M.T))

    def orders(self, X):
        """``(nb, n_obs, 5)``: the ``eta^p`` parts of every batch's change (``X``: the batches)."""
        nb, Bsz, d = X.shape
        sd, c, alpha = self.sd, self.c, self.alpha
        R = (X.reshape(nb * Bsz, d) @ self.Cat).reshape(nb, Bsz, self.n_cat, d)
        XA, XB, RM, RMt = R[:, :, 0], R[:, :, 1], R[:, :, 2], R[:, :, 3]
        QM = _rd(X, RM)
        Gv = {self.k: QM / sd}
        RT, RTt = {}, {}
        for j, l in enumerate(self.teachers):
            RT[l], RTt[l] = R[:, :, 4 + 2 * j], R[:, :, 5 + 2 * j]
            Gv[l] = _rd(X, RT[l]) / sd
        u = sum(self.Hk[j] * Gv[j] for j in range(self.K)) + self.bk
        Xt = X.transpose(0, 2, 1)
        G = SimpleNamespace(
            I=X @ Xt, A=X @ XA.transpose(0, 2, 1), B=X @ XB.transpose(0, 2, 1),
            M=X @ RM.transpose(0, 2, 1),                      # x_b^T M x_b'
            A2=XA @ XA.transpose(0, 2, 1), B2=XB @ XB.transpose(0, 2, 1),
            BA=XB @ XA.transpose(0, 2, 1))                    # x_b^T B A x_b'
        G.Mt = G.M.transpose(0, 2, 1)
        QA, QB = _rd(X, XA), _rd(X, XB)
        ords = np.zeros((nb, len(self.keys), 5))
        for j, key in enumerate(self.keys):
            if key[0] == "m":
                ords[:, j, 0] = (c * c - 1.0) * self.trM / sd
                ords[:, j, 1] = -c * alpha * np.einsum("nb,nb->n", u, QA + QB) / sd
                ords[:, j, 2] = alpha ** 2 * _t2(u, G.Mt, G.I) / sd
            elif key[0] in ("tA", "tB"):
                tr0 = self.trA if key[0] == "tA" else self.trB
                ords[:, j, 0] = (c * c - 1.0) * tr0 / d
                ords[:, j, 1] = -2.0 * c * alpha * np.einsum("nb,nb->n", u, QM) / d
                ords[:, j, 2] = alpha ** 2 * _t2(u, G.B if key[0] == "tA" else G.A, G.I) / d
            elif key[0] in ("q1s", "q2s"):
                self._self_overlap(ords[:, j], key[0], u, G, XA, XB, RM, RMt)
            else:
                self._teacher_overlap(ords[:, j], key, u, X, XA, XB, RT, RTt, G)
        ords *= self.eta ** np.arange(5)
        return ords

    def _self_overlap(self, o, key, u, G, XA, XB, RM, RMt):
        """The ``eta^0..eta^4`` parts of ``q1_kk`` (``key = "q1s"``) or ``q2_kk``, into ``o``."""
        d, c, alpha = self.d, self.c, self.alpha
        if key == "q1s":
            o[:, 0] = (c ** 4 - 1.0) * self.q1s0 / d
            q1a = _rd(XA, RM) + _rd(RMt, XB)  # x^T (A M + M B) x
            o[:, 1] = -2.0 * c ** 3 * alpha * np.einsum("nb,nb->n", u, q1a) / d
            o[:, 2] = c * c * alpha ** 2 * (
                _t2(u, G.A2, G.I) + 2.0 * _t2(u, G.A, G.B) + _t2(u, G.B2, G.I)
                + 2.0 * _t2(u, G.M, G.M)) / d
            GX = G.M
        else:
            o[:, 0] = (c ** 4 - 1.0) * self.q2s0 / d
            q2a = _rd(RMt, XA) + _rd(XB, RM)  # x^T (M A + B M) x
            o[:, 1] = -2.0 * c ** 3 * alpha * np.einsum("nb,nb->n", u, q2a) / d
            o[:, 2] = c * c * alpha ** 2 * (
                _t2(u, G.A, G.A) + 2.0 * _t2(u, G.BA, G.I) + _t2(u, G.B, G.B)
                + 2.0 * _t2(u, G.Mt, G.M)) / d
            GX = G.Mt
        # eta^3: -2c Tr(Z I Z X Z A + Z B Z X Z I); eta^4: Tr(Z Mt Z I Z X^T.. )
        o[:, 3] = -2.0 * c * alpha ** 3 * (_chain(u, G.I, GX, G.A) + _chain(u, G.B, GX, G.I)) / d
        # eta^4: Tr(D2 D2^T) = Tr(Z M^T Z Z M Z) (q1), Tr(D2 D2) = Tr(Z M^T Z Z M^T Z) (q2)
        o[:, 4] = alpha ** 4 * _chain(u, G.Mt, G.I, G.M if key == "q1s" else G.Mt, G.I) / d

    def _teacher_overlap(self, o, key, u, X, XA, XB, RT, RTt, G):
        """The ``eta^0..eta^2`` parts of ``q1_kl`` or ``q2_kl`` (``l = key[1]``), into ``o``."""
        d, c, alpha, M, Ms = self.d, self.c, self.alpha, self.M, self.Ms
        l = key[1]
        GT = X @ RT[l].transpose(0, 2, 1)   # x_b^T T x_b'
        if key[0] == "q1t":   # Y = T^T
            Y0 = float(np.sum(M * Ms[l]))
            lin = _rd(RT[l], XA) + _rd(XB, RTt[l])   # x^T (T^T A + B T^T) x
            GY = GT.transpose(0, 2, 1)
        else:                  # Y = T
            Y0 = float(np.sum(M * Ms[l].T))
            lin = _rd(RTt[l], XA) + _rd(XB, RT[l])   # x^T (T A + B T) x
            GY = GT
        o[:, 0] = (c * c - 1.0) * Y0 / d
        o[:, 1] = -c * alpha * np.einsum("nb,nb->n", u, lin) / d
        o[:, 2] = alpha ** 2 * _t2(u, G.Mt, GY) / d


def random_configs(model, d: int, n: int, seed=0, scale_range=(0.5, 1.2)) -> list:
    """``n`` random untied weight configurations: every factor ``d x d`` Gaussian
    (:meth:`gaussian_init`, ``tA ~ tB ~ scale^2``) with the scales drawn uniformly in
    ``scale_range``, and the pairs' ``U_k`` shifted by ``0.3 V_k`` so that the means
    ``m_k = Tr(U V^T)/sqrt d`` are of order one (``s tB`` with ``s`` uniform in
    ``[-0.3, 0.3]``) rather than ``O(d^-1/2)``."""
    model = check_model(model)
    rng = np.random.default_rng(resolve_seed(seed))
    out = []
    for _ in range(int(n)):
        scales = list(rng.uniform(*scale_range, size=model.K))
        pairs = model.gaussian_init(d, scale=scales, seed=int(rng.integers(2 ** 31)))
        shift = rng.uniform(-0.3, 0.3, size=model.K) / math.sqrt(d)
        out.append([(U + s * V, V) for (U, V), s in zip(pairs, shift)])
    return out


def one_step_check(model, configs, *, eta, batches=(16, 64), n_batches: int = 100_000,
                   seed=0) -> list:
    """The one-step check of issue 16 for untied weights: for every configuration and
    batch size, the empirical mean change (:func:`one_step_empirical`) against
    :func:`one_step_prediction`. One dict per (configuration, batch, observable)
    with the z-scores (difference over the standard error) of the flow alone
    (``z_flow``), the flow plus the learning-rate part of the ``eta^2`` term without
    the batch noise (``z_lr``) and the full prediction (``z_corrected``), and the
    predicted and measured ``eta^3`` and the measured ``eta^4`` parts over the
    standard error."""
    ss = np.random.SeedSequence(seed if not isinstance(seed, np.random.SeedSequence)
                                else seed.entropy)
    rows = []
    for ci, W in enumerate(configs):
        for Bsz in batches:
            p = one_step_prediction(model, W, eta=eta, batch=Bsz)
            e = one_step_empirical(model, W, eta=eta, batch=Bsz, n_batches=n_batches,
                                   seed=ss.spawn(1)[0])
            for i, name in enumerate(p["names"]):
                se = float(e["se"][i])
                emp = float(e["mean"][i])
                rows.append({
                    "config": ci, "batch": Bsz, "name": name, "empirical": emp, "se": se,
                    "flow": float(p["flow"][i]), "corrected": float(p["corrected"][i]),
                    "noise": float(p["noise"][i]),
                    "z_flow": (emp - p["flow"][i]) / se,
                    "z_lr": (emp - p["flow"][i] - p["lr"][i] - p["eta3"][i]) / se,
                    "z_corrected": (emp - p["corrected"][i]) / se,
                    "noise_over_se": float(p["noise"][i]) / se,
                    "eta3_pred_over_se": float(p["eta3"][i]) / se,
                    "eta3_over_se": float(e["by_order"][i, 3]) / se,
                    "eta4_over_se": float(e["by_order"][i, 4]) / se})
    return rows


def check_table(rows) -> str:
    """:func:`one_step_check` rows as a text table."""
    head = (f"{'cfg':>3} {'B':>4} {'obs':<7}{'empirical':>12}{'se':>10}{'noise/se':>9}"
            f"{'z flow':>8}{'z lr':>8}{'z corr':>8}{'eta3 p':>8}{'eta3 m':>8}{'eta4':>7}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['config']:>3} {r['batch']:>4} {r['name']:<7}{r['empirical']:>12.4e}"
                     f"{r['se']:>10.2e}{r['noise_over_se']:>9.1f}{r['z_flow']:>8.1f}"
                     f"{r['z_lr']:>8.1f}{r['z_corrected']:>8.2f}{r['eta3_pred_over_se']:>8.2f}"
                     f"{r['eta3_over_se']:>8.2f}{r['eta4_over_se']:>7.2f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# the noise terms of the untied slow hierarchy

def noise_terms(word, trainable, K: int):
    """The noise terms ``N_alpha`` of ``d mu_alpha / d tau`` for one untied word
    (letters ``4k + kind``, kinds ``M, M^T, A, B``), at leading order in ``1/d``: a
    list of ``(coef, k, l, w1, w2)`` meaning ``coef * Lambda_kl * mu_w1 * mu_w2``
    (``mu_() = 1``), the whole multiplied by ``eta d / B`` on the slow time
    ``tau = eta n / d``.

    Every trainable letter moves as ``X -> X - eta (L_X Z + Z R_X) + eta^2 Z C_X Z``
    (:data:`LETTER_RULES`), and at leading order the batch fluctuations of the indices
    ``k, l`` have ``E Tr(dZ_k X dZ_l Y) = (Lambda_kl / (d B)) Tr X Tr Y``. So:

    - one trainable letter ``X`` of index ``k`` at position ``i``, ``Q`` the rest of the
      word read cyclically from ``i + 1``: ``Lambda_kk mu(C_X) mu(Q)``;
    - two trainable letters ``X_i`` (index ``k``) and ``X_j`` (index ``l``), ``P`` the
      letters between them and ``Q`` the rest:
      ``Lambda_kl [mu(P L_j) mu(Q L_i) + mu(P) mu(R_j Q L_i) + mu(R_i P L_j) mu(Q)
      + mu(R_i P) mu(R_j Q)]``.

    Per SGD step the change is ``eta^2 N_alpha / B``. Tied attention (``L = R = C =
    S``, ``E Tr(dA X dA Y) = 4 Lambda Tr X Tr Y / (d B)``) gives the tied rule of
    :func:`attndyn.numeric.attention.tied.noise.noise_terms`.
    """
    from attndyn.symbolic.untied import untied_alphabet
    from attndyn.symbolic.words import canonical
    alph = untied_alphabet(K)
    w = tuple(int(a) for a in word)
    tr = set(int(t) for t in trainable)
    n = len(w)

    def can(x):
        return tuple(canonical(tuple(x), alph)) if x else ()

    def idx(a):
        return a // 4

    def rule(a):
        k = a // 4
        Lk, Rk, Ck = LETTER_RULES[a % 4]
        return 4 * k + Lk, 4 * k + Rk, 4 * k + Ck
    out = []
    for i in range(n):
        if idx(w[i]) in tr:
            _, _, Cx = rule(w[i])
            out.append((1.0, idx(w[i]), idx(w[i]), can((Cx,)), can(w[i + 1:] + w[:i])))
    for i in range(n):
        for j in range(i + 1, n):
            if idx(w[i]) not in tr or idx(w[j]) not in tr:
                continue
            Li, Ri, _ = rule(w[i])
            Lj, Rj, _ = rule(w[j])
            P = w[i + 1:j]
            Q = w[j + 1:] + w[:i]
            for a, bb in ((P + (Lj,), Q + (Li,)), (P, (Rj,) + Q + (Li,)),
                          ((Ri,) + P + (Lj,), Q), ((Ri,) + P, (Rj,) + Q)):
                out.append((1.0, idx(w[i]), idx(w[j]), can(a), can(bb)))
    merged = {}
    for coef, k, l, a, bb in out:
        key = (min(k, l), max(k, l)) + tuple(sorted([a, bb]))
        merged[key] = merged.get(key, 0.0) + coef
    return [(v, key[0], key[1], key[2], key[3]) for key, v in merged.items()]


def _label(w, K):
    from attndyn.symbolic.untied import word_name
    return "1" if not w else word_name(w, K)


def noise_text(model, order: int = 2) -> str:
    """The noise terms of every untied word up to ``order``, one line each, with their
    order ``eta d / B`` on the slow time (leading order in ``1/d``), and the shift of the
    slaved bias ``beta_k`` they imply (``d mu_Mk / d tau = 0`` on the slow manifold)."""
    model = _check_untied(model, "noise_untied.noise_text")
    K = model.K
    lines = []
    for w in model.words(order):
        terms = noise_terms(w, model.trainable, K)
        if not terms:
            continue
        parts = []
        for coef, k, l, a, bb in sorted(terms, key=lambda t: (t[1], t[2], t[3], t[4])):
            f = "" if coef == 1 else f"{coef:g} "
            mus = " ".join(_label(x, K) for x in (a, bb) if x)
            parts.append(f"{f}Lambda_{k + 1}{l + 1} {mus}".strip())
        lines.append(f"d {_label(w, K)}/dtau += (eta d / B) * [" + " + ".join(parts) + "]")
    for k in model.trainable:
        lines.append(f"slaved mean: beta_{k + 1} += (eta d / B) * Lambda_{k + 1}{k + 1} "
                     f"{_label((4 * k + M_,), K)} / ({_label((4 * k + A_,), K)} + "
                     f"{_label((4 * k + B_,), K)})   (O(eta sqrt(d) / B): "
                     f"{_label((4 * k + M_,), K)} = m_{k + 1} / sqrt d)")
    return "\n".join(lines)


def noise_rhs(model, pairs, words=None, order: int = 2) -> dict:
    """The noise terms ``N_alpha`` (without the factor ``eta d / B``) of the words
    (default: every word up to ``order``) at the finite-d weights ``pairs``, with
    ``Lambda`` from the Gaussian engine at their ``(m, q1, q2)``:
    ``{word name: N_alpha}``. Per SGD step the leading-order noise change of
    ``mu_alpha`` is ``eta^2 N_alpha / B``."""
    from attndyn.kernels.moments import word_traces
    model = check_model(model)
    pairs = model.check_factors(pairs, "pairs")
    K = model.K
    words = model.words(order) if words is None else [tuple(w) for w in words]
    op = model.order_parameters(pairs)
    lam = noise_coefficients(model)(op["m"], op["q1"], op["q2"])
    mats = []
    for U, V in pairs:
        Mk = U @ V.T
        mats += [Mk, Mk.T, U @ U.T, V @ V.T]
    need = set()
    tl = {}
    for w in words:
        tl[w] = noise_terms(w, model.trainable, K)
        for _, _, _, a, bb in tl[w]:
            need.update(x for x in (a, bb) if x)
    need = sorted(need)
    mu = dict(zip(need, word_traces(mats, need))) if need else {}
    mu[()] = 1.0
    out = {}
    for w in words:
        out[_label(w, K)] = float(sum(coef * lam[k, l] * mu[a] * mu[bb]
                                      for coef, k, l, a, bb in tl[w]))
    return out


# ---------------------------------------------------------------------------
# the noise-corrected truncated slow hierarchy

def _noise_structure(H, model):
    """Flat arrays of the noise terms of every word of the hierarchy ``H`` (the slaved
    singletons ``M_k`` excluded): ``(target, coef, k, l, ia, ib)``, ``ia = ib = -1``
    for the empty word (``mu = 1``)."""
    K = model.K
    tgt, coef, kk, ll, ia, ib = [], [], [], [], [], []
    for i, w in enumerate(H.words):
        if len(w) == 1 and w[0] % 4 in (M_, MT_):
            continue  # m_k is slaved: its kick shifts beta instead (left out, O(eta sqrt d / B))
        for c_, k, l, a, bb in noise_terms(w, model.trainable, K):
            tgt.append(i)
            coef.append(c_)
            kk.append(k)
            ll.append(l)
            ia.append(H.index(a) if a else -1)
            ib.append(H.index(bb) if bb else -1)
    return tuple(np.array(v, dtype=np.int64 if j != 1 else np.float64)
                 for j, v in enumerate((tgt, coef, kk, ll, ia, ib)))


def _run_noise(model, pairs, tau_eval, eps, order_, rtol, atol, newton_tol):
    """Integrate the truncated slow hierarchy plus ``eps N_alpha`` (scipy DOP853)."""
    from scipy.integrate import solve_ivp

    K = model.K
    lamf = noise_coefficients(model)
    H = hierarchy(model, order_)
    st = H.initial_state(pairs)
    cm = critical_mean(model, st, warn=False)
    if not cm.success:
        raise RootError(f"root search failed: {cm.message}")
    sysm = H._system(cm.m, tol=newton_tol)
    tgt, coef, kk, ll, ia, ib = _noise_structure(H, model)
    n = H.n_moments
    msl = slice(HEAD + K, HEAD + 2 * K)

    def rhs(t, y):
        dy = kernel_rhs(sysm, y)
        if sysm.gparams[H_FAIL] > 0:
            return np.full(n, np.nan)
        if eps == 0.0:
            return dy
        _, _, q1, q2 = low_from_words(K, H.words, y)
        lam = lamf(sysm.gparams[msl].copy(), q1, q2)
        ye = np.append(y, 1.0)
        vals = coef * lam[kk, ll] * ye[ia] * ye[ib]
        return dy + eps * np.bincount(tgt, weights=vals, minlength=n)
    with np.errstate(all="ignore"):
        sol = solve_ivp(rhs, (0.0, float(tau_eval[-1])), st.mu, method="DOP853",
                        t_eval=tau_eval, rtol=rtol, atol=atol)
    return H, cm, sol


def _check_noise_args(model, pairs, tau_eval, eta, batch):
    eta, Bsz = check_eta_batch(eta, batch)
    model = _check_untied(model, "the untied noise correction")
    if model.L != 1:
        raise ValueError(f"the untied noise correction needs L = 1, got L = {model.L}")
    pairs = model.check_factors(pairs, "pairs")
    tau_eval = check_t_eval(tau_eval, "tau_eval")
    return model, pairs, tau_eval, eta, Bsz


def noise_hierarchy(model, pairs, tau_eval, *, eta, batch, order: int = 4, rtol: float = 1e-9,
                    atol: float = 1e-12, check: bool = True, conv_tol: float = 1e-6,
                    newton_tol: float = 1e-12, raise_on_failure: bool = False):
    """The truncated untied slow hierarchy (eqs. 31-32, truncation eq. 892) with the
    mini-batch noise terms: ``d mu_alpha / d tau = (eq. 32) + (eta d / B) N_alpha`` with
    ``N_alpha`` of :func:`noise_terms` and ``Lambda = E[l l^T]`` from the Gaussian engine
    at ``(m*, q1, q2)``, to first order in ``eta d / B`` and leading order in ``1/d``.

    The drift is the hierarchy's own compiled right-hand side (``m = m*(q)`` by the
    warm-started Newton of the coefficient function); the noise terms are added in
    Python and the sum integrated by ``scipy.integrate.solve_ivp`` (DOP853). The means
    stay slaved (the noise kick of the words ``M_k``, which would shift the bias
    ``beta_k`` by an ``O(eta sqrt(d) / B)`` amount, is left out). Like every truncation
    it is a short-time tool: with ``check`` the same corrected system is also run at
    ``order + 2`` and the largest difference on the moments of length <= 2 is reported
    in ``diagnostics["truncation_gap"]`` (status 2 above ``conv_tol``). Needs
    ``L = 1``, ``C = 1``; rows as :meth:`UntiedHierarchy.integrate`.
    """
    model, pairs, tau_eval, eta, Bsz = _check_noise_args(model, pairs, tau_eval, eta, batch)
    d = pairs[0][0].shape[0]
    eps = eta * d / Bsz
    H, cm, sol = _run_noise(model, pairs, tau_eval, eps, order, rtol, atol, newton_tol)
    ok = sol.status == 0 and np.all(np.isfinite(sol.y))
    status = 0 if ok else -1
    message = (f"success: untied slow hierarchy (order {order}) with the noise terms "
               f"(eta d / B = {eps:.3g})" if ok else f"noise_hierarchy stopped: {sol.message}")
    Y = sol.y
    means = H._means(Y, cm.m, newton_tol) if Y.shape[1] else None
    params = model.params_dict()
    params.update({"order": order, "rtol": rtol, "atol": atol, "d": d, "eta": eta,
                   "batch": Bsz, "eta_d_over_B": eps, "correction": "noise",
                   "time": "tau = eta * n / d (slow)"})
    diag = {"order": order, "root": cm.label, "d": d}
    if ok and check:
        H2, _, sol2 = _run_noise(model, pairs, tau_eval, eps, order + 2, rtol, atol, newton_tol)
        if sol2.status == 0 and sol2.y.shape[1] == Y.shape[1]:
            low = [i for i, w in enumerate(H.words) if len(w) <= 2]
            idx2 = [H2.index(H.words[i]) for i in low]
            gap = float(np.max(np.abs(Y[low] - sol2.y[idx2])))
            diag["truncation_gap"] = gap
            if gap > conv_tol:
                status = NOT_CONVERGED
                message += (f"; NOT converged in the truncation order: orders {order} and "
                            f"{order + 2} differ by {gap:.3g} > conv_tol = {conv_tol:g}")
            else:
                message += f"; orders {order} and {order + 2} agree to {gap:.2g}"
    res = H._result(sol.t, Y, means, params, status, message, diag)
    res.kind = "untied_noise_hierarchy"
    if raise_on_failure and status != 0:
        exc = TruncationNotConverged if status == NOT_CONVERGED else IntegrationError
        raise exc(message)
    return res


def noise_shift(model, pairs, tau_eval, *, eta, batch, order: int = 6, rtol: float = 1e-10,
                atol: float = 1e-13, newton_tol: float = 1e-12, check: bool = True) -> dict:
    """The first-order noise shift of the slow moments, ``Delta_alpha(tau) = mu_alpha
    [with noise] - mu_alpha [without]``, both from the same truncated hierarchy at
    ``order`` (:func:`noise_hierarchy` with ``eta d / B`` and with 0): the response of
    the hierarchy to the noise terms, whose truncation error is a fraction of the shift
    itself rather than of the moments. Added to the exact finite-d flow it gives the
    corrected theory of ``compare(..., correction="noise")`` (untied, ``theory="flow"``).

    Returns ``{"t", "names", "delta" (n_names x n_t), "truncation_gap"}`` over the words of
    length <= 2 and ``tA_k, tB_k, q1_kl, q2_kl`` (``m_k`` is slaved: no shift);
    ``truncation_gap`` (with ``check``) is the largest difference of ``delta`` between
    orders ``order`` and ``order - 1`` (the truncations alternate around the limit, so this
    bounds the error of the lower one; order ``order + 2`` is too costly beyond 6).
    Measured (d = 200, ``eta d / B = 0.2``, ``q1_11`` at ``tau = 0.05``): orders 2-6 give
    2.90e-2, 1.04e-2, 1.68e-2, 1.42e-2, 1.52e-2 against 1.51e-2 +- 4e-4 for SGD minus the
    flow; the orders agree to 1e-4 up to ``tau = 0.025``. Like every truncation it is a
    short-time tool: at Fig. 3's standard Gaussian start (h1, d = 80, ``eta d / B = 0.002``)
    order 6 stops at ``tau = 0.15`` (order 4 at 0.2; order 5 with the noise terms at 0.45),
    and on ``tau <= 0.1`` orders 5 and 6 differ by 1.1e-3, more than the shift itself
    (9e-5 on ``tA_1``); a hierarchy that stops raises :class:`IntegrationError` naming the
    ``tau`` reached.
    """
    model, pairs, tau_eval, eta, Bsz = _check_noise_args(model, pairs, tau_eval, eta, batch)
    d = pairs[0][0].shape[0]
    eps = eta * d / Bsz
    K = model.K
    tr = list(model.trainable)

    def delta(order_):
        H, _, s1 = _run_noise(model, pairs, tau_eval, eps, order_, rtol, atol, newton_tol)
        _, _, s0 = _run_noise(model, pairs, tau_eval, 0.0, order_, rtol, atol, newton_tol)
        if s1.status != 0 or s0.status != 0 or s1.y.shape != s0.y.shape:
            stop = min(s1.t[-1] if s1.t.size else 0.0, s0.t[-1] if s0.t.size else 0.0)
            raise IntegrationError(f"noise_shift: the truncated hierarchy at order {order_} "
                                   f"stopped at tau = {stop:.3g} of {tau_eval[-1]:.3g} (a "
                                   f"short-time tool; {s1.message}; {s0.message})")
        D = s1.y - s0.y
        words = [w for w in H.words if len(w) <= 2]
        rows = [D[H.index(w)] for w in words]
        names = [su.word_name(w, K) for w in words]
        for k in tr:
            rows += [D[H.index((4 * k + A_,))], D[H.index((4 * k + B_,))]]
            names += [obs("tA", k), obs("tB", k)]
        for nm, kind in (("q1", MT_), ("q2", M_)):
            for k in range(K):
                for l in range(K):
                    rows.append(D[H.index((4 * k + M_, 4 * l + kind))])
                    names.append(obs(nm, k, l))
        return names, np.array(rows)
    names, D = delta(order)
    out = {"t": np.asarray(tau_eval, float), "names": names, "delta": D, "order": order,
           "eta_d_over_B": eps, "truncation_gap": None}
    if check and order > 2:
        _, D2 = delta(order - 1)
        out["truncation_gap"] = float(np.max(np.abs(D - D2)))
    return out


class UntiedNoise(Correction):
    """``correction="noise"`` of the untied theory (issue 16, slow time only): the
    mini-batch noise to first order in ``eta d / B``. ``theory="hierarchy"``: the
    truncated hierarchy with the noise terms (:func:`noise_hierarchy`); ``"flow"`` and
    ``"slaved"``: the flow plus a noise shift, chosen by ``noise_method``:

    - ``"hierarchy"``: the hierarchy's shift at ``noise_order`` (default ``max(order, 6)``,
      checked against ``noise_order - 1`` unless ``noise_check`` is False; :func:`noise_shift`),
      a short-time tool;
    - ``"flow"``: the linear-noise flow on the pairs, any horizon
      (:func:`~attndyn.numeric.attention.untied.noise_flow.noise_flow_shift`; options
      ``noise_seed``, ``noise_paths``, ``noise_dt``, ``noise_sub_batch``);
    - ``"auto"`` (default): the hierarchy's shift where it reaches the horizon with a
      truncation gap below its largest shift, the flow's otherwise."""

    name = "noise"

    def apply(self, theory, init, t, *, name, order, check, words, eta=None, batch=None,
              time="slow", noise_order=None, noise_check=True, noise_method="auto",
              noise_seed=0, noise_paths=None, noise_dt=None, noise_sub_batch=None, **options):
        if time != "slow" or eta is None or batch is None:
            raise ValueError("correction='noise' (untied) needs eta, batch and the slow time")
        if noise_method not in ("auto", "hierarchy", "flow"):
            raise ValueError("noise_method must be 'auto', 'hierarchy' or 'flow', got "
                             f"{noise_method!r}")
        model = theory.model
        pairs = model.check_factors(init, "init")
        d = pairs[0][0].shape[0]
        t = check_t_eval(t)
        if name == "hierarchy":
            return with_loss_row(model, noise_hierarchy(model, pairs, t, eta=eta, batch=batch,
                                                        order=order, check=check is not None,
                                                        **options))
        res = theory.uncorrected(pairs, t, name=name, order=order, check=check, words=words,
                                 time=time, **options)
        tt = t[:res.t.size] if res.t.size else t[:1]
        sh, why = None, ""
        if noise_method in ("auto", "hierarchy"):
            try:
                sh = noise_shift(model, pairs, tt, eta=eta, batch=batch, check=bool(noise_check),
                                 order=max(int(order), 6) if noise_order is None else noise_order)
            except (IntegrationError, RootError) as exc:
                if noise_method == "hierarchy":
                    raise
                why = " ".join(str(exc).split())[:160]
            if (sh is not None and noise_method == "auto" and sh["truncation_gap"] is not None
                    and sh["truncation_gap"] > np.max(np.abs(sh["delta"]))):
                why = (f"the hierarchy's truncation gap {sh['truncation_gap']:.2g} exceeds its "
                       f"largest shift {np.max(np.abs(sh['delta'])):.2g}")
                sh = None
        if sh is None:
            from attndyn.numeric.attention.untied.noise_flow import (NOISE_FLOW_DEFAULTS,
                                                                     noise_flow_shift)
            kw = {"paths": noise_paths, "dt": noise_dt, "sub_batch": noise_sub_batch}
            kw = {k: (NOISE_FLOW_DEFAULTS[k] if v is None else v) for k, v in kw.items()}
            sh = noise_flow_shift(model, pairs, tt, eta=eta, batch=batch, seed=noise_seed,
                                  order=max(int(order), 2), **kw)
        add_shift(model, res, sh)
        res.params.update({"correction": "noise", "eta": float(eta), "batch": int(batch),
                           "eta_d_over_B": float(eta) * d / int(batch),
                           "noise_method": "flow" if "se" in sh else "hierarchy"})
        if "se" in sh:
            res.diagnostics["noise_shift_se"] = dict(zip(sh["names"], sh["se"][:, :res.t.size]))
            res.diagnostics["noise_shift_lr"] = dict(zip(sh["names"], sh["lr"][:, :res.t.size]))
            res.message += (f"; plus the linear-noise flow's shift (eta d / B = "
                            f"{sh['eta_d_over_B']:.3g}, {sh['paths']} noise paths, fast step "
                            f"{sh['dt']:g}" + (f"; the hierarchy's shift not used: {why}"
                                                if why else "") + ")")
            return res
        res.diagnostics["noise_truncation_gap"] = sh["truncation_gap"]
        gap = sh["truncation_gap"]
        res.message += (f"; plus the noise shift of the order-{sh['order']} hierarchy "
                        f"(eta d / B = {sh['eta_d_over_B']:.3g}, truncation gap "
                        + ("not checked)" if gap is None else f"{gap:.2g})"))
        return res


def add_shift(model, res, sh):
    """Add the rows of the shift ``sh`` to the rows of ``res`` of the same name; the loss row
    (``Phi`` of ``m``, ``q1``, ``q2``) is recomputed from the shifted rows."""
    names = list(res.names)
    n = res.t.size
    if not n:
        return
    for row_name, row in zip(sh["names"], sh["delta"]):
        if row_name in names:
            res.y[names.index(row_name)] = res.y[names.index(row_name)] + row[:n]
    if "loss" in names:
        i = names.index("loss")
        res.y = np.delete(res.y, i, axis=0)
        res.names = names[:i] + names[i + 1:]
        with_loss_row(model, res)
