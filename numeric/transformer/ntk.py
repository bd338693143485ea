r"""Corollary 6.1 / E.3's kernel predictor ``F^ntk`` with its measured
approximation error against the model size, and the effective training rate
against the depth (contribution 2: the rate of eq. 7 is proportional to ``N``).

Corollary E.3 builds (with ``m = infinity``, ``omega = 1``, ``eps = 1``) the predictor

.. math:: F^{\rm ntk}_\ell(X) = X_\ell + \mathcal K_\ell(\{X\}, \mathcal X)\,
          \mathcal K_\ell(\mathcal X, \mathcal X)^{-1} \hat F_\ell(\mathcal X),

where ``K_l`` is the ReLU (arc-cosine) kernel on the mean-pooled prefixes
``xbar_l = (1/l) sum_{l' <= l} X_{l'}``,

.. math:: \mathcal K_\ell(a, b) = \langle \bar a, \bar b\rangle\,
          \mathbb E_w[1\{\langle \bar a, w\rangle > 0, \langle \bar b, w\rangle > 0\}]
          = \langle \bar a, \bar b\rangle \frac{\pi - \theta_{ab}}{2\pi},

and ``F^_l(X) = Y_l - X_l`` the residual targets of the training set. The inputs are the
model's ``Lambda_0 = X + E`` (the rearranged data set of section B carries ``E``). The kernel
system is solved by least squares (``ridge`` adds ``ridge I``).

:func:`ntk_approximation` trains students of several widths and measures
``E||F(theta_T) - F^ntk||^2`` and ``E||F(theta_T) - F*||^2`` on the test inputs, beside
Corollary 6.1's ``M^-2``; :func:`rate_vs_depth` fits the training loss's decay rate against
the depth ``N``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["arccos_kernel", "ntk_predictor", "ntk_approximation", "rate_vs_depth"]


def arccos_kernel(A, B):
    """The ReLU arc-cosine kernel of :func:`ntk_predictor` (Corollary E.3),
    ``<a, b> (pi - theta_ab) / (2 pi)`` for rows of ``A`` (p, d) and ``B`` (q, d).

        >>> a = np.array([[1.0, 0.0]])
        >>> b = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
        >>> np.round(arccos_kernel(a, b), 6) + 0.0
        array([[0.5, 0. , 0. ]])
    """
    G = A @ B.T
    na = np.linalg.norm(A, axis=1)[:, None]
    nb = np.linalg.norm(B, axis=1)[None, :]
    den = na * nb
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(den > 0, G / np.where(den > 0, den, 1.0), 1.0)
    th = np.arccos(np.clip(cos, -1.0, 1.0))
    return G * (math.pi - th) / (2 * math.pi)


def _pooled(Lam):
    L = Lam.shape[1]
    return np.cumsum(Lam, axis=1) / np.arange(1, L + 1)[None, :, None]


def ntk_predictor(X_train, Y_train, E=None, *, ridge=0.0):
    """Corollary E.3's ``F^ntk`` fitted on ``(X_train, Y_train)``; returns a
    callable ``(n, L, d) -> (n, L, d)``. ``E``: the positional embedding added
    to the inputs (zeros if None).

        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((6, 2, 3))
        >>> Y = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> f = ntk_predictor(X, Y, ridge=1e-8)
        >>> f(X).shape, bool(np.allclose(f(X), Y, atol=1e-5))
        ((6, 2, 3), True)
    """
    X = np.asarray(X_train, dtype=np.float64)
    Y = np.asarray(Y_train, dtype=np.float64)
    if X.ndim != 3 or Y.shape != X.shape:
        raise ValueError(f"X_train and Y_train must have the same shape (n, L, d), got "
                         f"{X.shape}, {Y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):  # else LAPACK fails
        raise ValueError("X_train and Y_train must be finite (found NaN or inf)")
    E = np.zeros(X.shape[1:]) if E is None else np.asarray(E, dtype=np.float64)
    if E.shape != X.shape[1:] or not np.all(np.isfinite(E)):
        raise ValueError(f"E must be a finite array of shape (L, d) = {X.shape[1:]}, got "
                         f"shape {E.shape}")
    ridge = float(ridge)
    if not math.isfinite(ridge) or ridge < 0:
        raise ValueError(f"ridge must be a finite real number >= 0, got {ridge}")
    Lam = X + E
    P = _pooled(Lam)
    L = X.shape[1]
    coef = []
    for l in range(L):
        K = arccos_kernel(P[:, l], P[:, l]) + ridge * np.eye(X.shape[0])
        coef.append(np.linalg.lstsq(K, Y[:, l] - Lam[:, l], rcond=None)[0])

    def predict(Xn):
        Xn = np.asarray(Xn, dtype=np.float64)
        Ln = Xn + E
        Pn = _pooled(Ln)
        out = np.empty_like(Ln)
        for l in range(L):
            out[:, l] = Ln[:, l] + arccos_kernel(Pn[:, l], P[:, l]) @ coef[l]
        return out

    return predict


def ntk_approximation(setup, widths, *, T, seeds=2, n_eval=5, **train_kw):
    """Students of width ``m`` in ``widths`` (model size ``M = N(m d + d^2)``)
    trained by gradient flow to ``T``; rows ``err_to_ntk = E||F - F^ntk||^2``,
    ``excess_risk = E||F - F*||^2``, ``ntk_excess_risk = E||F^ntk - F*||^2``
    (test inputs, seed means) and ``bound_M2 = M^-2`` (Corollary 6.1); a Sweep
    over ``M`` with power-law fits.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = ntk_approximation(setup, (4, 16), T=0.2, seeds=2, n_eval=2)
        >>> sw.x_name, "err_to_ntk" in sw.names
        ('M', True)
    """
    from .lemmas import seed_list, build, check_setup
    from .model import int_ge1
    from .results import Sweep, fit_power_law
    from .training import train
    s = check_setup(setup)
    seeds = seed_list(seeds)
    widths = [int_ge1(int(m), "widths") for m in widths]
    if not widths:
        raise ValueError("widths must be a non-empty list of ints >= 1")
    rows, Ms, status = [], [], 0
    for m in widths:
        a, b, c = [], [], []
        for sd in seeds:
            student, data = build(dict(s, m=m), sd)
            r = train(student, data, T=T, n_eval=n_eval, **train_kw)
            status = status or r.status
            f = ntk_predictor(data.X, data.Y, student.E)
            F = r.diagnostics["matrices"]["model"]._forward(data.X_test).F
            Fn = f(data.X_test)
            a.append(float(np.mean(np.sum((F - Fn) ** 2, axis=(1, 2)))))
            b.append(float(np.mean(np.sum((F - data.F_test) ** 2, axis=(1, 2)))))
            c.append(float(np.mean(np.sum((Fn - data.F_test) ** 2, axis=(1, 2)))))
        M = s["N"] * (m * s["d"] + s["d"] ** 2)
        Ms.append(M)
        rows.append([np.mean(a), np.mean(b), np.mean(c), M ** -2.0])
    x = np.asarray(Ms, dtype=np.float64)
    y = np.asarray(rows).T
    names = ["err_to_ntk", "excess_risk", "ntk_excess_risk", "bound_M2"]
    fits = {k: fit_power_law(x, y[names.index(k)]) for k in ("err_to_ntk", "excess_risk")}
    return Sweep("M", x, names, y, kind="corollary61", params=dict(s, T=float(T)), seeds=seeds,
                 fits=fits, status=status)


def rate_vs_depth(setup, depths, *, T, seeds=2, n_eval=10, **train_kw):
    """The training loss's decay rate (least-squares slope of ``-log L(t)``)
    against the depth ``N``, beside eq. (7)'s ``omega lambda N eps^2`` with the
    measured ``lambda`` (Definition B.5); a Sweep over ``N`` with the fitted
    exponent of the rate (eq. 7: +1).

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = rate_vs_depth(setup, (1, 2), T=0.2, seeds=2, n_eval=4)
        >>> sw.x_name, sw.x.tolist()
        ('N', [1.0, 2.0])
    """
    from .kernel import assumption_lambda
    from .lemmas import seed_list, build, check_setup
    from .model import int_ge1
    from .results import Sweep, fit_power_law
    from .training import train
    s = check_setup(setup)
    seeds = seed_list(seeds)
    depths = [int_ge1(int(N), "depths") for N in depths]
    if not depths:
        raise ValueError("depths must be a non-empty list of ints >= 1")
    rows, status = [], 0
    for N in depths:
        rate, pred = [], []
        for sd in seeds:
            student, data = build(dict(s, N=N), sd)
            lam = assumption_lambda(student, data.X)
            r = train(student, data, T=T, n_eval=n_eval, **train_kw)
            status = status or r.status
            t, Ls = r.t, r.observable("loss")
            A = np.vstack([np.ones(t.size), t]).T
            rate.append(float(-np.linalg.lstsq(A, np.log(Ls), rcond=None)[0][1]))
            pred.append(s["omega"] * lam * N * s["eps"] ** 2)
        rows.append([np.mean(rate), np.std(rate), np.mean(pred)])
    x = np.asarray(depths, dtype=np.float64)
    y = np.asarray(rows).T
    return Sweep("N", x, ["rate", "rate_std", "eq7_rate"], y, kind="rate_depth",
                 params=dict(s, T=float(T)), seeds=seeds,
                 fits={"rate": fit_power_law(x, y[0]), "eq7_rate": fit_power_law(x, y[2])},
                 status=status)
