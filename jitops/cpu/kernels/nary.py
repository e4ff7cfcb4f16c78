"""CPU kernels of N inputs: a user op's scalar function (``jitops.elementwise``) over the plan.

The built-in kernels' structure (jitops.cpu.kernels.binary) for any arity: the same tasks, meta
(jitops.cpu.kernels.layout.META), checks and driver table. A row runs ``contig`` (out unit-stride,
each input unit-stride or constant: a constant input is staged into a stack buffer, so one
vectorised loop serves every broadcast mix) or ``strided``; in a tile the first
:data:`STAGED_INPUTS` inputs running across the rows are staged as the built-ins stage theirs.

A :class:`UserSpec` (the function, the inputs', compute and result dtypes) specialises
``_utask``; its Numba type's name is stable across processes for a module-level function, so
the disk cache finds it again. Functions that cannot be found by name (lambdas, closures,
notebook cells) compile per process into ``_utask_local``, never cached on disk. The drivers
take the task's address, the address of the operands' int64 words (out first; objects or
data addresses, as the built-ins') and the meta's address; a compiled entry
(jitops.cpu.repeat.fastcall) keeps those words on its stack.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import (
    NativeValue,
    intrinsic,
    models,
    register_model,
    typeof_impl,
    unbox,
)
from numba.np.numpy_support import from_dtype

from ..compile import cache, registries
from ..compile.jit import inner, wrapper
from ..threads import pool
from .binary import (
    _LL64,
    MAX_DIMS,
    OK,
    TILE_MAX,
    V_TILED,
    _c,
    _Emit,
    _emit_loop,
    _smin,
    _stage,
    compiled_address,
    driver_table,
    emit_alias_copies,
    emit_checks,
    emit_chunked_stores,
    emit_load_word,
    emit_odometer_step,
    emit_store_word,
    emit_task_span,
    emit_tile_shifts,
    emit_unravel,
    finish,
    finish_job,
    is_alias,
    job_flags,
    note_flags,
    renamed,
    stack_words,
    staged,
)
from .half import CONVERSIONS, SMALL_INTS, bool_byte_to_float, small_int_to_float
from .layout import META
from .spec import address_of, as_pointer, load_word, storage, to_bool_byte
from .stream import STREAM_ALIGN, emit_store_fence, emit_stream_head

_I64 = types.int64

#: Most operands (out and the inputs) of a user op: a task keeps their offsets in the same
#: stack words as its odometer.
MAX_OPERANDS = MAX_DIMS

#: Elements of one broadcast (constant-along-the-row) input staged on the task's stack; also
#: the chunk of a row, so a chunk spans a whole number of streaming-aligned bytes.
BUFFER = 1024
assert BUFFER % STREAM_ALIGN == 0

#: Inputs of a user op (the first ones) a tiled task may stage: each has a stack tile of
#: ``TILE_MAX`` elements, so a task's stack stays bounded whatever the op's arity.
STAGED_INPUTS = 4

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
    """(key, cacheable): a module-level function is named by module, qualified name and a hash of
    its file (found again in another process); a lambda, closure or notebook function by its
    identity in this process only.
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
        return f"local:{module}.{qual}@{_definition_id(fn)}.{os.getpid()}", False
    return f"{module}.{qual}@{digest}", True


#: definition (see _definition) -> its number in this process, most recently used last.
_DEFINITIONS: dict[tuple, str] = {}
_DEFINITION_IDS = itertools.count(1)


def _frozen(value) -> tuple:
    """A value as part of a definition: itself (with its type: ``1 == 1.0 == True``) where it
    can be hashed, else its identity (the definition then holds it, so the id stays its)."""
    try:
        hash(value)
        return (type(value), value)
    except TypeError:
        return ("id", id(value), value)


def _names(code) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _names(c)
    return names


