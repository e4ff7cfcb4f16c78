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


def trunc_divide(a, b, T):
    """Integer division truncating toward zero (Paddle ``elementwise_div``, ONNX ``Div``).

    The caller rejects zero divisors before launching. ``b == -1`` is special-cased because
    ``INT_MIN / -1`` traps on x86; negation wraps instead, like every other integer overflow.
    """
    if b == -1:
        return T(-a)
    q = a // b
    if q < 0 and q * b != a:
        q += 1
    return T(q)


# NaN rules. Ties (including 0.0 vs -0.0) return the second operand, as NumPy's vectorised
# loops do. maximum/minimum propagate NaN (the first operand's NaN when both are NaN).
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


OPS = {
    "add": add,
    "subtract": subtract,
    "multiply": multiply,
    "divide": divide,
    "trunc_divide": trunc_divide,
    "maximum": maximum,
    "minimum": minimum,
    "fmax": fmax,
    "fmin": fmin,
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
    return T(0.5) * v * T(math.erfc(-v * T(0.7071067811865476)))


def sigmoid(v, T):
    # Two branches so exp never overflows: exp(-|v|) <= 1.
    if v >= 0:
        z = T(math.exp(-v))
        return T(1) / (T(1) + z)
    z = T(math.exp(v))
    return z / (T(1) + z)


def silu(v, T):
    # v * sigmoid(v); for v -> -inf, exp(-v) = inf and v / inf = -0.0 (no overflow error).
    return v / (T(1) + T(math.exp(-v)))


def tanh(v, T):
    return T(math.tanh(v))


def softplus(v, T):
    # log(1 + e^v) = max(v, 0) + log1p(e^-|v|): exact for large |v|, never overflows.
    m = v if v > 0 else T(0)
    return m + T(math.log1p(math.exp(-abs(v))))


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
