"""Reductions of broadcast results: ``sum_to``, the broadcast ops' gradients, and user ops
of several results or with ``reduce=``.

This module is their front end: it checks the operands, settles the dtypes and routes each
call as one pass to a backend (jitops.cpu.reduce; on CUDA operands jitops.cuda.reduce; on
Dask ones a graph of CPU passes), which jitops.core.reduction plans: the gradient's
full-shape side is written and its broadcast side summed while ``dout`` is read
once. Sums are accumulated in float64 (complex128, int64, uint64) and rounded once to the
result's dtype; they do not depend on the thread count (the plan fixes the order). No
floating-point warnings, as in Paddle's and PyTorch's autograd (a division by zero gives
inf; comparisons with NaN are not *invalid*).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from .core import grads, tensors
from .core.dtypes import compute_dtype, is_bfloat16, pass_common
from .core.errstate import report
from .core.pipeline import operand_names, refuse_masked
from .core.plan import align_all, check_axis_type, normalize_mode
from .core.protocols import overrides
from .core.reduction import accumulator, rounded, sum_to_frame
from .cpu import reduce as on_cpu
from .dask.backend import is_dask_array
from .signatures import Broadcast


def _refuse_meaning(v, name: str, fname: str) -> None:
    """A mask, labels or units are part of an operand's meaning, which a pass over its bare
    values would drop (a masked sum, misaligned labels): refused with a TypeError, as the
    elementwise pipeline refuses them where no protocol hands the call over."""
    refuse_masked(v, name, fname)
    if overrides((v,)):
        t = type(v)
        raise TypeError(f"jitops.{fname}: {name} is a {t.__module__}.{t.__qualname__}, which "
                        f"decides ufuncs itself (labels, units or a mask decide what an op "
                        f"means), and this pass would compute on its bare values; pass the "
                        f"underlying array (pandas: .to_numpy(); xarray: .data)")


def _host(v, name: str, fname: str) -> np.ndarray:
    if type(v) is np.ndarray:
        return v
    _refuse_meaning(v, name, fname)
    if isinstance(v, np.ndarray):
        return v
    if type(v).__module__.startswith("dask"):
        raise TypeError(f"jitops.{fname}: {name} is a {type(v).__name__}; pass all the "
                        f"operands as Dask arrays, or none")
    return np.asarray(v)


def _on_cuda(operands, device=None, fname: str = "") -> bool:
    """Whether a call runs on the GPU: a CUDA operand, or ``device`` asking for CUDA
    (RuntimeError where CUDA cannot run; never a CPU fallback)."""
    from .core.device import select

    return select(device, operands, None, fname) != "cpu"


def _remembered(tag: tuple, operands) -> tuple:
    """(the key a CUDA pass of this entry, ``tag``: its name and arguments, on ``operands``
    is remembered under, or None; the remembered pass's results launched again, or None):
    jitops.cuda.repeat's pass_key and pass_again."""
    from .cuda import repeat

    found = repeat.pass_key(tag, operands)
    return found, repeat.pass_again(found, operands)


def _cuda_pass(fn, key: str, cacheable: bool, operands, frames_in, space, frames, results,
               compute, lead: int, fname: str, device=None, outs=None, found=None) -> list:
    """jitops.cpu.reduce.run_pass on the GPU (jitops.cuda.reduce): the operands' GPU and
    stream, host operands uploaded as the elementwise ops' are; ``results`` are
    jitops.cuda.reduce.Result with each result's accumulator still to fill in from the
    function's values; ``outs`` (checked): per result None or the CUDA array it is copied
    into once computed (so any overlap with an operand is safe). ``found``: the call's key
    (:func:`_remembered`), under which a pass with no ``outs`` over a non-empty space is
    remembered (jitops.cuda.repeat), so that a repeat launches it again without planning."""
    from .cuda import reduce as on_gpu
    from .cuda import repeat
    from .cuda.backend import memory, on_device

    given = [o for o in outs or () if o is not None]
    mem = memory(device, [*operands, *given], None, fname)
    if found is not None and not given and math.prod(space):
        mem.made = []  # an empty space is not remembered: an empty mean warns every time
    with on_device(mem):
        ins = []
        for v in operands:
            v = v if mem.owns(v) else mem.from_host(np.asarray(v))
            dt = mem.dtype(v)
            if is_bfloat16(dt):
                raise TypeError(f"jitops.{fname}: bfloat16 runs on the CPU backend only (the "
                                f"CUDA kernels have no bfloat16 loads and stores yet)")
            ins.append(mem.ready(v))
        values, several = on_cpu.value_dtypes(fn, key, compute, len(ins), len(frames))
        for r, v in zip(results, values):
            if r.how != "store":
                r.acc = accumulator(r.how, v)
        done = on_gpu.run_pass(mem, fn, key, cacheable, ins, frames_in, tuple(space), frames,
                               results, compute, several, lead)
        if mem.made is not None:
            repeat.remember_pass(found, mem, operands, ins, done)
        for o, r in zip(outs or (), done):
            if o is not None:
                mem.copy_into(o, r)
    return done if outs is None else [r if o is None else o for o, r in zip(outs, done)]


_frame_of = lru_cache(maxsize=1024)(sum_to_frame)


class _SumOp:
    """What the lazy (Dask) path asks of a user op, for sum_to: its one operand summed over
    ``axes`` (kept), the identity as its function."""

    __name__ = "sum_to"
    py_func = staticmethod(grads.identity)
    reduce, keepdims, dtype = "sum", True, None

    def __init__(self, axes: tuple[int, ...]):
        self.axes = axes
        self.key, self.cacheable = on_cpu.function_key(grads.identity)

    @staticmethod
    def returns(compute: np.dtype, fname: str) -> tuple[np.dtype, ...]:
        return (compute,)


def sum_to(g: Any, shape: Any, broadcast: Broadcast = "numpy", axis: int = -1) -> Any:
    """Sum ``g`` over the axes a broadcast to its shape added: back to ``shape``.

    PyTorch's ``at::sum_to`` (``broadcast="numpy"``: the leading axes, and every axis where
    ``shape`` has 1), and Paddle's reduction of a gradient to an operand (``"pdpd"``: ``shape``
    laid onto ``g`` at ``axis``, its trailing 1s trimmed, as ``GetReduceDims``).

    Parameters
    ----------
    g : array_like
        The broadcast array (a gradient): NumPy, a PyTorch/Paddle CPU tensor, a CUDA array
        (summed on its GPU) or a Dask array.
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
    wrap, lazy, found = None, False, None
    if type(g) is np.ndarray:  # (a plain array needs none of the checks below)
        found = on_cpu.pass_key((fname, type(shape), shape, type(broadcast), broadcast,
                                 type(axis), axis), (g,))
        again = on_cpu.pass_again(found, (g,))
        if again is not None:
            return again[0][0]
    else:
        if _on_cuda((g,), None, fname):
            return _sum_to_cuda(g, shape, normalize_mode(broadcast), axis)
        host = tensors.unwrap((g,), None, fname)
        if host is not None:
            (g,), wrap = host.operands, host.wrap
        lazy = is_dask_array(g)
        if not lazy:
            g = _host(g, "g", fname)
    mode = normalize_mode(broadcast)
    shape = _shape_arg(shape, fname)
    _check_summable(g.dtype)
    frame = _frame_of(tuple(g.shape), shape, mode, axis)
    if lazy:  # per-chunk float64 partials, Dask's tree sum, rounded once
        axes = tuple(d for d, (n, f) in enumerate(zip(g.shape, frame)) if f == 1 and n != 1)
        summed = _several_lazy(_SumOp(axes), [g], [tuple(g.shape)], "numpy", -1, fname)
        return summed.astype(g.dtype).reshape(shape)
    how = "store" if tuple(frame) == tuple(g.shape) else "sum"
    (res,) = on_cpu.run_pass(grads.identity, [g], [g.shape], g.shape, [frame], [how],
                             [g.dtype], 0, fname, direct=True, found=found, shapes=[shape])
    return wrap(res) if wrap is not None else res


def _shape_arg(shape, fname: str) -> tuple[int, ...]:
    try:
        return tuple(int(n) for n in shape)
    except TypeError:
        raise TypeError(f"jitops.{fname}: shape must be a tuple of ints, got "
                        f"{type(shape).__name__}") from None


def _check_summable(dt: np.dtype) -> None:
    if dt.kind not in "iufc" and not is_bfloat16(dt):
        raise TypeError(f"jitops.sum_to: g has dtype {dt}; sum_to sums numbers "
                        f"(bool and non-numeric arrays are refused)")


def _sum_to_cuda(g, shape, mode: str, axis: int):
    from .cuda.backend import CudaMemory
    from .cuda.reduce import Result

    fname = "sum_to"
    found, again = _remembered((fname, type(shape), shape, mode, type(axis), axis), (g,))
    if again is not None:
        return again[0]
    shape = _shape_arg(shape, fname)
    mem = CudaMemory(0, None, "numba")  # only reads g's interface
    dt, gshape = mem.dtype(g), tuple(mem.shape(g))
    _check_summable(dt)
    frame = _frame_of(gshape, shape, mode, axis)
    how = "store" if tuple(frame) == gshape else "sum"
    key, cacheable = on_cpu.function_key(grads.identity)
    (res,) = _cuda_pass(grads.identity, key, cacheable, [g], [gshape], gshape, [frame],
                        [Result(how, None, dt, shape)], compute_dtype(dt), 0, fname,
                        found=found)
    return res


def _grad(op: str, x: Any, y: Any, dout: Any, axis: int, broadcast: Broadcast,
          ties: str) -> tuple[Any, Any]:
    fname = f"elementwise_{op}_grad"
    found = on_cpu.pass_key((fname, type(axis), axis, type(broadcast), broadcast, type(ties),
                             ties), (x, y, dout))
    again = on_cpu.pass_again(found, (x, y, dout))
    if again is not None:
        return again[0][0], again[0][1]
    if ties not in grads.TIES:
        raise ValueError(f"jitops.{fname}: ties must be one of {grads.TIES}, got {ties!r}")
    if _on_cuda((x, y, dout), None, fname):
        return _grad_cuda(op, x, y, dout, axis, normalize_mode(broadcast), ties)
    host = tensors.unwrap((x, y, dout), None, fname)
    wrap = None
    if host is not None:
        (x, y, dout), wrap = host.operands, host.wrap
    lazy = any(is_dask_array(v) for v in (x, y, dout))
    x, y, dout = (v if is_dask_array(v) else _host(v, n, fname)
                  for v, n in ((x, "x"), (y, "y"), (dout, "dout")))
    for v, n in ((x, "x"), (y, "y"), (dout, "dout")):
        if v.dtype.kind != "f" and not is_bfloat16(v.dtype):
            raise TypeError(f"jitops.{fname}: {n} has dtype {v.dtype}; gradients are "
                            f"computed for float16, bfloat16, float32 and float64")
    space, (fx, fy), hows = _grad_geometry(x.shape, y.shape, dout.shape,
                                           normalize_mode(broadcast), axis, fname)
    rule = grads.RULES[grads.rule_name(op, ties)]
    if lazy:
        return _grads_lazy(rule, (x, y, dout), (fx, fy, space), space, hows,
                           (x.dtype, y.dtype), fname)
    dx, dy = on_cpu.run_pass(rule, [x, y, dout], [fx, fy, space], space, [fx, fy], hows,
                             [x.dtype, y.dtype], 2, fname, found=found,
                             shapes=[x.shape, y.shape])
    if wrap is not None:
        return wrap(dx), wrap(dy)
    return dx, dy


def _grad_geometry(xs, ys, ds, mode: str, axis: int, fname: str):
    """The broadcast space of x and y, their frames in it, and per side ``store`` (x or y is
    the full shape) or ``sum``; ValueError where ``dout`` is not of that shape."""
    space, (fx, fy) = align_all((tuple(xs), tuple(ys)), mode, axis)
    if tuple(ds) != tuple(space):
        raise ValueError(f"jitops.{fname}: dout has shape {tuple(ds)}, but x {tuple(xs)} and "
                         f"y {tuple(ys)} broadcast to {space} (broadcast={mode!r}"
                         + (f", axis={axis})" if mode == "pdpd" else ")"))
    return space, (fx, fy), ["store" if tuple(f) == tuple(space) else "sum" for f in (fx, fy)]


def _grad_cuda(op: str, x, y, dout, axis: int, mode: str, ties: str):
    from .cuda.backend import CudaMemory
    from .cuda.reduce import Result

    fname = f"elementwise_{op}_grad"
    found, again = _remembered((fname, type(axis), axis, mode, ties), (x, y, dout))
    if again is not None:
        return again[0], again[1]
    mem = CudaMemory(0, None, "numba")  # only reads the interfaces
    desc = {}
    for v, n in ((x, "x"), (y, "y"), (dout, "dout")):
        if not mem.owns(v):
            raise TypeError(f"jitops.{fname}: {n} is a {type(v).__name__} while another "
                            f"operand is a CUDA array; pass all three on the GPU")
        dt = mem.dtype(v)
        if dt.kind != "f":
            raise TypeError(f"jitops.{fname}: {n} has dtype {dt}; gradients are computed "
                            f"for float16, float32 and float64 on CUDA")
        desc[n] = (tuple(mem.shape(v)), dt)
    (xs, xd), (ys, yd), (ds, dd) = desc["x"], desc["y"], desc["dout"]
    space, (fx, fy), hows = _grad_geometry(xs, ys, ds, mode, axis, fname)
    rule = grads.RULES[grads.rule_name(op, ties)]
    key, cacheable = on_cpu.function_key(rule)
    results = [Result(h, None, dt, s) for h, s, dt in zip(hows, (xs, ys), (xd, yd))]
    dx, dy = _cuda_pass(rule, key, cacheable, [x, y, dout], [fx, fy, space], space, [fx, fy],
                        results, compute_dtype(pass_common([xd, yd, dd])), 2, fname,
                        found=found)
    return dx, dy


def _grads_lazy(rule, arrays, frames_in, space, hows, dtypes, fname: str):
    """The gradients of Dask operands: one graph whose blocks run the pass (each block's
    stored gradient, and float64 partial sums of the other), the partials summed by Dask's
    own tree reduction and rounded once; shaped as the operands."""
    import operator

    import dask.array as da

    framed = [v if tuple(v.shape) == tuple(f) else v.reshape(f)
              for v, f in zip(arrays, frames_in)]
    blocks_in = da.broadcast_arrays(*[da.asarray(v) for v in framed])
    frames = frames_in[:2]
    axes = [tuple(d for d, (n, f) in enumerate(zip(space, fr)) if f == 1 and n != 1)
            for fr in frames]
    nd = len(space)

    def chunk(*blocks):
        bspace, bframes = align_all([b.shape for b in blocks], "numpy", -1)
        out = [tuple(1 if d in ax else n for d, n in enumerate(bspace)) for ax in axes]
        return tuple(on_cpu.run_pass(
            rule, list(blocks), bframes, bspace, out, hows,
            [dt if h == "store" else None for h, dt in zip(hows, dtypes)], 2, fname))

    tup = da.map_blocks(chunk, *blocks_in, dtype=object, meta=np.empty((0,) * nd, object),
                        name=f"jitops-{fname}-pass")
    done = []
    for r, (how, ax, dt) in enumerate(zip(hows, axes, dtypes)):
        shape = tuple(arrays[r].shape)
        if how == "store":
            done.append(tup.map_blocks(operator.getitem, r, dtype=dt,
                                       meta=np.empty((0,) * nd, dt)).reshape(shape))
            continue
        chunks = tuple((1,) * len(c) if d in ax else c for d, c in enumerate(tup.chunks))
        part = tup.map_blocks(operator.getitem, r, dtype=np.float64, chunks=chunks,
                              meta=np.empty((0,) * nd, np.float64))
        total = part.sum(axis=ax, keepdims=True, dtype=np.float64)
        done.append(total.astype(dt).reshape(shape))
    return tuple(done)


_GRAD_DOC = """The gradients of ``elementwise_{op}`` ({math}) for x and y: ``(dx, dy)``.

Paddle's ``elementwise_{op}_grad``: ``dout`` is the gradient of the op's result; each
operand's gradient is its rule (jitops.core.grads) summed over the axes its broadcast added,
with the shape of that operand, in one pass over ``dout``.{extra}

Parameters
----------
x, y : array_like
    The op's operands (float16, bfloat16, float32, float64): NumPy arrays, PyTorch/Paddle
    CPU tensors, CUDA arrays (all three on one GPU; no bfloat16) or Dask arrays.
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


# -- user ops with several results, some reduced ---------------------------------------

#: What each reduction gives NumPy's way (``np.<how>`` of a dtype's values).
_REDUCTIONS = ("sum", "prod", "max", "min", "any", "all", "mean")


def reduce_dtype(how: str, value: np.dtype) -> np.dtype:
    """The dtype NumPy's ``how`` reduction of ``value`` values gives (64-bit Linux)."""
    if how in ("any", "all"):
        return np.dtype(np.bool_)
    if how in ("sum", "prod"):
        if value.kind == "b" or (value.kind == "i" and value.itemsize < 8):
            return np.dtype(np.int64)
        if value.kind == "u" and value.itemsize < 8:
            return np.dtype(np.uint64)
        return value
    if how == "mean":
        return np.dtype(np.float64) if value.kind in "biu" else value
    return value  # max, min


def normalize_axes(axis, ndim: int, fname: str) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as sorted non-negative axes of ``ndim``;
    NumPy's AxisError (a ValueError and IndexError) or TypeError otherwise."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for a in items:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"jitops.{fname}: the reduction axis must be None, an int or a "
                            f"tuple of ints, got {axis!r}")
        a = int(a)
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim, f"jitops.{fname}")
        a %= ndim
        if a in out:
            raise ValueError(f"jitops.{fname}: duplicate value in the reduction axis {axis!r}")
        out.append(a)
    return tuple(sorted(out))


