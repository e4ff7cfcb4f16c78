"""NumPy's protocols: objects that decide ufuncs themselves (NEP 13) get from jitops what they
get from NumPy's own ufuncs, and PyTorch CPU tensors come back as tensors, zero-copy.

One table of kinds (a minimal ``__array_ufunc__`` type, pandas Series and DataFrame, xarray
DataArray, PyTorch tensors), each test differential: ``jitops.<op>(a, b)`` against
``numpy.<op>(a, b)`` on the same objects -- type, values, dtype, labels, names, attributes --
or both raise. Hypothesis draws the indexes, dims and dtypes.
"""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import assume, given
from hypothesis import strategies as st

import jitops

from .helpers import OPS, counting_prepare, valid

torch = pytest.importorskip("torch", reason="PyTorch is in the test extra where wheels exist")


class Wrapped:
    """NEP 13's model of a type that decides ufuncs itself: unwraps, calls, wraps."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = [v.value if isinstance(v, Wrapped) else v for v in inputs]
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = tuple(o.value if isinstance(o, Wrapped) else o for o in out)
        r = getattr(ufunc, method)(*inputs, **kwargs)
        return out[0] if out is not None else Wrapped(r)


def outcome(fn):
    """("ok", result) or ("raises", exception class)."""
    try:
        with np.errstate(all="ignore"):
            return "ok", fn()
    except Exception as e:  # noqa: BLE001 -- the class is what is compared
        return "raises", type(e)


def assert_same_object(ours, theirs):
    """The same type, values, dtype and labels (names, coords, attributes)."""
    assert type(ours) is type(theirs), (type(ours), type(theirs))
    if isinstance(theirs, pd.Series):
        pd.testing.assert_series_equal(ours, theirs, check_exact=True)
    elif isinstance(theirs, pd.DataFrame):
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    elif isinstance(theirs, xr.DataArray | xr.Dataset):
        xr.testing.assert_identical(ours, theirs)
    elif isinstance(theirs, Wrapped):
        assert_same_object(ours.value, theirs.value)
    elif isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    else:
        assert getattr(ours, "dtype", None) == getattr(theirs, "dtype", None)
        np.testing.assert_array_equal(ours, theirs)


def _object_dtype(r) -> bool:
    dtypes = r.dtypes if isinstance(r, pd.DataFrame) else [getattr(r, "dtype", None)]
    return any(dt == np.dtype(object) for dt in dtypes)


def _bools(*vs) -> bool:
    return any(pd.api.types.is_bool_dtype(getattr(v, "dtype", None))
               or (isinstance(v, pd.DataFrame) and any(map(pd.api.types.is_bool_dtype, v.dtypes)))
               for v in vs)


def differential(op, a, b, **kw):
    """jitops.<op>(a, b) against numpy.<op>(a, b): equal results, or both raise -- bar the two
    documented differences (README, Interop): where NumPy's answer is an object array
    (pandas reindexing a bool column), jitops, which computes no object arrays, raises
    TypeError; on bools, pandas' own ``/`` (NumPy's ``divide`` on a Series) refuses
    (NotImplementedError) where jitops divides as NumPy does on arrays."""
    got = outcome(lambda: getattr(jitops, op)(a, b, **kw))
    exp = outcome(lambda: getattr(np, op)(a, b, **kw))
    if exp[0] == "ok" and _object_dtype(exp[1]):
        assert got == ("raises", TypeError), (got, exp)
        return None
    if exp == ("raises", NotImplementedError) and op == "divide" and _bools(a, b):
        assert got[0] == "ok", got
        return got[1]
    assert got[0] == exp[0], (got, exp)
    if exp[0] == "ok":
        assert_same_object(got[1], exp[1])
    else:  # NumPy's class, or a TypeError/ValueError jitops names
        assert got[1] is exp[1] or issubclass(got[1], (TypeError, ValueError)), (got, exp)
    return got[1]


# -- the strategies ---------------------------------------------------------------------------

NUMPY_DTYPES = ["bool", "int8", "uint8", "int32", "int64", "float32", "float64"]
PANDAS_DTYPES = NUMPY_DTYPES + ["Int64", "Float64", "boolean"]


@st.composite
def values(draw, n, dtype):
    dt = pd.api.types.pandas_dtype(dtype)
    kind = np.dtype(getattr(dt, "numpy_dtype", dt)).kind
    if kind == "b":
        elems = st.booleans()
    elif kind in "iu":
        elems = st.integers(0 if kind == "u" else -100, 100)
    else:
        elems = st.floats(-1e3, 1e3, width=32) | st.sampled_from([np.nan, np.inf, -np.inf])
    vals = draw(st.lists(elems, min_size=n, max_size=n))
    if not isinstance(dt, np.dtype) and n and draw(st.booleans()):
        vals[draw(st.integers(0, n - 1))] = None  # a missing value of a nullable dtype
    return pd.array(vals, dtype=dtype) if not isinstance(dt, np.dtype) else np.array(vals, dt)


@st.composite
def series(draw, dtype=None, labels=None):
    labels = labels if labels is not None else draw(
        st.lists(st.sampled_from("abcdefg"), unique=True, max_size=6))
    dtype = dtype or draw(st.sampled_from(PANDAS_DTYPES))
    name = draw(st.sampled_from([None, "n", "m"]))
    return pd.Series(draw(values(len(labels), dtype)), index=list(labels), name=name)


@st.composite
def data_arrays(draw, dtype=None):
    """A DataArray over some of the dims x (3), y (2), z (4), in any order, with coordinates
    on some of them and attributes."""
    sizes = {"x": 3, "y": 2, "z": 4}
    dims = draw(st.permutations(list(sizes)).flatmap(
        lambda p: st.integers(0, 3).map(lambda k: p[:k])))
    dtype = dtype or draw(st.sampled_from(NUMPY_DTYPES))
    shape = tuple(sizes[d] for d in dims)
    kind = np.dtype(dtype).kind
    data = draw(hnp.arrays(np.dtype(dtype), shape, elements=st.integers(
        0 if kind == "u" else -50, 50) if kind in "iu" else None))
    coords = {d: np.arange(sizes[d]) * 10 for d in dims if draw(st.booleans())}
    attrs = draw(st.sampled_from([{}, {"units": "m"}]))
    return xr.DataArray(data, dims=dims, coords=coords, attrs=attrs,
                        name=draw(st.sampled_from([None, "v"])))


# -- the table --------------------------------------------------------------------------------


@given(op=st.sampled_from(OPS), a=series(), b=series())
def test_series_align_by_label(op, a, b):
    differential(op, a, b)


@given(op=st.sampled_from(OPS), a=series(), data=st.data())
def test_series_with_arrays_and_scalars(op, a, data):
    dtype = data.draw(st.sampled_from(NUMPY_DTYPES))
    arr = data.draw(values(len(a), dtype))
    scalar = data.draw(st.sampled_from([2, 2.5, True, np.float32(1.5), np.int8(3)]))
    differential(op, a, arr)
    differential(op, arr, a)
    differential(op, a, scalar)
    differential(op, scalar, a)


@given(op=st.sampled_from(OPS), dtype=st.sampled_from(NUMPY_DTYPES),
       cols=st.permutations(["p", "q", "r"]), data=st.data())
def test_dataframes_align_columns_and_rows(op, dtype, cols, data):
    rows_a = data.draw(st.lists(st.integers(0, 5), unique=True, max_size=4))
    rows_b = data.draw(st.lists(st.integers(0, 5), unique=True, max_size=4))
    a = pd.DataFrame({c: data.draw(values(len(rows_a), dtype)) for c in "pqr"}, index=rows_a)
    b = pd.DataFrame({c: data.draw(values(len(rows_b), dtype)) for c in cols}, index=rows_b)
    differential(op, a, b)


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"p": pd.array([1, None], dtype="Int64")}),
    pd.DataFrame({"p": [1, 2], "q": [1.5, 2.5]}),
    pd.DataFrame({"p": [1, 2], "q": ["a", "b"]}),
])
def test_dataframes_of_mixed_or_extension_dtypes_are_refused(frame):
    """pandas hands a ufunc such a frame as one array of a common dtype (float64, or Python
    objects), where its own operators keep each column's dtype: a TypeError that says so."""
    with pytest.raises(TypeError, match=r"columns of dtypes .*column by column"):
        jitops.subtract(frame, frame)
    with pytest.raises(TypeError, match=r"columns of dtypes"):
        jitops.maximum(np.ones(2), frame)


