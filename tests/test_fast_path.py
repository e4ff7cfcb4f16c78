"""The repeated-call fast path and the tiled variant: same answers as the careful path.

A repeat of a call with the same dtypes, shapes and strides skips checking and planning and
goes straight to the compiled kernel, which re-checks what can differ between such calls
(data alignment, overlap of ``out`` with the inputs) and hands the call back when a check
fails. These tests make each of those differ on the *second* call.
"""

import platform
import warnings

import numpy as np
import pytest

import jitops
from jitops import dispatch
from jitops.core import config as _config
from jitops.core.pipeline import byte_extent, prepare
from jitops.core.plan import TILED, make_plan
from jitops.cpu import backend
from jitops.cpu.kernels import binary as _cpu
from jitops.cpu.kernels.layout import META
from jitops.cpu.repeat import memo as repeat
from jitops.cpu.threads import pool

from .helpers import counting_prepare


def _addr(a):
    return a.__array_interface__["data"][0]


def test_a_repeat_is_served_from_the_fast_path(rng):
    x, y = rng.random((5, 7)), rng.random(7)
    out = np.empty((5, 7))
    repeat.FAST.clear()
    jitops.subtract(x, y, out=out)
    assert len(repeat.FAST) == 1
    launch = next(iter(repeat.FAST.values()))
    x2, y2 = rng.random((5, 7)), rng.random(7)
    r = jitops.subtract(x2, y2, out=out)
    assert r is out and len(repeat.FAST) == 1
    np.testing.assert_array_equal(out, x2 - y2)
    assert next(iter(repeat.FAST.values())) is launch
    # new outputs too, with the layout a new output gets (order="K")
    f = np.asfortranarray(rng.random((6, 9)))
    for _ in range(2):
        r = jitops.add(f, f)
        assert r.flags.f_contiguous
        np.testing.assert_array_equal(r, f + f)


def test_fast_path_rechecks_overlap(rng):
    buf = rng.random(20)
    x, y, out = rng.random(8), rng.random(8), np.empty(8)
    jitops.subtract(x, y, out=out)  # caches this geometry: (8,) float64, stride 8
    expect = np.subtract(buf[0:8], y)
    got = jitops.subtract(buf[0:8], y, out=buf[1:9])  # same geometry, now overlapping
    np.testing.assert_array_equal(got, expect)
    # an exact alias still runs in place
    z = rng.random(8)
    expect = z - y
    assert jitops.subtract(z, y, out=z) is z
    np.testing.assert_array_equal(z, expect)


def test_fast_path_rechecks_alignment(rng):
    y, out = rng.random(10), np.empty(10)
    jitops.add(np.arange(10.0), y, out=out)
    raw = np.zeros(8 * 10 + 1, np.uint8)
    mis = raw[1:].view(np.float64)  # same dtype, shape and strides; data pointer off by one
    mis[:] = np.arange(10.0) * 3
    assert not mis.flags.aligned
    np.testing.assert_array_equal(jitops.add(mis, y, out=out), mis + y)
    np.testing.assert_array_equal(jitops.add(y, mis, out=out), y + mis)


@pytest.mark.parametrize("n", [4, 1 << 17])  # the serial driver, the parallel ones
def test_fast_path_still_refuses_a_read_only_out(n, rng):
    # on CPython the kernel reads the flag from the array object (a repeat never asks Python)
    assert _cpu.FLAGS_OFFSET >= 0 or platform.python_implementation() != "CPython"
    x, out = rng.random(n), np.zeros(n)
    jitops.multiply(x, x, out=out)
    jitops.multiply(x, x, out=out)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        jitops.multiply(x, -x, out=out)
    np.testing.assert_array_equal(out, x * x)  # untouched by the refused call
    view = out[:]  # a read-only view of it, then a writeable array of the same geometry
    with pytest.raises(ValueError, match="read-only"):
        jitops.multiply(x, -x, out=view)
    fresh = np.zeros(n)
    jitops.multiply(x, -x, out=fresh)
    np.testing.assert_array_equal(fresh, x * -x)


def test_fast_path_keys_do_not_confuse_options(rng):
    x, y = rng.random((3, 4)), rng.random(3)
    a = jitops.subtract(x, y, broadcast="pdpd", axis=0)
    np.testing.assert_array_equal(a, x - y[:, None])
    with pytest.raises(ValueError):  # numpy mode: (3,4) and (3,) do not broadcast
        jitops.subtract(x, y)
    with pytest.raises(TypeError):  # a bool axis is refused even after axis=1 was cached
        jitops.subtract(x, rng.random(4), broadcast="pdpd", axis=True)
    np.testing.assert_array_equal(jitops.subtract(x, y, broadcast="pdpd", axis=0, act="relu"),
                                  np.maximum(x - y[:, None], 0))
    with pytest.raises(ValueError, match="broadcast"):
        jitops.subtract(x, y, broadcast=["pdpd"], axis=0)


