"""``power`` with one exponent value throughout: NumPy's fast path (jitops.core.catalog
.power_one_exponent) where the installed NumPy has it -- ``sqrt`` for 0.5 (so ``(-0.0) ** 0.5``
is -0.0 and ``(-inf) ** 0.5`` NaN), ``1 / x``, 1, ``x``, ``x * x`` -- and C's ``pow`` where it
does not (NumPy 2.0, the floor): every answer, sign and flag is the installed NumPy's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitops
from jitops.core import catalog

SPECIALS = [-0.0, 0.0, -np.inf, np.inf, np.nan, -2.0, 3.0, 1.5, 1e-30, 1e30, -1e-45, 1e300]
EXPONENTS = [-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, np.nan]
#: shapes of base and exponent where the exponent has one element (broadcast or not), and
#: where it has the result's shape
SHAPES = [((), ()), ((), (1,)), ((1,), ()), ((1,), (1,)), ((1,), (1, 1)), ((3,), ()),
          ((3,), (1,)), ((3,), (3,)), ((2, 3), (1, 1)), ((2, 3), (2, 3)), ((2, 1), (1,)),
          ((1, 1), (1, 1, 1))]


def _same(ours, theirs, dtype) -> bool:
    """Bit for bit, but for NumPy's SIMD ``pow`` (1 ulp off the rounded value at times)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.tobytes() == theirs.tobytes():
        return True
    word = np.int32 if dtype == np.float32 else np.int64
    finite = np.isfinite(theirs) & (theirs != 0) & np.isfinite(ours) & (ours != 0)
    ulps = np.abs(ours.view(word).astype(np.int64) - theirs.view(word))
    return bool((ulps[finite] <= 1).all()) and ours[~finite].tobytes() == theirs[~finite].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("e", EXPONENTS)
def test_every_special_base_and_shape_as_numpy(dtype, e):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for xs, ys in SHAPES:
            for v in SPECIALS:
                x, y = np.full(xs, v, dtype), np.full(ys, e, dtype)
                got, want = jitops.power(x, y), np.power(x, y)
                assert _same(got, want, dtype), (xs, ys, v, e, got, want)
            for v in SPECIALS:  # a Python, a NumPy and a 0-d exponent
                x = np.full(5, v, dtype)
                for y in (e, dtype(e), np.array(e, dtype)):
                    assert _same(jitops.power(x, y), np.power(x, y), dtype), (v, y)


def test_the_fast_path_is_numpys_own_where_it_has_one():
    """The probe reads the installed NumPy: sqrt's -0.0 for ``(-0.0) ** 0.5`` or pow's +0.0."""
    with np.errstate(invalid="ignore"):  # sqrt(-inf)
        r = jitops.power(np.float32([-0.0, -np.inf]), 0.5)
        want = np.power(np.float32([-0.0, -np.inf]), 0.5)
    if catalog.NUMPY_POWER_FAST_PATH:
        assert np.signbit(r[0]) and np.isnan(r[1])
    else:
        assert not np.signbit(r[0]) and r[1] == np.inf
    assert r.tobytes() == want.tobytes()


@pytest.mark.parametrize("e", [-1.0, 0.0, 0.5, 1.0, 2.0, 3.0])
def test_the_flags_are_numpys(e):
    """Each exponent raises its own operation's flags only, whatever the loop: contiguous,
    strided, reversed or transposed bases, the exponent a Python float, a 0-d or a (1, 1)
    array. (LLVM computes an operation whose result is picked only where its select chose
    the base on the base in every lane: on an Intel CPU ``1 / x`` raised *divide* for
    ``(-0.0) ** 0.5`` until the pick was made by ranges of the exponent.)"""
    def caught(f):
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            with np.errstate(all="warn"):
                r = f()
        return r, sorted(str(m.message).split(" encountered")[0] for m in ws)

    for dtype in (np.float32, np.float64):
        for v in SPECIALS:
            with np.errstate(over="ignore"):  # 1e300 as float32: inf
                x = np.array([v, 1.5] * 6, dtype)
            views = (x[:2], x[::2], x[::-1], x.reshape(3, 4).T, x.reshape(4, 3)[:, ::2])
            for xv, y in zip(views, (e, np.array(e, dtype), dtype(e), np.full((1, 1), e, dtype),
                                     e)):
                (got, ours), (want, theirs) = caught(lambda: jitops.power(xv, y)), \
                    caught(lambda: np.power(xv, y))
                assert ours == theirs and _same(got, want, dtype), (v, e, xv.strides, ours,
                                                                     theirs)


