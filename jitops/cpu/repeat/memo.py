"""Repeats of CPU calls: what the CPU backend keeps so that a call like one before skips the
pipeline.

Fastest first: a public function's :class:`Memo` of its last two repeats -- a serial one calls
its launch's compiled entry with the objects themselves (:mod:`.fastcall`; the kernel's header
checks refuse another object), and takes every shape of a shape class (:mod:`.shapeclass`); a
parallel one is taken for the very same objects. Then the keyed memo (:func:`key_of`: op,
keywords, each operand's dtype, shape and strides, or a weak scalar's type) of launches of
exact geometries (``FAST``). Else the pipeline plans the call and :func:`record` keeps it. A
Python scalar is keyed by its type and converted to the dtype the first call settled on
(:class:`Weak`); integer ``elementwise_div`` repeats only once y is free of zeros.
"""

from __future__ import annotations

import cmath
import math
import time

import numpy as np

from ...core import catalog
from ...core.config import ASLEEP_SERIAL_MAX, ASLEEP_WAKE_WINDOW_S
from ...core.pipeline import WEAK
from .. import backend as cpu
from ..compile import lifecycle
from ..kernels.layout import CONTROL
from ..threads import parallel
from ..threads import pool as _pools
from . import fastcall, shapeclass

_ND = np.ndarray
_OK = cpu.OK
_FP_RAISED = cpu.kernels.FP_RAISED
_OVERLAP = cpu.kernels.OVERLAP
_ref = cpu.ref
_num_threads = parallel.num_threads
_launch = parallel.launch
_STAMP = parallel.STAMP
_WAKE_WINDOW = ASLEEP_WAKE_WINDOW_S
_clock = time.perf_counter
_drivers, _KERNELS, _SIG = cpu.drivers, cpu.kernels.KERNELS, cpu.SIG
#: The kernels read out's writeable flag themselves (jitops.cpu.kernels.binary.FLAGS_OFFSET): a
#: repeat need not ask for ``out.flags`` (a new flags object per call).
_FLAGS_CHECKED = cpu.FLAGS_CHECKED
#: What a keyed lookup returns where it did not run the call (the pipeline does).
MISS = object()

#: Repeated calls: a key (:func:`key_of`) -> cpu.Launch or cpu.UserLaunch.
FAST: dict = {}
FAST_MAX = 4096
#: (fast-path key, new result) or a shape-class key -> the serial Repeat of that key with a
#: compiled entry: the memo of a function whose calls alternate between geometries takes it
#: again (a new one costs ~1 us).
_REPEATS: dict = {}
#: A fast-path key -> (meta with header checks, its address, the dtype objects it names, the
#: compiled entry bound to it, the one that makes new results too; each or None).
_HEADERS: dict = {}
#: Every public function's memo (reset by :func:`clear`, after a fork).
MEMOS: list = []


class Memo:
    """A public function's last two repeats: ``latest`` and the one ``before`` it."""

    __slots__ = ("latest", "before")

    def __init__(self) -> None:
        self.latest = self.before = None
        MEMOS.append(self)


class Weak:
    """A weak Python scalar operand of a repeat: that object, the 0-d array it became, and
    whether it is x."""

    __slots__ = ("scalar", "array", "is_x")

    def __init__(self, scalar, array: np.ndarray, is_x: bool) -> None:
        self.scalar, self.array, self.is_x = scalar, array, is_x


def key_of(op, broadcast, axis, act, operands: tuple, out) -> tuple | None:
    """The keyed memo's key of a call: the op, its keywords, each ndarray operand's dtype,
    shape and strides (a weak Python scalar's type), and out's (None: a new result); None
    where an operand or out is anything else (the pipeline decides)."""
    key = [op, broadcast, axis, act]
    for v in operands:
        t = type(v)
        if t is _ND:
            key.append((v.dtype, v.shape, v.strides))
        elif t in WEAK:
            key.append(t)
        else:
            return None
    if out is None:
        key.append(None)
    elif type(out) is _ND and (_FLAGS_CHECKED or out.flags.writeable):
        key.append((out.dtype, out.shape, out.strides))
    else:
        return None
    return tuple(key)


def _lookup(op, broadcast, axis, act, operands: tuple, out):
    """``(launch, key)``: the keyed memo's launch of this call (None where there is none) and
    its key (None where the call has none, or its keywords are unhashable: the pipeline then
    says what is wrong)."""
    key = key_of(op, broadcast, axis, act, operands, out)
    if key is None:
        return None, None
    try:
        return FAST.get(key), key
    except TypeError:
        return None, None


