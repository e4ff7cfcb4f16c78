"""Each special pair alone: the warnings of an array whose every lane holds one pair are
NumPy's. The grids of test_family put every pair in one array, where one lane's real flag hides
another's spurious one: a lane that computes what it does not answer (LLVM if-converts a
branch, or widens a C call to every lane of a vector) raised *invalid* for ``fmod(inf, nan)``
and, in the vectorised loops of mixed dtypes, for a zero divisor of ``floor_divide``."""

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


@pytest.mark.parametrize("dx, dy", PAIRS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", OPS)
def test_each_special_pair_alone_warns_as_numpy_does(op, dx, dy):
    bad = []
    for a in specials(dx):
        for b in specials(dy):
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
