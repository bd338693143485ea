"""The model protocol (numeric/attention/base.py): the drivers never test a model's kind,
and a new parameterisation runs through sgd, compare and matrix_flow from one module.

The toy parameterisation below lives in this test module only: tied attention with
a fixed scalar factor, ``S_k = c W_k W_k^T``. Its dynamics follows from the tied
model's. With ``W' = sqrt(c) W`` (so ``S_k = W' W'^T``) the update
``W <- W - eta grad_W L - (eta gamma/d) W`` is the tied update of ``W'`` with
``eta' = c eta`` and ``gamma' = gamma / c`` (``grad_W = sqrt(c) grad_W'``). In the
tied time ``t' = 4 eta' n / d = c t`` the tied flow (paper 003, eq. 11 before
projection) gives, in the toy's own time ``t = 4 eta n / d``,

    dS_k/dt = -c sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k.

So for ``gamma = 0`` the toy's flow at ``t`` is the tied flow at ``c t``, and for
``c = 1`` the toy is the tied model, bit for bit in SGD.
"""

import ast
import math
from functools import cached_property
import pathlib

import numpy as np
import pytest

import attndyn
from attndyn.kernels.moments import word_traces
from attndyn.numeric import compare, matrix_flow
from attndyn.numeric.attention.base import (AttentionModel, CapabilityError, NoTheory, SGDRunner,
                                            Theory, TimeScale, check_order_arg)
from attndyn.numeric.attention.odesolve import solve_flow
from attndyn.numeric.attention.training import sgd, gaussian_init
from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.validate import check_t_eval
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

ROOT = pathlib.Path(__file__).resolve().parents[2]


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


# ---------------------------------------------------------------------------
# the toy parameterisation: one class, public building blocks only

class _ScaledRunner(SGDRunner):
    """The tied kernel on ``W' = sqrt(c) W`` with ``eta' = c eta``, ``gamma' = gamma/c``."""

    def __init__(self, model, Ws, order):
        self.c = model.c
        self.inner = model.tied.sgd_runner([math.sqrt(self.c) * W for W in Ws], order)
        self.d, self.names, self.words = self.inner.d, self.inner.names, self.inner.words
        self.macs = self.inner.macs

    def workspace_shape(self, B, L):
        return self.inner.workspace_shape(B, L)

    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        self.inner.step(n, self.c * eta, gamma / self.c, B, lossfn, lp, C, F, ident, state,
                        blowup, losses, info, ws)

    def observables(self):
        return self.inner.observables()  # traces of S_k = W' W'^T = c W W^T

    def params(self):
        return {**self.inner.params(), "c": self.c}


class ScaledTiedModel(AttentionModel):
    """``S_k = c W_k W_k^T`` with a fixed ``c > 0`` (final)."""

    kind = "scaled-tied"
    time_scales = (TimeScale("slow", "t = 4 * eta * n / d", 4.0, 1),)

    def __init__(self, c, K, trainable, loss, L=1, C=None, weight_decay=0.0):
        if not c > 0:
            raise ValueError(f"c must be > 0, got {c!r}")
        self.c = float(c)
        self.tied = attndyn.TiedModel(K, trainable, loss, L=L, C=C, weight_decay=weight_decay)
        t = self.tied
        self.K, self.trainable, self.L, self.C = t.K, t.trainable, t.L, t.C
        self.weight_decay, self.loss, self.params, self.alphabet = (t.weight_decay, t.loss,
                                                                    t.params, t.alphabet)

    def observable_names(self, order=None):
        return self.tied.observable_names(order)

    def check_matrices(self, matrices, name="matrices"):
        return self.tied.check_matrices(matrices, name)

    def check_init(self, init, name="init"):
        return self.tied.check_init(init, name)

    def _draw_init(self, rng, d, widths, scales, symmetric):
        return [rng.standard_normal((d, widths[k])) * (scales[k] / math.sqrt(widths[k]))
                for k in range(self.K)]

    def sgd_runner(self, init, order=None):
        return _ScaledRunner(self, self.check_init(init), check_order_arg(order, 2))

    @cached_property
    def theory(self):
        return ScaledTiedTheory(self)

    def params_dict(self):
        return {**self.tied.params_dict(), "model": "scaled-tied", "c": self.c}


