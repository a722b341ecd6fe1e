"""Mixed precision and random-number state.

Precision: ``bf16`` means bfloat16 autocast (weights and optimiser state stay fp32, so no loss
scaling is needed) on a CUDA device, and on a CPU that multiplies bf16 in hardware (AVX512-BF16
or AMX: MiniLM's linear layers ran 2.5x and the methods' training steps 1.5-1.6x faster than
fp32 on one such core, ``python -m benchmarks --only train``). Elsewhere bf16 would be emulated,
slower than fp32, so there ``bf16`` runs fp32 and the run says so (``resolve_precision``).
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
import logging
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from xmcbench.errors import XmcbenchError

PRECISIONS = ("fp32", "bf16")

log = logging.getLogger(__name__)


def check_precision(precision: str) -> str:
    """Return ``precision`` if it is supported, else raise an error that says what to use."""
    if precision not in PRECISIONS:
        hint = " (fp16 needs loss scaling; use bf16)" if precision == "fp16" else ""
        raise XmcbenchError(f"unknown precision {precision!r}{hint}; choose one of {', '.join(PRECISIONS)}")
    return precision


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 matmul instructions (AVX512-BF16 or AMX), as torch detects them."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    try:  # private helpers of torch.cpu: absent on other builds and architectures, which then run fp32
        return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)
    except Exception:  # noqa: BLE001 - a probe must never stop a run
        return False


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
            what = "this CPU has no bf16 instructions (AVX512-BF16 or AMX)" if kind == "cpu" else f"no bf16 on {kind}"
            log.warning("precision bf16: %s; running fp32", what)
        return "fp32"
    return check_precision(requested)


def autocast_dtype(device: str | torch.device, precision: str) -> torch.dtype | None:
    """The dtype autocast uses for ``device`` and ``precision``; None means plain fp32."""
    check_precision(precision)
    if precision != "bf16":
        return None
    kind = torch.device(device).type
    if kind == "cuda" or (kind == "cpu" and cpu_has_native_bf16()):
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
