"""float32 path (forward, gradients, training) and hardened loaders."""

import os

import numpy as np
import pytest

from attndyn.numeric.transformer import Sweep, Transformer, build, load_sweep, train
from attndyn.numeric.transformer.data import rms_normalise


def test_float32_forward_gradients_and_training_track_float64():
    m64 = Transformer(2, 4, 8, 32, 1.0, 1.0, 0.3, seed=0)
    m32 = m64.astype("float32")
    assert m32.U[0].dtype == np.float32 and m32.config()["dtype"] == "float32"
    X = rms_normalise(np.random.default_rng(1).standard_normal((6, 4, 8)))
    Y = np.random.default_rng(2).standard_normal((6, 4, 8))
    F32, F64 = m32.forward(X), m64.forward(X)
    assert F32.dtype == np.float32
    assert np.abs(F32 - F64).max() / np.abs(F64).max() < 1e-5
    l32, g32 = m32.loss_and_grad(X, Y)
    l64, g64 = m64.loss_and_grad(X, Y)
    assert g32.dtype == np.float32
    assert abs(l32 - l64) / l64 < 1e-5
    assert np.linalg.norm(g32 - g64) / np.linalg.norm(g64) < 1e-4
    # same weights drawn for both precisions
    np.testing.assert_allclose(Transformer(2, 4, 8, 32, 1.0, 1.0, 0.3, seed=0,
                                           dtype="float32").U[1], m64.U[1], rtol=1e-7)
    s = dict(N=1, L=3, d=4, m=16, n=4, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
             token_norm="unit", n_test=8)
    st, data = build(s, 0)
    r64 = train(st, data, T=0.3, n_eval=3)
    r32 = train(st.astype("float32"), data, T=0.3, n_eval=3, rtol=1e-4, atol=1e-6)
    assert r32.status == 0
    np.testing.assert_allclose(r32.observable("loss"), r64.observable("loss"), rtol=1e-3)
    with pytest.raises(ValueError, match="dtype"):
        Transformer(1, 2, 2, 4, 1.0, 1.0, 1.0, dtype="float16")


def test_transformer_load_round_trip_and_refusals(tmp_path):
    m = Transformer(2, 3, 2, 4, 1.0, 0.5, 0.7, seed=3, dtype="float32")
    p = m.save(tmp_path / "m.npz")
    back = Transformer.load(p)
    assert back.dtype == np.float32 and np.array_equal(back.W[1], m.W[1])
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a valid attndyn transformer file") as exc:
        Transformer.load(bad)
    assert "\n" not in str(exc.value)
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="regular|not a"):
        Transformer.load(fifo)                       # refused without blocking
    np.savez(tmp_path / "wrong.npz", header=np.array('{"format": "attndyn-transformer-1"}'))
    with pytest.raises(ValueError, match="transformer file"):
        Transformer.load(tmp_path / "wrong.npz")


def test_load_sweep_refusals(tmp_path):
    sw = Sweep("m", np.array([1.0, 2.0]), ["a"], np.array([[3.0, 4.0]]), kind="k")
    p = sw.save(tmp_path / "s.npz")
    assert load_sweep(p).y.shape == (1, 2)
    np.savez(tmp_path / "w.npz", x=np.zeros(2), y=np.zeros((3, 2)),
             header=np.array('{"format": "attndyn-sweep-1", "names": ["a"], "x_name": "m"}'))
    with pytest.raises(ValueError, match="not a valid attndyn sweep file.*shape"):
        load_sweep(tmp_path / "w.npz")
    d = tmp_path / "dir.npz"
    d.mkdir()
    with pytest.raises(ValueError, match="sweep file"):
        load_sweep(d)
