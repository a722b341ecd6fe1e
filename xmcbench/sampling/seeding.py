"""Random generators derived from (seed, epoch, step, stream), so resumed runs draw the same samples.

Sampling positives and hard negatives with a generator that is a pure function of where the
training loop is means a run resumed from a checkpoint draws exactly what the uninterrupted run
would have drawn, without saving generator states. Each ``stream`` (e.g. "positives",
"negatives") gets independent numbers.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["step_rng"]


def step_rng(seed: int, epoch: int, step: int, stream: str) -> np.random.Generator:
    """A numpy Generator for one training step and one purpose."""
    return np.random.default_rng([int(seed), int(epoch), int(step), zlib.crc32(stream.encode("utf-8"))])
