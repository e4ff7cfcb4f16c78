"""NumPy's floating-point flags to the last one: the cases where jitops once differed, each
pinned, and a differential fuzz over ops, dtypes, layouts, special values, sizes on both
sides of every serial/parallel/tiled threshold, first calls and repeats, and the three ways
``np.errstate`` acts (``call``, ``warn``, ``raise``) -- asserting NumPy's set of flags, its
result, and whether ``out`` was written."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitops
from jitops.core import config

OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin")
T = config.PARALLEL_THRESHOLD


def _flags(fn) -> tuple[frozenset, object]:
    """The kinds NumPy's errcall machinery receives during ``fn()``, and what it returned
    (or the exception it raised)."""
    seen = set()
    with np.errstate(all="call", call=lambda kind, flag: seen.add(kind)):
        try:
            r = fn()
        except Exception as e:  # noqa: BLE001 (compared with NumPy's own)
            r = e
    return frozenset(seen), r


def _same(a, b) -> bool:
    """Equal values, dtypes and shapes; NaN equal to NaN (payloads aside)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))
    return bool(np.array_equal(a, b))


# -- the cases once found to differ -----------------------------------------------------------

_CX = np.complex128([1 + 2j, -3 + 0.5j, 0j, np.inf + 1j, 1e-300 - 1e300j, 7j, -2, 0.25 + 4j])


