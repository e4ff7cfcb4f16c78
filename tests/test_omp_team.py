"""jitops' parallel jobs on PyTorch's OpenMP team (jitops.cpu.threads.omp): NumPy's answers on every
kernel family, failures still reported, only where the team is this process's own, only on
the main thread, and back to jitops' pool when a team thread stalls the job.

Each test runs in a fresh interpreter (what was imported first matters) with a timeout, so a
hang fails instead of stalling the suite. The fork scenarios are in test_fork_threads.py.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

#: Why a test that needs PyTorch skips: the test extra installs the CPU wheel these machines
#: carry, for Python 3.11 on x86-64 only.
NO_TORCH = ("needs PyTorch, which the test extra installs on Python 3.11 x86-64 only; "
            "elsewhere: pip install torch (CPU build)")
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason=NO_TORCH)

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux")
                       or platform.machine().lower() not in ("x86_64", "amd64"),
                       reason="the OpenMP team is used on x86-64 Linux only"),
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: no parallel jobs"),
]

_PRELUDE = """
import time, numpy as np
import torch
import jitops
from jitops.cpu.threads import omp, pool
from jitops.cpu.kernels.layout import CONTROL
jitops.set_num_threads(2)
torch.set_num_threads(2)
N = 1_000_000

def on_team():
    return pool.word(pool.get().ctl, CONTROL.BY_CALLER) == -1  # the team's mark on a job

def no_backoff():
    # a team thread woken late may count as a stall (the next jobs then run on the pool):
    # these checks want the team itself
    pool.get().words[CONTROL.OMP_BACKOFF] = 0
    pool.get().words[CONTROL.OMP_STALLS] = 0

def start_team():
    torch.add(torch.ones(N), 1.0)
    # the team's threads go to sleep inside libgomp, where they are seen (looked for every
    # omp.RECHECK_S; a busy machine may take a while)
    deadline = time.monotonic() + 30
    while not omp.team() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not omp.team():
        import os
        lines = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/syscall") as f:
                lines.append(tid + ": " + f.read().strip())
        raise AssertionError((omp.status(), omp._state, torch.get_num_threads(), lines))
