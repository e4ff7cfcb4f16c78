"""Numba CPU kernels of the built-in ops: one loop nest for every op and dtype, specialised
through a KernelSpec.

The planner's coalesced space is cut into tasks (:func:`task_geometry`): a block of one long
row, several short rows, or a ``TILE_I x TILE_J`` tile where operands disagree on layout (an
input running across the rows is staged into a stack tile first). A row runs the vectorised
loop where out is unit-stride and each input unit-stride or constant (NumPy's
``BINARY_LOOP_FAST`` cases; non-temporal stores beyond the last-level cache), else the
strided loop (:func:`row`). A driver (:func:`driver_table`: parallel, serial, pooled) takes
the task's address, the three operand objects' addresses and the meta's address
(jitops.cpu.kernels.layout.META), makes the checks (:func:`emit_checks`) and runs the tasks: a
status, never a silent failure. One compiled task per KernelSpec; rank, layout and writeability
never multiply signatures.
"""

from __future__ import annotations

import ctypes
import hashlib
from types import FunctionType

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable

from ...core import catalog, config
from ...core.plan import CONTIG, SCALAR_X, SCALAR_Y, STRIDED, TILED, Plan
from ..compile import cache, hooks, registries
from ..compile.jit import ENTRY, driver, inner
from ..threads import parallel, pool
from . import layout
from . import lean as _lean  # (it imports power32: pow_f32's CPU implementation)
from .layout import META, OPERAND
from .spec import INLINED, KernelSpecType, address_of, as_pointer, element, pointers, streams
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

#: The built-in kernels' meta (jitops.cpu.kernels.layout.META) has three operands: out, x, y.
NOPS = 3
#: Where their meta's shape starts.
SHAPE = layout.shape_at(NOPS)
#: Most elements of one tile (TILE_I x TILE_J): what a task's stack holds per staged input.
TILE_MAX = 4096

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
    return _words(b, meta)(b.add(_c(SHAPE), d))


def _emit_strides(b, meta, nd, d):
    """Element strides of out, x and y along iteration dim ``d``: LLVM IR."""
    word = _words(b, meta)
    return [word(b.add(b.add(_c(SHAPE), b.mul(_c(k), nd)), d)) for k in (1, 2, 3)]


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
        offs = [cgutils.alloca_once_value(b, word(k)) for k in range(META.SIZE, META.SIZE + NOPS)]
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
#: Offsets in an ndarray object the kernels read (jitops.cpu.compile.hooks, ``ndarray_header``): the
#: data pointer (-1: the caller resolves data addresses), the flags (-1: not read), and the
#: type, rank, shape, strides and dtype words the memo's header checks compare (None: no memo).
_HEADER = hooks.header_offsets() if hooks.ok("ndarray_header") else None
DATA_OFFSET = _HEADER[0] if _HEADER else -1
FLAGS_OFFSET = _HEADER[1] if _HEADER else -1
HEADER_OFFSETS = _HEADER[2] if _HEADER else None
#: NumPy's NPY_ARRAY_WRITEABLE flag bit.
WRITEABLE = 0x0400
_WORD_AT = ctypes.c_ssize_t.from_address


def data_address(a: np.ndarray) -> int:
    """The address of ndarray ``a``'s data: its header's data word (``ndarray_header``: 0.1 µs),
    else NumPy's ``__array_interface__`` (0.9 µs)."""
    if DATA_OFFSET >= 0:
        return _WORD_AT(id(a) + DATA_OFFSET).value
    return a.__array_interface__["data"][0]



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
    """LLVM IR: load the word at ``p``; a complex one as one unaligned ``<2 x T>`` vector, so that
    LLVM folds the two parts' arithmetic into one packed op as NumPy's strided complex loop does
    (Numba's complex struct loads as two scalars).
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


def emit_chunked_stores(b, n, chunk, h, stream: bool, chunk_at, name: str,
                        pick=None, stage=None) -> None:
    """LLVM IR: a row's elements ``[0, n)`` in chunks of at most ``chunk``, cut at the
    streaming head ``h``: ordinary stores before it, non-temporal ones from it where the
    spec streams (``h == n``: nothing streams). ``stage(j, m)``, where given, runs first in
    each chunk (copying the inputs out aliases into their buffers: :func:`emit_alias_copies`);
    ``chunk_at(j)`` gives the chunk starting at element ``j``: ``(value_at, out)``,
    ``value_at(i)`` the value of its element ``i`` and ``out`` where its output starts;
    ``pick(j, m)``, where given: ``(calm, value_at)``, a test of the chunk and the value of
    its element ``i`` where it holds (:func:`_emit_pick`). The built-in rows (:func:`row`)
    and the user ops' rows (jitops.cpu.kernels.nary) share it."""
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
    if stage is not None:
        stage(jv, m)
    value_at, out = chunk_at(jv)

    def stores(value_at):
        _emit_loop(b, _c(0), hs, lambda i: b.store(value_at(i), b.gep(out, [i])))
        if stream:
            _emit_loop(b, hs, m, lambda i: emit_stream_put(b, value_at(i), b.gep(out, [i])))

    if pick is None:
        stores(value_at)
    else:
        calm, calm_at = pick(jv, m)
        with b.if_else(calm) as (lean, general):
            with lean:
                stores(calm_at)
            with general:
                stores(value_at)
    b.store(b.add(jv, m), j)
    b.branch(cond)
    b.position_at_end(after)


