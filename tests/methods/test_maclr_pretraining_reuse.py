"""MACLR's Stages I-II kept and reused: the few-shot run after a zero-shot one trains exactly what it
would have trained from scratch, and reports the same bookkeeping, without repeating the pre-training."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from xmcbench.methods.maclr import MaclrMethod
from xmcbench.run import run_recipe

TINY = (
    "{name: maclr, stage1_steps: 4, k0: 4, t_k: 1, t_update: 1, label_negatives: 8, stage2_steps: 2, "
    "projection_dim: 8, temperature: 0.1, finetune_steps: 3, finetune_lr: 0.001, encode_batch_size: 64"
)
ZERO = "supervision: {mode: zero_shot}\n"
FEW = "supervision: {mode: few_shot, label_fraction: 0.05, seed: 3}\n"


def _run(recipe, root, name):
    return run_recipe(recipe, runs_dir=root / name, db=root / f"{name}.duckdb", progress=False)


def _stage_calls(monkeypatch):
    calls = []
    real = MaclrMethod._stage1

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MaclrMethod, "_stage1", counted)
    return calls


def _predictions(result):
    """The run's test-set scores, dense: equal only when both runs trained the same model."""
    from scipy import sparse

    return sparse.load_npz(result.run_dir / "predictions.npz").toarray()


def _with(recipe, section: str, **changes):
    return recipe.model_copy(update={section: getattr(recipe, section).model_copy(update=changes)})


def test_few_shot_after_zero_shot_reuses_the_pretraining_and_trains_the_same_model(tiny_recipe, tmp_path, monkeypatch):
    calls = _stage_calls(monkeypatch)
    fresh = _run(tiny_recipe(TINY + ", reuse_pretraining: false}", extra=FEW), tmp_path, "fresh")
    assert len(calls) == 1 and "pretraining" not in fresh.record["accounting"]

    zero = _run(tiny_recipe(TINY + "}", extra=ZERO), tmp_path, "zero")
    assert len(calls) == 2
    assert zero.record["accounting"]["pretraining"]["reused"] is False
    assert zero.record["accounting"]["pretraining"]["kept"] is True

    few = _run(tiny_recipe(TINY + "}", extra=FEW), tmp_path, "few")
    assert len(calls) == 2  # Stage I did not run again
    acc, base = few.record["accounting"], fresh.record["accounting"]
    assert acc["pretraining"]["reused"] is True
    assert acc["pretraining"]["from_run"] == zero.run_dir.name
    assert set(acc["pretraining"]["stage_wall_s"]) == {"stage1", "stage2"}
    # bit for bit the model the from-scratch run trained: the fine-tuning drew the same random numbers
    np.testing.assert_array_equal(_predictions(few), _predictions(fresh))
    assert few.record["scores"] == fresh.record["scores"]
    # and the run record tells the same story about training
    for key in ("ict_pairs", "stage1_steps", "stage2_steps", "stage2_pseudo_pairs", "cluster_refreshes", "steps"):
        assert acc[key] == base[key], key
    assert acc["pool_size_mean"] == pytest.approx(base["pool_size_mean"])
    assert acc["pool_size_max"] == base["pool_size_max"]
    assert acc["batch_size_by_stage"] == base["batch_size_by_stage"]
    assert set(acc["stage_wall_s"]) == {"finetune"}  # only what this run spent

    again = _run(tiny_recipe(TINY + "}", extra=ZERO), tmp_path, "again")  # zero-shot is the pre-training alone
    assert len(calls) == 2 and again.record["accounting"]["pretraining"]["from_run"] == zero.run_dir.name
    np.testing.assert_array_equal(_predictions(again), _predictions(zero))


@pytest.fixture(scope="module")
def start_encoder(tiny_encoder_dir):
    from xmcbench.encoders import TextEncoder

    return TextEncoder(tiny_encoder_dir, max_length=16)


def _key(recipe, encoder, *, texts=("a b", "c d", "e f"), seed=0):
    """The pre-training key of ``recipe`` started from ``encoder`` (the same one for every recipe, so
    that the settings are compared; the encoder's own part is tested on its own)."""
    from xmcbench.methods.base import RunContext, TrainTask

    task = TrainTask(
        "t",
        train_texts=list(texts),
        train_labels=None,
        label_texts=["x", "y"],
        train_titles=[t.split()[0] for t in texts],
        train_contents=[t.split()[1] for t in texts],
    )
    method = MaclrMethod(recipe.method, recipe)
    method.encoder = encoder
    return method._pretraining_cache(task, RunContext(run_dir=None, seed=seed)).key


