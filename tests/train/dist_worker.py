"""Worker side of the multi-process tests: one scenario per function, run on every rank.

Launched by ``torch.multiprocessing.spawn`` (``spawn_entry``) or by torchrun::

    python -m torch.distributed.run --nproc-per-node 2 tests/train/dist_worker.py SCENARIO OUT_DIR

Each rank writes ``OUT_DIR/SCENARIO-rank{r}.pt``; the test compares those files with the same
computation done in one process. All data come from fixed seeds, so every rank builds the same
global batch and takes its own slice.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn

from xmcbench.train.checkpoint import load_checkpoint, save_checkpoint
from xmcbench.train.distributed import (
    DistInfo,
    all_reduce_gradients,
    destroy_distributed,
    exit_rank,
    init_distributed,
    shard_range,
    wrap_ddp,
)
from xmcbench.train.gradcache import gradcache_step, split_into_chunks
from xmcbench.train.sharded_decoupled_softmax import sharded_decoupled_softmax_loss

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import TinyBertEncoder, random_targets, random_tokens  # noqa: E402


def sharded_loss_cases() -> list[dict]:
    """Global batches with awkward shapes: uneven query slices, odd label counts, an empty
    label shard, a row without positives, a row whose labels are all positive, huge scores."""
    gen = torch.Generator().manual_seed(0)
    cases = []
    for n_queries, n_labels, dim, temperature, scale in [
        (5, 11, 8, 0.05, 1.0),
        (4, 3, 4, 1.0, 1.0),
        (2, 1, 4, 0.5, 1.0),
        (6, 17, 8, 0.01, 30.0),
    ]:
        queries = torch.randn(n_queries, dim, generator=gen) * scale
        labels = torch.randn(n_labels, dim, generator=gen)
        targets = torch.rand(n_queries, n_labels, generator=gen) < 0.3
        targets[0] = False
        targets[1] = False
        targets[1, -1] = True  # one positive, on the last shard
        if n_queries > 2:
            targets[2] = True  # no negatives at all for this row
        cases.append({"queries": queries, "labels": labels, "targets": targets, "temperature": temperature})
    # The released code's recipe: one sampled positive per row gets a term.
    one = dict(cases[0])
    keys = torch.rand(one["targets"].shape, generator=gen).masked_fill(~one["targets"], -1.0)
    one["counted"] = torch.zeros_like(one["targets"]).scatter_(1, keys.argmax(1, keepdim=True), True) & one["targets"]
    cases.append(one)
    return cases


def query_slice(n: int, rank: int, world_size: int) -> range:
    """Ranks hold uneven query counts on purpose: rank 0 takes one more when it can."""
    return shard_range(n, rank, world_size)


def scenario_sharded_loss(info: DistInfo, out_dir: Path) -> None:
    results = []
    for case in sharded_loss_cases():
        rows = query_slice(len(case["queries"]), info.rank, info.world_size)
        shard = shard_range(len(case["labels"]), info.rank, info.world_size)
        q_local = case["queries"][rows.start : rows.stop].clone().requires_grad_(True)
        label_shard = case["labels"][shard.start : shard.stop].clone().requires_grad_(True)
        counted = case.get("counted")
        targets = case["targets"][:, shard.start : shard.stop]
        counted = None if counted is None else counted[:, shard.start : shard.stop]
        if info.rank == 1:  # ranks may hold their masks in either layout
            targets = targets.to_sparse()
            counted = None if counted is None else counted.to_sparse()
        loss = sharded_decoupled_softmax_loss(q_local, label_shard, targets, case["temperature"], counted_shard=counted)
        loss.backward()
        results.append({"loss": loss.detach(), "q_grad": q_local.grad, "label_grad": label_shard.grad})
    torch.save(results, out_dir / f"sharded_loss-rank{info.rank}.pt")


def ddp_batch() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    gen = torch.Generator().manual_seed(1)
    return model, torch.randn(8, 6, generator=gen), torch.randn(8, 2, generator=gen)


def scenario_ddp(info: DistInfo, out_dir: Path) -> None:
    model, x, y = ddp_batch()
    ddp = wrap_ddp(model)
    rows = shard_range(len(x), info.rank, info.world_size)
    loss = (ddp(x[rows.start : rows.stop]) - y[rows.start : rows.stop]).pow(2).mean()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    # Checkpoints in a multi-rank job: every rank's RNG state comes back to that rank.
    torch.manual_seed(100 + info.rank)
    save_checkpoint(out_dir / "ckpt", 1, 1, ddp, None, None, sampler_state={"rank": info.rank})
    expected = torch.rand(3)
    torch.manual_seed(12345)
    state = load_checkpoint(out_dir / "ckpt", ddp)
    after_load = torch.rand(3)
    # Gradient cache under DDP: replays under no_sync, one synchronised backward at the end, even
    # though the ranks' label shards (7 and 6 labels in chunks of 3) give 3 and 2 chunks.
    encoder = TinyBertEncoder(dropout=0.0)
    ddp_encoder = wrap_ddp(encoder)
    queries, labels, targets = dexml_batch()
    rows = query_slice(len(targets), info.rank, info.world_size)
    shard = shard_range(targets.shape[1], info.rank, info.world_size)
    targets_shard = targets[:, shard.start : shard.stop]
    gradcache_step(
        ddp_encoder,
        split_into_chunks({k: v[rows.start : rows.stop] for k, v in queries.items()}, 2),
        split_into_chunks({k: v[shard.start : shard.stop] for k, v in labels.items()}, 3),
        # DDP averages over ranks; the sharded loss's gradients are meant to be summed.
        lambda q, l: info.world_size * sharded_decoupled_softmax_loss(q, l, targets_shard, temperature=0.1),
        no_sync=ddp_encoder.no_sync,
    )
    encoder_grads = {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}
    torch.save(
        {
            "type": type(ddp).__name__,
            "grads": grads,
            "expected": expected,
            "after_load": after_load,
            "sampler": state["sampler_state"],
            "encoder_grads": encoder_grads,
        },
        out_dir / f"ddp-rank{info.rank}.pt",
    )


def dexml_batch() -> tuple[dict, dict, torch.Tensor]:
    return random_tokens(6, 10, seed=1), random_tokens(13, 8, seed=2), random_targets(6, 13, seed=3)


def scenario_dexml_step(info: DistInfo, out_dir: Path) -> None:
    """DEXML all-negatives step: local queries, label shard through the gradient cache, sharded
    loss, gradients summed over ranks."""
    model = TinyBertEncoder(dropout=0.0)
    queries, labels, targets = dexml_batch()
    rows = query_slice(len(targets), info.rank, info.world_size)
    shard = shard_range(targets.shape[1], info.rank, info.world_size)
    q_local = {k: v[rows.start : rows.stop] for k, v in queries.items()}
    label_shard = {k: v[shard.start : shard.stop] for k, v in labels.items()}
    targets_shard = targets[:, shard.start : shard.stop]
    loss = gradcache_step(
        model,
        split_into_chunks(q_local, 2),
        split_into_chunks(label_shard, 3),
        lambda q, l: sharded_decoupled_softmax_loss(q, l, targets_shard, temperature=0.1),
    )
    all_reduce_gradients(model.parameters(), op="sum")
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    torch.save({"loss": loss, "grads": grads}, out_dir / f"dexml_step-rank{info.rank}.pt")


def scenario_spawn_suite(info: DistInfo, out_dir: Path) -> None:
    """The spawn-launched scenarios in one job: process start-up is the slow part on a CPU."""
    scenario_sharded_loss(info, out_dir)
    scenario_ddp(info, out_dir)


SCENARIOS = {
    "sharded_loss": scenario_sharded_loss,
    "ddp": scenario_ddp,
    "dexml_step": scenario_dexml_step,
    "spawn_suite": scenario_spawn_suite,
}


def spawn_entry(local_rank: int, world_size: int, scenario: str, out_dir: str, init_file: str) -> None:
    """Entry point for torch.multiprocessing.spawn: play torchrun's part, then run the scenario."""
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size))
    _run(scenario, Path(out_dir), init_method=f"file://{init_file}")


def _run(scenario: str, out_dir: Path, init_method: str | None = None) -> None:
    torch.set_num_threads(1)  # two ranks share a small machine
    info = init_distributed(device="cpu", init_method=init_method, timeout_s=120)
    try:
        SCENARIOS[scenario](info, out_dir)
    except BaseException:
        destroy_distributed(wait=False)
        raise
    destroy_distributed()
    exit_rank(0)  # as `xmcbench run` does under torchrun: a normal exit can abort a finished gloo rank


if __name__ == "__main__":
    _run(sys.argv[1], Path(sys.argv[2]))
