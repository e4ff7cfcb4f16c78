"""CPU kernels of a pass whose results are stored or reduced (jitops.core.reduction plans it).

A task walks its part of the plan's space row by row (the innermost axis), in blocks of
:data:`BLOCK` elements: the map -- a scalar function of up to ``MAX_INPUTS`` inputs
returning up to :data:`MAX_RESULTS` values (a user op, a gradient rule of jitops.core.grads,
sum_to's identity) -- writes each result's values into a small buffer, then each result
takes its block by its *how* (a compile-time part of the spec) and its mode (the plan's):

* ``STORE``: written to its array at its strides, in its dtype;
* ``ROW``: the result reduces the row (its stride there is 0): a block reduced at once (a
  sum with the compiler's vector lanes), a sum's blocks merged pairwise through a binary
  counter, then combined into the accumulator element;
* ``COLUMN``: the result keeps the row's axis and reduces an outer one: each value combined
  into its accumulator element in order (NumPy's order for an outer reduction).

Short rows (a row-broadcast's, at most half a block) are mapped a block of whole rows at a
time (:func:`map_rows`) where no result reduces the row, and sum_to's sum over an outer axis
takes a whole run of rows in one loop (:func:`column_rows`); rows that share one accumulator
row are added four per visit of it. The same values are combined in the same order as row
by row, without a call per row.

Accumulators are float64 for float sums and products (complex128, int64, uint64 otherwise),
so a float32 sum keeps ~29 more bits than NumPy's float32 pairwise sum; ``max``/``min``
propagate NaN as NumPy's; ``any``/``all`` are bytes. A task whose split axis a result
reduces combines into that result's own partial row (``PARTIAL`` bytes apart); the host
combines the rows in task order. Tasks run on the pool as user-op tasks do (``KIND_NARY``):
the spec-free drivers take the task's address. No floating-point flags are reported.
"""

from __future__ import annotations

import textwrap

import numpy as np
from llvmlite import ir
from numba import prange, types
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

from ...core.reduction import identity
from ..compile.jit import INNER, inner, wrapper
from ..threads import pool
from . import lean as _lean
from . import nary
from .binary import (
    compiled_address,
    driver_table,
    finish,
    finish_job,
    job_flags,
    note_flags,
    renamed,
    stack_words,
)
from .half import CONVERSIONS
from .layout import MAX_RESULTS, RMETA
from .layout import R_DIMS as MAX_DIMS
from .spec import as_pointer, cast_to, load_word, storage, to_bool_byte

_I64 = types.int64

#: Elements of a row a task maps (and reduces) at a time: the buffers stay in L1.
BLOCK = 512
#: Bytes an input's staged block may take (complex128).
_STAGE_BYTES = 16 * BLOCK + 192  # (apart by a non-power of two: no cache-set conflicts)

#: What a result does with a block (the plan's choice; its *how* is the spec's).
STORE, ROW, COLUMN = 0, 1, 2
class ReduceSpecType(types.Dummy):
    """Numba type of a :class:`ReduceSpec`; all information is in its (stable) name."""

    def __init__(self, fn_key: str, inputs: tuple[str, ...], compute: str,
                 results: tuple[tuple[str, str, str], ...], direct: bool):
        self.fn_key, self.inputs, self.compute = fn_key, inputs, compute
        self.results, self.direct = results, direct
        res = ",".join(":".join(r) for r in results)
        super().__init__(name=f"jitops.ReduceSpec({fn_key};{','.join(inputs)};{compute};"
                              f"{res}{';direct' if direct else ''})")

    def __reduce__(self):  # the cache index pickles signatures
        return (ReduceSpecType, (self.fn_key, self.inputs, self.compute, self.results,
                                 self.direct))


register_model(ReduceSpecType)(models.OpaqueModel)


@unbox(ReduceSpecType)
def _unbox_spec(typ, obj, c):
    return NativeValue(c.context.get_constant_null(types.voidptr))


class ReduceSpec:
    """What one reduction task computes: the function (its key, registered with
    jitops.cpu.kernels.nary.register), the inputs' dtype names and the compute dtype, per result its
    ``(dtype, how, accumulator)`` names; ``direct``: the function is the identity of one
    input (its unit-stride rows are then reduced in place). Interned."""

    __slots__ = ("fn_key", "inputs", "compute", "results", "direct", "cacheable",
                 "numba_type")
    _interned: dict = {}

    def __new__(cls, fn_key: str, inputs: tuple[str, ...], compute: str,
                results: tuple[tuple[str, str, str], ...], direct: bool, cacheable: bool):
        key = (fn_key, inputs, compute, results, direct)
        s = cls._interned.get(key)
        if s is None:
            s = object.__new__(cls)
            s.fn_key, s.inputs, s.compute, s.results, s.direct = key
            s.cacheable = cacheable
            s.numba_type = ReduceSpecType(*key)
            cls._interned[key] = s
        return s


