"""Non-temporal (streaming) stores (jitops.cpu.kernels.stream): when they are chosen, that the
machine code really has vector non-temporal stores, and -- the shortcut's safety net -- that every
element they write is NumPy's, for every dtype that streams, every output alignment (the
aligned head, the vector body, the scalar tail), rows shorter than a head, each row loop,
the serial and parallel kernels and user ops (whose rows run in chunks).

A misaligned vector non-temporal store faults, and a wrongly placed head or chunk writes the
wrong elements; both are what these tests would catch.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

import jitops
from jitops import dispatch
from jitops.core import config
from jitops.cpu.kernels import binary as kernels
from jitops.cpu.kernels import stream
from jitops.cpu.repeat import memo as repeat

X86 = platform.machine().lower() in ("x86_64", "amd64")
DTYPES = ["bool", "int8", "uint8", "int16", "float16", "int32", "float32", "int64", "uint64",
          "float64"]


@pytest.fixture
def stream_everything(monkeypatch):
    """Every eligible call streams (the threshold at one byte), launches made afresh."""
    if not stream.AVAILABLE:
        pytest.skip("streaming stores are x86-64 only")
    monkeypatch.setattr(config, "STREAM_BYTES", 1)
    dispatch.clear()
    yield
    dispatch.clear()


def _launch_streams(call) -> bool:
    """Whether the launch the fast path kept for ``call`` runs a streaming task."""
    from jitops.cpu.kernels import nary

    dispatch.clear()
    call()
    (launch,) = repeat.FAST.values()
    (spec,) = [sp for sp, addr in [*kernels._TASKS.items(), *nary._TASKS.items()]
               if addr == launch.task]
    return spec.stream


@pytest.mark.skipif(not X86, reason="streaming stores are x86-64 only")
def test_chosen_for_outputs_beyond_the_cache(monkeypatch):
    monkeypatch.setattr(config, "STREAM_BYTES", 32 << 20)
    big = np.ones(10**7, np.float32)  # 40 MB out, 80 MB read
    o = np.empty_like(big)
    assert _launch_streams(lambda: jitops.subtract(big, big, out=o))
    assert _launch_streams(lambda: jitops.subtract(big, 3.0, out=o))
    small = np.ones(10**6, np.float32)  # cache-resident: left to the cache
    assert not _launch_streams(lambda: jitops.subtract(small, small))
    # an outer difference reads no input in full: its 64 MB output alone decides
    col, row = np.ones((4096, 1), np.float32), np.ones((1, 4096), np.float32)
    assert _launch_streams(lambda: jitops.subtract(col, row))
    assert not _launch_streams(lambda: jitops.subtract(col[:1024], row[:, :1024]))  # 4 MB
    # complex elements are pairs the vectoriser does not store whole
    c = np.ones(5 * 10**6, np.complex64)
    assert not _launch_streams(lambda: jitops.add(c, c))
    # a transpose's tiles stage the transposed input: its out rows stream like any row (the
    # built-in kernels, and a user op's first nary.STAGED_INPUTS inputs); a user op with more
    # inputs than it stages runs some tile rows strided, and keeps ordinary stores
    sq = np.ones((4096, 4096), np.float32)
    assert _launch_streams(lambda: jitops.subtract(sq.T, sq))
    assert _launch_streams(lambda: jitops.subtract(sq, sq.T, out=np.empty_like(sq)))
    assert _launch_streams(lambda: jitops.elementwise(lambda a, b: a - b)(sq.T, sq))
    assert not _launch_streams(
        lambda: jitops.elementwise(lambda a, b, c, d, e: a - b + c - d + e)(sq.T, *[sq] * 4))
    assert not _launch_streams(lambda: jitops.subtract(sq[:1024, :1024].T, sq[:1024, :1024]))
    # neither input contiguous along the rows nor staged: nothing streams
    assert not _launch_streams(lambda: jitops.subtract(sq[:, ::2], sq[:, 1::2]))
    monkeypatch.setattr(config, "STREAM_BYTES", 0)  # switched off
    assert not _launch_streams(lambda: jitops.subtract(big, big, out=o))
    monkeypatch.setattr(kernels, "STREAM_AVAILABLE", False)  # not x86-64
    monkeypatch.setattr(config, "STREAM_BYTES", 1)
    assert not _launch_streams(lambda: jitops.subtract(big, big, out=o))
    dispatch.clear()


@pytest.mark.skipif(not X86, reason="streaming stores are x86-64 only")
@pytest.mark.parametrize("dtype, insn", [("float32", "movntps"), ("float64", "movntpd"),
                                         ("int32", "movntdq")])
def test_the_machine_code_has_vector_non_temporal_stores(dtype, insn):
    """The loop vectoriser turned the scalar non-temporal stores into vector ones (compiled
    afresh, uncached: a kernel loaded from the disk cache carries no assembly text)."""
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels.spec import KernelSpec

    dt = np.dtype(dtype)
    spec = KernelSpec("add", None, dt, dt, dt, dt, stream=True)
    task = inner(kernels._task.py_func)
    sig = (spec.numba_type,) + (kernels._I64,) * 5
    task.compile(sig)
    asm = task.inspect_asm(sig)
    assert insn in asm, f"no {insn} in the {dtype} add task"


@pytest.mark.skipif(not X86, reason="streaming stores are x86-64 only")
def test_a_user_ops_rows_vectorise_with_non_temporal_stores():
    """A user op's row loops (LLVM IR around a call of its element function) are vectorised
    after the element is inlined: vector arithmetic and vector non-temporal stores in a
    streaming task compiled afresh (uncached)."""
    import re

    from jitops.cpu.compile import registries
    from jitops.cpu.compile.jit import inner
    from jitops.cpu.kernels import nary

    f = jitops.elementwise(lambda a, b, c: a * b + c)
    dt = np.dtype(np.float32)
    f(np.ones(3, dt), np.ones(3, dt), np.ones(3, dt))  # registers the function
    spec = nary.UserSpec(f.key, (dt, dt, dt), dt, dt, f.returned(dt), False, True)
    task = inner(nary.user_task.py_func)
    sig = (spec.numba_type,) + (kernels._I64,) * 3
    registries.compile_with(lambda: task.compile(sig), builtin=False)
    found = set(re.findall(r"\bv(?:movntps|mulps|addps)\b", task.inspect_asm(sig)))
    assert found == {"vmovntps", "vmulps", "vaddps"}, found


def _offset_view(n: int, dtype, off: int) -> np.ndarray:
    """An n-element output starting ``off`` elements past a 32-byte boundary of a buffer
    filled with a poison pattern (so every phase of head, body and tail is exercised)."""
    dt = np.dtype(dtype)
    raw = np.full((n + 64) * dt.itemsize, 0xA5, np.uint8)
    start = (-raw.ctypes.data % stream.STREAM_ALIGN) + off * dt.itemsize
    return raw[start:start + n * dt.itemsize].view(dt)


def _data(n, dtype, seed):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n) * 50
    return (v > 0) if dtype == "bool" else v.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_element_is_numpys_at_every_output_alignment(stream_everything, dtype):
    itemsize = np.dtype(dtype).itemsize
    for n in (1, 7, 63, 64 // itemsize + 3, 1000, 4099):
        x, y = _data(n, dtype, 1), _data(n, dtype, 2)
        for off in range(0, stream.STREAM_ALIGN // itemsize + 1):
            for op, ref, xv, yv in (("maximum", np.maximum, x, y), ("add", np.add, x, y),
                                    ("maximum", np.maximum, x, y[:1]),  # scalar_y
                                    ("add", np.add, x[:1], y),  # scalar_x
                                    ("minimum", np.minimum, y[:1], x)):
                out = _offset_view(n, dtype, off)
                got = getattr(jitops, op)(xv, yv, out=out)
                exp = ref(xv, yv)
                assert got is out
                np.testing.assert_array_equal(out.view(np.uint8), exp.view(np.uint8),
                                              err_msg=f"{op} n={n} offset={off}")


def test_broadcast_rows_and_the_parallel_kernel(stream_everything):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 40, 1000)).astype(np.float32)
    Y = rng.standard_normal(40).astype(np.float32)
    out = _offset_view(X.size, np.float32, 3).reshape(X.shape)
    jitops.subtract(X, Y, broadcast="pdpd", axis=1, out=out)  # scalar_y rows
    np.testing.assert_array_equal(out, X - Y[:, None])
    jitops.subtract(Y[:, None], X, out=out)  # scalar_x rows
    np.testing.assert_array_equal(out, Y[:, None] - X)
    col = rng.standard_normal((240, 1)).astype(np.float32)  # both inputs broadcast
    row = rng.standard_normal((1, 1000)).astype(np.float32)
    col2 = rng.standard_normal((240, 1)).astype(np.float32)
    both = np.broadcast_to(col, (240, 1000)), np.broadcast_to(col2, (240, 1000))
    for off in (0, 1, 5):
        o = _offset_view(240 * 1000, np.float32, off).reshape(240, 1000)
        jitops.subtract(col, row, out=o)
        np.testing.assert_array_equal(o, col - row)
        jitops.subtract(row, col, out=o)
        np.testing.assert_array_equal(o, row - col)
        jitops.subtract(*both, out=o)  # both constant along every row (staged)
        np.testing.assert_array_equal(o, both[0] - both[1])
    big = rng.standard_normal(4 * config.PARALLEL_THRESHOLD + 5).astype(np.float32)
    for off in (0, 1, 5):
        o = _offset_view(big.size, np.float32, off)
        jitops.multiply(big, big[::-1].copy(), out=o)
        np.testing.assert_array_equal(o, big * big[::-1])
        assert np.array_equal(jitops.fmin(big, 0.5), np.fmin(big, np.float32(0.5)))


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "float16", "float32", "float64"])
def test_transposes_stream_their_tile_rows_at_every_output_alignment(stream_everything, dtype,
                                                                  tile_every_width):
    """A tiled task streams each tile row of out after staging the transposed input: rows of
    TILE_J elements and a partial last tile, starting at every alignment (rows of an odd
    length move the start of each one), serial and parallel-sized, either operand
    transposed; every element is NumPy's, and the launch really is a tiled streaming one."""
    from jitops.cpu.kernels import nary

    itemsize = np.dtype(dtype).itemsize
    for rows, cols in ((67, 1029), (130, 700)):  # 69k and 91k elements: both drivers
        a = _data(rows * cols, dtype, 7).reshape(cols, rows).T  # (rows, cols), transposed
        b = _data(rows * cols, dtype, 8).reshape(rows, cols)
        for off in (0, 1, stream.STREAM_ALIGN // itemsize - 1):
            for xv, yv, op, ref in ((a, b, "maximum", np.maximum), (b, a, "add", np.add)):
                out = _offset_view(rows * cols, dtype, off).reshape(rows, cols)
                dispatch.clear()
                got = getattr(jitops, op)(xv, yv, out=out)
                (launch,) = repeat.FAST.values()
                (spec,) = [sp for sp, addr in [*kernels._TASKS.items(), *nary._TASKS.items()]
                           if addr == launch.task]
                assert spec.tiled and spec.stream, (op, rows, cols, off)
                assert got is out
                np.testing.assert_array_equal(out.view(np.uint8), ref(xv, yv).view(np.uint8),
                                              err_msg=f"{op} {rows}x{cols} offset={off}")


@pytest.mark.parametrize("dtype", ["float16", "int8", "float32", "float64"])
def test_user_ops_stream_in_aligned_chunks(stream_everything, monkeypatch, dtype):
    """User-op rows run in chunks of BUFFER elements: every chunk after the head must start
    aligned too (a misaligned one faults). Compared with the same calls unstreamed."""
    f = jitops.elementwise(lambda a, b, c: a * b + c)
    for n in (5, 1030, 3 * 1024 + 17, 4 * config.PARALLEL_THRESHOLD + 3):
        a, b, c = _data(n, dtype, 3), _data(n, dtype, 4), _data(1, dtype, 5)
        monkeypatch.setattr(config, "STREAM_BYTES", 0)
        dispatch.clear()
        exp = f(a, b, c)
        monkeypatch.setattr(config, "STREAM_BYTES", 1)
        dispatch.clear()
        for off in (0, 1, 3):
            out = _offset_view(n, exp.dtype, off)
            f(a, b, c, out=out)
            np.testing.assert_array_equal(out.view(np.uint8), exp.view(np.uint8),
                                          err_msg=f"n={n} offset={off}")


def test_user_op_with_every_input_broadcast_streams_its_rows(stream_everything, monkeypatch):
    """No input read in full (an outer product): every input staged, the rows streamed."""
    f = jitops.elementwise(lambda a, b, c: a * b - c)
    col = np.linspace(-3, 3, 300, dtype=np.float32)[:, None]
    row = np.linspace(1, 2, 1031, dtype=np.float32)[None, :]
    c = np.float32(0.25)
    assert _launch_streams(lambda: f(col, row, c))
    for off in (0, 1, 3):
        out = _offset_view(300 * 1031, np.float32, off).reshape(300, 1031)
        f(col, row, c, out=out)
        np.testing.assert_array_equal(out, col * row - c)


def test_store_choice_keeps_the_kind_with_the_lower_median(monkeypatch):
    """StoreChoice alternates streamed and ordinary-store calls (streamed first), ROUNDS of
    each, then keeps the kind whose median time is lower; the ordinary task is only asked
    for once a call needs it."""
    from jitops.cpu import backend
    from jitops.cpu.kernels.spec import KernelSpec

    asked = []
    monkeypatch.setattr(kernels, "task_address", lambda spec: asked.append(spec) or 222)
    dt = np.dtype(np.float32)
    spec = KernelSpec("subtract", None, dt, dt, dt, dt, True, False)
    for plain_time, keep in ((1.0, 222), (3.0, 111)):
        asked.clear()
        c = backend.StoreChoice(111, spec)
        kinds = []
        chosen = None
        while chosen is None:
            addr, kind = c.next()
            assert addr == (222 if kind else 111)
            kinds.append(kind)
            # streamed calls take 2 s, with one outlier the median ignores
            chosen = c.record(kind, plain_time if kind else (9.0 if len(kinds) == 1 else 2.0))
        assert kinds == [0, 1] * backend.StoreChoice.ROUNDS
        assert chosen == keep
        assert len(asked) == 1 and asked[0].stream is False and asked[0].op == "subtract"


def test_a_write_only_output_is_exact_while_and_after_its_stores_are_chosen(
        stream_everything, monkeypatch):
    """An outer difference (every input broadcast) streams at first and times both store
    kinds on its first calls (here a clock on which ordinary stores are faster); every call
    gives NumPy's answer, the launch is memoised for repeats only once the choice is made,
    and the repeats then run the ordinary-store task. An output beside which an input is read
    in full makes no choice (streaming wins there)."""
    from jitops.cpu import backend

    def clock():  # measured calls alternate streamed (2 s) and ordinary (1 s)
        t, k = 0.0, 0
        while True:
            yield t
            t += 2.0 if k % 2 == 0 else 1.0
            k += 1
            yield t

    ticks = clock()
    monkeypatch.setattr(backend, "_clock", lambda: next(ticks))
    col = np.arange(600, dtype=np.float32).reshape(600, 1)
    row = np.linspace(-3, 3, 512, dtype=np.float32).reshape(1, 512)
    out = np.empty((600, 512), np.float32)
    want = col - row
    calls = 2 * backend.StoreChoice.ROUNDS

    def memoised(launch) -> bool:
        return any(m.latest is not None and m.latest.launch is launch for m in repeat.MEMOS)

    for k in range(calls + 3):
        out[:] = np.nan
        jitops.subtract(col, row, out=out)
        np.testing.assert_array_equal(out, want)
        (launch,) = repeat.FAST.values()
        assert (launch.choice is None) == (k >= calls - 1)  # chosen by the last timed call
        assert memoised(launch) == (k >= calls - 1)
    specs = {addr: sp for sp, addr in kernels._TASKS.items()}
    assert specs[launch.task].op == "subtract" and specs[launch.task].stream is False
    # x - y reads both inputs in full: streamed, no choice
    dispatch.clear()
    x = np.ones((600, 512), np.float32)
    jitops.subtract(x, x, out=out)
    (launch,) = repeat.FAST.values()
    assert launch.choice is None and specs[launch.task].stream is True
