"""Kernel specialisation as a Numba type: which op, which activation, which dtypes.

The kernels are a few module-level functions (so Numba's disk cache finds them), specialised
through one argument, a :class:`KernelSpec`, whose Numba type carries ``(op, act, x, y, out,
compute)`` in its name: one machine-code version per spec, and the same name in every process,
so the cache index hits. The overloads below turn a spec into code: typed data pointers, the
load (half types widened), the scalar op and activation (jitops.core.scalar), the store.
"""

from __future__ import annotations

import math
import platform

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import (
    NativeValue,
    intrinsic,
    models,
    overload,
    register_model,
    typeof_impl,
    unbox,
)
from numba.np.numpy_support import from_dtype

from ...core import scalar as _scalar
from ...core.catalog import KEPT
from ...core.dtypes import act_dtype
from ..compile.jit import INNER, inner
from .half import CONVERSIONS, SMALL_INTS, bool_byte_to_float, small_int_to_float


def storage(dt: np.dtype | str):
    """Numba type of the memory words of dtype ``dt`` (bool is a byte, float16 and bfloat16
    two bytes); a dtype or its name."""
    name = dt if isinstance(dt, str) else dt.name
    if name == "bool":
        return types.uint8
    if name in CONVERSIONS:
        return types.uint16
    return from_dtype(np.dtype(dt))


class KernelSpecType(types.Dummy):
    """Numba type of a :class:`KernelSpec`; all information is in the (stable) name."""

    def __init__(self, op: str, act: str | None, x: str, y: str, out: str, compute: str,
                 stream: bool = False, tiled: bool = False, in_place: bool = False):
        self.op, self.act, self.x, self.y, self.out, self.compute = op, act, x, y, out, compute
        self.stream, self.tiled, self.in_place = stream, tiled, in_place
        tail = (",stream" if stream else "") + (",tiled" if tiled else "") + (
            ",in_place" if in_place else "")
        super().__init__(name=f"jitops.KernelSpec({op},{act},{x},{y},{out},{compute}{tail})")

    def __reduce__(self):  # the cache index pickles signatures
        return (KernelSpecType, (self.op, self.act, self.x, self.y, self.out, self.compute,
                                 self.stream, self.tiled, self.in_place))


register_model(KernelSpecType)(models.OpaqueModel)


@unbox(KernelSpecType)
def _unbox_spec(typ, obj, c):
    return NativeValue(c.context.get_constant_null(types.voidptr))


class KernelSpec:
    """What one kernel instance computes. Interned: one object per distinct specialisation.

    ``stream``: the task writes unit-stride rows with non-temporal stores
    (jitops.cpu.kernels.stream).
    ``tiled``: the plan is tiled (operands that disagree on layout), so the task stages the
    transposed input (jitops.cpu.kernels.binary). ``in_place``: planned for a call whose out
    is an input, the task has the loops of such rows too (binary._in_place_row). Each a
    specialisation of its own, so the code for it is compiled only for the signatures that
    use it, and the others compile less.
    """

    __slots__ = ("op", "act", "x", "y", "out", "compute", "stream", "tiled", "in_place",
                 "numba_type")
    _interned: dict[tuple, KernelSpec] = {}

    def __new__(cls, op: str, act: str | None, x: np.dtype, y: np.dtype, out: np.dtype,
                compute: np.dtype, stream: bool = False, tiled: bool = False,
                in_place: bool = False) -> KernelSpec:
        key = (op, act, x, y, out, compute, bool(stream), bool(tiled), bool(in_place))
        self = cls._interned.get(key)
        if self is None:
            self = super().__new__(cls)
            (self.op, self.act, self.x, self.y, self.out, self.compute, self.stream,
             self.tiled, self.in_place) = key
            self.numba_type = KernelSpecType(op, act, x.name, y.name, out.name, compute.name,
                                             self.stream, self.tiled, self.in_place)
            cls._interned[key] = self
        return self

    def __repr__(self) -> str:
        return f"KernelSpec(op={self.op!r}, act={self.act!r}, x={self.x}, y={self.y}, " \
               f"out={self.out}, compute={self.compute}, stream={self.stream}, " \
               f"tiled={self.tiled}, in_place={self.in_place})"