@typeof_impl.register(ReduceSpec)
def _typeof_spec(val, c):
    return val.numba_type


# -- the reductions' pieces ------------------------------------------------------------

@inner
def _sum(a, v):
    return a + v


@inner
def _prod(a, v):
    return a * v


@intrinsic
def _order_key(typingctx, x):
    """A float's bits as a signed integer ordered as the float is (-0.0 as +0.0): compared as
    integers, which raise nothing whatever lanes the vectoriser computes."""
    if not isinstance(x, types.Float):
        return None
    width = x.bitwidth
    sig = (types.int64 if width == 64 else types.int32)(x)

    def codegen(context, builder, signature, args):
        v = builder.fadd(args[0], ir.Constant(args[0].type, 0.0))  # -0.0 + 0.0 is +0.0
        bits = builder.bitcast(v, ir.IntType(width))
        flip = builder.lshr(builder.ashr(bits, ir.Constant(bits.type, width - 1)),
                            ir.Constant(bits.type, 1))  # a negative's magnitude bits
        return builder.xor(bits, flip)

    return sig, codegen


def _quiet(greater: bool, A):
    """NumPy's maximum (``greater``) or minimum of an accumulator ``a`` of type ``A`` and a
    value: a NaN wins (the earlier one). Compared quietly: NaNs are replaced by 0 (equality
    tests are quiet) and floats compared by :func:`_order_key`, since LLVM compares the
    unreplaced value in the lanes whose answer the NaN test discards, and an ordered float
    comparison of a NaN raises *invalid*."""
    z = A(0)
    if not isinstance(A, types.Float):
        def pick(a, v):
            return a if (a >= v if greater else a <= v) else v
        return inner(pick)

    def pick(a, v):
        a_ok, v_ok = a == a, v == v
        x = _order_key(a if a_ok else z)
        y = _order_key(v if v_ok else z)
        return a if not a_ok or (v_ok and (x >= y if greater else x <= y)) else v

    return inner(pick)


@inner
def _any(a, v):
    return 1 if a != 0 or v != 0 else 0


@inner
def _all(a, v):
    return 1 if a != 0 and v != 0 else 0


@inner
def _keep(v):
    return v


_COMBINE = {"sum": _sum, "prod": _prod, "any": _any, "all": _all}
_QUIET: dict = {}


def combiner(how: str, A):
    """The function combining a value into an accumulator of Numba type ``A`` by ``how``."""
    if how not in ("max", "min"):
        return _COMBINE[how]
    f = _QUIET.get((how, A))
    if f is None:
        f = _QUIET[how, A] = _quiet(how == "max", A)
    return f


@inner(fastmath={"reassoc"})
def _block_sum(buf, lo, hi, zero):
    """``buf[lo:hi]`` summed in ``zero``'s type, reassociated: the compiler's vector lanes
    each sum every lane-th element, then the lanes are added -- a fixed order for the
    machine code, whatever the thread count."""
    s = zero
    for k in range(lo, hi):
        s += buf[k]
    return s


@inner(fastmath={"reassoc"})
def _block_prod(buf, lo, hi, one):
    s = one
    for k in range(lo, hi):
        s *= buf[k]
    return s


def _folding(combine):
    def block(buf, lo, hi, init):
        s = init
        for k in range(lo, hi):
            s = combine(s, buf[k])
        return s
    return inner(block)


_BLOCK = {"sum": _block_sum, "prod": _block_prod,
          **{h: _folding(_COMBINE[h]) for h in ("any", "all")}}
_FOLDS: dict = {}


def blocker(how: str, A):
    """The function reducing a block into an accumulator of Numba type ``A`` by ``how``."""
    if how not in ("max", "min"):
        return _BLOCK[how]
    f = _FOLDS.get((how, A))
    if f is None:
        f = _FOLDS[how, A] = _folding(combiner(how, A))
    return f


@inner
def _popcount(c):
    n = 0
    while c:
        n += c & 1
        c >>= 1
    return n


#: Elements a sum of values as wide as its accumulator (float64, complex128) adds in vector
#: lanes before the pairwise merging: about NumPy's ``pairwise_sum`` leaf (128), so its error
#: bound is NumPy's. A narrower value (float32 in float64, integers) takes a whole block.
LEAF = 128


