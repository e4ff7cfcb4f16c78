"""Turn a benchmark run into a markdown table, a JSON record and a PNG plot."""

from __future__ import annotations

import json
import os

NAMES = {"jitops": "jitops", "numpy": "NumPy", "torch": "PyTorch", "numexpr": "numexpr",
         "probe": "probe", "pandas": "pandas", "paddle": "Paddle",
         "ndarray": "jitops on ndarrays", "openvino": "OpenVINO",
         "limit": "the limit", "out": "jitops with out=", "torch_compile": "torch.compile"}


#: A row moving fewer bytes than this runs in the caches: no share of the memory limit.
LIMIT_MIN_BYTES = 32 << 20


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.2f} µs"
    return f"{s * 1e3:.3f} ms"


def _verdict(row: dict) -> str:
    if row.get("targets") == {}:  # a row measured so that a regression shows
        return "-"
    return "✅" if row["met"] else "❌"


def _quiet_lines(q: dict | None) -> list[str]:
    """How long the run waited for the CPUs to be quiet before its first case."""
    if not q or q.get("busy_first") is None:
        return []
    state = "quiet" if q["quiet"] else "still busy, the wait gave up"
    return [f"Before the first case the run waited {q['waited_s']:.1f} s for quiet CPUs "
            f"(busy, steal included: {q['busy_first']:.0%} in the first half second, "
            f"{q['busy_last']:.0%} in the last; {state}).", ""]


