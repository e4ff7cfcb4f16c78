"""Lean forms of elements: where every lane of a chunk of a row is *calm* (a test of the
bits, which raises nothing), the row runs a form without the element's special cases, which
vectorises where the element does not, or runs faster; any other chunk runs the element
itself (jitops.cpu.kernels.binary.row). A lean form gives each calm lane the element's own
bits and flags: the float32 power's is its arithmetic without the selects
(jitops.cpu.kernels.power32); the float32 division family's is the element's own code with
C's ``fmod`` bound to its exact quick form (spec.frem_quick), which the element itself
reaches through a branch per lane.
"""

from __future__ import annotations

from types import FunctionType

from numba import types

from ...core import scalar as _scalar
from ..compile.jit import inner
from . import power32
from .power32 import _bits
from .spec import frem_quick


class Lean:
    """An element's lean form: on a chunk whose every lane passes ``calm``, ``core`` gives
    each lane's answer, elsewhere ``general`` (None: the element itself); ``keep``: the
    constant exponents for which the element itself runs the whole row instead, given the
    exponent as a constant."""

    __slots__ = ("calm", "core", "general", "keep")

    def __init__(self, calm, core, general=None, keep=()):
        self.calm, self.core, self.general, self.keep = calm, core, general, keep


@inner
def frem_calm(a, b):
    """Whether float32 ``fmod(a, b)`` is its quick form's (spec._emit_frem_single's fast
    pairs): ``a`` finite, ``b`` normal, ``|a| < 2**24 |b|`` by the exponents."""
    ea, eb = (_bits(a) >> 23) & 0xFF, (_bits(b) >> 23) & 0xFF
    return (ea != 0xFF) & (eb != 0) & (eb != 0xFF) & (ea <= eb + 23)


@inner
def quotient_calm(a, b):
    """:func:`frem_calm`, and ``a / b`` zero or above ``2**-101`` (nothing below float32's
    smallest normal): the floored quotient's lanes compute ``a / b`` for a zero quotient's
    sign, a branch LLVM takes in every lane of a vector, and it must not raise *underflow*
    where NumPy's lane does not take it (``1 // -3e38``)."""
    ea, eb = (_bits(a) >> 23) & 0xFF, (_bits(b) >> 23) & 0xFF
    return frem_calm(a, b) & ((eb <= ea + 100) | ((_bits(a) & 0x7FFFFFFF) == 0))


def _rebound(fn, **names):
    """``fn``'s code with some of its globals bound to others."""
    return FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                        fn.__defaults__, fn.__closure__)


_DIVMOD_QUICK = inner(_rebound(_scalar.npy_divmod, fmod_c=frem_quick))


def _quick(op):
    """Table function ``op`` of float32, its ``fmod`` the quick form, as ``f(a, b)``."""
    fn = inner(_rebound(op, fmod_c=frem_quick, npy_divmod=_DIVMOD_QUICK))
    T = types.float32

    def core(a, b):
        return fn(a, b, T)

    return inner(core)


#: Lean forms by (op, compute dtype). NumPy's power loop for one exponent keeps its own
#: answers for its five exponents and runs ``powf`` for the others: here the vector power,
#: as an array of exponents gets (C's ``powf`` called per element ran 0.8x NumPy's).
LEAN = {("power_float32", "float32"): Lean(power32.calm, power32.core),
        ("power_float_one_exponent", "float32"): Lean(power32.calm, power32.core,
                                                      power32.general,
                                                      (-1.0, -0.0, 0.0, 0.5, 1.0, 2.0)),
        **{(op.__name__, "float32"): Lean(frem_calm, _quick(op))
           for op in (_scalar.remainder_float, _scalar.fmod_float,
                      _scalar.paddle_remainder_float)},
        **{(op.__name__, "float32"): Lean(quotient_calm, _quick(op))
           for op in (_scalar.floor_divide_float, _scalar.divmod_float)}}

_INLINED: dict = {}


def of_function(fn, compute: str) -> tuple | None:
    """``(calm, core)`` inlined by Numba, for a function of the several-result kernels
    (jitops.cpu.kernels.reduce) that says which table op it computes (its ``table_op``),
    where that op has a lean form for ``compute``; else None."""
    lean = LEAN.get((getattr(fn, "table_op", None), compute))
    if lean is None or lean.general is not None or lean.keep:
        return None
    pair = _INLINED.get(lean)
    if pair is None:
        pair = _INLINED[lean] = tuple(inner(f.py_func, inline="always")
                                      for f in (lean.calm, lean.core))
    return pair
