"""Numba's on-disk cache, in a directory only this user can write, keyed on all of jitops' sources.

Every entry is stamped with a hash of the kernels' sources (the scalar table and the spec
overloads included) and Numba's version, so an edit anywhere invalidates it; entries are
overwritten in place. A cache is machine code and pickles, so the directory is made mode 0700
and it and every file read must belong to this user, not be a link and not be writable by
others (:func:`trusted_dir`, :func:`_read_trusted`), else no disk cache, with one warning. It
never makes a call fail: every file carries a SHA-256 of its payload and a loaded kernel must
have the signature asked for; anything else is treated as absent (and removed), and a cache
that cannot be written is still read.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import stat
import warnings

import numba
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    IndexDataCacheFile,
    _CacheLocator,
)
from numba.core.runtime import rtsys
from numba.core.serialize import dumps

from ...core import config as _config
from ...core import sources
from . import hooks

#: The modules whose functions are cached (the built-in, user-op and reduction kernels) and the
#: activations user ops call; their jitops imports, transitively, make the kernels.
KERNEL_MODULES = ("jitops.cpu.kernels.binary", "jitops.cpu.kernels.nary",
                  "jitops.cpu.repeat.fastcall", "jitops.cpu.kernels.reduce", "jitops.act")
_stamp: str | None = None


def stamped_files(kernel_modules: tuple[str, ...] = KERNEL_MODULES) -> list[str]:
    """The source files a cached kernel of ``kernel_modules`` depends on (read from the
    imports, not listed)."""
    modules = sorted({m for k in kernel_modules for m in sources.closure(k)})
    return [sources.module_file(m) for m in modules]


def source_stamp() -> str:
    global _stamp
    if _stamp is None:
        _stamp = memoized_stamp("source-stamp", numba.__version__, KERNEL_MODULES)
    return _stamp


def content_stamp(extra: str, paths) -> str:
    """SHA-256 (hex) of ``extra`` and the contents of the files ``paths``."""
    h = hashlib.sha256(extra.encode())
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _package_files_key(extra: str) -> str:
    """A key that changes whenever any source file of the package may have: each ``.py``
    file's path, size, modification time (ns) and inode -- what Python's bytecode cache and
    Numba's own cache trust a source by -- and ``extra`` (versions)."""
    h = hashlib.sha256(extra.encode())
    for dirpath, dirnames, filenames in os.walk(sources.ROOT):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                st = os.stat(path)
                h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()


def _is_digest(v: str) -> bool:
    return len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def memoized_stamp(name: str, extra: str, kernel_modules: tuple[str, ...]) -> str:
    """The stamp of the kernels of ``kernel_modules`` (:func:`content_stamp` of ``extra`` and
    :func:`stamped_files`), remembered in the cache directory against
    :func:`_package_files_key`, since finding those sources reads the import graph (15 ms of an
    import). Any edit, reinstall or version change gives another key; a missing, damaged or
    foreign memo is recomputed, never an error; one file per installed copy of jitops.
    """
    try:
        key = _package_files_key(extra)
    except OSError:  # a source file vanished while we looked: no memo this time
        return content_stamp(extra, stamped_files(kernel_modules))
    where = hashlib.sha256(sources.ROOT.encode()).hexdigest()[:16]
    if not trusted_dir(_config.cache_dir()):
        return content_stamp(extra, stamped_files(kernel_modules))
    path = os.path.join(_config.cache_dir(), f"{name}-{where}")
    try:
        k, v = _read_trusted(path)[:200].decode("ascii").split()
        if k == key and _is_digest(v):
            return v
    except Exception:  # missing, unreadable, garbage, a directory: recompute
        pass
    v = content_stamp(extra, stamped_files(kernel_modules))
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{key} {v}\n")
        os.replace(tmp, path)  # readers see the old memo or the new one, never half of one
    except BaseException as e:  # read-only, full, or an interrupt: no temporary file left
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if not isinstance(e, OSError):
            raise
    return v


class Untrusted(OSError):
    """A cache directory or file that others could have written."""


def _why_untrusted(st: os.stat_result, want_dir: bool) -> str | None:
    """Why an object with status ``st`` (of ``lstat``/``fstat``) cannot be trusted."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"group or others may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


_warned: set[str] = set()


def trusted_dir(path: str) -> bool:
    """Whether cache directory ``path`` may be read and written: made here (mode 0700) where
    missing, else checked (:func:`_why_untrusted`). False, with one warning per directory,
    where it cannot be trusted; also False where it is missing and cannot be made."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:  # cannot be made (read-only, a file in the way): nothing to read either
        return False
    try:
        why = _why_untrusted(os.lstat(path), want_dir=True)
    except OSError:
        return False
    if why is not None:
        if path not in _warned:
            _warned.add(path)
            warnings.warn(f"jitops: not using the kernel cache directory {path}: {why}; "
                          "whoever can write it could run code in this process. Kernels are "
                          "compiled in memory instead (set JITOPS_CACHE_DIR to a directory "
                          "of your own, or JITOPS_CACHE=0).", RuntimeWarning, stacklevel=3)
        return False
    return True


