"""NumPy's float32 ``power`` on the CPU (jitops.cpu.kernels.power32): C's ``powf``, computed as
arithmetic that vectorises. Checked against the C library's own ``powf`` -- values and the
floating-point flags it raises, on every pair of special values, each alone in an array and
among ordinary lanes (a flag raised by a lane whose answer comes from elsewhere is a bug) --
and against the correctly rounded answer on wide random samples, in every layout."""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import warnings

import numpy as np
import pytest

import jitops

from .test_values import specials

_LIBM = ctypes.util.find_library("m")
#: glibc's (x86-64) fenv bits and NumPy's warning for each
_FLAGS = {0x01: "invalid value", 0x04: "divide by zero", 0x08: "overflow", 0x10: "underflow"}


def _c_library():
    """The C library's ``powf`` and ``feclearexcept``/``fetestexcept``, or None."""
    if _LIBM is None:
        return None
    lib = ctypes.CDLL(_LIBM)
    try:
        lib.powf.restype, lib.powf.argtypes = ctypes.c_float, [ctypes.c_float] * 2
        lib.feclearexcept.argtypes = lib.fetestexcept.argtypes = [ctypes.c_int]
    except AttributeError:
        return None
    return lib


_C = _c_library()
needs_c = pytest.mark.skipif(_C is None, reason="needs the C library's powf and fenv")


def _c_powf(a, b):
    """C's ``powf(a, b)`` and the names of the flags it raised."""
    _C.feclearexcept(0x1D)
    r = np.float32(_C.powf(float(a), float(b)))
    raised = _C.fetestexcept(0x1D)
    return r, sorted(name for bit, name in _FLAGS.items() if raised & bit)


def _ours(x, y, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="warn"):
            r = jitops.power(x, y, **kw)
    return r, sorted({str(w.message).split(" encountered")[0] for w in caught})


def _grid():
    """The special values (quiet NaNs only: a signalling one cannot pass through ctypes) and
    values at the rules' edges: odd and even integers, a half, the float's integer limit."""
    more = np.array([-2.0, 0.5, -0.5, 3.0, -3.0, 1e30, -1e30, 1e-30, 2.5, -2.5, 1.0000001,
                     0.99999994, 128.0, -149.0, 150.0, 1e-45, -8.0, 1 / 3, -1.0, 2.0, 0.25,
                     16777216.0, -16777217.0, 127.99], np.float32)
    v = np.unique(np.concatenate([specials(np.float32), more]).view(np.uint32))
    v = v.view(np.float32)
    return v[~np.isnan(v) | ((v.view(np.uint32) & 0x400000) != 0)]


def _same(g, r):
    """Bit for bit, or a NaN for a NaN, or within 1 ulp for finite values."""
    if np.isnan(g) and np.isnan(r):
        return True
    gi, ri = int(g.view(np.int32)), int(r.view(np.int32))
    return gi == ri or (np.isfinite(g) and np.isfinite(r) and abs(gi - ri) <= 1)


@needs_c
def test_every_special_pair_is_c_powf_in_value_and_flags_alone_and_among_others():
    """Each pair of the grid: in a whole array, in one lane of ordinary ones (1.5 ** 0.5,
    which raise nothing), and strided; the same value and exactly C's flags every time."""
    grid = _grid()
    calm_x, calm_y = np.full(64, 1.5, np.float32), np.full(64, 0.5, np.float32)
    bad = []
    for a in grid:
        for b in grid:
            want, flags = _c_powf(a, b)
            alone, raised = _ours(np.full(16, a, np.float32), np.full(16, b, np.float32))
            xs, ys = calm_x.copy(), calm_y.copy()
            xs[37], ys[37] = a, b
            among, raised_among = _ours(xs, ys)
            strided, raised_strided = _ours(np.repeat(xs, 3)[::3], np.repeat(ys, 3)[::3])
            ok = (_same(alone[0], want) and among[37].tobytes() == alone[0].tobytes()
                  and strided[37].tobytes() == alone[0].tobytes()
                  and raised == raised_among == raised_strided == flags)
            if not ok:
                bad.append(f"{a!r} ** {b!r}: {alone[0]!r} {raised} (among others "
                           f"{raised_among}), C {want!r} {flags}")
    assert not bad, f"{len(bad)} pairs differ:\n" + "\n".join(bad[:20])


