"""Issue 10, core hardening: the generated-code cache, result files, the CLI's
error policy and output paths, step limits, the scaling bounds at extreme
inputs, the deprecated module shims."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attndyn.kernels import _cachedir
from attndyn.kernels._cachedir import CacheWarning
from attndyn.numeric.core import compile as gen
from attndyn.numeric.core.results import Trajectory, load_result

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POSIX = hasattr(os, "getuid")
IS_ROOT = POSIX and os.geteuid() == 0


def _run(code, env=None, timeout=300):
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("NUMBA_NUM_THREADS", "1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=e, cwd=ROOT)


@pytest.fixture
def private_env(tmp_path, monkeypatch):
    """HOME and the temp folder inside tmp_path; ATTNDYN_CACHE_DIR unset."""
    home = tmp_path / "home"
    home.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ATTNDYN_CACHE_DIR", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    monkeypatch.setattr(_cachedir, "_WARNED", set())
    monkeypatch.setattr(_cachedir, "_MKDTEMP", {})
    return home, tmp


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


# ---------------------------------------------------------------------------
# 1. cache folders
# ---------------------------------------------------------------------------

BUILD = """
import numpy as np, attndyn
m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 + {c} * G[0, 0, 0])
print(repr(m.gamma(np.eye(2)).tolist()))
"""


def test_corrupted_numba_cache_is_deleted_and_rebuilt(tmp_path):
    # a loss no other test uses, so its generated module is fresh
    code = BUILD.format(c="0.123456789")
    env = {"ATTNDYN_CACHE_DIR": str(tmp_path / "c")}
    first = _run(code, env)
    assert first.returncode == 0, first.stderr
    files = [p for p in (tmp_path / "c" / "__pycache__").iterdir() if p.suffix in (".nbi", ".nbc")]
    assert files
    for p in files:  # garbage, not a pickle (old code: UnpicklingError on every later run)
        p.write_bytes(os.urandom(64) + b"garbage")
    second = _run(code, env)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert "corrupted numba cache" in second.stderr and "recompiling" in second.stderr
    # the entry was rebuilt: fresh cache files, not the garbage
    again = [p for p in (tmp_path / "c" / "__pycache__").iterdir() if p.suffix == ".nbi"]
    assert again and all(not p.read_bytes().endswith(b"garbage") for p in again)


BAD_SOURCE = """\
import numba
from numba import types


@numba.njit(types.void(types.float64[::1]), cache=True)
def bad(x):
    x[0] = 1j  # complex into a float array: numba's typing fails
