"""The model protocol: what every parameterisation of paper 003 implements.

An attention-indexed model (paper 003, section 2) has ``K`` indices, each an
attention matrix ``S_k`` parameterised one way or another: tied ``S_k = W_k
W_k^T`` (:class:`~attndyn.TiedModel`, section 3), direct ``S_k``
(:class:`~attndyn.SModel`, appendix E), untied ``S_k = U_k V_k^T``
(:class:`~attndyn.UntiedModel`, section 4). The drivers (:func:`~attndyn.sgd`,
:func:`~attndyn.numeric.matrix_flow`, :func:`~attndyn.numeric.compare`) are
written once, against :class:`AttentionModel`, and never ask which
parameterisation they hold: everything that differs is a method here.

The protocol has four parts:

- :class:`AttentionModel`: the parameterisation and its SGD (what every driver reads);
- :class:`Theory`: one per parameterisation, built by ``model.theory``: its solvers
  (``uncorrected``, ``matrix_flow``, ``hierarchy``), the table of its corrections, its
  assumptions and the feasible set of Corollary 1;
- :class:`Correction`: a finite-learning-rate or finite-width correction, a strategy
  object (``check`` before any SGD runs, ``apply``, ``flow``), reached only through
  :meth:`Theory.correction`, which refuses an unknown name listing the choices;
- :class:`Hierarchy`: what the tied and the untied truncated hierarchies share.

What a model provides, and which driver calls it:

==============================  ============================================  =================
member                          meaning                                       called by
==============================  ============================================  =================
``kind``                        a label (``"tied"``, ``"s"``...) for params   every driver
``K, trainable, L, C,``         the constructor's validated arguments         every driver
``weight_decay, loss, params``
``alphabet``, ``words(n)``      letters of the words (``None``: no words)     sgd, flow
``observable_names(order)``     the SGD observables, ``"loss"`` last          sgd, compare
``check_matrices(S, name)``     validate a flow state                         flow, theory
``check_init(init, name)``      validate SGD weights                          sgd runner
``gaussian_init(d, ...)``       seeded independent Gaussian weights           sgd_runs, compare
``sgd_runner(init, order)``     an :class:`SGDRunner`: kernel, arrays, obs.   sgd
``sgd_form``                    the form of the SGD weights (array-API step)  xp_sgd
``time_scales``                 the ODE times of one SGD step                 sgd, time_step
``theory``                      the :class:`Theory` (solvers, corrections)    flow, compare
``params_dict()``               JSON-able record of the model                 every result
==============================  ============================================  =================

A capability a theory lacks (a hierarchy, a matrix flow, a theory at all) raises
:class:`CapabilityError` (a ``NotImplementedError`` and a ``ValueError``) through the
base class, with the model's name in the message.

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
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Protocol, Sequence

import numpy as np

from attndyn.numeric.core.validate import check_int_per
from attndyn.numeric.core.validate import resolve_seed  # noqa: F401  (re-exported: part of the protocol's API)
from attndyn.symbolic import words as symbolic_words
from attndyn.symbolic.hierarchy import check_order
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

if TYPE_CHECKING:
    from attndyn.numeric.attention.limitcore import LimitTrajectory
    from attndyn.numeric.core.results import Trajectory
    from attndyn.numeric.core.types import ArrayLike, RngLike
    from attndyn.symbolic.hierarchy import TiedStructure
    from attndyn.symbolic.potential import TiedPotential
    from attndyn.symbolic.untied import UntiedStructure

__all__ = ["AttentionModel", "SGDRunner", "TimeScale", "CapabilityError", "check_model",
           "check_order_arg", "resolve_seed", "obs_key", "Theory", "NoTheory", "Correction",
           "NoCorrection", "HierarchyCorrection", "NONE", "Hierarchy", "FeasibleSpec",
           "TiedModelLike", "UntiedModelLike"]


def obs_key(name: str, *indices: int) -> str:
    """Observable name as :meth:`Trajectory.observable` builds it (0-based indices)."""
    if not indices:
        return name
    if all(i < 9 for i in indices):
        return f"{name}_" + "".join(str(i + 1) for i in indices)
    return f"{name}_" + "_".join(str(i + 1) for i in indices)


class CapabilityError(NotImplementedError, ValueError):
    """The model does not have this capability (hierarchy, matrix flow, theory).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> try:
    ...     model.theory.hierarchy(2)
    ... except attndyn.CapabilityError as exc:
    ...     print(exc)
    SModel has no moment hierarchy
    """


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
        dt: float = self.factor * eta / d ** self.power
        return dt


def check_model(model: object, name: str = "model") -> "AttentionModel":
    """``model`` if it implements the protocol, else a TypeError naming ``name``."""
    if not isinstance(model, AttentionModel):
        raise TypeError(f"{name} must be an attention model (TiedModel, UntiedModel, SModel or "
                        f"another AttentionModel subclass), got {type(model).__name__}")
    return model


def finite_word_traces(mats: Sequence[np.ndarray], words: Sequence[Sequence[int]],
                       source: str = "S") -> np.ndarray:
    """The normalised word traces ``Tr(S_{a_1}...S_{a_n})/d`` of finite matrices, refused
    with one line when they overflow float64 (entries near 1e150 or more) instead of being
    returned as inf."""
    from attndyn.kernels.moments import word_traces
    from attndyn.numeric.core.validate import check_finite_result
    with np.errstate(over="ignore", invalid="ignore"):
        mu = word_traces(mats, words)
    return check_finite_result(mu, "moments", source)


def check_order_arg(order: object, default: int) -> int:
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
    def step(self, n: int, eta: float, gamma: float, B: int, lossfn: Callable[..., Any],
             lp: np.ndarray, C: np.ndarray, F: np.ndarray, ident: bool, state: np.ndarray,
             blowup: float, losses: np.ndarray, info: np.ndarray,
             ws: tuple[np.ndarray, ...]) -> None:
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

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> isinstance(model, attndyn.AttentionModel), model.kind, model.K, model.trainable
    (True, 'tied', 2, (0,))
    >>> model.time_scales[0].label   # the default time scale (eq. 11)
    't = 4 * eta * n / d'
    """

    kind: ClassVar[str] = "abstract"
    time_scales: ClassVar[tuple[TimeScale, ...]] = ()
    #: the form of the SGD weights, which picks the array-API step (xp_sgd.py):
    #: "factors" (W_k), "pairs" (U_k, V_k), "matrices" (S_k); None: none there
    sgd_form: ClassVar[str | None] = None
    alphabet: Any = None
    # set by every subclass's __init__ (the class docstring)
    K: int
    trainable: tuple[int, ...]
    L: int
    C: Any
    weight_decay: float
    loss: Any
    params: dict[str, Any]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for base in cls.__mro__[1:]:
            if base is AttentionModel or not issubclass(base, AttentionModel):
                continue
            if not inspect.isabstract(base):
                raise TypeError(f"{base.__name__} is final (a concrete AttentionModel); "
                                f"{cls.__name__} must subclass AttentionModel instead")

    # -- letters, words, observables -------------------------------------------
    def words(self, order: int) -> list[tuple[int, ...]]:
        """Canonical words over the model's alphabet up to length ``order``."""
        if self.alphabet is None:
            raise CapabilityError(f"{type(self).__name__} has no words (its theory closes in "
                                  "named order parameters)")
        return canonical_words(check_order(order), self.alphabet)

    def word_name(self, word: Sequence[int]) -> str:
        """Printed name of a word (``mu_112``, ``q_12``...)."""
        return word_label(word, self.K)

    @abc.abstractmethod
    def observable_names(self, order: int | None = None) -> list[str]:
        """Names of the SGD observables (``"loss"`` last), the rows of :func:`~attndyn.sgd`."""

    # -- the theory ------------------------------------------------------------
    @property
    def theory(self) -> "Theory":
        """The parameterisation's :class:`Theory` (its solvers and its corrections). A
        model without one gets :class:`NoTheory`, whose capabilities all refuse."""
        th = self.__dict__.get("theory")
        if th is None:
            th = self.__dict__["theory"] = NoTheory(self)
        return th

    # -- matrices and weights ----------------------------------------------------
    @abc.abstractmethod
    def check_matrices(self, matrices: Sequence[ArrayLike], name: str = "matrices"
                       ) -> list[np.ndarray]:
        """Validate a state of the matrix flow (a list of real, finite arrays)."""

    @abc.abstractmethod
    def check_init(self, init: Sequence[Any], name: str = "init") -> list[Any]:
        """Validate SGD weights (factors, pairs or matrices)."""

    @abc.abstractmethod
    def _draw_init(self, rng: np.random.Generator, d: int, widths: list[int],
                   scales: list[float], symmetric: bool) -> list[Any]:
        """Draw independent Gaussian weights (called by :meth:`gaussian_init`)."""

    def init_floats(self, d: int, widths: list[int]) -> int:
        """float64 entries that :meth:`gaussian_init` draws for dimension ``d`` and widths
        ``d_k``: one ``d x d_k`` factor per index here; a parameterisation that draws
        otherwise overrides it. Checked against the available memory before drawing."""
        return d * sum(widths)

    def gaussian_init(self, d: int, *, width: int | Sequence[int] | None = None,
                      scale: float | Sequence[float] = 1.0, seed: RngLike = None,
                      symmetric: bool = False) -> list[Any]:
        """Independent Gaussian initial weights, seeded (see
        :func:`attndyn.numeric.attention.training.gaussian_init`)."""
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
            raise ValueError(f"d must be an int >= 2, got {d!r}")
        d = int(d)
        K = self.K

        def per(x: Any, name: str, cast: type[float]) -> list[float]:
            vals = list(x) if isinstance(x, (list, tuple, np.ndarray)) else [x] * K
            if len(vals) != K:
                raise ValueError(f"{name} must be a number or K = {K} numbers")
            return [cast(v) for v in vals]
        # ints only: width=2.7 was truncated to 2 silently
        widths = check_int_per(d if width is None else width, K, "width")
        scales = per(scale, "scale", float)
        if any(not math.isfinite(s) or s < 0 for s in scales):
            raise ValueError(f"scale must be finite and >= 0, got {scales}")
        need, avail = 8 * self.init_floats(d, widths), symbolic_words.available_memory()
        if need > avail:  # before numpy tries (a MemoryError for EiB, or swapping)
            raise ValueError(f"gaussian_init: d = {d} and widths d_k up to {max(widths)} need "
                             f"{need / 2 ** 30:.3g} GiB of weights, above the available memory "
                             f"({avail / 2 ** 30:.3g} GiB); lower d or the widths")
        rng = np.random.default_rng(resolve_seed(seed))
        return self._draw_init(rng, d, widths, scales, bool(symmetric))

    # -- SGD ---------------------------------------------------------------------
    @abc.abstractmethod
    def sgd_runner(self, init: Sequence[Any], order: int | None) -> SGDRunner:
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


