"""The int64 structs that compiled code and Python share, each defined once.

A struct is an ordered list of named fields; :func:`struct` numbers their words and every
reader uses those numbers -- the LLVM IR emitters, the compiled Python (a namedtuple global
is a constant there) and the Python that fills the words. Adding a word is one name here and
its value where the struct is filled.
"""

from __future__ import annotations

from collections import namedtuple

from numba.extending import register_jitable

#: Words in a cache line: ``|`` in a field list starts the next field on a new line.
LINE = 8


def struct(name: str, fields: str):
    """The word indices of the fields in ``fields`` (whitespace-separated), as a namedtuple
    of ints; ``NAME:n`` takes ``n`` words, ``|`` starts a new cache line, and ``SIZE`` is
    the count of words."""
    names, at, pos = [], [], 0
    for field in fields.split():
        if field == "|":
            pos = -(-pos // LINE) * LINE
            continue
        label, _, width = field.partition(":")
        names.append(label)
        at.append(pos)
        pos += int(width or 1)
    return namedtuple(name, [*names, "SIZE"])(*at, pos)


def fill(layout, **values) -> list[int]:
    """The words of ``layout`` from every field's value, by name; a sequence fills the words
    from its field on (the last field's may run past ``SIZE``)."""
    index = _INDEX.get(type(layout))
    if index is None:
        index = _INDEX[type(layout)] = {n: getattr(layout, n) for n in layout._fields[:-1]}
    if len(values) != len(index) or not index.keys() >= values.keys():
        raise ValueError(f"{type(layout).__name__}: fields "
                         f"{sorted(index.keys() ^ values.keys())} missing or unknown")
    words = [0] * layout.SIZE
    for name, value in values.items():
        at = index[name]
        if isinstance(value, (tuple, list)):
            words[at:at + len(value)] = value
        else:
            words[at] = value
    return words


_INDEX: dict[type, dict[str, int]] = {}


#: The meta of a kernel launch, built-in (three operands: out, x, y) and user op alike: the
#: plan's rank and variant; the task geometry (jitops.cpu.kernels.binary.task_geometry); the
#: operand count; where the data pointer and the flags lie in an ndarray object (-1: data
#: addresses are given, flags not checked); whether out must be checked for overlap; the
#: tile edges that may move; where the header checks start (-1: none). Then, from ``SIZE``,
#: the operands' start offsets (``NOPS`` words), the shape (``ND``), their strides (``NOPS x
#: ND``, out first) and per operand the :data:`OPERAND` check words; then the header checks.
META = struct("Meta", "ND VARIANT BLOCK NTASKS ROWS_PER_TASK NBLK ROWS TILE_I TILE_J NTI NTJ "
                      "NOPS DATA_OFF FLAGS_OFF CHECK SHIFT HEADERS")
#: One operand's check words in a meta: its data pointer's alignment, its byte extent
#: ``[p + LO, p + HI)``, and whether it is out's exact view (an alias that may run in place).
OPERAND = struct("Operand", "ALIGN LO HI SAME")


@register_jitable
def shape_at(nops: int) -> int:
    """Where a meta's shape starts, for ``nops`` operands."""
    return META.SIZE + nops


@register_jitable
def checks_at(nops: int, nd: int) -> int:
    """Where a meta's per-operand check words start, for ``nops`` operands of rank ``nd``."""
    return META.SIZE + nops + nd + nops * nd


#: The thread pool's control block (jitops.cpu.threads.pool), the words contended by different
#: threads a cache line apart: the job's layout (its ranges, tasks per unit); its generation
#: and task count (published last); tasks done, failed, and their floating-point flags; the
#: futex word bumped once per job; workers asleep; stop; the job (kind, task, arguments,
#: workers, whether it may be walked backwards); the clocks and syscalls the workers use
#: (libc ``syscall``, the futex and yield numbers, spin and idle time) and the tasks the
#: caller ran; a shared OpenMP runtime (``GOMP_parallel``, our entry, its backoff state);
#: the claims of the last job and when its last task ended; the join futex, its waiters,
#: sleeps, spin and timeout; the caller's first task, whether jobs alternate direction, the
#: OpenMP thread number, the range capacity, units per job, libc ``clock_gettime``; then
#: one line per range (``RANGES + 8 * r``: generation 24 bits | lo 20 | hi 20).
CONTROL = struct(
    "Control", "NRANGES UNIT | INFO | DONE | FAILED FP | SEQ | SLEEPERS | STOP | "
               "KIND TASK A B C D WORKERS REVERSIBLE | "
               "SYSCALL FUTEX_NR YIELD_NR SPIN IDLE_NS BY_CALLER OMP OMP_ENTRY | "
               "CLAIMS LAST_DONE OMP_BACKOFF OMP_STALLS OMP_BACKOFF_LEN OMP_CLEAN "
               "OMP_BACKOFF_MIN OMP_BACKOFF_MAX | JOIN_SEQ | JOIN_WAITERS JOIN_SLEEPS | "
               "JOIN_SPIN JOIN_TIMEOUT | CALLER_FIRST ALTERNATE OMP_TNUM RANGE_CAP MAX_UNITS "
               "CLOCK | RANGES")

#: Results, inputs and ranks of a reduction pass (jitops.cpu.kernels.reduce): a task keeps its
#: odometer and offsets on its stack.
MAX_RESULTS, MAX_INPUTS, R_DIMS = 4, 8, 32
#: A reduction launch's meta: rank, split axis, task count, inputs, results; per result its
#: mode and the bytes between tasks' partial rows (0: none); the shape; the operands'
#: strides (inputs then results, ``R_DIMS`` words each); the tasks' bounds on the split.
RMETA = struct("ReduceMeta", f"ND SPLIT NTASKS NIN NRES MODE:{MAX_RESULTS} "
                             f"PARTIAL:{MAX_RESULTS} | SHAPE:{R_DIMS} "
                             f"STRIDES:{R_DIMS * (MAX_INPUTS + MAX_RESULTS)} BOUNDS")

#: The statuses a compiled entry returns as Python ints (0 .. N_STATUS - 1).
N_STATUS = 64
#: A compiled entry's block (jitops.cpu.repeat.fastcall): the task's and the meta's addresses; the
#: C functions it calls (``Py_IncRef``, ``Py_DecRef``, ``PyTuple_Pack``, ``PyErr_Clear``,
#: ``PyEval_SaveThread``/``RestoreThread`` or 0 where the GIL is kept, NumPy's
#: ``PyArray_NewFromDescr`` or 0 where the result is not made here); the new result's type,
#: dtype, rank and order (NumPy's flags word: ``NPY_ARRAY_F_CONTIGUOUS`` or 0); the pool
#: control block whose sleeping workers it wakes first, or 0; a shape class's words
#: (:data:`CLASS`) and its planner's C address (jitops.cpu.repeat.shapeclass), or 0s; the
#: inputs of a user op's task (0: a built-in op's x and y) and its serial driver's C address;
#: the status objects; the new result's dims.
BLOCK = struct("Block", "TASK META INCREF DECREF PACK CLEAR SAVE RESTORE NEW TYPE DESCR ND ORDER "
                        f"WAKE CLASS PLAN NIN DRIVER STATUS:{N_STATUS} DIMS")

#: A shape class's words (jitops.cpu.repeat.shapeclass): its kind; which input has the result's
#: shape (1: x, 2: y); each input's rank; the dtype objects of out, x, y; the ndarray type;
#: the count of elements a call stays below; the item sizes of out, x, y; the ndarray header
#: offsets of the type, rank, dims, dtype and flags; the planner's meta it starts from; the
#: block sizes.
CLASS = struct("ClassWords", "KIND FULL ND_X ND_Y DESCR_O DESCR_X DESCR_Y TYPE MAX ISZ_O ISZ_X "
                             "ISZ_Y OFF_TYPE OFF_ND OFF_DIMS OFF_DESCR OFF_FLAGS TEMPLATE BLOCK "
                             "BLOCK_MIN")
