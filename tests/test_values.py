"""NumPy's exact answer on every value: the special-value grid, every activation over each float
dtype's range, and the reproducers of wrong answers found by users (SPEC section 2)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitops
from jitops.core import config as _config

from .helpers import DTYPES, OPS, REAL_ONLY, valid

_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# -- the special-value grid --------------------------------------------------------------------

def _real_specials(dt: np.dtype) -> np.ndarray:
    fi = np.finfo(dt)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -7.0, np.inf, -np.inf, np.nan, -np.nan,
            fi.smallest_subnormal, -fi.smallest_subnormal, fi.smallest_normal,
            -fi.smallest_normal, fi.smallest_normal - fi.smallest_subnormal,  # largest subnormal
            fi.max, -fi.max]
    a = np.array(vals, dtype=dt)
    # a NaN with a payload (quiet bit and a low bit set): payloads must travel like NumPy's
    payload = np.array([np.nan], dt).view(_BITS[dt.itemsize]) | 1
    return np.concatenate([a, payload.view(dt)])


def specials(dtype) -> np.ndarray:
    """0, -0, +-1, +-inf, NaNs, subnormals, the extremes of ``dtype`` (complex built from them)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.array([False, True])
    if dt.kind in "iu":
        ii = np.iinfo(dt)
        vals = {0, 1, 2, 7, ii.max, ii.max - 1, ii.min, ii.min + 1, ii.max // 2}
        if dt.kind == "i":
            vals |= {-1, -2, -7}
        return np.array(sorted(vals), dtype=dt)
    if dt.kind == "f":
        return _real_specials(dt)
    part = _real_specials(np.dtype("f4" if dt == np.complex64 else "f8"))
    part = part[[0, 1, 2, 3, 5, 7, 8, 9, 11, 12, 14, 16, 17]]  # keep the grid a few thousand
    re, im = np.meshgrid(part, part)
    out = np.empty(re.size, dt)
    out.real, out.imag = re.ravel(), im.ravel()
    return out


def _same_bits(got: np.ndarray, exp: np.ndarray) -> np.ndarray:
    """Elementwise bit equality (a complex compares part by part)."""
    if exp.dtype.kind == "c":
        return _same_bits(got.real.copy(), exp.real.copy()) & _same_bits(got.imag.copy(),
                                                                          exp.imag.copy())
    if exp.dtype == bool:
        return got == exp
    return got.view(_BITS[exp.dtype.itemsize]) == exp.view(_BITS[exp.dtype.itemsize])


def _ulps(got: np.ndarray, exp: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between floats of one dtype (exact integers; +0
    and -0 are the same point)."""
    bits = _BITS[exp.dtype.itemsize]
    top = 1 << (8 * exp.dtype.itemsize - 1)

    def ordered(a):
        return [(top - i) if i >= top else i for i in
                np.ascontiguousarray(a).view(bits).ravel().tolist()]

    d = [abs(p - q) for p, q in zip(ordered(got), ordered(exp))]
    return np.array(d, dtype=np.float64).reshape(np.shape(exp))


def _parts(a: np.ndarray) -> list[np.ndarray]:
    a = np.asarray(a)
    return [a.real.copy(), a.imag.copy()] if a.dtype.kind == "c" else [a]


def check_grid(op: str, x: np.ndarray, y: np.ndarray, got: np.ndarray) -> None:
    """``got`` against NumPy bit for bit, but where NumPy itself has no single answer or the
    contract says otherwise:

    * fmin/fmax of two NaNs give the first operand's NaN (Paddle's rule);
    * fmin/fmax of +0 and -0 (float32/64): NumPy's SIMD body returns the second operand, its
      scalar tail the first, so either zero is NumPy's;
    * add/multiply of two NaNs: NumPy's payload depends on the element's position too (SIMD
      body and tail order the operands differently), so either operand's NaN is NumPy's;
    * finite complex products and quotients within one ulp per part, and a NaN part where
      NumPy has one (its sign and payload come from the operand order inside FMAs).
    """
    with np.errstate(all="ignore"):
        exp = getattr(np, op)(x, y)
        xb, yb = np.broadcast_arrays(x, y)
        if op in ("fmin", "fmax") and exp.dtype.kind == "f":
            both = np.isnan(xb) & np.isnan(yb)
            exp = np.where(both, xb.astype(exp.dtype), exp)
        xr, yr = np.asarray(xb).astype(exp.dtype), np.asarray(yb).astype(exp.dtype)
    assert got.dtype == exp.dtype and got.shape == exp.shape
    if exp.dtype == bool or exp.dtype.kind in "iu":
        ok = got == exp
    else:
        ok = np.ones(exp.shape, bool)
        for g, e, a, b in zip(_parts(got), _parts(exp), _parts(xr), _parts(yr)):
            part = _same_bits(g, e)
            if op in ("add", "multiply"):
                part |= np.isnan(a) & np.isnan(b) & np.isnan(g)
            if op in ("fmin", "fmax") and exp.dtype in (np.float32, np.float64):
                part |= (a == 0) & (b == 0) & (g == 0)
            if exp.dtype.kind == "c" and op in ("multiply", "divide"):
                part |= np.isfinite(e) & np.isfinite(g) & (_ulps(g, e) <= 1)
                part |= np.isnan(g) & np.isnan(e)
            ok &= part
    if not ok.all():
        bad = np.flatnonzero(~ok.ravel())[:8]
        rows = [f"{xb.ravel()[i]!r} {op} {yb.ravel()[i]!r}: jitops {got.ravel()[i]!r}, "
                f"NumPy {exp.ravel()[i]!r}" for i in bad]
        raise AssertionError(f"{(~ok).sum()} of {ok.size} differ:\n" + "\n".join(rows))


def run_grid(op: str, dx: str, dy: str) -> None:
    sx, sy = specials(dx), specials(dy)
    # contiguous: every pair once
    x = np.repeat(sx, sy.size)
    y = np.tile(sy, sx.size)
    check_grid(op, x, y, getattr(jitops, op)(x, y))
    # broadcast: an outer product (rows with a constant x, strided y, then transposed)
    check_grid(op, sx[:, None], sy[None, :], getattr(jitops, op)(sx[:, None], sy[None, :]))
    check_grid(op, sx[None, :], sy[:, None], getattr(jitops, op)(sx[None, :], sy[:, None]))
    # parallel-sized, through out= (a reversed view: the strided loop)
    with np.errstate(all="ignore"):
        res = np.result_type(getattr(np, op)(x[:1], y[:1]))
    moved = x.itemsize + y.itemsize + res.itemsize
    reps = -(-_config.parallel_size(moved) // x.size) + 1
    xl, yl = np.tile(x, reps), np.tile(y, reps)
    out = np.empty(xl.size, res)[::-1]
    assert getattr(jitops, op)(xl, yl, out=out) is out
    check_grid(op, xl, yl, out)


def _grid_cases(full: bool):
    """CI: every op on every dtype against itself, and, for the ops whose mixed-dtype paths
    differ (the cast to the compute type is the same code for every op), every dtype against
    two others as x and as y. ``full``: the whole cross product (1,400 kernels to compile,
    `pytest -m slow`)."""
    cases = []
    for op in OPS:
        for i, dx in enumerate(DTYPES):
            if full:
                partners = DTYPES
            elif op in ("add", "divide", "maximum"):
                partners = (dx, DTYPES[(i + 1) % len(DTYPES)], DTYPES[(i + 5) % len(DTYPES)])
            else:
                partners = (dx,)
            for dy in partners:
                common = np.result_type(np.dtype(dx), np.dtype(dy))
                if valid(op, common):
                    cases.append((op, dx, dy))
    return cases


@pytest.mark.parametrize("op, dx, dy", _grid_cases(full=False))
def test_special_value_grid(op, dx, dy):
    run_grid(op, dx, dy)


_SAMPLED = set(_grid_cases(full=False))


@pytest.mark.slow
@pytest.mark.parametrize("op, dx, dy", [c for c in _grid_cases(full=True) if c not in _SAMPLED])
def test_special_value_grid_every_dtype_pair(op, dx, dy):
    run_grid(op, dx, dy)


def test_grid_covers_every_op_and_dtype_on_both_sides():
    cases = _grid_cases(full=False)
    for op in OPS:
        xs = {dx for o, dx, _ in cases if o == op}
        ys = {dy for o, _, dy in cases if o == op}
        want = {d for d in DTYPES if valid(op, d)}
        assert want <= xs and want <= ys, op
    mixed = {(dx, dy) for _, dx, dy in cases if dx != dy}
    assert {d for d, _ in mixed} == set(DTYPES) == {d for _, d in mixed}


# -- integer division (Paddle's elementwise_div): exact for every width ------------------------

@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64"])
def test_integer_elementwise_div_is_exact(dtype):
    a = specials(dtype)
    b = a[a != 0]
    x, y = np.repeat(a, b.size), np.tile(b, a.size)
    got = jitops.elementwise_div(x, y)
    ii = np.iinfo(dtype)
    span = ii.max - ii.min + 1
    for xi, yi, gi in zip(x.tolist(), y.tolist(), got.tolist()):
        q = abs(xi) // abs(yi) * (1 if (xi < 0) == (yi < 0) else -1)  # truncation, exactly
        q = (q - ii.min) % span + ii.min  # wraps like every other overflow (INT_MIN / -1)
        assert gi == q, (xi, yi, gi, q)


# -- every activation over each float dtype's range --------------------------------------------

def _act_reference(act: str, v: float) -> float:
    """float64 value of the activation, with the limits at +-inf."""
    if math.isnan(v):
        return v
    if math.isinf(v):
        limits = {"relu": (v, 0.0), "relu6": (6.0, 0.0), "leaky_relu": (v, v), "elu": (v, -1.0),
                  "gelu": (v, -0.0), "silu": (v, -0.0), "sigmoid": (1.0, 0.0),
                  "tanh": (1.0, -1.0), "softplus": (v, 0.0)}
        return limits[act][0 if v > 0 else 1]
    if act == "relu":
        return 0.0 if v < 0 else v
    if act == "relu6":
        return min(max(v, 0.0), 6.0) if v == v else v
    if act == "leaky_relu":
        return v if v >= 0 else v * 0.01
    if act == "elu":
        return v if v > 0 else math.expm1(v)
    if act == "gelu":
        return 0.5 * v * math.erfc(-v / math.sqrt(2.0))
    if act == "silu":
        return v / (1.0 + math.exp(-v)) if v > -700 else v * math.exp(v)
    if act == "sigmoid":
        return 1.0 / (1.0 + math.exp(-v)) if v > -700 else math.exp(v)
    if act == "tanh":
        return math.tanh(v)
    if act == "softplus":
        return max(v, 0.0) + math.log1p(math.exp(-abs(v)))
    raise KeyError(act)


def _sweep(dtype) -> np.ndarray:
    """Every float16 value; for float32 an even sweep of the bit patterns (both signs)
    plus dense runs where under- and overflow bite."""
    dt = np.dtype(dtype)
    if dt == np.float16:
        return np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    bits = np.arange(0, 2**31, 2**31 // 40000, dtype=np.int64)
    pos = bits.astype(np.uint32).view(np.float32)
    dense = np.linspace(-110, 100, 40001, dtype=np.float32)
    return np.concatenate([pos, -pos, dense, np.array([np.inf, -np.inf, np.nan], np.float32)])


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("act", list(jitops.ACTIVATIONS))
def test_activation_accuracy_over_the_whole_range(act, dtype):
    """Within 1 ulp of the float64 reference rounded to the dtype (the float64 computation
    is correctly rounded for these dtypes but for rare double roundings), no flush to zero."""
    x = _sweep(dtype)
    got = jitops.subtract(x, np.zeros((), dtype), act=act)  # x - 0 is x, -0.0 included
    ref = np.array([_act_reference(act, float(v)) for v in x.astype(np.float64)])
    with np.errstate(all="ignore"):
        exp = ref.astype(dtype)
    same_nan = np.isnan(got) == np.isnan(exp)
    assert same_nan.all(), x[~same_nan][:5]
    fin = ~np.isnan(exp)
    assert (np.isinf(got[fin]) == np.isinf(exp[fin])).all()
    d = _ulps(got[fin], exp[fin])
    worst = int(np.argmax(d))
    assert d.max() <= 1, (f"{act} {dtype}: {d.max()} ulp at x={x[fin][worst]!r}: "
                          f"{got[fin][worst]!r} vs {exp[fin][worst]!r}")


@pytest.mark.parametrize("act", list(jitops.ACTIVATIONS))
def test_activation_accuracy_float64(act):
    """float64 against a 100-bit mpmath reference over a sweep of the bit patterns: a few ulp
    wherever the result is a normal number."""
    mpmath = pytest.importorskip("mpmath")
    bits = np.arange(0, 2**63, 2**63 // 6000, dtype=np.uint64)
    pos = bits.view(np.float64)
    x = np.concatenate([pos, -pos, np.linspace(-760, 720, 3001)])
    x = x[np.isfinite(x)]
    got = jitops.subtract(x, 0.0, act=act)
    mp = mpmath.mp
    mp.prec = 100

    def ref(v):
        if act in ("relu", "relu6", "leaky_relu"):
            return _act_reference(act, float(v))  # exact in float64 (mpf has no -0.0)
        v = mp.mpf(float(v))
        f = {"elu": lambda t: t if t > 0 else mp.expm1(t),
             # below -45 the value is far under float64's least subnormal: -0.0
             "gelu": lambda t: t * mp.erfc(-t / mp.sqrt(2)) / 2 if t > -45 else mp.mpf(0),
             "silu": lambda t: t / (1 + mp.exp(-t)),
             "sigmoid": lambda t: 1 / (1 + mp.exp(-t)),
             "tanh": mp.tanh,
             "softplus": lambda t: mp.log1p(mp.exp(t))}[act]
        r = f(v)
        try:
            return float(r)
        except OverflowError:
            return math.copysign(math.inf, float(mp.sign(r)))

    exp = np.array([ref(v) for v in x])
    normal = np.abs(exp) >= np.finfo(np.float64).smallest_normal
    d = _ulps(got, exp)
    assert d[normal].max() <= 4, (act, x[normal][np.argmax(d[normal])], d[normal].max())
    # results in the subnormal range (and zeros) within a few subnormal steps
    assert d[~normal].max() <= 64, (act, x[~normal][np.argmax(d[~normal])], d[~normal].max())


# -- the reproducers (issue: wrong answers against NumPy) ---------------------------------------

def test_act_applies_to_the_wrapped_integer():
    x = np.array([100, -100, 3], np.int8)
    assert jitops.add(x, x, act="relu").tolist() == [0, 56, 6]  # 200 wraps to -56
    assert jitops.add(x, x, act="relu6").tolist() == [0, 6, 6]
    assert jitops.multiply(np.uint8([16]), np.uint8([16]), act="relu6").tolist() == [0]


def test_uint64_elementwise_div_never_goes_through_float64():
    x = np.array([2**64 - 2, 2**64 - 1, 2**63 + 1], np.uint64)
    assert jitops.elementwise_div(x, np.uint64(1)).tolist() == x.tolist()
    assert jitops.elementwise_div(x, np.uint64(3)).tolist() == [v // 3 for v in x.tolist()]
    big = np.array([2**63 - 1, -(2**63)], np.int64)
    assert jitops.elementwise_div(big, np.int64(1)).tolist() == big.tolist()


@pytest.mark.parametrize("op", ["divide", "add", "maximum", "fmin", "multiply"])
@pytest.mark.parametrize("scalar", [-1, 300, 2**64, -(2**63) - 1, 1.5, 2j])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint64", "bool", "float16"])
def test_weak_python_scalars_convert_like_numpys_loop(op, scalar, dtype):
    x = np.array([0, 1, 1], dtype)
    for a, b in ((x, scalar), (scalar, x)):
        try:
            with np.errstate(all="ignore"):
                exp = getattr(np, op)(a, b)
        except (OverflowError, TypeError) as e:
            with pytest.raises(type(e)):
                getattr(jitops, op)(a, b)
            continue
        if exp.dtype.kind == "c" and op in REAL_ONLY:  # SPEC: complex only for + - * /
            with pytest.raises(TypeError):
                getattr(jitops, op)(a, b)
            continue
        got = getattr(jitops, op)(a, b)
        assert got.dtype == exp.dtype
        np.testing.assert_array_equal(got, exp)


def test_bool_bytes_other_than_0_and_1_read_as_true():
    b = np.array([2, 255, 0, 1], np.uint8).view(bool)
    assert jitops.add(b, np.int8(10)).tolist() == [11, 11, 10, 11]
    assert jitops.multiply(b, 1.5).tolist() == [1.5, 1.5, 0.0, 1.5]
    assert jitops.add(b, b).view(np.uint8).tolist() == [1, 1, 0, 1]
    assert jitops.maximum(b, np.zeros(4, bool)).view(np.uint8).tolist() == [1, 1, 0, 1]
    assert jitops.divide(b, np.float32(2)).tolist() == [0.5, 0.5, 0.0, 0.5]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("op", ["maximum", "minimum", "fmax", "fmin"])
def test_signed_zero_ties_are_numpys(op, dtype):
    """maximum/minimum: NumPy's zero in every layout (float16's half loops return the first
    operand, float32/64 the second). fmax/fmin float32/64: NumPy's SIMD body (its scalar tail
    differs, so short arrays have no single NumPy answer)."""
    z = np.tile(np.array([0.0, -0.0, 0.0, -0.0], dtype), 8)
    w = np.tile(np.array([-0.0, 0.0, 0.0, -0.0], dtype), 8)
    layouts = [(z, w), (z[::-1], w[::-1])]
    if op in ("maximum", "minimum") or dtype == "float16":
        layouts += [(z[:1].reshape(()), w), (z, w[:1].reshape(())), (z[:3], w[:3])]
    for a, b in layouts:
        exp = getattr(np, op)(a, b)
        got = getattr(jitops, op)(a, b)
        assert np.signbit(got).tolist() == np.signbit(exp).tolist(), (a, b)


def test_complex_special_values_are_numpys():
    with np.errstate(all="ignore"):
        a = np.array([complex(1e308, -np.inf)])
        b = np.array([complex(1, 1e308)])
        assert _same_bits(jitops.multiply(a, b), a * b).all()  # inf-infj
        c, d = np.array([1j]), np.array([5e-324j])
        assert _same_bits(jitops.divide(c, d), c / d).all()  # inf+nanj
        x = np.full(5, 1 + 1j)
        assert _same_bits(jitops.divide(x, 0j), x / 0j).all()


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_division_by_zero_never_leaves_an_element_unwritten(dtype):
    """Sentinel-filled outputs, serial and parallel sizes: every element is NumPy's."""
    for n in (12, 200_000):
        x = np.full(n, 1 + 1j, dtype)
        y = np.full(n, 2 - 1j, dtype)
        y[4] = y[n // 2] = y[-1] = 0
        out = np.full(n, complex(7, 7), dtype)
        jitops.divide(x, y, out=out)
        with np.errstate(all="ignore"):
            exp = x / y
        assert _same_bits(out, exp).all(), np.flatnonzero(~_same_bits(out, exp))[:10]
        assert _same_bits(jitops.divide(x, y), exp).all()


def test_silu_does_not_flush_normal_results_to_zero():
    v = np.linspace(-103, -88, 301).astype(np.float32)
    got = jitops.subtract(v, np.float32(0), act="silu")
    exp = (v.astype(np.float64) / (1 + np.exp(-v.astype(np.float64)))).astype(np.float32)
    normal = np.abs(exp) >= np.finfo(np.float32).smallest_normal
    assert normal.any() and (got[normal] != 0).all()
    assert (_ulps(got, exp) <= 1).all()


def test_empty_out_is_accepted_whatever_its_strides():
    x = np.ones((0, 3))
    out = np.lib.stride_tricks.as_strided(np.empty(1), (0, 3), (0, 0))
    assert jitops.add(x, 1.0, out=out) is out
    out2 = np.empty((3, 0))
    assert jitops.add(np.ones((3, 0)), np.ones((3, 0)), out=out2) is out2


def test_masked_arrays_are_refused_not_unmasked():
    m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    with pytest.raises(TypeError, match="MaskedArray"):
        jitops.add(m, 1.0)
    with pytest.raises(TypeError, match="MaskedArray"):
        jitops.subtract(np.ones(3), m)
    out = np.ma.masked_array(np.empty(3), mask=False)
    with pytest.raises(TypeError, match="MaskedArray"):
        jitops.add(np.ones(3), 1.0, out=out)


def test_a_module_half_imported_by_another_thread_is_not_an_error(monkeypatch):
    """``numpy.ma`` (or ``dask.array``) sits in ``sys.modules`` before its class exists while
    another thread imports it: a call meanwhile computes, it does not fail on the missing
    class (seen as an AttributeError beside a thread compiling Numba code)."""
    import sys
    import types

    for name in ("numpy.ma", "dask.array"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # not yet initialised
    x = np.arange(5.0)
    np.testing.assert_array_equal(jitops.add(x, 1.0), x + 1.0)


def test_an_error_inside_a_compiled_task_reaches_the_caller(tmp_path):
    """No silent kernel failure by construction: a scalar op that raises makes the call raise
    (serial and parallel drivers), it never returns with elements unwritten. The test op is
    registered in a subprocess with the cache off, so it never lands in the kernel cache."""
    code = textwrap.dedent("""
        import numpy as np, jitops
        from jitops import dispatch
        from jitops.core import scalar as _scalar

        def picky(a, b, T):
            if b == 13:
                raise ValueError("thirteen")
            return a + b

        _scalar.OPS["picky"] = picky
        for n in (100, 300_000):
            y = np.ones(n)
            got = dispatch.call_op("picky", "picky", np.ones(n), y)
            assert np.array_equal(got, np.full(n, 2.0))
            y[n // 3] = 13
            try:
                dispatch.call_op("picky", "picky", np.ones(n), y)
            except RuntimeError as e:
                assert "raised" in str(e), e
            else:
                raise SystemExit(f"no error for n={n}")
        print("raised")
    """)
    env = dict(os.environ, JITOPS_CACHE="0")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "raised", res.stderr[-3000:]
