"""SoftTop-k (DEXML Sec. 4.3, Eq. 6-7): the operator, its implicit gradient, the loss, sharding."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.special import expit, log_expit

from xmcbench.errors import XmcbenchError
from xmcbench.losses import soft_top_k, soft_top_k_loss, soft_top_k_threshold


def reference_threshold(row: np.ndarray, k: float, alpha: float) -> float:
    """t with sum_j sigmoid(alpha (s_j + t)) = k, by Brent's method (an independent root finder)."""
    f = lambda t: float(expit(alpha * (row + t)).sum()) - k  # noqa: E731
    lo, hi = -row.max() - 50.0, -row.min() + 50.0
    return brentq(f, lo, hi, xtol=1e-14, rtol=1e-15)


def reference_loss(scores: torch.Tensor, targets: torch.Tensor, k: float, alpha: float) -> float:
    """-(1/B) sum_i (1/P) sum_j y_ij log z_ij with loops."""
    s = scores.detach().numpy()
    n_rows, n_cols = s.shape
    total = 0.0
    for i in range(n_rows):
        t = reference_threshold(s[i], k, alpha)
        for j in range(n_cols):
            if targets[i, j]:
                total -= float(log_expit(alpha * (s[i, j] + t))) / n_cols
    return total / n_rows


