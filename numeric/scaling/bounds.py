r"""Scaling-law bounds of paper 000 ("Unifying Learning Dynamics and
Generalization in Transformers Scaling Law"), evaluated on compiled kernels.

Notation (Definition 5.4 of the paper):

========  ==============================================================
``C``     total compute, ``C = O(M T N)``
``N``     data-set size (number of sequences)
``M``     model size (number of trainable parameters)
``T``     training time (continuous SGD time of eq. 2)
``xi``    noise level: ``max Var[Xi_{l,k}] = xi^2`` (section 3.2)
``L, d``  sequence length and embedding width
``eps``   the output scaling coefficient ``varepsilon`` of eq. (1)
========  ==============================================================

Hidden constants. The paper writes several constants as ``O(.)``,
``poly(.)``, ``alpha``, ``C`` or ``L(0, D)``; here each is an explicit,
required keyword argument (no value is invented):

``alpha``
    convergence-rate constant, ``alpha = Theta(lambda)`` (Theorem E.2;
    ``alpha_cr = O(lambda/omega)`` in Theorem 5.5), with ``lambda`` the least
    eigenvalue of the initial kernel (Assumption 5.1).
``prefactor``
    the constant ``C = poly(L, d, 1/lambda, 1/omega)`` of stage I
    (Theorem 7.1 / F.7).
``loss0``
    the initial training loss ``L(0, D)``.
``c_stat``
    the constant hidden in the statistical term ``O(xi^2 / N)`` (stage II of
    Theorem 7.1, the data law and the time law of Theorem 7.2) and in the
    stage-II ``O(.)``.

Defaults exist only where the paper writes the statement without a constant
(e.g. the time law of Theorem 7.2 prints ``exp(-eps^2 xi^2 T / N^2)`` without
``alpha``, ``C`` or ``L(0, D)``; the model law prints ``xi^2 M^-zeta``).

Threshold (eq. 3 = eq. 12). ``C*(N) = N^6 log(N L d / xi^2) / xi^2``. With
``u = N L d / xi^2`` and ``v = 6 log u`` the equation ``C = C*(N)`` becomes
``v e^v = 6 (L d)^6 C / xi^10``, so its exact inverse is

.. math:: N^*(C) = \Big(\frac{6 C \xi^2}{W_0(6 (Ld)^6 C/\xi^{10})}\Big)^{1/6}
          = \frac{\xi^2}{L d} \exp\!\big(W_0(6 (Ld)^6 C/\xi^{10})/6\big),

with ``N*(0) = xi^2 / (L d)`` (where the logarithm vanishes). The paper's
``(C xi^2 / W(C / xi^10))^(1/6)`` (proof of Theorem F.7) drops ``(L d)^6``
and both factors 6; it is :func:`paper_critical_data_size`.

All public functions broadcast like numpy, return float64, and raise
:class:`ValueError` naming the argument for inputs outside their range.
For every input in range, however extreme (any finite float, and inf where an
argument allows it), they return a number and never NaN: intermediate
products are formed with an extended exponent, so a result is inf (or 0) only
when its true value lies beyond the float range (above 1.8e308, or below the
smallest subnormal). Where no intermediate of the plain formula leaves the
float range they agree bit for bit with it (elsewhere the plain formula had
lost accuracy or overflowed). Infinite ``C``, ``N``, ``M`` or ``T`` give the
limits.
The kernels are numba ufuncs (``*_ufunc``), callable from other jitted code.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np




__all__ = [
    # threshold and its inverse
    "threshold_compute",
    "critical_data_size",
    "optimal_data_size",
    "paper_critical_data_size",
    "paper_form_ratio",
    "threshold_time",
    "stage",
    # bounds
    "training_loss_bound",
    "approximation_bound",
    "generalisation_bound",
    "stage_one_bound",
    "stage_two_bound",
    "stage_two_bound_paper",
    "two_stage_bound",
    "threshold_jump",
    "continuity_constant",
    # single-variable laws and their validity
    "time_law",
    "data_law",
    "model_law",
    "time_law_valid",
    "data_law_valid",
    "model_law_valid",
    "model_law_boundary",
    "model_law_crossover",
    # drags
    "noise_drag_data",
    "noise_drag_compute",
    "noise_drag_exponent",
    # inverse problems
    "compute_for_target",
    # grids
    "QUANTITIES",
    "evaluate",
    "evaluate_grid",
]

_LOG6 = 1.791759469228055  # log 6
INF = np.inf


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


def _arr(name, x):
    if x is None:  # else it became NaN and the message read "got nan"
        raise ValueError(f"{name} is required; got None")
    a = np.asarray(x)
    if a.dtype.kind == "c":
        raise TypeError(f"{name} must be real, got a complex value")
    if a.dtype.kind not in "biuf":
        try:
            a = a.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a real number or array, got {x!r}") from None
    return a.astype(np.float64, copy=False)


def _first_bad(a, bad):
    idx = np.argwhere(np.atleast_1d(bad))[0]
    val = np.atleast_1d(a)[tuple(idx)]
    where = f" (at index {tuple(int(i) for i in idx)})" if a.ndim else ""
    return float(val), where


def _check(name, x, *, lo=None, lo_open=True, hi=None, hi_open=True, finite=False,
           meaning=""):
    """Return ``x`` as a float64 array; raise ValueError naming ``name``."""
    a = _arr(name, x)
    bad = np.isnan(a)
    if lo is not None:
        bad |= (a <= lo) if lo_open else (a < lo)
    if hi is not None:
        bad |= (a >= hi) if hi_open else (a > hi)
    if finite:
        bad |= ~np.isfinite(a)
    if np.any(bad):
        val, where = _first_bad(a, bad)
        parts = []
        if lo is not None:
            parts.append(f"{name} {'>' if lo_open else '>='} {lo:g}")
        if hi is not None:
            parts.append(f"{name} {'<' if hi_open else '<='} {hi:g}")
        if finite:
            parts.append("finite")
        rng = " and ".join(parts) if parts else "a number"
        what = f" ({meaning})" if meaning else ""
        raise ValueError(f"{name}{what} must be {rng}; got {name} = {val!r}{where}")
    return a


def _C(x):
    return _check("C", x, lo=0.0, lo_open=False, meaning="total compute, not negative")


def _N(x):
    return _check("N", x, lo=0.0, meaning="data-set size")


def _M(x):
    return _check("M", x, lo=0.0, meaning="model size")


def _T(x):
    return _check("T", x, lo=0.0, lo_open=False, meaning="training time")


def _xi(x, name="xi"):
    return _check(name, x, lo=0.0, finite=True, meaning="noise level")


def _L(x):
    return _check("L", x, lo=1.0, lo_open=False, finite=True, meaning="sequence length")


def _d(x):
    return _check("d", x, lo=1.0, lo_open=False, finite=True, meaning="embedding width")


def _pos(name, x, meaning):
    return _check(name, x, lo=0.0, finite=True, meaning=meaning)


def _nonneg(name, x, meaning):
    return _check(name, x, lo=0.0, lo_open=False, finite=True, meaning=meaning)


def _zeta(x):
    a = _arr("zeta", x)
    bad = np.isnan(a) | (a <= 0.0) | (a >= 1.0 / 3.0)
    if np.any(bad):
        val, where = _first_bad(a, bad)
        raise ValueError(f"zeta (model-law exponent) must lie in the open interval (0, 1/3); "
                         f"got zeta = {val!r}{where}")
    return a


def _required(name, value, meaning):
    if value is None:
        raise ValueError(
            f"{name} is required: it is the paper's hidden constant {meaning}; "
            "the paper gives no value, so pass one explicitly"
        )
    return value


def _out(res):
    """Scalars come back as numpy float64 scalars, arrays as arrays."""
    return res[()] if isinstance(res, np.ndarray) and res.ndim == 0 else res


def _call(ufunc, *args):
    """Call a kernel ufunc (by name: the kernels load on first use);
    intermediate overflow and underflow are handled inside the kernels (log
    forms), so the floating-point flags are muted."""
    if isinstance(ufunc, str):
        ufunc = getattr(_kernels(), ufunc)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return _out(ufunc(*args))


# ---------------------------------------------------------------------------
# compiled kernels: numeric/scaling/_kernels.py, imported on first use (numba
# compiles or loads the ufuncs at import, so validation and the quantity table
# never compile anything)
# ---------------------------------------------------------------------------

_KERNELS = None


def _kernels():
    global _KERNELS
    if _KERNELS is None:
        import importlib
        _KERNELS = importlib.import_module(__name__.rsplit(".", 1)[0] + "._kernels")
    return _KERNELS


def __getattr__(name):
    # the kernels and ufuncs (``*_kernel``, ``*_ufunc``, the private helpers) keep their
    # old place here for callers and tests, loaded on first access
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(_kernels(), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


# ---------------------------------------------------------------------------
# threshold (eq. 3) and its inverse
# ---------------------------------------------------------------------------


def threshold_compute(N, xi, L, d):
    r"""Compute threshold ``C*(N)`` of eq. (3) (= eq. 12, Theorem 7.1 / F.7).

    .. math:: C^*(N) = \frac{N^6 \log(N L d / \xi^2)}{\xi^2}.

    Stage II (data-limited) holds for ``C > C*(N)``, stage I for
    ``C <= C*(N)``. It comes from ``C = M T N`` with ``M = Theta(N^3)``
    and the time threshold ``T*(N) = N^2 log(N L d / xi^2) / xi^2``
    (:func:`threshold_time`) at ``eps = xi / N``.

    For ``N <= xi^2 / (L d)`` the right side is ``<= 0``: every ``C >= 0``
    is past the threshold. ``C*(N)`` increases with ``N`` wherever it is
    ``>= 0``.

    Parameters
    ----------
    N : array_like, > 0
        Data-set size.
    xi : array_like, > 0
        Noise level (standard deviation of the label noise).
    L, d : array_like, >= 1
        Sequence length and width.

    Examples
    --------
    >>> C = threshold_compute(10.0, xi=1.0, L=1, d=1)
    >>> round(float(C), 1), round(1e6 * math.log(10.0), 1)
    (2302585.1, 2302585.1)
    >>> bool(threshold_compute(0.5, xi=1.0, L=1, d=1) <= 0)
    True
    """
    N, xi, L, d = _N(N), _xi(xi), _L(L), _d(d)
    return _call("threshold_compute_ufunc", N, xi, L, d)


def critical_data_size(C, xi, L, d):
    r"""Exact inverse of eq. (3): the data size ``N*`` with ``C*(N*) = C``.

    .. math:: N^*(C) = \Big(\frac{6 C \xi^2}{W_0(6 (L d)^6 C / \xi^{10})}\Big)^{1/6},
              \qquad N^*(0) = \xi^2 / (L d).

    ``N*(C)`` is the largest data size for which compute ``C`` is past the
    threshold (stage II), hence the compute-optimal data size of
    Theorem 7.1 (:func:`optimal_data_size`). Evaluated without overflow or
    NaN for any finite inputs (extended exponents; the W argument goes through
    its logarithm when it leaves [1e-300, 1e300]); accurate to a few ulp. A
    result beyond the float range is inf or 0.

    Parameters
    ----------
    C : array_like, >= 0
        Total compute.
    xi : array_like, > 0
    L, d : array_like, >= 1

    Examples
    --------
    >>> N = critical_data_size(1e8, xi=1.0, L=2, d=3)
    >>> round(float(threshold_compute(N, 1.0, 2, 3)) / 1e8, 10)
    1.0
    >>> round(float(critical_data_size(0.0, xi=1.0, L=2, d=3)), 6), round(1 / 6, 6)
    (0.166667, 0.166667)
    """
    C, xi, L, d = _C(C), _xi(xi), _L(L), _d(d)
    return _call("critical_data_size_ufunc", C, xi, L, d)


def optimal_data_size(C, xi, L, d):
    """Compute-optimal data size for compute ``C``: ``N*(C)`` (Theorem 7.1 / F.7).

    For fixed ``C`` the bound is ``c_stat xi^2 / N`` (decreasing in ``N``)
    while ``N <= N*(C)`` and the stage-I bound ``prefactor loss0
    exp(-alpha xi^2 C / N^6)`` (increasing in ``N``) beyond, so the best
    ``N`` is ``N*(C)`` whatever the constants: where the two stages do not
    meet (see :func:`threshold_jump`) the infimum is approached from one side
    of ``N*(C)``. Same as :func:`critical_data_size`.

        >>> bool(optimal_data_size(1e8, 1.0, 2, 3) == critical_data_size(1e8, 1.0, 2, 3))
        True
    """
    return critical_data_size(C, xi, L, d)


def paper_critical_data_size(C, xi):
    r"""The paper's closed form ``(C xi^2 / W0(C / xi^10))^(1/6)`` (Thm F.7).

    This drops the constant ``(L d)^6`` and the two factors 6 of the exact
    inverse (:func:`critical_data_size`), so it does *not* solve eq. (3):
    for ``C -> inf`` it is ``6^(-1/6) = 0.742`` times ``N*(C)``
    (:func:`paper_form_ratio`), and ``C*(N_paper) -> C / 6``. The paper
    absorbs the difference into ``O(.)``. ``N_paper(0) = xi^2``.

        >>> N_paper = paper_critical_data_size(1e300, 1.0)
        >>> round(float(N_paper / critical_data_size(1e300, 1.0, 1, 1)), 3)
        0.742
    """
    C, xi = _C(C), _xi(xi)
    return _call("paper_critical_data_size_ufunc", C, xi)


def paper_form_ratio(C, xi, L, d):
    """``paper_critical_data_size(C, xi) / critical_data_size(C, xi, L, d)``: the
    paper's form of ``N*(C)`` (proof of Theorem F.7) against the exact inverse of eq. (3).

    Tends to ``6^(-1/6) = 0.7418`` as ``C -> inf`` (both ``W``'s grow like
    ``log C``; ``C = inf`` returns this limit), and to ``L d`` as ``C -> 0``.

        >>> [round(float(paper_form_ratio(C, 1.0, 1, 1)), 3) for C in (1e12, 1e100, np.inf)]
        [0.75, 0.743, 0.742]
        >>> round(6 ** (-1 / 6), 4)
        0.7418
    """
    C, xi, L, d = _C(C), _xi(xi), _L(L), _d(d)
    return _call("paper_form_ratio_ufunc", C, xi, L, d)


def threshold_time(N, xi, L, d):
    r"""Time threshold of Condition 1 in the proof of Theorem F.7.

    .. math:: T^*(N) = \frac{\log\big((N \wedge \xi/\varepsilon) L d/\xi^2\big)}
              {\varepsilon^2} = \frac{N^2 \log(N L d / \xi^2)}{\xi^2}
              \quad (\varepsilon = \xi / N).

    ``C*(N) = M N T*(N)`` with ``M = N^3``.

        >>> T = threshold_time(10.0, xi=1.0, L=1, d=1)
        >>> round(float(T), 3), round(100 * math.log(10.0), 3)
        (230.259, 230.259)
        >>> round(float(10.0 ** 3 * 10.0 * T / threshold_compute(10.0, 1.0, 1, 1)), 12)
        1.0
    """
    N, xi, L, d = _N(N), _xi(xi), _L(L), _d(d)
    return _call("threshold_time_ufunc", N, xi, L, d)


def stage(C, N, xi, L, d):
    """Stage of Theorem 7.1 at ``(C, N)``: 1 if ``C <= C*(N)``, else 2.

        >>> Cs = threshold_compute(10.0, 1.0, 1, 1)
        >>> int(stage(Cs, 10.0, 1.0, 1, 1)), int(stage(2 * Cs, 10.0, 1.0, 1, 1))
        (1, 2)
    """
    C, N, xi, L, d = _C(C), _N(N), _xi(xi), _L(L), _d(d)
    return _out(np.asarray(_call("stage_ufunc", C, N, xi, L, d)).astype(np.int8))


# ---------------------------------------------------------------------------
# bounds of sections 5-7
# ---------------------------------------------------------------------------


def training_loss_bound(T, eps, *, alpha, loss0):
    r"""Training convergence, Theorem 5.5 / E.2.

    .. math:: \mathcal{L}(T, \mathbb{D}) \le \exp(-\alpha \varepsilon^2 T)\,
              \mathcal{L}(0, \mathbb{D}).

    Parameters
    ----------
    T : array_like, >= 0
        Training time.
    eps : array_like, > 0
        Output scaling coefficient ``varepsilon`` of eq. (1).
    alpha : array_like, > 0
        Rate constant, ``alpha = Theta(lambda)`` (E.2); ``O(lambda/omega)``
        in the informal 5.5. Required.
    loss0 : array_like, >= 0
        Initial loss ``L(0, D)``. Required.

    Examples
    --------
    >>> b = training_loss_bound(2.0, 0.5, alpha=1.0, loss0=1.0)   # exp(-alpha eps^2 T) L_0
    >>> round(float(b), 6), round(math.exp(-0.5), 6)
    (0.606531, 0.606531)
    """
    T = _T(T)
    eps = _pos("eps", eps, "output scaling coefficient")
    alpha = _pos("alpha", alpha, "convergence-rate constant Theta(lambda)")
    loss0 = _nonneg("loss0", loss0, "initial loss L(0, D)")
    return _call("training_loss_ufunc", T, eps, alpha, loss0)


def approximation_bound(M):
    r"""Approximation error, Corollary 6.1 / E.3: ``<= M^-2`` (``eps <~ 1/M``).

    .. math:: \lim_{T\to\infty} \inf_F \mathbb{E}\|F(X) - F^*(X)\|_F^2 \le M^{-2}.

    The paper writes this bound without a constant.

        >>> approximation_bound(np.array([1.0, 10.0]))
        array([1.  , 0.01])
    """
    M = _M(M)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):  # inf / 0 beyond the range
        return _out(1.0 / (M * M))


def generalisation_bound(M, N, xi, L, d):
    r"""Generalisation bound of the ERM, Theorem 6.2 / F.6 (``eps = 1/M``).

    .. math:: \inf \sup \Delta\mathcal{R} \le (4 M^{-1} + \xi) M^{-1}
              + \frac{L d \, \xi}{N}.

    As stated, without constants. Note: the proof (Lemma F.3 with Lemma F.5)
    gives ``L d O((xi^2 + eps^2)/N + xi eps)``, i.e. ``xi^2 / N`` where the
    statement has ``xi / N`` (see docs/scaling.md). Decreasing in ``M`` and
    ``N``, increasing in ``xi``.

        >>> round(float(generalisation_bound(M=10.0, N=100.0, xi=0.1, L=1, d=2)), 6)
        0.052
        >>> round((4 / 10 + 0.1) / 10 + 1 * 2 * 0.1 / 100, 6)
        0.052
    """
    M, N, xi, L, d = _M(M), _N(N), _xi(xi), _L(L), _d(d)
    return _call("generalisation_ufunc", M, N, xi, L, d)


def stage_one_bound(C, N, xi, *, alpha, prefactor, loss0):
    r"""Stage I (compute-starved) bound of Theorem 7.1 / F.7.

    .. math:: \Delta\mathcal{R} \le C_{\rm poly} \exp(-\alpha \xi^2 C / N^6)
              \,\mathcal{L}(0, \mathbb{D}),

    valid for ``C <= C*(N)``. Decreasing in ``C`` and in ``xi`` (larger
    noise means a larger ``eps = xi/N`` and faster optimisation), increasing
    in ``N``.

    Parameters
    ----------
    alpha : > 0
        Rate constant ``Theta(lambda)``.
    prefactor : > 0
        ``C = poly(L, d, 1/lambda, 1/omega)``.
    loss0 : >= 0
        ``L(0, D)``.

    Examples
    --------
    >>> round(float(stage_one_bound(1e6, 10.0, 1.0, alpha=1.0, prefactor=2.0, loss0=1.0)), 6)
    0.735759
    >>> round(2 * math.exp(-1.0), 6)
    0.735759
    """
    C, N, xi = _C(C), _N(N), _xi(xi)
    alpha = _pos("alpha", alpha, "convergence-rate constant Theta(lambda)")
    prefactor = _pos("prefactor", prefactor, "stage-I constant poly(L, d, 1/lambda, 1/omega)")
    loss0 = _nonneg("loss0", loss0, "initial loss L(0, D)")
    return _call("stage_one_ufunc", C, N, xi, alpha, prefactor, loss0)


def stage_two_bound(C, xi, L, d, *, c_stat):
    r"""Stage II (data-limited) bound of Theorem 7.1 / F.7, exact form.

    With the compute-optimal data size ``N*(C)``:

    .. math:: \Delta\mathcal{R} \le c_{\rm stat} \frac{\xi^2}{N^*(C)}
              = c_{\rm stat}\, 6^{-1/6} \xi^{5/3}
                \Big(\frac{C}{W_0(6 (Ld)^6 C/\xi^{10})}\Big)^{-1/6}
              = \tilde O(\xi^{5/3} C^{-1/6}).

    Decreasing in ``C``, increasing in ``xi`` (``d log B / d log xi =
    (5/3) W/(1+W) > 0``). ``c_stat`` (> 0, required) is the constant of
    ``O(xi^2/N)``.

        >>> b = stage_two_bound(1e8, 1.0, 2, 3, c_stat=1.0)
        >>> round(float(b * critical_data_size(1e8, 1.0, 2, 3)), 12)
        1.0
    """
    C, xi, L, d = _C(C), _xi(xi), _L(L), _d(d)
    c_stat = _pos("c_stat", _required("c_stat", c_stat, "of O(xi^2/N)"), "constant of O(xi^2/N)")
    return _call("stage_two_ufunc", C, xi, L, d, c_stat)


def stage_two_bound_paper(C, xi, *, c_stat):
    r"""Stage II bound as printed in Theorem 7.1:
    ``c_stat xi^(5/3) (C / W0(C / xi^10))^(-1/6)``.

    Equals ``c_stat xi^2 / N_paper(C)`` (:func:`paper_critical_data_size`);
    asymptotically ``6^(1/6) = 1.348`` times :func:`stage_two_bound`.

        >>> exact = stage_two_bound(1e300, 1.0, 1, 1, c_stat=1.0)
        >>> round(float(stage_two_bound_paper(1e300, 1.0, c_stat=1.0) / exact), 3)  # at C = 1e300
        1.347
        >>> round(6 ** (1 / 6), 3)
        1.348
    """
    C, xi = _C(C), _xi(xi)
    c_stat = _pos("c_stat", _required("c_stat", c_stat, "of O(.)"), "constant of O(.)")
    return _call("stage_two_paper_ufunc", C, xi, c_stat)


def two_stage_bound(C, N, xi, L, d, *, alpha, prefactor, loss0, c_stat):
    r"""The two-stage bound at a fixed data size ``N`` (Theorem 7.1 / F.7).

    .. math:: B(C; N) = \begin{cases}
              C_{\rm poly}\, e^{-\alpha\xi^2 C/N^6} \mathcal{L}(0, \mathbb{D}),
              & C \le C^*(N) \quad\text{(stage I)}\\
              c_{\rm stat}\, \xi^2 / N, & C > C^*(N) \quad\text{(stage II,
              Condition 2)}\end{cases}

    Non-increasing in ``C`` only if the stage-I value at the threshold is at
    least the stage-II floor; it is continuous at ``C*(N)`` exactly when
    ``alpha = 1`` and ``c_stat = prefactor loss0 / (L d)``
    (:func:`threshold_jump`, :func:`continuity_constant`).

        >>> kw = dict(alpha=1.0, prefactor=1.0, loss0=1.0, c_stat=1.0)
        >>> Cs = float(threshold_compute(10.0, 1.0, 1, 1))
        >>> [round(float(two_stage_bound(C, 10.0, 1.0, 1, 1, **kw)), 4) for C in (0.0, Cs, 2 * Cs)]
        [1.0, 0.1, 0.1]
    """
    C, N, xi, L, d = _C(C), _N(N), _xi(xi), _L(L), _d(d)
    alpha = _pos("alpha", alpha, "convergence-rate constant Theta(lambda)")
    prefactor = _pos("prefactor", prefactor, "stage-I constant poly(L, d, 1/lambda, 1/omega)")
    loss0 = _nonneg("loss0", loss0, "initial loss L(0, D)")
    c_stat = _pos("c_stat", c_stat, "constant of O(xi^2/N)")
    return _call("two_stage_ufunc", C, N, xi, L, d, alpha, prefactor, loss0, c_stat)


def threshold_jump(N, xi, L, d, *, alpha, prefactor, loss0, c_stat):
    r"""Ratio of the stage-I bound just below ``C*(N)`` to the stage-II bound
    just above it.

    At ``C = C*(N)``, ``alpha xi^2 C / N^6 = alpha log(N L d / xi^2)``, so

    .. math:: \frac{B_I(C^{*-})}{B_{II}(C^{*+})}
              = \frac{C_{\rm poly}\,\mathcal{L}(0)\,(N L d/\xi^2)^{-\alpha}}
                     {c_{\rm stat}\, \xi^2 / N}
              = \frac{C_{\rm poly}\mathcal{L}(0)}{c_{\rm stat} L d}
                \Big(\frac{N L d}{\xi^2}\Big)^{1-\alpha}.

    It is 1 for every ``N`` iff ``alpha = 1`` and ``c_stat = prefactor
    loss0 / (L d)``; otherwise the two stages do not meet (a jump whose size
    varies with ``N`` as ``N^(1-alpha)``).

        >>> c = continuity_constant(1, 1, prefactor=1.0, loss0=1.0)
        >>> kw = dict(prefactor=1.0, loss0=1.0, c_stat=c)
        >>> round(float(threshold_jump(10.0, 1.0, 1, 1, alpha=1.0, **kw)), 12)
        1.0
        >>> round(float(threshold_jump(10.0, 1.0, 1, 1, alpha=0.5, **kw)), 4)
        3.1623
        >>> round(10 ** 0.5, 4)
        3.1623
    """
    N, xi, L, d = _N(N), _xi(xi), _L(L), _d(d)
    alpha = _pos("alpha", alpha, "convergence-rate constant Theta(lambda)")
    prefactor = _pos("prefactor", prefactor, "stage-I constant")
    loss0 = _pos("loss0", loss0, "initial loss L(0, D)")
    c_stat = _pos("c_stat", c_stat, "constant of O(xi^2/N)")
    return _call("threshold_jump_ufunc", N, xi, L, d, alpha, prefactor, loss0, c_stat)


def continuity_constant(L, d, *, prefactor, loss0):
    """The ``c_stat`` that makes the stages of Theorem 7.1 meet at ``C*(N)`` when ``alpha = 1``:
    ``prefactor loss0 / (L d)`` (see :func:`threshold_jump`).

        >>> float(continuity_constant(2, 3, prefactor=1.0, loss0=3.0))
        0.5
    """
    L, d = _L(L), _d(d)
    prefactor = _pos("prefactor", prefactor, "stage-I constant")
    loss0 = _pos("loss0", loss0, "initial loss L(0, D)")
    return _call("continuity_ufunc", L, d, prefactor, loss0)


# ---------------------------------------------------------------------------
# single-variable laws, Theorem 7.2 / F.8
# ---------------------------------------------------------------------------


def time_law(T, N, xi, *, c_stat, alpha=1.0, prefactor=1.0, loss0=1.0, literal=False):
    r"""Time law of Theorem 7.2 / F.8 (fixed ``N``, ``M = Omega(N^3)``,
    ``eps = xi / N``).

    .. math:: \Delta\mathcal{R} \le C_{\rm poly}\mathcal{L}(0)
              \exp(-\alpha \varepsilon^2 T) + c_{\rm stat}\frac{\xi^2}{N},
              \qquad \varepsilon = \xi/N,

    i.e. exponent ``alpha xi^2 T / N^2``, as in Condition 1 of the proof of
    Theorem F.7 (from which the law is derived). The theorem prints the
    exponent as ``eps^2 xi^2 T / N^2``, which with ``eps = xi/N`` is
    ``xi^4 T / N^4``: ``literal=True`` evaluates that reading (see
    docs/scaling.md). ``alpha``, ``prefactor`` and ``loss0`` default to 1
    because the theorem prints the exponential without them; ``c_stat`` (the
    ``O(xi^2/N)`` constant) is required. Check ``M = Omega(N^3)`` with
    :func:`time_law_valid`.

        >>> [round(float(time_law(T, 10.0, 1.0, c_stat=1.0)), 4) for T in (0.0, 1e6)]
        [1.1, 0.1]
    """
    T, N, xi = _T(T), _N(N), _xi(xi)
    c_stat = _pos("c_stat", _required("c_stat", c_stat, "of O(xi^2/N)"), "constant of O(xi^2/N)")
    alpha = _pos("alpha", alpha, "convergence-rate constant")
    prefactor = _pos("prefactor", prefactor, "stage-I constant")
    loss0 = _nonneg("loss0", loss0, "initial loss L(0, D)")
    return _call("time_law_ufunc", T, N, xi, c_stat, alpha, prefactor, loss0,
                 1.0 if literal else 0.0)


def data_law(N, xi, *, c_stat):
    r"""Data law of Theorem 7.2 / F.8: ``Delta R <= c_stat xi^2 / N``.

    Valid for ``eps = xi/N``, ``M = Omega(N^3)`` and ``T = Omega~(N^2/xi)``
    (:func:`data_law_valid`). ``c_stat`` (> 0) is the ``O(.)`` constant.

        >>> data_law(np.array([10.0, 100.0]), 2.0, c_stat=1.0)
        array([0.4 , 0.04])
    """
    N, xi = _N(N), _xi(xi)
    c_stat = _pos("c_stat", _required("c_stat", c_stat, "of O(xi^2/N)"), "constant of O(xi^2/N)")
    return _call("data_law_ufunc", N, xi, c_stat)


def model_law(M, xi, zeta, *, scale=1.0):
    r"""Model law of Theorem 7.2 / F.8: ``Delta R <= xi^2 M^(-zeta)``.

    For ``zeta`` in the open interval ``(0, 1/3)``, ``eps = xi / M^zeta``
    and ``T = Omega~(M^zeta / xi)``, while ``M < N^(3/(2 zeta))``
    (:func:`model_law_valid`). ``scale`` multiplies the bound; the theorem
    prints it without a constant, hence the default 1.

        >>> model_law(np.array([1.0, 1e6]), 1.0, 1 / 6)
        array([1. , 0.1])
    """
    M, xi, zeta = _M(M), _xi(xi), _zeta(zeta)
    scale = _pos("scale", scale, "multiplier of the model law")
    return _call("model_law_ufunc", M, xi, zeta, scale)


def time_law_valid(M, N, *, m_const):
    """``M >= m_const N^3``: the ``M = Omega(N^3)`` condition of the time and
    data laws (and of Definition 5.2 via Theorem F.7), with the hidden
    constant ``m_const`` (> 0) explicit.

        >>> time_law_valid(np.array([500.0, 2000.0]), 10.0, m_const=1.0)
        array([False,  True])
    """
    M, N = _M(M), _N(N)
    m_const = _pos("m_const", m_const, "constant of M = Omega(N^3)")
    return _out(np.asarray(_call("time_law_valid_ufunc", M, N, m_const)) != 0.0)


def data_law_valid(M, N, T, xi, *, m_const, t_const):
    """``M >= m_const N^3`` and ``T >= t_const N^2 / xi`` (data law of Theorem 7.2; the
    ``Omega~`` also hides logarithms, which ``t_const`` must absorb).

        >>> bool(data_law_valid(1e3, 10.0, 100.0, 1.0, m_const=1.0, t_const=1.0))
        True
        >>> bool(data_law_valid(1e3, 10.0, 99.0, 1.0, m_const=1.0, t_const=1.0))
        False
    """
    M, N, T, xi = _M(M), _N(N), _T(T), _xi(xi)
    m_const = _pos("m_const", m_const, "constant of M = Omega(N^3)")
    t_const = _pos("t_const", t_const, "constant of T = Omega~(N^2/xi)")
    return _out(np.asarray(_call("data_law_valid_ufunc", M, N, T, xi, m_const, t_const)) != 0.0)


def model_law_boundary(N, zeta):
    """The paper's limit of the model law (Theorem 7.2): ``N^(3/(2 zeta))``.

        >>> float(model_law_boundary(10.0, 0.25))
        1000000.0
    """
    N, zeta = _N(N), _zeta(zeta)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):  # inf / 0 beyond the range
        return _out(N ** (1.5 / zeta))


def model_law_crossover(N, zeta):
    """Where ``xi^2 M^-zeta`` meets the data floor ``xi^2 / N`` (Theorem 7.2 / F.8):
    ``M = N^(1/zeta)``. This is the boundary the proof computes
    (``xi^2/N <= xi eps`` with ``eps = xi/M^zeta``); the theorem states
    ``N^(3/(2 zeta))`` instead (see docs/scaling.md).

        >>> float(model_law_crossover(10.0, 0.25))
        10000.0
    """
    N, zeta = _N(N), _zeta(zeta)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):  # inf / 0 beyond the range
        return _out(N ** (1.0 / zeta))


def model_law_valid(M, N, zeta):
    """``M < N^(3/(2 zeta))`` with ``zeta`` in ``(0, 1/3)`` (Theorem 7.2).

        >>> model_law_valid(np.array([10.0, 1e6]), 10.0, 0.25)
        array([ True, False])
    """
    M, N, zeta = _M(M), _N(N), _zeta(zeta)
    return _out(np.asarray(M < N ** (1.5 / zeta)))


# ---------------------------------------------------------------------------
# drags of section 7.2
# ---------------------------------------------------------------------------


def noise_drag_data(N, xi0, power=0.5, *, c_stat):
    r"""Data law under noise growing with the data, ``xi(N) = xi0 N^power``.

    .. math:: c_{\rm stat} \frac{\xi(N)^2}{N} = c_{\rm stat}\,\xi_0^2 N^{2p - 1}.

    Section 7.2: at ``power = 1/2`` the bound is the constant
    ``c_stat xi0^2`` (``O(1)``): no scaling. ``power`` is the paper's 1/2 by
    default and must be >= 0.

        >>> noise_drag_data(np.array([1.0, 1e4]), 2.0, c_stat=1.0)
        array([4., 4.])
    """
    N = _N(N)
    xi0 = _xi(xi0, "xi0")
    power = _nonneg("power", power, "growth exponent of xi(N)")
    c_stat = _pos("c_stat", _required("c_stat", c_stat, "of O(xi^2/N)"), "constant of O(xi^2/N)")
    return _call("noise_drag_data_ufunc", N, xi0, power, c_stat)


def noise_drag_compute(C, xi0, L, d, power=0.1, *, c_stat, form="exact"):
    r"""Stage-II bound under noise growing with compute, ``xi(C) = xi0 C^power``.

    At ``power = 1/10`` the W argument ``6 (L d)^6 C / xi^10 = 6 (L d)^6 /
    xi0^10`` is constant and the bound is the constant
    ``c_stat 6^(-1/6) xi0^(5/3) W0(6 (L d)^6 / xi0^10)^(1/6)`` (``O(1)``),
    as section 7.2 states. ``form`` is ``"exact"`` (:func:`stage_two_bound`)
    or ``"paper"`` (:func:`stage_two_bound_paper`). ``C`` must be > 0;
    ``C = inf`` gives the limit along the path (``inf`` for ``power > 1/10``,
    0 below, the constant at ``1/10``).

        >>> b = noise_drag_compute(np.array([1e10, 1e40]), 1.0, 1, 1, c_stat=1.0)
        >>> bool(np.allclose(b, b[0]))
        True
    """
    C = _check("C", C, lo=0.0, meaning="total compute, > 0 on a drag path")
    xi0 = _xi(xi0, "xi0")
    L, d = _L(L), _d(d)
    power = _nonneg("power", power, "growth exponent of xi(C)")
    c_stat = _pos("c_stat", _required("c_stat", c_stat, "of O(.)"), "constant of O(.)")
    if form not in ("exact", "paper"):
        raise ValueError(f"form must be 'exact' or 'paper', got {form!r}")
    return _call("noise_drag_compute_ufunc", C, xi0, L, d, power, c_stat,
                 1.0 if form == "paper" else 0.0)


def noise_drag_exponent(power, law="data"):
    """Power-law exponent of the bound along a drag path (section 7.2).

    ``law="data"``: ``xi = xi0 N^p`` gives ``N^(2p - 1)`` (no decay for
    ``p >= 1/2``). ``law="compute"``: ``xi = xi0 C^p`` gives
    ``C^(5p/3 - 1/6)`` up to the logarithmic factor ``W^(1/6)`` (no decay for
    ``p >= 1/10``).

        >>> float(noise_drag_exponent(0.5)), float(noise_drag_exponent(0.25))
        (0.0, -0.5)
        >>> round(float(noise_drag_exponent(0.1, law="compute")), 12)
        0.0
    """
    p = _nonneg("power", power, "growth exponent of xi")
    if law == "data":
        return _out(2.0 * p - 1.0)
    if law == "compute":
        return _out(5.0 * p / 3.0 - 1.0 / 6.0)
    raise ValueError(f"law must be 'data' or 'compute', got {law!r}")


# ---------------------------------------------------------------------------
# inverse problems
# ---------------------------------------------------------------------------


def compute_for_target(target, xi, L, d, *, c_stat, N=None, alpha=None, prefactor=None,
                       loss0=None):
    r"""Least compute ``C`` whose bound is at most ``target``.

    Without ``N`` (compute-optimal frontier, stage II of Theorem 7.1):
    ``c_stat xi^2 / N*(C) <= target`` iff ``N*(C) >= N_t = c_stat xi^2 /
    target``, and ``N*`` is increasing, so the answer is the threshold
    ``C*(N_t)`` of eq. (3) in closed form (0 when ``N_t <= xi^2/(L d)``, i.e.
    ``target >= c_stat L d``).

    With ``N`` (fixed data size, :func:`two_stage_bound`; then ``alpha``,
    ``prefactor`` and ``loss0`` are required): the stage-I solution
    ``N^6 log(prefactor loss0 / target) / (alpha xi^2)`` if it is below
    ``C*(N)``; else ``C*(N)`` if the stage-II floor ``c_stat xi^2 / N`` meets
    the target (an infimum: any larger compute reaches it); else ``inf``.

        >>> C = compute_for_target(0.1, 1.0, 1, 1, c_stat=1.0)
        >>> round(float(stage_two_bound(C, 1.0, 1, 1, c_stat=1.0)), 10)
        0.1
    """
    target = _pos("target", target, "target excess risk")
    xi, L, d = _xi(xi), _L(L), _d(d)
    c_stat = _pos("c_stat", _required("c_stat", c_stat, "of O(xi^2/N)"), "constant of O(xi^2/N)")
    if N is None:
        return _call("compute_for_target_frontier_ufunc", target, xi, L, d, c_stat)
    N = _N(N)
    alpha = _pos("alpha", _required("alpha", alpha, "Theta(lambda)"), "convergence-rate constant")
    prefactor = _pos("prefactor",
                     _required("prefactor", prefactor, "poly(L, d, 1/lambda, 1/omega)"),
                     "stage-I constant")
    loss0 = _pos("loss0", _required("loss0", loss0, "L(0, D)"), "initial loss L(0, D)")
    return _call("compute_for_target_fixed_n_ufunc", target, N, xi, L, d, alpha, prefactor, loss0,
                 c_stat)


# ---------------------------------------------------------------------------
# named quantities and grids
# ---------------------------------------------------------------------------

#: name -> (function, positional inputs, keyword constants, description)
QUANTITIES: dict[str, tuple[Callable[..., Any], tuple[str, ...], tuple[str, ...], str]] = {
    "threshold_compute": (threshold_compute, ("N", "xi", "L", "d"), (),
                          "C*(N), right side of eq. (3)"),
    "critical_N": (critical_data_size, ("C", "xi", "L", "d"), (),
                   "N*(C): exact inverse of eq. (3), the compute-optimal data size"),
    "paper_N": (paper_critical_data_size, ("C", "xi"), (),
                "the paper's (C xi^2 / W(C/xi^10))^(1/6)"),
    "paper_ratio": (paper_form_ratio, ("C", "xi", "L", "d"), (), "paper_N / critical_N"),
    "threshold_time": (threshold_time, ("N", "xi", "L", "d"), (), "T*(N) of Condition 1"),
    "stage": (stage, ("C", "N", "xi", "L", "d"), (), "1 (compute-starved) or 2 (data-limited)"),
    "training": (training_loss_bound, ("T", "eps"), ("alpha", "loss0"),
                 "Theorem 5.5: exp(-alpha eps^2 T) L(0)"),
    "approximation": (approximation_bound, ("M",), (), "Corollary 6.1: M^-2"),
    "generalisation": (generalisation_bound, ("M", "N", "xi", "L", "d"), (),
                       "Theorem 6.2: (4/M + xi)/M + L d xi / N"),
    "stage1": (stage_one_bound, ("C", "N", "xi"), ("alpha", "prefactor", "loss0"),
               "Theorem 7.1 stage I: prefactor exp(-alpha xi^2 C/N^6) L(0)"),
    "stage2": (stage_two_bound, ("C", "xi", "L", "d"), ("c_stat",),
               "Theorem 7.1 stage II (exact): c_stat xi^2 / N*(C)"),
    "stage2_paper": (stage_two_bound_paper, ("C", "xi"), ("c_stat",),
                     "Theorem 7.1 stage II as printed: c_stat xi^(5/3) (C/W(C/xi^10))^(-1/6)"),
    "two_stage": (two_stage_bound, ("C", "N", "xi", "L", "d"),
                  ("alpha", "prefactor", "loss0", "c_stat"),
                  "fixed-N bound: stage I below C*(N), c_stat xi^2/N above"),
    "jump": (threshold_jump, ("N", "xi", "L", "d"), ("alpha", "prefactor", "loss0", "c_stat"),
             "stage I / stage II at the threshold (1 = continuous)"),
    "time_law": (time_law, ("T", "N", "xi"), ("c_stat",), "Theorem 7.2 time law"),
    "data_law": (data_law, ("N", "xi"), ("c_stat",), "Theorem 7.2 data law: c_stat xi^2 / N"),
    "model_law": (model_law, ("M", "xi", "zeta"), (), "Theorem 7.2 model law: xi^2 M^-zeta"),
    "model_law_valid": (model_law_valid, ("M", "N", "zeta"), (), "M < N^(3/(2 zeta))"),
    "compute_for_target": (compute_for_target, ("target", "xi", "L", "d"), ("c_stat",),
                           "least C with stage-II bound <= target"),
}


#: Most points :func:`evaluate` and :func:`evaluate_grid` make (8 bytes each per quantity).
MAX_POINTS = 10 ** 8


def _check_points(values):
    """Refuse a broadcast of the inputs above :data:`MAX_POINTS` before anything is made."""
    try:
        shape = np.broadcast_shapes(*(np.shape(v) for v in values.values() if v is not None))
    except ValueError:
        shapes = {k: np.shape(v) for k, v in values.items() if v is not None}
        raise ValueError(f"the inputs do not broadcast together: {shapes}") from None
    if math.prod(shape) > MAX_POINTS:
        raise ValueError(f"the inputs broadcast to shape {shape}, {math.prod(shape)} points, "
                         f"above the limit of {MAX_POINTS}")


def evaluate(names, **values):
    """Evaluate the named :data:`QUANTITIES` on broadcast inputs.

    ``values`` holds the inputs (``C``, ``N``, ``M``, ``T``, ``xi``, ``L``,
    ``d``, ``eps``, ``zeta``, ``target``) and constants (``alpha``,
    ``prefactor``, ``loss0``, ``c_stat``); arrays broadcast together like
    numpy. Returns ``{name: ndarray}``. A missing input or constant raises
    :class:`ValueError` naming it.

        >>> out = evaluate(["data_law", "threshold_compute"], N=np.array([10.0, 100.0]), xi=1.0,
        ...                L=1, d=1, c_stat=1.0)
        >>> out["data_law"]
        array([0.1 , 0.01])
        >>> sorted(out)
        ['data_law', 'threshold_compute']
    """
    if isinstance(names, str):  # one name, not its letters
        names = [names]
    _check_points(values)
    out = {}
    for name in names:
        try:
            fn, args, consts, _ = QUANTITIES[name]
        except KeyError:
            raise ValueError(f"unknown quantity {name!r}; "
                             f"choose from {sorted(QUANTITIES)}") from None
        missing = [a for a in args + consts if values.get(a) is None]
        if missing:
            raise ValueError(f"quantity {name!r} needs {', '.join(missing)}")
        out[name] = np.asarray(fn(*[values[a] for a in args],
                                  **{c: values[c] for c in consts}), dtype=np.float64)
    return out


def evaluate_grid(names, **values):
    """Like :func:`evaluate` on the outer product of the 1-D inputs.

    Every array-valued input becomes one axis of the grid (in the order
    given); scalars stay scalars. Returns ``(axes, results)`` where ``axes``
    is ``{input: 1-D array}`` and each result has shape
    ``tuple(len(a) for a in axes.values())``.

        >>> axes, res = evaluate_grid(["data_law"], N=np.array([10.0, 100.0]),
        ...                            xi=np.array([1.0, 2.0, 3.0]), c_stat=1.0)
        >>> list(axes), res["data_law"].shape
        (['N', 'xi'], (2, 3))
    """
    axes = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in values.items()
            if v is not None and np.ndim(v) > 0}
    full = tuple(v.size for v in axes.values())
    if math.prod(full) > MAX_POINTS:  # before the kernels make the outer product
        raise ValueError(f"the grid has shape {full}, {math.prod(full)} points, above the "
                         f"limit of {MAX_POINTS}")
    n = len(axes)
    grid = dict(values)
    for i, (k, v) in enumerate(axes.items()):
        shape = [1] * n
        shape[i] = v.size
        grid[k] = v.reshape(shape)
    res = evaluate(names, **grid)
    return axes, {k: np.broadcast_to(r, full) for k, r in res.items()}
