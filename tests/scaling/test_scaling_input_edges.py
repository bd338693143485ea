"""Bad input at the scaling plots and bounds, found in an audit: every refusal is a
ValueError or TypeError that names the argument, never a numpy reduction or format error
from inside the plot, and ``None`` for a constant is called missing, not NaN."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attndyn.numeric.scaling import bounds as sc  # noqa: E402
from attndyn.numeric.scaling import plots  # noqa: E402

C = np.logspace(2, 12, 5)
KW = dict(alpha=1.0, prefactor=1.0, loss0=1.0, c_stat=1.0)


@pytest.fixture(autouse=True)
def _close():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


@pytest.mark.parametrize("call, exc, match", [
    (lambda: plots.plot_phase_diagram([], [0.5], 1, 1), ValueError, "C"),
    (lambda: plots.plot_phase_diagram(C, [], 1, 1), ValueError, "xis"),
    (lambda: plots.plot_phase_diagram([1.0, np.inf], [1.0], 1, 1), ValueError, "C"),
    (lambda: plots.plot_two_stage(C, [0.5], np.array([10.0]), 1, 1, **KW), TypeError, "N"),
    (lambda: plots.plot_two_stage(C, [0.5], "10", 1, 1, **KW), TypeError, "N"),
    (lambda: plots.plot_model_law(C, np.array([100.0]), 1.0, [0.1]), TypeError, "N"),
    (lambda: plots.plot_single_variable_laws(C, [], C, 1.0, c_stat=1.0), ValueError, "N"),
    (lambda: plots.plot_single_variable_laws(C, C, C, "1", c_stat=1.0), TypeError, "xi"),
])
def test_plot_refusals_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=rf"\b{match}\b"):
        call()


def test_plots_still_draw_with_ax_none():
    assert plots.plot_phase_diagram(C, [0.5, 1.0], 1, 1).get_xscale() == "log"
    ax = plots.plot_two_stage(C, [0.5], np.float64(10.0), 1, 1, **KW)
    assert ax.get_xscale() == "log"
    assert len(plots.plot_single_variable_laws(np.linspace(0, 5, 4), C, C, 1.0,
                                               c_stat=1.0)) == 3


@pytest.mark.parametrize("name", ["alpha", "prefactor", "loss0", "c_stat"])
def test_none_constant_is_missing_not_nan(name):
    kw = dict(KW, **{name: None})
    with pytest.raises(ValueError, match=rf"{name} is required") as info:
        sc.two_stage_bound(1e6, 10.0, 1.0, 1, 1, **kw)
    assert "nan" not in str(info.value)


def test_none_input_is_missing_not_nan():
    with pytest.raises(ValueError, match=r"N is required") as info:
        sc.data_law(None, 1.0, c_stat=1.0)
    assert "nan" not in str(info.value)
