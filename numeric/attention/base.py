"""The model protocol: what every parameterisation of paper 003 implements.

An attention-indexed model (paper 003, section 2) has ``K`` indices, each an
attention matrix ``S_k`` parameterised one way or another: tied ``S_k = W_k
W_k^T`` (:class:`~attndyn.TiedModel`, section 3), direct ``S_k``
(:class:`~attndyn.SModel`, appendix E), untied ``S_k = U_k V_k^T``
(:class:`~attndyn.UntiedModel`, section 4). The drivers (:func:`~attndyn.sgd`,
:func:`~attndyn.numeric.matrix_flow`, :func:`~attndyn.numeric.compare`) are
written once, against :class:`AttentionModel`, and never ask which
parameterisation they hold: everything that differs is a method here.

What a model provides, and which driver calls it:

==============================  ==============================================  =================
member                          meaning                                         called by
==============================  ==============================================  =================
``kind``                        a label (``"tied"``, ``"s"``...) for params     every driver
``K, trainable, L, C,``         the constructor's validated arguments           every driver
``weight_decay, loss, params``
``alphabet``, ``words(n)``      letters of the words (``None``: no words)       sgd, flow
``observable_names(order)``     the SGD observables, ``"loss"`` last            sgd, compare
``potential`` and friends       ``Phi`` and its compiled gradient (attributes)  flow, theory
``hierarchy(order)``            truncated hierarchy (capability)                compare, CLI
``matrix_flow(S, t, ...)``      finite-d deterministic flow (capability)        flow.matrix_flow
``check_matrices(S, name)``     validate a flow state                           flow, theory
``check_init(init, name)``      validate SGD weights                            sgd runner
``gaussian_init(d, ...)``       seeded independent Gaussian weights             sgd_runs, compare
``sgd_runner(init, order)``     an :class:`SGDRunner`: kernel, arrays, obs.     sgd
``time_scales``                 the ODE times of one SGD step                   sgd, time_step
``theories``, ``theory(...)``   the theory trajectory on the SGD's time scale   compare
``params_dict()``               JSON-able record of the model                   every result
==============================  ==============================================  =================

A capability a model lacks (a hierarchy, a matrix flow, a theory) raises
:class:`CapabilityError` (a ``NotImplementedError`` and a ``ValueError``)
through the base class, with the model's name in the message.

Classes are abstract or final, as in equinox: :class:`AttentionModel` and
:class:`SGDRunner` are abstract; every concrete model is final (it is never
subclassed; a variant is a new subclass of :class:`AttentionModel`), which
:meth:`AttentionModel.__init_subclass__` enforces. The only ``isinstance`` check
on models in the package is :func:`check_model`, here.
"""

from __future__ import annotations

import abc
import inspect
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from attndyn.numeric.core.validate import resolve_seed  # noqa: F401  (re-exported: part of the protocol's API)
from attndyn.symbolic.hierarchy import check_order
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

__all__ = ["AttentionModel", "SGDRunner", "TimeScale", "CapabilityError", "check_model",
           "check_order_arg", "resolve_seed", "obs_key"]


def obs_key(name: str, *indices) -> str:
    """Observable name as :meth:`Trajectory.observable` builds it (0-based indices)."""
    if not indices:
        return name
    if all(i < 9 for i in indices):
        return f"{name}_" + "".join(str(i + 1) for i in indices)
    return f"{name}_" + "_".join(str(i + 1) for i in indices)


class CapabilityError(NotImplementedError, ValueError):
    """The model does not have this capability (hierarchy, matrix flow, theory)."""


@dataclass(frozen=True)
class TimeScale:
    """ODE time per SGD step, ``factor * eta / d**power``, with its printed form.

    Tied ``t = 4 eta n / d`` is ``TimeScale("slow", "t = 4 * eta * n / d", 4.0, 1)``.
    """

    name: str
    label: str
    factor: float
    power: int

    def step(self, eta: float, d: int) -> float:
        # 1.0 * eta and eta / d**0 are exact, so every scale shares one expression
        return self.factor * eta / d ** self.power


def check_model(model, name: str = "model") -> "AttentionModel":
    """``model`` if it implements the protocol, else a TypeError naming ``name``."""
    if not isinstance(model, AttentionModel):
        raise TypeError(f"{name} must be an attention model (TiedModel, UntiedModel, SModel or "
                        f"another AttentionModel subclass), got {type(model).__name__}")
    return model


def check_order_arg(order, default):
    """``order`` as an int ``>= 1`` (``None`` gives ``default``)."""
    if order is None:
        return default
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise TypeError(f"order must be an int >= 1, got {order!r}")
    if order < 1:
        raise ValueError(f"order must be an int >= 1, got {order}")
    return int(order)


