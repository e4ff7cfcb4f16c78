"""From a public op's arguments to a result: the fast path for repeats, then the pipeline and
the backend that launches it.

A first call goes through :func:`jitops.core.pipeline.prepare` and a backend: the CPU
(jitops.cpu.backend), CUDA (jitops.cuda.backend, imported only when CUDA is asked for) or
Dask (jitops.dask.backend, whose chunks come back here with host arrays). A repeat of a CPU
call with the same arguments' types, dtypes, shapes and strides skips all of it: it reuses the
first call's :class:`~jitops.cpu.backend.Launch`, and the kernel itself re-checks what can
differ between such calls (alignment, overlap of ``out`` with the inputs), handing the call
back to the pipeline when a check fails. A Python scalar operand is part of a repeat by its
type (NumPy 2 promotion depends on nothing else); its value is converted to the operand dtype
the first call settled on. A NumPy scalar is the 0-d array the pipeline would make of it.
Integer ``elementwise_div`` repeats only once y is found free of zeros (the pipeline raises
ZeroDivisionError before writing).

A repeat of one of the public function's last two calls (the same keywords, and out given
or not as then) skips even the key (:class:`_Repeat`): a serial one calls the compiled entry
bound to that launch with the objects themselves (jitops.cpu.fastcall; a weak Python scalar
operand, that very object, as the 0-d array it became), and the kernel's header checks
verify that each is an ndarray of that exact type, dtype object, shape and strides (another
object, or an array reshaped or retyped in place, is refused and goes the keyed way). A
parallel repeat is taken for the very same objects, with the thread count its meta is
balanced for, and only while the calling thread's count is still that.
"""

from __future__ import annotations

import cmath
import functools
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .core import protocols, tensors
from .core.config import ASLEEP_SERIAL_MAX, ASLEEP_WAKE_WINDOW_S
from .core.device import parse, select
from .core.pipeline import WEAK, normalize, prepare, prepare_lazy
from .cpu import backend as cpu
from .cpu import fastcall, lifecycle, parallel, shapeclass
from .cpu import pool as _pools
from .dask import backend as dask

if TYPE_CHECKING:
    from .signatures import Activation, Broadcast, Device

_ND = np.ndarray
_OK = cpu.OK
_FP_RAISED = cpu.kernels.FP_RAISED
_ref = cpu.ref
_num_threads = parallel.num_threads
_launch = parallel.launch
_STAMP = parallel.STAMP
_SLEEPERS, _OMP = _pools.C_SLEEPERS, _pools.C_OMP
_WAKE_WINDOW = ASLEEP_WAKE_WINDOW_S
_clock = time.perf_counter
_drivers, _KERNELS, _SIG = cpu.drivers, cpu.kernels.KERNELS, cpu.SIG
#: The kernels read out's writeable flag themselves (jitops.cpu.kernels.FLAGS_OFFSET): a
#: repeat need not ask for ``out.flags`` (a new flags object per call).
_FLAGS_CHECKED = cpu.FLAGS_CHECKED

#: Repeated calls: (op, broadcast, axis, act, x/y geometry[, out's]) -> cpu.Launch.
_FAST: dict = {}
_FAST_MAX = 4096


def _geometry(v) -> tuple | type:
    """An operand's part of a fast-path key: dtype, shape and strides, or a weak scalar's type."""
    return (v.dtype, v.shape, v.strides) if type(v) is _ND else type(v)


_SCALAR = np.generic


def _plain(v) -> bool:
    """An ndarray, a weak Python scalar or a NumPy scalar: what the fast paths take."""
    t = type(v)
    return t is _ND or t in WEAK or isinstance(v, _SCALAR)


def _as_array(v):
    """A NumPy scalar as the 0-d array the pipeline would make of it (np.asarray, as
    :func:`jitops.core.pipeline.host_operand` does); anything else as it is."""
    return np.asarray(v) if isinstance(v, _SCALAR) else v


