"""jitops' own thread pool for the parallel CPU kernels: hot workers, no per-call set-up.

Why not Numba's threading layer: measured on these machines, a 1e6-element subtract (12 MB,
cache-resident) took 257 us under Numba's TBB layer after the process idled for 2 ms, 169 us
under its OpenMP layer and 193 us with PyTorch -- TBB builds a ``task_arena`` per launch and
wakes its workers into it -- while OpenMP, the fast one, cannot be forked safely and fights
PyTorch's own OpenMP runtime for the cores. This pool keeps what each does well:

* workers are Python threads running a compiled loop without the GIL (:func:`_worker`): after
  a job they spin briefly on the job word (``SPIN`` pause instructions), then yield the core
  until ``IDLE_NS`` of wall time have passed, then sleep in the kernel on a Linux futex, so
  an idle process costs nothing, whatever the machine's load, and a burst of calls never
  waits for a wake-up;
* a launch (:func:`run_job`, compiled into the drivers) publishes one job -- a task function
  address, its arguments and the task count -- bumps the job word, wakes sleepers only if
  there are any, and runs tasks itself. Each thread taking part owns a contiguous range of
  the tasks, the same range job after job (the caller the first, worker ``i`` the
  ``i + 1``-th): it claims runs from its own end of it with a compare-and-swap on the
  range's word (the job's generation and the range's two ends), and once its range is empty
  it steals from the far end of another's (:func:`_claim_and_run`). So a thread slowed by
  another process's load just runs fewer tasks, neighbouring tasks (tiles sharing cache
  lines) stay on one core, and a job's data stays with the core that touched it last time;
  every other job walks the ranges backwards, so that each thread starts on what its caches
  still hold from the last job (its last tasks). A task claimed is always for the job its
  arguments were read from (the generation check);
* a forked child starts a fresh pool on its first parallel call (no thread, lock or futex
  state crosses a fork); Python threads launching at once never wait for each other: one
  holds the pool, the others run their call serially on their own thread.

Where PyTorch's GNU OpenMP runtime is loaded and usable (:mod:`jitops.cpu.omp`), a job of the
main thread is run by that runtime's team instead: :func:`run_job` publishes it the same way
and calls ``GOMP_parallel`` with :func:`_omp_entry`, which claims tasks as a worker does. A
team thread descheduled by another process's load holds the whole region (OpenMP joins
threads, the pool joins tasks): two jobs in a row that each waited more than a quarter of
their time for one with nothing left to do make the next :data:`OMP_BACKOFF_JOBS` jobs run
on the workers, twice as many each time the team stalls again soon after (up to
:data:`OMP_BACKOFF_MAX_JOBS`).

The futex is reached through libc's ``syscall`` by address (kept in the control block, never
in compiled code, so the on-disk cache stays valid across processes). Where that is not
available (not Linux), :data:`AVAILABLE` is False and jitops launches through Numba's layer.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import platform
import threading
import time
import warnings

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..core import errstate
from ..core.config import env_flag, env_int
from . import cache, hooks, lifecycle, registries
from .jit import ENTRY, inner

_I64 = types.int64

# The control block: int64 words, the contended ones a cache line (8 words) apart.
C_NRANGES, C_UNIT = 0, 1  # the job's layout: its ranges, and tasks per unit
C_INFO = 8  # generation << 32 | number of tasks: the job's generation, published last
C_DONE = 16  # tasks finished in this job
C_FAILED = 24  # tasks whose compiled code returned an error status
C_FP = 25  # the floating-point exception flags the job's tasks raised (MXCSR bits, ORed)
C_SEQ = 32  # the futex word (low 32 bits): bumped once per job
C_SLEEPERS = 40  # workers inside futex_wait
C_STOP = 48  # 1: workers return
C_KIND, C_TASK, C_A, C_B, C_C, C_D, C_WORKERS = 56, 57, 58, 59, 60, 61, 62  # the job
C_REVERSIBLE = 63  # 1: the job may be walked backwards (not a tiled transpose)
C_SYSCALL, C_FUTEX_NR, C_YIELD_NR = 64, 65, 66  # libc syscall's address, the syscall numbers
C_SPIN, C_IDLE_NS = 67, 68  # pauses, then wall-time ns a worker waits for a job before sleeping
C_BY_CALLER = 69  # tasks of the last job run by the launching thread (the rest: by workers)
C_OMP, C_OMP_ENTRY = 70, 71  # GOMP_parallel of a shared OpenMP runtime (0: none), our entry
C_CLAIMS = 72  # claims (runs of tasks) the last job was taken in, on a line of its own
C_LAST_DONE = 73  # cycle counter when the last job's last task was counted done
C_OMP_BACKOFF = 74  # jobs left to run on the pool's own workers after OpenMP jobs stalled
C_OMP_STALLS = 75  # OpenMP jobs in a row that stalled
C_OMP_BACKOFF_LEN = 76  # how many jobs the last backoff was
C_OMP_CLEAN = 77  # OpenMP jobs that did not stall since the last backoff began
C_OMP_BACKOFF_MIN, C_OMP_BACKOFF_MAX = 78, 79  # OMP_BACKOFF_JOBS, OMP_BACKOFF_MAX_JOBS
C_JOIN_SEQ = 80  # futex word of threads waiting for a job's last tasks: bumped to wake them
C_JOIN_WAITERS = 88  # threads asleep (or about to be) waiting for a job's last tasks
C_JOIN_SLEEPS = 89  # times a thread went to sleep waiting for a job's last tasks (diagnostic)
C_JOIN_SPIN, C_JOIN_TIMEOUT = 96, 97  # JOIN_SPIN, JOIN_TIMEOUT_NS
C_CALLER_FIRST = 104  # the first task the caller ran of its own range (-1: none; diagnostic)
C_ALTERNATE = 105  # 1: every other job walks the ranges backwards (ALTERNATE)
C_OMP_TNUM = 106  # omp_get_thread_num of the shared OpenMP runtime (0: unknown)
C_RANGE_CAP = 107  # how many range words the block has
C_MAX_UNITS = 108  # MAX_UNITS (a word, so that tests can cut small jobs into units too)
C_CLOCK = 109  # libc clock_gettime's address (the workers' idle clock)
C_RANGES = 112  # range r's word: C_RANGES + 8 * r, gen (24 bits) | lo (20) | hi (20)

#: Job kinds: what arguments the task function takes.
KIND_BINARY = 0  # _task(spec, po, px, py, pmeta, t) of the built-in ops
KIND_NARY = 1  # _utask(spec, pptrs, pmeta, t) of the user ops

#: Pause instructions a worker spins after a job before it yields: ~50 us on x86.
SPIN = env_int("JITOPS_POOL_SPIN", 2000)
#: Wall time (microseconds) from the end of a job a worker waits for the next one before it
#: sleeps on the futex, yielding its core after the spin: a clock, not a count of yields, so
#: that on a loaded machine, where each yield may last a time slice, it still falls asleep.
#: 5 ms is what the former 4,000 yields lasted on an idle machine here: the sporadic rows
#: (2 ms between calls) ran 0.81-0.83x NumPy at 1e6 with 2 ms, 1.04-1.26x with 5 ms.
IDLE_US = env_int("JITOPS_POOL_IDLE_US", 5000, 0, 10_000_000)

#: Whether every other job walks the threads' ranges backwards (``JITOPS_POOL_ALTERNATE=0``:
#: always forwards). A thread's range is the same from job to job, so a job walked the other
#: way from the last one starts each thread on the tasks it ran last, whose data its own
#: caches (L2, and the part of the shared L3 not yet evicted) still hold. Measured on the
#: pool, both ways in one process (float32 ``x - y`` into ``out=``, paired rounds): 3-7%
#: faster at 3e5 elements, 2-3% at 1e6 (12 MB, in the L3), 4.5-8% at 2e6, 1.5% at 3e6,
#: ``x - 3.0`` at 2e6 9%; the row, pdpd and outer broadcasts within +-1.3%. Tiled transposes
#: lost 9% and are always walked forwards (``reversible``).
ALTERNATE = env_int("JITOPS_POOL_ALTERNATE", 1, 0, 1)

#: Pause instructions (~200 us on x86) a thread that has nothing left to claim spins waiting
#: for the job's last tasks before it sleeps on the futex (:func:`_wait_done`). Long enough
#: that an ordinary job -- whose last tasks end within a task's time (tens of microseconds)
#: of each other -- never sleeps, and short beside a scheduler time slice: a thread holding
#: a task that another process's thread pushed off its core waits for that slice (some
#: milliseconds), unless a core falls idle, from which the scheduler pulls it at once.
JOIN_SPIN = env_int("JITOPS_POOL_JOIN_SPIN", 8000)
#: A sleeper waiting for a job's last tasks looks again after this long whatever happens
#: (nanoseconds, under 1e9).
JOIN_TIMEOUT_NS = 1_000_000

#: Jobs run on the pool's own workers after two in a row on a shared OpenMP team each waited
#: more than a quarter of its time for a team thread with nothing left to do (jitops.cpu.omp).
#: One such job is no sign: the first job after an idle spell waits for a sleeping team
#: thread to wake up, and the next finds it awake.
OMP_BACKOFF_JOBS = env_int("JITOPS_OMP_BACKOFF", 64)
#: A backoff that begins before the team ran OMP_BACKOFF_JOBS jobs without a stall since the
#: last one began is twice as long as the last, up to this many jobs: under lasting load
#: (another process keeping a core busy) the team is tried ever more rarely -- each try
#: costs two stalled jobs -- and after a calm spell the backoff is short again.
OMP_BACKOFF_MAX_JOBS = env_int("JITOPS_OMP_BACKOFF_MAX", 8192)

#: Stack of each pool worker thread (bytes, reserved, not committed): a task keeps its staged
#: tiles there (``kernels.TILE_MAX`` elements per staged input, up to 16 bytes each: 128 KiB
#: for a built-in's two complex128 inputs, 256 KiB for a user op's four) beside the frames.
#: Set for the workers whatever ``threading.stack_size`` a program chose for its own threads:
#: with 160 KiB stacks a transposed complex128 subtract overflowed a worker's stack.
WORKER_STACK = 4 << 20

_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_CLOCK_MONOTONIC = 1
_FUTEX_NR, _YIELD_NR = hooks.FUTEX_NR, hooks.YIELD_NR

# -- atomics and the futex, as intrinsics ---------------------------------------------------------

_i64 = ir.IntType(64)
_i32 = ir.IntType(32)


def _word(builder, base, index, ty=_i64):
    ptr = builder.inttoptr(base, ty.as_pointer())
    return builder.gep(ptr, [index])


@intrinsic
def load(typingctx, base, index):
    """Atomic (acquire) load of int64 word ``index`` of the block at address ``base``."""
    def codegen(context, builder, sig, args):
        return builder.load_atomic(_word(builder, *args), "acquire", 8)
    return _I64(base, index), codegen


@intrinsic
def store(typingctx, base, index, value):
    """Atomic (release) store into int64 word ``index``."""
    def codegen(context, builder, sig, args):
        builder.store_atomic(args[2], _word(builder, args[0], args[1]), "release", 8)
        return context.get_dummy_value()
    return types.void(base, index, value), codegen


@intrinsic
def fetch_add(typingctx, base, index, value):
    """Atomic (sequentially consistent) add to int64 word ``index``; returns the old value."""
    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("add", _word(builder, args[0], args[1]), args[2], "seq_cst")
    return _I64(base, index, value), codegen


@intrinsic
def fetch_or(typingctx, base, index, value):
    """Atomic (sequentially consistent) or into int64 word ``index``; returns the old value."""
    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("or", _word(builder, args[0], args[1]), args[2], "seq_cst")
    return _I64(base, index, value), codegen


@intrinsic
def exchange(typingctx, base, index, value):
    """Atomic (sequentially consistent) exchange of int64 word ``index``: a store that is
    also a full barrier. Returns the old value."""
    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("xchg", _word(builder, args[0], args[1]), args[2], "seq_cst")
    return _I64(base, index, value), codegen


@intrinsic
def compare_swap(typingctx, base, index, expected, new):
    """Atomic compare-and-swap of int64 word ``index``; True if it held ``expected``."""
    def codegen(context, builder, sig, args):
        pair = builder.cmpxchg(_word(builder, args[0], args[1]), args[2], args[3], "seq_cst",
                               "seq_cst")
        return builder.extract_value(pair, 1)
    return types.boolean(base, index, expected, new), codegen


@intrinsic
def pause(typingctx):
    """A spin-wait hint (x86 ``pause``; nothing elsewhere)."""
    def codegen(context, builder, sig, args):
        if platform.machine() in ("x86_64", "AMD64", "i686"):
            fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(
                ir.VoidType(), []))
            builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def cycles(typingctx):
    """The CPU's cycle counter (``rdtsc``; only compared within one job). x86 only: the
    OpenMP route that reads it is (jitops.cpu.omp)."""
    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter",
                                              fnty=ir.FunctionType(_i64, []))
        return builder.call(fn, [])
    return _I64(), codegen


@intrinsic
def omp_parallel(typingctx, fn, entry, data, nthreads):
    """``GOMP_parallel(entry, data, nthreads, 0)`` through GNU OpenMP's entry at address ``fn``:
    ``entry(data)`` runs on ``nthreads`` threads of the runtime's team (this one included) and
    returns when all have (jitops.cpu.omp)."""
    def codegen(context, builder, sig, args):
        vp = ir.IntType(8).as_pointer()
        entry_ty = ir.FunctionType(ir.VoidType(), [vp]).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [entry_ty, vp, _i32, _i32])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(f, [builder.inttoptr(args[1], entry_ty), builder.inttoptr(args[2], vp),
                         builder.trunc(args[3], _i32), ir.Constant(_i32, 0)])
        return context.get_dummy_value()
    return types.void(fn, entry, data, nthreads), codegen


@intrinsic
def omp_thread_num(typingctx, fn):
    """``omp_get_thread_num()`` through GNU OpenMP's entry at address ``fn``: this thread's
    number in the current team (0 for the thread that began the region)."""
    def codegen(context, builder, sig, args):
        f = builder.inttoptr(args[0], ir.FunctionType(_i32, []).as_pointer())
        return builder.sext(builder.call(f, []), _i64)
    return _I64(fn), codegen


@intrinsic
def syscall4(typingctx, fn, nr, a, b, c):
    """``syscall(nr, a, b, c, 0, 0)`` through libc's variadic ``syscall`` at address ``fn``."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(_i64, [_i64], var_arg=True)
        f = builder.inttoptr(args[0], fnty.as_pointer())
        zero = ir.Constant(_i64, 0)
        return builder.call(f, [args[1], args[2], args[3], args[4], zero, zero])
    return _I64(fn, nr, a, b, c), codegen