@pytest.mark.parametrize(
    ("changed", "section", "change", "same"),
    [
        ("the fine-tuning only", "method", {"finetune_lr": 0.01, "finetune_steps": 2, "pretrain": False}, True),
        ("reuse switched off and on", "method", {"reuse_pretraining": False}, True),
        ("a Stage I setting", "method", {"label_negatives": 4}, False),
        ("a Stage II setting", "method", {"pseudo_top_k": 2}, False),
        ("the head", "method", {"projection_dim": 16}, False),
        ("the learning rate", "training", {"lr": 0.002}, False),
        ("the batch", "training", {"batch_size": 8}, False),
        ("the encoder's length", "encoder", {"max_length": 12}, False),
        ("the precision asked for (the one that runs is the environment's)", "training", {"precision": "fp32"}, True),
        ("the epochs MACLR does not count", "training", {"epochs": 7}, True),
    ],
)
def test_only_what_the_pretraining_reads_decides_reuse(tiny_recipe, start_encoder, changed, section, change, same):
    recipe = tiny_recipe(TINY + "}", extra=FEW)
    assert (_key(_with(recipe, section, **change), start_encoder) == _key(recipe, start_encoder)) is same, changed


def test_other_texts_a_seed_threads_or_start_weights_are_other_pretraining(tiny_recipe, start_encoder, monkeypatch):
    import copy

    import torch

    recipe = tiny_recipe(TINY + "}", extra=ZERO)
    key = _key(recipe, start_encoder)
    assert _key(recipe, start_encoder) == key  # stable
    assert _key(recipe, start_encoder, texts=("a b", "c d", "e g")) != key
    assert _key(recipe, start_encoder, texts=("a b", "c d")) != key
    assert _key(recipe, start_encoder, seed=1) != key
    # the same name, other weights (a re-saved folder, an unpinned Hub revision)
    other = copy.deepcopy(start_encoder)
    with torch.no_grad():
        next(other.parameters())[0, 0] += 1e-3
    assert _key(recipe, other) != key
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # float sums follow the thread count
    assert _key(recipe, start_encoder) != key


def test_a_damaged_entry_is_computed_again_and_replaced(tiny_recipe, tmp_path, monkeypatch, caplog):
    from xmcbench import paths

    calls = _stage_calls(monkeypatch)
    fresh = _run(tiny_recipe(TINY + "}", extra=ZERO), tmp_path, "first")
    [weights] = (paths.cache_dir() / "stages" / "maclr-pretraining").glob("*/weights.safetensors")
    weights.write_bytes(weights.read_bytes()[:100])  # cut short
    with caplog.at_level(logging.WARNING):
        again = _run(tiny_recipe(TINY + "}", extra=ZERO), tmp_path, "second")
    assert len(calls) == 2 and "cannot be read" in caplog.text
    np.testing.assert_array_equal(_predictions(again), _predictions(fresh))
    assert again.record["accounting"]["pretraining"]["kept"] is True  # and kept again, readable
    from safetensors.torch import load_file

    assert load_file(weights)  # replaced by a whole copy


def test_a_full_disk_loses_the_entry_not_the_run(tiny_recipe, tmp_path, monkeypatch, caplog):
    import errno

    from xmcbench.train import stage_cache

    def full(*args, **kwargs):  # safetensors says it as SafetensorError, torch.save as RuntimeError
        raise RuntimeError(f"failed to write: {OSError(errno.ENOSPC, 'No space left on device')}")

    monkeypatch.setattr(stage_cache, "_write_weights", full)
    with caplog.at_level(logging.WARNING):
        result = _run(tiny_recipe(TINY + "}", extra=ZERO), tmp_path, "first")
    assert result.record["status"] == "finished"
    assert result.record["accounting"]["pretraining"] == {
        "reused": False,
        "key": result.record["accounting"]["pretraining"]["key"],
        "kept": False,
    }
    assert "could not keep the maclr-pretraining" in caplog.text and "No space left" in caplog.text
    from xmcbench import paths

    left = list((paths.cache_dir() / "stages" / "maclr-pretraining").iterdir())
    assert all(p.name.endswith(".lock") for p in left)  # no half-written entry


@pytest.mark.parametrize(
    "family",
    [
        ("smoke/maclr.yaml", "smoke/maclr-few-shot.yaml"),
        *[
            (f"maclr/{d}-zero-shot.yaml", f"maclr/{d}-few-shot-1pct.yaml", f"maclr/{d}-few-shot-5pct.yaml")
            for d in ("lf-amazon-131k", "lf-amazon-1m", "lf-wikipedia-500k", "lf-wikiseealso-320k")
        ],
    ],
)
def test_the_shipped_zero_and_few_shot_recipes_share_one_pretraining(family, start_encoder):
    """Table 1's zero-shot run and Tables 2-3's few-shot runs of a dataset pre-train once between them."""
    from pathlib import Path

    from xmcbench.run import load_recipe

    root = Path(__file__).resolve().parents[2] / "recipes"
    keys = {_key(load_recipe(root / name), start_encoder) for name in family}
    assert len(keys) == 1, family


def test_pools_trained_elsewhere_count_in_the_totals_not_in_the_next_epoch_line(tmp_path):
    from xmcbench.methods.base import RunContext

    ctx = RunContext(run_dir=tmp_path)
    ctx.start_clock()
    ctx.record_pools_elsewhere([[100, 2], [40, 1]])  # a reused pre-training's steps
    ctx.record_pool(10)  # this run's own step
    entry = ctx.log_epoch(1, 1)
    assert entry["pool_size"] == 10
    assert ctx.accounting["steps"] == 4 and ctx.accounting["pool_size_max"] == 100
    assert ctx.accounting["pool_size_mean"] == pytest.approx(250 / 4)
