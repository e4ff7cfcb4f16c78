"""The CPU side of a reduction pass (jitops.reductions is the front end): each call's
operands read as aligned arrays, the pass planned once per geometry (jitops.core.reduction)
and kept as a :class:`_Launch`, run by jitops.cpu.kernels.reduce serially or on the pool,
and the partial rows of a split reduction combined in task order."""

from __future__ import annotations

import math
from array import array
from functools import lru_cache

import numpy as np
from numba import types as _types
from numba.np.numpy_support import as_dtype

from ..core.dtypes import compute_dtype, pass_common
from ..core.plan import expand_strides
from ..core.reduction import accumulator, identity, plan_reduction, rounded
from .backend import drivers, entry_point
from .kernels import layout, nary
from .kernels import reduce as _reduce
from .kernels.binary import FP_RAISED, OK, data_address
from .kernels.layout import MAX_INPUTS, MAX_RESULTS, R_DIMS, RMETA
from .threads import parallel

__all__ = ["FP_RAISED", "MAX_INPUTS", "MAX_RESULTS", "function_key", "pass_again",
           "pass_key", "run_pass", "run_pass_status", "value_dtypes"]

_I64 = np.int64
_SIG = (_types.int64,) * 3  # the drivers' (task, operand addresses, meta)


@lru_cache(maxsize=1024)
def _in_elements(strides: tuple[int, ...], itemsize: int) -> tuple[int, ...] | None:
    """Byte ``strides`` in elements, or None where one is not a whole number of them."""
    if itemsize == 0 or any(s % itemsize for s in strides):
        return None
    return tuple(s // itemsize for s in strides)


def _combine(rows: np.ndarray, how: str) -> np.ndarray:
    """The partial rows of a split reduction combined in task order (a sum's adjacent pairs
    pairwise; the others in order: each is exact or order-free)."""
    if how == "sum":
        while rows.shape[0] > 1:
            n = rows.shape[0] - rows.shape[0] % 2
            paired = rows[0:n:2] + rows[1:n:2]
            rows = np.concatenate([paired, rows[n:]]) if n < rows.shape[0] else paired
        return rows[0]
    with np.errstate(all="ignore"):
        if how == "prod":
            return np.multiply.reduce(rows, axis=0)
        if how == "max":
            return np.maximum.reduce(rows, axis=0)
        if how == "min":
            return np.minimum.reduce(rows, axis=0)
        if how == "any":
            return np.bitwise_or.reduce(rows, axis=0)
        return np.bitwise_and.reduce(rows, axis=0)


#: Bytes of a cache line (128: a pair of 64-byte lines, which Intel's prefetcher fetches).
_LINE = 128


class _Held:
    """How one result of a launch is held: reduced (into ``rows`` accumulator rows of
    ``size``) or stored; its frame, reduction and accumulator dtype."""

    __slots__ = ("reduced", "frame", "rows", "size", "how", "acc", "shape", "fill")

    def __init__(self, reduced, frame, rows, size, how, acc):
        self.reduced, self.frame, self.rows, self.size = reduced, frame, rows, size
        self.how, self.acc = how, acc
        #: the accumulator rows' shape (several: each padded by a cache line and more, so that
        #: no two tasks write one line), and their identity (None: zeros)
        self.shape = (rows, size if rows == 1 else
                      (-(-size * acc.itemsize // _LINE) + 1) * _LINE // acc.itemsize)
        ident = identity(how, acc) if reduced else 0
        self.fill = None if ident == 0 else ident


class _Launch:
    """A planned pass, kept for the next call of the same geometry: the task's address, the
    meta, and per result how it is held (:class:`_Held`)."""

    __slots__ = ("task", "meta", "meta_address", "parallel", "results", "size", "serial")

    def __init__(self, fn, key, cacheable, in_dtypes, in_strides, frames_in, space, frames,
                 hows, dtypes, lead, threads, compute, direct):
        strides = [expand_strides(sh, st, f, space) for (sh, st), f in zip(in_strides, frames_in)]
        plan = plan_reduction(space, strides, frames, lead=lead, threads=threads,
                              reduced=[h != "store" for h in hows])
        if len(plan.shape) > R_DIMS:
            raise ValueError(f"at most {R_DIMS} dims after merging, got "
                             f"{len(plan.shape)}")
        values, _ = value_dtypes(fn, key, compute, len(in_dtypes), len(frames))
        accs = [accumulator(h, v) if h != "store" else dt
                for h, v, dt in zip(hows, values, dtypes)]
        spec = _reduce.ReduceSpec(key, tuple(d.name for d in in_dtypes), compute.name, tuple(
            ((dt or a).name, h, a.name) for dt, h, a in zip(dtypes, hows, accs)), direct,
            cacheable)
        self.results, modes, partial = [], [], []
        for rp, how, acc in zip(plan.results, hows, accs):
            rows = plan.ntasks if rp.partial else 1
            held = _Held(rp.summed, rp.frame, rows, rp.size, how, acc)
            self.results.append(held)
            modes.append(_reduce.STORE if not rp.summed else
                         _reduce.ROW if rp.strides[-1] == 0 else _reduce.COLUMN)
            partial.append(held.shape[1] * acc.itemsize if rp.partial else 0)
        nd = len(plan.shape)
        words = [0] * (R_DIMS * (MAX_INPUTS + MAX_RESULTS))
        for i, st in enumerate([*plan.inputs, *[rp.strides for rp in plan.results]]):
            words[i * R_DIMS:i * R_DIMS + nd] = st
        fill = (MAX_RESULTS - len(frames))
        self.meta = np.array(layout.fill(
            RMETA, ND=nd, SPLIT=plan.split, NTASKS=plan.ntasks, NIN=len(in_dtypes),
            NRES=len(frames), MODE=modes + [0] * fill, PARTIAL=partial + [0] * fill,
            SHAPE=list(plan.shape), STRIDES=words, BOUNDS=0)[:RMETA.BOUNDS] + list(plan.bounds),
            _I64)
        self.meta_address = data_address(self.meta)
        self.task = _reduce.task_address(spec)
        self.parallel = plan.ntasks > 1 and threads > 1
        self.size = math.prod(space)
        #: the serial driver (compiled or loaded once, then kept)
        self.serial = entry_point(_reduce.KERNELS["serial"], _SIG)


def value_dtypes(fn, key: str, compute: np.dtype, nin: int, nres: int):
    """The dtypes of the values ``fn`` returns for ``nin`` inputs of ``compute``, and whether
    it returns a tuple."""
    nary.register(key, fn)
    ret = nary.return_type(nary.compiled_function(fn), compute, nin)
    several = isinstance(ret, _types.BaseTuple)
    return [np.dtype(as_dtype(v)) for v in (ret if several else [ret] * nres)], several


@lru_cache(maxsize=64)
def function_key(fn) -> tuple[str, bool]:
    """(key, cacheable) of a scalar function, jitops.cpu.kernels.nary.function_key's (which
    reads and hashes its source file): once per function."""
    return nary.function_key(fn)


@lru_cache(maxsize=1024)
def _launch_for(*key) -> _Launch:
    return _Launch(*key)


def run_pass(fn, inputs: list[np.ndarray], frames_in: list[tuple[int, ...]],
             space: tuple[int, ...], frames: list[tuple[int, ...]], hows: list[str],
             dtypes: list[np.dtype], lead: int, fname: str, compute: np.dtype | None = None,
             direct: bool = False, found: tuple | None = None,
             shapes: list | None = None) -> list[np.ndarray]:
    """One pass of the scalar function ``fn`` over ``space``: inputs with their frames; per
    result its frame (``space`` to be stored, 1 on the axes it reduces), ``how`` (``store``,
    or ``sum``, ``prod``, ``max``, ``min``, ``any``, ``all``) and dtype. Returns each result
    in its frame's shape; a reduced one in its accumulator's dtype where ``dtypes`` says
    None; ``shapes``: per result the shape it is returned in (else its frame). No
    floating-point flags are reported (:func:`run_pass_status` returns them)."""
    return run_pass_status(fn, inputs, frames_in, space, frames, hows, dtypes, lead, fname,
                           compute, None, direct, found=found, shapes=shapes)[0]


def run_pass_status(fn, inputs, frames_in, space, frames, hows, dtypes, lead, fname,
                    compute=None, key=None, direct=False, into=None, found=None,
                    shapes=None, data=None):
    """:func:`run_pass`, and the kernel's status (``FP_RAISED`` and the flags raised, or
    OK); ``key``: the function's (key, cacheable), else :func:`jitops.cpu.kernels.nary.function_key`
    of it; ``into``: per result None or the array a stored result is written into (C-order,
    aligned, of its frame's shape and dtype, sharing no memory with an input). A call of a
    geometry seen before plans nothing (:func:`_launch_for`); ``found`` (:func:`pass_key`):
    the key this pass is remembered under for :func:`pass_again`, with the caller's ``data``."""
    if compute is None:
        compute = _compute_of(tuple(a.dtype for a in inputs))
    dts, geos, addrs = [], [], []
    copied = False
    for a in inputs:
        st = _in_elements(a.strides, a.itemsize) if a.flags.aligned else None
        if st is None:  # misaligned, or strides not whole elements: an aligned copy
            a = np.array(a, order="C", copy=True)
            st = _in_elements(a.strides, a.itemsize)
            copied = True
        dts.append(a.dtype)
        geos.append((a.shape, st))
        addrs.append(data_address(a))
    threads = parallel.num_threads()
    key, cacheable = key or function_key(fn)
    try:
        launch = _launch_for(fn, key, cacheable, tuple(dts), tuple(geos), tuple(frames_in),
                             tuple(space), tuple(frames), tuple(hows), tuple(dtypes), lead,
                             threads, compute, direct)
    except ValueError as e:
        raise ValueError(f"jitops.{fname}: {e}") from None
    if found is not None and not copied and into is None and found[1] == threads:
        _remember(found, _Pass(launch, tuple(dtypes), shapes, fname, data))
    return _run(launch, addrs, dtypes, shapes, fname, into, threads)


def _run(launch: _Launch, addrs: list, dtypes, shapes, fname: str, into, threads: int):
    """Run a planned pass on the inputs at ``addrs``: (results, status)."""
    buffers, status = [], OK
    for r, h in enumerate(launch.results):
        if h.reduced:
            b = np.zeros(h.shape, h.acc) if h.fill is None else np.full(h.shape, h.fill, h.acc)
        elif into is None or into[r] is None:
            b = np.empty(h.frame, dtypes[r])
        else:
            b = into[r]
        buffers.append(b)
        addrs.append(data_address(b))
    if launch.size:
        ptrs = array("q", addrs)  # (0.3 us less than an int64 ndarray and its address)
        args = (launch.task, ptrs.buffer_info()[0], launch.meta_address)
        if launch.parallel:
            status = parallel.launch(drivers(_reduce.KERNELS, _SIG), args, threads)
        else:
            status = launch.serial(*args)
        if status != OK and status < FP_RAISED:
            raise RuntimeError(f"jitops.{fname}: the function raised an exception inside "
                               f"the compiled kernel, so some elements were not computed")
    for r, h in enumerate(launch.results):
        b = buffers[r]
        if h.reduced:  # (one accumulator row: already the result's frame, as (1, size))
            b = _combine(b[:, :h.size], h.how) if h.rows > 1 else b
            b = b if dtypes[r] is None else rounded(b, dtypes[r])
        buffers[r] = b.reshape(h.frame if shapes is None else shapes[r])
    return buffers, status


class _Pass:
    """A pass remembered by its call (:func:`pass_key`): its launch, the results' dtypes
    and shapes, the entry's name and what its caller keeps with it (``data``)."""

    __slots__ = ("launch", "dtypes", "shapes", "fname", "data")

    def __init__(self, launch: _Launch, dtypes: tuple, shapes, fname: str, data=None):
        self.launch, self.dtypes, self.fname, self.data = launch, dtypes, fname, data
        self.shapes = None if shapes is None else tuple(shapes)


#: Passes by call (:func:`pass_key`), as many as :func:`_launch_for` keeps.
_PASSES: dict = {}
_MAX_PASSES = 1024


def _remember(found: tuple, entry: _Pass) -> None:
    if len(_PASSES) >= _MAX_PASSES:
        _PASSES.clear()
    try:
        _PASSES[found] = entry
    except TypeError:  # an argument that is not hashable
        pass


def pass_key(tag: tuple, operands) -> tuple | None:
    """The key a pass over ``operands`` may be remembered under: ``tag`` (the entry point and
    its own arguments as the caller gave them, types included), this thread's count, and
    each operand's shape, strides and dtype; None where an operand is not an aligned NumPy
    array (the caller then plans as usual; so does an argument that is not hashable)."""
    parts = [tag, parallel.num_threads()]
    for a in operands:
        if type(a) is not np.ndarray or not a.flags.aligned:
            return None
        parts.append((a.shape, a.strides, a.dtype))
    return tuple(parts)


def pass_again(found: tuple | None, operands) -> tuple[list, int, object] | None:
    """The (results, status, data) of the pass remembered under ``found`` (:func:`pass_key`
    of these ``operands``), run again on them without planning; None where none is."""
    try:
        e = None if found is None else _PASSES.get(found)
    except TypeError:  # an argument that is not hashable
        return None
    if e is None:
        return None
    results, status = _run(e.launch, [data_address(a) for a in operands], e.dtypes, e.shapes,
                           e.fname, None, found[1])
    return results, status, e.data


@lru_cache(maxsize=256)
def _compute_of(in_dtypes: tuple[np.dtype, ...]) -> np.dtype:
    return compute_dtype(pass_common(in_dtypes))