@intrinsic
def futex_wait_for(typingctx, fn, nr, addr, expected, ns):
    """``syscall(nr, addr, FUTEX_WAIT_PRIVATE, expected, &{0 s, ns})``: sleep while the
    32-bit word at ``addr`` holds ``expected``, at most ``ns`` (< 1e9) nanoseconds."""
    def codegen(context, builder, sig, args):
        fn, nr, addr, expected, ns = args
        ts = cgutils.alloca_once(builder, ir.ArrayType(_i64, 2))  # struct timespec
        zero32 = ir.Constant(_i32, 0)
        builder.store(ir.Constant(_i64, 0), builder.gep(ts, [zero32, zero32]))
        builder.store(ns, builder.gep(ts, [zero32, ir.Constant(_i32, 1)]))
        fnty = ir.FunctionType(_i64, [_i64], var_arg=True)
        f = builder.inttoptr(fn, fnty.as_pointer())
        return builder.call(f, [nr, addr, ir.Constant(_i64, _FUTEX_WAIT_PRIVATE), expected,
                                builder.ptrtoint(ts, _i64), ir.Constant(_i64, 0)])
    return _I64(fn, nr, addr, expected, ns), codegen


@inner
def _futex_wait(ctl, expected):
    addr = ctl + C_SEQ * 8  # the low half of the word on little-endian machines
    syscall4(load(ctl, C_SYSCALL), load(ctl, C_FUTEX_NR), addr, _FUTEX_WAIT_PRIVATE, expected)


