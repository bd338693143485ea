"""Certified Chebyshev surrogates of ``Gamma(q)`` for tied potentials (issue 12).

A tied potential's gradient ``Gamma(q)`` (paper 003, eq. 91) depends on the
state only through the ``K x K`` overlap matrix ``q``: ``D = K(K+1)/2`` numbers.
On a box of overlap space that contains a trajectory, ``Gamma`` is smooth, so
a tensor Chebyshev interpolant replaces the quadrature at compiled speed.

Coordinates. The box lives in variances and correlations

    c = (q_00, ..., q_{K-1,K-1}, r_01, ..., r_{K-2,K-1}),  r_kl = q_kl / sqrt(q_kk q_ll),

so that for ``K = 2`` every point of a box with ``-1 <= r <= 1`` is a PSD ``q``
(the quadrature is never asked for a point outside the cone). For ``K >= 3``
the box must lie in the cone, which holds iff its corners do (the PSD
correlation matrices form a convex set); this is checked for non-polynomial
sources.

Construction (:func:`build_surrogate`).

1. The budget of entry ``o`` is ``atol + rtol min |Gamma_o|`` over the box (the
   minimum over its corners, centre and every node): the requested tolerance
   at the entry's smallest value.
2. Dimension-adaptive sparse Chebyshev interpolation (Gerstner-Griebel
   combination technique on nested Chebyshev-Lobatto levels of 3, 5, 9, ...,
   129 nodes): the set of level vectors grows, one coordinate at a time, where
   the surplus (the change the new tensor grid brings, as Chebyshev
   coefficients) is largest, until the surpluses of the frontier sum (in l1,
   over the budget) to at most ``0.01``. So each coordinate gets the degree it
   needs, and mixed high degrees are only paid for where they matter.
3. The source is evaluated at every node to ``0.1`` of the budget: a numeric
   potential with one rule, refined at the box's corners and centre until its
   error estimate is within that accuracy there
   (:meth:`NumericPotential.adaptive`); an exact potential by its closed form.
4. The coefficients are summed; the smallest are dropped while their summed
   magnitude, a bound on the change since ``|T_j| <= 1``, stays below ``0.25``
   of the budget. The rest are the terms the kernel sums.
5. Certification: at ``n_check`` random points of the box (not nodes) and at
   its ``2^D`` corners the surrogate is compared with ``reference`` (an
   independent evaluator; by default the source at ten times the accuracy,
   with a rule refined for that). The certificate records the largest
   ``|error| / (atol + rtol |Gamma|)`` and the largest absolute and relative
   errors; it passes at a ratio of at most ``0.5`` (a margin for the points not
   checked). A failed certificate tightens the stopping threshold tenfold and
   tries again, and raises :class:`SurrogateError` after ``max_rounds``.

Evaluation: :func:`attndyn.kernels.surrogate.surrogate_grad` (signature
``GRAD_SIG``), so ``TiedModel(..., potential=surrogate)`` and every kernel
that takes a compiled ``Gamma`` use it unchanged. Outside the box it returns
NaN and counts the exit (never extrapolates).

Trajectories (:func:`integrate_in_box`): the integrator stops at a NaN
``Gamma`` (a failed step); the driver then either extends the box around the
recorded exit point and integrates again from the start (``on_exit="extend"``:
the result is that of a run with the final box from the start), or returns the
trajectory with status :data:`BOX_EXIT` and a message naming the box and the
exit point (``on_exit="stop"``).

Surrogates are cached on disk (``<cache folder>/surrogates``, see
:func:`attndyn.numeric.core.compile.cache_dir`) under a key made of the loss
(its generated source, law maps and parameters), the box, ``rtol`` and ``atol``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
import warnings
import zipfile

import numpy as np

from attndyn.kernels.surrogate import pack_surrogate, surrogate_batch, surrogate_grad

__all__ = ["Surrogate", "SurrogateError", "SurrogateRoute", "build_surrogate", "box_around",
           "integrate_in_box", "coordinates", "from_coordinates", "BOX_EXIT"]

#: Trajectory status when a trajectory left the certified box (``on_exit="stop"``).
BOX_EXIT = -5
_VERSION = 2  # 2: the coarsest level has three nodes
_NMAX = 129  # the largest number of nodes per coordinate (2^7 + 1)
_SRC = 0.1  # accuracy of the source at the nodes, as a fraction of the budget
_PASS = 0.5  # certified when the worst checked error is at most half the tolerance
_STOP = 0.01  # the surpluses still to be added, summed, as a fraction of the budget


class SurrogateError(RuntimeError):
    """A surrogate could not be built or certified to the requested tolerance."""


# -- coordinates ------------------------------------------------------------------------------
def _pairs(K):
    return [(k, k) for k in range(K)] + [(k, l) for k in range(K) for l in range(k + 1, K)]


def coordinates(Q) -> np.ndarray:
    """``(n, K, K)`` overlaps -> ``(n, D)`` coordinates (variances, then correlations)."""
    Q = np.asarray(Q, dtype=float)
    if Q.ndim == 2:
        Q = Q[None]
    K = Q.shape[-1]
    S = 0.5 * (Q + np.swapaxes(Q, -1, -2))
    v = np.stack([S[:, k, k] for k in range(K)], axis=1)
    cols = [v]
    for k in range(K):
        for l in range(k + 1, K):
            with np.errstate(invalid="ignore", divide="ignore"):
                cols.append((S[:, k, l] / np.sqrt(S[:, k, k] * S[:, l, l]))[:, None])
    return np.concatenate(cols, axis=1)


def from_coordinates(C, K) -> np.ndarray:
    """``(n, D)`` coordinates -> ``(n, K, K)`` symmetric overlaps."""
    C = np.atleast_2d(np.asarray(C, dtype=float))
    Q = np.zeros((C.shape[0], K, K))
    for k in range(K):
        Q[:, k, k] = C[:, k]
    d = K
    for k in range(K):
        for l in range(k + 1, K):
            Q[:, k, l] = Q[:, l, k] = C[:, d] * np.sqrt(C[:, k] * C[:, l])
            d += 1
    return Q


def _unique(G, K):
    """``(n, K, K)`` -> ``(n, D)`` unique entries in coordinate order."""
    return np.stack([G[:, k, l] for k, l in _pairs(K)], axis=1)


def box_around(qs, rel_margin: float = 0.25, r_margin: float = 0.1, lo_floor: float = 1e-3):
    """A box ``(lo, hi)`` in coordinates that contains every overlap matrix in
    ``qs`` (a ``K x K`` array or a sequence of them), widened by ``rel_margin``
    times each variance's value and ``r_margin`` in each correlation (clipped to
    ``[-1, 1]``; variances stay above ``lo_floor`` times their smallest value)."""
    Q = np.asarray(qs, dtype=float)
    if Q.ndim == 2:
        Q = Q[None]
    if Q.ndim != 3 or Q.shape[1] != Q.shape[2] or Q.shape[0] == 0:
        raise ValueError(f"qs must be K x K matrices, got shape {np.shape(qs)}")
    if not np.all(np.isfinite(Q)):
        raise ValueError("qs must be finite")
    K = Q.shape[-1]
    C = coordinates(Q)
    if np.any(C[:, :K] <= 0):
        raise ValueError("qs must have positive diagonals (variances)")
    lo, hi = C.min(axis=0), C.max(axis=0)
    vlo, vhi = lo[:K], hi[:K]
    lo[:K] = np.maximum(vlo * (1 - rel_margin), lo_floor * vlo)
    hi[:K] = vhi * (1 + rel_margin)
    lo[K:] = np.maximum(lo[K:] - r_margin, -1.0)
    hi[K:] = np.minimum(hi[K:] + r_margin, 1.0)
    return lo, hi


def _check_box(lo, hi, K):
    D = K * (K + 1) // 2
    lo = np.asarray(lo, dtype=float).ravel().copy()
    hi = np.asarray(hi, dtype=float).ravel().copy()
    if lo.size != D or hi.size != D:
        raise ValueError(f"box: lo and hi must have D = K(K+1)/2 = {D} entries "
                         "(variances, then correlations)")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
        raise ValueError("box: need finite lo < hi in every coordinate")
    if np.any(lo[:K] <= 0):
        raise ValueError("box: variances (the first K coordinates) must be > 0")
    if np.any(lo[K:] < -1) or np.any(hi[K:] > 1):
        raise ValueError("box: correlations (the last D - K coordinates) must lie in [-1, 1]")
    return lo, hi


def _corners(lo, hi):
    return np.array(list(itertools.product(*zip(lo, hi))), dtype=float)


# -- sources ------------------------------------------------------------------------------------
class _Source:
    """``Gamma`` at many ``q`` to a requested accuracy, and a cache key."""

    def __init__(self, pot=None, fn=None, K=None, key=None, numeric=False):
        self.pot, self.fn, self.K, self.key, self.numeric = pot, fn, K, key, numeric
        self.evaluations = 0
        self._start: dict = {}
        self._fixed: dict = {}
        self.rules: dict = {}

    def noise_factor(self) -> float:
        """Rounding of a value relative to one exact evaluation: ``sqrt(n)`` for a
        quadrature over ``n`` nodes (the largest rule in use), 1 otherwise."""
        if not self._fixed:
            return 1.0
        return math.sqrt(max(r.size for r, _ in self._fixed.values()))

    def prepare(self, Q, budget):
        """Numeric sources: choose one quadrature rule for a box from the points ``Q``
        (its corners and centre, where the Gaussian is widest or most singular):
        the rule refined at each of them until the error estimate is within
        ``min(budget)``, the finest kept. The nodes then cost one evaluation each."""
        if not self.numeric:
            return
        atol = float(np.min(budget))
        if atol in self._fixed:
            return
        law = self.pot.law
        best = None
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for q in Q:
                x = np.ascontiguousarray(law.flatten_inputs({"q": q}))
                try:
                    _, _, rule = self.pot.adaptive(x, atol=atol, start=best)
                except RuntimeWarning as exc:
                    raise SurrogateError(f"the quadrature cannot reach {atol:.2g} at q = "
                                         f"{q.tolist()}: {exc}") from None
                if best is None or rule.size > best.size:
                    best = rule
        self._fixed[atol] = (best, self.pot._pack(best))
        self.rules[atol] = best.describe()

    def __call__(self, Q, budget):
        """Values ``(n, D)``; ``budget`` (D,) is the absolute accuracy wanted per entry
        (numeric sources: the rule of :meth:`prepare` for the nearest budget at or
        below it; without one, the rule is refined at each point)."""
        self.evaluations += len(Q)
        if self.pot is not None and self.numeric:
            out = np.empty((len(Q), len(budget)))
            K = self.K
            law = self.pot.law
            atol = float(np.min(budget))
            fixed = [a for a in self._fixed if a <= atol * (1 + 1e-12)]
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                for i, q in enumerate(Q):
                    x = np.ascontiguousarray(law.flatten_inputs({"q": q}))
                    if fixed:
                        g = self.pot._run(x, self._fixed[max(fixed)][1])
                    else:
                        try:
                            # start where the previous point ended: neighbours need similar rules
                            g, _, rule = self.pot.adaptive(x, atol=atol, start=self._start.get(atol))
                            self._start[atol] = rule
                        except RuntimeWarning as exc:
                            raise SurrogateError(f"the quadrature cannot reach {atol:.2g} at q = "
                                                 f"{q.tolist()}: {exc}") from None
                    out[i] = _unique(g.reshape(1, K, K), K)[0]
            return out
        G = np.asarray(self.fn(Q), dtype=float).reshape(len(Q), self.K, self.K)
        return _unique(G, self.K)


def _exact_fn(pot):
    import sympy as sp
    args = list(dict.fromkeys(pot.q))
    if pot.params:
        raise SurrogateError("exact potentials with runtime parameters are not supported; "
                             "substitute the parameter values into the loss")
    K = pot.K
    fns = [[sp.lambdify(args, pot.gamma[k, l], modules=["scipy", "numpy"]) for l in range(K)]
           for k in range(K)]

    def fn(Q):
        a = [Q[:, k, l] for k in range(K) for l in range(k, K)]
        out = np.empty(Q.shape)
        for k in range(K):
            for l in range(K):
                out[:, k, l] = np.broadcast_to(np.asarray(fns[k][l](*a), dtype=float), len(Q))
        return out
    return fn


def _make_source(potential, K, key):
    # a NumericPotential (attndyn.numeric.attention.potentials), told by its route: this
    # module sits below potentials.py and does not import it
    if getattr(potential, "route", None) == "numeric" and callable(getattr(potential, "adaptive", None)):
        if potential.kind != "tied":
            raise TypeError(f"surrogates are for tied potentials, got a {potential.kind} one")
        h = hashlib.sha256()
        h.update(potential.source.encode())
        for arr in (potential._S, potential._M, potential.W, potential._ip):
            h.update(np.ascontiguousarray(arr, dtype=float).tobytes())
        h.update(f"{potential.mode}".encode())
        return _Source(pot=potential, K=potential.K, key="numeric:" + h.hexdigest(),
                       numeric=True)
    if hasattr(potential, "gamma") and hasattr(potential, "numba_source") and hasattr(potential, "q"):
        return _Source(fn=_exact_fn(potential), K=potential.K,
                       key="exact:" + hashlib.sha256(potential.numba_source().encode()).hexdigest())
    if callable(potential):
        if K is None:
            raise TypeError("a callable source needs K=")
        return _Source(fn=potential, K=int(K), key=None if key is None else f"user:{key}")
    raise TypeError("potential must be a NumericPotential, an exact TiedPotential or a callable "
                    "Q (n, K, K) -> Gamma (n, K, K)")


# -- Chebyshev machinery --------------------------------------------------------------------
class Surrogate:
    """A certified Chebyshev surrogate of ``Gamma(q)`` on a box (see the module doc).

    Attributes: ``K``, ``lo``, ``hi`` (the box in coordinates), ``rtol``, ``atol``,
    ``degrees`` (nodes per coordinate), ``n_terms``, ``certificate`` (dict),
    ``build_seconds``, ``source_evaluations``, ``cached`` (loaded from disk).
    """

    route = "surrogate"

    def __init__(self, K, lo, hi, idx, coef, nmax, rtol, atol, degrees, certificate,
                 build_seconds=0.0, source_evaluations=0, source=None, options=None):
        self.K = int(K)
        self.lo, self.hi = np.asarray(lo, float), np.asarray(hi, float)
        self._idx, self._coef, self._nmax = np.asarray(idx), np.asarray(coef), int(nmax)
        self.rtol, self.atol = float(rtol), float(atol)
        self.degrees = tuple(int(n) for n in degrees)
        self.certificate = dict(certificate)
        self.build_seconds = float(build_seconds)
        self.source_evaluations = int(source_evaluations)
        self.cached = False
        self._source = source
        self._options = dict(options or {})
        self._p = pack_surrogate(self.K, self.lo, self.hi, self._idx, self._coef, self._nmax)

    @property
    def n_terms(self) -> int:
        return int(self._idx.shape[0])

    # -- TiedModel interface ----------------------------------------------------------
    def gradient_function(self):
        """The compiled ``grad(x, p, out)`` (``GRAD_SIG``): ``q.ravel() -> Gamma.ravel()``."""
        return surrogate_grad

    def parameters(self) -> np.ndarray:
        """The parameter vector of :meth:`gradient_function` (holds the exit counter)."""
        return self._p

    # -- box ------------------------------------------------------------------------------
    @property
    def exits(self) -> int:
        """How many evaluations fell outside the box since the last :meth:`reset_exits`."""
        return int(self._p[5])

    @property
    def exit_q(self):
        """The first ``q`` seen outside the box (None if none)."""
        if self.exits == 0:
            return None
        o = int(self._p[6])
        return self._p[o:o + self.K * self.K].reshape(self.K, self.K).copy()

    def reset_exits(self):
        self._p[5] = 0.0
        o = int(self._p[6])
        self._p[o:o + self.K * self.K] = 0.0

    def contains(self, q) -> bool:
        c = coordinates(q)[0]
        return bool(np.all(c >= self.lo) and np.all(c <= self.hi))

    def box_text(self) -> str:
        K = self.K
        names = [f"q{k}{k}" for k in range(K)] + [f"r{k}{l}" for k in range(K)
                                                   for l in range(k + 1, K)]
        return ", ".join(f"{n} in [{a:.4g}, {b:.4g}]" for n, a, b in zip(names, self.lo, self.hi))

    # -- evaluation -----------------------------------------------------------------------
    def gamma(self, q) -> np.ndarray:
        """``Gamma(q)`` (eq. 91) at one ``K x K`` overlap matrix; raises outside the box."""
        q = np.asarray(q, dtype=float)
        if q.shape != (self.K, self.K) or not np.all(np.isfinite(q)):
            raise ValueError(f"q must be a finite ({self.K}, {self.K}) array")
        out = np.empty(self.K * self.K)
        p = self._p.copy()
        surrogate_grad(np.ascontiguousarray(q.ravel()), p, out)
        if p[5] != 0:
            raise ValueError(f"q = {q.tolist()} is outside the certified box ({self.box_text()})")
        return out.reshape(self.K, self.K)

    def gamma_many(self, Q) -> np.ndarray:
        """``Gamma`` at ``(n, K, K)`` overlaps (NaN outside the box)."""
        Q = np.ascontiguousarray(np.asarray(Q, dtype=float).reshape(-1, self.K * self.K))
        out = np.empty_like(Q)
        surrogate_batch(Q, self._p.copy(), out)
        return out.reshape(-1, self.K, self.K)

    # -- extension ----------------------------------------------------------------------------
    def extended(self, q, margin: float = 0.5) -> "Surrogate":
        """A surrogate on a box grown to contain ``q`` (plus ``margin`` of the old
        width beyond it on each side that had to move), from the same source."""
        if self._source is None:
            raise SurrogateError("this surrogate was loaded without its source; it cannot be "
                                 "extended (rebuild it with build_surrogate)")
        c = coordinates(q)[0]
        if not np.all(np.isfinite(c)) or np.any(c[:self.K] <= 0):
            raise SurrogateError(f"cannot extend the box to q = {np.asarray(q).tolist()} "
                                 "(not a positive-definite overlap)")
        lo, hi = self.lo.copy(), self.hi.copy()
        w = hi - lo
        below, above = c < lo, c > hi
        lo[below] = c[below] - margin * w[below]
        hi[above] = c[above] + margin * w[above]
        K = self.K
        # variances shrink geometrically (weight decay drives them towards 0, never below)
        vb = below[:K]
        lo[:K][vb] = np.maximum(lo[:K][vb], 0.25 * c[:K][vb])
        lo[K:] = np.maximum(lo[K:], -1.0)
        hi[K:] = np.minimum(hi[K:], 1.0)
        return build_surrogate(self._source, box=(lo, hi), rtol=self.rtol, atol=self.atol,
                               **self._options)

    @property
    def tolerance(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "norm": "entrywise"}

    def error_report(self) -> dict:
        """The certificate as an error report (calls outside the box are NaN: ``exits``)."""
        c = self.certificate
        passed = bool(c.get("passed", False))
        return {"route": "surrogate", "rtol": self.rtol, "atol": self.atol,
                "max_error": c.get("max_abs"), "max_ratio": c.get("max_ratio"),
                "over_tolerance": 0 if passed else 1, "exits": self.exits,
                "within_tolerance": passed and self.exits == 0, "certificate": dict(c)}

    def reset_report(self):
        self.reset_exits()

    def describe(self) -> str:
        c = self.certificate
        return (f"Surrogate(K={self.K}, {self.box_text()}; nodes {self.degrees}, "
                f"{self.n_terms} terms; certified at {c.get('points', 0)} points: "
                f"max |err|/(atol + rtol|Gamma|) = {c.get('max_ratio', float('nan')):.2g})")

    __repr__ = describe

    def _repr_html_(self):
        return _html("Surrogate", self)

    # -- disk -----------------------------------------------------------------------------------
    def _save(self, path):
        tmp = path.with_suffix(f".{id(self)}.tmp.npz")
        np.savez(tmp, K=self.K, lo=self.lo, hi=self.hi, idx=self._idx, coef=self._coef,
                 nmax=self._nmax, rtol=self.rtol, atol=self.atol, degrees=np.array(self.degrees),
                 certificate=json.dumps(self.certificate), build_seconds=self.build_seconds,
                 source_evaluations=self.source_evaluations, version=_VERSION)
        import os
        os.replace(tmp, path)

    @classmethod
    def _load(cls, path, source=None, options=None):
        with np.load(path, allow_pickle=False) as z:
            if int(z["version"]) != _VERSION:
                return None
            s = cls(int(z["K"]), z["lo"], z["hi"], z["idx"], z["coef"], int(z["nmax"]),
                    float(z["rtol"]), float(z["atol"]), z["degrees"],
                    json.loads(str(z["certificate"])), float(z["build_seconds"]),
                    int(z["source_evaluations"]), source=source, options=options)
        s.cached = True
        return s


def _html(title, pot) -> str:
    """Notebook display of a surrogate potential: route, tolerance, worst error so far."""
    from ...core.display import html_summary
    rep = pot.error_report()
    return html_summary(title, {
        "route": rep.get("route"), "tolerance": pot.tolerance,
        "box": pot.box_text() if isinstance(pot, Surrogate) else (
            "none yet" if pot.surrogate is None else pot.surrogate.box_text()),
        "worst estimated error so far": rep.get("max_error"),
        "within tolerance": rep.get("within_tolerance")}, subtitle=f"K = {pot.K}")


def _cache_path(key):
    """The cache file of a key, in ``<generated-code cache folder>/surrogates`` (private,
    mode 0700); None when there is no usable cache folder (then nothing is cached).
    The files are plain ``.npz`` arrays, read without pickles."""
    from ...core.compile import cache_dir
    base = cache_dir()
    if base is None:
        return None
    folder = base / "surrogates"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder / f"sur_{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def _check_tol(x, name):
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating)) or not math.isfinite(x) \
            or x < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {x!r}")
    return float(x)


def _m(level):
    """Nodes of the nested Chebyshev-Lobatto (Clenshaw-Curtis) rule of a level: 3, 5, 9, ...

    The coarsest rule has three nodes, not the centre alone: a Gamma entry that vanishes on
    the centre line of a coordinate (Gamma_01 of an odd activation at r_01 = 0, the usual
    start of a trajectory) would otherwise show zero surpluses along every other coordinate,
    and the mixed terms behind them would never be added (a box centred at r_01 = 0 then
    missed q_01 = r_01 sqrt(q_00 q_11) by 5e-2)."""
    return 2 ** (level + 1) + 1


_LMAX = 6  # 2^7 + 1 = _NMAX nodes


def _level_keys(level):
    """Positions of a level's nodes on the finest grid (cos(pi key / 128))."""
    step = (_NMAX - 1) // (_m(level) - 1)
    return [j * step for j in range(_m(level))]