def _definition(fn) -> tuple:
    """What Numba compiles a function from -- its code, the values its closure cells hold and
    the globals it names (both frozen as constants at compile time), its defaults -- so that
    the same lambda made again (``jitops.elementwise(lambda a, b: a * b)`` inside a function
    called in a loop) is the same definition."""
    code = fn.__code__
    cells = tuple(_frozen(c.cell_contents) if _filled(c) else ("empty",)
                  for c in fn.__closure__ or ())
    g = fn.__globals__
    globs = tuple((n, _frozen(g[n])) for n in sorted(_names(code)) if n in g)
    return (code, cells, globs, _frozen(fn.__defaults__), id(g))


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


#: How many run-time definitions are remembered for reuse (the least recently made first
#: forgotten: one made again after that compiles again).
DEFINITIONS_MAX = 1024


def _definition_id(fn) -> str:
    """The number of ``fn``'s definition in this process: the same for every function object
    made from the same definition (identity where it cannot be read)."""
    try:
        d = _definition(fn)
        hash(d)
    except Exception:  # anything unusual about the function: its identity, as before
        return f"id{id(fn):x}"
    n = _DEFINITIONS.pop(d, None)
    if n is None:
        n = f"{next(_DEFINITION_IDS):x}"
        while len(_DEFINITIONS) >= DEFINITIONS_MAX:
            _DEFINITIONS.pop(next(iter(_DEFINITIONS)))
    _DEFINITIONS[d] = n
    return n


def registered(key: str):
    """The function registered under ``key``, or None."""
    return _FUNCTIONS.get(key)


def register(key: str, fn) -> object:
    """Record ``fn`` under ``key``; returns the function compiled for that key (the first one
    registered: later ones are the same definition)."""
    return _FUNCTIONS.setdefault(key, fn)