def test_a_bool_column_reindexed_to_objects_is_refused_with_what_to_do():
    a = pd.DataFrame({"p": [True, False]}, index=[0, 1])
    b = pd.DataFrame({"p": [True, False]}, index=[1, 2])
    with pytest.raises(TypeError, match=r"array of Python objects.*astype"):
        jitops.add(a, b)


@given(op=st.sampled_from(OPS), a=data_arrays(), b=data_arrays())
def test_data_arrays_broadcast_by_dimension_name(op, a, b):
    differential(op, a, b)


@given(op=st.sampled_from(OPS), a=data_arrays(), scalar=st.sampled_from([3, 0.5, np.int16(2)]))
def test_data_arrays_with_scalars_and_arrays(op, a, scalar):
    differential(op, a, scalar)
    differential(op, scalar, a)
    differential(op, a, np.ones(a.shape[-1:] if a.ndim else (), np.float32))


@given(op=st.sampled_from(OPS), dtype=st.sampled_from(NUMPY_DTYPES),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
       data=st.data())
def test_minimal_array_ufunc_type(op, dtype, shapes, data):
    x = data.draw(hnp.arrays(np.dtype(dtype), shapes.input_shapes[0]))
    y = data.draw(hnp.arrays(np.dtype(dtype), shapes.input_shapes[1]))
    differential(op, Wrapped(x), y)
    differential(op, x, Wrapped(y))
    differential(op, Wrapped(x), Wrapped(y))
    exp = outcome(lambda: getattr(np, op)(x, y))
    if exp[0] == "ok" and exp[1].shape == shapes.result_shape:
        o_ours, o_np = Wrapped(np.zeros_like(exp[1])), Wrapped(np.zeros_like(exp[1]))
        got = getattr(jitops, op)(Wrapped(x), y, out=o_ours)
        with np.errstate(all="ignore"):
            getattr(np, op)(Wrapped(x), y, out=o_np)
        assert got is o_ours
        assert_same_object(o_ours, o_np)


