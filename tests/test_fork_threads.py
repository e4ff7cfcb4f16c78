"""Forks, threads and other OpenMP users: never a hang, never a killed process, never a wrong
answer (SPEC section 4). Each scenario runs in its own process with a timeout, so a hang fails
the test instead of stalling the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # the test extra installs it where a CPU wheel exists
    HAVE_TORCH = False

TIMEOUT = 120

# Runs `body` in a forked child; the parent prints the child's fate. A hang is killed by the
# parent's alarm, so the subprocess always ends.
_CHILD = """
import os, signal, numpy as np
def in_child(body):
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)
        try:
            ok = body()
        except BaseException as e:
            print("child error:", repr(e), flush=True)
            ok = False
        os._exit(0 if ok else 3)
    _, st = os.waitpid(pid, 0)
    return os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st)
N = 1_000_000  # parallel-sized
"""

SCENARIOS = {
    # only small (serial) calls in the parent: the child's first parallel call
    "small-calls-then-fork": """
        import jitops
        jitops.add(np.ones(8), 1.0); jitops.subtract(np.ones((3, 4)), np.ones(4))
        def body():
            x = np.arange(N, dtype=np.float64)
            return np.array_equal(jitops.add(x, 1.0), x + 1.0)
        print(in_child(body))
    """,
    # a parallel call in the parent, then in the child
    "large-call-then-fork": """
        import jitops
        x = np.arange(N, dtype=np.float64)
        assert np.array_equal(jitops.add(x, 1.0), x + 1.0)
        def body():
            return np.array_equal(jitops.subtract(x, x[::-1]), x - x[::-1])
        print(in_child(body))
    """,
    # jitops imported only in the child
    "import-after-fork": """
        def body():
            import jitops
            x = np.arange(N, dtype=np.float32)
            return np.array_equal(jitops.multiply(x, 2.0), x * 2.0)
        print(in_child(body))
    """,
    # a multiprocessing fork pool whose workers run parallel kernels, after the parent did
    "fork-pool": """
        import multiprocessing as mp, jitops
        x = np.arange(N, dtype=np.float64)
        jitops.add(x, 1.0)
        def work(k):
            return bool(np.array_equal(jitops.add(x, float(k)), x + k))
        with mp.get_context("fork").Pool(2) as pool:
            res = pool.map_async(work, range(6)).get(60)
        print(0 if all(res) else 3)
    """,
    # sixteen Python threads launching parallel kernels at once, then a fork
    "sixteen-threads-then-fork": """
        import jitops
        from concurrent.futures import ThreadPoolExecutor
        x = np.arange(300_000, dtype=np.float64)
        def work(i):
            return all(np.array_equal(jitops.subtract(x, float(i)), x - i) for _ in range(5))
        with ThreadPoolExecutor(16) as p:
            assert all(p.map(work, range(32)))
        print(in_child(lambda: np.array_equal(jitops.add(x, 2.0), x + 2.0)))
    """,
}

TORCH_SCENARIOS = {
    # PyTorch started its OpenMP runtime in the parent; jitops imported only in the child
    "torch-then-fork-import-in-child": """
        import torch
        t = torch.ones(2_000_000); (t * 2).sum(); torch.add(t, t)
        def body():
            import jitops
            x = np.arange(N, dtype=np.float32)
            return np.array_equal(jitops.add(x, 1.0), x + 1.0)
        print(in_child(body))
    """,
    # PyTorch and jitops both busy in the parent, jitops in the child. (PyTorch's own next
    # parallel op hangs in such a child: GNU OpenMP's known limit, not something jitops can
    # change for it.)
    "torch-and-jitops-then-fork": """
        import torch, jitops
        x = np.arange(N, dtype=np.float32)
        t = torch.from_numpy(x)
        for _ in range(3):
            torch.add(t, t); jitops.add(x, x)
        def body():
            return np.array_equal(jitops.add(x, 1.0), x + 1.0) and \
                np.array_equal(jitops.subtract(x[::-1], x), x[::-1] - x)
        print(in_child(body))
    """,
    # jitops' jobs ran on PyTorch's OpenMP team in the parent (jitops.cpu.threads.omp); the child
    # inherits that team without its threads: it must use jitops' own pool
    "torch-team-then-fork": """
        import time, torch, jitops
        from jitops.cpu.threads import omp, pool
        x = np.arange(N, dtype=np.float32)
        torch.set_num_threads(2)  # a team beside the main thread, whatever the load
        torch.add(torch.from_numpy(x), 1.0)
        deadline = time.monotonic() + 30  # until a team thread is seen asleep (a busy machine)
        while pool.AVAILABLE and not omp.team() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert np.array_equal(jitops.subtract(x, 3.0), x - 3.0)
        if pool.AVAILABLE:  # (with JITOPS_POOL=0 Numba's layer runs every job)
            def seen():
                lines = []
                for tid in os.listdir("/proc/self/task"):
                    with open(f"/proc/self/task/{tid}/syscall") as f:
                        lines.append(tid + ": " + f.read().strip())
                return (omp.status(), omp._state, torch.get_num_threads(), lines)
            assert omp.team() != 0 and pool.get().omp == omp.team(), seen()
        def body():
            ok = np.array_equal(jitops.add(x, 1.0), x + 1.0) and \
                np.array_equal(jitops.subtract(x[::-1], x), x[::-1] - x)
            return ok and omp.team() == 0 and pool.get().omp == 0
        print(in_child(body))
    """,
    # PyTorch's team started in the parent, jitops imported in the child: the team cannot be
    # known to be the child's own, so it is never used there, however long the child waits
    "torch-team-then-fork-import-in-child": """
        import time, torch
        torch.add(torch.ones(N), 1.0); time.sleep(0.3)
        def body():
            import jitops
            from jitops.cpu.threads import omp, pool
            x = np.arange(N, dtype=np.float32)
            ok = True
            for _ in range(3):
                ok = ok and np.array_equal(jitops.add(x, 1.0), x + 1.0)
                time.sleep(omp.RECHECK_S + 0.05)
            return ok and omp.team() == 0 and pool.get().omp == 0
        print(in_child(body))
    """,
    # jitops imported before PyTorch: the team is usable from the start (any team is started
    # in this process), and a fork after it still leaves the child on the pool
    "jitops-then-torch-then-fork": """
        import jitops
        import torch
        from jitops.cpu.threads import omp, pool
        from jitops.cpu.kernels.layout import CONTROL
        x = np.arange(N, dtype=np.float64)
        assert np.array_equal(jitops.multiply(x, 2.0), x * 2.0)
        if pool.AVAILABLE:  # (with JITOPS_POOL=0 Numba's layer runs every job)
            assert omp.team() != 0, omp.status()
            assert pool.word(pool.get().ctl, CONTROL.BY_CALLER) == -1  # the team ran the job
        torch.add(torch.from_numpy(x), 1.0)
        def body():
            return np.array_equal(jitops.add(x, 1.0), x + 1.0) and omp.team() == 0
        print(in_child(body))
    """,
}

LAYERS = [None, "omp", "workqueue", "tbb"]


def _run(code: str, layer: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("NUMBA_THREADING_LAYER", None)
    env.pop("JITOPS_POOL", None)
    if layer:  # Numba's layer: jitops' own pool turned off, as where it is not available
        env["NUMBA_THREADING_LAYER"] = layer
        env["JITOPS_POOL"] = "0"
    return subprocess.run([sys.executable, "-c", _CHILD + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def _check(res: subprocess.CompletedProcess, layer: str | None) -> None:
    if layer and "No threading layer could be loaded" in res.stderr:
        pytest.fail(f"layer {layer} cannot be loaded here: {res.stderr[-500:]}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split()[-1] == "0", res.stdout + res.stderr[-3000:]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda v: v or "default")
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fork_and_thread_scenarios(name, layer):
    _check(_run(SCENARIOS[name], layer), layer)


@pytest.mark.skipif(not HAVE_TORCH, reason="needs PyTorch, which the test extra installs on "
                    "Python 3.11 x86-64 only; elsewhere: pip install torch (CPU build)")
@pytest.mark.parametrize("layer", [None, "omp"], ids=lambda v: v or "default")
@pytest.mark.parametrize("name", list(TORCH_SCENARIOS))
def test_fork_after_pytorch(name, layer):
    _check(_run(TORCH_SCENARIOS[name], layer), layer)


def test_import_changes_no_numba_setting():
    code = """
        import numba
        before = (list(numba.config.THREADING_LAYER_PRIORITY), numba.config.THREADING_LAYER,
                  numba.config.NUMBA_NUM_THREADS)
        import numpy as np, jitops
        jitops.add(np.ones(10), 1.0)
        after = (list(numba.config.THREADING_LAYER_PRIORITY), numba.config.THREADING_LAYER,
                 numba.config.NUMBA_NUM_THREADS)
        print(before == after, after[0], after[1])
    """
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=TIMEOUT, env={k: v for k, v in os.environ.items()
                                                          if not k.startswith("NUMBA_")})
    assert res.returncode == 0, res.stderr
    same, *rest = res.stdout.split(maxsplit=1)
    assert same == "True", res.stdout
    assert rest[0].startswith("['tbb', 'omp', 'workqueue'] default"), res.stdout


def test_default_is_jitops_pool_and_numbas_layer_stays_unstarted():
    """On Linux jitops' parallel kernels run on its own pool: Numba's layer is never started
    (nor TBB loaded) by jitops, so it stays whatever the user's own Numba code makes it."""
    code = """
        import numpy as np, jitops
        from numba.np.ufunc import parallel as nb
        from jitops.cpu.threads import parallel as t
        x = np.ones(1 << 20)
        assert np.array_equal(jitops.add(x, x), x + x)
        i = t.info()
        print(i['threading_layer'], i['parallel'], i['tbb_loaded'], i['pool_workers'],
              bool(getattr(nb, "_is_initialized", False)))
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NUMBA_") and k != "JITOPS_POOL"}
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=TIMEOUT, env=env)
    assert res.returncode == 0, res.stderr
    workers = len(os.sched_getaffinity(0)) - 1
    assert res.stdout.split() == ["jitops", "True", "False", str(workers), "False"]


def test_without_the_pool_the_layer_is_numbas_own_choice_with_pips_tbb():
    """Numba's default priority puts tbb first; jitops only makes pip's TBB loadable."""
    code = "import jitops; from jitops.cpu.threads import parallel as t; i = t.info(); " \
           "print(i['threading_layer'], i['parallel'], i['tbb_loaded'])"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["JITOPS_POOL"] = "0"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=TIMEOUT, env=env)
    assert res.returncode == 0, res.stderr
    layer, parallel, tbb = res.stdout.split()
    if tbb == "True":
        assert (layer, parallel) == ("tbb", "True")


def test_omp_after_a_foreign_openmp_runtime_runs_serial_kernels():
    """Under omp, an OpenMP runtime loaded before Numba's (it may have been started by a
    parent before a fork) makes jitops run its serial kernels, and say so."""
    code = """
        import ctypes, ctypes.util, numpy as np
        name = ctypes.util.find_library("gomp")
        if name is None:
            print("no-libgomp"); raise SystemExit
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        import jitops
        from jitops.cpu.threads import parallel as t
        x = np.arange(1_000_000, dtype=np.float64)
        assert np.array_equal(jitops.add(x, 1.0), x + 1.0)
        i = t.info()
        print(i["threading_layer"], i["parallel"], "|", i["parallel_reason"])
    """
    env = dict(os.environ, NUMBA_THREADING_LAYER="omp", JITOPS_POOL="0")
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=TIMEOUT, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    if res.stdout.strip() == "no-libgomp":
        pytest.skip("no GNU OpenMP runtime on this machine to load first")
    assert res.stdout.startswith("omp False |"), res.stdout
    assert "OpenMP runtime was loaded before" in res.stdout
