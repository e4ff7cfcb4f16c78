"""Repeated calls on CUDA arrays, launched again without the pipeline.

A CUDA call's launch (kernel, grid, arguments, stream, GPU) is a function of the op, its
``broadcast``, ``axis``, ``act`` and ``device`` arguments, and of what each operand says of
itself: a CUDA array's interface (dtype, shape, strides, address, read-only flag), its library
and the stream that library works on now; a scalar's type and exact bits (every decision a
value makes -- its dtype, ``power``'s one-exponent entry, a comparison settled by an
out-of-range integer -- follows from them). A call is remembered under exactly those (and
whether it has ``out=``) when:

* every operand is an array of Numba, CuPy or PyTorch (their own types, no subclass) or a
  Python or NumPy scalar, at least one of them an array; ``out``, where given, such an array;
* it needed no copy, no zero check and one stream.

A later call with the same key launches the same kernel again, with no dtype resolution and
no planning; a call without ``out=`` allocates its result as the first call did (same
library, shape, strides and stream) and nothing else. The key pins every address the launch
reads: the caller holds the arrays, so that memory is alive, and the entry holds the one-word
device copy of each scalar (jitops.cuda.backend uploads a scalar once; the entry keeps its copy
alive should that cache be emptied). Nothing else is kept: the memo holds no caller's array.

The launch itself goes one of two ways:

* **public**: the arguments are made again from the arrays, and the kernel is launched
  through numba-cuda's dispatcher, which types every argument each time;
* **the ``cuda_launch`` hook** (on a real GPU): numba-cuda's own argument marshalling
  (``_Kernel._prepare_args``) runs once, when the call is remembered. A repeat hands the
  marshalled arguments to ``cuda.core.launch``, the call numba-cuda's ``_Kernel.launch``
  ends in.

The hook relies on these numba-cuda internals, checked once per process:

* ``_Kernel.argument_types``, ``_prepare_args`` and ``_codelibrary.get_cufunc``;
* the ``debug``, ``cooperative`` and ``extensions`` a plain kernel has;
* the dispatcher's ``overloads`` and ``typeof_pyval``.

``JITOPS_DISABLE_HOOKS=cuda_launch`` turns it off (a warning says so) and leaves the public
launch. Host time of a repeated float32 subtract of 1e3 elements, measured on an H200
machine (whose host's speed varied by 1.5x between runs):

===========================  ==========  ============  ==============  =============
arrays                       the hook    without it    planned anew    the library's
===========================  ==========  ============  ==============  =============
Numba, ``out=``              13-23 us    130-175 us    260-430 us      --
PyTorch, ``out=``            22-25 us    240-360 us    370-620 us      5-9 us
PyTorch, a new result        40-45 us    370-500 us    630-790 us      11 us
CuPy, a new result           29-31 us    400-430 us    660-690 us      14-15 us
===========================  ==========  ============  ==============  =============

A new Numba array costs what numba-cuda's allocator costs (a synchronous ``cuMemAlloc``:
0.3 ms for 40 MB). The committed benchmark's *call* column (docs/performance.md, "On a GPU")
is a repeat's.

**Passes** (jitops.cuda.reduce: ``sum_to``, the gradients, user ops with several results or
``reduce=``) are remembered the same way, under their entry point's own arguments and the
operands' parts (a Python scalar's type and bits): the buffers the pass allocated (results,
partials, an uploaded count), which it returns, and its launches, each array argument a slot
(one of its buffers, or an operand's span). A repeat allocates the buffers again and launches
every kernel, with the hook each buffer's new address patched into the marshalled
arguments. Never remembered: a pass with ``out=``, over an empty space (a mean of nothing
warns each time), with a host operand or a copy. Host time of a repeated pass on an H200
machine (PyTorch tensors; two runs, whose host speed differed by 1.5x):

================================================  ==========  ============  =============
pass                                              the hook    without it    planned anew
================================================  ==========  ============  =============
``sum_to`` (32, 64, 56, 56) -> (64,): 3 launches  103-137 us  584-1082 us   1850-2030 us
``reduce(sq_diff, "sum")``, 1e7 float32           97-116 us   578-1200 us   2080-2300 us
``elementwise_add_grad``, the same shape          130-152 us  852-1701 us   2100-2210 us
================================================  ==========  ============  =============

PyTorch's own ``x.sum(dim=(0, 2, 3))``: 8-13 us.
"""

