"""How jitops' CPU functions are compiled: entry points Python calls, and inner functions.

Helpers and tasks are only called by compiled code (tasks through their address), so
:func:`inner` compiles them without Numba's CPython and C wrappers (0.3-0.4 s of the first
call on an empty cache) and makes a call from Python a TypeError. :func:`wrapper` links a
thin wrapper's callees as they are instead of optimising the whole module again (the cached
user-op task), and :func:`driver` compiles the drivers at ``-O1`` with machine code only
where asked for (the ``codegen`` hook, jitops.cpu.compile.hooks).
"""

from __future__ import annotations

import weakref

from numba.core import codegen
from numba.core.compiler import Compiler, DefaultPassBuilder
from numba.core.compiler_machinery import register_pass
from numba.core.registry import CPUDispatcher
from numba.core.typed_passes import NativeLowering

from . import hooks, lifecycle

#: Called only by compiled code: helpers, scalar-table functions, the tasks.
INNER = {"nogil": True, "error_model": "numpy",
         **hooks.wrapperless(no_cpython_wrapper=True, no_cfunc_wrapper=True)}
#: Called from Python: the drivers, the pool's worker and wake-up.
ENTRY = {"nogil": True, "error_model": "numpy", **hooks.wrapperless(no_cfunc_wrapper=True)}


class InnerDispatcher(CPUDispatcher):
    """A dispatcher compiled with :data:`INNER`: typed, compiled and cached as usual, called by
    compiled code (or through a compiled address), never from Python."""

    def __call__(self, *args, **kwargs):
        raise TypeError(f"jitops: {self.py_func.__qualname__} is compiled without a Python "
                        f"entry point; it runs only inside compiled code")


def inner(fn=None, **options):
    """``@njit(**INNER)`` as an :class:`InnerDispatcher` (``@inner``, ``inner(fn)``, or
    ``@inner(fastmath=...)`` with more of Numba's options)."""
    if fn is None:
        return lambda f: inner(f, **options)
    disp = InnerDispatcher(py_func=fn, locals={},
                           targetoptions={"nopython": True, **INNER, **options})
    disp.__doc__, disp.__name__ = fn.__doc__, fn.__name__
    return disp


class LazyLibrary(codegen.JITCodeLibrary):
    """A library turned into machine code only when something asks for its code: finalised as Numba
    does, but given to the JIT engine on the first request for an address or object code. Tasks,
    drivers and functions with a Python wrapper get theirs at once; helpers, whose IR their
    callers link, never. A library loaded from the disk cache goes to the engine at once.
    """

    _lazy = False  # finalised here, not yet in the engine
    _pending_envs: list | None = None

    def finalize(self):
        self._lazy = True
        super().finalize()

    def _optimize_functions(self, ll_module):
        # Numba runs LLVM's function pipeline on every module as it is added, and again in
        # the module pipelines at finalize (after inlining): the first round only costs
        # time (0.08 s of a new user op's task; the same code and speed without it).
        ll_module.data_layout = self._codegen._data_layout

    def _finalize_final_module(self):
        if not self._lazy:
            return super()._finalize_final_module()
        # CPUCodeLibrary._finalize_final_module, less handing the module to the engine
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        setattr(self._final_module, "_CPUCodeLibrary__library", weakref.proxy(self))
        self._finalized = True

    def _materialize(self) -> None:
        """Hand the final module to the engine and generate its machine code (once).

        Under Numba's compiler lock: the engine is shared by every compile and not
        thread-safe, and an address may be asked for outside a compile (a task's, with the
        disk cache off, where saving it would otherwise have made its code in the compile)."""
        with lifecycle.compiler_lock(), lifecycle.signals_held(), lifecycle.collector_paused():
            if not self._lazy:
                return
            self._codegen._add_module(self._final_module)
            self._finalize_specific()
            self._lazy = False
            for name, env in self._pending_envs or ():
                self._codegen.set_env(name, env)
            self._pending_envs = None

    @property
    def codegen(self):
        # Numba sets a new function's environment pointer through its library's codegen, in
        # the engine: kept until this library's module is there
        return _DeferredEnv(self) if self._lazy else self._codegen

    def get_pointer_to_function(self, name):
        self._ensure_finalized()
        if self._lazy:
            try:
                fn = self._final_module.get_function(name)
            except NameError:
                return 0  # e.g. the Python wrapper of a function compiled without one
            if fn.is_declaration:
                return 0
            self._materialize()
        return super().get_pointer_to_function(name)

    def serialize_using_object_code(self):
        self._ensure_finalized()
        self._materialize()
        return super().serialize_using_object_code()


