"""The long-horizon mini-batch noise correction of untied SGD: a linear-noise flow on the
pairs (issue 26; docs/finite-eta.md, section 7).

Untied attention ``S_k = U_k V_k^T`` (paper 003, section 4, eqs. 24-32), one token, one
trainable index ``k`` and fixed teachers. One SGD step is ``U' = c U - eta Z V``,
``V' = c V - eta Z U`` (:mod:`.noise`), linear in the batch matrix ``Z = Zbar + dZ``, so on the
fast time ``t = eta n`` the pairs ``theta = (U, V)`` follow

    theta_{n+1} = theta_n + eta F(theta_n) + eta xi_n,   xi = -(dZ V, dZ U),
    Cov(dZ) = Sigma_1 / B   (Sigma_1: the covariance of one sample's z = l_k x x^T / sqrt d),

``F`` the drift of the finite-d full flow (:func:`~.fastslow.untied_flow`, ``mode="full"``).
To first order in ``eta`` the SGD mean is ``theta_f + Delta`` with a zero-mean fluctuation
``delta`` (the linear-noise expansion; ``J = F'(theta_f)``):

    d delta/dt = J delta + (noise, covariance eta Sigma_xi / B per unit t),
    d Delta/dt = J Delta + (1/2) F''[delta, delta] - (eta/2) J F,
    E O(theta) = O(theta_f) + O'[Delta] + (1/2) O''[delta, delta]   (first order in eta),

the last term of ``Delta`` being the learning-rate (modified-equation) part: the GD map is
the time-``eta`` map of ``F - (eta/2) F' F``. The tied moment-level flow reduces the
covariance of ``delta`` to inner products because its tangent flow is a congruence; the
untied one is not (``delta V^T`` enters the drift of ``U``), and the covariance of the
``2 d d_k`` entries is too large to carry at Fig. 3's ``d``. So the Gaussian expectation is
evaluated by ``paths`` independent noise paths: every quantity that enters the mean is a
normalised trace quadratic in ``delta`` (``(1/2) F''[delta, delta]``, ``O''[delta, delta]``),
which self-averages over the ``d^2`` noise directions (relative spread ``O(1/d)`` per path;
the spread over paths is returned as the stated error). The noise of each path has the
exact finite-d covariance: it is the difference of two independent sub-batch means of
``z = l_k(G) x x^T / sqrt d`` at Gaussian inputs ``x``, scaled to ``Sigma_1 / B`` (any loss,
the non-Gaussian ``E[l^2 ...]`` included). The directional derivatives are central
differences of ``F`` at ``theta +- h x`` (``h = 1e-2``): ``J x`` to ``O(h^2)`` and
``(1/2) F''[delta, delta]`` from the same two values as ``J delta`` (exact for a loss of
degree <= 2 in ``G``, where ``F`` is cubic), so the shift is linear in ``1/B``, as the
expansion is. Deterministic parts by Heun's method, the noise added
once per step (weak order one in the step ``dt``).

:func:`noise_flow_shift` returns the shift ``E O - O(theta_f)`` of every observable (words
of length <= 2, ``m_k``, ``tA_k``, ``tB_k``, ``q1_kl``, ``q2_kl``) with its standard error and
its learning-rate part; ``correction="noise"`` of the untied theory adds it to the flow or
slaved flow (``noise_method="flow"``, or ``"auto"`` when the hierarchy's shift does not reach
the horizon).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attndyn.numeric.core.validate import check_t_eval

if TYPE_CHECKING:
    from attndyn.numeric.core.types import ArrayLike, RngLike

# one pair (U_k, V_k); a point or tangent (U, V) of the trainable pair, built by tuple
# comprehensions (so of any length to the checker); a path's state (delta, Delta, Delta_lr).
# The model is an UntiedModel, read as Any: this module does not import it (the import
# graph's layering)
_Pair = tuple[np.ndarray, np.ndarray]
_Tan = tuple[np.ndarray, ...]
_PathState = tuple[_Tan, _Tan, _Tan]

__all__ = ["noise_flow_shift", "NOISE_FLOW_DEFAULTS"]

#: the relative step of the central differences of the drift (``_heun_step``)
_H = 1e-2

#: paths, fast-time step and sub-batch size of :func:`noise_flow_shift`
NOISE_FLOW_DEFAULTS = {"paths": 8, "dt": 0.1, "sub_batch": 4}


def check_int(x: object, name: str, lo: int, hi: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not lo <= x <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {x!r}")
    return int(x)


def _loss_derivative(model: Any, k: int) -> Callable[[np.ndarray], np.ndarray]:
    """``l_k(G)`` as a numpy callable of the ``K`` pre-activations (arrays)."""
    import sympy as sp

    from attndyn.symbolic.potential import call_loss, g_array
    G = g_array(1, model.K)
    syms = [G[0, 0, j] for j in range(model.K)]
    expr = sp.diff(call_loss(model.loss, G), syms[k])
    subs: dict[Any, float] = {}
    for name, v in model.params.items():
        subs[sp.Symbol(str(name), real=True)] = float(v)
        subs[sp.Symbol(str(name))] = float(v)
    expr = expr.subs(subs)
    if expr.free_symbols - set(syms):
        raise ValueError(f"the loss derivative has unknown symbols {sorted(map(str, expr.free_symbols - set(syms)))}")
    fn = sp.lambdify(syms, expr, "numpy")

    def lk(Gs: np.ndarray) -> np.ndarray:
        out = fn(*[Gs[:, j] for j in range(model.K)])
        return np.broadcast_to(np.asarray(out, float), Gs.shape[:1])
    return lk


class _Drift:
    """The full flow's drift ``F(U, V)`` of the trainable pair (fast time) and the exact
    finite-d batch noise at the pairs."""

    def __init__(self, model: Any, pairs: Sequence[_Pair], k: int, eta: float, B: int,
                 finite_d: bool = False) -> None:
        from attndyn.numeric.attention.untied.coefficients import coefficients
        self.model, self.k, self.eta, self.B = model, k, eta, B
        self.th = coefficients(model)
        self.d = d = pairs[0][0].shape[0]
        self.pairs = list(pairs)
        self.fixed_M = {l: U @ V.T for l, (U, V) in enumerate(pairs) if l != k}
        self.lk = _loss_derivative(model, k)
        self.sd = math.sqrt(d)
        self.gam = model.weight_decay / d
        self.fd: Callable[[float, np.ndarray], np.ndarray] | None = None
        if finite_d:  # the gradient flow of the exact finite-d loss Phi_d (degree <= 6)
            from attndyn.numeric.attention.untied import finite_width as fw
            c0 = fw.untied_finite_width_taylor(model)
            shape = pairs[k][0].shape
            self.fd = fw.flow_rhs(self.pairs, [k], shape, int(np.prod(shape)), c0,
                                   max(len(c0) - 1, 2), True, "full", model.weight_decay, d,
                                   {"m": None, "fail": False})

    def __call__(self, U: np.ndarray, V: np.ndarray) -> _Tan:
        if self.fd is not None:
            y = self.fd(0.0, np.concatenate([U.ravel(), V.ravel()]))
            return y[:U.size].reshape(U.shape), y[U.size:].reshape(V.shape)
        from attndyn.numeric.attention.untied.fastslow import flow_terms, products, velocity
        cur = list(self.pairs)
        cur[self.k] = (U, V)
        Ms, m, q1, q2 = flow_terms(self.th, cur, [self.k], self.fixed_M)
        g = self.th.gradients(m, q1, q2)
        (dU, dV), = velocity(cur, products(cur, Ms, [self.k]), g, [self.k],
                              g["grad_m"] / self.sd, 2.0 / self.d, self.gam)
        return dU, dV

    def noise(self, U: np.ndarray, V: np.ndarray, rng: np.random.Generator, nb: int
              ) -> np.ndarray:
        """One step's batch fluctuation ``dZ`` (covariance ``Sigma_1 / B``): the difference of
        two independent means of ``nb`` samples of ``z``, times ``sqrt(nb / (2 B))``."""
        d = self.d
        Ms = [self.fixed_M[j] if j != self.k else U @ V.T for j in range(self.model.K)]
        X = rng.standard_normal((2 * nb, d))
        Gs = np.stack([np.einsum("bi,bi->b", X @ Mj, X) for Mj in Ms], axis=1) / self.sd
        w = self.lk(Gs) / self.sd
        w = w * np.concatenate([np.ones(nb), -np.ones(nb)]) / nb
        dZ: np.ndarray = math.sqrt(nb / (2.0 * self.B)) * ((X.T * w) @ X)
        return dZ


def _observables(model: Any, pairs: Sequence[_Pair], words: Sequence[Sequence[int]]
                 ) -> np.ndarray:
    """Words, ``m``, ``tA``, ``tB``, ``q1``, ``q2`` of the pairs (the SGD rows, no loss)."""
    from attndyn.numeric.attention.base import finite_word_traces
    K = model.K
    d = pairs[0][0].shape[0]
    mats: list[np.ndarray] = []
    Ms: list[np.ndarray] = []
    for U, V in pairs:
        Mk = U @ V.T
        Ms.append(Mk)
        mats += [Mk, Mk.T, U @ U.T, V @ V.T]
    w = finite_word_traces(mats, words, "U_k V_k^T")
    m = np.array([np.trace(Mk) for Mk in Ms]) / math.sqrt(d)
    tA = np.array([np.sum(U * U) for U, _ in pairs]) / d
    tB = np.array([np.sum(V * V) for _, V in pairs]) / d
    q1 = np.array([[np.sum(Ms[a] * Ms[b]) for b in range(K)] for a in range(K)]) / d
    q2 = np.array([[np.sum(Ms[a] * Ms[b].T) for b in range(K)] for a in range(K)]) / d
    return np.concatenate([w, m, tA, tB, q1.ravel(), q2.ravel()])


def _grid(t_fast: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """The fast-time grid: every output time, each interval split in steps <= ``dt``; and the
    index of each output time in it."""
    te = np.unique(np.concatenate([[0.0], t_fast]))
    steps = [0.0]
    for a, c in zip(te[:-1], te[1:]):
        n = max(1, int(math.ceil((c - a) / dt - 1e-9)))
        steps.extend(list(np.linspace(a, c, n + 1)[1:]))
    grid = np.array(steps)
    return grid, np.searchsorted(grid, t_fast - 1e-12 * max(1.0, float(te[-1])))


def _check_args(model: Any, pairs: Sequence[Any], tau_eval: ArrayLike, eta: float, batch: int,
                paths: int, dt: float, sub_batch: int, max_bytes: float
                ) -> tuple[Any, Sequence[_Pair], np.ndarray, float, int, int, float, int]:
    from attndyn.numeric.attention.base import check_model
    from attndyn.numeric.core.validate import check_batch, check_eta
    eta, B = check_eta(eta), check_batch(batch)
    model = check_model(model)
    if model.sgd_form != "pairs":
        raise ValueError(f"noise_flow_shift needs an UntiedModel, got {type(model).__name__}")
    C = np.array(model.C.evalf(), dtype=float) if hasattr(model.C, "evalf") else np.asarray(
        model.C, float)
    if model.L != 1 or C.shape != (1, 1) or C[0, 0] != 1.0:
        raise ValueError(f"noise_flow_shift needs L = 1 and C = 1, got L = {model.L}")
    if len(model.trainable) != 1:
        raise ValueError("noise_flow_shift needs exactly one trainable index, got "
                         f"{list(model.trainable)}")
    pairs = model.check_factors(pairs, "pairs")
    tau_eval = check_t_eval(tau_eval, "tau_eval")
    paths = check_int(paths, "paths", 2, 4096)
    sub_batch = check_int(sub_batch, "sub_batch", 1, 1 << 16)
    if isinstance(dt, bool) or not isinstance(dt, (int, float, np.floating)) or not (
            math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a finite float > 0 (a fast-time step), got {dt!r}")
    d = pairs[0][0].shape[0]
    n_steps = (tau_eval[-1] * d) / dt + tau_eval.size
    if n_steps > 1e7:
        raise ValueError(f"noise_flow_shift would take about {n_steps:.3g} steps; raise dt "
                         f"(fast time, {dt:g}) or shorten the horizon")
    k = model.trainable[0]
    nbytes = 8.0 * pairs[k][0].size * (2 * paths + 12) * 2
    if nbytes > max_bytes:
        raise ValueError(f"noise_flow_shift needs about {nbytes / 2**30:.2f} GiB; use fewer "
                         "paths or raise max_bytes")
    return model, pairs, tau_eval, eta, B, paths, float(dt), sub_batch


def _heun_step(F: _Drift, th: _Tan, th1: _Tan, paths_state: Sequence[_PathState], h: float,
               eta: float, rng: np.random.Generator, sub_batch: int) -> list[_PathState]:
    """One step of the deterministic flow (``th`` -> ``th1`` given), of each path's
    ``(delta, Delta, Delta_lr)``; the noise increment ``-(W V, W U)`` at the step's start."""
    U, V = th
    U1, V1 = th1
    F0 = F(U, V)
    F1 = F(U1, V1)
    k_steps = h / eta  # SGD steps per grid step: the noise adds up over them

    # the learning-rate drift -(eta/2) J F, by a central difference
    def jf(Ua: np.ndarray, Va: np.ndarray, Fa: _Tan) -> _Tan:
        nrm = math.sqrt(np.sum(Fa[0] ** 2) + np.sum(Fa[1] ** 2))
        if nrm == 0.0:
            return (np.zeros_like(Ua), np.zeros_like(Va))
        e = 1e-4 * math.sqrt(np.sum(Ua ** 2) + np.sum(Va ** 2)) / nrm
        Fp = F(Ua + e * Fa[0], Va + e * Fa[1])
        Fm = F(Ua - e * Fa[0], Va - e * Fa[1])
        return tuple(-(eta / 2.0) * (p - m) / (2.0 * e) for p, m in zip(Fp, Fm))
    L0, L1 = jf(U, V, F0), jf(U1, V1, F1)

    def rates(Ua: np.ndarray, Va: np.ndarray, Fa: _Tan, dl: _Tan, Dl: _Tan, Ll: _Tan
              ) -> tuple[_Tan, _Tan, _Tan]:
        # central differences at the scale _H: J x = (F(th + h x) - F(th - h x)) / (2 h)
        # to O(h^2), (1/2) F''[x, x] = (F(th + h x) + F(th - h x) - 2 F) / (2 h^2) (exact
        # for a cubic F): the scheme is linear in the noise, as the expansion is
        Fp = F(Ua + _H * dl[0], Va + _H * dl[1])
        Fm = F(Ua - _H * dl[0], Va - _H * dl[1])
        r_d = tuple((p - m) / (2.0 * _H) for p, m in zip(Fp, Fm))
        r_D = tuple((p + m - 2.0 * f) / (2.0 * _H ** 2) for p, m, f in zip(Fp, Fm, Fa))
        jx = []
        for X in (Dl, Ll):
            Xp = F(Ua + _H * X[0], Va + _H * X[1])
            Xm = F(Ua - _H * X[0], Va - _H * X[1])
            jx.append(tuple((p - m) / (2.0 * _H) for p, m in zip(Xp, Xm)))
        r_D = tuple(a + b for a, b in zip(r_D, jx[0]))
        return r_d, r_D, jx[1]
    out = []
    for dl, Dl, Ll in paths_state:
        W = F.noise(U, V, rng, sub_batch)
        s = eta * math.sqrt(k_steps)
        xi = (-s * (W @ V), -s * (W @ U))
        a_d, a_D, a_L = rates(U, V, F0, dl, Dl, Ll)
        aL = tuple(x + y for x, y in zip(a_L, L0))
        dp = tuple(x + h * r + n for x, r, n in zip(dl, a_d, xi))
        Dp = tuple(x + h * r for x, r in zip(Dl, a_D))
        Lp = tuple(x + h * r for x, r in zip(Ll, aL))
        b_d, b_D, b_L = rates(U1, V1, F1, dp, Dp, Lp)
        bL = tuple(x + y for x, y in zip(b_L, L1))
        out.append((tuple(x + h * (r0 + r1) / 2.0 + n for x, r0, r1, n in zip(dl, a_d, b_d, xi)),
                    tuple(x + h * (r0 + r1) / 2.0 for x, r0, r1 in zip(Dl, a_D, b_D)),
                    tuple(x + h * (r0 + r1) / 2.0 for x, r0, r1 in zip(Ll, aL, bL))))
    return out