def normalize_hows(reduce, nres: int, fname: str) -> tuple:
    """``reduce`` (None, a reduction's name, or one entry per result, None to store) as one
    entry per result."""
    hows = reduce if isinstance(reduce, (tuple, list)) else (reduce,) * nres
    if len(hows) != nres:
        raise ValueError(f"jitops.{fname}: reduce= has {len(hows)} entries for a function of "
                         f"{nres} results")
    for h in hows:
        if h is not None and h not in _REDUCTIONS:
            raise ValueError(f"jitops.{fname}: unknown reduction {h!r}; one of "
                             f"{_REDUCTIONS} (or None to store the result)")
    return tuple(hows)


def _host_operand(v, name: str, fname: str):
    if isinstance(v, (bool, int, float, complex)):
        return v  # weak, NumPy 2's rules
    if is_dask_array(v):
        return v
    if type(v) is not np.ndarray:
        _refuse_meaning(v, name, fname)
    return np.asarray(v)


#: A weak Python scalar in a settling's key, by its type (a name: ``np.dtype("int64") == int``
#: and ``0 == 0.0 == False``), and the value standing in for it (NumPy 2 promotes it by type).
_WEAK = {bool: "weak bool", int: "weak int", float: "weak float", complex: "weak complex"}
_WEAK_STANDIN = {"weak bool": False, "weak int": 0, "weak float": 0.0, "weak complex": 0j}


