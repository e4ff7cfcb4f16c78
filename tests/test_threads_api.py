"""The thread-count API (SPEC 1.2): get_num_threads, set_num_threads, threads(n),
JITOPS_NUM_THREADS, a default from the process's CPU affinity, and Numba's own setting left
as the user set it.

Which threads ran a kernel is read from inside it: a user op returns the OS thread id
(``gettid``, through libc's ``syscall``) of the thread that computed each element, so a kernel
told to use one thread must give one id, and a parallel one several.
"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import textwrap
import threading

import numba
import numpy as np
import pytest

import jitops
from jitops.core import config as _config
from jitops.cpu.kernels.layout import CONTROL
from jitops.cpu.threads import parallel

from .helpers import cgroup_join_source, cgroup_v1_child

POOL = parallel.pool_size()
needs_two = pytest.mark.skipif(POOL < 2 or not parallel.parallel_allowed(),
                               reason="one CPU (or a serial-only layer): nothing to divide")

_syscall = ctypes.CDLL(None).syscall
_syscall.argtypes, _syscall.restype = (ctypes.c_long,), ctypes.c_long
_GETTID = {"x86_64": 186, "aarch64": 178}.get(platform.machine(), -1)

thread_ids = jitops.elementwise(lambda x: _syscall(_GETTID) + x * 0)

# large enough for several parallel tasks per thread
N = 16 * _config.PARALLEL_THRESHOLD


@pytest.fixture(autouse=True)
def _restore_process_count():
    before = parallel._setting
    yield
    parallel._setting = before
    parallel._restamp()  # (as set_num_threads does: remembered repeats ask for the count)


def _ids(n_elems=N) -> set[int]:
    """The OS threads that computed a kernel's elements."""
    ids = set(np.unique(thread_ids(np.zeros(n_elems, np.int64))).tolist())
    assert min(ids) > 0  # real thread ids, not errors
    return ids


def _ids_of_a_kernel_that_uses_all() -> set[int]:
    """Thread ids seen over a few launches of a larger kernel (a worker woken late may miss
    one launch's tasks, more so while the other CPU runs another test process)."""
    seen: set[int] = set()
    for _ in range(40):
        seen |= _ids(4 * N)
        if len(seen) > 1:
            break
    return seen


def test_default_is_the_affinity_capped_by_numbas_pool():
    assert jitops.get_num_threads() == min(len(os.sched_getaffinity(0)), POOL)
    assert len(_ids()) <= jitops.get_num_threads()


@needs_two
def test_threads_one_runs_a_parallel_size_call_on_one_thread():
    assert len(_ids_of_a_kernel_that_uses_all()) > 1  # the default does use several
    with jitops.threads(1):
        assert jitops.get_num_threads() == 1
        assert len(_ids()) == 1
        x = np.arange(N, dtype=np.float32)
        np.testing.assert_array_equal(jitops.subtract(x, x[::-1]), x - x[::-1])
    assert jitops.get_num_threads() == min(len(os.sched_getaffinity(0)), POOL)


@needs_two
def test_set_num_threads_is_process_wide_and_threads_is_per_thread():
    jitops.set_num_threads(1)
    assert len(_ids()) == 1
    seen = {}

    def other():
        seen["count"] = jitops.get_num_threads()  # the process-wide setting
        with jitops.threads(2):
            seen["inner"] = jitops.get_num_threads()
            seen["ids"] = len(_ids_of_a_kernel_that_uses_all())
        seen["after"] = jitops.get_num_threads()

    with jitops.threads(2):  # this thread's block is not seen by the other thread
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert jitops.get_num_threads() == 2
    assert seen == {"count": 1, "inner": 2, "ids": 2, "after": 1}
    assert jitops.get_num_threads() == 1


