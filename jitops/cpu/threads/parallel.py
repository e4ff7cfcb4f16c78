"""How parallel kernels run, whatever else the process holds, and with how many threads; Numba's
settings are never changed.

On Linux, jobs run on jitops' own pool (:mod:`jitops.cpu.threads.pool`): no threading layer, so it
survives forks, many Python threads and anyone's OpenMP runtime; beside PyTorch's GNU OpenMP
the main thread's jobs run on its team (:mod:`jitops.cpu.threads.omp`). Elsewhere (or
``JITOPS_POOL=0``) they run on Numba's layer, which jitops uses only where it is safe, decided
once per process from what is loaded (:func:`parallel_allowed`): ``tbb`` always (pip's
``libtbb`` is loaded so that Numba's own priority finds it); ``workqueue`` one launch at a
time (two at once abort); ``omp`` only where jitops itself started the runtime in this process
(a runtime inherited through a fork hangs or kills the child) -- else the serial kernels.

The thread count is jitops' own (:func:`get_num_threads`, :func:`set_num_threads`,
``with threads(n):`` per Python thread, ``JITOPS_NUM_THREADS``, ``OMP_NUM_THREADS``; by
default the CPUs this process may use, at most Numba's pool); a launch on Numba's layer sets
Numba's thread-local count only for its own duration. One thread means the serial kernels.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import platform
import re
import sys
import threading
from collections.abc import Iterator

import numba
import numpy as np
from numba import types

from ...core import limits
from ..compile import hooks, lifecycle
from . import omp, pool

_I64 = types.int64

_lock = threading.RLock()  # the decision (a nested call on the same thread makes it too)
_state = {"tbb_loaded": False, "tbb_path": None, "forked_with_openmp": False}

#: The environment variable that sets the default thread count.
ENV_THREADS = "JITOPS_NUM_THREADS"

#: The process-wide count: (pid it was set or computed in, count, set by set_num_threads).
#: A forked child recomputes its default (its affinity may differ) but keeps a set count.
_setting: tuple[int, int, bool] | None = None

#: The per-process decision: (pid it was made in, parallel allowed, serialise launches, why).
_decision: tuple[int, bool, bool, str] | None = None

#: The thread-count stamp: a new int whenever the count a call gets may have changed
#: (set_num_threads, a fork, the last open ``threads()`` block of any thread closing), None
#: while a ``threads()`` block is open in any thread. A repeated call that recorded the stamp
#: beside its count (jitops.dispatch) and finds it unchanged knows :func:`num_threads` would
#: give that count again without asking: right after a 1e6-element job has swept the caches,
#: asking costs ~1% of the call. Never rebound (the front end holds the list).
STAMP: list = [0]
_last_stamp = [0]
_open_blocks = [0]  # threads() blocks open in all threads
_stamp_lock = threading.Lock()


def _restamp(opened: int = 0) -> None:
    """A new stamp (after ``opened`` blocks opened, or closed where negative). The lock's
    block calls nothing, so no signal handler or ``__del__`` can run inside it and open a
    ``threads()`` block of its own (which would wait for this lock for ever)."""
    with _stamp_lock:
        _open_blocks[0] += opened
        _last_stamp[0] += 1
        STAMP[0] = None if _open_blocks[0] > 0 else _last_stamp[0]


_OPENMP = re.compile(r"/lib(gomp|iomp5|omp)[-.][^/]*$")


def _tbb_candidates() -> list[str]:
    names = []
    for prefix in dict.fromkeys((sys.prefix, sys.exec_prefix, sys.base_prefix)):
        names += sorted(glob.glob(os.path.join(prefix, "lib", "libtbb.so.12*")))
    names.append("libtbb.so.12")  # anything on the loader's path
    return names


def _load_tbb() -> bool:
    for name in _tbb_candidates():
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        _state["tbb_loaded"], _state["tbb_path"] = True, name
        return True
    return False


def openmp_runtimes() -> list[str]:
    """Paths of the OpenMP runtimes (GNU ``libgomp``, Intel ``libiomp5``, LLVM ``libomp``)
    mapped into this process, read from ``/proc/self/maps``; where that cannot be read (the
    ``proc`` hook off), one entry that says so: a runtime may be there."""
    if not hooks.ok("proc"):
        return ["(unknown: /proc/self/maps not read)"]
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                if _OPENMP.search(path) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _numba_layer_started() -> bool:
    """Whether Numba's threading layer was already started (by anyone) in this process
    (taken as yes where the ``numba_layer`` hook is off)."""
    if not hooks.ok("numba_layer"):
        return True
    from numba.np.ufunc import parallel

    return bool(parallel._is_initialized)


def configure() -> None:
    """Called once at import: where Numba's layer will run jitops' kernels, make pip's TBB
    loadable; watch for forks. Nothing else."""
    if not pool.AVAILABLE:
        _load_tbb()
    lifecycle.at_fork_in_child(_after_fork_in_child)


def _after_fork_in_child() -> None:
    global _lock, _decision, _setting, _stamp_lock, _launch_guard
    if _setting is not None and not _setting[2]:
        _setting = None  # the default follows the child's own affinity
    # (blocks other threads had open stay counted: the child repeats by asking, never wrong)
    _stamp_lock = threading.Lock()
    _restamp()
    # An OpenMP runtime present at the fork may have had threads in the parent, which the
    # child does not have: GNU OpenMP then hangs or is killed at its next parallel region.
    _state["forked_with_openmp"] = bool(openmp_runtimes())
    _lock = threading.RLock()  # a lock held by another thread at fork time would never open
    _launch_guard, _launching[0] = threading.Lock(), False
    _decision = None


def _decide() -> tuple[int, bool, bool, str]:
    """Start Numba's layer (its own choice) and decide how jitops may launch in this process."""
    global _decision
    with _lock:
        d = _decision
        if d is not None and d[0] == pool.current_pid():
            return d
        if _deciding[0]:  # a call nested in this thread's own decision (a signal handler)
            return (pool.current_pid(), False, False, "deciding: serial")
        try:
            _deciding[0] = True
            return _decide_locked()
        finally:
            _deciding[0] = False


