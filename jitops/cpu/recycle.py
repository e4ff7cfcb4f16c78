"""Large result buffers, recycled once no array uses them any more.

A new result larger than the allocator keeps around (glibc's malloc maps every block over
32 MiB afresh and unmaps it when freed) costs a page fault and the zeroing of every page on
its first write: 4.5 ms of the 8 ms a 1e7 float32 ``subtract`` took here, against 3.8 ms with
``out=``. So a result of at least ``config.RECYCLE_MIN_BYTES`` is a view of a buffer (a 1-d
uint8 array, its ``base``) that this module keeps, and a buffer that no array uses any more
becomes the next result of exactly its size.

*Whether a buffer is in use* is its reference count: every array viewing a buffer's memory
holds a reference to it (NumPy collapses ``base`` chains onto the array that owns the memory;
memoryviews, buffer-protocol consumers, ``torch.from_numpy`` and DLPack capsules hold the
array that holds it). A buffer counted only by this module's list is idle; the count is read
under a lock, and nothing but this module can make a new reference to an idle buffer. Where
counts are not exact (a free-threaded interpreter, or one without ``sys.getrefcount``),
recycling is off.

The buffers followed, in use or idle, add up to at most ``config.RECYCLE_BYTES`` (a
sixteenth of physical memory, from 256 MiB to 4 GiB, unless ``JITOPS_RECYCLE_MB`` says
otherwise; 0 turns recycling off) and number at most
``TRACKED_MAX``, so idle memory never exceeds that either; the least recently handed out go
first. A buffer no longer followed is an ordinary array, freed with its last view;
:func:`release` frees every idle one now.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from ..core import config
from . import hooks, lifecycle

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
_stats = {"new": 0, "reused": 0}


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


def _take(nbytes: int) -> np.ndarray:
    buf = _locked(_take_locked, nbytes, config.RECYCLE_BYTES)
    return np.empty(nbytes, np.uint8) if buf is None else buf


def _take_locked(nbytes: int, cap: int) -> np.ndarray:
    counts = _counts(_buffers)
    found = None
    for i, c in enumerate(counts):
        if c == _IDLE and _buffers[i].nbytes == nbytes:
            found = i
            break
    if found is not None:
        buf = _buffers.pop(found)
        _stats["reused"] += 1
    else:
        buf = np.empty(nbytes, np.uint8)
        _stats["new"] += 1
    if nbytes <= cap:
        # Follow at most `cap` bytes (in use or idle, so the idle ones never exceed it
        # whenever results are dropped) and TRACKED_MAX buffers: the least recently
        # handed out go first (freed when idle; when in use, only no longer followed).
        total = nbytes + sum(b.nbytes for b in _buffers)
        while _buffers and (total > cap or len(_buffers) >= TRACKED_MAX):
            total -= _buffers.pop(0).nbytes
        _buffers.append(buf)
    return buf


def release() -> int:
    """Free every idle buffer now; returns the bytes freed (to the allocator)."""
    return _locked(_release_locked) or 0


def _release_locked() -> int:
    counts = _counts(_buffers)
    freed = sum(b.nbytes for b, c in zip(_buffers, counts) if c == _IDLE)
    _buffers[:] = [b for b, c in zip(_buffers, counts) if c != _IDLE]
    return freed


def status() -> dict:
    """What is kept: for ``python -m jitops info`` and tests."""
    return _locked(_status_locked)


def _status_locked() -> dict:
    counts = _counts(_buffers)
    idle = sum(b.nbytes for b, c in zip(_buffers, counts) if c == _IDLE)
    return {"enabled": enabled(), "min_bytes": config.RECYCLE_MIN_BYTES,
            "cap_bytes": config.RECYCLE_BYTES, "followed": len(_buffers),
            "idle_bytes": idle, **_stats}


def _after_fork_in_child() -> None:
    # A fork while another thread held the lock leaves it held in the child for ever.
    global _lock
    _lock = threading.Lock()
    _owner[0] = None


lifecycle.at_fork_in_child(_after_fork_in_child)
