"""The CPU rows of SPEC section 5, each with its contenders and its targets (SPEC's numbers).

A case builds its arrays once and returns zero-argument callables, one per contender, that all
compute the same thing into the same kind of destination (``out=`` where the row says so).
Targets are ratios of a contender's median time to jitops' (so 1.5 means jitops is 1.5x
faster), except ``probe``: the in-run bandwidth probe's time over jitops', i.e. the fraction of
the probe's bandwidth jitops reaches.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import jitops

from . import harness

try:
    import torch
except ImportError:  # optional contender
    torch = None
try:
    import numexpr
except ImportError:  # optional contender
    numexpr = None

#: The threads the contenders get (set_threads): jitops' count.
_THREADS = [1]


def _optional(name: str):
    """A contender's module where installed (Paddle and OpenVINO are imported on first need:
    they take seconds)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _seeds(x, y, yn, o, kw) -> dict[str, Callable[[], object]]:
    """The seeds' own runtimes on ``x - y`` where installed: Paddle's ``paddle.subtract`` (a
    new result: Paddle has no ``out=``) on tensors sharing the arrays (DLPack), and
    OpenVINO's CPU plugin running a compiled ``Subtract`` (``numpy`` or ``pdpd`` broadcast)
    with inputs and output sharing the arrays.
    ``y`` is in jitops' convention (``kw``), ``yn`` in NumPy's.
    A runtime that cannot take an operand (a transposed view) is left out of the row."""
    c: dict[str, Callable[[], object]] = {}
    axis = kw.get("axis", -1)
    pdpd = kw.get("broadcast") == "pdpd"
    paddle = _optional("paddle")
    if paddle is not None and x.flags.c_contiguous and yn.flags.c_contiguous:
        # paddle.subtract, its public op, broadcasts as NumPy does: Y in NumPy's convention
        px, py = paddle.from_dlpack(x), paddle.from_dlpack(yn)
        c["paddle"] = lambda: paddle.subtract(px, py)
    ov = _optional("openvino")
    if ov is not None and x.flags.c_contiguous and y.flags.c_contiguous \
            and (o is None or o.flags.c_contiguous):
        from openvino import opset13 as ops

        # OpenVINO's Python API gives pdpd no axis (-1 only): an explicit axis runs as
        # NumPy broadcasting of the reshaped Y, which is what the other contenders get
        ov_pdpd = pdpd and axis == -1
        yo = y if ov_pdpd else yn
        a = ops.parameter(list(x.shape), ov.Type(x.dtype))
        b = ops.parameter(list(yo.shape), ov.Type(yo.dtype))
        model = ov.Model([ops.subtract(a, b, auto_broadcast="pdpd" if ov_pdpd else "numpy")],
                         [a, b])
        compiled = ov.Core().compile_model(model, "CPU", {
            "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": _THREADS[0]})
        req = compiled.create_infer_request()
        req.set_input_tensor(0, ov.Tensor(x, shared_memory=True))
        req.set_input_tensor(1, ov.Tensor(yo, shared_memory=True))
        if o is not None:  # out=: the output shares it too (else OpenVINO's own buffer)
            req.set_output_tensor(0, ov.Tensor(o, shared_memory=True))
        c["openvino"] = req.infer
    return c


@dataclass
class Case:
    key: str
    title: str
    build: Callable[[], tuple[dict[str, Callable[[], object]], int]]
    targets: dict[str, float] = field(default_factory=dict)
    rounds: int = 61
    budget_s: float = 10.0
    note: str = ""
    requires: str = ""  # a module the case needs (left out of a run without it)
    writes_only: bool = False  # every input broadcast: its limit is a write-only stream


def _rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).random(shape, dtype=np.float64).astype(dtype)


def _t(*arrays):
    return [torch.from_numpy(a) for a in arrays]


def _ne(expr: str, out=None, **arrays):
    return lambda: numexpr.evaluate(expr, local_dict=arrays, out=out)


def _subtract_into(x, y, o, y_numpy=None, **kw) -> dict[str, Callable[[], object]]:
    """``x - y`` into ``o`` by every contender available. ``kw`` (e.g. pdpd's axis) goes to
    jitops only; the others get ``y_numpy``, the same Y in NumPy's broadcasting."""
    yn = y if y_numpy is None else y_numpy
    # no ``**kw`` where there is none: unpacking even an empty dict costs a call ~0.15 us
    c = {"jitops": (lambda: jitops.subtract(x, y, out=o, **kw)) if kw
         else (lambda: jitops.subtract(x, y, out=o)),
         "numpy": lambda: np.subtract(x, yn, out=o)}
    if torch is not None:
        tx, ty, to = _t(x, yn, o)
        c["torch"] = lambda: torch.sub(tx, ty, out=to)
    if numexpr is not None:
        c["numexpr"] = _ne("x - y", out=o, x=x, y=yn)
    c.update(_seeds(x, y, yn, o, kw))
    return c


def _sub_out(n: int, probe: bool = False, dtype=np.float32):
    def build():
        x, y = _rand(n, dtype, seed=1), _rand(n, dtype, seed=2)
        o = np.empty_like(x)
        c = _subtract_into(x, y, o)
        if probe:
            c["probe"] = lambda: harness.stream_sub(x, y, o)
        return c, 3 * x.nbytes
    return build


