"""Fig. 4's truncation claims: the truncation-to-SGD claim is judged on the truncations
with SGD's mini-batch noise rows (``correction="noise"``), the uncorrected rms z reported
beside them; the claim to the exact hierarchy stays on the uncorrected truncations."""

from attndyn.numeric.attention.figures import fig4 as F4
from attndyn.numeric.attention.figures.common import figure_settings
from attndyn.numeric.core.claims import FigureRun

ORDERS = (2, 4, 8, 12)
# the caption's size (d = 400): uncorrected rms z measured at --full; "noise" made up to pass
UNCORRECTED = {2: 469.0, 4: 128.0, 8: 6.1, 12: 3.7}
NOISE = {2: 450.0, 4: 110.0, 8: 5.0, 12: 1.2}
ERR = {2: 3.5e-2, 4: 1.2e-2, 8: 9.9e-4, 12: 7.8e-5}


def _claims(zt, zn):
    s = figure_settings("fig4", "full", {})
    run = FigureRun("fig4", "t", s)
    F4.truncation_claims(run, s, [0, 1, 2, 3], ERR, zt, zn)
    hier, sgd = run.claims
    return hier, sgd


def test_truncation_to_sgd_claim_is_judged_on_the_noise_rows():
    hier, sgd = _claims(UNCORRECTED, NOISE)
    assert hier.held and "exact hierarchy" in hier.text
    assert sgd.held                     # the noise-corrected floor is within rms z 3
    assert 'correction="noise"' in sgd.text
    judged, _, rest = sgd.measured.partition("uncorrected truncation (not judged): ")
    assert "M=12: 1.20" in judged and "M=12: 3.70" in rest     # both reported, each labelled
    assert "eta d/B = 0.00781" in sgd.condition
    # swapped: the uncorrected z would pass, the noise-corrected do not -> not held
    _, sgd = _claims(NOISE, UNCORRECTED)
    assert not sgd.held


def test_truncation_to_sgd_claim_needs_the_fall_with_the_order():
    rising = {2: 2.0, 4: 2.5, 8: 3.5, 12: 2.9}     # last within 3, but 2.5 -> 3.5 rises above
    _, sgd = _claims(UNCORRECTED, rising)
    assert not sgd.held
    flat = {2: 2.0, 4: 2.5, 8: 1.5, 12: 2.9}       # rises only within the seed noise
    _, sgd = _claims(UNCORRECTED, flat)
    assert sgd.held