@intrinsic
def monotonic_ns(typingctx, fn):
    """``CLOCK_MONOTONIC`` in nanoseconds, through libc's ``clock_gettime`` at address ``fn``
    (the vDSO's: no system call)."""
    def codegen(context, builder, sig, args):
        ts = cgutils.alloca_once(builder, ir.ArrayType(_i64, 2))  # struct timespec
        fnty = ir.FunctionType(_i32, [_i32, ts.type])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(f, [ir.Constant(_i32, _CLOCK_MONOTONIC), ts])
        zero32 = ir.Constant(_i32, 0)
        sec = builder.load(builder.gep(ts, [zero32, zero32]))
        nsec = builder.load(builder.gep(ts, [zero32, ir.Constant(_i32, 1)]))
        return builder.add(builder.mul(sec, ir.Constant(_i64, 1_000_000_000)), nsec)
    return _I64(fn), codegen


@inner
def _yield(ctl):
    syscall4(load(ctl, C_SYSCALL), load(ctl, C_YIELD_NR), 0, 0, 0)


@njit(**ENTRY)
def futex_wake(ctl):
    """Wake every worker asleep on the job word of the pool whose control block is ``ctl``:
    one with no job to take spins and yields again (:func:`_worker`), awake for the next."""
    addr = ctl + C_SEQ * 8
    syscall4(load(ctl, C_SYSCALL), load(ctl, C_FUTEX_NR), addr, _FUTEX_WAKE_PRIVATE, 1 << 30)


