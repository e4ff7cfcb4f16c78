"""sum_to and the broadcast ops' gradients: against NumPy, Paddle's and PyTorch's autograd.

Paddle 3.3.1's own backward is the oracle for ``broadcast="pdpd"`` (its legacy
``elementwise_*`` ops with ``axis``, differentiated by ``paddle.grad``); PyTorch's autograd
for ``broadcast="numpy"``. Sums are compared against float64 (``math.fsum``) bounds, and
must be the same bits on every thread count.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import jitops
from jitops.core import grads
from jitops.core.plan import align_all

_ENV = dict(os.environ)
paddle = pytest.importorskip("paddle")
# importing Paddle sets OMP_NUM_THREADS=1 in os.environ, which every later subprocess of
# this test process would inherit (the fork and OpenMP tests count threads): put it back
os.environ.clear()
os.environ.update(_ENV)
torch = pytest.importorskip("torch")

OPS = grads.OPS
_PADDLE_NAME = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "max": "max",
                "min": "min", "fmax": "fmax", "fmin": "fmin", "pow": "pow"}
_TORCH_FN = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
             "max": torch.maximum, "min": torch.minimum, "fmax": torch.fmax,
             "fmin": torch.fmin, "pow": torch.pow}


def _grad_fn(op):
    return getattr(jitops, f"elementwise_{op}_grad")


def _values(rng, shape, op, dtype=np.float32):
    v = rng.standard_normal(shape).astype(dtype)
    if op == "pow":  # a positive base: log(x) and x ** (y - 1) are real
        v = (np.abs(v) + 0.5).astype(dtype)
    if op == "div":
        v = np.where(np.abs(v) < 0.1, 1.0, v).astype(dtype)
    return v


def paddle_grads(op, x, y, dout, axis):
    """Paddle's autograd through its legacy op with ``axis``. Paddle's max/min/fmax/fmin/pow
    backward ignores ``axis`` (a mid-axis y raises there); for those y is first laid onto
    its frame (and x, where it is the smaller), which is the same math."""
    xx, yy = x, y
    if op in ("max", "min", "fmax", "fmin", "pow") and x.ndim != y.ndim:
        _, (fx, fy) = align_all((x.shape, y.shape), "pdpd", axis)
        xx, yy, axis = x.reshape(fx), y.reshape(fy), -1
    px = paddle.to_tensor(xx, stop_gradient=False)
    py = paddle.to_tensor(yy, stop_gradient=False)
    out = getattr(paddle._legacy_C_ops, f"elementwise_{_PADDLE_NAME[op]}")(
        px, py, "axis", axis)
    gx, gy = paddle.grad([out], [px, py], [paddle.to_tensor(dout)])
    return gx.numpy().reshape(x.shape), gy.numpy().reshape(y.shape)


def torch_grads(op, x, y, dout):
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.tensor(y, requires_grad=True)
    out = _TORCH_FN[op](tx, ty)
    out.backward(torch.tensor(dout))
    return tx.grad.numpy(), ty.grad.numpy()


def _close(ours, theirs, dout_abs_sum):
    """Equal within float32 summation error: Paddle and PyTorch sum in float32 (in their own
    orders), jitops in float64 rounded once."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    tol = 1e-6 * (dout_abs_sum + 1.0) + 1e-6 * np.abs(theirs)
    np.testing.assert_array_less(np.abs(ours.astype(np.float64) - theirs), tol + 1e-30)


