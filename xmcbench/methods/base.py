"""What a method is, and what the runner hands it.

A method is a class with a pydantic ``Config`` (its recipe parameters, ``extra="forbid"``),
``fit(task, ctx)``, ``predict(texts, k, ctx) -> CSR`` and ``save/load``. It reports its own
accounting (batch size, label pool per step, positives and hard negatives per query) into
``ctx.accounting`` so every run records the quantities that make XMC numbers comparable.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import sparse

from xmcbench.progress import duration


class MethodConfig(BaseModel):
    """Base of every method's Config: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def needs_faiss(self, supervision_mode: str) -> str | None:
        """Why this configuration needs faiss (an optional extra) under ``supervision_mode``, or None:
        the runner refuses such a recipe where faiss is missing before the run starts, not when
        training reaches it."""
        if getattr(self, "search_backend", None) == "faiss":
            return "method.search_backend is 'faiss'"
        return None


@dataclass
class TrainTask:
    """The training side of a dataset as the supervision regime allows the method to see it.

    ``train_labels`` is None in zero-shot mode; in few-shot mode only the sampled labels'
    columns hold positives (``seen_labels`` marks them). Label texts are always available:
    they are the label features the LF datasets are about.
    """

    dataset_name: str
    train_texts: Sequence[str]
    label_texts: Sequence[str]
    train_labels: sparse.csr_matrix | None
    seen_labels: np.ndarray | None = None  # bool (L,), few-shot only
    inv_propensity: np.ndarray | None = None  # (L,) from the full training labels (evaluation's weights)
    dataset_version: str | None = None  # fingerprint of the raw files: keys tokenisation caches
    # Raw title and body of each training instance, for methods that pre-train on the text itself
    # (MACLR's Inverse Cloze Task); None when the dataset's format has no titles.
    train_titles: Sequence[str] | None = None
    train_contents: Sequence[str] | None = None
    supervision: dict | None = None  # regime, sampled label count, training pairs (recorded with the run)

    @property
    def n_labels(self) -> int:
        return len(self.label_texts)


@dataclass
class RunContext:
    """Run-wide settings and bookkeeping shared by the runner and the method."""

    run_dir: Path
    device: str = "cpu"
    precision: str = "fp32"
    seed: int = 0
    progress: bool = True
    world_size: int = 1
    accounting: dict[str, Any] = field(default_factory=dict)
    _pool_steps: int = 0
    _pool_sum: int = 0
    _epoch_clock: dict[str, Any] = field(default_factory=dict)  # log_epoch's state: start time, last step, pool

    @property
    def checkpoint_dir(self) -> Path:
        path = self.run_dir / "checkpoints"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def record_pool(self, pool_size: int) -> None:
        """Called once per training step with the number of labels in that step's loss.

        Counts this process's steps only; a method that resumes from a checkpoint should report
        totals it checkpointed itself (as DEXML does) so a resumed run covers all of training.
        """
        self._pool_steps += 1
        self._pool_sum += int(pool_size)
        self.accounting["pool_size_mean"] = self._pool_sum / self._pool_steps
        self.accounting["pool_size_max"] = max(int(pool_size), int(self.accounting.get("pool_size_max") or 0))
        self.accounting["steps"] = self._pool_steps

    def record_pools_elsewhere(self, runs: list[list[int]]) -> None:
        """Count steps another run trained for this model (``[pool size, steps]`` runs, e.g. a reused
        pre-training) in the totals, and not in the next epoch line's mean pool."""
        for pool, steps in runs:
            for _ in range(int(steps)):
                self.record_pool(pool)
        self._epoch_clock.update(pool_steps=self._pool_steps, pool_sum=self._pool_sum)

    def start_clock(self) -> None:
        """Mark the start of training (the runner calls it): ``log_epoch`` times epochs from here."""
        now = time.monotonic()
        self._epoch_clock.update(start=now, last=now)

    def log_epoch(
        self,
        epoch: int,
        epochs: int,
        step: int | None = None,
        loss: Any = None,
        scheduler: Any = None,
        queries: int | None = None,
        **facts: Any,
    ) -> dict[str, Any]:
        """Called once at the end of each training epoch (1-based ``epoch`` of ``epochs``).

        Logs one line to the ``xmcbench.train`` logger (INFO: stderr by default, whether or not a
        terminal is attached) and appends the same facts as one JSON object to
        ``train_log.jsonl`` in the run folder: epoch, step, loss (the last step's, when the
        method passes it), learning rate (from ``scheduler``), queries/s (``queries`` trained
        this epoch over its wall time), the mean label pool per step this epoch, elapsed and
        estimated remaining seconds, plus any extra ``facts``. Returns the entry.
        """
        now = time.monotonic()
        clock = self._epoch_clock
        start = clock.setdefault("start", clock.get("last", now))
        last = clock.get("last", start)
        seconds = max(now - last, 1e-9)
        entry: dict[str, Any] = {"epoch": int(epoch), "epochs": int(epochs)}
        if step is not None:
            entry["step"] = int(step)
        if loss is not None:
            value = float(loss.detach().float().mean()) if hasattr(loss, "detach") else float(loss)
            entry["loss"] = value if math.isfinite(value) else None
        lr = _learning_rate(scheduler)
        if lr is not None:
            entry["lr"] = lr
        if queries:
            entry["queries_per_s"] = round(queries / seconds, 2)
        steps, pool = self._pool_steps - clock.get("pool_steps", 0), self._pool_sum - clock.get("pool_sum", 0)
        if steps > 0:
            entry["pool_size"] = round(pool / steps, 1)
        elif self.accounting.get("pool_size_mean") is not None:
            entry["pool_size"] = round(float(self.accounting["pool_size_mean"]), 1)
        elapsed = now - start
        done_epochs = clock.get("epochs_timed", 0) + 1
        entry["elapsed_s"] = round(elapsed, 1)
        entry["remaining_s"] = round(elapsed / done_epochs * max(int(epochs) - int(epoch), 0), 1)
        entry.update(facts)
        entry["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        clock.update(last=now, pool_steps=self._pool_steps, pool_sum=self._pool_sum, epochs_timed=done_epochs)
        if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 alone logs and writes
            return entry
        _train_log.info(_epoch_line(entry))
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / TRAIN_LOG, "a", encoding="utf-8") as fh:  # append-only, one object a line
                fh.write(json.dumps(entry, allow_nan=False) + "\n")
        except OSError as exc:  # a full disk must not stop training; the line above was logged
            _train_log.warning("could not append to %s: %s", self.run_dir / TRAIN_LOG, exc)
        return entry

    def seed_everything(self) -> None:
        from xmcbench.train.precision import seed_everything

        seed_everything(self.seed)


