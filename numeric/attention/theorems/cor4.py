"""Corollary 4 (i) of paper 003: untied weak recovery in ``Theta(d^2 log d)`` samples.

Setting (section 4.2). One trainable untied student ``M_1 = U_1 V_1^T``, a fixed
teacher ``M_2``, ``L = 1``, MSE ``(1/2)(sigma(G_1) - sigma(G_2))^2``, square Gaussian
factors with entries ``N(0, scale^2/d)`` (``tA = tB = scale^2``, means ``m_k = O(d^-1/2)``,
overlaps ``q1_12, q2_12 = O(1/d)``: a free, uninformative start). Slow time
``tau = eta n / d``. Case (i) (eq. 43): when ``Q2 g* != 0`` at the fast phase's root
``m*``, ``max(|q1_12|, |q2_12|)`` reaches ``c`` at a slow time ``tau_wr`` independent
of ``d``, so at ``eta_d = c0/(d log d)``

    N_wr(c) = B tau_wr d^2 log d / c0          samples (eq. 41).

The check (registered as ``"cor4"``) fits ``N_wr`` from SGD d-scans with the
machinery of ``cor3`` (:func:`~.weak_recovery.scan_check`). The theory's ``tau_wr``
comes from the finite-d slaved flow (slow hierarchy 31-32 with ``m = m*(q)``, exact
at its ``d``) from one draw at ``d_ref``, because the project has no
``d -> infinity`` solver for the untied model; its own finite-d offset is
``O(1/d_ref)``. ``h1`` is case (i) (``a_12 = -1/2``); ``h2`` from zero means is
case (ii) (eq. 46, the cross-gradients ``a_12 ~ m_1* m_2`` vanish on the free
manifold): outside the premise, the check says "not applicable".
"""

from __future__ import annotations

from attndyn.numeric.attention.theorems.weak_recovery import ScanConfig, scan_check
from attndyn.numeric.core.checks import CheckResult, register
from attndyn.numeric.core.validate import resolve_seed

__all__ = ["check_cor4", "config"]

_CONFIGS = {
    "small": ScanConfig(c=0.3, dims=(24, 34, 48, 68, 96), seeds=(6, 5, 4, 4, 3), d_ref=96),
    "default": ScanConfig(c=0.3, d_ref=320),
    "slow": ScanConfig(c=0.3, dims=(40, 57, 80, 113, 160, 226, 320),
                       seeds=(8, 6, 5, 4, 4, 3, 3), d_ref=640),
}


def config(budget: str) -> ScanConfig:
    """The :class:`~.weak_recovery.ScanConfig` of a budget.

        >>> cfg = config("small")
        >>> cfg.dims, cfg.d_ref
        ((24, 34, 48, 68, 96), 96)
    """
    if budget not in _CONFIGS:
        raise ValueError(f"budget must be one of {tuple(_CONFIGS)}, got {budget!r}")
    return _CONFIGS[budget]


@register("cor4", "Cor. 4 (i), eqs. (41)-(43)",
          "untied weak recovery: N_wr(c) from SGD fitted against d^2, d^2 log d, d^2 log^2 d")
def check_cor4(budget, seed, progress=None, activation: str | None = None,
               force: bool = False) -> CheckResult:
    """Corollary 4 (i) as a measurement (module docstring). ``activation``
    overrides the budget's (``h2`` is outside the premise: "not applicable";
    ``force=True`` runs and reports the scan anyway, never "held").

        >>> check_cor4("small", 0, activation="h2").verdict
        'not applicable'
        >>> r = check_cor4("small", 0)
        >>> r.key, r.verdict
        ('cor4', 'held')
    """
    from dataclasses import replace

    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.symbolic.losses import mse_teacher_student
    cfg = config(budget)
    if activation is not None:
        cfg = replace(cfg, activation=str(activation))
    model = UntiedModel(2, [0], mse_teacher_student(cfg.activation))
    s_ref, s_scan = resolve_seed(seed).spawn(2)
    ref = model.gaussian_init(cfg.d_ref, scale=cfg.scale, seed=s_ref)
    return scan_check("cor4", "Cor. 4 (i), eqs. (41)-(43)", model, cfg, s_scan,
                      limit_state=ref, progress=progress, force=force)
