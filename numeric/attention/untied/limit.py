"""The d -> infinity trajectory of the untied slow dynamics from an initial law.

The slaved flow on the slow time ``tau = eta n / d`` (paper 003, section 4 and
appendix F; ``m = m*(q)``, eqs. 29-30),

    dU_k/dtau = -beta_k V_k - 2 P_k V_k - gamma U_k,
    dV_k/dtau = -beta_k U_k - 2 P_k^T U_k - gamma V_k,
    P_k = sum_l a^(1)_kl M_l + a^(2)_kl M_l^T,   beta_k = -psi_k / (tA_k + tB_k),

has the slow hierarchy (32) as its normalised-trace projection at every ``d``
(:mod:`.fastslow`). Its ``d -> infinity`` limit depends on the initial pairs only
through their law; :func:`limit_flow` computes it from one of two laws.

Commuting law (exact), :class:`DiagonalLaw`. All ``U_k, V_k`` diagonal in one
basis, with entries ``(u_k(x), v_k(x))`` distributed by a joint law of ``x``
given as nodes and weights. Then ``M_k = M_k^T = diag(u_k v_k)``,
``A_k = diag(u_k^2)``, ``B_k = diag(v_k^2)`` and the flow stays diagonal; it
acts node by node,

    du_k/dtau = -(beta_k + 2 p_k) v_k - gamma u_k,
    dv_k/dtau = -(beta_k + 2 p_k) u_k - gamma v_k,
    p_k(x) = sum_l (a^(1)_kl + a^(2)_kl) u_l(x) v_l(x),

with the scalars ``q1_kl = q2_kl = E[u_k v_k u_l v_l]``, ``tA_k = E u_k^2``,
``tB_k = E v_k^2``, ``psi_k = 2 E[p_k (u_k^2 + v_k^2)]`` (eq. 27) and ``m*`` (eq. 29,
Newton from the root the fast flow reaches from the law's means) closing it. With
``n`` equal weights ``1/n`` it *is* the finite-``d`` slaved flow of the diagonal pairs
(``d = n``), and for a law given by a quadrature rule it is the ``d -> infinity``
limit up to that rule's error. The error estimate is the change under a tolerance
100 times tighter, plus rounding. docs/untied.md derives a closed-form case.

Gaussian law (deterministic equivalents), :class:`UntiedLaw` of
:func:`gaussian_pair` blocks: ``U_k, V_k`` independent with i.i.d.
``N(0, scale^2 / d_k)`` entries (:func:`attndyn.numeric.gaussian_init`), so the
letters are asymptotically free (Assumption 6) and ``m_k -> mean_k``. Its moments
(:meth:`UntiedLaw.moment`) are sums over the non-crossing pairings of the Gaussian
factors. The trajectory comes from pairs of size ``d`` whose singular values are the
Marchenko-Pastur bin means (``mp_bin_means`` of :mod:`..limitcore`) between
independent Haar rotations, their traces set to ``mean_k sqrt(d)``, integrated by
the slaved flow at two or more sizes, averaged over ``rotations`` rotations and
extrapolated in ``1/d`` by Richardson with the stated error of
:func:`..limitcore.extrapolate` (Student quantile times the propagated standard
error plus the change without the smallest size).

Spectral law of ``S_k(tau)`` (:func:`spectral_density`): for a continuous commuting law
(:class:`BranchLaw`, :func:`branch_law`) zero-weight tracer nodes ride the per-node flow and
the law of the parameter is pushed forward cell by cell (exact up to the tracer spacing);
for an :class:`UntiedLaw` the quantiles of the equivalents' spectra at the largest size.
:func:`limit_theory` is ``compare(..., theory="limit")``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from attndyn.numeric.attention.limitcore import (LimitTrajectory, SpectralDensity, check_int,
                                                 check_quantile_args, check_sizes,
                                                 seed_rec, extrapolate, haar_orthogonal,
                                                 ks_distance, mp_bin_means,
                                                 wasserstein_distance)
# the spectral result and the free case's quantiles, shared with the tied spectral law
from attndyn.numeric.attention.limitcore import (cells_cdf, spectral_result,
                                                 equivalent_quantiles, quantile_cdf_error,
                                                 quantile_levels, spectrum_quantiles)
from attndyn.numeric.attention.untied.coefficients import (ROOT_FAILED, SlowState, obs,
                                                           coefficients)
from attndyn.numeric.attention.untied.fastslow import newton, critical_mean, untied_flow
from attndyn.numeric.core.results import IntegrationError
from attndyn.numeric.core.validate import check_pos_float, check_t_eval, resolve_seed
from attndyn.symbolic import untied as su
from attndyn.symbolic.words import canonical

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.attention.base import UntiedModelLike
    from attndyn.numeric.attention.untied.fastslow import CriticalMean
    from attndyn.numeric.core.types import ArrayLike, RngLike

__all__ = ["GaussianPair", "gaussian_pair", "UntiedLaw", "DiagonalLaw", "law_of_pairs",
           "limit_theory", "commuting_limit", "equivalent_pairs", "limit_flow", "BranchLaw",
           "branch_law", "spectral_density", "SpectralDensity", "ks_distance",
           "wasserstein_distance"]


# ---------------------------------------------------------------------------
# laws

@dataclass(frozen=True)
class GaussianPair:
    """One index: ``U_k, V_k`` of shape ``d x d_k`` (``d_k = aspect d``) with i.i.d.
    ``N(0, scale_u^2/d_k)`` and ``N(0, scale_v^2/d_k)`` entries; ``mean`` is the limit
    of ``m_k = Tr(U_k V_k^T)/sqrt(d)``."""

    scale_u: float = 1.0
    scale_v: float = 1.0
    aspect: float = 1.0
    mean: float = 0.0


def gaussian_pair(scale: float = 1.0, aspect: float = 1.0, mean: float = 0.0, *,
                  scale_v: float | None = None) -> GaussianPair:
    """The law of one Gaussian pair (``gaussian_init``'s: ``tA = scale^2``, ``tB = scale_v^2``).

    Entries of ``U`` (``d x aspect d``) are ``N(0, scale^2 / (aspect d))`` and those of
    ``V`` ``N(0, scale_v^2 / (aspect d))``, so ``tA = Tr(U U^T) / d -> scale^2`` and
    ``tB -> scale_v^2`` (the moments of eq. 26); ``mean`` is ``m_k``.

    Examples
    --------
    >>> import attndyn
    >>> law = attndyn.UntiedLaw([attndyn.gaussian_pair(scale=1.0), attndyn.gaussian_pair(scale=0.5)])
    >>> law.moment((2,)), law.moment((6,))   # tA_1 = 1, tA_2 = 0.5^2
    (1.0, 0.25)
    """
    su_ = float(scale)
    sv = su_ if scale_v is None else float(scale_v)
    a, m = float(aspect), float(mean)
    if not (math.isfinite(su_) and su_ > 0 and math.isfinite(sv) and sv > 0):
        raise ValueError(f"scale and scale_v must be finite and > 0, got {scale}, {scale_v}")
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"aspect must be finite and > 0 (d_k / d), got {aspect}")
    if not math.isfinite(m):
        raise ValueError(f"mean must be finite, got {mean}")
    return GaussianPair(su_, sv, a, m)


def _ginibre_letters(word: Sequence[int]) -> tuple[tuple[int, bool], ...]:
    """A word over ``{M, M^T, A, B}`` as Gaussian factors ``(matrix, transposed)``, matrix
    ``2k`` for ``U_k`` and ``2k + 1`` for ``V_k``."""
    out: list[tuple[int, bool]] = []
    for a in word:
        k, kind = divmod(int(a), 4)
        u, v = 2 * k, 2 * k + 1
        out += {su.M: [(u, False), (v, True)], su.MT: [(v, False), (u, True)],
                su.A: [(u, False), (u, True)], su.B: [(v, False), (v, True)]}[kind]
    return tuple(out)


def _nc_pairings(n: int) -> Iterator[list[tuple[int, int]]]:
    """Non-crossing pairings of ``0..n-1`` (lists of pairs)."""
    if n == 0:
        yield []
        return
    for j in range(1, n, 2):
        for inner in _nc_pairings(j - 1):
            for outer in _nc_pairings(n - j - 1):
                yield ([(0, j)] + [(a + 1, b + 1) for a, b in inner]
                       + [(a + j + 1, b + j + 1) for a, b in outer])


class UntiedLaw:
    """Independent :func:`gaussian_pair` laws, one per index (free: Assumption 6).

    ``moment(word)`` is the limit of the normalised trace of a word over
    ``{M_k, M_k^T, A_k, B_k}`` (eq. 26): writing ``M = U V^T``, ``A = U U^T``,
    ``B = V V^T``, the sum over the non-crossing pairings of each factor with its
    transpose, each pairing weighted by ``prod scale^2 * aspect^(f_r - n)`` with
    ``f_r`` the number of its inner (``d_k``-dimensional) index cycles, ``n`` its pairs
    (Wick's theorem; the other pairings are ``O(1/d)``). ``means`` are the ``m_k``.

    Examples
    --------
    >>> import attndyn
    >>> law = attndyn.UntiedLaw([attndyn.gaussian_pair(scale=1.0), attndyn.gaussian_pair(scale=0.5)])
    >>> law.moment((2,)), law.moment((6,)), law.moment((2, 2))   # tA_1, tA_2, Tr(A_1^2)/d
    (1.0, 0.25, 2.0)
    """

    def __init__(self, blocks: Sequence[GaussianPair]) -> None:
        blocks = list(blocks)
        for k, b in enumerate(blocks):
            if not isinstance(b, GaussianPair):
                raise TypeError(f"blocks[{k}] must come from gaussian_pair(...)")
        if not blocks:
            raise ValueError("blocks must hold at least one gaussian_pair")
        self.blocks = blocks
        self._cached = lru_cache(maxsize=None)(self._moment)

    @property
    def means(self) -> np.ndarray:
        return np.array([b.mean for b in self.blocks])

    def moment(self, word: Sequence[int]) -> float:
        """The limit of ``Tr(Z_1 ... Z_w)/d`` for a word over ``{M_k, M_k^T, A_k, B_k}``."""
        return self._cached(tuple(int(a) for a in word))

    def _moment(self, word: tuple[int, ...]) -> float:
        for a in word:
            if not 0 <= a < 4 * len(self.blocks):
                raise ValueError(f"word letter {a} out of range 0..{4 * len(self.blocks) - 1}")
        g = _ginibre_letters(word)
        n2 = len(g)
        if n2 == 0:
            return 1.0
        if n2 > 24:
            raise ValueError(f"moments are enumerated up to words of length 12, got {len(word)}")
        total = 0.0
        for pairing in _nc_pairings(n2):
            ok = True
            for i, j in pairing:
                if g[i][0] != g[j][0] or g[i][1] == g[j][1]:
                    ok = False
                    break
            if not ok:
                continue
            # slots: letter i runs from slot i to slot i + 1 (cyclic); union the paired ones
            parent = list(range(n2))

            def find(a: int) -> int:
                while parent[a] != a:
                    parent[a] = parent[parent[a]]
                    a = parent[a]
                return a
            for i, j in pairing:
                parent[find(i)] = find((j + 1) % n2)
                parent[find((i + 1) % n2)] = find(j)
            weight = 1.0
            inner = {}
            for i, j in pairing:
                mat, tr = g[i]
                b = self.blocks[mat // 2]
                s = b.scale_u if mat % 2 == 0 else b.scale_v
                weight *= s * s / b.aspect  # entry variance scale^2 / (aspect d), times d
                # the d_k-dimensional slot of an untransposed factor is its column slot
                inner[find((i + 1) % n2 if not tr else i)] = b.aspect
            if len({find(a) for a in range(n2)}) != n2 // 2 + 1:
                continue  # not planar: O(1/d)
            for asp in inner.values():  # each inner cycle sums over d_k = aspect d values
                weight *= asp
            total += weight
        return total

    def __call__(self, words: Sequence[Sequence[int]]) -> np.ndarray:
        return np.array([self.moment(tuple(w)) for w in words], dtype=float)

    def slow_state(self, words: Sequence[Sequence[int]]) -> SlowState:
        """A :class:`SlowState` of the limit moments over ``words`` (e.g. a hierarchy's
        ``.words``) and the means: the d -> infinity start of the truncated hierarchy."""
        words = [tuple(w) for w in words]
        return SlowState(words=words, mu=self(words), m0=self.means, d=None)


class DiagonalLaw:
    """Jointly diagonal pairs (the commuting case): ``U_k = diag(u[k])``,
    ``V_k = diag(v[k])`` over ``n`` nodes with ``weights`` (summing to 1), ``means``
    the ``m_k`` (default 0). A quadrature rule of a continuous joint law of the
    diagonal entries, or ``n`` equal weights for ``d = n`` diagonal pairs exactly.

    The letters ``M_k = U_k V_k^T``, ``A_k = U_k U_k^T``, ``B_k = V_k V_k^T`` (eq. 26) are
    then diagonal: ``Tr(Z_1 ... Z_w) / d = sum_i w_i z_1(i) ... z_w(i)``.

    Examples
    --------
    >>> import attndyn
    >>> law = attndyn.DiagonalLaw(u=[[1.0, 2.0]], v=[[1.0, 0.5]])   # K = 1, two equal nodes
    >>> law.K, law.moment((0,)), law.moment((2,))   # Tr(M)/d = mean(u v), Tr(A)/d = mean(u^2)
    (1, 1.0, 2.5)
    """

    def __init__(self, u: ArrayLike, v: ArrayLike, weights: ArrayLike | None = None,
                 means: ArrayLike | None = None) -> None:
        u = np.array(u, dtype=float, ndmin=2)
        v = np.array(v, dtype=float, ndmin=2)
        if u.ndim != 2 or u.shape != v.shape or u.shape[1] < 1:
            raise ValueError(f"u and v must be K x n arrays of the same shape, got {u.shape}, "
                             f"{v.shape}")
        K, n = u.shape
        w = np.full(n, 1.0 / n) if weights is None else np.array(weights, dtype=float).ravel()
        if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"weights must be {n} finite numbers >= 0")
        if abs(w.sum() - 1.0) > 1e-12:
            raise ValueError(f"weights must sum to 1, got {w.sum():.15g}")
        m = np.zeros(K) if means is None else np.array(means, dtype=float).ravel()
        if m.shape != (K,):
            raise ValueError(f"means must hold K = {K} numbers, got shape {m.shape}")
        for nm, a in (("u", u), ("v", v), ("means", m)):
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{nm} must be finite")
        self.u, self.v, self.weights, self.means = u, v, w, m

    @property
    def K(self) -> int:
        return int(self.u.shape[0])

    def letter_values(self, u: np.ndarray | None = None, v: np.ndarray | None = None
                      ) -> np.ndarray:
        """Per-node values of the ``4K`` letters (``M, M^T, A, B`` of each index)."""
        u = self.u if u is None else u
        v = self.v if v is None else v
        vals = np.empty((4 * u.shape[0], u.shape[1]))
        vals[0::4] = vals[1::4] = u * v
        vals[2::4] = u * u
        vals[3::4] = v * v
        return vals

    def moment(self, word: Sequence[int]) -> float:
        return float(_node_traces(self.letter_values(), self.weights, [tuple(word)])[0])

    def __call__(self, words: Sequence[Sequence[int]]) -> np.ndarray:
        return _node_traces(self.letter_values(), self.weights, [tuple(w) for w in words])

    def slow_state(self, words: Sequence[Sequence[int]]) -> SlowState:
        words = [tuple(w) for w in words]
        return SlowState(words=words, mu=self(words), m0=self.means.copy(), d=None)

    def pairs(self) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        """The diagonal pairs ``(diag u_k, diag v_k)`` (equal weights: the finite-d state)."""
        return [(np.diag(self.u[k]), np.diag(self.v[k])) for k in range(self.K)]


def law_of_pairs(model: UntiedModelLike, pairs: Sequence[Any], means: str = "zero") -> UntiedLaw:
    """The Gaussian law the pairs were drawn from when their entries are i.i.d. centred
    Gaussian (``gaussian_init``): scales from the measured ``tA_k, tB_k``, aspects
    ``d_k/d``; ``means="zero"`` (the ``O(d^-1/2)`` means of such pairs vanish in the
    limit) or ``"pairs"`` (the measured ``m_k(0)``: they select the root ``m*`` the fast
    phase of these pairs reaches)."""
    if means not in ("zero", "pairs"):
        raise ValueError(f"means must be 'zero' or 'pairs', got {means!r}")
    pairs = model.check_factors(pairs, "pairs")
    d = pairs[0][0].shape[0]
    m0 = (model.order_parameters(pairs)["m"] if means == "pairs"
          else np.zeros(len(pairs)))
    return UntiedLaw([gaussian_pair(math.sqrt(np.sum(U * U) / d), U.shape[1] / d,
                                    float(m), scale_v=math.sqrt(np.sum(V * V) / d))
                      for (U, V), m in zip(pairs, m0)])


def limit_theory(model: UntiedModelLike, pairs: Sequence[Any], t_eval: ArrayLike, *,
                 order: int = 2, law: UntiedLaw | DiagonalLaw | None = None,
                 **kwargs: Any) -> LimitTrajectory:
    """``compare(..., theory="limit")``: :func:`limit_flow` from ``law`` or, by default,
    from :func:`law_of_pairs` of the SGD's initial pairs (means 0, the law's)."""
    given = law is not None
    use = law if law is not None else law_of_pairs(model, pairs)
    r = limit_flow(model, use, t_eval, order=order, **kwargs)
    what = ("DiagonalLaw" if isinstance(use, DiagonalLaw) else
            [vars(b) for b in use.blocks])
    r.message += f"; law {what}" + ("" if given else " (from the initial pairs)")
    return r


def _node_traces(vals: np.ndarray, w: np.ndarray, words: Sequence[Sequence[int]]
                 ) -> NDArray[np.float64]:
    out = np.empty(len(words))
    for i, wd in enumerate(words):
        prod = np.ones(w.size)
        for a in wd:
            prod = prod * vals[a]
        out[i] = prod @ w
    return out


# ---------------------------------------------------------------------------
# rows (the names of untied_flow)

def _row_names(model: UntiedModelLike, words: Sequence[Sequence[int]]) -> list[str]:
    K = model.K
    return ([su.word_name(w, K) for w in words] + [obs("m", k) for k in range(K)]
            + [obs("tA", k) for k in range(K)] + [obs("tB", k) for k in range(K)]
            + [obs("q1", k, l) for k in range(K) for l in range(K)]
            + [obs("q2", k, l) for k in range(K) for l in range(K)])


def _words(model: UntiedModelLike, order: int, words: Sequence[Sequence[int]] | None
           ) -> list[tuple[int, ...]]:
    alph = su.untied_alphabet(model.K)
    if words is None:
        return [tuple(w) for w in model.words(su.check_order(order))]
    return [canonical(alph.check_word(w, "words"), alph) for w in words]


def _result(model: UntiedModelLike, words: Sequence[Sequence[int]], t: ArrayLike, y: np.ndarray,
            err: np.ndarray, status: int, message: str, params: dict[str, Any],
            diag: dict[str, Any], seed: Any = None) -> LimitTrajectory:
    diag = dict(diag)
    diag["error"] = err
    return LimitTrajectory(t=np.asarray(t, float), y=y, names=_row_names(model, words),
                           words=[tuple(w) for w in words], kind="untied_limit", params=params,
                           seed=seed, status=status, message=message, diagnostics=diag,
                           inv=su.untied_alphabet(model.K).inv)


# ---------------------------------------------------------------------------
# commuting case

def _node_run(model: UntiedModelLike, law: DiagonalLaw, t_eval: np.ndarray,
              words: Sequence[Sequence[int]], rtol: float, atol: float, newton_tol: float,
              blowup: float) -> tuple[np.ndarray, np.ndarray | None, int, str, CriticalMean,
                                      np.ndarray | None]:
    """The per-node ODE of the module docstring; ``(t, rows, status, message, root,
    node states)``, the states ``(2 n_trainable n, n_t)`` (``u`` then ``v`` of the trainable
    indices)."""
    from scipy.integrate import solve_ivp
    th = coefficients(model)
    K, n = law.u.shape
    tr = list(model.trainable)
    w = law.weights
    gamma = model.weight_decay
    st: dict[str, Any] = {"m": None, "fail": False}

    def low(u: np.ndarray, v: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        s = u * v
        q = (s * w) @ s.T
        return s, q, (u * u) @ w, (v * v) @ w

    s0, q0, tA0, tB0 = low(law.u, law.v)
    cm = critical_mean(model, dict(m=law.means, tA=tA0, tB=tB0, q1=q0, q2=q0), warn=True)
    if not cm.success:
        return t_eval[:0], None, ROOT_FAILED, f"root search failed: {cm.message}", cm, None
    st["m"] = cm.m.copy()

    def unpack(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u, v = law.u.copy(), law.v.copy()
        Y = y.reshape(2, len(tr), n)
        u[tr], v[tr] = Y[0], Y[1]
        return u, v

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        u, v = unpack(y)
        s, q, tA, tB = low(u, v)
        m, ok, _, _ = newton(th, st["m"], q, q, tr, tol=newton_tol)
        if not ok:
            st["fail"] = True
            return np.full(y.size, np.nan)
        st["m"] = m
        g = th.gradients(m, q, q)
        p = (g["a1"] + g["a2"])[tr] @ s                       # p_k on every node
        r = u[tr] ** 2 + v[tr] ** 2
        beta = -2.0 * ((p * r) @ w) / (tA[tr] + tB[tr])       # eqs. (27), (30)
        c = beta[:, None] + 2.0 * p
        return np.concatenate([(-c * v[tr] - gamma * u[tr]).ravel(),
                               (-c * u[tr] - gamma * v[tr]).ravel()])

    def blow(t: float, y: np.ndarray) -> float:
        return blowup - float(np.abs(y).max())
    blow.terminal = True  # type: ignore[attr-defined]  # solve_ivp's event attribute

    y0 = np.concatenate([law.u[tr].ravel(), law.v[tr].ravel()])
    if tr and t_eval[-1] > 0:
        from attndyn.numeric.attention.odesolve import deadline, budgeted, check_horizon_work
        if deadline() is None:  # no time limit: refuse a horizon of unbounded work
            check_horizon_work(rhs, y0, float(t_eval[-1]), "DOP853", "untied limit flow")
        with np.errstate(all="ignore"):
            sol = solve_ivp(budgeted(rhs), (0.0, float(t_eval[-1])), y0, method="DOP853",
                            t_eval=t_eval,
                            rtol=rtol, atol=atol, events=blow)
        ts, Y = sol.t, sol.y
        good = np.all(np.isfinite(Y), axis=0)
        n_ok = good.size if good.all() else int(np.argmin(good))
        ts, Y = ts[:n_ok], Y[:, :n_ok]
        status = 0 if (sol.status == 0 and n_ok == t_eval.size) else (
            ROOT_FAILED if st["fail"] else -3 if sol.status == 1 or n_ok < sol.t.size else -1)
        message = "success" if status == 0 else (
            f"stopped at tau = {ts[-1] if ts.size else 0.0:.4g}: "
            + ("the root m*(q) was lost (Newton failed)" if status == ROOT_FAILED else sol.message))
    else:
        ts, Y, status, message = t_eval.copy(), np.repeat(y0[:, None], t_eval.size, 1), 0, "success"
    rows = np.empty((len(_row_names(model, words)), ts.size))
    m = cm.m.copy()
    for j in range(ts.size):
        u, v = unpack(Y[:, j])
        s, q, tA, tB = low(u, v)
        m, ok, _, _ = newton(th, m, q, q, tr, tol=newton_tol)
        vals = law.letter_values(u, v)
        rows[:, j] = np.concatenate([_node_traces(vals, w, words), m if ok else np.full(K, np.nan),
                                     tA, tB, q.ravel(), q.ravel()])
    return ts, rows, status, message, cm, Y


def commuting_limit(model: UntiedModelLike, law: DiagonalLaw, t_eval: ArrayLike, *,
                    order: int = 2, words: Sequence[Sequence[int]] | None = None,
                    rtol: float = 1e-12,
                    atol: float = 1e-14, newton_tol: float = 1e-13,
                    blowup: float = 1e100) -> LimitTrajectory:
    """Exact ``d -> infinity`` solution for a :class:`DiagonalLaw` (module docstring): the
    per-node ODE on the law's nodes, means slaved to ``m*(q)``. The error estimate is the
    change under ``rtol/100`` (at least ``3e-14``), ``atol/100``, plus ``10 rtol`` relative."""
    t_eval = check_t_eval(t_eval, "t_eval")
    if not isinstance(check_law(model, law), DiagonalLaw):
        raise TypeError("commuting_limit needs a DiagonalLaw")
    words = _words(model, order, words)
    ts, rows, status, msg, cm, _ = _node_run(model, law, t_eval, words, rtol, atol,
                                             newton_tol, blowup)
    params = model.params_dict()
    params.update({"method": "commuting", "nodes": int(law.u.shape[1]), "rtol": rtol,
                   "atol": atol, "time": "tau = eta * n / d (slow)"})
    diag = {"method": "commuting", "root": cm.label, "order_in_1_over_d": None}
    if rows is None:
        return _result(model, words, ts, np.zeros((len(_row_names(model, words)), 0)),
                       np.zeros((len(_row_names(model, words)), 0)), status, msg, params, diag)
    err = np.full(rows.shape, np.nan)
    if status == 0:
        ts2, rows2, st2, _, _, _ = _node_run(model, law, t_eval, words, max(rtol / 100, 3e-14),
                                          atol / 100, newton_tol, blowup)
        if st2 == 0:
            err = np.abs(rows - rows2) + 10 * rtol * np.maximum(1.0, np.abs(rows))
    message = (f"success: exact commuting-case limit (per-node slaved flow on "
               f"{law.u.shape[1]} nodes), max error estimate "
               f"{np.nanmax(err) if err.size else 0.0:.2g}") if status == 0 else \
        f"commuting limit failed: {msg}"
    return _result(model, words, ts, rows, err, status, message, params, diag)


# ---------------------------------------------------------------------------
# Gaussian law: deterministic equivalents

def _factor(scale: float, d: int, r: int, rng: np.random.Generator,
            rotate_left: bool) -> np.ndarray:
    """``d x r`` factor with the Marchenko-Pastur bin-mean singular values of i.i.d.
    ``N(0, scale^2/r)`` entries between Haar rotations (the left one optional)."""
    k = min(d, r)
    if r >= d:  # eigenvalues of U U^T: wishart(scale sqrt(d/r), r/d) in d dimensions
        lam = mp_bin_means(scale * math.sqrt(d / r), r / d, d)
    else:       # eigenvalues of U^T U: wishart(scale, d/r) in r dimensions, all non-zero
        lam = mp_bin_means(scale, d / r, r)
    F: np.ndarray = np.zeros((d, r))
    F[np.arange(k), np.arange(k)] = np.sqrt(np.maximum(lam[:k], 0.0))
    F = F @ haar_orthogonal(r, rng).T
    if rotate_left:
        F = haar_orthogonal(d, rng) @ F
    return F


def equivalent_pairs(model: UntiedModelLike, law: UntiedLaw, d: int, rng: RngLike
                     ) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """Pairs of size ``d`` for a :class:`UntiedLaw`: every factor with the bin-mean
    singular values between independent Haar rotations (``U_0``'s left rotation is the
    identity: the flow is invariant under a common rotation), and ``V_k`` shifted by
    ``c U_k`` (``c = O(1/d)``) so that ``Tr(U_k V_k^T)/sqrt(d)`` is the law's mean."""
    gen = np.random.default_rng(rng)
    out = []
    for k, b in enumerate(law.blocks):
        r = max(1, int(round(b.aspect * d)))
        U = _factor(b.scale_u, d, r, gen, rotate_left=(k > 0))
        V = _factor(b.scale_v, d, r, gen, rotate_left=True)
        c = (b.mean * math.sqrt(d) - float(np.sum(U * V))) / float(np.sum(U * U))
        out.append((U, V + c * U))
    return out


def _equivalents_run(model: UntiedModelLike, law: UntiedLaw, t_eval: np.ndarray,
                     words: Sequence[Sequence[int]], sizes: Sequence[int], rotations: int,
                     seed: RngLike, rtol: float, atol: float, max_dim: int
                     ) -> tuple[tuple[np.ndarray, np.ndarray, list[np.ndarray]] | None, str,
                                set[str]]:
    for d in sizes:
        if d > max_dim:
            raise ValueError(f"sizes: d = {d} exceeds max_dim = {max_dim}")
    kids = resolve_seed(seed).spawn(len(sizes))
    means, ses, per_size = [], [], []
    notes: set[str] = set()
    for d, kid in zip(sizes, kids):
        runs: Any = []
        for r_ss in kid.spawn(rotations):
            pairs = equivalent_pairs(model, law, d, np.random.default_rng(r_ss))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fo = untied_flow(model, pairs, t_eval, mode="slaved", words=words, rtol=rtol,
                                 atol=atol)
            notes.update(str(c.message).split(":")[0] for c in caught)
            if fo.status != 0 or fo.t.size != t_eval.size:
                return None, f"slaved flow at d = {d} failed: {fo.message}", notes
            runs.append(fo.y)
        runs = np.array(runs)
        means.append(runs.mean(axis=0))
        ses.append(runs.std(axis=0, ddof=1) / math.sqrt(rotations) if rotations > 1
                   else np.zeros_like(runs[0]))
        per_size.append(runs)
    return (np.array(means), np.array(ses), per_size), "", notes


# ---------------------------------------------------------------------------
# entry point

def check_law(model: UntiedModelLike, law: object) -> UntiedLaw | DiagonalLaw:
    if isinstance(law, DiagonalLaw):
        if law.K != model.K:
            raise ValueError(f"law must have K = {model.K} indices, got {law.K}")
        return law
    if isinstance(law, UntiedLaw):
        if len(law.blocks) != model.K:
            raise ValueError(f"law must have K = {model.K} blocks, got {len(law.blocks)}")
        return law
    raise TypeError("law must be an UntiedLaw (gaussian_pair blocks) or a DiagonalLaw")


def limit_flow(model: UntiedModelLike, law: UntiedLaw | DiagonalLaw, t_eval: ArrayLike,
               sizes: Sequence[int] | None = None, rtol: float = 1e-9, atol: float = 1e-12, *,
               order: int = 2, words: Sequence[Sequence[int]] | None = None,
               rotations: int = 2, seed: RngLike = 0, method: str = "auto",
               max_dim: int = 2048, raise_on_failure: bool = False,
               time_limit: float | None = None) -> LimitTrajectory:
    """The ``d -> infinity`` slow trajectory of an :class:`~attndyn.UntiedModel` (the slow
    hierarchy, eqs. 31-32, closed by the fast manifold ``m = m*(q)`` of eq. 29) from a law.

    ``law``: a :class:`DiagonalLaw` (commuting, exact: ``method="commuting"``) or an
    :class:`UntiedLaw` of :func:`gaussian_pair` blocks (free: ``method="equivalents"``,
    Richardson over ``sizes``, default ``(200, 400)``, ``rotations`` Haar draws each,
    seeded by ``seed``). ``"auto"`` picks by the law. ``t_eval`` is the slow time
    ``tau = eta n / d``. Rows: the words up to ``order`` (or ``words``), then ``m_k``,
    ``tA_k``, ``tB_k``, ``q1_kl``, ``q2_kl`` (the names of ``untied_flow``); ``.error``
    per row and time (module docstring). ``time_limit``: wall-clock seconds
    (``time.monotonic``) for the whole computation; reaching it gives status -4.
    """
    from attndyn.numeric.attention.odesolve import TimeLimitReached, time_budget
    kw: dict[str, Any] = dict(sizes=sizes, rtol=rtol, atol=atol, order=order, words=words,
                              rotations=rotations, seed=seed, method=method,
                              max_dim=max_dim, raise_on_failure=raise_on_failure)
    with time_budget(time_limit):
        try:
            return _limit_flow(model, law, t_eval, **kw)
        except TimeLimitReached as exc:
            wl = _words(model, order, words)
            n_rows = len(_row_names(model, wl))
            res = _result(model, wl, np.zeros(0), np.zeros((n_rows, 0)), np.zeros((n_rows, 0)),
                          -4, f"untied limit flow: wall-clock limit of {exc.limit:.3g} s "
                          "reached: raise time_limit or shorten the horizon",
                          model.params_dict(), {"method": method}, seed_rec(seed))
            if raise_on_failure:
                raise IntegrationError(res.message) from None
            return res


def _limit_flow(model: UntiedModelLike, law: UntiedLaw | DiagonalLaw, t_eval: ArrayLike, *,
                sizes: Sequence[int] | None, rtol: float, atol: float, order: int,
                words: Sequence[Sequence[int]] | None, rotations: int, seed: RngLike,
                method: str, max_dim: int, raise_on_failure: bool) -> LimitTrajectory:
    t_eval = check_t_eval(t_eval, "t_eval")
    law = check_law(model, law)
    if method not in ("auto", "commuting", "equivalents"):
        raise ValueError(f"method must be 'auto', 'commuting' or 'equivalents', got {method!r}")
    rtol = check_pos_float(rtol, "rtol")
    atol = check_pos_float(atol, "atol")
    if method == "auto":
        method = "commuting" if isinstance(law, DiagonalLaw) else "equivalents"
    if (method == "commuting") != isinstance(law, DiagonalLaw):
        raise ValueError(f"method={method!r} does not fit a {type(law).__name__}: 'commuting' "
                         "takes a DiagonalLaw, 'equivalents' an UntiedLaw")
    if method == "commuting":
        assert isinstance(law, DiagonalLaw)  # checked above
        res = commuting_limit(model, law, t_eval, order=order, words=words,
                              rtol=min(rtol, 1e-12), atol=min(atol, 1e-14))
        if raise_on_failure and res.status != 0:
            raise IntegrationError(res.message)
        return res
    assert isinstance(law, UntiedLaw)  # checked above
    rotations = check_int(rotations, "rotations", 1)
    max_dim = check_int(max_dim, "max_dim", 2)
    words = _words(model, order, words)
    sizes = check_sizes(sizes)
    out, msg, notes = _equivalents_run(model, law, t_eval, words, sizes, rotations, seed, rtol,
                                       atol, max_dim)
    params = model.params_dict()
    params.update({"method": "equivalents", "sizes": sizes, "rotations": rotations,
                   "rtol": rtol, "atol": atol, "time": "tau = eta * n / d (slow)",
                   "law": [vars(b) for b in law.blocks]})
    n_rows = len(_row_names(model, words))
    if out is None:
        res = _result(model, words, t_eval[:0], np.zeros((n_rows, 0)), np.zeros((n_rows, 0)),
                      -3, f"limit flow failed: {msg}", params, {"method": "equivalents"},
                      seed_rec(seed))
        if raise_on_failure:
            raise IntegrationError(res.message)
        return res
    means, ses, per_size = out
    Y, err, stat, sys_, wts = extrapolate(means, ses, sizes, rotations)
    diag = {"method": "equivalents", "sizes": list(sizes), "means": means,
            "error_statistical": stat, "error_extrapolation": sys_, "richardson_weights": wts,
            "warnings": sorted(notes), "order_in_1_over_d": None}
    message = (f"success: d -> infinity by Richardson over sizes {sizes} ({rotations} Haar "
               f"rotation(s) each), max error estimate {err.max():.2g}"
               + ("; the slaved flows warned: " + "; ".join(sorted(notes)) if notes else ""))
    return _result(model, words, t_eval, Y, err, 0, message, params, diag, seed_rec(seed))


# ---------------------------------------------------------------------------
# continuous commuting laws and the spectral density of S_k(tau)

#: a branch map or a density: an array of ``x`` to numbers
_Branch = Callable[[np.ndarray], Any]


class BranchLaw(DiagonalLaw):
    """A continuous commuting law: a parameter ``x`` with density ``density`` on
    ``interval`` and branches ``(prob, u_of, v_of)``, each mapping an array of ``x`` to the
    ``K x len(x)`` diagonal entries of ``U_k``, ``V_k``. As a :class:`DiagonalLaw` it is the
    Gauss-Legendre rule of ``nodes`` points per branch; :func:`spectral_density` also
    follows zero-weight tracers through the maps (built by :func:`branch_law`)."""

    def __init__(self, branches: list[tuple[float, _Branch, _Branch]],
                 interval: tuple[float, float], density: _Branch | None, nodes: int,
                 means: ArrayLike | None) -> None:
        self.branches, self.interval, self.density = branches, interval, density
        a, b = interval
        g, gw = np.polynomial.legendre.leggauss(nodes)
        x = (a + b) / 2 + (b - a) / 2 * g
        wx = gw * (b - a) / 2 * self._dens(x)
        wx = wx / wx.sum()
        u, v, w = [], [], []
        for pr, uf, vf in branches:
            uu, vv = self._eval(uf, x), self._eval(vf, x)
            u.append(uu)
            v.append(vv)
            w.append(pr * wx)
        super().__init__(np.concatenate(u, axis=1), np.concatenate(v, axis=1),
                         np.concatenate(w), means)

    def _dens(self, x: np.ndarray) -> np.ndarray:
        if self.density is None:
            return np.ones_like(x)
        p = np.asarray(self.density(x), dtype=float)
        if p.shape != x.shape or not np.all(np.isfinite(p)) or np.any(p < 0):
            raise ValueError("density must map an array of x to finite numbers >= 0 of the "
                             "same shape")
        return p

    @staticmethod
    def _eval(f: _Branch, x: np.ndarray) -> np.ndarray:
        out = np.array(f(x), dtype=float, ndmin=2)
        if out.ndim != 2 or out.shape[1] != x.size or not np.all(np.isfinite(out)):
            raise ValueError(f"a branch map must return K x {x.size} finite numbers for "
                             f"{x.size} values of x, got shape {out.shape}")
        return out

    def cell_masses(self, xs: np.ndarray) -> NDArray[np.float64]:
        """The law's mass of ``[xs[j], xs[j+1]]`` (5-point Gauss-Legendre per cell,
        normalised; exact for the uniform density)."""
        g, gw = np.polynomial.legendre.leggauss(5)
        mid, half = (xs[1:] + xs[:-1]) / 2, (xs[1:] - xs[:-1]) / 2
        m = (self._dens(mid[:, None] + half[:, None] * g[None, :]) * gw).sum(axis=1) * half
        masses: NDArray[np.float64] = m / m.sum()
        return masses


def branch_law(branches: Sequence[tuple[float, _Branch, _Branch]],
               interval: tuple[float, float], *, density: _Branch | None = None,
               nodes: int = 40, means: ArrayLike | None = None) -> BranchLaw:
    """A continuous commuting law (:class:`BranchLaw`): ``x`` on ``interval = (a, b)`` with
    ``density`` (a callable, default uniform) and ``branches = [(prob, u_of, v_of), ...]``
    (probabilities summing to 1; ``u_of(x)``, ``v_of(x)`` give the ``K x len(x)`` diagonal
    entries). ``nodes``: Gauss-Legendre points per branch for the limit flow."""
    try:
        a, b = (float(z) for z in interval)
    except (TypeError, ValueError):
        raise TypeError("interval must be two numbers (a, b)") from None
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        raise ValueError(f"interval must be finite with a < b, got {interval!r}")
    nodes = check_int(nodes, "nodes", 2, 10_000)
    branches = list(branches)
    if not branches:
        raise ValueError("branches must hold at least one (prob, u_of, v_of)")
    for i, br in enumerate(branches):
        if not (isinstance(br, (tuple, list)) and len(br) == 3 and callable(br[1])
                and callable(br[2])):
            raise TypeError(f"branches[{i}] must be (prob, u_of, v_of) with callables")
    probs = np.array([float(br[0]) for br in branches])
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or abs(probs.sum() - 1) > 1e-12:
        raise ValueError(f"branch probabilities must be >= 0 and sum to 1, got {probs.tolist()}")
    if density is not None and not callable(density):
        raise TypeError("density must be a callable of x or None (uniform)")
    return BranchLaw([(float(p), br[1], br[2]) for p, br in zip(probs, branches)], (a, b),
                     density, nodes, means)


SPECTRA = ("symmetric", "singular")


def _spectrum_values(S: np.ndarray, spectrum: str) -> np.ndarray:
    """Eigenvalues of ``(S + S^T)/2`` or singular values of ``S``, ascending."""
    if spectrum == "symmetric":
        return np.linalg.eigvalsh(0.5 * (S + S.T))
    return np.sort(np.linalg.svd(S, compute_uv=False))


def _commuting_spectrum(model: UntiedModelLike, law: BranchLaw, t_eval: np.ndarray, letter: int,
                        spectrum: str, tracers: int, rtol: float, atol: float, blowup: float
                        ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, int] | None,
                                   int, str]:
    """Tracer nodes of zero weight through the per-node flow; the push-forward of the law of
    ``x`` by ``x -> s_k(tau, x)`` cell by cell (see :func:`spectral_density`)."""
    a, b = law.interval
    xs = np.linspace(a, b, tracers)
    mass = law.cell_masses(xs)
    u, v, w = [law.u], [law.v], [law.weights]
    for _, uf, vf in law.branches:
        u.append(law._eval(uf, xs))
        v.append(law._eval(vf, xs))
        w.append(np.zeros(xs.size))
    aug = DiagonalLaw(np.concatenate(u, axis=1), np.concatenate(v, axis=1),
                      np.concatenate(w), law.means)
    ts, rows, status, msg, cm, Y = _node_run(model, aug, t_eval, [], rtol, atol, 1e-13, blowup)
    if rows is None or Y is None:  # both None together (a failed root search)
        return ts, None, status, msg
    tr = list(model.trainable)
    n0, n = law.u.shape[1], aug.u.shape[1]
    out = []
    for j in range(ts.size):
        uu, vv = aug.u.copy(), aug.v.copy()
        Yj = Y[:, j].reshape(2, len(tr), n)
        uu[tr], vv[tr] = Yj[0], Yj[1]
        sv = (uu[letter] * vv[letter])[n0:]
        out.append(np.abs(sv) if spectrum == "singular" else sv)
    mass_all = np.concatenate([pr * mass for pr, _, _ in law.branches])
    return ts, (np.array(out), mass_all, xs.size), status, msg


