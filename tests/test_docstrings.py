"""Every public function documents itself (numpydoc), and its examples run."""

import doctest
import inspect

import pytest

import jitops

PUBLIC = [n for n in jitops.__all__ if callable(getattr(jitops, n)) and n[0].islower()]
#: The settings functions: documented like the rest, but they take no operands.
SETTINGS = ("threading_layer", "get_num_threads", "set_num_threads", "threads")
#: Reductions of broadcast results: no ``act``, ``out`` or ``device`` (host arrays).
REDUCTIONS = tuple(n for n in PUBLIC if n in ("sum_to", "reduce") or n.endswith("_grad"))


def _takes_arguments(fn) -> bool:
    return bool(inspect.signature(fn).parameters)


def _returns_something(fn) -> bool:
    if hasattr(fn, "__wrapped__"):  # a context manager: it yields a block, returns nothing
        return False
    return inspect.signature(fn).return_annotation not in (None, "None")


@pytest.mark.parametrize("name", PUBLIC)
def test_numpydoc_sections(name):
    fn = getattr(jitops, name)
    doc = fn.__doc__
    assert doc and len(doc.splitlines()) > 5, name
    assert ("Returns\n" in doc) == _returns_something(fn), name
    assert ("Parameters\n" in doc) == _takes_arguments(fn), name


@pytest.mark.parametrize("name", [n for n in PUBLIC if n != "threading_layer"])
def test_ops_document_modes_errors_and_an_example(name):
    doc = getattr(jitops, name).__doc__
    assert "Raises\n" in doc and "Examples\n" in doc and ">>>" in doc
    if name not in ("result_shape", *SETTINGS):
        words = ("broadcast", "pdpd", "axis", "ValueError", "TypeError")
        if name not in REDUCTIONS:
            words += ("act", "out", "device")
        for word in words:
            assert word in doc, (name, word)


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_examples_run(name):
    fn = getattr(jitops, name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(fn, name, globs=dict(vars(jitops), jitops=jitops)):
        runner.run(test)
    assert runner.failures == 0, name
