"""jitops' own import graph, read from the source files (``ast``; nothing is imported).

Two users: the CPU kernel cache stamps every entry with a hash of the files the kernels are
made from -- the transitive jitops imports of the kernel module, derived here rather than
listed by hand -- and the test that fails on an import cycle.
"""

from __future__ import annotations

import ast
import os
from functools import cache

PACKAGE = "jitops"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the jitops/ folder


def module_file(module: str) -> str | None:
    """The source file of a jitops module (``jitops.cpu.kernels``), or None if there is none."""
    parts = module.split(".")[1:]
    base = os.path.join(ROOT, *parts)
    for cand in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(cand):
            return cand
    return None


def all_modules() -> list[str]:
    """Every module of the package, by dotted name."""
    mods = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
        rel = os.path.relpath(dirpath, ROOT)
        prefix = PACKAGE if rel == "." else PACKAGE + "." + rel.replace(os.sep, ".")
        for f in sorted(filenames):
            if f.endswith(".py"):
                mods.append(prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}")
    return sorted(mods)


@cache
def imports(module: str) -> frozenset[str]:
    """The jitops modules ``module`` imports anywhere in its file (function bodies included,
    since a deferred import is still a dependency)."""
    path = module_file(module)
    if path is None:
        return frozenset()
    is_pkg = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    here = module.split(".") if is_pkg else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from pkg import mod` names a module when mod is one
            names = [stem] + [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            if (n == PACKAGE or n.startswith(PACKAGE + ".")) and module_file(n) is not None:
                found.add(n)
    found.discard(module)
    return frozenset(found)


def closure(module: str) -> list[str]:
    """``module`` and every jitops module it imports, directly or not (sorted)."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(imports(m))
    return sorted(seen)


def cycles() -> list[list[str]]:
    """Import cycles among jitops' modules (each as a list of modules), none expected.

    A package ``__init__`` is left out of the edges its submodules have to it: importing
    ``jitops.cpu.kernels`` runs ``jitops/__init__`` first whatever the code says."""
    graph = {m: {d for d in imports(m) if not m.startswith(d + ".")} for m in all_modules()}
    found, state = [], {}

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                found.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    return found