def _sub_new(n: int, dtype=np.float32):
    def build():
        x, y = _rand(n, dtype, seed=1), _rand(n, dtype, seed=2)
        c = {"jitops": lambda: jitops.subtract(x, y), "numpy": lambda: np.subtract(x, y)}
        if torch is not None:
            tx, ty = _t(x, y)
            c["torch"] = lambda: torch.sub(tx, ty)
        if numexpr is not None:
            c["numexpr"] = _ne("x - y", x=x, y=y)
        c.update(_seeds(x, y, y, None, {}))
        return c, 3 * x.nbytes
    return build


def _new_vs_out(n: int):
    """A new result against the same call into ``out=`` (page faults on a fresh buffer beyond
    the recycled-buffer budget against none), and NumPy's new result."""
    def build():
        x, y = _rand(n, seed=1), _rand(n, seed=2)
        o = np.empty_like(x)
        o.fill(0)  # touched once: out='s pages are resident, as a reused buffer's are
        return {"jitops": lambda: jitops.subtract(x, y),
                "out": lambda: jitops.subtract(x, y, out=o),
                "numpy": lambda: np.subtract(x, y)}, 3 * x.nbytes
    return build


def _broadcast(xs, ys, y_numpy_shape=None, **kw):
    """X - Y into out=, Y given in jitops' convention (``kw``: pdpd axis), reshaped for others."""
    def build():
        x, y = _rand(xs, seed=1), _rand(ys, seed=2)
        yn = y.reshape(y_numpy_shape) if y_numpy_shape else y
        out = np.empty(np.broadcast_shapes(x.shape, yn.shape), np.float32)
        return _subtract_into(x, y, out, yn, **kw), x.nbytes + yn.nbytes + out.nbytes
    return build


def _scalar():
    x = _rand(10**7)
    o = np.empty_like(x)
    c = {"jitops": lambda: jitops.subtract(x, 3.0, out=o),
         "numpy": lambda: np.subtract(x, 3.0, out=o)}
    if torch is not None:
        tx, to = _t(x, o)
        c["torch"] = lambda: torch.sub(tx, 3.0, out=to)
    if numexpr is not None:
        c["numexpr"] = _ne("x - 3.0", out=o, x=x)
    return c, 2 * x.nbytes


def _transposed():
    x, y = _rand((4096, 4096), seed=1), _rand((4096, 4096), seed=2)
    out = np.empty_like(x)
    return _subtract_into(x.T, y, out), 3 * x.nbytes


def _relu():
    x, y = _rand(10**7, seed=1) - 0.5, _rand(10**7, seed=2) - 0.5
    o = np.empty_like(x)

    def two_passes():
        np.subtract(x, y, out=o)
        np.maximum(o, 0, out=o)

    c = {"jitops": lambda: jitops.subtract(x, y, act="relu", out=o), "numpy": two_passes}
    if torch is not None:
        tx, ty, to = _t(x, y, o)

        def torch_two():
            torch.sub(tx, ty, out=to)
            torch.relu_(to)

        c["torch"] = torch_two
    if numexpr is not None:
        c["numexpr"] = _ne("where(x > y, x - y, 0)", out=o, x=x, y=y)
    return c, 3 * x.nbytes


@jitops.elementwise
def axpb(x, w, b):
    """The user op of the fusion rows: one pass over memory for ``x * w + b``."""
    return x * w + b


@jitops.elementwise
def halve_add(x, y):
    """The user op of the in-place rows: ``x * 0.5 + y``."""
    return x * 0.5 + y


def _axpb_into(x, w, b, o, wn, bn, **kw) -> dict[str, Callable[[], object]]:
    """``x * w + b`` into ``o`` by every contender: jitops' user op in one pass (``kw``: pdpd's
    axis), NumPy and PyTorch as two ops into ``o`` (their best without temporaries), numexpr
    as one blocked expression; the others get ``wn``, ``bn`` in NumPy's broadcasting."""

    def numpy_two():
        np.multiply(x, wn, out=o)
        np.add(o, bn, out=o)

    c = {"jitops": lambda: axpb(x, w, b, out=o, **kw), "numpy": numpy_two}
    if torch is not None:
        tx, tw, tb, to = _t(x, wn, bn, o)

        def torch_two():
            torch.mul(tx, tw, out=to)
            to.add_(tb)

        c["torch"] = torch_two
    if numexpr is not None:
        c["numexpr"] = _ne("x * w + b", out=o, x=x, w=wn, b=bn)
    return c


def _user_xwb():
    """x * w + b with w, b per channel (pdpd axis 1)."""
    x = _rand((32, 64, 56, 56), seed=1)
    w, b = _rand(64, seed=2), _rand(64, seed=3)
    o = np.empty_like(x)
    c = _axpb_into(x, w, b, o, w.reshape(64, 1, 1), b.reshape(64, 1, 1), broadcast="pdpd",
                   axis=1)
    return c, 2 * x.nbytes


