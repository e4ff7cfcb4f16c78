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
>>> x = np.ones((2, 3, 4, 5), np.float32)
>>> jitops.{name}(x, np.ones((3, 4), np.float32), broadcast="pdpd", axis=1).shape
(2, 3, 4, 5)
"""


def _make(op: str) -> BinaryOp:
    fn = public_op(op, op)
    fn.__name__ = fn.__qualname__ = op
    fn.__module__ = "jitops"
    math, notes = _MATH[op]
    fn.__doc__ = _DOC.format(math=math, notes=notes, name=op, acts=", ".join(ACT_NAMES))
    return fn


add: BinaryOp = _make("add")
subtract: BinaryOp = _make("subtract")
multiply: BinaryOp = _make("multiply")
divide: BinaryOp = _make("divide")
maximum: BinaryOp = _make("maximum")
minimum: BinaryOp = _make("minimum")
fmax: BinaryOp = _make("fmax")
fmin: BinaryOp = _make("fmin")

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
             "minimum": "[1.0, 3.0, 2.0]", "fmax": "[2.0, 5.0, 4.0]", "fmin": "[1.0, 3.0, 2.0]"}


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
