"""Benchmark: the numba Lambert W against scipy, and the scaling-bound grids.

Every speed is reported as a ratio against scipy.special.lambertw (real part)
on the same points in the same process, since these machines are shared. Clock:
process CPU time, the minimum over interleaved rounds (numba, scipy, numba, ...),
one thread, with the wall time beside it (``benchmarks/_timing.py``).
Accuracy is measured against 50-digit mpmath: the stored seeded subsample
with ``--quick``, all 10^5 acceptance points otherwise (about 15 s).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _timing import interleaved, load  # noqa: E402


def _best(fn, repeat):
    """CPU seconds of one call, the minimum of ``repeat`` calls."""
    return interleaved({0: fn}, reps=1, rounds=repeat)[0][0]


def _reference_module():
    path = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "lambertw_reference.py"
    spec = importlib.util.spec_from_file_location("lambertw_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _accuracy(quick):
    from attndyn import lambertw

    ref = _reference_module()
    if quick:
        data = np.load(ref.NPZ)
        z, k, region, hi, lo = (data[n] for n in ("z", "branch", "region", "w_hi", "w_lo"))
        label = f"stored subsample ({z.size} pts)"
    else:
        z, k, region = ref.reference_points()
        hi, lo = ref.reference_values(z, k)
        label = f"all acceptance points ({z.size} pts)"
    w = np.where(k == 0, lambertw(z, 0), lambertw(np.minimum(z, 0.0), -1))
    err = ref.relative_error(w, hi, lo)
    rows = []
    for kk, name in ((0, "W0"), (-1, "W-1")):
        away = err[(k == kk) & (region < 2)].max()
        near = err[(k == kk) & (region == 2)].max()
        rows.append((name, away, near))
    return label, rows


def _grid_reference(C, xi, L, d, c_stat):
    """numpy + scipy version of critical_data_size and stage_two_bound."""
    from scipy.special import lambertw as sp_lambertw

    w = sp_lambertw(6.0 * (L * d) ** 6 * C / xi ** 10).real
    n = (6.0 * C * xi ** 2 / w) ** (1.0 / 6.0)
    return n, c_stat * xi ** 2 / n


def main(quick: bool = False) -> None:
    from scipy.special import lambertw as sp_lambertw

    from attndyn.kernels.lambertw import INV_E, lambertw0_ufunc, lambertw_array, lambertwm1_ufunc
    from attndyn.numeric import scaling as sc

    n = 10 ** 5 if quick else 10 ** 6
    repeat = 3 if quick else 5
    rng = np.random.default_rng(0)
    dists = {
        "W0  log-uniform [-1/e, 1e300]": (np.concatenate([
            10.0 ** rng.uniform(-300, 300, n // 2),
            -(10.0 ** rng.uniform(-300, np.log10(INV_E), n - n // 2))]), 0),
        "W0  uniform [0, 10]": (rng.uniform(0.0, 10.0, n), 0),
        "W0  uniform [-1/e, 0]": (rng.uniform(-INV_E, 0.0, n), 0),
        "W0  log-uniform [1, 1e300]": (10.0 ** rng.uniform(0, 300, n), 0),
        "W-1 log-uniform [-1/e, -1e-300]": (-(10.0 ** rng.uniform(-300, np.log10(INV_E), n)), -1),
        "W0  uniform [-1/e, -0.3] (branch pt)": (rng.uniform(-INV_E, -0.3, n), 0),
        "W-1 uniform [-1/e, -0.3] (branch pt)": (rng.uniform(-INV_E, -0.3, n), -1),
    }
    lambertw0_ufunc(np.ones(4))  # compile / load outside the timings
    lambertwm1_ufunc(-np.ones(4) / 4)

    print(f"Lambert W, {n} float64 points, CPU time, min of {repeat} interleaved rounds, one "
          f"thread ({load()}); ratio = scipy CPU time / numba CPU time")
    head = f"{'points':38s} {'numba ms':>9s} {'(wall)':>8s} {'ns/pt':>7s} {'scipy ms':>9s} " \
           f"{'(wall)':>8s} {'ratio':>7s} {'max |diff|/|w|':>15s}"
    print(head)
    print("-" * len(head))
    worst = np.inf
    for name, (z, k) in dists.items():
        ufunc = lambertw0_ufunc if k == 0 else lambertwm1_ufunc
        t = interleaved({"nb": lambda: ufunc(z), "sp": lambda: sp_lambertw(z, k).real}, reps=1,
                        rounds=repeat)
        (t_nb, w_nb), (t_sp, w_sp) = t["nb"], t["sp"]
        w = ufunc(z)
        ws = sp_lambertw(z, k).real
        with np.errstate(invalid="ignore", divide="ignore"):
            diff = np.nanmax(np.abs(w - ws) / np.maximum(np.abs(w), 1e-300))
        worst = min(worst, t_sp / t_nb)
        print(f"{name:38s} {t_nb * 1e3:9.2f} {w_nb * 1e3:8.2f} {t_nb / n * 1e9:7.1f} "
              f"{t_sp * 1e3:9.2f} {w_sp * 1e3:8.2f} {t_sp / t_nb:7.2f} {diff:15.2e}")
    print(f"acceptance (>= 4x scipy on every range): min {worst:.2f}x: "
          f"{'met' if worst >= 4.0 else 'NOT met'}")
    out = np.empty(n)
    lambertw_array(np.ones(4), 0, out[:4])
    z = dists["W0  log-uniform [-1/e, 1e300]"][0]
    t_par = _best(lambda: lambertw_array(z, 0, out), repeat)
    print(f"lambertw_array (parallel kernel, threads as pinned) on the first range: "
          f"{t_par * 1e3:.2f} ms CPU")

    label, rows = _accuracy(quick)
    print(f"\naccuracy vs mpmath (50 digits), {label}: max relative error")
    print(f"{'branch':8s} {'away from -1/e':>15s} {'within 1e-12 of -1/e':>21s}")
    for name, away, near in rows:
        print(f"{name:8s} {away:15.3e} {near:21.3e}")

    # bound grids: compute x noise, broadcast
    m = 300 if quick else 1000
    C = np.logspace(3, 300, m).reshape(m, 1)
    xi = np.logspace(-2, 0.5, m).reshape(1, m)
    L, d, c = 128.0, 64.0, 1.0
    pts = m * m
    sc.stage_two_bound(C[:2], xi[:, :2], L, d, c_stat=c)
    kw = dict(alpha=1.0, prefactor=1.0, loss0=1.0, c_stat=c)
    sc.two_stage_bound(C[:2], 1e5, xi[:, :2], L, d, **kw)
    t_n = _best(lambda: sc.critical_data_size(C, xi, L, d), repeat)
    t_b = _best(lambda: sc.stage_two_bound(C, xi, L, d, c_stat=c), repeat)
    t_t = _best(lambda: sc.two_stage_bound(C, 1e5, xi, L, d, **kw), repeat)
    t_thr = _best(lambda: sc.threshold_compute(C, xi, L, d), repeat)
    # the numpy/scipy formula overflows for large C (it needs the log form); time it anyway
    with np.errstate(all="ignore"):
        t_ref = _best(lambda: _grid_reference(C, xi, L, d, c), repeat)
    print(f"\nbound grids, {m} x {m} = {pts} points (C in [1e3, 1e300] x xi in [1e-2, 3]), "
          f"CPU time ({load()})")
    print(f"{'quantity':38s} {'CPU ms':>8s} {'Mpts/s':>8s} {'vs numpy+scipy':>15s}")
    for name, t in (("critical_data_size N*(C)", t_n), ("stage_two_bound c xi^2/N*(C)", t_b),
                    ("two_stage_bound (fixed N)", t_t), ("threshold_compute C*(N)", t_thr)):
        print(f"{name:38s} {t * 1e3:8.2f} {pts / t / 1e6:8.2f} {t_ref / t:15.2f}")
    print(f"{'numpy+scipy N* and bound (reference)':38s} {t_ref * 1e3:8.2f} "
          f"{pts / t_ref / 1e6:8.2f} {1.0:15.2f}")


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
