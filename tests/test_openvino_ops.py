"""jitops.openvino against the opset specification (oracles written here from its text and its
reference implementation) on the special-value grid, and against OpenVINO's CPU plugin on
values where the plugin keeps to its specification (docs/rulebooks.md lists where it does
not)."""

from __future__ import annotations

import numpy as np
import pytest

import jitops
import jitops.openvino as jov

from .rulebooks import spec_oracle as spec
from .test_values import _same_bits, _ulps, specials

_INT = ("int8", "int32", "int64", "uint8", "uint32")
_FLOAT = ("float16", "float32", "float64")
_DTYPES = {
    "Add": _INT + _FLOAT, "Subtract": _INT + _FLOAT, "Multiply": _INT + _FLOAT,
    "Divide": _INT + _FLOAT, "Maximum": _INT + _FLOAT, "Minimum": _INT + _FLOAT,
    "SquaredDifference": _INT + _FLOAT, "FloorMod": _INT + _FLOAT, "Mod": _INT + _FLOAT,
    "Power": _INT + _FLOAT, "Equal": _INT + _FLOAT, "NotEqual": _INT + _FLOAT,
    "Less": _INT + _FLOAT, "LessEqual": _INT + _FLOAT, "Greater": _INT + _FLOAT,
    "GreaterEqual": _INT + _FLOAT, "LogicalAnd": ("bool",), "LogicalOr": ("bool",),
    "LogicalXor": ("bool",), "BitwiseAnd": _INT + ("bool",), "BitwiseOr": _INT + ("bool",),
    "BitwiseXor": _INT + ("bool",),
}
_DIVIDING = ("Divide", "FloorMod", "Mod")


def _power_decided(a: int, b: int) -> bool:
    """Whether a**b is below 2**53 in magnitude (C's pow in double is exact) or far beyond
    every dtype (then the minimum whatever the rounding)."""
    if b < 0 or abs(a) < 2:
        return True
    return b > 130 or not 2**53 <= abs(a) ** b <= 2**65


@pytest.mark.parametrize("name, dt", [(n, d) for n, ds in _DTYPES.items() for d in ds])
def test_the_specification_on_the_special_value_grid(name, dt):
    s = specials(dt)
    x, y = np.repeat(s, s.size), np.tile(s, s.size)
    if name in _DIVIDING and np.dtype(dt).kind in "iu":
        keep = y != 0
        x, y = x[keep], y[keep]
    if name == "Power" and np.dtype(dt).kind in "iu":
        # (beyond 2**53 C's pow in double may round differently from the exact power)
        keep = np.array([_power_decided(a, b) for a, b in zip(x.tolist(), y.tolist())])
        x, y = x[keep], y[keep]
    with np.errstate(all="ignore"):
        got = getattr(jov, name)(x, y)
    exp = spec(name, x, y)
    if exp is None:  # Power on floats: C's pow, within 1 ulp of NumPy's
        exp = np.power(x, y)
        ok = _same_bits(got, exp) | (np.isnan(got) & np.isnan(exp)) | \
            (np.isfinite(got) & (_ulps(got, exp) <= 1))
    elif exp.dtype.kind == "f":
        ok = _same_bits(got, exp) | (np.isnan(got) & np.isnan(exp))
    else:
        ok = got == exp
    assert got.dtype == exp.dtype
    bad = np.flatnonzero(~ok)[:6]
    assert ok.all(), [(x[i], y[i], got[i], exp[i]) for i in bad]


@pytest.mark.parametrize("name", ["Divide", "FloorMod", "Mod"])
def test_integer_division_by_zero_raises_before_writing(name):
    x, y = np.array([3, 4, 5], np.int32), np.array([1, 0, 2], np.int32)
    out = np.full(3, 9, np.int32)
    for _ in range(3):
        with pytest.raises(ZeroDivisionError, match="division by zero"):
            getattr(jov, name)(x, y, out=out)
        assert (out == 9).all()
    with np.errstate(divide="ignore", invalid="ignore"):
        assert np.isinf(jov.Divide(np.float32(1.0), np.float32(0.0)))


