"""Numba CPU kernels: one loop nest for every op and dtype, specialised through a KernelSpec.

The iteration space is the planner's coalesced shape. It is cut into *tasks*: a block of at
most ``BLOCK`` elements of one row, or several whole short rows. ``_kernel_parallel`` runs the
tasks under ``prange``; ``_kernel_serial`` runs the same tasks in a plain loop and is used below
the parallel size (:func:`runs_parallel`), where a parallel launch costs more than the work.

Each row runs one of two loops, picked per row from its strides (:func:`row`):

* the plan's ``contig``, ``scalar_x`` and ``scalar_y`` rows (out unit-stride, each input
  unit-stride or constant along the row: NumPy's ``BINARY_LOOP_FAST`` cases) run one
  vectorised loop, a constant input staged into a stack buffer; outputs beyond the
  last-level cache use its non-temporal twin (jitops.cpu.stream);
* ``strided`` rows run the plain strided loop;

and the ``tiled`` variant cuts the two innermost dims into ``TILE_I x TILE_J`` tiles (one task
each), for operands that disagree on layout: an input that runs across the rows (``X.T``) is
first copied into a tile on the task's stack, read along its own contiguous direction, so the
tile's rows then run the vectorised row loops on stack, output and the other input.

The two drivers (``_kernel_serial``, ``_kernel_parallel``) take five integers: the address of
``_task`` compiled for one KernelSpec (:func:`task_address`), the three ndarray *objects'*
addresses (``id()``) and the address of an int64 ``meta`` array (shape, strides, offsets, task
geometry, checks). A driver reads each array's data pointer from its object header
(``PyArrayObject.data``, at an offset verified against ``__array_interface__`` at import; where
it cannot be verified the caller passes data addresses instead), checks alignment and, for
``out=``, overlap with the inputs, and returns a status instead of writing when a check fails.
So a repeated call costs one dictionary lookup and one compiled call (no
``__array_interface__``, 1 us per array); the drivers are compiled once for every op and
dtype, and array rank, layout and writeability never multiply signatures: exactly one
``_task`` per KernelSpec.
"""

from __future__ import annotations

from types import FunctionType

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable

from ..core import config
from ..core.plan import CONTIG, SCALAR_X, SCALAR_Y, STRIDED, TILED, Plan
from . import cache, hooks, parallel, pool, registries
from .jit import ENTRY, driver, inner
from .spec import KernelSpecType, address_of, as_pointer, element, pointers, streams
from .stream import AVAILABLE as STREAM_AVAILABLE
from .stream import STREAM_ALIGN, emit_stream_head, emit_stream_put, store_fence

#: The plan's inner-loop variants as the kernels see them (compile-time constants).
V_CONTIG, V_SCALAR_X, V_SCALAR_Y, V_STRIDED, V_TILED = 0, 1, 2, 3, 4
VARIANT_CODES = {CONTIG: V_CONTIG, SCALAR_X: V_SCALAR_X, SCALAR_Y: V_SCALAR_Y,
                 STRIDED: V_STRIDED, TILED: V_TILED}

#: Kernel return codes. MISALIGNED and OVERLAP: a check failed and nothing was written.
#: TASK_FAILED: some task's compiled code returned an error status (an exception inside the
#: scalar code); the caller must raise, since elements of that task may be unwritten.
#: READ_ONLY: out's object says it is not writeable (nothing was written).
#: MISMATCH: an operand object is not the ndarray (type, dtype, shape, strides) the meta's
#: header checks describe (see :func:`header_checks`; nothing was written).
OK, MISALIGNED, OVERLAP, TASK_FAILED, READ_ONLY, MISMATCH = 0, 1, 2, 3, 4, 5
#: Written, and the tasks raised floating-point exceptions: ``FP_RAISED | flags`` (MXCSR's
#: invalid 0x1, divide-by-zero 0x4, overflow 0x8, underflow 0x10; jitops.core.errstate).
FP_RAISED = 32

#: Most dims a plan can have after coalescing (NumPy's NPY_MAXDIMS): the size of each task's
#: odometer, which lives on that task's own stack.
MAX_DIMS = 64

# meta layout (int64): a fixed header, then the shape and the out, x, y strides (nd words each),
# read only through _dim and _strides below
M_ND, M_VARIANT, M_BLOCK, M_NTASKS, M_ROWS_PER_TASK, M_NBLK, M_ROWS = 0, 1, 2, 3, 4, 5, 6
M_OFF_O, M_OFF_X, M_OFF_Y = 7, 8, 9
M_DATA_OFF = 10  # offset of the data pointer in an ndarray object, or -1: addresses given
M_ALIGN = 11  # 11..13: required alignment of out, x, y data pointers (bytes)
M_CHECK = 14  # 1: check out against x and y for overlap
M_LO, M_HI = 15, 18  # 15..17, 18..20: byte extent [p + lo, p + hi) of out, x, y
M_SAME_X, M_SAME_Y = 21, 22  # x (y) has out's shape and strides: an exact alias is allowed
M_TILE_I, M_TILE_J, M_NTI, M_NTJ = 23, 24, 25, 26
M_FLAGS_OFF = 27  # offset of the flags in an ndarray object, or -1: not checked here
M_HEADERS = 28  # where the header checks start in meta (header_checks), or -1: none
M_SHIFT = 29  # tiled: bit 0 (1) the tile rows' edges, bit 1 (2) their columns' may move
#: Most elements of one tile (TILE_I x TILE_J): what a task's stack holds per staged input.
TILE_MAX = 4096
HDR = 30

_I64 = types.int64
_LL64, _LL32 = ir.IntType(64), ir.IntType(32)


def _c(v: int):
    """An i64 constant (LLVM IR)."""
    return ir.Constant(_LL64, v)


def _words(b, meta):
    """``meta`` (an int64 pointer) as a reader of words (``i`` a Python int or an i64)."""
    def word(i):
        return b.load(b.gep(meta, [i if isinstance(i, ir.Value) else _c(i)]))
    return word


def _smin(b, a, c):
    """The smaller of two i64 values (LLVM IR)."""
    return b.select(b.icmp_signed("<", a, c), a, c)


def emit_unravel(b, r, ndims, dim, strides, slots, idx):
    """LLVM IR: add to the offsets held in ``slots`` those of outer row ``r`` over dims
    ``0 .. ndims - 1`` (div/mod, innermost first) and fill the odometer ``idx``. ``dim(d)``
    is a dim's size, ``strides(d)`` the operands' strides along it (one per slot). Every
    kernel family walks its rows with this and :func:`emit_odometer_step`."""
    rest = cgutils.alloca_once_value(b, r)
    with cgutils.for_range(b, ndims) as loop:
        d = b.sub(b.sub(ndims, _c(1)), loop.index)  # innermost first
        m, rv = dim(d), b.load(rest)
        i = b.srem(rv, m)
        b.store(b.sdiv(rv, m), rest)
        b.store(i, b.gep(idx, [d]))
        for slot, st in zip(slots, strides(d)):
            b.store(b.add(b.load(slot), b.mul(i, st)), slot)


def emit_odometer_step(b, nd, dim, strides, slots, idx, done):
    """LLVM IR: the offsets in ``slots`` one row on; the odometer ``idx`` over dims
    ``0 .. nd - 2`` steps its last dim, carrying into the slower ones. Ends positioned at
    ``done`` (a block the caller may branch to as well)."""
    def add(d, times):
        for slot, st in zip(slots, strides(d)):
            b.store(b.add(b.load(slot), b.mul(times, st)), slot)

    count = b.select(b.icmp_signed(">", nd, _c(1)), b.sub(nd, _c(1)), _c(0))
    with cgutils.for_range(b, count) as loop:
        d = b.sub(b.sub(count, _c(1)), loop.index)  # nd - 2 down to 0
        at = b.gep(idx, [d])
        b.store(b.add(b.load(at), _c(1)), at)
        add(d, _c(1))
        m = dim(d)
        with b.if_then(b.icmp_signed("<", b.load(at), m)):
            b.branch(done)
        b.store(_c(0), at)
        add(d, b.neg(m))
    b.branch(done)
    b.position_at_end(done)


