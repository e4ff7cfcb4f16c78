"""The CUDA backend: CUDA arrays for the pipeline, and the launch of a prepared call.

Imported only when CUDA is requested (``device="cuda"`` or a CUDA array operand). The checks,
dtypes, plan, ``out=`` and overlap policy are the pipeline's (jitops.core.pipeline), exactly as
on the CPU; this module decides where and on which stream a call runs (SPEC section 7), says
how CUDA arrays are read, copied and allocated, and launches the kernels of
jitops.cuda.kernels over the plan.

Per call, on a real GPU:

* the GPU is the operands' (RuntimeError when they are on different GPUs, or not on the one
  ``device="cuda:N"`` names, or there is no GPU N);
* the stream is the operands' producer's (CuPy's or PyTorch's current stream, else the CAI v3
  stream the array declares); operands declaring other streams are waited for with an event
  on the device, never by the host;
* nothing is allocated on the device but the result and the copies the overlap policy needs
  (the result by the operands' own library, on that stream); shapes, strides and offsets go
  to the kernel by value, Python scalars are uploaded once and kept;
* nothing comes back to the host, except the one flag of the integer ``elementwise_div``
  zero check (which must raise before anything is written).
"""

from __future__ import annotations

import collections
import contextlib
import math

import numpy as np
from numba import cuda

from ..core import device as _device
from ..core.dtypes import is_bfloat16
from ..core.pipeline import PreparedCall, element_strides, in_place
from ..core.plan import CONTIG, contiguous_strides, make_plan
from . import arrays, kernels
from .spec import SIMULATOR, CudaSpec, magic, register, storage_dtype

#: The last launches: (kernel, device, stream handle or None for the default stream).
#: What tests read to see where a call ran; a bounded record, not a log.
LAUNCHES: collections.deque = collections.deque(maxlen=32)


def _c_byte_strides(shape, itemsize: int) -> tuple[int, ...]:
    return tuple(s * itemsize for s in contiguous_strides(tuple(shape)))


_host = arrays.host_view


def _stream_object(handle: int | None):
    """The Numba stream for a CAI stream handle (the simulator has only its own)."""
    if SIMULATOR:
        return 0
    if handle is None:
        return cuda.default_stream()
    if handle == arrays.LEGACY_DEFAULT:
        return cuda.legacy_default_stream()
    if handle == arrays.PER_THREAD_DEFAULT:
        return cuda.per_thread_default_stream()
    s = _STREAMS.get(handle)
    if s is None:
        if len(_STREAMS) > 64:
            _STREAMS.clear()
        s = _STREAMS[handle] = cuda.external_stream(handle)
    return s


_STREAMS: dict[int, object] = {}
_SCALARS: dict[tuple, object] = {}
_FLAGS: dict[int, object] = {}


class _Described:
    """What a CUDA array's interface says (or, under the simulator, its host view's): dtype,
    shape, byte strides, address, whether it may be written, the stream its CAI declares."""

    __slots__ = ("dtype", "shape", "strides", "address", "writeable", "stream", "masked")

    def __init__(self, a):
        h = _host(a)
        if h is not None:
            self.dtype, self.shape, self.strides = h.dtype, tuple(h.shape), tuple(h.strides)
            self.address = h.__array_interface__["data"][0]
            cai = {} if hasattr(a, "_ary") else arrays.interface(a)  # host memory posing
            self.writeable = bool(h.flags.writeable) and not cai.get("data", (0, False))[1]
            self.stream, self.masked = cai.get("stream"), cai.get("mask") is not None
            return
        cai = arrays.interface(a)
        self.stream = cai.get("stream")
        self.masked = cai.get("mask") is not None
        self.dtype = np.dtype(cai["typestr"])  # a torch dtype is not NumPy's
        self.shape = tuple(cai["shape"])
        st = cai.get("strides")
        self.strides = tuple(st) if st is not None else _c_byte_strides(self.shape,
                                                                        self.dtype.itemsize)
        self.address, readonly = cai["data"]
        self.writeable = not readonly


