"""Several results, some reduced, on CUDA (jitops.cuda.reduce): sum_to, the gradients and
user ops with ``reduce=``, against the CPU's answers (themselves checked against NumPy,
Paddle and PyTorch in tests/test_reductions.py and tests/test_multi.py).

Run on a real GPU, or on Numba's CUDA simulator by tests/test_cuda_sim.py: small arrays,
few calls (the simulator runs each block's threads as Python threads). Sums are compared
within rounding (the GPU's order of addition is not the CPU's); everything else bit for bit.
"""

import math

import numpy as np
import pytest

import jitops
from jitops.core.device import cuda_unavailable_reason, is_cuda_array

if cuda_unavailable_reason() is not None:
    pytest.skip("neither a GPU nor the CUDA simulator is available", allow_module_level=True)

from numba import cuda  # noqa: E402

from jitops.cuda import kernels, repeat  # noqa: E402


@pytest.fixture(autouse=True)
def nothing_remembered():
    """Each test plans its own passes (a repeat would launch a pass remembered before)."""
    repeat.forget()
    yield
    repeat.forget()


def host(a):
    assert is_cuda_array(a), type(a)  # the result stays on the GPU
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def close(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind in "fc" and want.dtype != np.float16:
        eps = np.finfo(want.dtype).eps  # (terms of order 1-100: absolute slack for cancellation)
        np.testing.assert_allclose(got, want, rtol=4 * eps, atol=2e4 * eps)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape,to,mode,axis,dtype", [
    ((3, 5, 7), (5, 1), "numpy", -1, "float32"),
    ((4, 6), (), "numpy", -1, "float64"),
    ((2, 3, 4), (3,), "pdpd", 1, "int32"),
    ((3, 40), (40,), "numpy", -1, "float16"),
    ((2, 3), (2, 3), "numpy", -1, "uint8"),  # nothing summed: a copy
])
def test_sum_to_matches_the_cpu(shape, to, mode, axis, dtype, rng):
    g = (rng.standard_normal(shape) * 50).astype(dtype)
    got = jitops.sum_to(cuda.to_device(g), to, broadcast=mode, axis=axis)
    close(host(got), jitops.sum_to(g, to, broadcast=mode, axis=axis))


@pytest.mark.parametrize("op,dtype", [("add", "float32"), ("sub", "float64"),
                                      ("mul", "float32"), ("div", "float64"),
                                      ("max", "float32"), ("min", "float64"),
                                      ("fmax", "float32"), ("fmin", "float64"),
                                      ("pow", "float64")])
def test_gradients_match_the_cpu(op, dtype, rng):
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    y = rng.standard_normal(4).astype(dtype)
    if op == "pow":
        x = np.abs(x) + 0.5
    if op in ("max", "min", "fmax", "fmin"):
        x[0, 1, 2], x[1, 2, 3], x[2, 0, 0] = y[1], np.nan, np.nan  # a tie and NaNs
    dout = rng.standard_normal((3, 4, 5)).astype(dtype)
    fn = getattr(jitops, f"elementwise_{op}_grad")
    dx, dy = fn(cuda.to_device(x), cuda.to_device(y), cuda.to_device(dout), axis=1)
    cx, cy = fn(x, y, dout, axis=1)
    close(host(dx), cx)
    close(host(dy), cy)
    if op == "max":  # PyTorch's rule at NaN, and the numpy broadcast (x the smaller operand)
        dx, dy = fn(cuda.to_device(y[:, None]), cuda.to_device(x), cuda.to_device(dout),
                    broadcast="numpy", ties="torch")
        cx, cy = fn(y[:, None], x, dout, broadcast="numpy", ties="torch")
        close(host(dx), cx)
        close(host(dy), cy)


