"""Every private or undocumented interface of another library jitops relies on, fenced here.

Each hook is checked once per process, on first use, for being there and behaving as jitops
expects; where it is not (another Numba, PyTorch or platform), or ``JITOPS_DISABLE_HOOKS``
names it (a comma-separated list, or ``all``; the tests force each off this way), jitops
takes the public path beside it, warns once, and stays correct. :data:`WHERE` names the
modules that reach each hook's interfaces, and no other module reaches one
(tests/test_layout.py). What each speed hook buys is measured with it on and off in the
benchmark's *Hooks* table (jitops.bench.hooks_bench), on the machine it runs on.

====================  ==========================================  =================================
hook                  relies on, and what it buys                 without it
====================  ==========================================  =================================
``codegen``           Numba's ``JITCodeLibrary``/``CPUCodegen``    Numba's own libraries: every
                      internals (``_optimize_final_module``,       library optimised and turned
                      ``_function_pass_manager``, ...): machine     into machine code as Numba does
                      code only where asked for, drivers at
                      ``-O1``, thin wrappers linked as they are:
                      the first call on an empty cache
``registries``        the CPU target's registry refresh           Numba's full refresh
                      (``load_additional_registries``, the
                      ``numba.core.typing`` declarations): the
                      first call on an empty cache
``compiler_lock``     the RLock inside Numba's compiler lock      Numba's lock object: a compile
                      (``_CompilerLock._lock``): a C-level          entered through its Python
                      ``with``, taken around ``os.fork``            methods, no fork protection
``llvm_lock``         llvmlite's LLVM lock (``ffi.lib._lock``),    no fork protection for it
                      taken around ``os.fork`` (children of a
                      fork during compiles hung without it)
``wrapperless``       Numba's undocumented ``no_cpython_wrapper``  both wrappers compiled for every
                      and ``no_cfunc_wrapper`` options: helpers    helper and task
                      and tasks compiled without wrappers: the
                      first call on an empty cache
``numba_layer``       ``numba.np.ufunc.parallel._is_initialized``  Numba's layer taken as started
                      (whether Numba's layer was started by        by someone else: serial kernels
                      someone else): parallel kernels on its       on its ``omp`` layer
                      ``omp`` layer where that is safe
``futex_pool``        libc's ``syscall`` and Linux futexes: the    Numba's threading layer (TBB
                      pool: a call after a few ms idle             first, as Numba chooses)
``gomp_team``         GNU OpenMP's ``GOMP_parallel`` in PyTorch's  jobs on the pool's own workers
                      ``libgomp``, found through ``/proc``: a
                      call right after a PyTorch op
``proc``              ``/proc/self/maps`` and ``/proc/self/task``  OpenMP runtimes unknown: on
                      (OpenMP runtimes loaded, team threads)       Numba's ``omp`` layer, serial
``refcounts``         ``sys.getrefcount`` exact for a buffer       no recycling: new pages for
                      (recycled result buffers): a large new       every large result
                      result
``ndarray_header``    CPython's and NumPy's ``PyArrayObject``      data addresses given by Python;
                      layout (data, flags, shape, strides,         repeats found by their geometry
                      dtype read by the kernels; the data word     (the keyed memo), no compiled
                      read by ``data_address``): a repeated        entry; reductions read
                      small call, a small reduction                ``__array_interface__``
``numba_cache``       Numba's cache classes (``_CacheLocator``,    no disk cache: every process
                      ``IndexDataCacheFile``, ...): a new          compiles
                      process's first call
``fastcall``          CPython's C API through ``ctypes.pythonapi`` repeats call the driver through
                      (``PyCFunction_NewEx``, ``METH_FASTCALL``),  Numba's CPython wrapper, new
                      NumPy's C API table (``PyArray_NewFromDescr``) results made in Python, no
                      and an ndarray's data at offset 16: a        shape classes
                      repeated small call, and a new shape of a
                      shape class (jitops.cpu.repeat.shapeclass)
====================  ==========================================  =================================

The CUDA backend's hooks live beside their code, with the same switch and one warning each:
``nvvm_fma`` (jitops.cuda.rounding), ``cuda_launch`` (jitops.cuda.repeat) and ``cuda_cache``
(numba-cuda's cache classes, jitops.cuda.kernels). Under the CUDA simulator only (the tests),
jitops.cuda.arrays reads a simulator array's host ndarray (``_ary``).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import warnings
from collections.abc import Callable

#: Why each hook is off (None: on), once looked at.
_STATE: dict[str, str | None] = {}
_CHECKS: dict[str, tuple[Callable[[], bool], str]] = {}
#: The modules that reach each hook's interfaces; no other module reaches a private interface
#: of another library (tests/test_layout.py). The CUDA backend's hooks keep their own state
#: (:func:`check_once`); ``cudasim`` is the simulator's host array (tests only, no switch).
WHERE: dict[str, tuple[str, ...]] = {
    "nvvm_fma": ("jitops.cuda.rounding",), "cuda_launch": ("jitops.cuda.repeat",),
    "cuda_cache": ("jitops.cuda.kernels",),
    "cudasim": ("jitops.cuda.arrays", "jitops.cuda.backend"),
}


def disabled() -> set[str]:
    """The hooks JITOPS_DISABLE_HOOKS names (``all`` for every one; the CUDA backend's too)."""
    names = {n.strip() for n in os.environ.get("JITOPS_DISABLE_HOOKS", "").split(",")}
    return {n for n in names if n}


def turned_off(name: str) -> str | None:
    """Why hook ``name`` is off by the user's word (JITOPS_DISABLE_HOOKS), else None."""
    off = disabled()
    return "turned off by JITOPS_DISABLE_HOOKS" if name in off or "all" in off else None


def register(name: str, fallback: str, where: tuple[str, ...]):
    """Register a hook's check (``@register(name, fallback, where)``): the ones below, and a
    module that holds a hook's code and would otherwise be imported here
    (jitops.cpu.repeat.fastcall);
    ``where``: the modules reaching its interfaces."""
    def add(check: Callable[[], bool]) -> Callable[[], bool]:
        _CHECKS[name] = (check, fallback)
        WHERE[name] = where
        return check
    return add


def ok(name: str) -> bool:
    """Whether hook ``name`` is usable in this process (checked once; a failed check warns
    once, naming the hook and the public path taken instead)."""
    if name in _STATE:
        return _STATE[name] is None
    check = _CHECKS[name][0]
    why = turned_off(name)
    if why is None:
        try:
            why = None if check() else "not as jitops expects here"
        except Exception as e:  # a missing attribute, a changed signature, no /proc ...
            why = f"{type(e).__name__}: {e}"
    _STATE[name] = why
    if why is not None:
        _warn_off(name, why)
    return why is None


def fail(name: str, why: str) -> None:
    """Turn hook ``name`` off now: a check made later than its first use (on a real call)
    found it not working. Warns once, as :func:`ok` does."""
    if _STATE.get(name, None) is not None:
        return
    _STATE[name] = why
    _warn_off(name, why)


def _warn_off(name: str, why: str) -> None:
    """The one warning a hook turned off gives: why, and the public path taken instead."""
    warnings.warn(f"jitops: {name} is unavailable ({why}); using {_CHECKS[name][1]} instead "
                  f"(slower where it matters, never wrong)", RuntimeWarning, stacklevel=4)


def check_once(state: dict, name: str, why_not: Callable[[], str | None], after: str,
               warn: bool = True, stacklevel: int = 3) -> bool:
    """A hook that keeps its own state (the CUDA backend's): unless JITOPS_DISABLE_HOOKS turns
    it off, ``why_not()`` is asked once per process (None: usable; an exception counts as its
    reason), and a hook found unusable warns once, ``after`` saying what happens instead.
    Whether the hook is usable."""
    if name not in state:
        why = turned_off(name)
        if why is None:
            try:
                why = why_not()
            except Exception as e:  # an import or attribute that moved
                why = f"{type(e).__name__}: {e}"
        state[name] = why
        if why is not None and warn:
            warnings.warn(f"jitops: {name} is unavailable ({why}); {after}", RuntimeWarning,
                          stacklevel=stacklevel)
    return state[name] is None


def status() -> dict[str, str | None]:
    """Every hook: None where it is used, else why not (checks the ones not yet looked at)."""
    for name in _CHECKS:
        ok(name)
    return dict(_STATE)


def names() -> list[str]:
    return list(_CHECKS)


# -- the checks ----------------------------------------------------------------------------------


@register("codegen", "Numba's own code libraries", ("jitops.cpu.compile.jit",))
def _check_codegen() -> bool:
    import inspect

    from numba.core import codegen

    lib, cg = codegen.JITCodeLibrary, codegen.JITCPUCodegen
    for attr in ("_optimize_final_module", "_optimize_functions", "_finalize_final_module",
                 "_finalize_dynamic_globals", "_verify_declare_only_symbols",
                 "_finalize_specific", "_ensure_finalized", "get_pointer_to_function",
                 "serialize_using_object_code", "enable_object_caching", "finalize"):
        if not callable(getattr(lib, attr, None)):
            return False
    for attr in ("_add_module", "set_env", "_function_pass_manager"):
        if not callable(getattr(cg, attr, None)):
            return False
    inspect.signature(cg._function_pass_manager).bind(None, opt=1, loop_vectorize=False,
                                                      slp_vectorize=False)
    inspect.signature(lib._finalize_final_module).bind(None)
    return True


@register("registries", "Numba's full registry refresh", ("jitops.cpu.compile.registries",))
def _check_registries() -> bool:
    from numba.core.registry import cpu_target

    target, typing = cpu_target.target_context, cpu_target.typing_context
    return (callable(getattr(target, "load_additional_registries", None))
            and callable(getattr(typing, "load_additional_registries", None))
            and callable(getattr(target, "install_registry", None))
            and hasattr(type(target.codegen()), "_library_class"))


def compiler_rlock():
    """The RLock inside Numba's compiler lock, or None where the hook is off."""
    if not ok("compiler_lock"):
        return None
    from numba.core.compiler_lock import global_compiler_lock

    return global_compiler_lock._lock


def _takes_its_rlock(holder) -> bool:
    """Whether ``holder`` (a lock object of Numba's or llvmlite's) keeps an RLock in
    ``_lock`` and its own ``with`` takes exactly that one."""
    lock = getattr(holder, "_lock", None)
    if not (hasattr(lock, "acquire") and hasattr(lock, "_is_owned")):
        return False
    with holder:
        return lock._is_owned()


@register("compiler_lock", "Numba's compiler lock object as it is",
          ("jitops.cpu.compile.lifecycle",))
def _check_compiler_lock() -> bool:
    from numba.core.compiler_lock import global_compiler_lock

    return _takes_its_rlock(global_compiler_lock)


def llvm_lock_holder():
    """llvmlite's lock object (its ``_lock`` the RLock), or None where the hook is off."""
    if not ok("llvm_lock"):
        return None
    from llvmlite.binding import ffi

    return ffi.lib._lock


@register("llvm_lock", "no lock taken around a fork for llvmlite",
          ("jitops.cpu.compile.lifecycle",))
def _check_llvm_lock() -> bool:
    from llvmlite.binding import ffi

    return _takes_its_rlock(getattr(ffi.lib, "_lock", None))


FUTEX_NR, YIELD_NR = {"x86_64": (202, 24), "aarch64": (98, 124), "ppc64le": (221, 158),
                      "s390x": (238, 158)}.get(platform.machine(), (None, None))


@register("wrapperless", "Numba's CPython and C wrappers compiled for every function",
          ("jitops.cpu.compile.jit", "jitops.cpu.threads.pool"))
def _check_wrapperless() -> bool:
    from numba.core.cpu import CPUTargetOptions

    return all(hasattr(CPUTargetOptions, o) for o in ("no_cpython_wrapper", "no_cfunc_wrapper"))


def wrapperless(**options: bool) -> dict[str, bool]:
    """Numba's ``no_cpython_wrapper``/``no_cfunc_wrapper`` jit options as given, where the
    hook is on; none (Numba's default: both wrappers) where it is off."""
    return options if ok("wrapperless") else {}


@register("numba_layer", "Numba's layer taken as started by someone else (serial on omp)",
          ("jitops.cpu.threads.parallel",))
def _check_numba_layer() -> bool:
    from numba.np.ufunc import parallel

    return isinstance(getattr(parallel, "_is_initialized", None), bool)


def _syscall_address() -> int:
    return ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value or 0


def libc_syscall() -> int:
    """Address of libc's ``syscall`` for the pool, or 0 where the hook is off."""
    return _syscall_address() if ok("futex_pool") else 0


@register("futex_pool", "Numba's threading layer", ("jitops.cpu.threads.pool",))
def _check_futex_pool() -> bool:
    return (sys.platform.startswith("linux") and FUTEX_NR is not None
            and sys.byteorder == "little" and bool(_syscall_address()))


@register("gomp_team", "the pool's own workers beside PyTorch", ("jitops.cpu.threads.omp",))
def _check_gomp_team() -> bool:
    if not (ok("futex_pool") and ok("proc")):
        raise RuntimeError("it needs the futex_pool and proc hooks")
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


@register("proc", "no knowledge of the OpenMP runtimes loaded (serial kernels on Numba's omp "
               "layer)", ("jitops.cpu.threads.parallel", "jitops.cpu.threads.omp"))
def _check_proc() -> bool:
    with open("/proc/self/maps") as f:
        f.readline()
    os.listdir("/proc/self/task")
    return True


@register("refcounts", "new memory for every large result", ("jitops.cpu.recycle",))
def _check_refcounts() -> bool:
    """Counts there to read, and not deferred (a free-threaded build biases them); that one
    more reference reads as one more is probed by jitops.cpu.recycle itself, with the very
    reads it recycles by."""
    if not hasattr(sys, "getrefcount"):
        return False
    gil = getattr(sys, "_is_gil_enabled", None)
    return gil is None or gil()


@register("ndarray_header", "data addresses given by Python, and repeats keyed by geometry",
          ("jitops.cpu.kernels.binary",))
def _check_ndarray_header() -> bool:
    return header_offsets() is not None


def _data_offset() -> int:
    """Offset of ``PyArrayObject.data`` from the object's address, or -1 if not CPython's
    (checked on a view, a transpose, an offset slice, empty and 0-d arrays)."""
    import numpy as np

    if platform.python_implementation() != "CPython":
        return -1
    off = object.__basicsize__
    base = np.arange(24.0).reshape(4, 6)
    for a in (base, base.T, base[1:, 2:], np.empty(0), np.zeros((), np.int8)):
        if ctypes.c_void_p.from_address(id(a) + off).value != a.__array_interface__["data"][0]:
            return -1
    return off


def _flags_offset(data: int) -> int:
    """Offset of ``PyArrayObject.flags`` (an int after data, nd, dimensions, strides, base and
    descr), or -1 where that layout is not verified on arrays whose flags differ."""
    import numpy as np

    off = data + 6 * 8
    base = np.arange(24.0).reshape(4, 6)
    ro = base[1:].view()
    ro.flags.writeable = False
    for a in (base, base.T, base[:, ::2], ro, np.empty(0), np.zeros((), np.int8)):
        if ctypes.c_int.from_address(id(a) + off).value != a.flags.num:
            return -1
    return off


def _type_shape_descr(data: int) -> tuple[int, int, int, int, int] | None:
    """Offsets of ``ob_type``, ``nd``, ``dimensions``, ``strides`` and ``descr``, or None where
    that layout is not verified on arrays of several ranks, layouts and dtypes."""
    import numpy as np

    word = ctypes.c_int64
    offs = (data - 8, data + 8, data + 16, data + 24, data + 40)
    t, nd, dims, strides, descr = offs
    base = np.arange(24.0).reshape(4, 6)
    for a in (base, base.T, base[1:, ::2], np.zeros((), np.int8), np.empty((2, 0, 3), "c8"),
              np.ones(5, ">i2")):
        if ctypes.c_void_p.from_address(id(a) + t).value != id(type(a)) \
                or ctypes.c_int.from_address(id(a) + nd).value != a.ndim \
                or ctypes.c_void_p.from_address(id(a) + descr).value != id(a.dtype):
            return None
        if a.ndim:
            pd = ctypes.c_void_p.from_address(id(a) + dims).value
            ps = ctypes.c_void_p.from_address(id(a) + strides).value
            if tuple((word * a.ndim).from_address(pd)) != a.shape \
                    or tuple((word * a.ndim).from_address(ps)) != a.strides:
                return None
    return offs


_HEADER: list = []


def header_offsets() -> tuple[int, int, tuple[int, int, int, int, int]] | None:
    """(data, flags, (type, nd, dims, strides, descr)) offsets in an ndarray object, all
    verified, or None (unverified, or the hook turned off)."""
    if not _HEADER:
        data = _data_offset()
        flags = _flags_offset(data) if data >= 0 else -1
        rest = _type_shape_descr(data) if flags >= 0 else None
        _HEADER.append(None if rest is None else (data, flags, rest))
    return _HEADER[0]


@register("numba_cache", "no disk cache (every process compiles)", ("jitops.cpu.compile.cache",))
def _check_numba_cache() -> bool:
    from numba.core import caching

    for name in ("_CacheLocator", "CompileResultCacheImpl", "IndexDataCacheFile",
                 "FunctionCache"):
        if not isinstance(getattr(caching, name, None), type):
            return False
    return (all(callable(getattr(caching.IndexDataCacheFile, m, None))
                for m in ("save", "load", "_load_index", "_load_data", "_dump", "_data_path"))
            and all(callable(getattr(caching.FunctionCache, m, None))
                    for m in ("load_overload", "save_overload", "_load_overload",
                              "_guard_against_spurious_io_errors")))