def _emit_dim(b, meta, d):
    """Size of iteration dim ``d`` (slowest first): LLVM IR."""
    return _words(b, meta)(b.add(_c(HDR), d))


def _emit_strides(b, meta, nd, d):
    """Element strides of out, x and y along iteration dim ``d``: LLVM IR."""
    word = _words(b, meta)
    return [word(b.add(b.add(_c(HDR), b.mul(_c(k), nd)), d)) for k in (1, 2, 3)]


@intrinsic
def dim(typingctx, meta, d):
    """Size of iteration dim ``d`` (slowest first).

    This and the walk below (:func:`strides`, :func:`unravel`, :func:`odometer_step`) are
    LLVM IR: as compiled helpers they were three more Numba compiles (0.1 s) of the very first
    call on an empty cache."""
    sig = _I64(meta, _I64)

    def codegen(context, builder, signature, args):
        return _emit_dim(builder, args[0], args[1])

    return sig, codegen


@intrinsic
def strides(typingctx, meta, nd, d):
    """Element strides of out, x and y along iteration dim ``d``."""
    sig = types.UniTuple(_I64, 3)(meta, _I64, _I64)

    def codegen(context, builder, signature, args):
        return context.make_tuple(builder, signature.return_type, _emit_strides(builder, *args))

    return sig, codegen


@intrinsic
def unravel(typingctx, meta, nd, ndims, r, idx):
    """Offsets ``(oo, xo, yo)`` of outer row ``r`` over dims ``0 .. ndims - 1`` (div/mod, once
    per task), from the plan's offsets; fills the odometer ``idx``."""
    sig = types.UniTuple(_I64, 3)(meta, _I64, _I64, _I64, idx)

    def codegen(context, builder, signature, args):
        meta, nd, ndims, r, idx = args
        b, word = builder, _words(builder, meta)
        offs = [cgutils.alloca_once_value(b, word(k)) for k in (M_OFF_O, M_OFF_X, M_OFF_Y)]
        emit_unravel(b, r, ndims, lambda d: _emit_dim(b, meta, d),
                     lambda d: _emit_strides(b, meta, nd, d), offs, idx)
        return context.make_tuple(b, signature.return_type, [b.load(o) for o in offs])

    return sig, codegen


@intrinsic
def odometer_step(typingctx, meta, nd, idx, oo, xo, yo):
    """``(oo, xo, yo)`` one row on: the odometer ``idx`` over dims ``0 .. nd - 2`` steps its
    last dim, carrying into the slower ones."""
    sig = types.UniTuple(_I64, 3)(meta, _I64, idx, _I64, _I64, _I64)

    def codegen(context, builder, signature, args):
        meta, nd, idx, *start = args
        b = builder
        offs = [cgutils.alloca_once_value(b, v) for v in start]
        emit_odometer_step(b, nd, lambda d: _emit_dim(b, meta, d),
                           lambda d: _emit_strides(b, meta, nd, d), offs, idx,
                           b.append_basic_block("odometer.done"))
        return context.make_tuple(b, signature.return_type, [b.load(o) for o in offs])

    return sig, codegen


#: Set once; the meta arrays carry them, so compiled kernels never bake them in.
#: Offsets in an ndarray object the kernels read (jitops.cpu.hooks, ``ndarray_header``): the
#: data pointer (-1: the caller resolves data addresses), the flags (-1: not read), and the
#: type, rank, shape, strides and dtype words the memo's header checks compare (None: no memo).
_HEADER = hooks.header_offsets() if hooks.ok("ndarray_header") else None
DATA_OFFSET = _HEADER[0] if _HEADER else -1
FLAGS_OFFSET = _HEADER[1] if _HEADER else -1
HEADER_OFFSETS = _HEADER[2] if _HEADER else None
#: NumPy's NPY_ARRAY_WRITEABLE flag bit.
WRITEABLE = 0x0400


#: Blocks of a long row start a multiple of this many elements apart: whole cache lines (64
#: bytes) of every dtype, whole vectors, and aligned streaming chunks.
BLOCK_ALIGN = 64

#: Elements of a row computed per chunk: what a broadcast operand is staged to (see row).
CHUNK = 1024
assert CHUNK <= TILE_MAX and CHUNK % STREAM_ALIGN == 0  # fits the buffers; aligned chunks


def _emit_loop(b, start, stop, body):
    """``for i in range(start, stop): body(i)`` (i64), as a canonical counted loop."""
    with cgutils.for_range_slice(b, start, stop, _c(1), inc=True) as (i, _):
        body(i)


def _pair_vector(p):
    """The ``<2 x T>`` vector type a pointer's pointee (Numba's complex: a struct of two equal
    floats) loads as in one instruction, or None for any other word."""
    t = p.type.pointee
    if (isinstance(t, ir.LiteralStructType) and len(t.elements) == 2
            and t.elements[0] == t.elements[1]
            and isinstance(t.elements[0], (ir.FloatType, ir.DoubleType))):
        return ir.VectorType(t.elements[0], 2)
    return None


def emit_load_word(b, p):
    """LLVM IR: load the word at ``p``; a complex one as one ``<2 x T>`` vector.

    A strided loop is not vectorised across elements, and Numba's complex struct loads as two
    scalars: a strided complex128 ``x - y`` ran two ``vmovsd`` per operand and two ``vsubsd``
    per element, where NumPy's loop runs one 16-byte load and one ``vsubpd``. Loaded and
    stored this way, LLVM folds the two parts' arithmetic into one packed op. Measured on the
    grid's strided cells (step 2, paired with NumPy, old and new code alternating): complex128
    0.93-0.95x NumPy at 1e4 elements and 0.88-0.97x at 3e4 before, 1.03-1.07x and 0.97-1.04x
    after; complex64 0.68-0.81x before, 0.95-1.06x after. Unaligned (``align 1``): NumPy
    arrays need not be aligned, and x86 runs an unaligned load as fast on aligned data.
    """
    vt = _pair_vector(p)
    if vt is None:
        return b.load(p)
    v = b.load(b.bitcast(p, vt.as_pointer()), align=1)  # (as NumPy's unaligned arrays allow)
    s = ir.Constant(p.type.pointee, ir.Undefined)
    for k in range(2):
        s = b.insert_value(s, b.extract_element(v, ir.Constant(_LL32, k)), k)
    return s


def emit_store_word(b, v, p) -> None:
    """LLVM IR: store the word ``v`` at ``p``; a complex one as one ``<2 x T>`` vector (see
    :func:`emit_load_word`)."""
    vt = _pair_vector(p)
    if vt is None:
        b.store(v, p)
        return
    w = ir.Constant(vt, ir.Undefined)
    for k in range(2):
        w = b.insert_element(w, b.extract_value(v, k), ir.Constant(_LL32, k))
    b.store(w, b.bitcast(p, vt.as_pointer()), align=1)


