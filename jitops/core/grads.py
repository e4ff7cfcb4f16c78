"""The broadcast ops' gradients as scalar rules: ``(x, y, dout) -> (dx, dy)`` per element.

One row per op and tie rule, plain Python on scalars (compiled per dtype by each backend, as
the scalar table jitops.core.scalar is). Each is Paddle 3.3.1's CPU functor
(``phi/kernels/funcs/elementwise_functor.h``), checked against Paddle's autograd, or PyTorch's
``derivatives.yaml`` formula where the two differ:

============  ================================  =========================================
op            Paddle 3.3.1                      PyTorch
============  ================================  =========================================
max, min      the winner gets dout, a tie       the same where neither is NaN; a NaN
              halves it; a NaN gives 0 to both  gives dout to both
fmax, fmin    x gets dout where it wins or      the same
              ties, or y is NaN; else y
div           dx = dout / y, dy = -dout*out/y   the same rule (out = x / y)
pow           dx = dout*y*x**(y-1),             the same rule
              dy = dout*log(x)*x**y
============  ================================  =========================================

The summing over broadcast axes is the reduction planner's (jitops.core.reduction), not
these rules'. Integer operands have no gradient here (jitops refuses them).
"""

from __future__ import annotations

import math


def add_grad(x, y, d):
    return d, d


def sub_grad(x, y, d):
    return d, -d


def mul_grad(x, y, d):
    return d * y, d * x


def div_grad(x, y, d):
    out = x / y
    return d / y, -d * out / y


def max_grad(x, y, d):
    half = d * 0.5
    gx = d if x > y else (half if x == y else 0.0)
    gy = d if x < y else (half if x == y else 0.0)
    return gx, gy


def min_grad(x, y, d):
    half = d * 0.5
    gx = d if x < y else (half if x == y else 0.0)
    gy = d if x > y else (half if x == y else 0.0)
    return gx, gy


def max_grad_torch(x, y, d):
    half = d * 0.5
    gx = 0.0 if x < y else (half if x == y else d)
    gy = 0.0 if x > y else (half if x == y else d)
    return gx, gy


def min_grad_torch(x, y, d):
    half = d * 0.5
    gx = 0.0 if x > y else (half if x == y else d)
    gy = 0.0 if x < y else (half if x == y else d)
    return gx, gy


def fmax_grad(x, y, d):
    to_x = x >= y or y != y
    return (d if to_x else 0.0), (0.0 if to_x else d)


def fmin_grad(x, y, d):
    to_x = x <= y or y != y
    return (d if to_x else 0.0), (0.0 if to_x else d)


def pow_grad(x, y, d):
    return d * y * x ** (y - 1), d * math.log(x) * x ** y


def identity(x):
    """sum_to's map: its one input as it is."""
    return x


#: (op, ties) -> rule. ``ties`` matters only to max and min.
RULES = {
    "add": add_grad, "sub": sub_grad, "mul": mul_grad, "div": div_grad,
    "max": max_grad, "min": min_grad, "fmax": fmax_grad, "fmin": fmin_grad, "pow": pow_grad,
    "max:torch": max_grad_torch, "min:torch": min_grad_torch, "sum_to": identity,
}

#: The ops with a ``_grad`` function, in the order the docs list them.
OPS = ("add", "sub", "mul", "div", "max", "min", "fmax", "fmin", "pow")

#: Ties rules: who gets dout where max/min's operands are equal or NaN.
TIES = ("paddle", "torch")


def rule_name(op: str, ties: str) -> str:
    """The :data:`RULES` key of ``op``'s gradient under ``ties``."""
    return f"{op}:torch" if ties == "torch" and op in ("max", "min") else op
