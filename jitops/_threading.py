"""Choosing a Numba threading layer that is fast and never kills the process.

Measured on these machines: ``workqueue`` aborts when two Python threads launch a parallel
kernel at once; GNU ``omp`` kills a forked child that launches one; ``tbb`` survives both.
But TBB's sleeping workers join a short parallel region late, and a kernel of a millisecond
or less then runs mostly on the calling thread: in the benchmark suite (contenders alternated,
so pools go idle between calls) a 1e6-element subtract took 0.16 ms under TBB and 0.08 ms under
OpenMP, and the pdpd broadcast 1.2 ms against 0.8 ms. So jitops prefers ``omp`` and makes it
safe by policy, and keeps TBB as the fallback where no OpenMP runtime loads:

* omp: a forked child of a process that already ran a parallel kernel runs the serial kernels
  (correct, never killed; slower only in that child);
* workqueue: parallel launches are serialised under a lock.

pip's ``tbb`` wheel installs ``libtbb.so.12`` under ``sys.prefix/lib``, where the dynamic loader
does not look, so it is loaded here with ``RTLD_GLOBAL`` before Numba's first parallel launch.
``NUMBA_THREADING_LAYER`` or ``NUMBA_THREADING_LAYER_PRIORITY`` set by the user win.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import platform
import sys
import threading

import numba

_lock = threading.Lock()
_state = {"tbb_loaded": False, "tbb_path": None, "forked": False, "launched": False}


def _tbb_candidates() -> list[str]:
    names = []
    for prefix in dict.fromkeys((sys.prefix, sys.exec_prefix, sys.base_prefix)):
        names += sorted(glob.glob(os.path.join(prefix, "lib", "libtbb.so.12*")))
    names.append("libtbb.so.12")  # anything on the loader's path
    return names


def _load_tbb() -> bool:
    for name in _tbb_candidates():
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        _state["tbb_loaded"], _state["tbb_path"] = True, name
        return True
    return False


#: Layers in the order jitops tries them (see the module docstring for the measurements).
PRIORITY = ["omp", "tbb", "workqueue"]


def configure() -> None:
    """Called once at import: load TBB, prefer omp, unless the user chose explicitly."""
    _load_tbb()
    user_choice = (os.environ.get("NUMBA_THREADING_LAYER")
                   or os.environ.get("NUMBA_THREADING_LAYER_PRIORITY"))
    if not user_choice:
        numba.config.THREADING_LAYER = "default"
        numba.config.THREADING_LAYER_PRIORITY = list(PRIORITY)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    global _lock
    _state["forked"] = True
    _lock = threading.Lock()  # a lock held by another thread at fork time would never open


def threading_layer() -> str:
    """The Numba threading layer jitops runs on.

    jitops prefers ``omp``, then ``tbb`` (pip's TBB, loaded at import), then ``workqueue``,
    unless ``NUMBA_THREADING_LAYER`` or ``NUMBA_THREADING_LAYER_PRIORITY`` says otherwise.

    Returns
    -------
    str
        ``"omp"``, ``"tbb"`` or ``"workqueue"``: the layer actually in use once a parallel
        kernel has run; before that, the first one jitops will try.

    Examples
    --------
    >>> import jitops
    >>> jitops.threading_layer() in ("omp", "tbb", "workqueue")
    True
    """
    if _state["launched"]:
        return numba.threading_layer()
    layer = str(numba.config.THREADING_LAYER).lower()
    if layer == "default":
        return numba.config.THREADING_LAYER_PRIORITY[0]
    return layer


_local = threading.local()


@contextlib.contextmanager
def serial():
    """Within this block, calls from this thread run the serial kernels: for callers that
    already run one task per core (Dask's chunk tasks), where nested threads only compete."""
    before = getattr(_local, "serial", False)
    _local.serial = True
    try:
        yield
    finally:
        _local.serial = before


def parallel_allowed() -> bool:
    """False inside :func:`serial`, and in a forked child of a process whose layer (GNU
    OpenMP) cannot survive fork."""
    if getattr(_local, "serial", False):
        return False
    if _state["forked"] and _state["launched"] and numba.threading_layer() == "omp":
        return False
    return True


def launch_parallel(kernel, *args):
    """Run a parallel kernel and return its result, serialising launches where the layer is
    not thread-safe."""
    if _state["launched"] and numba.threading_layer() != "workqueue":
        return kernel(*args)
    with _lock:  # first launch (layer not yet known) or workqueue: one launch at a time
        result = kernel(*args)
        _state["launched"] = True
        return result


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def info() -> dict:
    """What the threading setup is, for ``python -m jitops info`` and bug reports."""
    return {
        "cpu": cpu_model(),
        "threading_layer": threading_layer(),
        "num_threads": numba.get_num_threads(),
        "tbb_loaded": _state["tbb_loaded"],
        "tbb_path": _state["tbb_path"],
    }
