"""``xmcbench plan``: estimates on paper for a recipe's dataset and hardware, and a warning when it won't fit."""

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xmcbench.cli import app
from xmcbench.errors import XmcbenchError
from xmcbench.run import load_recipe
from xmcbench.run import plan as plan_module
from xmcbench.run.plan import LOGIT_TENSORS, encoder_size, plan_recipe

DEXML_13M = "recipes/dexml/lf-amazontitles-1.3m-all-negatives.yaml"


def test_dexml_all_negatives_on_the_papers_16_a100_80gb():
    p = plan_recipe(load_recipe(DEXML_13M), gpu="A100-80GB", num_gpus=16)
    assert p.n_labels == 1_305_265 and p.n_train == 2_248_619 and p.hidden == 768
    assert p.label_embeddings_gb == pytest.approx(1_305_265 * 768 * 4 / 1e9)
    # the blockwise loss keeps three float32 score blocks (its target masks are sparse), where
    # the plain expression kept ~12 float32 tensors of (8192 x L/16) (32 GB a GPU)
    loss_gb = p.memory_gb["loss: score blocks (batch x shard)"]
    assert loss_gb == pytest.approx(3 * (1 << 24) * 4 / 1e9)
    assert loss_gb < LOGIT_TENSORS * 8192 * 81_580 * 4 / 1e9 / 20
    assert 5 < p.per_device_gb < 80 and p.fits and not p.warnings()
    assert p.steps == 100 * -(-2_248_619 // 8192)
    assert p.gpu_hours == pytest.approx(p.step_s * p.steps * 16 / 3600)
    assert not plan_recipe(load_recipe(DEXML_13M), gpu="A100-40GB", num_gpus=1).fits


def test_fewer_gpus_do_not_fit_and_the_cli_warns():
    p = plan_recipe(load_recipe(DEXML_13M), gpu="A100-40GB", num_gpus=1)
    assert not p.fits and "will not fit" in p.warnings()[0]
    result = CliRunner().invoke(app, ["plan", DEXML_13M, "--num-gpus", "1", "--format", "json"])
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


RESULTS = Path(__file__).parents[2] / "benchmarks" / "results"
# train-gpu-h200-2.json: MACLR's Stage I (its larger stage: the plan is the recipe's peak) and LMTX, whose
# encoders see one pass per batch as now; its supervised rows were encoded in length groups on the GPU
# then (less padding, lower peaks), which the GPU no longer does (train-gpu-h200-length-groups.json).
_NOW = {"train-gpu-h200-2.json": ("train_gpu_maclr_stage1_100k", "train_gpu_lmtx_100k")}
RECORDED = [
    dict(row, file=path.name)
    for path in (RESULTS / "train-gpu-h100.json", RESULTS / "train-gpu-h200.json", RESULTS / "train-gpu-h200-2.json")
    for row in json.loads(path.read_text())["rows"]
    if row.get("recipe") and (path.name not in _NOW or row["name"] in _NOW[path.name])
] + [  # UniDEC and PRIME on the H200, one pass per batch (bench_train.py's own format)
    dict(name=f"train_gpu_{method}_100k", peak_gb=m["peak_step_gb"], file="train-gpu-h200-length-groups.json", **m)
    for method, m in json.loads((RESULTS / "train-gpu-h200-length-groups.json").read_text())["one_pass"][
        "methods"
    ].items()
]


def _replan(row):
    """The plan of a recorded recipe on the GPU it ran on, texts counted as the run's plan counted them."""
    from xmcbench.run import recipe_from_dict
    from xmcbench.run.plan import TextLengths

    lengths = row["text_lengths"]
    gpu = "H100-80GB" if "h100" in row["file"] else "H200-141GB"
    return plan_recipe(
        recipe_from_dict(row["recipe"]),
        gpu=gpu,
        num_gpus=1,
        lengths=TextLengths(lengths["query"], lengths["label"], lengths.get("bound", ""), "recorded"),
    )


@pytest.mark.parametrize("row", RECORDED, ids=lambda r: f"{r['file']}:{r['name']}")
def test_plan_against_peaks_recorded_on_a_gpu(row):
    """``xmcbench plan``'s memory per device for the recipes run on an H100 and an H200
    (benchmarks/gpu.sh; MACLR and LMTX too), against the peaks those runs recorded: never more than 10% under (a plan
    that says "fits" must fit) and at most 1.7x over (sampled pools are counted with duplicates)."""
    if row.get("loss_path") == "plain autograd":
        pytest.skip("recorded before DEXML's blockwise loss (train-gpu-h100.json has it again)")
    recorded_gb = row["peak_gb"] * 2**30 / 1e9
    plan = _replan(row)
    assert 0.9 <= plan.per_device_gb / recorded_gb <= 1.7, (plan.per_device_gb, recorded_gb, plan.memory_gb)


@pytest.mark.parametrize("row", [r for r in RECORDED if "h100" in r["file"]], ids=lambda r: r["name"])
def test_plan_step_time_against_steps_recorded_on_an_h100(row):
    """The step time (FLOPs at the plan's 20% utilisation) within 2x either way of the recorded step."""
    plan = _replan(row)
    assert 0.5 <= row["xmcbench_s"] / plan.step_s <= 2.0, (row["xmcbench_s"], plan.step_s)


def test_activation_model_against_the_gpu_measurement():
    """The plan's bytes per token and layer against the H100 measurement at 32-512 tokens (the
    fused attention keeps no (s x s) matrix: the cost barely grows with the length)."""
    from xmcbench.run.plan import activation_bytes

    rows = json.loads((RESULTS / "activations-gpu-h100.json").read_text())["rows"]
    assert [r["seq"] for r in rows] == [32, 64, 128, 256, 512]
    for r in rows:
        assert activation_bytes(768, r["seq"]) == pytest.approx(r["bytes_per_token_layer"], rel=0.01)


def test_the_regime_is_the_methods_default_when_the_recipe_leaves_it_out():
    p = plan_recipe(load_recipe("recipes/smoke/dexml.yaml"), gpu="A100-40GB", num_gpus=1)  # no regime key: hard
    assert p.method == "dexml (hard_negatives)"


LOSS_CPU = Path(__file__).parents[2] / "benchmarks" / "results" / "dexml-loss-cpu-sparse.json"


def test_blockwise_loss_memory_against_a_cpu_measurement():
    """The plan's model of DEXML's blockwise loss, sparse targets as DEXML passes them, against its
    measured peak (bench_dexml_loss.py), which counts the label embeddings' copy and gradient and
    the target mask (built inside the measured run)."""
    from xmcbench.run.plan import GB, blockwise_decoupled_softmax_gb

    result = json.loads(LOSS_CPU.read_text())
    shape = result["shape"]
    batch, labels, dim = shape["batch"], shape["labels"], shape["dim"]
    rows = {r["impl"]: r for r in result["rows"]}
    sparse = rows["blockwise_sparse"]
    planned_gb = blockwise_decoupled_softmax_gb(batch, labels) + 2 * (labels + batch) * dim * 4 / GB
    assert 0.9 <= planned_gb / sparse["peak_extra_gb"] <= 1.7, (planned_gb, sparse["peak_extra_gb"])
    assert rows["plain"]["bytes_per_cell"] > 5 * rows["blockwise"]["bytes_per_cell"]  # what the blocks are for
    # what the sparse mask is for: the dense one's byte a cell
    assert rows["blockwise"]["peak_extra_gb"] - sparse["peak_extra_gb"] > 0.8 * batch * labels / GB


def test_the_plans_block_is_the_losss():
    from xmcbench.run.plan import LOSS_BLOCK_CELLS
    from xmcbench.train.sharded_decoupled_softmax import BLOCK_CELLS

    assert LOSS_BLOCK_CELLS == BLOCK_CELLS


def test_a_gradient_cached_pool_needs_one_chunks_activations(tmp_path):
    """DEXML hard negatives with ``pool_chunk``: the pool's graph is one chunk at a time, one more
    forward pass over the pool is paid."""
    chunked = Path("recipes/dexml/lf-amazontitles-1.3m-hard-negatives.yaml")  # pool_chunk: 2048
    hard = tmp_path / "plain.yaml"
    hard.write_text(re.sub(r"\n  pool_chunk: 2048 .*\n *#[^\n]*", "", chunked.read_text()))
    plain = plan_recipe(load_recipe(hard), gpu="A100-80GB", num_gpus=8)
    cached = plan_recipe(load_recipe(chunked), gpu="A100-80GB", num_gpus=8)
    assert load_recipe(hard).method.params().get("pool_chunk") is None
    assert "activations (queries + pool labels), bf16" in plain.memory_gb
    assert "activations: max(query batch, pool chunk), bf16" in cached.memory_gb
    assert cached.per_device_gb < plain.per_device_gb / 4 and cached.step_s > plain.step_s
    assert any("gradient cache" in note for note in cached.notes)


PAPER_HARDWARE = sorted(
    str(p) for p in Path("recipes").rglob("*.yaml") if "gpu:" in p.read_text() and "smoke" not in p.parts
)


def test_recipes_name_their_papers_gpu():
    assert len(PAPER_HARDWARE) >= 15  # DEXML's, PRIME's and UniDEC's paper recipes
    assert load_recipe("recipes/prime.yaml").hardware.gpu == "A100-80GB"  # through include
    assert load_recipe("recipes/unidec.yaml").hardware.gpu == "A6000-48GB"
    assert load_recipe("recipes/dexml.yaml").hardware.gpu == "A100-40GB"


@pytest.mark.parametrize("path", PAPER_HARDWARE)
def test_each_paper_setting_is_planned_on_the_hardware_its_paper_ran_it_on(path):
    """Plan's default device is the recipe's hardware.gpu. Where texts are short (max_length <= 64:
    the titles datasets), the plan's token counts without the dataset here (every text padded to
    max_length: an upper bound, batches are padded to their longest text) are close, and the papers'
    settings fit their GPUs. Long-text settings may plan over until their dataset is prepared here
    (EURLex-4K's short label names are counted as 128 tokens), and their warning says so."""
    recipe = load_recipe(path)
    p = plan_recipe(recipe)
    assert p.gpu == recipe.hardware.gpu and p.num_gpus == recipe.hardware.num_gpus
    if recipe.encoder.max_length <= 64:
        assert p.fits, (path, p.per_device_gb, p.memory_gb)
    assert p.lengths_bound == "every text at max_length" and all("an upper bound" in w for w in p.warnings())


def test_the_gpu_option_overrides_the_recipes_and_unknown_gpus_are_refused(tmp_path):
    prime = "recipes/prime/lf-amazontitles-1.3m.yaml"
    assert plan_recipe(load_recipe(prime)).gpu == "A100-80GB"
    assert plan_recipe(load_recipe(prime), gpu="h100-80gb").gpu == "H100-80GB"
    result = CliRunner().invoke(app, ["plan", prime, "--format", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["gpu"] == "A100-80GB"
    assert plan_recipe(load_recipe("recipes/lmtx.yaml")).gpu == "A100-40GB"  # names none
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(prime).read_text().replace("gpu: A100-80GB", "gpu: A100-41GB"))
    with pytest.raises(XmcbenchError, match="unknown GPU 'A100-41GB'; use one of V100-16GB"):
        load_recipe(bad)
    ok = tmp_path / "ok.yaml"
    ok.write_text(Path(prime).read_text().replace("gpu: A100-80GB", "gpu: a100-80gb"))
    assert load_recipe(ok).hardware.gpu == "A100-80GB"


def test_the_warning_says_what_this_method_can_change():
    one_gpu = plan_recipe(load_recipe("recipes/unidec/lf-wikiseealso-320k.yaml"), gpu="A10-24GB")
    (warning,) = one_gpu.warnings()
    assert "unidec trains on one GPU" in warning and "more GPUs" not in warning
    all_negatives = plan_recipe(load_recipe(DEXML_13M), num_gpus=1)
    assert "method.gradcache_chunk" in all_negatives.warnings()[0]
    hard = "recipes/dexml/lf-wikipedia-500k-hard-negatives.yaml"
    (warning,) = plan_recipe(load_recipe(hard)).warnings()
    assert "method.pool_chunk (e.g. 1024)" in warning
    assert plan_recipe(load_recipe(hard, ["method.pool_chunk=1024"])).fits  # and the advice works


SMALL = [
    "dataset.name=plan-synth",
    "dataset.synthetic.labels=60",
    "dataset.synthetic.train=120",
    "dataset.synthetic.test=20",
]


def test_a_batch_larger_than_the_training_set_is_planned_at_the_training_set():
    """A step takes every query when there are fewer than a batch (the run warns and records that
    batch), so the plan counts that many, not the recipe's batch_size, and says so."""
    from xmcbench.run.plan import TextLengths

    lengths = TextLengths(16, 8, "", "")
    big = plan_recipe(load_recipe("recipes/smoke/dexml.yaml", [*SMALL, "training.batch_size=100000"]), lengths=lengths)
    exact = plan_recipe(load_recipe("recipes/smoke/dexml.yaml", [*SMALL, "training.batch_size=120"]), lengths=lengths)
    assert big.n_train == 120 and big.batch_size == 120
    assert big.memory_gb == exact.memory_gb and big.step_s == exact.step_s
    assert any(
        "training.batch_size 100,000 is more than the 120 training queries: planned at 120" in n for n in big.notes
    )
    assert big.warnings() == []  # one GPU: a step takes them all
    # across GPUs the incomplete last batch is dropped, so the run would refuse it: plan says so (exit 3)
    two = plan_recipe(
        load_recipe("recipes/smoke/dexml.yaml", [*SMALL, "training.batch_size=100000"]), num_gpus=2, lengths=lengths
    )
    assert two.fits and "across 2 GPUs the run refuses training.batch_size 100,000" in two.warnings()[0]
    sets = [f"--set={s}" for s in [*SMALL, "training.batch_size=100000"]]
    result = CliRunner().invoke(app, ["plan", "recipes/smoke/dexml.yaml", "--num-gpus", "2", *sets])
    assert result.exit_code == 3 and "set it to at most 120" in result.output


def _longest(tokenizer, texts, cap):
    return max(len(tokenizer(t, truncation=True, max_length=cap)["input_ids"]) for t in texts)


def test_texts_are_counted_at_their_longest_once_the_dataset_is_prepared():
    """Batches are padded to their longest text: with the dataset prepared here, each side counts as
    its longest text in the encoder's tokens (not max_length), and the plan says which it used."""
    from transformers import AutoTokenizer

    from xmcbench.data import load_dataset
    from xmcbench.encoders import resolve_model_path
    from xmcbench.run.plan import text_lengths

    recipe = load_recipe(
        "recipes/smoke/unidec.yaml", [*SMALL, "encoder.max_length=512", "encoder.label_max_length=256"]
    )
    before = plan_recipe(recipe, gpu="tiny", gpu_mem_gb=0.2)
    assert before.lengths_bound == "every text at max_length"
    assert any("(a run makes it; plan then measures" in n for n in before.notes)  # synthetic: not downloaded
    assert any("texts counted at max_length (512 / 256 tokens), an upper bound" in n for n in before.notes)
    assert "will not fit with every text at max_length (an upper bound)" in before.warnings()[0]

    ds = load_dataset("plan-synth", synthetic=recipe.dataset.synthetic.model_dump(), progress=False)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(recipe.encoder.name))
    query = _longest(tokenizer, ds.query_texts("train"), 512)
    label = _longest(tokenizer, ds.label_texts(), 256)
    assert query < 512 and label < 256  # short synthetic texts: the measurement matters
    lengths = text_lengths(recipe)
    assert (lengths.query, lengths.label, lengths.bound) == (query, label, "")
    after = plan_recipe(recipe, gpu="tiny", gpu_mem_gb=0.2)
    assert after.lengths_bound == "" and any(
        f"queries {query}, labels {label} tokens, measured with" in n for n in after.notes
    )
    activations = "activations (queries + pool labels), bf16"
    assert after.memory_gb[activations] < before.memory_gb[activations] * max(query / 512, label / 256)
    assert all("upper bound" not in w for w in after.warnings())


def test_without_the_tokenizer_here_the_texts_utf8_lengths_bound_them(monkeypatch):
    """An encoder known only by its Hub id (nothing cached, offline): the longest texts' utf-8 lengths
    plus the special tokens bound their token counts."""
    from xmcbench.data import load_dataset
    from xmcbench.run.plan import text_lengths

    recipe = load_recipe(
        "recipes/smoke/unidec.yaml",
        [*SMALL, "encoder.name=bert-base-uncased", "encoder.max_length=512", "encoder.label_max_length=8"],
    )
    ds = load_dataset("plan-synth", synthetic=recipe.dataset.synthetic.model_dump(), progress=False)
    monkeypatch.setattr(plan_module, "_local_tokenizer", lambda name, revision: None)  # whatever HF's cache holds
    lengths = text_lengths(recipe)
    assert lengths.query == min(512, int(ds.query_texts("train").byte_lengths().max()) + 3)  # ASCII texts
    assert lengths.label == 8  # capped
    assert lengths.bound == "texts at a bound from their utf-8 lengths" and "bounded by their utf-8" in lengths.how
    warning = plan_recipe(recipe, gpu="tiny", gpu_mem_gb=0.01, lengths=lengths).warnings()[0]
    assert "with texts at a bound from their utf-8 lengths (an upper bound)" in warning


def test_a_model_folder_without_tokenizer_files_is_bounded_by_bytes_not_read_as_unknown_words(tmp_path):
    """transformers builds an all-[UNK] tokenizer from a config alone; plan must not measure with it."""
    from xmcbench.data import load_dataset
    from xmcbench.run.plan import text_lengths

    folder = tmp_path / "config-only"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2})
    )
    recipe = load_recipe("recipes/smoke/unidec.yaml", [*SMALL, f"encoder.name={folder}", "encoder.max_length=512"])
    ds = load_dataset("plan-synth", synthetic=recipe.dataset.synthetic.model_dump(), progress=False)
    lengths = text_lengths(recipe)
    assert "no tokenizer of" in lengths.how
    assert lengths.query == int(ds.query_texts("train").byte_lengths().max()) + 3


