"""The deterministic finite-d matrix flow: the oracle of every truncation.

For tied attention (paper 003, eq. 11 before projection)

    dS_k/dt = - sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k   (k trainable),
    q_kl = Tr(S_k S_l) / d.

Normalised traces of its solution solve the infinite hierarchy (eq. 11)
exactly, at any finite ``d``, with the initial condition given by the
matrices' own moments. Each parameterisation writes its flow as a method
(:meth:`attndyn.numeric.attention.base.AttentionModel.matrix_flow`);
:func:`matrix_flow` is the one entry point, and :func:`solve_flow` the one
integration driver every flow and closed ODE uses: scipy's explicit or
implicit solvers (DOP853 by default) stepped here, with

- blow-up detection: a state entry above ``blowup`` (or non-finite) stops the
  run with status -3, keeping the outputs before it;
- a non-finite right-hand side at a finite state (a non-finite ``Gamma``, for
  a loss whose expectation is undefined) stops at once with status -3 instead of
  letting the solver shrink its step forever;
- a solver failure before the first output gives status -1 and an empty
  trajectory, never an exception;
- repeated output times (two SGD checkpoints on one step) are evaluated once
  and repeated.

On a successful run the outputs are those of ``scipy.integrate.solve_ivp`` with
the same method, tolerances and ``t_eval`` (same steps, same dense output).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from attndyn.numeric.attention.base import check_model
from attndyn.numeric.core.threads import compute_threads

if TYPE_CHECKING:
    from attndyn.numeric.attention.base import AttentionModel, Correction
    from attndyn.numeric.core.results import Trajectory
    from attndyn.numeric.core.types import ArrayLike

__all__ = ["matrix_flow"]


def matrix_flow(model: AttentionModel, matrices: Sequence[ArrayLike], t_eval: ArrayLike, *,
                order: int | None = None, words: Sequence[Sequence[int]] | None = None,
                rtol: float | None = None, atol: float | None = None, method: str | None = None,
                keep_matrices: bool = False, blowup: float | None = None,
                raise_on_failure: bool = False, correction: str | Correction | None = None,
                eta: float | None = None, batch: int | None = None,
                blas_threads: int | None = None) -> Trajectory:
    """Integrate the finite-d matrix flow of ``model`` from ``matrices``.

    Every model that has a flow implements it as ``model.matrix_flow(...)``
    (paper 003: tied eq. 11 before projection, ``dS_k/dt = -sum_l Gamma_kl
    (S_l S_k + S_k S_l) - (gamma/2) S_k`` in ``t = 4 eta n / d``; direct S,
    appendix E, ``dS_k/dtau = -2 sum_l (A_kl S_l + B_kl S_l^T) - gamma S_k`` in
    ``tau = eta n / d``); a model without one raises
    :class:`~attndyn.numeric.attention.base.CapabilityError`.

    Parameters
    ----------
    model : AttentionModel
    matrices : list of K (d, d) arrays
        The ``S_k`` at ``t = 0`` (tied: symmetric PSD); non-trainable ones stay
        fixed (teachers).
    t_eval : array
        Output times on the model's time scale (tied ``t = 4 eta n / d``).
    order, words : int, list of words
        Tied: report every canonical word up to ``order`` (default 4), or these
        ``words``.
    rtol, atol, method, blowup :
        Solver tolerances (tied default ``1e-11``, ``1e-13``), scipy method
        (``"DOP853"``) and the blow-up threshold (``1e100``; status -3).
        ``None`` means the model's default.
    keep_matrices : bool
        Also keep ``S_k(t)`` in ``result.diagnostics["matrices"]`` (n_t, K, d, d).
    correction, eta, batch :
        ``"none"`` (default), or ``"noise"`` / ``"noise+finite-d"``: the moment-level
        flow of :func:`attndyn.numeric.attention.tied.noise_flow.noise_corrected_flow` (issue 16:
        the mini-batch noise of SGD with learning rate ``eta`` and batch ``batch``, to
        first order in ``eta d / B``; tied, one trainable index, quadratic loss), or
        ``"finite-d"``: the flow of the finite-d population loss (the fourth-cumulant
        correction of :mod:`attndyn.numeric.attention.tied.finite_width`, degree <= 4 losses).
    blas_threads : int or "auto", optional
        BLAS threads of the ``d x d`` products of the right-hand side, by the package's
        policy (:func:`~attndyn.numeric.core.threads.compute_threads`: default 1, or
        ``ATTNDYN_BLAS_THREADS``); at d = 200 two threads cost 30x the CPU time of one
        on 2 loaded cores (docs/sgd.md, "Threads").

    Returns
    -------
    Trajectory (tied: ``kind="matrix_flow"`` with ``.moment(word)``), with
    ``status`` 0, -1 (solver failure) or -3 (blow-up or non-finite right-hand side).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> import numpy as np
    >>> S = [0.5 * np.eye(4), np.eye(4)]   # S_1(0) = I/2, teacher S_2 = I (appendix D.3)
    >>> r = attndyn.matrix_flow(model, S, [0.0, 0.1, 0.2], order=2)
    >>> r.status, np.round(r.observable("mu_1"), 3)   # eq. (348): mu_1 = 1/(1 + exp(-4t))
    (0, array([0.5  , 0.599, 0.69 ]))
    """
    theory = check_model(model).theory
    opts = {k: v for k, v in (("order", order), ("words", words), ("rtol", rtol),
                              ("atol", atol), ("method", method), ("blowup", blowup))
            if v is not None}
    if keep_matrices:
        opts["keep_matrices"] = True
    with compute_threads(blas_threads=blas_threads):
        return theory.correction(correction).flow(theory, matrices, t_eval, eta=eta,
                                                  batch=batch, raise_on_failure=raise_on_failure,
                                                  **opts)
