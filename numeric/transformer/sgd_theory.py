r"""Theorem 5.5 / E.2 under SGD (``alpha_agr < 1``): the realised ``dL/dt`` against
its expectation and E.2's Hoeffding step.

Along eq. (2) with a batch ``B`` the full training loss moves at the realised rate
``dL/dt|_B = -<grad L, g_B>``, ``g_B = (1/|B|) sum_{i in B} g_i`` (``g_i`` the gradient of
sequence ``i``'s loss ``||F(X_i) - Y_i||_F^2``). For a batch drawn uniformly without
replacement ``E[g_B] = grad L``, so ``E[dL/dt] = -|grad L|^2`` (the flow's rate), and

    dL/dt|_B - E[dL/dt] = -(1/|B|) sum_{i in B} (s_i - mean s),   s_i = <grad L, g_i>,

a mean of ``|B|`` draws without replacement from the ``n`` numbers ``s_i``: its variance is
``(1 - (|B|-1)/(n-1)) var(s) / |B|`` and Hoeffding's inequality (Lemma A.14, valid without
replacement) bounds it by ``(max s - min s) sqrt(log(2/delta) / (2|B|))`` with probability
``1 - delta``. Theorem E.2's step claims the deviation is at most ``(C_1/2) eps^2 L`` with
``C_1 = omega lambda / 2``, so that ``dL/dt <= -(C_1/2) eps^2 L`` survives the noise.

:func:`sgd_rate_gap` measures, at given parameters, the exact distribution (all batches, or
``n_batches`` sampled ones) of the gap, its ``1 - delta`` quantile, the Hoeffding bound from
the measured range and E.2's ``(omega lambda/4) eps^2 L``; :func:`theorem_e2_sgd` does it at
every output time of an SGD run.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["per_sample_gradients", "sgd_rate_gap", "theorem_e2_sgd"]


def per_sample_gradients(model, X, Y):
    """``(n, M)`` gradients of ``||F(X_i) - Y_i||_F^2`` (one backward pass each).

        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((6, 2, 3))
        >>> Y = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> G = per_sample_gradients(tf, X, Y)
        >>> G.shape == (6, tf.n_params)
        True
    """
    out = []
    for i in range(X.shape[0]):
        _, g = model.loss_and_grad(X[i:i + 1], Y[i:i + 1])
        out.append(g)
    return np.asarray(out)


#: Most batches :func:`sgd_rate_gap` draws (one Python-level draw each).
MAX_BATCHES = 10 ** 7


def _check_gap_args(lam, delta, n_batches):
    """``(lam, delta, n_batches)`` checked by name before any batch is drawn."""
    from .model import pos_float
    # lam may be <= 0: theorem_e2_sgd passes the measured lambda when Assumption 5.1 fails
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)):
        raise TypeError(f"lam must be a real number (lambda of Assumption 5.1), got {lam!r}")
    if not abs(lam) <= 1.7976931348623157e308:
        raise ValueError(f"lam must be finite, got {lam}")
    lam = float(lam)
    delta = pos_float(delta, "delta", " (the gap's quantile is 1 - delta)")
    if delta >= 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if isinstance(n_batches, bool) or not isinstance(n_batches, (int, np.integer)):
        raise TypeError(f"n_batches must be an int in [1, {MAX_BATCHES}], got {n_batches!r}")
    if not 1 <= n_batches <= MAX_BATCHES:
        raise ValueError(f"n_batches must be an int in [1, {MAX_BATCHES}], got {n_batches}")
    return lam, delta, int(n_batches)


def sgd_rate_gap(model, X, Y, batch, *, lam, delta=0.05, n_batches=2000, seed=0):
    r"""Theorem E.2's SGD step measured: the gap ``dL/dt|_B - E[dL/dt]`` at the model's
    parameters for batches of ``batch`` sequences; see the module docstring. Returns a dict with
    ``loss``, ``expected_rate = |grad L|^2``, ``quantile`` (the ``1 - delta``
    quantile of ``|gap|`` over ``n_batches`` uniform batches), ``std_exact``
    (finite-population formula), ``hoeffding`` and ``e2_step = (omega lam/4)
    eps^2 L``; ``frac_positive`` (batches with ``dL/dt|_B > 0``).

        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((6, 2, 3))
        >>> Y = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> lam = 0.1
        >>> r = sgd_rate_gap(tf, X, Y, 3, lam=lam, n_batches=200)
        >>> sorted(r)[:4]
        ['batch', 'delta', 'e2_step', 'expected_rate']
        >>> sgd_rate_gap(tf, X, Y, 6, lam=lam, n_batches=50)["quantile"] < 1e-9
        True
    """
    X, Y = model.check_XY(X, Y)
    n = X.shape[0]
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or not 1 <= batch <= n:
        raise ValueError(f"batch must be an int in [1, n] = [1, {n}], got {batch!r}")
    lam, delta, n_batches = _check_gap_args(lam, delta, n_batches)
    G = per_sample_gradients(model, X, Y)
    g = G.mean(axis=0)                       # grad of (1/n) sum ||F_i - Y_i||^2
    R = model._forward(X).F - Y
    loss = float(np.vdot(R, R) / n)
    s = G @ g
    e_rate = float(g @ g)
    rng = np.random.default_rng(seed)
    gaps = np.empty(n_batches)
    for k in range(n_batches):
        idx = rng.choice(n, size=batch, replace=False)
        gaps[k] = -(s[idx].mean() - e_rate)
    fpc = 1.0 - (batch - 1) / (n - 1) if n > 1 else 0.0
    std = math.sqrt(max(fpc, 0.0) * s.var() / batch)
    hoeff = float((s.max() - s.min()) * math.sqrt(math.log(2 / delta) / (2 * batch)))
    e2 = model.omega * lam / 4 * model.eps ** 2 * loss
    return {"loss": loss, "expected_rate": e_rate, "quantile": float(np.quantile(np.abs(gaps),
                                                                               1 - delta)),
            "std_sampled": float(gaps.std()), "std_exact": std, "hoeffding": hoeff,
            "e2_step": e2, "frac_positive": float(np.mean(-e_rate + gaps > 0)),
            "batch": int(batch), "n": n, "delta": delta}


def theorem_e2_sgd(setup, seed=0, *, T, lr, batch_fraction, delta=0.05, n_eval=5,
                   n_batches=1000, kernel="definition"):
    """An SGD run (eq. 2 with ``|B| = round(batch_fraction n)``) and, at each
    output time, :func:`sgd_rate_gap`; returns ``(result, rows, lam)``: the run, one dict
    per output time (``t`` added) and ``lambda`` of Assumption 5.1 for
    ``kernel`` at ``theta(0)``.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> res, rows, lam = theorem_e2_sgd(setup, 0, T=0.2, lr=0.05, batch_fraction=0.5, n_eval=2,
        ...                                n_batches=50)
        >>> res.status, len(rows), sorted(rows[0])[:3]
        (0, 3, ['batch', 'delta', 'e2_step'])
    """
    from .kernel import kernel_eigenvalues
    from .lemmas import build, check_setup
    from .training import train
    s = check_setup(setup)
    student, data = build(s, seed)
    lam = min(e["lambda"] for e in kernel_eigenvalues(student, data.X, kernel=kernel))
    res = train(student, data, T=T, method="sgd", lr=lr, batch_fraction=batch_fraction,
                seed=seed, n_eval=n_eval, observe=("theta",))
    B = res.params["batch_size"]
    m = res.diagnostics["matrices"]["model"].copy()
    rows = []
    for t, th in zip(res.t, res.diagnostics["matrices"]["theta"]):
        m.set_theta(th)
        r = sgd_rate_gap(m, data.X, data.Y, B, lam=lam, delta=delta, n_batches=n_batches,
                         seed=seed)
        r["t"] = float(t)
        rows.append(r)
    return res, rows, lam