class ScaledTiedTheory(Theory):
    """The matrix flow of ``S_k = c W_k W_k^T`` (its one theory, no corrections)."""

    names = ("flow",)

    def check(self, name, order):
        name = "flow" if name is None else name
        if name != "flow":
            raise ValueError(f"theory for a ScaledTiedModel must be 'flow', got {name!r}")
        return name, (2 if order is None else order)

    def uncorrected(self, init, t, *, name, order, check, words, **kwargs):
        m = self.model
        S = [m.c * W @ W.T for W in m.check_init(init)]
        return self.matrix_flow(S, t, words=words, **kwargs)

    def matrix_flow(self, matrices, t_eval, *, order=4, words=None, rtol=1e-11, atol=1e-13,
                    method="DOP853", blowup=1e100, raise_on_failure=False):
        m = self.model
        mats = m.check_matrices(matrices)
        t_eval = check_t_eval(t_eval)
        K, d, c = m.K, mats[0].shape[0], m.c
        words = canonical_words(order, m.alphabet) if words is None else words
        tr = list(m.trainable)
        gfun, gp = m.tied.gradient_function, m.tied.gradient_parameters
        gout = np.empty(K * K)

        def unpack(y):
            S = list(mats)
            for j, k in enumerate(tr):
                S[k] = y[j * d * d:(j + 1) * d * d].reshape(d, d)
            return S

        def rhs(t, y):
            S = unpack(y)
            q = np.array([[np.einsum("ij,ji->", S[k], S[l]) / d for l in range(K)]
                          for k in range(K)])
            gfun(np.ascontiguousarray(q.ravel()), gp, gout)
            G = gout.reshape(K, K)
            dy = np.empty_like(y)
            for j, k in enumerate(tr):
                acc = -(m.weight_decay / 2.0) * S[k]
                for l in range(K):
                    P = S[l] @ S[k]
                    acc = acc - c * G[k, l] * (P + P.T)
                dy[j * d * d:(j + 1) * d * d] = acc.ravel()
            return dy

        y0 = np.concatenate([mats[k].ravel() for k in tr])
        sol = solve_flow(rhs, y0, t_eval, rtol=rtol, atol=atol, method=method, blowup=blowup,
                         what="scaled tied flow")
        y = np.array([word_traces(unpack(sol.y[:, n]), words) for n in range(sol.t.size)]).T
        res = Trajectory(t=sol.t, y=y.reshape(len(words), sol.t.size),
                         names=[word_label(w, K) for w in words],
                         words=[tuple(w) for w in words], kind="matrix_flow",
                         params=m.params_dict(), status=sol.status, message=sol.message)
        if raise_on_failure and sol.status != 0:
            raise IntegrationError(sol.message)
        return res


# ---------------------------------------------------------------------------
# the toy through the drivers

def _init(d=40, seed=3):
    m = attndyn.TiedModel(2, [0], square)
    return gaussian_init(m, d, seed=seed, scale=0.5)


