"""Device selection: CPU, or CUDA when asked for or when an operand lives on the GPU.

There is never a silent fallback from CUDA to the CPU: when CUDA is wanted and cannot run,
a RuntimeError says why.
"""

from __future__ import annotations

import re


def is_cuda_array(a) -> bool:
    """A CUDA array: anything with ``__cuda_array_interface__`` (Numba, CuPy, PyTorch), or a
    device array of Numba's CUDA simulator (which lacks the interface)."""
    return hasattr(a, "__cuda_array_interface__") or type(a).__name__ == "FakeCUDAArray"


def parse(device) -> tuple[str, int]:
    """``None``/``"cpu"``/``"cuda"``/``"cuda:N"`` -> (kind, index)."""
    if device is None:
        return "auto", 0
    if not isinstance(device, str):
        raise TypeError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    d = device.strip().lower()
    if d == "cpu":
        return "cpu", 0
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if not m:
        raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return "cuda", int(m.group(1) or 0)


def requested_index(device) -> int | None:
    """The GPU ``device=`` names (``"cuda:N"``), or None when it names none (``None``,
    ``"cuda"``: the operands' GPU, else the first)."""
    if not isinstance(device, str):
        return None
    m = re.fullmatch(r"cuda:(\d+)", device.strip().lower())
    return int(m.group(1)) if m else None


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA GPU is usable, else a sentence saying why not."""
    try:
        from numba import cuda
    except Exception as e:  # pragma: no cover - numba always ships numba.cuda (or numba-cuda)
        return f"numba.cuda cannot be imported ({e}); install jitops[cuda]"
    try:
        if cuda.is_available():
            return None
        from numba.cuda.cudadrv import driver  # noqa: F401

        try:
            cuda.cudadrv.driver.driver.get_device_count()
        except Exception as e:
            return "no usable CUDA driver or device: " + " ".join(str(e).split())
        return "CUDA reports no available GPU"
    except Exception as e:
        return "CUDA is not usable: " + " ".join(str(e).split())


def select(device, operands, out, fname: str) -> str:
    """Where a call runs: ``"cpu"`` or ``"cuda:N"``.

    ``device=None`` follows the operands: CUDA when one of them (or ``out``) is a CUDA array.
    A CUDA request that cannot run raises RuntimeError with the reason; never a CPU fallback.
    """
    kind, index = parse(device)
    wants_cuda = is_cuda_array(out) or any(is_cuda_array(a) for a in operands)
    if kind == "cpu":
        if wants_cuda:
            raise ValueError(f"jitops.{fname}: device='cpu' but an operand is a CUDA array; "
                             "copy it to the host first (no implicit device transfers)")
        return "cpu"
    if kind == "auto" and not wants_cuda:
        return "cpu"
    why = cuda_unavailable_reason()
    if why is not None:
        raise RuntimeError(f"jitops.{fname}: CUDA was requested but cannot run: {why}")
    return f"cuda:{index}"