@inner
def _wake_joiners(ctl):
    """Wake every thread asleep in :func:`_wait_done` (there may be none by now)."""
    fetch_add(ctl, C_JOIN_SEQ, 1)
    syscall4(load(ctl, C_SYSCALL), load(ctl, C_FUTEX_NR), ctl + C_JOIN_SEQ * 8,
             _FUTEX_WAKE_PRIVATE, 1 << 30)


@inner
def _wait_done(ctl, gen, total):
    """Return once every task of job ``gen`` (``total`` tasks) is counted done, or a later
    job has begun (which only happens once this one is done).

    A thread with nothing left to claim spins :data:`JOIN_SPIN` pauses, then sleeps on the
    futex until the thread counting the last task wakes it (or :data:`JOIN_TIMEOUT_NS`
    passes). Sleeping frees the core: where another process's thread pushed a thread holding
    this job's last task off its own core, the scheduler moves it to the idle one at once;
    a thread spinning or yielding here kept that core busy, and the job waited for the other
    process's time slice (one core kept busy: every call 2x slower).
    """
    n = 0
    while True:
        # (a later job resets DONE, and then publishes its generation: a thread that reads
        # the reset and not yet the generation sleeps until run_job wakes it)
        if load(ctl, C_DONE) >= total or (load(ctl, C_INFO) >> 32) != gen:
            return
        n += 1
        if n < load(ctl, C_JOIN_SPIN):
            pause()
            continue
        seq = load(ctl, C_JOIN_SEQ)
        fetch_add(ctl, C_JOIN_WAITERS, 1)  # a full barrier: then the counts are re-read
        if fetch_add(ctl, C_DONE, 0) < total and (fetch_add(ctl, C_INFO, 0) >> 32) == gen:
            fetch_add(ctl, C_JOIN_SLEEPS, 1)
            futex_wait_for(load(ctl, C_SYSCALL), load(ctl, C_FUTEX_NR), ctl + C_JOIN_SEQ * 8,
                           seq & _LOW, load(ctl, C_JOIN_TIMEOUT))
        fetch_add(ctl, C_JOIN_WAITERS, -1)


#: Whether the tasks' floating-point exception flags are read (x86-64's MXCSR): NumPy's
#: ``errstate`` is honoured from them (jitops.core.errstate). Elsewhere none are reported.
FP_FLAGS = platform.machine().lower() in ("x86_64", "amd64")
#: MXCSR's sticky exception flags NumPy reports: invalid, divide by zero, overflow, underflow
#: (not denormal, 0x2, nor inexact, 0x20).
MXCSR_FLAGS = errstate.ALL


_I8P = ir.IntType(8).as_pointer()
_MXCSR_FN = ir.FunctionType(ir.VoidType(), [_I8P])


def _mxcsr(builder, slot):
    """MXCSR, read through ``slot`` (an i32 alloca)."""
    fn = builder.module.declare_intrinsic("llvm.x86.sse.stmxcsr", (), _MXCSR_FN)
    builder.call(fn, [builder.bitcast(slot, _I8P)])
    return builder.load(slot)


def _clear_flags(builder, slot):
    """Clear the exception flags NumPy reports (:data:`MXCSR_FLAGS`) where any is set, the
    rest of MXCSR kept. Usually none is (they are sticky, but an ordinary computation raises
    only inexact): then MXCSR is only read, where a write (LDMXCSR) cost the out= call-overhead
    row 3.5% (24 ns of 0.67 us, measured)."""
    fn = builder.module.declare_intrinsic("llvm.x86.sse.ldmxcsr", (), _MXCSR_FN)
    m = _mxcsr(builder, slot)
    raised = builder.icmp_unsigned("!=", builder.and_(m, ir.Constant(_i32, MXCSR_FLAGS)),
                                   ir.Constant(_i32, 0))
    with builder.if_then(raised, likely=False):
        builder.store(builder.and_(m, ir.Constant(_i32, ~MXCSR_FLAGS)), slot)
        builder.call(fn, [builder.bitcast(slot, _I8P)])


def task_caller(nargs: int):
    """An intrinsic ``call(task, a1, ..., a<nargs>)``: call a compiled task of some spec
    through its address with ``nargs`` int64 arguments; bit 0: 1 if it failed; the bits above
    it: the floating-point exception flags the task raised (``MXCSR_FLAGS << 1``).

    The flags are cleared before the call and read after it: the callee is an indirect call,
    opaque to the optimiser, so none of the task's arithmetic moves across either.

    ``task`` is the address of a task's machine code for one spec (see
    ``jitops.cpu.kernels.task_address``), called with Numba's own calling convention; the spec
    argument is an opaque pointer nobody reads, so a null one is passed. The drivers are
    thereby spec-free: compiled (or loaded from the disk cache) once per process, not once per
    op and dtype; a new signature compiles only its task. The callee's status is never
    discarded: anything but a normal return (an exception raised inside the scalar code)
    gives 1, and the drivers report it.
    """
    argtys = (types.voidptr,) + (types.int64,) * nargs

    def define(typingctx, task, *args):
        sig = types.int64(task, *args)

        def codegen(context, builder, signature, llargs):
            fnty = context.call_conv.get_function_type(types.int64, argtys)
            fn = builder.inttoptr(llargs[0], fnty.as_pointer())
            null = context.get_constant_null(types.voidptr)
            slot = cgutils.alloca_once(builder, _i32) if FP_FLAGS else None
            if FP_FLAGS:
                _clear_flags(builder, slot)
            status, _ = context.call_conv.call_function(builder, fn, types.int64, argtys,
                                                        [null, *llargs[1:]])
            failed = builder.zext(builder.not_(status.is_ok), _i64)
            if not FP_FLAGS:
                return failed
            flags = builder.and_(_mxcsr(builder, slot), ir.Constant(_i32, MXCSR_FLAGS))
            return builder.or_(failed, builder.shl(builder.zext(flags, _i64), ir.Constant(_i64, 1)))

        return sig, codegen

    # a fixed arity: Numba's intrinsics take no *args
    params = ", ".join(f"a{i}" for i in range(nargs))
    ns = {"define": define}
    exec(f"def call_task(typingctx, task, {params}):\n"
         f"    return define(typingctx, task, {params})\n", ns)
    return intrinsic(ns["call_task"])


