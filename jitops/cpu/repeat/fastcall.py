"""A repeated serial call's compiled entry: a CPython ``METH_FASTCALL`` function bound to one
launch, called with the operand objects themselves.

:func:`bind` makes a builtin function (``PyCFunction_NewEx``) whose code is :func:`_repeat`,
compiled once per process for every op and dtype (and disk-cached), instead of Numba's CPython
wrapper (an argument tuple, unboxing, ``id()`` calls, ``np.empty``). It takes ``(out, x, y)``,
or ``(x, y)`` and makes the result with NumPy's ``PyArray_NewFromDescr``; reads the task and
meta from its int64 block (jitops.cpu.kernels.layout.BLOCK), or plans the call itself for a shape
class (jitops.cpu.repeat.shapeclass); runs the serial driver, whose header checks verify each
object; and returns the status or the result. Fenced as the ``fastcall`` hook: CPython's C API
through
``ctypes.pythonapi``, NumPy's C API table, the data pointer at :data:`SELF_DATA_OFFSET`; its
first run is compared with Numba's wrapper on the call's own operands (:func:`verify`).
"""

from __future__ import annotations

import ctypes
import functools
import sys

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ...core.pipeline import byte_extent
from ..compile import cache, hooks, registries
from ..compile.jit import c_entry
from ..kernels import binary as kernels
from ..kernels import layout, nary
from ..kernels.layout import BLOCK as B
from ..kernels.layout import N_STATUS
from ..kernels.spec import address_of, as_pointer
from ..threads import pool
from . import shapeclass

_I64 = types.int64

#: Where ``PyArrayObject.data`` lies in the block object :func:`_repeat` is bound to, compiled
#: into it (and into its disk-cached code): CPython's 16 on 64-bit builds with the GIL. The
#: hook is off where the verified layout says otherwise (jitops.cpu.kernels.binary.DATA_OFFSET).
SELF_DATA_OFFSET = 16
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
_call3 = _c_caller(3, types.int64)
_call6 = _c_caller(6, types.int64)


@c_entry
def _repeat(self, args, nargs):
    """``PyObject *f(PyObject *self, PyObject *const *args, Py_ssize_t nargs)``; ``self`` is
    the block (an int64 ndarray, :func:`_block`), of a built-in op's task (``f(out, x, y)``)
    or a user op's (``f(out, *inputs)``).

    With out first it returns the status's int. Without, it makes the result itself (where
    the block allows) and returns it, or ``(status, result)`` where it was written but raised
    floating-point flags, or the status's int where nothing was written. Any other count of
    arguments: MISMATCH. Never NULL: nothing here raises a Python exception."""
    block = as_pointer(as_pointer(self + SELF_DATA_OFFSET, _I64)[0], _I64)
    status = kernels.MISMATCH
    made = 0
    nin = block[B.NIN]
    want = 2 if nin == 0 else nin
    if nargs == want + 1 or (nargs == want and block[B.NEW] != 0):
        a = as_pointer(args, _I64)
        target = a[0] if nargs == want + 1 else 0
        first = nargs - want
        x, y = a[first], a[nargs - 1]
        meta, nd, dims, n = block[B.META], block[B.ND], address_of(block) + 8 * B.DIMS, 0
        if block[B.CLASS] != 0:  # this call's meta, planned here on the stack
            words, res = kernels.stack_words(), kernels.stack_words()
            _call6(block[B.PLAN], block[B.CLASS], target, x, y, address_of(words),
                   address_of(res))
            dims, nd, n = res[0], res[1], res[2]
            meta = address_of(words) if dims != 0 else 0
        if meta != 0:
            if nargs == want:
                # PyArray_NewFromDescr(type, descr, nd, dims, NULL, NULL, order, NULL) takes
                # a reference to descr (without data, the flags word only says the order)
                _call1v(block[B.INCREF], block[B.DESCR])
                made = target = _call8(block[B.NEW], block[B.TYPE], block[B.DESCR], nd, dims,
                                       0, 0, block[B.ORDER], 0)
            if target != 0:
                if block[B.WAKE] != 0:
                    pool.futex_wake(block[B.WAKE])
                saved = _call0(block[B.SAVE]) if block[B.SAVE] != 0 and (
                    block[B.CLASS] == 0 or n >= RELEASE_GIL_FROM) else 0
                if nin == 0:
                    status = _serial(block[B.TASK], target, x, y, meta)
                else:  # the operands' words, out first, on this frame
                    refs = kernels.stack_words()
                    refs[0] = target
                    for i in range(nin):
                        refs[i + 1] = a[first + i]
                    status = _call3(block[B.DRIVER], block[B.TASK], address_of(refs), meta)
                if saved != 0:
                    _call1v(block[B.RESTORE], saved)
            else:  # the allocation failed: its error cleared, MISMATCH, and the pipeline
                _call0v(block[B.CLEAR])  # decides again (and raises a MemoryError naming it)
    if status < 0 or status >= N_STATUS:
        status = kernels.TASK_FAILED
    code = block[B.STATUS + status]
    if made != 0:
        if status == kernels.OK:
            return made  # the new reference PyArray_NewFromDescr gave
        if status >= kernels.FP_RAISED:
            pair = _pack2(block[B.PACK], 2, code, made)  # its own references
            _call1v(block[B.DECREF], made)
            if pair != 0:
                return pair
            made = 0  # no memory for the pair: the status (the flags reported again)
        else:
            _call1v(block[B.DECREF], made)
    _call1v(block[B.INCREF], code)
    return code


