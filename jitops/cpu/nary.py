"""CPU kernels of N inputs: a user op's scalar function (``jitops.elementwise``) over the plan.

The same structure as the built-in binary kernels (jitops.cpu.kernels), for any number of
inputs: the iteration space is cut into the same tasks (:func:`~jitops.cpu.kernels.
task_geometry`: blocks of one long row, runs of short rows, or 2-d tiles for operands that
disagree on layout), a serial and a parallel driver run them, and a task's failure (an
exception inside the user's function) reaches the caller as a status, never as an unwritten
element.

Each row runs one of two loops (:func:`user_rows`, LLVM IR around one call of the spec's
element function -- the user's function between the loads and the store):

* ``contig`` -- ``out`` unit-stride and every input unit-stride or constant along the row
  (the common broadcasts: ``x * w + b`` with ``w``, ``b`` per channel). A constant input is
  read once per row into a small buffer on the task's stack, so the loop body reads every
  input the same way and LLVM vectorises it whatever the mix of broadcast inputs (one
  compiled loop instead of one per pattern);
* ``strided`` -- anything else.

In a tile (``X.T * w + b``), each of the first :data:`STAGED_INPUTS` inputs that runs across
the tile's rows is first copied into a stack tile, read down its contiguous direction in 8 x 8
blocks as the built-in kernels do (:func:`~jitops.cpu.kernels._stage`); the tile's rows then
read it contiguously and run the ``contig`` loop (4096^2 float32 ``X.T * Y - Y``: 11-12 ms
against 31-33 ms read at the strides, with non-temporal stores for the rows).

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
     data offset, flags offset, check overlap, tile shift bits,
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
import itertools
import os

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
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

from ..core.plan import Plan
from . import cache, pool, registries
from .half import CONVERSIONS, SMALL_INTS, bool_byte_to_float, small_int_to_float
from .jit import ENTRY, driver, inner, wrapper
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
    TILE_MAX,
    V_TILED,
    VARIANT_CODES,
    WRITEABLE,
    _c,
    _Emit,
    _emit_loop,
    _smin,
    _stage,
    emit_chunked_stores,
    emit_load_word,
    emit_odometer_step,
    emit_store_word,
    emit_task_span,
    emit_tile_shifts,
    emit_unravel,
    finish,
    finish_job,
    job_flags,
    note_flags,
    renamed,
    stack_words,
    staged,
    task_geometry,
)
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

# meta header (int64)
U_ND, U_VARIANT, U_BLOCK, U_NTASKS, U_ROWS_PER_TASK, U_NBLK, U_ROWS = 0, 1, 2, 3, 4, 5, 6
U_TILE_I, U_TILE_J, U_NTI, U_NTJ, U_NOPS = 7, 8, 9, 10, 11
U_DATA_OFF, U_FLAGS_OFF, U_CHECK, U_SHIFT = 12, 13, 14, 15
U_HDR = 16


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


def register(key: str, fn) -> object:
    """Record ``fn`` under ``key``; returns the function compiled for that key (the first one
    registered: later ones are the same definition)."""
    return _FUNCTIONS.setdefault(key, fn)


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


def _walker(builder, meta, nops):
    """An emitter over ``meta`` (an int64 pointer) with ``stride(k, d)``: operand ``k``'s
    element stride along dim ``d`` (0 is out), for ``nops`` operands."""
    e = _Emit(builder, meta)
    nd = e.word(U_ND)
    base = builder.add(_c(U_HDR + nops), nd)

    def stride(k, d):
        return e.word(builder.add(base, builder.add(builder.mul(_c(k), nd), d)))

    return e, nd, stride


def _emit_first_row(b, meta_p, t, offs_p, idx_p, n_ops, out, out_size, runs):
    """LLVM IR: set ``offs`` to every operand's offset at the start of task ``t`` and the
    odometer ``idx`` to its first row; returns (rows, row length, rows-walk-one-dim).

    The same tasks as the built-in kernels, decoded by the same IR
    (:func:`jitops.cpu.kernels.emit_task_span`), for ``n_ops`` operands (the loops over them
    unrolled here); tiled, with the tile edges moved onto the cache lines of ``out`` (its
    data pointer and element size) and of the first input 1, 2, ... of ``runs`` (each
    ``(pointer, size, staged from unit-stride runs: an i1)``) that runs down the rows
    (:func:`jitops.cpu.kernels.tile_shifts`)."""
    e, nd, stride = _walker(b, meta_p, n_ops)
    word, cmp = e.word, e.cmp
    sh = U_HDR + n_ops
    tiled = cmp("==", word(U_VARIANT), V_TILED)
    dim_j = word(b.add(_c(sh - 1), nd))
    two = b.select(cmp(">", nd, 2), b.sub(nd, _c(2)), _c(0))
    dim_i = word(b.add(_c(sh), two))
    last = b.sub(nd, _c(1))
    si, sj = emit_tile_shifts(
        b, b.select(tiled, word(U_SHIFT), _c(0)), word(U_TILE_I), word(U_TILE_J),
        (out, word(U_HDR), out_size, stride(0, last)),
        [(q, word(U_HDR + k), size, yes) for k, (q, size, yes) in enumerate(runs, 1)])
    span = emit_task_span(b, t, tiled, word(U_NTI), word(U_NTJ), word(U_TILE_I),
                          word(U_TILE_J), dim_i, dim_j, word(U_NBLK), word(U_BLOCK),
                          word(U_ROWS_PER_TASK), word(U_ROWS), si, sj)
    r, i0, j0, nrows, n = span
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
    emit_odometer_step(b, nd, lambda d: e.word(b.add(_c(U_HDR + n_ops), d)), strides,
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
    a float16 result, small integers and bools as :func:`jitops.cpu.spec.load_word` loads
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


@intrinsic
def user_rows(typingctx, spec, pptrs, pmeta, t):
    """Every row of task ``t`` of a user op; returns 0 (an exception in the user's function
    returns its error status instead, through Numba's calling convention).

    Each row runs one of the module's two loops. ``contig`` runs in chunks of at most
    ``BUFFER`` elements (the whole row where no input is constant), the chunks cut at the
    streaming head where the spec streams (:func:`~jitops.cpu.kernels.emit_chunked_stores`);
    ``strided`` runs element by element at the strides.

    LLVM IR around one call of the spec's element function (the user's function between the
    loads and the store, a small compiled function typed here and linked in): generated as
    Python source, the task cost 0.35-0.45 s of Numba typing and lowering that every new
    user op (and every new dtype of one) waited for.
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
        tiled = eq(e.word(U_VARIANT), V_TILED)
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
        any_const = ir.Constant(ir.IntType(1), 0)
        for k in range(1, nops):
            any_const = b.or_(any_const, const[k])

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
                    chunk = b.select(any_const, _c(BUFFER), n)

                    def chunk_at(jv):
                        q = [b.select(const[k], buf[k], b.gep(p[k], [b.add(o[k], jv)]))
                             for k in range(1, nops)]
                        return (lambda i: element([b.gep(qk, [i]) for qk in q]),
                                b.gep(p[0], [b.add(o[0], jv)]))

                    emit_chunked_stores(b, n, chunk, h, stream, chunk_at, "urow")
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
# (jitops.cpu.jit.wrapper)
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
    fp = job_flags(stack_words())  # on this frame, which outlives every task
    failed = 0
    for t in prange(meta[U_NTASKS]):
        failed += note_flags(fp, _call_utask(task, pptrs, pmeta, t))
    return finish(failed, pool.load(fp, 0))


