r"""Paper 000's lemmas and theorems, measured on the transformer.

- :func:`lemma41_sweep`: Lemma 4.1 / B.6's expression for ``dL/dt`` against
  the exact ``-|grad L|^2`` as a function of the width ``m`` (with a fitted
  power-law trend of the relative gap, total and per W / U part).
- :func:`assumption_sweep`: ``lambda = lambda_min(H'(0)/omega)`` of Assumption 5.1
  over ``m``, ``n``, ``L`` or ``d``.
- :func:`lemma53`: along gradient-flow runs, ``min_t lambda_min(H_nu(t))``
  against ``lambda/2`` (Lemma 5.3), and the fraction of seeds that violate it.
- :func:`theorem55`: the measured decay of the training loss against
  ``exp(-alpha eps^2 T)`` with ``alpha = lambda/omega`` from the measured
  ``lambda`` and ``omega`` (Theorem 5.5); ratio of rates.
- :func:`required_width`, :func:`definition52`: the width Definition 5.2
  requires, beside the width used.

Experiments are described by a *setup* dict with keys ``N, L, d, m, n, eps,
omega, kappa, xi`` (``kappa="1/sqrt(m)"`` selects Definition 5.2's choice) and
optional ``teacher_m`` (width of the random teacher, default ``m``),
``token_norm`` ("rms" or "unit"), ``E_scale``, ``n_test``. A seed spawns three
``SeedSequence`` children: teacher, student, data.
"""

from __future__ import annotations

import math

import numpy as np

from attndyn.numeric.core.validate import resolve_seed

from .data import make_data
from .kernel import KERNELS, kernel_name, kernel_eigenvalues, lemma41
from .model import Transformer, int_ge1, pos_float
from .results import Sweep, fit_power_law
from .training import train

__all__ = ["build", "check_setup", "lemma41_sweep", "assumption_sweep", "lemma53",
           "theorem55", "required_width", "log10_required_width", "definition52"]

_REQUIRED = ("N", "L", "d", "m", "n", "eps", "omega", "kappa", "xi")


def check_setup(setup) -> dict:
    """Validate a setup dict (see module docstring); returns a normalised copy.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> check_setup(dict(setup, kappa="1/sqrt(m)"))["kappa"]
        '1/sqrt(m)'
        >>> check_setup({"N": 1})
        Traceback (most recent call last):
            ...
        ValueError: setup is missing ['L', 'd', 'm', 'n', 'eps', 'omega', 'kappa', 'xi'] (no defaults for the paper's scalings)
    """
    if not isinstance(setup, dict):
        raise TypeError("setup must be a dict with keys " + ", ".join(_REQUIRED))
    missing = [k for k in _REQUIRED if k not in setup]
    if missing:
        raise ValueError(f"setup is missing {missing} (no defaults for the paper's scalings)")
    s = dict(setup)
    for k in ("N", "L", "d", "m", "n"):
        s[k] = int_ge1(s[k], k)
    s["eps"] = pos_float(s["eps"], "eps")
    s["omega"] = pos_float(s["omega"], "omega")
    if s["kappa"] != "1/sqrt(m)":
        s["kappa"] = pos_float(s["kappa"], "kappa")
    xi = s["xi"]
    # (no float conversion before the range test: an int beyond the float range overflows)
    if isinstance(xi, bool) or not isinstance(xi, (int, float)) \
            or not 0 <= xi <= 1.7976931348623157e308:
        raise ValueError(f"xi must be a finite real number >= 0, got {xi!r}")
    s["xi"] = float(xi)
    s["teacher_m"] = int_ge1(s.get("teacher_m", s["m"]), "teacher_m")
    s.setdefault("token_norm", "rms")
    s.setdefault("E_scale", 1.0)
    s["n_test"] = int_ge1(s.get("n_test", 256), "n_test")
    return s


def _kappa(s, m):
    return 1.0 / math.sqrt(m) if s["kappa"] == "1/sqrt(m)" else s["kappa"]


def build(setup, seed):
    """``(student, data)`` for a setup and a seed (int or SeedSequence): a
    random teacher of the same class (width ``teacher_m``), the student, and
    teacher data with noise ``xi``.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> student, data = build(setup, 0)
        >>> student.m, data.X.shape
        (8, (6, 2, 3))
    """
    s = check_setup(setup)
    ss = resolve_seed(seed)
    st, ss_s, sd = ss.spawn(3)
    common = dict(eps=s["eps"], omega=s["omega"], E_scale=s["E_scale"])
    teacher = Transformer(s["N"], s["L"], s["d"], s["teacher_m"],
                          kappa=_kappa(s, s["teacher_m"]), seed=st, **common)
    student = Transformer(s["N"], s["L"], s["d"], s["m"], kappa=_kappa(s, s["m"]), seed=ss_s,
                          **common)
    data = make_data(teacher, s["n"], xi=s["xi"], seed=sd, n_test=s["n_test"],
                     token_norm=s["token_norm"])
    return student, data


