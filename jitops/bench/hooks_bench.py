"""What each speed hook buys (jitops.cpu.compile.hooks): the same measurement with it on and off.

Each measurement runs in a fresh process, the hook turned off by ``JITOPS_DISABLE_HOOKS``;
processes with every hook on and with one off alternate, and each side's median is kept.
Compile hooks time a first call on an empty kernel cache, ``numba_cache`` a first call on a
filled one, the others the calls they serve.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

from .harness import median

#: What a process measures (seconds), by kind: ``compile`` on an empty cache, ``cached`` on a
#: filled one, ``calls`` the calls the runtime hooks serve.
_SCRIPT = r"""
import json, os, random, sys, time, timeit
import numpy as np
kind = sys.argv[1]
t0 = time.perf_counter()
import jitops
x = np.ones(1000, np.float32)
out = {}
if kind in ("compile", "cached"):
    t1 = time.perf_counter()
    jitops.subtract(x, x)
    out["first_call"] = time.perf_counter() - t1
else:
    def best(fn, n):
        fn(); fn()
        return min(timeit.repeat(fn, number=n, repeat=7)) / n
    a8, b8, o8 = np.arange(8.0), np.arange(8.0) + 1, np.empty(8)
    out["repeat_8_out"] = best(lambda: jitops.subtract(a8, b8, out=o8), 20000)
    out["repeat_8_new"] = best(lambda: jitops.subtract(a8, b8), 20000)
    g = np.ones((256, 64), np.float32)
    out["sum_to_small"] = best(lambda: jitops.sum_to(g, (64,)), 5000)
    rng = random.Random(1)
    pairs = [np.ones(rng.randint(100, 5000), np.float32) for _ in range(2000)]
    def vary():
        for p in pairs:
            jitops.subtract(p, p)
    vary()
    out["new_shape"] = min(timeit.repeat(vary, number=1, repeat=5)) / len(pairs)
    big, bo = np.ones(1 << 20, np.float32), np.empty(1 << 20, np.float32)
    def timed():
        t = time.perf_counter(); jitops.subtract(big, big, out=bo)
        return time.perf_counter() - t
    def idle_call():
        ts = []
        for _ in range(30):
            time.sleep(0.002)
            ts.append(timed())
        return sorted(ts)[len(ts) // 2]
    idle_call()
    out["after_2ms_idle"] = idle_call()
    huge = np.ones(10_000_000, np.float32)
    ts = []
    for _ in range(12):
        t = time.perf_counter(); r = jitops.subtract(huge, huge); ts.append(time.perf_counter() - t)
        del r
    out["large_new_result"] = sorted(ts[2:])[len(ts[2:]) // 2]
    if kind == "torch":
        import torch
        tt = torch.ones(1 << 20)
        ts = []
        for _ in range(60):  # the pair: one PyTorch op, then one of jitops
            t = time.perf_counter()
            torch.add(tt, 1.0, out=tt)
            jitops.subtract(big, big, out=bo)
            ts.append(time.perf_counter() - t)
        out["with_torch_op"] = sorted(ts[10:])[len(ts[10:]) // 2]
print(json.dumps(out))
"""

#: Each speed hook: (kind of process, the measurements it serves).
HOOKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "codegen": ("compile", ("first_call",)),
    "registries": ("compile", ("first_call",)),
    "wrapperless": ("compile", ("first_call",)),
    "numba_cache": ("cached", ("first_call",)),
    "futex_pool": ("calls", ("after_2ms_idle",)),
    "gomp_team": ("torch", ("with_torch_op",)),
    "refcounts": ("calls", ("large_new_result",)),
    "ndarray_header": ("calls", ("repeat_8_out", "repeat_8_new", "sum_to_small")),
    "fastcall": ("calls", ("repeat_8_out", "repeat_8_new", "new_shape")),
}

LABELS = {"first_call": "first call", "after_2ms_idle": "1e6 `out=` after 2 ms idle",
          "with_torch_op": "a PyTorch op, then a 1e6 `out=` (the pair)",
          "large_new_result": "1e7 new result", "repeat_8_out": "repeated 8, `out=`",
          "repeat_8_new": "repeated 8, new result",
          "sum_to_small": "`sum_to` (256, 64) -> (64,)",
          "new_shape": "a new length (100-5,000) each call"}


def _child(kind: str, env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _SCRIPT, kind],
                       env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"hooks benchmark child ({kind}) failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(scale: float, progress: Callable[[str], None], repeats: int = 5) -> dict:
    """Every speed hook on and off, ``repeats`` processes each, alternating."""
    has_torch = importlib.util.find_spec("torch") is not None
    hooks = {h: v for h, v in HOOKS.items() if v[0] != "torch" or has_torch}
    results: dict[str, dict] = {}
    base = dict(os.environ)
    base.pop("JITOPS_DISABLE_HOOKS", None)
    with tempfile.TemporaryDirectory(prefix="jitops-bench-hooks-") as d:
        filled = os.path.join(d, "filled")
        _child("cached", dict(base, JITOPS_CACHE_DIR=filled))  # fills it
        samples: dict[tuple[str, str], list[dict]] = {}
        kinds = sorted({k for k, _ in hooks.values()})
        for r in range(max(1, int(repeats * scale) or 1)):
            for kind in kinds:
                for hook in [None, *(h for h, v in hooks.items() if v[0] == kind)]:
                    env = dict(base, JITOPS_DISABLE_HOOKS=hook or "")
                    env["JITOPS_CACHE_DIR"] = filled if kind == "cached" else os.path.join(
                        d, f"c{r}-{kind}-{hook}")
                    progress(f"  hooks: {kind}, {hook or 'all on'} ({r + 1}) ...")
                    samples.setdefault((kind, hook or ""), []).append(_child(kind, env))
        for hook, (kind, keys) in hooks.items():
            on, off = samples[(kind, "")], samples[(kind, hook)]
            results[hook] = {k: {"on_s": median([s[k] for s in on]),
                                 "off_s": median([s[k] for s in off]),
                                 "on_range_s": [min(s[k] for s in on), max(s[k] for s in on)],
                                 "off_range_s": [min(s[k] for s in off),
                                                 max(s[k] for s in off)]}
                             for k in keys}
    return {"hooks": results, "processes_per_side": len(next(iter(samples.values())))}


def _t(s: float) -> str:
    return f"{s * 1e6:.2f} µs" if s < 1e-3 else (f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s")


def markdown(res: dict) -> str:
    lines = [f"Hooks, what each private interface buys: each hook off (`JITOPS_DISABLE_HOOKS`) "
             f"against every hook on, in fresh processes "
             f"({res['processes_per_side']} each, alternating): medians, and the range over "
             f"the processes; *gain* is off / on (within the ranges' overlap: noise).",
             "",
             "| hook | measured | on | off | gain |",
             "|---|---|---:|---:|---:|"]

    def cell(v, side):
        lo, hi = v.get(f"{side}_range_s", (None, None))
        spread = f" ({_t(lo)}-{_t(hi)})" if lo is not None else ""
        return _t(v[f"{side}_s"]) + spread

    for hook, rows in res["hooks"].items():
        for key, v in rows.items():
            lines.append(f"| `{hook}` | {LABELS[key]} | {cell(v, 'on')} | {cell(v, 'off')} | "
                         f"{v['off_s'] / v['on_s']:.2f}× |")
    return "\n".join(lines) + "\n"