_ukernel_parallel = njit(parallel=True, **ENTRY)(renamed(_udrive, "_ukernel_parallel"))
_ukernel_serial = driver(renamed(_udrive, "_ukernel_serial"))


@driver
def _ukernel_pooled(task, prefs, pmeta, ctl, workers):
    """The checks of :func:`_udrive`, then every task of a user op on jitops' own thread pool
    (jitops.cpu.pool)."""
    ptrs = stack_words()
    status = uresolve(prefs, pmeta, ptrs)
    if status != OK:
        return status
    pptrs = address_of(ptrs)
    meta = as_pointer(pmeta, _I64)
    return finish_job(pool.run_job(ctl, workers, pool.KIND_NARY, task, pptrs, pmeta,
                                   pool.UNUSED, pool.UNUSED, meta[U_NTASKS],
                                   meta[U_VARIANT] != V_TILED))


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
    block, ntasks, rows_per_task, nblk, rows, ti, tj, nti, ntj, shift = task_geometry(
        plan, threads=threads)
    shape = plan.iter_shape
    nops = len(plan.iter_strides)
    assert nops <= MAX_OPERANDS and len(shape) <= MAX_DIMS
    alignments = alignments or (1,) * nops
    same = same or (False,) * nops
    off = DATA_OFFSET if data_offset is None else data_offset
    head = [len(shape), VARIANT_CODES[plan.variant], block, ntasks, rows_per_task, nblk, rows,
            ti, tj, nti, ntj, nops, off, FLAGS_OFFSET if off >= 0 else -1,
            int(extents is not None), shift]
    assert len(head) == U_HDR
    checks = []
    for k in range(nops):
        lo, hi = extents[k] if extents is not None else (0, 0)
        checks += [alignments[k], lo, hi, int(same[k])]
    return np.array(head + list(plan.iter_offsets) + list(shape)
                    + [s for st in plan.iter_strides for s in st] + checks, np.int64)
