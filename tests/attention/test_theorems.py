"""Paper 003's theorems as checks (issue 18): the container, `attndyn verify`, Corollary 1's
feasible sets and constrained minimum, Corollary 2's constants and bound, Theorem 1's
finite-d bias, and the assumption diagnostics (each with a case where it holds and one
where it fails). The checks run here at the small budget; the default and slow budgets
are marked slow."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attndyn
from attndyn.cli import main
from attndyn.numeric.attention.direct.model import SModel
from attndyn.numeric.attention import assumptions as A
from attndyn.numeric.attention.direct import theory as DT
from attndyn.numeric.attention.tied import assumptions as TA
from attndyn.numeric.attention.untied import assumptions as UA
from attndyn.numeric.attention.theorems import cor1_landscape as L
from attndyn.numeric.attention.theorems import cor2_truncation as T
from attndyn.numeric.attention.tied import bounds as B
from attndyn.numeric.attention.theorems.thm1 import check_thm1
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.numeric.core.checks import CheckResult, run_checks
from attndyn.symbolic.losses import mse_teacher_student


def _square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def _tied(loss="linear", gamma=0.0):
    return attndyn.TiedModel(2, [0], _square if loss == "square" else mse_teacher_student(loss),
                             weight_decay=gamma)


# -- the container ------------------------------------------------------------------------

def test_check_result_validation():
    with pytest.raises(ValueError, match="verdict"):
        CheckResult("x", "ref", "maybe", 1, 0.0, "m")
    with pytest.raises(ValueError, match="finite measured"):
        CheckResult("x", "ref", "held", 1, float("nan"), "m")
    with pytest.raises(ValueError, match="premise"):
        CheckResult("x", "ref", "not applicable", 0, float("nan"), "m")
    r = CheckResult("x", "ref", "held", 1, 1e-3, "m", data={"a": np.float64(1.0), "b": [np.nan]})
    json.dumps(r.as_dict())  # numpy numbers and NaN inside data are JSON-safe


def test_run_checks_refuses_unknown_keys_and_options():
    with pytest.raises(ValueError, match="unknown check"):
        run_checks(["nope"])
    with pytest.raises(TypeError, match="takes no option"):
        run_checks(["thm1"], options={"thm1": {"d": 3}})
    with pytest.raises(ValueError, match="budget"):
        run_checks(["thm1"], budget="huge")


# -- the CLI --------------------------------------------------------------------------------

def test_verify_cli_list_json_and_bad_input(capsys):
    assert main(["verify", "--list"]) == 0
    out = capsys.readouterr().out
    for key in ("trunc", "thm1", "cor1", "cor2", "cor2_gamma0"):
        assert key in out
    assert main(["verify", "--only", "thm1,trunc", "--budget", "small", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and [c["check"] for c in rep["result"]["checks"]] == ["trunc", "thm1"]
    assert all(c["verdict"] == "held" and c["worst"] is not None for c in rep["result"]["checks"])
    for argv in (["--only", "bogus"], ["--only", "thm1", "--d", "30"],
                 ["--time-budget", "-1"], ["--only", ","]):
        assert main(["verify"] + argv) == 2
        assert capsys.readouterr().err.startswith("attndyn verify: error: ")


def test_verify_time_budget_reports_not_run(capsys):
    assert main(["verify", "--only", "trunc,thm1", "--budget", "small",
                 "--time-budget", "1e-9"]) == 0
    out = capsys.readouterr().out
    assert "not run: the time budget" in out and "0 held, 0 not held, 2 not applicable" in out


# -- Corollary 1 -------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(q22=st.floats(0.05, 3.0), c=st.floats(0.05, 4.0))
def test_tied_constrained_minimum_closed_form(q22, c):
    """loss (G1 - G2)^2 + c G1^2: Phi = 2(1+c) q11 - 4 q12 + 2 q22 over 0 <= q12 <= sqrt(q11
    q22) has its minimum 2 c q22/(1+c) at sqrt(q11) = sqrt(q22)/(1+c), q12 on the edge."""
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 + c * G[0, 0, 0] ** 2)
    r = L.minimise(m, {"q_22": q22}, starts=4, seed=0)
    assert r.success
    assert r.phi == pytest.approx(2 * c * q22 / (1 + c), rel=1e-6, abs=1e-9)
    assert r.point["q_11"] == pytest.approx(q22 / (1 + c) ** 2, rel=1e-4, abs=1e-8)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), d=st.integers(5, 30))
def test_feasible_sets_contain_realised_order_parameters(seed, d):
    """Order parameters of random matrices lie in Q (tied PSD, direct-S and untied general);
    the random starts of the minimiser do too."""
    rng = np.random.default_rng(seed)
    W1, W2 = rng.standard_normal((2, d, d)) / math.sqrt(d)
    S1, S2 = W1 @ W1.T, W2 @ W2.T
    tied = _tied("h2")
    fs = L.feasible_set(tied, {"q_22": np.sum(S2 * S2) / d})
    v = fs.values(np.array([np.sum(S1 * S1) / d, np.sum(S1 * S2) / d]))
    assert fs.violation(v) <= 1e-12 and np.all(fs.constraints(v) >= -1e-12)
    for _ in range(3):
        assert fs.violation(fs.values(L._draw_start(fs, rng))) <= 1e-12
    s = SModel(2, [0], mse_teacher_student("h2"))
    A1, A2 = rng.standard_normal((2, d, d)) / math.sqrt(d)
    _, Psi, Om = s.order_parameters([A1, A2])
    fs = L.feasible_set(s, {"Omega_22": Om[1, 1], "Psi_22": Psi[1, 1]})
    names = [x.name for x in fs.symbols]
    vals = {f"{n}_{k + 1}{l + 1}": M[k, l] for n, M in (("Omega", Om), ("Psi", Psi))
            for k in range(2) for l in range(k, 2)}
    v = np.array([vals[n] for n in names])
    assert fs.violation(v) <= 1e-12
    u = UntiedModel(2, [0], mse_teacher_student("linear"))
    op = u.order_parameters([(A1, W1), (A2, W2)])
    fs = L.feasible_set(u, {"m_2": op["m"][1], "q1_22": op["q1"][1, 1],
                            "q2_22": op["q2"][1, 1]})
    vals = {"m_1": op["m"][0], "m_2": op["m"][1]}
    vals.update({f"{n}_{k + 1}{l + 1}": op[n][k, l] for n in ("q1", "q2") for k in range(2)
                 for l in range(k, 2)})
    v = np.array([vals[x.name] for x in fs.symbols])
    assert fs.violation(v) <= 1e-12
    # a point outside: q12 above sqrt(q11 q22) for the tied set
    fs = L.feasible_set(tied, {"q_22": 1.0})
    assert fs.violation(fs.values(np.array([1.0, 1.1]))) > 0.05


def test_feasible_set_refusals():
    with pytest.raises(ValueError, match="q_22"):
        L.feasible_set(_tied("h2"), {})
    with pytest.raises(ValueError, match="starts"):
        L.minimise(_tied("h2"), {"q_22": 1.0}, starts=0)


def test_cor1_small_budget():
    r = L.check_cor1("small", np.random.SeedSequence(1))
    assert r.verdict == "held", r.detail
    assert r.worst <= 1e-6 and r.instances >= 4
    tied = [c for c in r.data["cases"] if c["kind"] == "tied"]
    assert {c["loss"] for c in tied} == {"linear", "h2"}
    assert all(c["gap_flow"] <= 1e-6 and c["dist_flow"] <= 1e-5 for c in tied)
    # the direct-S h2 flow started on the uninformative manifold stays above the minimum
    assert r.data["uninformative_direct_h2"]["gap_flow"] > 0.1


# -- Corollary 2 -------------------------------------------------------------------------------

def test_cor2_constants_linear_and_h2():
    lin = _tied("square")
    c = B.measured_constants(lin, 1.0)
    assert c["C_Gamma"] == 2.0 and c["L_Gamma"] == 0.0
    assert c["gamma_star"] == pytest.approx(4 * 2 * 2 * 1.0)   # 4 K C_Gamma R
    p = B.proof_constants(lin, 1.0)
    assert p["C_star"] == 3.0 and p["R"] == 9.0
    assert p["gamma_star"] >= p["gamma_star_cor2"] and p["gamma_star"] >= p["gamma_star_lemma3"]
    assert B.truncation_bound(c, 0.0, 4, 2) is None      # the premise fails at gamma = 0
    assert B.truncation_bound(c, c["gamma_star"], 4, 2) is None
    b = [B.truncation_bound(c, 3 * c["gamma_star"], M, 2)["bound"] for M in (2, 4, 8)]
    assert b[0] > b[1] > b[2]                          # geometric in M
    # a non-polynomial Gamma gets no constants
    assert B.gamma_constants(_tied("relu"), 3.0) is None


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), rho=st.floats(0.1, 5.0))
def test_gamma_bounds_dominate_sampled_values(seed, rho):
    """C_Gamma and L_Gamma of the h3 potential bound |Gamma| and its difference quotients at
    random symmetric q in the ball ||q||_F <= rho."""
    m = _tied("h3")
    c = B.gamma_constants(m, rho)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        qs = []
        for _ in range(2):
            X = rng.standard_normal((2, 2))
            X = X + X.T
            qs.append(X / np.linalg.norm(X) * rho * rng.uniform(0, 1))
        g = [m.gamma(q) for q in qs]
        assert np.abs(g[0]).max() <= c["C_Gamma"] * (1 + 1e-12)
        dq = np.linalg.norm(qs[0] - qs[1])
        if dq > 1e-9:
            assert np.abs(g[0] - g[1]).max() / dq <= c["L_Gamma"] * (1 + 1e-9)


def test_cor2_small_budget():
    r = T.check_cor2("small", np.random.SeedSequence(2))
    assert r.verdict == "held" and 0 < r.worst <= 1.0
    assert all(x["premise"] for x in r.data["instances"])
    lo, hi = r.data["summary"]["looseness"]["proof"]
    assert 1 < lo <= hi          # the proof's constants: a valid, loose bound


def test_cor2_gamma0_not_applicable_with_measured_errors():
    r = T.check_cor2_gamma0("small", np.random.SeedSequence(2))
    assert r.verdict == "not applicable" and math.isfinite(r.worst)
    assert "Assumption 2.4 not met: gamma = 0 <= gamma*" in r.detail
    # D.3 at gamma = 0: the truncation error grows with the order on this horizon
    errs = r.data["errors"]["D.3 square"]
    assert errs[0] < errs[1] < errs[2]


# -- Theorem 1 ---------------------------------------------------------------------------------

def test_thm1_small_budget():
    r = check_thm1("small", np.random.SeedSequence(3))
    assert r.verdict == "held"
    assert abs(r.data["slope3"] + 0.5) <= 0.1 and abs(r.data["slope4"] + 1) <= 0.1


# -- assumptions: holds / fails ----------------------------------------------------------------

@pytest.fixture(scope="module")
def mats():
    rng = np.random.default_rng(0)
    d = 60
    return d, [rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(6)]


def test_assumption_2_1():
    assert A.assumption_2_1(_tied("h2")).holds is True
    assert A.assumption_2_1(_tied("tanh")).holds is True
    v = A.assumption_2_1(_tied("relu"))
    assert v.holds is False and "Max" in v.message


def test_assumption_2_2(mats):
    d, (W1, W2, *_) = mats
    assert TA.assumption_2_2(_tied(), [W1, W2]).holds is True
    v = TA.assumption_2_2(_tied(), [W1[:, :1], W2])     # rank one: not extensive
    assert v.holds is False and "extensive" in v.message


def test_assumption_2_4(mats):
    d, (W1, W2, *_) = mats
    v = TA.assumption_2_4(_tied("linear"), [W1, W2])
    assert v.holds is False and "gamma = 0 <= gamma*" in v.message
    assert "does not apply" in v.message
    g = v.values["gamma_star"]
    assert TA.assumption_2_4(_tied("linear", gamma=1.01 * g), [W1, W2]).holds is True
    assert TA.assumption_2_4(_tied("relu"), [W1, W2]).holds is None


def test_assumption_3(mats):
    d, (W1, W2, *_) = mats
    m = _tied("h2")
    assert TA.assumption_3(m, [W1, W2]).holds is True
    v = TA.assumption_3(m, [W2 + 0.3 * W1, W2])
    assert v.holds is False and "informative" in v.message


def test_assumption_4_4(mats):
    d, (U1, V1, U2, V2, *_) = mats
    u = UntiedModel(2, [0], mse_teacher_student("h2"))
    assert UA.assumption_4_4(u, [(U1, 1.3 * V1), (U2, V2)]).holds is True
    assert UA.assumption_4_4(u, [(U1, U1[:, ::-1]), (U2, V2)]).holds is False   # tA = tB


def test_assumption_5(mats):
    d, (U1, V1, U2, V2, *_) = mats
    u = UntiedModel(2, [0], mse_teacher_student("h2"))
    assert UA.assumption_5(u, [(U1, 1.3 * V1), (U2, V2)]).holds is True
    # a small student under a large teacher: the m-Hessian turns negative on the way to m*
    I = np.eye(d)
    v = UA.assumption_5(u, [(0.3 * U1, 0.35 * V1), (U2 + 0.5 * I, V2 + 0.5 * I)])
    assert v.holds is False and v.values["lambda_min"] < 0


def test_assumption_6(mats):
    d, (U1, V1, U2, V2, *_) = mats
    u = UntiedModel(2, [0], mse_teacher_student("h2"))
    assert UA.assumption_6(u, [(U1, 1.3 * V1), (U2, V2)]).holds is True
    v = UA.assumption_6(u, [(U2 + 0.3 * U1, V2), (U2, V2)])
    assert v.holds is False and "not free" in v.message
    assert UA.assumption_6(u, [(U2 + 0.3 * U1, V2), (U2, V2)], quick=True).holds is False


def test_assumption_9_4(mats):
    d, (S1, S2, *_) = mats
    v = DT.assumption_9_4(SModel(2, [0], mse_teacher_student("h2")), [S1, S2])
    assert v.holds is False and "gamma = 0 <=" in v.message
    big = SModel(2, [0], mse_teacher_student("h2"), weight_decay=2 * v.values["gamma_star"])
    assert DT.assumption_9_4(big, [S1, S2]).holds is True


def test_diagnostics_reach_integrate_and_compare(mats):
    from attndyn.numeric.attention.compare import compare

    d, (W1, W2, *_) = mats
    m = _tied("linear")
    S = [W1 @ W1.T / 4, W2 @ W2.T / 4]
    res = m.hierarchy(4).integrate(S, np.linspace(0, 0.01, 3), method="truncation")
    [v] = res.diagnostics["assumptions"]
    assert v["assumption"] == "2.4" and v["holds"] is False
    assert "Assumption 2.4 not met" in res.message
    c = compare(m, [W1[:20, :20] / 2, W2[:20, :20] / 2], eta=0.01, batch=16,
                t_eval=np.linspace(0, 0.05, 3), seed=0)
    labels = {a["assumption"]: a["holds"] for a in c.params["assumptions"]}
    assert labels["2.1"] is True and labels["2.4"] is False and "3" in labels
    assert "Assumption 2.4 not met" in c.message


# -- the larger budgets -----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("budget", ["default", "slow"])
def test_checks_at_larger_budgets(budget):
    res = run_checks(["trunc", "thm1", "cor1", "cor2", "cor2_gamma0"], budget=budget, seed=11)
    verdicts = {r.key: r.verdict for r in res}
    assert verdicts.pop("cor2_gamma0") == "not applicable"
    bad = [(r.key, r.detail) for r in res if r.key in verdicts and r.verdict != "held"]
    assert not bad, bad
