"""Independent references for the surrogate tests: Gamma of two-variable losses by an
adaptive product trapezoidal rule in the Cholesky frame (numpy, no generated code, no
Gauss-Hermite nodes).

Both cases used reduce to the expectation of ``c * Hess h(X, Y)`` over a centred
Gaussian pair with covariance ``s q``:

- MSE teacher-student, L = 1: ``h = (sigma(X) - sigma(Y))^2 / 2``, ``s = 2``, ``c = 1``
  (``Var G_k = 2 q_kk``, ``Gamma_kl = E[d^2 loss / dG_k dG_l]``);
- row softmax, L = 2, C = I: the loss is ``sum_i (sig(d_i^s) - sig(d_i^t))^2`` with the
  row differences ``d_i = G_i0 - G_i1`` (``Var = 3 q``, the student/teacher covariance
  ``3 q_st`` for both rows), so ``Phi = 2 E[(sig(X) - sig(Y))^2]`` and, in the
  symmetric convention, ``Gamma = 3 E[Hess (sig(X) - sig(Y))^2]``: ``s = 3``, ``c = 6``
  on the same ``h`` (checked against the 4-variable quadrature of the numeric route).

The trapezoidal rule on ``[-13, 13]^2`` (truncation ``e^-84``) converges like
``exp(-2 pi d / h)`` for integrands analytic in the strip ``|Im z| < d`` (tanh,
sigmoid: poles at a distance ``pi/2`` and ``pi`` over the standard deviation), far
faster than Gauss-Hermite there. The spacing halves until two successive values agree
to 2e-14 relative (or 1e-16 absolute); the last difference is the reference's own error.
"""

import numpy as np
from scipy.special import erf, expit

SQ2 = np.sqrt(2.0)


def _phi(x):
    return np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


def derivatives(name):
    """``(sigma, sigma', sigma'')`` as numpy functions."""
    if name == "tanh":
        def f(x):
            t = np.tanh(x)
            return t, 1 - t * t, -2 * t * (1 - t * t)
    elif name == "sigmoid":
        def f(x):
            s = expit(x)
            return s, s * (1 - s), s * (1 - s) * (1 - 2 * s)
    elif name == "gelu":
        def f(x):
            Phi = (1 + erf(x / SQ2)) / 2
            return x * Phi, Phi + x * _phi(x), _phi(x) * (2 - x * x)
    elif name == "erf":
        def f(x):
            d = 2 / np.sqrt(np.pi) * np.exp(-x * x)
            return erf(x), d, -2 * x * d
    else:
        raise ValueError(name)
    return f


def _gamma_trap(q, f, s, c, h):
    z = np.arange(-13.0, 13.0 + h / 2, h)
    w = h * _phi(z)
    Z1, Z2 = np.meshgrid(z, z, indexing="ij")
    W = np.outer(w, w)
    S = s * np.asarray(q, float)
    a = np.sqrt(S[0, 0])
    b = np.sqrt(S[1, 1])
    rho = S[0, 1] / (a * b)
    X = a * Z1
    Y = b * (rho * Z1 + np.sqrt(max(1 - rho * rho, 0.0)) * Z2)
    fx, dx, ddx = f(X)
    fy, dy, ddy = f(Y)
    diff = fx - fy
    h11 = dx * dx + diff * ddx
    h12 = -dx * dy
    h22 = dy * dy - diff * ddy
    g11, g12, g22 = (c * np.sum(W * h) for h in (h11, h12, h22))
    return np.array([[g11, g12], [g12, g22]])


def reference_gamma(q, name, kind="mse"):
    """``(Gamma(q), own error)`` for ``kind`` "mse" (L = 1) or "softmax" (L = 2, sigmoid)."""
    f = derivatives("sigmoid" if kind == "softmax" else name)
    s, c = (2.0, 1.0) if kind == "mse" else (3.0, 6.0)
    prev = None
    for h in (0.4, 0.2, 0.1, 0.05):
        g = _gamma_trap(q, f, s, c, h)
        if prev is not None:
            err = np.abs(g - prev)
            if np.all(err <= np.maximum(2e-14 * np.abs(g), 1e-16)):
                return g, err
        prev = g
    return g, err


def reference_many(Q, name, kind="mse"):
    return np.array([reference_gamma(q, name, kind)[0] for q in np.asarray(Q)])
