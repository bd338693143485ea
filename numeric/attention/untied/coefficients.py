"""The compiled untied potential and its coefficients (eqs. (27)-(32))."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from types import SimpleNamespace

import numpy as np
from numba import njit

from attndyn.numeric.attention.base import obs_key
from attndyn.numeric.core.results import Trajectory
from attndyn.symbolic import untied as su
from attndyn.symbolic.words import canonical

__all__ = ["UntiedCoefficients", "coefficients", "with_loss_row", "SlowState", "UntiedTrajectory", "RootError", "NOT_CONVERGED",
           "ROOT_FAILED"]


NOT_CONVERGED = 2


ROOT_FAILED = -5


# header of the coefficient function's parameter vector
_H_K, _H_TOL, _H_MAXIT, H_FAIL, H_NONCONVEX, H_ITERS, _H_CALLS = 0, 1, 2, 3, 4, 5, 6


HEAD = 8


class RootError(ValueError):
    """The critical mean ``m*(q)`` of eq. (29) could not be found."""


@njit(cache=True)
def _solve_inplace(H, g, n):
    """Solve ``H x = g`` (n x n, partial pivoting) in place; False if singular."""
    for c in range(n):
        piv = c
        big = abs(H[c, c])
        for r in range(c + 1, n):
            if abs(H[r, c]) > big:
                big = abs(H[r, c])
                piv = r
        if not big > 0.0:
            return False
        if piv != c:
            for j in range(n):
                tmp = H[c, j]
                H[c, j] = H[piv, j]
                H[piv, j] = tmp
            tmp = g[c]
            g[c] = g[piv]
            g[piv] = tmp
        for r in range(c + 1, n):
            f = H[r, c] / H[c, c]
            for j in range(c, n):
                H[r, j] -= f * H[c, j]
            g[r] -= f * g[c]
    for c in range(n - 1, -1, -1):
        s = g[c]
        for j in range(c + 1, n):
            s -= H[c, j] * g[j]
        g[c] = s / H[c, c]
    return True


@njit(cache=True)
def _is_pd(H, n):
    """Cholesky test of positive definiteness of the leading n x n block."""
    L = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = H[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if not s > 0.0:
                    return False
                L[i, i] = math.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
    return True


def _make_coefficient_function(potfn):
    """The slow hierarchy's coefficient function ``f(x, p, out)`` (``GRAD_SIG``).

    ``x`` is the gathered state (``tA, tB, q1, q2`` and the eq. 27 moments);
    ``p`` is ``[header (8), trainable mask (K), m (K), potential parameters]``
    with ``m`` the warm start of Newton (updated in place, so the root is
    followed continuously along the slow trajectory); ``out`` receives
    ``(beta, a1.ravel(), a2.ravel())``. A failed Newton solve writes NaN (the
    integrator stops) and counts in ``p[3]``; a Hessian that is not positive
    definite at the root (Assumption 5) counts in ``p[4]``.
    """
    from attndyn.kernels.rhs import GRAD_SIG

    # one numba kernel (Newton for m* and the coefficients in one pass), called at every
    # right-hand side; the Newton loop calls the potential closure, so it stays inline
    @njit(GRAD_SIG)  # a closure over the potential: compiled once per process and model
    def coefficients(x, p, out):
        K = int(p[0])
        KK = K * K
        tol = p[1]
        maxit = int(p[2])
        p[6] += 1.0
        m = p[HEAD + K:HEAD + 2 * K]
        pp = p[HEAD + 2 * K:]
        xin = np.empty(K + 2 * KK)
        for i in range(2 * KK):
            xin[K + i] = x[2 * K + i]
        pout = np.empty(K + 3 * KK)
        idx, nt = _trainable_index(p[HEAD:HEAD + K], K)
        H = np.empty((nt, nt))
        g = np.empty(nt)
        ok = False
        it = 0
        while True:
            for k in range(K):
                xin[k] = m[k]
            potfn(xin, pp, pout)
            res, scale = _newton_residual(pout, m, idx, nt)
            if res <= tol:
                ok = True
                break
            if it >= maxit or not np.isfinite(res):
                break
            _gather_newton(pout, idx, nt, K, KK, g, H)
            if not _solve_inplace(H, g, nt):
                break
            step = 0.0
            for a in range(nt):
                m[idx[a]] -= g[a]
                step = max(step, abs(g[a]))
            it += 1
            if step <= 1e-15 * scale:
                # converged in m to rounding: accept if the gradient is small relative
                ok = res <= 1e3 * tol
                for k in range(K):
                    xin[k] = m[k]
                potfn(xin, pp, pout)
                break
        p[5] += it
        if not ok:
            _fail_out(p, out)
            return
        _write_coefficients(x, p, pout, idx, nt, K, KK, H, out)
    return coefficients


@njit(cache=True)
def _trainable_index(mask, K):
    """The trainable indices (``mask > 0.5``) and their number."""
    idx = np.empty(K, dtype=np.int64)
    nt = 0
    for k in range(K):
        if mask[k] > 0.5:
            idx[nt] = k
            nt += 1
    return idx, nt


@njit(cache=True)
def _newton_residual(pout, m, idx, nt):
    """``max |dPhi/dm_k|`` over the trainable ``k`` (inf if not finite) and ``max(1, |m_k|)``."""
    res = 0.0
    scale = 1.0
    for a in range(nt):
        v = pout[idx[a]]
        if not np.isfinite(v):
            res = np.inf
        res = max(res, abs(v))
        scale = max(scale, abs(m[idx[a]]))
    return res, scale


@njit(cache=True)
def _gather_newton(pout, idx, nt, K, KK, g, H):
    """The trainable block of the ``m``-gradient into ``g`` and of the ``m``-Hessian into ``H``."""
    for a in range(nt):
        g[a] = pout[idx[a]]
        for b in range(nt):
            H[a, b] = pout[K + 2 * KK + idx[a] * K + idx[b]]


@njit(cache=True)
def _fail_out(p, out):
    """A failed solve: counted in ``p[3]``, NaN written (the integrator stops)."""
    p[3] += 1.0
    for i in range(out.size):
        out[i] = np.nan


@njit(cache=True)
def _write_coefficients(x, p, pout, idx, nt, K, KK, H, out):
    """``(beta, a1, a2)`` into ``out`` at the root: ``beta_k = -psi_k / (tA_k + tB_k)``
    (eqs. 27, 30); a Hessian that is not positive definite counts in ``p[4]``."""
    for a in range(nt):
        for b in range(nt):
            H[a, b] = pout[K + 2 * KK + idx[a] * K + idx[b]]
    if not _is_pd(H, nt):
        p[4] += 1.0
    for k in range(K):
        out[k] = 0.0
    for i in range(2 * KK):
        out[K + i] = pout[K + i]
    base = 2 * K + 2 * KK
    for a in range(nt):
        k = idx[a]
        psi = 0.0
        for l in range(K):
            for r in range(2):
                j = base + ((k * K + l) * 2 + r) * 2
                psi += pout[K + r * KK + k * K + l] * (x[j] + x[j + 1])
        psi *= 2.0
        den = x[k] + x[K + k]
        if not den > 0.0:
            _fail_out(p, out)
            return
        out[k] = -psi / den


def kernel_prepare(structure, consts):
    """The structure in the form the generic kernels take, built once per hierarchy.

    Current kernels (:mod:`attndyn.kernels.rhs`) take a *fused* system (slot table of
    the (entry, coefficient) pairs, unsigned indices): fuse once here so that no run
    pays for it. Older kernels took the unfused ``ent, coef`` arrays directly.
    """
    from attndyn.kernels import rhs as _rhs
    base = SimpleNamespace(gfun=None, gparams=np.zeros(1), gather=structure.gather,
                           consts=np.ascontiguousarray(consts, dtype=np.float64),
                           indptr=structure.indptr, src=structure.src, ent=structure.ent,
                           coef=structure.coef, n_grad=structure.n_grad)
    if hasattr(_rhs, "fuse_terms") and hasattr(_rhs, "fused_system"):
        slot, slot_coef, slot_ent = _rhs.fuse_terms(structure.ent, structure.coef,
                                                    structure.n_grad + base.consts.size)
        return SimpleNamespace(
            fused=True, gather=np.ascontiguousarray(structure.gather, dtype=np.int64),
            consts=base.consts, indptr=np.ascontiguousarray(structure.indptr, dtype=np.uint64),
            src=np.ascontiguousarray(structure.src, dtype=np.uint32), slot=slot,
            slot_coef=slot_coef, slot_ent=slot_ent, n_grad=structure.n_grad,
            blocks=np.array([0, structure.n_moments], dtype=np.int64))
    base.fused = False
    return base


def kernel_system(prepared, gfun, gparams):
    """One run's system: the prepared structure with the coefficient function and its
    (mutable) parameter vector."""
    from attndyn.kernels import rhs as _rhs
    s = SimpleNamespace(**vars(prepared))
    s.gparams = gparams
    s.gfun = _rhs.function_pointer(gfun) if (s.fused and hasattr(_rhs, "function_pointer")) else gfun
    return s


def kernel_rhs(system, y):
    """``F(y)`` of the sparse bilinear hierarchy through the generic RHS kernel."""
    from attndyn.kernels.rhs import rhs_into
    return rhs_into(system, np.ascontiguousarray(y, dtype=np.float64))


def kernel_integrate(system, y0, t_eval, rtol, atol, max_steps, blowup, h_max):
    """Run the generic Dormand-Prince kernel as ``TiedHierarchy._run`` does."""
    from attndyn.kernels import integrate as _int
    y0 = np.ascontiguousarray(y0, dtype=np.float64)
    t_eval = np.ascontiguousarray(t_eval, dtype=np.float64)
    if system.fused and hasattr(_int, "run_rk"):
        out = _int.run_rk("dopri5", system, y0, t_eval, rtol, atol, max_steps, blowup, h_max)
        return out[0], out[1], out[2]  # (ys, info, tinfo[, y_end])
    s = system
    ys = np.zeros((t_eval.size, y0.size))
    info = np.zeros(5, dtype=np.int64)
    tinfo = np.zeros(2)
    _int.dopri5_sparse(y0, 0.0, t_eval, rtol, atol, 0.0, h_max, max_steps, blowup,
                       s.gfun, s.gparams, s.gather, s.consts, s.indptr, s.src, s.ent, s.coef,
                       s.n_grad, ys, info, tinfo)
    return ys, info, tinfo


def rk_status_message(status, t, steps, blowup):
    from attndyn.kernels.integrate import status_message
    return status_message(status, t, steps, blowup)


class UntiedCoefficients:
    """Compiled potential of an :class:`~attndyn.UntiedModel` and the maps of
    eqs. (27)-(30). One per model (:func:`coefficients`)."""

    def __init__(self, model):
        self.model = model
        self.K = model.K
        self.trainable = tuple(model.trainable)
        import sympy as sp

        from attndyn.numeric.attention.potentials import untied_potential  # builds the numeric route when it is taken
        psyms = [sp.Symbol(str(k), real=True) for k in model.params]
        given = model.given_potential  # potential= of the model (None: derive it here)
        self.potential = given if given is not None else untied_potential(
            model.loss, self.K, model.L, model.C, params=psyms,
            param_values=[float(v) for v in model.params.values()])
        self._hier: dict = {}

    @cached_property
    def potential_function(self):
        """Compiled ``f(x, p, out)``: ``x = (m, q1.ravel(), q2.ravel())``, ``out =
        (dPhi/dm, a1.ravel(), a2.ravel(), Hess_m.ravel())``."""
        pot = self.potential
        if callable(getattr(pot, "gradient_function", None)):
            return pot.gradient_function()
        from attndyn.numeric.core.compile import load_generated
        return load_generated(pot.numba_source("grad"), "grad")

    @cached_property
    def potential_parameters(self) -> np.ndarray:
        pot = self.potential
        if callable(getattr(pot, "parameters", None)):
            return np.ascontiguousarray(pot.parameters(), dtype=np.float64)
        return np.array([float(v) for v in self.model.params.values()], dtype=np.float64)

    @cached_property
    def coefficient_function(self):
        return _make_coefficient_function(self.potential_function)

    def gradients(self, m, q1, q2) -> dict:
        """``dPhi/dm``, ``a1``, ``a2`` and the ``m``-Hessian at numeric order parameters."""
        K = self.K
        m = np.asarray(m, dtype=np.float64).reshape(K)
        q1 = np.asarray(q1, dtype=np.float64).reshape(K, K)
        q2 = np.asarray(q2, dtype=np.float64).reshape(K, K)
        x = np.ascontiguousarray(np.concatenate([m, q1.ravel(), q2.ravel()]))
        if not np.all(np.isfinite(x)):
            raise ValueError("m, q1, q2 must be finite")
        out = np.empty(K + 3 * K * K)
        self.potential_function(x, self.potential_parameters, out)
        KK = K * K
        return {"grad_m": out[:K].copy(), "a1": out[K:K + KK].reshape(K, K).copy(),
                "a2": out[K + KK:K + 2 * KK].reshape(K, K).copy(),
                "hess_m": out[K + 2 * KK:].reshape(K, K).copy()}

    def phi(self, m, q1, q2) -> float:
        """``Phi(m, q1, q2)`` (Theorem 1) at numeric order parameters."""
        pot = self.potential
        kw = {"m": np.asarray(m, float), "q1": np.asarray(q1, float), "q2": np.asarray(q2, float)}
        if hasattr(pot, "phi_at"):
            return float(pot.phi_at(**kw))
        return float(pot.evaluate([float(v) for v in self.model.params.values()], **kw)["phi"])

    def params_vector(self, m, *, tol=1e-12, maxit=50) -> np.ndarray:
        K = self.K
        mask = np.zeros(K)
        mask[list(self.trainable)] = 1.0
        head = np.zeros(HEAD)
        head[_H_K], head[_H_TOL], head[_H_MAXIT] = K, tol, maxit
        return np.ascontiguousarray(np.concatenate([head, mask, np.asarray(m, float).reshape(K),
                                                    self.potential_parameters]))


def coefficients(model) -> UntiedCoefficients:
    """The :class:`UntiedCoefficients` of an ``UntiedModel`` (built once, by its theory)."""
    return model.theory.coefficients


@dataclass
class SlowState:
    """Initial slow state: the moments ``mu`` over ``words`` and the means
    ``m0 = m_k(0)``, which select the root ``m*`` the fast phase reaches.
    ``pairs`` (when built from matrices) lets a convergence check compute
    longer moments."""

    words: list
    mu: np.ndarray
    m0: np.ndarray
    pairs: list | None = field(default=None, repr=False)
    d: int | None = None

    def moment(self, word, alphabet=None) -> float:
        c = canonical(tuple(word), alphabet)
        return float(self.mu[self.words.index(c)])


def letter_mats(pairs):
    mats, Ms = [], []
    for U, V in pairs:
        Mk = U @ V.T
        Ms.append(Mk)
        mats += [Mk, Mk.T, U @ U.T, V @ V.T]
    return mats, Ms


def pair_order_parameters(pairs):
    d = pairs[0][0].shape[0]
    K = len(pairs)
    Ms = [U @ V.T for U, V in pairs]
    m = np.array([np.trace(Mk) for Mk in Ms]) / math.sqrt(d)
    tA = np.array([np.sum(U * U) for U, _ in pairs]) / d
    tB = np.array([np.sum(V * V) for _, V in pairs]) / d
    q1 = np.array([[np.sum(Ms[k] * Ms[l]) for l in range(K)] for k in range(K)]) / d
    q2 = np.array([[np.sum(Ms[k] * Ms[l].T) for l in range(K)] for k in range(K)]) / d
    return m, tA, tB, q1, q2


def low_from_words(K, words, mu):
    """``tA, tB, q1, q2`` read from moments (NaN where absent)."""
    alph = su.untied_alphabet(K)
    look = {w: i for i, w in enumerate(words)}

    def get(w):
        i = look.get(canonical(w, alph))
        return np.nan if i is None else float(mu[i])
    tA = np.array([get((4 * k + su.A,)) for k in range(K)])
    tB = np.array([get((4 * k + su.B,)) for k in range(K)])
    q1 = np.array([[get((4 * k + su.M, 4 * l + su.MT)) for l in range(K)] for k in range(K)])
    q2 = np.array([[get((4 * k + su.M, 4 * l + su.M)) for l in range(K)] for k in range(K)])
    return tA, tB, q1, q2


def as_state(model, obj, words=None):
    """Pairs, a :class:`SlowState` or a dict ``{m, tA, tB, q1, q2}`` -> (m0, tA, tB, q1, q2, d)."""
    if isinstance(obj, SlowState):
        tA, tB, q1, q2 = low_from_words(model.K, obj.words, obj.mu)
        return np.array(obj.m0, float), tA, tB, q1, q2, obj.d
    if isinstance(obj, dict):
        K = model.K
        try:
            m = np.asarray(obj["m"], float).reshape(K)
            tA = np.asarray(obj["tA"], float).reshape(K)
            tB = np.asarray(obj["tB"], float).reshape(K)
            q1 = np.asarray(obj["q1"], float).reshape(K, K)
            q2 = np.asarray(obj["q2"], float).reshape(K, K)
        except KeyError as exc:
            raise ValueError(f"a state dict needs the keys m, tA, tB, q1, q2 (missing {exc})") from None
        except ValueError:
            raise ValueError(f"state dict: m, tA, tB must have K = {K} entries and q1, q2 "
                             f"shape ({K}, {K})") from None
        for nm, v in (("m", m), ("tA", tA), ("tB", tB), ("q1", q1), ("q2", q2)):
            if not np.all(np.isfinite(v)):
                raise ValueError(f"state {nm} must be finite")
        return m, tA, tB, q1, q2, obj.get("d")
    pairs = model.check_factors(obj, "pairs")
    m, tA, tB, q1, q2 = pair_order_parameters(pairs)
    return m, tA, tB, q1, q2, pairs[0][0].shape[0]


class UntiedTrajectory(Trajectory):
    """A :class:`Trajectory` of the untied theory with ``.mean(k)`` (rows ``m_k``)."""

    def mean(self, k: int) -> np.ndarray:
        """Trajectory of the pre-activation mean ``m_k`` (0-based ``k``)."""
        K = self.params.get("K")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < (K or 10**9):
            raise ValueError(f"k must be an index in 0..{(K or 1) - 1}, got {k!r}")
        return self.observable("m", int(k))


def obs(name, *idx):
    return obs_key(name, *idx)


def with_loss_row(model, res):
    """``res`` with a ``loss = Phi(m, q1, q2)`` row appended (when it is finite)."""
    K = model.K
    th = model.theory.coefficients
    loss = np.full(res.t.size, np.nan)
    for j in range(res.t.size):
        m = np.array([res.observable("m", k)[j] for k in range(K)])
        q1 = np.array([[res.observable("q1", k, l)[j] for l in range(K)] for k in range(K)])
        q2 = np.array([[res.observable("q2", k, l)[j] for l in range(K)] for k in range(K)])
        if np.all(np.isfinite(m)) and np.all(np.isfinite(q1)) and np.all(np.isfinite(q2)):
            try:
                loss[j] = th.phi(m, q1, q2)
            except (AttributeError, TypeError, ValueError):
                loss[:] = np.nan
                break
    if np.all(np.isfinite(loss)):
        res.y = np.vstack([res.y, loss[None, :]])
        res.names = list(res.names) + ["loss"]
    return res
