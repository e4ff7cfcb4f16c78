"""User ops (``jitops.elementwise``, SPEC 1.1) on every backend of tests/backends.py: the CPU
and Dask here, the CUDA simulator in a fresh process (tests/test_cuda_sim.py runs this file).

The oracle is a NumPy composition of the same expression on host copies, computed in the
dtype the inputs promote to (float16 in float32, rounded once, as jitops does).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitops
from jitops.core.plan import TILED
from jitops.cpu.repeat import memo as repeat


# module-level user ops: cacheable on disk (a file-backed function)
@jitops.elementwise
def square_plus_one(x):
    return x * x + 1


@jitops.elementwise
def mul_sub(a, b):
    return a * b - a


@jitops.elementwise
def axpb(x, w, b):
    return x * w + b


@jitops.elementwise
def five(a, b, c, d, e):
    return (a + b) * c - d * e


@jitops.elementwise
def relu_affine(x, w, b):
    return jitops.act.relu(x * w + b)


ARITIES = {
    1: (square_plus_one, lambda x: x * x + 1),
    2: (mul_sub, lambda a, b: a * b - a),
    3: (axpb, lambda x, w, b: x * w + b),
    5: (five, lambda a, b, c, d, e: (a + b) * c - d * e),
}
# one of each width and kind (each dtype signature is a compile: the suite's time budget)
DTYPES = ("int8", "uint16", "int64", "float16", "float32", "complex128")


def _data(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    real = np.float32 if dt in (np.float16, np.complex64) else np.float64
    a = (rng.standard_normal(shape) * 4).astype(real)
    if dt.kind == "c":
        a = a + 1j * (rng.standard_normal(shape) * 4).astype(real)
    return a.astype(dt)


def _oracle(expr, arrays, result_dtype):
    """NumPy's composition in the promoted dtype (float16 in float32), cast to the result."""
    common = np.result_type(*arrays)
    compute = np.float32 if common == np.float16 else common
    with np.errstate(all="ignore"):
        return np.asarray(expr(*[np.asarray(a).astype(compute) for a in arrays])
                          ).astype(result_dtype)


def _check(got, exp):
    assert got.dtype == exp.dtype and got.shape == exp.shape
    if exp.dtype.kind in "fc":
        tol = {2: 1e-3, 4: 1e-6, 8: 1e-6, 16: 1e-14}[exp.dtype.itemsize] \
            if exp.dtype.kind == "c" else {2: 0, 4: 0, 8: 0}[exp.dtype.itemsize]
        np.testing.assert_allclose(got, exp, rtol=tol, atol=0, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, exp)


def _run(be, op, *operands, **kw):
    if be.device is not None:
        kw.setdefault("device", be.device)
    return op(*operands, **kw)


# --- arities x dtypes, with broadcasting ------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", sorted(ARITIES))
def test_arity_and_dtype_against_numpy(be, n, dtype, rng):
    op, expr = ARITIES[n]
    shapes = [(3, 4), (4,), (3, 1), (1, 4), ()][:n]
    hosts = [_data(rng, s, dtype) for s in shapes]
    got = _run(be, op, *[be.put(h) for h in hosts])
    assert be.is_native(got)
    _check(be.get(got), _oracle(expr, hosts, np.dtype(dtype)))


def test_integers_wrap_in_their_dtype(be):
    a = np.array([100, -100, 127], np.int8)
    got = be.get(_run(be, mul_sub, be.put(a), be.put(np.array([3, 3, 2], np.int8))))
    assert got.dtype == np.int8
    exact = np.array([100 * 3 - 100, -100 * 3 + 100, 127 * 2 - 127], np.int64)
    np.testing.assert_array_equal(got, exact.astype(np.int8))  # 200 and -200 wrapped