def test_threads_blocks_nest_and_restore_on_exceptions():
    base = jitops.get_num_threads()
    with jitops.threads(1):
        with jitops.threads(POOL):
            assert jitops.get_num_threads() == POOL
        assert jitops.get_num_threads() == 1
        with pytest.raises(ZeroDivisionError):
            with jitops.threads(POOL):
                1 / 0
        assert jitops.get_num_threads() == 1
    assert jitops.get_num_threads() == base


@needs_two
def test_numbas_own_setting_is_left_as_the_user_set_it():
    numba.set_num_threads(1)
    try:
        assert len(_ids_of_a_kernel_that_uses_all()) > 1  # jitops' count, not Numba's
        assert numba.get_num_threads() == 1
        with jitops.threads(2):
            x = np.ones(N)
            jitops.add(x, x)
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(POOL)
    numba.set_num_threads(2)
    with jitops.threads(1):
        jitops.add(np.ones(N), 1.0)
        assert numba.get_num_threads() == 2


@needs_two
def test_a_repeated_call_follows_the_count_of_each_call():
    """The fast path keeps one launch per call geometry: its tasks must follow the count."""
    x = np.linspace(-1, 1, N)
    y = x[::-1].copy()
    out = np.empty_like(x)
    for n in (2, 1, 2, 1):
        with jitops.threads(n):
            assert jitops.subtract(x, y, out=out) is out
            np.testing.assert_array_equal(out, x - y)
            ids = _ids_of_a_kernel_that_uses_all() if n > 1 else _ids()
            assert len(ids) == n


@needs_two
def test_a_repeat_with_a_weak_scalar_follows_the_count_after_threads_one():
    """``x - 3.0`` remembered inside ``threads(1)`` is not kept as a serial repeat: once the
    block is left, the same call runs parallel jobs again."""
    from jitops.cpu.threads import pool

    x = np.linspace(-1, 1, N).astype(np.float32)
    out = np.empty_like(x)
    jitops.subtract(x, x, out=out)  # the pool started

    def jobs() -> int:
        return pool.word(pool.get().ctl, CONTROL.INFO) >> 32

    with jitops.threads(1):
        for _ in range(3):
            jitops.subtract(x, 3.0, out=out)
    before = jobs()
    for _ in range(3):
        assert jitops.subtract(x, 3.0, out=out) is out
    np.testing.assert_array_equal(out, x - np.float32(3.0))
    assert jobs() - before == 3


@pytest.mark.parametrize("bad, err", [(0, ValueError), (-2, ValueError),
                                      (1.5, TypeError), (True, TypeError), ("2", TypeError),
                                      (None, TypeError)])
def test_bad_counts_are_refused_by_name(bad, err):
    before = jitops.get_num_threads()
    with pytest.raises(err, match="jitops.set_num_threads: the number of threads"):
        jitops.set_num_threads(bad)
    with pytest.raises(err, match="jitops.threads: the number of threads"):
        with jitops.threads(bad):
            pass
    assert jitops.get_num_threads() == before


def test_a_count_above_the_pool_is_accepted_and_capped():
    """As PyTorch and numexpr accept more threads than CPUs: capped to Numba's pool."""
    before = jitops.get_num_threads()
    x = np.linspace(-1, 1, 1 << 18)
    try:
        jitops.set_num_threads(POOL + 7)
        assert jitops.get_num_threads() == POOL
        np.testing.assert_array_equal(jitops.subtract(x, 1.0), x - 1.0)
        with jitops.threads(4 * POOL):
            assert jitops.get_num_threads() == POOL
    finally:
        jitops.set_num_threads(before)


def test_numpy_integer_counts_are_accepted():
    with jitops.threads(np.int64(1)):
        assert jitops.get_num_threads() == 1
        assert type(jitops.get_num_threads()) is int


def test_dask_chunks_run_serially_whatever_the_count():
    from jitops import dispatch

    seen = []
    real = parallel.num_threads

    def spy():
        seen.append(real())
        return seen[-1]

    parallel.num_threads = spy
    try:
        blk = np.ones(2 * _config.PARALLEL_THRESHOLD)
        np.testing.assert_array_equal(dispatch.chunk("add", "add", None, blk, blk), 2 * blk)
    finally:
        parallel.num_threads = real
    assert seen and set(seen) == {1}