def _leaf(acc: str, value) -> int:
    """The leaf of a sum of ``value`` (a Numba type, or an array/pointer of it) in ``acc``."""
    value = getattr(value, "dtype", value)
    if isinstance(value, (types.Float, types.Complex)) and \
            np.dtype(acc).itemsize <= np.dtype(str(value)).itemsize:
        return LEAF
    return BLOCK


@inner
def _push(lev, count, v):
    """Push block sum ``v`` as the row's block ``count``: ``lev`` holds one sum per set bit of
    ``count`` (the largest first), so equal-sized sums merge like a binary counter's carries
    and every element sits about log2(blocks) additions deep (a pairwise sum)."""
    top = _popcount(count)
    while count & 1:
        top -= 1
        v = lev[top] + v
        count >>= 1
    lev[top] = v


@inner
def _row_total(lev, count, zero):
    """The row's pairwise levels (``count`` blocks pushed) summed, the smallest first."""
    top = _popcount(count)
    v = zero
    if top:
        v = lev[top - 1]
        for i in range(top - 2, -1, -1):
            v = lev[i] + v
    return v


@inner
def _stage(p, o, s, m, st):
    """``m`` elements of ``p`` from ``o`` every ``s`` into ``st`` (a broadcast input: one)."""
    if s == 0:
        v = p[o]
        for k in range(m):
            st[k] = v
    else:
        for k in range(m):
            st[k] = p[o + k * s]


@inner
def _stage_rows(p, o, s, jump, n, rows, st):
    """``rows`` rows of ``n`` elements of ``p`` (row ``r`` from ``o + r * jump``, every ``s``)
    into ``st``, one after another."""
    for r in range(rows):
        base = o + r * jump
        for k in range(n):
            st[r * n + k] = p[base + k * s]


def _itemsize(name: str) -> int:
    return 2 if name in CONVERSIONS else 1 if name == "bool" else np.dtype(name).itemsize


def _function(spec):
    fn = nary.registered(spec.fn_key)
    if fn is None:
        raise TypeError(f"jitops: no function registered as {spec.fn_key}")
    return fn


def value_types(spec) -> list:
    """The Numba types the spec's function returns, one per result."""
    ret = nary.return_type(_function(spec), np.dtype(spec.compute), len(spec.inputs))
    return list(ret) if isinstance(ret, types.BaseTuple) else [ret]


def map_block(spec, ptrs, offs, steps, m, bufs, st):
    """Map ``m`` elements of a row into the results' buffers: input ``i`` read at
    ``offs[i] + k * steps[i]``, staged at ``st`` first unless unit-stride, so that the map
    itself is one unit-stride loop (vectorised) whatever the broadcast mix."""


def _prologue(spec, ns: dict, rows: bool = False) -> tuple[list[str], str]:
    """Source lines putting each input's ``m`` row values behind a pointer ``q<i>`` (in
    place, or staged at ``st``), and the argument list of the function's call at ``j``;
    ``rows``: ``rows`` rows of ``n`` values instead, row ``r`` ``jumps[i]`` apart (in place
    where they follow one another)."""
    lines, args = [], []
    for i, name in enumerate(spec.inputs):
        ns[f"S{i}"], ns[f"L{i}"] = storage(name), load_word(name)
        src, at = f"as_pointer(ptrs[{i}], S{i}), offs[{i}], steps[{i}]", \
            f"as_pointer(st + {i * _STAGE_BYTES}, S{i})"
        lines += [f"    a{i} = ptrs[{i}] + offs[{i}] * {_itemsize(name)}"]
        lines += [f"    if steps[{i}] != 1 or (rows > 1 and jumps[{i}] != n):",
                  f"        _stage_rows({src}, jumps[{i}], n, rows, {at})"] if rows else \
            [f"    if steps[{i}] != 1:", f"        _stage({src}, m, {at})"]
        lines += [f"        a{i} = st + {i * _STAGE_BYTES}", f"    q{i} = as_pointer(a{i}, S{i})"]
        args.append(f"T(L{i}(q{i}[j]))")
    return lines, ", ".join(args)


