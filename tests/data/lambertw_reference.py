"""Reference points and 50-digit mpmath values for the Lambert W kernel.

``reference_points(seed)`` draws the 10^5 acceptance points:

- W0, 40 000 points log-uniform over [-1/e, 1e300]: half ``z = 10^U``,
  ``U ~ U(-300, 300)``, half ``z = -10^U``, ``U ~ U(-300, log10(1/e))``;
- W-1, 40 000 points ``z = -10^U``, ``U ~ U(-300, log10(1/e))``;
- for each branch 5 000 points ``z = -1/e + delta`` with ``delta`` log-uniform
  in [1e-12, 1e-1] (region 1) and 5 000 within 1e-12 of -1/e (region 2,
  ``delta`` log-uniform in [6e-17, 1e-12]).

Every z is a float64 strictly above the double nearest to -1/e (which is
itself the special value W = -1). Reference values are computed with
``mpmath.lambertw`` at 50 digits from the exact float64 input and stored as a
double-double ``(hi, lo)``, so the measured error is not limited by the
rounding of the reference.

Run this file to regenerate ``lambertw_reference.npz`` (the seeded 4 000-point
subsample used by the default test suite)::

    python3 tests/data/lambertw_reference.py
"""

from __future__ import annotations

import pathlib

import numpy as np

SEED = 20240531
N_LOG = 40_000
N_BAND = 5_000
N_NEAR = 5_000
INV_E = 0.36787944117144233  # double nearest to 1/e
SUBSAMPLE = {(0, 0): 1200, (0, 1): 400, (0, 2): 400, (-1, 0): 1200, (-1, 1): 400, (-1, 2): 400}
HERE = pathlib.Path(__file__).resolve().parent
NPZ = HERE / "lambertw_reference.npz"


def _near(rng, n, lo, hi):
    z = -INV_E + 10.0 ** rng.uniform(lo, hi, n)
    return np.where(z > -INV_E, z, np.nextafter(-INV_E, 0.0))


def reference_points(seed=SEED):
    """Return ``(z, branch, region)`` for the 10^5 acceptance points."""
    rng = np.random.default_rng(seed)
    h = N_LOG // 2
    w0_log = np.concatenate([10.0 ** rng.uniform(-300, 300, h),
                             -(10.0 ** rng.uniform(-300, np.log10(INV_E), N_LOG - h))])
    wm_log = -(10.0 ** rng.uniform(-300, np.log10(INV_E), N_LOG))
    lo_near = np.log10(6e-17)
    parts = [
        (w0_log, 0, 0),
        (_near(rng, N_BAND, -12, -1), 0, 1),
        (_near(rng, N_NEAR, lo_near, -12), 0, 2),
        (wm_log, -1, 0),
        (_near(rng, N_BAND, -12, -1), -1, 1),
        (_near(rng, N_NEAR, lo_near, -12), -1, 2),
    ]
    z = np.concatenate([p[0] for p in parts])
    z = np.maximum(z, np.nextafter(-INV_E, 0.0))  # U near log10(1/e) may round below
    branch = np.concatenate([np.full(p[0].size, p[1], np.int8) for p in parts])
    region = np.concatenate([np.full(p[0].size, p[2], np.int8) for p in parts])
    return z, branch, region


def reference_values(z, branch, dps=50):
    """Double-double ``(hi, lo)`` of the exact W of each float64 ``z``."""
    import mpmath

    hi = np.empty(z.size)
    lo = np.empty(z.size)
    with mpmath.workdps(dps):
        for i, (zi, k) in enumerate(zip(z.tolist(), branch.tolist())):
            w = mpmath.lambertw(mpmath.mpf(zi), int(k))
            if mpmath.im(w) != 0:
                raise ValueError(f"reference W_{k}({zi!r}) is not real: {w}")
            w = mpmath.re(w)
            hi[i] = float(w)
            lo[i] = float(w - mpmath.mpf(hi[i]))
    return hi, lo


def relative_error(w, hi, lo):
    """|w - (hi + lo)| / |hi + lo|, exact to a few ulp of the error itself.

    NaN or infinite ``w`` gives ``inf`` (never agreement)."""
    w = np.asarray(w, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs((w - hi) - lo) / np.abs(hi)
    return np.where(np.isfinite(w) & np.isfinite(err), err, np.inf)


def subsample_indices(region, branch, seed=SEED):
    rng = np.random.default_rng(seed + 1)
    idx = []
    for (k, r), n in SUBSAMPLE.items():
        pool = np.flatnonzero((branch == k) & (region == r))
        idx.append(np.sort(rng.choice(pool, n, replace=False)))
    return np.concatenate(idx)


def main():
    z, branch, region = reference_points()
    idx = subsample_indices(region, branch)
    hi, lo = reference_values(z[idx], branch[idx])
    np.savez_compressed(NPZ, index=idx, z=z[idx], branch=branch[idx], region=region[idx],
                        w_hi=hi, w_lo=lo, seed=np.int64(SEED), dps=np.int64(50))
    print(f"wrote {NPZ} ({idx.size} points)")


if __name__ == "__main__":
    main()