def test_gpu_count_and_memory_must_make_sense():
    recipe = load_recipe("recipes/smoke/dexml.yaml")
    for bad in (0, -3):
        with pytest.raises(XmcbenchError, match="--num-gpus must be between 1 and 4096"):
            plan_recipe(recipe, num_gpus=bad)
    with pytest.raises(XmcbenchError, match="--gpu-mem is GB per device, more than 0"):
        plan_recipe(recipe, gpu="custom", gpu_mem_gb=-5)
    result = CliRunner().invoke(app, ["plan", "recipes/smoke/dexml.yaml", "--gpu-mem", "0"])
    assert result.exit_code != 0 and "--gpu-mem is GB per device" in result.output


def test_maclr_is_planned_at_its_stage_one_step_and_its_step_counts():
    """Stage I embeds each context twice (Eq. 3's dropout views), the instance titles and M label
    texts; MACLR counts steps, not epochs; its label side (instance titles) is not measured."""
    from xmcbench.run.plan import TextLengths

    recipe = load_recipe("recipes/maclr.yaml")
    p = plan_recipe(recipe, lengths=TextLengths(100, 20, "", ""))
    assert p.gpu == "A100-80GB" and p.steps == 200_000  # Stage I + Stage II, zero-shot: no fine-tuning
    # 42.5 h + 2 s bytes a token and layer, s each text's own padded length
    per_token, per_label_token = 12 * (42.5 * 768 + 2 * 100), 12 * (42.5 * 768 + 2 * 20)
    held = 2 * 256 * 100 * per_token + (256 + 32) * 20 * per_label_token
    assert p.memory_gb["activations (contexts x2, titles, labels), bf16"] == pytest.approx(held / 1e9)
    few = plan_recipe(
        load_recipe("recipes/maclr/lf-amazon-131k-few-shot-1pct.yaml"), lengths=TextLengths(100, 20, "", "")
    )
    assert few.steps == 200_000 + few_shot_steps("recipes/maclr/lf-amazon-131k-few-shot-1pct.yaml")
    one_view = plan_recipe(
        load_recipe("recipes/maclr.yaml", ["method.label_regularisation=false"]), lengths=TextLengths(100, 20, "", "")
    )
    assert one_view.memory_gb["activations (contexts, titles), bf16"] == pytest.approx(
        (256 * 100 * per_token + 256 * 20 * per_label_token) / 1e9
    )
    # zero-shot pre-trains whatever method.pretrain says: it has nothing else to train on
    unset = plan_recipe(load_recipe("recipes/maclr.yaml", ["method.pretrain=false"]), lengths=TextLengths(1, 1, "", ""))
    assert unset.steps == 200_000


