"""The Runge-Kutta kernels' layout kept on disk (kernels/_layoutcache.py,
``cached_kernel_layout``): the grouped rows, packed terms and first-touch order of a large
system are written next to the structure file and read back instead of being made again,
only when every check passes; a damaged, foreign or stale folder is rebuilt, and the
integrators give the same bits either way."""

import os
from types import SimpleNamespace

import numpy as np
import pytest

from attndyn.kernels import _layoutcache as LC
from attndyn.kernels import rhs as R
from attndyn.kernels.integrate import run_rk


def _hier(order=8):
    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=0.5)
    h = m.hierarchy(order)
    return h, h.initial_state(FreeInit([wishart(0.5, 0.5), scalar(1)]))


def _fresh(s):
    """The same arrays in a new namespace: no layout kept on it yet."""
    ns = SimpleNamespace(**vars(s))
    ns.__dict__.pop("disk_layout", None)
    return ns


def _bits(a):
    return np.ascontiguousarray(a).view(np.int64)


T_EVAL = np.array([0.0, 0.02, 0.05])


def _run(s, y0, cache=None, method="dopri5"):
    ys, info, tinfo, yend = run_rk(method, s, y0, T_EVAL, 1e-10, 1e-12, 10 ** 5, 1e100, np.inf,
                                   threads=1, cache=cache)
    return ys[:info[1]], yend, info[:5].copy()


def _same(a, b):
    assert np.array_equal(a[2], b[2])
    assert np.array_equal(_bits(a[0]), _bits(b[0])) and np.array_equal(_bits(a[1]), _bits(b[1]))


@pytest.fixture(params=[False, True], ids=["state-order", "touch-order"])
def small(request, monkeypatch):
    """Kept on disk from 0 terms on; with ``touch-order`` the first-touch renumbering too."""
    monkeypatch.setattr(LC, "LAYOUT_MIN_TERMS", 0)
    if request.param:
        monkeypatch.setattr(R, "PERMUTE_TERMS", 0)
    return request.param


def _no_rebuild(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the layout was made again")
    monkeypatch.setattr(R, "kernel_layout", boom)


def _folder(tmp_path):
    folders = [p for p in os.listdir(tmp_path) if ".layout-" in p]
    assert len(folders) == 1, folders
    return tmp_path / folders[0]


def test_round_trip_reads_the_same_layout_and_bits(tmp_path, monkeypatch, small):
    h, y0 = _hier()
    s = h._system
    cache = (str(tmp_path / "structure.npz"), "stamp-1")
    ref = {m: _run(_fresh(s), y0, method=m) for m in ("dopri5", "dop853")}
    made = _run(_fresh(s), y0, cache)  # made and written
    folder = _folder(tmp_path)
    assert (folder / "term.npy").exists() and (folder / "new.npy").exists() == small
    _no_rebuild(monkeypatch)
    for m in ("dopri5", "dop853"):
        _same(_run(_fresh(s), y0, cache, method=m), ref[m])  # read from the folder
    _same(made, ref["dopri5"])


def test_a_read_layout_is_kept_on_the_system(tmp_path, monkeypatch, small):
    h, y0 = _hier()
    s = _fresh(h._system)
    cache = (str(tmp_path / "structure.npz"), "stamp")
    first = _run(s, y0, cache)
    calls = []
    real = LC.load_layout
    monkeypatch.setattr(LC, "load_layout", lambda *a: calls.append(1) or real(*a))
    _same(_run(s, y0, cache), first)
    assert calls == []  # the second run read nothing
    s2 = _fresh(s)
    _same(_run(s2, y0, cache), first)
    assert calls == [1]


def test_small_systems_and_no_cache_leave_no_folder(tmp_path):
    h, y0 = _hier()
    cache = (str(tmp_path / "structure.npz"), "stamp")
    _run(_fresh(h._system), y0, cache)  # below LAYOUT_MIN_TERMS
    _run(_fresh(h._system), y0)
    assert not [p for p in os.listdir(tmp_path) if ".layout-" in p]


def _damage_truncate(folder):
    with open(folder / "term.npy", "r+b") as f:
        f.truncate(200)


def _damage_garbage(folder):
    (folder / "rows.npy").write_bytes(b"not an npy file")


def _damage_dtype(folder):
    np.save(folder / "term.npy", np.load(folder / "term.npy").astype(np.int64))


def _damage_sums(folder):
    (folder / "sums.npy").unlink()


def _damage_term(folder):
    a = np.load(folder / "term.npy")
    a[-1] ^= 1 << 9  # another source for the last term
    np.save(folder / "term.npy", a)


def _damage_groups(folder):
    g = np.load(folder / "groups.npy")
    g[0, 1] += 1
    np.save(folder / "groups.npy", g)


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_garbage, _damage_dtype,
                                    _damage_sums, _damage_term, _damage_groups])