# x shape, y shape, axis: pdpd cases, x the smaller operand too (Paddle PR #30818)
PDPD_CASES = [
    ((2, 3, 4, 5), (3, 4), 1), ((2, 3, 4, 5), (3,), 1), ((2, 3, 4, 5), (5,), -1),
    ((2, 3, 4, 5), (2, 3), 0), ((6, 7), (6, 7), -1), ((2, 3, 4), (3, 1), 1),
    ((3, 4), (2, 3, 4, 5), 1), ((5,), (4, 5), -1), ((64, 9, 31), (9,), 1),
    ((33, 70, 5), (1, 70, 1), -1), ((2, 1, 4), (2, 3, 4), -1),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", range(len(PDPD_CASES)))
def test_grads_match_paddle_autograd(op, case):
    xs, ys, axis = PDPD_CASES[case]
    rng = np.random.default_rng(hash((op, case)) % 2**32)
    x, y = _values(rng, xs, op), _values(rng, ys, op)
    if op in ("max", "min", "fmax", "fmin"):  # some ties
        x.flat[::3] = 0.5
        y.flat[::2] = 0.5
    space = jitops.result_shape(xs, ys, "pdpd", axis)
    dout = rng.standard_normal(space).astype(np.float32)
    dx, dy = _grad_fn(op)(x, y, dout, axis=axis)
    px, py = paddle_grads(op, x, y, dout, axis)
    s = float(np.abs(dout).sum()) * (10.0 if op in ("pow", "div") else 1.0)
    _close(dx, px, s)
    _close(dy, py, s)


NUMPY_CASES = [((4, 5), (5,)), ((3, 1, 5), (4, 1)), ((1, 6), (7, 1)), ((2, 3), (2, 3)),
               ((), (4,)), ((129, 1), (1, 300)), ((8, 1, 1), (1, 9, 10))]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", range(len(NUMPY_CASES)))
def test_grads_match_torch_autograd(op, case):
    xs, ys = NUMPY_CASES[case]
    rng = np.random.default_rng(hash((op, case, 1)) % 2**32)
    x, y = _values(rng, xs, op), _values(rng, ys, op)
    if op in ("max", "min", "fmax", "fmin") and x.size and y.size:
        x.flat[::3] = 0.5
        y.flat[::2] = 0.5
    dout = rng.standard_normal(np.broadcast_shapes(xs, ys)).astype(np.float32)
    dx, dy = _grad_fn(op)(x, y, dout, broadcast="numpy", ties="torch")
    tx, ty = torch_grads(op, x, y, dout)
    s = float(np.abs(dout).sum()) * (10.0 if op in ("pow", "div") else 1.0)
    _close(dx, tx, s)
    _close(dy, ty, s)


SPECIAL = [1.0, 2.0, np.nan, -0.0, 0.0, np.inf, -np.inf]


@pytest.mark.parametrize("op", ["max", "min", "fmax", "fmin"])
def test_ties_and_nans_per_element(op):
    """Every pair of special values, same shape (nothing summed): Paddle's rule under
    ties="paddle", PyTorch's under ties="torch" (they differ where a NaN meets max/min)."""
    pairs = np.array([(a, b) for a in SPECIAL for b in SPECIAL], np.float32)
    x, y = pairs[:, 0].copy(), pairs[:, 1].copy()
    dout = np.full(x.shape, 3.0, np.float32)
    dx, dy = _grad_fn(op)(x, y, dout)
    px, py = paddle_grads(op, x, y, dout, -1)
    np.testing.assert_array_equal(dx, px)
    np.testing.assert_array_equal(dy, py)
    dx, dy = _grad_fn(op)(x, y, dout, broadcast="numpy", ties="torch")
    tx, ty = torch_grads(op, x, y, dout)
    np.testing.assert_array_equal(dx, tx)
    np.testing.assert_array_equal(dy, ty)
    if op in ("max", "min"):  # the two rules really differ there
        nan = np.isnan(x) | np.isnan(y)
        assert (px[nan] == 0).all() and (tx[nan] == 3).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_gradients_sum_in_wide_precision(dtype):
    """float16/bfloat16: jitops computes each product in float32 and sums in float64,
    rounded once (within an ulp of the exact sum); Paddle (bfloat16; PyTorch for float16,
    which Paddle's CPU cannot multiply) rounds each product to the half type and sums in
    float32 -- equal within those roundings."""
    rng = np.random.default_rng(7)
    x = paddle.to_tensor(rng.standard_normal((64, 9, 31)).astype(np.float32)).astype(dtype)
    y = paddle.to_tensor(rng.standard_normal((9, 1)).astype(np.float32)).astype(dtype)
    d = paddle.to_tensor(rng.standard_normal((64, 9, 31)).astype(np.float32)).astype(dtype)
    tx, ty = x.detach(), y.detach()
    tx.stop_gradient = ty.stop_gradient = False
    if dtype == "bfloat16":  # (Paddle's CPU has no legacy bfloat16 kernel)
        out = paddle.multiply(tx, ty)
        px, py = paddle.grad([out], [tx, ty], [d])
    else:  # Paddle's CPU has no float16 multiply at all: PyTorch's autograd instead
        tpx, tpy = (torch.tensor(v.numpy(), requires_grad=True) for v in (x, y))
        (tpx * tpy).backward(torch.tensor(d.numpy()))
        px, py = paddle.to_tensor(tpx.grad.numpy()), paddle.to_tensor(tpy.grad.numpy())
    dx, dy = jitops.elementwise_mul_grad(x, y, d)
    assert isinstance(dx, paddle.Tensor) and str(dx.dtype).endswith(dtype)
    assert dx.shape == px.shape and dy.shape == py.shape
    np.testing.assert_array_equal(dx.astype("float32").numpy(), px.astype("float32").numpy())
    ours = dy.astype("float32").numpy()
    theirs = py.astype("float32").numpy()
    exact = (d.astype("float64").numpy() * x.astype("float64").numpy()).sum(
        axis=(0, 2)).reshape(9, 1)
    ulp = np.spacing(np.abs(exact).astype(np.float16 if dtype == "float16" else np.float32))
    if dtype == "bfloat16":
        ulp = ulp * 2 ** 16
    assert (np.abs(ours - exact) <= ulp).all()  # ours: rounded once
    # Paddle (PyTorch) rounds each product to the half type before summing in float32
    terms = np.abs(d.astype("float64").numpy() * x.astype("float64").numpy()).sum(
        axis=(0, 2)).reshape(9, 1)
    eps = 2.0 ** (-11 if dtype == "float16" else -8)
    assert (np.abs(ours - theirs) <= 2 * ulp + eps * terms).all()


def _reduced_axes(full, frame):
    return tuple(d for d, (n, f) in enumerate(zip(full, frame)) if f == 1 and n != 1)


SUM_TO = [((2, 3, 4), (3, 1), "numpy", -1), ((2, 3, 4), (4,), "numpy", -1),
          ((2, 3, 4), (), "numpy", -1), ((2, 3, 4), (1, 1, 1), "numpy", -1),
          ((2, 3, 4), (2, 3, 4), "numpy", -1), ((5, 1, 7), (1, 7), "numpy", -1),
          ((2, 3, 4, 5), (3, 4), "pdpd", 1), ((2, 3, 4, 5), (3,), "pdpd", 1),
          ((2, 3, 4, 5), (2,), "pdpd", 0), ((2, 3, 4), (3, 1), "pdpd", 1),
          ((2, 3, 4, 5), (5, 1, 1), "pdpd", 3), ((7, 3000), (3000,), "numpy", -1),
          ((3000, 7), (3000, 1), "numpy", -1), ((300001,), (), "numpy", -1),
          ((32, 64, 9, 9), (64,), "pdpd", 1), ((0, 3), (3,), "numpy", -1)]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int32", "uint8",
                                   "int64", "complex64"])
