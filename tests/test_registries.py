"""jitops compiles its kernels under light Numba registries (jitops.cpu.compile.registries): faster
first calls, never a failed one, and nothing changed for other Numba users in the process."""

import json
import os
import subprocess
import sys
import threading

import numba
import numpy as np
import pytest

import jitops
from jitops.cpu.compile import registries

_FRESH = r"""
import json, sys
import numpy as np
import jitops
from jitops.cpu.compile import registries
from numba.core.registry import cpu_target
x = np.arange(1000, dtype=np.float32)
ok = bool((jitops.subtract(x, 1.5) == x - 1.5).all())
X = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)
ok &= bool((jitops.subtract(X.T, X) == X.T - X).all())  # tiled: staging compiled too
ok &= bool((jitops.divide(x.astype("c16"), 1 + 2j) == x.astype("c16") / (1 + 2j)).all())
heavy = [m for m in ("numba.np.linalg", "numba.np.random.generator_core", "numba.np.npdatetime",
                     "numba.np.polynomial.polynomial_core", "numba.experimental.jitclass.base")
         if m in sys.modules]
left = [k for k in ("load_additional_registries",)
        if k in vars(cpu_target.target_context) or k in vars(cpu_target.typing_context)]
left += [k for k in ("_library_class",) if k in vars(cpu_target.target_context.codegen())]
fallbacks = registries.FALLBACKS

# a user op calling a NumPy ufunc, whose implementation lives in a registry the light set
# leaves out: retried under the full refresh (Numba's remembered typing error forgotten)
@jitops.elementwise
def soft(x, y):
    return np.exp(x) - np.sqrt(y)

u, v = np.linspace(-3, 3, 50), np.linspace(0, 9, 50)
soft_ok = bool(np.allclose(soft(u, v), np.exp(u) - np.sqrt(v), rtol=1e-15, atol=0))
soft_fallbacks = registries.FALLBACKS - fallbacks

# a user's own Numba code in the same process: the full refresh installs what it needs
import numba
from numba import typed, types

@numba.njit
def mine(a):
    d = typed.Dict.empty(types.int64, types.float64)
    d[1] = np.sort(a)[-1]
    # builtins whose implementations jitops' kernels (tiled ones too) compiled lazily: linked
    # into this function's own code
    k = min(len(a), 3) - max(len(a), 3) + abs(-1)  # 0
    return d[1] + np.cumsum(a)[-1] + np.random.random() * 0 + k

a = np.arange(4.0)
mine_ok = abs(mine(a) - (a.max() + a.sum())) < 1e-12
print(json.dumps({"ok": ok, "heavy": heavy, "left": left, "fallbacks": fallbacks,
                  "soft_ok": soft_ok, "soft_fallbacks": soft_fallbacks, "mine_ok": bool(mine_ok)}))
"""


def test_kernels_compile_light_and_others_still_get_everything(tmp_path):
    """In a fresh process with an empty cache: the built-in kernels compile without Numba's
    heavy registries (none of their modules is imported, no retry), the contexts keep no
    trace of the light refresh; a user op that needs more is retried once and is right; the
    process's own ``@njit`` code using typed dicts, ``np.sort``, ``np.cumsum`` and
    ``np.random`` then compiles and runs."""
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path), JITOPS_STRICT_REGISTRIES="1")
    r = subprocess.run([sys.executable, "-c", _FRESH], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"ok": True, "heavy": [], "left": [], "fallbacks": 0, "soft_ok": True,
                   "soft_fallbacks": 1, "mine_ok": True}


def test_a_user_op_that_does_not_compile_still_names_itself():
    @jitops.elementwise
    def broken(x):
        return x.no_such_attribute

    with pytest.raises(TypeError, match="broken"):
        broken(np.ones(3))


def test_retry_and_strict_mode(monkeypatch):
    """A compile that fails under the light registries is retried under the full refresh
    (counted); in strict mode a built-in one raises instead."""
    calls = []

    def compile_fn():
        calls.append(registries._active)
        if registries._active:
            raise numba.core.errors.TypingError("needs a registry left out")
        return "compiled"

    monkeypatch.setattr(registries, "_STRICT", False)
    before = registries.FALLBACKS
    assert registries.compile_with(compile_fn) == "compiled"
    assert calls == [True, False] and registries.FALLBACKS == before + 1
    monkeypatch.setattr(registries, "_STRICT", True)
    with pytest.raises(RuntimeError, match="light registries"):
        registries.compile_with(compile_fn)
    calls.clear()
    assert registries.compile_with(compile_fn, builtin=False) == "compiled"  # user code
    assert calls == [True, False]


def test_other_threads_compile_while_jitops_does():
    """Numba's compiler lock keeps the light refresh to jitops' own compiles: a thread
    compiling its own function meanwhile gets the full registries."""
    errors = []

    def theirs():
        try:
            @numba.njit
            def f(a):
                return np.sort(a)[0] + np.cumsum(a)[-1]

            a = np.arange(5.0)[::-1]
            assert abs(f(a) - a.sum()) < 1e-12
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    t = threading.Thread(target=theirs)
    t.start()
    x = np.arange(300, dtype=np.int16)
    np.testing.assert_array_equal(jitops.fmax(x, np.int8(7)), np.fmax(x, np.int8(7)))
    t.join()
    assert not errors
