"""Gaussian laws of the pre-activation array ``G`` (paper 003, Theorem 1 and its variants).

Every law is the distribution of the flattened ``L x L x K`` array ``G``
(flat index ``(i*L + j)*K + k``) as a SymPy mean vector and covariance
matrix, *linear* in the order parameters:

=========  =======================  ==================================================
kind       mean ``E G_ijk``          ``Cov(G_ijk, G_i'j'l)``
=========  =======================  ==================================================
tied       0                        ``(C_ii'C_jj' + C_ij'C_ji') q_kl``    (eqs. 10, 79)
untied     ``C_ij m_k``             ``C_ii'C_jj' q1_kl + C_ij'C_ji' q2_kl`` (section 4.1)
direct     0                        ``C_ii'C_jj' Omega_kl + C_ij'C_ji' Psi_kl`` (app. E)
general    ``C_ij mu_ijk``          ``C_ii'C_jj' Omega_ab + C_ij'C_ji' Psi_ab`` (eq. 4)
=========  =======================  ==================================================

(``a = (ijk)``, ``b = (i'j'l)`` in the general law, whose order parameters
carry all three indices.) The covariances are positive *semi*-definite; the
tied law is degenerate by construction, ``G_ijk = G_jik``.
:func:`merge_duplicates` removes such exact duplicates (identical mean and
covariance rows) so that the remaining variables have a covariance that is
definite for generic order parameters.

Symmetric convention (MATH.md). Each matrix order parameter is a symmetric
matrix with one symbol per unordered pair. Its gradient is taken with every
matrix entry an independent variable: ``grad_X[k, l] = dPhi/dX_kk`` on the
diagonal and ``(1/2) dPhi/dX_kl`` (half the total derivative) off it. With
``entrywise=True`` the law is built with one symbol per *ordered* entry
instead (``X_kl`` and ``X_lk`` distinct, the covariance symmetric only when
they are equal); differentiating through the symmetrised covariance then
gives the same convention directly. The numeric path uses that form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy as sp
from numpy.typing import ArrayLike, NDArray

from .symbols import g_array
from .sympify import as_sympy

__all__ = [
    "g_array", "q_matrix", "sym_matrix", "vector_symbols", "check_covariance",
    "GaussianLaw", "tied_law", "untied_law", "direct_law", "general_law", "make_law",
    "merge_duplicates", "check_psd", "LAW_KINDS",
]

LAW_KINDS = ("tied", "untied", "direct", "general")


# -- symbols -----------------------------------------------------------------
def sym_matrix(K: int, name: str, entrywise: bool = False) -> sp.ImmutableMatrix:
    """``K x K`` matrix of symbols ``name_kl`` (1-based names). Symmetric (one
    symbol per unordered pair) unless ``entrywise``.

        >>> sym_matrix(2, "Psi"), sym_matrix(2, "M", entrywise=True)[0, 1]
        (Matrix([
        [Psi_11, Psi_12],
        [Psi_12, Psi_22]]), M_12)
    """
    def label(a: int, b: int) -> str:
        return f"{name}_{a + 1}{b + 1}" if K < 10 else f"{name}_{a + 1}_{b + 1}"

    def sym(k: int, l: int) -> sp.Symbol:
        if entrywise:
            return sp.Symbol(label(k, l), real=True)
        a, b = min(k, l), max(k, l)
        return sp.Symbol(label(a, b), real=True)
    return sp.ImmutableMatrix(K, K, lambda k, l: sym(k, l))


def q_matrix(K: int, name: str = "q") -> sp.ImmutableMatrix:
    """Symmetric ``K x K`` matrix of overlap symbols ``q_kl`` (1-based names, as
    in the paper: ``q_12`` is the overlap of indices 0 and 1).

        >>> q_matrix(2)
        Matrix([
        [q_11, q_12],
        [q_12, q_22]])
    """
    return sym_matrix(K, name)


def vector_symbols(n: int, name: str) -> sp.ImmutableMatrix:
    """Column of ``n`` symbols ``name_1 .. name_n`` (1-based names, as in the paper).

        >>> vector_symbols(2, "m").T
        Matrix([[m_1, m_2]])
    """
    return sp.ImmutableMatrix(n, 1, lambda a, _: sp.Symbol(f"{name}_{a + 1}", real=True))


def _covariance_entry(x: object, name: str, i: int, j: int) -> sp.Expr:
    """One entry of a token covariance as an exact or float SymPy number.

    Only numbers are read (Python/numpy ints and floats, ``Fraction``, SymPy numbers);
    anything else, a string included, is refused by type, never converted."""
    from fractions import Fraction
    if isinstance(x, (str, bytes, np.str_, np.bytes_)):
        raise TypeError(f"{name} must hold numbers, not strings (text is never evaluated): "
                        f"{name}[{i}][{j}] is text")
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}[{i}][{j}] must be a number, got a bool")
    if isinstance(x, (int, np.integer)):
        return sp.Integer(int(x))
    if isinstance(x, (float, np.floating)):
        return sp.Float(float(x))
    if isinstance(x, Fraction):
        return sp.Rational(x.numerator, x.denominator)
    if isinstance(x, sp.Number):
        return x
    if isinstance(x, sp.Basic) and x.is_number and not x.free_symbols:
        return x  # an exact constant such as sqrt(2)/2; evaluated below, never parsed
    raise TypeError(f"{name}[{i}][{j}] must be a number (int, float, Fraction or a SymPy "
                    f"number), got {type(x).__name__}")


def _covariance_rows(C: Any, L: int, name: str) -> list[list[Any]]:
    """The ``L x L`` entries of ``C`` read by shape, two levels deep and no deeper.

    A user container is never handed to SymPy: its rows and entries are read here, and
    anything that is not an ``L x L`` table of numbers is refused before any conversion."""
    if isinstance(C, (str, bytes)):
        raise TypeError(f"{name} must be an {L} x {L} matrix of numbers, not text "
                        "(text is never evaluated)")
    if isinstance(C, sp.MatrixBase):
        if C.shape != (L, L):
            raise ValueError(f"{name} must have shape ({L}, {L}), got {C.shape}")
        rows = [[C[i, j] for j in range(L)] for i in range(L)]
    elif isinstance(C, np.ndarray):
        if C.shape != (L, L):
            raise ValueError(f"{name} must have shape ({L}, {L}), got {C.shape}")
        if C.dtype.kind not in "biufO":
            raise TypeError(f"{name} must hold numbers, got an array of dtype {C.dtype}")
        rows = [[C[i, j] for j in range(L)] for i in range(L)]
    elif isinstance(C, (list, tuple)):
        if len(C) != L:
            raise ValueError(f"{name} must have shape ({L}, {L}), got {len(C)} rows")
        rows = []
        for i, row in enumerate(C):
            if isinstance(row, np.ndarray) and row.ndim == 1:
                row = list(row)
            if not isinstance(row, (list, tuple)) or len(row) != L:
                raise ValueError(f"{name} must have shape ({L}, {L}): row {i} is not a "
                                 f"list of {L} numbers")
            rows.append(list(row))
    else:
        raise TypeError(f"{name} must be an {L} x {L} matrix (nested lists, a numpy array "
                        f"or a SymPy matrix), got {type(C).__name__}")
    return [[_covariance_entry(rows[i][j], name, i, j) for j in range(L)] for i in range(L)]


def check_covariance(C: Any, L: int, name: str = "C") -> sp.ImmutableMatrix:
    """Validate a token covariance: ``L x L``, symmetric, positive semi-definite.

    The entries are read one by one against a whitelist of number types
    (:func:`_covariance_rows`); no user container ever reaches ``sympify`` or
    ``Matrix``, so text nested at any depth is refused, never evaluated.

        >>> check_covariance([[1, 0.5], [0.5, 1]], 2)
        Matrix([
        [  1, 0.5],
        [0.5,   1]])
        >>> check_covariance([[1, 2], [2, 1]], 2)
        Traceback (most recent call last):
            ...
        ValueError: C must be positive semi-definite (smallest eigenvalue -1)
    """
    if C is None:
        return sp.ImmutableMatrix(sp.eye(L))
    rows = _covariance_rows(C, L, name)
    # before the symmetry test: nan != nan made [[nan]] read "C must be symmetric"
    for i in range(L):
        for j in range(L):
            if rows[i][j].is_finite is not True:
                raise ValueError(f"{name} must be finite: {name}[{i}][{j}] is {rows[i][j]}")
    M = sp.ImmutableMatrix(L, L, lambda i, j: rows[i][j])
    if not M.is_symmetric():
        raise ValueError(f"{name} must be symmetric")
    try:
        A = np.array([[float(rows[i][j]) for j in range(L)] for i in range(L)], dtype=float)
    except TypeError:
        raise TypeError(f"{name} must have numeric entries") from None
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} must be finite")
    ev = np.linalg.eigvalsh(A)
    if ev.min() < -1e-12 * max(1.0, abs(ev).max()):
        raise ValueError(f"{name} must be positive semi-definite (smallest eigenvalue {ev.min():.3g})")
    return M


def check_psd(S: ArrayLike, name: str, what: str = "covariance of G", rtol: float = 1e-10
              ) -> NDArray[np.float64]:
    """Raise ``ValueError`` naming ``name`` if the symmetric matrix ``S`` is not PSD.

        >>> check_psd(np.eye(2), "C").tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        >>> check_psd(np.array([[1.0, 2.0], [2.0, 1.0]]), "C")
        Traceback (most recent call last):
            ...
        ValueError: C: the covariance of G implied by C is not positive semi-definite (smallest eigenvalue -1)
    """
    S = np.asarray(S, dtype=float)
    if not np.all(np.isfinite(S)):
        raise ValueError(f"{name}: the {what} is not finite (NaN or inf in {name})")
    ev = np.linalg.eigvalsh((S + S.T) / 2) if S.size else np.zeros(0)
    scale = max(1.0, float(np.abs(ev).max())) if ev.size else 1.0
    if ev.size and ev.min() < -rtol * scale:
        raise ValueError(f"{name}: the {what} implied by {name} is not positive semi-definite "
                         f"(smallest eigenvalue {ev.min():.3g})")
    return S


# -- laws ----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class GaussianLaw:
    """Gaussian law of the flattened pre-activations, linear in its order parameters.

    Attributes
    ----------
    kind : "tied", "untied", "direct" or "general"
    L, K : int
    C : token covariance
    variables : the ``G`` symbols, flat order ``(i*L + j)*K + k`` (after
        :func:`merge_duplicates`, only the representatives)
    mean : ``P x 1`` SymPy matrix
    cov : ``P x P`` SymPy matrix
    order_parameters : ordered dict ``name -> SymPy matrix`` (vectors are ``n x 1``)
    matrix_parameters : names of the symmetric matrix parameters (symmetric convention)
    substitution : ``{G symbol: representative}`` for merged duplicates
    entrywise : whether matrix parameters carry one symbol per ordered entry

    Examples
    --------
    >>> law = tied_law(1, 2)
    >>> isinstance(law, GaussianLaw), law.variables, law.cov
    (True, (G_000, G_001), Matrix([
    [2*q_11, 2*q_12],
    [2*q_12, 2*q_22]]))
    """

    kind: str
    L: int
    K: int
    C: sp.ImmutableMatrix
    variables: tuple
    mean: sp.ImmutableMatrix
    cov: sp.ImmutableMatrix
    order_parameters: dict
    matrix_parameters: tuple = ()
    substitution: dict = field(default_factory=dict)
    entrywise: bool = False

    @property
    def P(self) -> int:
        return len(self.variables)

    @property
    def centred(self) -> bool:
        return all(as_sympy(m, "mean") == 0 for m in self.mean)

    def input_symbols(self) -> list:
        """Order parameters flattened in input order: each parameter row-major,
        vectors first as they were declared (both ``X_kl`` and ``X_lk``)."""
        out = []
        for M in self.order_parameters.values():
            out.extend(list(M))
        return out

    def input_layout(self) -> list:
        """``[(name, shape, offset)]`` of the flat input vector."""
        lay = []
        off = 0
        for name, M in self.order_parameters.items():
            lay.append((name, M.shape, off))
            off += M.shape[0] * M.shape[1]
        return lay

    @property
    def n_inputs(self) -> int:
        return sum(M.shape[0] * M.shape[1] for M in self.order_parameters.values())

    def reduce_loss(self, expr: sp.Expr) -> sp.Expr:
        """Rewrite a loss expression in the representative variables."""
        expr = as_sympy(expr, "loss")
        return expr.xreplace(self.substitution) if self.substitution else expr

    # numeric helpers ------------------------------------------------------
    def linear_maps(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(S, M)``: numeric arrays with ``Sigma = sum_t x_t S[t]`` and
        ``mean = sum_t x_t M[t]`` for the flat input vector ``x``.

        Built from the entrywise version of the law: ``S[t]`` is the derivative
        of the covariance with respect to one *ordered* matrix entry, so
        ``(1/2) tr(S[t] H)`` is the symmetric-convention gradient.
        """
        ent = self if self.entrywise else make_law(self.kind, self.L, self.K, self.C,
                                                   entrywise=True, merge=bool(self.substitution))
        syms = ent.input_symbols()
        n, P = len(syms), ent.P
        S = np.zeros((n, P, P))
        M = np.zeros((n, P))
        for a in range(P):
            for t, s in _linear_coeffs(ent.mean[a]).items():
                M[syms.index(t), a] = s
            for b in range(P):
                for t, s in _linear_coeffs(ent.cov[a, b]).items():
                    S[syms.index(t), a, b] = s
        return S, M

    def split_inputs(self, x: ArrayLike) -> dict[str, np.ndarray]:
        x = np.asarray(x, dtype=float)
        out = {}
        for name, shape, off in self.input_layout():
            out[name] = x[off:off + shape[0] * shape[1]].reshape(shape)
        return out

    def flatten_inputs(self, values: dict, argument_names: dict | None = None) -> np.ndarray:
        """Validate and flatten ``{name: array}`` into the input vector.

        Raises ``ValueError`` naming the argument for a wrong shape, NaN/inf, an
        asymmetric matrix parameter, or a covariance that is not PSD.
        """
        parts = []
        for name, shape, _ in self.input_layout():
            arg = (argument_names or {}).get(name, name)
            if name not in values:
                raise TypeError(f"missing order parameter {arg!r}")
            try:
                if np.iscomplexobj(values[name]):  # the cast would drop the imaginary part
                    raise TypeError(f"{arg} must be real, got a complex array")
                v = np.asarray(values[name], dtype=float)
            except ValueError:
                raise TypeError(f"{arg} must be a numeric array") from None
            except TypeError as exc:
                if "must be real" in str(exc):
                    raise
                raise TypeError(f"{arg} must be a numeric array") from None
            if shape[1] == 1 and v.ndim == 1:
                v = v.reshape(-1, 1)
            if v.shape != shape:
                want = (shape[0],) if shape[1] == 1 else shape
                raise ValueError(f"{arg} must have shape {want}, got {np.shape(values[name])}")
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{arg} contains NaN or inf")
            if name in self.matrix_parameters:
                if not np.allclose(v, v.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(v).max())):
                    raise ValueError(f"{arg} must be symmetric")
            parts.append(v.ravel())
        x = np.concatenate(parts) if parts else np.zeros(0)
        S, _ = self.linear_maps_cached()
        Sig = np.tensordot(x, S, axes=1)
        names = [(argument_names or {}).get(n, n) for n, _, _ in self.input_layout()
                 if n in self.matrix_parameters]
        check_psd(Sig, ", ".join(names) if names else "order parameters")
        return x

    def linear_maps_cached(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        cache = self.__dict__.setdefault("_maps_cache", {})
        if "maps" not in cache:
            cache["maps"] = self.linear_maps()
        maps: tuple[NDArray[np.float64], NDArray[np.float64]] = cache["maps"]
        return maps


def _linear_coeffs(e: sp.Expr) -> dict[sp.Symbol, float]:
    e = sp.expand(as_sympy(e))
    out: dict[sp.Symbol, float] = {}
    for term in sp.Add.make_args(e):
        if term == 0:
            continue
        coeff, syms = term.as_coeff_mul()
        if len(syms) != 1 or not syms[0].is_Symbol:
            # products of a number with one symbol only
            c, rest = term.as_independent(*term.free_symbols)
            if len(rest.free_symbols) != 1 or not rest.is_Symbol:
                raise ValueError(f"law entry {e} is not linear in the order parameters")
            coeff, syms = c, (rest,)
        s = syms[0]
        out[s] = out.get(s, 0.0) + float(coeff)
    return out


def _B(C: Any, i: int, j: int, i2: int, j2: int) -> sp.Expr:
    return C[i, i2] * C[j, j2] + C[i, j2] * C[j, i2]


def _flat(L: int, K: int) -> list[tuple[int, int, int]]:
    return [(i, j, k) for i in range(L) for j in range(L) for k in range(K)]


def tied_law(L: int, K: int, C: Any = None, entrywise: bool = False,
             merge: bool = True) -> GaussianLaw:
    """Centred tied law (eqs. 10, 79): ``Cov = (C_ii'C_jj' + C_ij'C_ji') q_kl``.

    With ``merge`` (default) the exact duplicates ``G_jik = G_ijk`` are merged
    into the representatives with ``i <= j``.

        >>> law = tied_law(1, 2)
        >>> law.cov
        Matrix([
        [2*q_11, 2*q_12],
        [2*q_12, 2*q_22]])
    """
    C = check_covariance(C, L)
    q = sym_matrix(K, "q", entrywise)
    G = g_array(L, K)
    idx = _flat(L, K)
    P = len(idx)
    S = sp.zeros(P, P)
    for a, (i, j, k) in enumerate(idx):
        for b, (i2, j2, l) in enumerate(idx):
            S[a, b] = _B(C, i, j, i2, j2) * q[k, l]
    law = GaussianLaw("tied", L, K, C, tuple(G[i, j, k] for i, j, k in idx),
                      sp.ImmutableMatrix(sp.zeros(P, 1)), sp.ImmutableMatrix(S), {"q": q},
                      ("q",), {}, entrywise)
    return merge_duplicates(law) if merge else law


def untied_law(L: int, K: int, C: Any = None, entrywise: bool = False,
               merge: bool = True) -> GaussianLaw:
    """Untied law (section 4.1): mean ``C_ij m_k``, covariance
    ``C_ii'C_jj' q1_kl + C_ij'C_ji' q2_kl`` with ``q1 = Tr(M_k M_l^T)/d`` and
    ``q2 = Tr(M_k M_l)/d``.

        >>> law = untied_law(1, 2)
        >>> law.mean.T, law.cov
        (Matrix([[m_1, m_2]]), Matrix([
        [q1_11 + q2_11, q1_12 + q2_12],
        [q1_12 + q2_12, q1_22 + q2_22]]))
    """
    C = check_covariance(C, L)
    m = vector_symbols(K, "m")
    q1 = sym_matrix(K, "q1", entrywise)
    q2 = sym_matrix(K, "q2", entrywise)
    G = g_array(L, K)
    idx = _flat(L, K)
    P = len(idx)
    S = sp.zeros(P, P)
    mu = sp.zeros(P, 1)
    for a, (i, j, k) in enumerate(idx):
        mu[a] = C[i, j] * m[k]
        for b, (i2, j2, l) in enumerate(idx):
            S[a, b] = C[i, i2] * C[j, j2] * q1[k, l] + C[i, j2] * C[j, i2] * q2[k, l]
    law = GaussianLaw("untied", L, K, C, tuple(G[i, j, k] for i, j, k in idx),
                      sp.ImmutableMatrix(mu), sp.ImmutableMatrix(S), {"m": m, "q1": q1, "q2": q2},
                      ("q1", "q2"), {}, entrywise)
    return merge_duplicates(law) if merge else law


def direct_law(L: int, K: int, C: Any = None, entrywise: bool = False,
               merge: bool = True) -> GaussianLaw:
    """Direct optimisation over S (appendix E): centred, covariance
    ``C_ii'C_jj' Omega_kl + C_ij'C_ji' Psi_kl`` with ``Omega = Tr(S_k S_l^T)/d``,
    ``Psi = Tr(S_k S_l)/d``.

        >>> direct_law(1, 1).cov
        Matrix([[Omega_11 + Psi_11]])
    """
    C = check_covariance(C, L)
    Om = sym_matrix(K, "Omega", entrywise)
    Ps = sym_matrix(K, "Psi", entrywise)
    G = g_array(L, K)
    idx = _flat(L, K)
    P = len(idx)
    S = sp.zeros(P, P)
    for a, (i, j, k) in enumerate(idx):
        for b, (i2, j2, l) in enumerate(idx):
            S[a, b] = C[i, i2] * C[j, j2] * Om[k, l] + C[i, j2] * C[j, i2] * Ps[k, l]
    law = GaussianLaw("direct", L, K, C, tuple(G[i, j, k] for i, j, k in idx),
                      sp.ImmutableMatrix(sp.zeros(P, 1)), sp.ImmutableMatrix(S),
                      {"Omega": Om, "Psi": Ps}, ("Omega", "Psi"), {}, entrywise)
    return merge_duplicates(law) if merge else law


def general_law(L: int, K: int, C: Any = None, entrywise: bool = False,
                merge: bool = True) -> GaussianLaw:
    """Theorem 1 (eqs. 3-4): ``E G_a = C_ij mu_a``,
    ``Cov(G_a, G_b) = C_ii'C_jj' Omega_ab + C_ij'C_ji' Psi_ab`` with
    ``a = (ijk)``, ``b = (i'j'k')``, ``mu_a = Tr S_a / sqrt(d)``,
    ``Omega_ab = Tr(S_a S_b^T)/d``, ``Psi_ab = Tr(S_a S_b)/d``; the order
    parameters are indexed by the flat index ``(i*L + j)*K + k``.

        >>> law = general_law(1, 1)
        >>> law.mean.T, law.cov
        (Matrix([[mu_1]]), Matrix([[Omega_11 + Psi_11]]))
    """
    C = check_covariance(C, L)
    idx = _flat(L, K)
    P = len(idx)
    mu = vector_symbols(P, "mu")
    Om = sym_matrix(P, "Omega", entrywise)
    Ps = sym_matrix(P, "Psi", entrywise)
    G = g_array(L, K)
    S = sp.zeros(P, P)
    mean = sp.zeros(P, 1)
    for a, (i, j, k) in enumerate(idx):
        mean[a] = C[i, j] * mu[a]
        for b, (i2, j2, l) in enumerate(idx):
            S[a, b] = C[i, i2] * C[j, j2] * Om[a, b] + C[i, j2] * C[j, i2] * Ps[a, b]
    law = GaussianLaw("general", L, K, C, tuple(G[i, j, k] for i, j, k in idx),
                      sp.ImmutableMatrix(mean), sp.ImmutableMatrix(S),
                      {"mu": mu, "Omega": Om, "Psi": Ps}, ("Omega", "Psi"), {}, entrywise)
    return merge_duplicates(law) if merge else law


def make_law(kind: str, L: int, K: int, C: Any = None, entrywise: bool = False,
             merge: bool = True) -> GaussianLaw:
    """Dispatch on ``kind`` in ``("tied", "untied", "direct", "general")`` to the law's
    builder (:func:`tied_law`, :func:`untied_law`, :func:`direct_law`, :func:`general_law`).

        >>> make_law("tied", 1, 2).kind, make_law("direct", 1, 2).kind
        ('tied', 'direct')
    """
    builders = {"tied": tied_law, "untied": untied_law, "direct": direct_law,
                "general": general_law}
    if kind not in builders:
        raise ValueError(f"unknown law kind {kind!r}; known: {', '.join(LAW_KINDS)}")
    return builders[kind](L, K, C, entrywise=entrywise, merge=merge)


def merge_duplicates(law: GaussianLaw) -> GaussianLaw:
    """Merge variables that are almost surely equal (same mean, same covariance
    row, and variance equal to the covariance between them).

    For the tied law this identifies ``G_jik`` with ``G_ijk``; the remaining
    representatives keep the first flat index. Rows are compared symbolically
    (symmetrised in ``(k, l)`` for entrywise laws).

        >>> full = tied_law(2, 1, merge=False)
        >>> len(full.variables), len(merge_duplicates(full).variables)
        (4, 3)
    """
    P = law.P
    cov = law.cov

    def canon(e: sp.Expr) -> sp.Expr:
        e = sp.expand(e)
        if law.entrywise:
            # X_kl and X_lk count as the same entry when comparing rows
            rep = {}
            for M in (law.order_parameters[n] for n in law.matrix_parameters):
                for k in range(M.shape[0]):
                    for l in range(M.shape[1]):
                        if k > l:
                            rep[M[k, l]] = M[l, k]
            e = sp.expand(e.xreplace(rep))
        return e

    rows = [tuple(canon(cov[a, b]) for b in range(P)) for a in range(P)]
    means = [canon(law.mean[a]) for a in range(P)]
    rep_of = list(range(P))
    for a in range(P):
        if rep_of[a] != a:
            continue
        for b in range(a + 1, P):
            if rep_of[b] != b:
                continue
            if (means[a] == means[b] and rows[a] == rows[b]
                    and rows[a][a] == rows[a][b] == rows[b][b] and rows[a][a] != 0):
                rep_of[b] = a
    keep = [a for a in range(P) if rep_of[a] == a]
    if len(keep) == P:
        return law
    sub = {law.variables[b]: law.variables[rep_of[b]] for b in range(P) if rep_of[b] != b}
    cov2 = sp.ImmutableMatrix(len(keep), len(keep), lambda r, s: cov[keep[r], keep[s]])
    mean2 = sp.ImmutableMatrix(len(keep), 1, lambda r, _: law.mean[keep[r]])
    return GaussianLaw(law.kind, law.L, law.K, law.C, tuple(law.variables[a] for a in keep),
                       mean2, cov2, law.order_parameters, law.matrix_parameters, sub,
                       law.entrywise)
