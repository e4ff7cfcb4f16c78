"""The shape planner: broadcasting rules, iteration order and coalescing.

Pure Python on purpose (it imports neither Numba nor NumPy), so it can be tested on its own,
exhaustively, without compiling anything. The steps and their names follow PyTorch's
``TensorIterator::build`` (aten/src/ATen/TensorIterator.cpp)::

    align      -> output shape, every operand's element strides in the output frame (0 = broadcast)
    order      -> iteration order: NumPy's ``find_best_axis_ordering`` (nditer_constr.c)
    allocate   -> strides of a new output, contiguous in that order (NumPy ``order="K"``)
    coalesce   -> merge adjacent dims every operand can walk as one (TensorIterator/nditer)
    classify   -> the named inner-loop variant the kernels run

Operand order everywhere is ``(out, x, y)``. Strides are in *elements*, not bytes.
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
VARIANTS = (CONTIG, SCALAR_X, SCALAR_Y, STRIDED, TILED)

#: Tiles only pay when both tiled dims span several tiles; below this the strided rows are fine.
TILE_MIN = 64


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


def _check_axis_type(axis: object) -> int:
    # bool is an int subclass, but axis=True is almost certainly a mistake.
    if isinstance(axis, bool) or not hasattr(axis, "__index__"):
        raise TypeError(f"axis must be an integer, got {type(axis).__name__} {axis!r}")
    return int(axis.__index__())  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------
# align: the three broadcasting conventions -> output shape + per-operand dim maps
# --------------------------------------------------------------------------------------------

def _merge(px: Shape, py: Shape) -> tuple[Shape, int | None]:
    """Broadcast two shapes of equal rank dim by dim: each dim equal, or one side 1 (1 vs 0
    gives 0). Returns ``(shape, None)``, or ``((), i)`` for the first dim ``i`` that fails."""
    out = []
    for i, (p, q) in enumerate(zip(px, py)):
        if p == q or q == 1:
            out.append(p)
        elif p == 1:
            out.append(q)
        else:
            return (), i
    return tuple(out), None


def _numpy_shape(xs: Shape, ys: Shape) -> Shape:
    n = max(len(xs), len(ys))
    out, bad = _merge((1,) * (n - len(xs)) + tuple(xs), (1,) * (n - len(ys)) + tuple(ys))
    if bad is not None:
        raise ValueError(
            f"operands could not be broadcast together with shapes {_fmt(xs)} {_fmt(ys)} "
        )
    return out


def _pdpd_frame(xs: Shape, ys: Shape, axis: int) -> tuple[Shape, Shape, Shape]:
    """PaddlePaddle's real ``axis`` rule (``ElementwiseRawInferMeta``, paddlepaddle 3.3.1).

    Returns ``(out_shape, x_padded, y_padded)``: both operands written in the output frame
    (same rank, 1s where they have no dim), so the per-dim check and the strides are NumPy's.
    """
    if xs == ys:  # equal shapes: Paddle does not even look at axis
        return xs, xs, ys
    rx, ry = len(xs), len(ys)
    m = max(rx, ry)
    if rx == ry and axis not in (-1, 0):
        raise ValueError(
            f"pdpd broadcast: axis must be -1 or 0 when X and Y have the same rank ({rx}), "
            f"got axis={axis} (X shape {_fmt(xs)}, Y shape {_fmt(ys)})"
        )
    if not (-1 <= axis < m):
        raise ValueError(
            f"pdpd broadcast: axis={axis} is out of range [-1, {m}) for X shape {_fmt(xs)} "
            f"and Y shape {_fmt(ys)}"
        )
    a = abs(rx - ry) if axis == -1 else axis
    # The lower-rank operand is the one placed at `a` (Y when the ranks are equal).
    small_is_x = rx < ry
    big, small = (ys, xs) if small_is_x else (xs, ys)
    sname, bname = ("X", "Y") if small_is_x else ("Y", "X")
    # Trailing 1s of the small operand may run past the end of the big frame (Paddle accepts
    # Y(5,1) with axis 3 against a 4-d X); they broadcast against anything, so drop them.
    trimmed = tuple(small)
    while len(trimmed) > 0 and a + len(trimmed) > len(big) and trimmed[-1] == 1:
        trimmed = trimmed[:-1]
    if a + len(trimmed) > len(big):
        spill = len(big) - a
        raise ValueError(
            f"pdpd broadcast: X shape {_fmt(xs)} and Y shape {_fmt(ys)} are incompatible with "
            f"axis={a}: {sname} placed at dim {a} of {bname}'s {len(big)} dims leaves dim {spill} "
            f"of {sname} (size {trimmed[spill]}) outside the frame"
        )
    placed = (1,) * a + trimmed + (1,) * (len(big) - a - len(trimmed))
    px, py = (placed, tuple(big)) if small_is_x else (tuple(big), placed)
    out, i = _merge(px, py)
    if i is not None:
        raise ValueError(
            f"pdpd broadcast: X shape {_fmt(xs)} and Y shape {_fmt(ys)} are incompatible with "
            f"axis={a}: {sname} is laid onto {bname} as {_fmt(placed)}, and at dim {i} "
            f"X has {px[i]} but Y has {py[i]} (each dim must be equal or 1)"
        )
    return out, px, py


def _pad(shape: Shape, n: int) -> Shape:
    return (1,) * (n - len(shape)) + tuple(shape)


def align(xs: Shape, ys: Shape, mode: str, axis: int = -1) -> tuple[Shape, Shape, Shape]:
    """Broadcast two shapes under ``mode``.

    Returns ``(out_shape, x_frame, y_frame)`` where the frames are each operand's shape written
    in the output's rank (size-1 dims inserted where the operand has none), so that every dim is
    either equal to the output's or 1. Raises ValueError with the mode's error text.
    """
    xs, ys = tuple(xs), tuple(ys)
    if mode == "pdpd":
        return _pdpd_frame(xs, ys, axis)
    if axis != -1:
        raise ValueError(f"axis applies only to broadcast='pdpd'; it must stay -1 for "
                         f"broadcast={mode!r}, got axis={axis}")
    if mode == "none":
        if xs != ys:
            raise ValueError(
                f"broadcast='none' needs equal shapes, got X shape {_fmt(xs)} and "
                f"Y shape {_fmt(ys)}"
            )
        return xs, xs, ys
    out = _numpy_shape(xs, ys)
    return out, _pad(xs, len(out)), _pad(ys, len(out))


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
    axis = _check_axis_type(axis)
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
    iter_strides : tuple of three tuples
        ``(out, x, y)`` element strides over ``iter_shape``; 0 where an operand is broadcast.
    iter_offsets : tuple of three ints
        ``(out, x, y)`` element offset of the first visited element from each operand's data
        pointer (non-zero only where a dim was flipped to walk negative strides forwards).
    variant : str
        The inner-loop variant: ``contig``, ``scalar_x``, ``scalar_y``, ``strided`` or ``tiled``.
    size : int
        Number of output elements.
    """

    out_shape: Shape
    out_strides: Strides
    iter_shape: Shape
    iter_strides: tuple[Strides, Strides, Strides]
    iter_offsets: tuple[int, int, int]
    variant: str
    size: int


