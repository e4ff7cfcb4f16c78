"""CPU kernels of N inputs: a user op's scalar function (``jitops.elementwise``) over the plan.

The same structure as the built-in binary kernels (jitops.cpu.kernels), for any number of
inputs: the iteration space is cut into the same tasks (:func:`~jitops.cpu.kernels.
task_geometry`: blocks of one long row, runs of short rows, or 2-d tiles for operands that
disagree on layout), a serial and a parallel driver run them, and a task's failure (an
exception inside the user's function) reaches the caller as a status, never as an unwritten
element.

Each row runs one of two loops:

* ``contig`` -- ``out`` unit-stride and every input unit-stride or constant along the row
  (the common broadcasts: ``x * w + b`` with ``w``, ``b`` per channel). A constant input is
  read once per row into a small buffer on the task's stack, so the loop body reads every
  input the same way and LLVM vectorises it whatever the mix of broadcast inputs (one
  compiled loop instead of one per pattern);
* ``strided`` -- anything else (and every row of a tile).

A :class:`UserSpec` (the function, the inputs' dtypes, the compute and result dtypes) is the
one argument that specialises the module-level ``_utask``, as ``KernelSpec`` does for the
built-ins: its Numba type's *name* is stable across processes for a module-level function
(qualified name and a hash of its source file), so the on-disk cache finds it in a new
process. Functions that cannot be found again by name (lambdas, closures, functions typed
into a notebook) compile per process into ``_utask_local``, which is never cached on disk, so
the cache cannot grow by one entry per process.

The drivers take three integers: the address of ``_utask`` compiled for one spec, an int64
array of the operands (out first) and the int64 ``meta`` array. Arrays are given as the
built-in kernels get them: the array object's address where the kernel reads the data pointer
from the object (kernels.DATA_OFFSET), else the data address. ``meta``::

    [nd, variant, block, ntasks, rows_per_task, nblk, rows, tile_i, tile_j, nti, ntj, nops,
     data offset, flags offset, check overlap,
     start offsets (nops), shape (nd), strides (nops x nd, out first),
     per operand: alignment, byte extent lo, hi, same view as out (nops x 4)]

Before any task runs, the driver resolves the data addresses into its own stack and makes the
checks a repeat of a call must make (alignment; out writeable; with ``out=``, overlap with an
input other than out itself), returning a status without writing when one fails, as the
built-in drivers do (kernels.resolve): the fast path hands it the caller's arrays.

A spec with ``stream`` (kernels.should_stream decides) writes the unit-stride rows of out with
non-temporal stores, as the built-in kernels do (jitops.cpu.stream).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import (
    NativeValue,
    intrinsic,
    models,
    overload,
    register_model,
    typeof_impl,
    unbox,
)
from numba.np.numpy_support import from_dtype

from ..core.plan import Plan
from . import cache, pool, registries
from .half import float_to_half, half_to_float
from .jit import ENTRY, INNER, inner, wrapper
from .kernels import (
    _LL32,
    _LL64,
    DATA_OFFSET,
    FLAGS_OFFSET,
    MAX_DIMS,
    MISALIGNED,
    OK,
    OVERLAP,
    READ_ONLY,
    TASK_FAILED,
    V_TILED,
    VARIANT_CODES,
    WRITEABLE,
    _c,
    _Emit,
    emit_odometer_step,
    emit_task_span,
    emit_unravel,
    renamed,
    stack_words,
    task_geometry,
)
from .spec import address_of, as_pointer, storage, to_bool_byte
from .stream import STREAM_ALIGN, store_fence, stream_head, stream_put

_I64 = types.int64

#: Most operands (out and the inputs) of a user op: a task keeps their offsets in the same
#: stack words as its odometer.
MAX_OPERANDS = MAX_DIMS

#: Elements of one broadcast (constant-along-the-row) input staged on the task's stack; also
#: the chunk of a row, so a chunk spans a whole number of streaming-aligned bytes.
BUFFER = 1024
assert BUFFER % STREAM_ALIGN == 0

# meta header (int64)
U_ND, U_VARIANT, U_BLOCK, U_NTASKS, U_ROWS_PER_TASK, U_NBLK, U_ROWS = 0, 1, 2, 3, 4, 5, 6
U_TILE_I, U_TILE_J, U_NTI, U_NTJ, U_NOPS = 7, 8, 9, 10, 11
U_DATA_OFF, U_FLAGS_OFF, U_CHECK = 12, 13, 14
U_HDR = 15


class UserSpecType(types.Dummy):
    """Numba type of a :class:`UserSpec`; all information is in its (stable) name.

    ``ret`` is the dtype the user's function returns for ``compute`` inputs: recorded in the
    cache index with the compiled task, a new process reads it back (:func:`cached_return`)
    instead of compiling the function to learn it."""

    def __init__(self, key: str, inputs: tuple[str, ...], out: str, compute: str, ret: str,
                 stream: bool = False):
        self.fn_key, self.inputs, self.out, self.compute = key, inputs, out, compute
        self.ret, self.stream = ret, stream
        tail = ";stream" if stream else ""
        super().__init__(
            name=f"jitops.UserSpec({key};{','.join(inputs)};{out};{compute};{ret}{tail})")

    def __reduce__(self):  # the cache index pickles signatures
        return (UserSpecType, (self.fn_key, self.inputs, self.out, self.compute, self.ret,
                               self.stream))


register_model(UserSpecType)(models.OpaqueModel)


@unbox(UserSpecType)
def _unbox_spec(typ, obj, c):
    return NativeValue(c.context.get_constant_null(types.voidptr))


#: key -> the Python scalar function (what the overload below compiles for a spec).
_FUNCTIONS: dict[str, object] = {}


def function_key(fn) -> tuple[str, bool]:
    """(key, cacheable): a name that finds ``fn`` again in another process, or a
    process-local one.

    A module-level function of a source file is named by its module, qualified name and a
    hash of that file (Numba's own cache is invalidated by the file's stamp the same way);
    anything else -- a lambda, a closure, a function defined in a notebook cell or ``exec``
    -- by its identity in this process only.
    """
    qual = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
    module = getattr(fn, "__module__", None) or "?"
    code = getattr(fn, "__code__", None)
    path = code.co_filename if code is not None else ""
    local = ("<lambda>" in qual or "<locals>" in qual or code is None
             or getattr(fn, "__closure__", None) or not os.path.isfile(path))
    if not local:
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:16]
        except OSError:
            local = True
    if local:
        return f"local:{module}.{qual}@{id(fn):x}.{os.getpid()}", False
    return f"{module}.{qual}@{digest}", True


def register(key: str, fn) -> None:
    _FUNCTIONS[key] = fn


class UserSpec:
    """What one N-input kernel instance computes. Interned: one object per specialisation;
    ``stream`` as in :class:`~jitops.cpu.spec.KernelSpec` (its own, compiled when used)."""

    __slots__ = ("key", "inputs", "out", "compute", "ret", "stream", "cacheable", "numba_type")
    _interned: dict[tuple, UserSpec] = {}

    def __new__(cls, key: str, inputs: tuple[np.dtype, ...], out: np.dtype, compute: np.dtype,
                ret: np.dtype, cacheable: bool, stream: bool = False) -> UserSpec:
        k = (key, inputs, out, compute, ret, bool(stream))
        self = cls._interned.get(k)
        if self is None:
            self = super().__new__(cls)
            self.key, self.inputs, self.out, self.compute, self.ret, self.stream = k
            self.cacheable = cacheable
            self.numba_type = UserSpecType(key, tuple(d.name for d in inputs), out.name,
                                           compute.name, ret.name, self.stream)
            cls._interned[k] = self
        return self

    def __repr__(self) -> str:
        return (f"UserSpec({self.key!r}, inputs={[d.name for d in self.inputs]}, "
                f"out={self.out}, compute={self.compute})")


@typeof_impl.register(UserSpec)
def _typeof_spec(val, c):
    return val.numba_type


_STACK_BUFFER = {}


def _stack_buffer_of(ty):
    """An intrinsic giving ``BUFFER`` words of Numba type ``ty`` on the caller's stack."""
    fn = _STACK_BUFFER.get(ty)
    if fn is None:
        @intrinsic
        def stack_buffer(typingctx):
            sig = types.CPointer(ty)()

            def codegen(context, builder, signature, args):
                return cgutils.alloca_once(builder, context.get_data_type(ty), size=BUFFER)

            return sig, codegen

        fn = _STACK_BUFFER[ty] = stack_buffer
    return fn


