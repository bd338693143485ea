"""Numeric potentials: compiled Gaussian quadrature for losses with no closed form.

:class:`NumericPotential` evaluates ``Phi = E[loss(G)]`` and its gradient in
every order parameter of a law (tied, untied, direct S, general; see
:mod:`attndyn.symbolic.gaussian`) in the symmetric convention of MATH.md:

    dPhi/dx_t = (1/2) tr(S_t E[Hess loss]) + M_t . E[grad loss],

``S_t = dSigma/dx_t`` and ``M_t = dmu/dx_t`` for each *ordered* matrix entry
``x_t`` (Price's theorem). For tied attention this is ``Gamma_kl`` of eq. (91).

How it works:

1. the loss (in the merged variables, ``G_jik = G_ijk`` for tied) is printed
   with its gradient, and its Hessian when the gradient is continuous, as one
   numba function (``attndyn.symbolic.codegen``) and compiled through a file
   keyed by its hash (``attndyn.numeric.core.compile``); the generic kernel of
   ``attndyn.kernels.quadrature`` takes it as a first-class function, so the
   kernel compiles once for every loss;
2. losses that depend on ``G`` only through fewer linear combinations (row
   softmax depends on differences within a row) are integrated in that
   subspace, found from the span of sampled gradients;
3. the rule (tensor Gauss-Hermite, Smolyak sparse grid, or scrambled-Sobol
   RQMC, chosen by that dimension) is refined at a reference point until the
   requested accuracy ``tol`` is met (:func:`attndyn.numeric.attention.potentials.quadrature.choose_rule`);
   ``error`` is that estimate and :meth:`NumericPotential.gradients` with
   ``with_error=True`` re-estimates it at any point; a loss quadratic in all but at
   most four of more than four directions (the two-layer attention example) takes the
   split rule instead: Gauss-Hermite over those few, exact over the rest
   (:meth:`NumericPotential._split_directions`);
4. non-smooth losses: a loss must be continuous (checked symbolically); if its
   gradient has jumps (ReLU, absolute value), the Hessian is a distribution and
   is never printed: the expectation of the Hessian comes from Stein's identity
   with first derivatives, which needs a definite covariance on the integration
   subspace (NaN otherwise, and an error at the Python level).

Outside the PSD cone the compiled function follows the paper's extension
(eq. 92 for tied, eqs. 490-491 for direct S, the same for untied); the Python
methods instead reject a non-PSD input with an error naming it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import sympy as sp

from attndyn.kernels.quadrature import law_eval, pack_header
from attndyn.symbolic.codegen import njit_source
from attndyn.symbolic.gaussian import GaussianLaw, make_law
from attndyn.symbolic.hermite import normalise_nonsmooth
from attndyn.symbolic.parse import as_sympy
from attndyn.symbolic.potential import RouteError, safe_powers

from ...core.compile import load_generated
from .quadrature import (METHODS, QuadratureRule, merge, choose_rule, rqmc_rules, smolyak_rule,
                         tensor_rule, trapezoid_rule)

_TENSOR_LADDER = (3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112,
                  128, 160, 192, 256, 320)

__all__ = ["NumericPotential", "numeric_potential", "check_continuity", "build_potential",
           "tied_potential", "untied_potential", "direct_potential", "general_potential",
           "potential", "as_potential", "error_report", "record_error", "run_tracked",
           "CompiledExact"]

#: most variables for which ``mode="auto"`` takes the Hessian where RQMC is the rule
#: (dim > 10): the two-layer attention example (L = 2, 40 variables, 18 dimensions) builds
#: in 11-18 s CPU instead of 6 s and meets tol 2e-3 where Stein's estimate stopped at 1.1e-2 and
#: 2.0e-2 (unequal variances, correlation 0.97; issue 25). Up to 16 it is always taken.
_HESSIAN_MAX_P = 40

_PROJ = {"tied": 1, "untied": 2, "direct": 3, "general": 0}

_WRAPPER = """

import numpy as np

from attndyn.kernels.quadrature import law_eval


@numba.njit(GRAD_SIG, cache=True)
def grad(x, p, out):
    \"\"\"Symmetric-convention gradient of the potential by compiled quadrature, the
    rule chosen per call from a ladder until the error estimate meets the tolerance.\"\"\"
    n = out.size
    nr = int(p[1])
    rtol = p[3]
    atol = p[4]
    ot = int(p[13])
    ws = np.empty(int(p[11]))
    cur = np.empty(n)
    prev = np.empty(n)
    tmp = np.empty(n)
    acc = np.empty(n)
    acc2 = np.empty(n)
    err = np.empty(n)
    j = int(p[10])
    # one copy of the law's maps (at ob), shared by every rung: each evaluation points
    # its header at the rung's nodes (count p[ob + 3], offset p[ob + 14])
    ob = ot + 4 * nr
    mp = p[ob:]
    have_prev = False
    while True:
        zo = p[ot + 4 * j]
        nn = p[ot + 4 * j + 1]
        npart = int(p[ot + 4 * j + 2])
        stride = p[ot + 4 * j + 3]
        if npart == 1:
            mp[3] = nn
            mp[14] = zo
            law_eval(x, mp, cur, ws, integrand)
            if not have_prev:
                mp[3] = p[ot + 4 * (j - 1) + 1]
                mp[14] = p[ot + 4 * (j - 1)]
                law_eval(x, mp, prev, ws, integrand)
            for k in range(n):
                err[k] = abs(cur[k] - prev[k])
        else:
            # scrambled QMC: the mean over the scramblings, three standard errors
            for k in range(n):
                acc[k] = 0.0
                acc2[k] = 0.0
            for m in range(npart):
                mp[3] = nn
                mp[14] = zo + m * stride
                law_eval(x, mp, tmp, ws, integrand)
                for k in range(n):
                    acc[k] += tmp[k]
                    acc2[k] += tmp[k] * tmp[k]
            for k in range(n):
                mean = acc[k] / npart
                var = (acc2[k] - npart * mean * mean) / (npart - 1)
                cur[k] = mean
                err[k] = 3.0 * np.sqrt(max(var, 0.0) / npart)
        scale = 0.0
        emax = 0.0
        finite = True
        for k in range(n):
            if not (np.isfinite(cur[k]) and np.isfinite(err[k])):
                finite = False
            elif abs(cur[k]) > scale:
                scale = abs(cur[k])
            if err[k] > emax:
                emax = err[k]
        lim = atol + rtol * scale
        if not finite or emax <= lim or j == nr - 1:
            break
        for k in range(n):
            prev[k] = cur[k]
        have_prev = True
        j += 1
    for k in range(n):
        out[k] = cur[k]
    if finite:
        p[5] += 1.0
        if emax > lim:
            p[6] += 1.0
        if emax / lim > p[7]:
            p[7] = emax / lim
        if emax > p[8]:
            p[8] = emax
        p[9] = emax
        if j > p[10]:
            p[10] = j
            p[15] = 0.0
        elif not have_prev and j > p[2]:
            # met at the start rung: after 16 such calls in a row, try one rung lower
            p[15] += 1.0
            if p[15] >= 16.0:
                p[10] = j - 1
                p[15] = 0.0
        if j > p[14]:
            p[14] = j
"""


# the certified surrogate where it is built, the per-call ladder elsewhere (SurrogateRoute)
_BOX_WRAPPER = """

from attndyn.kernels.surrogate import surrogate_grad


