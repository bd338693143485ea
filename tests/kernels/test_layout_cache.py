"""The constant operator of the Taylor kernel kept on disk (kernels/_layoutcache.py): a
folder written next to the structure file is read back instead of rebuilding the layout
and touch order, only when every check passes; a damaged, foreign or stale folder is
rebuilt, and the kernel gives the same bits either way."""

import os

import numpy as np
import pytest

from attndyn.kernels import _layoutcache as LC
from attndyn.kernels import rhs as R
from attndyn.kernels import taylor as T


def _hier(order=8, weight_decay=0.5, cache_dir=None):
    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2,
                          weight_decay=weight_decay)
    h = m.hierarchy(order)
    return h, h.initial_state(FreeInit([wishart(0.5, 0.5), scalar(1)]))


def _bits(a):
    return np.ascontiguousarray(a).view(np.int64)


def _run(prep, y0):
    ys, info, tinfo, yend, _ = T.run_prepared(prep, y0, np.array([0.0, 0.02, 0.05]), 1e-10,
                                              10 ** 5, 1e100, np.inf)
    return ys[:info[1]], yend, info[:4].copy()


@pytest.fixture(params=[False, True], ids=["state-order", "touch-order"])
def small(request, monkeypatch):
    """Caching from 0 terms on; with ``touch-order`` the first-touch renumbering too."""
    monkeypatch.setattr(T, "CACHE_MIN_TERMS", 0)
    if request.param:
        monkeypatch.setattr(R, "PERMUTE_TERMS", 0)
    return request.param