class CudaMemory:
    """CUDA arrays (anything with ``__cuda_array_interface__``, or the simulator's), for
    :func:`jitops.core.pipeline.prepare`: one per call, knowing its GPU, stream and the kind
    of array its results are."""

    name = "cuda"
    array_kind = "a CUDA array"

    def __init__(self, device: int, stream: int | None, result_kind: str,
                 waits: tuple[int, ...] = ()):
        self.device, self.stream, self.result_kind, self.waits = (device, stream, result_kind,
                                                                  waits)
        self._stream_obj = None
        self._described: dict[int, tuple[object, _Described]] = {}
        #: This call's launches, as (kernel, blocks, threads per block, arguments): what
        #: jitops.cuda.repeat remembers of a call it can launch again.
        self.launched: list[tuple] = []
        #: Whether the call read an operand's values on the host's behalf (the zero check).
        self.read_values = False
        #: Where a pass being remembered records what it allocates (jitops.cuda.repeat):
        #: ``(empty()'s arguments, None, array)`` or ``(None, host value, array)``.
        self.made: list | None = None

    # -- reading arrays ------------------------------------------------------------------------
    # Each operand's interface is read once a call (a numba array builds its CAI dict anew at
    # every read, and the pipeline asks dozens of questions per call): described() keeps the
    # answers for the call's lifetime, the object held so its id stays its own.
    @staticmethod
    def owns(v) -> bool:
        return _device.is_cuda_array(v)

    def described(self, a) -> _Described:
        got = self._described.get(id(a))
        if got is None or got[0] is not a:
            got = self._described[id(a)] = (a, _Described(a))
        return got[1]

    def dtype(self, a) -> np.dtype:
        return self.described(a).dtype

    def shape(self, a) -> tuple[int, ...]:
        return self.described(a).shape

    def strides(self, a) -> tuple[int, ...]:
        return self.described(a).strides

    def address(self, a) -> int:
        return self.described(a).address

    def writeable(self, a) -> bool:
        return self.described(a).writeable

    # -- streams ------------------------------------------------------------------------------
    @property
    def stream_obj(self):
        if self._stream_obj is None:
            self._stream_obj = _stream_object(self.stream)
            if not SIMULATOR:
                for other in self.waits:  # ordered after the other producers, on the device
                    ev = cuda.event(timing=False)
                    ev.record(_stream_object(other))
                    ev.wait(self._stream_obj)
        return self._stream_obj

    # -- making arrays ------------------------------------------------------------------------
    def from_host(self, a: np.ndarray):
        d = self._from_host(a)
        if self.made is not None:
            self.made.append((None, np.array(a), d))
        return d

    def _from_host(self, a: np.ndarray):
        if a.ndim == 0:  # a Python or NumPy scalar: uploaded once, kept (never written)
            key = (self.device, a.dtype.str, a.tobytes())
            d = _SCALARS.get(key)
            if d is None:
                if len(_SCALARS) >= 1024:
                    _SCALARS.clear()
                d = _SCALARS[key] = cuda.to_device(np.array(a))
            return d
        if not a.flags.c_contiguous:
            a = a.copy(order="C")
        return cuda.to_device(a, stream=self.stream_obj)

    def ready(self, a):
        """A CUDA array the kernels can read in place, or an equivalent copy."""
        dt = self.dtype(a)
        if not dt.isnative:  # rare: converted through the host
            return self.from_host(self.to_host(a).astype(dt.newbyteorder("=")))
        if not in_place(self, a):
            return self.from_host(self.to_host(a))
        return a

    def to_host(self, a) -> np.ndarray:
        h = _host(a)
        if h is not None:
            return np.array(h)
        dense = a if _dense(self, a) else self.copy(a)
        d = dense if _is_numba(dense) else cuda.as_cuda_array(dense, sync=False)
        return d.copy_to_host(stream=self.stream_obj)

    def empty(self, shape, dtype: np.dtype, elem_strides):
        made = self._empty(shape, dtype, elem_strides)
        if self.made is not None:
            self.made.append(((shape, dtype, elem_strides), None, made))
        return made

    def _empty(self, shape, dtype: np.dtype, elem_strides):
        shape = tuple(shape)
        dtype = np.dtype(dtype)
        if elem_strides is None:
            bstr = _c_byte_strides(shape, dtype.itemsize)
        else:
            bstr = tuple(s * dtype.itemsize for s in elem_strides)
        if not SIMULATOR:
            made = arrays.empty_like_kind(self.result_kind, shape, dtype, bstr, self.device)
            if made is not None:
                return made
        buf = cuda.device_array(max(math.prod(shape), 1), dtype,
                                **({} if SIMULATOR else {"stream": self.stream_obj}))
        h = _host(buf)
        if h is not None:
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(np.lib.stride_tricks.as_strided(h, shape, bstr))
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        return DeviceNDArray(shape, bstr, dtype, stream=self.stream_obj, gpu_data=buf.gpu_data)

    def copy(self, a):
        c = self.empty(self.shape(a), self.dtype(a), None)
        self.copy_into(c, a)
        return c

    def copy_into(self, dst, src) -> None:
        n = math.prod(self.shape(dst))
        if not n:
            return
        dt = self.dtype(src)
        st = element_strides(self.strides(src), dt.itemsize)
        plan = make_plan((self.shape(src),), (st,), "none", -1,
                         element_strides(self.strides(dst), dt.itemsize))
        _run(self, CudaSpec("copy", None, (dt,), dt, dt), plan, dst, src)

    def any_negative(self, a) -> bool:
        """Whether ``a`` holds a negative number (integer ``power``'s check): a dense copy of
        it comes to the host (a rare check, not a kernel of its own)."""
        if self.dtype(a).kind != "i" or not math.prod(self.shape(a)):
            return False
        self.read_values = True
        c = self.copy(a)
        host = _host(c)
        if host is None:
            self.stream_obj.synchronize()
            host = cuda.as_cuda_array(c).copy_to_host()
        return bool((np.asarray(host) < 0).any())

    def any_zero(self, a) -> bool:
        """Whether ``a`` holds a 0: checked on the device; one flag comes back."""
        n = math.prod(self.shape(a))
        if not n:
            return False
        flag = _FLAGS.get(self.device)
        if flag is None:
            flag = _FLAGS[self.device] = cuda.mapped_array(1, np.int32)
        flag[0] = 0
        self.read_values = True
        span, base = _flat(self, a)
        dt = self.dtype(a)
        st = element_strides(self.strides(a), dt.itemsize)
        plan = make_plan((self.shape(a),), (st,), "none", -1)
        blocks, tpb = kernels.launch_config(n)
        shape = _shape_arg(plan, blocks, tpb)
        _launch("any_zero", blocks, tpb, self,
                (span, shape, tuple(plan.iter_strides[1]), (base + plan.iter_offsets[1],),
                 plan.size, flag))
        if not SIMULATOR:
            self.stream_obj.synchronize()
        return bool(flag[0])


