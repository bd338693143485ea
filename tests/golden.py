"""Golden scenarios: every backend (hierarchy, matrix flow, SGD) must reproduce them.

Each scenario fixes a model, an initial condition and a horizon on which the
truncation at ``order`` has converged. A backend passes when its moments of
length <= 2 agree with the reference backend, the exact matrix flow, within the
tolerance its own named effect explains (truncation: ``tol``; SGD: the
learning-rate noise of MATH.md).

``SCENARIOS`` are tied (S_k = W_k W_k^T); ``UNTIED_SCENARIOS`` (S_k = U_k V_k^T) and
``DIRECT_SCENARIOS`` (SGD over S) fix the same for the other parameterisations: their
theory routes agree with each other within a named effect, and SGD on either backend
(numba, the array API on NumPy) agrees with the theory in seed units.
"""

import math
from dataclasses import dataclass, field

import numpy as np
import sympy as sp


def _h2(z):
    return (z ** 2 - 1) / sp.sqrt(2)


@dataclass
class Scenario:
    name: str
    K: int
    trainable: tuple
    loss: object
    L: int = 1
    C: object = None
    weight_decay: float = 0.0
    d: int = 60
    top: tuple = (0.5, 0.5)  # largest eigenvalue of each initial S_k
    horizon: float = 0.1
    order: int = 12
    tol: float = 1e-6
    sgd_tol: float = 1e-4  # SGD at eta = 0.0025, B = 60 against the flow (max abs error)
    sgd_effect: str = "learning-rate noise, O(eta d / B)"
    seed: int = 0
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def matrices(self):
        rng = np.random.default_rng(self.seed)
        out = []
        for k in range(self.K):
            A = rng.standard_normal((self.d, self.d))
            S = A @ A.T / self.d
            out.append(self.top[k % len(self.top)] * S / np.linalg.eigvalsh(S)[-1])
        return out

    def factors(self):
        """``W_k`` with ``W_k W_k^T = S_k`` (the SGD backend's initial condition)."""
        out = []
        for S in self.matrices():
            lam, V = np.linalg.eigh(S)
            out.append(V * np.sqrt(np.clip(lam, 0.0, None)))
        return out

    def model(self):
        import attndyn
        return attndyn.TiedModel(self.K, self.trainable, self.loss, L=self.L, C=self.C,
                                 weight_decay=self.weight_decay)


SCENARIOS = [
    Scenario("d3-linear", 2, (0,), lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2,
             horizon=0.1, order=14, sgd_tol=5e-5, notes="appendix D.3, constant Gamma"),
    Scenario("d3-decay", 2, (0,), lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=8.0,
             horizon=0.5, order=16, tol=1e-5, sgd_tol=1.5e-4,
             notes="weight decay extends the converged horizon"),
    Scenario("three-indices-quartic", 3, (0, 1),
             lambda G: (G[0, 0, 0] + G[0, 0, 1] - G[0, 0, 2]) ** 2 + G[0, 0, 0] ** 4 / 10,
             weight_decay=0.5, top=(0.3, 0.3, 0.5), horizon=0.05, order=10,
             sgd_tol=1e-4, notes="two students, Gamma depends on q"),
    Scenario("h2-teacher-student", 2, (0,), lambda G: (_h2(G[0, 0, 0]) - _h2(G[0, 0, 1])) ** 2 / 2,
             top=(0.6, 0.8), horizon=0.1, order=14, sgd_tol=1e-3,
             sgd_effect="finite-d non-Gaussianity of G, O(1/d) (3.4e-4, 1.1e-4, 6.1e-5 at d = 60, 120, 240)",
             notes="h2 activations, quadratic potential"),
    Scenario("two-tokens-correlated", 2, (0,),
             lambda G: sum((G[i, j, 0] - G[i, j, 1]) ** 2 for i in range(2) for j in range(2)) / 4,
             L=2, C=[[1.0, 0.3], [0.3, 1.0]], top=(0.4, 0.5), horizon=0.05, order=12,
             sgd_tol=5e-5, notes="L = 2 with token covariance (eq. 91)"),
]


# ---------------------------------------------------------------------------
# untied and direct S

def _mse_two_tokens(G):
    return sum((G[i, j, 0] - G[i, j, 1]) ** 2 for i in range(2) for j in range(2)) / 4