from __future__ import annotations

import contextlib
import functools
import math
import struct

import numpy as np
from numba import cuda

from ..cpu.compile.hooks import check_once
from . import arrays, backend, kernels
from .spec import SIMULATOR

#: The hook's name for JITOPS_DISABLE_HOOKS.
NAME = "cuda_launch"
#: Remembered launches at most (then forgotten all at once).
MAX_ENTRIES = 1024

#: What a repeat does where the hook is off.
_INSTEAD = ("using numba-cuda's dispatcher for every launch instead (slower where it matters, "
            "never wrong)")

_MEMO: dict[tuple, _Entry] = {}
_MEMOABLE: dict[type, str | None] = {}
_state: dict[str, str | None] = {}


class _Where:
    """Where a remembered launch or pass runs: its GPU (``device``, and ``gpu``, the context
    to enter), the stream (its handle and Numba's object) and the kind of array it makes."""

    __slots__ = ("device", "stream", "stream_obj", "kind", "gpu")

    def __init__(self, mem):
        self.device, self.stream, self.stream_obj = mem.device, mem.stream, mem.stream_obj
        self.kind = mem.result_kind
        self.gpu = contextlib.nullcontext() if SIMULATOR else cuda.gpus[mem.device]

    def memory(self):
        mem = backend.CudaMemory(self.device, self.stream, self.kind)
        mem._stream_obj = self.stream_obj
        return mem


class _Entry(_Where):
    """One remembered launch: where it runs, the result it allocates (``result``: the
    arguments of ``CudaMemory.empty``, None with ``out=``), and how it is launched again:
    ``launch`` is ``cuda.core.launch`` bound to the stream, grid and kernel (the hook), given
    ``head``, the new result's address, then ``tail`` (``head`` alone with ``out=``); None
    where the dispatcher launches it from ``spec`` and ``plan``."""

    __slots__ = ("name", "spec", "plan", "result", "launch", "head", "tail", "scalars")

    def __init__(self, mem, name, spec, plan, result, direct, scalars):
        super().__init__(mem)
        self.name, self.spec, self.plan, self.result = name, spec, plan, result
        self.launch, self.head, self.tail = direct if direct is not None else (None, (), ())
        self.scalars = scalars  # (operand index, its device copy) of each scalar operand

    def again(self, operands: tuple, out):
        """Launch again for these arrays; the result (``out``, or a new array)."""
        mem = self.memory() if self.launch is None or self.result is not None else None
        target = out if self.result is None else mem.empty(*self.result)
        if self.launch is None:
            if self.scalars:
                operands = list(operands)
                for j, copy in self.scalars:
                    operands[j] = copy
            name, blocks, tpb, args = backend.launch_args(mem, self.spec, self.plan, target,
                                                          *operands)
            kernels.KERNELS[name][blocks, tpb, self.stream_obj](*args)
        elif self.result is None:
            self.launch(*self.head)
        else:
            self.launch(*self.head, _ADDRESS[self.kind](target), *self.tail)
        return target


#: A result's device address, by its library (what its interface would say, read directly).
_ADDRESS = {"torch": lambda a: a.data_ptr(), "cupy": lambda a: a.data.ptr,
            "numba": lambda a: a.device_ctypes_pointer.value or 0}


def _memoable(t: type) -> str | None:
    """The library of an array type whose calls may be remembered, else None."""
    k = _MEMOABLE.get(t, "")
    if k == "":
        mod, name = t.__module__.split(".")[0], t.__name__
        k = {"cupy": "ndarray", "torch": "Tensor"}.get(mod) == name and mod or None
        if k is None and name in ("DeviceNDArray", "FakeCUDAArray") \
                and mod in ("numba", "numba_cuda"):
            k = "numba"
        _MEMOABLE[t] = k
    return k


@functools.cache
def _gpu_count() -> int:
    return 1 if SIMULATOR else len(cuda.gpus)


