"""Tied attention models: hierarchy, compiled integration, convergence diagnostics.

``TiedModel`` joins the symbolic layer (words, eq. 11 structure, the potential
of eq. 91) and the kernels (generic sparse RHS, Dormand-Prince). Time is the
paper's ODE time ``t = 4 eta n / d`` for mini-batch online SGD with learning
rate ``eta`` after ``n`` steps (MATH.md).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from attndyn.kernels.integrate import status_message
from attndyn.kernels.moments import word_traces
from attndyn.symbolic.hierarchy import check_order, tied_structure
from attndyn.symbolic.initial import FreeInit
from attndyn.symbolic.printing import (closed_form_gamma, hierarchy_latex, hierarchy_text,
                                       tied_equations, word_label)
from attndyn.symbolic.words import canonical, canonical_words

from ..core.validate import (_check_nonneg_float, _check_pos_float, check_model_args,  # noqa: F401
                             check_max_steps, check_t_eval, real_array)
from ..core.compile import load_generated
from ..core.results import IntegrationError, Trajectory, TruncationNotConverged
from . import potcache
from .base import AttentionModel, SGDRunner, TimeScale, check_order_arg, obs_key

__all__ = ["TiedModel", "TiedHierarchy", "NOT_CONVERGED", "tied_observable_names"]

NOT_CONVERGED = 2
#: ``TiedHierarchy.integrate(..., integrator=)`` choices
INTEGRATORS = ("auto", "taylor", "dopri5", "dop853")
#: status of a run stopped by ``time_limit``
TIME_LIMIT = -4


class TiedModel(AttentionModel):
    """Tied attention ``S_k = W_k W_k^T`` (paper 003, section 3). Final (see
    :mod:`attndyn.numeric.attention.base`): it implements the whole model protocol.

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

    Time: one SGD step on the factors ``W_k`` is ``4 eta / d`` of the ODE time
    ``t = 4 eta n / d``.
    """

    kind = "tied"
    sgd_form = "factors"
    time_scales = (TimeScale("slow", "t = 4 * eta * n / d", 4.0, 1),)
    theories = ("flow", "hierarchy", "limit")
    feasible_grams = (("q",),)
    feasible_nonnegative = True
    feasible_text = "tied: q = Tr(S_k S_l)/d PSD and entrywise >= 0 (Gram matrix of PSD matrices)"
    #: ``compare(..., correction=)`` choices (issue 16, numeric/attention/noise.py)
    corrections = ("none", "noise", "noise+finite-d", "finite-d")
    tied_factors = True

    def __init__(self, K: int, trainable, loss: Callable | None = None, L: int = 1, C=None,
                 weight_decay: float = 0.0, *, potential=None, params: dict | None = None):
        # C = None (the identity) stays None until the SymPy matrix is asked for
        (self.alphabet, self.trainable, self.L, self._C,
         self.weight_decay) = check_model_args(K, trainable, L, C, weight_decay, alphabet=True,
                                               identity_as_none=True)
        self.K = self.alphabet.K
        self.loss = loss
        self.params = dict(params or {})
        self._numeric_potential = potential
        self._potential = None
        self._entry = None  # the potential's cache entry (potcache), for exact routes
        if potential is None:
            if loss is None:
                raise TypeError("give a loss callable (or a numeric potential=)")
            self._init_symbolic()
        else:
            for attr in ("gradient_function", "parameters"):
                if not callable(getattr(potential, attr, None)):
                    raise TypeError(f"potential must define {attr}()")
        self._hier: dict = {}

    def _init_symbolic(self):
        """The symbolic potential, from the disk cache when this loss was derived before.

        A traceable loss (:func:`potcache.trace_loss`) with the identity ``C`` is looked up
        without importing SymPy; the derivation (:meth:`_derive`) then runs only when
        something asks for :attr:`potential` itself (equations in closed form, theory
        rows, the surrogate). Any other loss is keyed by SymPy's ``srepr`` of ``loss(G)``.
        """
        C_text = "I" if self._C is None else None
        key = None
        if C_text is not None:
            key = potcache.potential_key(self.loss, self.K, self.L, C_text, self.params)
        if key is None:
            import sympy as sp

            from attndyn.symbolic.potential import _call_loss, g_array
            expr = _call_loss(self.loss, g_array(self.L, self.K))  # a bad loss fails here
            key = potcache.potential_key_sympy(sp.srepr(expr), self.K, self.L,
                                               "I" if self._C is None else sp.srepr(self._C),
                                               self.params)
        entry = potcache.load_entry(key)
        if entry is not None and entry.K == self.K:
            self._entry = entry
            return
        pot = self._derive()
        if pot is not None:
            self._entry = potcache.PotentialEntry(key, self.K, pot.route, str(pot.phi),
                                                  pot.numba_source("grad"))
            potcache.store_entry(self._entry)

    def _derive(self):
        """Derive the potential with SymPy; ``None`` on the numeric route (built here)."""
        import sympy as sp

        from attndyn.symbolic.potential import tied_potential
        psyms = [sp.Symbol(str(k), real=True) for k in self.params]
        pot = tied_potential(self.loss, self.K, self.L, self.C, params=psyms,
                             param_values=[float(v) for v in self.params.values()])
        if pot.route == "numeric":
            # no closed form: the symbolic layer describes the quadrature, built here
            from .potentials import build_potential
            self._numeric_potential = build_potential(pot)
            return None
        self._potential = pot
        return pot

    @property
    def C(self):
        """The token covariance as a SymPy matrix (the identity is made on first use)."""
        if self._C is None:
            from attndyn.symbolic.gaussian import check_covariance
            self._C = check_covariance(None, self.L)
        return self._C

    @property
    def potential(self):
        """The symbolic :class:`~attndyn.symbolic.potential.TiedPotential` (``None`` with a
        numeric potential); derived on first use when the model came from the cache."""
        if self._potential is None and self._numeric_potential is None \
                and self._entry is not None:
            self._derive()
        return self._potential

    def __repr__(self):
        return (f"TiedModel(K={self.K}, trainable={self.trainable}, L={self.L}, "
                f"weight_decay={self.weight_decay})")

    # -- potential ----------------------------------------------------------
    @cached_property
    def gradient_function(self):
        """Compiled ``Gamma(q)``: ``f(q.ravel(), p, out)``."""
        if self._numeric_potential is not None:
            return self._numeric_potential.gradient_function()
        if self._entry is not None:  # the same text numba_source printed (cached)
            return load_generated(self._entry.grad_source, "grad")
        return load_generated(self.potential.numba_source("grad"), "grad")

    @cached_property
    def gradient_parameters(self) -> np.ndarray:
        if self._numeric_potential is not None:
            return np.ascontiguousarray(self._numeric_potential.parameters(), dtype=np.float64)
        return np.array([float(v) for v in self.params.values()], dtype=np.float64)

    def gamma(self, q) -> np.ndarray:
        """``Gamma(q)`` (eq. 91) at a numeric ``K x K`` overlap matrix."""
        q = real_array(q, "q")
        if q.shape != (self.K, self.K):
            raise ValueError(f"q must have shape ({self.K}, {self.K}), got {q.shape}")
        if not np.all(np.isfinite(q)):
            raise ValueError("q must be finite")
        out = np.empty(self.K * self.K)
        self.gradient_function(np.ascontiguousarray(q.ravel()), self.gradient_parameters, out)
        return out.reshape(self.K, self.K)

    # -- hierarchy ----------------------------------------------------------
    def hierarchy(self, order: int, *, max_terms: int | None = None) -> "TiedHierarchy":
        """The hierarchy (eq. 11) truncated at ``order`` (eq. 13).

        Its size is estimated before it is built; above ``max_terms`` (default:
        what fits in the available memory) it raises ``ValueError``
        (:class:`~attndyn.symbolic.words.SizeError`).
        """
        M = check_order(order)
        h = self._hier.get(M)
        if h is None:
            h = self._hier[M] = TiedHierarchy(self, M, max_terms=max_terms)
        return h

    def params_dict(self) -> dict:
        if self._C is None:  # the identity, without making the SymPy matrix
            C = [[float(i == j) for j in range(self.L)] for i in range(self.L)]
        else:
            C = [[float(self._C[i, j]) for j in range(self.L)] for i in range(self.L)]
        if self._numeric_potential is not None:
            loss = None
        elif self._entry is not None:
            loss = self._entry.phi_text  # str(phi), printed once and cached
        else:
            loss = None if self.potential is None else str(self.potential.phi)
        return {"model": "tied", "K": self.K, "trainable": list(self.trainable), "L": self.L,
                "C": C,
                "weight_decay": self.weight_decay,
                "loss": loss,
                "params": {k: float(v) for k, v in self.params.items()}}

    def check_matrices(self, matrices, name="matrices") -> list:
        """Validate ``K`` real symmetric positive semi-definite ``d x d`` matrices ``S_k``
        (``S_k = W_k W_k^T``; the PSD tolerance is relative to the spectral norm)."""
        try:
            mats = [real_array(m, f"{name}[{k}]") for k, m in enumerate(matrices)]
        except TypeError as exc:
            if "real, got a complex" in str(exc):
                raise
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
        for k, m in enumerate(mats):
            lam = np.linalg.eigvalsh(0.5 * (m + m.T))
            if lam[0] < -1e-9 * max(abs(lam[0]), abs(lam[-1])):
                raise ValueError(f"{name}[{k}] must be positive semi-definite (tied S_k = W_k "
                                 f"W_k^T), its smallest eigenvalue is {lam[0]:.3g}")
        return mats

    # -- the model protocol (attndyn.numeric.attention.base) -----------------
    def observable_names(self, order: int | None = None) -> list:
        """Word traces up to ``order`` (default 2), ``p_kl = q_kl - t_k t_l``, ``loss``."""
        return tied_observable_names(self.K, self.words(check_order_arg(order, 2)))

    def check_init(self, init, name: str = "init") -> list:
        """Validate the SGD factors ``W_k``: real ``d x d_k`` arrays with a common ``d >= 2``."""
        return _check_factor_list(self, init, name)

    def _draw_init(self, rng, d, widths, scales, symmetric):
        # W_k entries N(0, scale_k^2 / d_k), so t_k ~ scale_k^2
        return [rng.standard_normal((d, widths[k])) * (scales[k] / math.sqrt(widths[k]))
                for k in range(self.K)]

    def assumptions(self, init, quick: bool = False) -> list:
        """Theorem 2's Assumptions 2.1, 2.2, 2.4 and 3 at ``init`` (factors or matrices)."""
        from .theorems.assumptions import tied_diagnostics
        return tied_diagnostics(self, init, quick)

    def sgd_runner(self, init, order=None) -> SGDRunner:
        return _TiedRunner(self, self.check_init(init), check_order_arg(order, 2))

    def matrix_flow(self, matrices, t_eval, *, order: int = 4, words=None, rtol: float = 1e-11,
                    atol: float = 1e-13, method: str = "DOP853", keep_matrices: bool = False,
                    blowup: float = 1e100, raise_on_failure: bool = False) -> Trajectory:
        """The finite-d tied matrix flow; see :func:`attndyn.numeric.attention.flow.matrix_flow`."""
        return _tied_matrix_flow(self, matrices, t_eval, order=order, words=words, rtol=rtol,
                                 atol=atol, method=method, keep_matrices=keep_matrices,
                                 blowup=blowup, raise_on_failure=raise_on_failure)

    def check_correction(self, theory, order, correction) -> None:
        """The flow takes every correction (order <= 2), the hierarchy and the limit
        ``"noise"`` only."""
        super().check_correction(theory, order, correction)
        if correction in (None, "none"):
            return
        if theory in ("hierarchy", "limit") and correction != "noise":
            raise ValueError(f"theory={theory!r} takes correction='none' or 'noise', got "
                             f"{correction!r}")
        if theory == "flow" and order is not None and order > 2:
            raise ValueError(f"correction={correction!r} with theory='flow' reports t_k, q_kl "
                             f"(order <= 2); got order={order}; theory='hierarchy' takes "
                             "correction='noise' at any order")

    def check_theory(self, theory, order):
        theory = "flow" if theory is None else theory
        if theory not in self.theories:
            raise ValueError(f"theory for a TiedModel must be 'flow', 'hierarchy' or 'limit', "
                             f"got {theory!r}")
        if order is None:
            order = 4 if theory == "hierarchy" else 2
        if theory == "hierarchy" and order < 2:
            raise ValueError("order must be >= 2 for the hierarchy comparison")
        return theory, order

    def theory(self, init, t, *, theory: str, order, check, words, **kwargs) -> Trajectory:
        """Matrix flow or truncated hierarchy from ``S_k = W_k W_k^T``, with the SGD's
        derived rows ``p_kl`` and ``loss = Phi(q)``."""
        S = [W @ W.T for W in self.check_init(init)]
        correction = kwargs.pop("correction", "none")
        if correction not in (None, "none"):  # issue 16
            from .noise import noise_corrected_flow
            self.check_correction(theory, order, correction)
            if theory in ("hierarchy", "limit"):
                return _noise_theory(self, init, S, t, theory, order, check, words, kwargs)
            if correction == "finite-d":  # the finite-width potential (degree <= 4 losses)
                from .finite_width import finite_width_flow
                opts = {k: kwargs.pop(k) for k in ("rtol", "atol", "method") if k in kwargs}
                th = finite_width_flow(self, S, t, **opts)
                return _tied_theory_derived(self, th, words)
            opts = {k: kwargs.pop(k) for k in ("rtol", "atol", "refine") if k in kwargs}
            th = noise_corrected_flow(self, S, t, eta=kwargs.pop("eta"),
                                      batch=kwargs.pop("batch"), correction=correction, **opts)
            return _tied_theory_derived(self, th, words)
        kwargs.pop("eta", None)
        kwargs.pop("batch", None)
        if theory == "flow":
            th = self.matrix_flow(S, t, order=order, **kwargs)
        elif theory == "limit":  # d -> infinity from the law of the factors (issue 9)
            from .limit import limit_theory
            th = limit_theory(self, self.check_init(init), t, order=order, **kwargs)
        else:
            kwargs.setdefault("method", "truncation")  # the truncation itself, with its status
            th = self.hierarchy(order).integrate(S, t, check=check, **kwargs)
        return _tied_theory_derived(self, th, words)