def _tensor_coefficients(lv, values, src, lo, hi, K, budget, max_nodes):
    """Chebyshev coefficients (m(l_0), ..., m(l_{D-1}), D) of the tensor interpolant
    on level vector ``lv``, evaluating the source at the nodes not yet known."""
    D = len(lv)
    keys = list(itertools.product(*[_level_keys(l) for l in lv]))
    new = [k for k in keys if k not in values]
    if new:
        if len(values) + len(new) > max_nodes:
            raise SurrogateError(f"the surrogate needs more than max_nodes = {max_nodes} source "
                                 "evaluations on this box; shrink the box or loosen rtol/atol")
        s = np.cos(np.pi * np.array(new, dtype=float) / (_NMAX - 1))
        pts = lo + (hi - lo) * (1 + s) / 2
        vals = src(from_coordinates(pts, K), _SRC * budget)
        for k, v in zip(new, vals):
            values[k] = v
    F = np.array([values[k] for k in keys]).reshape(*[_m(l) for l in lv], D)
    from scipy.fft import dct
    C = F
    for ax, l in enumerate(lv):
        m = _m(l)
        if m == 1:
            continue
        C = dct(C, type=1, axis=ax) / (m - 1)
        sl = [slice(None)] * (D + 1)
        sl[ax] = 0
        C[tuple(sl)] /= 2
        sl[ax] = m - 1
        C[tuple(sl)] /= 2
    return C


