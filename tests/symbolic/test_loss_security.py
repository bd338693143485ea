"""Loss strings are parsed, never executed; their size is bounded (issue 10, sections 2, 3, 7).

Every known injection form goes through every CLI subcommand that takes
``--loss`` (in-process, plus two real subprocesses) and through the API; a
hypothesis test feeds random text and token soups to the parser.
"""

from __future__ import annotations

import ast
import os
import pathlib
import string
import subprocess
import sys

import pytest
import sympy as sp
from hang_guard import finishes
from hypothesis import given, settings
from hypothesis import strategies as st

from attndyn.cli import main
from attndyn.symbolic.gaussian import g_array
from attndyn.symbolic.losses import (loss_from_spec, matrix_denoising, mse_teacher_student,
                                     softmax_teacher_student, two_layer_attention)
from attndyn.symbolic.parse import (MAX_CHARS, MAX_EXPONENT, LossArray, as_sympy,
                                    check_loss_expression, parse_expression, parse_float,
                                    parse_loss)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYS = "__import__('os').system('touch PWNED')"

# (loss text, a fragment of the one-line error) -- all valid for K = 2, L = 1 shapes
INJECTIONS = [
    (f"G[0,0,0]+{SYS}", "'__import__' is not allowed"),
    (f"mse:{SYS}", "unknown activation"),
    (f"mse:h2,{SYS}", "unknown activation"),
    (f"mse:x+{SYS}", "'__import__' is not allowed"),
    (f"softmax:beta={SYS}", "beta must be a plain number"),
    (f"softmax:L={SYS}", "L must be an integer"),
    (f"denoising:ell={SYS}", "'__import__' is not allowed"),
    (f"denoising:ell=a+{SYS}", "'__import__' is not allowed"),
    ("G[0,0,0]+().__class__.__base__.__subclasses__()", "not allowed"),
    ("G[0,0,0]+G[0,0,1].__class__", "attribute access '.__class__'"),
    (f"G[0,0,0]+(lambda: {SYS})()", "lambda"),
    (f"G[0,0,0]+[{SYS} for i in (1,)][0]", "not allowed"),
    (f"G[0,0,0]+sum({SYS} for i in (1,))", "'sum' is not allowed"),
    ("G[0,0,0]+f'{__import__(\"os\").system(\"touch PWNED\")}'", "f-string"),
    ("G[0,0,0]+max(*[G[0,0,1], 1])", "starred"),
    (f"G[0,0,0]+exp(x={SYS})", "keyword argument"),
    ("G[0,0,0]+__builtins__", "'__builtins__' is not allowed"),
    ("G[0,0,0]+eval('1')", "'eval' is not allowed"),
    ("G[0,0,0]+exec('import os')", "'exec' is not allowed"),
    ("G[0,0,0]; import os", "syntax error"),
    ("G[0,0,0]\nimport os", "syntax error"),
    ("G[0,0,0]+(G1:=1)", "assignment expression"),
    ("G[0,0,0]+'touch PWNED'", "literal str"),
    ("G[0,0,0]+" + "1+" * 1500 + "1", "too long"),
    ("G[0,0,0]+" + "1+" * 600 + "1", "too large"),
    ("G[0,0,0]+" + "exp(" * 60 + "1" + ")" * 60, "nested too deeply"),
    ("G[0,0,0]**100000", f"|exponent| <= {MAX_EXPONENT}"),
    ("G[0,0,0]*9**9**9", f"|exponent| <= {MAX_EXPONENT}"),
    ("G[0,0,0]*(9**16)**16**2", "exponent"),
    ("G[0,0,0]**G[0,0,1]", "must be a number"),
    ("((G[0,0,0]**16)**16)**16", "degree"),
    ("(1e300)**2*G[0,0,0]", "too large"),
    ("G[0,0,0]+1j", "complex number"),
    ("G[0,0,0]+sqrt(-1)", "imaginary unit"),
    ("G[0,0,0]/0", "zoo"),
    ("G[0,0,0]*nan", "'nan' is not allowed"),
    ("G[0,0,0]*oo", "'oo' is not allowed"),
    ("G[0,0,0]*I", "'I' is not allowed"),
    ("G[0,0,0]*1e999", "not finite"),
    ("G[0,0,5]", "index G[0,0,5] out of range: K = 2, L = 1"),
    ("G[0,0,-1]", "non-negative integer literal"),
    ("G0", "index G0 out of range"),
    ("G[0,0,0]+h99999(G[0,0,1])", "Hermite order"),
    ("mse:h99999", "Hermite order"),
    ("attention2:heads=1000000", "heads must be an integer in [1, 8]"),
]


