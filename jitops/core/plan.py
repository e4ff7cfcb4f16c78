"""The shape planner: broadcasting rules, iteration order and coalescing.

Pure Python on purpose (it imports neither Numba nor NumPy), so it can be tested on its own,
exhaustively, without compiling anything. The steps and their names follow PyTorch's
``TensorIterator::build`` (aten/src/ATen/TensorIterator.cpp)::

    align      -> output shape, every operand's element strides in the output frame (0 = broadcast)
    order      -> iteration order: NumPy's ``find_best_axis_ordering`` (nditer_constr.c)
    allocate   -> strides of a new output, contiguous in that order (NumPy ``order="K"``)
    coalesce   -> merge adjacent dims every operand can walk as one (TensorIterator/nditer)
    classify   -> the named inner-loop variant the kernels run

Operands are ``(out, *inputs)`` for any number of inputs: the built-in ops have two, a user
op (``jitops.elementwise``) one or more. Strides are in *elements*, not bytes.
Iteration shapes are listed slowest-first (C order), so the innermost loop is the last dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

Shape = tuple[int, ...]
Strides = tuple[int, ...]

MODES = ("none", "numpy", "pdpd")

#: Inner-loop variants, as the kernels name them (mirrors PyTorch's ``VectorizedLoop2d`` and
#: NumPy's ``BINARY_LOOP_FAST``): every operand unit-stride; one input constant along the inner
#: dim (hoisted); anything else; and ``tiled``, for operands that disagree on layout (``X.T - Y``):
#: the two innermost dims are walked in small 2-d tiles, so the operand that runs across the
#: inner dim reuses each cache line it loads instead of touching a new line (and, with power-of-2
#: strides, the same cache set) for every element.
CONTIG, SCALAR_X, SCALAR_Y, STRIDED, TILED = "contig", "scalar_x", "scalar_y", "strided", "tiled"

#: Tiles only pay when both tiled dims span several tiles; below this the strided rows are fine.
TILE_MIN = 64
#: Elements of 8 bytes or more tile only where that beat the strided walk on ``X.T - Y``: where
#: the transposed operand's step along a row is a multiple of ``ALIAS_BYTES`` (its column falls
#: into a few cache sets), and float64 from ``WIDE_SPAN`` bytes on. Up to 4 bytes always.
ALIAS_BYTES = 1024
WIDE_SPAN = 16 << 20


def normalize_mode(broadcast: object) -> str:
    """Return the canonical broadcast mode name, accepting OpenVINO's spellings in any case."""
    if isinstance(broadcast, str) and broadcast.lower() in MODES:
        return broadcast.lower()
    raise ValueError(
        f"broadcast must be one of 'none', 'numpy', 'pdpd' (case-insensitive), got {broadcast!r}"
    )


def _fmt(shape: Shape) -> str:
    """NumPy's way of printing a shape in broadcast errors: ``(2,3)``, ``(4,)``, ``()``."""
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ",".join(str(n) for n in shape) + ")"


def check_axis_type(axis: object) -> int:
    # bool is an int subclass, but axis=True is almost certainly a mistake.
    if isinstance(axis, bool) or not hasattr(axis, "__index__"):
        raise TypeError(f"axis must be an integer, got {type(axis).__name__} {axis!r}")
    return int(axis.__index__())  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------
# align: the three broadcasting conventions -> output shape + per-operand dim maps
# --------------------------------------------------------------------------------------------

def _names(n: int) -> list[str]:
    """How errors call the operands: X and Y for the binary ops, else by position."""
    return ["X", "Y"] if n == 2 else [f"operand {i}" for i in range(n)]


def _merge(frames: list[Shape]) -> tuple[Shape, tuple[int, int, int] | None]:
    """Broadcast shapes of equal rank dim by dim: each dim equal, or 1 (1 vs 0 gives 0).

    Returns ``(shape, None)``, or ``((), (dim, i, j))`` for the first dim where operands ``i``
    and ``j`` disagree."""
    out = []
    for d in range(len(frames[0])):
        n, owner = 1, 0
        for i, f in enumerate(frames):
            if f[d] == 1:
                continue
            if n == 1:
                n, owner = f[d], i
            elif f[d] != n:
                return (), (d, owner, i)
        out.append(n)
    return tuple(out), None


def _numpy_frames(shapes: list[Shape]) -> tuple[Shape, list[Shape]]:
    n = max(len(s) for s in shapes)
    frames = [_pad(s, n) for s in shapes]
    out, bad = _merge(frames)
    if bad is not None:
        raise ValueError("operands could not be broadcast together with shapes "
                         + "".join(f"{_fmt(s)} " for s in shapes))
    return out, frames


