"""``xmcbench plan``: estimates on paper for a recipe's dataset and hardware, and a warning when it won't fit."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.errors import XmcbenchError
from xmcbench.run import load_recipe
from xmcbench.run.plan import LOGIT_TENSORS, encoder_size, plan_recipe

DEXML_13M = "recipes/dexml/lf-amazontitles-1.3m-all-negatives.yaml"


def test_dexml_all_negatives_on_the_papers_16_a100_80gb():
    p = plan_recipe(load_recipe(DEXML_13M), gpu="A100-80GB", num_gpus=16)
    assert p.n_labels == 1_305_265 and p.n_train == 2_248_619 and p.hidden == 768
    assert p.label_embeddings_gb == pytest.approx(1_305_265 * 768 * 4 / 1e9)
    # the (8192 x L/16) fp32 loss tensors dominate: LOGIT_TENSORS (measured) x 8192 x 81,580 x 4 bytes
    assert p.memory_gb["logits + loss tensors (batch x shard, fp32)"] == pytest.approx(
        LOGIT_TENSORS * 8192 * 81_580 * 4 / 1e9
    )
    assert 20 < p.per_device_gb < 80 and p.fits and not p.warnings()
    assert p.steps == 100 * -(-2_248_619 // 8192)
    assert p.gpu_hours == pytest.approx(p.step_s * p.steps * 16 / 3600)
    assert not plan_recipe(load_recipe(DEXML_13M), gpu="A100-40GB", num_gpus=8).fits


def test_fewer_gpus_do_not_fit_and_the_cli_warns():
    p = plan_recipe(load_recipe(DEXML_13M), gpu="A100-40GB", num_gpus=2)
    assert not p.fits and "will not fit" in p.warnings()[0]
    result = CliRunner().invoke(app, ["plan", DEXML_13M, "--num-gpus", "2", "--format", "json"])
    assert result.exit_code == 3
    assert json.loads(result.stdout)["fits"] is False
    ok = CliRunner().invoke(app, ["plan", DEXML_13M, "--gpu", "H100-80GB", "-n", "16"])
    assert ok.exit_code == 0 and "fits" in ok.stdout and "GPU-hours" in ok.stdout


def test_gpu_memory_override_and_unknown_device():
    assert plan_recipe(load_recipe(DEXML_13M), gpu="custom", gpu_mem_gb=100.0, num_gpus=8).fits
    with pytest.raises(XmcbenchError, match="unknown GPU"):
        plan_recipe(load_recipe(DEXML_13M), gpu="TPU")


def test_encoder_size_from_a_local_config(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "bert",
                "hidden_size": 768,
                "num_hidden_layers": 12,
                "num_attention_heads": 12,
                "intermediate_size": 3072,
                "vocab_size": 30522,
                "max_position_embeddings": 512,
            }
        )
    )
    size = encoder_size(str(tmp_path))
    assert size.source == "config" and size.hidden == 768 and size.layers == 12
    assert size.params == pytest.approx(109_482_240, rel=0.01)  # bert-base-uncased's count
    with pytest.raises(XmcbenchError, match="known sizes"):
        encoder_size("some-org/unknown-encoder")


RECORDED = Path(__file__).parents[2] / "benchmarks" / "results" / "train-gpu-h200.json"


@pytest.mark.parametrize(
    "row", [r for r in json.loads(RECORDED.read_text())["rows"] if r.get("recipe")], ids=lambda r: r["name"]
)
def test_plan_against_peaks_recorded_on_a_gpu(row):
    """``xmcbench plan``'s memory per device for the recipes run on an H200 (benchmarks/gpu.sh),
    against the peaks those runs recorded: never more than 10% under (a plan that says "fits" must
    fit) and at most 1.7x over (sampled pools are counted without duplicates)."""
    from xmcbench.run import recipe_from_dict

    recorded_gb = row["peak_gb"] * 2**30 / 1e9
    plan = plan_recipe(recipe_from_dict(row["recipe"]), gpu="H200-141GB", num_gpus=1)
    assert 0.9 <= plan.per_device_gb / recorded_gb <= 1.7, (plan.per_device_gb, recorded_gb, plan.memory_gb)


def test_the_regime_is_the_methods_default_when_the_recipe_leaves_it_out():
    p = plan_recipe(load_recipe("recipes/smoke/dexml.yaml"), gpu="A100-40GB", num_gpus=1)  # no regime key: hard
    assert p.method == "dexml (hard_negatives)"