@numba.njit(GRAD_SIG, cache=True)
def grad_box(x, p, out):
    \"\"\"Gamma from the certified surrogate in p when q is inside its box, else from
    the quadrature ladder (the surrogate's exit counter records the point).\"\"\"
    if p[5] > 0.0:
        o = int(p[1])
        surrogate_grad(x, p[o:o + int(p[2])], out)
        ok = True
        for k in range(out.size):
            if not np.isfinite(out[k]):
                ok = False
        if ok:
            p[7] += 1.0
            return
    p[6] += 1.0
    oq = int(p[3])
    grad(x, p[oq:oq + int(p[4])], out)
"""


def _node_count(rule) -> int:
    """float64 entries of a rule's nodes and weights (all its scramblings)."""
    return sum(pr.size * (pr.dim + 1) for pr in (rule.parts or [rule]))


def _simplex(m: int) -> np.ndarray:
    """The ``m + 1`` vertices (rows) of a regular simplex in ``R^m`` with mean 0 and
    covariance ``I``: a rule exact for polynomials of degree <= 2 under ``N(0, I_m)``."""
    Q, _ = np.linalg.qr(np.vstack([np.ones(m + 1), np.eye(m + 1)[:m]]).T)
    return np.ascontiguousarray(math.sqrt(m + 1) * Q[:, 1:])


def _drop_delta(e):
    return e.replace(lambda a: isinstance(a, sp.DiracDelta), lambda a: sp.Integer(0))


def _jump_free(e, variables, what):
    """Raise unless ``e`` is continuous across every ``Heaviside`` it contains."""
    vs = set(variables)
    for h in e.atoms(sp.Heaviside):
        arg = h.args[0]
        fs = sorted(arg.free_symbols & vs, key=str)
        if not fs:
            continue
        v = fs[0]
        sol = sp.solve(sp.Eq(arg, 0), v)
        if len(sol) != 1:
            raise RouteError(f"cannot check the continuity of the {what} across {arg} = 0")
        jump = (e.xreplace({h: sp.Integer(1)}) - e.xreplace({h: sp.Integer(0)})).subs(v, sol[0])
        if sp.simplify(jump) != 0:
            return False
    return True


def check_continuity(expr, variables):
    """Classify a loss for the numeric route.

    Returns ``(expr, grads, hessian_ok)``: the loss with non-smooth pieces in
    ``Heaviside`` form, its gradient (distributional terms dropped, which is
    exact because the loss is continuous), and whether the gradient is
    continuous too (then the Hessian has no distributions). Raises
    :class:`RouteError` for a discontinuous loss or a piece whose continuity
    cannot be decided.
    """
    vs = list(variables)
    e = normalise_nonsmooth(as_sympy(expr, "loss"))
    bad = [a for a in e.atoms(sp.Piecewise, sp.floor, sp.ceiling, sp.DiracDelta, sp.Max, sp.Min)
           if a.free_symbols & set(vs)]
    if bad:
        raise RouteError(f"numeric route: cannot decide the smoothness of {bad[0]}; write "
                         "ReLU as Max(0, x) and steps as Heaviside")
    if not _jump_free(e, vs, "loss"):
        raise RouteError("numeric route: the loss is discontinuous (a Heaviside jump), so its "
                         "gradient contains distributions; use route='closed' (exact for "
                         "products of single-variable functions) or smooth the loss")
    grads = [_drop_delta(sp.diff(e, v)) for v in vs]
    hess_ok = all(_jump_free(g, vs, "gradient") for g in grads)
    return e, grads, hess_ok


def _int_seed(seed) -> int:
    """The RQMC seed as an int (it keys cached rules): an int as is; a SeedSequence or a
    Generator (SPEC 7) through :func:`~attndyn.numeric.core.validate.resolve_seed`."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return int(seed)
    from ...core.validate import resolve_seed
    return int(resolve_seed(seed).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def _check_options(law, method, mode, seed, L, K, C):
    """The law (built from a kind with ``L, K, C``) and the options, checked."""
    if isinstance(law, str):
        if K is None:
            raise TypeError("give K (and L, C) with a law kind")
        law = make_law(law, L, K, C)
    if not isinstance(law, GaussianLaw):
        raise TypeError("law must be a GaussianLaw or a law kind")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if mode not in ("auto", "hessian", "stein"):
        raise ValueError(f"mode must be 'auto', 'hessian' or 'stein', got {mode!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return law


class NumericPotential:
    """Potential of a law by compiled Gaussian quadrature (route ``"numeric"``).

    Parameters
    ----------
    law : GaussianLaw or str
        A law from :mod:`attndyn.symbolic.gaussian`, or its kind with ``L, K, C``.
    loss : SymPy expression in ``law.variables`` (or in all ``G`` symbols) or a
        callable ``loss(G)``.
    params, param_values : loss parameters (symbols) and their values.
    tol : float
        Requested accuracy. The rule is calibrated at the reference point to
        ``tol * max(1, |value|)``; every later evaluation (compiled or Python) refines
        it per call until its error estimate is within ``atol + tol * max|out|`` (max
        norm over the outputs).
    atol : float, optional
        Absolute floor of that per-call tolerance; default ``1e-3 tol`` (``tol`` for
        RQMC, whose error falls only like ``1/n``).
    method : "auto", "tensor", "sparse" or "rqmc"
        ``auto`` chooses by the integration dimension (see
        :func:`attndyn.numeric.attention.potentials.quadrature.choose_rule`), and RQMC in Stein mode
        (a jumping integrand defeats the Gauss-Hermite error estimate).
    seed : int
        Seed of the RQMC scramblings (deterministic for a given seed).
    reference : dict, array, or a list of them
        Order parameters where the rule is calibrated (default: identity
        covariances, zero means); with a list, the rule is refined until the
        accuracy holds at every point.
    mode : "auto", "hessian" or "stein"
        How ``E[Hess loss]`` is computed (``auto``: Hessian if the gradient is
        continuous and there are at most 16 variables, or at most ``_HESSIAN_MAX_P``
        (40) where RQMC is the rule (dimension > 10: Stein's estimate divides by the
        square roots of the covariance's eigenvalues and misses the tolerance at unequal
        variances); Stein's identity with first derivatives otherwise).
    """

    route = "numeric"

    def __init__(self, law, loss, params=(), param_values=None, *, tol: float = 1e-8,
                 method: str = "auto", seed: int = 0, reference=None, mode: str = "auto",
                 max_points: int = 400_000, hessian: bool = True, L: int = 1, K: int | None = None,
                 C=None, atol: float | None = None):
        law = _check_options(law, method, mode, seed, L, K, C)
        self.law = law
        self.kind = law.kind
        self.K, self.L, self.C = law.K, law.L, law.C
        self.params = tuple(params)
        self.notes: list = []
        self._set_tolerance(tol, atol)
        self._pl = None      # the ladder's parameter vector (built on first compiled use)
        self._py_report = {"calls": 0, "over_tolerance": 0, "max_ratio": 0.0, "max_error": 0.0}
        self.seed = _int_seed(seed)
        self._set_loss(loss, param_values)
        mode = self._compile(mode)
        S, M = law.linear_maps()
        self._S, self._M = S, M
        self.n_in = S.shape[0]
        self.W = self._subspace()
        self.dim = self.W.shape[0]
        if mode == "stein" and self._auto_mode and self._hess_ok and self.dim > 10 \
                and self.P <= _HESSIAN_MAX_P:
            # RQMC dimension and a continuous gradient: Stein's estimator divides by
            # sqrt(lam) and misses the tolerance at unequal variances (issue 25)
            mode = self._compile("hessian")
        self._R = self._output_map(hessian)
        self.n_out = self._R.shape[0]
        self._split = self._split_directions() if method == "auto" else None
        self.x_refs = self._references(reference)
        self.x_ref = self.x_refs[0]
        self._calibrate(method, max_points, atol)
        if mode == "stein":
            self.notes.append("Hessian expectation by Stein's identity (first derivatives)")

    def _set_tolerance(self, tol, atol):
        """``tol``, and the per-call ``rtol``, ``atol`` (default ``1e-3 tol``), validated."""
        if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) \
                or not (math.isfinite(tol) and tol > 0):
            raise ValueError(f"tol must be a finite number > 0, got {tol!r}")
        self.tol = float(tol)
        #: per-call accuracy: every entry within ``atol + rtol max_o |out_o|`` (max norm)
        self.rtol = self.tol
        self.atol = 1e-3 * self.tol if atol is None else float(atol)
        if not (math.isfinite(self.atol) and self.atol >= 0):
            raise ValueError(f"atol must be a finite number >= 0, got {atol!r}")

    def _set_loss(self, loss, param_values):
        """The loss reduced to the law's variables (``self.expr``) and the parameter
        values (``self._ip``), both checked."""
        law = self.law
        if callable(loss) and not isinstance(loss, sp.Basic):
            from attndyn.symbolic.gaussian import g_array
            loss = loss(g_array(self.L, self.K))
        expr = law.reduce_loss(as_sympy(loss, "loss"))
        extra = expr.free_symbols - set(law.variables) - set(self.params)
        if extra:
            raise ValueError(f"loss has free symbols {sorted(map(str, extra))} that are neither "
                             "pre-activations G nor declared parameters")
        if param_values is None:
            if self.params:
                raise ValueError(f"the numeric route needs values for the loss parameters "
                                 f"{[str(s) for s in self.params]}: pass param_values=")
            param_values = ()
        pv = np.asarray(param_values, dtype=float).ravel()
        if pv.size != len(self.params):
            raise ValueError(f"param_values must have {len(self.params)} entries, got {pv.size}")
        if not np.all(np.isfinite(pv)):
            raise ValueError("param_values contains NaN or inf")
        self._ip = np.ascontiguousarray(pv)
        self.expr = expr

    def _compile(self, mode):
        """Print the integrand (loss, gradient and, in Hessian mode, Hessian) as one numba
        function and load it; returns the mode resolved from ``"auto"``."""
        variables = list(self.law.variables)
        if getattr(self, "_continuity", None) is None:
            self._continuity = check_continuity(self.expr, variables)
        e, grads, hess_ok = self._continuity
        self._hess_ok = hess_ok
        self._auto_mode = mode == "auto" or getattr(self, "_auto_mode", False)
        if mode == "hessian" and not hess_ok:
            raise RouteError("mode='hessian': the gradient of this loss jumps (ReLU, absolute "
                             "value), so its Hessian contains distributions; use mode='stein'")
        if mode == "auto":
            mode = "hessian" if (hess_ok and len(variables) <= 16) else "stein"
        self.mode = mode
        P = len(variables)
        outs = list(grads)
        self._hess_exprs = {}
        if mode == "hessian":
            for a in range(P):
                for b in range(a, P):
                    outs.append(_drop_delta(sp.diff(grads[a], variables[b])))
                    self._hess_exprs[(a, b)] = outs[-1]
        src = njit_source("integrand", variables, self.params, [safe_powers(o) for o in outs],
                          value=safe_powers(e),
                          doc=f"loss, gradient{' and Hessian' if mode == 'hessian' else ''} "
                              f"of a {self.law.kind} potential integrand")
        self._source = src
        self._integrand = load_generated(src, "integrand")
        self._grad_fn = None
        self.P = P
        return mode

    def _calibrate(self, method, max_points, atol):
        """Choose the rule at the reference points (:func:`choose_rule`) and pack it."""
        P = self.P
        if method == "auto" and self.mode == "stein":
            # the Stein integrand z * grad f jumps where the gradient does: Gauss-Hermite
            # and sparse grids converge erratically there and their difference estimates are
            # not reliable; RQMC's spread over scramblings is
            method = "rqmc"

        def evaluate(rule):
            p = self._pack(rule)
            vals = []
            for xr in self.x_refs:
                both = np.empty(1 + P + P * P + self.n_out)
                self._call(xr, p, both)
                vals.append(both[:1])
                vals.append(both[1 + P + P * P:])
            return np.concatenate(vals)

        self._max_points = int(max_points)
        dim = self.dim
        if self._split is not None:
            # Gauss-Hermite over the directions the loss is not quadratic along (the
            # others are integrated exactly by the split rule, see _split_directions)
            # (max_points counts integrand evaluations: n_eta per node)
            dim, method = self._split[0].shape[0], "tensor"
            max_points = max(1, max_points // len(self._split[1]))
        self.rule = choose_rule(dim, evaluate, tol=self.tol, method=method, seed=self.seed,
                                max_points=max_points)
        self.error = float(self.rule.error)
        self.method = self.rule.method
        if atol is None and self.method == "rqmc":
            # RQMC's error falls like 1/n: the floor stays at tol (as the calibration's
            # tol * max(1, |value|)); the exponentially converging rules take 1e-3 tol
            self.atol = self.tol
        self._p = self._pack(self.rule)

    # -- construction helpers ------------------------------------------------------
    def _subspace(self):
        P = self.P
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 12345]))
        n = max(48, 6 * P)
        buf = np.zeros(P + P * (P + 1) // 2)
        grads = np.empty((n, P))
        for i in range(n):
            G = np.ascontiguousarray(1.5 * rng.standard_normal(P))
            self._integrand(G, self._ip, buf)
            grads[i] = buf[:P]
        if not np.all(np.isfinite(grads)):
            return np.eye(P)
        _, s, Vt = np.linalg.svd(grads, full_matrices=False)
        if s.size == 0 or s[0] == 0:
            return np.eye(P)[:1].copy()
        r = int(np.sum(s > 1e-9 * s[0]))
        W = np.ascontiguousarray(Vt[:r])
        if r < P:
            # the loss must be invariant along the discarded directions
            for _ in range(8):
                G = rng.standard_normal(P)
                G2 = np.ascontiguousarray(W.T @ (W @ G))
                f1 = self._integrand(np.ascontiguousarray(G), self._ip, buf)
                f2 = self._integrand(G2, self._ip, buf)
                if abs(f1 - f2) > 1e-9 * max(1.0, abs(f1)):
                    return np.eye(P)
            self.notes.append(f"the loss depends on G through {r} of {P} linear combinations")
        return W

    #: most directions a split rule integrates by tensor Gauss-Hermite
    _SPLIT_MAX_D = 4

    def _split_directions(self):
        """``(D, E)`` of the split rule (``attndyn.kernels.quadrature``), or ``None``.

        With the Hessian printed, the variables ``Y`` the loss is jointly quadratic in
        (every ``d^2 loss / dy_a dy_b`` free of ``Y``, so its third derivatives along
        ``Y`` vanish) are found symbolically; the loss depends on the others ``X``
        through ``d`` combinations (the span of sampled gradients, invariance checked),
        the rows of ``D`` in the integration coordinates ``u`` (``G = W^T u``). Given
        ``D u`` the loss, its gradient and its Hessian are polynomials of degree <= 2 in
        the remaining ``dim - d`` directions, which the ``dim - d + 1`` points ``E`` of a
        regular simplex (mean 0, covariance ``I``) integrate exactly. Taken where it
        pays: Hessian mode, ``dim > 4``, ``1 <= d <= 4``.
        """
        if self.mode != "hessian" or self.dim <= 4:
            return None
        P, vs = self.P, list(self.law.variables)
        H = self._hess_exprs
        fs = {k: e.free_symbols for k, e in H.items()}
        Y = {a for a in range(P) if vs[a] not in fs[(a, a)]}
        while Y:
            bad: dict = {}
            for (a, b), f in fs.items():
                if a in Y and b in Y:
                    for c in Y:
                        if vs[c] in f:
                            bad[c] = bad.get(c, 0) + 1
            if not bad:
                break
            Y.discard(max(bad, key=lambda c: (bad[c], -c)))
        X = [a for a in range(P) if a not in Y]
        if not Y or not X:
            return None
        Vx = self._nonlinear_combinations(X)
        if Vx is None or not 1 <= Vx.shape[0] <= min(self._SPLIT_MAX_D, self.dim - 1):
            return None
        DG = np.zeros((Vx.shape[0], P))
        DG[:, X] = Vx
        D = DG @ self.W.T
        s = np.linalg.svd(D, compute_uv=False)
        if s[-1] <= 1e-9 * s[0]:
            return None
        d = D.shape[0]
        self.notes.append(f"split rule: the loss is quadratic along {self.dim - d} of its "
                          f"{self.dim} integration directions given the other {d}: Gauss-Hermite "
                          f"over those {d}, exact over the rest ({self.dim - d + 1} points)")
        return np.ascontiguousarray(D), _simplex(self.dim - d)

    def _nonlinear_combinations(self, X):
        """Orthonormal rows spanning the combinations of the variables ``X`` the loss
        depends on (sampled gradients), or ``None`` when the invariance check fails."""
        P = self.P
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 54321]))
        buf = np.zeros(P + P * (P + 1) // 2)
        grads = np.empty((max(48, 6 * len(X)), len(X)))
        for i in range(len(grads)):
            G = np.ascontiguousarray(1.5 * rng.standard_normal(P))
            self._integrand(G, self._ip, buf)
            grads[i] = buf[:P][X]
        if not np.all(np.isfinite(grads)):
            return None
        _, s, Vt = np.linalg.svd(grads, full_matrices=False)
        if s.size == 0 or s[0] == 0:
            return None
        Vx = Vt[:int(np.sum(s > 1e-9 * s[0]))]
        for _ in range(8):
            G = rng.standard_normal(P)
            G2 = G.copy()
            G2[X] = Vx.T @ (Vx @ G[X])
            f1 = self._integrand(np.ascontiguousarray(G), self._ip, buf)
            f2 = self._integrand(np.ascontiguousarray(G2), self._ip, buf)
            if abs(f1 - f2) > 1e-9 * max(1.0, abs(f1)):
                return None
        return Vx

    def _output_map(self, hessian):
        P, n_in = self.P, self.n_in
        nm = 1 + P + P * P
        rows = []
        for t in range(n_in):
            row = np.zeros(nm)
            row[1:1 + P] = self._M[t]
            row[1 + P:] = 0.5 * self._S[t].ravel()
            rows.append(row)
        self._hess_name = None
        if hessian and self.kind == "untied":
            self._hess_name = "m"
            for k in range(self.K):
                for l in range(self.K):
                    row = np.zeros(nm)
                    row[1 + P:] = np.outer(self._M[k], self._M[l]).ravel()
                    rows.append(row)
        return np.array(rows)

    def _references(self, reference):
        if isinstance(reference, (list, tuple)) and reference and all(
                isinstance(r, dict) or np.size(r) == self.n_in for r in reference):
            return [self._reference(r) for r in reference]
        return [self._reference(reference)]

    def _reference(self, reference):
        law = self.law
        if reference is None:
            vals = {}
            for name, shape, _ in law.input_layout():
                vals[name] = np.eye(shape[0]) if name in law.matrix_parameters else np.zeros(shape)
            if self.kind in ("untied", "direct", "general"):
                second = {"untied": "q2", "direct": "Psi", "general": "Psi"}[self.kind]
                vals[second] = np.zeros_like(vals[second])
            return self._flatten(vals)
        if isinstance(reference, dict):
            return self._flatten(reference)
        x = np.ascontiguousarray(np.asarray(reference, dtype=float).ravel())
        if x.size != self.n_in:
            raise ValueError(f"reference must have {self.n_in} entries, got {x.size}")
        return x

    def _flatten(self, values):
        return np.ascontiguousarray(self.law.flatten_inputs(values))

    def _evaluations(self, rule: QuadratureRule) -> int:
        """Integrand evaluations of one call with ``rule`` (each node of a split rule
        stands for its ``dim - d + 1`` points)."""
        return rule.size * (len(self._split[1]) if self._split is not None else 1)

    def _pack(self, rule: QuadratureRule):
        """The parameter vector of :func:`~attndyn.kernels.quadrature.law_eval` for ``rule``
        (nodes inline)."""
        return self._pack_maps(rule.size, rule.dim, rule)

    def _pack_maps(self, n_nodes, dim, rule=None, node_offset=0):
        """Header and maps, with ``rule``'s nodes inline (or none: the nodes of ``n_nodes``
        points in ``dim`` dimensions then sit at ``node_offset``, see the ladder)."""
        split, tail = 0, []
        if self._split is not None:
            D, E = self._split
            if dim != D.shape[0]:
                raise ValueError(f"a split potential takes {D.shape[0]}-dimensional rules, "
                                 f"got {dim}")
            split, tail = D.shape[0], [D.ravel(), E.ravel()]
        head = pack_header(self.P, self.dim, n_nodes, self.n_in, self.n_out,
                           0 if self.mode == "hessian" else 1, self._ip.size, _PROJ[self.kind],
                           self.K, split=split, n_eta=len(self._split[1]) if split else 0,
                           node_offset=node_offset)
        nodes = [] if rule is None else [rule.nodes.ravel(), rule.weights]
        return np.ascontiguousarray(np.concatenate(
            [head, self._S.ravel(), self._M.ravel(), self.W.ravel()] + nodes
            + [self._R.ravel(), self._ip] + tail))

    def _call(self, x, p, out):
        """The kernel called from Python with the integrand as a first-class value."""
        law_eval(x, p, out, np.empty(int(p[11])), self._integrand)

    # -- TiedModel interface -----------------------------------------------------------
    def gradient_function(self):
        """The compiled ``grad(x, p, out)`` (signature ``GRAD_SIG``): flat order
        parameters in, gradient in every input out (``q.ravel() -> Gamma.ravel()``
        for tied), plus the ``m``-Hessian for untied.

        Each call walks the ladder of rules packed in :meth:`parameters` (the
        calibrated rule's predecessor, the calibrated rule, then finer ones: tensor
        Gauss-Hermite, then in one or two dimensions the trapezoidal rule; sparse
        grids; more scrambled Sobol points) until the error estimate (the
        difference of two successive rules, or three standard errors over the
        scramblings) of every output is within ``atol + rtol max|out|``; the rung
        reached is kept as the next call's start, so a run of nearby points costs
        two evaluations each. When the top rung misses the tolerance the call is
        counted (:meth:`error_report`); a non-finite value stops at once (NaN out).

        It is a small generated wrapper around the kernel; numba cannot cache a
        function holding the address of a first-class function, so it is
        compiled once per process (about a second) on the first call here.
        """
        if self._grad_fn is None:
            from numba.core.errors import NumbaWarning
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*Cannot cache compiled function.*",
                                        category=NumbaWarning)
                self._grad_fn = load_generated(self._source + _WRAPPER, "grad")
        return self._grad_fn

    def box_function(self):
        """The compiled ``grad_box(x, p, out)`` (``GRAD_SIG``) of
        :class:`~attndyn.numeric.attention.potentials.surrogate.SurrogateRoute`: a certified
        surrogate inside its box, :meth:`gradient_function`'s ladder outside it."""
        fn = self.__dict__.get("_box_fn")
        if fn is None:
            from numba.core.errors import NumbaWarning
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*Cannot cache compiled function.*",
                                        category=NumbaWarning)
                fn = self._box_fn = load_generated(self._source + _WRAPPER + _BOX_WRAPPER,
                                                   "grad_box")
        return fn

    def parameters(self) -> np.ndarray:
        """The float64 parameter vector of :meth:`gradient_function`: the ladder of
        rules and the per-call counters that :meth:`error_report` reads (a copy keeps
        its own counters). Built on the first call (a second or so for large rules)."""
        if self._pl is None:
            self._pl = self._pack_ladder()
        return self._pl

    #: the ladder's header: marker, rungs, first usable rung, rtol, atol, calls,
    #: calls over the tolerance, worst error/limit, worst error, last error, start rung,
    #: workspace size, n_out, offset of the rung table, highest rung used, calls met at
    #: the start rung in a row; then the rung table (node offset, nodes, parts, part stride
    #: per rung), one copy of the law's maps, and the nodes and weights of every rung
    #: float64 entries of the ladder (48 MB): row softmax with L = 2 (4-D
    #: tensor Gauss-Hermite) needs the rungs 40 and 48 nodes per axis (596,232 points) to meet
    #: tol 1e-6 at variance ratio 100 or |rho| = 0.98; 3 million stopped at 32 (issue 25).
    #: The maps are counted once: before they were packed with every rung and every RQMC
    #: scrambling (1.2 million entries each for the two-layer attention example, whose
    #: ladder then held its calibrated rung alone and missed the tolerance; issue 25)
    _LADDER_BUDGET = 6_000_000

    def _ladder_rules(self):
        """The rules of the per-call ladder and the first rung a call may start at."""
        r0 = self.rule
        if r0.parts:
            rungs, first = [r0], 0
        elif r0.coarse is not None:
            rungs, first = [r0.coarse, r0], 1
        else:
            rungs, first = [r0], 1
        prune = 1e-2 * self.atol if self.atol > 0 else 1e-2 * self.tol
        total = self._pack_maps(0, r0.dim).size + sum(_node_count(r) for r in rungs)
        cur = r0
        while True:
            nxt = self._finer(cur, prune)
            if nxt is None or self._evaluations(nxt) > self._max_points:
                break
            size = _node_count(nxt)
            if total + size > self._LADDER_BUDGET:
                break
            nxt.coarse = cur
            rungs.append(nxt)
            total += size
            cur = nxt
        if len(rungs) == first:   # nothing finer fits: the rule against itself
            rungs.append(r0)
        return rungs, first

    def _pack_ladder(self):
        rungs, first = self._ladder_rules()
        self.ladder = [r.describe() for r in rungs]
        dim = rungs[0].dim
        maps = self._pack_maps(rungs[0].size, dim, node_offset=1)
        vecs, table = [], []
        off = maps.size             # node offsets are relative to the maps' start
        for r in rungs:
            parts = r.parts or [r]
            stride = parts[0].size * (dim + 1)
            table += [off, parts[0].size, len(parts), stride]
            for pr in parts:
                vecs += [pr.nodes.ravel(), pr.weights]
            off += stride * len(parts)
        maps[14] = table[0]
        head = np.zeros(16)
        head[:15] = [-2.0, len(rungs), first, self.rtol, self.atol, 0, 0, 0, 0, 0, first,
                     self._p[11], self.n_out, 16, first]
        return np.ascontiguousarray(np.concatenate([head, np.array(table, float), maps] + vecs))

    # -- error reports ---------------------------------------------------------------
    @property
    def tolerance(self) -> dict:
        """The stated per-call accuracy: every output within ``atol + rtol max|out|``."""
        return {"rtol": self.rtol, "atol": self.atol, "norm": "max"}

    def error_report(self) -> dict:
        """The worst estimated error over the calls made since :meth:`reset_report`
        (compiled calls through :meth:`parameters`, and Python calls of
        :meth:`gradients` / :meth:`gamma_at` / :meth:`gamma_with_error`):
        ``calls``, ``max_error`` (absolute), ``max_ratio`` (error over
        ``atol + rtol max|out|``), ``over_tolerance`` (calls whose estimate missed
        the tolerance: the finest rule available could not reach it), ``rtol``,
        ``atol``, ``route`` and ``within_tolerance``."""
        return self.ladder_report(self._pl)

    def ladder_report(self, pl) -> dict:
        """:meth:`error_report` over the compiled calls counted in the ladder vector
        ``pl`` (:meth:`parameters`, or a copy of it) and the Python calls."""
        py = self._py_report
        calls, over = py["calls"], py["over_tolerance"]
        ratio, err = py["max_ratio"], py["max_error"]
        rule = self.rule.describe()
        if pl is not None:
            calls += int(pl[5])
            over += int(pl[6])
            ratio, err = max(ratio, float(pl[7])), max(err, float(pl[8]))
            rule = self.ladder[int(pl[14])]
        return {"route": "numeric", "rtol": self.rtol, "atol": self.atol, "calls": calls,
                "max_error": err, "max_ratio": ratio, "over_tolerance": over,
                "within_tolerance": over == 0, "finest_rule": rule}

    def reset_report(self):
        """Zero the counters of :meth:`error_report` (the ladder's start rung stays)."""
        self._py_report = {"calls": 0, "over_tolerance": 0, "max_ratio": 0.0, "max_error": 0.0}
        if self._pl is not None:
            self._pl[5:10] = 0.0

    @property
    def source(self) -> str:
        return self._source

    # -- evaluation ------------------------------------------------------------------
    def _x(self, values) -> np.ndarray:
        if not values:
            raise TypeError(f"give the order parameters {[n for n, _, _ in self.law.input_layout()]}")
        return self._flatten(values)

    def _run(self, x, p):
        out = np.empty(self.n_out)
        self._call(x, p, out)
        if self.mode == "stein" and not np.all(np.isfinite(out)):
            raise ValueError("Stein's identity needs a non-degenerate covariance on the "
                             "integration subspace; the order parameters given make it singular")
        return out

    def _moments(self, x, p):
        nm = 1 + self.P + self.P * self.P
        both = np.empty(nm + self.n_out)
        self._call(x, p, both)
        return both[:nm]

    def _phi_only(self, x, p):
        return self._moments(x, p)[:1]

    def _error_at(self, x, main, rule=None, run=None):
        rule = self.rule if rule is None else rule
        run = self._run if run is None else run
        if rule.parts:
            vals = np.array([run(x, self._pack(pr)) for pr in rule.parts])
            return 3 * vals.std(axis=0, ddof=1) / math.sqrt(len(rule.parts))
        if rule.coarse is not None:
            return np.abs(main - run(x, self._pack(rule.coarse)))
        return np.full_like(main, np.nan)

    # -- per-call adaptive rule (issue 12, item 3) -----------------------------------------
    def _finer(self, rule: QuadratureRule, prune: float, levels: int = 1) -> QuadratureRule:
        """The next rule of ``rule``'s ladder (more nodes, same method; RQMC ``levels``
        doublings on)."""
        if rule.method == "tensor":
            n = next((m for m in _TENSOR_LADDER if m > rule.level), None)
            if n is None or (rule.dim <= 2 and n > 96):
                # beyond ~100 Gauss-Hermite nodes per axis: trapezoid in 1-2 dimensions
                # (spectral for integrands analytic in a strip, see trapezoid_rule)
                return trapezoid_rule(rule.dim, 0, prune=prune) if rule.dim <= 2 else None
            return tensor_rule(rule.dim, n, prune=prune)
        if rule.method == "trapezoid":
            if rule.level >= 4:
                return None
            return trapezoid_rule(rule.dim, rule.level + 1, prune=prune)
        if rule.method == "sparse":
            return smolyak_rule(self.dim, rule.level + 1)
        parts = rqmc_rules(self.dim, rule.level + levels, max(len(rule.parts), 2), self.seed)
        return merge(parts, self.dim, rule.level + levels, self.seed)

    def adaptive(self, x, rtol: float | None = None, atol: float | None = None,
                 max_points: int = 2_000_000, start: QuadratureRule | None = None,
                 phi: bool = False):
        """Outputs at the flat inputs ``x`` with a rule refined *at this point*
        until every entry's error estimate is at most ``atol + rtol max_o |value_o|``
        (max norm over the outputs).

        The estimate is the difference to the previous rule of the ladder
        (tensor, sparse) or three standard errors over the scramblings (rqmc),
        as in :func:`choose_rule`; it starts from the calibrated rule, so a point
        where that rule suffices costs two evaluations. Default (neither given):
        the potential's ``rtol``, ``atol`` (:attr:`tolerance`); one given, the other
        is 0. Returns
        ``(out, error, rule)``; when ``max_points`` stops the refinement first,
        ``error`` says by how much the request is missed (and a warning is issued).
        ``start``: a rule of the ladder to start from instead of the calibrated one
        (the ``rule`` returned by an earlier call, for a run of nearby points).
        ``phi=True``: refine ``Phi`` alone (the output is ``[Phi]``).
        """
        x = np.ascontiguousarray(np.asarray(x, dtype=float).ravel())
        if x.size != self.n_in:
            raise ValueError(f"x must have {self.n_in} entries, got {x.size}")
        if rtol is None and atol is None:
            rtol, atol = self.rtol, self.atol
        rtol = 0.0 if rtol is None else float(rtol)
        atol = 0.0 if atol is None else atol
        if not (math.isfinite(rtol) and rtol >= 0):
            raise ValueError(f"rtol must be a finite number >= 0, got {rtol!r}")
        if atol is not None and not (math.isfinite(atol) and atol >= 0):
            raise ValueError(f"atol must be a finite number >= 0, got {atol!r}")
        cache = self.__dict__.setdefault("_ladder_cache", {})
        run = self._phi_only if phi else self._run
        rule = self.rule if start is None else start
        if rule.parts:
            main, err = self._over_parts(x, rule, run)
        else:
            main = run(x, self._p if rule is self.rule
                       else cache[(rule.coarse.method, rule.coarse.level)][1])
            err = self._error_at(x, main, rule, run)
        while True:
            lim = atol + rtol * float(np.max(np.abs(main)))
            if np.all(err <= lim):
                return main, err, rule
            key, levels = (rule.method, rule.level), 1
            if rule.parts:
                # RQMC: as many doublings as an error falling like 1/n needs (its best rate
                # for a smooth integrand, so no overshoot), within max_points
                ratio = float(np.max(err)) / lim if lim > 0 else 2.0
                levels = math.ceil(math.log2(min(ratio, 16.0))) if ratio > 2.0 else 1
                while levels > 1 and len(rule.parts) * 2 ** (rule.level + levels) > max_points:
                    levels -= 1
                key = ("rqmc", rule.level, levels)
            if key not in cache:
                prune = 1e-3 * lim if rule.method in ("tensor", "trapezoid") else 0.0
                nxt = self._finer(rule, prune, levels)
                if nxt is not None:
                    nxt.coarse = rule
                if nxt is None or self._evaluations(nxt) > max_points:
                    cache[key] = None
                else:   # an RQMC rule is evaluated by its scramblings (not packed merged)
                    cache[key] = (nxt, None if nxt.parts else self._pack(nxt))
            step = cache[key]
            if step is None:
                warnings.warn(f"adaptive quadrature stopped at {rule.describe()}: estimated "
                              f"error {float(np.max(err)):.3g} above the request",
                              RuntimeWarning, stacklevel=2)
                return main, err, rule
            nxt, p = step
            if nxt.parts:
                new, err = self._over_parts(x, nxt, run)
            else:
                new = run(x, p)
                err = np.abs(new - main)
            main, rule = new, nxt

    def _over_parts(self, x, rule, run):
        """An RQMC rule at ``x``: the mean over its scramblings (each evaluated once; the
        merged rule's value) and three standard errors, their maximum in every entry."""
        vals = np.array([run(x, self._pack(pr)) for pr in rule.parts])
        # each entry's own spread is noisy (an estimate from 8 values); their maximum is
        # the stable max-norm estimate the tolerance is stated in
        se = float(np.max(3 * vals.std(axis=0, ddof=1) / math.sqrt(len(rule.parts))))
        return vals.mean(axis=0), np.full(vals.shape[1], se)

    def gamma_adaptive(self, q, rtol: float | None = None, atol: float | None = None):
        """``(Gamma(q), error estimate)`` (tied) with the rule refined at ``q``
        (see :meth:`adaptive`): the requested accuracy holds at every ``q``, not
        only where the rule was calibrated (what :meth:`gamma_with_error` does with
        the potential's own tolerance)."""
        self._need("tied")
        x = self._x({"q": q})
        out, err, _ = self.adaptive(x, rtol=rtol, atol=atol)
        return out.reshape(self.K, self.K), err.reshape(self.K, self.K)

    def _unflatten(self, out):
        res = {}
        for name, shape, off in self.law.input_layout():
            v = out[off:off + shape[0] * shape[1]]
            res[name] = v.reshape(shape) if name in self.law.matrix_parameters else v.copy()
        if self._hess_name:
            res[f"hess_{self._hess_name}"] = out[self.n_in:].reshape(self.K, self.K)
        return res

    def gradients(self, with_error: bool = False, **values):
        """Gradients (symmetric convention) at the order parameters given as
        keywords (``q=`` for tied; ``m=, q1=, q2=`` untied; ``Omega=, Psi=``
        direct; ``mu=, Omega=, Psi=`` general), validated, with the rule refined
        at this point until the estimate meets :attr:`tolerance` (a warning when
        even the finest rule cannot; then the estimate says by how much). With
        ``with_error`` also returns the error estimates in the same layout."""
        x = self._x(values)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            out, err, _ = self.adaptive(x)
        lim = self.atol + self.rtol * float(np.max(np.abs(out)))
        emax = float(np.max(err))
        rep = self._py_report
        rep["calls"] += 1
        rep["max_error"] = max(rep["max_error"], emax)
        rep["max_ratio"] = max(rep["max_ratio"], emax / lim if lim > 0 else math.inf)
        if not emax <= lim:
            rep["over_tolerance"] += 1
            for w in caught:
                warnings.warn(w.message, RuntimeWarning, stacklevel=2)
        res = self._unflatten(out)
        if with_error:
            return res, self._unflatten(err)
        return res

    def phi_at(self, **values) -> float:
        """``Phi`` at the given order parameters, the rule refined at this point until
        its error estimate is within ``atol + rtol |Phi|`` (:meth:`adaptive`)."""
        x = self._x(values)
        return float(self.adaptive(x, phi=True)[0][0])

    def moments(self, **values):
        """``(Phi, E[grad loss], E[Hess loss])`` over the (merged) variables."""
        x = self._x(values)
        mom = self._moments(x, self._p)
        P = self.P
        return float(mom[0]), mom[1:1 + P].copy(), mom[1 + P:].reshape(P, P).copy()

    # tied conveniences (named *_at: ``.phi``/``.gamma`` are the closed forms of a
    # symbolic potential, which a numeric potential does not have)
    def gamma_at(self, q) -> np.ndarray:
        """``Gamma(q)`` of eq. (91) (tied)."""
        self._need("tied")
        return self.gradients(q=q)["q"]

    def gamma_with_error(self, q):
        """``(Gamma(q), error estimate)`` (tied)."""
        self._need("tied")
        g, e = self.gradients(with_error=True, q=q)
        return g["q"], e["q"]

    def _need(self, kind):
        if self.kind != kind:
            raise TypeError(f"this is a {self.kind} potential, not {kind}")

    def describe(self) -> str:
        return (f"NumericPotential({self.kind}, L={self.L}, K={self.K}: {self.rule.describe()}, "
                f"mode {self.mode}, calibrated error {self.error:.2g})")

    __repr__ = describe

    def _repr_html_(self):
        return _potential_html(f"NumericPotential ({self.kind})", self)


