"""float16 on Numba's CPU target, which has no float16 type at all.

float16 operands travel as their uint16 bit patterns; these two intrinsics convert with LLVM's
``fpext``/``fptrunc`` (hardware F16C on x86-64), which is bit-exact IEEE round-to-nearest-even
and vectorises. Arithmetic happens in float32, then rounds once to float16, as NumPy's own
float16 loops do.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def half_to_float(typingctx, bits):
    """uint16 bit pattern -> float32 value."""
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None
    sig = types.float32(bits)

    def codegen(context, builder, signature, args):
        h = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(h, ir.FloatType())

    return sig, codegen


@intrinsic
def float_to_half(typingctx, value):
    """float32 (or float64) value -> uint16 bit pattern, rounded to nearest even once."""
    if not isinstance(value, types.Float):
        return None
    sig = types.uint16(value)

    def codegen(context, builder, signature, args):
        h = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(h, ir.IntType(16))

    return sig, codegen
