"""A repeated serial call's compiled entry (jitops.cpu.repeat.fastcall): it takes the operand
objects themselves and makes new results itself, so every check the kernel makes on them must hold,
every new result must be the caller's alone, and nothing may leak."""

from __future__ import annotations

import platform
import sys
import threading
import warnings

import numpy as np
import pytest

import jitops
from jitops import dispatch
from jitops.cpu.compile import hooks
from jitops.cpu.repeat import fastcall
from jitops.cpu.repeat import memo as repeat
from jitops.cpu.threads import pool

#: Where jitops.cpu.compile.hooks says the hooks are verified: the entry must be on there.
VERIFIED_HERE = (platform.python_implementation() == "CPython" and sys.platform == "linux"
                 and platform.machine() == "x86_64"
                 and getattr(sys, "_is_gil_enabled", lambda: True)())


@pytest.fixture(autouse=True)
def _entry_on():
    if not hooks.ok("fastcall"):
        assert not VERIFIED_HERE, hooks.status()["fastcall"]
        pytest.skip("the fastcall hook is off here (tests/test_hooks.py covers the public path)")


def _repeat_of(fn_name: str) -> repeat.Repeat | None:
    """The memo entry the public function ``fn_name`` holds now."""
    cells = [c.cell_contents for c in getattr(jitops, fn_name).__closure__]
    memo = next(m for m in cells if any(m is k for k in repeat.MEMOS))
    return memo.latest


def test_repeats_run_through_the_compiled_entry_out_and_new(rng):
    x, y, out = rng.random(100), rng.random(100), np.empty(100)
    for _ in range(3):
        assert jitops.subtract(x, y, out=out) is out
    r = _repeat_of("subtract")
    assert r.native is not None and not r.makes and r.native is r.headers.out
    np.testing.assert_array_equal(out, x - y)
    results = [jitops.subtract(x, y) for _ in range(4)]
    r = _repeat_of("subtract")
    assert r.makes and r.native is r.headers.new
    for a in results:
        assert type(a) is np.ndarray and a.dtype == np.float64 and a.shape == (100,)
        assert a.flags.c_contiguous and a.flags.writeable and a.flags.owndata
        assert sys.getrefcount(a) == 3  # the list, the loop name and the argument
        np.testing.assert_array_equal(a, x - y)
    assert len({id(a) for a in results}) == 4


def test_fortran_and_transposed_new_results_keep_numpys_layout(rng):
    # NumPy lays a new result out as its operands are (order="K"): the entry makes a Fortran
    # one itself (PyArray_NewFromDescr's order word), any other dense layout is made by the
    # repeat in memory order and transposed back; each checked as NumPy's, every call
    f = np.asfortranarray(rng.random((6, 9)))
    t = rng.random((4, 5, 3)).transpose(2, 0, 1)  # dense, neither C nor Fortran
    for a, b in ((f, f), (f, 2.5), (t, t)):
        want = np.add(a, b)
        results = [jitops.add(a, b) for _ in range(4)]
        for got in results:
            assert got.strides == want.strides and got.dtype == want.dtype
            assert sys.getrefcount(got) == 3  # the list, the loop name and the argument
            assert got.flags.writeable
            np.testing.assert_array_equal(got, want)
        assert len({id(g) for g in results}) == 4
    for _ in range(3):
        jitops.multiply(f, f)
    r = _repeat_of("multiply")
    assert r.makes and r.native is r.headers.new  # the entry makes the Fortran result
    assert "new-F" in fastcall._VERIFIED
    got = jitops.multiply(f, f)
    assert got.flags.f_contiguous and got.flags.owndata
    np.testing.assert_array_equal(got, f * f)

    @jitops.elementwise
    def axpb(a, b, c):
        return a * b + c

    for _ in range(3):
        got = axpb(f, f, f)
        assert got.flags.f_contiguous
        np.testing.assert_array_equal(got, f * f + f)
    assert got.flags.owndata and "user-new-F" in fastcall._VERIFIED  # the entry made it


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "complex128", "float16"])
def test_other_objects_of_that_geometry_and_others_that_are_not(dtype, rng):
    def arr(shape, dt=dtype):
        return (rng.random(shape) * 100).astype(dt)

    x, y = arr(64), arr(64)
    for _ in range(3):
        jitops.add(x, y)
    # other arrays of the same kind: the entry, no identity needed
    for _ in range(3):
        a, b = arr(64), arr(64)
        np.testing.assert_array_equal(jitops.add(a, b), a + b)
        assert _repeat_of("add").makes
    # refused by the kernel's header checks, answered by the pipeline
    cases = [(arr(64), arr(65)[:64]), (arr(64), arr(128)[::2]), (arr(64), arr(64, "float64")),
             (arr((8, 8)), arr(8)), (arr(64).view(np.matrix), arr(64)), (arr(64), 3),
             (arr(64), [1] * 64), (arr(64)[::-1], arr(64))]
    for a, b in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got, want = jitops.add(a, b), np.add(a, b)
        assert type(got) is type(want) and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        jitops.add(x, y)  # the memo back on (x, y)


