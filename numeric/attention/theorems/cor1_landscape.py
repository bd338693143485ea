"""Corollary 1 (finite-dimensional landscape): the constrained minimum of ``Phi`` over the
feasible set ``Q`` of order parameters, against long gradient flows and SGD. Check ``cor1``.

Corollary 1 says that the limiting optimal population loss is ``inf_{Q in Q} R(Q)``: an
optimisation over finitely many order parameters, constrained to what matrices can
realise with the teachers held fixed. The sets, for one or more trainable indices and fixed
teachers whose own order parameters are given (closures of the realisable sets, every
matrix of extensive rank as Assumption 1 requires):

- **tied** (``S_k = W_k W_k^T``, centred forms, Corollary 5): ``q_kl = Tr(S_k S_l)/d`` is
  the Frobenius Gram matrix of PSD matrices, so ``q`` is PSD and entrywise ``>= 0``
  (``Tr(A B) >= 0`` for PSD ``A, B``). With one student and one teacher this is exactly
  the closure of what is realisable: ``q_11 >= 0, 0 <= q_12 <= sqrt(q_11 q_22)``
  (``S_1 = c S_2`` reaches the upper edge; a student concentrated on a vanishing
  fraction of the teacher's weakest directions approaches ``q_12 = 0``). With more indices
  "PSD and entrywise >= 0" (doubly non-negative) is an outer bound, so its minimum is a
  lower bound of the true infimum.
- **direct S** (general ``S_k``, appendix E): ``Psi_kl = Tr(S_k S_l)/d``,
  ``Omega_kl = Tr(S_k S_l^T)/d``. Writing ``S = A + B`` (symmetric + antisymmetric part),
  ``(Omega + Psi)/2`` is the Gram matrix of the ``A_k`` and ``(Omega - Psi)/2`` that of the
  ``B_k``: both PSD, and every such pair is realisable (the orthogonal complement of
  finitely many teachers is huge). ``t_k`` does not enter the centred potential.
- **untied** (``M_k = U_k V_k^T``, general matrices, section 4): ``m_k = Tr M_k/sqrt(d)``
  is free (``a I/sqrt(d)`` shifts it and changes no ``q`` in the limit),
  ``(q1 + q2)/2`` and ``(q1 - q2)/2`` are the Gram matrices of the symmetric and the
  antisymmetric parts: both PSD.

:func:`minimise` minimises ``Phi`` over such a set with :func:`scipy.optimize.minimize`
(SLSQP, the constraints as inequality constraints: every principal minor of each Gram
matrix that involves a trainable index is ``>= 0``; the tied entries ``q_kl >= 0`` as well),
from several feasible starts. The check ``cor1`` compares the minimum with the end point of
a long gradient flow (the finite-d matrix flow, exact for the hierarchy at that ``d``) and of
SGD at growing ``d``, for the tied linear and h2 teacher-student cases (the acceptance: 1e-6)
and the direct-S and untied analogues.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from attndyn.numeric.core.checks import CheckResult, register

__all__ = ["FeasibleSet", "feasible_set", "minimise", "LandscapeMinimum", "check_cor1",
           "COR1_BUDGETS"]


@dataclass
class FeasibleSet:
    """The feasible set ``Q`` of Corollary 1 for one parameterisation, the teachers fixed.

    ``symbols``: the potential's order-parameter symbols (SymPy); ``free``: which ones are
    optimised (they involve a trainable index); ``fixed``: the teachers' values of the
    others; ``grams``: per Gram matrix, a function ``values -> K x K`` matrix that must be
    PSD; ``nonneg``: indices of symbols that must be ``>= 0``; ``exact``: whether the set is
    the closure of the realisable set (``False``: an outer bound); ``text``: the set in
    words; ``layout``: how the Gram matrices are built (``model.theory.feasible.grams``);
    ``free_prefixes``: unconstrained order parameters (``model.theory.feasible.free``).

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> fs = feasible_set(model, {"q_22": 1.0})
        >>> isinstance(fs, FeasibleSet), fs.kind, fs.fixed
        (True, 'tied', {q_22: 1.0})
    """

    kind: str
    K: int
    trainable: tuple
    symbols: list
    free: np.ndarray
    fixed: dict
    grams: list
    nonneg: list
    exact: bool
    text: str
    scale: float = 1.0
    layout: tuple = ()
    free_prefixes: tuple = ()

    def values(self, x) -> np.ndarray:
        """All symbol values from the free ones ``x``."""
        v = np.empty(len(self.symbols))
        v[self.free] = x
        for i, s in enumerate(self.symbols):
            if not self.free[i]:
                v[i] = self.fixed[s]
        return v

    def constraints(self, v) -> np.ndarray:
        """Inequality constraints ``>= 0``: the principal minors of every Gram matrix that
        contain a trainable index, and the non-negative entries."""
        out = [v[i] for i in self.nonneg]
        tr = set(self.trainable)
        for g in self.grams:
            G = g(v)
            for r in range(1, self.K + 1):
                for idx in itertools.combinations(range(self.K), r):
                    if tr & set(idx):
                        out.append(float(np.linalg.det(G[np.ix_(idx, idx)])))
        return np.array(out)

    def violation(self, v) -> float:
        """Largest violation: ``max(0, -c)`` over the constraints and ``-lambda_min`` of the
        Gram matrices (a scale-aware measure)."""
        c = self.constraints(v)
        lam = [np.linalg.eigvalsh(g(v))[0] for g in self.grams]
        return float(max([0.0] + list(-c[:len(self.nonneg)]) + [-x for x in lam]))


def _sym_matrix(syms, index, K, prefix):
    """``K x K`` function of the symbol vector for the matrix named ``prefix``."""
    pos = {}
    for k in range(K):
        for l in range(K):
            name = f"{prefix}_{min(k, l) + 1}{max(k, l) + 1}"
            pos[(k, l)] = index[name]

    def f(v):
        return np.array([[v[pos[(k, l)]] for l in range(K)] for k in range(K)])
    return f


def feasible_set(model, teacher: dict) -> FeasibleSet:
    """The feasible set of ``model`` (a TiedModel, SModel or UntiedModel with a closed-form
    potential, indices ``<= 9``) with the teachers' order parameters ``teacher`` (symbol
    name -> value, e.g. ``{"q_22": 0.5}`` for a tied teacher; ``m_2``, ``q1_22``, ``q2_22``
    untied; ``Omega_22``, ``Psi_22`` direct S).

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> fs = feasible_set(model, {"q_22": 1.0})
        >>> [str(s) for s in fs.symbols], fs.free.tolist()
        (['q_11', 'q_12', 'q_22'], [True, True, False])
    """
    import sympy as sp

    pot = _potential(model)
    K, tr = model.K, tuple(model.trainable)
    if K > 9:
        raise ValueError("feasible_set handles K <= 9 indices")
    syms = sorted(pot.phi.free_symbols | set(_all_symbols(model, pot)), key=lambda s: s.name)
    names = [s.name for s in syms]
    index = {n: i for i, n in enumerate(names)}

    def involves_trainable(name):
        digits = name.rsplit("_", 1)[1]
        return any(int(c) - 1 in tr for c in digits)

    free = np.array([involves_trainable(n) for n in names])
    fixed = {}
    for s, n, f in zip(syms, names, free):
        if not f:
            if n not in teacher:
                raise ValueError(f"teacher must give the fixed order parameter {n} "
                                 f"(given: {sorted(teacher)})")
            fixed[s] = float(teacher[n])
    feas = model.theory.feasible
    layout = () if feas is None else tuple(feas.grams)
    if not layout:
        raise ValueError(f"feasible_set: no feasible set for a {type(model).__name__}")
    grams = [_gram(index, K, spec) for spec in layout]
    text = feas.text
    if feas.nonnegative:
        nonneg = [i for i, n in enumerate(names) if free[i]]
        # doubly non-negative 2 x 2 matrices are Frobenius Gram matrices of PSD matrices
        exact = len(tr) == 1 and K == 2
        text += ("; exact: 0 <= q_12 <= sqrt(q_11 q_22)" if exact else
                 "; an outer bound with more than one student or teacher")
    else:
        nonneg, exact = [], True
    scale = max([1.0] + [abs(v) for v in fixed.values()])
    _ = sp  # the symbols are SymPy's
    return FeasibleSet(model.kind, K, tr, syms, free, fixed, grams, nonneg, exact, text, scale,
                       layout, tuple(feas.free))


def _gram(index, K, spec):
    """``values -> K x K`` Gram matrix for one entry of ``model.theory.feasible.grams``:
    ``("q",)`` the matrix of the ``q_kl`` itself, ``("P", "R", s)`` ``(P + s R)/2``."""
    if len(spec) == 1:
        return _sym_matrix(None, index, K, spec[0])
    P = _sym_matrix(None, index, K, spec[0])
    R = _sym_matrix(None, index, K, spec[1])
    sgn = spec[2]
    return lambda v: (P(v) + sgn * R(v)) / 2


def _potential(model):
    """The closed-form potential of a model (``phi`` a SymPy expression)."""
    pot = model.theory.landscape_potential()
    if pot is None or not hasattr(pot, "phi"):
        raise ValueError("Corollary 1's minimisation needs a closed-form potential (this loss "
                         "takes the numeric route)")
    if getattr(pot, "params", ()):
        raise ValueError("Corollary 1's minimisation takes a potential without free parameters")
    return pot


def _all_symbols(model, pot):
    """Every order-parameter symbol of the potential (also those phi does not contain)."""
    if getattr(pot, "law", None) is None:   # a TiedPotential: its q matrix
        return [pot.q[k, l] for k in range(model.K) for l in range(k, model.K)]
    out = []
    for name, M in pot.law.order_parameters.items():
        if M.shape[1] == 1:
            out += [M[k, 0] for k in range(M.shape[0])]
        else:
            out += [M[k, l] for k in range(M.shape[0]) for l in range(k, M.shape[1])]
    return out


@dataclass
class LandscapeMinimum:
    """The constrained minimum of Corollary 1: ``phi``, the minimiser (symbol name -> value), the
    starts that converged, the constraint violation at the minimiser and the set.

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> res = minimise(model, {"q_22": 1.0}, starts=2, seed=0)
        >>> isinstance(res, LandscapeMinimum), res.n_starts, res.violation <= 1e-9
        (True, 2, True)
    """

    phi: float
    point: dict
    success: bool
    n_starts: int
    n_converged: int
    violation: float
    feasible: FeasibleSet = field(repr=False)
    message: str = ""


def _lambdas(fs: FeasibleSet, phi):
    import sympy as sp
    f = sp.lambdify(fs.symbols, phi, "numpy")
    grads = [sp.diff(phi, s) for s, fr in zip(fs.symbols, fs.free) if fr]
    g = sp.lambdify(fs.symbols, grads, "numpy")
    return (lambda v: float(f(*v))), (lambda v: np.array(g(*v), dtype=float))


def _val(v, names, prefixes, k, l):
    a, b = min(k, l) + 1, max(k, l) + 1
    if len(prefixes) == 1:
        return v[names.index(f"{prefixes[0]}_{a}{b}")]
    p, r, sgn = prefixes
    return (v[names.index(f"{p}_{a}{b}")] + sgn * v[names.index(f"{r}_{a}{b}")]) / 2


def _draw_start(fs: FeasibleSet, rng) -> np.ndarray:
    """A random feasible point: per Gram matrix, the teachers' block completed by random
    non-negative combinations of its factor and of fresh directions (non-negative
    entries, so the tied ``q_kl >= 0`` hold too)."""
    K, tr = fs.K, fs.trainable
    names = [s.name for s in fs.symbols]
    v = np.zeros(len(fs.symbols))
    for i, s in enumerate(fs.symbols):
        if not fs.free[i]:
            v[i] = fs.fixed[s]
    teach = [k for k in range(K) if k not in tr]
    grams = []
    for prefixes in fs.layout:
        tg = np.array([[_val(v, names, prefixes, k, l) for l in teach] for k in teach])
        n = len(teach) + len(tr) + 1
        vecs = np.zeros((K, n))
        if teach:
            # a non-negative factor of the teachers' block when it has one (K = 2: sqrt)
            lam, U = np.linalg.eigh(tg)
            Lt = U * np.sqrt(np.clip(lam, 0, None))
            if np.all(Lt[:, -1] <= 0):
                Lt = -Lt
            for j, k in enumerate(teach):
                vecs[k, :len(teach)] = np.abs(Lt[j]) if len(teach) == 1 else Lt[j]
        for k in tr:
            vecs[k] = rng.uniform(0.0, 1.0, n) * fs.scale * rng.uniform(0.2, 1.5) / math.sqrt(n)
        grams.append(vecs @ vecs.T)
    trs = set(tr)
    for k in range(K):
        for l in range(k, K):
            if not (k in trs or l in trs):
                continue
            if len(fs.layout) == 1:          # the order parameters are the Gram matrix
                v[names.index(f"{fs.layout[0][0]}_{k + 1}{l + 1}")] = grams[0][k, l]
            else:                            # (P + R)/2 and (P - R)/2 are the Gram matrices
                p, r, _ = fs.layout[0]
                v[names.index(f"{p}_{k + 1}{l + 1}")] = grams[0][k, l] + grams[1][k, l]
                v[names.index(f"{r}_{k + 1}{l + 1}")] = grams[0][k, l] - grams[1][k, l]
    for i, nm in enumerate(names):
        if fs.free[i] and nm.split("_", 1)[0] in fs.free_prefixes:
            v[i] = rng.normal(0.0, 1.0)
    return v[fs.free]


def minimise(model, teacher: dict, *, starts: int = 8, seed=0, ftol: float = 1e-15,
             maxiter: int = 500) -> LandscapeMinimum:
    """``min Phi`` over the feasible set (Corollary 1), SLSQP from ``starts`` random
    feasible points; the best converged run (constraints met to ``1e-9``) is returned.

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> res = minimise(model, {"q_22": 1.0}, starts=2, seed=0)
        >>> res.success, round(res.phi, 8) + 0.0
        (True, 0.0)
        >>> {k: round(v, 4) for k, v in res.point.items()}
        {'q_11': 1.0, 'q_12': 1.0, 'q_22': 1.0}
    """
    from scipy.optimize import minimize

    if isinstance(starts, bool) or not isinstance(starts, int) or starts < 1:
        raise ValueError(f"starts must be an int >= 1, got {starts!r}")
    fs = feasible_set(model, teacher)
    pot = _potential(model)
    f, g = _lambdas(fs, pot.phi)
    rng = np.random.default_rng(seed)
    best = None
    conv = 0
    cons = {"type": "ineq", "fun": lambda x: fs.constraints(fs.values(x))}
    for _ in range(starts):
        x0 = _draw_start(fs, rng)
        r = minimize(lambda x: f(fs.values(x)), x0, jac=lambda x: g(fs.values(x)),
                     method="SLSQP", constraints=[cons],
                     options={"ftol": ftol, "maxiter": maxiter})
        v = fs.values(r.x)
        viol = fs.violation(v)
        if not (np.all(np.isfinite(r.x)) and viol <= 1e-9 * fs.scale):
            continue
        conv += 1
        val = f(v)
        if best is None or val < best[0]:
            best = (val, v, viol, r.message)
    if best is None:
        return LandscapeMinimum(float("nan"), {}, False, starts, 0, float("nan"), fs,
                                "no start converged to a feasible point")
    val, v, viol, msg = best
    point = {s.name: float(x) for s, x in zip(fs.symbols, v)}
    return LandscapeMinimum(float(val), point, True, starts, conv, float(viol), fs, str(msg))


def phi_at(model, values: dict) -> float:
    """``Phi`` at order parameters given by symbol name."""
    import sympy as sp
    pot = _potential(model)
    subs = {s: values[s.name] for s in pot.phi.free_symbols}
    return float(sp.N(pot.phi.subs(subs), 17))


# ---------------------------------------------------------------------------------------
# end points of flows and SGD

def _teacher_factor(d, rng, lo=0.5, hi=1.5):
    """A teacher factor ``W`` (``d x d``) with ``S = W W^T`` of spectrum uniform in [lo, hi]."""
    O, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return O * np.sqrt(rng.uniform(lo, hi, d))


def _tied_values(res, j=-1) -> dict:
    K = 2
    return {f"q_{k + 1}{l + 1}": float(res.moment((k, l))[j]) for k in range(K)
            for l in range(k, K)}


def tied_case(loss_name: str, d: int, t_end: float, rng, *, sgd_ds=(), eta=None,
              starts: int = 6) -> dict:
    """One tied teacher-student instance: the constrained minimum, the matrix flow's end
    point at ``t_end`` from a random Wishart student, and SGD's at each ``d`` in
    ``sgd_ds`` (same law of the initial condition)."""
    from attndyn.numeric.attention.flow import matrix_flow
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.symbolic.losses import mse_teacher_student

    model = TiedModel(2, [0], mse_teacher_student(loss_name))
    W2 = _teacher_factor(d, rng)
    init_scale = float(rng.uniform(0.3, 1.0))
    W1 = rng.standard_normal((d, d)) * math.sqrt(init_scale / d)
    S = [W1 @ W1.T, W2 @ W2.T]
    teacher = {"q_22": float(np.sum(S[1] * S[1]) / d)}
    mn = minimise(model, teacher, starts=starts, seed=rng.integers(2**31))
    t = np.array([0.0, t_end / 2, t_end])
    fl = matrix_flow(model, S, t, order=2, rtol=1e-12, atol=1e-14)
    out = {"loss": loss_name, "kind": "tied", "d": d, "t_end": t_end, "init_scale": init_scale,
           "teacher": teacher, "phi_min": mn.phi, "argmin": mn.point, "min_success": mn.success,
           "flow_status": fl.status}
    if fl.status == 0:
        vals = _tied_values(fl)
        out["phi_flow"] = phi_at(model, vals)
        out["phi_flow_half"] = phi_at(model, _tied_values(fl, 1))
        out["flow_point"] = vals
        out["gap_flow"] = abs(out["phi_flow"] - mn.phi)
        out["dist_flow"] = max(abs(vals[k] - mn.point[k]) for k in vals)
    sgd_rows = []
    # SGD's horizon: long enough for the slowest direction of the student to reach the
    # teacher (the linear case escapes from small eigenvalues at rate 2 lambda(S_2))
    t_sgd = 20.0 if loss_name == "linear" else 8.0
    for ds in sgd_ds:
        sgd_rows.append(_tied_sgd(model, loss_name, ds, t_sgd, rng, eta))
    out["sgd"] = sgd_rows
    return out


def _tied_sgd(model, loss_name, d, t_end, rng, eta):
    """SGD's end point at dimension ``d``: ``Phi`` of its order parameters against the
    constrained minimum for *its* teacher (``q_22`` changes with the draw)."""
    from attndyn.numeric.attention.training import sgd

    eta = (0.05 if loss_name == "linear" else 0.01) if eta is None else eta
    W2 = _teacher_factor(d, rng)
    W1 = rng.standard_normal((d, d)) * math.sqrt(0.5 / d)
    B = 2 * d
    seed = int(rng.integers(2**31))
    # a learning rate too large for this d makes SGD diverge (the quartic h2 loss at small
    # d): a finite-eta instability, not Corollary 1's content; retry at eta/2, twice at most,
    # and keep every attempt in the row
    attempts = []
    for _ in range(3):
        r = sgd(model, [W1, W2], eta=eta, batch=B, t_eval=np.array([0.0, t_end]), seed=seed)
        attempts.append({"eta": eta, "status": int(r.status)})
        if r.status == 0:
            break
        eta /= 2
    row = {"d": d, "eta": eta, "batch": B, "status": int(r.status), "attempts": attempts}
    if r.status == 0:
        vals = _tied_values(r)
        mn = minimise(model, {"q_22": vals["q_22"]}, starts=3, seed=int(rng.integers(2**31)))
        row.update({"phi_sgd": phi_at(model, vals), "phi_min": mn.phi,
                    "gap_sgd": abs(phi_at(model, vals) - mn.phi)})
    return row


def direct_case(loss_name: str, d: int, t_end: float, rng, informative: bool) -> dict:
    """A direct-S teacher-student instance: the minimum over Q and the closed ODE's end point
    (appendix E), from an informative start (``S_1 = 0.3 S_2 + noise``) or from the
    uninformative manifold of Assumption 10 (independent noise with the student-teacher
    order parameters ``t_1, Psi_12, Omega_12`` set to their ``d -> infinity`` value 0: at
    finite ``d`` they are ``O(d^-1/2)`` and the unstable manifold is left at long times)."""
    from attndyn.numeric.attention.direct.model import SModel
    from attndyn.symbolic.losses import mse_teacher_student

    model = SModel(2, [0], mse_teacher_student(loss_name))
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    S2 = (A + A.T) / 2 + 0.3 * rng.standard_normal((d, d)) / math.sqrt(d)
    N = rng.standard_normal((d, d)) * math.sqrt(0.3 / d)
    S1 = (0.3 * S2 + N) if informative else N
    _, Psi, Om = model.order_parameters([S1, S2])
    teacher = {"Omega_22": float(Om[1, 1]), "Psi_22": float(Psi[1, 1])}
    mn = minimise(model, teacher, starts=6, seed=int(rng.integers(2**31)))
    t0, Psi0, Om0 = model.order_parameters([S1, S2])
    if not informative:
        t0 = t0.copy()
        t0[0] = 0.0
        Psi0, Om0 = Psi0.copy(), Om0.copy()
        Psi0[0, 1] = Psi0[1, 0] = Om0[0, 1] = Om0[1, 0] = 0.0
    res = model.integrate((t0, Psi0, Om0), np.array([0.0, t_end / 2, t_end]), rtol=1e-12,
                          atol=1e-14)
    out = {"loss": loss_name, "kind": "direct", "d": d, "t_end": t_end,
           "informative": informative, "phi_min": mn.phi, "argmin": mn.point,
           "flow_status": res.status}
    if res.status == 0:
        vals = {f"{nm}_{k + 1}{l + 1}": float(res.observable(nm, k, l)[-1])
                for nm in ("Omega", "Psi") for k in range(2) for l in range(k, 2)}
        out["phi_flow"] = phi_at(model, vals)
        out["gap_flow"] = abs(out["phi_flow"] - mn.phi)
        out["flow_point"] = vals
    return out


def untied_case(loss_name: str, d: int, t_end: float, rng) -> dict:
    """An untied teacher-student instance: the minimum over Q (``m`` free) and the end point
    of the finite-d full gradient flow (fast time ``t = eta n``)."""
    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.numeric.attention.untied.fastslow import untied_flow
    from attndyn.symbolic.losses import mse_teacher_student

    model = UntiedModel(2, [0], mse_teacher_student(loss_name))
    U2 = rng.standard_normal((d, d)) / math.sqrt(d)
    V2 = rng.standard_normal((d, d)) / math.sqrt(d) + 0.5 * U2
    U1 = rng.standard_normal((d, d)) * math.sqrt(0.4 / d)
    V1 = rng.standard_normal((d, d)) * math.sqrt(0.6 / d)
    pairs = [(U1, V1), (U2, V2)]
    op = model.order_parameters(pairs)
    teacher = {"m_2": float(op["m"][1]), "q1_22": float(op["q1"][1, 1]),
               "q2_22": float(op["q2"][1, 1])}
    mn = minimise(model, teacher, starts=6, seed=int(rng.integers(2**31)))
    res = untied_flow(model, pairs, np.array([0.0, t_end / 2, t_end]), mode="full")
    out = {"loss": loss_name, "kind": "untied", "d": d, "t_end": t_end, "phi_min": mn.phi,
           "argmin": mn.point, "flow_status": res.status}
    if res.status == 0:
        vals = {"m_1": float(res.observable("m", 0)[-1]), "m_2": teacher["m_2"]}
        for nm in ("q1", "q2"):
            for k in range(2):
                for l in range(k, 2):
                    vals[f"{nm}_{k + 1}{l + 1}"] = float(res.observable(nm, k, l)[-1])
        out["phi_flow"] = phi_at(model, vals)
        out["gap_flow"] = abs(out["phi_flow"] - mn.phi)
        out["flow_point"] = vals
    return out


#: per budget: tied (d, t_end, SGD dimensions), direct (d, t_end), untied (d, fast t_end)
COR1_BUDGETS = {
    "small": {"tied_d": 40, "tied_t": 40.0, "sgd_ds": (32,), "direct_d": 30, "direct_t": 40.0,
              "untied": None, "instances": 1},
    "default": {"tied_d": 80, "tied_t": 40.0, "sgd_ds": (32, 64, 128), "direct_d": 60,
                "direct_t": 40.0, "untied": (24, 400.0), "instances": 2},
    "slow": {"tied_d": 160, "tied_t": 60.0, "sgd_ds": (32, 64, 128), "direct_d": 120,
             "direct_t": 60.0, "untied": (40, 1200.0), "instances": 4},
}
#: the acceptance tolerance of the tied cases (issue 18)
TOL = 1e-6
#: SGD's end point: its gap to the minimum (noise vanishes at a realisable teacher's
#: optimum, so the gap is set by the horizon, not by the learning rate)
SGD_TOL = 1e-4


@register("cor1", "Cor. 1 (C.3), Cor. 5", "constrained min of Phi over Q vs long flows and SGD")
def check_cor1(budget, seed) -> CheckResult:
    """Tied linear and h2 teacher-student instances (random teacher spectra in [0.5, 1.5],
    Wishart students): ``|Phi(flow end) - min_Q Phi| <= 1e-6`` and SGD's end point within
    ``1e-4`` at every SGD dimension (first instance; SGD ``eta = 0.05`` linear, ``0.01`` h2,
    halved after a divergence, ``B = 2d``, horizon ``t = 20`` linear, ``8`` h2); direct S (linear and h2 from an informative start,
    where the flow reaches the minimum; h2 from an uninformative start reported, since
    Corollary 7 predicts that the flow stays on the invariant manifold) and untied (linear)
    cases are reported and held to the same 1e-6 where the flow is expected to reach the
    minimum.

        >>> r = check_cor1("small", 0)
        >>> r.key, r.verdict
        ('cor1', 'held')
    """
    cfg = COR1_BUDGETS.get(budget, COR1_BUDGETS["default"])
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(cfg["instances"]):
        for loss in ("linear", "h2"):
            # SGD at the growing dimensions on the first instance only (it dominates the cost)
            rows.append(tied_case(loss, cfg["tied_d"], cfg["tied_t"], rng,
                                  sgd_ds=cfg["sgd_ds"] if i == 0 else ()))
    rows.append(direct_case("linear", cfg["direct_d"], cfg["direct_t"], rng, True))
    rows.append(direct_case("h2", cfg["direct_d"], cfg["direct_t"], rng, True))
    stall = direct_case("h2", cfg["direct_d"], cfg["direct_t"], rng, False)
    if cfg["untied"] is not None:
        rows.append(untied_case("linear", cfg["untied"][0], cfg["untied"][1], rng))
    gaps = [r.get("gap_flow", float("inf")) for r in rows]
    sgd_gaps = [s.get("gap_sgd", float("inf")) for r in rows for s in r.get("sgd", [])]
    worst = max(gaps)
    ok = worst <= TOL and all(g <= SGD_TOL for g in sgd_gaps) and all(
        r.get("min_success", True) for r in rows)
    bad = [f"{r['kind']} {r['loss']}: |Phi_flow - min| = {r.get('gap_flow', float('nan')):.2e}"
           for r in rows if not r.get("gap_flow", float("inf")) <= TOL]
    bad += [f"SGD d = {s['d']}: gap {s.get('gap_sgd', float('nan')):.2e}"
            for r in rows for s in r.get("sgd", []) if not s.get("gap_sgd", float("inf")) <= SGD_TOL]
    tied_gaps = [r["gap_flow"] for r in rows if r["kind"] == "tied" and "gap_flow" in r]
    retried = sum(len(x["attempts"]) - 1 for r in rows for x in r.get("sgd", []))
    return CheckResult(
        "cor1", "Cor. 1 (C.3), Cor. 5", "held" if ok else "not held", len(rows), worst,
        f"max |Phi(long flow end) - min_Q Phi| over {len(rows)} flows (tied worst "
        f"{max(tied_gaps):.1e}); SGD worst gap {max(sgd_gaps) if sgd_gaps else float('nan'):.1e}"
        f" at d = {', '.join(str(d) for d in cfg['sgd_ds'])}"
        f"{f' ({retried} SGD runs diverged and were rerun at eta/2)' if retried else ''}"
        f"; direct-S h2 from an "
        f"uninformative start stops {stall.get('gap_flow', float('nan')):.2f} above the "
        "minimum (Cor. 7)",
        bound=TOL,
        expectation=f"flows <= {TOL:g} (the acceptance), SGD <= {SGD_TOL:g}",
        detail="; ".join(bad), data={"cases": rows, "uninformative_direct_h2": stall})