def _map_source(spec, ns: dict, params: str, count: str, rows: bool = False):
    """The map's compiled body: the inputs behind pointers (:func:`_prologue`), then the
    function at each of ``count`` positions, its values into the results' buffers."""
    k = len(spec.results)
    lines, args = _prologue(spec, ns, rows)
    lines = [f"def impl(spec, {params}):", *lines]
    lines += [f"    b{r} = bufs[{r}]" for r in range(k)]

    def loop(fn: str, indent: str = "    ") -> list[str]:
        if len(value_types(spec)) == 1 and k == 1:
            return [f"{indent}for j in range({count}):", f"{indent}    b0[j] = {fn}({args})"]
        names = ", ".join(f"g{r}" for r in range(k))
        return [f"{indent}for j in range({count}):", f"{indent}    {names} = {fn}({args})",
                *(f"{indent}    b{r}[j] = g{r}" for r in range(k))]

    lean = _lean.of_function(_function(spec), spec.compute)
    if lean is None:
        lines += loop("FN")
    else:  # every lane calm: the lean form (counted: a sum vectorises, an and did not)
        ns["CALM"], ns["CORE"] = lean
        lines += ["    calm = 0", f"    for j in range({count}):",
                  f"        calm += CALM({args})", f"    if calm == {count}:",
                  *loop("CORE", "        "), "    else:", *loop("FN", "        ")]
    what = "row map" if rows else "map"
    exec(compile("\n".join(lines) + "\n", f"<jitops {what} of {len(spec.inputs)} inputs>",
                 "exec"), ns)
    return ns["impl"]


def _namespace(spec) -> dict:
    return {"FN": nary.compiled_function(_function(spec)),
            "T": from_dtype(np.dtype(spec.compute)), "as_pointer": as_pointer,
            "_stage": _stage, "_stage_rows": _stage_rows, "_push": _push}


@overload(map_block, jit_options=INNER)
def _ov_map_block(spec, ptrs, offs, steps, m, bufs, st):
    if not isinstance(spec, ReduceSpecType):
        return None
    return _map_source(spec, _namespace(spec), "ptrs, offs, steps, m, bufs, st", "m")


def sum_block(spec, ptrs, offs, steps, m, st, lev, count):
    """The one result's values of ``m`` row elements summed as they are computed (no
    buffer; the sum reassociated into vector lanes, the function's own arithmetic not),
    pushed on the row's pairwise levels; returns the blocks counted."""


@overload(sum_block, jit_options={**INNER, "fastmath": {"reassoc"}})
def _ov_sum_block(spec, ptrs, offs, steps, m, st, lev, count):
    if not isinstance(spec, ReduceSpecType):
        return None
    ns = _namespace(spec)
    ns["A"] = from_dtype(np.dtype(spec.results[0][2]))
    lines, args = _prologue(spec, ns)
    leaf = _leaf(spec.results[0][2], value_types(spec)[0])
    lines = ["def impl(spec, ptrs, offs, steps, m, st, lev, count):", *lines]
    if leaf >= BLOCK:  # one leaf: the plainest loop (nesting it cost a third here)
        lines += ["    s = A(0)", "    for j in range(m):", f"        s += A(FN({args}))",
                  "    _push(lev, count, s)", "    return count + 1"]
    else:
        lines += [f"    for j0 in range(0, m, {leaf}):", "        s = A(0)",
                  f"        for j in range(j0, min(m, j0 + {leaf})):",
                  f"            s += A(FN({args}))",
                  "        _push(lev, count, s)", "        count += 1", "    return count"]
    exec(compile("\n".join(lines) + "\n", "<jitops fused sum>", "exec"), ns)
    return ns["impl"]


def _per_result(stub, ov, name: str):
    """``stub`` named ``name`` and overloaded by ``ov``: a function of one result index (its
    overload reads that result's dtype and reduction from the spec, so each index is its own
    function)."""
    stub.__name__ = stub.__qualname__ = name
    overload(stub, jit_options=INNER)(ov)
    return stub


