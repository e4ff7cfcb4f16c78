"""numba.cuda kernels on the same plan and the same scalar table as the CPU.

Imported only when CUDA is requested (``device="cuda"`` or a CUDA array operand), so
``import jitops`` never touches the CUDA driver.

Two kernels per specialisation, both grid-stride loops (CuPy's ``CUPY_FOR``):

* ``contig``  -- every operand is one dense 1-D run: ``o[i] = f(x[i], y[i])``, no index math;
* ``strided`` -- the planner's coalesced N-d space: unravel the linear index with div/mod per
  dim into per-operand element offsets (CuPy's ``CIndexer``), in 32-bit arithmetic when every
  offset fits, 64-bit otherwise ("64-bit division is very slow on GPU").

Operands are addressed as 1-D views over their memory span plus element strides from the
planner, exactly as on the CPU. CUDA arrays are used in place (no copies) unless they have
negative strides or overlap ``out``; host operands are copied to the device.
"""

from __future__ import annotations

import contextlib
import functools

import numba
import numpy as np
from numba import cuda, types
from numba.np.numpy_support import from_dtype

from . import _config, _scalar
from ._api import _as_operand, _check_act, _weak_to_array
from ._device import is_cuda_array
from ._dtypes import (
    act_dtype,
    check_dtype,
    implementation,
    kernel_op,
    resolve,
    weak_scalar_dtype,
)
from ._plan import CONTIG, make_plan

#: Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set before numba is imported).
SIMULATOR = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))


def _is_device_array(a) -> bool:
    return is_cuda_array(a)


def _as_device(a):
    """A Numba device array for any CUDA array (CuPy, PyTorch, Numba), without copying."""
    if SIMULATOR or type(a).__name__ in ("DeviceNDArray", "FakeCUDAArray"):
        return a
    return cuda.as_cuda_array(a)


def _host_view(a) -> np.ndarray | None:
    """The simulator's backing NumPy array (None on a real GPU)."""
    return getattr(a, "_ary", None) if SIMULATOR else None


def _data_ptr(a) -> int:
    h = _host_view(a)
    if h is not None:
        return h.__array_interface__["data"][0]
    return a.__cuda_array_interface__["data"][0]


def _elem_strides(a) -> tuple[int, ...]:
    return tuple(s // a.dtype.itemsize for s in a.strides)


def _span(a) -> tuple[int, int]:
    """[first, last] byte address an array touches (strides are non-negative here)."""
    p = _data_ptr(a)
    hi = sum(s * (n - 1) for s, n in zip(a.strides, a.shape) if n)
    return p, p + hi + a.dtype.itemsize - 1


def _overlaps(a, b) -> bool:
    if a.size == 0 or b.size == 0:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 <= b1 and b0 <= a1


def _flat_view(a, length: int):
    """A 1-D, unit-stride view of ``length`` elements starting at ``a``'s data pointer."""
    h = _host_view(a)
    if h is not None:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.lib.stride_tricks.as_strided(h, (length,), (h.itemsize,)))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray((length,), (a.dtype.itemsize,), a.dtype, gpu_data=a.gpu_data)


def _strided_view(base, shape, elem_strides, dtype):
    h = _host_view(base)
    item = np.dtype(dtype).itemsize
    bstr = tuple(s * item for s in elem_strides)
    if h is not None:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.lib.stride_tricks.as_strided(h, shape, bstr))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(shape, bstr, np.dtype(dtype), gpu_data=base.gpu_data)


def _span_len(a) -> int:
    return 1 + sum(s * (n - 1) for s, n in zip(_elem_strides(a), a.shape) if n) if a.size else 1


def _divmod_py(r, n):
    return r // n, r % n