# ---------------------------------------------------------------------------
# the theory of a parameterisation and its corrections

def _choices(names: Iterable[object]) -> str:
    shown = [repr(n) for n in names]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


@dataclass(frozen=True)
class FeasibleSpec:
    """The feasible set Q of Corollary 1 as data (read by
    :mod:`~attndyn.numeric.attention.theorems.cor1_landscape`): the Gram matrices of order
    parameters that must be PSD, each ``("q",)`` (the matrix of the symbols ``q_kl``
    itself) or ``("P", "R", s)`` (``(P + s R)/2``); whether every free entry is ``>= 0``
    as well; the prefixes of unconstrained order parameters; the set in words."""

    grams: tuple
    nonnegative: bool = False
    free: tuple = ()
    text: str = ""


class Correction(abc.ABC):
    """A finite-learning-rate or finite-width correction of a theory: a strategy object,
    as a step-size controller of an ODE library is one. Each lives in its
    parameterisation's folder (its formulas need that parameterisation's weights) and is
    reached only through the :class:`Theory` that lists it (:meth:`Theory.correction`).

    ``check`` refuses a combination before any SGD runs (naming the fix); ``apply`` runs
    the corrected theory at the SGD times (what ``compare`` calls); ``flow`` the
    corrected matrix-level flow (what ``matrix_flow(..., correction=)`` calls).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> sorted(model.theory.corrections)
    ['finite-d', 'noise', 'noise+finite-d', 'none']
    >>> isinstance(model.theory.correction("noise"), attndyn.Correction)
    True
    """

    #: the name :meth:`Theory.correction` resolves
    name: ClassVar[str] = "abstract"
    #: the SGD parameters it needs (``("eta", "batch")``: the noise of the mini-batch)
    needs: ClassVar[tuple] = ("eta", "batch")

    def check(self, theory: str, order: int | None) -> None:
        """Refuse (``ValueError``) a theory or an order this correction does not take."""

    def require(self, eta: float | None, batch: int | None) -> None:
        """``ValueError`` when a parameter of :attr:`needs` is missing."""
        if ("eta" in self.needs and eta is None) or ("batch" in self.needs and batch is None):
            raise ValueError(f"correction={self.name!r} needs the SGD's eta and batch")

    @abc.abstractmethod
    def apply(self, theory: "Theory", init: Any, t: ArrayLike, *, name: str, order: int | None,
              check: Any, words: Sequence[Sequence[int]] | None, eta: float | None = None,
              batch: int | None = None, **options: Any) -> Trajectory:
        """The corrected theory trajectory from the SGD weights ``init`` at the SGD times
        ``t`` (rows named as the SGD observables)."""

    def flow(self, theory: "Theory", matrices: Sequence[ArrayLike], t_eval: ArrayLike, *,
             eta: float | None = None, batch: int | None = None, **options: Any) -> Trajectory:
        """The corrected matrix-level flow from ``matrices`` (a capability)."""
        raise CapabilityError(f"correction={self.name!r} has no matrix-level flow for "
                              f"{type(theory.model).__name__}")

    def __repr__(self) -> str:
        return f"<correction {self.name!r}>"


