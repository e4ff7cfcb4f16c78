"""NumPy's float32 ``power`` on the CPU as arithmetic that vectorises, where C's ``powf`` is a
call per element (:func:`jitops.core.scalar.pow_f32`).

``|x| ** y`` is ``2 ** (y * log2|x|)`` in double: ``log2`` of ``m * 2**e`` (``m`` in
``[sqrt(1/2), sqrt(2))``) is ``e + 2 atanh(s) / ln 2``, ``s = (m - 1) / (m + 1)``, by its
series to ``s**13``; ``2 ** t`` is ``2**k``, made in the exponent bits, times a degree-9
polynomial of ``t - k``. Both are near double precision where float's is needed, so the result
is the correctly rounded float32 but within about ``2**-30`` of a rounding boundary (1 ulp
at most). C's special cases are chosen by selects, each computed on values that raise nothing
in the lanes it does not answer: the one rounding to float32 raises C's *overflow* and
*underflow*, ``1 / (±0)`` its *divide*, ``sqrt`` of the negative base its *invalid* for a
non-integer exponent, and quieting a signalling NaN *invalid*. A chunk of a row whose every
lane is :func:`calm` (a positive normal base, a normal exponent) runs :func:`core`, the same
arithmetic without those selects, which cost as much as the power itself.
"""

from __future__ import annotations

import math

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from ...core import scalar as _scalar
from ...core.scalar import double, floor_f, fma, quiet_f, single
from ..compile.jit import INNER, inner
from .spec import _sqrt  # LLVM's sqrt: a vector instruction, NaN and invalid below 0

_HALF_SQRT2_BITS = 0x3FE6A09E667F3BCD  # sqrt(1/2)'s bits
_MANTISSA = (1 << 52) - 1
_ONE_BITS = 1023 << 52
_QUIET_BIT = 1 << 22  # a float32 NaN's quiet bit
#: ``2 atanh(s) / ln 2 = s * sum(LOG[i] * s**(2 i))``
_L0, _L1, _L2, _L3, _L4, _L5, _L6 = (2.0 / (2 * i + 1) / math.log(2.0) for i in range(7))
#: ``2**f = sum(EXP[i] * f**i)``: Taylor's coefficients of ``exp(f ln 2)``, ``|f| <= 1/2``
(_E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8,
 _E9) = (math.log(2.0) ** i / math.factorial(i) for i in range(10))


@intrinsic
def _bits(typingctx, x):
    """A float's bits as the signed integer of its width."""
    if not isinstance(x, types.Float):
        return None
    width = x.bitwidth

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(width))

    return (types.int64 if width == 64 else types.int32)(x), codegen


@intrinsic
def _double_of_bits(typingctx, i):
    """The double whose bits are the int64 ``i``."""
    if i != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(i), codegen


@inner
def _idle(v):
    """A double in ``[1, 2)`` made of ``v``'s bits: what a lane computes on where its answer
    comes from elsewhere (a constant there would let the compiler move the computation onto
    ``v`` itself, raising what ``v`` would)."""
    return _double_of_bits((_bits(v) & _MANTISSA) | _ONE_BITS)


@inner
def _magnitude(x, y):
    """``|x| ** y`` in double, for finite nonzero ``x`` and ``y``: ``2**(y log2|x|)``, ``y
    log2|x|`` held within ``[-200, 200]`` (float32's overflow and underflow lie inside)."""
    bits = _bits(x) & 0x7FFFFFFFFFFFFFFF
    e = (bits - _HALF_SQRT2_BITS) >> 52  # |x| = m * 2**e, m in [sqrt(1/2), sqrt(2))
    m = _double_of_bits(bits - (e << 52))
    s = (m - 1.0) / (m + 1.0)
    z = s * s  # the series in z by Estrin's scheme: short chains, so vectors overlap
    z2 = z * z
    p = fma(z2 * z2, fma(z2, _L6, fma(z, _L5, _L4)),
            fma(z2, fma(z, _L3, _L2), fma(z, _L1, _L0)))
    t = y * fma(s, p, double(e))
    t = 200.0 if t > 200.0 else -200.0 if t < -200.0 else t
    k = floor_f(t + 0.5)
    f = t - k
    f2 = f * f
    f4 = f2 * f2  # (f4 * f4 would underflow for a tiny f: f4 times f4's coefficient)
    q = fma(f4, fma(f2, fma(f, _E7, _E6), fma(f, _E5, _E4)),
            fma(f2, fma(f, _E3, _E2), fma(f, _E1, _E0)))
    q = fma(f4, f4 * fma(f, _E9, _E8), q)
    return q * _double_of_bits((int(k) + 1023) << 52)