def numeric_potential(kind: str, loss, K: int, L: int = 1, C=None, params=(), **kw):
    """Build a :class:`NumericPotential` for the ``kind`` law."""
    return NumericPotential(make_law(kind, L, K, C), loss, params, **kw)


# -- the numeric route of the symbolic potential functions ----------------------------------
def build_potential(pot):
    """The potential a symbolic potential function returned, built if it was the numeric
    route: a :class:`~attndyn.symbolic.potential.NumericRoute` becomes the
    :class:`NumericPotential` it describes (with its notes); an exact potential
    (:class:`~attndyn.symbolic.potential.TiedPotential`,
    :class:`~attndyn.symbolic.potential.SymbolicPotential`) is returned as is."""
    from attndyn.symbolic.potential import NumericRoute
    if not isinstance(pot, NumericRoute):
        return pot
    num = NumericPotential(pot.law, pot.expr, params=pot.params, **pot.options)
    num.notes.extend(pot.notes)
    return num


def tied_potential(loss, K: int, L: int = 1, C=None, params=(), **kw):
    """:func:`attndyn.symbolic.potential.tied_potential` with the numeric route built.

    ``route="hermite"``: the symbolic Mehler series where the Hermite coefficients
    have closed forms; otherwise, for an MSE teacher-student loss with tanh, GELU,
    sigmoid, softplus or erf activations, the compiled series with a stated error
    bound (:class:`attndyn.numeric.attention.potentials.hermite.HermitePotential`, accuracy
    ``tol * max(1, |Gamma_kl|)``, variances up to ``q_max``, default 4)."""
    from attndyn.symbolic import potential as _sym
    if kw.get("route") == "hermite":
        q_max = kw.pop("q_max", 4.0)
        try:
            return _sym.tied_potential(loss, K, L, C, params, **kw)
        except RouteError as exc:
            from .hermite import hermite_potential
            if params:
                raise
            tol = kw.get("tol", 1e-8)
            try:
                return hermite_potential(loss, K, L, C, rtol=tol, atol=tol, q_max=q_max)
            except ValueError as exc2:
                raise RouteError(f"{exc}; compiled series: {exc2}") from None
    return build_potential(_sym.tied_potential(loss, K, L, C, params, **kw))