cache.enable(_repeat)


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x0080
#: NumPy's NPY_ARRAY_F_CONTIGUOUS: PyArray_NewFromDescr without data lays a result out in
#: Fortran order where its flags word has it.
_F_CONTIGUOUS = 0x0002
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
                               b"A repeated call's compiled entry (jitops.cpu.repeat.fastcall)."))
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
    """The C functions' addresses, in block order (B.INCREF .. B.NEW)."""
    if not _FUNCTIONS:
        _FUNCTIONS.extend([*map(_c_address, ("Py_IncRef", "Py_DecRef", "PyTuple_Pack",
                                             "PyErr_Clear", "PyEval_SaveThread",
                                             "PyEval_RestoreThread")),
                           _new_from_descr()])
    return tuple(_FUNCTIONS)


def _block(task: int, meta: np.ndarray, size: int, result, wake: int = 0,
           cls: np.ndarray | None = None, nin: int = 0, driver: int = 0) -> np.ndarray:
    """The words :func:`_repeat` reads (jitops.cpu.kernels.layout.BLOCK). ``result``: (dtype,
    shape) or (dtype, shape, order "C" or "F") of the new result the entry makes (C-ordered
    where no order is given), or None; ``wake``: a pool control block to wake first, or 0;
    ``cls``: a shape class's words (``size`` then is the class's limit)."""
    incref, decref, pack, clear, save, restore, new = _functions()
    if size < RELEASE_GIL_FROM:
        save = restore = 0
    dtype, shape, *order = result if result is not None else (None, ())
    if result is None:
        new = 0
    return np.array(layout.fill(
        B, TASK=task, META=meta.__array_interface__["data"][0], INCREF=incref, DECREF=decref,
        PACK=pack, CLEAR=clear, SAVE=save, RESTORE=restore, NEW=new, TYPE=id(np.ndarray),
        DESCR=id(dtype), ND=len(shape), ORDER=_F_CONTIGUOUS if order == ["F"] else 0, WAKE=wake,
        CLASS=0 if cls is None else cls.__array_interface__["data"][0],
        PLAN=0 if cls is None else shapeclass.plan_address(), NIN=nin,
        DRIVER=driver, STATUS=list(map(id, STATUSES)), DIMS=list(shape)), np.int64)


def _new_path(path: str, result) -> str:
    """The name under which the entry's path making ``result`` is verified: one per order."""
    return path + "-F" if result is not None and tuple(result[2:]) == ("F",) else path


def bind(task: int, meta: np.ndarray, size: int, result=None, wake: int = 0,
         cls: np.ndarray | None = None, nin: int = 0):
    """The compiled entry for serial ``task`` and ``meta`` (with header checks, outliving it;
    ``size`` elements): ``f(out, x, y) -> status``, and with ``result`` = (dtype, shape)
    ``f(x, y)`` making the result; ``wake``: a pool control block whose sleepers it wakes
    first; ``cls``: a shape class's words, ``meta`` then the planner's for one call; ``nin``:
    a user op's task of ``nin`` inputs (``f(out, *inputs)``, ``f(*inputs)``). None where the
    hook is off or the path not verified (:func:`verify`, :func:`verify_user`)."""
    paths = ("user", _new_path("user-new", result)) if nin else ("out", _new_path("new", result))
    if paths[0] not in _VERIFIED or (result is not None and paths[1] not in _VERIFIED) \
            or not hooks.ok("fastcall"):
        return None
    return _new(_block(task, meta, size, result, wake, cls, nin,
                       nary.serial_address() if nin else 0))


@hooks.register("fastcall", "Numba's CPython wrapper for repeated calls",
                ("jitops.cpu.repeat.fastcall",))
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


