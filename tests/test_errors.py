"""SPEC section 4: every bad input raises the documented type, naming the problem, early.

The cases every backend shares are in tests/test_spec.py (run on each backend); these are the
rest, on host arrays: more dtypes and operand kinds, read-only ``out``, device spellings."""

import os

import numpy as np
import pytest

import jitops

X = np.arange(6, dtype=np.float32).reshape(2, 3)
OUT = np.full((2, 3), 7, np.float32)

CASES = [
    # (description, kwargs for jitops.subtract, exception, match)
    ("mode type", dict(x=X, y=X, broadcast=None), ValueError, "broadcast must be one of"),
    ("axis in none mode", dict(x=X, y=X, broadcast="none", axis=1), ValueError, "axis applies"),
    ("axis < -1", dict(x=X, y=X[0], broadcast="pdpd", axis=-2), ValueError, r"out of range"),
    ("object dtype", dict(x=np.array([object()] * 3), y=X[0]), TypeError, "object dtype"),
    ("datetime dtype", dict(x=np.array([np.datetime64("2020-01-01")] * 3), y=X[0]), TypeError,
     "datetime dtype"),
    ("timedelta", dict(x=np.array([np.timedelta64(1, "D")] * 3), y=X[0]), TypeError,
     "timedelta dtype"),
    ("None operand", dict(x=None, y=X), TypeError, "object dtype"),
    ("dict operand", dict(x={"a": 1}, y=X), TypeError, "object dtype"),
    ("out read-only", dict(x=X, y=X, out="readonly"), ValueError, "read-only"),
    ("out not array", dict(x=X, y=X, out=[0] * 6), TypeError, "out must be a numpy.ndarray"),
    ("device type", dict(x=X, y=X, device=0), TypeError, "device must be"),
]


@pytest.mark.parametrize("desc, kw, exc, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input(desc, kw, exc, match):
    kw = dict(kw)
    if isinstance(kw.get("out"), str):
        o = OUT.copy()
        o.flags.writeable = False
        kw["out"] = o
    inputs = [v for v in (kw.get("x"), kw.get("y")) if isinstance(v, np.ndarray)]
    before = [v.copy() for v in inputs]
    out_before = kw["out"].copy() if isinstance(kw.get("out"), np.ndarray) else None
    with pytest.raises(exc, match=match):
        jitops.subtract(**kw)
    for v, b in zip(inputs, before):
        np.testing.assert_array_equal(v, b)
    if out_before is not None:
        np.testing.assert_array_equal(kw["out"], out_before)


def test_cuda_without_gpu_is_a_runtime_error_not_a_fallback():
    from jitops.core.device import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("a real GPU is present")
    with pytest.raises(RuntimeError, match="CUDA was requested but cannot run"):
        jitops.add(X, X, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA was requested"):
        jitops.add(X, X, device="cuda:1")


@pytest.mark.parametrize("name, value, says", [
    ("JITOPS_BLOCK", "abc", "JITOPS_BLOCK must be an integer from 1 to 4611686018427387903, "
                            "got 'abc'"),
    ("JITOPS_STREAM_BYTES", "1.5", "JITOPS_STREAM_BYTES must be an integer"),
    ("JITOPS_POOL_SPIN", "-1", "JITOPS_POOL_SPIN must be an integer from 0 to "
                               "4611686018427387903, got -1"),
    ("JITOPS_TILE_J", "0", "JITOPS_TILE_J must be an integer from 1 to 4611686018427387903, "
                           "got 0"),
    ("JITOPS_RECYCLE_MB", "lots", "JITOPS_RECYCLE_MB must be an integer"),
])
def test_a_bad_tunable_in_the_environment_is_named_at_import(name, value, says):
    import subprocess
    import sys
    env = dict(os.environ, **{name: value})
    p = subprocess.run([sys.executable, "-c", "import jitops"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and f"ValueError: {says}" in p.stderr, p.stderr[-1500:]


def test_a_blank_tunable_means_its_default():
    import subprocess
    import sys
    env = dict(os.environ, JITOPS_STREAM_BYTES="", JITOPS_BLOCK=" ", JITOPS_RECYCLE_MB="")
    code = ("from jitops.core import config; import jitops, numpy as np; "
            "assert config.BLOCK == 65536 and config.RECYCLE_BYTES == 256 << 20; "
            "assert config.STREAM_BYTES == config._last_level_cache_bytes(); "
            "print(jitops.add(np.ones(3), 1.0))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "[2. 2. 2.]" in p.stdout, p.stderr[-1500:]
