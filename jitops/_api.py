"""The public ops: argument checking, dtype resolution, planning, ``out=`` policy, launch.

Every check happens before anything is written: a call either raises (``out`` untouched,
inputs untouched) or computes the whole result.
"""

from __future__ import annotations

import numpy as np

from . import _config, _cpu, _device, _threading
from ._device import is_cuda_array
from ._dtypes import WEAK_SCALARS, check_dtype, resolve
from ._plan import _check_axis_type, make_plan, normalize_mode
from ._scalar import ACT_NAMES
from ._spec import KernelSpec


class ScalarOverflowError(OverflowError, ValueError):
    """A Python integer that does not fit the operation's dtype (NumPy raises OverflowError)."""


def _check_act(act: object, fname: str) -> str | None:
    if act is None:
        return None
    if isinstance(act, str) and act.lower() in ACT_NAMES:
        return act.lower()
    raise ValueError(f"jitops.{fname}: unknown act={act!r}; expected None or one of "
                     f"{', '.join(ACT_NAMES)}")


def _as_operand(v: object, name: str, fname: str) -> np.ndarray | object:
    """An ndarray, or the Python scalar itself when it is "weak" (NEP 50)."""
    if type(v) in WEAK_SCALARS:
        return v
    if isinstance(v, np.ndarray):
        a = v
    else:
        try:
            a = np.asarray(v)
        except Exception as e:  # ragged lists and the like
            raise TypeError(f"jitops.{fname}: {name} cannot be converted to an array: {e}") from None
    check_dtype(a.dtype, name, fname)
    return a


def _element_strides(a: np.ndarray) -> tuple[int, ...] | None:
    """Strides in elements, or None if some stride is not a whole number of elements."""
    isz = a.itemsize
    st = a.strides
    if all(s % isz == 0 for s in st):
        return tuple(s // isz for s in st)
    return None


def _kernel_ready(a: np.ndarray) -> np.ndarray:
    """The array itself when the kernels can read it in place, else an equivalent copy."""
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.aligned or _element_strides(a) is None:
        a = np.ascontiguousarray(a)
    return a


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.strides == b.strides and _addr(a) == _addr(b)


def _allocate(plan, dtype: np.dtype) -> np.ndarray:
    """A new output laid out as the plan says (C order, or following the inputs' order)."""
    shape, strides = plan.out_shape, plan.out_strides
    if len(shape) <= 1 or strides == _c_strides(shape):
        return np.empty(shape, dtype)
    buf = np.empty(plan.size, dtype)
    return np.ndarray(shape, dtype, buffer=buf, strides=tuple(s * dtype.itemsize for s in strides))


def _c_strides(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(st))


def binary(op: str, fname: str, x, y, broadcast="numpy", axis=-1, act=None, out=None,
           device=None) -> np.ndarray:
    """Shared implementation of every public op (see the public functions' docstrings)."""
    mode = normalize_mode(broadcast)
    axis = _check_axis_type(axis)
    act = _check_act(act, fname)
    if device is not None or is_cuda_array(x) or is_cuda_array(y) or is_cuda_array(out):
        target = _device.select(device, x, y, out, fname)
        if target != "cpu":
            return _device.run_cuda(op, fname, x, y, mode, axis, act, out, target)

    xv = _as_operand(x, "x", fname)
    yv = _as_operand(y, "y", fname)
    common = np.result_type(xv, yv)
    if op == "trunc_divide" and common.kind not in "iu":
        op = "divide"  # Paddle elementwise_div: integers truncate, everything else divides
    dt = resolve(op, xv, yv, fname, act)
    xa = _weak_to_array(xv, common, fname)
    ya = _weak_to_array(yv, common, fname)
    xa, ya = _kernel_ready(xa), _kernel_ready(ya)

    plan = make_plan(xa.shape, _element_strides(xa), ya.shape, _element_strides(ya), mode, axis)
    target = out
    if out is not None:
        _check_out(out, plan.out_shape, dt.result, fname)
        ready = out.flags.aligned and _element_strides(out) is not None
        target = out if ready else np.empty(out.shape, out.dtype)
        # NumPy's answer for overlapping operands is the answer computed from the inputs as
        # they were before the call: an exact alias runs in place (each element is read before
        # it is written); any other overlap reads from a copy (CuPy's _copy_in_args_if_needed).
        if np.may_share_memory(target, xa) and not _same_view(target, xa):
            xa = xa.copy()
        if np.may_share_memory(target, ya) and not _same_view(target, ya):
            ya = ya.copy()
        plan = make_plan(xa.shape, _element_strides(xa), ya.shape, _element_strides(ya), mode,
                         axis, _element_strides(target))
    if op == "trunc_divide" and plan.size and not ya.all():
        raise ZeroDivisionError(f"jitops.{fname}: integer division by zero (y contains 0)")
    if target is None:
        target = _allocate(plan, dt.result)
    if plan.size:
        spec = KernelSpec(op, act, xa.dtype, ya.dtype, dt.result, dt.compute)
        meta = _meta(plan)
        args = (spec, _addr(target), _addr(xa), _addr(ya), meta)
        if plan.size >= _config.PARALLEL_THRESHOLD and _threading.parallel_allowed():
            _threading.launch_parallel(_cpu._kernel_parallel, *args)
        else:
            _cpu._kernel_serial(*args)
    if target is not out and out is not None:
        np.copyto(out, target)
        return out
    return target


_META_CACHE: dict = {}


def _meta(plan):
    m = _META_CACHE.get(plan)
    if m is None:
        if len(_META_CACHE) > 4096:
            _META_CACHE.clear()
        m = _META_CACHE[plan] = _cpu.build_meta(plan)
    return m


def _weak_to_array(v, common: np.dtype, fname: str) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v
    try:
        return np.asarray(v, dtype=common)
    except OverflowError as e:
        raise ScalarOverflowError(f"jitops.{fname}: {e}") from None


def _check_out(out, shape, dtype: np.dtype, fname: str) -> None:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"jitops.{fname}: out must be a numpy.ndarray, got {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"jitops.{fname}: out has shape {out.shape}, but the result has shape "
                         f"{shape}")
    if out.dtype != dtype:
        raise TypeError(f"jitops.{fname}: out has dtype {out.dtype}, but the result dtype is "
                        f"{dtype} (out must match exactly)")
    if not out.flags.writeable:
        raise ValueError(f"jitops.{fname}: out is read-only")
    if any(s == 0 and n > 1 for s, n in zip(out.strides, out.shape)):
        raise ValueError(
            f"jitops.{fname}: out has internal overlap (a zero stride on a dimension of size > 1): "
            "more than one element of the written-to array refers to a single memory location"
        )
