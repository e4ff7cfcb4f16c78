"""Recycled result buffers (jitops.cpu.recycle): a large new result may reuse the memory of a
result nobody uses any more -- the shortcut's safety net.

What must never happen: memory handed to a new result while an array, a view, a memoryview,
a buffer-protocol consumer, PyTorch or a DLPack capsule still reads it, or a recycled
buffer's old contents showing through an element the kernel did not write. What must happen:
an idle buffer of the right size is reused (else the shortcut buys nothing), idle memory
stays under its cap, a fork never inherits a held lock. The threshold is patched down so the
tests run on small arrays; each test starts from an empty module state.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import jitops
from jitops import dispatch
from jitops.core import config
from jitops.cpu import recycle

from .helpers import cgroup_join_source, cgroup_v1_child

N = 1 << 15  # elements of a test result: 128 KiB as float32, above the patched threshold
MIN = 1 << 16


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _shares(a: np.ndarray, b: np.ndarray) -> bool:
    return np.shares_memory(a, b)


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    if not recycle.enabled():
        pytest.fail("recycling is off on this interpreter: these tests cannot run")
    monkeypatch.setattr(config, "RECYCLE_MIN_BYTES", MIN)
    recycle.release()
    monkeypatch.setattr(recycle, "_buffers", [])
    dispatch.clear()
    yield
    dispatch.clear()


def _data(seed, shape=(N,), dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_an_idle_buffer_becomes_the_next_result_and_every_element_is_written():
    x, y = _data(1), _data(2)
    a = jitops.subtract(x, y)
    assert a.base is not None and a.base.nbytes == a.nbytes  # a view of a kept buffer
    where = _addr(a)
    a[:] = np.nan  # what a result that skipped an element would show
    del a
    b = jitops.subtract(y, x)
    assert _addr(b) == where
    np.testing.assert_array_equal(b, y - x)
    assert recycle.status()["reused"] >= 1


def _keepers():
    """Ways a caller keeps a result's memory alive without keeping the result object."""
    yield "view", lambda a: a[::2]
    yield "reshape", lambda a: a.reshape(2, -1)
    yield "transpose of a 2-d view", lambda a: a.reshape(2, -1).T
    yield "memoryview", memoryview
    yield "frombuffer", lambda a: np.frombuffer(a, np.uint8)
    yield "ndarray over its buffer", lambda a: np.ndarray(a.shape, a.dtype, buffer=a)
    yield "the base buffer", lambda a: a.base
    yield "ctypes", np.ctypeslib.as_ctypes
    yield "dlpack capsule", lambda a: a.__dlpack__()
    yield "from_dlpack", np.from_dlpack
    yield "a list holding it", lambda a: [a]
    yield "a view of a view", lambda a: a[1:][::3]


@pytest.mark.parametrize("how", [k for k, _ in _keepers()])
def test_memory_still_reachable_is_never_handed_out(how):
    keep = dict(_keepers())[how]
    x, y = _data(3), _data(4)
    a = jitops.subtract(x, y)
    expect = (x - y).copy()
    kept = keep(a)
    lo, hi = _addr(a), _addr(a) + a.nbytes
    del a
    for seed in range(3):  # new results of the same size while it is kept
        b = jitops.add(_data(10 + seed), _data(20 + seed))
        assert not (lo <= _addr(b) < hi), f"memory kept by a {how} was handed out again"
    if how == "memoryview":
        got = np.frombuffer(kept, np.float32)
    elif how == "ctypes":
        got = np.ctypeslib.as_array(kept)
    elif how == "a list holding it":
        got = kept[0]
    elif how == "the base buffer":
        got = kept.view(np.float32)
    elif how == "frombuffer":
        got = kept.view(np.float32)
    elif how == "dlpack capsule":
        got = None  # nothing reads a bare capsule; it only holds the array
    else:
        got = np.asarray(kept)
        expect = np.asarray(keep(expect))
    if got is not None:
        np.testing.assert_array_equal(got, expect)
    del kept, got
    c = jitops.add(_data(5), _data(6))  # released now: it may (and here does) come back
    assert recycle.status()["idle_bytes"] <= config.RECYCLE_BYTES
    del c


def test_torch_from_numpy_keeps_the_memory():
    torch = pytest.importorskip("torch", reason="needs PyTorch, which the test extra installs "
                                "on Python 3.11 x86-64 only; elsewhere: pip install torch")
    x, y = _data(7), _data(8)
    a = jitops.subtract(x, y)
    t = torch.from_numpy(a)
    lo = _addr(a)
    del a
    b = jitops.subtract(y, x)
    assert _addr(b) != lo
    np.testing.assert_array_equal(t.numpy(), x - y)