def workers_asleep(words) -> bool:
    """Whether the pool whose control words ``words`` are (a view kept by a repeat) has
    sleeping workers and no OpenMP team in use."""
    return bool(words[CONTROL.SLEEPERS]) and not words[CONTROL.OMP]


class Entries:
    """What a repeat of one geometry (or shape class) runs: the meta its compiled entries read
    (with header checks, or the planner's meta a class entry starts from) and its address,
    the dtype objects the checks compare by address (kept alive here), the entry taking
    ``out=`` and the one making the new result; for a parallel repeat, the serial entries it
    runs while the pool's workers sleep, their one-thread ``serial_meta`` and the waking
    pair; for a class, its words (``cls``). Each entry may be None."""

    __slots__ = ("meta", "address", "dtypes", "out", "new", "serial_meta", "waking_out",
                 "waking_new", "cls")

    def __init__(self, meta, dtypes, out, new, serial_meta=None, waking_out=None,
                 waking_new=None, cls=None) -> None:
        self.meta, self.address, self.dtypes = meta, meta.__array_interface__["data"][0], dtypes
        self.out, self.new = out, new
        self.serial_meta, self.waking_out, self.waking_new = serial_meta, waking_out, waking_new
        self.cls = cls


class Repeat:
    """A public function's last repeat (see :func:`_remember`): its keywords, whether it made a new
    result, its launch and how a repeat runs it.

    ``native``: the compiled entry bound to the launch and a meta with header checks
    (jitops.cpu.repeat.fastcall), which refuses objects that are not such ndarrays, so a serial
    repeat needs no identity. Otherwise (the hook off, or a parallel launch) the repeat is taken for
    the very same objects (``ids``), a parallel one only while the thread count is still ``threads``
    (``stamp``). While the pool sleeps, a small parallel repeat runs on the calling thread
    (``serial``, or ``waking`` where it ran within the wake window, ``last``); ``quiet`` views the
    pool's sleeper count. A parallel launch run on one thread is kept as a serial one that
    ``checks_count`` (entry ``counted``), taken only while the count is still one.
    """

    __slots__ = ("broadcast", "axis", "act", "new", "native", "makes", "new_output", "launch",
                 "headers", "meta", "threads", "ids", "stamp", "drivers", "args", "weak",
                 "checks_count", "counted", "serial", "waking", "last", "quiet")

    def __init__(self, broadcast, axis, act, out, launch, headers, threads, ids, stamp,
                 weak=None):
        self.broadcast, self.axis, self.act = broadcast, axis, act
        self.new = out is None
        self.launch, self.headers, self.meta = launch, headers, headers.address
        self.new_output = launch.output_maker()
        self.makes = self.new and headers.new is not None

        def entry(out, new):  # handed the objects as they come: a weak scalar as its array
            e = new if self.makes else out
            return e if e is None or weak is None else _with_weak(e, self.makes, weak)

        self.native = self.counted = self.serial = self.waking = self.quiet = None
        #: a parallel launch remembered on one thread: taken only while the count is one
        self.checks_count = threads == 1 and launch.parallel
        if threads == 1:
            if self.checks_count:
                self.counted = entry(headers.out, headers.new)
            else:
                self.native = entry(headers.out, headers.new)
        elif headers.out is not None:  # runs serially while the workers sleep
            self.serial = entry(headers.out, headers.new)
            self.waking = entry(headers.waking_out, headers.waking_new)
            self.quiet = memoryview(_pools.get().words.view(np.uint8)).cast("q")
        self.last = -math.inf  # (the first call after an idle spell wakes nobody)
        self.threads, self.ids = threads, ids
        self.weak = weak  # a Weak, or None
        #: the stamp read before the count (see _remember); None, while a threads() block is
        #: open, is kept as -1, which no stamp equals
        self.stamp = -1 if stamp is None else stamp
        self.drivers = _drivers(_KERNELS, _SIG) if threads > 1 else None
        self.args = None


def _threads_to_remember(launch) -> int:
    """The thread count a launch that just ran is remembered with (0: not remembered): 1 for
    a serial one (its compiled entry), the calling thread's count for a parallel one without
    a zero check and with its stores chosen (cpu.Launch) -- 1 where that count is one: a
    serial repeat that checks the count (:class:`Repeat`)."""
    if launch.direct is not None:
        return 1
    if launch.parallel and launch.y_check is None and launch.choice is None:
        return _num_threads()
    return 0


def push(memo: Memo, r: Repeat | None) -> None:
    """``r`` becomes a function's latest repeat, the latest before it the one before."""
    if r is not memo.latest:
        memo.latest, memo.before = r, memo.latest


def again(r: Repeat, native, x, y, out):
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


