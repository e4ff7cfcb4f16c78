"""dtype rules: which dtypes each op takes, NumPy 2 promotion with weak Python scalars.

Pure NumPy; no Numba. The kernels compute in ``compute_dtype`` (float32 for float16 and
bfloat16, since Numba's CPU target has neither) and store the ``result`` dtype.

bfloat16 is ml_dtypes' NumPy dtype (JAX's; PyTorch's and Paddle's bfloat16 tensors are read
as it): a bfloat16 array exists only once ml_dtypes is imported, so nothing here imports it.
It promotes as float16 does in NumPy 2 -- with bool, int8 and uint8 and weak Python numbers it
stays bfloat16, with wider integers it becomes float32 or float64 -- and beside float16 it is
float32 (ml_dtypes itself has no common type for those pairs).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from . import catalog
from .scalar import WIDE_ACTS

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
    impl: str | None = None  # the scalar entry, where the loop's dtypes chose it (the family)


_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_BOOL = np.dtype(bool)
_OBJECT = np.dtype(object)
_I64 = np.dtype(np.int64)


def bfloat16() -> np.dtype | None:
    """ml_dtypes' bfloat16 dtype, or None while ml_dtypes is not imported (no array can have
    that dtype then)."""
    ml = sys.modules.get("ml_dtypes")
    t = getattr(ml, "bfloat16", None)
    return None if t is None else np.dtype(t)


def is_bfloat16(dt) -> bool:
    return isinstance(dt, np.dtype) and dt.kind == "V" and dt.name == "bfloat16" \
        and dt.type.__module__.split(".")[0] == "ml_dtypes"


def _as_float16(kinds) -> list:
    """``kinds`` with bfloat16 standing in as float16, whose NumPy rules it follows."""
    return [_F16 if is_bfloat16(k) else k for k in kinds]


def promote(*kinds) -> np.dtype:
    """``numpy.result_type`` of dtypes and weak Python scalars, bfloat16 promoting as float16
    does (and beside float16 as float32)."""
    if not any(is_bfloat16(k) for k in kinds):
        return np.result_type(*kinds)
    half = any(isinstance(k, np.dtype) and k == _F16 for k in kinds)
    r = np.result_type(*_as_float16(kinds))
    if r == _F16:
        return _F32 if half else bfloat16()
    return r


def pass_common(kinds) -> np.dtype:
    """The promoted dtype of a reduction pass's operands (NumPy 2's rules, Python numbers
    weak); with a bfloat16 operand, float32 (what it is computed in)."""
    if any(isinstance(k, np.dtype) and is_bfloat16(k) for k in kinds):
        return np.dtype(np.float32)
    return np.result_type(*kinds)


def compute_dtype(dt: np.dtype) -> np.dtype:
    """What the kernels compute in for values of dtype ``dt``: float16 and bfloat16 in float32
    (Numba's CPU target has no arithmetic of either), everything else as it is."""
    return _F32 if dt == _F16 or is_bfloat16(dt) else dt


def check_dtype(dt: np.dtype, what: str, fname: str) -> None:
    """TypeError naming the dtype if jitops does not compute on it."""
    if dt not in _SUPPORTED_SET and not is_bfloat16(dt):
        kind = {
            "O": "object", "U": "string", "S": "bytes", "M": "datetime", "m": "timedelta",
            "V": "void/structured",
        }.get(dt.kind, "")
        swapped = dt.kind in "biufc" and dt.byteorder not in "=|"
        if swapped and dt.newbyteorder("=") in _SUPPORTED_SET:
            return  # non-native byte order: converted by the caller
        if dt.kind == "V" and dt.names is None and dt.type is not np.void:
            # a dtype of its own (ml_dtypes' bfloat16, float8, int4: JAX's), named as such
            kind = f"{dt.type.__module__.split('.')[0]}"
            label = f"dtype {dt.name} ({kind})"
        else:
            label = f"{kind} dtype {dt}" if kind else f"dtype {dt}"
        raise TypeError(
            f"jitops.{fname}: {what} has unsupported {label}; supported dtypes are bool, "
            "int8-64, uint8-64, float16/32/64, bfloat16 (ml_dtypes) and complex64/128"
        )


def kernel_op(op: str, common: np.dtype) -> str:
    """The op the kernels run: Paddle's ``elementwise_div`` (``trunc_divide``) truncates on
    integers and is true division on every other dtype."""
    return "divide" if op == "trunc_divide" and common.kind not in "iu" else op


def _numpy_fuses_complex_multiply(dtype: str) -> bool:
    """Whether NumPy's complex multiply on this CPU rounds each part once (its SIMD loop uses
    FMA where the CPU has it). Probed, not assumed: the imaginary part of
    ``(-tiny + 0j) * (0 + tiny j)`` is ``-tiny**2 + 0``, which is -0.0 when fused (the exact
    product rounds to -0.0) and +0.0 when not (``-0.0 + 0.0``)."""
    tiny = np.finfo(np.dtype(dtype).char.lower()).smallest_subnormal
    a = np.array([complex(-tiny, 0.0)], dtype)
    b = np.array([complex(0.0, tiny)], dtype)
    return bool(np.signbit((a * b)[0].imag))


#: Complex multiply as NumPy computes it on this machine, per complex dtype.
CMUL_FUSED = {name: _numpy_fuses_complex_multiply(name) for name in ("complex64", "complex128")}

def act_dtype(act: str | None, compute: np.dtype) -> np.dtype:
    """The dtype an activation runs in: the compute dtype (integers wrapped first), except the
    transcendental ones on floats, which run in float64 and are rounded once on the store
    (float32 erfc/exp lose accuracy near under- and overflow)."""
    if act in WIDE_ACTS and compute.kind == "f":
        return np.dtype(np.float64)
    return compute


_HALF = np.dtype(np.float16)
_MINMAX = frozenset({"maximum", "minimum", "fmax", "fmin"})


def implementation(op: str, result: np.dtype) -> str:
    """The scalar-table entry (:mod:`jitops.core.scalar`) computing ``op`` for this result dtype.

    Where NumPy's answer depends on the dtype, so does the entry: complex multiply and divide
    are NumPy's own algorithms (fused or not, as NumPy is on this CPU), float16 min/max keep
    NumPy's half-loop tie rule, unsigned integer division has no sign fix-up.
    """
    if result.kind == "c":
        if op == "multiply":
            return "complex_multiply_fma" if CMUL_FUSED[result.name] else "complex_multiply"
        if op == "divide":
            return "complex_divide"
    if result == _HALF and op in _MINMAX:
        return op + "_half"
    if op == "trunc_divide" and result.kind == "u":
        return "trunc_divide_unsigned"
    return op


#: The NumPy ufunc whose loop decides how a weak Python scalar is converted for each op.
_UFUNC = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.true_divide, "trunc_divide": np.floor_divide, "maximum": np.maximum,
          "minimum": np.minimum, "fmax": np.fmax, "fmin": np.fmin,
          **{name: row.ufunc for name, row in catalog.ROWS.items()}}