def _part(v, k: str, streams: dict):
    """An operand's part of a key: what the pipeline would read of it (its interface, its
    library's current stream), or None where the pipeline refuses it."""
    t = type(v)
    if SIMULATOR:
        d = backend._Described(v)
        return None if d.masked else (t, d.dtype, d.shape, d.strides, d.address, d.writeable,
                                      d.stream)
    if k == "torch":
        if v.requires_grad or v.is_conj() or v.is_neg() or not v.is_cuda \
                or v.layout is not _torch_strided():
            return None
        gpu = v.device.index
    elif k == "cupy":
        gpu = v.device.id
    else:
        cai = v.__cuda_array_interface__
        if cai.get("mask") is not None:
            return None
        return (t, cai["typestr"], cai["shape"], cai["strides"], cai["data"], cai.get("stream"),
                arrays.device_of(v) if _gpu_count() > 1 else 0)
    stream = streams.get((k, gpu))
    if stream is None:
        stream = streams[k, gpu] = arrays.current_stream(k, gpu)
    if k == "torch":
        return (t, v.dtype, v.shape, v.stride(), v.data_ptr(), gpu, stream)
    return (t, v.dtype, v.shape, v.strides, v.data.ptr, gpu, stream)


@functools.cache
def _torch_strided():
    import torch

    return torch.strided


def key(op, fname: str, broadcast, axis, act, device, operands: tuple, out) -> tuple | None:
    """The key a call may have been remembered under, or None where it is not one to
    remember. The arguments are as the caller gave them (types included: ``axis=1`` and
    ``axis=True`` are different calls)."""
    parts = [op, fname, type(broadcast), broadcast, type(axis), axis, type(act), act,
             type(device), device]
    streams: dict = {}
    arrays_in = False
    try:
        for v in operands:
            k = _memoable(type(v))
            part = _scalar_part(v) if k is None else _part(v, k, streams)
            if part is None:
                return None
            arrays_in = arrays_in or k is not None
            parts.append(part)
        if out is not None:
            k = _memoable(type(out))
            part = None if k is None else _part(out, k, streams)
            if part is None:
                return None
            parts.append(part)
        if not arrays_in:  # scalars alone: the GPU would be whichever is current
            return None
        parts.append(out is None)
        found = tuple(parts)
        hash(found)
    except Exception:  # an unhashable argument, an attribute that refuses: the pipeline says
        return None
    return found


def launch_again(found: tuple, operands: tuple, out):
    """Launch the call remembered under ``found`` (from :func:`key`) again: its result, or
    None where none is remembered."""
    e = _MEMO.get(found)
    if e is None:
        return None
    backend.LAUNCHES.append((e.name, e.device, e.stream))
    if e.launch is not None and _gpu_count() == 1:
        try:  # one GPU: its primary context is almost always current
            return e.again(operands, out)
        except Exception:  # none current on this thread (or another): launch in it
            pass
    with e.gpu:
        return e.again(operands, out)


def remember(found, call, mem, operands: tuple) -> None:
    """Keep the launch of a call just made on ``operands`` (as the caller gave them), where it
    may be made again as it was."""
    if found is None or mem.waits or mem.read_values or len(mem.launched) != 1 \
            or (call.out is not None and call.target is not call.out):
        return
    # each operand read in place, or a scalar (keyed by its bits) uploaded: its copy is kept
    scalars = tuple((j, a) for j, (a, v) in enumerate(zip(call.inputs, operands)) if a is not v)
    if any(_scalar_part(operands[j]) is None for j, _ in scalars):
        return
    name, blocks, tpb, args = mem.launched[0]
    result = None
    if call.out is None:  # allocated again as prepare() allocated it
        result = (call.plan.out_shape, call.dtypes.result, call.plan.out_strides)
    direct = None
    if hook_ok():
        address = None if result is None else mem.address(call.target)
        read = _ADDRESS.get(mem.result_kind)
        if address is None or (read is not None and read(call.target) == address):
            direct = _direct(name, blocks, tpb, args, mem.stream_obj, address)
    if len(_MEMO) >= MAX_ENTRIES:
        _MEMO.clear()
    _MEMO[found] = _Entry(mem, name, args[0], call.plan, result, direct, scalars)


def forget() -> None:
    """Forget every remembered launch and pass (tests; a new process starts empty)."""
    _MEMO.clear()
    _PASSES.clear()


