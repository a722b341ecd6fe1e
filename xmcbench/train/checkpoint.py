"""Checkpoint and resume: a resumed run follows the same trajectory as an uninterrupted one.

Layout of a checkpoint directory (``RunContext.checkpoint_dir``)::

    latest                          # name of the newest complete checkpoint
    epoch-0002-step-000000040/
        model.safetensors           # model weights (no pickle; shared tensors stored once)
        state.pt                    # optimiser, scheduler, per-rank RNG and sampler state, extra
        meta.json                   # epoch, step, world size, time: for people and tools

A checkpoint is written into a hidden temporary folder, flushed to disk, renamed into place, and
only then does ``latest`` move to it (atomic replace) and older checkpoints get deleted, so a crash
at any moment leaves the previous complete checkpoint in place. ``epoch`` is the number of
finished epochs and ``step`` the number of optimiser steps taken, so a resumed loop continues at
epoch ``epoch`` and step ``step``.

In a torchrun job every rank calls both functions: each rank's RNG and sampler state are
gathered to rank 0, which writes the files (model and optimiser are identical on all ranks under
DDP); every rank reads the same files back and restores its own RNG state.

``state.pt`` holds only tensors and plain Python values (NumPy arrays in ``sampler_state`` or
``extra`` are converted to tensors and back), so it is read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import atomic_write, fsync_path, install_dir, remove_stale_temps, temp_path
from xmcbench.train.distributed import all_gather_objects, barrier, get_rank, get_world_size, is_main, unwrap_model
from xmcbench.train.precision import rng_state, set_rng_state

log = logging.getLogger("xmcbench.train")

FORMAT_VERSION = 1
LATEST = "latest"
MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"
META_FILE = "meta.json"
_NAME = re.compile(r"^epoch-(\d+)-step-(\d+)$")
_NUMPY_TAG = "__numpy_array__"


def checkpoint_name(epoch: int, step: int) -> str:
    return f"epoch-{epoch:04d}-step-{step:09d}"


def save_checkpoint(
    directory: str | Path,
    epoch: int,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    sampler_state: dict | None = None,
    extra: dict | None = None,
    keep: int = 1,
) -> Path:
    """Write a complete checkpoint, point ``latest`` at it, keep the newest ``keep`` checkpoints.

    ``sampler_state``: what the batch sampler needs to continue (its generator state, cluster
    assignments, ...), per rank. ``extra``: anything else the method wants back (memory banks,
    best validation score). Returns the checkpoint's folder (on every rank).
    """
    if keep < 1:
        raise XmcbenchError(f"keep must be >= 1 (the newest checkpoint is always kept), got {keep}")
    directory = Path(directory)
    rank_state = {"rng": rng_state(), "sampler": _encode(sampler_state or {}, "sampler_state")}
    per_rank = all_gather_objects(rank_state)  # collective: every rank must call save_checkpoint
    final = directory / checkpoint_name(epoch, step)
    if is_main():
        directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(directory, only_dead=False)  # left by a save that crashed (one writer per run)
        tmp = temp_path(final)
        tmp.mkdir()
        save_model(unwrap_model(model), str(tmp / MODEL_FILE), metadata={"epoch": str(epoch), "step": str(step)})
        state = {
            "format": FORMAT_VERSION,
            "epoch": epoch,
            "step": step,
            "world_size": len(per_rank),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "ranks": per_rank,
            "extra": _encode(extra or {}, "extra"),
        }
        torch.save(state, tmp / STATE_FILE)
        meta = {
            "format": FORMAT_VERSION,
            "epoch": epoch,
            "step": step,
            "world_size": len(per_rank),
            "time": time.time(),
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        for path in tmp.iterdir():
            fsync_path(path)
        install_dir(tmp, final)
        atomic_write(directory / LATEST, final.name + "\n")
        _prune(directory, keep, final.name)
    barrier()  # no rank moves on (or exits) before the checkpoint is complete
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in ``directory``, or None when there is none yet."""
    directory = Path(directory)
    pointer = directory / LATEST
    if not pointer.exists():
        # ``latest`` deleted by hand: a complete checkpoint folder still beats training from scratch
        # (folders are renamed into place whole, so any that holds both files was finished).
        found = _complete_checkpoints(directory)
        if found:
            log.warning("%s is missing; resuming from %s, the newest complete checkpoint", pointer, found[-1].name)
        return found[-1] if found else None
    name = pointer.read_text(encoding="utf-8", errors="replace").strip()
    path = directory / name
    if not _NAME.match(name) or not (path / STATE_FILE).is_file() or not (path / MODEL_FILE).is_file():
        raise XmcbenchError(
            f"{pointer}: points to {name!r}, which is not a complete checkpoint; delete {directory} "
            "to train this run again from its first epoch, or write the name of a complete checkpoint folder into it"
        )
    return path