def weak_scalar_dtype(op: str, xv: object, yv: object, common: np.dtype) -> np.dtype:
    """The dtype a weak Python scalar operand is converted to: the one NumPy's loop for ``op``
    takes in that slot (``divide(uint8_array, -1)`` converts -1 to float64, ``add`` to uint8,
    which raises for -1 as NumPy does). ``common`` when both operands are scalars. The other
    operand is an array or a dtype."""
    uf = _UFUNC.get(op)
    weak = [type(v) in WEAK_SCALARS for v in (xv, yv)]
    if uf is None or all(weak):
        return common
    loop, bf = _loop(uf, (_slot(xv), _slot(yv)))
    if loop is None:
        return common
    dt = loop[0] if weak[0] else loop[1]
    return bfloat16() if bf and dt == _F16 else dt


def _slot(v: object) -> object:
    """An operand as ``ufunc.resolve_dtypes`` takes it: a dtype, or a weak scalar's type."""
    if type(v) in WEAK_SCALARS:
        return np.dtype(bool) if type(v) is bool else type(v)
    return np.dtype(getattr(v, "dtype", v))


def _loop(uf: np.ufunc, slots: tuple) -> tuple[tuple | None, bool]:
    """NumPy's loop of ``uf`` for ``slots`` (None where it has none), and whether bfloat16
    stood in as float16, whose loops it follows."""
    bf = any(is_bfloat16(d) for d in slots)
    if bf:
        slots = tuple(_as_float16(slots))
    try:
        return uf.resolve_dtypes(slots + (None,)), bf
    except TypeError:
        return None, bf