def _child(code: str, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=120)


def test_environment_variable_and_affinity_in_a_new_process():
    code = """
        import os
        {pre}
        import jitops
        print(jitops.get_num_threads())
    """
    res = _child(code.format(pre=""), JITOPS_NUM_THREADS="1")
    assert res.returncode == 0 and res.stdout.split()[-1] == "1", res.stderr
    res = _child(code.format(pre=""), JITOPS_NUM_THREADS="999")  # at most Numba's pool
    assert res.returncode == 0 and res.stdout.split()[-1] == str(POOL), res.stderr
    # no variable: the CPUs this process may run on
    res = _child(code.format(pre="os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})"),
                 JITOPS_NUM_THREADS="")
    assert res.returncode == 0 and res.stdout.split()[-1] == "1", res.stderr
    res = _child(code.format(pre=""), JITOPS_NUM_THREADS="two")
    assert res.returncode != 0
    assert "ValueError: JITOPS_NUM_THREADS must be a positive integer, got 'two'" in res.stderr


def test_info_reports_the_count_and_where_it_came_from():
    jitops.set_num_threads(1)
    th = parallel.info()
    assert (th["num_threads"], th["num_threads_source"]) == (1, "set_num_threads")
    assert th["numba_pool"] == POOL and th["affinity"] == len(os.sched_getaffinity(0))


@needs_two
def test_a_parallel_size_repeat_on_one_thread_takes_a_serial_entry_that_checks_the_count(
        monkeypatch):
    """Calls of a parallel size made with one thread (``set_num_threads(1)``, as in a forked
    worker per core) are remembered: their repeats skip the keyed path and the launch's
    Python (here made to fail if reached), any arrays of that kind, the weak scalar too. Once
    the count is raised, the same repeat runs parallel jobs again."""
    from jitops.cpu import backend
    from jitops.cpu.compile import hooks
    from jitops.cpu.threads import pool

    if not hooks.ok("fastcall"):
        pytest.skip("the fastcall hook is off here (tests/test_hooks.py covers the public path)")
    x = np.linspace(-1, 1, N).astype(np.float32)
    y = x[::-1].copy()
    out = np.empty_like(x)
    jitops.subtract(x, y, out=out)  # the pool started

    def jobs() -> int:
        return pool.word(pool.get().ctl, CONTROL.INFO) >> 32

    jitops.set_num_threads(1)
    for _ in range(2):  # seen, then remembered on one thread (calls alternating)
        jitops.subtract(x, y, out=out)
        jitops.subtract(x, 3.0)
    before = jobs()

    def refused(*args):
        raise AssertionError("a remembered repeat reached Launch._run")

    with monkeypatch.context() as m:
        m.setattr(backend.Launch, "_run", refused)
        for _ in range(3):
            x2, y2, o2 = x.copy(), y.copy(), np.empty_like(out)  # other objects, same kind
            assert jitops.subtract(x2, y2, out=o2) is o2
            np.testing.assert_array_equal(o2, x - y)
            np.testing.assert_array_equal(jitops.subtract(x2, 3.0), x - np.float32(3.0))
    assert jobs() == before  # serial: no job on the pool
    jitops.set_num_threads(2)
    for _ in range(3):
        assert jitops.subtract(x, y, out=out) is out
        np.testing.assert_array_equal(jitops.subtract(x, 3.0), x - np.float32(3.0))
    np.testing.assert_array_equal(out, x - y)
    assert jobs() - before == 6


# -- the conventions of a crowded machine ------------------------------------------------------