#: Most seeds one sweep takes (each is a full run): a count above it is refused before
#: the list is built.
MAX_SEEDS = 10 ** 6


def seed_list(seeds):
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        if not 1 <= seeds <= MAX_SEEDS:
            raise ValueError(f"seeds must be an int in [1, {MAX_SEEDS}] (a number of seeds) "
                             f"or a non-empty list of seeds, got {seeds}")
        return list(range(int(seeds)))
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"seeds must be an int >= 1 or a list of ints >= 0, got {seeds!r}")
    out = []
    for x in seeds:  # no int(): 1.5 was truncated to 1 and "7" parsed
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"seeds must be ints >= 0, got {x!r}")
        if x < 0:
            raise ValueError(f"seeds must be ints >= 0, got {x}")
        out.append(int(x))
        if len(out) > MAX_SEEDS:
            raise ValueError(f"seeds must list at most {MAX_SEEDS} seeds")
    if not out:
        raise ValueError("seeds must be an int >= 1 or a non-empty list of seeds")
    return out


def width_list(widths):
    """``widths`` as a non-empty list of ints >= 1, by name (no ``int()``: 2.5 is refused,
    not run as 2)."""
    if isinstance(widths, (str, bytes)) or not hasattr(widths, "__iter__"):
        raise TypeError(f"widths must be a non-empty list of ints >= 1, got {widths!r}")
    out = [int_ge1(m, "widths") for m in widths]
    if not out:
        raise ValueError("widths must be a non-empty list of ints >= 1")
    return out


def lemma41_sweep(setup, widths=(16, 32, 64, 128, 256, 512, 1024), *, seeds=4,
                  kernel="definition"):
    """Relative gap between Lemma 4.1's expression and ``dL/dt = -|grad L|^2``
    at initialisation, for every width in ``widths`` (mean and spread over
    ``seeds``), with power-law fits ``gap ~ a m^b`` for the total, the W part
    (``<beta, beta>`` vs ``|dL/dW|^2``) and the U part, for ``kernel``
    (Definition B.5's ``H_nu`` or the exact ``K_nu``); the row ``gap_other``
    is the total gap of the other kernel (rounding, ~1e-15, for the exact one).

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = lemma41_sweep(setup, widths=(4, 16), seeds=2)
        >>> sw.x.tolist(), "gap" in sw.names
        ([4.0, 16.0], True)
    """
    kernel = kernel_name(kernel)
    other = [k for k in KERNELS if k != kernel][0]
    s = check_setup(setup)
    widths = width_list(widths)
    seeds = seed_list(seeds)
    rows = []
    for m in widths:
        g, gW, gU, rU, go = [], [], [], [], []
        for sd in seeds:
            student, data = build(dict(s, m=m, teacher_m=s["teacher_m"]), sd)
            r = lemma41(student, data.X, data.Y, kernel=kernel)
            go.append(np.nan if r[f"rel_gap_{other}"] is None else r[f"rel_gap_{other}"])
            g.append(r["rel_gap"])
            gW.append(r["rel_gap_W"])
            gU.append(r["rel_gap_U"])
            rU.append(sum(r["exact_U"]) / max(sum(r["exact_W"]) + sum(r["exact_U"]), 1e-300))
        rows.append([np.mean(g), np.std(g), np.mean(gW), np.std(gW), np.mean(gU), np.std(gU),
                     np.mean(rU), np.mean(go)])
    y = np.asarray(rows).T
    names = ["gap", "gap_std", "gap_W", "gap_W_std", "gap_U", "gap_U_std", "U_share_exact",
             "gap_other"]
    x = np.asarray(widths, dtype=np.float64)
    fits = {k: fit_power_law(x, y[names.index(k)]) for k in ("gap", "gap_W", "gap_U")}
    fits["kernel"], fits["other_kernel"] = kernel, other
    return Sweep("m", x, names, y, kind="lemma41_width", params=dict(s, kernel=kernel),
                 seeds=seeds, fits=fits)


