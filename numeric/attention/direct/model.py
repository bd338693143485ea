"""Direct optimisation over S (paper 003, appendix E): the closed ODE and weak recovery.

Online SGD on the attention matrices themselves (eq. 395),

    S_k <- S_k - eta * chi_k * (batch-mean grad_{S_k} L + (gamma/d) S_k),

closes in finitely many order parameters (Theorem 4): in the time
``tau = eta * n / d`` (no factor 4, unlike the tied model)::

    dt_k/dtau     = -2 chi_k sum_m (A + B)_km t_m - gamma chi_k t_k                 (402)
    dPsi_kl/dtau  = -2 chi_k (A Psi + B Omega)_kl - 2 chi_l (A Psi + B Omega)_lk
                    - gamma (chi_k + chi_l) Psi_kl                                   (403)
    dOmega_kl/dtau = same with (A Omega + B Psi)                                     (404)

with ``t_k = Tr S_k / d``, ``Psi_kl = Tr(S_k S_l)/d``, ``Omega_kl = Tr(S_k S_l^T)/d``,
``A = grad_Omega Phi`` and ``B = grad_Psi Phi``. It is the trace projection of the matrix flow
``dS_k/dtau = -2 sum_l (A_kl S_l + B_kl S_l^T) - gamma S_k`` (:meth:`SModel.matrix_flow`).

The potential. Pre-activations (eq. 396) ``G_ijk = (x_i^T S_k x_j - C_ij Tr S_k)/sqrt(d)``
are centred Gaussian in high dimension with
``Cov(G_ijk, G_i'j'l) = C_ii' C_jj' Omega_kl + C_ij' C_ji' Psi_kl`` (eqs. 397, 399), so
``Phi(Omega, Psi) = E[loss(G)]``. Stein's lemma on the SGD drift gives the matrix flow
above with ``A_kl = (1/2) sum C_ii' C_jj' E[d^2 L/dG_ijk dG_i'j'l]`` and
``B_kl = (1/2) sum C_ij' C_ji' E[...]``, which are ``grad_Omega Phi`` and ``grad_Psi Phi``
by Price's theorem, in the symmetric convention of MATH.md (for ``L = 1``,
``A = B = H/2``, ``H_kl = E[d^2 L/dG_k dG_l]``). They come from
:func:`attndyn.symbolic.potential.direct_potential`: closed forms for polynomial
losses (Wick) and sums of products of single-variable activations (ReLU, erf, ...),
compiled Gaussian quadrature otherwise.

Structural overlaps (eqs. 406-408): ``p_Psi = Psi_kl - t_k t_l``,
``p_Omega = Omega_kl - t_k t_l``, ``p_plus = (p_Omega + p_Psi)/2``,
``p_minus = (p_Omega - p_Psi)/2``. Weak recovery: eq. (413) and Corollary 7
(:meth:`SModel.weak_recovery`, :meth:`SModel.corollary7`).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from scipy.integrate import solve_ivp

from attndyn.numeric.attention.base import (AttentionModel, NoCorrection, obs_key, SGDRunner,
                                          TimeScale)
from attndyn.numeric.attention.direct.noise import noise_setup
from attndyn.numeric.attention.direct.theory import DirectTheory
from attndyn.numeric.attention.direct.runner import (direct_order_parameters, SRunner,
                                                     s_observable_names, s_observables)
from attndyn.numeric.attention.odesolve import check_solver_args, solve_flow
from attndyn.numeric.core.compile import load_generated
from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.validate import check_loss, check_model_args, check_t_eval, real_array
from attndyn.symbolic.codegen import njit_source
from attndyn.symbolic.potential import call_loss, direct_potential, g_array, guard_for_numba

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.core.types import ArrayLike

__all__ = ["SModel", "obs_key"]


class SModel(AttentionModel):
    """Direct-S attention (paper 003, appendix E). Final (see
    :mod:`attndyn.numeric.attention.base`).

    Same constructor as :class:`attndyn.TiedModel`: ``K`` indices, the
    ``trainable`` ones (the others are fixed teachers), ``loss(G)`` with ``G``
    the ``L x L x K`` SymPy pre-activations, token covariance ``C`` and weight
    decay ``gamma``. SGD accepts any loss that prints to numba; the closed ODE
    takes the potential of :func:`~attndyn.symbolic.potential.direct_potential`
    (exact closed forms when there are some, compiled quadrature otherwise), or the one
    given as ``potential=`` (a built direct ``NumericPotential``, the ``NumericRoute``
    that ``direct_potential(..., route="numeric")`` returns, or an exact
    ``SymbolicPotential``; :func:`attndyn.numeric.attention.potentials.as_potential`).

    Examples
    --------
    >>> import attndyn, numpy as np
    >>> model = attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> model.kind, model.K
    ('s', 2)
    >>> r = attndyn.matrix_flow(model, [0.5 * np.eye(6), np.eye(6)], [0.0, 0.1])
    >>> r.status
    0
    """

    kind = "s"
    sgd_form = "matrices"
    time_scales = (TimeScale("slow", "tau = eta * n / d", 1.0, 1),)
    alphabet = None  # no words: the theory closes in t, Psi, Omega (Theorem 4)

    def __init__(self, K: int, trainable: Sequence[int], loss: Callable, L: int = 1,
                 C: ArrayLike | None = None, weight_decay: float = 0.0, *,
                 params: dict | None = None, potential: Any = None) -> None:
        self.K, self.trainable, self.L, self.C, self.weight_decay = check_model_args(
            K, trainable, L, C, weight_decay)
        self.loss = check_loss(loss, self.L, self.K)  # fails early on a bad loss
        self.params = dict(params or {})
        #: the direct-S potential given as ``potential=`` (None: derived from the loss); a
        #: NumericRoute is built (issue 25)
        self.given_potential = None
        if potential is not None:
            from attndyn.numeric.attention.potentials import as_potential
            self.given_potential = as_potential(potential, self.K, self.L, self.C, kind="direct",
                                                trajectory=False, params=list(self.params))
        self.chi = np.zeros(self.K)
        self.chi[list(self.trainable)] = 1.0

    def _repr_html_(self) -> str:
        from attndyn.numeric.core.display import html_summary
        C = [[float(self.C[i, j]) for j in range(self.L)] for i in range(self.L)]
        return html_summary(type(self).__name__, {
            "K": self.K, "trainable": list(self.trainable), "L": self.L, "C": C,
            "weight_decay": self.weight_decay, "corrections": list(self.theory.corrections)})

    def __repr__(self) -> str:
        return (f"SModel(K={self.K}, trainable={self.trainable}, L={self.L}, "
                f"weight_decay={self.weight_decay})")

    @property
    def names(self) -> list[str]:
        return s_observable_names(self.K)

    # -- the model protocol (attndyn.numeric.attention.base) ---------------------
    def observable_names(self, order: int | None = None) -> list[str]:
        if order is not None:
            raise ValueError("order does not apply to an SModel (its theory closes in t, Psi, Omega)")
        return self.names

    def check_init(self, init: Sequence[ArrayLike], name: str = "init") -> list[np.ndarray]:
        """SGD weights: the matrices ``S_k`` themselves (:meth:`check_matrices`)."""
        return self.check_matrices(init, name)

    def init_floats(self, d: int, widths: list[int]) -> int:
        """One ``d x d`` matrix ``S_k`` per index (the widths do not apply)."""
        return self.K * d * d

    def _draw_init(self, rng: np.random.Generator, d: int, widths: list[int],
                   scales: list[float], symmetric: bool) -> list[Any]:
        # entries N(0, scale_k^2 / d): Omega_kk ~ scale_k^2, t_k and Psi_kk O(1/d)
        out = []
        for k in range(self.K):
            S = rng.standard_normal((d, d)) * (scales[k] / math.sqrt(d))
            if symmetric:
                S = (S + S.T) / math.sqrt(2.0)
            out.append(S)
        return out

    def sgd_runner(self, init: Sequence[ArrayLike], order: int | None = None) -> SGDRunner:
        if order is not None:
            raise ValueError("order does not apply to an SModel (its theory closes in t, Psi, Omega)")
        return SRunner(self, self.check_init(init))

    @cached_property
    def theory(self) -> DirectTheory:
        """The :class:`~attndyn.numeric.attention.direct.theory.DirectTheory` of this model."""
        return DirectTheory(self)

    def params_dict(self) -> dict:
        import sympy as sp
        return {"model": "s", "K": self.K, "trainable": list(self.trainable), "L": self.L,
                "C": [[float(self.C[i, j]) for j in range(self.L)] for i in range(self.L)],
                "weight_decay": self.weight_decay,
                "loss": sp.sstr(call_loss(self.loss, g_array(self.L, self.K))),
                "params": {k: float(v) for k, v in self.params.items()}}

    # -- potential -----------------------------------------------------------
    @cached_property
    def potential(self) -> Any:
        """``Phi(Omega, Psi)`` with ``grad_Omega = A`` and ``grad_Psi = B``, from
        :func:`~attndyn.symbolic.potential.direct_potential` (route ``"auto"``):
        a :class:`~attndyn.symbolic.potential.SymbolicPotential` on the exact
        routes (wick, closed), a :class:`~attndyn.numeric.attention.potentials.NumericPotential`
        otherwise; ``.route`` says which. Raises for losses no route can treat
        (a discontinuous loss). The one given as ``potential=`` when there is one."""
        if self.given_potential is not None:
            return self.given_potential
        import sympy as sp
        psyms = [sp.Symbol(str(k), real=True) for k in self.params]
        pot = direct_potential(self.loss, self.K, self.L, self.C, params=psyms,
                               param_values=[float(v) for v in self.params.values()])
        if pot.route == "numeric":  # the symbolic layer describes the quadrature; built here
            from attndyn.numeric.attention.potentials import build_potential
            pot = build_potential(pot)
        return pot

    @property
    def _numeric(self) -> bool:
        return callable(getattr(self.potential, "gradient_function", None))

    @cached_property
    def gradient_function(self) -> Callable[..., Any]:
        """Compiled ``f(x, p, out)`` in the input layout of the direct law:
        ``x = [Omega.ravel(), Psi.ravel()]`` (``2 K^2`` entries, symmetric
        matrices) and ``out = [A.ravel(), B.ravel()]``, ``A = grad_Omega Phi``,
        ``B = grad_Psi Phi``. On the exact routes it also returns ``Phi``; the
        numeric route's function returns nothing (see :meth:`gradients`)."""
        pot = self.potential
        if self._numeric:
            numeric_fn: Callable[..., Any] = pot.gradient_function()
            return numeric_fn
        outs = [guard_for_numba(e) for e in pot.output_expressions(hessian=False)]
        src = njit_source("sgrad", pot.inputs, pot.params, outs, value=guard_for_numba(pot.phi),
                          doc="A = grad_Omega Phi, B = grad_Psi Phi of direct-S attention "
                              f"(paper 003, eqs. 399-404), route {pot.route}; returns Phi.")
        fn: Callable[..., Any] = load_generated(src, "sgrad")
        return fn

    @cached_property
    def gradient_parameters(self) -> NDArray[np.float64]:
        if self._numeric:
            return np.ascontiguousarray(self.potential.parameters(), dtype=np.float64)
        return np.array([float(v) for v in self.params.values()], dtype=np.float64)

    def gradients(self, Psi: ArrayLike, Omega: ArrayLike
                  ) -> tuple[np.ndarray, np.ndarray, float]:
        """``(A, B, Phi)`` at numeric ``Psi``, ``Omega`` (``A = grad_Omega Phi``,
        ``B = grad_Psi Phi``, symmetric convention)."""
        K = self.K
        Psi = real_array(Psi, "Psi")
        Omega = real_array(Omega, "Omega")
        for nm, X in (("Psi", Psi), ("Omega", Omega)):
            if X.shape != (K, K):
                raise ValueError(f"{nm} must have shape ({K}, {K}), got {X.shape}")
        x = np.ascontiguousarray(np.concatenate([(0.5 * (Omega + Omega.T)).ravel(),
                                                 (0.5 * (Psi + Psi.T)).ravel()]))
        n = 2 * K * K
        f, p = self.gradient_function, self.gradient_parameters
        if self._numeric:
            # the quadrature kernel writes [Phi, E grad, E Hess] before the outputs when
            # the buffer has room for them (attndyn.kernels.quadrature.law_eval)
            P = self.potential.P
            off = 1 + P + P * P
            buf = np.empty(off + n)
            f(x, p, buf)
            out, phi = buf[off:], buf[0]
        else:
            out = np.empty(n)
            phi = f(x, p, out)
        return out[:K * K].reshape(K, K).copy(), out[K * K:].reshape(K, K).copy(), float(phi)

    # -- states ----------------------------------------------------------------
    def check_matrices(self, matrices: Sequence[ArrayLike], name: str = "init"
                       ) -> list[np.ndarray]:
        """Validate ``K`` real square ``d x d`` arrays ``S_k`` (same ``d >= 2``, finite)."""
        try:
            mats = [real_array(m, f"{name}[{k}]") for k, m in enumerate(matrices)]
        except TypeError as exc:
            if "real, got a complex" in str(exc):
                raise
            raise TypeError(f"{name} must be a list of K = {self.K} square arrays") from None
        if len(mats) != self.K:
            raise ValueError(f"{name} must hold K = {self.K} matrices S_k, got {len(mats)}")
        d = mats[0].shape[0] if mats[0].ndim == 2 else -1
        for k, m in enumerate(mats):
            if m.ndim != 2 or m.shape != (d, d):
                raise ValueError(f"{name}[{k}] must be a square d x d array with the same d for "
                                 f"all, got shape {m.shape}")
            if not np.all(np.isfinite(m)):
                raise ValueError(f"{name}[{k}] must be finite")
        if d < 2:
            raise ValueError(f"{name}: the dimension d must be >= 2, got {d}")
        return mats

    def order_parameters(self, matrices: Sequence[ArrayLike]) -> tuple:
        """``(t, Psi, Omega)`` of matrices ``S_k`` (eq. 397)."""
        mats = self.check_matrices(matrices)
        with np.errstate(over="ignore", invalid="ignore"):  # judged just below
            ops: tuple[np.ndarray, np.ndarray, np.ndarray] = direct_order_parameters(mats)
        if not all(np.all(np.isfinite(x)) for x in ops):
            raise ValueError("matrices: the order parameters t, Psi, Omega overflow float64 "
                             "(entries too large); scale the matrices down")
        return ops

    def initial_state(self, init: Any) -> tuple:
        """``(t, Psi, Omega)`` from matrices, a dict with keys ``t``, ``Psi``,
        ``Omega``, or a tuple of the three."""
        K = self.K
        if isinstance(init, dict):
            try:
                t, Psi, Om = init["t"], init["Psi"], init["Omega"]
            except KeyError as exc:
                raise ValueError(f"init dict needs keys 't', 'Psi', 'Omega'; missing {exc}") from None
        elif isinstance(init, tuple) and len(init) == 3 and np.ndim(init[0]) == 1:
            t, Psi, Om = init
        else:
            return self.order_parameters(init)
        t = real_array(t, "init t").ravel()
        Psi = real_array(Psi, "init Psi")
        Om = real_array(Om, "init Omega")
        if t.shape != (K,) or Psi.shape != (K, K) or Om.shape != (K, K):
            raise ValueError(f"init: t must have shape ({K},), Psi and Omega ({K}, {K})")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(Psi)) and np.all(np.isfinite(Om))):
            raise ValueError("init must be finite")
        if not (np.allclose(Psi, Psi.T) and np.allclose(Om, Om.T)):
            raise ValueError("init: Psi and Omega must be symmetric")
        return t, Psi, Om

    # -- the closed ODE (402)-(404) -------------------------------------------
    def rhs(self, t: ArrayLike, Psi: ArrayLike, Omega: ArrayLike
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(dt, dPsi, dOmega)`` of eqs. (402)-(404) in ``tau = eta n / d``."""
        A, B, _ = self.gradients(Psi, Omega)
        return self._rhs(np.asarray(t, float), np.asarray(Psi, float), np.asarray(Omega, float),
                         A, B)

    def _rhs(self, t: np.ndarray, Psi: np.ndarray, Om: np.ndarray, A: np.ndarray,
             B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        chi = self.chi
        g = self.weight_decay
        X1 = chi[:, None] * (A @ Psi + B @ Om)
        X2 = chi[:, None] * (A @ Om + B @ Psi)
        dec = g * (chi[:, None] + chi[None, :])
        dt = -2.0 * chi * ((A + B) @ t) - g * chi * t
        dPsi = -2.0 * (X1 + X1.T) - dec * Psi
        dOm = -2.0 * (X2 + X2.T) - dec * Om
        return dt, dPsi, dOm

    def _pack(self, t: np.ndarray, Psi: np.ndarray, Om: np.ndarray) -> np.ndarray:
        return np.concatenate([t, Psi.ravel(), Om.ravel()])

    def _unpack(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        K = self.K
        return y[:K], y[K:K + K * K].reshape(K, K), y[K + K * K:].reshape(K, K)

    def _ode(self, tau: float, y: np.ndarray) -> np.ndarray:
        t, Psi, Om = self._unpack(y)
        A, B, _ = self.gradients(Psi, Om)
        dt, dP, dO = self._rhs(t, Psi, Om, A, B)
        return self._pack(dt, dP, dO)

    def integrate(self, init: Any, t_eval: ArrayLike, *, rtol: float = 1e-10,
                  atol: float = 1e-12, method: str = "DOP853", blowup: float = 1e8,
                  raise_on_failure: bool = False, correction: Any = None,
                  eta: float | None = None, batch: int | None = None, d: int | None = None
                  ) -> Trajectory:
        """Integrate the closed ODE (402)-(404) from ``init`` (matrices ``S_k``,
        or ``(t, Psi, Omega)``) and report every observable at ``t_eval``
        (``tau = eta n / d``).

        ``correction="noise"`` adds the mini-batch noise terms ``(eta d / B) chi_k chi_l
        Lambda^{Psi,Omega}_kl`` to eqs. (403)-(404)
        (:mod:`attndyn.numeric.attention.direct.noise`); it needs ``eta``, ``batch`` and
        the dimension (from the matrices in ``init``, or ``d``).

        Returns a :class:`Trajectory` of kind ``"smodel"`` with
        ``.observable("t", k)``, ``.observable("Psi", k, l)``,
        ``.observable("Omega", k, l)``, the structural overlaps and ``loss = Phi``.
        A blow-up or a solver failure ends with a negative status and the
        trajectory up to the last finite output.
        """
        t0, Psi0, Om0 = self.initial_state(init)
        t_eval = check_t_eval(t_eval)
        rtol, atol, blowup, _ = check_solver_args(rtol, atol, blowup, method)
        self.gradient_function  # noqa: B018  (raise early for a loss no route can treat)
        y0 = self._pack(t0, Psi0, Om0)
        ode, extra = self._ode, {}
        corr = self.theory.correction(correction)
        if not isinstance(corr, NoCorrection):
            ode, extra = noise_setup(self, init, correction=corr, eta=eta, batch=batch, d=d)
        elif eta is not None or batch is not None or d is not None:
            raise ValueError("eta, batch and d apply to correction='noise' only")

        T = float(t_eval[-1])
        if T > 0:
            sol = solve_flow(ode, y0, t_eval, rtol=rtol, atol=atol, method=method,
                             blowup=blowup, what="closed S ODE (402)-(404)")
            ys, ts, status = sol.y, sol.t, sol.status
            message = ("success: the closed S ODE (402)-(404) reached the last time"
                       if status == 0 else sol.message)
        else:
            ts = t_eval.copy()
            ys = np.repeat(y0[:, None], ts.size, axis=1)
            status, message = 0, "success: nothing to integrate (t_eval is 0)"
        keep = np.all(np.isfinite(ys), axis=0)
        ys, ts = ys[:, keep], ts[keep]
        out = np.empty((len(self.names), ts.size))
        for n in range(ts.size):
            t, Psi, Om = self._unpack(ys[:, n])
            _, _, phi = self.gradients(Psi, Om)
            out[:, n] = s_observables(t, Psi, Om, phi)
        params = self.params_dict()
        params.update({"rtol": rtol, "atol": atol, "method": method,
                       "time": "tau = eta * n / d"})
        params.update(extra)
        res = Trajectory(t=np.asarray(ts, float), y=out, names=self.names, kind="smodel",
                         params=params, status=status, message=message,
                         diagnostics={"time": "tau = eta * n / d"})
        if raise_on_failure and status != 0:
            raise IntegrationError(message)
        return res

    # -- the finite-d matrix flow (checks closure) -------------------------------
    def matrix_flow(self, matrices: Sequence[ArrayLike], t_eval: ArrayLike, *, rtol: float = 1e-10,
                    atol: float = 1e-12, method: str = "DOP853", blowup: float = 1e100,
                    keep_matrices: bool = False, raise_on_failure: bool = False,
                    order: int | None = None, words: Sequence[Sequence[int]] | None = None
                    ) -> Trajectory:
        """Integrate ``dS_k/dtau = -2 sum_l (A_kl S_l + B_kl S_l^T) - gamma S_k`` for
        finite-d matrices and report the same observables (kind ``"smodel_flow"``).
        Its traces solve (402)-(404) exactly, which the tests check. A state entry
        above ``blowup`` or a non-finite right-hand side ends with status -3;
        ``keep_matrices`` keeps ``S_k(tau)`` in ``diagnostics["matrices"]``."""
        if order is not None or words is not None:
            raise ValueError("order and words do not apply to an SModel (its flow reports "
                             "t, Psi, Omega)")
        mats = self.check_matrices(matrices, "matrices")
        t_eval = check_t_eval(t_eval)
        rtol, atol, blowup, _ = check_solver_args(rtol, atol, blowup, method)
        K = self.K
        d = mats[0].shape[0]
        tr = list(self.trainable)
        g = self.weight_decay

        def unpack(y: np.ndarray) -> list[np.ndarray]:
            S = list(mats)
            for j, k in enumerate(tr):
                S[k] = y[j * d * d:(j + 1) * d * d].reshape(d, d)
            return S

        def rhs(tau: float, y: np.ndarray) -> NDArray[np.float64]:
            S = unpack(y)
            _, Psi, Om = direct_order_parameters(S)
            A, B, _ = self.gradients(Psi, Om)
            dy = np.empty_like(y)
            for j, k in enumerate(tr):
                acc = -g * S[k]
                for l in range(K):
                    acc = acc - 2.0 * (A[k, l] * S[l] + B[k, l] * S[l].T)
                dy[j * d * d:(j + 1) * d * d] = acc.ravel()
            return dy

        y0 = np.concatenate([mats[k].ravel() for k in tr]) if tr else np.zeros(0)
        if tr and t_eval[-1] > 0:
            sol = solve_flow(rhs, y0, t_eval, rtol=rtol, atol=atol, method=method, blowup=blowup,
                             what="S matrix flow")
            ys, ts, status = sol.y, sol.t, sol.status
            message = ("success: S matrix flow reached the last time" if status == 0
                       else sol.message)
        else:
            ts = t_eval
            ys = np.repeat(y0[:, None], ts.size, axis=1)
            status, message = 0, "success"
        out = np.empty((len(self.names), ts.size))
        kept = []
        for n in range(ts.size):
            S = unpack(ys[:, n])
            t, Psi, Om = direct_order_parameters(S)
            _, _, phi = self.gradients(Psi, Om)
            out[:, n] = s_observables(t, Psi, Om, phi)
            if keep_matrices:
                kept.append(np.stack(S))
        params = self.params_dict()
        params.update({"d": d, "rtol": rtol, "atol": atol, "method": method})
        res = Trajectory(t=np.asarray(ts, float), y=out, names=self.names, kind="smodel_flow",
                         params=params, status=status, message=message,
                         diagnostics={"d": d})
        if keep_matrices:
            res.diagnostics["matrices"] = np.stack(kept) if kept else np.zeros((0, K, d, d))
        if raise_on_failure and status != 0:
            raise IntegrationError(message)
        return res

    # -- weak recovery (eq. 413, Corollary 7) -----------------------------------
    def corollary7(self, init: Any, *, student: int = 0, teacher: int = 1, tol: float = 1e-10,
                   state_tol: float = 2e-2) -> dict:
        """Diagnose Corollary 7's dichotomy at ``init``.

        Returns a dict with the teacher signal strengths ``a_plus``, ``a_minus``
        (eqs. 409-410), the effective gradients ``g_plus``, ``g_minus`` (eq. 412)
        at the projection of ``init`` on the uninformative manifold ``U``
        (``t_s = Psi_sr = Omega_sr = 0``), whether Assumption 10 holds
        (``|t_s|``, ``|p_Psi_sr|``, ``|p_Omega_sr|`` below ``state_tol``, and
        ``a_plus + a_minus > 0``), whether (414) holds, whether (417) holds (the
        cross-gradients vanish identically on ``U``: checked exactly on the
        polynomial with the teacher's values substituted when the potential is
        polynomial, else numerically at the projection and at rescalings of the
        student on ``U``), and a one-line ``verdict``.
        """
        K = self.K
        s, r = int(student), int(teacher)
        for nm, v in (("student", s), ("teacher", r)):
            if not 0 <= v < K:
                raise ValueError(f"{nm} index {v} out of range: allowed 0..{K - 1}")
        if s == r:
            raise ValueError("student and teacher must differ")
        t, Psi, Om = self.initial_state(init)
        pPsi = Psi - np.outer(t, t)
        pOm = Om - np.outer(t, t)
        a_plus = 0.5 * (pOm[r, r] + pPsi[r, r])
        a_minus = 0.5 * (pOm[r, r] - pPsi[r, r])
        PsiU, OmU = Psi.copy(), Om.copy()
        PsiU[s, r] = PsiU[r, s] = 0.0
        OmU[s, r] = OmU[r, s] = 0.0
        A, B, _ = self.gradients(PsiU, OmU)
        g_plus = float(A[s, r] + B[s, r])
        g_minus = float(A[s, r] - B[s, r])
        assumption10 = bool(abs(t[s]) <= state_tol and abs(pPsi[s, r]) <= state_tol
                            and abs(pOm[s, r]) <= state_tol and a_plus + a_minus > tol)
        cond414 = bool(abs(a_plus * g_plus) > tol or abs(a_minus * g_minus) > tol)
        worst, tol417 = self._cross_gradient_on_U(PsiU, OmU, s, r, tol)
        cond417 = bool(worst <= tol417 * max(1.0, abs(a_plus) + abs(a_minus)))
        only = tuple(self.trainable) == (s,)
        if not only:
            verdict = (f"Corollary 7 assumes the student {s} is the only trainable index "
                       f"(trainable = {self.trainable}); diagnostics are indicative only")
        elif not assumption10:
            verdict = ("Assumption 10 fails (the start is not uninformative or the teacher is "
                       "not informative): Corollary 7 does not apply")
        elif cond414:
            verdict = ("case 1, (414) holds: weak recovery after Theta(d/eta) steps, "
                       "Theta(d^2 log d) samples at eta = c0/(d log d)")
        elif cond417:
            verdict = ("case 2, (417) holds: the uninformative manifold is invariant; no weak "
                       "recovery within O(d^2 log d) samples")
        else:
            verdict = ("neither (414) nor (417): the initial velocity of the overlaps vanishes "
                       "but the cross-gradients do not vanish on U; Corollary 7 is silent")
        return {"a_plus": float(a_plus), "a_minus": float(a_minus), "g_plus": g_plus,
                "g_minus": g_minus, "assumption10": assumption10, "cond414": cond414,
                "cond417": cond417, "cross_gradient_on_U": worst, "verdict": verdict,
                "student": s, "teacher": r}

    def _cross_gradient_on_U(self, PsiU: np.ndarray, OmU: np.ndarray, s: int, r: int,
                             tol: float) -> tuple[float, float]:
        """``(max |A_sr|, |B_sr| on U, tolerance)`` for condition (417)."""
        pot = self.potential
        if not self._numeric:
            import sympy as sp
            Ps, Os = pot.order_parameters["Psi"], pot.order_parameters["Omega"]
            subs = {Ps[s, r]: 0, Os[s, r]: 0,
                    Ps[r, r]: sp.Float(PsiU[r, r]), Os[r, r]: sp.Float(OmU[r, r])}
            subs.update({p: sp.Float(v) for p, v in zip(pot.params, self.gradient_parameters)})
            try:
                worst = 0.0
                for expr in (pot.grad_Omega[s, r], pot.grad_Psi[s, r]):
                    e = sp.expand(expr.xreplace(subs))
                    free = sorted(e.free_symbols, key=str)
                    coeffs = sp.Poly(e, *free).coeffs() if free else [e]
                    worst = max([worst] + [abs(float(c)) for c in coeffs])
                return worst, tol
            except (sp.PolynomialError, TypeError, ValueError):
                pass  # not a polynomial on U: check numerically below
        # sample U: the projection and congruent rescalings of the student index
        # (D X D with D = diag(1, .., c, .., 1) keeps the covariance of G PSD)
        worst = 0.0
        for c in (1.0, 0.5, 1.5, 2.0):
            D = np.ones(self.K)
            D[s] = c
            A, B, _ = self.gradients(PsiU * np.outer(D, D), OmU * np.outer(D, D))
            worst = max(worst, abs(A[s, r]), abs(B[s, r]))
        err = float(getattr(pot, "error", 0.0) or 0.0) if self._numeric else 0.0
        return float(worst), max(tol, 10.0 * err)

    def weak_recovery(self, init: Any, c: float, d: ArrayLike, *, eta: ArrayLike | None = None,
                      batch: int = 1, c0: float = 1.0,
                      T_max: float = 20.0, student: int = 0, teacher: int = 1) -> dict:
        """Weak-recovery sample complexity (eq. 413) predicted by the closed ODE.

        ``tau_c`` is the first ``tau`` at which ``max(|p_Psi_sr|, |p_Omega_sr|)``
        reaches ``c`` on the limiting trajectory (``inf`` if not before
        ``T_max``). For each ``d``, SGD needs ``N = ceil(tau_c d / eta_d)`` steps
        (``batch * N`` samples), with ``eta_d = c0 / (d log d)`` by default (the
        largest rate of Theorem 4, giving ``Theta(d^2 log d)``). Returns a dict
        with ``tau_c``, ``d``, ``eta``, ``steps``, ``samples`` (float arrays,
        ``inf`` when not reached) and the :meth:`corollary7` diagnostic.
        """
        if isinstance(c, bool) or not isinstance(c, (int, float, np.integer, np.floating)) \
                or not c > 0:
            raise ValueError(f"c must be a threshold > 0, got {c!r}")
        d = np.atleast_1d(np.asarray(d, dtype=float))
        if np.any(d < 2) or not np.all(np.isfinite(d)):
            raise ValueError("d must be dimensions >= 2")
        if eta is None:
            eta_d = c0 / (d * np.log(d))
        else:
            eta_d = np.broadcast_to(np.asarray(eta, dtype=float), d.shape).copy()
            if np.any(eta_d <= 0):
                raise ValueError("eta must be > 0")
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch must be an int >= 1, got {batch!r}")
        s, r = int(student), int(teacher)
        diag = self.corollary7(init, student=s, teacher=r)
        t0, Psi0, Om0 = self.initial_state(init)
        K = self.K
        iP = K + s * K + r
        iO = K + K * K + s * K + r

        def over(tau: float, y: np.ndarray) -> float:
            tt = y[s] * y[r]
            gap: float = max(abs(y[iP] - tt), abs(y[iO] - tt)) - c
            return gap
        over.terminal = True  # type: ignore[attr-defined]  # solve_ivp's event attributes
        over.direction = 1  # type: ignore[attr-defined]
        y0 = self._pack(t0, Psi0, Om0)
        if over(0.0, y0) >= 0:
            tau_c = 0.0
        else:
            sol = solve_ivp(self._ode, (0.0, float(T_max)), y0, method="DOP853", rtol=1e-10,
                            atol=1e-12, events=over)
            tau_c = float(sol.t_events[0][0]) if sol.t_events[0].size else math.inf
        steps = np.ceil(tau_c * d / eta_d) if math.isfinite(tau_c) else np.full(d.shape, np.inf)
        return {"c": float(c), "tau_c": tau_c, "d": d, "eta": eta_d, "steps": steps,
                "samples": steps * batch, "batch": int(batch), "T_max": float(T_max),
                "corollary7": diag}