def _user_transposed():
    """x * w + b with x transposed and w, b C-ordered (all 4096^2): the user op's tiles
    stage x as the built-ins' do. Its targets are the fusion row's (``user_xwb``): a layout
    should not cost a user op its lead."""
    x, w, b = (_rand((4096, 4096), seed=k) for k in (1, 2, 3))
    o = np.empty_like(w)
    return _axpb_into(x.T, w, b, o, w, b), 4 * x.nbytes


def _user_abc():
    a, b, cc = _rand(10**7, seed=1), _rand(10**7, seed=2), _rand(10**7, seed=3)
    o = np.empty_like(a)
    return _axpb_into(a, b, cc, o, b, cc), 4 * a.nbytes


def _user_abc_small(out: bool):
    """``a * b + c`` on three 1e4 float32 arrays: the user op (one call) against NumPy's and
    PyTorch's two ops and numexpr, new results (``out=`` where asked)."""
    a, b, cc = _rand(10**4, seed=1), _rand(10**4, seed=2), _rand(10**4, seed=3)
    o = np.empty_like(a)
    if out:
        return _axpb_into(a, b, cc, o, b, cc), 4 * a.nbytes
    c = {"jitops": lambda: axpb(a, b, cc), "numpy": lambda: a * b + cc}
    if torch is not None:
        ta, tb, tc = _t(a, b, cc)
        c["torch"] = lambda: torch.addcmul(tc, ta, tb)
    if numexpr is not None:
        c["numexpr"] = _ne("a * b + c", a=a, b=b, c=cc)
    return c, 4 * a.nbytes


def _operands(kind: str):
    """Operands that are not arrays, as a program hands them: ``x - x.mean()`` on 1e3 float32
    (a NumPy scalar, new each call), two Python lists of 100 floats, two Python numbers. New
    results; PyTorch takes the NumPy scalar's tensors (it has no lists or numbers to add)."""
    if kind == "npscalar":
        x = _rand(10**3)
        c = {"jitops": lambda: jitops.subtract(x, x.mean()),
             "numpy": lambda: np.subtract(x, x.mean())}
        if torch is not None:
            (tx,) = _t(x)
            c["torch"] = lambda: torch.sub(tx, tx.mean())
        return c, 2 * x.nbytes
    if kind == "lists":
        a, b = _rand(100, np.float64, 1).tolist(), _rand(100, np.float64, 2).tolist()
        return {"jitops": lambda: jitops.add(a, b), "numpy": lambda: np.add(a, b)}, 3 * 800
    return {"jitops": lambda: jitops.multiply(3, 2.5), "numpy": lambda: np.multiply(3, 2.5)}, 8


def _layout_new(kind: str):
    """``x - y`` into a new result laid out as the operands are (NumPy's order K): both
    Fortran-ordered (a DataFrame's ``.values``, LAPACK's results) or both transposed, (40,
    250) float32."""
    x, y = _rand((250, 40), seed=1), _rand((250, 40), seed=2)
    if kind == "fortran":
        x, y = np.asfortranarray(x.T), np.asfortranarray(y.T)
    else:
        x, y = x.T, y.T
    c = {"jitops": lambda: jitops.subtract(x, y), "numpy": lambda: np.subtract(x, y)}
    if torch is not None:
        tx, ty = _t(x, y)
        c["torch"] = lambda: torch.sub(tx, ty)
    return c, 3 * x.nbytes


def _in_place(n: int, kind: str):
    """An array updated in place, as an accumulator or an optimiser step is: ``x += y``
    (``add``), ``x *= -1`` (``multiply`` by a constant: the values stay as they are) or ``x =
    x * 0.5 + y`` (a user op; NumPy and PyTorch take two in-place ops), ``out=x`` throughout."""
    x, y = _rand(n, seed=1), _rand(n, seed=2)
    tx, ty = _t(x, y) if torch is not None else (None, None)
    if kind == "add":
        c = {"jitops": lambda: jitops.add(x, y, out=x), "numpy": lambda: np.add(x, y, out=x)}
        if torch is not None:
            c["torch"] = lambda: tx.add_(ty)
        if numexpr is not None:
            c["numexpr"] = _ne("x + y", out=x, x=x, y=y)
    elif kind == "scale":
        c = {"jitops": lambda: jitops.multiply(x, -1.0, out=x),
             "numpy": lambda: np.multiply(x, -1.0, out=x)}
        if torch is not None:
            c["torch"] = lambda: tx.mul_(-1.0)
        if numexpr is not None:
            c["numexpr"] = _ne("x * -1.0", out=x, x=x)
    else:
        def two_ops():
            np.multiply(x, 0.5, out=x)
            np.add(x, y, out=x)

        c = {"jitops": lambda: halve_add(x, y, out=x), "numpy": two_ops}
        if torch is not None:
            c["torch"] = lambda: tx.mul_(0.5).add_(ty)
        if numexpr is not None:
            c["numexpr"] = _ne("x * 0.5 + y", out=x, x=x, y=y)
    return c, (2 if kind == "scale" else 3) * x.nbytes


def _overhead():
    x, y, o = np.ones(8), np.full(8, 2.0), np.empty(8)
    return _subtract_into(x, y, o), 3 * x.nbytes


