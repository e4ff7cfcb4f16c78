"""Non-temporal (streaming) stores for outputs larger than the last-level cache.

An ordinary store reads the output's line first; a non-temporal one writes whole lines without
that read and leaves the inputs cached. :func:`stream_put` is a scalar store with LLVM's
``!nontemporal`` metadata, which the loop vectoriser turns into ``vmovntps``/``vmovntdq``
where the store is aligned: it states ``STREAM_ALIGN`` bytes and the caller starts at an
aligned output address (:func:`stream_head` elements stored ordinarily first); the scalar
remainder (``movnti``) needs no alignment. x86-64 only (:data:`AVAILABLE`); :func:`store_fence`
ends each task that streamed.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

#: Bytes a vector non-temporal store must be aligned to (AVX's 32-byte vectors).
STREAM_ALIGN = 32

#: Where the kernels may stream at all (the intrinsics below are x86 instructions).
AVAILABLE = platform.machine().lower() in ("x86_64", "amd64")


def emit_stream_put(builder, value, at):
    """LLVM IR of :func:`stream_put`: store ``value`` at the pointer ``at``, non-temporally."""
    st = builder.store(value, at, align=STREAM_ALIGN)
    st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))


@intrinsic
def stream_put(typingctx, ptr, index, value):
    """``ptr[index] = value`` as a non-temporal store (vectorisable; see the module text)."""
    if not isinstance(ptr, types.CPointer) or ptr.dtype != value:
        return None
    sig = types.void(ptr, index, value)

    def codegen(context, builder, signature, args):
        emit_stream_put(builder, args[2], builder.gep(args[0], [args[1]]))
        return context.get_dummy_value()

    return sig, codegen


def emit_stream_head(context, builder, ptr_ty, ptr, index, n):
    """LLVM IR of :func:`stream_head` (``ptr_ty`` the pointer's Numba type)."""
    i64 = ir.IntType(64)
    size = context.get_abi_sizeof(context.get_value_type(ptr_ty.dtype))
    addr = builder.ptrtoint(builder.gep(ptr, [index]), i64)
    gap = builder.and_(builder.neg(addr), ir.Constant(i64, STREAM_ALIGN - 1))
    head = builder.udiv(gap, ir.Constant(i64, size))
    exact = builder.icmp_unsigned("==", builder.urem(gap, ir.Constant(i64, size)),
                                  ir.Constant(i64, 0))
    # at least two vectors' worth after the head, else the ordinary loop does it all
    enough = builder.icmp_signed(">=", builder.sub(n, head),
                                 ir.Constant(i64, 2 * STREAM_ALIGN // size))
    return builder.select(builder.and_(exact, enough), head, n)


@intrinsic
def stream_head(typingctx, ptr, index, n):
    """How many of the ``n`` elements from ``ptr[index]`` to write with ordinary stores before
    ``ptr[index + head]`` is ``STREAM_ALIGN``-aligned; ``n`` (stream nothing) where no element
    of the row is, or the row is too short to gain from streaming."""
    if not isinstance(ptr, types.CPointer):
        return None
    sig = types.int64(ptr, index, n)

    def codegen(context, builder, signature, args):
        return emit_stream_head(context, builder, ptr, *args)

    return sig, codegen


def emit_store_fence(builder) -> None:
    """LLVM IR of :func:`store_fence` (nothing where nothing streams: the instruction is
    x86's)."""
    if AVAILABLE:
        fn = builder.module.declare_intrinsic("llvm.x86.sse.sfence",
                                              fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fn, [])


@intrinsic
def store_fence(typingctx):
    """``sfence``: order this thread's non-temporal stores before anything it does next."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        emit_store_fence(builder)
        return context.get_dummy_value()

    return sig, codegen
