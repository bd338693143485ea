"""The untied slow hierarchy (eqs. (31)-(32))."""

from __future__ import annotations

import math
from functools import cached_property
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attndyn.numeric.attention.base import finite_word_traces, Hierarchy
from attndyn.numeric.attention.untied.coefficients import (H_FAIL, H_ITERS, H_NONCONVEX,
                                                           kernel_integrate, kernel_prepare,
                                                           kernel_rhs, kernel_system,
                                                           letter_mats, low_from_words, obs,
                                                           rk_status_message, NOT_CONVERGED,
                                                           ROOT_FAILED, RootError, SlowState,
                                                           coefficients, UntiedTrajectory)
from attndyn.numeric.attention.untied.fastslow import newton, critical_mean, CriticalMean
from attndyn.numeric.core.results import IntegrationError, TruncationNotConverged
from attndyn.numeric.core.validate import (check_pos_float, check_finite_result, check_max_steps,
                                           check_t_eval)
from attndyn.symbolic import untied as su

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.attention.base import UntiedModelLike
    from attndyn.numeric.core.types import ArrayLike

__all__ = ["UntiedHierarchy", "hierarchy"]


class UntiedHierarchy(Hierarchy):
    """The slow hierarchy (31)-(32) of one model at one truncation order (eq. 892).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> h = model.hierarchy(2)
    >>> isinstance(h, attndyn.UntiedHierarchy), h.n_moments
    (True, 17)
    >>> h.names[:6]
    ['mu_M1', 'mu_A1', 'mu_B1', 'mu_M2', 'mu_M1_M1', 'mu_M1_Mt1']
    """

    # an UntiedModel (check_factors is not part of the protocol)
    model: UntiedModelLike
    structure: su.UntiedStructure

    def __init__(self, model: UntiedModelLike, order: int, letters: Sequence[int] | None = None
                 ) -> None:
        self.model = model
        self.theory = coefficients(model)
        self.order = su.check_untied_order(order)
        self.structure = su.untied_structure(model.K, model.trainable, self.order, letters)

    @cached_property
    def names(self) -> list[str]:
        return [su.word_name(w, self.model.K) for w in self.words]

    # -- printing ------------------------------------------------------------------------
    def equations(self) -> list:
        """SymPy equations ``d mu_alpha/d tau`` of eq. (32) with ``T^bias``, ``T^diff`` written out."""
        return su.untied_equations(self.structure)

    def text(self) -> str:
        return su.untied_text(self.equations())

    def latex(self) -> str:
        return su.untied_latex(self.equations(), self.structure)

    # -- states --------------------------------------------------------------------------
    def moments_from_matrices(self, pairs: Any) -> SlowState:
        """The initial slow state of pairs ``(U_k, V_k)``: every moment of
        ``.words`` (exact normalised traces) and the means ``m_k(0)``."""
        pairs = self.model.check_factors(pairs, "pairs")
        with np.errstate(over="ignore", invalid="ignore"):  # overflow: refused just below
            mats, Ms = letter_mats(pairs)
            m0 = np.array([np.trace(Mk) for Mk in Ms]) / math.sqrt(pairs[0][0].shape[0])
        d = pairs[0][0].shape[0]
        mu = finite_word_traces(mats, self.words, "U_k V_k^T")
        m0 = check_finite_result(m0, "means m_k(0)", "U_k V_k^T")
        return SlowState(words=list(self.words), mu=mu, m0=m0, pairs=pairs, d=d)

    def initial_state(self, init: Any) -> SlowState:
        if isinstance(init, SlowState):
            if list(init.words) == list(self.words):
                st = init
            elif init.pairs is not None:
                st = self.moments_from_matrices(init.pairs)
            else:
                look = {tuple(w): i for i, w in enumerate(init.words)}
                miss = [w for w in self.words if w not in look]
                if miss:
                    raise ValueError(f"the state lacks {len(miss)} moments of order "
                                     f"{self.order}, e.g. {miss[:3]}")
                st = SlowState(words=list(self.words),
                               mu=np.array([init.mu[look[w]] for w in self.words]),
                               m0=np.array(init.m0, float), d=init.d)
        else:
            st = self.moments_from_matrices(init)
        mu = np.ascontiguousarray(st.mu, dtype=np.float64)
        if mu.shape != (self.n_moments,) or not np.all(np.isfinite(mu)):
            raise ValueError(f"state moments must be {self.n_moments} finite numbers")
        m0 = np.asarray(st.m0, float)
        if m0.shape != (self.model.K,) or not np.all(np.isfinite(m0)):
            raise ValueError(f"state means m0 must be K = {self.model.K} finite numbers")
        return st

    # -- kernel --------------------------------------------------------------------------
    @cached_property
    def _prepared(self) -> SimpleNamespace:
        prep: SimpleNamespace = kernel_prepare(self.structure,
                                                np.array([self.model.weight_decay]))
        return prep

    def _system(self, m_star: np.ndarray, tol: float = 1e-12, maxit: int = 50
                ) -> SimpleNamespace:
        sysm: SimpleNamespace = kernel_system(
            self._prepared, self.theory.coefficient_function,
            self.theory.params_vector(m_star, tol=tol, maxit=maxit))
        return sysm

    def root(self, state: Any, **kw: Any) -> CriticalMean:
        st = self.initial_state(state)
        return critical_mean(self.model, st, **kw)

    def rhs(self, state: Any) -> NDArray[np.float64]:
        """``d mu / d tau`` (eq. 32) at ``state`` over ``.words``, with the means
        slaved to the root ``m*`` that the fast phase reaches from ``state.m0``."""
        st = self.initial_state(state)
        cm = critical_mean(self.model, st, warn=False)
        if not cm.success:
            raise RootError(cm.message)
        sysm = self._system(cm.m)
        dy: np.ndarray = kernel_rhs(sysm, st.mu)
        if sysm.gparams[H_FAIL] > 0 or not np.all(np.isfinite(dy)):
            raise RootError("the compiled Newton solve for m*(q) failed at this state")
        return dy

    def integrate(self, init: Any, tau_eval: ArrayLike, *, rtol: float = 1e-10,
                  atol: float = 1e-12, max_steps: int = 1_000_000, blowup: float = 1e100,
                  h_max: float = np.inf, check: str | int | Sequence[int] | None = "auto",
                  conv_tol: float = 1e-6, newton_tol: float = 1e-12,
                  raise_on_failure: bool = False) -> UntiedTrajectory:
        """Integrate the truncated slow hierarchy from ``init`` (pairs or a :class:`SlowState`).

        The means are slaved, ``m = m*(q)`` (eq. 29), starting from the root that
        the fast flow reaches from ``m(0)``; the compiled coefficient function
        follows it by warm-started Newton. ``check`` as for the tied hierarchy:
        ``"auto"`` compares with order ``M + 2`` when ``init`` can provide the
        longer moments (pairs, or a state built from pairs); status 2 with
        ``diagnostics["t_converged"]`` when the orders disagree beyond
        ``conv_tol`` on the moments of length <= 2. Status ``-5``: the root
        search failed (at the start or along the way).

        Result rows: every word (``mu_M1_Mt2``...), then ``m_k``, ``tA_k``,
        ``tB_k`` (trainable ``k``), ``q1_kl``, ``q2_kl``.
        """
        rtol = check_pos_float(rtol, "rtol")
        atol = check_pos_float(atol, "atol")
        blowup = check_pos_float(blowup, "blowup")
        conv_tol = check_pos_float(conv_tol, "conv_tol")
        h_max = check_pos_float(h_max, "h_max") if np.isfinite(h_max) else np.inf
        max_steps = check_max_steps(max_steps)
        tau_eval = check_t_eval(tau_eval, "tau_eval")
        st = self.initial_state(init)
        cm = critical_mean(self.model, st, warn=True)
        params = self.model.params_dict()
        params.update({"order": self.order, "rtol": rtol, "atol": atol,
                       "time": "tau = eta * n / d (slow)"})
        diag = {"order": self.order, "root": cm.label, "root_status": cm.status,
                "root_diagnostics": {k: v for k, v in cm.diagnostics.items()},
                "unstable_start": cm.unstable_start, "assumption5": cm.stable,
                "t_boundary_layer": cm.diagnostics.get("t_boundary_layer")}
        if not cm.success:
            res = self._result(tau_eval[:0], np.zeros((self.n_moments, 0)), None, params,
                               ROOT_FAILED, f"root search failed: {cm.message}", diag)
            if raise_on_failure:
                raise RootError(res.message)
            return res
        ys, info, tinfo, sysm = self._run(st.mu, cm.m, tau_eval, rtol, atol, int(max_steps),
                                          blowup, h_max, newton_tol)
        status, n_out = int(info[0]), int(info[1])
        diag.update({"steps": int(info[2]), "nfev": int(info[3]), "rejected": int(info[4]),
                     "t_reached": float(tinfo[0]), "newton_failures": int(sysm.gparams[H_FAIL]),
                     "not_convex_evaluations": int(sysm.gparams[H_NONCONVEX]),
                     "newton_iterations": int(sysm.gparams[H_ITERS])})
        message = rk_status_message(status, float(tinfo[0]), int(info[2]), blowup)
        if status != 0 and sysm.gparams[H_FAIL] > 0:
            status = ROOT_FAILED
            message = (f"root search for m*(q) failed along the slow trajectory near tau = "
                       f"{tinfo[0]:.4g} (Newton on the m-Hessian did not converge: the root "
                       "vanished or Assumption 5 broke down); " + message)
        Y = ys[:n_out].T.copy()
        means = self._means(Y, cm.m, newton_tol)
        res = self._result(tau_eval[:n_out], Y, means, params, status, message, diag)
        if sysm.gparams[H_NONCONVEX] > 0:
            res.message += (f"; Assumption 5 failed at {int(sysm.gparams[H_NONCONVEX])} "
                            "evaluations (m-Hessian not positive definite at m*)")
        if status == 0:
            ladder = self._ladder(check, st)
            if ladder:
                self._check_convergence(res, st, tau_eval, ladder, rtol, atol, int(max_steps),
                                        blowup, h_max, conv_tol, cm.m, newton_tol)
            elif check == "auto":
                note = self.__dict__.pop("_ladder_note", None)
                res.message += note or ("; convergence in the truncation order was not checked "
                                        "(pass the pairs (U_k, V_k) to provide the longer "
                                        "moments)")
        if raise_on_failure and res.status != 0:
            exc = TruncationNotConverged if res.status == NOT_CONVERGED else IntegrationError
            raise exc(res.message)
        return res

    def _run(self, mu0: np.ndarray, m_star: np.ndarray, t_eval: np.ndarray, rtol: float,
             atol: float, max_steps: int, blowup: float, h_max: float, newton_tol: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, SimpleNamespace]:
        sysm = self._system(m_star, tol=newton_tol)
        ys, info, tinfo = kernel_integrate(sysm, np.ascontiguousarray(mu0), t_eval, rtol, atol,
                                            max_steps, blowup, h_max)
        return ys, info, tinfo, sysm

    def _means(self, Y: np.ndarray, m_star: np.ndarray, newton_tol: float) -> np.ndarray:
        K = self.model.K
        tr = list(self.model.trainable)
        out = np.empty((K, Y.shape[1]))
        m = np.array(m_star, float)
        for j in range(Y.shape[1]):
            _, _, q1, q2 = low_from_words(K, self.words, Y[:, j])
            m, ok, _, _ = newton(self.theory, m, q1, q2, tr, tol=newton_tol)
            out[:, j] = m if ok else np.nan
        return out

    def _result(self, t: np.ndarray, Y: np.ndarray, means: np.ndarray | None,
                params: dict[str, Any], status: int, message: str, diag: dict[str, Any]
                ) -> UntiedTrajectory:
        K = self.model.K
        tr = list(self.model.trainable)
        names = list(self.names)
        rows = [Y]
        if means is not None and Y.shape[1]:
            cols = []
            for j in range(Y.shape[1]):
                tA, tB, q1, q2 = low_from_words(K, self.words, Y[:, j])
                cols.append(np.concatenate([means[:, j], tA[tr], tB[tr], q1.ravel(), q2.ravel()]))
            rows.append(np.array(cols).T)
        else:
            rows.append(np.zeros((K + 2 * len(tr) + 2 * K * K, Y.shape[1])))
        names += ([obs("m", k) for k in range(K)] + [obs("tA", k) for k in tr]
                  + [obs("tB", k) for k in tr]
                  + [obs("q1", k, l) for k in range(K) for l in range(K)]
                  + [obs("q2", k, l) for k in range(K) for l in range(K)])
        return UntiedTrajectory(t=np.asarray(t, float).copy(), y=np.vstack(rows), names=names,
                                words=list(self.words), kind="untied_hierarchy", params=params,
                                status=status, message=message, diagnostics=diag,
                                inv=su.untied_alphabet(K).inv)

    def _ladder(self, check: str | int | Sequence[int] | None, st: SlowState) -> list[int]:
        can = st.pairs is not None
        if check is None:
            return []
        if isinstance(check, str):
            if check != "auto":
                raise ValueError(f"check must be None, 'auto', an order or a list of orders, "
                                 f"got {check!r}")
            if can and su.estimate_size(len(self.structure.letters), self.order + 2) > 2e6:
                self._ladder_note = (f"; convergence not checked: order {self.order + 2} would "
                                     "hold more than 2e6 moments (pass check=[...] to force)")
                return []
            return [self.order + 2] if can else []
        orders = [check] if isinstance(check, (int, np.integer)) else list(check)
        orders = [su.check_untied_order(o, "check") for o in orders]
        for o in orders:
            if o <= self.order:
                raise ValueError(f"check orders must exceed the order {self.order}, got {o}")
        if not can:
            raise ValueError("a convergence check needs the pairs (U_k, V_k) (or a state built "
                             "from them) to provide the longer moments")
        return orders

    def _check_convergence(self, res: UntiedTrajectory, st: SlowState, t_eval: np.ndarray,
                           ladder: list[int], rtol: float, atol: float, max_steps: int,
                           blowup: float, h_max: float, conv_tol: float, m_star: np.ndarray,
                           newton_tol: float) -> None:
        low = [i for i, w in enumerate(self.words) if len(w) <= 2]
        worst, worst_name, errs = 0.0, "", {}
        t_conv = float(t_eval[-1])
        n_t = res.t.size
        for o in ladder:
            h = hierarchy(self.model, o, self.structure.letters)
            y0 = h.moments_from_matrices(st.pairs).mu
            ys, info, tinfo, _ = h._run(y0, m_star, t_eval, rtol, atol, max_steps, blowup, h_max,
                                        newton_tol)
            if info[0] != 0:
                res.status = NOT_CONVERGED
                res.message = (f"truncation not converged: order {o} failed at tau = "
                               f"{tinfo[0]:.4g} while order {self.order} did not; the truncation "
                               "is not trustworthy on this horizon (use untied_flow)")
                res.diagnostics["ladder"] = list(ladder)
                res.diagnostics["t_converged"] = float(tinfo[0])
                return
            idx = np.array([h.index(w) for w in self.words])
            Ylow = res.y[:self.n_moments, :n_t]
            rel = np.abs(ys[:n_t, idx].T - Ylow) / np.maximum(1.0, np.abs(Ylow))
            per = rel.max(axis=1)
            errs[o] = per
            bad = np.flatnonzero(rel[low].max(axis=0) > conv_tol)
            t_ok = float(t_eval[-1]) if bad.size == 0 else (
                float(t_eval[bad[0] - 1]) if bad[0] > 0 else float(t_eval[0]))
            t_conv = min(t_conv, t_ok)
            j = low[int(np.argmax(per[low]))]
            if per[j] > worst:
                worst, worst_name = float(per[j]), self.names[j]
        res.diagnostics["ladder"] = list(ladder)
        res.diagnostics["truncation_error"] = {int(o): e for o, e in errs.items()}
        res.diagnostics["truncation_error_low"] = worst
        res.diagnostics["t_converged"] = t_conv
        lad = ", ".join(map(str, ladder))  # plain text, no list brackets
        if worst > conv_tol:
            res.status = NOT_CONVERGED
            res.message = (f"truncation not converged: orders {self.order} and {lad} differ by "
                           f"{worst:.3g} (relative) on {worst_name} > conv_tol {conv_tol:g}; they "
                           f"agree only up to tau = {t_conv:.4g}: shorten the horizon or use "
                           "attndyn.numeric.untied_flow")
        else:
            res.message = (f"success: converged in the truncation order (orders {self.order} "
                           f"and {lad} agree to {worst:.2g} on the moments of length <= 2)")


def hierarchy(model: UntiedModelLike, order: int, letters: Sequence[int] | None = None
              ) -> UntiedHierarchy:
    """The (cached) order-``M`` slow hierarchy of ``model``."""
    th = coefficients(model)
    key = (su.check_untied_order(order), None if letters is None else tuple(letters))
    if letters is not None and tuple(letters) == su.closed_letters(model.K, model.trainable):
        key = (key[0], None)
    h = th._hier.get(key)
    if h is None:
        h = th._hier[key] = UntiedHierarchy(model, key[0], None if key[1] is None else letters)
    return h
