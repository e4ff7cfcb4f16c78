"""Other frameworks' host tensors as operands: read in place, and answered in kind.

One adapter per framework says whether an object is its tensor, how to read it as an ndarray
without copying, and how to hand a result back as its tensor, sharing the result's memory:

==========  ==========================  ==================================================
framework   read (no copy)              result
==========  ==========================  ==================================================
PyTorch     ``Tensor.numpy()``          ``torch.from_numpy``
Paddle      ``numpy.from_dlpack``       ``paddle.from_dlpack``
OpenVINO    ``Tensor.data``             ``openvino.Tensor(result, shared_memory=True)``
DLPack      ``numpy.from_dlpack``       a NumPy array (JAX, array-api-strict, ...)
==========  ==========================  ==================================================

A call whose operands include such tensors returns the kind of the first of them (``out``
first: a tensor ``out`` is written in place and returned). A 0-d result stays a 0-d tensor.
bfloat16 tensors (PyTorch, Paddle) are read as their 16-bit words viewed as ml_dtypes'
bfloat16 -- computed as values, never as integers -- and answered the same way. Refused with a
TypeError naming why, never copied or reinterpreted: a tensor that records gradients (jitops
records no autograd graph), a dtype NumPy and ml_dtypes have no twin for here (float8, int4 --
whose raw bits some frameworks hand over as integers; OpenVINO's bf16, whose ``.data`` shows
as float16), a result dtype the framework has no tensor of (Paddle has no uint16), a device
other than the CPU (CUDA arrays go to the CUDA backend before this module is asked).

No framework is imported here: a tensor exists only once its library is.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import is_bfloat16
from .pipeline import operand_names
from .protocols import library

_ND = np.ndarray


def _ml_bfloat16(name: str, fname: str) -> np.dtype:
    """ml_dtypes' bfloat16, the NumPy dtype a framework's bfloat16 tensor is read as."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(f"jitops.{fname}: {name} is a bfloat16 tensor; jitops reads it as "
                        f"ml_dtypes' bfloat16 dtype: pip install ml_dtypes") from None
    return np.dtype(ml_dtypes.bfloat16)


def _named(v, name: str) -> str:
    return f"{name} is a {library(type(v))} {type(v).__qualname__}"


class _Torch:
    @staticmethod
    def owns(v) -> bool:
        t = getattr(sys.modules.get("torch"), "Tensor", None)  # a stand-in module may have none
        return isinstance(t, type) and isinstance(v, t)

    @staticmethod
    def read(v, name: str, fname: str) -> np.ndarray:
        if v.device.type != "cpu":
            raise TypeError(f"jitops.{fname}: {name} is a torch.Tensor on device "
                            f"'{v.device}'; jitops runs on the CPU and on CUDA GPUs")
        if v.requires_grad:
            raise TypeError(f"jitops.{fname}: {name} is a torch.Tensor that requires grad, and "
                            f"jitops records no autograd graph; pass {name}.detach()")
        torch = sys.modules["torch"]
        try:
            if v.dtype == torch.bfloat16:  # its 16-bit words, as ml_dtypes' bfloat16
                return v.view(torch.int16).numpy().view(_ml_bfloat16(name, fname))
            return v.numpy()
        except (TypeError, RuntimeError) as e:  # float8, conjugate or negative bit, ...
            raise TypeError(f"jitops.{fname}: {name} is a torch.Tensor of dtype {v.dtype} that "
                            f"NumPy cannot hold: {e}") from None

    @staticmethod
    def wrap(result: np.ndarray, fname: str):
        torch = sys.modules["torch"]
        if is_bfloat16(result.dtype):
            return torch.from_numpy(result.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(result)


#: NumPy dtypes Paddle has tensors of (it reads a uint16 DLPack tensor as bfloat16).
_PADDLE_DTYPES = frozenset(np.dtype(d) for d in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
    "complex64", "complex128"))


class _Paddle:
    @staticmethod
    def owns(v) -> bool:
        t = type(v)
        return library(t) == "paddle" and hasattr(t, "__dlpack__")

    @staticmethod
    def read(v, name: str, fname: str) -> np.ndarray:
        dt = str(v.dtype).rsplit(".", 1)[-1]
        if not v.place.is_cpu_place():
            raise TypeError(f"jitops.{fname}: {name} is a paddle.Tensor on {v.place}; jitops "
                            f"runs Paddle's CPU tensors (a GPU tensor: pass it through "
                            f"DLPack to CuPy or PyTorch for the CUDA backend)")
        if not v.stop_gradient:
            raise TypeError(f"jitops.{fname}: {name} is a paddle.Tensor that records gradients "
                            f"(stop_gradient=False), and jitops records no autograd graph; "
                            f"pass {name}.detach()")
        paddle = sys.modules["paddle"]
        try:
            if dt == "bfloat16":  # its 16-bit words (paddle.view), as ml_dtypes' bfloat16
                return np.from_dlpack(paddle.view(v, paddle.int16)).view(
                    _ml_bfloat16(name, fname))
            return np.from_dlpack(v)
        except (TypeError, RuntimeError, BufferError) as e:  # float8: no NumPy twin
            raise TypeError(f"jitops.{fname}: {name} is a paddle.Tensor of dtype {dt}, which "
                            f"NumPy has no dtype for ({e}); cast it first "
                            f"({name}.astype('float32')) and back after") from None

    @staticmethod
    def wrap(result: np.ndarray, fname: str):
        paddle = sys.modules["paddle"]
        if is_bfloat16(result.dtype):  # Paddle reads a uint16 DLPack tensor as bits, not values
            return paddle.view(paddle.from_dlpack(result.view(np.int16)), paddle.bfloat16)
        if result.dtype not in _PADDLE_DTYPES:
            raise TypeError(f"jitops.{fname}: the result dtype {result.dtype} has no Paddle "
                            f"tensor type; cast an operand first")
        return paddle.from_dlpack(result)


