"""What a run records about where and with what it ran: code, packages, host, devices, memory."""

from __future__ import annotations

import os
import platform
import resource
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from xmcbench import __version__
from xmcbench.errors import XmcbenchError
from xmcbench.redact import redact

GPUS_ALLOCATED_ENV = "XMCBENCH_GPUS_ALLOCATED"  # set by a sweep launcher: GPUs held for this run
RECORDED_PACKAGES = ("torch", "transformers", "numpy", "scipy", "scikit-learn", "duckdb", "faiss-cpu", "faiss-gpu")


def git_state() -> tuple[str | None, bool | None]:
    """The commit of xmcbench itself (not of the working directory the user runs from)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None, None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = (
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--", "xmcbench", "pyproject.toml"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            != ""
        )
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def packages() -> dict[str, str]:
    out = {}
    for name in RECORDED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def command_line(command: str | None) -> str:
    """The command that started the run, secrets masked."""
    return redact(command or " ".join(["xmcbench", *sys.argv[1:]]))


def attempt_facts(command: str | None) -> dict[str, Any]:
    """What this attempt (the first run or a resume) ran with; each attempt may run other code."""
    commit, dirty = git_state()
    return {
        "xmcbench_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "packages": packages(),
        "command": command_line(command),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def resolve_device(requested: str) -> str:
    """``auto`` -> cuda when a GPU is visible, else cpu; ``cuda`` without a GPU is an error."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise XmcbenchError("hardware.devices is 'cuda' but no CUDA GPU is visible; use devices: auto or cpu")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def compute_facts(device: str, world_size: int) -> dict[str, Any]:
    import torch

    device = device.split(":")[0]  # cuda:LOCAL_RANK under torchrun
    facts: dict[str, Any] = {
        "device_type": device,
        "device_names": [],
        "device_count": world_size if device == "cuda" else 1,
        "cuda_version": torch.version.cuda,
        "driver_version": None,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_threads": torch.get_num_threads(),  # what the run computed with (a sweep shares the cores)
        "ram_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 2)
        if hasattr(os, "sysconf")
        else None,
        "wall_time_s": {},
        "gpu_hours": 0.0,
        # what a launcher gave the run: the GPU ids it may see, and the GPUs allocated to it
        # (a Slurm job may hold more than it uses; GPU-hours count what was held)
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus_allocated": _gpus_allocated(),
        "peak_gpu_mem_gb": None,
        "peak_host_mem_gb": None,
    }
    if device == "cuda":
        facts["device_names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())][:world_size]
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            facts["driver_version"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    else:
        facts["device_names"] = [facts["cpu"]]
    return facts


def _gpus_allocated() -> int | None:
    value = os.environ.get(GPUS_ALLOCATED_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def billed_gpus(compute: dict[str, Any]) -> int:
    """The GPUs a run is charged for: those allocated to it, at least those it used."""
    if compute.get("device_type") != "cuda":
        return 0
    return max(int(compute.get("device_count") or 1), int(compute.get("gpus_allocated") or 0))


def gpu_hours(walls: dict[str, float], accounting: dict[str, Any], gpus: int) -> tuple[float, float]:
    """(GPU-hours of the model, the part another run spent): the train and predict phases' time, less
    what the method spent waiting on another run (``accounting.waited_s``), plus the training it took
    over from another run (``accounting.reused_wall_s``, e.g. a kept MACLR pre-training), so the
    reported cost of a model does not depend on which run computed a shared stage first."""
    own = max(walls.get("train", 0.0) - float(accounting.get("waited_s") or 0.0), 0.0) + walls.get("predict", 0.0)
    reused = float(accounting.get("reused_wall_s") or 0.0)
    return (own + reused) / 3600 * gpus, reused / 3600 * gpus


def update_peak_memory(compute: dict[str, Any], device: str) -> None:
    """Peak memory of this process, kept as the maximum over the run's attempts (resumes)."""
    host = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3)  # ru_maxrss: KiB on Linux
    compute["peak_host_mem_gb"] = max(host, compute.get("peak_host_mem_gb") or 0.0)
    if device.startswith("cuda"):
        import torch

        gpu = round(torch.cuda.max_memory_allocated() / 1024**3, 3)
        compute["peak_gpu_mem_gb"] = max(gpu, compute.get("peak_gpu_mem_gb") or 0.0)