def emit_chunked_stores(b, n, chunk, h, stream: bool, chunk_at, name: str) -> None:
    """LLVM IR: a row's elements ``[0, n)`` in chunks of at most ``chunk``, cut at the
    streaming head ``h``: ordinary stores before it, non-temporal ones from it where the
    spec streams (``h == n``: nothing streams). ``chunk_at(j)`` gives the chunk starting at
    element ``j``: ``(value_at, out)``, ``value_at(i)`` the value of its element ``i`` and
    ``out`` where its output starts. The built-in rows (:func:`row`) and the user ops' rows
    (jitops.cpu.nary) share it."""
    j = cgutils.alloca_once_value(b, _c(0))
    cond = b.append_basic_block(f"{name}.chunk.cond")
    body = b.append_basic_block(f"{name}.chunk.body")
    after = b.append_basic_block(f"{name}.chunk.end")
    b.branch(cond)
    b.position_at_end(cond)
    b.cbranch(b.icmp_signed("<", b.load(j), n), body, after)
    b.position_at_end(body)
    jv = b.load(j)
    m0 = _smin(b, chunk, b.sub(n, jv))
    in_head = b.icmp_signed("<", jv, h)
    m = b.select(in_head, _smin(b, m0, b.sub(h, jv)), m0)
    hs = b.select(in_head, m, _c(0))  # elements of this chunk before the head
    value_at, out = chunk_at(jv)
    _emit_loop(b, _c(0), hs, lambda i: b.store(value_at(i), b.gep(out, [i])))
    if stream:
        _emit_loop(b, hs, m, lambda i: emit_stream_put(b, value_at(i), b.gep(out, [i])))
    b.store(b.add(jv, m), j)
    b.branch(cond)
    b.position_at_end(after)


@intrinsic
def row(typingctx, spec, o, x, y, oo, xo, yo, n, so, sx, sy, xb, yb):
    """One row of ``n`` elements (offsets ``oo``, ``xo``, ``yo``; element strides ``so``,
    ``sx``, ``sy``).

    Where out is unit-stride and each input unit-stride or constant along the row (NumPy's
    ``BINARY_LOOP_FAST`` cases: contig, scalar_x, scalar_y), the loops vectorise: with one
    input constant (scalar_x, scalar_y) its value stays in a register and the other is read
    in place; with both read in place (contig), or both constant (staged into their stack
    buffers ``xb``/``yb``, ``CHUNK`` elements, and read like the others), one loop runs the
    row in chunks. Where the spec streams, the elements after an aligned head are written
    with non-temporal stores (jitops.cpu.stream), and every chunk after the head starts
    aligned (``CHUNK`` elements span whole vectors).

    LLVM IR around one call of the spec's :func:`element` (typed here, its compiled code linked
    in): as a compiled Python function this was 0.25-0.3 s of Numba typing and lowering that
    every new signature waited for.
    """
    if not isinstance(spec, KernelSpecType):
        return None
    el_ty = typingctx.resolve_value_type(element)
    el_sig = typingctx.resolve_function_type(el_ty, (spec, x.dtype, y.dtype), {})
    if el_sig is None:
        return None
    sig = types.void(spec, o, x, y, oo, xo, yo, n, so, sx, sy, xb, yb)
    o_ty = o

    def codegen(context, builder, signature, args):
        b = builder
        sp, o, x, y, oo, xo, yo, n, so, sx, sy, xb, yb = args
        impl = context.get_function(el_ty, el_sig)

        def element_at(pa, pb, load=b.load):
            return impl(b, (sp, load(pa), load(pb)))

        def eq(a, v):
            return b.icmp_signed("==", a, _c(v))

        def smin(a, c):
            return _smin(b, a, c)

        x_const, y_const = eq(sx, 0), eq(sy, 0)
        fast = b.and_(eq(so, 1), b.and_(b.or_(x_const, eq(sx, 1)), b.or_(y_const, eq(sy, 1))))
        done = b.append_basic_block("row.done")
        with b.if_else(fast) as (vector, strided):
            with strided:
                def one(j):
                    v = element_at(b.gep(x, [b.add(xo, b.mul(j, sx))]),
                                   b.gep(y, [b.add(yo, b.mul(j, sy))]),
                                   lambda p: emit_load_word(b, p))
                    emit_store_word(b, v, b.gep(o, [b.add(oo, b.mul(j, so))]))
                _emit_loop(b, _c(0), n, one)
            with vector:
                h = emit_stream_head(context, b, o_ty, o, oo, n) if spec.stream else n
                # One input constant along the row (a column or row broadcast, a scalar): its
                # value stays in a register and the other is read in place. Staged in a
                # buffer and read like the other, the outer difference X(4096, 1) -
                # Y(1, 4096) ran 6-8% behind the same loop in PyTorch and in a plain Numba
                # loop, on the same stores (two loads per element, a refill every row).
                for only, cp, coff, vp, voff, c_is_x in (
                        (b.and_(x_const, b.not_(y_const)), x, xo, y, yo, True),
                        (b.and_(y_const, b.not_(x_const)), y, yo, x, xo, False)):
                    with b.if_then(only):
                        c = b.load(b.gep(cp, [coff]))

                        def el(i, c=c, vp=vp, voff=voff, c_is_x=c_is_x):
                            v = b.load(b.gep(vp, [b.add(voff, i)]))
                            return impl(b, (sp, c, v) if c_is_x else (sp, v, c))

                        _emit_loop(b, _c(0), h,
                                   lambda i, el=el: b.store(el(i), b.gep(o, [b.add(oo, i)])))
                        if spec.stream:
                            _emit_loop(b, h, n, lambda i, el=el: emit_stream_put(
                                b, el(i), b.gep(o, [b.add(oo, i)])))
                        b.branch(done)
                # both inputs read in place, or both constant (staged, in chunks)
                staged = smin(n, _c(CHUNK))
                for const, p, off, buf in ((x_const, x, xo, xb), (y_const, y, yo, yb)):
                    with b.if_then(const):
                        v = b.load(b.gep(p, [off]))
                        _emit_loop(b, _c(0), staged,
                                   lambda i, v=v, buf=buf: b.store(v, b.gep(buf, [i])))
                # only a staged (broadcast) input needs chunks the size of its buffer; other
                # rows run in one piece (after the streaming head)
                chunk = b.select(b.or_(x_const, y_const), _c(CHUNK), n)

                def chunk_at(jv):
                    xq = b.select(x_const, xb, b.gep(x, [b.add(xo, jv)]))
                    yq = b.select(y_const, yb, b.gep(y, [b.add(yo, jv)]))
                    return (lambda i: element_at(b.gep(xq, [i]), b.gep(yq, [i])),
                            b.gep(o, [b.add(oo, jv)]))

                emit_chunked_stores(b, n, chunk, h, spec.stream, chunk_at, "row")
        b.branch(done)
        b.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def stack_words(typingctx):
    """``MAX_DIMS`` int64 words on the calling function's stack (an ``alloca`` in its entry
    block), as a typed pointer: a task's odometer, or its per-operand offsets.

    Each task's scratch lives in its own stack frame, so its lifetime is the task's by
    construction. (An NRT array allocated in the parallel driver and shared with the ``prange``
    tasks was freed while tasks still wrote to it: Numba prunes the reference once the array
    is no longer used in the driver's own IR, whatever expression pretends to use it.)
    """
    sig = types.CPointer(types.int64)()

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, ir.IntType(64), size=MAX_DIMS)

    return sig, codegen


@intrinsic
def stack_tile(typingctx, like):
    """``TILE_MAX`` words of the pointer ``like``'s element type on the calling function's
    stack (an ``alloca`` in its entry block), as the same pointer type: a staged tile."""
    if not isinstance(like, types.CPointer):
        return None
    sig = like(like)

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, context.get_data_type(like.dtype), size=TILE_MAX)

    return sig, codegen