"""


def test_failed_compile_unregisters_the_module(private_env):
    h = gen.source_hash(BAD_SOURCE)
    for _ in range(2):  # the second call must fail the same clear way (was AttributeError)
        with pytest.raises(gen.CompileError, match="could not compile the generated function 'bad'"):
            gen.load_generated(BAD_SOURCE, "bad")
        assert f"attndyn_generated_{h}" not in sys.modules
        assert (h, "bad") not in gen._loaded


def test_missing_function_is_a_clear_error(private_env):
    src = "X = 1\n"
    with pytest.raises(gen.CompileError, match="defines no function 'nope'"):
        gen.load_generated(src, "nope")
    assert f"attndyn_generated_{gen.source_hash(src)}" not in sys.modules


def test_default_folder_is_private(private_env):
    home, _ = private_env
    folder = gen.cache_dir()
    assert folder == home / ".cache" / "attndyn" / "generated"
    if POSIX:
        assert _mode(folder) == 0o700


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_world_writable_cache_dir_is_refused(private_env, tmp_path, monkeypatch):
    home, _ = private_env
    bad = tmp_path / "shared"
    bad.mkdir()
    os.chmod(bad, 0o777)
    monkeypatch.setenv("ATTNDYN_CACHE_DIR", str(bad))
    with pytest.warns(CacheWarning, match=r"writable by group and others.*using .*home"):
        folder = gen.cache_dir()
    assert folder == home / ".cache" / "attndyn" / "generated"


@pytest.mark.skipif(not IS_ROOT, reason="needs root to make a folder owned by someone else")
def test_foreign_owned_cache_dir_is_refused(private_env, tmp_path, monkeypatch):
    bad = tmp_path / "theirs"
    bad.mkdir(mode=0o700)
    os.chown(bad, 65534, 65534)
    monkeypatch.setenv("ATTNDYN_CACHE_DIR", str(bad))
    with pytest.warns(CacheWarning, match="owned by uid 65534"):
        folder = gen.cache_dir()
    assert folder != bad


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_predictable_temp_folder_planted_by_others_is_refused(private_env, tmp_path, monkeypatch):
    # home unusable -> the old code fell back to <tmp>/attndyn-<uid> whatever its mode
    home, tmp = private_env
    monkeypatch.setenv("HOME", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    planted = tmp / f"attndyn-{os.getuid()}"
    planted.mkdir()
    os.chmod(planted, 0o777)
    with pytest.warns(CacheWarning, match="writable by group and others"):
        folder = gen.cache_dir()
    assert planted not in folder.parents and folder.exists()
    assert _mode(folder) == 0o700  # a fresh mkdtemp folder


def test_unusable_env_folder_warns_once_and_names_the_folder_used(private_env, tmp_path,
                                                                  monkeypatch):
    home, _ = private_env
    f = tmp_path / "plain-file"
    f.write_text("x")
    monkeypatch.setenv("ATTNDYN_CACHE_DIR", str(f))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a = gen.cache_dir()
        b = gen.cache_dir()
    msgs = [str(w.message) for w in rec if issubclass(w.category, CacheWarning)]
    assert len(msgs) == 1, msgs
    assert f"ATTNDYN_CACHE_DIR={f}" in msgs[0] and str(a) in msgs[0]
    assert a == b == home / ".cache" / "attndyn" / "generated"


GOOD_SOURCE = """\
import numba
from numba import types


@numba.njit(types.float64(types.float64), cache=True)
def twice(x):
    return 2.0 * x + {tag}