def test_repeats_and_shape_classes_keep_each_calls_own_rule():
    """A remembered launch or a shape class (which generalises over sizes) never carries one
    call's rule to another: a row class of ``power`` is not made, since a row of one element
    is NumPy's fast path and a longer one not."""
    z = lambda s: np.full(s, -0.0, np.float32)  # noqa: E731
    h = lambda s: np.full(s, 0.5, np.float32)  # noqa: E731
    seq = [((3, 4), (4,)), ((3, 1), (1,)), ((5,), (5,)), ((1,), (1,)), ((7,), (1,)),
           ((2, 3), ()), ((1,), ()), ((), (1,)), ((6, 1), (1,))]
    for order in (seq, seq[::-1]):
        for _ in range(3):
            for xs, ys in order:
                x, y = z(xs), h(ys)
                want = np.asarray(np.power(x, y)).tobytes()
                for _twice in range(2):
                    assert np.asarray(jitops.power(x, y)).tobytes() == want, (xs, ys)
                out = np.empty(np.broadcast_shapes(xs, ys), np.float32)
                jitops.power(x, y, out=out)
                assert out.tobytes() == want, (xs, ys)
                assert jitops.power(x, 0.5).tobytes() == np.power(x, 0.5).tobytes()


def test_a_column_of_exponents_runs_pow():
    """Several exponents constant along the inner loop: NumPy's fast path or not by its
    buffering (a (3, 1000) base not, a (2, 20000) one yes); jitops runs ``pow`` there."""
    for rows, cols in ((3, 1000), (2, 20000)):
        x = np.full((rows, cols), -0.0, np.float32)
        r = jitops.power(x, np.full((rows, 1), 0.5, np.float32))
        assert not np.signbit(r).any()


def test_other_loops_and_names_keep_pow():
    """float16 (NumPy's loop has no fast path), ``float_power`` (a generic loop) and
    Paddle's and OpenVINO's power keep ``pow``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x16 = np.float16([-0.0, -np.inf])
        assert jitops.power(x16, 0.5).tobytes() == np.power(x16, 0.5).tobytes()
        x = np.float32([-0.0, -np.inf])
        assert jitops.float_power(x, 0.5).tobytes() == np.float_power(x, 0.5).tobytes()
        for r in (jitops.elementwise_pow(x, np.float32(0.5)),
                  jitops.openvino.Power(x, np.float32(0.5))):
            assert not np.signbit(r[0]) and r[1] == np.inf


def test_the_one_exponent_loop_vectorises_and_never_streams(monkeypatch):
    """The shortcut that makes ``x ** 2`` fast: LLVM splits the task's plain loop by the
    exponent, so its square, root and reciprocal run on vectors (a task compiled afresh,
    uncached: one loaded from the disk cache carries no assembly text); the streamed loop it
    does not split (``pow`` in every lane: 23 ms for 2), so this entry never streams."""
    import re

    from jitops.core import config
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels import binary as kernels
    from jitops.cpu.kernels.spec import KernelSpec

    dt = np.dtype(np.float32)
    spec = KernelSpec("power_float_one_exponent", None, dt, dt, dt, dt)
    task = inner(kernels._task.py_func)
    sig = (spec.numba_type,) + (kernels._I64,) * 5
    task.compile(sig)
    asm = task.inspect_asm(sig)
    vector = set(re.findall(r"\bv(mulps|sqrtps|divps)\s+%[yz]mm", asm))
    assert vector == {"mulps", "sqrtps", "divps"}, vector
    assert "powf" in asm  # the other exponents' call, kept

    from jitops import dispatch

    monkeypatch.setattr(config, "STREAM_BYTES", 1)  # every output streams where it may
    dispatch.clear()  # no launch remembered from before
    try:
        x = np.full(1 << 12, 1.5, dt)
        for y in (2.0, np.float32(2.0), np.full(1 << 12, 2.0, dt)):
            jitops.power(x, y)
    finally:
        dispatch.clear()  # nor one remembered here, streamed, after
    ops = {(s.op, s.stream) for s in kernels._TASKS if s.x == "float32" and "power" in s.op}
    assert ("power_float32", True) in ops and ("power_float_one_exponent", True) not in ops, ops
    # (NumPy without the fast path: every call is pow's)
    assert (("power_float_one_exponent", False) in ops) == catalog.NUMPY_POWER_FAST_PATH, ops
