"""Issue 10, attention items: no crash, no hang, no silent wrong number at the entries of
the attention models, flows and SGD. Each test failed on the code before the fix."""

import contextlib
import signal

import numpy as np
import pytest
from numba import njit

import attndyn
from attndyn.cli import main as cli_main
from attndyn.kernels.rhs import GRAD_SIG
from attndyn.numeric import compare, matrix_flow
from attndyn.numeric.attention.training import gaussian_init, sgd
from attndyn.numeric.core.results import IntegrationError


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def anti(G):  # an anti-loss: the flow blows up in finite time
    return -G[0, 0, 0] ** 4 / 24


@contextlib.contextmanager
def deadline(seconds):
    """Fail instead of hanging (the flows' loops are Python, so SIGALRM interrupts them)."""
    def boom(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def tied_mats(d=8, seed=0, K=2):
    rng = np.random.default_rng(seed)
    return [(lambda w: w @ w.T)(rng.standard_normal((d, d)) * 0.3) for _ in range(K)]


# ---------------------------------------------------------------------------
# entries into numba kernels

def test_hierarchy_rhs_validates_the_state_before_the_kernel():
    h = attndyn.TiedModel(2, [0], square).hierarchy(4)
    n = h.n_moments
    ok = h.rhs(np.full(n, 0.1))
    assert ok.shape == (n,) and np.all(np.isfinite(ok))
    for bad in (np.ones(n - 1), np.ones(10 ** 6), np.ones((n, 1)), np.ones(0)):
        with pytest.raises(ValueError, match=rf"y must have shape \({n},\)"):
            h.rhs(bad)
    with pytest.raises(ValueError, match="y must be finite"):
        h.rhs(np.full(n, np.nan))
    with pytest.raises(TypeError, match="y must be real"):
        h.rhs(np.ones(n) * (1 + 1j))
    with pytest.raises(TypeError, match="y must be"):
        h.rhs(["a"] * n)
    # a strided view is accepted (copied to a contiguous array before the kernel)
    np.testing.assert_array_equal(h.rhs(np.full(2 * n, 0.1)[::2]), ok)


def test_sgd_init_dtypes_and_shapes_checked_before_the_kernel():
    m = attndyn.TiedModel(2, [0], square)
    W = gaussian_init(m, 10, seed=0, scale=0.5)
    kw = dict(eta=0.05, batch=4, t_eval=[0, 0.1], seed=0)
    with pytest.raises(TypeError, match=r"init\[1\] must be real"):
        sgd(m, [W[0], W[1] * (1 + 0j)], **kw)
    with pytest.raises(TypeError, match="init"):
        sgd(m, [W[0], "abc"], **kw)
    with pytest.raises(ValueError, match=r"init\[1\] must be finite"):
        sgd(m, [W[0], W[1] * np.nan], **kw)
    s = attndyn.SModel(2, [0], square)
    S = gaussian_init(s, 6, seed=0)
    with pytest.raises(TypeError, match=r"init\[0\] must be real"):
        sgd(s, [S[0] + 1j, S[1]], **kw)
    u = attndyn.UntiedModel(2, [0], square)
    P = gaussian_init(u, 6, seed=0)
    with pytest.raises(TypeError, match=r"init\[1\] V_k must be real"):
        sgd(u, [P[0], (P[1][0], P[1][1] * 1j)], **kw)


# ---------------------------------------------------------------------------
# flows: failure before the first output, repeated times, blow-up, non-finite Gamma

def test_matrix_flow_failure_before_the_first_output_gives_a_status():
    m = attndyn.TiedModel(1, [0], anti)
    with deadline(120):
        r = matrix_flow(m, [np.eye(5)], [0.5, 1.0], order=2)
    # S = s I, ds/dt = 2 s^4: the singularity at t = 1/6 stops the solver (step size, -1)
    # with s ~ (6 (1/6 - t))^(-1/3) < 1e6, long before the state reaches 1e100
    assert r.status in (-1, -3) and not r.success and "t = " in r.message
    assert r.t.size == 0 and r.y.shape == (len(r.names), 0)
    with deadline(120):
        r = matrix_flow(m, [np.eye(5)], [0.5, 1.0], order=2, blowup=1e3)
    assert r.status == -3 and "blows up" in r.message and r.t.size == 0
    with pytest.raises(IntegrationError):
        matrix_flow(m, [np.eye(5)], [0.5, 1.0], order=2, raise_on_failure=True)


def test_compare_with_no_common_checkpoint_gives_a_status():
    m = attndyn.TiedModel(2, [0], lambda G: -G[0, 0, 0] ** 4 + G[0, 0, 1] ** 2)
    W = gaussian_init(m, 10, seed=0, scale=2.0)
    with deadline(120):
        c = compare(m, W, eta=0.05, batch=8, t_eval=[0.5, 1.0], seed=0)
    assert c.status != 0 and not c.success and c.message
    assert c.t.size == 0


def test_matrix_flow_repeated_output_times():
    m = attndyn.TiedModel(2, [0], square)
    S = tied_mats()
    r = matrix_flow(m, S, [0.0, 0.05, 0.05, 0.1], order=2)
    assert r.success, r.message
    np.testing.assert_array_equal(r.t, [0.0, 0.05, 0.05, 0.1])
    np.testing.assert_array_equal(r.y[:, 1], r.y[:, 2])
    ref = matrix_flow(m, S, [0.0, 0.05, 0.1], order=2)
    np.testing.assert_array_equal(ref.y, r.y[:, [0, 1, 3]])


def test_compare_grid_the_step_cannot_resolve_is_an_error(capsys):
    m = attndyn.TiedModel(2, [0], square)
    with pytest.raises(ValueError, match=r"cannot be resolved.*eta = 0.01, d = 10"):
        compare(m, {"d": 10, "scale": 0.5}, eta=0.01, batch=4, t_eval=np.linspace(0, 0.01, 11))
    assert cli_main(["compare", "--eta", "0.01", "--d", "10", "--batch", "4", "--T", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "eta = 0.01" in err and "d = 10" in err and "t_eval" in err


def test_sgd_step_longer_than_the_horizon_is_an_error():
    m = attndyn.TiedModel(2, [0], square)
    W = gaussian_init(m, 20, seed=0, scale=0.5)
    for raise_on_failure in (False, True):
        with pytest.raises(ValueError, match=r"eta = 100, d = 20.*t_eval"):
            sgd(m, W, eta=100.0, batch=4, t_eval=[0.0, 0.05, 0.1], seed=0,
                raise_on_failure=raise_on_failure)
    # repeated times are not an unresolved grid: they are the same checkpoint twice
    r = sgd(m, W, eta=0.01, batch=4, t_eval=[0.0, 0.1, 0.1], seed=0)
    assert r.success and list(r.diagnostics["steps"]) == [0, 50, 50]


def test_smodel_flows_detect_blowup():
    m = attndyn.SModel(1, [0], anti)
    t = np.linspace(0, 50, 11)
    with deadline(120):
        r = m.matrix_flow([np.eye(5) * 0.5], t)
    assert r.status < 0 and not r.success and r.t.size < 11
    assert np.all(np.isfinite(r.y))
    with pytest.raises(IntegrationError):
        m.matrix_flow([np.eye(5) * 0.5], t, raise_on_failure=True)
    with deadline(120):
        r = m.matrix_flow([np.eye(5) * 0.5], t, blowup=10.0)
    assert r.status == -3 and "exceeded blowup = 10" in r.message


@njit(GRAD_SIG)
def _nan_gradient(x, p, out):
    for i in range(out.size):
        out[i] = np.nan


class NaNPotential:
    """A numeric potential whose Gamma is NaN everywhere (a loss with no expectation)."""

    def gradient_function(self):
        return _nan_gradient

    def parameters(self):
        return np.zeros(0)


def test_non_finite_gamma_stops_the_flow_instead_of_hanging():
    m = attndyn.TiedModel(2, [0], potential=NaNPotential())
    with deadline(60):
        r = matrix_flow(m, tied_mats(), [0.0, 0.1], order=2)
    assert r.status == -3 and "non-finite" in r.message and "Gamma" in r.message
    from attndyn.numeric.attention.odesolve import solve_flow
    with deadline(60):
        sol = solve_flow(lambda t, y: np.full_like(y, np.nan), np.ones(3), np.array([0.0, 1.0]),
                         rtol=1e-8, atol=1e-10)
    assert sol.status == -3 and sol.t.size == 0


def test_check_none_says_convergence_not_checked():
    m = attndyn.TiedModel(2, [0], square)
    h = m.hierarchy(4)
    S = tied_mats(d=10)
    r = h.integrate(h.moments_from_matrices(S), [0.0, 0.1], check=None)
    assert r.success and "convergence not checked" in r.message


# ---------------------------------------------------------------------------
# matrices: PSD for tied models, never complex

def test_tied_matrices_must_be_psd_relative_to_their_norm():
    m = attndyn.TiedModel(2, [0], square)
    S = tied_mats()
    bad = np.diag([1.0, -0.1, 0.5, 0.2, 0.1, 0.3, 0.2, 0.4])
    for call in (lambda X: matrix_flow(m, X, [0, 0.1]),
                 lambda X: m.hierarchy(2).moments_from_matrices(X),
                 lambda X: m.hierarchy(2).integrate(X, [0, 0.1])):
        with pytest.raises(ValueError, match=r"matrices\[1\] must be positive semi-definite"):
            call([S[0], bad])
    # rank-deficient products with rounding below the norm's tolerance are PSD
    v = np.random.default_rng(1).standard_normal((8, 2)) * 1e3
    low = v @ v.T  # rank 2: six eigenvalues are zero up to rounding of order 1e-10
    assert abs(np.linalg.eigvalsh(low)[0]) < 1e-6 * np.linalg.eigvalsh(low)[-1]
    assert m.check_matrices([S[0], low])[1] is not None


def test_complex_matrices_are_rejected_everywhere():
    m = attndyn.TiedModel(2, [0], square)
    S = tied_mats()
    Sc = [S[0], S[1].astype(complex)]  # even with a zero imaginary part
    with pytest.raises(TypeError, match=r"matrices\[1\] must be real"):
        matrix_flow(m, Sc, [0, 0.1])
    h = m.hierarchy(2)
    with pytest.raises(TypeError, match="must be real"):
        h.integrate(Sc, [0, 0.1])
    with pytest.raises(TypeError, match="mu0 must be real"):
        h.integrate(h.moments_from_matrices(S) + 0j, [0, 0.1])
    with pytest.raises(TypeError, match="q must be real"):
        m.gamma(np.eye(2) + 1j)
    s = attndyn.SModel(2, [0], square)
    Ss = gaussian_init(s, 6, seed=0)
    with pytest.raises(TypeError, match=r"matrices\[0\] must be real"):
        s.matrix_flow([Ss[0] * 1j, Ss[1]], [0, 0.1])
    with pytest.raises(TypeError, match=r"init\[0\] must be real"):
        s.integrate([Ss[0] * 1j, Ss[1]], [0, 0.1])
    t, Psi, Om = s.order_parameters(Ss)
    with pytest.raises(TypeError, match="Psi must be real"):
        s.integrate((t, Psi + 0j, Om), [0, 0.1])
    with pytest.raises(TypeError, match="Omega must be real"):
        s.gradients(Psi, Om + 1j)


# ---------------------------------------------------------------------------
# tolerances, blow-up threshold, step cap

@pytest.mark.parametrize("bad", [0.0, -1e-8, float("nan"), float("inf")])
def test_tolerances_must_be_positive_and_finite(bad):
    tied = attndyn.TiedModel(2, [0], square)
    S = tied_mats()
    s = attndyn.SModel(2, [0], square)
    Ss = gaussian_init(s, 6, seed=0)
    with deadline(120):  # a NaN tolerance used to make scipy's step NaN and loop forever
        for name in ("rtol", "atol"):
            with pytest.raises(ValueError, match=name):
                matrix_flow(tied, S, [0, 0.1], **{name: bad})
            with pytest.raises(ValueError, match=name):
                s.matrix_flow(Ss, [0, 0.1], **{name: bad})
            with pytest.raises(ValueError, match=name):
                s.integrate(Ss, [0, 0.1], **{name: bad})
        with pytest.raises(ValueError, match="blowup"):
            matrix_flow(tied, S, [0, 0.1], blowup=bad)


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), -1.0, 0.0])
def test_h_max_only_positive_or_plus_inf(bad):
    h = attndyn.TiedModel(2, [0], square).hierarchy(2)
    S = tied_mats()
    with pytest.raises(ValueError, match="h_max"):
        h.integrate(S, [0, 0.1], h_max=bad, check=None)
    assert h.integrate(S, [0, 0.1], h_max=float("inf"), check=None).success


