"""How many CPU threads xmcbench's own work may use: one answer for every part that asks.

``OMP_NUM_THREADS``, when it holds a positive integer, is the budget: a sweep sets each run's
share of the cores there, and torch, MKL and OpenBLAS read the same variable, so xmcbench's
threads (evaluation blocks, a sweep's split of the machine) agree with theirs. Otherwise the
budget is the CPUs this process may really use, which in a container or under ``taskset`` is
fewer than ``os.cpu_count()`` (the host's count): the CPUs it may be scheduled on, capped by a
cgroup v2 CPU quota (``docker --cpus=2`` leaves all the host's CPUs schedulable but grants two).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus(cpu_max: Path = _CGROUP_CPU_MAX) -> int:
    """The CPUs this process may use: schedulable ones, capped by a cgroup v2 quota (rounded up)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota(cpu_max)
    return max(1, min(cpus, quota) if quota is not None else cpus)


def _cgroup_quota(cpu_max: Path) -> int | None:
    """CPUs granted by ``cpu.max`` ("QUOTA PERIOD" in microseconds, or "max PERIOD"), or None."""
    try:
        fields = cpu_max.read_text().split()
    except OSError:  # no cgroup v2 here, or not readable: no quota to honour
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return math.ceil(quota / period) if quota > 0 and period > 0 else None


def cpu_threads() -> int:
    """Threads xmcbench's own CPU work uses unless told: OMP_NUM_THREADS where set, else ``usable_cpus()``."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return usable_cpus()