@pytest.mark.parametrize("n", [1, 3, 8, 9, 100, 4 * T])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("divisor", ["3", "3j", "0-d", "(1,)", "(4,1)", "int8 / 1j"])
def test_complex_division_by_a_shared_divisor_raises_no_flag_numpy_does_not(n, dtype, divisor):
    """A divisor the compiler computes once (a scalar, a broadcast one) with a zero part:
    NumPy's loop runs one branch of Smith's algorithm; code computing both raised "divide
    by zero" and "invalid" where NumPy reports nothing."""
    x = np.resize(_CX, n).astype(dtype)
    y = {"3": 3, "3j": 3j, "0-d": np.array(2, dtype), "(1,)": np.array([-1j], dtype),
         "(4,1)": np.array([[2], [3j], [-1], [0.5j]], dtype)}.get(divisor)
    if divisor == "(4,1)":
        x = np.resize(x, (4, max(1, n // 4)))
    if divisor == "int8 / 1j":
        x, y = np.resize(np.int8([1, -2, 3, 0]), n), 1j
    ours, r = _flags(lambda: jitops.divide(x, y))
    theirs, want = _flags(lambda: np.divide(x, y))
    assert ours == theirs and _same(r, want), (sorted(ours), sorted(theirs))


@pytest.mark.parametrize("n", [1, 2, 5, 8, 9, 64, 4 * T])
@pytest.mark.parametrize("nan", [complex(np.nan, 1), complex(2, np.nan), complex(np.nan, np.nan)])
@pytest.mark.parametrize("how", ["scalar", "array"])
def test_complex_division_by_a_nan_part_is_invalid_at_every_size(n, nan, how):
    """NumPy compares the divisor's parts with an ordered (signalling) comparison, which
    reports a NaN as "invalid"; so must jitops, for scalar divisors and short arrays too."""
    x = np.resize(_CX, n)
    y = nan if how == "scalar" else np.full(n, nan)
    ours, r = _flags(lambda: jitops.divide(x, y))
    theirs, want = _flags(lambda: np.divide(x, y))
    assert "invalid value" in theirs and ours == theirs and _same(r, want)


@pytest.mark.parametrize("n", [1, 3, 7, 17, 100, 1000])
@pytest.mark.parametrize("other", ["int8", "uint8", "bool", "int8 array", "uint8 array"])
@pytest.mark.parametrize("op", ["add", "multiply", "subtract", "reversed subtract"])
def test_float16_with_small_integers_raises_no_spurious_underflow(n, other, op):
    x = np.float16(np.linspace(-3, 1e-3, n))
    y = {"int8": np.int8(3), "uint8": np.uint8(3), "bool": np.bool_(True),
         "int8 array": np.resize(np.int8([3, -1, 0, 7]), n),
         "uint8 array": np.resize(np.uint8([3, 200, 0, 7]), n)}[other]
    args = (y, x) if op == "reversed subtract" else (x, y)
    name = "subtract" if op == "reversed subtract" else op
    user = jitops.elementwise(lambda a, b: a * b if name == "multiply" else a + b
                              if name == "add" else a - b)
    theirs, want = _flags(lambda: getattr(np, name)(*args))
    for f in (getattr(jitops, name), user):
        ours, r = _flags(lambda: f(*args))
        assert ours == theirs and _same(r, want), (f, sorted(ours), sorted(theirs))


def _misaligned(n, dtype=np.float64) -> np.ndarray:
    buf = np.zeros(n * np.dtype(dtype).itemsize + 1, np.uint8)
    return buf[1:].view(dtype)


@pytest.mark.parametrize("n", [10, 4 * T])
def test_a_misaligned_out_is_written_before_the_error_state_raises(n):
    x = np.arange(n, dtype=np.float64)
    user = jitops.elementwise(lambda a, b: a / b)
    for f in (jitops.divide, user):
        out = _misaligned(n)
        out[:] = 7
        with np.errstate(all="raise"), pytest.raises(FloatingPointError, match="divide by zero"):
            f(x, 0.0, out=out)
        assert np.isnan(out[0]) and np.isinf(out[1:]).all()  # written, as NumPy writes


def test_a_cast_overflow_of_a_weak_int_is_reported_on_every_repeat():
    x = np.float16([1, 2, 3])
    for _ in range(5):
        ours, r = _flags(lambda: jitops.subtract(x, 2**31))
        theirs, want = _flags(lambda: np.subtract(x, 2**31))
        assert ours == theirs == {"overflow"} and _same(r, want)
    for _ in range(5):
        with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
            jitops.subtract(x, 2**31)


def test_an_errcall_gets_numpys_whole_status():
    calls = {}
    for lib in (np, jitops):
        got = calls[lib.__name__] = []
        with np.errstate(all="call", call=lambda kind, flag: got.append((kind, flag))):
            lib.divide(np.float64([0.0, 1.0]), 0.0)
    assert calls["jitops"] == calls["numpy"] == [("divide by zero", 9), ("invalid value", 9)]


# -- the differential fuzz --------------------------------------------------------------------

_DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32",
           "float64", "complex64", "complex128"]
_SPECIAL = [0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, 1e-30, 1e30, 6e4, 5e-324, 1.7e308]
_SIZES = [1, 3, 8, 9, 31, 1000, T - 1, T + 1, 4 * T]


def _array(rng, dtype, shape):
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    with np.errstate(all="ignore"):
        if dt.kind == "b":
            a = rng.integers(0, 2, n).astype(dt)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            a = rng.integers(-50 if dt.kind == "i" else 0, 50, n).astype(dt)
            a[rng.random(n) < 0.1] = info.max
            a[rng.random(n) < 0.1] = info.min
        else:
            a = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3)
            hit = rng.random(n) < 0.15
            a[hit] = rng.choice(_SPECIAL, int(hit.sum()))
            if dt.kind == "c":
                b = rng.standard_normal(n)
                b[rng.random(n) < 0.1] = rng.choice(_SPECIAL)
                a = a + 1j * b
            a = a.astype(dt)
    return a.reshape(shape)


def _operand(rng, dtype, n, kind):
    """One operand of ``n`` elements (or what broadcasts to them) of a layout ``kind``."""
    if kind == "weak":
        dt = np.dtype(dtype)
        v = _array(rng, "float64" if dt.kind in "fc" else "int8", (1,))[0]
        return complex(v) if dt.kind == "c" else float(v) if dt.kind == "f" else int(v)
    if kind == "0-d":
        return _array(rng, dtype, ())
    if kind == "full":
        return _array(rng, dtype, (n,))
    if kind == "strided":
        return _array(rng, dtype, (2 * n,))[::2]
    rows = max(1, int(np.sqrt(n)))
    cols = max(1, n // rows)
    if kind == "transposed":  # a tiled layout where large
        return _array(rng, dtype, (cols, rows)).T
    if kind == "row":
        return _array(rng, dtype, (cols,))
    return _array(rng, dtype, (rows, 1))  # a column


def _shapes_agree(x, y) -> bool:
    try:
        np.broadcast_shapes(np.shape(x), np.shape(y))
    except ValueError:
        return False
    return True


def _case(seed):
    rng = np.random.default_rng(seed)
    op = str(rng.choice(OPS))
    dx, dy = rng.choice(_DTYPES, 2)
    n = int(rng.choice(_SIZES))
    kx, ky = rng.choice(["full", "strided", "transposed", "row", "column", "0-d", "weak"], 2,
                        p=[0.3, 0.15, 0.15, 0.1, 0.1, 0.1, 0.1])
    if kx == "weak" and ky == "weak":
        ky = "full"
    x, y = _operand(rng, dx, n, kx), _operand(rng, dy, n, ky)
    if kx in ("transposed", "row", "column") and ky in ("full", "strided"):
        y = _operand(rng, dy, np.size(x), ky).reshape(np.shape(x)) if np.ndim(x) else y
    if ky in ("transposed", "row", "column") and kx in ("full", "strided"):
        x = _operand(rng, dx, np.size(y), kx).reshape(np.shape(y)) if np.ndim(y) else x
    if op in ("maximum", "minimum", "fmax", "fmin") and "c" in (np.result_type(x, y).kind,):
        op = "multiply"  # jitops refuses complex min/max (README), NumPy orders lexically
    return op, x, y, str(rng.choice(["call", "warn", "raise"])), bool(rng.random() < 0.5)


_ERRORS = (FloatingPointError, OverflowError, TypeError, ValueError)


def _run(lib, op, x, y, how, with_out):
    """(flags, result or exception, whether out was written) of one call, ``how`` being
    what np.errstate does with every flag; the flags come from a second, ``call`` run."""
    f = getattr(lib, op)
    out = None
    if with_out:
        with np.errstate(all="ignore"):
            try:
                like = np.asarray(getattr(np, op)(x, y))  # NumPy's result dtype and shape
            except (TypeError, ValueError, OverflowError):
                like = None
        if like is not None:
            out = np.full(like.shape, 7, like.dtype) if like.dtype.kind != "b" \
                else np.zeros(like.shape, like.dtype)
            before = out.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all=how, call=lambda kind, flag: None):
            try:
                r = f(x, y, out=out) if out is not None else f(x, y)
            except _ERRORS as e:
                r = next(k for k in _ERRORS if isinstance(e, k))  # the kind, not the class
    warned = sorted(str(w.message).split(" encountered")[0] for w in caught
                    if issubclass(w.category, RuntimeWarning))
    written = None if out is None else not _same(out, before)
    return r, warned, written, out


#: The fuzz's chunks the main run takes (a spread third); ``pytest -m slow`` runs the rest.
SAMPLED = (0, 3, 6, 9)


@pytest.mark.parametrize("chunk", [c if c in SAMPLED else pytest.param(c, marks=pytest.mark.slow)
                                   for c in range(12)])
def test_the_error_state_matches_numpy_on_random_calls(chunk):
    differ = []
    for seed in range(chunk * 30, chunk * 30 + 30):
        op, x, y, how, with_out = _case(seed)
        if not _shapes_agree(x, y):
            continue
        theirs = _run(np, op, x, y, how, with_out)
        for attempt in ("first", "repeat", "again"):
            ours = _run(jitops, op, x, y, how, with_out)
            fl_ours = _flags(lambda: getattr(jitops, op)(x, y))[0]
            fl_theirs = _flags(lambda: getattr(np, op)(x, y))[0]
            r_ok = (ours[0] is theirs[0]) if isinstance(theirs[0], type) else \
                (not isinstance(ours[0], type) and _same(ours[0], theirs[0]))
            if not (r_ok and ours[1] == theirs[1] and ours[2] == theirs[2]
                    and fl_ours == fl_theirs
                    and (ours[3] is None or _same(ours[3], theirs[3]))):
                differ.append((seed, attempt, op, how, with_out, np.shape(x), np.shape(y),
                               getattr(x, "dtype", type(x)), getattr(y, "dtype", type(y)),
                               sorted(fl_ours), sorted(fl_theirs), ours[1], theirs[1],
                               ours[2], theirs[2], r_ok))
                break
    assert not differ, differ[:5]