def _make_divmod32():
    """Unsigned 32-bit div/mod: Numba types int32 arithmetic as int64, and 64-bit division is
    several times slower on a GPU, so the narrowing is done in LLVM directly."""
    from llvmlite import ir
    from numba.extending import intrinsic

    @intrinsic
    def divmod32(typingctx, r, n):
        sig = types.UniTuple(types.int64, 2)(r, n)

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            a, b = builder.trunc(args[0], i32), builder.trunc(args[1], i32)
            q, m = builder.zext(builder.udiv(a, b), i64), builder.zext(builder.urem(a, b), i64)
            return context.make_tuple(builder, signature.return_type, [q, m])

        return sig, codegen

    return divmod32


#: 32-bit div/mod on a GPU; plain Python in the simulator (which cannot run intrinsics).
divmod32 = _divmod_py if SIMULATOR else _make_divmod32()


if not SIMULATOR:  # the simulator runs the table's plain-Python fma
    from numba.core.extending import overload

    @overload(_scalar.fma, target="cuda")
    def _ov_fma(a, b, c):
        if isinstance(a, types.Float) and a == b == c:
            return lambda a, b, c: cuda.fma(a, b, c)
        return None


@functools.cache
def _device_fn(fn):
    return cuda.jit(device=True)(fn)


@functools.cache
def kernels(op: str, act: str | None, x: str, y: str, out: str, compute: str):
    """The (contig, strided) kernels of one specialisation, built from the scalar table."""
    T = from_dtype(np.dtype(compute))
    A = from_dtype(act_dtype(act, np.dtype(compute)))  # as on the CPU (jitops._spec)
    f = _device_fn(_scalar.OPS[op])
    g = _device_fn(_scalar.ACTS[act])
    out_t = types.boolean if out == "bool" else from_dtype(np.dtype(out))

    @cuda.jit(device=True)
    def elem(a, b):
        return out_t(g(A(T(f(T(a), T(b), T))), A))

    @cuda.jit
    def contig(o, xa, ya, n):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < n:
            o[i] = elem(xa[i], ya[i])
            i += step

    @cuda.jit
    def strided(o, xa, ya, meta, n, small):
        # meta: [nd, shape..., out strides..., x strides..., y strides...]; `small` says every
        # index and offset fits in 32 bits, so the per-dim div/mod can run in 32-bit.
        nd = meta[0]
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < n:
            r = i
            oo = 0
            xo = 0
            yo = 0
            for d in range(nd - 1, -1, -1):
                sz = meta[1 + d]
                if small:
                    r, k = divmod32(r, sz)
                else:
                    k = r % sz
                    r //= sz
                oo += k * meta[1 + nd + d]
                xo += k * meta[1 + 2 * nd + d]
                yo += k * meta[1 + 3 * nd + d]
            o[oo] = elem(xa[xo], ya[yo])
            i += step

    return contig, strided