def test_maclr_times_each_stage_at_its_own_step_and_counts_its_encodings():
    """A Stage II or fine-tuning step embeds one view of the batch's instances and their labels
    (about half of Stage I's tokens here: one view, no label negatives); the K-means encodings (the first
    and one per T_update steps of Stage I's first half), Stage II's pseudo-label encodings and the
    final label table run outside the steps."""
    from xmcbench.run.plan import TextLengths

    lengths = TextLengths(100, 20, "", "")
    p = plan_recipe(load_recipe("recipes/maclr.yaml"), lengths=lengths)
    n, n_labels, b, m = p.n_train, p.n_labels, 256, 32
    stage1_tokens = 2 * b * 100 + (b + m) * 20
    pair_tokens = b * 100 + b * 20
    stage1_only = plan_recipe(load_recipe("recipes/maclr.yaml", ["method.self_training=false"]), lengths=lengths)
    stage1_step = stage1_only.step_s
    assert p.step_s == pytest.approx((stage1_step + stage1_step * pair_tokens / stage1_tokens) / 2)
    refreshes = (50_000 - 1) // 5_000  # steps 5,000 ... 45,000
    encoded = (1 + refreshes) * n * 100 + (n * 100 + n_labels * 20) + n_labels * 20
    token_s = stage1_step / (3 * stage1_tokens)
    assert p.other_s == pytest.approx(encoded * token_s)
    assert p.gpu_hours == pytest.approx((p.step_s * p.steps + p.other_s) / 3600)
    assert "mean over its stages" in " ".join(p.notes)


