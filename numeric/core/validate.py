"""Argument checks shared by the model constructors (tied, untied, direct S).

Private: the messages are part of the tested behaviour, so every model goes
through the same functions here instead of repeating the checks.
"""

from __future__ import annotations

import math

import numpy as np

from attndyn.symbolic.hierarchy import check_K, check_trainable
from attndyn.symbolic.words import Alphabet

__all__ = ["check_model_args", "check_loss", "check_int_ge1", "check_t_eval", "check_max_steps",
           "resolve_seed", "resolve_rng", "RNG_RULE", "kernel_array", "check_eta", "check_batch", "check_threads",
           "check_int_per", "check_finite_result",
           "MAX_STEPS_CAP", "real_array",
           "_check_nonneg_float", "check_pos_float"]


def real_array(x, name: str) -> np.ndarray:
    """``x`` as a float64 array; complex input is refused (casting would drop the
    imaginary part silently), as is anything that is not an array of numbers."""
    try:
        cplx = np.iscomplexobj(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers") from None
    if cplx:
        raise TypeError(f"{name} must be real, got a complex array (the imaginary part would "
                        "be dropped)")
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers") from None


def kernel_array(x, name: str, *, dtype=np.float64, ndim: int | None = None,
                 shape: tuple | None = None, finite: bool = False) -> np.ndarray:
    """``x`` as the array a compiled kernel with an explicit signature accepts: a plain
    ``numpy.ndarray`` of ``dtype``, C-contiguous and writable (numba types read-only and
    non-contiguous arrays differently, so they match no signature: "No matching
    definition").

    A read-only array (``a.flags.writeable`` False, a ``numpy.memmap`` opened with
    ``mode="r"``, a broadcast view) or a non-contiguous or mistyped one is copied; an array
    that already qualifies is returned as is (a writable ``memmap`` as a plain view of the
    same memory, no copy). Complex input is refused (the imaginary part would be dropped),
    as are a wrong ``ndim`` or ``shape`` (``None`` entries of ``shape`` match any length) and,
    with ``finite``, NaN or inf. Errors name ``name``.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        a = real_array(x, name)
        if a.dtype != dtype:
            a = a.astype(dtype)
    else:
        try:
            a = np.asarray(x)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be an array of {dtype}") from None
        if a.dtype != dtype:
            if not np.can_cast(a.dtype, dtype, casting="same_kind") or a.dtype.kind in "fcOUSV":
                raise TypeError(f"{name} must be an array of {dtype}, got dtype {a.dtype}")
            a = a.astype(dtype)
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if shape is not None and (a.ndim != len(shape) or any(
            s is not None and s != n for s, n in zip(shape, a.shape))):
        want = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    if finite and a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    if not (a.flags.c_contiguous and a.flags.writeable):
        return np.array(a, dtype=dtype, order="C", copy=True)
    return a.view(np.ndarray) if type(a) is not np.ndarray else a


def check_eta(eta, name: str = "eta") -> float:
    """A learning rate: a finite real number ``> 0``."""
    if isinstance(eta, bool) or not isinstance(eta, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} (learning rate) must be a real number > 0, got {eta!r}")
    eta = float(eta)
    if not math.isfinite(eta) or eta <= 0:
        raise ValueError(f"{name} (learning rate) must be a finite number > 0, got {eta}")
    return eta


def check_batch(batch, name: str = "batch") -> int:
    """A mini-batch size: an int ``>= 1`` (bools and floats refused)."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {batch!r}")
    if batch < 1:
        raise ValueError(f"{name} must be an int >= 1, got {batch}")
    return int(batch)


def check_threads(threads, available: int, name: str = "threads") -> int:
    """A thread count: ``None`` (all ``available``) or an int in ``1..available``.

    A larger request is refused, not clamped silently (``threads=10**6`` ran on
    ``available`` threads and recorded the request); ``available`` is numba's
    ``config.NUMBA_NUM_THREADS`` for numba kernels.
    """
    available = int(available)
    if threads is None:
        return available
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"{name} must be None or an int in 1..{available}, got {threads!r}")
    if not 1 <= threads <= available:
        raise ValueError(f"{name} must be None or an int in 1..{available} (numba's thread "
                         f"count, NUMBA_NUM_THREADS), got {threads}")
    return int(threads)


def check_int_per(x, n: int, name: str, low: int = 1) -> list:
    """One int ``>= low`` or ``n`` of them (a list, tuple or integer array), as a list of
    ``n`` ints. Floats are refused, integral or not (``width=2.7`` was truncated to 2)."""
    vals = list(x) if isinstance(x, (list, tuple, np.ndarray)) else [x] * n
    if len(vals) != n:
        raise ValueError(f"{name} must be an int >= {low} or {n} of them, got {len(vals)} values")
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int >= {low} (or {n} of them), got {v!r}")
        if v < low:
            raise ValueError(f"{name} must be an int >= {low} (or {n} of them), got {v}")
        out.append(int(v))
    return out