@pytest.mark.parametrize("case", ["contig", "row", "outer", "pdpd", "transposed", "strided",
                                  "scalar", "int8 wrap", "float16", "complex", "relu",
                                  "user op", "order K"])
def test_every_variant_writes_every_element_of_a_dirty_buffer(case):
    rng = np.random.default_rng(9)
    f = np.float32
    r = lambda *s, dt=f: rng.standard_normal(s).astype(dt)  # noqa: E731
    calls = {
        "contig": lambda: (jitops.subtract, r(N), r(N), {}),
        "row": lambda: (jitops.subtract, r(256, 128), r(128), {}),
        "outer": lambda: (jitops.subtract, r(256, 1), r(1, 128), {}),
        "pdpd": lambda: (jitops.subtract, r(4, 64, 8, 16), r(64), dict(broadcast="pdpd",
                                                                      axis=1)),
        "transposed": lambda: (jitops.subtract, r(256, 128).T, r(128, 256), {}),
        "strided": lambda: (jitops.multiply, r(2 * N)[::2], r(N), {}),
        "scalar": lambda: (jitops.subtract, r(N), 3.0, {}),
        "int8 wrap": lambda: (jitops.add, rng.integers(-128, 128, 4 * N, dtype=np.int8),
                              rng.integers(-128, 128, 4 * N, dtype=np.int8), {}),
        "float16": lambda: (jitops.subtract, r(2 * N, dt=np.float16), r(2 * N, dt=np.float16),
                            {}),
        "complex": lambda: (jitops.multiply, r(N // 2, dt=np.complex64),
                            r(N // 2, dt=np.complex64), {}),
        "relu": lambda: (jitops.subtract, r(N), r(N), dict(act="relu")),
        "user op": lambda: (jitops.elementwise(_axpb), r(64, 512), r(512), {}),
        "order K": lambda: (jitops.add, np.asfortranarray(r(256, 128)),
                            np.asfortranarray(r(256, 128)), {}),
    }
    fn, x, y, kw = calls[case]()
    first = fn(x, y, **kw) if case != "user op" else fn(x, y, 1.5)
    expect = first.copy()
    assert first.nbytes >= MIN
    dirty = np.frombuffer(first.base, np.uint8)
    dirty[:] = 0xFF  # NaN in every float, -1 in every int: seen if an element is skipped
    where = _addr(first)
    del first, dirty
    again = fn(x, y, **kw) if case != "user op" else fn(x, y, 1.5)
    assert _addr(again) == where, "the idle buffer was not reused"
    np.testing.assert_array_equal(again, expect)
    if case == "order K":
        assert again.flags.f_contiguous  # NumPy's order="K" layout, recycled memory or not
    if case == "relu":
        assert (again >= 0).all()


def _axpb(x, w, b):
    return x * w + b


def test_sizes_are_matched_exactly_and_live_results_never_share():
    xs = [_data(i, (N + 1024 * i,)) for i in range(6)]
    live = [jitops.subtract(x, x[::-1]) for x in xs]
    for a, x in zip(live, xs):
        np.testing.assert_array_equal(a, x - x[::-1])
    for i, a in enumerate(live):
        for b in live[i + 1:]:
            assert not _shares(a, b)
    smaller = live.pop(1)
    where = _addr(smaller)
    del smaller
    c = jitops.subtract(xs[2], xs[2])  # another size: the idle buffer does not fit it
    assert _addr(c) != where


def test_idle_memory_stays_under_its_cap_and_release_frees_it(monkeypatch):
    monkeypatch.setattr(config, "RECYCLE_BYTES", 3 * N * 4 + 100)
    for i in range(10):  # ten sizes, each dropped at once: each becomes idle
        jitops.add(_data(i, (N + 256 * i,)), 1.0)
        assert recycle.status()["idle_bytes"] <= config.RECYCLE_BYTES
    assert recycle.status()["idle_bytes"] > 0
    assert recycle.release() > 0
    assert recycle.status()["idle_bytes"] == 0


def test_a_result_over_the_cap_is_an_ordinary_array(monkeypatch):
    monkeypatch.setattr(config, "RECYCLE_BYTES", N)  # below one result
    a = jitops.add(_data(1), _data(2))
    del a
    assert recycle.status()["followed"] == 0


def test_many_live_results_are_followed_only_up_to_the_limit():
    live = [jitops.add(_data(i), float(i)) for i in range(3 * recycle.TRACKED_MAX)]
    assert recycle.status()["followed"] <= recycle.TRACKED_MAX
    for i, a in enumerate(live):
        np.testing.assert_array_equal(a, _data(i) + np.float32(i))
    addrs = {_addr(a) for a in live}
    assert len(addrs) == len(live)


def test_off_means_ordinary_arrays(monkeypatch):
    monkeypatch.setattr(config, "RECYCLE_BYTES", 0)
    before = recycle.status()
    for _ in range(4):
        a = jitops.subtract(_data(1), _data(2))
        np.testing.assert_array_equal(a, _data(1) - _data(2))
        del a
    after = recycle.status()
    assert not after["enabled"]
    assert (after["new"], after["reused"]) == (before["new"], before["reused"])


def test_threads_never_get_each_others_live_memory():
    """Eight threads make, hold and check results of one size: a buffer handed out while
    another thread's result still uses it would change that result under its check."""
    errors = []

    def work(t):
        try:
            rng = np.random.default_rng(t)
            for _ in range(40):
                x = rng.standard_normal(N).astype(np.float32)
                a = jitops.add(x, np.float32(t))
                b = jitops.subtract(x, np.float32(t))
                if not (np.array_equal(a, x + np.float32(t))
                        and np.array_equal(b, x - np.float32(t))) or _shares(a, b):
                    errors.append(t)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors
    assert recycle.status()["reused"] > 0


def test_the_count_is_trusted_only_where_it_sees_a_reference():
    probe = [np.empty(0, np.uint8)]
    alone = recycle._counts(probe)[0]
    assert alone == recycle._IDLE
    held = probe[0]
    assert recycle._counts(probe)[0] == alone + 1
    del held
    assert recycle._counts(probe)[0] == alone


def test_a_fork_while_the_lock_is_held_leaves_the_child_working():
    code = textwrap.dedent(f"""
        import os, signal, sys, threading
        import numpy as np, jitops
        from jitops.core import config
        from jitops.cpu import recycle
        config.RECYCLE_MIN_BYTES = {MIN}
        x = np.ones({N}, np.float32)
        jitops.add(x, x)
        held, go = threading.Event(), threading.Event()
        def hold():
            with recycle._lock:
                held.set()
                go.wait()
        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)
            r = jitops.add(x, x)  # takes the lock: a lock copied held would hang here
            os._exit(0 if float(r.sum()) == 2 * {N} else 3)
        go.set()
        t.join()
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])


# -- memory a user would have had with NumPy --------------------------------------------------


def _run(code: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_alternating_sizes_under_an_address_space_limit_succeed_where_numpy_does():
    """A limit a little above the process's use, results of 240 and 280 MB alternately, each
    dropped before the next, the limit set after ``import jitops``: NumPy runs every round,
    and so must jitops (the budget, read again before a new allocation, follows the limit:
    no idle 240 MB buffer is kept beside the 280 MB one)."""
    code = """
        import resource, sys, numpy as np, jitops
        a, b = np.zeros((30000, 1)), np.zeros((35000, 1))   # 240 and 280 MB results
        y = np.ones((1, 1000))
        jitops.add(np.zeros((300, 1)), y)                    # compiled, the pool started
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        limit = used + (400 << 20)                           # room for one result, not two
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        for who, add in (("numpy", np.add), ("jitops", jitops.add)):
            for i in range(6):
                r = add(a if i % 2 == 0 else b, y)
                assert r[0, 0] == 1.0
                del r
            print(who, "ok")
    """
    p = _run(code, {"JITOPS_RECYCLE_MB": ""})
    assert p.stdout.split() == ["numpy", "ok", "jitops", "ok"], p.stderr[-3000:]


def test_a_failed_allocation_is_retried_after_freeing_every_idle_buffer(monkeypatch):
    monkeypatch.setattr(config, "RECYCLE_BYTES", 64 * N)
    idle = jitops.add(_data(1), 1.0)  # N float32 elements: idle once dropped
    del idle
    assert recycle.status()["idle_bytes"] == 4 * N
    real, failed = np.empty, []

    class _Numpy:  # recycle's np, whose first large allocation fails
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(n, dtype):
            if n >= MIN and not failed:
                failed.append(n)
                raise MemoryError
            return real(n, dtype)

    monkeypatch.setattr(recycle, "np", _Numpy())
    before = recycle.status()["retried"]
    r = jitops.add(_data(2, (N + 64,)), 1.0)
    np.testing.assert_array_equal(r, _data(2, (N + 64,)) + np.float32(1))
    st = recycle.status()
    assert failed and st["retried"] == before + 1 and st["idle_bytes"] == 0


def test_idle_buffers_past_the_budget_are_freed_before_a_new_allocation(monkeypatch):
    import weakref

    monkeypatch.setattr(config, "RECYCLE_BYTES", 6 * N)  # one result of 4 N bytes, not two
    monkeypatch.setattr(config, "RECYCLE_EXPLICIT", True)
    idle = jitops.add(_data(1), 1.0)
    gone = weakref.ref(idle.base)
    del idle
    assert gone() is not None  # kept, idle
    real, alive_then = np.empty, []

    class _Numpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(n, dtype):
            alive_then.append(gone() is not None)
            return real(n, dtype)

    monkeypatch.setattr(recycle, "np", _Numpy())
    r = jitops.add(_data(2, (N + 64,)), 1.0)
    assert alive_then == [False], "the idle buffer was still held when the new one was made"
    np.testing.assert_array_equal(r, _data(2, (N + 64,)) + np.float32(1))


def test_idle_buffers_are_freed_after_the_idle_time():
    """Results of 3e6-3e7 float64 made, then dropped together: their buffers are kept for the
    next result of their size, then freed once idle for ``JITOPS_RECYCLE_IDLE_MS``, and the
    process's resident memory returns near where it was. (A buffer is freed only after the
    reaper has seen it idle for the whole idle time, so the check just after the drop holds
    on a loaded machine too; the wait for the freeing is bounded, not fixed.)"""
    code = """
        import os, time, numpy as np, jitops
        from jitops.cpu import recycle
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        y = np.ones((1, 1000))
        jitops.add(np.zeros((300, 1)), y)
        base = rss()
        results = [jitops.add(np.zeros((n, 1)), y) for n in (3000, 10000, 30000)]
        del results
        held = recycle.status()["idle_bytes"]
        print(held, rss() - base)
        deadline = time.monotonic() + 30
        while recycle.status()["idle_bytes"] and time.monotonic() < deadline:
            time.sleep(0.05)
        print(recycle.status()["idle_bytes"], rss() - base, recycle.status()["reaped"])
    """
    p = _run(code, {"JITOPS_RECYCLE_IDLE_MS": "1000", "JITOPS_RECYCLE_MB": "2048"})
    assert p.returncode == 0, p.stderr[-3000:]
    (held, grown), (idle, left, reaped) = [list(map(int, ln.split()))
                                           for ln in p.stdout.splitlines()]
    assert held == 8 * 1000 * (3000 + 10000 + 30000) and grown > 300 << 20  # kept, resident
    assert idle == 0 and reaped == 3
    assert left < 32 << 20, f"{left >> 20} MiB still resident after the idle time"


def test_the_budget_comes_from_an_address_space_limit():
    code = """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))
        from jitops.core import config
        print(config.RECYCLE_BYTES >> 20, config.RECYCLE_SOURCE)
    """
    p = _run(code, {"JITOPS_RECYCLE_MB": ""})
    assert p.returncode == 0, p.stderr[-3000:]
    mb, source = p.stdout.split(" ", 1)
    assert int(mb) == 3072 // 16 + 64 or int(mb) == 256  # max(1/16, min(256, 1/8))
    assert "RLIMIT_AS" in source and "3072 MiB" in source


def test_the_budget_reads_a_cgroup_memory_limit_v1_and_v2(tmp_path, monkeypatch):
    from jitops.core import limits

    (tmp_path / "proc").write_text("4:memory:/box/inner\n0::/app\n")
    v1 = tmp_path / "memory" / "box"
    (v1 / "inner").mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2 << 30))  # the parent's limit holds
    (v1 / "inner" / "memory.limit_in_bytes").write_text("9223372036854771712")  # none
    monkeypatch.setattr(limits, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(limits, "PROC_CGROUP", str(tmp_path / "proc"))
    monkeypatch.setattr(limits, "physical_memory", lambda: 256 << 30)
    monkeypatch.setattr(limits, "_rlimits", lambda: [])
    assert limits.memory_limit() == (2 << 30, str(v1 / "memory.limit_in_bytes"))
    # cgroup v2: the unified tree, memory.high below memory.max
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    app = tmp_path / "app"
    app.mkdir()
    (app / "memory.max").write_text(str(1 << 30))
    (app / "memory.high").write_text(str(768 << 20))
    assert limits.memory_limit() == (768 << 20, str(app / "memory.high"))


def test_the_budget_follows_a_real_cgroup_memory_limit():
    d = cgroup_v1_child("memory")
    try:
        with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
            f.write(str(2 << 30))
        code = cgroup_join_source(d) + textwrap.dedent("""
            from jitops.core import config
            print(config.RECYCLE_BYTES >> 20, config.RECYCLE_SOURCE)
        """)
        p = _run(code, {"JITOPS_RECYCLE_MB": ""})
        assert p.returncode == 0, p.stderr[-3000:]
        mb, source = p.stdout.split(" ", 1)
        assert int(mb) == 256 and "memory.limit_in_bytes" in source and "2048 MiB" in source
    finally:
        os.rmdir(d)
