"""Notebook display (``_repr_html_``) of the models, their theories, the potentials and
the Transformer, through ``numeric/core/display.html_summary``."""

import html as _html

import numpy as np

from attndyn.numeric.attention.direct.model import SModel
from attndyn.numeric.attention.potentials import CompiledExact, tied_potential
from attndyn.numeric.attention.potentials.surrogate import SurrogateRoute, build_surrogate
from attndyn.numeric.attention.tied.model import TiedModel
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.numeric.transformer.model import Transformer
from attndyn.symbolic.losses import mse_teacher_student


def _cells(html):
    html = _html.unescape(html)
    return html.replace("<tr>", "\n").replace("</td><td>", " = ")


def test_models_show_their_arguments():
    loss = mse_teacher_student("erf")
    for cls in (TiedModel, UntiedModel, SModel):
        m = cls(2, [0], loss, weight_decay=0.25)
        out = _cells(m._repr_html_())
        assert f"<b>{cls.__name__}</b>" in out
        for row in ("<td>K = 2", "<td>trainable = [0]", "<td>L = 1", "<td>weight_decay = 0.25",
                    "<td>corrections = ['none', 'noise'"):
            assert row in out, (cls.__name__, row)
        th = m.theory._repr_html_()
        assert "methods" in th and "corrections" in th and "noise" in th


def test_tied_model_route_without_forcing_the_derivation(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_CACHE_DIR", str(tmp_path))
    loss = mse_teacher_student("erf")
    TiedModel(2, [0], loss)  # derives and caches
    m = TiedModel(2, [0], loss)  # from the cache: the SymPy potential is not derived
    assert m._potential is None
    out = _cells(m._repr_html_())
    assert f"<td>potential route = {m.potential_route}" in out and m.potential_route
    assert m._potential is None  # still not derived
    assert "C = identity" in out


def test_potentials_show_route_tolerance_and_worst_error():
    num = tied_potential(mse_teacher_student("tanh"), 2, tol=1e-5)
    out = _cells(num._repr_html_())
    assert "<td>route = numeric" in out and "rtol" in out
    assert "worst estimated error so far = 0" in out
    num.gamma_with_error(np.array([[1.0, 0.2], [0.2, 0.5]]))
    assert "worst estimated error so far = 0<" not in _cells(num._repr_html_())
    route = SurrogateRoute(num)
    out = _cells(route._repr_html_())
    assert "<td>route = surrogate" in out and "box = none yet" in out
    exact = tied_potential(mse_teacher_student("erf"), 2)
    sur = build_surrogate(exact, (np.array([0.5, 0.5, -0.2]), np.array([0.8, 0.8, 0.2])),
                          rtol=1e-6, atol=1e-9, cache=False)
    out = _cells(sur._repr_html_())
    assert "<td>route = surrogate" in out and "box = " in out and "none yet" not in out
    ce = CompiledExact(exact)
    assert "<td>route = " + exact.route in _cells(ce._repr_html_())


def test_transformer_shows_its_configuration():
    tr = Transformer(N=2, L=3, d=4, m=5, eps=0.5, omega=1.0, kappa=0.25, seed=7)
    out = _cells(tr._repr_html_())
    for row in ("<td>N = 2", "<td>L = 3", "<td>d = 4", "<td>m = 5", "<td>seed = 7",
                "<td>eps = 0.5", "<td>omega = 1", "<td>kappa = 0.25",
                f"<td>parameters = {tr.n_params}"):
        assert row in out, row
    assert tr.n_params == 2 * (5 * 4 + 4 * 4)
