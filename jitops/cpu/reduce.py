"""CPU kernels of a pass with stored and summed results (jitops.core.reduction plans it).

A task walks its part of the plan's space row by row (the innermost axis), in blocks of
:data:`BLOCK` elements: the map (a gradient rule of jitops.core.grads, or sum_to's identity)
writes up to two results' values into two small buffers, then each result takes its block:

* ``STORE``: written to its array at its strides, in its dtype;
* ``ROW_SUM``: the result sums the row (its stride there is 0): 8 interleaved lanes over the
  block, as NumPy's ``pairwise_sum`` leaf, and the blocks of a row combined pairwise through a
  binary counter, then added to the accumulator;
* ``COLUMN_SUM``: the result keeps the row's axis and sums an outer one: each value added to
  its accumulator element in order (NumPy's order for an outer reduction).

Accumulators are float64 for every float dtype (complex128, int64, uint64 otherwise), so a
float32 sum keeps ~29 more bits than NumPy's float32 pairwise sum. A task whose split axis a
result sums writes that result's own partial row (``PARTIAL`` bytes apart); the host combines
the rows in task order. Tasks run on the pool as user-op tasks do (``KIND_NARY``): the
spec-free drivers below take the task's address.
"""

from __future__ import annotations

import numpy as np
from numba import prange, types
from numba.extending import (
    NativeValue,
    models,
    overload,
    register_model,
    typeof_impl,
    unbox,
)
from numba.np.numpy_support import from_dtype

from ..core import grads
from . import pool
from .half import CONVERSIONS
from .jit import INNER, inner, wrapper
from .kernels import (
    compiled_address,
    driver_table,
    finish,
    finish_job,
    job_flags,
    note_flags,
    renamed,
    stack_words,
)
from .layout import struct
from .spec import as_pointer, cast_to, load_word, storage

_I64 = types.int64

#: Elements of a row a task maps (and sums) at a time: the buffers stay in L1.
BLOCK = 512
#: Results of one pass (a gradient's dx and dy) and its inputs (x, y, dout).
MAX_RESULTS, MAX_INPUTS = 2, 3
#: Ranks a reduction task walks (its odometer and offsets live on its stack).
MAX_DIMS = 32

#: What a result does with a block.
STORE, ROW_SUM, COLUMN_SUM = 0, 1, 2

#: A reduction launch's meta: rank, split axis, task count, inputs, results; per result its
#: mode and the bytes between tasks' partial rows (0: none); the shape; the operands'
#: strides (inputs then results, ``MAX_DIMS`` words each); the tasks' bounds on the split.
RMETA = struct("ReduceMeta", f"ND SPLIT NTASKS NIN NRES MODE:{MAX_RESULTS} "
                             f"PARTIAL:{MAX_RESULTS} | SHAPE:{MAX_DIMS} "
                             f"STRIDES:{MAX_DIMS * (MAX_INPUTS + MAX_RESULTS)} BOUNDS")


def accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype a sum of ``dtype`` values is accumulated in."""
    if dtype.kind == "c":
        return np.dtype(np.complex128)
    if dtype.kind == "u":
        return np.dtype(np.uint64)
    if dtype.kind in "ib":
        return np.dtype(np.int64)
    return np.dtype(np.float64)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """What ``dtype`` values are computed in (float16 and bfloat16 in float32)."""
    return np.dtype(np.float32) if dtype.itemsize == 2 and dtype.kind == "f" or \
        dtype.name == "bfloat16" else dtype


class ReduceSpecType(types.Dummy):
    """Numba type of a :class:`ReduceSpec`; all information is in its (stable) name."""

    def __init__(self, rule: str, inputs: tuple[str, ...], results: tuple[str, ...],
                 compute: str, acc: str):
        self.rule, self.inputs, self.results = rule, inputs, results
        self.compute, self.acc = compute, acc
        super().__init__(name=f"jitops.ReduceSpec({rule};{','.join(inputs)};"
                              f"{','.join(results)};{compute};{acc})")

    def __reduce__(self):  # the cache index pickles signatures
        return (ReduceSpecType, (self.rule, self.inputs, self.results, self.compute, self.acc))


register_model(ReduceSpecType)(models.OpaqueModel)


@unbox(ReduceSpecType)
def _unbox_spec(typ, obj, c):
    return NativeValue(c.context.get_constant_null(types.voidptr))


class ReduceSpec:
    """What one reduction task computes: the rule (jitops.core.grads.RULES), the inputs' and
    results' dtype names, the compute and accumulator dtypes. Interned."""

    __slots__ = ("rule", "inputs", "results", "compute", "acc", "numba_type")
    _interned: dict = {}

    def __new__(cls, rule: str, inputs: tuple[str, ...], results: tuple[str, ...],
                compute: str, acc: str):
        key = (rule, inputs, results, compute, acc)
        s = cls._interned.get(key)
        if s is None:
            s = object.__new__(cls)
            s.rule, s.inputs, s.results, s.compute, s.acc = key
            s.numba_type = ReduceSpecType(*key)
            cls._interned[key] = s
        return s


