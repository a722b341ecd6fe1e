"""The LOSSES registry and the package exports (xmcbench/losses/__init__.py)."""

from __future__ import annotations

import pytest
import torch

import xmcbench.losses as losses
from xmcbench.errors import XmcbenchError
from xmcbench.losses import LOSSES

EXPECTED = {
    "decoupled_softmax": losses.decoupled_softmax_loss,
    "soft_top_k": losses.soft_top_k_loss,
    "infonce": losses.infonce_loss,
    "softmax_ce": losses.softmax_ce_loss,
    "psl": losses.psl_loss,
    "psl_bidirectional": losses.psl_bidirectional_loss,
    "triplet": losses.triplet_pool_loss,
    "dynamic_margin_triplet": losses.dynamic_margin_triplet_pool_loss,
}


def test_registry_names_map_to_the_loss_functions():
    assert sorted(LOSSES.names()) == sorted(EXPECTED)
    for name, fn in EXPECTED.items():
        assert LOSSES.get(name) is fn
        assert LOSSES.get(name.upper()) is fn  # names are case-insensitive


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_registered_loss_takes_scores_and_targets(name):
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 10, generator=g, requires_grad=True)
    targets = torch.rand(6, 10, generator=g) < 0.3
    targets[0, 0] = True
    loss = LOSSES.get(name)(scores, targets)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss) and loss.item() >= 0
    assert torch.isfinite(scores.grad).all() and scores.grad.abs().sum() > 0


def test_typo_suggests_the_closest_name():
    with pytest.raises(XmcbenchError, match="did you mean decoupled_softmax"):
        LOSSES.get("decoupled_sofmax")


def test_all_exports_exist():
    for name in losses.__all__:
        assert hasattr(losses, name), name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_registered_losses_match_on_cuda(name):
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(16, 40, generator=g, dtype=torch.float64)
    targets = torch.rand(16, 40, generator=g) < 0.2
    cpu = LOSSES.get(name)(scores, targets)
    gpu = LOSSES.get(name)(scores.cuda(), targets.cuda())
    assert gpu.device.type == "cuda"
    assert gpu.item() == pytest.approx(cpu.item(), rel=1e-9, abs=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_positive_draw_on_cuda_follows_a_cpu_generator():
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(8, 12, generator=g)
    targets = torch.rand(8, 12, generator=g) < 0.4
    cpu = losses.decoupled_softmax_loss(scores, targets, one_positive=True, generator=torch.Generator().manual_seed(5))
    gpu = losses.decoupled_softmax_loss(
        scores.cuda(), targets.cuda(), one_positive=True, generator=torch.Generator().manual_seed(5)
    )
    assert gpu.item() == pytest.approx(cpu.item(), rel=1e-5)
