"""Compiled Hermite (Mehler) route of ``Gamma(q)`` with a stated truncation bound (issue 12).

For the MSE teacher-student loss ``scale * sum_ij (sigma(G_ij,s) - sigma*(G_ij,t))^2``
(paper 003, eqs. 22, 48) with activations without closed-form Hermite
coefficients (tanh, GELU, sigmoid, softplus; erf as well, for checks against
its closed form), :class:`HermitePotential` evaluates the tied ``Gamma(q)``
(eq. 91, symmetric convention) by Mehler's formula in compiled code
(:mod:`attndyn.kernels.hermite`, where the formulas are):

    Gamma_ss = A (E[s'^2 + s s''](v_s) - sum_n rho^n b_n(s''; v_s) b_n(t; v_t)),
    Gamma_tt = A (E[t'^2 + t t''](v_t) - sum_n rho^n b_n(s; v_s) b_n(t''; v_t)),
    Gamma_st = -A sum_n rho^n b_n(s'; v_s) b_n(t'; v_t),

``b_n(u; v) = E[u(sqrt(v) z) h_n(z)]`` (normalised probabilists' Hermite
polynomials, ``h_n = He_n / sqrt(n!)``), ``v = s_ij q``, ``A = scale * s_ij``
summed over the entries ``(i, j)`` of ``G`` (``s_ij = C_ii C_jj + C_ij^2``; for
``L = 1`` and ``C = 1``: ``v = 2 q``, ``A = 1``).

Each call chooses the number of terms ``M`` from the tolerance and states a
bound on the error of every entry: the Cauchy-Schwarz bound of the remainder,
``|rho|^(M+1) sqrt(T_u T_w)`` with ``T_u = E[u^2] - sum_{n<=M} b_n(u)^2``
bounded from above (``max(T, 0)`` plus the allowances below), plus the error
of the coefficients in the partial sums. The coefficients are integrated per
variance, in the kernel, by a trapezoidal rule in ``z``; its step is chosen
here, at construction, from a ladder until the coefficients (``n < M_max``)
and ``E[u^2]`` agree with those of the rule with half the step (one rule per
band of variances ``(v_max 2^-(j+1), v_max 2^-j]``, ``j = 0..7``, the last down
to 0, checked at the band's top, middle and bottom; ``v_max`` the largest
variance allowed); the
difference is recorded as the coefficients' error ``eps_q`` (relative to
``sqrt(E u^2)``; a verified, not a proven, quantity) and enters the stated
bound together with a worst-case rounding allowance. So the stated bound is
certified for the truncation, and covers the quadrature to the accuracy of
that verification.

Variances (``q_ss``, ``q_tt``) above ``q_max`` are outside the verified range:
the compiled function writes NaN and counts the exit (never extrapolates), as
the surrogate does; the integrators stop there.
"""

from __future__ import annotations

import math
import time

import numpy as np
import sympy as sp

from attndyn.kernels.hermite import (ACTIVATION_CODES, BAND, BLOCK, HERMITE_HEADER, VERSION,
                                     activation_values, hermite_batch, hermite_coefficients,
                                     hermite_grad, side_size)
from attndyn.numeric.core.validate import kernel_array

__all__ = ["HermitePotential", "hermite_potential", "HERMITE_ACTIVATIONS", "mse_parts"]

#: Activations with a compiled Hermite route.
HERMITE_ACTIVATIONS = tuple(sorted(ACTIVATION_CODES))
_STEPS = (0.4, 0.3, 0.25, 0.2, 0.15, 0.12, 0.1, 0.08, 0.065, 0.05, 0.04, 0.03, 0.025)
_EPS = float(np.finfo(float).eps)
_BANDS = 8  # variance bands (v_max 2^-(j+1), v_max 2^-j], the last down to 0


def _he_table(z, M):
    """``h_n(z)``, n = 0..M-1 (rows), by the stable three-term recurrence."""
    H = np.empty((M, z.size))
    H[0] = 1.0
    if M > 1:
        H[1] = z
    for n in range(1, M - 1):
        H[n + 1] = (z * H[n] - math.sqrt(n) * H[n - 1]) / math.sqrt(n + 1)
    return H


