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

import math


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
    LLVM's ``llvm.fma``, see :mod:`jitops.cpu.spec`; CUDA through ``cuda.fma``).
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
    its own (jitops.cpu.spec); on a target without floating-point flags it is just ``>=``."""
    return a >= b


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
    nil = in2r_abs == zero and in2i_abs == zero
    big = in2r if real_first else in2i
    small = in2i if real_first else in2r
    if nil:  # every operation below on harmless values; the parts divided by +0 instead
        big, small, p, q, dr, di = one, zero, zero, zero, in2r_abs, in2i_abs
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
