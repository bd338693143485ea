"""Issue 23, D7: a surrogate loaded from the disk cache is checked again (finite
coefficients, the certificate at fresh points against the source) and rebuilt when the
file was altered or truncated, instead of being served or raising on every call."""

import numpy as np
import pytest

from attndyn.numeric.attention.potentials import tied_potential
from attndyn.numeric.attention.potentials.surrogate import build_surrogate
from attndyn.symbolic.losses import mse_teacher_student

BOX = (np.array([0.5, 0.5, -0.2]), np.array([0.8, 0.8, 0.2]))


@pytest.fixture
def cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_CACHE_DIR", str(tmp_path))
    pot = tied_potential(mse_teacher_student("erf"), 2)
    good = build_surrogate(pot, BOX, rtol=1e-7, atol=1e-10)
    assert not good.cached
    files = list(tmp_path.rglob("sur_*.npz"))
    assert len(files) == 1
    return pot, good, files[0]


def _rewrite(path, **changes):
    with np.load(path, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    data.update(changes)
    with open(path, "wb") as f:  # np.savez on a file object keeps the name
        np.savez(f, **data)


def _rebuilt(pot, good, path):
    again = build_surrogate(pot, BOX, rtol=1e-7, atol=1e-10)
    assert not again.cached  # rebuilt from the source, not served from the file
    np.testing.assert_allclose(again.gamma_many(np.array([[[0.6, 0.05], [0.05, 0.7]]])),
                               good.gamma_many(np.array([[[0.6, 0.05], [0.05, 0.7]]])),
                               rtol=1e-12, atol=1e-15)
    third = build_surrogate(pot, BOX, rtol=1e-7, atol=1e-10)
    assert third.cached  # the rebuilt entry was saved over the bad one
    np.testing.assert_array_equal(third.parameters(), again.parameters())


def test_intact_entry_is_served(cached):
    pot, good, path = cached
    b = build_surrogate(pot, BOX, rtol=1e-7, atol=1e-10)
    assert b.cached
    np.testing.assert_array_equal(b.parameters(), good.parameters())


def test_scaled_coefficients_are_rebuilt(cached):
    pot, good, path = cached
    with np.load(path, allow_pickle=False) as z:
        coef = z["coef"] * 2.0
    _rewrite(path, coef=coef)
    _rebuilt(pot, good, path)


def test_nan_coefficients_are_rebuilt(cached):
    pot, good, path = cached
    with np.load(path, allow_pickle=False) as z:
        coef = np.full_like(z["coef"], np.nan)
    _rewrite(path, coef=coef)
    _rebuilt(pot, good, path)


def test_small_perturbation_of_one_term_is_rebuilt(cached):
    """A change far below the file's scale but above the tolerance is seen too."""
    pot, good, path = cached
    with np.load(path, allow_pickle=False) as z:
        coef = z["coef"].copy()
    coef[0] += 1e-4  # the constant term: moves every value by about 1e-4 >> 1e-7 |Gamma|
    _rewrite(path, coef=coef)
    _rebuilt(pot, good, path)


def test_truncated_file_is_rebuilt(cached):
    pot, good, path = cached
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    _rebuilt(pot, good, path)
