"""Compiling for a current GPU on a machine without one (numba-cuda, not the simulator).

numba-cuda asks the driver only for the current device's compute capability while it
compiles, and for a context when it loads the cubin it linked; :func:`patches` answers the
first with 9.0 and makes "loading" stop at the linked cubin (nvJitLink, no driver needed).
Used by tests/test_cuda_compile.py (through monkeypatch) and by its cache test's child
processes (:func:`install`).
"""

CC = (9, 0)


class Device:
    compute_capability = CC
    id = 0


class Context:
    device = Device()


def patches() -> list[tuple[object, str, object]]:
    import numba.cuda.compiler
    import numba.cuda.cudadrv.devices
    import numba.cuda.dispatcher

    d = numba.cuda.dispatcher
    return [(d, "get_current_device", lambda: Device()),
            (numba.cuda.compiler, "get_current_device", lambda: Device()),
            (numba.cuda.cudadrv.devices, "get_context", lambda *a, **k: Context()),
            (d._Kernel, "bind", lambda self: self._codelibrary.get_cubin())]


def install() -> None:
    for obj, name, value in patches():
        setattr(obj, name, value)