def _is_numba(a) -> bool:
    return type(a).__name__ in ("DeviceNDArray", "MappedNDArray", "ManagedNDArray")


def _dense(mem: CudaMemory, a) -> bool:
    return mem.strides(a) == _c_byte_strides(mem.shape(a), mem.dtype(a).itemsize)


def _flat(mem: CudaMemory, a):
    """(1-D view of the memory ``a`` spans, starting at its lowest address, in its storage
    dtype; the element index of ``a[0, ..., 0]`` in that view). Negative strides in place."""
    dt = mem.dtype(a)
    sdt = storage_dtype(dt)
    st = element_strides(mem.strides(a), dt.itemsize)
    shape = mem.shape(a)
    lo = sum((n - 1) * s for n, s in zip(shape, st) if s < 0 and n)
    hi = sum((n - 1) * s for n, s in zip(shape, st) if s > 0 and n)
    length = hi - lo + 1 if math.prod(shape) else 1
    start = mem.address(a) + lo * dt.itemsize
    h = _host(a)
    if h is not None:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        low = h[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in h.strides)] \
            if h.ndim else h
        assert low.__array_interface__["data"][0] == start
        span = np.lib.stride_tricks.as_strided(low, (length,), (dt.itemsize,))
        return FakeCUDAArray(span.view(sdt)), -lo

    if lo == 0 and st == (1,) and sdt == dt and _is_numba(a):
        return a, 0  # already its own span: no new array (and numba's type of it is cached)
    return cuda.as_cuda_array(_Span({"shape": (length,), "strides": None, "typestr": sdt.str,
                                     "data": (start, False), "version": 3}), sync=False), -lo


class _Span:
    """A CUDA Array Interface for a span: no allocation, no stream sync."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, cai: dict):
        self.__cuda_array_interface__ = cai


def _shape_arg(plan, blocks: int, tpb: int, per_thread: int = 1) -> tuple:
    """The plan's shape as kernel arguments: each dimension a :func:`~jitops.cuda.spec.magic`
    word (unsigned 64-bit) when every linear index of the grid-stride loop fits in 31 bits (the
    kernels then divide by multiplying), else int64."""
    if plan.size + (blocks + 1) * tpb * per_thread < 2**31:
        return tuple(np.uint64(magic(int(s))) for s in plan.iter_shape)
    return tuple(int(s) for s in plan.iter_shape)


def _launch(name: str, blocks: int, tpb: int, mem: CudaMemory, args) -> None:
    """Every launch goes through here: on the call's stream, recorded in :data:`LAUNCHES`."""
    LAUNCHES.append((name, mem.device, mem.stream))
    mem.launched.append((name, blocks, tpb, args))
    kernels.KERNELS[name][blocks, tpb, mem.stream_obj](*args)


