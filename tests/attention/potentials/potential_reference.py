"""Independent reference for the potential accuracy tests (issue 25): Gamma of the MSE
teacher-student losses (L = 1) and of the row softmax (L = 2), tied, K = 2.

The reference shares no code with the package: the Hessian of the loss by hand, a
tensor rule in the eigenbasis of the 2 x 2 covariance of the pair (student,
teacher) pre-activations. A tensor Gauss-Hermite rule of 400 nodes per axis
reproduces erf's arcsine closed form (mpmath, 40 digits) to 1e-13, but not tanh at
variance 6 (its poles sit 0.64 from the real axis: 300 and 400 nodes differ by
8.8e-7), so the reference for every loss is the tensor trapezoidal rule (step 0.05
on [-12, 12]), spectral for integrands analytic in a strip; it is checked against
both Gauss-Hermite and the closed form on erf, and against a finer trapezoid.

Tied Gamma in the symmetric convention, ``K = 2`` (student 0, teacher 1):
- MSE ``(1/2)(s(G_0) - t(G_1))^2``, ``L = 1``: ``(G_0, G_1) ~ N(0, 2q)``,
  ``Gamma = E[Hess_G loss]``;
- row softmax, ``L = 2``: each row's softmax is ``sigmoid(G_i0 - G_i1)``; the
  differences of a row have covariance ``3q`` and the loss is the sum over the two
  rows of ``(sigmoid(D_s) - sigmoid(D_t))^2``, so ``Phi = 2 E[h]`` and
  ``Gamma = dPhi/dq = 3 E[Hess h]`` (Price: ``dE h / dSigma = E[Hess h] / 2``).
"""

import math

import numpy as np
from scipy.special import erf as sp_erf
from scipy.special import roots_hermitenorm


def _act(name, x):
    """(f, f', f'') by hand."""
    if name == "tanh":
        t = np.tanh(x)
        d = 1 - t * t
        return t, d, -2 * t * d
    if name == "sigmoid":
        s = 0.5 * (1 + np.tanh(0.5 * x))
        d = s * (1 - s)
        return s, d, d * (1 - 2 * s)
    if name == "softplus":
        s = 0.5 * (1 + np.tanh(0.5 * x))
        return np.logaddexp(0.0, x), s, s * (1 - s)
    if name == "gelu":
        P = 0.5 * (1 + sp_erf(x / math.sqrt(2)))
        p = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return x * P, P + x * p, 2 * p - x * x * p
    assert name == "erf"
    e = 2 / math.sqrt(math.pi) * np.exp(-x * x)
    return sp_erf(x), e, -2 * x * e


def _trapezoid(h=0.05, R=12.0):
    z = np.arange(-R, R + h / 2, h)
    w = np.exp(-z * z / 2)
    return z, w / w.sum()


def _gauss_hermite(n):
    z, w = roots_hermitenorm(n)
    return z, w / w.sum()


def reference(name, q, rule=None):
    """Gamma(q) of the MSE loss (name = activation) or of 'softmax' (L = 2)."""
    softmax = name == "softmax"
    v, nm, c = (3.0, "sigmoid", 2.0) if softmax else (2.0, name, 1.0)
    lam, V = np.linalg.eigh(v * np.asarray(q, dtype=float))
    A = V * np.sqrt(np.clip(lam, 0.0, None))
    z, w = rule or _trapezoid()
    Z1, Z2 = np.meshgrid(z, z, indexing="ij")
    W = np.outer(w, w)
    X = A[0, 0] * Z1 + A[0, 1] * Z2
    Y = A[1, 0] * Z1 + A[1, 1] * Z2
    s, s1, s2 = _act(nm, X)
    t, t1, t2 = _act(nm, Y)
    hxx = np.sum(W * c * (s1 * s1 + (s - t) * s2))
    hyy = np.sum(W * c * (t1 * t1 - (s - t) * t2))
    hxy = np.sum(W * -c * s1 * t1)
    return np.array([[hxx, hxy], [hxy, hyy]]) * (3.0 if softmax else 1.0)


def erf_closed(q):
    """Gamma of the erf MSE loss from the arcsine kernel E[erf X erf Y] = (2/pi) asin(...)."""
    import mpmath as mp
    mp.mp.dps = 40

    def F(vx, vy, c):
        return 2 / mp.pi * mp.asin(2 * c / mp.sqrt((1 + 2 * vx) * (1 + 2 * vy)))

    def Phi(a, b, c):
        return (F(2 * a, 2 * a, 2 * a) + F(2 * b, 2 * b, 2 * b)) / 2 - F(2 * a, 2 * b, 2 * c)
    a, b, c = (mp.mpf(float(x)) for x in (q[0][0], q[1][1], q[0][1]))
    gss = mp.diff(lambda x: Phi(x, b, c), a)
    gtt = mp.diff(lambda x: Phi(a, x, c), b)
    gst = mp.diff(lambda x: Phi(a, b, x), c) / 2
    return np.array([[gss, gst], [gst, gtt]], dtype=float)
