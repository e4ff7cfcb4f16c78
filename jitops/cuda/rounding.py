"""jitops' CUDA kernels round every multiply and add on its own, as NumPy and the CPU do.

libNVVM contracts a multiply feeding an add into one fused multiply-add unless told
``-fma=0``, so on a GPU a user op ``a * b + c`` (or the real part of a complex product)
would round once where NumPy and jitops' CPU kernels round twice: results a unit in the
last place apart from NumPy's, seen on an H200 in 1 to 4 of every 12 float32 and float64
elements. numba-cuda passes NVVM no option for it, so this module wraps numba-cuda's
``nvvm.compile_ir`` -- the one function every kernel's IR goes through -- and adds
``fma=0`` where the IR holds one of jitops' kernels (``jitops.cuda.kernels``), and only
there: other kernels in the process compile as before. Fused multiply-adds asked for by
name (``jitops.act.fma``, the complex products NumPy itself fuses, libdevice's own
polynomials) are intrinsics, which the option leaves alone. The kernels are built without
link-time optimisation (jitops.cuda.kernels), whose code generation in nvJitLink would
fuse them again: on the H200, ``x * w + b`` in float64 gave 2788 of 10,000 elements one
unit in the last place off NumPy's with LTO, and 0 without.

It is a private interface of numba-cuda, fenced here: :func:`install` checks that the
function is there and takes ``(llvmir, **options)``, and ``JITOPS_DISABLE_HOOKS=nvvm_fma``
turns it off. Without it NVVM's default stands (the results of a multiply feeding an add
may be rounded once) and jitops warns once saying so. The kernels' disk cache keys on
whether it is in use (:func:`stamp`).
"""

from __future__ import annotations

import inspect

#: The hook's name for JITOPS_DISABLE_HOOKS.
NAME = "nvvm_fma"
#: What every jitops kernel's mangled name starts with in the IR NVVM compiles.
MARKER = "_ZN6jitops4cuda7kernels"

_state: dict[str, str | None] = {}


def holds_jitops_kernel(llvmir) -> bool:
    """Whether the IR (a string, bytes, or a list of them) defines a jitops kernel."""
    parts = llvmir if isinstance(llvmir, (list, tuple)) else [llvmir]
    return any((MARKER.encode() if isinstance(p, bytes) else MARKER) in p for p in parts)


def _wrap(compile_ir):
    def compile_ir_rounding_apart(llvmir, **options):
        if holds_jitops_kernel(llvmir) and not options.get("fastmath"):
            options["fma"] = False
        return compile_ir(llvmir, **options)

    compile_ir_rounding_apart.jitops_wrapped = compile_ir
    return compile_ir_rounding_apart


def _why_not() -> str | None:
    from numba.cuda.cudadrv import nvvm

    fn = getattr(nvvm, "compile_ir", None)
    if getattr(fn, "jitops_wrapped", None) is not None:
        return None
    params = list(inspect.signature(fn).parameters.values()) if callable(fn) else []
    kinds = [p.kind for p in params]
    if kinds != [inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_KEYWORD]:
        return "numba-cuda's nvvm.compile_ir is not compile_ir(llvmir, **options)"
    nvvm.compile_ir = _wrap(fn)
    return None


def install() -> bool:
    """Wrap numba-cuda's NVVM entry once per process; whether jitops' kernels get ``-fma=0``.
    A failed check warns once and leaves NVVM's default."""
    from ..cpu.compile.hooks import check_once

    return check_once(_state, NAME, _why_not, "NVVM may fuse a multiply and the add it feeds "
                      "in jitops' CUDA kernels (one rounding where NumPy has two)")


def stamp() -> str:
    """The part of the kernels' cache key that says how they were rounded."""
    return "fma-apart" if install() else "fma-contracted"