def _no_rebuild(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the constant operator was rebuilt")
    monkeypatch.setattr(T, "_const_layout", boom)


def _folder(tmp_path):
    folders = [p for p in os.listdir(tmp_path) if ".const-" in p]
    assert len(folders) == 1, folders
    return tmp_path / folders[0]


def _written(tmp_path):
    """``(system, files, folder)`` of the order-8 operator written into ``tmp_path``."""
    h, _ = _hier()
    s, prog = h._taylor_system, h._gamma_program
    cache = (str(tmp_path / "structure.npz"), "stamp")
    T.prepare_taylor(s, prog, cache=cache)
    return s, LC.const_files(cache, s, T._const_values(s, prog)), _folder(tmp_path)


def _resum(folder):
    """Checksums made to match the files as they now are."""
    names = [n for n in ("rows", "groups", "src", "val", "gather", "new", "perm")
             if (folder / f"{n}.npy").exists()]
    np.save(folder / "sums.npy", np.array([LC._digest(np.load(folder / f"{n}.npy"))
                                           for n in names], dtype=np.int64))


def test_round_trip_reads_the_same_operator_and_bits(tmp_path, monkeypatch, small):
    h, y0 = _hier()
    s, prog = h._taylor_system, h._gamma_program
    ref = T.prepare_taylor(s, prog)  # no cache: made in memory
    cache = (str(tmp_path / "structure.npz"), "stamp-1")
    made = T.prepare_taylor(s, prog, cache=cache)  # made and written
    folder = _folder(tmp_path)
    assert (folder / "src.npy").exists() and (folder / "new.npy").exists() == small
    _no_rebuild(monkeypatch)
    read = T.prepare_taylor(s, prog, cache=cache)
    assert (read.touch is None) == (not small)
    for a, b in zip(ref.head + ref.tail, read.head + read.tail):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    want = _run(ref, y0)
    for prep in (made, read):
        got = _run(prep, y0)
        assert np.array_equal(got[2], want[2])
        assert np.array_equal(_bits(got[0]), _bits(want[0]))
        assert np.array_equal(_bits(got[1]), _bits(want[1]))


def test_another_stamp_or_other_values_get_their_own_folder(tmp_path, small):
    h, _ = _hier(weight_decay=0.5)
    h2, _ = _hier(weight_decay=0.25)  # other decay values: another operator
    base = str(tmp_path / "structure.npz")
    T.prepare_taylor(h._taylor_system, h._gamma_program, cache=(base, "a"))
    T.prepare_taylor(h._taylor_system, h._gamma_program, cache=(base, "b"))
    T.prepare_taylor(h2._taylor_system, h2._gamma_program, cache=(base, "a"))
    assert len([p for p in os.listdir(tmp_path) if ".const-" in p]) == 3


def _damage_src_bytes(folder):
    with open(folder / "src.npy", "r+b") as f:
        f.seek(-16, os.SEEK_END)
        f.write(b"\xff" * 16)  # sources out of range


def _damage_truncate(folder):
    with open(folder / "val.npy", "r+b") as f:
        f.truncate(200)


def _damage_dtype(folder):
    a = np.load(folder / "src.npy")
    np.save(folder / "src.npy", a.astype(np.int64))


def _damage_values(folder):
    a = np.load(folder / "val.npy")
    a[a.size // 2] += 1.0  # one value of a sampled row changed: the sample check sees it
    np.save(folder / "val.npy", a)


def _damage_groups(folder):
    g = np.load(folder / "groups.npy")
    g[0, 1] += 1
    np.save(folder / "groups.npy", g)


def _damage_garbage(folder):
    (folder / "rows.npy").write_bytes(b"not an npy file")


def _damage_sums(folder):
    (folder / "sums.npy").unlink()


@pytest.mark.parametrize("damage", [_damage_src_bytes, _damage_truncate, _damage_dtype,
                                    _damage_groups, _damage_garbage, _damage_values,
                                    _damage_sums])
def test_a_damaged_folder_is_rebuilt(tmp_path, monkeypatch, small, damage):
    h, y0 = _hier()
    s, prog = h._taylor_system, h._gamma_program
    cache = (str(tmp_path / "structure.npz"), "stamp")
    want = _run(T.prepare_taylor(s, prog), y0)
    T.prepare_taylor(s, prog, cache=cache)
    folder = _folder(tmp_path)
    damage(folder)
    assert LC.load_const_operator(LC.const_files(cache, s, T._const_values(s, prog)), s) is None
    got = _run(T.prepare_taylor(s, prog, cache=cache), y0)
    assert np.array_equal(_bits(got[0]), _bits(want[0]))
    # the damaged folder was replaced: the next call reads it
    assert LC.load_const_operator(LC.const_files(cache, s, T._const_values(s, prog)), s)


def test_a_changed_value_with_its_checksum_is_refused_by_the_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "CACHE_MIN_TERMS", 0)
    monkeypatch.setattr(LC, "SAMPLE_ROWS", 10 ** 6)  # every row compared
    s, files, folder = _written(tmp_path)
    assert LC.load_const_operator(files, s) is not None
    _damage_values(folder)
    # checksums made to match: only the rows rebuilt from the structure can see it
    _resum(folder)
    assert LC.load_const_operator(files, s) is None


def test_a_folder_of_another_system_is_refused(tmp_path, small):
    h8, _ = _hier(order=8)
    h7, _ = _hier(order=7)
    cache = (str(tmp_path / "structure.npz"), "stamp")
    T.prepare_taylor(h7._taylor_system, h7._gamma_program, cache=cache)
    s, prog = h8._taylor_system, h8._gamma_program
    files = LC.const_files(cache, s, T._const_values(s, prog))
    os.rename(_folder(tmp_path), files.folder)  # order 7's operator under order 8's name
    assert LC.load_const_operator(files, s) is None


def test_the_hierarchy_keeps_its_operator_next_to_the_structure(tmp_path, monkeypatch):
    import attndyn.numeric.attention.tied.hierarchy as TH
    from attndyn.symbolic import hierarchy as SH
    monkeypatch.setattr(SH, "_CACHE_MIN_TERMS", 0)
    monkeypatch.setattr(T, "CACHE_MIN_TERMS", 0)
    monkeypatch.setattr(TH, "_structure_cache_dir", lambda: tmp_path)
    h, y0 = _hier(order=9)
    assert h.structure.cache_id is not None and h.structure.cache_id[0].startswith(str(tmp_path))
    t = [0.0, 0.02, 0.05]
    first = h.integrate(y0, t, check=None, method="truncation")
    assert len([p for p in os.listdir(tmp_path) if ".const-" in p]) == 1
    _no_rebuild(monkeypatch)
    h2, _ = _hier(order=9)  # a new hierarchy: structure and operator read from the folder
    again = h2.integrate(y0, t, check=None, method="truncation")
    assert np.array_equal(_bits(first.y), _bits(again.y))


def test_a_value_outside_the_sampled_rows_is_refused_by_the_checksum(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "CACHE_MIN_TERMS", 0)
    monkeypatch.setattr(LC, "SAMPLE_ROWS", 1)  # only the first layout position compared
    s, files, folder = _written(tmp_path)
    a = np.load(folder / "val.npy")
    a[-1] *= 1.0 + 2.0 ** -40  # the last term: a row the sample does not rebuild
    np.save(folder / "val.npy", a)
    assert LC.load_const_operator(files, s) is None


@pytest.mark.parametrize("dtype, size", [(np.float64, 3 * LC.DIGEST_BLOCK + 5),
                                         (np.uint32, 2 * LC.DIGEST_BLOCK + 3),
                                         (np.uint64, 4 * LC.DIGEST_BLOCK), (np.uint8, 13)])
def test_the_checksum_sees_a_flipped_bit_and_moved_blocks(dtype, size):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 255, size=size * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
    d = LC._digest(a)
    assert d == LC._digest(a.copy()) and isinstance(d, int)
    raw = a.view(np.uint8)
    for pos in rng.integers(0, raw.size, size=8):
        b = raw.copy()
        b[pos] ^= np.uint8(1 << int(rng.integers(0, 8)))
        assert LC._digest(b.view(dtype)) != d
    assert LC._digest(raw[:-1]) != LC._digest(raw)  # a lost byte, even a zero one
    assert LC._digest(np.zeros(9, np.uint8)) != LC._digest(np.zeros(10, np.uint8))
    blk = 8 * LC.DIGEST_BLOCK
    if raw.size >= 2 * blk:  # two whole blocks swapped: the same total, another sequence
        b = raw.copy()
        b[:blk], b[blk:2 * blk] = raw[blk:2 * blk], raw[:blk]
        assert LC._digest(b.view(dtype)) != d


def test_a_permutation_that_is_not_the_inverse_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "CACHE_MIN_TERMS", 0)
    monkeypatch.setattr(R, "PERMUTE_TERMS", 0)
    s, files, folder = _written(tmp_path)
    perm = np.load(folder / "perm.npy")
    bad = perm.copy()
    bad[[-1, -2]] = bad[[-2, -1]]  # still a permutation, no longer new's inverse
    np.save(folder / "perm.npy", bad)
    _resum(folder)
    assert LC.load_const_operator(files, s) is None
    np.save(folder / "perm.npy", perm)  # restored: read again
    _resum(folder)
    assert LC.load_const_operator(files, s) is not None
    assert LC._inverse(perm, np.argsort(perm), perm.size, chunk=3)
    assert not LC._inverse(bad, np.argsort(perm), perm.size, chunk=3)
