"""jitops' own thread pool (jitops.cpu.threads.pool): the workers really share the work, a busy pool
never blocks another thread, failures on a worker reach the caller, and an idle pool sleeps.

The pool's control block is read directly: the generation of the last job (``CONTROL.INFO``), the
tasks its caller ran itself (``CONTROL.BY_CALLER``), the workers asleep (``CONTROL.SLEEPERS``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import jitops
from jitops.core import config as _config
from jitops.cpu.kernels import binary as kernels
from jitops.cpu.kernels.layout import CONTROL
from jitops.cpu.repeat import memo as repeat
from jitops.cpu.threads import omp, parallel, pool

pytestmark = pytest.mark.skipif(not pool.AVAILABLE, reason="jitops' pool runs on Linux only")
needs_two = pytest.mark.skipif(parallel.get_num_threads() < 2,
                               reason="one CPU: the pool has no worker")

N = 16 * _config.PARALLEL_THRESHOLD


@pytest.fixture(autouse=True)
def _own_workers(monkeypatch):
    """These tests are about the pool's own workers: never PyTorch's OpenMP team, which
    jitops.cpu.threads.omp picks where another test of this process imported PyTorch
    (tests/test_omp_team.py covers that)."""
    monkeypatch.setattr(omp, "team", lambda: 0)
    monkeypatch.setattr(omp, "_ready", 0)  # what a launch takes without asking team()


def _generation() -> int:
    return pool.word(pool.get().ctl, CONTROL.INFO) >> 32


def _tasks_of_last_job() -> int:
    return pool.word(pool.get().ctl, CONTROL.INFO) & 0xFFFFFFFF


@needs_two
def test_workers_run_part_of_every_large_call():
    x = np.linspace(-1, 1, N)
    y = x[::-1].copy()
    by_workers = 0
    for _ in range(20):
        g = _generation()
        np.testing.assert_array_equal(jitops.subtract(x, y), x - y)
        assert _generation() == g + 1  # one job per call
        ntasks = _tasks_of_last_job()
        assert ntasks >= 2 * jitops.get_num_threads()  # balanced: several tasks per thread
        by_workers += ntasks - pool.word(pool.get().ctl, CONTROL.BY_CALLER)
    assert by_workers > 0  # a worker took part (it may miss a job while the CPU is busy)
    assert len(pool.get().threads) == jitops.get_num_threads() - 1


@needs_two
@pytest.mark.parametrize("transposed", [False, True])
def test_tasks_are_claimed_in_shrinking_runs(transposed):
    """Each thread claims runs of its own range that shrink (a quarter of what is left), and
    steals quarters of what is left of another's: a job of hundreds of tasks (a tiled
    transpose: neighbouring tiles share cache lines) is taken in a few dozen claims, and
    runs shrink to single tasks as each range ends."""
    from jitops.core.plan import TILED, make_plan

    a = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)
    b = a * 0.5
    x = a.T if transposed else a
    plan = make_plan((x.shape, b.shape), ((x.strides[0] // 4, x.strides[1] // 4),
                                          (b.strides[0] // 4, b.strides[1] // 4)), "numpy")
    assert (plan.variant == TILED) == transposed
    out = jitops.subtract(x, b)
    np.testing.assert_array_equal(out, x - b)
    ctl = pool.get().ctl
    ntasks, claims = _tasks_of_last_job(), pool.word(ctl, CONTROL.CLAIMS)
    threads = jitops.get_num_threads()
    assert pool.word(ctl, CONTROL.NRANGES) == threads and pool.word(ctl, CONTROL.UNIT) == 1
    assert ntasks >= 4 * threads
    assert 1 <= claims <= ntasks
    if ntasks >= 256:
        assert claims < ntasks // 4
    # a tail of single tasks stays in every range: at least the last three of each
    assert claims >= min(ntasks, 2 * threads)


def _caller_firsts(call, jobs: int) -> list[tuple[int, int]]:
    """(generation, first task the caller ran of its own range) of ``jobs`` calls."""
    seen = []
    for _ in range(jobs):
        call()
        seen.append((_generation(), pool.word(pool.get().ctl, CONTROL.CALLER_FIRST)))
    return seen


@needs_two
@pytest.mark.parametrize("alternate", [1, 0])
def test_each_thread_keeps_its_range_and_every_other_job_walks_it_backwards(alternate):
    """The caller owns the first of the job's ranges, job after job, and begins it at the
    low end, or -- every other job, while ALTERNATE is on -- at the high end, where the last
    job left it (so its caches still hold that data). Thieves only take from the far end, so
    the caller's first task is that whenever it ran any of its own range. Answers stay
    exact either way."""
    p = pool.get()
    x = np.linspace(-3, 3, N).astype(np.float32)
    y = x[::-1].copy()
    o = np.empty_like(x)
    saved = int(p.words[CONTROL.ALTERNATE])
    p.words[CONTROL.ALTERNATE] = alternate
    try:
        seen = _caller_firsts(lambda: jitops.subtract(x, y, out=o), 12)
        np.testing.assert_array_equal(o, x - y)
    finally:
        p.words[CONTROL.ALTERNATE] = saved
    ntasks, nranges = _tasks_of_last_job(), pool.word(p.ctl, CONTROL.NRANGES)
    assert nranges == jitops.get_num_threads()
    own_end = ntasks // nranges - 1  # the caller's range: tasks 0 .. own_end
    ran_own = [(g, first) for g, first in seen if first != -1]
    assert len(ran_own) >= 6  # the caller ran part of its own range (thieves leave it that)
    for g, first in ran_own:
        assert first == (own_end if alternate and g % 2 else 0), seen
    if alternate:
        assert {g % 2 for g, _ in ran_own} == {0, 1}
    # a tiled transpose is always walked forwards (backwards its tiles ran 9% slower)
    a = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)
    t = np.empty_like(a)
    saved = int(p.words[CONTROL.ALTERNATE])
    p.words[CONTROL.ALTERNATE] = alternate
    try:
        seen = _caller_firsts(lambda: jitops.subtract(a.T, a, out=t), 6)
        np.testing.assert_array_equal(t, a.T - a)
    finally:
        p.words[CONTROL.ALTERNATE] = saved
    assert {first for _, first in seen} <= {0, -1} and (0 in {first for _, first in seen})


@needs_two
def test_a_job_of_one_thread_walks_all_its_tasks_each_way(monkeypatch):
    """With no worker (a call's own pooled driver and arguments, run with 0 workers) the
    caller owns the one range: every task, forwards then backwards, and the answers exact."""
    seen = {}
    real = parallel.launch

    def spy(drivers, args, threads):
        seen["drivers"], seen["args"] = drivers, args
        return real(drivers, args, threads)

    monkeypatch.setattr(parallel, "launch", spy)
    x = np.arange(N + 3, dtype=np.float64)  # a shape no other test launched
    y = np.full(N + 3, 0.5)
    o = np.empty_like(x)
    jitops.subtract(x, y, out=o)
    pooled, args = seen["drivers"][0], seen["args"]
    assert args[1:4] == (id(o), id(x), id(y))
    p = pool.get()
    firsts = []
    with p.held():
        for _ in range(4):
            o[:] = np.nan
            assert pooled(*args, p.ctl, 0) == kernels.OK
            np.testing.assert_array_equal(o, x - y)
            ntasks = _tasks_of_last_job()
            assert ntasks >= 8 and pool.word(p.ctl, CONTROL.BY_CALLER) == ntasks
            firsts.append((_generation() % 2, pool.word(p.ctl, CONTROL.CALLER_FIRST)))
    assert sorted(set(firsts)) == [(0, 0), (1, ntasks - 1)]


_STEAL_STRESS = """
    import itertools, sys
    import numpy as np, jitops
    from jitops.cpu.threads import pool
    from jitops.cpu.kernels.layout import CONTROL
    assert jitops.get_num_threads() == 5
    rng = np.random.default_rng(7)
    p = pool.get()
    w = p.words
    shapes = [(70_001,), (300_007,), (1024, 1031), (3, 70_000), (257, 4099)]
    add3 = jitops.elementwise(lambda a, b, c: a * b + c)
    calls = 0
    for cap, units, alt in itertools.product((5, 3, 1), (pool.MAX_UNITS, 7, 2), (1, 0)):
        with p.held():
            w[CONTROL.RANGE_CAP], w[CONTROL.MAX_UNITS], w[CONTROL.ALTERNATE] = cap, units, alt
        for shape in shapes:
            x = rng.standard_normal(shape).astype(np.float32)
            y = rng.standard_normal(shape[-1:]).astype(np.float32)
            for xx in (x, x.T if x.ndim == 2 else x[::-1]):
                yy = rng.standard_normal(xx.shape).astype(np.float32)
                for _ in range(2):
                    o = np.full(xx.shape, np.nan, np.float32)
                    jitops.subtract(xx, yy, out=o)
                    assert np.array_equal(o, xx - yy), (cap, units, alt, shape)
                    calls += 1
            r = add3(x, y, y)
            assert np.array_equal(r, x * y + y), (cap, units, alt, shape)
            calls += 1
            assert pool.word(p.ctl, CONTROL.NRANGES) == min(5, cap)
            assert pool.word(p.ctl, CONTROL.UNIT) >= 1
    print(calls)
"""


def test_oversubscribed_threads_steal_and_write_every_element():
    """Five threads on this machine's cores (more than it has, so threads are descheduled
    mid-job and others steal from their ranges), with fewer range words than threads (the
    rest only steal), jobs cut into units of several tasks, and both walk orders: every
    element of every layout written exactly as NumPy computes it. Its own process, with a
    timeout: a lost task would be a hang."""
    env = dict(os.environ, NUMBA_NUM_THREADS="5", JITOPS_NUM_THREADS="5")
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(_STEAL_STRESS)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert int(res.stdout.split()[-1]) == 18 * 5 * 5


@pytest.mark.parametrize("threads", [2, 3, 4, 16])
@pytest.mark.parametrize("n", [65536, 70_001, 300_007, 1_000_000, 2_000_000, 10_000_000])
def test_a_long_row_is_cut_into_equal_blocks(threads, n):
    """A long row's blocks are one size (bar the last, shorter by less than a cache line's
    worth per block), start a cache line apart, cover the row once, and where there are few a
    whole number fall to each thread: 1e6 elements in blocks of 65536 left one of two threads
    8 of them and the other 7 and a stub (a job 5% longer than an even split)."""
    from jitops.core import config
    from jitops.core.plan import make_plan
    from jitops.cpu.kernels import binary as kernels

    plan = make_plan(((n,), (n,)), ((1,), (1,)), "numpy")
    block, ntasks, rpt, nblk, rows = kernels.task_geometry(plan, threads=threads)[:5]
    assert rows == 1 and rpt == 1 and ntasks == nblk
    assert block % kernels.BLOCK_ALIGN == 0 and config.BLOCK_MIN <= block <= config.BLOCK
    assert (nblk - 1) * block < n <= nblk * block  # every element once, no empty block
    last = n - (nblk - 1) * block
    assert block - last < nblk * kernels.BLOCK_ALIGN
    if nblk < 16 * threads:
        assert nblk % threads == 0, (block, nblk)
    # still ~4 per thread to balance, where blocks of BLOCK_MIN allow that many
    assert nblk >= min(4 * threads, n // config.BLOCK_MIN // threads * threads)
    # an explicit block is taken as given
    assert kernels.task_geometry(plan, block=65536, threads=threads)[0] == 65536


def test_small_calls_and_threads_one_use_no_job():
    x = np.ones(N)
    g = _generation()
    jitops.add(x[:100], 1.0)  # below the parallel threshold
    with jitops.threads(1):
        np.testing.assert_array_equal(jitops.add(x, 1.0), x + 1.0)
    assert _generation() == g


@needs_two
def test_a_busy_pool_makes_other_threads_run_serially_not_wait():
    """While one Python thread's job holds the pool, another thread's call runs on its own
    thread (the right answer, no job published, no waiting)."""
    p = pool.get()
    x = np.arange(N, dtype=np.float64)
    g = _generation()
    with p.held():  # as a running job would hold it
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("r", jitops.subtract(x, 2.0)))
        t.start()
        t.join(timeout=60)
        assert not t.is_alive()
        np.testing.assert_array_equal(res["r"], x - 2.0)
        assert _generation() == g


def test_a_task_that_raises_on_a_worker_is_an_error_not_a_silent_result():
    """Numba raises on complex division by zero inside a user op; wherever the failing task
    ran (caller or worker), the call raises and returns nothing."""
    div = jitops.elementwise(lambda a, b: a / b)
    a = np.full(N, 1 + 1j)
    b = np.ones(N, complex)
    for where in (0, N // 2, N - 1):  # in the first, a middle and the last task
        b[:] = 1
        b[where] = 0
        with pytest.raises(RuntimeError, match="raised an exception inside the compiled"):
            div(a, b)
    b[:] = 2
    np.testing.assert_array_equal(div(a, b), a / 2)


@jitops.elementwise
def _slow_where_large(x):
    """x itself where x <= 0; 2.0 after int(x) steps of s -> s / 2 + 1 otherwise (the fixed
    point, exact in float64 after ~60 steps): one element can hold its task for ms."""
    s = x
    for _ in range(int(x)):
        s = s * 0.5 + 1.0
    return s


@needs_two
def test_threads_waiting_for_a_held_task_sleep_and_are_woken():
    """A thread with nothing left to claim while another still runs the job's last task
    spins briefly, then sleeps on the futex (its core free for the scheduler to move a held
    thread there: jitops.cpu.threads.pool._wait_done) and is woken when the last task is counted.
    With the sleep's own timeout raised to 0.9 s, a missed wake would cost a call that long:
    each call here takes milliseconds, and the answer is complete."""
    p = pool.get()
    ctl = p.ctl
    x = np.zeros(N)
    expect = np.zeros(N)
    _slow_where_large(x)  # compiled
    saved = int(p.words[CONTROL.JOIN_TIMEOUT])
    p.words[CONTROL.JOIN_TIMEOUT] = 900_000_000
    try:
        sleeps = pool.word(ctl, CONTROL.JOIN_SLEEPS)
        worst = 0.0
        for k in range(12):
            where = (N - 1, 0, N // 2)[k % 3]  # the last, the first, a middle task
            x[:] = 0
            x[where] = 2e6  # ~10 ms of steps for this one element
            expect[:] = 0
            expect[where] = 2.0
            t0 = time.perf_counter()
            r = _slow_where_large(x)
            worst = max(worst, time.perf_counter() - t0)
            np.testing.assert_array_equal(r, expect)
            assert pool.word(ctl, CONTROL.DONE) == _job_tasks(ctl)
        assert pool.word(ctl, CONTROL.JOIN_SLEEPS) > sleeps  # the sleeping path ran
        # a woken waiter counts itself out after it wakes, on its own time: the call may
        # return first (seen on a loaded 2-core CI run); a waiter never woken stays counted
        deadline = time.monotonic() + 2.0
        while pool.word(ctl, CONTROL.JOIN_WAITERS) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert pool.word(ctl, CONTROL.JOIN_WAITERS) == 0
        assert worst < 0.6, f"a call took {worst:.2f} s: a waiting thread was not woken"
    finally:
        p.words[CONTROL.JOIN_TIMEOUT] = saved


def _job_tasks(ctl: int) -> int:
    """The task count of the last job (the low half of ``CONTROL.INFO``)."""
    return pool.word(ctl, CONTROL.INFO) & ((1 << 32) - 1)


@contextlib.contextmanager
def _loaded_machine(per_cpu: int = 3):
    """Busy processes pinned to this process's CPUs, ``per_cpu`` a CPU (a load of 3 on each
    core): every runnable thread of ours waits its turn behind them."""
    cpus = sorted(os.sched_getaffinity(0))
    code = f"import os; os.sched_setaffinity(0, {cpus!r})\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(per_cpu * len(cpus))]
    try:
        time.sleep(0.2)  # all started and spinning
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


@contextlib.contextmanager
def _idle_for(seconds: float):
    """Workers woken within the block wait ``seconds`` for the next job before sleeping."""
    words = pool.get().words
    before = int(words[CONTROL.IDLE_NS])
    words[CONTROL.IDLE_NS] = int(seconds * 1e9)
    try:
        yield
    finally:
        words[CONTROL.IDLE_NS] = before


def _workers_cpu_ticks(p) -> int:
    total = 0
    for tid in {t.native_id for t in p.threads}:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


@needs_two
@pytest.mark.parametrize("loaded", [False, True], ids=["idle machine", "loaded machine"])
def test_an_idle_pool_sleeps_instead_of_spinning(loaded):
    """Workers fall asleep a bounded wall time after their last job (``pool.IDLE_US``), on a
    loaded machine too: there each yield of the core may last a time slice of another
    process, and workers that counted yields stayed runnable for many seconds."""
    with _loaded_machine() if loaded else contextlib.nullcontext():
        jitops.add(np.ones(N), 1.0)
        p = pool.get()
        # all asleep for 0.2 s on end: a worker the call woke but the loaded machine has not
        # run yet still counts as asleep, for one read (its wake-up was this test's race)
        t0 = asleep = time.monotonic()
        while time.monotonic() - t0 < 5:
            now = time.monotonic()
            if pool.word(p.ctl, CONTROL.SLEEPERS) != len(p.threads):
                asleep = now
            elif now - asleep >= 0.2:
                break
            time.sleep(0.01)
        took = time.monotonic() - t0
        assert len(p.threads) >= 1 and time.monotonic() - asleep >= 0.2 \
            and pool.word(p.ctl, CONTROL.SLEEPERS) == len(p.threads), \
            f"workers still awake after {took:.1f} s (loaded: {loaded})"
        # asleep means no CPU time: the workers' own clocks stand still over 0.3 s
        before = _workers_cpu_ticks(p)
        time.sleep(0.3)
        assert _workers_cpu_ticks(p) - before <= 1  # a tick is 10 ms; a spinning worker takes 30
    # and a sleeping pool wakes for the next call
    x = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(jitops.subtract(x, x[::-1]), x - x[::-1])


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={k: v for k, v in os.environ.items()
                                                       if k != "JITOPS_POOL"})


def test_the_process_exits_promptly_with_workers_running_or_asleep():
    code = """
        import time, numpy as np, jitops
        x = np.ones(1 << 20)
        jitops.add(x, x)
        {pause}
        print("done")
    """
    for pause in ("", "time.sleep(0.5)"):
        t0 = time.monotonic()
        res = _child(code.format(pause=pause))
        assert res.returncode == 0 and res.stdout.split() == ["done"], res.stderr[-2000:]
        assert time.monotonic() - t0 < 60


def test_workers_have_room_for_staged_tiles_whatever_stack_size_the_program_set():
    """A program's ``threading.stack_size`` is not the workers': each gets
    ``pool.WORKER_STACK`` (staged complex128 tiles overflowed 160 KiB stacks: a segfault),
    and the program's own setting is put back for its threads."""
    res = _child("""
        import threading
        threading.stack_size(160 * 1024)
        import numpy as np, jitops
        from jitops.cpu.threads import pool

        @jitops.elementwise
        def f4(a, b, c, d):
            return a * b + c * d

        x = (np.random.default_rng(0).random((600, 700)) + 1j).astype(np.complex128)
        assert np.array_equal(jitops.subtract(x.T, x.T[::-1]), x.T - x.T[::-1])
        assert np.allclose(f4(x.T, x.T, x.T, x.T), x.T * x.T + x.T * x.T)
        assert len(pool.get().threads) >= 1 or jitops.get_num_threads() == 1
        print(threading.stack_size())
    """)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == [str(160 * 1024)]