def check_finite_result(values, name: str, source: str) -> np.ndarray:
    """``values`` computed from finite input (``source`` says which) as a float array; if any
    is NaN or inf, a ValueError says so instead of returning it: moments of matrices with
    entries near 1e200 overflow float64 (``mu_(0,0) = Tr(S S)/d`` of 1e200 entries is inf)."""
    v = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(v)
    if bad.any():
        raise ValueError(f"{name} overflow float64 ({int(bad.sum())} of {v.size} are NaN or "
                         f"inf) although {source} is finite; rescale {source} (entries of "
                         f"order 1e150 or more overflow its traces)")
    return v


def _check_nonneg_float(x, name):
    """A finite real number ``>= 0`` as a float."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number >= 0, got {x!r}")
    x = float(x)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite real number >= 0, got {x}")
    return x


def check_pos_float(x, name):
    """A finite real number ``> 0`` as a float."""
    x = _check_nonneg_float(x, name)
    if x <= 0:
        raise ValueError(f"{name} must be > 0, got {x}")
    return x


def check_int_ge1(x, name: str) -> int:
    """An int ``>= 1`` (bools rejected)."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {x!r}")
    if x < 1:
        raise ValueError(f"{name} must be an int >= 1, got {x}")
    return int(x)


#: Largest ``max_steps`` accepted: the step counters of the kernels are int64,
#: and 2**62 leaves room for their arithmetic (a run this long never ends anyway).
MAX_STEPS_CAP = 2 ** 62


def check_max_steps(max_steps, name: str = "max_steps") -> int:
    """A step limit: an int with ``1 <= max_steps <= MAX_STEPS_CAP`` (2**62)."""
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)):
        raise TypeError(f"{name} must be an int between 1 and 2**62, got {max_steps!r}")
    if not 1 <= max_steps <= MAX_STEPS_CAP:
        raise ValueError(f"{name} must be an int between 1 and 2**62, got {max_steps}")
    return int(max_steps)


def check_t_eval(t_eval, name="t_eval") -> np.ndarray:
    """Output times: a non-empty, finite, non-decreasing array starting at ``>= 0``."""
    if isinstance(t_eval, (list, tuple)) and 0 < len(t_eval) <= 64:
        # a short list of Python numbers, checked in Python: six numpy calls cost ~30 us
        # per integrate call after a kernel has evicted numpy's code (measured, issue 11)
        prev = 0.0
        for x in t_eval:
            if type(x) is not float and not (type(x) is int and abs(x) < 2 ** 53):
                break
            if not (math.isfinite(x) and x >= prev):
                break  # the checks below name what is wrong
            prev = x
        else:
            return np.array(t_eval, dtype=np.float64)
    try:
        cplx = np.iscomplexobj(t_eval)  # the cast below would drop the imaginary part
        t = np.asarray(t_eval, dtype=np.float64) if not cplx else None
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of times") from None
    if t is None:
        raise TypeError(f"{name} must be real, got complex times")
    if t.ndim > 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {t.shape}")
    t = t.ravel()  # a single time: one output
    if t.size == 0:
        raise ValueError(f"{name} must contain at least one time")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{name} must be finite")
    if t[0] < 0:
        raise ValueError(f"{name} must be >= 0 (integration starts at t = 0), got {t[0]}")
    if np.any(np.diff(t) < 0):
        raise ValueError(f"{name} must be non-decreasing")
    # read-only or memory-mapped times are accepted: the kernels need a writable C array
    return kernel_array(t, name, ndim=1)


def check_model_args(K, trainable, L, C, weight_decay, *, alphabet: bool = False,
                     identity_as_none: bool = False):
    """Validate the common constructor arguments, in this order: ``K``,
    ``trainable``, ``L``, ``C``, ``weight_decay``.

    Returns ``(K, trainable, L, C, gamma)``; with ``alphabet=True`` (tied
    models) the first entry is the :class:`~attndyn.symbolic.words.Alphabet`
    of ``K`` letters, which validates ``K`` with its own messages. With
    ``identity_as_none`` a ``C`` of ``None`` (the identity) stays ``None``, so that the
    caller can make the SymPy matrix only when it needs it (SymPy is not imported here).
    """
    if isinstance(K, (int, np.integer)) and not isinstance(K, bool) and K > 1:
        check_K(K)  # bounded before any K-sized object or the K x K potential is built
    if alphabet:
        first = Alphabet(K)
        K = first.K
    else:
        K = first = check_int_ge1(K, "K")
    trainable = check_trainable(trainable, K)
    if not trainable:
        raise ValueError(f"trainable must name at least one of the indices 0..{K - 1}, got "
                         "none: a model with nothing to train has no dynamics")
    L = check_int_ge1(L, "L")
    if C is not None or not identity_as_none:
        from attndyn.symbolic.gaussian import check_covariance
        C = check_covariance(C, L)
    gamma = _check_nonneg_float(weight_decay, "weight_decay")
    return first, trainable, L, C, gamma


