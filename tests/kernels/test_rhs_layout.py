"""The grouped row layout of the RHS kernels and their thread choice (issue 11 item 1).

The kernels walk the rows by length within chunks (kernels/rhs.py, ``group_rows``);
every row is still summed in its own term order, so the result must be the CSR loop's
bits, for any chunk size, with empty rows, and for any number of threads."""

import numpy as np
import pytest

from attndyn.kernels import rhs as R
from attndyn.kernels.integrate import run_rk
from attndyn.kernels.taylor import run_taylor


def _random_csr(rng, n_rows, max_len, n_slots=40, empty=0.2):
    lens = rng.integers(0, max_len + 1, n_rows)
    lens[rng.random(n_rows) < empty] = 0
    indptr = np.zeros(n_rows + 1, dtype=np.uint64)
    np.cumsum(lens, out=indptr[1:])
    nt = int(indptr[-1])
    src = rng.integers(0, max(n_rows, 1), nt).astype(np.uint32)
    slot = rng.integers(0, n_slots, nt).astype(np.uint8)
    return indptr, src, slot


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [1, 7, 1024])
def test_grouped_layout_gives_the_csr_bits(seed, chunk):
    rng = np.random.default_rng(seed)
    n_rows = int(rng.integers(0, 400))
    indptr, src, slot = _random_csr(rng, n_rows, int(rng.integers(0, 25)))
    lay = R.group_rows(indptr, src, slot, chunk=chunk)
    # a permutation of the rows; each group holds rows of its length, in one chunk
    assert np.array_equal(np.sort(lay.rows.astype(np.int64)), np.arange(n_rows))
    lens = np.diff(indptr.astype(np.int64))
    for L, cnt, t0, r0 in lay.groups.astype(np.int64):
        rr = lay.rows[r0:r0 + cnt].astype(np.int64)
        assert np.all(lens[rr] == L) and np.unique(rr // chunk).size == 1
        # the terms of each row, in their own order
        for j, r in enumerate(rr):
            a, b = int(indptr[r]), int(indptr[r + 1])
            assert np.array_equal(lay.src[t0 + j * L:t0 + (j + 1) * L], src[a:b])
            assert np.array_equal(lay.slot[t0 + j * L:t0 + (j + 1) * L], slot[a:b])
    assert lay.n_terms == src.size == int((lay.groups[:, 0] * lay.groups[:, 1]).sum())
    y = rng.standard_normal(n_rows) * 10.0 ** rng.integers(-5, 5, n_rows)
    tab = rng.standard_normal(40)
    ref = np.full(n_rows, np.nan)
    R.apply_rows(indptr, src, slot, tab, y, ref, 0, n_rows)
    got = np.full(n_rows, np.nan)  # empty rows must be written (0.0), not left alone
    R.apply_groups_all(lay.rows, lay.groups, lay.src, lay.slot, tab, y, got, np.zeros(2, np.int64))
    assert np.array_equal(got.view(np.int64), ref.view(np.int64))
    for nb in (2, 3):  # the parallel kernel on any block split: the same bits
        got2 = np.full(n_rows, np.nan)
        R.apply_groups_parallel(lay.rows, lay.groups, lay.src, lay.slot, tab, y, got2,
                                R.group_blocks(lay.groups, nb))
        assert np.array_equal(got2.view(np.int64), ref.view(np.int64))
    val = tab[lay.slot]
    got3 = np.full(n_rows, np.nan)
    R.apply_groups_values(lay.rows, lay.groups, lay.src, val, y, got3, np.zeros(2, np.int64))
    assert np.array_equal(got3.view(np.int64), ref.view(np.int64))
    # packed terms, four rows of a group at a time (tails of 1-3 rows): the same bits
    term = R.packed_terms(lay.src, lay.slot, n_rows)
    assert term.dtype == np.uint32 and np.array_equal(term >> 8, lay.src) \
        and np.array_equal(term & 255, lay.slot)
    got4 = np.full(n_rows, np.nan)
    R.apply_packed_all(lay.rows, lay.groups, term, lay.slot[:0], tab, y, got4,
                       np.zeros(2, np.int64))
    assert np.array_equal(got4.view(np.int64), ref.view(np.int64))
    for nb in (2, 3):
        got5 = np.full(n_rows, np.nan)
        R.apply_packed_parallel(lay.rows, lay.groups, term, lay.slot[:0], tab, y, got5,
                                R.group_blocks(lay.groups, nb))
        assert np.array_equal(got5.view(np.int64), ref.view(np.int64))


def test_packed_terms_only_where_they_fit():
    src = np.array([0, 5, 2 ** 24 - 1], dtype=np.uint32)
    slot = np.array([255, 0, 7], dtype=np.uint8)
    term = R.packed_terms(src, slot, 2 ** 24 - 1 + 1)
    assert term is None  # 2**24 moments: a source no longer fits 24 bits
    term = R.packed_terms(src, slot, 2 ** 24 - 1)
    assert term.tolist() == [255, 5 << 8, (2 ** 24 - 1) << 8 | 7]
    assert R.packed_terms(src, slot.astype(np.uint16), 10) is None
    with pytest.raises(ValueError, match="uint8"):
        R.rhs_kernel(np.uint16, packed=True)


def test_packed_and_unpacked_kernels_give_the_same_bits():
    """The RHS and the DP5(4) / DOP853 kernels on packed terms (what the integrators use
    with uint8 slots) against the same kernels on separate sources and slots."""
    from attndyn.kernels import integrate as I
    h, y0 = _tied(9, weight_decay=0.5)
    s = R.fused_system(h._system)
    order, rows, groups, term, slot, gather, packed = R.kernel_layout(s)
    assert packed and order is None and R.kernel_layout(s)[3] is term  # made once
    lay = R.row_layout(s)
    t = np.array([0.0, 0.05, 0.2])
    bufs = lambda: (np.empty(s.gather.size), np.empty(s.n_grad),  # noqa: E731
                    np.empty(s.n_grad + s.consts.size), np.empty(s.slot_coef.size))
    ones = np.array([0, groups.shape[0]])
    dys = []
    for pk, srcs in ((False, lay.src), (True, term)):
        dy = np.full(y0.size, np.nan)
        R.rhs_kernel(s.slot.dtype, packed=pk)(y0, s.gfun, s.gparams, gather, s.consts, rows,
                                              groups, srcs, slot, s.slot_coef, s.slot_ent,
                                              ones, *bufs(), dy)
        dys.append(dy)
    assert np.array_equal(dys[0], dys[1]) and np.array_equal(R.rhs_into(s, y0), dys[0])
    for meth in ("dopri5", "dop853"):
        A, B, C, E, E3, eo, kind = I.TABLEAUX[meth]
        outs = []
        for pk, srcs in ((False, lay.src), (True, term)):
            ys, info, tinfo, yend = (np.zeros((t.size, y0.size)), np.zeros(6, np.int64),
                                     np.zeros(2), np.empty(y0.size))
            I.rk_kernel(s.slot.dtype, False, pk)(
                y0, 0.0, t, 1e-10, 1e-12, 0.0, np.inf, 10 ** 5, 1e100, A, B, C, E, E3, eo, kind,
                s.gfun, s.gparams, gather, s.consts, rows, groups, srcs, slot, s.slot_coef,
                s.slot_ent, ones, s.n_grad, ys, info, tinfo, yend)
            outs.append((ys, info))
        assert outs[0][1][0] == 0 and np.array_equal(outs[0][1], outs[1][1])
        assert np.array_equal(outs[0][0], outs[1][0])
        got = run_rk(meth, h._system, y0, t, 1e-10, 1e-12, 10 ** 5, 1e100, np.inf)
        assert np.array_equal(got[0], outs[0][0])


@pytest.mark.parametrize("kind", [0, 1])
def test_error_norm_bits(kind):
    """The Runge-Kutta error norm (blocked stage sums, the quotients in a loop of their
    own) against the entry-by-entry loop written out in Python: the same bits."""
    import math

    from attndyn.kernels import integrate as I
    rng = np.random.default_rng(kind)
    n, ns = 1100, 7  # three blocks of 512, the last one partial
    K = rng.standard_normal((ns, n)) * 10.0 ** rng.integers(-3, 3, (ns, n))
    E, E3 = rng.standard_normal(ns), rng.standard_normal(ns)
    y, ynew = rng.standard_normal(n), rng.standard_normal(n)
    h, rtol, atol = 0.37, 1e-8, 1e-10
    got = I._err_norm(K, E, E3, kind, h, y, ynew, rtol, atol, np.empty(n),
                      np.empty(2 * I._BLK))
    s = s5 = s3 = 0.0
    for i in range(n):
        sc = atol + rtol * max(abs(y[i]), abs(ynew[i]))
        e5 = e3 = 0.0
        for j in range(ns):
            e5 = e5 + E[j] * K[j, i]
            e3 = e3 + E3[j] * K[j, i]
        if kind == 0:
            v = h * e5 / sc
            s += v * v
        else:
            v5, v3 = e5 / sc, e3 / sc
            s5 += v5 * v5
            s3 += v3 * v3
    ref = math.sqrt(s / n) if kind == 0 else abs(h) * s5 / math.sqrt((s5 + 0.01 * s3) * n)
    assert got == ref


def test_group_blocks_cover_the_groups_in_order():
    rng = np.random.default_rng(3)
    lay = R.group_rows(*_random_csr(rng, 5000, 20), chunk=64)
    ng = lay.groups.shape[0]
    assert np.array_equal(R.group_blocks(lay.groups, 1), [0, ng])
    b = R.group_blocks(lay.groups, 2)
    assert b[0] == 0 and b[-1] == ng and np.all(np.diff(b) > 0) and b.size == 3
    terms = lay.groups[:, 0] * lay.groups[:, 1]
    half = terms[:b[1]].sum() / terms.sum()
    assert 0.4 < half < 0.6  # about equal work per thread


def test_empty_structure_layout():
    lay = R.group_rows(np.zeros(1, dtype=np.uint64), np.zeros(0, np.uint32),
                       np.zeros(0, np.uint8))
    assert lay.rows.size == 0 and lay.groups.shape == (0, 4) and lay.n_terms == 0


def _tied(order, weight_decay=0.0):
    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2,
                          weight_decay=weight_decay)
    h = m.hierarchy(order)
    return h, h.initial_state(FreeInit([wishart(0.5, 0.5), scalar(1)]))