@pytest.mark.parametrize("case", range(len(SUM_TO)))
def test_sum_to_matches_numpy(case, dtype):
    full, shape, mode, axis = SUM_TO[case]
    rng = np.random.default_rng(case)
    g = (rng.standard_normal(full) * 50).astype(dtype)
    if dtype.startswith("complex"):
        g = g + 1j * g[..., ::-1] if g.ndim else g
        g = g.astype(dtype)
    got = jitops.sum_to(g, shape, broadcast=mode, axis=axis)
    from jitops.core.reduction import sum_to_frame

    frame = sum_to_frame(full, shape, mode, axis)
    axes = _reduced_axes(full, frame)
    wide = {"f": np.float64, "c": np.complex128, "i": np.int64, "u": np.uint64}[g.dtype.kind]
    with np.errstate(over="ignore"):
        want = g.astype(wide).sum(axis=axes, keepdims=True).reshape(shape)
    assert got.shape == tuple(shape) and got.dtype == g.dtype
    if g.dtype.kind in "iu":  # wrapped as NumPy's integers wrap
        np.testing.assert_array_equal(got, want.astype(g.dtype))
    else:  # rounded once from a float64 sum
        scale = np.abs(g.astype(np.complex128)).sum()
        np.testing.assert_allclose(got, want.astype(g.dtype), rtol=2e-7 if dtype != "float16"
                                   else 1e-3, atol=1e-12 * scale + 1e-30)
    if g.size:
        assert not np.shares_memory(got, g)


