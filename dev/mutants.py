#!/usr/bin/env python3
"""Planted bugs against the tests meant to catch them (issue 25, item 4).

Each entry of :data:`MUTATIONS` is one single-point change to a real formula: the file,
the exact text it replaces (which must occur exactly once), the new text, and the test
node ids that must fail on it. The tool applies one mutation at a time to a private copy
of the repository (or to a linked git worktree given with ``--tree``), runs
``python -m pytest -x -q`` on its tests, records killed or survived, restores the file
(checked byte for byte) and prints a table. Verdicts: ``killed`` (pytest exit 1: a test
failed), ``killed (timeout)``, ``SURVIVED`` (exit 0); any other exit (collection error, a
test id not found or deselected) is reported as an error and not counted as killed. The
two ``vacuous-*`` entries mutate a test itself: they force the condition of a formerly
conditional assertion false, and the test must then fail rather than pass vacuously.

Every run is isolated: a fresh numba cache, generated-source cache, home folder (the
structure and surrogate disk caches live there) and bytecode folder, so no compiled or
cached artefact of one variant reaches another (numba does not invalidate a cached caller
when a callee in another file changes); ``CI=1`` makes hypothesis deterministic. The tree
under test is imported through a ``sitecustomize`` finder that maps the package folders
(``pyproject.toml``'s package-dir) to it, and a probe checks this before anything runs.

It refuses to run when a file it would mutate has uncommitted changes, and it never edits
a main checkout: ``--tree`` must be a linked worktree; otherwise the copy is mutated.

    python dev/mutants.py                        # copy of this checkout, every mutation
    python dev/mutants.py --tree /tmp/wt --only cor2-kappa-drops-L
    python dev/mutants.py --list
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Mutation:
    id: str
    bullet: str        # the planted bug, as issue 25 item 4 names it
    file: str          # relative to the repository root
    old: str           # exact text, found exactly once
    new: str
    tests: tuple       # pytest node ids that must fail


def _t(path, *names):
    return tuple(f"{path}::{n}" for n in names)


UNTIED = "tests/attention/untied/test_mutation_untied.py"
DIRECT = "tests/attention/direct/test_mutation_direct.py"
TIED = "tests/attention/tied/test_mutation_tied.py"
POT = "tests/attention/potentials/test_potential_mutations.py"
SCAL = "tests/scaling/test_mutation_scaling.py"
TRF = "tests/transformer/test_mutation_transformer.py"
THM = "tests/attention/theorems/test_mutation_theorems.py"

MUTATIONS = (
    Mutation("psi_beta-letter", "psi_beta: the B letter read as A in psi (eq. 27)",
             "numeric/attention/untied/fastslow.py",
             "s += a[k, l] * (mu[look[canonical((Mr, 4 * k + su.B), alph)]]",
             "s += a[k, l] * (mu[look[canonical((Mr, 4 * k + su.A), alph)]]",
             _t(UNTIED, "test_psi_beta_against_the_matrices")),
    Mutation("fast-flow-slope", "fast flow (28): rate 2 tA instead of tA + tB",
             "numeric/attention/untied/fastslow.py",
             "    D = tA + tB\n    K = th.K\n", "    D = 2.0 * tA\n    K = th.K\n",
             _t(UNTIED, "test_fast_flow_initial_slope_against_the_m_gradient")),
    Mutation("tied-noise-cyclic", "tied noise_terms: the rest Q of a word in the wrong cyclic "
             "order",
             "numeric/attention/tied/noise.py",
             "Q = w[j + 1:] + w[:i]", "Q = w[:i] + w[j + 1:]",
             _t(TIED, "test_noise_rule_on_words_of_length_4_to_6_against_the_explicit_step")),
    Mutation("euler-sign", "noise+finite-d (direct S): Euler correction with the wrong sign",
             "numeric/attention/direct/noise.py",
             "return g - 0.5 * h * jg", "return g + 0.5 * h * jg",
             _t(DIRECT, "test_noise_finite_d_ode_follows_the_iterated_mean_map")),
    Mutation("lambda-psi-omega-swap", "direct-S noise: Lambda^Psi and Lambda^Omega swapped",
             "numeric/attention/direct/noise.py",
             'w = (C[i, i2] * C[j, j2] if kind == "Omega"',
             'w = (C[i, i2] * C[j, j2] if kind == "Psi"',
             _t(DIRECT, "test_noise_rows_at_L2_are_lambda_psi_and_lambda_omega")),
    Mutation("kappa3-halved", "finite-width flow: the kappa_3 term halved",
             "numeric/attention/tied/finite_width.py",
             "P = P + n * qf_scale(n, d) * word_sum(g[a], mats)",
             "P = P + (0.5 if n == 3 else 1.0) * n * qf_scale(n, d) * word_sum(g[a], mats)",
             _t(TIED, "test_finite_width_flow_of_a_cubic_loss_follows_the_gradient_of_phi_d")),
    Mutation("p_plus-half", "p_plus without its 1/2 (eq. 407)",
             "numeric/attention/direct/runner.py",
             "((pO + pP) / 2).ravel()", "(pO + pP).ravel()",
             _t(DIRECT, "test_p_plus_p_minus_are_the_symmetric_and_skew_channels")),
    Mutation("surrogate-K3-product", "surrogate kernel, K >= 3 branch: the other coordinates' "
             "Chebyshev product dropped", "kernels/surrogate.py",
             "tk = pre * T[k0 + k]", "tk = T[k0 + k]",
             _t(POT, "test_k3_surrogate_with_mixed_terms")),
    Mutation("certificate-5x", "surrogate certificate passes at 5x instead of 0.5x the tolerance",
             "numeric/attention/potentials/surrogate.py",
             "_PASS = 0.5  #", "_PASS = 5.0  #",
             _t(POT, "test_k3_surrogate_with_mixed_terms",
                "test_certificate_fails_on_a_reference_off_by_three_quarters_of_the_tolerance")),
    Mutation("hermite-stop-5x", "Hermite series stops at 2.5x instead of 0.5x the tolerance",
             "kernels/hermite.py",
             "            if (b1 + q_x <= 0.5 * (lim + rtol * abs(Esx - P1))\n"
             "                    and b2 + q_y <= 0.5 * (lim + rtol * abs(Esy - P2))\n"
             "                    and b3 <= 0.5 * (lim + rtol * abs(P3))):",
             "            if (b1 + q_x <= 2.5 * (lim + rtol * abs(Esx - P1))\n"
             "                    and b2 + q_y <= 2.5 * (lim + rtol * abs(Esy - P2))\n"
             "                    and b3 <= 2.5 * (lim + rtol * abs(P3))):",
             _t(POT, "test_hermite_bound_covers_the_error_and_stops_at_half_the_tolerance")),
    Mutation("hermite-projection-sign", "PSD projection (eq. 92) of the Hermite kernel: "
             "off-diagonal sign flipped", "kernels/hermite.py",
             "b = lmax * u0 * u1", "b = -lmax * u0 * u1",
             _t(TIED, "test_hermite_kernel_projects_on_the_psd_cone")
             + _t(POT, "test_projection_outside_the_cone_against_the_reference")),
    Mutation("quadrature-projection-transpose", "PSD projection of the compiled quadrature: "
             "V^T for V (the off-diagonal sign flips)", "kernels/quadrature.py",
             "acc += V[i * n + k] * lam[k] * V[j * n + k]",
             "acc += V[i * n + k] * lam[k] * V[k * n + j]",
             _t(TIED, "test_compiled_route_projects_on_the_psd_cone")),
    Mutation("stage-one-xi", "stage_one_bound, extended-range path: xi^2 -> xi",
             "numeric/scaling/_kernels.py",
             "    am, ae = xmul(am, ae, xm, xe)\n    am, ae = xmul(am, ae, xm, xe)\n"
             "    Cm, Ce = xf(C)\n",
             "    am, ae = xmul(am, ae, xm, xe)\n    Cm, Ce = xf(C)\n",
             _t(SCAL, "test_bound_at_extreme_arguments_against_mpmath")),
    Mutation("lemma-b4-half", "Lemma B.4 form='lemma': diag(1 - e_l/2) read as the identity",
             "numeric/transformer/gradients.py",
             "np.fill_diagonal(half, 0.5)", "np.fill_diagonal(half, 1.0)",
             _t(TRF, "test_lemma_b4_part3_as_printed_literal_transcription")),
    Mutation("lambda-missing-omega", "Assumption 5.1 lambda without its /omega",
             "numeric/transformer/kernel.py",
             '"lambda": lb / model.omega', '"lambda": lb',
             _t(TRF, "test_assumption_lambda_divides_by_omega")),
    Mutation("lambda-inverted-omega", "Assumption 5.1 lambda with *omega for /omega",
             "numeric/transformer/kernel.py",
             '"lambda": lb / model.omega', '"lambda": lb * model.omega',
             _t(TRF, "test_assumption_lambda_divides_by_omega")),
    Mutation("thm55-missing-omega", "Theorem 5.5 alpha without its /omega",
             "numeric/transformer/lemmas.py",
             "alpha = lm / omega", "alpha = lm",
             _t(TRF, "test_theorem55_alpha_is_lambda_over_omega")),
    Mutation("thm55-inverted-omega", "Theorem 5.5 alpha with *omega for /omega",
             "numeric/transformer/lemmas.py",
             "alpha = lm / omega", "alpha = lm * omega",
             _t(TRF, "test_theorem55_alpha_is_lambda_over_omega")),
    Mutation("L_Gamma-too-small", "L_Gamma half its value",
             "numeric/attention/tied/bounds.py",
             "L = max(L, math.sqrt(sum(", "L = max(L, 0.5 * math.sqrt(sum(",
             _t(THM, "test_gamma_constants_are_exact_for_known_gamma")),
    Mutation("cor2-kappa-drops-L", "Corollary 2's kappa(s) without its L_Gamma term",
             "numeric/attention/tied/bounds.py",
             "return (4 * K * C * s + 4 * K * K * L * s * s * R) / gamma",
             "return (4 * K * C * s) / gamma",
             _t(THM, "test_truncation_bound_is_the_minimum_of_eq14")),
    Mutation("assumption3-mixed-moment", "Assumption 3: Tr(S1°^2 S2°) computed as "
             "Tr(S1° S2°^2)",
             "numeric/attention/tied/assumptions.py",
             "m112 = np.sum((A @ A) * B) / d", "m112 = np.sum((A @ B) * B) / d",
             _t(THM, "test_assumption_3_returns_the_mixed_moments",
                "test_assumption_3_fails_on_a_cubic_moment_with_p12_zero")),
    # further variants of the same bullets
    Mutation("psi_beta-factor", "psi_beta: psi without its factor 2",
             "numeric/attention/untied/fastslow.py",
             "psi[k] = 2.0 * s", "psi[k] = s",
             _t(UNTIED, "test_psi_beta_against_the_matrices")),
    Mutation("psi_beta-denominator", "psi_beta: beta = -psi / (2 tA) instead of / (tA + tB)",
             "numeric/attention/untied/fastslow.py",
             "beta[tr] = -psi[tr] / (tA[tr] + tB[tr])", "beta[tr] = -psi[tr] / (2.0 * tA[tr])",
             _t(UNTIED, "test_psi_beta_against_the_matrices")),
    Mutation("tied-noise-term-order", "tied noise_terms: mu(lQk) read as mu(kQl)",
             "numeric/attention/tied/noise.py",
             "(P, (l,) + Q + (k,))", "(P, (k,) + Q + (l,))",
             _t(TIED, "test_noise_rule_on_words_of_length_4_to_6_against_the_explicit_step")),
    Mutation("euler-factor", "noise+finite-d (direct S): Euler correction h J G instead of "
             "(h/2) J G", "numeric/attention/direct/noise.py",
             "return g - 0.5 * h * jg", "return g - h * jg",
             _t(DIRECT, "test_noise_finite_d_ode_follows_the_iterated_mean_map")),
    Mutation("noise_rhs-swap", "direct-S noise_rhs: Lambda^Psi and Lambda^Omega rows swapped",
             "numeric/attention/direct/noise.py",
             "    lp, lo = noise_coefficients(model)(Psi, Omega)\n    eps = eta * d / batch\n"
             "    cc = np.outer(model.chi, model.chi)\n    return eps * cc * lp, eps * cc * lo\n",
             "    lp, lo = noise_coefficients(model)(Psi, Omega)\n    eps = eta * d / batch\n"
             "    cc = np.outer(model.chi, model.chi)\n    return eps * cc * lo, eps * cc * lp\n",
             _t("tests/attention/direct/test_mutants_direct_noise.py",
                "test_noise_rhs_at_L2_against_the_gaussian_covariance")),
    Mutation("p_minus-sign", "p_minus with the wrong sign (eq. 408)",
             "numeric/attention/direct/runner.py",
             "((pO - pP) / 2).ravel()", "((pP - pO) / 2).ravel()",
             _t(DIRECT, "test_p_plus_p_minus_are_the_symmetric_and_skew_channels")),
    Mutation("hermite-stop-cross-5x", "Hermite series: the cross entry's stop at 2.5x",
             "kernels/hermite.py",
             "and b3 <= 0.5 * (lim + rtol * abs(P3))):", "and b3 <= 2.5 * (lim + rtol * abs(P3))):",
             _t("tests/attention/potentials/test_mutants_potentials.py",
                "test_hermite_cross_entry_stops_at_half_the_tolerance")),
    Mutation("hermite-projection-branch", "PSD projection of the Hermite kernel: the second "
             "eigenvector formula with its sign flipped", "kernels/hermite.py",
             "u0 = lmax - c", "u0 = c - lmax",
             _t(TIED, "test_hermite_kernel_projects_on_the_psd_cone")),
    Mutation("quadrature-projection-minus", "PSD projection (untied, direct): X2 rebuilt as "
             "P_- - P_+", "kernels/quadrature.py",
             "xx[o2 + i] = Qp[i] - Qm[i]", "xx[o2 + i] = Qm[i] - Qp[i]",
             _t(TIED, "test_compiled_route_projects_on_the_psd_cone")),
    Mutation("lemma-b4-sigma", "Lemma B.4 form='lemma': the sigma_{p,l} factor dropped",
             "numeric/transformer/gradients.py",
             "jt = sig_ll * g + kap", "jt = g + kap",
             _t(TRF, "test_lemma_b4_part3_as_printed_literal_transcription")),
    Mutation("thm55-eps", "Theorem 5.5 rate alpha eps instead of alpha eps^2",
             "numeric/transformer/lemmas.py",
             "pred = alpha * eps * eps", "pred = alpha * eps",
             _t(TRF, "test_theorem55_alpha_is_lambda_over_omega")),
    Mutation("L_Gamma-offdiagonal", "L_Gamma: an off-diagonal symbol weighted 1/4 (too small)",
             "numeric/attention/tied/bounds.py",
             "(1.0 if dg else 0.5)", "(1.0 if dg else 0.25)",
             _t(THM, "test_gamma_constants_are_exact_for_known_gamma")),
    Mutation("cor2-gamma-star-power", "Corollary 2's gamma*_2 with R^2 for R^3",
             "numeric/attention/tied/bounds.py",
             'g["L_Gamma"] * R ** 3', 'g["L_Gamma"] * R ** 2',
             _t(THM, "test_cor2_gamma_star_exact")),
    Mutation("assumption3-normalisation", "Assumption 3: Tr(S1°^2 S2°) normalised by "
             "sqrt(p11) p22", "numeric/attention/tied/assumptions.py",
             "n112 = abs(m112) / (s1 * s1 * s2)", "n112 = abs(m112) / (s1 * s2 * s2)",
             _t(THM, "test_assumption_3_returns_the_mixed_moments")),
    # the two formerly vacuous conditionals: the condition forced false in the test itself
    # must make the test fail (a conditional assertion would pass)
    Mutation("vacuous-kv", "transformer directional check: every step 'crosses a kink'",
             "tests/transformer/test_transformer.py",
             "fdv, kv = _fd_subset_dir(mdl, X, Y, v, h)\n",
             "fdv, kv = _fd_subset_dir(mdl, X, Y, v, h)[0], False\n",
             _t("tests/transformer/test_transformer.py",
                "test_gradients_match_finite_differences")),
    Mutation("vacuous-old-status", "cheap truncation check: the old check never flags",
             "tests/attention/tied/test_long_horizon.py",
             "assume(old.status != 0)", "assume(old.status != 0 and old.status == 0)",
             _t("tests/attention/tied/test_long_horizon.py",
                "test_cheap_check_never_passes_what_the_old_check_fails")),
)


# -- the tree under test ---------------------------------------------------------------------

def _git(tree, *args) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True).stdout


def _refuse(msg):
    sys.exit(f"mutants: {msg}")


def check_clean(tree, files):
    """Refuse a tree whose files to be mutated differ from its HEAD."""
    dirty = _git(tree, "status", "--porcelain", "--", *sorted(set(files))).strip()
    if dirty:
        _refuse("uncommitted changes to files it would mutate; commit or restore them "
                "first:\n" + dirty)


def check_linked_worktree(tree):
    """``--tree`` must be a linked worktree (its git dir differs from the common one)."""
    git_dir = Path(tree, _git(tree, "rev-parse", "--git-dir").strip()).resolve()
    common = Path(tree, _git(tree, "rev-parse", "--git-common-dir").strip()).resolve()
    if git_dir == common:
        _refuse(f"{tree} is a main checkout; pass a linked worktree (git worktree add) "
                "or leave out --tree to work on a copy")


def copy_tree(src, dst):
    """Tracked and untracked-but-not-ignored files of ``src`` into ``dst``."""
    names = _git(src, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for rel in filter(None, names.split("\0")):
        p = Path(src, rel)
        if p.is_file():
            Path(dst, rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, Path(dst, rel))


def package_map(tree) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:      # Python 3.10
        import tomli as tomllib
    with open(Path(tree, "pyproject.toml"), "rb") as fh:
        dirs = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    return {name: str(Path(tree, d).resolve()) for name, d in dirs.items()}


_SHIM = '''\
import importlib.util, sys
_MAP = {mapping!r}
class _TreeFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        d = _MAP.get(name)
        if d is None:
            return None
        return importlib.util.spec_from_file_location(
            name, d + "/__init__.py", submodule_search_locations=[d])
sys.meta_path.insert(0, _TreeFinder)
'''


def run_env(tree, work) -> dict:
    """Environment of one pytest run: the tree's packages first, every cache fresh."""
    shim = Path(work, "shim")
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "sitecustomize.py").write_text(_SHIM.format(mapping=package_map(tree)))
    env = dict(os.environ)
    for key, sub in (("HOME", "home"), ("NUMBA_CACHE_DIR", "numba"),
                     ("ATTNDYN_CACHE_DIR", "generated"), ("PYTHONPYCACHEPREFIX", "pyc")):
        Path(work, sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        env[key] = str(Path(work, sub))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH")]))
    env.update(CI="1", ATTNDYN_PROGRESS="0", NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return env


def probe(tree, python):
    """The packages import from ``tree`` (not from another checkout's install)."""
    with tempfile.TemporaryDirectory(prefix="mutants-probe-") as work:
        code = ("import attndyn, attndyn.kernels, attndyn.numeric, attndyn.symbolic as s;"
                "print('\\n'.join(m.__file__ for m in (attndyn, attndyn.kernels, "
                "attndyn.numeric, s)))")
        out = subprocess.run([python, "-c", code], cwd=tree, env=run_env(tree, work),
                             capture_output=True, text=True)
    root = str(Path(tree).resolve()) + os.sep
    files = out.stdout.split()
    if out.returncode or len(files) != 4 or not all(f.startswith(root) for f in files):
        _refuse(f"the packages do not import from {tree}: {out.stdout}{out.stderr[-2000:]}")


# -- one run ---------------------------------------------------------------------------------

def pytest_run(tree, python, tests, timeout) -> dict:
    """``python -m pytest -x -q`` on ``tests`` in ``tree`` with fresh caches; the verdict
    from the exit code (0 passed, 1 a test failed, anything else an error)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutants-run-") as work:
        cmd = [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
        proc = subprocess.Popen(cmd, cwd=tree, env=run_env(tree, work), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)   # pytest and whatever it started
            out, _ = proc.communicate()
            rc = None
    outcome = {0: "passed", 1: "failed"}.get(rc, "timeout" if rc is None else f"error rc={rc}")
    last = [ln for ln in out.splitlines() if ln.strip()]
    return {"outcome": outcome, "seconds": round(time.monotonic() - start, 1),
            "summary": last[-1] if last else "", "output": out}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mutate_and_run(tree, python, mut, timeout) -> dict:
    """Apply ``mut``, run its tests, restore the file (verified) whatever happens."""
    path = Path(tree, mut.file)
    original = path.read_bytes()
    text = original.decode("utf-8")
    n = text.count(mut.old)
    if n != 1:
        return {"outcome": f"stale: old text found {n} times", "seconds": 0.0, "summary": "",
                "output": ""}
    try:
        path.write_bytes(text.replace(mut.old, mut.new).encode("utf-8"))
        res = pytest_run(tree, python, mut.tests, timeout)
    finally:
        path.write_bytes(original)
        if _sha(path.read_bytes()) != _sha(original):
            _refuse(f"could not restore {path}")
    return res


def verdict(res) -> str:
    o = res["outcome"]
    if o == "failed":
        return "killed"
    if o == "passed":
        return "SURVIVED"
    if o == "timeout":
        return "killed (timeout)"
    return o


# -- driver ----------------------------------------------------------------------------------

def _select(only):
    known = {m.id: m for m in MUTATIONS}
    bad = [i for i in only or () if i not in known]
    if bad:
        _refuse(f"unknown mutation ids {bad}; --list shows them")
    return [known[i] for i in only] if only else list(MUTATIONS)


def print_table(rows, out=sys.stdout):
    w, wf, wv = (max(len(r[k]) for r in rows) for k in ("id", "file", "verdict"))
    print(f"{'mutation':<{w}}  {'file':<{wf}}  {'verdict':<{wv}}  {'s':>6}  killing test",
          file=out)
    for r in rows:
        tests = ", ".join(t.split("::", 1)[1] for t in r["tests"])
        print(f"{r['id']:<{w}}  {r['file']:<{wf}}  {r['verdict']:<{wv}}  {r['seconds']:>6.1f}  "
              f"{tests}", file=out)
    killed = sum(r["verdict"].startswith("killed") for r in rows)
    print(f"{killed}/{len(rows)} killed", file=out)


def _parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", help="a linked git worktree to mutate in place "
                    "(default: a temporary copy of this checkout)")
    ap.add_argument("--only", nargs="+", metavar="ID", help="run these mutations only")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with the dependencies and pytest (default: this one)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    ap.add_argument("--json", help="write the rows (with pytest's output) to this file")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unmutated run of the selected tests")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    return ap


def _prepare(args, muts, keep):
    """The tree to mutate: ``--tree`` (checked) or a fresh copy of this checkout in ``keep``."""
    files = [m.file for m in muts]
    if args.tree:
        tree = Path(args.tree).resolve()
        check_linked_worktree(tree)
        check_clean(tree, files)
        return tree
    check_clean(REPO, files)
    tree = Path(keep, "tree")
    copy_tree(REPO, tree)
    return tree


def _baseline(tree, args, muts):
    tests = sorted({t for m in muts for t in m.tests})
    base = pytest_run(tree, args.python, tests, args.timeout)
    print(f"baseline: {base['outcome']} ({base['seconds']} s) {base['summary']}", flush=True)
    if base["outcome"] != "passed":
        print(base["output"][-4000:])
        _refuse("the unmutated tests do not pass; nothing to measure")


def _first_error(output) -> str:
    """The first ``E`` line of pytest's report: what the failing test said."""
    return next((ln[1:].strip() for ln in output.splitlines() if ln.startswith("E ")), "")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    muts = _select(args.only)
    if args.list:
        for m in muts:
            print(f"{m.id}: {m.bullet}\n    {m.file}\n    " + "\n    ".join(m.tests))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="mutants-tree-") as keep:
        tree = _prepare(args, muts, keep)
        probe(tree, args.python)
        src = tree if args.tree else REPO
        head = _git(src, "describe", "--always", "--dirty").strip()
        print(f"tree under test: {tree} (from {src} at {head})", flush=True)
        if not args.no_baseline:
            _baseline(tree, args, muts)
        for m in muts:
            res = mutate_and_run(tree, args.python, m, args.timeout)
            rows.append({"id": m.id, "bullet": m.bullet, "file": m.file, "tests": list(m.tests),
                         "verdict": verdict(res), "said": _first_error(res["output"]), **res})
            print(f"  {m.id}: {rows[-1]['verdict']} ({res['seconds']} s) {res['summary']}",
                  flush=True)
    print()
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["verdict"].startswith("killed") for r in rows) else 1

if __name__ == "__main__":
    sys.exit(main())
