"""``attndyn transformer train|kernel|lemmas``: paper 000's transformer.

Examples::

    attndyn transformer train --N 2 --L 4 --d 4 --m 64 --n 8 --eps 1 --omega 1 \\
        --kappa 1/sqrt(m) --xi 0.1 --seed 0 --T 1 -o run.npz
    attndyn transformer kernel --N 2 --L 4 --d 4 --m 64 --n 8 --eps 1 --omega 1 \\
        --kappa 0.125 --xi 0.1 --seed 0 --layer 1 -o H.npz
    attndyn transformer lemmas lemma41 --N 2 --L 4 --d 4 --m 64 --n 8 --eps 1 \\
        --omega 1 --kappa 1/sqrt(m) --xi 0.1 --widths 16,64,256,1024 --kernel exact -o gap.npz
    attndyn transformer premises --N 2 --L 4 --d 4 --m 64 --n 8 --eps 1 --omega 1 \\
        --kappa 1/sqrt(m) --xi 0.1 --token-norm unit --E-scale 0.5 --T 1

The scalings eps, omega, kappa have no defaults (Definition 5.2 fixes them only
up to hidden constants). Results are labelled .npz files that
``attndyn.load_result`` (train) or ``attndyn.numeric.transformer.load_sweep``
(lemmas) read back.
"""

from __future__ import annotations

import json
import math

LEMMAS = ("lemma41", "assumption", "lemma53", "theorem55", "definition52")


def _kappa(text):
    if text.strip() == "1/sqrt(m)":
        return "1/sqrt(m)"
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--kappa must be a number or '1/sqrt(m)', got {text!r}") from None


def _ints(text, name):
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} must be a comma-separated list of ints >= 1, "
                         f"got {text!r}") from None
    if not out or min(out) < 1:
        raise ValueError(f"--{name} must be a non-empty comma-separated list of ints >= 1, "
                         f"got {text!r}")
    return out


def _setup_args(p):
    g = p.add_argument_group("model and data (no defaults for the scalings)")
    for name, typ, meaning in (("N", int, "depth"), ("L", int, "sequence length"),
                               ("d", int, "embedding width"), ("m", int, "feed-forward width"),
                               ("n", int, "training sequences"),
                               ("eps", float, "output scaling of eq. (1)"),
                               ("omega", float, "block output scaling"),
                               ("xi", float, "label-noise standard deviation")):
        g.add_argument(f"--{name}", type=typ, required=True, help=meaning)
    g.add_argument("--kappa", type=_kappa, required=True,
                   help="attention scaling: a number or '1/sqrt(m)' (Definition 5.2)")
    g.add_argument("--seed", type=int, default=0, help="seed (teacher, student, data)")
    g.add_argument("--teacher-m", type=int, default=None, help="teacher width (default m)")
    g.add_argument("--token-norm", choices=("rms", "unit"), default="rms",
                   help="per-token RMS normalisation: ||x|| = sqrt(d) (rms) or 1 (unit)")
    g.add_argument("--E-scale", type=float, default=1.0, dest="E_scale",
                   help="multiplier of the sinusoidal positional embedding")
    g.add_argument("--n-test", type=int, default=256, help="test sequences (excess risk)")
    p.add_argument("--out", "-o", "--output", dest="output", default=None,
                   help="write the labelled result here (.npz); --output is the old name")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


def _train_args(p):
    p.add_argument("--t-end", "--T", dest="T", type=float, required=True,
                   help="training time T of eq. (2) (--T is the old name)")
    p.add_argument("--method", choices=("flow", "sgd"), default="flow",
                   help="gradient flow (default) or mini-batch SGD")
    p.add_argument("--lr", type=float, default=None, help="SGD step (time per step)")
    p.add_argument("--batch-fraction", type=float, default=1.0, help="alpha_agr (SGD)")
    p.add_argument("--sgd-seed", type=int, default=0, help="seed of the SGD mini-batches")
    p.add_argument("--n-eval", type=int, default=20, help="number of output times (default 20)")
    p.add_argument("--rtol", type=float, default=1e-5,
                   help="relative tolerance of the gradient-flow integrator (default 1e-5)")
    p.add_argument("--atol", type=float, default=1e-8,
                   help="absolute tolerance of the gradient-flow integrator (default 1e-8)")