def _make_sink(r: int):
    def sink(spec, mode, buf, m, addr, o, s, lev, count):
        """Result ``r``'s share of a block (module docstring); returns the blocks counted
        into its row's state ``lev`` (``count``)."""

    def ov(spec, mode, buf, m, addr, o, s, lev, count):
        if not isinstance(spec, ReduceSpecType):
            return None
        name, how, acc = spec.results[r]
        St = storage(name)
        put = CONVERSIONS[name][1] if name in CONVERSIONS else \
            to_bool_byte if name == "bool" else cast_to(St)
        size = _itemsize(name)
        if how == "store":
            def store(spec, mode, buf, m, addr, o, s, lev, count):
                if s == 1:  # unit-stride: a loop the compiler vectorises
                    q = as_pointer(addr + o * size, St)
                    for k in range(m):
                        q[k] = put(buf[k])
                else:
                    p = as_pointer(addr, St)
                    for k in range(m):
                        p[o + k * s] = put(buf[k])
                return count
            return store
        A = from_dtype(np.dtype(acc))
        asize = np.dtype(acc).itemsize
        combine, block = combiner(how, A), blocker(how, A)
        ident = A(identity(how, np.dtype(acc)))
        pairwise = how == "sum"
        leaf = _leaf(acc, buf)
        # any/all test the value itself (0.5 is true), the others take it in A
        conv = _keep if how in ("any", "all") else A

        def impl(spec, mode, buf, m, addr, o, s, lev, count):
            if mode == COLUMN:
                if s == 1:
                    q = as_pointer(addr + o * asize, A)
                    for k in range(m):
                        q[k] = A(combine(q[k], conv(buf[k])))
                else:
                    a = as_pointer(addr, A)
                    for k in range(m):
                        a[o + k * s] = A(combine(a[o + k * s], conv(buf[k])))
                return count
            # ROW: the block reduced, then merged with the row's earlier blocks
            if pairwise:  # a sum: leaves of `leaf` pushed on the row's pairwise levels
                for k0 in range(0, m, leaf):
                    _push(lev, count, A(block(buf, k0, min(m, k0 + leaf), ident)))
                    count += 1
                return count
            v = A(block(buf, 0, m, ident))
            lev[0] = v if count == 0 else A(combine(lev[0], v))
            return count + 1

        return impl

    return _per_result(sink, ov, f"sink{r}")


SINKS = [_make_sink(r) for r in range(MAX_RESULTS)]


def map_rows(spec, ptrs, offs, steps, jumps, n, rows, bufs, st):
    """Map ``rows`` short rows of ``n`` elements (input ``i``'s row ``r`` at ``offs[i] +
    r * jumps[i]``) into the results' buffers, one row after another: one call and one
    vectorised loop for the block where :func:`map_block` would make one per row."""


@overload(map_rows, jit_options=INNER)
def _ov_map_rows(spec, ptrs, offs, steps, jumps, n, rows, bufs, st):
    if not isinstance(spec, ReduceSpecType):
        return None
    return _map_source(spec, _namespace(spec), "ptrs, offs, steps, jumps, n, rows, bufs, st",
                       "n * rows", rows=True)


def _make_rows_sink(r: int):
    def sink(spec, buf, n, rows, addr, o, s, jump):
        """Result ``r``'s share of a block of short rows (:func:`map_rows`): stored, or each
        value combined into its accumulator element row after row (the COLUMN order)."""

    def ov(spec, buf, n, rows, addr, o, s, jump):
        if not isinstance(spec, ReduceSpecType):
            return None
        name, how, acc = spec.results[r]
        if how == "store":
            St = storage(name)
            put = CONVERSIONS[name][1] if name in CONVERSIONS else \
                to_bool_byte if name == "bool" else cast_to(St)

            def store(spec, buf, n, rows, addr, o, s, jump):
                p = as_pointer(addr, St)
                if s == 1 and jump == n:  # the block's rows are one run of the array
                    for j in range(n * rows):
                        p[o + j] = put(buf[j])
                else:
                    for i in range(rows):
                        for k in range(n):
                            p[o + i * jump + k * s] = put(buf[i * n + k])
                return 0
            return store
        A = from_dtype(np.dtype(acc))
        asize = np.dtype(acc).itemsize
        combine = combiner(how, A)
        conv = _keep if how in ("any", "all") else A

        def impl(spec, buf, n, rows, addr, o, s, jump):
            a = as_pointer(addr, A)
            i0 = 0
            if s == 1 and jump == 0:  # one accumulator row: four rows per visit, in order
                q = as_pointer(addr + o * asize, A)
                while i0 + 4 <= rows:
                    j = i0 * n
                    for k in range(n):
                        q[k] = A(combine(A(combine(A(combine(A(combine(
                            q[k], conv(buf[j + k]))), conv(buf[j + n + k]))),
                            conv(buf[j + 2 * n + k]))), conv(buf[j + 3 * n + k])))
                    i0 += 4
            for i in range(i0, rows):
                at = o + i * jump
                for k in range(n):
                    a[at + k * s] = A(combine(a[at + k * s], conv(buf[i * n + k])))
            return 0
        return impl

    return _per_result(sink, ov, f"rows_sink{r}")


ROWS_SINKS = [_make_rows_sink(r) for r in range(MAX_RESULTS)]


