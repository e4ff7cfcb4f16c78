"""SPEC section 7 beyond the values: foreign CUDA arrays (what CuPy and PyTorch hand over, the
CUDA Array Interface), streams, the choice of GPU, negative strides, and no hidden
transfers or allocations.

Runs on a real GPU or on the simulator (tests/test_cuda_sim.py). On the simulator a
"foreign" array is :class:`ForeignArray`: host memory exposed through a CUDA Array Interface
exactly as CuPy and PyTorch expose theirs (a non-NumPy ``dtype`` attribute, CAI v3 ``stream``,
views with any strides), so every path from the interface to the kernel runs.
"""

import numpy as np
import pytest

import jitops
from jitops.core.device import cuda_unavailable_reason

if cuda_unavailable_reason() is not None:
    pytest.skip("neither a GPU nor the CUDA simulator is available", allow_module_level=True)

from numba import cuda  # noqa: E402

from jitops.cuda import arrays, backend  # noqa: E402
from jitops.cuda.spec import SIMULATOR  # noqa: E402

sim_only = pytest.mark.skipif(not SIMULATOR, reason="host memory posing as a CUDA array")


class ForeignArray:
    """A PyTorch-like CUDA array over host memory (simulator only): its ``dtype`` is not a
    NumPy dtype, it declares its producer's stream, and ``[...]`` makes views."""

    def __init__(self, a: np.ndarray, stream=None):
        self.a, self.stream = a, stream
        self.dtype = f"torch.{a.dtype.name}"  # np.dtype() of this raises

    @property
    def __cuda_array_interface__(self):
        a = self.a
        return {"shape": a.shape, "strides": None if a.flags.c_contiguous and a.size else
                a.strides, "typestr": a.dtype.str, "version": 3, "stream": self.stream,
                "data": (a.__array_interface__["data"][0], not a.flags.writeable)}

    def __getitem__(self, k):
        return ForeignArray(self.a[k], self.stream)


def host(a):
    if isinstance(a, ForeignArray):
        return a.a.copy()
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


@sim_only
def test_foreign_arrays_in_their_dtype_strides_and_views(rng):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal(8).astype(np.float32)
    fx, fy = ForeignArray(x), ForeignArray(y)
    np.testing.assert_array_equal(host(jitops.subtract(fx, fy)), x - y)
    # views inside an allocation, a transposed and a reversed one
    np.testing.assert_array_equal(host(jitops.add(fx[1:5, 2:], fy[2:])), x[1:5, 2:] + y[2:])
    np.testing.assert_array_equal(host(jitops.multiply(ForeignArray(x.T), 2.0)), x.T * 2)
    np.testing.assert_array_equal(host(jitops.maximum(fx[::-1, ::-2], fy[::-2])),
                                  np.maximum(x[::-1, ::-2], y[::-2]))


@sim_only
def test_out_a_foreign_array_with_negative_strides(rng):
    x = rng.standard_normal((5, 7))
    buf = np.zeros((5, 7))
    out = ForeignArray(buf)[::-1, ::-1]
    r = jitops.subtract(ForeignArray(x), 1.5, out=out)
    assert r is out
    np.testing.assert_array_equal(buf[::-1, ::-1], x - 1.5)


def test_reversed_views_and_integer_division_check_on_device():
    x = np.arange(-12, 12, dtype=np.int32).reshape(4, 6)
    y = np.array([3, -2, 5, 1, -7, 4], np.int32)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    got = jitops.elementwise_div(dx[::-1], dy[::-1])
    assert_eq = np.testing.assert_array_equal
    assert_eq(host(got), jitops.elementwise_div(x[::-1], y[::-1]))
    z = y.copy()
    z[3] = 0
    with pytest.raises(ZeroDivisionError):
        jitops.elementwise_div(dx, cuda.to_device(z)[::-1])


def test_big_endian_device_arrays_give_the_values():
    x = np.arange(10, dtype=">i4")
    y = np.arange(10, dtype=">f8") / 4
    got = host(jitops.add(cuda.to_device(x), cuda.to_device(y)))
    np.testing.assert_array_equal(got, x.astype(int) + y.astype(float))


