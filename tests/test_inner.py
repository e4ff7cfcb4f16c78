"""Helpers and tasks are compiled without Python entry points (jitops.cpu.jit): less for LLVM
in every new signature, and a Python call is a TypeError instead of a jump to address 0."""

from __future__ import annotations

import numpy as np
import pytest

import jitops
from jitops.cpu import jit, kernels, nary, pool, spec


def _inner_dispatchers():
    for mod in (kernels, nary, pool, spec):
        for name, obj in vars(mod).items():
            if isinstance(obj, jit.InnerDispatcher):
                yield f"{mod.__name__}.{name}", obj


def test_the_helpers_and_tasks_are_inner():
    names = {n for n, _ in _inner_dispatchers()}
    for must in ("jitops.cpu.kernels._task", "jitops.cpu.kernels._row",
                 "jitops.cpu.nary._utask_cached",
                 "jitops.cpu.pool.run_job"):
        assert must in names
    # what Python calls keeps its entry point
    for entry in (*kernels.KERNELS.values(), *nary.KERNELS.values(), pool._worker,
                  pool._futex_wake):
        if entry is not kernels.KERNELS["task"]:
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
    """The user-op task is a wrapper (jitops.cpu.jit.wrapper): its library links the
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