def _args(cmd):
    """The smallest argument list of each subcommand (the loss fails before any work)."""
    return {"derive": [], "integrate": [], "verify": ["--d", "4"], "sgd": ["--eta", "0.1"],
            "compare": ["--eta", "0.1"]}[cmd]


@pytest.fixture
def no_system(monkeypatch, tmp_path):
    """Run in an empty folder with os.system and os.popen replaced by recorders."""
    calls = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(a) or 0)
    monkeypatch.setattr(os, "popen", lambda *a, **k: calls.append(a))
    yield calls
    assert calls == [], f"os.system was called: {calls}"
    assert list(tmp_path.iterdir()) == [], "a file was created"


@pytest.mark.parametrize("cmd", ["derive", "integrate", "verify", "sgd", "compare"])
def test_cli_injections_refused(cmd, no_system, capsys):
    # the CLI declares no parameters: an unknown name is refused too
    for text, frag in INJECTIONS + [("G[0,0,0]*foo", "'foo' is not allowed"),
                                    ("G1*os", "'os' is not allowed")]:
        def refused():
            rc = main([cmd, f"--loss={text}"] + _args(cmd))
            return rc, capsys.readouterr().err
        rc, err = finishes(refused, what=text)
        assert rc == 2, (text, err)
        assert err.count("\n") == 1 and err.startswith(f"attndyn {cmd}: error: "), (text, err)
        assert frag in err, (text, frag, err)


def test_cli_subprocess_injection_and_hang(tmp_path):
    for argv in (["derive", f"--loss=G[0,0,0]+{SYS}"],
                 ["sgd", "--eta", "0.1", "--loss=G[0,0,0]*9**9**9"]):
        p = subprocess.run([sys.executable, "-m", "attndyn"] + argv, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and "error:" in p.stderr, p.stderr
        assert list(tmp_path.iterdir()) == []


def test_api_injections_refused(no_system):
    for text, frag in INJECTIONS:
        def refused():
            with pytest.raises(ValueError) as exc:
                loss_from_spec(text, 2, 1)
            return str(exc.value)
        msg = finishes(refused, what=text)
        assert "\n" not in msg and frag in msg, (text, frag, msg)
    # the raw parser, the CLI convention (no parameters) and the shorthand
    for text in (f"G1+{SYS}", "G1*9**9**9", "G1**100000", "G1+().__class__"):
        with pytest.raises(ValueError):
            parse_loss(text, 2, 1, params=())
    with pytest.raises(ValueError, match="'__import__' is not allowed"):
        parse_expression(SYS, what="x", symbols={"x": sp.Symbol("x")})


def test_api_values_never_parse_strings(no_system):
    from attndyn.symbolic.codegen import njit_source
    from attndyn.symbolic.hermite import normalise_nonsmooth
    from attndyn.symbolic.potential import gaussian_expectation, guard_for_numba, safe_powers
    from attndyn.symbolic.activations import activation
    for fn in (lambda: gaussian_expectation(SYS, [], sp.zeros(0, 0)), lambda: safe_powers(SYS),
               lambda: guard_for_numba(SYS), lambda: normalise_nonsmooth(SYS),
               lambda: njit_source("f", [], [], [SYS]), lambda: activation("h2")(SYS),
               lambda: as_sympy(SYS)):
        with pytest.raises(TypeError, match="strings are not evaluated"):
            fn()
    for fn, frag in ((lambda: matrix_denoising(SYS), "'__import__' is not allowed"),
                     (lambda: mse_teacher_student("h2", scale=SYS), "plain number"),
                     (lambda: softmax_teacher_student(2, beta=SYS), "plain number"),
                     (lambda: softmax_teacher_student(2, beta=sp.I), "imaginary"),
                     (lambda: two_layer_attention(10 ** 6), "heads must be an int in [1, 8]"),
                     (lambda: activation("x**2+" + SYS), "'__import__' is not allowed")):
        with pytest.raises(ValueError, match=None) as exc:
            fn()
        assert frag in str(exc.value)
    assert parse_float("0.5", "beta") == 0.5
    for bad in ("1/2", "inf", "nan", "1e999", "2*3", SYS):
        with pytest.raises(ValueError, match="beta must be a"):
            parse_float(bad, "beta", 0, 10)


def test_string_matrix_entries_refused(no_system):
    """SymPy's Matrix evaluates string entries: C is checked first."""
    import attndyn
    from attndyn.symbolic.potential import tied_potential
    C = [[SYS, 0], [0, 1]]
    sq = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731
    for build in (lambda: attndyn.TiedModel(2, [0], sq, L=2, C=C),
                  lambda: attndyn.SModel(2, [0], sq, L=2, C=C),
                  lambda: tied_potential(sq, 2, 2, C=C)):
        with pytest.raises(TypeError, match="C must hold numbers, not strings"):
            build()


def test_generated_source_comment_cannot_inject():
    from attndyn.symbolic.codegen import njit_source
    s = sp.Symbol("a\nimport os; os.system('touch PWNED')")
    src = njit_source("f", [s], [], [s ** 2])
    assert not any(line.startswith("import os") for line in src.splitlines())
    compile(src, "<generated>", "exec")  # still valid Python


# -- random text -----------------------------------------------------------------------------
TOKENS = ["G", "[", "]", ",", "0", "1", "2", "3", "(", ")", "+", "-", "*", "/", "**", " ",
          "exp", "log", "sqrt", "relu", "h2", "He3", "max", "x", "a", "b", ".", "9", "e", "j",
          "_", "__import__", "lambda", ":", "'", "pi", "G1", "G2", "1e308", "0.5", "=",
          "mse:", "softmax:", "denoising:ell=", "for", "in", "if", "**16", "**17", "**9**9"]


def _check_parse(text):
    finishes(lambda: _parse_every_way(text), what=repr(text))


def _parse_every_way(text):
    try:
        e = parse_loss(text, 2, 1, params=None)[0]
        assert isinstance(e, sp.Expr)
    except ValueError as exc:
        assert "\n" not in str(exc)
    try:
        loss_from_spec(text, 2, 1)
    except ValueError as exc:
        assert "\n" not in str(exc)
    try:
        parse_expression(text, symbols={"x": sp.Symbol("x")})
    except ValueError:
        pass


@settings(deadline=None, max_examples=300)
@given(st.text(alphabet=string.printable, max_size=120))
def test_random_printable_text_parses_or_raises_valueerror(text):
    _check_parse(text)


@settings(deadline=None, max_examples=300)
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join))
def test_random_token_soup_parses_or_raises_valueerror(text):
    _check_parse(text)


