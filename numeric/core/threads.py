"""One thread policy for the numba kernels and the BLAS library (OpenBLAS, MKL) under them.

The SGD steps, the matrix flow and the array-API SGD on NumPy call BLAS thousands of
times a second on matrices of a few hundred rows, between numba loops. Each pool
spin-waits for a while after its call, so a BLAS pool of several threads competes with
numba's threads and with every other process for the cores, and on a small or shared
machine it multiplies the CPU time instead of dividing the wall time: the golden SGD
scenario at the CLI's size (``d = 200``, ``B = 256``, 2 cores under load) took 4.7-7.5 s
of process CPU time with OpenBLAS's default 2 threads against 0.67 s with one.

The policy (:func:`compute_threads`):

- numba threads: the caller's request (``threads=`` of :func:`attndyn.sgd`), else the
  environment variable ``ATTNDYN_NUMBA_THREADS``, else numba's current count; an int in
  ``1..NUMBA_NUM_THREADS``;
- BLAS threads: the keyword, else the value of an enclosing :func:`compute_threads` (so
  ``compare(..., blas_threads=4)`` reaches the flow it runs), else the environment
  variable ``ATTNDYN_BLAS_THREADS``, else 1: the products are small and interleaved with numba's loops, where one thread
  measured fastest (above). ``"auto"`` gives BLAS the cores numba does not use,
  ``max(1, cores // numba_threads)`` (``cores`` = the CPUs this process may run on), for a
  quiet many-core machine and large ``d``.

Inside a worker of :func:`attndyn.sweep` the pools are already sized per worker; the
limits here only lower them further. Results do not depend on the thread counts (numba's
chunking is fixed; BLAS splits rows and columns, not sums).
"""

from __future__ import annotations

import numbers
import os
import threading
from contextlib import contextmanager

__all__ = ["compute_threads", "resolve_threads", "available_cores", "BLAS_ENV", "NUMBA_ENV"]

#: Environment variables that override the defaults (an int >= 1, or "auto" for BLAS).
BLAS_ENV = "ATTNDYN_BLAS_THREADS"
NUMBA_ENV = "ATTNDYN_NUMBA_THREADS"


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one).

        >>> available_cores() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def _int_or_auto(value, name: str, allow_auto: bool):
    """An int >= 1 (from an int or its decimal string), or "auto" where allowed."""
    want = 'an int >= 1 or "auto"' if allow_auto else "an int >= 1"
    if isinstance(value, str):
        v = value.strip().lower()
        if allow_auto and v == "auto":
            return "auto"
        try:
            value = int(v)
        except ValueError:
            raise ValueError(f"{name} must be {want}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {want}, got {value!r}")
    value = int(value)
    if value < 1:
        raise ValueError(f"{name} must be {want}, got {value}")
    return value


def resolve_threads(numba_threads=None, blas_threads=None) -> tuple[int, int]:
    """``(numba threads, BLAS threads)`` by the policy of this module (keywords first,
    then ``ATTNDYN_NUMBA_THREADS`` / ``ATTNDYN_BLAS_THREADS``, then the defaults).

    >>> resolve_threads(1, 1)
    (1, 1)
    """
    import numba
    top = int(numba.config.NUMBA_NUM_THREADS)
    src = "numba_threads"
    if numba_threads is None and os.environ.get(NUMBA_ENV, "").strip():
        numba_threads, src = os.environ[NUMBA_ENV], NUMBA_ENV
    if numba_threads is None:
        nt = int(numba.get_num_threads())
    else:
        nt = _int_or_auto(numba_threads, src, allow_auto=False)
        if nt > top:
            raise ValueError(f"{src} must be an int in 1..{top} (numba's thread count, "
                             f"NUMBA_NUM_THREADS), got {nt}")
    src = "blas_threads"
    if blas_threads is None and _ACTIVE.stack:
        blas_threads = _ACTIVE.stack[-1]  # an enclosing compute_threads decides
    if blas_threads is None and os.environ.get(BLAS_ENV, "").strip():
        blas_threads, src = os.environ[BLAS_ENV], BLAS_ENV
    bt = 1 if blas_threads is None else _int_or_auto(blas_threads, src, allow_auto=True)
    if bt == "auto":
        bt = max(1, available_cores() // nt)
    return nt, bt


@contextmanager
def compute_threads(numba_threads=None, blas_threads=None):
    """Run the block with numba's thread count set and BLAS limited (threadpoolctl), both
    restored on exit; yields ``(numba threads, BLAS threads)``.

    Parameters
    ----------
    numba_threads : int, optional
        Threads of numba's parallel loops, ``1..NUMBA_NUM_THREADS``; default
        ``ATTNDYN_NUMBA_THREADS`` or numba's current count.
    blas_threads : int or "auto", optional
        Threads of the BLAS library; default the enclosing block's, else
        ``ATTNDYN_BLAS_THREADS``, else 1 (module docstring: the measured reason);
        ``"auto"``: ``max(1, cores // numba_threads)``.

    >>> with compute_threads(1, 1) as (nt, bt):
    ...     (nt, bt)
    (1, 1)
    """
    nt, bt = resolve_threads(numba_threads, blas_threads)
    import numba
    old = numba.get_num_threads()
    numba.set_num_threads(nt)
    _ACTIVE.stack.append(bt)
    try:
        with _controller().limit(limits=bt, user_api="blas"):
            yield nt, bt
    finally:
        _ACTIVE.stack.pop()
        numba.set_num_threads(old)


class _Active(threading.local):
    """BLAS threads of the enclosing :func:`compute_threads` blocks of this thread."""

    def __init__(self):
        self.stack: list = []


_ACTIVE = _Active()


_CONTROLLER: list = [None, -1]


def _controller():
    """threadpoolctl's view of the loaded BLAS libraries, rebuilt only after an import
    (scanning the libraries costs about 1 ms, a limit 20 us; a library is loaded only by
    an import)."""
    import sys
    if _CONTROLLER[1] != len(sys.modules):
        from threadpoolctl import ThreadpoolController
        _CONTROLLER[0] = ThreadpoolController()
        _CONTROLLER[1] = len(sys.modules)
    return _CONTROLLER[0]
