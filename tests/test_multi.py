"""User ops with several results, and results reduced in the same pass (jitops.reduce,
``@jitops.elementwise(reduce=...)``), and jitops.divmod: against NumPy's own answers."""

from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest

import jitops

HOWS = ["sum", "prod", "max", "min", "any", "all", "mean"]


def ident(v):
    return v


def times(a, b):
    return a * b


def sq_diff(a, b):
    d = a - b
    return d * d


def quot_rem(a, b):
    return a // b, a % b


def _data(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.7
    v = rng.standard_normal(shape) * 3
    if np.dtype(dtype).kind in "iu":
        v = np.abs(v) + 1 if np.dtype(dtype).kind == "u" else v
        return v.astype(dtype)
    if np.dtype(dtype).kind == "c":
        return (v + 1j * rng.standard_normal(shape)).astype(dtype)
    return v.astype(dtype)


def _check(got, want, dtype_of_values):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:  # ours sums in float64 and rounds once: within NumPy's own rounding error
        rtol = {"float16": 2e-3, "float32": 2e-5, "complex64": 2e-5}.get(
            np.dtype(dtype_of_values).name, 1e-12)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


# (complex max/min are refused: test_bad_reductions_are_refused)
@pytest.mark.parametrize("how,dtype", [
    (h, d) for h in HOWS for d in ["bool", "int8", "int32", "uint16", "int64", "float16",
                                   "float32", "float64", "complex64"]
    if not (d == "complex64" and h in ("max", "min"))])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (0, 1, 2)])
def test_reductions_give_numpys_dtypes_and_values(how, dtype, axis):
    x = _data(dtype, (3, 4, 5))
    if how == "prod" and dtype not in ("bool", "int8", "int32", "uint16", "int64"):
        x = (x / 3 + 1).astype(dtype) if dtype != "bool" else x  # products in range
    got = jitops.reduce(ident, how, axis=axis)(x)
    with np.errstate(all="ignore"):
        want = getattr(np, how)(x, axis=axis)
    _check(got, want, dtype)
    got_k = jitops.reduce(ident, how, axis=axis, keepdims=True)(x)
    assert np.asarray(got_k).shape == np.asarray(getattr(np, how)(x, axis=axis,
                                                                    keepdims=True)).shape


@pytest.mark.parametrize("how", HOWS)
def test_a_two_input_map_reduced_with_broadcasting(how):
    a = _data("float64", (6, 1, 5), 1)
    b = _data("float64", (7, 1), 2)
    got = jitops.reduce(times, how, axis=(0, 2))(a, b)
    want = getattr(np, how)(a * b, axis=(0, 2))
    _check(got, want, "float64")
    # Paddle's axis rule: b laid onto a at axis 1
    a2, b2 = _data("float32", (4, 6, 5), 3), _data("float32", (6,), 4)
    got = jitops.reduce(times, how, axis=1)(a2, b2, broadcast="pdpd", axis=1)
    want = getattr(np, how)(a2 * b2[:, None], axis=1)
    _check(got, want, "float32")


def test_nan_rules_are_numpys():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]])
    for how in ("max", "min", "sum", "prod", "mean"):
        np.testing.assert_array_equal(jitops.reduce(ident, how, axis=1)(x),
                                      getattr(np, how)(x, axis=1))
        assert np.isnan(jitops.reduce(ident, how)(x))
    assert jitops.reduce(ident, "any")(np.array([0.0, np.nan]))
    assert not jitops.reduce(ident, "all")(np.array([0.0, np.nan]))


def test_empty_reductions():
    e = np.zeros((0, 3))
    np.testing.assert_array_equal(jitops.reduce(ident, "sum", axis=0)(e), np.zeros(3))
    np.testing.assert_array_equal(jitops.reduce(ident, "prod", axis=0)(e), np.ones(3))
    assert jitops.reduce(ident, "all")(e) and not jitops.reduce(ident, "any")(e)
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        jitops.reduce(ident, "max")(e)
    assert jitops.reduce(ident, "sum", axis=1)(e).shape == (0,)


@pytest.mark.parametrize("shape,axis", [((3, 0), 1), ((0,), None), ((0, 0), 0), ((0, 3), 1)])
@pytest.mark.parametrize("dtype", ["float32", "int16", "complex128"])
def test_mean_of_nothing_warns_as_numpy(shape, axis, dtype):
    """NumPy's "Mean of empty slice" where a mean covers no element, then its 0/0's
    *invalid* under np.errstate; neither where every mean covers some."""
    e = np.zeros(shape, dtype)

    def caught(fn):
        import warnings

        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = fn()
        return r, sorted(str(x.message) for x in w)

    want, want_w = caught(lambda: e.mean(axis=axis))
    got, got_w = caught(lambda: jitops.reduce(ident, "mean", axis=axis)(e))
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert got_w == want_w
    if want_w and np.asarray(want).size:
        with np.errstate(invalid="raise"), pytest.warns(RuntimeWarning, match="Mean of empty"):
            with pytest.raises(FloatingPointError):
                jitops.reduce(ident, "mean", axis=axis)(e)