def test_kernel_takes_data_addresses_when_the_header_offset_is_unverified(rng):
    x, y = rng.random((4, 6)), rng.random((4, 6))
    out = np.zeros((4, 6))
    plan = make_plan((x.shape, y.shape), ((6, 1), (6, 1)), "numpy")
    meta = _cpu.build_meta(plan, (8, 8, 8), data_offset=-1)
    spec = jitops.cpu.kernels.spec.KernelSpec("subtract", None, x.dtype, y.dtype, out.dtype,
                                              out.dtype)
    entry = backend.entry_point(_cpu.KERNELS["serial"])
    status = entry(_cpu.task_address(spec), _addr(out), _addr(x), _addr(y),
                   _addr(meta))
    assert status == _cpu.OK
    np.testing.assert_array_equal(out, x - y)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_kernel_refuses_a_misaligned_operand_without_writing(which, rng):
    """Out, x or y whose data pointer is off its dtype's alignment (a view one byte into a
    buffer): status MISALIGNED, nothing written; aligned, the same call runs."""
    raws = [np.zeros(8 * 10 + 1, np.uint8) for _ in range(3)]
    arrs = [r[1:].view(np.float64) if k == which else r[:80].view(np.float64)
            for k, r in enumerate(raws)]
    out, x, y = arrs
    x[:], y[:] = rng.random(10), rng.random(10)
    out[:] = 7.0
    plan = make_plan(((10,), (10,)), ((1,), (1,)), "numpy")
    meta = _cpu.build_meta(plan, (8, 8, 8))
    spec = jitops.cpu.kernels.spec.KernelSpec("add", None, x.dtype, x.dtype, x.dtype, x.dtype)
    entry = backend.entry_point(_cpu.KERNELS["serial"])
    refs = [backend.ref(a) for a in arrs]
    assert entry(_cpu.task_address(spec), *refs, _addr(meta)) == _cpu.MISALIGNED
    assert (out == 7.0).all()
    loose = _cpu.build_meta(plan, (1, 1, 1))  # what the kernel is told to require
    assert entry(_cpu.task_address(spec), *refs, _addr(loose)) == _cpu.OK
    np.testing.assert_array_equal(out, x + y)


def test_kernel_refuses_overlap_without_writing(rng):
    buf = rng.random(12)
    before = buf.copy()
    x, out = buf[:10], buf[2:]
    plan = make_plan(((10,), (10,)), ((1,), (1,)), "numpy", -1, (1,))
    ext = tuple(byte_extent(0, a.shape, a.strides, 8) for a in (out, x, x))
    meta = _cpu.build_meta(plan, (8, 8, 8), ext, (True, True, True))
    spec = jitops.cpu.kernels.spec.KernelSpec("add", None, x.dtype, x.dtype, x.dtype, x.dtype)
    entry = backend.entry_point(_cpu.KERNELS["serial"])
    assert entry(_cpu.task_address(spec), backend.ref(out), backend.ref(x), backend.ref(x),
                 _addr(meta)) == _cpu.OVERLAP
    np.testing.assert_array_equal(buf, before)


# --- tiled traversal ------------------------------------------------------------------------
def _variant(*operands, out=None) -> str:
    """The loop variant a call of jitops.add on ``operands`` is planned with."""
    return prepare(backend.MEMORY, "add", "add", operands, "numpy", -1, None, out).plan.variant


TRANSPOSED = [  # (x's base shape, view of it), (y's base shape, view of it)
    ((64, 64), lambda a: a.T, (64, 64), lambda a: a),
    ((130, 100), lambda a: a.T, (100, 130), lambda a: a),  # not a multiple of the tile
    ((100, 130), lambda a: a, (130, 100), lambda a: a.T),
    ((3, 90, 70), lambda a: a.transpose(0, 2, 1), (3, 70, 90), lambda a: a),  # an outer dim
    ((500, 300), lambda a: a.T, (300, 500), lambda a: a[::-1]),  # parallel, reversed rows
]


@pytest.mark.parametrize("xs,fx,ys,fy", TRANSPOSED)
@pytest.mark.parametrize("dtype", ["float32", "int16", "complex128"])
def test_tiled_matches_numpy(xs, fx, ys, fy, dtype, rng, tile_every_width):
    x = fx((rng.standard_normal(xs) * 9).astype(dtype))
    y = fy((rng.standard_normal(ys) * 9).astype(dtype))
    assert _variant(x, y) == TILED
    np.testing.assert_array_equal(jitops.subtract(x, y), x - y)
    out = np.zeros(x.shape, x.dtype)
    np.testing.assert_array_equal(jitops.add(x, y, out=out), x + y)
    # transposed out, C inputs
    out_t = np.zeros(x.shape[::-1], x.dtype).T
    np.testing.assert_array_equal(jitops.multiply(np.ascontiguousarray(x), y, out=out_t), x * y)