def _equivalents_spectrum(model: UntiedModelLike, law: UntiedLaw, t_eval: np.ndarray, letter: int,
                          spectrum: str, sizes: Sequence[int], rotations: int, seed: RngLike,
                          levels: int, rtol: float, atol: float, max_dim: int
                          ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, str,
                                     set[str]]:
    """Quantiles of the spectrum of ``S_letter(tau)`` along the slaved flows of the
    deterministic equivalents, averaged over rotations, Richardson in ``1/d``."""
    p = quantile_levels(levels)
    kids = resolve_seed(seed).spawn(len(sizes))
    means, ses = [], []
    notes: set[str] = set()
    for d, kid in zip(sizes, kids):
        if d > max_dim:
            raise ValueError(f"sizes: d = {d} exceeds max_dim = {max_dim}")
        runs: Any = []
        for r_ss in kid.spawn(rotations):
            pairs = equivalent_pairs(model, law, d, np.random.default_rng(r_ss))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fo = untied_flow(model, pairs, t_eval, mode="slaved", words=[], rtol=rtol,
                                 atol=atol, keep_pairs=True)
            notes.update(str(c.message).split(":")[0] for c in caught)
            if fo.status != 0 or fo.t.size != t_eval.size:
                return None, f"slaved flow at d = {d} failed: {fo.message}", notes
            q = []
            for st in fo.diagnostics["pairs"]:
                U, V = st[letter]
                ev = _spectrum_values(U @ V.T, spectrum)
                q.append(spectrum_quantiles(ev, p))
            runs.append(np.array(q).T)                  # (levels + 2, n_t)
        runs = np.array(runs)
        means.append(runs.mean(axis=0))
        ses.append(runs.std(axis=0, ddof=1) / math.sqrt(rotations) if rotations > 1
                   else np.zeros_like(runs[0]))
    return (p, np.array(means), np.array(ses)), "", notes


