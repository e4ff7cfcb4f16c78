"""Numba's typing and lowering registries, loaded lightly while jitops compiles its own code.

Numba's first target refresh in a process installs every registry it has (linear algebra,
random, typed containers, ...; 0.3-0.6 s) for code no kernel calls. While jitops compiles,
:func:`light` holds Numba's compiler lock and gives the CPU target's two contexts a refresh
that installs only what the kernels use, as instance attributes removed before the lock is
released: Numba's classes never change, and the next compile outside jitops runs the full
refresh. A compile that fails under the light set (a user op calling ``np.exp``) is retried
under the full one (:func:`compile_with`); with ``JITOPS_STRICT_REGISTRIES=1`` (CI) such a
retry of a built-in kernel is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from types import MethodType
from typing import TypeVar

from numba.core import event
from numba.core.registry import cpu_target

from ...core.config import env_flag
from . import hooks, lifecycle
from .jit import LazyLibrary

#: Compiles retried under Numba's full refresh (see the module text).
FALLBACKS = 0
_STRICT = env_flag("JITOPS_STRICT_REGISTRIES", False)
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
    """Compile under the light registries (re-entrant; holds Numba's compiler lock, with
    signals held back and the cyclic collector paused: :mod:`jitops.cpu.compile.lifecycle`)."""
    global _active
    with lifecycle.compiler_lock(), lifecycle.signals_held(), lifecycle.collector_paused():
        if _active:
            yield
            return
        target, typing = cpu_target.target_context, cpu_target.typing_context
        if hooks.ok("registries"):
            target.load_additional_registries = MethodType(_light_target, target)
            typing.load_additional_registries = MethodType(_light_typing, typing)
        if hooks.ok("codegen"):  # machine code only where asked for (jitops.cpu.compile.jit)
            target.codegen()._library_class = LazyLibrary
        _active = True
        try:
            yield
        finally:
            _unset()


def _unset() -> None:
    """Back to Numba's own registries and libraries."""
    global _active
    _active = False
    target, typing = cpu_target.target_context, cpu_target.typing_context
    for obj, name in ((target, "load_additional_registries"),
                      (typing, "load_additional_registries"),
                      (target.codegen(), "_library_class")):
        if name in vars(obj):
            delattr(obj, name)


@lifecycle.at_fork_in_child
def _after_fork_in_child() -> None:
    # a light compile of a thread the child does not have (a fork by C code) never ends
    if _active and not lifecycle.compile_in_progress():
        _unset()


def compile_with(compile_fn: Callable[[], T], builtin: bool = True) -> T:
    """``compile_fn()`` under the light registries, retried under Numba's full refresh if it
    fails there (a ``builtin`` kernel's retry raises instead under
    ``JITOPS_STRICT_REGISTRIES=1``)."""
    global FALLBACKS
    lifecycle.compiler_lock()  # a child of a fork by C code: _active may be another thread's
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
                               f"registries (jitops.cpu.compile.registries): {e}") from e
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
