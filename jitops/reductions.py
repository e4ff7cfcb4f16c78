"""Reductions of broadcast results: ``sum_to`` and the broadcast ops' gradients.

Each call is one pass (jitops.core.reduction plans it, jitops.cpu.reduce runs it): the
gradient's full-shape side is written and its broadcast side summed while ``dout`` is read
once. Sums are accumulated in float64 (complex128, int64, uint64) and rounded once to the
result's dtype; they do not depend on the thread count (the plan fixes the order). No
floating-point warnings, as in Paddle's and PyTorch's autograd (a division by zero gives
inf; comparisons with NaN are not *invalid*).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from numba import types as _types

from .core import grads, tensors
from .core.dtypes import is_bfloat16
from .core.plan import align_all, expand_strides, normalize_mode
from .core.reduction import plan_reduction, sum_to_frame
from .cpu import layout, parallel
from .cpu import reduce as _reduce
from .cpu.backend import _address, drivers, entry_point
from .cpu.kernels import FP_RAISED, OK
from .signatures import Broadcast

_I64 = np.int64


def _host(v, name: str, fname: str) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "__cuda_array_interface__") or type(v).__module__.startswith("dask"):
        raise TypeError(f"jitops.{fname}: {name} is a {type(v).__name__}; this function runs "
                        f"on host arrays (NumPy, and PyTorch/Paddle CPU tensors) only")
    return np.asarray(v)


def _element_strides(a: np.ndarray) -> tuple[int, ...] | None:
    """``a``'s strides in elements, or None where a stride is not a whole number of them or
    the data is misaligned for its dtype."""
    isz = a.itemsize
    if isz == 0 or _address(a) % a.dtype.alignment:
        return None
    if any(s % isz for s in a.strides):
        return None
    return tuple(s // isz for s in a.strides)


def _combine(rows: np.ndarray) -> np.ndarray:
    """The partial rows of a split sum added pairwise in task order (adjacent pairs)."""
    while rows.shape[0] > 1:
        n = rows.shape[0] - rows.shape[0] % 2
        paired = rows[0:n:2] + rows[1:n:2]
        rows = np.concatenate([paired, rows[n:]]) if n < rows.shape[0] else paired
    return rows[0]


def _cast(acc: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if acc.dtype == dtype:
        return acc
    with np.errstate(all="ignore"):  # NumPy's own rounding (float16 and bfloat16 too)
        return acc.astype(dtype)


class _Launch:
    """A planned pass, kept for the next call of the same geometry: the task's address, the
    meta, and per result how it is held (stored, or summed into ``rows`` rows)."""

    __slots__ = ("task", "meta", "meta_address", "parallel", "results", "acc")

    def __init__(self, rule, in_dtypes, in_strides, frames_in, space, frames, dtypes, lead,
                 threads):
        common = np.dtype(np.float32) if any(is_bfloat16(d) for d in in_dtypes) \
            else np.result_type(*in_dtypes)
        compute = _reduce.compute_dtype(common)
        self.acc = acc_dt = _reduce.accumulator(compute)
        strides = [expand_strides(sh, st, f, space) for (sh, st), f in zip(in_strides, frames_in)]
        plan = plan_reduction(space, strides, frames, lead=lead, threads=threads)
        if len(plan.shape) > _reduce.MAX_DIMS:
            raise ValueError(f"at most {_reduce.MAX_DIMS} dims after merging, got "
                             f"{len(plan.shape)}")
        spec = _reduce.ReduceSpec(rule, tuple(d.name for d in in_dtypes),
                                  tuple(d.name for d in dtypes), compute.name, acc_dt.name)
        self.results, modes, partial = [], [], []
        for r, rp in enumerate(plan.results):
            rows = plan.ntasks if rp.partial else 1
            self.results.append((rp.summed, rp.frame, rows, rp.size))
            modes.append(_reduce.STORE if not rp.summed else
                         _reduce.ROW_SUM if rp.strides[-1] == 0 else _reduce.COLUMN_SUM)
            partial.append(rp.size * acc_dt.itemsize if rp.partial else 0)
        nd = len(plan.shape)
        words = [0] * (_reduce.MAX_DIMS * (_reduce.MAX_INPUTS + _reduce.MAX_RESULTS))
        for i, st in enumerate([*plan.inputs, *[rp.strides for rp in plan.results]]):
            words[i * _reduce.MAX_DIMS:i * _reduce.MAX_DIMS + nd] = st
        R = _reduce.RMETA
        fill = (_reduce.MAX_RESULTS - len(frames))
        self.meta = np.array(layout.fill(
            R, ND=nd, SPLIT=plan.split, NTASKS=plan.ntasks, NIN=len(in_dtypes),
            NRES=len(frames), MODE=modes + [0] * fill, PARTIAL=partial + [0] * fill,
            SHAPE=list(plan.shape), STRIDES=words, BOUNDS=0)[:R.BOUNDS] + list(plan.bounds),
            _I64)
        self.meta_address = _address(self.meta)
        self.task = _reduce.task_address(spec)
        self.parallel = plan.ntasks > 1 and threads > 1


@lru_cache(maxsize=1024)
def _launch_for(*key) -> _Launch:
    return _Launch(*key)


def run_pass(rule: str, inputs: list[np.ndarray], frames_in: list[tuple[int, ...]],
             space: tuple[int, ...], frames: list[tuple[int, ...]],
             dtypes: list[np.dtype], lead: int, fname: str) -> list[np.ndarray]:
    """One pass of ``rule`` over ``space``: inputs with their frames; per result its frame
    (``space`` to be stored, 1 on the axes it sums) and dtype. Returns each result in its
    frame's shape."""
    size = 1
    for n in space:
        size *= n
    if size == 0:
        return [np.zeros(f, dt) if tuple(f) != tuple(space) else np.empty(f, dt)
                for f, dt in zip(frames, dtypes)]
    ins = []
    for a in inputs:
        st = _element_strides(a)
        if st is None:
            a = np.ascontiguousarray(a)
            st = _element_strides(a)
        ins.append((a, st))
    threads = parallel.num_threads()
    try:
        launch = _launch_for(rule, tuple(a.dtype for a, _ in ins),
                             tuple((a.shape, st) for a, st in ins), tuple(frames_in),
                             tuple(space), tuple(frames), tuple(dtypes), lead, threads)
    except ValueError as e:
        raise ValueError(f"jitops.{fname}: {e}") from None
    buffers = []
    for (summed, frame, rows, n), dt in zip(launch.results, dtypes):
        buffers.append(np.zeros((rows, n), launch.acc) if summed else np.empty(frame, dt))
    ptrs = np.array([_address(a) for a, _ in ins] + [_address(b) for b in buffers], _I64)
    args = (launch.task, _address(ptrs), launch.meta_address)
    if launch.parallel:
        status = parallel.launch(drivers(_reduce.KERNELS, _SIG), args, threads)
    else:
        status = entry_point(_reduce.KERNELS["serial"], _SIG)(*args)
    if status != OK and status < FP_RAISED:  # (flags: none reported, as Paddle and PyTorch)
        raise RuntimeError(f"jitops.{fname}: the kernel failed (status {status})")
    out = []
    for (summed, frame, rows, _), b, dt in zip(launch.results, buffers, dtypes):
        if summed:
            b = _cast(_combine(b) if rows > 1 else b[0], dt).reshape(frame)
        out.append(b)
    return out


