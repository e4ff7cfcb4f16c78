"""The one table of scalar math: every op and every fused activation, as plain Python.

These functions are the single definition of jitops' arithmetic. They import nothing from
Numba: the CPU backend compiles them with ``numba.njit`` and the CUDA backend with
``numba.cuda.jit(device=True)``, so both targets run literally the same expressions.

Operands arrive already converted to the compute type ``T`` (a Numba number class, passed so
constants such as 0.01 are built in that type instead of promoting float32 work to float64).
Written as branchy expressions rather than ``np.fmin``/``max`` so they compile on both targets
and pin down NaN and signed-zero behaviour exactly.
"""

from __future__ import annotations

import cmath
import inspect
import math

import numpy as np

from .errstate import DIVIDE, INVALID, OVERFLOW, UNDERFLOW


# -- binary ops ------------------------------------------------------------------------------
def add(a, b, T):
    return a + b


def subtract(a, b, T):
    return a - b


def multiply(a, b, T):
    return a * b


def divide(a, b, T):
    # True division; the kernels use Numba's numpy error model, so /0 gives inf or nan.
    return a / b


def fma(a, b, c):
    """``a * b + c`` rounded once (fused multiply-add).

    Plain Python here; each backend compiles it to its hardware instruction (the CPU through
    LLVM's ``llvm.fma``, see :mod:`jitops.cpu.kernels.spec`; CUDA through ``cuda.fma``).
    """
    return a * b + c