def _count_in_child(env: dict, prelude: str = "") -> tuple[int, str]:
    code = textwrap.dedent(prelude) + textwrap.dedent("""
        import jitops
        from jitops.cpu.threads import parallel
        print(jitops.get_num_threads(), parallel.info()["num_threads_source"], sep="|")
    """)
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "JITOPS_NUM_THREADS")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env={**base, **env})
    assert p.returncode == 0, p.stderr[-3000:]
    n, source = p.stdout.strip().splitlines()[-1].split("|")
    return int(n), source


@pytest.mark.parametrize("env, want", [
    ({"OMP_NUM_THREADS": "1"}, (1, "OMP_NUM_THREADS")),
    ({"OMP_NUM_THREADS": "1,4"}, (1, "OMP_NUM_THREADS")),  # OpenMP's list: the first level
    ({"OMP_NUM_THREADS": "1", "JITOPS_NUM_THREADS": "2"}, (min(2, POOL), "JITOPS_NUM_THREADS")),
    ({"OMP_NUM_THREADS": "lots"}, (min(os.cpu_count() or 1, POOL), "affinity")),  # ignored
    ({"OMP_NUM_THREADS": "0"}, (min(os.cpu_count() or 1, POOL), "affinity")),
], ids=["omp 1", "omp list", "jitops first", "omp garbage", "omp 0"])
def test_omp_num_threads_sets_the_default_below_jitops_own_variable(env, want):
    if want[1] == "affinity" and len(os.sched_getaffinity(0)) != (os.cpu_count() or 1):
        pytest.skip("this process's affinity is not every CPU")
    assert _count_in_child(env) == want


def test_importing_paddle_first_gives_one_thread_as_the_threads_guide_says():
    """Paddle's import sets OMP_NUM_THREADS=1 where it is unset (paddle.base.__bootstrap__):
    jitops then honours it, as PyTorch does; JITOPS_NUM_THREADS still comes first."""
    pytest.importorskip("paddle")
    assert _count_in_child({}, "import paddle\n") == (1, "OMP_NUM_THREADS")
    assert _count_in_child({"JITOPS_NUM_THREADS": "2"}, "import paddle\n") == \
        (min(2, POOL), "JITOPS_NUM_THREADS")


def test_omp_num_threads_does_not_override_set_num_threads_or_threads():
    n, source = _count_in_child({"OMP_NUM_THREADS": "1"}, "import jitops\n"
                                "jitops.set_num_threads(2)\n")
    assert (n, source) == (min(2, POOL), "set_num_threads")


def test_a_cgroup_cpu_quota_is_read_v1_and_v2(tmp_path, monkeypatch):
    from jitops.core import limits

    (tmp_path / "proc").write_text("2:cpu,cpuacct:/box\n0::/app\n")
    v1 = tmp_path / "cpu,cpuacct" / "box"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("150000")
    (v1 / "cpu.cfs_period_us").write_text("100000")
    monkeypatch.setattr(limits, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(limits, "PROC_CGROUP", str(tmp_path / "proc"))
    assert limits.cpu_quota() == (2, str(v1 / "cpu.cfs_quota_us"))  # 1.5 CPUs: 2 threads
    (v1 / "cpu.cfs_quota_us").write_text("-1")  # no quota
    assert limits.cpu_quota() == (None, "")
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    app = tmp_path / "app"
    app.mkdir()
    (app / "cpu.max").write_text("100000 100000\n")
    assert limits.cpu_quota() == (1, str(app / "cpu.max"))
    (app / "cpu.max").write_text("max 100000\n")
    assert limits.cpu_quota() == (None, "")


def test_a_real_cgroup_cpu_quota_caps_the_default():
    """A container run with ``--cpus=1`` on a larger host: the affinity shows every core,
    the quota allows one; jitops runs one thread where Python's os.cpu_count() says more."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: a quota of one changes nothing")
    d = cgroup_v1_child("cpu")
    try:
        with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
            f.write("100000")
        n, source = _count_in_child({}, cgroup_join_source(d))
        assert n == 1 and "CPU quota" in source, (n, source)
    finally:
        os.rmdir(d)
