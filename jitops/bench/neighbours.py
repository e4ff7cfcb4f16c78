"""Rows about what else runs on the machine (SPEC section 5): a large op while another process
keeps one core busy, and jitops and PyTorch alternating op by op in one process.

Both are paired like the rest of the suite: in every round each variant runs once, so a slow
phase of the VM slows both sides of a ratio.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

import jitops

from . import harness
from .report import NAMES

try:
    import torch
except ImportError:  # optional neighbour
    torch = None

#: SPEC section 5: under contention at least 0.9x NumPy; beside PyTorch within 1.3x of alone.
CONTENTION_TARGET = 0.9
NEIGHBOUR_LIMIT = 1.3
#: Sporadic calls (issue 39): 1e6 out= after 2 ms of other work, against NumPy and PyTorch.
SPORADIC_TARGETS = {"numpy": 1.5, "torch": 1.0}
SPORADIC_GAP_S = 0.002


def _gap(kind: str) -> None:
    """2 ms of the program's other work: asleep, or busy in Python."""
    if kind == "sleep":
        time.sleep(SPORADIC_GAP_S)
        return
    end = time.perf_counter() + SPORADIC_GAP_S
    while time.perf_counter() < end:
        pass


def sporadic(scale: float) -> list[dict]:
    """A 1e6 float32 ``x - y`` into ``out=`` with 2 ms of other work before every call (a
    sleep, then busy Python): each call timed alone, contenders alternating call by call, so
    a pool's wake-up after the gap is part of the call's time. Also the CPU seconds the
    process spends per gap after jitops' call against NumPy's (threads spinning while the
    program sleeps show there)."""
    rng = np.random.default_rng(0)
    x, y = rng.random(10**6, dtype=np.float32), rng.random(10**6, dtype=np.float32)
    o = np.empty_like(x)
    ops = {"jitops": lambda: jitops.subtract(x, y, out=o),
           "numpy": lambda: np.subtract(x, y, out=o)}
    if torch is not None:
        tx, ty, to = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(o)
        ops["torch"] = lambda: torch.sub(tx, ty, out=to)
    rows = []
    for kind in ("sleep", "busy"):
        samples = {n: [] for n in ops}
        for f in ops.values():
            f()
        names = list(ops)
        for r in range(max(20, int(200 * scale))):
            for n in names[r % len(names):] + names[: r % len(names)]:
                _gap(kind)
                t0 = time.perf_counter()
                ops[n]()
                samples[n].append(time.perf_counter() - t0)
        ratios = {n: harness.paired_ratio(samples[n], samples["jitops"])
                  for n in ops if n != "jitops"}
        met = all(ratios.get(k, float("inf")) >= t for k, t in SPORADIC_TARGETS.items())
        row = {"key": f"sporadic_{kind}",
               "title": "subtract 1e6, out=, after 2 ms " + (
                   "asleep" if kind == "sleep" else "of busy Python"),
               "median_s": {n: harness.median(v) for n, v in samples.items()},
               "ratios": ratios, "met": met,
               "target_text": ", ".join(f"≥ {t:g}× {NAMES[k]}"
                                        for k, t in SPORADIC_TARGETS.items())}
        if kind == "sleep":  # the CPU a process burns in the 2 ms idle right after a call
            row["gap_cpu_s"] = {n: _gap_cpu(n) for n in names}
        rows.append(row)
    return rows


_SPORADIC_ALONE = r"""
import json, sys, time
import numpy as np
import jitops
rounds, gap = int(sys.argv[1]), float(sys.argv[2])
out = {}
for n in map(int, sys.argv[3:]):
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    o = np.empty_like(x)
    ops = {"jitops": lambda: jitops.subtract(x, y, out=o),
           "numpy": lambda: np.subtract(x, y, out=o)}
    samples = {k: [] for k in ops}
    for f in ops.values():
        f(), f(), f()
    names = list(ops)
    for r in range(rounds):
        for k in names[r % 2:] + names[:r % 2]:
            time.sleep(gap)
            t0 = time.perf_counter()
            ops[k]()
            samples[k].append(time.perf_counter() - t0)
    out[n] = samples
print(json.dumps(out))
"""

#: Sizes of the sporadic rows run in a process without PyTorch (jitops' own pool).
SPORADIC_ALONE_SIZES = (10**5, 10**6)
#: Their target: never slower than NumPy.
SPORADIC_ALONE_TARGET = 1.0