# --- result dtypes ------------------------------------------------------------------------------
# (ops made once at collection, so every backend shares their compiled kernels)
@pytest.mark.parametrize("op, dtypes, expected", [
    (lambda x: x * 0.5, ("float32",), "float32"),        # a Python literal is weak
    (lambda a, b: a + b, ("int32", "int32"), "int32"),   # Numba's 64-bit ints wrap back
    (lambda a, b: a / b, ("int16", "int16"), "float64"),  # true division of integers
    (lambda a, b: a < b, ("float32", "float32"), "bool"),
    (lambda x: x * 1j, ("float32",), "complex64"),
    (lambda a, b: a * b, ("float16", "float16"), "float16"),
    (lambda a, b: a - b, ("uint8", "int8"), "int16"),     # NumPy 2 promotion of the inputs
    (lambda x: math.exp(x), ("float64",), "float64"),
], ids=range(8))
def test_result_dtype_follows_numpy_with_weak_literals(be, op, dtypes, expected):
    op = _ops_once(op)
    hosts = [np.ones(3, dt) for dt in dtypes]
    r = be.get(_run(be, op, *[be.put(h) for h in hosts]))
    assert r.dtype == np.dtype(expected)


_ONCE: dict = {}


def _ops_once(fn, **kw):
    """One user op per function for the whole run (compiled once, shared by backends)."""
    key = (fn, tuple(kw.items()))
    if key not in _ONCE:
        _ONCE[key] = jitops.elementwise(fn, **kw)
    return _ONCE[key]


def _double(v):
    return v * 2


def test_dtype_argument_overrides(be):
    x = np.arange(5, dtype=np.float64) + 0.25
    for op in (_ops_once(_double, dtype="float32"), _ops_once(_double)):
        r = be.get(_run(be, op, be.put(x), dtype=np.float32))
        assert r.dtype == np.float32
        np.testing.assert_array_equal(r, (x * 2).astype(np.float32))


def test_weak_scalar_operands(be):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = be.get(_run(be, axpb, be.put(x), 2.0, 1))
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r, x * 2 + 1)
    with pytest.raises(OverflowError):
        _run(be, axpb, be.put(np.ones(3, np.uint8)), 300, 1)


# --- modes and layouts --------------------------------------------------------------------------
def test_pdpd_with_n_operands(be, rng):
    x = _data(rng, (2, 3, 4, 5), "float32")
    w, b = _data(rng, (3,), "float32"), _data(rng, (3, 4), "float32")
    got = be.get(_run(be, axpb, be.put(x), be.put(w), be.put(b), broadcast="pdpd", axis=1))
    _check(got, x * w[None, :, None, None] + b[None, :, :, None])
    y = _data(rng, (4, 5), "float32")  # axis -1: each lower-rank operand right-aligned
    got = be.get(_run(be, axpb, be.put(x), be.put(y), be.put(y[0]), broadcast="pdpd"))
    _check(got, x * y + y[0])


def test_none_mode_and_shape_errors_name_operands(be):
    a, b = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    with pytest.raises(ValueError, match="operand"):
        _run(be, axpb, be.put(a), be.put(b), be.put(b), broadcast="none")
    with pytest.raises(ValueError, match=r"\(2,3\) \(4,\)"):
        _run(be, axpb, be.put(a), be.put(np.ones(4, np.float32)), 1.0)
    with pytest.raises(ValueError):
        _run(be, axpb, be.put(a), be.put(b), be.put(b), axis=0)  # axis only with pdpd


@pytest.mark.parametrize("view", ["transposed", "reversed", "strided", "0-d", "empty"])
def test_layouts(be, view, rng):
    base = _data(rng, (6, 4), "float64")
    other = _data(rng, (4, 6), "float64")
    fx = {"transposed": lambda a: a.T, "reversed": lambda a: a[::-1, ::-1].T,
          "strided": lambda a: a[::2].T, "0-d": lambda a: a[0, 0],
          "empty": lambda a: a[:0].T}[view]
    hx = fx(base)
    x = be.view(be.put(base), fx) if view != "0-d" else be.put(np.asarray(base[0, 0]))
    hy = {"strided": other[:, :3], "empty": other[:, :0]}.get(view, other)
    got = be.get(_run(be, mul_sub, x, be.put(np.ascontiguousarray(hy))))
    _check(got, np.asarray(hx) * hy - hx)


