"""Every CUDA kernel jitops can build, compiled for a current GPU (sm_90) by the real
numba-cuda compiler -- NVVM to PTX, then nvJitLink to a cubin -- on a machine without one.

numba-cuda asks the driver one question while compiling: the current device's compute
capability. The fixture answers it (9.0); nothing else of the driver is used. The kernels
are those of :func:`jitops.cuda.catalog.catalog` (derived from the dispatcher's dtype
rules), in chunks so pytest-xdist shares them out; the run's last line says
``N compiled, M failed`` (tests/conftest.py).

The suite's default run compiles a spread quarter of them (:data:`SAMPLED` of the chunks);
``python -m pytest -m cuda_compile`` compiles every one, alone; ``JITOPS_CUDA_COMPILE=full``
walks the whole op x dtype-pair x activation product instead of every value of each axis.
"""

import os
import subprocess
import sys
import traceback

import pytest

from .sm90 import CC

pytestmark = pytest.mark.cuda_compile

CHUNKS = 8

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    pytest.skip("the compile test needs numba-cuda's compiler, not the simulator",
                allow_module_level=True)
try:
    import numba.cuda.dispatcher  # noqa: F401
    from cuda.bindings import nvjitlink
except ImportError as e:  # the test extra installs numba-cuda[cu12]
    pytest.skip(f"numba-cuda with its CUDA 12 wheels is not installed ({e})",
                allow_module_level=True)


@pytest.fixture
def sm90(monkeypatch):
    from .sm90 import patches

    for obj, name, value in patches():
        monkeypatch.setattr(obj, name, value)


def _cubin(ptx: str) -> int:
    """Assemble and link ``ptx`` for sm_90 with nvJitLink; the cubin's size."""
    data = ptx.encode()
    h = nvjitlink.create(1, [f"-arch=sm_{CC[0]}{CC[1]}"])
    try:
        nvjitlink.add_data(h, nvjitlink.InputType.PTX, data, len(data), "jitops")
        nvjitlink.complete(h)
        return nvjitlink.get_linked_cubin_size(h)
    finally:
        nvjitlink.destroy(h)


def _catalog():
    from jitops.cuda.catalog import catalog

    return list(catalog(full=os.environ.get("JITOPS_CUDA_COMPILE") == "full"))


#: Chunks the main job compiles: each is a spread sample of the whole catalogue (every
#: CHUNKS-th kernel); the others are slow-marked (``pytest -m cuda_compile`` runs them all).
SAMPLED = 2


def _compile_all(items, sm_check: bool = False) -> None:
    """Compile each (kernel, label, argument types) for sm_90 and link it to a cubin; the
    counts go to the run's report; every failure is listed."""
    from numba import cuda

    from jitops.cuda import kernels

    assert items, "nothing to compile"
    failed = []
    for name, label, argtypes in items:
        try:
            ptx, _ = cuda.compile_ptx(kernels.KERNELS[name].py_func, argtypes, cc=CC)
            assert not sm_check or f".target sm_{CC[0]}{CC[1]}" in ptx
            assert _cubin(ptx) > 0
        except Exception:
            failed.append(f"{name} [{label}]: {traceback.format_exc(limit=1).strip()[-600:]}")
    with open(os.environ["JITOPS_COMPILE_REPORT"], "a") as f:
        f.write(f"{len(items) - len(failed)} {len(failed)}\n")
    assert not failed, f"{len(failed)} of {len(items)} kernels failed:\n" + "\n".join(failed[:5])


@pytest.mark.parametrize("chunk", [c if c < SAMPLED else pytest.param(c, marks=pytest.mark.slow)
                                   for c in range(CHUNKS)])
def test_every_cuda_kernel_compiles_for_sm90(chunk, sm90):
    _compile_all(_catalog()[chunk::CHUNKS], sm_check=True)


@pytest.mark.parametrize("chunk", [c if c < 1 else pytest.param(c, marks=pytest.mark.slow)
                                   for c in range(CHUNKS)])
def test_every_family_kernel_compiles_for_sm90(chunk, sm90):
    """The binary family's kernels (jitops.cuda.catalog.family): an eighth in the main job,
    every one under ``-m cuda_compile`` or ``-m slow``."""
    from jitops.cuda import catalog

    _compile_all(list(catalog.family())[chunk::CHUNKS])