def test_attributes_and_refusals():
    i, j = np.array([-5, 5, -7, 7], np.int32), np.array([2, -2, 2, -2], np.int32)
    assert jov.Divide(i, j).tolist() == [-3, -3, -4, -4]
    assert jov.Divide(i, j, pythondiv=False).tolist() == [-2, -2, -3, -3]
    with pytest.raises(TypeError, match="pythondiv must be a bool"):
        jov.Divide(i, j, pythondiv=1)
    with pytest.raises(TypeError, match="boolean tensors only"):
        jov.LogicalAnd(i, j)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    assert np.array_equal(jov.FloorMod(x, b, "PDPD", 1), spec("FloorMod", x, b[:, None]))
    assert np.array_equal(jov.Add(x, b[:, None], auto_broadcast="numpy"), x + b[:, None])
    with pytest.raises(ValueError):
        jov.Add(x, b, auto_broadcast="none")
    assert jov.Add.__module__ == "jitops.openvino" and "Divide" in jov.__all__
    with pytest.raises(TypeError, match="act= is not accepted"):
        jitops.less(x, b[:, None], act="relu")


def _plugin(name, x, y):
    ov = pytest.importorskip("openvino", reason="openvino is in the test extra where wheels "
                                                "exist")
    from openvino import opset13 as ops

    snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in name)[1:]
    px = ops.parameter(list(x.shape), ov.Type(x.dtype))
    py = ops.parameter(list(y.shape), ov.Type(y.dtype))
    model = ov.Model([getattr(ops, snake)(px, py)], [px, py])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled([x, y])[0]


@pytest.mark.parametrize("name", list(_DTYPES))
def test_the_cpu_plugin_agrees_where_it_keeps_to_its_specification(name):
    """Small integers (the plugin computes int32 through float32 and int64 as int32) and
    normal floats without NaN or signed-zero ties (its Maximum/Minimum return the second
    operand for those); docs/rulebooks.md shows the departures."""
    rng = np.random.default_rng(11)
    for dt in ("int32", "float32") if "Logical" not in name else ("bool",):
        if dt == "bool":
            x, y = rng.integers(0, 2, 64).astype(bool), rng.integers(0, 2, 64).astype(bool)
        elif dt == "int32":
            x = rng.integers(-1000, 1000, 64).astype(dt)
            y = rng.integers(1, 12, 64).astype(dt) * rng.choice([-1, 1], 64).astype(dt)
            if name == "Power":
                x, y = x % 20 - 10, np.abs(y) % 6
            if name == "Divide":  # (floor and truncation agree: the plugin truncates)
                x, y = np.abs(x), np.abs(y)
        else:
            x = (rng.standard_normal(64) * 50).astype(dt)
            y = (rng.standard_normal(64) * 5 + 0.5).astype(dt)
            if name == "Power":
                x = np.abs(x) + 0.5
        if dt == "float32" and name.startswith("Bitwise"):
            continue
        ours = getattr(jov, name)(x, y)
        theirs = _plugin(name, x, y)
        if name in ("Power", "Divide") and dt == "float32":  # (the plugin's division is not
            assert np.allclose(ours, theirs, rtol=4e-7, atol=0), name  # correctly rounded)
        elif dt == "float32" and name in ("FloorMod", "Mod"):  # the plugin's own formula in
            assert np.allclose(ours, theirs, rtol=1e-5, atol=1e-4), name  # float32
        else:
            assert np.array_equal(ours, theirs), (name, dt, ours, theirs)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_floor_division_in_double_is_exact_over_the_whole_range(dtype):
    """OpenVINO's Divide and Paddle's elementwise_floordiv floor signed integers in double up
    to 32 bits (it vectorises): exact over the whole range, minimum // -1 wrapping, both
    broadcast and parallel-sized."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    x = rng.integers(info.min, info.max, 200_003, dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, 200_003, dtype=dtype, endpoint=True)
    y[y == 0] = 1
    x[:4], y[:4] = info.min, np.array([-1, 1, info.max, info.min], dtype)
    with np.errstate(all="ignore"):
        want = np.floor_divide(x, y)
    for fn in (jov.Divide, jitops.elementwise_floordiv):
        assert np.array_equal(fn(x, y), want), fn
    row = y[:97]
    with np.errstate(all="ignore"):
        want = np.floor_divide(x[:97 * 2000].reshape(2000, 97), row)
    assert np.array_equal(jov.Divide(x[:97 * 2000].reshape(2000, 97), row), want)
