"""The public API's types: what a type checker and an editor see of the ops.

The ops are made by factories (:mod:`jitops.ops`), so their call signatures are declared here
as protocols. Operands are typed ``object``: the ops take any array-like, CUDA array, Dask
array, labelled object or framework tensor and check it at run time; what they return depends
on those operands (an ndarray, a NumPy scalar, a tensor, a Series...), hence ``Any``.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

#: The three broadcasting conventions (also accepted in upper case, OpenVINO's spelling).
Broadcast = Literal["numpy", "pdpd", "none"]
#: The activations ``act=`` fuses (:data:`jitops.ACTIVATIONS`).
Activation = Literal["relu", "relu6", "leaky_relu", "elu", "gelu", "silu", "sigmoid", "tanh",
                     "softplus"]
#: Where an op runs: None (the operands' device), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
Device = str | None


class BinaryOp(Protocol):
    """``jitops.add``, ``subtract``, ``multiply``, ``divide``, ``maximum``, ``minimum``,
    ``fmax``, ``fmin``, and NumPy's binary family (``floor_divide`` ... ``greater_equal``)."""

    __name__: str

    def __call__(self, x: object, y: object, *, broadcast: Broadcast = "numpy",
                 axis: int = -1, act: Activation | None = None, out: Any = None,
                 device: Device = None) -> Any: ...


class PaddleOp(Protocol):
    """``jitops.elementwise_add`` ... ``elementwise_fmin``: Paddle's signature."""

    __name__: str

    def __call__(self, x: object, y: object, axis: int = -1, act: Activation | None = None,
                 name: str | None = None, *, broadcast: Broadcast = "pdpd", out: Any = None,
                 device: Device = None) -> Any: ...
