"""Your own elementwise ops: ``@jitops.elementwise`` fuses a scalar expression into one pass.

A user op goes through the same pipeline as the built-in ops (jitops.core.pipeline: operands,
NumPy 2 promotion, the planner with N operands, ``out=`` and the overlap policy, errors before
anything is written) and runs on the N-input CPU kernels (jitops.cpu.kernels.nary), on CUDA
(jitops.cuda.kernels, from the same scalar function) or chunkwise on Dask arrays.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any, overload

import numpy as np
from numba import types

from .core.dtypes import check_dtype, user_result
from .cpu.kernels import nary
from .cpu.repeat.memo import Memo
from .dispatch import call_user
from .reductions import call_several
from .signatures import Broadcast, Device


def _restore(module: str, qualname: str, dtype):
    """Unpickle a user op of a module-level function: found again by name (Dask workers)."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, ElementwiseOp):
        return obj if dtype is None else obj.with_dtype(dtype)
    return ElementwiseOp(obj, dtype=dtype)


def _arity(fn, name: str) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise TypeError(f"jitops.elementwise: cannot read the signature of {name}; wrap it in "
                        f"a Python function of its scalar inputs") from None
    n = 0
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or \
                p.default is not p.empty:
            raise TypeError(f"jitops.elementwise: {name} must take its scalar inputs as plain "
                            f"positional parameters (no defaults, *args or keywords); "
                            f"parameter {p.name!r} is not one")
        n += 1
    if n == 0:
        raise TypeError(f"jitops.elementwise: {name} takes no inputs (it needs at least one)")
    if n >= nary.MAX_OPERANDS:  # the kernels keep every operand's offset on the task's stack
        raise TypeError(f"jitops.elementwise: {name} takes {n} inputs; at most "
                        f"{nary.MAX_OPERANDS - 1} are supported")
    return n


class _Several(Exception):
    """The function returns ``n`` values: the op goes through jitops.reductions."""

    def __init__(self, n: int):
        super().__init__(n)
        self.n = n


