"""The seeds' own tensors, and NumPy's result types.

Paddle and OpenVINO tensors go in without a copy and come back as their own tensors sharing
the result's memory; values and dtypes are checked against the frameworks' own ops (Paddle's
``paddle.<op>``, a compiled OpenVINO ``Subtract``) on the same tensors. Any other DLPack
object is read in place. NumPy's ``__array_wrap__``/``__array_priority__`` choose the result
type as in NumPy's ufuncs; ``out=...`` gives an array; a ragged list is NumPy's ValueError.
"""

from __future__ import annotations

import numpy as np
import pytest

import jitops

from .helpers import OPS, sample, valid

# -- NumPy's result types ----------------------------------------------------------------------


class Tagged(np.ndarray):
    """An ndarray subclass that carries an attribute through __array_finalize__."""

    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", "fresh")


class Wraps:
    """Not an array: __array__ in, __array_wrap__ out, with a priority."""

    __array_priority__ = 20.0

    def __init__(self, a):
        self.a = np.asarray(a)

    def __array__(self, dtype=None, copy=None):
        return self.a

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        return ("wrapped", arr, return_scalar)


@pytest.mark.parametrize("op", OPS)
def test_subclasses_keep_their_type_as_in_numpy(op):
    x = np.arange(1.0, 7.0).reshape(2, 3).view(Tagged)
    x.tag = "mine"
    y = np.full(3, 2.0)
    for a, b in ((x, y), (y, x), (x, x), (x, 2.0)):
        got, exp = getattr(jitops, op)(a, b), getattr(np, op)(a, b)
        assert type(got) is type(exp) is Tagged and got.tag == exp.tag
        np.testing.assert_array_equal(got, exp)
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    got, exp = getattr(jitops, op)(m, m), getattr(np, op)(m, m)
    assert type(got) is np.matrix and got.shape == exp.shape
    np.testing.assert_array_equal(got, exp)


def test_array_wrap_and_priority_as_in_numpy():
    w = Wraps([1.0, 2.0])
    got, exp = jitops.add(w, np.ones(2)), np.add(w, np.ones(2))
    assert got[0] == exp[0] == "wrapped" and got[2] == exp[2] is False
    np.testing.assert_array_equal(got[1], exp[1])
    t = np.arange(2.0).view(Tagged)  # priority 0 against 20: the Wraps object wraps
    assert jitops.add(t, w)[0] == np.add(t, w)[0] == "wrapped"
    z = Wraps(1.5)
    assert jitops.add(z, 1.0)[2] is np.add(z, 1.0)[2] is True  # 0-d: return_scalar


def test_out_ellipsis_always_gives_an_array():
    for a, b in ((np.float32(1.5), np.float32(2.0)), (1.0, 2.0), (np.ones(3), 1.0)):
        got, exp = jitops.add(a, b, out=...), np.add(a, b, out=...)
        assert type(got) is type(exp) is np.ndarray and got.shape == exp.shape
        assert got.dtype == exp.dtype
    u = jitops.elementwise(lambda p, q: p * q)
    assert type(u(np.float32(2.0), 3.0, out=...)) is np.ndarray


def test_ragged_lists_are_numpys_value_error():
    with pytest.raises(ValueError) as numpys:
        np.add([[1.0], [1.0, 2.0]], 1.0)
    with pytest.raises(ValueError, match="x cannot be converted"):
        jitops.add([[1.0], [1.0, 2.0]], 1.0)
    assert numpys.type is ValueError


# -- Paddle ------------------------------------------------------------------------------------

PADDLE_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                 "float64", "complex64", "complex128"]


def _paddle():
    return pytest.importorskip("paddle", reason="paddlepaddle is in the test extra where wheels "
                                                "exist")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", PADDLE_DTYPES)