_DISPATCHERS: dict = {}


def compiled_function(fn):
    """The user's scalar function compiled for the CPU (one dispatcher per function)."""
    d = _DISPATCHERS.get(fn)
    if d is None:
        d = _DISPATCHERS[fn] = inner(fn)
    return d


def return_type(fn, compute: np.dtype, n: int):
    """The Numba type ``fn`` returns for ``n`` arguments of ``compute`` (compiles it; Numba's
    typing errors propagate)."""
    d = compiled_function(fn)
    sig = (from_dtype(compute),) * n
    registries.compile_with(lambda: d.compile(sig), builtin=False)
    return d.overloads[sig].signature.return_type


_RETURNS: dict[tuple[str, str], str] | None = None


def cached_return(key: str, compute: np.dtype) -> np.dtype | None:
    """The dtype function ``key`` returns for ``compute`` inputs, as recorded with a task in
    the disk cache by an earlier process, or None.

    Learning it otherwise means compiling the function (and, in a new process, loading all of
    Numba's registries first): most of the first call of a cached user op. The key names the
    function's source file by its hash and the index is dropped with any change of Numba or
    jitops, so a recorded dtype is the one Numba's typing gives now.
    """
    global _RETURNS
    if _RETURNS is None:
        _RETURNS = {}
        for sig in cache.indexed_signatures(_utask_cached):
            spec = sig[0] if sig else None
            if isinstance(spec, UserSpecType):
                _RETURNS[spec.fn_key, spec.compute] = spec.ret
    ret = _RETURNS.get((key, compute.name))
    return None if ret is None else np.dtype(ret)