def public_op(op: str, fname: str):
    """The public function of ``op`` (``fname`` in messages): the fast path for repeats
    written into it, so a repeat costs one Python frame, not two (0.1 us of the ~0.25 us a
    repeated small call costs)."""

    memo = [None, None]  # the last two repeats (_Repeat), the latest first (_remember)
    _MEMOS.append(memo)

    def fn(x: object, y: object, *, broadcast: Broadcast = "numpy", axis: int = -1,
           act: Activation | None = None, out: Any = None, device: Device = None) -> Any:
        r = memo[0]
        if r is not None and broadcast is r.broadcast and axis is r.axis and act is r.act \
                and device is None and (out is None) is r.new:
            # The last call's launch, whose meta makes the kernel check that each object
            # is an ndarray of the type, dtype, shape and strides it was planned for.
            native = r.native
            if native is None:
                q = r.quiet
                if q is not None and q[_SLEEPERS] and not q[_OMP]:
                    # a parallel repeat while the workers sleep (the process was idle):
                    # serially, waking them where calls come close together (_Repeat); the
                    # kernel checks the objects, and the thread count changes nothing here
                    now = _clock()
                    serial = r.waking if now - r.last < _WAKE_WINDOW else r.serial
                    r.last = now
                    if out is not None:
                        status, target = serial(out, x, y), out
                    else:
                        status, target = _again(r, serial, x, y, out)
                else:
                    status, target = _repeat(memo, r, x, y, out)
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
        r = memo[1]
        if r is not None and broadcast is r.broadcast and axis is r.axis and act is r.act \
                and device is None and (out is None) is r.new:
            # calls alternating between two kinds of arrays (or thread counts): each is the
            # one before
            status, target = _again(r, r.native, x, y, out) if r.native is not None \
                else _repeat(memo, r, x, y, out)
            if status is not None and (status == _OK or status >= _FP_RAISED):
                memo[0], memo[1] = r, memo[0]
                if status != _OK:  # written: NumPy's errstate decides the rest
                    r.launch.report(status, fname)
                return target
            r.launch.check(status, fname, out)  # raises if a task failed
            # then the key
        if device is None and type(axis) is int:
            tx, ty = type(x), type(y)
            if tx is _ND and ty is _ND:
                if out is None:
                    key = (op, broadcast, axis, act, x.dtype, x.shape, x.strides, y.dtype,
                           y.shape, y.strides)
                elif type(out) is _ND and (_FLAGS_CHECKED or out.flags.writeable):
                    key = (op, broadcast, axis, act, x.dtype, x.shape, x.strides, y.dtype,
                           y.shape, y.strides, out.dtype, out.shape, out.strides)
                else:
                    key = None
                if key is not None:
                    try:
                        launch = _FAST.get(key)
                    except TypeError:  # unhashable broadcast or act: the pipeline says why
                        launch = key = None
                    if launch is not None:
                        target = out if out is not None else launch.new_output()
                        pmeta = launch.direct
                        if pmeta is not None:  # serial: the compiled driver, nothing between
                            status = launch.entry(launch.task, _ref(target), _ref(x), _ref(y),
                                                  pmeta)
                            if status == _OK or status >= _FP_RAISED:
                                _push(memo, _remember(key, launch, target, x, y, out,
                                                      broadcast, axis, act))
                                if status != _OK:  # written: NumPy's errstate decides
                                    launch.report(status, fname)
                                return target
                            launch.check(status, fname, out)  # raises if a task failed
                        elif launch.run(target, x, y, fname, out) == _OK:
                            if not launch.parallel:  # a zero check, or a 0-d result
                                return target[()] if out is None and not launch.shape \
                                    else target
                            stamp = _STAMP[0]  # before the count: see _remember
                            threads = _threads_to_remember(launch)
                            if threads:
                                _push(memo, _remember(key, launch, target, x, y, out,
                                                      broadcast, axis, act, threads, stamp))
                            return target
                        # misaligned, overlapping, out read-only or a zero divisor this time:
                        # the careful path (which raises where it must)
                        key = None
                return _call(op, fname, (x, y), broadcast, axis, act, out, device, key, memo)
            if (tx is _ND and ty in WEAK) or (ty is _ND and tx in WEAK):
                return _with_scalar(memo, op, fname, x, y, broadcast, axis, act, out, device)
            if (isinstance(x, _SCALAR) or isinstance(y, _SCALAR)) and _plain(x) and _plain(y):
                # A NumPy scalar (``x - x.mean()``) is a 0-d array to the pipeline (a strong
                # dtype, NEP 50), so as one its repeats take the fast path above.
                return fn(_as_array(x), _as_array(y), broadcast=broadcast, axis=axis, act=act,
                          out=out, device=device)
        return _call(op, fname, (x, y), broadcast, axis, act, out, device, None)

    return fn