@pytest.mark.parametrize("tile", [(1, 1), (3, 5), (12, 40), (64, 8), (8, 512), (5000, 5000)])
def test_tiled_any_tile_shape(tile, rng, monkeypatch):
    """Any tile shape (one larger than a task's stack holds is cut down to fit), with one
    input staged from across the rows, both staged, a reversed one, and a transposed out."""
    monkeypatch.setattr(_config, "TILE", tile)
    repeat.FAST.clear()
    backend.clear_launches()
    x = rng.random((90, 77)).astype(np.float32)
    y = rng.random((77, 90)).astype(np.float32)
    x2 = rng.random((90, 77)).astype(np.float32)
    np.testing.assert_array_equal(jitops.subtract(x.T, y), x.T - y)
    np.testing.assert_array_equal(jitops.subtract(y, x.T[::-1]), y - x.T[::-1])
    out = np.full((77, 90), np.nan, np.float32)
    np.testing.assert_array_equal(jitops.subtract(x.T, x2.T, out=out), x.T - x2.T)
    out_t = np.full((90, 77), np.nan, np.float32).T
    np.testing.assert_array_equal(jitops.subtract(y, x.T, out=out_t), y - x.T)
    repeat.FAST.clear()
    backend.clear_launches()


def test_tiled_in_place_over_its_own_transpose(rng, tile_every_width):
    a = rng.random((96, 96))
    assert _variant(a, a.T) == TILED
    expect = a - a.T
    r = jitops.subtract(a, a.T, out=a)  # overlapping, not an alias: reads from a copy
    assert r is a
    np.testing.assert_array_equal(a, expect)


def test_one_driver_signature_for_every_op_and_dtype(rng):
    """The drivers are spec-free (they call the spec's compiled task through its address):
    every op and dtype shares one compiled serial and one parallel driver."""
    big = rng.random(2 * _config.PARALLEL_THRESHOLD)
    for op in ("add", "fmin", "multiply"):
        for dt in ("float32", "int16", "complex64"):
            if op == "fmin" and dt == "complex64":
                continue
            a = big.astype(dt)
            np.testing.assert_array_equal(getattr(jitops, op)(a[:100], a[:100]),
                                          getattr(np, op)(a[:100], a[:100]))
            np.testing.assert_array_equal(getattr(jitops, op)(a, a), getattr(np, op)(a, a))
    assert len(_cpu.KERNELS["serial"].signatures) == 1
    assert len(_cpu.KERNELS["pooled" if pool.AVAILABLE else "parallel"].signatures) == 1
    assert len(_cpu._task.signatures) >= 8


def test_weak_scalars_repeat_through_the_fast_path(rng):
    x = (rng.standard_normal(20) * 50).astype(np.int16)
    out = np.empty(20, np.int16)
    repeat.FAST.clear()
    for v in (3, -7, 0, 32767):  # one cache entry serves every value of the same type
        np.testing.assert_array_equal(jitops.add(x, v, out=out), np.add(x, v, out=np.empty_like(x)))
        np.testing.assert_array_equal(jitops.subtract(v, x), np.subtract(v, x))
    assert len(repeat.FAST) == 2
    with pytest.raises(OverflowError, match="out of bounds for int16"):  # still refused
        jitops.add(x, 40000, out=out)
    f = rng.random(5).astype(np.float32)
    for v in (2.5, 1e300, True, 1 + 2j):
        with np.errstate(over="ignore"):  # 1e300 -> float32 inf warns, in NumPy as here
            got, exp = jitops.multiply(f, v), np.multiply(f, v)
        assert got.dtype == exp.dtype
        np.testing.assert_array_equal(got, exp)


# the fast path's mechanics per kind of scalar; promotion itself is tested on the careful
# path (test_ops, test_values), and each pair here compiles kernels (the suite's time budget)
@pytest.mark.parametrize("scalar, dtype", [
    (np.float32, "float32"), (np.float64, "float32"), (np.int8, "int16"),
    (np.uint16, "int16"), (np.bool_, "float16"), (np.complex64, "float32"),
])
def test_numpy_scalars_repeat_through_the_fast_path(scalar, dtype, rng, monkeypatch):
    # x - x.mean() passes a NumPy scalar: a strong 0-d operand (NEP 50), which the careful
    # path turned into a 0-d array on every call (~50 us). As a 0-d array it repeats on the
    # fast path, keyed by its dtype, each call's value read afresh.
    x = (rng.standard_normal(33) * 20).astype(dtype)
    calls = counting_prepare(monkeypatch)
    repeat.FAST.clear()
    for k, v in enumerate((3, 0, 1, 7)):
        s = scalar(v)
        for got, exp in ((jitops.subtract(x, s), np.subtract(x, s)),
                         (jitops.multiply(s, x), np.multiply(s, x))):
            assert got.dtype == exp.dtype and got.shape == exp.shape
            np.testing.assert_array_equal(got, exp)
        out = np.empty_like(exp)
        assert jitops.multiply(s, x, out=out) is out
        np.testing.assert_array_equal(out, exp)
        assert len(calls) == 3  # the first value's three calls, then none
    assert len(repeat.FAST) == 3  # x - s, s * x, s * x with out=


