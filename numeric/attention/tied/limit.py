"""The d -> infinity trajectory of the tied hierarchy from an initial law.

The infinite hierarchy (paper 003, eq. 11) is the normalised-trace projection
of the tied matrix flow

    dS_k/dt = - sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k,   q_kl = Tr(S_k S_l)/d,

at any finite ``d``. For an initial condition given as a *law* (a
:class:`~attndyn.symbolic.initial.FreeInit`: independent Wishart and scalar
initialisations, asymptotically free), :func:`limit_flow` computes the
``d -> infinity`` trajectory in one of two ways.

Commuting case (exact). When at most one letter is non-scalar (for example a
Wishart student and a scalar teacher ``S_2 = c I``), every ``S_k(t)`` stays a
function of that one matrix ``S``: in its eigenbasis ``S_k(t) = f_k(t, S)``,
and the flow acts eigenvalue by eigenvalue,

    d lambda_k(x)/dt = -2 sum_l Gamma_kl(q) lambda_l(x) lambda_k(x) - (gamma/2) lambda_k(x),
    q_kl(t) = int lambda_k(x) lambda_l(x) drho(x),

with ``lambda_k(0, x) = x`` for the Wishart letter and ``c_k`` for a scalar
one, ``rho`` the Marchenko-Pastur law. The eigenvalues couple only through
the scalars ``q``: the solver integrates this self-consistent ODE on the nodes
of a quadrature rule for ``rho`` and reports every moment as
``mu_w = int prod_i lambda_{w_i}(x) drho(x)``. There is no ``1/d`` error; the
quadrature error is estimated by a second rule with half the nodes per
panel. For the loss ``(G_1 - G_2)^2`` and ``S_2 = c I`` this is
``d lambda/dt = 4 c lambda - 4 lambda^2`` (paper 003, eq. 347-348).

The quadrature: with ``x = lambda_- + (lambda_+ - lambda_-) sin^2(theta/2)`` the
Marchenko-Pastur density times ``dx`` becomes a smooth weight in
``theta in [0, pi]`` (the square-root edges and, for aspect 1, the
``x^{-1/2}`` singularity at 0 disappear); Gauss-Legendre panels graded
geometrically towards ``theta = 0`` resolve the small eigenvalues, whose
logistic growth ``x e^{4ct}`` makes the integrand steep near 0 at long times.

Non-commuting case (deterministic equivalents). Matrices of size ``d`` whose
spectra are the bin means of the limiting law over ``d`` equal-mass quantile
bins, rotated by independent Haar-random orthogonal matrices (so that they are
asymptotically free), are integrated by the fast matrix flow
(:mod:`attndyn.numeric.attention.tied.flow`) at two or more sizes, averaged over
``rotations`` independent rotations at each size, and extrapolated in
``1/d`` (Richardson): with sizes ``d_1 < ... < d_m`` the means are fitted by
``Y(d) = Y_inf + sum_{j < m} c_j d^{-j}``. The error estimate per observable
and time is::

    error = t_975 * max_t (standard error of Y_inf over the rotations)
            + |Y_inf - Y_inf'|,

where the standard error is propagated through the Richardson weights, taken
uniform in time (a few rotations estimate it poorly at any one time), ``t_975``
is the Student quantile for the pooled degrees of freedom, and ``Y_inf'`` is the
extrapolation from the sizes without the smallest (for two sizes: the largest
size alone). The Haar rotations make each flow's traces fluctuate by ``O(1/d)``
around the free values; Richardson removes the ``O(1/d)`` bias, and only
averaging removes the fluctuation, which dominates the error in practice.

One trainable student, one random teacher (exact). When one trainable
Wishart letter meets one fixed Wishart teacher (other letters scalar), the
flow is a matrix Riccati equation whose inverse is linear; free subordination
then gives ``t_k`` and ``q_kl`` exactly (:func:`free_limit`, no ``1/d`` error).
This is Figure 4's setting (paper 003, appendix D.3, with a random teacher).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attndyn.numeric.attention.base import check_model
# the shared limit machinery, re-exported here (its public names stay in __all__)
from attndyn.numeric.attention.limitcore import (LimitTrajectory, check_int, seed_rec,
                                                 check_sizes,
                                                 extrapolate, haar_orthogonal, mp_bin_means,
                                                 mp_edges, mp_quadrature, richardson)
from attndyn.numeric.core.results import IntegrationError
from attndyn.numeric.core.validate import check_pos_float, check_t_eval, resolve_seed
from attndyn.symbolic.hierarchy import check_order
from attndyn.symbolic.initial import Spec, FreeInit
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

if TYPE_CHECKING:
    from attndyn.numeric.attention.base import AttentionModel, TiedModelLike
    from attndyn.numeric.core.types import ArrayLike, RngLike

#: per-node solver output: times, values or traces, status and message
_NodeRun = tuple[np.ndarray, np.ndarray, int, str]
_Rhs = Callable[[float, np.ndarray], np.ndarray]
_Event = Callable[[float, np.ndarray], float]
#: the free solver's overlaps q, traces t and log g at a state (B, N, psi)
_QMat = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]

__all__ = ["limit_flow", "tied_limit_flow", "LimitTrajectory", "mp_edges", "mp_quadrature", "mp_bin_means",
           "commuting_limit", "free_limit", "extrapolate", "per_node_flow", "law_of_factors",
           "limit_theory", "deterministic_equivalents", "richardson", "is_commuting",
           "haar_orthogonal"]


# ---------------------------------------------------------------------------
# the Marchenko-Pastur law

def _spec_params(spec: Spec) -> tuple[float, float]:
    if spec.kind != "wishart":
        raise ValueError("not a Wishart spec")
    sigma, a = float(spec.a), float(spec.b)
    if not (math.isfinite(sigma) and math.isfinite(a)) or a <= 0 or sigma < 0:
        raise ValueError(f"Wishart spec needs sigma >= 0 and aspect > 0, got {sigma}, {a}")
    return sigma, a


# ---------------------------------------------------------------------------
# laws

def check_law(model: TiedModelLike, law: object) -> FreeInit:
    if not isinstance(law, FreeInit):
        raise TypeError("law must be an attndyn.symbolic.initial.FreeInit (wishart/scalar specs)")
    if len(law.specs) != model.K:
        raise ValueError(f"law must have K = {model.K} specs, got {len(law.specs)}")
    for k, s in enumerate(law.specs):
        if s.kind == "wishart":
            _spec_params(s)
        else:
            c = float(s.a)
            if not math.isfinite(c):
                raise ValueError(f"law.specs[{k}]: scalar must be finite, got {c}")
    return law


def random_letters(law: FreeInit) -> list[int]:
    return [k for k, s in enumerate(law.specs) if s.kind == "wishart" and float(s.a) != 0.0]


def is_commuting(law: FreeInit) -> bool:
    """True when at most one letter is non-scalar: the flow then stays in the
    commutative algebra of that matrix (solved exactly by :func:`commuting_limit`)."""
    return len(random_letters(law)) <= 1


# ---------------------------------------------------------------------------
# commuting case: self-consistent per-eigenvalue ODE

def node_values(law: FreeInit, panels: int, per_panel: int) -> tuple[np.ndarray, np.ndarray]:
    K = len(law.specs)
    rl = random_letters(law)
    if rl:
        s = law.specs[rl[0]]
        x, w = mp_quadrature(float(s.a), float(s.b), panels, per_panel)
    else:
        x, w = np.zeros(1), np.ones(1)
    lam = np.empty((K, x.size))
    for k, s in enumerate(law.specs):
        if k in rl:
            lam[k] = x
        elif s.kind == "wishart":  # sigma = 0
            lam[k] = 0.0
        else:
            lam[k] = float(s.a)
    return lam, w


def _commuting_run(model: TiedModelLike, law: FreeInit, t_eval: np.ndarray,
                   words: Sequence[Sequence[int]], rtol: float, atol: float, panels: int,
                   per_panel: int, blowup: float) -> _NodeRun:
    lam0, w = node_values(law, panels, per_panel)
    return per_node_flow(model, lam0, w, t_eval, words, rtol=rtol, atol=atol, blowup=blowup)


def per_node_values(model: TiedModelLike, lam0: ArrayLike, w: ArrayLike, t_eval: ArrayLike, *,
                    rtol: float = 1e-12, atol: float = 1e-14, blowup: float = 1e100
                    ) -> _NodeRun:
    """The per-eigenvalue ODE on nodes ``lam0`` (``K x n``: the value of letter ``k`` on
    the eigenvector of node ``j``) with weights ``w``,

        d lambda_k/dt = -(2 sum_l Gamma_kl(q) lambda_l + gamma/2) lambda_k  (k trainable),
        q_kl = sum_j w_j lambda_k(j) lambda_l(j);

    returns ``(t, lam, status, message)``, ``lam`` of shape ``(K, n, n_t)``. Nodes of zero
    weight are tracers: they follow the flow without changing ``q``."""
    lam0_a = np.asarray(lam0, dtype=np.float64)
    w_a = np.asarray(w, dtype=np.float64)
    t_a = np.asarray(t_eval, dtype=np.float64)
    K = model.K
    tr = list(model.trainable)
    gfun, gp = model.gradient_function, model.gradient_parameters
    gout = np.empty(K * K)
    hg = model.weight_decay / 2.0
    n = w_a.size

    def full(y: np.ndarray) -> np.ndarray:
        lam: np.ndarray = lam0_a.copy()
        lam[tr] = y.reshape(len(tr), n)
        return lam

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        lam = full(y)
        q = (lam * w_a) @ lam.T
        gfun(np.ascontiguousarray(q.ravel()), gp, gout)
        G = gout.reshape(K, K)
        drive = G[tr] @ lam  # sum_l Gamma_kl lambda_l, for trainable k
        out: np.ndarray = (-(2.0 * drive + hg) * lam[tr]).ravel()
        return out

    def blow(t: float, y: np.ndarray) -> float:
        return float(blowup - np.abs(y).max())
    blow.terminal = True  # type: ignore[attr-defined]  # solve_ivp's event attribute

    if tr and t_a[-1] > 0:
        from scipy.integrate import solve_ivp  # here: importing scipy costs ~0.4 s at start-up

        from attndyn.numeric.attention.odesolve import deadline, budgeted, check_horizon_work
        if deadline() is None:  # no time limit: refuse a horizon of unbounded work
            check_horizon_work(rhs, lam0_a[tr].ravel(), float(t_a[-1]), "DOP853",
                               "limit flow")
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite: judged below
            sol = solve_ivp(budgeted(rhs), (0.0, float(t_a[-1])), lam0_a[tr].ravel(),
                            method="DOP853",
                            t_eval=t_a, rtol=rtol, atol=atol, events=blow)
        # no output time reached: scipy leaves y and t as empty lists
        Y = np.asarray(sol.y, dtype=np.float64).reshape(len(tr) * n, -1)
        ts, st, msg = np.asarray(sol.t, dtype=np.float64), sol.status, sol.message
        good = np.all(np.isfinite(Y), axis=0)
        n_ok = int(np.argmin(good)) if not good.all() else good.size
        Y, ts = Y[:, :n_ok], ts[:n_ok]
        status = 0 if (st == 0 and n_ok == t_a.size) else (-3 if st == 1 or n_ok < ts.size else -1)
        message = "success" if status == 0 else f"stopped at t = {ts[-1] if ts.size else 0:.4g}: {msg}"
    else:
        Y = np.repeat(lam0_a[tr].ravel()[:, None], t_a.size, axis=1)
        ts, status, message = t_a.copy(), 0, "success"
    lam = np.repeat(lam0_a[:, :, None], ts.size, axis=2)
    lam[tr] = Y.reshape(len(tr), n, ts.size)
    return ts, lam, status, message


def per_node_flow(model: TiedModelLike, lam0: ArrayLike, w: ArrayLike, t_eval: ArrayLike,
                  words: Sequence[Sequence[int]], *, rtol: float = 1e-12, atol: float = 1e-14,
                  blowup: float = 1e100) -> _NodeRun:
    """The traces ``mu_w = sum_j w_j prod_i lambda_{w_i}(j)`` of :func:`per_node_values`:
    returns ``(t, traces, status, message)``. With equal weights ``1/n`` it is the tied
    matrix flow of the diagonal matrices ``diag(lam0[k])``."""
    w_a = np.asarray(w, dtype=np.float64)
    ts, lam, status, message = per_node_values(model, lam0, w_a, t_eval, rtol=rtol, atol=atol,
                                               blowup=blowup)
    out = np.empty((len(words), ts.size))
    for j in range(ts.size):
        for i, wd in enumerate(words):
            prod = np.ones(w_a.size)
            for a in wd:
                prod = prod * lam[a, :, j]
            out[i, j] = prod @ w_a
    return ts, out, status, message


def commuting_limit(model: TiedModelLike, law: FreeInit, t_eval: ArrayLike, *, order: int = 2,
                    words: Sequence[Sequence[int]] | None = None, rtol: float = 1e-12,
                    atol: float = 1e-14, panels: int = 48, per_panel: int = 20,
                    blowup: float = 1e100) -> LimitTrajectory:
    """Exact ``d -> infinity`` solution when at most one letter of ``law`` is
    non-scalar (see the module docstring): the self-consistent per-eigenvalue
    ODE on a Marchenko-Pastur quadrature. The error estimate is the difference
    from a rule with half the nodes per panel, plus the integrator tolerance."""
    t_eval = check_t_eval(t_eval)
    law = check_law(model, law)
    if not is_commuting(law):
        raise ValueError("commuting_limit needs at most one non-scalar letter in the law")
    words = _words(model, order, words)
    ts, out, status, msg = _commuting_run(model, law, t_eval, words, rtol, atol, panels,
                                          per_panel, blowup)
    err = np.full(out.shape, np.nan)
    if status == 0:
        ts2, out2, st2, _ = _commuting_run(model, law, t_eval, words, rtol, atol, panels,
                                           max(2, per_panel // 2), blowup)
        if st2 == 0:
            err = np.abs(out - out2) + 10 * rtol * np.maximum(1.0, np.abs(out))
    message = (f"success: exact commuting-case limit (per-eigenvalue ODE on "
               f"{panels}x{per_panel} Marchenko-Pastur nodes), max error estimate "
               f"{np.nanmax(err) if err.size else 0.0:.2g}") if status == 0 else \
        f"commuting limit failed: {msg}"
    params = model.params_dict()
    params.update({"method": "commuting", "law": law_record(law), "rtol": rtol, "atol": atol,
                   "panels": panels, "per_panel": per_panel})
    return LimitTrajectory(t=ts, y=out, names=[word_label(w, model.K) for w in words],
                           words=[tuple(w) for w in words], kind="limit", params=params,
                           status=status, message=message,
                           diagnostics={"error": err, "method": "commuting",
                                        "order_in_1_over_d": None})


# ---------------------------------------------------------------------------
# one trainable student and one random teacher: exact, by free subordination

def _free_structure(model: TiedModelLike, law: FreeInit) -> tuple[int, int] | None:
    """``(student, teacher)`` when the free solver applies: exactly one trainable letter
    (Wishart), exactly one other non-scalar letter (a fixed Wishart teacher), the rest
    scalar; else ``None``."""
    rl = random_letters(law)
    tr = list(model.trainable)
    if len(tr) != 1 or len(rl) != 2 or tr[0] not in rl:
        return None
    teacher = [k for k in rl if k != tr[0]][0]
    return tr[0], teacher


class _BlowUp(Exception):
    pass


class _StepCap(Exception):
    pass


def _free_system(model: TiedModelLike, law: FreeInit, panels: int, per_panel: int, blowup: float,
                 max_nfev: int) -> tuple[_Rhs, _QMat, _Event, dict[str, Any], float, int]:
    """The free solver's right-hand side on ``(B, N, psi)``: ``(rhs, qmat, blow, state,
    omega0, n_mu)``; ``qmat(y)`` gives the overlaps and traces, ``state["omega"]`` the warm
    start of the subordination solve (``omega0`` resets it)."""
    from attndyn.kernels.subordination import subordination_solve_log

    K = model.K
    st = _free_structure(model, law)
    assert st is not None  # the callers checked it
    s0, te = st
    x, wx = mp_quadrature(*_spec_params(law.specs[s0]), panels, per_panel)
    mu, wm = mp_quadrature(*_spec_params(law.specs[te]), panels, per_panel)
    scal = {k: float(s.a) if s.kind == "scalar" else 0.0 for k, s in enumerate(law.specs)
            if k not in (s0, te)}
    tT, qTT = float(wm @ mu), float(wm @ mu ** 2)
    gfun, gp = model.gradient_function, model.gradient_parameters
    gout = np.empty(K * K)
    quarter_gamma = model.weight_decay / 4.0
    omega0 = -1.0 / max(float(wx @ x), 1e-300)
    state: dict[str, Any] = {"omega": omega0, "nfev": 0}

    def solve(psi: np.ndarray, logg: np.ndarray) -> tuple[float, float, float]:
        """Subordination at z = 0: omega with G_Y(omega) = G_X(1/G_Y(omega) - omega), and
        the traces (compiled: attndyn.kernels.subordination), phi = expm1(psi)."""
        om, t0, q00, q01 = subordination_solve_log(psi, logg, mu, wm, x, wx, state["omega"])
        state["omega"] = om
        return t0, q00, q01

    def qmat(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # the state carries psi = log1p(phi) and the solve takes log g: phi grows like
        # exp(2 |B| mu) and passed the blow-up bound (then double precision) near t = 14
        B, N, psi = y[0], y[1], y[2:]
        g = -2.0 * (B * mu + N)  # log g
        t0, q00, q01 = solve(psi, g)
        q = np.zeros((K, K))
        tv = np.zeros(K)
        tv[s0], tv[te] = t0, tT
        q[s0, s0], q[te, te], q[s0, te] = q00, qTT, q01
        q[te, s0] = q01
        for k, c in scal.items():
            tv[k] = c
        for k, c in scal.items():  # Tr(c I S_l)/d = c t_l
            for l in range(K):
                q[k, l] = q[l, k] = c * tv[l]
        return q, tv, g

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        state["nfev"] += 1
        if state["nfev"] > max_nfev:  # near a finite-time singularity the steps shrink
            raise _StepCap(float(t))
        q, tv, g = qmat(y)
        if not np.all(np.abs(q) < blowup):  # the traces blow up while (B, N, phi) stay finite
            raise _BlowUp(float(t))
        gfun(np.ascontiguousarray(q.ravel()), gp, gout)
        G = gout.reshape(K, K)
        a = 2.0 * G[s0, s0]
        b = G[s0, te]
        n = quarter_gamma + sum(G[s0, k] * c for k, c in scal.items())
        out = np.empty_like(y)
        out[0], out[1] = b, n
        out[2:] = a * np.exp(g - y[2:])  # d psi/dt = a g / (1 + phi)
        return out

    def blow(t: float, y: np.ndarray) -> float:
        return float(blowup - np.abs(y).max())
    blow.terminal = True  # type: ignore[attr-defined]  # solve_ivp's event attribute
    return rhs, qmat, blow, state, omega0, mu.size


def _free_segments(rhs: _Rhs, y0: np.ndarray, t_eval: np.ndarray, rtol: float, atol: float,
                   blow: _Event, blowup: float, max_nfev: int
                   ) -> tuple[list[np.ndarray], list[float], int, str]:
    """Integrate the free solver segment by segment between output times, so that a failure
    keeps what came before: ``(Ys, ts, status, message)``."""
    status, message = 0, "success"
    from scipy.integrate import solve_ivp

    from attndyn.numeric.attention.odesolve import deadline, budgeted, check_horizon_work
    if deadline() is None and t_eval[-1] > 0:  # no time limit: refuse unbounded work
        check_horizon_work(rhs, y0, float(t_eval[-1]), "DOP853", "limit flow")
    rhs = budgeted(rhs)
    Ys: list[np.ndarray] = []
    ts: list[float] = []
    y, tcur = y0, 0.0
    try:
        for t_out in t_eval:
            if t_out > tcur:
                sol = solve_ivp(rhs, (tcur, float(t_out)), y, method="DOP853", rtol=rtol,
                                atol=atol, events=blow)
                if sol.status != 0 or not np.all(np.isfinite(sol.y[:, -1])):
                    status = -3 if sol.status == 1 else -1
                    message = f"stopped at t = {sol.t[-1]:.4g}: {sol.message}"
                    break
                y, tcur = sol.y[:, -1], float(t_out)
            Ys.append(np.array(y))
            ts.append(float(t_out))
    except _StepCap as exc:
        status, message = -2, (f"more than {max_nfev} right-hand-side evaluations by "
                               f"t = {exc.args[0]:.4g} (a finite-time singularity?)")
    except _BlowUp as exc:
        status, message = -3, f"the overlaps q exceeded blowup = {blowup:g} at t = {exc.args[0]:.4g}"
    except (FloatingPointError, ValueError, np.linalg.LinAlgError) as exc:
        status, message = -1, f"free solver failed: {exc}"
    return Ys, ts, status, message


def _free_run(model: TiedModelLike, law: FreeInit, t_eval: np.ndarray, rtol: float, atol: float,
              panels: int, per_panel: int, blowup: float, max_nfev: int | None = None
              ) -> tuple[np.ndarray, np.ndarray, int, str, list[tuple[int, ...]]]:
    """Self-consistent ODE of the free solver (module docstring of :func:`free_limit`).
    ``max_nfev``: default 1000 evaluations per unit of the horizon, at least 5000 (a smooth
    run on Fig. 4's law takes about 440 per unit; a fixed 5000 stopped it near t = 11)."""
    if max_nfev is None:
        max_nfev = max(5_000, int(1_000 * float(np.max(t_eval, initial=0.0))))
    rhs, qmat, blow, state, omega0, n_mu = _free_system(model, law, panels, per_panel, blowup,
                                                        max_nfev)
    words = [w for w in canonical_words(2, model.alphabet)]
    y0 = np.concatenate([[0.0, 0.0], np.zeros(n_mu)])
    Ys, t_done, status, message = _free_segments(rhs, y0, t_eval, rtol, atol, blow, blowup,
                                                 max_nfev)
    state["omega"] = omega0
    out = np.empty((len(words), len(t_done)))
    for j, Y in enumerate(Ys):
        q, tv, _ = qmat(Y)
        for i, wd in enumerate(words):
            out[i, j] = tv[wd[0]] if len(wd) == 1 else q[wd[0], wd[1]]
    ts = np.array(t_done, dtype=float)
    return ts, out, status, message, words


def free_limit(model: TiedModelLike, law: FreeInit, t_eval: ArrayLike, *, rtol: float = 1e-11,
               atol: float = 1e-13,
               panels: int = 48, per_panel: int = 20, blowup: float = 1e100) -> LimitTrajectory:
    """Exact ``d -> infinity`` solution for one trainable Wishart student ``S`` and one
    fixed Wishart teacher ``T`` (free from it), other letters scalar, any loss.

    With ``a = 2 Gamma_00``, ``b = Gamma_0T`` and ``n = gamma/4 + sum_scalar Gamma_0l c_l``
    the flow is ``S' = -a S^2 - b (T S + S T) - 2 n S``, and ``X = S^{-1}`` solves the
    *linear* equation ``X' = a + (bT + n) X + X (bT + n)`` (the Riccati structure of
    paper 003, eq. 343). So ``S(t) = U^{-1} (X_0 + phi(T))^{-1} U^{-1}`` with
    ``U = exp(B T + N)``, ``B = int b``, ``N = int n`` and
    ``phi(t, mu) = int_0^t a(s) exp(-2 (B(s) mu + N(s))) ds``: functions of ``T``
    and the initial ``X_0 = S(0)^{-1}``, free from ``T``. The traces follow from
    free subordination at ``z = 0``: ``E_T[(X_0 + Phi)^{-1}] = (Phi - omega)^{-1}``
    with ``omega`` the root of ``G_Y(omega) = G_X(1/G_Y(omega) - omega)``
    (``G_Y(w) = int dnu(mu)/(w - phi(mu))``, ``G_X(w) = int x drho(x)/(w x - 1)``), so
    with ``g = exp(-2(B mu + N))``

        t_S = int g/(phi - omega) dnu,   q_ST = int mu g/(phi - omega) dnu,
        q_SS = int g (g - omega')/(phi - omega)^2 dnu,

    ``omega'`` the derivative of ``omega`` when ``phi`` moves along ``g`` (from
    ``Tr(R g R g) = -d/de Tr(g (X_0 + Phi + e g)^{-1})``). The ODE for ``(B, N, phi)``
    on the teacher's quadrature nodes closes through ``q``. Words up to length 2;
    the error estimate is the difference from a rule with half the nodes per panel.
    """
    t_eval = check_t_eval(t_eval)
    law = check_law(model, law)
    if _free_structure(model, law) is None:
        raise ValueError("free_limit needs one trainable Wishart letter, one fixed Wishart "
                         "teacher and scalar letters otherwise")
    ts, out, status, msg, words = _free_run(model, law, t_eval, rtol, atol, panels, per_panel,
                                            blowup)
    err = np.full(out.shape, np.nan)
    if status == 0:
        _, out2, st2, _, _ = _free_run(model, law, t_eval, rtol, atol, panels,
                                       max(2, per_panel // 2), blowup)
        if st2 == 0:
            err = np.abs(out - out2) + 10 * rtol * np.maximum(1.0, np.abs(out))
    message = (f"success: exact free limit (Riccati inversion and subordination on "
               f"{panels}x{per_panel} Marchenko-Pastur nodes), max error estimate "
               f"{np.nanmax(err) if err.size else 0.0:.2g}") if status == 0 else \
        f"free limit failed: {msg}"
    params = model.params_dict()
    params.update({"method": "free", "law": law_record(law), "rtol": rtol, "atol": atol,
                   "panels": panels, "per_panel": per_panel})
    return LimitTrajectory(t=ts, y=out, names=[word_label(w, model.K) for w in words],
                           words=[tuple(w) for w in words], kind="limit", params=params,
                           status=status, message=message,
                           diagnostics={"error": err, "method": "free",
                                        "order_in_1_over_d": None})


# ---------------------------------------------------------------------------
# non-commuting case: deterministic equivalents, rotations, Richardson

def deterministic_equivalents(model: TiedModelLike, law: FreeInit, d: int, rng: RngLike
                              ) -> list[np.ndarray]:
    """``K`` symmetric ``d x d`` matrices with the limiting spectra (bin means of
    the law) and independent Haar rotations between the random letters. A
    fixed (teacher) random letter, when there is one, is left diagonal (the
    fast flow then needs no rotation of its own)."""
    law = check_law(model, law)
    gen = np.random.default_rng(rng)
    rl = random_letters(law)
    fixed_rl = [k for k in rl if k not in model.trainable]
    base = fixed_rl[0] if fixed_rl else (rl[0] if rl else None)
    mats: list[np.ndarray] = []
    for k, s in enumerate(law.specs):
        if s.kind == "scalar":
            mats.append(float(s.a) * np.eye(d))
            continue
        sigma, a = _spec_params(s)
        lam = mp_bin_means(sigma, a, d)
        if k == base:
            mats.append(np.diag(lam))
        else:
            lam = lam[gen.permutation(d)]
            Q = haar_orthogonal(d, gen)
            S = (Q * lam) @ Q.T
            mats.append((S + S.T) / 2)
    return mats


def _equivalents_run(model: TiedModelLike, law: FreeInit, t_eval: np.ndarray,
                     words: Sequence[Sequence[int]], sizes: Sequence[int], rotations: int,
                     seed: RngLike, rtol: float, atol: float, blowup: float, max_dim: int
                     ) -> tuple[tuple[np.ndarray, np.ndarray, list[np.ndarray]] | None, str, int]:
    from attndyn.numeric.attention.tied.flow import tied_fast_flow
    for d in sizes:
        if d > max_dim:
            raise ValueError(f"sizes: d = {d} exceeds max_dim = {max_dim} "
                             f"(a {d} x {d} flow needs about {16 * d * d * 14 / 2**30:.1f} GiB)")
    ss = resolve_seed(seed)
    kids = ss.spawn(len(sizes))
    means: list[np.ndarray] = []
    ses: list[np.ndarray] = []
    per_size: list[np.ndarray] = []
    nfev = 0
    for d, kid in zip(sizes, kids):
        run_list: list[np.ndarray] = []
        for r_ss in kid.spawn(rotations):
            mats = deterministic_equivalents(model, law, d, np.random.default_rng(r_ss))
            fo = tied_fast_flow(model, mats, t_eval, words, rtol=rtol, atol=atol, blowup=blowup)
            nfev += fo.nfev
            if fo.status == -4:  # the enclosing time_budget is spent
                from attndyn.numeric.attention.odesolve import deadline, TimeLimitReached
                raise TimeLimitReached(deadline()[1])
            if fo.status != 0:
                return None, f"flow at d = {d} failed: {fo.message}", nfev
            run_list.append(fo.traces)
        runs = np.array(run_list)
        means.append(runs.mean(axis=0))
        ses.append(runs.std(axis=0, ddof=1) / math.sqrt(rotations) if rotations > 1
                   else np.zeros_like(runs[0]))
        per_size.append(runs)
    return (np.array(means), np.array(ses), per_size), "", nfev


def _words(model: TiedModelLike, order: int, words: Sequence[Sequence[int]] | None
           ) -> list[tuple[int, ...]]:
    if words is None:
        return canonical_words(check_order(order), model.alphabet)
    return [model.alphabet.check_word(w, "words") for w in words]


def law_record(law: FreeInit) -> list[dict[str, Any]]:
    return [{"kind": s.kind, "a": float(s.a), "b": None if s.b is None else float(s.b)}
            for s in law.specs]


def limit_flow(model: AttentionModel, law: Any, t_eval: ArrayLike,
               sizes: Sequence[int] | None = None, rtol: float = 1e-9, atol: float = 1e-12, *,
               order: int = 2, words: Sequence[Sequence[int]] | None = None,
               rotations: int = 2, seed: RngLike = 0, method: str = "auto",
               panels: int = 48, per_panel: int = 20, blowup: float = 1e100,
               max_dim: int = 4096, raise_on_failure: bool = False,
               time_limit: float | None = None) -> LimitTrajectory:
    """The ``d -> infinity`` trajectory of ``model`` from the initial law ``law``, through the
    model's theory (``model.theory.limit_flow``): tied models run :func:`tied_limit_flow`
    (below, every option), untied ones
    :func:`attndyn.numeric.attention.untied.limit.limit_flow` (its laws and methods;
    ``panels``, ``per_panel`` and ``blowup`` do not apply there). ``time_limit``:
    wall-clock seconds (``time.monotonic``) for the whole computation, handed to every
    solver through :func:`attndyn.numeric.attention.odesolve.time_budget`; reaching it
    gives status -4. Without it, a horizon whose estimated work is unbounded (``1e300``)
    is refused with one line.

    The tied limit is the infinite hierarchy of Theorem 2 (paper 003, eq. 11),
    ``dmu_alpha/dt = -sum_{i: k_i trainable} sum_l [grad Phi(q)]_{k_i l}
    (mu_{..., l, k_i, ...} + mu_{..., k_i, l, ...}) - (gamma/2) |alpha|_K mu_alpha``, started
    from the moments of the law and solved without truncation: per eigenvalue node for a
    commuting law, by free subordination or Richardson-extrapolated finite-size equivalents
    otherwise (``method``).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> import numpy as np
    >>> from attndyn.symbolic.initial import FreeInit, scalar, wishart
    >>> law = FreeInit([wishart(0.5), scalar(1)])   # S_1(0) Wishart, teacher S_2 = I
    >>> r = attndyn.limit_flow(model, law, [0.0, 0.1, 0.2])
    >>> r.status, r.names[:3]
    (0, ['mu_1', 'mu_2', 'q_11'])
    """
    from attndyn.numeric.attention.odesolve import time_budget
    with time_budget(time_limit):
        return check_model(model).theory.limit_flow(
            law, t_eval, sizes, rtol, atol, order=order, words=words, rotations=rotations,
            seed=seed, method=method, panels=panels, per_panel=per_panel, blowup=blowup,
            max_dim=max_dim, raise_on_failure=raise_on_failure)


def tied_limit_flow(model: TiedModelLike, law: Any, t_eval: ArrayLike,
                    sizes: Sequence[int] | None = None, rtol: float = 1e-9,
                    atol: float = 1e-12, *, order: int = 2,
                    words: Sequence[Sequence[int]] | None = None, rotations: int = 2,
                    seed: RngLike = 0, method: str = "auto", panels: int = 48,
                    per_panel: int = 20, blowup: float = 1e100, max_dim: int = 4096,
                    raise_on_failure: bool = False,
                    time_limit: float | None = None) -> LimitTrajectory:
    """The ``d -> infinity`` trajectory of the tied hierarchy (eq. 11) from a law.

    An :class:`~attndyn.UntiedModel` goes to
    :func:`attndyn.numeric.attention.untied.limit.limit_flow` (its laws and methods) when
    called through :func:`limit_flow`.

    Parameters
    ----------
    model : TiedModel
    law : FreeInit
        Independent Wishart (``wishart(sigma, aspect)``) and scalar
        (``scalar(c)``) initialisations, one per index.
    t_eval : array
        Output times (ODE time ``t = 4 eta n / d``).
    sizes : sequence of int, optional
        Sizes of the deterministic equivalents (non-commuting case), default
        ``(200, 400)``; ignored in the commuting case.
    rtol, atol : float
        DOP853 tolerances of each flow (the commuting solver uses at most
        ``1e-12``).
    order, words :
        Report every canonical word up to ``order`` (default 2: ``t_k``,
        ``q_kl``), or the given ``words``.
    rotations : int
        Independent Haar rotations averaged at each size (``>= 2`` gives the
        statistical part of the error estimate).
    seed :
        Seed of the rotations (``SeedSequence``): same seed, same numbers.
    method : {"auto", "commuting", "free", "equivalents"}
        ``"auto"`` picks ``"commuting"`` when at most one letter is non-scalar
        (exact), else ``"free"`` for one trainable Wishart letter and one fixed
        Wishart teacher when only words of length <= 2 are asked for (exact),
        else the deterministic equivalents.

    Returns
    -------
    LimitTrajectory
        ``kind="limit"``, ``.moment(word)``, ``.error`` (name -> array over
        time), ``.status``, ``.message``; ``diagnostics`` holds the method, the
        per-size means, the measured order of the ``1/d`` error
        (``order_in_1_over_d``, from three or more sizes).
    time_limit : float, optional
        Wall-clock seconds (``time.monotonic``) for the whole computation (an enclosing
        :func:`~attndyn.numeric.attention.odesolve.time_budget` also applies); reaching it
        gives status -4 and no outputs.
    """
    from attndyn.numeric.attention.odesolve import TimeLimitReached, time_budget
    with time_budget(time_limit):
        try:
            return _tied_limit_flow(model, law, t_eval, sizes=sizes, rtol=rtol, atol=atol,
                                    order=order, words=words, rotations=rotations, seed=seed,
                                    method=method, panels=panels, per_panel=per_panel,
                                    blowup=blowup, max_dim=max_dim,
                                    raise_on_failure=raise_on_failure)
        except TimeLimitReached as exc:
            wl = _words(model, order, words)
            res = LimitTrajectory(
                t=np.zeros(0), y=np.zeros((len(wl), 0)),
                names=[word_label(w, model.K) for w in wl], words=[tuple(w) for w in wl],
                kind="limit", params=model.params_dict(), seed=seed_rec(seed), status=-4,
                message=f"limit flow: wall-clock limit of {exc.limit:.3g} s reached: raise "
                        "time_limit or shorten the horizon",
                diagnostics={"error": np.zeros((len(wl), 0)), "method": method})
            if raise_on_failure:
                raise IntegrationError(res.message) from None
            return res


def _check_limit_args(model: TiedModelLike, law: Any, t_eval: ArrayLike, method: str, rtol: float,
                      atol: float, rotations: int, seed: RngLike, panels: int, per_panel: int,
                      max_dim: int, blowup: float
                      ) -> tuple[np.ndarray, FreeInit, float, float, int, int, int, int, float]:
    """The validated arguments of :func:`tied_limit_flow` (one-line errors naming each)."""
    t_eval = check_t_eval(t_eval)
    law = check_law(model, law)
    if method not in ("auto", "commuting", "free", "equivalents"):
        raise ValueError(f"method must be 'auto', 'commuting', 'free' or 'equivalents', "
                         f"got {method!r}")
    rtol = check_pos_float(rtol, "rtol")
    atol = check_pos_float(atol, "atol")
    rotations = check_int(rotations, "rotations", 1)
    if not isinstance(seed, (np.random.SeedSequence, np.random.Generator)):
        try:
            np.random.SeedSequence(seed)
        except (TypeError, ValueError):
            raise TypeError(f"seed must be an int >= 0, a sequence of them or a SeedSequence, "
                            f"got {seed!r}") from None
    panels = check_int(panels, "panels", 2, 60)
    per_panel = check_int(per_panel, "per_panel", 2, 200)
    max_dim = check_int(max_dim, "max_dim", 2)
    blowup = check_pos_float(blowup, "blowup")
    return t_eval, law, rtol, atol, rotations, panels, per_panel, max_dim, blowup


def _free_rows(model: TiedModelLike, law: FreeInit, t_eval: np.ndarray, order: int,
               words: Sequence[Sequence[int]] | None, rtol: float, atol: float, panels: int,
               per_panel: int, blowup: float) -> LimitTrajectory:
    """``method="free"``: the exact rows up to length 2, in the order asked for."""
    wl = _words(model, order, words)
    if any(len(w) > 2 for w in wl):
        raise ValueError("method='free' reports words up to length 2 (t_k, q_kl); use "
                         "method='equivalents' for longer words")
    res = free_limit(model, law, t_eval, rtol=min(rtol, 1e-11), atol=min(atol, 1e-13),
                     panels=panels, per_panel=per_panel, blowup=blowup)
    if res.status == 0 and words is not None:  # the rows asked for, in their order
        idx = [res._word_index(w) for w in wl]
        res.y, res.words = res.y[idx], [tuple(w) for w in wl]
        res.names = [word_label(w, model.K) for w in wl]
        res.diagnostics["error"] = res.diagnostics["error"][idx]
        res._wmap = {tuple(x): i for i, x in enumerate(res.words)}
    return res


def _equivalents_limit(model: TiedModelLike, law: FreeInit, t_eval: np.ndarray, order: int,
                       words: Sequence[Sequence[int]] | None, sizes: Sequence[int] | None,
                       rotations: int, seed: RngLike, rtol: float, atol: float, blowup: float,
                       max_dim: int, raise_on_failure: bool) -> LimitTrajectory:
    """``method="equivalents"``: deterministic equivalents at ``sizes``, Richardson in ``d``."""
    words = _words(model, order, words)
    sizes = check_sizes(sizes)
    out, msg, nfev = _equivalents_run(model, law, t_eval, words, sizes, int(rotations), seed,
                                      rtol, atol, blowup, max_dim)
    names = [word_label(w, model.K) for w in words]
    params = model.params_dict()
    params.update({"method": "equivalents", "law": law_record(law), "sizes": sizes,
                   "rotations": int(rotations), "rtol": rtol, "atol": atol})
    if out is None:
        res = LimitTrajectory(t=t_eval[:0].copy(), y=np.zeros((len(words), 0)), names=names,
                              words=[tuple(w) for w in words], kind="limit", params=params,
                              seed=seed_rec(seed), status=-3, message=f"limit flow failed: {msg}",
                              diagnostics={"error": np.zeros((len(words), 0)),
                                           "method": "equivalents"})
        if raise_on_failure:
            raise IntegrationError(res.message)
        return res
    means, ses, per_size = out
    Y, err, stat, sys, wts = extrapolate(means, ses, sizes, int(rotations))
    # measured order of the finite-size error from successive differences (three or more
    # sizes; with few rotations the rotation noise dominates it)
    p_meas = None
    if len(sizes) >= 3:
        dif = np.abs(np.diff(means, axis=0)).max(axis=(1, 2))
        if np.all(dif > 0):
            mid = np.sqrt(np.asarray(sizes[:-1], float) * np.asarray(sizes[1:], float))
            p_meas = float(-np.polyfit(np.log(mid), np.log(dif), 1)[0])
    diag = {"error": err, "error_statistical": stat, "error_extrapolation": sys,
            "method": "equivalents", "sizes": list(sizes), "means": means, "runs": per_size,
            "richardson_weights": wts, "nfev": nfev, "order_in_1_over_d": p_meas}
    message = (f"success: d -> infinity by Richardson over sizes {sizes} "
               f"({rotations} Haar rotation(s) each), max error estimate {err.max():.2g}"
               + ("" if rotations > 1 else "; one rotation per size: the error estimate "
                  "has no statistical part (use rotations >= 2)"))
    res = LimitTrajectory(t=t_eval.copy(), y=Y, names=names, words=[tuple(w) for w in words],
                          kind="limit", params=params, seed=seed_rec(seed), status=0,
                          message=message, diagnostics=diag)
    return res


def _tied_limit_flow(model: TiedModelLike, law: Any, t_eval: ArrayLike, *,
                     sizes: Sequence[int] | None, rtol: float, atol: float, order: int,
                     words: Sequence[Sequence[int]] | None, rotations: int, seed: RngLike,
                     method: str, panels: int, per_panel: int, blowup: float, max_dim: int,
                     raise_on_failure: bool) -> LimitTrajectory:
    """Validate, choose the solver (``"auto"``: commuting, free, equivalents or free rows
    joined with equivalents for the longer words) and run it."""
    t_eval, law, rtol, atol, rotations, panels, per_panel, max_dim, blowup = _check_limit_args(
        model, law, t_eval, method, rtol, atol, rotations, seed, panels, per_panel, max_dim,
        blowup)
    if method == "auto":
        wl = _words(model, order, words)
        short = all(len(w) <= 2 for w in wl)
        free_ok = _free_structure(model, law) is not None
        if free_ok and not short and not is_commuting(law):
            # exact rows where the free solver has them, equivalents for the longer words
            m = check_model(model)  # a model: it came through limit_flow or the theory
            a = limit_flow(m, law, t_eval, rtol=rtol, atol=atol,
                           words=[w for w in wl if len(w) <= 2], method="free", panels=panels,
                           per_panel=per_panel, blowup=blowup)
            b = limit_flow(m, law, t_eval, sizes, rtol=rtol, atol=atol,
                           words=[w for w in wl if len(w) > 2], method="equivalents",
                           rotations=rotations, seed=seed, panels=panels, per_panel=per_panel,
                           blowup=blowup, max_dim=max_dim)
            res = _join_rows(model, wl, a, b)
            if raise_on_failure and res.status != 0:
                raise IntegrationError(res.message)
            return res
        method = ("commuting" if is_commuting(law) else
                  "free" if short and free_ok else "equivalents")
    if method in ("free", "commuting"):
        if method == "free":
            res = _free_rows(model, law, t_eval, order, words, rtol, atol, panels, per_panel,
                             blowup)
        else:
            res = commuting_limit(model, law, t_eval, order=order, words=words,
                                  rtol=min(rtol, 1e-12), atol=min(atol, 1e-14), panels=panels,
                                  per_panel=per_panel, blowup=blowup)
        if raise_on_failure and res.status != 0:
            raise IntegrationError(res.message)
        return res
    return _equivalents_limit(model, law, t_eval, order, words, sizes, rotations, seed, rtol,
                              atol, blowup, max_dim, raise_on_failure)


def _join_rows(model: TiedModelLike, words: Sequence[Sequence[int]], a: LimitTrajectory,
               b: LimitTrajectory) -> LimitTrajectory:
    """Rows of ``words`` from ``a`` (free, words of length <= 2) and ``b`` (equivalents),
    with the method of each row in ``diagnostics["row_method"]``."""
    if a.status != 0 or b.status != 0:
        bad = a if a.status != 0 else b
        return bad
    n_t = min(a.t.size, b.t.size)
    y = np.empty((len(words), n_t))
    err = np.empty_like(y)
    rm = []
    ea, eb = np.asarray(a.diagnostics["error"]), np.asarray(b.diagnostics["error"])
    for i, w in enumerate(words):
        src, e, name = (a, ea, "free") if len(w) <= 2 else (b, eb, "equivalents")
        j = src._word_index(w)
        y[i], err[i] = src.y[j, :n_t], e[j, :n_t]
        rm.append(name)
    short = [i for i, m in enumerate(rm) if m == "free"]
    diag = dict(b.diagnostics)
    diag.update({"error": err, "method": "free+equivalents", "row_method": rm})
    msg = (f"success: words of length <= 2 exact (free limit, error <= "
           f"{err[short].max() if short else 0.0:.2g}); longer words from deterministic "
           f"equivalents, sizes {b.params.get('sizes')} (error <= {err.max():.2g})")
    params = dict(b.params)
    params["method"] = "free+equivalents"
    return LimitTrajectory(t=a.t[:n_t].copy(), y=y, names=[word_label(w, model.K) for w in words],
                           words=[tuple(w) for w in words], kind="limit", params=params,
                           seed=b.seed, status=0, message=msg, diagnostics=diag)


# ---------------------------------------------------------------------------
# TiedHierarchy.integrate(method=...): flow, limit and auto


def law_of_factors(model: object, factors: Sequence[ArrayLike]) -> FreeInit:
    """The Wishart law of Gaussian factors ``W_k`` (``d x d_k``): ``wishart(sigma_k, d_k/d)``
    with ``sigma_k^2 = t_k d / d_k`` from the measured trace ``t_k = |W_k|^2 / d``. It is
    the law the factors were drawn from when their entries are i.i.d. centred Gaussian
    (:func:`attndyn.numeric.gaussian_init`); for other factors it is only a moment match."""
    from attndyn.symbolic.initial import wishart
    specs = []
    for factor in factors:
        W = np.asarray(factor, float)
        d, r = W.shape
        t = float(np.sum(W * W)) / d
        specs.append(wishart(math.sqrt(t * d / r), r / d))
    return FreeInit(specs)


def limit_theory(model: AttentionModel, factors: Sequence[ArrayLike], t_eval: ArrayLike, *,
                 order: int = 2, law: FreeInit | None = None, **kwargs: Any
                 ) -> LimitTrajectory:
    """``compare(..., theory="limit")``: :func:`limit_flow` from ``law`` or, by default,
    from :func:`law_of_factors` of the SGD's initial factors."""
    given = law is not None
    the_law = law if law is not None else law_of_factors(model, factors)
    r = limit_flow(model, the_law, t_eval, order=order, **kwargs)
    r.message += f"; law {law_record(the_law)}" + ("" if given else " (from the initial factors)")
    return r
