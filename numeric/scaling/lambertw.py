"""Real Lambert W, vectorised: ``attndyn.lambertw(z, branch=0)``.

The Lambert W function solves ``w * exp(w) = z``. For real arguments it has
two real branches:

===========  =====================  ======================
branch       domain                 range
===========  =====================  ======================
``0``  (W0)  ``[-1/e, inf]``        ``[-1, inf]``
``-1`` (W-1) ``[-1/e, 0]``          ``[-inf, -1]``
===========  =====================  ======================

Values are computed by the compiled kernels of :mod:`attndyn.kernels.lambertw`
(numba), which are accurate to about one unit in the last place: against
50-digit mpmath the maximum relative error is below 2.3e-16 on both branches,
including arguments within 1e-12 of the branch point (the error is measured
against the exact W of the float64 input). Special values are exact:
``W0(0) = 0``, ``W(-1/e) = -1`` on both branches (for the double nearest to
``-1/e``), ``W0(e) = 1``, ``W0(inf) = inf``; ``W-1(0) = -inf`` is the limit.
Arguments outside the domain give NaN, or a :class:`ValueError` with
:func:`lambertw_checked`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attndyn.kernels.lambertw import (INV_E, check_lambertw_args, lambertw0_ufunc,
                                      lambertwm1_ufunc)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = ["lambertw", "lambertw_checked", "INV_E"]


def _checked_args(z: ArrayLike, branch: object) -> tuple[np.ndarray, int]:
    """``(z as float64, branch)`` through the one validator of the kernels
    (:func:`attndyn.kernels.lambertw.check_lambertw_args`): ``None``, text, objects and
    complex ``z`` are refused, never parsed; ``branch`` is the integer 0 or -1 (``-1.0``
    and ``True`` are refused)."""
    checked: tuple[np.ndarray, int] = check_lambertw_args(z, branch)
    return checked


def lambertw(z: ArrayLike, branch: int = 0) -> NDArray[np.float64] | np.float64:
    """Real Lambert W, ``W_branch(z)``, elementwise, as float64.

    Parameters
    ----------
    z : array_like of real
        Arguments; any shape (a scalar gives a numpy float64 scalar).
    branch : {0, -1}
        ``0`` for the principal branch W0 (``W >= -1``), ``-1`` for the lower
        real branch W-1 (``W <= -1``).

    Returns
    -------
    w : ndarray of float64 (or float64 scalar)
        ``w * exp(w) == z``; NaN where ``z`` is outside the branch's domain
        (``z < -1/e`` for both, ``z > 0`` for W-1) or NaN.

    Raises
    ------
    ValueError
        ``branch`` not 0 or -1.
    TypeError
        ``branch`` not an integer, or ``z`` complex or not numeric.

    Notes
    -----
    The kernel (see :mod:`attndyn.kernels.lambertw`) uses the branch-point
    series in ``p = sqrt(2 (1 + e z))`` with ``1 + e z`` in double-double,
    rational and asymptotic starts, and Halley/Newton steps whose residual is
    computed to about one rounding of the result.

    Examples
    --------
    >>> round(float(lambertw(1.0)), 12)            # the omega constant
    0.56714329041
    >>> round(float(lambertw(-0.2, branch=-1)), 12)
    -2.542641357774
    >>> w = lambertw([0.0, 1.0, 10.0])
    >>> bool(abs(w * np.exp(w) - [0.0, 1.0, 10.0]).max() < 1e-14)   # w e^w = z
    True
    """
    arr, k = _checked_args(z, branch)
    f = lambertw0_ufunc if k == 0 else lambertwm1_ufunc
    w: np.ndarray | np.float64 = f(arr)
    return w


def lambertw_checked(z: ArrayLike, branch: int = 0) -> NDArray[np.float64] | np.float64:
    """Like :func:`lambertw` but raise :class:`ValueError` outside the domain.

    The message names the argument ``z``, gives the first offending value
    and its index, and the allowed interval of the branch. NaN inputs are
    outside the domain.

        >>> round(float(lambertw_checked(1.0)), 6)
        0.567143
        >>> lambertw_checked(-1.0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: z is outside the domain of the Lambert W branch 0: z = -1.0; allowed z in [-1/e, inf]...
    """
    arr, k = _checked_args(z, branch)
    w = lambertw(arr, k)
    bad = np.isnan(np.asarray(w))
    if np.any(bad):
        idx = np.argwhere(np.atleast_1d(bad))[0]
        val = np.atleast_1d(arr)[tuple(idx)] if arr.ndim else arr[()]
        where = f" at index {tuple(int(i) for i in idx)}" if arr.ndim else ""
        dom = "[-1/e, inf]" if k == 0 else "[-1/e, 0]"
        raise ValueError(
            f"z is outside the domain of the Lambert W branch {k}: z = {float(val)!r}{where}; "
            f"allowed z in {dom} with -1/e = {-INV_E!r}"
        )
    return w
