"""Sharing PyTorch's OpenMP team: jitops' main-thread jobs run on it where that is safe.

PyTorch's ``libgomp`` threads spin for milliseconds after each op and hold the cores jitops'
pool needs (SPEC: alternating op by op, each within 1.3x of alone); one team cannot collide
with itself, so where that ``libgomp`` is loaded the main thread's jobs run on it
(``GOMP_parallel`` with :func:`jitops.cpu.threads.pool._omp_entry`, claiming tasks as a worker
does). GNU OpenMP does not survive a fork (a child's next region waits for threads it lacks), so the
team is used only where it cannot have been inherited: never in a process forked after jitops
was imported; always where PyTorch was imported after jitops; where it was imported before,
only on an interpreter whose thread record shows an earlier fork (:data:`RECORD_SHOWS_FORKS`)
and shows none, once a thread of this process is seen asleep inside that ``libgomp``
(``/proc/self/task/*/syscall``, looked for at most every :data:`RECHECK_S`, waiting up to
:data:`WAIT_S` for a spinning thread). Only the main thread uses the team, never with
``JITOPS_OMP=0``.
"""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import sys
import threading
import time

from ...core.config import env_flag
from ..compile import hooks
from . import pool

#: Seconds between looks for a thread of PyTorch's team, while none has been seen.
RECHECK_S = 0.25
#: How long a look waits for a running thread Python did not start to fall asleep (GNU
#: OpenMP's threads spin about 9 ms after a PyTorch op here), and how long all the looks of a
#: process may wait in all.
WAIT_S = 0.03
WAIT_BUDGET_S = 0.15

# x86-64 Linux: the stall check reads the cycle counter (jitops.cpu.threads.pool.cycles)
_ENABLED = (env_flag("JITOPS_OMP", True) and sys.platform.startswith("linux")
            and platform.machine().lower() in ("x86_64", "amd64") and pool.AVAILABLE)

#: Whether PyTorch was imported before jitops (its team may have come from a forked parent).
PRELOADED = "torch" in sys.modules
#: Whether this interpreter's main-thread record shows a fork made before jitops was imported
#: (Python up to 3.11 keeps the parent's native id there; later ones update it). Where it
#: does not, a team of PyTorch imported before jitops may be a forked parent's, whatever
#: threads are seen (another Python thread's team is no proof): the pool runs the jobs.
RECORD_SHOWS_FORKS = sys.version_info < (3, 12)

#: The process jitops was imported in: a later fork is seen by comparing with
#: :func:`jitops.cpu.threads.pool.current_pid` (kept current by the pool's at-fork hook).
_IMPORT_PID = os.getpid()

_state = {
    "fn": None,  # GOMP_parallel's address in PyTorch's libgomp (0: none loaded), once looked up
    "text": (),  # that library's code: (start, end) address ranges
    "tnum": 0,  # that library's omp_get_thread_num (0: none), for jitops.cpu.threads.pool
    "inherited": False,  # the interpreter shows a fork before jitops was imported
    "next_look": 0.0,
    "waited": 0.0,  # seconds looks waited for a running thread to fall asleep (_wait_for_team)
}

#: The main thread, the only one that uses the team (another would make the runtime start a
#: second team); GOMP_parallel's address once the team is known usable, else 0.
_MAIN = threading.main_thread().ident
_ready = 0


def _forked() -> bool:
    """Whether this process forked after jitops was imported, or shows an earlier fork."""
    return pool.current_pid() != _IMPORT_PID or _state["inherited"]


def _torch_libgomp() -> tuple[int, int, tuple[tuple[int, int], ...]]:
    """``GOMP_parallel``'s and ``omp_get_thread_num``'s addresses in the GNU OpenMP library
    PyTorch loaded (the second 0 where it has none), and that library's code ranges;
    (0, 0, ()) where PyTorch has none loaded."""
    where = getattr(sys.modules.get("torch"), "__file__", None)
    if not isinstance(where, str) or not where:  # a stand-in module (a test's mock): none
        return 0, 0, ()
    base = os.path.dirname(where)
    for path in sorted(glob.glob(os.path.join(base, "lib", "libgomp*.so*"))):
        try:  # RTLD_NOLOAD: only a library that is already loaded
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            fn = ctypes.cast(lib.GOMP_parallel, ctypes.c_void_p).value or 0
            tnum = (ctypes.cast(lib.omp_get_thread_num, ctypes.c_void_p).value or 0
                    if hasattr(lib, "omp_get_thread_num") else 0)
        except (OSError, AttributeError):
            continue
        real = os.path.realpath(path)
        text = []
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 6 and "x" in parts[1] and os.path.realpath(parts[5]) == real:
                        lo, hi = parts[0].split("-")
                        text.append((int(lo, 16), int(hi, 16)))
        except OSError:
            text = []
        if fn:
            return fn, tnum, tuple(text)
    return 0, 0, ()