class _DeferredEnv:
    """A lazy library's codegen: ``set_env`` waits for the library's module to reach the
    engine; everything else is the codegen's."""

    def __init__(self, library: LazyLibrary) -> None:
        self._library = library

    def set_env(self, name, env) -> None:
        lib = self._library
        if lib._lazy:
            lib._pending_envs = [*(lib._pending_envs or ()), (name, env)]
        else:
            lib._codegen.set_env(name, env)

    def __getattr__(self, attr):
        return getattr(self._library._codegen, attr)


class _LinkedAsIsLibrary(codegen.JITCodeLibrary):
    """A library whose final module is not optimised again after linking: its own functions
    have had Numba's function passes, its callees' libraries their full optimisation."""

    def _optimize_final_module(self):
        pass


class _DriverLibrary(LazyLibrary):
    """A driver's library: its own functions get LLVM's function passes at ``-O1`` and its module
    none of Numba's two ``-O3`` module pipelines. A driver is straight-line checks and calls of
    tasks (or the pool's ``run_job``), each fully optimised in its own library and linked as it
    is; the module pipelines and their machine code were 0.2 s of the first call.
    """

    def _optimize_final_module(self):
        for fn in self._final_module.functions:
            # the driver and its Python wrapper; linked-in code is linkonce_odr
            if fn.is_declaration or fn.linkage.name != "external":
                continue
            fpm, pb = self._codegen._function_pass_manager(opt=1, loop_vectorize=False,
                                                           slp_vectorize=False)
            with self._recorded_timings.record(f"Function passes on {fn.name!r} (-O1)", pb):
                fpm.run(fn, pb)


def _lowering_into(library_class, name: str):
    """Numba's lowering pass, into a new ``library_class`` library."""

    class Lowering(NativeLowering):
        _name = name

        def run_pass(self, state):
            if state.library is None and hooks.ok("codegen"):  # else Numba's own library
                state.library = library_class(state.targetctx.codegen(),
                                              state.func_id.func_qualname)
                state.library.enable_object_caching()  # cacheable, as Numba's own lowering
            return super().run_pass(state)

    return register_pass(mutates_CFG=True, analysis_only=False)(Lowering)


def _compiler_with(lowering):
    """Numba's nopython pipeline with ``lowering`` in place of its own."""

    class PipelineCompiler(Compiler):
        def define_pipelines(self):
            pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
            pm.passes = [(lowering if p is NativeLowering else p, d) for p, d in pm.passes]
            pm.finalize()
            return [pm]

    return PipelineCompiler


_WrapperCompiler = _compiler_with(_lowering_into(_LinkedAsIsLibrary,
                                                 "jitops_linked_as_is_lowering"))
_DriverCompiler = _compiler_with(_lowering_into(_DriverLibrary, "jitops_driver_lowering"))


def wrapper(fn):
    """:func:`inner` for a function whose work is all in the functions it calls: their
    optimised code is linked in as it is, not optimised again."""
    disp = InnerDispatcher(py_func=fn, locals={}, targetoptions={"nopython": True, **INNER},
                           pipeline_class=_WrapperCompiler)
    disp.__doc__, disp.__name__ = fn.__doc__, fn.__name__
    return disp


def c_entry(fn):
    """:func:`driver`, but called from C, not from Python: compiled with Numba's C-callable
    wrapper (its address is the entry) and without a CPython wrapper."""
    opts = {**ENTRY, **hooks.wrapperless(no_cfunc_wrapper=False, no_cpython_wrapper=True)}
    return CPUDispatcher(py_func=fn, locals={}, targetoptions={"nopython": True, **opts},
                         pipeline_class=_DriverCompiler)


def driver(fn, c_callable: bool = False):
    """``@njit(**ENTRY)`` for a serial or pooled driver, optimised lightly
    (:class:`_DriverLibrary`); ``c_callable``: with Numba's C-callable wrapper too (a compiled
    entry calls it through its address)."""
    opts = {**ENTRY, **hooks.wrapperless(no_cfunc_wrapper=False)} if c_callable else ENTRY
    return CPUDispatcher(py_func=fn, locals={}, targetoptions={"nopython": True, **opts},
                         pipeline_class=_DriverCompiler)
