"""The CUDA backend: CUDA arrays for the pipeline, and the launch of a prepared call.

Imported only when CUDA is requested (``device="cuda"`` or a CUDA array operand). The checks,
dtypes, plan, ``out=`` and overlap policy are the pipeline's (jitops.core.pipeline), exactly as
on the CPU; this module says how CUDA arrays are read (the CUDA Array Interface, or the
simulator's host arrays), copied and allocated, and launches the kernels of
jitops.cuda.kernels over the plan.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
from numba import cuda

from ..core.device import is_cuda_array
from ..core.pipeline import PreparedCall, element_strides, in_place
from ..core.plan import CONTIG, contiguous_strides, make_plan
from . import kernels
from .kernels import SIMULATOR


def _host(a) -> np.ndarray | None:
    """The simulator's backing NumPy array (None on a real GPU)."""
    return getattr(a, "_ary", None) if SIMULATOR else None


def _c_byte_strides(shape, itemsize: int) -> tuple[int, ...]:
    return tuple(s * itemsize for s in contiguous_strides(tuple(shape)))


def _interface(a) -> dict:
    return a.__cuda_array_interface__


class CudaMemory:
    """CUDA arrays (anything with ``__cuda_array_interface__``, or the simulator's), for
    :func:`jitops.core.pipeline.prepare`."""

    name = "cuda"
    array_kind = "a CUDA array"

    @staticmethod
    def owns(v) -> bool:
        return is_cuda_array(v)

    @staticmethod
    def dtype(a) -> np.dtype:
        h = _host(a)
        if h is not None:
            return h.dtype
        return np.dtype(_interface(a)["typestr"])  # torch dtypes are not NumPy's: read the CAI

    @staticmethod
    def shape(a) -> tuple[int, ...]:
        h = _host(a)
        return tuple(h.shape) if h is not None else tuple(_interface(a)["shape"])

    def strides(self, a) -> tuple[int, ...]:
        h = _host(a)
        if h is not None:
            return tuple(h.strides)
        st = _interface(a).get("strides")
        return tuple(st) if st is not None else _c_byte_strides(self.shape(a),
                                                                self.dtype(a).itemsize)

    @staticmethod
    def address(a) -> int:
        h = _host(a)
        return h.__array_interface__["data"][0] if h is not None else _interface(a)["data"][0]

    @staticmethod
    def writeable(a) -> bool:
        h = _host(a)
        return bool(h.flags.writeable) if h is not None else not _interface(a)["data"][1]

    @staticmethod
    def from_host(a: np.ndarray):
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        return cuda.to_device(a)

    def ready(self, a):
        """A Numba device array the kernels can read in place, or an equivalent copy."""
        dt = self.dtype(a)
        if not dt.isnative:  # rare: converted through the host
            return self.from_host(self.to_host(a).astype(dt.newbyteorder("=")))
        if not in_place(self, a):
            return self.from_host(self.to_host(a))
        return a if SIMULATOR or _is_numba(a) else cuda.as_cuda_array(a)

    def to_host(self, a) -> np.ndarray:
        h = _host(a)
        if h is not None:
            return np.array(h)
        dense = self.copy(a) if not _dense(self, a) else a
        return dense.copy_to_host()

    def empty(self, shape, dtype: np.dtype, elem_strides):
        shape = tuple(shape)
        dtype = np.dtype(dtype)
        buf = cuda.device_array(max(math.prod(shape), 1), dtype)
        if elem_strides is None:
            bstr = _c_byte_strides(shape, dtype.itemsize)
        else:
            bstr = tuple(s * dtype.itemsize for s in elem_strides)
        h = _host(buf)
        if h is not None:
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(np.lib.stride_tricks.as_strided(h, shape, bstr))
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        return DeviceNDArray(shape, bstr, dtype, gpu_data=buf.gpu_data)

    def copy(self, a):
        c = self.empty(self.shape(a), self.dtype(a), None)
        self.copy_into(c, a)
        return c

    def any_zero(self, a) -> bool:
        return not self.to_host(a).all()

    def copy_into(self, dst, src) -> None:
        n = math.prod(self.shape(dst))
        if not n:
            return
        size = self.dtype(src).itemsize
        st = element_strides(self.strides(src), size)
        plan = make_plan((self.shape(src),), (st,), "none", -1,
                         element_strides(self.strides(dst), size))
        _run(kernels.copy(), plan, dst, src)


