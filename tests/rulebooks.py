"""One op, three rule books: the cases where NumPy, Paddle, the OpenVINO specification and
OpenVINO's CPU plugin disagree, each run on the reference itself and on jitops' function of
that reference's name. ``python -m tests.rulebooks`` prints the page ``docs/rulebooks.md``;
tests/test_rulebooks.py checks that each jitops function gives its reference's answer, that
the installed references still answer what the page says, and that the page is this output.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np

import jitops
import jitops.openvino as jov

INT_MIN = -2**31


@dataclass(frozen=True)
class Case:
    """``x OP y`` of one dtype: NumPy's ufunc, Paddle's legacy op (None: Paddle has none, or
    the case kills Paddle's process: ``paddle_dies``), OpenVINO's op and its attributes."""

    label: str
    dtype: str
    x: object
    y: object
    numpy: str
    paddle: str | None
    openvino: str
    paddle_dies: bool = False
    #: where jitops' Paddle-named function keeps IEEE's answer instead of Paddle's: why
    jitops_keeps: str = ""
    #: where Paddle's answer depends on the CPU it runs on: each answer seen (the page shows
    #: them all, the tests take any of them)
    paddle_by_cpu: tuple = ()


CASES = (
    Case("integer floor division", "int32", -5, 2, "floor_divide", "elementwise_floordiv",
         "Divide"),
    Case("integer floor division, 64-bit", "int64", 2**40 + 1, 3, "floor_divide",
         "elementwise_floordiv", "Divide"),
    Case("integer division by zero", "int32", 1, 0, "floor_divide", "elementwise_floordiv",
         "Divide"),
    Case("minimum // -1", "int32", INT_MIN, -1, "floor_divide", "elementwise_floordiv",
         "Divide", paddle_dies=True),
    Case("remainder of a multiple, divisor > 0", "float32", -6.0, 3.0, "remainder",
         "elementwise_mod", "FloorMod"),
    Case("remainder of a multiple, divisor < 0", "float32", 6.0, -3.0, "remainder",
         "elementwise_mod", "FloorMod"),
    Case("integer remainder by zero", "int32", 1, 0, "remainder", "elementwise_mod",
         "FloorMod"),
    Case("dividend-signed modulo, 64-bit", "int64", 2**40 + 1, 3, "fmod", None, "Mod"),
    Case("dividend-signed modulo of a multiple", "float32", -6.0, 3.0, "fmod", None, "Mod"),
    Case("integer power, negative exponent", "int32", 2, -1, "power", "elementwise_pow",
         "Power"),
    Case("integer power of zero, negative exponent", "int32", 0, -1, "power",
         "elementwise_pow", "Power"),
    Case("integer power beyond the dtype", "int32", 3, 40, "power", "elementwise_pow", "Power"),
    Case("maximum of +0 and -0", "float32", 0.0, -0.0, "maximum", "elementwise_max",
         "Maximum"),
    Case("maximum, NaN first", "float32", math.nan, 1.0, "maximum", "elementwise_max",
         "Maximum"),
    Case("maximum, NaN second", "float32", 1.0, math.nan, "maximum", "elementwise_max",
         "Maximum"),
    Case("equality of neighbouring int32s", "int32", 2**31 - 2, 2**31 - 1, "equal", None,
         "Equal"),
    Case("division by a subnormal", "float32", 0.0, 1e-45, "divide", "elementwise_div",
         "Divide", jitops_keeps="Paddle's CPU division reads a subnormal as zero on some CPUs",
         paddle_by_cpu=("nan", "+0.0")),  # nan on an AMD EPYC, +0.0 on an Intel Xeon
)

#: OpenVINO's Python names of the ops (openvino.opset13)
_OV_PY = {"Divide": "divide", "FloorMod": "floor_mod", "Mod": "mod", "Power": "power",
          "Maximum": "maximum", "Equal": "equal"}


def _arrays(c: Case):
    return np.array([c.x], c.dtype), np.array([c.y], c.dtype)


def show(v) -> str:
    """A value as the page shows it: signed zeros and NaN spelled out, an error by its class,
    a NumPy warning after the value."""
    if isinstance(v, BaseException):
        return type(v).__name__
    if isinstance(v, tuple):  # (value, warnings)
        value, warned = v
        return show(value) + "".join(f" (warns: {w})" for w in warned)
    a = np.asarray(v).reshape(-1)[0]
    if a.dtype.kind == "f":
        if np.isnan(a):
            return "nan"
        return ("-" if np.signbit(a) else "+") + repr(float(abs(a))) if a == 0 else \
            repr(float(a))
    if a.dtype == bool:
        return str(bool(a))
    return str(int(a))


def _run(fn):
    """``fn()``'s value and the RuntimeWarnings it gave, or the exception it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = fn()
        except Exception as e:  # noqa: BLE001 - the refusal is the answer
            return e
    words = sorted({str(w.message).split(" encountered")[0] for w in caught
                    if issubclass(w.category, RuntimeWarning)})
    return value, tuple(words)


def numpy_answer(c: Case):
    x, y = _arrays(c)
    return _run(lambda: getattr(np, c.numpy)(x, y))


def jitops_numpy(c: Case):
    x, y = _arrays(c)
    return _run(lambda: getattr(jitops, c.numpy)(x, y))


def paddle_answer(c: Case):
    if c.paddle is None or c.paddle_dies:
        return None
    import paddle

    x, y = _arrays(c)
    op = getattr(paddle._legacy_C_ops, c.paddle)
    return _run(lambda: op(paddle.to_tensor(x), paddle.to_tensor(y), "axis", -1).numpy())


def jitops_paddle(c: Case):
    if c.paddle is None:
        return None
    x, y = _arrays(c)
    return _run(lambda: getattr(jitops, c.paddle)(x, y))


def _exact(fn, x, y, dt):
    """An integer oracle in Python's exact integers, wrapped to ``dt``."""
    bits = 8 * np.dtype(dt).itemsize
    out = []
    for a, b in zip(x.tolist(), y.tolist()):
        v = fn(int(a), int(b))
        if np.dtype(dt).kind == "i" and isinstance(v, int):
            v = (v + 2**(bits - 1)) % 2**bits - 2**(bits - 1)
        out.append(v)
    return np.array(out, dtype=object)


def _power_int(a, b, bits, signed=True):
    """The reference: C's pow in double (of the exponent as a double too), truncated; NaN,
    infinite or beyond: the minimum. Unsigned: exact and wrapping (the reference's cast is
    undefined there)."""
    if not signed:
        return pow(a, b, 2**bits)
    top = 2**(bits - 1)
    if a == -1:
        v = -1 if float(b) % 2 else 1
    elif b < 0:
        v = math.inf if a == 0 else (1 if a == 1 else 0)
    elif abs(a) >= 2 and b > 130:  # (far beyond every dtype; not computed exactly)
        v = math.inf
    else:
        v = a**b
    if v == math.inf or not -top <= v < top:
        return -top
    return v


def spec_oracle(name, x, y):
    """OpenVINO's specification's answer on arrays, written from its text (its reference
    implementation where the text is silent), independently of jitops; None where it is only
    within an ulp (Power on floats). Integer divisors are nonzero."""
    dt = x.dtype
    with np.errstate(all="ignore"):
        if name in ("Add", "Subtract", "Multiply"):
            return getattr(np, name.lower())(x, y)
        if name in ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
                    "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LogicalAnd", "LogicalOr",
                    "LogicalXor"):
            snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in name)[1:]
            return getattr(np, snake)(x, y)
        if name == "Maximum":
            return np.where(x < y, y, x)
        if name == "Minimum":
            return np.where(y < x, y, x)
        if name == "SquaredDifference":
            d = x - y
            return d * d
        if dt.kind in "iu":
            if name == "Divide":
                return _exact(lambda a, b: a // b, x, y, dt).astype(dt)
            if name == "FloorMod":
                return _exact(lambda a, b: a % b, x, y, dt).astype(dt)
            if name == "Mod":
                return _exact(lambda a, b: abs(a) % abs(b) * (1 if a >= 0 else -1),
                              x, y, dt).astype(dt)
            if name == "Power":
                return _exact(lambda a, b: _power_int(a, b, 8 * dt.itemsize, dt.kind == "i"),
                              x, y, dt).astype(dt)
        if name == "Divide":
            return x / y
        if name == "FloorMod":  # in double; a half through float, as ov::float16 converts
            w = np.float64
            r = x.astype(w) - y.astype(w) * np.floor(x.astype(w) / y.astype(w))
            return (r.astype(np.float32) if dt == np.float16 else r).astype(dt)
        if name == "Mod":
            if dt == np.float16:  # computed in float32, rounded once
                xf, yf = x.astype(np.float32), y.astype(np.float32)
                return (xf - np.trunc(xf / yf) * yf).astype(dt)
            return x - np.trunc(x / y) * y
        if name == "Power":
            return None
    raise KeyError(name)


def spec_answer(c: Case):
    """The OpenVINO specification's answer for a case: :func:`spec_oracle`, and the error its
    reference throws for an integer zero divisor."""
    x, y = _arrays(c)
    if x.dtype.kind in "iu" and y[0] == 0 and c.openvino in ("Divide", "FloorMod", "Mod"):
        return ZeroDivisionError()
    return spec_oracle(c.openvino, x, y)


def jitops_openvino(c: Case):
    x, y = _arrays(c)
    return _run(lambda: getattr(jov, c.openvino)(x, y))


def plugin_answer(c: Case):
    import openvino as ov
    from openvino import opset13 as ops

    x, y = _arrays(c)
    px = ops.parameter([1], ov.Type(x.dtype))
    py = ops.parameter([1], ov.Type(y.dtype))
    model = ov.Model([getattr(ops, _OV_PY[c.openvino])(px, py)], [px, py])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return _run(lambda: compiled([x, y])[0])


def render() -> str:
    """The page: one row per case, each reference's answer beside jitops' function of its
    name (equal by tests/test_rulebooks.py, so shown once)."""
    lines = [
        "# One op, three rule books",
        "",
        "Where NumPy, Paddle 3.3.1, the OpenVINO specification and OpenVINO's CPU plugin "
        "answer the same call differently. Each column is that reference's answer and "
        "jitops' function of its name gives the same (NumPy: `jitops.floor_divide` ...; "
        "Paddle: `jitops.elementwise_floordiv` ...; the specification: "
        "`jitops.openvino.Divide` ...); the plugin's departures from its specification are "
        "listed, not followed. Generated by `python -m tests.rulebooks` from the installed "
        "references; `tests/test_rulebooks.py` checks every cell. A warning is NumPy's "
        "RuntimeWarning (jitops gives it too); an error is the reference's (Paddle's "
        "`EnforceNotMet` is jitops' ZeroDivisionError, raised before anything is written); "
        "Paddle's *SIGFPE*: its CPU kernel kills the process (jitops' `elementwise_*` wraps, "
        "as for every integer overflow); where jitops' Paddle-named function keeps IEEE's "
        "answer, the cell says so.",
        "",
        "| case | dtype | x, y | NumPy | Paddle | OpenVINO spec | OpenVINO CPU plugin |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in CASES:
        x, y = _arrays(c)
        paddle = "-" if c.paddle is None else (
            "SIGFPE" if c.paddle_dies else " or ".join(c.paddle_by_cpu) + ", by CPU"
            if c.paddle_by_cpu else show(paddle_answer(c)))
        if c.jitops_keeps:
            paddle += f" (jitops: {show(jitops_paddle(c))}; {c.jitops_keeps})"
        lines.append(
            f"| {c.label} | {c.dtype} | {show(x)}, {show(y)} | `{c.numpy}`: "
            f"{show(numpy_answer(c))} | "
            + (f"`{c.paddle}`: {paddle}" if c.paddle else "-")
            + f" | `{c.openvino}`: {show(spec_answer(c))} | {show(plugin_answer(c))} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