def emit_alias_copies(b, inputs, jv, m) -> None:
    """LLVM IR: where an input of a unit-stride row is out itself (``out = x`` in place:
    ``(aliased, source, buffer)`` per input, an i1 and two pointers at the row's start), its
    chunk ``[jv, jv + m)`` copied into its stack buffer, which the chunk then reads. LLVM
    vectorises a loop only where it can tell the store from every load: a row that out
    overlaps fails its run-time check and runs element by element; the buffer never
    overlaps out, and the copy is one more pass over L1."""
    for aliased, source, buffer in inputs:
        with b.if_then(aliased):
            src = b.gep(source, [jv])
            _emit_loop(b, _c(0), m, lambda i, src=src, buffer=buffer: b.store(
                b.load(b.gep(src, [i])), b.gep(buffer, [i])))


def is_alias(b, out, at_out, p, at):
    """LLVM IR: whether input row ``p[at]`` starts where out's row ``out[at_out]`` does."""
    return b.icmp_unsigned("==", b.ptrtoint(b.gep(p, [at]), _LL64),
                           b.ptrtoint(b.gep(out, [at_out]), _LL64))


def _emit_pick(b, calm_at, lean_at, xq, yq, m):
    """LLVM IR: ``(calm, value_at)``: whether every element of a chunk of ``m`` at ``xq``/
    ``yq`` passes ``calm_at``, and the lean element there. The passing elements are counted
    (a sum LLVM vectorises: an ``and`` of the tests it left scalar, 7x slower)."""
    count = cgutils.alloca_once_value(b, _c(0))
    _emit_loop(b, _c(0), m, lambda i: b.store(b.add(b.load(count), b.zext(
        calm_at(b.gep(xq, [i]), b.gep(yq, [i])), _LL64)), count))
    return (b.icmp_signed("==", b.load(count), m),
            lambda i: lean_at(b.gep(xq, [i]), b.gep(yq, [i])))


def _emit_staged_strided(b, element_at, o, x, y, oo, xo, yo, n, so, sx, sy, xb, yb,
                         pick=None):
    """LLVM IR: a strided row of an element too large to run well unvectorised
    (jitops.cpu.kernels.spec.INLINED), in ``CHUNK``-element pieces: both inputs gathered into
    the stack buffers, the element run over them in place (a loop that vectorises, so the
    values are those of a contiguous row; ``pick`` as :func:`emit_chunked_stores`'s), the
    results scattered to out. One word type throughout."""
    with cgutils.for_range_slice(b, _c(0), n, _c(CHUNK), inc=True) as (jv, _):
        m = _smin(b, b.sub(n, jv), _c(CHUNK))
        for p, off, step, buf in ((x, xo, sx, xb), (y, yo, sy, yb)):
            _emit_loop(b, _c(0), m, lambda i, p=p, off=off, step=step, buf=buf: b.store(
                b.load(b.gep(p, [b.add(off, b.mul(b.add(jv, i), step))])), b.gep(buf, [i])))

        def run(value_at):
            _emit_loop(b, _c(0), m, lambda i: b.store(value_at(i), b.gep(xb, [i])))

        def general(i):
            return element_at(b.gep(xb, [i]), b.gep(yb, [i]))

        if pick is None:
            run(general)
        else:
            calm, lean = pick(xb, yb, m)
            with b.if_else(calm) as (on_lean, on_general):
                with on_lean:
                    run(lean)
                with on_general:
                    run(general)
        _emit_loop(b, _c(0), m, lambda i: b.store(
            b.load(b.gep(xb, [i])), b.gep(o, [b.add(oo, b.mul(b.add(jv, i), so))])))


def _chunk_reader(b, element_at, o, oo, xs, ys):
    """``(inputs_at, chunk_at)`` of a chunked unit-stride row (:func:`emit_chunked_stores`):
    each input ``(pointer, offset, buffer, held)`` read from its stack buffer where ``held``
    (an i1), else where it lies; out from ``o[oo]``."""
    (x, xo, xb, x_held), (y, yo, yb, y_held) = xs, ys

    def inputs_at(jv):
        return (b.select(x_held, xb, b.gep(x, [b.add(xo, jv)])),
                b.select(y_held, yb, b.gep(y, [b.add(yo, jv)])))

    def chunk_at(jv):
        xq, yq = inputs_at(jv)
        return (lambda i: element_at(b.gep(xq, [i]), b.gep(yq, [i])),
                b.gep(o, [b.add(oo, jv)]))

    return inputs_at, chunk_at


