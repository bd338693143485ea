"""The shared figure style (numeric/core/plots.py) and the notebook HTML layout
(numeric/core/display.py): 200 dpi PNG plus PDF, every axis labelled, escaped HTML; their
docstring examples run."""

from __future__ import annotations

import doctest
import struct

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from attndyn.numeric.core import display, plots  # noqa: E402
from attndyn.numeric.core.results import Trajectory  # noqa: E402


def _png_dpi(path) -> float:
    """Dots per inch from the PNG's pHYs chunk (pixels per metre)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos = 8
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        if kind == b"pHYs":
            ppm_x, ppm_y, unit = struct.unpack(">IIB", data[pos + 8:pos + 17])
            assert unit == 1 and ppm_x == ppm_y
            return ppm_x * 0.0254
        pos += 12 + n
    raise AssertionError("no pHYs chunk")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_docstring_examples_run():
    for mod in (plots, display):
        res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert res.attempted >= 5 and res.failed == 0, (mod.__name__, res)


def test_save_figure_png_200_dpi_and_pdf(tmp_path):
    fig, ax = plots.new_axes()
    ax.plot([0, 1], [0, 1])
    ax.set(xlabel="t (ODE time)", ylabel="q_11")
    out = plots.save_figure(fig, tmp_path / "sub" / "fig.png")
    assert set(out) == {"png", "pdf"}
    assert out["png"].endswith("fig.png") and out["pdf"].endswith("fig.pdf")
    assert round(_png_dpi(out["png"])) == plots.DPI == 200
    pdf = open(out["pdf"], "rb").read()
    assert pdf.startswith(b"%PDF") and b"/Subtype /Image" not in pdf  # lines, not a raster
    # same figure, same PDF bytes (no creation date)
    again = plots.save_figure(fig, tmp_path / "again", formats=("pdf",))
    assert open(again["pdf"], "rb").read() == pdf


def test_unlabelled_axis_refused(tmp_path):
    fig, axes = plots.new_axes(1, 2)
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("t")
    axes[0].set_ylabel("q_11")
    axes[1].set_title("right")
    assert plots.unlabelled_axes(fig) == ["axes 1 (right): y"]
    with pytest.raises(ValueError, match=r"unlabelled: axes 1 \(right\): y"):
        plots.save_figure(fig, tmp_path / "x")
    assert not list(tmp_path.iterdir())
    plots.save_figure(fig, tmp_path / "x", check=False)  # allowed when asked for


def test_shared_axes_and_colorbars_count_as_labelled():
    fig, axes = plots.new_axes(2, 1, sharex=True)
    for ax, name in zip(axes, ("q_11", "q_12")):
        im = ax.imshow(np.eye(3))
        ax.set_ylabel(name)
    axes[1].set_xlabel("t")  # the top panel shares it
    fig.colorbar(im, ax=axes)
    assert plots.unlabelled_axes(fig) == []


@pytest.mark.parametrize("kwargs, match", [
    ({"formats": ("png", "jpg")}, "formats"),
    ({"formats": ()}, "formats"),
    ({"dpi": 0}, "dpi"),
    ({"dpi": 2.5}, "dpi"),
    ({"dpi": True}, "dpi"),
])
def test_save_figure_bad_arguments(tmp_path, kwargs, match):
    fig, ax = plots.new_axes()
    ax.set(xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match=match):
        plots.save_figure(fig, tmp_path / "f", **kwargs)


def test_save_figure_bad_path_type():
    fig, ax = plots.new_axes()
    ax.set(xlabel="x", ylabel="y")
    with pytest.raises(TypeError, match="path"):
        plots.save_figure(fig, 3)


def test_style_rejects_unknown_key_and_restores():
    before = matplotlib.rcParams["savefig.dpi"]
    with pytest.raises(ValueError, match="unknown"):
        with plots.style(**{"no.such.key": 1}):
            pass
    with plots.style():
        assert matplotlib.rcParams["savefig.dpi"] == 200
    assert matplotlib.rcParams["savefig.dpi"] == before


def test_plot_trajectory_labels_every_axis():
    t = np.linspace(0, 1, 6)
    tr = Trajectory(t=t, y=np.vstack([t, t ** 2]), names=["q_11", "q_12"])
    ax = plots.plot_trajectory(tr)
    assert ax.get_xlabel() and ax.get_ylabel() == "value"
    assert plots.plot_trajectory(tr, names=["q_12"]).get_ylabel() == "q_12"
    with pytest.raises(ValueError, match="unknown observables"):
        plots.plot_trajectory(tr, names=["q_99"])


def test_plot_comparison_labels_every_axis():
    t = np.linspace(0, 1, 4)
    theory = Trajectory(t=t, y=np.vstack([t]), names=["q_11"])
    sgd = Trajectory(t=t, y=np.vstack([t + 0.01]), names=["q_11"])

    class Cmp:  # what plot_comparison reads of a Comparison
        names = ["q_11"]
        spread = {"q_11": np.full(4, 0.01)}
        params = {"model": "tied", "d": 40, "batch": 16, "eta": 0.002, "theory": "flow"}

    cmp = Cmp()
    cmp.t, cmp.theory, cmp.sgd = t, theory, sgd
    ax = plots.plot_comparison(cmp)
    assert plots.unlabelled_axes(ax.figure) == []
    assert ax.get_ylabel() == "q_11" and "eta=0.002" in ax.get_title()


def test_html_summary_escapes_and_cuts():
    html = display.html_summary("<Model>", {f"p{i}": "<b>" for i in range(25)},
                                subtitle="a & b", table=[("q_11", 1.0)])
    assert "<Model>" not in html and "&lt;Model&gt;" in html and "a &amp; b" in html
    assert html.count("<tr>") == display.MAX_ROWS + 1 + 2  # two header rows, one table row
    assert "... 5 more parameters" in html
    with pytest.raises(ValueError, match="title"):
        display.html_summary("", {})
    with pytest.raises(TypeError, match="fields"):
        display.html_summary("x", [("a", 1)])


def test_core_results_display_as_html():
    from attndyn.numeric.core.checks import CheckResult
    from attndyn.numeric.core.claims import Claim, FigureRun

    run = FigureRun("fig9", "a <test> figure", {"d": 40, "seeds": [0, 1]},
                    claims=[Claim("q_11 rises", True, "0.1 -> 0.2"),
                            Claim("q_12 falls", False, "0.3 -> 0.4")])
    html = run._repr_html_()
    assert "FigureRun fig9" in html and "a &lt;test&gt; figure" in html
    assert "<td>claims held</td><td>1 of 2</td>" in html and "<td>NOT HELD</td>" in html
    res = CheckResult("cor1", "Corollary 1", "held", 3, 1e-9, "distance", bound=1e-6)
    html = res._repr_html_()
    assert "Check cor1" in html and "<td>worst</td><td>1e-09</td>" in html