def _pow_f32(a, b):
    """C's ``powf(a, b)`` for float32 ``a`` and ``b`` (see the module).

    Two sets of tests, which must stay apart: the answer is picked by tests of the float32
    bits (``ua``, ``ub``: integer tests raise nothing where an ordered comparison of a NaN
    may) and of the values computed to raise a flag (a NaN, an infinity); the inputs of
    those computations are guarded by tests of the double bits (``ex``, ``ey``). LLVM treats
    flags as free: where a guard shared a test with the picks it would drop that test from
    the guard, and compute on the unguarded input in every lane."""
    one, zero, inf = single(1.0), single(0.0), single(math.inf)
    x, y = double(a), double(b)
    # the guards: finite nonzero x and y, and a negative x only to a whole power
    ex, ey = (_bits(x) >> 52) & 0x7FF, (_bits(y) >> 52) & 0x7FF
    finite = (ex != 0) & (ex != 0x7FF) & (ey != 0) & (ey != 0x7FF)
    y_finite = y if ey != 0x7FF else 0.0
    whole = y_finite - floor_f(y_finite) == 0.0
    x_negative = _bits(x) < 0
    core = finite & (whole | (not x_negative))
    idle = _idle(x)
    r = _magnitude(x if core else idle, y if core else _idle(y))
    # NaN and invalid for a negative base to a non-integer power: NaN only there
    bad = _sqrt(a if finite & x_negative & (not whole) else single(idle))
    # ±inf and divide for a zero base to a negative power: inf only there
    pole = one / (a if (ex == 0) & (ey != 0) & (ey != 0x7FF) & (_bits(y) < 0)
                  else single(idle))
    # the picks
    ua, ub = _bits(a) & 0x7FFFFFFF, _bits(b) & 0x7FFFFFFF
    a_nan, b_nan = ua > 0x7F800000, ub > 0x7F800000
    b_negative = _bits(b) < 0
    y_int = floor_f(y) == y
    half = y * 0.5
    flip = (_bits(a) < 0) & y_int & (floor_f(half) != half)  # negative, odd exponent
    result = single(-r if flip else r)  # C's overflow and underflow, only where core
    nan = quiet_f(a) if a_nan else quiet_f(b)  # a signalling NaN quieted: invalid
    toward = one if ua == 0x3F800000 else zero if (ua < 0x3F800000) != b_negative else inf
    edge = zero if (ua == 0) != b_negative else inf  # a zero or infinite base
    edge = -edge if flip else edge
    if ub == 0:
        return nan if a_nan & ((_bits(a) & _QUIET_BIT) == 0) else one
    if ua == 0x3F800000 and not (_bits(a) < 0):
        return nan if b_nan & ((_bits(b) & _QUIET_BIT) == 0) else one
    if a_nan | b_nan:
        return nan
    if ub == 0x7F800000:
        return toward
    if abs(pole) == inf:
        return -inf if flip else inf
    if (ua == 0) | (ua == 0x7F800000):
        return edge
    return bad if bad != bad else result


@inner
def calm(a, b):
    """Whether C's ``powf(a, b)`` is :func:`core`'s: ``a`` positive and normal (finite, not
    zero or subnormal), ``b`` normal. Tests of the bits alone, so they raise nothing,
    whatever the lane holds."""
    ua, ub = _bits(a), _bits(b)
    eb = (ub >> 23) & 0xFF
    return (ua >= 0x00800000) & (ua < 0x7F800000) & (eb != 0) & (eb != 0xFF)


@inner
def core(a, b):
    """``powf(a, b)`` where :func:`calm`: the arithmetic :func:`_pow_f32` does in such a
    lane, with none of its special cases."""
    return single(_magnitude(double(a), double(b)))


@inner
def general(a, b):
    """``powf(a, b)`` in every case (:func:`_pow_f32`), for a row to call."""
    return _scalar.pow_f32(a, b)


@overload(_scalar.pow_f32, jit_options=INNER, inline="always")
def _ov_pow_f32(a, b):
    if a == types.float32 and b == types.float32:
        return _pow_f32  # inlined by Numba; the helpers, small, by LLVM
    return None