def test_full_reductions_are_numpy_scalars_and_fused_sum_is_accurate():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(100_003).astype(np.float32)
    b = rng.standard_normal(100_003).astype(np.float32)
    got = jitops.reduce(sq_diff)(a, b)
    assert type(got) is np.float32
    exact = math.fsum(((a.astype(np.float64) - b) ** 2).tolist())
    # the op subtracts and squares in float32, as NumPy; only the sum is wide
    ref = np.float32(math.fsum(((a - b) * (a - b)).astype(np.float64).tolist()))
    assert abs(float(got) - float(ref)) <= 2 * float(np.spacing(ref))
    assert abs(float(got) - exact) <= 1e-5 * exact


def test_sums_do_not_depend_on_the_thread_count():
    x = np.random.default_rng(6).standard_normal((50, 40_000))
    op = jitops.reduce(sq_diff, "sum", axis=None)
    op_rows = jitops.reduce(sq_diff, ("sum",), axis=1)
    results = []
    for n in (1, 2, 3):
        with jitops.threads(n):
            results.append((op(x, 0.5), op_rows(x, 0.5)))
    for r in results[1:]:
        assert r[0] == results[0][0] and r[1].tobytes() == results[0][1].tobytes()


def test_bad_reductions_are_refused():
    with pytest.raises(ValueError, match="unknown reduction 'median'"):
        jitops.reduce(ident, "median")
    with pytest.raises(TypeError, match="axis= and keepdims= apply only with reduce="):
        jitops.elementwise(ident, axis=0)
    with pytest.raises(np.exceptions.AxisError):
        jitops.reduce(ident, "sum", axis=3)(np.ones((2, 2)))
    with pytest.raises(ValueError, match="duplicate"):
        jitops.reduce(ident, "sum", axis=(0, -2))(np.ones((2, 2)))
    with pytest.raises(ValueError, match="2 entries for a function of 1 results"):
        jitops.reduce(ident, ("sum", None))(np.ones(3))
    with pytest.raises(TypeError, match="complex"):
        jitops.reduce(ident, "max")(np.ones(3, np.complex128))


def test_masks_and_labels_are_refused_not_dropped():
    """A reduced or several-result user op refuses a masked array and a pandas object
    (TypeError) instead of computing on the bare values: NumPy's masked sum leaves masked
    values out, and two Series would be aligned by their labels first."""
    import pandas as pd

    masked = np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    with pytest.raises(TypeError, match=r"operand 0 is a numpy.ma.MaskedArray"):
        jitops.reduce(ident, "sum")(masked)
    with pytest.raises(TypeError, match=r"y is a pandas.Series, which decides ufuncs itself"):
        jitops.reduce(times, "sum")(np.ones(2), pd.Series([1.0, 2.0], index=[1, 0]))
    with pytest.raises(TypeError, match=r"x is a numpy.ma.MaskedArray"):
        jitops.elementwise(quot_rem)(masked, np.ones(3))
    assert jitops.reduce(times, "sum")([1.0, 2.0], 3.0) == 9.0