def untied_potential(loss, K: int, L: int = 1, C=None, params=(), **kw):
    """:func:`attndyn.symbolic.potential.untied_potential` with the numeric route built."""
    from attndyn.symbolic import potential as _sym
    return build_potential(_sym.untied_potential(loss, K, L, C, params, **kw))


def direct_potential(loss, K: int, L: int = 1, C=None, params=(), **kw):
    """:func:`attndyn.symbolic.potential.direct_potential` with the numeric route built."""
    from attndyn.symbolic import potential as _sym
    return build_potential(_sym.direct_potential(loss, K, L, C, params, **kw))


def general_potential(loss, K: int, L: int = 1, C=None, params=(), **kw):
    """:func:`attndyn.symbolic.potential.general_potential` with the numeric route built."""
    from attndyn.symbolic import potential as _sym
    return build_potential(_sym.general_potential(loss, K, L, C, params, **kw))


def potential(kind: str, loss, K: int, L: int = 1, C=None, params=(), **kw):
    """:func:`attndyn.symbolic.potential.potential` with the numeric route built."""
    from attndyn.symbolic import potential as _sym
    return build_potential(_sym.potential(kind, loss, K, L, C, params, **kw))


# -- what a model takes as potential=, and what integrators report (issue 25) -------------------
class CompiledExact:
    """An exact (Wick, closed-form, symbolic Hermite) tied potential with its compiled
    ``Gamma``: what a model needs from a :class:`~attndyn.symbolic.potential.TiedPotential`
    passed as ``potential=`` (exact to rounding: its error report is empty)."""

    def __init__(self, pot):
        if getattr(pot, "params", ()):
            raise TypeError("potential: this exact potential has parameters "
                            f"{[str(s) for s in pot.params]}; pass the loss with params= to the "
                            "model instead")
        self.symbolic = pot
        self.route, self.kind = pot.route, "tied"
        self.K, self.L, self.C = pot.K, pot.L, pot.C
        self._fn = None
        self._p = np.zeros(0)

    def gradient_function(self):
        if self._fn is None:
            self._fn = load_generated(self.symbolic.numba_source("grad"), "grad")
        return self._fn

    def parameters(self) -> np.ndarray:
        return self._p

    @property
    def tolerance(self) -> dict:
        return {"rtol": 0.0, "atol": 0.0, "norm": "exact (rounding only)"}

    def error_report(self) -> dict:
        return {"route": self.route, "rtol": 0.0, "atol": 0.0, "calls": None,
                "max_error": 0.0, "max_ratio": 0.0, "over_tolerance": 0,
                "within_tolerance": True}

    def _repr_html_(self):
        return _potential_html("CompiledExact", self)


