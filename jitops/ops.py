"""The eight public ops and the eight Paddle-style names, made by one factory each."""

from __future__ import annotations

from typing import Any

from .core.scalar import ACT_NAMES
from .dispatch import call_op, public_op
from .signatures import Activation, BinaryOp, Broadcast, Device, PaddleOp

_MATH = {
    "add": ("x + y", "Integers wrap on overflow; bool + bool is logical or."),
    "subtract": ("x - y", "Integers wrap on overflow; bool - bool is a TypeError, as in NumPy."),
    "multiply": ("x * y", "Integers wrap on overflow; bool * bool is logical and."),
    "divide": ("x / y", "True division: integers and bools give float64; division by zero "
               "gives inf or nan, with NumPy's warning (``numpy.errstate`` decides: it may "
               "raise FloatingPointError)."),
    "maximum": ("max(x, y)", "NaN-propagating, like numpy.maximum. Not defined for complex."),
    "minimum": ("min(x, y)", "NaN-propagating, like numpy.minimum. Not defined for complex."),
    "fmax": ("max(x, y) ignoring NaN", "One NaN gives the other value; two NaNs give the "
             "first operand's NaN, bit for bit (paddle.fmax). Not defined for complex."),
    "fmin": ("min(x, y) ignoring NaN", "One NaN gives the other value; two NaNs give the "
             "first operand's NaN, bit for bit (paddle.fmin). Not defined for complex."),
}

_DOC = """Elementwise {math}, with NumPy, Paddle (``pdpd``) or exact-shape broadcasting.

{notes}

Parameters
----------
x, y : array_like, CUDA array or dask.array.Array
    Operands: NumPy arrays (any strides, byte order, read-only), anything ``numpy.asarray``
    takes, Python scalars (NumPy 2 "weak" promotion: ``float32 array - 3.0`` stays float32),
    CUDA arrays (``__cuda_array_interface__``), or Dask arrays (the result is then a lazy Dask
    array whose chunks jitops computes; shapes and errors are checked at call time). An
    object with its own ``__array_ufunc__`` (pandas, xarray) is handed the op as by NumPy's
    ufuncs (NEP 13): it aligns by its labels and calls jitops back on its arrays. PyTorch CPU
    tensors are read in place.
broadcast : {{"numpy", "pdpd", "none"}}, default "numpy"
    ``numpy``: NumPy's rule. ``pdpd``: PaddlePaddle's ``axis`` rule (the lower-rank operand is
    laid onto the other starting at ``axis``; size-1 dims broadcast on both sides). ``none``:
    shapes must be equal. Case-insensitive (OpenVINO's ``auto_broadcast`` names).
axis : int, default -1
    Start axis for ``pdpd``; -1 means ``|rank(x) - rank(y)|``. Must stay -1 otherwise.
act : str, optional
    Activation fused into the same pass, one of:
    {acts}.
    ``relu``/``relu6`` work on every real dtype, the others need a floating result.
out : ndarray, optional
    Where to write: exactly the broadcast shape and result dtype. It may be ``x`` or ``y``
    (in place) or overlap them; the result is always NumPy's for the same call.
device : {{None, "cpu", "cuda", "cuda:N"}}
    None runs on CUDA when an operand is a CUDA array, else on the CPU.

Returns
-------
numpy.ndarray, NumPy scalar, CUDA array, dask.array.Array, or the operands' own type
    A new array (or ``out``), on the operands' device, or lazy when an operand is a Dask
    array; a NumPy scalar for 0-d operands without ``out``; what an operand's
    ``__array_ufunc__`` returns (a pandas Series, an xarray DataArray); a tensor for PyTorch
    operands. Its dtype is ``numpy.result_type(x, y)`` (NumPy 2 rules). Its
    memory order follows the inputs like NumPy's ``order="K"``.

Raises
------
ValueError
    Shapes that do not broadcast, a bad ``broadcast``/``axis``/``act``, ``out`` of the wrong
    shape, read-only or with internal overlap.
TypeError
    Unsupported dtypes (object, strings, datetimes...), ``out`` of the wrong dtype, ``act``
    needing a float on an integer result, ``out=`` or ``device="cuda"`` with Dask operands,
    positional broadcasting (``none``, ``pdpd`` with an ``axis``) with labelled operands.
RuntimeError
    ``device="cuda"`` without a usable GPU (there is never a silent CPU fallback).
FloatingPointError
    Under ``numpy.errstate(...="raise")``, for a floating-point exception NumPy reports (divide
    by zero, overflow, underflow, invalid); the result is written first, as NumPy writes it.
    Under the default error state these are RuntimeWarnings.

Examples
--------
>>> import numpy as np, jitops
>>> x = np.ones((2, 3, 4, 5), np.{dtype})
>>> jitops.{name}(x, np.ones((3, 4), np.{dtype}), broadcast="pdpd", axis=1).shape
(2, 3, 4, 5)
"""


