"""jitops' own thread pool for the parallel CPU kernels: hot workers, no per-call set-up.

Workers are Python threads running a compiled loop without the GIL (:func:`_worker`): after a
job they spin, then yield until ``IDLE_US`` have passed, then sleep on a Linux futex (reached
through libc's ``syscall`` by an address kept in the control block,
jitops.cpu.kernels.layout.CONTROL, so cached code stays valid across processes). A launch
(:func:`run_job`, compiled into the drivers) publishes one job, wakes sleepers only if there are
any, and runs tasks itself. Each thread owns a contiguous range of the tasks, the same job after
job, claims runs from its end with a compare-and-swap and then steals from another's far end
(:func:`_claim_and_run`): a thread slowed by another process's load runs fewer tasks, and every
other job walks the ranges backwards so each thread starts on what its caches hold. A forked child
starts a fresh pool; a Python thread finding the pool taken runs its call serially. Beside PyTorch's
GNU OpenMP the main thread's jobs run on its team (:func:`_omp_entry`, jitops.cpu.threads.omp),
backing off to the workers for a while when a team thread stalls a job. Not Linux: :data:`AVAILABLE`
is False and jitops launches through Numba's layer.
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

from ...core import errstate
from ...core.config import env_flag, env_int
from ..compile import cache, hooks, lifecycle, registries
from ..compile.jit import ENTRY, inner
from ..kernels.layout import CONTROL as C

_I64 = types.int64


#: Job kinds: what arguments the task function takes.
KIND_BINARY = 0  # _task(spec, po, px, py, pmeta, t) of the built-in ops
KIND_NARY = 1  # _utask(spec, pptrs, pmeta, t) of the user ops

#: Pause instructions a worker spins after a job before it yields: ~50 us on x86.
SPIN = env_int("JITOPS_POOL_SPIN", 2000)
#: Wall time (us) a worker waits for the next job before it sleeps (a clock, so that it falls
#: asleep on a loaded machine too): calls 2 ms apart ran 0.81-0.83x NumPy with 2 ms, 1.04x+ with 5.
IDLE_US = env_int("JITOPS_POOL_IDLE_US", 5000, 0, 10_000_000)
#: Whether every other job walks the ranges backwards, each thread starting on what its caches
#: hold (2-9% on cache-resident sizes; tiled transposes lose 9% and always go forwards).
ALTERNATE = env_int("JITOPS_POOL_ALTERNATE", 1, 0, 1)
#: Pauses (~200 us) a thread with nothing left to claim spins for a job's last tasks before it
#: sleeps (:func:`_wait_done`): an ordinary job never sleeps, a descheduled one yields the core.
JOIN_SPIN = env_int("JITOPS_POOL_JOIN_SPIN", 8000)
#: A sleeper waiting for a job's last tasks looks again after this long (ns, under 1e9).
JOIN_TIMEOUT_NS = 1_000_000
#: Jobs run on the workers after two jobs in a row on a shared OpenMP team each waited over a
#: quarter of their time for a team thread (one alone is a team waking up: jitops.cpu.threads.omp).
OMP_BACKOFF_JOBS = env_int("JITOPS_OMP_BACKOFF", 64)
#: A backoff begun soon after the last is twice as long, up to this: under lasting load the team
#: is tried ever more rarely (each try costs two stalled jobs).
OMP_BACKOFF_MAX_JOBS = env_int("JITOPS_OMP_BACKOFF_MAX", 8192)
#: Each worker's stack (reserved, not committed), whatever ``threading.stack_size`` says: a task
#: stages up to four tiles of ``kernels.TILE_MAX`` 16-byte elements there (160 KiB overflowed).
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
    OpenMP route that reads it is (jitops.cpu.threads.omp)."""
    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter",
                                              fnty=ir.FunctionType(_i64, []))
        return builder.call(fn, [])
    return _I64(), codegen


