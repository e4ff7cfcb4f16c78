"""The binary family as rows: NumPy's ufuncs, Paddle's legacy names, OpenVINO's opset.

A row is all an op is: its dtypes come from a NumPy ufunc's own loop table
(``ufunc.resolve_dtypes``, weak Python scalars included), its kernels from the scalar-table
entry :func:`implementation` picks for the loop's dtypes and the row's rule book (``numpy``,
``paddle``, ``openvino``: jitops.core.scalar), and its kind decides the rest -- comparisons,
logical and bitwise ops refuse ``act=`` and report no floating-point flags; arithmetic ones
take ``act=`` as the original eight do. Numba-free.
"""

from __future__ import annotations

import operator
import platform
import sys
from dataclasses import dataclass

import numpy as np

ARITHMETIC, COMPARISON, LOGICAL, BITWISE = "arithmetic", "comparison", "logical", "bitwise"


@dataclass(frozen=True)
class Row:
    """One op: its name, the NumPy ufunc whose loop table gives its dtypes, its kind, and
    whose rules its values follow (``numpy``, ``paddle``, ``openvino``)."""

    name: str
    ufunc: np.ufunc
    kind: str
    rules: str = "numpy"


ROWS = {r.name: r for r in (
    Row("floor_divide", np.floor_divide, ARITHMETIC),
    Row("remainder", np.remainder, ARITHMETIC),
    Row("fmod", np.fmod, ARITHMETIC),
    Row("power", np.power, ARITHMETIC),
    Row("float_power", np.float_power, ARITHMETIC),
    Row("copysign", np.copysign, ARITHMETIC),
    Row("heaviside", np.heaviside, ARITHMETIC),
    Row("arctan2", np.arctan2, ARITHMETIC),
    Row("hypot", np.hypot, ARITHMETIC),
    Row("logaddexp", np.logaddexp, ARITHMETIC),
    Row("logaddexp2", np.logaddexp2, ARITHMETIC),
    Row("ldexp", np.ldexp, ARITHMETIC),
    Row("gcd", np.gcd, ARITHMETIC),
    Row("lcm", np.lcm, ARITHMETIC),
    Row("bitwise_and", np.bitwise_and, BITWISE),
    Row("bitwise_or", np.bitwise_or, BITWISE),
    Row("bitwise_xor", np.bitwise_xor, BITWISE),
    Row("left_shift", np.left_shift, BITWISE),
    Row("right_shift", np.right_shift, BITWISE),
    Row("logical_and", np.logical_and, LOGICAL),
    Row("logical_or", np.logical_or, LOGICAL),
    Row("logical_xor", np.logical_xor, LOGICAL),
    Row("equal", np.equal, COMPARISON),
    Row("not_equal", np.not_equal, COMPARISON),
    Row("less", np.less, COMPARISON),
    Row("less_equal", np.less_equal, COMPARISON),
    Row("greater", np.greater, COMPARISON),
    Row("greater_equal", np.greater_equal, COMPARISON),
    Row("nextafter", np.nextafter, ARITHMETIC),
    # Paddle's legacy names (jitops.elementwise_*), NumPy's dtypes and Paddle's values
    Row("elementwise_floordiv", np.floor_divide, ARITHMETIC, "paddle"),
    Row("elementwise_mod", np.remainder, ARITHMETIC, "paddle"),
    Row("elementwise_pow", np.power, ARITHMETIC, "paddle"),
    # OpenVINO's opset (jitops.openvino) where its rules are not NumPy's: NumPy's dtypes
    # (integer Divide stays integer: floor_divide's loops), the spec's values
    Row("ov_divide", np.floor_divide, ARITHMETIC, "openvino"),
    Row("ov_divide_trunc", np.floor_divide, ARITHMETIC, "openvino"),
    Row("ov_floor_mod", np.remainder, ARITHMETIC, "openvino"),
    Row("ov_mod", np.fmod, ARITHMETIC, "openvino"),
    Row("ov_power", np.power, ARITHMETIC, "openvino"),
    Row("ov_squared_difference", np.subtract, ARITHMETIC, "openvino"),
    Row("ov_maximum", np.maximum, ARITHMETIC, "openvino"),
    Row("ov_minimum", np.minimum, ARITHMETIC, "openvino"),
    Row("ov_logical_and", np.logical_and, LOGICAL, "openvino"),
    Row("ov_logical_or", np.logical_or, LOGICAL, "openvino"),
    Row("ov_logical_xor", np.logical_xor, LOGICAL, "openvino"),
)}

