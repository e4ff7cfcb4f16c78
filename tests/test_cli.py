"""The command line: ``python -m jitops {info,demo,bench,warmup}`` and ``--help`` exit 0."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _run(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "jitops", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_help_lists_the_commands():
    r = _run("--help")
    assert r.returncode == 0
    for cmd in ("info", "demo", "bench", "warmup"):
        assert r.stdout.count(f"\n    {cmd} ") == 1, r.stdout  # once each
    assert "``" not in r.stdout and "``" not in _run("bench", "--help").stdout  # no RST


def test_bench_runs_with_progress_and_leaves_the_committed_results_alone(tmp_path):
    """A plain run shows its progress and writes ./jitops-bench-results in the working
    directory (json, markdown, plot); only --update-results replaces benchmarks/results."""
    from jitops.bench import run

    committed = Path(run.checkout_results()) / "latest.json"
    before = committed.stat().st_mtime_ns
    r = subprocess.run([sys.executable, "-m", "jitops", "bench", "--quick", "--cases",
                        "overhead", "row_bcast", "--no-sweep"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "[1/2]" in r.stderr and "[2/2]" in r.stderr  # progress
    out = tmp_path / "jitops-bench-results"
    res = json.loads((out / "latest.json").read_text())
    assert sorted(c["key"] for c in res["cases"]) == ["overhead", "row_bcast"]
    assert {"threading_layer", "threads", "cpu", "numpy", "numba"} <= set(res["machine"])
    assert res["bandwidth_probe"]["stream_sub_GBps"] > 0
    assert "| case |" in (out / "latest.md").read_text()
    assert (out / "latest.png").stat().st_size > 1000
    assert committed.stat().st_mtime_ns == before
    r = _run("bench", "--update-results", "--out", str(tmp_path))
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_info_says_layer_threads_cuda_and_cache():
    r = _run("info")
    assert r.returncode == 0, r.stderr
    for key in ("threading layer:", "threads:", "cuda:", "kernel cache:", "numba:",
                "private hooks:"):
        assert key in r.stdout
    assert "not available:" in r.stdout or "cuda: available" in r.stdout


def test_demo_prints_the_seed_results():
    r = _run("demo")
    assert r.returncode == 0, r.stderr
    assert "elementwise_sub([2,3,4], [1,5,2])" in r.stdout and "[ 1., -2., 2.]" in r.stdout
    assert "(2, 3, 4, 5)" in r.stdout and "(8, 7, 6, 5)" in r.stdout
    # the user op: relu(x * w + b) with w, b per channel
    assert "relu(x * w + b)" in r.stdout
    assert "[0. , 1. , 1. , 3. , 3.5, 0. , 0. , 1. ]  (float32)" in r.stdout


def test_bench_help_is_the_suites():
    r = _run("bench", "--help")
    assert r.returncode == 0 and "--quick" in r.stdout


@pytest.mark.parametrize("bad", [["nosuch"], ["demo", "--x"]])
def test_bad_usage_exits_2(bad):
    assert _run(*bad).returncode == 2


# The op-specific task statistics of a first call in a new process: "<hits> <misses>".
FIRST_CALL = """
import numpy as np, jitops
from jitops.cpu.kernels import binary as kernels
r = jitops.{op}(np.ones(3, np.{dt}), np.ones(3, np.{dt}))
s = kernels.KERNELS["task"].stats
print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))
"""


def test_warmup_fills_the_cache_a_new_process_then_reads(tmp_path):
    import os

    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path))
    env.pop("JITOPS_CACHE", None)
    r = _run("warmup", "--ops", "fmin", "--dtypes", "float32", "--acts", "relu", env=env)
    assert r.returncode == 0, r.stderr
    # a progress bar, each step named, and a summary with what was compiled
    assert "] 1/4 fmin float32" in r.stderr and "] 4/4 user-op drivers" in r.stderr
    assert "op signatures: 2 compiled, 0 already cached" in r.stderr
    assert str(tmp_path) in r.stderr

    def first_call(op, dt):
        res = subprocess.run([sys.executable, "-c", FIRST_CALL.format(op=op, dt=dt)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return tuple(int(v) for v in res.stdout.split()[-2:])

    assert first_call("fmin", "float32") == (1, 0)  # warmed: loaded, not compiled
    assert first_call("fmax", "float32") == (0, 1)  # not asked for: compiled on first use
    r = _run("warmup", "--ops", "fmin", "--dtypes", "float32", env=env)
    assert r.returncode == 0 and "op signatures: 0 compiled, 1 already cached" in r.stderr


@pytest.mark.parametrize("args, word", [(["--ops", "nosuch"], "'nosuch'"),
                                         (["--dtypes", "float33"], "'float33'"),
                                         (["--acts", "swish"], "'swish'"),
                                         (["--ops", "threads"], "'threads'")])
def test_warmup_refuses_unknown_names_before_compiling(args, word):
    r = _run("warmup", *args)
    assert r.returncode == 2 and word in r.stderr and "] 1/" not in r.stderr


def test_warmup_says_when_there_is_no_cache_to_fill():
    import os

    r = _run("warmup", "--ops", "add", "--dtypes", "int8", env=dict(os.environ, JITOPS_CACHE="0"))
    assert r.returncode == 1 and "the kernel cache is off" in r.stderr


def test_bench_runs_from_an_installed_package(tmp_path):
    """The suite ships in the package: installed outside this checkout (no benchmarks/ next to
    it), ``python -m jitops bench`` still runs and writes ./jitops-bench-results."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", str(site), root],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (site / "jitops" / "bench" / "run.py").is_file()
    env = dict(os.environ, PYTHONPATH=str(site))
    run = tmp_path / "run"
    run.mkdir()
    r = subprocess.run([sys.executable, "-m", "jitops", "bench", "--quick", "--cases",
                        "overhead", "--no-cold", "--no-sweep"], cwd=run, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert str(site) in subprocess.run(
        [sys.executable, "-c", "import jitops; print(jitops.__file__)"], cwd=run, env=env,
        capture_output=True, text=True).stdout
    assert (run / "jitops-bench-results" / "latest.json").is_file()


def test_jitops_imports_and_runs_from_the_folder_that_holds_the_clone(tmp_path):
    """After the README's commands, `cd ..` from the clone (a folder named jitops, as
    `git clone` makes it): that folder must not shadow the installed package as an empty
    namespace package. Here the folder holding the clone is made beside a link named jitops
    to this checkout's root."""
    import jitops

    root = Path(jitops.__file__).resolve().parent.parent
    (tmp_path / "jitops").symlink_to(root, target_is_directory=True)
    code = "import jitops; print(jitops.subtract(3, 1), jitops.elementwise_sub.__name__)"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.split() == ["2", "elementwise_sub"], \
        res.stderr[-3000:]
    res = subprocess.run([sys.executable, "-m", "jitops", "info"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "threading layer" in res.stdout, res.stderr[-3000:]