class _OpenVINO:
    #: element types whose ``.data`` is not their values (bf16 shows as float16, f8 and the
    #: 4-bit types as integers)
    _UNREADABLE = ("bf16", "f8", "u4", "i4", "nf4", "u1", "u2", "u3", "u6", "f4")

    @staticmethod
    def owns(v) -> bool:
        t = type(v)
        return library(t) == "openvino" and t.__name__ == "Tensor"

    @classmethod
    def read(cls, v, name: str, fname: str) -> np.ndarray:
        et = v.element_type.get_type_name()
        if et.startswith(cls._UNREADABLE) or et in ("dynamic", "undefined", "string"):
            raise TypeError(f"jitops.{fname}: {name} is an openvino.Tensor of element type "
                            f"{et}, whose .data is not its values to NumPy; convert it first")
        return v.data

    @staticmethod
    def wrap(result: np.ndarray, fname: str):
        # OpenVINO shares only C-contiguous memory: a result in another order is laid out anew
        return sys.modules["openvino"].Tensor(np.ascontiguousarray(result), shared_memory=True)


class _DLPack:
    """Any other host object offering ``__dlpack__`` (JAX, array-api-strict): read through
    DLPack; the result is a NumPy array. (One that opts out of ufuncs never gets here:
    jitops.core.protocols.overrides refuses it first.)"""

    @staticmethod
    def owns(v) -> bool:
        t = type(v)
        return hasattr(t, "__dlpack__") and not isinstance(v, _ND | np.generic)

    @staticmethod
    def read(v, name: str, fname: str) -> np.ndarray:
        try:
            return np.from_dlpack(v)
        except (TypeError, RuntimeError, BufferError, ValueError) as e:
            raise TypeError(f"jitops.{fname}: {_named(v, name)} that NumPy cannot read through "
                            f"DLPack ({e})") from None

    wrap = None


ADAPTERS = (_Torch, _Paddle, _OpenVINO, _DLPack)


def adapter_of(v):
    """The adapter of ``v``'s framework, or None (ndarrays, scalars and lists have none)."""
    t = type(v)
    if t is _ND or t in (int, float, complex, bool, list, tuple) or v is None:
        return None
    for a in ADAPTERS:
        if a.owns(v):
            return a
    return None


@dataclass
class HostCall:
    """A call's operands and ``out`` with every framework tensor read in place, and what
    the result is handed back as (``wrap``: None for a NumPy result)."""

    operands: tuple
    out: Any
    wrap: Any


def refuse_device_bits(operands: tuple, out, fname: str) -> None:
    """GPU tensors whose CUDA array interface misdescribes them are refused (TypeError) before
    the CUDA backend reads them: a Paddle bfloat16 tensor (its interface calls its words
    float16, typestr ``<f2``), and a PyTorch tensor with its conjugate or negative bit set (its
    interface describes the memory, not the lazily conjugated or negated values)."""
    for v in (*operands, out):
        if _Paddle.owns(v) and str(v.dtype).endswith("bfloat16") \
                and not v.place.is_cpu_place():
            raise TypeError(f"jitops.{fname}: a paddle.Tensor of dtype bfloat16 on {v.place}: "
                            f"Paddle's CUDA array interface calls its words float16; jitops "
                            f"computes bfloat16 on the CPU only (cast it to float32 on the GPU, "
                            f"or move it to the CPU)")
        if _Torch.owns(v) and v.is_cuda and (v.is_conj() or v.is_neg()):
            bit = "conjugate" if v.is_conj() else "negative"
            raise TypeError(f"jitops.{fname}: a torch.Tensor on {v.device} with its {bit} bit "
                            f"set: its CUDA array interface describes the memory without it, "
                            f"so jitops would compute on the values before the "
                            f"{'conjugation' if bit == 'conjugate' else 'negation'}; pass "
                            f"{'.resolve_conj()' if bit == 'conjugate' else '.resolve_neg()'}")


def unwrap(operands: tuple, out, fname: str) -> HostCall | None:
    """The call on host arrays, or None when no operand (nor ``out``) is a framework's."""
    kinds = [adapter_of(v) for v in operands]
    out_kind = adapter_of(out)
    if out_kind is None and not any(kinds):
        return None
    host = tuple(v if k is None else k.read(v, n, fname)
                 for v, k, n in zip(operands, kinds, operand_names(len(operands))))
    if out_kind is not None:
        return HostCall(host, out_kind.read(out, "out", fname), lambda _: out)
    if out is not None:  # NumPy returns an ndarray ``out`` itself
        return HostCall(host, out, None)
    first = next(k for k in kinds if k is not None)
    if first.wrap is None:
        return HostCall(host, None, None)
    return HostCall(host, None, lambda r: first.wrap(r, fname))
