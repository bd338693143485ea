"""The noise-corrected tied dynamics (issue 16; docs/finite-eta.md): the truncated
hierarchy with the mini-batch noise rows (:class:`NoiseRows`, :func:`noise_hierarchy`, any
``L = 1`` loss, first order in ``eta d / B``), the moment-level flow of ``t_k, q_kl``
(:func:`noise_corrected_flow`: the congruence of one SGD step, with a Volterra feedback for a
``q``-dependent ``Gamma``), and the corrections of :class:`~.theory.TiedTheory` that run them:
:class:`TiedNoise` (``"noise"``) and :class:`TiedNoiseFiniteD` (``"noise+finite-d"``)."""

from __future__ import annotations

import math

import numpy as np

from attndyn.numeric.attention.base import check_model, Hierarchy, HierarchyCorrection
from attndyn.numeric.attention.corrections import quadratic_loss
from attndyn.numeric.attention.tied.finite_width import finite_width_flow, finite_width_taylor
from attndyn.numeric.attention.tied.hierarchy import NOT_CONVERGED
from attndyn.numeric.attention.tied.noise import (check_eta_batch, obs_keys, noise_potential,
                                                  noise_terms, noise_text)
from attndyn.numeric.attention.tied.runner import theory_rows

__all__ = ["NoiseRows", "noise_hierarchy", "noise_corrected_flow", "TiedNoise", "TiedNoiseFiniteD"]


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


def _noise_flow_setup(model, matrices, t_eval, eta, batch, correction, refine):
    """Validate the arguments of :func:`noise_corrected_flow` and lay out its grid: a
    namespace with the loss structure (``const``: constant ``Gamma``; ``H, b`` or ``lamf``),
    the matrices, the indices and the grid (each output interval split in ``refine``)."""
    from types import SimpleNamespace

    from attndyn.numeric.core.validate import check_t_eval
    eta, B = check_eta_batch(eta, batch)
    model = check_model(model)
    if model.sgd_form != "factors" or len(model.trainable) != 1:
        raise ValueError("correction='noise' is implemented for tied models with one trainable "
                         f"index (the moment-level flow); got {type(model).__name__} with "
                         f"trainable {list(model.trainable)}")
    corr = model.theory.correction(correction)
    if not isinstance(corr, TiedNoise):
        raise ValueError("noise_corrected_flow needs correction='noise' or 'noise+finite-d'")
    correction, finite_d = corr.name, corr.finite_d
    const = True  # a loss of degree <= 2 in G: constant Gamma, the congruence is exact
    lamf = None
    try:
        H, b = quadratic_loss(model)
    except ValueError as exc:
        if finite_d:
            # degree 3-6: the finite-width potential's correction is added (first order in
            # both, the cross term eps/d left out); beyond: no finite-width term is exact
            try:
                finite_width_taylor(model)
            except ValueError:
                raise ValueError("correction='noise+finite-d' needs a loss that is a polynomial "
                                 "of degree <= 6 in G (degree <= 2: the finite-d one-step terms; "
                                 f"3-6: plus the finite-width potential): {exc}") from None
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
    others = [l for l in range(K) if l != k]
    # the grid: every output time, each interval split in `refine`
    te = np.unique(np.concatenate([[0.0], t_eval]))
    grid = [te[0]]
    for a, c in zip(te[:-1], te[1:]):
        grid.extend(list(np.linspace(a, c, refine + 1)[1:]))
    grid = np.array(grid)
    N = grid.size
    nbytes = 8.0 * d * d * N * (2 + 2 + len(others) + (8 if finite_d else 0))
    if nbytes > 4e9:
        raise ValueError(f"noise_corrected_flow would need about {nbytes / 1e9:.1f} GB "
                         f"(d = {d}, {N} grid times); use fewer output times or refine=1")
    return SimpleNamespace(
        model=model, eta=eta, B=B, correction=correction, finite_d=finite_d, const=const, H=H,
        b=b, lamf=lamf, mats=mats, t_eval=t_eval, K=K, k=k, d=d, gam=model.weight_decay,
        others=others, grid=grid, N=N, Sl={l: mats[l] for l in others}, dd=d * d,
        q_fix=np.array([[np.sum(a * c) / d for c in mats] for a in mats]),
        fin=finite_d and const, refine=refine)


