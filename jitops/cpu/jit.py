"""How jitops' CPU functions are compiled: entry points Python calls, and inner functions.

Numba gives every ``@njit`` function a CPython wrapper (unboxing, boxing, error translation)
and a C-callable wrapper, each optimised and turned into machine code with the function, in
every library, helpers included. jitops' helpers and tasks are only ever called by other
compiled code (tasks through their address), so they are compiled without either: measured,
0.3-0.4 s less of the first call with an empty cache (most of it LLVM). Such a function has no
code Python could call, so :func:`inner` also makes a call from Python a TypeError, where
Numba would jump to a null address.
"""

from __future__ import annotations

from numba.core.registry import CPUDispatcher

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