def test_outs_that_share_memory_are_refused_interleaved_ones_taken():
    """Two results written into overlapping arrays: which one an element keeps is defined
    nowhere (NumPy's answer depends on its buffering), so it is refused before anything is
    written; views that interleave without sharing an element are fine; a masked out=
    is refused as a masked input is."""
    x, y = np.arange(-10.0, 10.0), np.full(20, 3.0)
    f = jitops.elementwise(quot_rem)
    for outs in (lambda b: (b, b), lambda b: (b[::-1], b), lambda b: (b[:15], b[5:])):
        b = np.zeros(20)
        o = outs(b)
        n = o[0].size
        with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] share memory"):
            f(x[:n], y[:n], out=o)
        assert not b.any()
    with pytest.raises(ValueError, match=r"share memory"):
        jitops.divmod(x, y, out=(x, x))
    b = np.zeros(20)
    q, r = f(x[:10], y[:10], out=(b[::2], b[1::2]))
    np.testing.assert_array_equal(b[::2], x[:10] // 3)
    np.testing.assert_array_equal(b[1::2], x[:10] % 3)
    with pytest.raises(TypeError, match=r"out\[1\] is a numpy.ma.MaskedArray"):
        f(x, y, out=(None, np.ma.zeros(20)))


def test_a_repeat_settles_by_dtypes_and_scalar_types_not_values():
    """A call's settling (dtypes, frames) is remembered by the operands' dtypes, a weak
    scalar's Python type and the shapes: calls alternating those get NumPy's dtypes each
    time, and a value out of range still raises NumPy's OverflowError."""
    f = jitops.elementwise(lambda a, b: (a + b, a * b))
    x = np.arange(-3, 3, dtype=np.int8)
    for y in (3, 3.5, np.float32(3.5), True, 2j, np.int64(3), 3, x.astype(np.float16), 3.5):
        got = f(x, y)
        want = (np.add(x, y), np.multiply(x, y))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, (y, g.dtype, w.dtype)
            np.testing.assert_array_equal(g, w)
    with pytest.raises(OverflowError, match="300 out of bounds for int8"):
        f(x, 300)
    assert f(x, 3)[0].dtype == np.int8


def test_several_results_each_with_its_dtype_and_out():
    a = np.arange(-6, 7, dtype=np.int16)
    q, r = jitops.elementwise(quot_rem)(a, np.int16(4))
    wq, wr = np.divmod(a, np.int16(4))
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_array_equal(r, wr)
    assert q.dtype == r.dtype == np.int16
    both = jitops.elementwise(lambda x: (x * 2, x > 0))(np.arange(-2.0, 3.0))
    assert both[0].dtype == np.float64 and both[1].dtype == np.bool_
    oq = np.empty_like(a)
    got = jitops.elementwise(quot_rem)(a, np.int16(4), out=(oq, None))
    assert got[0] is oq and np.array_equal(oq, wq) and np.array_equal(got[1], wr)
    with pytest.raises(TypeError, match=r"out\[0\] has dtype float32"):
        jitops.elementwise(quot_rem)(a, np.int16(4), out=(np.empty(13, np.float32), None))
    with pytest.raises(ValueError, match="out= has 1 entries for 2 results"):
        jitops.elementwise(quot_rem)(a, np.int16(4), out=(oq,))
    mixed = jitops.elementwise(quot_rem, reduce=(None, "sum"))(a, 4)
    np.testing.assert_array_equal(mixed[0], wq)
    assert mixed[1] == wr.sum() and mixed[1].dtype == np.int64


DIVMOD_DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16",
                 "float32", "float64"]


@pytest.mark.parametrize("dtype", DIVMOD_DTYPES)
def test_divmod_is_numpys_with_its_warnings(dtype):
    x = np.array([7, -7, 0, 5, 3, -128, 100, 6, -0.0, 1e30], np.float64)
    y = np.array([2, 2, -2, 0, 0, -1, 3, -3, 5, 7], np.float64)
    if dtype == "bool":
        x, y = x != 0, y != 0
    else:
        with np.errstate(all="ignore"):
            x, y = x.astype(dtype), y.astype(dtype)
    with warnings.catch_warnings(record=True) as want_w:
        warnings.simplefilter("always")
        want = np.divmod(x, y)
    with warnings.catch_warnings(record=True) as got_w:
        warnings.simplefilter("always")
        got = jitops.divmod(x, y)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
        assert (np.signbit(g) == np.signbit(w)).all() if w.dtype.kind == "f" else True
    assert sorted(str(m.message) for m in got_w) == sorted(str(m.message) for m in want_w)


def test_divmod_scalars_broadcast_and_refusals():
    q, r = jitops.divmod(np.arange(6).reshape(2, 3), 4)
    np.testing.assert_array_equal(q, np.arange(6).reshape(2, 3) // 4)
    assert jitops.divmod(7, 2) == (3, 1)
    q, r = jitops.divmod(np.ones((2, 3, 4)), np.full(3, 2.0), broadcast="pdpd", axis=1)
    assert q.shape == (2, 3, 4)
    with pytest.raises(TypeError):
        jitops.divmod(np.ones(2, np.complex64), 1.0)


def test_framework_tensors_and_pickling():
    torch = pytest.importorskip("torch")
    s = jitops.reduce(times, "sum", axis=0)(torch.ones((3, 2)), torch.full((2,), 2.0))
    assert isinstance(s, torch.Tensor) and s.tolist() == [6.0, 6.0]
    op = pickle.loads(pickle.dumps(jitops.reduce(sq_diff, "mean", axis=1)))
    np.testing.assert_allclose(op(np.ones((2, 3)), 0.0), [1.0, 1.0])
    assert op.reduce == "mean" and op.axes == 1


@pytest.mark.parametrize("how", HOWS)
def test_dask_reduces_per_chunk_then_by_its_tree(how):
    """Dask operands: each block's partial (float64 sums) by jitops, combined by Dask's own
    tree reduction in one graph; the same answers as the NumPy call."""
    da = pytest.importorskip("dask.array")
    x = _data("float32", (50, 33), 8)
    y = _data("float32", (33,), 9)
    if how == "prod":  # products that stay finite
        x, y = 1 + x / 100, 1 + y / 100
    X = da.from_array(x, chunks=(16, 10))
    for axis in (None, 0, (1,)):
        op = jitops.reduce(times, how, axis=axis)
        lazy = op(X, y)
        assert isinstance(lazy, da.Array)
        got = lazy.compute()
        want = op(x, y)
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-6)