@typeof_impl.register(ReduceSpec)
def _typeof_spec(val, c):
    return val.numba_type


# -- the compiled pieces ---------------------------------------------------------------

def map_block(spec, ptrs, offs, steps, m, b0, b1, st0, st1, st2):
    """Map ``m`` elements of a row into ``b0``, ``b1`` (compute dtype): input ``i`` read at
    ``offs[i] + k * steps[i]``, staged first into ``st<i>`` unless unit-stride, so that the
    map itself is one unit-stride loop (vectorised) whatever the broadcast mix."""


@inner
def _stage(p, o, s, m, st):
    """``m`` elements of ``p`` from ``o`` every ``s`` into ``st`` (a broadcast input: one)."""
    if s == 0:
        v = p[o]
        for k in range(m):
            st[k] = v
    else:
        for k in range(m):
            st[k] = p[o + k * s]


def _itemsize(name: str) -> int:
    return 2 if name in CONVERSIONS else 1 if name == "bool" else np.dtype(name).itemsize


@overload(map_block, jit_options=INNER)
def _ov_map_block(spec, ptrs, offs, steps, m, b0, b1, st0, st1, st2):
    if not isinstance(spec, ReduceSpecType):
        return None
    T = from_dtype(np.dtype(spec.compute))
    rule = inner(grads.RULES[spec.rule])
    S = [storage(n) for n in spec.inputs] + [types.uint8] * (3 - len(spec.inputs))
    L = [load_word(n) for n in spec.inputs]
    Z = [_itemsize(n) for n in spec.inputs] + [1] * (3 - len(spec.inputs))
    S0, S1, S2 = S
    z0, z1, z2 = Z

    if len(spec.inputs) == 1:
        L0 = L[0]

        def impl(spec, ptrs, offs, steps, m, b0, b1, st0, st1, st2):
            a0 = ptrs[0] + offs[0] * z0
            if steps[0] != 1:  # staged: broadcast along the row, or strided
                _stage(as_pointer(ptrs[0], S0), offs[0], steps[0], m, as_pointer(st0, S0))
                a0 = st0
            q0 = as_pointer(a0, S0)
            for k in range(m):
                b0[k] = T(L0(q0[k]))
        return impl
    L0, L1, L2 = L

    def impl3(spec, ptrs, offs, steps, m, b0, b1, st0, st1, st2):
        a0 = ptrs[0] + offs[0] * z0
        if steps[0] != 1:  # staged: broadcast along the row, or strided
            _stage(as_pointer(ptrs[0], S0), offs[0], steps[0], m, as_pointer(st0, S0))
            a0 = st0
        q0 = as_pointer(a0, S0)
        a1 = ptrs[1] + offs[1] * z1
        if steps[1] != 1:  # staged: broadcast along the row, or strided
            _stage(as_pointer(ptrs[1], S1), offs[1], steps[1], m, as_pointer(st1, S1))
            a1 = st1
        q1 = as_pointer(a1, S1)
        a2 = ptrs[2] + offs[2] * z2
        if steps[2] != 1:  # staged: broadcast along the row, or strided
            _stage(as_pointer(ptrs[2], S2), offs[2], steps[2], m, as_pointer(st2, S2))
            a2 = st2
        q2 = as_pointer(a2, S2)
        for k in range(m):
            g0, g1 = rule(T(L0(q0[k])), T(L1(q1[k])), T(L2(q2[k])))
            b0[k] = T(g0)
            b1[k] = T(g1)
    return impl3


@inner(fastmath={"reassoc"})
def _block_sum(buf, m, zero):
    """``buf[:m]`` summed in ``zero``'s type, reassociated: the compiler's vector lanes
    (16 float64 on AVX2) each sum every 16th element, then the lanes are added -- a fixed
    order for the machine code, whatever the thread count."""
    s = zero
    for k in range(m):
        s += buf[k]
    return s


