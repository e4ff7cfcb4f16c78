"""Dask arrays in, Dask array out: jitops' CPU kernels on every chunk, lazily.

Nothing here imports Dask unless an operand already is a Dask array (so Dask must have been
imported by the caller): without Dask installed, or unused, jitops never touches it.

The pipeline settles the call on the full shapes first (:func:`jitops.core.pipeline.prepare_lazy`:
the same dtype rules, planner and error messages as for NumPy inputs, all raised at call time),
and hands over every operand reshaped to its frame in the output's rank (size-1 dims inserted
where Paddle places nothing). ``dask.array.core.elemwise`` (what NumPy ufuncs on Dask arrays
use) then aligns the chunks and calls the chunk function on each set of blocks with
``broadcast="numpy"``, which on frames of equal rank is the same placement.
"""

from __future__ import annotations

import sys

from ..core.pipeline import LazyCall


def is_dask_array(v: object) -> bool:
    """Whether ``v`` is a ``dask.array.Array`` (False without importing Dask; False too while
    another thread is still importing it: the module is in ``sys.modules`` before its class
    is, and no instance exists before the class)."""
    array = getattr(sys.modules.get("dask.array"), "Array", None)
    return array is not None and isinstance(v, array)


def known_shape(v, name: str, fname: str) -> tuple[int, ...]:
    """The shape of an operand; a Dask array of unknown (nan) dims is refused."""
    shape = tuple(getattr(v, "shape", ()))
    if any(isinstance(n, float) and n != n for n in shape):
        raise ValueError(f"jitops.{fname}: {name} has unknown (nan) dimensions; call "
                         f"{name}.compute_chunk_sizes() first")
    return shape


def run(call: LazyCall, chunk):
    """The lazy Dask result of a call; ``chunk(*blocks)`` computes one output block."""
    import dask.array as da
    from dask.base import tokenize

    token = tokenize(call.op, call.act, call.mode, call.axis, *call.operands)
    name = f"jitops-{call.fname}-{token}"
    result = da.core.elemwise(chunk, *call.operands, dtype=call.dtypes.result, name=name)
    if result.shape != call.out_shape:  # pragma: no cover - align and Dask agree by construction
        raise RuntimeError(f"jitops.{call.fname}: internal error: Dask result shape "
                           f"{result.shape} != planned {call.out_shape}")
    return result