class SGDRunner(abc.ABC):
    """One SGD run of one model: the weights laid out for its step kernel.

    Built by :meth:`AttentionModel.sgd_runner` from validated weights (a copy:
    the caller's arrays are never modified). Attributes the driver reads:

    - ``d`` (dimension), ``names`` (observables, ``"loss"`` last), ``words``
      (the word of each leading row, or ``None``), ``inv`` (the alphabet's
      involution for :class:`~attndyn.numeric.core.results.Trajectory`, or
      ``None``), ``macs`` (multiply-adds per sample and token, for the block size);
    - :meth:`workspace_shape`, :meth:`step`, :meth:`observables`, :meth:`params`.
    """

    d: int
    names: list
    words: list | None = None
    inv = None
    macs: int = 1

    @abc.abstractmethod
    def workspace_shape(self, B: int, L: int) -> tuple:
        """``(B, L, d, n_cols, n_grad_cols)`` of :func:`attndyn.kernels.sgd.workspace`."""

    @abc.abstractmethod
    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        """Run ``n`` steps of the model's kernel in place (status in ``info``)."""

    @abc.abstractmethod
    def observables(self) -> np.ndarray:
        """The observables at the current weights, ``names[:-1]`` (no loss)."""

    def params(self) -> dict:
        """Run parameters recorded in ``result.params`` (``order``, ``widths``...)."""
        return {}


