"""NumPy's floating-point error state: jitops reports the flags NumPy's loop reports for the
same call -- per pair of special values, per op and dtype, and over whole arrays on the serial
and the parallel kernels -- and acts on them as ``np.errstate`` says."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitops

from .helpers import DTYPES, OPS, valid

SPECIAL = [0.0, -0.0, 1.0, -1.5, 2.0, np.inf, -np.inf, np.nan, 1e-30, 1e30, 3e38, 6e4,
           5e-324, 1.7e308, -7.0]


def _flags(fn) -> frozenset:
    """The (kind, flag) pairs NumPy's errcall machinery receives during ``fn()``."""
    seen = set()
    with np.errstate(all="call", call=lambda kind, flag: seen.add(kind)):
        fn()
    return frozenset(seen)


def _values(dtype):
    dt = np.dtype(dtype)
    if dt.kind in "biu":
        info = np.iinfo(dt) if dt.kind != "b" else None
        vals = [0, 1, 2, 7] + ([] if info is None else [info.max, info.min])
        return np.array(vals).astype(dt)
    with np.errstate(all="ignore"):
        v = np.array(SPECIAL).astype(dt)
        if dt.kind == "c":
            v = (v[:, None] + 1j * v[None, ::3]).ravel().astype(dt)
    return v


@pytest.mark.parametrize("op, dtype", [(o, d) for o in OPS for d in DTYPES if valid(o, d)])
def test_the_flags_numpy_reports_pair_by_pair(op, dtype):
    v = _values(dtype)
    x, y = np.repeat(v, len(v)), np.tile(v, len(v))
    differ = []
    for a, b in zip(x, y):
        a1, b1 = np.array([a]), np.array([b])
        ours = _flags(lambda: getattr(jitops, op)(a1, b1))
        theirs = _flags(lambda: getattr(np, op)(a1, b1))
        if ours == theirs:
            continue
        differ.append((a, b, sorted(ours), sorted(theirs)))
    assert not differ, differ[:10]


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
@pytest.mark.parametrize("n", [7, 10**5])  # a serial call, and a parallel one
def test_whole_arrays_serial_and_parallel(op, n):
    rng = np.random.default_rng(4)
    for special in (None, np.inf, 0.0, np.nan):
        x = rng.standard_normal(n)
        y = rng.standard_normal(n)
        if special is not None:
            y[n // 2] = special
            x[n // 2] = special if special != 0.0 else 1.0
        for _ in range(2):  # the first call and its fast-path repeat
            assert _flags(lambda: getattr(jitops, op)(x, y)) == \
                _flags(lambda: getattr(np, op)(x, y))


def test_raise_warn_ignore_as_numpy():
    x, z = np.ones(3), np.zeros(3)
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError, match="divide by zero"):
        jitops.divide(x, z)
    with np.errstate(divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")
        jitops.divide(x, z)
    with pytest.warns(RuntimeWarning, match="divide by zero encountered in divide") as rec:
        jitops.divide(x, z)
    assert rec[0].filename == __file__  # the warning points at the caller's line
    with np.errstate(all="raise"), pytest.raises(FloatingPointError, match="overflow"):
        jitops.add(np.float16([65504]), np.float16([17]))
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError, match="invalid"):
        jitops.elementwise_sub(np.array([np.inf]), np.array([np.inf]))
    out = np.zeros(3)
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        jitops.divide(x, z, out=out)
    assert np.isinf(out).all()  # written, as NumPy writes before it raises


def test_user_ops_report_their_flags():
    f = jitops.elementwise(lambda a, b: a / b + 1.0, name="ratio")
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError, match="in ratio"):
        f(np.ones(3), np.zeros(3))
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError, match="in ratio"):
        f(np.ones(10**5), np.zeros(10**5))


def test_masked_flags_min_max_and_activations():
    nan = np.array([np.nan, 1.0])
    with np.errstate(all="raise"):
        for op in ("maximum", "minimum", "fmax", "fmin"):
            getattr(jitops, op)(nan, np.array([1.0, np.nan]))
        jitops.subtract(nan, 1.0, act="relu")
        jitops.subtract(np.array([-1000.0, 1000.0]), 0.0, act="sigmoid")
        with pytest.raises(FloatingPointError, match="divide"):
            jitops.divide(np.ones(2), 0.0, act="relu")  # relu keeps the op's divide flag


@pytest.mark.parametrize("n", [5, 10**5])
def test_flags_left_by_an_earlier_call_are_not_reported_again(n):
    """The flags are sticky: a call that raised some under "ignore" leaves them set in the
    CPU, and the next call, which raises none, must report none."""
    x = np.ones(n)
    with np.errstate(all="ignore"):
        jitops.divide(x, 0.0)
        jitops.multiply(np.full(n, 1e308), 10.0)
        jitops.subtract(np.full(n, np.inf), np.inf)
    with np.errstate(all="raise"):
        jitops.add(x, x)
        jitops.elementwise(lambda a, b: a * b)(x, x)


def test_numbas_parallel_drivers_report_flags_too():
    """With jitops' pool off, parallel jobs run on Numba's threading layer (the prange
    drivers): their tasks' flags reach the caller too, and a clean call reports none."""
    import subprocess
    import sys

    code = """
import numpy as np, jitops
x = np.ones(10**6)
with np.errstate(all="raise"):
    jitops.add(x, x)
    for f in (lambda: jitops.divide(x, 0.0),
              lambda: jitops.elementwise(lambda a, b: a / b)(x, 0.0)):
        try:
            f()
            print("missed")
        except FloatingPointError as e:
            print(e)
    jitops.add(x, x)
print("done")
"""
    env = {**__import__("os").environ, "JITOPS_POOL": "0"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[:3] == ["divide by zero encountered in divide",
                                        "divide by zero encountered in <lambda>", "done"]
