"""Helpers and tasks are compiled without Python entry points (jitops.cpu.compile.jit): less for
LLVM in every new signature, and a Python call is a TypeError instead of a jump to address 0."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from numba import types

import jitops
from jitops.cpu.compile import jit, registries
from jitops.cpu.kernels import binary as kernels
from jitops.cpu.kernels import nary, spec
from jitops.cpu.threads import pool


def _inner_dispatchers():
    for mod in (kernels, nary, pool, spec):
        for name, obj in vars(mod).items():
            if isinstance(obj, jit.InnerDispatcher):
                yield f"{mod.__name__}.{name}", obj


def test_the_helpers_and_tasks_are_inner():
    names = {n for n, _ in _inner_dispatchers()}
    for must in ("jitops.cpu.kernels.binary._task",
                 "jitops.cpu.kernels.nary._utask_cached",
                 "jitops.cpu.threads.pool.run_job"):
        assert must in names
    # what Python calls keeps its entry point
    for entry in (*kernels.KERNELS.values(), *nary.KERNELS.values(), pool._worker,
                  pool.futex_wake):
        if entry not in (kernels.KERNELS["task"], nary.KERNELS["task"]):
            assert not isinstance(entry, jit.InnerDispatcher), entry


@pytest.mark.parametrize("name", sorted(n for n, _ in _inner_dispatchers()))
def test_a_python_call_is_a_type_error(name):
    disp = dict(_inner_dispatchers())[name]
    with pytest.raises(TypeError, match="only inside compiled code"):
        disp(*([0] * disp.py_func.__code__.co_argcount))


def test_a_compiled_task_has_no_python_wrapper():
    x = np.arange(5.0)
    assert np.array_equal(jitops.subtract(x, 1.0), x - 1.0)
    (sig, cres), *_ = kernels._task.overloads.items()
    assert cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name) != 0
    assert cres.library.get_pointer_to_function(cres.fndesc.llvm_cpython_wrapper_name) == 0


def test_the_user_op_task_links_its_code_as_it_is():
    """The user-op task is a wrapper (jitops.cpu.compile.jit.wrapper): its library links the
    optimised task as it is, and the result is right (tests/test_user_ops.py loads such
    tasks from the disk cache in new processes)."""
    @jitops.elementwise
    def lerp(a, b, t):
        return a + (b - a) * t

    a, b = np.arange(300.0), np.arange(300.0)[::-1].copy()
    np.testing.assert_array_equal(lerp(a, b, 0.25), a + (b - a) * 0.25)
    # lerp is local to this test, so never cached: its task was compiled here (one loaded
    # from the disk cache is rebuilt from object code, whatever library made it)
    libraries = [c.library for c in nary._utask_local.overloads.values()]
    assert libraries and all(isinstance(lib, jit._LinkedAsIsLibrary) for lib in libraries)
    # nothing else is compiled that way: a built-in task's loops are its own, optimised
    np.testing.assert_array_equal(jitops.subtract(a, b), a - b)
    assert not any(isinstance(c.library, jit._LinkedAsIsLibrary)
                   for c in kernels._task.overloads.values())


def test_the_serial_and_pooled_drivers_are_optimised_lightly_and_their_tasks_are_not(
        monkeypatch):
    """The serial and pooled drivers compile into a _DriverLibrary: function passes at -O1 on
    the driver and its Python wrapper, none of Numba's module pipelines (a driver checks the
    call and runs tasks through their address); a task compiled beside it still gets
    Numba's full pipeline and vectorised loops, and calls through the drivers give NumPy's
    answers."""
    from numba.core.registry import cpu_target

    for d in (kernels.KERNELS["serial"], kernels.KERNELS["pooled"], nary.KERNELS["serial"],
              nary.KERNELS["pooled"]):
        assert d._compiler.pipeline_class is jit._DriverCompiler, d
    assert kernels.KERNELS["parallel"]._compiler.pipeline_class is not jit._DriverCompiler
    cg = cpu_target.target_context.codegen()
    asked = []  # ("module" | "function", options) of every pipeline asked for
    for kind in ("module", "function"):
        real = getattr(cg, f"_{kind}_pass_manager")
        monkeypatch.setattr(cg, f"_{kind}_pass_manager",
                            lambda real=real, kind=kind, **kw: asked.append((kind, kw))
                            or real(**kw))
    per_driver = []  # the pipelines each driver library asked for
    optimise = jit._DriverLibrary._optimize_final_module

    def spy(self):
        n = len(asked)
        optimise(self)
        per_driver.append(asked[n:])

    monkeypatch.setattr(jit._DriverLibrary, "_optimize_final_module", spy)
    fresh = jit.driver(kernels.KERNELS["serial"].py_func)
    sig = (types.int64,) * 5
    registries.compile_with(lambda: fresh.compile(sig))
    assert isinstance(fresh.overloads[sig].library, jit._DriverLibrary)
    (own,) = per_driver
    assert [(k, kw["opt"]) for k, kw in own] == [("function", 1)] * 2, own  # driver, wrapper
    asked.clear()
    task = jit.inner(kernels._task.py_func)  # a task compiled afresh: fully optimised
    dt = np.dtype(np.float32)
    tsig = (spec.KernelSpec("add", None, dt, dt, dt, dt).numba_type,) + (types.int64,) * 5
    registries.compile_with(lambda: task.compile(tsig))
    assert not isinstance(task.overloads[tsig].library, jit._DriverLibrary)
    assert ("module", {}) in asked, asked  # Numba's full -O3 pipeline
    assert re.search(r"\bvaddps\b", task.inspect_asm(tsig))
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(jitops.add(x, x[::-1]), x + x[::-1])
    np.testing.assert_array_equal(jitops.elementwise(lambda a, b: a * b)(x, x), x * x)


def test_helpers_reach_machine_code_only_through_their_callers():
    """Libraries compiled by jitops are lazy (jitops.cpu.compile.jit.LazyLibrary): a helper's is
    linked into its caller and never turned into machine code of its own; the caller's is,
    once its address is asked for, with its environment pointer set as Numba sets it; and the
    code is right."""
    def add_one(a):
        return a + 1

    callee = jit.inner(add_one)

    def twice_plus(a):
        return callee(a) * 2

    caller = jit.inner(twice_plus)
    with registries.light():
        caller.compile((types.int64,))
    low, top = callee.overloads[(types.int64,)], caller.overloads[(types.int64,)]
    assert isinstance(low.library, jit.LazyLibrary) and isinstance(top.library, jit.LazyLibrary)
    assert low.library._lazy and top.library._lazy  # finalised, no machine code yet
    addr = top.library.get_pointer_to_function(top.fndesc.llvm_func_name)
    assert addr != 0
    assert not top.library._lazy and low.library._lazy  # the helper never reaches the engine
    engine = top.library.codegen._engine
    env = engine.get_global_value_address(top.fndesc.env_name)
    assert env and ctypes.c_void_p.from_address(env).value == id(top.environment)
    # Numba's calling convention: status = fn(&result, &excinfo, args...)
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p,
                          ctypes.c_int64)(addr)
    result, excinfo = ctypes.c_int64(0), ctypes.c_void_p(0)
    assert fn(ctypes.byref(result), ctypes.byref(excinfo), 20) == 0
    assert result.value == 42


@pytest.mark.skipif(not kernels.STREAM_AVAILABLE, reason="x86-64 instruction names")
def test_lazy_libraries_skip_the_first_function_passes_and_still_vectorise(monkeypatch):
    """A jitops library runs no function pipeline as modules are added (jitops.cpu.compile.jit:
    the module pipelines run those passes anyway); the loops still come out as packed vector
    code, for a built-in task and for a user op's task."""
    from jitops.cpu.kernels.spec import KernelSpec

    runs = []
    cg = registries.cpu_target.target_context.codegen()
    real = type(cg)._function_pass_manager
    monkeypatch.setattr(type(cg), "_function_pass_manager",
                        lambda self, **kw: runs.append(1) or real(self, **kw))
    dt = np.dtype(np.float32)
    spec = KernelSpec("subtract", None, dt, dt, dt, dt)
    task = jit.inner(kernels._task.py_func)
    sig = (spec.numba_type,) + (kernels._I64,) * 5
    with registries.light():
        task.compile(sig)
    assert isinstance(task.overloads[sig].library, jit.LazyLibrary)
    assert not runs
    assert "subps" in task.inspect_asm(sig)  # vsubps (AVX) or subps (SSE): packed

    @jitops.elementwise
    def axpy(a, x, y):
        return a * x + y

    x = np.arange(4000, dtype=np.float32)
    np.testing.assert_array_equal(axpy(x, x, 1.0), x * x + np.float32(1.0))
    asm = "".join(c.library.get_asm_str() for c in nary._utask_local.overloads.values()
                  if "axpy" in c.library.get_asm_str())
    assert re.search(r"(mulps|fmadd\w*ps)\s", asm), "no packed multiply in the user task"


