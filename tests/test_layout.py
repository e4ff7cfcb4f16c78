"""The architecture, checked from the source: a Numba-free core, backends apart from it, no
import cycle, no private name reached across the core/backend boundary, and a cache stamp
derived from the files that make the kernels."""

import ast
import os
import subprocess
import sys

from jitops.core import sources
from jitops.cpu import cache

CORE = [m for m in sources.all_modules() if m.startswith("jitops.core")]


def _area(module: str) -> str:
    """``core``, ``cpu``, ``cuda``, ``dask``, or ``front`` for the package's top-level modules."""
    parts = module.split(".")
    is_pkg = (sources.module_file(module) or "").endswith("__init__.py")
    return parts[1] if len(parts) > 2 or (is_pkg and len(parts) == 2) else "front"


def test_no_import_cycle():
    assert sources.cycles() == []


def test_core_imports_no_backend_and_no_numba():
    for m in CORE:
        assert all(d.startswith("jitops.core") for d in sources.imports(m)), m
    # and at run time: the core modules loaded without the package __init__ (which loads the
    # CPU kernels) leave Numba unimported
    code = ("import sys, types, importlib\n"
            f"pkg = types.ModuleType('jitops'); pkg.__path__ = [{sources.ROOT!r}]\n"
            "sys.modules['jitops'] = pkg\n"
            f"for m in {CORE!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _private_uses(module: str):
    """(what, where) for each private name of another area that ``module`` uses."""
    path = sources.module_file(module)
    tree = ast.parse(open(path, encoding="utf-8").read())
    aliases = {}  # local name -> jitops module it is bound to
    here = module.split(".")[:-1] if not path.endswith("__init__.py") else module.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{stem}.{a.name}"
                if sources.module_file(full):
                    aliases[a.asname or a.name] = full
                elif a.name.startswith("_") and sources.module_file(stem) \
                        and _area(stem) != _area(module):
                    yield f"from {stem} import {a.name}", module
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            target = aliases[node.value.id]
            if _area(target) != _area(module):
                yield f"{target}.{node.attr}", module


def test_no_private_name_crosses_the_core_backend_boundary():
    found = [u for m in sources.all_modules() for u in _private_uses(m)]
    assert found == []


def test_the_fast_import_scan_reads_what_the_syntax_tree_says():
    """``sources.imports`` reads imports with regular expressions (75 ms less of ``import
    jitops``): it finds every import the syntax tree has (more only where code in a string
    looks like an import line, which at worst stamps an extra file), and the kernels' import
    closure, which stamps the cache, is exactly the syntax tree's."""
    for m in sources.all_modules():
        assert sources.imports(m) >= sources.imports_from_ast(m), m

    def closure(imports, root):
        seen, todo = set(), [root]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(imports(m))
        return seen

    for root in cache.KERNEL_MODULES:
        assert closure(sources.imports, root) == closure(sources.imports_from_ast, root)


def test_cache_stamp_covers_the_files_that_make_kernels():
    # relative to the package folder: the checkout's own folder may be called jitops too
    files = {os.path.relpath(f, sources.ROOT).replace("\\", "/") for f in cache.stamped_files()}
    for needed in ("cpu/kernels.py", "cpu/spec.py", "cpu/half.py", "core/scalar.py",
                   "core/dtypes.py", "core/config.py", "cpu/nary.py", "act.py"):
        assert needed in files, files
    assert not any(f.startswith(("cuda/", "dask/")) for f in files), files


def test_the_front_end_routes_and_the_cpu_backend_keeps_its_repeats():
    """jitops.dispatch imports of the CPU backend only its entry points (the backend, the
    thread count's serial mode for Dask chunks, its repeats) and holds no CPU state: no
    pool, no compiled entries, no keyed memo of its own."""
    cpu = sorted(d for d in sources.imports("jitops.dispatch") if d.startswith("jitops.cpu."))
    assert cpu == ["jitops.cpu.backend", "jitops.cpu.parallel", "jitops.cpu.repeat"], cpu
    text = open(sources.module_file("jitops.dispatch"), encoding="utf-8").read()
    for word in ("pool", "fastcall", "shapeclass", "C_SLEEPERS", "FAST.", "_REPEATS"):
        assert word not in text, word