@intrinsic
def omp_parallel(typingctx, fn, entry, data, nthreads):
    """``GOMP_parallel(entry, data, nthreads, 0)`` through GNU OpenMP's entry at address ``fn``:
    ``entry(data)`` runs on ``nthreads`` threads of the runtime's team (this one included) and
    returns when all have (jitops.cpu.threads.omp)."""
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
    addr = ctl + C.SEQ * 8  # the low half of the word on little-endian machines
    syscall4(load(ctl, C.SYSCALL), load(ctl, C.FUTEX_NR), addr, _FUTEX_WAIT_PRIVATE, expected)


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
    syscall4(load(ctl, C.SYSCALL), load(ctl, C.YIELD_NR), 0, 0, 0)


@njit(**ENTRY)
def futex_wake(ctl):
    """Wake every worker asleep on the job word of the pool whose control block is ``ctl``:
    one with no job to take spins and yields again (:func:`_worker`), awake for the next."""
    addr = ctl + C.SEQ * 8
    syscall4(load(ctl, C.SYSCALL), load(ctl, C.FUTEX_NR), addr, _FUTEX_WAKE_PRIVATE, 1 << 30)


@inner
def _wake_joiners(ctl):
    """Wake every thread asleep in :func:`_wait_done` (there may be none by now)."""
    fetch_add(ctl, C.JOIN_SEQ, 1)
    syscall4(load(ctl, C.SYSCALL), load(ctl, C.FUTEX_NR), ctl + C.JOIN_SEQ * 8,
             _FUTEX_WAKE_PRIVATE, 1 << 30)


@inner
def _wait_done(ctl, gen, total):
    """Return once every task of job ``gen`` (``total`` tasks) is done, or a later job has begun.
    A thread with nothing left spins :data:`JOIN_SPIN` pauses, then sleeps on the futex until
    the last task's thread wakes it (or :data:`JOIN_TIMEOUT_NS`): sleeping frees its core for a
    descheduled thread holding this job's last task.
    """
    n = 0
    while True:
        # (a later job resets DONE, and then publishes its generation: a thread that reads
        # the reset and not yet the generation sleeps until run_job wakes it)
        if load(ctl, C.DONE) >= total or (load(ctl, C.INFO) >> 32) != gen:
            return
        n += 1
        if n < load(ctl, C.JOIN_SPIN):
            pause()
            continue
        seq = load(ctl, C.JOIN_SEQ)
        fetch_add(ctl, C.JOIN_WAITERS, 1)  # a full barrier: then the counts are re-read
        if fetch_add(ctl, C.DONE, 0) < total and (fetch_add(ctl, C.INFO, 0) >> 32) == gen:
            fetch_add(ctl, C.JOIN_SLEEPS, 1)
            futex_wait_for(load(ctl, C.SYSCALL), load(ctl, C.FUTEX_NR), ctl + C.JOIN_SEQ * 8,
                           seq & _LOW, load(ctl, C.JOIN_TIMEOUT))
        fetch_add(ctl, C.JOIN_WAITERS, -1)


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
    """An intrinsic ``call(task, a1, ..., a<nargs>)``: a compiled task called through its address
    (Numba's calling convention, a null spec) with ``nargs`` int64 arguments; bit 0 is 1 if it
    failed (an exception inside), the bits above are the floating-point flags it raised (cleared
    before, read after: the indirect call is opaque to the optimiser). The drivers are thereby
    spec-free: compiled once per process; a new signature compiles only its task.
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
    task = load(ctl, C.TASK)
    binary = load(ctl, C.KIND) == KIND_BINARY
    a, b, c, d = load(ctl, C.A), load(ctl, C.B), load(ctl, C.C), load(ctl, C.D)
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
    """Take part in job ``info`` as thread ``me`` (the caller 0, worker ``i`` ``i + 1``): claim and
    run runs of tasks until none is left; returns how many this thread ran.

    A thread claims a quarter of what is left of its own range (at least a unit) from its end --
    the high end on a job walked backwards (:data:`ALTERNATE`, unless not ``reversible``) -- then
    steals a quarter of the next non-empty range from its far end, so that a thread pushed off
    its core holds little. Each claim is a compare-and-swap on the range's word, which carries the
    job's generation: another job's word is never claimed from.
    """
    gen = (info >> 32) & _GEN
    total = info & _LOW
    nranges = load(ctl, C.NRANGES)
    unit = load(ctl, C.UNIT)
    backwards = (((info >> 32) & 1) == 1 and load(ctl, C.REVERSIBLE) != 0
                 and load(ctl, C.ALTERNATE) != 0)
    ran = 0
    claims = 0
    failed = 0
    fp = 0
    first_own = -1
    if me < nranges:  # this thread's own range, from its own end
        slot = C.RANGES + 8 * me
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
        first, g = _claim(ctl, C.RANGES + 8 * ((me + k) % nranges), gen, not backwards)
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
        store(ctl, C.CALLER_FIRST, first_own)
    if ran:
        # Counted once, when this thread has no more to claim: the shared words are written
        # by every thread, and each write moves their cache line between cores (three per
        # claim cost a 1e6 subtract 2-4% against PyTorch's static halves). Until then the job
        # cannot finish, so the tasks above are still this job's.
        fetch_add(ctl, C.CLAIMS, claims)
        if failed:
            fetch_add(ctl, C.FAILED, failed)
        if fp:
            fetch_or(ctl, C.FP, fp)
        if fetch_add(ctl, C.DONE, ran) + ran == total:  # the job's last tasks
            if load(ctl, C.OMP) != 0:
                store(ctl, C.LAST_DONE, cycles())  # when an OpenMP job's work was all done
            # (the count above is a full barrier: a thread that went to sleep waiting for
            # it has announced itself by now, or reads the count before it sleeps)
            if load(ctl, C.JOIN_WAITERS) > 0:
                _wake_joiners(ctl)
    return ran


@inner
def _take_part(ctl, me):
    """Helper thread ``me``'s part in the current job: claim and run tasks, then wait for
    the job's last ones (:func:`_wait_done`)."""
    info = load(ctl, C.INFO)  # published before the job word moved (or the region began)
    _claim_and_run(ctl, me, info)
    _wait_done(ctl, info >> 32, info & _LOW)


