"""Numba CPU kernels: one loop nest for every op and dtype, specialised through a KernelSpec.

The iteration space is the planner's coalesced shape. It is cut into *tasks*: a block of at
most ``BLOCK`` elements of one row, or several whole short rows. ``_kernel_parallel`` runs the
tasks under ``prange``; ``_kernel_serial`` runs the same tasks in a plain loop and is used below
``PARALLEL_THRESHOLD`` elements, where a parallel launch costs more than the work.

Each row runs one of four inner loops, picked once per row from the plan's variant (the
NumPy ``BINARY_LOOP_FAST`` idea: the same body under branch conditions the compiler exploits):

* ``contig``   -- all three operands unit-stride: LLVM vectorises it;
* ``scalar_x`` / ``scalar_y`` -- one input constant along the row, loaded once;
* ``strided``  -- anything else.

Operands are passed as integer data addresses plus one int64 ``meta`` array (shape, strides,
offsets, task geometry), so array rank, layout and writeability never multiply the number of
compiled signatures: there is exactly one signature per KernelSpec.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import _cache, _config
from ._plan import CONTIG, SCALAR_X, SCALAR_Y, STRIDED, Plan
from ._spec import element, pointers

VARIANT_CODES = {CONTIG: 0, SCALAR_X: 1, SCALAR_Y: 2, STRIDED: 3}

# meta layout (int64): a fixed header, then shape, out/x/y strides (nd each)
M_ND, M_VARIANT, M_BLOCK, M_NTASKS, M_ROWS_PER_TASK, M_NBLK, M_ROWS = 0, 1, 2, 3, 4, 5, 6
M_OFF_O, M_OFF_X, M_OFF_Y = 7, 8, 9
HDR = 10

_JIT = {"nogil": True, "error_model": "numpy"}


@njit(**_JIT)
def _row(spec, o, x, y, oo, xo, yo, n, var, so, sx, sy):
    if var == 0:
        for j in range(n):
            o[oo + j] = element(spec, x[xo + j], y[yo + j])
    elif var == 1:
        a = x[xo]
        for j in range(n):
            o[oo + j] = element(spec, a, y[yo + j])
    elif var == 2:
        b = y[yo]
        for j in range(n):
            o[oo + j] = element(spec, x[xo + j], b)
    else:
        for j in range(n):
            o[oo + j * so] = element(spec, x[xo + j * sx], y[yo + j * sy])


@njit(**_JIT)
def _task(spec, po, px, py, meta, t):
    o, x, y = pointers(spec, po, px, py)
    nd = meta[M_ND]
    var = meta[M_VARIANT]
    inner = meta[HDR + nd - 1]
    so = meta[HDR + 2 * nd - 1]
    sx = meta[HDR + 3 * nd - 1]
    sy = meta[HDR + 4 * nd - 1]
    nblk = meta[M_NBLK]
    if nblk > 1:  # a block of one long row
        r0 = t // nblk
        r1 = r0 + 1
        j0 = (t - r0 * nblk) * meta[M_BLOCK]
        j1 = min(j0 + meta[M_BLOCK], inner)
    else:  # whole short rows
        r0 = t * meta[M_ROWS_PER_TASK]
        r1 = min(r0 + meta[M_ROWS_PER_TASK], meta[M_ROWS])
        j0 = 0
        j1 = inner
    oo = meta[M_OFF_O] + j0 * so
    xo = meta[M_OFF_X] + j0 * sx
    yo = meta[M_OFF_Y] + j0 * sy
    if nd == 1:
        _row(spec, o, x, y, oo, xo, yo, j1 - j0, var, so, sx, sy)
        return
    # Unravel the first row once (div/mod), then walk rows with an odometer.
    idx = np.empty(nd - 1, np.int64)
    r = r0
    for d in range(nd - 2, -1, -1):
        n = meta[HDR + d]
        i = r % n
        r //= n
        idx[d] = i
        oo += i * meta[HDR + nd + d]
        xo += i * meta[HDR + 2 * nd + d]
        yo += i * meta[HDR + 3 * nd + d]
    for _ in range(r0, r1):
        _row(spec, o, x, y, oo, xo, yo, j1 - j0, var, so, sx, sy)
        for d in range(nd - 2, -1, -1):
            idx[d] += 1
            oo += meta[HDR + nd + d]
            xo += meta[HDR + 2 * nd + d]
            yo += meta[HDR + 3 * nd + d]
            if idx[d] < meta[HDR + d]:
                break
            n = meta[HDR + d]
            idx[d] = 0
            oo -= n * meta[HDR + nd + d]
            xo -= n * meta[HDR + 2 * nd + d]
            yo -= n * meta[HDR + 3 * nd + d]


@njit(parallel=True, **_JIT)
def _kernel_parallel(spec, po, px, py, meta):
    for t in prange(meta[M_NTASKS]):
        _task(spec, po, px, py, meta, t)


@njit(**_JIT)
def _kernel_serial(spec, po, px, py, meta):
    for t in range(meta[M_NTASKS]):
        _task(spec, po, px, py, meta, t)


KERNELS = {"parallel": _kernel_parallel, "serial": _kernel_serial}
#: Whether each kernel has the on-disk cache (JITOPS_CACHE=0 or no writable directory: off).
CACHED = {name: _cache.enable(k) for name, k in KERNELS.items()}


def build_meta(plan: Plan, block: int | None = None) -> np.ndarray:
    """The int64 ``meta`` array a kernel reads: plan geometry plus the task decomposition."""
    block = block or _config.BLOCK
    shape = plan.iter_shape
    nd = len(shape)
    inner = shape[-1]
    rows = 1
    for n in shape[:-1]:
        rows *= n
    if inner >= 2 * block:
        nblk = -(-inner // block)
        rows_per_task = 1
        ntasks = rows * nblk
    else:
        nblk = 1
        rows_per_task = max(1, block // max(inner, 1))
        ntasks = -(-rows // rows_per_task) if inner else 0
    head = [nd, VARIANT_CODES[plan.variant], block, ntasks, rows_per_task, nblk, rows,
            *plan.iter_offsets]
    meta = np.array(head + list(shape) + [s for st in plan.iter_strides for s in st], np.int64)
    return meta