def _pdpd_frames(shapes: list[Shape], axis: int) -> tuple[Shape, list[Shape]]:
    """PaddlePaddle's real ``axis`` rule (``ElementwiseRawInferMeta``, paddlepaddle 3.3.1),
    for any number of operands (SPEC 1.1): every operand of lower rank than the largest is
    laid onto the largest at ``axis``; with two operands of equal rank, the second.

    Returns ``(out_shape, frames)``: every operand written in the output frame (same rank, 1s
    where it has no dim), so the per-dim check and the strides are NumPy's.
    """
    if all(s == shapes[0] for s in shapes):  # equal shapes: Paddle does not even look at axis
        return shapes[0], list(shapes)
    names = _names(len(shapes))
    ranks = [len(s) for s in shapes]
    m = max(ranks)
    desc = " and ".join(f"{nm} shape {_fmt(s)}" for nm, s in zip(names, shapes))
    if all(r == m for r in ranks) and axis not in (-1, 0):
        what = "X and Y have" if len(shapes) == 2 else "all operands have"
        raise ValueError(
            f"pdpd broadcast: axis must be -1 or 0 when {what} the same rank ({m}), "
            f"got axis={axis} ({desc.replace(' and ', ', ') if len(shapes) == 2 else desc})"
        )
    if not (-1 <= axis < m):
        raise ValueError(f"pdpd broadcast: axis={axis} is out of range [-1, {m}) for {desc}")
    big = ranks.index(m)  # the frame: the first operand of the largest rank
    frames: list[Shape] = []
    placed_at = [0] * len(shapes)
    for i, s in enumerate(shapes):
        if ranks[i] == m:  # equal ranks: Y is "placed" at 0, which changes nothing
            frames.append(tuple(s))
            continue
        a = placed_at[i] = m - ranks[i] if axis == -1 else axis
        # Trailing 1s of the small operand may run past the end of the big frame (Paddle
        # accepts Y(5,1) with axis 3 against a 4-d X); they broadcast against anything.
        trimmed = tuple(s)
        while trimmed and a + len(trimmed) > m and trimmed[-1] == 1:
            trimmed = trimmed[:-1]
        if a + len(trimmed) > m:
            spill = m - a
            raise ValueError(
                f"pdpd broadcast: {desc} are incompatible with axis={a}: {names[i]} placed at "
                f"dim {a} of {names[big]}'s {m} dims leaves dim {spill} of {names[i]} "
                f"(size {trimmed[spill]}) outside the frame"
            )
        frames.append((1,) * a + trimmed + (1,) * (m - a - len(trimmed)))
    out, bad = _merge(frames)
    if bad is not None:
        d, i, j = bad
        small = j if j != big else i
        raise ValueError(
            f"pdpd broadcast: {desc} are incompatible with axis={placed_at[small]}: "
            f"{names[small]} is laid onto {names[big]} as {_fmt(frames[small])}, and at dim {d} "
            f"{names[i]} has {frames[i][d]} but {names[j]} has {frames[j][d]} (each dim must be "
            "equal or 1)"
        )
    return out, frames


def _pad(shape: Shape, n: int) -> Shape:
    return (1,) * (n - len(shape)) + tuple(shape)


def align_all(shapes, mode: str, axis: int = -1) -> tuple[Shape, list[Shape]]:
    """Broadcast any number of shapes under ``mode``.

    Returns ``(out_shape, frames)`` where the frames are each operand's shape written in the
    output's rank (size-1 dims inserted where the operand has none), so that every dim is
    either equal to the output's or 1. Raises ValueError with the mode's error text.
    """
    shapes = [tuple(s) for s in shapes]
    if not shapes:
        raise ValueError("at least one operand is needed")
    if mode == "pdpd":
        return _pdpd_frames(shapes, axis)
    if axis != -1:
        raise ValueError(f"axis applies only to broadcast='pdpd'; it must stay -1 for "
                         f"broadcast={mode!r}, got axis={axis}")
    if mode == "none":
        if any(s != shapes[0] for s in shapes):
            names = _names(len(shapes))
            raise ValueError(
                "broadcast='none' needs equal shapes, got "
                + " and ".join(f"{nm} shape {_fmt(s)}" for nm, s in zip(names, shapes))
            )
        return shapes[0], list(shapes)
    return _numpy_frames(shapes)


def align(xs: Shape, ys: Shape, mode: str, axis: int = -1) -> tuple[Shape, Shape, Shape]:
    """:func:`align_all` for two operands: ``(out_shape, x_frame, y_frame)``."""
    out, (xf, yf) = align_all((xs, ys), mode, axis)
    return out, xf, yf


