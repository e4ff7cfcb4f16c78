"""A process's whole life: interrupts at any bytecode, forks by any means (during compiles
too), calls nested in a call (signal handlers, ``__del__``), threads that cannot start, exit.

Each scenario runs in its own process with a timeout: a failure here is often a hang."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

# What every interrupt scenario checks once the interrupts stop: the answers are NumPy's, the
# pool is free and parallel calls run on it again (a job is published), and exit is quick.
_AFTER = """
    stopping[0] = True  # a handler still pending must not re-arm the timer
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    time.sleep(0.01)
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(SIG, signal.SIG_IGN)
    from jitops.cpu.threads import pool
    from jitops.cpu.kernels.layout import CONTROL
    X = np.random.default_rng(1).standard_normal((2000, 500))
    Y = np.random.default_rng(2).standard_normal(500)
    assert np.array_equal(jitops.subtract(X, Y), X - Y)
    assert np.array_equal(jitops.elementwise(lambda a, b: a * b)(X, Y), X * Y)
    p = pool._pool
    if pool.AVAILABLE and jitops.get_num_threads() > 1:
        assert p is not None and not p.busy, "the pool was left taken"
        gen = pool.word(p.ctl, CONTROL.INFO) >> 32  # the job generation (pool or team)
        jitops.subtract(X, Y)
        assert pool.word(p.ctl, CONTROL.INFO) >> 32 != gen, "a parallel call ran serially"
        assert all(t.is_alive() for t in p.threads)
    print("caught", caught, "done", done)