_EXACT = "Bit for bit NumPy's answer, NaN, signed zeros and integer edge cases included."
_ULP = ("Within 1 ulp of NumPy's answer (both call the C library; NumPy may use its own "
        "vector code), with its inf, NaN and zero rules exact.")
_NO_ACT = " It takes no ``act=`` (TypeError)."
_FAMILY = {
    "floor_divide": ("x // y (floored)", "Integers: 0 with NumPy's divide-by-zero warning for a "
                     "zero divisor, the minimum with its overflow warning for minimum // -1. "
                     "Floats: NumPy's ``npy_floor_divide``. " + _EXACT),
    "remainder": ("x % y (the divisor's sign, Python's)", "Integers: 0 with NumPy's "
                  "divide-by-zero warning for a zero divisor. Floats: NumPy's "
                  "``npy_remainder`` (a zero result takes y's sign). Alias ``mod``. " + _EXACT),
    "fmod": ("C's fmod(x, y) (the dividend's sign)", "Integers: 0 with NumPy's divide-by-zero "
             "warning for a zero divisor. " + _EXACT),
    "power": ("x ** y", "Integers wrap, as NumPy's; a negative integer exponent raises NumPy's "
              "ValueError before anything is written. Complex operands are not supported yet "
              "(TypeError). Integers: " + _EXACT + " Floats: " + _ULP + " An exponent of one "
              "element (a scalar) takes NumPy's fast path where the installed NumPy has it "
              "(2.4 does, 2.0 not) and is then bit for bit NumPy's: 1 / x, 1, sqrt(x), x, "
              "x * x for -1, 0, 0.5, 1, 2 on float32 and float64 (so (-0.0) ** 0.5 is -0.0)."),
    "float_power": ("x ** y in float64 (or wider)", "Integers and float16/32 promote to "
                    "float64, as NumPy's. Complex operands are not supported yet (TypeError). "
                    + _ULP),
    "copysign": ("x with the sign of y", _EXACT),
    "nextafter": ("the next floating-point value after x toward y", "Integers and bools "
                  "promote as NumPy's (float64, float16); the overflow and underflow warnings "
                  "of C's ``nextafter`` (none but overflow for float16). " + _EXACT),
    "heaviside": ("the Heaviside step of x, y at 0", "NaN where x is NaN. " + _EXACT),
    "arctan2": ("atan2(x, y)", _ULP),
    "hypot": ("sqrt(x**2 + y**2) without overflow", _ULP),
    "logaddexp": ("log(exp(x) + exp(y))", _ULP),
    "logaddexp2": ("log2(2**x + 2**y)", _ULP),
    "ldexp": ("x * 2**y, y an integer", _EXACT),
    "gcd": ("the greatest common divisor of abs(x) and abs(y)", "Integers only. " + _EXACT),
    "lcm": ("the least common multiple of abs(x) and abs(y)", "Integers only; wraps as NumPy's. "
            + _EXACT),
    "bitwise_and": ("x & y", "Integers and bools. " + _EXACT + _NO_ACT),
    "bitwise_or": ("x | y", "Integers and bools. " + _EXACT + _NO_ACT),
    "bitwise_xor": ("x ^ y", "Integers and bools. " + _EXACT + _NO_ACT),
    "left_shift": ("x << y", "A count outside [0, bits) gives 0, as NumPy's. " + _EXACT
                   + _NO_ACT),
    "right_shift": ("x >> y (arithmetic)", "A count outside [0, bits) gives 0, or -1 for a "
                    "negative x, as NumPy's. " + _EXACT + _NO_ACT),
    "logical_and": ("x and y (truth values)", "A bool result; NaN is true. " + _EXACT + _NO_ACT),
    "logical_or": ("x or y (truth values)", "A bool result; NaN is true. " + _EXACT + _NO_ACT),
    "logical_xor": ("x xor y (truth values)", "A bool result; NaN is true. " + _EXACT
                    + _NO_ACT),
    "equal": ("x == y", "A bool result; NaN is unequal to everything. " + _EXACT + _NO_ACT),
    "not_equal": ("x != y", "A bool result; NaN is unequal to everything. " + _EXACT
                  + _NO_ACT),
    "less": ("x < y", "A bool result, false for NaN; int64 and uint64 compared exactly, as "
             "NumPy 2 does, and complex numbers lexicographically. " + _EXACT + _NO_ACT),
    "less_equal": ("x <= y", "As :func:`jitops.less`. " + _EXACT + _NO_ACT),
    "greater": ("x > y", "As :func:`jitops.less`. " + _EXACT + _NO_ACT),
    "greater_equal": ("x >= y", "As :func:`jitops.less`. " + _EXACT + _NO_ACT),
}