def _words_and_labels(model):
    """Every canonical word of length <= 2 and its label."""
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical_words
    words = [tuple(w) for w in canonical_words(2, model.alphabet)]
    return words, [word_label(w, model.K) for w in words]


def _failed_noise_flow(ns, status, message):
    """The empty trajectory of a failed moment-level flow."""
    from attndyn.numeric.core.results import Trajectory
    words, labels = _words_and_labels(ns.model)
    return Trajectory(t=np.zeros(0), y=np.zeros((len(words), 0)), names=labels, words=words,
                      kind="noise_flow", params={"correction": ns.correction}, status=status,
                      message=message)


def _gamma_at(ns, S):
    """``Gamma(q)`` at the student ``S`` (the teachers' overlaps fixed)."""
    q = ns.q_fix.copy()
    q[ns.k, ns.k] = np.sum(S * S) / ns.d
    for l in ns.others:
        q[ns.k, l] = q[l, ns.k] = np.sum(S * ns.Sl[l]) / ns.d
    return q, ns.model.gamma(q)


def _tangent_flow(ns, rtol, atol):
    """The flow ``S_f`` and its tangent ``dU/dt = -R U`` on the grid (``solve_flow``)."""
    from attndyn.numeric.attention.odesolve import solve_flow
    H, k, d, dd, gam, others, Sl = ns.H, ns.k, ns.d, ns.dd, ns.gam, ns.others, ns.Sl
    if ns.const:
        Rfix = sum(H[k, l] * ns.mats[l] for l in others) if others else np.zeros((d, d))
        Rfix = Rfix + (gam / 4.0) * np.eye(d)

    def rhs(t, y):
        S = y[:dd].reshape(d, d)
        U = y[dd:].reshape(d, d)
        if ns.const:
            g_kk = H[k, k]
            R = 2.0 * g_kk * S + Rfix
        else:
            Gm = _gamma_at(ns, S)[1]
            g_kk = Gm[k, k]
            R = 2.0 * g_kk * S + (gam / 4.0) * np.eye(d)
            for l in others:
                R = R + Gm[k, l] * Sl[l]
        RS = R @ S
        dS = -(RS + RS.T) + 2.0 * g_kk * (S @ S)
        # dS/dt = -2 Gamma_kk S^2 - sum_l Gamma_kl (S_l S + S S_l) - gamma/2 S
        #       = -(R S + S R) + 2 Gamma_kk S^2  (R carries 2 Gamma_kk S and gamma/4)
        return np.concatenate([dS.ravel(), (-(R @ U)).ravel()])
    y0 = np.concatenate([ns.mats[k].ravel(), np.eye(d).ravel()])
    return solve_flow(rhs, y0, ns.grid, rtol=rtol, atol=atol, what="tied tangent flow")


def _grid_values(ns, Ss):
    """``Lambda``, ``t_k``, ``Gamma_kk`` at every grid time, and the ``M`` (constant
    ``Gamma``) or the overlaps ``q`` (``q``-dependent ``Gamma``)."""
    N, d, k = ns.N, ns.d, ns.k
    lam = np.empty(N)
    tk = np.empty(N)
    gkk = np.empty(N)
    Ms, qs = [], []
    if ns.const:
        Mfix = (sum(ns.H[k, l] * ns.mats[l] for l in ns.others) if ns.others
                else np.zeros((d, d)))
    for i in range(N):
        tk[i] = float(np.trace(Ss[i])) / d
        if ns.const:
            M = ns.H[k, k] * Ss[i] + Mfix
            Ms.append(M)
            lam[i] = 2.0 * float(np.sum(M * M)) / d + ns.b[k] ** 2  # E[l_k^2] (exact = Gaussian)
            gkk[i] = ns.H[k, k]
        else:
            q, Gm = _gamma_at(ns, Ss[i])
            qs.append(q)
            lam[i] = float(ns.lamf(q)[k, k])
            gkk[i] = Gm[k, k]
    return lam, tk, gkk, Ms, qs