def _in_place_row(context, module, impl, lean_fns, inline_calls: bool, keep: bool,
                  direct: tuple[bool, bool], one_y: bool, sp_ty, argtys):
    """The function (one per module and signature, in Numba's calling convention:
    ``argtys``, the Numba types of ``o, x, y, oo, xo, yo, n, xb, yb`` and of the flags
    ``x_const, y_const, x_alias, y_alias`` as words) that runs a unit-stride row whose out is
    one of its inputs (``out=x``): it returns 1 where it ran the row, 0 where it has no loop
    for it (the row's own loops then read the input in place); an element's error
    propagates as from any compiled call.

    Out as the input of its type (``direct``: x, y) is read where it is stored, the other
    input constant (``x *= c``, ``c - y``: elements without a lean form) or read in place
    (``x += y``): the same address in the loop, which LLVM vectorises. Any other alias with
    neither input constant (both inputs, another type) is copied into its stack buffer a
    chunk at a time (:func:`emit_alias_copies`). Never streamed: each line is read just
    before it is written. A function of its own (``noinline``): in the row's function these
    loops changed how LLVM optimised the others (a scalar's heaviside slowed). The lean form
    and the element are those the row's ordinary loops use (``keep``: an element whose lean
    form keeps exponents takes the element itself there); an op whose y is one element
    broadcast (``one_y``) has only ``x *= c``."""
    conv = context.call_conv
    fnty = conv.get_function_type(types.int64, argtys)
    name = "jitops.row_in_place." + hashlib.sha256(str(fnty).encode()).hexdigest()[:16]
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    o, x, y, oo, xo, yo, n, xb, yb, *flags = conv.get_arguments(fn)
    x_const, y_const, x_alias, y_alias = (b.icmp_signed("!=", f, _c(0)) for f in flags)
    sp = ir.Constant(sp_ty, None)  # (the spec is a type, its value unused)

    def ran(yes: bool):
        conv.return_value(b, _c(int(yes)))

    def call(f, args):
        block, start = b.block, len(b.block.instructions)
        v = f(b, args)
        if inline_calls:
            for ins in block.instructions[start:]:
                if isinstance(ins, ir.CallInstr):
                    ins.attributes.add("alwaysinline")
        return v

    def element_at(pa, pb):
        return call(impl, (sp, b.load(pa), b.load(pb)))

    pick = None
    if lean_fns is not None and not keep:
        def pick(xq, yq, m):
            return _emit_pick(
                b, lambda pa, pb: call(lean_fns["calm"], (b.load(pa), b.load(pb))),
                lambda pa, pb: call(lean_fns["core"], (b.load(pa), b.load(pb))), xq, yq, m)

    # out is the input read along the row, the other constant
    for aliased, other_const, cp, coff, c_is_x, same in (
            (x_alias, y_const, y, yo, False, direct[0]), (y_alias, x_const, x, xo, True,
                                                          direct[1])):
        if not same or lean_fns is not None:
            continue
        with b.if_then(b.and_(aliased, other_const)):
            c = b.load(b.gep(cp, [coff]))
            oq = b.gep(o, [oo])

            def value(i, c=c, oq=oq, c_is_x=c_is_x):
                v = b.load(b.gep(oq, [i]))
                return call(impl, (sp, c, v) if c_is_x else (sp, v, c))

            _emit_loop(b, _c(0), n, lambda i, value=value, oq=oq: b.store(
                value(i), b.gep(oq, [i])))
            ran(True)
    if one_y:
        ran(False)
        return fn
    # out is one input, the other read in place
    x_held, y_held = b.or_(x_const, x_alias), b.or_(y_const, y_alias)
    for aliased, other_held, in_x in ((x_alias, y_held, True), (y_alias, x_held, False)):
        if not direct[0 if in_x else 1]:
            continue
        with b.if_then(b.and_(aliased, b.not_(other_held))):
            def operands(jv, in_x=in_x):
                oq = b.gep(o, [b.add(oo, jv)])
                return (oq, b.gep(y, [b.add(yo, jv)])) if in_x else \
                    (b.gep(x, [b.add(xo, jv)]), oq)

            def at(jv, operands=operands, in_x=in_x):
                xq, yq = operands(jv)
                return lambda i: element_at(b.gep(xq, [i]), b.gep(yq, [i])), xq if in_x else yq

            emit_chunked_stores(b, n, _c(CHUNK) if pick else n, n, False, at, "row.in_place",
                                pick and (lambda jv, m, operands=operands: pick(
                                    *operands(jv), m)))
            ran(True)
    # neither constant: each aliased input copied into its buffer, a chunk at a time
    with b.if_then(b.not_(b.or_(x_const, y_const))):
        inputs_at, chunk_at = _chunk_reader(b, element_at, o, oo, (x, xo, xb, x_alias),
                                            (y, yo, yb, y_alias))
        emit_chunked_stores(b, n, _c(CHUNK), n, False, chunk_at, "row.copied", pick and (
            lambda jv, m: pick(*inputs_at(jv), m)), lambda jv, m: emit_alias_copies(
                b, ((x_alias, b.gep(x, [xo]), xb), (y_alias, b.gep(y, [yo]), yb)), jv, m))
        ran(True)
    ran(False)
    return fn


