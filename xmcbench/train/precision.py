"""Mixed precision and random-number state.

Precision: ``bf16`` means bfloat16 autocast (weights and optimiser state stay fp32, so no loss
scaling is needed) on a CUDA device, and on a CPU where bf16 runs faster than fp32. Having bf16
instructions (AVX512-BF16 or AMX) is not enough: on an AMD EPYC with AVX512-BF16 the methods'
training steps ran 1.5-1.75x faster in bf16, but on a 2-core Intel Emerald Rapids without AMX
1.3-1.6x slower (``python -m benchmarks --only train``), because torch's fp32 matmul (MKL) takes its
AVX-512 path on Intel CPUs only, and oneDNN's AVX512-BF16 kernels do not beat it there. So the CPU
is asked once (``cpu_bf16_speedup``, kept per machine): a MiniLM-sized matmul in both precisions;
``XMCBENCH_CPU_BF16=on|off`` overrides it (``use_cpu_bf16``). Without bf16 instructions bf16 would
be emulated, far slower. Where bf16 is not used, ``bf16`` runs fp32 and the run says so
(``resolve_precision``).
``auto`` is bf16 on CUDA and fp32 on any CPU: CPU results stay comparable across machines unless
a recipe asks for bf16. ``fp16`` is refused: it would need a gradient scaler, and bf16 is
available wherever fp16 is worth using here.

RNG: ``seed_everything`` seeds Python, NumPy and torch (CPU and CUDA); ``rng_state`` /
``set_rng_state`` capture and restore all four so that a resumed run draws the same dropout masks
and batch orders as an uninterrupted one. The captured state contains only plain Python values
and tensors.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import platform
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xmcbench.cpus import cpu_identity
from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import file_lock, write_json
from xmcbench.paths import cache_dir

PRECISIONS = ("fp32", "bf16")

log = logging.getLogger(__name__)


def check_precision(precision: str) -> str:
    """Return ``precision`` if it is supported, else raise an error that says what to use."""
    if precision not in PRECISIONS:
        hint = " (fp16 needs loss scaling; use bf16)" if precision == "fp16" else ""
        raise XmcbenchError(f"unknown precision {precision!r}{hint}; choose one of {', '.join(PRECISIONS)}")
    return precision


# bf16 must be clearly faster to be used: the measured speed-ups were 1.5-1.75x (pays) and
# 0.55-0.64x (does not), far from this line.
_BF16_MIN_SPEEDUP = 1.2
CPU_BF16_ENV = "XMCBENCH_CPU_BF16"  # on | off | auto (default): overrides the probe
_PROBE_LOCK = threading.Lock()


def cpu_bf16_setting() -> str:
    """``XMCBENCH_CPU_BF16``: on, off or auto (unset); anything else is an error that says so."""
    choice = os.environ.get(CPU_BF16_ENV, "auto").strip().lower()
    if choice not in ("on", "off", "auto"):
        raise XmcbenchError(f"{CPU_BF16_ENV}={choice!r}: use on, off or auto")
    return choice


@functools.cache  # autocast asks on every training step
def cpu_has_bf16_instructions() -> bool:
    """Whether this CPU has bf16 matmul instructions (AVX512-BF16 or AMX), as torch detects them."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    try:  # private helpers of torch.cpu: absent on other builds and architectures, which then run fp32
        return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)
    except Exception:  # noqa: BLE001 - a probe must never stop a run
        return False


def cpu_bf16_speedup() -> float | None:
    """fp32 time / bf16 time of a matmul the size of MiniLM's feed-forward layer on one core of
    this CPU; None when the CPU has no bf16 instructions.

    Measured once per machine and kept in ``$XMCBENCH_HOME/cache/cpu-bf16.json`` (keyed by the CPU
    and torch's version), so every run, seed, rank and resumed attempt on one machine makes the
    same choice, whatever the load at the moment; delete the file to measure again. Where the file
    cannot be written (a read-only or full home, a lock held too long), the answer holds for this
    process alone.
    """
    global _speedup
    if not cpu_has_bf16_instructions():
        return None
    with _PROBE_LOCK:  # one measurement per process, whatever the number of threads asking
        if _speedup is None:
            _speedup = _kept_or_measured()
        return _speedup


_speedup: float | None = None  # this process's answer (cpu_bf16_speedup)


def _kept_or_measured() -> float:
    path = cache_dir() / "cpu-bf16.json"
    key = _machine_key()
    kept = _read_probes(path).get(key)  # read first: a read-only home still has its answer
    if kept is not None:
        return kept
    try:
        with file_lock(path.with_suffix(".lock"), timeout=60, what="the bf16 probe"):
            known = _read_probes(path)  # another process may have measured while this one waited
            if key in known:
                return known[key]
            known[key] = _time_bf16_matmul()
            try:
                write_json(path, known)
            except OSError:  # a full disk: the answer holds for this process alone
                pass
            return known[key]
    except (OSError, XmcbenchError):  # no lock (read-only home, or held too long): measured here alone
        return _time_bf16_matmul()