_SIG = (_types.int64,) * 3  # the drivers' (task, operand addresses, meta)


_frame_of = lru_cache(maxsize=1024)(sum_to_frame)


def sum_to(g: Any, shape: Any, broadcast: Broadcast = "numpy", axis: int = -1) -> Any:
    """Sum ``g`` over the axes a broadcast to its shape added: back to ``shape``.

    PyTorch's ``at::sum_to`` (``broadcast="numpy"``: the leading axes, and every axis where
    ``shape`` has 1), and Paddle's reduction of a gradient to an operand (``"pdpd"``: ``shape``
    laid onto ``g`` at ``axis``, its trailing 1s trimmed, as ``GetReduceDims``).

    Parameters
    ----------
    g : array_like
        The broadcast array (a gradient): NumPy, or a PyTorch/Paddle CPU tensor.
    shape : tuple of int
        The operand's shape; it must broadcast to exactly ``g.shape``.
    broadcast : {"numpy", "pdpd", "none"}, default "numpy"
    axis : int, default -1
        Where ``shape`` starts in ``g`` under ``pdpd`` (-1: the trailing axes).

    Returns
    -------
    numpy.ndarray (or the tensor type of ``g``)
        Shape ``shape`` and ``g``'s dtype, summed in float64 (complex128; int64 or uint64,
        wrapping as NumPy's integers do) and rounded once; the same bits whatever the
        thread count. A new array even where nothing is summed.

    Raises
    ------
    ValueError
        ``shape`` does not broadcast to ``g``'s shape, or a bad ``broadcast``/``axis``.
    TypeError
        A bool or non-numeric ``g``.

    Examples
    --------
    >>> import numpy as np, jitops
    >>> jitops.sum_to(np.ones((2, 3, 4)), (3, 1))
    array([[8.],
           [8.],
           [8.]])
    >>> jitops.sum_to(np.ones((2, 3, 4)), (3,), broadcast="pdpd", axis=1)
    array([8., 8., 8.])
    """
    fname = "sum_to"
    host = tensors.unwrap((g,), None, fname)
    wrap = None
    if host is not None:
        (g,), wrap = host.operands, host.wrap
    g = _host(g, "g", fname)
    mode = normalize_mode(broadcast)
    try:
        shape = tuple(int(n) for n in shape)
    except TypeError:
        raise TypeError(f"jitops.sum_to: shape must be a tuple of ints, got "
                        f"{type(shape).__name__}") from None
    if g.dtype.kind not in "iufc" and not is_bfloat16(g.dtype):
        raise TypeError(f"jitops.sum_to: g has dtype {g.dtype}; sum_to sums numbers "
                        f"(bool and non-numeric arrays are refused)")
    frame = _frame_of(g.shape, shape, mode, axis)
    (res,) = run_pass("sum_to", [g], [g.shape], g.shape, [frame], [g.dtype], 0, fname)
    res = res.reshape(shape)
    return wrap(res) if wrap is not None else res


