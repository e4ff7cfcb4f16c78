"""Every op x every dtype x every layout against NumPy, plus promotion and NaN rules."""

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitops

from . import naive
from .helpers import DTYPES, OPS, assert_same, call, numpy_op, sample, valid


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_op_every_dtype(op, dtype, rng):
    if not valid(op, dtype):
        with pytest.raises(TypeError, match=rf"jitops\.{op}: .*(boolean subtract|complex)"):
            call(op, np.zeros(3, dtype), np.zeros(3, dtype))
        return
    x = sample(rng, (7, 9), dtype)
    y = sample(rng, (7, 9), dtype)
    got = call(op, x, y)
    assert_same(got, numpy_op(op, x, y), op, x, y)
    # broadcast row + column, and the scalar variants
    assert_same(call(op, x, y[0]), numpy_op(op, x, y[0]), op, x, y[0])
    assert_same(call(op, x[:, :1], y[0]), numpy_op(op, x[:, :1], y[0]), op, x[:, :1], y[0])
    assert_same(call(op, x[2, 3], y), numpy_op(op, x[2, 3], y), op, x[2, 3], y)


LAYOUTS = {
    "C": lambda a: a,
    "F": np.asfortranarray,
    "sliced": lambda a: np.repeat(np.repeat(a, 2, 0), 3, 1)[::2, ::3],
    "negative": lambda a: a[::-1, ::-1].copy()[::-1, ::-1],
    "reversed": lambda a: np.ascontiguousarray(a[::-1])[::-1],
    "transposed": lambda a: np.ascontiguousarray(a.T).T,
    "broadcast": lambda a: np.broadcast_to(a[:1], a.shape),
    "readonly": lambda a: _readonly(a),
    "byteswapped": lambda a: a.astype(a.dtype.newbyteorder()),
}


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("ly", sorted(LAYOUTS))
@pytest.mark.parametrize("lx", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_layouts(lx, ly, dtype, rng):
    x0, y0 = sample(rng, (6, 10), dtype), sample(rng, (6, 10), dtype)
    x, y = LAYOUTS[lx](x0), LAYOUTS[ly](y0)
    xc, yc = x.copy(), y.copy()
    got = jitops.subtract(x, y)
    assert_same(got, np.subtract(x, y))
    assert got.dtype.isnative
    np.testing.assert_array_equal(x, xc)  # inputs untouched
    np.testing.assert_array_equal(y, yc)


def test_output_order_follows_inputs():
    f = np.asfortranarray(np.ones((30, 40), np.float32))
    assert jitops.add(f, f).flags.f_contiguous
    assert jitops.add(f, 1.0).flags.f_contiguous
    c = np.ones((30, 40), np.float32)
    assert jitops.add(c, f).flags.c_contiguous
    t = np.ones((3, 4, 5)).transpose(2, 0, 1)
    assert jitops.add(t, t).strides == np.add(t, t).strides


def test_zero_d_and_size_zero():
    r = jitops.add(np.float32(2), np.float32(3))
    assert type(r) is np.float32 and r == 5  # a NumPy scalar, as NumPy's ufuncs give
    assert jitops.add(2, 3).dtype == np.int64
    e = jitops.multiply(np.ones((3, 0)), np.ones((0,)))
    assert e.shape == (3, 0)
    assert jitops.add(np.ones((1, 0, 2)), np.ones((3, 0, 1)), broadcast="pdpd").shape == (3, 0, 2)


@given(st.data())
def test_hypothesis_numpy_mode(data):
    dtype = data.draw(st.sampled_from(["int8", "uint16", "int32", "float16", "float32",
                                       "float64", "complex128", "bool"]))
    op = data.draw(st.sampled_from([o for o in OPS if valid(o, dtype)]))
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                          min_side=0, max_side=5))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = sample(rng, shapes.input_shapes[0], dtype)
    y = sample(rng, shapes.input_shapes[1], dtype)
    x = LAYOUTS[data.draw(st.sampled_from(["C", "transposed", "reversed"]))](x) if x.ndim == 2 \
        else x
    if y.ndim >= 1 and data.draw(st.booleans()):
        y = y[..., ::-1]
    assert_same(call(op, x, y), numpy_op(op, x, y), op, x, y)


@st.composite
def pdpd_case(draw):
    big = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple))
    a = draw(st.integers(0, len(big) - 1))
    b = draw(st.integers(a, len(big)))
    small = tuple(1 if draw(st.booleans()) else n for n in big[a:b])
    axis = a if draw(st.booleans()) or len(small) == len(big) else -1
    if axis == -1:
        small = big[len(big) - len(small):]
    if len(small) == len(big):
        axis = draw(st.sampled_from([-1, 0]))
    swap = draw(st.booleans())
    return (small, big, axis) if swap else (big, small, axis)


