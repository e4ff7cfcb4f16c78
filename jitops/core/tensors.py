"""Other frameworks' host tensors as operands: read in place, and answered in kind.

A PyTorch CPU tensor is read through ``Tensor.numpy()`` (its memory, no copy), and a call
with one among its operands returns a tensor sharing the result's memory
(``torch.from_numpy``), as NumPy's ufuncs do through the tensor's ``__array_wrap__`` --
except that a bool result stays ``torch.bool`` (PyTorch's ``__array_wrap__`` still turns it
into ``uint8``, from before PyTorch had bool tensors). A tensor as ``out`` is written in place
and returned. A 0-d result stays a 0-d tensor. What a NumPy array cannot stand for is refused
(TypeError) rather than copied or reinterpreted: a tensor that requires grad (jitops records
no autograd graph), a dtype NumPy has no twin for (``torch.bfloat16``), a tensor on another
device than the CPU or a CUDA GPU (CUDA tensors go to the CUDA backend).

PyTorch is never imported here: a tensor exists only once its library is.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np


def _torch_tensor_type() -> type | None:
    """``torch.Tensor`` once PyTorch is imported (a stand-in module may have none)."""
    t = getattr(sys.modules.get("torch"), "Tensor", None)
    return t if isinstance(t, type) else None


def is_torch_tensor(v: object) -> bool:
    t = _torch_tensor_type()
    return t is not None and isinstance(v, t)


def torch_host_view(v, name: str, fname: str) -> np.ndarray:
    """A CPU tensor's memory as an ndarray (no copy), or a TypeError saying why not."""
    if v.device.type != "cpu":
        raise TypeError(f"jitops.{fname}: {name} is a torch.Tensor on device "
                        f"'{v.device}'; jitops runs on the CPU and on CUDA GPUs")
    if v.requires_grad:
        raise TypeError(f"jitops.{fname}: {name} is a torch.Tensor that requires grad, and "
                        f"jitops records no autograd graph; pass {name}.detach()")
    try:
        return v.numpy()
    except (TypeError, RuntimeError) as e:  # bfloat16, conjugate or negative bit, ...
        raise TypeError(f"jitops.{fname}: {name} is a torch.Tensor of dtype {v.dtype} that "
                        f"NumPy cannot hold: {e}") from None


@dataclass
class HostCall:
    """A call's operands and ``out`` with every framework tensor read in place, and what
    the result is handed back as (``wrap``: None for a NumPy result)."""

    operands: tuple
    out: Any
    wrap: Any


def unwrap(operands: tuple, out, fname: str) -> HostCall | None:
    """The call on host tensors, or None when no operand (nor ``out``) is one."""
    tensor = _torch_tensor_type()
    if tensor is None:
        return None
    if not (isinstance(out, tensor) or any(isinstance(v, tensor) for v in operands)):
        return None
    names = ("x", "y") if len(operands) == 2 else [f"operand {i}" for i in range(len(operands))]
    ops = tuple(torch_host_view(v, n, fname) if isinstance(v, tensor) else v
                for v, n in zip(operands, names))
    if isinstance(out, tensor):
        return HostCall(ops, torch_host_view(out, "out", fname), lambda _: out)
    if out is not None:  # NumPy returns an ndarray ``out`` itself
        return HostCall(ops, out, None)
    return HostCall(ops, None, sys.modules["torch"].from_numpy)
