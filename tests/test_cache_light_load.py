"""jitops' own kernels load from the disk cache without Numba's registry refresh.

Numba refreshes its typing and lowering registries before every cache load (importing most of
``numba.np``, ``numba.typed`` and ``numba.cpython``); jitops' built-in kernels skip that
(``jitops.cpu.compile.cache.enable``), which makes a cached first call ~6x faster. The
risk of the shortcut: machine code that needs a symbol only a registry module registers would
make LLVM abort the process. So a second process loads every kind of built-in kernel -- every
op and activation, integer, complex and float16 code, serial, parallel, pooled, tiled and
streaming drivers -- and must give the first process's answers, bit for bit, from the cache
alone, with the registries still unloaded; so must user ops, one of them hashing a string (the
one symbol a registry module registers).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CASES = """
import numpy as np, jitops
from jitops.core.scalar import ACT_NAMES

rng = np.random.default_rng(7)
def arr(dt, shape):
    a = rng.standard_normal(shape) * 4
    if np.dtype(dt).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dt)

calls = []
for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin"):
    for dt in (np.float32, np.int16, np.complex128):
        if dt is np.complex128 and op in ("maximum", "minimum", "fmax", "fmin"):
            continue
        calls.append((op, arr(dt, 40), arr(dt, 40), {}))
calls.append(("elementwise_div", arr(np.uint64, 40) + np.uint64(9), np.full(40, 3, np.uint64), {}))
for act in ACT_NAMES:
    calls.append(("add", arr(np.float64, 64), arr(np.float64, 64), {"act": act}))
calls.append(("multiply", arr(np.float16, 64), arr(np.float16, 64), {"act": "gelu"}))
big = arr(np.float32, (700, 300))
calls.append(("subtract", big, arr(np.float32, 300), {}))  # parallel (pooled) driver
calls.append(("subtract", big.T.copy().T, arr(np.float32, (700, 300)).T.copy().T, {}))
calls.append(("subtract", arr(np.float32, (512, 512)).T, arr(np.float32, (512, 512)), {}))  # tiled
calls.append(("subtract", arr(np.float32, 1 << 22), arr(np.float32, 1 << 22), {}))  # streaming
with jitops.threads(1):
    calls.append(("add", big, big, {}))

def results():
    out = []
    for op, x, y, kw in calls:
        out.append(getattr(jitops, op)(x, y, **kw))
    with jitops.threads(1):
        out.append(jitops.subtract(big, big[0]))  # serial driver above the threshold
    return out
"""

FIRST = CASES + """
res = results()
np.savez(OUT, *res)
"""

SECOND = CASES + """
import sys
from jitops.cpu.kernels import binary as K, nary as N
from jitops.cpu.threads import pool as P
res = results()
exp = np.load(OUT)
assert len(exp.files) == len(res)
for i, r in enumerate(res):
    e = exp[f"arr_{i}"]
    assert r.dtype == e.dtype and r.shape == e.shape, i
    assert r.tobytes() == e.tobytes(), (i, calls[i][0] if i < len(calls) else "serial")
misses = sum(sum(k.stats.cache_misses.values()) for k in K.KERNELS.values())
hits = sum(sum(k.stats.cache_hits.values()) for k in K.KERNELS.values())
assert misses == 0 and hits >= 30, (hits, misses)
# the shortcut held: nothing refreshed Numba's registries
assert "numba.np.linalg" not in sys.modules and "numba.typed.typeddict" not in sys.modules
# user ops load the same way; one hashes a string, which calls the one symbol a registry
# module (numba.cpython.hashing) registers: CPython's per-process hash secret
sys.path.insert(0, USER)
import light_user_op
x = arr(np.float32, 50)
r = light_user_op.fused(x, x, x)
assert np.array_equal(r, np.maximum(x * x + x, 0)), r
h = light_user_op.hashed(np.zeros(3, np.int64))
assert (h == hash("jitops") % 1000).all(), (h, hash("jitops") % 1000)
assert sum(N._utask_cached.stats.cache_hits.values()) == 2
assert sum(sum(k.stats.cache_misses.values()) for k in N.KERNELS.values()) == 0
assert "numba.np.linalg" not in sys.modules
print("ok")
"""

USER_OP = """
import jitops


@jitops.elementwise
def fused(x, w, b):
    return jitops.act.relu(x * w + b)


@jitops.elementwise
def hashed(x):
    return x + hash("jitops") % 1000
"""


def test_builtin_kernels_load_from_the_cache_without_the_registries(tmp_path):
    cache, user = tmp_path / "cache", tmp_path / "user"
    user.mkdir()
    (user / "light_user_op.py").write_text(USER_OP)
    env = dict(os.environ, JITOPS_CACHE_DIR=str(cache))
    env.pop("JITOPS_CACHE", None)
    env.pop("JITOPS_POOL", None)
    head = f"OUT = {str(tmp_path / 'expected.npz')!r}\nUSER = {str(user)!r}\n"
    prime = head + FIRST + "\nimport sys; sys.path.insert(0, USER)\nimport light_user_op\n" \
        "x = np.ones(3, np.float32); light_user_op.fused(x, x, x)\n" \
        "light_user_op.hashed(np.zeros(3, np.int64))\n"
    first = subprocess.run([sys.executable, "-c", textwrap.dedent(prime)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run([sys.executable, "-c", textwrap.dedent(head + SECOND)], env=env,
                            capture_output=True, text=True, timeout=300)
    # an LLVM abort on a missing symbol shows as a signal here, not as an assertion
    assert second.returncode == 0, (second.returncode, second.stderr[-3000:])
    assert second.stdout.split()[-1] == "ok"
