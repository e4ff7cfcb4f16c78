"""The jitops command line: ``python -m jitops {info,demo,bench,warmup}``."""

from __future__ import annotations

import argparse
import platform
import sys

import numpy as np

from . import act as _act  # the demo user op calls it


def _demo() -> int:
    import jitops

    def show(title, value):
        if isinstance(value, (tuple, str)):
            body = str(value)
        else:
            arr = np.asarray(value)
            body = " ".join(np.array2string(arr, separator=", ").split()) + f"  ({arr.dtype})"
        print(f"  {title:<58} -> {body}")

    print("Paddle's elementwise_sub, its documented examples:")
    show("elementwise_sub([2,3,4], [1,5,2])",
         jitops.elementwise_sub(np.float32([2, 3, 4]), np.float32([1, 5, 2])))
    x = np.ones((2, 3, 4, 5), np.float32)
    show("elementwise_sub(ones(2,3,4,5), zeros(3,4), axis=1).shape",
         jitops.elementwise_sub(x, np.zeros((3, 4), np.float32), axis=1).shape)
    show("elementwise_sub(X(2,3,4,5), Y(5,), axis=3).shape",
         jitops.elementwise_sub(x, np.ones(5, np.float32), axis=3).shape)
    print("Paddle's elementwise_add on X(2,3,4,5), the axis rule of its documentation:")
    for ys, ax in [((2, 3, 4, 5), -1), ((), -1), ((5,), -1), ((4, 5), 2), ((3, 4), 1), ((2,), 0),
                   ((2, 1), 0)]:
        r = jitops.elementwise_add(x, np.ones(ys, np.float32), axis=ax)
        show(f"Y{ys} axis={ax}", f"shape {r.shape}, all 2: {bool((r == 2).all())}")
    print("Paddle's elementwise_mul:")
    show("elementwise_mul([2,3,4], [1,5,2])", jitops.elementwise_mul(np.array([2, 3, 4]),
                                                                    np.array([1, 5, 2])))
    print("OpenVINO's Subtract-1, its two broadcast modes:")
    show("subtract((256,56), (256,56), broadcast='none').shape",
         jitops.subtract(np.ones((256, 56)), np.ones((256, 56)), broadcast="none").shape)
    show("subtract((8,1,6,1), (7,1,5), broadcast='numpy').shape",
         jitops.subtract(np.ones((8, 1, 6, 1)), np.ones((7, 1, 5)), broadcast="numpy").shape)
    print("paddle.fmin, its examples (NaN ignored; both NaN: the first):")
    show("fmin([[1,2],[7,8]], [[3,4],[5,6]])",
         jitops.fmin(np.array([[1, 2], [7, 8]]), np.array([[3, 4], [5, 6]])))
    show("fmin([[[1,2,3],[1,2,3]]], [3,0,4])",
         jitops.fmin(np.array([[[1, 2, 3], [1, 2, 3]]]), np.array([3, 0, 4])))
    show("fmin([2,3,5], [1,nan,nan]) float32",
         jitops.fmin(np.float32([2, 3, 5]), np.float32([1, np.nan, np.nan])))
    show("fmin([5,3,inf], [1,-inf,5]) float64",
         jitops.fmin(np.float64([5, 3, np.inf]), np.float64([1, -np.inf, 5])))
    print("Fused activation:")
    show("subtract([-1,2], [1,1], act='relu')",
         jitops.subtract(np.float32([-1, 2]), np.float32([1, 1]), act="relu"))
    print("Your own op, fused into one pass (@jitops.elementwise):")
    fused = jitops.elementwise(_relu_affine)
    X = np.float32([[[-2, 0.5], [1, 2]], [[3, -1], [0, 1]]])  # (2, 2, 2): channels on axis 1
    show("relu(x * w + b), X(2,2,2), w=[1,2], b=[0.5,-1] pdpd axis 1",
         fused(X, np.float32([1, 2]), np.float32([0.5, -1]), broadcast="pdpd", axis=1).ravel())
    return 0