def test_machine_code_is_made_under_numba_compiler_lock():
    """Turning a lazy library into machine code touches Numba's JIT engine, shared and not
    thread-safe: it waits for Numba's compiler lock, held by any compile, also when the
    address is asked for outside a compile (a task's, with the disk cache off)."""
    from numba.core.compiler_lock import global_compiler_lock

    def plus_two(a):
        return a + 2

    disp = jit.inner(plus_two)
    with registries.light():
        disp.compile((types.int64,))
    cres = disp.overloads[(types.int64,)]
    got = []
    t = threading.Thread(target=lambda: got.append(
        cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)))
    with global_compiler_lock:  # as another thread's compile would
        t.start()
        t.join(0.5)
        assert t.is_alive() and cres.library._lazy
    t.join(30)
    assert got and got[0] != 0 and not cres.library._lazy


_LAZY = r"""
import json
import numpy as np
import jitops
from jitops.core import scalar
from jitops.cpu.compile import jit
from jitops.cpu.kernels import binary as kernels, spec
x = np.arange(7, dtype=np.int16)
ok = bool((jitops.subtract(x, np.int16(3), act="relu") == np.maximum(x - 3, 0)).all())
ops = [c.library._lazy for c in spec._JIT_CACHE[scalar.OPS["subtract"]].overloads.values()]
tasks = [c.library._lazy for c in kernels._task.overloads.values()]
print(json.dumps({"ok": ok, "ops": ops, "tasks": tasks}))
"""