def _kind(v) -> np.dtype | str:
    """An operand as its settling's key sees it: a dtype, or a weak Python scalar's name."""
    if isinstance(v, (bool, int, float, complex)) and not isinstance(v, np.generic):
        return next(name for t, name in _WEAK.items() if isinstance(v, t))
    return np.dtype(v.dtype)


class _Settled:
    """A call of several results settled on the full shapes (before anything runs): the
    compute dtype, the broadcast space and each input's frame, and per result its frame,
    the kernel's *how* and dtype (None: the accumulator comes back), the final dtype and
    shape; the reduced axes and how many elements each reduced element sums."""

    __slots__ = ("common", "compute", "space", "frames_in", "hows", "frames", "kernel_hows",
                 "kernel_dtypes", "final", "shapes", "axes", "count")

    def __init__(self, op, kinds, shapes, mode: str, axis: int, fname: str):
        from .core.dtypes import check_dtype, user_result

        for k in kinds:
            if isinstance(k, np.dtype):
                check_dtype(k, "an operand", fname)
        self.common = common = pass_common([_WEAK_STANDIN[k] if isinstance(k, str) else k
                                         for k in kinds])
        check_dtype(common, "the operands' common dtype", fname)
        self.compute = compute_dtype(common)
        if len(kinds) > on_cpu.MAX_INPUTS:
            raise TypeError(f"jitops.{fname}: a function of several results, or with "
                            f"reduce=, takes at most {on_cpu.MAX_INPUTS} inputs, got "
                            f"{len(kinds)}")
        returned = op.returns(self.compute, fname)
        if len(returned) > on_cpu.MAX_RESULTS:
            raise TypeError(f"jitops.{fname}: the function returns {len(returned)} values; at "
                            f"most {on_cpu.MAX_RESULTS} results are supported")
        self.hows = hows = normalize_hows(op.reduce, len(returned), fname)
        self.space, self.frames_in = space, _ = align_all(shapes, mode, axis)
        self.axes = axes = normalize_axes(op.axes, len(space), fname) if any(hows) else ()
        size = int(np.prod(space, dtype=np.int64))
        self.count = int(np.prod([space[d] for d in axes], dtype=np.int64))
        self.frames, self.kernel_hows, self.kernel_dtypes = [], [], []
        self.final, self.shapes = [], []
        for how, ret in zip(hows, returned):
            stored = op.dtype if op.dtype is not None else user_result(common, ret)
            if how is None:
                self.frames.append(tuple(space))
                self.kernel_hows.append("store")
                self.kernel_dtypes.append(stored)
                self.final.append(stored)
                self.shapes.append(tuple(space))
                continue
            if how in ("max", "min") and ret.kind == "c":
                raise TypeError(f"jitops.{fname}: {how} of complex results is not supported")
            if how in ("max", "min") and self.count == 0 and size == 0:
                raise ValueError(f"jitops.{fname}: zero-size array to reduction operation "
                                 f"{'maximum' if how == 'max' else 'minimum'} which has no "
                                 f"identity")
            # the values as the stored result would hold them (float16 too)
            self.frames.append(tuple(1 if d in axes else n for d, n in enumerate(space)))
            self.kernel_hows.append("sum" if how == "mean" else how)
            self.kernel_dtypes.append(None)  # the accumulator comes back; finished below
            self.final.append(reduce_dtype(how, stored))
            self.shapes.append(self.frames[-1] if op.keepdims else
                               tuple(n for d, n in enumerate(space) if d not in axes))

    @staticmethod
    def of(op, vals, shapes, mode: str, axis: int, fname: str) -> _Settled:
        """The settling of a call (memoised: it reads only the operands' dtypes, or a weak
        scalar's type, and their shapes, never a value)."""
        kinds = tuple(_kind(v) for v in vals)
        return _settled(op, kinds, tuple(tuple(sh) for sh in shapes), mode, axis, fname)

    def warn_empty_means(self) -> None:
        """NumPy's warning for a mean of nothing (its 0/0 then warns *invalid* as NumPy's)."""
        if self.count == 0 and "mean" in self.hows:
            import warnings

            from .core.errstate import stacklevel

            warnings.warn("Mean of empty slice", RuntimeWarning, stacklevel=stacklevel())

    def finish(self, results) -> list:
        """The kernel's results (accumulators for the reduced ones) as the final arrays."""
        done = []
        self.warn_empty_means()
        for how, r, dt, shape in zip(self.hows, results, self.final, self.shapes):
            if how == "mean":
                with np.errstate(**({} if self.count == 0 else {"invalid": "ignore",
                                                                  "divide": "ignore"})):
                    n = self.count if r.dtype.kind == "c" else np.float64(self.count)
                    # (a full mean of a float64/complex result divides NumPy scalars, as its
                    # own does: its 0/0 warns "in scalar divide")
                    r = np.asarray(r.reshape(())[()] / n) if not shape and dt.itemsize >= 8 \
                        else r / n
            if how in ("any", "all"):
                r = r != 0
            done.append(rounded(r, dt).reshape(shape))
        return done