def _make(op: str, name: str | None = None) -> BinaryOp:
    name = name or op
    fn = public_op(op, name)
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "jitops"
    math, notes = _MATH[op] if op in _MATH else _FAMILY[op]
    integers = op in ("ldexp", "gcd", "lcm") or op.startswith(("bitwise", "left", "right"))
    fn.__doc__ = _DOC.format(math=math, notes=notes, name=name, acts=", ".join(ACT_NAMES),
                             dtype="int32" if integers else "float32")
    return fn


add: BinaryOp = _make("add")
subtract: BinaryOp = _make("subtract")
multiply: BinaryOp = _make("multiply")
divide: BinaryOp = _make("divide")
maximum: BinaryOp = _make("maximum")
minimum: BinaryOp = _make("minimum")
fmax: BinaryOp = _make("fmax")
fmin: BinaryOp = _make("fmin")

# -- NumPy's binary family (jitops.core.catalog) -------------------------------------------------
floor_divide: BinaryOp = _make("floor_divide")
remainder: BinaryOp = _make("remainder")
mod: BinaryOp = _make("remainder", "mod")
fmod: BinaryOp = _make("fmod")
power: BinaryOp = _make("power")
float_power: BinaryOp = _make("float_power")
copysign: BinaryOp = _make("copysign")
nextafter: BinaryOp = _make("nextafter")
heaviside: BinaryOp = _make("heaviside")
arctan2: BinaryOp = _make("arctan2")
hypot: BinaryOp = _make("hypot")
logaddexp: BinaryOp = _make("logaddexp")
logaddexp2: BinaryOp = _make("logaddexp2")
ldexp: BinaryOp = _make("ldexp")
gcd: BinaryOp = _make("gcd")
lcm: BinaryOp = _make("lcm")
bitwise_and: BinaryOp = _make("bitwise_and")
bitwise_or: BinaryOp = _make("bitwise_or")
bitwise_xor: BinaryOp = _make("bitwise_xor")
left_shift: BinaryOp = _make("left_shift")
right_shift: BinaryOp = _make("right_shift")
logical_and: BinaryOp = _make("logical_and")
logical_or: BinaryOp = _make("logical_or")
logical_xor: BinaryOp = _make("logical_xor")
equal: BinaryOp = _make("equal")
not_equal: BinaryOp = _make("not_equal")
less: BinaryOp = _make("less")
less_equal: BinaryOp = _make("less_equal")
greater: BinaryOp = _make("greater")
greater_equal: BinaryOp = _make("greater_equal")

# -- Paddle-style names -------------------------------------------------------------------------
_PDOC = """Paddle's ``{pname}(x, y, axis=-1, act=None, name=None)``: :func:`jitops.{op}` with
``broadcast="pdpd"``.

{extra}Parameters
----------
x, y : array_like, CUDA array or dask.array.Array
    Operands, as in :func:`jitops.{op}`.
axis : int, default -1
    Where Y's first dim lands on X's dims (Paddle's rule; -1: right-aligned, i.e.
    ``rank(X) - rank(Y)``). Size-1 dims broadcast on both sides.
act : str, optional
    Activation fused into the same pass (Paddle's ``act``), one of:
    {acts}.
name : str, optional
    Accepted and ignored, as in Paddle's dygraph mode.
broadcast, out, device
    Keyword-only, with the meaning they have in :func:`jitops.{op}` (``broadcast="pdpd"``
    by default here; ``"numpy"`` or ``"none"`` also work).

Returns
-------
numpy.ndarray, NumPy scalar, CUDA array, dask.array.Array, or the operands' own type
    As :func:`jitops.{op}`.

Raises
------
ValueError
    Y does not fit X at ``axis`` (the message names both shapes, the axis and the dim), a bad
    ``act``, or ``out`` of the wrong shape or read-only.
TypeError
    Unsupported dtypes, ``out`` of the wrong dtype, ``act`` needing a float result.
FloatingPointError
    Under ``numpy.errstate(...="raise")``, as :func:`jitops.{op}`.

Examples
--------
>>> import numpy as np, jitops
>>> jitops.{pname}(np.array([2., 3., 4.]), np.array([1., 5., 2.])).tolist()
{example}
>>> jitops.{pname}(np.ones((2, 3, 4, 5)), np.ones((3, 4)), axis=1).shape
(2, 3, 4, 5)
"""

