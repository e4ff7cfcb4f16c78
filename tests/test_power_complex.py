"""Complex ``power`` and ``float_power`` as NumPy computes them (npymath's ``npy_cpow``): 1 for
a zero exponent, 0 or NaN with *invalid* for a zero base, repeated multiplication for an
integer exponent below 100 in magnitude (then ``1 / r`` for a negative one), and C's ``cpow``
for every other -- bit for bit, NaN payloads and warnings included, against the installed
NumPy, which calls the same C library."""

from __future__ import annotations

import numpy as np
import pytest

import jitops
from jitops.core import catalog

from .test_family import _jitops, _numpy
from .test_values import specials

pytestmark = pytest.mark.skipif(not catalog.CPOW_ABI,
                                reason="complex power is refused off x86-64 Linux and macOS")


def _as_numpy(op, x, y, **kw):
    got, got_w = _jitops(op, x, y, **kw)
    want, want_w = _numpy(op, x, y, **kw)
    assert got.dtype == want.dtype and got.shape == want.shape, (op, got.dtype, want.dtype)
    if got.tobytes() != want.tobytes():
        g = got.ravel().view(got.real.dtype).reshape(-1, 2)
        w = want.ravel().view(want.real.dtype).reshape(-1, 2)
        bad = np.flatnonzero((g.view(np.uint8).reshape(g.shape[0], -1)
                              != w.view(np.uint8).reshape(w.shape[0], -1)).any(1))
        xb, yb = (a.ravel() for a in np.broadcast_arrays(x, y))
        rows = [f"{xb[i]!r} ** {yb[i]!r}: jitops {got.ravel()[i]!r}, NumPy {want.ravel()[i]!r}"
                for i in bad[:6]]
        raise AssertionError(f"{bad.size} of {got.size} differ:\n" + "\n".join(rows))
    assert got_w == want_w, (op, got_w, want_w)
    return got


PAIRS = [("complex128", "complex128"), ("complex64", "complex64"), ("complex64", "complex128"),
         ("float32", "complex64"), ("complex128", "float64"), ("int8", "complex64"),
         ("complex64", "int32"), ("complex64", "float16"), ("bool", "complex128")]


@pytest.mark.parametrize("op", ["power", "float_power"])
@pytest.mark.parametrize("dx, dy", PAIRS)
def test_every_special_pair_as_numpy(op, dx, dy):
    sx, sy = specials(dx), specials(dy)
    _as_numpy(op, np.repeat(sx, sy.size), np.tile(sy, sx.size))
    _as_numpy(op, sx[:, None], sy[None, :])  # a constant base per row, a strided exponent


@pytest.mark.parametrize("dt", [np.complex64, np.complex128])
def test_integer_exponents_and_the_rest_as_numpy(dt, rng=np.random.default_rng(11)):
    """Every integer exponent from -101 to 101 (NumPy multiplies below 100 in magnitude, calls
    ``cpow`` from 100), as arrays and as Python scalars, and random complex exponents, on
    bases from tiny to huge (overflow, underflow and their warnings)."""
    n = 400
    scale = 10.0 ** rng.uniform(-40, 40, n)
    x = ((rng.standard_normal(n) + 1j * rng.standard_normal(n)) * scale).astype(dt)
    x[:4] = [1, -1, 1j, -1j]
    for k in range(-101, 102):
        _as_numpy("power", x, np.full(n, k, dt))
        _as_numpy("power", x, k)
    for e in (0.5, -0.5, 1.5, 2 + 0j, 2 + 1e-300j, -3.0, 99.0, 100.0, 1j, complex(np.nan, 0)):
        _as_numpy("power", x, e)
    y = (rng.standard_normal(n) * 3 + 1j * rng.standard_normal(n)).astype(dt)
    _as_numpy("power", x, y)
    _as_numpy("float_power", x, y)


def test_parallel_sizes_views_and_out():
    rng = np.random.default_rng(3)
    n = 300_000
    x = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    y = np.where(rng.random(n) < 0.5, rng.integers(-5, 6, n), rng.standard_normal(n)) + 0j
    out = np.empty(n, np.complex128)[::-1]
    got, _ = _jitops("power", x[::-1], y, out=out)
    assert got is out
    assert out.tobytes() == np.power(x[::-1], y).tobytes()
    _as_numpy("power", x.reshape(600, 500), y[:500])  # a row broadcast
    _as_numpy("power", x.astype(np.complex64)[::2], np.complex64(0.5 + 0.5j))


def test_inside_a_user_op_and_through_the_scalar_rules():
    @jitops.elementwise
    def cube_root_then(x, y):
        return jitops.scalar.power(x, y) + x

    rng = np.random.default_rng(4)
    x = rng.standard_normal(64) + 1j * rng.standard_normal(64)
    y = np.full(64, 1 / 3 + 0.25j)
    assert cube_root_then(x, y).tobytes() == (np.power(x, y) + x).tobytes()


@pytest.mark.parametrize("name", ["elementwise_pow", "openvino.Power"])
def test_paddle_and_openvino_power_still_refuse_complex(name):
    f = jitops.openvino.Power if name == "openvino.Power" else jitops.elementwise_pow
    x = np.ones(3, np.complex64)
    with pytest.raises(TypeError, match="complex"):
        f(x, x)
