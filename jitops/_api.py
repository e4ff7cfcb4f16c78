"""The public ops: argument checking, dtype resolution, planning, ``out=`` policy, launch.

Every check happens before anything is written: a call either raises (``out`` untouched,
inputs untouched) or computes the whole result.
"""

from __future__ import annotations

import math
import sys
from functools import lru_cache

import numba
import numpy as np

from . import _config, _cpu, _dask, _device, _threading
from ._dask import is_dask_array
from ._device import is_cuda_array
from ._dtypes import (
    WEAK_SCALARS,
    check_dtype,
    implementation,
    kernel_op,
    resolve,
    weak_scalar_dtype,
)
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


def _refuse_masked(v: object, name: str, fname: str) -> None:
    """A MaskedArray's mask is part of its meaning: never silently computed on its data.
    (Without ``numpy.ma`` imported there is no MaskedArray: it is not imported here, ~30 ms.)"""
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(v, ma.MaskedArray):
        raise TypeError(f"jitops.{fname}: {name} is a numpy.ma.MaskedArray; jitops would drop its "
                        f"mask. Use numpy.ma's own ops, or pass {name}.filled(value) or "
                        f"{name}.data explicitly")


def _as_operand(v: object, name: str, fname: str) -> np.ndarray | object:
    """An ndarray, or the Python scalar itself when it is "weak" (NEP 50)."""
    if type(v) in WEAK_SCALARS:
        return v
    _refuse_masked(v, name, fname)
    if isinstance(v, np.ndarray):
        a = v
    else:
        try:
            a = np.asarray(v)
        except Exception as e:  # ragged lists and the like
            raise TypeError(f"jitops.{fname}: {name} cannot be converted to an array: {e}") \
                from None
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
        a = a.copy()  # a fresh, aligned buffer (ascontiguousarray keeps a misaligned one)
    return a


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


#: What a kernel is given for each array: the object's address when the kernel can read the
#: data pointer from the object itself (see jitops._cpu), else the data address (1 us each).
_ref = id if _cpu.DATA_OFFSET >= 0 else _addr


def _layout(plan, dtype: np.dtype) -> tuple[int, ...] | None:
    """Byte strides of a new output laid out as the plan says (NumPy's ``order="K"``), or None
    for plain C order."""
    shape, strides = plan.out_shape, plan.out_strides
    if len(shape) <= 1 or strides == _c_strides(shape):
        return None
    return tuple(s * dtype.itemsize for s in strides)


def _new_array(shape: tuple[int, ...], dtype: np.dtype, strides) -> np.ndarray:
    if strides is None:
        return np.empty(shape, dtype)
    buf = np.empty(math.prod(shape), dtype)
    return np.ndarray(shape, dtype, buffer=buf, strides=strides)


def _allocate(plan, dtype: np.dtype) -> np.ndarray:
    """A new output laid out as the plan says (C order, or following the inputs' order)."""
    return _new_array(plan.out_shape, dtype, _layout(plan, dtype))


def _c_strides(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(st))


_ND = np.ndarray
_WEAK = frozenset(WEAK_SCALARS)
_I64 = numba.types.int64


class _Launch:
    """Everything one call needs once its arrays are known: compiled entry point and meta.

    Kept per call geometry in ``_FAST``, so a repeated call skips checking, planning and
    Numba's dispatcher (whose type inference alone costs ~2 us).
    """

    __slots__ = ("entry", "parallel", "task", "meta", "pmeta", "shape", "dtype", "strides",
                 "x_dtype", "y_dtype")

    def __init__(self, spec: KernelSpec, plan, meta: np.ndarray, dtype: np.dtype):
        self.x_dtype, self.y_dtype = spec.x, spec.y  # what a weak scalar operand becomes
        self.parallel = plan.size >= _config.PARALLEL_THRESHOLD
        self.entry = _entry_point(_cpu._kernel_parallel if self.parallel else _cpu._kernel_serial)
        self.task = _cpu.task_address(spec)
        self.meta, self.shape, self.dtype = meta, plan.out_shape, dtype
        self.pmeta = meta.__array_interface__["data"][0]
        self.strides = _layout(plan, dtype)

    def new_output(self) -> np.ndarray:
        return _new_array(self.shape, self.dtype, self.strides)

    def run(self, target: np.ndarray, x: np.ndarray, y: np.ndarray, fname: str,
            out: np.ndarray | None) -> int:
        """Launch; returns the kernel's status (``_cpu.OK``: written, else a check failed and
        nothing was written). A task that failed inside raises: never a silent result."""
        args = (self.task, _ref(target), _ref(x), _ref(y), self.pmeta)
        if self.parallel and _threading.parallel_allowed():
            status = _threading.launch_parallel(self.entry, *args)
        elif self.parallel:  # serial() or a process whose layer cannot run: the serial kernel
            status = _entry_point(_cpu._kernel_serial)(*args)
        else:
            status = self.entry(*args)
        if status == _cpu.TASK_FAILED:
            where = "out is partly written" if out is not None else "no result is returned"
            raise RuntimeError(f"jitops.{fname}: the compiled kernel raised an exception inside "
                               f"a task, so some elements were not computed ({where})")
        return status


