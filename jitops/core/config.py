"""Tunables and environment switches, in one place so tests and benchmarks can patch them."""

from __future__ import annotations

import os

#: The largest value an integer setting takes: the pool keeps its tunables in int64 words.
INT_MAX = (1 << 62) - 1


def env_int(name: str, default: int, minimum: int = 0, maximum: int = INT_MAX) -> int:
    """The integer environment variable ``name``, ``default`` when unset or blank.

    Raises
    ------
    ValueError
        If it is set to anything but an integer from ``minimum`` to ``maximum`` (naming the
        variable and its range: a bare ``int()`` error at import would not say which one).
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer from {minimum} to {maximum}, "
                         f"got {text!r}") from None
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an integer from {minimum} to {maximum}, got {value}")
    return value


_TRUE, _FALSE = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


def env_flag(name: str, default: bool) -> bool:
    """The on/off environment variable ``name`` (``1/on/true/yes`` or ``0/off/false/no``, any
    case), ``default`` when unset or blank.

    Raises
    ------
    ValueError
        If it is set to anything else (naming the variable and what it accepts).
    """
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name} must be one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)}, "
                     f"got {os.environ[name]!r}")


#: Below this many output elements the serial kernel runs: a parallel launch costs 1-5 us,
#: more than the whole job (PyTorch's GRAIN_SIZE is 32768; measured here, see benchmarks/).
PARALLEL_THRESHOLD = env_int("JITOPS_PARALLEL_THRESHOLD", 65536)

#: A call runs parallel only where it also moves at least ``PARALLEL_THRESHOLD`` times this
#: many bytes (its output and the inputs it reads in full; 512 KiB): smaller elements need
#: more of them to pay for a launch; parallel passed serial from 500-600 KB moved.
PARALLEL_BYTES = env_int("JITOPS_PARALLEL_BYTES", 8)


def parallel_size(bytes_per_element: int) -> int:
    """The fewest output elements a call moving ``bytes_per_element`` bytes per element (its
    output and the inputs it reads in full) runs parallel at."""
    need = -(-PARALLEL_THRESHOLD * PARALLEL_BYTES // max(1, bytes_per_element))
    return max(PARALLEL_THRESHOLD, need)

#: A repeated parallel call of fewer output elements than this runs serially where the
#: thread pool's workers are asleep (the process was idle for milliseconds; whether it wakes
#: them: ASLEEP_WAKE_WINDOW_S): a woken worker took part in 3-5% of 1e5-element jobs; 0 off.
ASLEEP_SERIAL_MAX = env_int("JITOPS_ASLEEP_SERIAL_MAX", 1 << 18)
#: Such a call wakes the workers only where the same call ran less than this long before
#: (seconds): a burst of calls gets them back; calls further apart run serially and leave
#: them asleep (waking them for calls 4 ms apart cost a quarter of the call's speed).
ASLEEP_WAKE_WINDOW_S = 0.002

#: Inner-loop block: one parallel task walks at most this many elements of a row, or packs
#: whole short rows up to about this many elements. Big enough to amortise the per-task row
#: setup (measured: 16384 cost 5-10% on broadcasts against 65536), small enough that every
#: thread gets several tasks; never below BLOCK_MIN.
BLOCK = env_int("JITOPS_BLOCK", 65536, 1)
BLOCK_MIN = 4096

#: Tile of the ``tiled`` variant (rows x columns of the two innermost dims), for operands that
#: disagree on layout (``X.T - Y``): short and wide, walked down a column of tiles, so the next
#: tile reads the rest of the cache lines the last one touched (8 x 512: half 32 x 32's time on
#: 4096^2 float32). At most ``jitops.cpu.kernels.binary.TILE_MAX`` elements (on the stack).
TILE = (env_int("JITOPS_TILE_I", 8, 1), env_int("JITOPS_TILE_J", 512, 1))

#: Whether tiled tasks move their tile edges onto the operands' cache lines (1, the default;
#: 0 keeps the grid at the origin). NumPy's large arrays start 16 bytes into a page, so a
#: transposed input's 8-element runs straddle lines and out's rows begin mid-line.
TILE_ALIGN = env_int("JITOPS_TILE_ALIGN", 1, 0)


def _last_level_cache_bytes(default: int = 32 << 20) -> int:
    """The largest CPU cache's size (Linux sysfs), else ``default``."""
    import glob

    best = 0
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    return best or default


#: Outputs of at least this many bytes are written with non-temporal stores
#: (jitops.cpu.kernels.stream): the last-level cache's size, since a larger output cannot stay
#: cached for its next reader anyway and its read-for-ownership is pure cost. 0 turns streaming off.
STREAM_BYTES = env_int("JITOPS_STREAM_BYTES", _last_level_cache_bytes())