def test_in_place_aliases_and_overlaps_on_repeats(rng):
    x0, y = rng.random(50), rng.random(50)
    x = x0.copy()
    for k in range(4):
        jitops.subtract(x, y, out=x)
        np.testing.assert_allclose(x, x0 - (k + 1) * y)
    buf = rng.random(60)
    want_buf = buf.copy()
    for _ in range(3):  # out shifted by one over x: read from a copy, as NumPy does
        a = buf.copy()
        jitops.subtract(a[:50], y, out=a[1:51])
        w = want_buf.copy()
        np.subtract(w[:50], y, out=w[1:51])
        np.testing.assert_array_equal(a, w)
    out = np.empty(50)
    for _ in range(3):
        jitops.subtract(x, y, out=out)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        jitops.subtract(x, y, out=out)


@pytest.mark.skipif(not pool.FP_FLAGS, reason="no floating-point flags read on this machine")
def test_new_results_with_flags_follow_numpys_errstate():
    x = np.array([np.inf, 1.0, 0.0, 2.0])
    y = np.array([np.inf, 0.0, 0.0, 1.0])
    with np.errstate(all="ignore"):
        want = x - y
        for _ in range(4):  # written, flags raised: the (status, result) pair, ignored
            got = jitops.subtract(x, y)
            np.testing.assert_array_equal(got, want)
            assert type(got) is np.ndarray and sys.getrefcount(got) == 2
    assert _repeat_of("subtract").makes
    for _ in range(2):
        with np.errstate(invalid="raise"), pytest.raises(FloatingPointError, match="invalid"):
            jitops.subtract(x, y)
        with np.errstate(invalid="warn"), pytest.warns(RuntimeWarning, match="invalid"):
            np.testing.assert_array_equal(jitops.subtract(x, y), want)


def test_no_reference_leaks_on_any_path(rng):
    x, y, out = rng.random(16), rng.random(16), np.empty(16)
    dt, bad = x.dtype, x[::-1]
    inf = np.full(16, np.inf)
    with np.errstate(all="ignore"):
        for _ in range(5):  # warm: the memo made
            jitops.subtract(x, y), jitops.subtract(x, y, out=out)
            jitops.subtract(inf, inf)
        before = [sys.getrefcount(v) for v in (dt, x, y, out, bad, inf)]
        for _ in range(1000):
            jitops.subtract(x, y)
            jitops.subtract(x, y, out=out)
            jitops.subtract(inf, inf)  # the flags' pair
        after = [sys.getrefcount(v) for v in (dt, x, y, out, bad, inf)]
    assert after == before


def test_calls_large_enough_to_let_other_threads_run_are_right_in_threads(rng):
    n = fastcall.RELEASE_GIL_FROM + 1000  # the entry gives the GIL back while it computes
    xs = [rng.random(n) for _ in range(4)]
    y = rng.random(n)
    errors = []

    def work(x):
        out = np.empty(n)
        try:
            for _ in range(200):
                np.testing.assert_array_equal(jitops.multiply(x, y, out=out), x * y)
                np.testing.assert_array_equal(jitops.multiply(x, y), x * y)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in ts)


def test_the_entry_refuses_what_it_is_not_made_for(rng):
    # wrong counts of arguments, objects of other types: a status, never a crash
    x, y, out = rng.random(8), rng.random(8), np.empty(8)
    for _ in range(3):
        jitops.subtract(x, y)
    f = _repeat_of("subtract").native
    mismatch = fastcall.kernels.MISMATCH
    assert f() == mismatch and f(x) == mismatch and f(out, x, y, y) == mismatch
    assert f(None, None) == mismatch and f("a", b"b") == mismatch and f(out, x, 1.5) == mismatch
    np.testing.assert_array_equal(f(x, y), x - y)
    assert f(out, x, y) == fastcall.kernels.OK
    np.testing.assert_array_equal(out, x - y)