def add_arguments(command_name, parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="action")
    sub.required = True
    p = sub.add_parser("train", help="train a student on teacher data (eq. 2)")
    _setup_args(p)
    _train_args(p)
    p.add_argument("--observe", default="", help="comma list of: kernel, lemma41")
    p = sub.add_parser("kernel", help="layer kernel H_nu of Definition B.5 and lambda")
    _setup_args(p)
    p.add_argument("--layer", type=int, required=True, help="layer, 0-based")
    p.add_argument("--kernel", choices=("definition", "exact"), default="definition",
                   help="Definition B.5's H_nu (nL x nL) or the exact Jacobian Gram K_nu "
                        "(nLd x nLd)")
    p = sub.add_parser("premises", help="the lazy-regime premises (Lemma C.1, eqs. 6-9) "
                                        "measured along a run: a verdict table")
    _setup_args(p)
    _train_args(p)
    _premise_args(p)
    p = sub.add_parser("lemmas", help="measure Lemma 4.1, Assumption 5.1, Lemma 5.3, "
                                      "Theorem 5.5, Definition 5.2")
    p.add_argument("which", choices=LEMMAS)
    _setup_args(p)
    _train_args_optional(p)
    p.add_argument("--widths", default="16,32,64,128,256,512,1024", help="widths (lemma41)")
    p.add_argument("--variable", choices=("m", "n", "L", "d"), default="m",
                   help="swept variable (assumption)")
    p.add_argument("--values", default=None, help="values of --variable (assumption)")
    p.add_argument("--seeds", type=int, default=4, help="number of seeds (>= 1)")
    p.add_argument("--kernel", choices=("definition", "exact"), default="definition",
                   help="Definition B.5's H_nu or the exact Jacobian Gram K_nu (both reported)")
    p.add_argument("--delta", type=float, default=0.05, help="failure probability")
    p.add_argument("--c-exp", type=float, default=None,
                   help="constant C of exp(C d) in Definition 5.2 (required for definition52)")


def _premise_args(p):
    p.add_argument("--kernel", choices=("definition", "exact"), default="definition",
                   help="kernel whose lambda enters eqs. (6)-(9) (default: Definition B.5)")
    p.add_argument("--delta", type=float, default=0.05, help="failure probability of Lemma C.1")
    p.add_argument("--widths", default="16,64,256,1024",
                   help="widths of the part-16 sweep at initialisation ('none' skips it)")


def _train_args_optional(p):
    p.add_argument("--t-end", "--T", dest="T", type=float, default=None,
                   help="training time (lemma53, theorem55; --T is the old name)")
    p.add_argument("--n-eval", type=int, default=20, help="number of output times (default 20)")
    p.add_argument("--rtol", type=float, default=1e-5,
                   help="relative tolerance of the gradient-flow integrator (default 1e-5)")
    p.add_argument("--atol", type=float, default=1e-8,
                   help="absolute tolerance of the gradient-flow integrator (default 1e-8)")


def _fits_json(fits):
    from attndyn.numeric.transformer.results import jsonable
    return jsonable(fits)


def _setup(args):
    s = {k: getattr(args, k) for k in ("N", "L", "d", "m", "n", "eps", "omega", "kappa", "xi",
                                       "token_norm", "E_scale", "n_test")}
    if args.teacher_m is not None:
        s["teacher_m"] = args.teacher_m
    return s