def _adaptive_sparse(src, lo, hi, K, budget, values, stop, max_nodes):
    """Dimension-adaptive sparse Chebyshev interpolation (Gerstner-Griebel).

    The interpolant is the sum of the surpluses ``Delta_l = sum_z (-1)^|z| U_{l-z}``
    (``U_l`` the tensor interpolant on level vector ``l``, ``z`` in ``{0,1}^D``) over
    a downward-closed set of levels, grown where the surplus is largest (its
    coefficients' l1 norm over the budget, per entry) until the surpluses still
    to be added sum to at most ``stop``. Returns the nodes per coordinate of the
    coefficient array and the array (sum of the surpluses, zero-padded)."""
    D = len(lo)
    U: dict = {}

    def tensor(lv):
        if lv not in U:
            U[lv] = _tensor_coefficients(lv, values, src, lo, hi, K, budget, max_nodes)
        return U[lv]

    def surplus(lv):
        shape = tuple(_m(l) for l in lv) + (D,)
        out = np.zeros(shape)
        for z in itertools.product((0, 1), repeat=D):
            low = tuple(l - dz for l, dz in zip(lv, z))
            if min(low) < 0:
                continue
            c = tensor(low)
            out[tuple(slice(0, s) for s in c.shape[:-1])] += (-1) ** sum(z) * c
        return out

    def indicator(delta):
        # coefficients below the rounding floor of the values (the DCT of numbers known
        # to ~1e-16 relative) are noise: summed over a large grid they would never stop
        # (for quadrature sources, sums over n nodes: ~sqrt(n) times that)
        scale = np.max(np.abs(np.array(list(values.values()))), axis=0)
        floor = 64 * np.finfo(float).eps * scale * src.noise_factor()
        a = np.maximum(np.abs(delta.reshape(-1, D)) - floor, 0.0)
        return float(np.max(np.sum(a, axis=0) / budget))

    zero = (0,) * D
    deltas = {zero: surplus(zero)}
    active = {zero: indicator(deltas[zero])}
    old: set = set()
    while active and sum(active.values()) > stop:
        lv = max(active, key=active.get)
        eta = active.pop(lv)
        old.add(lv)
        for d in range(D):
            c = tuple(l + (1 if j == d else 0) for j, l in enumerate(lv))
            if c[d] > _LMAX:
                if eta > stop:
                    raise SurrogateError(f"coordinate {d} needs more than {_NMAX} Chebyshev "
                                         "nodes on this box; shrink the box")
                continue
            if all(tuple(x - (1 if j == e else 0) for j, x in enumerate(c)) in old
                   for e in range(D) if c[e] > 0):
                deltas[c] = surplus(c)
                active[c] = indicator(deltas[c])
    n = [max(_m(lv[d]) for lv in deltas) for d in range(D)]
    total = np.zeros(tuple(n) + (D,))
    for lv, delta in deltas.items():
        total[tuple(slice(0, s) for s in delta.shape[:-1])] += delta
    return n, total