def column_rows(spec, src, rows, m, run_in, addr, o, run_out, s):
    """A direct sum over an outer axis: ``rows`` rows of ``m`` unit-stride input words from
    address ``src`` (``run_in`` elements apart) each added into its accumulator row (from
    element ``o`` of the result, ``run_out`` apart, elements ``s`` apart), row after row: the
    COLUMN sink's order, in one loop instead of one call per row."""


@overload(column_rows, jit_options=INNER)
def _ov_column_rows(spec, src, rows, m, run_in, addr, o, run_out, s):
    if not isinstance(spec, ReduceSpecType):
        return None
    S, A = storage(spec.inputs[0]), from_dtype(np.dtype(spec.results[0][2]))
    size, asize = _itemsize(spec.inputs[0]), np.dtype(spec.results[0][2]).itemsize

    def impl(spec, src, rows, m, run_in, addr, o, run_out, s):
        r0 = 0
        if s == 1 and run_out == 0:  # one accumulator row: four rows added per visit of it
            a = as_pointer(addr + o * asize, A)
            step = run_in * size
            while r0 + 4 <= rows:
                q0 = as_pointer(src + r0 * step, S)
                q1 = as_pointer(src + (r0 + 1) * step, S)
                q2 = as_pointer(src + (r0 + 2) * step, S)
                q3 = as_pointer(src + (r0 + 3) * step, S)
                for k in range(m):  # (the rows' order: the same additions, the same bits)
                    a[k] = A(A(A(A(a[k] + A(q0[k])) + A(q1[k])) + A(q2[k])) + A(q3[k]))
                r0 += 4
        for r in range(r0, rows):
            q = as_pointer(src + r * run_in * size, S)
            if s == 1:  # unit-stride: a loop the compiler vectorises
                a = as_pointer(addr + (o + r * run_out) * asize, A)
                for k in range(m):
                    a[k] = A(a[k] + A(q[k]))
            else:
                a = as_pointer(addr, A)
                at = o + r * run_out
                for k in range(m):
                    a[at + k * s] = A(a[at + k * s] + A(q[k]))
        return 0
    return impl


def row_end(spec, r, addr, o, lev, count):
    """Combine result ``r``'s row total (``count`` blocks in ``lev``) into its element."""


@overload(row_end, jit_options=INNER)
def _ov_row_end(spec, r, addr, o, lev, count):
    if not isinstance(spec, ReduceSpecType) or not isinstance(r, types.IntegerLiteral):
        return None
    name, how, acc = spec.results[r.literal_value]
    if how == "store":
        return lambda spec, r, addr, o, lev, count: None
    A = from_dtype(np.dtype(acc))
    combine = combiner(how, A)
    ident = A(identity(how, np.dtype(acc)))
    if how == "sum":
        def impl(spec, r, addr, o, lev, count):
            a = as_pointer(addr, A)
            a[o] = A(a[o] + _row_total(lev, count, ident))
    else:
        def impl(spec, r, addr, o, lev, count):
            if count:
                a = as_pointer(addr, A)
                a[o] = A(combine(a[o], lev[0]))
    return impl


def reduce_task(spec, pptrs, pmeta, t):
    """Task ``t`` of a pass (module docstring); returns 0."""