class NoCorrection(Correction):
    """The theory as it is (``correction="none"``): ``eta`` and ``batch`` are not used."""

    name = "none"
    needs = ()

    def apply(self, theory: "Theory", init: Any, t: ArrayLike, *, name: str, order: int | None,
              check: Any, words: Sequence[Sequence[int]] | None, eta: float | None = None,
              batch: int | None = None, **options: Any) -> Trajectory:
        return theory.uncorrected(init, t, name=name, order=order, check=check, words=words,
                                  **options)

    def flow(self, theory: "Theory", matrices: Sequence[ArrayLike], t_eval: ArrayLike, *,
             eta: float | None = None, batch: int | None = None, **options: Any) -> Trajectory:
        return theory.matrix_flow(matrices, t_eval, **options)


#: the one ``"none"`` correction every theory lists
NONE = NoCorrection()


class HierarchyCorrection(Correction):
    """A :class:`Correction` that also acts on a truncated hierarchy (extra rows): what
    ``hierarchy.integrate(..., correction=)`` and ``hierarchy.text(correction=)`` run."""

    @abc.abstractmethod
    def hierarchy(self, hierarchy: "Hierarchy", mu0: ArrayLike, t_eval: ArrayLike, *,
                  eta: float | None, batch: int | None, **options: Any) -> Trajectory:
        """The corrected truncation of ``hierarchy`` from ``mu0``."""

    @abc.abstractmethod
    def text(self, hierarchy: "Hierarchy") -> str:
        """The extra rows of the corrected truncation, printed."""


