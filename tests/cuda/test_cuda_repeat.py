"""Repeated calls on CUDA arrays (jitops.cuda.repeat): launched again without the pipeline,
on the values the arrays hold now, into ``out`` or a result allocated as the first call's,
and only where the pipeline would have made the very same launch.

Runs on a real GPU (where repeats go through the ``cuda_launch`` hook) and on the simulator
(numba-cuda's dispatcher), like the rest of tests/cuda.
"""

import gc
import warnings
import weakref

import numpy as np
import pytest

import jitops
from jitops.core.device import cuda_unavailable_reason

if cuda_unavailable_reason() is not None:
    pytest.skip("neither a GPU nor the CUDA simulator is available", allow_module_level=True)

from numba import cuda  # noqa: E402

from jitops import dispatch  # noqa: E402
from jitops.cuda import backend, repeat  # noqa: E402
from jitops.cuda.spec import SIMULATOR  # noqa: E402

from .test_cuda_interop import ForeignArray  # noqa: E402

sim_only = pytest.mark.skipif(not SIMULATOR, reason="host memory posing as a CUDA array")


@pytest.fixture(autouse=True)
def empty_memo():
    repeat.forget()
    yield
    repeat.forget()


def no_pipeline(monkeypatch):
    """From now on a call that reaches the pipeline fails the test."""
    monkeypatch.setattr(dispatch, "prepare", lambda *a, **k: pytest.fail("planned again"))


def test_a_repeat_skips_the_pipeline_and_reads_the_new_values(rng, monkeypatch):
    x = rng.standard_normal((64, 48)).astype(np.float32)
    y = rng.standard_normal(48).astype(np.float32)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    out = cuda.device_array((64, 48), np.float32)
    assert jitops.subtract(dx, dy, out=out) is out
    assert len(repeat._MEMO) == 1
    no_pipeline(monkeypatch)
    for _ in range(3):
        x = rng.standard_normal(x.shape).astype(np.float32)
        dx.copy_to_device(x)  # new values at the same address
        assert jitops.subtract(dx, dy, out=out) is out
        np.testing.assert_array_equal(out.copy_to_host(), x - y)
        assert backend.LAUNCHES[-1][0] == "strided"
    # the same arrays in another op, or with act=: each its own launch, planned once
    monkeypatch.undo()
    jitops.add(dx, dy, act="relu", out=out)
    jitops.add(dx, dy, act="relu", out=out)
    np.testing.assert_array_equal(out.copy_to_host(), np.maximum(x + y, 0))
    assert len(repeat._MEMO) == 2


def test_a_new_result_is_allocated_again_as_the_first(rng, monkeypatch):
    x = rng.standard_normal((40, 30)).astype(np.float32)
    y = rng.standard_normal(30).astype(np.float32)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    for view in (np.s_[:, :], np.s_[::-1, ::2]):
        first = jitops.subtract(dx[view], dy[view[1:]])
        no_pipeline(monkeypatch)
        results = []
        for _ in range(3):
            x = rng.standard_normal(x.shape).astype(np.float32)
            dx.copy_to_device(x)
            r = jitops.subtract(dx[view], dy[view[1:]])
            np.testing.assert_array_equal(r.copy_to_host(), x[view] - y[view[1:]])
            assert (type(r), r.shape, r.strides, r.dtype) == \
                (type(first), first.shape, first.strides, first.dtype)
            results.append(r)
        monkeypatch.undo()
        assert len({id(r) for r in (first, *results)}) == 4  # each call its own result
    assert len(repeat._MEMO) == 2
    for entry in repeat._MEMO.values():
        assert (entry.launch is None) == SIMULATOR  # on a GPU, through the hook


def test_an_alias_of_an_input_repeats_in_place(rng, monkeypatch):
    x = rng.standard_normal(1000)
    y = rng.standard_normal(1000)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    jitops.add(dx, dy, out=dx)
    no_pipeline(monkeypatch)
    jitops.add(dx, dy, out=dx)
    jitops.add(dx, dy, out=dx)
    np.testing.assert_array_equal(dx.copy_to_host(), ((x + y) + y) + y)