def _rule(h, Mmax, vmax):
    """Trapezoid nodes ``z_i = i h >= 0``, weights ``w2`` (both signs), the table
    ``H[i, n] = w2_i h_n(z_i)``, nodes needed per block of 8 degrees and for the moments."""
    zmax = 2.0 * math.sqrt(Mmax) + 14.0
    z = np.arange(0.0, zmax + h / 2, h)
    w2 = 2.0 * h * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    w2[0] /= 2.0
    H = (_he_table(z, Mmax) * w2).T.copy()            # (N, Mmax)
    grow = 1.0 + math.sqrt(vmax) * z                  # |u| <= c (1 + |x|) for these activations
    nb = Mmax // BLOCK
    nlim = np.empty(nb, dtype=np.int64)
    for b in range(nb):
        m = np.max(np.abs(H[:, b * BLOCK:(b + 1) * BLOCK]), axis=1) * grow
        tail = np.cumsum(m[::-1])[::-1]
        nlim[b] = int(np.argmax(tail <= 1e-18)) if np.any(tail <= 1e-18) else z.size
    tail = np.cumsum((w2 * grow ** 2)[::-1])[::-1]
    nE = int(np.argmax(tail <= 1e-20)) if np.any(tail <= 1e-20) else z.size
    nlim = np.maximum(nlim, 1)
    N = int(max(nlim.max(), nE))
    return z[:N], w2[:N], H[:N], nlim, max(nE, 1)


def _coefficients(code, v, z, w2, H):
    """``(b (3, Mmax), E u_j^2 (3), E[u'^2 + u u''])`` of one activation at variance ``v``
    with the given nodes (numpy, the same sums as the kernel)."""
    sv = math.sqrt(v)
    fp = activation_values(code, np.ascontiguousarray(sv * z))
    fm = activation_values(code, np.ascontiguousarray(-sv * z))
    ev, od = 0.5 * (fp + fm), 0.5 * (fp - fm)
    Mmax = H.shape[1]
    par = (np.arange(Mmax) % 2).astype(bool)
    b = np.empty((3, Mmax))
    for j in range(3):
        b[j] = np.where(par, H.T @ od[:, j], H.T @ ev[:, j])
    E = w2 @ (ev ** 2 + od ** 2)
    Es = w2 @ (ev[:, 1] ** 2 + od[:, 1] ** 2 + ev[:, 0] * ev[:, 2] + od[:, 0] * od[:, 2])
    return b, E, Es


def mse_parts(loss, K: int, L: int = 1):
    """``(student name, teacher name, student index, teacher index, scale)`` of an MSE
    teacher-student loss (``attndyn.symbolic.losses.mse_teacher_student``) whose
    activations have a compiled Hermite route, or raise ``ValueError`` saying why.

    The decomposition is verified: the loss rebuilt from these parts must equal the
    given one at random pre-activations."""
    from attndyn.symbolic.gaussian import g_array
    from attndyn.symbolic.potential import call_loss
    extra = getattr(loss, "extra", None) or {}
    st, te = extra.get("student"), extra.get("teacher")
    if st is None or te is None:
        raise ValueError("the hermite route (compiled) takes an MSE teacher-student loss "
                         "(attndyn.symbolic.losses.mse_teacher_student)")
    for a, what in ((st, "student"), (te, "teacher")):
        if a.name not in ACTIVATION_CODES:
            raise ValueError(f"hermite route: no compiled Hermite series for the {what} "
                             f"activation {a.name!r} (have: {', '.join(HERMITE_ACTIVATIONS)})")
    G = g_array(L, K)
    expr = call_loss(loss, G)
    used = sorted({k for i in range(L) for j in range(L) for k in range(K)
                   if expr.has(G[i, j, k])})
    if len(used) != 2:
        raise ValueError(f"hermite route: the loss must use exactly two of the K = {K} "
                         f"indices, it uses {used}")
    syms = [G[i, j, k] for i in range(L) for j in range(L) for k in range(K)]
    f = sp.lambdify(syms, expr, modules="math")
    rng = np.random.default_rng(12)
    pts = [rng.standard_normal(len(syms)) for _ in range(4)]
    vals = np.array([f(*pt) for pt in pts])
    for ks, kt in ((used[0], used[1]), (used[1], used[0])):
        base = sum((st(G[i, j, ks]) - te(G[i, j, kt])) ** 2 for i in range(L) for j in range(L))
        fb = sp.lambdify(syms, base, modules="math")
        bv = np.array([fb(*pt) for pt in pts])
        if np.all(bv > 0):
            scale = vals / bv
            if np.all(np.abs(scale - scale[0]) <= 1e-12 * abs(scale[0])) and scale[0] > 0:
                return st.name, te.name, ks, kt, float(scale[0])
    raise ValueError("hermite route: the loss is not scale * sum_ij (sigma(G_ij,s) - "
                     "sigma*(G_ij,t))^2 with a positive scale")