def _pandas_sub():
    """Two aligned Series (the same index): pandas' own ``s1 - s2`` (checks the indexes are
    equal, then NumPy), and NumPy's ufunc on the Series (which pandas turns into ``s1 - s2``),
    against jitops handed the Series (pandas aligns, jitops computes)."""
    import pandas as pd

    idx = pd.RangeIndex(10**7)
    s1 = pd.Series(_rand(10**7, np.float64, 1), idx)
    s2 = pd.Series(_rand(10**7, np.float64, 2), idx)
    return {"jitops": lambda: jitops.subtract(s1, s2), "numpy": lambda: np.subtract(s1, s2),
            "pandas": lambda: s1 - s2}, 3 * 8 * 10**7


def _paddle_sub():
    """2e7 float32 Paddle tensors (CPU): jitops on the tensors (read and answered through
    DLPack, no copy) against jitops on the same data as ndarrays, NumPy, and Paddle's own op."""
    import paddle

    x, y = _rand(2 * 10**7, seed=1), _rand(2 * 10**7, seed=2)
    px, py = paddle.from_dlpack(x), paddle.from_dlpack(y)
    return {"jitops": lambda: jitops.subtract(px, py), "numpy": lambda: np.subtract(x, y),
            "ndarray": lambda: jitops.subtract(x, y),
            "paddle": lambda: paddle.subtract(px, py)}, 3 * x.nbytes


def _ov_compiled(op: str, x, y, **attrs):
    """OpenVINO's CPU plugin running a compiled ``op`` (opset13's Python name) on x and y,
    sharing their memory; its own output buffer (a new result each call, as the others)."""
    ov = _optional("openvino")
    if ov is None:
        return None
    from openvino import opset13 as ops

    a = ops.parameter(list(x.shape), ov.Type(x.dtype))
    b = ops.parameter(list(y.shape), ov.Type(y.dtype))
    model = ov.Model([getattr(ops, op)(a, b, **attrs)], [a, b])
    compiled = ov.Core().compile_model(model, "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": _THREADS[0]})
    req = compiled.create_infer_request()
    req.set_input_tensor(0, ov.Tensor(x, shared_memory=True))
    req.set_input_tensor(1, ov.Tensor(y, shared_memory=True))
    return req.infer


def _family(op: str, dtype, n: int, scalar=None, torch_op: str = "", paddle_op: str = "",
            ov_op: str = ""):
    """NumPy's binary-family ``op`` on two ``n``-element arrays (or an array and the Python
    number ``scalar``), a new result, by every contender with that op; integer divisors
    and exponents kept in range (1-50, 0-3)."""
    def build():
        rng = np.random.default_rng(4)
        if np.dtype(dtype).kind == "i":
            x = rng.integers(-1000, 1000, n).astype(dtype)
            y = rng.integers(1, 50, n).astype(dtype) if op != "power" else \
                rng.integers(0, 4, n).astype(dtype)
        elif np.dtype(dtype).kind == "c":  # both parts random, the exponent's too
            x = (_rand(n, np.float64, 1) + 0.5 + 1j * _rand(n, np.float64, 3)).astype(dtype)
            y = (_rand(n, np.float64, 2) * 3 + 1j * _rand(n, np.float64, 4)).astype(dtype)
        else:
            x = _rand(n, dtype, seed=1) + np.asarray(0.5, dtype)
            y = _rand(n, dtype, seed=2) * np.asarray(3, dtype)
        yv = y if scalar is None else scalar
        c = {"jitops": lambda: getattr(jitops, op)(x, yv),
             "numpy": lambda: getattr(np, op)(x, yv)}
        if torch is not None and torch_op:
            tx, ty = _t(x, y)
            ts = ty if scalar is None else scalar
            c["torch"] = lambda: getattr(torch, torch_op)(tx, ts)
        paddle = _optional("paddle") if paddle_op else None
        if paddle is not None:
            px = paddle.from_dlpack(x)
            ps = paddle.from_dlpack(y) if scalar is None else scalar
            c["paddle"] = lambda: getattr(paddle, paddle_op)(px, ps)
        run = _ov_compiled(ov_op, x, y if scalar is None else np.full(1, scalar, dtype)) \
            if ov_op else None
        if run is not None:
            c["openvino"] = run
        out_size = np.result_type(getattr(np, op)(x[:1], yv)).itemsize
        return c, n * (x.itemsize + (y.itemsize if scalar is None else 0) + out_size)
    return build


def _ov_divide_pdpd():
    """``jitops.openvino.Divide`` on int32, X(32,64,56,56) and Y(56,) (pdpd, trailing), a new
    result, against the OpenVINO CPU plugin's compiled Divide (which truncates where the spec
    floors: the same values here, all positive) and NumPy's floor_divide."""
    import jitops.openvino as jov

    rng = np.random.default_rng(5)
    x = rng.integers(0, 1000, (32, 64, 56, 56)).astype(np.int32)
    y = rng.integers(1, 50, 56).astype(np.int32)
    c = {"jitops": lambda: jov.Divide(x, y, "pdpd"), "numpy": lambda: np.floor_divide(x, y)}
    # (the Python API's "pdpd" string carries no axis: the trailing pdpd fit is NumPy's)
    run = _ov_compiled("divide", x, y, auto_broadcast="numpy")
    if run is not None:
        c["openvino"] = run
    return c, 2 * x.nbytes + y.nbytes


_CHANNELS = (32, 64, 56, 56)