#: Side of the square blocks :func:`transpose_block` moves through registers.
BLOCK_T = 8
#: How far along its row each staged read prefetches: the next line or two a tile further
#: down the column (:func:`task_span` walks that way) reads; measured 10-15% off a 4096^2
#: transposed copy.
PREFETCH_BYTES = 128
_ZIP_LO = ir.Constant(ir.VectorType(ir.IntType(32), BLOCK_T), [0, 8, 1, 9, 2, 10, 3, 11])
_ZIP_HI = ir.Constant(ir.VectorType(ir.IntType(32), BLOCK_T), [4, 12, 5, 13, 6, 14, 7, 15])


def emit_prefetch(builder, at) -> None:
    """LLVM IR: a prefetch hint for the line at pointer ``at`` (read, keep in all caches,
    data); a hint never faults, past an array's end included."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fn = builder.module.declare_intrinsic(
        "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
    builder.call(fn, [builder.bitcast(at, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                      ir.Constant(i32, 1)])


@intrinsic
def transpose_block(typingctx, dst, doff, width, src, soff, s_cols):
    """Move an 8 x 8 block, transposed: for ``k`` in 0..7, the 8 contiguous elements at
    ``src[soff + k * s_cols]`` become column ``k`` of the rows ``dst[doff + r * width]``.

    Eight vector loads, three rounds of zips (interleaving rows ``i`` and ``i + 4``; three
    rounds transpose an 8 x 8 matrix) and eight vector stores, on integers of the element's
    width, so one piece of IR serves every dtype (LLVM lowers the zips to unpack and permute
    instructions). Staged element by element, a transposed operand cost 2.7-3.4x the
    contiguous op even in cache.
    """
    if not (isinstance(dst, types.CPointer) and isinstance(src, types.CPointer)
            and dst.dtype == src.dtype):
        return None
    sig = types.void(dst, types.int64, types.int64, src, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        pd, doff, width, ps, soff, s_cols = args
        elt = context.get_data_type(signature.args[0].dtype)
        size, align = context.get_abi_sizeof(elt), context.get_abi_alignment(elt)
        vec = ir.VectorType(ir.IntType(8 * size), BLOCK_T)
        ahead = _c(max(1, PREFETCH_BYTES // size))
        ps = builder.bitcast(ps, vec.element.as_pointer())
        pd = builder.bitcast(pd, vec.element.as_pointer())
        rows = []
        for k in range(BLOCK_T):
            at = builder.add(soff, builder.mul(s_cols, _c(k)))
            rows.append(builder.load(builder.bitcast(builder.gep(ps, [at]), vec.as_pointer()),
                                     align=align))
            emit_prefetch(builder, builder.gep(ps, [builder.add(at, ahead)]))
        for _ in range(3):
            half = BLOCK_T // 2
            rows = [builder.shuffle_vector(rows[i], rows[i + half], mask)
                    for i in range(half) for mask in (_ZIP_LO, _ZIP_HI)]
        for r in range(BLOCK_T):
            at = builder.add(doff, builder.mul(width, _c(r)))
            builder.store(rows[r], builder.bitcast(builder.gep(pd, [at]), vec.as_pointer()),
                          align=align)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_next_tile(typingctx, spec, p, own, off, step, s, nrows, n):
    """In a tiled spec's task, after a tile row read in place at ``p[off]`` (unit-stride,
    rows ``step`` apart; not the staged tile ``own``): prefetch the same row of the next
    tile down, which the thread runs next (tiles are walked down a column, and tiled jobs
    always forwards), one hint per cache line. A tile's rows are short runs (``TILE_J``
    elements) the hardware prefetcher barely starts on. Nothing at all for other specs."""
    if not isinstance(spec, KernelSpecType) or not isinstance(p, types.CPointer):
        return None
    sig = types.void(spec, p, own, off, step, s, nrows, n)

    def codegen(context, builder, signature, args):
        if not spec.tiled:
            return context.get_dummy_value()
        b = builder
        _, p, own, off, step, s, nrows, n = args
        size = context.get_abi_sizeof(context.get_data_type(signature.args[1].dtype))
        line = max(1, 64 // size)
        in_place = b.and_(b.icmp_signed("==", s, _c(1)),
                          b.icmp_unsigned("!=", b.ptrtoint(p, _LL64), b.ptrtoint(own, _LL64)))
        with b.if_then(in_place):
            start = b.add(off, b.mul(nrows, step))
            with cgutils.for_range_slice(b, _c(0), n, _c(line), inc=True) as (c, _):
                emit_prefetch(b, b.gep(p, [b.add(start, c)]))
        return context.get_dummy_value()

    return sig, codegen


@register_jitable
def staged(s_rows: int, s_cols: int) -> bool:
    """Whether a tiled task stages an input with these element strides down the tile's rows
    and along them: it moves less down the rows than along them, so it is read down its
    contiguous direction into the stack tile. Compiled into the tasks (:func:`_staged`) and
    asked from Python (:func:`should_stream`): one rule."""
    return s_cols != 0 and abs(s_rows) < abs(s_cols)


@inner
def _stage(buf, p, off, s_rows, s_cols, nrows, n, width):
    """Copy a tile (``nrows`` x ``n``, element (r, c) at ``off + r * s_rows + c * s_cols``)
    into ``buf`` row-major with rows ``width`` apart, reading down the rows (an operand that
    runs across the rows is contiguous that way): in 8 x 8 blocks through registers where
    the rows are unit-stride (:func:`transpose_block`), element by element for the rest (the
    last columns and rows short of a block, and everything elsewhere)."""
    c0 = 0
    full = nrows - nrows % BLOCK_T if s_rows == 1 else 0  # rows the blocks cover
    if full:
        while c0 + BLOCK_T <= n:
            for r0 in range(0, full, BLOCK_T):
                transpose_block(buf, r0 * width + c0, width, p, off + r0 + c0 * s_cols, s_cols)
            c0 += BLOCK_T
    if full < nrows:  # the rows below the blocks, in their columns
        for c in range(c0):
            src = off + c * s_cols
            for r in range(full, nrows):
                buf[r * width + c] = p[src + r * s_rows]
    for c in range(c0, n):
        src = off + c * s_cols
        dst = c
        for r in range(nrows):
            buf[dst] = p[src + r * s_rows]
            dst += width


def _staged(spec, meta, x, y, xt, yt, xo, yo, sx0, sx, sy0, sy, nrows, n):
    """:func:`stage_tiles` of a tiled spec: an input that moves less down the rows than along
    them is staged, read down its contiguous direction once; its tile rows are then contiguous
    on the stack."""
    xp, yp, xs, ys, xstep, ystep = x, y, sx, sy, sx0, sy0
    width = meta[M_TILE_J]
    if staged(sx0, sx):
        _stage(xt, x, xo, sx0, sx, nrows, n, width)
        xp, xo, xs, xstep = xt, 0, 1, width
    if staged(sy0, sy):
        _stage(yt, y, yo, sy0, sy, nrows, n, width)
        yp, yo, ys, ystep = yt, 0, 1, width
    return xp, yp, xo, yo, xs, ys, xstep, ystep


@intrinsic
def stage_tiles(typingctx, spec, meta, x, y, xt, yt, xo, yo, sx0, sx, sy0, sy, nrows, n):
    """Stage the inputs of a tiled task's tile that run across its rows; returns where and
    how its rows read x and y: ``(xp, yp, xo, yo, xs, ys, xstep, ystep)``.

    Per spec: a spec that is not tiled (a flag of its own) gets the operands as they are, in
    IR, and never types or compiles the staging code (:func:`_staged`, compiled into the
    task where the spec is tiled)."""
    if not isinstance(spec, KernelSpecType):
        return None
    sig = types.Tuple((x, y) + (_I64,) * 6)(spec, meta, x, y, xt, yt, xo, yo, sx0, sx, sy0, sy,
                                            nrows, n)

    def codegen(context, builder, signature, args):
        if spec.tiled:
            return context.compile_internal(builder, _staged, signature, args)
        _, _, x, y, _, _, xo, yo, sx0, sx, sy0, sy, _, _ = args
        return context.make_tuple(builder, signature.return_type,
                                  [x, y, xo, yo, sx, sy, sx0, sy0])

    return sig, codegen


def emit_task_span(builder, t, tiled, nti, ntj, tile_i, tile_j, dim_i, dim_j, nblk, block,
                   rows_per_task, rows, si, sj):
    """LLVM IR of :func:`task_span` (i64 values, ``tiled`` an i1): the five i64 results.
    ``si``, ``sj`` (tiled): how many rows and columns short the first band of tiles is,
    which moves every later tile edge by as many."""
    b = builder

    def smin(a, c):
        return _smin(b, a, c)

    def smax(a, c):
        return b.select(b.icmp_signed(">", a, c), a, c)

    out = [cgutils.alloca_once_value(b, _c(0)) for _ in range(5)]  # r, i0, j0, nrows, n
    with b.if_else(tiled) as (then, otherwise):
        with then:
            per = b.mul(nti, ntj)
            r = b.sdiv(t, per)
            # down a column of tiles first: a staged input reads the rest of the same cache
            # lines in the next tile down
            tj = b.sdiv(b.sub(t, b.mul(r, per)), nti)
            ti = b.sub(b.sub(t, b.mul(r, per)), b.mul(tj, nti))
            # band k spans [k * tile - s, (k + 1) * tile - s), clipped to [0, dim): the first
            # band is s short, and a band past the end (the spare one) is empty
            ei, ej = b.sub(b.mul(ti, tile_i), si), b.sub(b.mul(tj, tile_j), sj)
            i0, j0 = smax(ei, _c(0)), smax(ej, _c(0))
            nrows = smax(b.sub(smin(b.add(ei, tile_i), dim_i), i0), _c(0))
            n = smax(b.sub(smin(b.add(ej, tile_j), dim_j), j0), _c(0))
            empty = b.or_(b.icmp_signed("==", nrows, _c(0)), b.icmp_signed("==", n, _c(0)))
            nrows = b.select(empty, _c(0), nrows)
            n = b.select(empty, _c(0), n)
            for slot, v in zip(out, (r, i0, j0, nrows, n)):
                b.store(v, slot)
        with otherwise:
            with b.if_else(b.icmp_signed(">", nblk, _c(1))) as (blocks, short):
                with blocks:  # a block of one long row
                    r = b.sdiv(t, nblk)
                    j0 = b.mul(b.sub(t, b.mul(r, nblk)), block)
                    for slot, v in zip(out, (r, _c(0), j0, _c(1),
                                             b.sub(smin(b.add(j0, block), dim_j), j0))):
                        b.store(v, slot)
                with short:  # whole short rows
                    r = b.mul(t, rows_per_task)
                    for slot, v in zip(out, (r, _c(0), _c(0),
                                             b.sub(smin(b.add(r, rows_per_task), rows), r),
                                             dim_j)):
                        b.store(v, slot)
    return [b.load(slot) for slot in out]


@intrinsic
def task_span(typingctx, t, tiled, nti, ntj, tile_i, tile_j, dim_i, dim_j, nblk, block,
              rows_per_task, rows, si, sj):
    """Where task ``t`` lies in the plan (the inverse of :func:`task_geometry`):
    ``(r, i0, j0, nrows, n)``. Tiled: ``r`` indexes the dims outside the tile, whose corner is
    ``(i0, j0)`` in the two innermost dims (``dim_i`` x ``dim_j``), the tile edges moved by
    ``si`` rows and ``sj`` columns (:func:`tile_shifts`); a tile of the spare band is empty
    (``nrows`` and ``n`` 0). Otherwise ``r`` is the task's first row and ``j0`` where its
    block starts in it (``i0`` is 0). ``nrows`` rows of ``n`` elements follow. Every kernel
    family decodes its tasks here (:func:`emit_task_span`, LLVM IR: a compiled helper cost
    the first call 0.1-0.17 s)."""
    sig = types.UniTuple(_I64, 5)(_I64, types.boolean, *([_I64] * 12))

    def codegen(context, builder, signature, args):
        return context.make_tuple(builder, signature.return_type,
                                  emit_task_span(builder, *args))

    return sig, codegen


#: The boundary tiled tasks move their tile edges to: a cache line, in bytes.
LINE = 64


def emit_line_shift(b, p, off, size, tile):
    """LLVM IR: how many elements of ``size`` bytes from element ``off`` of pointer ``p`` to
    the next ``LINE`` boundary, modulo ``tile`` (an i64 in [0, tile))."""
    addr = b.add(b.ptrtoint(p, _LL64), b.mul(off, _c(size)))
    gap = b.and_(b.sub(_c(0), addr), _c(LINE - 1))
    return b.urem(b.udiv(gap, _c(size)), tile)


@intrinsic
def tile_shifts(typingctx, spec, meta, o, x, y, so, x_runs, y_runs):
    """``(si, sj)`` for :func:`task_span`: where the tile edges move so that out's tile rows
    start on a cache line (``sj``; out unit-stride along them), and a staged input's
    unit-stride runs down the tile rows (``si``; x's where ``x_runs``, else y's where
    ``y_runs``: :func:`staged` and unit-stride down the rows) do. The same for every task
    of a job (data pointers and meta); ``(0, 0)`` where meta's ``M_SHIFT`` bits say a dim
    has no spare band, and for a spec that is not tiled (in IR, nothing compiled).

    NumPy's large arrays start 16 bytes into a page: an 8-element float32 run of a
    transposed input then straddles two lines in every other tile, and each 512-element row
    of out begins and ends mid-line. On 4096^2 float32 ``X.T - Y`` (2 threads), arrays
    starting on a line took 8.5-9.1 ms against 10.4-12.2 ms for NumPy's placement
    (interleaved, shuffled rounds)."""
    if not (isinstance(spec, KernelSpecType) and isinstance(o, types.CPointer)):
        return None
    sig = types.UniTuple(_I64, 2)(spec, meta, o, x, y, so, types.boolean, types.boolean)

    def codegen(context, builder, signature, args):
        b = builder
        if not spec.tiled:
            return context.make_tuple(b, signature.return_type, [_c(0), _c(0)])
        _, meta, o, x, y, so, x_runs, y_runs = args
        word = _words(b, meta)

        def size(k):
            return context.get_abi_sizeof(context.get_data_type(signature.args[k].dtype))

        shifts = emit_tile_shifts(
            b, word(M_SHIFT), word(M_TILE_I), word(M_TILE_J), (o, word(M_OFF_O), size(2), so),
            [(x, word(M_OFF_X), size(3), x_runs), (y, word(M_OFF_Y), size(4), y_runs)])
        return context.make_tuple(b, signature.return_type, shifts)

    return sig, codegen


def emit_tile_shifts(b, bits, tile_i, tile_j, out, inputs):
    """LLVM IR of :func:`tile_shifts` for any kernel family: ``[si, sj]`` from the ``M_SHIFT``
    ``bits``, ``out`` as ``(pointer, element offset, size, stride along the tile rows)`` and
    the inputs that may be staged as ``(pointer, offset, size, whether it is staged from
    unit-stride runs down the rows: an i1)``, the first such one deciding ``si``."""
    def on(bit):
        return b.icmp_signed("!=", b.and_(bits, _c(bit)), _c(0))

    p, off, size, s = out
    sj = b.select(b.and_(on(2), b.icmp_signed("==", s, _c(1))),
                  emit_line_shift(b, p, off, size, tile_j), _c(0))
    si = _c(0)
    for p, off, size, runs in reversed(inputs):
        si = b.select(runs, emit_line_shift(b, p, off, size, tile_i), si)
    return [b.select(on(1), si, _c(0)), sj]


@inner
def _task(spec, po, px, py, pmeta, t):
    """Task ``t``: a run of rows (or one tile's rows), with one ``row`` call site.

    One call site keeps the compiled code small: every inlined copy of the four row loops is
    vectorised separately, and compile time (which a new signature pays) grows with them.
    Returns 0; an exception raised by the scalar code makes Numba's calling convention return
    an error status instead, which the drivers collect (see :func:`_call_task`).
    """
    o, x, y = pointers(spec, po, px, py)
    meta = as_pointer(pmeta, _I64)
    idx = stack_words()  # this task's odometer (nd - 1 words used)
    nd = meta[M_ND]
    var = meta[M_VARIANT]
    so, sx, sy = strides(meta, nd, nd - 1)
    # one step along dim nd - 2 (rows of a tile, or of a matrix, walk it)
    so0, sx0, sy0 = strides(meta, nd, nd - 2)
    tiled = var == V_TILED  # one TILE_I x TILE_J tile of the two innermost dims of outer index r
    si, sj = tile_shifts(spec, meta, o, x, y, so, sx0 == 1 and staged(sx0, sx),
                         sy0 == 1 and staged(sy0, sy))
    r, i0, j0, nrows, n = task_span(
        t, tiled, meta[M_NTI], meta[M_NTJ], meta[M_TILE_I], meta[M_TILE_J],
        dim(meta, nd - 2 if nd > 2 else 0), dim(meta, nd - 1), meta[M_NBLK], meta[M_BLOCK],
        meta[M_ROWS_PER_TASK], meta[M_ROWS], si, sj)
    # Unravel the first row (or the tile's outer index) once, with div/mod; the rows after it
    # are walked: along one dim in a tile, with the odometer otherwise.
    oo, xo, yo = unravel(meta, nd, nd - 2 if tiled else nd - 1, r, idx)
    oo += i0 * so0 + j0 * so
    xo += i0 * sx0 + j0 * sx
    yo += i0 * sy0 + j0 * sy
    xt = stack_tile(x)  # the task's tile (or broadcast) buffers
    yt = stack_tile(y)
    # where the rows read x and y (the operands, or their staged tiles), and how they step
    xp, yp, xo, yo, xs, ys, xstep, ystep = stage_tiles(
        spec, meta, x, y, xt, yt, xo, yo, sx0, sx, sy0, sy, nrows, n)
    walk = tiled or nd == 2
    for _ in range(nrows):
        # a tile buffer not holding a staged input holds a broadcast one's value
        row(spec, o, xp, yp, oo, xo, yo, n, so, xs, ys, xt, yt)
        prefetch_next_tile(spec, xp, xt, xo, xstep, xs, nrows, n)
        prefetch_next_tile(spec, yp, yt, yo, ystep, ys, nrows, n)
        if walk:  # rows along one dim (matrices, tiles): no odometer
            oo += so0
            xo += xstep
            yo += ystep
        else:
            oo, xo, yo = odometer_step(meta, nd, idx, oo, xo, yo)
    if streams(spec):
        store_fence()
    return 0


class _Emit:
    """LLVM IR for the drivers' checks and the row walks, read like the Python it replaces:
    words of ``meta``, words at an offset from an object, and ``leave`` (store a result, jump
    to the end)."""

    def __init__(self, builder, meta):
        self.b = builder
        # meta: its address (i64) or an int64 pointer
        self.meta = meta if isinstance(meta.type, ir.PointerType) \
            else builder.inttoptr(meta, _LL64.as_pointer())
        # (status, out, x, y) results, in the entry block (registers after mem2reg)
        self.slots = [cgutils.alloca_once_value(builder, _c(0)) for _ in range(4)]
        self._done = None
        self.word = _words(builder, self.meta)  # ``meta[i]`` (i a Python int or an i64)

    @property
    def done(self):
        """The exit block (made on first use: an unused, empty block is invalid IR)."""
        if self._done is None:
            self._done = self.b.append_basic_block("emit.done")
        return self._done

    def at(self, addr, off, ty=_LL64):
        """The ``ty`` word at ``addr + off``, as an i64 (sign-extended)."""
        v = self.b.load(self.b.inttoptr(self.b.add(addr, off), ty.as_pointer()))
        return v if ty is _LL64 else self.b.sext(v, _LL64)

    def cmp(self, op, a, b):
        return self.b.icmp_signed(op, a, b if isinstance(b, ir.Value) else _c(b))

    def leave(self, status, ptrs=None):
        """Return ``(status, *ptrs)`` (``ptrs`` defaults to the zeros already stored)."""
        self.b.store(_c(status), self.slots[0])
        for slot, p in zip(self.slots[1:], ptrs or ()):
            self.b.store(p, slot)
        self.b.branch(self.done)

    def header_is(self, obj, h, k):
        """(i1, next k): whether the object at ``obj`` is the ndarray the operand block at
        ``meta[k]`` of the header checks (offsets at ``meta[h]``) describes: type, descr, nd,
        dims, strides. The type is compared first: nothing else is read from an object of
        another type."""
        b, word = self.b, self.word
        n = word(b.add(k, _c(2)))
        nxt = b.add(k, b.add(_c(3), b.mul(_c(2), n)))
        good = cgutils.alloca_once_value(b, ir.Constant(ir.IntType(1), 0))
        with b.if_then(self.cmp("==", self.at(obj, word(h)), word(k))):
            same = b.and_(self.cmp("==", self.at(obj, word(b.add(h, _c(4)))),
                                   word(b.add(k, _c(1)))),
                          self.cmp("==", self.at(obj, word(b.add(h, _c(1))), _LL32), n))
            with b.if_then(same):
                b.store(ir.Constant(ir.IntType(1), 1), good)
                dims = b.inttoptr(self.at(obj, word(b.add(h, _c(2)))), _LL64.as_pointer())
                strides = b.inttoptr(self.at(obj, word(b.add(h, _c(3)))), _LL64.as_pointer())
                with cgutils.for_range(b, n) as loop:  # no iteration (no read) when n == 0
                    i = loop.index
                    differ = b.or_(
                        self.cmp("!=", b.load(b.gep(dims, [i])),
                                 word(b.add(k, b.add(_c(3), i)))),
                        self.cmp("!=", b.load(b.gep(strides, [i])),
                                 word(b.add(k, b.add(_c(3), b.add(n, i))))))
                    with b.if_then(differ):
                        b.store(ir.Constant(ir.IntType(1), 0), good)
        return b.load(good), nxt


@intrinsic
def resolve(typingctx, oo, ox, oy, pmeta):
    """(status, out, x, y data addresses): the checks every launch makes before writing.

    Written as LLVM IR (:class:`_Emit`) rather than as a compiled Python helper: Numba took
    0.4-0.8 s to type and compile the two helpers this replaces, most of the drivers' compile,
    which the very first call on an empty cache waits for.
    """
    sig = types.UniTuple(_I64, 4)(_I64, _I64, _I64, _I64)

    def codegen(context, builder, signature, args):
        oo, ox, oy, pmeta = args
        e = _Emit(builder, pmeta)
        b, word, cmp = builder, e.word, e.cmp
        h = word(M_HEADERS)
        # objects passed by identity (dispatch's memo): first, are they the arrays?
        with b.if_then(cmp(">=", h, 0)):
            ok = cgutils.alloca_once_value(b, ir.Constant(ir.IntType(1), 1))
            k = cgutils.alloca_once_value(b, b.add(h, _c(5)))
            for obj in (oo, ox, oy):
                with b.if_then(b.load(ok)):
                    good, nxt = e.header_is(obj, h, b.load(k))
                    b.store(good, ok)
                    b.store(nxt, k)
            with b.if_then(b.not_(b.load(ok))):
                e.leave(MISMATCH)
        off = word(M_DATA_OFF)
        ptrs = [cgutils.alloca_once_value(b, o) for o in (oo, ox, oy)]
        with b.if_then(cmp(">=", off, 0)):  # read the data pointers from the objects
            for slot, o in zip(ptrs, (oo, ox, oy)):
                b.store(e.at(o, off), slot)
        po, px, py = (b.load(p) for p in ptrs)
        found = (po, px, py)
        misaligned = b.or_(b.or_(cmp("!=", b.srem(po, word(M_ALIGN)), 0),
                                 cmp("!=", b.srem(px, word(M_ALIGN + 1)), 0)),
                           cmp("!=", b.srem(py, word(M_ALIGN + 2)), 0))
        with b.if_then(misaligned):
            e.leave(MISALIGNED, found)
        # out= made read-only since the call was planned (the fast path does not ask Python)
        fl = word(M_FLAGS_OFF)
        with b.if_then(cmp(">=", fl, 0)):
            with b.if_then(cmp("==", b.and_(e.at(oo, fl, _LL32), _c(WRITEABLE)), 0)):
                e.leave(READ_ONLY, found)
        # NumPy's answer for overlapping operands is the one computed from the inputs as they
        # were: an exact alias (same pointer, shape and strides) runs in place, since each
        # element is read before it is written; any other overlap must read from a copy.
        with b.if_then(cmp("!=", word(M_CHECK), 0)):
            o_lo, o_hi = b.add(po, word(M_LO)), b.add(po, word(M_HI))
            for j, p, same in ((1, px, M_SAME_X), (2, py, M_SAME_Y)):
                # byte extents [p + lo, p + hi) of out and this input intersect
                meet = b.and_(cmp("<", o_lo, b.add(p, word(M_HI + j))),
                              cmp("<", b.add(p, word(M_LO + j)), o_hi))
                alias = b.and_(cmp("==", po, p), cmp("!=", word(same), 0))
                with b.if_then(b.and_(meet, b.not_(alias))):
                    e.leave(OVERLAP, found)
        e.leave(OK, found)
        b.position_at_end(e.done)
        return context.make_tuple(b, signature.return_type, [b.load(s) for s in e.slots])

    return sig, codegen


#: ``_task`` (out, x, y, meta, t) of the built-in ops.
_call_task = pool.call_binary


def _drive(task, oo, ox, oy, pmeta):
    """Check the call (:func:`resolve`), then run all its tasks; a status, never a silent
    failure. ``prange`` runs the tasks in parallel where this is compiled with
    ``parallel=True`` and is a plain loop elsewhere, so both drivers below are this code."""
    status, po, px, py = resolve(oo, ox, oy, pmeta)
    if status != OK:
        return status
    meta = as_pointer(pmeta, _I64)
    fp = job_flags(stack_words())  # on this frame, which outlives every task
    failed = 0
    for t in prange(meta[M_NTASKS]):
        failed += note_flags(fp, _call_task(task, po, px, py, pmeta, t))
    return finish(failed, pool.load(fp, 0))


@register_jitable
def job_flags(words):
    """The address of ``words[0]``, zeroed: where a job's tasks OR the floating-point flags
    they raised (a parallel loop reduces sums, not ors). ``words`` must be the driver's own
    :func:`stack_words`, whose frame outlives every task (a callee's would be gone on
    return)."""
    fp = address_of(words)
    pool.store(fp, 0, 0)
    return fp


@register_jitable
def note_flags(fp, r):
    """A task caller's result ``r``: its flags ORed into the word at ``fp`` (atomically, and
    only when there are any); returns 1 if the task failed."""
    if r > 1:
        pool.fetch_or(fp, 0, r >> 1)
    return r & 1


@register_jitable
def finish(failed, fp):
    """A job's status: TASK_FAILED, else OK or ``FP_RAISED | fp``."""
    if failed:
        return TASK_FAILED
    return FP_RAISED | fp if fp else OK