def _with_weak(native, makes: bool, w: Weak):
    """``native`` (taking ``(x, y)`` if it ``makes`` the result, else ``(out, x, y)``) for
    calls whose x or y is the weak Python scalar ``w.scalar``: that very object is handed
    over as the 0-d array it became. The scalar is held here, so its identity stays its own,
    and a Python int or float never changes value; any other operand goes as it is (and the
    kernel refuses what is not such an array)."""
    weak, array, is_x = w.scalar, w.array, w.is_x
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


def by_identity(memo: Memo, r: Repeat, x, y, out):
    """(status, target) of a repeat without a compiled entry, or whose entry checks the
    count (see :class:`Repeat`); status None where the repeat does not apply (other objects,
    another thread count)."""
    if r.checks_count:
        if r.stamp != _STAMP[0] and not _same_count(memo, r):
            return None, None  # a count above one now: the key (a parallel launch again)
        if r.counted is not None:  # any such arrays: the kernel checks their headers
            return again(r, r.counted, x, y, out)
    if r.ids != (id(x), id(y), id(out)):
        return None, None
    w = r.weak
    if w is not None:  # that very scalar object: the 0-d array it became
        if w.is_x:
            x = w.array
        else:
            y = w.array
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


def _same_count(memo: Memo, r: Repeat) -> bool:
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
    """The :class:`Repeat` of a call that just ran: a meta (balanced for ``threads``, 1 for a serial
    launch) with header checks (jitops.cpu.kernels.binary.header_checks), so that the kernel
    verifies the objects it is handed, and for a serial launch the compiled entry bound to it; a
    parallel repeat also keeps its drivers, arguments and thread-count stamp (each asked for again
    after a job is a cache miss). None where headers cannot be read.
    """
    if threads == 1 and launch.direct is not None and not launch.in_place:
        # serial: any shape of its class? (not where out may be an input: a class's entry
        # takes none)
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
        dtypes = (target.dtype, x.dtype, y.dtype)
        if threads == 1:
            made = launch.entry_result() if out is None else None
            h = Entries(meta, dtypes, fastcall.bind(launch.task, meta, size),
                        fastcall.bind(launch.task, meta, size, made) if made else None)
        else:
            h = Entries(meta, dtypes, *_asleep_entries(launch, target, x, y, out, size))
        _HEADERS[hkey] = h
    ids = (id(x), id(y), id(out))
    if weak is not None:  # taken for that scalar object (by_identity hands over its array)
        s = id(weak.scalar)
        ids = (s, ids[1], ids[2]) if weak.is_x else (ids[0], s, ids[2])
    r = Repeat(broadcast, axis, act, out, launch, h, threads, ids, stamp, weak)
    if shared and (r.native or r.counted) is not None:  # any such objects: one per key
        _REPEATS[hkey, out is None] = r
    return r


def record(key, launch, call, memo: Memo | None, op, operands: tuple, out, given) -> None:
    """Keep the launch of a call the pipeline just planned and ran under ``key``, unless it
    needed conversions, copies or a zero check (the fast path hands the kernel the caller's
    arrays as they are); a serial one is verified (once: :func:`.fastcall.verify`) and, where
    it has a shape class, becomes the function's latest repeat at once. ``given``: the
    keywords as the caller wrote them (what a repeat compares)."""
    if launch is None or key is None or not call.as_given:
        return
    if len(FAST) >= FAST_MAX:
        FAST.clear()
        _HEADERS.clear()
        _REPEATS.clear()
        shapeclass.clear()
        _FIRST_SHAPES.clear()
    if FAST.get(key, launch) is not launch:  # an in-place launch in another's place: the
        _HEADERS.clear()  # entries and repeats bound to that one go (made again on demand)
        _REPEATS.clear()
    FAST[key] = launch
    if isinstance(launch, cpu.Launch) and launch.direct is not None:
        fastcall.verify(launch, call.target, *call.inputs, call.out is None)
        if memo is not None:  # a new shape of its class takes the entry at once
            _first_of_class(memo, op, launch, call, operands, out, given)


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
            weak = Weak(v, a, i == 0)
    r = _class_repeat(op, launch, call.target, x, y, out, *given, weak)
    if r is not None:
        push(memo, r)


#: The operand shapes of the first call of each class key: a class is made at the second.
_FIRST_SHAPES: dict = {}