def test_maclr_contexts_are_not_measured_on_a_titles_only_dataset():
    """MACLR's contexts are title + body; on a dataset whose query texts are titles, those would
    understate them, so contexts (and titles and labels, never measured) count at max_length."""
    from xmcbench.data import load_dataset
    from xmcbench.run.plan import text_lengths

    recipe = load_recipe("recipes/maclr.yaml", [*SMALL, "encoder.name=all-MiniLM-L6-v2", "method.k0=16"])
    ds = load_dataset("plan-synth", synthetic=recipe.dataset.synthetic.model_dump(), progress=False)
    assert ds.query_text == "title"
    lengths = text_lengths(recipe)
    assert (lengths.query, lengths.label) == (288, 64) and lengths.bound
    assert "contexts 288 (max_length: not measured), titles and labels 64 (max_length: not measured)" in lengths.how


def few_shot_steps(path: str) -> int:
    return int(load_recipe(path).method_config().finetune_steps)


def test_lmtx_counts_its_cycles_encodings_and_judge():
    """LMTX trains on train_docs for up to max_cycles cycles (not epochs over the whole training
    set), encodes every label twice a cycle, and its judge reads each document once a round; the
    judge's time is prefill at 2 x parameters FLOPs a prompt token."""
    from xmcbench.judge.base import load_prompt
    from xmcbench.run.plan import TextLengths

    recipe = load_recipe("recipes/lmtx/lf-wikipedia-500k.yaml")  # threshold 0.5, 30k docs, 800 dev, top-10, 5 cycles
    p = plan_recipe(recipe, lengths=TextLengths(200, 20, "", ""))
    n_labels, docs, dev, j = 501_070, 30_000, 800, 10
    assert p.steps == 5 * -(-docs // 128)  # not 14,168: one epoch a cycle over the 30k documents
    encoded = (dev * 200 + n_labels * 20) + 5 * ((docs + dev) * 200 + 2 * n_labels * 20) + n_labels * 20
    non_embedding = 66_362_880 - 30_522 * 768
    rate = 312e12 * 0.2  # one A100-40GB at the plan's 20%
    assert p.other_s == pytest.approx(2 * non_embedding * encoded / rate)
    assert p.gpu_hours == pytest.approx((p.step_s * p.steps + p.other_s) / 3600)
    jp = p.judge
    assert (jp.params, jp.size_from) == (13e9, "read from its name")
    assert jp.rounds == 1 + 2 * 5  # the start's dev score, then each cycle's shortlist and dev score
    assert jp.questions == dev + 5 * (docs * j + dev)
    assert jp.documents == dev + 5 * (docs + dev)
    assert jp.doc_tokens == 2500 // 4  # max_doc_chars at 4 characters a token
    template = load_prompt("lf-wikipedia-500k").template
    around = len(template) - len("{doc}") - len("{label_text}")
    assert jp.question_tokens == -(-around // 4) + 20
    assert jp.tokens == jp.documents * jp.doc_tokens + jp.questions * jp.question_tokens
    assert jp.gpu_hours == pytest.approx(2 * 13e9 * jp.tokens / rate / 3600)
    assert "judge WizardLMTeam/WizardLM-13B-V1.0 (13B parameters" in p.render()
    # "auto" judges the dev set's top-j first: one more round and dev x j more questions
    auto_recipe = load_recipe("recipes/lmtx/lf-wikipedia-500k.yaml", ["method.threshold=auto"])
    auto = plan_recipe(auto_recipe, lengths=TextLengths(200, 20, "", ""))
    assert auto.judge.rounds == jp.rounds + 1 and auto.judge.questions == jp.questions + dev * j
    as_json = json.loads(json.dumps(p.as_dict()))
    assert as_json["judge"]["questions"] == jp.questions and as_json["other_s"] == pytest.approx(p.other_s)


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("WizardLMTeam/WizardLM-13B-V1.0", 13e9),
        ("meta-llama/Llama-2-13b-chat-hf", 13e9),
        ("Qwen/Qwen2.5-7B-Instruct", 7e9),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", 135e6),
        ("/models/mistral-7b-v0.1.Q4_K_M.gguf", 7e9),
        ("Qwen/Qwen2.5-7B-Instruct-1M", 7e9),  # "1M" is its context length
        ("stabilityai/stablelm-2-1_6b", 0.0),  # "1_6b" is 1.6B: not read as 6B, not guessed
        ("gpt-4o", 0.0),  # says no size: not guessed
        ("mistralai/Mixtral-8x7B-v0.1", 0.0),  # 8 experts of 7B: not 7e9
        ("parts:judge-part#sha256=" + "a7b0" * 16, 0.0),  # a hash is not a size
    ],
)
def test_judge_size_from_its_name(model, params):
    from xmcbench.judge.config import JudgeConfig
    from xmcbench.run.plan import judge_size

    size, how = judge_size(JudgeConfig(backend="openai", base_url="http://127.0.0.1:1/v1", model=model))
    assert size == params and ("read from its name" if params else "--judge-params") in how


