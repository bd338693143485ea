"""Tied attention: checks that a planted bug would fail (issue 25, item 4). Each compares
with a computation written here from the definitions, never the code with itself:

- the noise rule (``noise_terms``) on words of length 4-6 against the exact expectation of
  the eta^2 part of the explicit step ``S_k -> (I - eta dA_k) S_k (I - eta dA_k)``;
- the finite-width flow's initial velocity, for a cubic loss, against the directional
  derivatives of ``Phi_d = E loss(G)`` written from the cumulants of quadratic forms;
- the compiled potential at a point outside the PSD cone against Gamma at the projection
  (eq. 92), integrated here by a Gauss-Hermite rule.
"""

import itertools
import math

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.tied import noise as tn
from attndyn.numeric.attention.tied.finite_width import finite_width_flow
from attndyn.symbolic.words import canonical


# ---------------------------------------------------------------------------
# the noise rule against the explicit step

def _eta2_coefficient(word, mats, pert):
    """The eta^2 coefficient of ``Tr prod_i N_i S_{w_i} N_i`` with ``N_i = I - eta P_{w_i}``
    (batched over the leading axis of the perturbations ``pert[k]``, shape (n, d, d)),
    by truncated power series in eta: each factor is ``(S, -(P S + S P), P S P)``."""
    n, d = next(iter(pert.values())).shape[:2]
    acc = [np.broadcast_to(np.eye(d), (n, d, d)), np.zeros((n, d, d)), np.zeros((n, d, d))]
    for letter in word:
        S = mats[letter]
        P = pert.get(letter)
        if P is None:
            z = np.zeros((n, d, d))
            f = [np.broadcast_to(S, (n, d, d)), z, z]
        else:
            f = [np.broadcast_to(S, (n, d, d)), -(P @ S + S @ P), P @ S @ P]
        acc = [acc[0] @ f[0],
               acc[0] @ f[1] + acc[1] @ f[0],
               acc[0] @ f[2] + acc[1] @ f[1] + acc[2] @ f[0]]
    return np.trace(acc[2], axis1=1, axis2=2)


def _leading_noise(word, mats, trainable, Lam):
    """``E`` of the eta^2 coefficient of ``mu_w = Tr(...)/d`` under the leading-order
    contraction ``E[dA_k,ab dA_l,ce] = Lambda_kl delta_ae delta_bc`` (which turns every
    ``E Tr(dA X dA Y)`` into ``Tr X Tr Y``): ``sum_kl Lambda_kl sum_ab B(E_ab at k, E_ba at
    l)`` with ``B`` the polar form of the quadratic coefficient, divided by ``d`` (the
    normalised trace) and by ``d`` again: the rule's ``N_alpha`` is that coefficient over
    ``s2 d`` for the covariance ``s2 (...)``, here ``s2 = 1``."""
    d = mats[0].shape[0]
    E = np.zeros((d * d, d, d))
    ET = np.zeros((d * d, d, d))
    for i, (a, b) in enumerate(itertools.product(range(d), repeat=2)):
        E[i, a, b] = 1.0
        ET[i, b, a] = 1.0
    total = 0.0
    for k in trainable:
        for l in trainable:
            if k == l:
                both = {k: E + ET}
            else:
                both = {k: E, l: ET}
            q_uv = _eta2_coefficient(word, mats, both)
            q_u = _eta2_coefficient(word, mats, {k: E})
            q_v = _eta2_coefficient(word, mats, {l: ET})
            total += Lam[k, l] * 0.5 * float(np.sum(q_uv - q_u - q_v))
    return total / d / d


def _rule(word, mats, trainable, Lam):
    d = mats[0].shape[0]

    def mu(w):
        if not w:
            return 1.0
        P = np.eye(d)
        for x in w:
            P = P @ mats[x]
        return float(np.trace(P)) / d
    return sum(c * Lam[k, l] * mu(a) * mu(b) for c, k, l, a, b in tn.noise_terms(word, trainable))


def _words(letters, lengths):
    out = set()
    for n in lengths:
        for w in itertools.product(letters, repeat=n):
            out.add(tuple(canonical(w)))
    return sorted(out)


