"""The CUDA arrays jitops accepts, and what each library says about its own.

Any object with ``__cuda_array_interface__`` (CAI) is read through that interface: shape,
strides (negative included), dtype (``typestr``: a PyTorch tensor's ``dtype`` is not NumPy's),
address and, in CAI v3, the stream its producer works on. Three libraries get more:

========  =========================  ===============================  =====================
kind      device                     stream of the launch             results allocated by
========  =========================  ===============================  =====================
cupy      ``a.device.id``            CuPy's current stream            CuPy (its memory pool)
torch     ``a.device.index``         PyTorch's current stream         PyTorch (its allocator)
numba     the pointer's device       the CAI stream (the array's)     Numba
other     the pointer's device       the CAI stream                   Numba
========  =========================  ===============================  =====================

The result of a call is the kind of its first CUDA operand, so a CuPy call gives a CuPy array
and a PyTorch call a tensor, allocated on the launch's stream by that library's own
(stream-ordered, cached) allocator: nothing is copied and nothing synchronises the host.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ..core.pipeline import byte_extent
from ..core.plan import contiguous_strides
from .spec import SIMULATOR

#: CAI v3 stream values with a meaning of their own.
LEGACY_DEFAULT, PER_THREAD_DEFAULT = 1, 2


def interface(a) -> dict:
    return a.__cuda_array_interface__


def host_view(a) -> np.ndarray | None:
    """Under the simulator: the host array behind a CUDA array (its FakeCUDAArray's, or the
    host memory a CAI pointer names); None on a real GPU."""
    if not SIMULATOR:
        return None
    h = getattr(a, "_ary", None)
    if h is not None:
        return h
    cai = interface(a)
    dt = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or tuple(s * dt.itemsize for s in contiguous_strides(shape))
    address = cai["data"][0]
    lo, hi = byte_extent(address, shape, strides, dt.itemsize)
    buf = (ctypes.c_byte * max(hi - lo, dt.itemsize)).from_address(lo or address)
    return np.ndarray(shape, dt, buffer=buf, offset=address - (lo or address), strides=strides)


def kind(a) -> str:
    """``cupy``, ``torch``, ``numba`` or ``other``."""
    mod = type(a).__module__.split(".")[0]
    if mod in ("cupy", "torch"):
        return mod
    if mod == "numba" or type(a).__name__ in ("DeviceNDArray", "FakeCUDAArray"):
        return "numba"
    return "other"


def cai_stream(a) -> int | None:
    """The stream a CUDA array's producer declared (CAI v3), or None."""
    if SIMULATOR and hasattr(a, "_ary"):
        return None
    return interface(a).get("stream")


def _pointer_device(ptr: int) -> int:
    """The ordinal of the GPU a device pointer belongs to (the driver's pointer attribute)."""
    from numba.cuda.cudadrv import driver as drv

    try:
        from cuda.bindings import driver as cu  # numba-cuda's binding

        err, dev = cu.cuPointerGetAttribute(
            cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        if int(err) == 0:
            return int(dev)
    except ImportError:  # pragma: no cover - the built-in numba.cuda's ctypes binding
        value = ctypes.c_int()
        drv.driver.cuPointerGetAttribute(ctypes.byref(value), 9, ptr)  # DEVICE_ORDINAL
        return value.value
    raise RuntimeError(f"cannot tell which GPU the pointer {ptr:#x} belongs to "
                       f"(cuPointerGetAttribute: {err})")


def device_of(a) -> int:
    """The ordinal of the GPU a CUDA array lives on."""
    if SIMULATOR:
        return 0
    k = kind(a)
    if k == "cupy":
        return int(a.device.id)
    if k == "torch":
        return int(a.device.index)
    cai = interface(a)
    if not math.prod(cai["shape"]):
        return -1  # an empty array lives nowhere: it follows the others
    return _pointer_device(cai["data"][0])


def current_stream(k: str, device: int) -> int | None:
    """The current stream of a library on ``device`` (a handle), or None for the others."""
    if SIMULATOR:
        return None
    if k == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return int(cupy.cuda.get_current_stream().ptr) or LEGACY_DEFAULT
    if k == "torch":
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream) or LEGACY_DEFAULT
    return None


def stream_of(a, device: int) -> int | None:
    """The stream work on ``a`` is ordered on: its library's current stream, else its CAI's."""
    s = current_stream(kind(a), device)
    return s if s is not None else cai_stream(a)


_TORCH_DTYPES: dict[str, str] = {
    "bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64",
    "complex64": "complex64", "complex128": "complex128",
}


def empty_like_kind(k: str, shape: tuple[int, ...], dtype: np.dtype,
                    byte_strides: tuple[int, ...], device: int):
    """An uninitialised array of library ``k`` (cupy or torch) on ``device``, allocated on
    that library's current stream; None for Numba's own (the caller allocates)."""
    if k == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            lo, hi = byte_extent(0, shape, byte_strides, dtype.itemsize)
            mem = cupy.cuda.alloc(hi - lo)
            return cupy.ndarray(shape, dtype, mem, byte_strides)
    if k == "torch":
        import torch

        name = _TORCH_DTYPES.get(dtype.name)
        tdt = getattr(torch, name, None) if name else None
        if tdt is None:
            raise TypeError(f"PyTorch {torch.__version__} has no dtype for {dtype}")
        return torch.empty_strided(shape, tuple(s // dtype.itemsize for s in byte_strides),
                                   dtype=tdt, device=f"cuda:{device}")
    return None