def test_each_view_of_a_buffer_is_its_own_launch(rng):
    x = rng.standard_normal((16, 20)).astype(np.float32)
    buf = cuda.device_array((16, 20), np.float32)
    dx = cuda.to_device(x)
    for _ in range(2):
        for k in (slice(None, None, 2), slice(1, None, 2), slice(None, None, -1)):
            jitops.multiply(dx[k], dx[k], out=buf[k])
            np.testing.assert_array_equal(buf.copy_to_host()[k], x[k] * x[k])
    assert len(repeat._MEMO) == 3


def test_what_is_never_remembered(rng):
    x = rng.standard_normal(64)
    dx = cuda.to_device(x)
    jitops.add(dx, x)  # a host array
    jitops.add(1.0, 2.0, device="cuda")  # scalars alone
    jitops.add(dx, np.array(2.0))  # a host 0-d array (its values may change)
    assert not repeat._MEMO
    repeat.forget()
    # a partial overlap of out and an input: read from a copy, as NumPy does; each time
    d = cuda.to_device(x)
    for _ in range(2):
        before = d.copy_to_host()
        jitops.add(d[1:], d[:-1], out=d[:-1])
        np.testing.assert_array_equal(d.copy_to_host()[:-1], before[1:] + before[:-1])
    assert not repeat._MEMO


def bits(a: np.ndarray) -> bytes:
    """Every bit, but a NaN's sign and payload (the GPU's own: sqrt(-inf) is +NaN there)."""
    a = a.copy()
    a[np.isnan(a)] = np.nan
    return a.tobytes()


def test_a_scalar_operand_is_remembered_by_its_type_and_bits(rng, monkeypatch):
    """``x - 2.0``, ``x ** 2``: the scalar's type and bits are in the key, so every decision
    its value makes (the result dtype, power's one-exponent entry, the sign of zero) is the
    first call's; another value or type is another launch."""
    x = rng.standard_normal(96).astype(np.float32)
    x[:4] = [-0.0, -np.inf, -2.0, 0.0]
    dx = cuda.to_device(x)
    out = cuda.device_array(96, np.float32)
    calls = [(jitops.subtract, 2.0), (jitops.subtract, 2), (jitops.subtract, True),
             (jitops.subtract, np.float32(2.0)), (jitops.subtract, np.float64(2.0)),
             (jitops.power, 0.5), (jitops.power, 2.0), (jitops.power, 3.0),
             (jitops.multiply, -0.0), (jitops.multiply, 0.0), (jitops.multiply, 1.0 + 0j)]
    with np.errstate(invalid="ignore"):
        want = [f(x, s) for f, s in calls]
    narrow = [np.result_type(x, s) == np.float32 for _, s in calls]
    first = []
    for (f, s), w, n in zip(calls, want, narrow):
        r = f(dx, s).copy_to_host()
        assert r.dtype == w.dtype, (f, s)
        # as the host computes it: pow to the device's last ulp, signs of zero exactly
        np.testing.assert_allclose(r, w, rtol=3e-7, atol=0, equal_nan=True)
        rv, wv = r.view(r.real.dtype), w.view(w.real.dtype)  # complex: each part
        assert (np.signbit(rv) == np.signbit(wv))[~np.isnan(wv)].all(), (f, s)
        first.append(r)
        if n:
            f(dx, s, out=out)
    assert len(repeat._MEMO) == len(calls) + sum(narrow)
    no_pipeline(monkeypatch)
    for _ in range(2):
        for (f, s), r0, n in zip(calls, first, narrow):
            r = f(dx, s)
            assert r.dtype == r0.dtype and bits(r.copy_to_host()) == bits(r0), (f, s)
            if n:
                assert f(dx, s, out=out) is out
                assert bits(out.copy_to_host()) == bits(r0), (f, s)
        # the scalar's own device copy outlives the backend's cache of them
        backend._SCALARS.clear()
        gc.collect()
    assert np.signbit(jitops.power(dx, 0.5).copy_to_host()[0])  # sqrt's -0.0 kept
    # the scalar first: the same, and its own launch
    monkeypatch.undo()
    r = [jitops.subtract(2.0, dx).copy_to_host() for _ in range(3)]
    assert all(v.tobytes() == (2.0 - x).tobytes() for v in r)