def _class_repeat(op, launch, target, x, y, out, broadcast, axis, act, weak):
    """The :class:`Repeat` of a serial call whose compiled entry takes every shape of its
    class (jitops.cpu.repeat.shapeclass), or None."""
    if op in catalog.SIZE_DECIDED and x.ndim and y.ndim and x.shape != y.shape:
        return None  # a class of rows: its members' operands differ in size, and so may
        # their scalar entries
    ckey = (op, broadcast, axis, act, target.dtype, x.dtype, y.dtype, x.ndim, y.ndim,
            out is None)
    if weak is None:
        r = _REPEATS.get(ckey)
        if r is not None and r.broadcast is broadcast and r.axis is axis and r.act is act:
            return r
    shapes = (x.shape, y.shape)
    if _FIRST_SHAPES.setdefault(ckey, shapes) == shapes and not shapeclass.made(ckey):
        return None  # one shape so far: its own repeat serves it (a program of one shape
        # never compiles the class planner)
    found = shapeclass.entries(ckey, launch, target, x, y, out, fastcall.bind)
    if found is None:
        return None
    template, cls, f_out, f_new = found
    headers = Entries(template, (target.dtype, x.dtype, y.dtype), f_out, f_new, cls=cls)
    r = Repeat(broadcast, axis, act, out, launch, headers, 1, (id(x), id(y), id(out)), None,
               weak)
    if weak is None:
        _REPEATS[ckey] = r
    return r


def _asleep_entries(launch, target, x, y, out, size: int) -> tuple:
    """For a parallel repeat: the serial compiled entries it runs while the pool's workers
    sleep (:class:`Repeat`) -- ``f(out, x, y)`` and, where the launch makes C-ordered
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
    makes = launch.entry_result() if out is None else None
    serial, waking = ((fastcall.bind(launch.task, meta, size, None, wake),
                       fastcall.bind(launch.task, meta, size, makes, wake) if makes else None)
                      for wake in (0, _pools.get().ctl))
    return (*serial, meta, *waking)


def _cast_overflowed(v, a: np.ndarray) -> bool:
    """Whether the weak scalar ``v`` became an infinity in ``a`` (``x - 2**31`` on float16):
    NumPy reports that cast's overflow on every call, so it is converted on every call."""
    if a.dtype.kind not in "fc" or np.isfinite(a):
        return False
    return type(v) is int or (type(v) is float and math.isfinite(v)) or \
        (type(v) is complex and cmath.isfinite(v))


def with_scalar(memo: Memo, op, fname, x, y, broadcast, axis, act, out):
    """The keyed path of a call with one weak Python scalar operand (keyed by the scalar's
    type): ``(result, None)``, or ``(MISS, key)`` where the pipeline must run it (``key``: where
    to keep its launch, or None). A serial launch is remembered with the scalar object and
    the 0-d array it became."""
    launch, key = _lookup(op, broadcast, axis, act, (x, y), out)
    if launch is None:
        return MISS, key
    try:
        xa = x if type(x) is _ND else np.asarray(x, launch.x_dtype)
        ya = y if type(y) is _ND else np.asarray(y, launch.y_dtype)
    except OverflowError:  # an int that does not fit: the pipeline raises it properly
        return MISS, None
    target = out if out is not None else launch.new_output()
    stamp = _STAMP[0]  # before the count: see _remember
    status = launch.run(target, xa, ya, fname, out)
    if status != _OK:  # (out as an input, refused: as binary's)
        return MISS, (key if status == _OVERLAP else None)
    threads = _threads_to_remember(launch)
    weak = Weak(x, xa, True) if xa is not x else Weak(y, ya, False)
    if threads and not _cast_overflowed(weak.scalar, weak.array):
        weak.array.flags.writeable = False  # this call's own: nobody writes it
        push(memo, _remember(key, launch, target, xa, ya, out, broadcast, axis, act, threads,
                             stamp, weak=weak))
    return (target[()] if out is None and not launch.shape else target), None


def binary(memo: Memo, op, fname, x, y, broadcast, axis, act, out):
    """The keyed path of a call of two ndarrays: ``(result, None)``, or ``(MISS, key)`` where
    the pipeline must run it (``key``: where to keep its launch, or None)."""
    launch, key = _lookup(op, broadcast, axis, act, (x, y), out)
    if launch is None:
        return MISS, key
    target = out if out is not None else launch.new_output()
    pmeta = launch.direct
    if pmeta is not None:  # serial: the compiled driver, nothing between
        status = launch.entry(launch.task, _ref(target), _ref(x), _ref(y), pmeta)
        if status == _OK or status >= _FP_RAISED:
            push(memo, _remember(key, launch, target, x, y, out, broadcast, axis, act))
            if status != _OK:  # written: NumPy's errstate decides
                launch.report(status, fname)
            return target, None
        launch.check(status, fname, out)  # raises if a task failed
    else:
        status = launch.run(target, x, y, fname, out)
        if status == _OK:
            if not launch.parallel:  # a zero check, or a 0-d result
                return (target[()] if out is None and not launch.shape else target), None
            stamp = _STAMP[0]  # before the count: see _remember
            threads = _threads_to_remember(launch)
            if threads:
                push(memo, _remember(key, launch, target, x, y, out, broadcast, axis, act,
                                     threads, stamp))
            return target, None
    # misaligned, overlapping, out read-only or a zero divisor this time: the careful path
    # (which raises where it must), which keeps its launch where the key's refused out as
    # an input (planned for another call: its launch is kept in its place)
    return MISS, (key if status == _OVERLAP else None)


