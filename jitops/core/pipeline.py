"""The one call pipeline: a call's arguments in, a :class:`PreparedCall` out, for every backend.

Modelled on PyTorch's ``TensorIterator::build()`` and CuPy's ``ufunc.__call__``: everything a
call decides is decided here, once, in this order, whatever runs it afterwards::

    arguments  -> broadcast mode, axis and act checked          (normalize)
    operands   -> recognised: weak Python scalars, host arrays, or the backend's own arrays
    dtypes     -> NumPy 2 promotion, the op's loop table, weak scalars converted like NumPy
    plan       -> the planner on N inputs (jitops.core.plan)
    out=       -> kind, shape, dtype, writeable, internal overlap; else allocated (order="K")
    overlap    -> an input that overlaps ``out`` without being exactly ``out`` is copied
    checks     -> the integer zero-division check
    -> PreparedCall: a backend (CPU serial/parallel, CUDA) only launches it; Dask gets a
       LazyCall (dtypes and shapes settled, errors raised) and maps the CPU path over chunks.

Numba-free: the backends' array handling arrives as a :class:`Memory` object, so this module
only speaks in dtypes, shapes, strides and addresses. Every check raises before anything is
written: a call either raises (``out`` and the inputs untouched) or computes the whole result.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from . import catalog, protocols
from .dtypes import (
    WEAK_SCALARS,
    DTypes,
    check_dtype,
    compute_dtype,
    implementation,
    kernel_op,
    promote,
    resolve,
    weak_scalar_dtype,
)
from .plan import Plan, align_all, check_axis_type, make_plan, normalize_mode
from .scalar import ACT_NAMES

WEAK = frozenset(WEAK_SCALARS)


class ScalarOverflowError(OverflowError, ValueError):
    """A Python integer that does not fit the operation's dtype (NumPy raises OverflowError)."""


class UserOp(Protocol):
    """A user op (``jitops.elementwise``) as the pipeline sees it: its result dtype for the
    inputs' promoted and compute dtypes (a backend's compiler answers; TypeError when the
    function cannot be compiled for them)."""

    __name__: str

    def result_dtype(self, common: np.dtype, compute: np.dtype, fname: str) -> np.dtype: ...


class Memory(Protocol):
    """What the pipeline needs to know about one backend's arrays (see jitops.cpu.backend and
    jitops.cuda.backend). Strides are in bytes, as NumPy and the CUDA Array Interface give them.
    """

    name: str
    array_kind: str                                   # how messages call them

    def owns(self, v: Any) -> bool: ...              # one of this backend's arrays
    def dtype(self, a: Any) -> np.dtype: ...
    def shape(self, a: Any) -> tuple[int, ...]: ...
    def strides(self, a: Any) -> tuple[int, ...]: ...
    def address(self, a: Any) -> int: ...            # of element (0, ..., 0)
    def writeable(self, a: Any) -> bool: ...
    def from_host(self, a: np.ndarray) -> Any: ...   # a host array on this backend
    def ready(self, a: Any) -> Any: ...              # readable by the kernels in place, or a copy
    def copy(self, a: Any) -> Any: ...               # a fresh copy (for the overlap policy)
    def empty(self, shape, dtype: np.dtype, elem_strides) -> Any: ...
    def any_zero(self, a: Any) -> bool: ...
    def any_negative(self, a: Any) -> bool: ...
    def copy_into(self, dst: Any, src: Any) -> None: ...


@dataclass
class PreparedCall:
    """A call with every decision made; a backend launches ``impl`` over ``plan``."""

    fname: str                 # the public name, for messages
    impl: str | UserOp         # the scalar-table entry (jitops.core.dtypes.implementation),
                               # or the user op itself
    act: str | None
    dtypes: DTypes
    inputs: tuple              # the backend's arrays, kernel-ready, overlap copies made
    plan: Plan
    target: Any                # what the kernel writes: ``out``, a ready stand-in for it, or new
    out: Any                   # the caller's ``out`` (None when not given)
    as_given: bool             # inputs and out used exactly as the caller passed them

    def finish(self, memory: Memory):
        """The call's result, once the backend has written ``target``."""
        if self.out is not None and self.target is not self.out:
            memory.copy_into(self.out, self.target)
            return self.out
        return self.target


