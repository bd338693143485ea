"""Issue 16, direct S: the mini-batch noise correction of the closed ODE (402)-(404).

Default suite: the noise coefficients from the Gaussian engine (closed form, Monte Carlo,
the Psi/Omega assignment at L = 2), the empirical one-step mean's trace algebra against an
explicit matrix computation, the exact finite-d formulas against each other, a small
one-step check and a small trajectory check against SGD, and the refusals. The issue's
sizes are ``slow``.
"""

import math

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.numeric.attention.direct import noise as nd
from attndyn.numeric.attention.compare import compare
from attndyn.numeric.core.validate import resolve_seed


def _d3(**kw):
    return attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, **kw)


def _quartic():
    return attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2
                          + (G[0, 0, 0] ** 2 - G[0, 0, 1] ** 2) ** 2 / 4)


def _overlaps(rng, K):
    A = rng.standard_normal((K, K + 2))
    Bm = rng.standard_normal((K, K + 2))
    Om = A @ A.T / (K + 2) + Bm @ Bm.T / (K + 2)
    Psi = A @ A.T / (K + 2) - Bm @ Bm.T / (K + 2)  # (Om +- Psi)/2 PSD
    return Psi, Om


def test_lambda_d3_closed_form():
    lam = nd.noise_coefficients(_d3())
    Om, Ps = lam._Om, lam._Ps
    want = 4 * (Om[0, 0] - 2 * Om[0, 1] + Om[1, 1] + Ps[0, 0] - 2 * Ps[0, 1] + Ps[1, 1])
    assert sp.expand(lam.exprs[("Psi", 0, 0)] - want) == 0
    assert sp.expand(lam.exprs[("Omega", 0, 0)] - want) == 0
    Psi, Om_ = _overlaps(np.random.default_rng(1), 2)
    lp, lo = lam(Psi, Om_)
    v = 4 * (Om_[0, 0] - 2 * Om_[0, 1] + Om_[1, 1] + Psi[0, 0] - 2 * Psi[0, 1] + Psi[1, 1])
    assert lp[0, 0] == pytest.approx(v) and lo[0, 0] == pytest.approx(v)
    assert lp[1, 1] == lp[0, 1] == 0.0  # the teacher's entries
    text = nd.noise_text(_d3())
    assert "d Psi_11/dtau += (eta d / B)" in text and "d t_1/dtau += 0" in text


def test_lambda_quartic_monte_carlo():
    """E[l_1^2] for the quartic loss by the engine against sampled Gaussian G
    (L = 1: Cov(G_k, G_l) = Omega_kl + Psi_kl)."""
    m = _quartic()
    rng = np.random.default_rng(2)
    Psi, Om = _overlaps(rng, 2)
    lp, lo = nd.noise_coefficients(m)(Psi, Om)
    G = rng.multivariate_normal(np.zeros(2), Om + Psi, size=400_000)
    l1 = 2 * (G[:, 0] - G[:, 1]) + (G[:, 0] ** 2 - G[:, 1] ** 2) * G[:, 0]
    v = l1 ** 2
    se = v.std() / math.sqrt(v.size)
    assert abs(v.mean() - lp[0, 0]) < 4 * se
    assert lo[0, 0] == pytest.approx(lp[0, 0])


def test_lambda_numeric_route_monte_carlo():
    """A loss without closed forms for l l' (erf teacher-student): the quadrature route."""
    m = attndyn.SModel(2, [0], lambda G: (sp.erf(G[0, 0, 0]) - sp.erf(G[0, 0, 1])) ** 2)
    lam = nd.noise_coefficients(m)
    assert lam.exprs[("Psi", 0, 0)] is None  # no closed form: numeric quadrature
    Psi = np.array([[0.3, 0.1], [0.1, 0.4]])
    Om = np.array([[1.0, 0.3], [0.3, 0.9]])
    lp, lo = lam(Psi, Om)
    from scipy.special import erf
    G = np.random.default_rng(0).multivariate_normal([0, 0], Om + Psi, size=400_000)
    l1 = 2 * (erf(G[:, 0]) - erf(G[:, 1])) * 2 / math.sqrt(math.pi) * np.exp(-G[:, 0] ** 2)
    v = l1 ** 2
    assert abs(v.mean() - lp[0, 0]) < 4 * v.std() / math.sqrt(v.size)
    assert "numeric quadrature" in nd.noise_text(m)