def test_signalling_nans_are_quieted_with_invalid_as_c_does():
    """C's rules: a zero exponent gives 1 and a base of 1 gives 1 unless the other operand is
    a signalling NaN (x + y then, quieted, *invalid*); a NaN operand gives its payload
    quieted, the base's first."""
    snan = np.array([0x7FA00001], np.uint32).view(np.float32)[0]
    qnan = np.array([0x7FC00002], np.uint32).view(np.float32)[0]
    cases = [(snan, 0.0, 0x7FE00001), (snan, 2.0, 0x7FE00001), (2.0, snan, 0x7FE00001),
             (1.0, snan, 0x7FE00001), (qnan, snan, 0x7FC00002), (snan, qnan, 0x7FE00001)]
    for a, b, bits in cases:
        got, raised = _ours(np.full(9, a, np.float32), np.full(9, b, np.float32))
        assert got.view(np.uint32)[0] == bits and raised == ["invalid value"], (a, b)
    for a, b in ((qnan, 0.0), (1.0, qnan)):
        got, raised = _ours(np.full(9, a, np.float32), np.full(9, b, np.float32))
        assert got[0] == 1.0 and raised == [], (a, b)


def test_random_values_are_within_one_ulp_of_the_correctly_rounded_in_every_layout():
    """Bases over the whole float range (a third negative), exponents up to 40 in magnitude
    (every seventh a whole number): against double's ``pow`` rounded to float32, within
    1 ulp, nearly always exact; strided, reversed, transposed, into out= and serial, the
    same bits as contiguous."""
    rng = np.random.default_rng(11)
    n = 1 << 19
    x = np.exp(rng.uniform(-103, 88, n)) * np.where(rng.random(n) < 0.3, -1, 1)
    x = x.astype(np.float32)
    y = rng.uniform(-40, 40, n).astype(np.float32)
    y[::7] = np.round(y[::7])
    with np.errstate(all="ignore"):
        got = jitops.power(x, y)
        ref = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    fin = np.isfinite(ref)
    assert np.array_equal(got[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])
    ulps = np.abs(got[fin].view(np.int32).astype(np.int64) - ref[fin].view(np.int32))
    assert ulps.max() <= 1 and (ulps == 0).mean() > 0.9999, (ulps.max(), (ulps > 0).sum())
    with np.errstate(all="ignore"):
        for sl in (slice(None, None, 2), slice(None, None, -1), slice(5, None, 3)):
            assert jitops.power(x[sl], y[sl]).tobytes() == got[sl].tobytes(), sl
        grid_x, grid_y = x.reshape(512, 1024), y.reshape(512, 1024)
        out = np.empty((1024, 512), np.float32)[:, ::-1]
        jitops.power(grid_x.T, grid_y.T, out=out)
        assert out.tobytes() == np.ascontiguousarray(got.reshape(512, 1024).T).tobytes()
        with jitops.threads(1):
            assert jitops.power(x[:5000], y[:5000]).tobytes() == got[:5000].tobytes()


def test_the_float32_power_loop_vectorises():
    """The shortcut's speed: the row loop runs the double-precision sequence on whole vectors
    and calls no ``powf`` (a task compiled afresh, uncached: one from the disk cache has no
    assembly)."""
    from jitops.cpu.compile import registries
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels import binary as kernels
    from jitops.cpu.kernels.spec import KernelSpec

    d = np.dtype(np.float32)
    spec = KernelSpec("power_float32", None, d, d, d, d)
    task = inner(kernels._task.py_func)
    sig = (spec.numba_type,) + (kernels._I64,) * 5
    registries.compile_with(lambda: task.compile(sig), builtin=True)
    asm = task.inspect_asm(sig)
    assert re.search(r"\bvfmadd\d+pd\s+[^\n]*%[yz]mm", asm), "no vector polynomial"
    assert "powf" not in asm and "pow@" not in asm