def test_row_layout_is_cached_per_array_set():
    h, _ = _tied(6)
    s = R.fused_system(h._system)
    a = R.row_layout(s)
    assert R.row_layout(s) is a
    s2 = R.fused_system(h._system)
    s2.src = s.src.copy()  # other array objects: a new layout, never the stale one
    assert R.row_layout(s2) is not a


def test_auto_threads(monkeypatch):
    import numba
    assert R.auto_threads(0) == 1
    assert R.auto_threads(R.PARALLEL_TERMS_PER_THREAD - 1) == 1
    assert R.auto_threads(10 ** 12, limit=1) == 1
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    assert R.auto_threads(10 ** 12) == 1  # NUMBA_NUM_THREADS=1: never a second thread
    monkeypatch.undo()
    if numba.config.NUMBA_NUM_THREADS >= 2:
        assert R.auto_threads(10 ** 12) == numba.get_num_threads() >= 1
        assert R.auto_threads(2 * R.PARALLEL_TERMS_PER_THREAD, limit=2) == \
            min(2, numba.get_num_threads())


def test_threads_give_the_same_bits(monkeypatch):
    """rhs_into, DP5(4) and Taylor with the threads forced on: the one-thread bits, and
    ``info[5]`` says how many ran."""
    import numba
    h, y0 = _tied(8, weight_decay=1.0)
    t = np.array([0.0, 0.05, 0.1])
    ref_dy = R.rhs_into(h._system, y0, threads=1)
    ref_rk = run_rk("dopri5", h._system, y0, t, 1e-10, 1e-12, 10 ** 5, 1e100, np.inf, threads=1)
    ref_ty = run_taylor(h._system, h._gamma_program, y0, t, 1e-10, 1000, 1e100, np.inf,
                        threads=1)
    assert ref_rk[1][5] == 1 and ref_ty[1][5] == 1
    monkeypatch.setattr(R, "PARALLEL_TERMS_PER_THREAD", 1)
    want = min(2, numba.get_num_threads()) if numba.config.NUMBA_NUM_THREADS >= 2 else 1
    assert np.array_equal(R.rhs_into(h._system, y0, threads=2), ref_dy)
    rk = run_rk("dopri5", h._system, y0, t, 1e-10, 1e-12, 10 ** 5, 1e100, np.inf, threads=2)
    ty = run_taylor(h._system, h._gamma_program, y0, t, 1e-10, 1000, 1e100, np.inf, threads=2)
    assert rk[1][5] == want and ty[1][5] == want
    assert np.array_equal(rk[0], ref_rk[0]) and np.array_equal(rk[1][:5], ref_rk[1][:5])
    assert np.array_equal(ty[0], ref_ty[0]) and np.array_equal(ty[1][:5], ref_ty[1][:5])