"""


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_unsafe_numba_cache_of_generated_code_compiles_uncached(private_env, tmp_path,
                                                                monkeypatch):
    import numba.core.config as cfg

    shared = tmp_path / "numba-shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # not sticky: anyone can swap the pickles
    monkeypatch.setattr(cfg, "CACHE_DIR", str(shared))
    src = GOOD_SOURCE.format(tag="0.5")
    with pytest.warns(CacheWarning, match="compiling without caching"):
        fn = gen.load_generated(src, "twice")
    assert fn(1.0) == 2.5
    assert not any(p.suffix in (".nbi", ".nbc") for p in shared.rglob("*"))


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_unsafe_pycache_of_generated_code_compiles_uncached(private_env, monkeypatch):
    import numba.core.config as cfg

    monkeypatch.setattr(cfg, "CACHE_DIR", "")
    folder = gen.cache_dir()
    (folder / "__pycache__").mkdir()
    os.chmod(folder / "__pycache__", 0o777)
    with pytest.warns(CacheWarning, match="__pycache__ is writable by group and others"):
        fn = gen.load_generated(GOOD_SOURCE.format(tag="1.5"), "twice")
    assert fn(1.0) == 3.5


def test_locator_fallback_decision(private_env, monkeypatch, tmp_path):
    import numba.core.config as cfg

    monkeypatch.setattr(cfg, "CACHE_DIR", "")
    monkeypatch.setenv("NUMBA_CACHE_DIR", "")
    # writable install: nothing changes
    assert _cachedir.numba_locator_fallback(str(tmp_path)) is None
    # read-only install and home: a private folder, with a warning
    monkeypatch.setattr(_cachedir, "_locator_available", lambda d: False)
    with pytest.warns(CacheWarning, match="read-only install"):
        folder = _cachedir.numba_locator_fallback("/ro/site-packages/attndyn/kernels")
    assert folder is not None and cfg.CACHE_DIR == str(folder)
    assert os.environ["NUMBA_CACHE_DIR"] == str(folder)
    if POSIX:
        assert _mode(folder) == 0o700


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_unsafe_numba_cache_dir_is_replaced(private_env, monkeypatch, tmp_path):
    import numba.core.config as cfg

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setattr(cfg, "CACHE_DIR", str(shared))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(shared))
    with pytest.warns(CacheWarning, match=f"NUMBA_CACHE_DIR={shared} is writable"):
        folder = _cachedir.numba_locator_fallback(str(tmp_path))
    assert cfg.CACHE_DIR == str(folder) != str(shared)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # like /tmp: fine as a parent
    monkeypatch.setattr(cfg, "CACHE_DIR", str(sticky / "mine"))
    assert _cachedir.numba_locator_fallback(str(tmp_path)) is None


def _can_unshare():
    if not IS_ROOT or shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m for a read-only mount")
def test_read_only_install_and_home(tmp_path):
    """The package folder and HOME mounted read-only (a private mount
    namespace): numba alone fails with "no locator available"; attndyn falls
    back to a private NUMBA_CACHE_DIR."""
    import attndyn.kernels

    kdir = attndyn.kernels.__path__[0]
    home = tmp_path / "home"
    home.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    plain = (f"import importlib.util as u; s = u.spec_from_file_location('x', "
             f"{os.path.join(kdir, 'rhs.py')!r}); m = u.module_from_spec(s); "
             f"s.loader.exec_module(m)")
    ours = "import attndyn.kernels.rhs, numba; print('CACHE', numba.config.CACHE_DIR)"
    script = tmp_path / "ro.sh"
    script.write_text(
        f"mount --bind {kdir} {kdir} && mount -o remount,ro,bind {kdir} && "
        f"mount --bind {home} {home} && mount -o remount,ro,bind {home} || exit 99\n"
        f"{sys.executable} -c \"{plain}\"; echo PLAIN_RC=$?\n"
        f"{sys.executable} -c \"{ours}\"; echo OURS_RC=$?\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), TMPDIR=str(tmp), NUMBA_NUM_THREADS="1")
    r = subprocess.run(["unshare", "-m", "sh", str(script)], capture_output=True, text=True,
                       env=env, timeout=300, cwd=str(tmp_path))
    assert "PLAIN_RC=1" in r.stdout and "no locator available" in r.stderr, r.stdout + r.stderr
    assert "OURS_RC=0" in r.stdout, r.stderr
    assert f"CACHE {tmp}/attndyn-" in r.stdout and "read-only install" in r.stderr


# ---------------------------------------------------------------------------
# 2. result files
# ---------------------------------------------------------------------------


def _header(**kw):
    h = {"names": ["a", "b"], "words": None, "kind": "x", "params": {}, "seed": None,
         "status": 0, "message": "", "diagnostics": {}, "inv": None,
         "format": "attndyn-trajectory-1"}
    h.update(kw)
    return np.array(json.dumps(h))


class _Boom:
    """Unpickling this creates a file: proof that something was unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _bad_files(d):
    good = Trajectory(t=np.linspace(0, 1, 3), y=np.zeros((2, 3)), names=["a", "b"]).save(
        d / "good")
    raw = open(good, "rb").read()
    files = {}

    def put(name, data):
        p = d / name
        p.write_bytes(data)
        files[name] = p

    put("empty.npz", b"")
    put("truncated.npz", raw[:120])
    put("text.npz", b"hello world")
    put("pickle.npz", pickle.dumps(_Boom(str(d / "PWNED"))))
    np.save(d / "array.npy", np.zeros(3))
    files["array.npy"] = d / "array.npy"

    def npz(name, **arrays):
        np.savez(d / name, **arrays)
        files[name] = d / name

    npz("object_y.npz", t=np.zeros(3), y=np.array([_Boom(str(d / "PWNED"))], dtype=object),
        header=_header())
    npz("bad_json.npz", t=np.zeros(3), y=np.zeros((2, 3)), header=np.array("{nope"))
    npz("no_header.npz", t=np.zeros(3), y=np.zeros((2, 3)))
    npz("no_y.npz", t=np.zeros(3), header=_header())
    npz("no_names.npz", t=np.zeros(3), y=np.zeros((2, 3)),
        header=np.array(json.dumps({"format": "attndyn-trajectory-1"})))
    npz("wrong_format.npz", t=np.zeros(3), y=np.zeros((2, 3)), header=_header(format="v0"))
    npz("shape.npz", t=np.zeros(3), y=np.zeros((3, 3)), header=_header())
    npz("shape_t.npz", t=np.zeros(4), y=np.zeros((2, 3)), header=_header())
    npz("y_1d.npz", t=np.zeros(3), y=np.zeros(6), header=_header())
    npz("nan_t.npz", t=np.array([0.0, np.nan, 1.0]), y=np.zeros((2, 3)), header=_header())
    npz("complex_y.npz", t=np.zeros(3), y=np.zeros((2, 3)) + 1j, header=_header())
    npz("str_t.npz", t=np.array(["a", "b", "c"]), y=np.zeros((2, 3)), header=_header())
    npz("status_str.npz", t=np.zeros(3), y=np.zeros((2, 3)), header=_header(status="0"))
    npz("status_float.npz", t=np.zeros(3), y=np.zeros((2, 3)), header=_header(status=0.5))
    npz("names_int.npz", t=np.zeros(3), y=np.zeros((2, 3)), header=_header(names=[1, 2]))
    npz("words.npz", t=np.zeros(3), y=np.zeros((2, 3)), header=_header(words=[[0], [1], [2]]))
    npz("deep_json.npz", t=np.zeros(3), y=np.zeros((2, 3)),
        header=np.array("[" * 100000 + "]" * 100000))
    # a few bytes that declare a 16 TB array: refused from the .npy header, nothing allocated
    import io
    import zipfile

    with zipfile.ZipFile(d / "bomb.npz", "w") as z:
        for key, arr in (("t", np.zeros(3)), ("header", _header())):
            buf = io.BytesIO()
            np.save(buf, arr)
            z.writestr(key + ".npy", buf.getvalue())
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            buf, {"descr": "<f8", "fortran_order": False, "shape": (2, 10 ** 12)})
        z.writestr("y.npy", buf.getvalue() + bytes(64))
    files["bomb.npz"] = d / "bomb.npz"
    return files