def _noise_theory(self, init, S, t, theory, order, check, words, kwargs):
    """``theory="hierarchy"`` / ``"limit"`` with ``correction="noise"``: the truncated
    hierarchy with the noise rows, from the matrices (hierarchy) or from the law of the
    factors (limit, ``d -> infinity`` at fixed ``eta d / B``; the truncation ``order``
    keyword of the limit is its longest reported word, the hierarchy runs at
    ``hierarchy_order``, default ``max(order, 8)``)."""
    from .noise import noise_hierarchy
    eta, batch = kwargs.pop("eta"), kwargs.pop("batch")
    opts = {k: kwargs.pop(k) for k in ("rtol", "atol", "conv_tol", "blowup") if k in kwargs}
    chk = None if check is None else "auto"  # the corrected system's own ladder
    if theory == "hierarchy":
        h_order = order
        mu0, d = S, None
    else:
        from .limit import law_of_factors
        h_order = kwargs.pop("hierarchy_order", max(order, 8))
        law = kwargs.pop("law", None)
        mu0 = law_of_factors(self, self.check_init(init)) if law is None else law
        d = S[0].shape[0]
    unknown = sorted(kwargs)
    if unknown:
        raise ValueError(f"correction='noise' (theory={theory!r}) does not take {unknown}")
    th = noise_hierarchy(self.hierarchy(h_order), mu0, t, eta=eta, batch=batch, d=d,
                         check=chk, **opts)
    return _tied_theory_derived(self, th, words)