class AttentionModel(abc.ABC):
    """Abstract base of every parameterisation of paper 003 (see the module docstring).

    Subclasses set, in ``__init__``, ``K``, ``trainable`` (tuple), ``L``, ``C``
    (SymPy matrix), ``weight_decay``, ``loss`` (``G -> sympy expression`` or
    ``None``), ``params`` (dict) and ``alphabet`` (or ``None``), and define the
    class attributes ``kind`` (label) and ``time_scales`` (the first is the
    default). Every concrete subclass is final.
    """

    kind: ClassVar[str] = "abstract"
    time_scales: ClassVar[tuple] = ()
    theories: ClassVar[tuple] = ()
    #: the finite-learning-rate / finite-width corrections its theory takes
    #: (``compare(..., correction=)``, issue 16); ``"none"`` always
    corrections: ClassVar[tuple] = ("none",)
    #: SGD moves every trainable ``S_k = W_k W_k^T`` by ``W_k' = (c I - eta A_k) W_k`` with a
    #: symmetric batch matrix ``A_k`` (what the tied formulas of noise.py and
    #: finite_width.py assume)
    tied_factors: ClassVar[bool] = False
    #: the form of the SGD weights, which picks the array-API step (xp_sgd.py):
    #: "factors" (W_k), "pairs" (U_k, V_k), "matrices" (S_k); None: none there
    sgd_form: ClassVar[str | None] = None
    alphabet = None
    #: The feasible set Q of Corollary 1 as data (read by ``theorems/landscape.py``): the
    #: Gram matrices of order parameters that must be PSD, each ``("q",)`` (the matrix of
    #: the symbols ``q_kl`` itself) or ``("P", "R", s)`` (``(P + s R)/2``); whether every
    #: free entry is ``>= 0`` as well; the prefixes of unconstrained order parameters; the
    #: set in words. Empty: no feasible set is known for the parameterisation.
    feasible_grams: ClassVar[tuple] = ()
    feasible_nonnegative: ClassVar[bool] = False
    feasible_free: ClassVar[tuple] = ()
    feasible_text: ClassVar[str] = ""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for base in cls.__mro__[1:]:
            if base is AttentionModel or not issubclass(base, AttentionModel):
                continue
            if not inspect.isabstract(base):
                raise TypeError(f"{base.__name__} is final (a concrete AttentionModel); "
                                f"{cls.__name__} must subclass AttentionModel instead")

    # -- letters, words, observables -------------------------------------------
    def words(self, order: int) -> list:
        """Canonical words over the model's alphabet up to length ``order``."""
        if self.alphabet is None:
            raise CapabilityError(f"{type(self).__name__} has no words (its theory closes in "
                                  "named order parameters)")
        return canonical_words(check_order(order), self.alphabet)

    def word_name(self, word) -> str:
        """Printed name of a word (``mu_112``, ``q_12``...)."""
        return word_label(word, self.K)

    @abc.abstractmethod
    def observable_names(self, order: int | None = None) -> list:
        """Names of the SGD observables (``"loss"`` last), the rows of :func:`~attndyn.sgd`."""

    # -- theory capabilities ---------------------------------------------------
    def landscape_potential(self):
        """The closed-form potential whose ``phi`` Corollary 1 minimises over the feasible
        set (``None`` when the loss takes a numeric route)."""
        return getattr(self, "potential", None)

    def assumptions(self, init, quick: bool = False) -> list:
        """The assumptions of the theorem behind this model's theory, checked at the
        initial weights ``init``: a list of
        :class:`~attndyn.numeric.attention.theorems.assumptions.Verdict` (empty when the
        parameterisation has no diagnostics). ``quick``: the cheap versions (what
        ``compare`` runs)."""
        return []

    def hierarchy(self, order: int):
        """The truncated moment hierarchy at ``order`` (a capability)."""
        raise CapabilityError(f"{type(self).__name__} has no moment hierarchy")

    def matrix_flow(self, matrices, t_eval, **options):
        """The finite-d deterministic matrix flow from ``matrices`` (a capability).

        Returns a :class:`~attndyn.numeric.core.results.Trajectory` of the model's
        observables with ``status`` and ``message`` (blow-up: -3)."""
        raise CapabilityError(f"{type(self).__name__} has no matrix flow")

    def check_correction(self, theory, order, correction) -> None:
        """Refuse, before any SGD runs, a ``correction`` that ``theory`` does not take
        (``compare``); models whose theories differ override it."""
        if correction not in self.corrections:
            raise ValueError(f"correction={correction!r} is not available for "
                             f"{type(self).__name__}; it has {list(self.corrections)}")

    def check_theory(self, theory, order):
        """``(theory, order)`` validated for :func:`~attndyn.numeric.compare`."""
        raise CapabilityError(f"compare: {type(self).__name__} has no theory to compare with; "
                              "run attndyn.sgd alone")

    def theory(self, init, t, *, theory: str, order, check, words, **kwargs):
        """The theory trajectory from the SGD weights ``init`` at the SGD times ``t``
        (the same time scale), with rows named as the SGD observables."""
        raise CapabilityError(f"compare: {type(self).__name__} has no theory to compare with")

    # -- matrices and weights ----------------------------------------------------
    @abc.abstractmethod
    def check_matrices(self, matrices, name: str = "matrices") -> list:
        """Validate a state of the matrix flow (a list of real, finite arrays)."""

    @abc.abstractmethod
    def check_init(self, init, name: str = "init") -> list:
        """Validate SGD weights (factors, pairs or matrices)."""

    @abc.abstractmethod
    def _draw_init(self, rng, d: int, widths: list, scales: list, symmetric: bool) -> list:
        """Draw independent Gaussian weights (called by :meth:`gaussian_init`)."""

    def gaussian_init(self, d: int, *, width=None, scale=1.0, seed=None,
                      symmetric: bool = False) -> list:
        """Independent Gaussian initial weights, seeded (see
        :func:`attndyn.numeric.attention.training.gaussian_init`)."""
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
            raise ValueError(f"d must be an int >= 2, got {d!r}")
        d = int(d)
        K = self.K

        def per(x, name, cast):
            vals = list(x) if isinstance(x, (list, tuple, np.ndarray)) else [x] * K
            if len(vals) != K:
                raise ValueError(f"{name} must be a number or K = {K} numbers")
            return [cast(v) for v in vals]
        widths = per(d if width is None else width, "width", int)
        if any(w < 1 for w in widths):
            raise ValueError(f"width must be >= 1, got {widths}")
        scales = per(scale, "scale", float)
        if any(not math.isfinite(s) or s < 0 for s in scales):
            raise ValueError(f"scale must be finite and >= 0, got {scales}")
        rng = np.random.default_rng(resolve_seed(seed))
        return self._draw_init(rng, d, widths, scales, bool(symmetric))

    # -- SGD ---------------------------------------------------------------------
    @abc.abstractmethod
    def sgd_runner(self, init, order) -> SGDRunner:
        """An :class:`SGDRunner` from the weights ``init`` (validated) and the
        longest recorded word ``order`` (``None``: the model's default)."""

    def time_scale(self, time: str = "slow") -> TimeScale:
        """The :class:`TimeScale` called ``time`` (``ValueError`` naming the choices)."""
        names = [s.name for s in self.time_scales]
        for s in self.time_scales:
            if s.name == time:
                return s
        if len(names) == 1:
            raise ValueError(f"time applies to a model with several time scales (UntiedModel) "
                             f"only; {type(self).__name__} has one: {self.time_scales[0].label}")
        raise ValueError(f"time must be {' or '.join(repr(n) for n in names)}, got {time!r}")

    def time_step(self, eta: float, d: int, time: str = "slow") -> float:
        """ODE time of one SGD step on the scale ``time``; a model with one time
        scale ignores ``time``."""
        if len(self.time_scales) == 1:
            return self.time_scales[0].step(eta, d)
        return self.time_scale(time).step(eta, d)

    # -- records -------------------------------------------------------------------
    @abc.abstractmethod
    def params_dict(self) -> dict:
        """JSON-able record of the model (``model``, ``K``, ``trainable``, ...)."""