class UserSpec:
    """What one N-input kernel instance computes. Interned: one object per specialisation;
    ``stream`` as in :class:`~jitops.cpu.kernels.spec.KernelSpec` (its own, compiled when used)."""

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
    """The dtype function ``key`` returns for ``compute`` inputs, as recorded with a task in the
    disk cache by an earlier process (else learning it means compiling), or None. The key hashes the
    source and the index drops with any change of Numba or jitops.
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


def _walker(builder, meta, nops):
    """An emitter over ``meta`` (an int64 pointer) with ``stride(k, d)``: operand ``k``'s
    element stride along dim ``d`` (0 is out), for ``nops`` operands."""
    e = _Emit(builder, meta)
    nd = e.word(META.ND)
    base = builder.add(_c(META.SIZE + nops), nd)

    def stride(k, d):
        return e.word(builder.add(base, builder.add(builder.mul(_c(k), nd), d)))

    return e, nd, stride


def _emit_first_row(b, meta_p, t, offs_p, idx_p, n_ops, out, out_size, runs):
    """LLVM IR: every operand's offset at the start of task ``t`` into ``offs`` and the odometer
    ``idx`` at its first row; returns (rows, row length, rows-walk-one-dim). The built-ins'
    tasks (:func:`jitops.cpu.kernels.binary.emit_task_span`), tile edges moved onto the lines of out
    and of the first input of ``runs`` (``(pointer, size, runs down the rows: i1)``) that runs down.
    """
    e, nd, stride = _walker(b, meta_p, n_ops)
    word, cmp = e.word, e.cmp
    sh = META.SIZE + n_ops
    tiled = cmp("==", word(META.VARIANT), V_TILED)
    dim_j = word(b.add(_c(sh - 1), nd))
    two = b.select(cmp(">", nd, 2), b.sub(nd, _c(2)), _c(0))
    dim_i = word(b.add(_c(sh), two))
    last = b.sub(nd, _c(1))
    si, sj = emit_tile_shifts(
        b, b.select(tiled, word(META.SHIFT), _c(0)), word(META.TILE_I), word(META.TILE_J),
        (out, word(META.SIZE), out_size, stride(0, last)),
        [(q, word(META.SIZE + k), size, yes) for k, (q, size, yes) in enumerate(runs, 1)])
    span = emit_task_span(b, t, tiled, word(META.NTI), word(META.NTJ), word(META.TILE_I),
                          word(META.TILE_J), dim_i, dim_j, word(META.NBLK), word(META.BLOCK),
                          word(META.ROWS_PER_TASK), word(META.ROWS), si, sj)
    r, i0, j0, nrows, n = span
    for k in range(n_ops):
        at = b.gep(offs_p, [_c(k)])
        b.store(b.add(word(META.SIZE + k), b.mul(j0, stride(k, last))), at)
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
    return nrows, n, walk


def _emit_next_row(b, meta_p, offs_p, idx_p, walk, n_ops):
    """LLVM IR: step every operand's offset to the next row: along one dim (``walk``) or
    with the odometer."""
    e, nd, stride = _walker(b, meta_p, n_ops)
    done = e.done
    slots = [b.gep(offs_p, [_c(k)]) for k in range(n_ops)]

    def strides(d):
        return [stride(k, d) for k in range(n_ops)]

    with b.if_then(walk):
        for slot, st in zip(slots, strides(b.sub(nd, _c(2)))):
            b.store(b.add(b.load(slot), st), slot)
        b.branch(done)
    emit_odometer_step(b, nd, lambda d: e.word(b.add(_c(META.SIZE + n_ops), d)), strides,
                       slots, idx_p, done)
    b.position_at_end(done)


def _element_source(n: int, inputs: tuple[str, ...], out: str, ret) -> str:
    """One output word from ``n`` input words, as Python source: the storage words widen to
    the compute type, the user's function runs, its value is stored as out's word."""
    args = ", ".join(f"w{k}" for k in range(1, n + 1))
    vals = ", ".join(_load_expr(inputs[k - 1], f"w{k}", out) for k in range(1, n + 1))
    return (f"def element({args}):\n"
            f"    return {_store_expr(out, ret, f'FN({vals})')}\n")


def _load_expr(dtype: str, word: str, out: str = "") -> str:
    """Source of: a storage word -> its value (float16 bits widen to float32; a bool byte
    reads as True whatever nonzero value it holds, as NumPy does), converted to ``T``; into
    a float16 result, small integers and bools as :func:`jitops.cpu.kernels.spec.load_word` loads
    them."""
    if dtype in CONVERSIONS:
        return f"T({CONVERSIONS[dtype][0].__name__}({word}))"
    if out == "float16" and dtype in SMALL_INTS:
        return f"T({load_word(dtype, out).__name__}({word}))"
    if dtype == "bool":
        return f"T({word} != 0)"
    return f"T({word})"


def _store_expr(out: str, ret, value: str) -> str:
    """Source of: the returned value -> the result's storage word (integers wrap, floats
    round once; a bool is stored as 0 or 1)."""
    if out in CONVERSIONS:
        fn = CONVERSIONS[out][1].__name__
        return f"{fn}({value})" if isinstance(ret, types.Float) else f"{fn}(F64({value}))"
    if out == "bool":
        return f"to_bool_byte({value})"
    return f"OUT({value})"


_ELEMENTS: dict = {}


def _element_of(spec: UserSpecType):
    """The spec's element function (storage words in, out's word out), compiled without
    wrappers; one per (function, dtypes), whatever the spec's other flags."""
    key = (spec.fn_key, spec.inputs, spec.out, spec.compute, spec.ret)
    disp = _ELEMENTS.get(key)
    if disp is None:
        fn = _FUNCTIONS.get(spec.fn_key)
        if fn is None:
            raise TypeError(f"jitops: no user function registered as {spec.fn_key}")
        n = len(spec.inputs)
        ret = return_type(fn, np.dtype(spec.compute), n)
        out_t = types.boolean if spec.out == "bool" else storage(spec.out)
        ns = {"FN": compiled_function(fn), "T": from_dtype(np.dtype(spec.compute)),
              "OUT": out_t, "F64": types.float64, "to_bool_byte": to_bool_byte,
              **{f.__name__: f for f in (bool_byte_to_float, small_int_to_float)},
              **{f.__name__: f for pair in CONVERSIONS.values() for f in pair}}
        source = _element_source(n, spec.inputs, spec.out, ret)
        exec(compile(source, f"<jitops user op element, {n} inputs>", "exec"), ns)
        disp = _ELEMENTS[key] = inner(ns["element"])
    return disp


