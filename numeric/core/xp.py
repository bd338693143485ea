"""Array namespaces and devices for the array-API backends (NumPy on a CPU, CuPy on a GPU).

Code written against the Python array API standard takes its functions from a
namespace ``xp`` and never from ``numpy`` directly; this module hands out that
namespace for a device and the few things the standard does not cover (random
normals, ``erf``, moving arrays to the host, floating-point warnings, free memory),
and evaluates SymPy expressions on arrays of any namespace without printing code.

Devices: ``"cpu"`` (NumPy, through ``array_api_compat.numpy`` when
``array-api-compat`` is installed, else NumPy >= 2 itself, whose main namespace
follows the standard) and ``"cuda"`` / ``"cuda:N"`` (CuPy through
``array_api_compat.cupy``; ``pip install "attndyn[gpu]"``). A device that cannot
be used is refused with one line naming what is missing
(:class:`DeviceUnavailableError`): CuPy not installed, no CUDA device, or
``array-api-compat`` not installed.
"""

from __future__ import annotations

import contextlib
import math
import re

import numpy as np

__all__ = ["DeviceUnavailableError", "DEVICES", "DTYPES", "check_device", "namespace",
           "device_context", "is_numpy", "to_host", "check_dtype", "normal_generator",
           "erf_function", "quiet_fp", "free_memory", "synchronize", "ExpressionEvaluator"]

DEVICES = ("cpu", "cuda", "cuda:N")
DTYPES = ("float64", "float32")

_GPU_HINT = 'pip install "attndyn[gpu]" (CuPy for CUDA 12 and array-api-compat)'


class DeviceUnavailableError(RuntimeError):
    """The requested device cannot be used here (the message names what is missing)."""


def check_device(device) -> tuple:
    """``("cpu", None)`` or ``("cuda", index)`` from ``"cpu"``, ``"cuda"``, ``"cuda:N"``
    (``None`` means ``"cpu"``); anything else is a ``ValueError``."""
    if device is None:
        return "cpu", None
    if not isinstance(device, str):
        raise TypeError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if device == "cpu":
        return "cpu", None
    m = re.fullmatch(r"cuda(?::(\d{1,3}))?", device)
    if m is None:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return "cuda", (int(m.group(1)) if m.group(1) is not None else None)


def _cpu_namespace():
    try:
        import array_api_compat.numpy as xp
        return xp
    except ImportError:
        pass
    if int(np.__version__.split(".")[0]) >= 2:
        return np  # NumPy >= 2 follows the standard in its main namespace
    raise DeviceUnavailableError(
        f"device='cpu' with the array-API backend needs NumPy >= 2 or array-api-compat "
        f"(NumPy {np.__version__} here, array-api-compat not installed): "
        "pip install array-api-compat")


def _cuda_namespace(index):
    try:
        import cupy
    except ImportError:
        raise DeviceUnavailableError(
            f"device='cuda' needs CuPy, which is not installed: {_GPU_HINT}") from None
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError and driver errors: no usable device
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DeviceUnavailableError(
            f"device='cuda': CuPy is installed but no CUDA device is available ({msg})") from None
    if n < 1:
        raise DeviceUnavailableError("device='cuda': CuPy is installed but no CUDA device is "
                                     "available (0 devices)")
    if index is not None and index >= n:
        raise DeviceUnavailableError(f"device='cuda:{index}': only {n} CUDA device(s) here "
                                     f"(cuda:0 .. cuda:{n - 1})")
    try:
        import array_api_compat.cupy as xp
    except ImportError:
        raise DeviceUnavailableError(
            f"device='cuda' needs array-api-compat, which is not installed: {_GPU_HINT}") from None
    return xp


def namespace(device="cpu"):
    """The array namespace ``xp`` of ``device`` (see the module docstring); raises
    :class:`DeviceUnavailableError` naming what is missing."""
    kind, index = check_device(device)
    if kind == "cpu":
        return _cpu_namespace()
    return _cuda_namespace(index)


def device_context(device):
    """Context in which new arrays go to ``device`` (``cuda:N`` selects GPU ``N``)."""
    kind, index = check_device(device)
    if kind == "cuda" and index is not None:
        import cupy
        return cupy.cuda.Device(index)
    return contextlib.nullcontext()


def is_numpy(xp) -> bool:
    """Whether ``xp`` is NumPy (directly or through array-api-compat)."""
    return xp is np or getattr(xp, "__name__", "") == "array_api_compat.numpy"


