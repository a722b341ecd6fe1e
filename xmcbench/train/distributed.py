"""torch.distributed plumbing for runs launched with torchrun (one process per GPU, or CPU/gloo).

    torchrun --nproc-per-node 4 -m xmcbench run recipe.yaml

``init_distributed()`` reads RANK / WORLD_SIZE / LOCAL_RANK from the environment torchrun sets
(NCCL on CUDA, gloo on CPU); without them it returns a one-process setup and every helper below
degrades to the identity, so the same method code runs on a laptop and on a GPU node.

Autograd convention for the collectives with gradients (``all_gather_with_grad``,
``all_reduce_sum``): the training objective is the SUM over ranks of the values each rank calls
``backward()`` on. Under that convention each rank ends with the gradient of the objective with
respect to its own inputs, and parameter gradients must be summed over ranks
(``all_reduce_gradients(params, op="sum")``). DDP instead averages; :func:`wrap_ddp` is for the
usual case of a per-rank mean loss over a per-rank slice of the batch.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn

from xmcbench.errors import XmcbenchError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(
    device: str | None = None,
    backend: str | None = None,
    init_method: str | None = None,
    timeout_s: float = 1800.0,
) -> DistInfo:
    """Join the process group that torchrun describes in the environment (idempotent).

    Without WORLD_SIZE (or with WORLD_SIZE=1) no process group is created and the result is
    rank 0 of 1 on ``device`` (default: cuda when available, else cpu). With torchrun each
    process uses ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU.
    ``init_method`` defaults to ``env://`` (MASTER_ADDR / MASTER_PORT); ``file://...`` works too.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 and not dist.is_initialized():
        default = "cuda" if torch.cuda.is_available() else "cpu"
        return DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device(device or default))
    for name in ("RANK", "LOCAL_RANK"):
        if name not in os.environ and not dist.is_initialized():
            raise XmcbenchError(
                f"WORLD_SIZE={world_size} is set but {name} is not; launch with torchrun "
                "(torchrun --nproc-per-node N ...), which sets RANK, LOCAL_RANK and WORLD_SIZE"
            )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device != "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)  # before NCCL init, so each rank owns one GPU
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend or ("nccl" if use_cuda else "gloo"),
            init_method=init_method or "env://",
            rank=int(os.environ["RANK"]),
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return DistInfo(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        device=torch.device("cuda", local_rank) if use_cuda else torch.device("cpu"),
    )


def destroy_distributed(wait: bool = True) -> None:
    """Leave the process group, if any (call once at the end of a torchrun job).

    With ``wait`` every rank first waits at a barrier, so no rank leaves while a peer is still
    inside the last collective. Pass ``wait=False`` on the way out of a failure, where the peers
    may never reach the barrier.
    """
    if dist.is_initialized():
        if wait and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


def exit_rank(exit_code: int = 0) -> NoReturn:
    """End a rank of a finished multi-process job without interpreter finalization.

    Why not a normal exit: gloo's worker threads drop the last collective's tensors after
    ``wait()`` has already returned, and dropping a tensor that Python created takes the GIL. If
    the interpreter is finalizing by then, CPython ends that thread inside a C++ destructor and
    the rank aborts (SIGABRT, "terminate called without an active exception") after all its work
    is done. A core dump of one such abort (about 1 run in 20 of a 2-rank CPU torchrun job on a
    loaded 2-core machine) shows exactly that: ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork ->
    TensorImpl::decref_pyobject -> take_gil -> pthread_exit, while the main thread is in
    Py_FinalizeEx. A barrier before ``destroy_process_group`` does not close the window (the
    threads are not joined there), so a finished rank skips finalization. Everything the job
    writes (run records, DuckDB, checkpoints) is closed before this is called; only the standard
    streams and logging handlers are still open, and they are flushed here.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


def is_distributed() -> bool:
    """True when a process group with more than one rank is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def get_rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """True on rank 0 (and in a single-process run): the rank that writes files and logs."""
    return get_rank() == 0


def barrier() -> None:
    """Wait until every rank reaches this point (no-op in a single process)."""
    if is_distributed():
        dist.barrier()