def user_task(spec, pptrs, pmeta, t):
    """One task of a user op (the code is generated for the spec's number of inputs)."""


def _literal(nops) -> int | None:
    return nops.literal_value if isinstance(nops, types.IntegerLiteral) else None


def _walker(builder, meta, nops):
    """An emitter over ``meta`` (an int64 pointer) with ``stride(k, d)``: operand ``k``'s
    element stride along dim ``d`` (0 is out), for ``nops`` operands."""
    e = _Emit(builder, meta)
    nd = e.word(U_ND)
    base = builder.add(_c(U_HDR + nops), nd)

    def stride(k, d):
        return e.word(builder.add(base, builder.add(builder.mul(_c(k), nd), d)))

    return e, nd, stride


@intrinsic
def first_row(typingctx, meta, t, offs, idx, nops):
    """Set ``offs`` to every operand's offset at the start of task ``t`` and the odometer
    ``idx`` to its first row; returns (rows, row length, rows-walk-one-dim).

    The same tasks as the built-in kernels, decoded by the same IR
    (:func:`jitops.cpu.kernels.emit_task_span`). LLVM IR for ``nops`` operands (a literal;
    the loops over them unrolled here): as compiled Python helpers this and :func:`next_row`
    cost 0.4-0.5 s of the first user op's compile, which now only types two intrinsic calls.
    """
    n_ops = _literal(nops)
    if n_ops is None or not all(isinstance(a, types.CPointer) for a in (meta, offs, idx)):
        return None
    sig = types.Tuple((_I64, _I64, types.boolean))(meta, _I64, offs, idx, nops)

    def codegen(context, builder, signature, args):
        meta_p, t, offs_p, idx_p, _ = args
        b = builder
        e, nd, stride = _walker(b, meta_p, n_ops)
        word, cmp = e.word, e.cmp
        sh = U_HDR + n_ops
        tiled = cmp("==", word(U_VARIANT), V_TILED)
        dim_j = word(b.add(_c(sh - 1), nd))
        two = b.select(cmp(">", nd, 2), b.sub(nd, _c(2)), _c(0))
        dim_i = word(b.add(_c(sh), two))
        span = emit_task_span(b, t, tiled, word(U_NTI), word(U_NTJ), word(U_TILE_I),
                              word(U_TILE_J), dim_i, dim_j, word(U_NBLK), word(U_BLOCK),
                              word(U_ROWS_PER_TASK), word(U_ROWS))
        r, i0, j0, nrows, n = span
        last = b.sub(nd, _c(1))
        for k in range(n_ops):
            at = b.gep(offs_p, [_c(k)])
            b.store(b.add(word(U_HDR + k), b.mul(j0, stride(k, last))), at)
        with b.if_then(tiled):
            for k in range(n_ops):
                at = b.gep(offs_p, [_c(k)])
                b.store(b.add(b.load(at), b.mul(i0, stride(k, b.sub(nd, _c(2))))), at)
        outer = b.select(tiled, b.sub(nd, _c(2)), last)
        walk = b.or_(tiled, cmp("==", nd, 2))
        # unravel the first row once (div/mod); the rows after it are walked
        emit_unravel(b, r, outer, lambda d: word(b.add(_c(sh), d)),
                     lambda d: [stride(k, d) for k in range(n_ops)],
                     [b.gep(offs_p, [_c(k)]) for k in range(n_ops)], idx_p)
        return context.make_tuple(b, signature.return_type, [nrows, n, walk])

    return sig, codegen