# -- PyTorch CPU tensors: tensors in, tensors out, no copies ---------------------------------

TORCH_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                "float64", "complex64"]


@given(op=st.sampled_from(OPS), dtypes=st.tuples(*[st.sampled_from(TORCH_DTYPES)] * 2),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
       data=st.data())
def test_torch_tensors_in_tensors_out(op, dtypes, shapes, data):
    x = data.draw(hnp.arrays(np.dtype(dtypes[0]), shapes.input_shapes[0]))
    y = data.draw(hnp.arrays(np.dtype(dtypes[1]), shapes.input_shapes[1]))
    assume(valid(op, np.result_type(x, y)))  # complex maximum & co.: jitops refuses them
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    exp = outcome(lambda: getattr(np, op)(x, y))
    for a, b in ((tx, ty), (tx, y), (x, ty)):
        got = outcome(lambda: getattr(jitops, op)(a, b))
        assert got[0] == exp[0], (got, exp)
        if exp[0] == "raises":
            continue
        r = got[1]
        assert isinstance(r, torch.Tensor) and r.device.type == "cpu"
        want = np.asarray(exp[1])
        assert r.numpy().dtype == want.dtype and r.shape == want.shape
        if want.dtype.kind == "c" and op in ("multiply", "divide"):
            np.testing.assert_allclose(r.numpy(), want, rtol=1e-5)
        else:
            np.testing.assert_array_equal(r.numpy(), want)


def test_torch_zero_copy_both_ways():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    r = jitops.subtract(t, 1.0)
    assert isinstance(r, torch.Tensor)
    r.numpy()[0, 0] = 42.0  # the result tensor is the array jitops wrote, not a copy of it
    assert r[0, 0].item() == 42.0
    out = torch.empty(2, 3)
    assert jitops.add(t, t, out=out) is out
    assert out.tolist() == [[0, 2, 4], [6, 8, 10]]
    assert jitops.multiply(t, 2, out=t) is t  # read and written in place: no copy either way
    assert t.tolist() == [[0, 2, 4], [6, 8, 10]]
    # an ndarray out stays the answer, as with NumPy
    o = np.empty((2, 3), np.float32)
    assert jitops.add(t, 1, out=o) is o
    # a 0-d tensor stays a tensor (NumPy's ufuncs hand it back through __array_wrap__ too)
    z = jitops.add(torch.tensor(1.5), torch.tensor(2.0))
    assert isinstance(z, torch.Tensor) and z.shape == () and z.item() == 3.5