_ENTRIES: dict = {}
_SIG = (_I64,) * 5


def _entry_point(kernel):
    """The compiled driver (one signature for every op and dtype; compiled or loaded once)."""
    e = _ENTRIES.get(kernel)
    if e is None:
        kernel.compile(_SIG)
        e = _ENTRIES[kernel] = kernel.overloads[_SIG].entry_point
    return e


#: Repeated calls: (op, broadcast, axis, act, x/y dtype, shape, strides[, out's]) -> _Launch.
_FAST: dict = {}
_FAST_MAX = 4096


def _geometry(v) -> tuple | type:
    """An operand's part of a fast-path key: dtype, shape and strides, or a weak scalar's type."""
    return (v.dtype, v.shape, v.strides) if type(v) is _ND else type(v)


def binary(op: str, fname: str, x, y, broadcast="numpy", axis=-1, act=None, out=None,
           device=None):
    """Shared implementation of every public op (see the public functions' docstrings).

    The first call of a kind goes through every check (``_binary``); a repeat with the same
    arguments' types, dtypes, shapes and strides reuses its plan and compiled kernel, and the
    kernel itself re-checks what can differ between such calls (alignment, overlap of ``out``
    with the inputs), handing the call back to ``_binary`` when a check fails. A Python scalar
    operand is part of a repeat by its type (NumPy 2 promotion depends on nothing else); its
    value is converted to the operand dtype the first call settled on.
    """
    if device is None and type(axis) is int:
        tx, ty = type(x), type(y)
        if tx is _ND and ty is _ND:
            if out is None:
                key = (op, broadcast, axis, act, x.dtype, x.shape, x.strides, y.dtype, y.shape,
                       y.strides)
            elif type(out) is _ND and out.flags.writeable:
                key = (op, broadcast, axis, act, x.dtype, x.shape, x.strides, y.dtype, y.shape,
                       y.strides, out.dtype, out.shape, out.strides)
            else:
                key = None
            if key is not None:
                try:
                    launch = _FAST.get(key)
                except TypeError:  # unhashable broadcast or act: _binary says what is wrong
                    launch = key = None
                if launch is not None:
                    target = out if out is not None else launch.new_output()
                    if launch.run(target, x, y, fname, out) == _cpu.OK:
                        return target
                    key = None  # misaligned or overlapping this time: the careful path
            return _binary(op, fname, x, y, broadcast, axis, act, out, device, key)
        if (tx is _ND and ty in _WEAK) or (ty is _ND and tx in _WEAK):
            return _with_scalar(op, fname, x, y, broadcast, axis, act, out, device)
    return _binary(op, fname, x, y, broadcast, axis, act, out, device, None)