def test_a_first_run_that_differs_from_numbas_wrapper_turns_the_entry_off(monkeypatch, rng):
    # verify() compares the entry with Numba's wrapper on the first serial call it sees; an
    # entry that claims success without writing must turn the hook off, and every repeat
    # then still gives NumPy's answers through the wrapper.
    monkeypatch.setattr(fastcall, "_VERIFIED", set())
    monkeypatch.setitem(hooks._STATE, "fastcall", None)
    monkeypatch.setattr(fastcall, "_new", lambda block: (lambda *args: 0))
    dispatch.clear()
    try:
        x, y, out = rng.random(40), rng.random(40), np.empty(40)
        with pytest.warns(RuntimeWarning, match="fastcall is unavailable"):
            np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
        assert hooks.status()["fastcall"] is not None and fastcall.bind(0, x, 1) is None
        for _ in range(3):
            out[:] = 0
            np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
            np.testing.assert_array_equal(jitops.subtract(x, y), x - y)
        assert _repeat_of("subtract").native is None
    finally:
        dispatch.clear()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint16",
                                   "complex64"])
def test_weak_scalar_repeats_keep_numpys_promotion(dtype, rng):
    # A repeat with a Python scalar hands the kernel the 0-d array that scalar became, for
    # that very object only; other scalars, other arrays and the other side stay weak.
    def arr(dt=dtype, n=32):
        return (rng.random(n) * 50).astype(dt)

    x = arr()
    scalars = [3.0, 2, 7, -1.5, 0.5j if dtype.startswith("complex") else 4.25]
    for c in scalars:
        for _ in range(3):  # the same object again and again: remembered
            for got, want in ((jitops.subtract(x, c), np.subtract(x, c)),
                              (jitops.subtract(c, x), np.subtract(c, x))):
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
            out = np.empty_like(np.subtract(x, c))
            assert jitops.subtract(x, c, out=out) is out
            np.testing.assert_array_equal(out, np.subtract(x, c))
    c = 3.0
    for _ in range(3):
        jitops.subtract(x, c)
    # then arrays of other dtypes with that same scalar object: NumPy 2's weak promotion
    for other in ("int8", "float16", "float64", "uint8"):
        a = arr(other)
        got, want = jitops.subtract(a, c), np.subtract(a, c)
        assert got.dtype == want.dtype, other
        np.testing.assert_array_equal(got, want)
        y = arr(other)
        np.testing.assert_array_equal(jitops.subtract(x, y), np.subtract(x, y))


def test_weak_scalars_that_do_not_fit_raise_as_numpy_on_repeats():
    x = np.arange(10, dtype=np.int8)
    for _ in range(3):
        np.testing.assert_array_equal(jitops.add(x, 100), np.add(x, 100))
    for _ in range(2):
        with pytest.raises(OverflowError):
            np.add(x, 300)
        with pytest.raises(OverflowError):
            jitops.add(x, 300)
    varying = [float(v) for v in range(50)]  # a new object each call
    o = np.empty(10)
    for v in varying:
        assert jitops.add(x, v, out=o) is o
        np.testing.assert_array_equal(o, x + v)


def test_calls_alternating_between_kinds_of_arrays_take_the_one_before(rng):
    # A function keeps its last two repeats: calls that alternate between two geometries
    # (or an array and a scalar operand, out= and a new result) each find theirs, and a third
    # kind goes the keyed way; every answer NumPy's.
    a, b, o1 = rng.random(100), rng.random(100), np.empty(100)
    c, d = rng.random((4, 50)).astype(np.float32), rng.random(50).astype(np.float32)
    e = rng.random(7).astype(np.int16)
    calls = [lambda: (jitops.subtract(a, b, out=o1), np.subtract(a, b)),
             lambda: (jitops.subtract(c, d), np.subtract(c, d)),
             lambda: (jitops.subtract(c, 2.5), np.subtract(c, 2.5)),
             lambda: (jitops.subtract(e, 3), np.subtract(e, 3))]
    for pattern in ([0, 1], [1, 2], [0, 2], [0, 1, 3], [3, 2, 1, 0]):
        for _ in range(4):
            for k in pattern:
                got, want = calls[k]()
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
    for _ in range(3):
        jitops.subtract(a, b, out=o1)
        jitops.subtract(c, d)
    cells = [cl.cell_contents for cl in jitops.subtract.__closure__]
    memo = next(m for m in cells if any(m is k for k in repeat.MEMOS))
    assert memo.latest.new and not memo.before.new and memo.latest is not memo.before