@given(pdpd_case(), st.sampled_from(["subtract", "fmin", "maximum", "divide"]),
       st.sampled_from(["float32", "int32"]), st.integers(0, 1000))
def test_hypothesis_pdpd_against_naive(case, op, dtype, seed):
    xs, ys, axis = case
    rng = np.random.default_rng(seed)
    x, y = sample(rng, xs, dtype), sample(rng, ys, dtype)
    fn = {"subtract": lambda a, b: a - b, "fmin": lambda a, b: np.fmin(a, b),
          "maximum": lambda a, b: np.maximum(a, b), "divide": lambda a, b: np.divide(a, b)}[op]
    got = call(op, x, y, broadcast="pdpd", axis=axis)
    with np.errstate(all="ignore"):
        exp = naive.apply(fn, x, y, "pdpd", axis, out_dtype=got.dtype)
    np.testing.assert_array_equal(got, exp)


# --- promotion ----------------------------------------------------------------------------------
@pytest.mark.parametrize("x, y", [
    (np.ones(3, np.float32), 3.0), (np.ones(3, np.int8), 3), (np.ones(3, np.int8), 3.5),
    (np.ones(3, np.uint64), np.ones(3, np.int64)), (np.ones(3, np.float16), np.ones(3, np.int16)),
    (np.ones(3, bool), 2), (np.ones(3, np.float32), 1j), (np.ones(3, np.int16), np.float32(2)),
    (2, 3.5), ([1, 2, 3], np.ones(3, np.float32)), (np.ones(3, np.float16), np.ones(3, np.int8)),
])
def test_numpy2_promotion(x, y):
    for op in ("add", "divide", "maximum"):
        if op == "maximum" and np.asarray(numpy_op("add", x, y)).dtype.kind == "c":
            continue
        assert_same(call(op, x, y), numpy_op(op, x, y))


def test_python_int_out_of_range_raises_like_numpy():
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        jitops.add(np.ones(3, np.uint8), 300)
    with pytest.raises(ValueError, match="out of bounds for int8"):  # also a ValueError
        jitops.add(np.ones(3, np.int8), -129)


def test_integer_wraparound_and_division_by_zero():
    i8 = np.array([127, -128, 100], np.int8)
    np.testing.assert_array_equal(jitops.add(i8, np.int8(1)), [-128, -127, 101])
    np.testing.assert_array_equal(jitops.multiply(i8, np.int8(2)), [-2, 0, -56])
    big = np.array([2**63 - 1], np.int64)
    assert jitops.add(big, big)[0] == -2
    u = np.array([0], np.uint32)
    assert jitops.subtract(u, np.uint32(1))[0] == 2**32 - 1
    d = jitops.divide(np.array([1, -1, 0]), np.array([0, 0, 0]))
    assert d.dtype == np.float64 and d[0] == np.inf and d[1] == -np.inf and np.isnan(d[2])
    f = jitops.divide(np.float32([1, 0]), np.float32(0))
    assert f[0] == np.inf and np.isnan(f[1])


# --- NaN rules ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, bits", [("float16", np.uint16), ("float32", np.uint32),
                                         ("float64", np.uint64)])
def test_fmin_fmax_nan_payload_is_first_operand(dtype, bits):
    q = {np.uint16: (0x7E01, 0x7E02), np.uint32: (0x7FC00001, 0x7FC00002),
         np.uint64: (0x7FF8000000000001, 0x7FF8000000000002)}[bits]
    a = np.array([q[0]] * 3, bits).view(dtype)
    b = np.array([q[1]] * 3, bits).view(dtype)
    for op in ("fmin", "fmax"):
        r = call(op, a, b)
        assert (r.view(bits) == q[0]).all(), op
        r = call(op, b, a)
        assert (r.view(bits) == q[1]).all(), op
    one = np.ones(3, dtype)
    assert (jitops.fmin(a, one) == 1).all() and (jitops.fmin(one, a) == 1).all()
    assert np.isnan(jitops.minimum(a, one)).all() and np.isnan(jitops.maximum(one, b)).all()


def test_fmin_seed_examples():
    np.testing.assert_array_equal(
        jitops.fmin(np.array([[1, 2], [7, 8]]), np.array([[3, 4], [5, 6]])), [[1, 2], [5, 6]])
    np.testing.assert_array_equal(
        jitops.fmin(np.array([[[1, 2, 3], [1, 2, 3]]]), np.array([3, 0, 4])),
        [[[1, 0, 3], [1, 0, 3]]])
    r = jitops.fmin(np.float32([2, 3, 5]), np.float32([1, np.nan, np.nan]))
    np.testing.assert_array_equal(r, [1, 3, 5])
    r = jitops.fmin(np.float64([5, 3, np.inf]), np.float64([1, -np.inf, 5]))
    np.testing.assert_array_equal(r, [1, -np.inf, 5])


