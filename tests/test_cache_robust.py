"""The on-disk kernel cache degrades, never fails: damaged entries are ignored (and rewritten),
a full disk or an unwritable directory means running uncached, a read-only cache is read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

# One call of a kernel nobody else in the suite uses, its answer checked, and the cache
# statistics of the op-specific code printed: "<hits> <misses>".
CALL = """
import numpy as np, jitops
from jitops.cpu.kernels import binary as _cpu
x = np.arange(12, dtype=np.float32).reshape(3, 4)
r = jitops.multiply(x, np.float32(-2), act="softplus")
exp = np.logaddexp(0, (x * -2).astype(np.float64)).astype(np.float32)
assert np.allclose(r, exp, rtol=1e-6), (r, exp)
s = _cpu._task.stats
print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))
"""


def _run(cache_dir, prelude: str = "", **env) -> tuple[int, int]:
    e = dict(os.environ, JITOPS_CACHE_DIR=str(cache_dir), **env)
    e.pop("JITOPS_CACHE", None)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(prelude) + CALL], env=e,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    hits, misses = res.stdout.split()[-2:]
    return int(hits), int(misses)


def _task_files(d) -> tuple[str, list[str]]:
    names = sorted(os.listdir(d))
    index = [n for n in names if n.startswith("binary._task") and n.endswith(".nbi")]
    data = [n for n in names if n.startswith("binary._task") and n.endswith(".nbc")]
    assert len(index) == 1 and data, names
    return index[0], data


@pytest.fixture(scope="module")
def _template(tmp_path_factory):
    """A cache populated once for the module (two processes: a compile, then a hit)."""
    d = tmp_path_factory.mktemp("populated")
    assert _run(d) == (0, 1)
    assert _run(d) == (1, 0)
    return d


@pytest.fixture
def populated(_template, tmp_path):
    """A private copy of the populated cache, for a test to damage."""
    d = tmp_path / "cache"
    shutil.copytree(_template, d)
    return d


def _damage_truncate(p):
    with open(p, "r+b") as f:
        f.truncate(max(os.path.getsize(p) // 2, 1))


def _damage_empty(p):
    open(p, "wb").close()


def _damage_garbage(p):
    with open(p, "wb") as f:
        f.write(os.urandom(4096))


def _damage_flip_a_byte(p):
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) - 100)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x5A]))


DAMAGES = {"truncated": _damage_truncate, "empty": _damage_empty, "garbage": _damage_garbage,
           "flipped-byte": _damage_flip_a_byte}


@pytest.mark.parametrize("which", ["index", "data"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_file_is_ignored_and_rewritten(populated, damage, which):
    index, data = _task_files(populated)
    DAMAGES[damage](populated / (index if which == "index" else data[0]))
    assert _run(populated) == (0, 1)  # recompiled, and the call gave the right answer
    assert _run(populated) == (1, 0)  # rewritten: the next process loads it again


def test_a_directory_in_place_of_the_index(populated):
    index, _ = _task_files(populated)
    os.remove(populated / index)
    os.mkdir(populated / index)
    assert _run(populated) == (0, 1)
    assert _run(populated) == (0, 1)  # cannot be rewritten: every process compiles, none fails


def test_swapped_entries_are_never_run(populated):
    """Two kernels' data files exchanged: each would load the other's machine code under its
    own signature. The signature check refuses them."""
    code = """
        import numpy as np, jitops
        jitops.multiply(np.ones(3, np.float32), np.float32(2), act="softplus")
        jitops.multiply(np.ones(3, np.float64), 2.0, act="softplus")
    """
    e = dict(os.environ, JITOPS_CACHE_DIR=str(populated))
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, check=True,
                   timeout=300)
    _, data = _task_files(populated)
    assert len(data) >= 2
    a, b = populated / data[0], populated / data[1]
    tmp = populated / "swap"
    shutil.move(a, tmp)
    shutil.move(b, a)
    shutil.move(tmp, b)
    hits, misses = _run(populated)
    assert misses == 1 and hits == 0


def test_a_full_disk_means_running_uncached(tmp_path):
    prelude = """
        import errno
        from numba.core import caching
        def _full(self, path):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        caching.IndexDataCacheFile._open_for_write = _full
    """
    assert _run(tmp_path, prelude) == (0, 1)
    assert _run(tmp_path, prelude) == (0, 1)
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".nbi", ".nbc"))]


def test_an_unwritable_location_means_running_uncached(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert _run(blocker / "cache") == (0, 1)


def test_a_read_only_populated_cache_is_still_read(populated):
    """Writes fail as on a read-only mount (simulated: the suite may run as root, for whom
    permission bits do not stop writes); the populated cache is read all the same."""
    prelude = """
        import errno, tempfile
        from numba.core import caching
        def _ro(*a, **k):
            raise OSError(errno.EROFS, "Read-only file system")
        caching.IndexDataCacheFile._open_for_write = lambda self, path: _ro()
        tempfile.TemporaryFile = _ro
    """
    before = {n: os.path.getmtime(populated / n) for n in os.listdir(populated)}
    assert _run(populated, prelude) == (1, 0)
    assert {n: os.path.getmtime(populated / n) for n in os.listdir(populated)} == before


# -- the source stamp's memo ----------------------------------------------------------------------

def _stamp_in(monkeypatch, d) -> str:
    """The CPU kernels' source stamp as a new process would find it with cache directory ``d``."""
    from jitops.cpu.compile import cache

    monkeypatch.setenv("JITOPS_CACHE_DIR", str(d))
    monkeypatch.setattr(cache, "_stamp", None)
    return cache.source_stamp()