def _inner_products(ns, Ss, Us, Ms):
    """``Q_Y(n) = U^T Y U`` for ``Y`` in ``I, S_f, S_l``, and ``X[p, r, y, n] = <P_p(r),
    Q_y(n)>`` for the ``P`` families (``P_0, P_1, P_2``; the ``M_l`` directions for a
    ``q``-dependent ``Gamma``; the finite-d kick and ``M``-weighted families), with the
    ``P_0, P_1, P_2`` matrices when finite-d: ``(names_Y, Q, X, P012)``."""
    N, d, dd, k, B, fin = ns.N, ns.d, ns.dd, ns.k, ns.B, ns.fin
    others, Sl = ns.others, ns.Sl
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
    nP = 10 if fin else (3 if ns.const else 3 + len(others))
    X = np.empty((nP, N, nY, N))
    P012 = np.empty((3, N, d, d)) if fin else None  # P_0, P_1, P_2 for the single traces
    for r in range(N):
        Ui = np.linalg.inv(Us[r])
        S = Ss[r]
        fam = [Ui @ Ui.T, Ui @ S @ Ui.T, Ui @ (S @ S) @ Ui.T]
        if fin:
            for j in range(3):
                P012[j, r] = fam[j]
        if not ns.const:  # P_{M_l}, M_l = S_l S + S S_l: the directions Gamma_kl's change drives
            fam += [Ui @ (Sl[l] @ S + S @ Sl[l]) @ Ui.T for l in others]
        if fin:
            M = Ms[r]
            M2 = M @ M
            Abar = 4.0 * M / d
            EaSa = _exact_EaXa(S, M, ns.b[k], d)
            m = Abar @ S @ Abar
            J = (ns.eta * d / 4.0) * (m + (EaSa - m) / B)  # the exact mean kick per unit time
            sym = lambda Z: 0.5 * (Z + Z.T)  # noqa: E731
            fam += [Ui @ J @ Ui.T, Ui @ M @ Ui.T, Ui @ M2 @ Ui.T, Ui @ sym(M2 @ S) @ Ui.T,
                    Ui @ sym(M @ S) @ Ui.T, Ui @ (S @ M2 @ S) @ Ui.T, Ui @ (S @ M @ S) @ Ui.T]
        Pm = np.stack([f.ravel() for f in fam])           # (nP, dd)
        X[:, r] = np.einsum("pa,yna->pyn", Pm, Q)          # <P_p(r), Q_y(n)>
    return names_Y, Q, X, P012


def _trapezoid_weights(grid):
    """``w[r, n]``: ``int_0^{grid[n]} f(r) dr ~ sum_r w[r, n] f(r)``."""
    N = grid.size
    w = np.zeros((N, N))
    for n in range(1, N):
        h = np.diff(grid[:n + 1])
        w[:n, n] += h / 2.0
        w[1:n + 1, n] += h / 2.0
    return w