@typeof_impl.register(KernelSpec)
def _typeof_spec(val, c):
    return val.numba_type


# -- compile-time helpers the kernels call -----------------------------------------------------

def _spec_flag(attr: str, doc: str):
    """An intrinsic giving a spec's boolean ``attr`` as a compile-time constant: the branch
    not taken is removed before LLVM vectorises anything, so it costs no compile time."""

    def flag_of(typingctx, spec):
        flag = getattr(spec, attr, None)
        if flag is None:
            return None
        sig = types.boolean(spec)

        def codegen(context, builder, signature, args):
            return ir.Constant(ir.IntType(1), int(flag))

        return sig, codegen

    flag_of.__name__ = flag_of.__qualname__ = attr
    flag_of.__doc__ = doc
    return intrinsic(flag_of)


streams = _spec_flag("stream", "Whether the spec writes with non-temporal stores.")


@intrinsic
def as_pointer(typingctx, addr, ty):
    """An integer address -> a typed pointer ``CPointer(ty)`` (indexable like an array)."""
    if not isinstance(ty, types.NumberClass):
        return None
    sig = types.CPointer(ty.instance_type)(addr, ty)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@intrinsic
def address_of(typingctx, ptr):
    """A typed pointer -> its integer address (the inverse of :func:`as_pointer`)."""
    if not isinstance(ptr, types.CPointer):
        return None
    sig = types.int64(ptr)

    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], context.get_value_type(types.int64))

    return sig, codegen


@intrinsic
def pointers(typingctx, spec, po, px, py):
    """(out, x, y) typed data pointers for ``spec``'s storage types."""
    if not isinstance(spec, KernelSpecType):
        return None
    tys = [types.CPointer(storage(n)) for n in (spec.out, spec.x, spec.y)]
    sig = types.Tuple(tys)(spec, po, px, py)

    def codegen(context, builder, signature, args):
        return context.make_tuple(builder, signature.return_type, [
            builder.inttoptr(a, context.get_value_type(t)) for a, t in zip(args[1:], tys)])

    return sig, codegen


_JIT_CACHE: dict[object, object] = {}


#: Table functions inlined into the row loop (by Numba into the element function, by LLVM
#: into the row at a call marked ``alwaysinline``): LLVM's inliner keeps a call to one this
#: large, and a call in the loop keeps it from vectorising.
INLINED = frozenset({"power_float32"})


def _jit(fn):
    """One dispatcher per table function (compiled lazily, per type, when first used)."""
    d = _JIT_CACHE.get(fn)
    if d is None:
        d = _JIT_CACHE[fn] = inner(fn, **({"inline": "always"} if fn.__name__ in INLINED
                                          else {}))
    return d


# The loads and stores below are intrinsics, not compiled functions: each of those was a Numba
# compile of its own (0.01 s) that every new signature waited for.

@intrinsic
def _identity(typingctx, v):
    """``v`` as it is (the load of a word that is its value)."""
    sig = v(v)

    def codegen(context, builder, signature, args):
        return args[0]

    return sig, codegen


@intrinsic
def to_bool_byte(typingctx, v):
    """1 where ``v`` is nonzero (NaN included), else 0, as a uint8 (NumPy's bool store)."""
    if not isinstance(v, (types.Number, types.Boolean)):
        return None
    sig = types.uint8(v)

    def codegen(context, builder, signature, args):
        return builder.zext(context.is_true(builder, v, args[0]), ir.IntType(8))

    return sig, codegen


_CASTS: dict = {}


def cast_to(ty):
    """An intrinsic ``v -> ty(v)`` (Numba's number conversion, one per target type)."""
    cast = _CASTS.get(ty)
    if cast is None:
        def store_as(typingctx, v):
            if not isinstance(v, (types.Number, types.Boolean)):
                return None

            def codegen(context, builder, signature, args):
                return context.cast(builder, args[0], v, ty)

            return ty(v), codegen

        store_as.__name__ = store_as.__qualname__ = f"store_as_{ty}"
        cast = _CASTS[ty] = intrinsic(store_as)
    return cast