def test_a_repeated_scalar_without_the_hook(rng, monkeypatch):
    monkeypatch.setattr(repeat, "_state", {repeat.NAME: "turned off here"})
    x = rng.standard_normal((6, 50)).astype(np.float32)
    dx = cuda.to_device(x)
    for _ in range(3):
        r = jitops.multiply(dx[::-1], 0.25)
    assert [e.launch for e in repeat._MEMO.values()] == [None]
    backend._SCALARS.clear()
    gc.collect()
    assert jitops.multiply(dx[::-1], 0.25).copy_to_host().tobytes() == (x[::-1] * 0.25).tobytes()
    assert r.copy_to_host().tobytes() == (x[::-1] * 0.25).tobytes()


def test_a_zero_divisor_raises_after_repeats():
    """The integer division's zero check reads the divisor's values: never remembered."""
    x = cuda.to_device(np.arange(1, 9, dtype=np.int32))
    y = cuda.to_device(np.full(8, 2, np.int32))
    out = cuda.device_array(8, np.int32)
    for _ in range(2):
        jitops.elementwise_div(x, y, out=out)
    assert not repeat._MEMO
    y.copy_to_device(np.array([2, 2, 2, 0, 2, 2, 2, 2], np.int32))
    with pytest.raises(ZeroDivisionError):
        jitops.elementwise_div(x, y, out=out)


def test_the_memo_holds_no_array(rng):
    dx = cuda.to_device(rng.standard_normal(256))
    out = cuda.device_array(256)
    dg = cuda.to_device(rng.standard_normal((8, 16)))
    for _ in range(2):
        jitops.subtract(dx, dx, out=out)
        total = jitops.sum_to(dg, (16,))  # a pass: its buffers neither
    refs = [weakref.ref(v) for v in (dx, out, dg, total)]
    del dx, out, dg, total
    gc.collect()
    assert repeat._MEMO and repeat._PASSES and all(r() is None for r in refs)


def test_without_the_hook_the_dispatcher_launches_the_same(rng, monkeypatch):
    x = rng.standard_normal((8, 300)).astype(np.float32)
    dx = cuda.to_device(x)
    out = cuda.device_array((8, 300), np.float32)
    got = []
    for state in ({}, {repeat.NAME: "turned off here"}):
        repeat.forget()
        monkeypatch.setattr(repeat, "_state", dict(state))
        for _ in range(3):
            jitops.maximum(dx, dx[0], out=out)
            new = jitops.minimum(dx[::-1], dx[0])
        got.append((out.copy_to_host(), new.copy_to_host()))
        assert len(repeat._MEMO) == 2
        for entry in repeat._MEMO.values():
            assert (entry.launch is None) == (bool(state) or SIMULATOR)
    np.testing.assert_array_equal(got[0][0], np.maximum(x, x[0]))
    np.testing.assert_array_equal(got[0][1], np.minimum(x[::-1], x[0]))
    np.testing.assert_array_equal(got[1][0], got[0][0])
    np.testing.assert_array_equal(got[1][1], got[0][1])


def test_the_hook_is_used_on_a_gpu_and_off_on_the_simulator():
    monkey = repeat._state.pop(repeat.NAME, None)
    try:
        assert repeat.hook_ok() is (not SIMULATOR)
        if SIMULATOR:
            assert "simulator" in repeat._state[repeat.NAME]
    finally:
        if monkey is not None:
            repeat._state[repeat.NAME] = monkey


