"""A reduction pass called again with the operands' geometry and the arguments it was
called with runs its remembered launch (jitops.cpu.reduce.pass_key/pass_again) without
planning; anything else that differs -- strides, dtype, shape, an argument, its type, the
thread count, alignment -- plans anew, and every answer is the one a first call gives."""

from __future__ import annotations

import numpy as np
import pytest

import jitops
from jitops.cpu import reduce as on_cpu


@pytest.fixture
def no_planning(monkeypatch):
    """After this, a call that plans raises: only remembered passes run."""
    def refuse(*key):
        raise AssertionError("planned a pass that was remembered")

    def forbid():
        monkeypatch.setattr(on_cpu, "_launch_for", refuse)
    return forbid


def _fresh():
    on_cpu._PASSES.clear()
    on_cpu._launch_for.cache_clear()


def test_a_repeat_runs_the_remembered_pass_and_gives_new_arrays(no_planning):
    _fresh()
    rng = np.random.default_rng(0)
    g = rng.integers(-9, 9, (256, 64)).astype(np.float32)
    x, y = g + 1, rng.integers(1, 9, 64).astype(np.float32)
    first = jitops.sum_to(g, (64,))
    dx0, dy0 = jitops.elementwise_mul_grad(x, y, g)
    no_planning()
    for _ in range(3):
        again = jitops.sum_to(g, (64,))
        dx, dy = jitops.elementwise_mul_grad(x, y, g)
        assert again.shape == (64,) and again.dtype == np.float32
        np.testing.assert_array_equal(again, g.sum(axis=0, dtype=np.float64))
        np.testing.assert_array_equal(again, first)
        np.testing.assert_array_equal(dx, g * y)
        np.testing.assert_array_equal(dy, (g * x).sum(axis=0, dtype=np.float64))
        assert dx.shape == x.shape and dy.shape == y.shape
        for a, b in ((again, first), (dx, dx0), (dy, dy0)):
            assert not np.shares_memory(a, b)  # a new result every call
    # the same geometry with other values: the launch reads each call's own operands
    h = g[::-1].copy()
    np.testing.assert_array_equal(jitops.sum_to(h, (64,)), h.sum(axis=0, dtype=np.float64))


@pytest.mark.parametrize("change", ["strides", "dtype", "shape", "target", "mode", "axis",
                                    "axis type", "threads", "misaligned"])
def test_what_differs_is_planned_anew_and_right(change, monkeypatch):
    """Each change makes a different key (or none): the call plans, and its answer is the
    one a first call gives."""
    _fresh()
    rng = np.random.default_rng(1)
    g = rng.integers(-9, 9, (6, 8, 8)).astype(np.float64)
    args = {"shape": (8,), "broadcast": "pdpd", "axis": 1}
    jitops.sum_to(g, **args)
    planned = []
    real = on_cpu._launch_for
    monkeypatch.setattr(on_cpu, "_launch_for", lambda *k: planned.append(k) or real(*k))
    with jitops.threads(1 if change == "threads" else jitops.get_num_threads()):
        if change == "strides":
            g = np.asfortranarray(g)
        elif change == "dtype":
            g = g.astype(np.int64)  # (the same strides)
        elif change == "shape":
            g = np.concatenate([g, g])
        elif change == "target":
            args["shape"] = (8, 8)
        elif change == "mode":
            args.update(broadcast="numpy", axis=-1)
        elif change == "axis":
            args.update(axis=2)
        elif change == "axis type":
            args.update(axis=np.int64(1))
        elif change == "misaligned":
            raw = np.zeros(g.nbytes + 1, np.uint8)[1:].view(np.float64).reshape(g.shape)
            raw[...] = g
            g = raw
            assert not g.flags.aligned
        got = jitops.sum_to(g, **args)
        again = jitops.sum_to(g, **args)
    assert planned, "a call that differs ran a remembered pass"
    if change == "misaligned":  # copied before it runs: planned every time, not remembered
        assert len(planned) == 2
    else:
        assert len(planned) == 1  # and its own repeat is remembered
    frame = jitops.core.reduction.sum_to_frame(g.shape, args["shape"], args["broadcast"],
                                               args["axis"])
    axes = tuple(d for d, (n, f) in enumerate(zip(g.shape, frame)) if f == 1 and n != 1)
    want = g.sum(axis=axes, keepdims=True, dtype=np.float64).astype(g.dtype)
    np.testing.assert_array_equal(got, want.reshape(args["shape"]))
    np.testing.assert_array_equal(again, got)