def assumption_sweep(setup, variable, values, *, seeds=4, kernel="definition"):
    """``lambda = min_nu lambda_min(H'_nu(0)/omega)`` (Assumption 5.1) over one
    of ``"m"``, ``"n"``, ``"L"``, ``"d"``: mean, min and the fraction of seeds
    with ``lambda > 0`` (numerically: ``lambda_min > 1e-10 lambda_max`` in
    every layer; ``H'`` has rank <= m d, so it is singular when n L > m d).

    Both kernels are measured: the rows without suffix refer to ``kernel``,
    ``*_definition`` and ``*_exact`` to each (the exact W part ``K^W`` has rank
    <= m d in n L d rows: singular when n L > m).

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = assumption_sweep(setup, "m", (4, 16), seeds=2)
        >>> sw.x.tolist()
        [4.0, 16.0]
    """
    if variable not in ("m", "n", "L", "d"):
        raise ValueError(f"variable must be 'm', 'n', 'L' or 'd', got {variable!r}")
    kernel = kernel_name(kernel)
    s = check_setup(setup)
    seeds = seed_list(seeds)
    values = list(values)
    if not values:
        raise ValueError("values must be a non-empty list of ints >= 1")
    rows = []
    for v in values:
        v = int_ge1(int(v), "values")
        lam = {k: [] for k in KERNELS}
        pd = {k: [] for k in KERNELS}
        for sd in seeds:
            st = dict(s, **{variable: v})
            if variable == "m":
                st["teacher_m"] = s["teacher_m"]
            student, data = build(st, sd)
            for kn in KERNELS:
                ev = kernel_eigenvalues(student, data.X, kernel=kn)
                lam[kn].append(min(e["lambda"] for e in ev))
                pd[kn].append(all(e["pd"] for e in ev))
        row = []
        for kn in (kernel,) + KERNELS:
            a = np.asarray(lam[kn])
            row += [a.mean(), a.min(), a.max(), float(np.mean(pd[kn]))]
        rows.append(row)
    x = np.asarray([float(v) for v in values])
    base = ["lambda_mean", "lambda_min", "lambda_max", "fraction_pd"]
    names = base + [f"{b}_{kn}" for kn in KERNELS for b in base]
    y = np.asarray(rows).T
    fits = {"lambda_mean": fit_power_law(x, y[0]), "kernel": kernel}
    for kn in KERNELS:
        fits[f"lambda_mean_{kn}"] = fit_power_law(x, y[names.index(f"lambda_mean_{kn}")])
    return Sweep(variable, x, names, y, kind="assumption51", params=dict(s, kernel=kernel),
                 seeds=seeds, fits=fits)


def lemma53(setup, *, T, seeds=4, n_eval=20, **train_kw):
    """Lemma 5.3 along gradient-flow runs, one per seed.

    For each seed: ``lambda`` at initialisation (Assumption 5.1), per layer
    ``min_t lambda_min(H_nu(t))`` and ``min_t lambda_min(H'_nu(t))``, and two
    readings of the claim ``lambda_min(H_nu(t)) >= lambda/2``: as printed
    (``H`` against ``lambda``, which was computed from ``H'/omega``) and in
    consistent units (``lambda_min(H_nu(t)/omega) >= lambda/2``). Returns a
    :class:`Sweep` over seeds (``x`` = seed) with the fractions of violating
    seeds in ``fits``.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = lemma53(setup, T=0.2, seeds=2, n_eval=2)
        >>> sw.x_name, len(sw.x)
        ('seed', 2)
    """
    s = check_setup(setup)
    seeds = seed_list(seeds)
    rows, status, msgs = [], 0, []
    for sd in seeds:
        student, data = build(s, sd)
        lam = min(e["lambda"] for e in kernel_eigenvalues(student, data.X))
        res = train(student, data, T=T, method="flow", n_eval=n_eval, observe=("kernel",),
                    **train_kw)
        if res.status != 0:
            status = res.status
            msgs.append(f"seed {sd}: {res.message}")
        minH = min(res.observable(f"lambda_min_H_{k + 1}").min() for k in range(s["N"]))
        minHp = min(res.observable(f"lambda_min_Hprime_{k + 1}").min() for k in range(s["N"]))
        rows.append([lam, minH, minHp, minH / s["omega"],
                     float(minH < lam / 2), float(minH / s["omega"] < lam / 2)])
    y = np.asarray(rows).T
    names = ["lambda", "min_lambda_H", "min_lambda_Hprime", "min_lambda_H_over_omega",
             "violated_printed", "violated_units"]
    fits = {"fraction_violated_printed": float(y[4].mean()),
            "fraction_violated_units": float(y[5].mean())}
    return Sweep("seed", np.asarray(seeds, dtype=np.float64), names, y, kind="lemma53",
                 params=dict(s, T=float(T)), seeds=seeds, fits=fits, status=status,
                 message="; ".join(msgs) or "ok")


