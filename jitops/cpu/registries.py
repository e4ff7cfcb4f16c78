"""Numba's typing and lowering registries, loaded lightly while jitops compiles its own code.

Numba refreshes its CPU target before every compile. The first refresh in a process imports
and installs every registry Numba has -- linear algebra, random generators, typed containers,
datetimes, polynomials, jitclass, cffi -- 0.3-0.6 s of the first call on an empty cache here,
for code no jitops kernel calls. While jitops compiles, :func:`light` holds Numba's compiler
lock and gives the CPU target's two contexts a refresh that installs only what the kernels
use (numbers, the builtins, tuples, ranges, ``math`` and ``cmath``), as *instance* attributes
removed before the lock is released: no other compile can see them, and Numba's own classes
are never changed.

Nothing is lost for anyone else: registries install incrementally, so the next compile
outside jitops (a user's ``@njit`` function) runs Numba's full refresh and installs whatever
the light one left out. And a compile can only get slower from this, never fail: one that
fails under the light registries (a user op's function calling, say, ``np.exp``, whose
implementation lives in a registry left out) is retried under the full refresh
(:func:`compile_with`), which then raises Numba's own error if the code really does not
compile. :data:`FALLBACKS` counts such retries; with ``JITOPS_STRICT_REGISTRIES=1`` (CI) a
retry of a built-in kernel is an error instead, so a kernel that needs more than the light
set is caught, not silently slowed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from types import MethodType
from typing import TypeVar

from numba.core import event
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

from .jit import LazyLibrary

#: Compiles retried under Numba's full refresh (see the module text).
FALLBACKS = 0
_STRICT = os.environ.get("JITOPS_STRICT_REGISTRIES", "") == "1"
_active = False

T = TypeVar("T")


def _light_target(self) -> None:
    """The lowering registries jitops' kernels use (a subset of
    ``CPUContext.load_additional_registries``)."""
    from numba.core.runtime import rtsys

    rtsys.initialize(self)
    # implementations that register themselves into Numba's builtin registry on import
    from numba.core import optional  # noqa: F401
    from numba.cpython import (  # noqa: F401
        builtins,
        cmathimpl,
        enumimpl,
        hashing,
        iterators,
        mathimpl,
        numbers,
        rangeobj,
        slicing,
        tupleobj,
    )

    self.install_registry(cmathimpl.registry)
    self.install_registry(mathimpl.registry)


def _light_typing(self) -> None:
    """The typing registries jitops' kernels use (a subset of the typing context's
    ``load_additional_registries``)."""
    from numba.core.typing import cmathdecl, mathdecl

    self.install_registry(cmathdecl.registry)
    self.install_registry(mathdecl.registry)


@contextmanager
def light():
    """Compile under the light registries (re-entrant; holds Numba's compiler lock)."""
    global _active
    with global_compiler_lock:
        if _active:
            yield
            return
        target, typing = cpu_target.target_context, cpu_target.typing_context
        target.load_additional_registries = MethodType(_light_target, target)
        typing.load_additional_registries = MethodType(_light_typing, typing)
        cg = target.codegen()
        cg._library_class = LazyLibrary  # machine code only where asked for (jitops.cpu.jit)
        _active = True
        try:
            yield
        finally:
            _active = False
            del target.load_additional_registries
            del typing.load_additional_registries
            del cg._library_class


def compile_with(compile_fn: Callable[[], T], builtin: bool = True) -> T:
    """``compile_fn()`` under the light registries, retried under Numba's full refresh if it
    fails there (a ``builtin`` kernel's retry raises instead under
    ``JITOPS_STRICT_REGISTRIES=1``)."""
    global FALLBACKS
    if _active:  # already inside a light compile: its caller retries the whole of it
        return compile_fn()
    touched = _Compiled()
    try:
        with light(), event.install_listener("numba:compile", touched):
            return compile_fn()
    except Exception as e:  # whatever a missing registry raises, from typing or lowering
        FALLBACKS += 1
        if builtin and _STRICT:
            raise RuntimeError("jitops: a built-in kernel did not compile under the light "
                               f"registries (jitops.cpu.registries): {e}") from e
        # Numba remembers a signature's typing error and re-raises it without compiling
        # again: forget those made under the light registries
        for d in touched.dispatchers:
            failed = getattr(getattr(d, "_compiler", None), "_failed_cache", None)
            if failed is not None:
                failed.clear()
        return compile_fn()


class _Compiled(event.Listener):
    """Every dispatcher that starts compiling while installed (Numba's compile events)."""

    def __init__(self) -> None:
        self.dispatchers: list = []

    def on_start(self, ev) -> None:
        self.dispatchers.append(ev.data["dispatcher"])

    def on_end(self, ev) -> None:
        pass
