r"""The lazy-regime premises of paper 000 measured along training runs.

``train(..., record="premises")`` adds, at every output time, the quantities
that Lemma C.1, Lemma D.1 (eqs. 5-9) and Theorem E.2 assume or claim:

- ``w_drift = max_{nu,r} ||w_r(t) - w_r(0)||_2`` and ``U_drift = max_nu ||U(t) - U(0)||_F``
  (parts 9-10; eq. 8 sets ``R = O(1/(sqrt(m) omega lambda N))``, eq. 6 needs
  ``R <= omega lambda delta / (n L^1.5 exp(O(dB)))`` for the kernel to stay PD);
- ``w_norm_max``, ``U_norm_max`` (parts 1-4: ``O(sqrt(d) B)``, ``O(d B)``);
- ``Lambda_norm_min``, ``Lambda_norm_max`` over layers, sequences and tokens (part 5: ``Theta(1)``);
- ``sigma_min``: the smallest unmasked attention weight (part 8: ``>= exp(-O(dB))/L``);
- ``part14 = L(t) / (L d)`` (part 14: ``L <= O(L d)``);
- ``part15_k = ||dL/dmu_k||_F^2 / (eps^2 L(t))`` per layer (part 15: ``asymp 1``). For the
  last layer ``delta_N = (2 eps/n)(F - Y)``, so the ratio is exactly ``4/n``: a hidden ``4/n``;
- ``gamma2_mean`` = ``mean_p ||gamma_p||^2`` over layers and rows (part 16: ``o(1/m)``);
- ``rate = |grad L|^2 / L = -(dL/dt)/L`` (``E[dL/dt]`` along the flow; at an SGD iterate it is
  the full-batch expectation of the realised ``dL/dt``). Eq. (7): ``rate >= C omega lambda N
  eps^2``; eq. (9): ``rate >= eps^2 (omega lambda/2)(1 - C_2 n / sqrt(m))``; Theorem 5.5:
  ``rate >= alpha_cr eps^2`` with ``alpha_cr = O(lambda/omega)``; Theorem E.2: ``alpha = Theta(lambda)``.

:func:`premises` runs one training and returns a :class:`PremiseReport` whose
:meth:`~PremiseReport.table` prints one verdict per premise with the measured
numbers. Hidden constants are set to 1 where a verdict needs one (stated in
each row); the implied constant is printed beside it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from .recorder import PremiseRecorder, premise_names

__all__ = ["premise_names", "PremiseRecorder", "premises", "PremiseReport", "part16_sweep",
           "load_premises"]


def part16_sweep(setup, widths, *, seeds=2):
    """``mean_p ||gamma_p||^2`` at initialisation against the width (Lemma C.1
    part 16 claims ``o(1/m)``), with a fitted exponent; a :class:`Sweep`.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = part16_sweep(setup, (4, 16), seeds=2)
        >>> sw.x.tolist(), sw.x_name
        ([4.0, 16.0], 'm')
    """
    from .kernel import parts_from_cache
    from .lemmas import seed_list, build, check_setup, width_list
    from .results import Sweep, fit_power_law
    s = check_setup(setup)
    seeds = seed_list(seeds)
    rows = []
    widths = width_list(widths)
    for m in widths:
        v = []
        for sd in seeds:
            student, data = build(dict(s, m=m), sd)
            c = student._forward(data.X)
            v.append(np.mean([np.diag(parts_from_cache(student, c, k)[1]).mean()
                              for k in range(student.N)]))
        rows.append([np.mean(v), np.mean(v) * m])
    x = np.asarray(widths, dtype=np.float64)
    y = np.asarray(rows).T
    return Sweep("m", x, ["gamma2_mean", "m_gamma2_mean"], y, kind="part16", params=s,
                 seeds=seeds, fits={"gamma2_mean": fit_power_law(x, y[0])})


@dataclass
class PremiseReport:
    """Verdicts on the premises of one run (``rows``: dicts with ``premise``,
    ``paper``, ``measured``, ``verdict``) and the run itself (``result``).

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> rep = premises(setup, 0, T=0.2, n_eval=2, widths=())
        >>> rep.rows[0]["premise"], rep.rows[0]["verdict"]
        ('radius, eq. (8)', 'holds')
    """

    rows: list
    result: object
    params: dict = field(default_factory=dict)

    def table(self) -> str:
        w1 = max(len(r["premise"]) for r in self.rows)
        w2 = max(len(r["paper"]) for r in self.rows)
        w4 = max(len(r["verdict"]) for r in self.rows)
        out = [f"{'premise':{w1}s}  {'paper':{w2}s}  {'verdict':{w4}s}  measured"]
        for r in self.rows:
            out.append(f"{r['premise']:{w1}s}  {r['paper']:{w2}s}  {r['verdict']:{w4}s}  "
                       f"{r['measured']}")
        return "\n".join(out)

    def as_dict(self):
        return {"rows": self.rows, "params": self.params}

    def save(self, path) -> str:
        """The run as a labelled result file; the verdicts go in its params."""
        self.result.params["premises"] = self.as_dict()
        return self.result.save(path)


def load_premises(path) -> PremiseReport:
    """A :class:`PremiseReport` saved by :meth:`PremiseReport.save`.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> import os, tempfile
        >>> rep = premises(setup, 0, T=0.2, n_eval=2, widths=())
        >>> path = os.path.join(tempfile.mkdtemp(), "premises.npz")
        >>> _ = rep.save(path)
        >>> load_premises(path).rows == rep.rows
        True
    """
    from attndyn.numeric.core.results import load_result
    res = load_result(path)
    p = res.params.get("premises")
    if not isinstance(p, dict) or not isinstance(p.get("rows"), list):
        raise ValueError(f"{path} holds no premise verdicts")
    return PremiseReport(p["rows"], res, p.get("params", {}))


def _g(x):
    return f"{x:.3g}"


def premises(setup, seed=0, *, T, method="flow", kernel="definition", delta=0.05, b_const=1.0,
             n_eval=10, widths=(16, 64, 256, 1024), sgd_seed=None,
             **train_kw) -> PremiseReport:
    r"""Train once (``setup`` as in :func:`~attndyn.numeric.transformer.lemmas.build`)
    with ``record="premises"`` and judge each premise.

    ``kernel`` chooses the lambda of Assumption 5.1 (Definition B.5's ``H'`` or
    the exact ``K^W``) used in eqs. (6)-(9); ``B = max(b_const sqrt(log(L m d /
    delta)), 1)`` (Lemma C.1); ``widths``: the part-16 width sweep at
    initialisation (``()`` skips it); ``sgd_seed``: the SGD batches
    (``method="sgd"``). Hidden constants are set to 1 in the verdicts and the
    implied constants are printed.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> rep = premises(setup, 0, T=0.2, n_eval=2, widths=())
        >>> isinstance(rep, PremiseReport), len(rep.rows) > 0
        (True, True)
        >>> sorted(rep.rows[0])
        ['measured', 'paper', 'premise', 'verdict']
    """
    from .kernel import kernel_name
    from .lemmas import build, check_setup
    from .training import train
    kernel = kernel_name(kernel)
    s = check_setup(setup)
    delta = float(delta)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    student, data = build(s, seed)
    if method == "sgd":
        train_kw["seed"] = sgd_seed
    res = train(student, data, T=T, method=method, n_eval=n_eval, record="premises", **train_kw)
    lam = res.params["premise_lambda"][kernel]
    L, d, m = s["L"], s["d"], s["m"]
    B = max(b_const * math.sqrt(math.log(L * m * d / delta)), 1.0)
    ob = {k: np.asarray(res.observable(k)) for k in res.names}
    rows = []

    def add(premise, paper, measured, verdict):
        rows.append({"premise": premise, "paper": paper, "measured": measured,
                     "verdict": verdict})

    _radius_rows(add, ob, s, lam, B, delta)
    sweep = _lemma_c1_rows(add, ob, s, B, widths)
    if lam > 0:
        _rate_rows(add, ob, s, lam)
    res.params["premise_verdicts"] = rows
    params = {"setup": {k: v for k, v in s.items()}, "seed": seed, "T": float(T),
              "method": method, "kernel": kernel, "lambda": lam, "B": B, "delta": delta,
              "lambda_both": res.params["premise_lambda"]}
    if sweep is not None:
        params["part16_sweep"] = {"m": sweep.x.tolist(),
                                  "gamma2_mean": sweep["gamma2_mean"].tolist(),
                                  "fit": sweep.fits["gamma2_mean"]}
    return PremiseReport(rows, res, json.loads(json.dumps(params, default=float)))


def _radius_rows(add, ob, s, lam, B, delta):
    """The drift radii of eqs. (8) and (6) against the measured drift (not applicable when
    Assumption 5.1's lambda is not positive)."""
    N, L, d, m, n, om = s["N"], s["L"], s["d"], s["m"], s["n"], s["omega"]
    wd, ud = float(ob["w_drift"].max()), float(ob["U_drift"].max())
    if lam > 0:
        R8 = 1.0 / (math.sqrt(m) * om * lam * N)
        add("radius, eq. (8)", "max ||w_r(t)-w_r(0)||, ||U(t)-U(0)||_F <= R = 1/(sqrt(m) w l N)",
            f"w {_g(wd)}, U {_g(ud)}; R = {_g(R8)} (constant 1)",
            "holds" if max(wd, ud) <= R8 else f"violated ({_g(max(wd, ud) / R8)} R)")
        log_R6 = math.log(om * lam * delta / (n * L ** 1.5)) - d * B
        R6 = math.exp(log_R6)
        add("radius, eq. (6)", "drift <= w l delta / (n L^1.5 exp(dB)) (kernel stays PD)",
            f"drift {_g(max(wd, ud))}; needed {_g(R6)} (constant 1, B = {B:.3g})",
            "holds" if max(wd, ud) <= R6 else
            f"violated (drift = 10^{math.log10(max(wd, ud, 1e-300)) - log_R6 / math.log(10):.1f}"
            f" x needed)")
    else:
        add("radius, eqs. (6), (8)", "R = 1/(sqrt(m) w l N)", f"lambda = {_g(lam)}",
            "not applicable (Assumption 5.1 fails: lambda <= 0)")


def _lemma_c1_rows(add, ob, s, B, widths):
    """Lemma C.1 parts 1-5, 8, 14, 15 along the run and part 16 over the width sweep
    (returned, or ``None`` without widths)."""
    N, L, d, m, n = s["N"], s["L"], s["d"], s["m"], s["n"]
    c3 = float(ob["w_norm_max"].max()) / (math.sqrt(d) * B)
    c4 = float(ob["U_norm_max"].max()) / (d * B)
    add("Lemma C.1 parts 1-4", "||w_r|| <= O(sqrt(d) B), ||U||_F <= O(d B)",
        f"implied constants {_g(c3)}, {_g(c4)} (B = {B:.3g})",
        "holds" if max(c3, c4) <= 1 else "holds with constants > 1")
    add("Lemma C.1 part 5", "||Lambda_{nu,i,l}|| = Theta(1)",
        f"range [{_g(float(ob['Lambda_norm_min'].min()))}, "
        f"{_g(float(ob['Lambda_norm_max'].max()))}]", "measured (Theta(1) is asymptotic)")
    smin = float(ob["sigma_min"].min())
    c8 = -math.log(L * smin) / (d * B) if smin > 0 else math.inf
    add("Lemma C.1 part 8", "sigma_{p,l'} >= exp(-O(dB)) / L",
        f"min sigma = {_g(smin)}: L sigma_min = exp(-{_g(c8)} d B)",
        "holds with constant 1" if c8 <= 1 else f"holds with constant {_g(c8)}")
    p14 = float(ob["part14"].max())
    add("Lemma C.1 part 14", "L(t) <= O(L d)", f"max L / (L d) = {_g(p14)}",
        "holds with constant 1" if p14 <= 1 else f"needs constant {_g(p14)}")
    last = ob[f"part15_{N}"]
    other = [ob[f"part15_{k + 1}"] for k in range(N - 1)]
    meas = f"last layer {_g(float(last.min()))}..{_g(float(last.max()))} (4/n = {_g(4 / n)})"
    if other:
        allo = np.concatenate(other)
        meas += f"; layers < N {_g(float(allo.min()))}..{_g(float(allo.max()))}"
    add("Lemma C.1 part 15", "||dL/dmu_nu||_F^2 asymp eps^2 L", meas,
        "exact up to the hidden factor 4/n (last layer)"
        if np.allclose(last, 4 / n, rtol=1e-9) else "differs from 4/n")
    g2 = float(ob["gamma2_mean"][0])
    meas = f"mean ||gamma_p||^2 = {_g(g2)} at m = {m} (m x it = {_g(g2 * m)})"
    verdict = "single width: see the width sweep"
    sweep = None
    if widths:
        sweep = part16_sweep(s, widths, seeds=2)
        f = sweep.fits["gamma2_mean"]
        meas += (f"; over m = {', '.join(str(int(x)) for x in sweep.x)}: "
                 + ", ".join(_g(v) for v in sweep["gamma2_mean"])
                 + f" ~ m^{f['exponent']:.2f}")
        verdict = ("false: does not fall like 1/m" if f["exponent"] > -0.5
                   else "consistent with o(1/m)" if f["exponent"] < -1 else "falls slower than 1/m")
    add("Lemma C.1 part 16", "||gamma_p||^2 <= o(1/m)", meas, verdict)
    return sweep


def _rate_rows(add, ob, s, lam):
    """The rate of eq. (7) / Lemma D.1 and eq. (9), and the constants of its three forms
    (``lam > 0``)."""
    N, m, n, om, eps = s["N"], s["m"], s["n"], s["omega"], s["eps"]
    rmin = float(ob["rate"].min())
    c7 = rmin / (om * lam * N * eps ** 2)
    add("eq. (7) / Lemma D.1", "-E[dL/dt] >= C w l N eps^2 L",
        f"min_t rate = {_g(rmin)}; implied C = {_g(c7)}",
        "holds with C = 1" if c7 >= 1 else f"holds only with C <= {_g(c7)}")
    c1 = om * lam / 2
    ratio9 = rmin / (eps ** 2 * c1)
    add("eq. (9)", "-E[dL/dt] >= eps^2 (w l/2)(1 - C2 n/sqrt m) L",
        f"min_t rate / (eps^2 w l/2) = {_g(ratio9)}",
        "holds for every C2 >= 0" if ratio9 >= 1 else
        f"holds only for C2 >= {_g((1 - ratio9) * math.sqrt(m) / n)}")
    a55, ae2 = rmin / (eps ** 2 * lam / om), rmin / (eps ** 2 * lam)
    add("rate constant, 3 forms", "Thm 5.5 alpha = O(l/w); Thm E.2 Theta(l); eq. (7) C w l N",
        f"implied constants {_g(a55)}, {_g(ae2)}, {_g(c7)}",
        "the forms differ by factors 1/omega and omega N")
