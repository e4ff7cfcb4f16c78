"""An independent, slow, pure-Python reference for Paddle's pdpd broadcasting.

Written from ../shared/conformance/SEMANTICS.md section 2 (what paddlepaddle 3.3.1 really
does), deliberately without looking at jitops.core.plan: it pads the lower-rank shape with 1s on
both sides the way Paddle's GetBroadcastDimsArrays does, then walks every output index by hand.
"""

from __future__ import annotations

import itertools

import numpy as np


class PdpdError(ValueError):
    pass


def pdpd_frames(xs, ys, axis):
    """(out_shape, x_padded, y_padded) or PdpdError."""
    xs, ys = tuple(xs), tuple(ys)
    if xs == ys:
        return xs, xs, ys
    rx, ry = len(xs), len(ys)
    m = max(rx, ry)
    if rx == ry and axis not in (-1, 0):
        raise PdpdError("equal ranks need axis -1 or 0")
    if axis < -m or axis >= m:
        raise PdpdError("axis range")
    start = axis if axis >= 0 else abs(rx - ry) + axis + 1
    if start < 0 or axis < -1:
        raise PdpdError("axis must be >= 0")
    x_small = rx < ry
    big = ys if x_small else xs
    small = list(xs if x_small else ys)
    padded = [1] * len(big)
    for k, n in enumerate(small):
        pos = start + k
        if pos >= len(big):
            if n != 1:
                raise PdpdError("dim spills past the frame")
            continue  # a trailing 1 past the end: Paddle writes it out of bounds, harmlessly
        padded[pos] = n
    px, py = (tuple(padded), big) if x_small else (big, tuple(padded))
    out = []
    for a, b in zip(px, py):
        if a == b:
            out.append(a)
        elif a == 1:
            out.append(b)
        elif b == 1:
            out.append(a)
        else:
            raise PdpdError("mismatch")
    return tuple(out), px, py


def numpy_shape(xs, ys):
    n = max(len(xs), len(ys))
    px = (1,) * (n - len(xs)) + tuple(xs)
    py = (1,) * (n - len(ys)) + tuple(ys)
    out = []
    for a, b in zip(px, py):
        if a != b and 1 not in (a, b):
            raise ValueError("mismatch")
        out.append(b if a == 1 else a)
    return tuple(out), px, py


def frames(xs, ys, mode, axis=-1):
    if mode == "pdpd":
        return pdpd_frames(xs, ys, axis)
    if mode == "none":
        if tuple(xs) != tuple(ys):
            raise ValueError("none needs equal shapes")
        return tuple(xs), tuple(xs), tuple(ys)
    return numpy_shape(xs, ys)


def apply(fn, x, y, mode, axis=-1, out_dtype=None):
    """Evaluate ``fn(x_elem, y_elem)`` at every output index with explicit index arithmetic."""
    x, y = np.asarray(x), np.asarray(y)
    shape, px, py = frames(x.shape, y.shape, mode, axis)
    xr, yr = x.reshape(px), y.reshape(py)
    res = np.empty(shape, dtype=out_dtype or np.result_type(x, y))
    for idx in itertools.product(*(range(n) for n in shape)):
        xi = tuple(0 if px[d] == 1 else i for d, i in enumerate(idx))
        yi = tuple(0 if py[d] == 1 else i for d, i in enumerate(idx))
        res[idx] = fn(xr[xi], yr[yi])
    return res