def test_dask_several_results_and_sum_to():
    da = pytest.importorskip("dask.array")
    a = da.from_array(np.arange(-20, 21, dtype=np.int32), chunks=9)
    q, r = jitops.elementwise(quot_rem)(a, np.int32(3))
    wq, wr = np.divmod(np.arange(-20, 21, dtype=np.int32), np.int32(3))
    np.testing.assert_array_equal(q.compute(), wq)
    np.testing.assert_array_equal(r.compute(), wr)
    q2, total = jitops.elementwise(quot_rem, reduce=(None, "sum"))(a, 3)
    assert total.compute() == wr.sum()
    g = _data("float64", (8, 6, 10), 10)
    G = da.from_array(g, chunks=(3, 4, 5))
    s = jitops.sum_to(G, (6,), broadcast="pdpd", axis=1)
    assert isinstance(s, da.Array) and s.dtype == g.dtype
    np.testing.assert_allclose(s.compute(), g.sum(axis=(0, 2)), rtol=1e-12)
    with pytest.raises(TypeError, match="out= is not supported with Dask"):
        jitops.elementwise(quot_rem)(a, 3, out=(None, None))


def test_any_layout_and_rank_and_the_limits():
    rng = np.random.default_rng(13)
    base = rng.standard_normal((7, 9, 11))
    views = [base[::-1], base[:, ::2], base.transpose(2, 0, 1), np.asfortranarray(base),
             base[..., 3:]]
    for v in views:
        for axis in (None, 0, (1, 2)):
            np.testing.assert_allclose(jitops.reduce(sq_diff, "sum", axis=axis)(v, 0.25),
                                       ((v - 0.25) ** 2).sum(axis=axis), rtol=1e-12)
            np.testing.assert_array_equal(jitops.reduce(ident, "max", axis=axis)(v),
                                          v.max(axis=axis))
    raw = np.zeros(8 * 10 + 1, np.uint8)[1:].view(np.float64)  # misaligned float64
    raw[:] = np.arange(10.0)
    assert jitops.reduce(ident, "sum")(raw) == 45.0
    high = rng.standard_normal((2,) * 10)
    np.testing.assert_allclose(jitops.reduce(ident, "sum", axis=(1, 3, 5, 9))(high),
                               high.sum(axis=(1, 3, 5, 9)), rtol=1e-12)
    many = jitops.elementwise(lambda a, b, c, d, e, f, g, h, i: a, reduce="sum")
    with pytest.raises(TypeError, match="at most 8 inputs"):
        many(*([np.ones(3)] * 9))
    five = jitops.elementwise(lambda a: (a, a, a, a, a))
    with pytest.raises(TypeError, match="at most 4 results"):
        five(np.ones(3))
    assert jitops.reduce(ident, "sum")(np.float32(2.5)) == 2.5  # a 0-d operand


def test_stored_results_are_written_into_out_in_place():
    """An ``out`` entry that is C-ordered, aligned and apart from the inputs is written by
    the pass itself (no temporary as large as the result); one overlapping an input is
    computed apart and copied, with the same values."""
    import tracemalloc

    a = np.random.default_rng(2).standard_normal(1_000_000)
    pair = jitops.elementwise(lambda x: (x * 2.0, x + 1.0), reduce=(None, "sum"))
    o = np.empty_like(a)
    pair(a, out=(o, None))  # compiled, warm
    tracemalloc.start()
    try:
        got, total = pair(a, out=(o, None))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got is o and peak < a.nbytes // 4, peak
    np.testing.assert_array_equal(o, a * 2.0)
    np.testing.assert_allclose(total, (a + 1.0).sum(), rtol=1e-12)
    b = a.copy()
    got, _ = pair(b, out=(b, None))  # out is the input: computed apart, then copied
    assert got is b
    np.testing.assert_array_equal(b, a * 2.0)
    o2 = np.empty((2, a.size))[:, ::2]  # not C-ordered
    pair(a[::2], out=(o2[0], None))
    np.testing.assert_array_equal(o2[0], a[::2] * 2.0)