def test_paddle_tensors_against_paddles_own_ops(op, dtype):
    """Paddle tensors in, Paddle tensors out: NumPy's values and dtypes on the same data (the
    contract), and Paddle's own op's wherever Paddle computes the pair (on integers, bar
    ``divide``, ``fmax`` and ``fmin``, where Paddle's answers are not NumPy's)."""
    paddle = _paddle()
    rng = np.random.default_rng(7)
    x, y = sample(rng, (3, 4), dtype), sample(rng, (4,), dtype)
    px, py = paddle.to_tensor(x), paddle.to_tensor(y)
    if not valid(op, dtype):
        with pytest.raises(TypeError):
            getattr(jitops, op)(px, py)
        return
    got = getattr(jitops, op)(px, py)
    assert isinstance(got, paddle.Tensor) and got.place.is_cpu_place()
    with np.errstate(all="ignore"):
        want = getattr(np, op)(x, y)
    ours = got.numpy()
    assert ours.dtype == want.dtype
    tol = np.dtype(dtype).kind == "c" and op in ("multiply", "divide")
    check = (lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5)) if tol \
        else np.testing.assert_array_equal
    check(ours, want)
    if np.dtype(dtype).kind in "biu" and op in ("divide", "fmax", "fmin"):
        return  # Paddle's divide gives float32 here, and its fmax/fmin round int32 through a
        # float (fmax(1073741823, x) = 1073741824): NumPy's answers are jitops' contract
    try:
        theirs = getattr(paddle, op)(px, py)
    except Exception:  # noqa: BLE001 -- a pair Paddle's own op does not take
        return
    assert str(theirs.dtype) == str(got.dtype)
    check(ours, theirs.numpy())


def test_paddle_zero_copy_both_ways_and_out():
    paddle = _paddle()
    t = paddle.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    r = jitops.subtract(t, 1.0)
    assert isinstance(r, paddle.Tensor)
    view = np.from_dlpack(r)
    view[0, 0] = 42.0  # the tensor is the array jitops wrote
    assert float(r[0, 0]) == 42.0
    assert jitops.multiply(t, 2.0, out=t) is t  # read and written in place
    assert t.numpy().tolist() == [[0, 2, 4], [6, 8, 10]]
    o = paddle.zeros([2, 3])
    assert jitops.elementwise_add(t, paddle.ones([3]), out=o) is o
    assert o.numpy().tolist() == [[1, 3, 5], [7, 9, 11]]
    # pdpd on Paddle tensors, fused act
    x = paddle.to_tensor(np.ones((2, 3, 4), np.float32))
    y = paddle.to_tensor(np.full(3, 2.0, np.float32))
    r = jitops.elementwise_sub(x, y, axis=1, act="relu")
    assert isinstance(r, paddle.Tensor) and r.shape == [2, 3, 4] and float(r.sum()) == 0.0
    # mixed with NumPy: the Paddle tensor decides the result's kind
    assert isinstance(jitops.add(np.ones(3, np.float32), paddle.ones([3])), paddle.Tensor)
    # 0-d stays a tensor
    z = jitops.add(paddle.to_tensor(1.5), paddle.to_tensor(2.0))
    assert isinstance(z, paddle.Tensor) and float(z) == 3.5


def test_paddle_tensors_never_computed_on_their_bits():
    paddle = _paddle()
    x = paddle.to_tensor([1.0, 0.0, 3.0]).astype("float8_e4m3fn")
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        jitops.subtract(x, x)
    g = paddle.to_tensor([1.0, 2.0], stop_gradient=False)
    with pytest.raises(TypeError, match="gradients"):
        jitops.add(g, 1.0)
    u = paddle.to_tensor(np.array([1, 2], np.uint8))
    with pytest.raises(TypeError, match="uint16 has no Paddle"):
        jitops.add(u, np.array([1, 2], np.uint16))


# -- OpenVINO ----------------------------------------------------------------------------------


