"""The rule-book page (docs/rulebooks.md): each jitops function gives its reference's answer
on every case of tests/rulebooks.py, the installed references still answer as the page says,
and the page is what ``python -m tests.rulebooks`` prints."""

from __future__ import annotations

import os

import pytest

from . import rulebooks as rb

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "rulebooks.md")


@pytest.mark.parametrize("case", rb.CASES, ids=[c.label for c in rb.CASES])
def test_jitops_numpy_names_give_numpys_answer(case):
    assert rb.show(rb.jitops_numpy(case)) == rb.show(rb.numpy_answer(case))


@pytest.mark.parametrize("case", rb.CASES, ids=[c.label for c in rb.CASES])
def test_jitops_openvino_gives_the_specifications_answer(case):
    assert rb.show(rb.jitops_openvino(case)) == rb.show(rb.spec_answer(case))


@pytest.mark.parametrize("case", [c for c in rb.CASES if c.paddle], ids=lambda c: c.label)
def test_jitops_paddle_names_give_paddles_answer(case):
    pytest.importorskip("paddle", reason="paddlepaddle is in the test extra where wheels exist")
    ours = rb.jitops_paddle(case)
    if case.paddle_dies:  # Paddle's process dies; jitops wraps
        assert rb.show(ours) == str(rb.INT_MIN)
        return
    theirs = rb.paddle_answer(case)
    if isinstance(theirs, Exception):  # Paddle's InvalidArgument: jitops' ZeroDivisionError
        assert isinstance(ours, ZeroDivisionError)
    elif case.jitops_keeps:  # IEEE's answer, whatever this CPU makes Paddle give
        assert rb.show(ours) == rb.show(rb.numpy_answer(case)) != "nan"
        assert rb.show(theirs) in case.paddle_by_cpu
    else:
        assert rb.show(ours) == rb.show(theirs)


def test_the_page_is_generated_from_the_installed_references():
    pytest.importorskip("paddle", reason="paddlepaddle is in the test extra where wheels exist")
    pytest.importorskip("openvino", reason="openvino is in the test extra where wheels exist")
    with open(PAGE) as f:
        page = f.read()
    assert page == rb.render(), "docs/rulebooks.md is stale: python -m tests.rulebooks > " \
                                "docs/rulebooks.md"