def test_toy_with_c_1_is_the_tied_model():
    tied = attndyn.TiedModel(2, [0], square, weight_decay=0.4)
    toy = ScaledTiedModel(1.0, 2, [0], square, weight_decay=0.4)
    W = _init()
    kw = dict(eta=0.05, batch=32, t_eval=np.linspace(0, 0.4, 5), seed=7)
    a, b = sgd(tied, W, **kw), sgd(toy, W, **kw)
    assert a.success and b.success and a.names == b.names
    assert np.array_equal(a.y, b.y) and np.array_equal(a.t, b.t)  # same kernel, same numbers
    assert b.params["model"] == "scaled-tied" and b.diagnostics["model"] == "scaled-tied"
    S = [w @ w.T for w in W]
    fa, fb = matrix_flow(tied, S, a.t, order=3), matrix_flow(toy, S, a.t, order=3)
    assert fb.success, fb.message
    np.testing.assert_allclose(fb.y, fa.y, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_toy_flow_is_the_tied_flow_at_rescaled_time(c):
    """gamma = 0: S_toy(t) = S_tied(c t) (the derivation in the module docstring)."""
    tied, toy = attndyn.TiedModel(2, [0], square), ScaledTiedModel(c, 2, [0], square)
    S = [w @ w.T for w in _init(d=20)]
    t = np.linspace(0, 0.3, 4)
    ft, fs = matrix_flow(tied, S, c * t, order=3), matrix_flow(toy, S, t, order=3)
    np.testing.assert_allclose(fs.y, ft.y, rtol=1e-8, atol=1e-10)
    assert np.abs(fs.y[:, -1] - fs.y[:, 0]).max() > 0.02  # it moved


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_toy_sgd_follows_its_own_flow_through_compare(c):
    toy = ScaledTiedModel(c, 2, [0], square, weight_decay=0.3)
    d, B = 60, 128
    cmp = compare(toy, {"d": d, "scale": 0.5, "seed": 1}, eta=0.02 * B / (d * c), batch=B,
                  t_eval=np.linspace(0, 0.6, 4), seed=0)
    assert cmp.success, cmp.message
    assert {"mu_1", "q_11", "q_12"} <= set(cmp.names)
    err = cmp.max_error(["mu_1", "q_11", "q_12"])
    # the tied case at eta*d/B = 0.02 is within 5e-3 (test_sgd); here eta' d / B = 0.02 as well
    assert err < 5e-3, err
    # and the factor matters: the tied flow (c = 1) is far from the toy's SGD
    tied = attndyn.TiedModel(2, [0], square, weight_decay=0.3)
    W = gaussian_init(toy, d, seed=1, scale=0.5)
    ft = matrix_flow(tied, [c * w @ w.T for w in W], cmp.t, order=2)
    off = max(np.abs(ft.moment(w) - cmp.sgd.y[cmp.names.index(n)]).max()
              for w, n in (((0,), "mu_1"), ((0, 0), "q_11"), ((0, 1), "q_12")))
    assert off > 10 * err, (off, err)


def test_capabilities_refuse_through_the_base():
    toy = ScaledTiedModel(2.0, 2, [0], square)
    with pytest.raises(CapabilityError, match="ScaledTiedModel has no moment hierarchy"):
        toy.theory.hierarchy(4)
    with pytest.raises(NotImplementedError):
        toy.theory.hierarchy(4)
    # the base class's defaults, which a theory without the capability inherits
    with pytest.raises(CapabilityError, match="ScaledTiedModel has no matrix flow"):
        Theory.matrix_flow(toy.theory, [np.eye(3)] * 2, [0, 1])
    with pytest.raises(ValueError, match="ScaledTiedModel has no theory"):
        NoTheory(toy).check(None, None)
    # a correction the theory does not list is refused by name, with the choices
    with pytest.raises(ValueError, match="correction must be one of 'none', got 'noise'"):
        matrix_flow(toy, [np.eye(3)] * 2, [0, 1], correction="noise", eta=0.1, batch=1)
    with pytest.raises(TypeError, match="attention model"):
        sgd(object(), [], eta=0.1, batch=1, t_eval=[0])


def test_concrete_models_are_final():
    with pytest.raises(TypeError, match="TiedModel is final"):
        class Sub(attndyn.TiedModel):
            pass
    with pytest.raises(TypeError, match="is final"):
        class Sub2(ScaledTiedModel):
            pass


def test_time_scales_through_the_protocol():
    toy = ScaledTiedModel(2.0, 2, [0], square)
    assert toy.time_step(0.01, 50) == 4 * 0.01 / 50
    u = attndyn.UntiedModel(2, [0], square)
    assert [s.name for s in u.time_scales] == ["slow", "fast"]
    with pytest.raises(ValueError, match="several time scales"):
        sgd(toy, _init(), eta=0.01, batch=4, t_eval=[0, 0.1], time="fast")


# ---------------------------------------------------------------------------
# no driver tests a model's kind

MODEL_CLASSES = {"TiedModel", "SModel", "UntiedModel", "AttentionModel", "TiedHierarchy"}


def _names_in(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr


def _reads_model_kind(node) -> bool:
    """``model.kind`` / ``self.model.kind`` or ``getattr(model, "kind", ...)`` inside ``node``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "kind" \
                and "model" in ast.unparse(sub.value).lower():
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) \
                and sub.func.id == "getattr" and len(sub.args) >= 2 \
                and isinstance(sub.args[1], ast.Constant) and sub.args[1].value == "kind":
            return True
    return False


def kind_checks(path: pathlib.Path) -> list:
    """``isinstance``/``issubclass``/``type(...) is`` tests naming a model class, uses of
    ``_model_kind``, comparisons of ``model.kind`` and tables looked up by it
    (``TABLE[model.kind]``, ``TABLE.get(getattr(model, "kind"))``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    path = path.relative_to(ROOT) if ROOT in path.parents else path
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            if MODEL_CLASSES & set(_names_in(node.args[1])):
                out.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare):
            names = set(_names_in(node))
            text = ast.unparse(node)
            if ("type(" in text and MODEL_CLASSES & names) or (
                    "model.kind" in text or "_model_kind" in text or _reads_model_kind(node)):
                out.append(f"{path}:{node.lineno}: {text}")
        elif isinstance(node, ast.Subscript) and _reads_model_kind(node.slice):
            out.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args and _reads_model_kind(node.args[0]):
            out.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, (ast.Name, ast.Attribute)) and "_model_kind" in set(_names_in(node)):
            out.append(f"{path}:{node.lineno}: _model_kind")
        elif isinstance(node, ast.FunctionDef) and node.name == "_model_kind":
            out.append(f"{path}:{node.lineno}: def _model_kind")
    return out


def test_no_kind_checks_outside_the_protocol_module():
    files = [p for top in ("numeric", "attndyn") for p in (ROOT / top).rglob("*.py")
             if p != ROOT / "numeric" / "attention" / "base.py" and "__pycache__" not in p.parts]
    assert len(files) > 20
    found = [hit for p in files for hit in kind_checks(p)]
    assert not found, "model-kind checks outside numeric/attention/base.py:\n" + "\n".join(found)


def test_the_kind_check_detector_finds_them(tmp_path):
    p = tmp_path / "probe.py"
    p.write_text("def f(model, x):\n"
                 "    if isinstance(model, (TiedModel, int)):\n        return 1\n"
                 "    if type(model) is SModel or model.kind == 'untied':\n        return 2\n"
                 "    return _model_kind(x)\n"
                 "def g(model):\n    return isinstance(model, dict) and model.trainable\n"
                 "def h(model, T):\n    a = T[model.kind]\n"
                 "    b = T.get(getattr(model, 'kind', None))\n"
                 "    return getattr(model, 'kind') != 's', res.kind, {'kind': model.kind}\n")
    lines = {int(h.split(":")[1]) for h in kind_checks(p)}
    assert lines == {2, 4, 6, 10, 11, 12}