def test_torch_tensor_calls_take_the_arrays_repeats(monkeypatch):
    # a tensor call is the call on the arrays the tensors are read as, answered in kind: its
    # repeats run no pipeline, as an ndarray's do
    t, u, o = torch.rand(50), torch.rand(50), torch.empty(50)

    @jitops.elementwise
    def axpb(a, b, c):
        return a * b + c

    calls = []
    for k in range(4):
        r = jitops.subtract(t, u)
        assert isinstance(r, torch.Tensor) and torch.equal(r, t - u)
        assert jitops.add(t, u, out=o) is o and torch.equal(o, t + u)
        r = axpb(t, u, 1.5)
        assert isinstance(r, torch.Tensor) and torch.allclose(r, t * u + 1.5)
        if k == 1:  # the first two settled the launches and the repeats
            calls = counting_prepare(monkeypatch)
    assert calls == []


@pytest.mark.parametrize("make, match", [
    (lambda: torch.ones(3).to(torch.float8_e4m3fn), "float8_e4m3fn"),
    (lambda: torch.ones(3, requires_grad=True), r"requires grad.*detach"),
    (lambda: torch.ones(3, device="meta"), "device 'meta'"),
])
@pytest.mark.parametrize("where", ["x", "y", "out"])
def test_torch_tensors_numpy_cannot_stand_for_are_refused(make, match, where):
    t, plain = make(), np.ones(3, np.float32)
    target = torch.ones(3)
    with pytest.raises(TypeError, match=match):
        if where == "x":
            jitops.add(t, plain)
        elif where == "y":
            jitops.add(plain, t)
        else:
            jitops.add(plain, plain, out=t)
    assert target.tolist() == [1, 1, 1]


# -- what the labels decide: alignment, and the positional options ----------------------------


def test_issue_examples():
    s1 = pd.Series([1, 2, 3], index=list("abc"), name="n")
    s2 = pd.Series([10, 20, 30], index=list("cba"), name="n")
    r = jitops.subtract(s1, s2)
    assert r.to_dict() == {"a": -29, "b": -18, "c": -7} and r.name == "n"
    X = xr.DataArray(np.arange(9.0).reshape(3, 3), dims=("x", "y"), attrs={"units": "m"})
    v = xr.DataArray([1.0, 2.0, 3.0], dims="x")
    r = jitops.subtract(X, v)
    assert r.dims == ("x", "y") and r.attrs == {"units": "m"}
    np.testing.assert_array_equal(r.values, X.values - v.values[:, None])


@pytest.mark.parametrize("kind", ["series", "dataarray", "wrapped"])
def test_act_is_applied_and_labels_kept(kind):
    a = np.array([-2.0, 0.5, 3.0])
    b = np.array([1.0, 1.0, 1.0])
    make = {"series": lambda v: pd.Series(v, index=list("xyz"), name="s"),
            "dataarray": lambda v: xr.DataArray(v, dims="t", attrs={"u": 1}),
            "wrapped": Wrapped}[kind]
    got = jitops.subtract(make(a), make(b), act="relu")
    exp = make(np.maximum(a - b, 0))
    assert_same_object(got, exp)
    got = jitops.elementwise_sub(make(a), make(b), act="relu")  # pdpd, axis=-1: the labels
    assert_same_object(got, exp)


@pytest.mark.parametrize("kw", [dict(broadcast="pdpd", axis=0), dict(broadcast="none")])
def test_positional_alignment_is_refused_for_labelled_operands(kw):
    s = pd.Series([1.0, 2.0], index=["a", "b"])
    with pytest.raises(TypeError, match=r"lines operands up by position.*pandas"):
        jitops.add(s, s, **kw)
    with pytest.raises(TypeError, match="device='cuda'"):
        jitops.add(s, s, device="cuda")