def test_judge_size_from_local_weights_given_or_unknown(tmp_path):
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    from xmcbench.judge.config import JudgeConfig
    from xmcbench.run.plan import judge_size

    folder = tmp_path / "judge-70B"  # the weights, not the name, are counted
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    save_file({"a": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float32)}, str(folder / "model-1.safetensors"))
    save_file({"c": np.zeros((2, 2, 2), np.float32)}, str(folder / "model-2.safetensors"))
    local = JudgeConfig(backend="transformers", model=str(folder))
    assert judge_size(local) == (3 * 4 + 5 + 8, f"counted in {folder}")
    # A consolidated copy of the same weights is not counted twice; an index names the files that count.
    save_file({"all": np.zeros(25, np.float32)}, str(folder / "consolidated.safetensors"))
    assert judge_size(local)[0] == 25
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-1.safetensors"}}))
    assert judge_size(local)[0] == 3 * 4 + 5
    # Packed (quantized) weights would count low: the name says the size, or nothing does.
    (folder / "config.json").write_text(json.dumps({"quantization_config": {"bits": 4}}))
    assert judge_size(local)[0] == 70e9 and judge_size(local)[1] == "read from its name"
    assert judge_size(local, 2e9) == (2e9, "as given")
    assert judge_size(JudgeConfig(backend="fake"))[0] == 0
    # A size nobody can tell: the plan says so and counts no judge time, and --judge-params fills it in.
    unknown = ["method.judge.model=my-judge", "method.judge.backend=openai"]
    recipe = load_recipe("recipes/lmtx/eurlex-4k.yaml", unknown)
    p = plan_recipe(recipe)
    assert p.judge.params == 0 and p.judge.gpu_hours == 0 and "its time is not counted" in p.render()
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "recipes/lmtx/eurlex-4k.yaml",
            *[f"--set={u}" for u in unknown],
            "--judge-params",
            "7e9",
            "-f",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    judge = json.loads(result.output)["judge"]
    assert judge["params"] == 7e9 and judge["gpu_hours"] > 0
    with pytest.raises(XmcbenchError, match="judge LLM's parameter count"):
        plan_recipe(recipe, judge_params=-1)


