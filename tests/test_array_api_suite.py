"""The Array API test suite (data-apis/array-api-tests) on jitops' binary functions: its
elementwise tests (values, dtypes and broadcasting drawn by hypothesis) and the special cases
its spec states, for every function of tests/array_api_namespace.py, run against jitops and,
beside it, against NumPy itself.

NumPy departs from the Array API on six special cases of ``floor_divide`` (an infinite
dividend gives NaN, a finite one over an infinity of the other sign gives -1.0, where the
standard says +-inf and -0); jitops gives NumPy's answers, so it departs on exactly those six
and nowhere else (complex ``pow`` included: NumPy's own steps and C's ``cpow``). The suite is
not a package: point
``JITOPS_ARRAY_API_TESTS`` at a checkout of it (with its ``array-api`` submodule) to run this
module, as was done for the change that added it (the note on issue 55 gives the counts);
without one it is skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .array_api_namespace import FUNCTIONS

SUITE = os.environ.get("JITOPS_ARRAY_API_TESTS", "")
pytestmark = pytest.mark.skipif(
    not os.path.isdir(os.path.join(SUITE, "array_api_tests")),
    reason="JITOPS_ARRAY_API_TESTS does not name a checkout of data-apis/array-api-tests")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: NumPy's own departures from the standard (and so jitops'): floor_divide of infinities.
NUMPY_DEPARTS = {
    "floor_divide(x1_i is +infinity and isfinite(x2_i) and x2_i > 0) -> +infinity",
    "floor_divide(x1_i is +infinity and isfinite(x2_i) and x2_i < 0) -> -infinity",
    "floor_divide(x1_i is -infinity and isfinite(x2_i) and x2_i > 0) -> -infinity",
    "floor_divide(x1_i is -infinity and isfinite(x2_i) and x2_i < 0) -> +infinity",
    "floor_divide(isfinite(x1_i) and x1_i > 0 and x2_i is -infinity) -> -0",
    "floor_divide(isfinite(x1_i) and x1_i < 0 and x2_i is +infinity) -> -0",
}


def _run(module: str, select: str) -> tuple[set[str], int, str]:
    """The suite's failures of the function forms (not the array's operators, which are
    NumPy's own), its count of passed tests and its output, for namespace ``module`` and the
    tests ``select`` picks (pytest's ``-k``)."""
    env = dict(os.environ, ARRAY_API_TESTS_MODULE=module,
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--max-examples", "50",
         "array_api_tests/test_operators_and_elementwise_functions.py",
         "array_api_tests/test_special_cases.py", "-k", select],
        cwd=SUITE, env=env, capture_output=True, text=True, timeout=1200)
    failed = set()
    for line in res.stdout.splitlines():
        m = re.match(r"FAILED \S+::test_\w+\[(.*)\]", line)
        if m and not m.group(1).startswith("__"):
            failed.add(m.group(1))
    m = re.search(r"(\d+) passed", res.stdout)
    assert m, res.stdout[-3000:] + res.stderr[-2000:]
    return failed, int(m.group(1)), res.stdout


#: Every function's tests (pow's draw complex operands too).
_ALL = f"({' or '.join(FUNCTIONS)})"


def test_jitops_passes_the_suite_where_numpy_does():
    got, passed, _ = _run("tests.array_api_namespace", _ALL)
    want, _, _ = _run("numpy", _ALL)
    assert want == NUMPY_DEPARTS, want  # (the suite's view of NumPy: unchanged)
    assert got == want, got ^ want
    assert passed > 400
