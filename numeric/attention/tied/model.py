"""Tied attention models: hierarchy, compiled integration, convergence diagnostics.

``TiedModel`` joins the symbolic layer (words, eq. 11 structure, the potential
of eq. 91) and the kernels (generic sparse RHS, Dormand-Prince). Time is the
paper's ODE time ``t = 4 eta n / d`` for mini-batch online SGD with learning
rate ``eta`` after ``n`` steps (MATH.md).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attndyn.numeric.attention.potentials import cache as potcache
from attndyn.numeric.attention.base import AttentionModel, check_order_arg, SGDRunner, TimeScale
from attndyn.numeric.attention.tied.hierarchy import TiedHierarchy
from attndyn.numeric.attention.tied.runner import (check_factor_list, TiedRunner,
                                                   tied_observable_names)
from attndyn.numeric.attention.tied.theory import TiedTheory
from attndyn.numeric.core.compile import load_generated
from attndyn.numeric.core.results import Trajectory
from attndyn.numeric.core.validate import check_model_args, kernel_array
from attndyn.symbolic.hierarchy import check_order

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.core.types import ArrayLike
    from attndyn.symbolic.potential import TiedPotential

__all__ = ["TiedModel"]


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

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> model
    TiedModel(K=2, trainable=(0,), L=1, weight_decay=0.0)
    >>> model.hierarchy(2).names
    ['mu_1', 'mu_2', 'q_11', 'q_12', 'q_22']
    """

    kind = "tied"
    sgd_form = "factors"
    time_scales = (TimeScale("slow", "t = 4 * eta * n / d", 4.0, 1),)

    def __init__(self, K: int, trainable: Sequence[int], loss: Callable | None = None, L: int = 1,
                 C: ArrayLike | None = None, weight_decay: float = 0.0, *, potential: Any = None,
                 params: dict | None = None) -> None:
        # C = None (the identity) stays None until the SymPy matrix is asked for
        (self.alphabet, self.trainable, self.L, self._C,
         self.weight_decay) = check_model_args(K, trainable, L, C, weight_decay, alphabet=True,
                                               identity_as_none=True)
        self.K = self.alphabet.K
        self.loss = loss
        self.params = dict(params or {})
        if potential is not None:  # a NumericRoute built; quadrature -> certified surrogate route
            from attndyn.numeric.attention.potentials import as_potential
            potential = as_potential(potential, self.K, self.L, self._C,
                                     params=list(self.params))
        self._numeric_potential = potential
        self._potential: TiedPotential | None = None
        # the potential's cache entry (potcache), for exact routes
        self._entry: potcache.PotentialEntry | None = None
        if potential is None:
            if loss is None:
                raise TypeError("give a loss callable (or a numeric potential=)")
            self._init_symbolic()
        else:
            for attr in ("gradient_function", "parameters"):
                if not callable(getattr(potential, attr, None)):
                    raise TypeError(f"potential must define {attr}()")
        self._hier: dict = {}

    def _init_symbolic(self) -> None:
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

            from attndyn.symbolic.potential import call_loss, g_array
            expr = call_loss(self.loss, g_array(self.L, self.K))  # a bad loss fails here
            key = potcache.potential_key_sympy(sp.srepr(expr), self.K, self.L,
                                               "I" if self._C is None else sp.srepr(self._C),
                                               self.params)
        entry = potcache.load_entry(key)
        if entry is not None and entry.K == self.K:
            self._entry = entry
            return
        pot = self._derive()
        if pot is not None:
            new = potcache.PotentialEntry(key, self.K, pot.route, str(pot.phi),
                                          pot.numba_source("grad"))
            self._entry = new
            potcache.store_entry(new)

    def _derive(self) -> TiedPotential | None:
        """Derive the potential with SymPy; ``None`` on the numeric route (built here)."""
        import sympy as sp

        from attndyn.symbolic.potential import NumericRoute, tied_potential
        psyms = [sp.Symbol(str(k), real=True) for k in self.params]
        pot = tied_potential(self.loss, self.K, self.L, self.C, params=psyms,
                             param_values=[float(v) for v in self.params.values()])
        if isinstance(pot, NumericRoute) or pot.route == "numeric":
            # no closed form: the symbolic layer describes the quadrature, built here
            from attndyn.numeric.attention.potentials import as_potential
            self._numeric_potential = as_potential(pot, self.K, self.L)
            return None
        self._potential = pot
        return pot

    @property
    def C(self) -> Any:
        """The token covariance as a SymPy matrix (the identity is made on first use)."""
        if self._C is None:
            from attndyn.symbolic.gaussian import check_covariance
            self._C = check_covariance(None, self.L)
        return self._C

    @property
    def potential(self) -> TiedPotential | None:
        """The symbolic :class:`~attndyn.symbolic.potential.TiedPotential` (``None`` with a
        numeric potential); derived on first use when the model came from the cache."""
        if self._potential is None and self._numeric_potential is None \
                and self._entry is not None:
            self._derive()
        return self._potential

    @property
    def numeric_potential(self) -> Any:
        """The numeric potential in use (given as ``potential=`` or built for a loss on the
        numeric route; ``None`` on the exact routes)."""
        return self._numeric_potential

    @property
    def potential_route(self) -> str | None:
        """The route of ``Gamma`` (``"surrogate"``, ``"numeric"``, ``"hermite"``, ``"wick"``,
        ``"closed"``, ...) without forcing a derivation: ``None`` while a cached exact
        potential has not been loaded."""
        if self._numeric_potential is not None:
            return getattr(self._numeric_potential, "route", type(self._numeric_potential).__name__)
        if self._potential is not None:
            return self._potential.route
        if self._entry is not None:
            return self._entry.route
        return None

    def _repr_html_(self) -> str:
        """Notebook display: the model's arguments and its potential's route once derived
        (without deriving it)."""
        from attndyn.numeric.core.display import html_summary
        return html_summary("TiedModel", {
            "K": self.K, "trainable": list(self.trainable), "L": self.L,
            "C": "identity" if self._C is None else [[float(self._C[i, j]) for j in range(self.L)]
                                                     for i in range(self.L)],
            "weight_decay": self.weight_decay, "corrections": list(TiedTheory.corrections),
            "potential route": self.potential_route or "not derived yet"})

    def __repr__(self) -> str:
        return (f"TiedModel(K={self.K}, trainable={self.trainable}, L={self.L}, "
                f"weight_decay={self.weight_decay})")

    # -- potential ----------------------------------------------------------
    @cached_property
    def gradient_function(self) -> Callable[..., Any]:
        """Compiled ``Gamma(q)``: ``f(q.ravel(), p, out)``."""
        fn: Callable[..., Any]
        if self._numeric_potential is not None:
            fn = self._numeric_potential.gradient_function()
        elif self._entry is not None:  # the same text numba_source printed (cached)
            fn = load_generated(self._entry.grad_source, "grad")
        else:
            pot = self.potential
            assert pot is not None  # a model has a numeric potential, a cache entry or this
            fn = load_generated(pot.numba_source("grad"), "grad")
        return fn

    @cached_property
    def gradient_parameters(self) -> NDArray[np.float64]:
        if self._numeric_potential is not None:
            return np.ascontiguousarray(self._numeric_potential.parameters(), dtype=np.float64)
        return np.array([float(v) for v in self.params.values()], dtype=np.float64)

    def gamma(self, q: ArrayLike) -> NDArray[np.float64]:
        """``Gamma(q)`` (eq. 91) at a numeric ``K x K`` overlap matrix."""
        # read-only or memory-mapped q is copied into the array the kernel's signature takes
        q = kernel_array(q, "q", shape=(self.K, self.K), finite=True)
        out = np.empty(self.K * self.K)
        self.gradient_function(q.ravel(), self.gradient_parameters, out)
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

    def check_matrices(self, matrices: Sequence[ArrayLike], name: str = "matrices"
                       ) -> list[np.ndarray]:
        """Validate ``K`` real symmetric positive semi-definite ``d x d`` matrices ``S_k``
        (``S_k = W_k W_k^T``; the PSD tolerance is relative to the spectral norm)."""
        try:
            mats = [kernel_array(m, f"{name}[{k}]") for k, m in enumerate(matrices)]
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
        if d < 1:  # before the checks below reduce over the entries
            raise ValueError(f"{name} must be non-empty")
        for k, m in enumerate(mats):
            if not np.all(np.isfinite(m)):
                raise ValueError(f"{name}[{k}] must be finite")
            if not np.allclose(m, m.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(m).max())):
                raise ValueError(f"{name}[{k}] must be symmetric (tied S_k = W_k W_k^T)")
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

    def check_init(self, init: Sequence[ArrayLike], name: str = "init") -> list[np.ndarray]:
        """Validate the SGD factors ``W_k``: real ``d x d_k`` arrays with a common ``d >= 2``."""
        return check_factor_list(self, init, name)

    def _draw_init(self, rng: np.random.Generator, d: int, widths: list[int],
                   scales: list[float], symmetric: bool) -> list[Any]:
        # W_k entries N(0, scale_k^2 / d_k), so t_k ~ scale_k^2
        return [rng.standard_normal((d, widths[k])) * (scales[k] / math.sqrt(widths[k]))
                for k in range(self.K)]

    def sgd_runner(self, init: Sequence[ArrayLike], order: int | None = None) -> SGDRunner:
        return TiedRunner(self, self.check_init(init), check_order_arg(order, 2))

    @cached_property
    def theory(self) -> TiedTheory:
        """The :class:`~attndyn.numeric.attention.tied.theory.TiedTheory` of this model."""
        return TiedTheory(self)

    def matrix_flow(self, matrices: Sequence[ArrayLike], t_eval: ArrayLike, **options: Any
                    ) -> Trajectory:
        """The finite-d tied matrix flow (``self.theory.matrix_flow``); see
        :func:`attndyn.numeric.attention.flow.matrix_flow`."""
        return self.theory.matrix_flow(matrices, t_eval, **options)
