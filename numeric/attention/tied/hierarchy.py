"""The tied hierarchy (paper 003, eqs. (9)-(13)) and its method ladder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import marshal
import math
import time as _time
from functools import cached_property

import numpy as np
from numba import njit

from attndyn.kernels.integrate import status_message
from attndyn.numeric.attention.potentials import cache as potcache
from attndyn.numeric.attention.base import (check_model, finite_word_traces, Hierarchy,
                                          HierarchyCorrection, NoCorrection)
from attndyn.numeric.core.results import (IntegrationError, LazySequence, Trajectory,
                                          TruncationNotConverged)
from attndyn.numeric.core.validate import (MAX_STEPS_CAP, check_pos_float, check_max_steps,
                                           check_t_eval, kernel_array)
from attndyn.symbolic.hierarchy import check_order, tied_structure
from attndyn.symbolic.initial import FreeInit
from attndyn.symbolic.printing import (closed_form_gamma, hierarchy_latex, hierarchy_text,
                                       tied_equations)
from attndyn.symbolic.words import canonical

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from pathlib import Path
    from types import SimpleNamespace

    from numpy.typing import NDArray

    from attndyn.numeric.attention.base import TiedModelLike
    from attndyn.numeric.attention.limitcore import LimitTrajectory
    from attndyn.numeric.core.types import ArrayLike
    from attndyn.symbolic.hierarchy import TiedStructure
    from attndyn.symbolic.potential import TiedPotential

__all__ = ["TiedHierarchy", "NOT_CONVERGED", "INTEGRATORS", "TIME_LIMIT", "METHODS", "check_method",
           "hierarchy_method", "auto_extend", "note_truncation"]


NOT_CONVERGED = 2


#: ``TiedHierarchy.integrate(..., integrator=)`` choices
INTEGRATORS = ("auto", "taylor", "dopri5", "dop853")


#: status of a run stopped by ``time_limit``
TIME_LIMIT = -4

#: the message of status 0 (it names no number)
_SUCCESS = status_message(0, 0.0)

#: what the message of an unchecked run adds
_UNCHECKED = ("; convergence not checked: the truncation order was not compared with another "
              "one (pass check=order+2 with matrices or a moment function)")
_UNCHECKED_NONE = ("; convergence not checked: the truncation order was not compared with "
                   "another one (check=None) (pass check=order+2 with matrices or a moment "
                   "function)")

#: one chunk of a kernel run: ``(ys, info, tinfo, y_end)``; the function that runs one
_Chunk = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_ChunkRun = Callable[[np.ndarray, np.ndarray, float, float, int], _Chunk]


def _structure_cache_dir() -> Path | None:
    """The private per-user folder for structure arrays (``None``: do not cache)."""
    try:
        from attndyn.kernels._cachedir import private_dir
    except ImportError:  # pragma: no cover - the private-folder module is missing
        return None
    return private_dir("structures")


def _transposed(a: np.ndarray) -> np.ndarray:
    """``a.T`` as a new C-contiguous array. For a few long rows (output times x moments)
    numpy's transposed copy runs its inner loop over the few rows (18 us for 2 x 5099):
    :func:`transpose_into` reads each row in order instead (1.0 us at 2 x 558, numpy's
    copies column by column 1.8 us), a fixed cost of every integrate call; the same
    values."""
    if a.ndim != 2 or a.shape[0] > 16:
        copied: np.ndarray = a.T.copy()
        return copied
    out = np.empty((a.shape[1], a.shape[0]), dtype=a.dtype)
    transpose_into(a, out)
    return out


@njit(cache=True)
def transpose_into(a: np.ndarray, out: np.ndarray) -> None:
    """``out[j, i] = a[i, j]`` for the 2-D ``a`` and ``out`` of the reversed shape."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[j, i] = a[i, j]


def _json_copy(x: Any) -> Any:
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