@dataclass
class LazyCall:
    """A call on Dask operands: dtypes, shapes and errors settled now; chunks computed later."""

    fname: str
    op: str | UserOp
    act: str | None
    dtypes: DTypes
    operands: tuple            # each reshaped to its frame in the output's rank
    out_shape: tuple[int, ...]
    mode: str
    axis: int


def check_act(act: object, fname: str) -> str | None:
    if act is None:
        return None
    if isinstance(act, str) and act.lower() in ACT_NAMES:
        return act.lower()
    raise ValueError(f"jitops.{fname}: unknown act={act!r}; expected None or one of "
                     f"{', '.join(ACT_NAMES)}")


def normalize(broadcast: object, axis: object, act: object, fname: str
              ) -> tuple[str, int, str | None]:
    """The call's mode, axis and activation, checked (ValueError / TypeError)."""
    return normalize_mode(broadcast), check_axis_type(axis), check_act(act, fname)


def refuse_masked(v: object, name: str, fname: str) -> None:
    """A MaskedArray's mask is part of its meaning: never silently computed on its data.
    (Without ``numpy.ma`` imported there is no MaskedArray: it is not imported here, ~30 ms.
    Nor is there one while another thread is still importing it: the module is in
    ``sys.modules`` before its class is.)"""
    masked = getattr(sys.modules.get("numpy.ma"), "MaskedArray", None)
    if masked is not None and isinstance(v, masked):
        raise TypeError(f"jitops.{fname}: {name} is a numpy.ma.MaskedArray; jitops would drop its "
                        f"mask. Use numpy.ma's own ops, or pass {name}.filled(value) or "
                        f"{name}.data explicitly")


#: Paddle's dtypes whose ``__array__`` hands over raw bits (bfloat16 as uint16, float8 as int8).
_PADDLE_BITS = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def refuse_foreign(v: object, name: str, fname: str) -> None:
    """An object that takes part in NumPy's ufunc protocol itself is never silently computed
    on its bare values (TypeError, before anything is written). jitops hands such objects the
    op (jitops.core.protocols, NEP 13) before the pipeline runs; one that gets here is mixed
    with Dask arrays, whose chunks jitops maps itself.

    * ``__array_ufunc__ = None``: the object opts out of ufuncs; NumPy's own TypeError, with
      NumPy's wording (:func:`~jitops.core.protocols.overrides`) -- except Paddle's tensors,
      whose values are read through ``__array__``, bar the dtypes Paddle hands over as raw
      bits;
    * its own ``__array_ufunc__`` (pandas, xarray, pint, sparse ...): labels, units or a
      mask decide what the op means.
    """
    t = type(v)
    if protocols.overrides((v,)):
        raise TypeError(f"jitops.{fname}: {name} is a {t.__module__}.{t.__qualname__}, which "
                        f"decides ufuncs itself (its own __array_ufunc__: labels, units or a "
                        f"mask decide what the op means); jitops hands it the op, but not in a "
                        f"call with Dask arrays, whose chunks jitops maps itself. Pass the "
                        f"underlying array (pandas: .to_numpy(); xarray: .data) or a "
                        f"Dask-backed object of that kind alone")
    if protocols.library(t) == "paddle":
        dt = str(getattr(v, "dtype", ""))
        bits = next((b for b in _PADDLE_BITS if dt.endswith(b)), None)
        if bits is not None:
            raise TypeError(f"jitops.{fname}: {name} is a paddle.Tensor of dtype {bits}, which "
                            f"Paddle hands over as its raw bits; cast it first "
                            f"({name}.astype('float32')) and back after")


