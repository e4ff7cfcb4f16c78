"""Timing machinery: contenders alternated call by call, medians, an in-run bandwidth probe,
cold-start measurements in fresh processes, and a record of the machine.

The machine these run on is shared and noisy, so every comparison is *paired*: in each round
every contender runs once (a round's order rotates, so no one is always first, right after a
cache-warming neighbour), and a ratio is the median over rounds of the per-round ratio. A
slow period then slows both sides of a ratio, instead of whichever contender happened to be
running.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
from numba import float32, njit, prange

from ..cpu.kernels.spec import as_pointer
from ..cpu.kernels.stream import AVAILABLE as STREAMS
from ..cpu.kernels.stream import store_fence, stream_head, stream_put


def calibrate(fn: Callable[[], object], min_batch_s: float) -> int:
    """Calls per timed batch: 1 for calls of ``min_batch_s`` or more, else enough to last that
    long (one 0.3 us call cannot be timed on its own). Three calls first: a first call and
    its first repeat may each do once what the rest never do (compile, remember the call)."""
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    if dt >= min_batch_s:
        return 1
    k = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        if time.perf_counter() - t0 >= min_batch_s or k >= 1 << 20:
            return k
        k *= 2


def alternate(contenders: dict[str, Callable[[], object]], rounds: int,
              min_batch_s: float = 0.002, budget_s: float | None = None,
              settle_s: float = 0.002, lead_in: int = 0) -> dict[str, list[float]]:
    """Per-call seconds of each contender, one sample per round, contenders interleaved.

    Every contender is warmed up first (compilation and first touch are not steady state).
    ``budget_s`` stops adding rounds once spent (at least 5 rounds run). Before each timed
    batch the harness waits for the process to fall quiet (:func:`quiesce`, at least
    ``settle_s``): thread pools keep their threads running for a while after a parallel
    region -- PyTorch's OpenMP workers spin about 9 ms, jitops' own about 2.5 ms -- and on a
    2-core machine a pool still spinning from the previous contender steals the next one's
    cores. Measured here, a fixed 2 ms pause left PyTorch's workers spinning through the next
    batch and made jitops' 1e6 subtract 1.6x slower right after PyTorch than alone.
    """
    names = list(contenders)
    batch = {n: calibrate(contenders[n], min_batch_s) for n in names}
    samples: dict[str, list[float]] = {n: [] for n in names}
    start = time.perf_counter()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for n in order:
                fn, k = contenders[n], batch[n]
                if settle_s:
                    quiesce(settle_s)
                for _ in range(lead_in):
                    fn()
                t0 = time.perf_counter()
                for _ in range(k):
                    fn()
                samples[n].append((time.perf_counter() - t0) / k)
            if budget_s is not None and r >= 4 and time.perf_counter() - start > budget_s:
                break
    finally:
        if gc_was:
            gc.enable()
    return samples


def _running_threads(me: int) -> int | None:
    """How many threads of this process other than ``me`` are running or runnable (state R in
    ``/proc/self/task/*/stat``), or None where that cannot be read."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    n = 0
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the thread just ended
            continue
        state = stat.rindex(b")") + 2  # after "pid (comm) "; comm may hold spaces and ")"
        if stat[state:state + 1] == b"R":
            n += 1
    return n


def quiesce(min_s: float, max_s: float = 0.05, polls: int = 3) -> float:
    """Wait until no other thread of this process is running (``polls`` looks in a row, about
    0.2 ms apart), at least ``min_s`` and at most ``max_s`` seconds; returns the time waited.

    A spinning pool thread shows as running (R), one asleep on a futex or condition variable
    does not. Where ``/proc`` is not readable this is a plain ``min_s`` sleep. The calling
    thread polls instead of sleeping the whole time: a VM's idle vCPU is slow to come back.
    """
    import threading

    me = threading.get_native_id()
    t0 = time.perf_counter()
    quiet = 0
    while True:
        waited = time.perf_counter() - t0
        if waited >= max_s:
            return waited
        running = _running_threads(me)
        if running is None:
            time.sleep(max(0.0, min_s - waited))
            return time.perf_counter() - t0
        quiet = quiet + 1 if running == 0 else 0
        if quiet >= polls and waited >= min_s:
            return waited
        time.sleep(0.0002)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def paired_ratio(num: list[float], den: list[float]) -> float:
    """Median over rounds of ``num[r] / den[r]`` (e.g. NumPy's time over jitops')."""
    return statistics.median(a / b for a, b in zip(num, den))


# -- the bandwidth probe -------------------------------------------------------------------------

@njit(parallel=True, cache=False)
def stream_sub(x, y, o):  # pragma: no cover - compiled
    """STREAM-style ``o = x - y``: the plainest parallel loop Numba makes, as the limit."""
    for i in prange(x.size):
        o[i] = x[i] - y[i]


@njit(parallel=True, cache=False)
def stream_copy(x, o):  # pragma: no cover - compiled
    for i in prange(x.size):
        o[i] = x[i]


@njit(parallel=True, cache=False, fastmath=True)
def stream_read(x):  # pragma: no cover - compiled
    """The sum of ``x`` as Numba's plainest parallel reduction, vectorised (reassociated):
    the read-only limit a reduction can reach."""
    s = 0.0
    for i in prange(x.size):
        s += x[i]
    return s


#: Tasks of the non-temporal probe (a few per thread, like jitops' own decomposition).
_NT_TASKS = 64


@njit(parallel=True, cache=False)
def stream_sub_nt(x, y, o):  # pragma: no cover - compiled
    """``o = x - y`` on float32 with non-temporal stores (jitops' :mod:`jitops.cpu.kernels.stream`
    intrinsics): no read of each output line before it is written, so three transfers for
    three arrays -- the limit an elementwise op can reach. Read and written through pointers,
    so the loop vectorises."""
    n = x.size
    p = as_pointer(o.ctypes.data, float32)
    px, py = as_pointer(x.ctypes.data, float32), as_pointer(y.ctypes.data, float32)
    for t in prange(_NT_TASKS):
        lo = t * n // _NT_TASKS
        hi = (t + 1) * n // _NT_TASKS
        mid = lo + stream_head(p, lo, hi - lo)
        for i in range(lo, mid):
            p[i] = px[i] - py[i]
        for i in range(mid, hi):
            stream_put(p, i, px[i] - py[i])
        store_fence()


@njit(parallel=True, cache=False)
def stream_fill_nt(o, v):  # pragma: no cover - compiled
    """``o[:] = v`` on float32 with non-temporal stores: the limit of an op whose output is
    only written (every input broadcast, read from the caches)."""
    n = o.size
    p = as_pointer(o.ctypes.data, float32)
    for t in prange(_NT_TASKS):
        lo = t * n // _NT_TASKS
        hi = (t + 1) * n // _NT_TASKS
        mid = lo + stream_head(p, lo, hi - lo)
        for i in range(lo, mid):
            p[i] = v
        for i in range(mid, hi):
            stream_put(p, i, v)
        store_fence()


def limit_contender(nbytes: int, writes_only: bool = False) -> Callable[[], object]:
    """A row's limit as a benchmark contender, timed in the same rounds as the row: moving
    ``nbytes`` in all, :func:`stream_sub_nt` on float32 arrays (reads + writes), or for a row
    that only writes its output, :func:`stream_fill_nt`."""
    if writes_only:
        o = np.empty(max(1, nbytes // 4), np.float32)
        return lambda: stream_fill_nt(o, np.float32(1.5))
    n = max(1, nbytes // 12)
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y, o = x[::-1].copy(), np.empty_like(x)
    return lambda: stream_sub_nt(x, y, o)


def bandwidth_probe(n: int = 1 << 25, rounds: int = 9) -> dict[str, float]:
    """GB/s of a parallel STREAM add-like ``o = x - y`` (ordinary stores, and non-temporal
    stores where the CPU has them) and copy on arrays far bigger than the caches (float32,
    ``n`` elements each); bytes counted as STREAM does (reads + writes)."""
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y = x[::-1].copy()
    o = np.empty_like(x)
    loops = {"sub": lambda: stream_sub(x, y, o), "copy": lambda: stream_copy(x, o)}
    if STREAMS:
        loops["sub_nt"] = lambda: stream_sub_nt(x, y, o)
    s = alternate(loops, rounds, min_batch_s=0.0)
    r = {"stream_sub_GBps": 3 * x.nbytes / median(s["sub"]) / 1e9,
         "stream_copy_GBps": 2 * x.nbytes / median(s["copy"]) / 1e9}
    if STREAMS:
        stream_sub_nt(x, y, o)  # the last round may have ended with the copy
        if not np.array_equal(o, x - y):
            raise AssertionError("the non-temporal probe computed a wrong o = x - y")
        r["stream_sub_nt_GBps"] = 3 * x.nbytes / median(s["sub_nt"]) / 1e9
    return r


# -- cold start ----------------------------------------------------------------------------------

_COLD = r"""
import importlib.util, json, os, sys, time
# bytecode read, not compiled here: jitops' is there before the import (checked again for
# the modules it loads at the end)
pyc = sys.pycache_prefix is not None and os.path.exists(
    importlib.util.cache_from_source(importlib.util.find_spec("jitops").origin))
t0 = time.perf_counter()
import jitops
t1 = time.perf_counter()
import numpy as np
from jitops.cpu.kernels import binary as _cpu
x = np.ones(1000, np.float32)
t2 = time.perf_counter()
jitops.subtract(x, x)
t3 = time.perf_counter()
jitops.multiply(x, np.ones(1000, np.int16))
t4 = time.perf_counter()
jitops.subtract(x[:999], x[:999])  # a second shape of the first call: its class's planner
t4b = time.perf_counter()
big = np.ones(1 << 18, np.float32)
t4c = time.perf_counter()
jitops.subtract(big, big)  # the parallel driver: compiled once per machine, then cached
t5 = time.perf_counter()
jitops.add(big, np.ones(1 << 18, np.int8))  # a new signature on an array above the threshold
t6 = time.perf_counter()
sys.path.insert(0, os.environ["JITOPS_BENCH_USER_DIR"])
import jitops_bench_user_op as _u  # a module-level user op (jitops.elementwise)
from jitops.cpu.kernels import nary as _nary
t7 = time.perf_counter()
_u.fused(x, x, x)  # compiled the first time, from the disk cache afterwards
t8 = time.perf_counter()
pyc = pyc and all(os.path.exists(importlib.util.cache_from_source(m.__file__))
                 for m in (jitops, _cpu, _nary))
stats = [k.stats for k in (*_cpu.KERNELS.values(), *_nary.KERNELS.values())]
hits = sum(sum(s.cache_hits.values()) for s in stats)
misses = sum(sum(s.cache_misses.values()) for s in stats)
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2, "second_signature_s": t4 - t3,
                  "second_shape_s": t4b - t4,
                  "parallel_driver_s": t5 - t4c, "parallel_signature_s": t6 - t5,
                  "user_op_s": t8 - t7, "bytecode": pyc,
                  "cache_hits": hits, "cache_misses": misses}))
"""


_USER_OP = """
import jitops


@jitops.elementwise
def fused(x, w, b):
    return jitops.act.relu(x * w + b)
"""


def _fresh_process(env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _COLD], env=env, capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def cold_start(repeats: int = 3) -> dict:
    """Import time, compile time of new signatures, and first-call time with a warm disk cache,
    each in a fresh interpreter with its own empty kernel cache directory.

    Python's own bytecode cache is in the state an installed package has it: every module
    the script imports already compiled to bytecode. The child processes get a bytecode
    directory of their own (``PYTHONPYCACHEPREFIX``), filled by one process run before the
    measured ones (with a kernel cache of its own, thrown away): an editable install under
    ``PYTHONDONTWRITEBYTECODE=1`` (this project's machines) would otherwise compile jitops'
    sources in every process, 0.08 s of each import here, which no wheel install pays.
    """
    with tempfile.TemporaryDirectory(prefix="jitops-bench-cache-") as d, \
            tempfile.TemporaryDirectory(prefix="jitops-bench-user-") as u, \
            tempfile.TemporaryDirectory(prefix="jitops-bench-pyc-") as pyc, \
            tempfile.TemporaryDirectory(prefix="jitops-bench-cache0-") as d0:
        with open(os.path.join(u, "jitops_bench_user_op.py"), "w") as f:
            f.write(_USER_OP)
        env = dict(os.environ, JITOPS_CACHE_DIR=d, JITOPS_BENCH_USER_DIR=u,
                   PYTHONPYCACHEPREFIX=pyc)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        _fresh_process(dict(env, JITOPS_CACHE_DIR=d0))  # writes the bytecode only
        compiled = _fresh_process(env)  # empty cache: both signatures compile
        files_after_first = _count_files(d)
        warm = [_fresh_process(env) for _ in range(repeats)]
        files_after = _count_files(d)
    return {
        "import_s": median([w["import_s"] for w in warm]),
        "compile_first_signature_s": compiled["first_call_s"],
        "compile_new_signature_s": compiled["second_signature_s"],
        "compile_second_shape_s": compiled["second_shape_s"],
        "compile_new_parallel_signature_s": compiled["parallel_signature_s"],
        "compile_parallel_driver_s": compiled["parallel_driver_s"],
        "cached_parallel_first_call_s": median([w["parallel_signature_s"] for w in warm]),
        "cached_first_call_s": median([w["first_call_s"] for w in warm]),
        "compile_user_op_s": compiled["user_op_s"],
        "cached_user_op_s": median([w["user_op_s"] for w in warm]),
        "cached_runs": repeats,
        "bytecode_cached": all(w["bytecode"] for w in warm),
        "cached_cache_hits": min(w["cache_hits"] for w in warm),
        "cached_cache_misses": max(w["cache_misses"] for w in warm),
        "cache_files_after_first_run": files_after_first,
        "cache_files_after_repeats": files_after,
    }


def _count_files(d: str) -> int:
    return sum(len(f) for _, _, f in os.walk(d))


# -- the machine ---------------------------------------------------------------------------------

def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot (Linux ``/proc/stat``), else None. Busy
    includes steal: time the hypervisor gave this machine's CPUs to someone else."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def wait_for_quiet(max_s: float = 20.0, window_s: float = 0.5, busy_below: float = 0.1,
                   windows: int = 2) -> dict:
    """Wait until the machine's CPUs are quiet -- busy (steal included) below ``busy_below``
    of their time in ``windows`` consecutive windows of ``window_s`` -- or ``max_s`` passed.

    A run started right after heavy work (a test suite, a build) otherwise hands its first
    case to processes still finishing: PyTorch's static halves, which wait for the slower
    thread, took 3-4x their time there. Both contenders gain from a quiet start; the wait and
    the busy fractions are reported with the results. Returns ``waited_s``, ``busy_first``
    (the first window) and ``busy_last`` (None where ``/proc/stat`` is not there)."""
    t0 = time.perf_counter()
    first = last = None
    quiet = 0
    prev = _cpu_times()
    while prev is not None and quiet < windows and time.perf_counter() - t0 < max_s:
        time.sleep(window_s)
        now = _cpu_times()
        if now is None:
            break
        busy, total = now[0] - prev[0], now[1] - prev[1]
        prev = now
        last = busy / total if total > 0 else 0.0
        first = last if first is None else first
        quiet = quiet + 1 if last < busy_below else 0
    return {"waited_s": time.perf_counter() - t0, "busy_first": first, "busy_last": last,
            "quiet": quiet >= windows}


def machine() -> dict:
    """Everything a result depends on: CPU, threads, threading layer, versions."""
    import numba

    import jitops
    from jitops.cpu.threads import parallel as _threading

    jitops.add(np.ones(1 << 17), 1.0)  # a parallel launch, so the layer reported is the real one
    info = {
        "cpu": _threading.cpu_model(),
        "logical_cpus": os.cpu_count(),
        "threads": jitops.get_num_threads(),
        "threading_layer": _threading.threading_layer(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "jitops": jitops.__version__,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    for mod in ("torch", "numexpr"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = None
    return info
