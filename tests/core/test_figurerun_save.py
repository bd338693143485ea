"""``FigureRun.save`` writes through the project's ``save_figure`` (issue 30, item 8): a
200 dpi PNG and a vector PDF by default, the dpi passed on, and a figure with an
unlabelled axis refused instead of saved."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest

from attndyn.numeric.core.claims import Claim, FigureRun
from attndyn.numeric.core.results import Trajectory

matplotlib.use("Agg")


def _run(labelled: bool = True) -> FigureRun:
    def plotter(run, fig=None):
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(2, 1.5))
        traj = run.curves["flow"]
        ax.plot(traj.t, traj.observable("q_11"))
        if labelled:
            ax.set(xlabel="t (ODE time)", ylabel="q_11")
        return fig

    t = np.linspace(0.0, 1.0, 5)
    traj = Trajectory(t=t, y=np.vstack([1.0 + t]), names=["q_11"], kind="demo")
    return FigureRun("demo", "a demo figure", {"seeds": [0]}, curves={"flow": traj},
                     claims=[Claim("q_11 rises", True, "1 -> 2")], plotter=plotter)


def _png_dpi(path) -> float:
    from PIL import Image
    with Image.open(path) as im:
        return float(im.info["dpi"][0])


def test_default_is_200_dpi_png_and_pdf(tmp_path):
    paths = _run().save(tmp_path)
    assert paths["png"] == str(tmp_path / "demo.png") and paths["pdf"] == str(tmp_path / "demo.pdf")
    assert _png_dpi(paths["png"]) == pytest.approx(200, abs=0.5)
    with open(paths["pdf"], "rb") as f:
        head = f.read()
    assert head.startswith(b"%PDF") and b"CreationDate" not in head  # save_figure's metadata
    assert json.load(open(paths["json"]))["figure"] == "demo"


def test_dpi_and_formats_are_passed_on(tmp_path):
    paths = _run().save(tmp_path, pdf=False, dpi=50)
    assert "pdf" not in paths and _png_dpi(paths["png"]) == pytest.approx(50, abs=0.5)
    assert not (tmp_path / "demo.pdf").exists()
    with pytest.raises(ValueError, match="dpi"):
        _run().save(tmp_path / "again", dpi=5)


def test_unlabelled_axis_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unlabelled"):
        _run(labelled=False).save(tmp_path)
    assert not (tmp_path / "demo.png").exists()
