"""The private interfaces jitops relies on (jitops.cpu.compile.hooks): all in use here, each listed
in the module's table, and each one forced off in turn leaves every answer NumPy's."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from jitops.cpu.compile import hooks


def test_every_hook_is_in_the_table_and_in_use_here():
    listed = re.findall(r"^``(\w+)`` {2,}", hooks.__doc__, re.M)  # the table's rows
    assert listed == hooks.names()
    if sys.platform.startswith("linux") and os.environ.get("JITOPS_DISABLE_HOOKS") is None:
        assert hooks.status() == {name: None for name in hooks.names()}


_CHECK = """
    import warnings
    warnings.simplefilter("always")
    import numpy as np, jitops
    from jitops.cpu.compile import hooks
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2000, 500)).astype(np.float32)
    Y = rng.standard_normal(500).astype(np.float32)
    T = rng.standard_normal((700, 600)).astype(np.float32)
    big = rng.standard_normal(5 * 10**6)
    fused = jitops.elementwise(lambda a, b, c: a * b + c)
    for _ in range(3):  # first calls, then repeats (the fast path)
        assert np.array_equal(jitops.subtract(X, Y), X - Y)
        assert np.array_equal(jitops.subtract(X[:4], Y), X[:4] - Y)
        assert np.array_equal(jitops.elementwise_add(X, Y[:2000 // 4].repeat(4)[:2000], axis=0),
                              X + Y[:2000 // 4].repeat(4)[:2000, None])
        assert np.array_equal(jitops.subtract(T.T, T.T.copy()), np.zeros_like(T.T))
        assert np.array_equal(jitops.subtract(X, Y, act="relu"), np.maximum(X - Y, 0))
        assert np.array_equal(jitops.add(big, 1.0), big + 1.0)
        out = np.empty_like(X)
        jitops.multiply(X, Y, out=out)
        assert np.array_equal(out, X * Y)
        assert np.array_equal(fused(X, Y, Y), X * Y + Y)
        assert np.array_equal(fused(X[:3], Y, Y), X[:3] * Y + Y)
        i = np.arange(-50, 50, dtype=np.int16)
        assert np.array_equal(jitops.maximum(i, np.int16(7)), np.maximum(i, np.int16(7)))
        h = X[:10].astype(np.float16)
        assert np.array_equal(jitops.divide(h, h + 1), h / (h + 1))
        for n in (5, 100, 3001):  # new shapes: a shape class's entry where the hooks allow
            a = rng.standard_normal(n)
            assert np.array_equal(jitops.subtract(a, a[::-1].copy()), a - a[::-1])
            assert np.array_equal(jitops.multiply(a, 2.5), a * 2.5)
            assert np.array_equal(jitops.add(X[:n % 47 + 1], Y), X[:n % 47 + 1] + Y)
        # reductions read their operands' data addresses (the header's word, or NumPy's)
        assert np.array_equal(jitops.sum_to(X[1:, 3:], (497,)),
                              X[1:, 3:].sum(axis=0, dtype=np.float64).astype(np.float32))
        assert np.array_equal(jitops.sum_to(T.T, (700,)),
                              T.T.sum(axis=0, dtype=np.float64).astype(np.float32))
        q, r = jitops.divmod(X[:7, ::3], Y[::3] + 3)
        assert np.array_equal(q, X[:7, ::3] // (Y[::3] + 3))
        assert np.array_equal(r, X[:7, ::3] % (Y[::3] + 3))
    print(hooks.status()[NAME])
"""


#: Hooks whose public path changes nothing that is compiled (how arrays are read, threads
#: run, results made): checked on a copy of a cache the hooks-on path filled, which spares
#: each a cold compile of every kernel (about 10 s). The others compile on their own path.
_RUNTIME_ONLY = {"numba_layer", "futex_pool", "gomp_team", "proc", "refcounts",
                 "ndarray_header", "fastcall"}


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A kernel cache filled by the check itself with every hook on."""
    where = tmp_path_factory.mktemp("warm") / "cache"
    code = "NAME = 'fastcall'\n" + textwrap.dedent(_CHECK)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, JITOPS_CACHE_DIR=str(where)))
    assert res.returncode == 0 and res.stdout.strip() == "None", res.stderr[-3000:]
    return where


@pytest.mark.parametrize("name", hooks.names())
def test_each_hook_forced_off_still_gives_numpys_answers(name, tmp_path, request):
    """JITOPS_DISABLE_HOOKS=<name>: the public path beside the hook, one warning that names
    it, and the same answers (a cache of its own: kernels compiled on that path, or a copy
    of a warm one where the hook changes nothing compiled)."""
    assert _RUNTIME_ONLY <= set(hooks.names())
    cache = tmp_path / "cache"
    if name in _RUNTIME_ONLY:
        shutil.copytree(request.getfixturevalue("warm_cache"), cache)
    code = f"NAME = {name!r}\n" + textwrap.dedent(_CHECK)
    env = dict(os.environ, JITOPS_DISABLE_HOOKS=name, JITOPS_CACHE_DIR=str(cache))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "turned off by JITOPS_DISABLE_HOOKS"
    assert res.stderr.count(f"jitops: {name} is unavailable") == 1, res.stderr[-2000:]


def test_data_address_is_numpys_for_every_kind_of_array(tmp_path):
    """jitops.cpu.kernels.binary.data_address (the header's data word where ``ndarray_header``
    holds) gives the address NumPy's interface gives: views, offsets, transposes, reversed,
    0-d, empty, read-only, byte-swapped, subclasses, memory maps."""
    import numpy as np

    from jitops.cpu.kernels.binary import DATA_OFFSET, data_address

    if sys.platform.startswith("linux") and os.environ.get("JITOPS_DISABLE_HOOKS") is None:
        assert DATA_OFFSET >= 0  # (the header's word is what is tested here)
    base = np.arange(60.0).reshape(3, 4, 5)
    ro = base[1:].view()
    ro.flags.writeable = False
    mm = np.lib.format.open_memmap(tmp_path / "m.npy", mode="w+", dtype=np.int16, shape=(9,))
    arrays = [base, base[1:, 2:, 3:], base.T, base[::-1], base[..., ::-2], np.float32(3) * 1,
              np.zeros(()), np.empty((0, 3)), ro, base.astype(">f8"), np.matrix([[1, 2]]),
              mm[2:], np.frombuffer(bytearray(17), np.uint8, 5, 3)]
    for a in arrays:
        a = np.asarray(a) if not isinstance(a, np.ndarray) else a
        assert data_address(a) == a.__array_interface__["data"][0], type(a)