def _potential_html(title, pot) -> str:
    """Notebook display of a potential: its route, stated tolerance and worst estimated
    error over the calls made so far (:func:`error_report`)."""
    from attndyn.numeric.core.display import html_summary
    rep = error_report(pot)
    tol = getattr(pot, "tolerance", None)
    return html_summary(title, {
        "route": rep.get("route"), "tolerance": tol,
        "calls so far": rep.get("calls", rep.get("surrogate_calls")),
        "worst estimated error so far": rep.get("max_error"),
        "within tolerance": rep.get("within_tolerance")}, subtitle=f"K = {pot.K}, L = {pot.L}")


def as_potential(obj, K: int, L: int = 1, C=None, tol: float | None = None, *,
                 kind: str = "tied", trajectory: bool = True, params=None):
    """What a model's ``potential=`` argument becomes (the models call this once).

    - ``None``: ``None`` (the model derives its potential from the loss);
    - a :class:`~attndyn.symbolic.potential.NumericRoute` (what
      ``attndyn.symbolic.potential.{kind}_potential(..., route="numeric")`` returns): built
      (:func:`build_potential`), then as below;
    - a :class:`NumericPotential` of the model's law ``kind``: for a tied model with
      ``trajectory`` (default), the
      :class:`~attndyn.numeric.attention.potentials.surrogate.SurrogateRoute` over it: the certified
      surrogate on the box a trajectory needs (built by :func:`run_tracked` /
      ``prepare``), the per-call quadrature outside it; ``tol`` sets the surrogate's
      ``rtol`` (default: the potential's); otherwise the potential itself;
    - an exact symbolic potential: tied, :class:`CompiledExact`; untied or direct S (a
      :class:`~attndyn.symbolic.potential.SymbolicPotential` of that kind), as is;
    - tied only: anything with ``gradient_function()`` and ``parameters()``
      (``HermitePotential``, ``Surrogate``, ``SurrogateRoute``), as is.

    ``K``, ``L`` and ``C`` (when given) must match the model's, and an exact potential's
    parameter symbols the names in ``params`` (the model's, whose values it takes): a
    ``ValueError``. A
    potential of another law, or anything else, is a ``TypeError`` that names the
    function that builds the right one.
    """
    if obj is None:
        return None
    from attndyn.symbolic.potential import NumericRoute
    if isinstance(obj, NumericRoute):
        if obj.kind != kind:
            raise TypeError(f"potential: a {obj.kind} numeric route given to a {kind} model; "
                            f"build it with {_builder(kind)}")
        obj = build_potential(obj)
    _check_shape(obj, K, L, C)
    pkind = getattr(obj, "kind", None)
    if isinstance(pkind, str) and pkind != kind:
        raise TypeError(f"potential: a {pkind} potential given to a {kind} model; build one "
                        f"with {_builder(kind)}")
    if isinstance(obj, NumericPotential):
        if trajectory and kind == "tied":
            from .surrogate import SurrogateRoute
            return SurrogateRoute(obj, rtol=tol)
        return obj
    exact = callable(getattr(obj, "numba_source", None)) and getattr(obj, "route", None) in (
        "wick", "closed", "hermite")
    if exact and params is not None and tuple(map(str, getattr(obj, "params", ()))) != tuple(params):
        raise ValueError(f"potential: its parameters {[str(p) for p in obj.params]} differ from "
                         f"the model's params= {list(params)} (whose values it takes)")
    if kind != "tied":
        if exact:
            return obj
        raise TypeError(
            f"potential for a {kind} model must be a {kind} potential (a NumericPotential or an "
            f"exact SymbolicPotential), got {type(obj).__name__}; build one with "
            f"{_builder(kind)}, or pass the loss itself and no potential")
    if callable(getattr(obj, "gradient_function", None)) and callable(getattr(obj, "parameters", None)):
        return obj
    if exact:
        return CompiledExact(obj)
    raise TypeError(
        f"potential must be a built potential (with gradient_function() and parameters()), got "
        f"{type(obj).__name__}; build one with {_builder(kind)} (quadrature, Hermite or exact "
        "route), build_potential(numeric_route), or "
        "attndyn.numeric.attention.potentials.surrogate.build_surrogate; "
        "or pass the loss itself and no potential")


