"""The planner alone: no kernels are compiled here."""

import ctypes

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jitops import result_shape
from jitops.core.plan import CONTIG, SCALAR_X, SCALAR_Y, STRIDED, TILED, align_all, make_plan

from .naive import PdpdError, pdpd_frames

X = (2, 3, 4, 5)


# --- SPEC section 3 and the seed documents ----------------------------------------------------
@pytest.mark.parametrize("y, axis, expected", [
    ((), -1, X), ((5,), -1, X), ((4, 5), -1, X), ((4, 5), 2, X), ((3, 4), 1, X), ((2,), 0, X),
    ((2, 1), 0, X), ((5, 1), 3, X), ((4, 5, 1), 2, X), ((1, 1), 3, X),
    ((2, 1, 1, 1, 1), 0, (2, 3, 4, 5, 1)), ((2, 3, 4, 5), 7, X), ((2, 3, 4, 5), -9, X),
])
def test_pdpd_examples(y, axis, expected):
    assert result_shape(X, y, broadcast="pdpd", axis=axis) == expected


def test_pdpd_bidirectional_and_rank_swap():
    assert result_shape((2, 1, 4, 1), (3, 4), "pdpd", 1) == (2, 3, 4, 1)
    assert result_shape((3, 4), X, "pdpd", 1) == X
    assert result_shape((10, 12), (2, 3, 10, 12), "pdpd", 2) == (2, 3, 10, 12)
    assert result_shape((1, 1, 20, 5), (20, 5, 1, 1), "pdpd", -1) == (20, 5, 20, 5)
    assert result_shape((), X, "pdpd", 1) == X
    assert result_shape((2, 0, 4), (1, 4), "pdpd", 1) == (2, 0, 4)
    assert result_shape((1, 0, 2), (3, 0, 1), "pdpd") == (3, 0, 2)


@pytest.mark.parametrize("xs, ys, axis, match", [
    (X, (5, 1), -1,
     r"X shape \(2,3,4,5\) and Y shape \(5,1\).*axis=2.*at dim 2 X has 4 but Y has 5"),
    (X, (5, 2), 3, r"axis=3.*outside the frame"),
    (X, (3, 5), 1,
     r"X shape \(2,3,4,5\) and Y shape \(3,5\).*axis=1.*at dim 2 X has 4 but Y has 5"),
    (X, (1, 3, 4, 5), 1, r"same rank \(4\), got axis=1"),
    (X, (4,), -2, r"axis=-2 is out of range \[-1, 4\)"),
    (X, (), 4, r"axis=4 is out of range \[-1, 4\)"),
    ((3,), (), 1, r"axis=1 is out of range \[-1, 1\)"),
    ((2, 0), (3,), -1, r"at dim 1 X has 0 but Y has 3"),
])
def test_pdpd_errors_name_shapes_axis_and_dim(xs, ys, axis, match):
    with pytest.raises(ValueError, match=match):
        result_shape(xs, ys, broadcast="pdpd", axis=axis)


def test_numpy_and_none_errors():
    with pytest.raises(ValueError, match=r"operands could not be broadcast together with shapes "
                                         r"\(2,3\) \(4,\) "):
        result_shape((2, 3), (4,))
    with pytest.raises(ValueError, match=r"broadcast='none' needs equal shapes.*\(2,3\).*\(3,\)"):
        result_shape((2, 3), (3,), broadcast="none")
    with pytest.raises(ValueError, match=r"axis applies only to broadcast='pdpd'"):
        result_shape((2, 3), (3,), broadcast="numpy", axis=0)
    with pytest.raises(ValueError, match=r"broadcast must be one of"):
        result_shape((2, 3), (3,), broadcast="bidirectional")
    with pytest.raises(TypeError, match=r"axis must be an integer"):
        result_shape((2, 3), (3,), broadcast="pdpd", axis=1.0)
    assert result_shape((2, 3), (2, 3), broadcast="NONE") == (2, 3)
    assert result_shape((2, 3), (3,), broadcast="PDPD") == (2, 3)


# --- properties ---------------------------------------------------------------------------------
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5, min_side=0,
                                         max_side=4))