def _read_trusted(path: str) -> bytes:
    """The contents of cache file ``path``, opened without following a link and checked
    (:func:`_why_untrusted`) on the open descriptor; :class:`Untrusted` where it fails."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        why = _why_untrusted(os.fstat(fd), want_dir=False)
        if why is not None:
            raise Untrusted(f"{path}: {why}")
        return f.read()


class LocatorMixin:
    """jitops' cache directory and source stamp for a Numba cache locator (the CPU's below,
    and the CUDA one of jitops.cuda.kernels, whose numba-cuda base class is another)."""

    subdir = ""

    @staticmethod
    def stamp() -> str:
        return source_stamp()

    def __init__(self, py_func, py_file):
        self._lineno = py_func.__code__.co_firstlineno
        self._path = os.path.join(_config.cache_dir(), self.subdir) if self.subdir \
            else _config.cache_dir()

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return self.stamp()

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        self = cls(py_func, py_file)
        path = self.get_cache_path()
        root = _config.cache_dir()
        if not trusted_dir(root) or (path != root and not trusted_dir(path)):
            return None  # others could write it, or it is missing and cannot be made
        try:
            self.ensure_cache_path()
        except OSError:
            # not writable (read-only, full disk): still read what is there, if anything
            if os.path.isdir(path) and os.access(path, os.R_OK | os.X_OK):
                return self
            return None  # nothing to read either: run uncached rather than fail
        return self


class _JitopsLocator(LocatorMixin, _CacheLocator):
    pass


class _JitopsCacheImpl(CompileResultCacheImpl):
    _locator_classes = [_JitopsLocator]


_MAGIC = b"jitops1\n"
_HEAD = len(_MAGIC) + 32  # magic + SHA-256 of the payload


class _Damaged(Exception):
    """A cache file that does not verify."""


def _discard(path: str) -> None:
    """Remove a damaged cache file so the next save writes it afresh (never a directory)."""
    try:
        if os.path.isfile(path) or os.path.islink(path):
            os.unlink(path)
    except OSError:
        pass  # read-only cache: leave it, it is ignored anyway


class _CheckedCacheFile(IndexDataCacheFile):
    """Numba's index and data files, each payload prefixed by a magic and its SHA-256."""

    def _dump(self, obj) -> bytes:
        payload = dumps(obj)
        return _MAGIC + hashlib.sha256(payload).digest() + payload

    @staticmethod
    def _verified(blob: bytes):
        if blob[: len(_MAGIC)] != _MAGIC or \
                hashlib.sha256(blob[_HEAD:]).digest() != blob[len(_MAGIC):_HEAD]:
            raise _Damaged
        return pickle.loads(blob[_HEAD:])

    def _load_index(self) -> dict:
        try:
            f = io.BytesIO(_read_trusted(self._index_path))
            version = pickle.load(f)
            data = f.read()
        except FileNotFoundError:
            return {}
        except Exception:  # unreadable, truncated, garbage, a directory
            _discard(self._index_path)
            return {}
        if version != self._version:
            return {}  # another Numba's index: it rewrites it the same way
        try:
            stamp, overloads = self._verified(data)
            if not isinstance(overloads, dict):
                raise _Damaged
        except Exception:
            _discard(self._index_path)
            return {}
        return overloads if stamp == self._source_stamp else {}

    def _load_data(self, name: str):
        path = self._data_path(name)
        try:
            data = _read_trusted(path)  # OSError: treated as a missing entry by load()
        except Untrusted:
            _discard(path)
            raise
        try:
            return self._verified(data)
        except Exception:
            _discard(path)
            return None


class _JitopsCache(FunctionCache):
    """Numba's function cache that degrades to compiling, never to an error."""

    _impl_class = _JitopsCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _CheckedCacheFile(cache_path=self._cache_path,
                                             filename_base=self._impl.filename_base,
                                             source_stamp=self._impl.locator.get_source_stamp())

    def load_overload(self, sig, target_context):
        try:
            # Numba refreshes the target context before every cache load: it imports and
            # installs every typing and lowering registry (0.1 s, most of a cached first
            # call), which only compiling needs -- and a compile refreshes anyway. Loading
            # machine code needs only the symbols it calls, registered here.
            _light_symbols(target_context)
            with self._guard_against_spurious_io_errors():
                cres = self._load_overload(sig, target_context)
        except Exception:  # anything a damaged entry can raise while being rebuilt
            return None
        if cres is not None and tuple(cres.signature.args) != tuple(sig):
            return None  # an entry written for another signature: never run it
        return cres

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception:  # full disk, read-only or vanished directory: stay uncached
            pass


def indexed_signatures(dispatcher) -> list[tuple]:
    """The signatures a dispatcher's on-disk index holds (verified, for this Numba and these
    jitops sources; empty when caching is off or nothing was saved)."""
    cache = getattr(dispatcher, "_cache", None)
    index = getattr(cache, "_cache_file", None)
    if index is None:
        return []
    try:
        return [key[0] for key in index._load_index()]
    except Exception:  # unreadable: as good as empty
        return []


def location(dispatcher) -> str | None:
    """The directory a dispatcher's cache files go to (None when caching is off)."""
    cache = getattr(dispatcher, "_cache", None)
    return getattr(cache, "_cache_path", None)


def _light_symbols(target_context) -> None:
    """Register every symbol compiled code can call, short of a full registry refresh: Numba's C
    helpers, math functions and Python objects, the runtime, the parallel backend and CPython's
    hash secret (``numba.cpython.hashing``). LLVM aborts on a missing symbol, so a test loads
    every kind of kernel this way (tests/test_cache_light_load.py).
    """
    rtsys.initialize(target_context)
    import numba.cpython.hashing  # noqa: F401  (the hash-secret symbols)


def enable(dispatcher) -> bool:
    """Attach the jitops cache to a module-level dispatcher. Returns whether it is on.

    Entries load without refreshing Numba's registries (:func:`_light_symbols` registers what
    the loaded code calls).
    """
    if not _config.cache_enabled() or not hooks.ok("numba_cache"):
        return False
    try:
        dispatcher._cache = _JitopsCache(dispatcher.py_func)
    except RuntimeError:  # no writable location
        return False
    return True