def test_many_threads_many_small_parallel_jobs():
    """Claims race: eight Python threads, each thousands of parallel jobs of a few tasks
    (a low threshold), every result checked."""
    code = """
        import os
        os.environ["JITOPS_PARALLEL_THRESHOLD"] = "64"
        import threading, numpy as np, jitops
        errors = []
        def work(seed):
            rng = np.random.default_rng(seed)
            for _ in range(1500):
                n = int(rng.integers(64, 5000))
                x = rng.standard_normal(n).astype(np.float32)
                y = rng.standard_normal(n).astype(np.float32)
                if not np.array_equal(jitops.subtract(x, y), x - y):
                    errors.append(n)
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts: t.start()
        for t in ts: t.join()
        print("errors", len(errors))
    """
    res = _child(code)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["errors", "0"]


def test_pool_driver_is_one_signature_and_cached():
    jitops.add(np.ones(N), 1.0)
    assert len(kernels.KERNELS["pooled"].signatures) == 1
    assert len(pool._worker.signatures) == 1


@needs_two
def test_a_forked_child_knows_its_own_pid_and_pool():
    """``pool.current_pid`` (the pid without a system call) follows a fork: the child gets a
    pool and workers of its own, and its large calls are right and shared with them."""
    code = """
        import os, numpy as np, jitops
        from jitops.cpu.threads import pool
        from jitops.cpu.kernels.layout import CONTROL
        x = np.arange(1 << 20, dtype=np.float64)
        assert np.array_equal(jitops.add(x, x), x + x)
        parent = pool.get()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            import time
            right, shared = [], []
            # a worker just started may miss the first jobs, and on a loaded machine many:
            # calls until one is shared (or 20 s), each checked
            deadline = time.monotonic() + 20.0
            while not any(shared) and time.monotonic() < deadline:
                right.append(np.array_equal(jitops.add(x, x), x + x))
                ctl = pool.get().ctl
                shared.append(pool.word(ctl, CONTROL.BY_CALLER)
                              < pool.word(ctl, CONTROL.INFO) & 0xFFFFFFFF)
            ok = (pool.current_pid() == os.getpid() != parent.pid
                  and pool.get() is not parent and all(right) and any(shared)
                  and len(pool.get().threads) == jitops.get_num_threads() - 1)
            os.write(w, b"ok" if ok else b"no")
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(r, 2).decode(), pool.current_pid() == os.getpid())
    """
    res = _child(code)
    assert res.returncode == 0 and res.stdout.split() == ["ok", "True"], res.stderr[-2000:]


