"""The CPU backend: host arrays for the pipeline, and the launch of a prepared call.

:data:`MEMORY` tells the pipeline (jitops.core.pipeline) how host arrays are read, copied and
allocated; :func:`launch` runs a :class:`~jitops.core.pipeline.PreparedCall` on the serial or
parallel kernel (jitops.cpu.kernels.binary) and returns the :class:`Launch` it used, which the front
end keeps for repeats of the same call (the fast path, jitops.ops).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import lru_cache, partial

import numba
import numpy as np

from ..core import catalog, config, errstate
from ..core.pipeline import PreparedCall, byte_extent, element_strides
from ..core.plan import TILED, contiguous_strides
from . import recycle
from .compile import registries
from .kernels import binary as kernels
from .kernels import nary
from .kernels.spec import KernelSpec
from .threads import parallel, pool

_I64 = numba.types.int64

#: A launch's status when it wrote the result (anything else: a check failed, nothing written).
OK = kernels.OK
#: Launch.run's status for a zero divisor of integer ``elementwise_div`` (checked in Python).
Y_REFUSED = -1


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _byte_layout(shape, elem_strides, dtype: np.dtype) -> tuple[int, ...] | None:
    """Byte strides of a new array with these element strides, or None for plain C order."""
    if elem_strides is None or len(shape) <= 1 or tuple(elem_strides) == contiguous_strides(shape):
        return None
    return tuple(s * dtype.itemsize for s in elem_strides)


def _new_array(shape, dtype: np.dtype, byte_strides) -> np.ndarray:
    size = math.prod(shape)
    nbytes = size * dtype.itemsize
    if nbytes >= config.RECYCLE_MIN_BYTES and recycle.enabled():
        return recycle.empty(shape, dtype, byte_strides, nbytes)  # memory no result uses now
    if byte_strides is None:
        return np.empty(shape, dtype)
    buf = np.empty(size, dtype)
    return np.ndarray(shape, dtype, buffer=buf, strides=byte_strides)


class HostMemory:
    """NumPy arrays, for :func:`jitops.core.pipeline.prepare`."""

    name = "cpu"
    array_kind = "a numpy.ndarray"

    @staticmethod
    def owns(v) -> bool:
        return isinstance(v, np.ndarray)

    @staticmethod
    def dtype(a) -> np.dtype:
        return a.dtype

    @staticmethod
    def shape(a):
        return a.shape

    @staticmethod
    def strides(a):
        return a.strides

    address = staticmethod(_address)

    @staticmethod
    def writeable(a) -> bool:
        return a.flags.writeable

    @staticmethod
    def from_host(a: np.ndarray) -> np.ndarray:
        return a

    @staticmethod
    def ready(a: np.ndarray) -> np.ndarray:
        """The array itself when the kernels can read it in place, else an equivalent copy."""
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        if not a.flags.aligned or element_strides(a.strides, a.itemsize) is None:
            a = a.copy()  # a fresh, aligned buffer (ascontiguousarray keeps a misaligned one)
        return a

    @staticmethod
    def copy(a: np.ndarray) -> np.ndarray:
        return a.copy()

    @staticmethod
    def empty(shape, dtype: np.dtype, elem_strides) -> np.ndarray:
        return _new_array(shape, dtype, _byte_layout(shape, elem_strides, dtype))

    @staticmethod
    def any_zero(a: np.ndarray) -> bool:
        return not a.all()

    @staticmethod
    def any_negative(a: np.ndarray) -> bool:
        return a.dtype.kind == "i" and bool((a < 0).any())

    @staticmethod
    def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)


MEMORY = HostMemory()


def _deliver(target: np.ndarray, out: np.ndarray | None) -> None:
    """Copy a written stand-in ``target`` into the caller's ``out`` (misaligned, overlapping
    an input, another byte order) before NumPy's errstate acts on the flags: NumPy writes
    ``out`` and then raises, so a FloatingPointError must find it written too."""
    if out is not None and target is not out:
        np.copyto(out, target)

#: What a kernel is given for each array: the object's address when the kernel can read the
#: data pointer from the object itself (see jitops.cpu.kernels.binary), else the data address (1
#: us).
ref = id if kernels.DATA_OFFSET >= 0 else _address
#: Whether the kernels refuse an ``out`` that is not writeable (status READ_ONLY).
FLAGS_CHECKED = kernels.FLAGS_OFFSET >= 0

_ENTRIES: dict = {}
#: The built-in drivers' signature (task, out, x, y, meta).
SIG = (_I64,) * 5
_SIG3 = (_I64,) * 3


def entry_point(kernel, sig=SIG):
    """The compiled driver (one signature for every op and dtype; compiled or loaded once)."""
    e = _ENTRIES.get(kernel)
    if e is None:
        if kernel.targetoptions.get("parallel"):
            # Loading a parallel kernel (from disk, too) starts Numba's threading layer: the
            # process's threading decision must see the process as it was before that.
            parallel.parallel_allowed()
        registries.compile_with(lambda: kernel.compile(sig))
        e = _ENTRIES[kernel] = kernel.overloads[sig].entry_point
    return e


_DRIVERS: dict = {}


def drivers(family: dict, sig: tuple) -> tuple:
    """The compiled drivers :func:`jitops.cpu.threads.parallel.launch` takes for a ``KERNELS``
    family (the built-ins' or the user ops'): pooled and serial on jitops' pool, else Numba's
    parallel one and the serial one (for a call that finds the layer's one launch taken).
    Resolved on the first parallel call, then one dictionary lookup."""
    d = _DRIVERS.get(id(family))
    if d is None:
        if pool.AVAILABLE:
            d = (entry_point(family["pooled"], sig + (_I64, _I64)),
                 entry_point(family["serial"], sig))
        else:
            d = (entry_point(family["parallel"], sig), entry_point(family["serial"], sig))
        _DRIVERS[id(family)] = d
    return d


class Metas:
    """A launch's meta arrays, one per thread count its tasks are balanced for, each built on
    first use: ``set_num_threads`` and ``threads()`` may change the count between repeats of
    one call (kept alive here as long as the launch, so the addresses stay valid)."""

    __slots__ = ("build", "arrays")

    def __init__(self, build):
        self.build, self.arrays = build, {}

    def address(self, threads: int) -> int:
        a = self.arrays.get(threads)
        if a is None:
            meta = self.build(threads=threads)
            a = self.arrays[threads] = (meta, _address(meta))
        return a[1]


_clock = time.perf_counter  # what StoreChoice's calls are timed with (tests replace it)


def _median(t: list[float]) -> float:
    """The median of ``t`` (not :mod:`statistics`: importing it, and the fractions module it
    brings, took 8 ms of ``import jitops``)."""
    s = sorted(t)
    h = len(s) // 2
    return s[h] if len(s) % 2 else (s[h - 1] + s[h]) / 2


class StoreChoice:
    """Which stores a write-only launch (every input broadcast, ``X(n, 1) - Y(1, m)``) runs faster
    with, measured on its own first parallel calls: which wins there depends on the machine's
    phase (where inputs are read too, streaming always wins and size decides:
    kernels.should_stream). The first :data:`ROUNDS` calls of each kind alternate; the lower
    median is kept for the launch's life. Both write the same values.
    """

    __slots__ = ("streamed", "plain_spec", "plain", "times", "chosen")

    #: Calls of each kind measured before the choice.
    ROUNDS = 3

    def __init__(self, streamed: int, spec: KernelSpec) -> None:
        self.streamed, self.plain = streamed, 0
        self.plain_spec = KernelSpec(spec.op, spec.act, spec.x, spec.y, spec.out, spec.compute,
                                     False, spec.tiled, spec.in_place)
        self.times: tuple[list[float], list[float]] = ([], [])
        self.chosen: int | None = None  # the task address kept

    def next(self) -> tuple[int, int]:
        """(task address, kind: 0 streamed, 1 ordinary stores) for the next measured call."""
        kind = 0 if len(self.times[0]) <= len(self.times[1]) else 1
        if kind and not self.plain:
            self.plain = kernels.task_address(self.plain_spec)
        return (self.plain if kind else self.streamed), kind

    def record(self, kind: int, seconds: float) -> int | None:
        """Note a measured call; the task address chosen once both kinds have ROUNDS."""
        t = self.times[kind]
        if len(t) < self.ROUNDS:
            t.append(seconds)
        s, p = self.times
        if self.chosen is None and len(s) >= self.ROUNDS and len(p) >= self.ROUNDS:
            self.chosen = self.plain if _median(p) < _median(s) \
                else self.streamed
        return self.chosen


class _Output:
    """What a launch's new result is: ``shape``, ``dtype`` and byte ``strides`` (None:
    C-ordered), set by the launch."""

    __slots__ = ()

    def new_output(self) -> np.ndarray:
        return _new_array(self.shape, self.dtype, self.strides)

    def entry_result(self) -> tuple | None:
        """(dtype, shape, order) of the new result a compiled entry makes
        (jitops.cpu.repeat.fastcall): C- or Fortran-ordered, below the recycled sizes; None
        for any other."""
        if math.prod(self.shape) * self.dtype.itemsize >= config.RECYCLE_MIN_BYTES:
            return None
        if self.strides is None:
            return self.dtype, self.shape, "C"
        if len(self.shape) > 1 and all(self.shape) and self.strides == \
                np.empty(self.shape, self.dtype, order="F").strides:
            return self.dtype, self.shape, "F"
        return None


def _transposed_maker(o: _Output) -> Callable[[], np.ndarray] | None:
    """A maker of ``o``'s new result below the recycled sizes whose byte strides are its axes
    laid out densely in another order than C's or Fortran's (a transpose's): ``np.empty`` in
    that order, transposed back; None for any other result."""
    shape, strides = o.shape, o.strides
    if strides is None or not all(shape) \
            or math.prod(shape) * o.dtype.itemsize >= config.RECYCLE_MIN_BYTES:
        return None
    order = sorted(range(len(shape)), key=lambda d: -strides[d])
    inner = tuple(shape[d] for d in order)
    back = tuple(order.index(d) for d in range(len(shape)))
    if np.empty(inner, o.dtype).transpose(back).strides != strides:
        return None
    return lambda: np.empty(inner, o.dtype).transpose(back)


class Launch(_Output):
    """Everything one call needs once its arrays are known: compiled task, metas, output layout;
    kept per call geometry for repeats. While a write-only output's stores are chosen (``choice``,
    :class:`StoreChoice`) it is not memoised, so every call comes through :meth:`run`.
    """

    __slots__ = ("entry", "parallel", "task", "metas", "pmeta", "direct", "shape", "dtype",
                 "strides", "x_dtype", "y_dtype", "y_check", "choice", "fp_mask", "maker",
                 "in_place")

    def __init__(self, spec: KernelSpec, plan, build_meta, dtype: np.dtype):
        self.x_dtype, self.y_dtype = spec.x, spec.y  # what a weak scalar operand becomes
        #: the floating-point flags this op reports (jitops.core.errstate.mask)
        self.fp_mask = errstate.mask(spec.op, spec.act)
        # integer ``elementwise_div`` refuses a zero divisor, integer ``power`` a negative
        # exponent, before writing (the pipeline raises): a repeat must find y free of them
        # before it launches (run does)
        self.y_check = None if spec.op == "power_int" and spec.y.kind != "i" else \
            _Y_CHECKS.get(spec.op)
        self.parallel = kernels.runs_parallel(plan, dtype, (spec.x, spec.y))
        self.entry = entry_point(kernels.KERNELS["serial"])
        self.task = kernels.task_address(spec)
        self.in_place = spec.in_place  # (an input may be out's exact view: KernelSpec)
        self.choice = StoreChoice(self.task, spec) if (
            spec.stream and self.parallel and not any(kernels.read_in_full(plan))) else None
        self.metas = Metas(build_meta)
        # below the parallel threshold the tasks do not depend on the thread count
        self.pmeta = None if self.parallel else self.metas.address(1)
        #: the meta address where the fast path may call ``entry`` itself (serial, no zero
        #: check, and not a 0-d result, which the caller gets as a NumPy scalar: see
        #: jitops.dispatch, whose direct path returns the array it wrote)
        self.direct = None if self.y_check or not plan.out_shape else self.pmeta
        self.shape, self.dtype = plan.out_shape, dtype
        self.strides = _byte_layout(plan.out_shape, plan.out_strides, dtype)
        self.maker = None  # output_maker's, once asked for

    def output_maker(self) -> Callable[[], np.ndarray]:
        """:meth:`new_output` as a callable a repeat keeps: ``np.empty`` bound to the shape and
        dtype where the result is C-ordered and below the recycled sizes (0.1 us a call less
        than the method), or to its axes in memory order where it is another dense layout
        (``order="K"`` of a transposed or Fortran operand: 0.4 us less than an ndarray on a
        buffer)."""
        maker = self.maker
        if maker is None:
            made = self.entry_result()
            if made is None:
                maker = _transposed_maker(self) or self.new_output
            elif made[2] == "C":
                maker = partial(np.empty, self.shape, self.dtype)
            else:
                maker = partial(np.empty, self.shape, self.dtype, order="F")
            self.maker = maker
        return maker

    def run(self, target: np.ndarray, x: np.ndarray, y: np.ndarray, fname: str,
            out: np.ndarray | None) -> int:
        """Launch; returns the kernel's status (``kernels.OK``: written, else a check failed
        and nothing was written; Y_REFUSED: y holds a zero divisor or a negative exponent the
        op refuses). A task that failed inside raises: never a silent result. Floating-point flags
        are reported (NumPy's errstate, which may raise) and the status is OK."""
        if self.y_check is not None and self.y_check(y):
            return Y_REFUSED
        return self._run(target, x, y, fname, out)

    def _run(self, target: np.ndarray, x: np.ndarray, y: np.ndarray, fname: str,
             out: np.ndarray | None) -> int:
        """:meth:`run` for operands the pipeline has just checked (y free of zeros)."""
        if not self.parallel:
            status = self.entry(self.task, ref(target), ref(x), ref(y), self.pmeta)
        else:
            n = parallel.num_threads()  # 1: threads(1), serial() or a layer that cannot run
            m = self.metas.arrays.get(n)
            choice = self.choice
            task, kind = (self.task, -1) if choice is None else choice.next()
            args = (task, ref(target), ref(x), ref(y),
                    m[1] if m is not None else self.metas.address(n))
            t0 = _clock() if kind >= 0 else 0.0  # only while the stores are being chosen
            if n > 1:
                status = parallel.launch(drivers(kernels.KERNELS, SIG), args, n)
            else:
                status = self.entry(*args)
            if kind >= 0 and (status == kernels.OK or status >= kernels.FP_RAISED):
                chosen = choice.record(kind, _clock() - t0)
                if chosen is not None:
                    self.task, self.choice = chosen, None
        if status >= kernels.FP_RAISED:
            _deliver(target, out)
            self.report(status, fname)
            return kernels.OK
        if status == kernels.TASK_FAILED:
            self.check(status, fname, out)
        return status

    def report(self, status: int, fname: str) -> None:
        """A launch that wrote its result and raised floating-point flags: NumPy's errstate
        decides (jitops.core.errstate), for the flags this op reports."""
        flags = status & self.fp_mask
        if flags:
            errstate.report(flags, fname)

    @staticmethod
    def check(status: int, fname: str, out: np.ndarray | None) -> None:
        """Raise if a task failed inside (some elements may be unwritten); other statuses
        mean a check refused the call before anything was written."""
        if status == kernels.TASK_FAILED:
            where = "out is partly written" if out is not None else "no result is returned"
            raise RuntimeError(f"jitops.{fname}: the compiled kernel raised an exception inside "
                               f"a task, so some elements were not computed ({where})")


def header_checks(launch: Launch, arrays, threads: int = 1) -> np.ndarray | None:
    """The meta of ``launch`` for ``threads`` with header checks for ``arrays`` (target, x,
    y): see :func:`jitops.cpu.kernels.binary.header_checks`; None at once where the ndarray layout
    is not verified (no meta built)."""
    if kernels.HEADER_OFFSETS is None:
        return None
    return kernels.header_checks(launch.metas.build(threads=threads), arrays)


#: The kernel ops that refuse some values of y, and the test finding one (the pipeline then
#: raises its error): integer Paddle division a zero divisor, integer power a negative exponent.
_Y_CHECKS = {**{impl: HostMemory.any_zero for impl in catalog.ZERO_REFUSED},
             "power_int": HostMemory.any_negative}


@lru_cache(maxsize=4096)
def _launch_for(spec: KernelSpec, plan, geometry, dtype: np.dtype) -> Launch:
    aligns, extents, same = geometry
    return Launch(spec, plan, partial(kernels.build_meta, plan, aligns, extents, same), dtype)


def _same_geometry(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.strides == b.strides


def launch(call: PreparedCall) -> Launch | UserLaunch | None:
    """Run a prepared call; returns its :class:`Launch` (None when there is nothing to do)."""
    if not call.plan.size:
        return None
    if not isinstance(call.impl, str):
        return _launch_user(call)
    x, y = call.inputs
    t = call.target
    # out is an input (x += y): a task with the loops of such rows (KernelSpec.in_place),
    # the only one whose launches let an input be out's exact view (OPERAND.SAME); another
    # launch refuses such a call, which is then planned as one
    same = tuple(_same_geometry(t, a) for a in (t, x, y))
    in_place = call.out is not None and any(
        s and _address(a) == _address(t) for s, a in zip(same[1:], (x, y)))
    same = (same[0], *(s and in_place for s in same[1:]))
    spec = KernelSpec(call.impl, call.act, x.dtype, y.dtype, call.dtypes.result,
                      call.dtypes.compute,
                      call.impl not in catalog.NOT_STREAMED and kernels.should_stream(
                          call.plan, call.dtypes.result, (x.dtype, y.dtype), staged_tiles=True),
                      call.plan.variant == TILED, in_place)
    # The kernel re-checks alignment and, with out=, overlap on every launch (it must: the
    # fast path hands it the caller's arrays), so their geometry is part of the launch.
    geometry = ((t.dtype.alignment, x.dtype.alignment, y.dtype.alignment),
                None if call.out is None else tuple(
                    byte_extent(0, a.shape, a.strides, a.itemsize) for a in (t, x, y)),
                same)
    result = _launch_for(spec, call.plan, geometry, call.dtypes.result)
    status = result._run(t, x, y, call.fname, call.out)  # prepare made the zero check
    if status != kernels.OK:  # the pipeline made the operands ready: this is a bug
        raise RuntimeError(f"jitops.{call.fname}: internal error: the kernel refused prepared "
                           f"operands (status {status})")
    return result




class UserLaunch(_Output):
    """A user op's launch once its arrays' geometry is known (the fast path keeps these, as
    it keeps :class:`Launch` for the built-ins): compiled task and meta. The kernel re-checks
    what can differ between calls of the same geometry (alignment, out writeable, overlap of
    ``out``) before anything is written (jitops.cpu.kernels.nary.uresolve)."""

    __slots__ = ("task", "metas", "parallel", "shape", "dtype", "strides", "in_dtypes")

    def __init__(self, spec: nary.UserSpec, plan, dtype: np.dtype, geometry):
        self.in_dtypes = spec.inputs  # what a weak scalar operand becomes
        self.task = nary.task_address(spec)
        self.metas = Metas(partial(kernels.build_meta, plan, *geometry))
        self.parallel = kernels.runs_parallel(plan, dtype, spec.inputs)
        self.shape, self.dtype = plan.out_shape, dtype
        self.strides = _byte_layout(plan.out_shape, plan.out_strides, dtype)

    def status(self, target: np.ndarray, inputs, threads: int) -> int:
        """The drivers' status for these operands on ``threads`` threads, not reported (what a
        compiled entry is also compared with)."""
        refs = np.array([ref(target), *[ref(a) for a in inputs]], np.int64)  # this call's own
        args = (self.task, _address(refs), self.metas.address(threads))
        if threads > 1:
            return parallel.launch(drivers(nary.KERNELS, _SIG3), args, threads)
        return entry_point(nary.KERNELS["serial"], _SIG3)(*args)

    def run(self, target: np.ndarray, inputs, fname: str, out) -> bool:
        """Launch; False (nothing written) when a check fails and the pipeline must decide."""
        n = parallel.num_threads() if self.parallel else 1
        return self.finish(self.status(target, inputs, n), target, fname, out)

    @staticmethod
    def finish(status: int, target: np.ndarray, fname: str, out) -> bool:
        """Whether a launch with this status wrote its result (its flags then reported, as
        NumPy's errstate says); False where a check refused it (nothing written); raises
        where a task failed."""
        if status == kernels.OK:
            return True
        if status >= kernels.FP_RAISED:  # written; NumPy's errstate decides the rest
            _deliver(target, out)
            errstate.report(status, fname)
            return True
        if status == kernels.TASK_FAILED:
            where = "out is partly written" if out is not None else "no result is returned"
            raise RuntimeError(
                f"jitops.{fname}: the function raised an exception inside the compiled kernel "
                f"(for example a complex division by zero, which Numba raises on), so some "
                f"elements were not computed ({where})")
        return False  # misaligned, overlapping or out read-only: nothing written


@lru_cache(maxsize=4096)
def _user_launch_for(spec: nary.UserSpec, plan, dtype: np.dtype, geometry) -> UserLaunch:
    return UserLaunch(spec, plan, dtype, geometry)


def _launch_user(call: PreparedCall) -> UserLaunch:
    """Run a user op (``jitops.elementwise``) on the N-input kernels (jitops.cpu.kernels.nary)."""
    op = call.impl
    arrays = (call.target, *call.inputs)
    ins = tuple(a.dtype for a in call.inputs)
    compute = call.dtypes.compute
    spec = nary.UserSpec(op.key, ins, call.dtypes.result, compute, op.returned(compute),
                         op.cacheable, kernels.should_stream(
                             call.plan, call.dtypes.result, ins,
                             staged_tiles=len(ins) <= nary.STAGED_INPUTS))
    geometry = (tuple(a.dtype.alignment for a in arrays),
                None if call.out is None else tuple(
                    byte_extent(0, a.shape, a.strides, a.itemsize) for a in arrays),
                tuple(_same_geometry(call.target, a) for a in arrays))
    result = _user_launch_for(spec, call.plan, call.dtypes.result, geometry)
    if not result.run(call.target, call.inputs, call.fname, call.out):
        raise RuntimeError(f"jitops.{call.fname}: internal error: prepared operands refused")
    return result


def clear_launches() -> None:
    """Forget compiled launches (tests that change tunables)."""
    _launch_for.cache_clear()
    _user_launch_for.cache_clear()
