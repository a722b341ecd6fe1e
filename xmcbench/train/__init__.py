"""Shared training machinery: the pieces every method's ``fit`` loop is built from.

- ``optim``: AdamW with decay on weight matrices only, warm-up + decay schedules, clipping;
- ``precision``: bf16 autocast on CUDA and on CPUs where bf16 is faster, seeding, RNG capture/restore;
- ``checkpoint``: atomic checkpoints that resume onto the same trajectory;
- ``gradcache``: gradient cache for losses over very large label pools;
- ``distributed``: torchrun/torch.distributed helpers (collectives with gradients, DDP, shards);
- ``sharded_decoupled_softmax``: DEXML's all-labels loss with labels sharded over ranks.

The methods own their loops; nothing here decides what a training step is.
"""

from xmcbench.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from xmcbench.train.distributed import (
    DistInfo,
    all_gather_with_grad,
    all_reduce_gradients,
    all_reduce_max,
    all_reduce_sum,
    barrier,
    destroy_distributed,
    exit_rank,
    get_rank,
    get_world_size,
    init_distributed,
    is_distributed,
    is_main,
    shard_range,
    unwrap_model,
    wrap_ddp,
)
from xmcbench.train.gradcache import (
    CachedEmbeddings,
    backward_chunks,
    cached_embeddings,
    gradcache_step,
    split_into_chunks,
)
from xmcbench.train.optim import build_optimizer, build_scheduler, clip_gradients, is_no_decay
from xmcbench.train.precision import (
    autocast,
    check_precision,
    resolve_precision,
    rng_state,
    seed_everything,
    set_rng_state,
)
from xmcbench.train.sharded_decoupled_softmax import sharded_decoupled_softmax_loss

__all__ = [
    "CachedEmbeddings",
    "DistInfo",
    "all_gather_with_grad",
    "all_reduce_gradients",
    "all_reduce_max",
    "all_reduce_sum",
    "autocast",
    "backward_chunks",
    "barrier",
    "build_optimizer",
    "build_scheduler",
    "cached_embeddings",
    "check_precision",
    "resolve_precision",
    "clip_gradients",
    "destroy_distributed",
    "exit_rank",
    "get_rank",
    "get_world_size",
    "gradcache_step",
    "init_distributed",
    "is_distributed",
    "is_main",
    "is_no_decay",
    "latest_checkpoint",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "seed_everything",
    "set_rng_state",
    "shard_range",
    "sharded_decoupled_softmax_loss",
    "split_into_chunks",
    "unwrap_model",
    "wrap_ddp",
]