@overload(reduce_task, jit_options=INNER)
def _ov_reduce_task(spec, pptrs, pmeta, t):
    if not isinstance(spec, ReduceSpecType):
        return None
    nres = len(spec.results)
    vals = value_types(spec)
    vals = vals if len(vals) == nres else vals * nres
    name0 = spec.inputs[0]
    # sum_to reads its input's words (not float16, bfloat16 or bool bytes) in place; a sum
    # in a wider accumulator gains nothing from pairwise blocks: integers add exactly
    # (modulo 2**64), and float32's rounding in float64 is 2**-29 of its own
    direct = spec.direct and name0 not in CONVERSIONS and name0 != "bool"
    wide = direct and np.dtype(spec.results[0][2]).itemsize > _itemsize(name0) \
        and name0 != "complex64" and spec.results[0][1] == "sum"
    ns = {"np": np, "as_pointer": as_pointer, "stack_words": stack_words, "RMETA": RMETA,
          "MAX_DIMS": MAX_DIMS, "BLOCK": BLOCK, "map_block": map_block, "row_end": row_end,
          "sum_block": sum_block, "column_rows": column_rows, "map_rows": map_rows,
          **{f"rows_sink{r}": ROWS_SINKS[r] for r in range(nres)},
          "_I64": _I64, "S0": storage(name0), "STAGE": _STAGE_BYTES * len(spec.inputs),
          **{f"sink{r}": SINKS[r] for r in range(nres)},
          **{f"V{r}": vals[r] for r in range(nres)},
          **{f"A{r}": from_dtype(np.dtype(spec.results[r][2] if spec.results[r][1] != "store"
                                          else "float64")) for r in range(nres)}}
    R = range(nres)
    # the buffers are reached through typed pointers, the arrays kept alive to the end
    # (through the arrays, the map and store loops of a stored result ran 2-3x slower)
    # (bools stay in their array: a pointer to Numba's boolean is not one to its bytes)
    buffers = "\n".join(
        f"    ar{r} = np.empty(BLOCK, V{r})\n"
        + (f"    bf{r} = ar{r}\n" if vals[r] == types.boolean else
           f"    bf{r} = as_pointer(np.int64(ar{r}.ctypes.data), V{r})\n")
        + f"    lev{r} = np.zeros(64, A{r})" for r in R)
    alive = " + ".join(f"ar{r}.size" for r in R)
    bufs = ", ".join(f"bf{r}" for r in R) + ("," if nres == 1 else "")
    sinks = "\n".join(
        f"            n{r} = sink{r}(spec, meta[RMETA.MODE + {r}], bf{r}, m, addrs[nin + {r}], "
        f"offs[nin + {r}], steps[nin + {r}], lev{r}, n{r})" for r in R)
    mapped = f"            map_block(spec, addrs, offs, steps, m, ({bufs}), st)\n{sinks}"
    if nres == 1 and spec.results[0][1] == "sum" and not direct:
        # one sum: a row's values summed as they are computed, no buffer between
        sinks = f"""            if meta[RMETA.MODE] == {ROW}:
                n0 = sum_block(spec, addrs, offs, steps, m, st, lev0, n0)
            else:
{textwrap.indent(mapped, "    ")}"""
    elif direct:
        sinks = f"""            if steps[0] == 1:
                {'m = inner_hi - k0' if wide else 'pass'}
                n0 = sink0(spec, meta[RMETA.MODE], as_pointer(addrs[0] + offs[0] * \
{_itemsize(name0)}, S0), m, addrs[nin], offs[nin], steps[nin], lev0, n0)
            else:
{textwrap.indent(mapped, "    ")}"""
    else:
        sinks = mapped
    ends = "\n".join(f"        if meta[RMETA.MODE + {r}] == {ROW}:\n"
                     f"            row_end(spec, {r}, addrs[nin + {r}], offs[nin + {r}], lev{r}, "
                     f"n{r})" for r in R)
    zero = "\n".join(f"        n{r} = 0" for r in R)
    row = f"""{zero}
        k0 = inner_lo
        while k0 < inner_hi:
            m = min(BLOCK, inner_hi - k0)
{sinks}
            for i in range(nops):
                offs[i] += m * steps[i]
            k0 += m
{ends}"""
    if direct:
        # a sum over an outer axis: the rows of the axis next to the innermost in one call
        # (:func:`column_rows`), each added into its accumulator row in the odometer's order,
        # not an odometer step and a sink call per row
        setup = f"""    colrun = nd >= 2 and split != nd - 1 and steps[0] == 1 \\
        and meta[RMETA.MODE] == {COLUMN}
    run_in = meta[RMETA.STRIDES + nd - 2] if nd >= 2 else 0
    run_out = meta[RMETA.STRIDES + nin * MAX_DIMS + nd - 2] if nd >= 2 else 0
"""
        run = f"""        if colrun:
            end2 = hi if split == nd - 2 else meta[RMETA.SHAPE + nd - 2]
            column_rows(spec, addrs[0] + offs[0] * {_itemsize(name0)}, end2 - idx[nd - 2],
                        inner_hi - inner_lo, run_in, addrs[nin], offs[nin], run_out,
                        steps[nin])
            idx[nd - 2] = end2 - 1
        else:
"""
    else:
        # short rows (a row-broadcast's): a block of whole rows of the axis next to the
        # innermost mapped and taken by each result in one call each, not a map and a sink
        # call per row; the same values combined in the same order
        no_row = " and ".join(f"meta[RMETA.MODE + {r}] != {ROW}" for r in R)
        setup = f"""    rowblock = nd >= 2 and split != nd - 1 \\
        and 2 * (inner_hi - inner_lo) <= BLOCK and {no_row}
    jumps = stack_words()
    for i in range(nops):
        jumps[i] = meta[RMETA.STRIDES + i * MAX_DIMS + nd - 2] if nd >= 2 else 0
"""
        rsinks = "\n".join(
            f"                rows_sink{r}(spec, bf{r}, n, rr, addrs[nin + {r}], "
            f"offs[nin + {r}], steps[nin + {r}], jumps[nin + {r}])" for r in R)
        run = f"""        if rowblock:
            end2 = hi if split == nd - 2 else meta[RMETA.SHAPE + nd - 2]
            n = inner_hi - inner_lo
            r0 = idx[nd - 2]
            while r0 < end2:
                rr = min(BLOCK // n, end2 - r0)
                map_rows(spec, addrs, offs, steps, jumps, n, rr, ({bufs}), st)
{rsinks}
                for i in range(nops):
                    offs[i] += rr * jumps[i]
                r0 += rr
            idx[nd - 2] = end2 - 1
        else:
"""
    source = f"""
def impl(spec, pptrs, pmeta, t):
    meta = as_pointer(pmeta, _I64)
    ptrs = as_pointer(pptrs, _I64)
    nd, split = meta[RMETA.ND], meta[RMETA.SPLIT]
    nin = meta[RMETA.NIN]
    nops = nin + {nres}
    lo, hi = meta[RMETA.BOUNDS + t], meta[RMETA.BOUNDS + t + 1]
    if hi <= lo:
        return 0
    idx = stack_words()
    offs = stack_words()
    steps = stack_words()
    addrs = stack_words()
    for i in range(nops):
        steps[i] = meta[RMETA.STRIDES + i * MAX_DIMS + nd - 1]
        addrs[i] = ptrs[i]
    for r in range({nres}):  # this task's partial rows
        addrs[nin + r] += t * meta[RMETA.PARTIAL + r]
{buffers}
    staged = np.empty(STAGE // 8 + 1, np.int64)
    st = np.int64(staged.ctypes.data)  # (a uint64 would make the sums below float)
    for d in range(nd):
        idx[d] = lo if d == split else 0
    inner_lo, inner_hi = 0, meta[RMETA.SHAPE + nd - 1]
    if split == nd - 1:
        inner_lo, inner_hi = lo, hi
{setup}    while True:
        for i in range(nops):
            o = 0
            for d in range(nd - 1):
                o += idx[d] * meta[RMETA.STRIDES + i * MAX_DIMS + d]
            offs[i] = o + inner_lo * steps[i]
{run}{textwrap.indent(row, "    ")}
        d = nd - 2  # the odometer over the outer axes (the split one within [lo, hi))
        while d >= 0:
            idx[d] += 1
            end = hi if d == split else meta[RMETA.SHAPE + d]
            if idx[d] < end:
                break
            idx[d] = lo if d == split else 0
            d -= 1
        if d < 0:
            return 0 * ({alive})
"""
    exec(compile(source, f"<jitops reduction task of {nres} results>", "exec"), ns)
    return ns["impl"]