def _single_traces(ns, Q, P012, w, lam):
    """The single-trace pieces, ``E Tr(dZ A dZ B) = c (Tr A Tr B + Tr(A^T B))``: in the
    fluctuation ``2 Tr(P_2 Q P_0 Q) + 2 Tr(P_1 Q P_1 Q)`` (``Q = Q_I(n)``), and in ``Pi`` the
    matrix ``K(r, s) = P_0 Q P_2 + 2 P_1 Q P_1 + P_2 Q P_0`` (``Q = Q_I(s)``); ``O(1/d)``
    relative. Returns ``(single[r, n], Kin[y, s, n])``."""
    N, d = ns.N, ns.d
    QI = Q[0].reshape(N, d, d)
    single = np.zeros((N, N))
    for r in range(N):
        A1_ = P012[1, r] @ QI[r:]
        A2_ = P012[2, r] @ QI[r:]
        A0_ = P012[0, r] @ QI[r:]
        single[r, r:] = (2.0 * np.einsum("nij,nji->n", A2_, A0_)
                         + 2.0 * np.einsum("nij,nji->n", A1_, A1_))
    Kin = np.zeros((Q.shape[0], N, N))   # Kin[y, s, n] = sum_r w[r, s] Lambda(r)/d <K(r, s), Q_y(n)>
    for s_ in range(1, N):
        m_ = s_ + 1
        wr = (w[:m_, s_] * lam[:m_] / d)[:, None, None]

        def wsum(Pa, Pb):  # sum_r wr_r Pa_r Q_I(s) Pb_r as one matrix product
            left = (wr * (Pa[:m_] @ QI[s_])).transpose(1, 0, 2).reshape(d, m_ * d)
            return left @ Pb[:m_].reshape(m_ * d, d)
        K02 = wsum(P012[0], P012[2])
        Ksum = K02 + K02.T + 2.0 * wsum(P012[1], P012[1])
        Kin[:, s_, :] = Q @ Ksum.ravel()
    return single, Kin


def _fluctuation(ns, X, Q, P012, w, lam):
    """``E Tr(dS(t)^2)/d`` on the grid (the fluctuation part of ``q_kk``) and, finite-d, the
    single-trace kernel ``Kin`` of ``Pi``."""
    d, k, b = ns.d, ns.k, ns.b
    eps = ns.eta * d / ns.B
    W0, W1, W2 = X[0, :, 0, :], X[1, :, 0, :], X[2, :, 0, :]   # (r, n) with Y = I
    # the fluctuation of q_kk: (eps/d^2) int [Lambda g + finite-d], g = 2 W1^2 + 2 W0 W2
    g_fl = lam[:, None] * (2.0 * W1 ** 2 + 2.0 * W0 * W2)
    Kin = None
    if ns.fin:
        TM, TM2, TM2S, TMS, TSM2S, TSMS = (X[p, :, 0, :] for p in range(4, 10))
        # the product-of-traces parts of E Tr(dA X dA Y), X, Y in {SV, VS, SVS, V}
        g_fl = g_fl + (16.0 / d) * (2.0 * TM2S * W1 + TMS ** 2 + TSM2S * W0 + W2 * TM2
                                    + TSMS * TM)
        if b[k] != 0.0:
            g_fl = g_fl + (8.0 * b[k] / math.sqrt(d)) * (2.0 * TMS * W1 + TSMS * W0 + W2 * TM)
        single, Kin = _single_traces(ns, Q, P012, w, lam)
        g_fl = g_fl + lam[:, None] * single
    return (eps / d ** 2) * np.einsum("rn,rn->n", w, g_fl), Kin


def _mean_shifts(ns, names_Y, X, w, lam, tk, gkk, Kin):
    """``tau(Delta(t) Y)`` for each ``Y`` (in units of ``eps``): the kick and the flow's
    curvature acting on the fluctuation, ``Pi~(s) = int_0^s (Lambda(r)/d) [2 W1(r,s) P_1(r)
    + W2(r,s) P_0(r) + W0(r,s) P_2(r)] dr``, ``tau(Delta(t) Y) = (1/d) [int_0^t kick(s) .
    Q_Y(t) ds - 2 Gamma_kk int_0^t <Pi~(s), Q_Y(t)> ds]``."""
    d = ns.d
    eps = ns.eta * d / ns.B
    W0, W1, W2 = X[0, :, 0, :], X[1, :, 0, :], X[2, :, 0, :]
    out_Y = {}
    for y in range(len(names_Y)):
        X0, X1, X2 = X[0, :, y, :], X[1, :, y, :], X[2, :, y, :]
        if ns.fin:
            kick = X[3, :, y, :] / eps           # (eta d/4) E[A S A] in units of eps
        else:
            kick = (lam * tk)[:, None] * X0      # Lambda t_k I
        first = np.einsum("sn,sn->n", w, kick)
        # inner[s, n] = int_0^s (Lambda(r)/d)(2 W1(r,s) X1(r,n) + W2(r,s) X0(r,n) + W0(r,s) X2(r,n)) dr
        A1 = w * lam[:, None] / d                 # w[r, s] Lambda(r)/d
        inner = (np.einsum("rs,rs,rn->sn", A1, 2.0 * W1, X1)
                 + np.einsum("rs,rs,rn->sn", A1, W2, X0)
                 + np.einsum("rs,rs,rn->sn", A1, W0, X2))
        if ns.fin:
            inner = inner + Kin[y]
        second = np.einsum("sn,s,sn->n", w, gkk, inner)
        out_Y[names_Y[y]] = (first - 2.0 * second) / d
    return out_Y