def test_a_built_in_call_leaves_its_helpers_lazy(tmp_path):
    """A built-in call compiled in a fresh process (empty cache): the scalar op's library is
    linked into the task and has no machine code of its own; the task's has."""
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", _LAZY], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"ok": True, "ops": [True], "tasks": [False]}


_LITERALS = r"""
import json
import numpy as np
import jitops
from jitops.cpu.kernels import binary as kernels, nary, spec
from jitops.cpu.threads import omp, parallel, pool
big = np.arange(1 << 18, dtype=np.float32)
sq = big.reshape(512, 512)
jitops.subtract(big, 1.5)  # the pooled driver and the pool (a fresh cache: compiled here)
jitops.subtract(sq.T, sq)  # tiled: a job never walked backwards
f = jitops.elementwise(lambda a, b: a * b - 1)
f(big, big)  # the user ops' pooled driver
f(big[:10], big[:10])  # and serial one
jitops.add(big[:10], big[:10])
with jitops.threads(1):
    jitops.add(big, big)
found = {}
for mod in (kernels, nary, omp, parallel, pool, spec):
    for name, d in vars(mod).items():
        sigs = getattr(d, "overloads", None)
        if isinstance(sigs, dict):
            found[f"{mod.__name__}.{name}"] = [[str(a) for a in s] for s in sigs]
print(json.dumps(found))
"""


def test_no_helper_is_compiled_again_for_a_literal_argument(tmp_path):
    """A helper called with a bare constant (``0``, ``False``) gets a second compile for its
    Literal type: the pool's _claim_and_run and _run_units and run_job were each compiled
    twice (0.9 s of the first parallel call). In a fresh process with an empty cache, every
    kind of launch: no compiled signature of jitops' own functions holds a Literal, and the
    pool's helpers were really compiled (not loaded from a cache)."""
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", _LITERALS], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout.strip().splitlines()[-1])
    for helper in ("_claim_and_run", "_run_units", "_claim", "run_job", "_take_part"):
        assert len(found[f"jitops.cpu.threads.pool.{helper}"]) == 1, (helper, found)
    literal = {k: s for k, sigs in found.items() for s in sigs if any("Literal" in a for a in s)}
    assert not literal, literal