def _emit_first_is_out(b, alias, const, buf, p, o, n, chunk, element, general) -> None:
    """LLVM IR of a contiguous row whose out is its first input and no other (``x = f(x,
    ...)``): that input read where it is stored, a loop LLVM vectorises without a copy, never
    streamed (the line is read just before it is written); else ``general()``."""
    nops = len(p)
    others = functools.reduce(b.or_, alias[2:], ir.Constant(ir.IntType(1), 0))
    with b.if_else(b.and_(alias[1], b.not_(others))) as (direct, otherwise):
        with direct:
            def direct_at(jv):
                oq = b.gep(p[0], [b.add(o[0], jv)])
                q = [oq] + [b.select(const[k], buf[k], b.gep(p[k], [b.add(o[k], jv)]))
                            for k in range(2, nops)]
                return lambda i: element([b.gep(qk, [i]) for qk in q]), oq

            emit_chunked_stores(b, n, chunk, n, False, direct_at, "urow.inplace")
        with otherwise:
            general()


@intrinsic
def user_rows(typingctx, spec, pptrs, pmeta, t):
    """Every row of task ``t`` of a user op; returns 0, or the error status of an exception in the
    user's function. ``contig`` rows run in chunks of at most ``BUFFER`` elements, cut at the
    streaming head (:func:`~jitops.cpu.kernels.binary.emit_chunked_stores`); ``strided`` rows
    element by element. LLVM IR around one call of the spec's element function (generated as Python
    source, the task cost 0.35-0.45 s of every new user op's compile).
    """
    if not isinstance(spec, UserSpecType):
        return None
    n_in = len(spec.inputs)
    stores = [storage(spec.out)] + [storage(d) for d in spec.inputs]
    el_ty = typingctx.resolve_value_type(_element_of(spec))
    el_sig = typingctx.resolve_function_type(el_ty, tuple(stores[1:]), {})
    if el_sig is None:
        return None
    sig = _I64(spec, _I64, _I64, _I64)
    stream = spec.stream
    # the staging copy of each input that may be staged (its storage type's)
    n_staged = min(n_in, STAGED_INPUTS)
    st_ty = typingctx.resolve_value_type(_stage)
    st_sigs = [typingctx.resolve_function_type(
        st_ty, (types.CPointer(stores[k]),) * 2 + (_I64,) * 6, {})
        for k in range(1, n_staged + 1)]
    rule_ty = typingctx.resolve_value_type(staged)
    rule_sig = typingctx.resolve_function_type(rule_ty, (_I64, _I64), {})
    if rule_sig is None or any(sg is None for sg in st_sigs):
        return None

    def codegen(context, builder, signature, args):
        b = builder
        _, pptrs, pmeta, t = args
        impl = context.get_function(el_ty, el_sig)
        nops = n_in + 1
        meta = b.inttoptr(pmeta, _LL64.as_pointer())
        ptrs = b.inttoptr(pptrs, _LL64.as_pointer())
        e, nd, stride = _walker(b, meta, nops)
        last = b.sub(nd, _c(1))
        data = [context.get_data_type(st) for st in stores]
        p = [b.inttoptr(b.load(b.gep(ptrs, [_c(k)])), data[k].as_pointer())
             for k in range(nops)]
        s = [stride(k, last) for k in range(nops)]
        buf = [None] + [cgutils.alloca_once(b, data[k], size=BUFFER) for k in range(1, nops)]
        tile = [None] + [cgutils.alloca_once(b, data[k], size=TILE_MAX)
                         for k in range(1, n_staged + 1)]
        offs = cgutils.alloca_once(b, _LL64, size=MAX_DIMS)
        idx = cgutils.alloca_once(b, _LL64, size=MAX_DIMS)

        def eq(a, v):
            return b.icmp_signed("==", a, _c(v))

        # A tile's input that runs across its rows (kernels.staged, the built-ins' rule) is
        # copied into a stack tile first, read down its contiguous direction in 8 x 8 blocks
        # (kernels._stage); its rows are then contiguous, n apart, and run the vector loop
        # as the built-in kernels' do.
        down = b.select(b.icmp_signed(">=", nd, _c(2)), b.sub(nd, _c(2)), _c(0))
        rule = context.get_function(rule_ty, rule_sig)
        rules = [None] + [rule(b, (stride(k, down), s[k])) for k in range(1, n_staged + 1)]
        # the tile edges follow the first staged input with unit-stride runs down the rows
        runs = [(p[k], context.get_abi_sizeof(data[k]), b.and_(rules[k], eq(stride(k, down), 1)))
                for k in range(1, n_staged + 1)]
        nrows, n, walk = _emit_first_row(b, meta, t, offs, idx, nops, p[0],
                                         context.get_abi_sizeof(data[0]), runs)
        tiled = eq(e.word(META.VARIANT), V_TILED)
        on = [None]  # per input: whether this task stages it (an i1)
        for k in range(1, nops):
            if k > n_staged:
                on.append(ir.Constant(ir.IntType(1), 0))
                continue
            s_rows = stride(k, down)
            yes = b.and_(tiled, rules[k])
            with b.if_then(yes):
                stage = context.get_function(st_ty, st_sigs[k - 1])
                stage(b, (tile[k], p[k], b.load(b.gep(offs, [_c(k)])), s_rows, s[k], nrows,
                          n, n))
            on.append(yes)
        # where the rows read each input: its tile (unit-stride, rows n apart) or in place
        p = [p[0]] + [p[k] if k > n_staged else b.select(on[k], tile[k], p[k])
                      for k in range(1, nops)]
        s = [s[0]] + [s[k] if k > n_staged else b.select(on[k], _c(1), s[k])
                      for k in range(1, nops)]

        const = [None] + [eq(s[k], 0) for k in range(1, nops)]
        contig = eq(s[0], 1)
        for k in range(1, nops):
            contig = b.and_(contig, b.or_(const[k], eq(s[k], 1)))

        def element(ptrs_at, load=b.load):
            return impl(b, [load(q) for q in ptrs_at])

        with cgutils.for_range(b, nrows) as row:
            at_tile = b.mul(row.index, n)  # a staged input's row in its tile
            o = [b.load(b.gep(offs, [_c(k)])) for k in range(nops)]
            o = [o[0]] + [o[k] if k > n_staged else b.select(on[k], at_tile, o[k])
                          for k in range(1, nops)]
            with b.if_else(contig) as (vector, strided):
                with strided:
                    def one(i):
                        v = element([b.gep(p[k], [b.add(o[k], b.mul(i, s[k]))])
                                     for k in range(1, nops)], lambda q: emit_load_word(b, q))
                        emit_store_word(b, v, b.gep(p[0], [b.add(o[0], b.mul(i, s[0]))]))
                    _emit_loop(b, _c(0), n, one)
                with vector:
                    staged = _smin(b, n, _c(BUFFER))
                    for k in range(1, nops):
                        with b.if_then(const[k]):
                            v = b.load(b.gep(p[k], [o[k]]))
                            _emit_loop(b, _c(0), staged,
                                       lambda i, v=v, k=k: b.store(v, b.gep(buf[k], [i])))
                    h = emit_stream_head(context, b, types.CPointer(stores[0]), p[0], o[0],
                                         n) if stream else n
                    # an input that is out itself (in place) is read from its buffer, a
                    # chunk at a time (binary.emit_alias_copies)
                    alias = [None] + [b.and_(b.not_(const[k]), is_alias(b, p[0], o[0], p[k],
                                                                          o[k]))
                                      for k in range(1, nops)]
                    held = [None] + [b.or_(const[k], alias[k]) for k in range(1, nops)]
                    chunk = b.select(functools.reduce(b.or_, held[1:]), _c(BUFFER), n)

                    def chunk_at(jv):
                        q = [b.select(held[k], buf[k], b.gep(p[k], [b.add(o[k], jv)]))
                             for k in range(1, nops)]
                        return (lambda i: element([b.gep(qk, [i]) for qk in q]),
                                b.gep(p[0], [b.add(o[0], jv)]))

                    def stage(jv, m):
                        emit_alias_copies(b, [(alias[k], b.gep(p[k], [o[k]]), buf[k])
                                              for k in range(1, nops)], jv, m)

                    if stores[1] != stores[0]:
                        emit_chunked_stores(b, n, chunk, h, stream, chunk_at, "urow", None,
                                            stage)
                    else:
                        _emit_first_is_out(b, alias, const, buf, p, o, n, chunk, element,
                                           lambda: emit_chunked_stores(
                                               b, n, chunk, h, stream, chunk_at, "urow", None,
                                               stage))
            _emit_next_row(b, meta, offs, idx, walk, nops)
        if stream:
            emit_store_fence(b)
        return _c(0)

    return sig, codegen


