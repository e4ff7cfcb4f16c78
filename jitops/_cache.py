"""Numba's on-disk cache, pointed at a user-writable directory and keyed on jitops' sources.

Numba keys a cached kernel on its own source file only; jitops' kernels also depend on the
scalar table and the spec overloads in other files. The locator below stamps every entry with
a hash of all of them (and Numba's version), so editing any of them invalidates the cache
instead of silently loading stale machine code. Entries are overwritten in place, so repeated
runs do not grow the cache.
"""

from __future__ import annotations

import hashlib
import os

import numba
from numba.core.caching import CompileResultCacheImpl, FunctionCache, _CacheLocator

from . import _config

_SOURCES = ("_scalar.py", "_half.py", "_spec.py", "_cpu.py", "_cache.py")
_stamp: str | None = None


def source_stamp() -> str:
    global _stamp
    if _stamp is None:
        h = hashlib.sha256(numba.__version__.encode())
        here = os.path.dirname(os.path.abspath(__file__))
        for name in _SOURCES:
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
        _stamp = h.hexdigest()
    return _stamp


class _JitopsLocator(_CacheLocator):
    def __init__(self, py_func, py_file):
        self._lineno = py_func.__code__.co_firstlineno
        self._path = _config.cache_dir()

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return source_stamp()

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None  # not writable: run uncached rather than fail
        return self


class _JitopsCacheImpl(CompileResultCacheImpl):
    _locator_classes = [_JitopsLocator]


class _JitopsCache(FunctionCache):
    _impl_class = _JitopsCacheImpl


def location(dispatcher) -> str | None:
    """The directory a dispatcher's cache files go to (None when caching is off)."""
    cache = getattr(dispatcher, "_cache", None)
    return getattr(cache, "_cache_path", None)


def enable(dispatcher) -> bool:
    """Attach the jitops cache to a module-level dispatcher. Returns whether it is on."""
    if not _config.cache_enabled():
        return False
    try:
        dispatcher._cache = _JitopsCache(dispatcher.py_func)
    except RuntimeError:  # no writable location
        return False
    return True