def spectral_density(model: UntiedModelLike, law: UntiedLaw | DiagonalLaw, t_eval: ArrayLike, *,
                     letter: int | None = None,
                     spectrum: str = "symmetric", grid: ArrayLike | None = None,
                     n_grid: int = 400, tracers: int = 2001,
                     sizes: Sequence[int] | None = None, rotations: int = 2,
                     levels: int = 200, seed: RngLike = 0, extrapolation: str = "largest",
                     rtol: float | None = None,
                     atol: float | None = None, max_dim: int = 2048,
                     blowup: float = 1e100) -> SpectralDensity:
    """The ``d -> infinity`` spectral law of ``S_k(tau) = U_k V_k^T`` along the untied slow
    flow (the slaved flow, eqs. 29-32, as in :func:`limit_flow`).

    Which spectrum. ``S_k`` is not symmetric, so its eigenvalues are complex and carry
    none of the observables. The pre-activations are quadratic forms ``x_i^T S_k x_j``:
    their law (Theorem 1, its untied form) depends on ``m_k = Tr S_k / sqrt d`` and on
    ``q1_kl = Tr(S_k S_l^T)/d``, ``q2_kl = Tr(S_k S_l)/d``, i.e. on the Gram matrices
    ``(q1 + q2)/2 = Tr(H_k H_l)/d`` of the symmetric parts ``H_k = (S_k + S_k^T)/2`` and
    ``(q1 - q2)/2`` of the antisymmetric parts; at ``L = 1`` (``i = j``) only ``H_k``
    enters. The default ``spectrum="symmetric"`` is the eigenvalue law of ``H_k``: real,
    with moments ``int y drho = m_k / sqrt d -> mu(M_k)`` and
    ``int y^2 drho = (q1_kk + q2_kk)/2``, and in the commuting case ``H_k = S_k``, the
    analogue of the tied ``S_k`` spectrum (:mod:`..tied.spectral`). ``"singular"``: the
    singular values of ``S_k`` (``int y^2 drho = q1_kk``), which forget the sign of the
    alignment (``S`` and ``-S`` share them).

    ``law``: a :class:`BranchLaw` (commuting, exact: zero-weight tracers on ``tracers``
    equally spaced values of ``x`` ride the per-node flow with the law's quadrature nodes,
    ``s_k(tau, x) = u_k v_k`` is taken linear between tracers and the law of ``x`` pushed
    forward cell by cell, so the CDF is exact up to ``O(h^2)`` in the tracer spacing ``h``
    and any number of branches, monotone or not, is allowed), or an :class:`UntiedLaw`
    (free: the spectrum of the deterministic equivalents' slaved flows at ``sizes``
    (default ``(200, 400)``), its quantiles at ``levels`` equally spaced probabilities
    (plus the two edges) averaged over ``rotations`` Haar draws. ``extrapolation="largest"``
    (default) takes the largest size, with the stated error ``|Q(d_2) - Q(d_1)| d_1 /
    (d_2 - d_1)`` (the ``O(1/d)`` remainder the change between the two largest sizes
    implies) plus the Student quantile times the standard error over rotations;
    ``"richardson"`` extrapolates in ``1/d`` with :func:`..limitcore.extrapolate`'s error.
    Measured at ``tau = 0`` (h1, standard Gaussian pairs, sizes 200 and 400, 4 rotations)
    against 8 draws at ``d = 3000``: KS 0.0023 for ``"largest"``, 0.0043 for
    ``"richardson"``: the eigenvalue quantiles of one rotation fluctuate by ``O(1/d)``, as
    much as their bias, and the edge quantiles move like ``d^(-2/3)``, so Richardson's
    weights amplify more than they remove. The stated error per quantile is in
    ``diagnostics["quantile_error"]`` and, times the density, in CDF units in
    ``diagnostics["cdf_error"]``; the density is ``dp/dQ`` from quantiles
    5 levels apart. There is no closed free-probability formula along the flow: the
    vector field mixes ``U_k``, ``V_k`` and the teacher nonlinearly, so the equivalents
    are the free case's solver, as in :func:`limit_flow`.) A :class:`DiagonalLaw` of
    finitely many nodes has a discrete spectrum and is refused (use :func:`branch_law`).

    ``letter``: which ``S_k`` (default the first trainable index); ``t_eval``: slow time
    ``tau``. Returns a :class:`SpectralDensity`: ``density`` on ``grid`` (default
    ``n_grid`` points spanning the support at every time), ``cdf(y, t_index)``; compare with
    finite-``d`` eigenvalues by :func:`ks_distance` or :func:`wasserstein_distance`.
    """
    t_eval = check_t_eval(t_eval, "t_eval")
    law = check_law(model, law)
    if spectrum not in SPECTRA:
        raise ValueError(f"spectrum must be one of {SPECTRA}, got {spectrum!r}")
    tr = list(model.trainable)
    letter = (tr[0] if tr else 0) if letter is None else check_int(letter, "letter", 0,
                                                                     model.K - 1)
    n_grid = check_int(n_grid, "n_grid", 2, 100_000)
    max_dim = check_int(max_dim, "max_dim", 2)
    params = model.params_dict()
    params.update({"letter": int(letter), "spectrum": spectrum, "time": "tau = eta n / d (slow)",
                   "continuous_mass": 1.0,
                   "spectrum_label": ("eigenvalue of (S + S^T)/2" if spectrum == "symmetric"
                                      else "singular value of S")})
    diag: dict[str, Any] = {}
    if isinstance(law, BranchLaw):
        return _branch_spectral(model, law, t_eval, letter, spectrum, grid, n_grid, tracers,
                                rtol, atol, blowup, params, diag)
    if isinstance(law, UntiedLaw):
        return _free_spectral(model, law, t_eval, letter, spectrum, grid, n_grid, sizes,
                              rotations, levels, seed, extrapolation, rtol, atol, max_dim,
                              params, diag)
    raise TypeError("spectral_density takes a BranchLaw (branch_law: a continuous commuting "
                    "law) or an UntiedLaw; a DiagonalLaw of finitely many nodes has a discrete "
                    "spectrum")