def _rk4(F: _Drift, th: _Tan, h: float) -> _Tan:
    U, V = th
    k1 = F(U, V)
    k2 = F(U + h / 2 * k1[0], V + h / 2 * k1[1])
    k3 = F(U + h / 2 * k2[0], V + h / 2 * k2[1])
    k4 = F(U + h * k3[0], V + h * k3[1])
    return tuple(x + h / 6.0 * (a + 2 * b + 2 * c + e)
                 for x, a, b, c, e in zip((U, V), k1, k2, k3, k4))


def _shift_rows(model: Any, words: Sequence[Sequence[int]], F: _Drift, th: _Tan,
               paths_state: Sequence[_PathState]) -> tuple[np.ndarray, np.ndarray]:
    """Per path, the first-order shift ``O'[Delta + Delta_lr] + (1/2) O''[delta, delta]`` of
    every observable (central differences at the scale ``_H``; exact for the quadratic
    ``tA``, ``tB``, ``q*_kl``) and its learning-rate part ``O'[Delta_lr]``."""
    k = F.k
    base_pairs = list(F.pairs)

    def obs(U: np.ndarray, V: np.ndarray) -> np.ndarray:
        cur = list(base_pairs)
        cur[k] = (U, V)
        return _observables(model, cur, words)

    def lin(X: _Tan) -> np.ndarray:  # O'[X]
        out: np.ndarray = (obs(th[0] + _H * X[0], th[1] + _H * X[1])
                           - obs(th[0] - _H * X[0], th[1] - _H * X[1])) / (2.0 * _H)
        return out
    o0 = obs(*th)
    rows, lr = [], []
    for dl, Dl, Ll in paths_state:
        quad = (obs(th[0] + _H * dl[0], th[1] + _H * dl[1])
                + obs(th[0] - _H * dl[0], th[1] - _H * dl[1]) - 2.0 * o0) / (2.0 * _H ** 2)
        l_part = lin(Ll)
        rows.append(lin(Dl) + l_part + quad)
        lr.append(l_part)
    return np.array(rows), np.array(lr)