def _team_thread_seen(text: tuple[tuple[int, int], ...]) -> bool | None:
    """Whether another thread of this process sleeps in a system call made from ``text``
    (the runtime's code): a team thread, so the team was started in this process.

    True where one is seen; None where none is, but a thread that Python did not start is
    running (a team thread spinning after PyTorch's last op shows no address until it falls
    asleep, about 9 ms later); False otherwise.
    """
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return False
    ours = None
    spinning = False
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"/proc/self/task/{tid}/syscall") as f:
                fields = f.read().split()
        except OSError:
            continue
        if fields and fields[0] == "running":
            if not spinning:
                if ours is None:  # Python's threads (jitops' pool workers among them)
                    ours = {str(t.native_id) for t in threading.enumerate()}
                spinning = tid not in ours
            continue
        if len(fields) < 3:
            continue
        try:
            pc = int(fields[-1], 16)
        except ValueError:
            continue
        if any(lo <= pc < hi for lo, hi in text):
            return True
    return None if spinning else False


def _wait_for_team(text: tuple[tuple[int, int], ...]) -> bool:
    """Look for a team thread asleep in ``text``; where a thread Python did not start is
    running instead, keep looking for up to :data:`WAIT_S` (:data:`WAIT_BUDGET_S` in all,
    per process): a program that alternates PyTorch's ops and jitops' keeps the team's threads
    spinning, so they are never caught asleep between its calls, and jitops' own pool would
    share the cores with them for good (measured: a 1e6 subtract 1.9x its time alone)."""
    seen = _team_thread_seen(text)
    if seen is not None or _state["waited"] >= WAIT_BUDGET_S:
        return bool(seen)
    start = time.monotonic()
    deadline = start + min(WAIT_S, WAIT_BUDGET_S - _state["waited"])
    while seen is None and time.monotonic() < deadline:
        time.sleep(0.0002)
        seen = _team_thread_seen(text)
    _state["waited"] += time.monotonic() - start
    return bool(seen)


def team() -> int:
    """``GOMP_parallel``'s address when this call's parallel job should run on PyTorch's
    OpenMP team, else 0 (jitops' own pool)."""
    global _ready
    if threading.get_ident() != _MAIN:
        return 0
    if _ready and pool.current_pid() == _IMPORT_PID:
        return _ready
    if not _ENABLED or "torch" not in sys.modules or _forked() or not hooks.ok("gomp_team"):
        return 0
    fn = _state["fn"]
    if fn is None:
        fn, _state["tnum"], _state["text"] = _torch_libgomp()
        _state["fn"] = fn
    if not fn:
        return 0
    if PRELOADED:  # the team may be a forked parent's until one of its threads is seen here
        if not RECORD_SHOWS_FORKS:
            return 0
        if threading.main_thread().native_id != os.getpid():
            # a fork child whose interpreter kept the parent's thread record (Python up to
            # 3.11 does): whatever team threads it has, the main thread's team may be the
            # parent's
            _state["inherited"] = True
            return 0
        now = time.monotonic()
        if now < _state["next_look"]:
            return 0
        _state["next_look"] = now + RECHECK_S
        if not _wait_for_team(_state["text"]):
            return 0
    _ready = fn
    return fn


def status() -> str:
    """How parallel jobs of the main thread run, for ``python -m jitops info``."""
    if threading.get_ident() == _MAIN:
        team()
    if not _ENABLED:
        return "off (JITOPS_OMP=0, JITOPS_POOL=0, or not x86-64 Linux)"
    if _forked():
        return "jitops' pool (a forked process: PyTorch's OpenMP team may be the parent's)"
    if "torch" not in sys.modules:
        return "jitops' pool (PyTorch not imported)"
    if not _state["fn"]:
        return "jitops' pool (PyTorch's GNU OpenMP runtime not found)"
    if _ready:
        return "PyTorch's OpenMP team"
    if PRELOADED and not RECORD_SHOWS_FORKS:
        return ("jitops' pool (PyTorch was imported first, and this Python's thread record "
                "cannot show whether its team is a forked parent's)")
    return "jitops' pool until a thread of PyTorch's OpenMP team is seen in this process"
