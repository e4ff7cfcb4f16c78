"""numba.cuda kernels on the same plan and the same scalar table as the CPU.

Imported only when CUDA is requested (``device="cuda"`` or a CUDA array operand), so
``import jitops`` never touches the CUDA driver.

Three module-level kernels, specialised through a :class:`~jitops.cuda.spec.CudaSpec` argument
(so they are cached on disk, like the CPU's, and a new process does not recompile):

* ``contig``  -- every operand one dense 1-D run: each thread handles ``UNROLL`` elements a
  block apart per step (coalesced, several loads in flight before the first store), indexes
  with unsigned integers (no per-element wraparound fix-up) and has no index math besides;
* ``strided`` -- the planner's coalesced N-d space, in the same ``UNROLL`` steps (one load per
  thread in flight left an H200 at 1.1 TB/s on a row broadcast): each linear index is
  unravelled with one div/mod per dimension *beyond the first* (straight-line code for the
  plan's rank, a compile-time constant); where every index fits in 31 bits, a division is a
  multiply-high, an add and a shift by precomputed magic numbers (jitops.cuda.spec.magic);
* ``reduce_rows`` -- a reduced result (jitops.cuda.reduce): blocks of a fixed width each
  reduce a fixed chunk of a row of the space (its kept axes, then its reduced ones) through a
  tree in shared memory, the partials reduced again by the same kernel;
* ``any_zero`` -- the integer ``elementwise_div`` zero check, on the device.

Operands are 1-D views over their memory span (negative strides included) plus start
offsets and element strides from the planner, all passed *by value*: shape, strides and
offsets are tuples of kernel arguments, so a launch allocates nothing on the device.
"""

from __future__ import annotations

import os

import numba
from numba import cuda
from numba.core import sigutils

from ..core import config
from ..cpu.compile.cache import memoized_stamp
from . import rounding
from .spec import SIMULATOR, combine, element, gather, identity, load, offsets

#: Elements per thread and step in ``contig`` (loads issued before the first store).
UNROLL = 4


def _jit(fn):
    if SIMULATOR:
        return cuda.jit(fn)
    rounding.install()  # before anything compiles: every multiply and add rounded apart
    # without link-time optimisation: nvJitLink would generate the code again from NVVM's LTO
    # IR, fusing what -fma=0 kept apart; the kernels link nothing for LTO to inline
    kernel = cuda.jit(fn, lto=False)
    if config.cache_enabled():
        _enable_cache(kernel)
    return kernel


def contig(spec, o, ins, n):
    bs = cuda.blockDim.x
    i = (cuda.blockIdx.x * bs) * UNROLL + cuda.threadIdx.x
    step = (cuda.gridDim.x * bs) * UNROLL
    while i + (UNROLL - 1) * bs < n:
        j0 = numba.uint64(i)
        j1 = numba.uint64(i + bs)
        j2 = numba.uint64(i + 2 * bs)
        j3 = numba.uint64(i + 3 * bs)
        v0 = load(ins, j0)
        v1 = load(ins, j1)
        v2 = load(ins, j2)
        v3 = load(ins, j3)
        o[j0] = element(spec, v0)
        o[j1] = element(spec, v1)
        o[j2] = element(spec, v2)
        o[j3] = element(spec, v3)
        i += step
    while i < n:  # the last, partial step: at most UNROLL elements of this thread
        j = numba.uint64(i)
        o[j] = element(spec, load(ins, j))
        i += bs


def strided(spec, o, ins, shape, ostr, istr, starts, n):
    bs = cuda.blockDim.x
    i = (cuda.blockIdx.x * bs) * UNROLL + cuda.threadIdx.x
    step = (cuda.gridDim.x * bs) * UNROLL
    while i + (UNROLL - 1) * bs < n:
        f0 = offsets(shape, ostr, istr, starts, i)
        f1 = offsets(shape, ostr, istr, starts, i + bs)
        f2 = offsets(shape, ostr, istr, starts, i + 2 * bs)
        f3 = offsets(shape, ostr, istr, starts, i + 3 * bs)
        v0 = gather(ins, f0)
        v1 = gather(ins, f1)
        v2 = gather(ins, f2)
        v3 = gather(ins, f3)
        o[numba.uint64(f0[0])] = element(spec, v0)
        o[numba.uint64(f1[0])] = element(spec, v1)
        o[numba.uint64(f2[0])] = element(spec, v2)
        o[numba.uint64(f3[0])] = element(spec, v3)
        i += step
    while i < n:  # the last, partial step: at most UNROLL elements of this thread
        f = offsets(shape, ostr, istr, starts, i)
        o[numba.uint64(f[0])] = element(spec, gather(ins, f))
        i += bs


#: Threads of a reducing block: the width of its tree, fixed (not the GPU's or the
#: configuration's choice), so a sum's order follows from the shape alone.
REDUCE_THREADS = 4 if SIMULATOR else 256
#: Elements each thread of a reducing block combines in sequence before the tree.
REDUCE_RUN = 8 if SIMULATOR else 16
#: Elements one reducing block covers of a row.
REDUCE_CHUNK = REDUCE_THREADS * REDUCE_RUN