def test_chunks_of_calm_lanes_take_the_lean_form_with_the_general_forms_bits():
    """A chunk whose every lane is a positive normal base to a normal exponent runs the lean
    form (jitops.cpu.kernels.power32.calm and core); a chunk with one other lane, the general
    one. Each lane's bits are the same either way, within 1 ulp of the correctly rounded
    power, in contiguous and strided rows."""
    rng = np.random.default_rng(12)
    n = 1 << 16
    x = np.exp(rng.uniform(-87, 88, n)).astype(np.float32)
    y = rng.uniform(-40, 40, n).astype(np.float32)
    with np.errstate(all="ignore"):
        lean = jitops.power(x, y)
        ref = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
        fin = np.isfinite(ref)
        ulps = np.abs(lean[fin].view(np.int32).astype(np.int64) - ref[fin].view(np.int32))
        assert ulps.max() <= 1 and (ulps == 0).mean() > 0.9999
        xs, ys = x.copy(), y.copy()
        xs[::100], ys[::100] = -1.5, 0.5  # a NaN lane in every chunk: all run the general form
        general = jitops.power(xs, ys)
        assert np.isnan(general[::100]).all()
        keep = np.ones(n, bool)
        keep[::100] = False
        assert general[keep].tobytes() == lean[keep].tobytes()
        strided = jitops.power(np.repeat(xs, 2)[::2], np.repeat(ys, 2)[::2])
        assert strided.tobytes() == general.tobytes()
        assert jitops.power(x[::-1], y[::-1]).tobytes() == lean[::-1].tobytes()


@pytest.mark.parametrize("a,b", [(-2.0, 3.0), (-2.0, 0.5), (0.0, 2.0), (1e-45, 0.5),
                                 (np.inf, 2.0), (2.0, np.inf), (2.0, 0.0), (2.0, 1e-45),
                                 (np.nan, 2.0), (2.0, np.nan)])
def test_a_chunk_with_any_other_lane_is_not_calm(a, b):
    """Each kind of lane the lean form does not answer makes its whole chunk general:
    alone among 1023 calm lanes, it gets C's answer (the lean form's would differ)."""
    x, y = np.full(1024, 1.5, np.float32), np.full(1024, 0.5, np.float32)
    x[600], y[600] = a, b
    want, _ = _c_powf(np.float32(a), np.float32(b)) if _C is not None else (None, None)
    with np.errstate(all="ignore"):
        got = jitops.power(x, y)[600]
        if want is not None:
            assert _same(got, want), (got, want)
        assert got.tobytes() == jitops.power(x[600:601], y[600:601]).tobytes()


@pytest.mark.parametrize("e", [2.5, 3.0, -0.5, 1.7, -7.0])
def test_one_exponent_not_numpys_own_runs_the_vector_power(e):
    """``x ** e`` for an exponent NumPy's one-exponent loop has no answer of its own for:
    the vector power (``powf`` per element ran 0.8x NumPy), calm chunks and others, with the
    bits an array of that exponent gets, and NumPy's warnings; a constant base likewise."""
    rng = np.random.default_rng(13)
    n = 5000
    x = np.exp(rng.uniform(-20, 20, n)).astype(np.float32)
    x[4000::97] = [-2.0, 0.0, -0.0, np.inf, np.nan, 1e-45, -np.inf, -3.0, 5.0, -1.0, 0.5][
        :len(x[4000::97])]
    full = np.full(n, e, np.float32)
    for scalar in (e, np.float32(e), np.array(e, np.float32), np.array([e], np.float32)):
        got, raised = _ours(x, scalar)
        assert got.tobytes() == _ours(x, full)[0].tobytes(), scalar
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with np.errstate(all="warn"):
                want = np.power(x, np.float32(e))
        assert raised == sorted({str(w.message).split(" encountered")[0] for w in caught})
        assert _same_all(got, want)
    y = rng.uniform(-30, 30, n).astype(np.float32)
    base, _ = _ours(np.float32(1.7), y)
    assert base.tobytes() == _ours(np.full(n, 1.7, np.float32), y)[0].tobytes()


def _same_all(ours, theirs) -> bool:
    return all(_same(g, r) for g, r in zip(ours, theirs))
