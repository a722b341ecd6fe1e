"""This machine's CPUs: how many threads xmcbench's own work may use (one answer for every part
that asks), and which CPU it is (``cpu_identity``).

``OMP_NUM_THREADS``, when it holds a positive integer, is the budget: a sweep sets each run's
share of the cores there, and torch, MKL and OpenBLAS read the same variable, so xmcbench's
threads (evaluation blocks, a sweep's split of the machine) agree with theirs. Otherwise the
budget is the CPUs this process may really use, which in a container, a batch job or under
``taskset`` is fewer than ``os.cpu_count()`` (the host's count): the CPUs it may be scheduled on,
capped by the tightest cgroup v2 CPU quota over its cgroup and the cgroups above it
(``docker --cpus=2``, ``systemd-run -p CPUQuota=200%`` and Slurm leave every CPU schedulable but
grant two).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

_PROC_CPUINFO = Path("/proc/cpuinfo")
_PROC_CGROUP = Path("/proc/self/cgroup")  # "0::/the/process/cgroup" on cgroup v2
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cpus() -> int:
    """The CPUs this process may use: schedulable ones, capped by cgroup v2 quotas (rounded up)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(_PROC_CGROUP, _CGROUP_ROOT)
    return max(1, min(cpus, quota) if quota is not None else cpus)


def cgroup_cpu_quota(proc_cgroup: Path, root: Path) -> int | None:
    """CPUs granted by the tightest ``cpu.max`` over this process's cgroup and its parents, or None."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:  # not Linux, or /proc not mounted
        return None
    own = next((line[3:].strip() for line in lines if line.startswith("0::")), None)
    if own is None:  # cgroup v1 only: its quotas are not read here
        return None
    folder = root / own.lstrip("/")
    quotas = []
    while True:
        quota = _quota(folder / "cpu.max")
        if quota is not None:
            quotas.append(quota)
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    return min(quotas) if quotas else None


def _quota(cpu_max: Path) -> int | None:
    """CPUs one ``cpu.max`` grants ("QUOTA PERIOD" in microseconds, or "max PERIOD"), or None."""
    try:
        fields = cpu_max.read_text().split()
    except OSError:  # no such controller file here (the root cgroup has none)
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
    if env.isdecimal() and int(env) > 0:  # isdecimal: "²" is a digit to isdigit, and int() refuses it
        return int(env)
    return usable_cpus()


def cpu_identity() -> dict[str, str]:
    """The first CPU's vendor_id, model name, cpu family, model, stepping and flags from
    /proc/cpuinfo; {} where there is no such file (not Linux)."""
    wanted = ("vendor_id", "model name", "cpu family", "model", "stepping", "flags")
    fields: dict[str, str] = {}
    try:
        for line in _PROC_CPUINFO.read_text().splitlines():
            name, _, value = line.partition(":")
            name = name.strip()
            if name in wanted and name not in fields:
                fields[name] = value.strip()
            elif not line.strip() and fields:
                break  # the first CPU's block is enough
    except OSError:
        pass
    return fields