#: Paddle's (and OpenVINO's) signed floor division in double, by width: no zero divisor
#: reaches it, and it reports no flag.
_PADDLE_NARROW = tuple(f"paddle_floor_divide_signed_{b}" for b in (8, 16, 32))

#: The scalar entries that refuse a zero divisor before the launch (Paddle's error, raised
#: as ZeroDivisionError): Paddle's integer division and remainder.
ZERO_REFUSED = frozenset({"trunc_divide", "trunc_divide_unsigned", "paddle_floor_divide_signed",
                          "paddle_remainder_signed", "ov_mod_signed", "ov_mod_unsigned",
                          *_PADDLE_NARROW})

#: Public aliases, as NumPy's (``numpy.mod`` is ``numpy.remainder``).
ALIASES = {"mod": "remainder"}

_ORDERED = frozenset({"less", "less_equal", "greater", "greater_equal"})
_BY_SIGN = frozenset({"floor_divide", "remainder", "gcd", "lcm"})

#: Whether this platform's C library ``cpow`` can be called as the CPU kernels call it (the
#: x86-64 System V convention: Linux and macOS on x86-64); NumPy's complex power ends in it.
CPOW_ABI = platform.machine().lower() in ("x86_64", "amd64") and sys.platform in ("linux",
                                                                                    "darwin")
#: ops whose complex loops jitops does not run (NumPy has them): refused with a TypeError
NO_COMPLEX = frozenset({"elementwise_pow", "elementwise_mod", "elementwise_floordiv",
                        "ov_power", "ov_maximum", "ov_minimum",
                        *(() if CPOW_ABI else ("power", "float_power"))})
#: OpenVINO's logical ops take booleans only (the spec's T_BOOL): other dtypes are refused
BOOL_ONLY = frozenset({"ov_logical_and", "ov_logical_or", "ov_logical_xor"})
#: Paddle ops with no unsigned kernel in Paddle (a TypeError says so)
NO_UNSIGNED = frozenset({"elementwise_mod", "elementwise_pow"})


def _numpy_power_fast_path() -> bool:
    """Whether the installed NumPy's float32 and float64 ``power`` loops take their fast
    path for an exponent they see as one value throughout (NumPy 2.4 has it, 2.0 not):
    probed, not assumed: it answers ``(-0.0) ** 0.5`` with ``sqrt``'s -0.0, ``pow`` +0.0."""
    return bool(np.signbit(np.power(np.array([-0.0]), np.float64(0.5))[0]))


NUMPY_POWER_FAST_PATH = _numpy_power_fast_path()
#: The loops that have it (float16's and longdouble's do not).
_FAST_POWER_LOOPS = (np.dtype(np.float32), np.dtype(np.float64))


def power_one_exponent(result: np.dtype, x: tuple, y: tuple, out: tuple) -> bool:
    """Whether NumPy's ``power`` of operands of shapes ``x`` and ``y`` (result ``out``)
    runs its fast path (``power_float_one_exponent``): a float32 or float64 loop whose
    exponent has one element, broadcast with a zero stride. NumPy's trivial loop (every
    operand 0-d or of the result's shape) steps through a one-element exponent that is not
    0-d as an array: ``pow`` there. An exponent of several elements constant along the
    inner loop (a column) takes NumPy's fast path or not by its buffering (a (2, 20000)
    base does, a (3, 1000) one not): jitops runs ``pow`` there (docs/api.md)."""
    if not NUMPY_POWER_FAST_PATH or result not in _FAST_POWER_LOOPS:
        return False
    if any(n != 1 for n in y):
        return False
    return not y or not all(s == () or s == out for s in (x, y))


