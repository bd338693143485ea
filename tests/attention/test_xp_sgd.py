"""The array-API SGD backend (numeric/attention/xp_sgd.py) on NumPy.

- one step of each form (tied factors, untied pairs, direct S) is the batch gradient of the
  loss (finite differences) plus weight decay, for a given batch;
- the loss evaluator agrees with the SymPy loss gradient on the library's losses;
- equal in distribution to the numba backend on golden-like scenarios of all three
  parameterisations: 16 seeds each, z-scores of the seed means at every checkpoint and
  observable (max |z| <= 3.5) and the ratio of the seed spreads (median over checkpoints
  and observables within 0.6-1.6); the same comparison against a wrong loss (x1.25) and a
  quarter batch fails, so the check has power;
- reruns are bit-identical, a seed does not depend on the seeds batched beside it;
- blow-up gives the numba driver's statuses; bad arguments and a missing CUDA stack are
  refused with one line.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import sympy as sp

from golden import SCENARIOS

from attndyn.numeric import SModel, TiedModel, UntiedModel, gaussian_init, sgd_runs
from attndyn.numeric.attention import xp_sgd as X
from attndyn.numeric.core import xp as XP

N_SEEDS = 16
D, BATCH = 24, 24


def _h2(z):
    return (z ** 2 - 1) / sp.sqrt(2)


def _golden(name, d):
    s = next(s for s in SCENARIOS if s.name == name)
    return type(s)(**{**s.__dict__, "d": d})


def _scenarios():
    """(name, model, init, eta, horizon): golden-like, small; every form, L = 2 with a
    token covariance, several students, weight decay, a non-quadratic loss."""
    s = _golden("two-tokens-correlated", D)
    yield ("tied-two-tokens", TiedModel(s.K, s.trainable, s.loss, L=s.L, C=s.C), s.factors(),
           0.02, 0.4)
    s = _golden("three-indices-quartic", D)
    yield ("tied-three-indices", TiedModel(s.K, s.trainable, s.loss,
                                           weight_decay=s.weight_decay), s.factors(), 0.02, 0.2)
    C = [[1.0, 0.3], [0.3, 1.0]]
    m = UntiedModel(2, [0], lambda G: sum((G[i, j, 0] - G[i, j, 1]) ** 2 for i in range(2)
                                          for j in range(2)) / 4, L=2, C=C, weight_decay=0.5)
    yield ("untied-two-tokens", m, gaussian_init(m, D, scale=[0.5, 0.7], seed=3), 0.02, 0.3)
    s = _golden("h2-teacher-student", D)
    m = SModel(2, [0], lambda G: (_h2(G[0, 0, 0]) - _h2(G[0, 0, 1])) ** 2 / 2, weight_decay=0.5)
    yield ("direct-h2", m, s.matrices(), 0.02, 0.3)


SCEN = {name: rest for name, *rest in _scenarios()}


def _stats(A, Bm):
    """z-scores of the seed means and the median ratio of the seed spreads."""
    n_a, n_b = A.shape[0], Bm.shape[0]
    ma, mb = A.mean(0), Bm.mean(0)
    sa, sb = A.std(0, ddof=1), Bm.std(0, ddof=1)
    se = np.sqrt(sa ** 2 / n_a + sb ** 2 / n_b)
    noisy = se > 1e-9 * (1.0 + np.abs(ma))
    # cells without seed spread (the teachers, the start) must agree to rounding
    assert np.allclose(ma[~noisy], mb[~noisy], rtol=1e-9, atol=1e-12)
    z = (mb - ma)[noisy] / se[noisy]
    both = (sa > 0) & (sb > 0) & noisy
    return np.abs(z).max(), float(np.median(sb[both] / sa[both]))


def _runs(model, init, eta, T, backend, seed, batch=BATCH):
    t = np.linspace(0.0, T, 5)
    kw = dict(eta=eta, batch=batch, t_eval=t, progress=False)
    if backend == "numba":
        res = sgd_runs(model, init, n_seeds=N_SEEDS, seed=seed, **kw)
    else:
        res = X.xp_sgd_runs(model, init, n_seeds=N_SEEDS, seed=seed,
                            seeds_per_product=N_SEEDS, **kw)
    assert all(r.status == 0 for r in res)
    return res, np.stack([r.y for r in res])


@pytest.mark.parametrize("name", list(SCEN))
def test_equal_in_distribution_to_numba(name):
    model, init, eta, T = SCEN[name]
    a, A = _runs(model, init, eta, T, "numba", 11)
    b, Bm = _runs(model, init, eta, T, "xp", 12)
    assert a[0].names == b[0].names and a[0].words == b[0].words
    assert np.array_equal(a[0].t, b[0].t)
    assert np.array_equal(a[0].diagnostics["steps"], b[0].diagnostics["steps"])
    zmax, ratio = _stats(A, Bm)
    assert zmax <= 3.5, (name, zmax)
    assert 0.6 <= ratio <= 1.6, (name, ratio)


@pytest.mark.parametrize("name", ["tied-two-tokens", "untied-two-tokens"])
def test_the_distribution_check_has_power(name):
    """A loss 1.25x too large, or a quarter of the batch, fails the same check."""
    model, init, eta, T = SCEN[name]
    _, A = _runs(model, init, eta, T, "numba", 11)
    wrong = type(model)(model.K, model.trainable, lambda G: sp.Rational(5, 4) * model.loss(G),
                        L=model.L, C=model.C, weight_decay=model.weight_decay)
    _, Bm = _runs(wrong, init, eta, T, "xp", 12)
    assert _stats(A[:, :-1], Bm[:, :-1])[0] > 6.0
    _, Bq = _runs(model, init, eta, T, "xp", 12, batch=BATCH // 4)
    assert _stats(A[:, :-1], Bq[:, :-1])[1] > 1.6


def test_reruns_identical_and_independent_of_batching():
    model, init, eta, T = SCEN["untied-two-tokens"]
    t = np.linspace(0.0, T, 3)
    kw = dict(eta=eta, batch=BATCH, t_eval=t, progress=False)
    one = X.xp_sgd_runs(model, init, n_seeds=3, seed=5, seeds_per_product=1, **kw)
    again = X.xp_sgd_runs(model, init, n_seeds=3, seed=5, seeds_per_product=1, **kw)
    batched = X.xp_sgd_runs(model, init, n_seeds=3, seed=5, seeds_per_product=3, **kw)
    for r1, r2, r3 in zip(one, again, batched):
        assert np.array_equal(r1.y, r2.y)
        np.testing.assert_allclose(r3.y, r1.y, rtol=1e-10, atol=1e-13)
    single = X.xp_sgd(model, init, seed=one[1].seed, **kw)  # the seed record reruns it
    assert np.array_equal(single.y, one[1].y)
    assert one[0].params["backend"] == "array-api" and one[0].params["dtype"] == "float64"


def test_untied_teacher_as_S_equals_its_factors():
    """One d x d product with S_2 = U_2 V_2^T precomputed, or two with U_2, V_2: the same
    trajectory up to rounding (same random stream)."""
    model, init, eta, T = SCEN["untied-two-tokens"]
    kw = dict(eta=eta, batch=BATCH, t_eval=np.linspace(0.0, T, 3), seed=2, progress=False)
    s = X.xp_sgd(model, init, teacher="S", **kw)
    f = X.xp_sgd(model, init, teacher="factors", **kw)
    assert s.diagnostics["teacher"] == "S" and f.diagnostics["teacher"] == "factors"
    np.testing.assert_allclose(s.y, f.y, rtol=1e-9, atol=1e-12)
    assert X.xp_sgd(model, init, **kw).diagnostics["teacher"] == "S"  # auto at d_k = d


def test_float32_runs_close_to_float64():
    model, init, eta, T = SCEN["tied-three-indices"]
    kw = dict(eta=eta, batch=BATCH, t_eval=np.linspace(0.0, T, 3), seed=4, progress=False)
    r64 = X.xp_sgd(model, init, **kw)
    r32 = X.xp_sgd(model, init, dtype="float32", **kw)
    assert r32.status == 0 and r32.params["dtype"] == "float32"
    # same random stream drawn in single precision: a different path, near in distribution;
    # the float32 rounding itself is ~1e-7 relative per step
    assert np.max(np.abs(r32.y - r64.y)) < 0.05


# ---------------------------------------------------------------------------
# one step is the batch gradient

def _G(form, weights, x, C, L, K, d):
    """G_ijk of one sample x (L, d) from the definitions of paper 003."""
    G = np.zeros((L, L, K))
    for k in range(K):
        for i in range(L):
            for j in range(L):
                if form == "factors":
                    S = weights[k] @ weights[k].T
                    G[i, j, k] = (x[i] @ S @ x[j] - C[i][j] * np.trace(S)) / np.sqrt(d)
                elif form == "pairs":
                    U, V = weights[k]
                    G[i, j, k] = x[i] @ U @ V.T @ x[j] / np.sqrt(d)
                else:
                    S = weights[k]
                    G[i, j, k] = (x[i] @ S @ x[j] - C[i][j] * np.trace(S)) / np.sqrt(d)
    return G


def _batch_loss(step, form, weights, Xs, C, L, K, d):
    ev = step.lossgrad
    tot = 0.0
    for x in Xs:
        G = _G(form, weights, x, C, L, K, d).ravel()
        tot += float(ev.evaluate(np, [np.array([[g]]) for g in G])[0][0, 0])
    return tot / len(Xs)


@pytest.mark.parametrize("form", ["factors", "pairs", "matrices"])
def test_one_step_is_the_batch_gradient(form):
    d, B, L, K = 5, 3, 2, 2
    C = [[1.0, 0.4], [0.4, 1.0]]
    gamma, eta = 0.7, 1e-3

    def loss(G):
        return (G[0, 1, 0] - G[1, 1, 1]) ** 2 / 2 + sp.tanh(G[0, 0, 0]) * G[1, 0, 1] \
            + G[1, 1, 0] ** 3 / 5

    cls = {"factors": TiedModel, "pairs": UntiedModel, "matrices": SModel}[form]
    model = cls(K, [0], loss, L=L, C=C, weight_decay=gamma)
    init = gaussian_init(model, d, scale=0.8, seed=7)
    weights = model.check_init(init)
    step = X._STEPS[form](model, weights, np, np.float64, 1, np.array(C), "auto")
    rng = np.random.default_rng(3)
    Fm = np.linalg.cholesky(np.array(C))
    Xs = np.einsum("im,smc->sic", Fm, rng.standard_normal((B, L, d)))
    step.step(Xs.reshape(1, B * L, d), eta, gamma, np.inf)
    new = step.host(0)

    def flat(w):
        return np.concatenate([w[0].ravel(), w[1].ravel()]) if form == "pairs" else w.ravel()

    def unflat(v):
        if form == "pairs":
            n = d * d
            return (v[:n].reshape(d, d), v[n:].reshape(d, d))
        return v.reshape(d, d)

    w0 = flat(weights[0])
    grad = np.zeros_like(w0)
    h = 1e-6
    for p in range(w0.size):
        e = np.zeros_like(w0)
        e[p] = h
        wp = [unflat(w0 + e)] + list(weights[1:])
        wm = [unflat(w0 - e)] + list(weights[1:])
        grad[p] = (_batch_loss(step, form, wp, Xs, C, L, K, d)
                   - _batch_loss(step, form, wm, Xs, C, L, K, d)) / (2 * h)
    expect = w0 - eta * grad - eta * gamma / d * w0
    np.testing.assert_allclose(flat(new[0]), expect, rtol=1e-7, atol=1e-10)
    for k in range(1, K):  # the teacher does not move
        np.testing.assert_array_equal(flat(new[k]), flat(weights[k]))


# ---------------------------------------------------------------------------
# the loss evaluator

@pytest.mark.parametrize("spec,K,L", [("mse:relu,relu", 2, 1), ("mse:gelu,erf", 2, 1),
                                      ("mse:abs,tanh", 2, 1), ("mse:sigmoid,softplus", 2, 1),
                                      ("softmax", 2, 2), ("mse:h3,h3", 2, 1),
                                      ("max(G1,G2)**2+min(G1,0)+sqrt(1+G1**2)+log(1+G2**2)",
                                       2, 1)])
def test_loss_evaluator_matches_sympy(spec, K, L):
    from attndyn.symbolic.losses import loss_from_spec
    from attndyn.symbolic.lossgrad import loss_gradient
    loss, ps = loss_from_spec(spec, K, L)
    lg = loss_gradient(loss, K, L, params=ps)
    ev = XP.ExpressionEvaluator([lg.expr] + list(lg.grad), lg.symbols)
    rng = np.random.default_rng(0)
    Gs = rng.standard_normal((6, L * L * K))
    Gs[0, 0] = 0.0  # a kink of relu/abs at 0: Heaviside(0) = 1/2, sign(0) = 0
    out = ev.evaluate(np, [Gs[:, i] for i in range(Gs.shape[1])])
    for s in range(Gs.shape[0]):
        val, grad = lg.numeric(Gs[s].reshape(L, L, K))
        got = [float(np.broadcast_to(o, (Gs.shape[0],))[s]) for o in out]
        np.testing.assert_allclose(got[0], val, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[1:], grad.ravel(), rtol=1e-10, atol=1e-12)


def test_loss_evaluator_refuses_what_it_cannot_evaluate():
    x = sp.Symbol("x")
    with pytest.raises(TypeError, match="cannot evaluate besselj"):
        XP.ExpressionEvaluator([sp.besselj(0, x)], [x])
    with pytest.raises(ValueError, match="undeclared symbols"):
        XP.ExpressionEvaluator([x + sp.Symbol("y")], [x])


# ---------------------------------------------------------------------------
# failures, arguments, devices

@pytest.mark.parametrize("cls,loss,blowup,status", [
    (UntiedModel, lambda G: -G[0, 0, 0], 5.0, -4),             # weights grow without bound
    (SModel, lambda G: sp.exp(G[0, 0, 0] ** 2), 1e300, -3),     # the loss overflows first
])
def test_blowup_statuses_as_numba(cls, loss, blowup, status):
    from attndyn.numeric import sgd
    model = cls(1, [0], loss)
    init = gaussian_init(model, 24, scale=0.5, seed=0)
    kw = dict(eta=0.2, batch=4, t_eval=np.linspace(0.0, 4.0, 9), seed=0, progress=False,
              blowup=blowup)
    ref = sgd(model, init, **kw)
    r = X.xp_sgd(model, init, **kw)
    assert ref.status == r.status == status
    assert r.message.split(" at step")[0] == ref.message.split(" at step")[0]
    assert np.all(np.isfinite(r.y)) and r.t.size < 9
    assert np.all(r.diagnostics["steps"] < r.diagnostics["failed_step"])
    with pytest.raises(X.IntegrationError, match="smaller learning rate"):
        X.xp_sgd(model, init, raise_on_failure=True, **kw)


@pytest.mark.parametrize("kw,err,match", [
    ({"eta": -1.0}, ValueError, "eta"), ({"batch": 0}, ValueError, "batch"),
    ({"dtype": "float16"}, ValueError, "dtype"), ({"device": "tpu"}, ValueError, "device"),
    ({"teacher": "x"}, ValueError, "teacher"), ({"max_memory": 1000}, ValueError, "max_memory"),
    ({"blowup": 0}, ValueError, "blowup"),
])
def test_bad_arguments_refused_in_one_line(kw, err, match):
    model, init, eta, T = SCEN["tied-two-tokens"]
    args = dict(eta=eta, batch=BATCH, t_eval=[0.0, T], seed=0, progress=False)
    args.update(kw)
    with pytest.raises(err, match=match) as info:
        X.xp_sgd(model, init, **args)
    assert "\n" not in str(info.value)


def test_sgd_dispatches_to_the_array_api_backend():
    from attndyn.numeric import sgd
    model, init, eta, T = SCEN["direct-h2"]
    kw = dict(eta=eta, batch=BATCH, t_eval=[0.0, T], seed=3, progress=False)
    a = sgd(model, init, backend="array-api", **kw)
    b = X.xp_sgd(model, init, **kw)
    assert np.array_equal(a.y, b.y) and a.params["backend"] == "array-api"
    assert sgd(model, init, backend="array-api", dtype="float32", **kw).params["dtype"] == \
        "float32"
    for bad, match in [({"backend": "jax"}, "backend must be"),
                       ({"device": "cuda"}, "needs backend='array-api'"),
                       ({"dtype": "float32"}, "needs backend='array-api'")]:
        with pytest.raises(ValueError, match=match):
            sgd(model, init, **bad, **kw)


def test_a_model_without_an_array_api_step_is_refused():
    model, init, eta, T = SCEN["tied-two-tokens"]
    fake = types.SimpleNamespace(sgd_form="other")
    with pytest.raises(ValueError, match="no step for SimpleNamespace"):
        X._step_class(fake)


def test_numpy_alone_is_the_cpu_namespace_without_array_api_compat(monkeypatch):
    """The default install has no array-api-compat: NumPy >= 2 itself runs the steps, with
    the same numbers."""
    model, init, eta, T = SCEN["tied-two-tokens"]
    kw = dict(eta=eta, batch=BATCH, t_eval=[0.0, T / 4], seed=1, progress=False)
    ref = X.xp_sgd(model, init, **kw)
    monkeypatch.setitem(sys.modules, "array_api_compat.numpy", None)
    assert XP.namespace("cpu") is np
    assert np.array_equal(X.xp_sgd(model, init, **kw).y, ref.y)


def test_cuda_refused_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    with pytest.raises(XP.DeviceUnavailableError, match="CuPy, which is not installed") as info:
        XP.namespace("cuda")
    assert "\n" not in str(info.value) and "attndyn[gpu]" in str(info.value)
    model, init, eta, T = SCEN["direct-h2"]
    with pytest.raises(XP.DeviceUnavailableError, match="CuPy"):
        X.xp_sgd(model, init, eta=eta, batch=BATCH, t_eval=[0.0, T], device="cuda:0")


def test_cuda_refused_without_a_device(monkeypatch):
    class _Err(Exception):
        pass

    def no_device():
        raise _Err("cudaErrorNoDevice: no CUDA-capable device is detected")
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=no_device)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    with pytest.raises(XP.DeviceUnavailableError, match="no CUDA device") as info:
        XP.namespace("cuda")
    assert "\n" not in str(info.value)


def test_real_cuda_state_is_reported_in_one_line():
    """On this machine: either a working CuPy namespace or one line naming what is missing."""
    try:
        xp = XP.namespace("cuda")
    except XP.DeviceUnavailableError as exc:
        assert "\n" not in str(exc) and ("CuPy" in str(exc) or "CUDA" in str(exc)
                                         or "array-api-compat" in str(exc))
    else:
        assert hasattr(xp, "matmul")