def shard_range(n: int, rank: int, world_size: int) -> range:
    """Contiguous slice of ``range(n)`` owned by ``rank``: sizes differ by at most one and the
    shards of ranks 0..world_size-1 cover every index exactly once, in order.

    (DEXML's released code drops the last label of each shard; this does not.)
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise XmcbenchError(f"rank {rank} is not in a world of size {world_size}")
    if n < 0:
        raise XmcbenchError(f"cannot shard a negative number of items ({n})")
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in a single process."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_max(x: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over ranks, without gradient (used for stable logsumexp shifts)."""
    x = x.detach().clone()
    if is_distributed():
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks; the gradient of a sum is the sum of the ranks' upstream gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Autograd-aware sum over ranks (see the module docstring for the gradient convention)."""
    if not is_distributed():
        return x
    return _AllReduceSum.apply(x)


class _AllGather(torch.autograd.Function):
    """Concatenate every rank's rows; backward keeps this rank's rows of the summed gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        rank = dist.get_rank()
        ctx.start = sum(sizes[:rank])
        ctx.size = sizes[rank]
        # all_gather needs equal shapes: pad every rank's rows to the largest, trim afterwards.
        padded = x.new_zeros((max(sizes), *x.shape[1:]))  # (max_n, ...)
        padded[: x.shape[0]] = x
        buffers = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(buffers, padded)
        return torch.cat([buf[:n] for buf, n in zip(buffers, sizes)])  # (sum(sizes), ...)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()  # (sum(sizes), ...)
        # Every rank used all rows, so a row's gradient is the sum of every rank's gradient for it.
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.start : ctx.start + ctx.size], None


def all_gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """(n_r, ...) on each rank -> (Σ n_r, ...) in rank order, with gradients flowing back.

    Ranks may hold different numbers of rows (the last batch of an epoch).
    """
    if not is_distributed():
        return x
    count = torch.tensor([x.shape[0]], device=x.device)
    counts = [torch.empty_like(count) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, count)
    return _AllGather.apply(x.contiguous(), [int(c.item()) for c in counts])


def all_reduce_gradients(params: Iterable[nn.Parameter], op: str = "sum") -> None:
    """Sum (or average, ``op="mean"``) ``.grad`` of ``params`` over ranks, in one flat buffer.

    A trainable parameter without a gradient counts as zeros, so every rank reduces the same
    buffer even when a rank's batch did not touch some parameter.
    """
    if op not in ("sum", "mean"):
        raise XmcbenchError(f"unknown gradient reduction {op!r}; choose sum or mean")
    if not is_distributed():
        return
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_kind: dict[tuple[torch.device, torch.dtype], list[nn.Parameter]] = {}
    for p in params:
        by_kind.setdefault((p.grad.device, p.grad.dtype), []).append(p)
    world = dist.get_world_size()
    for group in by_kind.values():
        flat = torch.cat([p.grad.reshape(-1) for p in group])  # (Σ numel,)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        if op == "mean":
            flat /= world
        offset = 0
        for p in group:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
            offset += p.numel()


def wrap_ddp(model: nn.Module, find_unused_parameters: bool = False, broadcast_buffers: bool = False) -> nn.Module:
    """DistributedDataParallel around ``model`` in a multi-rank job; ``model`` itself otherwise.

    DDP averages gradients over ranks, which is right when each rank's loss is the mean over
    its own slice of the global batch (for the sharded DEXML loss, multiply it by the world size).
    The model must already be on this rank's device.

    Buffers are not broadcast by default: with buffer broadcast every forward is a collective,
    and a gradient-cache step runs as many forwards as a rank has chunks, which differs between
    ranks whose label shards differ in size, so the job would hang. Transformer encoders have
    only constant buffers (position ids); pass True for models with running statistics.
    """
    if not is_distributed():
        return model
    device = next(model.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=device_ids,
        find_unused_parameters=find_unused_parameters,
        broadcast_buffers=broadcast_buffers,
    )


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside a DDP (or torch.compile) wrapper; ``model`` itself when not wrapped."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model
