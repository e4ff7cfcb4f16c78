"""CUDA kernel specialisation as a Numba type, as on the CPU (jitops.cpu.kernels.spec).

The CUDA kernels (jitops.cuda.kernels) are a few module-level functions, so numba-cuda's
on-disk cache can find them in a new process. They are specialised per op and dtype through
one argument, a :class:`CudaSpec`, whose Numba type carries ``(function, act, inputs, out,
compute)`` in its name; the overloads below turn it into code at compile time: the loads
(a bool byte reads as 0 or 1 whatever it holds), the conversion to the compute type, the
scalar function (the table of :mod:`jitops.core.scalar`, or a user op's function), the
activation and the store.

A spec is passed to a kernel as an ``int`` subclass of value 0 typed as a pointer, so the
launch marshals it as one null word; only its *type* matters.

Under Numba's CUDA simulator the kernels run as Python, and the stubs below are what runs:
each has a plain-Python body doing what its overload compiles.
"""

from __future__ import annotations

import cmath
import functools
import math

import numba
import numpy as np
from numba import cuda, types
from numba.np.numpy_support import from_dtype

from ..core import reduction as _reduction
from ..core import scalar as _scalar
from ..core.catalog import KEPT
from ..core.dtypes import act_dtype

#: Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set before numba is imported).
SIMULATOR = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))

_BOOL = "bool"


def storage_dtype(dt: np.dtype) -> np.dtype:
    """The dtype a kernel addresses an operand's memory as (bool as its bytes)."""
    return np.dtype(np.uint8) if dt == np.dtype(bool) else dt


def numba_type(name: str):
    return types.boolean if name == _BOOL else from_dtype(np.dtype(name))


#: key -> (scalar function, builtin): built-ins take ``(a, b, T)``, user ops ``(a1, ..., an)``.
_FUNCTIONS: dict[str, tuple[object, bool]] = {}


def register(key: str, fn, builtin: bool) -> None:
    _FUNCTIONS[key] = (fn, builtin)


for _name, _fn in _scalar.OPS.items():
    register("op:" + _name, _fn, True)
register("copy", None, False)  # o = x, bits as they are


class CudaSpecType(types.CPointer):
    """Numba type of a :class:`CudaSpec`: a pointer-sized word whose name says everything."""

    def __init__(self, fn_key: str, act: str | None, inputs: tuple[str, ...], out: str,
                 compute: str, pick: int | None = None, how: str | None = None):
        self.fn_key, self.act, self.inputs, self.out, self.compute = (fn_key, act, inputs, out,
                                                                      compute)
        self.pick, self.how = pick, how
        super().__init__(types.uint8)
        tail = "" if pick is None and how is None else f";{pick};{how}"
        self.name = (f"jitops.CudaSpec({fn_key};{act};{','.join(inputs)};{out};{compute}"
                     f"{tail})")

    @property
    def key(self):  # identity by name, not CPointer's (dtype, addrspace)
        return self.name

    def __reduce__(self):  # the cache index pickles signatures
        return (CudaSpecType, (self.fn_key, self.act, self.inputs, self.out, self.compute,
                               self.pick, self.how))


class CudaSpec(int):
    """What one CUDA kernel instance computes. Interned; ``cacheable`` is False for user
    functions that only exist in this process (lambdas, closures, notebook cells).

    A reduction's spec also has ``pick`` (which value of a function of several results) and
    ``how`` (``sum``, ``prod``, ``max``, ``min``, ``any``, ``all``): ``out`` is then the
    accumulator's dtype, and an ``any``/``all`` value counts as nonzero or not."""

    _interned: dict[tuple, CudaSpec] = {}

    def __new__(cls, fn_key: str, act: str | None, inputs: tuple[np.dtype, ...],
                out: np.dtype, compute: np.dtype, cacheable: bool = True,
                pick: int | None = None, how: str | None = None) -> CudaSpec:
        k = (fn_key, act, tuple(np.dtype(d) for d in inputs), np.dtype(out), np.dtype(compute),
             pick, how)
        self = cls._interned.get(k)
        if self is None:
            self = super().__new__(cls, 0)
            self.fn_key, self.act, self.inputs, self.out, self.compute, self.pick, self.how = k
            self.cacheable = cacheable
            self.numba_type = CudaSpecType(fn_key, act, tuple(d.name for d in k[2]),
                                           k[3].name, k[4].name, pick, how)
            self._py = None
            cls._interned[k] = self
        return self

    def __repr__(self) -> str:
        return (f"CudaSpec({self.fn_key!r}, act={self.act!r}, "
                f"inputs={[d.name for d in self.inputs]}, out={self.out}, "
                f"compute={self.compute})")

    def py_element(self):
        """The element function in plain Python (the simulator's)."""
        if self._py is None:
            self._py = _element_source(self.numba_type, python=True)
        return self._py