def to_host(x) -> np.ndarray:
    """A NumPy copy of an array of any namespace (CuPy: ``.get()``)."""
    if isinstance(x, np.ndarray):
        return np.array(x)
    get = getattr(x, "get", None)
    if callable(get):
        return np.asarray(get())
    return np.array(np.from_dlpack(x))


def check_dtype(xp, dtype):
    """``xp.float64`` or ``xp.float32`` from ``"float64"``/``"float32"`` (or NumPy dtypes)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    return getattr(xp, name)


def normal_generator(xp, seed_sequence: np.random.SeedSequence):
    """``draw(shape, dtype) -> xp array`` of independent standard normals from one
    stream seeded by ``seed_sequence`` (NumPy: SFC64, 20 % faster than PCG64 for normals
    here; CuPy: its default generator,
    seeded with 64 bits of the sequence). The same sequence gives the same numbers
    on the same device."""
    if is_numpy(xp):
        gen = np.random.Generator(np.random.SFC64(seed_sequence))

        def draw(shape, dtype, out=None):
            return gen.standard_normal(size=shape, dtype=dtype, out=out)
        return draw
    mod = getattr(xp, "__name__", "")
    if mod.endswith("cupy"):
        import cupy
        gen = cupy.random.default_rng(int(seed_sequence.generate_state(1, np.uint64)[0]))

        def draw(shape, dtype, out=None):
            z = gen.standard_normal(size=shape, dtype=dtype)
            if out is None:
                return z
            out[...] = z
            return out
        return draw
    raise DeviceUnavailableError(f"no random normal generator for the namespace {mod!r}")


def erf_function(xp):
    """``erf`` on arrays of ``xp`` (the standard has none): SciPy for NumPy, CuPy's
    ``cupyx.scipy.special`` for CuPy."""
    if is_numpy(xp):
        from scipy.special import erf
        return erf
    if getattr(xp, "__name__", "").endswith("cupy"):
        from cupyx.scipy.special import erf
        return erf
    raise TypeError(f"erf is not available for the namespace {getattr(xp, '__name__', xp)!r}")


def quiet_fp(xp):
    """Silence NumPy's floating-point warnings (a diverging run is reported by its
    status, as the numba kernels do); a no-op elsewhere."""
    if is_numpy(xp):
        return np.errstate(all="ignore")
    return contextlib.nullcontext()


def free_memory(xp) -> int | None:
    """Free bytes for new arrays of ``xp``: the GPU's free memory for CuPy, the
    machine's available memory for NumPy, ``None`` when unknown."""
    if getattr(xp, "__name__", "").endswith("cupy"):
        import cupy
        free, _total = cupy.cuda.runtime.memGetInfo()
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def synchronize(xp) -> None:
    """Wait for the device's queued work (timing on a GPU); a no-op on NumPy."""
    if getattr(xp, "__name__", "").endswith("cupy"):
        import cupy
        cupy.cuda.get_current_stream().synchronize()


# ---------------------------------------------------------------------------
# SymPy expressions on arrays, without printing code

_UNARY = {
    "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
    "sinh": "sinh", "cosh": "cosh", "atan": "atan", "asin": "asin", "acos": "acos",
    "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "Abs": "abs", "sign": "sign",
}