def _sum_to_channels():
    """A (32,64,56,56) gradient summed to a per-channel (64,) one: ``jitops.sum_to`` (pdpd,
    axis 1) against each library's sum over axes (0, 2, 3)."""
    g = _rand(_CHANNELS, seed=6)
    c = {"jitops": lambda: jitops.sum_to(g, (64,), broadcast="pdpd", axis=1),
         "numpy": lambda: g.sum(axis=(0, 2, 3))}
    if torch is not None:
        (tg,) = _t(g)
        c["torch"] = lambda: tg.sum(dim=(0, 2, 3))
    paddle = _optional("paddle")
    if paddle is not None:
        pg = paddle.from_dlpack(g)
        c["paddle"] = lambda: paddle.sum(pg, axis=[0, 2, 3])
    return c, g.nbytes


def _sum_to_bias(rows: int = 256):
    """A (rows, 64) gradient summed to its (64,) bias (256 rows: a call whose fixed cost
    shows; 4096: short rows, many of them): sum_to against each library's sum over axis 0."""
    g = _rand((rows, 64), seed=11)
    c = {"jitops": lambda: jitops.sum_to(g, (64,)), "numpy": lambda: g.sum(axis=0)}
    if torch is not None:
        (tg,) = _t(g)
        c["torch"] = lambda: tg.sum(dim=0)
    return c, g.nbytes


def _divmod_small():
    """``divmod`` of two 1e3 float32 arrays: one pass, two results (jitops.divmod), against
    NumPy's ufunc and PyTorch's two ops."""
    x, y = _rand(1000, seed=12) * 100, _rand(1000, seed=13) + np.float32(0.5)
    c = {"jitops": lambda: jitops.divmod(x, y), "numpy": lambda: np.divmod(x, y)}
    if torch is not None:
        tx, ty = _t(x, y)
        c["torch"] = lambda: (torch.floor_divide(tx, ty), torch.remainder(tx, ty))
    return c, 4 * x.nbytes


def _grad_channels(op: str):
    """``elementwise_<op>_grad`` of X(32,64,56,56) and a per-channel Y(64,) (pdpd axis 1):
    dx written, dy summed, in one pass; against Paddle's own backward (``paddle.grad``
    through ``paddle.add``/``paddle.multiply`` of Y as (64,1,1), the graph kept), PyTorch's
    kernels doing the same two results, and NumPy's."""
    x, d = _rand(_CHANNELS, seed=7), _rand(_CHANNELS, seed=8)
    y = _rand(64, seed=9) + np.float32(0.5)
    grad = getattr(jitops, f"elementwise_{op}_grad")
    y4 = y.reshape(64, 1, 1)
    axes = (0, 2, 3)
    if op == "add":
        c = {"numpy": lambda: (d.copy(), d.sum(axis=axes))}
    else:
        c = {"numpy": lambda: (d * y4, (d * x).sum(axis=axes))}
    c["jitops"] = lambda: grad(x, y, d, axis=1)
    if torch is not None:
        tx, td, ty = _t(x, d, y4)
        if op == "add":
            c["torch"] = lambda: (td.clone(), td.sum(dim=axes))
        else:
            c["torch"] = lambda: (td * ty, (td * tx).sum(dim=axes))
    paddle = _optional("paddle")
    if paddle is not None:
        px = paddle.to_tensor(x, stop_gradient=False)
        py = paddle.to_tensor(y4, stop_gradient=False)  # (its public ops broadcast as NumPy)
        out = (paddle.add if op == "add" else paddle.multiply)(px, py)
        pd = paddle.to_tensor(d)
        c["paddle"] = lambda: paddle.grad([out], [px, py], [pd], retain_graph=True)
    return c, 2 * x.nbytes + (d.nbytes if op != "add" else 0)


def _sum_1e8():
    """A plain sum of 1e8 float32 elements: ``jitops.sum_to(g, ())`` against the in-run
    read-only probe (Numba's parallel reduction, reassociated), NumPy and PyTorch."""
    g = _rand(10**8, seed=10)
    c = {"jitops": lambda: jitops.sum_to(g, ()), "numpy": lambda: g.sum(),
         "probe": lambda: harness.stream_read(g)}
    if torch is not None:
        (tg,) = _t(g)
        c["torch"] = lambda: tg.sum()
    return c, g.nbytes


def sq_diff(a, b):
    """The fused reduction row's element: ``(a - b) ** 2``."""
    d = a - b
    return d * d


def _sq_diff_sum():
    """``sum((a - b) ** 2)`` over two 1e7 float32 arrays: one jitops pass (``jitops.reduce``)
    against NumPy's two passes and a temporary, numexpr's ``sum()``, PyTorch eager and
    ``torch.compile`` (inductor, compiled here before the rounds) and the read-only probe
    reading both arrays."""
    a, b = _rand(10**7, seed=11), _rand(10**7, seed=12)
    op = jitops.reduce(sq_diff)
    c = {"jitops": lambda: op(a, b), "numpy": lambda: np.sum((a - b) ** 2),
         "probe": lambda: (harness.stream_read(a), harness.stream_read(b))}
    if numexpr is not None:
        c["numexpr"] = lambda: numexpr.evaluate("sum((a - b) ** 2)", local_dict={"a": a, "b": b})
    if torch is not None:
        ta, tb = _t(a, b)
        c["torch"] = lambda: ((ta - tb) ** 2).sum()
        try:
            compiled = torch.compile(lambda x, y: ((x - y) ** 2).sum())
            compiled(ta, tb)
            c["torch_compile"] = lambda: compiled(ta, tb)
        except Exception:  # no inductor here (no C++ compiler): the row goes without
            pass
    return c, a.nbytes + b.nbytes