@lru_cache(maxsize=512)
def _settled(op, kinds, shapes, mode, axis, fname) -> _Settled:
    return _Settled(op, kinds, shapes, mode, axis, fname)


def call_several(op, operands: tuple, broadcast, axis: int, out, device) -> Any:
    """A user op (jitops.fusion.ElementwiseOp) whose function returns several values, or
    whose results are reduced (``op.reduce``, over ``op.axes``): one pass over the
    operands, each result stored or reduced (jitops.cpu.kernels.reduce); Dask operands chunk by
    chunk (:func:`_several_lazy`)."""
    fname = op.__name__
    wrap = found = None
    if out is None and device is None:  # NumPy arrays: a repeat runs its remembered pass
        found = on_cpu.pass_key((op, type(broadcast), broadcast, type(axis), axis), operands)
        again = on_cpu.pass_again(found, operands)
        if again is not None:
            results, status, st = again
            return _several_done(st, results, status, fname)
    # (plain operands need none of the device, tensor, Dask and meaning checks)
    plain = device is None and all(type(v) is np.ndarray or type(v) in _WEAK for v in operands)
    if plain:
        vals = list(operands)
    else:
        if _on_cuda(operands, device, fname):
            return _several_cuda(op, operands, broadcast, axis, out, device)
        host = tensors.unwrap(operands, None, fname)
        if host is not None:
            operands, wrap = host.operands, host.wrap
        vals = [_host_operand(v, n, fname)
                for v, n in zip(operands, operand_names(len(operands)))]
    mode = normalize_mode(broadcast)
    axis = check_axis_type(axis)
    shapes = [() if isinstance(v, (bool, int, float, complex)) else tuple(v.shape)
              for v in vals]
    if not plain and any(is_dask_array(v) for v in vals):
        if out is not None:
            raise TypeError(f"jitops.{fname}: out= is not supported with Dask inputs (the "
                            f"results are new lazy Dask arrays)")
        return _several_lazy(op, vals, shapes, mode, axis, fname)
    st = _Settled.of(op, vals, shapes, mode, axis, fname)
    inputs = [v if isinstance(v, np.ndarray) else np.asarray(v, st.common) for v in vals]
    outs = _check_outs(out, st.shapes, st.final, len(st.hows), fname)
    lead = max(range(len(inputs)), key=lambda i: inputs[i].size)
    into = None if outs is None else [_writable_in_place(o, how, inputs)
                                      for o, how in zip(outs, st.kernel_hows)]
    results, status = on_cpu.run_pass_status(
        op.py_func, inputs, st.frames_in, st.space, st.frames, st.kernel_hows,
        st.kernel_dtypes, lead, fname, st.compute, (op.key, op.cacheable), into=into,
        found=found, data=st)
    if outs is None and wrap is None:
        return _several_done(st, results, status, fname)
    if status >= on_cpu.FP_RAISED:
        report(status, fname)
    done = st.finish(results)
    if outs is not None:
        for o, r, w in zip(outs, done, into):
            if o is not None and w is None:  # computed apart (a reduction, an overlap ...)
                np.copyto(o, r, casting="no")
        done = [r if o is None else o for o, r in zip(outs, done)]
    else:
        done = [wrap(r) for r in done]
    return tuple(done) if len(done) > 1 else done[0]