@intrinsic
def _llvm_fma(typingctx, a, b, c):
    """``a * b + c`` rounded once: LLVM's ``llvm.fma`` (the FMA instruction where the CPU has
    one, a correctly rounded library call where it does not)."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None
    sig = a(a, b, c)

    def codegen(context, builder, signature, args):
        ty = context.get_value_type(a)
        fn = builder.module.declare_intrinsic("llvm.fma", [ty], ir.FunctionType(ty, [ty] * 3))
        return builder.call(fn, args)

    return sig, codegen


@overload(_scalar.fma, jit_options=INNER)
def _ov_fma(a, b, c):
    if isinstance(a, types.Float) and a == b == c:
        return lambda a, b, c: _llvm_fma(a, b, c)
    return None


@intrinsic
def _signaling_ge(typingctx, a, b):
    """``a >= b`` raising *invalid* where ``a`` or ``b`` is NaN, as C's ``>=`` does on x86 (LLVM's
    ``fcmp`` is quiet), in code that still vectorises: each operand's magnitude capped at one
    (``minsd``, which raises *invalid* on a NaN only), their sum tested ``<= 2`` (false only
    where ``a >= b`` already is) and ANDed in, so that the cap stays in the code.
    """
    if not (isinstance(a, types.Float) and a == b):
        return None

    def codegen(context, builder, signature, args):
        ty = context.get_value_type(a)
        fabs = builder.module.declare_intrinsic("llvm.fabs", [ty])
        one = ir.Constant(ty, 1.0)
        total = ir.Constant(ty, 0.0)
        for v in args:
            m = builder.call(fabs, [v])
            total = builder.fadd(total, builder.select(builder.fcmp_ordered("<", one, m), one, m))
        holds = builder.fcmp_ordered("<=", total, ir.Constant(ty, 2.0))
        return builder.and_(builder.fcmp_ordered(">=", *args), holds)

    return types.boolean(a, b), codegen


@overload(_scalar.ge_signaling, jit_options=INNER)
def _ov_ge_signaling(a, b):
    if isinstance(a, types.Float) and a == b:
        return lambda a, b: _signaling_ge(a, b)
    return None


@intrinsic
def _raise_flags(typingctx, flags, v):
    """``v``, after ORing ``flags`` into MXCSR's sticky exception bits (x86-64; elsewhere
    nothing is reported, jitops.cpu.threads.pool.FP_FLAGS). A write of MXCSR, on the rare path only
    (a zero divisor)."""
    if not isinstance(flags, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        if _X86:
            fty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
            slot = cgutils.alloca_once(builder, ir.IntType(32))
            p = builder.bitcast(slot, ir.IntType(8).as_pointer())
            builder.call(builder.module.declare_intrinsic("llvm.x86.sse.stmxcsr", (), fty), [p])
            bits = builder.trunc(args[0], ir.IntType(32))
            builder.store(builder.or_(builder.load(slot), bits), slot)
            builder.call(builder.module.declare_intrinsic("llvm.x86.sse.ldmxcsr", (), fty), [p])
        return args[1]

    return v(flags, v), codegen


_X86 = platform.machine().lower() in ("x86_64", "amd64")


@overload(_scalar.raise_flags, jit_options=INNER)
def _ov_raise_flags(flags, v):
    return lambda flags, v: _raise_flags(flags, v)


def _float_intrinsic(name, n, emit):
    """An intrinsic of ``n`` floats of one type, emitted by ``emit(builder, args)``."""
    def typer(typingctx, *args):
        if not (isinstance(args[0], types.Float) and all(a == args[0] for a in args)):
            return None

        def codegen(context, builder, signature, cargs):
            return emit(builder, cargs)

        return args[0](*args), codegen

    ns = {"typer": typer}
    params = ", ".join(f"a{k}" for k in range(n))
    exec(f"def {name}(typingctx, {params}):\n    return typer(typingctx, {params})\n", ns)
    return intrinsic(ns[name])


def _emit_frem(b, a):
    """C's ``fmod``. An infinite dividend by a number gives the CPU's default NaN, as the C
    library does: LLVM lowers ``frem`` by a divisor it knows to be a power of two (a bool
    operand's 1.0) to ``x - trunc(x)`` with ``x``'s sign copied, +NaN for +inf. float32
    operands whose quotient is below 2**24 take :func:`_emit_frem_single` instead; double
    ``fmod`` is C's, called (:func:`_c_fmod`)."""
    x, y = a
    if isinstance(x.type, ir.FloatType):
        return _emit_frem_single(b, x, y)
    return _emit_frem_c(b, x, y)


#: The CPU's default NaN (``inf - inf``): its sign bit (x86's is set, AArch64's clear).
_DEFAULT_NAN_NEGATIVE = math.copysign(1.0, math.inf - math.inf) < 0


def _default_nan(ty):
    """The CPU's default NaN of float type ``ty`` (float or double), as a constant."""
    width, mant = (32, 23) if isinstance(ty, ir.FloatType) else (64, 52)
    bits = (((1 << (width - mant)) - 1) << mant) | (1 << (mant - 1))  # exponent, quiet bit
    bits |= _DEFAULT_NAN_NEGATIVE << (width - 1)
    return ir.Constant(ir.IntType(width), bits).bitcast(ty)


def _emit_frem_c(b, x, y):
    """C's ``fmod(x, y)`` called (:func:`_c_fmod`), the default NaN picked for an infinite
    ``x`` by a number (C's value; the call raised C's *invalid*). A constant: a value
    computed for the pick (``x - x``) was computed in every lane, raising *invalid* for
    ``fmod(inf, nan)``, which C answers quietly."""
    fabs = b.module.declare_intrinsic("llvm.fabs", [x.type])
    infinite = b.fcmp_ordered("==", b.call(fabs, [x]), ir.Constant(x.type, float("inf")))
    by_number = b.fcmp_ordered("ord", y, y)
    rem = b.call(_c_fmod(b.module, x.type), [x, y])
    return b.select(b.and_(infinite, by_number), _default_nan(x.type), rem)


def _c_fmod(module, ty):
    """C's ``fmod`` (double) or ``fmodf`` (float): a call that may write (errno) and is no
    built-in (``nobuiltin``), so LLVM neither speculates nor widens it and a loop with it on
    a rare branch stays a branch. ``frem``, or the call LLVM recognised by its name, was
    if-converted: computed in every lane (slower, and *invalid* from a zero divisor's lanes
    of ``floor_divide``, which NumPy's branch does not raise)."""
    name = "fmodf" if isinstance(ty, ir.FloatType) else "fmod"
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * 2), name)
        fn.attributes.add("nobuiltin")
    return fn