_RECHECK = 4  # fresh points at which a surrogate loaded from disk is checked again


def _recertified(sur, src, reference, seed) -> bool:
    """Whether a surrogate loaded from the cache still holds its certificate (issue 23,
    D7): finite coefficients and box, the right shape, and every entry within
    ``atol + rtol |Gamma|`` of the reference (the source at ten times the accuracy, as
    at certification) at the box centre and ``_RECHECK`` random points that neither the
    construction nor the certification used. A file scaled, set to NaN or otherwise
    altered fails and is rebuilt; the check costs ``_RECHECK + 1`` source evaluations."""
    K, D = sur.K, sur.K * (sur.K + 1) // 2
    try:
        budget = np.asarray(sur.certificate.get("budget"), dtype=float)
        ok = (K == src.K and sur._coef.ndim == 2 and sur._coef.shape[1] == D
              and budget.shape == (D,) and bool(np.all(np.isfinite(budget)))
              and bool(np.all(np.isfinite(sur._coef))) and bool(np.all(np.isfinite(sur.lo)))
              and bool(np.all(np.isfinite(sur.hi))) and sur.certificate.get("passed") is True)
    except (TypeError, ValueError, AttributeError):
        return False
    if not ok:
        return False
    lo, hi = sur.lo, sur.hi
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 13]))
    pts = np.concatenate([((lo + hi) / 2)[None], lo + (hi - lo) * rng.random((_RECHECK, D))])
    Q = from_coordinates(pts, K)
    try:
        got = _unique(sur.gamma_many(Q), K)
        if reference is None:
            probe = np.concatenate([_corners(lo, hi), ((lo + hi) / 2)[None]])
            src.prepare(from_coordinates(probe, K), 0.1 * _SRC * budget)
            ref = src(Q, 0.1 * _SRC * budget)
        else:
            ref = _unique(np.asarray(reference(Q), dtype=float).reshape(len(Q), K, K), K)
    except (SurrogateError, ValueError, FloatingPointError):
        return False
    err = np.abs(got - ref)
    return bool(np.all(np.isfinite(got)) and np.all(err <= sur.atol + sur.rtol * np.abs(ref)))