@pytest.mark.parametrize("n", [1, 7, 513, 40_000, 300_001])
def test_sum_within_the_pairwise_bound_on_adversarial_input(n):
    """Sums of terms that cancel (large and small, alternating signs) stay within the
    pairwise-summation error bound of math.fsum's exact answer, whatever the layout; a
    float32 sum is the float64 sum rounded once."""
    rng = np.random.default_rng(n)
    big = rng.choice([1e16, -1e16, 1e-3, 3.0, -7.5e8], n) * (1 + rng.random(n))
    for g in (big, big.reshape(1, n)[:, ::-1], np.ascontiguousarray(big[::-1])):
        exact = math.fsum(g.ravel().tolist())
        got = float(jitops.sum_to(g, ()))
        bound = (math.log2(n) + 64) * np.finfo(np.float64).eps * np.abs(g).sum()
        assert abs(got - exact) <= bound
    f = rng.standard_normal(n).astype(np.float32) * np.float32(1e4)
    exact32 = np.float32(math.fsum(f.astype(np.float64).tolist()))
    got32 = jitops.sum_to(f, ())
    assert abs(float(got32) - float(exact32)) <= float(np.spacing(np.abs(exact32)))


@pytest.mark.parametrize("shape,to,mode,axis", [((300_001,), (), "numpy", -1),
                                                ((32, 64, 30, 30), (64,), "pdpd", 1),
                                                ((700, 300), (700, 1), "numpy", -1),
                                                ((3, 200_000), (200_000,), "numpy", -1),
                                                ((4096, 64), (64,), "numpy", -1),
                                                ((100_000, 8), (8,), "numpy", -1),
                                                ((2048, 3, 64), (3, 64), "numpy", -1)])
def test_sums_do_not_depend_on_the_thread_count(shape, to, mode, axis):
    g = np.random.default_rng(3).standard_normal(shape)
    y = np.random.default_rng(4).standard_normal(to) if to else np.float64(1.5)
    results = []
    for n in (1, 2, 3, 4):
        with jitops.threads(n):
            results.append((jitops.sum_to(g, to, broadcast=mode, axis=axis),
                            jitops.elementwise_mul_grad(g, y, g, broadcast=mode,
                                                        axis=axis)[1]))
    for s, d in results[1:]:
        assert s.tobytes() == results[0][0].tobytes()
        assert d.tobytes() == results[0][1].tobytes()


def test_sum_to_property_every_mode():
    """sum_to(broadcast_to(x, s), x.shape) == x * (prod(s) / x.size)."""
    rng = np.random.default_rng(11)
    for full, shape, mode, axis in SUM_TO:
        frame = jitops.core.reduction.sum_to_frame(full, shape, mode, axis)
        x = rng.integers(-8, 8, shape).astype(np.float64)
        g = np.broadcast_to(x.reshape(frame), full)
        size = max(1, int(np.prod(shape)))
        got = jitops.sum_to(g, shape, broadcast=mode, axis=axis)
        np.testing.assert_array_equal(got, x * (int(np.prod(full)) / size))