def host_operand(v: object, name: str, fname: str) -> np.ndarray | object:
    """A weak Python scalar as itself (NEP 50), anything else as a checked host ndarray."""
    if type(v) in WEAK:
        return v
    refuse_masked(v, name, fname)
    refuse_foreign(v, name, fname)  # (an ndarray subclass may define its own, astropy's)
    if isinstance(v, np.ndarray):
        a = v
    else:
        try:
            a = np.asarray(v)
        except ValueError as e:  # ragged lists: NumPy's class
            raise ValueError(f"jitops.{fname}: {name} cannot be converted to an array: {e}") \
                from None
        except Exception as e:
            raise TypeError(f"jitops.{fname}: {name} cannot be converted to an array: {e}") \
                from None
        if v is None:
            raise TypeError(f"jitops.{fname}: {name} is None, not an array or a number")
        if a.dtype.kind in "OUSV" and not isinstance(v, (list, tuple)):
            # what the object is, not the dtype NumPy would have wrapped it in (NumPy's
            # ufuncs name the Python type too)
            raise TypeError(f"jitops.{fname}: {name} is of unsupported type "
                            f"{type(v).__name__!r}, not an array or a number")
    check_dtype(a.dtype, name, fname)
    return a


def host_arrays(op: str | UserOp, operands: tuple, fname: str, act) -> tuple | None:
    """The operands as the host arrays :func:`prepare` would make of them, where that is all
    it would do to them: NumPy scalars and numeric lists or tuples through ``np.asarray`` (as
    :func:`host_operand`), and weak Python scalars where every operand is one, each a 0-d
    array of the dtype NumPy's weak rule gives them together (``1 + 2.5``: both float64).
    ndarrays and a weak scalar beside an array stay as they are. None where nothing would
    change, or where an operand is of another kind or would be refused (the careful path
    then converts it, or says what is wrong): a caller hands the arrays to the repeats that
    arrays take, with the same answer."""
    if WEAK.issuperset(map(type, operands)):
        key = (op, act, *map(type, operands))
        try:
            kop, weak = _WEAK_ARRAYS[key]
        except KeyError:
            if len(_WEAK_ARRAYS) >= 4096:
                _WEAK_ARRAYS.clear()
            kop, weak = _weak_arrays(op, operands, fname, act)
            if isinstance(op, str):  # (a user op is not kept alive here)
                _WEAK_ARRAYS[key] = kop, weak
        except TypeError:  # an unhashable act: the careful path says what is wrong
            return None
        if weak is None or any(type(v) is int and beyond_range(kop, operands, k, weak)
                               is not None for k, v in enumerate(operands)):
            return None  # a comparison the types decide
        try:
            return tuple(np.asarray(v, dtype=weak) for v in operands)
        except OverflowError:  # an int that does not fit: the careful path raises
            return None
    arrays, changed = [], False
    for v in operands:
        t = type(v)
        if t is np.ndarray or t in WEAK:
            arrays.append(v)
            continue
        if isinstance(v, np.generic):
            a = np.asarray(v)
        elif t is list or t is tuple:
            try:
                a = np.asarray(v)
            except Exception:  # ragged, or not numbers
                return None
            if a.dtype.kind not in "biufc":
                return None
        else:
            return None
        arrays.append(a)
        changed = True
    return tuple(arrays) if changed else None


#: (kernel op, dtype) of weak scalars met together, by (op, act, their types): None where
#: the careful path must take them (refused, or arrays of that dtype would take another loop).
_WEAK_ARRAYS: dict = {}


def _weak_arrays(op, operands: tuple, fname: str, act) -> tuple:
    try:
        kop, dt, weak = _dtypes(op, operands, operands, fname, act)
        if _dtypes(op, operands, (weak,) * len(operands), fname, act)[1] == dt:
            return kop, weak
    except Exception:  # the careful path raises it
        pass
    return None, None