@intrinsic
def row(typingctx, spec, o, x, y, oo, xo, yo, n, so, sx, sy, xb, yb):
    """One row of ``n`` elements (offsets ``oo``, ``xo``, ``yo``; element strides ``so``, ``sx``,
    ``sy``). Where out is unit-stride and each input unit-stride or constant (contig, scalar_x,
    scalar_y) the loop vectorises, a constant kept in a register or both staged into the stack
    buffers ``xb``/``yb`` and run in ``CHUNK``-element chunks; streamed after an aligned head
    where the spec streams. Else the strided loop. LLVM IR around one call of the spec's
    :func:`element` (a compiled Python row cost 0.25-0.3 s of every new signature's compile);
    an element with a lean form (jitops.cpu.kernels.lean) runs it on each
    ``CHUNK``-element chunk whose every lane passes its test.
    """
    if not isinstance(spec, KernelSpecType):
        return None
    el_ty = typingctx.resolve_value_type(element)
    el_sig = typingctx.resolve_function_type(el_ty, (spec, x.dtype, y.dtype), {})
    if el_sig is None:
        return None
    sig = types.void(spec, o, x, y, oo, xo, yo, n, so, sx, sy, xb, yb)
    o_ty = o
    inlined = spec.op in INLINED
    # out as an input of its type reads it where it stores (an op whose y is one element
    # broadcast only as x *= c), in a function of its own (_in_place_row)
    one_y = spec.op in catalog.ONE_ELEMENT_Y
    direct, in_place = (o == x, o == y), spec.in_place
    in_place_args = (o, x, y, *(types.int64,) * 4, xb, yb, *(types.int64,) * 4)
    stage_strided = inlined and o.dtype == x.dtype == y.dtype
    # an element with a lean form for calm chunks (jitops.cpu.kernels.lean): its functions,
    # typed, and the constant exponents it keeps
    lean = _lean.LEAN.get((spec.op, spec.compute)) if (
        spec.act is None and spec.x == spec.y == spec.out == spec.compute) else None
    kept = lean.keep if lean is not None else ()
    if lean is not None:
        lean = {name: (t, typingctx.resolve_function_type(t, (x.dtype, y.dtype), {}))
                for name, t in ((name, typingctx.resolve_value_type(getattr(lean, name)))
                                for name in ("calm", "core", "general") if getattr(lean, name))}

    def codegen(context, builder, signature, args):
        b = builder
        sp, o, x, y, oo, xo, yo, n, so, sx, sy, xb, yb = args
        impl = context.get_function(el_ty, el_sig)

        def call(impl, args):
            block, start = b.block, len(b.block.instructions)
            v = impl(b, args)
            if inlined or lean is not None:  # the call Numba emitted, inlined
                for ins in block.instructions[start:]:
                    if isinstance(ins, ir.CallInstr):
                        ins.attributes.add("alwaysinline")
            return v

        def element_at(pa, pb, load=b.load):
            return call(impl, (sp, load(pa), load(pb)))

        pick = general = keep = None
        lean_fns = None
        if lean is not None:
            fns = lean_fns = {name: context.get_function(*typed) for name, typed in lean.items()}

            def inlined_call(name, *args):
                return call(fns[name], args)

            def pick(xq, yq, m):
                return _emit_pick(
                    b, lambda pa, pb: inlined_call("calm", b.load(pa), b.load(pb)),
                    lambda pa, pb: inlined_call("core", b.load(pa), b.load(pb)), xq, yq, m)

            if "general" in fns:
                def general(pa, pb):
                    return inlined_call("general", b.load(pa), b.load(pb))
            keep = kept or None

        def eq(a, v):
            return b.icmp_signed("==", a, _c(v))

        def smin(a, c):
            return _smin(b, a, c)

        x_const, y_const = eq(sx, 0), eq(sy, 0)
        fast = b.and_(eq(so, 1), b.and_(b.or_(x_const, eq(sx, 1)), b.or_(y_const, eq(sy, 1))))
        done = b.append_basic_block("row.done")
        with b.if_else(fast) as (vector, strided):
            with strided:
                if stage_strided:
                    _emit_staged_strided(b, element_at, o, x, y, oo, xo, yo, n, so, sx, sy,
                                         xb, yb, pick if keep is None else None)
                else:
                    def one(j):
                        v = element_at(b.gep(x, [b.add(xo, b.mul(j, sx))]),
                                       b.gep(y, [b.add(yo, b.mul(j, sy))]),
                                       lambda p: emit_load_word(b, p))
                        emit_store_word(b, v, b.gep(o, [b.add(oo, b.mul(j, so))]))
                    _emit_loop(b, _c(0), n, one)
            with vector:
                h = emit_stream_head(context, b, o_ty, o, oo, n) if spec.stream else n
                if in_place:  # out is an input: the loops of _in_place_row, where it has
                    # one (compiled for calls planned so: KernelSpec.in_place)
                    x_alias = b.and_(b.not_(x_const), is_alias(b, o, oo, x, xo))
                    y_alias = b.and_(b.not_(y_const), is_alias(b, o, oo, y, yo))
                    with b.if_then(b.or_(x_alias, y_alias)):
                        fn = _in_place_row(
                            context, b.module, impl, lean_fns, inlined or lean is not None,
                            bool(kept), direct, one_y, sp.type, in_place_args)
                        status, handled = context.call_conv.call_function(
                            b, fn, types.int64, in_place_args,
                            [o, x, y, oo, xo, yo, n, xb, yb,
                             *(b.zext(f, _LL64) for f in (x_const, y_const, x_alias, y_alias))])
                        with cgutils.if_unlikely(b, status.is_error):
                            context.call_conv.return_status_propagate(b, status)
                        with b.if_then(b.icmp_signed("!=", handled, _c(0))):
                            b.branch(done)
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

                        def own(el=el):
                            _emit_loop(b, _c(0), h, lambda i: b.store(
                                el(i), b.gep(o, [b.add(oo, i)])))
                            if spec.stream:
                                _emit_loop(b, h, n, lambda i: emit_stream_put(
                                    b, el(i), b.gep(o, [b.add(oo, i)])))

                        def lean_chunks(c=c, vp=vp, voff=voff, c_is_x=c_is_x):
                            # the constant spread over its buffer once; chunks of the row
                            # run lean where every lane is calm
                            buf = xb if c_is_x else yb
                            _emit_loop(b, _c(0), smin(n, _c(CHUNK)),
                                       lambda i: b.store(c, b.gep(buf, [i])))

                            def operands(jv):
                                vq = b.gep(vp, [b.add(voff, jv)])
                                return (buf, vq) if c_is_x else (vq, buf)

                            def chunk_at(jv):
                                xq, yq = operands(jv)
                                return (lambda i: (general or element_at)(
                                    b.gep(xq, [i]), b.gep(yq, [i])), b.gep(o, [b.add(oo, jv)]))

                            emit_chunked_stores(b, n, _c(CHUNK), h, spec.stream, chunk_at,
                                                "row.const", lambda jv, m: pick(*operands(jv), m))

                        if pick is None:
                            own()
                        else:
                            if keep is not None and not c_is_x:
                                # a kept exponent: its own loop, the exponent a constant there
                                word = 32 if isinstance(c.type, ir.FloatType) else 64
                                bits = b.bitcast(c, ir.IntType(word))
                                for v in keep:
                                    k = ir.Constant(c.type, v)
                                    with b.if_then(b.icmp_unsigned("==", bits, b.bitcast(
                                            k, bits.type))):
                                        own(lambda i, k=k, vp=vp, voff=voff: impl(
                                            b, (sp, b.load(b.gep(vp, [b.add(voff, i)])), k)))
                                        b.branch(done)
                            lean_chunks()
                        b.branch(done)
                # both inputs read in place, or both constant (staged, in chunks)
                staged = smin(n, _c(CHUNK))
                for const, p, off, buf in ((x_const, x, xo, xb), (y_const, y, yo, yb)):
                    with b.if_then(const):
                        v = b.load(b.gep(p, [off]))
                        _emit_loop(b, _c(0), staged,
                                   lambda i, v=v, buf=buf: b.store(v, b.gep(buf, [i])))
                # only a staged (broadcast) input needs chunks the size of its buffer, and a
                # lean form tests a chunk in cache; other rows run in one piece (after the
                # streaming head)
                if keep is not None:  # (its lean form runs only where the exponent is not kept)
                    pick = None
                chunk = _c(CHUNK) if pick else b.select(b.or_(x_const, y_const), _c(CHUNK), n)

                inputs_at, chunk_at = _chunk_reader(b, element_at, o, oo, (x, xo, xb, x_const),
                                                    (y, yo, yb, y_const))
                emit_chunked_stores(b, n, chunk, h, spec.stream, chunk_at, "row", pick and (
                    lambda jv, m: pick(*inputs_at(jv), m)))
        b.branch(done)
        b.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def stack_words(typingctx):
    """``MAX_DIMS`` int64 words on the calling function's stack (an entry-block ``alloca``): a
    task's odometer or offsets, whose lifetime is the task's by construction (an NRT array shared
    with ``prange`` tasks was freed while they wrote to it).
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
    """Move an 8 x 8 block, transposed: the 8 contiguous elements at ``src[soff + k * s_cols]``
    become column ``k`` of the rows ``dst[doff + r * width]``. Eight vector loads, three rounds
    of zips and eight stores on integers of the element's width: one IR for every dtype.
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
    width = meta[META.TILE_J]
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
    """Where task ``t`` lies (the inverse of :func:`task_geometry`): ``(r, i0, j0, nrows, n)``.
    Tiled: ``r`` indexes the dims outside the tile, whose corner is ``(i0, j0)``, edges moved by
    ``si``/``sj`` (a spare-band tile is empty); else ``r`` is its first row and ``j0`` its block's
    start. ``nrows`` rows of ``n`` follow. Every family decodes tasks here (:func:`emit_task_span`).
    """
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
    """``(si, sj)`` for :func:`task_span`: how far the tile edges move so that out's tile rows start
    on a cache line (``sj``) and so do a staged input's unit-stride runs down the rows (``si``;
    x's where ``x_runs``, else y's where ``y_runs``). The same for every task of a job; ``(0, 0)``
    where meta's ``SHIFT`` bits leave a dim no spare band, and for a spec that is not tiled.
    NumPy's large arrays start 16 bytes into a page, which leaves every other tile's runs
    straddling two lines.
    """
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
            b, word(META.SHIFT), word(META.TILE_I), word(META.TILE_J),
            (o, word(META.SIZE), size(2), so),
            [(x, word(META.SIZE + 1), size(3), x_runs), (y, word(META.SIZE + 2), size(4), y_runs)])
        return context.make_tuple(b, signature.return_type, shifts)

    return sig, codegen