def _emit_frem_single(b, x, y):
    """float32 ``fmod`` in double, exactly: for finite ``x`` and finite nonzero ``y`` with
    ``|x| < 2**24 |y|``, the double quotient ``X / Y`` lies at least 2**-49 of itself below the
    next integer (both are multiples of their float32 ulps), so ``q = trunc(X / Y)`` is the
    true one; ``q * Y`` (at most 48 bits) and ``X - q * Y`` (the remainder, a float32) are
    exact; the sign is ``x``'s (C's, for a zero too). No flag but *inexact*. Every other
    pair branches to C's (a branch, not a select: the C call stays off the common path)."""
    dbl = ir.DoubleType()
    fabs = b.module.declare_intrinsic("llvm.fabs", [dbl])
    X, Y = b.fpext(x, dbl), b.fpext(y, dbl)
    ax, ay = b.call(fabs, [X]), b.call(fabs, [Y])
    inf = ir.Constant(dbl, float("inf"))
    fast = b.and_(b.and_(b.fcmp_ordered(">", ay, ir.Constant(dbl, 0.0)),
                         b.fcmp_ordered("<", ay, inf)),
                  b.fcmp_ordered("<", ax, b.fmul(ay, ir.Constant(dbl, 2.0 ** 24))))
    quick = b.append_basic_block("fmod.single")
    slow = b.append_basic_block("fmod.c")
    done = b.append_basic_block("fmod.done")
    b.cbranch(fast, quick, slow)
    b.position_at_end(quick)
    r_quick = _emit_frem_quick(b, (x, y))
    b.branch(done)
    b.position_at_end(slow)
    r_slow = _emit_frem_c(b, x, y)
    slow_end = b.block
    b.branch(done)
    b.position_at_end(done)
    phi = b.phi(x.type)
    phi.add_incoming(r_quick, quick)
    phi.add_incoming(r_slow, slow_end)
    return phi


