"""Gradient cache for losses over very large label pools (Gao et al., 2021; DEXML Appendix B.5).

A loss over the whole label space needs every label's embedding, but keeping the encoder's
activations for a million labels does not fit in memory. The gradient cache splits the work:

1. ``cached_embeddings``: embed the inputs chunk by chunk without a graph -> one (N, d) leaf;
2. the caller computes the loss on that leaf and calls ``loss.backward()``: the leaf's ``.grad``
   is dLoss/dEmbedding;
3. ``backward_chunks``: re-run each chunk with a graph and backpropagate its slice of that
   gradient into the encoder, one chunk at a time.

Memory is bounded by one chunk's activations plus the (N, d) embeddings; the price is a second
forward pass. The result equals plain backpropagation through the same chunked forward, dropout
included: the torch RNG state is saved before each chunk of the first pass and restored for its
replay, so each chunk draws the same dropout mask twice. The replay runs inside
``torch.random.fork_rng``, so the global RNG ends where plain backpropagation would leave it.

Run ``backward_chunks`` under the same autocast context as ``cached_embeddings``. Under DDP pass
``no_sync=model.no_sync`` so that gradients are all-reduced once, on the last replayed chunk
(``gradcache_step`` arranges this for both sides; if you keep the query forward with a graph
yourself, run it under ``model.no_sync()`` too), and keep ``wrap_ddp``'s default
``broadcast_buffers=False``: ranks may replay different numbers of chunks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from xmcbench.errors import XmcbenchError

EncoderFn = Callable[[Any], torch.Tensor]  # one chunk of inputs -> (n, d) embeddings


@dataclass(frozen=True)
class RngSnapshot:
    """torch's CPU generator state and, when CUDA is in use, the current device's generator."""

    cpu: torch.Tensor
    cuda_device: int | None = None
    cuda: torch.Tensor | None = None

    @classmethod
    def capture(cls) -> RngSnapshot:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            device = torch.cuda.current_device()
            return cls(torch.get_rng_state(), device, torch.cuda.get_rng_state(device))
        return cls(torch.get_rng_state())

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        """Run the body with the captured state; the global RNG is untouched afterwards."""
        devices = [self.cuda_device] if self.cuda_device is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.cuda_device)
            yield


@dataclass
class CachedEmbeddings:
    """Embeddings computed without a graph, plus what the replay needs."""

    embeddings: torch.Tensor  # (N, d) leaf with requires_grad=True
    sizes: list[int]  # rows per chunk
    rng_states: list[RngSnapshot]  # RNG state before each chunk's first pass


def split_into_chunks(inputs: Any, chunk_size: int) -> list[Any]:
    """Split a tensor, a mapping of tensors (tokenizer output) or a tuple of tensors by rows."""
    if chunk_size < 1:
        raise XmcbenchError(f"chunk_size must be >= 1, got {chunk_size}")
    if isinstance(inputs, torch.Tensor):
        return list(inputs.split(chunk_size))
    if isinstance(inputs, Mapping):
        n = len(next(iter(inputs.values())))
        return [{k: v[start : start + chunk_size] for k, v in inputs.items()} for start in range(0, n, chunk_size)]
    if isinstance(inputs, (tuple, list)):
        n = len(inputs[0])
        return [tuple(v[start : start + chunk_size] for v in inputs) for start in range(0, n, chunk_size)]
    raise XmcbenchError(f"cannot split inputs of type {type(inputs).__name__}; pass a tensor, a dict or a tuple")


def cached_embeddings(encoder_fn: EncoderFn, inputs_chunks: Sequence[Any]) -> CachedEmbeddings:
    """First pass: embed every chunk without a graph; returns a (N, d) leaf that wants a gradient."""
    if len(inputs_chunks) == 0:
        raise XmcbenchError("gradient cache needs at least one chunk of inputs")
    outputs, sizes, states = [], [], []
    with torch.no_grad():
        for chunk in inputs_chunks:
            states.append(RngSnapshot.capture())
            emb = encoder_fn(chunk)  # (n_c, d)
            outputs.append(emb)
            sizes.append(emb.shape[0])
    embeddings = torch.cat(outputs).detach().requires_grad_(True)  # (N, d)
    return CachedEmbeddings(embeddings=embeddings, sizes=sizes, rng_states=states)


def backward_chunks(
    encoder_fn: EncoderFn,
    inputs_chunks: Sequence[Any],
    cached: CachedEmbeddings,
    grad: torch.Tensor | None = None,
    no_sync: Callable[[], AbstractContextManager] | None = None,
    sync_last: bool = True,
) -> None:
    """Second pass: replay each chunk with a graph and backpropagate its slice of ``grad``.

    ``grad`` defaults to ``cached.embeddings.grad`` (set by ``loss.backward()``). Parameter
    gradients accumulate into ``.grad`` as plain backpropagation would. With ``no_sync`` (DDP's
    ``model.no_sync``) every chunk but the last runs without gradient synchronisation; with
    ``sync_last=False`` the last one does too (when another replay follows in the same step).
    """
    grad = cached.embeddings.grad if grad is None else grad
    if grad is None:
        raise XmcbenchError("the cached embeddings have no gradient yet: call loss.backward() before backward_chunks")
    if len(inputs_chunks) != len(cached.sizes):
        raise XmcbenchError(
            f"backward_chunks got {len(inputs_chunks)} chunks but the cache was built from {len(cached.sizes)}"
        )
    start = 0
    last = len(inputs_chunks) - 1
    for index, (chunk, size, state) in enumerate(zip(inputs_chunks, cached.sizes, cached.rng_states)):
        skip_sync = no_sync is not None and (index < last or not sync_last)
        with no_sync() if skip_sync else contextlib.nullcontext():
            with state.replay():
                emb = encoder_fn(chunk)  # (n_c, d), now with a graph
            if emb.shape[0] != size:
                raise XmcbenchError(f"chunk {index} gave {emb.shape[0]} rows on replay but {size} the first time")
            torch.autograd.backward(emb, grad[start : start + size].to(emb.dtype))
        start += size


def gradcache_step(
    encoder_fn: EncoderFn,
    query_chunks: Sequence[Any],
    label_chunks: Sequence[Any],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    label_encoder_fn: EncoderFn | None = None,
    no_sync: Callable[[], AbstractContextManager] | None = None,
) -> torch.Tensor:
    """One training step's forward and backward with both sides cached.

    Embeds queries then labels without a graph, computes ``loss_fn(queries (B, d), labels (N, d))``,
    backpropagates to the embeddings, then replays queries and labels chunk by chunk. Leaves the
    parameter gradients exactly where plain backpropagation through the same chunks would; the
    caller then clips and steps the optimiser. Returns the detached loss.
    """
    label_encoder_fn = label_encoder_fn or encoder_fn
    queries = cached_embeddings(encoder_fn, query_chunks)
    labels = cached_embeddings(label_encoder_fn, label_chunks)
    loss = loss_fn(queries.embeddings, labels.embeddings)
    loss.backward()
    # Queries never sync: only the very last chunk of the step triggers DDP's all-reduce.
    backward_chunks(encoder_fn, query_chunks, queries, no_sync=no_sync, sync_last=False)
    backward_chunks(label_encoder_fn, label_chunks, labels, no_sync=no_sync)
    return loss.detach()