def test_load_result_bad_files_give_one_clear_error(tmp_path):
    for name, path in _bad_files(tmp_path).items():
        with pytest.raises(ValueError, match="not a valid attndyn result file: ") as ei:
            load_result(path)
        assert str(path) in str(ei.value), name
        assert "\n" not in str(ei.value).strip(), name
    assert not (tmp_path / "PWNED").exists()  # nothing was ever unpickled


def test_load_result_shape_message_names_the_sizes(tmp_path):
    np.savez(tmp_path / "s.npz", t=np.zeros(3), y=np.zeros((3, 3)), header=_header())
    with pytest.raises(ValueError, match=r"'y' has shape \(3, 3\), but 2 names and 3 times"):
        load_result(tmp_path / "s.npz")


def test_load_result_good_and_missing(tmp_path):
    tr = Trajectory(t=np.linspace(0, 1, 3), y=np.arange(6.0).reshape(2, 3), names=["a", "b"],
                    words=[(0,)], status=-2, message="m")
    back = load_result(tr.save(tmp_path / "r"))
    assert back.status == -2 and back.words == [(0,)] and np.array_equal(back.y, tr.y)
    with pytest.raises(FileNotFoundError):
        load_result(tmp_path / "missing.npz")


# ---------------------------------------------------------------------------
# 3. step limits
# ---------------------------------------------------------------------------


def test_check_max_steps():
    from attndyn.numeric.core.validate import MAX_STEPS_CAP, check_max_steps

    assert check_max_steps(1) == 1 and check_max_steps(np.int64(7)) == 7
    assert check_max_steps(MAX_STEPS_CAP) == 2 ** 62
    for bad in (0, -1, 2 ** 62 + 1, 2 ** 63, 10 ** 30):
        with pytest.raises(ValueError, match="max_steps must be an int between 1 and 2\\*\\*62"):
            check_max_steps(bad)
    for bad in (1.0, 1.5, True, "10", None):
        with pytest.raises(TypeError, match="max_steps"):
            check_max_steps(bad)