#: most certification points one build may ask for (issue 23: n_check=10**9 ran for minutes)
MAX_CHECK = 100_000


def build_surrogate(potential, box, *, rtol: float = 1e-9, atol: float = 1e-12, K=None,
                    reference=None, n_check: int = 64, seed: int = 0, cache: bool = True,
                    key: str | None = None, max_nodes: int = 20_000, max_rounds: int = 3):
    """Build and certify a Chebyshev surrogate of ``Gamma(q)`` on ``box``.

    Parameters
    ----------
    potential : NumericPotential (tied), exact TiedPotential, or callable
        The source of ``Gamma``; a callable maps ``(n, K, K)`` overlaps to
        ``(n, K, K)`` gradients (give ``K=``, and ``key=`` to cache it).
    box : (lo, hi)
        Bounds in coordinates (``K`` variances, then the correlations ``r_kl``,
        ``k < l``); :func:`box_around` makes one around given overlaps.
    rtol, atol : float
        Requested accuracy of every entry: ``|error| <= atol + rtol |Gamma_kl|``.
    reference : callable, optional
        Independent ``(n, K, K) -> (n, K, K)`` evaluator for the certificate;
        default the source at ten times the accuracy.
    n_check : int
        Random certification points (the ``2^D`` corners are added).
    seed : int
        Seed of the certification points.
    cache : bool
        Load from / save to the disk cache (key: loss, box, ``rtol``, ``atol``).
    max_nodes : int
        Refusal limit on the tensor grid size (source evaluations).

    Returns
    -------
    Surrogate
    """
    t0 = time.perf_counter()
    src = potential if isinstance(potential, _Source) else _make_source(potential, K, key)
    K = src.K
    rtol, atol = _check_build_args(rtol, atol, n_check, seed)
    lo, hi = _check_box(*box, K)
    options = {"reference": reference, "n_check": n_check, "seed": seed, "cache": cache,
               "max_nodes": max_nodes, "max_rounds": max_rounds}
    path = None
    if cache and src.key is not None:
        path, s = _from_cache(src, lo, hi, rtol, atol, n_check, seed, reference, options)
        if s is not None:
            return s
    if src.numeric and K >= 3:
        corners = from_coordinates(_corners(lo, hi), K)
        if np.min(np.linalg.eigvalsh(corners)) < 0:
            raise ValueError("box: some corners are not PSD overlap matrices; for K >= 3 keep "
                             "the correlations in a box inside the PSD cone")

    sur, cert, values = _construct(src, lo, hi, rtol, atol, n_check, seed, reference,
                                   max_nodes, max_rounds, options)
    sur.certificate = cert
    sur.build_seconds = time.perf_counter() - t0
    sur.source_evaluations = len(values)
    sur.certificate["nodes"] = len(values)
    if path is not None:
        try:
            sur._save(path)
        except OSError:
            pass
    return sur