@pytest.mark.parametrize("how,dtype,axis", [
    ("sum", "int32", 1), ("prod", "float64", 0), ("max", "float32", None),
    ("min", "int16", 1), ("any", "float64", None), ("all", "int8", 0),
    ("mean", "int64", (0, 1)), ("mean", "float32", 1), ("sum", "bool", None),
])
def test_user_reductions_match_the_cpu(how, dtype, axis, rng):
    a = (rng.standard_normal((6, 9)) * 3).astype(dtype)
    if dtype == "float64":
        a[2, 3] = 0.0
    op = jitops.elementwise(lambda v: v, reduce=how, axis=axis)
    close(np.asarray(host(op(cuda.to_device(a)))), np.asarray(op(a)))


def test_several_results_stored_and_reduced_with_keepdims_and_a_weak_scalar(rng):
    a = rng.standard_normal((4, 30)).astype(np.float32)
    b = rng.standard_normal(30).astype(np.float32)

    @jitops.elementwise(reduce=(None, "sum", "max"), axis=1, keepdims=True)
    def three(x, y, s):
        d = x - y
        return d * s, d * d, d

    got = three(cuda.to_device(a), cuda.to_device(b), 2.0)
    want = three(a, b, 2.0)
    assert len(got) == 3
    for g, w in zip(got, want):
        close(host(g), w)


def test_max_propagates_nan_and_empty_reductions(rng):
    a = rng.standard_normal((5, 40))
    a[3, 17] = np.nan
    mx = jitops.elementwise(lambda v: v, reduce="max", axis=1)
    got = host(mx(cuda.to_device(a)))
    assert np.isnan(got[3]) and not np.isnan(np.delete(got, 3)).any()
    close(got, mx(a))
    e = np.zeros((3, 0))
    s = jitops.elementwise(lambda v: v, reduce="sum", axis=1)
    m = jitops.elementwise(lambda v: v, reduce="mean", axis=1)
    close(host(s(cuda.to_device(e))), np.zeros(3))
    assert np.isnan(host(m(cuda.to_device(e)))).all()


def test_long_sums_are_fixed_trees_within_the_pairwise_bound():
    """Rows longer than a block's chunk take several launches (partials of partials); the
    answer is the same every run and within the pairwise bound of math.fsum's."""
    n = kernels.REDUCE_CHUNK * 10 + 3
    rng = np.random.default_rng(n)
    g = rng.choice([1e16, -1e16, 1e-3, 3.0, -7.5e8], n) * (1 + rng.random(n))
    d = cuda.to_device(g)
    first = host(jitops.sum_to(d, ()))
    again = host(jitops.sum_to(d, ()))
    assert first.tobytes() == again.tobytes()
    bound = (math.log2(n) + 64) * np.finfo(np.float64).eps * np.abs(g).sum()
    assert abs(float(first) - math.fsum(g.tolist())) <= bound


def test_refusals_come_before_anything_runs(rng):
    a = rng.standard_normal((2, 3))
    da = cuda.to_device(a)
    op = jitops.elementwise(lambda v: v, reduce="sum")
    with pytest.raises(TypeError, match="out\\[0\\]\\): out must be a CUDA array"):
        op(da, out=np.zeros(()))
    with pytest.raises(TypeError, match="out\\[0\\]\\): out has dtype float32"):
        op(da, out=cuda.device_array((), np.float32))
    with pytest.raises(ValueError, match="out\\[0\\]\\): out has shape"):
        op(da, out=cuda.device_array((2,), np.float64))
    with pytest.raises(TypeError, match="gradients are computed for float16, float32"):
        jitops.elementwise_add_grad(cuda.to_device(np.ones(3, np.int32)), da, da)
    with pytest.raises(TypeError, match="pass all three on the GPU"):
        jitops.elementwise_add_grad(a, da, da)
    with pytest.raises(ValueError, match="does not broadcast"):
        jitops.sum_to(da, (4,))


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_divmod_is_one_call_of_two_results_on_the_gpu(dtype, rng):
    x = (rng.standard_normal(40) * 20).astype(dtype)
    y = (rng.standard_normal(40) * 5).astype(dtype)
    y[y == 0] = 3
    q, r = jitops.divmod(cuda.to_device(x), cuda.to_device(y))
    cq, cr = jitops.divmod(x, y)
    assert host(q).tobytes() == cq.tobytes() and host(r).tobytes() == cr.tobytes()