# -- what the kernels call (plain Python bodies: the simulator's; overloads: the GPU's) --------

def gather(ins, offs):
    """The storage words of each input at its offset (``offs[0]`` is the output's)."""
    return tuple(a[int(f)] for a, f in zip(ins, offs[1:]))


def load(ins, i):
    """The storage words of each input at index ``i`` (dense operands)."""
    return tuple(a[int(i)] for a in ins)


def element(spec, vals):
    """One output word from the inputs' storage words."""
    return spec.py_element()(*vals)


def identity(spec):
    """The value a reduction's accumulator starts from (``spec.how``, in ``spec.out``)."""
    return np.dtype(spec.out).type(_reduction.identity(spec.how, np.dtype(spec.out)))


def _largest(a, b):
    return a if a != a else b if b != b else a if a >= b else b  # NaN wins, as NumPy's max


def _smallest(a, b):
    return a if a != a else b if b != b else a if a <= b else b


_COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b, "max": _largest,
            "min": _smallest, "any": lambda a, b: a | b, "all": lambda a, b: a & b}


def combine(spec, a, b):
    """Two accumulators of a reduction combined by ``spec.how``."""
    return np.dtype(spec.out).type(_COMBINE[spec.how](a, b))


def magic(divisor: int) -> int:
    """A dimension of a plan whose every linear index is below 2**31, as one unsigned 64-bit
    word: the divisor in the low 32 bits, its magic multiplier in the high ones, so a kernel
    divides by it with a multiply-high, an add and a shift (:func:`divmod_magic`; Granlund and
    Montgomery's method, as PyTorch's ``IntDivider``) instead of a division, which a GPU
    computes in tens of instructions."""
    shift = (divisor - 1).bit_length()  # 2**shift >= divisor
    m = ((1 << 32) * ((1 << shift) - divisor)) // divisor + 1
    return divisor | (m << 32)


def divmod_magic(r: int, packed: int) -> tuple[int, int]:
    """``divmod(r, d)`` for ``0 <= r < 2**31``, ``packed = magic(d)``: what the kernels
    compute, in Python (the simulator runs this; tests check it against ``divmod``)."""
    d, m = packed & 0xFFFFFFFF, packed >> 32
    shift = (d - 1).bit_length()
    q = (((r * m) >> 32) + r) >> shift
    return q, r - q * d


def offsets(shape, ostr, istr, starts, i):
    """Element offsets of out and of each input for linear index ``i`` of the planned space
    (C order over ``shape``: each dimension a ``magic`` word, or an int64), as
    ``(out, in1, ..., inN)``."""
    offs = list(starts)
    r = int(i)
    packed = len(shape) > 0 and isinstance(shape[0], np.uint64)
    for d in range(len(shape) - 1, -1, -1):
        r, k = divmod_magic(r, int(shape[d])) if packed else divmod(r, int(shape[d]))
        offs[0] += k * ostr[d]
        for j, st in enumerate(istr):
            offs[j + 1] += k * st[d]
    return tuple(offs)


def _to_byte_py(v):
    return np.uint8(1 if v else 0)


@functools.cache
def _to_byte_gpu():
    u8 = types.uint8
    return cuda.jit(device=True)(lambda v: u8(1) if v else u8(0))


@functools.cache
def _device_fn(fn):
    return cuda.jit(device=True)(fn)


def _element_source(spec: CudaSpecType, python: bool):
    """The element function of ``spec``: ``vals`` (storage words) -> output word."""
    fn, builtin = _FUNCTIONS[spec.fn_key]
    n = len(spec.inputs)
    args = ", ".join(f"v{k}" for k in range(n))
    # a bool is a byte: read as 0 or 1 whatever it holds (NumPy: nonzero is True), written 0/1
    ns = {"BYTE": _to_byte_py if python else _to_byte_gpu(), "OUT": numba_type(spec.out)}
    words = [f"BYTE(v{k})" if name == _BOOL else f"v{k}" for k, name in enumerate(spec.inputs)]
    if fn is None:  # copy: the word as it is
        body = "v0"
    else:
        T = numba_type(spec.compute)
        ns["T"] = T
        ns["FN"] = fn if python else _device_fn(fn)
        kept = KEPT.get(spec.fn_key[3:], ()) if builtin else ()  # operands taken as loaded
        conv = [w if k < len(kept) and kept[k] else f"T({w})" for k, w in enumerate(words)]
        if builtin:
            body = f"FN({', '.join(conv)}, T)"
            if spec.act is not None:
                A = from_dtype(act_dtype(spec.act, np.dtype(spec.compute)))
                g = _scalar.ACTS[spec.act]
                ns["A"], ns["ACT"] = A, (g if python else _device_fn(g))
                body = f"ACT(A(T({body})), A)"
            if spec.out != _BOOL:  # (a comparison's bool is stored as it is)
                body = f"T({body})"
        else:
            body = f"FN({', '.join(conv)})" + ("" if spec.pick is None else f"[{spec.pick}]")
            if spec.how in ("any", "all"):  # NumPy's truth of a value: nonzero (NaN too)
                body = f"1 if {body} != 0 else 0"
        body = f"{'BYTE' if spec.out == _BOOL else 'OUT'}({body})"
    exec(f"def element({args}):\n    return {body}\n", ns)
    return ns["element"]


