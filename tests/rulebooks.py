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
         "Divide", jitops_keeps="Paddle's CPU division reads a subnormal as zero"),
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


def spec_answer(c: Case):
    """The OpenVINO specification's answer, written from its text (and its reference
    implementation where the text is silent), independently of jitops."""
    x, y = _arrays(c)
    a, b = x[0], y[0]
    with np.errstate(all="ignore"):
        if c.openvino == "Divide":
            if x.dtype.kind in "iu":
                if b == 0:
                    return ZeroDivisionError()  # the reference throws
                q = int(a) // int(b)  # pythondiv: floor, exact
                return np.array([q], np.int64).astype(x.dtype)
            return x / y
        if c.openvino == "FloorMod":
            if x.dtype.kind in "iu":
                return ZeroDivisionError() if b == 0 else np.array([int(a) % int(b)], x.dtype)
            return (x.astype(np.float64) - y * np.floor(x.astype(np.float64) / y)).astype(
                x.dtype)
        if c.openvino == "Mod":
            if x.dtype.kind in "iu":
                r = abs(int(a)) % abs(int(b)) * (1 if a >= 0 else -1)
                return np.array([r], x.dtype)
            return x - np.trunc(x / y) * y
        if c.openvino == "Power":
            v = float(a) ** float(b) if a != 0 or b >= 0 else math.inf
            top = 2.0 ** (8 * x.itemsize - 1)
            return np.array([-top if not -top <= v < top else math.trunc(v)]).astype(x.dtype)
        if c.openvino == "Maximum":
            return y if a < b else x  # std::max
        if c.openvino == "Equal":
            return x == y
    raise KeyError(c.openvino)


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
            "SIGFPE" if c.paddle_dies else show(paddle_answer(c)))
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
