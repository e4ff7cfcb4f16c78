"""The backends the shared spec tests (tests/test_spec.py) run on, each as a small adapter:
put a host array on the backend (or a view of one), bring a result back, make an ``out``.

Which backends a process tests is ``JITOPS_TEST_BACKENDS`` (default ``cpu,dask``): the CUDA
simulator must be switched on before Numba is imported, so tests/test_cuda_sim.py runs the same
file again in a fresh process with ``JITOPS_TEST_BACKENDS=cuda`` and the simulator on (PyTorch's
device-instantiated tests and CuPy's ``numpy_cupy_allclose`` are the models).
"""

from __future__ import annotations

import os

import numpy as np


class Backend:
    name = "?"
    device = None           # the device= argument calls on this backend pass
    supports_out = True
    #: how many elements a test array on this backend should have at most (the simulator runs
    #: every GPU thread in Python)
    small = False

    def put(self, a: np.ndarray):
        return a

    def view(self, a, fn):
        """``fn(a)`` for an array ``a`` already on the backend: a transpose, slice or reversal
        that shares its memory."""
        return fn(a)

    def get(self, r) -> np.ndarray:
        return np.asarray(r)

    def empty(self, shape, dtype):
        return np.full(shape, 7, dtype)

    def is_native(self, r) -> bool:
        return isinstance(r, np.ndarray)


class Cpu(Backend):
    name = "cpu"


class Dask(Backend):
    name = "dask"
    supports_out = False

    def put(self, a):
        import dask.array as da

        chunks = tuple(max(1, n // 2) for n in a.shape)  # several blocks wherever possible
        return da.from_array(np.ascontiguousarray(a) if a.ndim else a, chunks=chunks)

    def get(self, r):
        return np.asarray(r.compute())

    def is_native(self, r):
        import dask.array as da

        return isinstance(r, da.Array)


class Cuda(Backend):
    name = "cuda"
    device = "cuda"
    small = True

    def put(self, a):
        from numba import cuda

        return cuda.to_device(np.ascontiguousarray(a) if a.ndim else a)

    def view(self, a, fn):
        host = getattr(a, "_ary", None)
        if host is not None:  # the simulator: its arrays wrap NumPy ones; view those
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(fn(host))
        # numba's DeviceNDArray.T is a copy (a transpose kernel), not a view: a view with
        # non-negative strides is made from the layout NumPy gives the same view of a host
        # array shaped as ``a`` (slices with negative strides are numba's own views)
        proto = np.empty(a.shape, a.dtype)
        v = fn(proto)
        if min(v.strides, default=0) < 0:
            return fn(a)
        from numba import cuda

        offset = v.__array_interface__["data"][0] - proto.__array_interface__["data"][0]

        cai = {"shape": v.shape, "strides": v.strides, "typestr": v.dtype.str, "version": 3,
               "data": (a.device_ctypes_pointer.value + offset, False)}
        return cuda.from_cuda_array_interface(cai, owner=a, sync=False)  # a kept alive

    def get(self, r):
        return r.copy_to_host()

    def empty(self, shape, dtype):
        return self.put(np.full(shape, 7, dtype))

    def is_native(self, r):
        return hasattr(r, "copy_to_host")


ALL = {"cpu": Cpu, "dask": Dask, "cuda": Cuda}


def selected() -> list[str]:
    names = [n.strip() for n in os.environ.get("JITOPS_TEST_BACKENDS", "cpu,dask").split(",")]
    return [n for n in names if n]