@sim_only
def test_a_read_only_out_at_a_remembered_address_is_refused(rng, monkeypatch):
    monkeypatch.setitem(repeat._MEMOABLE, ForeignArray, "numba")  # remembered like Numba's
    buf = np.zeros(32)
    x = ForeignArray(rng.standard_normal(32))
    jitops.add(x, x, out=ForeignArray(buf))
    jitops.add(x, x, out=ForeignArray(buf))
    ro = buf.view()
    ro.flags.writeable = False
    assert len(repeat._MEMO) == 1
    with pytest.raises(ValueError, match="read-only"):
        jitops.add(x, x, out=ForeignArray(ro))


@sim_only
def test_another_stream_is_another_launch(monkeypatch):
    monkeypatch.setitem(repeat._MEMOABLE, ForeignArray, "numba")  # remembered like Numba's
    x = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    for s in (0xA0, 0xB0, 0xA0, 0xB0):
        jitops.add(ForeignArray(x, s), ForeignArray(x, s), out=ForeignArray(out, s))
        assert backend.LAUNCHES[-1][2] == s
    assert len(repeat._MEMO) == 2
    np.testing.assert_array_equal(out, 2 * x)


@sim_only
def test_a_masked_interface_is_refused():
    class Masked(ForeignArray):
        @property
        def __cuda_array_interface__(self):
            return dict(super().__cuda_array_interface__, mask=self.a)

    with pytest.raises(TypeError, match="has a mask"):
        jitops.add(Masked(np.ones(3)), 1.0)