def _with_scalar(op, fname, x, y, broadcast, axis, act, out, device):
    """The fast path with one weak Python scalar operand, keyed by the scalar's type."""
    key = (op, broadcast, axis, act, _geometry(x), _geometry(y))
    if out is not None:
        if type(out) is not _ND or not out.flags.writeable:
            return _binary(op, fname, x, y, broadcast, axis, act, out, device, None)
        key += (out.dtype, out.shape, out.strides)
    try:
        launch = _FAST.get(key)
    except TypeError:  # unhashable broadcast or act: _binary says what is wrong
        return _binary(op, fname, x, y, broadcast, axis, act, out, device, None)
    if launch is not None:
        try:
            xa = x if type(x) is _ND else np.asarray(x, launch.x_dtype)
            ya = y if type(y) is _ND else np.asarray(y, launch.y_dtype)
        except OverflowError:  # an int that does not fit: _binary raises it properly
            return _binary(op, fname, x, y, broadcast, axis, act, out, device, None)
        target = out if out is not None else launch.new_output()
        if launch.run(target, xa, ya, fname, out) == _cpu.OK:
            return target
        key = None
    return _binary(op, fname, x, y, broadcast, axis, act, out, device, key)


def _binary(op, fname, x, y, broadcast, axis, act, out, device, key) -> np.ndarray:
    mode = normalize_mode(broadcast)
    axis = _check_axis_type(axis)
    act = _check_act(act, fname)
    if is_dask_array(x) or is_dask_array(y):
        return _dask.binary(op, fname, x, y, mode, axis, act, out, device)
    if device is not None or is_cuda_array(x) or is_cuda_array(y) or is_cuda_array(out):
        target = _device.select(device, x, y, out, fname)
        if target != "cpu":
            return _device.run_cuda(op, fname, x, y, mode, axis, act, out, target)

    xv = _as_operand(x, "x", fname)
    yv = _as_operand(y, "y", fname)
    common = np.result_type(xv, yv)
    op = kernel_op(op, common)
    dt = resolve(op, xv, yv, fname, act)
    weak = weak_scalar_dtype(op, xv, yv, common)
    xa = _weak_to_array(xv, weak, fname)
    ya = _weak_to_array(yv, weak, fname)
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
        # The kernel makes the same check (it must, on the fast path) and would refuse.
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
        spec = KernelSpec(implementation(op, dt.result), act, xa.dtype, ya.dtype, dt.result,
                          dt.compute)
        geometry = ((target.dtype.alignment, xa.dtype.alignment, ya.dtype.alignment),
                    None if out is None else tuple(
                        _cpu.extent(a.shape, a.strides, a.itemsize) for a in (target, xa, ya)),
                    (_same_geometry(target, xa), _same_geometry(target, ya)))
        launch = _launch(spec, plan, geometry, target.dtype)
        status = launch.run(target, xa, ya, fname, out)
        if status != _cpu.OK:  # the operands were made ready above: this is a bug
            raise RuntimeError(f"jitops.{fname}: internal error: the kernel refused prepared "
                               f"operands (status {status})")
        # Remember the launch for repeats of this call, unless it needed conversions or copies
        # (the fast path hands the kernel the caller's arrays as they are) or a zero check.
        if key is not None and (xa is x or type(x) in _WEAK) and (ya is y or type(y) in _WEAK) \
                and (out is None or target is out) and op != "trunc_divide":
            if len(_FAST) >= _FAST_MAX:
                _FAST.clear()
            _FAST[key] = launch
    if target is not out and out is not None:
        np.copyto(out, target)
        return out
    return target


def _same_geometry(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.strides == b.strides


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return _same_geometry(a, b) and _addr(a) == _addr(b)


@lru_cache(maxsize=4096)
def _launch(spec: KernelSpec, plan, geometry, dtype: np.dtype) -> _Launch:
    aligns, extents, same = geometry
    return _Launch(spec, plan, _cpu.build_meta(plan, aligns, extents, same), dtype)


def _weak_to_array(v, common: np.dtype, fname: str) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v
    try:
        return np.asarray(v, dtype=common)
    except OverflowError as e:
        raise ScalarOverflowError(f"jitops.{fname}: {e}") from None


def _check_out(out, shape, dtype: np.dtype, fname: str) -> None:
    _refuse_masked(out, "out", fname)
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
    # an empty out has no element to write twice (NumPy even gives it zero strides)
    if out.size and any(s == 0 and n > 1 for s, n in zip(out.strides, out.shape)):
        raise ValueError(
            f"jitops.{fname}: out has internal overlap (a zero stride on a dimension of size > 1): "
            "more than one element of the written-to array refers to a single memory location"
        )