class ElementwiseOp:
    """An elementwise op made from a scalar Python function of N inputs.

    Call it like a built-in op, with N operands::

        op(*operands, broadcast="numpy", axis=-1, out=None, device=None, dtype=None)

    Parameters
    ----------
    *operands : array_like, CUDA array or dask.array.Array
        N operands, as for the built-in ops (Python scalars are weak, NumPy 2 rules).
    broadcast : {"numpy", "pdpd", "none"}, default "numpy"
        ``pdpd`` with N operands lays every operand of lower rank than the largest onto it
        at ``axis``.
    axis : int, default -1
        The pdpd start axis (must stay -1 in the other modes).
    out : array, optional
        Exactly the broadcast shape and the result dtype; it may be any of the operands.
    device : {None, "cpu", "cuda", "cuda:N"}
        As for the built-in ops; CUDA runs the same scalar function compiled for the GPU.
    dtype : dtype, optional
        The result dtype, overriding the one inferred from the function.

    Returns
    -------
    numpy.ndarray, CUDA array or dask.array.Array
        The inputs are promoted together (``numpy.result_type``; float16 is computed in
        float32) and the function runs on each element in that dtype; the result dtype is
        the function's return for them with Python literals weak, as in NumPy 2 (see
        :func:`jitops.core.dtypes.user_result`), or ``dtype``.
    """

    def __init__(self, fn, *, dtype=None, name: str | None = None, reduce=None, axis=None,
                 keepdims: bool = False):
        if isinstance(fn, ElementwiseOp):
            fn = fn.py_func
        if not callable(fn):
            raise TypeError(f"jitops.elementwise: expected a function, got {type(fn).__name__}")
        self.py_func = fn
        self.__name__ = name or getattr(fn, "__name__", "user_op")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__module__ = getattr(fn, "__module__", None) or "__main__"
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self.nin = _arity(fn, self.__name__)
        self.memo = Memo()  # its last serial repeat (jitops.cpu.repeat.memo.user)
        self.key, self.cacheable = nary.function_key(fn)
        self._compiled_fn = nary.register(self.key, fn)  # (an earlier twin's, if any)
        if dtype is not None:
            dtype = np.dtype(dtype)
            check_dtype(dtype, "dtype", self.__name__)
        self.dtype = dtype
        if reduce is not None:
            from .reductions import normalize_hows

            n = len(reduce) if isinstance(reduce, (tuple, list)) else 1
            normalize_hows(reduce, n, self.__name__)  # a bad name fails here
            reduce = tuple(reduce) if isinstance(reduce, list) else reduce
        elif axis is not None or keepdims:
            raise TypeError(f"jitops.elementwise: axis= and keepdims= apply only with "
                            f"reduce= (for {self.__name__})")
        self.reduce, self.axes, self.keepdims = reduce, axis, bool(keepdims)
        #: how many values the function returns (known once it compiled): several go
        #: through jitops.reductions.call_several, as reductions do
        self.nout = 1
        self._results: dict = {}
        self._returned: dict[np.dtype, np.dtype] = {}
        self._several: dict[np.dtype, tuple[np.dtype, ...]] = {}
        self._variants: dict = {}

    def __repr__(self) -> str:
        extra = f", dtype={self.dtype}" if self.dtype is not None else ""
        if self.reduce is not None:
            extra += f", reduce={self.reduce!r}, axis={self.axes!r}"
        return f"<jitops.elementwise {self.__qualname__} of {self.nin} inputs{extra}>"

    def with_dtype(self, dtype) -> ElementwiseOp:
        """The same op with its result dtype fixed to ``dtype``."""
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        op = self._variants.get(dtype)
        if op is None:
            op = self._variants[dtype] = ElementwiseOp(
                self.py_func, dtype=dtype, name=self.__name__, reduce=self.reduce,
                axis=self.axes, keepdims=self.keepdims)
        return op

    def __call__(self, *operands: object, broadcast: Broadcast = "numpy", axis: int = -1,
                 out: Any = None, device: Device = None, dtype: Any = None) -> Any:
        if len(operands) != self.nin:
            raise TypeError(f"jitops.{self.__name__} takes {self.nin} operand"
                            f"{'s' if self.nin != 1 else ''}, got {len(operands)}")
        op = self if dtype is None else self.with_dtype(dtype)
        if op.reduce is None and op.nout == 1:
            try:
                return call_user(op, operands, broadcast, axis, out, device)
            except _Several as e:  # (raised while typing, before anything is written)
                op.nout = self.nout = e.n
        return call_several(op, operands, broadcast, axis, out, device)

    def result_dtype(self, common: np.dtype, compute: np.dtype, fname: str) -> np.dtype:
        """The result dtype for inputs promoted to ``common`` (computed in ``compute``).

        Compiles the function for them (Numba's typing is the oracle on every target), so a
        function that cannot run on these dtypes raises TypeError here, before anything is
        written -- unless an earlier process recorded what it returns in the disk cache,
        with the compiled kernel (jitops.cpu.kernels.nary.cached_return).
        """
        key = (common, compute)
        r = self._results.get(key)
        if r is None:
            returned = self._returns(compute, fname)  # also with dtype=: it must compile
            r = self.dtype if self.dtype is not None else user_result(common, returned)
            self._results[key] = r
        return r

    def _returns(self, compute: np.dtype, fname: str) -> np.dtype:
        returned = self._returned.get(compute)
        if returned is not None:
            return returned
        if self.cacheable:
            returned = nary.cached_return(self.key, compute)
        if returned is None:
            ret = self._numba_return(compute, fname)
            if isinstance(ret, types.BaseTuple):
                raise _Several(len(ret))
            returned = self._as_dtype(ret, compute, fname)
        self._returned[compute] = returned
        return returned

    def _numba_return(self, compute: np.dtype, fname: str):
        """The Numba type the function returns for ``compute`` inputs (it compiles): a
        TypeError naming the function and dtype where it cannot."""
        try:
            return nary.return_type(self._compiled_fn, compute, self.nin)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TypeError(f"jitops.{fname}: the function {self.__qualname__} cannot be "
                            f"compiled for {self.nin} input(s) of dtype {compute} "
                            f"(promoted from the operands): {first}") from None

    def _as_dtype(self, ret, compute: np.dtype, fname: str) -> np.dtype:
        try:
            from numba.np.numpy_support import as_dtype

            returned = np.dtype(as_dtype(ret))
            check_dtype(returned, "its return value", fname)
        except Exception:
            raise TypeError(f"jitops.{fname}: the function {self.__qualname__} must return "
                            f"numbers (one, or a tuple of them), but returns {ret} for inputs "
                            f"of dtype {compute}") from None
        return returned

    def returns(self, compute: np.dtype, fname: str) -> tuple[np.dtype, ...]:
        """The dtypes of the values the function returns for ``compute`` inputs, one per
        result (compiles it: a function that cannot run on them is a TypeError here)."""
        got = self._several.get(compute)
        if got is None:
            ret = self._numba_return(compute, fname)
            rets = list(ret) if isinstance(ret, types.BaseTuple) else [ret]
            got = self._several[compute] = tuple(self._as_dtype(r, compute, fname)
                                                 for r in rets)
        return got

    def returned(self, compute: np.dtype) -> np.dtype:
        """The dtype the function returns for ``compute`` inputs (known once
        :meth:`result_dtype` has run for them)."""
        return self._returned[compute]

    def __reduce__(self):
        if self.cacheable and self.reduce is None:  # module-level: by reference
            return (_restore, (self.__module__, self.__qualname__, self.dtype))
        return (ElementwiseOp, (self.py_func,), {"dtype": self.dtype, "reduce": self.reduce,
                                                 "axes": self.axes,
                                                 "keepdims": self.keepdims})

    def __setstate__(self, state):
        if state.get("dtype") is not None:
            self.dtype = np.dtype(state["dtype"])
        self.reduce = state.get("reduce")
        self.axes, self.keepdims = state.get("axes"), state.get("keepdims", False)

    def __dask_tokenize__(self):
        return ("jitops.elementwise", self.key if self.cacheable else id(self), str(self.dtype))


