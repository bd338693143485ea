"""numba's cache of the kernels is dropped when any kernels source changes.

numba stamps a cached function with its own file's hash only, so a kernel that inlines
a jitted callee of another module would keep stale machine code when only the callee's
file changed. ``kernels/_cachedir.drop_stale_numba_cache`` treats the package's cache as
one unit."""

import os
import pathlib

import numba
import numba.core.caching as nc
import numba.core.config as ncfg

from attndyn.kernels import _cachedir as cd


def _pkg(tmp_path):
    pkg = tmp_path / "kernels"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    return 1\n")
    (pkg / "b.py").write_text("def g():\n    return 2\n")
    return pkg


def _fill(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for n in ("a.f-1.py312.nbi", "a.f-1.py312.0.nbc", "a.cpython-312.pyc"):
        (folder / n).write_bytes(b"x")


def _left(folder):
    return sorted(n for n in os.listdir(folder) if not n.startswith("attndyn-"))


def test_stale_files_are_dropped_once_and_kept_while_sources_are_unchanged(tmp_path,
                                                                             monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(ncfg, "CACHE_DIR", "")
    monkeypatch.setattr(cd, "_user_wide_numba_dir", lambda: str(tmp_path / "userwide"))
    pkg = _pkg(tmp_path)
    cache = pkg / "__pycache__"
    _fill(cache)
    # files from before any stamp: their sources are unknown, so they go
    assert cd.drop_stale_numba_cache(pkg) == [str(cache)]
    assert _left(cache) == ["a.cpython-312.pyc"]
    _fill(cache)
    assert cd.drop_stale_numba_cache(pkg) == []          # same sources: kept
    assert len(_left(cache)) == 3
    (pkg / "b.py").write_text("def g():\n    return 3\n")  # a callee's file changes
    assert cd.drop_stale_numba_cache(pkg) == [str(cache)]
    assert _left(cache) == ["a.cpython-312.pyc"]
    assert not (tmp_path / "userwide").exists()        # in-tree works: nothing made there


def test_a_fresh_folder_is_stamped_before_numba_fills_it(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(ncfg, "CACHE_DIR", "")
    monkeypatch.setattr(cd, "_user_wide_numba_dir", lambda: str(tmp_path / "userwide"))
    pkg = _pkg(tmp_path)
    cd.drop_stale_numba_cache(pkg)
    cache = pkg / "__pycache__"
    assert (cache / "attndyn-kernels.sources").read_text().strip() == \
        cd.kernels_source_hash(pkg)
    _fill(cache)                                          # numba's first compile
    assert cd.drop_stale_numba_cache(pkg) == []
    assert len(_left(cache)) == 3


def test_the_numba_cache_dir_subfolder_is_numbas_own(tmp_path, monkeypatch):
    root = tmp_path / "nroot"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(root))
    monkeypatch.setattr(ncfg, "CACHE_DIR", str(root))
    monkeypatch.setattr(cd, "_user_wide_numba_dir", lambda: str(tmp_path / "userwide"))
    pkg = _pkg(tmp_path)

    def f():
        return 1
    expected = nc.UserProvidedCacheLocator(f, str(pkg / "a.py")).get_cache_path()
    assert cd.numba_cache_dirs(pkg)[1] == expected
    _fill(pathlib.Path(expected))
    cleared = cd.drop_stale_numba_cache(pkg)
    assert expected in cleared and _left(expected) == ["a.cpython-312.pyc"]


def test_the_installed_kernels_are_stamped():
    import attndyn.kernels as k
    pkg = os.path.dirname(os.path.abspath(k.__file__))
    digest = cd.kernels_source_hash(pkg)
    stamps = [os.path.join(d, "attndyn-kernels.sources") for d in cd.numba_cache_dirs(pkg)]
    assert any(os.path.exists(s) and open(s).read().strip() == digest for s in stamps)
    assert numba.__version__


def test_numbas_user_wide_folder_is_stamped_when_in_tree_is_unusable(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(ncfg, "CACHE_DIR", "")
    monkeypatch.setattr(cd, "_user_wide_numba_dir", lambda: str(tmp_path / "userwide"))
    pkg = _pkg(tmp_path)
    (pkg / "__pycache__").write_text("a file where the folder would be")
    wide = pathlib.Path(cd.numba_cache_dirs(pkg)[-1])
    assert wide.parent == tmp_path / "userwide"
    _fill(wide)
    assert cd.drop_stale_numba_cache(pkg) == [str(wide)]
    assert _left(wide) == ["a.cpython-312.pyc"]
    assert cd.drop_stale_numba_cache(pkg) == []


def test_dependent_folders_follow_the_kernels_and_optionally_their_own_sources(tmp_path,
                                                                               monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(ncfg, "CACHE_DIR", "")
    monkeypatch.setattr(cd, "_user_wide_numba_dir", lambda: str(tmp_path / "userwide"))
    (tmp_path / "gen").mkdir()
    (tmp_path / "mod").mkdir()
    gen, mod = _pkg(tmp_path / "gen"), _pkg(tmp_path / "mod")
    for folder, own in ((gen, False), (mod, True)):
        cd.drop_stale_dependent_cache(folder, own_sources=own)
        _fill(folder / "__pycache__")
        (folder / "c.py").write_text("x = 1\n")           # a new generated file / module
        cleared = cd.drop_stale_dependent_cache(folder, own_sources=own)
        assert bool(cleared) is own
    monkeypatch.setattr(cd, "_KERNELS_DIGEST", ["another kernels version"])
    assert cd.drop_stale_dependent_cache(gen, own_sources=False) == [str(gen / "__pycache__")]
