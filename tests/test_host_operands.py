"""Python numbers, lists and NumPy scalars as operands: the arrays the pipeline would make of
them, taken by the repeats that arrays take (:func:`jitops.core.pipeline.host_arrays`).

Each answer -- value, dtype, kind of result, or the exception and its message -- is checked
against the careful path, which converts such operands itself (the conversion turned off).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

import jitops
import jitops.openvino as ov
from jitops import dispatch
from jitops.core import pipeline

from .helpers import counting_prepare

#: Weak Python scalars at the edges NumPy's rules meet: bool, int64's ends and beyond, the
#: float specials, a complex.
WEAK = (True, 0, -3, 7, (1 << 63) - 1, 1 << 63, 1 << 70, 1.5, -0.0, math.nan, math.inf, 2 + 1j)

#: One op of each kind and rule book (each compiles its kernels for the weak dtypes).
OPS = (jitops.add, jitops.subtract, jitops.divide, jitops.floor_divide, jitops.remainder,
       jitops.power, jitops.greater, jitops.logical_and, jitops.bitwise_and, jitops.ldexp,
       jitops.elementwise_div, jitops.elementwise_pow, ov.Divide, ov.FloorMod, ov.Greater)


def _answer(f, *args, **kw):
    """What a call gives: (type, dtype, bits or repr) of its result, or its exception."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            r = f(*args, **kw)
    except Exception as e:  # the careful path's exception is the answer too
        return type(e), str(e)
    a = np.asarray(r)
    return type(r), a.dtype, a.shape, a.tobytes()


def _careful(monkeypatch, f, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(dispatch, "host_arrays", lambda *a: None)
        return _answer(f, *args, **kw)


@pytest.mark.parametrize("f", OPS, ids=lambda f: f.__qualname__)
def test_two_python_numbers_answer_as_the_careful_path(f, monkeypatch):
    for x, y in itertools.product(WEAK, WEAK):
        assert _answer(f, x, y) == _careful(monkeypatch, f, x, y), (x, y)


@pytest.mark.parametrize("name", ["equal", "not_equal", "less", "less_equal", "greater",
                                  "greater_equal"])
def test_two_python_ints_compare_as_numpy(name):
    # NumPy's resolver answers its object loop for two Python ints; its call compares them as
    # int64, and exactly where one is beyond int64 (both too: equal(2**70, 2**70) is True);
    # beside a bool, scalar or array, such an int raises OverflowError
    f, g = getattr(jitops, name), getattr(np, name)
    ints = (0, -3, 7, (1 << 63) - 1, -(1 << 63), 1 << 63, 1 << 70, -(1 << 70), True,
            np.array([True, False]))
    for x, y in itertools.product(ints, ints):
        try:
            exp = g(x, y)
        except OverflowError:
            with pytest.raises(OverflowError):
                f(x, y)
            continue
        got = f(x, y)
        assert type(got) is type(exp) and np.array_equal(got, exp), (x, y)


def test_lists_answer_as_the_careful_path(monkeypatch):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cases = [
        (jitops.add, [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], {}),
        (jitops.add, [1, 2, 3], (4.5, 5, 6), {}),
        (jitops.subtract, x, [1, 2, 3, 4], {}),  # an int64 list beside float32: float64
        (jitops.subtract, [[1], [2], [3]], x, {}),
        (jitops.multiply, [True, False], 3, {}),
        (jitops.multiply, 2.5, [1, 2], {}),
        (jitops.elementwise_add, x, [1.0, 2.0, 3.0], {"axis": 0}),
        (jitops.floor_divide, [-5, 7], [2, 0], {}),
        (jitops.elementwise_div, [-5, 7], [2, 0], {}),  # ZeroDivisionError, as Paddle
        (jitops.greater, [1, 2], [[1], [3]], {}),
        (jitops.add, [1, [2, 3]], [1.0], {}),  # ragged
        (jitops.add, ["a", "b"], [1, 2], {}),  # not numbers
        (jitops.add, [1, 2, 3], [1, 2], {}),  # no broadcast
        (jitops.add, [], [], {}),
        (jitops.add, [1.0, 2.0], [3.0, 4.0], {"act": "relu"}),
        (jitops.add, [1, 2], [3, 4], {"act": "tanh"}),  # an integer result refuses tanh
        (jitops.add, [1.0, 2.0], [3.0, 4.0], {"out": np.empty(2)}),
        (jitops.add, [1.0, 2.0], [3.0, 4.0], {"out": np.empty(2, np.float32)}),  # casting
        (ov.Divide, [-7, 7], [2, -2], {}),
    ]
    for f, a, b, kw in cases:
        got = _answer(f, a, b, **kw)
        exp = _careful(monkeypatch, f, a, b, **kw)
        assert got == exp, (f, a, b, kw)
    # the lists themselves are untouched
    a = [1.0, 2.0]
    jitops.add(a, a)
    assert a == [1.0, 2.0]


def test_lists_and_numbers_repeat_without_the_pipeline(monkeypatch):
    jitops.add([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])  # settles the launches
    jitops.multiply(3, 2.5)
    calls = counting_prepare(monkeypatch)
    for k in range(5):
        r = jitops.add([1.0, 2.0, float(k)], [4.0, 5.0, 6.0])
        np.testing.assert_array_equal(r, [5.0, 7.0, k + 6.0])
        r = jitops.multiply(k, 2.5)
        assert type(r) is np.float64 and r == k * 2.5
    assert calls == []


def test_a_user_op_takes_lists_and_numbers_as_arrays(monkeypatch):
    @jitops.elementwise
    def fma(a, b, c):
        return a * b + c

    for args in (([1.0, 2.0], [3.0, 4.0], 1.5), ([1, 2], [3, 4], [5, 6]), (2, 3.5, 1),
                 (np.float32(2), [1.0, 2.0], 0.5), ([1, [2]], [1], [1])):
        assert _answer(fma, *args) == _careful(monkeypatch, fma, *args), args
    x = np.arange(5, dtype=np.float32)
    fma([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    fma(x, np.float32(2), x)
    calls = counting_prepare(monkeypatch)
    np.testing.assert_array_equal(fma([1.0, 2.0], [3.0, 4.0], [5.0, 7.0]), [8.0, 15.0])
    for v in (3, -1):  # x * s + x, each call's scalar read afresh
        got = fma(x, np.float32(v), x)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, x * np.float32(v) + x)
    assert calls == []


def test_host_arrays_leaves_what_it_does_not_convert():
    x = np.ones(3)
    assert pipeline.host_arrays("add", (x, 2.0), "add", None) is None  # the keyed path's pair
    assert pipeline.host_arrays("add", (x, x), "add", None) is None
    assert pipeline.host_arrays("add", ([1, 2], object()), "add", None) is None
    assert pipeline.host_arrays("add", (1 << 64, 1), "add", None) is None  # does not fit
    assert pipeline.host_arrays("subtract", (True, False), "subtract", None) is None  # refused
    a, b = pipeline.host_arrays("add", (1, 2.5), "add", None)
    assert a.dtype == b.dtype == np.float64 and a.shape == b.shape == ()
