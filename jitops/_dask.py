"""Dask arrays in, Dask array out: jitops' CPU kernels on every chunk, lazily.

Nothing here imports Dask unless an operand already is a Dask array (so Dask must have been
imported by the caller): without Dask installed, or unused, jitops never touches it.

The call is planned once on the full shapes, with the same planner, dtype rules and error
messages as for NumPy inputs, all raised at call time. Paddle's ``axis`` rule is then handed
to Dask as NumPy broadcasting: each operand is reshaped to its frame in the output's rank
(size-1 dims inserted where Paddle places nothing), and ``dask.array.core.elemwise`` (what
NumPy ufuncs on Dask arrays use) aligns the chunks and calls jitops on each pair of blocks
with ``broadcast="numpy"``, which on frames of equal rank is the same placement.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from ._dtypes import WEAK_SCALARS, check_dtype, kernel_op, resolve
from ._plan import align


def is_dask_array(v: object) -> bool:
    """Whether ``v`` is a ``dask.array.Array`` (False without importing Dask)."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(v, da.Array)


def _chunk(op: str, fname: str, act: str | None, a, b):
    """One output block: the NumPy-input path of the same op (module-level: it is pickled
    by reference to Dask's workers, which import jitops themselves).

    Serial kernels: Dask already runs one chunk task per core (threads or worker processes),
    and a parallel kernel per task would put two threads on every core (measured: 0.85x
    ``da.subtract`` on a two-worker cluster with nested threads, against 1.x without).
    """
    from ._api import binary
    from ._threading import serial

    with serial():
        return binary(op, fname, a, b, "numpy", -1, act, None, None)


def _meta_operand(v, name: str, fname: str):
    """A stand-in with ``v``'s dtype for dtype resolution (weak scalars stay themselves)."""
    if type(v) in WEAK_SCALARS:
        return v
    dt = v.dtype if hasattr(v, "dtype") else np.asarray(v).dtype
    check_dtype(dt, name, fname)
    return np.empty(0, dt)


def _shape(v, name: str, fname: str) -> tuple[int, ...]:
    shape = tuple(getattr(v, "shape", ()))
    if any(isinstance(n, float) and n != n for n in shape):
        raise ValueError(f"jitops.{fname}: {name} has unknown (nan) dimensions; call "
                         f"{name}.compute_chunk_sizes() first")
    return shape


def binary(op: str, fname: str, x, y, mode: str, axis: int, act: str | None, out, device):
    """The lazy Dask result of ``op`` (arguments already normalised by the caller)."""
    import dask.array as da

    if out is not None:
        raise TypeError(f"jitops.{fname}: out= is not supported with Dask inputs (the result "
                        "is a new lazy Dask array; store it with dask.array.store)")
    if device is not None and str(device).strip().lower() != "cpu":
        raise TypeError(f"jitops.{fname}: device={device!r} is not supported with Dask inputs "
                        "(their chunks run on jitops' CPU kernels)")
    if type(x) not in WEAK_SCALARS and not is_dask_array(x):
        x = np.asarray(x)
    if type(y) not in WEAK_SCALARS and not is_dask_array(y):
        y = np.asarray(y)
    xm, ym = _meta_operand(x, "x", fname), _meta_operand(y, "y", fname)
    dt = resolve(kernel_op(op, np.result_type(xm, ym)), xm, ym, fname, act)
    xs, ys = _shape(x, "x", fname), _shape(y, "y", fname)
    out_shape, xf, yf = align(xs, ys, mode, axis)  # the planner's errors, now
    if type(x) not in WEAK_SCALARS and xf != xs:
        x = x.reshape(xf)
    if type(y) not in WEAK_SCALARS and yf != ys:
        y = y.reshape(yf)
    from dask.base import tokenize

    fn = functools.partial(_chunk, op, fname, act)
    name = f"jitops-{fname}-{tokenize(op, act, mode, axis, x, y)}"
    result = da.core.elemwise(fn, x, y, dtype=dt.result, name=name)
    if result.shape != out_shape:  # pragma: no cover - align and Dask agree by construction
        raise RuntimeError(f"jitops.{fname}: internal error: Dask result shape {result.shape} "
                           f"!= planned {out_shape}")
    return result