# --- out= and the overlap policy ----------------------------------------------------------------
@pytest.mark.parametrize("k", [0, 1, 2])
def test_out_may_be_any_input(be, k, rng):
    if not be.supports_out:
        pytest.skip("Dask results are new lazy arrays (out= is refused, see test_dask_refusals)")
    hosts = [_data(rng, (4, 5), "float64") for _ in range(3)]
    exp = hosts[0] * hosts[1] + hosts[2]
    arrays = [be.put(h) for h in hosts]
    r = _run(be, axpb, *arrays, out=arrays[k])
    assert r is arrays[k]
    _check(be.get(r), exp)


def test_out_overlapping_an_input_reads_the_input_as_it_was(be, rng):
    if not be.supports_out:
        pytest.skip("Dask results are new lazy arrays")
    h = _data(rng, (12,), "float64")
    exp = h[::-1] * 2.0 + h
    buf = be.put(h)
    rev = be.view(buf, lambda a: a[::-1])
    r = _run(be, axpb, rev, 2.0, buf, out=buf)
    _check(be.get(r), exp)


def test_out_checked_before_anything_is_written(be):
    if not be.supports_out:
        pytest.skip("Dask results are new lazy arrays")
    x = np.ones((2, 3), np.float32)
    out = be.empty((2, 3), np.float64)
    with pytest.raises(TypeError, match="dtype"):
        _run(be, axpb, be.put(x), 1.0, 2.0, out=out)
    bad_shape = be.empty((3, 2), np.float32)
    with pytest.raises(ValueError, match="shape"):
        _run(be, axpb, be.put(x), 1.0, 2.0, out=bad_shape)
    np.testing.assert_array_equal(be.get(out), np.full((2, 3), 7.0))


# --- errors -------------------------------------------------------------------------------------
def test_wrong_operand_count_and_bad_functions(be):
    with pytest.raises(TypeError, match="takes 3 operands, got 2"):
        _run(be, axpb, be.put(np.ones(2)), be.put(np.ones(2)))
    with pytest.raises(TypeError, match="positional"):
        jitops.elementwise(lambda *a: a[0])
    with pytest.raises(TypeError, match="at least one"):
        jitops.elementwise(lambda: 1.0)
    with pytest.raises(TypeError, match="expected a function"):
        jitops.elementwise(3)


def _uses_a_string(x):
    return x + "a"


def test_uncompilable_function_is_a_type_error_before_writing(be):
    op = jitops.elementwise(_uses_a_string)
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match=r"_uses_a_string.*float32"):
        _run(be, op, be.put(x))
    with pytest.raises(TypeError, match="must return numbers"):
        _run(be, jitops.elementwise(lambda v: np.zeros(2)), be.put(x))
    with pytest.raises(TypeError, match="object"):
        _run(be, axpb, np.array([object()] * 4), 1.0, 1.0)


def test_activations_match_act(be, rng):
    x = _data(rng, (5, 7), "float32") * 10
    y = _data(rng, (7,), "float32")
    for name in jitops.ACTIVATIONS:
        op = _ACT_OPS[name]
        got = be.get(_run(be, op, be.put(x), be.put(y)))
        exp = be.get(_run(be, jitops.subtract, be.put(x), be.put(y), act=name))
        np.testing.assert_array_equal(got, exp, err_msg=name)


def _act_of(fn):
    def f(a, b):
        return fn(a - b)

    return f


_ACT_OPS = {name: jitops.elementwise(_act_of(getattr(jitops.act, name)))
            for name in jitops.ACTIVATIONS}


def test_relu_affine(be, rng):
    x = _data(rng, (2, 3, 4), "float32")
    w, b = _data(rng, (3,), "float32"), _data(rng, (3,), "float32")
    got = be.get(_run(be, relu_affine, be.put(x), be.put(w), be.put(b), broadcast="pdpd",
                      axis=1))
    _check(got, np.maximum(x * w[:, None] + b[:, None], np.float32(0)))


# --- host only: parallel and tiled kernels, failures inside the kernel, the disk cache ---------
#: These do not depend on the backend under test: the CUDA-simulator process deselects them
#: (tests/test_cuda_sim.py), so they run once, in the main process.
host_only = pytest.mark.host_only