def _thread_states(p) -> set[str]:
    """The kernel's run state of each worker thread (``S``: asleep in a wait)."""
    states = set()
    for t in p.threads:
        with open(f"/proc/self/task/{t.native_id}/stat") as f:
            states.add(f.read().rsplit(")", 1)[1].split()[0])
    return states


def _wait_for_sleepers(want_all: bool, timeout: float = 20.0) -> bool:
    """Wait until every worker sleeps (``want_all``) or none does; False on timeout.

    Asleep means counted as a sleeper *and* waiting in the kernel: a worker woken by the
    last job but not yet given a core by the scheduler (a loaded machine) still counts as a
    sleeper, and would be awake for the next call."""
    p = pool.get()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = pool.word(p.ctl, CONTROL.SLEEPERS)
        if want_all:
            if n == len(p.threads) >= 1 and _thread_states(p) == {"S"} \
                    and pool.word(p.ctl, CONTROL.SLEEPERS) == n:
                return True
            time.sleep(0.001)
        elif n == 0:
            return True
    return False


@needs_two
def test_a_repeat_while_the_workers_sleep_runs_serially_and_wakes_them_in_a_burst(
        monkeypatch):
    """A parallel repeat below ``config.ASLEEP_SERIAL_MAX`` elements, called after the
    workers fell asleep, runs on the calling thread (no job). Calls further apart than
    ``config.ASLEEP_WAKE_WINDOW_S`` leave them asleep; the second of two closer together
    wakes them, and a repeat called while they are awake is a parallel job again. out=, a
    new result, a weak scalar."""
    from jitops import dispatch
    from jitops.cpu.compile import hooks

    if not hooks.ok("fastcall"):  # the serial run is the compiled entry's
        pytest.skip("the fastcall hook is off here (tests/test_hooks.py covers the public path)")
    n = 2 * _config.PARALLEL_THRESHOLD
    assert n < _config.ASLEEP_SERIAL_MAX
    x = np.linspace(-1, 1, n).astype(np.float32)
    y = x[::-1].copy()
    out = np.empty_like(x)
    dispatch.clear()
    calls = {"out=": lambda: jitops.subtract(x, y, out=out),
             "new": lambda: jitops.subtract(x, y),
             "weak": lambda: jitops.subtract(x, 3.0)}
    want = {"out=": x - y, "new": x - y, "weak": x - np.float32(3.0)}

    def serially(name):
        before = _generation()
        out[:] = np.nan
        r = calls[name]()
        assert r.dtype == np.float32 and r.shape == (n,)
        np.testing.assert_array_equal(r, want[name])
        assert _generation() == before, f"{name}: a job woke the workers"

    for name, call in calls.items():
        for _ in range(3):  # seen, then remembered
            call()
        # the entry that wakes the workers, counted (a signal may also end a worker's sleep,
        # so whether one is awake just after says nothing about the calls)
        r = next(m.latest for m in repeat.MEMOS
                 if m.latest is not None and m.latest.waking is not None)
        woke, waking = [], r.waking
        r.waking = lambda *a, waking=waking: woke.append(a) or waking(*a)
        assert _wait_for_sleepers(True), "the workers did not fall asleep"
        monkeypatch.setattr(repeat, "_WAKE_WINDOW", 0.0)  # every call "far apart"
        for _ in range(3):
            serially(name)
        assert not woke, f"{name}: calls far apart woke the workers"
        monkeypatch.setattr(repeat, "_WAKE_WINDOW", 1e9)  # every call "close together"
        serially(name)
        assert len(woke) == 1, f"{name}: a burst did not take the waking entry"
        # the workers may or may not have woken and slept again since: put them to sleep
        assert _wait_for_sleepers(True), f"{name}: the workers did not fall asleep again"
        # a call that finds a woken worker awake is a parallel job. Woken workers here wait
        # for the next job for minutes instead of milliseconds, so that no amount of load
        # on the machine can put them back to sleep before this thread sees one awake.
        with _idle_for(600):
            serially(name)
            assert len(woke) == 2, f"{name}: a burst did not take the waking entry"
            assert _wait_for_sleepers(False), f"{name}: the burst woke no worker"
            before = _generation()
            np.testing.assert_array_equal(call(), want[name])
            assert _generation() == before + 1, f"{name}: an awake pool ran no job"
        assert _wait_for_sleepers(True), f"{name}: the workers did not fall asleep again"