def _emit_frem_quick(b, a):
    """The float32 ``fmod`` of :func:`_emit_frem_single`'s fast pairs, alone: no branch, so a
    loop of it vectorises (jitops.cpu.kernels.lean runs it where every lane is such a pair)."""
    x, y = a
    dbl = ir.DoubleType()
    X, Y = b.fpext(x, dbl), b.fpext(y, dbl)
    q = b.call(b.module.declare_intrinsic("llvm.trunc", [dbl]), [b.fdiv(X, Y)])
    r = b.fsub(X, b.fmul(q, Y))
    sign = b.module.declare_intrinsic("llvm.copysign", [dbl], ir.FunctionType(dbl, [dbl, dbl]))
    return b.fptrunc(b.call(sign, [r, X]), x.type)


_frem = _float_intrinsic("frem", 2, _emit_frem)
frem_quick = _float_intrinsic("frem_quick", 2, _emit_frem_quick)
_floor = _float_intrinsic("floor", 1, lambda b, a: b.call(
    b.module.declare_intrinsic("llvm.floor", [a[0].type]), a))


@overload(_scalar.fmod_c, jit_options=INNER)
def _ov_fmod(a, b):
    return lambda a, b: _frem(a, b)


_sqrt = _float_intrinsic("sqrt", 1, lambda b, a: b.call(
    b.module.declare_intrinsic("llvm.sqrt", [a[0].type]), a))
_quiet = _float_intrinsic("quiet", 1, lambda b, a: b.call(
    b.module.declare_intrinsic("llvm.canonicalize", [a[0].type]), a))


@overload(_scalar.quiet_f, jit_options=INNER)
def _ov_quiet(a):
    return lambda a: _quiet(a)


@intrinsic
def _zeros(typingctx, a, b):
    """Whether floats ``a`` and ``b`` are both ±0: their bits ORed, shifted past the sign.
    LLVM folds a bit test of one value back into ``a == 0``, and one of two where the other
    is a constant zero (a float divisor's imaginary part): the arithmetic fences keep both
    values opaque to it."""
    if not (isinstance(a, types.Float) and a == b):
        return None

    def codegen(context, builder, signature, args):
        ty = ir.IntType(a.bitwidth)
        fence = builder.module.declare_intrinsic("llvm.arithmetic.fence", [args[0].type])
        a_, b_ = (builder.call(fence, [v]) for v in args)
        either = builder.or_(builder.bitcast(a_, ty), builder.bitcast(b_, ty))
        return builder.icmp_unsigned("==", builder.shl(either, ir.Constant(ty, 1)),
                                     ir.Constant(ty, 0))

    return types.boolean(a, b), codegen


@overload(_scalar.zeros, jit_options=INNER)
def _ov_zeros(a, b):
    return lambda a, b: _zeros(a, b)


@overload(_scalar.floor_f, jit_options=INNER)
def _ov_floor(a):
    return lambda a: _floor(a)


@overload(_scalar.pow_c, jit_options=INNER)
def _ov_pow(a, b):
    return lambda a, b: math.pow(a, b)


@overload(_scalar.sqrt_c, jit_options=INNER)
def _ov_sqrt(a):
    return lambda a: math.sqrt(a)