@register_jitable
def finish_job(r):
    """The status of :func:`jitops.cpu.pool.run_job`'s result."""
    return finish(r & ((1 << pool.JOB_FP_SHIFT) - 1), r >> pool.JOB_FP_SHIFT)


def renamed(fn, name: str):
    """``fn`` as a distinct Python function called ``name``: the same code compiled (and
    cached on disk) under its own name, e.g. once with ``parallel=True`` and once without."""
    names = {"co_name": name}
    if hasattr(fn.__code__, "co_qualname"):  # Python 3.11+
        names["co_qualname"] = name
    code = fn.__code__.replace(**names)
    new = FunctionType(code, fn.__globals__, name)
    new.__qualname__, new.__doc__ = name, fn.__doc__
    return new


_kernel_parallel = njit(parallel=True, **ENTRY)(renamed(_drive, "_kernel_parallel"))
_kernel_serial = driver(renamed(_drive, "_kernel_serial"))


@driver
def _kernel_pooled(task, oo, ox, oy, pmeta, ctl, workers):
    """The checks of :func:`_drive`, then the tasks on jitops' own thread pool
    (jitops.cpu.pool): this thread and ``workers`` pool workers."""
    status, po, px, py = resolve(oo, ox, oy, pmeta)
    if status != OK:
        return status
    meta = as_pointer(pmeta, _I64)
    return finish_job(pool.run_job(ctl, workers, pool.KIND_BINARY, task, po, px, py, pmeta,
                                   meta[M_NTASKS], meta[M_VARIANT] != V_TILED))


