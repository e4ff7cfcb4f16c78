"""jitops-backed against NumPy-backed Dask on the same chunks.

Two schedulers: Dask's threaded scheduler (one process) and a two-worker
``distributed.LocalCluster`` (two processes, one thread each). In both, the operands are
generated and persisted first, so a timing is the op itself: building the graph, running
every chunk, and keeping the result blocks in memory (``persist``), contenders alternated.
"""

from __future__ import annotations

import numpy as np

import jitops

from . import harness

SHAPE, CHUNKS = (16384, 8192), (2048, 8192)  # 512 MiB of float32 in 8 row blocks of 64 MiB
ROW = (8192,)


def _ops(dx, dy):
    """(label, jitops-backed, NumPy-backed) computations of the same result."""
    import dask.array as da

    return [
        ("X - Y", lambda: jitops.subtract(dx, dy, broadcast="pdpd", axis=1),
         lambda: da.subtract(dx, dy)),
        ("relu(X - Y)", lambda: jitops.subtract(dx, dy, broadcast="pdpd", axis=1, act="relu"),
         lambda: da.maximum(da.subtract(dx, dy), 0)),
    ]


def _measure(label: str, dx, dy, rounds: int, wait) -> list[dict]:
    rows = []
    for what, jit, ref in _ops(dx, dy):
        contenders = {"jitops": lambda f=jit: wait(f().persist()),
                      "numpy": lambda f=ref: wait(f().persist())}
        s = harness.alternate(contenders, rounds, min_batch_s=0.0)
        rows.append({"scheduler": label, "op": what,
                     "median_s": {k: harness.median(v) for k, v in s.items()},
                     "ratio": harness.paired_ratio(s["numpy"], s["jitops"]),
                     "tasks": {"jitops": len(jit().__dask_graph__()),
                               "numpy": len(ref().__dask_graph__())}})
    return rows


def run(scale: float = 1.0, progress=print) -> list[dict]:
    import dask
    import dask.array as da
    import distributed

    rounds = max(5, int(15 * scale))
    out = []
    rng = da.random.default_rng(0)
    with dask.config.set(scheduler="threads"):
        dx = rng.random(SHAPE, chunks=CHUNKS, dtype=np.float32).persist()
        dy = rng.random(ROW, chunks=ROW, dtype=np.float32).persist()
        out += _measure("threads", dx, dy, rounds, lambda r: r)
        for r in out[-2:]:
            progress(f"  threads, {r['op']}: jitops {r['median_s']['jitops'] * 1e3:.1f} ms, "
                     f"{r['ratio']:.2f}x NumPy-backed")
        del dx, dy
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        rng = da.random.default_rng(0)
        dx, dy = c.persist([rng.random(SHAPE, chunks=CHUNKS, dtype=np.float32),
                            rng.random(ROW, chunks=ROW, dtype=np.float32)])
        distributed.wait([dx, dy])
        jitops.subtract(dx, dy, broadcast="pdpd", axis=1).persist()  # workers import & load
        out += _measure("LocalCluster (2 processes)", dx, dy, rounds,
                        lambda r: (distributed.wait(r), r)[1])
        for r in out[-2:]:
            progress(f"  cluster, {r['op']}: jitops {r['median_s']['jitops'] * 1e3:.1f} ms, "
                     f"{r['ratio']:.2f}x NumPy-backed")
    return out


def markdown(rows: list[dict]) -> str:
    lines = [
        f"Dask: X{SHAPE} float32 in {CHUNKS} chunks and Y{ROW} (pdpd axis 1), both generated "
        "and persisted first; time to `persist()` the result. jitops-backed (`jitops.subtract` "
        "on Dask arrays, `act=` fused) against NumPy-backed (`da.subtract`, `da.maximum`):",
        "",
        "| scheduler | op | jitops-backed | NumPy-backed | speed-up | tasks (jitops / NumPy) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        m, t = r["median_s"], r["tasks"]
        lines.append(f"| {r['scheduler']} | {r['op']} | {m['jitops'] * 1e3:.1f} ms | "
                     f"{m['numpy'] * 1e3:.1f} ms | {r['ratio']:.2f}× | "
                     f"{t['jitops']} / {t['numpy']} |")
    return "\n".join(lines)
