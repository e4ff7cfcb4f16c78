"""numba.cuda kernels on the same plan and the same scalar table as the CPU.

Imported only when CUDA is requested (``device="cuda"`` or a CUDA array operand), so
``import jitops`` never touches the CUDA driver.

Two kernels per specialisation, both grid-stride loops (CuPy's ``CUPY_FOR``):

* ``contig``  -- every operand is one dense 1-D run: ``o[i] = f(x[i], y[i])``, no index math;
* ``strided`` -- the planner's coalesced N-d space: unravel the linear index with div/mod per
  dim into per-operand element offsets (CuPy's ``CIndexer``), in 32-bit arithmetic when every
  index fits, 64-bit otherwise ("64-bit division is very slow on GPU").

and the same two loops around ``o = x`` (:func:`copy`: the overlap policy's copies).
Operands are addressed as 1-D views over their memory span plus a start offset and element
strides from the planner (negative strides included), exactly as on the CPU.

The strided kernels read one int64 ``meta`` array::

    [nd, shape (nd), strides of out and of each input (nd each), start offsets of each]

The loops are written for any number of inputs (the built-in ops have two, a user op of
``jitops.elementwise`` one or more, the copies one).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import cuda, types
from numba.np.numpy_support import from_dtype

from ..core import config
from ..core import scalar as _scalar
from ..core.dtypes import act_dtype

#: Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set before numba is imported).
SIMULATOR = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))


def _divmod_py(r, n):
    return r // n, r % n


def _make_divmod32():
    """Unsigned 32-bit div/mod: Numba types int32 arithmetic as int64, and 64-bit division is
    several times slower on a GPU, so the narrowing is done in LLVM directly."""
    from llvmlite import ir
    from numba.extending import intrinsic

    @intrinsic
    def divmod32(typingctx, r, n):
        sig = types.UniTuple(types.int64, 2)(r, n)

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            a, b = builder.trunc(args[0], i32), builder.trunc(args[1], i32)
            q, m = builder.zext(builder.udiv(a, b), i64), builder.zext(builder.urem(a, b), i64)
            return context.make_tuple(builder, signature.return_type, [q, m])

        return sig, codegen

    return divmod32


#: 32-bit div/mod on a GPU; plain Python in the simulator (which cannot run intrinsics).
divmod32 = _divmod_py if SIMULATOR else _make_divmod32()


if not SIMULATOR:  # the simulator runs the table's plain-Python fma
    from numba.core.extending import overload

    @overload(_scalar.fma, target="cuda")
    def _ov_fma(a, b, c):
        if isinstance(a, types.Float) and a == b == c:
            return lambda a, b, c: cuda.fma(a, b, c)
        return None


@functools.cache
def _device_fn(fn):
    return cuda.jit(device=True)(fn)


@functools.cache
def elementwise(op: str, act: str | None, x: str, y: str, out: str, compute: str):
    """The (contig, strided) kernels of one specialisation, built from the scalar table."""
    T = from_dtype(np.dtype(compute))
    A = from_dtype(act_dtype(act, np.dtype(compute)))  # as on the CPU (jitops.cpu.spec)
    f = _device_fn(_scalar.OPS[op])
    g = _device_fn(_scalar.ACTS[act])
    out_t = types.boolean if out == "bool" else from_dtype(np.dtype(out))

    @cuda.jit(device=True)
    def elem(a, b):
        return out_t(g(A(T(f(T(a), T(b), T))), A))

    return _loops(elem, 2)


@functools.cache
def user_elementwise(fn, inputs: tuple[str, ...], out: str, compute: str):
    """The (contig, strided) kernels of a user op (``jitops.elementwise``): its scalar
    function compiled as a device function, each input converted to the compute dtype and
    the return value to the result dtype, as on the CPU (jitops.cpu.nary)."""
    n = len(inputs)
    args = ", ".join(f"a{k}" for k in range(1, n + 1))
    conv = ", ".join(f"T(a{k})" for k in range(1, n + 1))
    ns = {"T": from_dtype(np.dtype(compute)), "FN": _device_fn(fn),
          "OUT": types.boolean if out == "bool" else from_dtype(np.dtype(out))}
    exec(f"def elem({args}):\n    return OUT(FN({conv}))\n", ns)
    return _loops(cuda.jit(device=True)(ns["elem"]), n)


@functools.cache
def copy():
    """The (contig, strided) kernels of ``o = x``: bits as they are, for the overlap policy's
    copies and a stand-in ``out``."""

    @cuda.jit(device=True)
    def first(a):
        return a

    return _loops(first, 1)


def _loop_source(n: int) -> str:
    """Source of the two grid-stride loops around ``elem(a1, ..., an)`` (``n`` inputs)."""
    ins = range(1, n + 1)
    arrays = ", ".join(f"a{k}" for k in ins)
    L = [f"def contig(o, {arrays}, n):",
         "    i = cuda.grid(1)",
         "    step = cuda.gridsize(1)",
         "    while i < n:",
         f"        o[i] = elem({', '.join(f'a{k}[i]' for k in ins)})",
         "        i += step",
         "",
         f"def strided(o, {arrays}, meta, n, small):",
         "    # small: every linear index fits in 32 bits: the per-dim div/mod runs in 32-bit",
         "    nd = meta[0]",
         f"    base = 1 + {n + 2} * nd",
         "    i = cuda.grid(1)",
         "    step = cuda.gridsize(1)",
         "    while i < n:",
         "        r = i"]
    L += [f"        f{k} = meta[base + {k}]" for k in range(n + 1)]
    L += ["        for d in range(nd - 1, -1, -1):",
          "            sz = meta[1 + d]",
          "            if small:",
          "                r, k = divmod32(r, sz)",
          "            else:",
          "                k = r % sz",
          "                r //= sz"]
    L += [f"            f{k} += k * meta[1 + {k + 1} * nd + d]" for k in range(n + 1)]
    L += [f"        o[f0] = elem({', '.join(f'a{k}[f{k}]' for k in ins)})",
          "        i += step"]
    return "\n".join(L) + "\n"


def _loops(elem, n: int):
    """Grid-stride loops around ``elem`` of ``n`` inputs: a dense 1-D one and the strided N-d
    one, which reads ``[nd, shape, strides of out and each input, start offsets]``."""
    ns = {"cuda": cuda, "elem": elem, "divmod32": divmod32}
    exec(compile(_loop_source(n), f"<jitops cuda loops, {n} inputs>", "exec"), ns)
    return cuda.jit(ns["contig"]), cuda.jit(ns["strided"])


def launch_config(n: int) -> tuple[int, int]:
    """Blocks and threads per block for ``n`` elements (grid-stride loops cover the rest)."""
    tpb = config.CUDA_THREADS_PER_BLOCK
    blocks = max(1, min(-(-n // tpb), config.CUDA_MAX_BLOCKS))
    return blocks, tpb