@host_only
def test_act_functions_from_python():
    assert jitops.act.relu(-2.5) == 0.0 and jitops.act.relu(3) == 3
    assert type(jitops.act.gelu(np.float32(1.0))) is np.float32
    assert jitops.act.sigmoid(0.0) == 0.5
    with pytest.raises(TypeError):
        jitops.act.relu("a")


@host_only
def test_scalar_operands_repeat_through_the_fast_path(monkeypatch, rng):
    # Python scalars are keyed by their type, NumPy scalars as the 0-d arrays they are: a
    # repeat with other values skips the pipeline and reads each value afresh.
    from jitops import dispatch

    calls = []
    real = dispatch.prepare
    monkeypatch.setattr(dispatch, "prepare", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = _data(rng, (40,), "float32")
    repeat.FAST.clear()
    for w, b in ((2.0, 1), (-0.5, 3), (7.25, -4)):
        r = axpb(x, w, b)
        assert r.dtype == np.float32
        np.testing.assert_array_equal(r, x * np.float32(w) + np.float32(b))
        r = axpb(x, np.float64(w), np.int8(b))  # strong: float64
        assert r.dtype == np.float64
        np.testing.assert_array_equal(r, x * np.float64(w) + np.float64(b))
    assert len(calls) == 2
    np.testing.assert_array_equal(axpb(np.ones(3, np.uint8), 2, 1), [3, 3, 3])
    with pytest.raises(OverflowError):  # a repeat still refuses an int that does not fit
        axpb(np.ones(3, np.uint8), 300, 1)


@host_only
@pytest.mark.parametrize("n", [8, 1 << 17])  # the serial driver, the parallel ones
def test_a_repeat_is_rechecked_by_the_kernel(n, rng):
    # A repeat hands the kernel the caller's arrays; the kernel checks alignment, out's
    # writeable flag and overlap itself and refuses (nothing written) so the pipeline decides.
    from jitops.cpu.kernels import binary as kernels

    assert kernels.FLAGS_OFFSET >= 0 or sys.implementation.name != "cpython"
    x, w, b = (rng.random(n) for _ in range(3))
    out = np.zeros(n)
    for _ in range(2):
        np.testing.assert_array_equal(axpb(x, w, b, out=out), x * w + b)
    # misaligned: same dtype, shape and strides, data pointer off by one byte
    raw = np.zeros(8 * n + 1, np.uint8)
    mis = raw[1:].view(np.float64)
    mis[:] = x * 3
    assert not mis.flags.aligned
    np.testing.assert_array_equal(axpb(mis, w, b, out=out), mis * w + b)
    np.testing.assert_array_equal(axpb(w, b, mis, out=out), w * b + mis)
    # overlapping out: the inputs as they were before the call
    buf = rng.random(n + 3)
    expect = buf[:n] * w + b
    np.testing.assert_array_equal(axpb(buf[:n], w, b, out=buf[3:]), expect)
    # an exact alias runs in place
    z = rng.random(n)
    expect = z * w + b
    assert axpb(z, w, b, out=z) is z
    np.testing.assert_array_equal(z, expect)
    # out made read-only after the call was remembered
    out[:] = 5.0
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        axpb(x, w, b, out=out)
    assert (out == 5.0).all()


@host_only
def test_user_kernel_takes_data_addresses_when_the_header_offset_is_unverified(rng):
    from jitops.core.pipeline import byte_extent
    from jitops.core.plan import make_plan
    from jitops.cpu import backend
    from jitops.cpu.kernels import binary as kernels
    from jitops.cpu.kernels import nary

    x, w, b = (rng.random((4, 6)) for _ in range(3))
    out = np.zeros((4, 6))
    plan = make_plan((x.shape,) * 3, (((6, 1)),) * 3, "numpy")
    meta = kernels.build_meta(plan, (8,) * 4, data_offset=-1)
    axpb(x, w, b)  # compiles the task
    spec = nary.UserSpec(axpb.key, (x.dtype,) * 3, x.dtype, x.dtype, x.dtype, axpb.cacheable)
    entry = backend.entry_point(nary.KERNELS["serial"], backend._SIG3)
    addr = lambda a: a.__array_interface__["data"][0]  # noqa: E731
    ptrs = np.array([addr(a) for a in (out, x, w, b)], np.int64)
    assert entry(nary.task_address(spec), addr(ptrs), addr(meta)) == kernels.OK
    np.testing.assert_array_equal(out, x * w + b)
    # and refuses an overlap it was told to check, writing nothing
    ext = tuple(byte_extent(0, a.shape, a.strides, 8) for a in (out, out, w, b))
    meta = kernels.build_meta(plan, (8,) * 4, ext, (True, False, False, False), data_offset=-1)
    ptrs = np.array([addr(out) + 8, addr(out), addr(w), addr(b)], np.int64)
    before = out.copy()
    assert entry(nary.task_address(spec), addr(ptrs), addr(meta)) == kernels.OVERLAP
    np.testing.assert_array_equal(out, before)


@host_only
@pytest.mark.parametrize("shape, fx", [
    ((700, 300), None),                       # contiguous, parallel
    ((300, 700), lambda a: a.T),             # transposed: the tiled variant
    ((64, 3000), lambda a: a[:, ::-2]),      # reversed and strided, parallel
])
def test_cpu_parallel_and_tiled(shape, fx, rng):
    from jitops.core.pipeline import prepare
    from jitops.cpu import backend

    base = _data(rng, shape, "float32")
    x = fx(base) if fx else base
    w = _data(rng, x.shape[-1:], "float32")
    y = _data(rng, x.shape, "float32")
    got = axpb(x, w, y)
    np.testing.assert_array_equal(got, x * w + y)
    if fx is not None and shape == (300, 700):
        call = prepare(backend.MEMORY, axpb, "axpb", (x, w, y), "numpy", -1, None, None)
        assert call.plan.variant == TILED
    # the serial kernel gives the same answer
    from jitops.cpu.threads import parallel

    with parallel.serial():
        np.testing.assert_array_equal(axpb(x, w, y), got)


# --- tiled tasks stage inputs that run across their rows ---------------------------------------
STAGED_LAYOUTS = {  # an input's view of a (M, N) array, as an (N, M) operand
    "transposed": lambda a: a.T,
    "reversed rows": lambda a: a[::-1].T,
    "strided rows": lambda a: a[:, ::2].T,  # not unit-stride down the tile: element by element
    "offset": lambda a: a[1:-3, 5:].T,
}


@host_only
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "complex128"])
@pytest.mark.parametrize("layout", sorted(STAGED_LAYOUTS))
@pytest.mark.parametrize("shape", [(83, 70), (300, 517)])  # serial, parallel; partial tiles
def test_tiled_user_op_stages_inputs_across_rows(dtype, layout, shape, rng):
    """A tiled task copies each of its first ``nary.STAGED_INPUTS`` inputs that run across
    the tile's rows into a stack tile (kernels._stage), whatever the input's position and
    element width, and rows then read it contiguously; the values are the oracle's."""
    fx = STAGED_LAYOUTS[layout]
    a = fx(_data(rng, shape[::-1], dtype))
    b = _data(rng, a.shape, dtype)
    c = fx(_data(rng, shape[::-1], dtype))
    for args in ((a, b, b), (b, a, b), (b, b, a), (a, c, a)):
        _check(axpb(*args), _oracle(lambda x, w, y: x * w + y, args, args[0].dtype))
        out = np.zeros(a.shape, a.dtype)
        assert axpb(*args, out=out) is out
        _check(out, _oracle(lambda x, w, y: x * w + y, args, a.dtype))