def _noise_flow_rows(ns, Ss, out_Y, fluct):
    """The flow's and the corrected ``t_k, q_kk, q_kl`` at ``t_eval``, as rows of every
    canonical word of length <= 2 (the teachers' constant): ``(words, y, y_flow)``."""
    d, k, N, grid = ns.d, ns.k, ns.N, ns.grid
    eps = ns.eta * d / ns.B
    tf = np.array([np.trace(S) / d for S in Ss])
    qkk = np.array([np.sum(S * S) / d for S in Ss])
    qkl = {l: np.array([np.sum(S * ns.Sl[l]) / d for S in Ss]) for l in ns.others}
    keys, names = obs_keys(ns.K, k)
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
    idx = np.minimum(np.searchsorted(grid, ns.t_eval), N - 1)
    yf = np.array(rows_f)[:, idx]
    yc = np.array(rows_c)[:, idx]
    words, _ = _words_and_labels(ns.model)
    pos = {}
    for j, key in enumerate(keys):
        pos[(k,) if key[0] == "t" else tuple(sorted(key[1:]))] = j
    y = np.empty((len(words), ns.t_eval.size))
    y_flow = np.empty_like(y)
    for i, w in enumerate(words):
        if w in pos:
            y[i], y_flow[i] = yc[pos[w]], yf[pos[w]]
        else:  # teachers only: constant
            P = ns.mats[w[0]] if len(w) == 1 else ns.mats[w[0]] @ ns.mats[w[1]]
            y[i] = y_flow[i] = float(np.trace(P)) / d
    return words, y, y_flow


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
    from attndyn.numeric.core.results import IntegrationError, Trajectory
    ns = _noise_flow_setup(model, matrices, t_eval, eta, batch, correction, refine)
    model, t_eval, d, N, dd, eps = ns.model, ns.t_eval, ns.d, ns.N, ns.dd, ns.eta * ns.d / ns.B
    sol = _tangent_flow(ns, rtol, atol)
    if sol.status != 0 or sol.t.size < N:
        if raise_on_failure:
            raise IntegrationError(sol.message)
        return _failed_noise_flow(ns, sol.status, sol.message)
    Ss = sol.y[:dd].T.reshape(N, d, d)
    Us = sol.y[dd:].T.reshape(N, d, d)
    Ss = 0.5 * (Ss + Ss.transpose(0, 2, 1))
    lam, tk, gkk, Ms, qs = _grid_values(ns, Ss)
    names_Y, Q, X, P012 = _inner_products(ns, Ss, Us, Ms)
    w = _trapezoid_weights(ns.grid)
    fluct, Kin = _fluctuation(ns, X, Q, P012, w, lam)
    out_Y = _mean_shifts(ns, names_Y, X, w, lam, tk, gkk, Kin)
    if not ns.const:
        out_Y = _gamma_feedback(model, ns.k, ns.others, qs, X, w, out_Y, fluct / eps, d)
    words, y, y_flow = _noise_flow_rows(ns, Ss, out_Y, fluct)
    if ns.finite_d and not ns.const:  # plus the finite-width potential
        fw = finite_width_flow(model, ns.mats, t_eval, rtol=rtol, atol=atol)
        if fw.status != 0:
            if raise_on_failure:
                raise IntegrationError(fw.message)
            return _failed_noise_flow(ns, fw.status, fw.message)
        for i, w in enumerate(words):
            y[i] = y[i] + (fw.moment(w) - y_flow[i])
    params = model.params_dict()
    params.update({"d": d, "eta": ns.eta, "batch": ns.B, "correction": ns.correction,
                   "eta_d_over_B": eps, "refine": int(refine), "rtol": rtol, "atol": atol})
    return Trajectory(t=np.asarray(t_eval, float), y=y, names=_words_and_labels(model)[1],
                      words=words, kind="noise_flow", params=params, status=0,
                      message=f"success: moment-level flow with correction={ns.correction!r} "
                              f"(first order in eta d / B = {eps:.3g})",
                      diagnostics={"flow": y_flow, "grid": ns.grid, "d": d})


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