def test_errors_are_clear_and_raised_before_anything_runs():
    g = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"does not broadcast"):
        jitops.sum_to(g, (5,))
    with pytest.raises(ValueError, match=r"does not broadcast"):
        jitops.sum_to(g, (2, 3, 4, 1))
    with pytest.raises(TypeError, match=r"bool"):
        jitops.sum_to(np.ones(3, bool), ())
    with pytest.raises(TypeError, match=r"shape must be a tuple"):
        jitops.sum_to(g, 3.5)
    with pytest.raises(ValueError, match=r"dout has shape"):
        jitops.elementwise_add_grad(g, np.ones(3, np.float32), np.ones((2, 3)), axis=1)
    with pytest.raises(TypeError, match=r"int32"):
        jitops.elementwise_add_grad(g, np.ones(3, np.int32), g, axis=1)
    with pytest.raises(ValueError, match=r"ties"):
        jitops.elementwise_max_grad(g, g, g, ties="numpy")
    with pytest.raises(ValueError, match=r"pdpd broadcast"):
        jitops.elementwise_add_grad(g, np.ones(5, np.float32), g, axis=1)
    x = np.ones((2, 3), np.float32)
    before = x.copy()
    jitops.elementwise_mul_grad(x, x, x)
    np.testing.assert_array_equal(x, before)


def test_masks_and_labels_are_refused_not_dropped():
    """A masked array's mask and a pandas object's labels decide what a sum means (NumPy's
    masked sum leaves the masked values out): sum_to and the gradients refuse them (TypeError)
    rather than summing the bare values, as the elementwise ops do."""
    import pandas as pd

    masked = np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    with pytest.raises(TypeError, match=r"g is a numpy.ma.MaskedArray; jitops would drop"):
        jitops.sum_to(masked, ())
    with pytest.raises(TypeError, match=r"y is a numpy.ma.MaskedArray"):
        jitops.elementwise_mul_grad(np.ones(3), masked, np.ones(3))
    with pytest.raises(TypeError, match=r"g is a pandas.Series, which decides ufuncs itself"):
        jitops.sum_to(pd.Series([1.0, 2.0], index=["a", "b"]), ())
    with pytest.raises(TypeError, match=r"dout is a pandas.DataFrame"):
        jitops.elementwise_add_grad(np.ones(2), np.ones(1), pd.DataFrame({"a": [1.0, 2.0]}))
    assert jitops.sum_to(masked.data, ()) == 6.0  # the bare values, asked for explicitly
    assert jitops.sum_to([1.0, 2.0], ()) == 3.0  # array-likes are still read


def test_framework_tensors_in_and_out():
    x = torch.ones((2, 3))
    g = jitops.sum_to(x, (3,))
    assert isinstance(g, torch.Tensor) and g.tolist() == [2.0, 2.0, 2.0]
    p = paddle.ones([4, 3])
    dx, dy = jitops.elementwise_add_grad(p, paddle.ones([3]), p)
    assert isinstance(dx, paddle.Tensor) and dy.numpy().tolist() == [4.0, 4.0, 4.0]


def test_no_floating_point_warnings_as_the_frameworks(recwarn):
    """Like Paddle's and PyTorch's autograd, the gradients warn of nothing: a division by
    zero gives inf, a NaN compares quietly, whatever np.errstate says."""
    x = np.ones(3, np.float32)
    y = np.array([0.0, 1.0, np.nan], np.float32)
    with np.errstate(all="raise"):
        dx, _ = jitops.elementwise_div_grad(x, y, x)
        gx, gy = jitops.elementwise_max_grad(y, x, x)
        jitops.sum_to(np.full(4, 3e38, np.float32), ())
    assert np.isinf(dx[0]) and gx[2] == 0 and gy[2] == 0
    assert not recwarn.list


@pytest.mark.parametrize("op", ["add", "mul", "max", "pow"])
def test_dask_gradients_are_one_graph_of_block_passes(op):
    """Dask operands: each block's pass by jitops (the full side stored, float64 partials of
    the broadcast side), the partials summed by Dask's tree; equal to the host answer."""
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(12)
    x, y = _values(rng, (6, 5, 8), op), _values(rng, (5,), op)
    d = rng.standard_normal((6, 5, 8)).astype(np.float32)
    lx, ly = _grad_fn(op)(da.from_array(x, chunks=(2, 3, 4)), y,
                          da.from_array(d, chunks=(3, 5, 4)), axis=1)
    ex, ey = _grad_fn(op)(x, y, d, axis=1)
    assert isinstance(lx, da.Array) and lx.dtype == ex.dtype and ly.shape == ey.shape
    np.testing.assert_array_equal(lx.compute(), ex)
    np.testing.assert_allclose(ly.compute(), ey, rtol=1e-6)