def _several_done(st: _Settled, results: list, status: int, fname: str):
    """A pass's results on NumPy operands as call_several returns them: flags reported,
    reductions finished, 0-d results as NumPy scalars, a single result alone."""
    if status >= on_cpu.FP_RAISED:
        report(status, fname)
    done = [r[()] if r.ndim == 0 else r for r in st.finish(results)]
    return tuple(done) if len(done) > 1 else done[0]


def _several_cuda(op, operands: tuple, broadcast, axis: int, out, device):
    from .cuda.backend import CudaMemory
    from .cuda.reduce import Result

    fname = op.__name__
    found, again = (None, None) if out is not None else _remembered(
        (op, type(broadcast), broadcast, type(axis), axis, type(device), device), operands)
    if again is not None:
        return tuple(again) if len(again) > 1 else again[0]
    mem = CudaMemory(0, None, "numba")  # only reads the interfaces
    vals, shapes = [], []
    for v in operands:
        if isinstance(v, (bool, int, float, complex)):
            vals.append(v)
            shapes.append(())
        elif mem.owns(v):
            vals.append(np.empty(0, mem.dtype(v)))  # what _Settled reads: the dtype
            shapes.append(tuple(mem.shape(v)))
        else:
            h = np.asarray(v)
            vals.append(h)
            shapes.append(h.shape)
    st = _Settled.of(op, vals, shapes, normalize_mode(broadcast), check_axis_type(axis), fname)
    ins = [np.asarray(v, st.common) if isinstance(v, (bool, int, float, complex)) else v
           for v in operands]
    results = [Result(kh, None, dt if kh == "store" else fd, shape,
                      st.count if how == "mean" else None)
               for kh, dt, fd, shape, how in zip(st.kernel_hows, st.kernel_dtypes, st.final,
                                                 st.shapes, st.hows)]
    lead = max(range(len(shapes)), key=lambda i: int(np.prod(shapes[i])))
    outs = _check_cuda_outs(mem, out, st, fname)
    st.warn_empty_means()  # (a GPU keeps no floating-point flags: no *invalid* after it)
    done = _cuda_pass(op.py_func, op.key, op.cacheable, ins, st.frames_in, st.space,
                      st.frames, results, st.compute, lead, fname, device, outs, found)
    return tuple(done) if len(done) > 1 else done[0]


