"""float16 and bfloat16 on Numba's CPU target, which has neither type.

Both travel as uint16 bit patterns and compute in float32, rounding once on the store, as
NumPy's float16 loops do. float16 widens by integer work and one exact multiply
(:func:`_half_widen`) and narrows with LLVM's ``fptrunc`` (F16C; IEEE round-to-nearest-even,
its flags reported). float64 -> float16 would call ``__truncdfhf2``, which a JIT may not find
(LLVM then aborts), so float64 narrows to float32 rounding to odd first, which keeps the one
correct rounding that follows. bfloat16 is the top half of a float32: a shift to widen, and
round-to-nearest-even in integer arithmetic to narrow (a NaN stays a NaN).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


def _to_float_round_to_odd(builder, d):
    """float64 -> float32 rounded to odd: the nearest float32 toward zero, its last bit set
    when the conversion was inexact. NaN and infinities convert as they are; a value beyond
    float32's range becomes its largest finite (odd) value, which still rounds to inf below."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    f = builder.fptrunc(d, f32)  # nearest
    back = builder.fpext(f, d.type)
    inexact = builder.fcmp_ordered("one", back, d)
    fabs = builder.module.declare_intrinsic("llvm.fabs", [d.type])
    away = builder.fcmp_ordered(">", builder.call(fabs, [back]), builder.call(fabs, [d]))
    bits = builder.bitcast(f, i32)
    # rounded away from zero: one step back toward zero (sign-magnitude bits)
    bits = builder.select(away, builder.sub(bits, ir.Constant(i32, 1)), bits)
    bits = builder.select(inexact, builder.or_(bits, ir.Constant(i32, 1)), bits)
    return builder.bitcast(bits, f32)



def _widening(name: str, doc: str, widen):
    """An intrinsic: a 16-bit pattern (uint16) -> its float32 value, ``widen(builder, i16)``."""

    def fn(typingctx, bits):
        if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
            return None

        def codegen(context, builder, signature, args):
            return widen(builder, args[0])

        return types.float32(bits), codegen

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return intrinsic(fn)


def _narrowing(name: str, doc: str, narrow):
    """An intrinsic: a float32 or float64 value -> a 16-bit pattern (uint16), rounded to
    nearest even once: ``narrow(builder, float32)``, float64 first narrowed to odd."""

    def fn(typingctx, value):
        if not isinstance(value, types.Float):
            return None

        def codegen(context, builder, signature, args):
            v = args[0]
            if value.bitwidth == 64:
                v = _to_float_round_to_odd(builder, v)
            return narrow(builder, v)

        return types.uint16(value), codegen

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return intrinsic(fn)


def _half_widen(builder, bits):
    """float16 bits -> float32 without F16C: exact, and raising no floating-point flag (F16C widens
    one value in a register whose other lanes may hold a signalling NaN, raising a spurious
    *invalid*). The exponent and significand move into float32's places and one multiply by
    2**112 rebiases them exactly, subnormals included; infinities and NaNs keep their payload,
    as NumPy's conversion does. Vectorises.
    """
    i32, f32 = ir.IntType(32), ir.FloatType()

    def c(v):
        return ir.Constant(i32, v)

    h = builder.zext(bits, i32)
    em = builder.and_(h, c(0x7FFF))  # exponent and significand
    f = builder.fmul(builder.bitcast(builder.shl(em, c(13)), f32), ir.Constant(f32, 2.0 ** 112))
    u = builder.bitcast(f, i32)
    special = builder.icmp_unsigned(">=", em, c(0x7C00))  # infinity or NaN
    u = builder.select(special, builder.or_(u, c(0x7F800000)), u)
    sign = builder.shl(builder.xor(h, em), c(16))
    return builder.bitcast(builder.or_(u, sign), f32)


def _half_narrow(builder, v):
    """``fptrunc`` behind ``llvm.canonicalize`` (a multiply by 1.0, which changes no value or
    flag the narrowing would not). Without it LLVM rewrites ``fptrunc(copysign(x, y))`` to
    narrow ``y`` too, a ``y`` whose other bits it has left as garbage: a spurious *overflow* on
    CPUs that narrow to float16 one value at a time (AVX512-FP16)."""
    keep = builder.module.declare_intrinsic("llvm.canonicalize", [v.type])
    return builder.bitcast(builder.fptrunc(builder.call(keep, [v]), ir.HalfType()),
                           ir.IntType(16))