#: Signed floor divisions in float or double and their entry for a divisor of one element
#: (NumPy's libdivide case): one reciprocal a row, then a multiplication per element.
BY_ONE_DIVISOR = {f"floor_divide_signed_{b}": f"floor_divide_signed_{b}_by_one"
                  for b in (8, 16, 32)}


def one_divisor(y: tuple, out: tuple) -> bool:
    """Whether a divisor of shape ``y`` is one value broadcast over a larger result ``out``,
    where the :data:`BY_ONE_DIVISOR` entries serve (both entries are exact; those are faster
    there, slower where divisors vary)."""
    return all(n == 1 for n in y) and tuple(y) != tuple(out)


#: Scalar entries whose y is one element broadcast over the row (an exponent, a divisor):
#: never an input that out is, and never written with non-temporal stores (they vectorise
#: where LLVM splits a row's plain loop by that element, which it does not do for the
#: streamed pair: x ** 2 on 1e7 float32, 2 ms plain, 23 ms streamed).
ONE_ELEMENT_Y = frozenset({"power_float_one_exponent", *BY_ONE_DIVISOR.values()})
NOT_STREAMED = ONE_ELEMENT_Y
#: Ops whose scalar entry an operand's size chooses (power_one_exponent, BY_ONE_DIVISOR): a
#: shape class, which generalises over sizes, takes their calls only where every member gets
#: one entry.
SIZE_DECIDED = frozenset({"power", "floor_divide"})


def _paddle_floor(result: np.dtype) -> str:
    """Paddle's (and OpenVINO's) signed floor division: in double up to 32 bits (it
    vectorises), else the exact integer loop."""
    if result.itemsize <= 4 and result.kind == "i":
        return f"paddle_floor_divide_signed_{8 * result.itemsize}"
    return "paddle_floor_divide_signed"


def _paddle(op: str, result: np.dtype) -> str:
    """The scalar entry of Paddle's ``op`` for ``result`` (Paddle has no unsigned kernel for
    ``elementwise_mod``/``_pow``: refused by the caller)."""
    kind = {"i": "signed", "u": "unsigned", "b": "signed"}.get(result.kind, "float")
    if op == "elementwise_floordiv":
        if kind == "unsigned":  # floor is truncation; a zero divisor refused before
            return "trunc_divide_unsigned"
        return _paddle_floor(result) if kind == "signed" else "floor_divide_float"
    if op == "elementwise_mod":
        return f"paddle_remainder_{kind}"
    return f"paddle_power_int_{8 * result.itemsize}" if kind == "signed" else "power_float"


def _openvino(op: str, result: np.dtype) -> str:
    """The scalar entry of OpenVINO's ``op`` (a ``ov_`` row) for ``result``."""
    kind = {"i": "signed", "u": "unsigned", "b": "signed"}.get(result.kind, "float")
    if op.startswith("ov_logical"):
        return op[3:]
    if op in ("ov_squared_difference", "ov_maximum", "ov_minimum"):
        return op
    if op == "ov_power":  # (unsigned: exact and wrapping, where the reference's cast is UB)
        return {"signed": f"ov_power_int_{8 * result.itemsize}", "unsigned": "power_int",
                "float": "power_float"}[kind]
    if kind == "unsigned":  # floor and truncation agree; a zero divisor refused before
        return "ov_mod_unsigned" if op in ("ov_floor_mod", "ov_mod") \
            else "trunc_divide_unsigned"
    if kind == "float":
        return {"ov_divide": "divide", "ov_divide_trunc": "divide",
                "ov_floor_mod": "ov_floor_mod_float", "ov_mod": "ov_mod_float"}[op]
    if op == "ov_divide":
        return _paddle_floor(result)
    return {"ov_divide_trunc": "trunc_divide",
            "ov_floor_mod": "paddle_remainder_signed", "ov_mod": "ov_mod_signed"}[op]