class Theory(abc.ABC):
    """The theory of one parameterisation, built by ``model.theory`` (one per model): its
    solvers (:meth:`uncorrected`, :meth:`matrix_flow`, :meth:`hierarchy`), the table of
    its corrections (:attr:`corrections`, looked up by :meth:`correction` only), its
    assumptions and the feasible set of Corollary 1. A capability it lacks raises
    :class:`CapabilityError` naming the model.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> theory = model.theory
    >>> isinstance(theory, attndyn.Theory), theory.model is model
    (True, True)
    >>> theory.hierarchy(4).n_moments
    15
    """

    #: the theory names ``compare(..., theory=)`` takes (the first is the default)
    names: ClassVar[tuple] = ()
    #: name -> :class:`Correction`; ``"none"`` always
    corrections: ClassVar[dict[str, Correction]] = {"none": NONE}
    #: the feasible set Q of Corollary 1 (``None``: not known for the parameterisation)
    feasible: ClassVar[FeasibleSpec | None] = None

    def __init__(self, model: "AttentionModel") -> None:
        self.model = model

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.model!r}>"

    @abc.abstractmethod
    def check(self, name: str | None, order: int | None) -> tuple:
        """``(name, order)`` validated (``None``: the defaults)."""

    def correction(self, correction: str | Correction | None = None) -> Correction:
        """The :class:`Correction` called ``correction`` (``None``: ``"none"``), or the
        object itself when it belongs to this theory; ``ValueError`` naming the choices."""
        if correction is None:
            return self.corrections["none"]
        if isinstance(correction, Correction):
            if any(c is correction for c in self.corrections.values()):
                return correction
            correction = correction.name
        if isinstance(correction, str) and correction in self.corrections:
            return self.corrections[correction]
        raise ValueError(f"correction must be one of {_choices(self.corrections)}, got "
                         f"{correction!r}: not available for {type(self.model).__name__}")

    def run(self, init: Any, t: ArrayLike, *, name: str | None = None, order: int | None = None,
            check: Any = "auto", words: Sequence[Sequence[int]] | None = None,
            correction: str | Correction | None = None, eta: float | None = None,
            batch: int | None = None, **options: Any) -> Trajectory:
        """The theory trajectory ``name`` from the SGD weights ``init`` at the SGD times
        ``t`` with ``correction`` (an object of :attr:`corrections` or its name), rows named
        as the SGD observables (what :func:`~attndyn.numeric.compare` compares)."""
        name, order = self.check(name, order)
        corr = self.correction(correction)
        corr.check(name, order)
        return corr.apply(self, init, t, name=name, order=order, check=check, words=words,
                          eta=eta, batch=batch, **options)

    def uncorrected(self, init: Any, t: ArrayLike, *, name: str, order: int | None, check: Any,
                    words: Sequence[Sequence[int]] | None, **options: Any) -> Trajectory:
        """The theory without a correction (what :class:`NoCorrection` runs)."""
        raise CapabilityError(f"compare: {type(self.model).__name__} has no theory to "
                              "compare with")

    def matrix_flow(self, matrices: Sequence[ArrayLike], t_eval: ArrayLike, **options: Any
                    ) -> Trajectory:
        """The finite-d deterministic matrix flow from ``matrices`` (a capability).

        Returns a :class:`~attndyn.numeric.core.results.Trajectory` of the model's
        observables with ``status`` and ``message`` (blow-up: -3)."""
        raise CapabilityError(f"{type(self.model).__name__} has no matrix flow")

    def hierarchy(self, order: int, **options: Any) -> "Hierarchy":
        """The truncated moment hierarchy at ``order`` (a capability)."""
        raise CapabilityError(f"{type(self.model).__name__} has no moment hierarchy")

    def limit_flow(self, law: Any, t_eval: ArrayLike, *args: Any, **options: Any
                   ) -> LimitTrajectory:
        """The ``d -> infinity`` trajectory from the initial law ``law`` (a capability)."""
        raise CapabilityError(f"{type(self.model).__name__} has no d -> infinity limit solver")

    def spectral_density(self, law: Any, t_eval: ArrayLike, **options: Any) -> Any:
        """The ``d -> infinity`` spectral law of ``S_k(t)`` from the initial law ``law``
        (a :class:`~attndyn.numeric.attention.limitcore.SpectralDensity`; a capability)."""
        raise CapabilityError(f"{type(self.model).__name__} has no d -> infinity spectral law")

    def assumptions(self, init: Any, quick: bool = False) -> list:
        """The assumptions of the theorem behind the theory at the initial weights
        ``init``: a list of :class:`~attndyn.numeric.attention.assumptions.Verdict` (empty
        when there are no diagnostics). ``quick``: the cheap versions (``compare``)."""
        return []

    def landscape_potential(self) -> Any:
        """The closed-form potential whose ``phi`` Corollary 1 minimises over the feasible
        set (``None`` when the loss takes a numeric route)."""
        return None