_PUBLIC: dict[tuple[str, str], object] = {}
#: Each public function's memo cell (reset by :func:`clear`).
_MEMOS: list = []
#: (fast-path key, new result) -> the serial _Repeat of that key with a compiled entry: the
#: memo of a function whose calls alternate between geometries takes it again (a new one
#: costs ~1 us).
_REPEATS: dict = {}
#: A fast-path key -> (meta with header checks, its address, the dtype objects it names, the
#: compiled entry bound to it, the one that makes new results too; each or None).
_HEADERS: dict = {}


class _Repeat:
    """A public function's last repeat (see :func:`_remember`): the keywords it was called
    with, whether it made a new result, its launch and how a repeat runs it.

    ``native`` is the compiled entry bound to the launch and to a meta with header checks
    (jitops.cpu.fastcall): it takes any objects and the kernel refuses those that are not
    such ndarrays, so a serial repeat needs no identity. Without it (the hook off) and for a
    parallel launch, the repeat is taken for the very same objects (``ids``): a parallel one
    launches with arguments made once (``args``, with ``out=``), and only while the calling
    thread's count is still ``threads`` (``stamp``: jitops.cpu.parallel.STAMP when it was
    read). While the pool's workers sleep, a parallel repeat of fewer than
    ``config.ASLEEP_SERIAL_MAX`` elements runs on the calling thread through a compiled
    entry: ``serial``, or ``waking``, which wakes them first, where the same repeat ran
    less than ``config.ASLEEP_WAKE_WINDOW_S`` before (``last``). ``quiet`` is a view of the
    pool's control block, where its sleepers are counted (None in a forked child, whose pool
    is not that one).

    A parallel launch run on one thread (``threads(1)``, ``set_num_threads(1)``) is
    remembered as a serial one that ``checks_count``: its compiled entry is ``counted``, not
    ``native``, and a repeat takes it only while the count is still one (else a serial
    repeat would stay serial once the count is raised).
    """

    __slots__ = ("broadcast", "axis", "act", "new", "native", "makes", "new_output", "launch",
                 "headers", "meta", "threads", "ids", "stamp", "drivers", "args", "weak",
                 "checks_count", "counted", "serial", "waking", "last", "quiet")

    def __init__(self, broadcast, axis, act, out, launch, headers, threads, ids, stamp,
                 weak=None):
        self.broadcast, self.axis, self.act = broadcast, axis, act
        self.new = out is None
        self.launch, self.headers, self.meta = launch, headers, headers[1]
        self.new_output = launch.output_maker()
        # the compiled entries (see _remember): headers[3] takes out=, headers[4] makes the
        # new result; a parallel repeat's waking pair is headers[6:8] (_asleep_entries)
        self.makes = self.new and headers[4] is not None

        def entry(i):  # handed the objects as they come: a weak scalar as its 0-d array
            e = headers[i + 1] if self.makes else headers[i]
            return e if e is None or weak is None else _with_weak(e, self.makes, *weak)

        self.native = self.counted = self.serial = self.waking = self.quiet = None
        #: a parallel launch remembered on one thread: taken only while the count is one
        self.checks_count = threads == 1 and launch.parallel
        if threads == 1:
            if self.checks_count:
                self.counted = entry(3)
            else:
                self.native = entry(3)
        elif headers[3] is not None:  # runs serially while the workers sleep
            self.serial, self.waking = entry(3), entry(6)
            self.quiet = memoryview(_pools.get().words.view(np.uint8)).cast("q")
        self.last = -math.inf  # (the first call after an idle spell wakes nobody)
        self.threads, self.ids = threads, ids
        #: (a weak Python scalar operand, the 0-d array it became, whether it is x) or None
        self.weak = weak
        #: the stamp read before the count (see _remember); None, while a threads() block is
        #: open, is kept as -1, which no stamp equals
        self.stamp = -1 if stamp is None else stamp
        self.drivers = _drivers(_KERNELS, _SIG) if threads > 1 else None
        self.args = None