def emit_tile_shifts(b, bits, tile_i, tile_j, out, inputs):
    """LLVM IR of :func:`tile_shifts` for any kernel family: ``[si, sj]`` from the ``META.SHIFT``
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
    nd = meta[META.ND]
    var = meta[META.VARIANT]
    so, sx, sy = strides(meta, nd, nd - 1)
    # one step along dim nd - 2 (rows of a tile, or of a matrix, walk it)
    so0, sx0, sy0 = strides(meta, nd, nd - 2)
    tiled = var == V_TILED  # one TILE_I x TILE_J tile of the two innermost dims of outer index r
    si, sj = tile_shifts(spec, meta, o, x, y, so, sx0 == 1 and staged(sx0, sx),
                         sy0 == 1 and staged(sy0, sy))
    r, i0, j0, nrows, n = task_span(
        t, tiled, meta[META.NTI], meta[META.NTJ], meta[META.TILE_I], meta[META.TILE_J],
        dim(meta, nd - 2 if nd > 2 else 0), dim(meta, nd - 1), meta[META.NBLK], meta[META.BLOCK],
        meta[META.ROWS_PER_TASK], meta[META.ROWS], si, sj)
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
    words of ``meta``, words at an offset from an object, and ``leave`` (store a status, jump
    to the end)."""

    def __init__(self, builder, meta):
        self.b = builder
        # meta: its address (i64) or an int64 pointer
        self.meta = meta if isinstance(meta.type, ir.PointerType) \
            else builder.inttoptr(meta, _LL64.as_pointer())
        self.status = cgutils.alloca_once_value(builder, _c(0))  # in the entry block
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

    def leave(self, status: int) -> None:
        """Store ``status`` and jump to the end."""
        self.b.store(_c(status), self.status)
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