@dataclass
class UntiedScenario:
    """An untied golden scenario (paper 003, section 4): the slow hierarchy truncated at
    ``order`` reproduces the slaved flow on ``h_horizon`` within ``tol`` (truncation);
    the full finite-d flow (fast time ``tau d``) follows the slaved flow within
    ``flow_tol`` on the traces and ``mean_tol`` on ``m`` (finite-d corrections of the
    slow limit, shrinking with d); SGD (slow time ``tau = eta n / d``)
    follows the full flow within ``z_ok`` in seed units (rms z over the times, seeds
    ``n_seeds``; learning-rate noise O(eta d / B) well below one seed SD)."""

    name: str
    K: int
    trainable: tuple
    loss: object
    L: int = 1
    C: object = None
    weight_decay: float = 0.0
    d: int = 24
    scale: tuple = (0.6, 0.8)  # U_k, V_k entries N(0, scale_k^2 / d): tA_k ~ scale_k^2
    mean: tuple = (0.5, 0.5)  # m_k = Tr(U_k V_k^T)/sqrt(d) (a multiple of I added), > 0
    horizon: float = 0.1  # slow time of the SGD and flow comparison
    order: int = 7
    h_horizon: float = 0.02
    tol: float = 1e-6
    flow_tol: float = 3e-3  # traces: measured 1.3e-3, 6.3e-4, 4.6e-4 at d = 24, 48, 96 (h1)
    mean_tol: float = 0.08  # m: 4.8e-2, 2.3e-2, 1.5e-2 at d = 24, 48, 96 (h1)
    exact_tol: float = 1e-5  # cells without seed spread (the teacher): rounding
    eta: float = 0.005
    batch: int = 60
    n_seeds: int = 16
    z_ok: float = 3.0
    seed: int = 0
    notes: str = ""
    kind = "untied"

    def times(self):
        return np.linspace(0.0, self.horizon, 5)

    def model(self):
        import attndyn
        return attndyn.UntiedModel(self.K, self.trainable, self.loss, L=self.L, C=self.C,
                                   weight_decay=self.weight_decay)

    def init(self):
        """The pairs ``(U_k, V_k)``: Gaussian plus ``a_k I`` with ``m_k = mean_k`` (so the
        student starts on the critical manifold when its mean is the teacher's)."""
        rng = np.random.default_rng(self.seed)
        out = []
        for k in range(self.K):
            sd = self.scale[k % len(self.scale)] / math.sqrt(self.d)
            U = rng.standard_normal((self.d, self.d)) * sd
            V = rng.standard_normal((self.d, self.d)) * sd
            # m(a) = Tr((U + a I)(V + a I)^T) / sqrt(d) = mean_k: the larger root in a
            r = math.sqrt(self.d)
            b, c = (np.trace(U) + np.trace(V)) / r, np.sum(U * V) / r
            c -= self.mean[k % len(self.mean)]
            a = (-b + math.sqrt(b * b - 4 * r * c)) / (2 * r)
            out.append((U + a * np.eye(self.d), V + a * np.eye(self.d)))
        return out


@dataclass
class DirectScenario:
    """A direct-S golden scenario (paper 003, appendix E): the closed ODE (402)-(404)
    equals the traces of the finite-d S matrix flow within ``tol`` (solver tolerance:
    the closure is exact at any d); SGD (``tau = eta n / d``) follows the closed ODE
    within ``z_ok`` in seed units (rms z over the times, ``n_seeds`` seeds)."""

    name: str
    K: int
    trainable: tuple
    loss: object
    L: int = 1
    C: object = None
    weight_decay: float = 0.0
    d: int = 20
    scale: tuple = (0.7, 1.0)  # S_k entries N(0, scale_k^2 / d): Omega_kk ~ scale_k^2
    trace: tuple = (0.0, 0.5)  # t_k = Tr S_k / d moved by this (a multiple of I)
    horizon: float = 0.5
    tol: float = 1e-8
    exact_tol: float = 1e-5  # cells without seed spread: Euler steps of the decay, O(eta/d)
    eta: float = 0.01
    batch: int = 60
    n_seeds: int = 16
    z_ok: float = 3.0
    seed: int = 0
    notes: str = ""
    kind = "direct"

    def times(self):
        return np.linspace(0.0, self.horizon, 5)

    def model(self):
        import attndyn
        return attndyn.SModel(self.K, self.trainable, self.loss, L=self.L, C=self.C,
                              weight_decay=self.weight_decay)

    def init(self):
        """The matrices ``S_k``: Gaussian (not symmetric) plus ``trace_k I``."""
        rng = np.random.default_rng(self.seed)
        return [rng.standard_normal((self.d, self.d)) * self.scale[k % len(self.scale)]
                / math.sqrt(self.d) + self.trace[k % len(self.trace)] * np.eye(self.d)
                for k in range(self.K)]


UNTIED_SCENARIOS = [
    UntiedScenario("untied-h1-decay", 2, (0,), lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 / 2,
                   weight_decay=0.5, notes="linear teacher-student, m starts near m*"),
    UntiedScenario("untied-two-tokens", 2, (0,), _mse_two_tokens, L=2,
                   C=[[1.0, 0.3], [0.3, 1.0]], weight_decay=0.5,
                   notes="L = 2 with token covariance (eq. 91)"),
]

DIRECT_SCENARIOS = [
    DirectScenario("direct-linear-decay", 2, (0,), lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 / 2,
                   weight_decay=0.5, notes="linear teacher-student (Corollary 7 case 1)"),
    DirectScenario("direct-two-tokens", 2, (0,), _mse_two_tokens, L=2,
                   C=[[1.0, 0.3], [0.3, 1.0]], weight_decay=0.5,
                   notes="L = 2 with token covariance"),
]