def expand_strides(op_shape: Shape, op_strides: Strides, frame: Shape, out_shape: Shape) -> Strides:
    """Element strides of one operand over ``out_shape`` (0 = broadcast).

    ``frame`` is the operand's shape in the output frame from :func:`align`: the operand's own
    dims in order, with size-1 dims inserted. Only the operand's non-1 dims carry a stride; they
    appear in ``frame`` in the same order, so they are matched up one by one.
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


def _contiguous_strides(shape: Shape, order: list[int]) -> Strides:
    """Strides of a dense array whose dims, slowest-first, are ``order``."""
    st = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        st[d] = acc
        acc *= max(shape[d], 1)
    return tuple(st)


def _transposed(shape: Shape, iter_strides: tuple[Strides, Strides, Strides]) -> bool:
    """Whether some operand runs across the inner dim: it moves less along the dim outside it.

    Such an operand touches a new cache line per element of a row; a tiled walk fixes that.
    """
    if len(shape) < 2 or shape[-1] < TILE_MIN or shape[-2] < TILE_MIN:
        return False
    for s in iter_strides:
        inner, outer = abs(s[-1]), abs(s[-2])
        if inner > 1 and 0 < outer < inner:
            return True
    return False


def _classify(iter_strides: tuple[Strides, Strides, Strides]) -> str:
    so, sx, sy = (s[-1] for s in iter_strides)
    if so == 1 and sx == 1 and sy == 1:
        return CONTIG
    if so == 1 and sx == 0 and sy == 1:
        return SCALAR_X
    if so == 1 and sx == 1 and sy == 0:
        return SCALAR_Y
    return STRIDED


@lru_cache(maxsize=4096)
def make_plan(
    x_shape: Shape,
    x_strides: Strides,
    y_shape: Shape,
    y_strides: Strides,
    mode: str,
    axis: int = -1,
    out_strides: Strides | None = None,
) -> Plan:
    """Plan one call. Strides are element strides; ``out_strides`` is given when ``out=`` is.

    The result is memoised on all arguments (they are hashable tuples), so repeated calls with
    the same shapes and layouts skip the whole pipeline.
    """
    out_shape, xf, yf = align(x_shape, y_shape, mode, axis)
    xs = expand_strides(x_shape, x_strides, xf, out_shape)
    ys = expand_strides(y_shape, y_strides, yf, out_shape)
    size = 1
    for n in out_shape:
        size *= n

    if out_strides is None:
        order = _best_order(out_shape, [xs, ys])
        os_ = _contiguous_strides(out_shape, order)
    else:
        os_ = tuple(0 if n == 1 else s for n, s in zip(out_shape, out_strides))
        order = _best_order(out_shape, [os_, xs, ys])
    ops = [os_, xs, ys]

    if size == 0:
        return Plan(out_shape, os_, (0,), ((1,), (1,), (1,)), (0, 0, 0), CONTIG, 0)

    # Drop size-1 dims; flip dims every operand walks backwards (NumPy flip_negative_strides),
    # so reversed views still run the forward contiguous loop.
    offsets = [0, 0, 0]
    dims = [d for d in order if out_shape[d] != 1]
    shape = [out_shape[d] for d in dims]
    strides = [[s[d] for d in dims] for s in ops]
    for k in range(len(dims)):
        if all(st[k] <= 0 for st in strides) and any(st[k] < 0 for st in strides):
            for i, st in enumerate(strides):
                offsets[i] += st[k] * (shape[k] - 1)
                st[k] = -st[k]

    # Coalesce (slowest-first lists): dim k-1 (outer) merges into dim k (inner) when every
    # operand steps over the inner dim's whole extent exactly as one outer step.
    cshape: list[int] = []
    cstr: list[list[int]] = [[], [], []]
    for k in range(len(shape)):
        if cshape and all(cstr[i][-1] == strides[i][k] * shape[k] for i in range(3)):
            cshape[-1] *= shape[k]
            for i in range(3):
                cstr[i][-1] = strides[i][k]
        else:
            cshape.append(shape[k])
            for i in range(3):
                cstr[i].append(strides[i][k])
    if not cshape:  # 0-d or all size-1: one element
        cshape = [1]
        cstr = [[1], [1], [1]]
    istr = (tuple(cstr[0]), tuple(cstr[1]), tuple(cstr[2]))
    variant = TILED if _transposed(tuple(cshape), istr) else _classify(istr)
    if len(cshape) == 1 and cshape[0] == 1:
        variant = CONTIG
        istr = ((1,), (1,), (1,))
    return Plan(
        out_shape, os_, tuple(cshape), istr, (offsets[0], offsets[1], offsets[2]), variant, size
    )