def test_numpy_mode_matches_numpy(shapes):
    xs, ys = shapes.input_shapes
    assert result_shape(xs, ys) == np.broadcast_shapes(xs, ys)


shape_st = st.lists(st.integers(0, 4), min_size=0, max_size=5).map(tuple)


@given(shape_st, shape_st)
def test_numpy_mode_errors_iff_numpy_does(xs, ys):
    try:
        expected = np.broadcast_shapes(xs, ys)
    except ValueError:
        with pytest.raises(ValueError):
            result_shape(xs, ys)
    else:
        assert result_shape(xs, ys) == expected


@st.composite
def pdpd_pairs(draw):
    """Mostly valid pdpd pairs (a subsequence with 1s sprinkled in), sometimes arbitrary ones."""
    big = draw(st.lists(st.integers(0, 4), min_size=0, max_size=5).map(tuple))
    if draw(st.booleans()) and big:
        a = draw(st.integers(0, len(big)))
        b = draw(st.integers(a, len(big)))
        small = [n if not draw(st.booleans()) else 1 for n in big[a:b]]
        small += [1] * draw(st.integers(0, 2))  # trailing 1s, possibly spilling
        axis = draw(st.sampled_from([a, -1]))
        small = tuple(small)
    else:
        small = draw(shape_st)
        axis = draw(st.integers(-3, 6))
    if draw(st.booleans()):
        big, small = small, big
    return big, small, axis


@given(pdpd_pairs())
def test_pdpd_matches_independent_reference(case):
    xs, ys, axis = case
    try:
        expected = pdpd_frames(xs, ys, axis)[0]
    except PdpdError:
        with pytest.raises(ValueError):
            result_shape(xs, ys, broadcast="pdpd", axis=axis)
    else:
        assert result_shape(xs, ys, broadcast="pdpd", axis=axis) == expected


