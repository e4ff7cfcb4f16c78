"""The CUDA kernels the dispatcher can build, as (kernel, argument types): what the
compile test (``python -m pytest -m cuda_compile``) compiles for a current GPU without one.

The specialisations come from the pipeline's own dtype rules (:func:`jitops.core.dtypes.
resolve`, :func:`~jitops.core.dtypes.implementation`), never from a list kept by hand, so a
new dtype, op or activation is compiled as soon as the dispatcher can reach it. The space is
large (9 kernel ops x 14 x 14 dtype pairs x 7 activations x every rank): :func:`catalog` walks
it along each axis, every value of every axis at least once --

* every op on every dtype (same-dtype pairs), contiguous and strided;
* every activation on every dtype it accepts;
* every mixed dtype pair (the loads and conversions of promotion), on one op;
* the strided kernel at ranks 1 to 4, with 32- and 64-bit indexing; every copy and
  zero check; user ops of 1, 2, 3 and 5 inputs (``jitops.act`` inside included);

and ``full=True`` walks the whole product of ops, dtype pairs and activations.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
from numba import types
from numba.np.numpy_support import from_dtype

from .. import act
from ..core.catalog import BY_ONE_DIVISOR, ROWS
from ..core.dtypes import SUPPORTED, implementation, kernel_op, resolve
from ..core.scalar import ACT_NAMES
from .spec import CudaSpec, register, storage_dtype

#: The public ops, by the kernel op they start from (``trunc_divide``: ``elementwise_div``).
OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin",
       "trunc_divide")


def _span(dt: np.dtype):
    return from_dtype(storage_dtype(dt))[::1]


def builtin_spec(op: str, act: str | None, x: np.dtype, y: np.dtype) -> CudaSpec | None:
    """The spec a call of ``op`` on x, y with ``act`` launches, or None when the pipeline
    refuses the call (a TypeError there)."""
    kop = kernel_op(op, np.result_type(x, y))
    try:
        dt = resolve(kop, x, y, op, act)
    except TypeError:
        return None
    impl = dt.impl or implementation(kop, dt.result)
    return CudaSpec("op:" + impl, act, (x, y), dt.result, dt.compute)


def contig_types(spec: CudaSpec) -> tuple:
    ins = tuple(_span(d) for d in spec.inputs)
    return (spec.numba_type, _span(spec.out), types.Tuple(ins), types.int64)


def strided_types(spec: CudaSpec, nd: int, small: bool) -> tuple:
    ins = tuple(_span(d) for d in spec.inputs)
    idx = types.uint64 if small else types.int64
    st = types.UniTuple(types.int64, nd)
    return (spec.numba_type, _span(spec.out), types.Tuple(ins), types.UniTuple(idx, nd), st,
            types.Tuple((st,) * len(ins)), types.UniTuple(types.int64, len(ins) + 1),
            types.int64)


def any_zero_types(dt: np.dtype, nd: int, small: bool) -> tuple:
    idx = types.uint64 if small else types.int64
    return (_span(dt), types.UniTuple(idx, nd), types.UniTuple(types.int64, nd),
            types.UniTuple(types.int64, 1), types.int64, types.int32[::1])


# -- user ops the catalogue compiles (module-level, as users write them) -----------------------

def _one(x):
    return x * x + 1


def _two(x, y):
    return x * y - y


def _three(x, w, b):
    return act.relu(x * w + b)


def _five(a, b, c, d, e):
    return (a + b) * c - d / (e + 1.5)


USER_OPS = (_one, _two, _three, _five)


def user_spec(fn, dt: np.dtype) -> CudaSpec:
    """The spec of user op ``fn`` on inputs of ``dt`` (its result dtype as a call infers it)."""
    from ..core.dtypes import compute_dtype
    from ..fusion import elementwise

    op = elementwise(fn)
    register(op.key, fn, False)
    compute = compute_dtype(dt)
    out = op.result_dtype(dt, compute, fn.__name__)
    return CudaSpec(op.key, None, (dt,) * op.nin, out, compute, op.cacheable)


def family() -> Iterator[tuple[str, str, tuple]]:
    """The binary family's kernels (jitops.core.catalog): every row on every dtype it has a
    loop for, and the exact int64/uint64 comparisons."""
    for op, dt in itertools.product(ROWS, SUPPORTED):
        s = builtin_spec(op, None, dt, dt)
        if s is not None:
            yield "contig", f"{op} {dt}", contig_types(s)
    for op in ("less", "equal"):
        s = builtin_spec(op, None, np.dtype("int64"), np.dtype("uint64"))
        yield "contig", f"{op} int64,uint64", contig_types(s)
    for dt in ("float32", "float64"):  # power with one exponent (core.catalog.power_one_exponent)
        s = CudaSpec("op:power_float_one_exponent", None, (np.dtype(dt),) * 2, np.dtype(dt),
                     np.dtype(dt))
        yield "contig", f"power (one exponent) {dt}", contig_types(s)
    for dt in ("int8", "int16", "int32"):  # floor division by one divisor (BY_ONE_DIVISOR)
        s = builtin_spec("floor_divide", None, np.dtype(dt), np.dtype(dt))
        s = CudaSpec("op:" + BY_ONE_DIVISOR[s.fn_key[3:]], None, s.inputs, s.out, s.compute)
        yield "contig", f"floor_divide (one divisor) {dt}", contig_types(s)


def catalog(full: bool = False) -> Iterator[tuple[str, str, tuple]]:
    """(kernel name, a label, argument types) of every kernel in the walk (see the module)."""
    seen = set()

    def emit(name, label, argtypes):
        key = (name, argtypes)
        if key not in seen:
            seen.add(key)
            yield name, label, argtypes

    acts = (None, *ACT_NAMES)
    if full:
        for op, (x, y) in itertools.product(ROWS, itertools.product(SUPPORTED, repeat=2)):
            s = builtin_spec(op, None, x, y)
            if s is not None:
                yield from emit("contig", f"{op} {x},{y}", contig_types(s))
        for op, (x, y), act in itertools.product(OPS, itertools.product(SUPPORTED, repeat=2),
                                                 acts):
            s = builtin_spec(op, act, x, y)
            if s is not None:
                yield from emit("contig", f"{op} {x},{y} act={act}", contig_types(s))
                yield from emit("strided", f"{op} {x},{y} act={act} nd=2",
                                strided_types(s, 2, True))
        return
    for op, dt in itertools.product(OPS, SUPPORTED):
        s = builtin_spec(op, None, dt, dt)
        if s is not None:
            yield from emit("contig", f"{op} {dt}", contig_types(s))
            yield from emit("strided", f"{op} {dt} nd=2", strided_types(s, 2, True))
    for act, dt in itertools.product(ACT_NAMES, SUPPORTED):
        s = builtin_spec("subtract" if dt.kind != "b" else "add", act, dt, dt)
        if s is not None:
            yield from emit("contig", f"act={act} {dt}", contig_types(s))
    for x, y in itertools.product(SUPPORTED, repeat=2):
        if x != y:
            s = builtin_spec("add", None, x, y)
            yield from emit("contig", f"add {x},{y}", contig_types(s))
    s = builtin_spec("subtract", None, np.dtype("float32"), np.dtype("float32"))
    for nd, small in itertools.product(range(1, 5), (True, False)):
        yield from emit("strided", f"subtract float32 nd={nd} small={small}",
                        strided_types(s, nd, small))
    for dt in SUPPORTED:
        c = CudaSpec("copy", None, (dt,), dt, dt)
        yield from emit("contig", f"copy {dt}", contig_types(c))
        yield from emit("strided", f"copy {dt} nd=2", strided_types(c, 2, True))
        if dt.kind in "iu":
            for nd, small in ((1, True), (2, True), (2, False)):
                yield from emit("any_zero", f"any_zero {dt} nd={nd} small={small}",
                                any_zero_types(dt, nd, small))
    for fn, dt in itertools.product(USER_OPS, ("float32", "float64", "int32")):
        u = user_spec(fn, np.dtype(dt))
        yield from emit("contig", f"user {fn.__name__} {dt}", contig_types(u))
        yield from emit("strided", f"user {fn.__name__} {dt} nd=2", strided_types(u, 2, True))


def reduce_types(spec: CudaSpec, nd: int, small: bool = True) -> tuple:
    ins = tuple(_span(d) for d in spec.inputs)
    st = types.UniTuple(types.int64, nd)
    shape = types.UniTuple(types.uint64 if small else types.int64, nd)
    return (spec.numba_type, types.Tuple(ins), _span(spec.out), shape, st,
            types.Tuple((st,) * len(ins)), types.UniTuple(types.int64, len(ins) + 1),
            types.int64, types.int64, types.int64)


#: What a reduction's values may be on CUDA (bfloat16 runs on the CPU only): every dtype,
#: complex ones but for max and min (which NumPy's rules refuse).
REDUCED = SUPPORTED


def reductions() -> Iterator[tuple[str, str, tuple]]:
    """The kernels of several results, some reduced (jitops.cuda.reduce): each reduction of
    each value dtype with its partials' and finishing kernels, sum_to, every gradient rule on
    float16/32/64 (the stored side mapped, the other summed)."""
    from ..core import grads
    from ..core.dtypes import compute_dtype
    from ..core.reduction import accumulator
    from ..reductions import reduce_dtype
    from .reduce import again_spec, finish_spec, key_of

    seen = set()
    key = key_of(grads.identity)
    register(key, grads.identity, False)
    for how, dt in itertools.product(("sum", "prod", "max", "min", "any", "all"), REDUCED):
        if dt.kind == "c" and how in ("max", "min"):
            continue
        compute = compute_dtype(dt)
        acc = accumulator(how, compute)
        s = CudaSpec(key, None, (dt,), acc, compute, True, None, how)
        yield "reduce_rows", f"reduce {how} {dt}", reduce_types(s, 2)
        if how == "sum" and dt.kind == "f":  # past 2**31 elements: int64 indexing
            yield "reduce_rows", f"reduce {how} {dt} large", reduce_types(s, 2, small=False)
        if (how, acc) not in seen:
            seen.add((how, acc))
            yield "reduce_rows", f"reduce {how} partials {acc}", reduce_types(
                again_spec(how, acc), 2)
        final = reduce_dtype(how, dt)
        if final != acc:
            yield "contig", f"reduce {how} {dt} finish", contig_types(
                finish_spec(acc, final, False))
    for dt in ("float16", "float32", "float64", "complex64", "complex128"):
        acc = np.dtype(np.complex128 if np.dtype(dt).kind == "c" else np.float64)
        yield "contig", f"mean {dt} finish", contig_types(finish_spec(acc, np.dtype(dt), True))
    for name, dt in itertools.product(sorted(grads.RULES), ("float16", "float32", "float64")):
        rule, dt = grads.RULES[name], np.dtype(dt)
        if rule is grads.identity:
            continue
        key = key_of(rule)
        register(key, rule, False)
        compute = compute_dtype(dt)
        stored = CudaSpec(key, None, (dt,) * 3, dt, compute, True, 0)
        summed = CudaSpec(key, None, (dt,) * 3, np.dtype(np.float64), compute, True, 1, "sum")
        yield "strided", f"grad {name} {dt} dx", strided_types(stored, 3, True)
        yield "reduce_rows", f"grad {name} {dt} dy", reduce_types(summed, 3)

