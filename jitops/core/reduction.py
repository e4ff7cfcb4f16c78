"""The reduction planner: a pass over a broadcast space whose results are stored or reduced.

Pure Python, like the shape planner (jitops.core.plan). A reduction is a plan too: the space
is the broadcast output's shape, every input has its element strides there (0 where it
broadcasts), and every result has a *frame* -- the space's shape with 1 on the axes it sums
over. A result whose frame is the whole space is stored; any other is summed into an
accumulator of its frame's shape, whose strides in the space are 0 on the summed axes (NumPy's
``REDUCTION_AXIS``, PyTorch's reduced strides). The steps follow the map planner's:

    frames   -> which axes each result sums (:func:`sum_to_frame`: numpy or Paddle's axis rule)
    order    -> the lead input's memory order (dout's, g's), innermost last
    coalesce -> adjacent axes every operand walks as one
    split    -> the axis tasks divide: one kept by every summed result where there is one (each
                accumulator element then belongs to one task), else the longest axis in
                chunks fixed by the shape alone, each task summing into its own partial row,
                the rows combined in chunk order afterwards

So a sum does not depend on the thread count: the split is chosen from the shape, and the
order every element is added in follows from the plan (:class:`ReducePlan`). Inside a row the
kernels sum blocks pairwise (jitops.cpu.kernels.reduce); across rows they add in order, as NumPy
does along an outer axis.
"""

from __future__ import annotations

import math

import numpy as np

from .plan import Shape, Strides, align_all

#: Elements of a task below which a pass is not worth splitting further.
TASK_MIN = 32768
#: Most tasks a split over a summed axis makes (each one partial row per summed result).
MAX_PARTIALS = 64
#: A kept innermost axis shorter than this is not cut among tasks (its rows would be short,
#: each costing a row's setup) where a summed axis can be split into partial rows instead.
ROW_MIN = 8192
#: ... provided the input has this many elements per element kept (the partial rows stay
#: small beside it); each such task at least this many elements (its partial row is added
#: to the others afterwards, in Python).
PARTIAL_RATIO = 16
ROWS_TASK_MIN = 131072


def accumulator(how: str, value: np.dtype) -> np.dtype:
    """The dtype values of ``value`` are reduced in by ``how``."""
    if how in ("any", "all") or value.kind == "b":
        return np.dtype(np.uint8) if how not in ("sum", "prod") else np.dtype(np.int64)
    if value.kind == "c":
        return np.dtype(np.complex128)
    if value.kind == "u":
        return np.dtype(np.uint64) if how in ("sum", "prod") else value
    if value.kind == "i":
        return np.dtype(np.int64) if how in ("sum", "prod") else value
    return np.dtype(np.float64)


def identity(how: str, acc: np.dtype):
    """The value an accumulator of ``how`` starts from."""
    if how in ("sum", "any"):
        return 0
    if how in ("prod", "all"):
        return 1
    if acc.kind == "f":
        return -np.inf if how == "max" else np.inf
    info = np.iinfo(acc)
    return info.min if how == "max" else info.max


#: NumPy's own rounding (float16 and bfloat16 too), its overflow unreported: errstate's
#: decorator form keeps its state per call (0.4 us less than a ``with`` block).
_quiet_astype = np.errstate(all="ignore")(np.ndarray.astype)


