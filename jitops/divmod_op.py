"""``jitops.divmod``: NumPy's ``divmod`` -- the floored quotient and the remainder of one
pass, a user op of two results built from the family's own rules (jitops.scalar)."""

from __future__ import annotations

from typing import Any

from numba import types
from numba.core.extending import overload

from . import scalar as _scalar
from .core import scalar as _table
from .fusion import ElementwiseOp
from .signatures import Broadcast, Device


def _pair(a, b):
    return _scalar.floor_divide(a, b), _scalar.remainder(a, b)


@overload(_pair, target="generic", jit_options={"error_model": "numpy"})
def _ov_pair(a, b):
    """Floats (float16 and bfloat16 arrive as float32): NumPy's ``npy_divmod`` once, both
    results from one ``fmod``; other types: the two rules."""
    if a == b and a in (types.float32, types.float64):
        fn, T = _scalar._jitable(_table.divmod_float), a
        return lambda a, b: fn(a, b, T)
    return lambda a, b: (_scalar.floor_divide(a, b), _scalar.remainder(a, b))


def _divmod(a, b):
    return _pair(a, b)


_divmod.table_op = "divmod_float"  # what it computes on floats (its CPU lean form's key)


_OP = ElementwiseOp(_divmod, name="divmod")


def divmod(x: Any, y: Any, /, broadcast: Broadcast = "numpy", axis: int = -1, out: Any = None,
           device: Device = None) -> tuple[Any, Any]:
    return _OP(x, y, broadcast=broadcast, axis=axis, out=out, device=device)


divmod.__doc__ = """``(x // y, x % y)`` in one pass, NumPy's ``divmod``: each result the entry
``jitops.floor_divide`` and ``jitops.remainder`` run (floored quotient, the remainder with
the divisor's sign; NumPy's zero signs and NaNs; an integer zero divisor gives 0 and 0 with
NumPy's divide-by-zero warning, named divmod).

Parameters
----------
x, y : array_like
    Host arrays (NumPy; PyTorch and Paddle CPU tensors), CUDA arrays (computed on their GPU),
    Dask arrays (one lazy graph) or Python numbers (weak, NumPy 2's promotion); not complex.
broadcast : {"numpy", "pdpd", "none"}, default "numpy"
    ``pdpd``: Paddle's ``axis`` rule.
axis : int, default -1
    The pdpd start axis.
out : tuple of two arrays, optional
    Where to write each result (an entry may be None); exactly its shape and dtype. Host
    operands only.
device : {None, "cpu", "cuda", "cuda:N"}
    Where it runs (None: where the operands are). There is no ``act``.

Returns
-------
(quotient, remainder)
    Arrays of the operands' promoted dtype (NumPy scalars for 0-d operands).

Raises
------
ValueError
    Shapes that do not broadcast, a bad ``broadcast``/``axis``, ``out`` of the wrong shape.
TypeError
    Complex or non-numeric operands, ``out`` of the wrong dtype, ``out`` with CUDA or Dask
    operands.
RuntimeError
    CUDA requested where it cannot run (never a CPU fallback).

Examples
--------
>>> import numpy as np, jitops
>>> jitops.divmod(np.array([7, -7, 7, -7]), np.array([2, 2, -2, -2]))
(array([ 3, -4, -4,  3]), array([ 1,  1, -1, -1]))
"""