def _builder(kind) -> str:
    """The call that builds a potential of a law kind (for error messages)."""
    return f"attndyn.numeric.attention.potentials.{kind}_potential(loss, K, L, tol=...)"


def _check_shape(obj, K, L, C):
    """A potential's ``K``, ``L`` and token covariance ``C`` against the model's."""
    pk = getattr(obj, "K", None)
    if pk is not None and int(pk) != int(K):
        raise ValueError(f"potential: built for K = {pk}, the model has K = {K}")
    pl = getattr(obj, "L", None)
    if pl is not None and int(pl) != int(L):
        raise ValueError(f"potential: built for L = {pl} tokens, the model has L = {L}")
    pc = getattr(obj, "C", None)
    if C is not None and pc is not None:
        a, b = np.asarray(pc, dtype=float), np.asarray(C, dtype=float)
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-12, atol=1e-14):
            raise ValueError(f"potential: built for the token covariance C = {a.tolist()}, the "
                             f"model has C = {b.tolist()}")


def error_report(potential) -> dict:
    """The potential's report of its worst estimated error over the calls made
    (``route, rtol, atol, max_error, max_ratio, over_tolerance, within_tolerance`` and
    route-specific entries); exact potentials report none. What integrators store as
    ``diagnostics["potential"]`` (:func:`record_error`)."""
    rep = getattr(potential, "error_report", None)
    if callable(rep):
        return rep()
    return {"route": getattr(potential, "route", "exact"), "max_error": 0.0,
            "over_tolerance": 0, "within_tolerance": True}


