"""float16 conversions of the CPU kernels (jitops.cpu.half): float64 -> float16 rounds exactly
as NumPy does, without the libgcc function ``__truncdfhf2`` that LLVM would otherwise call (a
JIT finds it only where some library happened to make it global; without it LLVM aborts)."""

import subprocess
import sys
import textwrap

import numpy as np
from numba import njit

from jitops.cpu.half import float_to_half


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