@inner
def run_job(ctl, workers, kind, task, a, b, c, d, ntasks, reversible):
    """Run tasks ``0 .. ntasks-1`` of one job on this thread and ``workers`` pool workers;
    returns how many tasks failed, with the floating-point flags they raised above bit
    :data:`JOB_FP_SHIFT`. ``reversible``: whether the job may be walked backwards
    (:data:`ALTERNATE`). Called with the pool held (one job at a time)."""
    store(ctl, C.KIND, kind)
    store(ctl, C.REVERSIBLE, 1 if reversible else 0)
    store(ctl, C.TASK, task)
    store(ctl, C.A, a)
    store(ctl, C.B, b)
    store(ctl, C.C, c)
    store(ctl, C.D, d)
    store(ctl, C.WORKERS, workers)
    store(ctl, C.DONE, 0)
    store(ctl, C.FAILED, 0)
    store(ctl, C.FP, 0)
    store(ctl, C.CLAIMS, 0)
    gen = ((load(ctl, C.INFO) >> 32) + 1) & _LOW
    # The ranges: one per thread taking part (as many as the block has words for; a thread
    # past them only steals), each a contiguous share of the job's units. Written before the
    # generation is published: a thread claims only from a word of the generation it read.
    nranges = workers + 1
    if nranges > load(ctl, C.RANGE_CAP):
        nranges = load(ctl, C.RANGE_CAP)
    unit = 1
    most = load(ctl, C.MAX_UNITS)
    if ntasks > most:
        unit = (ntasks + most - 1) // most
    nunits = (ntasks + unit - 1) // unit
    store(ctl, C.NRANGES, nranges)
    store(ctl, C.UNIT, unit)
    tag = (gen & _GEN) << 40
    for r in range(nranges):
        store(ctl, C.RANGES + 8 * r,
              tag | ((r * nunits // nranges) << 20) | ((r + 1) * nunits // nranges))
    info = (gen << 32) | ntasks
    omp = load(ctl, C.OMP)
    backoff = load(ctl, C.OMP_BACKOFF)
    if omp != 0 and workers > 0 and backoff == 0:
        # The team of the OpenMP runtime PyTorch shares with us runs the claims (see
        # jitops.cpu.threads.omp); the pool's own workers are not woken (the job word stays).
        t0 = cycles()
        exchange(ctl, C.INFO, info)  # tasks can be claimed from here on; a full barrier, then:
        if load(ctl, C.JOIN_WAITERS) > 0:  # a thread still waiting for the last job
            _wake_joiners(ctl)
        omp_parallel(omp, load(ctl, C.OMP_ENTRY), ctl, workers + 1)
        t1 = cycles()
        store(ctl, C.BY_CALLER, -1)
        # The region ends only when every team thread has returned: one descheduled by
        # another process's load (a busy core) holds the job with no work left to do.
        # Where that took over a quarter of two jobs in a row, the pool (which waits for
        # tasks, not threads) runs the next jobs, then the team is tried again.
        if 4 * (t1 - load(ctl, C.LAST_DONE)) > t1 - t0:
            if load(ctl, C.OMP_STALLS) >= 1:
                store(ctl, C.OMP_STALLS, 0)
                lo = load(ctl, C.OMP_BACKOFF_MIN)
                jobs = 2 * load(ctl, C.OMP_BACKOFF_LEN)  # stalled again soon: back off longer
                if jobs < lo or load(ctl, C.OMP_CLEAN) >= lo:
                    jobs = lo  # the first backoff, or the team ran well for a while since
                if jobs > load(ctl, C.OMP_BACKOFF_MAX):
                    jobs = load(ctl, C.OMP_BACKOFF_MAX)
                store(ctl, C.OMP_BACKOFF_LEN, jobs)
                store(ctl, C.OMP_BACKOFF, jobs)
                store(ctl, C.OMP_CLEAN, 0)
            else:
                store(ctl, C.OMP_STALLS, 1)
        else:
            store(ctl, C.OMP_STALLS, 0)
            store(ctl, C.OMP_CLEAN, load(ctl, C.OMP_CLEAN) + 1)
    else:
        if omp != 0 and backoff > 0:
            store(ctl, C.OMP_BACKOFF, backoff - 1)
        store(ctl, C.INFO, info)  # tasks can be claimed from here on
        exchange(ctl, C.SEQ, (load(ctl, C.SEQ) + 1) & 0x7FFFFFFF)  # a full barrier, then:
        if workers > 0 and load(ctl, C.SLEEPERS) > 0:
            futex_wake(ctl)
        if load(ctl, C.JOIN_WAITERS) > 0:  # a thread still waiting for the last job
            _wake_joiners(ctl)
        store(ctl, C.BY_CALLER, _claim_and_run(ctl, _CALLER, info))
    # the last tasks, on other threads
    _wait_done(ctl, gen, ntasks)
    return load(ctl, C.FAILED) | (load(ctl, C.FP) << JOB_FP_SHIFT)


@njit(**ENTRY)
def _worker(ctl, index):
    """A pool worker's life: wait for a job (spin, then yield until ``C.IDLE_NS`` have passed
    on the clock, then sleep on the futex), take part if the job asks for this many workers,
    repeat until stopped."""
    seen = load(ctl, C.SEQ)
    spin = load(ctl, C.SPIN)
    clock = load(ctl, C.CLOCK)
    while True:
        n = 0
        since = monotonic_ns(clock)
        while True:
            s = load(ctl, C.SEQ)
            if s != seen:
                break
            n += 1
            if n < spin:
                pause()
                continue
            if monotonic_ns(clock) - since < load(ctl, C.IDLE_NS):
                _yield(ctl)
                continue
            fetch_add(ctl, C.SLEEPERS, 1)  # a full barrier before the futex re-reads the word
            _futex_wait(ctl, seen)  # returns at once if the word moved on meanwhile
            fetch_add(ctl, C.SLEEPERS, -1)
            n = 0
            since = monotonic_ns(clock)
        seen = s
        if load(ctl, C.STOP):
            return
        if index < load(ctl, C.WORKERS):
            _take_part(ctl, index + 1)


def _omp_entry(ctl):
    """What each thread of an OpenMP team runs for a job: what a pool worker does, before
    OpenMP's own join. Team thread ``n`` (the caller 0) owns range ``n``; where the runtime's
    ``omp_get_thread_num`` is not known, every team thread only steals (still correct)."""
    tnum = load(ctl, C.OMP_TNUM)
    _take_part(ctl, omp_thread_num(tnum) if tnum != 0 else load(ctl, C.RANGE_CAP))


# C-callable (its cfunc wrapper is what GOMP_parallel calls); nothing calls it from Python
_omp_entry = njit(nogil=True, error_model="numpy",
                  **hooks.wrapperless(no_cpython_wrapper=True))(_omp_entry)

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
        nwords = C.RANGES + 8 * cap
        self.ctl = libc.calloc(1, 8 * nwords + 64)
        if not self.ctl:
            raise MemoryError("jitops: cannot allocate the thread pool's control block")
        self.ctl = (self.ctl + 63) & ~63
        # (np.frombuffer, not np.ctypeslib: a first import of a NumPy submodule that an
        # interrupt cuts short leaves NumPy's lazy __getattr__ recursing for good)
        words = np.frombuffer((ctypes.c_int64 * nwords).from_address(self.ctl), np.int64)
        words[C.RANGE_CAP] = cap
        words[C.MAX_UNITS] = MAX_UNITS
        words[C.ALTERNATE] = ALTERNATE
        words[C.CALLER_FIRST] = -1
        words[C.SYSCALL] = _SYSCALL
        words[C.FUTEX_NR] = _FUTEX_NR or 0
        words[C.YIELD_NR] = _YIELD_NR or 0
        words[C.SPIN], words[C.IDLE_NS], words[C.CLOCK] = SPIN, IDLE_US * 1000, _CLOCK
        words[C.JOIN_SPIN], words[C.JOIN_TIMEOUT] = JOIN_SPIN, JOIN_TIMEOUT_NS
        # (in the block, not constants of the compiled code: that is cached on disk)
        words[C.OMP_BACKOFF_MIN] = max(1, OMP_BACKOFF_JOBS)
        words[C.OMP_BACKOFF_MAX] = max(OMP_BACKOFF_JOBS, OMP_BACKOFF_MAX_JOBS)
        self.pid = current_pid()
        # Whether a job of this process runs: set and cleared only by bytecodes that no
        # signal handler, garbage collection or thread switch can come between (inside
        # ``with guard``, which holds no Python code), so an exception arriving anywhere in
        # a launch leaves it as it found it (jitops.cpu.threads.parallel.launch), and a nested call
        # from the same thread (a handler, a __del__) finds it set and runs serially.
        self.guard = threading.Lock()
        self.busy = False
        self.threads: list[threading.Thread] = []
        self.thread_limit: int | None = None  # workers this process could start, once it failed
        self.words = words
        self.omp = 0  # what C.OMP holds

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
            if fn and not self.words[C.OMP_ENTRY]:
                self.words[C.OMP_ENTRY] = omp_entry_address()
            self.words[C.OMP_TNUM] = tnum
            self.words[C.OMP] = self.omp = fn

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
                words[C.STOP] = 1
                words[C.WORKERS] = 0
                words[C.SEQ] = (int(words[C.SEQ]) + 1) & 0x7FFFFFFF
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
    libc.syscall(ctypes.c_long(_FUTEX_NR), ctypes.c_void_p(ctl + C.SEQ * 8),
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
    first parallel call or compile: :func:`jitops.cpu.compile.lifecycle.check_pid`)."""
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