def test_a_sum_over_leading_axes_splits_them_into_partial_rows_not_the_rows():
    """A bias gradient's sum over the leading axes keeps only the rows' own axis: cut among
    tasks, each task's rows would be short (X(4096, 64): 8 elements), so the tasks split a
    summed axis into partial rows, padded apart (no cache line shared between tasks); the
    choice is the shape's alone (the same plan whatever the thread count), and the answers
    are NumPy's on every reduction."""
    from jitops.core.reduction import plan_reduction

    for threads in (1, 2, 64):
        plan = plan_reduction((4096, 64), [(64, 1)], [(1, 64)], threads=threads)
        assert plan.split == 0 and plan.ntasks == 2 and plan.results[0].partial
    wide = plan_reduction((4, 100_000), [(100_000, 1)], [(1, 100_000)], threads=2)
    assert wide.split == 1 and not wide.results[0].partial  # long rows: cut among tasks
    rng = np.random.default_rng(8)
    for shape in ((4096, 64), (100_000, 8), (2048, 3, 64), (40_000, 9)):
        g = rng.standard_normal(shape)
        np.testing.assert_allclose(jitops.sum_to(g, shape[1:]), g.sum(axis=0), rtol=1e-12,
                                   atol=1e-9)
        for how in ("max", "min", "prod", "any"):
            op = jitops.reduce(lambda v: v, how, axis=0)
            exp = getattr(np, how)(g, axis=0)
            if how == "prod":
                np.testing.assert_allclose(op(g), exp, rtol=1e-12)
            else:
                assert np.array_equal(op(g), exp)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "complex64", "uint64"])