def test_blowup_must_be_positive():
    s = attndyn.SModel(2, [0], square)
    Ss = gaussian_init(s, 6, seed=0)
    for bad in (-1.0, 0.0, float("nan")):
        with pytest.raises(ValueError, match="blowup"):
            s.matrix_flow(Ss, [0, 0.1], blowup=bad)
        with pytest.raises(ValueError, match="blowup"):
            s.integrate(Ss, [0, 0.1], blowup=bad)
        with pytest.raises(ValueError, match="blowup"):
            attndyn.TiedModel(2, [0], square).hierarchy(2).integrate(tied_mats(), [0, 0.1],
                                                                     blowup=bad)


# ---------------------------------------------------------------------------
# SGD sizes

def test_sgd_batch_memory_is_estimated_before_allocating():
    m = attndyn.TiedModel(2, [0], square)
    W = gaussian_init(m, 20, seed=0, scale=0.5)
    with pytest.raises(ValueError, match=r"batch = 1000000000, d = 20, L = 1"):
        sgd(m, W, eta=0.01, batch=10 ** 9, t_eval=[0, 0.01], seed=0)
    # an explicit limit
    from attndyn.numeric.attention.training import sgd_memory_bytes
    need = sgd_memory_bytes((64, 1, 20, 40, 20), 5, 10, 2)
    assert need == 8 * (64 * 20 + 64 * 40 + 64 * 20 + 20 * 20 + 6 + 20)
    with pytest.raises(ValueError, match="max_memory"):
        sgd(m, W, eta=0.01, batch=64, t_eval=[0, 0.01], seed=0, max_memory=1000)
    with pytest.raises(ValueError, match="max_memory must be"):
        sgd(m, W, eta=0.01, batch=64, t_eval=[0, 0.01], seed=0, max_memory=-1)
    assert sgd(m, W, eta=0.01, batch=64, t_eval=[0, 0.01], seed=0, max_memory=1e9).success
    # a horizon of more steps than the counters hold
    with pytest.raises(ValueError, match="2\\*\\*62"):
        sgd(m, W, eta=1e-300, batch=4, t_eval=[0, 1e3], seed=0)


def test_numeric_potential_refuses_complex_order_parameters():
    import sympy as sp
    from attndyn.numeric.attention.potentials import tied_potential
    pot = tied_potential(lambda G: (sp.tanh(G[0, 0, 0]) - sp.tanh(G[0, 0, 1])) ** 2 / 2, 2,
                         tol=1e-4)
    assert pot.route == "numeric"
    with pytest.raises(TypeError, match="q must be real"):
        pot.gamma_at(np.eye(2) * (1 + 1j))
    with pytest.raises(ValueError, match="shape"):
        pot.gamma_at(np.ones(10 ** 6))