class NoTheory(Theory):
    """The theory of a parameterisation that has none: every capability refuses."""

    names = ()

    def check(self, name: str | None, order: int | None) -> tuple[str, int | None]:
        raise CapabilityError(f"compare: {type(self.model).__name__} has no theory to compare "
                              "with; run attndyn.sgd alone")


class Hierarchy(abc.ABC):
    """What the tied and the untied truncated hierarchies share: the words and moments of
    the truncation at ``order`` (``words``, ``n_moments``, ``n_terms``, :meth:`index`,
    :attr:`names`), the printed equations and the integration. Built by
    :meth:`Theory.hierarchy`; the subclasses implement every member below.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> h = model.hierarchy(2)   # the words of length <= 2 (eq. 13)
    >>> isinstance(h, attndyn.Hierarchy), h.n_moments, h.names
    (True, 5, ['mu_1', 'mu_2', 'q_11', 'q_12', 'q_22'])
    >>> h.index((0, 1))
    3
    """

    # the model (its folder's solvers read it through TiedModelLike or UntiedModelLike)
    model: AttentionModel | TiedModelLike | UntiedModelLike
    order: int
    #: the integer structure arrays of the truncation (words, counts, canonical index)
    structure: TiedStructure | UntiedStructure

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(order={self.order}, n_moments={self.n_moments}, "
                f"n_terms={self.n_terms})")

    @property
    def words(self) -> list[tuple[int, ...]]:
        """The canonical words kept, in state order."""
        return self.structure.words

    @property
    def n_moments(self) -> int:
        """Number of moments (the words kept)."""
        return self.structure.n_moments

    @property
    def n_terms(self) -> int:
        """Number of terms of the right-hand side."""
        return self.structure.n_terms

    def index(self, word: Sequence[int]) -> int:
        """State index of any word (canonicalised first; ``KeyError`` when absent)."""
        return self.structure.index(word)

    @property
    @abc.abstractmethod
    def names(self) -> list[str]:
        """Printed names of the moments (``mu_1``, ``q_12``...)."""

    @abc.abstractmethod
    def equations(self, *args: Any, **kwargs: Any) -> list:
        """The truncated equations, one per moment."""

    @abc.abstractmethod
    def text(self, *args: Any, **kwargs: Any) -> str:
        """The truncated equations in plain text."""

    @abc.abstractmethod
    def latex(self, *args: Any, **kwargs: Any) -> str:
        """The truncated equations in LaTeX."""

    @abc.abstractmethod
    def moments_from_matrices(self, matrices: Any) -> Any:
        """The moments of ``words`` of explicit matrices."""

    @abc.abstractmethod
    def initial_state(self, mu0: Any) -> Any:
        """The initial moment vector from ``mu0`` (matrices, moments, a law...)."""

    @abc.abstractmethod
    def rhs(self, *args: Any) -> np.ndarray:
        """The right-hand side at a moment vector."""

    @abc.abstractmethod
    def integrate(self, *args: Any, **options: Any) -> Trajectory:
        """Integrate the truncation from ``mu0`` (a
        :class:`~attndyn.numeric.core.results.Trajectory`)."""


