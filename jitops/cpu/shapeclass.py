"""Shape classes: one compiled entry for every shape of a kind of call, planned in the entry.

A repeat of an exact geometry skips the planner (:mod:`jitops.dispatch`, :mod:`.fastcall`);
a call with a shape never seen before would plan anew. For the shapes real programs vary --
batches of any length, the last short batch -- the plan is the same up to its sizes, as
TensorIterator's ``fast_set_up`` finds: so the compiled entry of such a call takes its sizes
from the arrays it is handed and writes the meta on its stack. Two classes, every operand
C-contiguous and the count of elements below :func:`limit` (serial, a plain new result):

* ``FLAT``: the inputs of the result's shape, or one a 0-d array (a scalar): one dim of
  ``n`` elements (NumPy's ``BINARY_LOOP_FAST`` cases);
* ``ROWS``: one input of the result's shape, the other its trailing dims (``X(n, 64) +
  b(64,)``, NumPy or Paddle's trailing ``axis``): ``n / k`` rows of ``k``.

A class is keyed by the op, the keywords, the dtypes and each operand's rank (Paddle's
``axis`` aligns by rank, so a rank is never assumed). Its words (``W_*``) name what the entry
compares in each object's header: exact type, dtype object, rank, the C-contiguous flag, the
dims. Before a class is used, the meta it builds for the call that made it must equal, word
for word, the planner's (:func:`meta_of`), and :mod:`.fastcall` compares the entry's first
result with the planned one.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import register_jitable

from ..core import config
from . import cache, registries
from . import kernels as K
from .spec import as_pointer

_I64, _I32 = types.int64, types.int32

FLAT, ROWS = 1, 2
#: A class's words: its kind; which input has the result's shape (1: x, 2: y); each input's
#: rank; the dtype objects of out, x, y; the ndarray type; the count of elements a call must
#: stay below; the item sizes of out, x, y; the header offsets of the type, rank, dims,
#: dtype and flags; the address of the planner's meta it starts from; the block size.
(W_KIND, W_FULL, W_ND_X, W_ND_Y, W_DESCR_O, W_DESCR_X, W_DESCR_Y, W_TYPE, W_MAX, W_ISZ_O,
 W_ISZ_X, W_ISZ_Y, W_OFF_TYPE, W_OFF_ND, W_OFF_DIMS, W_OFF_DESCR, W_OFF_FLAGS, W_TEMPLATE,
 W_BLOCK, W_BLOCK_MIN) = range(20)
N_WORDS = 20
#: NumPy's NPY_ARRAY_C_CONTIGUOUS flag bit.
C_CONTIGUOUS = 0x0001


@register_jitable
def _word(addr, off):
    return as_pointer(addr + off, _I64)[0]


@register_jitable
def _operand_ok(w, a, descr, nd):
    """Whether the object at ``a`` is a C-contiguous ndarray of the class's type, ``descr``
    and rank ``nd`` (its type read first: nothing else is read from another object)."""
    if _word(a, w[W_OFF_TYPE]) != w[W_TYPE] or _word(a, w[W_OFF_DESCR]) != descr:
        return False
    if as_pointer(a + w[W_OFF_ND], _I32)[0] != nd:
        return False
    return (as_pointer(a + w[W_OFF_FLAGS], _I32)[0] & C_CONTIGUOUS) != 0


@register_jitable
def plan_call(cls, o, x, y, meta_addr):
    """Write the meta of a call of class ``cls`` (the address of its words) with objects
    ``o`` (0: the entry makes the result), ``x``, ``y`` at ``meta_addr`` (``HDR + 8``
    words); returns ``(dims, nd, n)``: the address of the dims of the input whose shape the
    result has, its rank and the count of elements, or ``(0, 0, 0)`` where the objects are
    not of the class."""
    w = as_pointer(cls, _I64)
    ndx, ndy = w[W_ND_X], w[W_ND_Y]
    if not (_operand_ok(w, x, w[W_DESCR_X], ndx) and _operand_ok(w, y, w[W_DESCR_Y], ndy)):
        return 0, 0, 0
    if w[W_FULL] == 1:
        full, nd, small, nds, isf, iss = x, ndx, y, ndy, w[W_ISZ_X], w[W_ISZ_Y]
    else:
        full, nd, small, nds, isf, iss = y, ndy, x, ndx, w[W_ISZ_Y], w[W_ISZ_X]
    fd = as_pointer(_word(full, w[W_OFF_DIMS]), _I64)
    n = 1
    for i in range(nd):
        n *= fd[i]
    k = 1
    if nds > 0:
        sd = as_pointer(_word(small, w[W_OFF_DIMS]), _I64)
        for i in range(nds):
            if sd[i] != fd[nd - nds + i]:
                return 0, 0, 0
            k *= sd[i]
    if n <= 0 or n >= w[W_MAX]:
        return 0, 0, 0
    if o != 0:
        if not _operand_ok(w, o, w[W_DESCR_O], nd):
            return 0, 0, 0
        od = as_pointer(_word(o, w[W_OFF_DIMS]), _I64)
        for i in range(nd):
            if od[i] != fd[i]:
                return 0, 0, 0
    m = as_pointer(meta_addr, _I64)
    t = as_pointer(w[W_TEMPLATE], _I64)
    for i in range(K.HDR):
        m[i] = t[i]
    flat = w[W_KIND] == FLAT
    inner = n if flat else k
    rows = 1 if flat else n // k
    block, ntasks, rows_per_task, nblk = K.split_rows(inner, rows, w[W_BLOCK], False, 1,
                                                      w[W_BLOCK_MIN])
    m[K.M_BLOCK], m[K.M_NTASKS], m[K.M_ROWS_PER_TASK] = block, ntasks, rows_per_task
    m[K.M_NBLK], m[K.M_ROWS] = nblk, rows
    m[K.M_OFF_O] = m[K.M_OFF_X] = m[K.M_OFF_Y] = 0
    m[K.M_NTI] = m[K.M_NTJ] = m[K.M_SHIFT] = 0
    m[K.M_HEADERS] = -1
    # the small input's step along a row (the planner's 1 for a dim of one element)
    s_small = 1 if nds > 0 or n == 1 else 0
    if flat:
        m[K.M_VARIANT] = K.V_CONTIG if s_small else (
            K.V_SCALAR_Y if w[W_FULL] == 1 else K.V_SCALAR_X)
        m[K.M_ND] = 1
        m[K.HDR] = n
        m[K.HDR + 1] = 1
        sx = 1 if w[W_FULL] == 1 else s_small
        sy = s_small if w[W_FULL] == 1 else 1
        m[K.HDR + 2], m[K.HDR + 3] = sx, sy
        same_small = nds == nd
    else:
        m[K.M_VARIANT] = K.V_CONTIG
        m[K.M_ND] = 2
        m[K.HDR], m[K.HDR + 1] = rows, inner
        m[K.HDR + 2], m[K.HDR + 3] = inner, 1  # out
        row_x = inner if w[W_FULL] == 1 else 0
        row_y = 0 if w[W_FULL] == 1 else inner
        m[K.HDR + 4], m[K.HDR + 5] = row_x, 1
        m[K.HDR + 6], m[K.HDR + 7] = row_y, 1
        same_small = False
    if w[W_FULL] == 1:
        m[K.M_SAME_X], m[K.M_SAME_Y] = 1, 1 if same_small else 0
    else:
        m[K.M_SAME_X], m[K.M_SAME_Y] = 1 if same_small else 0, 1
    if m[K.M_CHECK] != 0:  # out=: the byte extents the overlap check compares
        for j in range(3):
            m[K.M_LO + j] = 0
        m[K.M_HI] = n * w[W_ISZ_O]
        hi_small = (k if nds > 0 else 1) * iss
        if w[W_FULL] == 1:
            m[K.M_HI + 1], m[K.M_HI + 2] = n * isf, hi_small
        else:
            m[K.M_HI + 1], m[K.M_HI + 2] = hi_small, n * isf
    return _word(full, w[W_OFF_DIMS]), nd, n


@njit
def _plan_call(cls, o, x, y, meta_addr):
    return plan_call(cls, o, x, y, meta_addr)


cache.enable(_plan_call)
_SIG = (_I64,) * 5


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
    None where it is of no class (or the ndarray layout is not verified); ``W_TEMPLATE`` is
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
    return np.array([kind, full, x.ndim, y.ndim, id(target.dtype), id(x.dtype), id(y.dtype),
                     id(np.ndarray), limit(target.dtype, x.dtype, y.dtype, new),
                     target.itemsize, x.itemsize, y.itemsize, type_off, nd_off, dims_off,
                     descr_off, K.FLAGS_OFFSET, 0, config.BLOCK, config.BLOCK_MIN], np.int64)


def meta_of(cls: np.ndarray, target: np.ndarray | None, x: np.ndarray, y: np.ndarray
            ) -> np.ndarray | None:
    """The meta the class entry writes for these objects (``target`` None: a new result),
    or None where they are not of the class."""
    m = np.zeros(K.MAX_DIMS, np.int64)
    if _SIG not in _plan_call.overloads:
        registries.compile_with(lambda: _plan_call.compile(_SIG))
    found, _nd, _n = _plan_call(cls.__array_interface__["data"][0], 0 if target is None
                         else id(target), id(x), id(y), m.__array_interface__["data"][0])
    if found == 0:
        return None
    nd = int(m[K.M_ND])
    return m[:K.HDR + 4 * nd].copy()


_CLASSES: dict = {}  # class key -> (words, template, entry taking out=, entry making the result)
_FAILED: list = []  # why an entry differed from the planned call (then no class is used)


def entries(ckey, launch, target: np.ndarray, x: np.ndarray, y: np.ndarray, out, bind):
    """``(template, words, f(out, x, y), f(x, y) or None)`` for the class of a serial call
    that just wrote ``target`` (``ckey`` its class key without the kind), or None. A new
    class is used only where its meta for this call equals the planner's and (for a new
    result) its entry's result equals ``target``; ``bind`` is :func:`jitops.cpu.fastcall.bind`."""
    if _FAILED:
        return None
    new = out is None
    cls = words(target, x, y, new)
    if cls is None:
        return None
    key = (*ckey, int(cls[W_KIND]), int(cls[W_FULL]))
    found = _CLASSES.get(key)
    if found is not None:
        return found
    cls[W_TEMPLATE] = launch.metas.address(1)
    template = launch.metas.arrays[1][0]  # the launch's own serial meta
    if not new and (np.may_share_memory(target, x) or np.may_share_memory(target, y)):
        return None  # in place: the inputs this call read are gone (a later call decides)
    planned = meta_of(cls, None if new else target, x, y)
    if planned is None or planned.shape != template.shape or (planned != template).any():
        return None
    f_out = bind(launch.task, template, int(cls[W_MAX]), None, 0, cls)
    f_new = bind(launch.task, template, int(cls[W_MAX]), (target.dtype, ()), 0, cls) \
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


def clear() -> None:
    """Forget the classes (a repeat that holds one keeps its words and entries alive)."""
    _CLASSES.clear()