def _print(args, result, text, *, status=0, message="ok", saved=()):
    """``text``, or with ``--json`` the envelope of ``attndyn._cli_common.print_json``: its
    ``result`` holds ``action``, ``setup``, ``seed`` and the action's numbers."""
    if args.json:
        from attndyn._cli_common import print_json
        from attndyn.numeric.transformer.results import jsonable
        result = {"action": args.action, "setup": _setup(args), "seed": args.seed, **result}
        if args.action == "lemmas":
            result["which"] = args.which
        print_json("transformer", status=int(status), message=str(message),
                   saved=[p for p in saved if p], result=jsonable(result))
    else:
        print(text)


def run(command_name, args) -> int:
    """The ``transformer`` command: premises, train, kernel, or a lemma's check."""
    from attndyn.numeric import transformer as tr

    if getattr(args, "method", None) == "flow" and getattr(args, "lr", None) is not None:
        raise ValueError("--lr applies to --method sgd only (the gradient flow has no step; "
                         "its accuracy is --rtol/--atol)")
    s = tr.check_setup(_setup(args))
    seeds = getattr(args, "seeds", 1)
    if seeds < 1:
        raise ValueError(f"--seeds must be an int >= 1, got {seeds}")
    if args.action == "premises":
        return _run_premises(args, s)
    if args.action == "train":
        return _run_train(args, s, tr)
    if args.action == "kernel":
        return _run_kernel(args, s, tr)
    return _run_lemma(args, s, tr)


def _run_premises(args, s) -> int:
    """``transformer premises``: the premises report, printed and optionally saved."""
    from attndyn.numeric.transformer.premises import premises
    widths = () if args.widths.strip() == "none" else _ints(args.widths, "widths")
    rep = premises(s, args.seed, T=args.T, method=args.method, kernel=args.kernel,
                   delta=args.delta, n_eval=args.n_eval, widths=widths, lr=args.lr,
                   batch_fraction=args.batch_fraction,
                   **({"sgd_seed": args.sgd_seed} if args.method == "sgd" else
                      {"rtol": args.rtol, "atol": args.atol}))
    path = rep.save(args.output) if args.output else None
    _print(args, rep.as_dict(),
           rep.table() + f"\nrun: status {rep.result.status} ({rep.result.message}), "
           f"lambda ({args.kernel}) = {rep.params['lambda']:.4g}"
           + (f"\nwrote {path}" if path else ""),
           status=rep.result.status, message=rep.result.message, saved=[path])
    return 0 if rep.result.status == 0 else 1


def _run_train(args, s, tr) -> int:
    """``transformer train``: one training run, its final observables printed."""
    observe = [o for o in args.observe.split(",") if o]
    student, data = tr.build(s, args.seed)
    res = tr.train(student, data, T=args.T, method=args.method, lr=args.lr,
                   batch_fraction=args.batch_fraction, seed=args.sgd_seed,
                   n_eval=args.n_eval, rtol=args.rtol, atol=args.atol, observe=observe)
    res.params["setup"] = {k: v for k, v in s.items()}
    res.params["seed_setup"] = args.seed
    path = res.save(args.output) if args.output else None
    fin = res.final()
    _print(args, {"t_end": float(res.t[-1]), "final": fin},
           f"status {res.status} ({res.message}); t = {res.t[-1]:g}: "
           + ", ".join(f"{k} = {v:.6g}" for k, v in fin.items())
           + (f"\nwrote {path}" if path else ""),
           status=res.status, message=res.message, saved=[path])
    return 0 if res.status == 0 else 1


