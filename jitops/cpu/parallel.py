"""Running parallel kernels safely, whatever else the process holds, without touching Numba's
settings.

Numba has one threading layer per process, chosen at its first parallel launch from
``numba.config.THREADING_LAYER(_PRIORITY)``. Measured on these machines:

* ``workqueue`` aborts the process when two Python threads launch a parallel kernel at once;
* GNU ``omp`` kills (Numba's own guard) or hangs a forked child once an OpenMP runtime started
  in the parent -- Numba's pool (which ``numba.get_num_threads()`` alone starts) or another
  library's, such as the ``libgomp`` PyTorch wheels bundle;
* ``tbb`` survives both.

Numba's own default priority already puts ``tbb`` first; it only fails to find pip's TBB,
whose ``libtbb.so.12`` lies under ``sys.prefix/lib`` where the dynamic loader does not look.
So jitops loads that library with ``RTLD_GLOBAL`` at import -- and changes nothing else:
``numba.config`` keeps the user's (or Numba's default) choice, for jitops and every other Numba
user in the process.

Whatever layer Numba ends up with (the user's ``NUMBA_THREADING_LAYER``, another library's
earlier launch, a platform without TBB), jitops decides once per process, from what is
actually loaded, how it may launch (:func:`parallel_allowed`, :func:`launch_parallel`):

* ``tbb``: parallel kernels, concurrently from any thread, in any forked child;
* ``workqueue``: parallel kernels, one launch at a time (a lock);
* ``omp``: parallel kernels only when jitops itself started the OpenMP runtime in this very
  process. If any OpenMP runtime was already loaded (it may have been started by a parent
  before a fork: jitops cannot tell), or Numba's layer had already been started by someone
  else, or the process forked after OpenMP loaded, the serial kernels run instead: slower,
  never hung or killed.

``with serial():`` forces serial kernels on the calling thread (Dask's chunk tasks).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import platform
import re
import sys
import threading

import numba

_lock = threading.Lock()
_state = {"tbb_loaded": False, "tbb_path": None, "forked_with_openmp": False}

#: The per-process decision: (pid it was made in, parallel allowed, serialise launches, why).
_decision: tuple[int, bool, bool, str] | None = None

_OPENMP = re.compile(r"/lib(gomp|iomp5|omp)[-.][^/]*$")


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


def openmp_runtimes() -> list[str]:
    """Paths of the OpenMP runtimes (GNU ``libgomp``, Intel ``libiomp5``, LLVM ``libomp``)
    mapped into this process, read from ``/proc/self/maps`` (empty where that is unreadable)."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                if _OPENMP.search(path) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _numba_layer_started() -> bool:
    """Whether Numba's threading layer was already started (by anyone) in this process."""
    from numba.np.ufunc import parallel

    return bool(getattr(parallel, "_is_initialized", False))


def configure() -> None:
    """Called once at import: make pip's TBB loadable and watch for forks. Nothing else."""
    _load_tbb()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    global _lock, _decision
    # An OpenMP runtime present at the fork may have had threads in the parent, which the
    # child does not have: GNU OpenMP then hangs or is killed at its next parallel region.
    _state["forked_with_openmp"] = bool(openmp_runtimes())
    _lock = threading.Lock()  # a lock held by another thread at fork time would never open
    _decision = None


def _decide() -> tuple[int, bool, bool, str]:
    """Start Numba's layer (its own choice) and decide how jitops may launch in this process."""
    global _decision
    with _lock:
        d = _decision
        if d is not None and d[0] == os.getpid():
            return d
        started_before = _numba_layer_started()
        foreign = [] if started_before else openmp_runtimes()
        numba.get_num_threads()  # starts Numba's threading layer if nobody did
        layer = numba.threading_layer()
        parallel, why = True, f"{layer}: parallel"
        if layer == "omp":
            if _state["forked_with_openmp"]:
                parallel, why = False, "omp: forked after an OpenMP runtime loaded: serial"
            elif foreign:
                parallel, why = False, (f"omp: an OpenMP runtime was loaded before Numba's "
                                        f"({os.path.basename(foreign[0])}): serial")
            elif started_before:
                parallel, why = False, "omp: Numba's layer was started outside jitops: serial"
        _decision = d = (os.getpid(), parallel, layer == "workqueue", why)
        return d


def threading_layer() -> str:
    """The Numba threading layer jitops' parallel kernels run on.

    jitops does not choose it: Numba does, from ``NUMBA_THREADING_LAYER`` or its default
    priority (``tbb`` first; jitops makes pip's TBB loadable). Asking starts the layer.

    Returns
    -------
    str
        ``"tbb"``, ``"omp"`` or ``"workqueue"``.

    Examples
    --------
    >>> import jitops
    >>> jitops.threading_layer() in ("omp", "tbb", "workqueue")
    True
    """
    _decide()
    return numba.threading_layer()


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


def _current() -> tuple[int, bool, bool, str]:
    """This process's decision (made on first need, and again in a forked child)."""
    d = _decision
    return d if d is not None and d[0] == os.getpid() else _decide()


def parallel_allowed() -> bool:
    """False inside :func:`serial`, and in a process where the layer cannot run safely (see
    the module docstring)."""
    if getattr(_local, "serial", False):
        return False
    return _current()[1]


def num_threads() -> int:
    """Threads a parallel kernel of this call would use (1 where only serial kernels run)."""
    return numba.get_num_threads() if parallel_allowed() else 1


def launch_parallel(kernel, *args):
    """Run a parallel kernel and return its result, one launch at a time where the layer is
    not thread-safe (workqueue). Call only where :func:`parallel_allowed` said yes."""
    if _current()[2]:
        with _lock:
            return kernel(*args)
    return kernel(*args)


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
    _, parallel, _, why = _current()
    return {
        "cpu": cpu_model(),
        "threading_layer": numba.threading_layer(),
        "num_threads": numba.get_num_threads(),
        "parallel": parallel,
        "parallel_reason": why,
        "tbb_loaded": _state["tbb_loaded"],
        "tbb_path": _state["tbb_path"],
        "openmp_runtimes": openmp_runtimes(),
    }