def _threads_to_remember(launch) -> int:
    """The thread count a launch that just ran is remembered with (0: not remembered): 1 for
    a serial one (its compiled entry), the calling thread's count for a parallel one without
    a zero check and with its stores chosen (cpu.Launch) -- 1 where that count is one: a
    serial repeat that checks the count (:class:`_Repeat`)."""
    if launch.direct is not None:
        return 1
    if launch.parallel and not launch.zero_check and launch.choice is None:
        return _num_threads()
    return 0


def _push(memo: list, r: _Repeat | None) -> None:
    """``r`` becomes a function's latest repeat, the latest before it the one before."""
    if r is not memo[0]:
        memo[0], memo[1] = r, memo[0]


def _again(r: _Repeat, native, x, y, out):
    """(status, target) of the repeat ``r`` with its compiled entry ``native`` (see ``fn``):
    status OK, a written status with flags, or one that says nothing was written (target
    None)."""
    if out is not None:
        return native(out, x, y), out
    if r.makes:
        t = native(x, y)
        if type(t) is _ND:
            return _OK, t
        return t if type(t) is tuple else (t, None)
    t = r.new_output()
    return native(t, x, y), t


def _with_weak(native, makes: bool, weak, array, is_x: bool):
    """``native`` (taking ``(x, y)`` if it ``makes`` the result, else ``(out, x, y)``) for
    calls whose x (``is_x``) or y is the weak Python scalar ``weak``: that very object is
    handed over as the 0-d array it became (``array``). The scalar is held here, so its
    identity stays its own, and a Python int or float never changes value; any other operand
    goes as it is (and the kernel refuses what is not such an array)."""
    if makes and is_x:
        def call(a, b):
            return native(array if a is weak else a, b)
    elif makes:
        def call(a, b):
            return native(a, array if b is weak else b)
    elif is_x:
        def call(o, a, b):
            return native(o, array if a is weak else a, b)
    else:
        def call(o, a, b):
            return native(o, a, array if b is weak else b)
    return call


def _repeat(memo: list, r: _Repeat, x, y, out):
    """(status, target) of a repeat without a compiled entry, or whose entry checks the
    count (see :class:`_Repeat`); status None where the repeat does not apply (other objects,
    another thread count)."""
    if r.checks_count:
        if r.stamp != _STAMP[0] and not _same_count(memo, r):
            return None, None  # a count above one now: the key (a parallel launch again)
        if r.counted is not None:  # any such arrays: the kernel checks their headers
            return _again(r, r.counted, x, y, out)
    if r.ids != (id(x), id(y), id(out)):
        return None, None
    w = r.weak
    if w is not None:  # that very scalar object: the 0-d array it became
        if w[2]:
            x = w[1]
        else:
            y = w[1]
    launch = r.launch
    target = out if out is not None else r.new_output()
    if r.threads == 1:
        return launch.entry(launch.task, _ref(target), _ref(x), _ref(y), r.meta), target
    if r.stamp != _STAMP[0] and not _same_count(memo, r):
        return None, None  # another thread count now (threads(n), set_num_threads): the key
    # a parallel repeat: the same launch, its arguments made once where they are the same
    # objects (out=)
    a = r.args
    if a is None:
        a = (launch.task, _ref(target), _ref(x), _ref(y), r.meta)
        if out is not None:
            r.args = a
    return _launch(r.drivers, a, r.threads), target


def _same_count(memo: list, r: _Repeat) -> bool:
    """Whether the calling thread's count is still that of the parallel repeat ``r`` (asked:
    the stamp moved on since it was recorded); if so, ``r`` takes the new stamp (so that
    after a ``threads()`` block somewhere, or a ``set_num_threads`` to the same count, its
    repeats stop asking)."""
    stamp = _STAMP[0]  # before the count (see _remember)
    if _num_threads() != r.threads:
        return False
    if stamp is not None:
        r.stamp = stamp
    return True