# --- plan structure: order, coalescing, variants ---------------------------------------------
def el(a):
    return tuple(s // a.itemsize for s in a.strides)


def plan_for(x, y, mode="numpy", axis=-1, out=None):
    return make_plan((x.shape, y.shape), (el(x), el(y)), mode, axis,
                     None if out is None else el(out))


def test_contiguous_coalesces_to_one_dim():
    x = np.empty((2, 3, 4, 5), np.float32)
    p = plan_for(x, x)
    assert p.iter_shape == (120,) and p.variant == CONTIG


def test_scalar_variants():
    x = np.empty((1000,), np.float32)
    s = np.empty((), np.float32)
    assert plan_for(x, s).variant == SCALAR_Y
    assert plan_for(s, x).variant == SCALAR_X
    X4, Y = np.empty((32, 64, 56, 56), np.float32), np.empty((64,), np.float32)
    p = plan_for(X4, Y, "pdpd", 1)
    assert p.iter_shape == (32, 64, 56 * 56) and p.variant == SCALAR_Y
    assert p.iter_strides[2] == (0, 1, 0)
    p = plan_for(np.empty((4096, 1), np.float32), np.empty((1, 4096), np.float32))
    assert p.variant == SCALAR_X and p.iter_shape == (4096, 4096)


def test_row_broadcast_is_contiguous_rows():
    p = plan_for(np.empty((4096, 4096), np.float32), np.empty((4096,), np.float32))
    assert p.iter_shape == (4096, 4096) and p.variant == CONTIG
    assert p.iter_strides == ((4096, 1), (4096, 1), (0, 1))


def test_fortran_inputs_give_fortran_output_and_one_dim():
    x = np.asfortranarray(np.empty((30, 40)))
    p = plan_for(x, x)
    assert p.out_strides == (1, 30) and p.iter_shape == (1200,) and p.variant == CONTIG


def test_mixed_layout_c_wins_and_is_tiled():
    x = np.empty((64, 64))
    p = plan_for(x.T, x)
    assert p.out_strides == (64, 1) and p.variant == TILED
    assert p.iter_strides == ((64, 1), (1, 64), (64, 1))


def test_transposed_out_is_tiled_too():
    x = np.empty((100, 200))
    p = plan_for(x, x, out=np.empty((200, 100)).T)
    assert p.variant == TILED


@pytest.mark.parametrize("dtype, side, tiled", [
    ("int8", 100, True), ("float16", 100, True), ("float32", 100, True), ("float32", 1000, True),
    ("float64", 100, False), ("float64", 180, False), ("float64", 1000, False),
    ("float64", 128, True), ("float64", 1024, True),  # a row's step a multiple of 1024 bytes
    ("float64", 2000, True), ("float64", 1500, True),  # 16 MiB and more
    ("complex64", 100, False), ("complex64", 128, True),
    ("complex128", 100, False), ("complex128", 1000, False), ("complex128", 4000, False),
    ("complex128", 256, True), ("complex128", 512, True),
    ("complex128", 1024, False),  # aliased, but 16 MiB: strided won there
])
def test_wide_elements_tile_only_where_it_paid(dtype, side, tiled):
    """With the elements' sizes, ``X.T - Y`` tiles for 1-4 byte elements at every size, and
    for wider ones only where tiling beat the strided walk when measured (plan.ALIAS_BYTES):
    the transposed step a multiple of 1024 bytes (below 16 MiB for 16-byte elements), or
    8-byte elements over 16 MiB. The same rule holds for a transposed out."""
    w = np.dtype(dtype).itemsize
    shapes, c, t = ((side, side),) * 2, (side, 1), (1, side)
    want = TILED if tiled else STRIDED
    assert make_plan(shapes, (t, c), "numpy", -1, None, (w, w, w)).variant == want
    assert make_plan(shapes, (c, c), "numpy", -1, t, (w, w, w)).variant == want
    assert make_plan(shapes, (t, c), "numpy").variant == TILED  # sizes unknown: tiled


def test_small_or_thin_mixed_layouts_stay_strided():
    # a tile would not fit twice along a dim: the plain strided rows are as good
    x = np.empty((8, 4096))
    assert plan_for(x.T, np.empty((4096, 8))).variant == STRIDED
    x = np.empty((32, 32))
    assert plan_for(x.T, x).variant == STRIDED
    # strided but not transposed (every operand moves less along the inner dim): no tiles
    x = np.empty((300, 400))
    assert plan_for(x[:, ::2], x[:, ::2]).variant == STRIDED


def test_negative_strides_flip_when_out_is_reversed_too():
    x = np.empty(100)
    p = plan_for(x[::-1], x[::-1], out=x[::-1])
    assert p.variant == CONTIG and p.iter_offsets == (-99, -99, -99)


def test_size_zero_and_zero_d():
    p = plan_for(np.empty((3, 0)), np.empty((0,)))
    assert p.size == 0 and p.out_shape == (3, 0)
    p = plan_for(np.empty(()), np.empty(()))
    assert p.size == 1 and p.iter_shape == (1,) and p.out_shape == ()


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
       st.data())
def test_plan_visits_exactly_numpys_elements(shapes, data):
    """Walking the coalesced plan as the kernel does reproduces NumPy's broadcast pairs."""
    xs, ys = shapes.input_shapes
    x = np.arange(int(np.prod(xs)), dtype=np.int64).reshape(xs)
    y = np.arange(int(np.prod(ys)), dtype=np.int64).reshape(ys) + 1000
    if data.draw(st.booleans()) and x.ndim:
        x = np.flip(x, axis=data.draw(st.integers(0, x.ndim - 1)))
    if data.draw(st.booleans()):
        y = y.T
        xs, ys = x.shape, y.shape
    try:
        bx, by = np.broadcast_arrays(x, y)
    except ValueError:
        return
    p = plan_for(x, y)
    seen_x = np.full(p.size, -1, np.int64)
    seen_y = np.full(p.size, -1, np.int64)
    for flat in range(p.size):
        rem, offs = flat, list(p.iter_offsets)
        for d in range(len(p.iter_shape) - 1, -1, -1):
            i = rem % p.iter_shape[d]
            rem //= p.iter_shape[d]
            for k in range(3):
                offs[k] += i * p.iter_strides[k][d]
        assert seen_x[offs[0]] == -1  # every output element written exactly once
        seen_x[offs[0]], seen_y[offs[0]] = _read(x, offs[1]), _read(y, offs[2])
    as_out = lambda v: np.lib.stride_tricks.as_strided(  # noqa: E731
        v, shape=p.out_shape, strides=tuple(s * 8 for s in p.out_strides))
    np.testing.assert_array_equal(as_out(seen_x), bx)
    np.testing.assert_array_equal(as_out(seen_y), by)