def test_jitops_disable_hooks_turns_the_hook_off(monkeypatch, rng):
    monkeypatch.setenv("JITOPS_DISABLE_HOOKS", "cuda_launch")
    monkeypatch.setattr(repeat, "_state", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not repeat.hook_ok()
    assert "JITOPS_DISABLE_HOOKS" in repeat._state[repeat.NAME]
    assert [str(w.message) for w in caught if "cuda_launch" in str(w.message)] != [] \
        or SIMULATOR  # the simulator has no hook to lose: no warning there
    x = rng.standard_normal(100)
    dx = cuda.to_device(x)
    for _ in range(2):
        r = jitops.add(dx, dx)
    np.testing.assert_array_equal(r.copy_to_host(), 2 * x)
    assert all(e.launch is None for e in repeat._MEMO.values())


# -- passes: reductions, gradients, several results (jitops.cuda.repeat.pass_key) ----------


def no_planning(monkeypatch):
    """From now on a pass that is planned fails the test."""
    from jitops import reductions

    monkeypatch.setattr(reductions, "_cuda_pass", lambda *a, **k: pytest.fail("planned again"))


def test_a_repeated_reduction_is_launched_again_on_the_new_values(rng, monkeypatch):
    # on a GPU, long enough rows for partials reduced again (three launches, two buffers)
    g = rng.standard_normal((3, 5, 8) if SIMULATOR else (64, 5, 2000)).astype(np.float32)
    dg = cuda.to_device(g)
    first = jitops.sum_to(dg, (5,), broadcast="pdpd", axis=1)
    assert len(repeat._PASSES) == 1
    (entry,) = repeat._PASSES.values()
    assert entry.direct is not SIMULATOR  # on a GPU, through the hook
    assert entry.names == ["reduce_rows"] * (1 if SIMULATOR else 2) + ["contig"]  # + rounding
    no_planning(monkeypatch)
    results = []
    for _ in range(3):
        g = rng.standard_normal(g.shape).astype(np.float32)
        dg.copy_to_device(g)
        r = jitops.sum_to(dg, (5,), broadcast="pdpd", axis=1)
        np.testing.assert_allclose(r.copy_to_host(), g.sum(axis=(0, 2), dtype=np.float64)
                                   .astype(np.float32), rtol=1e-6)
        assert (type(r), r.shape, r.strides, r.dtype) == \
            (type(first), first.shape, first.strides, first.dtype)
        results.append(r)
    assert len({id(r) for r in (first, *results)}) == 4  # each call its own result
    monkeypatch.undo()
    jitops.sum_to(dg, (5, 1))  # other arguments: planned, remembered apart
    jitops.sum_to(dg[:, :, ::2], (5,), broadcast="pdpd", axis=1)  # another view: apart too
    assert len(repeat._PASSES) == 3


def test_repeated_gradients_means_and_scalars(rng, monkeypatch):
    x = rng.standard_normal((4, 3, 8))
    y = rng.standard_normal(3)
    dx, dy, dd = (cuda.to_device(a) for a in (x, y, np.ones_like(x)))
    dcol = cuda.to_device(y[:, None])  # (numba's device arrays take no None index)
    mean = jitops.reduce(lambda a, b, s: (a - b) * s, "mean", axis=(0, 2))
    scalars = (2.0, -0.0, 0.0, np.float32(2.0), np.float64(-0.0))  # each its own call
    for s in scalars + scalars:
        jitops.elementwise_mul_grad(dx, dy, dd, axis=1)
        mean(dx, dcol, s)
    assert len(repeat._PASSES) == 1 + len(scalars)
    no_planning(monkeypatch)
    for _ in range(2):
        d = rng.standard_normal(x.shape)
        dd.copy_to_device(d)
        gx, gy = jitops.elementwise_mul_grad(dx, dy, dd, axis=1)
        wx, wy = jitops.elementwise_mul_grad(x, y, d, axis=1)
        np.testing.assert_array_equal(gx.copy_to_host(), wx)
        np.testing.assert_allclose(gy.copy_to_host(), wy, rtol=1e-13)
        for s in scalars:
            got = mean(dx, dcol, s).copy_to_host()
            np.testing.assert_allclose(got, mean(x, y[:, None], s), rtol=1e-13)
            assert np.signbit(got).tolist() == np.signbit(mean(x, y[:, None], s)).tolist()


def test_passes_never_remembered(rng):
    x = rng.standard_normal((3, 0))
    dx = cuda.to_device(x)
    mean = jitops.reduce(lambda a: a, "mean", axis=1)
    for _ in range(2):  # an empty mean warns every time
        with pytest.warns(RuntimeWarning, match="Mean of empty slice"):
            mean(dx)
    d = cuda.to_device(rng.standard_normal((4, 5)))
    total = jitops.reduce(lambda a: a, "sum", axis=0)
    out = cuda.device_array(5)
    for _ in range(2):
        total(d, out=out)  # out=: checked every time
        total(d)
    assert len(repeat._PASSES) == 1  # total(d) alone
    repeat.forget()
    host = rng.standard_normal((4, 5))
    add = jitops.reduce(lambda a, b: a + b, "sum")
    for _ in range(2):
        add(d, host)  # a host array: uploaded each call
    assert not repeat._PASSES


def test_passes_without_the_hook_launch_the_same(rng, monkeypatch):
    a = rng.standard_normal((3, 9)).astype(np.float32)
    da = cuda.to_device(a)
    op = jitops.reduce(lambda x: (x * x, x), ("sum", "max"), axis=1)
    got = []
    for state in ({}, {repeat.NAME: "turned off here"}):
        repeat.forget()
        monkeypatch.setattr(repeat, "_state", dict(state))
        for _ in range(3):
            s, m = op(da)
        assert [e.direct for e in repeat._PASSES.values()] == [not (state or SIMULATOR)]
        got.append((s.copy_to_host(), m.copy_to_host()))
    np.testing.assert_array_equal(got[0][1], a.max(axis=1))
    np.testing.assert_allclose(got[0][0], (a.astype(np.float64) ** 2).sum(axis=1), rtol=1e-6)
    assert got[1][0].tobytes() == got[0][0].tobytes()
    assert got[1][1].tobytes() == got[0][1].tobytes()