"""

_INTERRUPTS = """
    import os, random, signal, sys, time
    import numpy as np, jitops
    MODE, TARGET, SIG = sys.argv[1], int(sys.argv[2]), getattr(signal, sys.argv[3])
    EXC = KeyboardInterrupt if SIG == signal.SIGALRM else SystemExit
    rng = random.Random(int(sys.argv[4]))
    DELAYS, WEIGHTS = (1e-4, 5e-4, 2e-3, 2e-2, 0.15), (30, 30, 30, 8, 2)
    if MODE == "torch":
        import torch
        torch.ones(1000) + 1  # PyTorch's OpenMP team runs the main thread's jobs
    armed, stopping = [False], [False]
    def handler(signum, frame):
        if not stopping[0]:  # mostly short, now and then long enough to land in a compile
            signal.setitimer(signal.ITIMER_REAL, rng.choices(DELAYS, WEIGHTS)[0])
        if armed[0]:
            armed[0] = False
            raise EXC
    signal.signal(signal.SIGALRM, handler)
    if SIG != signal.SIGALRM:  # SIGTERM: a handler raising SystemExit, sent by the timer's
        def term(signum, frame):
            if armed[0]:
                armed[0] = False
                raise SystemExit(1)
        signal.signal(SIG, term)
        def handler(signum, frame):  # noqa: F811
            if not stopping[0]:
                signal.setitimer(signal.ITIMER_REAL, rng.choices(DELAYS[:4], WEIGHTS[:4])[0])
                os.kill(os.getpid(), SIG)
        signal.signal(signal.SIGALRM, handler)
    X = np.random.default_rng(1).standard_normal((2000, 500))
    Y = np.random.default_rng(2).standard_normal(500)
    Xf = X.astype(np.float32)
    T = np.random.default_rng(3).standard_normal((600, 700)).astype(np.float32)
    ops = ("add", "subtract", "multiply", "maximum", "fmin", "divide")
    dtypes = (np.float32, np.float64, np.int32, np.int16, np.uint8, np.int64, np.float16)
    warm = {d: (X.astype(d), Y.astype(d)) for d in dtypes}
    QUIET = open(os.devnull, "w")
    caught = done = 0
    signal.setitimer(signal.ITIMER_REAL, 0.001)
    t0 = time.monotonic()
    i = 0
    while caught < TARGET and time.monotonic() - t0 < 240:
        i += 1
        try:
            armed[0] = True
            if MODE in ("pooled", "torch"):
                r = jitops.subtract(X, Y) if i % 2 else jitops.elementwise_add(X, Y, axis=1)
            elif MODE == "serial":
                r = jitops.subtract(X[:10], Y)
            elif MODE == "tiled":
                r = jitops.subtract(T.T, T.T.copy())
            elif MODE == "user":
                r = jitops.elementwise(lambda a, b: a * b + 1.0)(X, Y)
            elif MODE == "compile":  # new signatures, empty cache: compiles interrupted
                a, b = warm[dtypes[i % len(dtypes)]]
                r = getattr(jitops, ops[(i // len(dtypes)) % len(ops)])(a, b)
            elif MODE == "warmup":  # the kernel cache filled ahead, a new dtype each time
                from jitops import warmup
                warmup.run(ops=(ops[i % len(ops)],), stream=QUIET,
                           dtypes=(("float32", "float64", "int16", "int64", "uint8")[i % 5],))
            elif MODE == "out":
                out = np.empty_like(X)
                r = jitops.subtract(X, Y, out=out)
            armed[0] = False
            done += 1
        except EXC:
            caught += 1
    assert caught >= TARGET, (caught, done)
""" + _AFTER


def _run(code, *args, env=None, timeout=300):
    e = dict(os.environ, **(env or {}))
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout, env=e)
    return res, time.monotonic() - t0


@pytest.mark.parametrize("mode, target", [
    ("pooled", 2000), ("serial", 1000), ("tiled", 800), ("user", 600), ("out", 1000),
    ("compile", 150), ("warmup", 100),
])
def test_thousands_of_interrupts_leave_nothing_taken(mode, target, tmp_path):
    """KeyboardInterrupt from a signal handler at random moments of every kind of launch
    and of first compiles on an empty cache: afterwards the answers are right, the pool is
    free and parallel again, and the process exits at once."""
    fresh = mode in ("compile", "warmup")
    env = {"JITOPS_CACHE_DIR": str(tmp_path / "cache")} if fresh else {}
    res, took = _run(_INTERRUPTS, mode, target, "SIGALRM", 7, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "caught" in res.stdout, res.stdout
    if fresh:  # cache writes interrupted leave no temporary file behind
        left = [p.name for p in (tmp_path / "cache").rglob("*") if "tmp" in p.name]
        assert left == [], left


@pytest.mark.parametrize("layer", ["workqueue", "tbb", "omp"])
def test_interrupts_on_numbas_layers(layer):
    """The same on Numba's threading layers (workqueue: one launch at a time, a guard of
    jitops')."""
    env = {"JITOPS_POOL": "0", "NUMBA_THREADING_LAYER": layer}
    res, _ = _run(_INTERRUPTS, "pooled", 500, "SIGALRM", 8, env=env)
    assert res.returncode == 0, res.stderr[-3000:]


def test_sigterm_handlers_raising_systemexit():
    res, _ = _run(_INTERRUPTS, "pooled", 500, "SIGTERM", 9)
    assert res.returncode == 0, res.stderr[-3000:]


def test_interrupts_beside_pytorch():
    pytest.importorskip("torch", reason="PyTorch is installed by the test extra on "
                                        "Python 3.11 x86-64 (pip install torch==2.13.0)")
    res, _ = _run(_INTERRUPTS, "torch", 1000, "SIGALRM", 10)
    assert res.returncode == 0, res.stderr[-3000:]


def test_exit_is_quick_after_interrupts():
    """The interpreter exits within 2 s of the last statement (the pool's at-exit stop
    never waits for long)."""
    code = _INTERRUPTS + "\n    import time; print('end', time.monotonic())\n"
    res, _ = _run(code, "pooled", 300, "SIGALRM", 11)
    assert res.returncode == 0, res.stderr[-3000:]
    end = float(res.stdout.split("end")[-1])
    assert time.monotonic() - end < 2.0


_HELD_AT_EXIT = """
    import numpy as np, jitops, time
    from jitops.cpu.threads import pool
    x = np.ones(10**6)
    jitops.add(x, 1.0)
    p = pool.get()
    p.busy = True  # as a job that never returned would leave it
    print(time.monotonic())
"""


def test_exit_does_not_wait_for_a_pool_that_stays_taken():
    res, _ = _run(_HELD_AT_EXIT)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - float(res.stdout) < 3.0


def test_compiles_hold_signals_back_until_they_end(tmp_path):
    """A Ctrl-C that arrives during a compile is raised right after it, never inside
    Numba's compiler, and the compile itself completes (it is in the cache's memory)."""
    code = """
        import signal, time, threading, os
        import numpy as np, jitops
        from jitops.cpu.compile import lifecycle
        seen = []
        def handler(signum, frame):
            seen.append(lifecycle.compile_in_progress())
            raise KeyboardInterrupt
        signal.signal(signal.SIGINT, handler)
        x = np.arange(10, dtype=np.int16)
        timer = threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        try:
            jitops.subtract(x, x)  # a first compile: longer than 0.05 s
        except KeyboardInterrupt:
            pass
        late = time.monotonic() - t0
        assert seen == [False], seen  # the handler ran, and not inside the compile
        t1 = time.monotonic()
        assert np.array_equal(jitops.subtract(x, x), x - x)
        print(late, time.monotonic() - t1)
    """
    res, _ = _run(code, env={"JITOPS_CACHE_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    delayed, second = map(float, res.stdout.split())
    assert delayed > 0.05


_LIBC_FORK = """
    import ctypes, os, sys, numpy as np, jitops
    if sys.argv[1] == "torch":
        import torch
        torch.ones(10**6) + 1
    x = np.random.default_rng(0).standard_normal(4 * 10**6)
    jitops.subtract(x, 1.0)  # a job on the pool (or PyTorch's team)
    libc = ctypes.PyDLL(None)
    pid = libc.fork()  # no os.register_at_fork hook runs (the GIL held, as C code holds it)
    if pid == 0:
        ok = np.array_equal(jitops.subtract(x, 1.0), x - 1.0)
        ok &= np.array_equal(jitops.elementwise(lambda a: a * 2)(x), x * 2)
        os._exit(0 if ok else 3)
    _, st = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st))
"""


@pytest.mark.parametrize("with_torch", [False, True])
def test_a_child_forked_by_libc_runs_its_own_jobs(with_torch):
    if with_torch:
        pytest.importorskip("torch", reason="PyTorch is installed by the test extra on "
                                            "Python 3.11 x86-64 (pip install torch==2.13.0)")
    res, _ = _run(_LIBC_FORK, "torch" if with_torch else "plain", timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split()[-1] == "0", res.stdout


_FORK_DURING_COMPILES = """
    import ctypes, os, sys, threading, time
    import numpy as np, jitops
    stop = threading.Event()
    def compile_forever():
        i = 0
        while not stop.is_set():
            i += 1
            jitops.elementwise(lambda a, b: a * b + float(i))(np.ones(3), np.ones(3))
    t = threading.Thread(target=compile_forever, daemon=True)
    t.start()
    time.sleep(0.3)
    kids = []
    for k in range(6):
        time.sleep(0.05 * k)
        pid = os.fork()
        if pid == 0:
            y = np.arange(5, dtype=np.int8)
            ok = np.array_equal(jitops.elementwise(lambda a: a - 3)(y), y - 3)
            ok &= np.array_equal(jitops.subtract(y, np.int8(1)), y - 1)
            os._exit(0 if ok else 3)
        kids.append(pid)
    stop.set()
    codes = []
    for pid in kids:
        for _ in range(600):
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                codes.append(os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st))
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            codes.append("hung")
    print(codes)
"""


def test_children_forked_while_another_thread_compiles_can_compile(tmp_path):
    """os.fork waits for the compile in progress (the compiler lock taken around it)."""
    res, _ = _run(_FORK_DURING_COMPILES, timeout=240, env={"JITOPS_CACHE_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == str([0] * 6), res.stdout


_LIBC_FORK_DURING_A_COMPILE = """
    import ctypes, os, sys, threading, time
    import numpy as np, jitops
    from numba.core.compiler_lock import global_compiler_lock
    x = np.arange(10**6, dtype=np.float64)
    jitops.subtract(x, 1.0)  # compiled before the fork
    inside, leave = threading.Event(), threading.Event()
    def compile_():
        with global_compiler_lock:  # a compile in progress, as long as the test needs
            inside.set()
            leave.wait(30)
    t = threading.Thread(target=compile_, daemon=True)
    t.start()
    inside.wait(10)
    pid = ctypes.PyDLL(None).fork()
    if pid == 0:
        ok = np.array_equal(jitops.subtract(x, 1.0), x - 1.0)
        try:
            jitops.subtract(x.astype(np.int8), np.int8(1))  # a new kernel
            code = 4
        except RuntimeError as e:
            code = 0 if ("forked by C code" in str(e) and ok) else 3
        except BaseException as e:
            print(repr(e), file=sys.stderr)
            code = 5
        os._exit(code)
    leave.set()
    _, st = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st))
"""


def test_a_child_forked_by_c_code_mid_compile_says_so_and_runs_what_was_compiled(tmp_path):
    """Numba's state is half written in such a child: its compiles raise a RuntimeError that
    says why (never a hang), and kernels compiled before the fork still answer."""
    res, _ = _run(_LIBC_FORK_DURING_A_COMPILE, timeout=120,
                  env={"JITOPS_CACHE_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split()[-1] == "0", res.stdout


_NESTED = """
    import gc, signal, sys, numpy as np, jitops
    kind = sys.argv[1]
    big = np.ones(3 * 10**6)  # results of 24 MB: recycled buffers
    small = np.ones(100)
    got = []
    def nested():
        r = jitops.add(big, 1.0)
        got.append(bool(r[0] == 2.0))
        with jitops.threads(2):
            got.append(bool(jitops.subtract(big, 1.0)[-1] == 0.0))
        got.append(bool(jitops.multiply(small, 3.0)[0] == 3.0))
    class Cycle:
        def __init__(self):
            self.me = self
        def __del__(self):
            nested()
    if kind == "signal":
        inside = [False]
        def handler(signum, frame):
            if not inside[0]:  # (the timer fires again while a handler runs)
                inside[0] = True
                try:
                    nested()
                finally:
                    inside[0] = False
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.003, 0.003)
    n = 0
    while len(got) < 300 and n < 5000:
        n += 1
        if kind == "del":
            Cycle()
            if n % 3 == 0:
                gc.collect()
        r = jitops.subtract(big, 0.5)
        assert r[0] == 0.5
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    assert got and all(got), got[:20]
    print(len(got))
"""


@pytest.mark.parametrize("kind", ["signal", "del"])
@pytest.mark.parametrize("layer", ["jitops", "workqueue", "tbb", "omp"])
def test_calls_nested_in_a_call_never_wait_for_it(kind, layer, tmp_path):
    """A signal handler and a ``__del__`` (a reference cycle collected mid-call) that call
    jitops -- large results, a ``threads()`` block, small calls -- while the same thread is
    inside a large call: no deadlock, right answers, nothing on stderr. A ``__del__`` on jitops'
    own layer starts from an empty cache, so the first calls compile: a collection inside
    Numba's compiler once raised an ImportError in ``__del__`` (a half-imported module) or
    turned fastcall off ("unsupported recursion"), and one inside ``threading.Thread()`` (the
    recycling reaper's start) deadlocked on Python 3.13."""
    env = {"JITOPS_POOL": "0", "NUMBA_THREADING_LAYER": layer} if layer != "jitops" else (
        {"JITOPS_CACHE_DIR": str(tmp_path / "cache")} if kind == "del" else {})
    res, _ = _run(_NESTED, kind, env=env, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stderr.strip() == "", res.stderr[-3000:]


_REAPER_START = """
    import gc, sys, threading, numpy as np, jitops
    where = sys.argv[1]
    big = np.ones(3 * 10**6)  # results of 24 MB: recycled buffers
    got = []
    class Cycle:
        def __init__(self):
            self.me = self
        def __del__(self):
            got.append(float(jitops.add(big, 1.0)[0]))
    gc.disable()  # each Cycle is collected where the patch below says, nowhere else
    if where == "new thread":  # at the reaper thread's first steps, before start() returns
        real = threading.Thread._bootstrap_inner
        def bootstrap(self):
            if self.name == "jitops-recycle-reaper":
                Cycle()
                gc.collect()
            real(self)
        threading.Thread._bootstrap_inner = bootstrap
    else:  # inside Thread(), on the thread that starts it
        real = threading.Thread.__init__
        def init(self, *a, **k):
            if k.get("name") == "jitops-recycle-reaper":
                Cycle()
                gc.collect()
            real(self, *a, **k)
        threading.Thread.__init__ = init
    r = jitops.subtract(big, 0.5)  # the first recycled result starts the reaper
    for _ in range(500):
        if got:
            break
        threading.Event().wait(0.01)
    assert r[0] == 0.5 and got == [2.0], got
    print("ok")
"""


@pytest.mark.parametrize("where", ["new thread", "starting thread"])
def test_a_del_calling_jitops_while_the_reaper_starts(where):
    """A collection at the recycling reaper's start -- in ``Thread()`` on the calling thread,
    or in the new thread's first steps while ``start()`` waits for them -- runs a ``__del__``
    that makes a recycled result: no lock of jitops is held there (one held across
    ``start()`` deadlocked the two threads; one held across ``Thread()`` the caller)."""
    res, _ = _run(_REAPER_START, where, timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "ok"


_NO_THREADS = """
    import os, resource, warnings, numpy as np, jitops
    x = np.arange(4 * 10**6, dtype=np.float64)
    plus2 = jitops.elementwise(lambda a: a + 2)
    with jitops.threads(2):  # compiled, one worker started, while threads may start
        jitops.subtract(x, 1.0), plus2(x)
    os.setgid(65534); os.setuid(65534)  # RLIMIT_NPROC binds only a user that is not root
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    with warnings.catch_warnings(record=True) as w, jitops.threads(4):
        warnings.simplefilter("always")
        for _ in range(3):
            assert np.array_equal(jitops.subtract(x, 1.0), x - 1.0)
            assert np.array_equal(plus2(x), x + 2)
    msgs = [str(m.message) for m in w if "worker thread" in str(m.message)]
    assert len(msgs) == 1 and "JITOPS_NUM_THREADS" in msgs[0], msgs
    print("ok")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_a_process_that_cannot_start_threads_runs_serially(tmp_path):
    """Worker threads refused by the system (RLIMIT_NPROC): right answers on the threads it
    has, one warning naming JITOPS_NUM_THREADS, never an error."""
    res, _ = _run(_NO_THREADS, env={"JITOPS_CACHE_DIR": str(tmp_path), "NUMBA_NUM_THREADS": "4"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "ok"


# -- the smaller things a process meets ------------------------------------------------------


@pytest.mark.parametrize("name, value, says", [
    ("JITOPS_POOL_SPIN", "99999999999999999999999", "JITOPS_POOL_SPIN must be an integer from"),
    ("JITOPS_POOL_ALTERNATE", "2", "JITOPS_POOL_ALTERNATE must be an integer from 0 to 1"),
    ("JITOPS_BLOCK", "many", "JITOPS_BLOCK must be an integer"),
    ("JITOPS_POOL", "maybe", "JITOPS_POOL must be one of"),
    ("JITOPS_OMP", "2", "JITOPS_OMP must be one of"),
    ("JITOPS_RECYCLE_MB", "-1", "JITOPS_RECYCLE_MB must be an integer from 0"),
])
def test_every_environment_variable_is_checked_at_import(name, value, says):
    res, _ = _run("import jitops", env={name: value}, timeout=120)
    assert res.returncode != 0
    assert "ValueError" in res.stderr and says in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize("value, pooled", [("off", False), ("False", False), ("no", False),
                                           ("0", False), ("1", True), ("yes", True)])
def test_boolean_switches_take_every_spelling(value, pooled):
    res, _ = _run("from jitops.cpu.threads import pool; print(pool.AVAILABLE)",
                  env={"JITOPS_POOL": value}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(pooled)


def test_no_home_means_no_relative_cache_folder(tmp_path):
    """No HOME and no passwd entry (``docker run --user 12345``): ``~`` cannot be resolved,
    and the cache goes to this user's folder in the temporary directory."""
    code = """
        import os, os.path
        os.path.expanduser = lambda p: p  # what Python does with no HOME and no passwd entry
        from jitops.core import config
        d = config.cache_dir()
        assert os.path.isabs(d) and "~" not in d, d
        print(d)
    """
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "XDG_CACHE_HOME", "JITOPS_CACHE_DIR", "NUMBA_CACHE_DIR")}
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "~").exists()


def test_nothing_compiles_at_exit(tmp_path):
    """The pool's at-exit stop wakes its workers through libc, not a compiled function: in a
    process whose kernels came from the disk cache (the second run), nothing compiles at
    exit (a compiled wake-up called from Python cost 0.13 s of every exit)."""
    code = """
        import numpy as np, jitops, atexit
        from numba.core import event
        x = np.ones(10**6)
        jitops.subtract(x, 1.0)
        seen = []
        class Spy(event.Listener):
            def on_start(self, ev): seen.append(ev.data["dispatcher"])
            def on_end(self, ev): pass
        spy = Spy()
        event.register("numba:compile", spy)
        def report():
            print("compiled at exit:", len(seen), flush=True)
        from jitops.cpu.threads import pool
        atexit.unregister(pool._stop_at_exit)
        atexit.register(report)  # registered before jitops' stop: runs after it
        atexit.register(pool._stop_at_exit)
    """
    for _ in range(2):  # the first fills the cache
        res, _ = _run(code, timeout=120, env={"JITOPS_CACHE_DIR": str(tmp_path)})
        assert res.returncode == 0, res.stderr
    assert "compiled at exit: 0" in res.stdout, res.stdout + res.stderr


def test_a_result_too_large_names_its_shape_and_dtype():
    import numpy as np

    import jitops

    x = np.broadcast_to(np.float64(1.0), (1 << 44,))  # 128 TiB as a new result
    with pytest.raises(MemoryError, match=r"shape \(17592186044416,\) and dtype float64"):
        jitops.add(x, 1.0)


def test_the_same_lambda_made_again_compiles_once():
    """1000 re-creations of one lambda (as in a function called in a loop) compile once;
    another closure value is another definition, computed with its own value."""
    import numpy as np
    from numba.core import event

    import jitops

    x = np.arange(5.0)

    def step(k):
        return jitops.elementwise(lambda a, b: a * b + k)(x, x)

    np.testing.assert_array_equal(step(1.0), x * x + 1.0)
    seen = []

    class Spy(event.Listener):
        def on_start(self, ev):
            seen.append(ev.data["dispatcher"])

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Spy()):
        for _ in range(1000):
            np.testing.assert_array_equal(step(1.0), x * x + 1.0)
    assert seen == []
    np.testing.assert_array_equal(step(2.0), x * x + 2.0)


_START_INTERRUPTED = """
    import signal, threading
    from jitops.cpu.threads import pool

    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGALRM, handler)
    start = threading.Thread.start

    def interrupted_start(self):  # the signal arrives while the thread is being started
        signal.raise_signal(signal.SIGALRM)
        start(self)
    threading.Thread.start = interrupted_start
    p = pool.get()
    try:
        with p.held():
            p.ensure(1)
        print("no interrupt")
    except KeyboardInterrupt:
        print("interrupted")
    threading.Thread.start = start
    workers = [t for t in threading.enumerate() if t.name.startswith("jitops-worker")]
    print(len(p.threads), len(workers), p.thread_limit)
"""


def test_an_interrupt_while_a_worker_starts_leaves_it_recorded():
    """A KeyboardInterrupt arriving inside Thread.start (Python 3.10 then raised "release
    unlocked lock", which the pool took for a thread limit) is raised once the worker is
    started and recorded: no unrecorded worker, no limit."""
    res, _ = _run(_START_INTERRUPTED)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split("\n")[:2] == ["interrupted", "1 1 None"], res.stdout
