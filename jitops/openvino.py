"""OpenVINO's binary elementwise opset under its own names and attributes.

``jitops.openvino.Divide(x, y, auto_broadcast="numpy", axis=-1, pythondiv=True)`` and the
others compute what the opset specification says (docs.openvino.ai, ``Divide-1`` ...), the
reference implementation (``src/core/reference``) where the specification is silent, on
jitops' engine: ``auto_broadcast`` is ``none``, ``numpy`` or ``pdpd`` (case-insensitive) with
``axis`` the pdpd start axis; operands are anything the NumPy-named ops take (``openvino.Tensor``
included, answered in kind); mixed input types promote as NumPy's where the opset requires one
type. Where OpenVINO's CPU plugin departs from its own specification, these follow the
specification; the documentation lists each departure, shown by a test against the installed
openvino.
"""

from __future__ import annotations

from typing import Any

from .dispatch import call_op
from .signatures import Broadcast, Device

#: name -> (the op jitops runs, what it computes)
_OPS = {
    "Add": ("add", "x + y (integers wrap)"),
    "Subtract": ("subtract", "x - y (integers wrap)"),
    "Multiply": ("multiply", "x * y (integers wrap)"),
    "Maximum": ("ov_maximum", "std::max(x, y): x unless x < y (a NaN y gives x, a NaN x NaN)"),
    "Minimum": ("ov_minimum", "std::min(x, y): x unless y < x"),
    "SquaredDifference": ("ov_squared_difference", "(x - y) ** 2 in the input type"),
    "FloorMod": ("ov_floor_mod", "x - floor(x / y) * y, the divisor's sign (integers "
                 "exact; floats in double, a zero result +0.0); an integer zero divisor "
                 "raises ZeroDivisionError"),
    "Mod": ("ov_mod", "x - trunc(x / y) * y, the dividend's sign (integers exact; floats in "
            "the input type, as the reference, not C's fmod); an integer zero divisor raises "
            "ZeroDivisionError"),
    "Power": ("ov_power", "x ** y: floats C's pow; integers C's pow in double, truncated, "
              "the minimum where it does not fit (3 ** 40 on int32), 0 for 2 ** -1"),
    "Equal": ("equal", "x == y, a boolean tensor"),
    "NotEqual": ("not_equal", "x != y, a boolean tensor"),
    "Less": ("less", "x < y, a boolean tensor"),
    "LessEqual": ("less_equal", "x <= y, a boolean tensor"),
    "Greater": ("greater", "x > y, a boolean tensor"),
    "GreaterEqual": ("greater_equal", "x >= y, a boolean tensor"),
    "LogicalAnd": ("ov_logical_and", "x and y on boolean tensors (others: TypeError)"),
    "LogicalOr": ("ov_logical_or", "x or y on boolean tensors (others: TypeError)"),
    "LogicalXor": ("ov_logical_xor", "x xor y on boolean tensors (others: TypeError)"),
    "BitwiseAnd": ("bitwise_and", "x & y on integer or boolean tensors"),
    "BitwiseOr": ("bitwise_or", "x | y on integer or boolean tensors"),
    "BitwiseXor": ("bitwise_xor", "x ^ y on integer or boolean tensors"),
}

_DOC = """OpenVINO's ``{name}``: {what}.

Parameters
----------
x, y : array_like, openvino.Tensor, CUDA array or dask.array.Array
    The two inputs, as :func:`jitops.add` takes them.
auto_broadcast : {{"numpy", "pdpd", "none"}}, default "numpy"
    The opset's attribute (case-insensitive).
axis : int, default -1
    The pdpd start axis (OpenVINO's ``AutoBroadcastSpec(PDPD, axis)``); -1 otherwise.
{extra}out, device
    As in :func:`jitops.add`.

Returns
-------
numpy.ndarray, openvino.Tensor, CUDA array, dask.array.Array
    The result, of the operands' kind.
"""


def _make(name: str, op: str, what: str):
    def fn(x: object, y: object, auto_broadcast: Broadcast = "numpy", axis: int = -1, *,
           out: Any = None, device: Device = None) -> Any:
        return call_op(op, f"openvino.{name}", x, y, auto_broadcast, axis, None, out, device)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = _DOC.format(name=name, what=what, extra="")
    return fn


def Divide(x: object, y: object, auto_broadcast: Broadcast = "numpy", axis: int = -1,
           pythondiv: bool = True, *, out: Any = None, device: Device = None) -> Any:  # noqa: N802
    if type(pythondiv) is not bool:
        raise TypeError(f"jitops.openvino.Divide: pythondiv must be a bool, got "
                        f"{type(pythondiv).__name__}")
    op = "ov_divide" if pythondiv else "ov_divide_trunc"
    return call_op(op, "openvino.Divide", x, y, auto_broadcast, axis, None, out, device)


Divide.__doc__ = _DOC.format(
    name="Divide", what="x / y; on integers floored (``pythondiv=True``, the default) or "
    "truncated, a zero divisor raising ZeroDivisionError before anything is written (the "
    "reference throws); floats IEEE's", extra="pythondiv : bool, default True\n    Integer "
    "division rounds toward negative infinity (Python's //) where true, toward zero where "
    "false.\n")

Add = _make("Add", *_OPS["Add"])
Subtract = _make("Subtract", *_OPS["Subtract"])
Multiply = _make("Multiply", *_OPS["Multiply"])
Maximum = _make("Maximum", *_OPS["Maximum"])
Minimum = _make("Minimum", *_OPS["Minimum"])
SquaredDifference = _make("SquaredDifference", *_OPS["SquaredDifference"])
FloorMod = _make("FloorMod", *_OPS["FloorMod"])
Mod = _make("Mod", *_OPS["Mod"])
Power = _make("Power", *_OPS["Power"])
Equal = _make("Equal", *_OPS["Equal"])
NotEqual = _make("NotEqual", *_OPS["NotEqual"])
Less = _make("Less", *_OPS["Less"])
LessEqual = _make("LessEqual", *_OPS["LessEqual"])
Greater = _make("Greater", *_OPS["Greater"])
GreaterEqual = _make("GreaterEqual", *_OPS["GreaterEqual"])
LogicalAnd = _make("LogicalAnd", *_OPS["LogicalAnd"])
LogicalOr = _make("LogicalOr", *_OPS["LogicalOr"])
LogicalXor = _make("LogicalXor", *_OPS["LogicalXor"])
BitwiseAnd = _make("BitwiseAnd", *_OPS["BitwiseAnd"])
BitwiseOr = _make("BitwiseOr", *_OPS["BitwiseOr"])
BitwiseXor = _make("BitwiseXor", *_OPS["BitwiseXor"])

__all__ = ["Divide", *_OPS]