Reduce = Any  # None, a reduction's name, or one entry per result (None: stored)


@overload
def elementwise(fn: Callable[..., Any], *, dtype: Any = None, name: str | None = None,
                reduce: Reduce = None, axis: Any = None,
                keepdims: bool = False) -> ElementwiseOp: ...


@overload
def elementwise(fn: None = None, *, dtype: Any = None, name: str | None = None,
                reduce: Reduce = None, axis: Any = None,
                keepdims: bool = False) -> Callable[[Callable[..., Any]], ElementwiseOp]: ...


def elementwise(fn: Callable[..., Any] | None = None, *, dtype: Any = None,
                name: str | None = None, reduce: Reduce = None, axis: Any = None,
                keepdims: bool = False) -> Any:
    """Make an elementwise op from a scalar function of N inputs: a decorator or a call.

    The function is plain Python on scalars (``math`` functions, conditionals, loops; the
    activations as ``jitops.act.<name>``), compiled by Numba once per input dtype signature,
    when first called. A module-level function is cached on disk like the built-in kernels,
    so a new process loads it instead of compiling; lambdas, closures and functions defined in
    a notebook work too, compiled once per process.

    Parameters
    ----------
    fn : callable
        The scalar function; every parameter is one input.
    dtype : dtype, optional
        Fix the result dtype instead of inferring it.
    name : str, optional
        The op's name in messages (default: the function's).
    reduce : str or tuple, optional
        Reduce the results in the same pass instead of storing them: ``"sum"``, ``"prod"``,
        ``"max"``, ``"min"``, ``"any"``, ``"all"`` or ``"mean"``, for every result, or a
        tuple with one entry per result (None stores that one). NumPy's result dtypes
        (``sum`` of int32 is int64, of float32 float32) and NaN rules (``max`` propagates
        NaN); sums accumulate in float64 (int64, complex128), rounded once, the same bits
        whatever the thread count.
    axis : None, int or tuple of int
        The axes of the broadcast result to reduce (None: all); only with ``reduce``.
    keepdims : bool, default False
        Keep the reduced axes as size 1.

    A function may return a tuple: each value is one result, with its own dtype (and its
    own ``out=`` entry: ``out`` is then a tuple, None where a new array is wanted). Several
    results, and reduced ones, run on host arrays (NumPy; PyTorch and Paddle CPU tensors).

    Returns
    -------
    ElementwiseOp
        Callable as ``op(*operands, broadcast="numpy", axis=-1, out=None, device=None,
        dtype=None)``, with the built-in ops' meaning of each: ``broadcast`` ``"numpy"``,
        ``"pdpd"`` (Paddle's ``axis`` rule, every lower-rank operand laid onto the largest)
        or ``"none"``; ``out`` may be any input; ``device`` ``"cpu"``, ``"cuda"`` or None.
        There is no ``act`` argument: write the activation into the function
        (``jitops.act.relu(...)``).

    Raises
    ------
    TypeError
        ``fn`` is not a function of plain positional inputs; at call time, the wrong number
        of operands, an unsupported dtype, a function Numba cannot compile for the operands'
        dtypes, or ``out`` of the wrong dtype.
    ValueError
        Shapes that do not broadcast, a bad ``broadcast`` or ``axis``, ``out`` of the wrong
        shape or read-only (all before anything is written).
    RuntimeError
        The function raised while running (never a silently unwritten element), or
        ``device="cuda"`` without a usable GPU.

    Examples
    --------
    >>> import numpy as np, jitops
    >>> @jitops.elementwise
    ... def fused(x, w, b):
    ...     return jitops.act.relu(x * w + b)
    >>> X = np.ones((2, 3, 4), np.float32)
    >>> fused(X, np.full(3, -2.0, np.float32), np.ones(3, np.float32), broadcast="pdpd",
    ...       axis=1).sum()
    np.float32(0.0)
    >>> jitops.elementwise(lambda a, b, c: a * b + c)(1.0, 2.0, np.arange(3.0))
    array([2., 3., 4.])
    >>> sq = jitops.elementwise(lambda a, b: (a - b) * (a - b), reduce="sum")
    >>> float(sq(np.arange(4.0), 1.0))
    6.0
    >>> jitops.elementwise(lambda a, b: (a + b, a * b))(np.arange(3), 2)
    (array([2, 3, 4]), array([0, 2, 4]))
    """
    if fn is None:
        return functools.partial(elementwise, dtype=dtype, name=name, reduce=reduce,
                                 axis=axis, keepdims=keepdims)
    return ElementwiseOp(fn, dtype=dtype, name=name, reduce=reduce, axis=axis,
                         keepdims=keepdims)