def test_parallel_repeats_with_a_weak_scalar(rng):
    # A parallel launch with a weak scalar is remembered for that scalar object (its 0-d array
    # handed over), with the thread count it ran with; other scalars and counts go the key.
    from jitops.core import config

    n = config.PARALLEL_THRESHOLD * 2
    x = (rng.random(n) * 100).astype(np.int16)
    out = np.empty(n, np.int16)
    for c in (3, 3, 3, 7, 3):
        for _ in range(3):
            np.testing.assert_array_equal(jitops.subtract(x, c, out=out), np.subtract(x, c))
            np.testing.assert_array_equal(jitops.subtract(c, x), np.subtract(c, x))
        with jitops.threads(1):
            np.testing.assert_array_equal(jitops.subtract(x, c), np.subtract(x, c))
    y = x.astype(np.float32)
    for _ in range(3):
        got = jitops.subtract(y, 2.5)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, y - np.float32(2.5))


def test_a_result_that_cannot_be_made_is_a_status_with_no_error_left_set(rng):
    # PyArray_NewFromDescr failing (here: a shape no memory holds) leaves the entry with an
    # error set; it must clear it and say MISMATCH, so the pipeline decides (a result with an
    # error still set would be CPython's SystemError on the next call).
    x, y = rng.random(8), rng.random(8)
    for _ in range(3):
        jitops.subtract(x, y)
    r = _repeat_of("subtract")
    f = fastcall.bind(r.launch.task, r.headers.meta, 8, (x.dtype, (1 << 60,)))
    assert f(x, y) == fastcall.kernels.MISMATCH
    assert f(x, y) == fastcall.kernels.MISMATCH
    np.testing.assert_array_equal(jitops.subtract(x, y), x - y)


_STRIDED_FIRST = """
import warnings
warnings.simplefilter("error", RuntimeWarning)
import numpy as np, jitops
from jitops.cpu.repeat import fastcall
from jitops.cpu.compile import hooks
x, y, o = np.arange(2000.0), np.ones(2000), np.empty(2000)
for _ in range(3):
    jitops.subtract(x[::2], y[::2], out=o[::2])
assert np.array_equal(o[::2], x[::2] - 1)
print(sorted(fastcall._VERIFIED))
for _ in range(3):
    r = jitops.subtract(x[:1000], y[:1000])
assert np.array_equal(r, x[:1000] - 1)
print(sorted(fastcall._VERIFIED), hooks.status()["fastcall"])
"""


