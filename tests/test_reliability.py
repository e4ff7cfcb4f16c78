"""Reliability: unsafe threading layers made safe, fuzzed strides, resources, huge arrays."""

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitops

from .helpers import assert_same, numpy_op


def _run(code, **env):
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=600)


THREADS = """
    import numpy as np, jitops, numba
    from concurrent.futures import ThreadPoolExecutor
    x = np.arange(300_000, dtype=np.float64)
    def work(i):
        for _ in range(5):
            assert np.array_equal(jitops.subtract(x, float(i)), x - i)
        return True
    with ThreadPoolExecutor(16) as p:
        assert all(p.map(work, range(32)))
    print(jitops.threading_layer())
"""

FORK = """
    import os, numpy as np, jitops, numba
    x = np.arange(300_000, dtype=np.float64)
    jitops.add(x, 1.0)
    pid = os.fork()
    if pid == 0:
        ok = np.array_equal(jitops.add(x, 1.0), x + 1.0)
        os._exit(0 if ok else 3)
    _, st = os.waitpid(pid, 0)
    print(jitops.threading_layer(), os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st))
"""


def _layer_env(layer: str) -> dict:
    """"jitops": the default (jitops' own pool); else Numba's layer (the pool turned off, as
    on platforms without it)."""
    if layer == "jitops":
        return {}
    return {"NUMBA_THREADING_LAYER": layer, "JITOPS_POOL": "0"}


LAYERS = ["jitops", "workqueue", "omp", "tbb"]


@pytest.mark.parametrize("script, expect", [(THREADS, ()), (FORK, ("0",))],
                         ids=["16-threads", "fork-child"])
@pytest.mark.parametrize("layer", LAYERS)
def test_every_threading_layer_survives(layer, script, expect):
    """workqueue aborts on concurrent launches and omp kills a forked child unless jitops
    serialises (workqueue) or runs serially in the child (omp); jitops' own pool needs
    neither. See test_fork_threads.py for the scenarios with other OpenMP users."""
    res = _run(script, **_layer_env(layer))
    if "No threading layer could be loaded" in res.stderr or "not available" in res.stderr:
        pytest.skip(f"layer {layer} cannot be loaded here")
    assert res.returncode == 0, res.stderr[-2000:]
    assert tuple(res.stdout.split()) == (layer, *expect)


# Thousands of parallel launches over varying shapes and every variant (contig, scalar rows,
# strided, tiled, N-d odometers, reversed views): the parallel driver once freed its task
# scratch while tasks still wrote it, which aborted such loops within seconds.
STRESS = """
    import numpy as np, jitops, numba
    rng = np.random.default_rng(7)
    done = 0
    while done < 3000:
        r, c = int(rng.integers(2, 300)), int(rng.integers(2, 300))
        X = rng.standard_normal((r, c)).astype(np.float32)
        Y = rng.standard_normal(c).astype(np.float32)
        Yr = rng.standard_normal((r, 1)).astype(np.float32)
        Z = rng.standard_normal((c, r)).astype(np.float32)
        W = rng.standard_normal((3, r, c)).astype(np.float32)
        for got, exp in (
                (jitops.subtract(X, Y), X - Y),
                (jitops.subtract(X, Yr), X - Yr),
                (jitops.elementwise_sub(X, Yr[:, 0], axis=0), X - Yr),
                (jitops.subtract(Z.T, X), Z.T - X),
                (jitops.add(W[:, ::-1, ::2], X[::-1, ::2]), W[:, ::-1, ::2] + X[::-1, ::2]),
                (jitops.multiply(W.transpose(2, 0, 1), Y[:, None, None]),
                 W.transpose(2, 0, 1) * Y[:, None, None])):
            assert np.array_equal(got, exp)
            done += 1
    print("ok", done, jitops.threading_layer())
"""


@pytest.mark.parametrize("layer", LAYERS)
def test_thousands_of_parallel_calls_never_abort(layer):
    # a low threshold makes every one of these small calls a parallel launch
    res = _run(STRESS, JITOPS_PARALLEL_THRESHOLD="256", **_layer_env(layer))
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["ok", "3000", layer]


VALGRIND = """
    import numpy as np, jitops
    import jitops_valgrind_ops as ops  # a module-level user op: its task is cached too
    rng = np.random.default_rng(0)
    for i in range(6):
        r, c = int(rng.integers(300, 400)), int(rng.integers(300, 400))
        X = rng.standard_normal((r, c)).astype(np.float32)
        Y = rng.standard_normal(c).astype(np.float32)
        Z = rng.standard_normal((c, r)).astype(np.float32)
        assert np.array_equal(jitops.subtract(X, Y), X - Y)
        assert np.array_equal(jitops.subtract(Z.T, X), Z.T - X)
        h = np.float32(0.5)
        assert np.array_equal(ops.mul_sub(X, Y, h), X * Y - h)  # user op, constant inputs
        assert np.array_equal(ops.mul_sub(Z.T, X, Y), Z.T * X - Y)  # user op, tiled
    print("ok")
"""