def reduce(fn: Callable[..., Any], how: Reduce = "sum", *, axis: Any = None,
           keepdims: bool = False, dtype: Any = None,
           name: str | None = None) -> ElementwiseOp:
    """A fused map-reduce: ``fn`` on every element of its broadcast operands, reduced in the
    same pass (``jitops.elementwise(fn, reduce=how, axis=axis, keepdims=keepdims)``).

    Parameters
    ----------
    fn : callable or ElementwiseOp
        The scalar function (it may return several values).
    how : str or tuple, default "sum"
        ``sum``, ``prod``, ``max``, ``min``, ``any``, ``all`` or ``mean``, or one per result
        (None: stored).
    axis : None, int or tuple of int
        The axes of the broadcast result to reduce (None: all).
    keepdims : bool, default False
    dtype : dtype, optional
        The values' dtype before reducing, instead of the function's.
    name : str, optional

    Returns
    -------
    ElementwiseOp
        Called as ``op(*operands, broadcast="numpy", axis=-1, out=None)`` (``axis`` there
        is Paddle's ``pdpd`` start axis, as for every op); a NumPy scalar for a full
        reduction, as NumPy's.

    Raises
    ------
    ValueError
        An unknown reduction, or (when called) a bad reduction axis, shapes that do not
        broadcast, a ``max``/``min`` of nothing.
    TypeError
        A function that cannot be compiled for the operands, or operands that are not host
        arrays.

    Examples
    --------
    >>> import numpy as np, jitops
    >>> a, b = np.arange(5.0), np.ones(5)
    >>> float(jitops.reduce(lambda x, y: (x - y) ** 2)(a, b))
    15.0
    >>> jitops.reduce(lambda x: x, "max", axis=0)(np.array([[1, 5], [3, 2]]))
    array([3, 5])
    """
    return ElementwiseOp(fn, dtype=dtype, name=name, reduce=how, axis=axis,
                         keepdims=keepdims)