@inner
def user_task(spec, pptrs, pmeta, t):
    """One task of a user op (:func:`user_rows`, compiled and optimised per spec)."""
    return user_rows(spec, pptrs, pmeta, t)


def _utask(spec, pptrs, pmeta, t):
    """Task ``t`` of a user op (see :func:`user_task`); returns 0, or an error status."""
    return user_task(spec, pptrs, pmeta, t)


# the tasks' code is all in user_task (optimised per spec): linked as it is
# (jitops.cpu.compile.jit.wrapper)
_utask_cached = wrapper(renamed(_utask, "_utask"))
_utask_local = wrapper(renamed(_utask, "_utask_local"))


#: ``_utask`` (operand addresses, meta, t) through its address.
_call_utask = pool.call_nary


@intrinsic
def uresolve(typingctx, prefs, pmeta, ptrs):
    """The operands' data addresses into ``ptrs`` and the checks every launch makes before
    writing (:func:`jitops.cpu.kernels.binary.emit_checks`); a status. ``prefs`` is the address of
    the operands' int64 words (out first: objects, or data addresses)."""
    if not isinstance(ptrs, types.CPointer):
        return None
    sig = _I64(_I64, _I64, ptrs)

    def codegen(context, builder, signature, args):
        prefs, pmeta, out_ptrs = args
        b = builder
        e = _Emit(b, pmeta)
        refs = b.inttoptr(prefs, _LL64.as_pointer())
        emit_checks(e, e.word(META.NOPS), lambda k: b.load(b.gep(refs, [k])), out_ptrs)
        b.position_at_end(e.done)
        return b.load(e.status)

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
    fp = job_flags(stack_words())  # on this frame, which outlives every task
    failed = 0
    for t in prange(meta[META.NTASKS]):
        failed += note_flags(fp, _call_utask(task, pptrs, pmeta, t))
    return finish(failed, pool.load(fp, 0))


