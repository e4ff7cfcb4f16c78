"""NumPy's binary family (jitops.core.catalog) against NumPy itself: the special-value grid of
every op on every dtype pair NumPy accepts (sampled here, whole under ``pytest -m slow``),
NumPy's warnings element by element, its refusals, weak Python scalars, and the paths a
repeated call takes."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import jitops
from jitops.core import config as _config
from jitops.core.catalog import NO_COMPLEX, ROWS

from .helpers import DTYPES
from .test_values import _parts, _same_bits, _ulps, specials

#: Within 1 ulp (they call the C library; NumPy may use its own vector code, itself a few ulps
#: from the correctly rounded value): of NumPy's answer, or of the correctly rounded one
#: (computed in float64 for the narrower floats).
ULP = frozenset({"power", "float_power", "arctan2", "hypot", "logaddexp", "logaddexp2"})
#: NumPy's complex ordered comparisons raise *invalid* for a NaN part (C's ordered compares);
#: jitops' report none (the values are NumPy's).
_QUIET_COMPLEX = frozenset({"less", "less_equal", "greater", "greater_equal"})
FAMILY = tuple(op for op in ROWS if ROWS[op].rules == "numpy")


def _numpy(op, x, y, **kw):
    """NumPy's answer and the warnings it gave (or the exception it raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = getattr(np, op)(x, y, **kw)
        except Exception as e:  # noqa: BLE001 - the refusal is the answer
            return e, []
    return r, sorted({str(w.message) for w in caught})


