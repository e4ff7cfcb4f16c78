"""Run tests/cuda, the shared spec table (tests/test_spec.py) and the user-op tests
(tests/test_user_ops.py), on the ``cuda`` backend, under
Numba's CUDA simulator, in a fresh process (the switch must be set before numba is imported),
and the no-GPU error path in this one."""

import os
import subprocess
import sys

import numpy as np
import pytest

import jitops
from jitops.core.device import cuda_unavailable_reason

HERE = os.path.dirname(os.path.abspath(__file__))


def test_cuda_kernels_on_the_simulator():
    # small blocks: the simulator runs every thread of a block as a Python thread
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", JITOPS_TEST_BACKENDS="cuda",
               JITOPS_CUDA_THREADS_PER_BLOCK="32")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-m", "not slow and not host_only",
                          "-W", "ignore::RuntimeWarning", os.path.join(HERE, "cuda"),
                          os.path.join(HERE, "test_spec.py"),
                          os.path.join(HERE, "test_user_ops.py")], env=env, capture_output=True,
                         text=True, timeout=900, cwd=os.path.dirname(HERE))
    tail = res.stdout[-4000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    assert " passed" in res.stdout and " skipped" not in res.stdout.splitlines()[-1], tail


def test_import_never_touches_cuda_and_cpu_path_is_untouched():
    code = ("import sys, numpy as np, jitops; jitops.add(np.ones(3), 1.0); "
            "print(any(m.startswith('jitops.cuda') for m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="a GPU is present here")
def test_no_gpu_error_says_why():
    with pytest.raises(RuntimeError, match=r"CUDA was requested but cannot run: .+"):
        jitops.subtract(np.ones(3), np.ones(3), device="cuda")
    total = jitops.elementwise(lambda a: a, reduce="sum")  # reductions: no CPU fallback either
    with pytest.raises(RuntimeError, match=r"CUDA was requested but cannot run: .+"):
        total(np.ones(3), device="cuda")
