"""ONNX's backend node tests for the binary family: each node test case of the ops below, its
inputs and expected outputs as ONNX ships them (``onnx.backend.test.case.node``), run through
the jitops function with that op's rules, the answer compared bit for bit (Pow within the
case's own tolerance: C's pow).

The map from an ONNX op to jitops: Add/Sub/Mul/Div on floats, the comparisons, Max/Min
(folded over their inputs), And/Or/Xor, BitwiseAnd/Or/Xor and BitShift are NumPy's ufuncs;
integer Div truncates, as Paddle's ``elementwise_div``; Mod is ``remainder`` (the divisor's
sign) or, with ``fmod=1``, ``fmod``; Pow's result has X's type, so the harness casts
NumPy's ``power`` to it as ONNX's own reference does.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitops

onnx = pytest.importorskip("onnx", reason="the test extra installs onnx (x86-64 wheels)")


def _cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the generators compute their own references)
        every = collect_testcases(None)
    cases = []
    for c in every:
        nodes = c.model.graph.node
        if len(nodes) != 1 or nodes[0].op_type not in _OPS:
            continue
        inputs, outputs = c.data_sets[0]
        if len(inputs) < 2 or any(np.asarray(v).dtype == object for v in inputs):
            continue  # one input (Max of one array), or strings
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nodes[0].attribute}
        cases.append(pytest.param(nodes[0].op_type, attrs, inputs, outputs[0], c.rtol, c.atol,
                                  id=c.name))
    return cases


def _div(x, y):
    return jitops.divide(x, y) if x.dtype.kind == "f" else jitops.elementwise_div(
        x, y, broadcast="numpy")


def _fold(fn):
    def run(*inputs):
        r = inputs[0]
        for v in inputs[1:]:
            r = fn(r, v)
        return r
    return run


_OPS = {
    "Add": jitops.add, "Sub": jitops.subtract, "Mul": jitops.multiply, "Div": _div,
    "Max": _fold(jitops.maximum), "Min": _fold(jitops.minimum),
    "And": jitops.logical_and, "Or": jitops.logical_or, "Xor": jitops.logical_xor,
    "BitwiseAnd": jitops.bitwise_and, "BitwiseOr": jitops.bitwise_or,
    "BitwiseXor": jitops.bitwise_xor, "Equal": jitops.equal, "Less": jitops.less,
    "Greater": jitops.greater, "LessOrEqual": jitops.less_equal,
    "GreaterOrEqual": jitops.greater_equal,
}


def _run(op, attrs, inputs):
    if op == "Mod":
        return (jitops.fmod if attrs.get("fmod", 0) else jitops.remainder)(*inputs)
    if op == "Pow":
        return np.asarray(jitops.power(*inputs)).astype(inputs[0].dtype)
    if op == "BitShift":
        shift = jitops.left_shift if attrs["direction"] == b"LEFT" else jitops.right_shift
        return shift(*inputs)
    return _OPS[op](*inputs)


_OPS.update({"Mod": None, "Pow": None, "BitShift": None})

CASES = _cases()


def test_the_node_tests_of_every_op_are_found():
    ops = {p.values[0] for p in CASES}
    assert ops == set(_OPS), set(_OPS) - ops
    assert len(CASES) >= 150


@pytest.mark.parametrize("op, attrs, inputs, expected, rtol, atol", CASES)
def test_onnx_node(op, attrs, inputs, expected, rtol, atol):
    with np.errstate(all="ignore"):
        got = np.asarray(_run(op, attrs, [np.asarray(v) for v in inputs]))
    expected = np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.dtype,
                                                                       expected.dtype)
    if op == "Pow" and expected.dtype.kind == "f":
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    elif expected.dtype.kind == "f":
        assert got.tobytes() == expected.tobytes() or np.array_equal(got, expected,
                                                                     equal_nan=True), got
    else:
        np.testing.assert_array_equal(got, expected)