def load_checkpoint(
    directory: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
    allow_world_size_change: bool = False,
) -> dict[str, Any] | None:
    """Restore the newest checkpoint into ``model``/``optimizer``/``scheduler`` and the RNGs.

    Returns None when ``directory`` holds no checkpoint, else ``{"epoch", "step",
    "sampler_state" (this rank's), "extra", "path"}``. The optimiser and scheduler must be
    built exactly as in the run that saved (same groups, same schedule arguments).
    A different world size cannot reproduce the trajectory and is refused unless
    ``allow_world_size_change`` (then rank r takes the RNG/sampler state of rank r mod saved).
    """
    path = latest_checkpoint(directory)
    if path is None:
        return None
    target = unwrap_model(model)
    device = next(iter(target.parameters()), torch.empty(0)).device
    # Deleting only the damaged folder would leave ``latest`` pointing at nothing: name the whole
    # checkpoint folder, whose removal makes the run train from its first epoch.
    restart = f"delete {directory} to train this run again from its first epoch"
    try:
        load_model(target, str(path / MODEL_FILE), strict=True, device=str(device))
    except SafetensorError as exc:  # cut short or overwritten: not a safetensors file any more
        raise XmcbenchError(f"{path / MODEL_FILE}: damaged checkpoint ({exc}); {restart}") from None
    except RuntimeError as exc:
        raise XmcbenchError(
            f"{path / MODEL_FILE}: does not fit this model ({str(exc).splitlines()[0]}); "
            "resume with the same method configuration, or start a new run directory"
        ) from None
    try:
        # RNG states must stay CPU tensors; the optimiser moves its state to the parameters itself.
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which one
        raise XmcbenchError(f"{path / STATE_FILE}: damaged checkpoint, cannot be read ({exc}); {restart}") from None
    if not isinstance(state, dict):
        raise XmcbenchError(f"{path / STATE_FILE}: damaged checkpoint (not a checkpoint's state); {restart}")
    if state.get("format") != FORMAT_VERSION:
        raise XmcbenchError(f"{path / STATE_FILE}: checkpoint format {state.get('format')} is not {FORMAT_VERSION}")
    world_size = get_world_size()
    if state["world_size"] != world_size and not allow_world_size_change:
        raise XmcbenchError(
            f"{path}: was written by {state['world_size']} process(es) but this run has {world_size}; "
            "resume with the same number of processes to reproduce the run"
        )
    if optimizer is not None and state["optimizer"] is not None:
        try:
            optimizer.load_state_dict(state["optimizer"])
        except ValueError as exc:
            raise XmcbenchError(f"{path / STATE_FILE}: optimiser state does not fit this optimiser ({exc})") from None
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    mine = state["ranks"][get_rank() % len(state["ranks"])]
    if restore_rng:
        set_rng_state(mine["rng"])
    return {
        "epoch": state["epoch"],
        "step": state["step"],
        "sampler_state": _decode(mine["sampler"]),
        "extra": _decode(state["extra"]),
        "path": path,
    }


def _complete_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint folders holding both weight and state files, oldest first (by step, then epoch)."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match and (path / STATE_FILE).is_file() and (path / MODEL_FILE).is_file():
            found.append((int(match.group(2)), int(match.group(1)), path))
    return [path for _, _, path in sorted(found)]


def _prune(directory: Path, keep: int, newest: str) -> None:
    """Delete all but the ``keep`` newest checkpoints (by step, then epoch); never ``newest``."""
    found = []
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(2)), int(match.group(1)), path))
    found.sort(key=lambda item: (item[0], item[1]))
    doomed = [path for _, _, path in found[:-keep] if path.name != newest]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)


def _encode(value: Any, where: str) -> Any:
    """Replace NumPy arrays/scalars by tensors (tagged) so the state loads with weights_only."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise XmcbenchError(f"{where}: cannot checkpoint a NumPy array of dtype {value.dtype}; use numbers")
        return {_NUMPY_TAG: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_encode(v, where) for v in value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_NUMPY_TAG}:
            return value[_NUMPY_TAG].cpu().numpy()
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_decode(v) for v in value)
    return value