def _offsets_source(nd: int, nin: int, small: bool):
    """Straight-line offsets for ``nd`` dims and ``nin`` inputs; where every linear index fits
    in 31 bits, each dimension is a :func:`magic` word and divides by multiplying (64-bit
    division is several times slower than 32-bit on a GPU, and 32-bit several times slower
    than a multiply-high)."""
    fs = range(nin + 1)
    L = ["def offsets(shape, ostr, istr, starts, i):", "    r = I64(i)"]
    L += [f"    f{j} = starts[{j}]" for j in fs]

    def strides(j, d):
        return f"ostr[{d}]" if j == 0 else f"istr[{j - 1}][{d}]"

    for d in range(nd - 1, -1, -1):
        if d:
            L.append(f"    r, k = divmod_magic(r, shape[{d}])" if small else
                     f"    q = r // I64(shape[{d}])\n    k = r - q * I64(shape[{d}])\n    r = q")
        else:
            L.append("    k = r")
        L += [f"    f{j} += k * {strides(j, d)}" for j in fs]
    L.append(f"    return ({', '.join(f'f{j}' for j in fs)},)")
    return "\n".join(L) + "\n"


if not SIMULATOR:
    from llvmlite import ir

    try:  # numba-cuda keeps the CUDA target's registries apart from Numba's
        from numba.cuda import extending as _ext
        from numba.cuda.extending import core_models as _models
    except ImportError:  # pragma: no cover - the built-in numba.cuda shares Numba's
        from numba.core import extending as _ext
        from numba.core import models as _models

    _ext.register_model(CudaSpecType)(_models.PointerModel)

    @_ext.typeof_impl.register(CudaSpec)
    def _typeof_spec(val, c):
        return val.numba_type

    @_ext.intrinsic
    def divmod_magic_gpu(typingctx, r, packed):
        """``divmod`` of an int64 below 2**31 by a :func:`magic` word, in 32-bit arithmetic:
        q = (umulhi(r, m) + r) >> shift, shift = 32 - clz(d - 1)."""
        sig = types.UniTuple(types.int64, 2)(r, packed)

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            a = builder.trunc(args[0], i32)
            d = builder.trunc(args[1], i32)
            m = builder.trunc(builder.lshr(args[1], ir.Constant(i64, 32)), i32)
            fnty = ir.FunctionType(i32, [i32, ir.IntType(1)])
            ctlz = builder.module.globals.get("llvm.ctlz.i32") \
                or ir.Function(builder.module, fnty, "llvm.ctlz.i32")
            lz = builder.call(ctlz, [builder.sub(d, ir.Constant(i32, 1)),
                                     ir.Constant(ir.IntType(1), 0)])
            shift = builder.sub(ir.Constant(i32, 32), lz)
            t = builder.trunc(builder.lshr(builder.mul(builder.zext(a, i64),
                                                       builder.zext(m, i64)),
                                           ir.Constant(i64, 32)), i32)
            q = builder.lshr(builder.add(t, a), shift)
            k = builder.sub(a, builder.mul(q, d))
            return context.make_tuple(builder, signature.return_type,
                                      [builder.zext(q, i64), builder.zext(k, i64)])

        return sig, codegen

    @_ext.overload(_scalar.fma, target="cuda")
    def _ov_fma(a, b, c):
        if isinstance(a, types.Float) and a == b == c:
            return lambda a, b, c: cuda.fma(a, b, c)
        return None

    @_ext.overload(_scalar.ge_signaling, target="cuda")
    def _ov_ge_signaling(a, b):  # a GPU keeps no floating-point flags
        if isinstance(a, types.Float) and a == b:
            return lambda a, b: a >= b
        return None

    @_ext.overload(_scalar.zeros, target="cuda")
    def _ov_zeros(a, b):
        return lambda a, b: a == 0 and b == 0

    @_ext.overload(_scalar.raise_flags, target="cuda")
    def _ov_raise_flags(flags, v):  # nor raises any
        return lambda flags, v: v

    @_ext.overload(_scalar.fmod_c, target="cuda")
    def _ov_fmod(a, b):
        return lambda a, b: math.fmod(a, b)

    @_ext.overload(_scalar.quiet_f, target="cuda")
    def _ov_quiet(a):  # (the GPU keeps no signalling NaNs apart)
        return lambda a: a

    @_ext.overload(_scalar.floor_f, target="cuda")
    def _ov_floor(a):
        if isinstance(a, types.Float):
            floor = cuda.libdevice.floorf if a == types.float32 else cuda.libdevice.floor
            return lambda a: floor(a)
        return None

    @_ext.overload(_scalar.pow_c, target="cuda")
    def _ov_pow(a, b):
        return lambda a, b: math.pow(a, b)

    @_ext.overload(_scalar.pow_f32, target="cuda")
    def _ov_pow_f32(a, b):
        return lambda a, b: math.pow(a, b)

    @_ext.overload(_scalar.cpow_c, target="cuda")
    def _ov_cpow(a, b):
        # no C library on the device: the formula glibc's cpow computes, in the device's own
        # complex exp and log (within a few ulps of NumPy's, not its last bits)
        return lambda a, b: cmath.exp(b * cmath.log(a))

    @_ext.overload(_scalar.sqrt_c, target="cuda")
    def _ov_sqrt(a):
        return lambda a: math.sqrt(a)

    @_ext.overload(_scalar.double, target="cuda")
    def _ov_double(v):
        return lambda v: types.float64(v)

    @_ext.overload(_scalar.single, target="cuda")
    def _ov_single(v):
        return lambda v: types.float32(v)

    @_ext.overload(_scalar.ldexp_c, target="cuda")
    def _ov_ldexp(a, e):
        return lambda a, e: math.ldexp(a, e)

    for _helper in _scalar.HELPERS:
        _ext.overload(_helper, target="cuda")(_scalar.returning(_helper))

    @_ext.overload(element, target="cuda")
    def _ov_element(spec, vals):
        if not isinstance(spec, CudaSpecType):
            return None
        elem = cuda.jit(device=True)(_element_source(spec, python=False))
        n = len(spec.inputs)
        call = ", ".join(f"vals[{k}]" for k in range(n))
        ns = {"elem": elem}
        exec(f"def impl(spec, vals):\n    return elem({call})\n", ns)
        return ns["impl"]

    @_ext.overload(identity, target="cuda")
    def _ov_identity(spec):
        if not isinstance(spec, CudaSpecType) or spec.how is None:
            return None
        A, c = numba_type(spec.out), _reduction.identity(spec.how, np.dtype(spec.out))
        c = float(c) if isinstance(c, float) else int(c)
        return lambda spec: A(c)

    #: _COMBINE's functions as device functions (the same bodies the simulator runs; an
    #: integer's ``a != a`` folds away)
    _combine_device = {how: cuda.jit(device=True)(f) for how, f in _COMBINE.items()}

    @_ext.overload(combine, target="cuda")
    def _ov_combine(spec, a, b):
        if not isinstance(spec, CudaSpecType) or spec.how is None:
            return None
        A, f = numba_type(spec.out), _combine_device[spec.how]
        return lambda spec, a, b: A(f(a, b))

    def _words(args: str, n: int, word: str, **names):
        """``impl(args)`` returning the tuple of ``word`` for k < n (k1 = k + 1)."""
        ns = dict(names)
        words = "".join(word.format(k=k, k1=k + 1) + ", " for k in range(n))
        exec(f"def impl({args}):\n    return ({words})\n", ns)
        return ns["impl"]

    @_ext.overload(gather, target="cuda")
    def _ov_gather(ins, offs):
        return _words("ins, offs", len(ins), "ins[{k}][U64(offs[{k1}])]", U64=types.uint64)

    @_ext.overload(load, target="cuda")
    def _ov_load(ins, i):
        return _words("ins, i", len(ins), "ins[{k}][i]")

    @_ext.overload(offsets, target="cuda")
    def _ov_offsets(shape, ostr, istr, starts, i):
        small = shape.dtype == types.uint64
        ns = {"I64": types.int64, "divmod_magic": divmod_magic_gpu}
        exec(_offsets_source(len(shape), len(istr), small), ns)
        return ns["offsets"]


__all__ = ["CudaSpec", "CudaSpecType", "combine", "divmod_magic", "element", "gather",
           "identity", "load", "magic", "offsets", "register", "storage_dtype", "SIMULATOR"]