@host_only
def test_tiled_user_op_past_the_staged_inputs_and_out_transposed(rng):
    """Inputs after the first ``nary.STAGED_INPUTS`` are read in place at their strides; a
    transposed out is written at its strides (its rows stride across the tile)."""
    from jitops.cpu.kernels import nary

    assert nary.STAGED_INPUTS == 4
    xs = [_data(rng, (90, 77), "float64").T for _ in range(5)]  # all five across the rows
    _check(five(*xs), _oracle(ARITIES[5][1], xs, np.dtype("float64")))
    out_t = np.zeros((90, 77)).T
    ys = [np.ascontiguousarray(x) for x in xs]
    five(*ys[:4], xs[4], out=out_t)
    _check(out_t, _oracle(ARITIES[5][1], ys[:4] + xs[4:], np.dtype("float64")))


@host_only
def test_tiled_user_op_staging_is_compiled_in():
    """The staging copy is in a user op's task: its 8 x 8 transposes hint the lines they
    read next (kernels.transpose_block's prefetches, the only ones a user task has): a
    speed path the values cannot show."""
    from jitops.cpu.compile import registries
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels import nary

    dt = np.dtype(np.float32)
    axpb(*[np.ones((2, 2), dt)] * 3)  # registers the function
    spec = nary.UserSpec(axpb.key, (dt,) * 3, dt, dt, dt, axpb.cacheable)
    sig = (spec.numba_type,) + (nary._I64,) * 3

    def prefetches():
        task = inner(nary.user_task.py_func)
        registries.compile_with(lambda: task.compile(sig))
        return task.inspect_llvm(sig).count("call void @llvm.prefetch")

    assert prefetches() > 0