def test_integrate_max_steps_overflow_is_a_value_error(d3_model):
    h = d3_model.hierarchy(2)
    for bad in (2 ** 63, 2 ** 100):  # was OverflowError from the int64 kernel argument
        with pytest.raises(ValueError, match="max_steps"):
            h.integrate([np.eye(3), np.eye(3)], [0.0, 0.1], max_steps=bad, check=None)
    with pytest.raises(TypeError, match="max_steps"):
        h.integrate([np.eye(3), np.eye(3)], [0.0, 0.1], max_steps=1e3, check=None)


# ---------------------------------------------------------------------------
# 4. the scaling bounds never return NaN
# ---------------------------------------------------------------------------

TINY, HUGE = 5e-324, 1.7976931348623157e308
pos = st.floats(min_value=TINY, max_value=HUGE)
ge1 = st.floats(min_value=1.0, max_value=HUGE)
nonneg = st.one_of(st.just(0.0), pos)
zeta = st.floats(min_value=1e-9, max_value=1 / 3 - 1e-9)
power = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=2.0), pos)


def _number(v):
    v = np.asarray(v, dtype=np.float64)
    assert not np.isnan(v).any()
    return v


def test_critical_data_size_issue_example():
    import mpmath as mp

    from attndyn.numeric import scaling as sc

    n = sc.critical_data_size(1e6, 1e-300, 8, 4)  # was NaN
    with mp.workdps(40):
        C, xi, ld = mp.mpf(1e6), mp.mpf(1e-300), mp.mpf(32)
        w = mp.lambertw(6 * ld ** 6 * C / xi ** 10).real
        exact = float((6 * C * xi ** 2 / w) ** (mp.mpf(1) / 6))
    assert n == pytest.approx(exact, rel=1e-14)
    # c_stat xi^2 / N* = 3e-501: below the smallest subnormal, so 0 (was NaN)
    assert sc.stage_two_bound(1e6, 1e-300, 8, 4, c_stat=1.0) == 0.0


@settings(max_examples=300, deadline=None)
@given(C=nonneg, N=pos, xi=pos, L=ge1, d=ge1, alpha=pos, prefactor=pos, loss0=nonneg,
       c_stat=pos, T=nonneg, M=pos, eps=pos, z=zeta, p=power, target=pos)
def test_bounds_never_nan_over_the_finite_range(C, N, xi, L, d, alpha, prefactor, loss0, c_stat,
                                                T, M, eps, z, p, target):
    from attndyn.numeric import scaling as sc

    k = dict(alpha=alpha, prefactor=prefactor, loss0=loss0, c_stat=c_stat)
    _number(sc.threshold_compute(N, xi, L, d))
    _number(sc.critical_data_size(C, xi, L, d))
    _number(sc.paper_critical_data_size(C, xi))
    _number(sc.paper_form_ratio(C, xi, L, d))
    _number(sc.threshold_time(N, xi, L, d))
    _number(sc.stage(C, N, xi, L, d))
    _number(sc.training_loss_bound(T, eps, alpha=alpha, loss0=loss0))
    _number(sc.approximation_bound(M))
    _number(sc.generalisation_bound(M, N, xi, L, d))
    _number(sc.stage_one_bound(C, N, xi, alpha=alpha, prefactor=prefactor, loss0=loss0))
    _number(sc.stage_two_bound(C, xi, L, d, c_stat=c_stat))
    _number(sc.stage_two_bound_paper(C, xi, c_stat=c_stat))
    _number(sc.two_stage_bound(C, N, xi, L, d, **k))
    _number(sc.time_law(T, N, xi, c_stat=c_stat, alpha=alpha, prefactor=prefactor,
                        loss0=loss0))
    _number(sc.time_law(T, N, xi, c_stat=c_stat, literal=True))
    _number(sc.data_law(N, xi, c_stat=c_stat))
    _number(sc.model_law(M, xi, z, scale=c_stat))
    _number(sc.model_law_boundary(N, z))
    _number(sc.model_law_crossover(N, z))
    _number(sc.noise_drag_data(N, xi, p, c_stat=c_stat))
    _number(sc.compute_for_target(target, xi, L, d, c_stat=c_stat))
    if loss0 > 0:
        k0 = dict(k)
        _number(sc.threshold_jump(N, xi, L, d, **k0))
        _number(sc.continuity_constant(L, d, prefactor=prefactor, loss0=loss0))
        _number(sc.compute_for_target(target, xi, L, d, N=N, **k0))
    if C > 0:
        _number(sc.noise_drag_compute(C, xi, L, d, p, c_stat=c_stat))
        _number(sc.noise_drag_compute(C, xi, L, d, p, c_stat=c_stat, form="paper"))