def check_loss(loss, L: int, K: int):
    """A callable ``G -> sympy expression``, called once on the ``L x L x K``
    symbols so that a bad loss fails at construction."""
    if loss is None or not callable(loss):
        raise TypeError("loss must be a callable G -> sympy expression")
    from attndyn.symbolic.potential import call_loss, g_array
    call_loss(loss, g_array(L, K))
    return loss


def resolve_seed(seed, name: str = "seed") -> np.random.SeedSequence:
    """A ``SeedSequence`` from any seed a user may pass (SPEC 7).

    ``None`` (fresh entropy), an int >= 0 or a sequence of them, a ``SeedSequence`` (used as
    is), a ``numpy.random.Generator`` (four 32-bit words drawn from it: the generator
    advances, as a Generator passed to numpy would, and the drawn entropy is what the result
    records), or a dict ``{"entropy": ..., "spawn_key": [...]}`` as stored in results.
    """
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):
        words = seed.integers(0, 2**32, size=4, dtype=np.uint64)
        return np.random.SeedSequence([int(w) for w in words])
    if isinstance(seed, dict):
        try:
            return np.random.SeedSequence(seed["entropy"],
                                          spawn_key=tuple(seed.get("spawn_key", ())))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{name} dict must be {{'entropy': int, 'spawn_key': [ints]}}") from None
    if isinstance(seed, (bool, float, np.floating, str, bytes)):
        raise TypeError(f"{name} must be None, an int >= 0, a sequence of ints, a SeedSequence or "
                        f"a numpy Generator, got {seed!r}")
    try:
        return np.random.SeedSequence(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid {name} {seed!r}: {exc}") from None


#: The randomness rule of every entry point (SPEC 7), stated once; docstrings point here.
RNG_RULE = (
    "rng: None (fresh entropy), an int >= 0 or a sequence of them, a SeedSequence, a numpy "
    "Generator, or the dict a result stores as its seed. An int, sequence, SeedSequence or dict "
    "seeds a new stream: the same value gives the same numbers. A Generator is a source of "
    "entropy: four 32-bit words are drawn from it, so it advances, the same Generator object "
    "passed twice gives different numbers, and two Generators built the same way give the same "
    "numbers (but not those of the int they were built from). seed= is the older name of rng=; "
    "passing both is an error.")


def resolve_rng(rng=None, seed=None, *, name: str = "rng", default=None) -> np.random.SeedSequence:
    """The ``SeedSequence`` of a call that takes ``rng=`` and its alias ``seed=`` (SPEC 7).

    One rule for every entry point (:data:`RNG_RULE`):

    - ``None`` (both keywords): ``default`` if given (a sweep defaults to 0, so that it can
      resume), else fresh OS entropy;
    - an int ``>= 0``, a sequence of them, a ``SeedSequence`` or the dict
      ``{"entropy": ..., "spawn_key": [...]}`` a result records: a new stream, the same
      value gives the same numbers (a ``SeedSequence`` is used as is);
    - a ``numpy.random.Generator``: used as a source of entropy, four 32-bit words are
      drawn from it (:func:`resolve_seed`). It advances, so the same object passed twice
      gives different numbers, while two Generators built the same way
      (``default_rng(0)`` twice) give the same ones. The drawn entropy is what the result
      records, so a run started from a Generator is reproduced from its record.

    ``seed`` is accepted as an alias of ``rng``; passing both (not ``None``) is a
    ``TypeError``. ``name`` is the entry point, named in the messages.

    Examples
    --------
    >>> resolve_rng(rng=3).entropy, resolve_rng(seed=3).entropy
    (3, 3)
    >>> g = np.random.default_rng(0)
    >>> resolve_rng(rng=g).entropy == resolve_rng(rng=g).entropy
    False
    """
    if rng is not None and seed is not None:
        raise TypeError(f"{name}: pass rng= or its alias seed=, not both")
    value, key = (seed, "seed") if rng is None and seed is not None else (rng, "rng")
    if value is None:
        if default is None:
            return np.random.SeedSequence()
        value = default
    return resolve_seed(value, key)