_EXAMPLES = {"add": "[3.0, 8.0, 6.0]", "subtract": "[1.0, -2.0, 2.0]",
             "multiply": "[2.0, 15.0, 8.0]",
             "trunc_divide": "[2.0, 0.6, 2.0]", "maximum": "[2.0, 5.0, 4.0]",
             "minimum": "[1.0, 3.0, 2.0]", "fmax": "[2.0, 5.0, 4.0]", "fmin": "[1.0, 3.0, 2.0]",
             "elementwise_floordiv": "[2.0, 0.0, 2.0]", "elementwise_mod": "[0.0, 3.0, 0.0]",
             "elementwise_pow": "[2.0, 243.0, 16.0]"}


_PADDLE_RULES = {
    "elementwise_floordiv": ("floor_divide", "Paddle's floored division: integers as NumPy's, but "
                             "a zero divisor raises ZeroDivisionError before anything is written "
                             "(minimum // -1, where Paddle's kernel dies of SIGFPE, wraps to the "
                             "minimum); floats as :func:`jitops.floor_divide`.\n\n"),
    "elementwise_mod": ("remainder", "Paddle's remainder (the divisor's sign): a zero divisor "
                        "raises ZeroDivisionError on integers; a float zero result keeps the "
                        "dividend's sign (``-6 % 3`` is -0.0, NumPy's +0.0). No unsigned or "
                        "complex dtypes (Paddle has no kernel for them).\n\n"),
    "elementwise_pow": ("power", "Paddle's power: on integers a negative exponent gives 0 "
                        "(1 and -1 their powers), and a result beyond the dtype the minimum "
                        "(``3 ** 40`` on int32 is -2147483648; NumPy wraps and raises for "
                        "negative exponents); floats as :func:`jitops.power`. No unsigned or "
                        "complex dtypes.\n\n"),
}


def _make_paddle(pname: str, op: str) -> PaddleOp:
    def fn(x: object, y: object, axis: int = -1, act: Activation | None = None,
           name: str | None = None, *, broadcast: Broadcast = "pdpd", out: Any = None,
           device: Device = None) -> Any:
        return call_op(op, pname, x, y, broadcast, axis, act, out, device)

    fn.__name__ = fn.__qualname__ = pname
    fn.__module__ = "jitops"
    extra = ("On integers it keeps the integer dtype and truncates toward zero (7 / -2 = -3), "
             "and raises ZeroDivisionError before writing anything if y contains 0, as Paddle "
             "does; other dtypes divide as :func:`jitops.divide`.\n\n"
             ) if op == "trunc_divide" else ""
    public = "divide" if op == "trunc_divide" else op
    if op in _PADDLE_RULES:
        public, extra = _PADDLE_RULES[op]
    fn.__doc__ = _PDOC.format(pname=pname, op=public, extra=extra, example=_EXAMPLES[op],
                             acts=", ".join(ACT_NAMES))
    return fn


elementwise_add: PaddleOp = _make_paddle("elementwise_add", "add")
elementwise_sub: PaddleOp = _make_paddle("elementwise_sub", "subtract")
elementwise_mul: PaddleOp = _make_paddle("elementwise_mul", "multiply")
elementwise_div: PaddleOp = _make_paddle("elementwise_div", "trunc_divide")
elementwise_max: PaddleOp = _make_paddle("elementwise_max", "maximum")
elementwise_min: PaddleOp = _make_paddle("elementwise_min", "minimum")
elementwise_fmax: PaddleOp = _make_paddle("elementwise_fmax", "fmax")
elementwise_fmin: PaddleOp = _make_paddle("elementwise_fmin", "fmin")
elementwise_floordiv: PaddleOp = _make_paddle("elementwise_floordiv", "elementwise_floordiv")
elementwise_mod: PaddleOp = _make_paddle("elementwise_mod", "elementwise_mod")
elementwise_pow: PaddleOp = _make_paddle("elementwise_pow", "elementwise_pow")
