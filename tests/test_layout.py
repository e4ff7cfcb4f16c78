"""The architecture, checked from the source: a Numba-free core, backends apart from it, no
import cycle, no private name reached across the core/backend boundary, and a cache stamp
derived from the files that make the kernels."""

import ast
import os
import subprocess
import sys

from jitops.core import sources
from jitops.cpu.compile import cache

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
    for needed in ("cpu/kernels/binary.py", "cpu/kernels/spec.py", "cpu/kernels/half.py",
                   "core/scalar.py", "core/dtypes.py", "core/config.py", "cpu/kernels/nary.py",
                   "act.py"):
        assert needed in files, files
    assert not any(f.startswith(("cuda/", "dask/")) for f in files), files


def test_the_front_end_routes_and_the_cpu_backend_keeps_its_repeats():
    """jitops.dispatch imports of the CPU backend only its entry points (the backend, the
    thread count's serial mode for Dask chunks, its repeats) and holds no CPU state: no
    pool, no compiled entries, no keyed memo of its own."""
    cpu = sorted(d for d in sources.imports("jitops.dispatch") if d.startswith("jitops.cpu.")
                 and not sources.module_file(d).endswith("__init__.py"))  # (packages hold none)
    assert cpu == [
        "jitops.cpu.backend", "jitops.cpu.repeat.memo", "jitops.cpu.threads.parallel"], cpu
    text = open(sources.module_file("jitops.dispatch"), encoding="utf-8").read()
    for word in ("pool", "fastcall", "shapeclass", "SLEEPERS", "FAST.", "_REPEATS"):
        assert word not in text, word


#: Modules of Numba's ``numba.core`` that its extension API documents (the rest is internal).
_NUMBA_PUBLIC_CORE = {"cgutils", "types", "errors", "extending", "models"}
#: Undocumented options of Numba's ``jit``.
_NUMBA_PRIVATE_OPTIONS = {"no_cpython_wrapper", "no_cfunc_wrapper"}
#: Underscore names that their libraries document: namedtuple's and ctypes' fields, and
#: ``sys._getframe``.
_DOCUMENTED = {"_fields", "_fields_", "_replace", "_make", "_asdict", "_getframe"}


