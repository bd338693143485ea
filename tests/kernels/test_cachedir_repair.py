"""numba's cache of the package's own kernels repairs itself, a full cache folder falls back
to a private one, and the shared temporary folder follows no planted link (issue 23 D3, D16)."""

from __future__ import annotations

import errno
import importlib.util
import os
import subprocess
import sys
import textwrap

import numba.core.caching as nc
import numba.core.config as ncfg
import pytest

from attndyn.kernels import _cachedir
from attndyn.kernels._cachedir import CacheWarning

POSIX = hasattr(os, "getuid")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SRC = textwrap.dedent('''
    from numba import njit

    @njit(cache=True)
    def twice(x):
        return 2.0 * x
''')


@pytest.fixture
def guarded(tmp_path, monkeypatch):
    """A module of ours (under a guarded folder) with a cached kernel, its numba cache in
    tmp_path/nc, private folders under tmp_path."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "kern.py").write_text(_SRC)
    monkeypatch.setattr(_cachedir, "_GUARD_ROOTS", list(_cachedir._GUARD_ROOTS))
    monkeypatch.setattr(_cachedir, "_WARNED", set())
    monkeypatch.setattr(_cachedir, "_MKDTEMP", {})
    monkeypatch.setattr(ncfg, "CACHE_DIR", str(tmp_path / "nc"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "nc"))
    monkeypatch.setattr(_cachedir, "private_dir", lambda name, env=None: tmp_path / "private")
    _cachedir.install_cache_guard(pkg)
    counter = iter(range(10 ** 6))

    def fresh():
        # a new module object: a new dispatcher, which reads numba's cache files again
        name = f"attndyn_test_kern_{next(counter)}"
        spec = importlib.util.spec_from_file_location(name, pkg / "kern.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.twice

    return fresh, tmp_path


def _files(folder, ext):
    return sorted(p for p in folder.rglob(f"*{ext}"))


def test_guard_is_installed_on_numba():
    assert nc.Cache._attndyn_guard
    roots = _cachedir._GUARD_ROOTS
    assert os.path.join(ROOT, "kernels") in roots and os.path.join(ROOT, "numeric") in roots


@pytest.mark.parametrize("damage", ["index-garbage", "index-truncated", "data-garbage",
                                    "data-truncated"])
def test_corrupted_cache_of_our_kernel_is_dropped_and_rebuilt(guarded, damage):
    fresh, tmp = guarded
    assert fresh()(2.0) == 4.0
    index, = _files(tmp / "nc", ".nbi")
    data, = _files(tmp / "nc", ".nbc")
    target = index if damage.startswith("index") else data
    raw = target.read_bytes()
    target.write_bytes(b"\x80\x05garbage" * 3 if damage.endswith("garbage") else raw[:len(raw) // 2])
    with pytest.warns(CacheWarning, match=r"corrupted numba cache for .*twice.* in .*nc.*; "
                                          r"deleted \d file\(s\) and recompiling"):
        assert fresh()(3.0) == 6.0
    assert fresh()(5.0) == 10.0          # rebuilt: loads again without a warning
    assert len(_files(tmp / "nc", ".nbi")) == 1


def test_other_numba_users_are_not_touched(guarded, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "kern.py").write_text(_SRC)
    spec = importlib.util.spec_from_file_location("attndyn_test_other", other / "kern.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fresh, _ = guarded
    assert _cachedir._guarded(nc.FunctionCache(fresh().py_func))
    assert not _cachedir._guarded(nc.FunctionCache(mod.twice.py_func))
    assert not _cachedir._guarded(nc.FunctionCache(nc.Cache.__init__))  # numba's own


def test_full_cache_folder_falls_back_to_a_private_one(guarded, monkeypatch):
    fresh, tmp = guarded
    real = nc.IndexDataCacheFile._open_for_write
    full = str(tmp / "nc")

    def no_space(self, filepath):
        if str(filepath).startswith(full):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, filepath)

    monkeypatch.setattr(nc.IndexDataCacheFile, "_open_for_write", no_space)
    with pytest.warns(CacheWarning, match=rf"numba cannot write its cache in {full}.* \(No space "
                                          rf"left on device\); caching in {tmp / 'private'}"):
        assert fresh()(2.0) == 4.0
    assert ncfg.CACHE_DIR == str(tmp / "private")
    assert _files(tmp / "private", ".nbi") and not _files(tmp / "nc", ".nbi")


def test_no_writable_folder_at_all_still_runs(guarded, monkeypatch):
    fresh, tmp = guarded

    def no_space(self, filepath):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(nc.IndexDataCacheFile, "_open_for_write", no_space)
    with pytest.warns(CacheWarning) as rec:
        assert fresh()(2.0) == 4.0
    text = [str(w.message) for w in rec]
    assert "Read-only file system); caching in" in text[0]
    assert "either (OSError); compiled code is not cached" in text[1]


_RUN = textwrap.dedent('''
    import numpy as np
    from attndyn.kernels import sgd
    print(sgd.standard_normal(sgd.seed_state(np.random.SeedSequence(1), lanes=1), 3).tolist())
''')


def test_the_package_kernels_repair_a_corrupted_cache(tmp_path):
    """The real thing, in fresh processes: a damaged cache of kernels/sgd.py's fill_normal."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "nc"), NUMBA_NUM_THREADS="1")

    def run():
        return subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True,
                              timeout=300, env=env, cwd=ROOT)

    first = run()
    assert first.returncode == 0, first.stderr[-2000:]
    index = [p for p in _files(tmp_path / "nc", ".nbi") if "fill_normal" in p.name]
    assert len(index) == 1
    index[0].write_bytes(b"\x80\x05not a pickle at all")
    second = run()
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout == first.stdout
    assert "corrupted numba cache for" in second.stderr and "fill_normal" in second.stderr
    third = run()
    assert third.returncode == 0 and "corrupted" not in third.stderr


@pytest.mark.skipif(not POSIX, reason="POSIX ownership and links")
def test_planted_symlink_in_the_shared_temp_folder_is_refused(tmp_path, monkeypatch):
    """Another user plants <tmp>/attndyn-<uid> as a link to a folder that passes the
    ownership check today (here: one of ours); followed, it could be repointed later."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(shared))
    monkeypatch.setenv("HOME", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder: no home cache")
    monkeypatch.delenv("ATTNDYN_CACHE_DIR", raising=False)
    monkeypatch.setattr(_cachedir, "_WARNED", set())
    monkeypatch.setattr(_cachedir, "_MKDTEMP", {})
    target = tmp_path / "looks-fine"
    target.mkdir(mode=0o700)
    planted = shared / f"attndyn-{os.getuid()}"
    planted.symlink_to(target)
    with pytest.warns(CacheWarning, match=r"attndyn-\d+ is a symbolic link owned by uid \d+"):
        folder = _cachedir.private_dir("generated")
    assert folder is not None and target not in folder.parents and folder != target
    assert not os.listdir(target)               # nothing was created through the link
    # a link one level down (inside a real private parent) is refused as well
    planted.unlink()
    monkeypatch.setattr(_cachedir, "_WARNED", set())
    monkeypatch.setattr(_cachedir, "_MKDTEMP", {})
    planted.mkdir(mode=0o700)
    (planted / "generated").symlink_to(target)
    with pytest.warns(CacheWarning, match="generated is a symbolic link"):
        folder = _cachedir.private_dir("generated")
    assert target not in folder.parents and not os.listdir(target)