def theorem55(result, *, lam=None, omega, eps, X=None, kernel="definition"):
    r"""Theorem 5.5 on a training result: ``L(T) <= exp(-alpha eps^2 T) L(0)``
    with ``alpha = lam / omega`` (the constant of ``O(lambda/omega)`` set to 1).

    ``lam`` is Assumption 5.1's lambda for ``kernel``; with the training inputs
    ``X`` it is measured at ``theta(0)`` for
    both kernels, and the report has ``ratio_definition`` and ``ratio_exact``
    (``result.diagnostics["matrices"]["theta0"]`` is kept in memory, not saved).

    Returns a dict: ``predicted_rate = alpha eps^2``; ``effective_rate(t) =
    -log(L(t)/L(0))/t`` at every output time; ``ratio = min_t effective /
    predicted`` (>= 1: the bound holds at every recorded time with these
    constants); ``fitted_rate`` (least-squares slope of ``-log L`` over the
    run) and ``fitted_ratio``; ``holds`` (``L(t) <= bound(t)`` everywhere).

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> student, data = build(setup, 0)
        >>> from attndyn.numeric.transformer import train
        >>> res = train(student, data, T=0.5, n_eval=2, observe=("theta",))
        >>> rep = theorem55(res, omega=1.0, eps=1.0, X=data.X)
        >>> sorted(rep)[:4]
        ['alpha', 'effective_rate', 'final_ratio', 'fitted_rate']
    """
    kernel = kernel_name(kernel)
    omega = pos_float(omega, "omega")
    eps = pos_float(eps, "eps")
    lams = {}
    if X is not None:
        diag = getattr(result, "diagnostics", {}) or {}
        mats = diag.get("matrices", {})
        if "theta0" not in mats or "model" not in mats:
            raise ValueError("theorem55 with X needs a result of train() in this session "
                             "(theta(0) and the model are not saved to disk); pass lam instead")
        m0 = mats["model"].copy()
        m0.set_theta(mats["theta0"])
        for kn in KERNELS:
            lams[kn] = min(e["lambda"] for e in kernel_eigenvalues(m0, X, kernel=kn))
        if lam is None:
            lam = lams[kernel]
    if lam is None:
        raise ValueError("theorem55 needs lam (Assumption 5.1's lambda) or the inputs X")
    lam = float(lam)
    t = np.asarray(result.t, dtype=np.float64)
    Ls = np.asarray(result.observable("loss"), dtype=np.float64)
    if t.size < 2:
        raise ValueError("the result needs at least two output times")

    def report(lm):
        alpha = lm / omega
        pred = alpha * eps * eps
        with np.errstate(divide="ignore", invalid="ignore"):
            eff = -np.log(Ls[1:] / Ls[0]) / t[1:]
        A = np.vstack([np.ones(t.size), t]).T
        slope = float(-np.linalg.lstsq(A, np.log(Ls), rcond=None)[0][1])
        bound = np.exp(-pred * t) * Ls[0]
        return {"alpha": alpha, "predicted_rate": pred, "effective_rate": eff.tolist(),
                "ratio": float(np.min(eff) / pred) if pred > 0 else float("inf"),
                "final_ratio": float(eff[-1] / pred) if pred > 0 else float("inf"),
                "fitted_rate": slope, "fitted_ratio": slope / pred if pred > 0 else float("inf"),
                "holds": bool(np.all(Ls <= bound * (1 + 1e-12))),
                "max_excess": float(np.max(Ls / bound))}

    out = report(lam)
    out["kernel"] = kernel
    out["lambda"] = lam
    for kn, lm in lams.items():
        r = report(lm)
        out[f"lambda_{kn}"] = lm
        out[f"ratio_{kn}"] = r["ratio"]
        out[f"fitted_ratio_{kn}"] = r["fitted_ratio"]
        out[f"holds_{kn}"] = r["holds"]
    return out