def _jitops(op, x, y, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = getattr(jitops, op)(x, y, **kw)
    return r, sorted({str(w.message) for w in caught})


def _close(op, got, exp, x, y):
    """Where ``got`` is NumPy's answer (or, for :data:`ULP`, close enough)."""
    if exp.dtype == bool or exp.dtype.kind in "iu":
        return got == exp
    ok = np.ones(exp.shape, bool)
    for g, e in zip(_parts(got), _parts(exp)):
        part = _same_bits(g, e)
        if op in ULP:
            part |= np.isnan(g) & np.isnan(e)
            part |= np.isfinite(g) & np.isfinite(e) & (_ulps(g, e) <= 1)
            if e.dtype != np.float64:  # the correctly rounded answer, from float64
                with np.errstate(all="ignore"):
                    wide = getattr(np, op)(np.asarray(x, np.float64), np.asarray(y, np.float64))
                    ref = wide.astype(e.dtype)
                part |= np.isfinite(g) & np.isfinite(ref) & (_ulps(g, ref) <= 1)
        ok &= part
    return ok


def check(op, x, y, **kw):
    """jitops' ``op`` on x, y against NumPy's: the refusal, or dtype, values and warnings."""
    exp, exp_w = _numpy(op, x, y, **kw)
    if isinstance(exp, Exception):
        with pytest.raises(type(exp) if not isinstance(exp, TypeError) else TypeError):
            getattr(jitops, op)(x, y, **kw)
        return
    if exp.dtype.kind == "c" and op in NO_COMPLEX:  # not supported yet: refused, said so
        with pytest.raises(TypeError, match="complex operands are not supported"):
            getattr(jitops, op)(x, y, **kw)
        return
    got, got_w = _jitops(op, x, y, **kw)
    assert got.dtype == exp.dtype and got.shape == exp.shape, (op, got.dtype, exp.dtype)
    xb, yb = np.broadcast_arrays(x, y)
    ok = _close(op, got, exp, xb, yb)
    if not ok.all():
        bad = np.flatnonzero(~ok.ravel())[:6]
        rows = [f"{xb.ravel()[i]!r} {op} {yb.ravel()[i]!r}: jitops {got.ravel()[i]!r}, NumPy "
                f"{exp.ravel()[i]!r}" for i in bad]
        raise AssertionError(f"{(~ok).sum()} of {ok.size} differ:\n" + "\n".join(rows))
    quiet_complex = op in _QUIET_COMPLEX and exp_w and np.result_type(x, y).kind == "c"
    if op not in ULP and not quiet_complex:
        assert got_w == exp_w, (op, x.dtype, y.dtype)


def run_grid(op, dx, dy, out=True):
    sx, sy = specials(dx), specials(dy)
    x, y = np.repeat(sx, sy.size), np.tile(sy, sx.size)
    check(op, x, y)  # contiguous, every pair
    check(op, sx[:, None], sy[None, :])  # broadcast: a constant x per row, strided y
    exp, _ = _numpy(op, x[:1], y[:1])
    refused = isinstance(exp, Exception) or (exp.dtype.kind == "c" and op in NO_COMPLEX)
    if out and not refused:  # parallel-sized, into a reversed view
        moved = x.itemsize + y.itemsize + exp.dtype.itemsize
        reps = -(-_config.parallel_size(moved) // x.size) + 1
        xl, yl = np.tile(x, reps), np.tile(y, reps)
        o = np.empty(xl.size, exp.dtype)[::-1]
        with np.errstate(all="ignore"):
            assert getattr(jitops, op)(xl, yl, out=o) is o
            ref = getattr(np, op)(xl, yl)
        assert _close(op, o, ref, xl, yl).all(), op


def _cases(full: bool):
    """Every op on two dtypes against themselves, rotating so that every dtype meets every
    kind of op, and the comparisons on int64 against uint64 (their exact loops); ``full``:
    every pair of dtypes (`pytest -m slow`)."""
    if full:
        return [(op, dx, dy) for op in FAMILY for dx in DTYPES for dy in DTYPES]
    cases = []
    for i, op in enumerate(FAMILY):
        for d in (DTYPES[(3 * i) % len(DTYPES)], DTYPES[(3 * i + 7) % len(DTYPES)]):
            cases.append((op, d, d))
        if ROWS[op].kind == "comparison":
            cases.append((op, "int64", "uint64"))
    return cases


_SAMPLED = _cases(full=False)
#: the sampled cases also run through a parallel-sized out= (more kernels): each op's first
_WITH_OUT = {next(c for c in _SAMPLED if c[0] == op) for op in FAMILY}


@pytest.mark.parametrize("op, dx, dy", _SAMPLED)
def test_special_value_grid(op, dx, dy):
    run_grid(op, dx, dy, out=(op, dx, dy) in _WITH_OUT)


@pytest.mark.slow
@pytest.mark.parametrize("op, dx, dy", [c for c in _cases(full=True) if c not in _SAMPLED])
def test_special_value_grid_every_dtype_pair(op, dx, dy):
    run_grid(op, dx, dy)


def test_the_sample_meets_every_dtype_with_every_kind_of_op():
    assert {d for _, d, _ in _SAMPLED} == set(DTYPES)
    for kind in ("arithmetic", "comparison", "logical", "bitwise"):
        ops = [op for op in FAMILY if ROWS[op].kind == kind]
        assert len({d for op, d, _ in _SAMPLED if op in ops}) >= min(2 * len(ops), 12), kind


def test_every_op_is_public_with_numpy_name_and_alias():
    for op in FAMILY:
        assert getattr(jitops, op).__name__ == op and op in jitops.__all__
    x, y = np.array([-7, 7, -7]), np.array([3, -3, -3])
    assert np.array_equal(jitops.mod(x, y), np.mod(x, y))


# -- NumPy's refusals and edge rules -------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_negative_integer_power_raises_numpys_valueerror_before_writing(dtype):
    x = np.arange(6, dtype=dtype)
    good, bad = np.full(6, 2, dtype), np.array([2, 2, -1, 2, 2, 2], dtype)
    out = np.full(6, 99, dtype)
    assert np.array_equal(jitops.power(x, good, out=out), x ** 2)
    out[:] = 99
    for _ in range(3):  # the first call, then the repeat paths (compiled entry, memo)
        with pytest.raises(ValueError, match="negative integer powers"):
            jitops.power(x, bad, out=out)
        assert (out == 99).all()
        with pytest.raises(ValueError, match="negative integer powers"):
            jitops.power(x, bad)
    with pytest.raises(ValueError, match="negative integer powers"):
        jitops.power(x, -1)
    assert np.array_equal(jitops.power(x, np.full(6, 3, np.uint8)), x ** 3)


@pytest.mark.parametrize("op", ["equal", "not_equal", "less", "less_equal", "greater",
                                "greater_equal"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint64", "int64"])
def test_a_python_int_beyond_the_dtype_is_compared_exactly_as_numpy2(op, dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, 0, info.max], dtype)
    for s in (info.max + 1, info.min - 1, 2**64, -2**63 - 1, 2**70, -1, 300, 5):
        for args in ((x, s), (s, x)):
            exp = getattr(np, op)(*args)
            got = getattr(jitops, op)(*args)
            assert got.dtype == bool and np.array_equal(got, exp), (op, dtype, s, args[0] is x)
    out = np.zeros(3, bool)
    assert getattr(jitops, op)(x, 2**70, out=out) is out


def test_int64_and_uint64_compare_exactly_not_through_float64():
    a = np.array([2**63 - 1, -1, 2**53 + 1, 0], np.int64)
    b = np.array([2**63, 2**64 - 1, 2**53, 0], np.uint64)
    for op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        for p, q in ((a, b), (b, a), (a[:, None], b[None, :])):
            assert np.array_equal(getattr(jitops, op)(p, q), getattr(np, op)(p, q)), op


@pytest.mark.parametrize("op", [op for op in FAMILY if ROWS[op].kind != "arithmetic"])
def test_comparison_logical_and_bitwise_ops_refuse_act(op):
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(TypeError, match="act= is not accepted"):
        getattr(jitops, op)(x, x, act="relu")


def test_arithmetic_ops_fuse_act():
    x = np.linspace(-9, 9, 37).astype(np.float32)
    y = np.float32(4)
    assert np.array_equal(jitops.floor_divide(x, y, act="relu"),
                          np.maximum(np.floor_divide(x, y), 0))
    i = np.arange(-8, 8, dtype=np.int32)
    assert np.array_equal(jitops.remainder(i, 3, act="relu6"),
                          np.clip(np.remainder(i, 3), 0, 6))
    with pytest.raises(TypeError, match="floating-point result"):
        jitops.gcd(i, 3, act="gelu")


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
def test_integer_division_by_zero_follows_numpys_errstate(op):
    x, y = np.array([5, -5, 7], np.int32), np.array([0, 2, 0], np.int32)
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError, match=f"divide by zero encountered in {op}"):
            getattr(jitops, op)(x, y)
    with np.errstate(divide="ignore"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert np.array_equal(getattr(jitops, op)(x, y), getattr(np, op)(x, y))


def test_minimum_floor_divided_by_minus_one_warns_overflow_as_numpy():
    x = np.array([np.iinfo(np.int64).min, 9], np.int64)
    with pytest.warns(RuntimeWarning, match="overflow encountered in floor_divide"):
        got = jitops.floor_divide(x, np.int64(-1))
    assert np.array_equal(got, [np.iinfo(np.int64).min, -9])


# -- promotion: NumPy's loop tables and weak Python scalars ----------------------------------------

_SCALARS = (True, 3, -2, 2.5, -0.0, 1e300, 3 + 1j)


_WEAK_DTYPES = ("bool", "int8", "uint16", "float16", "float32")


def _weak_cases(full: bool):
    """Each op with two dtypes and three scalars, rotating (``full``: all of them)."""
    for i, op in enumerate(FAMILY):
        for dt, s in itertools.product(_WEAK_DTYPES, _SCALARS):
            j, k = _WEAK_DTYPES.index(dt), _SCALARS.index(s)
            if full or ((j - i) % 5 < 2 and (k - i) % 7 < 3):
                yield op, dt, s


@pytest.mark.parametrize("op", FAMILY)
def test_weak_python_scalars_promote_as_numpy2(op):
    for o, dt, s in _weak_cases(full=False):
        if o == op:
            check(op, specials(dt)[:6], s)
            check(op, s, specials(dt)[:6])


@pytest.mark.slow
def test_weak_python_scalars_promote_as_numpy2_every_dtype_and_scalar():
    for op, dt, s in _weak_cases(full=True):
        check(op, specials(dt)[:6], s)
        check(op, s, specials(dt)[:6])


# -- the paths a call takes: new shapes, repeats, pdpd, out= -------------------------------------

@pytest.mark.parametrize("op", ["less", "floor_divide", "bitwise_xor", "copysign"])
def test_repeats_and_new_shapes_agree_with_numpy(op, rng=np.random.default_rng(5)):
    dt = np.float32 if op == "copysign" else np.int32
    for n in list(rng.integers(1, 300, 12)) + [17, 17, 17]:
        x = (rng.standard_normal(n) * 100).astype(dt)
        y = (rng.standard_normal(n) * 9).astype(dt)
        if op == "floor_divide":
            y[y == 0] = 3
        assert np.array_equal(getattr(jitops, op)(x, y), getattr(np, op)(x, y))
        out = np.empty(n, getattr(np, op)(x[:1], y[:1]).dtype)
        assert getattr(jitops, op)(x, 7, out=out) is out
        assert np.array_equal(out, getattr(np, op)(x, 7))


def test_pdpd_and_none_broadcasting():
    x = np.arange(2 * 3 * 4, dtype=np.int64).reshape(2, 3, 4) - 11
    y = np.array([3, -4, 5], np.int64)
    got = jitops.floor_divide(x, y, broadcast="pdpd", axis=1)
    assert np.array_equal(got, np.floor_divide(x, y[None, :, None]))
    got = jitops.greater(x, y, broadcast="pdpd", axis=1)
    assert np.array_equal(got, x > y[None, :, None])
    with pytest.raises(ValueError):
        jitops.less(x, y, broadcast="none")


def test_out_may_alias_an_input_as_numpy():
    x = np.arange(-10, 10, dtype=np.int32)
    exp = np.left_shift(x, 2)
    assert jitops.left_shift(x, 2, out=x) is x and np.array_equal(x, exp)
    z = np.arange(12, dtype=np.int16)
    exp = np.bitwise_xor(z[1:], z[:-1])
    jitops.bitwise_xor(z[1:], z[:-1], out=z[:-1])
    assert np.array_equal(z[:-1], exp)


def test_bool_out_must_be_bool():
    x = np.arange(4.0)
    with pytest.raises(TypeError, match="dtype"):
        jitops.less(x, 2.0, out=np.empty(4, np.float64))


# -- Paddle's legacy names against Paddle's own kernels ------------------------------------------

_PADDLE_DTYPES = ("int32", "int64", "float32", "float64")


def _paddle_specials(dt: str) -> np.ndarray:
    """The grid without subnormals: Paddle's division, remainder and power kernels read them
    as zero on the CPU (``0 // 1e-45`` is NaN there; jitops keeps IEEE's answer, as its
    elementwise_div does), and without NaN payloads (Paddle's kernels make their own)."""
    s = specials(dt)
    if np.dtype(dt).kind == "f":
        s = s[:-1]
        return s[~((s != 0) & (np.abs(s) < np.finfo(dt).smallest_normal))]
    return s


@pytest.mark.parametrize("dt", _PADDLE_DTYPES)
@pytest.mark.parametrize("name", ["elementwise_floordiv", "elementwise_mod", "elementwise_pow"])
def test_paddle_names_against_paddles_own_kernels(name, dt):
    paddle = pytest.importorskip("paddle", reason="paddlepaddle is in the test extra where "
                                 "wheels exist")
    legacy = paddle._legacy_C_ops
    s = _paddle_specials(dt)
    x, y = np.repeat(s, s.size), np.tile(s, s.size)
    if np.dtype(dt).kind == "i":
        info = np.iinfo(dt)
        keep = (y != 0) & ~((x == info.min) & (y == -1))  # Paddle: an error, and SIGFPE
        if name == "elementwise_pow":
            keep = np.abs(y) <= 70  # (Paddle's double pow of a huge exponent: the same cast)
        x, y = x[keep], y[keep]
    theirs = getattr(legacy, name)(paddle.to_tensor(x), paddle.to_tensor(y), "axis", -1).numpy()
    with np.errstate(all="ignore"):
        ours = getattr(jitops, name)(x, y)
    assert ours.dtype == theirs.dtype
    if theirs.dtype.kind == "f":
        same = _same_bits(ours, theirs) | (np.isnan(ours) & np.isnan(theirs))
        if name == "elementwise_pow":  # C's pow on both sides; float32 pow may differ by 1 ulp
            same |= np.isfinite(ours) & (_ulps(ours, theirs) <= 1)
        # Paddle flushes a subnormal result to a zero of its sign
        tiny = np.abs(ours) < np.finfo(dt).smallest_normal
        same |= tiny & (theirs == 0) & (np.signbit(ours) == np.signbit(theirs))
    else:
        same = ours == theirs
    bad = np.flatnonzero(~same)[:6]
    assert same.all(), [(x[i], y[i], ours[i], theirs[i]) for i in bad]
    # pdpd: y laid onto x at axis 1
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 3, 4)) * 9).astype(dt)
    b = (rng.standard_normal(3) * 4).astype(dt)
    b[b == 0] = 2
    theirs = getattr(legacy, name)(paddle.to_tensor(a), paddle.to_tensor(b), "axis", 1).numpy()
    with np.errstate(all="ignore"):
        ours = getattr(jitops, name)(a, b, axis=1)
    assert np.array_equal(ours, theirs, equal_nan=True) or \
        (name == "elementwise_pow" and np.allclose(ours, theirs, rtol=1e-6, equal_nan=True))