def sporadic_alone(scale: float) -> list[dict]:
    """The sporadic call (``x - y`` into ``out=``, float32, 2 ms asleep before each call) at
    :data:`SPORADIC_ALONE_SIZES`, in a process of its own that never imports PyTorch: its
    jobs run on jitops' own pool, whose workers fall asleep in the gap (in this suite's
    process, PyTorch's OpenMP team runs them, :mod:`jitops.cpu.threads.omp`). Against NumPy,
    alternating call by call, each call timed alone."""
    rounds = max(40, int(400 * scale))
    res = subprocess.run([sys.executable, "-c", _SPORADIC_ALONE, str(rounds),
                          str(SPORADIC_GAP_S), *map(str, SPORADIC_ALONE_SIZES)],
                         capture_output=True, text=True, timeout=600)
    if res.returncode:
        raise RuntimeError(f"the sporadic probe without PyTorch failed:\n{res.stderr[-2000:]}")
    rows = []
    for n, samples in json.loads(res.stdout.split("\n")[-2]).items():
        ratio = harness.paired_ratio(samples["numpy"], samples["jitops"])
        rows.append({"key": f"sporadic_alone_{int(n):.0e}",
                     "title": f"subtract {int(n):.0e}, out=, after 2 ms asleep, in a process "
                              "without PyTorch",
                     "median_s": {k: harness.median(v) for k, v in samples.items()},
                     "ratios": {"numpy": ratio},
                     "met": ratio >= SPORADIC_ALONE_TARGET,
                     "target_text": f"≥ {SPORADIC_ALONE_TARGET:g}× NumPy"})
    return rows


_GAP_CPU = r"""
import statistics, sys, time
import numpy as np
name = sys.argv[1]
rng = np.random.default_rng(0)
x, y = rng.random(10**6, dtype=np.float32), rng.random(10**6, dtype=np.float32)
o = np.empty_like(x)
if name == "jitops":
    import jitops
    op = lambda: jitops.subtract(x, y, out=o)
elif name == "torch":
    import torch
    torch.set_num_threads(int(sys.argv[2]))
    tx, ty, to = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(o)
    op = lambda: torch.sub(tx, ty, out=to)
else:
    op = lambda: np.subtract(x, y, out=o)
for _ in range(20):
    op()
cpu = []
for _ in range(40):
    op()
    c0 = time.process_time()
    time.sleep(float(sys.argv[3]))
    cpu.append(time.process_time() - c0)
print(statistics.median(cpu))
"""