def _own_names() -> set[str]:
    """Every name jitops itself defines (functions, classes, variables, attributes, arguments)."""
    own = set()
    for m in sources.all_modules():
        for n in ast.walk(ast.parse(open(sources.module_file(m), encoding="utf-8").read())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                own.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                own.add(n.attr)
            elif isinstance(n, ast.arg):
                own.add(n.arg)
            elif isinstance(n, ast.alias):
                own.add(n.asname or n.name.split(".")[0])
    return own


def _foreign_private(module: str, own: set[str]) -> set[str]:
    return _foreign_private_in(open(sources.module_file(module), encoding="utf-8").read(), own)


def _foreign_private_in(source: str, own: set[str]) -> set[str]:
    """What a module's ``source`` reaches of other libraries' private interfaces: underscore names
    it does not define itself (attributes, ``getattr`` strings, imports, methods it overrides in a
    subclass of another library's class), ``numba.core`` internals, CPython's C API
    (``ctypes.pythonapi``) and Numba's undocumented ``jit`` options.
    """
    tree = ast.parse(source)
    found = set()

    def private(name: str) -> bool:
        return (name.startswith("_") and not name.startswith("__") and name not in own
                and name not in _DOCUMENTED)

    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            parts = n.module.split(".")
            names = [a.name for a in n.names]
            if parts[0] not in ("jitops", "__future__") and any(
                    p.startswith("_") for p in parts + names):
                found.add(f"from {n.module} import {', '.join(names)}")
            if parts[:2] == ["numba", "core"]:
                inner = parts[2:3] or [x for x in names if x not in _NUMBA_PUBLIC_CORE]
                if inner and inner[0] not in _NUMBA_PUBLIC_CORE:
                    found.add(f"numba.core.{inner[0]}")
        elif isinstance(n, ast.Attribute):
            if private(n.attr):
                found.add("." + n.attr)
            elif n.attr == "pythonapi":
                found.add("ctypes.pythonapi")
        elif isinstance(n, ast.Call) and getattr(n.func, "id", None) in ("getattr", "hasattr",
                                                                             "setattr"):
            if len(n.args) > 1 and isinstance(n.args[1], ast.Constant) \
                    and isinstance(n.args[1].value, str) and private(n.args[1].value):
                found.add("." + n.args[1].value)
        elif isinstance(n, ast.ClassDef) and n.bases:
            for item in n.body:  # a subclass's private members override another library's
                name = getattr(item, "name", None) or next(
                    (t.id for t in getattr(item, "targets", ()) if isinstance(t, ast.Name)),
                    None)
                if name and name.startswith("_") and not name.startswith("__") and any(
                        isinstance(b, (ast.Name, ast.Attribute))
                        and (getattr(b, "id", None) or b.attr) not in _own_classes(own)
                        for b in n.bases):
                    found.add(f"{n.name}.{name}")
        if isinstance(n, ast.keyword) and n.arg in _NUMBA_PRIVATE_OPTIONS:
            found.add(n.arg)
        if isinstance(n, ast.Constant) and n.value in _NUMBA_PRIVATE_OPTIONS:
            found.add(n.value)
    return found


def _own_classes(own: set[str]) -> set[str]:
    return {"object", "Exception", "RuntimeError", "ValueError", "TypeError", "RuntimeWarning",
            "NamedTuple", "dict", "tuple", "list", "int", "str"} | _CLASSES


_CLASSES: set[str] = set()


def test_only_the_modules_the_hooks_table_names_reach_private_interfaces():
    """Every private interface of another library (Numba's internals and undocumented
    options, CPython's C API, NumPy's, PyTorch's) is reached only from a module the hooks
    table names for it (jitops.cpu.compile.hooks.WHERE), so each is fenced and switchable."""
    from jitops.cpu.compile import hooks

    own = _own_names()
    for m in sources.all_modules():
        tree = ast.parse(open(sources.module_file(m), encoding="utf-8").read())
        _CLASSES.update(n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
    named = {mod for mods in hooks.WHERE.values() for mod in mods} | {"jitops.cpu.compile.hooks"}
    reach = {m: _foreign_private(m, own) for m in sources.all_modules()}
    stray = {m: sorted(found) for m, found in reach.items() if found and m not in named}
    assert not stray, stray
    assert named <= set(reach), named - set(reach)  # the table names modules that exist


def test_the_private_interface_scan_finds_each_kind():
    """The scan above sees each way a module can reach another library's internals."""
    src = ("import ctypes\nfrom numba.core.registry import cpu_target\n"
           "from numba.core import cgutils\nfrom numba.np.ufunc import parallel\n"
           "from foo._bar import baz\nclass L(codegen.JITCodeLibrary):\n"
           "    def _optimize_final_module(self): pass\n"
           "a = parallel._is_initialized\nb = getattr(lib, '_lock')\n"
           "c = ctypes.pythonapi\nd = njit(no_cpython_wrapper=True)\n"
           "e = own._mine\nf = nt._fields\n")
    found = _foreign_private_in(src, own={"_mine"})
    assert found == {"numba.core.registry", "from foo._bar import baz",
                     "L._optimize_final_module", "._is_initialized", "._lock",
                     "ctypes.pythonapi", "no_cpython_wrapper"}, found


def test_a_struct_is_numbered_from_its_one_definition():
    """jitops.cpu.kernels.layout: words in order, ``:n`` widths, ``|`` a new cache line, ``SIZE``;
    ``fill`` places every field by name and refuses a missing or unknown one."""
    import pytest

    from jitops.cpu.kernels import layout

    s = layout.struct("S", "A B:3 | C D")
    assert (s.A, s.B, s.C, s.D, s.SIZE) == (0, 1, 8, 9, 10)
    assert layout.fill(s, A=1, B=[2, 3, 4], C=5, D=6) == [1, 2, 3, 4, 0, 0, 0, 0, 5, 6]
    with pytest.raises(ValueError, match="missing or unknown"):
        layout.fill(s, A=1, B=[2, 3, 4], C=5)
    with pytest.raises(ValueError, match="missing or unknown"):
        layout.fill(s, A=1, B=[2, 3, 4], C=5, E=6)
    # the meta's per-operand words sit where the kernels read them
    assert layout.shape_at(3) == layout.META.SIZE + 3
    assert layout.checks_at(3, 2) == layout.META.SIZE + 3 + 2 + 3 * 2