def test_bound_fast_paths_equal_the_extended_kernels():
    """The plain-float fast paths return bit for bit what the extended-exponent
    kernels return, wherever they accept the inputs (random, over a wide box)."""
    from attndyn.numeric.scaling import bounds as B

    rng = np.random.default_rng(3)

    def lu(lo, hi, n=1):
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n))

    for i in range(1500):
        C = lu(1e-300, 1e300)[0] if i % 7 else 0.0
        xi, N = lu(1e-60, 1e60, 2)
        L, d = lu(1.0, 1e30, 2)
        c = lu(1e-200, 1e200)[0]
        xm, xe = B.xf(xi)
        ldm, lde = B._ld(L, d)
        Nm, Ne = B.xf(N)
        assert B.threshold_compute_kernel(N, xi, L, d) == B._threshold_x(Nm, Ne, xm, xe, ldm, lde)
        assert B.critical_data_size_kernel(C, xi, L, d) == B.xval(*B._critical_x(C, xm, xe,
                                                                                   ldm, lde))
        assert B.stage_two_kernel(C, xi, L, d, c) == B._stage_two_x(C, xm, xe, ldm, lde, c)
        assert B._data_floor(N, xi, c) == B._floor(c, xm, xe, Nm, Ne)
        a, p, l0 = lu(1e-30, 1e30, 3)
        pm, pe = B.xmul(*B.xf(p), *B.xf(l0))
        n3 = B.xmul(*B.xmul(Nm, Ne, Nm, Ne), Nm, Ne)
        x = B.xmul(*B.xmul(*B.xf(a), xm, xe), xm, xe)
        x = B.xdiv(*B.xmul(*x, *B.xdiv(*B.xf(C), *n3)), *n3)
        assert B.stage_one_kernel(C, N, xi, a, p, l0) == B._decay(pm, pe, B.xval(*x))


def test_bounds_infinite_inputs_give_limits():
    from attndyn.numeric import scaling as sc

    inf = np.inf
    assert sc.critical_data_size(inf, 1.0, 8, 4) == inf
    assert sc.stage_two_bound(inf, 1.0, 8, 4, c_stat=1.0) == 0.0
    assert sc.paper_form_ratio(inf, 1.0, 8, 4) == pytest.approx(6 ** (-1 / 6))
    assert sc.threshold_jump(inf, 1.0, 8, 4, alpha=1.0, prefactor=2.0, loss0=1.0,
                             c_stat=1.0) == pytest.approx(2.0 / 32)
    assert sc.noise_drag_data(inf, 0.7, 0.5, c_stat=2.0) == pytest.approx(2.0 * 0.49)
    const = sc.noise_drag_compute(1.0, 0.5, 8, 4, 0.1, c_stat=1.0)
    assert sc.noise_drag_compute(inf, 0.5, 8, 4, 0.1, c_stat=1.0) == const
    assert sc.noise_drag_compute(inf, 0.5, 8, 4, 0.2, c_stat=1.0) == inf
    assert sc.time_law_valid(inf, inf, m_const=1.0) and not sc.time_law_valid(1e300, inf,
                                                                              m_const=1.0)
    # the true product m_const N^3 = 1e30 is finite although N^3 overflows
    assert sc.time_law_valid(1e31, 1e110, m_const=1e-300)
    assert not sc.time_law_valid(1e29, 1e110, m_const=1e-300)