def _memo_file(d):
    names = [n for n in os.listdir(d) if n.startswith("source-stamp-")]
    assert len(names) == 1, names
    return d / names[0]


def _true_stamp() -> str:
    import numba

    from jitops.cpu.compile import cache

    return cache.content_stamp(numba.__version__, cache.stamped_files())


def test_the_source_stamp_is_remembered_without_reading_the_import_graph(tmp_path,
                                                                          monkeypatch):
    from jitops.cpu.compile import cache

    truth = _true_stamp()
    assert _stamp_in(monkeypatch, tmp_path) == truth  # computed, and remembered
    key, value = _memo_file(tmp_path).read_text().split()
    assert value == truth and len(key) == 64

    def unused():
        raise AssertionError("the import graph was read although the memo holds the stamp")

    monkeypatch.setattr(cache, "stamped_files", unused)
    assert _stamp_in(monkeypatch, tmp_path) == truth


@pytest.mark.parametrize("memo", ["another-key", "not-a-digest", "short-value", "garbage",
                                  "empty", "directory"])
def test_a_stale_or_damaged_stamp_memo_is_recomputed(tmp_path, monkeypatch, memo):
    truth = _true_stamp()
    _stamp_in(monkeypatch, tmp_path)
    path = _memo_file(tmp_path)
    key = path.read_text().split()[0]
    if memo == "directory":
        path.unlink()
        path.mkdir()
    elif memo == "garbage":
        path.write_bytes(os.urandom(300))
    else:
        path.write_text({"another-key": f"{'0' * 64} {'f' * 64}",  # other sources' stamp
                         "not-a-digest": f"{key} {'g' * 64}", "short-value": f"{key} abc",
                         "empty": ""}[memo])
    assert _stamp_in(monkeypatch, tmp_path) == truth
    if memo != "directory":  # rewritten for the next process
        assert path.read_text().split() == [key, truth]


def test_a_memo_with_this_key_but_another_stamp_is_believed_so_the_key_must_see_every_edit(
        tmp_path, monkeypatch):
    """The memo is trusted on its key alone: the key changes with any source file's size,
    modification time or inode, and with the versions it is given."""
    from jitops.core import sources
    from jitops.cpu.compile import cache

    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    a, b = tmp_path / "pkg" / "a.py", tmp_path / "pkg" / "sub" / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    (tmp_path / "pkg" / "notes.txt").write_text("not a source")
    monkeypatch.setattr(sources, "ROOT", str(tmp_path / "pkg"))
    key = cache._package_files_key("v1")
    assert cache._package_files_key("v1") == key
    assert cache._package_files_key("v2") != key
    (tmp_path / "pkg" / "notes.txt").write_text("still not a source")
    assert cache._package_files_key("v1") == key
    st = b.stat()
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert cache._package_files_key("v1") != key
    key = cache._package_files_key("v1")
    b.write_text("y = 22\n")  # a new size
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert cache._package_files_key("v1") != key
    key = cache._package_files_key("v1")
    (tmp_path / "pkg" / "c.py").write_text("")  # a new module
    assert cache._package_files_key("v1") != key