# -- the cuda_launch hook ----------------------------------------------------------------------


def _why_not() -> str | None:
    if SIMULATOR:
        return "Numba's CUDA simulator launches no kernels"
    from numba.cuda import dispatcher
    from numba.cuda.cudadrv import driver

    kernel = getattr(dispatcher, "_Kernel", None)
    if not (callable(getattr(dispatcher, "launch", None))
            and callable(getattr(driver, "_to_core_stream", None))
            and callable(getattr(dispatcher, "LaunchConfig", None))
            and callable(getattr(kernel, "_prepare_args", None))
            and callable(getattr(kernels.contig, "typeof_pyval", None))
            and isinstance(getattr(kernels.contig, "overloads", None), dict)):
        return "numba-cuda's _Kernel, dispatcher.launch or LaunchConfig moved"
    return None


def hook_ok() -> bool:
    """Whether repeats launch through the ``cuda_launch`` hook (checked once; a failed check
    warns once and leaves numba-cuda's dispatcher)."""
    return check_once(_state, NAME, _why_not, _INSTEAD, warn=not SIMULATOR)


def _marshalled(name: str, blocks: int, tpb: int, args: tuple, stream):
    """(launch, kernel, per-argument marshalled values) of a kernel launched with ``args``,
    marshalled now by numba-cuda's own ``_prepare_args``: ``launch(*values)`` launches it on
    ``stream``. None where the kernel is not a plain one or writes back (then the dispatcher);
    numba-cuda changed under us: None, and the dispatcher from now on."""
    from numba.cuda import dispatcher as nd
    from numba.cuda.cudadrv import driver

    try:
        disp = kernels.KERNELS[name]
        kernel = disp.overloads.get(tuple(disp.typeof_pyval(a) for a in args))
        if kernel is None or kernel.debug or kernel.cooperative or kernel.extensions:
            return None
        retr: list = []
        marshalled = []
        for t, v in zip(kernel.argument_types, args):
            one: list = []
            kernel._prepare_args(t, v, stream, retr, one)
            marshalled.append(one)
        if retr:  # a write-back: never for device arrays
            return None
        config = nd.LaunchConfig(grid=(blocks, 1, 1), block=(tpb, 1, 1), shmem_size=0)
        launch = functools.partial(nd.launch, driver._to_core_stream(stream), config,
                                   kernel._codelibrary.get_cufunc().kernel)
    except Exception as e:  # numba-cuda changed under us: the dispatcher from now on
        why = f"{type(e).__name__}: {e}"
        _state.pop(NAME, None)
        check_once(_state, NAME, lambda: why, _INSTEAD)
        return None
    return launch, kernel, marshalled


def _direct(name: str, blocks: int, tpb: int, args: tuple, stream, address: int | None):
    """(launch, head, tail) of a kernel launched with ``args`` (:func:`_marshalled`):
    ``launch(*head)``, or with a new result (whose span is ``args[1]``, starting at
    ``address``) ``launch(*head, its address, *tail)``. None where the dispatcher launches it."""
    got = _marshalled(name, blocks, tpb, args, stream)
    if got is None:
        return None
    launch, _, marshalled = got
    if address is None:
        return launch, tuple(v for one in marshalled for v in one), ()
    # an array is marshalled (meminfo, parent, size, itemsize, data, shape..., strides...)
    o = marshalled[1]
    if len(o) < 5 or o[4] != address:
        return None
    return (launch, (*marshalled[0], *o[:4]),
            (*o[5:], *(v for one in marshalled[2:] for v in one)))


# -- passes (jitops.cuda.reduce): several launches, buffers of their own ---------------------


class _NotRemembered(Exception):
    """A pass that is not one to remember (an argument no slot accounts for)."""