# -- losses built in Python -------------------------------------------------------------------
@pytest.mark.parametrize("bad,frag", [(lambda G: sp.I * G[0, 0, 0] ** 2, "imaginary unit"),
                                      (lambda G: sp.nan * G[0, 0, 0], "nan"),
                                      (lambda G: sp.zoo * G[0, 0, 0], "zoo"),
                                      (lambda G: sp.oo * G[0, 0, 0] ** 2, "oo"),
                                      (lambda G: G[0, 0, 0] ** 2 + sp.Float("1e400"), "too large"),
                                      (lambda G: sp.Integer(3), "does not depend on any G"),
                                      (lambda G: (G[0, 0, 0] - G[0, 0, 2]) ** 2,
                                       r"index G[0,0,2] out of range: K = 2, L = 1")])
def test_bad_python_losses_rejected_at_construction(bad, frag):
    import attndyn
    from attndyn.symbolic.lossgrad import loss_gradient
    from attndyn.symbolic.potential import direct_potential, tied_potential, untied_potential
    for build in (lambda: attndyn.TiedModel(2, [0], bad), lambda: attndyn.SModel(2, [0], bad),
                  lambda: attndyn.UntiedModel(2, [0], bad), lambda: tied_potential(bad, 2),
                  lambda: untied_potential(bad, 2), lambda: direct_potential(bad, 2),
                  lambda: loss_gradient(bad, 2)):
        with pytest.raises(ValueError) as exc:
            build()
        assert frag in str(exc.value)


def test_undeclared_symbol_and_loss_array():
    from attndyn.symbolic.potential import tied_potential
    c = sp.Symbol("c", real=True)
    with pytest.raises(ValueError, match="neither pre-activations G nor declared parameters"):
        tied_potential(lambda G: c * G[0, 0, 0] ** 2, 1)
    with pytest.raises(ValueError, match="neither pre-activations G nor declared parameters"):
        check_loss_expression(c * g_array(1, 1)[0, 0, 0], 1, 1, params=())
    G = LossArray(list(g_array(2, 3)._array), (2, 2, 3))
    assert G[1, 0, 2] == g_array(2, 3)[1, 0, 2] and G[0, 0, -1] == g_array(2, 3)[0, 0, 2]
    with pytest.raises(IndexError, match=r"G\[2,0,0\] out of range: K = 3, L = 2"):
        G[2, 0, 0]
    with pytest.raises(ValueError, match=r"G\[0,0,3\] out of range"):
        G[0, 0, 3]