# ---------------------------------------------------------------------------
# what the solvers of one folder read of that folder's model: the model is the top floor
# of its folder (tests/architecture), so they name these protocols, never the class

class TiedModelLike(Protocol):
    """The members of a :class:`~attndyn.TiedModel` its hierarchy reads (the model
    protocol's, the potential and its compiled gradient)."""

    K: int
    L: int
    trainable: tuple[int, ...]
    weight_decay: float
    params: dict[str, Any]
    alphabet: Any
    #: the potential's cache entry (``potentials.cache.PotentialEntry``) or ``None``
    _entry: Any

    @property
    def theory(self) -> Theory: ...
    @property
    def potential(self) -> TiedPotential | None: ...
    @property
    def gradient_function(self) -> Callable[..., Any]: ...
    @property
    def gradient_parameters(self) -> np.ndarray: ...
    def check_matrices(self, matrices: Sequence[ArrayLike], name: str = "matrices"
                       ) -> list[np.ndarray]: ...
    def params_dict(self) -> dict: ...
    def hierarchy(self, order: int) -> Hierarchy: ...


class UntiedModelLike(Protocol):
    """The members of an :class:`~attndyn.UntiedModel` the fast-slow theory, the slow
    hierarchy and the untied limit read (the pairs ``(U_k, V_k)`` and their overlaps)."""

    K: int
    trainable: tuple[int, ...]
    weight_decay: float

    def check_factors(self, init: Sequence[Any], name: str = "init"
                      ) -> list[tuple[np.ndarray, np.ndarray]]: ...
    def order_parameters(self, init: Sequence[Any]) -> dict: ...
    def words(self, order: int) -> list[tuple[int, ...]]: ...
    def params_dict(self) -> dict: ...