def rounded(acc: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An accumulator rounded once to the result's ``dtype``."""
    if acc.dtype == dtype:
        return acc
    if acc.dtype.kind in "biu" and dtype.kind in "biu":  # (raises no flag: no errstate)
        return acc.astype(dtype)
    return _quiet_astype(acc, dtype)


class ResultPlan:
    """One result of a pass: its accumulator's (or stored array's) C-order ``frame``, its
    element ``strides`` over the iteration space (0 on the axes it sums), whether it is
    ``summed``, and whether the tasks sum into ``partial`` rows (the split axis is one it sums:
    each task then owns a whole frame's row of a ``(ntasks, size)`` scratch array)."""

    __slots__ = ("frame", "strides", "summed", "partial", "size")

    def __init__(self, frame: Shape, strides: Strides, summed: bool, partial: bool):
        self.frame, self.strides, self.summed, self.partial = frame, strides, summed, partial
        self.size = 1
        for n in frame:
            self.size *= n

    def __repr__(self) -> str:
        return (f"ResultPlan(frame={self.frame}, strides={self.strides}, "
                f"summed={self.summed}, partial={self.partial})")


class ReducePlan:
    """A pass: the coalesced iteration ``shape`` (slowest first), each input's element
    strides (``inputs``), each result's :class:`ResultPlan`, the ``split`` axis and the
    tasks' ``bounds`` along it (``ntasks + 1`` increasing indices)."""

    __slots__ = ("shape", "inputs", "results", "split", "bounds", "size")

    def __init__(self, shape: Shape, inputs: tuple[Strides, ...],
                 results: tuple[ResultPlan, ...], split: int, bounds: tuple[int, ...]):
        self.shape, self.inputs, self.results = shape, inputs, results
        self.split, self.bounds = split, bounds
        self.size = 1
        for n in shape:
            self.size *= n

    @property
    def ntasks(self) -> int:
        return len(self.bounds) - 1

    def __repr__(self) -> str:
        return (f"ReducePlan(shape={self.shape}, inputs={self.inputs}, results={self.results}, "
                f"split={self.split}, bounds={self.bounds})")


def sum_to_frame(full: Shape, shape: Shape, mode: str = "numpy", axis: int = -1) -> Shape:
    """``shape`` written in ``full``'s rank, 1 on every axis a sum to it reduces.

    ``shape`` must broadcast to exactly ``full`` under ``mode`` (``numpy``: trailing axes,
    PyTorch's ``sum_to``; ``pdpd``: laid on at ``axis``, Paddle's ``GetReduceDims`` with its
    trailing-1 trimming; ``none``: equal). Raises ValueError naming both shapes otherwise.
    """
    full, shape = tuple(full), tuple(shape)
    if mode == "pdpd" and len(shape) > len(full):
        raise ValueError(f"sum_to: shape {shape} has more dims than the gradient's {full}")
    how = f"broadcast={mode!r}" + (f", axis={axis}" if mode == "pdpd" else "")
    try:
        out, frames = align_all((full, shape), mode, axis)
    except ValueError as e:
        raise ValueError(f"sum_to: shape {shape} does not broadcast to the gradient's shape "
                         f"{full} ({how}): {e}") from None
    if out != full or frames[0] != full:
        raise ValueError(f"sum_to: shape {shape} does not broadcast to the gradient's shape "
                         f"{full} ({how})")
    return frames[1]


def _c_strides(frame: Shape, space: Shape) -> Strides:
    """C-order element strides of an array of shape ``frame``, 0 where it broadcasts."""
    strides, step = [0] * len(frame), 1
    for d in range(len(frame) - 1, -1, -1):
        strides[d] = step if frame[d] == space[d] and frame[d] != 1 else 0
        step *= frame[d]
    return tuple(strides)


def plan_reduction(space: Shape, inputs: list[Strides], frames: list[Shape],
                   lead: int = 0, threads: int = 1,
                   reduced: list[bool] | None = None) -> ReducePlan:
    """Plan a pass over ``space`` (element strides of each input in it; each result's frame,
    1 on the axes it sums), walked in input ``lead``'s memory order. A result is reduced
    where ``reduced`` says so (by default: where its frame is not the whole space; a
    reduction over size-1 axes only is one too), else stored. ``threads`` only sets how many
    tasks a split over a kept axis makes (the sums do not depend on it)."""
    space = tuple(space)
    nd = len(space)
    res_strides = [_c_strides(f, space) for f in frames]
    summed = list(reduced) if reduced is not None else [tuple(f) != space for f in frames]
    ops = [tuple(s) for s in inputs] + res_strides
    # order: the lead input's strides, largest first (stable: C order among equals)
    lead_strides = ops[lead]
    dims = [d for d in range(nd) if space[d] != 1]
    dims.sort(key=lambda d: -abs(lead_strides[d]))
    shape = [space[d] for d in dims]
    strides = [[s[d] for d in dims] for s in ops]
    # coalesce: axis i (outer) and i+1 (inner) merge where every operand steps across both
    i = 0
    while i + 1 < len(shape):
        if all(s[i] == s[i + 1] * shape[i + 1] for s in strides):
            shape[i] *= shape[i + 1]
            for s in strides:
                s[i] = s[i + 1]
                del s[i + 1]
            del shape[i + 1]
        else:
            i += 1
    if not shape:  # a single element
        shape = [1]
        strides = [[0] for _ in strides]
    nin = len(inputs)
    rstr = strides[nin:]
    size = 1
    for n in shape:
        size *= n
    kept_by_all = [d for d in range(len(shape))
                   if all(not summed[r] or rstr[r][d] != 0 for r in range(len(frames)))]
    split = max(kept_by_all, key=lambda d: (shape[d], -d)) if kept_by_all else None
    if split == len(shape) - 1 and shape[split] < ROW_MIN:
        # the kept axis is the rows' own (a sum over leading axes, as a bias gradient's):
        # cut among tasks its rows would be short, so tasks take a summed axis if the
        # partial rows stay small beside the input (chosen from the shape alone)
        sums = [d for d in range(len(shape)) if d not in kept_by_all]
        if sums and math.prod(shape[d] for d in kept_by_all) * PARTIAL_RATIO <= size:
            split = max(sums, key=lambda d: (shape[d], -d))
            ntasks = max(1, min(shape[split], MAX_PARTIALS, size // ROWS_TASK_MIN))
    elif split is None:
        split = max(range(len(shape)), key=lambda d: (shape[d], -d))
        ntasks = max(1, min(shape[split], MAX_PARTIALS, size // TASK_MIN))
    if split in kept_by_all:
        ntasks = max(1, min(shape[split], 4 * threads, size // TASK_MIN))
        if threads <= 1:
            ntasks = 1
    n = shape[split]
    bounds = tuple(n * t // ntasks for t in range(ntasks + 1))
    results = tuple(
        ResultPlan(tuple(f), tuple(rstr[r]), summed[r],
                   summed[r] and ntasks > 1 and rstr[r][split] == 0)
        for r, f in enumerate(frames))
    return ReducePlan(tuple(shape), tuple(tuple(s) for s in strides[:nin]), results, split,
                      bounds)


class Segments:
    """One reduced result as rows of a matrix (the CUDA kernels' view): the space's axes
    reordered as the result's ``kept`` ones (C order, as its frame) then the ``reduced`` ones
    (the lead input's memory order, innermost last, so neighbouring threads read neighbouring
    elements); ``shape`` is the two lists' sizes, ``inputs`` each input's element strides in
    that order; ``rows`` kept elements of ``length`` reduced ones each."""

    __slots__ = ("shape", "inputs", "rows", "length")

    def __init__(self, shape: Shape, inputs: tuple[Strides, ...], rows: int, length: int):
        self.shape, self.inputs, self.rows, self.length = shape, inputs, rows, length


def segments(space: Shape, inputs: list[Strides], frame: Shape, lead: int = 0) -> Segments:
    """The :class:`Segments` of the result of ``frame`` (1 on the axes it reduces) over
    ``space``, for inputs with those element strides there."""
    dims = [d for d, n in enumerate(space) if n != 1]
    kept = [d for d in dims if frame[d] != 1]
    reduced = [d for d in dims if frame[d] == 1]
    reduced.sort(key=lambda d: -abs(inputs[lead][d]))  # stable: C order among equals
    order = kept + reduced
    rows = length = 1
    for d in kept:
        rows *= space[d]
    for d in reduced:
        length *= space[d]
    return Segments(tuple(space[d] for d in order) or (1,),
                    tuple(tuple(s[d] for d in order) or (0,) for s in inputs), rows, length)
