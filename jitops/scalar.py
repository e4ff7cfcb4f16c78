"""NumPy's binary family as scalar functions, for use inside your own ops.

>>> import jitops
>>> @jitops.elementwise
... def step(x, y):
...     return jitops.scalar.floor_divide(x, y) * y

Each is the same definition the op of that name runs (the table in :mod:`jitops.core.scalar`,
chosen by NumPy's loop table for the argument types), callable from compiled code on the CPU
and on CUDA (a Numba ``generic`` overload) and from Python on numbers (the op itself on them).
NumPy's rules come with it -- integer floor division by zero is 0 with NumPy's warning (named
after your op), comparisons of NaN are false, int64 and uint64 compare exactly -- but not
integer power's refusal of negative exponents (inside an op an element cannot refuse: it
gives the squaring loop's answer). Two follow from how a user op types its elements: float16
operands reach the function as float32, so ``nextafter`` there steps in float32 (NumPy's
float16 ``nextafter`` steps in float16: call :func:`jitops.nextafter` on such arrays); and
``float_power``'s float64 is kept only with ``dtype=numpy.float64`` (a float return from
float inputs keeps their dtype, as for a weak literal).
"""

from __future__ import annotations

import numpy as _np
from numba import types as _types
from numba.core import errors as _errors
from numba.core.extending import overload as _overload
from numba.core.extending import register_jitable as _register_jitable
from numba.np.numpy_support import as_dtype as _as_dtype
from numba.np.numpy_support import from_dtype as _from_dtype

from .core import catalog as _catalog
from .core import scalar as _scalar
from .core.dtypes import compute_dtype as _compute_dtype

__all__ = [name for name, row in _catalog.ROWS.items() if row.rules == "numpy"]

_registered: set = set()


def _jitable(fn):
    """A table function callable from compiled code (once; the helpers it calls have their
    own overloads, per target)."""
    if fn not in _registered and fn not in _scalar.HELPERS:
        _register_jitable(fn)
        _registered.add(fn)
    return fn


@_register_jitable
def _same(v):
    return v


def _make(name: str):
    row = _catalog.ROWS[name]

    def op(x, y):
        from . import ops

        return getattr(ops, name)(x, y)

    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__doc__ = (f"NumPy's ``{name}`` of two numbers, as :func:`jitops.{name}` computes it; "
                  f"usable inside ``jitops.elementwise`` functions on every target.")

    @_overload(op, target="generic", jit_options={"error_model": "numpy"})
    def _ov(x, y):
        if not all(isinstance(t, (_types.Number, _types.Boolean)) for t in (x, y)):
            return None
        try:
            lx, ly, res = row.ufunc.resolve_dtypes((_as_dtype(x), _as_dtype(y), None))
        except (TypeError, NotImplementedError):
            raise _errors.TypingError(f"jitops.scalar.{name}: no NumPy loop for {x} and "
                                      f"{y}") from None
        impl = _catalog.implementation(name, lx, ly, res)
        compute = _np.dtype(_np.uint64) if impl.endswith("_mixed") else _compute_dtype(lx)
        T, R = _from_dtype(compute), _from_dtype(res)
        kx, ky = _catalog.KEPT.get(impl, (False, False))
        X, Y = (_same if kx else T), (_same if ky else T)
        fn = _jitable(_scalar.OPS[impl])

        def impl_(x, y):
            return R(fn(X(x), Y(y), T))

        return impl_

    return op


for _name in __all__:
    globals()[_name] = _make(_name)

del annotations  # the __future__ import's binding: not an op


def __dir__() -> list[str]:
    return sorted(__all__)