def test_a_judge_on_the_training_gpu_takes_its_memory_and_its_time():
    """The transformers judge runs in the run's process: on CUDA its weights and key/value cache sit
    on the training GPU and the run waits for its prefill; on the CPU it takes no GPU time; an HTTP
    judge's hours are its own server's."""
    from xmcbench.run.plan import TextLengths

    lengths = TextLengths(200, 20, "", "")
    on_gpu = plan_recipe(load_recipe("recipes/lmtx.yaml"), lengths=lengths)  # 13B, bf16, device cuda
    assert on_gpu.judge.where == "training GPU" and on_gpu.judge.gpu_hours > 1
    assert on_gpu.memory_gb["judge LLM weights (bfloat16)"] == pytest.approx(2 * 13e9 / 1e9)
    assert any("key/value cache not counted" in n for n in on_gpu.notes)  # no config.json here
    assert on_gpu.other_s > on_gpu.judge.gpu_hours * 3600
    assert on_gpu.gpu_hours == pytest.approx((on_gpu.step_s * on_gpu.steps + on_gpu.other_s) / 3600)
    assert "on the training GPU, in the hours above" in on_gpu.render()
    on_cpu = plan_recipe(load_recipe("recipes/lmtx.yaml", ["method.judge.device=cpu"]), lengths=lengths)
    assert on_cpu.judge.where == "CPU" and on_cpu.judge.gpu_hours == 0
    assert not any(k.startswith("judge") for k in on_cpu.memory_gb) and on_cpu.other_s < on_gpu.other_s
    assert "on CPU: its time is not estimated" in on_cpu.render()
    server = plan_recipe(load_recipe("recipes/lmtx/eurlex-4k.yaml"), lengths=lengths)
    assert server.judge.where == "server" and not any(k.startswith("judge") for k in server.memory_gb)
    assert server.gpu_hours * 3600 == pytest.approx(server.step_s * server.steps + server.other_s)
    assert server.other_s < server.judge.gpu_hours * 3600  # its judging is not in the run's hours


