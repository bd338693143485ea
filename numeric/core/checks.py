"""Numerical checks of a paper's statements: the container behind ``attndyn verify``.

A *check* turns one theorem, corollary or assumption with checkable content
into a computation that can fail. It is a function ``fn(budget, seed)`` that
returns a :class:`CheckResult`; ``budget`` is ``"small"`` (seconds: the
default test suite), ``"default"`` (what ``attndyn verify`` runs: minutes on
two cores for the whole suite) or ``"slow"`` (the large instances, ``pytest -m
slow`` and ``attndyn verify --budget slow``); a check without a smaller form
treats ``"small"`` as ``"default"``. ``seed`` is anything
:func:`~attndyn.numeric.core.validate.resolve_seed` accepts. A check may take
keyword options (``run_checks(options={key: {...}})``), for example the model
that ``attndyn verify --only trunc --loss ...`` passes to the truncation check.

Checks are registered by key (``"cor1"``, ``"cor3"``...) with :func:`register`;
:func:`run_checks` runs all or a named subset within a time budget and
:func:`checks_table` prints the table. Nothing here knows a paper: the checks
of paper 003 live in ``attndyn.numeric.attention.theorems``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

__all__ = ["CheckResult", "register", "registered", "run_checks", "checks_table",
           "VERDICTS", "BUDGETS"]

VERDICTS = ("held", "not held", "not applicable")
BUDGETS = ("small", "default", "slow")


@dataclass(frozen=True)
class CheckResult:
    """The measured verdict of one check.

    ``worst`` is the worst measured quantity over the ``instances`` drawn (for
    example the largest distance between the constrained minimum and a long
    flow's end point), ``measured`` says in words what it is; ``expectation`` is
    the bound or the expected value it is held against, as a number where there
    is one (``bound``) and in words (``expectation``). ``verdict`` is one of
    :data:`VERDICTS`; "not applicable" needs a ``detail`` that says which premise
    failed. ``data`` holds JSON-serialisable numbers behind the verdict.

        >>> r = CheckResult("demo", "eq. (1)", "held", 2, 0.5, "largest ratio measured / bound",
        ...                 bound=1.0)
        >>> r.verdict in VERDICTS, r.worst <= r.bound
        (True, True)
    """

    key: str
    reference: str
    verdict: str
    instances: int
    worst: float
    measured: str
    bound: float = float("nan")
    expectation: str = ""
    detail: str = ""
    data: dict = field(default_factory=dict)
    wall_s: float = float("nan")

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not isinstance(self.instances, int) or self.instances < 0:
            raise ValueError(f"instances must be an int >= 0, got {self.instances!r}")
        if self.verdict == "held" and not math.isfinite(float(self.worst)):
            raise ValueError(f"{self.key}: a check that holds must report a finite measured "
                             f"number, got worst={self.worst!r}")
        if self.verdict == "not held" and not math.isfinite(float(self.worst)) \
                and not self.detail:
            raise ValueError(f"{self.key}: 'not held' without a finite measured number needs "
                             "a detail that says why")
        if self.verdict == "not applicable" and not self.detail:
            raise ValueError(f"{self.key}: 'not applicable' needs a detail naming the premise")

    @property
    def held(self) -> bool | None:
        return None if self.verdict == "not applicable" else self.verdict == "held"

    def _repr_html_(self) -> str:
        """Notebook display: the verdict, the measured number and its bound."""
        from .display import html_summary
        return html_summary(f"Check {self.key}", {
            "paper": self.reference, "verdict": self.verdict, "instances": self.instances,
            "worst": self.worst, "measured": self.measured, "bound": self.bound,
            "expectation": self.expectation, "detail": self.detail})

    def as_dict(self) -> dict:
        """JSON-ready: numpy numbers as Python numbers, non-finite numbers as ``None``
        (top level) or their ``repr`` (inside ``data``)."""
        from .labelled import jsonable

        def num(x):
            x = float(x)
            return x if math.isfinite(x) else None
        return {"check": self.key, "paper": self.reference, "verdict": self.verdict,
                "instances": self.instances, "worst": num(self.worst),
                "measured": self.measured, "bound": num(self.bound),
                "expectation": self.expectation, "detail": self.detail,
                "data": jsonable(self.data), "wall_s": num(self.wall_s)}


@dataclass(frozen=True)
class _Entry:
    key: str
    reference: str
    title: str
    fn: object
    module: str


_REGISTRY: dict[str, _Entry] = {}
# modules that register checks when imported; loaded lazily by registered()
_PROVIDERS: list[str] = ["attndyn.numeric.attention.theorems"]


def register(key: str, reference: str, title: str):
    """Decorator: register ``fn(budget, seed) -> CheckResult`` under ``key``.

        >>> register("Not-A-Key", "eq. (1)", "a demo")
        Traceback (most recent call last):
            ...
        ValueError: check key must be a lower-case identifier, got 'Not-A-Key'
    """
    if not (isinstance(key, str) and key.isidentifier() and key.islower()):
        raise ValueError(f"check key must be a lower-case identifier, got {key!r}")

    def deco(fn):
        if key in _REGISTRY and _REGISTRY[key].fn is not fn:
            raise ValueError(f"check {key!r} registered twice "
                             f"({_REGISTRY[key].module} and {fn.__module__})")
        _REGISTRY[key] = _Entry(key, reference, title, fn, fn.__module__)
        return fn
    return deco


def registered() -> dict:
    """Key -> (reference, title) of every known check, in registration order.

        >>> checks = registered()
        >>> "thm1" in checks, checks["thm1"][0]
        (True, 'Thm. 1, Cor. 5 (78)')
    """
    import importlib
    for mod in _PROVIDERS:
        importlib.import_module(mod)
    return {k: (e.reference, e.title) for k, e in _REGISTRY.items()}


def run_checks(only=None, budget: str = "default", seed=0, time_budget_s: float | None = None,
               progress=None, options: dict | None = None) -> list:
    """Run the registered checks (all, or the keys in ``only``) and return their results.

    Each check gets its own child seed of ``seed`` (by key, so adding a check does
    not change the others' numbers). With ``time_budget_s`` set, checks not
    started before the budget is spent are reported "not applicable" with the
    reason; a check that raises is reported "not held" with the exception.
    ``options`` maps a key to keyword arguments of that check (validated by the
    caller: an option a check does not take is a ``TypeError`` before any runs).

        >>> (r,) = run_checks(["thm1"], budget="small", seed=0)
        >>> r.key, r.verdict
        ('thm1', 'held')
    """
    import numpy as np

    from attndyn.numeric.core.validate import resolve_seed

    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
    if time_budget_s is not None and not (time_budget_s > 0 and math.isfinite(time_budget_s)):
        raise ValueError(f"time_budget_s must be a finite number > 0, got {time_budget_s!r}")
    known = registered()
    keys = list(known)
    if only is not None:
        only = [only] if isinstance(only, str) else list(only)
        unknown = [k for k in only if k not in known]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; known: {', '.join(keys)}")
        keys = [k for k in keys if k in only]
    options = dict(options or {})
    bad = [k for k in options if k not in known]
    if bad:
        raise ValueError(f"options for unknown check(s) {bad}; known: {', '.join(known)}")
    import inspect
    for k, kw in options.items():
        params = inspect.signature(_REGISTRY[k].fn).parameters
        extra = [a for a in kw if a not in params]
        if extra:
            raise TypeError(f"check {k!r} takes no option(s) {extra}")
    ss = resolve_seed(seed, "seed")
    base = ss.entropy if isinstance(ss, np.random.SeedSequence) else None
    start = time.perf_counter()
    out = []
    for k in keys:
        e = _REGISTRY[k]
        if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
            out.append(CheckResult(k, e.reference, "not applicable", 0, float("nan"), "-",
                                   detail=f"not run: the time budget of {time_budget_s:g} s "
                                          "was spent"))
            continue
        child = np.random.SeedSequence(base, spawn_key=(sum(map(ord, k)), len(k)))
        t0 = time.perf_counter()
        try:
            r = e.fn(budget, child, **options.get(k, {}))
        except Exception as exc:  # a check that crashes has not held
            r = CheckResult(k, e.reference, "not held", 0, float("nan"),
                            "the check raised", detail=f"{type(exc).__name__}: {exc}")
        if not isinstance(r, CheckResult):
            raise TypeError(f"check {k!r} returned {type(r).__name__}, not CheckResult")
        wall = time.perf_counter() - t0
        out.append(CheckResult(**{**r.__dict__, "wall_s": wall}))
        if progress is not None:
            progress(out[-1])
    return out


def checks_table(results, as_json: bool = False) -> str:
    """One table: check, paper reference, instances, worst measured, bound, verdict.

        >>> r = CheckResult("demo", "eq. (1)", "held", 2, 0.5, "largest ratio measured / bound",
        ...                 bound=1.0)
        >>> print(checks_table([r]))
        check  paper     inst      worst      bound  verdict
        demo   eq. (1)      2        0.5          1  held
               measured: largest ratio measured / bound
        # verify: 1 held, 0 not held, 0 not applicable
    """
    if as_json:
        return json.dumps({"checks": [r.as_dict() for r in results],
                           "ok": not any(r.verdict == "not held" for r in results)})
    kw = max([5] + [len(r.key) for r in results]) + 2
    pw = max([5] + [len(r.reference) for r in results]) + 2
    lines = [f"{'check':{kw}}{'paper':{pw}}{'inst':>5}{'worst':>11}{'bound':>11}  verdict"]
    for r in results:
        w = "-" if not math.isfinite(float(r.worst)) else f"{r.worst:.3g}"
        b = "-" if not math.isfinite(float(r.bound)) else f"{r.bound:.3g}"
        lines.append(f"{r.key:{kw}}{r.reference:{pw}}{r.instances:5d}{w:>11}{b:>11}  "
                     f"{r.verdict}")
        lines.append(f"{'':{kw}}measured: {r.measured}")
        if r.expectation:
            lines.append(f"{'':{kw}}expected: {r.expectation}")
        if r.detail:
            lines.append(f"{'':{kw}}{r.detail}")
    held = sum(r.verdict == "held" for r in results)
    bad = [r.key for r in results if r.verdict == "not held"]
    na = sum(r.verdict == "not applicable" for r in results)
    lines.append(f"# verify: {held} held, {len(bad)} not held, {na} not applicable"
                 + (f"; NOT HELD: {', '.join(bad)}" if bad else ""))
    return "\n".join(lines)