def _make_sink(r: int):
    def sink(spec, mode, buf, m, addr, o, s, lev, nlev):
        """Result ``r``'s share of a block (module docstring); returns the blocks counted
        into its row's pairwise levels ``lev`` (``nlev``)."""

    def ov(spec, mode, buf, m, addr, o, s, lev, nlev):
        if not isinstance(spec, ReduceSpecType):
            return None
        name = spec.results[r]
        St = storage(name)
        if name in CONVERSIONS:
            put = CONVERSIONS[name][1]
        else:
            put = cast_to(St)
        A = from_dtype(np.dtype(spec.acc))

        def impl(spec, mode, buf, m, addr, o, s, lev, nlev):
            if mode == STORE:
                p = as_pointer(addr, St)
                for k in range(m):
                    p[o + k * s] = put(buf[k])
                return nlev
            if mode == COLUMN_SUM:
                a = as_pointer(addr, A)
                for k in range(m):
                    a[o + k * s] += A(buf[k])
                return nlev
            # ROW_SUM: the block's sum pushed on the row's pairwise levels
            _push(lev, nlev, _block_sum(buf, m, A(0)))
            return nlev + 1

        return impl

    sink.__name__ = sink.__qualname__ = f"sink{r}"
    overload(sink, jit_options=INNER)(ov)
    return sink


@inner
def _popcount(c):
    n = 0
    while c:
        n += c & 1
        c >>= 1
    return n


@inner
def _push(lev, count, v):
    """Push block sum ``v`` as the row's block ``count``: ``lev`` holds one sum per set bit of
    ``count`` (the largest first), so equal-sized sums merge like a binary counter's carries
    and every element sits about log2(blocks) additions deep (a pairwise sum)."""
    top = _popcount(count)
    while count & 1:
        top -= 1
        v = lev[top] + v
        count >>= 1
    lev[top] = v


sink0, sink1 = _make_sink(0), _make_sink(1)


@inner
def _row_total(lev, count, zero):
    """The row's pairwise levels (``count`` blocks pushed) summed, the smallest first."""
    top = _popcount(count)
    v = zero
    if top:
        v = lev[top - 1]
        for i in range(top - 2, -1, -1):
            v = lev[i] + v
    return v


def reduce_task(spec, pptrs, pmeta, t):
    """Task ``t`` of a pass (module docstring); returns 0."""