def implementation(op: str, x: np.dtype, y: np.dtype, result: np.dtype) -> str:
    """The scalar-table entry of ``op`` for its loop's dtypes ``x``, ``y`` -> ``result``."""
    if ROWS[op].rules == "paddle":
        return _paddle(op, result)
    if ROWS[op].rules == "openvino":
        return _openvino(op, result)
    if ROWS[op].kind == COMPARISON:
        if x.kind in "iu" and y.kind in "iu" and x.kind != y.kind:
            return op + "_mixed"  # NumPy 2's exact int64/uint64 loops
        if x.kind == "c" and op in _ORDERED:
            return op + "_complex"
        return op
    if op in ("left_shift", "right_shift"):
        return f"{op}_{8 * result.itemsize}"
    kind = {"i": "signed", "u": "unsigned", "b": "signed"}.get(result.kind, "float")
    if op == "floor_divide" and kind == "signed" and result.itemsize <= 4:
        return f"floor_divide_signed_{8 * result.itemsize}"  # in double: it vectorises
    if op in ("remainder", "fmod") and kind != "float" and result.itemsize <= 4:
        return f"{op}_narrow"  # in double: it vectorises
    if op in _BY_SIGN or (op == "fmod" and kind == "signed"):
        return f"{op}_{kind}"
    if op == "fmod":
        return "remainder_unsigned" if kind == "unsigned" else "fmod_float"
    if op == "nextafter":
        return f"nextafter_{8 * result.itemsize}"
    if op in ("power", "float_power"):
        if result.kind == "c":
            return "power_complex"
        if kind == "float":
            return "power_float32" if result == np.float32 else "power_float"
        return "power_int"
    return op


_LOGICAL = [op for op in ROWS if ROWS[op].kind == LOGICAL]
_COMPARISONS = [op for op in ROWS if ROWS[op].kind == COMPARISON]

#: The scalar entries that take an operand as loaded, not converted to the compute type:
#: (x kept, y kept). The mixed comparisons compare int64 and uint64 exactly, logical ops test
#: each value against 0, ldexp takes its exponent as an integer.
KEPT = {"ldexp": (False, True), **{op: (True, True) for op in _LOGICAL},
        **{op + "_mixed": (True, True) for op in _COMPARISONS}}

#: The scalar entries whose launches report no floating-point flags: NumPy's comparison,
#: logical and bitwise loops report none (an ordered compare of a NaN raises *invalid* on x86),
#: nor do integer powers computed through a double (Paddle's, OpenVINO's).
QUIET = frozenset(
    [f"{op}{tail}" for op in _COMPARISONS for tail in ("", "_mixed", "_complex")]
    + _LOGICAL + ["always_true", "always_false", "bitwise_and", "bitwise_or", "bitwise_xor"]
    + [f"{op}_{bits}" for op in ("left_shift", "right_shift", "ov_power_int",
                                  "paddle_power_int") for bits in (8, 16, 32, 64)]
    # OpenVINO's own entries: the opset reports no floating-point exceptions
    + ["ov_floor_mod_float", "ov_mod_float", "ov_squared_difference", "ov_maximum",
       "ov_minimum", "ov_mod_signed", "ov_mod_unsigned"]
    # Paddle's and OpenVINO's floor division in double: a framework's, reporting nothing
    + list(_PADDLE_NARROW))


def decided(op: str, scalar: int, dtype: np.dtype, scalar_first: bool) -> bool | None:
    """The answer of comparison ``op`` between any value of integer ``dtype`` and a Python int
    beyond its range (NumPy 2 compares such an int exactly), or None where ``scalar`` fits."""
    info = np.iinfo(dtype)
    if info.min <= scalar <= info.max:
        return None
    above = scalar > info.max  # the scalar is above every array value
    if scalar_first:
        above = not above
    # "array OP scalar" with the scalar above every value (or below, when not ``above``)
    return {"equal": False, "not_equal": True, "less": above, "less_equal": above,
            "greater": not above, "greater_equal": not above}[op]


_EXACT = {"equal": operator.eq, "not_equal": operator.ne, "less": operator.lt,
          "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge}


def compared(op: str, x: int, y: int) -> bool:
    """Comparison ``op`` of two Python ints, exactly (NumPy 2's answer where one is beyond
    int64: ``equal(2**70, 2**70)`` is True)."""
    return _EXACT[op](x, y)