KERNELS = {"parallel": _kernel_parallel, "serial": _kernel_serial, "pooled": _kernel_pooled,
           "task": _task}
for _k in KERNELS.values():  # the on-disk cache (off with JITOPS_CACHE=0 or nowhere to write)
    cache.enable(_k)

_TASKS: dict = {}


def task_address(spec) -> int:
    """Address of ``_task`` compiled for ``spec`` (compiled, or loaded from disk, once)."""
    addr = _TASKS.get(spec)
    if addr is None:
        sig = (spec.numba_type,) + (types.int64,) * 5
        registries.compile_with(lambda: _task.compile(sig))
        cres = _task.overloads[sig]
        addr = _TASKS[spec] = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return addr


def task_geometry(plan: Plan, block: int | None = None, tile: tuple[int, int] | None = None,
                  threads: int | None = None) -> tuple[int, ...]:
    """How a plan's iteration space is cut into tasks (every kernel family uses this):
    ``(block, ntasks, rows_per_task, nblk, rows, tile_i, tile_j, nti, ntj, shift)``;
    ``threads`` is the count the tasks are balanced for (default: what a call from here would
    use).

    Tiled, a dim longer than its tile gets one band of tiles more than it needs, so that its
    tile edges can move onto the operands' cache lines (``shift``: bit 0 rows, bit 1 columns;
    :func:`tile_shifts`, at run time, from the data pointers); with the edges unmoved, the
    last band is empty."""
    given = block is not None
    nthreads = 1
    if block is None:
        block = config.BLOCK
        if plan.size >= config.PARALLEL_THRESHOLD:
            # big tasks amortise their setup; but keep at least ~4 per thread for balance
            nthreads = parallel.num_threads() if threads is None else threads
            per_thread = -(-plan.size // (4 * nthreads))
            block = min(config.BLOCK, max(config.BLOCK_MIN, per_thread))
    ti, tj = tile or config.TILE
    tj = max(1, min(tj, TILE_MAX))
    ti = max(1, min(ti, TILE_MAX // tj))  # a staged tile must fit the task's stack words
    shape = plan.iter_shape
    if len(shape) > MAX_DIMS:  # NumPy itself stops at 64 dims; the task odometers hold that many
        raise ValueError(f"jitops: at most {MAX_DIMS} dimensions are supported, got {len(shape)}")
    inner = shape[-1]
    rows = 1
    for n in shape[:-1]:
        rows *= n
    nti = ntj = shift = 0
    if plan.variant == TILED:
        if config.TILE_ALIGN:
            shift = int(shape[-2] > ti) | int(inner > tj) << 1
        nti, ntj = -(-shape[-2] // ti) + (shift & 1), -(-inner // tj) + (shift >> 1)
        nblk, rows_per_task = 1, 1
        ntasks = (rows // shape[-2]) * nti * ntj
    else:
        block, ntasks, rows_per_task, nblk = split_rows(inner, rows, block, given, nthreads,
                                                        config.BLOCK_MIN)
    return block, ntasks, rows_per_task, nblk, rows, ti, tj, nti, ntj, shift


@register_jitable
def split_rows(inner: int, rows: int, block: int, given: bool, nthreads: int,
               block_min: int) -> tuple[int, int, int, int]:
    """``rows`` rows of ``inner`` elements cut into tasks: ``(block, ntasks, rows_per_task,
    nblk)``. Python (:func:`task_geometry`) and the compiled shape-class entry
    (:mod:`jitops.cpu.shapeclass`) both call this one definition."""
    if inner >= 2 * block:
        nblk = -(-inner // block)
        if not given:
            # blocks of (nearly) equal size, a whole number of them per thread where there are
            # few: 1e6 elements in blocks of 65536 left one thread 8 blocks (524,288 elements)
            # and the other 7 and a stub, a job 5% longer than an even split
            if rows == 1 and nblk < 16 * nthreads and nblk % nthreads:
                up = nblk + nthreads - nblk % nthreads
                down = nblk - nblk % nthreads
                if inner // up >= block_min:
                    nblk = up
                elif down >= nthreads:
                    nblk = down
            block = -(-inner // nblk)
            block = -(-block // BLOCK_ALIGN) * BLOCK_ALIGN
            nblk = -(-inner // block)
        return block, rows * nblk, 1, nblk
    rows_per_task = max(1, block // max(inner, 1))
    return block, (-(-rows // rows_per_task) if inner else 0), rows_per_task, 1


def read_in_full(plan: Plan) -> list[bool]:
    """Per input of ``plan``: whether it is read in full (broadcast along no dim)."""
    return [0 not in st for st in plan.iter_strides[1:]]


def should_stream(plan: Plan, out: np.dtype, inputs: tuple[np.dtype, ...],
                  staged_tiles: bool = False) -> bool:
    """Whether a call writes its output with non-temporal stores (jitops.cpu.stream).

    Where the data it moves -- the output and every input read in full (no broadcast dim) --
    is at least ``config.STREAM_BYTES`` (the last-level cache): measured, streaming gains
    1.15-1.45x there (1e7 ``x - y``, ``x - 3.0``, pdpd and row broadcasts), and 1.05-1.35x
    where both inputs are broadcast (the outer difference ``X(4096, 1) - Y(1, 4096)``, which
    only writes: four paired runs, 1.05-1.28x PyTorch streamed against 0.94-0.97x; an early
    version of the streaming loop had measured it 15% slower, and so did a later phase: such
    write-only launches time both kinds of store on their first calls and keep the faster,
    jitops.cpu.backend.StoreChoice); a cache-resident output is better left in the cache for
    its reader.
    Rows must be unit-stride and the dtype one the vectoriser stores as whole vectors (not
    complex, whose elements are pairs); x86-64 only.

    ``staged_tiles``: the caller's tiled tasks stage an input that runs across the tile's
    rows into a contiguous stack tile (the built-in kernels' :func:`stage_tiles`, the user
    ops' first ``jitops.cpu.nary.STAGED_INPUTS`` inputs), so such an input counts as
    unit-stride. Each tile row of out
    is then a contiguous run of ``TILE_J`` elements, streamed like any row: measured on
    4096^2 ``X.T - Y``, out= (one process each way, alternated): float32 21.4-24.4 ms
    against 24.4-27.9 ms with ordinary stores, float64 41-43 against 46-48, int16 9.8-12.0
    against 12.2-12.5, float16 13-15 against 16-17.
    """
    rows = plan.iter_strides
    tiled = plan.variant == TILED
    if not (STREAM_AVAILABLE and config.STREAM_BYTES > 0 and out.kind != "c"
            and (staged_tiles or not tiled) and rows[0][-1] == 1
            and all(st[-1] in (0, 1) or (tiled and staged(st[-2], st[-1]))
                    for st in rows[1:])):
        return False
    return plan.size * bytes_per_element(plan, out, inputs) >= config.STREAM_BYTES


def bytes_per_element(plan: Plan, out: np.dtype, inputs: tuple[np.dtype, ...]) -> int:
    """Bytes a call of ``plan`` moves per output element: its output and every input it reads
    in full (a broadcast input stays in the caches)."""
    return out.itemsize + sum(dt.itemsize for dt, whole in zip(inputs, read_in_full(plan))
                              if whole)


def runs_parallel(plan: Plan, out: np.dtype, inputs: tuple[np.dtype, ...]) -> bool:
    """Whether a call of ``plan`` runs as a parallel job (``config.parallel_size``): below,
    one serial kernel call costs less than a launch."""
    return plan.size >= config.parallel_size(bytes_per_element(plan, out, inputs))


def build_meta(plan: Plan, alignments=(1, 1, 1), extents=None, same=(False, False),
               data_offset: int | None = None, block: int | None = None,
               tile: tuple[int, int] | None = None, threads: int | None = None
               ) -> np.ndarray:
    """The int64 ``meta`` array a kernel reads: plan geometry, task decomposition and checks.

    ``extents`` are the byte extents of (out, x, y) when ``out=`` was given and overlap must be
    checked, else None. ``same`` says whether x, y have out's exact shape and strides.
    ``data_offset`` defaults to :data:`DATA_OFFSET` (pass -1 to hand the kernel data addresses).
    """
    block, ntasks, rows_per_task, nblk, rows, ti, tj, nti, ntj, shift = task_geometry(
        plan, block, tile, threads)
    shape = plan.iter_shape
    check = extents is not None
    lo = [e[0] for e in extents] if check else [0, 0, 0]
    hi = [e[1] for e in extents] if check else [0, 0, 0]
    head = [len(shape), VARIANT_CODES[plan.variant], block, ntasks, rows_per_task, nblk, rows,
            *plan.iter_offsets, DATA_OFFSET if data_offset is None else data_offset,
            *alignments, int(check), *lo, *hi, int(same[0]), int(same[1]), ti, tj, nti, ntj,
            FLAGS_OFFSET if data_offset is None else -1, -1, shift]
    assert len(head) == HDR
    return np.array(head + list(shape) + [s for st in plan.iter_strides for s in st], np.int64)


def header_checks(meta: np.ndarray, arrays) -> np.ndarray | None:
    """``meta`` with header checks for ``arrays`` (out, x, y) appended: the kernel then takes
    the operands by identity only if each object is an ndarray of exactly this type, dtype
    object, shape and strides (else MISMATCH, nothing written). None where the layout of the
    ndarray object is not verified (:data:`HEADER_OFFSETS`).

    The dtype objects are compared by address: the caller must keep them alive as long as it
    uses the result (an address reused by another dtype would pass).
    """
    if HEADER_OFFSETS is None or meta[M_DATA_OFF] < 0:
        return None
    block = list(HEADER_OFFSETS)
    for a in arrays:
        block += [id(type(a)), id(a.dtype), a.ndim, *a.shape, *a.strides]
    out = np.concatenate([meta, np.array(block, np.int64)])
    out[M_HEADERS] = len(meta)
    return out
