"""``attndyn integrate``: integrate a truncated hierarchy and save a labelled result.

Tied (eq. 13; the initial moments are the large-d limits of ``--init``) or untied (the slow
hierarchy, eqs. 31-32, ``--model untied``; the initial state is a pair of finite-d Gaussian
factors per index, ``--d``, ``--seed``, ``--scale``: the untied theory needs the means
``m_k(0)``, which select the critical root, and the exact moments of the pairs). With no
options: the D.3 example at order 12, checked against order 10. numba loads inside
:func:`run` only.
"""

from __future__ import annotations

import argparse

from attndyn._cli_common import (add_model_options, check_number, check_size, model_from_spec,
                                 model_spec, print_json)

DEFAULT_OUT = "attndyn-result.npz"
#: the longest horizon integrate accepts: the limit solver's work grows linearly beyond
#: t ~ 1e3 (D.3 example: t = 1e4 takes 4.8 s of CPU, so 1e6 would take minutes)
MAX_T_END = 1e4
#: the largest |number| in --init (moments of order M grow like its M-th power)
MAX_INIT_VALUE = 1e6

CONVERGENCE_HELP = ("tolerance of the convergence check: the truncation at order M is "
                    "compared with order M - 2 (M + 2 below order 4; untied: M + 2) on the "
                    "moments of length <= 2; above this relative difference the run has "
                    "status 2 (default 1e-6)")


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    add_model_options(p, kinds=("tied", "untied"))
    p.add_argument("--order", type=int, default=12,
                   help="truncation order M: words of length <= M (default 12)")
    p.add_argument("--max-terms", type=int, default=None,
                   help="refuse hierarchies with more terms (default: what fits in the "
                        "available memory); raise it to build a larger one")
    p.add_argument("--t-end", type=float, default=0.2,
                   help=f"final ODE time, in (0, {MAX_T_END:g}] (default 0.2)")
    p.add_argument("--n-out", type=int, default=11, help="number of output times (default 11)")
    p.add_argument("--init", default="wishart(0.5,0.5),scalar(1)",
                   help="tied: one initialisation per index, wishart(sigma,aspect) or scalar(c) "
                        "(large-d limit moments; default 'wishart(0.5,0.5),scalar(1)')")
    p.add_argument("--rtol", type=float, default=1e-10,
                   help="relative tolerance of the integrator (default 1e-10)")
    p.add_argument("--atol", type=float, default=1e-12,
                   help="absolute tolerance of the integrator (default 1e-12)")
    p.add_argument("--conv-tol", type=float, default=1e-6, help=CONVERGENCE_HELP)
    p.add_argument("--method", choices=("auto", "truncation", "limit"), default="auto",
                   help="tied: auto (default): the truncation while it has converged, the "
                        "d -> infinity limit of --init beyond; truncation: eq. (13) only; "
                        "limit: the d -> infinity solver only")
    p.add_argument("--time-limit", type=float, default=None,
                   help="wall-clock limit of the truncation's integrator in seconds (status "
                        "-4 when reached); default none")
    p.add_argument("--correction", choices=("none", "noise"), default="none",
                   help="tied: noise adds the mini-batch noise rows of SGD with --eta, --batch "
                        "and width --d (first order in eta*d/B; the truncation only)")
    p.add_argument("--eta", type=float, default=None, help="SGD learning rate (--correction)")
    p.add_argument("--batch", type=int, default=None, help="SGD batch size (--correction)")
    g = p.add_argument_group("finite-d initial state (--model untied)")
    g.add_argument("--d", type=int, default=100,
                   help="dimension d: of the Gaussian pairs (U_k, V_k) with --model untied "
                        "(2..8192); of eta*d/B with --correction noise (default 100)")
    g.add_argument("--seed", type=int, default=0, help="seed of the pairs (default 0)")
    g.add_argument("--scale", default="1",
                   help="entry scale per index, comma-separated (default 1: tA ~ tB ~ 1)")
    p.add_argument("--out", default=None,
                   help="result file (.npz); without it the result goes to "
                        "attndyn-result.npz, and only when the run succeeds")
    p.add_argument("--json", action="store_true", help="print the result as JSON (docs/cli.md)")


