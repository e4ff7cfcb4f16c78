"""In place: ``out`` the very array an input is (``x += y`` as ``jitops.add(x, y, out=x)``).

The kernels read such an input where they store (out is x, the other input read in place
or a constant: jitops.cpu.kernels.binary.row) or through a stack buffer a chunk at a time
(every other alias, and user ops: emit_alias_copies) -- shortcuts that write the wrong
elements if a chunk or a buffer is misplaced. Each case here crosses chunk boundaries, the
streaming head and the tasks of a parallel launch, and compares every byte with NumPy's
answer computed from copies; the second call of each takes the repeat's compiled entry.
"""

from __future__ import annotations

import numpy as np
import pytest

import jitops
from jitops import dispatch
from jitops.core import config
from jitops.cpu.kernels import stream

SIZES = [1, 7, 1023, 1024, 1025, 5000, 70_001]  # the last: a parallel launch


def _values(rng, dtype, n):
    if np.dtype(dtype).kind == "f":
        v = rng.standard_normal(n) * 10
        v[::11] = 0.0
        return v.astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(n) < 0.5
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), n).astype(dtype)


#: Ops whose answers are within 1 ulp of NumPy's, not NumPy's bits (the README's list).
NOT_EXACT = {"power"}


def _check(op, make, which, rng, n, dtype_x, dtype_y=None):
    """``op`` with ``out`` as input ``which`` ("x", "y" or "both") twice (planned, then the
    repeat), each time against the same op into a new array and NumPy, on copies."""
    fn, ref = getattr(jitops, op), getattr(np, op)
    for _ in range(2):
        x = make(rng, dtype_x, n)
        y = x if which == "both" else make(rng, dtype_y or dtype_x, n)
        with np.errstate(all="ignore"):
            want = ref(x.copy(), y.copy())
            if want.dtype != (y if which == "y" else x).dtype:
                pytest.skip("NumPy's result is not the aliased input's dtype")
            apart = fn(x.copy(), y.copy())
            target = y if which == "y" else x
            got = fn(x, y, out=target)
        assert got is target
        np.testing.assert_array_equal(got.view(np.uint8), apart.view(np.uint8))
        if op not in NOT_EXACT:
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("which", ["x", "y", "both"])
@pytest.mark.parametrize("op, dtype", [("subtract", "float32"), ("multiply", "int16"),
                                       ("floor_divide", "float64"), ("remainder", "int32"),
                                       ("power", "float32"), ("maximum", "float64"),
                                       ("logical_xor", "bool"), ("left_shift", "uint8")])
def test_an_input_that_is_out(op, dtype, which, n, rng):
    _check(op, _values, which, rng, n, dtype)


@pytest.mark.parametrize("n", [1025, 70_001])
@pytest.mark.parametrize("which", ["x", "y"])
def test_mixed_dtypes_in_place(which, n, rng):
    """out is the float32 input, the other int16 (converted on the fly)."""
    _check("add", _values, which, rng, n, "float32" if which == "x" else "int16",
           "int16" if which == "x" else "float32")


@pytest.mark.parametrize("n", [5, 1025, 70_001])
@pytest.mark.parametrize("op", ["subtract", "divide", "power", "floor_divide"])
def test_out_is_x_the_other_a_constant(op, n, rng):
    """``x -= 2.5``, ``x /= y0`` with a 0-d or broadcast one-element y, and ``c - x``."""
    for y in (2.5, np.float32(2.5), np.array(2.5, np.float32), np.array([2.5], np.float32)):
        for first in (True, False):
            x = np.abs(_values(rng, "float32", n)) + 1
            with np.errstate(all="ignore"):
                args = (x.copy(), y) if first else (y, x.copy())
                want = (jitops if op in NOT_EXACT else np).__dict__[op](*args)
                got = getattr(jitops, op)(*((x, y) if first else (y, x)), out=x)
            assert got is x
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("mode", ["numpy", "pdpd"])
def test_a_row_broadcast_into_the_full_input(mode, rng):
    """``X += b`` with b along X's rows (numpy) or its channels (pdpd, axis 1)."""
    for _ in range(2):
        X = rng.standard_normal((300, 64, 7)).astype(np.float32)
        b = rng.standard_normal((7,) if mode == "numpy" else (64,)).astype(np.float32)
        want = X + (b if mode == "numpy" else b[:, None])
        got = jitops.add(X, b, broadcast=mode, axis=1 if mode == "pdpd" else -1, out=X)
        assert got is X
        np.testing.assert_array_equal(got, want)


