"""A process's life around jitops: forks by any means, and compiles that interrupts never cut.

Forks: each module with per-process state registers a child's reset (:func:`at_fork_in_child`);
``os.fork`` runs them, and :func:`check_pid` runs them where C code forked (asked before a
job or a compile). Around every ``os.fork`` Numba's compiler lock and llvmlite's lock are
taken, so no child starts with one held by a thread it lacks; a child of libc's ``fork()``
finding llvmlite's held gets a fresh one, and one forked mid-compile raises a RuntimeError on
its next compile (never a hang). Compiles: ``with compiler_lock(), signals_held(),
collector_paused():`` -- Numba's lock as a C-level ``with``, the main thread's signal handlers
held until the compile ends (Numba does not survive an exception inside it), and the cyclic
collector paused, so that no ``__del__`` calls jitops from inside the compiler.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
from collections.abc import Callable

from numba.core.compiler_lock import global_compiler_lock

from . import hooks

_CHILD_HOOKS: list[Callable[[], None]] = []
_pid = [os.getpid()]  # the pid the hooks last saw


def at_fork_in_child(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn`` in every child, whether forked by ``os.fork`` or by C code (then at the
    child's first :func:`check_pid`). Returns ``fn`` (usable as a decorator)."""
    _CHILD_HOOKS.append(fn)
    return fn


def _run_child_hooks() -> None:
    _pid[0] = os.getpid()
    for fn in list(_CHILD_HOOKS):
        fn()


def check_pid() -> None:
    """Run the child hooks where this process is not the one they last saw (a fork no hook
    ran in)."""
    if os.getpid() != _pid[0]:
        _run_child_hooks()


# -- Numba's compiler lock ------------------------------------------------------------------


def _fork_locks() -> list[tuple[object, str]]:
    """(object, attribute) of each lock a fork must not split, where its hook is on: Numba's
    compiler lock, then llvmlite's (the order compiles take them in)."""
    found = []
    if hooks.compiler_rlock() is not None:
        found.append((global_compiler_lock, "_lock"))
    holder = hooks.llvm_lock_holder()
    if holder is not None:
        found.append((holder, "_lock"))
    return found


#: How long a fork waits for another thread's compile before it goes ahead (the child then
#: gets fresh locks).
FORK_WAIT_S = 10.0
_fork_state = threading.local()


def _before_fork() -> None:
    held = []
    for obj, name in _fork_locks():
        lock = getattr(obj, name)
        if lock.acquire(timeout=FORK_WAIT_S):
            held.append(lock)
    _fork_state.held = held


def _release_fork_locks() -> None:
    """After the fork, in the parent and in the child alike (the same objects, held by this
    same thread in both)."""
    held, _fork_state.held = getattr(_fork_state, "held", []), []
    for lock in reversed(held):
        lock.release()


#: Set in a child forked by C code while another thread of the parent was compiling: Numba's
#: compiler state there is a half-written copy that no lock can make whole (a repaired lock
#: leads into a dispatcher still marked as compiling, or into LLVM's own assertions).
_compiler_orphaned = [False]


@at_fork_in_child
def _fresh_locks_if_orphaned() -> None:
    """llvmlite's lock held by a thread the child does not have (a fork by C code while it
    disposed of an LLVM object) is replaced. Numba's compiler lock held so is a compile cut
    in half: compiles then raise a RuntimeError that says so (:func:`compiler_lock`), where
    they would otherwise hang; kernels compiled before the fork still run."""
    for obj, name in _fork_locks():
        lock = getattr(obj, name)
        if lock._is_owned():
            continue
        if lock.acquire(blocking=False):
            lock.release()
            continue
        if obj is global_compiler_lock:
            _compiler_orphaned[0] = True
        else:
            setattr(obj, name, threading.RLock())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_release_fork_locks,
                        after_in_child=_release_fork_locks)
    os.register_at_fork(after_in_child=_run_child_hooks)


# -- signals held back while compiling --------------------------------------------------------