def _remember(key, launch, target, x, y, out, broadcast, axis, act, threads=1, stamp=None,
              weak=None):
    """The :class:`_Repeat` of a call that just ran: a meta (balanced for ``threads``, 1 for
    a serial launch) whose header checks (jitops.cpu.kernels.header_checks) let the kernel
    verify that the objects it is handed are still the same kind of ndarray, and for a serial
    launch the compiled entry bound to it. The keyed path costs ~0.6 us more per call warm
    (building and hashing the key), and several times that right after a parallel job has
    swept the caches. None where headers cannot be read.

    A parallel repeat also keeps what it launches with: the drivers, the arguments (with
    ``out=``: the same objects each time) and the thread-count stamp read before ``threads``
    was (jitops.cpu.parallel.STAMP). Measured at 1e6 elements, each of these asked for again
    costs 0.5-1.5% of the call: after the job, every object touched is a cache miss.
    """
    if threads == 1 and launch.direct is not None:  # serial: any shape of its class?
        r = _class_repeat(key[0], launch, target, x, y, out, broadcast, axis, act, weak)
        if r is not None:
            return r
    hkey = key if threads == 1 else (key, threads)
    shared = threads == 1 and weak is None  # a serial repeat that names no object
    if shared:
        r = _REPEATS.get((hkey, out is None))
        if r is not None and r.broadcast is broadcast and r.axis is axis and r.act is act:
            return r
    h = _HEADERS.get(hkey)
    if h is None:
        meta = cpu.header_checks(launch, (target, x, y), threads)
        if meta is None:
            return None
        # the dtype objects are compared by address: they live as long as this entry, and
        # so does the meta the compiled entry reads
        size = math.prod(target.shape)
        if threads == 1 and launch.parallel:  # (a serial launch was verified when it ran)
            fastcall.verify(launch, target, x, y, out is None)
        natives = (fastcall.bind(launch.task, meta, size),
                   fastcall.bind(launch.task, meta, size, (target.dtype, target.shape))
                   if out is None and launch.makes_c_order() else None) \
            if threads == 1 else _asleep_entries(launch, target, x, y, out, size)
        h = _HEADERS[hkey] = (meta, meta.__array_interface__["data"][0],
                              (target.dtype, x.dtype, y.dtype), *natives)
    ids = (id(x), id(y), id(out))
    if weak is not None:  # taken for that scalar object (_repeat hands over its array)
        ids = (id(weak[0]), ids[1], ids[2]) if weak[2] else (ids[0], id(weak[0]), ids[2])
    r = _Repeat(broadcast, axis, act, out, launch, h, threads, ids, stamp, weak)
    if shared and (r.native or r.counted) is not None:  # any such objects: one per key
        _REPEATS[hkey, out is None] = r
    return r


def _first_of_class(memo, op, launch, call, operands, out, given) -> None:
    """Push the class repeat of a serial call just planned and run (if it has a class)."""
    x, y = call.inputs
    weak = None
    for i, v in enumerate(operands):
        if type(v) in WEAK:  # that scalar object is handed over as the 0-d array it became
            a = call.inputs[i]
            if type(a) is not _ND or _cast_overflowed(v, a):
                return
            a.flags.writeable = False  # the pipeline's own array: nobody writes it
            weak = (v, a, i == 0)
    r = _class_repeat(op, launch, call.target, x, y, out, *given, weak)
    if r is not None:
        _push(memo, r)


def _class_repeat(op, launch, target, x, y, out, broadcast, axis, act, weak):
    """The :class:`_Repeat` of a serial call whose compiled entry takes every shape of its
    class (jitops.cpu.shapeclass), or None."""
    ckey = (op, broadcast, axis, act, target.dtype, x.dtype, y.dtype, x.ndim, y.ndim,
            out is None)
    if weak is None:
        r = _REPEATS.get(ckey)
        if r is not None and r.broadcast is broadcast and r.axis is axis and r.act is act:
            return r
    found = shapeclass.entries(ckey, launch, target, x, y, out, fastcall.bind)
    if found is None:
        return None
    template, cls, f_out, f_new = found
    headers = (template, template.__array_interface__["data"][0],
               (target.dtype, x.dtype, y.dtype), f_out, f_new, cls)
    r = _Repeat(broadcast, axis, act, out, launch, headers, 1, (id(x), id(y), id(out)), None,
                weak)
    if weak is None:
        _REPEATS[ckey] = r
    return r


