"""Golden scenarios: every backend (hierarchy, matrix flow, SGD) must reproduce them.

Each scenario fixes a model, an initial condition and a horizon on which the
truncation at ``order`` has converged. A backend passes when its moments of
length <= 2 agree with the reference backend, the exact matrix flow, within the
tolerance its own named effect explains (truncation: ``tol``; SGD: the
learning-rate noise of MATH.md).
"""

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