@overload(reduce_task, jit_options=INNER)
def _ov_reduce_task(spec, pptrs, pmeta, t):
    if not isinstance(spec, ReduceSpecType):
        return None
    T = from_dtype(np.dtype(spec.compute))
    A = from_dtype(np.dtype(spec.acc))
    nres = len(spec.results)
    # sum_to's values are its input's words (not float16, bfloat16 or bool bytes)
    DIRECT = spec.rule == "sum_to" and spec.inputs[0] not in CONVERSIONS \
        and spec.inputs[0] != "bool"
    S0, Z0 = storage(spec.inputs[0]), _itemsize(spec.inputs[0])
    # ...whose sum in a wider accumulator gains nothing from pairwise blocks: integers add
    # exactly (modulo 2**64), and float32 rounding in float64 is 2**-29 of its own
    WIDE = DIRECT and np.dtype(spec.acc).itemsize > _itemsize(spec.inputs[0]) \
        and spec.inputs[0] != "complex64"

    def impl(spec, pptrs, pmeta, t):
        meta = as_pointer(pmeta, _I64)
        ptrs = as_pointer(pptrs, _I64)
        nd, split = meta[RMETA.ND], meta[RMETA.SPLIT]
        nin = meta[RMETA.NIN]
        nops = nin + nres
        lo, hi = meta[RMETA.BOUNDS + t], meta[RMETA.BOUNDS + t + 1]
        idx = stack_words()
        offs = stack_words()
        steps = stack_words()
        addrs = stack_words()
        for i in range(nops):
            steps[i] = meta[RMETA.STRIDES + i * MAX_DIMS + nd - 1]
            addrs[i] = ptrs[i]
        for r in range(nres):  # this task's partial rows
            addrs[nin + r] += t * meta[RMETA.PARTIAL + r]
        b0 = np.empty(BLOCK, T)
        b1 = np.empty(BLOCK, T)
        staged = np.empty(3 * BLOCK, np.int64)  # room for three inputs' values
        st0 = np.int64(staged.ctypes.data)  # (a uint64 would make the sums below float)
        st1, st2 = st0 + BLOCK * 8, st0 + 2 * BLOCK * 8
        lev0 = np.zeros(64, A)
        lev1 = np.zeros(64, A)
        mode0 = meta[RMETA.MODE]
        mode1 = meta[RMETA.MODE + 1] if nres > 1 else STORE
        for d in range(nd):
            idx[d] = lo if d == split else 0
        inner_lo, inner_hi = 0, meta[RMETA.SHAPE + nd - 1]
        if split == nd - 1:
            inner_lo, inner_hi = lo, hi
        if hi <= lo:
            return 0
        while True:
            for i in range(nops):
                o = 0
                for d in range(nd - 1):
                    o += idx[d] * meta[RMETA.STRIDES + i * MAX_DIMS + d]
                offs[i] = o + inner_lo * steps[i]
            n0 = n1 = 0
            k0 = inner_lo
            while k0 < inner_hi:
                m = min(BLOCK, inner_hi - k0)
                if DIRECT and steps[0] == 1:  # sum_to of a unit-stride row: read in place
                    if WIDE:  # the whole row at once (see WIDE)
                        m = inner_hi - k0
                    row = as_pointer(addrs[0] + offs[0] * Z0, S0)
                    n0 = sink0(spec, mode0, row, m, addrs[nin], offs[nin], steps[nin], lev0,
                               n0)
                else:
                    map_block(spec, addrs, offs, steps, m, b0, b1, st0, st1, st2)
                    n0 = sink0(spec, mode0, b0, m, addrs[nin], offs[nin], steps[nin], lev0,
                               n0)
                if nres > 1:
                    n1 = sink1(spec, mode1, b1, m, addrs[nin + 1], offs[nin + 1],
                               steps[nin + 1], lev1, n1)
                for i in range(nops):
                    offs[i] += m * steps[i]
                k0 += m
            if mode0 == ROW_SUM:
                a = as_pointer(addrs[nin], A)
                a[offs[nin]] += _row_total(lev0, n0, A(0))
            if nres > 1 and mode1 == ROW_SUM:
                a = as_pointer(addrs[nin + 1], A)
                a[offs[nin + 1]] += _row_total(lev1, n1, A(0))
            # the odometer over the outer axes (the split one within [lo, hi))
            d = nd - 2
            while d >= 0:
                idx[d] += 1
                end = hi if d == split else meta[RMETA.SHAPE + d]
                if idx[d] < end:
                    break
                idx[d] = lo if d == split else 0
                d -= 1
            if d < 0:
                return 0

    return impl


@inner
def reduce_rows(spec, pptrs, pmeta, t):
    """One task of a pass (compiled and optimised per spec)."""
    return reduce_task(spec, pptrs, pmeta, t)


def _rtask(spec, pptrs, pmeta, t):
    """Task ``t`` of a pass (see :func:`reduce_rows`); returns 0, or an error status."""
    return reduce_rows(spec, pptrs, pmeta, t)


_rtask_cached = wrapper(renamed(_rtask, "_rtask"))

_call_rtask = pool.call_nary


def _rdrive(task, pptrs, pmeta):
    """Every task of a pass (in parallel where compiled so); a status."""
    meta = as_pointer(pmeta, _I64)
    fp = job_flags(stack_words())
    failed = 0
    for t in prange(meta[RMETA.NTASKS]):
        failed += note_flags(fp, _call_rtask(task, pptrs, pmeta, t))
    return finish(failed, pool.load(fp, 0))


def _rpooled(task, pptrs, pmeta, ctl, workers):
    """Every task of a pass on the pool: this thread and ``workers`` workers."""
    meta = as_pointer(pmeta, _I64)
    return finish_job(pool.run_job(ctl, workers, pool.KIND_NARY, task, pptrs, pmeta,
                                   pool.UNUSED, pool.UNUSED, meta[RMETA.NTASKS], False))


KERNELS = driver_table(_rdrive, _rpooled, "rkernel", task=_rtask_cached)
_TASKS: dict = {}


def task_address(spec: ReduceSpec) -> int:
    """Address of the task compiled for ``spec``."""
    return compiled_address(_rtask_cached, spec, _TASKS, 3)