def test_lambda_psi_omega_assignment_L2():
    """L = 2 with a non-identity token covariance: the single-sample E Tr(a a^T)/d and
    E Tr(a a)/d (empirical, B = 1) approach Lambda^Omega and Lambda^Psi, which differ."""
    C = [[1.0, 0.4], [0.4, 1.0]]
    m = attndyn.SModel(1, [0], lambda G: G[0, 1, 0] ** 2 + G[0, 0, 0] * G[1, 1, 0], L=2, C=C)
    d = 150
    rng = np.random.default_rng(3)
    S = [rng.standard_normal((d, d)) / math.sqrt(d) + 0.3 * np.eye(d)]
    t, Psi, Om = m.order_parameters(S)
    lp, lo = nd.noise_coefficients(m)(Psi, Om)
    assert abs(lp[0, 0] - lo[0, 0]) > 0.2 * abs(lo[0, 0])
    eta = 1.0
    e = nd.one_step_empirical(m, S, eta=eta, batch=1, n_batches=6000, seed=4)
    iP, iO = e["names"].index("Psi_11"), e["names"].index("Omega_11")
    for i, lam in ((iP, lp[0, 0]), (iO, lo[0, 0])):
        meas, se = e["by_order"][i, 2], e["se_by_order"][i, 2]
        # leading order in 1/d: allow the statistical error and a 12 % finite-d part
        assert abs(meas - lam) < 4 * se + 0.12 * abs(lam), (e["names"][i], meas, lam, se)
    # the drift (eta^1 part) of a quadratic loss is exact (Stein): the potential's A, B
    p = nd.one_step_prediction(m, S, eta=eta, batch=1, exact=False)
    assert p["names"] == e["names"]
    z = (e["by_order"][:, 1] - p["flow"]) / e["se_by_order"][:, 1]
    assert np.all(np.abs(z) < 4), z


def _explicit_changes(m, S, eta, B, n, seed):
    """Per-batch changes by building A_k and S_k' as matrices (the reference)."""
    K, L = m.K, m.L
    d = S[0].shape[0]
    C = np.array(m.C.evalf(), dtype=float)
    w, V = np.linalg.eigh(C)
    F = V * np.sqrt(np.maximum(w, 0.0))
    rng = np.random.default_rng(resolve_seed(seed))
    Z = rng.standard_normal((n, B, L, d))
    X = np.einsum("ij,nbjd->nbid", F, Z) if L > 1 else Z * F[0, 0]
    dl = nd._dloss_function(m)
    trS = np.array([np.trace(s) for s in S])
    keys, names = nd.obs(m)
    out = np.zeros((n, len(keys)))
    for r in range(n):
        Gv = np.einsum("bid,mde,bje->bijm", X[r], np.array(S), X[r])
        Gv = (Gv - C[None, :, :, None] * trS[None, None, None, :]) / math.sqrt(d)
        lv = dl(Gv[None])[0]
        new = [s.copy() for s in S]
        for a, k in enumerate(m.trainable):
            A = np.zeros((d, d))
            for b in range(B):
                for i in range(L):
                    for j in range(L):
                        A += lv[b, i, j, a] * (np.outer(X[r, b, i], X[r, b, j])
                                               - C[i, j] * np.eye(d))
            A /= B * math.sqrt(d)
            new[k] = (1 - eta * m.weight_decay / d) * S[k] - eta * A
        for j, key in enumerate(keys):
            if key[0] == "t":
                out[r, j] = (np.trace(new[key[1]]) - np.trace(S[key[1]])) / d
            else:
                kind, k, l = key
                f = (lambda P, Q: np.sum(P * Q.T)) if kind == "Psi" else (lambda P, Q: np.sum(P * Q))
                out[r, j] = (f(new[k], new[l]) - f(S[k], S[l])) / d
    return names, out