# ---------------------------------------------------------------------------
# the checks every backend passes, in seed units

def sgd_seeds(sc, backend="numba", seed=1, model=None, batch=None):
    """``sc.n_seeds`` SGD runs of scenario ``sc`` on ``backend`` (``"numba"`` or
    ``"array-api"``, through ``attndyn.numeric.sgd_runs``) and their rows stacked as
    ``(n_seeds, n_obs, n_t)``."""
    from attndyn.numeric import sgd_runs
    model = sc.model() if model is None else model
    runs = sgd_runs(model, sc.init(), n_seeds=sc.n_seeds, seed=seed, eta=sc.eta,
                    batch=sc.batch if batch is None else batch, t_eval=sc.times(),
                    progress=False, backend=backend)
    assert all(r.status == 0 for r in runs), [r.message for r in runs if r.status]
    return runs, np.stack([r.y for r in runs])


def theory_z(Y, names, theory, exact_tol):
    """SGD seeds ``Y`` (``(n_seeds, n_obs, n_t)``, rows ``names``) against a theory
    trajectory with the same row names: per observable the rms over the times ``t > 0`` of
    ``z = mean_i (SGD_i - theory) / (sd_i / sqrt(n))``. An observable without seed spread
    (a teacher; a part the noise does not reach) must agree within ``exact_tol`` instead
    (its z is then 0, or inf beyond it). Returns ``{name: rms z}``."""
    n = Y.shape[0]
    out = {}
    for i, name in enumerate(names):
        D = Y[:, i, 1:] - np.asarray(theory.observable(name))[None, 1:]
        se = D.std(axis=0, ddof=1) / np.sqrt(n)
        mean = D.mean(axis=0)
        spread = se > 1e-9 * (1.0 + np.abs(Y[:, i, 1:]).max(axis=0))
        if not spread.any():
            out[name] = 0.0 if np.abs(mean).max() <= exact_tol else float("inf")
            continue
        assert np.abs(mean[~spread]).max(initial=0.0) <= exact_tol, name
        out[name] = float(np.sqrt(np.mean((mean[spread] / se[spread]) ** 2)))
    return out


def distribution_stats(A, B):
    """Two backends' seeds ``(n_seeds, ...)``: the largest ``|z|`` of the difference of the
    seed means over every checkpoint and observable, and the median ratio of the seed
    spreads (B over A) where both spread. Cells without spread must agree to rounding."""
    ma, mb = A.mean(0), B.mean(0)
    sa, sb = A.std(0, ddof=1), B.std(0, ddof=1)
    se = np.sqrt(sa ** 2 / A.shape[0] + sb ** 2 / B.shape[0])
    noisy = se > 1e-9 * (1.0 + np.abs(ma))
    assert np.allclose(ma[~noisy], mb[~noisy], rtol=1e-9, atol=1e-12)
    z = (mb - ma)[noisy] / se[noisy]
    both = (sa > 0) & (sb > 0) & noisy
    return float(np.abs(z).max()), float(np.median(sb[both] / sa[both]))


# ---------------------------------------------------------------------------
# the two backend checks the untied and direct-S scenarios share

_SGD_CACHE: dict = {}


def cached_sgd_seeds(sc, backend, seed):
    """:func:`sgd_seeds` of scenario ``sc`` once per ``(kind, name, backend, seed)`` in a
    test session (the theory tests and the backend tests read the same runs)."""
    key = (sc.kind, sc.name, backend, seed)
    if key not in _SGD_CACHE:
        _SGD_CACHE[key] = sgd_seeds(sc, backend, seed)
    return _SGD_CACHE[key]


def check_backends_equal_in_distribution(sc):
    """numba (seed 1) and the array API on NumPy (seed 2): the same rows, times and step
    counts; max |z| of the seed means <= 3.5 and the median spread ratio within 0.6-1.6."""
    a, A = cached_sgd_seeds(sc, "numba", 1)
    b, B = cached_sgd_seeds(sc, "array-api", 2)
    assert a[0].names == b[0].names and np.array_equal(a[0].t, b[0].t)
    assert np.array_equal(a[0].diagnostics["steps"], b[0].diagnostics["steps"])
    zmax, ratio = distribution_stats(A, B)
    assert zmax <= 3.5, (sc.name, zmax)
    assert 0.6 <= ratio <= 1.6, (sc.name, ratio)


def check_seed_reruns_identically(sc, backend):
    """A seed's rerun from its stored seed record is identical on ``backend``, and two
    seeds differ."""
    from attndyn.numeric import sgd
    runs, _ = cached_sgd_seeds(sc, backend, 1 if backend == "numba" else 2)
    again = sgd(sc.model(), sc.init(), eta=sc.eta, batch=sc.batch, t_eval=sc.times(),
                rng=runs[3].seed, progress=False, backend=backend)
    assert np.array_equal(again.y, runs[3].y)
    assert not np.array_equal(runs[2].y, runs[3].y)

