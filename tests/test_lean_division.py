"""The float32 division family's lean form (jitops.cpu.kernels.lean): a chunk whose every
lane is a calm pair (finite dividend, normal divisor, quotient below 2**24) runs the element
with C's ``fmod`` in its quick form, branch-free; any other chunk the element itself. Both
give NumPy's bits and warnings: each lane the same bits either way, in every layout."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitops

OPS = {"remainder": np.remainder, "floor_divide": np.floor_divide, "fmod": np.fmod}


def _run(f, *args, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="warn"):
            r = f(*args, **kw)
    return r, sorted({str(w.message).split(" encountered")[0] for w in caught})


def _calm(n, rng):
    x = (rng.uniform(-1e4, 1e4, n)).astype(np.float32)
    y = (rng.uniform(0.01, 50, n) * np.where(rng.random(n) < 0.5, -1, 1)).astype(np.float32)
    x[::13] = -0.0
    x[5::17] = np.round(x[5::17])
    # whole quotients: zero remainders and their signs
    y[5::17] = (np.round(np.abs(y[5::17])) + 1) * np.sign(y[5::17])
    return x, y


@pytest.mark.parametrize("name", OPS)
def test_calm_chunks_give_numpys_bits_and_the_general_forms(name):
    rng = np.random.default_rng(21)
    n = 1 << 14
    x, y = _calm(n, rng)
    f, g = getattr(jitops, name), OPS[name]
    lean, raised = _run(f, x, y)
    want, warned = _run(g, x, y)
    assert lean.tobytes() == want.tobytes() and raised == warned == []
    xs, ys = x.copy(), y.copy()
    xs[::500] = np.inf  # a lane in every chunk the lean form does not take
    general, raised = _run(f, xs, ys)
    want, warned = _run(g, xs, ys)
    assert general.tobytes() == want.tobytes() and raised == warned
    keep = np.ones(n, bool)
    keep[::500] = False
    assert general[keep].tobytes() == lean[keep].tobytes()
    assert _run(f, x[::-1], y[::-1])[0].tobytes() == lean[::-1].tobytes()
    assert _run(f, np.repeat(x, 2)[::2], y)[0].tobytes() == lean.tobytes()
    for d in (3.0, np.float32(-0.75), np.array(1e-3, np.float32)):  # one divisor
        got, raised = _run(f, x, d)
        want, warned = _run(g, x, np.float32(d))
        assert got.tobytes() == want.tobytes() and raised == warned, d
    out = np.empty_like(x)
    f(x, y, out=out)
    assert out.tobytes() == lean.tobytes()


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("a,b", [(5.0, 0.0), (5.0, -0.0), (np.inf, 3.0), (np.nan, 3.0),
                                 (5.0, np.inf), (5.0, np.nan), (5.0, 1e-45), (3e9, 7.0),
                                 (16777217.0, 1.0), (2.0 ** 60, 3.0), (np.inf, 2.0 ** 110),
                                 (-0.0, 2.0), (1e-45, 3.0), (1e-45, 0.0), (-1e-45, -0.0)])
def test_every_other_lane_among_calm_ones_is_numpys(name, a, b):
    """Each kind of pair the quick form does not take (a zero, subnormal, infinite or NaN
    divisor, a non-finite dividend, a quotient from 2**24), alone among 1023 calm pairs:
    NumPy's bits and warnings for the whole array, and for the pair alone."""
    x, y = np.full(1024, 7.5, np.float32), np.full(1024, -2.0, np.float32)
    x[600], y[600] = a, b
    f, g = getattr(jitops, name), OPS[name]
    got, raised = _run(f, x, y)
    want, warned = _run(g, x, y)
    assert got.tobytes() == want.tobytes() and raised == warned
    alone, _ = _run(f, x[600:601], y[600:601])
    assert alone.tobytes() == got[600:601].tobytes()


def test_paddles_remainder_takes_the_lean_form_with_its_own_zero_signs():
    """elementwise_mod (Paddle's zero keeps the dividend's sign): calm chunks and others,
    the same bits per lane."""
    rng = np.random.default_rng(22)
    x, y = _calm(4096, rng)
    lean = jitops.elementwise_mod(x, y)
    xs = x.copy()
    xs[::700] = np.nan
    with np.errstate(all="ignore"):
        general = jitops.elementwise_mod(xs, y)
    keep = np.ones(4096, bool)
    keep[::700] = False
    assert general[keep].tobytes() == lean[keep].tobytes()
    zero = lean == 0
    assert zero.any() and np.array_equal(np.signbit(lean[zero]), np.signbit(x[zero]))


@pytest.mark.parametrize("a,b", [(5.0, 0.0), (np.inf, 3.0), (5.0, np.nan), (2.0 ** 60, 3.0),
                                 (1e-45, 0.0), (-0.0, -2.0)])
def test_divmod_runs_the_lean_form_in_its_one_pass(a, b):
    """jitops.divmod (the several-result kernels: the function says it computes
    ``divmod_float``): calm blocks lean, a block with any other pair the element; NumPy's
    bits and warnings for both results, each lane the same either way."""
    rng = np.random.default_rng(23)
    x, y = _calm(2000, rng)
    (q, r), raised = _run(jitops.divmod, x, y)
    (wq, wr), warned = _run(np.divmod, x, y)
    assert q.tobytes() == wq.tobytes() and r.tobytes() == wr.tobytes() and raised == warned
    xs, ys = x.copy(), y.copy()
    xs[700], ys[700] = a, b
    (gq, gr), raised = _run(jitops.divmod, xs, ys)
    (wq, wr), warned = _run(np.divmod, xs, ys)
    assert gq.tobytes() == wq.tobytes() and gr.tobytes() == wr.tobytes() and raised == warned
    keep = np.arange(2000) != 700
    assert gq[keep].tobytes() == q[keep].tobytes() and gr[keep].tobytes() == r[keep].tobytes()