def emit_checks(e: _Emit, nops, ref, ptrs) -> None:
    """LLVM IR of the checks a launch makes before it writes, for both kernel families:
    ``nops`` operands (an i64, out first), ``ref(k)`` operand ``k``'s object address (or its
    data address, where meta's ``DATA_OFF`` is -1). In order: the header checks (objects
    taken by identity must be the arrays planned for), the data addresses into ``ptrs`` (an
    i64 pointer), their alignment, out still writeable, and with ``out=`` no overlap of out
    with an input other than its exact view (NumPy's answer is computed from the inputs as
    they were; an exact alias runs in place, each element read before it is written). Ends
    with ``e.leave(status)``."""
    b, word, cmp = e.b, e.word, e.cmp
    nd = word(META.ND)
    base = b.add(_c(META.SIZE), b.add(nops, b.add(nd, b.mul(nops, nd))))

    def check(k, j):  # operand k's OPERAND word j
        return word(b.add(base, b.add(b.mul(_c(OPERAND.SIZE), k), _c(j))))

    h = word(META.HEADERS)
    with b.if_then(cmp(">=", h, 0)):
        at = cgutils.alloca_once_value(b, b.add(h, _c(len(HEADER_OFFSETS or ()))))
        with cgutils.for_range(b, nops) as loop:
            good, nxt = e.header_is(ref(loop.index), h, b.load(at))
            with b.if_then(b.not_(good)):
                e.leave(MISMATCH)
            b.store(nxt, at)
    off = word(META.DATA_OFF)
    with cgutils.for_range(b, nops) as loop:
        k = loop.index
        r = ref(k)
        p = cgutils.alloca_once_value(b, r)
        with b.if_then(cmp(">=", off, 0)):
            b.store(e.at(r, off), p)
        p = b.load(p)
        with b.if_then(cmp("!=", b.srem(p, check(k, OPERAND.ALIGN)), 0)):
            e.leave(MISALIGNED)
        b.store(p, b.gep(ptrs, [k]))
    fl = word(META.FLAGS_OFF)
    with b.if_then(cmp(">=", fl, 0)):
        with b.if_then(cmp("==", b.and_(e.at(ref(_c(0)), fl, _LL32), _c(WRITEABLE)), 0)):
            e.leave(READ_ONLY)
    with b.if_then(cmp("!=", word(META.CHECK), 0)):
        po = b.load(ptrs)
        o_lo = b.add(po, check(_c(0), OPERAND.LO))
        o_hi = b.add(po, check(_c(0), OPERAND.HI))
        with cgutils.for_range(b, nops, start=_c(1)) as loop:
            k = loop.index
            p = b.load(b.gep(ptrs, [k]))
            meet = b.and_(cmp("<", b.add(p, check(k, OPERAND.LO)), o_hi),
                          cmp("<", o_lo, b.add(p, check(k, OPERAND.HI))))
            alias = b.and_(cmp("==", p, po), cmp("!=", check(k, OPERAND.SAME), 0))
            with b.if_then(b.and_(meet, b.not_(alias))):
                e.leave(OVERLAP)
    e.leave(OK)