def parse_init(text: str, K: int):
    """A :class:`~attndyn.symbolic.initial.FreeInit` from ``--init``: one
    ``wishart(sigma[,aspect])`` or ``scalar(c)`` per index, numbers of size at most
    :data:`MAX_INIT_VALUE`."""
    from fractions import Fraction

    from attndyn.symbolic.initial import FreeInit, scalar, wishart

    if len(text) > 64 * max(K, 1):
        raise ValueError(f"--init is {len(text)} characters, more than 64 per index (K = {K})")
    depth = 0
    cur = ""
    parts = []
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    specs = []
    for part in parts:
        part = part.strip()
        name, _, rest = part.partition("(")
        args = [a for a in rest.rstrip(")").split(",") if a.strip()]
        try:
            vals = [Fraction(a.strip()) for a in args]
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"--init: cannot read numbers in {part!r}") from None
        if any(abs(v) > MAX_INIT_VALUE for v in vals):
            raise ValueError(f"--init: numbers must lie in [-{MAX_INIT_VALUE:g}, "
                             f"{MAX_INIT_VALUE:g}], got {part!r}")
        if name == "wishart" and len(vals) in (1, 2):
            specs.append(wishart(*vals))
        elif name == "scalar" and len(vals) == 1:
            specs.append(scalar(vals[0]))
        else:
            raise ValueError(f"--init entries must be wishart(sigma[,aspect]) or scalar(c), "
                             f"got {part!r}")
    if len(specs) != K:
        raise ValueError(f"--init needs one entry per index (K = {K}), got {len(specs)}")
    return FreeInit(specs)


def _check(args, spec, corr=None):
    """Every option validated and every size bounded, before any work (``corr``: the tied
    theory's correction that ``--correction`` names)."""
    check_number(args.t_end, "t-end", high=MAX_T_END)
    check_size(args.n_out, "n-out")
    if isinstance(args.order, int) and args.order < 1:
        raise ValueError(f"--order must be an integer >= 1, got {args.order}")
    check_number(args.rtol, "rtol")
    if args.rtol >= 1:  # the hierarchy's range: a relative tolerance of 1 keeps no digit
        raise ValueError(f"--rtol must be a finite number in (0, 1), got {args.rtol:g}")
    check_number(args.atol, "atol")
    check_number(args.conv_tol, "conv-tol")
    check_number(args.time_limit, "time-limit")
    if args.max_terms is not None and args.max_terms < 1:
        raise ValueError(f"--max-terms must be an integer >= 1, got {args.max_terms}")
    if spec.kind == "untied":
        for flag, name in (("correction", "none"), ("method", "auto")):
            if getattr(args, flag) not in (name, "truncation"):
                raise ValueError(f"--{flag} {getattr(args, flag)} applies to --model tied only")
        if args.time_limit is not None:
            raise ValueError("--time-limit applies to --model tied (the untied integrator "
                             "stops after its step cap)")
        check_size(args.d, "d")
        check_size(args.seed, "seed")
        from attndyn._cli_common import check_init_bytes
        check_init_bytes(spec.K, args.d, [args.d] * spec.K, 2, "--d")
        return
    from attndyn.numeric.attention.base import HierarchyCorrection

    if isinstance(corr, HierarchyCorrection):
        missing = [n for n in ("eta", "batch") if getattr(args, n) is None]
        if missing:
            raise ValueError("--correction noise needs " + ", ".join(f"--{n}" for n in missing))
        if args.method == "limit":
            raise ValueError("--correction noise runs the truncation; drop --method limit")
        if args.time_limit is not None:
            raise ValueError("--time-limit does not apply to --correction noise")
        check_number(args.eta, "eta")
        check_size(args.batch, "batch")
        if args.d < 2:
            raise ValueError(f"--d must be an integer >= 2, got {args.d}")
    elif any(getattr(args, n) is not None for n in ("eta", "batch")):
        raise ValueError("--eta and --batch go with --correction noise")


def run(command: str, args) -> int:
    spec = model_spec(args)
    if spec.kind == "untied":
        _check(args, spec)
        return _untied(spec, args)
    model = model_from_spec(spec)
    # the theory resolves --correction (a ValueError naming its choices otherwise)
    corr = model.theory.correction(args.correction)
    _check(args, spec, corr)
    return _tied(spec, args, model, corr)