@pytest.mark.parametrize("chunk", [c if c < 1 else pytest.param(c, marks=pytest.mark.slow)
                                   for c in range(4)])
def test_every_reduction_kernel_compiles_for_sm90(chunk, sm90):
    """The kernels of several results, some reduced (jitops.cuda.catalog.reductions): every
    reduction of every value dtype, its partials' and finishing kernels, every gradient rule;
    a quarter in the main job, every one under ``-m cuda_compile`` or ``-m slow``."""
    from jitops.cuda import catalog

    _compile_all(list(catalog.reductions())[chunk::4])


def test_reduction_catalogue_reaches_every_reduction_and_rule():
    from jitops.core import grads

    labels = " ".join(label for _, label, _ in __import__(
        "jitops.cuda.catalog", fromlist=["reductions"]).reductions())
    for how in ("sum", "prod", "max", "min", "any", "all"):
        assert f"reduce {how} float16" in labels and f"reduce {how} bool" in labels
        assert f"reduce {how} partials" in labels
    for name in grads.RULES:
        if grads.RULES[name] is not grads.identity:
            assert f"grad {name} float16 dy" in labels
    assert "mean float32 finish" in labels


def test_catalogue_reaches_every_op_dtype_and_act():
    """The walk is not a hand-kept list: every op, dtype and activation the dispatcher
    accepts appears in it."""
    from jitops.core.dtypes import SUPPORTED
    from jitops.core.scalar import ACT_NAMES

    labels = " ".join(label for _, label, _ in _catalog())
    for dt in SUPPORTED:
        assert f"add {dt}" in labels and f"copy {dt}" in labels
    for act in ACT_NAMES:
        assert f"act={act} float32" in labels
    for op in ("maximum", "fmin", "divide"):  # (elementwise_div on floats *is* divide)
        assert f"{op} float16" in labels
    assert "trunc_divide int8" in labels and "divide complex64" in labels
    assert "user _three float32" in labels and "any_zero uint64" in labels