_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def user_result(common: np.dtype, returned: np.dtype) -> np.dtype:
    """The result dtype of a user op (``jitops.elementwise``) whose inputs promote to
    ``common`` and whose scalar function returns ``returned`` for them (in Numba's typing).

    Python literals in the function are *weak*, as NumPy 2 treats them: a return of the same
    or a lower kind (bool < integer < float < complex) than the inputs keeps the inputs' dtype
    (``x * 0.5`` on float32 is float32, ``a + b`` on int32 wraps in int32 although Numba
    computes integers in 64 bits, float16 inputs give float16). A higher kind is the function's
    own: integer inputs divided give float64, float inputs times ``1j`` the complex of their
    precision. A bool return (a comparison) is always bool.
    """
    if returned.kind == "b":
        return returned
    if _KIND_RANK[returned.kind] <= _KIND_RANK["f" if is_bfloat16(common) else common.kind]:
        return common
    if returned.kind == "c" and common.kind == "f":
        return np.dtype(np.complex128 if common == np.float64 else np.complex64)
    return returned


def resolve(op: str, xv: object, yv: object, fname: str, act: str | None) -> DTypes:
    """Result and compute dtypes for ``op`` on these operands (arrays or weak Python scalars).

    Follows ``numpy.result_type`` with NumPy 2's weak-scalar rule, then each op's loop table:
    true division of integers or bools gives float64; bool subtract and complex min/max are
    TypeErrors, as in NumPy (which has no complex ``fmin`` loop in this library's contract).
    """
    if op in catalog.ROWS:
        return _resolve_row(catalog.ROWS[op], xv, yv, fname, act)
    common = promote(xv, yv)  # every pair of supported dtypes promotes (SPEC 2)
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
    compute = compute_dtype(result)
    check_act_dtype(act, result, fname)
    return DTypes(result, compute)


def check_act_dtype(act: str | None, result: np.dtype, fname: str) -> None:
    """TypeError where ``act`` cannot run on a result of dtype ``result``."""
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


def _resolve_row(row: catalog.Row, xv: object, yv: object, fname: str, act) -> DTypes:
    """A family op's dtypes from its NumPy ufunc's loop table (bfloat16 as float16, whose
    loops it follows), and its scalar entry for that loop."""
    slots = (_slot(xv), _slot(yv))
    loop, bf = _loop(row.ufunc, slots)
    if loop is not None and loop[0] == _OBJECT:
        # two Python ints compared: NumPy's resolver alone answers its object loop, its call
        # makes them int64 arrays (``np.greater(0, 0)``; one beyond int64 the planner decides)
        slots = (_I64, _I64)
        loop, bf = _loop(row.ufunc, slots)
    if loop is None:
        names = " and ".join(getattr(d, "__name__", str(d)) for d in slots)
        raise TypeError(f"jitops.{fname}: not supported for {names} (numpy.{row.ufunc.__name__} "
                        f"has no loop for them)")
    x, y, result = loop
    if result.kind == "c" and row.name in catalog.NO_COMPLEX:
        raise TypeError(f"jitops.{fname}: complex operands are not supported by {fname}")
    if row.name in catalog.BOOL_ONLY and (slots[0] != np.bool_ or slots[1] != np.bool_):
        raise TypeError(f"jitops.{fname}: takes boolean tensors only (the opset's T_BOOL), "
                        f"not {' and '.join(str(s) for s in slots)}")
    if result.kind == "u" and row.name in catalog.NO_UNSIGNED:
        raise TypeError(f"jitops.{fname}: Paddle has no kernel for unsigned integers "
                        f"(dtype {result}); cast to a signed dtype first")
    if bf and result == _F16:
        result = bfloat16()
    if act is not None and row.kind != catalog.ARITHMETIC:
        raise TypeError(f"jitops.{fname}: act= is not accepted by {row.kind} ops (their result "
                        f"is {'bool' if row.kind != catalog.BITWISE else 'an integer mask'})")
    check_act_dtype(act, result, fname)
    impl = catalog.implementation(row.name, x, y, result)
    if impl.startswith("floor_divide_signed_") and _BOOL in (slots[0], slots[1]):
        # a bool operand's two values let the compiler fold away the division that raises
        # NumPy's divide-by-zero flag: the exact loop instead
        impl = "floor_divide_signed"
    if impl.endswith("_narrow") and _BOOL in (slots[0], slots[1]):  # (the same)
        impl = "remainder_unsigned" if result.kind == "u" else f"{row.name}_signed"
    compute = np.dtype(np.uint64) if impl.endswith("_mixed") else compute_dtype(x)
    return DTypes(result, compute, impl)
