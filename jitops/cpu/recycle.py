"""Large result buffers, recycled once no array uses them any more.

A new result of at least ``config.RECYCLE_MIN_BYTES`` would cost a page fault and the zeroing
of every page on first write (glibc maps such blocks afresh): instead it is a view of a buffer
this module keeps, and a buffer no array uses becomes the next result of exactly its size.
*In use* is read from the reference count, under a lock (every view of a buffer's memory holds
it: NumPy collapses ``base`` chains, and memoryviews, DLPack and ``torch.from_numpy`` hold the
array that holds it); where counts are not exact, recycling is off. It never costs memory a
NumPy user would have had: the buffers followed total at most ``config.RECYCLE_BYTES`` (a
sixteenth of what the process may use; ``JITOPS_RECYCLE_MB``) and ``TRACKED_MAX``; idle ones
are freed before a new buffer is allocated and after ``config.RECYCLE_IDLE_MS`` (a reaper
thread, alive only while buffers are followed); a failed allocation is retried once after
freeing every idle buffer. :func:`release` frees every idle one now.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

from ..core import config, limits
from .compile import hooks, lifecycle

_get_ident = threading.get_ident

#: How many buffers (in use or idle) are followed at once: the scan for an idle one reads
#: each count, so it stays short (about 0.05 us a buffer).
TRACKED_MAX = 16

_buffers: list[np.ndarray] = []  # least recently handed out first
_lock = threading.Lock()
#: The thread inside ``_lock``'s block, if any: that block runs Python code (reference
#: counts, a new array), where a signal handler or a ``__del__`` may run and call jitops on
#: the same thread; such a nested call gets a fresh buffer instead of waiting for the lock.
_owner = [None]
_stats = {"new": 0, "reused": 0, "retried": 0, "reaped": 0}
#: When each followed buffer was first seen idle by the reaper (by ``id``; none: in use).
_idle_since: dict[int, float] = {}
#: The right to start the reaper: taken by ``list.pop`` (atomic), given back when the reaper
#: ends or fails to start. No lock is held while a thread starts: ``Thread()`` and the new
#: thread's first steps run Python code where a collection may run a ``__del__`` that calls
#: jitops (in either thread), which must find no lock of ours held.
_start_token: list = [True]


def _counts(buffers: list) -> list[int]:
    """Each buffer's reference count, read the same way for the list and for the probe."""
    return [sys.getrefcount(b) for b in buffers]


def _baseline() -> int | None:
    """The count of a buffer held by nothing but the list it is in, or None where counts
    cannot tell (then recycling is off)."""
    if not hooks.ok("refcounts"):
        return None
    probe = [np.empty(0, np.uint8)]
    alone = _counts(probe)[0]
    held = probe[0]
    if _counts(probe)[0] != alone + 1:  # a count that misses a reference cannot be trusted
        return None
    del held
    return alone


_IDLE = _baseline()


def enabled() -> bool:
    return _IDLE is not None and config.RECYCLE_BYTES > 0


def empty(shape: tuple, dtype: np.dtype, byte_strides: tuple | None, nbytes: int) -> np.ndarray:
    """A new array of ``shape``/``dtype`` (C order, or ``byte_strides``) over ``nbytes``
    bytes: a recycled buffer's memory where an idle one of that size is kept, else new.
    Call only where :func:`enabled` says yes."""
    try:
        buf = _take(nbytes)
    except MemoryError:
        raise MemoryError(f"jitops: cannot allocate {nbytes} bytes for a result of shape "
                          f"{tuple(shape)} and dtype {np.dtype(dtype)}") from None
    return np.ndarray(shape, dtype, buffer=buf, strides=byte_strides)


def _locked(fn, *args):
    """``fn(*args)`` under the lock; None where this thread already is inside it (a nested
    call: see ``_owner``). The owner is set without a call in between (no handler can run
    there), so a nested call always sees it."""
    me = _get_ident()
    if _owner[0] == me:
        return None
    with _lock:
        _owner[0] = me
        try:
            return fn(*args)
        finally:
            _owner[0] = None


def _cap() -> int:
    """The budget now: ``config.RECYCLE_BYTES``, lowered by a resource limit the program set
    after jitops was imported (unless ``JITOPS_RECYCLE_MB`` chose the budget)."""
    cap = config.RECYCLE_BYTES
    if not config.RECYCLE_EXPLICIT:
        limit = limits.address_limit()
        if limit is not None:
            cap = min(cap, config.recycle_budget(limit))
    return cap


