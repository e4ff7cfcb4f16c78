"""Concurrency, fork and the on-disk kernel cache: things that must never kill the process."""

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import jitops
from jitops.core import config as _config


def test_threading_layer_is_visible_and_safe():
    jitops.add(np.ones(_config.PARALLEL_THRESHOLD), 1.0)  # make sure a parallel kernel ran
    layer = jitops.threading_layer()
    assert layer in ("jitops", "tbb", "omp", "workqueue")
    # Linux: jitops' own pool, unless turned off; then Numba's own default priority picks tbb
    # first, and jitops makes pip's TBB (a dependency on x86-64) loadable, so that is the
    # layer there unless the user chose another
    if sys.platform.startswith("linux") and os.environ.get("JITOPS_POOL") != "0":
        assert layer == "jitops"
    elif os.uname().machine == "x86_64" and "NUMBA_THREADING_LAYER" not in os.environ:
        assert layer == "tbb"


def test_sixteen_threads_mixed_ops_and_dtypes(rng):
    n = 4 * _config.PARALLEL_THRESHOLD  # large enough to launch the parallel kernel
    data = {dt: (rng.standard_normal(n) * 100).astype(dt) for dt in ("float32", "float64", "int32")}
    ops = [("add", np.add), ("subtract", np.subtract), ("fmin", np.fmin), ("maximum", np.maximum)]

    def work(i):
        dt = list(data)[i % 3]
        name, ref = ops[i % 4]
        x = data[dt]
        for _ in range(10):
            got = getattr(jitops, name)(x, x[::-1])
            np.testing.assert_array_equal(got, ref(x, x[::-1]))
        return True

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(work, range(64)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_after_parallel_call():
    x = np.arange(4 * _config.PARALLEL_THRESHOLD, dtype=np.float64)
    jitops.subtract(x, 1.0)  # parallel kernel runs in the parent first
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            ok = np.array_equal(jitops.subtract(x, 1.0), x - 1.0) and \
                np.array_equal(jitops.add(x[:10], 1.0), x[:10] + 1.0)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _run(code, env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_second_process_hits_the_disk_cache(tmp_path):
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path))
    code = """
        import time, numpy as np, jitops
        from jitops.cpu.kernels import binary as _cpu
        x = np.ones(10, np.float32)
        t = time.perf_counter(); jitops.multiply(x, x, act="tanh"); dt = time.perf_counter() - t
        s = _cpu._task.stats  # the op- and dtype-specific code (the drivers are shared)
        print(sum(s.cache_hits.values()), sum(s.cache_misses.values()), dt)
    """
    first = _run(code, env)
    assert first.returncode == 0, first.stderr
    hits, misses, _ = first.stdout.split()
    assert (hits, misses) == ("0", "1")
    files = sorted(os.listdir(tmp_path))
    assert files, "nothing was cached"
    sizes = {f: os.path.getsize(tmp_path / f) for f in files}
    for _ in range(2):
        again = _run(code, env)
        assert again.returncode == 0, again.stderr
        hits, misses, dt = again.stdout.split()
        assert (hits, misses) == ("1", "0")
        # loading is ~0.1 s here against ~1 s to compile; the benchmark suite reports the
        # exact figure (SPEC: <= 0.2 s), this only guards against a silent recompile
        assert float(dt) < 0.6, f"first call with a warm cache took {dt} s"
    # repeated runs do not grow the cache
    assert sorted(os.listdir(tmp_path)) == files
    assert {f: os.path.getsize(tmp_path / f) for f in files} == sizes


def test_cache_can_be_switched_off(tmp_path):
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path), JITOPS_CACHE="0")
    res = _run("import numpy as np, jitops; jitops.add(np.ones(3), 1.0)", env)
    assert res.returncode == 0, res.stderr
    assert os.listdir(tmp_path) == []


def test_serial_block_runs_the_serial_kernels_and_restores(rng):
    from jitops.cpu.threads import parallel as _threading

    x = rng.random(2 * _config.PARALLEL_THRESHOLD)
    assert _threading.parallel_allowed()
    with _threading.serial():
        assert not _threading.parallel_allowed()
        with _threading.serial():
            np.testing.assert_array_equal(jitops.subtract(x, 1.0), x - 1.0)
        assert not _threading.parallel_allowed()  # the outer block still holds
    assert _threading.parallel_allowed()
    np.testing.assert_array_equal(jitops.subtract(x, 1.0), x - 1.0)
