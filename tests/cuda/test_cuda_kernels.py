"""CUDA kernels: on a real GPU, or on Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1).

The main suite runs this directory in a separate process with the simulator switched on
(tests/test_cuda_sim.py). Small arrays: the simulator runs every thread in Python.
"""

import numpy as np
import pytest

import jitops
from jitops.core.device import cuda_unavailable_reason

if cuda_unavailable_reason() is not None:
    pytest.skip("neither a GPU nor the CUDA simulator is available", allow_module_level=True)

from numba import cuda  # noqa: E402

from ..helpers import OPS, assert_same, numpy_op, sample, valid  # noqa: E402

DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64",
          "complex128"]


def host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_ops_and_dtypes_match_cpu(op, dtype, rng):
    if not valid(op, dtype):
        with pytest.raises(TypeError):
            getattr(jitops, op)(np.zeros(3, dtype), np.zeros(3, dtype), device="cuda")
        return
    x, y = sample(rng, (3, 5), dtype), sample(rng, (3, 5), dtype)
    got = getattr(jitops, op)(x, y, device="cuda")
    assert_same(host(got), getattr(jitops, op)(x, y), op, x, y)
    row = getattr(jitops, op)(cuda.to_device(x), cuda.to_device(y[0]))  # device=None -> CUDA
    assert_same(host(row), numpy_op(op, x, y[0]), op, x, y[0])


def test_numpy_and_pdpd_broadcasting_and_act(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    got = jitops.subtract(cuda.to_device(x), cuda.to_device(y), broadcast="pdpd", axis=1,
                          act="relu")
    assert_same(host(got), jitops.subtract(x, y, broadcast="pdpd", axis=1, act="relu"))
    got = jitops.elementwise_fmin(x, y, axis=1, device="cuda:0")
    assert_same(host(got), jitops.elementwise_fmin(x, y, axis=1))
    a, b = rng.standard_normal((4, 1)), rng.standard_normal((1, 6))
    assert_same(host(jitops.multiply(a, b, device="cuda")), a * b)
    t = rng.standard_normal((5, 6))
    assert_same(host(jitops.add(t.T, t[0, :5],
                                device="cuda")), t.T + t[0, :5])


def test_out_device_array_and_in_place(rng):
    x = rng.standard_normal((4, 6))
    y = rng.standard_normal(6)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    out = cuda.device_array((4, 6), np.float64)
    r = jitops.subtract(dx, dy, out=out)
    assert r is out
    assert_same(out.copy_to_host(), x - y)
    jitops.subtract(dx, dy, out=dx)  # in place
    assert_same(dx.copy_to_host(), x - y)
    with pytest.raises(ValueError, match="out has shape"):
        jitops.add(dx, dy, out=cuda.device_array((6, 4)))
    with pytest.raises(TypeError, match="out has dtype"):
        jitops.add(dx, dy, out=cuda.device_array((4, 6), np.float32))


def test_elementwise_div_integers_on_device():
    x = np.array([7, -7, 7, -7], np.int32)
    y = np.array([2, 2, -2, -2], np.int32)
    assert_same(host(jitops.elementwise_div(x, y, device="cuda")), jitops.elementwise_div(x, y))
    with pytest.raises(ZeroDivisionError):
        jitops.elementwise_div(x, np.zeros(4, np.int32), device="cuda")


def test_results_are_device_arrays_and_size_zero():
    r = jitops.add(np.ones(3), np.ones(3), device="cuda")
    assert hasattr(r, "copy_to_host") and not isinstance(r, np.ndarray)
    e = jitops.add(np.ones((2, 0)), np.ones(0), device="cuda")
    assert tuple(e.shape) == (2, 0)


def test_fmin_nan_payload_first_operand_on_device():
    a = np.array([0x7FC00001] * 4, np.uint32).view(np.float32)
    b = np.array([0x7FC00002] * 4, np.uint32).view(np.float32)
    r = host(jitops.fmin(a, b, device="cuda"))
    assert (r.view(np.uint32) == 0x7FC00001).all()


@pytest.mark.parametrize("dt", [np.complex64, np.complex128])
def test_complex_power_on_device(dt, rng):
    """NumPy's steps exactly (a zero exponent, a zero base, integer exponents multiplied
    out); any other exponent through ``exp(b * log(a))`` in the device's complex functions,
    within a few ulps of NumPy's C ``cpow``."""
    x = (rng.standard_normal(24) + 1j * rng.standard_normal(24)).astype(dt)
    x[:2] = 0
    ints = np.array([0, 1, 2, 3, -1, -2, 5, -7, 17, 99, -99, 0], dt)
    y = np.concatenate([ints, ints])
    got = host(jitops.power(cuda.to_device(x), cuda.to_device(y)))
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    np.testing.assert_array_equal(got, want)
    y = (rng.standard_normal(24) + 1j * rng.standard_normal(24)).astype(dt)
    got = host(jitops.power(cuda.to_device(x), cuda.to_device(y)))
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dt == np.complex64 else 1e-12)


@pytest.mark.parametrize("dt", ["int8", "int16", "int32"])
def test_floor_division_by_one_divisor_on_device(dt, rng):
    """A divisor of one element takes the reciprocal-multiply entry on the device too
    (jitops.core.catalog.BY_ONE_DIVISOR): NumPy's values for dividends at the extremes and
    divisors 0 and -1 (their own branch), the width's minimum and odd ones."""
    info = np.iinfo(dt)
    x = np.concatenate([[info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max],
                        rng.integers(info.min, info.max, 57, endpoint=True)]).astype(dt)
    for d in (7, -3, 1, -1, 0, int(info.min), int(info.max)):
        with np.errstate(all="ignore"):
            want = np.floor_divide(x, np.array(d, dt))
            got = host(jitops.floor_divide(x, np.array([d], dt), device="cuda"))
        assert got.dtype == want.dtype and np.array_equal(got, want), (dt, d)