def log10_required_width(n, L, d, N, omega, lam, delta, *, c_exp, prefactor=1.0):
    r"""``log10`` of Definition 5.2's width,
    ``m >= prefactor n^3 L^5 exp(c_exp d) / (omega^6 lambda^6 delta^3 N^2)``.

    ``c_exp`` is the "considerably small constant" ``C`` and ``prefactor`` the
    constant of ``Omega(.)``; the paper gives neither, so ``c_exp`` is required.
    Computed in logarithms (the value overflows a double for modest ``d``).

        >>> w = log10_required_width(10, 2, 3, 1, 0.1, 0.5, 0.05, c_exp=1.0)
        >>> round(w, 4)
        17.5173
        >>> round(math.log10(10 ** 3 * 2 ** 5 * math.exp(3) / (0.1 ** 6 * 0.5 ** 6 * 0.05 ** 3)), 4)
        17.5173
    """
    n, L, d, N = (int_ge1(n, "n"), int_ge1(L, "L"), int_ge1(d, "d"), int_ge1(N, "N"))
    omega = pos_float(omega, "omega")
    lam = pos_float(lam, "lam", " (lambda of Assumption 5.1 must be > 0)")
    delta, c_exp, prefactor = _width_constants(delta, c_exp, prefactor)
    ln = (math.log(prefactor) + 3 * math.log(n) + 5 * math.log(L) + c_exp * d
          - 6 * math.log(omega) - 6 * math.log(lam) - 3 * math.log(delta) - 2 * math.log(N))
    return ln / math.log(10)


def _width_constants(delta, c_exp, prefactor):
    """``(delta, c_exp, prefactor)`` of Definition 5.2's width, checked by name."""
    delta = pos_float(delta, "delta")
    if delta >= 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if isinstance(c_exp, bool) or not isinstance(c_exp, (int, float, np.integer, np.floating)):
        raise TypeError(f"c_exp must be a real number >= 0, got {c_exp!r}")
    if not 0 <= c_exp <= 1.7976931348623157e308:  # NaN and ints beyond the float range too
        raise ValueError(f"c_exp must be a finite real number >= 0, got {c_exp}")
    return delta, float(c_exp), pos_float(prefactor, "prefactor")


def required_width(n, L, d, N, omega, lam, delta, *, c_exp, prefactor=1.0):
    """Definition 5.2's width as a float (``inf`` above the double range); see
    :func:`log10_required_width`.

        >>> required_width(10, 2, 3, 1, 0.1, 0.5, 0.05, c_exp=1.0) > 1e12
        True
        >>> required_width(10, 2, 3000, 1, 0.1, 0.5, 0.05, c_exp=1.0)
        inf
    """
    lg = log10_required_width(n, L, d, N, omega, lam, delta, c_exp=c_exp, prefactor=prefactor)
    return 10.0 ** lg if lg < 308 else float("inf")


def definition52(model, X, *, delta, c_exp, prefactor=1.0, omega_const=None, B=None):
    """Definition 5.2 for a model and its training inputs: the measured
    ``lambda``, the width the definition requires (``log10``) beside the width
    used, ``kappa`` against ``1/sqrt(m)`` and, when ``omega_const`` and ``B``
    are given, ``omega`` against ``omega_const / (N L^2 d^2.5 B^3)``.
    ``premise_met`` is True only if every checked item holds.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> student, data = build(setup, 0)
        >>> rep = definition52(student, data.X, delta=0.05, c_exp=1.0)
        >>> rep["premise_met"]
        False
    """
    X = model.check_X(X)
    _width_constants(delta, c_exp, prefactor)  # also when lambda <= 0 skips the width
    lam = min(e["lambda"] for e in kernel_eigenvalues(model, X))
    out = {"lambda": lam, "m_used": model.m, "log10_m_used": math.log10(model.m),
           "kappa": model.kappa, "kappa_def52": 1 / math.sqrt(model.m)}
    if lam <= 0:
        out.update(log10_m_required=float("inf"), width_ok=False,
                   note="lambda <= 0: Assumption 5.1 fails, the theorem does not apply")
    else:
        lg = log10_required_width(X.shape[0], model.L, model.d, model.N, model.omega, lam, delta,
                                  c_exp=c_exp, prefactor=prefactor)
        out.update(log10_m_required=lg, width_ok=math.log10(model.m) >= lg)
    ok = out["width_ok"] and math.isclose(model.kappa, out["kappa_def52"], rel_tol=1e-12)
    if omega_const is not None and B is not None:
        from .model import good_scalings
        w = good_scalings(model.N, model.L, model.d, model.m, omega_const=omega_const,
                          B=B)["omega"]
        out["omega_def52"] = w
        ok = ok and math.isclose(model.omega, w, rel_tol=1e-12)
    out["premise_met"] = bool(ok)
    return out