def test_noise_rule_on_words_of_length_4_to_6_against_the_explicit_step():
    """Two trainable letters with correlated noise (Lambda_01 != 0) and a teacher letter:
    the rule equals the leading-order expectation of the explicit step's eta^2 term to
    rounding on every canonical word of length 4-6 with both trainable letters (a rule with
    the rest Q of a word in the wrong cyclic order is off on words of length >= 6)."""
    d = 4
    rng = np.random.default_rng(3)
    mats = []
    for _ in range(3):
        A = rng.standard_normal((d, d))
        mats.append((A + A.T) / 2.0 + 0.5 * np.eye(d))
    Lam = np.array([[1.3, 0.4, 0.0], [0.4, 0.7, 0.0], [0.0, 0.0, 0.0]])
    trainable = [0, 1]
    words = [w for w in _words((0, 1, 2), (4, 5, 6)) if 0 in w and 1 in w]
    long_words = [w for w in words if len(w) == 6]
    assert len(long_words) > 20
    for w in words:
        want = _leading_noise(w, mats, trainable, Lam)
        got = _rule(w, mats, trainable, Lam)
        assert got == pytest.approx(want, rel=1e-10, abs=1e-10 * max(1.0, abs(want))), w
    # a teacher-only word carries no noise
    assert tn.noise_terms((2, 2, 2, 2), trainable) == []


# ---------------------------------------------------------------------------
# the finite-width flow of a cubic loss against the gradient of Phi_d

def _phi_d(S0, S1, d, cubic=1.0):
    """``E loss(G)`` for ``loss = (G_0 - G_1)^2 + G_0^3 + G_0^2 G_1 / 2`` at finite ``d``:
    ``E G_k G_l = 2 Tr(S_k S_l)/d`` and ``E G_k G_l G_m = 8 Tr(S_k S_l S_m)/d^(3/2)``
    (Gaussian quadratic forms, ``E G = 0``)."""
    def tr(*ms):
        P = np.eye(d)
        for m in ms:
            P = P @ m
        return float(np.trace(P))
    second = 2.0 * (tr(S0, S0) - 2.0 * tr(S0, S1) + tr(S1, S1)) / d
    third = 8.0 * (tr(S0, S0, S0) + 0.5 * tr(S0, S0, S1)) / d ** 1.5
    return second + cubic * third


def test_finite_width_flow_of_a_cubic_loss_follows_the_gradient_of_phi_d():
    """dS/dt = -(d/2)(P S + S P) - (gamma/2) S with P = dPhi_d/dS gives, at t = 0,
    dt_0/dt = -D[S_0] - (gamma/2) t_0, dq_00/dt = -2 D[S_0^2] - gamma q_00 and
    dq_01/dt = -(1/2) D[S_0 S_1 + S_1 S_0] - (gamma/2) q_01 with D[X] the derivative of
    Phi_d(S_0 + h X) at h = 0 (central differences here). The cubic terms are a third of
    the velocity at d = 6 (a halved kappa_3 term is off by 1e-1)."""
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 + G[0, 0, 0] ** 3
                              + G[0, 0, 0] ** 2 * G[0, 0, 1] / 2, weight_decay=0.3)
    d = 6
    rng = np.random.default_rng(11)
    W0 = rng.standard_normal((d, d)) * 0.3
    W1 = rng.standard_normal((d, d)) * 0.3
    S0, S1 = W0 @ W0.T, W1 @ W1.T
    gam = 0.3

    def D(X, h=1e-5):
        return (_phi_d(S0 + h * X, S1, d) - _phi_d(S0 - h * X, S1, d)) / (2 * h)
    t0, q00, q01 = np.trace(S0) / d, np.sum(S0 * S0) / d, np.sum(S0 * S1) / d
    want = {"t": -D(S0) - gam / 2 * t0, "q00": -2.0 * D(S0 @ S0) - gam * q00,
            "q01": -0.5 * D(S0 @ S1 + S1 @ S0) - gam / 2 * q01}
    # the kappa_3 part of the velocity is not small here
    D3 = D(S0) - (_phi_d(S0 + 1e-5 * S0, S1, d, 0.0) - _phi_d(S0 - 1e-5 * S0, S1, d, 0.0)) / 2e-5
    assert abs(D3) > 0.2 * abs(D(S0))
    h = 1e-6
    res = finite_width_flow(model, [S0, S1], [0.0, h, 2 * h], rtol=1e-13, atol=1e-15)
    assert res.status == 0, res.message
    got = {}
    for key, w in (("t", (0,)), ("q00", (0, 0)), ("q01", (0, 1))):
        i = res.words.index(w)
        y = res.y[i]
        got[key] = (-3 * y[0] + 4 * y[1] - y[2]) / (2 * h)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-9), (key, got, want)


# ---------------------------------------------------------------------------
# the projection on the PSD cone (eq. 92) of the compiled routes

def _proj(A):
    A = 0.5 * (A + A.T)
    lam, V = np.linalg.eigh(A)
    return (V * np.maximum(lam, 0.0)) @ V.T