def test_device_views_with_negative_and_gapped_strides():
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    d = cuda.to_device(a)[:, ::-1, ::2]
    v = a[:, ::-1, ::2]
    close(host(jitops.sum_to(d, (3, 1))), jitops.sum_to(v, (3, 1)))
    dx, dy = jitops.elementwise_mul_grad(d, cuda.to_device(np.ones(3)), d, axis=1)
    cx, cy = jitops.elementwise_mul_grad(v, np.ones(3), v, axis=1)
    close(host(dx), cx)
    close(host(dy), cy)


def test_complex_sums_products_and_means(rng):
    a = (rng.standard_normal((4, 30)) + 1j * rng.standard_normal((4, 30))).astype(np.complex64)
    for how in ("sum", "prod", "mean"):
        op = jitops.elementwise(lambda v: v * v, reduce=how, axis=1)
        close(host(op(cuda.to_device(a))), op(a))
    m = jitops.elementwise(lambda v: v, reduce="mean", axis=1)
    assert np.isnan(host(m(cuda.to_device(np.zeros((2, 0), np.complex128))))).all()


def test_out_entries_are_written(rng):
    a = rng.standard_normal((3, 40))
    pair = jitops.elementwise(lambda v: (v * 2.0, v + 1.0), reduce=(None, "sum"), axis=1)
    o0, o1 = cuda.device_array((3, 40)), cuda.device_array(3)
    da = cuda.device_array_like(a)
    da.copy_to_device(a)
    r0, r1 = pair(da, out=(o0, o1))
    assert r0 is o0 and r1 is o1
    w0, w1 = pair(a)
    close(host(o0), w0)
    close(host(o1), w1)
    r0, r1 = pair(da, out=(da, None))  # out is the operand: computed apart, then copied
    assert r0 is da
    close(host(da), w0)
    two = jitops.elementwise(lambda v: (v * 2.0, v + 1.0))
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] share memory"):
        two(da, out=(o0, o0))  # which result an element keeps would not be defined


def test_magic_and_int64_indexing_agree(monkeypatch, rng):
    """Below 2**31 elements the reduction's dimensions go to the kernel as magic words
    (a division is a multiply-high); past it, or with an empty dimension, as int64: both
    give the same bits."""
    from jitops.cuda import reduce as on_gpu

    assert all(isinstance(w, np.uint64) for w in on_gpu.shape_words((4, 5), 20))
    assert on_gpu.shape_words((2**16, 2**16), 2**32) == (2**16, 2**16)
    assert on_gpu.shape_words((3, 0), 0) == (3, 0)
    d = cuda.to_device(rng.standard_normal((3, 7, 50)))
    packed = host(jitops.sum_to(d, (7, 1)))
    monkeypatch.setattr(on_gpu, "shape_words", lambda shape, total: tuple(map(int, shape)))
    repeat.forget()  # planned again, with int64 dimensions
    assert host(jitops.sum_to(d, (7, 1))).tobytes() == packed.tobytes()


@pytest.mark.parametrize("key", ["sum_to_channels", "sq_diff_sum"])
def test_the_cuda_benchmark_reduction_rows_run(key, monkeypatch):
    """The CUDA benchmark's reduction rows, shrunk, with the timer replaced by one call: each
    contender runs and the row has the table's fields (its times come from a GPU only)."""
    from jitops.bench import cuda_bench

    calls = []
    monkeypatch.setattr(cuda_bench, "_time", lambda fn, rounds, queued=0: (
        calls.append(fn()), 1e-3)[1])
    title = dict(cuda_bench.REDUCE_CASES)[key]
    row = cuda_bench.reduction_row(key, title, {}, 1, 1e12, shrink=10_000)
    assert row["median_s"]["jitops"] == 1e-3 and row["fraction_of_peak"] > 0
    assert len(calls) == 2 and all(is_cuda_array(c) for c in calls)
