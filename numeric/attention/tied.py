"""Tied attention models: hierarchy, compiled integration, convergence diagnostics.

``TiedModel`` joins the symbolic layer (words, eq. 11 structure, the potential
of eq. 91) and the kernels (generic sparse RHS, Dormand-Prince). Time is the
paper's ODE time ``t = 4 eta n / d`` for mini-batch online SGD with learning
rate ``eta`` after ``n`` steps (MATH.md).
"""

from __future__ import annotations

from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from attndyn.kernels.integrate import dopri5_sparse, status_message
from attndyn.kernels.moments import word_traces
from attndyn.symbolic.hierarchy import check_order, tied_structure
from attndyn.symbolic.potential import tied_potential
from attndyn.symbolic.printing import (closed_form_gamma, hierarchy_latex, hierarchy_text,
                                       tied_equations, word_label)
from attndyn.symbolic.words import canonical

from ..core.validate import _check_nonneg_float, _check_pos_float, check_model_args, check_t_eval  # noqa: F401
from ..core.compile import load_generated
from ..core.results import IntegrationError, Trajectory, TruncationNotConverged

__all__ = ["TiedModel", "TiedHierarchy", "NOT_CONVERGED"]

NOT_CONVERGED = 2


class TiedModel:
    """Tied attention ``S_k = W_k W_k^T`` (paper 003, section 3).

    Parameters
    ----------
    K : int
        Number of indices (students and teachers), ``K >= 1``.
    trainable : sequence of int
        The trainable indices in ``0..K-1`` (the others are fixed teachers).
    loss : callable
        ``loss(G) -> sympy expression`` with ``G`` the ``L x L x K`` SymPy
        array of pre-activations (``G[i, j, k]``).
    L : int
        Number of tokens.
    C : (L, L) array, optional
        Token covariance (symmetric PSD), identity by default.
    weight_decay : float
        ``gamma >= 0``; the flow gets ``-(gamma/2) S_k`` for trainable ``k``.
    potential : object, optional
        A numeric potential in place of the symbolic one: any object with
        ``gradient_function()`` (a numba function with signature
        ``attndyn.kernels.rhs.GRAD_SIG`` mapping ``q.ravel()`` to
        ``Gamma.ravel()``) and ``parameters()`` (its float64 parameter
        vector). Later potentials (Hermite, quadrature) plug in here.
    """

    def __init__(self, K: int, trainable, loss: Callable | None = None, L: int = 1, C=None,
                 weight_decay: float = 0.0, *, potential=None, params: dict | None = None):
        (self.alphabet, self.trainable, self.L, self.C,
         self.weight_decay) = check_model_args(K, trainable, L, C, weight_decay, alphabet=True)
        self.K = self.alphabet.K
        self.loss = loss
        self.params = dict(params or {})
        self._numeric_potential = potential
        if potential is None:
            if loss is None:
                raise TypeError("give a loss callable (or a numeric potential=)")
            import sympy as sp
            psyms = [sp.Symbol(str(k), real=True) for k in self.params]
            pot = tied_potential(loss, self.K, self.L, self.C, params=psyms,
                                 param_values=[float(v) for v in self.params.values()])
            if callable(getattr(pot, "gradient_function", None)):
                # no closed form: the symbolic layer handed back a numeric potential
                self._numeric_potential = pot
                self.potential = None
            else:
                self.potential = pot
        else:
            for attr in ("gradient_function", "parameters"):
                if not callable(getattr(potential, attr, None)):
                    raise TypeError(f"potential must define {attr}()")
            self.potential = None
        self._hier: dict = {}

    def __repr__(self):
        return (f"TiedModel(K={self.K}, trainable={self.trainable}, L={self.L}, "
                f"weight_decay={self.weight_decay})")

    # -- potential ----------------------------------------------------------
    @cached_property
    def gradient_function(self):
        """Compiled ``Gamma(q)``: ``f(q.ravel(), p, out)``."""
        if self._numeric_potential is not None:
            return self._numeric_potential.gradient_function()
        return load_generated(self.potential.numba_source("grad"), "grad")

    @cached_property
    def gradient_parameters(self) -> np.ndarray:
        if self._numeric_potential is not None:
            return np.ascontiguousarray(self._numeric_potential.parameters(), dtype=np.float64)
        return np.array([float(v) for v in self.params.values()], dtype=np.float64)

    def gamma(self, q) -> np.ndarray:
        """``Gamma(q)`` (eq. 91) at a numeric ``K x K`` overlap matrix."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (self.K, self.K):
            raise ValueError(f"q must have shape ({self.K}, {self.K}), got {q.shape}")
        if not np.all(np.isfinite(q)):
            raise ValueError("q must be finite")
        out = np.empty(self.K * self.K)
        self.gradient_function(np.ascontiguousarray(q.ravel()), self.gradient_parameters, out)
        return out.reshape(self.K, self.K)

    # -- hierarchy ----------------------------------------------------------
    def hierarchy(self, order: int) -> "TiedHierarchy":
        """The hierarchy (eq. 11) truncated at ``order`` (eq. 13)."""
        M = check_order(order)
        h = self._hier.get(M)
        if h is None:
            h = self._hier[M] = TiedHierarchy(self, M)
        return h

    def params_dict(self) -> dict:
        return {"model": "tied", "K": self.K, "trainable": list(self.trainable), "L": self.L,
                "C": [[float(self.C[i, j]) for j in range(self.L)] for i in range(self.L)],
                "weight_decay": self.weight_decay,
                "loss": None if self.potential is None else str(self.potential.phi),
                "params": {k: float(v) for k, v in self.params.items()}}

    def check_matrices(self, matrices, name="matrices") -> list:
        """Validate ``K`` symmetric ``d x d`` matrices ``S_k``."""
        try:
            mats = [np.asarray(m, dtype=np.float64) for m in matrices]
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a list of {self.K} square arrays") from None
        if len(mats) != self.K:
            raise ValueError(f"{name} must hold K = {self.K} matrices, got {len(mats)}")
        d = mats[0].shape[0] if mats[0].ndim == 2 else -1
        for k, m in enumerate(mats):
            if m.ndim != 2 or m.shape != (d, d):
                raise ValueError(f"{name}[{k}] must be a square d x d array with the same d "
                                 f"for all, got shape {m.shape}")
            if not np.all(np.isfinite(m)):
                raise ValueError(f"{name}[{k}] must be finite")
            if not np.allclose(m, m.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(m).max())):
                raise ValueError(f"{name}[{k}] must be symmetric (tied S_k = W_k W_k^T)")
        if d < 1:
            raise ValueError(f"{name} must be non-empty")
        return mats


class TiedHierarchy:
    """The truncated tied hierarchy of one model at one order."""

    def __init__(self, model: TiedModel, order: int):
        self.model = model
        self.order = order
        self.structure = tied_structure(model.K, model.trainable, order)
        self.consts = np.array([model.weight_decay / 2.0])

    def __repr__(self):
        return (f"TiedHierarchy(order={self.order}, n_moments={self.n_moments}, "
                f"n_terms={self.n_terms})")

    # -- structure ------------------------------------------------------------
    @property
    def words(self) -> list:
        return self.structure.words

    @property
    def n_moments(self) -> int:
        return self.structure.n_moments

    @property
    def n_terms(self) -> int:
        return self.structure.n_terms

    def index(self, word) -> int:
        return self.structure.index(word)

    @cached_property
    def names(self) -> list:
        return [word_label(w, self.model.K) for w in self.words]

    # -- printing -------------------------------------------------------------
    def equations(self, closed_form: bool = False) -> list:
        """SymPy equations ``d mu_alpha/dt = ...`` (eq. 11 truncated by eq. 13).

        With ``closed_form=True`` the ``Gamma_kl`` are written out as
        functions of the overlaps ``q`` (needs a symbolic potential).
        """
        pot = self.model.potential
        if closed_form:
            if pot is None:
                raise ValueError("closed_form=True needs a symbolic loss, not a numeric potential")
            return tied_equations(self.structure, pot.gamma, pot.q)
        return tied_equations(self.structure)

    def _closed_gamma(self, closed_form: bool, latex: bool):
        if not closed_form:
            return None
        pot = self.model.potential
        if pot is None:
            raise ValueError("closed_form=True needs a symbolic loss, not a numeric potential")
        return closed_form_gamma(self.structure, pot.gamma, pot.q, latex=latex)

    def text(self, closed_form: bool = False) -> str:
        """``d mu_alpha/dt = ...``, one line per moment, printed from the structure arrays;
        with ``closed_form`` each ``Gamma_kl`` is written out in the overlaps ``q``."""
        return "\n".join(hierarchy_text(self.structure, self._closed_gamma(closed_form, False)))

    def latex(self, closed_form: bool = False) -> str:
        """The same equations as :meth:`text` in LaTeX (``aligned``), in the paper's notation."""
        return "\n".join(hierarchy_latex(self.structure, self._closed_gamma(closed_form, True)))

    def _repr_latex_(self):
        if self.n_moments > 200:  # a notebook cell, not a book
            return None
        return "$$" + self.latex() + "$$"

    # -- initial conditions ---------------------------------------------------
    def moments_from_matrices(self, matrices) -> np.ndarray:
        """``mu_alpha = Tr(S_{a_1}...S_{a_n})/d`` for every word, with shared products."""
        mats = self.model.check_matrices(matrices)
        return word_traces(mats, self.words)

    def initial_state(self, mu0) -> np.ndarray:
        """Coerce an initial condition: an array in state order, a dict
        ``{word: value}``, a callable ``words -> values``, or a list of the
        ``K`` matrices ``S_k``."""
        n = self.n_moments
        if callable(mu0):
            y = np.asarray(mu0(self.words), dtype=np.float64)
        elif isinstance(mu0, dict):
            vals = {canonical(w, self.model.alphabet): float(v) for w, v in mu0.items()}
            missing = [w for w in self.words if w not in vals]
            if missing:
                raise ValueError(f"mu0 lacks {len(missing)} moments, e.g. {missing[:3]}")
            y = np.array([vals[w] for w in self.words])
        elif isinstance(mu0, (list, tuple)) and len(mu0) == self.model.K and all(
                np.ndim(m) == 2 for m in mu0):
            y = self.moments_from_matrices(mu0)
        else:
            try:
                y = np.asarray(mu0, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError("mu0 must be an array, a dict word -> value, a callable or "
                                "a list of matrices") from None
        if y.shape != (n,):
            raise ValueError(f"mu0 must have shape ({n},) at order {self.order}, got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("mu0 must be finite (found NaN or inf)")
        return np.ascontiguousarray(y)

    # -- integration ----------------------------------------------------------
    def rhs(self, y) -> np.ndarray:
        """``dmu/dt`` at state ``y`` (for checks; the integrator calls the kernel)."""
        from attndyn.kernels.rhs import rhs_into
        return rhs_into(self._system, np.asarray(y, dtype=np.float64))

    @cached_property
    def _system(self):
        """Everything the compiled RHS needs, in kernel argument order."""
        from types import SimpleNamespace
        s = self.structure
        return SimpleNamespace(
            gfun=self.model.gradient_function, gparams=self.model.gradient_parameters,
            gather=s.gather, consts=self.consts, indptr=s.indptr, src=s.src, ent=s.ent,
            coef=s.coef, n_grad=self.model.K * self.model.K)

    def _run(self, y0, t_eval, rtol, atol, max_steps, blowup, h_max):
        s = self._system
        ys = np.zeros((t_eval.size, y0.size))
        info = np.zeros(5, dtype=np.int64)
        tinfo = np.zeros(2)
        dopri5_sparse(y0, 0.0, t_eval, rtol, atol, 0.0, h_max, max_steps, blowup,
                      s.gfun, s.gparams, s.gather, s.consts, s.indptr, s.src, s.ent, s.coef,
                      s.n_grad, ys, info, tinfo)
        return ys, info, tinfo

    def integrate(self, mu0, t_eval, *, rtol: float = 1e-10, atol: float = 1e-12,
                  max_steps: int = 1_000_000, blowup: float = 1e100, h_max: float = np.inf,
                  check="auto", conv_tol: float = 1e-6, raise_on_failure: bool = False
                  ) -> Trajectory:
        """Integrate the truncated hierarchy from ``mu0`` and report the moments at ``t_eval``.

        Parameters
        ----------
        mu0 : array, dict, callable or list of matrices
            Initial moments (see :meth:`initial_state`). Matrices or a callable
            also give the longer moments that the convergence ladder needs.
        t_eval : array
            Output times (ODE time ``t = 4 eta n / d``), non-decreasing, >= 0.
        rtol, atol : float
            Local error tolerances of the Dormand-Prince 5(4) integrator.
        max_steps : int
            Step cap; reaching it ends with status -2.
        blowup : float
            A state entry above this in absolute value ends with status -3.
        check : None, "auto", int or sequence of int
            Truncation diagnostics (item 8): integrate also at these higher
            orders and compare the moments of length <= 2. ``"auto"`` means
            ``order + 2`` when ``mu0`` can provide the longer moments. If the
            difference exceeds ``conv_tol * max(1, |mu|)``, the result has
            status 2 and says so.
        raise_on_failure : bool
            Raise :class:`IntegrationError` (or :class:`TruncationNotConverged`)
            instead of returning a failed status.

        Returns
        -------
        Trajectory
            ``t``, ``y`` (moments x times), ``names``, ``words``, ``status``,
            ``message``, ``success``, ``moment(word)``; ``diagnostics`` holds
            step counts and, with a check, ``truncation_error`` per observable.
        """
        rtol = _check_pos_float(rtol, "rtol")
        atol = _check_pos_float(atol, "atol")
        blowup = _check_pos_float(blowup, "blowup")
        h_max = _check_pos_float(h_max, "h_max") if np.isfinite(h_max) else np.inf
        conv_tol = _check_pos_float(conv_tol, "conv_tol")
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        t_eval = check_t_eval(t_eval)
        y0 = self.initial_state(mu0)
        ys, info, tinfo = self._run(y0, t_eval, rtol, atol, int(max_steps), blowup, h_max)
        status, n_out = int(info[0]), int(info[1])
        diag = {"steps": int(info[2]), "nfev": int(info[3]), "rejected": int(info[4]),
                "t_reached": float(tinfo[0]), "order": self.order}
        message = status_message(status, float(tinfo[0]), int(info[2]), blowup)
        params = self.model.params_dict()
        params.update({"order": self.order, "rtol": rtol, "atol": atol})
        res = Trajectory(t=t_eval[:n_out].copy(), y=ys[:n_out].T.copy(), names=list(self.names),
                         words=list(self.words), kind="hierarchy", params=params, seed=None,
                         status=status, message=message, diagnostics=diag)
        if status == 0:
            ladder = self._ladder(check, mu0)
            if ladder:
                self._check_convergence(res, mu0, t_eval, ladder, rtol, atol, max_steps, blowup,
                                        h_max, conv_tol)
            elif check is None or check == "auto":
                res.message += ("; convergence in the truncation order was not checked "
                                "(pass check=order+2 with matrices or a moment function)")
        if raise_on_failure and res.status != 0:
            exc = TruncationNotConverged if res.status == NOT_CONVERGED else IntegrationError
            raise exc(res.message)
        return res

    def _ladder(self, check, mu0) -> list:
        can_extend = callable(mu0) or (isinstance(mu0, (list, tuple)) and len(mu0) == self.model.K
                                         and all(np.ndim(m) == 2 for m in mu0))
        if check is None:
            return []
        if isinstance(check, str):
            if check != "auto":
                raise ValueError(f"check must be None, 'auto', an order or a list of orders, got {check!r}")
            return [self.order + 2] if can_extend else []
        orders = [check] if isinstance(check, (int, np.integer)) else list(check)
        orders = [check_order(o, "check") for o in orders]
        for o in orders:
            if o <= self.order:
                raise ValueError(f"check orders must exceed the order {self.order}, got {o}")
        if not can_extend:
            raise ValueError("a convergence check needs mu0 as matrices or as a callable "
                             "words -> moments, to provide the longer moments")
        return orders

    def _check_convergence(self, res, mu0, t_eval, ladder, rtol, atol, max_steps, blowup,
                           h_max, conv_tol):
        low = [i for i, w in enumerate(self.words) if len(w) <= 2]
        errs = {}
        worst = 0.0
        worst_name = ""
        t_conv = float(t_eval[-1])
        for o in ladder:
            h = self.model.hierarchy(o)
            y0 = h.initial_state(mu0)
            ys, info, tinfo = h._run(y0, t_eval, rtol, atol, int(max_steps), blowup, h_max)
            if info[0] != 0:
                res.status = NOT_CONVERGED
                res.message = (f"truncation not converged: order {o} failed at t = {tinfo[0]:.4g} "
                               f"({status_message(int(info[0]), float(tinfo[0]), int(info[2]), blowup)})"
                               f" while order {self.order} did not; the truncation is not "
                               "trustworthy on this horizon (use the matrix flow)")
                res.diagnostics["ladder"] = list(ladder)
                return
            idx = np.array([h.index(w) for w in self.words])
            diff = np.abs(ys[:, idx].T - res.y)  # (n_obs, n_t)
            scale = np.maximum(1.0, np.abs(res.y))
            rel = diff / scale
            per_obs = rel.max(axis=1)
            errs[o] = per_obs
            # last output time up to which the low moments agree within conv_tol
            bad_t = np.flatnonzero(rel[low].max(axis=0) > conv_tol)
            t_ok = float(t_eval[-1]) if bad_t.size == 0 else (
                float(t_eval[bad_t[0] - 1]) if bad_t[0] > 0 else float(t_eval[0]))
            t_conv = min(t_conv, t_ok)
            j = low[int(np.argmax(per_obs[low]))]
            if per_obs[j] > worst:
                worst, worst_name = float(per_obs[j]), self.names[j]
        res.diagnostics["ladder"] = list(ladder)
        res.diagnostics["truncation_error"] = {int(o): e for o, e in errs.items()}
        res.diagnostics["truncation_error_low"] = worst
        res.diagnostics["t_converged"] = t_conv
        if worst > conv_tol:
            res.status = NOT_CONVERGED
            res.message = (f"truncation not converged: orders {self.order} and {ladder} differ by "
                           f"{worst:.3g} (relative) on {worst_name} > conv_tol {conv_tol:g}; they "
                           f"agree only up to t = {t_conv:.4g} of the output times: shorten the "
                           "horizon or use the matrix flow (attndyn.numeric.matrix_flow)")
        else:
            res.message = (f"success: converged in the truncation order (orders {self.order} "
                           f"and {ladder} agree to {worst:.2g} on the moments of length <= 2)")
