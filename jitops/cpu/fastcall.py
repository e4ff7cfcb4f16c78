"""A repeated serial call's compiled entry: a CPython ``METH_FASTCALL`` function bound to one
launch, called with the operand objects themselves.

Python reaches a compiled driver through Numba's CPython wrapper: an argument tuple, five
integers unboxed and checked, the status boxed again, with three ``id()`` calls before it and
a new result made by ``np.empty`` -- 0.73 us for a repeated 8-element
``subtract(x, y, out=o)`` here and 0.95 us for ``subtract(x, y)``, against NumPy's 0.31 and
0.30 us. :func:`bind` instead makes a builtin function (``PyCFunction_NewEx``) whose code is
:func:`_repeat`, compiled once per process for every op and dtype (and kept in the disk
cache). It takes ``(out, x, y)``, or ``(x, y)`` and makes the result with NumPy's
``PyArray_NewFromDescr``; reads the task and the meta (with the header checks that make the
driver verify each object, :func:`jitops.cpu.kernels.header_checks`) from the int64 block it
is bound to; runs the serial driver (letting other threads run from
:data:`RELEASE_GIL_FROM` elements); and returns the status, or the result. Measured on
those calls: 0.24 and 0.31 us for the public function, the compiled entry 0.07 us of it.

Fenced as the ``fastcall`` hook (:mod:`jitops.cpu.hooks`): it relies on CPython's C API
through ``ctypes.pythonapi``, on NumPy's C API table, and on an ndarray's data pointer lying
at :data:`SELF_DATA_OFFSET` (compiled in; checked against the verified header layout); and
before any repeat relies on it, its first run is compared with Numba's wrapper on the first
serial call's own operands (:func:`verify`). Where any of that fails, repeats call the driver
through Numba's wrapper.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ..core.pipeline import byte_extent
from . import cache, hooks, kernels, pool, registries, shapeclass
from .jit import c_entry
from .spec import address_of, as_pointer

_I64 = types.int64

#: Where ``PyArrayObject.data`` lies in the block object :func:`_repeat` is bound to, compiled
#: into it (and into its disk-cached code): CPython's 16 on 64-bit builds with the GIL. The
#: hook is off where the verified layout says otherwise (jitops.cpu.kernels.DATA_OFFSET).
SELF_DATA_OFFSET = 16
#: The block's words (:func:`_block`): the task's and the meta's addresses; the C functions
#: called (``Py_IncRef``, ``Py_DecRef``, ``PyTuple_Pack``, ``PyErr_Clear``,
#: ``PyEval_SaveThread`` and ``PyEval_RestoreThread``, or 0 where the GIL is kept, NumPy's
#: ``PyArray_NewFromDescr``, or 0 where a new result is not made here); the new result's
#: type, dtype and rank; the thread pool's control block whose sleeping workers the entry
#: wakes before it computes, or 0 (jitops.dispatch: a parallel repeat run serially while
#: they sleep); the address of a shape class's words (jitops.cpu.shapeclass: the entry plans
#: each call itself, and ``B_META`` is the planner's meta it starts from), or 0; the Python
#: int objects :func:`_repeat` returns, one per status 0 .. N_STATUS - 1; the new result's
#: shape (none for a class: the input of the result's shape gives it).
(B_TASK, B_META, B_INCREF, B_DECREF, B_PACK, B_CLEAR, B_SAVE, B_RESTORE, B_NEW, B_TYPE,
 B_DESCR, B_ND, B_WAKE, B_CLASS, B_STATUS) = range(15)
N_STATUS = 64
B_DIMS = B_STATUS + N_STATUS
#: The statuses as objects: ``int`` 0 .. 63 (CPython's small ints, kept alive here anyway).
STATUSES = tuple(range(N_STATUS))
#: From how many elements a call lets other Python threads run while it computes (NumPy lets
#: them from 500; taking and giving back the GIL costs ~0.1 us, 2% of a call this size).
RELEASE_GIL_FROM = 16384
_serial = kernels.KERNELS["serial"]


def _c_caller(n: int, restype, vararg: bool = False):
    """An intrinsic ``call(fn, a1, .., a<n>)``: the C function at address ``fn`` with ``n``
    word arguments (pointers or integers), returning a word (``restype`` int64) or nothing."""
    def define(typingctx, fn, *args):
        sig = restype(fn, *args)

        def codegen(context, builder, signature, llargs):
            w = ir.IntType(64)
            ret = ir.VoidType() if restype is types.void else w
            fnty = ir.FunctionType(ret, [w] * (1 if vararg else n), var_arg=vararg)
            r = builder.call(builder.inttoptr(llargs[0], fnty.as_pointer()), llargs[1:])
            return context.get_dummy_value() if restype is types.void else r

        return sig, codegen

    params = ", ".join(f"a{i}" for i in range(n))
    ns = {"define": define}
    exec(f"def call(typingctx, fn, {params}):\n    return define(typingctx, fn, {params})\n",
         ns)
    return intrinsic(ns["call"])


_call0v = _c_caller(0, types.void)
_call1v = _c_caller(1, types.void)
_call0 = _c_caller(0, types.int64)
_pack2 = _c_caller(3, types.int64, vararg=True)
_call8 = _c_caller(8, types.int64)


@c_entry
def _repeat(self, args, nargs):
    """``PyObject *f(PyObject *self, PyObject *const *args, Py_ssize_t nargs)``; ``self`` is
    the block (an int64 ndarray, :func:`_block`).

    ``f(out, x, y)`` returns the status's int. ``f(x, y)`` makes the result itself (where the
    block allows) and returns it, or ``(status, result)`` where it was written but raised
    floating-point flags, or the status's int where nothing was written. Any other count of
    arguments: MISMATCH. Never NULL: nothing here raises a Python exception."""
    block = as_pointer(as_pointer(self + SELF_DATA_OFFSET, _I64)[0], _I64)
    status = kernels.MISMATCH
    made = 0
    if nargs == 3 or (nargs == 2 and block[B_NEW] != 0):
        a = as_pointer(args, _I64)
        target = a[0] if nargs == 3 else 0
        x, y = a[nargs - 2], a[nargs - 1]
        meta, nd, dims, n = block[B_META], block[B_ND], address_of(block) + 8 * B_DIMS, 0
        if block[B_CLASS] != 0:  # this call's meta, planned here on the stack
            words = kernels.stack_words()
            dims, nd, n = shapeclass.plan_call(block[B_CLASS], target, x, y,
                                               address_of(words))
            meta = address_of(words) if dims != 0 else 0
        if meta != 0:
            if nargs == 2:
                # PyArray_NewFromDescr(type, descr, nd, dims, NULL, NULL, 0, NULL) takes a
                # reference to descr
                _call1v(block[B_INCREF], block[B_DESCR])
                made = target = _call8(block[B_NEW], block[B_TYPE], block[B_DESCR], nd, dims,
                                       0, 0, 0, 0)
            if target != 0:
                if block[B_WAKE] != 0:
                    pool.futex_wake(block[B_WAKE])
                saved = _call0(block[B_SAVE]) if block[B_SAVE] != 0 and (
                    block[B_CLASS] == 0 or n >= RELEASE_GIL_FROM) else 0
                status = _serial(block[B_TASK], target, x, y, meta)
                if saved != 0:
                    _call1v(block[B_RESTORE], saved)
            else:  # the allocation failed: its error cleared, MISMATCH, and the pipeline
                _call0v(block[B_CLEAR])  # decides again (and raises a MemoryError naming it)
    if status < 0 or status >= N_STATUS:
        status = kernels.TASK_FAILED
    code = block[B_STATUS + status]
    if made != 0:
        if status == kernels.OK:
            return made  # the new reference PyArray_NewFromDescr gave
        if status >= kernels.FP_RAISED:
            pair = _pack2(block[B_PACK], 2, code, made)  # its own references
            _call1v(block[B_DECREF], made)
            if pair != 0:
                return pair
            made = 0  # no memory for the pair: the status (the flags reported again)
        else:
            _call1v(block[B_DECREF], made)
    _call1v(block[B_INCREF], code)
    return code


cache.enable(_repeat)


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x0080
_DEF: list = []  # the one PyMethodDef every bound function points to (lives for the process)


def _method_def() -> _MethodDef:
    if not _DEF:
        sig = (_I64, _I64, _I64)
        registries.compile_with(lambda: _repeat.compile(sig))
        cres = _repeat.overloads[sig]
        address = cres.library.get_pointer_to_function(cres.fndesc.llvm_cfunc_wrapper_name)
        if not address:
            raise RuntimeError("no C entry point was compiled")
        _DEF.append(_MethodDef(b"jitops_repeat", address, _METH_FASTCALL,
                               b"A repeated call's compiled entry (jitops.cpu.fastcall)."))
    return _DEF[0]


def _prototype(name: str, restype, *argtypes):
    """CPython's C function ``name`` with a prototype of jitops' own (the shared
    ``ctypes.pythonapi`` attributes are left as other code may have set them)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


