r"""The multi-layer transformer of paper 000, eq. (1), batched over a data set.

Model (section 3.2, eq. 1). For an input ``X`` of shape ``(L, d)``

.. math::

    F(X, \theta) = \varepsilon\, F_{(N)}(\cdots F_{(1)}(X + E)\cdots), \qquad
    F_{(\nu)}(\Lambda) = \frac{\omega}{\sqrt m}\,
        \mathrm{ReLU}\big(\mathrm{Softmax}(\kappa \Lambda U_\nu \Lambda^\top + M)
        \Lambda W_\nu\big) A_\nu + \Lambda,

with the causal mask ``M[l1, l2] = 0`` for ``l1 >= l2`` and ``-inf`` otherwise,
``U_nu`` (d x d) and ``W_nu`` (d x m) trainable with ``N(0, 1)`` entries at
initialisation, ``A_nu`` (m x d) frozen with ``Uniform{-1, +1}`` entries, and
``E`` (L x d) a fixed positional embedding (it is not among the
``M = N (m d + d^2)`` trainable parameters of section 3.2).

Section 4.1 quantities (rows ``p = i L + l``, 0-based, of ``nL``-row matrices):

- hidden states ``Lambda_0 = X + E``, ``Lambda_nu = F_nu(Lambda_{nu-1})``;
- attention scores ``sigma_{nu,p} = Softmax_l(kappa Lambda_{nu-1} U_nu Lambda_{nu-1}^T + M)``
  (the paper prints ``Lambda_nu`` inside the softmax; the block acts on its
  input ``Lambda_{nu-1}``);
- attention outputs ``o_{nu,p} = Lambda_{nu-1,i}^T sigma_{nu,p}``;
- block outputs ``mu_{nu,p} = (omega/sqrt m) sum_r a_r phi(<o_{nu,p}, w_r>)``,
  ``mu_0 = X + E``;
- compacted output ``F_p = eps sum_{nu=0}^N mu_{nu,p}``.

Because of the residual ``+ Lambda`` in each block, ``Lambda_nu = Lambda_{nu-1} + mu_nu``,
so ``eps Lambda_N = eps sum_{nu=0}^N mu_nu``: the compacted form equals eq. (1)
exactly (checked to rounding in the tests). Definition A.4 prints ``F_nu``
without the residual; with that reading the compacted form would not hold, so
the residual form of eq. (1) is the one implemented.

Loss (Lemma B.3): ``L = (1/n) sum_i ||F(X_i) - Y_i||_F^2 = (1/n) ||F - Y||_F^2``.

All products over the data set are single BLAS GEMMs on ``(nL, d)`` blocks or
batched ``(n, L, L)`` products.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.core.types import ArrayLike, PathLike, RngLike

__all__ = ["Transformer", "ForwardCache", "good_scalings", "positional_embedding",
           "MAX_CACHE_BYTES"]

#: Refuse a forward pass whose cached intermediates would exceed this many bytes.
MAX_CACHE_BYTES = 4 * 2 ** 30


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------

def int_ge1(x: object, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {x!r}")
    if x < 1:
        raise ValueError(f"{name} must be an int >= 1, got {x}")
    return int(x)


def pos_float(x: object, name: str, meaning: str = "") -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number > 0{meaning}, got {x!r}")
    try:
        v = float(x)
    except OverflowError:  # an int beyond the float range
        raise ValueError(f"{name} must be a finite real number > 0{meaning}, got {x}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite real number > 0{meaning}, got {v}")
    return v


def as_rng(seed: RngLike, rng: RngLike = None, name: str = "seed") -> np.random.Generator:
    """An ``np.random.Generator`` by the package's rule (SPEC 7,
    :func:`~attndyn.numeric.core.validate.resolve_rng`): an int, a sequence or a
    SeedSequence seeds a new stream (``default_rng(0)``'s for 0); a Generator is a source of
    entropy and advances. ``seed`` is the alias of ``rng``."""
    from attndyn.numeric.core.validate import resolve_rng
    return np.random.default_rng(resolve_rng(rng, seed, name=name))


def seed_label(seed: object) -> int | dict[str, Any] | None:
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return int(seed)
    if isinstance(seed, np.random.SeedSequence):
        return {"entropy": int(seed.entropy) if isinstance(seed.entropy, (int, np.integer))
                else str(seed.entropy), "spawn_key": list(seed.spawn_key)}
    return None


def _check_dtype(dtype: Any) -> type[np.floating[Any]]:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be 'float64' or 'float32', got {dtype!r}") from None
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    scalar: type[np.floating[Any]] = dt.type
    return scalar


def positional_embedding(L: int, d: int, kind: str = "sinusoidal") -> NDArray[np.floating[Any]]:
    """Fixed positional embedding ``E`` (L x d).

    ``"sinusoidal"``: ``E[l, 2k] = sin(l / 10000^(2k/d))``, ``E[l, 2k+1] = cos(...)``
    (the embedding of the transformer paper the model is taken from);
    ``"zeros"``: ``E = 0``.

        >>> E = positional_embedding(3, 4)
        >>> E.shape, E[0].tolist()
        ((3, 4), [0.0, 1.0, 0.0, 1.0])
        >>> bool(np.allclose((E ** 2).sum(axis=1), 2.0))
        True
    """
    L, d = int_ge1(L, "L"), int_ge1(d, "d")
    if 8 * L * d > MAX_CACHE_BYTES:
        raise ValueError(f"the positional embedding has L d = {L * d} entries "
                         f"({8 * L * d / 2**30:.1f} GiB), above the limit of "
                         f"{MAX_CACHE_BYTES / 2**30:.0f} GiB; reduce L or d")
    if kind == "zeros":
        return np.zeros((L, d))
    if kind != "sinusoidal":
        raise ValueError(f"E must be 'sinusoidal', 'zeros' or an (L, d) array, got {kind!r}")
    pos = np.arange(L)[:, None]
    k = np.arange(d)[None, :]
    ang = pos / np.power(10000.0, (2 * (k // 2)) / d)
    return np.where(k % 2 == 0, np.sin(ang), np.cos(ang))


def good_scalings(N: int, L: int, d: int, m: int, *, omega_const: float, B: float | None = None,
                  delta: float | None = None, b_const: float | None = None) -> dict[str, float]:
    r"""The scalings of Definition 5.2 ("Good Properties"), with the hidden
    constants explicit.

    - ``omega = omega_const / (N L^2 d^2.5 B^3)`` (item 1, ``Theta(.)``);
    - ``kappa = 1 / sqrt(m)`` (item 2, exact);

    with ``B = max(b_const sqrt(log(L m d / delta)), 1)`` (Lemma C.1); pass
    ``B`` directly or both ``delta`` and ``b_const``. ``eps`` is not fixed by
    Definition 5.2 (Corollary 6.1 wants ``eps <~ 1/M``, Theorem 7.1
    ``eps = Theta(xi/N)``), so it is not returned. Returns a dict with
    ``omega``, ``kappa`` and ``B``.

        >>> s = good_scalings(N=1, L=2, d=3, m=16, omega_const=1.0, B=1.0)
        >>> round(s["kappa"], 6), round(s["omega"], 6)
        (0.25, 0.016038)
        >>> round(1 / (1 * 2 ** 2 * 3 ** 2.5), 6)
        0.016038
    """
    N, L, d, m = (int_ge1(N, "N"), int_ge1(L, "L"), int_ge1(d, "d"), int_ge1(m, "m"))
    omega_const = pos_float(omega_const, "omega_const", " (constant of omega = Theta(.))")
    if B is None:
        if delta is None or b_const is None:
            raise ValueError("good_scalings needs B, or both delta and b_const "
                             "(B = max(b_const sqrt(log(L m d / delta)), 1), Lemma C.1)")
        delta = pos_float(delta, "delta", " (failure probability)")
        if delta >= 1:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        b_const = pos_float(b_const, "b_const")
        B = max(b_const * math.sqrt(math.log(L * m * d / delta)), 1.0)
    else:
        B = pos_float(B, "B")
    if not math.isfinite(B):
        raise ValueError(f"B = b_const sqrt(log(L m d / delta)) is beyond the float range "
                         f"(b_const = {b_const}, delta = {delta})")
    try:
        omega = omega_const / (N * L ** 2 * d ** 2.5 * B ** 3)
    except OverflowError:  # d ** 2.5 of an int beyond the float range
        omega = 0.0
    if omega == 0.0:
        raise ValueError(f"omega = omega_const / (N L^2 d^2.5 B^3) underflows to 0 for N = {N}, "
                         f"L = {L}, d = {d}, B = {B:g}")
    return {"omega": omega, "kappa": 1.0 / math.sqrt(m), "B": B}


# ---------------------------------------------------------------------------
# forward cache
# ---------------------------------------------------------------------------

@dataclass
class ForwardCache:
    """Intermediates of one forward pass over ``n`` sequences (section 4.1).

    Lists are over layers ``nu = 1..N`` (0-based index ``nu - 1``) except
    ``Lam``, which has ``N + 1`` entries ``Lambda_0 .. Lambda_N``.

    ``Lam[k]`` (n, L, d); ``P[k]`` (n, L, L) the attention scores (row ``l`` is
    ``sigma_{nu, iL+l}``); ``O[k]`` (nL, d) attention outputs ``o``;
    ``Z[k]`` (nL, m) pre-activations ``o^T w_r``; ``mu[k]`` (nL, d) block outputs;
    ``F`` (n, L, d) the model output.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> cache = tf.hidden(X)
        >>> len(cache.Lam), cache.P[0].shape, cache.F.shape
        (3, (5, 2, 2), (5, 2, 3))
        >>> bool(np.allclose(cache.P[0].sum(axis=-1), 1.0))
        True
    """

    Lam: list
    P: list
    O: list
    Z: list
    mu: list
    F: np.ndarray

    @property
    def n(self) -> int:
        return int(self.F.shape[0])


class Transformer:
    r"""The N-layer transformer of eq. (1) (paper 000, section 3.2).

    Parameters
    ----------
    N, L, d, m : int >= 1
        Depth, sequence length, embedding width, feed-forward width.
    eps : float > 0
        Output scaling ``varepsilon`` of eq. (1).
    omega : float > 0
        Output scaling of each block.
    kappa : float > 0
        Attention scaling. Definition 5.2's choices: :func:`good_scalings`.
    rng : int, SeedSequence or Generator
        Draws ``U_nu, W_nu ~ N(0, 1)`` and ``A_nu ~ Uniform{-1, +1}`` layer by
        layer (U, W, A for layer 1, then layer 2, ...), by the package's rule
        (:func:`~attndyn.numeric.core.validate.resolve_rng`, SPEC 7): the same int gives the
        same weights; a Generator is a source of entropy and advances (the same object
        twice: two different models; ``default_rng(0)`` is not ``0``). ``seed`` is its
        older name; passing both is an error.
    E : "sinusoidal", "zeros" or (L, d) array
        Fixed positional embedding (:func:`positional_embedding`).
    E_scale : float >= 0
        Multiplies a named embedding (the sinusoidal one has ``||E_l||^2 = d/2``).
    mask : "causal"
        The only mask of the paper (Definition A.4); anything else is refused.
    dtype : "float64" (default) or "float32"
        Precision of the weights, the forward pass and the gradients. The
        weights are drawn in float64 (the same stream for both) and rounded;
        inputs are rounded on entry; losses are returned as Python floats.

    There are no defaults for ``eps``, ``omega``, ``kappa``: the paper's
    "good" values depend on hidden constants (:func:`good_scalings`).

    Examples
    --------
    >>> import numpy as np, attndyn
    >>> tf = attndyn.Transformer(N=1, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=0)
    >>> X = np.ones((5, 2, 3))
    >>> tf(X).shape   # F(X, theta) of eq. (1): (n, L, d)
    (5, 2, 3)
    >>> tf.n_params   # U (d x d) and W (d x m) per layer
    21
    """

    def __init__(self, N: int, L: int, d: int, m: int, eps: float, omega: float, kappa: float, *,
                 rng: RngLike = None, seed: RngLike = None, E: str | ArrayLike = "sinusoidal",
                 E_scale: float = 1.0, mask: str = "causal", dtype: str | np.dtype = "float64"
                 ) -> None:
        self.dtype = _check_dtype(dtype)
        self.N = int_ge1(N, "N")
        self.L = int_ge1(L, "L")
        self.d = int_ge1(d, "d")
        self.m = int_ge1(m, "m")
        self.eps = pos_float(eps, "eps", " (output scaling of eq. 1)")
        self.omega = pos_float(omega, "omega", " (block output scaling)")
        self.kappa = pos_float(kappa, "kappa", " (attention scaling)")
        if not (isinstance(mask, str) and mask == "causal"):
            raise ValueError(f"mask must be 'causal' (the causal mask M of Definition A.4); "
                             f"got {mask!r}")
        self.mask = "causal"
        n_params = self.N * (self.m * self.d + 2 * self.d * self.d + self.m * self.d)
        if n_params * 8 > MAX_CACHE_BYTES:
            raise ValueError(f"N (m d + d^2) parameters need {n_params * 8 / 2**30:.1f} GiB, "
                             f"above the limit of {MAX_CACHE_BYTES / 2**30:.0f} GiB; "
                             f"reduce N, d or m")
        if isinstance(E_scale, bool) or not isinstance(E_scale, (int, float, np.integer,
                                                                 np.floating)):
            raise TypeError(f"E_scale must be a real number >= 0, got {E_scale!r}")
        if not (abs(E_scale) <= 1.7976931348623157e308 and E_scale >= 0):  # ints beyond too
            raise ValueError(f"E_scale must be a finite real number >= 0, got {E_scale}")
        E_scale = float(E_scale)
        # the causal mask (L x L, a bool and a float copy) and E are made here, before any
        # forward pass could refuse them
        fixed = 9 * self.L * self.L + 8 * self.L * self.d
        if fixed > MAX_CACHE_BYTES:
            raise ValueError(f"L = {self.L}: the causal mask and E need {fixed / 2**30:.1f} GiB, "
                             f"above the limit of {MAX_CACHE_BYTES / 2**30:.0f} GiB; reduce L")
        if isinstance(E, str):
            self.E = E_scale * positional_embedding(self.L, self.d, E)
            self._E_kind = E if E_scale == 1.0 else f"{E}*{E_scale:g}"
        else:
            E = np.asarray(E, dtype=np.float64)
            if E.shape != (self.L, self.d):
                raise ValueError(f"E must have shape (L, d) = ({self.L}, {self.d}), "
                                 f"got {E.shape}")
            if not np.all(np.isfinite(E)):
                raise ValueError("E must be finite")
            self.E = E_scale * E
            self._E_kind = "array"
        from attndyn.numeric.core.validate import resolve_rng
        ss = resolve_rng(rng, seed, name="Transformer")
        given = seed if rng is None else rng
        # an int or SeedSequence is its own label; a drawn stream records its entropy
        self.seed = seed_label(given if isinstance(given, (int, np.integer,
                                                            np.random.SeedSequence)) else ss)
        rng = np.random.default_rng(ss)
        self.U, self.W, self.A = [], [], []
        for _ in range(self.N):
            self.U.append(rng.standard_normal((self.d, self.d)))
            self.W.append(rng.standard_normal((self.d, self.m)))
            self.A.append(rng.choice(np.array([-1.0, 1.0]), size=(self.m, self.d)))
        self._c = self.omega / math.sqrt(self.m)
        tril = np.tri(self.L, dtype=bool)
        self._neg = np.where(tril, 0.0, -np.inf)
        self._cast()

    def _cast(self) -> None:
        dt = self.dtype
        self.U = [np.asarray(u, dtype=dt) for u in self.U]
        self.W = [np.asarray(w, dtype=dt) for w in self.W]
        self.A = [np.asarray(a, dtype=dt) for a in self.A]
        self.E = np.asarray(self.E, dtype=dt)
        self._neg = np.asarray(self._neg, dtype=dt)

    def astype(self, dtype: str | np.dtype) -> Transformer:
        """A copy with the weights rounded to ``dtype`` ("float32" or "float64")."""
        new = self.copy()
        new.dtype = _check_dtype(dtype)
        new._cast()
        return new

    # -- description ------------------------------------------------------
    @property
    def n_params(self) -> int:
        """Number of trainable parameters ``M = N (m d + d^2)`` (section 3.2)."""
        return int(self.N * (self.m * self.d + self.d * self.d))

    def config(self) -> dict:
        """JSON-serialisable constructor arguments (without the seeded weights)."""
        return {"N": self.N, "L": self.L, "d": self.d, "m": self.m, "eps": self.eps,
                "omega": self.omega, "kappa": self.kappa, "seed": self.seed,
                "E": self._E_kind, "mask": self.mask, "dtype": np.dtype(self.dtype).name}

    def _repr_html_(self) -> str:
        from attndyn.numeric.core.display import html_summary
        return html_summary("Transformer", {
            "N": self.N, "L": self.L, "d": self.d, "m": self.m, "eps": self.eps,
            "omega": self.omega, "kappa": self.kappa, "seed": self.seed,
            "parameters": self.n_params})

    def __repr__(self) -> str:
        return (f"Transformer(N={self.N}, L={self.L}, d={self.d}, m={self.m}, eps={self.eps:g}, "
                f"omega={self.omega:g}, kappa={self.kappa:g}, seed={self.seed!r})")

    # -- parameters -------------------------------------------------------
    def parameters(self) -> list[dict[str, np.ndarray]]:
        """A list over layers (0-based) of dicts with keys ``"U"``, ``"W"``, ``"A"``
        (copies). The positional embedding is :attr:`E`."""
        return [{"U": u.copy(), "W": w.copy(), "A": a.copy()}
                for u, w, a in zip(self.U, self.W, self.A)]

    def set_parameters(self, params: Sequence[Mapping[str, ArrayLike]]) -> None:
        """Set the parameters from a list over layers of dicts with keys ``"U"``
        and ``"W"`` (and optionally ``"A"``), as returned by :meth:`parameters`."""
        if not isinstance(params, (list, tuple)) or len(params) != self.N:
            raise ValueError(f"params must be a list of N = {self.N} dicts with keys 'U', 'W'")
        new = []
        for k, p in enumerate(params):
            if not isinstance(p, dict) or "U" not in p or "W" not in p:
                raise ValueError(f"params[{k}] must be a dict with keys 'U' and 'W'")
            u = np.array(p["U"], dtype=np.float64)
            w = np.array(p["W"], dtype=np.float64)
            a = np.array(p["A"], dtype=np.float64) if "A" in p else self.A[k].copy()
            for name, x, shape in (("U", u, (self.d, self.d)), ("W", w, (self.d, self.m)),
                                   ("A", a, (self.m, self.d))):
                if x.shape != shape:
                    raise ValueError(f"params[{k}]['{name}'] must have shape {shape}, "
                                     f"got {x.shape}")
                if not np.all(np.isfinite(x)):
                    raise ValueError(f"params[{k}]['{name}'] must be finite")
            new.append((u, w, a))
        self.U = [x[0].astype(self.dtype) for x in new]
        self.W = [x[1].astype(self.dtype) for x in new]
        self.A = [x[2].astype(self.dtype) for x in new]

    def theta(self) -> NDArray[np.floating[Any]]:
        """The flat trainable vector ``theta`` in R^M: for each layer
        ``vec(U_nu)`` then ``vec(W_nu)``, row-major (the paper's ``vec``)."""
        return np.concatenate([np.concatenate([u.ravel(), w.ravel()])
                               for u, w in zip(self.U, self.W)])

    def set_theta(self, theta: ArrayLike) -> None:
        """Inverse of :meth:`theta`."""
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_params,):
            raise ValueError(f"theta must have shape ({self.n_params},), got {theta.shape}")
        dd, dm = self.d * self.d, self.d * self.m
        off = 0
        for k in range(self.N):
            self.U[k] = theta[off:off + dd].reshape(self.d, self.d).astype(self.dtype)
            off += dd
            self.W[k] = theta[off:off + dm].reshape(self.d, self.m).astype(self.dtype)
            off += dm

    def copy(self) -> Transformer:
        """An independent copy (same weights)."""
        new = object.__new__(Transformer)
        new.__dict__.update(self.__dict__)
        new.U = [u.copy() for u in self.U]
        new.W = [w.copy() for w in self.W]
        new.A = [a.copy() for a in self.A]
        new.E = self.E.copy()
        return new

    def save(self, path: PathLike) -> str:
        """Save configuration and weights to ``path`` (``.npz``)."""
        import json
        path = str(path)
        if not path.endswith(".npz"):
            path += ".npz"
        arrays: dict[str, Any] = {"E": self.E}
        for k in range(self.N):
            arrays[f"U{k}"], arrays[f"W{k}"], arrays[f"A{k}"] = self.U[k], self.W[k], self.A[k]
        header = dict(self.config(), format="attndyn-transformer-1")
        np.savez_compressed(path, header=np.array(json.dumps(header)), **arrays)
        return path

    @classmethod
    def load(cls, path: PathLike) -> Transformer:
        """Load a model saved by :meth:`save`. Nothing is unpickled; only a
        regular file is opened and its declared sizes are bounded before
        anything is inflated (``numeric.core.safeio``); a bad file raises a
        one-line ``ValueError`` naming the path, a missing one ``FileNotFoundError``
        (as every loader here)."""
        from attndyn.numeric.core import safeio
        what = "not a valid attndyn transformer file:"
        try:
            with safeio.open_npz(path, what) as f:
                h = safeio.npz_json(f, "header")
                if not isinstance(h, dict) or h.get("format") != "attndyn-transformer-1":
                    raise f.fail("no attndyn-transformer-1 header")
                try:
                    N = int_ge1(h["N"], "N")
                    E = safeio.npz_array(f, "E", 2)
                    model = cls(N, h["L"], h["d"], h["m"], h["eps"], h["omega"], h["kappa"],
                                seed=0, E=E, dtype=h.get("dtype", "float64"))
                    model.set_parameters([{"U": safeio.npz_array(f, f"U{k}", 2),
                                           "W": safeio.npz_array(f, f"W{k}", 2),
                                           "A": safeio.npz_array(f, f"A{k}", 2)}
                                          for k in range(N)])
                except (KeyError, TypeError, ValueError) as exc:
                    if isinstance(exc, safeio.BadFile):
                        raise
                    raise f.fail(f"{type(exc).__name__}: {exc}") from None
                model.seed = h.get("seed")
                model._E_kind = str(h.get("E", "array"))
        except safeio.BadFile as exc:
            raise ValueError(safeio.one_line(str(exc))) from None
        return model

    # -- input checks -----------------------------------------------------
    def check_X(self, X: ArrayLike, name: str = "X") -> NDArray[np.floating[Any]]:
        """``X`` as a float64 array of shape (n, L, d) (a single (L, d) input is
        promoted to n = 1); errors name the argument."""
        if np.iscomplexobj(X):  # the cast would drop the imaginary part with a warning
            raise TypeError(f"{name} must be real, got a complex array")
        try:
            X = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a real array of shape (n, L, d)") from None
        if X.ndim == 2:
            X = X[None]
        if X.ndim != 3 or X.shape[1:] != (self.L, self.d) or X.shape[0] < 1:
            raise ValueError(f"{name} must have shape (n, L, d) = (n, {self.L}, {self.d}) "
                             f"with n >= 1, got {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError(f"{name} must be finite (found NaN or inf)")
        return X

    def check_XY(self, X: ArrayLike, Y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        X = self.check_X(X, "X")
        Y = self.check_X(Y, "Y")
        if Y.shape != X.shape:
            raise ValueError(f"Y must have the shape of X, {X.shape}, got {Y.shape}")
        return X, Y

    def _check_size(self, n: int) -> None:
        per = 8 * (self.N + 1) * n * self.L * (2 * self.d + self.L + self.m) + 8 * n * self.L * self.m
        if per > MAX_CACHE_BYTES:
            raise ValueError(f"a forward pass over n = {n} sequences would cache "
                             f"{per / 2**30:.1f} GiB (limit {MAX_CACHE_BYTES / 2**30:.0f} GiB); "
                             f"pass fewer sequences at a time")

    # -- forward ------------------------------------------------------------
    def _forward(self, X: np.ndarray) -> ForwardCache:
        n, L, d = X.shape
        self._check_size(n)
        Lam = np.asarray(X, dtype=self.dtype) + self.E
        Lams, Ps, Os, Zs, mus = [Lam], [], [], [], []
        for U, W, A in zip(self.U, self.W, self.A):
            S = np.matmul(np.matmul(Lam, U), Lam.transpose(0, 2, 1))
            S *= self.kappa
            S += self._neg
            S -= S.max(axis=2, keepdims=True)  # the diagonal is never masked
            np.exp(S, out=S)
            S /= S.sum(axis=2, keepdims=True)
            O = np.matmul(S, Lam).reshape(n * L, d)
            Z = O @ W
            mu = np.maximum(Z, 0.0) @ A
            mu *= self._c
            Lam = Lam + mu.reshape(n, L, d)
            Ps.append(S)
            Os.append(O)
            Zs.append(Z)
            mus.append(mu)
            Lams.append(Lam)
        return ForwardCache(Lam=Lams, P=Ps, O=Os, Z=Zs, mu=mus, F=self.eps * Lam)

    def forward(self, X: ArrayLike) -> NDArray[np.floating[Any]]:
        """``F(X, theta)`` of eq. (1); X of shape (n, L, d) -> (n, L, d)."""
        return self._forward(self.check_X(X)).F

    __call__ = forward

    def hidden(self, X: ArrayLike) -> ForwardCache:
        """All section 4.1 quantities for the inputs X (a :class:`ForwardCache`)."""
        return self._forward(self.check_X(X))

    def compact_output(self, X: ArrayLike) -> NDArray[np.floating[Any]]:
        """The compacted output ``F = eps sum_{nu=0}^N mu_nu`` (section 4.1), shape (nL, d)."""
        X = self.check_X(X)
        c = self._forward(X)
        tot = (X + self.E).reshape(-1, self.d).copy()
        for mu in c.mu:
            tot += mu
        out: np.ndarray = self.eps * tot
        return out

    def loss(self, X: ArrayLike, Y: ArrayLike) -> float:
        """Training objective of Lemma B.3: ``(1/n) ||F - Y||_F^2``."""
        X, Y = self.check_XY(X, Y)
        R = self._forward(X).F - Y
        return float(np.vdot(R, R) / X.shape[0])

    # -- gradients ----------------------------------------------------------
    def _backward(self, c: ForwardCache, Y: ArrayLike, *, keep_delta: bool = False
                  ) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[np.ndarray]]:
        """Reverse-mode chain rule through eq. (1), op by op (the fast path).

        Returns ``(grads, deltas)`` with ``grads`` a list of (dU, dW) and
        ``deltas[k] = dL/dmu_{k+1}`` (n, L, d), the adjoint of the block output,
        which equals ``dL/dLambda_{k+1}`` because ``Lambda_nu = Lambda_{nu-1} + mu_nu``.
        """
        n, L, d = c.F.shape
        nl = n * L
        G = (2.0 * self.eps / n) * (c.F - np.asarray(Y, dtype=self.dtype))  # dL/dLambda_N
        grads: list[Any] = [None] * self.N
        deltas: list[Any] = [None] * self.N
        for k in range(self.N - 1, -1, -1):
            U, W, A = self.U[k], self.W[k], self.A[k]
            Lam, P, O, Z = c.Lam[k], c.P[k], c.O[k], c.Z[k]
            if keep_delta:
                deltas[k] = G.copy()
            dZ = G.reshape(nl, d) @ A.T
            dZ *= self._c
            dZ *= Z > 0
            dW = O.T @ dZ
            dO = (dZ @ W.T).reshape(n, L, d)
            dP = np.matmul(dO, Lam.transpose(0, 2, 1))  # (n, L, L)
            dS = dP
            dS -= (dP * P).sum(axis=2, keepdims=True)
            dS *= P
            dS *= self.kappa
            T1 = np.matmul(dS, Lam)  # (n, L, d)
            dU = Lam.reshape(nl, d).T @ T1.reshape(nl, d)
            T2 = np.matmul(dS.transpose(0, 2, 1), Lam)
            Gp = np.matmul(P.transpose(0, 2, 1), dO)
            Gp += (T1.reshape(nl, d) @ U.T).reshape(n, L, d)
            Gp += (T2.reshape(nl, d) @ U).reshape(n, L, d)
            G = G + Gp  # residual path
            grads[k] = (dU, dW)
        return grads, deltas

    def gradients(self, X: ArrayLike, Y: ArrayLike, *, form: str = "exact"
                  ) -> list[dict[str, np.ndarray]]:
        """``dL/dU_nu`` and ``dL/dW_nu`` for every layer: a list over layers
        (0-based) of dicts with keys ``"U"`` (d x d) and ``"W"`` (d x m).

        ``form="exact"``: the chain rule (reverse mode; equals Lemma B.4 parts
        1-2 with the exact adjoint ``dL/dmu_nu``). ``form="lemma"``: parts 1-3
        of Lemma B.4 as printed (part 3 read as a d x d recursion, see
        :func:`attndyn.numeric.transformer.gradients.lemma_gradients` and
        docs/transformer.md), which keeps only the same-token Jacobian and
        differs from the exact gradient when ``N >= 2`` and ``L >= 2``.
        """
        X, Y = self.check_XY(X, Y)
        if form == "exact":
            grads, _ = self._backward(self._forward(X), Y)
            return [{"U": u, "W": w} for u, w in grads]
        if form == "lemma":
            from .gradients import lemma_gradients
            lemma: list[dict[str, np.ndarray]] = lemma_gradients(self, X, Y, form="lemma")
            return lemma
        raise ValueError(f"form must be 'exact' or 'lemma', got {form!r}")

    def loss_and_grad(self, X: np.ndarray, Y: np.ndarray) -> tuple[float, np.ndarray]:
        """``(L, grad_theta L)`` with the gradient flattened like :meth:`theta`
        (inputs already checked: used by the training loops)."""
        c = self._forward(X)
        R = c.F - np.asarray(Y, dtype=self.dtype)
        loss = float(np.vdot(R, R) / X.shape[0])
        grads, _ = self._backward(c, Y)
        g = np.concatenate([np.concatenate([u.ravel(), w.ravel()]) for u, w in grads])
        return loss, g

    def adjoints(self, X: ArrayLike, Y: ArrayLike) -> list[np.ndarray]:
        """The exact ``dL/dmu_nu`` for every layer, a list of (nL, d) arrays."""
        X, Y = self.check_XY(X, Y)
        _, deltas = self._backward(self._forward(X), Y, keep_delta=True)
        return [g.reshape(-1, self.d) for g in deltas]

    # -- kernels ------------------------------------------------------------
    def kernel(self, X: ArrayLike, layer: int, *, part: str = "full", kernel: str = "definition"
               ) -> NDArray[np.floating[Any]]:
        """The layer kernel ``H_nu`` of Definition B.5 (nL x nL, rows
        ``p = i L + l``; ``layer`` 0-based). ``part="W"`` gives the
        ``<beta, beta>`` part ``H'_nu`` of Assumption 5.1, ``part="U"`` the
        ``<gamma, gamma>`` part. ``kernel="exact"``: the Jacobian Gram ``K_nu``
        of the block (nLd x nLd). See :mod:`attndyn.numeric.transformer.kernel`."""
        from .kernel import layer_kernel
        kern: np.ndarray = layer_kernel(self, X, layer, part=part, kernel=kernel)
        return kern
