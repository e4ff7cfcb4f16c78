"""Fused activations, out= and aliasing, and the Paddle-style names with the seed examples."""

import math

import numpy as np
import pytest

import jitops

from .helpers import assert_same


def _ref_act(name, v):
    v = v.astype(np.float64)
    with np.errstate(all="ignore"):
        return {
            "relu": lambda: np.where(v < 0, 0.0, v),
            "relu6": lambda: np.where(v < 0, 0.0, np.where(v > 6, 6.0, v)),
            "leaky_relu": lambda: np.where(v >= 0, v, 0.01 * v),
            "elu": lambda: np.where(v > 0, v, np.expm1(v)),
            # at -inf both take their limit, -0.0 (the plain formulas give -inf * 0 = nan)
            "gelu": lambda: np.where(v == -np.inf, -0.0,
                                     0.5 * v * np.vectorize(math.erfc)(-v / math.sqrt(2))),
            "silu": lambda: np.where(v == -np.inf, -0.0, v / (1 + np.exp(-v))),
            "sigmoid": lambda: 1 / (1 + np.exp(-v)),
            "tanh": lambda: np.tanh(v),
            "softplus": lambda: np.logaddexp(0, v),
        }[name]()


@pytest.mark.parametrize("act", jitops.ACTIVATIONS)
@pytest.mark.parametrize("dtype, rtol", [("float32", 2e-6), ("float64", 1e-13), ("float16", 2e-3)])
def test_fused_activation(act, dtype, rtol, rng):
    x = (rng.standard_normal((5, 40)) * 4).astype(dtype)
    y = (rng.standard_normal(40) * 4).astype(dtype)
    x[0, :4] = [np.nan, np.inf, -np.inf, 30]
    got = jitops.subtract(x, y, act=act)
    assert got.dtype == np.dtype(dtype)
    # fused: the activation sees the difference in compute precision (float32 for float16),
    # rounded to the result dtype once, at the end
    ct = np.float32 if dtype == "float16" else dtype
    exp = _ref_act(act, x.astype(ct) - y.astype(ct))
    np.testing.assert_allclose(got.astype(np.float64), exp.astype(dtype).astype(np.float64),
                               rtol=rtol, atol=rtol * 1e-3, equal_nan=True)


def test_relu_on_integers_and_float_acts_rejected_on_integers():
    x = np.array([-5, 3, 9], np.int32)
    np.testing.assert_array_equal(jitops.add(x, np.int32(0), act="relu"), [0, 3, 9])
    np.testing.assert_array_equal(jitops.add(x, np.int32(0), act="RELU6"), [0, 3, 6])
    with pytest.raises(TypeError, match=r"act='sigmoid' needs a floating-point result.*int32"):
        jitops.add(x, x, act="sigmoid")
    with pytest.raises(TypeError, match=r"act='relu' needs a real numeric result.*complex"):
        jitops.add(x, 1j, act="relu")
    with pytest.raises(ValueError, match=r"unknown act='swish'"):
        jitops.add(x, x, act="swish")
    # an int result divided becomes float: float activations are allowed there
    assert jitops.divide(x, np.int32(2), act="tanh").dtype == np.float64