_CHILD = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from tests.sm90 import install
install()
from jitops.cuda import catalog, kernels
spec = catalog.builtin_spec("subtract", "relu", np.dtype("float32"), np.dtype("float32"))
kernels.contig.compile(catalog.contig_types(spec))
stats = kernels.contig.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def _child(cache_dir) -> tuple[int, int]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JITOPS_CACHE_DIR=str(cache_dir))
    res = subprocess.run([sys.executable, "-c", _CHILD.format(root=root)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    hits, misses = map(int, res.stdout.split()[-2:])
    return hits, misses


def test_cuda_kernels_are_cached_on_disk_for_the_next_process(tmp_path):
    """A second process loads the kernel from jitops' cache instead of compiling it; a
    damaged cache entry is recompiled, never an error."""
    assert _child(tmp_path) == (0, 1)
    assert _child(tmp_path) == (1, 0)
    files = list((tmp_path / "cuda").iterdir())
    assert any(f.suffix == ".nbc" for f in files)
    for f in files:
        f.write_bytes(b"garbage")
    assert _child(tmp_path) == (0, 1)
    assert _child(tmp_path) == (1, 0)


_TWO = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from tests.sm90 import install
install()
from jitops.cuda import catalog, kernels
for op in sys.argv[1:]:
    kernels.contig.compile(catalog.contig_types(
        catalog.builtin_spec(op, None, np.dtype("float16"), np.dtype("float16"))))
stats = kernels.contig.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def test_a_cache_entry_of_another_signature_is_never_run(tmp_path):
    """Two processes compiling at once can give two kernels one data file (numba's index is
    read, extended and written back unlocked): an entry whose kernel has another signature
    is compiled afresh, not run. Here the two data files are swapped by hand."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JITOPS_CACHE_DIR=str(tmp_path))

    def child(*ops):
        res = subprocess.run([sys.executable, "-c", _TWO.format(root=root), *ops], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        return tuple(map(int, res.stdout.split()[-2:]))

    assert child("minimum", "maximum") == (0, 2)
    assert child("minimum") == (1, 0)
    data = sorted((tmp_path / "cuda").glob("*.nbc"))
    assert len(data) == 2
    a, b = (f.read_bytes() for f in data)
    data[0].write_bytes(b)
    data[1].write_bytes(a)
    assert child("minimum") == (0, 1)  # maximum's kernel under minimum's key: recompiled
    assert child("minimum", "maximum") == (1, 1)  # minimum's under maximum's: recompiled
    assert child("minimum", "maximum") == (2, 0)  # each saved over the wrong one


def test_launches_never_fall_below_numba_cudas_occupancy_warning(monkeypatch):
    from jitops.cuda import kernels

    monkeypatch.setattr(kernels, "MIN_BLOCKS", 128)
    for n in (1, 100, 5000, 128 * 256, 10**8):
        for per in (1, kernels.UNROLL):
            blocks, tpb = kernels.launch_config(n, per)
            assert blocks >= 128 and 32 <= tpb <= 256
            assert blocks * tpb * per >= min(n, 65535 * tpb * per)  # one step covers n


def test_contig_kernel_machine_code(sm90):
    """The contig loop as tuned: in its main loop every input's UNROLL loads are issued
    before the first store, and addresses need no wraparound fix-up (no select on them)."""
    import re

    import numpy as np
    from numba import cuda

    from jitops.cuda import catalog, kernels

    spec = catalog.builtin_spec("subtract", None, np.dtype("float32"), np.dtype("float32"))
    ptx, _ = cuda.compile_ptx(kernels.contig.py_func, catalog.contig_types(spec), cc=CC)
    body = ptx[ptx.index("$L__BB0_2:"):]
    body = body[:body.index("bra")]  # the unrolled main loop, up to its back edge
    loads = [m.start() for m in re.finditer(r"ld\.global\.f32", body)]
    stores = [m.start() for m in re.finditer(r"st\.global\.f32", body)]
    assert len(loads) == 2 * kernels.UNROLL and len(stores) == kernels.UNROLL
    assert max(loads) < min(stores)
    assert "selp" not in body and "div" not in body


def _fmas(ptx: str, t: str) -> int:
    import re

    return len(re.findall(rf"\bfma\.rn\.{t}\b", ptx))


def test_multiplies_and_adds_round_apart_as_numpys_do(sm90):
    """NVVM fuses a multiply and the add it feeds unless given -fma=0 (jitops.cuda.rounding):
    a user op ``x * w + b`` and a complex product compile to separate multiplies and adds in
    jitops' kernels, while a kernel of someone else's in the same process keeps NVVM's
    default; an fma asked for by name stays."""
    import numpy as np
    from numba import cuda
    from numba.cuda.cudadrv import nvvm

    from jitops.cuda import catalog, kernels, rounding

    assert rounding.install() and nvvm.compile_ir.jitops_wrapped is not None
    # nvJitLink's link-time optimisation would generate the code again, fusing them
    assert all(k.targetoptions["lto"] is False for k in kernels.KERNELS.values())
    for dt, t in (("float32", "f32"), ("float64", "f64")):
        u = catalog.user_spec(catalog._three, np.dtype(dt))
        ptx, _ = cuda.compile_ptx(kernels.contig.py_func, catalog.contig_types(u), cc=CC)
        assert _fmas(ptx, t) == 0 and f"mul.rn.{t}" in ptx
    c = catalog.builtin_spec("multiply", None, np.dtype("complex64"), np.dtype("complex64"))
    ptx, _ = cuda.compile_ptx(kernels.strided.py_func, catalog.strided_types(c, 2, True), cc=CC)
    from jitops.core.dtypes import CMUL_FUSED

    assert (_fmas(ptx, "f32") > 0) == CMUL_FUSED["complex64"]  # NumPy's own rule, not NVVM's

    def theirs(o, a, b, c):
        o[0] = a[0] * b[0] + c[0]

    arr = "float64[::1]"
    ptx, _ = cuda.compile_ptx(theirs, f"void({arr}, {arr}, {arr}, {arr})", cc=CC)
    assert _fmas(ptx, "f64") == 1  # untouched: the hook changes jitops' kernels only


_NO_HOOK = """
import sys, re, warnings, numpy as np
warnings.simplefilter("always")
sys.path.insert(0, {root!r})
from tests.sm90 import install
install()
from numba import cuda
from jitops.cuda import catalog, kernels, rounding
u = catalog.user_spec(catalog._three, np.dtype("float64"))
ptx, _ = cuda.compile_ptx(kernels.contig.py_func, catalog.contig_types(u), cc=(9, 0))
print(rounding.install(), rounding.stamp(), len(re.findall(r"fma\\.rn\\.f64", ptx)))
"""


def test_the_rounding_hook_turned_off_warns_and_fuses(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JITOPS_DISABLE_HOOKS="nvvm_fma", JITOPS_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", _NO_HOOK.format(root=root)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    on, stamp, fmas = res.stdout.split()
    assert on == "False" and stamp == "fma-contracted" and int(fmas) > 0
    assert res.stderr.count("jitops: nvvm_fma is unavailable") == 1, res.stderr[-2000:]


def test_strided_kernel_machine_code(sm90):
    """The strided loop runs in the contig loop's steps: its main loop issues every input's
    UNROLL loads before the first store (one load in flight per thread held an H200 at
    1.1 TB/s on a row broadcast, against PyTorch's 2.7)."""
    import re

    import numpy as np
    from numba import cuda

    from jitops.cuda import catalog, kernels

    spec = catalog.builtin_spec("subtract", None, np.dtype("float32"), np.dtype("float32"))
    ptx, _ = cuda.compile_ptx(kernels.strided.py_func, catalog.strided_types(spec, 2, True),
                              cc=CC)
    body = ptx[ptx.index("$L__BB0_2:"):]
    body = body[:body.index("bra")]
    loads = [m.start() for m in re.finditer(r"ld\.global\.f32", body)]
    stores = [m.start() for m in re.finditer(r"st\.global\.f32", body)]
    assert len(loads) == 2 * kernels.UNROLL and len(stores) == kernels.UNROLL
    assert max(loads) < min(stores)
    # indices that fit in 31 bits divide by multiplying (a division by a kernel argument is
    # tens of instructions): no division in the main loop, a magic shift per element (the
    # shift itself from a count of leading zeros, outside the loop)
    assert not re.search(r"\b(div|rem)\.", body)
    assert len(re.findall(r"\bshr\.u32\b", body)) >= kernels.UNROLL and "clz.b32" in ptx
    # the 64-bit indexing of larger plans divides
    ptx64, _ = cuda.compile_ptx(kernels.strided.py_func, catalog.strided_types(spec, 2, False),
                                cc=CC)
    assert re.search(r"\b(div|rem)\.[su]64\b", ptx64)


def test_magic_division_is_division():
    """The kernels' division by a :func:`~jitops.cuda.spec.magic` word (emulated exactly, in
    Python and in unsigned 64-bit NumPy arithmetic truncated to 32 bits as the GPU's) equals
    ``divmod`` for every index below 2**31 tried, on divisors from 1 to 2**31."""
    import numpy as np

    from jitops.cuda.spec import divmod_magic, magic

    rng = np.random.default_rng(0)
    divisors = [1, 2, 3, 7, 56, 100, 128, 3136, 4095, 4096, 4097, 65537, 2**30 + 1, 2**31 - 1,
                2**31, *rng.integers(1, 2**31, 300).tolist()]
    for d in divisors:
        packed = magic(d)
        assert packed & 0xFFFFFFFF == d and packed >> 32 < 2**32
        edges = [0, 1, d - 1, d, d + 1, 2**31 - 1, (2**31 - 1) // d * d, 2**31 - 1 - d]
        for n in [e for e in edges if 0 <= e < 2**31]:
            assert divmod_magic(n, packed) == divmod(n, d), (n, d)
        n = rng.integers(0, 2**31, 20_000, dtype=np.uint64)
        t = (n * np.uint64(packed >> 32)) >> np.uint64(32)
        q = ((t + n) & np.uint64(0xFFFFFFFF)) >> np.uint64((d - 1).bit_length())
        np.testing.assert_array_equal(q, n // np.uint64(d))


def test_the_benchmarks_gpu_sleeper_compiles(sm90):
    """The CUDA bench queues its kernel-time calls behind a kernel sleeping on the GPU."""
    from numba import cuda

    from jitops.bench import cuda_bench

    ptx, _ = cuda.compile_ptx(cuda_bench._sleeper().py_func, "void(int64)", cc=CC)
    assert "nanosleep" in ptx