def _ov():
    return pytest.importorskip("openvino", reason="openvino is in the test extra where wheels "
                                                  "exist")


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "uint8"])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((4, 1), (1, 5))])
def test_openvino_tensors_against_a_compiled_subtract(dtype, shapes):
    ov = _ov()
    from openvino import opset13 as ops

    # Values where OpenVINO's CPU plugin is exact (SEMANTICS.md: it computes int64 as int32
    # and saturates int8/uint8): jitops gives NumPy's wrap-around beyond them
    rng = np.random.default_rng(3)
    lo = 0 if dtype == "uint8" else -60
    x = rng.integers(lo + 60, 120, shapes[0]).astype(dtype)
    y = rng.integers(0, 60, shapes[1]).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x, y = x + 0.25, y * 1.5
    px = ops.parameter(list(x.shape), ov.Type(np.dtype(dtype)))
    py = ops.parameter(list(y.shape), ov.Type(np.dtype(dtype)))
    model = ov.Model([ops.subtract(px, py, auto_broadcast="numpy")], [px, py])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    tx, ty = ov.Tensor(x, shared_memory=True), ov.Tensor(y, shared_memory=True)
    theirs = compiled([tx, ty])[0]
    got = jitops.subtract(tx, ty)
    assert isinstance(got, ov.Tensor) and got.element_type == ov.Type(np.dtype(dtype))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got.data, np.subtract(x, y))
    if dtype != "float16":  # OpenVINO's CPU plugin computes f16 in f32 (SEMANTICS.md)
        np.testing.assert_array_equal(got.data, theirs)


def test_openvino_zero_copy_and_out():
    ov = _ov()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ov.Tensor(a, shared_memory=True)
    assert jitops.add(t, 1.0, out=t) is t and a.tolist() == [[1, 2, 3], [4, 5, 6]]
    r = jitops.multiply(t, t)
    r.data[0, 0] = -1.0  # the tensor shares the result jitops wrote
    assert r.data[0, 0] == -1.0
    bf = ov.Tensor(ov.Type.bf16, [3])
    with pytest.raises(TypeError, match="bf16"):
        jitops.add(bf, 1.0)


# -- any other DLPack producer -----------------------------------------------------------------


class OnlyDLPack:
    """An object offering nothing but DLPack (as array-api-strict's arrays)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_a_dlpack_object_is_read_in_place():
    a = np.arange(4.0)
    r = jitops.subtract(OnlyDLPack(a), 1.0)
    assert type(r) is np.ndarray and r.tolist() == [-1.0, 0.0, 1.0, 2.0]
    o = np.empty(4)
    assert jitops.add(OnlyDLPack(a), OnlyDLPack(a), out=o) is o and o.tolist() == [0, 2, 4, 6]
    z = jitops.add(OnlyDLPack(np.array(2.0)), 1.0)
    assert type(z) is np.float64 and z == 3.0


# -- bfloat16: computed as values, never as bits ------------------------------------------------

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("op", OPS)
def test_bfloat16_every_bit_pattern_as_ml_dtypes(op):
    """Every bfloat16 value (NaN payloads, infinities, subnormals, -0) against every one of a
    sample, bit for bit against ml_dtypes' own loop (float32 arithmetic, one rounding to
    nearest even): ml_dtypes is the NumPy dtype JAX's arrays have."""
    x = np.arange(2**16, dtype=np.uint16).view(BF16)
    y = np.random.default_rng(5).permutation(x.view(np.uint16)).view(BF16)
    with np.errstate(all="ignore"):
        want = getattr(np, op)(x, y)
    got = getattr(jitops, op)(x, y)
    assert got.dtype == want.dtype == BF16
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    if op in ("fmax", "fmin", "maximum", "minimum"):  # a NaN passed through keeps its bits
        np.testing.assert_array_equal(got.view(np.uint16)[nan], want.view(np.uint16)[nan])


@pytest.mark.parametrize("other, result", [
    (np.int8, BF16), (np.uint8, BF16), (np.bool_, BF16), (np.int16, np.float32),
    (np.int32, np.float64), (np.float16, np.float32), (np.float32, np.float32),
    (np.float64, np.float64), (np.complex64, np.complex64)])