def _read(a, off):
    """The int64 at element offset ``off`` from ``a``'s data pointer (as the kernel reads it)."""
    return ctypes.c_int64.from_address(a.__array_interface__["data"][0] + off * 8).value


# --- N operands (SPEC 1.1 and 6) ---------------------------------------------------------------
def test_n_operands_numpy_rule_matches_numpy():
    for shapes in [((2, 1, 4), (3, 1), (4,)), ((5,), (5,), (5,), (1,)), ((), (2, 3)),
                   ((7, 1, 1, 2), (6, 1, 2), (1, 5, 1), (2,), ())]:
        out, frames = align_all(shapes, "numpy")
        assert out == np.broadcast_shapes(*shapes)
        assert all(len(f) == len(out) for f in frames)
    with pytest.raises(ValueError, match=r"could not be broadcast together with shapes "
                                         r"\(2,3\) \(3,\) \(4,\)"):
        align_all(((2, 3), (3,), (4,)), "numpy")


def test_n_operands_pdpd_lays_every_lower_rank_operand_at_axis():
    out, frames = align_all(((2, 3, 4, 5), (3,), (3, 4)), "pdpd", 1)
    assert out == (2, 3, 4, 5)
    assert frames == [(2, 3, 4, 5), (1, 3, 1, 1), (1, 3, 4, 1)]
    # axis=-1: each operand right-aligned by its own rank difference
    out, frames = align_all(((2, 3, 4, 5), (5,), (4, 5), ()), "pdpd", -1)
    assert frames == [(2, 3, 4, 5), (1, 1, 1, 5), (1, 1, 4, 5), (1, 1, 1, 1)]
    # the largest operand need not come first; equal-rank operands broadcast NumPy-style
    out, frames = align_all(((64,), (8, 64, 7, 7), (1, 64, 1, 1)), "pdpd", 1)
    assert out == (8, 64, 7, 7) and frames[0] == (1, 64, 1, 1)
    with pytest.raises(ValueError, match=r"operand 2 is laid onto operand 0 as \(1,4,1,1\), "
                                         r"and at dim 1 operand 0 has 3 but operand 2 has 4"):
        align_all(((2, 3, 4, 5), (3,), (4,)), "pdpd", 1)
    with pytest.raises(ValueError, match="axis must be -1 or 0 when all operands have the same"):
        align_all(((2, 3), (2, 3), (1, 3)), "pdpd", 1)


@pytest.mark.parametrize("xs, ys, axis", [((2, 3, 4, 5), (3, 4), 1), ((3, 4), (2, 3, 4, 5), 1),
                                          ((2, 3, 4, 5), (5, 1), 3), ((4,), (4,), 0)])
def test_two_operand_pdpd_is_the_binary_rule(xs, ys, axis):
    assert align_all((xs, ys), "pdpd", axis)[0] == result_shape(xs, ys, "pdpd", axis)


def test_n_operand_plan_coalesces_and_classifies():
    p = make_plan(((4, 5), (4, 5), (4, 5)), ((5, 1), (5, 1), (5, 1)), "numpy")
    assert p.iter_shape == (20,) and p.variant == CONTIG and p.n_inputs == 3
    p = make_plan(((4, 5), (5,), (4, 1)), ((5, 1), (1,), (1, 0)), "numpy")
    assert p.variant == STRIDED and p.iter_strides[3][-1] == 0
    p = make_plan(((4, 5), (4, 5)), ((5, 1), (-5, -1)), "numpy")  # x read backwards
    assert p.iter_offsets == (0, 0, 0) and p.iter_strides[2] == (-1,)  # coalesced, not flipped
    p = make_plan(((4, 5), (4, 5)), ((-5, -1), (-5, -1)), "numpy", -1, (-5, -1))
    assert p.iter_offsets == (-19, -19, -19) and p.iter_strides == ((1,), (1,), (1,))