# ---------------------------------------------------------------------------
# 5. the CLI: output paths and the error policy
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["integrate", "--order", "2", "--out", "{bad}/r.npz"],
    ["sgd", "--eta", "0.1", "--d", "10", "--t-end", "0.01", "--out", "{bad}/r.npz"],
    ["compare", "--eta", "0.1", "--d", "10", "--t-end", "0.01", "--out", "{bad}/r.npz"],
    ["compare", "--eta", "0.1", "--d", "10", "--t-end", "0.01", "--plot", "{bad}/p.png"],
])
def test_cli_unwritable_output_is_one_line_exit_2(argv, tmp_path, capsys):
    from attndyn.cli import main

    bad = tmp_path / "no" / "such" / "folder"
    rc = main([a.format(bad=bad) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "cannot write there" in err and "Traceback" not in err


def test_cli_write_error_during_run_is_one_line(tmp_path, capsys, monkeypatch):
    from attndyn import _cli_derive as _cli_tied
    from attndyn.cli import main

    def run(command, args):
        open(tmp_path / "ro-dir-missing" / "x", "w")  # an OSError while writing

    monkeypatch.setattr(_cli_tied, "run", run)
    assert main(["derive"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No such file or directory" in err


def test_cli_error_policy(capsys, monkeypatch):
    from attndyn import _cli_derive as _cli_tied
    from attndyn.cli import main
    from attndyn.numeric.core.results import IntegrationError

    def validation(command, args):
        from attndyn.numeric.core.validate import check_max_steps
        check_max_steps(0)  # the library's own validation: bad input

    def integration(command, args):
        raise IntegrationError("integration failed: blow-up at t = 0.3")

    def numpy_bug(command, args):
        np.zeros(3).reshape(2, 2)  # a ValueError raised inside numpy: a bug, not bad input

    def python_bug(command, args):
        return None + 1  # TypeError raised by Python in our code: a bug

    def other_bug(command, args):
        return {}["missing"]

    for fn, rc in ((validation, 2), (integration, 2), (numpy_bug, 1), (python_bug, 1),
                   (other_bug, 1)):
        monkeypatch.setattr(_cli_tied, "run", fn)
        assert main(["derive"]) == rc, fn.__name__
        err = capsys.readouterr().err
        if rc == 2:
            assert err.count("\n") == 1 and err.startswith("attndyn derive: error: ")
        else:
            assert "Traceback" in err and "please report it" in err, fn.__name__


# ---------------------------------------------------------------------------
# 6. the SGD function; the deprecated shims are gone (0.3)
# ---------------------------------------------------------------------------

SHIMS = """
import importlib, inspect
import attndyn.numeric as num
from attndyn.numeric.attention import training
assert inspect.isfunction(num.sgd), num.sgd
assert num.sgd is training.sgd and callable(training.sgd_runs)
gone = []
for old in ("models", "smodel", "untied", "flow", "potentials", "quadrature", "results",
            "compile", "progress", "plots", "scaling_plots", "lambertw"):
    try:
        importlib.import_module("attndyn.numeric." + old)
    except ModuleNotFoundError:
        gone.append(old)
assert len(gone) == 12, gone  # the flat modules of 0.1 were removed in 0.3 (CHANGELOG.md)
assert not hasattr(num, "_MOVED")
print("ok")
"""


def test_sgd_function_and_deprecated_shims():
    r = _run(SHIMS)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_compare_is_the_function_even_after_importing_every_module():
    # a deprecated module named ``compare`` would rebind the package attribute on import
    import importlib
    import pkgutil

    import attndyn.numeric as num
    direct = {info.name for info in pkgutil.iter_modules(num.__path__)}
    assert not direct & {"sgd", "compare"}, "a module would shadow the function of that name"
    importlib.import_module("attndyn.numeric.attention.compare")
    assert callable(num.compare) and num.compare.__module__ == "attndyn.numeric.attention.compare"
    assert callable(num.sgd) and num.sgd.__module__ == "attndyn.numeric.attention.training"
