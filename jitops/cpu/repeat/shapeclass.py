"""Shape classes: one compiled entry for every shape of a kind of call, planned in the entry.

Shapes real programs vary (batch sizes, the last short batch) plan the same up to their sizes,
as TensorIterator's ``fast_set_up`` finds; so a class's compiled entry reads the sizes from
the arrays it is handed and writes the meta on its stack (:func:`plan_call`). Every operand
C-contiguous, fewer elements than :func:`limit` (serial), and either ``FLAT`` (the inputs of
the result's shape, or a 0-d one: one dim) or ``ROWS`` (one input of the result's shape, the
other its trailing dims, NumPy's or Paddle's trailing ``axis``: rows of ``k``). A class is
keyed by op, keywords, dtypes and each operand's rank; its words (jitops.cpu.kernels.layout.CLASS)
say what the entry compares in each object's header. Before a class is used its meta must equal
the planner's word for word (:func:`meta_of`), and its first result the planned call's.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import types
from numba.extending import register_jitable

from ...core import config
from ..compile import cache, registries
from ..compile.jit import c_entry, inner
from ..kernels import binary as K
from ..kernels import layout
from ..kernels.layout import CLASS as W
from ..kernels.layout import META, OPERAND
from ..kernels.spec import as_pointer

_I64, _I32 = types.int64, types.int32

FLAT, ROWS = 1, 2
#: NumPy's NPY_ARRAY_C_CONTIGUOUS flag bit.
C_CONTIGUOUS = 0x0001


@register_jitable
def _word(addr, off):
    return as_pointer(addr + off, _I64)[0]


@register_jitable
def _operand_ok(w, a, descr, nd):
    """Whether the object at ``a`` is a C-contiguous ndarray of the class's type, ``descr``
    and rank ``nd`` (its type read first: nothing else is read from another object)."""
    if _word(a, w[W.OFF_TYPE]) != w[W.TYPE] or _word(a, w[W.OFF_DESCR]) != descr:
        return False
    if as_pointer(a + w[W.OFF_ND], _I32)[0] != nd:
        return False
    return (as_pointer(a + w[W.OFF_FLAGS], _I32)[0] & C_CONTIGUOUS) != 0


@inner
def plan_call(cls, o, x, y, meta_addr):
    """Write the meta of a call of class ``cls`` (the address of its words) with objects
    ``o`` (0: the entry makes the result), ``x``, ``y`` at ``meta_addr`` (``MAX_DIMS``
    words); returns ``(dims, nd, n)``: the address of the dims of the input whose shape the
    result has, its rank and the count of elements, or ``(0, 0, 0)`` where the objects are
    not of the class."""
    w = as_pointer(cls, _I64)
    ndx, ndy = w[W.ND_X], w[W.ND_Y]
    if not (_operand_ok(w, x, w[W.DESCR_X], ndx) and _operand_ok(w, y, w[W.DESCR_Y], ndy)):
        return 0, 0, 0
    if w[W.FULL] == 1:
        full, nd, small, nds, isf, iss = x, ndx, y, ndy, w[W.ISZ_X], w[W.ISZ_Y]
    else:
        full, nd, small, nds, isf, iss = y, ndy, x, ndx, w[W.ISZ_Y], w[W.ISZ_X]
    fd = as_pointer(_word(full, w[W.OFF_DIMS]), _I64)
    n = 1
    for i in range(nd):
        n *= fd[i]
    k = 1
    if nds > 0:
        sd = as_pointer(_word(small, w[W.OFF_DIMS]), _I64)
        for i in range(nds):
            if sd[i] != fd[nd - nds + i]:
                return 0, 0, 0
            k *= sd[i]
    if n <= 0 or n >= w[W.MAX]:
        return 0, 0, 0
    if o != 0:
        if not _operand_ok(w, o, w[W.DESCR_O], nd):
            return 0, 0, 0
        od = as_pointer(_word(o, w[W.OFF_DIMS]), _I64)
        for i in range(nd):
            if od[i] != fd[i]:
                return 0, 0, 0
    m = as_pointer(meta_addr, _I64)
    t = as_pointer(w[W.TEMPLATE], _I64)
    for i in range(META.SIZE):
        m[i] = t[i]
    flat = w[W.KIND] == FLAT
    inner = n if flat else k
    rows = 1 if flat else n // k
    block, ntasks, rows_per_task, nblk = K.split_rows(inner, rows, w[W.BLOCK], False, 1,
                                                      w[W.BLOCK_MIN])
    m[META.BLOCK], m[META.NTASKS], m[META.ROWS_PER_TASK] = block, ntasks, rows_per_task
    m[META.NBLK], m[META.ROWS] = nblk, rows
    m[META.NTI] = m[META.NTJ] = m[META.SHIFT] = 0
    m[META.HEADERS] = -1
    for j in range(K.NOPS):
        m[META.SIZE + j] = 0  # start offsets
    # the small input's step along a row (the planner's 1 for a dim of one element)
    s_small = 1 if nds > 0 or n == 1 else 0
    sh = K.SHAPE
    if flat:
        m[META.VARIANT] = K.V_CONTIG if s_small else (
            K.V_SCALAR_Y if w[W.FULL] == 1 else K.V_SCALAR_X)
        mnd = 1
        m[sh] = n
        m[sh + 1] = 1  # out
        sx = 1 if w[W.FULL] == 1 else s_small
        sy = s_small if w[W.FULL] == 1 else 1
        m[sh + 2], m[sh + 3] = sx, sy
        same_small = nds == nd
    else:
        m[META.VARIANT] = K.V_CONTIG
        mnd = 2
        m[sh], m[sh + 1] = rows, inner
        m[sh + 2], m[sh + 3] = inner, 1  # out
        row_x = inner if w[W.FULL] == 1 else 0
        row_y = 0 if w[W.FULL] == 1 else inner
        m[sh + 4], m[sh + 5] = row_x, 1
        m[sh + 6], m[sh + 7] = row_y, 1
        same_small = False
    m[META.ND] = mnd
    # the operands' check words: the template's alignments, this call's extents and views
    c, tc = layout.checks_at(K.NOPS, mnd), layout.checks_at(K.NOPS, t[META.ND])
    hi_small = (k if nds > 0 else 1) * iss
    for j in range(K.NOPS):
        at = c + OPERAND.SIZE * j
        m[at + OPERAND.ALIGN] = t[tc + OPERAND.SIZE * j + OPERAND.ALIGN]
        m[at + OPERAND.LO] = m[at + OPERAND.HI] = 0
        # (an input out's exact view only where the launch lets one be: KernelSpec.in_place)
        m[at + OPERAND.SAME] = 1 if j == 0 else t[tc + OPERAND.SIZE * j + OPERAND.SAME] if (
            j == w[W.FULL] or same_small) else 0
        if m[META.CHECK] != 0:  # out=: the byte extents the overlap check compares
            m[at + OPERAND.HI] = n * w[W.ISZ_O] if j == 0 else (
                n * isf if j == w[W.FULL] else hi_small)
    return _word(full, w[W.OFF_DIMS]), nd, n


@c_entry
def _plan_entry(cls, o, x, y, meta_addr, res_addr):
    """:func:`plan_call` as a C function (the class entry calls it by its address, so the
    compiled entry of one-shape repeats never compiles the planner): ``(dims, nd, n)`` into
    the three words at ``res_addr``."""
    dims, nd, n = plan_call(cls, o, x, y, meta_addr)
    r = as_pointer(res_addr, _I64)
    r[0], r[1], r[2] = dims, nd, n
    return 0


cache.enable(_plan_entry)
_PLAN: list = []  # (address, ctypes function) of _plan_entry, once compiled


def _planner() -> tuple:
    """The C address of :func:`_plan_entry` and a ctypes function calling it (compiled, or
    loaded from the disk cache, on the first class)."""
    if not _PLAN:
        sig = (_I64,) * 6
        registries.compile_with(lambda: _plan_entry.compile(sig))
        cres = _plan_entry.overloads[sig]
        address = cres.library.get_pointer_to_function(cres.fndesc.llvm_cfunc_wrapper_name)
        if not address:
            raise RuntimeError("no C entry point was compiled for the class planner")
        _PLAN.append((address, ctypes.CFUNCTYPE(*(ctypes.c_int64,) * 7)(address)))
    return _PLAN[0]


def plan_address() -> int:
    """The C address of the class planner the entries call (:func:`_plan_entry`)."""
    return _planner()[0]


def limit(out: np.dtype, x: np.dtype, y: np.dtype, new: bool) -> int:
    """The count of elements a call of a class stays below: serial, not streamed, and (for
    a new result) below the sizes whose results are recycled buffers."""
    bpe = out.itemsize + x.itemsize + y.itemsize
    lim = min(config.PARALLEL_THRESHOLD, config.parallel_size(bpe),
              max(1, config.STREAM_BYTES // bpe))
    if new:
        lim = min(lim, config.RECYCLE_MIN_BYTES // out.itemsize)
    return lim


def words(target: np.ndarray, x: np.ndarray, y: np.ndarray, new: bool) -> np.ndarray | None:
    """The words of the class of a serial call that wrote ``target`` from ``x``, ``y``, or
    None where it is of no class (or the ndarray layout is not verified); ``W.TEMPLATE`` is
    left for the caller (the planner's meta of that call, which must outlive the words)."""
    if K.HEADER_OFFSETS is None or K.FLAGS_OFFSET < 0 or not target.ndim:
        return None
    if not all(type(a) is np.ndarray and a.flags.c_contiguous for a in (target, x, y)):
        return None
    if x.shape == target.shape:
        full, small = 1, y
    elif y.shape == target.shape:
        full, small = 2, x
    else:
        return None
    nds, nd = small.ndim, target.ndim
    if nds == 0 or small.shape == target.shape:
        kind = FLAT
    elif nds < nd and small.shape == target.shape[nd - nds:] and small.size > 0:
        kind = ROWS
    else:
        return None
    type_off, nd_off, dims_off, _strides_off, descr_off = K.HEADER_OFFSETS
    return np.array(layout.fill(
        W, KIND=kind, FULL=full, ND_X=x.ndim, ND_Y=y.ndim, DESCR_O=id(target.dtype),
        DESCR_X=id(x.dtype), DESCR_Y=id(y.dtype), TYPE=id(np.ndarray),
        MAX=limit(target.dtype, x.dtype, y.dtype, new), ISZ_O=target.itemsize,
        ISZ_X=x.itemsize, ISZ_Y=y.itemsize, OFF_TYPE=type_off, OFF_ND=nd_off,
        OFF_DIMS=dims_off, OFF_DESCR=descr_off, OFF_FLAGS=K.FLAGS_OFFSET, TEMPLATE=0,
        BLOCK=config.BLOCK, BLOCK_MIN=config.BLOCK_MIN), np.int64)


def meta_of(cls: np.ndarray, target: np.ndarray | None, x: np.ndarray, y: np.ndarray
            ) -> np.ndarray | None:
    """The meta the class entry writes for these objects (``target`` None: a new result),
    or None where they are not of the class."""
    m = np.zeros(K.MAX_DIMS, np.int64)
    res = np.zeros(3, np.int64)
    _planner()[1](cls.__array_interface__["data"][0], 0 if target is None else id(target),
                  id(x), id(y), m.__array_interface__["data"][0],
                  res.__array_interface__["data"][0])
    if res[0] == 0:
        return None
    return m[:layout.checks_at(K.NOPS, int(m[META.ND])) + K.NOPS * OPERAND.SIZE].copy()


_CLASSES: dict = {}  # class key -> (words, template, entry taking out=, entry making the result)
_FAILED: list = []  # why an entry differed from the planned call (then no class is used)


def entries(ckey, launch, target: np.ndarray, x: np.ndarray, y: np.ndarray, out, bind):
    """``(template, words, f(out, x, y), f(x, y) or None)`` for the class of a serial call
    that just wrote ``target`` (``ckey`` its class key without the kind), or None. A new
    class is used only where its meta for this call equals the planner's and (for a new
    result) its entry's result equals ``target``; ``bind`` is
    :func:`jitops.cpu.repeat.fastcall.bind`."""
    if _FAILED:
        return None
    new = out is None
    cls = words(target, x, y, new)
    if cls is None:
        return None
    key = (*ckey, int(cls[W.KIND]), int(cls[W.FULL]))
    found = _CLASSES.get(key)
    if found is not None:
        return found
    cls[W.TEMPLATE] = launch.metas.address(1)
    template = launch.metas.arrays[1][0]  # the launch's own serial meta
    if not new and (np.may_share_memory(target, x) or np.may_share_memory(target, y)):
        return None  # in place: the inputs this call read are gone (a later call decides)
    planned = meta_of(cls, None if new else target, x, y)
    if planned is None or planned.shape != template.shape or (planned != template).any():
        return None
    f_out = bind(launch.task, template, int(cls[W.MAX]), None, 0, cls)
    f_new = bind(launch.task, template, int(cls[W.MAX]), (target.dtype, ()), 0, cls) \
        if new else None
    if f_out is None or (new and f_new is None):
        return None
    if new:  # the entry's own result, planned in the entry, against the planner's
        got = f_new(x, y)
        if type(got) is tuple:  # written, with floating-point flags (reported by the call)
            got = got[1]
        if not (type(got) is np.ndarray and got.shape == target.shape
                and got.dtype == target.dtype and got.tobytes() == target.tobytes()):
            _FAILED.append(f"class {key[-2:]} of {ckey[0]!r} differed from the planned call")
            return None
    found = _CLASSES[key] = (template, cls, f_out, f_new)
    return found


def made(ckey) -> bool:
    """Whether a class of ``ckey`` (its key without the kind) has been made."""
    return any(key[:-2] == ckey for key in _CLASSES)


def clear() -> None:
    """Forget the classes (a repeat that holds one keeps its words and entries alive)."""
    _CLASSES.clear()
