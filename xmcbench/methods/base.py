"""What a method is, and what the runner hands it.

A method is a class with a pydantic ``Config`` (its recipe parameters, ``extra="forbid"``),
``fit(task, ctx)``, ``predict(texts, k, ctx) -> CSR`` and ``save/load``. It reports its own
accounting (batch size, label pool per step, positives and hard negatives per query) into
``ctx.accounting`` so every run records the quantities that make XMC numbers comparable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import sparse


class MethodConfig(BaseModel):
    """Base of every method's Config: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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

    def seed_everything(self) -> None:
        from xmcbench.train.precision import seed_everything

        seed_everything(self.seed)


class Method(Protocol):
    name: ClassVar[str]
    Config: ClassVar[type[MethodConfig]]
    requires_labels: ClassVar[bool]  # False: usable zero-shot
    uses_encoder: ClassVar[bool]  # True: the recipe's encoder section applies (recorded with the run)

    def __init__(self, config: MethodConfig, recipe: Any) -> None: ...

    def fit(self, task: TrainTask, ctx: RunContext) -> None: ...

    def predict(self, texts: Sequence[str], k: int, ctx: RunContext) -> sparse.csr_matrix: ...

    def save(self, path: Path) -> None: ...

    def load(self, path: Path) -> None: ...

    def parameter_counts(self) -> tuple[int, int]:
        """(total, trainable) parameters."""
        ...