TRAIN_LOG = "train_log.jsonl"
_train_log = logging.getLogger("xmcbench.train")


def _learning_rate(scheduler: Any) -> float | None:
    """The current learning rate of a torch scheduler (or of the first of several joined ones)."""
    while scheduler is not None and not hasattr(scheduler, "get_last_lr") and getattr(scheduler, "parts", None):
        scheduler = scheduler.parts[0]
    try:
        return float(scheduler.get_last_lr()[0]) if scheduler is not None else None
    except Exception:  # noqa: BLE001 - a scheduler without a learning rate is simply not logged
        return None


def _epoch_line(entry: dict[str, Any]) -> str:
    parts = [f"epoch {entry['epoch']}/{entry['epochs']}"]
    if "step" in entry:
        parts.append(f"step {entry['step']}")
    if entry.get("loss") is not None:
        parts.append(f"loss {entry['loss']:.4f}")
    if "lr" in entry:
        parts.append(f"lr {entry['lr']:.2e}")
    if "queries_per_s" in entry:
        parts.append(f"{entry['queries_per_s']:,.1f} queries/s")
    if "pool_size" in entry:
        parts.append(f"label pool {entry['pool_size']:,.0f}")
    parts.append(f"elapsed {duration(entry['elapsed_s'])}")
    parts.append(f"remaining ~{duration(entry['remaining_s'])}")
    return " | ".join(parts)


class Method(Protocol):
    name: ClassVar[str]
    Config: ClassVar[type[MethodConfig]]
    requires_labels: ClassVar[bool]  # False: usable zero-shot
    # why the method trains in one process (a recipe asking for more GPUs is refused); None: it spans GPUs
    single_process: ClassVar[str | None]
    uses_encoder: ClassVar[bool]  # True: the recipe's encoder section applies (recorded with the run)

    def __init__(self, config: MethodConfig, recipe: Any) -> None: ...

    def fit(self, task: TrainTask, ctx: RunContext) -> None: ...

    def predict(self, texts: Sequence[str], k: int, ctx: RunContext) -> sparse.csr_matrix: ...

    def save(self, path: Path) -> None: ...

    def load(self, path: Path) -> None: ...

    def parameter_counts(self) -> tuple[int, int]:
        """(total, trainable) parameters."""
        ...
