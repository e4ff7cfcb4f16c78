"""``python -m jitops warmup``: compile the common signatures into the on-disk cache.

A first call of a new (op, dtypes, act) signature compiles its task (~0.5-1 s); the drivers
that every signature shares compile once per machine. Warming up does that ahead of time --
in a Docker build, a CI cache step, a cluster's node setup -- so that every later process
finds the kernels on disk (~0.15 s for its first call). Each signature is compiled by calling
the public op on a few elements, so what lands in the cache is exactly what a real call looks
up; one parallel-size call compiles the parallel driver, and one user op compiles the
N-input drivers every ``@jitops.elementwise`` op shares.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

#: The defaults: NumPy's names (the Paddle names run the same kernels) plus Paddle's
#: integer-truncating ``elementwise_div``, on the dtypes models and arrays mostly use.
OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin",
       "elementwise_div")
DTYPES = ("float32", "float64", "int32", "int64")
#: Activations that apply to integer results too (the others need a floating result).
INTEGER_ACTS = (None, "relu", "relu6")


def _user_op(x, w, b):
    """The warm-up user op (module-level: its kernel is cached like the built-ins)."""
    return x * w + b


def steps(ops: Sequence[str] = OPS, dtypes: Sequence[str] = DTYPES,
          acts: Sequence[str | None] = (None,)) -> list[tuple[str, Callable[[], object]]]:
    """The warm-up as ``(label, call)`` pairs, in the order they run.

    Raises
    ------
    ValueError
        For an op, dtype or activation jitops does not have (named), before anything compiles.
    """
    import jitops
    from jitops.core import config

    for name in ops:
        if name.startswith("_") or not callable(getattr(jitops, name, None)) \
                or name in ("elementwise", "result_shape") or "thread" in name:
            raise ValueError(f"warmup: no op named {name!r}")
    dts = []
    for name in dtypes:
        try:
            dts.append(np.dtype(name))
        except TypeError:
            raise ValueError(f"warmup: {name!r} is not a dtype") from None
    for a in acts:
        if a is not None and a not in jitops.ACTIVATIONS:
            raise ValueError(f"warmup: no activation named {a!r}; jitops has "
                             f"{', '.join(jitops.ACTIVATIONS)}")
    out: list[tuple[str, Callable[[], object]]] = []
    for dt in dts:
        x, y = np.ones(4, dt), np.ones(4, dt)
        for name in ops:
            fn = getattr(jitops, name)
            for a in acts:
                if a not in INTEGER_ACTS and dt.kind in "biu" and name != "divide":
                    continue  # SPEC 1: a float activation on an integer result is refused
                label = f"{name} {dt.name}" + (f" act={a}" if a else "")
                out.append((label, lambda f=fn, x=x, y=y, a=a: f(x, y, act=a)))
    # the parallel driver, on the first signature warmed (no extra task to compile)
    big = np.ones(config.parallel_size(3 * dts[0].itemsize), dts[0])
    first = getattr(jitops, ops[0])
    out.append(("parallel driver", lambda: first(big, big)))
    user = jitops.elementwise(_user_op)
    uargs = [np.ones(config.PARALLEL_THRESHOLD, np.float32)] * 3
    out.append(("user-op drivers", lambda: (user(*[u[:4] for u in uargs]), user(*uargs))))
    return out


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "-" * (width - filled) + f"] {done}/{total}"


def run(ops: Sequence[str] = OPS, dtypes: Sequence[str] = DTYPES,
        acts: Sequence[str | None] = (None,), stream=None) -> int:
    """Compile the signatures into the cache, with a progress bar on ``stream`` (stderr).

    Returns the exit status: 0, or 1 where the cache is off or cannot be written (the kernels
    would then live only as long as this process).
    """
    from jitops.cpu.compile import cache
    from jitops.cpu.kernels import binary as kernels

    stream = sys.stderr if stream is None else stream
    where = cache.location(kernels.KERNELS["serial"])
    if where is None:
        print("jitops warmup: the kernel cache is off (JITOPS_CACHE=0) or has no usable "
              "directory: nothing would be kept", file=stream)
        return 1
    todo = steps(ops, dtypes, acts)
    tty = getattr(stream, "isatty", lambda: False)()
    stats = kernels.KERNELS["task"].stats
    hits0, misses0 = sum(stats.cache_hits.values()), sum(stats.cache_misses.values())
    t0 = time.perf_counter()
    for i, (label, call) in enumerate(todo):
        t = time.perf_counter()
        call()
        line = f"{_bar(i + 1, len(todo))} {label} ({time.perf_counter() - t:.2f} s)"
        if tty:
            print("\r\x1b[K" + line, end="" if i + 1 < len(todo) else "\n", file=stream,
                  flush=True)
        else:
            print(line, file=stream, flush=True)
    hits = sum(stats.cache_hits.values()) - hits0
    compiled = sum(stats.cache_misses.values()) - misses0
    print(f"jitops warmup: {len(todo)} steps in {time.perf_counter() - t0:.1f} s; op "
          f"signatures: {compiled} compiled, {hits} already cached; cache: {where}",
          file=stream)
    return 0