def _complex_div(a, b):
    return a / b


@host_only
def test_an_exception_inside_the_kernel_raises_never_leaves_elements_unwritten():
    op = jitops.elementwise(_complex_div)
    a = np.full(200_000, 1 + 1j)
    b = np.ones(200_000, complex)
    np.testing.assert_array_equal(op(a, b), a)
    b[150_000] = 0  # Numba's complex division raises ZeroDivisionError inside the kernel
    out = np.zeros_like(a)
    with pytest.raises(RuntimeError, match="raised an exception inside the compiled kernel"):
        op(a, b, out=out)

    @jitops.elementwise
    def checked(v):
        if v < 0:
            raise ValueError("negative")
        return v

    with pytest.raises(RuntimeError, match="checked"):
        checked(np.array([1.0, -1.0]))


@host_only
def test_lambdas_and_closures_compile_per_process():
    k = 3.0
    op = jitops.elementwise(lambda v: v * k)
    np.testing.assert_array_equal(op(np.arange(4.0)), np.arange(4.0) * 3)
    assert not op.cacheable and axpb.cacheable


@host_only
def test_module_level_user_op_is_loaded_from_the_disk_cache_in_a_new_process(tmp_path):
    (tmp_path / "myops.py").write_text(textwrap.dedent("""
        import jitops

        @jitops.elementwise
        def fused(x, w, b):
            return jitops.act.relu(x * w + b)
    """))
    code = textwrap.dedent("""
        import numpy as np, myops
        from jitops.cpu.kernels import nary
        x = np.linspace(-1, 1, 10).astype(np.float32)
        r = myops.fused(x, 2.0, np.float32(0.5))
        assert np.array_equal(r, np.maximum(x * 2 + 0.5, 0).astype(np.float32))
        s = nary._utask_cached.stats
        print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))
    """)
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert runs[0].stdout.split() == ["0", "1"]   # compiled and saved
    assert runs[1].stdout.split() == ["1", "0"]   # loaded, not compiled


@host_only
def test_dask_refusals_and_laziness():
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.arange(12.0).reshape(3, 4), chunks=(2, 2))
    r = axpb(x, 2.0, np.ones(4))
    assert isinstance(r, da.Array)
    np.testing.assert_array_equal(r.compute(), np.arange(12.0).reshape(3, 4) * 2 + 1)
    assert axpb(x, 2.0, np.ones(4)).name == r.name  # deterministic token
    with pytest.raises(TypeError, match="out="):
        axpb(x, 2.0, 1.0, out=np.empty((3, 4)))
    with pytest.raises(ValueError):
        axpb(x, np.ones(5), 1.0)
    import pickle

    assert pickle.loads(pickle.dumps(axpb)) is axpb
