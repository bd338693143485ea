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
   requested accuracy ``tol`` is met (:func:`attndyn.numeric.attention.quadrature.choose_rule`);
   ``error`` is that estimate and :meth:`NumericPotential.gradients` with
   ``with_error=True`` re-estimates it at any point;
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

import numpy as np
import sympy as sp

from attndyn.kernels.quadrature import law_eval, pack_header
from attndyn.symbolic.codegen import njit_source
from attndyn.symbolic.gaussian import GaussianLaw, make_law
from attndyn.symbolic.hermite import normalise_nonsmooth
from attndyn.symbolic.parse import as_sympy
from attndyn.symbolic.potential import RouteError, safe_powers

from ..core.compile import load_generated
from .quadrature import (METHODS, QuadratureRule, _merge, choose_rule, rqmc_rules, smolyak_rule,
                         tensor_rule, trapezoid_rule)

_TENSOR_LADDER = (3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112,
                  128, 160, 192, 256, 320)

__all__ = ["NumericPotential", "numeric_potential", "check_continuity", "build_potential",
           "tied_potential", "untied_potential", "direct_potential", "general_potential",
           "potential"]

_PROJ = {"tied": 1, "untied": 2, "direct": 3, "general": 0}

_WRAPPER = '''

import numpy as np

from attndyn.kernels.quadrature import law_eval


@numba.njit(GRAD_SIG, cache=True)
def grad(x, p, out):
    """Symmetric-convention gradient of the potential, by compiled quadrature."""
    ws = np.empty(int(p[11]))
    law_eval(x, p, out, ws, integrand)
'''


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
    from ..core.validate import resolve_seed
    return int(resolve_seed(seed).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


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
        Requested accuracy of Phi and of every gradient entry, absolute
        relative to ``max(1, |value|)``, at the reference point.
    method : "auto", "tensor", "sparse" or "rqmc"
        ``auto`` chooses by the integration dimension (see
        :func:`attndyn.numeric.attention.quadrature.choose_rule`), and RQMC in Stein mode
        (a jumping integrand defeats the Gauss-Hermite error estimate).
    seed : int
        Seed of the RQMC scramblings (deterministic for a given seed).
    reference : dict, array, or a list of them
        Order parameters where the rule is calibrated (default: identity
        covariances, zero means); with a list, the rule is refined until the
        accuracy holds at every point.
    mode : "auto", "hessian" or "stein"
        How ``E[Hess loss]`` is computed (``auto``: Hessian if the gradient is
        continuous, Stein's identity with first derivatives otherwise).
    """

    route = "numeric"

    def __init__(self, law, loss, params=(), param_values=None, *, tol: float = 1e-8,
                 method: str = "auto", seed: int = 0, reference=None, mode: str = "auto",
                 max_points: int = 400_000, hessian: bool = True, L: int = 1, K: int | None = None,
                 C=None):
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
        self.law = law
        self.kind = law.kind
        self.K, self.L, self.C = law.K, law.L, law.C
        self.params = tuple(params)
        self.notes: list = []
        self.tol = float(tol)
        self.seed = _int_seed(seed)
        if callable(loss) and not isinstance(loss, sp.Basic):
            from attndyn.symbolic.gaussian import g_array
            loss = loss(g_array(self.L, self.K))
        expr = law.reduce_loss(as_sympy(loss, "loss"))
        variables = list(law.variables)
        extra = expr.free_symbols - set(variables) - set(self.params)
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
        e, grads, hess_ok = check_continuity(expr, variables)
        if mode == "hessian" and not hess_ok:
            raise RouteError("mode='hessian': the gradient of this loss jumps (ReLU, absolute "
                             "value), so its Hessian contains distributions; use mode='stein'")
        if mode == "auto":
            mode = "hessian" if (hess_ok and len(variables) <= 16) else "stein"
        self.mode = mode
        P = len(variables)
        outs = list(grads)
        if mode == "hessian":
            for a in range(P):
                for b in range(a, P):
                    outs.append(_drop_delta(sp.diff(grads[a], variables[b])))
        src = njit_source("integrand", variables, self.params, [safe_powers(o) for o in outs],
                          value=safe_powers(e),
                          doc=f"loss, gradient{' and Hessian' if mode == 'hessian' else ''} "
                              f"of a {law.kind} potential integrand")
        self._source = src
        self._integrand = load_generated(src, "integrand")
        self._grad_fn = None
        self.P = P
        S, M = law.linear_maps()
        self._S, self._M = S, M
        self.n_in = S.shape[0]
        self.W = self._subspace()
        self.dim = self.W.shape[0]
        self._R = self._output_map(hessian)
        self.n_out = self._R.shape[0]
        self.x_refs = self._references(reference)
        self.x_ref = self.x_refs[0]

        if method == "auto" and mode == "stein":
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

        self.rule = choose_rule(self.dim, evaluate, tol=self.tol, method=method, seed=self.seed,
                                max_points=max_points)
        self.error = float(self.rule.error)
        self.method = self.rule.method
        self._p = self._pack(self.rule)
        if mode == "stein":
            self.notes.append("Hessian expectation by Stein's identity (first derivatives)")

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

    def _pack(self, rule: QuadratureRule):
        head = pack_header(self.P, self.dim, rule.size, self.n_in, self.n_out,
                           0 if self.mode == "hessian" else 1, self._ip.size, _PROJ[self.kind],
                           self.K)
        return np.ascontiguousarray(np.concatenate([
            head, self._S.ravel(), self._M.ravel(), self.W.ravel(), rule.nodes.ravel(),
            rule.weights, self._R.ravel(), self._ip]))

    def _call(self, x, p, out):
        """The kernel called from Python with the integrand as a first-class value."""
        law_eval(x, p, out, np.empty(int(p[11])), self._integrand)

    # -- TiedModel interface -----------------------------------------------------------
    def gradient_function(self):
        """The compiled ``grad(x, p, out)`` (signature ``GRAD_SIG``): flat order
        parameters in, gradient in every input out (``q.ravel() -> Gamma.ravel()``
        for tied), plus the ``m``-Hessian for untied.

        It is a small generated wrapper around the kernel; numba cannot cache a
        function holding the address of a first-class function, so it is
        compiled once per process (about a second) on the first call here.
        """
        if self._grad_fn is None:
            import warnings

            from numba.core.errors import NumbaWarning
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*Cannot cache compiled function.*",
                                        category=NumbaWarning)
                self._grad_fn = load_generated(self._source + _WRAPPER, "grad")
        return self._grad_fn

    def parameters(self) -> np.ndarray:
        """The float64 parameter vector of :meth:`gradient_function`."""
        return self._p

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

    def _error_at(self, x, main, rule=None):
        rule = self.rule if rule is None else rule
        if rule.parts:
            vals = np.array([self._run(x, self._pack(pr)) for pr in rule.parts])
            return 3 * vals.std(axis=0, ddof=1) / math.sqrt(len(rule.parts))
        if rule.coarse is not None:
            return np.abs(main - self._run(x, self._pack(rule.coarse)))
        return np.full_like(main, np.nan)

    # -- per-call adaptive rule (issue 12, item 3) -----------------------------------------
    def _finer(self, rule: QuadratureRule, prune: float) -> QuadratureRule:
        """The next rule of ``rule``'s ladder (more nodes, same method)."""
        if rule.method == "tensor":
            n = next((m for m in _TENSOR_LADDER if m > rule.level), None)
            if n is None or (self.dim <= 2 and n > 96):
                # beyond ~100 Gauss-Hermite nodes per axis: trapezoid in 1-2 dimensions
                # (spectral for integrands analytic in a strip, see trapezoid_rule)
                return trapezoid_rule(self.dim, 0, prune=prune) if self.dim <= 2 else None
            return tensor_rule(self.dim, n, prune=prune)
        if rule.method == "trapezoid":
            if rule.level >= 4:
                return None
            return trapezoid_rule(self.dim, rule.level + 1, prune=prune)
        if rule.method == "sparse":
            return smolyak_rule(self.dim, rule.level + 1)
        parts = rqmc_rules(self.dim, rule.level + 1, max(len(rule.parts), 2), self.seed)
        return _merge(parts, self.dim, rule.level + 1, self.seed)

    def adaptive(self, x, rtol: float = 0.0, atol: float | None = None,
                 max_points: int = 2_000_000, start: QuadratureRule | None = None):
        """Outputs at the flat inputs ``x`` with a rule refined *at this point*
        until every entry's error estimate is at most ``atol + rtol |value|``.

        The estimate is the difference to the previous rule of the ladder
        (tensor, sparse) or three standard errors over the scramblings (rqmc),
        as in :func:`choose_rule`; it starts from the calibrated rule, so a point
        where that rule suffices costs two evaluations. Default ``atol``: the
        construction ``tol`` times ``max(1, |value|)``. Returns
        ``(out, error, rule)``; when ``max_points`` stops the refinement first,
        ``error`` says by how much the request is missed (and a warning is issued).
        ``start``: a rule of the ladder to start from instead of the calibrated one
        (the ``rule`` returned by an earlier call, for a run of nearby points).
        """
        x = np.ascontiguousarray(np.asarray(x, dtype=float).ravel())
        if x.size != self.n_in:
            raise ValueError(f"x must have {self.n_in} entries, got {x.size}")
        rtol = float(rtol)
        if not (math.isfinite(rtol) and rtol >= 0):
            raise ValueError(f"rtol must be a finite number >= 0, got {rtol!r}")
        if atol is not None and not (math.isfinite(atol) and atol >= 0):
            raise ValueError(f"atol must be a finite number >= 0, got {atol!r}")
        cache = self.__dict__.setdefault("_ladder_cache", {})
        rule = self.rule if start is None else start
        if rule is self.rule:
            main = self._run(x, self._p)
        else:
            main = self._run(x, cache[(rule.coarse.method, rule.coarse.level)][1])
        err = self._error_at(x, main, rule)
        while True:
            lim = (self.tol * max(1.0, float(np.max(np.abs(main)))) if atol is None else atol)
            lim = lim + rtol * np.abs(main)
            if np.all(err <= lim):
                return main, err, rule
            key = (rule.method, rule.level)
            if key not in cache:
                prune = 1e-3 * float(np.min(lim)) if rule.method in ("tensor", "trapezoid") else 0.0
                nxt = self._finer(rule, prune)
                if nxt is not None:
                    nxt.coarse = rule
                if nxt is None or nxt.size > max_points:
                    cache[key] = None
                else:
                    cache[key] = (nxt, self._pack(nxt))
            step = cache[key]
            if step is None:
                import warnings
                warnings.warn(f"adaptive quadrature stopped at {rule.describe()}: estimated "
                              f"error {float(np.max(err)):.3g} above the request",
                              RuntimeWarning, stacklevel=2)
                return main, err, rule
            nxt, p = step
            new = self._run(x, p)
            if nxt.parts:
                vals = np.array([self._run(x, self._pack(pr)) for pr in nxt.parts])
                err = 3 * vals.std(axis=0, ddof=1) / math.sqrt(len(nxt.parts))
            else:
                err = np.abs(new - main)
            main, rule = new, nxt

    def gamma_adaptive(self, q, rtol: float = 0.0, atol: float | None = None):
        """``(Gamma(q), error estimate)`` (tied) with the rule refined at ``q``
        (see :meth:`adaptive`): the requested accuracy holds at every ``q``, not
        only where the rule was calibrated."""
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
        direct; ``mu=, Omega=, Psi=`` general), validated. With ``with_error``
        also returns the error estimates in the same layout."""
        x = self._x(values)
        out = self._run(x, self._p)
        res = self._unflatten(out)
        if with_error:
            return res, self._unflatten(self._error_at(x, out))
        return res

    def phi_at(self, **values) -> float:
        """``Phi`` at the given order parameters."""
        x = self._x(values)
        return float(self._moments(x, self._p)[0])

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
    bound (:class:`attndyn.numeric.attention.hermite.HermitePotential`, accuracy
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