def launch_args(mem: CudaMemory, spec: CudaSpec, plan, out, *inputs) -> tuple:
    """(kernel, blocks, threads per block, arguments) of ``spec`` over ``plan`` for CUDA
    arrays ``out`` and ``inputs``."""
    n = plan.size
    flats = [_flat(mem, a) for a in (out, *inputs)]
    starts = tuple(b + o for (_, b), o in zip(flats, plan.iter_offsets))
    spans = [f for f, _ in flats]
    blocks, tpb = kernels.launch_config(n, kernels.UNROLL)
    if plan.variant == CONTIG and len(plan.iter_shape) == 1 and not any(starts):
        return "contig", blocks, tpb, (spec, spans[0], tuple(spans[1:]), n)
    shape = _shape_arg(plan, blocks, tpb, kernels.UNROLL)
    strides = [tuple(int(s) for s in st) for st in plan.iter_strides]
    return ("strided", blocks, tpb,
            (spec, spans[0], tuple(spans[1:]), shape, strides[0], tuple(strides[1:]), starts, n))


def _run(mem: CudaMemory, spec: CudaSpec, plan, out, *inputs) -> None:
    """Launch ``spec`` over ``plan`` for CUDA arrays ``out`` and ``inputs``."""
    name, blocks, tpb, args = launch_args(mem, spec, plan, out, *inputs)
    _launch(name, blocks, tpb, mem, args)


def memory(device, operands, out, fname: str) -> CudaMemory:
    """The call's GPU, stream and result kind (SPEC section 7), checked; RuntimeError when
    the operands are on different GPUs, not on the one asked for, or there is no such GPU."""
    cuda_ops = [v for v in (*operands, out) if v is not None and _device.is_cuda_array(v)]
    asked = _device.requested_index(device)
    count = 1 if SIMULATOR else len(cuda.gpus)
    if asked is not None and asked >= count:
        raise RuntimeError(f"jitops.{fname}: device={device!r} but this machine has {count} "
                           f"GPU{'s' if count != 1 else ''} (cuda:0"
                           f"{f' to cuda:{count - 1}' if count > 1 else ''})")
    found = sorted({d for d in (arrays.device_of(v) for v in cuda_ops) if d >= 0})
    if len(found) > 1:
        raise RuntimeError(f"jitops.{fname}: the operands are on different GPUs "
                           f"({', '.join(f'cuda:{d}' for d in found)}); copy them to one GPU "
                           "first (jitops makes no implicit transfers)")
    if asked is not None and found and found[0] != asked:
        raise RuntimeError(f"jitops.{fname}: device={device!r} but the CUDA operands are on "
                           f"cuda:{found[0]}; copy them first (no implicit transfers)")
    dev = asked if asked is not None else (found[0] if found else 0)
    streams = []
    for v in cuda_ops:
        s = arrays.stream_of(v, dev)
        if s is not None and s not in streams:
            streams.append(s)
    first = next((v for v in operands if _device.is_cuda_array(v)), out)
    rkind = arrays.kind(first) if first is not None else "numba"
    mem = CudaMemory(dev, streams[0] if streams else None, rkind, tuple(streams[1:]))
    for v in cuda_ops:
        if mem.described(v).masked:  # CAI's mask: part of the array's meaning
            raise TypeError(f"jitops.{fname}: a {type(v).__module__}.{type(v).__qualname__} "
                            f"whose CUDA Array Interface has a mask; jitops would drop it "
                            f"(pass the unmasked data, and apply the mask yourself)")
    return mem


def on_device(mem: CudaMemory):
    """The context the call runs in: its GPU (the simulator has only one)."""
    return contextlib.nullcontext() if SIMULATOR else cuda.gpus[mem.device]


def _spec(call: PreparedCall, mem: CudaMemory) -> CudaSpec:
    ins = tuple(mem.dtype(a) for a in call.inputs)
    if isinstance(call.impl, str):
        return CudaSpec("op:" + call.impl, call.act, ins, call.dtypes.result,
                        call.dtypes.compute)
    op = call.impl  # a jitops.elementwise op: its function's key was made once, with it
    register(op.key, op.py_func, False)
    return CudaSpec(op.key, None, ins, call.dtypes.result, call.dtypes.compute, op.cacheable)


def launch(call: PreparedCall, mem: CudaMemory) -> None:
    """Run a prepared call on the GPU (the pipeline made every operand a CUDA array)."""
    if is_bfloat16(call.dtypes.result) or any(is_bfloat16(mem.dtype(a)) for a in call.inputs):
        raise TypeError(f"jitops.{call.fname}: bfloat16 runs on the CPU backend only (the CUDA "
                        f"kernels have no bfloat16 loads and stores yet)")
    if not call.plan.size:
        return
    _run(mem, _spec(call, mem), call.plan, call.target, *call.inputs)