class HermitePotential:
    """Tied ``Gamma(q)`` of an MSE teacher-student loss by the compiled Mehler series
    with a stated error bound (route ``"hermite"``; see the module doc).

    Parameters
    ----------
    student, teacher : activation names in :data:`HERMITE_ACTIVATIONS`.
    K, L, C : the tied law (``C`` an ``L x L`` covariance, default identity).
    student_index, teacher_index : the two indices ``k`` of the loss.
    scale : the loss's factor (``1/2`` in the paper).
    rtol, atol : requested accuracy of every entry, ``atol + rtol |Gamma_kl|``.
    q_max : the largest variance ``q_ss``, ``q_tt`` allowed (the rule is verified up to it).
    m_max : the largest number of terms (a multiple of 8).

    Attributes: ``route``, ``K``, ``L``, ``C``, ``step``, ``nodes``, ``eps_q``,
    ``eps_E``, ``build_seconds``, ``last_bound`` (bounds of the last compiled call),
    ``max_bound`` and ``over_tolerance`` (since :meth:`reset`), ``exits``.
    """

    route = "hermite"

    def __init__(self, student="tanh", teacher=None, *, K: int = 2, L: int = 1, C=None,
                 student_index: int = 0, teacher_index: int = 1, scale: float = 0.5,
                 rtol: float = 1e-9, atol: float = 1e-12, q_max: float = 4.0, m_max: int = 128):
        t0 = time.perf_counter()
        teacher = student if teacher is None else teacher
        for a, what in ((student, "student"), (teacher, "teacher")):
            if not isinstance(a, str) or a not in ACTIVATION_CODES:
                raise ValueError(f"{what} must be one of {HERMITE_ACTIVATIONS}, got {a!r}")
        for v, what, lo in ((K, "K", 2), (L, "L", 1), (m_max, "m_max", 8)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"{what} must be an int >= {lo}, got {v!r}")
        if m_max % BLOCK or m_max > 512:
            raise ValueError(f"m_max must be a multiple of {BLOCK} in [8, 512], got {m_max}")
        for v, what in ((student_index, "student_index"), (teacher_index, "teacher_index")):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < K:
                raise ValueError(f"{what} must be an int in [0, K) = [0, {K}), got {v!r}")
        if student_index == teacher_index:
            raise ValueError("student_index and teacher_index must differ")
        for v, what in ((rtol, "rtol"), (atol, "atol"), (scale, "scale"), (q_max, "q_max")):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) \
                    or not math.isfinite(v) or v < 0:
                raise ValueError(f"{what} must be a finite number >= 0, got {v!r}")
        if rtol == 0 and atol == 0:
            raise ValueError("rtol and atol cannot both be 0")
        if not 0 < q_max <= 100:
            raise ValueError(f"q_max must be in (0, 100], got {q_max!r}")
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale!r}")
        C = np.eye(L) if C is None else np.asarray(C, dtype=float)
        if C.shape != (L, L) or not np.all(np.isfinite(C)) or not np.allclose(C, C.T) \
                or np.min(np.linalg.eigvalsh(C)) <= 0:
            raise ValueError(f"C must be a finite symmetric positive-definite {L} x {L} matrix")
        self.student, self.teacher = student, teacher
        self.K, self.L, self.C = int(K), int(L), C
        self.ks, self.kt = int(student_index), int(teacher_index)
        self.scale = float(scale)
        self.rtol, self.atol, self.q_max, self.m_max = float(rtol), float(atol), float(q_max), int(m_max)
        # variance factors s_ij = C_ii C_jj + C_ij^2 of the pairs (G_ij,s, G_ij,t), grouped
        groups: dict = {}
        for i in range(L):
            for j in range(L):
                s = float(C[i, i] * C[j, j] + C[i, j] * C[j, i])
                groups[s] = groups.get(s, 0) + 1
        self.groups = [(s, self.scale * s * n) for s, n in sorted(groups.items())]
        vmax = max(s for s, _ in self.groups) * self.q_max
        self._choose_rule(vmax)
        self._p = self._pack()
        self.build_seconds = time.perf_counter() - t0

    # -- construction ------------------------------------------------------------------------
    def _choose_rule(self, vmax):
        """One trapezoid rule per variance band ``(v_top / 2, v_top]``, ``v_top = v_max 2^-j``
        (the last band reaches down to 0): the largest step of the ladder whose
        coefficients and moments agree with the half step's at ``v_top``,
        ``v_top / sqrt 2`` and ``v_top / 2`` (the last band also at ``v_top / 16, v_top / 256``)."""
        codes = sorted({ACTIVATION_CODES[self.student], ACTIVATION_CODES[self.teacher]})
        target = 64 * _EPS   # agreement wanted between a rule and the one of half its step
        bands = []
        dq_all = dE_all = 0.0
        for j in range(_BANDS):
            vtop = vmax * 2.0 ** (-j)
            vs = [vtop, vtop / math.sqrt(2), vtop / 2] + ([vtop / 16, vtop / 256]
                                                          if j == _BANDS - 1 else [])
            for h in _STEPS:
                fine = _rule(h / 2, self.m_max, vtop)
                coarse = _rule(h, self.m_max, vtop)
                dq = dE = 0.0
                for code in codes:
                    for v in vs:
                        b1, E1, S1 = _coefficients(code, v, *coarse[:3])
                        b2, E2, S2 = _coefficients(code, v, *fine[:3])
                        nrm = np.sqrt(np.maximum(E2, 1e-300))[:, None]
                        dq = max(dq, float(np.max(np.abs(b1 - b2) / nrm)))
                        dE = max(dE, float(np.max(np.abs(E1 - E2) / E2)),
                                 float(abs(S1 - S2) / max(E2[1] + math.sqrt(E2[0] * E2[2]),
                                                          1e-300)))
                if dq <= target and dE <= target:
                    break
            else:
                raise ValueError(f"hermite route: no trapezoid step down to {_STEPS[-1]} "
                                 f"reaches {target:.1e} at variances up to {vtop:.3g}; "
                                 "lower q_max")
            z, w2, H, nlim, nE = coarse
            # the kernel's layout: per node the even degrees, then the odd ones
            H = np.concatenate([H[:, 0::2], H[:, 1::2]], axis=1)
            bands.append((vtop, h, z, w2, H, nlim, nE))
            dq_all, dE_all = max(dq_all, dq), max(dE_all, dE)
        self._bands = bands
        N = max(b[2].size for b in bands)
        self.step = bands[0][1]
        self.steps = tuple(b[1] for b in bands)
        self.nodes = N
        self.band_nodes = tuple(b[2].size for b in bands)
        # verified quadrature error plus worst-case rounding of a dot product over N nodes
        self.eps_q = max(dq_all, _EPS) + (N + 2) * _EPS
        self.eps_E = max(dE_all, _EPS) + (N + 2) * _EPS
        self._rnd = (self.m_max + 4) * _EPS
        self.verification = {"bands_v_top": [b[0] for b in bands], "steps": list(self.steps),
                             "half_step_difference_coefficients": dq_all,
                             "half_step_difference_moments": dE_all}

    def _pack(self):
        K, G, N, Mmax = self.K, len(self.groups), self.nodes, self.m_max
        ss = side_size(N, Mmax)
        nb = len(self._bands)
        off_exit = HERMITE_HEADER
        off_last = off_exit + K * K
        off_g = off_last + K * K
        off_bands = off_g + 2 * G
        off = off_bands + BAND * nb
        table = []
        chunks = []
        for vtop, h, z, w2, H, nlim, nE in self._bands:
            Nb = z.size
            oz = off
            ow = oz + Nb
            oH = ow + Nb
            on = oH + Nb * Mmax
            off = on + nlim.size
            table += [vtop, Nb, oz, ow, oH, on, nE, h]
            chunks += [z, w2, H.ravel(), nlim.astype(float)]
        off_side = off
        h = np.zeros(HERMITE_HEADER)
        off_buf = off_side + 2 * G * ss
        h[:33] = [VERSION, K, self.ks, self.kt, G, N, Mmax, ACTIVATION_CODES[self.student],
                  ACTIVATION_CODES[self.teacher], self.rtol, self.atol, self.q_max, 0.0,
                  off_exit, 0.0, 0.0, 0.0, off_g, 0.0, 0.0, 0.0, 0.0, off_side, ss,
                  self.eps_q, off_last, 0.0, 0.0, self._rnd, self.eps_E, nb, off_bands, off_buf]
        sides = np.zeros(2 * G * ss)
        for k in range(2 * G):
            sides[k * ss] = -1.0          # no cached variance
        grp = np.array([x for sa in self.groups for x in sa], dtype=float)
        return np.ascontiguousarray(np.concatenate(
            [h, np.zeros(2 * K * K), grp, np.array(table, dtype=float)] + chunks
            + [sides, np.zeros(8)]))

    # -- TiedModel interface ------------------------------------------------------------------
    def gradient_function(self):
        """The compiled ``grad(x, p, out)`` (``GRAD_SIG``): ``q.ravel() -> Gamma.ravel()``."""
        return hermite_grad

    def parameters(self) -> np.ndarray:
        """The parameter vector of :meth:`gradient_function` (caches, counters, bounds)."""
        return self._p

    # -- evaluation ------------------------------------------------------------------------------
    def _check_q(self, q):
        try:  # read-only or memory-mapped q is copied into a writable C array
            q = kernel_array(q, "q")
        except TypeError as exc:
            raise ValueError(f"q must be a finite ({self.K}, {self.K}) array: {exc}") from None
        if q.shape != (self.K, self.K) or not np.all(np.isfinite(q)):
            raise ValueError(f"q must be a finite ({self.K}, {self.K}) array, got shape "
                             f"{np.shape(q)}")
        return np.ascontiguousarray(q.ravel())

    def gamma_with_bound(self, q, order: int | None = None):
        """``(Gamma(q), bound, M)``: ``|Gamma_exact - Gamma| <= bound`` entrywise and the
        number of terms used. ``order``: exactly ``order + 1`` terms (n = 0..order)
        instead of the tolerance's choice. Raises for a variance outside ``(0, q_max]``."""
        x = self._check_q(q)
        p = self._p.copy()
        p[12] = 0.0
        if order is not None:
            if isinstance(order, bool) or not isinstance(order, (int, np.integer)) \
                    or not 0 <= order < self.m_max:
                raise ValueError(f"order must be an int in [0, m_max) = [0, {self.m_max}), "
                                 f"got {order!r}")
            p[26] = order + 1
        out = np.empty(self.K * self.K)
        hermite_grad(x, p, out)
        if p[12] != 0:
            raise ValueError(f"q = {np.asarray(q).tolist()}: the student/teacher variances must "
                             f"lie in (0, q_max = {self.q_max:g}] (the verified range)")
        o = int(p[25])
        bound = p[o:o + self.K * self.K].reshape(self.K, self.K).copy()
        return out.reshape(self.K, self.K), bound, int(p[16])

    def gamma(self, q) -> np.ndarray:
        """``Gamma(q)`` (eq. 91) to the tolerance (see :meth:`gamma_with_bound`)."""
        return self.gamma_with_bound(q)[0]

    gamma_at = gamma

    def gamma_many(self, Q, with_bound: bool = False):
        """``Gamma`` at ``(n, K, K)`` overlaps (NaN outside the range), and the bounds."""
        Q = np.ascontiguousarray(np.asarray(Q, dtype=float).reshape(-1, self.K * self.K))
        out = np.empty_like(Q)
        bnd = np.empty_like(Q)
        hermite_batch(Q, self._p.copy(), out, bnd)
        shp = (-1, self.K, self.K)
        return (out.reshape(shp), bnd.reshape(shp)) if with_bound else out.reshape(shp)

    def coefficients(self, v: float, side: str = "student", n: int = 32):
        """``(b, E)``: the normalised Hermite coefficients ``b[j, m] = E[u_j(sqrt(v) z)
        h_m(z)]`` of ``u_j = sigma, sigma', sigma''`` (``m < n``, rounded up to a multiple
        of 8) and ``E[u_j(sqrt(v) z)^2]``, as the compiled kernel computes them."""
        if side not in ("student", "teacher"):
            raise ValueError(f"side must be 'student' or 'teacher', got {side!r}")
        v = float(v)
        vmax = max(s for s, _ in self.groups) * self.q_max
        if not 0 < v <= vmax:
            raise ValueError(f"v must be in (0, {vmax:g}] (the verified range), got {v!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= self.m_max:
            raise ValueError(f"n must be an int in [1, m_max = {self.m_max}], got {n!r}")
        b, E = hermite_coefficients(self._p.copy(), 0 if side == "student" else 1, v,
                                    -(-int(n) // BLOCK))
        return b[:, :n], E

    # -- counters ----------------------------------------------------------------------------------
    @property
    def exits(self) -> int:
        return int(self._p[12])

    @property
    def exit_q(self):
        if self.exits == 0:
            return None
        o = int(self._p[13])
        return self._p[o:o + self.K * self.K].reshape(self.K, self.K).copy()

    @property
    def last_bound(self) -> np.ndarray:
        o = int(self._p[25])
        return self._p[o:o + self.K * self.K].reshape(self.K, self.K).copy()

    @property
    def max_bound(self) -> float:
        """The largest stated bound of any entry over the compiled calls since :meth:`reset`."""
        return float(self._p[14])

    @property
    def over_tolerance(self) -> int:
        """Compiled calls since :meth:`reset` whose bound exceeded ``atol + rtol |Gamma|``."""
        return int(self._p[15])

    @property
    def tolerance(self) -> dict:
        """The stated accuracy of every entry: ``atol + rtol |Gamma_kl|`` (a bound per call)."""
        return {"rtol": self.rtol, "atol": self.atol, "norm": "entrywise", "q_max": self.q_max}

    def error_report(self) -> dict:
        """The largest stated bound over the compiled calls since :meth:`reset`, the calls
        whose bound exceeded the tolerance and the calls outside ``(0, q_max]`` (NaN)."""
        over = self.over_tolerance
        return {"route": "hermite", "rtol": self.rtol, "atol": self.atol,
                "max_error": self.max_bound, "over_tolerance": over, "exits": self.exits,
                "within_tolerance": over == 0 and self.exits == 0, "q_max": self.q_max}

    def reset_report(self):
        self.reset()

    def reset(self):
        """Zero the exit, bound and over-tolerance counters (the caches stay)."""
        self._p[12] = self._p[14] = self._p[15] = 0.0
        o = int(self._p[13])
        self._p[o:o + self.K * self.K] = 0.0

    def describe(self) -> str:
        return (f"HermitePotential({self.student}/{self.teacher}, K={self.K}, L={self.L}: "
                f"trapezoid steps {', '.join(f'{h:g}' for h in self.steps)} "
                f"({', '.join(map(str, self.band_nodes))} nodes), M <= {self.m_max}, "
                f"q_kk in (0, {self.q_max:g}], rtol {self.rtol:g}, atol {self.atol:g}, "
                f"eps_q {self.eps_q:.1e})")

    __repr__ = describe

    def _repr_html_(self):
        from attndyn.numeric.core.display import html_summary
        rep = self.error_report()
        return html_summary("HermitePotential", {
            "route": "hermite", "tolerance": self.tolerance,
            "worst error bound so far": rep["max_error"],
            "within tolerance": rep["within_tolerance"]}, subtitle=f"K = {self.K}, L = {self.L}")


def hermite_potential(loss, K: int, L: int = 1, C=None, **kw) -> HermitePotential:
    """:class:`HermitePotential` of an MSE teacher-student ``loss``
    (:func:`attndyn.symbolic.losses.mse_teacher_student`) for the tied law; ``kw``:
    ``rtol, atol, q_max, m_max``. Raises ``ValueError`` for other losses."""
    st, te, ks, kt, scale = mse_parts(loss, K, L)
    return HermitePotential(st, te, K=K, L=L, C=C, student_index=ks, teacher_index=kt,
                            scale=scale, **kw)
