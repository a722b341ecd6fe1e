"""PRIME's regulariser R (Eq. 6-7): the paper's linear form and the released code's hinged form."""

from __future__ import annotations

import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.losses import prime_regularizer


def reference(s: torch.Tensor, b: torch.Tensor, y: torch.Tensor, margin: float, variant: str) -> float:
    pos = [float(s[i, j] - b[i, j] + margin) for i in range(s.shape[0]) for j in range(s.shape[1]) if y[i, j]]
    neg = [float(b[i, j] - s[i, j] + margin) for i in range(s.shape[0]) for j in range(s.shape[1]) if not y[i, j]]
    if variant == "hinge":  # max(0, .), then the mean over the non-zero terms only
        pos = [v for v in pos if v > 0]
        neg = [v for v in neg if v > 0]
    r_p = sum(pos) / len(pos) if pos else 0.0
    r_n = sum(neg) / len(neg) if neg else 0.0
    return 0.5 * (r_p + r_n)


def random_batch(seed: int, b: int = 5, p: int = 8):
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(b, p, generator=g, dtype=torch.float64) * 2 - 1
    proto = (s + 0.15 * torch.randn(b, p, generator=g, dtype=torch.float64)).clamp(-1, 1)
    y = torch.rand(b, p, generator=g) < 0.3
    y[0] = False
    y[1, :2] = True
    return s, proto, y


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("variant", ["hinge", "paper"])
@pytest.mark.parametrize("margin", [0.1, 0.3])
def test_matches_loop_reference(seed, variant, margin):
    s, b, y = random_batch(seed)
    got = prime_regularizer(s, b, y, margin=margin, variant=variant).item()
    assert got == pytest.approx(reference(s, b, y, margin, variant), rel=1e-12, abs=1e-15)


def test_default_is_the_hinged_form_with_the_paper_margin():
    s, b, y = random_batch(0)
    assert prime_regularizer(s, b, y).item() == pytest.approx(reference(s, b, y, 0.1, "hinge"), rel=1e-12)


def test_direction_of_the_gradient():
    # Positives: the prototype score b should rise above s; negatives: fall below it.
    s = torch.tensor([[0.5, 0.5]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[0.5, 0.5]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[True, False]])
    prime_regularizer(s, b, y).backward()
    assert b.grad[0, 0] < 0 and s.grad[0, 0] > 0  # descent raises b_p, lowers s_p
    assert b.grad[0, 1] > 0 and s.grad[0, 1] < 0  # descent lowers b_n, raises s_n


def test_hinged_terms_that_meet_the_margin_get_no_gradient():
    s = torch.tensor([[0.0, 0.9, 0.0]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[0.5, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[True, False, False]])  # positive already 0.5 better; negative 0.9 better
    r = prime_regularizer(s, b, y)
    r.backward()
    assert r.item() == pytest.approx(0.5 * 0.1)  # only the last negative (b - s + m = 0.1) is non-zero
    assert s.grad[0, :2].tolist() == [0.0, 0.0] and b.grad[0, :2].tolist() == [0.0, 0.0]


def test_empty_sets_give_zero_not_nan():
    s = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    far = torch.tensor([[1.0, -1.0, -1.0], [1.0, -1.0, -1.0]], dtype=torch.float64)
    y = torch.tensor([[True, False, False], [True, False, False]])
    r = prime_regularizer(s, far, y)  # every term satisfies the margin: all hinged terms are 0
    r.backward()
    assert r.item() == 0.0 and torch.all(s.grad == 0)
    for targets in (torch.zeros(2, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)):
        for variant in ("hinge", "paper"):
            assert torch.isfinite(prime_regularizer(s, far, targets, variant=variant))


def test_paper_form_is_linear_and_unbounded():
    s, b, y = random_batch(1)
    r1 = prime_regularizer(s, b, y, variant="paper")
    r2 = prime_regularizer(s, b + 10 * torch.where(y, 1.0, -1.0), y, variant="paper")
    assert r2.item() == pytest.approx(r1.item() - 10.0, rel=1e-12)  # keeps rewarding past the margin
    assert prime_regularizer(s, b + 10 * torch.where(y, 1.0, -1.0), y).item() == 0.0


def test_gradcheck_paper_form():
    s, b, y = random_batch(2, b=3, p=4)
    s.requires_grad_(True)
    b.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, c: prime_regularizer(a, c, y, variant="paper"), (s, b))


def test_permutation_invariance():
    s, b, y = random_batch(3)
    base = prime_regularizer(s, b, y).item()
    g = torch.Generator().manual_seed(0)
    rows, cols = torch.randperm(5, generator=g), torch.randperm(8, generator=g)
    permuted = prime_regularizer(s[rows][:, cols], b[rows][:, cols], y[rows][:, cols])
    assert permuted.item() == pytest.approx(base, rel=1e-12)


def test_bad_arguments():
    s, b, y = random_batch(0)
    with pytest.raises(XmcbenchError, match="variant"):
        prime_regularizer(s, b, y, variant="linear")
    with pytest.raises(XmcbenchError, match="does not match"):
        prime_regularizer(s, b[:, :3], y)