@pytest.mark.parametrize("case", ["L1", "L2"])
def test_empirical_trace_algebra_matches_explicit_matrices(case):
    if case == "L1":
        m = attndyn.SModel(3, [0, 1], lambda G: (G[0, 0, 0] + G[0, 0, 1] - G[0, 0, 2]) ** 2
                           + G[0, 0, 0] ** 3 / 3, weight_decay=0.7)
    else:
        m = attndyn.SModel(2, [0, 1], lambda G: (G[0, 1, 0] - G[1, 0, 1]) ** 2
                           + G[0, 0, 0] * G[1, 1, 1], L=2, C=[[1.0, 0.3], [0.3, 0.8]])
    d, B, eta = 7, 3, 0.3
    rng = np.random.default_rng(5)
    S = [rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(m.K)]
    names, ref = _explicit_changes(m, S, eta, B, 4, seed=9)
    e = nd.one_step_empirical(m, S, eta=eta, batch=B, n_batches=4, seed=9, chunk=3)
    assert e["names"] == names
    np.testing.assert_allclose(e["mean"], ref.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(e["by_order"].sum(axis=1), e["mean"], rtol=1e-12, atol=1e-15)


def test_finite_d_terms_match_exact_one_step():
    """finite_d_terms (closed form in t, Psi, Omega) is the exact one-step eta^2 term per
    unit tau (quadratic-form moments), here with a shifted loss (beta != 0) and two
    trainable indices."""
    m = attndyn.SModel(3, [0, 1], lambda G: (G[0, 0, 0] + 2 * G[0, 0, 1] - G[0, 0, 2] - 0.4) ** 2
                       + G[0, 0, 0] * G[0, 0, 1])
    d, eta, B = 12, 0.2, 5
    rng = np.random.default_rng(6)
    S = [rng.standard_normal((d, d)) / math.sqrt(d) + h * np.eye(d) for h in (0.3, -0.2, 0.5)]
    p = nd.one_step_prediction(m, S, eta=eta, batch=B, exact=True)
    t, Psi, Om = m.order_parameters(S)
    ap, ao = nd.finite_d_terms(m, t, Psi, Om, eta=eta, batch=B, d=d)
    for i, name in enumerate(p["names"]):
        if not name.startswith(("Psi", "Omega")):
            continue
        kind, kl = name.split("_")
        k, l = int(kl[0]) - 1, int(kl[1]) - 1
        per_tau = p["noise"][i] * d / eta
        want = (ap if kind == "Psi" else ao)[k, l]
        assert per_tau == pytest.approx(want, rel=1e-10, abs=1e-13), name


def test_one_step_check_small():
    m = _d3(weight_decay=0.3)
    configs = nd.random_configs(m, 40, 2, seed=7)
    rows = nd.one_step_check(m, configs, eta=0.05, batches=(16,), n_batches=20_000, seed=8)
    assert max(abs(r["z_corrected"]) for r in rows) < 4.0
    noisy = [r for r in rows if r["eta2_predicted"] != 0.0]
    assert noisy and min(abs(r["z_flow"]) for r in noisy) > 10.0
    assert "z corr" in nd.check_table(rows)


def test_trajectory_small_d3():
    """SGD mean over 24 seeds at eta d / B = 0.5 against the ODE without and with the
    noise terms (d = 40)."""
    m = _d3()
    d, B, eta = 40, 8, 0.1
    S = m.gaussian_init(d, scale=[1.0, 1.0], seed=7)
    t = np.linspace(0.0, 0.3, 7)
    res = {c: compare(m, S, eta=eta, batch=B, t_eval=t, n_seeds=24, seed=0, correction=c,
                      names=["t_1", "Psi_11", "Psi_12"])
           for c in ("none", "noise", "noise+finite-d")}
    se = res["none"].spread["Psi_11"][1:] / math.sqrt(24)
    err = {c: np.abs(r.sgd.y[1] - r.theory.y[1])[1:] for c, r in res.items()}
    assert (err["none"] / se).max() > 15
    assert err["noise"].max() < err["none"].max() / 2.5  # measured 3.5x (the rest is O(1/d))
    assert (err["noise+finite-d"] / se).max() < 4
    assert res["noise"].params["correction"] == "noise"
    assert res["noise"].theory.params["eta_d_over_B"] == pytest.approx(0.5)


def test_refusals():
    m = _d3()
    S = m.gaussian_init(10, seed=1)
    with pytest.raises(ValueError, match="eta"):
        m.integrate(S, [0, 0.1], correction="noise")
    with pytest.raises(ValueError, match="batch"):
        m.integrate(S, [0, 0.1], correction="noise", eta=0.1)
    with pytest.raises(ValueError, match="eta"):
        m.integrate(S, [0, 0.1], correction="noise", eta=-1.0, batch=2)
    with pytest.raises(ValueError, match="correction"):
        m.integrate(S, [0, 0.1], correction="finite-d", eta=0.1, batch=2)
    with pytest.raises(ValueError, match="apply to correction"):
        m.integrate(S, [0, 0.1], eta=0.1)
    with pytest.raises(ValueError, match="disagrees"):
        m.integrate(S, [0, 0.1], correction="noise", eta=0.1, batch=2, d=11)
    with pytest.raises(ValueError, match="d \\(the dimension\\)"):
        m.integrate(m.order_parameters(S), [0, 0.1], correction="noise", eta=0.1, batch=2)
    r = m.integrate(m.order_parameters(S), [0, 0.1], correction="noise", eta=0.1, batch=2, d=10)
    assert r.status == 0 and r.params["eta_d_over_B"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="degree <= 2"):
        _quartic().integrate(S, [0, 0.1], correction="noise+finite-d", eta=0.1, batch=2)
    with pytest.raises(ValueError, match="theory='ode'"):
        m.theory.run(S, np.array([0.0, 0.1]), name="flow", order=None, check=None, words=None,
                     correction="noise", eta=0.1, batch=2)
    with pytest.raises(ValueError, match="not available"):
        compare(m, S, eta=0.1, batch=2, t_eval=[0, 0.1], correction="finite-d")
    with pytest.raises(ValueError, match="degree <= 2"):
        nd.one_step_prediction(_quartic(), S, eta=0.1, batch=2, exact=True)
    with pytest.raises(ValueError, match="n_batches"):
        nd.one_step_empirical(m, S, eta=0.1, batch=2, n_batches=1)
    with pytest.raises(ValueError, match="chunk"):
        nd.one_step_empirical(m, S, eta=0.1, batch=2, n_batches=4, chunk=0)
    with pytest.raises(ValueError, match="SModel"):
        nd.noise_coefficients(attndyn.TiedModel(2, [0], lambda G: G[0, 0, 0] ** 2))
    with pytest.raises((TypeError, ValueError), match="batch"):
        nd.one_step_prediction(m, S, eta=0.1, batch=0)


@pytest.mark.slow
def test_one_step_check_issue_size():
    """d = 100, B = 16 and 64, 1e5 batches, 3 configurations: the exact prediction within
    3.5 standard errors everywhere, the drift alone off by > 20 on every noisy row."""
    m = _d3()
    configs = nd.random_configs(m, 100, 3, seed=100)
    rows = nd.one_step_check(m, configs, eta=0.01, batches=(16, 64), n_batches=100_000, seed=16)
    assert max(abs(r["z_corrected"]) for r in rows) < 3.5
    noisy = [r for r in rows if r["eta2_predicted"] != 0.0]
    assert min(abs(r["z_flow"]) for r in noisy) > 20.0


@pytest.mark.slow
@pytest.mark.parametrize("eta", [0.04, 0.08])
def test_trajectory_issue_size(eta):
    """d = 100, B = 16 (eta d / B = 0.25, 0.5), 64 seeds, tau in [0, 0.5]."""
    m = _d3()
    S = m.gaussian_init(100, scale=[1.0, 1.0], seed=7)
    t = np.linspace(0.0, 0.5, 21)
    names = ["t_1", "Psi_11", "Omega_11", "Psi_12", "Omega_12"]
    res = {c: compare(m, S, eta=eta, batch=16, t_eval=t, n_seeds=64, seed=0, correction=c,
                      names=names) for c in ("none", "noise", "noise+finite-d")}
    for i, n in enumerate(names):
        se = res["none"].spread[n][1:] / 8.0
        z = np.abs(res["noise+finite-d"].sgd.y[i] - res["noise+finite-d"].theory.y[i])[1:] / se
        assert z.max() < 3.5, n
    e = {c: np.abs(r.sgd.y[1] - r.theory.y[1]).max() for c, r in res.items()}
    assert e["noise"] < e["none"] / 5 and e["noise+finite-d"] < e["none"] / 50