def reduce_rows(spec, ins, part, shape, zeros, istr, starts, length, groups, nblocks):
    """Block ``b`` reduces chunk ``b % groups`` of row ``b // groups`` (``length`` elements
    each) of the space ``shape`` (kept axes, then reduced) into ``part[b]``: each thread
    combines every ``REDUCE_THREADS``-th element of the chunk in order, then the block's
    values are combined pairwise in shared memory, a fixed tree."""
    t = cuda.threadIdx.x
    sh = cuda.shared.array(REDUCE_THREADS, part.dtype)
    b = cuda.blockIdx.x
    while b < nblocks:
        row = b // groups
        lo = (b - row * groups) * REDUCE_CHUNK
        hi = min(lo + REDUCE_CHUNK, length)
        acc = identity(spec)
        r = lo + t
        while r < hi:
            f = offsets(shape, zeros, istr, starts, row * length + r)
            acc = combine(spec, acc, element(spec, gather(ins, f)))
            r += REDUCE_THREADS
        sh[t] = acc
        cuda.syncthreads()
        s = REDUCE_THREADS // 2
        while s > 0:
            if t < s:
                sh[t] = combine(spec, sh[t], sh[t + s])
            cuda.syncthreads()
            s //= 2
        if t == 0:
            part[numba.uint64(b)] = sh[0]
        cuda.syncthreads()  # sh is read before the next chunk overwrites it
        b += cuda.gridDim.x


def any_zero(y, shape, ystr, start, n, flag):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        f = offsets(shape, ystr, (), start, i)
        if y[numba.uint64(f[0])] == 0:
            flag[0] = 1
        i += step


#: numba-cuda warns (NumbaPerformanceWarning) at every launch of fewer than 128 blocks; a
#: small launch is spread over that many small blocks instead (idle threads exit at once).
#: The simulator runs every thread as Python: no padding there.
MIN_BLOCKS = 1 if SIMULATOR else 128


def launch_config(n: int, per_thread: int = 1) -> tuple[int, int]:
    """Blocks and threads per block for ``n`` elements, ``per_thread`` each per step
    (grid-stride loops cover the rest); at least :data:`MIN_BLOCKS` blocks."""
    tpb = config.CUDA_THREADS_PER_BLOCK
    blocks = -(-n // (tpb * per_thread))
    while blocks < MIN_BLOCKS and tpb > 32:
        tpb //= 2
        blocks = -(-n // (tpb * per_thread))
    return max(MIN_BLOCKS, min(blocks, config.CUDA_MAX_BLOCKS)), tpb


# -- the on-disk cache -------------------------------------------------------------------------

#: What a cached CUDA kernel depends on: these modules and the jitops modules they import.
KERNEL_MODULES = ("jitops.cuda.kernels", "jitops.act")
_stamp: str | None = None


def source_stamp() -> str:
    global _stamp
    if _stamp is None:
        _stamp = memoized_stamp("cuda-source-stamp",
                                numba.__version__ + getattr(cuda, "__version__", "")
                                + rounding.stamp(), KERNEL_MODULES)
    return _stamp


_CACHE_STATE: dict[str, str | None] = {}


def _cache_why_not() -> str | None:
    """Why numba-cuda's cache classes are not as jitops subclasses them, or None."""
    from numba.cuda.core.caching import _CacheLocator
    from numba.cuda.dispatcher import CUDACache, CUDACacheImpl

    if not (hasattr(CUDACacheImpl, "_locator_classes") and hasattr(CUDACache, "_impl_class")
            and callable(getattr(CUDACache, "load_overload", None))
            and isinstance(_CacheLocator, type)):
        return "numba-cuda's cache classes are not as jitops expects"
    return None


def _enable_cache(kernel) -> None:
    """numba-cuda's cache in jitops' directory, stamped with jitops' sources, degrading to
    compiling (never to an error) on a damaged, full or unwritable cache. Fenced as the
    ``cuda_cache`` hook (numba-cuda's cache classes and their private members): off, kernels
    compile in every process."""
    try:
        from numba.cuda.core.caching import _CacheLocator
        from numba.cuda.dispatcher import CUDACache, CUDACacheImpl
    except ImportError:  # pragma: no cover - the built-in numba.cuda: uncached
        return
    from ..cpu.compile.cache import LocatorMixin
    from ..cpu.compile.hooks import check_once

    if not check_once(_CACHE_STATE, "cuda_cache", _cache_why_not, "jitops' CUDA kernels "
                      "compile in every process (no disk cache)"):
        return

    class Locator(LocatorMixin, _CacheLocator):
        subdir = "cuda"
        stamp = staticmethod(source_stamp)

    class Impl(CUDACacheImpl):
        _locator_classes = [Locator]

    class Cache(CUDACache):
        _impl_class = Impl

        def load_overload(self, sig, target_context):
            try:
                kernel = super().load_overload(sig, target_context)
            except Exception:  # a damaged entry: compile instead, and let the save rewrite it
                path = getattr(self._cache_file, "_index_path", None)
                try:
                    if path and os.path.isfile(path):
                        os.unlink(path)
                except OSError:
                    pass  # read-only: ignored anyway
                return None
            if kernel is not None and tuple(getattr(kernel, "argument_types", ())) != \
                    tuple(sigutils.normalize_signature(sig)[0]):
                # another signature's kernel: processes compiling at once can both give a new
                # entry the same data file (numba's index is read, extended and written back
                # unlocked); never run it -- compiling and saving rewrites that file
                return None
            return kernel

        def save_overload(self, sig, data):
            if any(str(getattr(a, "fn_key", "")).startswith("local:") for a in sig):
                return  # a lambda or closure: its name is this process's only
            try:
                super().save_overload(sig, data)
            except Exception:  # full disk, read-only directory: stay uncached
                pass

    try:
        kernel._cache = Cache(kernel.py_func)
    except Exception:  # no usable cache directory
        pass


contig = _jit(contig)
strided = _jit(strided)
any_zero = _jit(any_zero)
reduce_rows = _jit(reduce_rows)

#: The kernels by name (what the compile test and the launch trace call them).
KERNELS = {"contig": contig, "strided": strided, "any_zero": any_zero,
           "reduce_rows": reduce_rows}