def _branch_spectral(model: UntiedModelLike, law: BranchLaw, t_eval: np.ndarray, letter: int,
                     spectrum: str, grid: ArrayLike | None, n_grid: int, tracers: int,
                     rtol: float | None, atol: float | None, blowup: float,
                     params: dict[str, Any], diag: dict[str, Any]) -> SpectralDensity:
    """spectral_density for a BranchLaw: the exact commuting-case law from tracers."""
    tracers = check_int(tracers, "tracers", 11, 20001)
    rtol = 1e-12 if rtol is None else check_pos_float(rtol, "rtol")
    atol = 1e-14 if atol is None else check_pos_float(atol, "atol")
    ts, out, status, msg = _commuting_spectrum(model, law, t_eval, letter, spectrum,
                                               tracers, rtol, atol, blowup)
    params.update({"method": "commuting", "tracers": tracers, "rtol": rtol, "atol": atol})
    if out is None:
        return spectral_result(ts, None, None, grid, n_grid, status,
                                f"spectral density failed: {msg}", params, diag)
    vals, mass, ntr = out
    nb = len(law.branches)
    lo, hi = [], []
    for j in range(ts.size):
        sv = vals[j].reshape(nb, ntr)
        lo.append(np.minimum(sv[:, :-1], sv[:, 1:]).ravel())
        hi.append(np.maximum(sv[:, :-1], sv[:, 1:]).ravel())
    cells = (np.array(lo), np.array(hi), np.concatenate(
        [mass[i * (ntr - 1):(i + 1) * (ntr - 1)] for i in range(nb)]))
    message = (f"success: exact commuting-case spectral law of S_{letter + 1}(tau) "
               f"({spectrum}; {tracers} tracers per branch, {nb} branch(es))") \
        if status == 0 else f"spectral density stopped: {msg}"
    return spectral_result(ts, cells, None, grid, n_grid, status, message, params, diag)


