"""From a public op's arguments to a result: routing only.

In order: the CPU backend's repeats (:mod:`jitops.cpu.repeat.memo`), CUDA's (once CUDA has run),
operands that decide ufuncs themselves (NEP 13, :mod:`jitops.core.protocols`), Dask (whose
chunks come back here), then :func:`jitops.core.pipeline.prepare` and a backend. The one
piece of the CPU's repeats written into the public function is the call of its latest serial
repeat's compiled entry: a repeat then costs one Python frame, not two. Operands the pipeline
would only convert (NumPy scalars, lists, two Python numbers) are converted before the keyed
repeats (:func:`jitops.core.pipeline.host_arrays`), which then take them as arrays.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from .core import protocols, tensors
from .core.device import parse, select
from .core.pipeline import WEAK, host_arrays, normalize, prepare, prepare_lazy
from .cpu import backend as cpu
from .cpu.repeat import memo as repeat
from .cpu.repeat.memo import MISS, Memo, again, by_identity, parallel_again
from .cpu.threads import parallel
from .dask import backend as dask

if TYPE_CHECKING:
    from .signatures import Activation, Broadcast, Device

_ND = np.ndarray
_OK = cpu.OK
_FP_RAISED = cpu.kernels.FP_RAISED
_finish_user = cpu.UserLaunch.finish
_SCALAR = np.generic
_asarray = np.asarray
#: NumPy's numeric scalar types (np.float32(2), x.mean()): exact types, as ``type(v) in``
#: costs one lookup where ``isinstance`` walks a hierarchy.
_NUMPY_SCALARS = frozenset(t for t in np.sctypeDict.values()
                           if issubclass(t, np.number) or t is np.bool_)


def public_op(op: str, fname: str):
    """The public function of ``op`` (``fname`` in messages), with the call of its latest
    serial repeat's compiled entry written into it (see the module's docstring)."""

    memo = Memo()

    def fn(x: object, y: object, *, broadcast: Broadcast = "numpy", axis: int = -1,
           act: Activation | None = None, out: Any = None, device: Device = None) -> Any:
        r = memo.latest
        if r is not None and broadcast is r.broadcast and axis is r.axis and act is r.act \
                and device is None and (out is None) is r.new:
            # The last call's launch, whose meta makes the kernel check that each object
            # is an ndarray of the type, dtype, shape and strides it was planned for (or of
            # its shape class).
            native = r.native
            if native is None:  # parallel, or without a compiled entry
                status, target = parallel_again(memo, r, x, y, out)
            elif out is not None:  # serial: the compiled entry, handed the objects
                status = native(out, x, y)
                if status == _OK:
                    return out
                target = out
            elif r.makes:  # which makes the result too: it, (status, it) or a status
                target = native(x, y)
                if type(target) is _ND:
                    return target
                status, target = target if type(target) is tuple else (target, None)
            else:
                target = r.new_output()
                status = native(target, x, y)
            if status == _OK:
                return target
            if status is not None:
                if status >= _FP_RAISED:  # written: NumPy's errstate decides the rest
                    r.launch.report(status, fname)
                    return target
                r.launch.check(status, fname, out)  # raises if a task failed
            # not such arrays (or misaligned, overlapping, read-only): the one before
        tx, ty = type(x), type(y)
        if (tx is not _ND or ty is not _ND) and device is None:
            # A NumPy scalar (x - x.mean()) beside an array or a number is the 0-d array it
            # is to the pipeline, as are lists and two Python numbers: as those, their
            # repeats take the fast paths here (before the one before: that repeat would
            # refuse them too)
            if ty in _NUMPY_SCALARS and (tx is _ND or tx in WEAK):
                return fn(x, _asarray(y), broadcast=broadcast, axis=axis, act=act, out=out)
            if tx in _NUMPY_SCALARS and (ty is _ND or ty in WEAK or ty in _NUMPY_SCALARS):
                return fn(_asarray(x), y, broadcast=broadcast, axis=axis, act=act, out=out)
            if type(axis) is int and (out is None or type(out) is _ND) \
                    and not (tx is _ND and ty in WEAK or ty is _ND and tx in WEAK):
                arrays = host_arrays(op, (x, y), fname, act)
                if arrays is not None:
                    return fn(*arrays, broadcast=broadcast, axis=axis, act=act, out=out)
        r = memo.before
        if r is not None and broadcast is r.broadcast and axis is r.axis and act is r.act \
                and device is None and (out is None) is r.new:
            # calls alternating between two kinds of arrays (or thread counts): each is the
            # one before
            status, target = again(r, r.native, x, y, out) if r.native is not None \
                else by_identity(memo, r, x, y, out)
            if status is not None and (status == _OK or status >= _FP_RAISED):
                memo.latest, memo.before = r, memo.latest
                if status != _OK:  # written: NumPy's errstate decides the rest
                    r.launch.report(status, fname)
                return target
            r.launch.check(status, fname, out)  # raises if a task failed
            # then the key
        if device is None and type(axis) is int:
            if tx is _ND and ty is _ND:
                got, key = repeat.binary(memo, op, fname, x, y, broadcast, axis, act, out)
                if got is not MISS:
                    return got
                return _call(op, fname, (x, y), broadcast, axis, act, out, device, key, memo)
            if (tx is _ND and ty in WEAK) or (ty is _ND and tx in WEAK):
                got, key = repeat.with_scalar(memo, op, fname, x, y, broadcast, axis, act,
                                              out)
                if got is not MISS:
                    return got
                return _call(op, fname, (x, y), broadcast, axis, act, out, device, key, memo)
        return _call(op, fname, (x, y), broadcast, axis, act, out, device, None)

    return fn


_PUBLIC: dict[tuple[str, str], object] = {}


def call_op(op: str, fname: str, x, y, broadcast="numpy", axis=-1, act=None, out=None,
            device=None):
    """Every public op: ``op`` is the operation, ``fname`` the public name for messages."""
    fn = _PUBLIC.get((op, fname))
    if fn is None:
        fn = _PUBLIC[op, fname] = public_op(op, fname)
    return fn(x, y, broadcast=broadcast, axis=axis, act=act, out=out, device=device)


def call_user(op, operands: tuple, broadcast, axis, out, device):
    """A user op (jitops.fusion.ElementwiseOp) on its operands: the same pipeline, and the
    same keyed repeats (NumPy scalars count as the 0-d arrays they are to the pipeline)."""
    r = op.memo.latest
    if r is not None and broadcast is r.broadcast and axis is r.axis and device is None \
            and (out is None) is r.new:  # its compiled entry, handed the objects
        if out is None:
            got = r.entry(*operands)
            if type(got) is _ND:
                return got
            status, target = got if type(got) is tuple else (got, None)
        else:
            status = r.entry(out, *operands)
            if status == _OK:
                return out
            target = out
        if _finish_user(status, target, op.__name__, out):
            return target
        # not such arrays (or misaligned, overlapping, read-only): the key
    key = None
    if device is None and type(axis) is int:
        if (out is None or type(out) is _ND) and not WEAK.issuperset(map(type, operands)):
            # as arrays, their latest repeat may take them (Python numbers alone are keyed
            # as they are)
            arrays = host_arrays(op, operands, op.__name__, None)
            if arrays is not None:
                return call_user(op, arrays, broadcast, axis, out, device)
        got, key = repeat.user(op, operands, broadcast, axis, out)
        if got is not MISS:
            return got
    return _call(op, op.__name__, operands, broadcast, axis, None, out, device, key)


def _call(op, fname, operands, broadcast, axis, act, out, device, key, memo=None):
    """The pipeline, then the backend; ``key`` is where to remember a CPU launch (or None),
    and ``memo`` the public function's, where a serial launch's shape class goes at once.

    Operands that decide ufuncs themselves are handed the op first (NEP 13,
    :mod:`jitops.core.protocols`); framework tensors are read in place and answered in kind
    (:mod:`jitops.core.tensors`); a 0-d result with no ``out`` is a NumPy scalar, as NumPy's
    ufuncs give."""
    found = None
    if _CUDA_REPEAT:  # once CUDA has run: a repeat is launched as it was
        found = _CUDA_REPEAT[0].key(op, fname, broadcast, axis, act, device, operands, out)
        if found is not None:
            result = _CUDA_REPEAT[0].launch_again(found, operands, out)
            if result is not None:
                return result
    given = (broadcast, axis, act)  # as the caller wrote them: what a repeat compares
    mode, axis, act = normalize(broadcast, axis, act, fname)
    parse(device)  # a malformed device= is refused whatever the operands
    always_array = out is Ellipsis  # NumPy 2's out=...: an array even from 0-d operands
    if always_array:
        out = None
    if any(dask.is_dask_array(v) for v in operands):
        lazy = prepare_lazy(op, fname, operands, mode, axis, act, out, device,
                            dask.is_dask_array, dask.known_shape)
        return dask.run(lazy, functools.partial(chunk, op, fname, act))
    asked = protocols.overrides(operands + (out,))
    if asked:
        return _delegate(op, fname, operands, mode, axis, act, out, device, asked)
    tensors.refuse_device_bits(operands, out, fname)
    where = select(device, operands, out, fname)
    if where == "cpu":
        host = tensors.unwrap(operands, out, fname)  # framework tensors, read in place
        if host is not None and not always_array:
            # the call on those arrays, which takes their repeats; answered in kind
            if isinstance(op, str):
                result = call_op(op, fname, *host.operands, *given, host.out, device)
            else:
                result = call_user(op, host.operands, given[0], given[1], host.out, device)
            if host.wrap is None:
                return result
            return host.wrap(result if host.out is not None else np.asarray(result))
        call = prepare(cpu.MEMORY, op, fname, operands if host is None else host.operands,
                       mode, axis, act, out if host is None else host.out)
        launch = cpu.launch(call)
        repeat.record(key, launch, call, memo, op, operands, out, given)
        result = call.finish(cpu.MEMORY)
        if host is not None and host.wrap is not None:
            return host.wrap(result)
        if out is not None:
            return result
        wrap = None if host is not None else protocols.array_wrap(operands)
        if wrap is not None:  # an ndarray subclass, or an object with __array_wrap__
            return protocols.apply_wrap(result, wrap, _view(op, fname, len(operands)),
                                        operands, not result.ndim and not always_array)
        return result[()] if not result.ndim and not always_array else result
    # only when CUDA is asked for: no driver touched before
    from .cuda import backend as cuda
    from .cuda import repeat as cuda_repeat

    if not _CUDA_REPEAT:
        _CUDA_REPEAT.append(cuda_repeat)
        found = cuda_repeat.key(op, fname, broadcast, axis, act, device, operands, out)
    memory = cuda.memory(device, operands, out, fname)
    with cuda.on_device(memory):
        call = prepare(memory, op, fname, operands, mode, axis, act, out)
        cuda.launch(call, memory)
        cuda_repeat.remember(found, call, memory, operands)
        return call.finish(memory)


#: jitops.cuda.repeat, once a call ran on CUDA (no driver is touched before).
_CUDA_REPEAT: list = []

#: (op, fname) -> the built-in op's UfuncView.
_VIEWS: dict = {}


def _view(op, fname: str, nin: int) -> protocols.UfuncView:
    """The op as the ufunc an operand's ``__array_ufunc__`` is handed: called back on the
    underlying arrays with NumPy broadcasting (the labels have lined them up). A user op's
    view is made per call (kept, it would keep the op alive)."""
    if not isinstance(op, str):
        return protocols.UfuncView(f"jitops.{fname}", nin,
                                   lambda inputs, out, kw: op(*inputs, out=out, **kw))
    v = _VIEWS.get((op, fname))
    if v is None:
        def run(inputs, out, kw):
            return call_op(op, fname, *inputs, out=out, **kw)

        v = _VIEWS[op, fname] = protocols.UfuncView(f"jitops.{fname}", nin, run)
    return v


def _delegate(op, fname, operands, mode, axis, act, out, device, asked):
    """The call handed to the operands that decide ufuncs themselves (NEP 13)."""
    protocols.positional_alignment(mode, axis, asked, fname)
    if device is not None and parse(device)[0] != "cpu":
        t = type(asked[0])
        raise TypeError(f"jitops.{fname}: device={device!r} with a {t.__module__}."
                        f"{t.__qualname__} operand: its arrays live on the host; move the "
                        f"underlying arrays to the GPU yourself")
    kwargs = {} if act is None else {"act": act}
    protocols.refuse_mixed_frames(operands + (out,), fname)
    if isinstance(op, str):
        operands = protocols.pandas_scalars(op, operands, asked)
    return protocols.delegate(_view(op, fname, len(operands)), operands, out, kwargs, asked,
                              fname)


def chunk(op, fname: str, act: str | None, *blocks):
    """One output block of a Dask call: the host path of the same op (module-level, so it is
    pickled by reference to Dask's workers, which import jitops themselves).

    Serial kernels: Dask already runs one chunk task per core (threads or worker processes),
    and a parallel kernel per task would put two threads on every core (measured: 0.85x
    ``da.subtract`` on a two-worker cluster with nested threads, against 1.x without).
    """
    with parallel.serial():
        if isinstance(op, str):
            r = call_op(op, fname, *blocks, "numpy", -1, act, None, None)
        else:
            r = _call(op, fname, blocks, "numpy", -1, None, None, None, None)
    return np.asarray(r) if isinstance(r, _SCALAR) else r  # a 0-d block stays an array


def clear() -> None:
    """Forget remembered launches (tests that change tunables)."""
    repeat.clear()
    cpu.clear_launches()