_deciding = [False]


def _decide_locked() -> tuple[int, bool, bool, str]:
    global _decision
    started_before = _numba_layer_started()
    foreign = [] if started_before else openmp_runtimes()
    numba.get_num_threads()  # starts Numba's threading layer if nobody did
    layer = numba.threading_layer()
    parallel, why = True, f"{layer}: parallel"
    if layer == "omp":
        if _state["forked_with_openmp"]:
            parallel, why = False, "omp: forked after an OpenMP runtime loaded: serial"
        elif foreign:
            parallel, why = False, (f"omp: an OpenMP runtime was loaded before Numba's "
                                    f"({os.path.basename(foreign[0])}): serial")
        elif started_before:
            parallel, why = False, "omp: Numba's layer was started outside jitops: serial"
    _decision = d = (pool.current_pid(), parallel, layer == "workqueue", why)
    return d


def threading_layer() -> str:
    """What jitops' parallel kernels run on.

    ``"jitops"``: its own thread pool (Linux; see :mod:`jitops.cpu.threads.pool`). Elsewhere, or
    with
    ``JITOPS_POOL=0``, Numba's threading layer, which jitops does not choose: Numba does, from
    ``NUMBA_THREADING_LAYER`` or its default priority (``tbb`` first; jitops makes pip's TBB
    loadable). Asking then starts that layer.

    Returns
    -------
    str
        ``"jitops"``, or Numba's ``"tbb"``, ``"omp"`` or ``"workqueue"``.

    Examples
    --------
    >>> import jitops
    >>> jitops.threading_layer() in ("jitops", "omp", "tbb", "workqueue")
    True
    """
    if pool.AVAILABLE:
        return "jitops"
    _decide()
    return numba.threading_layer()


class _ThreadCount(threading.local):
    #: This Python thread's ``threads(n)`` count; None outside such a block. A class default,
    #: so reading it never raises inside (``getattr(local, name, None)`` on a missing name
    #: costs ~0.5 us: an AttributeError made and dropped).
    threads: int | None = None


_local = _ThreadCount()


def pool_size() -> int:
    """Threads in Numba's pool (``NUMBA_NUM_THREADS``): the most a kernel can use."""
    return max(1, int(numba.config.NUMBA_NUM_THREADS))