def noise_flow_shift(model: Any, pairs: Sequence[Any], tau_eval: ArrayLike, *,
                     eta: float, batch: int, seed: RngLike = 0, paths: int = 8,
                     dt: float = 0.1, sub_batch: int = 4, order: int = 2,
                     finite_d: bool = False, max_bytes: float = 2 * 2**30) -> dict[str, Any]:
    """The first-order shift of the untied SGD mean from the finite-d flow, ``E O(tau) -
    O(theta_f(tau))``, over long horizons: the linear-noise flow of the module docstring
    (batch noise with its exact finite-d covariance, plus the learning-rate term ``-(eta/2)
    J F``), its Gaussian expectation over ``paths`` independent noise paths.

    ``tau_eval``: slow times ``tau = eta n / d`` (the flow runs on ``t = tau d`` with steps
    ``<= dt``); ``seed``: the paths' randomness (int, SeedSequence or Generator);
    ``sub_batch``: inputs per half of a step's noise draw. Returns ``{"t", "names",
    "delta" (n_names x n_t, the mean over paths), "se" (its standard error over paths),
    "lr" (the learning-rate part alone), "paths", "dt", "eta_d_over_B", "cpu_s"}``; the rows
    are the words up to ``order`` and ``m_k, tA_k, tB_k, q1_kl, q2_kl`` (SGD's names).
    ``finite_d=True``: the drift ``F`` is that of the exact finite-d loss ``Phi_d`` (a loss of
    degree <= 6 in ``G``, :func:`~.finite_width.untied_finite_width_flow`, ``mode="full"``),
    so the shift is taken along the finite-d flow (``"noise+finite-d"``).

    Examples
    --------
    >>> import attndyn
    >>> from attndyn.numeric.attention.untied.noise_flow import noise_flow_shift
    >>> model = attndyn.UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 / 2)
    >>> pairs = attndyn.gaussian_init(model, 6, rng=0)
    >>> out = noise_flow_shift(model, pairs, [0.0, 0.05], eta=0.02, batch=2, paths=2)
    >>> out["delta"].shape == (len(out["names"]), 2)
    True
    """
    import time

    from attndyn.numeric.attention.base import resolve_seed
    c0 = time.process_time()
    model, pairs, tau_eval, eta, B, paths, dt, sub_batch = _check_args(
        model, pairs, tau_eval, eta, batch, paths, dt, sub_batch, max_bytes)
    from attndyn.symbolic.hierarchy import check_order
    words = model.words(check_order(order))
    k = model.trainable[0]
    d = pairs[0][0].shape[0]
    rng = np.random.default_rng(resolve_seed(seed))
    if not isinstance(finite_d, bool):
        raise TypeError(f"finite_d must be a bool, got {type(finite_d).__name__}")
    F = _Drift(model, pairs, k, eta, B, finite_d)
    grid, out_idx = _grid(tau_eval * d, dt)
    th: _Tan = (pairs[k][0].copy(), pairs[k][1].copy())
    zero = (np.zeros_like(th[0]), np.zeros_like(th[1]))
    state: list[_PathState] = [(zero, zero, zero) for _ in range(paths)]
    names = [n for n in model.observable_names(order) if n != "loss"]
    n_t = tau_eval.size
    rows = np.zeros((paths, len(names), n_t))
    lrs = np.zeros((paths, len(names), n_t))
    want = {int(i): j for j, i in enumerate(out_idx)}
    i = 0
    try:
        with np.errstate(over="raise", invalid="raise"):
            for i in range(grid.size):
                if i in want:
                    r, lr = _shift_rows(model, words, F, th, state)
                    rows[:, :, want[i]], lrs[:, :, want[i]] = r, lr
                if i + 1 < grid.size:
                    h = float(grid[i + 1] - grid[i])
                    th1 = _rk4(F, th, h)
                    state = _heun_step(F, th, th1, state, h, eta, rng, sub_batch)
                    th = th1
    except FloatingPointError as exc:
        from attndyn.numeric.core.results import IntegrationError
        raise IntegrationError(f"noise_flow_shift stopped at tau = {grid[i] / d:.4g}: the flow "
                               f"or a noise path overflowed ({exc})") from None
    return {"t": tau_eval.copy(), "names": names, "delta": rows.mean(axis=0),
            "se": rows.std(axis=0, ddof=1) / math.sqrt(paths), "lr": lrs.mean(axis=0),
            "paths": paths, "dt": dt, "sub_batch": sub_batch, "eta_d_over_B": eta * d / B,
            "finite_d": finite_d,
            "cpu_s": time.process_time() - c0}