# --- out= -------------------------------------------------------------------------------------
def test_out_exact_and_returned(rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    out = np.empty((4, 5), np.float32)
    r = jitops.subtract(x, 1.0, out=out)
    assert r is out
    assert_same(out, x - np.float32(1))
    outF = np.asfortranarray(np.empty((4, 5), np.float32))
    assert jitops.subtract(x, x[0], out=outF) is outF
    assert_same(outF, x - x[0])
    strided = np.empty((8, 10), np.float32)[::2, ::2]
    jitops.add(x, x, out=strided)
    assert_same(strided, x + x)


def test_out_errors_leave_out_untouched():
    x = np.ones((2, 3), np.float32)
    cases = [
        (np.full((3, 2), 7, np.float32), ValueError, r"out has shape \(3, 2\).*\(2, 3\)"),
        (np.full((2, 3), 7, np.float64), TypeError, r"out has dtype float64.*float32"),
        (np.broadcast_to(np.full(3, 7, np.float32), (2, 3)), ValueError, "read-only"),
        ([[7, 7, 7], [7, 7, 7]], TypeError, "out must be a numpy.ndarray"),
    ]
    for out, exc, match in cases:
        before = np.array(out, copy=True)
        with pytest.raises(exc, match=match):
            jitops.add(x, x, out=out)
        np.testing.assert_array_equal(np.asarray(out), before)
    o = np.full(3, 7, np.float32)
    internal = np.lib.stride_tricks.as_strided(o, shape=(2, 3), strides=(0, 4))
    with pytest.raises(ValueError, match="internal overlap"):
        jitops.add(x, x, out=internal)
    assert (o == 7).all()


def _np_ref(op, x, y):
    return getattr(np, op)(x.copy(), y.copy())


@pytest.mark.parametrize("op", ["subtract", "fmin", "divide"])
def test_aliasing_matches_numpy(op, rng):
    base = rng.standard_normal(200)
    # out is x / out is y (in place)
    for which in ("x", "y"):
        a, b = base[:100].copy(), base[100:].copy()
        exp = getattr(np, op)(a, b)
        jitops_out = a if which == "x" else b
        getattr(jitops, op)(a, b, out=jitops_out)
        np.testing.assert_array_equal(jitops_out, exp)
    # shifted, reversed and strided overlaps with an input
    for make in (lambda v: (v[1:101], v[0:100], v[2:102]),
                 lambda v: (v[:100], v[100:], v[99::-1]),
                 lambda v: (v[:100], v[100:], v[::2]),
                 lambda v: (v[::2], v[1::2], v[50:150])):
        v1, v2 = base.copy(), base.copy()
        x1, y1, o1 = make(v1)
        x2, y2, o2 = make(v2)
        getattr(np, op)(x1, y1, out=o1)
        getattr(jitops, op)(x2, y2, out=o2)
        np.testing.assert_array_equal(v2, v1)
    # x and y the same array
    a = base.copy()
    np.testing.assert_array_equal(getattr(jitops, op)(a, a), _np_ref(op, a, a))
    jitops.subtract(a, a, out=a)
    assert (a == 0).all()


def test_numexpr93_style_overlap(rng):
    x = rng.standard_normal(1000)
    v = x.copy()
    jitops.add(v[:-1], v[1:], out=v[1:])
    w = x.copy()
    np.add(w[:-1], w[1:], out=w[1:])
    np.testing.assert_array_equal(v, w)


def test_broadcast_input_overlapping_out():
    m = np.arange(12.0).reshape(3, 4)
    n = m.copy()
    jitops.subtract(m, m[0], out=m)  # m[0] is overwritten during the call: must read a copy
    np.subtract(n, n[0], out=n)
    np.testing.assert_array_equal(m, n)


# --- Paddle names and the seed documents ----------------------------------------------------
def test_seed_elementwise_sub_examples(rng):
    np.testing.assert_array_equal(jitops.elementwise_sub(np.float32([2, 3, 4]),
                                                         np.float32([1, 5, 2])), [1, -2, 2])
    z = jitops.elementwise_sub(np.ones((2, 3, 4, 5), np.float32), np.zeros((3, 4), np.float32),
                               axis=1)
    assert z.shape == (2, 3, 4, 5) and (z == 1).all()
    x = rng.integers(1, 5, (2, 3, 4, 5)).astype(np.float32)
    y = rng.integers(1, 5, 5).astype(np.float32)
    np.testing.assert_array_equal(jitops.elementwise_sub(x, y, axis=3), x - y)


@pytest.mark.parametrize("yshape, axis, reshaped", [
    ((2, 3, 4, 5), -1, (2, 3, 4, 5)), ((), -1, ()), ((5,), -1, (5,)), ((4, 5), -1, (4, 5)),
    ((4, 5), 2, (4, 5)), ((3, 4), 1, (3, 4, 1)), ((2,), 0, (2, 1, 1, 1)),
    ((2, 1), 0, (2, 1, 1, 1)),
])
def test_seed_elementwise_add_examples(yshape, axis, reshaped, rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = rng.standard_normal(yshape).astype(np.float32)
    got = jitops.elementwise_add(x, y, axis=axis)
    np.testing.assert_array_equal(got, x + y.reshape(reshaped))


def test_seed_elementwise_mul_examples(rng):
    np.testing.assert_array_equal(jitops.elementwise_mul(np.array([2, 3, 4]), np.array([1, 5, 2])),
                                  [2, 15, 8])
    x = rng.integers(1, 5, (2, 3, 4, 5)).astype(np.float32)
    y = rng.integers(1, 5, (3, 4)).astype(np.float32)
    np.testing.assert_array_equal(jitops.elementwise_mul(x, y, axis=1), x * y[:, :, None])
    # the doc's third example (Y (3,4) with axis=3) cannot work: Paddle rejects it too
    with pytest.raises(ValueError, match=r"axis=3"):
        jitops.elementwise_mul(x, y, axis=3)


def test_seed_openvino_subtract_examples():
    a, b = np.ones((256, 56), np.float32), np.ones((256, 56), np.float32)
    assert jitops.subtract(a, b, broadcast="none").shape == (256, 56)
    r = jitops.subtract(np.ones((8, 1, 6, 1)), np.ones((7, 1, 5)), broadcast="numpy")
    assert r.shape == (8, 7, 6, 5)


def test_elementwise_div_truncates_and_raises_on_zero():
    x = np.array([7, -7, 7, -7, 6], np.int32)
    y = np.array([2, 2, -2, -2, 3], np.int32)
    r = jitops.elementwise_div(x, y)
    assert r.dtype == np.int32
    np.testing.assert_array_equal(r, [3, -3, -3, 3, 2])
    m = np.array([np.iinfo(np.int64).min], np.int64)
    assert jitops.elementwise_div(m, np.int64(-1))[0] == np.iinfo(np.int64).min  # wraps
    out = np.full(5, 99, np.int32)
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        jitops.elementwise_div(x, np.array([1, 0, 1, 1, 1], np.int32), out=out)
    assert (out == 99).all()
    f = jitops.elementwise_div(np.float32([1, 1]), np.float32([0, 4]))
    assert f[0] == np.inf and f[1] == 0.25
    half = jitops.elementwise_div(np.ones(3, np.int8), np.int8(2), broadcast="numpy")
    assert half.dtype == np.int8


def test_paddle_names_signature():
    x, y = np.ones((2, 3, 4, 5)), np.ones((3, 4))
    assert jitops.elementwise_max(x, y, 1, None, "my_op").shape == (2, 3, 4, 5)
    assert jitops.elementwise_fmin(x, y, axis=1, act="relu").shape == (2, 3, 4, 5)
    np.testing.assert_array_equal(jitops.elementwise_min(np.float32([1, 5]), np.float32(3)), [1, 3])
    assert jitops.elementwise_fmax.__name__ == "elementwise_fmax"
