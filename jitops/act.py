"""The fused activations as scalar functions, for use inside your own ops.

>>> import jitops
>>> @jitops.elementwise
... def fused(x, w, b):
...     return jitops.act.relu(x * w + b)

Each is the same definition ``act=`` uses (the table in :mod:`jitops.core.scalar`), callable
from Python on a number, and from compiled code on the CPU and on CUDA (a Numba ``generic``
overload, so ``numba.njit`` and ``numba.cuda.jit`` functions can call them too). A float
argument gives a value of the same float type; the transcendental ones (elu, gelu, silu,
sigmoid, tanh, softplus) compute in float64 and round once, as ``act=`` does. An integer
argument: ``relu``/``relu6`` keep it an integer, the others compute in float64.
"""

from __future__ import annotations

import numpy as _np
from numba import types as _types
from numba.core.extending import overload as _overload
from numba.core.extending import register_jitable as _register_jitable

from .core import scalar as _scalar

__all__ = list(_scalar.ACT_NAMES)

_INT_OK = frozenset({"relu", "relu6"})

for _fn in _scalar.ACTS.values():  # the table's functions, callable from compiled code
    _register_jitable(_fn)


def _python_types(v, name: str):
    """(value type, compute type) for a call from Python."""
    t = type(v)
    if isinstance(v, (bool, _np.bool_, complex, _np.complexfloating)) or \
            not isinstance(v, (int, float, _np.number)):
        raise TypeError(f"jitops.act.{name} takes a real number, got {t.__name__}")
    if isinstance(v, (int, _np.integer)):
        return (t, t) if name in _INT_OK else (float, float)
    wide = name in _scalar.WIDE_ACTS
    return t, (float if wide else t)


def _make(name: str):
    table = _scalar.ACTS[name]

    def act(v):
        t, w = _python_types(v, name)
        return t(table(w(v), w))

    act.__name__ = act.__qualname__ = name
    act.__module__ = __name__
    act.__doc__ = (f"``{name}`` of one real number (the activation ``act={name!r}`` fuses); "
                   f"usable inside ``jitops.elementwise`` functions on every target.")

    @_overload(act, target="generic", jit_options={"error_model": "numpy"})
    def _ov(v):
        if isinstance(v, _types.Float):
            T = v
            W = _types.float64 if name in _scalar.WIDE_ACTS else v
        elif isinstance(v, _types.Integer) and not isinstance(v, _types.Boolean):
            T = W = v if name in _INT_OK else _types.float64
        else:
            return None

        def impl(v):
            return T(table(W(v), W))

        return impl

    return act


relu = _make("relu")
relu6 = _make("relu6")
leaky_relu = _make("leaky_relu")
elu = _make("elu")
gelu = _make("gelu")
silu = _make("silu")
sigmoid = _make("sigmoid")
tanh = _make("tanh")
softplus = _make("softplus")

del annotations  # the __future__ import's binding: not an activation


def __dir__() -> list[str]:
    return sorted(__all__)