def test_arguments_a_first_call_refuses_are_refused_on_every_call():
    _fresh()
    g = np.ones((2, 3, 4), np.float32)
    jitops.sum_to(g, (3, 4))
    with pytest.raises(ValueError, match="does not broadcast"):
        jitops.sum_to(g, (3, 4), broadcast="none")
    with pytest.raises(TypeError, match="shape must be a tuple"):
        jitops.sum_to(g, 3.5)
    assert jitops.sum_to(g, [3, 4]).shape == (3, 4)  # unhashable: planned, not remembered
    x = np.ones((2, 3), np.float32)
    jitops.elementwise_max_grad(x, x, x)
    with pytest.raises(ValueError, match="ties"):
        jitops.elementwise_max_grad(x, x, x, ties="numpy")
    with pytest.raises(ValueError, match="ties"):
        jitops.elementwise_max_grad(x, x, x, ties=["numpy"])


def test_several_result_and_user_reduction_repeats_finish_and_report_every_call(no_planning):
    """divmod and jitops.reduce ops: a repeat reports the kernel's flags as NumPy's errstate
    says, finishes each reduction (a mean divides, a full reduction is a NumPy scalar, a
    mean of nothing warns) and returns new arrays, each call."""
    _fresh()
    rng = np.random.default_rng(2)
    x = rng.integers(-50, 50, 1000).astype(np.float32)
    y = rng.integers(1, 9, 1000).astype(np.float32)
    y[::7] = 0  # x // 0 and x % 0: NumPy's divide and invalid flags
    mean = jitops.reduce(lambda a, b: a * b, "mean")
    rows = jitops.reduce(lambda a: (a, a), ("sum", None), axis=0, keepdims=True)
    empty = jitops.reduce(lambda a: a, "mean", axis=0)
    e = np.zeros((0, 3))
    with np.errstate(all="ignore"):
        first = jitops.divmod(x, y)
        jitops.divmod(x, y)  # (a second call records after the first one planned)
        m0 = mean(x, y)
        rows(x.reshape(100, 10))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning, match="Mean of empty"):
        empty(e)
    no_planning()
    with np.errstate(all="ignore"):
        want_q, want_r = np.divmod(x, y)
    for _ in range(2):
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning, match="divide by zero"):
            q, r = jitops.divmod(x, y)
        np.testing.assert_array_equal(q, want_q)
        np.testing.assert_array_equal(r, want_r)
        assert not np.shares_memory(q, first[0])
        with np.errstate(divide="raise", invalid="ignore"), pytest.raises(FloatingPointError):
            jitops.divmod(x, y)
        m = mean(x, y)
        assert isinstance(m, np.floating) and m == m0
        np.testing.assert_allclose(m, np.mean(x.astype(np.float64) * y), rtol=1e-6)
        s, kept = rows(x.reshape(100, 10))
        np.testing.assert_array_equal(s, x.reshape(100, 10).sum(axis=0, keepdims=True))
        np.testing.assert_array_equal(kept, x.reshape(100, 10))
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning, match="Mean of empty"):
            np.testing.assert_array_equal(empty(e), np.full(3, np.nan))


def test_several_result_calls_that_are_not_plain_arrays_plan_and_are_right():
    _fresh()
    x = np.arange(1, 13, dtype=np.float64).reshape(3, 4)
    for _ in range(2):  # a weak scalar, out=: planned every call, never remembered
        q, r = jitops.divmod(x, 5)
        np.testing.assert_array_equal(q, x // 5)
        np.testing.assert_array_equal(r, x % 5)
        outs = (np.empty_like(x), np.empty_like(x))
        got = jitops.divmod(x, x[0], out=outs)
        assert got[0] is outs[0] and got[1] is outs[1]
        np.testing.assert_array_equal(outs[0], x // x[0])
    assert not on_cpu._PASSES
