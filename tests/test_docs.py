"""Every public function documents itself (numpydoc), and its examples run."""

import doctest

import pytest

import jitops

PUBLIC = [n for n in jitops.__all__ if callable(getattr(jitops, n)) and n[0].islower()]


@pytest.mark.parametrize("name", PUBLIC)
def test_numpydoc_sections(name):
    doc = getattr(jitops, name).__doc__
    assert doc and len(doc.splitlines()) > 5, name
    assert "Returns\n" in doc, name
    if name != "threading_layer":  # takes no arguments
        assert "Parameters\n" in doc, name


@pytest.mark.parametrize("name", [n for n in PUBLIC if n not in ("threading_layer",)])
def test_ops_document_modes_errors_and_an_example(name):
    doc = getattr(jitops, name).__doc__
    assert "Raises\n" in doc and "Examples\n" in doc and ">>>" in doc
    if name != "result_shape":
        for word in ("broadcast", "pdpd", "axis", "act", "out", "device", "ValueError",
                     "TypeError"):
            assert word in doc, (name, word)


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_examples_run(name):
    fn = getattr(jitops, name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(fn, name, globs=dict(vars(jitops), jitops=jitops)):
        runner.run(test)
    assert runner.failures == 0, name