def _grad(op: str, x: Any, y: Any, dout: Any, axis: int, broadcast: Broadcast,
          ties: str) -> tuple[Any, Any]:
    fname = f"elementwise_{op}_grad"
    if ties not in grads.TIES:
        raise ValueError(f"jitops.{fname}: ties must be one of {grads.TIES}, got {ties!r}")
    host = tensors.unwrap((x, y, dout), None, fname)
    wrap = None
    if host is not None:
        (x, y, dout), wrap = host.operands, host.wrap
    x, y, dout = (_host(v, n, fname) for v, n in ((x, "x"), (y, "y"), (dout, "dout")))
    for v, n in ((x, "x"), (y, "y"), (dout, "dout")):
        if v.dtype.kind != "f" and not is_bfloat16(v.dtype):
            raise TypeError(f"jitops.{fname}: {n} has dtype {v.dtype}; gradients are "
                            f"computed for float16, bfloat16, float32 and float64")
    mode = normalize_mode(broadcast)
    space, (fx, fy) = align_all((x.shape, y.shape), mode, axis)
    if tuple(dout.shape) != tuple(space):
        raise ValueError(f"jitops.{fname}: dout has shape {dout.shape}, but x {x.shape} and "
                         f"y {y.shape} broadcast to {space} (broadcast={mode!r}"
                         + (f", axis={axis})" if mode == "pdpd" else ")"))
    dx, dy = run_pass(grads.rule_name(op, ties), [x, y, dout], [fx, fy, space], space,
                      [fx, fy], [x.dtype, y.dtype], 2, fname)
    dx, dy = dx.reshape(x.shape), dy.reshape(y.shape)
    if wrap is not None:
        return wrap(dx), wrap(dy)
    return dx, dy