def _check_cuda_outs(mem, out, st: _Settled, fname: str):
    """``out`` as one entry per result (None: a new array), each checked as a single-result
    call's ``out`` is (jitops.core.pipeline.check_out) before anything runs."""
    from .core.pipeline import check_out, overlaps

    if out is None:
        return None
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(st.hows):
        raise ValueError(f"jitops.{fname}: out= has {len(outs)} entries for {len(st.hows)} "
                         f"results")
    for i, (o, shape, dt) in enumerate(zip(outs, st.shapes, st.final)):
        if o is not None:
            check_out(mem, o, tuple(shape), dt, f"{fname} (out[{i}])")
    # (byte ranges: interleaved views are refused too)
    _refuse_shared(outs, lambda a, b: overlaps(mem, a, b), fname)
    return outs


def _writable_in_place(o, how: str, inputs) -> np.ndarray | None:
    """``o`` where a stored result can be written straight into it (C order and aligned, as
    the pass writes its stored results, and sharing no memory with an input, so that no
    element is read after it was written); else None: computed apart, then copied."""
    if o is None or how != "store" or not o.flags.c_contiguous or not o.flags.aligned:
        return None
    if any(np.may_share_memory(o, a) for a in inputs):
        return None
    return o


def _chunk_of(op, fname: str, hows: tuple, kernel_dtypes: tuple, axes: tuple, compute):
    """The function a Dask graph runs on one set of blocks (frames of equal rank, NumPy's
    broadcasting): the results of those blocks, a reduced one as its accumulator's partial
    (1 on the reduced axes)."""
    def chunk(*blocks):
        space, frames_in = align_all([b.shape for b in blocks], "numpy", -1)
        frames = [tuple(space) if h == "store" else
                  tuple(1 if d in axes else n for d, n in enumerate(space)) for h in hows]
        lead = max(range(len(blocks)), key=lambda i: blocks[i].size)
        results, status = on_cpu.run_pass_status(
            op.py_func, list(blocks), frames_in, space, frames, list(hows),
            list(kernel_dtypes), lead, fname, compute, (op.key, op.cacheable))
        if status >= on_cpu.FP_RAISED:
            report(status, fname)
        return tuple(results)
    return chunk