def _hierarchy_width(model, mu0, d):
    """The width ``d`` of :func:`noise_hierarchy`: read from matrices, else the ``d`` given."""
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
    return int(d)


def _check_lower_order(h, res, sol, y0, run, t_eval, conv_tol):
    """``check="auto"``: the same corrected system at ``order - 2``; status 2 (and the
    error per word of length <= 2 in ``res.diagnostics``) where they differ."""
    low = h.model.hierarchy(h.order - 2)
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

    from attndyn.numeric.core.results import IntegrationError, Trajectory, TruncationNotConverged
    from attndyn.numeric.core.validate import check_pos_float, check_t_eval
    from attndyn.numeric.attention.odesolve import solve_flow
    eta, B = check_eta_batch(eta, batch)
    h = hierarchy
    if not isinstance(h, Hierarchy) or h.model.sgd_form != "factors":
        raise TypeError("noise_hierarchy needs a tied hierarchy (TiedModel.hierarchy(order)); "
                        f"got {type(h).__name__}")
    model = h.model
    if model.L != 1:
        raise ValueError(f"correction='noise' in the hierarchy needs L = 1, got L = {model.L}")
    t_eval = check_t_eval(t_eval)
    conv_tol = check_pos_float(conv_tol, "conv_tol")
    if check not in (None, "auto"):
        raise ValueError(f"check must be None or 'auto' with correction='noise', got {check!r}")
    d = _hierarchy_width(model, mu0, d)
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
        _check_lower_order(h, res, sol, y0, run, t_eval, conv_tol)
    elif sol.status == 0 and check == "auto":
        res.message += "; convergence not checked (order < 4)"
    if raise_on_failure and res.status != 0:
        exc = TruncationNotConverged if res.status == NOT_CONVERGED else IntegrationError
        raise exc(res.message)
    return res


# ---------------------------------------------------------------------------
# the corrections of the tied theory (reached through TiedTheory.correction)

def _flow_order_check(name, theory, order):
    if theory == "flow" and order is not None and order > 2:
        raise ValueError(f"correction={name!r} with theory='flow' reports t_k, q_kl "
                         f"(order <= 2); got order={order}; theory='hierarchy' takes "
                         "correction='noise' at any order")


def _flow_options_check(name, order, words, keep_matrices):
    if order not in (None, 1, 2) or words is not None or keep_matrices:
        raise ValueError(f"correction={name!r} reports the words of length <= 2 "
                         "only (order <= 2, no words=, no keep_matrices)")


def _noise_theory(theory, init, t, name, order, check, words, eta, batch, kwargs):
    """``theory="hierarchy"`` / ``"limit"`` with ``correction="noise"``: the truncated
    hierarchy with the noise rows, from the matrices (hierarchy) or from the law of the
    factors (limit, ``d -> infinity`` at fixed ``eta d / B``; the truncation ``order``
    keyword of the limit is its longest reported word, the hierarchy runs at
    ``hierarchy_order``, default ``max(order, 8)``)."""
    from attndyn.numeric.attention.tied.limit import law_of_factors
    model = theory.model
    S = [W @ W.T for W in model.check_init(init)]
    opts = {k: kwargs.pop(k) for k in ("rtol", "atol", "conv_tol", "blowup") if k in kwargs}
    chk = None if check is None else "auto"  # the corrected system's own ladder
    if name == "hierarchy":
        h_order = order
        mu0, d = S, None
    else:
        h_order = kwargs.pop("hierarchy_order", max(order, 8))
        law = kwargs.pop("law", None)
        mu0 = law_of_factors(model, model.check_init(init)) if law is None else law
        d = S[0].shape[0]
    unknown = sorted(kwargs)
    if unknown:
        raise ValueError(f"correction='noise' (theory={name!r}) does not take {unknown}")
    th = noise_hierarchy(theory.hierarchy(h_order), mu0, t, eta=eta, batch=batch, d=d,
                         check=chk, **opts)
    return theory_rows(model, th, words)