def _launch_config(n: int) -> tuple[int, int]:
    """Blocks and threads per block for ``n`` elements (grid-stride loops cover the rest)."""
    tpb = _config.CUDA_THREADS_PER_BLOCK
    blocks = max(1, min(-(-n // tpb), _config.CUDA_MAX_BLOCKS))
    return blocks, tpb


def _to_device_operand(v, common: np.dtype, fname: str, name: str):
    if _is_device_array(v):
        d = _as_device(v)
        check_dtype(np.dtype(d.dtype), name, fname)
        if any(s < 0 for s in d.strides) or any(s % d.dtype.itemsize for s in d.strides):
            d = cuda.to_device(np.ascontiguousarray(d.copy_to_host()))
        return d
    a = _weak_to_array(v, common, fname)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return cuda.to_device(np.ascontiguousarray(a))


def _unaliased(src, od):
    """``src`` itself, unless it overlaps ``out`` without being exactly ``out``: then a copy
    (an exact alias runs in place, as on the CPU)."""
    same = (tuple(src.shape) == tuple(od.shape) and src.strides == od.strides
            and _data_ptr(src) == _data_ptr(od))
    if same or not _overlaps(src, od):
        return src
    copy = cuda.device_array(src.shape, src.dtype)
    copy.copy_to_device(src)
    return copy


def binary(op, fname, x, y, mode, axis, act, out, target):
    """CUDA counterpart of :func:`jitops._api.binary` (same checks, same plan, same math)."""
    index = int(target.split(":")[1])
    act = _check_act(act, fname)
    with cuda.gpus[index] if not SIMULATOR else contextlib.nullcontext():
        xv = x if _is_device_array(x) else _as_operand(x, "x", fname)
        yv = y if _is_device_array(y) else _as_operand(y, "y", fname)
        xt = np.dtype(xv.dtype) if _is_device_array(xv) or isinstance(xv, np.ndarray) else xv
        yt = np.dtype(yv.dtype) if _is_device_array(yv) or isinstance(yv, np.ndarray) else yv
        for t, name in ((xt, "x"), (yt, "y")):
            if isinstance(t, np.dtype):
                check_dtype(t, name, fname)
        common = np.result_type(xt, yt)
        op = kernel_op(op, common)
        dt = resolve(op, xt, yt, fname, act)
        weak = weak_scalar_dtype(op, xt, yt, common)
        xd = _to_device_operand(xv, weak, fname, "x")
        yd = _to_device_operand(yv, weak, fname, "y")
        plan = make_plan(tuple(xd.shape), _elem_strides(xd), tuple(yd.shape), _elem_strides(yd),
                         mode, axis)
        if out is not None:
            if not _is_device_array(out):
                raise TypeError(f"jitops.{fname}: on CUDA, out must be a CUDA array, got "
                                f"{type(out).__name__}")
            od = _as_device(out)
            if tuple(od.shape) != plan.out_shape:
                raise ValueError(f"jitops.{fname}: out has shape {tuple(od.shape)}, but the "
                                 f"result has shape {plan.out_shape}")
            if np.dtype(od.dtype) != dt.result:
                raise TypeError(f"jitops.{fname}: out has dtype {od.dtype}, but the result "
                                f"dtype is {dt.result} (out must match exactly)")
            if any(s <= 0 and n > 1 for s, n in zip(od.strides, od.shape)):
                raise ValueError(f"jitops.{fname}: out has internal overlap or negative strides "
                                 "(a zero or negative stride on a dimension of size > 1)")
            xd, yd = _unaliased(xd, od), _unaliased(yd, od)
            plan = make_plan(tuple(xd.shape), _elem_strides(xd), tuple(yd.shape),
                             _elem_strides(yd), mode, axis, _elem_strides(od))
        else:
            buf = cuda.device_array(max(plan.size, 1), dt.result)
            od = _strided_view(buf, plan.out_shape, plan.out_strides, dt.result)
        if op == "trunc_divide" and plan.size and not yd.copy_to_host().all():
            raise ZeroDivisionError(f"jitops.{fname}: integer division by zero (y contains 0)")
        if plan.size == 0:
            return out if out is not None else od
        if any(plan.iter_offsets):  # the CPU's negative-stride flip needs no flip here
            raise AssertionError("unreachable: device operands have non-negative strides")
        contig, strided = kernels(implementation(op, dt.result), act, np.dtype(xd.dtype).name,
                                  np.dtype(yd.dtype).name, dt.result.name, dt.compute.name)
        o1 = _flat_view(od, _span_len(od))
        x1 = _flat_view(xd, _span_len(xd))
        y1 = _flat_view(yd, _span_len(yd))
        blocks, tpb = _launch_config(plan.size)
        if plan.variant == CONTIG and len(plan.iter_shape) == 1:
            contig[blocks, tpb](o1, x1, y1, plan.size)
        else:
            big = max(plan.size + blocks * tpb, *(_span_len(a) for a in (od, xd, yd)))
            meta = [len(plan.iter_shape), *plan.iter_shape,
                    *(s for st in plan.iter_strides for s in st)]
            dmeta = cuda.to_device(np.array(meta, np.int64))
            strided[blocks, tpb](o1, x1, y1, dmeta, plan.size, big < 2**31)
        return out if out is not None else od