def _asleep_entries(launch, target, x, y, out, size: int) -> tuple:
    """For a parallel repeat: the serial compiled entries it runs while the pool's workers
    sleep (:class:`_Repeat`) -- ``f(out, x, y)`` and, where the launch makes C-ordered
    results, ``f(x, y)`` --, the one-thread meta with header checks they read (kept with
    them), and the same two entries waking the workers first; Nones where the call has
    ``config.ASLEEP_SERIAL_MAX`` elements or more, jitops' pool does not run, or the compiled
    entry is not available."""
    if size >= ASLEEP_SERIAL_MAX or not _pools.AVAILABLE:
        return (None,) * 5
    meta = cpu.header_checks(launch, (target, x, y), 1)
    if meta is None:
        return (None,) * 5
    fastcall.verify(launch, target, x, y, out is None)
    makes = (target.dtype, target.shape) if out is None and launch.makes_c_order() else None
    serial, waking = ((fastcall.bind(launch.task, meta, size, None, wake),
                       fastcall.bind(launch.task, meta, size, makes, wake) if makes else None)
                      for wake in (0, _pools.get().ctl))
    return (*serial, meta, *waking)


def call_op(op: str, fname: str, x, y, broadcast="numpy", axis=-1, act=None, out=None,
            device=None):
    """Every public op: ``op`` is the operation, ``fname`` the public name for messages."""
    fn = _PUBLIC.get((op, fname))
    if fn is None:
        fn = _PUBLIC[op, fname] = public_op(op, fname)
    return fn(x, y, broadcast=broadcast, axis=axis, act=act, out=out, device=device)


def _cast_overflowed(v, a: np.ndarray) -> bool:
    """Whether the weak scalar ``v`` became an infinity in ``a`` (``x - 2**31`` on float16):
    NumPy reports that cast's overflow on every call, so it is converted on every call."""
    if a.dtype.kind not in "fc" or np.isfinite(a):
        return False
    return type(v) is int or (type(v) is float and math.isfinite(v)) or \
        (type(v) is complex and cmath.isfinite(v))


def _with_scalar(memo, op, fname, x, y, broadcast, axis, act, out, device):
    """The fast path with one weak Python scalar operand, keyed by the scalar's type; a serial
    launch is remembered with the scalar object and the 0-d array it became (``memo``)."""
    key = (op, broadcast, axis, act, _geometry(x), _geometry(y))
    if out is not None:
        if type(out) is not _ND or not (_FLAGS_CHECKED or out.flags.writeable):
            return _call(op, fname, (x, y), broadcast, axis, act, out, device, None)
        key += (out.dtype, out.shape, out.strides)
    try:
        launch = _FAST.get(key)
    except TypeError:  # unhashable broadcast or act: the pipeline says what is wrong
        return _call(op, fname, (x, y), broadcast, axis, act, out, device, None)
    if launch is not None:
        try:
            xa = x if type(x) is _ND else np.asarray(x, launch.x_dtype)
            ya = y if type(y) is _ND else np.asarray(y, launch.y_dtype)
        except OverflowError:  # an int that does not fit: the pipeline raises it properly
            return _call(op, fname, (x, y), broadcast, axis, act, out, device, None)
        target = out if out is not None else launch.new_output()
        stamp = _STAMP[0]  # before the count: see _remember
        if launch.run(target, xa, ya, fname, out) == _OK:
            threads = _threads_to_remember(launch)
            weak = (x, xa, True) if xa is not x else (y, ya, False)
            if threads and not _cast_overflowed(weak[0], weak[1]):
                weak[1].flags.writeable = False  # this call's own: nobody writes it
                _push(memo, _remember(key, launch, target, xa, ya, out, broadcast, axis,
                                      act, threads, stamp, weak=weak))
            return target[()] if out is None and not launch.shape else target
        key = None
    return _call(op, fname, (x, y), broadcast, axis, act, out, device, key, memo)