def _several_lazy(op, vals, shapes, mode: str, axis: int, fname: str):
    """Dask operands: one graph whose blocks run the pass (a tuple of each block's results),
    each stored result a getitem of it, each reduced one its per-block partials combined by
    Dask's own tree reduction (a sum of float64 partials, a max of maxima ...), then
    finished as on the CPU."""
    import operator

    import dask.array as da

    st = _Settled.of(op, vals, shapes, mode, axis, fname)
    st.warn_empty_means()
    framed = []
    for v, s, f in zip(vals, shapes, st.frames_in):
        if isinstance(v, (bool, int, float, complex)):
            v = np.asarray(v, st.common)
        framed.append(v if tuple(s) == tuple(f) else v.reshape(f))
    arrays = da.broadcast_arrays(*[da.asarray(v) for v in framed])
    nd = len(st.space)
    chunk = _chunk_of(op, fname, tuple(st.kernel_hows), tuple(st.kernel_dtypes), st.axes,
                      st.compute)
    blocks = da.map_blocks(chunk, *arrays, dtype=object,
                           meta=np.empty((0,) * nd, dtype=object),
                           name=f"jitops-{fname}-pass")
    done = []
    for r, how in enumerate(st.hows):
        if how is None:
            done.append(blocks.map_blocks(operator.getitem, r, dtype=st.final[r],
                                          meta=np.empty((0,) * nd, st.final[r])))
            continue
        acc = accumulator(st.kernel_hows[r], np.dtype(st.final[r]) if how != "mean"
                                  else np.dtype(np.float64))
        chunks = tuple((1,) * len(c) if d in st.axes else c
                       for d, c in enumerate(blocks.chunks))
        part = blocks.map_blocks(operator.getitem, r, dtype=acc, chunks=chunks,
                                 meta=np.empty((0,) * nd, acc))
        kh = st.kernel_hows[r]
        if kh == "sum":
            total = part.sum(axis=st.axes, keepdims=True, dtype=part.dtype)
        elif kh == "prod":
            total = part.prod(axis=st.axes, keepdims=True, dtype=part.dtype)
        elif kh == "max":
            total = part.max(axis=st.axes, keepdims=True)
        elif kh == "min":
            total = part.min(axis=st.axes, keepdims=True)
        elif kh == "any":
            total = (part != 0).any(axis=st.axes, keepdims=True)
        else:
            total = (part != 0).all(axis=st.axes, keepdims=True)
        if how == "mean":
            total = total / np.float64(st.count) if total.dtype.kind != "c" else \
                total / st.count
        done.append(total.astype(st.final[r]).reshape(st.shapes[r]))
    return tuple(done) if len(done) > 1 else done[0]