#: Operands per call of a varying-shape row, and distinct operand sets it cycles through:
#: almost every call of a run meets a shape it has not met (or not lately).
_BATCH, _POOL = 100, 4000


def _cycling(pool: list, f, to=None) -> Callable[[], None]:
    """A contender of a varying-shape row: ``f`` on the next ``_BATCH`` operand sets of its
    own copy of ``pool`` each call (``to`` converts a copied set, e.g. to tensors). With one
    shared pool, whoever ran second in a round read the sets the first had just brought into
    cache; with a copy each, every contender meets its operands as cold as the others do."""
    pool = [tuple(a.copy() for a in args) for args in pool]
    if to is not None:
        pool = [tuple(to(*args)) for args in pool]
    at = [0]

    def run():
        i = at[0]
        for args in pool[i:i + _BATCH]:
            f(*args)
        at[0] = (i + _BATCH) % len(pool)
    return run


def _varying(dtype, out: bool):
    """``x - y`` on pairs of random lengths 100-5,000: a new shape nearly every call (a
    batch of ragged data, the last short batch of every epoch)."""
    def build():
        rng = np.random.default_rng(7)
        pool = []
        for n in rng.integers(100, 5001, _POOL):
            x, y = rng.random(n).astype(dtype), rng.random(n).astype(dtype)
            pool.append((x, y, np.empty_like(x)))
        if out:
            c = {"jitops": _cycling(pool, lambda x, y, o: jitops.subtract(x, y, out=o)),
                 "numpy": _cycling(pool, lambda x, y, o: np.subtract(x, y, out=o))}
        else:
            c = {"jitops": _cycling(pool, lambda x, y, o: jitops.subtract(x, y)),
                 "numpy": _cycling(pool, lambda x, y, o: np.subtract(x, y))}
        if torch is not None:
            c["torch"] = _cycling(pool, (lambda x, y, o: torch.sub(x, y, out=o)) if out
                                  else (lambda x, y, o: torch.sub(x, y)), to=_t)
        nbytes = sum(3 * a[0].nbytes for a in pool) * _BATCH // len(pool)
        return c, nbytes
    return build


def _varying_rows(broadcast: str, vary_cols: bool = False):
    """``X + b`` with X (n, 64) and b (64,), n random in 1-200 (a batch of any size), NumPy's
    or Paddle's trailing rule (``pdpd``, axis -1): or both n and the row length random
    (``vary_cols``: 2-D broadcast shapes never seen before)."""
    def build():
        rng = np.random.default_rng(8)
        pool = []
        for n in rng.integers(1, 201, _POOL):
            k = int(rng.integers(16, 257)) if vary_cols else 64
            pool.append((rng.random((n, k)).astype(np.float32),
                         rng.random(k).astype(np.float32)))
        kw = {} if broadcast == "numpy" else {"broadcast": broadcast}
        c = {"jitops": _cycling(pool, (lambda x, b: jitops.add(x, b, **kw)) if kw
                                else (lambda x, b: jitops.add(x, b))),
             "numpy": _cycling(pool, lambda x, b: np.add(x, b))}
        if torch is not None:
            c["torch"] = _cycling(pool, lambda x, b: torch.add(x, b), to=_t)
        nbytes = sum(2 * a[0].nbytes for a in pool) * _BATCH // len(pool)
        return c, nbytes
    return build