def _structure_cache_dir():
    """The private per-user folder for structure arrays (``None``: do not cache)."""
    try:
        from attndyn.kernels._cachedir import private_dir
    except ImportError:  # pragma: no cover - the private-folder module is missing
        return None
    return private_dir("structures")


def _transposed(a: np.ndarray) -> np.ndarray:
    """``a.T`` as a new C-contiguous array. For a few long rows (output times x moments)
    a copy column by column is 3x faster than numpy's transposed copy (measured: 5 vs
    18 us for 2 x 5099), a fixed cost of every integrate call; the same values."""
    if a.ndim != 2 or a.shape[0] > 16:
        return a.T.copy()
    out = np.empty((a.shape[1], a.shape[0]), dtype=a.dtype)
    for j in range(a.shape[0]):
        out[:, j] = a[j]
    return out


def _json_copy(x):
    """A deep copy of a JSON-like record (dicts, lists, tuples of scalars); about 5x
    cheaper than ``copy.deepcopy``, which is a fixed cost of every integrate call."""
    if type(x) is dict:
        return {k: _json_copy(v) for k, v in x.items()}
    if type(x) is list:
        return [_json_copy(v) for v in x]
    if type(x) is tuple:
        return tuple(_json_copy(v) for v in x)
    if x is None or type(x) in (str, int, float, bool):
        return x
    import copy
    return copy.deepcopy(x)