def _refuses(f, got: np.ndarray, inputs: tuple) -> bool:
    """Whether entry ``f`` refuses, writing nothing into ``got`` (zeroed first): no operands,
    one too many, a Python float for the last input, and a read-only out of ``got``'s
    layout."""
    got[...] = 0
    ro = _like(got)
    ro.flags.writeable = False
    return (f() == kernels.MISMATCH and f(got, *inputs, inputs[-1]) == kernels.MISMATCH
            and f(got, *inputs[:-1], 1.0) == kernels.MISMATCH
            and f(ro, *inputs) == kernels.READ_ONLY
            and not np.frombuffer(got.tobytes(), np.uint8).any())


def _settle(ok, paths: tuple[str, ...], differed: str) -> None:
    """A verification's end: ``paths`` verified where ``ok`` is True; else the hook turned
    off, saying why (``ok``: an exception's text, or False: ``differed``)."""
    if ok is True:
        _VERIFIED.update(paths)
    else:
        hooks.fail("fastcall", ok or differed)


def _made_right(make, status: int, want: np.ndarray) -> bool:
    """Whether the new result an entry makes (``make()``: it, or ``(status, it)``) is
    ``want``: the same dtype, shape, strides and bytes, its own memory, referenced by nobody
    else (held only here: no argument reference counts on any Python)."""
    r = make()
    if status != kernels.OK:
        if not (type(r) is tuple and r[0] == status):
            return False
        r = r[1]
    return (type(r) is np.ndarray and r.dtype == want.dtype and r.shape == want.shape
            and r.strides == want.strides and r.flags.owndata
            and r.tobytes(order="A") == want.tobytes(order="A") and sys.getrefcount(r) == 2)


def verify(launch, target: np.ndarray, x: np.ndarray, y: np.ndarray, new_result: bool) -> None:
    """Once per process and path, on the first serial launch kept: run the entry bound to it and
    Numba's wrapper on the same operands into fresh arrays of ``target``'s layout (and the
    entry's own new result, where the call made its result) and compare bytes and statuses;
    refused arguments (none, too many, another object, a read-only out) must come back as
    statuses with nothing written. Any difference turns the hook off
    (jitops.cpu.compile.hooks.fail).
    """
    made = launch.entry_result() if new_result else None
    makes = made is not None
    if (_new_path("new", made) if makes else "out") in _VERIFIED or not hooks.ok("fastcall"):
        return
    try:
        meta_of = launch.metas.build(threads=1)
        want, got = _like(target), _like(target)
        status = launch.entry(launch.task, id(want), id(x), id(y),
                              meta_of.__array_interface__["data"][0])
        meta = kernels.header_checks(meta_of, (got, x, y))
        size = int(np.prod(target.shape))
        f = _new(_block(launch.task, meta, size, made))
        g = _new(_block(launch.task, meta, RELEASE_GIL_FROM, None))  # gives the GIL back
        ok = (status in (kernels.OK, *range(kernels.FP_RAISED, N_STATUS))
              and f(got, x, y) == status and got.tobytes() == want.tobytes())
        got[...] = 0
        ok = ok and g(got, x, y) == status and got.tobytes() == want.tobytes()
        ok = ok and (not makes or _made_right(lambda: f(x, y), status, want))
        ok = ok and g(x, y) == kernels.MISMATCH and _refuses(f, got, (x, y))
    except Exception as e:  # noqa: BLE001 - any failure means: not this way
        ok = f"{type(e).__name__}: {e}"
    _settle(ok, ("out", _new_path("new", made)) if makes else ("out",),
            "its first run differed from Numba's wrapper")


def verify_user(launch, target: np.ndarray, inputs: tuple, new_result: bool) -> None:
    """:func:`verify` for a user op's serial launch (once per process and path): the entry
    against the serial driver on the same operands, refused arguments as statuses."""
    made = launch.entry_result() if new_result else None
    makes = made is not None
    if (_new_path("user-new", made) if makes else "user") in _VERIFIED \
            or not hooks.ok("fastcall"):
        return
    try:
        want, got = _like(target), _like(target)
        status = launch.status(want, inputs, 1)
        meta = kernels.header_checks(launch.metas.build(threads=1), (got, *inputs))
        f = _new(_block(launch.task, meta, int(np.prod(target.shape)),
                        made, nin=len(inputs),
                        driver=nary.serial_address()))
        ok = (status in (kernels.OK, *range(kernels.FP_RAISED, N_STATUS))
              and f(got, *inputs) == status and got.tobytes() == want.tobytes())
        ok = ok and (not makes or _made_right(lambda: f(*inputs), status, want))
        ok = ok and _refuses(f, got, inputs)
    except Exception as e:  # noqa: BLE001 - any failure means: not this way
        ok = f"{type(e).__name__}: {e}"
    _settle(ok, ("user", _new_path("user-new", made)) if makes else ("user",),
            "its first run of a user op differed from the driver's")