class _Pass(_Where):
    """One remembered pass (a reduction, a gradient, several results): where it runs, the
    buffers it allocates in order (``fresh``: per buffer the arguments of
    ``CudaMemory.empty``, or the 0-d host value ``from_host`` uploads), which of them it
    returns (``results``), and its launches: each ``(launch, values, patches)`` (the hook:
    marshalled values, ``values[pos]`` replaced by buffer ``i``'s address for each ``(pos,
    i)`` of ``patches``), or, where the dispatcher launches them, ``(name, blocks, tpb,
    template)`` with each array argument a :class:`_Slot`."""

    __slots__ = ("fresh", "readers", "results", "launches", "direct", "names")

    def __init__(self, mem, fresh, results, launches, direct, names):
        super().__init__(mem)
        self.fresh, self.results, self.launches, self.direct = fresh, results, launches, direct
        self.names = names
        self.readers = [_ADDRESS.get("numba" if value is not None else self.kind)
                        for _, value in fresh]
        if None in self.readers:  # an array kind whose address is not read directly
            raise _NotRemembered

    def again(self, operands) -> list:
        mem = self.memory()
        bufs = [mem.empty(*made) if value is None else mem.from_host(value)
                for made, value in self.fresh]
        if self.direct:
            addresses = [read(b) for read, b in zip(self.readers, bufs)]
            for launch, values, patches in self.launches:
                if patches:
                    values = list(values)
                    for pos, i in patches:
                        values[pos] = addresses[i]
                launch(*values)
        else:
            spans = {("buf", i): backend._flat(mem, b)[0] for i, b in enumerate(bufs)}
            for j, v in enumerate(operands):
                if mem.owns(v):
                    spans["in", j] = backend._flat(mem, v)[0]
            for name, blocks, tpb, template in self.launches:
                args = [_filled(a, spans) for a in template]
                kernels.KERNELS[name][blocks, tpb, self.stream_obj](*args)
        return [bufs[i] for i in self.results]


class _Slot:
    """An array argument of a remembered launch: buffer ``i`` of the pass (``("buf", i)``)
    or operand ``j``'s span (``("in", j)``), made again for each repeat."""

    __slots__ = ("where",)

    def __init__(self, where):
        self.where = where


def _filled(a, spans: dict):
    if isinstance(a, _Slot):
        return spans[a.where]
    if isinstance(a, tuple) and any(isinstance(v, _Slot) for v in a):
        return tuple(spans[v.where] if isinstance(v, _Slot) else v for v in a)
    return a


_PASSES: dict[tuple, _Pass] = {}


def _scalar_part(v):
    """A Python or NumPy scalar operand's part of a key: its type and exact bits (``-0.0``
    is not ``0.0``; a NaN's sign and payload count); None for anything else."""
    t = type(v)
    if isinstance(v, np.generic):
        return (t, v.tobytes()) if v.dtype.kind in "biufc" else None
    if isinstance(v, int):  # bool included
        return (t, int(v))
    if isinstance(v, float):
        return (t, struct.pack("<d", v))
    if isinstance(v, complex):
        return (t, struct.pack("<dd", v.real, v.imag))
    return None


def pass_key(tag: tuple, operands) -> tuple | None:
    """The key a pass may have been remembered under: ``tag`` (the entry point and its own
    arguments as the caller gave them, types included) and each operand's part (a CUDA
    array's as :func:`key` reads it, a Python scalar's type and bits); None where the call is
    not one to remember."""
    parts = [tag]
    streams: dict = {}
    try:
        for v in operands:
            k = _memoable(type(v))
            part = _scalar_part(v) if k is None else _part(v, k, streams)
            if part is None:
                return None
            parts.append(part)
        found = tuple(parts)
        hash(found)
    except Exception:  # an unhashable argument, an attribute that refuses: the pass says
        return None
    return found


def pass_again(found: tuple | None, operands) -> list | None:
    """The results of the pass remembered under ``found`` (from :func:`pass_key`), launched
    again on these operands; None where none is remembered."""
    e = None if found is None else _PASSES.get(found)
    if e is None:
        return None
    backend.LAUNCHES.extend((name, e.device, e.stream) for name in e.names)
    with e.gpu:
        return e.again(operands)


def remember_pass(found, mem, operands, inputs, done) -> None:
    """Keep a pass just made on ``inputs`` (the ``operands`` as given, a scalar uploaded)
    where it can be made again as it was: every operand a CUDA array read in place or a
    scalar, one stream, no value read on the host's behalf, every buffer it allocated of
    some size, and each array argument of each launch one of its buffers or operands."""
    if found is None or mem.waits or mem.read_values or mem.made is None or not mem.launched:
        return
    try:
        entry = _pass_entry(mem, operands, inputs, done)
    except _NotRemembered:
        return
    if len(_PASSES) >= MAX_ENTRIES:
        _PASSES.clear()
    _PASSES[found] = entry