def test_the_judges_key_value_cache_is_counted_from_its_config(tmp_path):
    from xmcbench.run.plan import TextLengths

    folder = tmp_path / "judge-7B"
    folder.mkdir()
    config = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8}
    (folder / "config.json").write_text(json.dumps(config))
    recipe = load_recipe("recipes/lmtx.yaml", [f"method.judge.model={folder}", "method.judge.batch_size=4"])
    p = plan_recipe(recipe, lengths=TextLengths(200, 20, "", ""))
    prompt = p.judge.doc_tokens + p.judge.question_tokens
    kv = 4 * prompt * 2 * 32 * 8 * 128 * 2  # batch x tokens x (K and V) x layers x kv heads x head dim x bf16
    assert p.memory_gb["judge key/value cache (a batch of prompts)"] == pytest.approx(kv / 1e9)
    assert p.judge.params == 7e9  # no weights in the folder: the name says


def test_plan_refuses_what_the_run_would_refuse():
    with pytest.raises(XmcbenchError, match="trains in one process"):
        plan_recipe(load_recipe("recipes/prime.yaml"), num_gpus=2)
    with pytest.raises(XmcbenchError, match="--judge-params is for LMTX recipes"):
        plan_recipe(load_recipe("recipes/prime.yaml"), judge_params=13e9)


