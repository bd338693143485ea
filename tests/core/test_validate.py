"""The shared validators of numeric/core/validate.py (issue 23 D12 and the silent cases)."""

from __future__ import annotations

import numpy as np
import pytest

from attndyn.numeric.core.validate import (check_batch, check_eta, check_finite_result,
                                           check_int_per, check_model_args, check_t_eval,
                                           check_threads, kernel_array)


def _readonly(a):
    a = np.array(a)
    a.setflags(write=False)
    return a


def test_kernel_array_accepts_read_only_and_memory_mapped_arrays(tmp_path):
    ro = _readonly(np.arange(6.0).reshape(2, 3))
    out = kernel_array(ro, "S", ndim=2)
    assert out.flags.writeable and out.flags.c_contiguous and np.array_equal(out, ro)
    np.save(tmp_path / "m.npy", np.arange(6.0))
    mm = np.load(tmp_path / "m.npy", mmap_mode="r")
    out = kernel_array(mm, "y0", ndim=1)
    assert type(out) is np.ndarray and out.flags.writeable and np.array_equal(out, mm)
    rw = np.load(tmp_path / "m.npy", mmap_mode="r+")
    view = kernel_array(rw, "y0")
    assert type(view) is np.ndarray and np.shares_memory(view, rw)     # no copy when fine
    good = np.ones((3, 3))
    assert kernel_array(good, "S") is good
    strided = np.ones((4, 4))[:, ::2]
    assert kernel_array(strided, "S").flags.c_contiguous
    assert kernel_array(np.broadcast_to(np.ones(3), (2, 3)), "S").flags.writeable
    assert kernel_array([1, 2], "k", dtype=np.int64).dtype == np.int64


def test_kernel_array_errors_name_the_argument():
    with pytest.raises(TypeError, match="S must be real, got a complex array"):
        kernel_array(np.ones(2) + 1j, "S")
    with pytest.raises(ValueError, match=r"S must be 2-D, got shape \(3,\)"):
        kernel_array(np.ones(3), "S", ndim=2)
    with pytest.raises(ValueError, match=r"S must have shape \(any, 2\), got \(2, 3\)"):
        kernel_array(np.ones((2, 3)), "S", shape=(None, 2))
    with pytest.raises(ValueError, match="q must be finite"):
        kernel_array([1.0, np.nan], "q", finite=True)
    with pytest.raises(TypeError, match="kidx must be an array of int64, got dtype float64"):
        kernel_array([1.5], "kidx", dtype=np.int64)
    with pytest.raises(TypeError, match="x must be an array of real numbers"):
        kernel_array(["a"], "x")


def test_a_compiled_kernel_is_entered_with_read_only_input():
    from attndyn.kernels import sgd
    state = _readonly(sgd.seed_state(np.random.SeedSequence(3), lanes=1))
    fill = sgd._ensure_compiled("fill_normal")
    with pytest.raises(TypeError, match="No matching definition"):
        fill(state, np.empty(4))                         # what users met (D12)
    st = kernel_array(state, "state", dtype=np.uint64, shape=(4,))
    out = np.empty(4)
    fill(st, out)
    assert np.all(np.isfinite(out))


def test_check_t_eval_returns_a_writable_array_for_read_only_times():
    t = check_t_eval(_readonly(np.linspace(0, 1, 5)))
    assert t.flags.writeable and t.flags.c_contiguous


def test_eta_batch_threads():
    assert check_eta(0.1) == 0.1 and check_batch(np.int64(4)) == 4
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="eta"):
            check_eta(bad)
    with pytest.raises(TypeError, match="eta"):
        check_eta("0.1")
    with pytest.raises(TypeError, match="batch must be an int"):
        check_batch(2.0)
    with pytest.raises(ValueError, match="batch must be an int >= 1, got 0"):
        check_batch(0)
    assert check_threads(None, 4) == 4 and check_threads(2, 4) == 2
    with pytest.raises(ValueError, match=r"threads must be None or an int in 1\.\.4 .*got 1000000"):
        check_threads(10 ** 6, 4)                       # refused, not clamped
    with pytest.raises(TypeError, match="threads"):
        check_threads(2.0, 4)


def test_widths_are_ints_never_truncated():
    assert check_int_per(3, 2, "width") == [3, 3]
    assert check_int_per(np.array([2, 5]), 2, "width") == [2, 5]
    with pytest.raises(TypeError, match="width must be an int >= 1 .* got 2.7"):
        check_int_per(2.7, 2, "width")
    with pytest.raises(TypeError, match="got 2.0"):
        check_int_per([2.0, 3], 2, "width")
    with pytest.raises(ValueError, match="2 of them, got 3 values"):
        check_int_per([1, 2, 3], 2, "width")


def test_overflowing_moments_are_an_error_not_inf():
    S = np.full((3, 3), 1e200)
    with np.errstate(over="ignore"):
        mu = np.trace(S @ S) / 3
    with pytest.raises(ValueError, match="moments overflow float64 .* although S is finite"):
        check_finite_result([1.0, mu], "moments", "S")
    assert check_finite_result([1.0, 2.0], "moments", "S").tolist() == [1.0, 2.0]


def test_empty_trainable_is_refused():
    with pytest.raises(ValueError, match="trainable must name at least one of the indices 0..1"):
        check_model_args(2, [], 1, None, 0.0, identity_as_none=True)
    assert check_model_args(2, [0], 1, None, 0.0, identity_as_none=True)[1] == (0,)


def test_check_t_eval_refuses_complex_and_matrix_times():
    # complex times lost their imaginary part with only numpy's ComplexWarning; a 2-D
    # array was flattened into a time grid
    with pytest.raises(TypeError, match="t_eval must be real"):
        check_t_eval(np.array([0.0, 0.1 + 1j]))
    with pytest.raises(ValueError, match=r"t_eval must be one-dimensional, got shape \(2, 2\)"):
        check_t_eval(np.zeros((2, 2)))
    assert check_t_eval(0.5).tolist() == [0.5]  # one time
    assert check_t_eval(np.array([0, 1])).dtype == np.float64
