"""Run the benchmark suite: ``python -m jitops bench`` (or ``python benchmarks/run.py``).

Runs the project's benchmark rows (each with its target) side by side with NumPy and, where
installed, PyTorch and numexpr; an in-run bandwidth probe; cold-start and compile times in
fresh processes; a cost-versus-size sweep; and (with ``--dask``) jitops-backed against
NumPy-backed Dask. Writes ``latest.md``, ``latest.json`` and ``latest.png`` under
``./jitops-bench-results`` (``--out`` chooses); only ``--update-results`` replaces a checkout's
committed ``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

from . import cases, harness, report

#: A source checkout keeps results beside the suite's entry point, benchmarks/run.py.
_CHECKOUT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks")


def checkout_results() -> str | None:
    """The committed results of a source checkout (None for an installed package)."""
    if os.path.isfile(os.path.join(_CHECKOUT, "run.py")):
        return os.path.join(_CHECKOUT, "results")
    return None


def default_out() -> str:
    return os.path.abspath("jitops-bench-results")


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


#: Contenders timed against jitops in rounds of their own (see _run_case).
SEEDS = ("paddle", "openvino")


def _run_case(case: cases.Case, scale: float) -> dict:
    contenders, nbytes = case.build()
    rounds = max(5, int(case.rounds * scale))
    # The seeds' runtimes alternate with jitops in rounds of their own: their new results and
    # thread pools change the caches and cores the next contender finds, and the rows of
    # NumPy, PyTorch and numexpr stay measured as before they joined.
    seeds = {n: f for n, f in contenders.items() if n in SEEDS}
    main = {n: f for n, f in contenders.items() if n not in SEEDS}
    if nbytes >= report.LIMIT_MIN_BYTES and harness.STREAMS:
        # the limit in the same rounds (the machine's bandwidth drifts within minutes): the
        # non-temporal probe moving as many bytes; its time over jitops' is the share. A row
        # that only writes is held to the write-only stream (measured here at 27 GB/s against
        # 44 for o = x - y: this machine writes slower than it reads).
        main["limit"] = harness.limit_contender(nbytes, case.writes_only)
    s = harness.alternate(main, rounds, budget_s=case.budget_s * scale)
    med = {n: harness.median(v) for n, v in s.items()}
    ratios = {n: harness.paired_ratio(v, s["jitops"]) for n, v in s.items() if n != "jitops"}
    if seeds:
        s2 = harness.alternate({"jitops": contenders["jitops"], **seeds}, rounds,
                               budget_s=case.budget_s * scale)
        for n in seeds:
            med[n] = harness.median(s2[n])
            ratios[n] = harness.paired_ratio(s2[n], s2["jitops"])
    met = all(ratios.get(k, float("inf")) >= t for k, t in case.targets.items())
    text = ", ".join(
        (f"≥ {t:g} of the probe's GB/s" if k == "probe" else f"≥ {t:g}× {report.NAMES[k]}")
        for k, t in case.targets.items())
    if case.note:
        text = case.note
    return {"key": case.key, "title": case.title, "median_s": med, "ratios": ratios,
            "rounds": len(s["jitops"]), "bytes": nbytes,
            "gbps": {n: nbytes / t / 1e9 for n, t in med.items()},
            "targets": case.targets, "target_text": text, "met": met}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m jitops bench",
        description="The benchmark suite: jitops beside NumPy and, where installed, PyTorch, "
                    "numexpr, pandas, Paddle; medians of interleaved rounds, paired ratios, a "
                    "table and a plot.")
    p.add_argument("--quick", action="store_true",
                   help="a rough look in about a minute: the main rows with fewer rounds, a "
                        "short sweep; no grid, neighbour rows or cold-start processes")
    p.add_argument("--cases", nargs="*", metavar="KEY",
                   help=f"only these cases ({', '.join(c.key for c in cases.CASES)}, "
                        f"neighbours, grid)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold-start processes")
    p.add_argument("--no-hooks", action="store_true",
                   help="skip the hooks table (each speed hook on and off, fresh processes)")
    p.add_argument("--no-sweep", action="store_true", help="skip the size sweep")
    p.add_argument("--no-grid", action="store_true",
                   help="skip the variant x dtype x size grid (also skipped when --cases does "
                        "not name 'grid')")
    p.add_argument("--no-neighbours", action="store_true",
                   help="skip the rows beside a busy core and beside PyTorch (also skipped "
                        "when --cases does not name 'neighbours')")
    p.add_argument("--no-cuda", action="store_true",
                   help="skip the CUDA section (it runs by itself wherever a GPU is usable)")
    p.add_argument("--dask", action="store_true",
                   help="also jitops-backed vs NumPy-backed Dask (needs jitops[dask])")
    p.add_argument("--check", action="store_true",
                   help="exit with status 1 when a row misses its target")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", help="directory for latest.{md,json,png} (default: "
                                     "./jitops-bench-results)")
    where.add_argument("--update-results", action="store_true",
                       help="replace the checkout's committed benchmarks/results")
    a = p.parse_args(argv)
    if a.update_results:
        a.out = checkout_results()
        if a.out is None:
            p.error("--update-results: not a source checkout (no benchmarks/run.py)")
    elif a.out is None:
        a.out = default_out()
    if a.quick:
        a.no_grid = a.no_neighbours = a.no_cold = a.no_hooks = True
    scale = 0.2 if a.quick else 1.0
    t_start = time.perf_counter()

    _progress("machine and threads ...")
    machine = harness.machine()
    cases.set_threads(machine["threads"])
    _progress(f"  {machine['cpu']}, {machine['threads']} threads, "
              f"{machine['threading_layer']} layer")
    _progress("waiting for a quiet machine ...")
    quiet = harness.wait_for_quiet()
    _progress(f"  {quiet['waited_s']:.1f} s" + (
        f", CPUs busy {quiet['busy_first']:.0%} -> {quiet['busy_last']:.0%}"
        f"{'' if quiet['quiet'] else ' (gave up waiting)'}"
        if quiet["busy_first"] is not None else " (no /proc/stat: not measured)"))
    _progress("bandwidth probe ...")
    probe = harness.bandwidth_probe(rounds=max(5, int(9 * scale)))
    _progress(f"  o = x - y: {probe['stream_sub_GBps']:.1f} GB/s"
              f" (non-temporal stores: {probe.get('stream_sub_nt_GBps', float('nan')):.1f}), "
              f"copy: {probe['stream_copy_GBps']:.1f} GB/s")

    selected = [c for c in cases.CASES if not a.cases or c.key in a.cases]
    absent = [c for c in selected if c.requires and importlib.util.find_spec(c.requires) is None]
    for c in absent:
        _progress(f"{c.key}: left out ({c.requires} is not installed)")
    selected = [c for c in selected if c not in absent]
    rows = []
    for i, case in enumerate(selected, 1):
        _progress(f"[{i}/{len(selected)}] {case.title} ...")
        t0 = time.perf_counter()
        r = _run_case(case, scale)
        rows.append(r)
        rat = ", ".join(f"{report.NAMES[k]} {v:.2f}×" for k, v in r["ratios"].items())
        _progress(f"  jitops {report._fmt_time(r['median_s']['jitops'])} ({rat}) "
                  f"{'met' if r['met'] else 'MISSED'} [{time.perf_counter() - t0:.1f} s]")

    result = {"machine": machine, "quiet": quiet, "bandwidth_probe": probe, "cases": rows,
              "extra_tables": []}
    missed = [r["key"] for r in rows if not r["met"]]
    if not a.no_neighbours and (not a.cases or "neighbours" in a.cases):
        from . import neighbours

        result["neighbours"] = nb = neighbours.run(scale, _progress)
        result["extra_tables"].append(neighbours.markdown(nb))
        missed += [r["key"] for r in [nb["contended"], *nb["beside_torch"], *nb["sporadic"]]
                   if not r["met"]]
    if not a.no_grid and (not a.cases or "grid" in a.cases):
        from . import grid

        _progress("grid: variant x dtype x size ...")
        result["grid"] = grid.run(scale, _progress)
        result["extra_tables"].append(grid.markdown(result["grid"]))
    if not a.no_sweep:
        sweep = []
        sizes = cases.SWEEP_SIZES[::2] if a.quick else cases.SWEEP_SIZES
        for i, n in enumerate(sizes, 1):
            _progress(f"[sweep {i}/{len(sizes)}] subtract {n:,} elements ...")
            contenders, _ = cases.sweep_case(n)()
            s = harness.alternate(contenders, max(5, int(15 * scale)), budget_s=3 * scale)
            sweep.append({"n": n, "median_s": {k: harness.median(v) for k, v in s.items()}})
        result["sweep"] = sweep
    if not a.no_cuda and not a.cases:
        from . import cuda_bench

        result["cuda"] = cuda_bench.run(scale, _progress)
        result["extra_tables"].append(cuda_bench.markdown(result["cuda"]))
    if a.dask:
        from . import dask_bench

        _progress("dask: jitops-backed vs NumPy-backed ...")
        result["dask"] = dask_bench.run(scale, _progress)
        result["extra_tables"].append(dask_bench.markdown(result["dask"]))
    if not a.no_hooks and (not a.cases or "hooks" in a.cases):
        from . import hooks_bench

        _progress("hooks: each speed hook on and off (fresh processes) ...")
        result["hooks"] = hooks_bench.run(scale, _progress)
        result["extra_tables"].append(hooks_bench.markdown(result["hooks"]))
    if not a.no_cold:
        _progress("cold start (fresh processes) ...")
        result["cold_start"] = harness.cold_start()
        c = result["cold_start"]
        _progress(f"  import {c['import_s']:.2f} s, cached first call "
                  f"{c['cached_first_call_s']:.3f} s, new signature "
                  f"{c['compile_new_signature_s']:.2f} s")
    result["elapsed_s"] = time.perf_counter() - t_start
    paths = report.write(result, a.out)
    if a.update_results:  # the README's comparison comes from the committed results
        readme = os.path.join(os.path.dirname(_CHECKOUT), "README.md")
        with open(readme) as f:
            text = f.read()
        if report.BEGIN in text:
            with open(readme, "w") as f:
                f.write(report.with_summary(text, result))
            paths.append(readme)
    for path in paths:
        _progress(f"wrote {os.path.relpath(path)}")
    if not any(p.endswith(".png") for p in paths):
        _progress("no plot: matplotlib is not installed (pip install \"jitops[bench]\")")
    print(report.markdown(result))
    if missed:
        _progress(f"targets missed: {', '.join(missed)}")
    return 1 if a.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