@intrinsic
def next_row(typingctx, meta, offs, idx, walk, nops):
    """Step every operand's offset to the next row: one dim (``walk``) or the odometer
    (``nops`` as in :func:`first_row`)."""
    n_ops = _literal(nops)
    if n_ops is None or not all(isinstance(a, types.CPointer) for a in (meta, offs, idx)):
        return None
    sig = types.void(meta, offs, idx, types.boolean, nops)

    def codegen(context, builder, signature, args):
        meta_p, offs_p, idx_p, walk, _ = args
        b = builder
        e, nd, stride = _walker(b, meta_p, n_ops)
        done = e.done
        slots = [b.gep(offs_p, [_c(k)]) for k in range(n_ops)]

        def strides(d):
            return [stride(k, d) for k in range(n_ops)]

        with b.if_then(walk):
            for slot, st in zip(slots, strides(b.sub(nd, _c(2)))):
                b.store(b.add(b.load(slot), st), slot)
            b.branch(done)
        emit_odometer_step(b, nd, lambda d: e.word(b.add(_c(U_HDR + n_ops), d)), strides,
                           slots, idx_p, done)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def imin(typingctx, a, b):
    """The smaller of two integers, as int64: an LLVM select (Python's ``min`` compiles
    Numba's overload of it, and a conditional expression costs Numba's rewrite passes more,
    each 0.02-0.06 s of a new user op's compile)."""
    if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        x, y = (context.cast(builder, v, t, _I64) for v, t in zip(args, signature.args))
        return builder.select(builder.icmp_signed("<", x, y), x, y)

    return _I64(a, b), codegen