call_binary = task_caller(5)  # (task, po, px, py, pmeta, t)
call_nary = task_caller(3)  # (task, pptrs, pmeta, t)

#: run_job's result: failed tasks below this bit, the floating-point flags above it.
JOB_FP_SHIFT = 40
_LOW = (1 << 32) - 1
_GEN = (1 << 24) - 1  # a range word's generation bits
# Typed constants, not literals: a literal argument (a bare 0 or False) makes Numba compile
# the callee a second time for it -- _claim_and_run and _run_units were each compiled twice,
# 0.9 s of the first parallel call on an empty cache.
_CALLER = np.int64(0)  # the launching thread's number
_NOT = np.bool_(False)
UNUSED = np.int64(0)  # a job word a kind of task does not use (run_job's c, d for user ops)
_END = (1 << 20) - 1  # a range word's ends
#: The most units a job is cut into for the range words' 20-bit ends; a job of more tasks
#: (a tiled transpose of over 4e9 elements) claims them in units of consecutive tasks.
MAX_UNITS = _END


@inner
def _run_units(ctl, first, count, backwards, unit, total):
    """Run units ``first .. first+count-1`` of the current job (units of ``unit`` tasks, the
    last one cut at ``total``), the last first if ``backwards``; returns (tasks run, failed,
    floating-point flags raised).
    Called only with those units claimed: the job cannot finish (nor its arguments change)
    before they are counted done, so what is read here is this job's."""
    task = load(ctl, C_TASK)
    binary = load(ctl, C_KIND) == KIND_BINARY
    a, b, c, d = load(ctl, C_A), load(ctl, C_B), load(ctl, C_C), load(ctl, C_D)
    ran = 0
    failed = 0
    fp = 0
    for i in range(count):
        u = first + count - 1 - i if backwards else first + i
        k0 = u * unit
        k1 = k0 + unit
        if k1 > total:
            k1 = total
        for j in range(k1 - k0):
            k = k1 - 1 - j if backwards else k0 + j
            if binary:
                r = call_binary(task, a, b, c, d, k)
            else:
                r = call_nary(task, a, b, k)
            failed += r & 1
            fp |= r >> 1
        ran += k1 - k0
    return ran, failed, fp


@inner
def _claim(ctl, slot, gen, from_high):
    """Claim a quarter (at least one) of the units left in the range whose word is ``slot``,
    for job ``gen``, from its high end if ``from_high`` else from its low end; returns
    (first unit, count): count 0 where the range is empty, -1 where the word is another
    job's (this one is done). A compare-and-swap another thread won is tried again."""
    while True:
        w = load(ctl, slot)
        if (w >> 40) & _GEN != gen:
            return 0, -1
        lo = (w >> 20) & _END
        hi = w & _END
        if lo >= hi:
            return 0, 0
        g = (hi - lo) >> 2
        if g < 1:
            g = 1
        if from_high:
            if compare_swap(ctl, slot, w, w - g):
                return hi - g, g
        elif compare_swap(ctl, slot, w, w + (g << 20)):
            return lo, g


@inner
def _claim_and_run(ctl, me, info):
    """Take part in job ``info`` (its :data:`C_INFO` word) as thread ``me`` (the caller 0,
    worker ``i`` ``i + 1``): claim and run runs of tasks until none is left; returns how many
    tasks this thread ran.

    Thread ``me`` owns range ``me`` of the job's units (none where ``me`` is past the last
    range) and claims from its own end of it: the low end, or on a job walked backwards
    (every other one, :data:`ALTERNATE`) the high end, a quarter of what is left each time
    (at least one unit), so that a thief still finds work in it. A thread whose range is
    empty steals from the far end of the next non-empty range, also a quarter of what is
    left: a thief that another process's load then pushes off its core holds no more than
    an owner would. Runs therefore shrink to single units as the job ends, and a slowed
    thread leaves the others little to wait for. Every claim is a compare-and-swap on the
    range's word, which carries the job's generation: a word of another job is never
    claimed from (a newer job means this one is done). A job run with ``reversible`` 0 (a
    tiled transpose: its tiles walked up a column ran 9% slower, measured) is always walked
    forwards."""
    gen = (info >> 32) & _GEN
    total = info & _LOW
    nranges = load(ctl, C_NRANGES)
    unit = load(ctl, C_UNIT)
    backwards = (((info >> 32) & 1) == 1 and load(ctl, C_REVERSIBLE) != 0
                 and load(ctl, C_ALTERNATE) != 0)
    ran = 0
    claims = 0
    failed = 0
    fp = 0
    first_own = -1
    if me < nranges:  # this thread's own range, from its own end
        slot = C_RANGES + 8 * me
        while True:
            first, g = _claim(ctl, slot, gen, backwards)
            if g <= 0:
                break  # empty, or another job's word
            if first_own < 0:  # the task this thread began its range with
                first_own = min((first + g) * unit, total) - 1 if backwards else first * unit
            r, f, p = _run_units(ctl, first, g, backwards, unit, total)
            ran += r
            failed += f
            fp |= p
            claims += 1
    # then the far ends of the others' ranges
    k = 1
    while k <= nranges:
        first, g = _claim(ctl, C_RANGES + 8 * ((me + k) % nranges), gen, not backwards)
        if g < 0:
            break  # another job's word: this one is done
        if g == 0:
            k += 1  # nothing left there: the next range
            continue
        r, f, p = _run_units(ctl, first, g, _NOT, unit, total)
        ran += r
        failed += f
        fp |= p
        claims += 1
        k = 1  # and scan again from the next range
    if me == 0:
        store(ctl, C_CALLER_FIRST, first_own)
    if ran:
        # Counted once, when this thread has no more to claim: the shared words are written
        # by every thread, and each write moves their cache line between cores (three per
        # claim cost a 1e6 subtract 2-4% against PyTorch's static halves). Until then the job
        # cannot finish, so the tasks above are still this job's.
        fetch_add(ctl, C_CLAIMS, claims)
        if failed:
            fetch_add(ctl, C_FAILED, failed)
        if fp:
            fetch_or(ctl, C_FP, fp)
        if fetch_add(ctl, C_DONE, ran) + ran == total:  # the job's last tasks
            if load(ctl, C_OMP) != 0:
                store(ctl, C_LAST_DONE, cycles())  # when an OpenMP job's work was all done
            # (the count above is a full barrier: a thread that went to sleep waiting for
            # it has announced itself by now, or reads the count before it sleeps)
            if load(ctl, C_JOIN_WAITERS) > 0:
                _wake_joiners(ctl)
    return ran