def _gap_cpu(name: str) -> float:
    """The CPU seconds a process that runs only ``name``'s op burns in the 2 ms asleep right
    after each call: its threads spinning or yielding show there. A process of its own, so
    that another library's threads still spinning from their own calls are not counted."""
    out = subprocess.run([sys.executable, "-c", _GAP_CPU, name, str(jitops.get_num_threads()),
                          str(SPORADIC_GAP_S)], capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise RuntimeError(f"the idle-CPU probe of {name} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.split()[-1])


class BusyCore:
    """Another process spinning on one core for the duration of a ``with`` block."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)  # scheduled and spinning
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def contention(scale: float) -> dict:
    """``x - y`` (1e7 float32, ``out=``) by jitops and NumPy while a busy process runs."""
    rng = np.random.default_rng(0)
    x, y = rng.random(10**7, dtype=np.float32), rng.random(10**7, dtype=np.float32)
    o = np.empty_like(x)
    contenders = {"jitops": lambda: jitops.subtract(x, y, out=o),
                  "numpy": lambda: np.subtract(x, y, out=o)}
    with BusyCore():
        s = harness.alternate(contenders, max(5, int(41 * scale)), budget_s=10 * scale)
    ratio = harness.paired_ratio(s["numpy"], s["jitops"])
    return {"key": "contended", "title": "subtract 1e7, out=, one core kept busy by another "
            "process", "jitops_s": harness.median(s["jitops"]),
            "other_s": harness.median(s["numpy"]), "ratio": ratio,
            "target_text": f"≥ {CONTENTION_TARGET:g}× NumPy",
            "met": ratio >= CONTENTION_TARGET}


def _alone_and_beside(ops: dict[str, Callable[[], object]], rounds: int, budget_s: float,
                      settle_s: float = 0.002) -> dict[str, dict[str, list[float]]]:
    """Per-call seconds of each op alone (once the process is quiet: no pool still spinning
    from the other op) and beside the other (each call right after the other op's call, as a
    user's model code interleaves them)."""
    (a, fa), (b, fb) = ops.items()
    k = max(harness.calibrate(fa, 0.002), harness.calibrate(fb, 0.002))
    out = {n: {"alone": [], "beside": []} for n in ops}
    start = time.perf_counter()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            for n, f in ((a, fa), (b, fb)):
                harness.quiesce(settle_s)
                t0 = time.perf_counter()
                for _ in range(k):
                    f()
                out[n]["alone"].append((time.perf_counter() - t0) / k)
            harness.quiesce(settle_s)
            ta = tb = 0.0
            for _ in range(k):
                t0 = time.perf_counter()
                fb()
                t1 = time.perf_counter()
                fa()
                t2 = time.perf_counter()
                tb += t1 - t0
                ta += t2 - t1
            out[a]["beside"].append(ta / k)
            out[b]["beside"].append(tb / k)
            if r >= 4 and time.perf_counter() - start > budget_s:
                break
    finally:
        if gc_was:
            gc.enable()
    return out


def torch_neighbour(scale: float) -> list[dict]:
    """jitops and PyTorch alternating op by op (``x - y``, ``out=``, 1e6 and 1e7 float32):
    each op's time beside the other over its time alone. Empty without PyTorch."""
    if torch is None:
        return []
    rows = []
    for n in (10**6, 10**7):
        rng = np.random.default_rng(1)
        x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        o, o2 = np.empty_like(x), np.empty_like(x)
        tx, ty, to = (torch.from_numpy(v) for v in (x, y, o2))
        s = _alone_and_beside({"jitops": lambda: jitops.subtract(x, y, out=o),
                               "torch": lambda: torch.sub(tx, ty, out=to)},
                              max(5, int(41 * scale)), 10 * scale)
        slow = {name: statistics.median(b / a for a, b in zip(v["alone"], v["beside"]))
                for name, v in s.items()}
        rows.append({
            "key": f"beside_torch_{n:.0e}", "title": f"subtract {n:.0e}, out=, alternating "
            "with PyTorch's op by op", "alone_s": {k: harness.median(v["alone"])
                                                   for k, v in s.items()},
            "beside_s": {k: harness.median(v["beside"]) for k, v in s.items()},
            "slowdown": slow, "target_text": f"each ≤ {NEIGHBOUR_LIMIT:g}× its time alone",
            "met": all(v <= NEIGHBOUR_LIMIT for v in slow.values())})
    return rows


def markdown(result: dict) -> str:
    fmt = _fmt
    lines = ["Beside others (paired rounds; a busy process on one core, or PyTorch's op run "
             "right before each jitops op and the other way round):", "",
             "| case | jitops | other | ratio | target | met |", "|---|---:|---:|---:|---|:-:|"]
    c = result.get("contended")
    if c:
        lines.append(f"| {c['title']} | {fmt(c['jitops_s'])} | NumPy {fmt(c['other_s'])} "
                     f"| {c['ratio']:.2f}× NumPy | {c['target_text']} "
                     f"| {'✅' if c['met'] else '❌'} |")
    for r in result.get("beside_torch", []):
        a, b, sl = r["alone_s"], r["beside_s"], r["slowdown"]
        lines.append(
            f"| {r['title']} | {fmt(b['jitops'])} (alone {fmt(a['jitops'])}) "
            f"| PyTorch {fmt(b['torch'])} (alone {fmt(a['torch'])}) "
            f"| jitops {sl['jitops']:.2f}×, PyTorch {sl['torch']:.2f}× slower "
            f"| {r['target_text']} | {'✅' if r['met'] else '❌'} |")
    if not result.get("beside_torch"):
        lines.append("| alternating with PyTorch | - | - | - | PyTorch not installed | |")
    for r in result.get("sporadic", []):
        med, rat = r["median_s"], r["ratios"]
        others = "; ".join(f"{NAMES[k]} {fmt(med[k])}" for k in med if k != "jitops")
        ratio = ", ".join(f"{v:.2f}× {NAMES[k]}" for k, v in rat.items())
        lines.append(f"| {r['title']} | {fmt(med['jitops'])} | {others} | {ratio} "
                     f"| {r['target_text']} | {'✅' if r['met'] else '❌'} |")
    cpu = next((r["gap_cpu_s"] for r in result.get("sporadic", []) if "gap_cpu_s" in r), None)
    if cpu:
        lines += ["", "CPU time a process burns in 2 ms asleep right after a call (its "
                  "threads still spinning or yielding; a process of its own for each): "
                  + ", ".join(
                      f"{NAMES[k]} {fmt(v)}" for k, v in cpu.items()) + "."]
    return "\n".join(lines)


def _fmt(s: float) -> str:
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.3f} ms"


def run(scale: float, progress) -> dict:
    progress("beside others: a busy core ...")
    res = {"contended": contention(scale)}
    c = res["contended"]
    progress(f"  jitops {_fmt(c['jitops_s'])}, NumPy {_fmt(c['other_s'])}: "
             f"{c['ratio']:.2f}× NumPy")
    progress("beside others: alternating with PyTorch ...")
    res["beside_torch"] = torch_neighbour(scale)
    for r in res["beside_torch"]:
        progress(f"  {r['title']}: jitops {r['slowdown']['jitops']:.2f}×, PyTorch "
                 f"{r['slowdown']['torch']:.2f}× their time alone")
    progress("sporadic calls: 2 ms of other work before each ...")
    res["sporadic"] = sporadic(scale) + sporadic_alone(scale)
    for r in res["sporadic"]:
        progress(f"  {r['title']}: jitops {_fmt(r['median_s']['jitops'])}, "
                 + ", ".join(f"{k} {v:.2f}×" for k, v in r["ratios"].items()))
    return res