"""


def _run(code: str, env: dict | None = None) -> str:
    e = dict(os.environ)
    e.pop("JITOPS_OMP", None)
    e.update(env or {})
    res = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)], env=e,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return res.stdout


@needs_torch
def test_every_kernel_family_on_the_team_gives_numpys_answer():
    out = _run("""
        assert omp.team() == 0  # PyTorch imported first and its team not yet seen
        start_team()
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1000, 1000)).astype(np.float32)
        y = rng.standard_normal(1000).astype(np.float32)
        checks = {
            "contig": (lambda: jitops.subtract(x, x[::-1]), x - x[::-1]),
            "scalar": (lambda: jitops.subtract(x, 3.0), x - np.float32(3.0)),
            "row": (lambda: jitops.subtract(x, y), x - y),
            "pdpd": (lambda: jitops.elementwise_sub(x, y, axis=0), x - y[:, None]),
            "outer": (lambda: jitops.subtract(y[:, None], y[None, :]), y[:, None] - y[None, :]),
            "tiled": (lambda: jitops.subtract(x.T, x), x.T - x),
            "strided": (lambda: jitops.maximum(x[:, ::2], x[:, 1::2]),
                        np.maximum(x[:, ::2], x[:, 1::2])),
            "int8 wraps": (lambda: jitops.add(np.full(N, 100, np.int8), np.int8(100)),
                           np.full(N, 100, np.int8) + np.int8(100)),
            "float16": (lambda: jitops.multiply(x.astype(np.float16), y.astype(np.float16)),
                        x.astype(np.float16) * y.astype(np.float16)),
            "relu": (lambda: jitops.subtract(x, y, act="relu"), np.maximum(x - y, 0)),
            "user op": (lambda: jitops.elementwise(lambda a, b, c: a * b + c)(x, x, y),
                        x * x + y),
        }
        for name, (f, want) in checks.items():
            no_backoff()
            got = f()
            assert on_team(), name
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        div = jitops.elementwise(lambda a, b: a / b)
        a = np.full(N, 1 + 1j)
        b = np.ones(N, complex)
        b[N // 2] = 0  # Numba's complex division raises inside a task: reported, not lost
        no_backoff()
        try:
            div(a, b)
        except RuntimeError as e:
            assert "raised an exception inside the compiled" in str(e)
            assert on_team()
        else:
            raise AssertionError("no error")
        print("status:", omp.status())
    """)
    assert "status: PyTorch's OpenMP team" in out


@needs_torch
def test_imported_before_pytorch_the_team_is_used_at_once():
    code = """
        import sys, numpy as np
        import jitops
        from jitops.cpu.threads import omp, pool
        from jitops.cpu.kernels.layout import CONTROL
        assert omp.team() == 0  # no PyTorch yet
        import torch
        assert omp.team() != 0, omp.status()
        x = np.arange(1_000_000, dtype=np.float64)
        assert np.array_equal(jitops.subtract(x, x[::-1]), x - x[::-1])
        ctl = pool.get().ctl
        assert pool.word(ctl, CONTROL.BY_CALLER) == -1, (
            omp.status(), jitops.get_num_threads(), len(pool.get().threads),
            [pool.word(ctl, w) for w in (CONTROL.OMP, CONTROL.OMP_BACKOFF, CONTROL.BY_CALLER)])
        print("ok")
    """
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=180)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


@needs_torch
def test_other_threads_and_jitops_omp_0_use_the_pool():
    _run("""
        import threading
        start_team()
        x = np.arange(N, dtype=np.float64)
        no_backoff()
        jitops.add(x, 1.0)
        assert on_team()
        res = {}
        def work():
            res["r"] = jitops.add(x, 2.0)
            res["team"] = on_team()
        t = threading.Thread(target=work)
        t.start(); t.join(60)
        assert np.array_equal(res["r"], x + 2.0) and res["team"] is False
    """)
    _run("""
        torch.add(torch.ones(N), 1.0)
        time.sleep(0.3)
        x = np.arange(N, dtype=np.float64)
        assert np.array_equal(jitops.add(x, 1.0), x + 1.0)
        assert omp.team() == 0 and not on_team() and "off" in omp.status()
    """, env={"JITOPS_OMP": "0"})


@needs_torch
def test_a_team_thread_that_stalls_the_job_hands_the_next_jobs_to_the_pool():
    """All threads on one CPU: a job's team thread then runs only when the other is off the
    CPU, and the region waits for it with no work left. The jobs still give the right
    answer, the stalls are seen, and the next jobs run on jitops' pool (which waits for
    tasks, not threads) until the team is tried again."""
    _run("""
        import os
        start_team()
        x = np.arange(N, dtype=np.float32)
        no_backoff()
        assert np.array_equal(jitops.subtract(x, 1.0), x - 1.0) and on_team()
        for tid in os.listdir("/proc/self/task"):  # every thread of this process: one CPU
            os.sched_setaffinity(int(tid), {min(os.sched_getaffinity(0))})
        ctl = pool.get().ctl
        stalled = False
        for _ in range(400):  # a loaded machine (the suite's other worker) may take long
            assert np.array_equal(jitops.subtract(x, 2.0), x - 2.0)
            if pool.word(ctl, CONTROL.OMP_BACKOFF) > 0:
                stalled = True
                break
        assert stalled
        left = pool.word(ctl, CONTROL.OMP_BACKOFF)
        assert np.array_equal(jitops.subtract(x, 3.0), x - 3.0)
        assert not on_team() and pool.word(ctl, CONTROL.OMP_BACKOFF) == left - 1
    """)


@needs_torch
def test_a_team_that_keeps_stalling_is_tried_ever_more_rarely():
    """Each backoff that begins soon after the last is twice as long, up to the limit; after
    the team ran well for a while (here: the clean-job count set high) it is short again.
    The jobs give the right answer throughout."""
    _run("""
        import os
        start_team()
        x = np.arange(N, dtype=np.float32)
        for tid in os.listdir("/proc/self/task"):  # every thread on one CPU: team jobs stall
            os.sched_setaffinity(int(tid), {min(os.sched_getaffinity(0))})
        ctl = pool.get().ctl
        words = pool.get().words
        assert (pool.word(ctl, CONTROL.OMP_BACKOFF_MIN), pool.word(ctl, CONTROL.OMP_BACKOFF_MAX)) \\
            == (2, 8)

        def job(k=1.0):
            assert np.array_equal(jitops.subtract(x, k), x - k)

        def until(cond, jobs=4000):  # a loaded machine may take a while to stall
            for k in range(jobs):
                job(float(k))
                if cond():
                    return True
            return False

        def backoff():
            return pool.word(ctl, CONTROL.OMP_BACKOFF)

        lengths = []

        def grown():
            n = pool.word(ctl, CONTROL.OMP_BACKOFF_LEN)
            if n and (not lengths or lengths[-1] != n):
                lengths.append(n)
            return lengths[-1:] == [8]

        # (a calm spell in between starts the doubling over: 8 only ever follows 2 and 4)
        assert until(grown) and lengths[-3:] == [2, 4, 8], lengths
        assert until(lambda: backoff() == 0)
        words[CONTROL.OMP_CLEAN] = -1000  # no calm spell now
        assert until(lambda: backoff() > 0)  # the next backoff: capped at 8, not 16
        assert pool.word(ctl, CONTROL.OMP_BACKOFF_LEN) == 8
        assert until(lambda: backoff() == 0)
        words[CONTROL.OMP_CLEAN] = 100  # as if the team had run 100 jobs without a stall
        words[CONTROL.OMP_STALLS] = 0
        assert until(lambda: backoff() > 0)
        assert pool.word(ctl, CONTROL.OMP_BACKOFF_LEN) == 2
    """, env={"JITOPS_OMP_BACKOFF": "2", "JITOPS_OMP_BACKOFF_MAX": "8"})


def test_a_stand_in_torch_module_is_no_openmp_runtime():
    """A test's mock in ``sys.modules["torch"]`` (no file, or a non-string one) means no team,
    and the call runs on the pool as usual."""
    code = """
        import sys, types, numpy as np
        from unittest import mock
        sys.modules["torch"] = mock.MagicMock()
        import jitops
        from jitops.cpu.threads import omp
        x = np.arange(1_000_000, dtype=np.float64)
        assert np.array_equal(jitops.add(x, 1.0), x + 1.0)
        assert omp.team() == 0
        sys.modules["torch"] = types.ModuleType("torch")
        omp._state["fn"] = None
        assert omp.team() == 0 and np.array_equal(jitops.add(x, 2.0), x + 2.0)
        print("ok")
    """
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=180)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


@needs_torch
def test_team_is_found_while_pytorch_keeps_it_spinning():
    # PyTorch imported first and its op run right before each jitops call: the team's threads
    # spin between the calls and are never caught asleep by a quick look, so jitops' pool
    # shared the cores with them for good (1e6 subtract 1.9x its time alone). A look waits
    # for a running thread Python did not start to fall asleep, within its budget.
    out = _run("""
        x = np.ones(N, np.float32)
        o = np.empty_like(x)
        t = torch.from_numpy(x)
        assert omp.team() == 0
        deadline = time.monotonic() + 20  # a loaded machine may need a few looks
        found = False
        while not found and time.monotonic() < deadline:
            torch.add(t, 1.0)
            no_backoff()
            jitops.subtract(x, x, out=o)
            found = on_team()
        assert found, (omp.status(), omp._state)
        assert omp._state["waited"] <= omp.WAIT_BUDGET_S + omp.WAIT_S
        assert not o.any()
        print("waited", omp._state["waited"])
    """)
    assert "waited" in out


@needs_torch
def test_a_look_does_not_wait_where_no_foreign_thread_runs():
    # no thread but Python's own is running: nothing can fall asleep in libgomp, so a look
    # answers at once and spends none of the budget
    out = _run("""
        x = np.ones(N, np.float32)
        for _ in range(3):
            jitops.subtract(x, x)
            time.sleep(omp.RECHECK_S + 0.01)
        assert omp._state["waited"] == 0.0, omp._state
        assert omp.team() == 0 and not on_team()
        print("ok")
    """)
    assert "ok" in out


@needs_torch
def test_a_fork_child_of_a_team_on_a_python_that_updates_its_thread_record_uses_the_pool():
    """The case the team's rules left open: a fork child of a process that ran PyTorch on its
    main thread imports jitops after the fork, on a Python that updates the main thread's
    record in a child (3.12+, simulated here), and runs PyTorch on another thread (whose own
    team is then seen asleep) before a large call on the main thread. The main thread's team
    is the parent's there; using it aborted the child ("free(): invalid pointer"). Now such a
    process runs its jobs on jitops' pool, right."""
    code = textwrap.dedent("""
        import os, sys, threading, time
        import numpy as np, torch
        torch.set_num_threads(2)
        N = 1 << 20
        torch.add(torch.ones(N), 1.0)  # the main thread's team, in the parent
        pid = os.fork()
        if pid == 0:
            threading.main_thread()._set_native_id()  # as Python 3.12+ does in a child
            import jitops
            from jitops.cpu.threads import omp
            omp.RECORD_SHOWS_FORKS = False  # what omp decides on Python 3.12+
            done = threading.Event()
            def other():  # a team of this thread's own, seen asleep in libgomp
                torch.add(torch.ones(N), 1.0)
                done.set()
                time.sleep(5)
            threading.Thread(target=other, daemon=True).start()
            done.wait()
            x = np.arange(N, dtype=np.float32)
            ok = np.array_equal(jitops.subtract(x, 1.0), x - 1.0) and omp.team() == 0
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", status)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "child 0" in res.stdout, res.stdout + res.stderr[-3000:]