def test_bfloat16_promotes_as_float16_does(other, result):
    x = np.array([1.5, -2.0, 3.0], BF16)
    y = np.array([2, 1, 0], other)
    got = jitops.add(x, y)
    assert got.dtype == np.dtype(result)
    np.testing.assert_array_equal(got.astype(np.float64), (x.astype(np.float32) + y).astype(
        result).astype(np.float64))
    assert jitops.add(x, 2.5).dtype == BF16 and jitops.add(x, 2).dtype == BF16  # weak scalars


def test_bfloat16_act_user_ops_strides_and_out():
    x = np.linspace(-4, 4, 64, dtype=np.float32).astype(BF16)
    y = np.full(64, 0.5, np.float32).astype(BF16)
    got = jitops.subtract(x, y, act="gelu")
    # gelu of the exact float32 difference, rounded once to bfloat16 (float16's rule)
    ref = jitops.subtract(x.astype(np.float32), y.astype(np.float32), act="gelu")
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=2**-8)
    f = jitops.elementwise(lambda a, b: a * b + 1.0)
    np.testing.assert_array_equal(
        f(x[::2], y[::2]).view(np.uint16),
        (x[::2].astype(np.float32) * y[::2].astype(np.float32) + 1).astype(BF16).view(np.uint16))
    o = np.empty(64, BF16)
    assert jitops.multiply(x, y, out=o) is o
    np.testing.assert_array_equal(o.view(np.uint16), np.multiply(x, y).view(np.uint16))


def test_bfloat16_tensors_against_their_frameworks():
    torch = pytest.importorskip("torch")
    vals = [1.0, 0.0, 3.0, -7.5, 1e30, np.nan]
    tx = torch.tensor(vals).bfloat16()
    ty = torch.tensor([2.0, 2.0, 1.0, 0.25, 1e30, 1.0]).bfloat16()
    for op, t_op in (("subtract", torch.sub), ("multiply", torch.mul), ("maximum", torch.maximum)):
        got = getattr(jitops, op)(tx, ty)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
        torch.testing.assert_close(got, t_op(tx, ty), equal_nan=True, rtol=0, atol=0)
    o = torch.empty(6, dtype=torch.bfloat16)
    assert jitops.add(tx, ty, out=o) is o
    torch.testing.assert_close(o, tx + ty, equal_nan=True, rtol=0, atol=0)
    paddle = _paddle()
    px = paddle.to_tensor(vals).astype("bfloat16")
    py = paddle.to_tensor([2.0, 2.0, 1.0, 0.25, 1e30, 1.0]).astype("bfloat16")
    got = jitops.subtract(px, py)
    assert isinstance(got, paddle.Tensor) and str(got.dtype) == "paddle.bfloat16"
    np.testing.assert_array_equal(got.astype("float32").numpy(),
                                  paddle.subtract(px, py).astype("float32").numpy())
    # the case: Paddle gives [-1, -2, 2]; the bits computed as integers gave 65408 ...
    assert got.astype("float32").numpy()[:3].tolist() == [-1.0, -2.0, 2.0]


def test_a_paddle_bfloat16_gpu_tensor_is_refused_before_cuda_reads_it():
    """Paddle's CUDA array interface gives a bfloat16 tensor typestr '<f2' (float16): a
    stand-in with Paddle's module, dtype, place and that interface is refused by name."""
    place = type("Place", (), {"is_cpu_place": lambda self: False,
                               "__str__": lambda self: "Place(gpu:0)"})()
    stand_in = type("Tensor", (), {
        "__module__": "paddle", "__array_ufunc__": None, "__dlpack__": lambda self: None,
        "dtype": "paddle.bfloat16", "place": place,
        "__cuda_array_interface__": {"shape": (3,), "typestr": "<f2", "data": (0, False),
                                     "version": 2}})
    with pytest.raises(TypeError, match="bfloat16 on Place\\(gpu:0\\).*float16"):
        jitops.add(stand_in(), 1.0)


