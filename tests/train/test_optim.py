import math

import pytest
import torch
from torch import nn

from xmcbench.errors import XmcbenchError
from xmcbench.train.optim import build_optimizer, build_scheduler, clip_gradients, is_no_decay, lr_multiplier


class Tiny(nn.Module):
    """Names like a transformer's: Linear weights/biases, a LayerNorm, a free-vector bank."""

    def __init__(self):
        super().__init__()
        self.q_lin = nn.Linear(4, 4)
        self.sa_layer_norm = nn.LayerNorm(4)
        self.free_vectors = nn.Parameter(torch.randn(6, 4))
        self.head = nn.Linear(4, 2)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("transformer.layer.0.attention.q_lin.weight", False),
        ("transformer.layer.0.attention.q_lin.bias", True),
        ("transformer.layer.0.sa_layer_norm.weight", True),  # DistilBERT
        ("embeddings.LayerNorm.weight", True),  # BERT
        ("h.0.ln_1.weight", True),  # GPT-2 style
        ("ln.weight", True),
        ("lnx_proj.weight", False),
        ("embeddings.word_embeddings.weight", False),
        ("bias_table", False),  # a parameter called bias_table is not a bias
    ],
)
def test_no_decay_names(name, expected):
    assert is_no_decay(name) is expected


def test_extra_no_decay_patterns():
    assert is_no_decay("prototypes.free_vectors", [r"free_vectors"])
    assert not is_no_decay("prototypes.free_vectors")


def test_groups_split_by_decay_and_keep_their_learning_rates():
    torch.manual_seed(0)
    model = Tiny()
    model.head.bias.requires_grad_(False)  # frozen: left out
    body = [(n, p) for n, p in model.named_parameters() if not n.startswith("head")]
    head = [(n, p) for n, p in model.named_parameters() if n.startswith("head")]
    opt = build_optimizer([(body, 1e-3), (head, 5e-3)], weight_decay=0.1, no_decay_patterns=["free_vectors"])
    groups = {(g["group"], g["weight_decay"]): g for g in opt.param_groups}
    assert set(groups) == {(0, 0.1), (0, 0.0), (1, 0.1)}
    assert groups[(0, 0.1)]["names"] == ["q_lin.weight"]
    assert sorted(groups[(0, 0.0)]["names"]) == [
        "free_vectors",
        "q_lin.bias",
        "sa_layer_norm.bias",
        "sa_layer_norm.weight",
    ]
    assert groups[(1, 0.1)]["names"] == ["head.weight"] and groups[(1, 0.1)]["lr"] == 5e-3
    # Behaviour, not just bookkeeping: with zero gradients AdamW only applies decoupled decay,
    # which shrinks decayed weights by lr * wd and leaves the others untouched.
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.allclose(model.q_lin.weight, before["q_lin.weight"] * (1 - 1e-3 * 0.1))
    assert torch.allclose(model.head.weight, before["head.weight"] * (1 - 5e-3 * 0.1))
    for name in ["free_vectors", "q_lin.bias", "sa_layer_norm.weight"]:
        assert torch.equal(dict(model.named_parameters())[name], before[name])