def test_strided_and_transposed_views_in_place(rng):
    base = rng.standard_normal((400, 300))
    for view in (lambda a: a[:, ::3], lambda a: a.T, lambda a: a[::2, 1::2]):
        a, c = base.copy(), base.copy()
        y = rng.standard_normal(view(a).shape)
        want = view(c) - y
        assert jitops.subtract(view(a), y, out=view(a)) is not None
        np.testing.assert_array_equal(view(a), want)
        np.testing.assert_array_equal(a, np.where(_mask(base.shape, view), a, base))


def _mask(shape, view):
    m = np.zeros(shape, bool)
    view(m)[...] = True
    return m


@pytest.mark.parametrize("n", [7, 1025, 70_001])
def test_user_op_inputs_that_are_out(n, rng):
    @jitops.elementwise
    def fused(a, b, c):
        return a * b - c

    for alias in ((0,), (1,), (2,), (0, 2), (0, 1, 2)):
        ins = [_values(rng, "float32", n) for _ in range(3)]
        for i in alias[1:]:
            ins[i] = ins[alias[0]]
        want = ins[0].copy() * ins[1].copy() - ins[2].copy()
        out = ins[alias[0]]
        assert fused(*ins, out=out) is out
        np.testing.assert_array_equal(out, want)


@pytest.mark.skipif(not stream.AVAILABLE, reason="streaming stores are x86-64 only")
@pytest.mark.parametrize("which", ["x", "y", "both"])
def test_in_place_where_the_stores_stream(which, monkeypatch, rng):
    """Every eligible call streams (a one-byte threshold): the aligned head, the streamed body
    and an odd tail, in place."""
    monkeypatch.setattr(config, "STREAM_BYTES", 1)
    dispatch.clear()
    try:
        for n in (3, 1029, 70_003):
            for offset in (0, 1):  # (1: an output not aligned to 32 bytes)
                def make(r, d, m, offset=offset):
                    return _values(r, d, m + offset)[offset:]

                _check("subtract", make, which, rng, n, "float32")
                _check("multiply", make, which, rng, n, "float64")
    finally:
        dispatch.clear()


SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, 3e38, 1e-40, 7.0],
                   np.float32)


@pytest.mark.parametrize("op", ["divide", "floor_divide", "remainder", "power", "subtract",
                                "fmod", "arctan2"])
def test_in_place_reports_the_flags_of_a_new_result(op):
    """Each special pair alone, in place and into a new array: the same warnings (the loops
    that read out compute every lane as the out-of-place ones do)."""
    import warnings

    for a in SPECIAL:
        for b in SPECIAL:
            for n, which, const in ((1, "x", False), (37, "x", False), (37, "y", False),
                                    (1500, "x", False), (1500, "y", False), (37, "x", True),
                                    (1500, "y", True)):
                x, y = np.full(n, a, np.float32), np.full(n, b, np.float32)
                if const:  # the other a 0-d array: x *= c, c - y
                    x, y = (x, np.float32(b)) if which == "x" else (np.float32(a), y)
                seen = []
                for target in (None, x if which == "x" else y):
                    with warnings.catch_warnings(record=True) as w, np.errstate(all="warn"):
                        warnings.simplefilter("always")
                        got = getattr(jitops, op)(x.copy() if target is None else x,
                                                  y.copy() if target is None else y,
                                                  out=target)
                    seen.append((sorted(str(m.message) for m in w), np.asarray(got).tobytes()))
                assert seen[0] == seen[1], (op, a, b, n, which)


@pytest.mark.parametrize("n", [1000, 70_001])
@pytest.mark.parametrize("other", ["array", "scalar"])
def test_in_place_after_a_call_into_another_array_takes_the_in_place_task(n, other, rng):
    """A launch planned for ``out=o`` refuses out as an input (its task has no loops for
    that: KernelSpec.in_place); the in-place call is planned again and its launch takes the
    key's place, so the repeats that follow run the in-place loops, and alternating calls
    stay right."""
    from jitops.cpu.repeat import memo as repeat

    dispatch.clear()
    x, o = _values(rng, "float32", n), np.empty(n, np.float32)
    y = _values(rng, "float32", n) if other == "array" else 2.5
    for _ in range(2):
        np.testing.assert_array_equal(jitops.multiply(x, y, out=o), x * y)
    assert [launch.in_place for launch in repeat.FAST.values()] == [False]
    for _ in range(3):
        want = x * y
        assert jitops.multiply(x, y, out=x) is x
        np.testing.assert_array_equal(x, want)
        np.testing.assert_array_equal(jitops.multiply(x, y, out=o), x * y)
    assert [launch.in_place for launch in repeat.FAST.values()] == [True]
    dispatch.clear()
