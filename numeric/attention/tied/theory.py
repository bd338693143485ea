"""The tied theory (paper 003, section 3): the finite-d matrix flow (eq. 11 before the
projection), the truncated hierarchy (eqs. 11-13) and the ``d -> infinity`` limit from
the law of the factors, with the corrections of the finite learning rate and width
(issue 16): ``"noise"``, ``"noise+finite-d"`` (:mod:`.noise_flow`) and ``"finite-d"``
(:mod:`.finite_width`). Built by ``TiedModel.theory``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from attndyn.numeric.attention.base import NONE, FeasibleSpec, Theory
from attndyn.numeric.attention.tied.assumptions import tied_diagnostics
from attndyn.numeric.attention.tied.flow import tied_matrix_flow
from attndyn.numeric.attention.tied.runner import theory_rows
from attndyn.numeric.core.results import Trajectory

__all__ = ["TiedTheory"]


class _Corrections(Mapping):
    """``name -> correction`` of a tied model; the noise and finite-d ones are made (their
    modules imported) on first use: 30 ms of CPU that an integrate without them, and the
    start-up, do not need. One object per name for the life of the process."""

    _names = ("none", "noise", "noise+finite-d", "finite-d")

    def __init__(self) -> None:
        self._made: dict[str, Any] | None = None

    def __getitem__(self, name: str) -> Any:
        if name == "none":
            return NONE
        if name not in self._names:
            raise KeyError(name)
        if self._made is None:
            from attndyn.numeric.attention.tied.finite_width import FiniteWidth
            from attndyn.numeric.attention.tied.noise_flow import TiedNoise, TiedNoiseFiniteD
            self._made = {"noise": TiedNoise(), "noise+finite-d": TiedNoiseFiniteD(),
                          "finite-d": FiniteWidth()}
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class TiedTheory(Theory):
    """The theories of a :class:`~attndyn.TiedModel`: ``"flow"`` (the matrix flow from
    ``S_k = W_k W_k^T``, default), ``"hierarchy"`` (the truncation at ``order``, default
    4) and ``"limit"`` (``d -> infinity`` from the law of the factors, issue 9); every row
    named as the SGD observables, with ``p_kl`` and ``loss = Phi(q)``."""

    names = ("flow", "hierarchy", "limit")
    corrections: Mapping[str, Any] = _Corrections()
    feasible = FeasibleSpec(grams=(("q",),), nonnegative=True,
                           text="tied: q = Tr(S_k S_l)/d PSD and entrywise >= 0 (Gram matrix "
                                "of PSD matrices)")

    def _repr_html_(self):
        from attndyn.numeric.core.display import html_summary
        return html_summary("TiedTheory", {"methods": list(self.names),
                                           "corrections": list(self.corrections),
                                           "model": repr(self.model)})

    def check(self, name, order):
        name = "flow" if name is None else name
        if name not in self.names:
            raise ValueError(f"theory for a TiedModel must be 'flow', 'hierarchy' or 'limit', "
                             f"got {name!r}")
        if order is None:
            order = 4 if name == "hierarchy" else 2
        if name == "hierarchy" and order < 2:
            raise ValueError("order must be >= 2 for the hierarchy comparison")
        return name, order

    def tracked(self, q0, run):
        """Run the trajectory solver ``run()`` with the model's potential on its trajectory
        route (issue 25): a :class:`~attndyn.numeric.attention.potentials.surrogate.SurrogateRoute`
        builds its certified box around the start ``q0`` (a ``K x K`` overlap matrix, or a
        callable giving it, called only when needed), grows it when the run leaves it and
        serves the quadrature outside (:func:`~attndyn.numeric.attention.potentials.run_tracked`);
        every route records ``diagnostics["potential"]`` (route, certificate, worst
        estimated error) and names a missed tolerance in the message."""
        pot = self.model.numeric_potential
        if pot is None:
            # exact route: nothing to track, an empty error report; potentials.py (SymPy)
            # stays unimported on this path, which a cached model integrates without SymPy
            res = run()
            res.diagnostics["potential"] = {
                "route": self.model.potential_route, "rtol": 0.0, "atol": 0.0, "calls": None,
                "max_error": 0.0, "max_ratio": 0.0, "over_tolerance": 0,
                "within_tolerance": True}
            return res
        from attndyn.numeric.attention.potentials import record_error, run_tracked
        if callable(getattr(pot, "prepare", None)) and callable(q0):
            try:
                q0 = q0()
            except (TypeError, ValueError):
                q0 = None  # bad input: the solver itself says what is wrong
        if callable(getattr(pot, "prepare", None)) and (q0 is None or callable(q0)):
            res = run()  # no start to build a box around: the solver's own error (if any)
            record_error(res, pot)
            return res
        return run_tracked(pot, q0, run)

    def prepare_box(self, qs) -> dict | None:
        """Build the trajectory route's certified box once, around the overlaps ``qs``
        (``(n, K, K)``: a whole expected path, e.g. SGD runs or a pilot flow over the
        horizon), with the route's margins, so that the solvers run afterwards find every
        ``q`` they visit inside it instead of growing the box as they leave it (issue 25).
        Returns ``{"covered", "cpu_s", "certificate"}``, or ``None`` when the model's
        potential has no box (exact, Hermite, a given surrogate)."""
        import time

        pot = self.model.numeric_potential
        if not callable(getattr(pot, "prepare", None)):
            return None
        t0 = time.process_time()
        covered = bool(pot.prepare(np.asarray(qs, dtype=float)))
        return {"covered": covered, "cpu_s": time.process_time() - t0,
                "certificate": pot.certificate}

    def run(self, init, t, **options) -> Trajectory:
        """:meth:`Theory.run` with the potential on its trajectory route (:meth:`tracked`),
        the box built around the overlaps of the SGD's initial factors."""
        def q0():
            Ws = [np.asarray(W, dtype=float) for W in self.model.check_init(init)]
            d = Ws[0].shape[0]
            return np.array([[np.sum((Wk.T @ Wl) ** 2) / d for Wl in Ws] for Wk in Ws])
        return self.tracked(q0, lambda: super(TiedTheory, self).run(init, t, **options))

    def uncorrected(self, init, t, *, name, order, check, words, **options) -> Trajectory:
        """Matrix flow, truncated hierarchy or limit from ``S_k = W_k W_k^T``."""
        model = self.model
        S = [W @ W.T for W in model.check_init(init)]
        if name == "flow":
            th = self.matrix_flow(S, t, order=order, **options)
        elif name == "limit":  # d -> infinity from the law of the factors (issue 9)
            from attndyn.numeric.attention.tied.limit import limit_theory  # scipy: lazily
            th = limit_theory(model, model.check_init(init), t, order=order, **options)
        else:
            options.setdefault("method", "truncation")  # the truncation itself, with its status
            th = self.hierarchy(order).integrate(S, t, check=check, **options)
        return theory_rows(model, th, words)

    def matrix_flow(self, matrices, t_eval, *, order: int = 4, words=None, rtol: float = 1e-11,
                    atol: float = 1e-13, method: str = "DOP853", keep_matrices: bool = False,
                    blowup: float = 1e100, raise_on_failure: bool = False) -> Trajectory:
        """The finite-d tied matrix flow; see :func:`attndyn.numeric.attention.flow.matrix_flow`
        (the potential on its trajectory route, :meth:`tracked`)."""
        def q0():
            mats = self.model.check_matrices(matrices)
            d = mats[0].shape[0]
            return np.array([[np.sum(Sk * Sl) / d for Sl in mats] for Sk in mats])
        return self.tracked(q0, lambda: tied_matrix_flow(self.model, matrices, t_eval, order=order, words=words,
                                rtol=rtol, atol=atol, method=method, keep_matrices=keep_matrices,
                                blowup=blowup, raise_on_failure=raise_on_failure))

    def hierarchy(self, order: int, *, max_terms: int | None = None):
        """The hierarchy (eq. 11) truncated at ``order`` (eq. 13), cached per order."""
        return self.model.hierarchy(order, max_terms=max_terms)

    def spectral_density(self, law, t_eval, **options):
        """The eigenvalue law of ``S_k(t)`` as ``d -> infinity``: exact for a commuting law,
        from deterministic equivalents with a stated error for a free (non-commuting) one
        (:func:`~attndyn.numeric.attention.tied.spectral.tied_spectral_density`)."""
        from attndyn.numeric.attention.tied.spectral import tied_spectral_density
        return tied_spectral_density(self.model, law, t_eval, **options)

    def limit_flow(self, law, t_eval, *args, **options):
        """The ``d -> infinity`` limit of the tied hierarchy from a law (issue 9), the
        potential on its trajectory route (:meth:`tracked`, box around the law's ``q``)."""
        from attndyn.numeric.attention.tied.limit import check_law, tied_limit_flow  # scipy: lazily
        K = self.model.K

        def q0():
            vals = check_law(self.model, law)([(k, l) for k in range(K) for l in range(K)])
            return np.array(vals, dtype=float).reshape(K, K)
        return self.tracked(q0, lambda: tied_limit_flow(self.model, law, t_eval, *args, **options))

    def assumptions(self, init, quick: bool = False) -> list:
        """Theorem 2's Assumptions 2.1, 2.2, 2.4 and 3 at ``init`` (factors or matrices)."""
        return tied_diagnostics(self.model, init, quick)

    def landscape_potential(self):
        return self.model.potential