def _construct(src, lo, hi, rtol, atol, n_check, seed, reference, max_nodes, max_rounds,
               options):
    """Steps 1-5 of the module doc: budget, adaptive sparse grid, pruning, certification
    (tightening the stopping threshold tenfold per failed round). Returns
    ``(surrogate, certificate, values at the nodes)``."""
    K = src.K
    D = K * (K + 1) // 2
    values: dict = {}
    # a rough look at the magnitudes (corners and centre) sets the accuracy budget
    probe = np.concatenate([_corners(lo, hi), ((lo + hi) / 2)[None]])
    mags = np.min(np.abs(src(from_coordinates(probe, K), np.full(D, 1e-7))), axis=0)
    budget = np.maximum(atol + rtol * np.maximum(mags - 1e-7, 0.0), 1e-300)
    rounds = 0
    cert = None
    stop = _STOP
    while True:
        src.prepare(from_coordinates(probe, K), _SRC * budget)
        n, Cf = _adaptive_sparse(src, lo, hi, K, budget, values, stop, max_nodes)
        # the budget is the tolerance at the smallest |Gamma| on the box: the nodes may
        # show smaller values than the probe did; then start again with that budget
        at_nodes = atol + rtol * np.min(np.abs(np.array(list(values.values()))), axis=0)
        if np.any(at_nodes < 0.5 * budget):
            budget = np.maximum(np.minimum(budget, at_nodes), 1e-300)
            if src.numeric:
                values.clear()  # evaluated to the old, looser accuracy
            continue
        idx, coef, pruned = _prune(n, Cf, budget)
        sur = Surrogate(K, lo, hi, idx, coef, max(n), rtol, atol, n, {},
                        source=src, options=options)
        cert = _certify(sur, src, probe, budget, n_check, seed, reference)
        cert["pruned_bound"] = pruned
        rounds += 1
        if cert["passed"]:
            break
        if rounds >= max_rounds:
            raise SurrogateError(f"certification failed after {rounds} rounds: max |err|/(atol + "
                                 f"rtol|Gamma|) = {cert['max_ratio']:.3g} at nodes {n}")
        stop /= 10
    return sur, cert, values


def _check_build_args(rtol, atol, n_check, seed):
    """``(rtol, atol)`` of :func:`build_surrogate`, with ``n_check`` and ``seed``, checked."""
    rtol = _check_tol(rtol, "rtol")
    atol = _check_tol(atol, "atol")
    if rtol == 0 and atol == 0:
        raise ValueError("rtol and atol cannot both be 0")
    if isinstance(n_check, bool) or not isinstance(n_check, (int, np.integer)) or n_check < 0:
        raise ValueError(f"n_check must be an int >= 0, got {n_check!r}")
    if n_check > MAX_CHECK:  # each point costs one reference (quadrature) evaluation
        raise ValueError(f"n_check must be in 0..{MAX_CHECK}, got {n_check}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return rtol, atol


def _from_cache(src, lo, hi, rtol, atol, n_check, seed, reference, options):
    """``(path, surrogate)``: the cache file of this build, and the surrogate stored there
    when it loads and still holds its certificate (else ``None``: built and saved over)."""
    ck = json.dumps({"v": _VERSION, "src": src.key, "lo": lo.tolist(), "hi": hi.tolist(),
                     "rtol": rtol, "atol": atol, "n_check": int(n_check), "seed": int(seed),
                     "ref": reference is None})
    path = _cache_path(ck)
    if path is None or not path.exists():
        return path, None
    try:
        s = Surrogate._load(path, source=src, options=options)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        s = None  # truncated or damaged: rebuilt (and saved over it)
    if s is not None and _recertified(s, src, reference, seed):
        return path, s
    return path, None


def _prune(n, Cf, budget):
    """The terms kept: the smallest dropped while their summed size stays below
    ``budget / 4``. Returns ``(idx, coef, bound of the dropped part per entry)``."""
    D = len(budget)
    idx = np.array(list(itertools.product(*[range(m) for m in n])), dtype=np.int64)
    coef = Cf.reshape(-1, D)
    nz = np.any(coef != 0, axis=1)
    idx, coef = idx[nz], coef[nz]
    mag = np.max(np.abs(coef) / budget, axis=1)
    order = np.argsort(mag)
    cum = np.cumsum(np.abs(coef[order]), axis=0)
    ok = np.all(cum <= 0.25 * budget, axis=1)
    n_drop = int(np.argmin(ok)) if not np.all(ok) else len(ok)
    keep = np.sort(order[n_drop:])
    return idx[keep], coef[keep], (cum[n_drop - 1] if n_drop else np.zeros(D)).tolist()


def _certify(sur, src, probe, budget, n_check, seed, reference):
    """The certificate: the surrogate against the reference (default: the source at ten
    times the accuracy) at ``n_check`` random points and the box's corners."""
    K, lo, hi, rtol, atol = sur.K, sur.lo, sur.hi, sur.rtol, sur.atol
    D = len(lo)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 12]))
    pts = np.concatenate([lo + (hi - lo) * rng.random((int(n_check), D)), _corners(lo, hi)])
    Qc = from_coordinates(pts, K)
    got = _unique(sur.gamma_many(Qc), K)
    if reference is None:
        src.prepare(from_coordinates(probe, K), 0.1 * _SRC * budget)
        ref = src(Qc, 0.1 * _SRC * budget)
        ref_name = "source at 10x accuracy"
    else:
        ref = _unique(np.asarray(reference(Qc), dtype=float).reshape(len(Qc), K, K), K)
        ref_name = "reference"
    err = np.abs(got - ref)
    lim = atol + rtol * np.abs(ref)
    ratio = float(np.max(err / lim)) if len(pts) else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(ref != 0, err / np.abs(ref), np.inf)
    return {"points": int(len(pts)), "random_points": int(n_check), "corners": 2 ** D,
            "reference": ref_name, "max_ratio": ratio, "max_abs": float(err.max()),
            "max_rel": float(rel.max()), "passed": bool(ratio <= _PASS),
            "budget": budget.tolist(), "source_rules": dict(
                (f"{k:.3g}", v) for k, v in getattr(src, "rules", {}).items())}