def trunc_divide(a, b, T):
    """Signed integer division truncating toward zero (Paddle ``elementwise_div``, ONNX ``Div``).

    The caller rejects zero divisors before launching. ``b == -1`` is special-cased because
    ``INT_MIN / -1`` traps on x86; negation wraps instead, like every other integer overflow.
    Every intermediate stays in ``T``: a Python literal would promote (Numba's rules) and an
    int64/uint64 mix goes through float64, which is not exact past 2**53.
    """
    if b == T(-1):
        return T(-a)
    q = T(a // b)
    if q < T(0) and T(q * b) != a:
        q = T(q + T(1))
    return q


def trunc_divide_unsigned(a, b, T):
    """Unsigned integer division: truncation and floor agree; exact for every width."""
    return T(a // b)


# Complex multiply and divide, written as NumPy's loops compute them so that inf, NaN and
# signed-zero results are NumPy's (Numba's own complex division also raises on a zero divisor,
# which inside a kernel would leave elements unwritten). Parts are computed in the part type.
def complex_multiply(a, b, T):
    """NumPy's scalar loop (and its SIMD loop on CPUs without FMA)."""
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    return T(complex(ar * br - ai * bi, ar * bi + ai * br))


def complex_multiply_fma(a, b, T):
    """NumPy's SIMD loop where the CPU has FMA (``simd_cmul``: one fused step per part)."""
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    return T(complex(fma(ar, br, -(ai * bi)), fma(ar, bi, ai * br)))


def ge_signaling(a, b):
    """``a >= b`` as C compiles it: an ordered comparison that raises *invalid* where ``a`` or
    ``b`` is NaN (x86's ``comisd``; LLVM's own ``fcmp`` is quiet). Each CPU target compiles
    its own (jitops.cpu.kernels.spec); on a target without floating-point flags it is just
    ``>=``."""
    return a >= b


def zeros(a, b):
    """Whether ``a`` and ``b`` are both zeros (of either sign), tested on their bits where a
    backend can: ``a == 0 and b == 0``'s answer by a test the compiler cannot identify with
    those comparisons, so a guard made with it is not dropped where a pick repeats them
    (LLVM then knows which operand the guard's select gives in the picked lanes, and
    computes on the unguarded one in every lane of a vector)."""
    return a == 0 and b == 0


def complex_divide(a, b, T):
    """Smith's algorithm, with NumPy's ``@TYPE@_divide`` loop's (``loops.c.src``) values and
    floating-point flags.

    NumPy's two branches differ only in which divisor part is the larger: here the parts are
    chosen first and one set of operations runs, so that where the divisor is the same for
    every element (a scalar, a broadcast row) and the compiler computes it once, no operation
    of the branch not taken raises a flag NumPy's loop does not. A zero divisor gives NumPy's
    inf/nan (each part divided by +0), a NaN part its *invalid* (its comparison's).
    """
    in1r, in1i, in2r, in2i = a.real, a.imag, b.real, b.imag
    one = T(1).real
    zero = one - one
    in2r_abs = abs(in2r)
    in2i_abs = abs(in2i)
    real_first = ge_signaling(in2r_abs, in2i_abs)
    nil = in2r_abs == zero and in2i_abs == zero  # the pick
    idle = zeros(in2r, in2i)  # the same, for the guards (see zeros)
    big = in2r if real_first else in2i
    small = in2i if real_first else in2r
    if idle:  # every operation below on harmless values (``small`` is a zero already); the
        # parts divided by +0 instead
        big, p, q, dr, di = one, zero, zero, in2r_abs, in2i_abs
    else:
        p, q, dr, di = in1r, in1i, one, one
    rat = small / big
    scl = one / (big + small * rat)
    g1 = one if real_first else rat
    g2 = rat if real_first else one
    # NumPy's (in1r + in1i * rat, in1i - in1r * rat) or (in1r * rat + in1i, in1i * rat - in1r),
    # a factor of one where a part is not multiplied (exact, and raising nothing)
    re = (p * g1 + q * g2) * scl
    im = (q * g1 - p * g2) * scl
    sr = in1r / dr
    si = in1i / di
    if nil:
        return T(complex(sr, si))
    return T(complex(re, im))


# NaN rules. Ties (including 0.0 vs -0.0) return the second operand, as NumPy's float32 and
# float64 loops do. maximum/minimum propagate NaN (the first operand's NaN when both are NaN).
def maximum(a, b, T):
    return a if (a > b or a != a) else b


def minimum(a, b, T):
    return a if (a < b or a != a) else b


# fmax/fmin ignore a NaN; when both are NaN the result is the *first* operand (its bits), as
# the paddle.fmin documentation says. (NumPy 2.4 returns the second payload.)
def fmax(a, b, T):
    return a if (a > b or b != b) else b


def fmin(a, b, T):
    return a if (a < b or b != b) else b


# float16: NumPy's half loops compare with npy_half_ge/le, so a tie (0.0 vs -0.0) returns the
# *first* operand; NaN rules as above.
def maximum_half(a, b, T):
    return a if (a >= b or a != a) else b


def minimum_half(a, b, T):
    return a if (a <= b or a != a) else b


def fmax_half(a, b, T):
    return a if (a >= b or b != b) else b


def fmin_half(a, b, T):
    return a if (a <= b or b != b) else b


# -- NumPy's binary family (numpy.floor_divide ... numpy.greater_equal) ------------------------
# Each is NumPy's own loop (numpy/_core/src/umath, npy_math_internal.h.src), written branch for
# branch so that values, signed zeros, NaNs and floating-point flags come out as NumPy's. The
# flags NumPy raises by hand (npy_set_floatstatus_*) come from raise_flags.

LOGE2 = 0.693147180559945309417232121458176568
LOG2E = 1.442695040888963407359924681001892137


def raise_flags(flags, v):
    """``v``, having raised the floating-point exception ``flags`` (jitops.core.errstate's
    bits), as NumPy's ``npy_set_floatstatus_*``: each backend compiles its own (the CPU sets
    them in MXCSR; a GPU keeps none)."""
    return v


# C library functions whose Python ``math`` twins raise where C answers (a zero divisor, a
# domain error, an overflow) or change type: each backend compiles its own; the bodies here
# run only in Numba's CUDA simulator, with C's answers.
def fmod_c(a, b):
    """C's ``fmod`` (the dividend's sign; NaN and *invalid* for a zero divisor or an infinite
    dividend)."""
    if a != a or b != b:
        return a + b
    if math.isinf(a) or b == 0:
        return math.nan
    return math.fmod(a, b)


def quiet_f(a):
    """``a``, a signalling NaN quieted (*invalid* raised) as C's arithmetic on it does."""
    return a


def floor_f(a):
    """``floor`` in ``a``'s own float type (Python's ``math.floor`` gives an int)."""
    return float(math.floor(a)) if math.isfinite(a) else a


def double(v):
    """``v`` as a C double (Numba's ``float()`` keeps a float32 a float32); here NumPy's, whose
    division by zero gives inf as C's does."""
    return np.float64(v)


def single(v):
    """``v`` as a C float (float32)."""
    return np.float32(v)


def pow_c(a, b):
    """C's ``pow``."""
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf if a > 0 or float(b) % 2 == 0 else -math.inf
    except ValueError:
        if a == 0:
            return math.copysign(math.inf, a) if float(b) % 2 == 1 else math.inf
        return math.nan


def pow_f32(a, b):
    """C's ``powf`` of float32 ``a`` and ``b``: the CPU compiles arithmetic that vectorises
    (jitops.cpu.kernels.power32), CUDA the device's ``powf``; here, ``pow`` rounded."""
    return np.float32(pow_c(float(a), float(b)))


def cpow_c(a, b):
    """C's ``cpow`` (glibc's: ``cexp(b * clog(a))``), for complex ``a`` and ``b`` of one type;
    reached only with ``a`` and ``b`` nonzero (:func:`power_complex`). The body here runs
    only in Numba's CUDA simulator."""
    try:
        return cmath.exp(b * cmath.log(a))
    except (OverflowError, ValueError):
        return complex(math.nan, math.nan)


def sqrt_c(a):
    """C's ``sqrt`` (NaN for a negative number, where Python's raises; ``-0.0`` kept)."""
    if a != a or a == 0:
        return a
    return math.sqrt(a) if a > 0 else math.nan


def ldexp_c(a, e):
    """C's ``ldexp``."""
    try:
        return math.ldexp(a, int(e))
    except OverflowError:
        return math.copysign(math.inf, a)


def equal(a, b, T):
    return a == b


def not_equal(a, b, T):
    return a != b


def less(a, b, T):
    return a < b


def less_equal(a, b, T):
    return a <= b


def greater(a, b, T):
    return a > b


def greater_equal(a, b, T):
    return a >= b


# Complex order is NumPy's lexicographic one (loops.c.src's CLT ... CGE): a NaN imaginary part
# takes part only where the real parts are equal.
def less_complex(a, b, T):
    return ((a.real < b.real and a.imag == a.imag and b.imag == b.imag)
            or (a.real == b.real and a.imag < b.imag))


def less_equal_complex(a, b, T):
    return ((a.real < b.real and a.imag == a.imag and b.imag == b.imag)
            or (a.real == b.real and a.imag <= b.imag))


def greater_complex(a, b, T):
    return less_complex(b, a, T)


def greater_equal_complex(a, b, T):
    return less_equal_complex(b, a, T)


def order_mixed(a, b, T):
    """-1, 0 or 1 as ``a`` is below, equal to or above ``b``, exactly, where one is an int64
    and the other a uint64 (NumPy 2's ``qQ``/``Qq`` comparison loops); ``T`` is uint64."""
    if a < 0:
        return -1
    if b < 0:
        return 1
    if T(a) < T(b):
        return -1
    return 1 if T(a) > T(b) else 0


def equal_mixed(a, b, T):
    return order_mixed(a, b, T) == 0


def not_equal_mixed(a, b, T):
    return order_mixed(a, b, T) != 0


def less_mixed(a, b, T):
    return order_mixed(a, b, T) < 0


def less_equal_mixed(a, b, T):
    return order_mixed(a, b, T) <= 0


def greater_mixed(a, b, T):
    return order_mixed(a, b, T) > 0


def greater_equal_mixed(a, b, T):
    return order_mixed(a, b, T) >= 0


def always_false(a, b, T):
    """A comparison decided by the operands' types alone (a Python int beyond an integer
    array's range: NumPy 2 compares it exactly)."""
    return False


def always_true(a, b, T):
    return True


# Logical ops take the operands as loaded (NumPy's ``??->?`` loops: nonzero, NaN included, is
# True; Numba's own cast to bool would truncate an integer to its lowest bit).
def logical_and(a, b, T):
    return a != 0 and b != 0


def logical_or(a, b, T):
    return a != 0 or b != 0


def logical_xor(a, b, T):
    return (a != 0) != (b != 0)


def bitwise_and(a, b, T):
    return a & b


def bitwise_or(a, b, T):
    return a | b


def bitwise_xor(a, b, T):
    return a ^ b


def _shifts(bits):
    """NumPy's ``npy_lshift``/``npy_rshift`` for ``bits``-wide integers: a count outside
    [0, bits) shifts everything out (0, or -1 for a negative number shifted right)."""
    def left_shift(a, b, T):
        if b < T(0) or b >= T(bits):
            return T(0)
        return T(a << b)

    def right_shift(a, b, T):
        if b < T(0) or b >= T(bits):
            return T(-1) if a < T(0) else T(0)
        return T(a >> b)

    return left_shift, right_shift


SHIFTS = {bits: _shifts(bits) for bits in (8, 16, 32, 64)}


def floor_divide_signed(a, b, T):
    """NumPy's ``floor_div_@TYPE@``: 0 with *divide* for a zero divisor, the minimum with
    *overflow* for minimum // -1."""
    if b == T(0):
        return raise_flags(DIVIDE, T(0))
    if b == T(-1):
        if a != T(0) and a == T(-a):
            return raise_flags(OVERFLOW, a)
        return T(-a)
    return T(a // b)


def _floor_divide_narrow(bits):
    """NumPy's floor division of signed integers of at most 32 bits, in double (at most 16
    bits: in float, twice the lanes): a quotient of two such is an integer or a relative
    distance from one above the rounding of a division of that width (2**-22 for double
    and 32 bits, 2**-9 for float and 16), so its floor is exact, and a loop of it vectorises
    (x86 has no vector integer division). NumPy's flags come from arithmetic done on every
    element: the one division divides 1 by a zero divisor (inf, *divide*; the result is 0), the
    dividend times the largest power of ten (else 0) *overflow* for minimum // -1 only (the
    result is the minimum: 2**(bits-1) less 2**bits)."""
    wide = single if bits <= 16 else double
    top, huge = wide(2.0 ** (bits - 1)), wide(1e38 if bits <= 16 else 1e308)
    zero_w, one_w = wide(0.0), wide(1.0)

    def floor_divide_narrow(a, b, T):
        zero = b == T(0)
        # one division: a zero divisor divides 1 (inf, and NumPy's *divide*; the result is 0)
        q = floor_f(wide(T(1) if zero else a) / wide(b))
        if wide(a) * (huge if q == top else zero_w) == one_w:  # never: keeps the *overflow*
            q = zero_w
        # minimum // -1 (top) and the zero divisor's inf both become the minimum: no
        # conversion sees a value out of range, should the compiler convert before the select
        q = min(q, top) - (top + top if q >= top else zero_w)
        return T(zero_w if zero else q)

    return floor_divide_narrow


NARROW_FLOOR_DIVIDES = {bits: _floor_divide_narrow(bits) for bits in (8, 16, 32)}


def _floor_divide_by_one(bits):
    """:func:`_floor_divide_narrow` where one divisor ``b`` serves the whole loop (NumPy's
    libdivide case): ``floor(a * (1 / b) + 1 / (2|b|))``, a multiplication where that
    divides, with ``1 / b`` computed once a row. The two divisors with flags, 0 (*divide*)
    and -1 (*overflow* for the minimum), take one branch, which the compiler lifts out of
    the loop (its test is of ``b`` alone), leaving a loop that vectorises.
    Exact: the product is within ``2**-8 / |b|`` of ``a / b`` (float, 16 bits; double,
    32 bits: ``2**-21 / |b|``), a non-integer quotient is at least ``1 / |b|`` from an
    integer, so the half-step lifts an integer quotient computed a little low and carries no
    other across one."""
    wide = single if bits <= 16 else double
    half_w, one_w = wide(0.5), wide(1.0)

    def floor_divide_by_one(a, b, T):
        if (b == T(0)) | (b == T(-1)):  # one test: one loop lifted out
            if b == T(0):
                return raise_flags(DIVIDE, T(0))
            if a != T(0) and a == T(-a):
                return raise_flags(OVERFLOW, a)
            return T(-a)
        r = one_w / wide(b)
        return T(floor_f(wide(a) * r + half_w * abs(r)))

    return floor_divide_by_one


#: Entries for a divisor of one element (the pipeline chooses them by its size).
BY_ONE_FLOOR_DIVIDES = {bits: _floor_divide_by_one(bits) for bits in (8, 16, 32)}


def _remainder_narrow(dividend_sign: bool):
    """NumPy's integer ``remainder`` (the divisor's sign) or, ``dividend_sign``, ``fmod`` (the
    dividend's), of integers of at most 32 bits, in double, as :func:`_floor_divide_narrow`:
    ``a - floor(a / b) * b`` is exact (the floored quotient is, and every product and
    difference stays below 2**33); 0 with *divide* for a zero divisor, whose division is of
    1 (:func:`_floor_divide_narrow`); no flag for minimum % -1 (its remainder is 0)."""
    bound = 2.0 ** 33

    def remainder_narrow(a, b, T):
        zero = b == T(0)
        d = double(b)
        # one division: a zero divisor divides 1 (inf: NumPy's *divide*), its quotient then
        # bounded (times d == 0 it takes nothing from a; the result is 0)
        q = min(floor_f(double(T(1) if zero else a) / d), bound)
        r = double(a) - q * d
        if dividend_sign and r != 0.0 and (r < 0.0) != (double(a) < 0.0):
            r = r - d
        # a zero divisor's 0 as r times 0, not picked: the division stays live where one
        # zero divides a whole row (picked, LLVM dropped it there, and NumPy's *divide*)
        return T(r * (0.0 if zero else 1.0))

    return remainder_narrow


#: op -> its narrow loop's entry, remainder and fmod: signed and unsigned integers alike
#: (for unsigned ones the two agree).
NARROW_REMAINDERS = {"remainder": _remainder_narrow(False), "fmod": _remainder_narrow(True)}


def floor_divide_unsigned(a, b, T):
    if b == T(0):
        return raise_flags(DIVIDE, T(0))
    return T(a // b)


def remainder_signed(a, b, T):
    """Python's modulo (the divisor's sign); 0 with *divide* for a zero divisor."""
    if b == T(0):
        return raise_flags(DIVIDE, T(0))
    if b == T(-1):
        return T(0)
    return T(a % b)


def remainder_unsigned(a, b, T):
    if b == T(0):
        return raise_flags(DIVIDE, T(0))
    return T(a % b)


def fmod_signed(a, b, T):
    """C's ``%`` (the dividend's sign); 0 with *divide* for a zero divisor."""
    if b == T(0):
        return raise_flags(DIVIDE, T(0))
    if b == T(-1):
        return T(0)
    r = T(a % b)
    if r != T(0) and (r < T(0)) != (a < T(0)):
        r = T(r - b)
    return r


def negative(v, T):
    """C's quiet ``isless(v, 0)``: false for NaN, raising nothing (an ordered ``<`` of a NaN
    raises *invalid* on x86; only equality tests and the sign bit are read here)."""
    return v == v and v != T(0) and T(math.copysign(T(1), v)) < T(0)


def _plus_if(flip, mod, b, T):
    """``mod + b`` where ``flip``, else ``mod`` (nonzero) plus its own signed zero: LLVM
    computes a branch's ``mod + b`` whether taken or not, and where ``mod`` and ``b`` have one
    sign (not taken) that sum may overflow, a warning NumPy does not give. ``mod * 0`` is no
    constant LLVM could fold the select away with."""
    return mod + (b if flip else mod * T(0))


def npy_divmod(a, b, T):
    """NumPy's ``npy_divmod``: the floored quotient and Python's remainder, from ``fmod``;
    its quiet comparisons (``isless``, ``isgreater``) as :func:`negative`."""
    mod = T(fmod_c(a, b))
    div = (a - mod) / b
    if mod != T(0):  # (NaN included, as C's ``if (mod)``)
        flip = negative(b, T) != negative(mod, T)
        mod = _plus_if(flip, mod, b, T)
        if flip:
            div = div - T(1)
    else:
        mod = T(math.copysign(T(0), b))
    if div != T(0):
        floordiv = T(floor_f(div))
        if negative(T(0.5) - (div - floordiv), T):
            floordiv = floordiv + T(1)
    else:
        floordiv = T(math.copysign(T(0), a / b))
    return floordiv, mod


def divmod_float(a, b, T):
    """:func:`floor_divide_float` and :func:`remainder_float` from one ``fmod``."""
    if b == T(0):
        return a / b, T(fmod_c(a, b))
    return npy_divmod(a, b, T)


def floor_divide_float(a, b, T):
    """NumPy's ``npy_floor_divide``: ``a / b`` for a zero divisor."""
    if b == T(0):
        return a / b
    return npy_divmod(a, b, T)[0]


def remainder_float(a, b, T):
    """NumPy's ``npy_remainder``: ``fmod`` for a zero divisor (NaN, *invalid*)."""
    if b == T(0):
        return T(fmod_c(a, b))
    return npy_divmod(a, b, T)[1]


def fmod_float(a, b, T):
    if a != a:  # NumPy's fmod gives the dividend's NaN where both are NaN (quieted)
        return quiet_f(a)
    return T(fmod_c(a, b))


def power_int(a, b, T):
    """NumPy's integer power (squaring, wrapping); a negative exponent is refused before the
    launch, as NumPy's ValueError."""
    if b == T(0) or a == T(1):
        return T(1)
    out = a if b & T(1) else T(1)
    b = T(b >> T(1))
    while b > T(0):
        a = T(a * a)
        if b & T(1):
            out = T(out * a)
        b = T(b >> T(1))
    return out


# -- Paddle's legacy elementwise_floordiv / _mod / _pow (paddle/phi/kernels/funcs/
#    elementwise_functor.h, as Paddle 3.3.1 answers): integer division by zero is refused
#    before the launch (Paddle's error); minimum // -1 and minimum % -1, where Paddle's CPU
#    kernel dies of SIGFPE, wrap as every other integer overflow.
def paddle_floor_divide_signed(a, b, T):
    if b == T(-1):
        return T(-a)
    return T(a // b)


def _paddle_floor_divide_narrow(bits):
    """Paddle's (and OpenVINO's) floor division of signed integers of at most 32 bits, in
    double (at most 16: float), as :func:`_floor_divide_narrow` (exact, and it vectorises):
    no zero divisor reaches it (refused before the launch) and no flag is reported; minimum
    // -1 wraps to the minimum."""
    wide = single if bits <= 16 else double
    top, zero_w = wide(2.0 ** (bits - 1)), wide(0.0)

    def paddle_floor_divide_narrow(a, b, T):
        q = floor_f(wide(a) / wide(b))
        return T(q - (top + top if q == top else zero_w))

    return paddle_floor_divide_narrow


PADDLE_NARROW_FLOOR_DIVIDES = {bits: _paddle_floor_divide_narrow(bits) for bits in (8, 16, 32)}


def paddle_remainder_float(a, b, T):
    """Python's remainder from ``fmod``, but a zero keeps the dividend's sign (``-6 % 3`` is
    -0.0, NumPy's +0.0); NaN for a zero divisor."""
    mod = T(fmod_c(a, b))
    if mod != T(0):
        mod = _plus_if(negative(b, T) != negative(mod, T), mod, b, T)
    return mod


def pow_cast(a, b, top, T):
    """C's ``pow`` of ``a`` and ``b`` in double, cast to ``T`` as x86 casts: truncated, and
    the minimum (``-top``) where NaN, infinite or beyond ``[-top, top)``."""
    v = pow_c(double(a), double(b))
    if v != v or v >= top or v < -top:
        return T(-top)
    return T(v)


def _paddle_power(bits):
    """Paddle's integer power for ``bits``-wide integers: a negative exponent gives 0 (1 and
    -1 give their powers); else C's ``pow`` in double, cast as x86 casts (an out-of-range
    value becomes the minimum: ``3 ** 40`` on int32 is -2147483648, not NumPy's wrap)."""
    top = 2.0 ** (bits - 1)

    def paddle_power_int(a, b, T):
        if b < T(0):
            if a == T(1):
                return T(1)
            if a == T(-1):
                return T(-1) if b & T(1) else T(1)
            return T(0)
        return pow_cast(a, b, top, T)

    return paddle_power_int


PADDLE_POWERS = {bits: _paddle_power(bits) for bits in (8, 16, 32, 64)}


# -- OpenVINO's opset (jitops.openvino): the spec's semantics, its reference implementation
#    (src/core/reference) where the spec is silent. Integer division by zero is refused before
#    the launch (the reference throws); minimum / -1 wraps.
def ov_floor_mod_float(a, b, T):
    """``x - y * floor(x / y)`` in double, as the reference (a zero result is +0.0 there,
    NumPy's takes the divisor's sign)."""
    xd, yd = double(a), double(b)
    return T(xd - yd * floor_f(xd / yd))


def ov_mod_float(a, b, T):
    """``x - trunc(x / y) * y`` in the compute type, as the reference (not C's fmod)."""
    q = a / b
    t = floor_f(q) if q >= T(0) else -floor_f(-q)
    return T(a - T(t * b))


def _ov_power(bits):
    """The reference's integer power for ``bits``-wide integers: C's ``pow`` in double, cast as
    x86 casts (truncated; beyond the dtype, NaN or infinite: the minimum)."""
    top = 2.0 ** (bits - 1)

    def ov_power_int(a, b, T):
        return pow_cast(a, b, top, T)

    return ov_power_int


OV_POWERS = {bits: _ov_power(bits) for bits in (8, 16, 32, 64)}


def ov_squared_difference(a, b, T):
    d = T(a - b)
    return T(d * d)


def ov_maximum(a, b, T):
    """``std::max(a, b)``: ``a`` unless ``a < b`` (a NaN in ``b`` gives ``a``, in ``a`` NaN)."""
    return b if a < b else a


def ov_minimum(a, b, T):
    """``std::min(a, b)``: ``a`` unless ``b < a``."""
    return b if b < a else a


def power_float(a, b, T):
    return T(pow_c(a, b))


def power_float32(a, b, T):
    """NumPy's float32 ``power``: C's ``powf`` (:func:`pow_f32`)."""
    return T(pow_f32(a, b))


def _reciprocal_complex(r, T):
    """NumPy's ``cdiv(1, r)`` of its complex power (npymath's Smith division, not the divide
    loop's): each part of 1 divided by +0 for a zero ``r``."""
    one = T(1).real
    zero = one - one
    rr, ri = r.real, r.imag
    abs_r, abs_i = abs(rr), abs(ri)
    if ge_signaling(abs_r, abs_i):
        if abs_r == zero and abs_i == zero:
            return T(complex(one / abs_r, zero / abs_i))
        rat = ri / rr
        scl = one / (rr + ri * rat)
        q = complex((one + zero * rat) * scl, (zero - one * rat) * scl)
    else:
        rat = rr / ri
        scl = one / (ri + rr * rat)
        q = complex((one * rat + zero) * scl, (zero * rat - one) * scl)
    if abs_r != abs_r or abs_i != abs_i:  # its comparison's *invalid*, which LLVM drops
        q = raise_flags(INVALID, q)  # where both of its arms give NaN
    return T(q)


def power_complex(a, b, T):
    """NumPy's complex power (npymath's ``npy_cpow``): 1 for a zero exponent; for a zero
    base, 0 where the exponent's real part is positive, else NaN with *invalid*; an integer
    exponent below 100 in magnitude by repeated multiplication (binary powers, NumPy's
    ``cmul``, then ``1 / r`` for a negative one); any other through C's ``cpow``."""
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    one = T(1).real
    zero = one - one
    hundred = T(100).real
    if br == zero and bi == zero:
        return T(complex(one, zero))
    if ar == zero and ai == zero:
        # C's ``br > 0`` (as each ordered comparison below): *invalid* for a NaN
        if ge_signaling(br, zero) and br != zero:
            return T(complex(zero, zero))
        return T(raise_flags(INVALID, complex(math.nan, math.nan)))
    if bi == zero and ge_signaling(br, -hundred) and br != -hundred and br < hundred \
            and T(int(br)).real == br:
        n = int(br)
        if n == 1:
            return a
        if n == 2:
            return complex_multiply(a, a, T)
        if n == 3:
            return complex_multiply(a, complex_multiply(a, a, T), T)
        m = -n if n < 0 else n
        acc = T(complex(one, zero))
        p = a
        mask = 1
        while True:
            if m & mask:
                acc = complex_multiply(acc, p, T)
            mask <<= 1
            if m < mask:
                break
            p = complex_multiply(p, p, T)
        return _reciprocal_complex(acc, T) if br < zero else acc
    return T(cpow_c(a, b))


def power_float_one_exponent(a, b, T):
    """NumPy's float power where its loop sees one exponent throughout (its fast path,
    jitops.core.catalog.power_one_exponent): ``1 / a``, 1, ``sqrt(a)``, ``a``, ``a * a`` for
    -1, 0, 0.5, 1, 2 (so ``(-0.0) ** 0.5`` is -0.0 and ``(-inf) ** 0.5`` NaN, as ``sqrt``
    gives), C's ``pow`` for any other. The five are selected, not branched to, so that a
    loop of them vectorises; each computes on ``a`` only where chosen, so none raises a flag
    for an exponent it does not serve: elsewhere on ``idle`` (a number in [1, 2] made of
    ``b``), and the answer is picked by ranges of ``b``, not by the selects' own tests (where
    the pick repeats a select's test, LLVM knows that select gives ``a`` there and computes
    ``1 / a`` and ``a * a`` in every lane: *divide* for ``(-0.0) ** 0.5``, on an Intel CPU)."""
    one = T(1.0)
    if (b == T(-1.0)) | (b == T(0.0)) | (b == T(0.5)) | (b == T(1.0)) | (b == T(2.0)):
        m = abs(b)
        idle = (m if m < one else one) + one
        inverse = one / (a if b == T(-1.0) else idle)
        root = T(sqrt_c(a if b == T(0.5) else idle))
        s = a if b == T(2.0) else idle
        square = s * s
        return inverse if b < T(0.0) else square if b > T(1.5) else a if b > T(0.75) \
            else root if b > T(0.25) else one
    return T(pow_c(a, b))


def copysign(a, b, T):
    return T(math.copysign(a, b))


def heaviside(a, b, T):
    """NumPy's ``npy_heaviside``: NaN for NaN, ``b`` at 0, else 0 or 1."""
    if a != a:
        return T(math.nan)
    if a == T(0):
        return b
    return T(0) if negative(a, T) else T(1)


def arctan2(a, b, T):
    return T(math.atan2(a, b))


def hypot(a, b, T):
    return T(math.hypot(a, b))


def logaddexp(a, b, T):
    """NumPy's ``npy_logaddexp``: equal infinities without a warning, a NaN with C's
    *invalid* (its ``tmp > 0``, an ordered comparison)."""
    if a == b:
        return a + T(LOGE2)
    d = a - b
    if d != d:  # C's ``tmp > 0`` on a NaN: *invalid*
        return raise_flags(INVALID, d)
    if d > T(0):
        return a + T(math.log1p(math.exp(-d)))
    return b + T(math.log1p(math.exp(d)))


def logaddexp2(a, b, T):
    """NumPy's ``npy_logaddexp2``, as :func:`logaddexp`."""
    if a == b:
        return a + T(1)
    d = a - b
    if d != d:  # C's ``tmp > 0`` on a NaN: *invalid*
        return raise_flags(INVALID, d)
    if d > T(0):
        return a + T(LOG2E) * T(math.log1p(T(2) ** -d))
    return b + T(LOG2E) * T(math.log1p(T(2) ** d))


def gcd_signed(a, b, T):
    """NumPy's ``npy_gcd``: Euclid on the magnitudes, kept negative here so every value has
    one (NumPy's unsigned 2**(n-1) comes back as the minimum, as it does there)."""
    x = a if a < T(0) else T(-a)
    y = b if b < T(0) else T(-b)
    while x != T(0):
        if x == T(-1):
            return T(1)
        x, y = T(y % x), x
    return T(-y)


def gcd_unsigned(a, b, T):
    while a != T(0):
        a, b = T(b % a), a
    return b


def lcm_signed(a, b, T):
    """NumPy's ``npy_lcm``: ``|a| / gcd * |b|``, wrapping as its unsigned arithmetic does."""
    g = gcd_signed(a, b, T)
    if g == T(0):
        return T(0)
    ma = a if a >= T(0) else T(-a)
    mb = b if b >= T(0) else T(-b)
    return T(T(ma // g) * mb)


def lcm_unsigned(a, b, T):
    g = gcd_unsigned(a, b, T)
    if g == T(0):
        return T(0)
    return T(T(a // g) * b)


def ldexp(a, b, T):
    """``a * 2**b``; ``b`` is the integer as loaded (NumPy clamps it to C int's range)."""
    e = b
    if e > 2147483647:
        e = 2147483647
    elif e < -2147483648:
        e = -2147483648
    return T(ldexp_c(a, e))


def _nextafter(bits):
    """NumPy's ``nextafter`` of ``bits``-wide floats (C's ``nextafter`` for float32/64, NumPy's
    ``npy_half_nextafter`` for float16, computed in float32): the next value after x toward y,
    stepped by the spacing at x (``frexp``'s exponent, the format's precision ``p`` and least
    exponent); C's flags (overflow to inf, underflow for a subnormal or zero result), the half
    loop's (overflow only; x itself where x == y; NaN as NumPy's default NaN)."""
    p, emin, top = {16: (11, -14, 65504.0), 32: (24, -126, 3.4028234663852886e38),
                    64: (53, -1022, 1.7976931348623157e308)}[bits]
    half = bits == 16

    def nextafter(a, b, T):
        if a != a or b != b:
            if half:
                return T(math.nan)
            s = T(a + b)  # C's x + y (a signalling NaN's invalid); both NaN: y's payload
            return T(b + b) if b != b else s
        if a == b:
            return a if half else b
        if a == T(0):
            r = T(math.copysign(T(ldexp_c(T(1), emin - p + 1)), b))
            return r if half else T(raise_flags(UNDERFLOW, r))
        ax = T(abs(a))
        if ax == T(math.inf):
            return T(math.copysign(T(top), a))
        e = math.frexp(ax)[1] - 1  # ax in [2**e, 2**(e + 1))
        if e < emin:
            e = emin
        step = T(ldexp_c(T(1), e - p + 1))
        if (a < b) != (a > T(0)):  # toward zero: below a power of two the spacing halves
            if e > emin and ax == T(ldexp_c(T(1), e)):
                step = T(step / T(2))
            step = T(-step)
        r = T(ax + step)
        if half and r > T(top):
            return T(raise_flags(OVERFLOW, T(math.copysign(T(math.inf), a))))
        r = T(math.copysign(r, a))
        if not half and T(abs(r)) < T(ldexp_c(T(1), emin)):
            return T(raise_flags(UNDERFLOW, r))
        return r

    return nextafter


NEXTAFTERS = {bits: _nextafter(bits) for bits in (16, 32, 64)}


OPS = {
    "add": add,
    "subtract": subtract,
    "multiply": multiply,
    "divide": divide,
    "trunc_divide": trunc_divide,
    "trunc_divide_unsigned": trunc_divide_unsigned,
    "complex_multiply": complex_multiply,
    "complex_multiply_fma": complex_multiply_fma,
    "complex_divide": complex_divide,
    "maximum": maximum,
    "minimum": minimum,
    "fmax": fmax,
    "fmin": fmin,
    "maximum_half": maximum_half,
    "minimum_half": minimum_half,
    "fmax_half": fmax_half,
    "fmin_half": fmin_half,
}
_FAMILY = (
    equal, not_equal, less, less_equal, greater, greater_equal,
    less_complex, less_equal_complex, greater_complex, greater_equal_complex,
    equal_mixed, not_equal_mixed, less_mixed, less_equal_mixed, greater_mixed,
    greater_equal_mixed, always_false, always_true,
    logical_and, logical_or, logical_xor, bitwise_and, bitwise_or, bitwise_xor,
    floor_divide_signed, floor_divide_unsigned, floor_divide_float,
    remainder_signed, remainder_unsigned, remainder_float, fmod_signed, fmod_float,
    power_int, power_float, power_float32, power_float_one_exponent, power_complex, copysign,
    heaviside, arctan2, hypot, logaddexp, logaddexp2,
    gcd_signed, gcd_unsigned, lcm_signed, lcm_unsigned, ldexp,
)
OPS.update({f.__name__: f for f in _FAMILY})
def returning(fn):
    """A function of ``fn``'s own parameters that returns ``fn``: the typing function of an
    overload compiling ``fn`` as itself (Numba matches an overload's parameters by name)."""
    params = ", ".join(inspect.signature(fn).parameters)
    ns = {"fn": fn}
    exec(f"def typer({params}):\n    return fn\n", ns)
    return ns["typer"]


#: Table functions that other table functions call: each backend compiles them as functions
#: of their own (a compiled function finds a plain Python one it calls by an overload of
#: :func:`returning`'s).
HELPERS = (negative, pow_cast, _plus_if, npy_divmod, order_mixed, less_complex,
           less_equal_complex, gcd_signed, gcd_unsigned, complex_multiply, _reciprocal_complex)
for _bits, (_left, _right) in SHIFTS.items():
    OPS[f"left_shift_{_bits}"], OPS[f"right_shift_{_bits}"] = _left, _right
for _f in (paddle_floor_divide_signed, paddle_remainder_float):
    OPS[_f.__name__] = _f
# NumPy's entries under names of their own, which refuse a zero divisor before the launch
# (their zero branch never runs): Paddle's integer remainder, OpenVINO's Mod and FloorMod
OPS["paddle_remainder_signed"] = remainder_signed
for _bits, _f in PADDLE_POWERS.items():
    OPS[f"paddle_power_int_{_bits}"] = _f
for _f in (ov_floor_mod_float, ov_mod_float, ov_squared_difference, ov_maximum, ov_minimum):
    OPS[_f.__name__] = _f
OPS["ov_mod_signed"], OPS["ov_mod_unsigned"] = fmod_signed, remainder_unsigned
for _bits, _f in OV_POWERS.items():
    OPS[f"ov_power_int_{_bits}"] = _f
for _bits, _f in NARROW_FLOOR_DIVIDES.items():
    OPS[f"floor_divide_signed_{_bits}"] = _f
for _bits, _f in BY_ONE_FLOOR_DIVIDES.items():
    OPS[f"floor_divide_signed_{_bits}_by_one"] = _f
for _bits, _f in PADDLE_NARROW_FLOOR_DIVIDES.items():
    OPS[f"paddle_floor_divide_signed_{_bits}"] = _f
for _name, _f in NARROW_REMAINDERS.items():
    OPS[f"{_name}_narrow"] = _f
for _bits, _f in NEXTAFTERS.items():
    OPS[f"nextafter_{_bits}"] = _f


# -- fused activations (Paddle's act=) ---------------------------------------------------------
def identity(v, T):
    return v


def relu(v, T):
    # NaN < 0 is False, so NaN passes through (PyTorch's relu propagates NaN too).
    return T(0) if v < 0 else v


def relu6(v, T):
    if v < 0:
        return T(0)
    if v > 6:
        return T(6)
    return v


def leaky_relu(v, T):
    return v if v >= 0 else v * T(0.01)


def elu(v, T):
    return v if v > 0 else T(math.expm1(v))


def gelu(v, T):
    # The exact (erf) form, as paddle.nn.functional.gelu(approximate=False), written with
    # erfc: 1 + erf(z) == erfc(-z), without the cancellation 1 + erf(z) suffers for z << 0.
    # Below -40 the value is smaller than float64's least subnormal: the limit -0.0 (the
    # formula would give -inf * 0 = nan at -inf).
    if v < T(-40):
        return T(-0.0)
    z = -v * T(0.7071067811865476)
    e = T(math.erfc(z))
    if v < T(-1):
        # erfc(z) falls like exp(-z*z), so rounding z = -v/sqrt(2) costs 2*z*z ulps of
        # relative error (a thousand ulps at -31). Correct to first order with the exact
        # residual of that product: erfc(z + dz) = erfc(z) * (1 - dz * r), where
        # r = -d/dz log erfc(z) = 2/sqrt(pi) * exp(-z*z) / erfc(z) (about 2z + 1/z for z >> 1).
        dz = fma(-v, T(0.7071067811865476), -z) + (-v) * T(-4.833646656726457e-17)
        if z < T(26):
            r = T(1.1283791670955126) * T(math.exp(-z * z)) / e
        else:  # exp(-z*z) underflows: the asymptotic ratio
            r = T(2) * z + T(1) / z
        e = e - e * (dz * r)
    return T(0.5) * v * e


def sigmoid(v, T):
    # Two branches so exp never overflows: exp(-|v|) <= 1.
    if v >= 0:
        z = T(math.exp(-v))
        return T(1) / (T(1) + z)
    z = T(math.exp(v))
    return z / (T(1) + z)


def silu(v, T):
    # v * sigmoid(v), with the exponential of -|v| only: exp(-v) overflows for v << 0 (float32
    # below -88.7), and v / inf would flush a normal result to -0.0.
    if v >= 0:
        return v / (T(1) + T(math.exp(-v)))
    if v < T(-700):
        # e^v is subnormal (imprecise) here while v * e^v may still be normal: multiply by
        # e^(v/2) twice (1 + e^v is 1). At -inf, -inf * 0 would be nan: the limit is -0.0.
        h = T(math.exp(v * T(0.5)))
        if h == 0:
            return T(-0.0)
        return (v * h) * h
    z = T(math.exp(v))
    return v * z / (T(1) + z)


def tanh(v, T):
    return T(math.tanh(v))


def softplus(v, T):
    # log(1 + e^v) = max(v, 0) + log1p(e^-|v|): exact for large |v|, never overflows.
    m = v if v > 0 else T(0)
    return m + T(math.log1p(math.exp(-abs(v))))


#: Activations computed in float64 for every float dtype (then rounded once to the result):
#: their transcendental functions in float32 lose accuracy near under- and overflow (erfc, exp
#: of large arguments), and float64 makes float32/float16 results correctly rounded in practice.
WIDE_ACTS = frozenset({"elu", "gelu", "silu", "sigmoid", "tanh", "softplus"})

ACTS = {
    None: identity,
    "relu": relu,
    "relu6": relu6,
    "leaky_relu": leaky_relu,
    "elu": elu,
    "gelu": gelu,
    "silu": silu,
    "sigmoid": sigmoid,
    "tanh": tanh,
    "softplus": softplus,
}

#: Public activation names (SPEC section 1).
ACT_NAMES = tuple(k for k in ACTS if k is not None)