@intrinsic
def _cpow(typingctx, a, b):
    """C's ``cpow`` (``cpowf`` for complex64), the C library's own (NumPy's complex power
    calls it), by the x86-64 System V convention: a complex double travels as two doubles
    and comes back as a pair of them, a complex float as one vector of two floats (the only
    platforms that reach it: jitops.core.catalog.CPOW_ABI)."""
    if not (isinstance(a, types.Complex) and a == b):
        return None

    def codegen(context, builder, signature, args):
        part = context.get_value_type(a.underlying_float)
        # Numba's complex value is the struct {real, imag}
        (xr, xi), (yr, yi) = ((builder.extract_value(v, 0), builder.extract_value(v, 1))
                              for v in args)
        if a.bitwidth == 128:
            fnty = ir.FunctionType(ir.LiteralStructType([part, part]), [part] * 4)
            fn = cgutils.get_or_insert_function(builder.module, fnty, "cpow")
            got = builder.call(fn, [xr, xi, yr, yi])
            re, im = builder.extract_value(got, 0), builder.extract_value(got, 1)
        else:
            pair = ir.VectorType(part, 2)
            lane = [ir.Constant(ir.IntType(32), k) for k in (0, 1)]

            def packed(r, i):
                v = builder.insert_element(ir.Constant(pair, ir.Undefined), r, lane[0])
                return builder.insert_element(v, i, lane[1])

            fn = cgutils.get_or_insert_function(builder.module,
                                                 ir.FunctionType(pair, [pair, pair]), "cpowf")
            got = builder.call(fn, [packed(xr, xi), packed(yr, yi)])
            re, im = (builder.extract_element(got, k) for k in lane)
        r = ir.Constant(context.get_value_type(a), ir.Undefined)
        return builder.insert_value(builder.insert_value(r, re, 0), im, 1)

    return a(a, b), codegen


@overload(_scalar.cpow_c, jit_options=INNER)
def _ov_cpow(a, b):
    return lambda a, b: _cpow(a, b)


@overload(_scalar.double, jit_options=INNER)
def _ov_double(v):
    return lambda v: types.float64(v)


@overload(_scalar.single, jit_options=INNER)
def _ov_single(v):
    return lambda v: types.float32(v)


@overload(_scalar.ldexp_c, jit_options=INNER)
def _ov_ldexp(a, e):
    return lambda a, e: math.ldexp(a, e)


for _helper in _scalar.HELPERS:
    overload(_helper, jit_options=INNER)(_scalar.returning(_helper))


def element(spec, a, b):
    """One output word from one x word and one y word (storage types in and out)."""


def load_word(dtype: str, out: str = ""):
    """Storage word -> value: float16 bits widen to float32; a bool byte reads as 0 or 1
    whatever it holds (NumPy reads every nonzero byte as True); others as they are. Into a
    float16 result, a bool or an integer of at most 16 bits becomes float32 through
    :func:`jitops.cpu.kernels.half.small_int_to_float` (no stray lanes for the narrowing to see)."""
    if dtype in CONVERSIONS:
        return CONVERSIONS[dtype][0]
    if out == "float16" and dtype in SMALL_INTS:
        return bool_byte_to_float if dtype == "bool" else small_int_to_float
    if dtype == "bool":
        return to_bool_byte
    return _identity


@overload(element, jit_options=INNER)
def _ov_element(spec, a, b):
    if not isinstance(spec, KernelSpecType):
        return None
    T = from_dtype(np.dtype(spec.compute))
    A = from_dtype(act_dtype(spec.act, np.dtype(spec.compute)))
    op = _jit(_scalar.OPS[spec.op])
    act = _jit(_scalar.ACTS[spec.act])
    load_x, load_y = load_word(spec.x, spec.out), load_word(spec.y, spec.out)
    if spec.out in CONVERSIONS:
        store = CONVERSIONS[spec.out][1]
    elif spec.out == "bool":
        store = to_bool_byte
    else:
        store = cast_to(from_dtype(np.dtype(spec.out)))

    keep_x, keep_y = KEPT.get(spec.op, (False, False))
    X = _identity if keep_x else T
    Y = _identity if keep_y else T
    if spec.out == "bool":  # a comparison's or logical op's bool, or T's truth
        def impl(spec, a, b):
            return store(op(X(load_x(a)), Y(load_y(b)), T))
    elif spec.act is None:
        def impl(spec, a, b):
            return store(T(op(X(load_x(a)), Y(load_y(b)), T)))
    else:
        def impl(spec, a, b):
            return store(act(A(T(op(X(load_x(a)), Y(load_y(b)), T))), A))

    return impl


__all__ = ["KernelSpec", "KernelSpecType", "pointers", "element"]
