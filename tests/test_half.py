"""float16 conversions of the CPU kernels (jitops.cpu.kernels.half): float64 -> float16 rounds
exactly as NumPy does, without the libgcc function ``__truncdfhf2`` that LLVM would otherwise call
(a JIT finds it only where some library happened to make it global; without it LLVM aborts)."""

import subprocess
import sys
import textwrap

import numpy as np
from numba import njit

from jitops.cpu.kernels.half import float_to_half


@njit
def _to_half(a, o):
    for i in range(a.size):
        o[i] = float_to_half(a[i])


def test_float64_to_float16_is_numpys_rounding():
    rng = np.random.default_rng(0)
    h = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mid = (h[:-1] + h[1:]) / 2  # ties: round half to even
    a = np.concatenate([
        rng.standard_normal(200_000) * 10.0 ** rng.integers(-9, 6, 200_000),
        mid, np.nextafter(mid, 0), np.nextafter(mid, 1),
        [0.0, 65504.0, 65519.99, 65520.0, 2**-24, 2**-25, 2**-25 * (1 + 2**-40), 1e300,
         1e-300, 5e-324, np.inf, np.nan]])
    a = np.concatenate([a, -a])
    o = np.empty(a.size, np.uint16)
    _to_half(a, o)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(o, a.astype(np.float16).view(np.uint16))


def test_float16_kernels_compile_where_no_library_provides_truncdfhf2():
    code = """
        import numpy as np, llvmlite.binding as ll, jitops
        x = np.linspace(-8, 8, 1001).astype(np.float16)
        r = jitops.add(x, x[::-1], act="tanh")  # computed in float64, rounded once
        ref = np.tanh(x.astype(np.float64) + x[::-1].astype(np.float64)).astype(np.float16)
        print(ll.address_of_symbol("__truncdfhf2") is None, np.array_equal(r, ref))
    """
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split()[-1] == "True"


def test_every_float16_widens_exactly_and_raises_no_flag():
    """Every float16 bit pattern widens to the float32 NumPy gives (finite values and
    infinities bit for bit; a NaN stays a NaN of the same sign and payload), and no finite
    value raises a floating-point flag on the way (jitops.cpu.kernels.half._half_widen)."""
    import jitops

    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    widen = jitops.elementwise(lambda a: a * 1, dtype=np.float32)
    finite = h[np.isfinite(h)]
    with np.errstate(all="raise"):
        got = widen(finite)
    np.testing.assert_array_equal(got.view(np.uint32), finite.astype(np.float32).view(np.uint32))
    with np.errstate(all="ignore"):
        special = h[~np.isfinite(h)]
        wide = widen(special)
    inf = np.isinf(special)
    np.testing.assert_array_equal(wide[inf], special[inf].astype(np.float32))
    bits, wbits = special[~inf].view(np.uint16), wide[~inf].view(np.uint32)
    assert np.isnan(wide[~inf]).all()
    np.testing.assert_array_equal(wbits >> 31, bits >> 15)
    np.testing.assert_array_equal((wbits >> 13) & 0x3FF, bits & 0x3FF)


def test_float16_calls_raise_only_the_flags_their_values_raise():
    """float16 data that raises no flag anywhere (every value in [2, 6)) raises none through
    any path: tiled, reversed, strided, broadcast, scalar and user-op rows, serial and
    parallel. F16C's packed conversion used on one value raised *invalid* from its
    register's other lanes in 13 of these calls."""
    import jitops

    rng = np.random.default_rng(7)

    @jitops.elementwise
    def aff(a, b, c):
        return a * b + c

    ops = [jitops.add, jitops.subtract, jitops.multiply, jitops.maximum, jitops.fmin,
           jitops.divide]

    def data(shape):
        return ((rng.random(shape) + 0.5) * 4).astype(np.float16)

    calls = 0
    for shape in [(7,), (1000,), (65, 100), (128, 269), (64, 100), (3, 90, 70), (300, 517)]:
        x, y = data(shape), data(shape[::-1] if len(shape) == 2 else shape)
        views = [(x, y.T if len(shape) == 2 else y)]
        if len(shape) == 2:
            views += [(x[:, ::-1], y.T), (x[::2], y.T[::2])]
        for a, b in views:
            with np.errstate(all="raise"):
                for op in ops:
                    for args in ((a, b), (a, np.float16(3)), (np.float16(3), b), (a, 3.0)):
                        op(*args)
                        calls += 1
                aff(a, b, a)
                aff(b, a, 2.0)
                calls += 2
    assert calls > 300