def cache_enabled() -> bool:
    """On-disk kernel cache, on unless ``JITOPS_CACHE=0`` (or ``off``/``false``/``no``)."""
    return env_flag("JITOPS_CACHE", True)


def home() -> str | None:
    """The user's home folder, or None where it cannot be resolved (no ``HOME`` and no
    passwd entry, as under ``docker run --user 12345``: ``~`` then stays ``~``)."""
    h = os.path.expanduser("~")
    return h if os.path.isabs(h) else None


def cache_dir() -> str:
    """Where compiled kernels are kept.

    ``JITOPS_CACHE_DIR`` if set; else ``$NUMBA_CACHE_DIR/jitops`` when the user set Numba's;
    else ``$XDG_CACHE_HOME/jitops`` (``~/.cache/jitops``): a place the user can always write,
    unlike a read-only site-packages. Without a home (and no ``XDG_CACHE_HOME``), a folder of
    this user's in the temporary directory -- never a path relative to the working directory.
    """
    d = os.environ.get("JITOPS_CACHE_DIR")
    if d:
        return d
    d = os.environ.get("NUMBA_CACHE_DIR")
    if d:
        return os.path.join(d, "jitops")
    base = os.environ.get("XDG_CACHE_HOME")
    if base and os.path.isabs(base):
        return os.path.join(base, "jitops")
    h = home()
    if h is not None:
        return os.path.join(h, ".cache", "jitops")
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"jitops-cache-{uid}")

#: CUDA launch configuration (one place; tests patch it small). Kernels are grid-stride loops,
#: so the block cap only bounds the launch, never the size handled.
CUDA_THREADS_PER_BLOCK = env_int("JITOPS_CUDA_THREADS_PER_BLOCK", 256, 1)
CUDA_MAX_BLOCKS = env_int("JITOPS_CUDA_MAX_BLOCKS", 65535, 1)

#: New results of at least this many bytes take their memory from jitops.cpu.recycle: a large
#: buffer no array uses any more, not new pages to fault in and zero (4.5 ms of a 1e7 float32
#: subtract's 8 ms); below, glibc's malloc reuses freed blocks itself.
RECYCLE_MIN_BYTES = env_int("JITOPS_RECYCLE_MIN_BYTES", 16 << 20, 1)


def recycle_budget(limit: int) -> int:
    """The recycled-buffer budget (bytes) for a process that may use ``limit`` bytes: a
    sixteenth, at least 256 MiB (an eighth of a limit under 2 GiB) and at most 4 GiB --
    enough to recycle a 1e8 float32 result (400 MB) on 8 GB and more, where a new one ran at
    0.45 of ``out=``'s speed when every call faulted in and zeroed fresh pages."""
    mb = limit >> 20
    return min(max(mb >> 4, min(256, mb >> 3)), 4096) << 20


def _recycle_default() -> tuple[int, str]:
    """:func:`recycle_budget` of the memory this process may use
    (:func:`jitops.core.limits.memory_limit`: its cgroup's limit, ``RLIMIT_AS`` or
    ``RLIMIT_DATA``, physical memory) in MiB, and where that came from. A resource limit set
    later, while the process runs, is read again by each new allocation (jitops.cpu.recycle)."""
    from .limits import memory_limit

    limit, where = memory_limit()
    if not limit:
        return 256, "a default (no memory limit could be read)"
    return recycle_budget(limit) >> 20, f"1/16 of {limit >> 20} MiB, {where}"


RECYCLE_DEFAULT_MB, RECYCLE_SOURCE = _recycle_default()
#: Whether ``JITOPS_RECYCLE_MB`` set the budget (then no limit lowers it).
RECYCLE_EXPLICIT = bool(os.environ.get("JITOPS_RECYCLE_MB", "").strip())
if RECYCLE_EXPLICIT:
    RECYCLE_SOURCE = "JITOPS_RECYCLE_MB"
#: The most bytes of buffers recycling follows, in use or idle (so idle ones never hold more);
#: the least recently handed out go first. 0 turns recycling off.
RECYCLE_BYTES = env_int("JITOPS_RECYCLE_MB", RECYCLE_DEFAULT_MB, 0, 1 << 40) << 20
#: An idle recycled buffer is freed once it has been idle this long (milliseconds): a loop of
#: calls retakes it within microseconds, and a server that made one large result does not
#: keep its memory.
RECYCLE_IDLE_MS = env_int("JITOPS_RECYCLE_IDLE_MS", 1000, 1, 1 << 40)