def markdown(result: dict) -> str:
    m = result["machine"]
    bw = result["bandwidth_probe"]
    lines = [
        "# jitops benchmark results",
        "",
        f"{m['cpu']}, {m['logical_cpus']} logical CPUs; jitops {m['jitops']} on "
        f"{m['threads']} threads ({m['threading_layer']} layer); Python {m['python']}, "
        f"NumPy {m['numpy']}, Numba {m['numba']}, PyTorch {m['torch'] or 'not installed'}, "
        f"numexpr {m['numexpr'] or 'not installed'}; {m['date']}.",
        "",
        f"In-run bandwidth probe (parallel Numba STREAM loops on 128 MiB arrays): "
        f"`o = x - y` {bw['stream_sub_GBps']:.1f} GB/s, copy {bw['stream_copy_GBps']:.1f} GB/s"
        + (f", `o = x - y` with non-temporal stores {bw['stream_sub_nt_GBps']:.1f} GB/s"
           if "stream_sub_nt_GBps" in bw else "")
        + ". *% of limit*: the non-temporal `o = x - y` moving the row's bytes (a row that "
          "only writes its output, every input broadcast: a non-temporal fill of it), timed in "
          "the row's own rounds, over jitops' time (paired; rows that fit the caches: -).",
        "",
        *_quiet_lines(result.get("quiet")),
        "Medians of per-call times over rounds in which the contenders alternate call by call; a "
        "ratio is the median of the per-round ratios (the other's time / jitops'), so >1 means "
        "jitops is faster. float32 unless said.",
        "",
        "| case | jitops | NumPy | PyTorch | numexpr | Paddle | OpenVINO | jitops GB/s "
        "| % of limit | vs NumPy | vs PyTorch | vs Paddle | vs OpenVINO | target | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|:-:|",
    ]
    def vs(ratios: dict, key: str) -> str:
        return f"{ratios[key]:.2f}×" if key in ratios else "-"

    for r in result["cases"]:
        med = r["median_s"]
        ratios = r["ratios"]
        share = f"{100 * ratios['limit']:.0f}%" if "limit" in ratios else "-"
        lines.append(
            f"| {r['title']} | {_fmt_time(med.get('jitops'))} | {_fmt_time(med.get('numpy'))} "
            f"| {_fmt_time(med.get('torch'))} | {_fmt_time(med.get('numexpr'))} "
            f"| {_fmt_time(med.get('paddle'))} | {_fmt_time(med.get('openvino'))} "
            f"| {r['gbps']['jitops']:.1f} | {share} | {vs(ratios, 'numpy')} "
            f"| {vs(ratios, 'torch')} | {vs(ratios, 'paddle')} | {vs(ratios, 'openvino')} "
            f"| {r['target_text']} | {_verdict(r)} |")
    c = result.get("cold_start")
    if c:
        same_files = c["cache_files_after_first_run"] == c["cache_files_after_repeats"]
        lines += [
            "",
            "Cold start (fresh interpreters, own empty kernel cache; float32 subtract of 1000 "
            "elements; Python's bytecode already compiled, as a wheel install leaves it: "
            f"{'yes' if c.get('bytecode_cached') else 'no'}):",
            "",
            "| what | time | target | met |",
            "|---|---:|---|:-:|",
            f"| `import jitops` | {c['import_s']:.3f} s | ≤ 0.5 s "
            f"| {'✅' if c['import_s'] <= 0.5 else '❌'} |",
            f"| first call, signature compiled by an earlier process (disk cache: "
            f"{c['cached_cache_hits']} hits, {c['cached_cache_misses']} misses) "
            f"| {c['cached_first_call_s']:.3f} s | ≤ 0.15 s "
            f"| {'✅' if c['cached_first_call_s'] <= 0.15 else '❌'} |",
            f"| the very first call on an empty cache (the serial driver too, once per machine) "
            f"| {c['compile_first_signature_s']:.3f} s | ≤ 1 s "
            f"| {'✅' if c['compile_first_signature_s'] <= 1 else '❌'} |",
            *([f"| a second shape of that call (its shape class's planner, once per machine) "
               f"| {c['compile_second_shape_s']:.3f} s | - | |"]
              if "compile_second_shape_s" in c else []),
            f"| compile, first parallel call ever (the parallel driver, once per machine) "
            f"| {c['compile_parallel_driver_s']:.3f} s | - | |",
            f"| compile, a new signature (serial kernel: arrays under 65,536 elements) "
            f"| {c['compile_new_signature_s']:.3f} s | ≤ 1 s "
            f"| {'✅' if c['compile_new_signature_s'] <= 1 else '❌'} |",
            f"| compile, a new signature on a large array (parallel kernel) "
            f"| {c['compile_new_parallel_signature_s']:.3f} s | ≤ 1 s "
            f"| {'✅' if c['compile_new_parallel_signature_s'] <= 1 else '❌'} |",
            f"| compile, a new user op (`relu(x * w + b)`, `jitops.elementwise`) "
            f"| {c['compile_user_op_s']:.3f} s | ≤ 1 s "
            f"| {'✅' if c['compile_user_op_s'] <= 1 else '❌'} |",
            f"| first call of that user op in a new process (disk cache) "
            f"| {c['cached_user_op_s']:.3f} s | - | |",
            f"| first call, parallel kernel from the disk cache "
            f"| {c['cached_parallel_first_call_s']:.3f} s | ≤ 0.15 s "
            f"| {'✅' if c['cached_parallel_first_call_s'] <= 0.15 else '❌'} |",
            f"| cache files after the first run / after {c.get('cached_runs', 3)} more runs "
            f"| {c['cache_files_after_first_run']} / {c['cache_files_after_repeats']} | equal "
            f"| {'✅' if same_files else '❌'} |",
        ]
    for extra in result.get("extra_tables", []):
        lines += ["", extra]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: str) -> bool:
    """Panels: speed-up over NumPy per case (with targets), cost per element vs size, and the
    variant x dtype x size grid when it ran."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cases = result["cases"]
    g = result.get("grid")
    if g:
        fig, (ax, bx, gx) = plt.subplots(1, 3, figsize=(21, 7.5),
                                         gridspec_kw={"width_ratios": [3, 2, 2]})
        from .grid import plot as plot_grid

        plot_grid(g, gx)
    else:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 6.5),
                                     gridspec_kw={"width_ratios": [3, 2]})
    others = [n for n in ("jitops", "torch", "numexpr") if any(n in r["median_s"] for r in cases)]
    h = 0.8 / len(others)
    colors = {"jitops": "tab:blue", "torch": "tab:orange", "numexpr": "tab:green"}
    for k, name in enumerate(others):
        ys, xs = [], []
        for i, r in enumerate(cases):
            if name in r["median_s"]:
                ys.append(i + (k - (len(others) - 1) / 2) * h)
                xs.append(r["median_s"]["numpy"] / r["median_s"][name])
        ax.barh(ys, xs, height=h, color=colors[name], label=NAMES[name])
    for i, r in enumerate(cases):
        t = r["targets"].get("numpy")
        if t is not None:
            ax.plot([t, t], [i - 0.45, i + 0.45], color="k", lw=2)
    ax.axvline(1.0, color="grey", lw=1, ls="--")
    ax.set_yticks(range(len(cases)), [r["title"] for r in cases], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("speed-up over NumPy (NumPy time / contender time; black bar: jitops target)")
    ax.legend(loc="lower right")
    ax.set_title("the benchmark's cases")

    sw = result.get("sweep")
    if sw:
        for name in ("jitops", "numpy", "torch", "numexpr"):
            pts = [(p["n"], p["median_s"][name] / p["n"] * 1e9)
                   for p in sw if name in p["median_s"]]
            if pts:
                bx.loglog(*zip(*pts), marker="o", label=NAMES[name],
                          color=colors.get(name, "tab:red"))
        bx.set_xlabel("elements (float32 subtract, out=)")
        bx.set_ylabel("ns per element")
        bx.grid(True, which="both", alpha=0.3)
        bx.legend()
        bx.set_title("cost per element vs size")
    m = result["machine"]
    fig.suptitle(f"jitops {m['jitops']} — {m['cpu']}, {m['threads']} threads "
                 f"({m['threading_layer']}), {m['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(result: dict, outdir: str, stem: str = "latest") -> list[str]:
    os.makedirs(outdir, exist_ok=True)
    paths = [os.path.join(outdir, f"{stem}.json"), os.path.join(outdir, f"{stem}.md")]
    with open(paths[0], "w") as f:
        json.dump(result, f, indent=1)
    with open(paths[1], "w") as f:
        f.write(markdown(result))
    png = os.path.join(outdir, f"{stem}.png")
    if plot(result, png):
        paths.append(png)
    return paths


#: The README's comparison: one row per kind of call a user makes.
SUMMARY_ROWS = ("overhead", "sub_1e6_out", "sub_1e7_new", "pdpd_axis1", "transposed",
                "relu_fused", "user_abc", "sq_diff_sum", "mul_grad_channels", "paddle_sub")
#: Where the generated comparison sits in the README.
BEGIN, END = "<!-- results: begin (generated by jitops.bench.report) -->", "<!-- results: end -->"


def summary(result: dict) -> str:
    """The landing page's comparison table: speed-ups over NumPy and PyTorch (paired
    medians, >1: jitops faster) for :data:`SUMMARY_ROWS`, and the run it comes from."""
    m = result["machine"]
    rows = {r["key"]: r for r in result["cases"]}
    others = [k for k in ("numpy", "torch", "paddle", "openvino")
              if any(k in rows[key]["ratios"] for key in SUMMARY_ROWS if key in rows)]
    lines = ["| call | jitops | " + " | ".join(f"vs {NAMES[k]}" for k in others) + " |",
             "|---|---:|" + "---:|" * len(others)]
    for key in SUMMARY_ROWS:
        r = rows.get(key)
        if r is None:
            continue
        ratios = r["ratios"]
        vals = " | ".join(f"{ratios[k]:.2f}×" if k in ratios else "-" for k in others)
        lines.append(f"| {r['title']} | {_fmt_time(r['median_s']['jitops'])} | {vals} |")
    c = result.get("cold_start")
    tail = (f" `import jitops` {c['import_s']:.2f} s; a first call that compiles "
            f"{c['compile_new_signature_s']:.2f} s, one loaded from the kernel cache "
            f"{c['cached_first_call_s']:.3f} s." if c else "")
    return "\n".join([
        *lines, "",
        f"{m['cpu']}, {m['logical_cpus']} logical CPUs, {m['threads']} threads; NumPy "
        f"{m['numpy']}, PyTorch {m['torch'] or 'not installed'}; {m['date']}.{tail}",
    ])


def with_summary(readme: str, result: dict) -> str:
    """``readme`` with the text between :data:`BEGIN` and :data:`END` made anew."""
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{summary(result)}\n{END}{tail}"