def test_numpy_scalar_errors_are_the_careful_paths():
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="y"):
        jitops.add(x, np.str_("a"))
    with pytest.raises(TypeError, match="x"):
        jitops.add(np.datetime64(1, "s"), x)
    # two NumPy scalars: a 0-d result, as from two 0-d arrays
    r = jitops.add(np.float32(1), np.float32(2))
    assert r.shape == () and r.dtype == np.float32 and r == 3


@pytest.mark.parametrize("dtype", ["int32", "uint64"])  # signed, unsigned division
def test_integer_elementwise_div_repeats_with_its_zero_check(dtype, rng, monkeypatch):
    # Integer elementwise_div refuses a zero divisor before writing; its repeats take the fast
    # path, which checks y for a zero first and hands such a call to the pipeline to raise.
    x = rng.integers(0, 100, 50).astype(dtype)
    y = rng.integers(1, 9, 50).astype(dtype)
    out = np.full(50, 77, dtype)
    calls = counting_prepare(monkeypatch)
    repeat.FAST.clear()
    for _ in range(3):
        np.testing.assert_array_equal(jitops.elementwise_div(x, y, out=out), x // y)
        np.testing.assert_array_equal(jitops.elementwise_div(x, 3), x // 3)
    assert len(calls) == 2
    y0 = y.copy()
    y0[17] = 0
    out[:] = 77
    with pytest.raises(ZeroDivisionError, match="y contains 0"):
        jitops.elementwise_div(x, y0, out=out)
    assert (out == 77).all()  # nothing written
    with pytest.raises(ZeroDivisionError, match="y contains 0"):
        jitops.elementwise_div(x, 0)
    np.testing.assert_array_equal(jitops.elementwise_div(x, y, out=out), x // y)


# --- the memo: a repeat with the very same objects ------------------------------------------
def _in_place(a, **attrs):
    """Change an array's shape or dtype in place -- exactly what the memo must notice. NumPy
    2.5 deprecates these setters (a view is the new way), but an array a user changed so is
    still to be computed right; only that warning is silenced, nothing else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning,
                                message=".*(shape|dtype).*")
        for name, value in attrs.items():
            setattr(a, name, value)


def test_a_repeat_with_the_same_objects_checks_they_are_still_those_arrays(rng):
    # The last serial repeat is remembered by its arguments' identities; the kernel then
    # compares each object's type, dtype object, shape and strides with the remembered ones,
    # so an array changed in place since is planned afresh, never computed as it was.
    x, y, out = rng.random(8), rng.random(8), np.empty(8)
    for _ in range(3):
        np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    assert any(m.latest is not None for m in repeat.MEMOS)
    _in_place(x, shape=(2, 4))  # in place: (2, 4) and (8,) do not broadcast
    with pytest.raises(ValueError, match="broadcast"):
        jitops.subtract(x, y, out=out)
    _in_place(x, shape=(8,))
    np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    _in_place(x, dtype=np.int64)  # the same bytes read as int64: NumPy's answer for that
    np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    y2 = y.reshape(8, 1)
    _in_place(y2, shape=(8,))  # a new object, its strides as y's: a fresh key, the same answer
    np.testing.assert_array_equal(jitops.subtract(x, y2, out=out), x - y2)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        jitops.subtract(x, y2, out=out)
    # new results, and options that differ by identity only
    for _ in range(3):
        np.testing.assert_array_equal(jitops.add(x, y), x + y)
    # the same objects with other options: numpy mode and pdpd at axis 0 differ on (3, 3)
    a, b = rng.random((3, 3)), rng.random(3)
    for _ in range(3):
        np.testing.assert_array_equal(jitops.subtract(a, b), a - b[None, :])
        np.testing.assert_array_equal(jitops.subtract(a, b), a - b[None, :])
        np.testing.assert_array_equal(jitops.subtract(a, b, broadcast="pdpd", axis=0),
                                      a - b[:, None])
        np.testing.assert_array_equal(jitops.subtract(a, b, act="relu"),
                                      np.maximum(a - b[None, :], 0))


def _parallel_memo():
    """The memo entries of parallel repeats (threads > 1) now held."""
    return [m.latest for m in repeat.MEMOS if m.latest is not None and m.latest.threads > 1]


def test_a_parallel_repeat_with_the_same_objects_is_checked_the_same_way(rng, monkeypatch):
    # A parallel repeat is remembered as a serial one is (its meta balanced for the thread
    # count it ran with), so the kernel's header checks guard it the same way.
    if jitops.get_num_threads() < 2 or _cpu.HEADER_OFFSETS is None:
        pytest.skip("needs two threads and verified ndarray headers")
    n = 2 * _config.PARALLEL_THRESHOLD
    x, y, out = rng.random(n), rng.random(n), np.empty(n)
    # launches are counted below: never the serial run while the workers sleep (test_pool)
    monkeypatch.setattr(repeat, "ASLEEP_SERIAL_MAX", 0)
    dispatch.clear()
    for _ in range(3):
        np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    assert _parallel_memo(), "the parallel repeat was not remembered"
    _in_place(x, shape=(2, n // 2))  # in place: no longer broadcasts with y
    with pytest.raises(ValueError, match="broadcast"):
        jitops.subtract(x, y, out=out)
    _in_place(x, shape=(n,))
    np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    _in_place(x, dtype=np.int64)  # the same bytes read as int64: NumPy's answer for that
    np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    _in_place(x, dtype=np.float64)
    np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    seen = []
    real = backend.parallel.launch
    spy = lambda *a: seen.append(a) or real(*a)  # noqa: E731
    monkeypatch.setattr(backend.parallel, "launch", spy)  # the keyed path's
    monkeypatch.setattr(repeat, "_launch", spy)  # the memo's
    np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    assert len(seen) == 1
    with jitops.threads(1):  # another count: not the remembered launch's
        np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    assert len(seen) == 1, "threads(1) ran a parallel job"
    monkeypatch.undo()
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        jitops.subtract(x, y, out=out)
    for _ in range(3):  # new results (recycled memory once large enough) take it too
        np.testing.assert_array_equal(jitops.add(x, y), x + y)
    a = rng.random((n // 64, 64))
    b = rng.random(n // 64)
    for _ in range(3):  # same objects, other options
        np.testing.assert_array_equal(jitops.subtract(a, b, broadcast="pdpd", axis=0),
                                      a - b[:, None])
        np.testing.assert_array_equal(jitops.subtract(a, a), np.zeros_like(a))
        np.testing.assert_array_equal(jitops.subtract(a, b[:64]), a - b[None, :64])


@jitops.elementwise
def _mul_add(a, b, c):
    return a * b + c


def test_small_elements_need_more_of_them_to_run_parallel(rng, monkeypatch):
    """A call runs as a parallel job from ``PARALLEL_THRESHOLD`` elements and as many times
    ``PARALLEL_BYTES`` bytes moved (its output and the inputs it reads in full:
    config.parallel_size): one element fewer runs serially, for the built-ins (a scalar
    operand moves nothing) and a user op, first call and repeats alike."""
    if jitops.get_num_threads() < 2:
        pytest.skip("needs two threads")
    seen = []
    real = backend.parallel.launch
    spy = lambda *a: seen.append(a) or real(*a)  # noqa: E731
    monkeypatch.setattr(backend.parallel, "launch", spy)  # the keyed path's
    monkeypatch.setattr(repeat, "_launch", spy)  # the memo's
    monkeypatch.setattr(repeat, "ASLEEP_SERIAL_MAX", 0)  # no serial run while asleep
    monkeypatch.setattr(_config, "PARALLEL_BYTES", 8)
    dispatch.clear()
    backend.clear_launches()
    t = _config.PARALLEL_THRESHOLD
    cases = [("int8", True, 4 * t), ("int8", False, -(-8 * t // 3)),
             ("int16", False, -(-8 * t // 6)), ("float32", True, t), ("float32", False, t),
             ("float64", True, t)]
    for dtype, scalar, size in cases:
        for n, parallel in ((size - 1, False), (size, True)):
            x = rng.integers(-9, 9, n).astype(dtype)
            y = np.asarray(3, dtype) if scalar else rng.integers(-9, 9, n).astype(dtype)
            out = np.empty(n, dtype)
            for _ in range(3):
                seen.clear()
                np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
                assert bool(seen) == parallel, (dtype, scalar, n)
    for n, parallel in ((t - 1, False), (t, True)):  # three int16 inputs, an int16 result
        a, b, c = (rng.integers(-9, 9, n).astype(np.int16) for _ in range(3))
        for _ in range(2):
            seen.clear()
            np.testing.assert_array_equal(_mul_add(a, b, c), a * b + c)
            assert bool(seen) == parallel, n
    size = -(-8 * t // 3)  # int8: two inputs read in full, a scalar, the result
    for n, parallel in ((size - 1, False), (size, True)):
        a, b = rng.integers(-9, 9, n).astype(np.int8), np.int8(3)
        for _ in range(2):
            seen.clear()
            np.testing.assert_array_equal(_mul_add(a, b, a), a * b + a)
            assert bool(seen) == parallel, n
    dispatch.clear()
    backend.clear_launches()


def test_a_parallel_repeat_asks_for_the_count_only_when_it_may_have_changed(rng,
                                                                              monkeypatch):
    # A remembered parallel repeat takes its thread count from the stamp it was recorded
    # with (jitops.cpu.threads.parallel.STAMP); anything that may change a count moves the stamp on,
    # and the repeat then asks, follows the answer and, where it is still its count, takes
    # the new stamp. Every count below is checked by whether a parallel job was launched.
    if jitops.get_num_threads() < 2 or _cpu.HEADER_OFFSETS is None:
        pytest.skip("needs two threads and verified ndarray headers")
    import threading

    from jitops.cpu.threads import parallel

    n = 2 * _config.PARALLEL_THRESHOLD
    x, y, out = rng.random(n), rng.random(n), np.empty(n)
    count = jitops.get_num_threads()
    # launches are counted below: never the serial run while the workers sleep (test_pool)
    monkeypatch.setattr(repeat, "ASLEEP_SERIAL_MAX", 0)
    dispatch.clear()
    for _ in range(3):
        np.testing.assert_array_equal(jitops.subtract(x, y, out=out), x - y)
    assert _parallel_memo(), "the parallel repeat was not remembered"
    asked, launched = [], []
    real_count, real_launch = repeat._num_threads, repeat._launch
    monkeypatch.setattr(repeat, "_num_threads", lambda: asked.append(1) or real_count())
    monkeypatch.setattr(repeat, "_launch", lambda *a: launched.append(
        threading.get_ident()) or real_launch(*a))

    def again():
        out[:] = np.nan
        assert jitops.subtract(x, y, out=out) is out
        np.testing.assert_array_equal(out, x - y)

    again()
    assert (len(asked), len(launched)) == (0, 1)  # the stamp: not asked
    try:
        jitops.set_num_threads(1)
        again()  # asked, and serial: the keyed path's serial launch, not the memo's
        assert asked and len(launched) == 1
    finally:
        jitops.set_num_threads(count)
    del asked[:], launched[:]
    again()
    again()
    assert len(launched) == 2
    # another thread inside threads(1): this thread's repeats ask (and stay parallel) while
    # the block is open, and the other thread's own repeat of the same call runs serially
    opened, close, done = threading.Event(), threading.Event(), []

    def other():
        with jitops.threads(1):
            opened.set()
            close.wait(30)
            again()
            done.append(len(launched))

    t = threading.Thread(target=other)
    t.start()
    try:
        assert opened.wait(30)
        del asked[:], launched[:]
        again()
        again()
        assert len(asked) == 2 and len(launched) == 2
    finally:
        close.set()
        t.join(30)
    assert done == [2], "the thread inside threads(1) launched a parallel job"
    del asked[:], launched[:]
    # the block closed: the other thread's serial repeat (remembered last, and checking its
    # count of one) asks and is passed over, the parallel one before it asks and takes the
    # new stamp; then neither asks
    again()
    assert len(asked) == 2 and len(launched) == 1
    again()
    assert len(asked) == 2 and len(launched) == 2
    assert parallel.STAMP[0] is not None


def test_header_checks_refuse_any_other_object_without_writing(rng):
    # The kernel side of the memo: given objects that are not the remembered arrays (another
    # dtype object, shape, strides, a subclass, not an array at all), MISMATCH, nothing written.
    if _cpu.HEADER_OFFSETS is None:
        assert _cpu.header_checks(np.zeros(META.SIZE, np.int64), ()) is None
        return
    x, y, out = rng.random((4, 6)), rng.random((4, 6)), np.zeros((4, 6))
    x.flags.writeable = False  # flags other than out's are not part of it
    plan = make_plan((x.shape, y.shape), ((6, 1), (6, 1)), "numpy")
    meta = _cpu.header_checks(_cpu.build_meta(plan, (8, 8, 8)), (out, x, y))
    spec = jitops.cpu.kernels.spec.KernelSpec("subtract", None, x.dtype, y.dtype, out.dtype,
                                              out.dtype)
    entry = backend.entry_point(_cpu.KERNELS["serial"])
    task = _cpu.task_address(spec)
    assert entry(task, id(out), id(x), id(y), _addr(meta)) == _cpu.OK
    np.testing.assert_array_equal(out, x - y)
    out[:] = 0
    others = [
        np.asfortranarray(x),
        x.reshape(6, 4),
        x.reshape(4, 6, 1),
        x.view(">f8").byteswap(),  # another dtype object
        x.view(np.int64),
        np.ma.masked_array(x),
        x.view(np.matrix),
        np.float64(1.0),
        3.5,
        (4, 6),
    ]
    for o in others:
        for args in ((id(out), id(o), id(y)), (id(out), id(x), id(o)), (id(o), id(x), id(y))):
            assert entry(task, *args, _addr(meta)) == _cpu.MISMATCH, type(o)
    assert (out == 0).all()


@pytest.mark.parametrize("dtype", ["bool", "int8", "float16", "float64", "complex64"])
def test_tiled_staging_every_element_width(dtype, rng, tile_every_width):
    """The staged input moves through registers in 8 x 8 blocks (kernels.transpose_block,
    one piece of IR per element width), the columns and rows past the last whole block
    element by element; inputs whose rows are not unit-stride are staged element by element.
    """
    x = (rng.standard_normal((83, 70)) * 9).astype(dtype)
    y = (rng.standard_normal((70, 83)) * 9).astype(dtype)
    assert _variant(x.T, y) == TILED
    for xt in (x.T, x[::-1].T, x[:, ::2].T, x[1:-3, 5:].T):
        yv = y[: xt.shape[0], : xt.shape[1]]
        np.testing.assert_array_equal(jitops.add(xt, yv), np.add(xt, yv))
        out = np.zeros(xt.shape, x.dtype)
        np.testing.assert_array_equal(jitops.multiply(yv, xt, out=out), np.multiply(yv, xt))


def _at(rng, shape, dtype, skip):
    """A C-ordered array of ``shape`` whose data start ``skip`` elements past a 64-byte line."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.empty(n * dt.itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + skip * dt.itemsize
    a = raw[start:start + n * dt.itemsize].view(dt).reshape(shape)
    a[...] = (rng.standard_normal(shape) * 9).astype(dt)
    return a


@pytest.mark.parametrize("dtype", ["int8", "float32", "float64", "complex128"])
def test_tiles_move_onto_cache_lines_at_every_offset(dtype, rng, tile_every_width):
    """Tiled tasks move their tile edges onto out's and the staged input's cache lines
    (kernels.tile_shifts): the first band of tiles is short and a spare one may be empty.
    Every element is still written once, for data starting anywhere in a line, in tiles
    serial and parallel, for the built-ins and a user op."""
    per_line = 64 // np.dtype(dtype).itemsize
    shapes = [(70, 600), (300, 1100)]  # past the 8 x 512 tile both ways; serial, parallel
    for m, n in shapes:
        for k in range(0, per_line, max(1, per_line // 8)):
            x = _at(rng, (n, m), dtype, k)  # x.T is m x n, unit-stride down the rows
            y = _at(rng, (m, n), dtype, (k + 3) % per_line)
            assert _variant(x.T, y) == TILED
            out = _at(rng, (m, n), dtype, (k + 5) % per_line)
            np.testing.assert_array_equal(jitops.subtract(x.T, y, out=out), x.T - y)
            np.testing.assert_array_equal(jitops.subtract(y, x.T), y - x.T)
            out_t = _at(rng, (n, m), dtype, k).T  # a transposed out: its rows run down
            np.testing.assert_array_equal(jitops.add(y, x.T, out=out_t), y + x.T)
            z = _at(rng, (n, m), dtype, (k + 1) % per_line)
            np.testing.assert_array_equal(_fma(y, x.T, z.T), y * x.T + z.T)


@jitops.elementwise
def _fma(a, b, c):
    return a * b + c


def test_task_span_covers_every_element_once_wherever_the_tile_edges_move():
    """The tiled decode (kernels.task_span) over task_geometry's tasks: with the edges moved
    by any (si, sj) below the tile, every element of the plan lies in exactly one task's tile
    and every band after the first starts ``tile - s`` into the dim; the spare band of tiles
    is empty where nothing moved."""
    from numba import njit

    @njit(cache=False)
    def cover(nt, nti, ntj, ti, tj, di, dj, si, sj):
        seen = np.zeros((di, dj), np.int64)
        empty = 0
        for t in range(nt):
            r, i0, j0, nrows, n = _cpu.task_span(t, True, nti, ntj, ti, tj, di, dj, 1, 1, 1, 1,
                                                 si, sj)
            if nrows == 0:
                empty += 1
            if (i0 > 0 and (i0 + si) % ti) or (j0 > 0 and (j0 + sj) % tj):
                return seen, -1
            seen[i0:i0 + nrows, j0:j0 + n] += 1
        return seen, empty

    for di, dj, tile in [(70, 600, (8, 512)), (64, 1024, (8, 512)), (65, 130, (4, 16)),
                         (64, 72, (8, 8)), (100, 70, (3, 2)), (80, 90, (128, 600))]:
        plan = make_plan(((di, dj), (di, dj)), ((1, di), (dj, 1)), "numpy")
        assert plan.variant == TILED
        geometry = _cpu.task_geometry(plan, tile=tile, threads=1)
        ti, tj, nti, ntj, shift = geometry[5:]
        assert shift == (di > ti) | (dj > tj) << 1
        assert (nti, ntj) == (-(-di // ti) + (shift & 1), -(-dj // tj) + (shift >> 1))
        for si in range(ti if shift & 1 else 1):
            for sj in {0, 1, tj // 2, tj - 1} if shift & 2 else {0}:
                seen, empty = cover(geometry[1], nti, ntj, ti, tj, di, dj, si, sj)
                assert empty >= 0, (di, dj, tile, si, sj)
                assert (seen == 1).all(), (di, dj, tile, si, sj)
                if si == sj == 0:
                    assert empty == geometry[1] - (-(-di // ti)) * (-(-dj // tj))


@pytest.mark.parametrize("dtype", ["int8", "float32", "complex128"])
def test_tile_shifts_put_out_and_the_staged_input_on_a_line(dtype):
    """kernels.tile_shifts, from the data pointers: ``sj`` columns take out's row start to a
    64-byte line, ``si`` rows the staged input's unit-stride runs (x's, else y's), each
    modulo its tile; nothing moves where meta's bits say so, or where out's rows are not
    unit-stride, or no input runs down the rows."""
    from numba import njit, types

    from jitops.cpu.kernels.spec import KernelSpec, as_pointer, pointers

    @njit(cache=False)
    def shifts(spec, pmeta, po, px, py, so, sx0, sx, sy0, sy):
        o, x, y = pointers(spec, po, px, py)
        x_runs = sx0 == 1 and _cpu.staged(sx0, sx)
        y_runs = sy0 == 1 and _cpu.staged(sy0, sy)
        return _cpu.tile_shifts(spec, as_pointer(pmeta, types.int64), o, x, y, so, x_runs,
                                y_runs)

    dt = np.dtype(dtype)
    size = dt.itemsize
    meta = np.zeros(_cpu.SHAPE, np.int64)
    meta[META.TILE_I], meta[META.TILE_J], meta[META.SHIFT] = 8, 512, 3
    meta[META.SIZE + 1] = 2  # x's start offset
    tiled = KernelSpec("subtract", None, dt, dt, dt, dt, False, True)
    flat = KernelSpec("subtract", None, dt, dt, dt, dt, False, False)
    base = 1 << 20  # a line boundary
    for skip in range(0, 64, size):
        o, x, y = base + skip, base + 64 + (skip * 3) % 64, base + 128 + skip
        to_line = (-(o // size)) % (64 // size)  # elements from out's start to a line
        x_line = (-(x // size + 2)) % (64 // size)
        y_line = (-(y // size)) % (64 // size)
        m = _addr(meta)
        assert shifts(tiled, m, o, x, y, 1, 1, 4096, 0, 1) == (x_line % 8, to_line % 512)
        assert shifts(tiled, m, o, x, y, 1, 4096, 1, 1, 4096) == (y_line % 8, to_line % 512)
        assert shifts(tiled, m, o, x, y, 4096, 1, 1, 1, 1) == (0, 0)  # nothing runs down
        assert shifts(flat, m, o, x, y, 1, 1, 4096, 0, 1) == (0, 0)
        meta[META.SHIFT] = 2
        assert shifts(tiled, m, o, x, y, 1, 1, 4096, 0, 1) == (0, to_line % 512)
        meta[META.SHIFT] = 3


def test_only_tiled_tasks_prefetch_and_the_next_tile_rows_are_hinted():
    """A tiled task hints two kinds of lines: the staged input's next lines (8 per 8 x 8
    block, kernels.transpose_block) and, per row read in place, the same row of the next
    tile down (kernels.prefetch_next_tile: one call site per operand). Other specs compile
    no prefetch at all. Hints never change a value (tests above); this checks they are
    there, and only there."""
    from jitops.cpu.compile import registries
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels.spec import KernelSpec

    dt = np.dtype(np.float32)
    counts = {}
    for tiled in (False, True):
        spec = KernelSpec("subtract", None, dt, dt, dt, dt, False, tiled)
        task = inner(_cpu._task.py_func)
        sig = (spec.numba_type,) + (_cpu._I64,) * 5
        registries.compile_with(lambda task=task, sig=sig: task.compile(sig))
        counts[tiled] = task.inspect_llvm(sig).count("call void @llvm.prefetch")
    assert counts == {False: 0, True: _cpu.BLOCK_T + 2}, counts