def _check_outs(out, shapes, dtypes, nres: int, fname: str):
    """``out`` as one entry per result (None: a new array), each checked before anything is
    written: exactly the result's shape and dtype, writeable."""
    if out is None:
        return None
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != nres:
        raise ValueError(f"jitops.{fname}: out= has {len(outs)} entries for {nres} results")
    for i, (o, shape, dt) in enumerate(zip(outs, shapes, dtypes)):
        if o is None:
            continue
        if not isinstance(o, np.ndarray):
            raise TypeError(f"jitops.{fname}: out[{i}] must be a numpy.ndarray, got "
                            f"{type(o).__name__}")
        if o.shape != tuple(shape):
            raise ValueError(f"jitops.{fname}: out[{i}] has shape {o.shape}, the result "
                             f"{tuple(shape)}")
        if o.dtype != dt:
            raise TypeError(f"jitops.{fname}: out[{i}] has dtype {o.dtype}, the result {dt}")
        refuse_masked(o, f"out[{i}]", fname)
        if not o.flags.writeable:
            raise ValueError(f"jitops.{fname}: out[{i}] is read-only")
    _refuse_shared(outs, _overlap, fname)
    return outs


def _refuse_shared(outs, overlap, fname: str) -> None:
    """ValueError where two ``out`` entries share memory (``overlap(a, b)``): which result
    an element would end up holding is defined nowhere."""
    given = [(i, o) for i, o in enumerate(outs) if o is not None]
    for k, (i, a) in enumerate(given):
        for j, b in given[k + 1:]:
            if overlap(a, b):
                raise ValueError(f"jitops.{fname}: out[{i}] and out[{j}] share memory, so "
                                 f"which result an element ends up holding would not be "
                                 f"defined; pass separate arrays")


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` share an element (interleaved views do not); where that is
    too hard to decide, assumed so."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10**5))
    except np.exceptions.TooHardError:
        return True