def _free_spectral(model: UntiedModelLike, law: UntiedLaw, t_eval: np.ndarray, letter: int,
                   spectrum: str, grid: ArrayLike | None, n_grid: int,
                   sizes: Sequence[int] | None, rotations: int, levels: int, seed: RngLike,
                   extrapolation: str, rtol: float | None, atol: float | None, max_dim: int,
                   params: dict[str, Any], diag: dict[str, Any]) -> SpectralDensity:
    """spectral_density for an UntiedLaw: quantiles of the equivalents over sizes."""
    sizes, rotations, levels, rtol, atol = check_quantile_args(sizes, rotations, levels,
                                                               extrapolation, rtol, atol)
    out, msg, notes = _equivalents_spectrum(model, law, t_eval, letter, spectrum, sizes,
                                            rotations, seed, levels, rtol, atol, max_dim)
    params.update({"method": "equivalents", "sizes": sizes, "rotations": rotations,
                   "levels": levels, "extrapolation": extrapolation, "rtol": rtol,
                   "atol": atol,
                   "law": [vars(bk) for bk in law.blocks]})
    diag["warnings"] = sorted(notes)
    if out is None:
        return spectral_result(t_eval[:0], None, None, grid, n_grid, -3,
                                f"spectral density failed: {msg}", params, diag)
    p, means, ses = out
    Qm, err = equivalent_quantiles(means, ses, sizes, rotations, extrapolation)
    diag.update({"levels": p, "quantiles": Qm, "quantile_error": err,
                 "quantiles_per_size": means})
    how = (f"Richardson over sizes {sizes}" if extrapolation == "richardson" else
           f"the size {sizes[-1]} (error from the change since {sizes[-2]})")
    message = (f"success: d -> infinity spectral law of S_{letter + 1}(tau) ({spectrum}) "
               f"from {how} ({rotations} rotation(s) each), "
               f"largest quantile error {float(err[1:-1].max()):.2g}"
               + ("; the slaved flows warned: " + "; ".join(sorted(notes)) if notes else ""))
    res = spectral_result(t_eval, None, (p, Qm), grid, n_grid, 0, message, params, diag,
                           seed_rec(seed))
    # the stated quantile error in CDF units: err(Q) times the density at Q, worst level
    res.diagnostics["cdf_error"] = quantile_cdf_error(res, Qm, err)
    return res
