"""A pass of several results, some reduced, on the GPU (the CPU's is jitops.cpu.kernels.reduce).

Each stored result is one launch of the map kernels (``strided``) writing that value of the
function; each reduced result is a launch of ``reduce_rows`` over the space viewed as rows of
its kept elements (jitops.core.reduction.segments): fixed-width blocks each reduce a fixed
chunk of a row into a partial, and the partials are reduced again by the same kernel until
one is left per row. Chunks, block width and tree are fixed by the shape, so a sum is the same
on every GPU and every run. Accumulators are NumPy's (jitops.core.reduction.accumulator:
float64 for float sums); a last map launch rounds them to the result's dtype (a mean divided
by its count first). The function is evaluated once per result: results are independent
launches, on the call's stream, and nothing comes back to the host.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..core.plan import contiguous_strides, expand_strides, make_plan
from ..core.reduction import segments
from ..cpu.kernels.nary import function_key
from . import kernels
from .backend import CudaMemory, _flat, _launch, _run
from .spec import CudaSpec, magic, register


def _cast_value(v):
    return v


def _mean_value(v, n):
    return v / n


def _mean_complex(v, s):
    """A complex accumulator over its count as NumPy divides it (Smith's division by ``n +
    0j``: each part times ``s = 1 / n``, the other part times 0 added first)."""
    return complex((v.real + v.imag * 0.0) * s.real, (v.imag - v.real * 0.0) * s.real)


@functools.lru_cache(maxsize=64)
def key_of(fn) -> str:
    """The key of one of jitops' own scalar functions (from its source file's hash: once)."""
    return function_key(fn)[0]


class Result:
    """What a pass makes of one result: ``how`` (``store``, or the kernel's reduction), the
    accumulator dtype ``acc`` (a reduction's), the ``dtype`` and ``shape`` it is returned in,
    and the ``count`` a mean divides by (None: not a mean)."""

    __slots__ = ("how", "acc", "dtype", "shape", "count")

    def __init__(self, how: str, acc, dtype, shape, count: int | None = None):
        self.how, self.acc, self.dtype, self.shape, self.count = (
            how, None if acc is None else np.dtype(acc), np.dtype(dtype), tuple(shape), count)


def run_pass(mem: CudaMemory, fn, key: str, cacheable: bool, inputs: list, frames_in: list,
             space: tuple[int, ...], frames: list, results: list[Result], compute: np.dtype,
             several: bool, lead: int) -> list:
    """The results of the scalar function ``fn`` (``several``: it returns a tuple) over
    ``space`` for CUDA arrays ``inputs`` (each with its frame): per result its frame (1 on the
    axes it reduces) and :class:`Result`. Returns CUDA arrays of the operands' kind."""
    register(key, fn, False)
    in_dtypes = tuple(mem.dtype(a) for a in inputs)
    strides = []
    for a, f in zip(inputs, frames_in):
        dt = mem.dtype(a)
        st = tuple(s // dt.itemsize for s in mem.strides(a))
        strides.append(expand_strides(mem.shape(a), st, f, space))
    size = math.prod(space)
    done = []
    for i, (frame, res) in enumerate(zip(frames, results)):
        pick = i if several else None
        out = mem.empty(res.shape, res.dtype, None)
        if res.how == "store":
            if size:
                spec = CudaSpec(key, None, in_dtypes, res.dtype, compute, cacheable, pick)
                plan = make_plan(tuple(tuple(space) for _ in inputs), tuple(strides), "none",
                                 -1, contiguous_strides(tuple(space)))
                _run(mem, spec, plan, out, *inputs)
            done.append(out)
            continue
        seg = segments(space, strides, frame, lead)
        if seg.rows:
            spec = CudaSpec(key, None, in_dtypes, res.acc, compute, cacheable, pick, res.how)
            flats = [_flat(mem, a) for a in inputs]
            direct = res.count is None and res.dtype == res.acc
            span = _flat(mem, out)[0]
            part = _reduce(mem, spec, [f for f, _ in flats], seg.shape, seg.inputs,
                           tuple(b for _, b in flats), seg.rows, seg.length, res.acc,
                           span if direct else None)
            if not direct:
                _finish(mem, res, part, span, seg.rows)
        done.append(out)
    return done


def _reduce(mem: CudaMemory, spec: CudaSpec, spans: list, shape, istr, starts, rows: int,
            length: int, acc: np.dtype, final=None):
    """``rows`` accumulators of ``acc``: ``reduce_rows`` launched until one partial is left
    per row, the last launch writing into ``final`` where given."""
    again = again_spec(spec.how, acc)
    while True:
        groups = max(1, -(-length // kernels.REDUCE_CHUNK))
        nblocks = rows * groups
        part = final if groups == 1 and final is not None else \
            mem.empty((nblocks,), acc, None)
        blocks = max(kernels.MIN_BLOCKS, min(nblocks, 8 * kernels.MIN_BLOCKS))  # the rest loop
        _launch("reduce_rows", blocks, kernels.REDUCE_THREADS, mem,
                (spec, tuple(spans), _flat(mem, part)[0], shape_words(shape, rows * length),
                 (0,) * len(shape), tuple(tuple(int(s) for s in st) for st in istr),
                 (0, *starts), length, groups, nblocks))
        if groups == 1:
            return part
        spec, spans, shape, istr, starts, length = (again, [_flat(mem, part)[0]],
                                                    (rows, groups), ((groups, 1),), (0,),
                                                    groups)


def shape_words(shape, total: int) -> tuple:
    """A reduction's space as kernel arguments: each dimension a :func:`~jitops.cuda.spec.magic`
    word where every linear index (``total`` of them) fits in 31 bits (a division by it is
    then a multiply-high), else int64 (as the map kernels' ``strided``)."""
    if 0 < total < 2**31 and all(n > 0 for n in shape):
        return tuple(np.uint64(magic(int(n))) for n in shape)
    return tuple(int(n) for n in shape)


def again_spec(how: str, acc: np.dtype) -> CudaSpec:
    """The spec reducing partials of ``acc`` by ``how``."""
    return CudaSpec("copy", None, (acc,), acc, acc, True, None, how)


def finish_spec(acc: np.dtype, dtype: np.dtype, mean: bool) -> CudaSpec:
    """The spec rounding accumulators of ``acc`` to ``dtype`` (``mean``: divided by their
    count first, its second input: a float64 count, or for complex its complex128 inverse)."""
    fn = (_mean_complex if acc.kind == "c" else _mean_value) if mean else _cast_value
    key = key_of(fn)
    register(key, fn, False)
    if mean:
        c = np.dtype(np.complex128 if acc.kind == "c" else np.float64)
        return CudaSpec(key, None, (acc, c), dtype, c)
    return CudaSpec(key, None, (acc,), dtype, acc)


def _finish(mem: CudaMemory, res: Result, part, span, rows: int) -> None:
    """The accumulators ``part`` rounded into ``span`` (the result's storage; a mean divided
    by its count first)."""
    spec = finish_spec(res.acc, res.dtype, res.count is not None)
    if res.count is None:
        _run(mem, spec, make_plan(((rows,),), ((1,),), "none", -1, (1,)), span, part)
        return
    n = mem.from_host(np.array(float(res.count)) if res.acc.kind != "c" else
                      np.array(complex(1.0 / res.count if res.count else np.inf, 0.0)))
    _run(mem, spec, make_plan(((rows,), ()), ((1,), ()), "numpy", -1, (1,)), span, part, n)
