"""Shared oracles and data generators for the kernel tests."""

from __future__ import annotations

import os

import numpy as np

import jitops

OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin")
REAL_ONLY = {"maximum", "minimum", "fmax", "fmin"}
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")


def valid(op: str, dtype) -> bool:
    dt = np.dtype(dtype)
    if op == "subtract" and dt.kind == "b":
        return False
    if op in REAL_ONLY and dt.kind == "c":
        return False
    return True


def sample(rng, shape, dtype):
    """Values that exercise the edges: extremes, zeros, NaN/inf/-0.0 for floats."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "b":
        a = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        edges = np.array([info.min, info.max, 0, 1, info.max // 2], dtype=dt)
        a[: min(n, 5)] = edges[: min(n, 5)]
    else:
        real = np.dtype(dt.char.lower() if dt.kind != "c" else ("f4" if dt.itemsize == 8 else "f8"))
        a = (rng.standard_normal(n) * 50).astype(real)
        edges = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0], dtype=real)
        k = min(n, 6)
        pos = rng.permutation(n)[:k]
        a[pos] = edges[:k]
        if dt.kind == "c":
            a = a + 1j * (rng.standard_normal(n) * 50).astype(real)
            a = a.astype(dt)
    return a.reshape(shape)


def numpy_op(op: str, x, y, **kw):
    if op in REAL_ONLY or op in ("add", "subtract", "multiply", "divide"):
        with np.errstate(all="ignore"):
            return getattr(np, op)(x, y, **kw)
    raise KeyError(op)


def assert_same(got, exp, op: str = "", first=None, second=None):
    """Exact equality (NaNs at the same places); an ulp of tolerance only for complex * and /.

    For fmin/fmax where both operands are NaN, jitops returns the first operand's NaN bits
    (Paddle's rule) while NumPy returns the second's, so those positions compare as NaN only
    and their bits are checked against ``first`` when it is given.
    """
    got, exp = np.asarray(got), np.asarray(exp)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    if exp.dtype.kind == "c" and op in ("multiply", "divide"):
        # Complex products/quotients may round differently from NumPy's loops by an ulp.
        np.testing.assert_allclose(got, exp, rtol=1e-5 if exp.dtype == np.complex64 else 1e-12,
                                   equal_nan=True)
        return
    np.testing.assert_array_equal(got, exp)
    if op in ("fmin", "fmax") and exp.dtype.kind == "f" and first is not None:
        fx, fy = np.broadcast_arrays(np.asarray(first), np.asarray(second))
        both = np.isnan(fx) & np.isnan(fy)
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[exp.dtype.itemsize]
        if both.any():
            np.testing.assert_array_equal(got[both].view(bits),
                                          fx[both].astype(exp.dtype).view(bits))


def call(op, *a, **k):
    return getattr(jitops, op)(*a, **k)


def cgroup_v1_child(controller: str) -> str:
    """A fresh cgroup v1 directory under this process's own group for ``controller``; the
    test is skipped, with the reason, where this machine does not let one be made (not root,
    no such v1 hierarchy, or a read-only one). The caller removes it (``os.rmdir``) once its
    processes are gone; a child joins it with :func:`cgroup_join_source`."""
    import pytest

    try:
        with open("/proc/self/cgroup") as f:
            rel = next(ln.split(":", 2)[2].strip() for ln in f
                       if controller in ln.split(":")[1].split(","))
        d = os.path.join("/sys/fs/cgroup", controller, rel.lstrip("/"),
                         f"jitops-test-{os.getpid()}")
        os.mkdir(d)
    except (OSError, StopIteration):
        pytest.skip(f"this machine lets no test make a cgroup v1 {controller} group (not "
                    f"root, no cgroup v1 {controller} hierarchy, or a read-only one)")
    return d


def cgroup_join_source(d: str) -> str:
    """Python source that moves the process running it into cgroup ``d``."""
    return f"with open({os.path.join(d, 'cgroup.procs')!r}, 'w') as f:\n    f.write('0')\n"


def counting_prepare(monkeypatch) -> list:
    """Count the calls that go through the careful path (the pipeline's ``prepare``): the
    list of their ops, appended to as they come."""
    from jitops import dispatch

    calls = []
    real = dispatch.prepare

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(dispatch, "prepare", counted)
    return calls
