"""NumPy's floating-point error handling (``np.errstate``, ``np.seterr``) for jitops' ops.

The kernels read the hardware's sticky exception flags (x86-64's MXCSR) around every task --
cleared before it, read after it, ORed over a job's tasks -- and a launch that raised some
returns ``FP_RAISED | flags`` instead of OK (jitops.cpu.kernels.binary). The result is written
either way; :func:`report` then does what ``np.geterr()`` asks for each flag, in NumPy's
order (divide, over, under, invalid): nothing, a RuntimeWarning, a FloatingPointError, a call
of ``np.geterrcall()``, a line on stdout, or a ``write`` to the errcall object -- with NumPy's
message, ``"divide by zero encountered in divide"``. A call that raised no flag costs the
kernels two MXCSR reads and one write, and Python nothing.

Flags an op raises where NumPy's loop reports none are masked per launch (:func:`mask`):
maximum, minimum, fmax and fmin (comparing a NaN raises *invalid* on x86, as NumPy's min/max
loops clear), the invalid flag of relu-type activations (a max with 0), and every flag of the
transcendental activations (their float64 internals may overflow where the result is exact).
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

from .catalog import QUIET

INVALID, DIVIDE, OVERFLOW, UNDERFLOW = 0x1, 0x4, 0x8, 0x10
ALL = INVALID | DIVIDE | OVERFLOW | UNDERFLOW

#: NumPy's order, its errstate keys, its words, and the flag values errcall gets.
_KINDS = ((DIVIDE, "divide", "divide by zero", 1), (OVERFLOW, "over", "overflow", 2),
          (UNDERFLOW, "under", "underflow", 4), (INVALID, "invalid", "invalid value", 8))
_MINMAX = ("maximum", "minimum", "fmax", "fmin")
_MAX_WITH_ZERO = frozenset({"relu", "relu6", "leaky_relu"})
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def mask(op: str, act: str | None) -> int:
    """The flags a built-in launch of ``op`` (a scalar-table entry) with ``act`` reports."""
    if op.startswith(_MINMAX) or op in QUIET:
        return 0
    if act is None:
        return ALL
    return ALL & ~INVALID if act in _MAX_WITH_ZERO else 0


def stacklevel() -> int:
    """The first frame outside jitops, as ``warnings.warn``'s stacklevel from the caller."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f, level = f.f_back, level + 1
    return level


def report(flags: int, fname: str) -> None:
    """Act on the raised ``flags`` as ``np.geterr()`` says (see the module docstring). An
    ``errcall`` function gets every raised kind's code ORed (NumPy's whole status), once per
    kind that calls it."""
    err = None
    status = 0
    for bit, _, _, code in _KINDS:
        if flags & bit:
            status |= code
    for bit, key, words, _ in _KINDS:
        if not flags & bit:
            continue
        if err is None:
            err = np.geterr()
        how = err[key]
        if how == "ignore":
            continue
        msg = f"{words} encountered in {fname}"
        if how == "raise":
            raise FloatingPointError(msg)
        if how == "warn":
            warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel())
        elif how == "call":
            np.geterrcall()(words, status)
        elif how == "print":
            print(f"Warning: {msg}")
        elif how == "log":
            np.geterrcall().write(f"Warning: {msg}\n")