def test_a_sum_over_outer_axes_runs_its_rows_in_one_loop_and_reads_every_row(dtype):
    """sum_to's sum over an axis outside unit-stride rows takes the rows of the axis next to
    the innermost in one loop (jitops.cpu.kernels.reduce.column_rows): views whose rows are
    apart (an axis that cannot merge), where that axis is summed or kept, split among tasks
    or not, short rows and long. Integer values: every order of the sum is exact, so any row
    read twice, skipped or added to the wrong accumulator shows."""
    rng = np.random.default_rng(21)
    cases = [((9, 40, 3, 5), np.s_[:, ::2, :, :], (1, 3, 5)),   # rows apart, axis summed
             ((6, 12, 7), np.s_[:, ::3, :], (4, 7)),            # axis kept: its own rows
             ((4096, 70), np.s_[:, 3:67], (64,)),               # split into partial rows
             ((50_000, 10), np.s_[::2, :], (10,)),
             ((3, 5, 2000), np.s_[:, 1:, :], (4, 2000)),        # long rows
             ((2, 3, 300, 12), np.s_[:, :, ::2, 1:], (3, 1, 11))]
    for full, view, to in cases:
        g = rng.integers(0 if dtype == "uint64" else -40, 40, full).astype(dtype)[view]
        frame = (1,) * (g.ndim - len(to)) + to
        want = g.astype(np.complex128 if g.dtype.kind == "c" else np.float64).sum(
            axis=_reduced_axes(g.shape, frame), keepdims=True).reshape(to)
        for n in (1, 2):
            with jitops.threads(n):
                got = jitops.sum_to(g, to)
            assert got.dtype == g.dtype
            np.testing.assert_array_equal(got, want.astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_short_rows_are_mapped_a_block_of_rows_at_a_time(dtype):
    """A pass over short rows (a row-broadcast's gradient, a user reduction over the leading
    axis) maps a block of whole rows in one call and hands each result the block
    (jitops.cpu.kernels.reduce.map_rows): stored rows land where they belong, summed ones
    add into their own accumulator, whatever the views' steps. Small integer values keep
    every sum exact, so a row dropped, read twice or put in the wrong place shows."""
    rng = np.random.default_rng(22)
    for n, c, view in ((4096, 64, np.s_[:, :]), (3000, 10, np.s_[:, ::-1]),
                       (600, 9, np.s_[::2, 1:]), (40, 200, np.s_[:, :]), (7, 3, np.s_[:, :])):
        x, dout = (rng.integers(-6, 7, (n, c + 1)).astype(dtype)[view] for _ in range(2))
        b = rng.integers(1, 4, x.shape[1]).astype(dtype)
        wide = dout.astype(np.float64)
        for threads in (1, 2):
            with jitops.threads(threads):
                dx, db = jitops.elementwise_add_grad(x, b, dout)
                mx, mb = jitops.elementwise_mul_grad(x, b, dout)
            np.testing.assert_array_equal(dx, dout)
            np.testing.assert_array_equal(db, wide.sum(axis=0).astype(dtype))
            np.testing.assert_array_equal(mx, (wide * b).astype(dtype))
            np.testing.assert_array_equal(mb, (wide * x).sum(axis=0).astype(dtype))
        a = x.astype(np.float64)
        a[::5, ::3] = np.nan
        for how, ref in (("max", np.max), ("min", np.min), ("sum", np.sum)):
            op = jitops.reduce(lambda u, v: u - v, how, axis=0)
            with np.errstate(all="raise"):  # NaNs compared quietly, as NumPy's max does
                np.testing.assert_array_equal(op(a, b), ref(a - b, axis=0))
        pair = jitops.elementwise(lambda u, v: (u - v, u * v))
        o1, o2 = (np.empty(x.shape[::-1], np.float64).T for _ in range(2))
        pair(a, b, out=(o1, o2))
        np.testing.assert_array_equal(o1, a - b)
        np.testing.assert_array_equal(o2, a * b)
    # rows apart in both the operand and the results: a kept axis next to the rows
    cube = rng.integers(-6, 7, (300, 8, 5)).astype(dtype)[:, ::2, :]
    both = jitops.elementwise(lambda u: (u * 2, u), reduce=(None, "sum"), axis=0)
    stored, summed = both(cube)
    np.testing.assert_array_equal(stored, cube * 2)
    np.testing.assert_array_equal(summed, cube.astype(np.float64).sum(axis=0).astype(dtype))
    # an operand in Fortran order: the pass walks its columns, the stored rows strided
    ft = np.asfortranarray(rng.integers(-6, 7, (100, 3000)).astype(dtype))
    diff, prod = jitops.elementwise(lambda u, v: (u - v, u * v))(ft, ft[:, ::-1])
    np.testing.assert_array_equal(diff, ft - ft[:, ::-1])
    np.testing.assert_array_equal(prod, ft * ft[:, ::-1])


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_max_and_min_compare_nans_and_zeros_quietly_as_numpy(dtype):
    """max/min reductions in vector lanes: NaN wins and warns nothing (an ordered comparison
    of a NaN in a lane LLVM computed anyway had raised *invalid*), zeros and infinities
    order as NumPy's; over the rows' own axis and an outer one. (Which zero a tie of -0.0
    and +0.0 keeps follows NumPy's SIMD lanes there, not a rule: values only.)"""
    rng = np.random.default_rng(23)
    special = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.0, 1e-300, 3.0])
    for shape in ((64, 33), (7, 4), (500, 3), (3, 500)):
        a = rng.choice(special, shape).astype(dtype)
        a[:, ::7] = np.where(np.isnan(a[:, ::7]), 0.0, a[:, ::7])  # columns without NaN
        for how, ref in (("max", np.max), ("min", np.min)):
            for axis in (0, 1, None):
                op = jitops.reduce(lambda v: v, how, axis=axis)
                with np.errstate(all="raise"):
                    got = op(a)
                want = ref(a, axis=axis)
                np.testing.assert_array_equal(got, want)