@inner
def _take_part(ctl, me):
    """Helper thread ``me``'s part in the current job: claim and run tasks, then wait for
    the job's last ones (:func:`_wait_done`)."""
    info = load(ctl, C_INFO)  # published before the job word moved (or the region began)
    _claim_and_run(ctl, me, info)
    _wait_done(ctl, info >> 32, info & _LOW)


@inner
def run_job(ctl, workers, kind, task, a, b, c, d, ntasks, reversible):
    """Run tasks ``0 .. ntasks-1`` of one job on this thread and ``workers`` pool workers;
    returns how many tasks failed, with the floating-point flags they raised above bit
    :data:`JOB_FP_SHIFT`. ``reversible``: whether the job may be walked backwards
    (:data:`ALTERNATE`). Called with the pool held (one job at a time)."""
    store(ctl, C_KIND, kind)
    store(ctl, C_REVERSIBLE, 1 if reversible else 0)
    store(ctl, C_TASK, task)
    store(ctl, C_A, a)
    store(ctl, C_B, b)
    store(ctl, C_C, c)
    store(ctl, C_D, d)
    store(ctl, C_WORKERS, workers)
    store(ctl, C_DONE, 0)
    store(ctl, C_FAILED, 0)
    store(ctl, C_FP, 0)
    store(ctl, C_CLAIMS, 0)
    gen = ((load(ctl, C_INFO) >> 32) + 1) & _LOW
    # The ranges: one per thread taking part (as many as the block has words for; a thread
    # past them only steals), each a contiguous share of the job's units. Written before the
    # generation is published: a thread claims only from a word of the generation it read.
    nranges = workers + 1
    if nranges > load(ctl, C_RANGE_CAP):
        nranges = load(ctl, C_RANGE_CAP)
    unit = 1
    most = load(ctl, C_MAX_UNITS)
    if ntasks > most:
        unit = (ntasks + most - 1) // most
    nunits = (ntasks + unit - 1) // unit
    store(ctl, C_NRANGES, nranges)
    store(ctl, C_UNIT, unit)
    tag = (gen & _GEN) << 40
    for r in range(nranges):
        store(ctl, C_RANGES + 8 * r,
              tag | ((r * nunits // nranges) << 20) | ((r + 1) * nunits // nranges))
    info = (gen << 32) | ntasks
    omp = load(ctl, C_OMP)
    backoff = load(ctl, C_OMP_BACKOFF)
    if omp != 0 and workers > 0 and backoff == 0:
        # The team of the OpenMP runtime PyTorch shares with us runs the claims (see
        # jitops.cpu.omp); the pool's own workers are not woken (the job word stays).
        t0 = cycles()
        exchange(ctl, C_INFO, info)  # tasks can be claimed from here on; a full barrier, then:
        if load(ctl, C_JOIN_WAITERS) > 0:  # a thread still waiting for the last job
            _wake_joiners(ctl)
        omp_parallel(omp, load(ctl, C_OMP_ENTRY), ctl, workers + 1)
        t1 = cycles()
        store(ctl, C_BY_CALLER, -1)
        # The region ends only when every team thread has returned: one descheduled by
        # another process's load (a busy core) holds the job with no work left to do.
        # Where that took over a quarter of two jobs in a row, the pool (which waits for
        # tasks, not threads) runs the next jobs, then the team is tried again.
        if 4 * (t1 - load(ctl, C_LAST_DONE)) > t1 - t0:
            if load(ctl, C_OMP_STALLS) >= 1:
                store(ctl, C_OMP_STALLS, 0)
                lo = load(ctl, C_OMP_BACKOFF_MIN)
                jobs = 2 * load(ctl, C_OMP_BACKOFF_LEN)  # stalled again soon: back off longer
                if jobs < lo or load(ctl, C_OMP_CLEAN) >= lo:
                    jobs = lo  # the first backoff, or the team ran well for a while since
                if jobs > load(ctl, C_OMP_BACKOFF_MAX):
                    jobs = load(ctl, C_OMP_BACKOFF_MAX)
                store(ctl, C_OMP_BACKOFF_LEN, jobs)
                store(ctl, C_OMP_BACKOFF, jobs)
                store(ctl, C_OMP_CLEAN, 0)
            else:
                store(ctl, C_OMP_STALLS, 1)
        else:
            store(ctl, C_OMP_STALLS, 0)
            store(ctl, C_OMP_CLEAN, load(ctl, C_OMP_CLEAN) + 1)
    else:
        if omp != 0 and backoff > 0:
            store(ctl, C_OMP_BACKOFF, backoff - 1)
        store(ctl, C_INFO, info)  # tasks can be claimed from here on
        exchange(ctl, C_SEQ, (load(ctl, C_SEQ) + 1) & 0x7FFFFFFF)  # a full barrier, then:
        if workers > 0 and load(ctl, C_SLEEPERS) > 0:
            futex_wake(ctl)
        if load(ctl, C_JOIN_WAITERS) > 0:  # a thread still waiting for the last job
            _wake_joiners(ctl)
        store(ctl, C_BY_CALLER, _claim_and_run(ctl, _CALLER, info))
    # the last tasks, on other threads
    _wait_done(ctl, gen, ntasks)
    return load(ctl, C_FAILED) | (load(ctl, C_FP) << JOB_FP_SHIFT)


@njit(**ENTRY)
def _worker(ctl, index):
    """A pool worker's life: wait for a job (spin, then yield until ``C_IDLE_NS`` have passed
    on the clock, then sleep on the futex), take part if the job asks for this many workers,
    repeat until stopped."""
    seen = load(ctl, C_SEQ)
    spin = load(ctl, C_SPIN)
    clock = load(ctl, C_CLOCK)
    while True:
        n = 0
        since = monotonic_ns(clock)
        while True:
            s = load(ctl, C_SEQ)
            if s != seen:
                break
            n += 1
            if n < spin:
                pause()
                continue
            if monotonic_ns(clock) - since < load(ctl, C_IDLE_NS):
                _yield(ctl)
                continue
            fetch_add(ctl, C_SLEEPERS, 1)  # a full barrier before the futex re-reads the word
            _futex_wait(ctl, seen)  # returns at once if the word moved on meanwhile
            fetch_add(ctl, C_SLEEPERS, -1)
            n = 0
            since = monotonic_ns(clock)
        seen = s
        if load(ctl, C_STOP):
            return
        if index < load(ctl, C_WORKERS):
            _take_part(ctl, index + 1)


def _omp_entry(ctl):
    """What each thread of an OpenMP team runs for a job: what a pool worker does, before
    OpenMP's own join. Team thread ``n`` (the caller 0) owns range ``n``; where the runtime's
    ``omp_get_thread_num`` is not known, every team thread only steals (still correct)."""
    tnum = load(ctl, C_OMP_TNUM)
    _take_part(ctl, omp_thread_num(tnum) if tnum != 0 else load(ctl, C_RANGE_CAP))


# C-callable (its cfunc wrapper is what GOMP_parallel calls); nothing calls it from Python
_omp_entry = njit(nogil=True, error_model="numpy", no_cpython_wrapper=True)(_omp_entry)

# compiled once per machine: a new process starts its workers at once
cache.enable(_worker)
cache.enable(_omp_entry)


def omp_entry_address() -> int:
    """Address of :func:`_omp_entry`'s C wrapper, ``void (void *ctl)`` (compiled once)."""
    sig = (_I64,)
    registries.compile_with(lambda: _omp_entry.compile(sig))
    cres = _omp_entry.overloads[sig]
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_cfunc_wrapper_name)


# -- the Python side ----------------------------------------------------------------------------


_SYSCALL = hooks.libc_syscall()  # 0 where the futex_pool hook is off
_CLOCK = ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value or 0

#: Whether this platform runs the pool (Linux futexes); elsewhere Numba's layer is used.
AVAILABLE = env_flag("JITOPS_POOL", True) and bool(_SYSCALL) and bool(_CLOCK)


def word(ctl: int, index: int) -> int:
    """Word ``index`` of a control block (tests, diagnostics)."""
    return ctypes.c_int64.from_address(ctl + 8 * index).value


class Pool:
    """One process's pool: a control block that is never freed (workers may still read it
    while the interpreter shuts down) and the worker threads, started on demand."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        libc.calloc.restype = ctypes.c_void_p
        libc.calloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
        # one range word per thread that can take part (Numba's pool size bounds the count),
        # each on a cache line of its own, as the contended words before them
        cap = max(1, int(numba.config.NUMBA_NUM_THREADS))
        nwords = C_RANGES + 8 * cap
        self.ctl = libc.calloc(1, 8 * nwords + 64)
        if not self.ctl:
            raise MemoryError("jitops: cannot allocate the thread pool's control block")
        self.ctl = (self.ctl + 63) & ~63
        words = np.ctypeslib.as_array((ctypes.c_int64 * nwords).from_address(self.ctl))
        words[C_RANGE_CAP] = cap
        words[C_MAX_UNITS] = MAX_UNITS
        words[C_ALTERNATE] = ALTERNATE
        words[C_CALLER_FIRST] = -1
        words[C_SYSCALL] = _SYSCALL
        words[C_FUTEX_NR] = _FUTEX_NR or 0
        words[C_YIELD_NR] = _YIELD_NR or 0
        words[C_SPIN], words[C_IDLE_NS], words[C_CLOCK] = SPIN, IDLE_US * 1000, _CLOCK
        words[C_JOIN_SPIN], words[C_JOIN_TIMEOUT] = JOIN_SPIN, JOIN_TIMEOUT_NS
        # (in the block, not constants of the compiled code: that is cached on disk)
        words[C_OMP_BACKOFF_MIN] = max(1, OMP_BACKOFF_JOBS)
        words[C_OMP_BACKOFF_MAX] = max(OMP_BACKOFF_JOBS, OMP_BACKOFF_MAX_JOBS)
        self.pid = current_pid()
        # Whether a job of this process runs: set and cleared only by bytecodes that no
        # signal handler, garbage collection or thread switch can come between (inside
        # ``with guard``, which holds no Python code), so an exception arriving anywhere in
        # a launch leaves it as it found it (jitops.cpu.parallel.launch), and a nested call
        # from the same thread (a handler, a __del__) finds it set and runs serially.
        self.guard = threading.Lock()
        self.busy = False
        self.threads: list[threading.Thread] = []
        self.thread_limit: int | None = None  # workers this process could start, once it failed
        self.words = words
        self.omp = 0  # what C_OMP holds

    @contextlib.contextmanager
    def held(self, timeout: float = 10.0):
        """Hold the pool as a running job does (tests, :meth:`stop`); raises TimeoutError
        where another job still holds it after ``timeout`` seconds."""
        mine = False
        deadline = time.monotonic() + timeout
        try:
            while True:
                with self.guard:
                    if not self.busy:
                        mine = self.busy = True
                if mine:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("jitops: the thread pool is busy")
                time.sleep(0.001)
            yield
        finally:
            if mine:
                self.busy = False

    def use_omp(self, fn: int, tnum: int = 0) -> None:
        """Run the next jobs on the OpenMP runtime whose ``GOMP_parallel`` is at ``fn`` (its
        ``omp_get_thread_num`` at ``tnum``, 0 if unknown), or on the pool's own workers
        (``fn`` 0). Called with the pool held."""
        if fn != self.omp:
            if fn and not self.words[C_OMP_ENTRY]:
                self.words[C_OMP_ENTRY] = omp_entry_address()
            self.words[C_OMP_TNUM] = tnum
            self.words[C_OMP] = self.omp = fn

    def ensure(self, workers: int) -> int:
        """Start workers until there are ``workers`` of them (called with the pool held);
        returns how many there are, at most ``workers``. Where the system refuses a thread
        (``RLIMIT_NPROC``, a pids cgroup) the process keeps the ones it has, and says so
        once: a call then runs on fewer threads, or serially, never fails."""
        if self.thread_limit is not None:
            workers = min(workers, self.thread_limit)
        if len(self.threads) < workers and (_I64, _I64) not in _worker.overloads:
            # here, not in the new threads
            registries.compile_with(lambda: _worker.compile((_I64, _I64)))
        while len(self.threads) < workers:
            t = threading.Thread(target=_worker, args=(self.ctl, len(self.threads)),
                                 name=f"jitops-worker-{len(self.threads)}", daemon=True)
            try:
                # An interrupt inside Thread.start (its wait for the thread to begin) leaves the
                # start half done -- Python 3.10 then raises "release unlocked lock", which
                # read as a thread limit, and the started worker went unrecorded: signals are
                # held until the start is complete and the worker recorded.
                with lifecycle.signals_held(), _stack_size(WORKER_STACK):
                    t.start()
                    self.threads.append(t)
            except RuntimeError as e:  # "can't start new thread"
                self.thread_limit = len(self.threads)
                warnings.warn(f"jitops: could not start a worker thread ({e}); parallel calls "
                              f"use {len(self.threads) + 1} thread(s) from now on. Set "
                              f"JITOPS_NUM_THREADS to what this process may start to silence "
                              f"this.", RuntimeWarning, stacklevel=4)
                break
        return min(workers, len(self.threads))

    def stop(self, timeout: float = 1.0) -> bool:
        """Let the workers return (at interpreter exit), and wait briefly for them. Gives up
        (False) where a job still holds the pool after ``timeout`` seconds: exit never waits
        for long (the workers are daemon threads, asleep or about to be)."""
        if not self.threads or self.pid != current_pid():
            return True
        words = self.words
        try:
            with self.held(timeout):
                words[C_STOP] = 1
                words[C_WORKERS] = 0
                words[C_SEQ] = (int(words[C_SEQ]) + 1) & 0x7FFFFFFF
                _wake_all(self.ctl)
        except TimeoutError:
            return False
        for t in self.threads:
            t.join(timeout=timeout)
        return True


@contextlib.contextmanager
def _stack_size(size: int):
    """Threads started inside get stacks of ``size`` bytes (``threading.stack_size``, which
    is process-wide: put back after, so the program's own threads get what it chose; a thread
    another Python thread starts meanwhile gets the larger stack, which is harmless)."""
    before = threading.stack_size(size)
    try:
        yield
    finally:
        threading.stack_size(before)


def _wake_all(ctl: int) -> None:
    """What :func:`futex_wake` does, from Python (through libc, nothing to compile)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(ctypes.c_long(_FUTEX_NR), ctypes.c_void_p(ctl + C_SEQ * 8),
                 ctypes.c_long(_FUTEX_WAKE_PRIVATE), ctypes.c_long(1 << 30))


_pool: Pool | None = None
_pool_guard = threading.RLock()  # (re-entrant: Pool() runs Python code a handler may interrupt)


def get() -> Pool:
    """This process's pool (a forked child makes its own: no thread crosses a fork)."""
    global _pool
    p = _pool
    if p is None or p.pid != current_pid():
        with _pool_guard:
            p = _pool
            if p is None or p.pid != current_pid():
                p = _pool = Pool()
    return p


_pid = os.getpid()


def current_pid() -> int:
    """This process's id, without a system call: ``os.getpid()`` costs ~0.2 us on these VMs
    and a parallel call asked for it several times. Kept current in a forked child by the
    at-fork hook below (every ``os.fork`` runs it; a fork by C code runs it at the child's
    first parallel call or compile: :func:`jitops.cpu.lifecycle.check_pid`)."""
    return _pid


@lifecycle.at_fork_in_child
def _after_fork_in_child() -> None:
    global _pool, _pool_guard, _pid
    _pid = os.getpid()
    _pool, _pool_guard = None, threading.RLock()  # the parent's workers are not here


@atexit.register
def _stop_at_exit() -> None:
    p = _pool
    if p is not None:
        p.stop()