def test_a_damaged_folder_is_rebuilt(tmp_path, small, damage):
    h, y0 = _hier()
    s = h._system
    cache = (str(tmp_path / "structure.npz"), "stamp")
    want = _run(_fresh(s), y0)
    _run(_fresh(s), y0, cache)
    folder = _folder(tmp_path)
    damage(folder)
    assert LC.load_layout(str(folder), s) is None
    _same(_run(_fresh(s), y0, cache), want)
    assert LC.load_layout(str(folder), s) is not None  # replaced: the next process reads it


def _resum(folder):
    names = [n for n in ("rows", "groups", "term", "gather", "new", "perm")
             if (folder / f"{n}.npy").exists()]
    np.save(folder / "sums.npy", np.array([LC._digest(np.load(folder / f"{n}.npy"))
                                           for n in names], dtype=np.int64))


def _written(tmp_path):
    """``(system, folder)`` of the order-8 layout written into ``tmp_path``."""
    h, y0 = _hier()
    cache = (str(tmp_path / "structure.npz"), "stamp")
    _run(_fresh(h._system), y0, cache)
    return h._system, _folder(tmp_path)


@pytest.mark.parametrize("what", ["slot", "source", "sampled"])
def test_terms_out_of_range_or_changed_are_refused_with_their_checksums(tmp_path, monkeypatch,
                                                                         what):
    monkeypatch.setattr(LC, "LAYOUT_MIN_TERMS", 0)
    s, folder = _written(tmp_path)
    a = np.load(folder / "term.npy")
    if what == "slot":  # a slot past the table: the kernel would read out of bounds
        a[-1] = (a[-1] >> np.uint32(8) << np.uint32(8)) | np.uint32(s.slot_coef.size)
    elif what == "source":  # a source past the moments
        a[-1] = np.uint32(s.indptr.size - 1) << np.uint32(8)
    else:  # another valid source in a row the sample rebuilds (the last layout position)
        monkeypatch.setattr(LC, "SAMPLE_ROWS", 2)
        a[-1] ^= np.uint32(1 << 8)
    np.save(folder / "term.npy", a)
    _resum(folder)  # checksums made to match: only the range or row checks can see it
    assert LC.load_layout(str(folder), s) is None


def test_a_permutation_that_is_not_the_inverse_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(LC, "LAYOUT_MIN_TERMS", 0)
    monkeypatch.setattr(R, "PERMUTE_TERMS", 0)
    s, folder = _written(tmp_path)
    perm = np.load(folder / "perm.npy")
    perm[[0, 1]] = perm[[1, 0]]
    np.save(folder / "perm.npy", perm)
    _resum(folder)
    assert LC.load_layout(str(folder), s) is None


def test_a_folder_of_another_system_is_refused(tmp_path, small):
    h8, y8 = _hier(order=8)
    h7, y7 = _hier(order=7)
    cache = (str(tmp_path / "structure.npz"), "stamp")
    _run(_fresh(h7._system), y7, cache)
    folder = LC.layout_folder(cache, h8._system)
    os.rename(_folder(tmp_path), folder)  # order 7's layout under order 8's name
    assert LC.load_layout(folder, h8._system) is None


def test_the_hierarchy_keeps_its_layout_next_to_the_structure(tmp_path, monkeypatch):
    import attndyn.numeric.attention.tied.hierarchy as TH
    from attndyn.symbolic import hierarchy as SH
    monkeypatch.setattr(SH, "_CACHE_MIN_TERMS", 0)
    monkeypatch.setattr(LC, "LAYOUT_MIN_TERMS", 0)
    monkeypatch.setattr(TH, "_structure_cache_dir", lambda: tmp_path)
    h, y0 = _hier(order=9)
    t = [0.0, 0.02, 0.05]
    first = h.integrate(y0, t, check=None, method="truncation", integrator="dopri5")
    assert len([p for p in os.listdir(tmp_path) if ".layout-" in p]) == 1
    _no_rebuild(monkeypatch)
    h2, _ = _hier(order=9)  # a new hierarchy: structure and layout read from the folder
    again = h2.integrate(y0, t, check=None, method="truncation", integrator="dopri5")
    assert np.array_equal(_bits(first.y), _bits(again.y))