@needs_two
def test_the_serial_run_while_asleep_can_be_turned_off(monkeypatch):
    from jitops import dispatch

    monkeypatch.setattr(repeat, "ASLEEP_SERIAL_MAX", 0)
    dispatch.clear()
    n = 2 * _config.PARALLEL_THRESHOLD
    x = np.ones(n, np.float32)
    out = np.empty_like(x)
    for _ in range(3):
        jitops.add(x, x, out=out)
    assert _wait_for_sleepers(True)
    before = _generation()
    jitops.add(x, x, out=out)
    assert _generation() == before + 1
    np.testing.assert_array_equal(out, 2 * x)
    dispatch.clear()


def test_a_forked_child_repeats_a_call_remembered_while_the_parents_pool_slept():
    """The child's repeat of a parallel call its parent remembered with workers asleep runs
    on the child's own pool, right (the parent's control block, copied, is not the child's)."""
    code = """
        import os, time, numpy as np, jitops
        from jitops.cpu.threads import pool
        from jitops.cpu.kernels.layout import CONTROL
        x = np.arange(1 << 17, dtype=np.float32)
        for _ in range(3):
            jitops.add(x, x)
        p = pool.get()
        deadline = time.monotonic() + 20
        while pool.word(p.ctl, CONTROL.SLEEPERS) < len(p.threads) and time.monotonic() < deadline:
            time.sleep(0.001)
        pid = os.fork()
        if pid == 0:
            ok = all(np.array_equal(jitops.add(x, x), x + x) for _ in range(20))
            ok = ok and pool.get() is not p
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("ok" if os.waitstatus_to_exitcode(status) == 0 else "child failed")
    """
    res = _child(code)
    assert res.returncode == 0 and res.stdout.split() == ["ok"], res.stderr[-2000:]
