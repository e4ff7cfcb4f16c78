"""The benchmark grid (``bench --grid``): loop variant x dtype x size, jitops against NumPy,
as NumPy's own ``bench_ufunc_strides`` sweeps its loops. Each cell is a paired ratio (NumPy's
time over jitops', > 1: jitops faster) of ``x - y`` into ``out=``:

* ``contig``  -- three unit-stride arrays;
* ``scalar``  -- ``x - y`` with ``y`` a 0-d array (one operand constant along every row);
* ``weak``    -- ``x - 3``, a Python int (NumPy 2's weak scalar: the result is x's dtype);
* ``strided`` -- every operand a view with step 2 (no unit stride anywhere);
* ``tiled``   -- ``X.T - Y`` on square matrices (operands that disagree on layout).
"""

from __future__ import annotations

import numpy as np

import jitops

from . import harness

VARIANTS = ("contig", "scalar", "weak", "strided", "tiled")
DTYPES = ("float16", "float32", "float64", "int16", "complex64", "complex128")
SIZES = (10**2, 10**3, 10**4, 10**5, 10**6, 10**7)


def _arrays(variant: str, dtype: str, n: int):
    rng = np.random.default_rng(7)

    def data(shape):
        v = rng.standard_normal(shape) * 100
        if np.dtype(dtype).kind == "c":
            v = v + 1j * rng.standard_normal(shape)
        return v.astype(dtype)

    if variant == "contig":
        x, y = data(n), data(n)
        return x, y, np.empty_like(x)
    if variant == "scalar":
        x = data(n)
        return x, np.asarray(3, dtype), np.empty_like(x)
    if variant == "weak":
        x = data(n)
        return x, 3, np.empty_like(x)
    if variant == "strided":
        x, y, o = data(2 * n), data(2 * n), np.empty(2 * n, dtype)
        return x[::2], y[::2], o[::2]
    side = max(64, int(round(n ** 0.5)))  # tiled: side x side matrices
    a, y = data((side, side)), data((side, side))
    return a.T, y, np.empty_like(y)


def run(scale: float, progress) -> dict:
    """Every cell, with progress; the result is JSON-able."""
    cells = []
    total = len(VARIANTS) * len(DTYPES) * len(SIZES)
    i = 0
    for variant in VARIANTS:
        for dtype in DTYPES:
            for n in SIZES:
                i += 1
                x, y, o = _arrays(variant, dtype, n)
                s = harness.alternate({"jitops": lambda: jitops.subtract(x, y, out=o),
                                       "numpy": lambda: np.subtract(x, y, out=o)},
                                      max(5, int(15 * scale)), budget_s=2 * scale)
                ratio = harness.paired_ratio(s["numpy"], s["jitops"])
                cells.append({"variant": variant, "dtype": dtype, "n": int(o.size),
                              "jitops_s": harness.median(s["jitops"]),
                              "numpy_s": harness.median(s["numpy"]), "ratio": ratio})
                if i % 8 == 0 or i == total:
                    progress(f"  grid {i}/{total}: {variant} {dtype} {o.size:,} elements: "
                             f"{ratio:.2f}x NumPy")
    return {"variants": list(VARIANTS), "dtypes": list(DTYPES), "sizes": list(SIZES),
            "cells": cells}


def _cell(grid: dict, variant: str, dtype: str, k: int) -> dict:
    rows = [c for c in grid["cells"] if c["variant"] == variant and c["dtype"] == dtype]
    return rows[k]


def markdown(grid: dict) -> str:
    head = " | ".join(f"{n:.0e}" for n in grid["sizes"])
    lines = ["Grid: `x - y` into `out=`, speed-up over NumPy (NumPy's time / jitops'; paired "
             "rounds) by loop variant, dtype and elements (tiled: square `X.T - Y` of about "
             "that many); *passes NumPy from*: the smallest size from which every cell of the "
             "row is at least 1×:", "", f"| variant | dtype | {head} | passes NumPy from |",
             "|---|---|" + "---:|" * (len(grid["sizes"]) + 1)]
    for v in grid["variants"]:
        for d in grid["dtypes"]:
            ratios = [_cell(grid, v, d, k)["ratio"] for k in range(len(grid["sizes"]))]
            vals = " | ".join(f"{r:.2f}×" for r in ratios)
            lines.append(f"| {v} | {d} | {vals} | {crossover(grid['sizes'], ratios)} |")
    return "\n".join(lines)


def crossover(sizes, ratios) -> str:
    """The smallest size from which jitops is at least NumPy's speed at every larger size."""
    start = None
    for n, r in zip(sizes, ratios):
        if r >= 1.0:
            start = n if start is None else start
        else:
            start = None
    return "never" if start is None else f"{start:.0e}"


def plot(grid: dict, ax) -> None:
    """A heat map of the ratios (log colour scale centred on 1: NumPy's speed)."""
    from matplotlib.colors import LogNorm

    rows = [(v, d) for v in grid["variants"] for d in grid["dtypes"]]
    vals = np.array([[_cell(grid, v, d, k)["ratio"] for k in range(len(grid["sizes"]))]
                     for v, d in rows])
    top = max(float(vals.max()), 1 / float(vals.min()), 2.0)
    im = ax.imshow(vals, cmap="RdYlGn", norm=LogNorm(1 / top, top), aspect="auto")
    for (i, j), val in np.ndenumerate(vals):
        ax.text(j, i, f"{val:.1f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(grid["sizes"])), [f"{n:.0e}" for n in grid["sizes"]])
    ax.set_yticks(range(len(rows)), [f"{v} {d}" for v, d in rows], fontsize=7)
    ax.set_xlabel("elements")
    ax.set_title("speed-up over NumPy by variant, dtype, size")
    ax.figure.colorbar(im, ax=ax, fraction=0.05)
