"""``training.precision: bf16`` on a CPU: autocast where bf16 is faster on the CPU, fp32 (and said so) where not."""

import pytest
import torch

import xmcbench.train.precision as precision
from xmcbench.run import run_recipe

METHODS = {
    "dexml": "{name: dexml, regime: hard_negatives, hard_negatives: 1, shortlist_k: 5, hard_negative_start_epoch: 0}",
    "unidec": "{name: unidec, dim: 32, hard_negatives: 1, shortlist_k: 5, batching: random}",
    "prime": "{name: prime, free_vectors: 4, prototype_ffn: 16, cluster_start_epoch: 1, cluster_size: 8}",
}


def _linear_output_dtypes(monkeypatch) -> set:
    seen: set = set()
    forward = torch.nn.Linear.forward

    def spy(self, x):
        out = forward(self, x)
        if torch.is_grad_enabled():  # training steps, not the no-grad encodes
            seen.add(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", spy)
    return seen


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("faster", [True, False])
def test_bf16_recipe_on_cpu_trains_in_what_it_records(tiny_recipe, tmp_path, monkeypatch, method, faster):
    monkeypatch.setattr(precision, "use_cpu_bf16", lambda: faster)
    seen = _linear_output_dtypes(monkeypatch)
    recipe = tiny_recipe(METHODS[method], epochs=1, precision="bf16")
    result = run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    record = result.record
    assert record["status"] == "finished"
    assert record["compute"]["precision"] == ("bf16" if faster else "fp32")
    assert seen == ({torch.bfloat16} if faster else {torch.float32})
    scores = result.scores
    assert scores and all(0 <= v <= 100 for v in scores.values())  # no NaN from bf16


def test_auto_stays_fp32_on_a_cpu_even_with_bf16_instructions(tiny_recipe, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "use_cpu_bf16", lambda: True)
    seen = _linear_output_dtypes(monkeypatch)
    result = run_recipe(
        tiny_recipe(METHODS["dexml"], epochs=1), runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False
    )
    assert result.record["compute"]["precision"] == "fp32"
    assert seen == {torch.float32}


def test_a_run_resumed_without_bf16_records_both_precisions(tiny_recipe, tmp_path, monkeypatch, interrupt_then_resume):
    from xmcbench.methods.dexml import DexmlMethod

    faster = {"now": True}
    monkeypatch.setattr(precision, "use_cpu_bf16", lambda: faster["now"])
    real = DexmlMethod._hard_negative_step

    def step(self, *args, **kwargs):  # the machine "changes" before the interrupted attempt ends
        faster["now"] = False
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DexmlMethod, "_hard_negative_step", step)
    recipe = tiny_recipe(METHODS["dexml"], epochs=3, precision="bf16")
    result, _, _ = interrupt_then_resume(DexmlMethod, "_hard_negative_step", recipe, tmp_path)
    compute = result.record["compute"]
    assert compute["precision"] == "fp32" and compute["precision_history"] == ["bf16", "fp32"]