class ExpressionEvaluator:
    """SymPy expressions in ``inputs`` evaluated elementwise on arrays of any namespace.

    The expressions (with their common subexpressions shared, ``sympy.cse``) are
    turned once into a tree of whitelisted operations (numbers, ``+``, ``*``,
    powers, the functions of ``_UNARY``, ``erf``, ``Max``, ``Min``, ``Heaviside``,
    ``Piecewise`` over comparisons); nothing is printed or executed as code. A
    node outside the whitelist is a ``TypeError`` naming it. ``params`` are
    replaced by the numbers ``values``.

    ``evaluate(xp, columns)`` takes one array per input (``None`` for an input no
    expression uses) and returns one array (or Python float) per expression.
    """

    def __init__(self, exprs, inputs, params=(), values=()):
        import sympy as sp
        self._sp = sp
        self.inputs = list(inputs)
        sub = {s: sp.Float(float(v)) for s, v in zip(params, values)}
        from attndyn.symbolic.sympify import as_sympy  # numbers and SymPy only: text refused
        exprs = [as_sympy(e, "expression").xreplace(sub) for e in exprs]
        extra = set().union(*(e.free_symbols for e in exprs)) - set(self.inputs) if exprs else set()
        if extra:
            raise ValueError(f"expressions have undeclared symbols {sorted(map(str, extra))}")
        repl, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_cse"))
        self._pos = {s: i for i, s in enumerate(self.inputs)}
        self._tmp = {}
        self._program = []
        for sym, e in repl:
            self._tmp[sym] = len(self._program)
            self._program.append(self._build(e))
        self._outputs = [self._build(e) for e in reduced]
        used = set().union(*(e.free_symbols for e in exprs)) if exprs else set()
        self.used = sorted(self._pos[s] for s in used)

    # the tree: ("in", i) | ("tmp", i) | ("num", x) | ("add"|"mul"|"max"|"min", [..])
    # | ("pow", node, "int"|"sqrt"|"float", e) | ("powe", node, node) | ("fn", name, node)
    # | ("erf", node) | ("heaviside", node, h0) | ("piecewise", [(value, cond)])
    # | ("cmp", op, a, b)
    def _build(self, e):
        sp = self._sp
        if e in self._pos:
            return ("in", self._pos[e])
        if e in self._tmp:
            return ("tmp", self._tmp[e])
        if e is sp.true or e is sp.false:
            return ("num", 1.0 if e is sp.true else 0.0)
        if e.is_number:  # a constant subexpression (sqrt(2)/2, exp(1), pi)
            try:
                v = float(e)
            except TypeError:
                raise TypeError(f"the loss has a non-real constant {e}") from None
            if not math.isfinite(v):
                raise TypeError(f"the loss has a non-finite constant {e}")
            return ("num", v)
        if isinstance(e, sp.Add):
            return ("add", [self._build(a) for a in e.args])
        if isinstance(e, sp.Mul):
            return ("mul", [self._build(a) for a in e.args])
        if isinstance(e, sp.Pow):
            b, x = e.args
            if x.is_Number:  # classified once: no SymPy arithmetic per evaluation
                if x.is_Integer and 1 <= abs(int(x)) <= 4:
                    return ("pow", self._build(b), "int", int(x))
                if x == sp.Rational(1, 2) or x == sp.Rational(-1, 2):
                    return ("pow", self._build(b), "sqrt", 1 if x > 0 else -1)
                return ("pow", self._build(b), "float", float(x))
            return ("powe", self._build(b), self._build(x))
        if isinstance(e, sp.Max):
            return ("max", [self._build(a) for a in e.args])
        if isinstance(e, sp.Min):
            return ("min", [self._build(a) for a in e.args])
        if isinstance(e, sp.Heaviside):
            h0 = e.args[1] if len(e.args) > 1 else sp.Rational(1, 2)
            return ("heaviside", self._build(e.args[0]), float(h0))
        if isinstance(e, sp.erf):
            return ("erf", self._build(e.args[0]))
        if isinstance(e, sp.Piecewise):
            return ("piecewise", [(self._build(v), self._build(c)) for v, c in e.args])
        if isinstance(e, (sp.StrictLessThan, sp.LessThan, sp.StrictGreaterThan,
                          sp.GreaterThan, sp.Equality, sp.Unequality)):
            return ("cmp", e.rel_op, self._build(e.lhs), self._build(e.rhs))
        name = type(e).__name__
        if isinstance(e, sp.Function) and name in _UNARY and len(e.args) == 1:
            return ("fn", _UNARY[name], self._build(e.args[0]))
        raise TypeError(f"the array-API backend cannot evaluate {name} (in {e}); "
                        "use backend='numba'")

    def evaluate(self, xp, columns):
        tmp = [None] * len(self._program)
        ctx = (xp, columns, tmp)
        for i, node in enumerate(self._program):
            tmp[i] = self._eval(node, ctx)
        return [self._eval(node, ctx) for node in self._outputs]

    def _eval(self, node, ctx):
        xp, columns, tmp = ctx
        op = node[0]
        if op == "in":
            return columns[node[1]]
        if op == "tmp":
            return tmp[node[1]]
        if op == "num":
            return node[1]
        if op == "add":
            acc = self._eval(node[1][0], ctx)
            for a in node[1][1:]:
                acc = acc + self._eval(a, ctx)
            return acc
        if op == "mul":
            acc = self._eval(node[1][0], ctx)
            for a in node[1][1:]:
                acc = acc * self._eval(a, ctx)
            return acc
        method = _EVAL_OPS.get(op)
        if method is None:
            raise AssertionError(op)  # _build emits only the operations above
        return method(self, node, ctx)

    def _eval_pow(self, node, ctx):
        """A power with a constant exponent (integer, square root or real)."""
        xp = ctx[0]
        b = self._eval(node[1], ctx)
        how, x = node[2], node[3]
        if how == "int":
            out = b
            for _ in range(abs(x) - 1):
                out = out * b
            return 1.0 / out if x < 0 else out
        if how == "sqrt":
            r = math.sqrt(b) if isinstance(b, float) else xp.sqrt(b)
            return r if x > 0 else 1.0 / r
        if isinstance(b, float):
            return b ** x
        return xp.pow(b, x)

    def _eval_powe(self, node, ctx):
        """A power with an expression as exponent."""
        xp = ctx[0]
        b, x = self._eval(node[1], ctx), self._eval(node[2], ctx)
        if isinstance(b, float) and isinstance(x, float):
            return b ** x
        if isinstance(b, float):
            b = xp.full_like(x, b)
        return xp.pow(b, x)

    def _eval_extremum(self, node, ctx):
        """``Max``/``Min`` of several arguments, numbers broadcast against the arrays."""
        xp, op = ctx[0], node[0]
        f = xp.maximum if op == "max" else xp.minimum
        vals = [self._eval(a, ctx) for a in node[1]]
        arrs = [v for v in vals if not isinstance(v, float)]
        if not arrs:
            return max(vals) if op == "max" else min(vals)
        acc = arrs[0]
        for v in vals:
            if v is arrs[0]:
                continue
            acc = f(acc, v if not isinstance(v, float) else xp.full_like(acc, v))
        return acc

    def _eval_heaviside(self, node, ctx):
        """``Heaviside(a, h0)``: 0 below zero, ``h0`` at zero, 1 above."""
        xp = ctx[0]
        a = self._eval(node[1], ctx)
        if isinstance(a, float):
            return 0.0 if a < 0 else (node[2] if a == 0 else 1.0)
        one = xp.ones_like(a)
        return xp.where(a < 0, 0.0 * one, xp.where(a == 0, node[2] * one, one))

    def _eval_erf(self, node, ctx):
        """``erf`` of a number (math) or an array (the namespace's or a fallback)."""
        a = self._eval(node[1], ctx)
        return math.erf(a) if isinstance(a, float) else erf_function(ctx[0])(a)

    def _eval_fn(self, node, ctx):
        """A unary function of the namespace (exp, log, tanh, ...)."""
        xp = ctx[0]
        a = self._eval(node[2], ctx)
        if isinstance(a, float):
            a = xp.asarray(a)
        return getattr(xp, node[1])(a)

    def _eval_cmp(self, node, ctx):
        """A comparison, element by element."""
        a, b = self._eval(node[2], ctx), self._eval(node[3], ctx)
        rel = node[1]
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                "!=": a != b}[rel]

    def _eval_piecewise(self, node, ctx):
        """``Piecewise``: the first branch whose condition holds, element by element."""
        xp = ctx[0]
        branches = [(self._eval(v, ctx), self._eval(c, ctx)) for v, c in node[1]]
        out = branches[-1][0]
        for v, c in reversed(branches[:-1]):
            if isinstance(c, (bool, float)):
                out = v if c else out
            else:
                vv = v if not isinstance(v, float) else xp.full(c.shape, v)
                oo = out if not isinstance(out, float) else xp.full(c.shape, out)
                out = xp.where(c, vv, oo)
        return out


#: the node operations of :class:`ExpressionEvaluator` beyond inputs, numbers, sums and
#: products (those stay inline in ``_eval``, the hot path)
_EVAL_OPS = {"pow": ExpressionEvaluator._eval_pow, "powe": ExpressionEvaluator._eval_powe,
             "max": ExpressionEvaluator._eval_extremum,
             "min": ExpressionEvaluator._eval_extremum,
             "heaviside": ExpressionEvaluator._eval_heaviside,
             "erf": ExpressionEvaluator._eval_erf, "fn": ExpressionEvaluator._eval_fn,
             "cmp": ExpressionEvaluator._eval_cmp,
             "piecewise": ExpressionEvaluator._eval_piecewise}
