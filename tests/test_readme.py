"""The README is a landing page that tells the truth: its examples run as shown, its table
is the committed benchmark run's, its links lead somewhere, its set-up commands are CI's."""

import doctest
import json
import re
from pathlib import Path

import pytest

from jitops.bench import report

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _examples(text: str) -> str:
    """The ``>>>`` examples of a markdown text's python/pycon blocks."""
    return "\n".join(b for b in re.findall(r"```(?:python|pycon)\n(.*?)```", text, flags=re.S)
                     if ">>>" in b)


def _run_examples(source: str, name: str, flags: int = 0) -> doctest.TestResults:
    test = doctest.DocTestParser().get_doctest(source, {}, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | flags)
    return runner.run(test)


def test_the_quickstart_runs_as_shown():
    pytest.importorskip("pandas", reason="the Quickstart's pandas lines need pandas "
                                         "(pip install -e '.[test]')")
    source = _examples(README)
    assert source.count(">>>") > 10
    res = _run_examples(source, "README.md", doctest.ELLIPSIS)
    assert res.failed == 0 and res.attempted == len(doctest.DocTestParser().get_examples(source))


def test_the_comparison_is_the_committed_run():
    result = json.loads((ROOT / "benchmarks" / "results" / "latest.json").read_text())
    assert report.with_summary(README, result) == README, \
        "regenerate: python -m jitops bench --update-results, or report.with_summary"


def test_it_is_a_landing_page():
    assert len(README.splitlines()) <= 200


def test_its_links_lead_somewhere():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    local = [link for link in links if "://" not in link]
    assert local
    for link in local:
        assert (ROOT / link).exists(), link


def test_its_test_command_is_cis():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]"' in README and 'pip install -q -e ".[test]"' in ci
    command = "python -m pytest -q -n auto --dist loadfile"
    assert command in README and command in ci


@pytest.mark.parametrize("page", sorted(p.relative_to(ROOT).as_posix()
                                        for p in (ROOT / "docs").rglob("*.md")
                                        if "_build" not in p.parts and ">>>" in p.read_text()))
def test_the_docs_examples_run_as_shown(page):
    """Every ``>>>`` example of the user guide gives the output the page shows."""
    res = _run_examples(_examples((ROOT / page).read_text()), page)
    assert res.failed == 0 and res.attempted > 0