def _span_of(mem, a) -> tuple:
    """What identifies a span among a pass's arrays: its address, storage dtype and length."""
    return (mem.address(a), mem.dtype(a).str, tuple(mem.shape(a)))


def _pass_entry(mem, operands, inputs, done) -> _Pass:
    fresh, spans = [], {}
    for made, value, a in mem.made:
        if value is not None and value.ndim:  # host values uploaded: not in the key
            raise _NotRemembered
        if not math.prod(mem.shape(a)):
            raise _NotRemembered
        spans.setdefault(_span_of(mem, backend._flat(mem, a)[0]), ("buf", len(fresh)))
        fresh.append((made, value))
    for j, (v, i) in enumerate(zip(operands, inputs)):
        if mem.owns(v):
            if i is not v:  # copied first
                raise _NotRemembered
            spans.setdefault(_span_of(mem, backend._flat(mem, v)[0]), ("in", j))
    made = [a for _, _, a in mem.made]
    results = []
    for r in done:
        i = next((k for k, a in enumerate(made) if a is r), None)
        if i is None:
            raise _NotRemembered
        results.append(i)

    def slot(a):
        if backend.CudaMemory.owns(a):
            where = spans.get(_span_of(mem, a))
            if where is None:
                raise _NotRemembered
            return _Slot(where)
        if isinstance(a, tuple):
            return tuple(_constant(v) if isinstance(v, tuple) else slot(v) for v in a)
        return a

    templates = [(name, blocks, tpb, [slot(a) for a in args])
                 for name, blocks, tpb, args in mem.launched]
    direct = _pass_direct(mem, templates) if hook_ok() else None
    return _Pass(mem, fresh, results, direct if direct is not None else templates,
                 direct is not None, [name for name, _, _, _ in templates])


def _pass_direct(mem, templates) -> list | None:
    """The launches of a pass marshalled once (:func:`_marshalled`), each buffer's address
    a patch: ``(launch, values, patches)``; None where one of them is not (the dispatcher)."""
    from numba.cuda import dispatcher as nd

    base_tuple = getattr(getattr(nd, "types", None), "BaseTuple", None)  # the types it marshals
    if base_tuple is None:
        return None
    stream = mem.stream_obj
    done = []
    for (name, blocks, tpb, args), (_, _, _, template) in zip(mem.launched, templates):
        got = _marshalled(name, blocks, tpb, args, stream)
        if got is None:
            return None
        launch, kernel, marshalled = got
        values: list = []
        patches = []
        for t, a, s, one in zip(kernel.argument_types, args, template, marshalled):
            if isinstance(s, _Slot):
                pieces = [(s, a, one)]
            elif isinstance(s, tuple) and any(isinstance(v, _Slot) for v in s):
                # a tuple is marshalled element by element, in order (numba-cuda's recursion)
                if not isinstance(t, base_tuple) or len(t) != len(a):
                    return None
                pieces = []
                try:
                    for te, ae, se in zip(t, a, s):
                        sub: list = []
                        kernel._prepare_args(te, ae, stream, [], sub)
                        pieces.append((se, ae, sub))
                except Exception:
                    return None
                if sum(len(p) for _, _, p in pieces) != len(one):
                    return None
            else:
                values.extend(one)
                continue
            for se, ae, sub in pieces:
                if isinstance(se, _Slot):
                    # (meminfo, parent, size, itemsize, data, shape..., strides...)
                    if len(sub) < 5 or sub[4] != mem.address(ae):
                        return None
                    if se.where[0] == "buf":
                        patches.append((len(values) + 4, se.where[1]))
                values.extend(sub)
        done.append((launch, tuple(values), tuple(patches)))
    return done


def _constant(v):
    """A nested tuple argument: only numbers (an array that deep is not accounted for)."""
    if backend.CudaMemory.owns(v) or (isinstance(v, tuple) and not all(
            _constant(w) is w for w in v)):
        raise _NotRemembered
    return v
