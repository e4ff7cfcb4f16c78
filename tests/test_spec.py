"""One spec table, every backend: ops x dtypes, layouts and modes, the error table, ``out=`` and
the overlap policy, written once and run on each backend of tests/backends.py (CPU and Dask in
this process; the CUDA simulator in a fresh one, see tests/test_cuda_sim.py).

The oracle is always NumPy on host copies. Every backend runs the same prepared call from the
one pipeline (jitops.core.pipeline), so a divergence here is a backend launching it wrongly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitops

from . import backends
from .helpers import DTYPES, OPS, assert_same, numpy_op, sample, valid


def _call(be, op, *args, **kw):
    if be.device is not None:
        kw.setdefault("device", be.device)
    return getattr(jitops, op)(*args, **kw)


# --- ops x dtypes -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_op_and_dtype(be, op, dtype, rng):
    x, y = sample(rng, (3, 4), dtype), sample(rng, (3, 4), dtype)
    if not valid(op, dtype):
        with pytest.raises(TypeError):
            _call(be, op, be.put(x), be.put(y))
        return
    got = _call(be, op, be.put(x), be.put(y))
    assert be.is_native(got)
    assert_same(be.get(got), numpy_op(op, x, y), op, x, y)


# --- layouts and modes ------------------------------------------------------------------------
def _base(rng, shape, dtype):
    return (rng.standard_normal(shape) * 20).astype(dtype)


LAYOUTS = {
    # name: (x shape, view of x, y shape, view of y, kwargs, NumPy's answer from host views)
    "contiguous": ((4, 6), None, (4, 6), None, {}, None),
    "row": ((4, 6), None, (6,), None, {}, None),
    "outer": ((4, 1), None, (1, 6), None, {}, None),
    "transposed": ((6, 4), lambda a: a.T, (4, 6), None, {}, None),
    "reversed": ((4, 6), lambda a: a[::-1, ::-2], (3,), None, {}, None),
    "0-d and 0-d": ((), None, (), None, {}, None),
    "0-d and 2-d": ((), None, (3, 2), None, {}, None),
    "empty": ((0, 6), None, (6,), None, {}, None),
    "none mode": ((3, 5), None, (3, 5), None, {"broadcast": "NONE"}, None),
    "pdpd axis 1": ((2, 3, 4, 5), None, (3, 4), None, {"broadcast": "pdpd", "axis": 1},
                    lambda x, y: (x, y[None, :, :, None])),
    "pdpd y bigger": ((3, 4), None, (2, 3, 4, 5), None, {"broadcast": "pdpd", "axis": 1},
                      lambda x, y: (x[None, :, :, None], y)),
}


@pytest.mark.parametrize("dtype, op", [("float32", "subtract"), ("int16", "add"),
                                       ("complex128", "multiply"), ("float16", "fmin")])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layouts_and_modes(be, layout, dtype, op, rng):
    xs, fx, ys, fy, kw, frame = LAYOUTS[layout]
    xh, yh = _base(rng, xs, dtype), _base(rng, ys, dtype)
    xb, yb = be.put(xh), be.put(yh)
    if fx is not None:
        xh, xb = fx(xh), be.view(xb, fx)
    if fy is not None:
        yh, yb = fy(yh), be.view(yb, fy)
    got = be.get(_call(be, op, xb, yb, **kw))
    ex, ey = frame(xh, yh) if frame else (xh, yh)
    assert_same(got, numpy_op(op, ex, ey), op, ex, ey)


@pytest.mark.parametrize("scalar", [3, -2.5, True, 1j])
def test_weak_python_scalars(be, scalar, rng):
    x = _base(rng, (3, 4), np.float32)
    for args, exp in (((be.put(x), scalar), np.add(x, scalar)),
                      ((scalar, be.put(x)), np.add(scalar, x))):
        got = be.get(_call(be, "add", *args))
        assert got.dtype == exp.dtype
        assert_same(got, exp)


def test_fused_act_and_paddle_division(be, rng):
    x, y = _base(rng, (2, 3, 4), np.float32), _base(rng, (3,), np.float32)
    got = be.get(_call(be, "elementwise_sub", be.put(x), be.put(y), axis=1, act="relu"))
    assert_same(got, np.maximum(x - y[:, None], 0))
    a = np.array([[7, -7, 7, -7], [9, 8, -1, 0]], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    assert_same(be.get(_call(be, "elementwise_div", be.put(a), be.put(b))),
                np.trunc(a / b).astype(np.int32))
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        r = _call(be, "elementwise_div", be.put(a), be.put(np.array([1, 0, 1, 1], np.int32)))
        be.get(r)  # (a lazy backend raises at call time already, this is not reached)


# --- NumPy's binary family (tests/test_family.py checks it in depth on the CPU) ------------------
def _family_dtypes():
    """Each family op on one dtype NumPy has a loop for, rotating through the dtypes."""
    from jitops.core.catalog import ROWS

    cases = []
    for i, op in enumerate(op for op in ROWS if ROWS[op].rules == "numpy"):
        for k in range(len(DTYPES)):
            dt = DTYPES[(3 * i + k) % len(DTYPES)]
            try:
                np.dtype(ROWS[op].ufunc.resolve_dtypes((np.dtype(dt),) * 2 + (None,))[2])
            except TypeError:  # no NumPy loop for it
                continue
            if np.dtype(dt).kind != "c":
                cases.append((op, dt))
                break
    return cases + [("floor_divide", "int32")]  # (narrow signed division runs in double)


@pytest.mark.parametrize("op, dtype", _family_dtypes())
def test_family_ops_agree_with_numpy(be, op, dtype, rng):
    x, y = sample(rng, (3, 4), dtype), sample(rng, (4,), dtype)
    if np.dtype(dtype).kind in "iu":  # NumPy's rules for a zero divisor or a negative power
        y = np.where(y == 0, 3, y) if op in ("floor_divide", "remainder", "fmod") else y
        y = np.abs(y % 7).astype(dtype) if op in ("power", "left_shift", "right_shift") else y
    with np.errstate(all="ignore"):
        exp = getattr(np, op)(x, y)
        got = be.get(_call(be, op, be.put(x), be.put(y)))
    assert got.dtype == exp.dtype
    ok = (got == exp) | (np.isnan(got) & np.isnan(exp)) if exp.dtype.kind == "f" else got == exp
    if op in ("power", "float_power", "arctan2", "hypot", "logaddexp", "logaddexp2"):
        ok |= np.isclose(got, exp, rtol=4 * np.finfo(exp.dtype).eps, atol=0)
    assert ok.all(), (op, dtype, x, y, got, exp)


# --- the error table --------------------------------------------------------------------------
X = np.arange(6, dtype=np.float32).reshape(2, 3)

ERRORS = [
    # (description, kwargs for jitops.subtract (arrays put on the backend), exception, match)
    ("mode", dict(x=X, y=X, broadcast="bidir"), ValueError, "broadcast must be one of"),
    ("axis in numpy mode", dict(x=X, y=X[0], axis=0), ValueError, "axis applies only to"),
    ("axis type", dict(x=X, y=X[0], broadcast="pdpd", axis="1"), TypeError, "axis must be an int"),
    ("axis too big", dict(x=X, y=X[0], broadcast="pdpd", axis=2), ValueError, "out of range"),
    ("same rank axis", dict(x=X, y=X[:1], broadcast="pdpd", axis=1), ValueError, "same rank"),
    ("numpy shapes", dict(x=X, y=np.ones(4, np.float32)), ValueError,
     r"could not be broadcast together with shapes \(2,3\) \(4,\)"),
    ("none shapes", dict(x=X, y=X[0], broadcast="none"), ValueError, "needs equal shapes"),
    ("pdpd shapes", dict(x=X, y=np.ones(2, np.float32), broadcast="pdpd"), ValueError,
     r"X shape \(2,3\) and Y shape \(2,\).*at dim 1 X has 3 but Y has 2"),
    ("act name", dict(x=X, y=X, act="swish"), ValueError, "unknown act"),
    ("act on ints", dict(x=X.astype(np.int64), y=1, act="gelu"), TypeError, "floating-point"),
    ("complex max", dict(x=X.astype(np.complex64), y=X, op="maximum"), TypeError, "complex"),
    ("bool subtract", dict(x=np.ones(3, bool), y=True), TypeError, "boolean subtract"),
    ("string dtype", dict(x=np.array(["a", "b", "c"]), y=X[0]), TypeError, "string dtype"),
    ("ragged list", dict(x=[[1, 2], [3]], y=X), ValueError, "cannot be converted"),
    ("device", dict(x=X, y=X, device="tpu"), ValueError, "device must be"),
    ("out shape", dict(x=X, y=X, out=(3, 2)), ValueError, "out has shape"),
    ("out dtype", dict(x=X, y=X, out=np.float64), TypeError, "out has dtype"),
    ("out not an array", dict(x=X, y=X, out="list"), TypeError, "out must be"),
]


@pytest.mark.parametrize("desc, kw, exc, match", ERRORS, ids=[e[0] for e in ERRORS])
def test_error_table(be, desc, kw, exc, match):
    kw = dict(kw)
    op = kw.pop("op", "subtract")
    out = kw.pop("out", None)
    if out is not None and not be.supports_out:
        exc, match = TypeError, "out= is not supported with Dask"
    if out == "list":
        kw["out"] = [0.0] * 6
    elif isinstance(out, tuple):
        kw["out"] = be.empty(out, np.float32)
    elif out is not None:
        kw["out"] = be.empty((2, 3), out)
    before = be.get(kw["out"]).copy() if out not in (None, "list") and be.supports_out else None
    args = [be.put(v) if isinstance(v, np.ndarray) and v.dtype.kind != "U" else v
            for v in (kw.pop("x"), kw.pop("y"))]
    with pytest.raises(exc, match=match):
        getattr(jitops, op)(*args, **kw)  # device= as the case says (None follows the arrays)
    if before is not None:
        np.testing.assert_array_equal(be.get(kw["out"]), before)  # nothing written


# --- out= and the overlap policy --------------------------------------------------------------
def _shared(be, rng, shape=(6, 6), dtype=np.float64):
    base = _base(rng, shape, dtype)
    return base, be.put(base.copy())


OVERLAPS = {
    # name: (x view, y (a view or a scalar), out view), all of one (6, 6) buffer
    "in place": (lambda a: a, lambda a: a[0], lambda a: a),
    "x.T into x": (lambda a: a.T, 1.0, lambda a: a),
    "even into odd": (lambda a: a[::2], 100.0, lambda a: a[1::2]),
    "reversed out": (lambda a: a, lambda a: a[:, 0:1], lambda a: a[::-1, ::-1]),
    "shifted": (lambda a: a[:-1], lambda a: a[1:], lambda a: a[1:]),
    "y aliases out": (lambda a: a[::-1], lambda a: a, lambda a: a),
    "transposed out": (lambda a: a[::2, ::2], lambda a: a[1::2, :3], lambda a: a[:3, :3].T),
}


@pytest.mark.parametrize("case", list(OVERLAPS))
def test_out_and_overlap(be, case, rng):
    fx, fy, fo = OVERLAPS[case]
    base, buf = _shared(be, rng)
    xh, oh = fx(base), fo(base)
    yh = fy(base) if callable(fy) else fy
    expect_buf = base.copy()
    fo(expect_buf)[...] = np.subtract(xh.copy(), yh.copy() if callable(fy) else yh)
    y = be.view(buf, fy) if callable(fy) else fy
    out = be.view(buf, fo)
    if not be.supports_out:
        with pytest.raises(TypeError, match="out= is not supported"):
            _call(be, "subtract", be.view(buf, fx), y, out=oh.copy())
        return
    r = _call(be, "subtract", be.view(buf, fx), y, out=out)
    assert r is out
    np.testing.assert_array_equal(be.get(buf), expect_buf)


def test_empty_out_accepted(be):
    x = be.put(np.ones((0, 3), np.float32))
    if not be.supports_out:  # Dask results are new lazy arrays
        with pytest.raises(TypeError, match="out= is not supported"):
            _call(be, "add", x, 1.0, out=np.empty((0, 3), np.float32))
        return
    out = be.empty((0, 3), np.float32)
    assert _call(be, "add", x, 1.0, out=out) is out


_view = st.tuples(st.integers(0, 23), st.sampled_from([-3, -2, -1, 1, 2, 3]))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), vx=_view, vy=_view, vo=_view, op=st.sampled_from(["subtract",
                                                                              "multiply"]))
def test_overlap_fuzz(n, vx, vy, vo, op):
    """Random 1-d views x, y, out of one 24-element buffer (NumPy's test_mem_overlap): the
    result must be the same call computed on copies."""
    for be in [backends.ALL[b]() for b in backends.selected()]:
        if not be.supports_out:
            continue
        views = []
        for start, step in (vx, vy, vo):
            stop = start + step * n
            if not (0 <= stop - step < 24 and stop >= -1):
                return  # out of the buffer: not a case
            views.append(slice(start, stop if stop >= 0 else None, step))
        base = np.arange(24, dtype=np.float64) * 1.5 - 7
        expect = base.copy()
        expect[views[2]] = getattr(np, op)(base[views[0]].copy(), base[views[1]].copy())
        buf = be.put(base.copy())
        fns = [lambda a, s=s: a[s] for s in views]
        _call(be, op, be.view(buf, fns[0]), be.view(buf, fns[1]), out=be.view(buf, fns[2]))
        np.testing.assert_array_equal(be.get(buf), expect)
