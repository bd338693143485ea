"""The Taylor kernel's large coefficient workspace (issue 29 item 4).

Above ``WORKSPACE_KEEP_BYTES`` a prepared system keeps one workspace per thread on
plain (not huge-page advised) anonymous pages; the kernel writes every row it reads,
so stale or poisoned contents must not change a bit of the result."""

import threading

import numpy as np

import attndyn.kernels.taylor as T
from attndyn.kernels.taylor import plain_pages, prepare_taylor, run_prepared, run_taylor


def _tied(order):
    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    h = m.hierarchy(order)
    return h, h.initial_state(FreeInit([wishart(0.5, 0.5), scalar(1)]))


def test_plain_pages_is_a_writable_contiguous_float64_vector():
    for size in (0, 1, 1000, 3 * 2 ** 20 + 7):
        a = plain_pages(size)
        assert a.dtype == np.float64 and a.ndim == 1 and a.size == max(size, 1)
        assert a.flags.c_contiguous and a.flags.writeable and a.flags.aligned
        a[:] = np.arange(a.size)  # every page can be written and read back
        assert a[-1] == a.size - 1 and a[0] == 0.0


def test_kept_workspace_shape_reuse_and_growth(monkeypatch):
    monkeypatch.setattr(T, "WORKSPACE_KEEP_BYTES", 0)  # every workspace is large
    keep = threading.local()
    small = 1001
    w = T._workspace(5, small, keep)
    assert w.shape == (5, small) and w.dtype == np.float64
    assert w.flags.c_contiguous and w.flags.writeable
    w[:] = 1.0
    w2 = T._workspace(4, small, keep)  # fewer rows: the same pages
    assert w2.shape == (4, small) and np.shares_memory(w, w2)
    w3 = T._workspace(7, small, keep)  # more rows: a larger map replaces it
    assert w3.shape == (7, small) and keep.buf.size == 7 * small
    assert not np.shares_memory(w, w3)
    other = threading.local()  # another thread's (or preparation's) keep: its own pages
    assert not np.shares_memory(T._workspace(5, small, other), w3)
    # without a keep: a fresh array each call
    assert not np.shares_memory(T._workspace(5, small), T._workspace(5, small))


def test_kept_workspace_gives_the_fresh_arrays_bits(monkeypatch):
    """A prepared system's kept workspace, poisoned with NaN and reused across orders and
    output times, gives the bits of a one-off run on a fresh ``np.empty`` workspace."""
    h, y0 = _tied(6)
    t = np.array([0.0, 0.05, 0.1])
    monkeypatch.setattr(T, "WORKSPACE_KEEP_BYTES", 0)  # every workspace is large
    refs = {p: run_taylor(h._taylor_system, h._gamma_program, y0, t, 1e-10, 1000, 1e100,
                          np.inf, order=p) for p in (9, 15)}  # fresh np.empty workspaces
    prep = prepare_taylor(h._taylor_system, h._gamma_program)
    assert prep.work is not None
    for p in (15, 9, 15, 9):
        buf = getattr(prep.work, "buf", None)
        if buf is not None:
            buf[:] = np.nan
        ys, info, tinfo, yend, _ = run_prepared(prep, y0, t, 1e-10, 1000, 1e100, np.inf,
                                                order=p)
        r_ys, r_info, r_tinfo, r_yend, _ = refs[p]
        assert info[0] == 0 and info[1] == t.size
        for a, b in ((ys, r_ys), (info, r_info), (tinfo, r_tinfo), (yend, r_yend)):
            assert np.array_equal(a, b)
        assert prep.work.buf.size == 16 * y0.size  # the largest order's rows are kept