def test_an_unwritable_cache_still_gives_the_right_stamp(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert _stamp_in(monkeypatch, blocker / "cache") == _true_stamp()
    assert sorted(os.listdir(tmp_path)) == ["a-file"]  # no temporary file left behind


# -- a cache no one else can write ------------------------------------------------------------

def _run_full(cache_dir, user: int | None = None, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, **env)
    if cache_dir is not None:
        e["JITOPS_CACHE_DIR"] = str(cache_dir)
    e.pop("JITOPS_CACHE", None)
    return subprocess.run([sys.executable, "-c", CALL], env=e, capture_output=True, text=True,
                          timeout=300, user=user)


def _listing(d) -> dict:
    out = {}
    for dirpath, _, files in os.walk(d):
        for n in files:
            p = os.path.join(dirpath, n)
            out[p] = os.lstat(p).st_mtime_ns
    return out


def _other_owner(path) -> None:
    """``path`` and what is in it, owned by another user (needs root)."""
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    os.lchown(path, 4242, 4242)
    for dirpath, dirs, files in os.walk(path):
        for n in [dirpath, *(os.path.join(dirpath, f) for f in dirs + files)]:
            os.lchown(n, 4242, 4242)


@pytest.mark.parametrize("how", ["another owner", "world-writable", "group-writable",
                                 "a symlink at the path"])
def test_a_cache_directory_others_can_write_is_neither_read_nor_written(populated, tmp_path,
                                                                        how):
    target = populated
    if how == "another owner":
        _other_owner(populated)
    elif how == "world-writable":
        os.chmod(populated, 0o777)
    elif how == "group-writable":
        os.chmod(populated, 0o770)
    else:
        target = tmp_path / "planted"
        os.symlink(populated, target)  # a well-formed cache, reached through a link
    before = _listing(populated)
    res = _run_full(target)
    assert res.returncode == 0, res.stderr[-3000:]
    hits, misses = map(int, res.stdout.split()[-2:])
    assert hits == 0 and misses == 1  # compiled afresh, nothing loaded
    assert _listing(populated) == before  # and nothing written
    assert f"not using the kernel cache directory {target}" in res.stderr
    assert res.stderr.count("not using the kernel cache directory") == 1  # warned once


@pytest.mark.parametrize("how", ["another owner", "group-writable", "a symlink"])
def test_a_cache_file_others_could_have_written_is_never_loaded(populated, how):
    index, _ = _task_files(populated)
    p = populated / index
    if how == "another owner":
        _other_owner(p)
    elif how == "group-writable":
        os.chmod(p, 0o664)
    else:
        real = populated / "elsewhere.nbi"
        os.rename(p, real)
        os.symlink(real, p)
    assert _run(populated) == (0, 1)  # not loaded; rewritten as this user's own file
    st = os.lstat(p)
    assert st.st_uid == os.getuid() and not st.st_mode & 0o022 and not os.path.islink(p)
    assert _run(populated) == (1, 0)


def test_jitops_makes_its_cache_directory_private(tmp_path):
    d = tmp_path / "deep" / "cache"
    assert _run(d) == (0, 1)
    assert (os.stat(d).st_mode & 0o777) == 0o700


def test_a_squatted_temporary_cache_directory_is_not_used(tmp_path):
    """No home directory (a service account, ``docker run --user``): the cache falls back to
    ``$TMPDIR/jitops-cache-<uid>``, a name anyone can make first. Made beforehand by another
    user (mode 0777), it is refused by the user it was meant to trap."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)  # a world-writable temporary directory, sticky as /tmp is
    squat = tmp / f"jitops-cache-{os.getuid()}"
    squat.mkdir()
    os.chmod(squat, 0o777)
    if os.geteuid() == 0:
        os.chown(squat, 4242, 4242)
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "XDG_CACHE_HOME", "NUMBA_CACHE_DIR", "JITOPS_CACHE_DIR",
                        "JITOPS_CACHE")}
    env["TMPDIR"] = str(tmp)
    env["HOME"] = "nowhere"  # a home that does not resolve (config.home: not absolute)
    res = subprocess.run([sys.executable, "-c", CALL], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"not using the kernel cache directory {squat}" in res.stderr
    assert os.listdir(squat) == []
    assert tuple(map(int, res.stdout.split()[-2:])) == (0, 1)