@intrinsic
def resolve(typingctx, oo, ox, oy, pmeta):
    """``(status, out, x, y data addresses)``: :func:`emit_checks` for a built-in launch.
    LLVM IR rather than a compiled helper: typing one cost 0.4-0.8 s of the first compile."""
    sig = types.UniTuple(_I64, 4)(_I64, _I64, _I64, _I64)

    def codegen(context, builder, signature, args):
        b = builder
        e = _Emit(b, args[3])
        refs = cgutils.alloca_once(b, _LL64, size=NOPS)
        ptrs = cgutils.alloca_once(b, _LL64, size=NOPS)
        for k, obj in enumerate(args[:3]):
            b.store(obj, b.gep(refs, [_c(k)]))
        emit_checks(e, _c(NOPS), lambda k: b.load(b.gep(refs, [k])), ptrs)
        b.position_at_end(e.done)
        found = [b.load(e.status)] + [b.load(b.gep(ptrs, [_c(k)])) for k in range(NOPS)]
        return context.make_tuple(b, signature.return_type, found)

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
    for t in prange(meta[META.NTASKS]):
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
    """The status of :func:`jitops.cpu.threads.pool.run_job`'s result."""
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


def driver_table(drive, pooled, name: str, c_serial: bool = False, **more) -> dict:
    """A kernel family's drivers: ``drive`` (the checks, then every task under ``prange``)
    compiled with ``parallel=True`` and serially (``c_serial``: C-callable too), and
    ``pooled`` (the checks, then the tasks on jitops' own pool, jitops.cpu.threads.pool); with
    ``more`` entries, each cached on disk."""
    table = {"parallel": njit(parallel=True, **ENTRY)(renamed(drive, f"_{name}_parallel")),
             "serial": driver(renamed(drive, f"_{name}_serial"), c_serial),
             "pooled": driver(renamed(pooled, f"_{name}_pooled")), **more}
    for k in table.values():  # the on-disk cache (off with JITOPS_CACHE=0 or nowhere to write)
        cache.enable(k)
    return table


def _pooled(task, oo, ox, oy, pmeta, ctl, workers):
    """The checks of :func:`_drive`, then the tasks on the pool: this thread and ``workers``
    pool workers."""
    status, po, px, py = resolve(oo, ox, oy, pmeta)
    if status != OK:
        return status
    meta = as_pointer(pmeta, _I64)
    return finish_job(pool.run_job(ctl, workers, pool.KIND_BINARY, task, po, px, py, pmeta,
                                   meta[META.NTASKS], meta[META.VARIANT] != V_TILED))


KERNELS = driver_table(_drive, _pooled, "kernel", task=_task)


