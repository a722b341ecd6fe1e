"""A memory bank of detached query embeddings, the input of NGAME's periodic re-clustering.

NGAME re-clusters the training queries every few epochs without a separate encoding pass: the
embeddings the model computed for each query during training are kept (detached, on the CPU)
and the most recent one per query is clustered. Queries not yet seen keep their initial
embedding (or zeros, which the clustering treats as pointing nowhere in particular).
"""

from __future__ import annotations

import numpy as np
import torch

from xmcbench.errors import XmcbenchError

__all__ = ["MemoryBank"]


class MemoryBank:
    """(N, d) float32 embeddings, updated row-wise from training batches."""

    def __init__(self, n: int, dim: int, initial: np.ndarray | None = None):
        if initial is not None:
            if initial.shape != (n, dim):
                raise XmcbenchError(f"initial memory bank must have shape {(n, dim)}; got {tuple(initial.shape)}")
            self.embeddings = np.array(initial, dtype=np.float32, copy=True)
        else:
            self.embeddings = np.zeros((n, dim), dtype=np.float32)
        self.updated = np.zeros(n, dtype=bool)  # rows written since construction

    def update(self, indices: np.ndarray | torch.Tensor, embeddings: torch.Tensor | np.ndarray) -> None:
        """Store ``embeddings`` (b, d) for the queries ``indices`` (b,), detached and on the CPU."""
        if isinstance(embeddings, torch.Tensor):
            embeddings = embeddings.detach().float().cpu().numpy()
        if isinstance(indices, torch.Tensor):
            indices = indices.cpu().numpy()
        idx = np.asarray(indices, dtype=np.int64)
        self.embeddings[idx] = embeddings
        self.updated[idx] = True

    @property
    def coverage(self) -> float:
        """Fraction of queries written at least once."""
        return float(self.updated.mean()) if self.updated.size else 0.0

    def state_dict(self) -> dict:
        # Tensors, not numpy arrays, so that torch.load(weights_only=True) accepts the checkpoint.
        return {"embeddings": torch.from_numpy(self.embeddings.copy()), "updated": torch.from_numpy(self.updated.copy())}

    def load_state_dict(self, state: dict) -> None:
        embeddings = np.array(torch.as_tensor(state["embeddings"]).numpy(), dtype=np.float32)
        if embeddings.shape != self.embeddings.shape:
            raise XmcbenchError(
                f"cannot resume the memory bank: checkpoint shape {embeddings.shape} differs from "
                f"{self.embeddings.shape}; resume with the dataset and encoder the checkpoint was made with"
            )
        self.embeddings = embeddings
        self.updated = np.array(torch.as_tensor(state["updated"]).numpy(), dtype=bool)