def test_user_ops_take_part():
    fused = jitops.elementwise(lambda a, b, c: a * b + c)
    s1 = pd.Series([1.0, 2.0, 3.0], index=list("abc"))
    s2 = pd.Series([10.0, 20.0, 30.0], index=list("cba"))
    r = fused(s1, s2, 1.0)
    pd.testing.assert_series_equal(r, s1 * s2 + 1.0)
    X = xr.DataArray(np.ones((2, 3)), dims=("x", "y"))
    v = xr.DataArray([1.0, 2.0], dims="x")
    assert fused(X, v, v).dims == ("x", "y")
    np.testing.assert_array_equal(fused(X, v, v).values, np.array([[2.0] * 3, [4.0] * 3]))


def test_a_type_that_declines_gets_numpys_error():
    class Declines:
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return NotImplemented

    with pytest.raises(TypeError, match=r"all returned NotImplemented.*'Declines'"):
        jitops.add(Declines(), np.ones(3))
    with pytest.raises(TypeError, match="all returned NotImplemented"):
        np.add(Declines(), np.ones(3))


def test_subclasses_are_asked_before_their_base():
    calls = []

    class Base:
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            calls.append("base")
            return NotImplemented

    class Sub(Base):
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            calls.append("sub")
            return "sub answered"

    assert jitops.add(Base(), Sub()) == "sub answered" and calls == ["sub"]


def test_dask_arrays_mixed_with_labelled_operands_are_refused():
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="Series"):
        jitops.add(da.ones(3, chunks=2), pd.Series([1.0, 2.0, 3.0]))


# -- 0-d operands give NumPy scalars, as NumPy's ufuncs do -----------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("a, b", [
    (np.float32(1.5), np.float32(2)), (np.array(1.5), np.array(2.0)), (1.5, 2),
    (np.array(3, np.int16), 2), (np.int64(7), np.array(2, np.int8)),
])
def test_zero_d_operands_give_numpy_scalars_on_every_path(op, a, b):
    exp = getattr(np, op)(a, b)
    for _ in range(3):  # the first call, then the repeats' fast paths
        got = getattr(jitops, op)(a, b)
        assert type(got) is type(exp) and got == exp
    user = jitops.elementwise(lambda u, v: u * v + u)
    for _ in range(3):
        got = user(a, b)
        assert isinstance(got, np.generic)
    o = np.empty((), exp.dtype)
    for _ in range(3):
        assert getattr(jitops, op)(a, b, out=o) is o


def test_integer_division_scalars_on_the_zero_checked_path():
    for _ in range(3):
        r = jitops.elementwise_div(np.array(7), np.array(2))
        assert type(r) is np.int64 and r == 3


def test_more_kinds_differential():
    """An Index, a Dataset, Series with ``out=`` (an ndarray, or a Series): as NumPy."""
    i = pd.Index([1, 2, 3], name="i")
    differential("add", i, 1)
    differential("subtract", i, np.array([3, 2, 1]))
    ds = xr.Dataset({"a": ("x", [1.0, 2.0, 3.0]), "b": ("x", [4.0, 5.0, 6.0])}, attrs={"k": 1})
    differential("multiply", ds, 2.0)
    s = pd.Series([1.0, 2.0, 3.0], name="s")
    ours, theirs = np.empty(3), np.empty(3)
    r_ours = jitops.add(s, s, out=ours)
    assert_same_object(r_ours, np.add(s, s, out=theirs))
    np.testing.assert_array_equal(ours, theirs)
    o = pd.Series(np.zeros(3))
    assert jitops.add(s, s, out=o) is not None and o.tolist() == [2.0, 4.0, 6.0]


def test_dask_backed_data_arrays_stay_lazy():
    da = pytest.importorskip("dask.array")
    X = xr.DataArray(da.ones((4, 3), chunks=2), dims=("x", "y"), attrs={"u": 1})
    v = xr.DataArray(da.arange(4.0, chunks=2), dims="x")
    r = jitops.subtract(X, v)
    assert isinstance(r.data, da.Array)  # jitops maps the chunks, lazily
    xr.testing.assert_identical(r.compute(), np.subtract(X, v).compute())
