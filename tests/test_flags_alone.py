"""Each special pair alone: the warnings of an array whose every lane holds one pair are
NumPy's. The grids of test_family put every pair in one array, where one lane's real flag hides
another's spurious one: a lane that computes what it does not answer (LLVM if-converts a
branch, widens a C call to every lane of a vector, or drops a guard whose test a pick
repeats) raised *invalid* for ``fmod(inf, nan)``, for a zero divisor of ``floor_divide`` in
the vectorised loops of mixed dtypes and of complex ``divide``, and *underflow* for ``1 //
-3e38``; complex ``power`` to -1 of a NaN part lost its *invalid*."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitops

from .test_values import _same_bits, specials

#: The ops whose elements branch around C's ``fmod``.
OPS = ("floor_divide", "remainder", "fmod", "divmod")
#: Same-dtype pairs, and mixed ones converted in the loop (NumPy's result float32 or float64).
PAIRS = [(np.float16, np.float16), (np.float32, np.float32), (np.float64, np.float64),
         (np.int8, np.uint64), (np.int32, np.float32), (np.int16, np.float16),
         (np.float64, np.float32), (np.float32, np.int64)]
#: One lane (the scalar loop) and a vector's worth (the vectorised one, its tail too).
SIZES = (1, 19)


def _run(f, x, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="warn"):
            r = f(x, y)
    return r, sorted({str(w.message).split(" encountered")[0] for w in caught})


#: Complex ops whose elements branch (Smith's division, the power's integer exponents).
COMPLEX_OPS = ("divide", "power")
COMPLEX_PAIRS = [(np.complex64, np.complex64), (np.complex128, np.complex128),
                 (np.complex64, np.float64), (np.float32, np.complex64)]


@pytest.mark.parametrize("dx, dy", PAIRS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", OPS)
def test_each_special_pair_alone_warns_as_numpy_does(op, dx, dy):
    _check_alone(op, dx, dy, specials(dx), specials(dy))


@pytest.mark.parametrize("dx, dy", COMPLEX_PAIRS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", COMPLEX_OPS)
def test_each_complex_special_pair_alone_warns_as_numpy_does(op, dx, dy):
    # a third of the complex grid (its parts' specials, every pair of them): a few thousand
    _check_alone(op, dx, dy, specials(dx)[::3], specials(dy)[::3])


def _check_alone(op, dx, dy, xs, ys):
    bad = []
    for a in xs:
        for b in ys:
            for n in SIZES:
                x, y = np.full(n, a, dx), np.full(n, b, dy)
                want, want_w = _run(getattr(np, op), x, y)
                got, got_w = _run(getattr(jitops, op), x, y)
                pairs = zip(got, want) if op == "divmod" else ((got, want),)
                same = all(g.dtype == w.dtype and bool(
                    (_same_bits(g, w) | (np.isnan(g) & np.isnan(w))).all()) for g, w in pairs)
                if got_w != want_w or not same:
                    bad.append(f"{a!r} {b!r} n={n}: NumPy {want_w}, jitops {got_w}, "
                               f"values {'equal' if same else 'differ'}")
    assert not bad, f"{len(bad)} differ:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"])
@pytest.mark.parametrize("op", OPS)
def test_one_zero_divisor_for_a_whole_row_warns_as_numpy_does(op, dt):
    """A divisor of one element (an array of one, a NumPy scalar, a Python 0) for a row: the
    narrow integer remainder's zero-divisor division was dropped from such a row's loop (its
    answer, 0, was picked), and NumPy's *divide* with it."""
    x = np.arange(-1000, 1048).astype(dt)
    want, want_w = _run(getattr(np, op), x, np.zeros(1, dt))
    for y in (np.zeros(1, dt), np.dtype(dt).type(0), 0):
        got, got_w = _run(getattr(jitops, op), x, y)
        assert got_w == want_w, (y, got_w, want_w)
        for g, w in zip(*((got, want) if op == "divmod" else ((got,), (want,)))):
            assert g.dtype == w.dtype and np.array_equal(g, w)
