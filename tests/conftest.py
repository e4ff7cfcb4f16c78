import os

# Every built-in kernel must compile under the light registries (jitops.cpu.compile.registries): in
# the tests, one that needs Numba's full refresh is an error, not a silent slowdown. Set
# before jitops is imported; subprocesses the tests start inherit it.
os.environ.setdefault("JITOPS_STRICT_REGISTRIES", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from . import backends  # noqa: E402

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# a long search, run by hand: HYPOTHESIS_PROFILE=deep pytest tests/test_interop.py
settings.register_profile(
    "deep", max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _environment_kept():
    """Each test leaves ``os.environ`` as it found it. distributed's LocalCluster sets
    ``OMP_NUM_THREADS=1`` in the *calling* process's environment for good (its
    ``pre-spawn-environ``), and every process a later test of the same worker started then ran
    jitops on one thread (jitops honours that variable)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(params=backends.selected())
def be(request):
    """Each backend a shared test runs on (tests/backends.py; ``JITOPS_TEST_BACKENDS``)."""
    if request.param == "dask":
        pytest.importorskip("dask.array", reason="the Dask backend's tests need Dask: "
                                                 "pip install -e '.[test]' (or '.[dask]')")
    if request.param == "cuda":
        from jitops.core.device import cuda_unavailable_reason

        if cuda_unavailable_reason() is not None:
            pytest.skip("neither a GPU nor the CUDA simulator is available")
    return backends.ALL[request.param]()


# -- the CUDA compile test's count (tests/test_cuda_compile.py) -----------------------------------
# Each chunk of the compile test appends "compiled failed" to one file; the controlling
# process prints the total as the run's last line (after pytest's summary), xdist or not.

def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        import tempfile

        fd, path = tempfile.mkstemp(prefix="jitops-cuda-compile-", suffix=".txt")
        os.close(fd)
        os.environ["JITOPS_COMPILE_REPORT"] = config._jitops_compile_report = path


def pytest_unconfigure(config):
    path = getattr(config, "_jitops_compile_report", None)
    if not path:
        return
    try:
        with open(path) as f:
            rows = [tuple(map(int, line.split())) for line in f if line.strip()]
        os.unlink(path)
    except OSError:
        return
    if rows:
        print(f"\n{sum(r[0] for r in rows)} compiled, {sum(r[1] for r in rows)} failed",
              flush=True)


@pytest.fixture
def tile_every_width(monkeypatch):
    """Every transpose of these tests tiles, 8- and 16-byte elements too: the planner walks
    most of their shapes strided for wide elements (plan.ALIAS_BYTES), and the tiled kernels
    must be right for every width. Plans and repeats made before are dropped, and after."""
    from jitops.core import plan
    from jitops.core.plan import make_plan
    from jitops.cpu.repeat import memo as repeat

    monkeypatch.setattr(plan, "ALIAS_BYTES", 1)
    monkeypatch.setattr(plan, "WIDE_SPAN", 1 << 62)
    make_plan.cache_clear()
    repeat.FAST.clear()
    yield
    make_plan.cache_clear()
    repeat.FAST.clear()
