"""How jitops' CPU functions are compiled: entry points Python calls, and inner functions.

Numba gives every ``@njit`` function a CPython wrapper (unboxing, boxing, error translation)
and a C-callable wrapper, each optimised and turned into machine code with the function, in
every library, helpers included. jitops' helpers and tasks are only ever called by other
compiled code (tasks through their address), so they are compiled without either: measured,
0.3-0.4 s less of the first call with an empty cache (most of it LLVM). Such a function has no
code Python could call, so :func:`inner` also makes a call from Python a TypeError, where
Numba would jump to a null address.

Numba links a callee's optimised IR into its caller and optimises the caller's whole module
again (a module pass over code that has had one). A thin wrapper whose only work is a call
(the cached user-op task, jitops.cpu.nary) skips that: :func:`wrapper` compiles it with a
library that links its callees as they are, 0.15 s of a new user op's 1.6 s here.
"""

from __future__ import annotations

from numba.core import codegen
from numba.core.compiler import Compiler, DefaultPassBuilder
from numba.core.compiler_machinery import register_pass
from numba.core.registry import CPUDispatcher
from numba.core.typed_passes import NativeLowering

#: Called only by compiled code: helpers, scalar-table functions, the tasks.
INNER = {"nogil": True, "error_model": "numpy", "no_cpython_wrapper": True,
         "no_cfunc_wrapper": True}
#: Called from Python: the drivers, the pool's worker and wake-up.
ENTRY = {"nogil": True, "error_model": "numpy", "no_cfunc_wrapper": True}


class InnerDispatcher(CPUDispatcher):
    """A dispatcher compiled with :data:`INNER`: typed, compiled and cached as usual, called by
    compiled code (or through a compiled address), never from Python."""

    def __call__(self, *args, **kwargs):
        raise TypeError(f"jitops: {self.py_func.__qualname__} is compiled without a Python "
                        f"entry point; it runs only inside compiled code")


def inner(fn):
    """``@njit(**INNER)`` as an :class:`InnerDispatcher` (``@inner`` or ``inner(fn)``)."""
    disp = InnerDispatcher(py_func=fn, locals={}, targetoptions={"nopython": True, **INNER})
    disp.__doc__, disp.__name__ = fn.__doc__, fn.__name__
    return disp


class _LinkedAsIsLibrary(codegen.JITCodeLibrary):
    """A library whose final module is not optimised again after linking: its own functions
    have had Numba's function passes, its callees' libraries their full optimisation."""

    def _optimize_final_module(self):
        pass


@register_pass(mutates_CFG=True, analysis_only=False)
class _LinkedAsIsLowering(NativeLowering):
    """Numba's lowering into a :class:`_LinkedAsIsLibrary`."""

    _name = "jitops_linked_as_is_lowering"

    def run_pass(self, state):
        if state.library is None:
            state.library = _LinkedAsIsLibrary(state.targetctx.codegen(),
                                               state.func_id.func_qualname)
            state.library.enable_object_caching()  # cacheable, as Numba's own lowering does
        return super().run_pass(state)


class _WrapperCompiler(Compiler):
    """Numba's nopython pipeline, lowering into a :class:`_LinkedAsIsLibrary`."""

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.passes = [(_LinkedAsIsLowering if p is NativeLowering else p, d) for p, d in pm.passes]
        pm.finalize()
        return [pm]


def wrapper(fn):
    """:func:`inner` for a function whose work is all in the functions it calls: their
    optimised code is linked in as it is, not optimised again."""
    disp = InnerDispatcher(py_func=fn, locals={}, targetoptions={"nopython": True, **INNER},
                           pipeline_class=_WrapperCompiler)
    disp.__doc__, disp.__name__ = fn.__doc__, fn.__name__
    return disp