def _upooled(task, prefs, pmeta, ctl, workers):
    """The checks of :func:`_udrive`, then every task of a user op on the pool."""
    ptrs = stack_words()
    status = uresolve(prefs, pmeta, ptrs)
    if status != OK:
        return status
    pptrs = address_of(ptrs)
    meta = as_pointer(pmeta, _I64)
    return finish_job(pool.run_job(ctl, workers, pool.KIND_NARY, task, pptrs, pmeta,
                                   pool.UNUSED, pool.UNUSED, meta[META.NTASKS],
                                   meta[META.VARIANT] != V_TILED))


# never _utask_local cached (per-process functions would grow the cache)
KERNELS = driver_table(_udrive, _upooled, "ukernel", c_serial=True, task=_utask_cached)
_SERIAL_C: list = []


def serial_address() -> int:
    """The C-callable address of the serial driver, ``int64 f(task, refs, meta)``: what a
    compiled entry (jitops.cpu.repeat.fastcall) calls, so that it compiles without the N-ary
    driver until a user op needs it."""
    if not _SERIAL_C:
        d, sig = KERNELS["serial"], (_I64,) * 3
        registries.compile_with(lambda: d.compile(sig))
        cres = d.overloads[sig]
        _SERIAL_C.append(cres.library.get_pointer_to_function(cres.fndesc.llvm_cfunc_wrapper_name))
    return _SERIAL_C[0]
_TASKS: dict = {}


def task_address(spec: UserSpec) -> int:
    """Address of the task compiled for ``spec``."""
    return compiled_address(_utask_cached if spec.cacheable else _utask_local, spec, _TASKS,
                            3, builtin=False)