class TiedHierarchy:
    """The truncated tied hierarchy of one model at one order."""

    def __init__(self, model: TiedModel, order: int, *, max_terms: int | None = None):
        self.model = model
        self.order = order
        self.structure = tied_structure(model.K, model.trainable, order, max_terms=max_terms,
                                        cache_dir=_structure_cache_dir())
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
        return self.structure.labels()  # vectorised from the codes (word_label's format)

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

    def text(self, closed_form: bool = False, correction: str = "none") -> str:
        """``d mu_alpha/dt = ...``, one line per moment, printed from the structure arrays;
        with ``closed_form`` each ``Gamma_kl`` is written out in the overlaps ``q``. With
        ``correction="noise"`` the mini-batch noise rows follow, each marked with its
        order ``eta d / B``, and the ``Lambda_kl`` they use (issue 16)."""
        out = "\n".join(hierarchy_text(self.structure, self._closed_gamma(closed_form, False)))
        if correction in (None, "none"):
            return out
        if correction != "noise":
            raise ValueError(f"correction must be 'none' or 'noise', got {correction!r}")
        from .noise import noise_potential, noise_text
        return (out + "\n# mini-batch noise, first order in eta d / B, leading order in 1/d:\n"
                + noise_text(self.model, self.order) + "\n" + noise_potential(self.model).text())

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
        if isinstance(mu0, FreeInit) and type(mu0).__call__ is FreeInit.__call__:
            # the same floats as mu0(self.words), once per distinct value (no word tuples)
            y = mu0.structure_moments(self.structure)
        elif callable(mu0):
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
                cplx = np.iscomplexobj(mu0)
                if not cplx:  # test first: the cast would drop the imaginary part
                    y = np.asarray(mu0, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError("mu0 must be an array, a dict word -> value, a callable or "
                                "a list of matrices") from None
            if cplx:
                raise TypeError("mu0 must be real, got a complex array")
        if y.shape != (n,):
            raise ValueError(f"mu0 must have shape ({n},) at order {self.order}, got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("mu0 must be finite (found NaN or inf)")
        return np.ascontiguousarray(y)

    # -- integration ----------------------------------------------------------
    def rhs(self, y) -> np.ndarray:
        """``dmu/dt`` at state ``y`` (for checks; the integrator calls the kernel)."""
        from attndyn.kernels.rhs import rhs_into
        y = real_array(y, "y")
        # the kernel indexes y by the structure arrays: a wrong length reads out of bounds
        if y.shape != (self.n_moments,):
            raise ValueError(f"y must have shape ({self.n_moments},) (the moments at order "
                             f"{self.order}), got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("y must be finite (found NaN or inf)")
        return rhs_into(self._system, np.ascontiguousarray(y))

    @cached_property
    def _system(self):
        """Everything the compiled kernels need: the fused structure (slot table, unsigned
        indices) of :mod:`attndyn.kernels.rhs`, validated once."""
        from types import SimpleNamespace

        from attndyn.kernels.rhs import check_system, function_pointer
        sysn = SimpleNamespace(gfun=function_pointer(self.model.gradient_function),
                               **self._system_arrays)
        check_system(sysn, self.structure.n_moments)
        return sysn

    @cached_property
    def _system_arrays(self) -> dict:
        s = self.structure
        return dict(gparams=np.ascontiguousarray(self.model.gradient_parameters, dtype=np.float64),
                    gather=s.gather, consts=np.ascontiguousarray(self.consts, dtype=np.float64),
                    indptr=s.indptr, src=s.src, slot=s.slot, slot_coef=s.slot_coef,
                    slot_ent=s.slot_ent, n_grad=self.model.K * self.model.K,
                    blocks=np.array([0, s.n_moments], dtype=np.int64))

    @cached_property
    def _taylor_system(self):
        """The same arrays for the Taylor kernel, which never calls the compiled gradient
        (it runs the Gamma program): no ``gfun``, so that a cached model integrates
        without loading the gradient's machine code (one numba cache load less)."""
        from types import SimpleNamespace

        from attndyn.kernels.rhs import check_system
        sysn = SimpleNamespace(gfun=None, **self._system_arrays)
        check_system(sysn, self.structure.n_moments)
        return sysn

    @cached_property
    def _gamma_program(self):
        """The Gamma polynomial as a Taylor program, or ``None`` (no polynomial potential).
        Checked against the compiled gradient at random overlaps before it is trusted."""
        from attndyn.kernels.taylor import check_program
        from attndyn.symbolic.hierarchy import gamma_program
        entry = self.model._entry
        if entry is not None and not isinstance(entry.program, str):
            # made, checked as below and stored by an earlier process; potcache validated
            # the entry (key, digest, check_program) when it read it
            return entry.program
        pot = self.model.potential
        if pot is None or not hasattr(pot, "gamma"):
            return None
        prog = self._make_gamma_program(pot, check_program, gamma_program)
        if entry is not None:
            entry.program = prog
            potcache.store_entry(entry)
        return prog

    def _make_gamma_program(self, pot, check_program, gamma_program):
        import sympy as sp
        subs = {sp.Symbol(str(k), real=True): sp.Float(float(v))
                for k, v in self.model.params.items()}
        prog = gamma_program(pot.gamma, pot.q, subs, self.model.K)
        if prog is None:
            return None
        K = self.model.K
        check_program(prog, K * K, K * K)
        rng = np.random.default_rng(0)
        for _ in range(3):
            a = rng.uniform(-1.0, 1.0, (K, K))
            x = np.ascontiguousarray((a + a.T).ravel())
            ref = np.empty(K * K)
            self.model.gradient_function(x, self._system_arrays["gparams"], ref)
            got = np.zeros(K * K)
            ptr, var, coef, out = prog
            for m in range(coef.size):
                got[out[m]] += coef[m] * np.prod(x[var[ptr[m]:ptr[m + 1]]])
            if not np.allclose(got, ref, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(ref).max())):
                return None  # the program does not reproduce Gamma: never use it
        return prog

    def _run(self, y0, t_eval, rtol, atol, max_steps, blowup, h_max, integrator="auto",
             time_limit=None, progress=None):
        """Run one integrator on this truncation; returns ``(ys, info, tinfo)`` and sets
        ``self._last_integrator`` to the one used (``"taylor"``, ``"dopri5"``, ``"dop853"``).

        The kernel runs in chunks of steps: between chunks the wall clock is checked
        against ``time_limit`` (status -4) and, for runs expected to take more than a few
        seconds, a progress bar is shown (``progress=None``: only on a terminal)."""
        import time

        from attndyn.kernels.integrate import run_rk
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
        name = integrator
        prog = None
        if integrator in ("auto", "taylor"):
            prog = self._gamma_program
            if prog is None:
                if integrator == "taylor":
                    raise ValueError("integrator='taylor' needs a polynomial potential (Gamma "
                                     "polynomial in q); use 'dopri5' or 'dop853'")
                name = "dopri5"
            else:
                name = "taylor"
        if name == "taylor":
            from attndyn.kernels.taylor import run_taylor, taylor_order
            self._last_taylor_order = taylor_order(rtol)

            def chunk_run(y, t_rem, t, h, n_steps):
                ys_, info_, tinfo_, yend_, _ = run_taylor(self._taylor_system, prog, y, t_rem, rtol,
                                                          n_steps, blowup, h_max, t0=t)
                return ys_, info_, tinfo_, yend_
        else:
            def chunk_run(y, t_rem, t, h, n_steps):
                return run_rk(name, self._system, y, t_rem, rtol, atol, n_steps, blowup, h_max,
                              h_init=h, t0=t)
        self._last_integrator = name
        start = time.perf_counter()
        ys = None  # the first chunk's own array when it holds every output (no copy)
        info = np.zeros(5, dtype=np.int64)
        tinfo = np.zeros(2)
        y, t, h, n_out = y0, 0.0, 0.0, 0
        chunk = min(int(max_steps), 200)
        bar = None
        if progress is None:  # only on a terminal; importing tqdm elsewhere costs ~0.3 s
            import sys
            try:
                progress = False if not sys.stderr.isatty() else None
            except (AttributeError, ValueError):
                progress = False
        try:
            while True:
                sub, inf, tin, y = chunk_run(y, t_eval[n_out:], t, h, chunk)
                k = int(inf[1])
                if ys is None and k == t_eval.size:
                    ys = sub
                else:
                    if ys is None:
                        ys = np.zeros((t_eval.size, y0.size))
                    ys[n_out:n_out + k] = sub[:k]
                n_out += k
                info[2:5] += inf[2:5]
                # the kernels report the threads they ran on last (auto_threads by size)
                self._last_threads = int(inf[5]) if inf.size > 5 else 1
                t, h = float(tin[0]), float(tin[1])
                status = int(inf[0])
                if status != -2 or info[2] >= max_steps:
                    break
                elapsed = time.perf_counter() - start
                if time_limit is not None and elapsed >= time_limit:
                    status = TIME_LIMIT
                    break
                # about half a second of work per chunk, never past max_steps
                per_step = elapsed / max(int(info[2]), 1)
                budget = 0.5 if time_limit is None else min(0.5, time_limit - elapsed)
                chunk = int(min(max(budget / max(per_step, 1e-9), 10), max_steps - info[2]))
                t_end = float(t_eval[-1])
                if bar is None and progress is not False and t > 0 and \
                        elapsed * (t_end - t) / t > 3.0:
                    from ..core.progress import Progress
                    bar = Progress(1000, f"order {self.order} ({name})", enabled=progress,
                                   unit="permille")
                if bar is not None:
                    bar.update(int(1000 * t / t_end) - bar.n)
        finally:
            if bar is not None:
                bar.close()
        info[0] = status
        info[1] = n_out
        tinfo[0] = t
        tinfo[1] = h
        self._last_wall = time.perf_counter() - start
        return ys, info, tinfo

    @cached_property
    def _params_base(self) -> dict:
        # printing the SymPy loss costs about a millisecond: once per hierarchy, not per call
        return self.model.params_dict()

    def integrate(self, mu0, t_eval, *, rtol: float = 1e-10, atol: float = 1e-12,
                  max_steps: int = 1_000_000, blowup: float = 1e100, h_max: float = np.inf,
                  check="auto", conv_tol: float = 1e-6, raise_on_failure: bool = False,
                  method: str = "auto", integrator: str = "auto",
                  time_limit: float | None = None, progress: bool | None = None,
                  correction: str = "none", eta=None, batch=None, d=None) -> Trajectory:
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
            Truncation diagnostics (item 8): integrate also at these orders
            and compare the moments of length <= 2. ``"auto"`` means
            ``order - 2`` from order 4 on (cheap, any ``mu0``), and
            ``order + 2`` below when ``mu0`` can provide the longer moments. If the
            difference exceeds ``conv_tol * max(1, |mu|)``, the result has
            status 2 and says so.
        raise_on_failure : bool
            Raise :class:`IntegrationError` (or :class:`TruncationNotConverged`)
            instead of returning a failed status.
        method : {"auto", "truncation", "flow", "limit"}
            ``"truncation"``: this truncated hierarchy (eq. 13) only.
            ``"flow"``: the exact solution of the infinite hierarchy from the
            matrices ``mu0`` (trace projection of their matrix flow).
            ``"limit"``: the ``d -> infinity`` solution from a law ``mu0``
            (:func:`attndyn.numeric.attention.limit.limit_flow`). ``"auto"``
            (default): the truncation where its convergence check holds, the
            flow (matrices) or the limit (a law) beyond;
            ``diagnostics["segments"]`` and the message say which method
            produced which time range with what error estimate.
        integrator : {"auto", "taylor", "dopri5", "dop853"}
            The ODE integrator of the truncation. ``"taylor"``: adaptive Taylor
            series of order ``ceil(-ln(rtol)/2) + 1`` (Jorba-Zou step size), for
            potentials whose Gamma is a polynomial in ``q``; ``"dopri5"`` /
            ``"dop853"``: Dormand-Prince 5(4) / 8(5,3) with ``rtol``, ``atol``.
            ``"auto"`` (default) takes Taylor where Gamma is polynomial and
            DP5(4) otherwise; ``diagnostics["integrator"]`` says which ran.
        time_limit : float, optional
            Wall-clock limit in seconds; reaching it ends with status -4 (checked
            between chunks of about half a second of steps).
        progress : bool, optional
            Progress bar for runs expected to take more than a few seconds;
            ``None`` (default) shows it only when stderr is a terminal.
        correction, eta, batch, d :
            ``"noise"``: add the mini-batch noise rows ``(eta d / B) N_alpha`` of SGD with
            learning rate ``eta`` and batch ``batch`` (issue 16; any ``L = 1`` loss,
            leading order in ``1/d``, :func:`attndyn.numeric.attention.noise.noise_hierarchy`;
            ``d`` from matrices, else given). It runs the truncation (scipy DOP853 with
            ``rtol``, ``atol``) with ``check`` ``"auto"`` or ``None``; ``method``,
            ``integrator``, ``max_steps``, ``h_max``, ``time_limit`` do not apply.

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
        if correction not in (None, "none"):
            if correction != "noise":
                raise ValueError(f"the hierarchy takes correction='none' or 'noise', got "
                                 f"{correction!r} (the finite-d potential is a matrix-flow "
                                 "correction: matrix_flow(..., correction='finite-d'))")
            if eta is None or batch is None:
                raise ValueError("correction='noise' needs the SGD's eta and batch")
            if method not in ("auto", "truncation"):
                raise ValueError(f"correction='noise' runs the truncation; method={method!r} "
                                 "does not apply")
            from .noise import noise_hierarchy
            return noise_hierarchy(self, mu0, t_eval, eta=eta, batch=batch, d=d, rtol=rtol,
                                   atol=atol, check="auto" if check == "auto" else check,
                                   conv_tol=conv_tol, blowup=blowup,
                                   raise_on_failure=raise_on_failure)
        # only +inf means "no cap"; nan and -inf are errors, not silent defaults
        h_max = np.inf if _is_pos_inf(h_max) else _check_pos_float(h_max, "h_max")
        conv_tol = _check_pos_float(conv_tol, "conv_tol")
        max_steps = check_max_steps(max_steps)
        t_eval = check_t_eval(t_eval)
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
        if time_limit is not None:
            time_limit = _check_pos_float(time_limit, "time_limit")
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress must be None, True or False, got {progress!r}")
        if not (isinstance(method, str) and method == "truncation"):
            from . import limit as _limit  # flow / limit / auto live there (a big module)
            _limit.check_method(method)
        if method in ("flow", "limit"):
            res = _limit.hierarchy_method(self, method, mu0, t_eval, rtol=rtol, atol=atol,
                                          blowup=blowup)
            if raise_on_failure and res.status != 0:
                raise IntegrationError(res.message)
            return res
        y0 = self.initial_state(mu0)
        ys, info, tinfo = self._run(y0, t_eval, rtol, atol, int(max_steps), blowup, h_max,
                                    integrator, time_limit, progress)
        status, n_out = int(info[0]), int(info[1])
        diag = {"steps": int(info[2]), "nfev": int(info[3]), "rejected": int(info[4]),
                "t_reached": float(tinfo[0]), "order": self.order,
                "integrator": self._last_integrator}
        if self._last_integrator == "taylor":
            diag["taylor_order"] = self._last_taylor_order
        diag["threads"] = getattr(self, "_last_threads", 1)
        message = status_message(status, float(tinfo[0]), int(info[2]), blowup,
                                 time_limit or 0.0)
        params = _json_copy(self._params_base)
        params.update({"order": self.order, "rtol": rtol, "atol": atol,
                       "integrator": self._last_integrator})
        res = Trajectory(t=t_eval[:n_out].copy(), y=_transposed(ys[:n_out]),
                         names=list(self.names), words=list(self.words), kind="hierarchy",
                         params=params, seed=None, status=status, message=message,
                         diagnostics=diag)
        if status == 0:
            ladder = self._ladder(check, mu0)
            if ladder:
                self._check_convergence(res, mu0, t_eval, ladder, rtol, atol, max_steps, blowup,
                                        h_max, conv_tol)
            elif check is None or check == "auto":
                # say so: a truncation can integrate cleanly far past where it is exact
                res.message += ("; convergence not checked: the truncation order was not "
                                "compared with another one"
                                + (" (check=None)" if check is None else "")
                                + " (pass check=order+2 with matrices or a moment function)")
        if method == "auto":
            res = _limit.auto_extend(self, res, mu0, t_eval, rtol=rtol, atol=atol, blowup=blowup)
        # Assumption 2.4 (gamma > gamma*) behind Corollary 2's bound: diagnostics + a note.
        # Only matrices carry C_0 (note_truncation ignores anything else), and importing the
        # theorems package costs ~0.2 s: not on the start-up path of moments or a law
        if isinstance(mu0, (list, tuple)):
            from .theorems.assumptions import note_truncation
            note_truncation(self.model, mu0, res)
        if raise_on_failure and res.status != 0:
            exc = TruncationNotConverged if res.status == NOT_CONVERGED else IntegrationError
            raise exc(res.message)
        return res

    def _ladder(self, check, mu0) -> list:
        """Orders to compare with. ``"auto"``: ``order - 2`` from order 4 on. Its
        moments are a subset of ours, so any ``mu0`` serves, and it has about 4x
        fewer moments (K = 2), so the check costs about a quarter of the run (the
        old ``order + 2`` check cost 6-11x at order 20). Below order 4,
        ``order + 2`` when ``mu0`` can provide the longer moments. Explicit
        orders may lie above the order or in ``2..order-1``."""
        can_extend = callable(mu0) or (isinstance(mu0, (list, tuple)) and len(mu0) == self.model.K
                                         and all(np.ndim(m) == 2 for m in mu0))
        if check is None:
            return []
        if isinstance(check, str):
            if check != "auto":
                raise ValueError(f"check must be None, 'auto', an order or a list of orders, got {check!r}")
            if self.order >= 4:
                return [self.order - 2]
            return [self.order + 2] if can_extend else []
        orders = [check] if isinstance(check, (int, np.integer)) else list(check)
        orders = [check_order(o, "check") for o in orders]
        for o in orders:
            if o == self.order or o < 2:
                raise ValueError(f"check orders must exceed the order {self.order} (a higher-order "
                                 f"check) or lie in 2..{self.order - 1} (a lower-order check), "
                                 f"got {o}")
        if any(o > self.order for o in orders) and not can_extend:
            raise ValueError("a convergence check needs mu0 as matrices or as a callable "
                             "words -> moments, to provide the longer moments")
        return orders

    def _check_convergence(self, res, mu0, t_eval, ladder, rtol, atol, max_steps, blowup,
                           h_max, conv_tol):
        """Compare with the orders of ``ladder`` on the common moments; status 2 when the
        moments of length <= 2 differ by more than ``conv_tol * max(1, |mu|)``. With a
        lower order the difference is an error estimate of the lower order and, as the
        truncation converges geometrically where it converges at all, a bound for ours."""
        errs = {}
        low_t = {}
        worst = 0.0
        worst_name = ""
        t_conv = float(t_eval[-1])
        for o in ladder:
            h = self.model.hierarchy(o)
            # both word lists are canonical: a dict lookup, not one canonicalisation per word
            if o > self.order:
                pos = {tuple(w): i for i, w in enumerate(h.words)}
                rows = np.arange(self.n_moments)
                cols = np.array([pos[tuple(w)] for w in self.words])
                y0 = h.initial_state(mu0)
            else:
                pos = {tuple(w): i for i, w in enumerate(self.words)}
                rows = np.array([pos[tuple(w)] for w in h.words])
                cols = np.arange(h.n_moments)
                if res.t.size and t_eval[0] == 0.0:
                    y0 = np.ascontiguousarray(res.y[rows, 0])  # our own initial state
                else:
                    y0 = np.ascontiguousarray(self.initial_state(mu0)[rows])
            ys, info, tinfo = h._run(y0, t_eval, rtol, atol, int(max_steps), blowup, h_max,
                                     getattr(self, "_last_integrator", "auto"))
            if info[0] != 0:
                res.status = NOT_CONVERGED
                res.message = (f"truncation not converged: order {o} failed at t = {tinfo[0]:.4g} "
                               f"({status_message(int(info[0]), float(tinfo[0]), int(info[2]), blowup)})"
                               f" while order {self.order} did not; the truncation is not "
                               "trustworthy on this horizon (use the matrix flow)")
                res.diagnostics["ladder"] = list(ladder)
                return
            diff = np.abs(ys[:, cols].T - res.y[rows])  # (n_common, n_t)
            rel = diff / np.maximum(1.0, np.abs(res.y[rows]))
            per_obs = np.full(self.n_moments, np.nan)
            per_obs[rows] = rel.max(axis=1)
            errs[o] = per_obs
            low = [i for i, r in enumerate(rows) if len(self.words[r]) <= 2]
            # last output time up to which the low moments agree within conv_tol
            bad_t = np.flatnonzero(rel[low].max(axis=0) > conv_tol)
            t_ok = float(t_eval[-1]) if bad_t.size == 0 else (
                float(t_eval[bad_t[0] - 1]) if bad_t[0] > 0 else float(t_eval[0]))
            t_conv = min(t_conv, t_ok)
            # the absolute difference of the moments of length <= 2 at every output time
            # (method="auto" reports it as the truncation's error on its time range)
            prev = low_t.get("diff")
            low_t["rows"] = [int(rows[i]) for i in low]
            low_t["diff"] = diff[low] if prev is None else np.maximum(prev, diff[low])
            j = int(rows[low[int(np.argmax(rel[low].max(axis=1)))]])
            if per_obs[j] > worst:
                worst, worst_name = float(per_obs[j]), self.names[j]
        res.diagnostics["truncation_error_low_t"] = low_t
        res.diagnostics["ladder"] = list(ladder)
        res.diagnostics["truncation_error"] = {int(o): e for o, e in errs.items()}
        res.diagnostics["truncation_error_low"] = worst
        res.diagnostics["t_converged"] = t_conv
        if worst > conv_tol:
            res.status = NOT_CONVERGED
            res.message = (f"truncation not converged: orders {self.order} and {ladder} differ by "
                           f"{worst:.3g} (relative) on {worst_name} > conv_tol {conv_tol:g}; they "
                           f"agree only up to t = {t_conv:.4g} of the output times: shorten the "
                           "horizon, or integrate with method='flow' (matrices) or "
                           "method='limit' (a law), or the default method='auto'")
        else:
            res.message = (f"success: converged in the truncation order (orders {self.order} "
                           f"and {ladder} agree to {worst:.2g} on the moments of length <= 2)")


# ---------------------------------------------------------------------------
# the tied parameterisation's pieces of the protocol: SGD runner, matrix flow, theory rows

def _is_pos_inf(x) -> bool:
    try:
        return bool(x == np.inf)
    except (TypeError, ValueError):
        return False


def _check_factor_list(model, init, name="init") -> list:
    """Tied factors ``W_k``: real ``d x d_k`` arrays with a common ``d >= 2``."""
    try:
        mats = [real_array(w, f"{name}[{k}]") for k, w in enumerate(init)]
    except TypeError as exc:
        if "real, got a complex" in str(exc):
            raise
        raise TypeError(f"{name} must be a list of K = {model.K} arrays W_k (d x d_k)") from None
    if len(mats) != model.K:
        raise ValueError(f"{name} must hold K = {model.K} factors W_k, got {len(mats)}")
    out = []
    d = None
    for k, w in enumerate(mats):
        if w.ndim == 1:
            w = w[:, None]
        if w.ndim != 2 or w.shape[1] < 1:
            raise ValueError(f"{name}[{k}] must be a d x d_k array (d_k >= 1), got shape {w.shape}")
        if d is None:
            d = w.shape[0]
        if w.shape[0] != d:
            raise ValueError(f"{name}[{k}] must have d = {d} rows like {name}[0], got shape "
                             f"{w.shape}")
        if not np.all(np.isfinite(w)):
            raise ValueError(f"{name}[{k}] must be finite")
        out.append(w)
    if d < 2:
        raise ValueError(f"{name}: the dimension d must be >= 2, got {d}")
    return out


def tied_observable_names(K: int, words) -> list:
    """Names of the tied SGD observables: the words, ``p_kl`` (``k <= l``, when the
    words of length 2 are there) and ``loss``."""
    names = [word_label(w, K) for w in words]
    if any(len(w) == 2 for w in words):
        names += [obs_key("p", k, l) for k in range(K) for l in range(k, K)]
    return names + ["loss"]


def _tied_derived(K, words, vals):
    """Append ``p_kl = q_kl - t_k t_l`` (eq. 15) to a vector of word traces."""
    idx = {tuple(w): i for i, w in enumerate(words)}
    if not any(len(w) == 2 for w in words):
        return vals
    t = np.array([vals[idx[(k,)]] for k in range(K)])
    p = [vals[idx[(k, l)]] - t[k] * t[l] for k in range(K) for l in range(k, K)]
    return np.concatenate([vals, p])


class _TiedRunner(SGDRunner):
    """Factors side by side in one array ``W`` (trainable slots first) for
    :func:`attndyn.kernels.sgd.tied_steps`."""

    def __init__(self, model, Ws, order):
        self.model = model
        self.order = order
        self.d = Ws[0].shape[0]
        self.widths = [w.shape[1] for w in Ws]
        tr = list(model.trainable)
        self.slots = tr + [k for k in range(model.K) if k not in tr]
        col = np.zeros(len(self.slots) + 1, dtype=np.int64)
        for a, k in enumerate(self.slots):
            col[a + 1] = col[a] + self.widths[k]
        self.col = col
        self.kidx = np.array(self.slots, dtype=np.int64)
        self.n_tr = len(tr)
        self.W = np.ascontiguousarray(np.hstack([Ws[k] for k in self.slots]))
        self.words = canonical_words(order, model.alphabet)
        self.names = tied_observable_names(model.K, self.words)
        self.macs = self.W.shape[1] + col[self.n_tr]

    def factor(self, k):
        a = self.slots.index(k)
        return self.W[:, self.col[a]:self.col[a + 1]]

    def workspace_shape(self, B, L):
        return (B, L, self.d, self.W.shape[1], int(self.col[self.n_tr]))

    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        from attndyn.kernels import sgd as _k
        _k.tied_steps(self.W, self.col, self.kidx, self.n_tr, C, F, ident, eta, gamma, B, n,
                      lossfn, lp, state, blowup, losses, info, *ws)

    def observables(self):
        K = self.model.K
        S = []
        for k in range(K):
            Wk = self.factor(k)
            S.append(Wk @ Wk.T)
        vals = word_traces(S, self.words)
        return _tied_derived(K, self.words, vals)

    def params(self):
        return {"order": self.order, "widths": list(self.widths)}


def _tied_matrix_flow(model, matrices, t_eval, *, order, words, rtol, atol, method,
                      keep_matrices, blowup, raise_on_failure) -> Trajectory:
    """dS_k/dt = -sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k, q_kl = Tr(S_k S_l)/d."""
    mats = model.check_matrices(matrices)
    t_eval = check_t_eval(t_eval)
    K = model.K
    d = mats[0].shape[0]
    if words is None:
        words = canonical_words(check_order(order), model.alphabet)
    else:
        words = [model.alphabet.check_word(w, "words") for w in words]
    tr = list(model.trainable)
    # the fast flow (issue 9, numeric/attention/fastflow.py): packed symmetric state, one
    # BLAS dsyrk/dsyr2k per trainable matrix, teachers rotated to diagonal, the factored
    # form W W^T when every trainable matrix has rank <= d/3; traces need no rotation back
    from .fastflow import tied_fast_system
    rhs, y0_fast, full, _form = tied_fast_system(model, mats)

    def unpack(y):
        return full(y, keep_matrices)

    if tr:
        from .flow import solve_flow  # imports scipy.integrate: not at start-up
        y0 = y0_fast
        sol = solve_flow(rhs, y0, t_eval, rtol=rtol, atol=atol, method=method, blowup=blowup,
                         what="tied matrix flow")
        Ys, ts, status, message = sol.y, sol.t, sol.status, sol.message
    else:
        from .flow import check_solver_args
        rtol, atol, blowup, _ = check_solver_args(rtol, atol, blowup, method)
        Ys, ts, status, message = np.zeros((0, t_eval.size)), t_eval, 0, "nothing trainable"
    out = np.empty((len(words), ts.size))
    kept = []
    for n in range(ts.size):
        S = unpack(Ys[:, n]) if tr else mats
        out[:, n] = word_traces(S, words)
        if keep_matrices:
            kept.append(np.stack(S))
    params = model.params_dict()
    params.update({"d": d, "rtol": rtol, "atol": atol, "method": method})
    res = Trajectory(t=np.asarray(ts, dtype=float), y=out,
                     names=[word_label(w, K) for w in words], words=[tuple(w) for w in words],
                     kind="matrix_flow", params=params, status=status, message=message,
                     diagnostics={"d": d})
    if keep_matrices:
        res.diagnostics["matrices"] = np.stack(kept) if kept else np.zeros((0, K, d, d))
    if raise_on_failure and status != 0:
        raise IntegrationError(message)
    return res


def _tied_theory_derived(model, res: Trajectory, words) -> Trajectory:
    """Add ``p_kl`` and ``loss = Phi(q)`` rows to a tied theory trajectory."""
    K = model.K
    names = tied_observable_names(K, words)
    rows = np.array([res.moment(w) for w in words]) if words else np.zeros((0, res.t.size))
    extra = []
    if any(len(w) == 2 for w in words):
        t = np.array([res.moment((k,)) for k in range(K)])
        for k in range(K):
            for l in range(k, K):
                extra.append(res.moment((k, l)) - t[k] * t[l])
    loss = np.full(res.t.size, np.nan)
    pot = model.potential
    if pot is not None and any(len(w) == 2 for w in words):
        import sympy as sp
        qs = [pot.q[k, l] for k in range(K) for l in range(k, K)]
        psyms = list(pot.params)
        f = sp.lambdify(qs + psyms, pot.phi, "numpy")
        qv = [res.moment((k, l)) for k in range(K) for l in range(k, K)]
        loss = np.broadcast_to(np.asarray(f(*qv, *model.gradient_parameters), float),
                               res.t.shape).copy()
    y = np.vstack([rows] + ([np.array(extra)] if extra else []) + [loss[None, :]])
    return Trajectory(t=res.t, y=y, names=names, words=[tuple(w) for w in words],
                      kind=res.kind, params=res.params, status=res.status, message=res.message,
                      diagnostics=res.diagnostics)
