"""The public API as a type checker sees it: a user's snippet checks clean under mypy
--strict, and misuse (a misspelt activation or convention, a str axis, too many positional
arguments) is caught before it runs."""

import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

import jitops
from jitops.signatures import Activation, Broadcast

ROOT = Path(jitops.__file__).resolve().parent.parent

GOOD = """
    import numpy as np
    import jitops

    x = np.ones((2, 3), np.float32)
    r = jitops.subtract(x, 1.0, broadcast="pdpd", axis=1, act="relu")
    jitops.elementwise_sub(x, x, 1, "gelu")
    jitops.add(x, x, out=x, device=None)

    @jitops.elementwise
    def f(a: float, b: float) -> float:
        return a * b

    f(x, x, broadcast="numpy")
    g = jitops.elementwise(dtype=np.float64)(lambda a: a + 1)
    g(x)
    with jitops.threads(2):
        pass
    n: int = jitops.get_num_threads()
    s: tuple[int, ...] = jitops.result_shape((2, 3), (3,))
    layer: str = jitops.threading_layer()
    jitops.set_num_threads(n)
"""

BAD = {
    5: 'jitops.subtract(x, x, broadcast="paddle")',
    6: 'jitops.add(x, x, act="rellu")',
    7: 'jitops.add(x, x, axis="1")',
    8: 'jitops.elementwise_add(x, x, 1, "relu", "n", "pdpd")',
    9: 'jitops.threads("2")',
    10: "jitops.result_shape(3, (3,))",
}

CONFIG = """
[mypy]
follow_imports = silent
[mypy-numba.*,llvmlite.*,dask.*,distributed.*,pandas.*,xarray.*,torch.*,paddle.*,openvino.*,ml_dtypes.*,cupy.*]
follow_imports = skip
ignore_missing_imports = True
"""


def _mypy(tmp_path, source: str, *flags: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    (tmp_path / "snippet.py").write_text(textwrap.dedent(source))
    (tmp_path / "mypy.ini").write_text(CONFIG)
    env = dict(os.environ, MYPYPATH=str(ROOT))  # the checkout, as an editable install is
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                           "--no-incremental", *flags, "snippet.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_users_snippet_checks_clean_under_strict(tmp_path):
    res = _mypy(tmp_path, GOOD, "--strict")
    assert res.returncode == 0, res.stdout + res.stderr


def test_misuse_is_caught_line_by_line(tmp_path):
    source = "import numpy as np\nimport jitops\n\nx = np.ones(3)\n" + "\n".join(BAD.values())
    res = _mypy(tmp_path, source)
    flagged = {int(line.split(":")[1]) for line in res.stdout.splitlines()
               if line.startswith("snippet.py:") and ": error:" in line}
    assert flagged == set(BAD), res.stdout


def test_the_literals_name_what_the_ops_accept():
    assert typing.get_args(Activation) == jitops.ACTIVATIONS
    assert set(typing.get_args(Broadcast)) == {"numpy", "pdpd", "none"}


def test_every_public_callable_is_annotated():
    import inspect

    for name in jitops.__all__:
        obj = getattr(jitops, name)
        if not callable(obj) or inspect.isclass(obj) or name == "act":
            continue
        sig = inspect.signature(obj)
        assert sig.return_annotation is not inspect.Signature.empty, name
        for p in sig.parameters.values():
            assert p.annotation is not inspect.Parameter.empty, (name, p.name)


def test_no_stray_public_names():
    assert dir(jitops) == sorted(jitops.__all__)
    assert dir(jitops.act) == sorted(jitops.ACTIVATIONS)
    assert not hasattr(jitops, "annotations") and not hasattr(jitops.act, "np")
