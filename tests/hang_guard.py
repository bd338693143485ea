"""Hang guards for the input-safety tests.

These are not timings. They catch an input that makes the program work without end (a
``9**9**9``, an order-10^9 enumeration, an inflated zip member): such work takes minutes to
forever, while the refusal it should meet costs milliseconds. So the limit sits far above the
warm cost (at least 50x), it is counted in process CPU time (the machine's load does not
count), and a miss is tried once more before it fails, so that a garbage collection of the
suite's objects or a lazy import on the first call cannot fail a test (the CI run that
prompted this spent 1.07 s of CPU time, once, on parsing "+").
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def finishes(fn: Callable[[], T], limit: float = 5.0, what: str = "") -> T:
    """Return ``fn()``; fail if it takes more than ``limit`` seconds of CPU time twice."""
    spent = []
    for _ in range(2):
        t0 = time.process_time()
        out = fn()
        spent.append(time.process_time() - t0)
        if spent[-1] < limit:
            return out
    raise AssertionError(f"{what or fn!r}: {spent[0]:.2f} s and {spent[1]:.2f} s of CPU time, "
                         f"both above the hang guard's {limit} s")
