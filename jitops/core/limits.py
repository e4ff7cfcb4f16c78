"""What this process may really use: its CPU quota and its memory limit.

A container run with ``--cpus=1`` or ``--memory=2g`` on a large host still sees every core
in its affinity and all the host's memory in ``sysconf``; the limits live in its control
group (cgroup v2's ``cpu.max``, ``memory.max``, ``memory.high``; v1's ``cpu.cfs_quota_us``,
``memory.limit_in_bytes``) and in its resource limits (``RLIMIT_AS``, ``RLIMIT_DATA``). Each
function reads them afresh (a forked child may live in another group) and says where the
number came from, for ``python -m jitops info``. Linux only; elsewhere there is no limit.
"""

from __future__ import annotations

import math
import os

#: Where cgroup file systems are mounted, and where this process's groups are listed (tests
#: point both elsewhere).
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _groups() -> list[tuple[str, str]]:
    """``(controllers, path)`` of each line of ``/proc/self/cgroup`` (v2's controllers: "")."""
    text = _read(PROC_CGROUP) or ""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[1], parts[2]))
    return out


def _group_dirs(controller: str) -> list[str]:
    """The directories of this process's cgroup for ``controller`` and of each ancestor (a
    limit anywhere up the tree holds), innermost first; v2's unified tree where mounted."""
    dirs = []
    for controllers, path in _groups():
        if controllers == "" and os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
            base = CGROUP_ROOT
        elif controller in controllers.split(","):
            base = os.path.join(CGROUP_ROOT, controllers)
            if not os.path.isdir(base):
                base = os.path.join(CGROUP_ROOT, controller)
        else:
            continue
        rel = path.strip("/")
        while True:
            d = os.path.join(base, rel) if rel else base
            if os.path.isdir(d):
                dirs.append(d)
            if not rel:
                break
            rel = os.path.dirname(rel)
    return dirs


def cpu_quota() -> tuple[int | None, str]:
    """The CPUs the cgroup's CPU quota allows (quota over period, rounded up), or None."""
    best, where = None, ""
    for d in _group_dirs("cpu"):
        v2 = _read(os.path.join(d, "cpu.max"))
        if v2 is not None:
            quota, _, period = v2.partition(" ")
            if quota != "max" and period:
                try:
                    n = math.ceil(int(quota) / int(period))
                except (ValueError, ZeroDivisionError):
                    continue
                if best is None or n < best:
                    best, where = n, os.path.join(d, "cpu.max")
            continue
        quota, period = _read(os.path.join(d, "cpu.cfs_quota_us")), \
            _read(os.path.join(d, "cpu.cfs_period_us"))
        try:
            q, p = int(quota), int(period)
        except (TypeError, ValueError):
            continue
        if q > 0 and p > 0:
            n = math.ceil(q / p)
            if best is None or n < best:
                best, where = n, os.path.join(d, "cpu.cfs_quota_us")
    return (max(1, best) if best is not None else None), where


def _cgroup_memory() -> tuple[int | None, str]:
    best, where = None, ""
    for d in _group_dirs("memory"):
        for name in ("memory.max", "memory.high", "memory.limit_in_bytes"):
            text = _read(os.path.join(d, name))
            if text is None or text == "max":
                continue
            try:
                n = int(text)
            except ValueError:
                continue
            if n < (1 << 60) and (best is None or n < best):  # v1's "none" is ~2**63
                best, where = n, os.path.join(d, name)
    return best, where


def address_limit() -> int | None:
    """The lower of the soft ``RLIMIT_AS`` and ``RLIMIT_DATA`` (bytes), None where neither
    is set: cheap enough (two system calls) to read before each large allocation."""
    found = _rlimits()
    return min(found)[0] if found else None


def _rlimits() -> list[tuple[int, str]]:
    try:
        import resource
    except ImportError:
        return []
    out = []
    for name in ("RLIMIT_AS", "RLIMIT_DATA"):
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            soft, _ = resource.getrlimit(which)
        except (OSError, ValueError):
            continue
        if soft != resource.RLIM_INFINITY and soft > 0:
            out.append((soft, name))
    return out


def physical_memory() -> int:
    """Bytes of physical memory (POSIX ``sysconf``), or 0 where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 0


def memory_limit() -> tuple[int, str]:
    """The most memory this process may use, and where that came from: the least of its
    cgroup's limit, ``RLIMIT_AS``/``RLIMIT_DATA`` and physical memory (0, "unknown" where
    none can be read)."""
    cgroup, where = _cgroup_memory()
    candidates = ([(cgroup, where)] if cgroup is not None else []) + _rlimits()
    phys = physical_memory()
    if phys:
        candidates.append((phys, "physical memory"))
    if not candidates:
        return 0, "unknown"
    return min(candidates)