def _task_source(n: int, inputs: tuple[str, ...], out: str, ret, stream: bool = False) -> str:
    """One task for ``n`` inputs (operand 0 is ``out``), as Python source: only the row loops
    are written per operand; the walk between rows is the generic helpers above."""
    ks = range(n + 1)
    ins = range(1, n + 1)
    L = []
    a = L.append
    a("def task(spec, pptrs, pmeta, t):")
    a("    meta = as_pointer(pmeta, I64)")
    a("    ptrs = as_pointer(pptrs, I64)")
    a("    nd = meta[U_ND]")
    a("    idx = stack_words()")
    a("    offs = stack_words()")
    # the strides along a row, read in place: a helper taking the operand would be compiled
    # once per literal operand number
    a(f"    sb = U_HDR + {n + 1} + nd + nd - 1")
    for k in ks:
        a(f"    p{k} = as_pointer(ptrs[{k}], S{k})")
        a(f"    s{k} = meta[sb + {k} * nd]")
    for k in ins:
        a(f"    b{k} = buffer{k}()")
    a(f"    nrows, n, walk = first_row(meta, t, offs, idx, {n + 1})")
    cond = " and ".join(["s0 == 1"] + [f"(s{k} == 0 or s{k} == 1)" for k in ins])
    a(f"    contig = {cond}")
    a("    for _ in range(nrows):")
    for k in ks:
        a(f"        o{k} = offs[{k}]")
    a("        if contig:")
    for k in ins:  # a constant input: one value, staged so the loop reads it like the others
        a(f"            if s{k} == 0:")
        a(f"                v{k} = p{k}[o{k}]")
        a("                for i in range(imin(n, BUFFER)):")
        a(f"                    b{k}[i] = v{k}")
    # streaming: ordinary stores up to the first aligned address of out's row (h == n: the
    # row does not stream), non-temporal ones after it (jitops.cpu.stream)
    # Streaming (a spec of its own: only those compile the loop): the head is a chunk of its
    # own, so every later chunk starts aligned too (BUFFER elements span a multiple of
    # STREAM_ALIGN bytes): a misaligned vector non-temporal store faults.
    a("            h = stream_head(p0, o0, n)" if stream else "            h = n")
    a("            j = 0")
    a("            while j < n:")
    a("                m = imin(BUFFER, n - j)")
    a("                hs = 0")
    a("                if j < h:")
    a("                    m = imin(m, h - j)")
    a("                    hs = m")
    for k in ins:
        a(f"                if s{k} == 0:")
        a(f"                    q{k} = b{k}")
        a(f"                    r{k} = 0")
        a("                else:")
        a(f"                    q{k} = p{k}")
        a(f"                    r{k} = o{k} + j")
    a("                r0 = o0 + j")
    args = ", ".join(_load_expr(inputs[k - 1], f"q{k}[r{k} + i]") for k in ins)
    a("                for i in range(hs):")
    a(f"                    p0[r0 + i] = {_store_expr(out, ret, f'FN({args})')}")
    if stream:
        a("                for i in range(hs, m):")
        a(f"                    stream_put(p0, r0 + i, {_store_expr(out, ret, f'FN({args})')})")
    a("                j += m")
    a("        else:")
    args = ", ".join(_load_expr(inputs[k - 1], f"p{k}[o{k} + i * s{k}]") for k in ins)
    a("            for i in range(n):")
    a(f"                p0[o0 + i * s0] = {_store_expr(out, ret, f'FN({args})')}")
    a(f"        next_row(meta, offs, idx, walk, {n + 1})")
    if stream:
        a("    store_fence()")
    a("    return 0")
    return "\n".join(L) + "\n"


def _load_expr(dtype: str, word: str) -> str:
    """Source of: a storage word -> its value (float16 bits widen to float32; a bool byte
    reads as True whatever nonzero value it holds, as NumPy does), converted to ``T``."""
    if dtype == "float16":
        return f"T(half_to_float({word}))"
    if dtype == "bool":
        return f"T({word} != 0)"
    return f"T({word})"


def _store_expr(out: str, ret, value: str) -> str:
    """Source of: the returned value -> the result's storage word (integers wrap, floats
    round once; a bool is stored as 0 or 1)."""
    if out == "float16":
        return f"float_to_half({value})" if isinstance(ret, types.Float) \
            else f"float_to_half(F64({value}))"
    if out == "bool":
        return f"to_bool_byte({value})"
    return f"OUT({value})"


@overload(user_task, jit_options=INNER)
def _ov_user_task(spec, pptrs, pmeta, t):
    if not isinstance(spec, UserSpecType):
        return None
    fn = _FUNCTIONS.get(spec.fn_key)
    if fn is None:
        raise TypeError(f"jitops: no user function registered as {spec.fn_key}")
    n = len(spec.inputs)
    T = from_dtype(np.dtype(spec.compute))
    disp = compiled_function(fn)
    ret = return_type(fn, np.dtype(spec.compute), n)
    out_t = types.boolean if spec.out == "bool" else from_dtype(np.dtype(spec.out))
    ns = {"as_pointer": as_pointer, "I64": _I64, "stack_words": stack_words,
          "U_HDR": U_HDR, "first_row": first_row,
          "next_row": next_row, "BUFFER": BUFFER, "FN": disp, "T": T, "OUT": out_t,
          "F64": types.float64, "half_to_float": half_to_float, "float_to_half": float_to_half,
          "to_bool_byte": to_bool_byte,
          "U_ND": U_ND, "range": range, "imin": imin,
          "stream_head": stream_head, "stream_put": stream_put, "store_fence": store_fence,
          "S0": storage(np.dtype(spec.out))}
    for k, dt in enumerate(spec.inputs, 1):
        ns[f"S{k}"] = storage(np.dtype(dt))
        ns[f"buffer{k}"] = _stack_buffer_of(storage(np.dtype(dt)))
    source = _task_source(n, spec.inputs, spec.out, ret, spec.stream)
    exec(compile(source, f"<jitops user task, {n} inputs>", "exec"), ns)
    return ns["task"]