def _is_numba(a) -> bool:
    return type(a).__name__ in ("DeviceNDArray", "MappedNDArray", "ManagedNDArray")


def _dense(mem: CudaMemory, a) -> bool:
    return mem.strides(a) == _c_byte_strides(mem.shape(a), mem.dtype(a).itemsize)


def _flat(mem: CudaMemory, a):
    """(1-D view of the memory ``a`` spans, starting at its lowest address; the element index
    of ``a[0, ..., 0]`` in that view). Negative strides are read in place."""
    dt = mem.dtype(a)
    st = element_strides(mem.strides(a), dt.itemsize)
    shape = mem.shape(a)
    lo = sum((n - 1) * s for n, s in zip(shape, st) if s < 0 and n)
    hi = sum((n - 1) * s for n, s in zip(shape, st) if s > 0 and n)
    length = hi - lo + 1 if math.prod(shape) else 1
    start = mem.address(a) + lo * dt.itemsize
    h = _host(a)
    if h is not None:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        # the same memory seen from its lowest address (each negative-stride dim flipped)
        low = h[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in h.strides)] \
            if h.ndim else h
        assert low.__array_interface__["data"][0] == start
        return FakeCUDAArray(np.lib.stride_tricks.as_strided(low, (length,), (dt.itemsize,))), -lo

    class _Span:  # a CUDA Array Interface for the span, so no allocation is involved
        __cuda_array_interface__ = {"shape": (length,), "strides": None, "typestr": dt.str,
                                    "data": (start, False), "version": 3}

    return cuda.as_cuda_array(_Span()), -lo


def _meta(plan, bases) -> object:
    offs = [b + o for b, o in zip(bases, plan.iter_offsets)]
    meta = [len(plan.iter_shape), *plan.iter_shape, *(s for st in plan.iter_strides for s in st),
            *offs]
    return cuda.to_device(np.array(meta, np.int64))


def _small(plan, blocks: int, tpb: int) -> bool:
    """Whether every linear index of the grid-stride loop fits in 32 bits."""
    return plan.size + blocks * tpb < 2**31


MEMORY = CudaMemory()


def memory(where: str) -> CudaMemory:
    """The pipeline's view of CUDA arrays (the same on every GPU: arrays carry their own)."""
    return MEMORY


def on_device(where: str):
    """The context the call runs in: the chosen GPU (the simulator has only one)."""
    index = int(where.split(":")[1])
    return contextlib.nullcontext() if SIMULATOR else cuda.gpus[index]


def launch(call: PreparedCall) -> None:
    """Run a prepared call on the GPU (the pipeline made every operand a device array)."""
    if not call.plan.size:
        return
    names = tuple(MEMORY.dtype(a).name for a in call.inputs)
    if isinstance(call.impl, str):
        loops = kernels.elementwise(call.impl, call.act, *names, call.dtypes.result.name,
                                    call.dtypes.compute.name)
    else:  # a user op: its scalar function, compiled for the GPU
        loops = kernels.user_elementwise(call.impl.py_func, names, call.dtypes.result.name,
                                         call.dtypes.compute.name)
    _run(loops, call.plan, call.target, *call.inputs)


def _run(loops, plan, out, *inputs) -> None:
    """Launch ``loops`` (contig, strided) over ``plan`` for device arrays out and inputs."""
    flats = [_flat(MEMORY, a) for a in (out, *inputs)]
    blocks, tpb = kernels.launch_config(plan.size)
    starts = [b + o for (_, b), o in zip(flats, plan.iter_offsets)]
    contig, strided = loops
    arrays = [f for f, _ in flats]
    if plan.variant == CONTIG and len(plan.iter_shape) == 1 and not any(starts):
        contig[blocks, tpb](*arrays, plan.size)
    else:
        strided[blocks, tpb](*arrays, _meta(plan, [b for _, b in flats]), plan.size,
                             _small(plan, blocks, tpb))