def test_the_fused_step_is_adamw_by_its_equations():
    """AdamW (Loshchilov & Hutter, Algorithm 2) with bias correction, five steps by hand:
    m_t = b1 m + (1 - b1) g,  v_t = b2 v + (1 - b2) g^2,
    θ_t = θ (1 - lr wd) - lr (m_t / (1 - b1^t)) / (sqrt(v_t / (1 - b2^t)) + eps)."""
    torch.manual_seed(0)
    model = Tiny()
    opt = build_optimizer([(model.named_parameters(), 1e-2)], weight_decay=0.1, betas=(0.9, 0.99), eps=1e-8)
    assert all(g["fused"] for g in opt.param_groups)  # one kernel a step on CPU (the for-loop took 6x as long)
    theta = {n: p.detach().double().clone() for n, p in model.named_parameters()}
    m = {n: torch.zeros_like(t) for n, t in theta.items()}
    v = {n: torch.zeros_like(t) for n, t in theta.items()}
    decay = {n for g in opt.param_groups if g["weight_decay"] for n in g["names"]}
    for t in range(1, 6):
        grads = {n: torch.randn_like(p) for n, p in model.named_parameters()}
        for n, p in model.named_parameters():
            p.grad = grads[n].clone()
            g = grads[n].double()
            m[n] = 0.9 * m[n] + 0.1 * g
            v[n] = 0.99 * v[n] + 0.01 * g * g
            step = 1e-2 * (m[n] / (1 - 0.9**t)) / ((v[n] / (1 - 0.99**t)).sqrt() + 1e-8)
            theta[n] = theta[n] * (1 - 1e-2 * (0.1 if n in decay else 0.0)) - step
        opt.step()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach().double(), theta[n], rtol=1e-5, atol=1e-6, msg=n)


def test_parameter_in_two_groups_is_an_error():
    model = Tiny()
    with pytest.raises(XmcbenchError, match="already in the optimizer"):
        build_optimizer([(model.named_parameters(), 1e-3), (model.head.named_parameters(), 1e-3)], 0.01)


def test_bad_arguments_are_errors():
    model = Tiny()
    with pytest.raises(XmcbenchError, match="learning rate"):
        build_optimizer([(model.named_parameters(), 0.0)], 0.01)
    with pytest.raises(XmcbenchError, match="no trainable"):
        build_optimizer([([], 1e-3)], 0.01)
    opt = build_optimizer([(model.named_parameters(), 1e-3)], 0.01)
    with pytest.raises(XmcbenchError, match="unknown learning-rate schedule 'step'"):
        build_scheduler(opt, 10, 0.1, "step")
    with pytest.raises(XmcbenchError, match="warmup_ratio"):
        build_scheduler(opt, 10, 1.0)
    with pytest.raises(XmcbenchError, match="total_steps"):
        build_scheduler(opt, 0, 0.1)


def _lrs(schedule: str, total: int, warmup_ratio: float) -> list[float]:
    param = nn.Parameter(torch.zeros(2, 2))
    opt = build_optimizer([([("w", param)], 2.0)], 0.0)
    sched = build_scheduler(opt, total, warmup_ratio, schedule)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    out.append(opt.param_groups[0]["lr"])
    return out


def test_linear_warmup_then_linear_decay():
    # 10 steps, 2 of warm-up: 1/2, 1, then 8 steps down to 0.
    expected = [0.5, 1.0] + [1 - k / 8 for k in range(9)]
    assert _lrs("linear", 10, 0.2) == pytest.approx([2.0 * m for m in expected])


def test_cosine_and_constant():
    cosine = _lrs("cosine", 10, 0.0)
    assert cosine[0] == pytest.approx(2.0) and cosine[5] == pytest.approx(1.0) and cosine[10] == pytest.approx(0.0)
    assert cosine[3] == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi * 0.3)))
    assert _lrs("constant", 6, 0.5) == pytest.approx([2 / 3, 4 / 3, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert lr_multiplier(100, 10, 2, "linear") == 0.0  # never negative past the end


def test_clip_gradients():
    a, b = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2))
    a.grad, b.grad = torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0])
    assert clip_gradients([a, b], None).item() == pytest.approx(5.0)  # measure only
    assert torch.equal(a.grad, torch.tensor([3.0, 0.0, 0.0]))
    assert clip_gradients([a, b], 1.0).item() == pytest.approx(5.0)
    assert torch.cat([a.grad, b.grad]).norm().item() == pytest.approx(1.0, rel=1e-5)
    assert clip_gradients([nn.Parameter(torch.zeros(1))], 1.0).item() == 0.0  # no gradients at all