def _utask(spec, pptrs, pmeta, t):
    """Task ``t`` of a user op (see :func:`user_task`); returns 0, or an error status."""
    return user_task(spec, pptrs, pmeta, t)


# the tasks' code is all in user_task's overload: linked as it is (jitops.cpu.jit.wrapper)
_utask_cached = wrapper(renamed(_utask, "_utask"))
_utask_local = wrapper(renamed(_utask, "_utask_local"))


#: ``_utask`` (operand addresses, meta, t) through its address.
_call_utask = pool.call_nary


@intrinsic
def uresolve(typingctx, prefs, pmeta, ptrs):
    """The operands' data addresses into ``ptrs``, and the checks every launch makes before
    writing (see the module docstring); a status. LLVM IR, as the built-in drivers' checks
    are (:func:`jitops.cpu.kernels.resolve`): a compiled Python helper cost 0.2-0.3 s of a
    new user op's first compile."""
    if not isinstance(ptrs, types.CPointer):
        return None
    sig = _I64(_I64, _I64, ptrs)

    def codegen(context, builder, signature, args):
        prefs, pmeta, out_ptrs = args
        e = _Emit(builder, pmeta)
        b, word, cmp = builder, e.word, e.cmp
        off = word(U_DATA_OFF)
        # the operand array itself is given as the others are (the object, or its data)
        refs_at = cgutils.alloca_once_value(b, prefs)
        with b.if_then(cmp(">=", off, 0)):
            b.store(e.at(prefs, off), refs_at)
        refs = b.inttoptr(b.load(refs_at), _LL64.as_pointer())
        nops, nd = word(U_NOPS), word(U_ND)
        # the per-operand check words: [align, lo, hi, same] after the strides
        c = b.add(_c(U_HDR), b.add(nops, b.add(nd, b.mul(nops, nd))))

        def check(k, j):  # meta[c + 4 k + j]
            return word(b.add(c, b.add(b.mul(_c(4), k), _c(j))))

        with cgutils.for_range(b, nops) as loop:
            k = loop.index
            ref = b.load(b.gep(refs, [k]))
            p = cgutils.alloca_once_value(b, ref)
            with b.if_then(cmp(">=", off, 0)):
                b.store(e.at(ref, off), p)
            p = b.load(p)
            with b.if_then(cmp("!=", b.srem(p, check(k, 0)), 0)):
                e.leave(MISALIGNED)
            b.store(p, b.gep(out_ptrs, [k]))
        fl = word(U_FLAGS_OFF)
        with b.if_then(cmp(">=", fl, 0)):
            flags = e.at(b.load(refs), fl, _LL32)
            with b.if_then(cmp("==", b.and_(flags, _c(WRITEABLE)), 0)):
                e.leave(READ_ONLY)
        with b.if_then(cmp("!=", word(U_CHECK), 0)):
            po = b.load(out_ptrs)
            o_lo, o_hi = b.add(po, check(_c(0), 1)), b.add(po, check(_c(0), 2))
            with cgutils.for_range(b, nops, start=_c(1)) as loop:
                k = loop.index
                p = b.load(b.gep(out_ptrs, [k]))
                meet = b.and_(cmp("<", b.add(p, check(k, 1)), o_hi),
                              cmp("<", o_lo, b.add(p, check(k, 2))))
                alias = b.and_(cmp("==", p, po), cmp("!=", check(k, 3), 0))
                with b.if_then(b.and_(meet, b.not_(alias))):
                    e.leave(OVERLAP)
        e.leave(OK)
        b.position_at_end(e.done)
        return b.load(e.slots[0])

    return sig, codegen