def _run_kernel(args, s, tr) -> int:
    """``transformer kernel``: one layer's kernel and its smallest eigenvalues."""
    import numpy as np
    student, data = tr.build(s, args.seed)
    if args.kernel == "exact":
        Hb, Hg = tr.exact_kernel_parts(student, data.X, args.layer)
    else:
        Hb, Hg = tr.kernel_parts(student, data.X, args.layer)
    lam_H = tr.min_eigenvalue(Hb + Hg)
    lam = tr.min_eigenvalue(Hb) / student.omega
    summary = {"layer": args.layer, "nL": int(s["n"] * s["L"]), "rows": int(Hb.shape[0]),
               "kernel": args.kernel, "lambda_min_H": lam_H, "lambda": lam, "setup": s,
               "seed": args.seed}
    path = None
    if args.output:
        path = args.output if args.output.endswith(".npz") else args.output + ".npz"
        np.savez_compressed(path, H=Hb + Hg, Hprime=Hb, Hgamma=Hg,
                            header=np.array(json.dumps(dict(summary,
                                            format="attndyn-transformer-kernel-1"))))
    _print(args, summary,
           f"layer {args.layer} (0-based), {args.kernel} kernel, {Hb.shape[0]} rows: "
           f"lambda_min = {lam_H:.6g}, lambda = lambda_min(W part / omega) = {lam:.6g}"
           + (f"\nwrote {path}" if path else ""),
           message=f"layer {args.layer}, {args.kernel} kernel", saved=[path])
    return 0


def _run_lemma(args, s, tr) -> int:
    """``transformer lemmas``: the sweep or check of ``--which``."""
    w = args.which
    if w == "lemma41":
        out = tr.lemma41_sweep(s, _ints(args.widths, "widths"), seeds=args.seeds,
                               kernel=args.kernel)
    elif w == "assumption":
        vals = _ints(args.values, "values") if args.values else [8, 16, 32, 64, 128]
        out = tr.assumption_sweep(s, args.variable, vals, seeds=args.seeds, kernel=args.kernel)
    elif w == "lemma53":
        if args.T is None:
            raise ValueError("--T is required for lemma53")
        out = tr.lemma53(s, T=args.T, seeds=args.seeds, n_eval=args.n_eval, rtol=args.rtol,
                         atol=args.atol)
    elif w == "theorem55":
        if args.T is None:
            raise ValueError("--T is required for theorem55")
        student, data = tr.build(s, args.seed)
        res = tr.train(student, data, T=args.T, n_eval=args.n_eval, rtol=args.rtol,
                       atol=args.atol)
        rep = tr.theorem55(res, omega=student.omega, eps=student.eps, X=data.X,
                           kernel=args.kernel)
        lam = rep["lambda"]
        path = res.save(args.output) if args.output else None
        _print(args, rep,
               f"kernel {args.kernel}: lambda = {lam:.6g}; predicted rate alpha eps^2 = "
               f"{rep['predicted_rate']:.6g}; "
               f"min_t effective rate / predicted = {rep['ratio']:.6g}; fitted rate ratio = "
               f"{rep['fitted_ratio']:.6g}; bound holds: {rep['holds']}\n"
               f"both kernels: lambda {rep['lambda_definition']:.4g} (definition), "
               f"{rep['lambda_exact']:.4g} (exact); min ratio {rep['ratio_definition']:.4g}, "
               f"{rep['ratio_exact']:.4g}"
               + (f"\nwrote {path}" if path else ""),
               message="theorem55", saved=[path])
        return 0
    else:
        if args.c_exp is None:
            raise ValueError("--c-exp is required for definition52 (the paper gives no value)")
        student, data = tr.build(s, args.seed)
        rep = tr.definition52(student, data.X, delta=args.delta, c_exp=args.c_exp)
        _print(args, rep, ", ".join(f"{k} = {v}" for k, v in rep.items()),
               message="definition52")
        return 0
    path = out.save(args.output) if args.output else None
    _print(args, {"kind": out.kind, "x_name": out.x_name, "x": out.x,
                  "observables": dict(zip(out.names, out.y)), "fits": out.fits},
           out.table() + "\nfits: " + json.dumps(_fits_json(out.fits))
           + (f"\nwrote {path}" if path else ""),
           status=out.status, message=out.message, saved=[path])
    return 0 if out.status == 0 else 1