def test_taylor_program_check_is_not_skipped_for_new_arrays():
    h, y0 = _tied(4)
    prog = h._gamma_program
    t = np.array([0.0, 0.01])
    run_taylor(h._system, prog, y0, t, 1e-10, 100, 1e100, np.inf)  # checked and remembered
    bad = (prog[0], np.full_like(prog[1], 99), prog[2], prog[3]) if prog[1].size else \
        (prog[0], prog[1], prog[2], np.full_like(prog[3], 99))
    if prog[1].size == 0 and prog[3].size == 0:
        pytest.skip("empty program")
    with pytest.raises(ValueError, match="program"):
        run_taylor(h._system, bad, y0, t, 1e-10, 100, 1e100, np.inf)


@pytest.mark.parametrize("weight_decay", [0.0, 1.0])
def test_taylor_constant_operator_drops_only_zero_terms(weight_decay):
    """The Taylor kernel's constant-Gamma operator (kernels/taylor.py, ``_const_layout``)
    keeps every nonzero term with its value: its product is the full product (zero terms
    only add zeros), and without weight decay the decay terms are gone."""
    from attndyn.kernels.taylor import _const_layout
    h, y0 = _tied(8, weight_decay)
    s = R.fused_system(h._system)
    rows, groups, src, val = _const_layout(s, h._gamma_program)
    assert _const_layout(s, h._gamma_program)[3] is val  # cached per array set
    y = y0 * (1.0 + 0.1 * np.random.default_rng(0).standard_normal(y0.size))
    got = np.full_like(y, np.nan)
    R.apply_groups_values(rows, groups, src, val, y, got, np.zeros(2, np.int64))
    ref = R.rhs_into(s, y)  # Gamma is constant: the RHS is this linear operator
    assert np.array_equal(got, ref)
    n_decay = int(np.count_nonzero(s.slot_ent[s.slot] == s.n_grad))
    assert n_decay > 0
    expect = s.src.size - (n_decay if weight_decay == 0.0 else 0)
    assert src.size == val.size == expect and np.all(val != 0.0)


