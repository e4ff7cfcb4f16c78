"""NumPy's ufunc override protocol (NEP 13) for jitops' ops: operands that decide ufuncs
themselves are handed the op, as NumPy's own ufuncs hand themselves over.

An operand (or ``out``) whose type defines its own ``__array_ufunc__`` -- a pandas Series or
DataFrame, an xarray DataArray, a pandas nullable array, an astropy Quantity -- decides what
an elementwise op means for it: pandas aligns labels and wraps the result, xarray broadcasts
by dimension name and keeps coordinates and attributes. NumPy calls
``type(v).__array_ufunc__(v, ufunc, "__call__", *inputs, **kwargs)`` for each such type,
subclasses before their base classes, else left to right, until one returns something other
than ``NotImplemented``; so does :func:`delegate`, with a :class:`UfuncView` of the jitops op
as the ufunc. The type calls the view back on its underlying arrays, and the arithmetic runs
in jitops' kernels.

The view's ``__name__`` is ``"jitops.<name>"``, never the name of a NumPy ufunc: pandas maps
a ufunc named ``subtract`` to its own ``-`` operator, which would compute without jitops.

Not delegated, as before: Dask arrays (jitops maps their chunks itself), CUDA arrays (the
CUDA backend), NumPy scalars, and Paddle's tensors, which opt out of ufuncs
(``__array_ufunc__ = None``) but whose values jitops reads through ``__array__``. Any other
type that opts out gets NumPy's own TypeError.

Numba-free and import-light: nothing here imports pandas, xarray or any other library.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .device import is_cuda_array
from .dtypes import WEAK_SCALARS

_ND = np.ndarray
_ND_UFUNC = np.ndarray.__array_ufunc__
_ABSENT = object()
_PLAIN = frozenset((_ND, type(None), *WEAK_SCALARS))


def library(t: type) -> str:
    """The top-level package a class comes from (``paddle``, ``pandas``, ``dask``): how the
    libraries are told apart without importing any of them."""
    return t.__module__.split(".", 1)[0]


def overrides(args) -> list:
    """The arguments whose types are asked, in NumPy's order (one per type: subclasses
    before their base classes, otherwise left to right); empty when none overrides.

    Raises NumPy's TypeError for an operand that opts out of ufuncs
    (``__array_ufunc__ = None``), bar Paddle's tensors.
    """
    found: list = []
    for v in args:
        t = type(v)
        if t in _PLAIN:
            continue
        handler = getattr(t, "__array_ufunc__", _ABSENT)
        if handler is _ABSENT or handler is _ND_UFUNC:
            continue
        if handler is None:
            if library(t) == "paddle":
                continue
            raise TypeError(f"operand '{t.__name__}' does not support ufuncs "
                            f"(__array_ufunc__=None)")
        if library(t) == "dask" or is_cuda_array(v) or any(type(u) is t for u in found):
            continue
        for i, u in enumerate(found):
            if issubclass(t, type(u)):
                found.insert(i, v)
                break
        else:
            found.append(v)
    return found


class UfuncView:
    """A jitops op as the ``ufunc`` an ``__array_ufunc__`` implementation receives.

    It has what such implementations read (``__name__``, ``nin``, ``nout``, ``nargs``,
    ``signature``, ``identity``) and is called as a ufunc is: ``view(*inputs, out=(o,),
    **kwargs)``, ``out`` a tuple of one array or the array itself. Only ``"__call__"`` is
    offered: jitops' ops have no reduce, accumulate, outer or at.
    """

    __slots__ = ("__name__", "nin", "nout", "nargs", "signature", "identity", "_run")

    def __init__(self, name: str, nin: int, run: Callable):
        self.__name__ = name
        self.nin, self.nout, self.nargs = nin, 1, nin + 1
        self.signature = self.identity = None
        self._run = run  # run(inputs, out, kwargs) -> result

    def __call__(self, *inputs, out=None, **kwargs):
        if len(inputs) != self.nin:
            raise TypeError(f"{self.__name__}() takes {self.nin} operands, got {len(inputs)}")
        for v in inputs:
            if type(v) is _ND and v.dtype == object:
                raise TypeError(
                    f"{self.__name__}: the operands' own __array_ufunc__ handed jitops an "
                    f"array of Python objects (pandas does for a DataFrame of nullable or "
                    f"mixed dtypes, and for a bool column reindexed with missing labels); "
                    f"jitops computes numeric arrays only: convert first, e.g. "
                    f".astype('float64') or .to_numpy(dtype='float64', na_value=np.nan)")
        if isinstance(out, tuple):
            if len(out) != 1:
                raise ValueError(f"{self.__name__}(): out must be a tuple of one array, got "
                                 f"{len(out)}")
            out = out[0]
        return self._run(inputs, out, kwargs)

    def __repr__(self) -> str:
        return f"<jitops ufunc {self.__name__!r}>"


def delegate(view: UfuncView, operands: tuple, out, kwargs: dict, asked: list, fname: str):
    """NumPy's dispatch (NEP 13): ask each of ``asked`` (from :func:`overrides`) in turn; the
    first answer other than ``NotImplemented`` is the result. ``kwargs`` are what the type is
    handed besides ``out`` (``act``)."""
    if out is not None:
        kwargs = {**kwargs, "out": (out,)}
    for v in asked:
        result = type(v).__array_ufunc__(v, view, "__call__", *operands, **kwargs)
        if result is not NotImplemented:
            return result
    names = ", ".join(repr(type(v).__name__) for v in asked)
    raise TypeError(f"jitops.{fname}: operand type(s) all returned NotImplemented from "
                    f"__array_ufunc__({view!r}, '__call__', ...): {names}. Pass the "
                    f"underlying arrays (pandas: .to_numpy(), xarray: .values) or use NumPy's "
                    f"own ufunc")


#: The ops pandas hands to its own operators when NumPy's ufunc of that name is applied to a
#: Series or DataFrame (pandas' ``maybe_dispatch_ufunc_to_dunder_op``).
_PANDAS_OPERATORS = frozenset(("add", "subtract", "multiply", "divide"))


def pandas_scalars(op: str, operands: tuple, asked: list) -> tuple:
    """The operands pandas' operators would see: ``numpy.subtract(series, np.float32(1.5))``
    is pandas' ``series - np.float32(1.5)``, which takes a NumPy scalar as the Python number
    it holds (``int8 Series - np.float32(1.5)`` is float64, where int8 array minus that
    scalar is float32). jitops hands pandas a view not named ``subtract`` (so that jitops
    computes), so for the four ops pandas' operators implement it passes such scalars as
    Python numbers itself, and the result's dtype is NumPy's on the same objects."""
    if op not in _PANDAS_OPERATORS or not any(library(type(v)) == "pandas" for v in asked):
        return operands
    return tuple(v.item() if isinstance(v, np.number | np.bool_) else v for v in operands)


def refuse_mixed_frames(operands: tuple, fname: str) -> None:
    """A DataFrame whose columns are not all of one NumPy dtype is refused (TypeError):
    pandas hands a ufunc such a frame as one array of a common dtype (int and float columns
    as float64, nullable ones as float64 with NaN, or as Python objects), where its own
    operators -- NumPy's ``subtract`` on it -- keep each column's dtype."""
    for v in operands:
        t = type(v)
        if t.__name__ != "DataFrame" or library(t) != "pandas":
            continue
        dtypes = set(v.dtypes)
        if len(dtypes) > 1 or not all(isinstance(d, np.dtype) for d in dtypes):
            kinds = ", ".join(sorted(map(str, dtypes)))
            raise TypeError(f"jitops.{fname}: a DataFrame with columns of dtypes {kinds}: "
                            f"pandas hands ufuncs one array of a common dtype, which would "
                            f"lose the columns' own dtypes; apply jitops column by column "
                            f"(on each Series), or convert the frame to one NumPy dtype first "
                            f"(.astype('float64'))")


def positional_alignment(mode: str, axis: int, asked: list, fname: str) -> None:
    """Labelled operands line up by their labels (the type decides): Paddle's explicit
    ``axis`` and exact-shape ``none`` line operands up by position, so they are refused with
    such operands (TypeError). ``pdpd`` with ``axis=-1`` -- the default of the Paddle-style
    names, trailing dims aligned -- leaves it to the labels, as ``numpy`` does."""
    if mode == "numpy" or (mode == "pdpd" and axis == -1):
        return
    t = type(asked[0])
    how = "broadcast='none'" if mode == "none" else f"broadcast='pdpd' with axis={axis}"
    raise TypeError(f"jitops.{fname}: {how} lines operands up by position, but "
                    f"{t.__module__}.{t.__qualname__} decides that itself (its labels or "
                    f"dimension names); use the default broadcasting, or pass the underlying "
                    f"arrays (pandas: .to_numpy(), xarray: .values)")


_SCALAR_PRIORITY = -1000000.0


def array_wrap(operands) -> tuple | None:
    """NumPy's choice of who wraps a ufunc's result (``npy_find_array_wrap``): the operand
    with the highest ``__array_priority__`` among those with an ``__array_wrap__`` (an ndarray
    subclass has ndarray's), a subclass preferred over a plain ndarray at equal priority;
    ``(operand, its __array_wrap__)``, or None when a plain ndarray or a scalar wins."""
    chosen = wrap = None
    priority = None
    for v in operands:
        t = type(v)
        if t is _ND:
            if priority is None or priority < 0.0:
                chosen, wrap, priority = None, None, 0.0
        elif t in _PLAIN or isinstance(v, np.generic):
            if priority is None or priority < _SCALAR_PRIORITY:
                chosen, wrap, priority = None, None, _SCALAR_PRIORITY
        else:
            w = getattr(t, "__array_wrap__", None)
            if w is None:
                continue
            p = float(getattr(v, "__array_priority__", 0.0))
            if priority is None or priority < p or (p == 0.0 and chosen is None):
                chosen, wrap, priority = v, w, p
    return None if chosen is None else (chosen, wrap)


def apply_wrap(result: np.ndarray, chosen: tuple, view: UfuncView, operands: tuple,
               return_scalar: bool):
    """``result`` as the chosen operand's type: ``__array_wrap__(result, context,
    return_scalar)``, NumPy 2's call (an ndarray subclass without one of its own gets ndarray's,
    which views the result as the subclass); a wrap that takes only the array is called with
    it alone, as NumPy still does."""
    v, wrap = chosen
    context = (view, operands, 0)
    if wrap is _ND.__array_wrap__ and type(result) is type(v):
        return result[()] if return_scalar and not result.ndim else result
    try:
        return wrap(v, result, context, return_scalar)
    except TypeError:
        return wrap(v, result)