def affinity() -> int:
    """CPUs this process may run on (``sched_getaffinity``; the CPU count where unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _checked(n, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{what}: the number of threads must be an int, got "
                        f"{type(n).__name__} {n!r}")
    n = int(n)
    if n < 1:
        raise ValueError(f"{what}: the number of threads must be at least 1, got {n}")
    return min(n, pool_size())


def _omp_num_threads() -> int | None:
    """``OMP_NUM_THREADS``'s first count (OpenMP allows a list, one per nesting level), as
    PyTorch and numexpr read it; None where unset or not a positive integer (OpenMP ignores
    such a value too)."""
    text = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    try:
        n = int(text)
    except ValueError:
        return None
    return n if n >= 1 else None


def default_source() -> tuple[int, str]:
    """The count before any :func:`set_num_threads` and where it came from, the first that
    is set of: ``JITOPS_NUM_THREADS``, ``OMP_NUM_THREADS`` (a Dask nanny sets it to 1 in its
    workers), the CPUs this process may run on -- its affinity, capped by its cgroup's CPU
    quota (a container's ``--cpus``). Never more than Numba's pool."""
    env = os.environ.get(ENV_THREADS, "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{ENV_THREADS} must be a positive integer, got {env!r}")
        return min(n, pool_size()), ENV_THREADS
    n = _omp_num_threads()
    if n is not None:
        return min(n, pool_size()), "OMP_NUM_THREADS"
    quota, where = limits.cpu_quota()
    if quota is not None and quota < affinity():
        return min(quota, pool_size()), f"the cgroup's CPU quota ({where})"
    return min(affinity(), pool_size()), "affinity"


def default_threads() -> int:
    """The count before any :func:`set_num_threads` (:func:`default_source`)."""
    return default_source()[0]


def _process_threads() -> int:
    global _setting
    s = _setting
    if s is None or s[0] != pool.current_pid():
        keep = s is not None and s[2]
        s = _setting = (pool.current_pid(), s[1] if keep else default_threads(), keep)
    return s[1]


def get_num_threads() -> int:
    """The number of threads jitops' CPU kernels use for calls from this Python thread.

    The innermost ``with jitops.threads(n):`` block of this thread if any, else what
    :func:`set_num_threads` set, else ``JITOPS_NUM_THREADS``, else ``OMP_NUM_THREADS``, else
    the CPUs this process may run on (its affinity, capped by its cgroup's CPU quota); never
    more than Numba's thread pool. Arrays below the parallel
    threshold run serially whatever this says.

    Returns
    -------
    int
        At least 1.

    Raises
    ------
    ValueError
        If ``JITOPS_NUM_THREADS`` is set to anything but a positive integer.

    Examples
    --------
    >>> import jitops
    >>> with jitops.threads(1):
    ...     jitops.get_num_threads()
    1
    """
    n = _local.threads
    return n if n is not None else _process_threads()


#: The count's parameter and errors, shared by set_num_threads and threads.
_COUNT_DOC = """Parameters
    ----------
    n : int
        At least 1 (1: the serial kernels). A count above Numba's pool size
        (``NUMBA_NUM_THREADS``, the CPU count by default) is accepted, as PyTorch and numexpr
        accept it, and capped to the pool: a kernel cannot run on more threads than the pool
        holds, and threads beyond the cores only compete for memory bandwidth.
        :func:`get_num_threads` then says the capped count.

    Raises
    ------
    TypeError
        If ``n`` is not an int.
    ValueError
        If ``n`` is below 1.
"""


def set_num_threads(n: int) -> None:
    """Set the number of threads jitops' CPU kernels use, for the whole process.

    Python threads inside a ``with jitops.threads(m):`` block keep their ``m``. Numba's own
    setting (``numba.set_num_threads``) is not changed: jitops applies its count around each
    of its launches only.

    {count}
    Examples
    --------
    >>> import jitops
    >>> before = jitops.get_num_threads()
    >>> jitops.set_num_threads(1)
    >>> jitops.get_num_threads()
    1
    >>> jitops.set_num_threads(before)
    """
    global _setting
    _setting = (pool.current_pid(), _checked(n, "jitops.set_num_threads"), True)
    _restamp()  # after the count: a repeat that reads the new stamp finds the new count


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Within this block, calls from this Python thread use ``n`` threads (1: the serial
    kernels); other threads are not affected. Blocks nest; the previous count comes back on
    exit, exception or not.

    {count}
    Examples
    --------
    >>> import numpy as np, jitops
    >>> with jitops.threads(1):
    ...     r = jitops.subtract(np.ones(10**6), 1.0)
    >>> float(r.sum())
    0.0
    """
    n = _checked(n, "jitops.threads")
    before = _local.threads
    _restamp(1)  # before the count changes: no repeat takes its recorded count meanwhile
    _local.threads = n
    try:
        yield
    finally:
        _local.threads = before
        _restamp(-1)


for _fn in (set_num_threads, threads):
    if _fn.__doc__:  # absent under python -OO
        _fn.__doc__ = _fn.__doc__.format(count=_COUNT_DOC)


def serial():
    """Within this block, calls from this thread run the serial kernels (``threads(1)``): for
    callers that already run one task per core (Dask's chunk tasks), where nested threads
    only compete."""
    return threads(1)


def _current() -> tuple[int, bool, bool, str]:
    """This process's decision (made on first need, and again in a forked child)."""
    d = _decision
    return d if d is not None and d[0] == pool.current_pid() else _decide()


def parallel_allowed() -> bool:
    """False where this thread's count is 1 (:func:`threads`, :func:`serial`), and, where
    jitops' own pool cannot run (:data:`jitops.cpu.threads.pool.AVAILABLE`), in a process where
    Numba's layer cannot run safely (see the module docstring)."""
    return num_threads() > 1


def num_threads() -> int:
    """Threads a parallel kernel of this call would use (1 where only serial kernels run)."""
    # get_num_threads inlined: this runs on every parallel call, and after a job has swept
    # the caches each Python frame of the launch costs far more than it does warm (measured:
    # the whole launch 6-13 us over the compiled driver at 1e6, against ~2 us once flattened)
    n = _local.threads
    if n is None:
        s = _setting
        n = s[1] if s is not None and s[0] == pool._pid else _process_threads()
    if n == 1:
        return 1
    return n if pool.AVAILABLE or _current()[1] else 1


_POOL = pool.AVAILABLE
_MODULES = sys.modules
_getpid = os.getpid
_LIFE_PID = lifecycle._pid
_get_ident = threading.get_ident
_OMP_MAIN, _IMPORT_PID = omp._MAIN, omp._IMPORT_PID


def launch(drivers: tuple, args: tuple, threads: int) -> int:
    """Run a parallel job on ``threads`` threads; returns its status. ``drivers``: a family's
    ``(pooled, serial)`` on jitops' pool, ``(parallel, serial)`` on Numba's layer. On the pool,
    a Python thread finding it busy runs its call serially instead of waiting. Call only where
    :func:`parallel_allowed` said yes.
    """
    if not _POOL:
        return launch_parallel(drivers, args)
    if _getpid() != _LIFE_PID[0]:  # a fork by C code (libc's fork()) that ran no at-fork hook
        lifecycle.check_pid()
    p = pool._pool
    if p is None or p.pid != pool._pid:
        p = pool.get()
    mine = False
    try:
        with p.guard:  # no Python code in here: see Pool.busy
            if not p.busy:
                mine = p.busy = True
        if not mine:  # another thread's job, or a call nested in this thread's own
            return drivers[1](*args)
        workers = threads - 1
        if len(p.threads) < workers:
            # (on PyTorch's OpenMP team too: they run jobs after a stall)
            workers = p.ensure(workers)
            if workers == 0:
                return drivers[1](*args)
        # omp.team()'s answer, asked only where it may differ from what omp settled on (the
        # team, for the main thread of the process jitops was imported in; no team while
        # PyTorch is not loaded): each call asked costs ~0.5% of a 1e6-element job
        fn = omp._ready
        if not fn:
            if "torch" in _MODULES:
                fn = omp.team()
        elif _get_ident() != _OMP_MAIN or p.pid != _IMPORT_PID:
            fn = omp.team()
        if fn != p.omp:
            p.use_omp(fn, omp._state["tnum"])  # (the team's, looked up with fn)
        return drivers[0](*args, p.ctl, workers)
    finally:
        if mine:
            p.busy = False


def launch_parallel(drivers: tuple, args: tuple):
    """Run ``drivers[0]`` on Numba's layer with :func:`get_num_threads` threads (Numba's
    thread-local count set for this launch only), one launch at a time where the layer is not
    thread-safe: a call finding it taken (another thread's, or its own interrupted one) runs
    ``drivers[1]``.
    """
    kernel, serial = drivers[0], drivers[1]
    n = get_num_threads()
    before = numba.get_num_threads()
    if n != before:
        numba.set_num_threads(n)
    try:
        if not _current()[2]:
            return kernel(*args)
        mine = False
        try:
            with _launch_guard:  # no Python code in here
                if not _launching[0]:
                    mine = _launching[0] = True
            if mine:
                return kernel(*args)
            return serial(*args)
        finally:
            if mine:
                _launching[0] = False
    finally:
        if n != before:
            numba.set_num_threads(before)


_launch_guard = threading.Lock()
_launching = [False]  # a launch on a layer that takes one at a time is running


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def info() -> dict:
    """What the threading setup is, for ``python -m jitops info`` and bug reports."""
    if pool.AVAILABLE:
        parallel, why = True, "jitops' own thread pool"
    else:
        _, parallel, _, why = _current()
    return {
        "cpu": cpu_model(),
        "threading_layer": threading_layer(),
        "num_threads": get_num_threads(),
        "num_threads_source": ("set_num_threads" if _setting and _setting[2] else
                               default_source()[1]),
        "affinity": affinity(),
        "numba_pool": pool_size(),
        "parallel": parallel,
        "parallel_reason": why,
        "tbb_loaded": _state["tbb_loaded"],
        "tbb_path": _state["tbb_path"],
        "openmp_runtimes": openmp_runtimes(),
        "pool_workers": len(pool.get().threads) if pool.AVAILABLE else 0,
        "main_thread_jobs": omp.status() if pool.AVAILABLE else "Numba's threading layer",
    }