class TiedNoise(HierarchyCorrection):
    """``correction="noise"``: the mini-batch noise of SGD to first order in ``eta d / B``
    (issue 16): the moment-level flow (:func:`noise_corrected_flow`, theory ``"flow"``)
    or the truncated hierarchy with the noise rows (:func:`noise_hierarchy`, theories
    ``"hierarchy"`` and ``"limit"``)."""

    name = "noise"
    #: adds the finite-d one-step terms (or the finite-width potential)
    finite_d = False

    def check(self, theory, order):
        _flow_order_check(self.name, theory, order)

    def apply(self, theory, init, t, *, name, order, check, words, eta=None, batch=None,
              **options):
        self.require(eta, batch)
        if name in ("hierarchy", "limit"):
            return _noise_theory(theory, init, t, name, order, check, words, eta, batch,
                                 dict(options))
        S = [W @ W.T for W in theory.model.check_init(init)]
        opts = {k: options.pop(k) for k in ("rtol", "atol", "refine") if k in options}
        th = noise_corrected_flow(theory.model, S, t, eta=eta, batch=batch, correction=self,
                                  **opts)
        return theory_rows(theory.model, th, words)

    def flow(self, theory, matrices, t_eval, *, eta=None, batch=None, order=None, words=None,
             keep_matrices=False, rtol=None, atol=None, raise_on_failure=False, **ignored):
        self.require(eta, batch)
        _flow_options_check(self.name, order, words, keep_matrices)
        kw = {k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None}
        return noise_corrected_flow(theory.model, matrices, t_eval, eta=eta, batch=batch,
                                    correction=self, raise_on_failure=raise_on_failure, **kw)

    def hierarchy(self, hierarchy, mu0, t_eval, *, eta, batch, method="truncation", check="auto",
                  **options):
        self.require(eta, batch)
        if method not in ("auto", "truncation"):
            raise ValueError(f"correction='noise' runs the truncation; method={method!r} "
                             "does not apply")
        return noise_hierarchy(hierarchy, mu0, t_eval, eta=eta, batch=batch,
                               check="auto" if check == "auto" else check, **options)

    def text(self, hierarchy):
        model = hierarchy.model
        return ("# mini-batch noise, first order in eta d / B, leading order in 1/d:\n"
                + noise_text(model, hierarchy.order) + "\n" + noise_potential(model).text())


class TiedNoiseFiniteD(TiedNoise):
    """``correction="noise+finite-d"``: :class:`TiedNoise` plus the finite-d one-step
    terms (a loss of degree <= 2) or the finite-width potential (degree 3-4); the
    moment-level flow only."""

    name = "noise+finite-d"
    finite_d = True

    def check(self, theory, order):
        if theory in ("hierarchy", "limit"):
            raise ValueError(f"theory={theory!r} takes correction='none' or 'noise', got "
                             f"{self.name!r}")
        _flow_order_check(self.name, theory, order)

    def hierarchy(self, hierarchy, mu0, t_eval, **options):
        raise ValueError(f"the hierarchy takes correction='none' or 'noise', got "
                         f"{self.name!r} (a matrix-flow correction: "
                         f"matrix_flow(..., correction={self.name!r}))")

    def text(self, hierarchy):
        raise ValueError(f"correction must be 'none' or 'noise', got {self.name!r}")
