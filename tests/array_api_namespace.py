"""NumPy's array namespace (NumPy 2 is an Array API namespace) with jitops' binary functions
in place of NumPy's: what tests/test_array_api_suite.py hands the Array API test suite
(``ARRAY_API_TESTS_MODULE=tests.array_api_namespace``), so that its elementwise and
special-case tests of these functions run jitops."""

import numpy as _np
from numpy import *  # noqa: F403
from numpy import __array_api_version__  # noqa: F401

import jitops as _j

__all__ = [n for n in dir(_np) if not n.startswith("_")]

#: The Array API's name -> jitops' function (NumPy's rules).
FUNCTIONS = {
    "add": _j.add, "subtract": _j.subtract, "multiply": _j.multiply, "divide": _j.divide,
    "floor_divide": _j.floor_divide, "remainder": _j.remainder, "pow": _j.power,
    "atan2": _j.arctan2, "hypot": _j.hypot, "logaddexp": _j.logaddexp,
    "copysign": _j.copysign, "nextafter": _j.nextafter, "maximum": _j.maximum,
    "minimum": _j.minimum, "equal": _j.equal, "not_equal": _j.not_equal, "less": _j.less,
    "less_equal": _j.less_equal, "greater": _j.greater, "greater_equal": _j.greater_equal,
    "bitwise_and": _j.bitwise_and, "bitwise_or": _j.bitwise_or, "bitwise_xor": _j.bitwise_xor,
    "bitwise_left_shift": _j.left_shift, "bitwise_right_shift": _j.right_shift,
    "logical_and": _j.logical_and, "logical_or": _j.logical_or, "logical_xor": _j.logical_xor,
}
globals().update(FUNCTIONS)