def test_launch_variants_and_the_unrolled_tail():
    """contig handles UNROLL elements a block apart per thread: every size around the
    boundaries of a step is written in full."""
    tpb = jitops.core.config.CUDA_THREADS_PER_BLOCK
    for n in (1, 3, tpb - 1, tpb, tpb + 1, 4 * tpb - 1, 4 * tpb, 4 * tpb + 3, 9 * tpb + 5):
        x = np.arange(n, dtype=np.float64)
        got = host(jitops.add(x, x, device="cuda"))
        assert backend.LAUNCHES[-1][0] == "contig"
        np.testing.assert_array_equal(got, 2 * x)
    jitops.add(np.ones((3, 4)), np.ones(4), device="cuda")
    assert backend.LAUNCHES[-1][0] == "strided"


@sim_only
def test_the_launch_runs_on_the_producers_stream():
    x = np.arange(6, dtype=np.float32)
    jitops.add(ForeignArray(x, stream=0xABC0), 1.0)
    assert backend.LAUNCHES[-1][2] == 0xABC0
    jitops.add(cuda.to_device(x), 1.0)  # a Numba array on the default stream
    assert backend.LAUNCHES[-1][2] is None
    # two producers: the launch is on the first one's stream and waits for the other's
    mem = backend.memory(None, (ForeignArray(x, 0xA0), ForeignArray(x, 0xB0)),
                         None, "add")
    assert (mem.stream, mem.waits) == (0xA0, (0xB0,))
    mem = backend.memory(None, (ForeignArray(x, 0xA0),), ForeignArray(x, 0xA0), "add")
    assert (mem.stream, mem.waits) == (0xA0, ())


def test_device_selection_errors(monkeypatch):
    x = cuda.to_device(np.ones(4))
    count = 1 if SIMULATOR else len(cuda.gpus)
    with pytest.raises(RuntimeError, match=rf"device='cuda:{count}' but this machine has "
                                           rf"{count} GPU"):
        jitops.add(x, x, device=f"cuda:{count}")
    y = cuda.to_device(np.ones(4))
    monkeypatch.setattr(arrays, "device_of", lambda a: 1 if a is y else 0)
    with pytest.raises(RuntimeError, match=r"different GPUs \(cuda:0, cuda:1\)"):
        jitops.add(x, y)
    with pytest.raises(RuntimeError, match="copy them first"):
        jitops.add(y, 1.0, device="cuda:0")


def test_no_hidden_transfers_or_allocations(monkeypatch):
    """Scalars are uploaded once; shapes and strides go by value; the zero check brings
    nothing back but its flag."""
    x = cuda.to_device(np.arange(12, dtype=np.int64).reshape(3, 4))
    jitops.add(x, 7)  # the scalar 7 (int64) is now on the device
    uploads = []
    real = cuda.to_device
    monkeypatch.setattr(cuda, "to_device", lambda *a, **k: uploads.append(a) or real(*a, **k))
    jitops.add(x, 7)
    jitops.subtract(x[:, ::-1], x[0])  # strided: no meta array
    assert uploads == []
    y = real(np.arange(1, 5))
    monkeypatch.setattr(backend.CudaMemory, "to_host",
                        lambda *a, **k: pytest.fail("an operand was copied to the host"))
    got = jitops.elementwise_div(x, y)
    monkeypatch.undo()
    np.testing.assert_array_equal(host(got), np.arange(12).reshape(3, 4) // np.arange(1, 5))


@pytest.mark.parametrize("kind", ["cupy", "torch", "numba", "other"])
def test_result_kind_follows_the_first_cuda_operand(kind):
    mod = {"cupy": "cupy._core.core", "torch": "torch", "numba": "numba.cuda.cudadrv",
           "other": "mylib"}[kind]
    cls = type("Array", (), {"__module__": mod})
    assert arrays.kind(cls()) == kind