def test_taylor_absmax_bits():
    """The Taylor step size's max |v| from sign-cleared bit patterns: the float maximum,
    and NaN whenever an entry is NaN (a float max() would skip it)."""
    from attndyn.kernels.taylor import _absmax
    rng = np.random.default_rng(5)
    buf = np.zeros(1)
    for _ in range(20):
        v = rng.standard_normal(int(rng.integers(1, 300))) * 10.0 ** rng.integers(-300, 300)
        assert _absmax(v, buf) == np.max(np.abs(v))
    assert _absmax(np.array([-0.0, 0.0]), buf) == 0.0
    assert _absmax(np.zeros(0), buf) == 0.0
    assert _absmax(np.array([1.0, -np.inf, 2.0]), buf) == np.inf
    assert np.isnan(_absmax(np.array([1.0, np.nan, np.inf]), buf))
    assert np.isnan(_absmax(np.array([-np.nan, 1.0]), buf))


def test_taylor_workspace_reuse_gives_fresh_results(monkeypatch):
    """The per-thread coefficient workspace (kernels/taylor.py) carries nothing between
    runs: alternating orders and sizes give the results of fresh arrays."""
    import attndyn.kernels.taylor as T
    runs = []
    for order, wd in ((6, 0.0), (4, 1.0), (6, 0.0)):
        h, y0 = _tied(order, wd)
        t = np.array([0.0, 0.05, 0.1])
        runs.append((h, y0, t, run_taylor(h._system, h._gamma_program, y0, t, 1e-10, 1000,
                                          1e100, np.inf, order=9 + order)))
    monkeypatch.setattr(T, "WORKSPACE_KEEP_BYTES", 0)
    for h, y0, t, (ys, info, *_) in runs:
        ys2, info2, *_ = run_taylor(h._system, h._gamma_program, y0, t, 1e-10, 1000, 1e100,
                                    np.inf, order=9 + h.order)
        assert np.array_equal(ys, ys2) and np.array_equal(info, info2)
