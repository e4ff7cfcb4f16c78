"""SPEC section 4: every bad input raises the documented type, naming the problem, early.

The cases every backend shares are in tests/test_spec.py (run on each backend); these are the
rest, on host arrays: more dtypes and operand kinds, read-only ``out``, device spellings."""

import os

import numpy as np
import pytest

import jitops

X = np.arange(6, dtype=np.float32).reshape(2, 3)
OUT = np.full((2, 3), 7, np.float32)

CASES = [
    # (description, kwargs for jitops.subtract, exception, match)
    ("mode type", dict(x=X, y=X, broadcast=None), ValueError, "broadcast must be one of"),
    ("axis in none mode", dict(x=X, y=X, broadcast="none", axis=1), ValueError, "axis applies"),
    ("axis < -1", dict(x=X, y=X[0], broadcast="pdpd", axis=-2), ValueError, r"out of range"),
    ("object dtype", dict(x=np.array([object()] * 3), y=X[0]), TypeError, "object dtype"),
    ("datetime dtype", dict(x=np.array([np.datetime64("2020-01-01")] * 3), y=X[0]), TypeError,
     "datetime dtype"),
    ("timedelta", dict(x=np.array([np.timedelta64(1, "D")] * 3), y=X[0]), TypeError,
     "timedelta dtype"),
    ("None operand", dict(x=None, y=X), TypeError, "x is None"),
    ("str operand", dict(x="abc", y=X), TypeError, "x is of unsupported type .str."),
    ("dict operand", dict(x={"a": 1}, y=X), TypeError, "x is of unsupported type .dict."),
    ("out read-only", dict(x=X, y=X, out="readonly"), ValueError, "read-only"),
    ("out not array", dict(x=X, y=X, out=[0] * 6), TypeError, "out must be a numpy.ndarray"),
    ("device type", dict(x=X, y=X, device=0), TypeError, "device must be"),
]