def call_user(op, operands: tuple, broadcast, axis, out, device):
    """A user op (jitops.fusion.ElementwiseOp) on its operands: the same pipeline, and the
    same fast path for repeats (keyed by every array operand's geometry and every weak Python
    scalar's type; NumPy scalars count as the 0-d arrays they are to the pipeline)."""
    key = None
    if device is None and type(axis) is int \
            and (out is None or (type(out) is _ND and (_FLAGS_CHECKED or out.flags.writeable))):
        key = [op, broadcast, axis]
        weak = False
        for v in operands:
            t = type(v)
            if t is _ND:
                key.append((v.dtype, v.shape, v.strides))
            elif t in WEAK:
                key.append(t)
                weak = True
            elif isinstance(v, _SCALAR) and all(map(_plain, operands)):
                # as the 0-d array the pipeline makes of it
                return call_user(op, tuple(_as_array(v) for v in operands), broadcast, axis,
                                 out, device)
            else:
                key = None
                break
    if key is not None:
        key.append(None if out is None else (out.dtype, out.shape, out.strides))
        key = tuple(key)
        try:
            launch = _FAST.get(key)
        except TypeError:  # unhashable broadcast: the pipeline says what is wrong
            launch = key = None
        if launch is not None:
            arrays = operands
            if weak:
                try:  # each weak scalar as the dtype the first call settled on
                    arrays = tuple(v if type(v) is _ND else np.asarray(v, dt)
                                   for v, dt in zip(operands, launch.in_dtypes))
                except OverflowError:  # an int that does not fit: the pipeline raises
                    return _call(op, op.__name__, operands, broadcast, axis, None, out, device,
                                 None)
            target = out if out is not None else launch.new_output()
            if launch.run(target, arrays, op.__name__, out):
                return target[()] if out is None and not launch.shape else target
            key = None  # misaligned, overlapping or out read-only this time: the careful path
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
        call = prepare(cpu.MEMORY, op, fname, operands if host is None else host.operands,
                       mode, axis, act, out if host is None else host.out)
        launch = cpu.launch(call)
        # Remember the launch for repeats, unless it needed conversions, copies or a zero
        # check (the fast path hands the kernel the caller's arrays as they are; its keys
        # are made of ndarrays and Python scalars only).
        if launch is not None and key is not None and call.as_given:
            if len(_FAST) >= _FAST_MAX:
                _FAST.clear()
                _HEADERS.clear()
                _REPEATS.clear()
                shapeclass.clear()
            _FAST[key] = launch
            if isinstance(launch, cpu.Launch) and launch.direct is not None:  # once: verified
                fastcall.verify(launch, call.target, *call.inputs, call.out is None)
                if memo is not None:  # a new shape of its class takes the entry at once
                    _first_of_class(memo, op, launch, call, operands, out, given)
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
    from .cuda import repeat

    if not _CUDA_REPEAT:
        _CUDA_REPEAT.append(repeat)
        found = repeat.key(op, fname, broadcast, axis, act, device, operands, out)
    memory = cuda.memory(device, operands, out, fname)
    with cuda.on_device(memory):
        call = prepare(memory, op, fname, operands, mode, axis, act, out)
        cuda.launch(call, memory)
        repeat.remember(found, call, memory)
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


@lifecycle.at_fork_in_child
def _after_fork_in_child() -> None:
    """A forked child's repeats stop reading the parent's pool (a copy, whose sleepers never
    change): they launch on the child's own."""
    for memo in _MEMOS:
        for r in memo:
            if r is not None:
                r.quiet = None


def clear() -> None:
    """Forget remembered launches (tests that change tunables)."""
    _FAST.clear()
    _HEADERS.clear()
    _REPEATS.clear()
    shapeclass.clear()
    for memo in _MEMOS:
        memo[0] = memo[1] = None
    cpu.clear_launches()