def test_signed_zero_ties_follow_numpy():
    z, nz = np.zeros(40), -np.zeros(40)
    for op in ("maximum", "minimum", "fmax", "fmin"):
        np.testing.assert_array_equal(np.signbit(call(op, z, nz)), np.signbit(numpy_op(op, z, nz)))
        np.testing.assert_array_equal(np.signbit(call(op, nz, z)), np.signbit(numpy_op(op, nz, z)))


def test_large_arrays_run_parallel_and_match(rng):
    x = rng.standard_normal((300, 1000)).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    assert_same(jitops.subtract(x, y), x - y)
    assert_same(jitops.subtract(x.T, y[:300]), x.T - y[:300])
    assert_same(jitops.fmin(x, x[:, :1]), np.fmin(x, x[:, :1]))
    z = rng.standard_normal((64, 3, 4, 500))
    assert_same(jitops.multiply(z, np.ones((3, 4)), broadcast="pdpd", axis=1), z * 1.0)


def _complex_at(n: int, dtype, offset: int, seed: int) -> np.ndarray:
    """``n`` complex values starting ``offset`` bytes into a buffer (1: not even aligned)."""
    dt = np.dtype(dtype)
    raw = np.zeros((n + 2) * dt.itemsize, np.uint8)
    a = raw[offset:offset + n * dt.itemsize].view(dt)
    r = np.random.default_rng(seed)
    a[...] = r.standard_normal(n) + 1j * r.standard_normal(n)
    return a


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_strided_complex_rows_at_every_start(dtype):
    """A strided complex row loads and stores each element as one two-lane vector (see the next
    test): every op, built-in and user, on starts that are aligned, half aligned and not
    aligned at all, into a new result and into a strided ``out=``."""
    half = np.dtype(dtype).itemsize // 2
    user = jitops.elementwise(lambda p, q: p * q - p)
    for offset in (0, half, 1):
        x, y = _complex_at(100, dtype, offset, 1), _complex_at(100, dtype, offset, 2)
        o = _complex_at(100, dtype, offset, 3)
        for op in ("add", "subtract", "multiply", "divide"):
            assert_same(call(op, x[::3], y[::3]), numpy_op(op, x[::3], y[::3]))
            call(op, x[::2], y[::2], out=o[::2])
            assert_same(o[::2], numpy_op(op, x[::2], y[::2]))
        np.testing.assert_allclose(user(x[::2], y[1::2]), x[::2] * y[1::2] - x[::2],
                                   rtol=1e-5)


@pytest.mark.parametrize("dtype, lane", [("complex64", "float"), ("complex128", "double")])
def test_strided_complex_rows_compute_both_parts_in_one_vector(dtype, lane):
    """Numba's complex is a struct of two floats, which a strided loop (not vectorised across
    elements) loaded as two scalars and subtracted with two scalar instructions, where NumPy's
    loop runs one vector load and one packed subtract. The rows' strided loops load and store
    each complex element as one ``<2 x T>`` (unaligned), and LLVM folds the two lanes' arithmetic
    into one packed op: in the built-in task and in a user op's."""
    import re

    from jitops.cpu.compile import registries
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels import binary as kernels
    from jitops.cpu.kernels import nary
    from jitops.cpu.kernels.spec import KernelSpec

    dt = np.dtype(dtype)
    ptr = rf"(?:ptr|<2 x {lane}>\*)"
    spec = KernelSpec("subtract", None, dt, dt, dt, dt, stream=False)
    task = inner(kernels._task.py_func)
    sig = (spec.numba_type,) + (kernels._I64,) * 5
    task.compile(sig)
    f = jitops.elementwise(lambda a, b: a - b)
    f(np.ones(3, dt), np.ones(3, dt))  # registers the function
    uspec = nary.UserSpec(f.key, (dt, dt), dt, dt, f.returned(dt), False, False)
    utask = inner(nary.user_task.py_func)
    usig = (uspec.numba_type,) + (kernels._I64,) * 3
    registries.compile_with(lambda: utask.compile(usig), builtin=False)
    for ir in (task.inspect_llvm(sig), utask.inspect_llvm(usig)):
        assert re.search(rf"load <2 x {lane}>, {ptr} %[\w.]+, align 1\b", ir)
        assert re.search(rf"store <2 x {lane}> %[\w.]+, {ptr} %[\w.]+, align 1\b", ir)
        assert f"fsub <2 x {lane}>" in ir