CASES = [
    Case("sub_1e6_out", "subtract, 1e6 elements, out= (cache-resident)", _sub_out(10**6),
         {"numpy": 1.5, "torch": 1.0}),
    Case("sub_1e7_out", "subtract, 1e7 elements, out=", _sub_out(10**7, probe=True),
         {"probe": 1.1, "torch": 1.1}),
    Case("sub_1e7_new", "subtract, 1e7 elements, new result", _sub_new(10**7), {"numpy": 1.5}),
    Case("sub_1e8_new", "subtract, 1e8 elements, new result (against jitops with out=)",
         _new_vs_out(10**8), {"out": 0.8}, rounds=11, budget_s=15.0,
         note="target: at least 80% of the speed of the same call with out="),
    Case("pdpd_axis1", "pdpd X(32,64,56,56) - Y(64,) axis 1, out=",
         _broadcast((32, 64, 56, 56), (64,), (64, 1, 1), broadcast="pdpd", axis=1),
         {"numpy": 1.4, "torch": 1.0}),
    Case("row_bcast", "X(4096,4096) - Y(4096,), out=", _broadcast((4096, 4096), (4096,)),
         {"numpy": 1.4, "torch": 1.0}),
    Case("outer_bcast", "X(4096,1) - Y(1,4096), out=", _broadcast((4096, 1), (1, 4096)),
         {"numpy": 1.4, "torch": 1.0}, writes_only=True),
    Case("scalar", "X(1e7) - 3.0, out=", _scalar, {"numpy": 1.0, "torch": 1.0}),
    Case("transposed", "X.T - Y, both 4096^2, out=", _transposed, {"numpy": 8.0}, rounds=21),
    Case("relu_fused", "relu(x - y) fused, 1e7 (NumPy: two passes)", _relu,
         {"numpy": 2.2, "torch": 1.3}),
    Case("user_xwb", "user op x * w + b, X(32,64,56,56), w, b (64,) pdpd axis 1, out=",
         _user_xwb, {"numpy": 3.0, "numexpr": 1.5, "torch": 1.3}),
    Case("user_transposed", "user op x * w + b, x transposed, all 4096^2, out=",
         _user_transposed, {"numpy": 3.0, "torch": 1.3}, rounds=21),
    Case("user_abc", "user op a * b + c, three 1e7 arrays, out=", _user_abc,
         {"numpy": 2.0, "numexpr": 1.3}),
    *[Case(f"user_abc_1e4_{kind}", f"user op a * b + c, three 1e4 float32 arrays, "
           f"{'out=' if kind == 'out' else 'new result'}", functools.partial(_user_abc_small,
                                                                              kind == "out"),
           {"numpy": 1.0}, rounds=41) for kind in ("new", "out")],
    Case("overhead", "call overhead, 8 float64 elements, out=", _overhead, {"numpy": 1 / 1.5},
         note="target: at most 1.5x NumPy's time per call"),
    *[Case(f"small_{n}_{dt.__name__}_{kind}",
           f"subtract, {n:.0e} {dt.__name__} elements, {'out=' if kind == 'out' else 'new result'}"
           .replace("e+0", "e"),
           (_sub_out(n, dtype=dt) if kind == "out" else _sub_new(n, dt)), {"numpy": 1.0},
           rounds=41)
      for n in (10**3, 10**4) for dt in (np.float32, np.float64) for kind in ("out", "new")],
    *[Case(f"inplace_{kind}_{n:.0e}".replace("e+0", "e"),
           f"{title}, {n:.0e} float32, in place (out=x)".replace("e+0", "e"),
           functools.partial(_in_place, n, kind), {"numpy": 1.0}, rounds=41)
      for kind, title in (("add", "x += y"), ("scale", "x *= -1"),
                          ("user", "user op x = x * 0.5 + y"))
      for n in (10**4, 10**6)],
    *[Case(f"layout_{kind}_new", f"subtract, (40, 250) float32, {kind} operands, new result "
           "(laid out as they are)", functools.partial(_layout_new, kind), {"numpy": 1.0},
           rounds=41) for kind in ("fortran", "transposed")],
    Case("operand_npscalar", "x - x.mean() (a NumPy scalar operand), 1e3 float32, new result",
         functools.partial(_operands, "npscalar"), {"numpy": 1 / 1.5}, rounds=41,
         note="target: within 1.5x NumPy's call (each call converts the scalar)"),
    Case("operand_lists", "add of two Python lists of 100 floats, new result",
         functools.partial(_operands, "lists"), {"numpy": 1 / 1.5}, rounds=41,
         note="target: within 1.5x NumPy's call (each call converts the lists)"),
    Case("operand_numbers", "multiply of two Python numbers, 3 * 2.5",
         functools.partial(_operands, "numbers"), {}, rounds=41,
         note="no target: NumPy answers two numbers without a kernel launch; kept so that a "
              "regression shows"),
    *[Case(f"vary_{dt.__name__}_{kind}",
           f"subtract, {_BATCH} pairs of random lengths 100-5,000, {dt.__name__}, "
           f"{'out=' if kind == 'out' else 'new result'} (per {_BATCH} calls)",
           _varying(dt, kind == "out"), {"numpy": 1.0}, rounds=41)
      for dt in (np.float32, np.float64) for kind in ("new", "out")],
    Case("vary_rows_numpy", f"X(n,64) + b(64,), n random 1-200, new result (per {_BATCH} "
         f"calls)", _varying_rows("numpy"), {"numpy": 1.0}, rounds=41),
    Case("vary_rows_pdpd", f"pdpd X(n,64) + b(64,) axis -1, n random 1-200, new result (per "
         f"{_BATCH} calls)", _varying_rows("pdpd"), {"numpy": 1.0}, rounds=41),
    Case("vary_rows_cols", f"X(n,k) + b(k,), n 1-200 and k 16-256 random, new result (per "
         f"{_BATCH} calls)", _varying_rows("numpy", vary_cols=True), {"numpy": 0.5},
         rounds=41, note="target: within 2x NumPy's call on 2-D broadcast shapes never seen"),
    Case("floordiv_i32", "floor_divide int32, 1e7, new result",
         _family("floor_divide", np.int32, 10**7, torch_op="floor_divide",
                 paddle_op="floor_divide", ov_op="divide"), {"numpy": 1.0}, rounds=21),
    Case("floordiv_i32_scalar", "floor_divide int32 by 7, 1e7, new result (NumPy: libdivide)",
         _family("floor_divide", np.int32, 10**7, scalar=7, torch_op="floor_divide"),
         {"numpy": 1.0}, rounds=21),
    Case("floordiv_i16_scalar", "floor_divide int16 by 7, 1e7, new result (NumPy: libdivide)",
         _family("floor_divide", np.int16, 10**7, scalar=7, torch_op="floor_divide"),
         {"numpy": 1.0}, rounds=21),
    Case("floordiv_i8_scalar", "floor_divide int8 by 7, 1e7, new result (NumPy: libdivide)",
         _family("floor_divide", np.int8, 10**7, scalar=7, torch_op="floor_divide"),
         {"numpy": 1.0}, rounds=21),
    Case("remainder_i32", "remainder int32, 1e7, new result",
         _family("remainder", np.int32, 10**7, torch_op="remainder", paddle_op="remainder",
                 ov_op="floor_mod"), {"numpy": 1.0}, rounds=21),
    # (not OpenVINO's FloorMod: x - y * floor(x / y) in float32, 1 in 70 elements not the
    # remainder there)
    Case("remainder_f32", "remainder float32, 1e7, new result",
         _family("remainder", np.float32, 10**7, torch_op="remainder", paddle_op="remainder"),
         {"numpy": 1.0}, rounds=21),
    Case("power_f32", "power float32, 1e7, new result",
         _family("power", np.float32, 10**7, torch_op="pow", paddle_op="pow", ov_op="power"),
         {"numpy": 1.5}, rounds=21),
    Case("power_f32_square", "power float32 x ** 2 (one exponent: NumPy's fast path), 1e7, "
         "new result", _family("power", np.float32, 10**7, scalar=2.0, torch_op="pow",
                               paddle_op="pow"), {"numpy": 1.0}, rounds=21),
    Case("power_c128", "power complex128, 1e6, new result (NumPy and jitops: C's cpow)",
         _family("power", np.complex128, 10**6, torch_op="pow"), {"numpy": 1.0}, rounds=21),
    Case("greater_f32", "greater float32 -> bool, 1e7, new result",
         _family("greater", np.float32, 10**7, torch_op="gt", paddle_op="greater_than",
                 ov_op="greater"), {"numpy": 1.0}, rounds=21),
    Case("greater_f32_1e4", "greater float32 -> bool, 1e4, new result",
         _family("greater", np.float32, 10**4, torch_op="gt"), {"numpy": 1.0}),
    Case("ov_divide_pdpd", "openvino.Divide int32 pdpd X(32,64,56,56) / Y(56,), new result",
         _ov_divide_pdpd, {"numpy": 1.0}, rounds=21),
    Case("sq_diff_sum", "sum((a - b) ** 2), two 1e7 float32 arrays (jitops.reduce: one pass)",
         _sq_diff_sum, {"numpy": 2.0, "numexpr": 1.5, "torch": 1.0, "torch_compile": 1.0},
         rounds=21),
    Case("sum_to_channels", "sum_to X(32,64,56,56) -> (64,) (pdpd axis 1; others: sum over "
         "axes 0, 2, 3)", _sum_to_channels, {"numpy": 1.5, "torch": 1.0}, rounds=21),
    Case("sum_to_bias", "sum_to X(256,64) -> (64,) (others: sum over axis 0)",
         _sum_to_bias, {"numpy": 1.0}),
    Case("sum_to_bias_rows", "sum_to X(4096,64) -> (64,) (others: sum over axis 0)",
         functools.partial(_sum_to_bias, 4096), {"numpy": 1.0}),
    Case("divmod_1e3", "divmod float32, 1e3, two new results (one pass)", _divmod_small,
         {"numpy": 1.0}),
    Case("add_grad_channels", "elementwise_add_grad X(32,64,56,56), Y(64,) axis 1: dx, dy",
         functools.partial(_grad_channels, "add"), {"paddle": 1.5}, rounds=21),
    Case("mul_grad_channels", "elementwise_mul_grad X(32,64,56,56), Y(64,) axis 1: dx, dy",
         functools.partial(_grad_channels, "mul"), {"paddle": 1.5}, rounds=21),
    Case("sum_1e8", "sum of 1e8 float32 elements (jitops.sum_to to ())", _sum_1e8,
         {"probe": 0.8, "numpy": 1.0}, rounds=11, budget_s=15.0,
         note="target: at least 80% of the in-run read-only probe's speed"),
    Case("pandas_sub", "pandas Series s1 - s2, 1e7 float64, aligned (new result)", _pandas_sub,
         {"pandas": 1.0}, rounds=21, requires="pandas"),
    Case("paddle_sub", "Paddle tensors x - y, 2e7 float32, new result", _paddle_sub,
         {"ndarray": 1 / 1.2}, rounds=21, requires="paddle",
         note="target: within 1.2x of jitops on the same data as ndarrays"),
]

#: Sizes of the cost-versus-size sweep (subtract, float32, out=).
SWEEP_SIZES = [10**2, 10**3, 10**4, 10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7, 3 * 10**7]


def sweep_case(n: int) -> Callable[[], tuple[dict[str, Callable[[], object]], int]]:
    return _sub_out(n)


def set_threads(n: int) -> None:
    """Give the optional contenders the same thread count jitops runs with."""
    _THREADS[0] = n
    if torch is not None:
        torch.set_num_threads(n)
    if numexpr is not None:
        numexpr.set_num_threads(n)