def _finish(command, args, spec, res, path, result, lines) -> int:
    if args.json:
        result = {"model": spec.as_dict(), "method": res.params.get("method", args.method)
                  if spec.kind == "tied" else "truncation", **result,
                  "params": res.params}
        print_json(command, status=res.status, message=res.message, result=result,
                   saved=[path])
        return 0 if res.success else 1
    for line in lines:
        print(line)
    return 0 if res.success else 1


def _tied(spec, args, model, corr) -> int:
    import numpy as np

    from attndyn.numeric.attention.base import HierarchyCorrection

    init = parse_init(args.init, model.K)
    h = model.hierarchy(args.order, max_terms=args.max_terms)
    t_eval = np.linspace(0.0, args.t_end, args.n_out)
    if isinstance(corr, HierarchyCorrection):
        extra = {"correction": corr, "eta": args.eta, "batch": args.batch, "d": args.d,
                 "method": "truncation"}
    else:
        extra = {"method": args.method}
    if args.time_limit is not None:
        extra["time_limit"] = args.time_limit
    res = h.integrate(init, t_eval, rtol=args.rtol, atol=args.atol, check="auto",
                      conv_tol=args.conv_tol, **extra)
    res.params["init"] = args.init
    # a failed run overwrites nothing unless the user named the file
    path = res.save(args.out or DEFAULT_OUT) if (args.out or res.success) else None
    shown = [w for w in h.words if len(w) <= 2]
    result = {"t": res.t, "observables": {n: res.y[i] for i, n in enumerate(res.names)
                                          if len(res.words[i]) <= 2},
              "n_moments": h.n_moments, "n_terms": h.n_terms}
    shown = shown[:6]
    names = [h.names[h.index(w)] for w in shown]
    lines = [f"# {model!r}, order {args.order}: {h.n_moments} moments, {h.n_terms} terms",
             "t".rjust(10) + "".join(n.rjust(14) for n in names)]
    lines += [f"{t:10.4g}" + "".join(f"{res.moment(w)[j]:14.8g}" for w in shown)
              for j, t in enumerate(res.t)]
    lines += [f"# status {res.status}: {res.message}",
              f"# saved {path}" if path else "# not saved (the run did not succeed; give --out "
              "to save it anyway)"]
    return _finish("integrate", args, spec, res, path, result, lines)


def _untied(spec, args) -> int:
    import numpy as np

    from attndyn._cli_common import per_index

    scales = per_index(args.scale, "scale", spec.K)
    if any(s < 0 for s in scales):
        raise ValueError(f"--scale needs 1 or K = {spec.K} finite numbers >= 0")
    model = model_from_spec(spec)
    pairs = model.gaussian_init(args.d, seed=args.seed, scale=scales)
    h = model.hierarchy(args.order)
    t_eval = np.linspace(0.0, args.t_end, args.n_out)
    res = h.integrate(pairs, t_eval, rtol=args.rtol, atol=args.atol, conv_tol=args.conv_tol)
    shown = [n for n in res.names if n.startswith(("m_", "tA_", "tB_", "q1_", "q2_"))]
    path = res.save(args.out or DEFAULT_OUT) if (args.out or res.success) else None
    result = {"t": res.t, "observables": {n: res.observable(n) for n in shown},
              "n_moments": h.n_moments, "n_terms": h.n_terms}
    lines = [f"# {model!r}, order {args.order}: {h.n_moments} moments, {h.n_terms} terms; "
             f"Gaussian pairs d = {args.d}, seed {args.seed}; slow time tau = eta n / d",
             f"# root: {res.diagnostics.get('root')}, boundary layer t = "
             f"{res.diagnostics.get('t_boundary_layer')}",
             f"# status {res.status}: {res.message}",
             f"{'observable':<14}{'tau=0':>14}{f'tau={res.t[-1]:.4g}' if res.t.size else '':>14}"]
    for n in shown:
        y = res.observable(n)
        if y.size:
            lines.append(f"{n:<14}{y[0]:>14.6g}{y[-1]:>14.6g}")
    lines.append(f"saved {path}" if path else "not saved (the run did not succeed; give --out "
                 "to save it anyway)")
    return _finish("integrate", args, spec, res, path, result, lines)