def user(op, operands: tuple, broadcast, axis, out):
    """The keyed path of a user op (jitops.fusion.ElementwiseOp): ``(result, None)``, or
    ``(MISS, key)`` where the pipeline must run it. NumPy scalars count as the 0-d arrays they
    are to the pipeline (the caller converts them)."""
    launch, key = _lookup(op, broadcast, axis, None, operands, out)
    if launch is None:
        return MISS, key
    arrays = operands
    if any(type(v) is not _ND for v in operands):
        try:  # each weak scalar as the dtype the first call settled on
            arrays = tuple(v if type(v) is _ND else np.asarray(v, dt)
                           for v, dt in zip(operands, launch.in_dtypes))
        except OverflowError:  # an int that does not fit: the pipeline raises
            return MISS, None
    target = out if out is not None else launch.new_output()
    if launch.run(target, arrays, op.__name__, out):
        if arrays is operands and not launch.parallel and launch.shape:
            op.memo.latest = _remember_user(key, launch, target, arrays, out, broadcast, axis)
        return (target[()] if out is None and not launch.shape else target), None
    return MISS, None  # misaligned, overlapping or out read-only this time: the careful path


class UserRepeat:
    """A user op's last serial repeat: its keywords, whether it made its result, and the
    compiled entry bound to its launch (``f(out, *inputs)``, or ``f(*inputs)`` making the
    result), whose header checks refuse other arrays."""

    __slots__ = ("broadcast", "axis", "new", "entry", "entries")

    def __init__(self, broadcast, axis, new: bool, entry, entries: Entries) -> None:
        self.broadcast, self.axis, self.new, self.entry = broadcast, axis, new, entry
        self.entries = entries  # keeps the meta and dtypes the entry reads alive


def _remember_user(key, launch, target, arrays, out, broadcast, axis) -> UserRepeat | None:
    """The :class:`UserRepeat` of a serial user-op call that just ran, or None (no compiled
    entry here, or a new result the entry cannot make)."""
    h = _HEADERS.get(key)
    if h is None:
        meta = cpu.header_checks(launch, (target, *arrays))
        if meta is None:
            return None
        fastcall.verify_user(launch, target, arrays, out is None)
        size, nin = math.prod(target.shape), len(arrays)
        makes = launch.entry_result() if out is None else None
        h = _HEADERS[key] = Entries(
            meta, tuple(a.dtype for a in (target, *arrays)),
            fastcall.bind(launch.task, meta, size, nin=nin),
            fastcall.bind(launch.task, meta, size, makes, nin=nin) if makes else None)
    entry = h.out if out is not None else h.new
    return None if entry is None else UserRepeat(broadcast, axis, out is None, entry, h)


def parallel_again(memo: Memo, r: Repeat, x, y, out):
    """(status, target) of a parallel repeat (``r.native`` None): while the pool's workers
    sleep (the process was idle), serially, waking them where calls come close together;
    else :func:`by_identity`."""
    q = r.quiet
    if q is not None and workers_asleep(q):
        # the kernel checks the objects, and the thread count changes nothing here
        now = _clock()
        serial = r.waking if now - r.last < _WAKE_WINDOW else r.serial
        r.last = now
        if out is not None:
            return serial(out, x, y), out
        return again(r, serial, x, y, out)
    return by_identity(memo, r, x, y, out)


def clear() -> None:
    """Forget every repeat and remembered launch (tests that change tunables)."""
    FAST.clear()
    _HEADERS.clear()
    _REPEATS.clear()
    shapeclass.clear()
    _FIRST_SHAPES.clear()
    for memo in MEMOS:
        memo.latest = memo.before = None


@lifecycle.at_fork_in_child
def _after_fork_in_child() -> None:
    """A forked child's repeats stop reading the parent's pool (a copy, whose sleepers never
    change): they launch on the child's own."""
    for memo in MEMOS:
        for r in (memo.latest, memo.before):
            if type(r) is Repeat:  # (a user op's repeat is serial: it reads no pool)
                r.quiet = None