def compiled_address(task, spec, cache_of: dict, nargs: int, builtin: bool = True) -> int:
    """Address of ``task`` compiled for ``spec`` and ``nargs`` int64 arguments (compiled, or
    loaded from disk, once per process; remembered in ``cache_of``)."""
    addr = cache_of.get(spec)
    if addr is None:
        sig = (spec.numba_type,) + (types.int64,) * nargs
        registries.compile_with(lambda: task.compile(sig), builtin=builtin)
        cres = task.overloads[sig]
        addr = cache_of[spec] = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return addr


_TASKS: dict = {}


def task_address(spec) -> int:
    """Address of ``_task`` compiled for ``spec``."""
    return compiled_address(_task, spec, _TASKS, 5)


def task_geometry(plan: Plan, block: int | None = None, tile: tuple[int, int] | None = None,
                  threads: int | None = None) -> tuple[int, ...]:
    """How a plan's space is cut into tasks, for every kernel family: ``(block, ntasks,
    rows_per_task, nblk, rows, tile_i, tile_j, nti, ntj, shift)``, balanced for ``threads``
    (default: what a call from here would use). Tiled, a dim longer than its tile gets a spare
    band so that its edges can move onto cache lines (``shift`` bits; :func:`tile_shifts`).
    """
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
    (:mod:`jitops.cpu.repeat.shapeclass`) both call this one definition."""
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
    """Whether a call writes its output with non-temporal stores (jitops.cpu.kernels.stream): where
    the data it moves -- the output and every input read in full -- is at least
    ``config.STREAM_BYTES`` (the last-level cache; a cache-resident output is better left there
    for its reader), its rows are unit-stride and its dtype not complex; x86-64 only. A
    write-only launch (every input broadcast) then times both stores (backend.StoreChoice).
    ``staged_tiles``: the caller's tiled tasks stage an input running across the rows into a
    stack tile (:func:`stage_tiles`, nary.STAGED_INPUTS), so that input counts as unit-stride.
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


def build_meta(plan: Plan, alignments: tuple[int, ...] | None = None, extents=None,
               same: tuple[bool, ...] | None = None, data_offset: int | None = None,
               block: int | None = None, tile: tuple[int, int] | None = None,
               threads: int | None = None) -> np.ndarray:
    """The int64 meta of a launch of ``plan`` (jitops.cpu.kernels.layout.META), for either kernel
    family, its tasks balanced for ``threads`` (default: what a call from here would use).

    Per operand, out first: ``alignments`` of the data pointers, ``same`` (the operand is
    out's exact view), ``extents`` (byte extents, given where ``out=`` must be checked for
    overlap, else None). ``data_offset`` defaults to :data:`DATA_OFFSET` (-1: the kernel is
    handed data addresses, and does not read the flags).
    """
    block, ntasks, rows_per_task, nblk, rows, ti, tj, nti, ntj, shift = task_geometry(
        plan, block, tile, threads)
    shape = plan.iter_shape
    nops = len(plan.iter_strides)
    off = DATA_OFFSET if data_offset is None else data_offset
    head = layout.fill(META, ND=len(shape), VARIANT=VARIANT_CODES[plan.variant], BLOCK=block,
                       NTASKS=ntasks, ROWS_PER_TASK=rows_per_task, NBLK=nblk, ROWS=rows,
                       TILE_I=ti, TILE_J=tj, NTI=nti, NTJ=ntj, NOPS=nops, DATA_OFF=off,
                       FLAGS_OFF=FLAGS_OFFSET if off >= 0 else -1,
                       CHECK=int(extents is not None), SHIFT=shift, HEADERS=-1)
    checks = []
    for k in range(nops):
        lo, hi = extents[k] if extents is not None else (0, 0)
        checks += layout.fill(OPERAND, ALIGN=alignments[k] if alignments else 1, LO=lo, HI=hi,
                              SAME=int(same[k]) if same else 0)
    return np.array(head + list(plan.iter_offsets) + list(shape)
                    + [s for st in plan.iter_strides for s in st] + checks, np.int64)


def header_checks(meta: np.ndarray, arrays) -> np.ndarray | None:
    """``meta`` with header checks for ``arrays`` (out, x, y) appended: the kernel then takes the
    operands by identity only if each is an ndarray of exactly this type, dtype object, shape and
    strides (else MISMATCH). None where the ndarray layout is not verified. The dtypes are
    compared by address: keep them alive as long as the result.
    """
    if HEADER_OFFSETS is None or meta[META.DATA_OFF] < 0:
        return None
    block = list(HEADER_OFFSETS)
    for a in arrays:
        block += [id(type(a)), id(a.dtype), a.ndim, *a.shape, *a.strides]
    out = np.concatenate([meta, np.array(block, np.int64)])
    out[META.HEADERS] = len(meta)
    return out