_shield = threading.local()


class _Deferred:
    """Handlers installed while compiling: each records its signal for after the compile."""

    __slots__ = ("pending", "saved")

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.saved: dict[int, object] = {}

    def __call__(self, signum, frame) -> None:
        self.pending.append(signum)


def _hold_signals() -> _Deferred | None:
    """Install a recording handler for every signal that has a Python handler (main thread
    only: elsewhere no handler runs in this thread). None where nothing was installed."""
    if threading.current_thread() is not threading.main_thread():
        return None
    d = _Deferred()
    try:
        for sig in signal.valid_signals():
            try:
                h = signal.getsignal(sig)
            except (ValueError, OSError):
                continue
            if callable(h):
                signal.signal(sig, d)
                d.saved[sig] = h
    except BaseException:
        _release_signals(d)
        raise
    return d


def _release_signals(d: _Deferred | None) -> None:
    """Put the handlers back, then raise what came meanwhile: Python runs each handler at
    its next check, as if the signal had just arrived. A handler that raises while others
    are still being put back (a signal restored first arriving again) does not stop the
    rest: its exception is raised at the end."""
    if d is None:
        return
    err = None
    for sig, h in d.saved.items():
        while signal.getsignal(sig) is d:
            try:
                signal.signal(sig, h)
            except BaseException as e:  # an earlier restored handler ran, and raised
                err = err or e
    for sig in dict.fromkeys(d.pending):
        try:
            signal.raise_signal(sig)
        except BaseException as e:
            err = err or e
    if err is not None:
        raise err


def compiler_lock():
    """Numba's compiler lock for the caller's ``with``: the reentrant lock inside it where there is
    one (a C-level ``with``, released whatever exception arrives), else Numba's object. Raises
    RuntimeError in a child forked by C code mid-compile (:func:`check_pid`).
    """
    check_pid()
    if _compiler_orphaned[0]:
        raise RuntimeError(
            "jitops: this process was forked by C code (not os.fork) while another thread was "
            "compiling, so Numba's compiler is unusable here; kernels compiled before the "
            "fork still run. Compile first (jitops.warmup) or fork with os.fork / "
            "multiprocessing, which wait for the compile.")
    return hooks.compiler_rlock() or global_compiler_lock


class signals_held:
    """``with signals_held():`` -- Python signal handlers of the main thread held back until
    the outermost block of this thread ends, then raised again (re-entrant).

    Once its handlers are installed nothing asynchronous can raise inside the block (only
    Python-level signal handlers do, and they are all the recording one), so an exit is
    always reached."""

    __slots__ = ("_deferred",)

    def __enter__(self) -> None:
        depth = getattr(_shield, "depth", 0)
        self._deferred = _hold_signals() if depth == 0 else None
        _shield.depth = depth + 1

    def __exit__(self, *exc) -> None:
        _shield.depth -= 1
        d, self._deferred = self._deferred, None
        _release_signals(d)


class collector_paused:
    """``with collector_paused():`` -- Python's cyclic garbage collector off until the
    outermost block of this thread ends, then on again if it was on.

    A compile is Python code (Numba's pipeline, its first imports) in which a collection
    may run any ``__del__``; one that calls jitops would compile inside the compile, where
    Numba finds its own modules half imported or a kernel it is typing "recursive". Cycles
    made meanwhile wait for the first collection after the compile."""

    __slots__ = ("_was_on",)

    def __enter__(self) -> None:
        depth = getattr(_shield, "gc_depth", 0)
        self._was_on = depth == 0 and gc.isenabled()
        if self._was_on:
            gc.disable()
        _shield.gc_depth = depth + 1

    def __exit__(self, *exc) -> None:
        _shield.gc_depth -= 1
        if self._was_on:
            gc.enable()


def compile_in_progress() -> bool:
    """Whether this thread is inside :class:`signals_held` (a jitops compile)."""
    return bool(getattr(_shield, "depth", 0))