def use_cpu_bf16() -> bool:
    """Whether bf16 autocast runs on this CPU when asked for: ``XMCBENCH_CPU_BF16=on`` wherever the
    CPU has bf16 instructions, ``off`` never, else where bf16 measured clearly faster (``cpu_bf16_speedup``)."""
    choice = cpu_bf16_setting()
    if choice == "off" or not cpu_has_bf16_instructions():
        return False
    if choice == "on":
        return True
    speedup = cpu_bf16_speedup()
    return speedup is not None and speedup >= _BF16_MIN_SPEEDUP


def cpu_bf16_why_not() -> str:
    """Why this CPU runs fp32 where bf16 was asked for (for warnings)."""
    if not cpu_has_bf16_instructions():
        return "this CPU has no bf16 instructions (AVX512-BF16 or AMX), so bf16 would be emulated"
    if cpu_bf16_setting() == "off":
        return f"{CPU_BF16_ENV}=off"
    return (
        f"a bf16 matmul ran at {cpu_bf16_speedup():.2f}x fp32's speed on this CPU "
        f"(set {CPU_BF16_ENV}=on to use bf16 anyway)"
    )


def _time_bf16_matmul() -> float:
    generator = torch.Generator().manual_seed(0)  # never the global generator a run seeds
    x = torch.randn(512, 384, generator=generator)
    w = torch.randn(1536, 384, generator=generator)
    x_half, w_half = x.bfloat16(), w.bfloat16()

    def seconds(a: torch.Tensor, b: torch.Tensor) -> float:
        start = time.perf_counter()
        torch.mm(a, b.T)
        return time.perf_counter() - start

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a property of the kernels: one core, whoever else is busy
    try:
        # an enclosing autocast would turn the fp32 product into a bf16 one
        with torch.inference_mode(), torch.autocast("cpu", enabled=False):
            fp32, half = [], []
            for i in range(7):  # alternated, so a burst of load slows both alike
                fp32.append(seconds(x, w))
                half.append(seconds(x_half, w_half))
    finally:
        torch.set_num_threads(threads)
    speedup = min(fp32[2:]) / max(min(half[2:]), 1e-9)  # the first calls pick kernels and fault pages in
    log.info("bf16 matmul on this CPU: %.2fx the speed of fp32", speedup)
    return speedup


def _machine_key() -> str:
    """The CPU (model name, family, model, stepping) and torch's version: what the probe's answer depends on."""
    fields = [v for k, v in cpu_identity().items() if k != "flags"] or [platform.processor() or platform.machine()]
    return " | ".join([*fields, f"torch {torch.__version__}"])


def _read_probes(path: Path) -> dict:
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or damaged: measured again
        return {}
    if not isinstance(known, dict):
        return {}
    return {k: float(v) for k, v in known.items() if isinstance(v, (int, float)) and math.isfinite(v) and v > 0}


def resolve_precision(requested: str, device: str | torch.device, *, quiet: bool = False) -> str:
    """What a run computes in, given the recipe's ``training.precision`` and the device.

    ``auto``: bf16 on CUDA, fp32 elsewhere. ``bf16`` where the device has no bf16
    (``autocast_dtype``) runs fp32, with a warning unless ``quiet``; the record holds what ran.
    """
    kind = torch.device(device).type
    if requested == "auto":
        return "bf16" if kind == "cuda" else "fp32"
    if requested == "bf16" and autocast_dtype(device, requested) is None:
        if not quiet:
            what = cpu_bf16_why_not() if kind == "cpu" else f"no bf16 on {kind}"
            log.warning("precision bf16: %s; running fp32", what)
        return "fp32"
    return check_precision(requested)


def autocast_dtype(device: str | torch.device, precision: str) -> torch.dtype | None:
    """The dtype autocast uses for ``device`` and ``precision``; None means plain fp32."""
    check_precision(precision)
    if precision != "bf16":
        return None
    kind = torch.device(device).type
    if kind == "cuda" or (kind == "cpu" and use_cpu_bf16()):
        return torch.bfloat16
    return None


@contextlib.contextmanager
def autocast(device: str | torch.device, precision: str) -> Iterator[None]:
    """bf16 autocast where ``precision == "bf16"`` and the device has bf16 (``autocast_dtype``); fp32 otherwise."""
    dtype = autocast_dtype(device, precision)
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
        yield


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def rng_state() -> dict[str, Any]:
    """The state of every global random generator a training loop may draw from."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "python": random.getstate(),
        # NumPy's key array becomes a list so the state holds no arrays (loads with weights_only).
        "numpy": (kind, keys.tolist(), pos, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a state captured by :func:`rng_state`.

    CUDA states are restored for as many devices as both the capture and this machine have;
    a checkpoint written on a GPU still resumes on a CPU (without CUDA draws to restore).
    """
    random.setstate(_as_tuple(state["python"]))
    kind, keys, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available():
        for index in range(min(len(cuda_states), torch.cuda.device_count())):
            torch.cuda.set_rng_state(cuda_states[index], index)


def _as_tuple(value: Any) -> Any:
    """random.setstate wants nested tuples; serialisers may hand back lists."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuple(v) for v in value)
    return value