def _take(nbytes: int) -> np.ndarray:
    buf = _locked(_take_locked, nbytes)
    if buf is None:  # a nested call: a fresh buffer, not followed
        return np.empty(nbytes, np.uint8)
    if _start_token:
        _start_reaper()
    return buf


def _forget(i: int) -> np.ndarray:
    buf = _buffers.pop(i)
    _idle_since.pop(id(buf), None)
    return buf


def _take_locked(nbytes: int) -> np.ndarray:
    for i, c in enumerate(_counts(_buffers)):
        if c == _IDLE and _buffers[i].nbytes == nbytes:
            _stats["reused"] += 1
            buf = _forget(i)
            _buffers.append(buf)
            return buf
    # Make room first: follow at most `cap` bytes (in use or idle) and TRACKED_MAX buffers,
    # the least recently handed out going first (freed when idle; when in use, only no
    # longer followed), so that idle memory is never held beside a new allocation past cap.
    cap = _cap()
    followed = nbytes <= cap
    total = nbytes + sum(b.nbytes for b in _buffers)
    while _buffers and (total > cap or (followed and len(_buffers) >= TRACKED_MAX)):
        total -= _forget(0).nbytes
    try:
        buf = np.empty(nbytes, np.uint8)
    except MemoryError:  # what idle buffers still hold may be what it lacks
        _release_locked()
        _stats["retried"] += 1
        buf = np.empty(nbytes, np.uint8)
    _stats["new"] += 1
    if followed:
        _buffers.append(buf)
    return buf


def _start_reaper() -> None:
    """Start the thread that frees buffers idle for ``config.RECYCLE_IDLE_MS`` (it ends by
    itself once nothing is followed; a daemon, so it never holds up the interpreter's exit),
    unless one runs or is being started (:data:`_start_token`)."""
    try:
        _start_token.pop()
    except IndexError:
        return
    try:
        threading.Thread(target=_reap, name="jitops-recycle-reaper", daemon=True).start()
    except RuntimeError:  # no thread can be started (a limit, or the interpreter exiting)
        _start_token.append(True)


def _reap() -> None:
    idle_s = config.RECYCLE_IDLE_MS / 1000
    try:
        while True:
            time.sleep(idle_s / 2)
            if _locked(_reap_locked, idle_s) is False:
                return
    finally:
        _start_token.append(True)


def _reap_locked(idle_s: float) -> bool:
    """Free buffers seen idle for ``idle_s``; False (and the reaper ends) once none is left."""
    now = time.monotonic()
    counts = _counts(_buffers)
    keep = []
    for b, c in zip(_buffers, counts):
        if c != _IDLE:
            _idle_since.pop(id(b), None)
            keep.append(b)
        elif now - _idle_since.setdefault(id(b), now) < idle_s:
            keep.append(b)
        else:
            _idle_since.pop(id(b), None)
            _stats["reaped"] += 1
    _buffers[:] = keep
    return bool(keep)


def release() -> int:
    """Free every idle buffer now; returns the bytes freed (to the allocator)."""
    return _locked(_release_locked) or 0


def _release_locked() -> int:
    counts = _counts(_buffers)
    freed = sum(b.nbytes for b, c in zip(_buffers, counts) if c == _IDLE)
    _buffers[:] = [b for b, c in zip(_buffers, counts) if c != _IDLE]
    live = {id(b) for b in _buffers}
    for k in [k for k in _idle_since if k not in live]:
        del _idle_since[k]
    return freed


def status() -> dict:
    """What is kept: for ``python -m jitops info`` and tests."""
    return _locked(_status_locked)


def _status_locked() -> dict:
    counts = _counts(_buffers)
    idle = sum(b.nbytes for b, c in zip(_buffers, counts) if c == _IDLE)
    return {"enabled": enabled(), "min_bytes": config.RECYCLE_MIN_BYTES,
            "cap_bytes": config.RECYCLE_BYTES, "cap_source": config.RECYCLE_SOURCE,
            "idle_ms": config.RECYCLE_IDLE_MS, "followed": len(_buffers),
            "idle_bytes": idle, **_stats}


def _after_fork_in_child() -> None:
    # A fork while another thread held the lock leaves it held in the child for ever.
    global _lock
    _lock = threading.Lock()
    _owner[0] = None
    _start_token[:] = [True]  # the parent's reaper did not cross the fork


lifecycle.at_fork_in_child(_after_fork_in_child)