def test_a_first_call_into_a_strided_out_keeps_the_entry():
    """The first call verify() sees writes into ``out=o[::2]``: its launch is planned for
    that layout, so only the out path is compared then (a C-ordered new result is refused, as
    it should be), and the new-result path on the first call that makes its result. Such a
    first call used to turn the hook off for the whole process (small calls then ran
    0.66-0.70x NumPy instead of 1.3x)."""
    import subprocess

    res = subprocess.run([sys.executable, "-c", _STRIDED_FIRST], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split("\n")[:2] == ["['out']", "['new', 'out'] None"], res.stdout


# -- user ops (jitops.elementwise) -----------------------------------------------------------


def _axpb(a, x, b):
    return a * x + b


def _one(a):
    return a * a + a


def _two(a, b):
    return a * b + a


def _five(a, b, c, d, e):
    return (a * b + c) * d + e


@pytest.mark.parametrize("fn", [_one, _two, _axpb, _five], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", ["float32", "int16", "complex128"])
def test_user_op_repeats_run_through_the_compiled_entry(fn, dtype, rng):
    """A user op's serial repeat calls its compiled entry with the objects (``f(out, *in)``
    or ``f(*in)`` making the result): NumPy's answers on both paths, every arity."""
    op = jitops.elementwise(fn)
    nin = fn.__code__.co_argcount
    arrays = [(rng.random((7, 9)) * 4).astype(dtype) for _ in range(nin)]
    want = fn(*arrays)
    for _ in range(3):
        got = op(*arrays)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert op.memo.latest is not None and op.memo.latest.new
    got2 = op(*arrays)
    assert got2 is not got  # a new result every call
    np.testing.assert_array_equal(got2, want)
    out = np.empty_like(want)
    for _ in range(3):
        out[...] = 0
        assert op(*arrays, out=out) is out
        np.testing.assert_array_equal(out, want)
    assert op.memo.latest is not None and not op.memo.latest.new


def test_user_op_entry_refuses_other_arrays_and_the_key_answers(rng):
    """Other dtypes, shapes, strides, subclasses, a read-only or overlapping out, a scalar:
    the entry writes nothing and says so; the call then takes the key or the pipeline, and
    every answer is NumPy's."""
    op = jitops.elementwise(_axpb)
    a, x, b = (rng.random(50) for _ in range(3))
    out = np.empty(50)
    for _ in range(3):
        op(a, x, b, out=out)
    entry = op.memo.latest.entry
    ro = np.empty(50)
    ro.flags.writeable = False
    assert entry(ro, a, x, b) == jitops.cpu.kernels.binary.READ_ONLY
    assert entry(out, a, x) == jitops.cpu.kernels.binary.MISMATCH  # too few
    assert entry(out, a.astype(np.float32), x, b) == jitops.cpu.kernels.binary.MISMATCH
    assert entry(out, a[::2].copy(), x[::2].copy(), b[::2].copy()) == \
        jitops.cpu.kernels.binary.MISMATCH
    assert entry(out, a.view(np.matrix).reshape(50), x, b) == jitops.cpu.kernels.binary.MISMATCH
    buf = np.concatenate([a, a[:1]])
    shifted = buf[1:].copy()
    assert entry(buf[1:], buf[:-1], x, b) == jitops.cpu.kernels.binary.OVERLAP  # a partial overlap
    np.testing.assert_array_equal(buf[1:], shifted)
    before = out.copy()
    assert entry(out[::-1], a, x, b) == jitops.cpu.kernels.binary.MISMATCH  # other strides
    np.testing.assert_array_equal(out, before)
    # and the public calls, each NumPy's answer
    for args in ((a.astype(np.float32), x, b), (a[::2], x[::2], b[::2]), (a, 2.0, b),
                 (a, x, np.float32(3))):
        np.testing.assert_allclose(op(*args), _axpb(*args), rtol=0, atol=0)
    c = a.copy()
    op(c, x, c, out=c)  # in place: out is also an input
    np.testing.assert_array_equal(c, a * x + a)
    with pytest.raises(ValueError):
        op(a, x, b, out=ro)


def test_user_op_entry_reports_numpys_floating_point_flags():
    """Flags raised through the entry are NumPy's errstate's to act on, on both paths."""
    div = jitops.elementwise(lambda p, q: p / q)
    one, zero = np.ones(6), np.zeros(6)
    out = np.empty(6)
    for _ in range(3):
        div(one, one)
        div(one, one, out=out)
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError, match="divide by zero"):
            div(one, zero, out=out)
        assert np.isinf(out).all()  # written, as NumPy's out= is, before it raises
        div(one, one)
        with pytest.raises(FloatingPointError, match="divide by zero"):
            div(one, zero)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = div(one, zero)
    assert np.isinf(r).all() and any("divide by zero" in str(w.message) for w in seen)


def test_a_forked_child_repeats_a_user_op():
    """The at-fork hooks pass over a user op's repeat (it reads no pool), and the child's
    calls through its compiled entry are right."""
    import subprocess

    code = (
        "import os, numpy as np, jitops\n"
        "op = jitops.elementwise(lambda a, b: a * b + a)\n"
        "x = np.arange(64.0)\n"
        "for _ in range(3):\n"
        "    op(x, x)\n"
        "assert op.memo.latest is not None\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    ok = all(np.array_equal(op(x, x), x * x + x) for _ in range(5))\n"
        "    os._exit(0 if ok and op.memo.latest is not None else 3)\n"
        "_, st = os.waitpid(pid, 0)\n"
        "print('child', st)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "child 0" in res.stdout and not res.stderr, \
        res.stdout + res.stderr
