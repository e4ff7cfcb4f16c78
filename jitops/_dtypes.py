"""dtype rules: which dtypes each op takes, NumPy 2 promotion with weak Python scalars.

Pure NumPy; no Numba. The kernels compute in ``compute_dtype`` (float32 for float16, since
Numba's CPU target has no float16 arithmetic) and store the ``result`` dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Every dtype jitops computes on (SPEC section 2).
SUPPORTED = tuple(
    np.dtype(t)
    for t in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)
_SUPPORTED_SET = frozenset(SUPPORTED)

#: Ops defined for complex operands (SPEC section 2: + - * / only).
COMPLEX_OPS = frozenset({"add", "subtract", "multiply", "divide"})

#: Python scalar types NumPy 2 treats as "weak" in promotion (NEP 50).
WEAK_SCALARS = (bool, int, float, complex)

#: Activations that only make sense on a floating (or complex-free real) result.
INT_OK_ACTS = frozenset({"relu", "relu6"})


@dataclass(frozen=True)
class DTypes:
    """The dtypes of one call."""

    result: np.dtype   # what the user gets back (and what `out` must be)
    compute: np.dtype  # what the scalar op runs in


def check_dtype(dt: np.dtype, what: str, fname: str) -> None:
    """TypeError naming the dtype if jitops does not compute on it."""
    if dt not in _SUPPORTED_SET:
        kind = {
            "O": "object", "U": "string", "S": "bytes", "M": "datetime", "m": "timedelta",
            "V": "void/structured",
        }.get(dt.kind, "")
        swapped = dt.kind in "biufc" and dt.byteorder not in "=|"
        if swapped and dt.newbyteorder("=") in _SUPPORTED_SET:
            return  # non-native byte order: converted by the caller
        label = f"{kind} dtype {dt}" if kind else f"dtype {dt}"
        raise TypeError(
            f"jitops.{fname}: {what} has unsupported {label}; supported dtypes are bool, "
            "int8-64, uint8-64, float16/32/64 and complex64/128"
        )


def kernel_op(op: str, common: np.dtype) -> str:
    """The op the kernels run: Paddle's ``elementwise_div`` (``trunc_divide``) truncates on
    integers and is true division on every other dtype."""
    return "divide" if op == "trunc_divide" and common.kind not in "iu" else op


def resolve(op: str, xv: object, yv: object, fname: str, act: str | None) -> DTypes:
    """Result and compute dtypes for ``op`` on these operands (arrays or weak Python scalars).

    Follows ``numpy.result_type`` with NumPy 2's weak-scalar rule, then each op's loop table:
    true division of integers or bools gives float64; bool subtract and complex min/max are
    TypeErrors, as in NumPy (which has no complex ``fmin`` loop in this library's contract).
    """
    try:
        common = np.result_type(xv, yv)
    except TypeError as e:  # e.g. no common dtype
        raise TypeError(f"jitops.{fname}: cannot promote operand dtypes: {e}") from None
    result = common
    if op == "divide" and common.kind in "biu":
        result = np.dtype(np.float64)
    elif op == "subtract" and common.kind == "b":
        raise TypeError(
            f"jitops.{fname}: boolean subtract is not supported (as in NumPy); use "
            "numpy.logical_xor instead"
        )
    if result.kind == "c" and op not in COMPLEX_OPS:
        raise TypeError(f"jitops.{fname}: complex operands are not supported by {fname}")
    compute = np.dtype(np.float32) if result == np.float16 else result
    if act is not None:
        if result.kind == "c" or result.kind == "b":
            raise TypeError(
                f"jitops.{fname}: act={act!r} needs a real numeric result, got dtype {result}"
            )
        if result.kind in "iu" and act not in INT_OK_ACTS:
            raise TypeError(
                f"jitops.{fname}: act={act!r} needs a floating-point result, got dtype {result} "
                f"(only 'relu' and 'relu6' work on integers)"
            )
    return DTypes(result, compute)