def result_shape(x_shape: Shape, y_shape: Shape, broadcast: str = "numpy", axis: int = -1) -> Shape:
    """The output shape of a binary op on operands of these shapes, without computing anything.

    Parameters
    ----------
    x_shape, y_shape : tuple of int
        The operands' shapes.
    broadcast : {"none", "numpy", "pdpd"}
        The broadcasting convention (case-insensitive).
    axis : int
        Paddle's start axis (``pdpd`` only; must be -1 otherwise).

    Returns
    -------
    tuple of int

    Raises
    ------
    ValueError
        If the shapes do not broadcast, or ``broadcast``/``axis`` are invalid.

    Examples
    --------
    >>> result_shape((2, 3, 4, 5), (3, 4), broadcast="pdpd", axis=1)
    (2, 3, 4, 5)
    >>> result_shape((8, 1, 6, 1), (7, 1, 5))
    (8, 7, 6, 5)
    """
    mode = normalize_mode(broadcast)
    axis = check_axis_type(axis)
    for name, s in (("x_shape", x_shape), ("y_shape", y_shape)):
        if not all(isinstance(n, int) or hasattr(n, "__index__") for n in s):
            raise TypeError(f"{name} must be a tuple of integers, got {s!r}")
        if any(int(n) < 0 for n in s):
            raise ValueError(f"{name} has a negative dimension: {tuple(s)!r}")
    xs = tuple(int(n) for n in x_shape)
    ys = tuple(int(n) for n in y_shape)
    return align(xs, ys, mode, axis)[0]


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Everything a kernel needs to run one call, in element units.

    Attributes
    ----------
    out_shape : tuple of int
        The user-visible broadcast shape.
    out_strides : tuple of int
        Element strides of the output, in user dim order: the given ``out``'s, or those of a new
        output laid out in iteration order (NumPy ``order="K"``).
    iter_shape : tuple of int
        Coalesced iteration space, slowest dim first; at least one dim.
    iter_strides : tuple of tuples
        ``(out, *inputs)`` element strides over ``iter_shape``; 0 where an operand is broadcast.
    iter_offsets : tuple of int
        ``(out, *inputs)`` element offset of the first visited element from each operand's data
        pointer (non-zero only where a dim was flipped to walk negative strides forwards).
    variant : str
        The inner-loop variant: ``contig``, ``scalar_x``, ``scalar_y`` (two inputs, one of them
        constant along the inner dim), ``strided`` or ``tiled``.
    size : int
        Number of output elements.
    """

    out_shape: Shape
    out_strides: Strides
    iter_shape: Shape
    iter_strides: tuple[Strides, ...]
    iter_offsets: tuple[int, ...]
    variant: str
    size: int

    @property
    def n_inputs(self) -> int:
        return len(self.iter_strides) - 1


def expand_strides(op_shape: Shape, op_strides: Strides, frame: Shape, out_shape: Shape) -> Strides:
    """Element strides of one operand over ``out_shape`` (0 = broadcast).

    ``frame`` is the operand's shape in the output frame from :func:`align_all`: the operand's
    own dims in order, with size-1 dims inserted. Only the operand's non-1 dims carry a stride;
    they appear in ``frame`` in the same order, so they are matched up one by one.
    """
    own = [s for n, s in zip(op_shape, op_strides) if n != 1]
    res = []
    it = iter(own)
    for f, o in zip(frame, out_shape):
        if f != 1:
            res.append(next(it))
        else:
            res.append(0)
    return tuple(res)


def _best_order(shape: Shape, operands: list[Strides]) -> list[int]:
    """NumPy's ``npyiter_find_best_axis_ordering``, returned slowest-first.

    Stable insertion sort by |stride|; an operand with a 0 stride on either dim has no opinion;
    on conflicts between operands C order wins (the dims stay where they are).
    """
    nd = len(shape)
    perm = list(range(nd - 1, -1, -1))  # fastest first, as NumPy stores axisdata
    for i0 in range(1, nd):
        ipos = i0
        d0 = perm[i0]
        for i1 in range(i0 - 1, -1, -1):
            ambig, swap = True, False
            d1 = perm[i1]
            for s in operands:
                s0, s1 = s[d0], s[d1]
                if s0 != 0 and s1 != 0:
                    if abs(s1) <= abs(s0):
                        swap = False
                    elif ambig:
                        swap = True
                    ambig = False
            if not ambig:
                if swap:
                    ipos = i1
                else:
                    break
        if ipos != i0:
            perm[ipos + 1 : i0 + 1] = perm[ipos:i0]
            perm[ipos] = d0
    return perm[::-1]


def contiguous_strides(shape: Shape, order=None) -> Strides:
    """Element strides of a dense array whose dims, slowest-first, are ``order`` (C order by
    default): NumPy's, size-1 dims included."""
    if order is None:
        order = range(len(shape))
    st = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        st[d] = acc
        acc *= max(shape[d], 1)
    return tuple(st)


