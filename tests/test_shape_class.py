"""Shape classes (jitops.cpu.repeat.shapeclass): one compiled entry takes every shape of a kind of
call. Each answer is compared with NumPy's, each meta the entry plans with the planner's,
and every object outside the class must be refused (then the planner decides, as before)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import jitops
from jitops import dispatch
from jitops.cpu.kernels import binary as kernels
from jitops.cpu.kernels.layout import CLASS, META
from jitops.cpu.repeat import fastcall, shapeclass
from jitops.cpu.repeat import memo as repeat

pytestmark = pytest.mark.skipif(
    kernels.HEADER_OFFSETS is None or not fastcall.hooks.ok("fastcall"),
    reason="shape classes need the verified ndarray layout and the compiled entry")

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _fresh():
    dispatch.clear()
    yield
    dispatch.clear()


def _classes() -> int:
    return len(shapeclass._CLASSES)


def _class_in_memo() -> bool:
    """Whether some public function's latest repeat is a class entry."""
    for memo in repeat.MEMOS:
        r = memo.latest
        if r is not None and r.headers.cls is not None \
                and r.launch is not None:
            return True
    return False


class _Sub(np.ndarray):
    pass


def _arr(shape, dtype):
    a = RNG.standard_normal(shape) * 100
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.int64, np.float16,
                                   np.complex64, np.uint8])
@pytest.mark.parametrize("use_out", [False, True])
def test_new_shapes_of_a_flat_class_match_numpy(dtype, use_out):
    for i, n in enumerate([7, 1, 3000, 64, 129, 1000, 5, 4097, 2, 70000]):
        shape = (n, 3) if i % 2 else (1, 3 * n)  # one rank: ranks are part of a class
        x, y = _arr(shape, dtype), _arr(shape, dtype)
        with np.errstate(all="ignore"):
            want = np.subtract(x, y)
            if use_out:
                o = np.empty_like(want)
                got = jitops.subtract(x, y, out=o)
                assert got is o
            else:
                got = jitops.subtract(x, y)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        if i == 0:  # one shape: its own repeat serves it, no class planner compiled
            assert _classes() == 0, "a call of one shape makes no class"
        if i == 1:
            assert _classes() == 1, "the second shape makes its class"
    assert _classes() == 1, "every later shape took the same class"


@pytest.mark.parametrize("scalar", [2.5, 3, np.float32(-1.5)])
@pytest.mark.parametrize("scalar_first", [False, True])
def test_a_scalar_operand_and_new_shapes(scalar, scalar_first):
    for n in (5, 17, 999, 3, 4000, 1):
        x = _arr((n,), np.float32)
        args = (scalar, x) if scalar_first else (x, scalar)
        np.testing.assert_array_equal(jitops.multiply(*args), np.multiply(*args))
        np.testing.assert_array_equal(jitops.add(*args, act="relu"),
                                      np.maximum(np.add(*args), 0))


@pytest.mark.parametrize("broadcast, axis", [("numpy", -1), ("pdpd", -1), ("pdpd", 1)])
@pytest.mark.parametrize("swap", [False, True])
def test_rows_of_a_trailing_broadcast(broadcast, axis, swap):
    b = _arr((64,), np.float32)
    seen = 0
    for n in (3, 200, 1, 17, 64, 2):
        X = _arr((n, 64), np.float32)
        if swap and broadcast == "numpy":
            got, want = jitops.add(b, X, broadcast=broadcast), b + X
        else:
            got, want = jitops.add(X, b, broadcast=broadcast, axis=axis), X + b
        np.testing.assert_array_equal(got, want)
        seen = max(seen, _classes())
    assert seen == 1


def test_rows_of_several_trailing_dims():
    b = _arr((4, 8), np.float64)
    for n in (5, 1, 33):
        X = _arr((n, 4, 8), np.float64)
        np.testing.assert_array_equal(jitops.subtract(X, b), X - b)
        np.testing.assert_array_equal(jitops.subtract(b, X), b - X)


def test_paddle_axis_is_never_taken_for_trailing():
    """A class made on rank-2 operands is not reused for rank 3, where Paddle's axis=1
    aligns y with the middle dim though its trailing dim has y's length."""
    b = _arr((64,), np.float32)
    X2 = _arr((5, 64), np.float32)
    np.testing.assert_array_equal(jitops.add(X2, b, broadcast="pdpd", axis=1), X2 + b)
    X3 = _arr((3, 64, 64), np.float32)
    got = jitops.add(X3, b, broadcast="pdpd", axis=1)
    np.testing.assert_array_equal(got, X3 + b[:, None])