def random_scores(seed: int, b: int = 5, p: int = 12, scale: float = 2.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, p, generator=g, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("k", [1, 2.5, 5, 11])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rows_sum_to_k(k, dtype):
    s = random_scores(0, b=6, p=12, scale=20.0, dtype=dtype)  # wide range: the bracket must hold
    z = soft_top_k(s, k=k, alpha=2.0)  # default 32 bisection steps
    assert z.dtype == dtype
    assert torch.all((z.sum(dim=1).double() - k).abs() < 1e-4)
    assert torch.all((z >= 0) & (z <= 1))


def test_threshold_matches_independent_root_finder():
    s = random_scores(1)
    t = soft_top_k_threshold(s, k=3, alpha=2.0, n_iter=64)
    for i in range(s.shape[0]):
        assert t[i, 0].item() == pytest.approx(reference_threshold(s[i].numpy(), 3, 2.0), abs=1e-10)


def test_monotone_in_scores():
    s = random_scores(2)
    z = soft_top_k(s, k=4, alpha=2.0)
    # Same threshold for the row -> z preserves the order of the scores.
    assert torch.equal(torch.argsort(z, dim=1), torch.argsort(s, dim=1))
    bumped = s.clone()
    bumped[:, 3] += 0.5
    z2 = soft_top_k(bumped, k=4, alpha=2.0)
    assert torch.all(z2[:, 3] > z[:, 3])
    others = torch.ones(s.shape[1], dtype=torch.bool)
    others[3] = False
    assert torch.all(z2[:, others] <= z[:, others] + 1e-12)  # the budget moves to column 3


def test_large_alpha_approaches_hard_top_k():
    g = torch.Generator().manual_seed(3)
    s = torch.stack([torch.randperm(20, generator=g) for _ in range(4)]).double() * 0.1  # gaps of 0.1
    z = soft_top_k(s, k=5, alpha=500.0, n_iter=64)
    hard = torch.zeros_like(s, dtype=torch.bool)
    hard.scatter_(1, torch.topk(s, 5, dim=1).indices, True)
    assert torch.all((z - hard.double()).abs() < 1e-6)


def test_gradcheck_operator_and_loss():
    s = random_scores(4, b=3, p=7).requires_grad_(True)
    y = torch.rand(3, 7, generator=torch.Generator().manual_seed(0)) < 0.4
    # 64 steps: the bisection then resolves t to float64 precision, which finite differences need.
    assert torch.autograd.gradcheck(lambda x: soft_top_k(x, k=3, alpha=2.0, n_iter=64), (s,))
    assert torch.autograd.gradcheck(lambda x: soft_top_k_loss(x, y, k=2.5, alpha=1.5, n_iter=64), (s,))


def test_jacobian_is_eq_7():
    s = random_scores(5, b=1, p=6)[0]
    alpha = 2.0
    jac = torch.autograd.functional.jacobian(lambda x: soft_top_k(x[None], k=2, alpha=alpha)[0], s)
    z = soft_top_k(s[None], k=2, alpha=alpha)[0]
    d = alpha * z * (1 - z)  # sigma'
    expected = torch.diag(d) - torch.outer(d, d) / d.sum()  # sigma'_i (1[i=l] - sigma'_l / sum sigma')
    assert torch.allclose(jac, expected, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_loss_matches_loop_reference(seed):
    s = random_scores(seed + 10, b=4, p=9)
    y = torch.rand(4, 9, generator=torch.Generator().manual_seed(seed)) < 0.3
    y[0] = False  # contributes 0 but still counts in the mean over rows (Eq. 6 averaged over queries)
    loss = soft_top_k_loss(s, y, k=3, alpha=2.0, n_iter=64)
    assert loss.item() == pytest.approx(reference_loss(s, y, 3, 2.0), rel=1e-9, abs=1e-12)


def test_loss_is_small_when_positives_are_in_the_top_k():
    s = torch.tensor([[10.0, 9.0, 0.0, -1.0, -2.0, -3.0]], dtype=torch.float64)
    inside = torch.tensor([[True, True, False, False, False, False]])
    outside = torch.tensor([[False, False, False, False, False, True]])
    assert soft_top_k_loss(s, inside, k=2, alpha=2.0).item() < 1e-3
    assert soft_top_k_loss(s, outside, k=2, alpha=2.0).item() > 1.0


def test_k_at_least_p_selects_everything():
    s = random_scores(6, b=2, p=4).requires_grad_(True)
    y = torch.ones(2, 4, dtype=torch.bool)
    assert torch.equal(soft_top_k(s, k=4, alpha=2.0), torch.ones(2, 4, dtype=torch.float64))
    loss = soft_top_k_loss(s, y, k=7, alpha=2.0)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(s.grad == 0)
    with pytest.raises(XmcbenchError, match="must be <"):
        soft_top_k_threshold(s, k=4)


def test_no_nan_when_sigmoids_saturate():
    s = (random_scores(7, b=3, p=8) * 1000).requires_grad_(True)  # alpha * gaps ~ thousands
    y = torch.zeros(3, 8, dtype=torch.bool)
    y[:, 0] = True
    loss = soft_top_k_loss(s.float(), y, k=2, alpha=2.0)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()


def test_permutation_invariance():
    s = random_scores(8)
    y = torch.rand(5, 12, generator=torch.Generator().manual_seed(1)) < 0.3
    base = soft_top_k_loss(s, y, k=3).item()
    g = torch.Generator().manual_seed(2)
    rows, cols = torch.randperm(5, generator=g), torch.randperm(12, generator=g)
    assert soft_top_k_loss(s[rows][:, cols], y[rows][:, cols], k=3).item() == pytest.approx(base, rel=1e-9)


class ThreadAllReduce:
    """A blocking all-reduce between threads, standing in for torch.distributed.all_reduce."""

    def __init__(self, world: int, op):
        self.world, self.op = world, op
        self.barrier = threading.Barrier(world)
        self.slots: list[torch.Tensor | None] = [None] * world

    def for_rank(self, rank: int):
        def reduce(x: torch.Tensor) -> torch.Tensor:
            self.slots[rank] = x.detach().clone()
            self.barrier.wait()
            out = self.slots[0]
            for other in self.slots[1:]:
                out = self.op(out, other)
            self.barrier.wait()  # nobody overwrites a slot before everyone has read
            return out.clone()

        return reduce


def test_two_column_shards_match_the_full_loss_and_gradient():
    s = random_scores(9, b=4, p=11)
    y = torch.rand(4, 11, generator=torch.Generator().manual_seed(3)) < 0.3
    full_s = s.clone().requires_grad_(True)
    full = soft_top_k_loss(full_s, y, k=3, alpha=2.0)
    full.backward()

    sums, maxes = ThreadAllReduce(2, torch.add), ThreadAllReduce(2, torch.maximum)
    cuts = [(0, 5), (5, 11)]
    shards = [s[:, a:b].clone().requires_grad_(True) for a, b in cuts]
    results: list = [None, None]

    def rank(r: int) -> None:
        a, b = cuts[r]
        loss = soft_top_k_loss(shards[r], y[:, a:b], k=3, alpha=2.0, sum_fn=sums.for_rank(r), max_fn=maxes.for_rank(r))
        loss.backward()
        results[r] = loss.detach()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(r is not None for r in results), "a shard did not finish"
    assert (results[0] + results[1]).item() == pytest.approx(full.item(), rel=1e-9)
    assert torch.allclose(torch.cat([sh.grad for sh in shards], dim=1), full_s.grad, rtol=1e-7, atol=1e-12)


def test_bad_arguments():
    s = random_scores(0)
    with pytest.raises(XmcbenchError, match="k must be > 0"):
        soft_top_k(s, k=0)
    with pytest.raises(XmcbenchError, match="alpha"):
        soft_top_k(s, k=2, alpha=-1.0)
    with pytest.raises(XmcbenchError, match="boolean"):
        soft_top_k_loss(s, torch.zeros_like(s), k=2)
    assert math.isfinite(soft_top_k_loss(s, torch.zeros_like(s, dtype=torch.bool)).item())


def test_sharding_needs_both_reductions():
    s = random_scores(0)
    with pytest.raises(XmcbenchError, match="sum_fn and max_fn together"):
        soft_top_k(s, k=2, sum_fn=lambda x: x)


def test_all_positive_rows():
    s = random_scores(1, b=3, p=6).requires_grad_(True)
    loss = soft_top_k_loss(s, torch.ones(3, 6, dtype=torch.bool), k=2)
    loss.backward()
    # sum_j log z_j is maximal for k = P; with k < P it is finite and positive.
    assert torch.isfinite(loss) and loss.item() > 0 and torch.isfinite(s.grad).all()