def _tile_pays(itemsize: int, inner: int, block: int) -> bool:
    """Whether tiling pays for an operand of ``itemsize``-byte elements that steps ``inner``
    elements along a row, over a ``block`` of elements (see :data:`ALIAS_BYTES`)."""
    if itemsize <= 4:
        return True
    aliased = inner * itemsize % ALIAS_BYTES == 0
    big = block * itemsize >= WIDE_SPAN
    return aliased and not big if itemsize > 8 else aliased or big


def _transposed(shape: Shape, iter_strides: tuple[Strides, ...],
                itemsizes: tuple[int, ...] | None = None) -> bool:
    """Whether some operand runs across the inner dim (it moves less along the dim outside
    it) and a tiled walk pays for it there.

    Such an operand touches a new cache line per element of a row; a tiled walk fixes that.
    Without ``itemsizes`` (one per operand, out first) every such operand is tiled.
    """
    if len(shape) < 2 or shape[-1] < TILE_MIN or shape[-2] < TILE_MIN:
        return False
    for k, s in enumerate(iter_strides):
        inner, outer = abs(s[-1]), abs(s[-2])
        if inner > 1 and 0 < outer < inner and (
                itemsizes is None or _tile_pays(itemsizes[k], inner, shape[-1] * shape[-2])):
            return True
    return False


def _classify(iter_strides: tuple[Strides, ...]) -> str:
    so, *ins = (s[-1] for s in iter_strides)
    if so == 1 and all(s == 1 for s in ins):
        return CONTIG
    if so == 1 and len(ins) == 2:
        if ins == [0, 1]:
            return SCALAR_X
        if ins == [1, 0]:
            return SCALAR_Y
    return STRIDED


@lru_cache(maxsize=4096)
def make_plan(
    shapes: tuple[Shape, ...],
    strides: tuple[Strides, ...],
    mode: str,
    axis: int = -1,
    out_strides: Strides | None = None,
    itemsizes: tuple[int, ...] | None = None,
) -> Plan:
    """Plan one call on the inputs' shapes and element strides; ``out_strides`` when ``out=``
    is given; ``itemsizes`` (out's, then the inputs') to tile only where it pays.

    The result is memoised on all arguments (they are hashable tuples), so repeated calls with
    the same shapes and layouts skip the whole pipeline.
    """
    out_shape, frames = align_all(shapes, mode, axis)
    ins = [expand_strides(sh, st, f, out_shape) for sh, st, f in zip(shapes, strides, frames)]
    size = 1
    for n in out_shape:
        size *= n
    if out_strides is None:
        order = _best_order(out_shape, ins)
        os_ = contiguous_strides(out_shape, order)
    else:
        os_ = tuple(0 if n == 1 else s for n, s in zip(out_shape, out_strides))
        order = _best_order(out_shape, [os_, *ins])
    ops = [os_, *ins]
    k_ops = len(ops)
    if size == 0:
        return Plan(out_shape, os_, (0,), ((1,),) * k_ops, (0,) * k_ops, CONTIG, 0)

    # Drop size-1 dims; flip dims every operand walks backwards (NumPy flip_negative_strides),
    # so reversed views still run the forward contiguous loop.
    offsets = [0] * k_ops
    dims = [d for d in order if out_shape[d] != 1]
    shape = [out_shape[d] for d in dims]
    strides_ = [[s[d] for d in dims] for s in ops]
    for k in range(len(dims)):
        if all(st[k] <= 0 for st in strides_) and any(st[k] < 0 for st in strides_):
            for i, st in enumerate(strides_):
                offsets[i] += st[k] * (shape[k] - 1)
                st[k] = -st[k]

    # Coalesce (slowest-first lists): dim k-1 (outer) merges into dim k (inner) when every
    # operand steps over the inner dim's whole extent exactly as one outer step.
    cshape: list[int] = []
    cstr: list[list[int]] = [[] for _ in ops]
    for k in range(len(shape)):
        if cshape and all(cstr[i][-1] == strides_[i][k] * shape[k] for i in range(k_ops)):
            cshape[-1] *= shape[k]
            for i in range(k_ops):
                cstr[i][-1] = strides_[i][k]
        else:
            cshape.append(shape[k])
            for i in range(k_ops):
                cstr[i].append(strides_[i][k])
    if not cshape or (len(cshape) == 1 and cshape[0] == 1):  # 0-d or all size-1: one element
        return Plan(out_shape, os_, (1,), ((1,),) * k_ops, tuple(offsets), CONTIG, size)
    istr = tuple(tuple(c) for c in cstr)
    variant = TILED if _transposed(tuple(cshape), istr, itemsizes) else _classify(istr)
    return Plan(out_shape, os_, tuple(cshape), istr, tuple(offsets), variant, size)
