"""Generic array-driven right-hand side of a moment hierarchy.

Every hierarchy in attndyn has the form (paper 003, eqs. 11, 13, 31-32, 402-404)

    dy_i/dt = sum_{t in row i} coef_t * g[ent_t] * y[src_t],
    g = ( f(y[gather], p), consts ),

where ``f`` is a small compiled potential gradient (the ``Gamma_kl`` of the
tied model, say) and ``consts`` holds constants such as the decay
``gamma/2``. The structure arrays come from ``attndyn.symbolic``; ``f`` is a
first-class numba function with the fixed signature ``GRAD_SIG``, so this
kernel compiles once for every model, loss and truncation order.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

__all__ = ["GRAD_SIG", "GRAD_FTYPE", "VALGRAD_SIG", "VALGRAD_FTYPE", "sparse_rhs", "rhs_into"]

GRAD_SIG = types.void(types.float64[::1], types.float64[::1], types.float64[::1])
GRAD_FTYPE = types.FunctionType(GRAD_SIG)
VALGRAD_SIG = types.float64(types.float64[::1], types.float64[::1], types.float64[::1])
VALGRAD_FTYPE = types.FunctionType(VALGRAD_SIG)

_i64 = types.int64[::1]
_f64 = types.float64[::1]

RHS_SIG = types.void(
    _f64,             # y
    GRAD_FTYPE,       # gfun
    _f64,             # gparams
    _i64,             # gather
    _f64,             # consts
    _i64,             # indptr
    types.int32[::1],  # src
    types.int16[::1],  # ent
    types.int16[::1],  # coef
    _f64,             # xbuf (len gather)
    _f64,             # gout (len n_grad)
    _f64,             # g (len n_grad + len consts)
    _f64,             # dy (out)
)


@njit(RHS_SIG, cache=True)
def sparse_rhs(y, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, dy):
    """Write ``dy = F(y)`` for the sparse bilinear hierarchy into ``dy``."""
    for i in range(gather.size):
        j = gather[i]
        xbuf[i] = y[j] if j >= 0 else 0.0
    gfun(xbuf, gparams, gout)
    ng = gout.size
    for i in range(ng):
        g[i] = gout[i]
    for i in range(consts.size):
        g[ng + i] = consts[i]
    n = dy.size
    for i in range(n):
        acc = 0.0
        for t in range(indptr[i], indptr[i + 1]):
            acc += coef[t] * g[ent[t]] * y[src[t]]
        dy[i] = acc


def rhs_into(system, y, dy=None):
    """Python-level convenience: evaluate the RHS of ``system`` at ``y``.

    ``system`` is any object with the attributes ``gfun, gparams, gather,
    consts, indptr, src, ent, coef, n_grad``.
    """
    y = np.ascontiguousarray(y, dtype=np.float64)
    if dy is None:
        dy = np.empty_like(y)
    xbuf = np.empty(system.gather.size)
    gout = np.empty(system.n_grad)
    g = np.empty(system.n_grad + system.consts.size)
    sparse_rhs(y, system.gfun, system.gparams, system.gather, system.consts, system.indptr,
               system.src, system.ent, system.coef, xbuf, gout, g, dy)
    return dy