def _udrive(task, prefs, pmeta):
    """Check the call (:func:`uresolve`), then run every task of a user op; a status, never
    a silent failure."""
    ptrs = stack_words()  # the data addresses: this frame outlives every task
    status = uresolve(prefs, pmeta, ptrs)
    if status != OK:
        return status
    pptrs = address_of(ptrs)
    meta = as_pointer(pmeta, _I64)
    failed = 0
    for t in prange(meta[U_NTASKS]):
        failed += _call_utask(task, pptrs, pmeta, t)
    return TASK_FAILED if failed else OK


_ukernel_parallel = njit(parallel=True, **ENTRY)(renamed(_udrive, "_ukernel_parallel"))
_ukernel_serial = njit(parallel=False, **ENTRY)(renamed(_udrive, "_ukernel_serial"))


@njit(**ENTRY)
def _ukernel_pooled(task, prefs, pmeta, ctl, workers):
    """The checks of :func:`_udrive`, then every task of a user op on jitops' own thread pool
    (jitops.cpu.pool)."""
    ptrs = stack_words()
    status = uresolve(prefs, pmeta, ptrs)
    if status != OK:
        return status
    pptrs = address_of(ptrs)
    meta = as_pointer(pmeta, _I64)
    failed = pool.run_job(ctl, workers, pool.KIND_NARY, task, pptrs, pmeta, 0, 0,
                          meta[U_NTASKS], meta[U_VARIANT] != V_TILED)
    return TASK_FAILED if failed else OK


KERNELS = {"parallel": _ukernel_parallel, "serial": _ukernel_serial, "pooled": _ukernel_pooled}
# the drivers and the cached task (the walk and the checks are intrinsics, compiled into them)
for _k in (_ukernel_parallel, _ukernel_serial, _ukernel_pooled, _utask_cached):
    cache.enable(_k)  # never _utask_local (per-process functions would grow the cache)

_TASKS: dict = {}


def task_address(spec: UserSpec) -> int:
    """Address of the task compiled for ``spec`` (compiled, or loaded from disk, once)."""
    addr = _TASKS.get(spec)
    if addr is None:
        task = _utask_cached if spec.cacheable else _utask_local
        sig = (spec.numba_type,) + (_I64,) * 3
        registries.compile_with(lambda: task.compile(sig), builtin=False)
        cres = task.overloads[sig]
        addr = _TASKS[spec] = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return addr


def build_meta(plan: Plan, alignments: tuple[int, ...] | None = None, extents=None,
               same: tuple[bool, ...] | None = None, data_offset: int | None = None,
               threads: int | None = None) -> np.ndarray:
    """The int64 ``meta`` array of a user-op kernel (layout in the module docstring), its
    tasks balanced for ``threads`` (default: what a call from here would use).

    ``alignments`` and ``same`` (whether each operand is out's exact view) are per operand,
    out first; ``extents`` the operands' byte extents when ``out=`` was given and overlap
    must be checked, else None. ``data_offset`` defaults to :data:`~jitops.cpu.kernels.
    DATA_OFFSET` (pass -1 to hand the kernel data addresses).
    """
    block, ntasks, rows_per_task, nblk, rows, ti, tj, nti, ntj = task_geometry(
        plan, threads=threads)
    shape = plan.iter_shape
    nops = len(plan.iter_strides)
    assert nops <= MAX_OPERANDS and len(shape) <= MAX_DIMS
    alignments = alignments or (1,) * nops
    same = same or (False,) * nops
    off = DATA_OFFSET if data_offset is None else data_offset
    head = [len(shape), VARIANT_CODES[plan.variant], block, ntasks, rows_per_task, nblk, rows,
            ti, tj, nti, ntj, nops, off, FLAGS_OFFSET if off >= 0 else -1,
            int(extents is not None)]
    assert len(head) == U_HDR
    checks = []
    for k in range(nops):
        lo, hi = extents[k] if extents is not None else (0, 0)
        checks += [alignments[k], lo, hi, int(same[k])]
    return np.array(head + list(plan.iter_offsets) + list(shape)
                    + [s for st in plan.iter_strides for s in st] + checks, np.int64)