def weak_to_array(v: object, dtype: np.dtype, fname: str) -> np.ndarray:
    """A weak scalar as a 0-d array of ``dtype`` (an int that does not fit raises, as in NumPy)."""
    try:
        return np.asarray(v, dtype=dtype)
    except OverflowError as e:
        raise ScalarOverflowError(f"jitops.{fname}: {e}") from None


def beyond_range(op, kinds: tuple, k: int, dtype: np.dtype) -> bool | None:
    """The answer of comparison ``op`` where its operand ``k``, a Python int, is beyond
    integer ``dtype``'s range (``kinds``: each operand's dtype, or the weak scalar itself).
    NumPy 2 compares such an int exactly: with any value of an integer array, with another
    Python int; beside a bool it raises OverflowError, as other ops do. Else None."""
    v = kinds[k]
    if type(v) is not int or dtype.kind not in "iu" or catalog.ROWS.get(op) is None \
            or catalog.ROWS[op].kind != catalog.COMPARISON:
        return None
    verdict = catalog.decided(op, v, dtype, k == 0)
    other = kinds[1 - k]
    if verdict is None or type(other) is bool or getattr(other, "kind", None) == "b":
        return None
    return catalog.compared(op, *kinds) if type(other) is int else verdict


def element_strides(strides: tuple[int, ...], itemsize: int) -> tuple[int, ...] | None:
    """Byte strides in elements, or None if some stride is not a whole number of elements."""
    if all(s % itemsize == 0 for s in strides):
        return tuple(s // itemsize for s in strides)
    return None


def byte_extent(address: int, shape, strides, itemsize: int) -> tuple[int, int]:
    """[lo, hi) of the bytes an array touches (0, 0 when it is empty)."""
    lo = hi = address
    for n, s in zip(shape, strides):
        if n == 0:
            return 0, 0
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + itemsize


def _extent(mem: Memory, a) -> tuple[int, int]:
    return byte_extent(mem.address(a), mem.shape(a), mem.strides(a), mem.dtype(a).itemsize)


def overlaps(mem: Memory, a, b) -> bool:
    """Whether the byte ranges of ``a`` and ``b`` intersect (``numpy.may_share_memory``)."""
    (a0, a1), (b0, b1) = _extent(mem, a), _extent(mem, b)
    return a0 < b1 and b0 < a1


def same_view(mem: Memory, a, b) -> bool:
    """Exactly the same elements in the same places: same address, shape and strides."""
    return (mem.shape(a) == mem.shape(b) and mem.strides(a) == mem.strides(b)
            and mem.address(a) == mem.address(b))


def in_place(mem: Memory, a) -> bool:
    """Whether the kernels can address ``a`` as it is: element strides, aligned data."""
    dt = mem.dtype(a)
    return (element_strides(mem.strides(a), dt.itemsize) is not None
            and mem.address(a) % dt.alignment == 0)


def _plan_of(mem: Memory, arrays, mode: str, axis: int, result: np.dtype,
             out_strides=None) -> Plan:
    shapes = tuple(mem.shape(a) for a in arrays)
    dtypes = tuple(mem.dtype(a) for a in arrays)
    strides = tuple(element_strides(mem.strides(a), dt.itemsize)
                    for a, dt in zip(arrays, dtypes))
    return make_plan(shapes, strides, mode, axis, out_strides,
                     (result.itemsize, *(dt.itemsize for dt in dtypes)))


def check_out(mem: Memory, out, shape, dtype: np.dtype, fname: str) -> None:
    """``out`` must be this backend's array, of the result's exact shape and dtype, writeable,
    with no element written twice."""
    refuse_masked(out, "out", fname)
    if not mem.owns(out):
        raise TypeError(f"jitops.{fname}: out must be {mem.array_kind}, got "
                        f"{type(out).__name__}")
    oshape = mem.shape(out)
    if oshape != shape:
        raise ValueError(f"jitops.{fname}: out has shape {oshape}, but the result has shape "
                         f"{shape}")
    if mem.dtype(out) != dtype:
        raise TypeError(f"jitops.{fname}: out has dtype {mem.dtype(out)}, but the result dtype "
                        f"is {dtype} (out must match exactly)")
    if not mem.writeable(out):
        raise ValueError(f"jitops.{fname}: out is read-only")
    # an empty out has no element to write twice (NumPy even gives it zero strides)
    if math.prod(oshape) and any(s == 0 and n > 1 for s, n in zip(mem.strides(out), oshape)):
        raise ValueError(
            f"jitops.{fname}: out has internal overlap (a zero stride on a dimension of size > 1): "
            "more than one element of the written-to array refers to a single memory location"
        )


def operand_names(n: int) -> tuple[str, ...]:
    """How messages call the operands: x and y for the binary ops, else by position."""
    return ("x", "y") if n == 2 else tuple(f"operand {i}" for i in range(n))


#: Built-in ops' dtype resolutions, by (op, act, each operand's dtype or weak scalar type):
#: NumPy 2 promotion reads no scalar value, and a call of a new shape should not pay ~10 us
#: of ``result_type``/``resolve_dtypes`` again. Refusals raise and are never stored.
_RESOLVED: dict = {}


def _dtypes(op: str | UserOp, operands, kinds, fname: str, act):
    """(kernel op, DTypes, dtype each weak scalar becomes); ``kinds`` are dtypes, or the weak
    scalars themselves. A built-in op follows its NumPy loop table; a user op promotes its
    inputs together (NumPy 2) and computes in that dtype (float16 in float32)."""
    if not isinstance(op, str):
        common = promote(*kinds)  # checked dtypes always promote
        compute = compute_dtype(common)
        return op, DTypes(op.result_dtype(common, compute, fname), compute), common
    key = (op, act, *[type(k) if type(k) in WEAK else k for k in kinds])
    r = _RESOLVED.get(key)
    if r is None:
        r = _resolve_builtin(op, kinds, fname, act)
        if len(_RESOLVED) >= 4096:
            _RESOLVED.clear()
        _RESOLVED[key] = r
    return r


def _resolve_builtin(op: str, kinds, fname: str, act):
    common = promote(*kinds)
    kop = kernel_op(op, common)
    dt = resolve(kop, *kinds, fname, act)
    return kop, dt, weak_scalar_dtype(kop, *kinds, common)


def prepare(mem: Memory, op: str | UserOp, fname: str, operands: tuple, mode: str, axis: int,
            act: str | None, out) -> PreparedCall:
    """Turn a call of ``op`` into a :class:`PreparedCall` for the backend ``mem`` describes.

    ``operands`` are what the caller passed (arrays of any kind, Python scalars, array-likes);
    ``mode``, ``axis`` and ``act`` come from :func:`normalize`. Raises before anything is
    written.
    """
    names = operand_names(len(operands))
    vals, kinds = [], []
    for v, name in zip(operands, names):
        refuse_masked(v, name, fname)
        if mem.owns(v):
            dt = mem.dtype(v)
            check_dtype(dt, name, fname)
            vals.append(v)
            kinds.append(np.dtype(dt))
        else:
            hv = host_operand(v, name, fname)
            vals.append(hv)
            kinds.append(hv if type(hv) in WEAK else hv.dtype)
    kop, dt, weak = _dtypes(op, vals, kinds, fname, act)
    impl = (dt.impl or implementation(kop, dt.result)) if isinstance(kop, str) else kop
    inputs = []
    decided = False
    for k, v in enumerate(vals):
        if type(v) in WEAK:
            verdict = beyond_range(kop, kinds, k, weak)
            if verdict is not None:  # a comparison the types decide: 0 stands in for it
                impl, v, decided = ("always_true" if verdict else "always_false"), 0, True
            v = weak_to_array(v, weak, fname)
        if not mem.owns(v):
            v = mem.from_host(v)
        inputs.append(mem.ready(v))

    plan = _plan_of(mem, inputs, mode, axis, dt.result)
    target = out
    if out is not None:
        check_out(mem, out, plan.out_shape, dt.result, fname)
        target = out if in_place(mem, out) else mem.empty(plan.out_shape, dt.result, None)
        # NumPy's answer for overlapping operands is the answer computed from the inputs as
        # they were before the call: an exact alias runs in place (each element is read before
        # it is written); any other overlap reads from a copy (CuPy's _copy_in_args_if_needed).
        inputs = [mem.copy(a) if overlaps(mem, target, a) and not same_view(mem, target, a)
                  else a for a in inputs]
        plan = _plan_of(mem, inputs, mode, axis, dt.result,
                        element_strides(mem.strides(target), dt.result.itemsize))
    if impl in ("power_float", "power_float32") and kop == "power" and catalog.power_one_exponent(
            dt.result, mem.shape(inputs[0]), mem.shape(inputs[1]), plan.out_shape):
        impl = "power_float_one_exponent"  # NumPy's fast path for one exponent value
    if isinstance(impl, str) and impl in catalog.BY_ONE_DIVISOR and catalog.one_divisor(
            mem.shape(inputs[1]), plan.out_shape):
        impl = catalog.BY_ONE_DIVISOR[impl]
    if impl in catalog.ZERO_REFUSED and plan.size and mem.any_zero(inputs[1]):
        raise ZeroDivisionError(f"jitops.{fname}: integer division by zero (y contains 0)")
    if impl == "power_int" and plan.size and mem.any_negative(inputs[1]):
        raise ValueError(f"jitops.{fname}: Integers to negative integer powers are not "
                         f"allowed (y contains a negative number; NumPy's ValueError)")
    if target is None:
        target = mem.empty(plan.out_shape, dt.result, plan.out_strides)
    as_given = (all(a is v or type(v) in WEAK for a, v in zip(inputs, operands))
                and (out is None or target is out) and not decided)
    return PreparedCall(fname, impl, act, dt, tuple(inputs), plan, target, out, as_given)


def prepare_lazy(op: str | UserOp, fname: str, operands: tuple, mode: str, axis: int,
                 act: str | None,
                 out, device, is_lazy, shape_of) -> LazyCall:
    """The part of :func:`prepare` a lazy (Dask) call can do now: dtypes, shapes, errors.

    ``is_lazy(v)`` recognises the lazy arrays and ``shape_of(v, name, fname)`` gives their shape
    (raising when unknown); the rest of the pipeline runs on each chunk.
    """
    if out is not None:
        raise TypeError(f"jitops.{fname}: out= is not supported with Dask inputs (the result "
                        "is a new lazy Dask array; store it with dask.array.store)")
    if device is not None and str(device).strip().lower() != "cpu":
        raise TypeError(f"jitops.{fname}: device={device!r} is not supported with Dask inputs "
                        "(their chunks run on jitops' CPU kernels)")
    names = operand_names(len(operands))
    vals, kinds, shapes = [], [], []
    for v, name in zip(operands, names):
        if type(v) in WEAK:
            vals.append(v)
            kinds.append(v)
            shapes.append(())
            continue
        if not is_lazy(v):
            v = host_operand(v, name, fname)
        dt = np.dtype(v.dtype)
        check_dtype(dt, name, fname)
        vals.append(v)
        kinds.append(dt)
        shapes.append(shape_of(v, name, fname))
    _, dt, weak = _dtypes(op, vals, kinds, fname, act)
    for k, v in enumerate(vals):  # an int that does not fit raises now, not in a chunk
        if type(v) in WEAK and beyond_range(op, kinds, k, weak) is None:
            weak_to_array(v, weak, fname)
    out_shape, frames = align_all(shapes, mode, axis)  # the planner's errors, now
    framed = tuple(v if type(v) in WEAK or f == s else v.reshape(f)
                   for v, s, f in zip(vals, shapes, frames))
    return LazyCall(fname, op, act, dt, framed, out_shape, mode, axis)