def record_error(result, potential):
    """Store :func:`error_report` in ``result.diagnostics["potential"]`` and, when an
    estimate exceeded the tolerance, say so in ``result.message`` (the status stays)."""
    rep = error_report(potential)
    result.diagnostics["potential"] = rep
    if not rep.get("within_tolerance", True) and "exceeded its tolerance" not in result.message:
        def num(key):
            v = rep.get(key)
            return float("nan") if v is None else float(v)
        extra = f", {rep['exits']} outside its range" if rep.get("exits") else ""
        result.message = (f"{result.message}; Gamma ({rep['route']} route) exceeded its tolerance "
                          f"(rtol {num('rtol'):.1e}, atol {num('atol'):.1e}) in "
                          f"{rep.get('over_tolerance', 0)} evaluation(s){extra}: worst estimated "
                          f"error {num('max_error'):.2e}")
    return rep


def run_tracked(potential, qs, run, *, rerun_above: int = 1000, max_extensions: int = 8):
    """Run a trajectory with a potential that tracks its region of overlap space.

    ``run()`` integrates and returns a result with ``diagnostics`` and ``message``;
    ``qs`` are the overlaps the trajectory starts from (``K x K`` or a sequence). For a
    :class:`~attndyn.numeric.attention.potentials.surrogate.SurrogateRoute` the surrogate's box is
    built around ``qs`` first (certified, cached on disk); when the run left the box
    more than ``rerun_above`` times (the quadrature served those calls, within its own
    tolerance) the box is grown to the exit point and the run repeated (at most
    ``max_extensions`` times), so a trajectory gets the surrogate's speed on the box it
    needs. Any other potential: ``run()`` once. In both cases :func:`record_error`
    stores the error report (``diagnostics["potential"]``, with the surrogate's
    certificate) and names a missed tolerance in the message. Returns the result.
    """
    if id(potential) in _ACTIVE:
        # a solver called by a tracked solver (method="auto" joining the flow or the limit,
        # a correction running the truncation): the outer run owns the box and the counters
        res = run()
        record_error(res, potential)
        return res
    track = callable(getattr(potential, "prepare", None)) and callable(getattr(potential, "extend", None))
    _ACTIVE.add(id(potential))
    try:
        reset = getattr(potential, "reset_report", None)
        if not track:
            if callable(reset):
                reset()
            res = run()
            record_error(res, potential)
            return res
        potential.prepare(qs)
        extensions = 0
        while True:
            potential.reset_exits()
            potential.reset_report()
            res = run()
            fallback = potential.error_report()["quadrature_calls"]
            if fallback <= rerun_above or extensions >= max_extensions \
                    or potential.exit_q is None or not potential.extend():
                break
            extensions += 1
        record_error(res, potential)
        res.diagnostics["box_extensions"] = extensions
        return res
    finally:
        _ACTIVE.discard(id(potential))


_ACTIVE: set = set()  # ids of the potentials a run_tracked call is running with
