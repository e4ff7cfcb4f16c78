"""jitops: JIT-compiled elementwise binary ops with NumPy, Paddle (pdpd) and exact broadcasting.

>>> import numpy as np, jitops
>>> jitops.subtract(np.ones((2, 3, 4, 5)), np.ones((3, 4)), broadcast="pdpd", axis=1).shape
(2, 3, 4, 5)
"""

from __future__ import annotations

from .cpu.threads import parallel as _parallel

_parallel.configure()  # before anything can launch a parallel kernel

from . import act, openvino, scalar  # noqa: E402  (openvino: the opset; imports no openvino)
from .core.pipeline import ScalarOverflowError  # noqa: E402
from .core.plan import result_shape  # noqa: E402
from .core.scalar import ACT_NAMES as ACTIVATIONS  # noqa: E402
from .cpu.threads.parallel import (  # noqa: E402
    get_num_threads,
    set_num_threads,
    threading_layer,
    threads,
)
from .divmod_op import divmod  # noqa: E402
from .fusion import ElementwiseOp, elementwise, reduce  # noqa: E402
from .ops import (  # noqa: E402
    add,
    arctan2,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    copysign,
    divide,
    elementwise_add,
    elementwise_div,
    elementwise_floordiv,
    elementwise_fmax,
    elementwise_fmin,
    elementwise_max,
    elementwise_min,
    elementwise_mod,
    elementwise_mul,
    elementwise_pow,
    elementwise_sub,
    equal,
    float_power,
    floor_divide,
    fmax,
    fmin,
    fmod,
    gcd,
    greater,
    greater_equal,
    heaviside,
    hypot,
    lcm,
    ldexp,
    left_shift,
    less,
    less_equal,
    logaddexp,
    logaddexp2,
    logical_and,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mod,
    multiply,
    nextafter,
    not_equal,
    power,
    remainder,
    right_shift,
    subtract,
)
from .reductions import (  # noqa: E402
    elementwise_add_grad,
    elementwise_div_grad,
    elementwise_fmax_grad,
    elementwise_fmin_grad,
    elementwise_max_grad,
    elementwise_min_grad,
    elementwise_mul_grad,
    elementwise_pow_grad,
    elementwise_sub_grad,
    sum_to,
)

__version__ = "0.1.0"

__all__ = [
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin",
    "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
    "elementwise_max", "elementwise_min", "elementwise_fmax", "elementwise_fmin",
    "elementwise_floordiv", "elementwise_mod", "elementwise_pow",
    "floor_divide", "remainder", "mod", "divmod", "fmod", "power", "float_power", "copysign",
    "nextafter", "heaviside", "arctan2", "hypot", "logaddexp", "logaddexp2", "ldexp", "gcd", "lcm",
    "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
    "logical_and", "logical_or", "logical_xor",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "sum_to", "elementwise_add_grad", "elementwise_sub_grad", "elementwise_mul_grad",
    "elementwise_div_grad", "elementwise_max_grad", "elementwise_min_grad",
    "elementwise_fmax_grad", "elementwise_fmin_grad", "elementwise_pow_grad",
    "elementwise", "reduce", "ElementwiseOp", "act", "scalar", "openvino",
    "result_shape", "threading_layer", "get_num_threads", "set_num_threads", "threads",
    "ACTIVATIONS", "ScalarOverflowError", "__version__",
]

del annotations  # the __future__ import's binding: not part of the API


def __dir__() -> list[str]:
    """The public API (what completion offers); the subpackages stay importable."""
    return sorted(__all__)