def _bfloat_widen(builder, bits):
    i32 = ir.IntType(32)
    return builder.bitcast(builder.shl(builder.zext(bits, i32), ir.Constant(i32, 16)),
                           ir.FloatType())


def _bfloat_narrow(builder, v):
    i32 = ir.IntType(32)
    bits = builder.bitcast(v, i32)
    lsb = builder.and_(builder.lshr(bits, ir.Constant(i32, 16)), ir.Constant(i32, 1))
    rounded = builder.add(builder.add(bits, ir.Constant(i32, 0x7FFF)), lsb)
    # a NaN is not rounded: its top bits as they are (min/max pass an input's NaN through
    # unchanged, as NumPy's float16 and ml_dtypes' loops do), made quiet only where its
    # payload lies in the bits cut off (it would read as an infinity)
    top = builder.and_(bits, ir.Constant(i32, 0x007F0000))
    empty = builder.icmp_unsigned("==", top, ir.Constant(i32, 0))
    quiet = builder.select(empty, builder.or_(bits, ir.Constant(i32, 0x00400000)), bits)
    nan = builder.fcmp_unordered("uno", v, v)
    out = builder.lshr(builder.select(nan, quiet, rounded), ir.Constant(i32, 16))
    return builder.trunc(out, ir.IntType(16))


#: Integer dtypes (bool as its byte) that widen to float32 exactly through
#: :func:`small_int_to_float` / :func:`bool_byte_to_float`.
SMALL_INTS = frozenset({"bool", "int8", "uint8", "int16", "uint16"})


def _exact_float(builder, i32_value):
    """float32 of an int32 below 2**22 in magnitude, exactly, in registers whose other lanes
    hold zeros: its bits added to those of 1.5 * 2**23 (one unit there is 1), and 1.5 * 2**23
    subtracted. LLVM's ``sitofp`` (``cvtsi2ss``) writes one lane of a register and keeps the
    rest; narrowed to float16 (F16C's packed ``vcvtps2ph``), a tiny value there raised a
    spurious *underflow*. Vectorises as an integer add and a subtraction."""
    i32, f32 = ir.IntType(32), ir.FloatType()
    bits = builder.add(i32_value, ir.Constant(i32, 0x4B400000))
    return builder.fsub(builder.bitcast(bits, f32), ir.Constant(f32, 12582912.0))


@intrinsic
def small_int_to_float(typingctx, v):
    """An integer of at most 16 bits -> its float32 value (:func:`_exact_float`)."""
    if not isinstance(v, types.Integer) or v.bitwidth > 16:
        return None

    def codegen(context, builder, signature, args):
        widen = builder.sext if v.signed else builder.zext
        return _exact_float(builder, widen(args[0], ir.IntType(32)))

    return types.float32(v), codegen


@intrinsic
def bool_byte_to_float(typingctx, v):
    """A bool's byte -> 0.0 or 1.0 (any nonzero byte is True, as NumPy reads it) as float32
    (:func:`_exact_float`)."""
    if not isinstance(v, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        nonzero = builder.icmp_unsigned("!=", args[0], ir.Constant(args[0].type, 0))
        return _exact_float(builder, builder.zext(nonzero, ir.IntType(32)))

    return types.float32(v), codegen


half_to_float = _widening("half_to_float", "float16 bits (uint16) -> float32 value.",
                          _half_widen)
float_to_half = _narrowing("float_to_half", "float32 (or float64) -> float16 bits (uint16).",
                           _half_narrow)
bfloat_to_float = _widening("bfloat_to_float", "bfloat16 bits (uint16) -> float32 value.",
                            _bfloat_widen)
float_to_bfloat = _narrowing("float_to_bfloat",
                             "float32 (or float64) -> bfloat16 bits (uint16).", _bfloat_narrow)

#: The 16-bit float dtypes the kernels store as their bits: dtype name -> (widening to
#: float32, narrowing from float32 or float64). The one table the built-in kernels' loads and
#: stores (jitops.cpu.kernels.spec) and the user ops' element source (jitops.cpu.kernels.nary) read.
CONVERSIONS = {"float16": (half_to_float, float_to_half),
               "bfloat16": (bfloat_to_float, float_to_bfloat)}
