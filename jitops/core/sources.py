"""jitops' own import graph, read from the source files (``ast``; nothing is imported).

Two users: the CPU kernel cache stamps every entry with a hash of the files the kernels are
made from -- the transitive jitops imports of the kernel module, derived here rather than
listed by hand -- and the test that fails on an import cycle.
"""

from __future__ import annotations

import ast
import os
import re
from functools import cache

PACKAGE = "jitops"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the jitops/ folder


def module_file(module: str) -> str | None:
    """The source file of a jitops module (``jitops.cpu.kernels.binary``), or None if there is
    none."""
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


_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n]*)", re.M)


def _names(text: str) -> list[str]:
    """The imported names of an import statement's tail (parentheses, comments, ``as``)."""
    text = re.sub(r"#[^\n]*", "", text).strip("()")
    return [n.split()[0] for n in text.replace("\n", " ").split(",") if n.strip()]


@cache
def imports(module: str) -> frozenset[str]:
    """The jitops modules ``module`` imports anywhere in its file (function bodies included,
    since a deferred import is still a dependency).

    Read with two regular expressions, not ``ast``: the kernel cache's stamp needs the import
    closure of the kernel modules at ``import jitops``, and parsing those files took 75 ms of
    it. The test suite checks this against the syntax tree (:func:`imports_from_ast`) for
    every module."""
    path = module_file(module)
    if path is None:
        return frozenset()
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    here = _package_of(module, path)
    names = []
    for dots, stem, tail in _FROM.findall(text):
        stem = _absolute(here, len(dots), stem or None)
        names += [stem] + [f"{stem}.{a}" for a in _names(tail)]
    for tail in _IMPORT.findall(text):
        names += _names(tail)
    return _jitops_modules(module, names)


def imports_from_ast(module: str) -> frozenset[str]:
    """:func:`imports`, read from the syntax tree (the reference the tests compare with)."""
    path = module_file(module)
    if path is None:
        return frozenset()
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    here = _package_of(module, path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            stem = _absolute(here, node.level, node.module)
            # `from pkg import mod` names a module when mod is one
            names += [stem] + [f"{stem}.{a.name}" for a in node.names]
    return _jitops_modules(module, names)


def _package_of(module: str, path: str) -> list[str]:
    return module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]


def _absolute(here: list[str], level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in package ``here``."""
    if not level:
        return name or ""
    base = here[: len(here) - level + 1]
    return ".".join(base + ([name] if name else []))


def _jitops_modules(module: str, names: list[str]) -> frozenset[str]:
    found = {n for n in names
             if (n == PACKAGE or n.startswith(PACKAGE + ".")) and module_file(n) is not None}
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
    ``jitops.cpu.kernels.binary`` runs ``jitops/__init__`` first whatever the code says."""
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