# -- valid specs still mean what they meant -------------------------------------------------------
def _same(a, b):
    return sp.expand(a - b) == 0 or sp.simplify(a - b) == 0


def test_documented_specs_unchanged():
    from attndyn._cli_common import loss_from_option
    from attndyn.symbolic.activations import hermite_activation
    G = g_array(1, 3)
    g0, g1, g2 = G[0, 0, 0], G[0, 0, 1], G[0, 0, 2]
    h2 = hermite_activation(2)
    b = sp.Symbol("b", real=True)
    cases = [  # (spec, K, L, reference)
        ("(G[0,0,0]+G[0,0,1]-G[0,0,2])**2", 3, 1, (g0 + g1 - g2) ** 2),  # README
        ("(G[0,0,0]-G[0,0,1])**2", 2, 1, (g0 - g1) ** 2),
        ("G1**2 - 2*G1*G2 + G2**2", 2, 1, (g0 - g1) ** 2),               # CLI shorthand
        ("mse:h2,h2", 2, 1, (h2(g0) - h2(g1)) ** 2 / 2),
        ("mse:relu", 2, 1, (sp.Max(0, g0) - sp.Max(0, g1)) ** 2 / 2),
        ("mse:x**2-1,x", 2, 1, (g0 ** 2 - 1 - g1) ** 2 / 2),
        ("b*(relu(G[0,0,0]) - h2(G[0,0,1]))**2", 2, 1, b * (sp.Max(0, g0) - h2(g1)) ** 2),
        ("denoising", 1, 1, -g0),
        ("denoising:ell=(a-1)**2/2", 1, 1, (g0 - 1) ** 2 / 2),
        ("exp(G[0,0,0])*tanh(G[0,0,1])/sqrt(2) + erf(G[0,0,0]) + log(1+G[0,0,1]**2)", 2, 1,
         sp.exp(g0) * sp.tanh(g1) / sp.sqrt(2) + sp.erf(g0) + sp.log(1 + g1 ** 2)),
        # (a fractional power of G1 itself, which can be negative, is refused since issue 23 D8)
        ("sigmoid(G1) + 0.5*abs(G2) + max(G1, G2) + min(G1, 0) + (1 + G1**2)**(1/2) + pi", 2, 1,
         1 / (1 + sp.exp(-g0)) + sp.Float(0.5) * sp.Abs(g1) + sp.Max(g0, g1) + sp.Min(g0, 0)
         + sp.sqrt(1 + g0 ** 2) + sp.pi),
    ]
    for spec, K, L, ref in cases:
        loss, _ = loss_from_spec(spec, K, L)
        got = loss(g_array(L, K))
        assert _same(got, ref), (spec, got, ref)
    # softmax: same expression as the API built directly
    G2 = g_array(2, 2)
    loss, _ = loss_from_spec("softmax:L=2,beta=0.5", 2, 2)
    assert _same(loss(G2), softmax_teacher_student(2, beta=sp.Float(0.5))(G2))
    # CLI presets
    assert _same(loss_from_option("square", 2, 1)(g_array(1, 2)), (g0 - g1) ** 2)
    assert _same(loss_from_option("h2", 2, 1)(g_array(1, 2)), (h2(g0) - h2(g1)) ** 2 / 2)
    assert _same(loss_from_option("G1-G2", 2, 1)(g_array(1, 2)) ** 2, (g0 - g1) ** 2)


def test_limits_are_documented():
    from attndyn._cli_common import LOSS_HELP
    doc = (ROOT / "docs" / "potentials.md").read_text()
    assert "Loss strings" in doc
    for v in (str(MAX_CHARS), str(MAX_EXPONENT)):
        assert v in doc and v in LOSS_HELP


def test_no_eval_of_text_in_the_package():
    """No eval/exec/parse_expr, and no sympify with a namespace, in symbolic/ or attndyn/."""
    for folder in ("symbolic", "attndyn"):
        for path in (ROOT / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
                    assert name not in ("eval", "exec", "parse_expr"), (path, node.lineno)
                    if name == "sympify":
                        assert not any(k.arg == "locals" for k in node.keywords), (path, node.lineno)


@pytest.mark.parametrize("K,L", [(2**64, 1), (256, 1), (2, 65), (255, 64)])
def test_loss_from_spec_bounds_its_sizes_before_building(K, L):
    """Issue 23 D9: loss_from_spec("G1", 2**64, 1) ran on without end."""
    from attndyn.symbolic.losses import loss_from_spec
    with pytest.raises(ValueError, match=r"must be in 1\.\.|pre-activations"):
        loss_from_spec("G1", K, L)