@pytest.mark.parametrize("bit", ["conjugate", "negative"])
def test_a_torch_gpu_tensor_with_a_lazy_bit_is_refused_before_cuda_reads_it(bit):
    """PyTorch's CUDA array interface describes a conjugate or negative view's memory, not
    its values: a tensor that says it is on a GPU with such a bit is refused by name."""
    torch = pytest.importorskip("torch")

    class OnGPU(torch.Tensor):
        is_cuda = property(lambda self: True)

    base = torch.tensor([1 + 2j, 3 - 1j])
    t = (base.conj() if bit == "conjugate" else torch._neg_view(base)).as_subclass(OnGPU)
    with pytest.raises(TypeError, match=f"its {bit} bit set.*resolve_"):
        jitops.add(t, 1.0)
    with pytest.raises(TypeError, match=f"its {bit} bit set"):
        jitops.add(np.ones(2), np.ones(2), out=t)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "max", "min"])
@pytest.mark.parametrize("xs, ys, axis", [((2, 3, 4, 5), (3, 4), 1), ((2, 3, 4, 5), (4, 5), -1),
                                          ((2, 3, 4), (2,), 0), ((2, 3, 4), (3, 1), 1)])
def test_paddle_axis_rule_against_paddles_own_kernels(name, xs, ys, axis):
    """pdpd on Paddle tensors against Paddle's own axis kernels
    (``paddle._legacy_C_ops.elementwise_*``, SEMANTICS.md), with a fused act and out=."""
    paddle = _paddle()
    rng = np.random.default_rng(11)
    x = paddle.to_tensor(rng.standard_normal(xs).astype(np.float32))
    y = paddle.to_tensor(rng.standard_normal(ys).astype(np.float32))
    theirs = getattr(paddle._legacy_C_ops, f"elementwise_{name}")(x, y, "axis", axis)
    ours = getattr(jitops, f"elementwise_{name}")(x, y, axis=axis)
    assert isinstance(ours, paddle.Tensor) and ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    o = paddle.empty(theirs.shape, dtype="float32")
    assert getattr(jitops, f"elementwise_{name}")(x, y, axis=axis, act="relu", out=o) is o
    np.testing.assert_array_equal(o.numpy(), paddle.nn.functional.relu(theirs).numpy())


@pytest.mark.parametrize("op", OPS)
def test_paddle_bfloat16_every_op_against_paddle(op):
    paddle = _paddle()
    vals = np.array([1.0, 0.0, 3.0, -7.5, 1e30, np.nan, -0.0, 2.5e-3], np.float32)
    other = np.array([2.0, 2.0, 1.0, 0.25, 1e30, 1.0, 0.0, np.nan], np.float32)
    px, py = paddle.to_tensor(vals).astype("bfloat16"), paddle.to_tensor(other).astype("bfloat16")
    got = getattr(jitops, op)(px, py)
    assert isinstance(got, paddle.Tensor) and str(got.dtype) == "paddle.bfloat16"
    mine = got.astype("float32").numpy()
    with np.errstate(all="ignore"):  # ml_dtypes' loop: NumPy's answer on the same values
        want = getattr(np, op)(vals.astype(BF16), other.astype(BF16)).astype(np.float32)
    np.testing.assert_array_equal(mine, want)
    try:
        theirs = getattr(paddle, op)(px, py)
    except RuntimeError:  # no CPU bfloat16 kernel (add, divide, fmax, fmin): Paddle's own
        # float32 op and its cast back, the single rounding jitops makes too
        theirs = getattr(paddle, op)(px.astype("float32"), py.astype("float32")).astype(
            "bfloat16")
    np.testing.assert_array_equal(mine, theirs.astype("float32").numpy())