def _relu_affine(x, w, b):
    """The demo's user op: module-level, so its kernel is cached on disk like the built-ins."""
    return _act.relu(x * w + b)


def _info() -> int:
    import numba

    import jitops
    from jitops.core import device
    from jitops.cpu import recycle
    from jitops.cpu.compile import cache, hooks
    from jitops.cpu.kernels import binary as kernels
    from jitops.cpu.threads import parallel

    jitops.add(np.ones(1 << 17), 1.0)  # run a parallel kernel so the layer is the real one
    th = parallel.info()
    why = device.cuda_unavailable_reason()
    rows = [
        ("jitops", jitops.__version__), ("python", platform.python_version()),
        ("numpy", np.__version__), ("numba", numba.__version__),
        ("cpu", f"{th['cpu']} ({platform.machine()})"),
        ("threading layer", th["threading_layer"]),
        ("threads", f"{th['num_threads']} (from {th['num_threads_source']}; "
                    f"affinity {th['affinity']} CPUs, Numba pool {th['numba_pool']})"),
        ("parallel", th["parallel_reason"]),
        ("tbb library", th["tbb_path"] or ("not needed (jitops' own pool)"
                                           if th["threading_layer"] == "jitops" else
                                           "not found")),
        ("openmp loaded", ", ".join(th["openmp_runtimes"]) or "none"),
        ("cuda", "available" if why is None else f"not available: {why}"),
        ("kernel cache", cache.location(kernels.KERNELS["serial"]) or "off"),
        ("result memory", _recycling(recycle.status())),
        ("private hooks", _hooks(hooks.status())),
    ]
    for k, v in rows:
        print(f"{k:>16}: {v}")
    return 0


def _hooks(st: dict) -> str:
    off = [f"{name} off ({why})" for name, why in st.items() if why is not None]
    return "; ".join(off) if off else f"all {len(st)} in use (jitops.cpu.compile.hooks)"


def _recycling(st: dict) -> str:
    if not st["enabled"]:
        return "new for every result (recycling off)"
    return (f"results of {st['min_bytes'] >> 20} MiB or more reuse idle buffers (up to "
            f"{st['cap_bytes'] >> 20} MiB followed: {st['cap_source']}; freed after "
            f"{st['idle_ms']} ms idle; {st['idle_bytes'] >> 20} MiB idle now)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m jitops",
        description="JIT-compiled elementwise ops with NumPy and Paddle broadcasting.",
        epilog="'python -m jitops COMMAND --help' for a command's options.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    sub.add_parser("info", help="versions, threading layer, threads, CUDA (or why not), "
                   "kernel cache location")
    sub.add_parser("demo", help="Paddle's and OpenVINO's documented examples, computed")
    sub.add_parser("bench", add_help=False,
                   help="the benchmark suite against NumPy, PyTorch, numexpr (--quick: ~1 min)")
    w = sub.add_parser("warmup", help="compile the common signatures into the kernel cache")
    w.add_argument("--ops", nargs="+", metavar="OP", help="ops to compile (default: "
                   "add subtract multiply divide maximum minimum fmax fmin elementwise_div)")
    w.add_argument("--dtypes", nargs="+", metavar="DTYPE",
                   help="operand dtypes (default: float32 float64 int32 int64)")
    w.add_argument("--acts", nargs="+", metavar="ACT", default=[],
                   help="fused activations to compile as well as act=None (default: none)")
    a, rest = p.parse_known_args(argv)
    if a.cmd != "bench" and rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if a.cmd == "demo":
        return _demo()
    if a.cmd == "info":
        return _info()
    if a.cmd == "warmup":
        from jitops import warmup

        try:
            todo = (a.ops or warmup.OPS, a.dtypes or warmup.DTYPES, [None, *a.acts])
            warmup.steps(*todo)  # every name checked before anything compiles
        except ValueError as e:
            p.error(str(e))
        return warmup.run(*todo)
    from jitops.bench.run import main as bench

    return bench(rest)


if __name__ == "__main__":
    sys.exit(main())