# -- trajectories ------------------------------------------------------------------------------
def integrate_in_box(model, order, mu0, t_eval, *, surrogate, on_exit: str = "extend",
                     max_extensions: int = 8, margin: float = 0.5, **kw):
    """Integrate ``model``'s hierarchy at ``order`` with ``surrogate`` as its
    ``Gamma``, never outside the certified box.

    ``model`` is a :class:`attndyn.numeric.attention.tied.TiedModel` (its ``K``,
    trainable indices, ``L``, ``C`` and weight decay are used; its potential is
    replaced by the surrogate). ``kw`` goes to ``TiedHierarchy.integrate``.

    When the integration fails after an evaluation outside the box:
    ``on_exit="extend"`` grows the box around the exit point (by ``margin``
    of its width) and integrates again from ``t = 0`` (at most
    ``max_extensions`` times), so the result is that of a run with the final
    box from the start; ``on_exit="stop"`` returns the trajectory so far with
    status :data:`BOX_EXIT` (``-5``; -4 is the wall-clock limit) and a message
    naming the box and the exit point. The surrogate used is in ``result.diagnostics["surrogate"]``
    (its description) and returned as the second value.

    Returns ``(Trajectory, Surrogate)``.
    """
    if on_exit not in ("extend", "stop"):
        raise ValueError(f"on_exit must be 'extend' or 'stop', got {on_exit!r}")
    if not isinstance(surrogate, Surrogate):
        raise TypeError("surrogate must be a Surrogate (build_surrogate)")
    if surrogate.K != model.K:
        raise ValueError(f"the surrogate is for K = {surrogate.K}, the model has K = {model.K}")
    raise_on_failure = kw.pop("raise_on_failure", False)
    import inspect
    if "method" in inspect.signature(model.hierarchy(order).integrate).parameters:
        # the truncation itself: no automatic switch to other solvers behind the box check
        kw.setdefault("method", "truncation")
    sur = surrogate
    extensions = 0
    while True:
        sur.reset_exits()
        # the model's own class with the surrogate as its potential (no import of the model)
        m = type(model)(model.K, list(model.trainable), L=model.L, C=model.C,
                        weight_decay=model.weight_decay, potential=sur)
        res = m.hierarchy(order).integrate(mu0, t_eval, **kw)
        res.diagnostics["surrogate"] = sur.describe()
        res.diagnostics["box_extensions"] = extensions
        if sur.exits == 0 or res.status == 0:
            # exits during rejected trial stages only: the accepted steps stayed inside
            sur.reset_exits()
            break
        q_out = sur.exit_q
        if on_exit == "stop" or extensions >= max_extensions:
            res.status = BOX_EXIT
            res.message = (f"left the certified box of the surrogate at t ~ "
                           f"{res.diagnostics.get('t_reached', float('nan')):.6g}: q = "
                           f"{np.round(q_out, 6).tolist()} is outside {sur.box_text()}"
                           + ("" if on_exit == "stop" else
                              f" (after {extensions} extensions)")
                           + "; build a larger box or use on_exit='extend'")
            break
        sur = sur.extended(q_out, margin=margin)
        extensions += 1
    if raise_on_failure and res.status != 0:
        from ...core.results import IntegrationError
        raise IntegrationError(res.message)
    return res, sur