@inner
def reduce_rows(spec, pptrs, pmeta, t):
    """One task of a pass (compiled and optimised per spec)."""
    return reduce_task(spec, pptrs, pmeta, t)


def _rtask(spec, pptrs, pmeta, t):
    """Task ``t`` of a pass (see :func:`reduce_rows`); returns 0, or an error status."""
    return reduce_rows(spec, pptrs, pmeta, t)


# functions found again by name are cached on disk; lambdas and closures compile per process
_rtask_cached = wrapper(renamed(_rtask, "_rtask"))
_rtask_local = wrapper(renamed(_rtask, "_rtask_local"))

_call_rtask = pool.call_nary


def _rdrive(task, pptrs, pmeta):
    """Every task of a pass (in parallel where compiled so); a status."""
    meta = as_pointer(pmeta, _I64)
    fp = job_flags(stack_words())
    failed = 0
    for t in prange(meta[RMETA.NTASKS]):
        failed += note_flags(fp, _call_rtask(task, pptrs, pmeta, t))
    return finish(failed, pool.load(fp, 0))


def _rpooled(task, pptrs, pmeta, ctl, workers):
    """Every task of a pass on the pool: this thread and ``workers`` workers."""
    meta = as_pointer(pmeta, _I64)
    return finish_job(pool.run_job(ctl, workers, pool.KIND_NARY, task, pptrs, pmeta,
                                   pool.UNUSED, pool.UNUSED, meta[RMETA.NTASKS], False))


KERNELS = driver_table(_rdrive, _rpooled, "rkernel", task=_rtask_cached)
_TASKS: dict = {}


def task_address(spec: ReduceSpec) -> int:
    """Address of the task compiled for ``spec``."""
    return compiled_address(_rtask_cached if spec.cacheable else _rtask_local, spec, _TASKS,
                            3, builtin=False)