def _erf_mse_moments(mean, cov, n=200):
    """``E grad`` and ``E Hess`` of ``(erf(G_0) - erf(G_1))^2 / 2`` for ``G ~ N(mean, cov)``
    (``cov`` PSD, possibly singular) by a tensor Gauss-Hermite rule on ``G = mean + V
    sqrt(lam) z``: an independent reference (numpy only)."""
    lam, V = np.linalg.eigh(cov)
    Fm = V * np.sqrt(np.maximum(lam, 0.0))
    z, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    Z = np.stack(np.meshgrid(z, z, indexing="ij"), -1).reshape(-1, 2)
    Wt = np.outer(w, w).ravel()
    G = mean[None, :] + Z @ Fm.T
    e = np.array([[math.erf(v) for v in row] for row in G])
    de = 2.0 / math.sqrt(math.pi) * np.exp(-G ** 2)
    dde = -2.0 * G * de
    r = e[:, 0] - e[:, 1]
    grad = np.stack([r * de[:, 0], -r * de[:, 1]], 1)
    H = np.empty((G.shape[0], 2, 2))
    H[:, 0, 0] = de[:, 0] ** 2 + r * dde[:, 0]
    H[:, 1, 1] = de[:, 1] ** 2 - r * dde[:, 1]
    H[:, 0, 1] = H[:, 1, 0] = -de[:, 0] * de[:, 1]
    return Wt @ grad, np.einsum("n,nij->ij", Wt, H)


@pytest.mark.parametrize("kind", ["tied", "untied", "direct"])
def test_compiled_route_projects_on_the_psd_cone(kind):
    """Outside the cone the compiled quadrature evaluates the law at the projection (tied:
    of q, eq. 92; untied and direct: of (X1 + X2)/2 and (X1 - X2)/2, eqs. 490-491), here
    computed by eigh and integrated by an independent Gauss-Hermite rule (L = 1: the law of
    G is N(m, 2 P_+) with P_+ the projection of q, resp. of (X1 + X2)/2; H = E Hess loss).
    Outputs: tied Gamma = H; direct dPhi/dOmega = dPhi/dPsi = H/2; untied dPhi/dm = E grad,
    a^(1) = a^(2) = H/2 and the m-Hessian H."""
    from attndyn.numeric.attention.potentials import numeric_potential
    from attndyn.symbolic.losses import mse_teacher_student
    num = numeric_potential(kind, mse_teacher_student("erf"), 2, 1, tol=1e-10)
    f = num.gradient_function()
    prm = num.parameters()
    if kind == "tied":
        q = np.array([[1.0, 1.3], [1.3, 0.8]])
        x = q.ravel()
        mean, Pp = np.zeros(2), _proj(q)
    else:
        X1 = np.array([[1.0, 1.2], [1.2, 0.7]])
        X2 = np.array([[0.3, 0.9], [0.9, 0.5]])
        assert np.linalg.eigvalsh((X1 + X2) / 2)[0] < -0.1   # outside the cone
        mean = np.array([0.2, -0.1]) if kind == "untied" else np.zeros(2)
        x = np.concatenate([mean if kind == "untied" else [], X1.ravel(), X2.ravel()])
        Pp = _proj((X1 + X2) / 2)
    g, H = _erf_mse_moments(mean, 2.0 * Pp)
    if kind == "tied":
        want = H.ravel()
    elif kind == "direct":
        want = np.concatenate([H.ravel() / 2, H.ravel() / 2])
    else:
        want = np.concatenate([g, H.ravel() / 2, H.ravel() / 2, H.ravel()])
    out = np.empty(num.n_out)
    f(np.ascontiguousarray(x, dtype=float), prm, out)
    assert out.size == want.size
    scale = np.max(np.abs(want))
    assert scale > 0.1
    # (the rule here: 2.7e-7 off at 80 nodes, 1e-10 at 160; a wrong projection is O(1) off)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-8 * scale)


@pytest.mark.parametrize("q", [[[1.0, 1.3], [1.3, 0.8]], [[0.8, -1.3], [-1.3, 1.0]]])
def test_hermite_kernel_projects_on_the_psd_cone(q):
    """The compiled Mehler series (tied, erf) at q outside the cone: Gamma at the projection
    of q (eq. 92), integrated here, within the series' stated bound (q_00 > q_11 and
    q_00 < q_11 take the two branches of the eigenvector's formula)."""
    from attndyn.numeric.attention.potentials.hermite import HermitePotential
    q = np.array(q)
    _, H = _erf_mse_moments(np.zeros(2), 2.0 * _proj(q))
    hp = HermitePotential("erf", q_max=4.0)
    g, bound, M = hp.gamma_with_bound(q)
    assert np.max(bound) <= 1e-6 * np.max(np.abs(H))
    assert np.all(np.abs(g - H) <= bound + 1e-10 * np.max(np.abs(H))), (g, H, bound)