# -- the trajectory route of a numeric potential (issue 25) -------------------------------------
class SurrogateRoute:
    """The route a trajectory takes with a tied numeric (quadrature) potential: the
    certified Chebyshev surrogate (:func:`build_surrogate`) on the box of overlap space
    the trajectory needs, the source's per-call quadrature ladder outside it.

    The compiled ``Gamma`` (:meth:`gradient_function`, ``GRAD_SIG``) evaluates the
    surrogate when ``q`` is inside its box and falls back to the quadrature otherwise,
    so it never returns NaN for a PSD ``q`` and every value is within the stated
    tolerance (the surrogate's certificate inside, the ladder's estimate outside); the
    fallback counts the exit and records the first outside ``q``. :meth:`prepare`
    builds (or grows) the box around given overlaps; :meth:`extend` grows it to an exit
    point. Both rebuild from the source and the disk cache of :func:`build_surrogate`,
    and write the new surrogate into the same parameter vector, so a model holding
    :meth:`parameters` sees it without being rebuilt. A box that cannot be certified
    (the quadrature cannot reach the accuracy at a corner, too many nodes) leaves the
    quadrature in charge there and is noted in ``notes`` and :attr:`certificate`.

    Parameters
    ----------
    source : NumericPotential (tied)
        The quadrature route: the surrogate's reference and the fallback.
    rtol, atol : float, optional
        The surrogate's tolerance, ``|error| <= atol + rtol |Gamma_kl|``; default the
        source's.
    rel_margin, r_margin : float
        Margins of a new box around the overlaps it must contain (:func:`box_around`).
    capacity : int
        Room in the parameter vector for the surrogate (float64 entries).
    build : dict, optional
        More options of :func:`build_surrogate` (``n_check``, ``max_nodes``, ...).

    One-off evaluations (:meth:`gamma_at`, :meth:`gamma_with_error`) go to the
    quadrature route; :meth:`error_report` sums up both parts.
    """

    route = "surrogate"
    kind = "tied"

    def __init__(self, source, *, rtol: float | None = None, atol: float | None = None,
                 rel_margin: float = 0.25, r_margin: float = 0.1, capacity: int = 262_144,
                 build: dict | None = None):
        # a potential's law kind (not a model's): only the numeric route has box_function
        numeric = (getattr(source, "route", None) == "numeric"
                   and callable(getattr(source, "box_function", None)))
        if not numeric or source.kind != "tied":
            raise TypeError("source must be a tied NumericPotential "
                            "(attndyn.numeric.attention.potentials.tied_potential(..., "
                            "route='numeric'))")
        self.source = source
        self.K, self.L, self.C = source.K, source.L, source.C
        self.rtol = _check_tol(source.rtol if rtol is None else rtol, "rtol")
        self.atol = _check_tol(source.atol if atol is None else atol, "atol")
        if self.rtol == 0 and self.atol == 0:
            raise ValueError("rtol and atol cannot both be 0")
        self.rel_margin, self.r_margin = float(rel_margin), float(r_margin)
        self._build = dict(build or {})
        self.surrogate = None
        self.notes: list = []
        ladder = source.parameters()
        cap = int(capacity)
        head = np.zeros(16)
        head[:8] = [-3.0, 16, cap, 16 + cap, ladder.size, 0.0, 0.0, 0.0]
        self._p = np.ascontiguousarray(np.concatenate([head, np.zeros(cap), ladder]))

    # -- the model protocol ---------------------------------------------------------------
    def gradient_function(self):
        """The compiled ``grad(x, p, out)`` (``GRAD_SIG``): surrogate in its box, quadrature
        outside (compiled once per process, as the quadrature route's)."""
        return self.source.box_function()

    def parameters(self) -> np.ndarray:
        """The parameter vector of :meth:`gradient_function` (stable: a new box is written
        into it in place)."""
        return self._p

    @property
    def tolerance(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "norm": "entrywise (surrogate), max "
                "(quadrature outside the box)"}

    # -- the box ------------------------------------------------------------------------------
    def _slot(self):
        return self._p[16:16 + int(self._p[2])]

    @property
    def exits(self) -> int:
        """Calls outside the surrogate's box since :meth:`reset_exits` (0 without a box)."""
        return int(self._slot()[5]) if self.surrogate is not None else 0

    @property
    def exit_q(self):
        """The first ``q`` seen outside the box (None if none)."""
        if self.exits == 0:
            return None
        sl = self._slot()
        o = int(sl[6])
        return sl[o:o + self.K * self.K].reshape(self.K, self.K).copy()

    def reset_exits(self):
        if self.surrogate is not None:
            sl = self._slot()
            sl[5] = 0.0
            o = int(sl[6])
            sl[o:o + self.K * self.K] = 0.0

    def covers(self, qs) -> bool:
        """Whether every overlap matrix in ``qs`` lies in the surrogate's box."""
        if self.surrogate is None:
            return False
        c = coordinates(np.asarray(qs, dtype=float))
        return bool(np.all(c >= self.surrogate.lo) and np.all(c <= self.surrogate.hi))

    def _install(self, sur):
        sl = self._slot()
        n = sur.parameters().size
        if n > sl.size:
            raise SurrogateError(f"the surrogate needs {n} parameters, the route has room for "
                                 f"{sl.size}; build the route with a larger capacity=")
        sl[:n] = sur.parameters()
        sl[n:] = 0.0
        self._p[5] = 1.0
        self.surrogate = sur

    def _build_on(self, lo, hi):
        try:
            sur = build_surrogate(self.source, (lo, hi), rtol=self.rtol, atol=self.atol,
                                  **self._build)
        except (SurrogateError, ValueError) as exc:
            self.notes.append(f"no surrogate on {lo.tolist()} .. {hi.tolist()}: {exc}; the "
                              "quadrature route serves there")
            return False
        self._install(sur)
        return True

    def prepare(self, qs) -> bool:
        """Make the box contain the overlaps ``qs`` (a ``K x K`` matrix or a sequence):
        build it around them with the margins, or grow the present one to hold them
        too. Returns whether a certified surrogate covers them."""
        Q = np.asarray(qs, dtype=float)
        if Q.ndim == 2:
            Q = Q[None]
        if Q.ndim != 3 or Q.shape[1:] != (self.K, self.K):
            raise ValueError(f"qs must be ({self.K}, {self.K}) overlap matrices, got shape "
                             f"{np.shape(qs)}")
        if self.covers(Q):
            return True
        lo, hi = box_around(Q, self.rel_margin, self.r_margin)
        if self.surrogate is not None:
            lo, hi = np.minimum(lo, self.surrogate.lo), np.maximum(hi, self.surrogate.hi)
        return self._build_on(lo, hi)

    def extend(self, q=None, margin: float = 0.5) -> bool:
        """Grow the box to the exit point ``q`` (default: the recorded one) plus ``margin``
        of its width on each side that moves, as :meth:`Surrogate.extended`."""
        q = self.exit_q if q is None else np.asarray(q, dtype=float)
        if q is None:
            return self.surrogate is not None
        if self.surrogate is None:
            return self.prepare(q)
        c = coordinates(q)[0]
        if not np.all(np.isfinite(c)) or np.any(c[:self.K] <= 0):
            return False
        lo, hi = self.surrogate.lo.copy(), self.surrogate.hi.copy()
        w = hi - lo
        below, above = c < lo, c > hi
        lo[below] = c[below] - margin * w[below]
        hi[above] = c[above] + margin * w[above]
        vb = below[:self.K]
        lo[:self.K][vb] = np.maximum(lo[:self.K][vb], 0.25 * c[:self.K][vb])
        lo[self.K:] = np.maximum(lo[self.K:], -1.0)
        hi[self.K:] = np.minimum(hi[self.K:], 1.0)
        return self._build_on(lo, hi)

    # -- evaluation -------------------------------------------------------------------------
    def gamma(self, q) -> np.ndarray:
        """``Gamma(q)`` through the compiled route (surrogate in the box, else quadrature)."""
        q = np.asarray(q, dtype=float)
        if q.shape != (self.K, self.K) or not np.all(np.isfinite(q)):
            raise ValueError(f"q must be a finite ({self.K}, {self.K}) array")
        out = np.empty(self.K * self.K)
        p = self._p.copy()
        self.gradient_function()(np.ascontiguousarray(q.ravel()), p, out)
        return out.reshape(self.K, self.K)

    def gamma_at(self, q) -> np.ndarray:
        """One-off ``Gamma(q)``: the quadrature route refined at ``q``."""
        return self.source.gamma_at(q)

    def gamma_with_error(self, q):
        """One-off ``(Gamma(q), error estimate)`` from the quadrature route."""
        return self.source.gamma_with_error(q)

    # -- reports -----------------------------------------------------------------------------
    @property
    def certificate(self) -> dict:
        """The certificate of the surrogate in use (its box, points, worst ratio), or why
        there is none."""
        if self.surrogate is None:
            return {"built": False, "notes": list(self.notes)}
        sur = self.surrogate
        return dict(sur.certificate, built=True, box=sur.box_text(), lo=sur.lo.tolist(),
                    hi=sur.hi.tolist(), rtol=sur.rtol, atol=sur.atol, terms=sur.n_terms,
                    build_seconds=sur.build_seconds, cached=sur.cached, notes=list(self.notes))

    def error_report(self) -> dict:
        """The worst error over the calls since :meth:`reset_report`: the surrogate's
        certificate for the calls inside its box, the quadrature ladder's estimate for
        the calls outside (``quadrature``); ``over_tolerance`` counts the ladder's calls
        over its tolerance (plus one for a failed certificate)."""
        oq, nq = int(self._p[3]), int(self._p[4])
        quad = self.source.ladder_report(self._p[oq:oq + nq])
        cert = self.certificate
        over = quad["over_tolerance"]
        ratio, err = quad["max_ratio"], quad["max_error"]
        if self.surrogate is not None and int(self._p[7]) > 0:
            over += 0 if cert.get("passed", False) else 1
            ratio = max(ratio, float(cert.get("max_ratio", 0.0)))
            err = max(err, float(cert.get("max_abs", 0.0)))
        return {"route": "surrogate", "rtol": self.rtol, "atol": self.atol,
                "surrogate_calls": int(self._p[7]), "quadrature_calls": int(self._p[6]),
                "max_error": err, "max_ratio": ratio, "over_tolerance": over,
                "within_tolerance": over == 0, "certificate": cert, "quadrature": quad}

    def reset_report(self):
        """Zero the call counters (the box and the ladder's start rung stay)."""
        self._p[6] = self._p[7] = 0.0
        oq = int(self._p[3])
        self._p[oq + 5:oq + 10] = 0.0
        self.source.reset_report()

    def describe(self) -> str:
        box = "no box yet" if self.surrogate is None else self.surrogate.describe()
        return f"SurrogateRoute({box}; outside: {self.source.describe()})"

    __repr__ = describe

    def _repr_html_(self):
        return _html("SurrogateRoute", self)