def test_the_entrys_meta_is_the_planners_for_every_shape():
    """The meta a class entry writes equals, word for word, the one the planner builds for
    that very call, across sizes that cross the block size and the rows-per-task cuts."""
    for make in (lambda n: (_arr((n,), np.float32), _arr((n,), np.float32)),
                 lambda n: (_arr((n,), np.float64), np.asarray(2.0)),
                 lambda n: (_arr((n, 48), np.float32), _arr((48,), np.float32)),
                 lambda n: (_arr((3,), np.int32), _arr((n, 3), np.int32))):
        dispatch.clear()
        for n in (9, 10):  # the second shape makes the class
            x, y = make(n)
            jitops.subtract(x, y)
        ((_template, cls, _fo, _fn),) = shapeclass._CLASSES.values()
        for n in (1, 2, 100, 4095, 4096, 8191, 8192, 8193, 20000, 40000):
            x, y = make(n)
            if n * max(x.size, y.size) // max(1, n) >= cls[CLASS.MAX]:
                continue
            repeat.FAST.clear()
            for memo in repeat.MEMOS:
                memo.latest = memo.before = None
            jitops.subtract(x, y)  # planned: its launch is the one just remembered
            launch = next(iter(repeat.FAST.values()))
            planned = launch.metas.build(threads=1)
            mine = shapeclass.meta_of(cls, None, x, y)
            assert mine is not None, n
            if mine[META.ND] == 2 and planned[META.ND] == 1:
                assert x.size == 48 or y.size == 48 or min(x.size, y.size) == 3  # one row
                continue  # the planner made one dim of a single row: the same loop
            np.testing.assert_array_equal(mine, planned, err_msg=str(n))


def test_objects_outside_the_class_are_refused_and_planned():
    for n in (100, 101):  # the second shape makes the class
        x, y = _arr((n,), np.float32), _arr((n,), np.float32)
        jitops.subtract(x, y)
    assert _class_in_memo()
    cases = [
        (_arr((200,), np.float32)[::2], _arr((100,), np.float32)),  # strided
        (_arr((50,), np.float64), _arr((50,), np.float32)),  # another dtype
        (_arr((10, 10), np.float32).T, _arr((10, 10), np.float32)),  # Fortran order
        (_arr((30,), np.float32).view(_Sub), _arr((30,), np.float32)),  # a subclass
        (_arr((30,), np.float32), _arr((1,), np.float32)),  # a broadcast of length 1
        (_arr((0,), np.float32), _arr((0,), np.float32)),  # empty
        (_arr((), np.float32), _arr((), np.float32)),  # 0-d
        (_arr((5, 6), np.float32), _arr((5, 6), np.float32)),  # another rank
    ]
    for a, b in cases:
        got = jitops.subtract(a, b)
        want = np.subtract(a, b)
        assert type(got) is type(want)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="MaskedArray"):  # its mask: refused, never dropped
        jitops.subtract(np.ma.masked_array(_arr((30,), np.float32)), _arr((30,), np.float32))
    # misaligned: a float32 view one byte into a buffer
    buf = np.zeros(4 * 64 + 1, np.uint8)
    m = np.ndarray((64,), np.float32, buffer=buf, offset=1)
    m[:] = np.arange(64)
    np.testing.assert_array_equal(jitops.subtract(m, np.ones(64, np.float32)), m - 1)


def test_out_is_checked_on_every_shape():
    x, y = _arr((10,), np.float64), _arr((10,), np.float64)
    jitops.subtract(x, y, out=np.empty(10))
    for n in (11, 300, 7):
        x, y = _arr((n,), np.float64), _arr((n,), np.float64)
        o = np.empty(n)
        assert jitops.subtract(x, y, out=o) is o
        np.testing.assert_array_equal(o, x - y)
        with pytest.raises(ValueError):
            jitops.subtract(x, y, out=np.empty(n + 1))
        ro = np.empty(n)
        ro.flags.writeable = False
        with pytest.raises(ValueError):
            jitops.subtract(x, y, out=ro)
        # in place, and a partial overlap (NumPy's answer: from the inputs as they were)
        a, b = x.copy(), y.copy()
        assert jitops.subtract(a, b, out=a) is a
        np.testing.assert_array_equal(a, x - y)
        buf = np.concatenate([x, [0.0]])
        want = buf[:-1] - y
        jitops.subtract(buf[:-1], y, out=buf[1:])
        np.testing.assert_array_equal(buf[1:], want)


def test_floating_point_errors_on_new_shapes():
    jitops.divide(np.ones(3), np.ones(3))
    for n in (4, 50, 9):
        z = np.zeros(n)
        with pytest.warns(RuntimeWarning, match="divide by zero"):
            r = jitops.divide(np.ones(n), z)
        assert np.isinf(r).all() and r.shape == (n,)
        with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
            jitops.divide(np.ones(n), z)


def test_large_calls_leave_the_class_for_the_planner():
    for n in (10, 11):  # the second shape makes the class
        x = _arr((n,), np.float32)
        jitops.subtract(x, x)
    ((_t, cls, _fo, _fn),) = shapeclass._CLASSES.values()
    n = int(cls[CLASS.MAX])
    big = _arr((n,), np.float32)
    np.testing.assert_array_equal(jitops.subtract(big, big), np.zeros(n, np.float32))


def test_a_program_of_one_shape_never_compiles_the_class_planner(tmp_path):
    # the class (and the planner its entry calls by address) is made at a second shape: a
    # program that repeats one shape compiles neither
    code = """
import numpy as np, jitops
from jitops.cpu.repeat import shapeclass
x = np.ones(100, np.float32)
for _ in range(5):
    jitops.subtract(x, x)
assert not shapeclass._PLAN and not shapeclass._CLASSES, "one shape compiled the planner"
y = np.ones(101, np.float32)
np.testing.assert_array_equal(jitops.subtract(y, y), np.zeros(101, np.float32))
assert shapeclass._PLAN and len(shapeclass._CLASSES) == 1, "the second shape made no class"
"""
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
