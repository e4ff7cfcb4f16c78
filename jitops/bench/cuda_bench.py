"""The CUDA section of the benchmark suite (``bench --cuda``; on by itself where a GPU is).

Each case runs jitops on device arrays side by side with CuPy and PyTorch (where installed),
timed with CUDA events on the launch's stream (medians) two ways:

* **call** -- one call on an idle GPU, from the host's first line to the kernel's end: what a
  program waiting for each result sees, the host's work included;
* **kernel** -- the GPU's time alone: a few calls queued behind a kernel that sleeps on the
  GPU (``cuda.nanosleep``) while the host issues them, so none waits for the host.

The share of the card's theoretical memory bandwidth (from its memory clock and bus width) is
that of the kernel time. Where no GPU is usable the section says why and records nothing
else: no number here is ever measured on the simulator.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable

import numpy as np

CASES = (  # (key, title, x shape, y shape, broadcast, axis)
    ("contig_1e7", "subtract 1e7 float32", (10_000_000,), (10_000_000,), "numpy", -1),
    ("contig_1e8", "subtract 1e8 float32", (100_000_000,), (100_000_000,), "numpy", -1),
    ("row", "subtract (4096, 4096) - (4096,)", (4096, 4096), (4096,), "numpy", -1),
    ("pdpd", "subtract pdpd (64, 128, 56, 56), axis=1", (64, 128, 56, 56), (128,), "pdpd", 1),
    ("transposed", "subtract X.T - Y (4096, 4096)", (4096, 4096), (4096, 4096), "numpy", -1),
)

#: A Python scalar operand, the commonest call of all (``x - 2.0``, ``x ** 2``): (key, title,
#: op, size, the scalar).
SCALAR_CASES = (
    ("scalar_power", "x ** 2, 1e7 float32 (a Python scalar exponent)", "power", 10_000_000,
     2.0),
)


#: jitops' reductions (jitops.cuda.reduce) against the contenders' own sums: (key, title).
REDUCE_CASES = (
    ("sum_to_channels", "sum_to (32, 64, 56, 56) -> (64,), pdpd axis 1 (others: sum over "
     "axes 0, 2, 3)"),
    ("sq_diff_sum", "sum((a - b) ** 2), two 1e7 float32 (jitops.reduce: one pass)"),
)


def _sq_diff(a, b):
    d = a - b
    return d * d


def reduction_row(key: str, title: str, contenders: dict, rounds: int, peak: float,
                  shrink: int = 1) -> dict:
    """One row of :data:`REDUCE_CASES` (sizes divided by ``shrink``: the tests' smoke run).
    jitops runs on PyTorch tensors where PyTorch has CUDA (its allocator, which the
    reductions' partials come from, does not synchronise the device), else Numba arrays."""
    from numba import cuda

    import jitops

    rng = np.random.default_rng(1)
    if key == "sum_to_channels":
        n, m = max(1, 32 // shrink), max(1, 56 // shrink)
        host = [rng.standard_normal((n, 64, m, m), dtype=np.float32)]
    else:
        host = [rng.standard_normal(10_000_000 // shrink, dtype=np.float32) for _ in range(2)]
    th, cp = contenders.get("torch"), contenders.get("cupy")
    dev = [th.as_tensor(a, device="cuda") for a in host] if th is not None else \
        [cuda.to_device(a) for a in host]
    if key == "sum_to_channels":
        fns = {"jitops": lambda: jitops.sum_to(dev[0], (64,), broadcast="pdpd", axis=1)}
        if th is not None:
            fns["torch"] = lambda: dev[0].sum(dim=(0, 2, 3))
        if cp is not None:
            cx = cp.asarray(dev[0])
            fns["cupy"] = lambda: cx.sum(axis=(0, 2, 3))
    else:
        op = jitops.reduce(_sq_diff, "sum")
        fns = {"jitops": lambda: op(dev[0], dev[1])}
        if th is not None:
            fns["torch"] = lambda: ((dev[0] - dev[1]) ** 2).sum()
        if cp is not None:
            ca, cb = cp.asarray(dev[0]), cp.asarray(dev[1])
            fns["cupy"] = lambda: ((ca - cb) ** 2).sum()
    moved = sum(a.nbytes for a in host)  # each input read once (the results are small)
    return _timed_row(key, title, fns, moved, rounds, peak)


def _timed_row(key: str, title: str, fns: dict, moved: int, rounds: int, peak: float) -> dict:
    """A row of the table: each contender's call and kernel times (medians), the kernel's
    share of ``peak`` for ``moved`` bytes, and the contenders' ratios to jitops."""
    t = {k: _time(f, rounds) for k, f in fns.items()}
    g = {k: _time(f, rounds, queued=4) for k, f in fns.items()}
    return {"key": key, "title": title, "median_s": t, "kernel_s": g,
            "fraction_of_peak": moved / g["jitops"] / peak,
            "ratios": {k: v / t["jitops"] for k, v in t.items() if k != "jitops"},
            "kernel_ratios": {k: v / g["jitops"] for k, v in g.items() if k != "jitops"}}


def peak_bandwidth(dev) -> float:
    """Theoretical DRAM bandwidth of a Numba device, bytes/s (DDR: two transfers a clock)."""
    clock_khz = dev.MEMORY_CLOCK_RATE
    bus_bits = dev.GLOBAL_MEMORY_BUS_WIDTH
    return 2 * clock_khz * 1e3 * bus_bits / 8


@functools.cache
def _sleeper():
    """A one-thread kernel that keeps the GPU busy for ``ms`` milliseconds."""
    from numba import cuda

    @cuda.jit
    def sleep(ms):
        for _ in range(ms):
            cuda.nanosleep(1_000_000)

    return sleep


def _time(fn: Callable[[], object], rounds: int, queued: int = 0) -> float:
    """Median time of one call, between events: alone on an idle GPU, or with ``queued``
    calls issued while the GPU sleeps (the kernel's time alone)."""
    from numba import cuda

    start, stop = cuda.event(), cuda.event()
    fn()  # compile / warm
    cuda.synchronize()
    times = []
    for _ in range(rounds):
        if queued:
            _sleeper()[1, 1](20)  # 20 ms: far longer than issuing the calls takes
        start.record()
        for _ in range(queued or 1):
            fn()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3 / (queued or 1))
    return statistics.median(times)


def run(scale: float, progress) -> dict:
    from ..core.device import cuda_unavailable_reason

    why = cuda_unavailable_reason()
    if why is not None:
        progress(f"cuda: skipped ({why})")
        return {"available": False, "reason": why}
    from numba import cuda
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    import jitops

    dev = cuda.get_current_device()
    peak = peak_bandwidth(dev)
    contenders = {}
    try:
        import cupy
        contenders["cupy"] = cupy
    except Exception:  # pragma: no cover - optional
        pass
    try:
        import torch
        if torch.cuda.is_available():
            contenders["torch"] = torch
    except Exception:  # pragma: no cover - optional
        pass
    rounds = max(5, int(21 * scale))
    rows = []
    rng = np.random.default_rng(0)
    for key, title, xs, ys, mode, axis in CASES:
        progress(f"cuda: {title} ...")
        x = cuda.to_device(rng.standard_normal(xs, dtype=np.float32))
        y = cuda.to_device(rng.standard_normal(ys, dtype=np.float32))
        if key == "transposed":  # a view (numba's DeviceNDArray.T would copy)
            x = DeviceNDArray(x.shape[::-1], x.strides[::-1], x.dtype, gpu_data=x.gpu_data)
        out = cuda.device_array(jitops.subtract(x, y, broadcast=mode, axis=axis).shape,
                                np.float32)
        moved = 4 * (out.size + x.size + y.size)  # written once, each input read once
        fns = {"jitops": lambda: jitops.subtract(x, y, broadcast=mode, axis=axis, out=out)}
        if "cupy" in contenders and mode == "numpy":
            cp = contenders["cupy"]
            cx, cy, co = cp.asarray(x), cp.asarray(y), cp.asarray(out)
            fns["cupy"] = lambda: cp.subtract(cx, cy, out=co)
        if "torch" in contenders and mode == "numpy":
            th = contenders["torch"]
            tx, ty, to = (th.as_tensor(a, device="cuda") for a in (x, y, out))
            fns["torch"] = lambda: th.sub(tx, ty, out=to)
        rows.append(_timed_row(key, title, fns, moved, rounds, peak))
    for key, title, op, n, scalar in SCALAR_CASES:
        progress(f"cuda: {title} ...")
        x = cuda.to_device(rng.standard_normal(n, dtype=np.float32))
        out = cuda.device_array(n, np.float32)
        fns = {"jitops": lambda: getattr(jitops, op)(x, scalar, out=out)}
        if "cupy" in contenders:
            cp = contenders["cupy"]
            cx, co = cp.asarray(x), cp.asarray(out)
            fns["cupy"] = lambda: getattr(cp, op)(cx, scalar, out=co)
        if "torch" in contenders:
            th = contenders["torch"]
            tx, to = th.as_tensor(x, device="cuda"), th.as_tensor(out, device="cuda")
            fns["torch"] = lambda: getattr(th, {"power": "pow"}.get(op, op))(tx, scalar, out=to)
        rows.append(_timed_row(key, title, fns, 8 * n, rounds, peak))
    for key, title in REDUCE_CASES:
        progress(f"cuda: {title} ...")
        try:
            rows.append(reduction_row(key, title, contenders, rounds, peak))
        except Exception as e:  # a row that fails says why; the others stand
            rows.append({"key": key, "title": title, "error": f"{type(e).__name__}: {e}"})
    return {"available": True, "device": dev.name.decode() if isinstance(dev.name, bytes)
            else str(dev.name), "peak_GBps": peak / 1e9, "rows": rows}


def markdown(result: dict) -> str:
    if not result.get("available"):
        return f"CUDA: not run ({result.get('reason')})."
    lines = [f"CUDA on {result['device']} (theoretical {result['peak_GBps']:.0f} GB/s); "
             "call: one call on an idle GPU, host included; kernel: the GPU's time alone; "
             "(×): the contender's time over jitops'", "",
             "| case | jitops call | jitops kernel | kernel share of peak | CuPy call "
             "| CuPy kernel | PyTorch call | PyTorch kernel |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['title']} | failed: {r['error'][:200]} | - | - | - | - | - | - |")
            continue
        t, g = r["median_s"], r.get("kernel_s", {})
        cells = []
        for k in ("cupy", "torch"):
            cells.append(f"{t[k] * 1e6:.1f} µs ({r['ratios'][k]:.2f}×)" if k in t else "-")
            cells.append(f"{g[k] * 1e6:.1f} µs ({r['kernel_ratios'][k]:.2f}×)" if k in g
                         else "-")
        kernel = f"{g['jitops'] * 1e6:.1f} µs" if "jitops" in g else "-"
        lines.append(f"| {r['title']} | {t['jitops'] * 1e6:.1f} µs | {kernel} "
                     f"| {r['fraction_of_peak']:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