VALGRIND_OPS = """
import jitops


@jitops.elementwise
def mul_sub(a, b, c):
    return a * b - c
"""


@pytest.mark.slow
def test_parallel_kernels_under_valgrind(tmp_path):
    """Memcheck finds no invalid read or write in jitops' kernels (minutes: `pytest -m slow`):
    built-in and user-op rows, broadcast and tiled, every row that can stream streaming (the
    threshold at one byte). The loader's own rpath reads (dl-load.c) are valgrind's known
    false positives."""
    import shutil

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    (tmp_path / "jitops_valgrind_ops.py").write_text(VALGRIND_OPS)
    env = dict(os.environ, JITOPS_STREAM_BYTES="1", JITOPS_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    warm = _run(VALGRIND, **env)  # compile into the cache first: valgrind then runs kernels
    assert warm.returncode == 0 and "ok" in warm.stdout, warm.stderr[-3000:]
    res = subprocess.run(["valgrind", "--error-limit=no", "-q", sys.executable, "-c",
                          textwrap.dedent(VALGRIND)], env=dict(env, PYTHONMALLOC="malloc"),
                         capture_output=True, text=True, timeout=3000)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
    bad = [b for b in res.stderr.split("Invalid ")[1:] if "dl-load.c" not in b[:2000]]
    assert not bad, "".join(bad[:3])[:3000]


@st.composite
def strided_view(draw, dtype):
    """An arbitrary view of a buffer: random shape, any (negative/zero) element strides."""
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple))
    strides = tuple(draw(st.integers(-6, 6)) for _ in shape)
    lo = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0 and n)
    hi = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0 and n)
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    base = (rng.standard_normal(hi - lo + 1) * 10).astype(dtype)
    item = base.itemsize
    start = base[-lo:] if lo else base
    return np.lib.stride_tricks.as_strided(start, shape, tuple(s * item for s in strides),
                                           writeable=False)


@given(st.data())
def test_fuzz_strided_views_against_numpy(data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int32"]))
    op = data.draw(st.sampled_from(["add", "subtract", "fmin", "maximum"]))
    x = data.draw(strided_view(dtype))
    y = data.draw(strided_view(dtype))
    try:
        exp = numpy_op(op, x, y)
    except ValueError:
        with pytest.raises(ValueError):
            getattr(jitops, op)(x, y)
        return
    assert_same(getattr(jitops, op)(x, y), exp, op, x, y)


@given(st.lists(st.integers(-1, 5), max_size=4), st.lists(st.integers(-1, 5), max_size=4),
       st.sampled_from(["none", "numpy", "pdpd", "NUMPY", "bad", ""]), st.integers(-8, 8))
def test_fuzz_planner_raises_only_value_or_type_errors(xs, ys, mode, axis):
    try:
        jitops.result_shape(tuple(xs), tuple(ys), broadcast=mode, axis=axis)
    except (ValueError, TypeError):
        pass


def test_no_memory_fd_or_thread_growth():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    out = np.empty_like(x)

    def burst(n):
        for i in range(n):
            jitops.subtract(x, x[::-1], out=out)
            jitops.add(x, float(i))
            jitops.fmin(x[:10].reshape(2, 5), x[:5], broadcast="pdpd")

    burst(200)  # warm-up: compile, plan caches
    gc.collect()
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    nthreads = threading.active_count()
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    burst(3000)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    assert grown < 256 * 1024, f"{grown} bytes retained after 9000 calls"
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds
    assert threading.active_count() == nthreads


@pytest.mark.slow
def test_more_than_2_31_elements():
    """About 6.5 GB: run with `python -m pytest -m slow`."""
    n = 2**31 + 77
    x = np.ones(n, np.int8)
    y = np.full(n, 2, np.int8)
    x[-1], y[-1] = 100, 100
    r = jitops.add(x, y)
    assert r.shape == (n,) and r.dtype == np.int8
    assert r[0] == 3 and r[2**31] == 3 and r[-1] == -56  # 200 wraps to -56
    assert int(np.count_nonzero(r == 3)) == n - 1
    del r
    jitops.subtract(x, y, out=x)  # in place, past 2**31
    assert x[2**31 + 5] == -1 and x[-1] == 0