def _finite_numbers(value, where="plan"):
    """Every number in a plan's JSON, each finite and not negative."""
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_numbers(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _finite_numbers(v, f"{where}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        assert math.isfinite(value) and value >= 0, f"{where} = {value}"


def _shipped():
    from xmcbench.run.shipped import list_recipes

    return list(list_recipes().items())


@pytest.mark.parametrize(
    "hardware",
    [{}, {"num_gpus": 1}, {"gpu": "RTX-9090", "gpu_mem_gb": 24.0, "num_gpus": 1}, {"gpu": "H200-141GB"}],
    ids=["recipe's", "one GPU", "unknown GPU with --gpu-mem", "H200"],
)
def test_every_shipped_recipe_plans_with_finite_numbers_without_its_dataset(hardware):
    # a fresh home: no dataset is prepared, so every plan runs on the catalogue's counts
    for name, path in _shipped():
        try:
            p = plan_recipe(load_recipe(path), **hardware)
        except XmcbenchError as exc:
            # what the plan cannot know offline, or what the run would refuse, said in one line
            known = ("hf://", "trains in one process", "uses no encoder")
            assert any(why in str(exc) for why in known), f"{name}: {exc}"
            continue
        _finite_numbers(p.as_dict(), name)
        assert p.n_labels > 0 and p.n_train > 0 and p.per_device_gb > 0, name
        if p.lengths_bound:
            assert "not prepared here" in p.lengths.how, name


def test_tfidf_is_not_planned_as_an_encoder_and_a_cpu_recipe_says_so():
    with pytest.raises(XmcbenchError, match="tfidf uses no encoder and trains no network"):
        plan_recipe(load_recipe("recipes/smoke/tfidf.yaml"))
    p = plan_recipe(load_recipe("recipes/smoke/dexml.yaml"))
    assert any("runs on the CPU (hardware.devices: cpu)" in note for note in p.notes)


def test_the_cli_plans_a_shipped_recipe_by_name_and_checks_its_options():
    by_name = CliRunner().invoke(app, ["plan", "smoke/dexml", "--format", "JSON"])
    assert by_name.exit_code == 0 and json.loads(by_name.stdout)["recipe"] == "smoke-dexml"
    unknown = CliRunner().invoke(app, ["plan", "smoke/no-such-recipe"])
    assert unknown.exit_code == 1 and "no shipped recipe of that name" in unknown.output
    fmt = CliRunner().invoke(app, ["plan", "smoke/dexml", "--format", "yaml"])
    assert fmt.exit_code == 1 and "--format is text or json, not 'yaml'" in fmt.output
    empty = CliRunner().invoke(app, ["plan", "smoke/dexml", "--gpu", ""])
    assert empty.exit_code == 1 and "--gpu is empty" in empty.output
    tiny = CliRunner().invoke(app, ["plan", "smoke/dexml", "--gpu-mem", "0.001"])
    assert tiny.exit_code == 3 and "of 0.001 GB -> DOES NOT FIT" in tiny.stdout  # not "of 0 GB"


@pytest.mark.parametrize(
    "damage",
    [
        {"model.safetensors": b"not safetensors"},
        {"model.safetensors.index.json": b'{"weight_map": 5}'},
        {"model.safetensors.index.json": b'{"weight_map": {"a": "missing.safetensors"}}'},
    ],
    ids=["garbage weights", "bad index", "index naming a missing file"],
)
def test_a_judge_whose_weights_cannot_be_read_is_still_planned(tmp_path, damage):
    folder = tmp_path / "judge-13B"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    for name, data in damage.items():
        (folder / name).write_bytes(data)
    p = plan_recipe(load_recipe("recipes/lmtx.yaml", [f"method.judge.model={folder}"]))
    assert p.judge.params == 13e9  # its name says
    assert "read from its name; its weights in" in p.judge.size_from and "could not be read" in p.judge.size_from
    (folder.rename(tmp_path / "my-judge"))
    p = plan_recipe(load_recipe("recipes/lmtx.yaml", [f"method.judge.model={tmp_path / 'my-judge'}"]))
    assert p.judge.params == 0 and "give --judge-params" in p.judge.size_from


def test_long_memory_component_names_stay_in_their_column():
    text = plan_recipe(load_recipe("recipes/lmtx.yaml")).render()
    block = text.split("GPU memory per device:\n")[1].split("\n  step time")[0].splitlines()
    assert any(len(line.strip().split("  ")[0]) > 36 for line in block)  # "activations (queries + pool labels), bf16"
    assert len({line.index(" GB") for line in block}) == 1, block