class TiedHierarchy(Hierarchy):
    """The truncated tied hierarchy of one model at one order.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> import numpy as np
    >>> S = [0.5 * np.eye(4), np.eye(4)]   # S_1(0) = I/2, teacher S_2 = I
    >>> r = model.hierarchy(2).integrate(S, [0.0, 0.1, 0.2])
    >>> r.status, np.round(r.observable("mu_1"), 3)   # eq. (348): mu_1 = 1/(1 + exp(-4t))
    (0, array([0.5  , 0.599, 0.69 ]))
    """

    # a TiedModel (its potential and gradient parameters are not part of the protocol)
    model: TiedModelLike
    structure: TiedStructure

    def __init__(self, model: TiedModelLike, order: int, *, max_terms: int | None = None
                 ) -> None:
        self.model = model
        self.order = order
        self.structure = tied_structure(model.K, model.trainable, order, max_terms=max_terms,
                                        cache_dir=_structure_cache_dir())
        self.consts = np.array([model.weight_decay / 2.0])

    # -- structure (words, n_moments, n_terms, index: the Hierarchy base) ------
    @cached_property
    def names(self) -> list[str]:
        return self.structure.labels()  # vectorised from the codes (word_label's format)

    # -- printing -------------------------------------------------------------
    def equations(self, closed_form: bool = False) -> list[Any]:
        """SymPy equations ``d mu_alpha/dt = ...`` (eq. 11 truncated by eq. 13).

        With ``closed_form=True`` the ``Gamma_kl`` are written out as
        functions of the overlaps ``q`` (needs a symbolic potential).
        """
        pot = self.model.potential
        if closed_form:
            if pot is None:
                raise ValueError("closed_form=True needs a symbolic loss, not a numeric potential")
            eqs: list[Any] = tied_equations(self.structure, pot.gamma, pot.q)
            return eqs
        plain: list[Any] = tied_equations(self.structure)
        return plain

    def _closed_gamma(self, closed_form: bool, latex: bool) -> dict[Any, Any] | None:
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
        corr = self.model.theory.correction(correction)
        if isinstance(corr, NoCorrection):
            return out
        if not isinstance(corr, HierarchyCorrection):
            raise ValueError(f"correction must be 'none' or 'noise', got {corr.name!r}")
        return out + "\n" + corr.text(self)

    def latex(self, closed_form: bool = False) -> str:
        """The same equations as :meth:`text` in LaTeX (``aligned``), in the paper's notation."""
        return "\n".join(hierarchy_latex(self.structure, self._closed_gamma(closed_form, True)))

    def _repr_latex_(self) -> str | None:
        if self.n_moments > 200:  # a notebook cell, not a book
            return None
        return "$$" + self.latex() + "$$"

    # -- initial conditions ---------------------------------------------------
    def moments_from_matrices(self, matrices: Sequence[ArrayLike]) -> NDArray[np.float64]:
        """``mu_alpha = Tr(S_{a_1}...S_{a_n})/d`` for every word, with shared products."""
        mats = self.model.check_matrices(matrices)
        return finite_word_traces(mats, self.words, "S")

    def initial_state(self, mu0: Any) -> NDArray[np.float64]:
        """Coerce an initial condition: an array in state order, a dict
        ``{word: value}``, a callable ``words -> values``, or a list of the
        ``K`` matrices ``S_k``."""
        n = self._n_state
        if type(mu0) is np.ndarray and mu0.dtype == np.float64 and mu0.shape == (n,) \
                and mu0.flags.c_contiguous and mu0.flags.writeable:
            # what the kernels take already (the general path below returns it as is too);
            # one compiled pass instead of isfinite + all (1.5 us at order 12)
            if bound_code(mu0, 1.0) == 0:
                raise ValueError("mu0 must be finite (found NaN or inf)")
            return mu0
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
        elif isinstance(mu0, (list, tuple)) and len(mu0) > 0 and all(
                np.ndim(m) == 2 for m in mu0):  # matrices: their count is checked there
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
        # a read-only or memory-mapped mu0 matches no kernel signature: copied here
        return kernel_array(y, "mu0", ndim=1)

    # -- integration ----------------------------------------------------------
    def rhs(self, y: ArrayLike) -> NDArray[np.float64]:
        """``dmu/dt`` at state ``y`` (for checks; the integrator calls the kernel)."""
        from attndyn.kernels.rhs import rhs_into
        y = kernel_array(y, "y")  # read-only and memory-mapped y are copied
        # the kernel indexes y by the structure arrays: a wrong length reads out of bounds
        if y.shape != (self.n_moments,):
            raise ValueError(f"y must have shape ({self.n_moments},) (the moments at order "
                             f"{self.order}), got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("y must be finite (found NaN or inf)")
        dy: np.ndarray = rhs_into(self._system, y)
        return dy

    @cached_property
    def _system(self) -> SimpleNamespace:
        """Everything the compiled kernels need: the fused structure (slot table, unsigned
        indices) of :mod:`attndyn.kernels.rhs`, validated once."""
        from types import SimpleNamespace

        from attndyn.kernels.rhs import check_system, function_pointer
        sysn = SimpleNamespace(gfun=function_pointer(self.model.gradient_function),
                               **self._system_arrays)
        check_system(sysn, self.structure.n_moments)
        return sysn

    @cached_property
    def _system_arrays(self) -> dict[str, Any]:
        s = self.structure
        return dict(gparams=np.ascontiguousarray(self.model.gradient_parameters, dtype=np.float64),
                    gather=s.gather, consts=np.ascontiguousarray(self.consts, dtype=np.float64),
                    indptr=s.indptr, src=s.src, slot=s.slot, slot_coef=s.slot_coef,
                    slot_ent=s.slot_ent, n_grad=self.model.K * self.model.K,
                    blocks=np.array([0, s.n_moments], dtype=np.int64))

    @cached_property
    def _taylor_system(self) -> SimpleNamespace:
        """The same arrays for the Taylor kernel, which never calls the compiled gradient
        (it runs the Gamma program): no ``gfun``, so that a cached model integrates
        without loading the gradient's machine code (one numba cache load less)."""
        from types import SimpleNamespace

        from attndyn.kernels.rhs import check_system
        sysn = SimpleNamespace(gfun=None, **self._system_arrays)
        check_system(sysn, self.structure.n_moments)
        return sysn

    @cached_property
    def _taylor_prepared(self) -> Any:
        """The Taylor kernel's fixed arguments, checked once
        (:func:`attndyn.kernels.taylor.prepare_taylor`): a repeated integrate pays only for
        its state and output times."""
        from attndyn.kernels.taylor import prepare_taylor
        # the constant operator is kept next to the structure's cache file (if any)
        return prepare_taylor(self._taylor_system, self._gamma_program,
                              cache=getattr(self.structure, "cache_id", None))

    @cached_property
    def _gamma_program(self) -> tuple[np.ndarray, ...] | None:
        """The Gamma polynomial as a Taylor program, or ``None`` (no polynomial potential).
        Checked against the compiled gradient at random overlaps before it is trusted."""
        from attndyn.kernels.taylor import check_program
        from attndyn.symbolic.hierarchy import gamma_program
        entry = self.model._entry
        if entry is not None and not isinstance(entry.program, str):
            # made, checked as below and stored by an earlier process; potcache validated
            # the entry (key, digest, check_program) when it read it
            stored: tuple[np.ndarray, ...] = entry.program
            return stored
        pot = self.model.potential
        if pot is None or not hasattr(pot, "gamma"):
            return None
        prog: tuple[np.ndarray, ...] | None = self._make_gamma_program(pot, check_program,
                                                                       gamma_program)
        if entry is not None:
            entry.program = prog
            potcache.store_entry(entry)
        return prog

    def _make_gamma_program(self, pot: TiedPotential, check_program: Callable[..., Any],
                            gamma_program: Callable[..., Any]
                            ) -> tuple[np.ndarray, ...] | None:
        import sympy as sp
        subs = {sp.Symbol(str(k), real=True): sp.Float(float(v))
                for k, v in self.model.params.items()}
        prog: tuple[np.ndarray, ...] | None = gamma_program(pot.gamma, pot.q, subs,
                                                            self.model.K)
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

    def _chunk_runner(self, integrator: str, rtol: float, atol: float, blowup: float,
                      h_max: float) -> tuple[str, _ChunkRun]:
        """``(name, chunk_run)``: the integrator that runs (``"taylor"``, ``"dopri5"``,
        ``"dop853"``) and a function running one chunk of its steps. Kept per arguments
        (a few per hierarchy): making the closure and its imports cost 1.8 us a call."""
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
        runners = self._runners
        key = (integrator, rtol, atol, blowup, h_max)
        try:
            hit, keep = runners.get(key), True
        except TypeError:  # an unhashable argument: made afresh (run_rk says what is wrong)
            hit, keep = None, False
        if hit is None:
            name, chunk_run, p = self._make_chunk_runner(integrator, rtol, atol, blowup, h_max)
            if keep:
                if len(runners) >= 16:
                    runners.clear()
                runners[key] = (name, chunk_run, p)
        else:
            name, chunk_run, p = hit
        if name == "taylor":
            self._last_taylor_order = p
        return name, chunk_run

    def _make_chunk_runner(self, integrator: str, rtol: float, atol: float, blowup: float,
                           h_max: float) -> tuple[str, _ChunkRun, int]:
        """:meth:`_chunk_runner` made afresh: ``(name, chunk_run, Taylor order or 0)``."""
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
            from attndyn.kernels.taylor import run_prepared, taylor_order
            p = taylor_order(rtol)
            prep = self._taylor_prepared

            def chunk_run(y: np.ndarray, t_rem: np.ndarray, t: float, h: float,
                          n_steps: int) -> _Chunk:
                ys_, info_, tinfo_, yend_, _ = run_prepared(prep, y, t_rem, rtol, n_steps,
                                                            blowup, h_max, order=p, t0=t)
                return ys_, info_, tinfo_, yend_
            return name, chunk_run, p
        from attndyn.kernels.integrate import run_rk
        system = self._system
        # large layouts are kept next to the structure's cache file (if any), as Taylor's
        cache = getattr(self.structure, "cache_id", None)

        def rk_chunk_run(y: np.ndarray, t_rem: np.ndarray, t: float, h: float,
                         n_steps: int) -> _Chunk:
            chunk: _Chunk = run_rk(name, system, y, t_rem, rtol, atol, n_steps, blowup, h_max,
                          h_init=h, t0=t, cache=cache)
            return chunk
        return name, rk_chunk_run, 0

    def _run(self, y0: np.ndarray, t_eval: np.ndarray, rtol: float, atol: float,
             max_steps: int, blowup: float, h_max: float, integrator: str = "auto",
             time_limit: float | None = None, progress: bool | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run one integrator on this truncation; returns ``(ys, info, tinfo)`` and sets
        ``self._last_integrator`` to the one used (``"taylor"``, ``"dopri5"``, ``"dop853"``).

        The kernel runs in chunks of steps: between chunks the wall clock is checked
        against ``time_limit`` (status -4) and, for runs expected to take more than a few
        seconds, a progress bar is shown (``progress=None``: only on a terminal)."""
        name, chunk_run = self._chunk_runner(integrator, rtol, atol, blowup, h_max)
        self._last_integrator = name
        start = _perf_counter()
        sub, inf, tin, y = chunk_run(y0, t_eval, 0.0, 0.0, min(int(max_steps), 200))
        counts = inf.tolist()  # Python ints: one conversion, not one per entry
        self._last_threads = counts[5] if len(counts) > 5 else 1
        if counts[0] != -2 or counts[2] >= max_steps:
            # one chunk did it all (every short run): the kernel's own fresh arrays, no copies
            n_out = counts[1]
            if n_out < t_eval.size:
                ys = np.zeros((t_eval.size, y0.size))
                ys[:n_out] = sub[:n_out]
            else:
                ys = sub
            self._last_wall = _perf_counter() - start
            return ys, inf[:5], tin
        return self._run_chunks(name, chunk_run, y0, t_eval, max_steps, time_limit, progress,
                                start, (sub, inf, tin, y))

    def _run_chunks(self, name: str, chunk_run: _ChunkRun, y0: np.ndarray,
                    t_eval: np.ndarray, max_steps: int, time_limit: float | None,
                    progress: bool | None, start: float, first: _Chunk | None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The chunk loop of :meth:`_run` after a first chunk ``first`` that did not finish:
        the wall clock against ``time_limit``, about half a second of steps per chunk and
        a progress bar for long runs."""
        ys = np.zeros((t_eval.size, y0.size))
        info = np.zeros(5, dtype=np.int64)
        n_out = 0
        bar = None
        # set by the first chunk, before the loop calls chunk_run
        y: np.ndarray
        t: float
        h: float
        chunk: int
        try:
            while True:
                sub, inf, tin, y = first if first is not None else chunk_run(
                    y, t_eval[n_out:], t, h, chunk)
                first = None
                k = int(inf[1])
                ys[n_out:n_out + k] = sub[:k]
                n_out += k
                info[2:5] += inf[2:5]
                # the kernels report the threads they ran on last (auto_threads by size)
                self._last_threads = int(inf[5]) if inf.size > 5 else 1
                t, h = float(tin[0]), float(tin[1])
                status = int(inf[0])
                if status != -2 or info[2] >= max_steps:
                    break
                elapsed = _perf_counter() - start
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
                    progress = _progress_default(progress)
                    if progress is not False:
                        from attndyn.numeric.core.progress import Progress
                        bar = Progress(1000, f"order {self.order} ({name})", enabled=progress,
                                       unit="permille")
                if bar is not None:
                    bar.update(int(1000 * t / t_end) - bar.n)
        finally:
            if bar is not None:
                bar.close()
        info[0] = status
        info[1] = n_out
        self._last_wall = _perf_counter() - start
        return ys, info, np.array([t, h])

    @cached_property
    def _growth_bound(self) -> tuple[np.ndarray, np.ndarray]:
        """``(n, GROWTH_PER_LETTER ** n)`` per moment (``n``: its word length, float64):
        the growth bound of an unchecked run at the initial scale ``r0 = 1``."""
        lens = self.structure.lengths().astype(np.float64)
        return lens, GROWTH_PER_LETTER ** lens

    #: per-process caches, remade on first use: compiled-kernel closures, the prepared
    #: kernel arguments with their per-thread workspaces, the correction lookups, the RK
    #: system (its compiled gradient does not pickle)
    _PROCESS_CACHES = ("_runners", "_taylor_prepared", "_corrections_seen", "_system")

    def __getstate__(self) -> dict[str, Any]:
        """The hierarchy without its per-process caches, so that a model or hierarchy that
        has integrated still pickles (closures and thread-locals do not)."""
        state = self.__dict__.copy()
        for k in self._PROCESS_CACHES:
            state.pop(k, None)
        return state

    @cached_property
    def _runners(self) -> dict[tuple[Any, ...], tuple[str, _ChunkRun, int]]:
        """:meth:`_chunk_runner`'s results by arguments."""
        return {}

    @cached_property
    def _n_state(self) -> int:
        """:attr:`n_moments` once (the property reads a numpy scalar on every call)."""
        return self.n_moments

    @cached_property
    def _corrections_seen(self) -> dict[str, Any]:
        """The theory's correction by name, as :meth:`_correction` looked it up."""
        return {}

    def _correction(self, correction: Any) -> Any:
        """``model.theory.correction(correction)``, looked up once per name (a theory keeps
        one object per name; its lookup cost 0.4 us of every call, this one 0.1 us)."""
        if type(correction) is not str:
            return self.model.theory.correction(correction)
        seen = self._corrections_seen
        corr = seen.get(correction)
        if corr is None:
            corr = seen[correction] = self.model.theory.correction(correction)  # or raises
        return corr

    @cached_property
    def _params_base(self) -> dict[str, Any]:
        # printing the SymPy loss costs about a millisecond: once per hierarchy, not per call
        return self.model.params_dict()

    @cached_property
    def _params_marshal(self) -> bytes | None:
        """:attr:`_params_base` as marshal bytes (``None`` when it holds other types than
        marshal's dicts, lists, tuples, str and numbers)."""
        try:
            return marshal.dumps(self._params_base)
        except ValueError:
            return None

    def _params_copy(self) -> dict[str, Any]:
        """A fresh deep copy of :attr:`_params_base` for one result: from marshal bytes of
        our own record (about 1 us; :func:`_json_copy` 2-3 us at order 12)."""
        raw = self._params_marshal
        copied: dict[str, Any]
        if raw is None:
            copied = _json_copy(self._params_base)
        else:
            copied = marshal.loads(raw)
        return copied

    def integrate(self, mu0: Any, t_eval: ArrayLike, *, rtol: float = 1e-10,
                  atol: float = 1e-12, max_steps: int = 1_000_000, blowup: float = 1e100,
                  h_max: float = np.inf, check: str | int | Sequence[int] | None = "auto",
                  conv_tol: float = 1e-6, raise_on_failure: bool = False,
                  method: str = "auto", integrator: str = "auto",
                  time_limit: float | None = None, progress: bool | None = None,
                  correction: str = "none", eta: float | None = None,
                  batch: int | None = None, d: int | None = None) -> Trajectory:
        """Integrate the truncated hierarchy from ``mu0`` and report the moments at ``t_eval``.

        Parameters
        ----------
        mu0 : array, dict, callable or list of matrices
            Initial moments (see :meth:`initial_state`). Matrices or a callable
            also give the longer moments that the convergence ladder needs.
        t_eval : array
            Output times (ODE time ``t = 4 eta n / d``), non-decreasing, >= 0.
        rtol, atol : float
            Local error tolerances of the Dormand-Prince 5(4) integrator; ``rtol`` in
            ``(0, 1)``. The matrix flow (``method="flow"``, and the flow beyond the
            truncation of ``"auto"``) runs at ``max(rtol, FLOW_RTOL_FLOOR)`` (100 eps,
            scipy's floor); a raised rtol is stated in the message.
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
            (:func:`attndyn.numeric.attention.tied.limit.limit_flow`). ``"auto"``
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
            leading order in ``1/d``, :func:`attndyn.numeric.attention.tied.noise_flow.noise_hierarchy`;
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
        # positional, in _integrate's order: a 16-entry keyword dict cost 1.3 us per call
        args = (mu0, t_eval, rtol, atol, max_steps, blowup, h_max, check, conv_tol,
                raise_on_failure, method, integrator, time_limit, progress, correction, eta,
                batch, d)
        tracked = getattr(self.model.theory, "tracked", None)
        if tracked is None:
            return self._integrate(*args)
        # the potential on its trajectory route (issue 25): box around the start's q
        res: Trajectory = tracked(lambda: self._start_overlaps(mu0),
                                  lambda: self._integrate(*args))
        return res

    def _start_overlaps(self, mu0: Any) -> np.ndarray:
        """The ``K x K`` overlaps ``q_kl = mu_(kl)`` of the initial state ``mu0``."""
        y0 = self.initial_state(mu0)
        K = self.model.K
        q = np.empty((K, K))
        for k in range(K):
            for l in range(k, K):
                q[k, l] = q[l, k] = y0[self.index(canonical((k, l), self.model.alphabet))]
        return q

    def _integrate(self, mu0: Any, t_eval: ArrayLike, rtol: float, atol: float,
                   max_steps: int, blowup: float, h_max: float,
                   check: str | int | Sequence[int] | None, conv_tol: float,
                   raise_on_failure: bool, method: str, integrator: str,
                   time_limit: float | None, progress: bool | None, correction: str,
                   eta: float | None, batch: int | None, d: int | None) -> Trajectory:
        """:meth:`integrate` inside the potential's route: the checks, then the method."""
        rtol = _pos_float(rtol, "rtol")
        if not rtol < 1.0:  # a relative tolerance of 1 or more asks for no correct digit
            raise ValueError(f"rtol must be a finite number in (0, 1), got {rtol!r}")
        atol = _pos_float(atol, "atol")
        blowup = _pos_float(blowup, "blowup")
        corr = self._correction(correction)
        if not isinstance(corr, NoCorrection):
            if not isinstance(corr, HierarchyCorrection):
                raise ValueError(f"the hierarchy takes correction='none' or 'noise', got "
                                 f"{corr.name!r} (a matrix-flow correction: "
                                 f"matrix_flow(..., correction={corr.name!r}))")
            return corr.hierarchy(self, mu0, t_eval, eta=eta, batch=batch, d=d, method=method,
                                  rtol=rtol, atol=atol, check=check, conv_tol=conv_tol,
                                  blowup=blowup, raise_on_failure=raise_on_failure)
        h_max, conv_tol, max_steps, t_eval, time_limit = _checked_run_args(
            h_max, conv_tol, max_steps, t_eval, integrator, time_limit, progress, method)
        # one wall-clock deadline for the truncation and whichever solver runs after it
        # (method="flow"/"limit", or the fallback of method="auto")
        end = None if time_limit is None else _monotonic() + time_limit
        res: Trajectory
        if method in ("flow", "limit"):
            with _budget(end):
                res = hierarchy_method(self, method, mu0, t_eval, rtol=rtol, atol=atol,
                                       blowup=blowup)
            if raise_on_failure and res.status != 0:
                raise IntegrationError(res.message)
            return res
        y0 = self.initial_state(mu0)
        ys, info, tinfo = self._run(y0, t_eval, rtol, atol, int(max_steps), blowup, h_max,
                                    integrator, time_limit, progress)
        res = self._trajectory(ys, info, tinfo, t_eval, rtol, atol, blowup, time_limit)
        if res.status == 0:
            self._check_run(res, mu0, y0, t_eval, check, rtol, atol, max_steps, blowup, h_max,
                            conv_tol)
        if method == "auto":
            with _budget(end):
                res = auto_extend(self, res, mu0, t_eval, rtol=rtol, atol=atol, blowup=blowup)
        # Assumption 2.4 (gamma > gamma*) behind Corollary 2's bound: diagnostics + a note.
        # Only matrices carry C_0 (note_truncation ignores anything else), and importing the
        # theorems package costs ~0.2 s: not on the start-up path of moments or a law
        if isinstance(mu0, (list, tuple)):
            note_truncation(self.model, mu0, res)
        if raise_on_failure and res.status != 0:
            exc = TruncationNotConverged if res.status == NOT_CONVERGED else IntegrationError
            raise exc(res.message)
        return res

    def _trajectory(self, ys: np.ndarray, info: np.ndarray, tinfo: np.ndarray,
                    t_eval: np.ndarray, rtol: float, atol: float, blowup: float,
                    time_limit: float | None) -> Trajectory:
        """The :class:`Trajectory` of one run of :meth:`_run` (before any check)."""
        status, n_out, steps, nfev, rejected = info[:5].tolist()
        t_reached = tinfo.item(0)  # float(tinfo[0]): the same Python float
        name = self._last_integrator
        diag = {"steps": steps, "nfev": nfev, "rejected": rejected,
                "t_reached": t_reached, "order": self.order, "integrator": name}
        if name == "taylor":
            diag["taylor_order"] = self._last_taylor_order
        diag["threads"] = getattr(self, "_last_threads", 1)
        message = _SUCCESS if status == 0 else status_message(status, t_reached, steps, blowup,
                                                              time_limit or 0.0)
        params = self._params_copy()
        params["order"], params["rtol"], params["atol"] = self.order, rtol, atol
        params["integrator"] = name  # (four stores: no update dict to build)
        # the labels are made when first read (four times the run itself at order 24)
        n = ys.shape[1]  # self.n_moments: _run checked the state's length
        return Trajectory(t=t_eval[:n_out].copy(),
                          y=_transposed(ys if n_out == ys.shape[0] else ys[:n_out]),
                          names=LazySequence(lambda: self.names, n),
                          words=LazySequence(lambda: self.words, n), kind="hierarchy",
                          params=params, seed=None, status=status, message=message,
                          diagnostics=diag)

    def _check_run(self, res: Trajectory, mu0: Any, y0: np.ndarray, t_eval: np.ndarray,
                   check: str | int | Sequence[int] | None, rtol: float, atol: float,
                   max_steps: int, blowup: float, h_max: float, conv_tol: float) -> None:
        """After a successful run: the convergence check of ``check``, or the growth bound
        of an unchecked run, and the message saying which."""
        ladder = self._ladder(check, mu0)
        if ladder:
            self._check_convergence(res, mu0, t_eval, ladder, rtol, atol, max_steps, blowup,
                                    h_max, conv_tol)
        elif check is None or check == "auto":
            # unchecked: a run that grew far past its start is reported, not returned
            # as a success (check=None on a blow-up gave status 0 with max|mu| = 2.4e13)
            _flag_growth(self, res, y0)
        if res.status == 0 and not ladder:
            # say so: a truncation can integrate cleanly far past where it is exact
            res.message += _UNCHECKED_NONE if check is None else _UNCHECKED

    def _ladder(self, check: str | int | Sequence[int] | None, mu0: Any) -> list[int]:
        """Orders to compare with. ``"auto"``: ``order - 2`` from order 4 on. Its
        moments are a subset of ours, so any ``mu0`` serves, and it has about 4x
        fewer moments (K = 2), so the check costs about a quarter of the run (the
        old ``order + 2`` check cost 6-11x at order 20). Below order 4,
        ``order + 2`` when ``mu0`` can provide the longer moments. Explicit
        orders may lie above the order or in ``2..order-1``."""
        if check is None:
            return []
        can_extend = callable(mu0) or (isinstance(mu0, (list, tuple)) and len(mu0) == self.model.K
                                         and all(np.ndim(m) == 2 for m in mu0))
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

    @cached_property
    def _ladder_maps(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`_ladder_map` by order."""
        return {}

    def _ladder_map(self, h: TiedHierarchy) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, cols, low)`` for the ladder's hierarchy ``h`` (same model, another
        order): the common moments are our ``rows`` and ``h``'s ``cols``, and ``low`` the
        positions in ``rows`` of the moments of length <= 2. Made once per order (the word
        lookups cost 45 ms a call at order 20 against 18, a third of a checked run)."""
        hit = self._ladder_maps.get(h.order)
        if hit is not None:
            return hit
        # both word lists are canonical: a dict lookup, not one canonicalisation per word
        if h.order > self.order:
            pos = {tuple(w): i for i, w in enumerate(h.words)}
            rows = np.arange(self.n_moments)
            cols = np.array([pos[tuple(w)] for w in self.words], dtype=np.int64)
        else:
            pos = {tuple(w): i for i, w in enumerate(self.words)}
            rows = np.array([pos[tuple(w)] for w in h.words], dtype=np.int64)
            cols = np.arange(h.n_moments)
        low = np.flatnonzero(self.structure.lengths()[rows] <= 2)
        out = self._ladder_maps[h.order] = (rows, cols, low)
        return out

    def _check_convergence(self, res: Trajectory, mu0: Any, t_eval: np.ndarray,
                           ladder: list[int], rtol: float, atol: float, max_steps: int,
                           blowup: float, h_max: float, conv_tol: float) -> None:
        """Compare with the orders of ``ladder`` on the common moments; status 2 when the
        moments of length <= 2 differ by more than ``conv_tol * max(1, |mu|)``. With a
        lower order the difference is an error estimate of the lower order and, as the
        truncation converges geometrically where it converges at all, a bound for ours."""
        errs = {}
        low_t: dict[str, Any] = {}
        worst = 0.0
        worst_name = ""
        t_conv = float(t_eval[-1])
        for o in ladder:
            h = cast(TiedHierarchy, self.model.hierarchy(o))  # a tied model's hierarchy
            rows, cols, low = self._ladder_map(h)
            if o > self.order:
                y0 = h.initial_state(mu0)
            else:
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
        lad = ", ".join(map(str, ladder))  # plain text, no list brackets
        if worst > conv_tol:
            res.status = NOT_CONVERGED
            res.message = (f"truncation not converged: orders {self.order} and {lad} differ by "
                           f"{worst:.3g} (relative) on {worst_name} > conv_tol {conv_tol:g}; they "
                           f"agree only up to t = {t_conv:.4g} of the output times: shorten the "
                           "horizon, or integrate with method='flow' (matrices) or "
                           "method='limit' (a law), or the default method='auto'")
        else:
            res.message = (f"success: converged in the truncation order (orders {self.order} "
                           f"and {lad} agree to {worst:.2g} on the moments of length <= 2)")


#: Growth per letter beyond which an unchecked truncation is reported as blowing up: a
#: word of length n may reach (GROWTH_PER_LETTER * r0)^n, r0 = max(1, max_alpha
#: |mu_alpha(0)|^(1/|alpha|)) (the spectral scale of the start: |mu_alpha| <= ||S||^n).
GROWTH_PER_LETTER = 1e4


@njit(cache=True)
def bound_code(a: np.ndarray, bound: float) -> int:
    """0 when an entry of the 1-D array ``a`` is NaN or infinite, else 2 when every
    ``-bound <= a_i <= bound``, else 1. So ``bound_code(a, b) == 2`` exactly when
    ``-b <= a.min() and a.max() <= b`` (numpy's min and max are NaN when an entry is)."""
    inside = True
    for i in range(a.size):  # no early exit: the comparisons vectorise (2x faster)
        inside &= (-bound <= a[i]) & (a[i] <= bound)  # False on a NaN
    if inside:
        return 2
    for i in range(a.size):
        if not np.isfinite(a[i]):
            return 0
    return 1


def _flag_growth(h: TiedHierarchy, res: Trajectory, y0: np.ndarray) -> None:
    """Set status -3 on an unchecked truncation whose moments outgrew the bound
    ``(GROWTH_PER_LETTER r0)^n`` on words of length ``n`` (``r0``: the initial scale),
    keeping the output times before the first one past it."""
    if res.y.size == 0:
        return
    # bound_code(a, b) == 2 is "-b <= a.min() and a.max() <= b" in one pass (False on a NaN
    # as numpy's min and max are NaN then): the four reductions cost 4 us per call
    if y0.size and bound_code(y0 if y0.ndim == 1 else y0.ravel(), 1.0) != 2:
        lens = h._growth_bound[0]
        with np.errstate(divide="ignore"):
            r0 = max(1.0, float(np.max(np.abs(y0) ** (1.0 / lens))))
        bound = (GROWTH_PER_LETTER * r0) ** lens
    else:  # |y0| <= 1 everywhere: r0 = 1 and the bound is the hierarchy's own (cached)
        r0 = 1.0
        # the bound grows with n >= 1: within its smallest entry, within every entry (the
        # usual case, two reductions; the pows of the general bound cost 30 us per call)
        if bound_code(res.y.ravel(), GROWTH_PER_LETTER) == 2:
            return  # before the per-moment bound is made (18 ms at order 24, measured)
        bound = h._growth_bound[1]
    ok = np.abs(res.y) <= bound[:, None]
    if ok.all():
        return
    over = ~ok.all(axis=0)
    j = int(np.argmax(over))
    ratio = np.abs(res.y[:, j]) / bound
    i = int(np.nanargmax(np.where(np.isfinite(ratio), ratio, np.inf)))
    t_bad = float(res.t[j])
    res.diagnostics["growth_bound"] = {"r0": r0, "per_letter": GROWTH_PER_LETTER,
                                       "t": t_bad, "word": h.names[i]}
    res.status = -3
    res.message = (f"the moments grew beyond (1e4 r0)^n on words of length n (r0 = {r0:.3g}, "
                   f"the initial scale): {h.names[i]} = {res.y[i, j]:.3g} at t = {t_bad:.4g}; "
                   "the flow blows up or the truncation broke down there (no convergence "
                   "check ran): shorten the horizon, add weight decay, or pass check=order+2")
    res.t = res.t[:j].copy()
    res.y = res.y[:, :j].copy()


def _perf_counter() -> float:
    return _time.perf_counter()


def _progress_default(progress: bool | None) -> bool | None:
    """``progress=None``: a bar only on a terminal (importing tqdm elsewhere costs ~0.3 s)."""
    if progress is not None:
        return progress
    import sys
    try:
        return False if not sys.stderr.isatty() else None
    except (AttributeError, ValueError):
        return False


def _pos_float(x: object, name: str) -> float:
    """:func:`check_pos_float` with its common case first: a finite Python float > 0 is
    returned as is (the same float), anything else goes through the full check."""
    if type(x) is float and 0.0 < x < math.inf:
        return x
    checked: float = check_pos_float(x, name)
    return checked


def _checked_run_args(h_max: float, conv_tol: float, max_steps: int, t_eval: ArrayLike,
                      integrator: str, time_limit: float | None, progress: bool | None,
                      method: str
                      ) -> tuple[float, float, int, np.ndarray, float | None]:
    """``(h_max, conv_tol, max_steps, t_eval, time_limit)`` checked for
    :meth:`TiedHierarchy.integrate` (errors name the argument)."""
    # only +inf means "no cap"; nan and -inf are errors, not silent defaults
    h_max = np.inf if _is_pos_inf(h_max) else check_pos_float(h_max, "h_max")
    conv_tol = _pos_float(conv_tol, "conv_tol")
    if not (type(max_steps) is int and 1 <= max_steps <= MAX_STEPS_CAP):
        max_steps = check_max_steps(max_steps)  # the common case needs no call
    t_eval = check_t_eval(t_eval)
    if integrator not in INTEGRATORS:
        raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
    if time_limit is not None:
        time_limit = check_pos_float(time_limit, "time_limit")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None, True or False, got {progress!r}")
    if not (isinstance(method, str) and method == "truncation"):
        check_method(method)
    return h_max, conv_tol, max_steps, t_eval, time_limit


def _monotonic() -> float:
    import time
    return time.monotonic()


def _budget(end: float | None) -> AbstractContextManager[Any]:
    """The wall-clock deadline ``end`` for the flow and limit solvers (nothing when
    ``None``: odesolve imports scipy, not on the start-up path of a plain truncation)."""
    if end is None:
        import contextlib
        return contextlib.nullcontext()
    from attndyn.numeric.attention.odesolve import time_budget
    return time_budget(until=end)


def _is_pos_inf(x: object) -> bool:
    try:
        return bool(x == np.inf)
    except (TypeError, ValueError):
        return False


METHODS = ("truncation", "flow", "limit", "auto")


def check_method(method: object) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


def _is_matrices(h: TiedHierarchy, mu0: object) -> bool:
    return (isinstance(mu0, (list, tuple)) and len(mu0) == h.model.K
            and all(np.ndim(m) == 2 for m in mu0))


#: The smallest rtol scipy's DOP853 honours (``100 eps``; below, it raises rtol to this
#: and warns). The flow route runs at ``max(rtol, FLOW_RTOL_FLOOR)`` and says so.
FLOW_RTOL_FLOOR = 100 * float(np.finfo(float).eps)


def _flow_result(h: TiedHierarchy, mats: Sequence[ArrayLike], t_eval: np.ndarray, rtol: float,
                 atol: float, blowup: float) -> LimitTrajectory:
    from attndyn.numeric.attention.tied.limit import LimitTrajectory
    from attndyn.numeric.attention.tied.flow import tied_fast_flow
    mats = h.model.check_matrices(mats)
    used = max(rtol, FLOW_RTOL_FLOOR)  # the error estimate must be the run's, not the ask's
    fo = tied_fast_flow(h.model, mats, t_eval, h.words, rtol=used, atol=atol, blowup=blowup)
    params = h.model.params_dict()
    params.update({"order": h.order, "rtol": rtol, "atol": atol, "method": "flow",
                   "d": int(mats[0].shape[0])})
    err = 100 * used * np.maximum(1.0, np.abs(fo.traces))  # integrator tolerance, global
    d = int(mats[0].shape[0])
    note = f"finite-d matrix flow, d = {d} (exact trace projection)"
    if used > rtol:
        note += f"; rtol {rtol:.2g} raised to {used:.2g}, the solver's floor"
    seg = [{"method": "flow", "t_start": 0.0, "t_end": float(fo.t[-1]) if fo.t.size else 0.0,
            "error": float(err.max()) if err.size else 0.0, "note": note}]
    msg = (f"success: method 'flow' (matrix flow, d = {d}, {fo.form} form) on "
           f"[0, {t_eval[-1]:.4g}]" if fo.status == 0 else fo.message)
    if used > rtol:
        msg += f"; rtol {rtol:.2g} raised to {used:.2g}, the solver's floor (100 eps)"
    return LimitTrajectory(t=fo.t, y=fo.traces, names=list(h.names), words=list(h.words),
                           kind="hierarchy", params=params, status=fo.status, message=msg,
                           diagnostics={"error": err, "method": "flow", "segments": seg,
                                        "nfev": fo.nfev, "d": d, "rtol_used": used})


def _limit_result(h: TiedHierarchy, law: FreeInit, t_eval: np.ndarray, rtol: float,
                  atol: float, blowup: float, **kw: Any) -> LimitTrajectory:
    from attndyn.numeric.attention.tied.limit import limit_flow
    # the exact solvers tighten rtol themselves; the equivalents' error is O(1/d) anyway
    r = limit_flow(check_model(h.model), law, t_eval, rtol=max(rtol, 1e-8), atol=atol,
                   words=h.words, blowup=blowup, **kw)
    r.kind = "hierarchy"
    r.names = list(h.names)
    r.params["order"] = h.order
    sub = r.diagnostics["method"]
    err = np.asarray(r.diagnostics["error"], float)
    assert r.words is not None  # limit_flow was given the words
    low = [i for i, w in enumerate(r.words) if len(w) <= 2]
    r.diagnostics["segments"] = [{"method": "limit", "t_start": 0.0,
                                  "t_end": float(r.t[-1]) if r.t.size else 0.0,
                                  "error": float(np.nanmax(err[low])) if err.size else 0.0,
                                  "error_all_words": float(np.nanmax(err)) if err.size else 0.0,
                                  "note": f"d -> infinity ({sub}); error on the words of "
                                          f"length <= 2"}]
    if r.status == 0:
        r.message = f"success: method 'limit' ({sub}) on [0, {t_eval[-1]:.4g}]; " + r.message
    return r


def hierarchy_method(h: TiedHierarchy, method: str, mu0: Any, t_eval: np.ndarray, *,
                     rtol: float, atol: float, blowup: float,
                     limit_kwargs: dict[str, Any] | None = None) -> LimitTrajectory:
    """``method="flow"`` or ``"limit"`` for a :class:`TiedHierarchy` (no truncation)."""
    if method == "flow":
        if not _is_matrices(h, mu0):
            raise ValueError("method='flow' needs mu0 as the K matrices S_k (a list of d x d arrays)")
        return _flow_result(h, mu0, t_eval, rtol, atol, blowup)
    if not isinstance(mu0, FreeInit):
        raise ValueError("method='limit' needs mu0 as a law (attndyn.symbolic.initial.FreeInit)")
    return _limit_result(h, mu0, t_eval, rtol, atol, blowup, **(limit_kwargs or {}))


def auto_extend(h: TiedHierarchy, res: Trajectory, mu0: Any, t_eval: np.ndarray, *,
                rtol: float, atol: float, blowup: float,
                limit_kwargs: dict[str, Any] | None = None) -> Trajectory:
    """``method="auto"``: keep the truncation where its convergence check holds,
    and take the matrix flow (matrices) or the limit solver (a law) beyond.
    The result says which method produced which time range, with what error."""
    from attndyn.numeric.attention.tied.limit import LimitTrajectory
    trunc_err: Any = res.diagnostics.get("truncation_error_low")
    checked = trunc_err is not None or "ladder" in res.diagnostics
    T = float(t_eval[-1])
    if res.status not in (0, 2, -3):
        # an integrator failure other than a blow-up (step cap, ...) is reported as is
        res.message += "; method 'auto' did not fall back (not a convergence failure)"
        return res
    if res.status == 0:
        if checked:
            res.diagnostics["segments"] = [{"method": "truncation", "t_start": 0.0, "t_end": T,
                                            "error": float(trunc_err),
                                            "note": f"order {h.order}, converged"}]
            res.message += f"; method 'auto': truncation on [0, {T:.4g}]"
        else:
            res.diagnostics["segments"] = [{"method": "truncation", "t_start": 0.0, "t_end": T,
                                            "error": None, "note": "convergence not checked"}]
            res.message += "; method 'auto': truncation only (its convergence was not checked)"
        return res
    alt = None
    if _is_matrices(h, mu0):
        alt = _flow_result(h, mu0, t_eval, rtol, atol, blowup)
    elif isinstance(mu0, FreeInit):
        alt = _limit_result(h, mu0, t_eval, rtol, atol, blowup, **(limit_kwargs or {}))
    if alt is None:
        res.message += ("; method 'auto' has no flow or limit to fall back on for this mu0 "
                        "(give the matrices S_k or a FreeInit law)")
        return res
    if alt.status != 0:
        res.message += f"; method 'auto': the fallback failed too ({alt.message})"
        return res
    # truncation range: output times up to t_converged (only if the check ran and passed there)
    t_conv = res.diagnostics.get("t_converged") if res.status == 2 else None
    n_tr = 0
    if t_conv is not None and res.t.size:
        n_tr = int(np.searchsorted(t_eval, t_conv, side="right"))
        n_tr = min(n_tr, res.t.size)
        if n_tr == 1 and t_eval[0] == 0.0:
            n_tr = 0  # agreement at t = 0 alone says nothing
    y = alt.y.copy()
    err = np.asarray(alt.diagnostics["error"], float).copy()
    low = [i for i, w in enumerate(h.words) if len(w) <= 2]  # the headline error's rows
    segs = []
    if n_tr:
        lt = res.diagnostics.get("truncation_error_low_t", {})
        y[:, :n_tr] = res.y[:, :n_tr]
        # the check's difference on t_k, q_kl at each time; NaN: a word it does not estimate
        err[:, :n_tr] = np.nan
        if lt.get("rows"):
            err[lt["rows"], :n_tr] = np.asarray(lt["diff"], float)[:, :n_tr]
        segs.append({"method": "truncation", "t_start": 0.0, "t_end": float(t_eval[n_tr - 1]),
                     "error": float(np.nanmax(err[low, :n_tr])),
                     "note": f"order {h.order}, converged in the order up to here"})
    a = alt.diagnostics["segments"][0]
    t_start = float(t_eval[n_tr]) if n_tr < t_eval.size else T
    segs.append({"method": a["method"], "t_start": t_start, "t_end": T,
                 "error": float(np.nanmax(err[low, n_tr:])) if n_tr < t_eval.size else 0.0,
                 "note": a["note"]})
    params = dict(res.params)
    params.update({"method": "auto"})
    parts = ", ".join(f"{s['method']} on {'[' if s['t_start'] == 0 else '('}{s['t_start']:.4g}, "
                      f"{s['t_end']:.4g}] (error <= {s['error']:.2g} on t_k, q_kl; {s['note']})"
                      for s in segs)
    message = (f"success: method 'auto': {parts}; the truncation alone had status "
               f"{res.status}: {res.message}")
    diag = dict(res.diagnostics)
    diag.update({"error": err, "segments": segs, "method": "auto",
                 "method_index": np.array([0] * n_tr + [1] * (t_eval.size - n_tr)),
                 "fallback": alt.diagnostics.get("method"),
                 "row_method": alt.diagnostics.get("row_method")})
    return LimitTrajectory(t=t_eval.copy(), y=y, names=list(h.names), words=list(h.words),
                           kind="hierarchy", params=params, seed=alt.seed, status=0,
                           message=message, diagnostics=diag)


def note_truncation(model: TiedModelLike, mu0: Sequence[Any], res: Trajectory) -> None:
    """For a truncated tied hierarchy integrated from matrices ``mu0``: record Assumption 2.4
    in ``res.diagnostics["assumptions"]`` and, when it is not met, say so in the message
    (the truncation bound of Corollary 2 does not apply; the run's own convergence check
    is what measures its error). Other ``mu0`` (moments, a law) carry no ``C_0``: nothing
    is added."""
    from attndyn.numeric.attention.tied.assumptions import assumption_2_4
    if not (isinstance(mu0, (list, tuple)) and len(mu0) == model.K
            and all(np.ndim(m) == 2 for m in mu0)):
        return
    v = assumption_2_4(model, mu0)
    res.diagnostics["assumptions"] = [v.as_dict()]
    if v.holds is False:
        res.message += f"; note: {v}"