_GRAD_DOC = """The gradients of ``elementwise_{op}`` ({math}) for x and y: ``(dx, dy)``.

Paddle's ``elementwise_{op}_grad``: ``dout`` is the gradient of the op's result; each
operand's gradient is its rule (jitops.core.grads) summed over the axes its broadcast added,
with the shape of that operand, in one pass over ``dout``.{extra}

Parameters
----------
x, y : array_like
    The op's operands (float16, bfloat16, float32, float64; NumPy arrays or PyTorch/Paddle
    CPU tensors).
dout : array_like
    The gradient of the result, of the broadcast shape.
axis : int, default -1
    Paddle's axis (``broadcast="pdpd"``).
broadcast : {{"pdpd", "numpy", "none"}}, default "pdpd"
    How x and y broadcast, as in the op's call.
ties : {{"paddle", "torch"}}, default "paddle"
    Who gets ``dout`` where max/min meet a NaN (ignored by the other ops).

Returns
-------
(dx, dy)
    Shaped and typed as x and y; the summed side accumulated in float64 and rounded once,
    the same bits whatever the thread count.

Raises
------
ValueError
    Shapes that do not broadcast, or ``dout`` not of the broadcast shape.
TypeError
    Operands that are not floating point.

Examples
--------
>>> import numpy as np, jitops
>>> x, y = np.ones((2, 3, 4), np.float32), np.arange(3, dtype=np.float32)
>>> dx, dy = jitops.elementwise_{op}_grad(x, y, np.ones((2, 3, 4), np.float32), axis=1)
>>> dx.shape, dy.shape
((2, 3, 4), (3,))
"""

_MATHS = {
    "add": ("x + y", ""), "sub": ("x - y", ""), "mul": ("x * y", ""),
    "div": ("x / y", " ``dy = -dout * (x / y) / y``, as Paddle."),
    "max": ("max(x, y)", " A tie halves ``dout`` between x and y; where either is NaN, "
            "Paddle (``ties=\"paddle\"``) gives both 0 and PyTorch gives both ``dout``."),
    "min": ("min(x, y)", " A tie halves ``dout`` between x and y; where either is NaN, "
            "Paddle (``ties=\"paddle\"``) gives both 0 and PyTorch gives both ``dout``."),
    "fmax": ("fmax(x, y)", " x gets ``dout`` where it wins or ties or y is NaN; else y."),
    "fmin": ("fmin(x, y)", " x gets ``dout`` where it wins or ties or y is NaN; else y."),
    "pow": ("x ** y", " ``dx = dout * y * x**(y-1)``, ``dy = dout * log(x) * x**y``."),
}


def _make_grad(op: str):
    def grad(x: Any, y: Any, dout: Any, axis: int = -1, broadcast: Broadcast = "pdpd",
             ties: str = "paddle") -> tuple[Any, Any]:
        return _grad(op, x, y, dout, axis, broadcast, ties)

    grad.__name__ = grad.__qualname__ = f"elementwise_{op}_grad"
    grad.__module__ = "jitops"
    math, extra = _MATHS[op]
    grad.__doc__ = _GRAD_DOC.format(op=op, math=math, extra=extra)
    return grad


elementwise_add_grad = _make_grad("add")
elementwise_sub_grad = _make_grad("sub")
elementwise_mul_grad = _make_grad("mul")
elementwise_div_grad = _make_grad("div")
elementwise_max_grad = _make_grad("max")
elementwise_min_grad = _make_grad("min")
elementwise_fmax_grad = _make_grad("fmax")
elementwise_fmin_grad = _make_grad("fmin")
elementwise_pow_grad = _make_grad("pow")