@pytest.mark.parametrize("desc, kw, exc, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input(desc, kw, exc, match):
    kw = dict(kw)
    if isinstance(kw.get("out"), str):
        o = OUT.copy()
        o.flags.writeable = False
        kw["out"] = o
    inputs = [v for v in (kw.get("x"), kw.get("y")) if isinstance(v, np.ndarray)]
    before = [v.copy() for v in inputs]
    out_before = kw["out"].copy() if isinstance(kw.get("out"), np.ndarray) else None
    with pytest.raises(exc, match=match):
        jitops.subtract(**kw)
    for v, b in zip(inputs, before):
        np.testing.assert_array_equal(v, b)
    if out_before is not None:
        np.testing.assert_array_equal(kw["out"], out_before)


def test_cuda_without_gpu_is_a_runtime_error_not_a_fallback():
    from jitops.core.device import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("a real GPU is present")
    with pytest.raises(RuntimeError, match="CUDA was requested but cannot run"):
        jitops.add(X, X, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA was requested"):
        jitops.add(X, X, device="cuda:1")


@pytest.mark.parametrize("name, value, says", [
    ("JITOPS_BLOCK", "abc", "JITOPS_BLOCK must be an integer from 1 to 4611686018427387903, "
                            "got 'abc'"),
    ("JITOPS_STREAM_BYTES", "1.5", "JITOPS_STREAM_BYTES must be an integer"),
    ("JITOPS_POOL_SPIN", "-1", "JITOPS_POOL_SPIN must be an integer from 0 to "
                               "4611686018427387903, got -1"),
    ("JITOPS_TILE_J", "0", "JITOPS_TILE_J must be an integer from 1 to 4611686018427387903, "
                           "got 0"),
    ("JITOPS_RECYCLE_MB", "lots", "JITOPS_RECYCLE_MB must be an integer"),
])
def test_a_bad_tunable_in_the_environment_is_named_at_import(name, value, says):
    import subprocess
    import sys
    env = dict(os.environ, **{name: value})
    p = subprocess.run([sys.executable, "-c", "import jitops"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and f"ValueError: {says}" in p.stderr, p.stderr[-1500:]


def test_a_blank_tunable_means_its_default():
    import subprocess
    import sys
    env = dict(os.environ, JITOPS_STREAM_BYTES="", JITOPS_BLOCK=" ", JITOPS_RECYCLE_MB="")
    code = ("from jitops.core import config; import jitops, numpy as np; "
            "assert config.BLOCK == 65536; "
            "assert config.RECYCLE_BYTES == config.RECYCLE_DEFAULT_MB << 20; "
            "assert config.STREAM_BYTES == config._last_level_cache_bytes(); "
            "print(jitops.add(np.ones(3), 1.0))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "[2. 2. 2.]" in p.stdout, p.stderr[-1500:]


# -- objects with a protocol of their own: refused, never computed on their bare values ------


class _Labelled:
    """The smallest type that decides ufuncs itself (as pandas and xarray objects do)."""

    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return NotImplemented


class _OptsOut:
    __array_ufunc__ = None

    def __array__(self, dtype=None, copy=None):
        return np.ones(3)


class _UnitArray(np.ndarray):
    """An ndarray subclass with its own __array_ufunc__ (astropy's Quantity is one)."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return NotImplemented


@pytest.mark.parametrize("make", [lambda: _Labelled([1.0, 2.0, 3.0]),
                                  lambda: np.arange(3.0).view(_UnitArray)])
@pytest.mark.parametrize("where", ["x", "y", "user"])
def test_an_object_that_declines_the_op_gets_numpys_error_naming_it(make, where):
    """Handed the op (NEP 13), a type that answers NotImplemented gets NumPy's TypeError, the
    type named: never computed on its bare values (tests/test_interop.py: the types that
    answer)."""
    obj, plain = make(), np.arange(3.0)
    with pytest.raises(TypeError, match=rf"all returned NotImplemented.*'{type(obj).__name__}'"):
        if where == "x":
            jitops.subtract(obj, plain)
        elif where == "y":
            jitops.subtract(plain, obj)
        else:
            jitops.elementwise(lambda a, b: a - b)(plain, obj)


def test_an_object_that_opts_out_of_ufuncs_gets_numpys_error():
    with pytest.raises(TypeError) as ours:
        jitops.add(_OptsOut(), 1.0)
    with pytest.raises(TypeError) as numpys:
        np.add(_OptsOut(), 1.0)
    assert str(ours.value) == str(numpys.value)


def test_paddle_tensors_of_raw_bit_dtypes_are_refused_not_computed_on_their_bits():
    """Paddle's tensors opt out of ufuncs and hand bfloat16/float8 over as raw bits through
    __array__: a stand-in with Paddle's module, opt-out and dtype names."""
    stand_in = type("Tensor", (), {"__module__": "paddle", "__array_ufunc__": None,
                                   "__array__": lambda self, dtype=None, copy=None: self.bits})
    for dt, bits in (("paddle.bfloat16", np.array([16256, 0], np.uint16)),
                     ("paddle.float8_e4m3fn", np.array([56, 0], np.int8))):
        t = stand_in()
        t.dtype, t.bits = dt, bits
        with pytest.raises(TypeError, match=dt.split(".")[1] + ".*raw bits"):
            jitops.subtract(t, t)
    t = stand_in()
    t.dtype, t.bits = "paddle.float32", np.array([1.5, 2.0], np.float32)
    np.testing.assert_array_equal(jitops.subtract(t, 1.0), np.array([0.5, 1.0], np.float32))


def test_a_dtype_of_its_own_is_named():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="pip install ml_dtypes (JAX brings it)")
    x = np.ones(3, ml_dtypes.float8_e4m3fn)  # (bfloat16 is computed: test_frameworks.py)
    with pytest.raises(TypeError, match=r"dtype float8_e4m3fn \(ml_dtypes\)"):
        jitops.add(x, x)