def test_paddle_integer_division_by_zero_raises_before_writing():
    x, y = np.array([4, 5, 6], np.int32), np.array([1, 0, 2], np.int32)
    for name in ("elementwise_floordiv", "elementwise_mod"):
        out = np.full(3, 7, np.int32)
        for _ in range(3):  # the first call and the repeat paths
            with pytest.raises(ZeroDivisionError, match="division by zero"):
                getattr(jitops, name)(x, y, out=out)
            assert (out == 7).all()
    assert np.array_equal(jitops.elementwise_floordiv(x, y + 1), x // (y + 1))
    with pytest.raises(TypeError, match="no kernel for unsigned"):
        jitops.elementwise_pow(np.arange(3, dtype=np.uint8), np.uint8(2))


# -- the family's scalar rules inside user ops (jitops.scalar) -------------------------------------

@pytest.mark.parametrize("op, dt", [("floor_divide", "int16"), ("remainder", "float32"),
                                    ("fmod", "int64"), ("heaviside", "float64"),
                                    ("right_shift", "int8"), ("logical_xor", "float32"),
                                    ("greater_equal", "uint8"), ("gcd", "int32")])
def test_the_scalar_rules_inside_a_user_op_are_the_ops(op, dt):
    rule = getattr(jitops.scalar, op)

    @jitops.elementwise
    def user(x, y):
        return rule(x, y)

    s = specials(dt)
    x, y = np.repeat(s, s.size), np.tile(s, s.size)
    with np.errstate(all="ignore"):
        got, exp = user(x, y), getattr(jitops, op)(x, y)
    assert got.dtype == exp.dtype or (exp.dtype == bool and got.dtype == bool)
    assert (_same_bits(got, exp) if exp.dtype.kind == "f" else got == exp).all()
    assert jitops.scalar.floor_divide(-7, 2) == -4 and sorted(jitops.scalar.__all__) == \
        sorted(FAMILY)


def test_the_two_documented_user_op_divergences_hold():
    """jitops.scalar's docstring: ``float_power`` keeps its float64 with ``dtype=`` (without
    it a float return from float32 inputs is float32), and ``nextafter`` on float16 inputs
    steps in float32 (their element type in a user op), unlike jitops.nextafter."""
    def fp(a, b):
        return jitops.scalar.float_power(a, b)

    x, y = np.array([1e-45, 0.0, 3.0], np.float32), np.array([-1.0, 0.0, 0.5], np.float32)
    wide = jitops.elementwise(fp, dtype=np.float64)(x, y)
    assert wide.dtype == np.float64 and wide.tobytes() == np.float_power(x, y).tobytes()
    with np.errstate(over="ignore"):  # (1e-45 ** -1 overflows float32)
        assert jitops.elementwise(fp)(x, y).dtype == np.float32

    def step(a, b):
        return jitops.scalar.nextafter(a, b)

    h, k = np.array([0.0, 1.0], np.float16), np.array([1.0, 2.0], np.float16)
    with np.errstate(all="ignore"):
        got = jitops.elementwise(step)(h, k)
    assert got.tolist() == [0.0, 1.0]  # float32's steps, rounded back to float16
    assert jitops.nextafter(h, k).tobytes() == np.nextafter(h, k).tobytes()
    assert np.nextafter(h, k).tolist() != [0.0, 1.0]


@pytest.mark.parametrize("dx, dy", [("int8", "int8"), ("int16", "int16"), ("int32", "int32"),
                                    ("uint8", "int8"), ("bool", "int16")])
def test_narrow_floor_division_in_double_keeps_numpys_values_and_warnings(dx, dy):
    """Signed floor division of at most 32 bits runs in double (it vectorises; its flags come
    from arithmetic the compiler must keep): the grid, broadcast and parallel out=, values
    and NumPy's divide-by-zero and overflow warnings, so that a compiler folding either away
    fails here."""
    run_grid("floor_divide", dx, dy)
    t = np.dtype(dx if dx == dy else "int32").type
    x = np.array([np.iinfo(t).min, 7, -7, 0], t)
    for y, want in ((t(-1), "overflow"), (np.zeros(4, t), "divide by zero")):
        with pytest.warns(RuntimeWarning, match=want):
            got = jitops.floor_divide(np.tile(x, 300), np.broadcast_to(y, 1200) if
                                      np.ndim(y) == 0 else np.tile(y, 300))
        with np.errstate(all="ignore"):
            assert np.array_equal(got, np.floor_divide(np.tile(x, 300), np.tile(y, 1200 //
                                                                               np.size(y))))


@pytest.mark.parametrize("dt", ["int8", "int16"])
def test_narrow_floor_division_in_float_is_exact_on_every_dividend(dt):
    """At most 16 bits, floor division runs in float (the quotient's distance from an
    integer is above float's rounding): every dividend against divisors near 1, near the
    widths' limits and of many factors, and every divisor against such dividends, for NumPy's
    floor_divide and Paddle's elementwise_floordiv (minimum // -1 wraps in both)."""
    info = np.iinfo(dt)
    every = np.arange(info.min, info.max + 1).astype(dt)
    some = np.array([info.min, info.min + 1, -1, 1, 2, 3, 7, 10, 127, 255, 256, 4095, 4097,
                     9999, info.max - 1, info.max], np.int64)
    some = np.unique(np.concatenate([some, -some[some > info.min]]).clip(info.min, info.max))
    some = some.astype(dt)
    divisors = some[some != 0]
    x, y = np.repeat(every, divisors.size), np.tile(divisors, every.size)
    x, y = np.concatenate([x, np.repeat(some, every.size)]), np.concatenate(
        [y, np.tile(every, some.size)])
    keep = y != 0
    x, y = x[keep], y[keep]
    with np.errstate(all="ignore"):
        want = np.floor_divide(x, y)
        assert np.array_equal(jitops.floor_divide(x, y), want)
    assert np.array_equal(jitops.elementwise_floordiv(x, y), want)


def _warned(fn):
    """``fn()`` and the messages of the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fn()
    return got, [str(w.message) for w in caught]


@pytest.mark.parametrize("dt", ["int8", "int16", "int32"])
def test_floor_division_by_one_divisor_multiplies_exactly_as_numpy(dt):
    """A divisor of one element broadcast over the dividends (NumPy's libdivide case) takes
    the reciprocal-multiply entry (jitops.core.catalog.BY_ONE_DIVISOR): every int8 and int16
    dividend (int32: the extremes and a random sample) by divisors of every size and sign,
    as a Python int, a 0-d and a (1,) array, serial and parallel, in values and in NumPy's
    divide-by-zero and overflow warnings (0 and -1 take their own branch)."""
    from jitops.cpu.kernels import binary as kernels

    info = np.iinfo(dt)
    rng = np.random.default_rng(5)
    if dt == "int32":
        x = np.concatenate([[info.min, info.min + 1, info.max - 1], np.arange(-999, 1000),
                            rng.integers(info.min, info.max, 1 << 17, endpoint=True)])
    else:
        x = np.arange(info.min, info.max + 1)
    x = np.concatenate([x, [info.max]]).astype(dt)  # (and the parallel path: 2**16 + 1)
    wide = np.unique(np.concatenate([np.arange(-130, 131), rng.integers(info.min, info.max,
                                     40, endpoint=True), [info.min, info.min + 1, info.max,
                                     info.max - 1, info.max // 3, info.min // 3]]))
    divisors = np.arange(info.min, info.max + 1) if dt == "int8" else wide
    for k, d in enumerate(divisors.astype(dt)):
        forms = (int(d), np.array(d, dt), np.array([d], dt))
        for y in forms if d in (0, -1, 7, info.min) or k % 17 == 0 else forms[:1]:
            want, warned = _warned(lambda: np.floor_divide(x, y))
            got, ours = _warned(lambda: jitops.floor_divide(x, y))
            assert got.dtype == want.dtype and np.array_equal(got, want), (dt, d, type(y))
            assert ours == warned, (dt, d, ours, warned)
            got, ours = _warned(lambda: jitops.floor_divide(x[:100], y))  # serial
            assert np.array_equal(got, want[:100]) and ours == warned, (dt, d)
    assert f"floor_divide_signed_{8 * info.bits // 8}_by_one" in {s.op for s in kernels._TASKS}


@pytest.mark.parametrize("dt", ["int8", "int32"])
def test_floor_division_by_one_divisor_vectorises_its_multiplication(dt):
    """The shortcut's speed: the divisor's tests (0, -1) are of it alone, so LLVM lifts them
    out of the loop and the loop left multiplies and floors whole vectors with no packed
    division (a task compiled afresh, uncached: one from the disk cache has no assembly)."""
    import re

    from jitops.cpu.compile import registries
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels import binary as kernels
    from jitops.cpu.kernels.spec import KernelSpec

    d = np.dtype(dt)
    spec = KernelSpec(f"floor_divide_signed_{8 * d.itemsize}_by_one", None, d, d, d, d)
    task = inner(kernels._task.py_func)
    sig = (spec.numba_type,) + (kernels._I64,) * 5
    registries.compile_with(lambda: task.compile(sig), builtin=True)
    asm = task.inspect_asm(sig)
    w = "ps" if d.itemsize < 4 else "pd"
    assert re.search(rf"\bvmul{w}\s+[^\n]*%[yz]mm", asm), "no vector multiplication"
    assert re.search(rf"\bv(rndscale|round){w}\s+[^\n]*%[yz]mm", asm), "no vector floor"
    assert not re.search(r"\bvdivp[sd]\s+[^\n]*%[xyz]mm", asm), "a packed division is left"


def test_floor_division_by_one_divisor_never_streams(monkeypatch):
    """LLVM lifts the divisor's tests out of the plain row loop only, not the streamed pair
    (int8 // 7 on 1e7: 0.4 ms plain, 4.1 streamed): the entry is in catalog.NOT_STREAMED."""
    from jitops import dispatch
    from jitops.core import config
    from jitops.cpu.kernels import binary as kernels

    monkeypatch.setattr(config, "STREAM_BYTES", 1)  # every output streams where it may
    dispatch.clear()
    try:
        x = np.arange(1 << 12).astype(np.int16)
        for y in (7, np.int16(7), np.full(1 << 12, 7, np.int16)):
            assert np.array_equal(jitops.floor_divide(x, y), x // 7)
    finally:
        dispatch.clear()
    ops = {(s.op, s.stream) for s in kernels._TASKS if s.x == "int16"}
    assert ("floor_divide_signed_16", True) in ops, ops
    assert ("floor_divide_signed_16_by_one", False) in ops, ops
    assert ("floor_divide_signed_16_by_one", True) not in ops, ops


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_nextafter_is_numpys_every_float_width(dt):
    """Each width's own spacing rules (subnormals, powers of two, the largest value, both
    zeros) and flags: C's overflow and underflow for float32/64, the half loop's overflow
    only and its own tie and NaN rules for float16; NaN payloads as the C library's."""
    run_grid("nextafter", dt, dt)
    f = np.finfo(dt)
    x = np.array([f.max, f.smallest_subnormal, 0.0, f.tiny, 1.0, -0.0], dt)
    y = np.array([np.inf, 0.0, 1.0, 0.0, 0.0, 0.0], dt)
    for i in range(x.size):
        for under in ("ignore", "raise"):
            with np.errstate(over="raise", under=under):
                try:
                    want = np.nextafter(x[i:i + 1], y[i:i + 1])
                except FloatingPointError as e:
                    with pytest.raises(FloatingPointError, match=str(e).split()[0]):
                        jitops.nextafter(x[i:i + 1], y[i:i + 1])
                    continue
                got = jitops.nextafter(x[i:i + 1], y[i:i + 1])
            assert got.tobytes() == want.tobytes(), (dt, x[i], y[i])


@pytest.mark.parametrize("op", ["remainder", "fmod"])
@pytest.mark.parametrize("dx, dy", [("int8", "int8"), ("int16", "int16"), ("int32", "int32"),
                                    ("uint8", "uint8"), ("uint32", "uint32"),
                                    ("uint8", "int8"), ("bool", "int16"), ("int64", "int64")])
def test_narrow_remainders_in_double_keep_numpys_values_and_warnings(op, dx, dy):
    """Integer remainder and fmod of at most 32 bits run in double (a - floor(a/b)*b is
    exact there, and it vectorises): the grid, broadcast and parallel out=, and NumPy's
    divide-by-zero warning, so that a compiler folding it away fails here; minimum % -1 is 0
    with no warning, as NumPy's."""
    run_grid(op, dx, dy)
    x = np.array([np.iinfo(np.int32).min, 7, -7, 0, np.iinfo(np.int32).max], np.int32)
    rng = np.random.default_rng(1)
    for y in (np.int32(-1), rng.integers(-9, 9, 5).astype(np.int32)):
        xs, ys = np.tile(x, 300), np.broadcast_to(y, 1500) if np.ndim(y) == 0 else np.tile(y, 300)
        with np.errstate(divide="raise"):
            if (ys == 0).any():
                with pytest.raises(FloatingPointError, match="divide by zero"):
                    getattr(jitops, op)(xs, ys)
            else:
                assert np.array_equal(getattr(jitops, op)(xs, ys), getattr(np, op)(xs, ys))


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod", "divmod"])
@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_an_infinite_dividend_by_a_bool_one_gives_the_c_librarys_nan(op, dt):
    """A bool divisor is 0.0 or 1.0, so LLVM lowers ``fmod(x, 1.0)`` inline with ``x``'s sign
    copied onto the NaN of ``inf``: +NaN where C's fmod gives the CPU's default NaN (found as
    float16 ``inf // True`` on an Intel Xeon with AVX-512)."""
    x = np.array([np.inf, -np.inf, 2.5, -np.nan] * 5, dt)
    y = np.ones(x.size, bool)
    exp, got = _numpy(op, x, y)[0], _jitops(op, x, y)[0]
    for e, g in zip(exp if op == "divmod" else [exp], got if op == "divmod" else [got]):
        assert _same_bits(g, e).all(), (op, dt, g, e)


@pytest.mark.parametrize("n", [17, 33])
def test_copysign_into_float16_raises_no_spurious_overflow(n):
    """LLVM narrows ``copysign(x, y)`` to float16 by narrowing ``y`` too, whose low bits it has
    made garbage: 65504 then overflowed, one element at a time (a loop's scalar remainder) on
    CPUs with AVX512-FP16. Every position of the largest float16, x a broadcast bool."""
    for k in range(n):
        y = np.zeros(n, np.float16)
        y[k] = 65504
        for x in (np.array(True), np.array([[True]]), np.ones(n, bool)):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                r = jitops.copysign(x, y)
            assert _same_bits(r, np.copysign(x, y)).all()


def _float32_division_pairs(rng, n=40000):
    """float32 pairs around the double-quotient fmod's edges: quotients near 2**24 on both
    sides, exact multiples (zero remainders of both signs), subnormals and the largest
    values, both signs, beside random bit patterns (zeros, infinities and NaNs among them)."""
    y = (rng.standard_normal(n) * np.exp2(rng.integers(-140, 120, n))).astype(np.float32)
    k = rng.integers(1, 2**26, n).astype(np.float64)
    near = (k * y.astype(np.float64)).astype(np.float32)  # x / y near k, some exactly k
    near = np.where(rng.random(n) < 0.3, np.nextafter(near, np.float32(0)), near)
    edge = (y.astype(np.float64) * 2.0**24 * (1 + rng.integers(-3, 4, n) * 2.0**-23))
    edge = edge.astype(np.float32)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    sub = (rng.integers(-2**23, 2**23, n) * 2.0**-149).astype(np.float32)
    x = np.concatenate([near, edge, bits, sub, -near, near * np.float32(1e-3)])
    yy = np.concatenate([y, y, bits[::-1], y[::-1], y, sub])
    return x, yy


@pytest.mark.parametrize("op", ["fmod", "remainder", "floor_divide", "divmod"])
def test_float32_division_in_double_is_exact_at_its_edges(op):
    """float32 ``fmod`` runs in double where the quotient is below 2**24 (exact there: see
    jitops.cpu.kernels.spec._emit_frem_single) and calls C's otherwise: bit for bit NumPy's
    (C's ``fmodf``) and its warnings, on both sides of every edge of that choice."""
    x, y = _float32_division_pairs(np.random.default_rng(11))
    exp, exp_w = _numpy(op, x, y)
    got, got_w = _jitops(op, x, y)
    for e, g in zip(exp if op == "divmod" else [exp], got if op == "divmod" else [got]):
        bad = ~_same_bits(g, e)
        assert not bad.any(), (op, x[bad][:4], y[bad][:4], g[bad][:4], e[bad][:4])
    assert got_w == exp_w
    if op != "divmod":  # inside a user op too (jitops.scalar)
        rule = getattr(jitops.scalar, op)
        fn = jitops.elementwise(lambda a, b: rule(a, b))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _same_bits(fn(x, y), exp).all()


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
@pytest.mark.parametrize("op", ["remainder", "divmod", "elementwise_mod"])
def test_a_remainder_of_one_sign_near_the_largest_value_raises_nothing(op, dt):
    """``x % y`` adds ``y`` only where the signs differ, but LLVM computed that branch's
    ``mod + y`` for every element: where both had one sign near the largest value the unused
    sum overflowed, a warning NumPy does not give (an error under ``np.errstate(over=
    "raise")``) on exact answers."""
    big = float(np.finfo(dt).max)
    x = np.array([big / 2, -big / 2, 1.0, -big / 3] * 9, dt)
    y = np.array([big, -big, 3.0, -big] * 9, dt)
    with np.errstate(all="raise"):
        got = getattr(jitops, op)(x, y)
    exp = np.divmod(x, y) if op == "divmod" else np.remainder(x, y)
    for g, e in zip(got if op == "divmod" else [got], exp if op == "divmod" else [exp]):
        assert _same_bits(g, e).all()


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_fmod_of_a_signalling_nan_dividend_is_quieted_as_numpys(dt):
    """NumPy's fmod gives the dividend's NaN, quieted by C's arithmetic with *invalid*; it was
    passed through with its signalling bit."""
    u = np.uint32 if dt == "float32" else np.uint64
    snan = np.array([0x7FA27D5B, 0xFF89F1FE] if dt == "float32" else
                    [0x7FF4000000000001, 0xFFF0000000C0FFEE], u).view(dt)
    x = np.tile(np.concatenate([snan, np.array([np.nan, 5.0], dt)]), 9)
    y = np.tile(np.array([2.0, np.nan, 0.5, 3.0], dt), 9)
    (exp, exp_w), (got, got_w) = _numpy("fmod", x, y), _jitops("fmod", x, y)
    assert _same_bits(got, exp).all() and got_w == exp_w