@functools.cache
def _new_function():
    return _prototype("PyCFunction_NewEx", ctypes.py_object, ctypes.POINTER(_MethodDef),
                      ctypes.py_object, ctypes.py_object)


def _new(block: np.ndarray):
    return _new_function()(ctypes.byref(_method_def()), block, None)


def _c_address(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value or 0


#: NumPy's C API table: ``PyArray_Type`` is its entry 2, ``PyArray_NewFromDescr`` its 94
#: (NumPy's ABI, the same in 1.x and 2.x; checked against ``id(np.ndarray)``).
_API_TYPE, _API_NEW_FROM_DESCR = 2, 94


def _new_from_descr() -> int:
    """``PyArray_NewFromDescr``'s address, or 0 where NumPy's API table is not as expected."""
    um = getattr(getattr(np, "_core", None), "_multiarray_umath", None)
    capsule = getattr(um, "_ARRAY_API", None)
    if capsule is None:
        return 0
    get = _prototype("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                     ctypes.c_char_p)
    table = (ctypes.c_void_p * (_API_NEW_FROM_DESCR + 1)).from_address(get(capsule, None))
    return table[_API_NEW_FROM_DESCR] or 0 if table[_API_TYPE] == id(np.ndarray) else 0


_FUNCTIONS: list = []


def _functions() -> tuple[int, ...]:
    """The C functions' addresses, in block order (B_INCREF .. B_NEW)."""
    if not _FUNCTIONS:
        _FUNCTIONS.extend([*map(_c_address, ("Py_IncRef", "Py_DecRef", "PyTuple_Pack",
                                             "PyErr_Clear", "PyEval_SaveThread",
                                             "PyEval_RestoreThread")),
                           _new_from_descr()])
    return tuple(_FUNCTIONS)


def _block(task: int, meta: np.ndarray, size: int, result, wake: int = 0,
           cls: np.ndarray | None = None) -> np.ndarray:
    """The words :func:`_repeat` reads (B_*). ``result``: (dtype, shape) of the C-ordered new
    result the entry makes, or None; ``wake``: B_WAKE; ``cls``: a shape class's words
    (``size`` then is the class's limit, and ``shape`` is empty)."""
    incref, decref, pack, clear, save, restore, new = _functions()
    if size < RELEASE_GIL_FROM:
        save = restore = 0
    dtype, shape = result if result is not None else (None, ())
    if result is None:
        new = 0
    return np.array([task, meta.__array_interface__["data"][0], incref, decref, pack, clear,
                     save, restore, new, id(np.ndarray), id(dtype), len(shape), wake,
                     0 if cls is None else cls.__array_interface__["data"][0],
                     *map(id, STATUSES), *shape], np.int64)


def bind(task: int, meta: np.ndarray, size: int, result=None, wake: int = 0,
         cls: np.ndarray | None = None):
    """The compiled entry for the serial task ``task`` and ``meta`` (which must carry header
    checks and outlive it; ``size`` elements): ``f(out, x, y) -> status``, and with ``result``
    = (dtype, shape) also ``f(x, y)`` making a C-ordered result of them (see :func:`_repeat`;
    ``dtype`` must outlive ``f``); with ``wake`` (a pool's control block, which outlives
    every entry) the entry wakes that pool's sleeping workers first; with ``cls`` (a shape
    class's words, outliving ``f``) it takes every call of that class, ``meta`` being the
    planner's for one of them. None where the hook is off or not yet verified
    (:func:`verify`)."""
    if not _VERIFIED or (result is not None and "new" not in _VERIFIED) \
            or not hooks.ok("fastcall"):
        return None
    return _new(_block(task, meta, size, result, wake, cls))


@hooks.register("fastcall", "Numba's CPython wrapper for repeated calls")
def _check() -> bool:
    """What the entry needs from this process: the ndarray layout compiled in, CPython's and
    NumPy's C functions found, and the entry compiled (or loaded from the disk cache). Whether
    it computes what Numba's wrapper does is :func:`verify`'s part, on a real call."""
    if not (hooks.ok("ndarray_header") and kernels.DATA_OFFSET == SELF_DATA_OFFSET
            and hasattr(ctypes, "pythonapi") and all(_functions())):
        return False
    _method_def()
    return True


#: The entry's paths :func:`verify` has run against Numba's wrapper and found equal: ``out``
#: (``f(out, x, y)``) and ``new`` (``f(x, y)``, making the result).
_VERIFIED: set[str] = set()


def _like(a: np.ndarray) -> np.ndarray:
    """A fresh array of exactly ``a``'s type, dtype, shape and strides (negative ones too)."""
    lo, hi = byte_extent(0, a.shape, a.strides, a.itemsize)
    buf = np.zeros(max(hi - lo, a.itemsize), np.uint8)
    return np.ndarray(a.shape, a.dtype, buffer=buf, offset=-lo, strides=a.strides)


def verify(launch, target: np.ndarray, x: np.ndarray, y: np.ndarray, new_result: bool) -> None:
    """Once per process and path, on the first serial launch the fast path keeps: run the entry
    bound to it and Numba's wrapper on the same operands into fresh arrays of ``target``'s
    layout (and, for a call that made its result, where the launch makes C-ordered results,
    the entry's own new result), and compare the bytes and statuses; refused arguments (none,
    too many, another object, a read-only out) must come back as statuses with nothing
    written. Any difference turns the hook off (:func:`jitops.cpu.hooks.fail`). Costs a few
    microseconds, and the entry's compile (or its load from the disk cache) the first time.

    The new-result path is checked on a call that made its result: the launch of an ``out=``
    call is planned for that out's layout, which a new result need not share (``out=o[::2]``
    refuses a C-ordered result, as it should)."""
    makes = new_result and launch.makes_c_order()
    if ("new" if makes else "out") in _VERIFIED or not hooks.ok("fastcall"):
        return
    try:
        meta_of = launch.metas.build(threads=1)
        want, got = _like(target), _like(target)
        status = launch.entry(launch.task, id(want), id(x), id(y),
                              meta_of.__array_interface__["data"][0])
        meta = kernels.header_checks(meta_of, (got, x, y))
        size = int(np.prod(target.shape))
        f = _new(_block(launch.task, meta, size, (got.dtype, got.shape) if makes else None))
        g = _new(_block(launch.task, meta, RELEASE_GIL_FROM, None))  # gives the GIL back
        ok = (status in (kernels.OK, *range(kernels.FP_RAISED, N_STATUS))
              and f(got, x, y) == status and got.tobytes() == want.tobytes())
        got[...] = 0
        ok = ok and g(got, x, y) == status and got.tobytes() == want.tobytes()
        if ok and makes:
            r = f(x, y)
            if status != kernels.OK:
                ok = type(r) is tuple and r[0] == status
                r = r[1] if ok else None
            ok = ok and (type(r) is np.ndarray and r.dtype == target.dtype
                         and r.shape == target.shape and r.flags.c_contiguous
                         and r.flags.owndata and r.tobytes() == want.tobytes()
                         and sys.getrefcount(r) == 2)
            r = None
        got[...] = 0
        ro = _like(target)
        ro.flags.writeable = False
        ok = ok and (f() == kernels.MISMATCH and f(got, x, y, y) == kernels.MISMATCH
                     and f(got, x, 1.0) == kernels.MISMATCH and g(x, y) == kernels.MISMATCH
                     and f(ro, x, y) == kernels.READ_ONLY
                     and not np.frombuffer(got.tobytes(), np.uint8).any())
    except Exception as e:  # noqa: BLE001 - any failure means: not this way
        hooks.fail("fastcall", f"{type(e).__name__}: {e}")
        return
    if not ok:
        hooks.fail("fastcall", "its first run differed from Numba's wrapper")
        return
    _VERIFIED.update(("out", "new") if makes else ("out",))
