"""Optimiser, learning-rate schedule and gradient clipping shared by every trained method.

All five methods train with AdamW, weight decay on weight matrices only (DEXML Table 7 "wd .01
except norms/biases"; PRIME Table 10 also exempts its free-vector bank), a linear warm-up and then
a decay. Methods give their parameters in named groups because several use one learning rate per
part (UniDEC: encoder 1e-4, heads 2e-4, classifiers 1e-3).

    groups = [(encoder.named_parameters(), 1e-4), (head.named_parameters(), 2e-4)]
    optimizer = build_optimizer(groups, weight_decay=0.01, no_decay_patterns=[r"free_vectors"])
    scheduler = build_scheduler(optimizer, total_steps, warmup_ratio=0.1, schedule="linear")
    ...  loss.backward(); clip_gradients(model.parameters(), 1.0); optimizer.step(); scheduler.step()
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from xmcbench.errors import XmcbenchError

SCHEDULES = ("linear", "constant", "cosine")


def _is_norm_module(component: str) -> bool:
    """BERT's LayerNorm, DistilBERT's sa_layer_norm, RMSNorm, GPT-style ln_1 / ln_f."""
    component = component.lower()
    return "norm" in component or component == "ln" or component.startswith("ln_")


def is_no_decay(name: str, no_decay_patterns: Sequence[str] = ()) -> bool:
    """True for biases, normalisation-layer weights and names matching any extra regex pattern."""
    *modules, leaf = name.split(".")
    if leaf == "bias" or any(_is_norm_module(m) for m in modules):
        return True
    return any(re.search(pattern, name) for pattern in no_decay_patterns)


def build_optimizer(
    named_param_groups: Sequence[tuple[Iterable[tuple[str, nn.Parameter]], float]],
    weight_decay: float,
    no_decay_patterns: Sequence[str] = (),
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW over ``[(named_parameters, lr), ...]`` with decay on weight matrices only.

    Each input group becomes up to two torch parameter groups (decayed / not decayed) with the
    group's learning rate; frozen parameters (``requires_grad=False``) are left out. A parameter
    listed in two groups is an error, because AdamW would then step it twice.
    """
    if weight_decay < 0:
        raise XmcbenchError(f"weight_decay must be >= 0, got {weight_decay}")
    param_groups: list[dict] = []
    seen: dict[int, str] = {}
    for index, (named_params, lr) in enumerate(named_param_groups):
        if not lr > 0:
            raise XmcbenchError(f"learning rate of parameter group {index} must be > 0, got {lr}")
        decay, no_decay, decay_names, no_decay_names = [], [], [], []
        for name, param in named_params:
            if not param.requires_grad:
                continue
            if id(param) in seen:
                raise XmcbenchError(
                    f"parameter {name!r} of group {index} is already in the optimizer as {seen[id(param)]!r}; "
                    "give each parameter to exactly one group"
                )
            seen[id(param)] = name
            if is_no_decay(name, no_decay_patterns):
                no_decay.append(param)
                no_decay_names.append(name)
            else:
                decay.append(param)
                decay_names.append(name)
        # Extra keys ("group", "names") ride along in the param group; AdamW ignores them and
        # they make optimizer.param_groups readable when debugging.
        if decay:
            param_groups.append(
                {"params": decay, "lr": lr, "weight_decay": weight_decay, "group": index, "names": decay_names}
            )
        if no_decay:
            param_groups.append(
                {"params": no_decay, "lr": lr, "weight_decay": 0.0, "group": index, "names": no_decay_names}
            )
    if not param_groups:
        raise XmcbenchError("no trainable parameters were given to the optimizer")
    # One fused kernel a step instead of torch's CPU default, a loop of ~10 elementwise passes a
    # parameter: MiniLM's 22.7M parameters, one thread, 184 -> 29 ms a step
    # (benchmarks/bench_optimizer.py). The same update; float rounding differs in the last bits.
    if all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for g in param_groups for p in g["params"]):
        try:
            return torch.optim.AdamW(param_groups, betas=betas, eps=eps, fused=True)
        except RuntimeError:  # torch < 2.4 has no fused kernel for CPU tensors
            pass
    return torch.optim.AdamW(param_groups, betas=betas, eps=eps)


def lr_multiplier(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Factor applied to every group's base learning rate after ``step`` optimiser steps.

    Warm-up rises linearly to 1 at step ``warmup_steps`` (the first step already has a non-zero
    rate, 1/warmup, so no step is wasted); then "linear" falls to 0 at ``total_steps``,
    "cosine" follows half a cosine to 0, "constant" stays at 1.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_ratio: float,
    schedule: str = "linear",
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_ratio * total_steps`` steps, then the chosen decay.

    Call ``scheduler.step()`` once after every ``optimizer.step()``.
    """
    if schedule not in SCHEDULES:
        raise XmcbenchError(f"unknown learning-rate schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if total_steps < 1:
        raise XmcbenchError(f"total_steps must be >= 1, got {total_steps}")
    if not 0.0 <= warmup_ratio < 1.0:
        raise XmcbenchError(f"warmup_ratio must be in [0, 1), got {warmup_ratio}")
    warmup_steps = round(warmup_ratio * total_steps)

    def multiplier(step: int) -> float:
        return lr_multiplier(step, total_steps, warmup_steps, schedule)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)


def clip_gradients(params: Iterable[nn.Parameter], max_norm: float | None) -> torch.Tensor:
    """Clip the global L2 norm of the gradients to ``max_norm`` (None or <= 0: measure only).

    Returns the norm before clipping as a 0-d tensor (no host sync, so it is cheap on a GPU).
    Under DDP the gradients are already averaged, so every rank clips identically.
    """
    params = [p for p in params if p.grad is not None]
    if not params:
        return torch.zeros(())
    if max_norm is None or max_norm <= 0:
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
    return nn.utils.clip_grad_norm_(params, max_norm)
