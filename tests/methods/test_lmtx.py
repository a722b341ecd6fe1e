"""LMTX with the deterministic judge: zero-shot plumbing, cycles, cache, accounting."""

from __future__ import annotations

import numpy as np
import pytest

from xmcbench.run import run_recipe

FAKE = "{backend: fake}"


def run(recipe, tmp_path, **kw):
    return run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False, **kw)


def lmtx(tiny_recipe, *, cycles=2, extra="", epochs=2):
    return tiny_recipe(
        f"{{name: lmtx, judge: {FAKE}, shortlist_j: 5, dev_docs: 40, train_docs: 150, "
        f"max_cycles: {cycles}, epochs_per_cycle: {epochs}{extra}}}",
        extra="supervision: {mode: zero_shot}\n",
    )


def test_lmtx_runs_zero_shot_and_records_the_judge(tiny_recipe, tmp_path):
    result = run(lmtx(tiny_recipe), tmp_path)
    acc = result.record["accounting"]
    assert result.record["status"] == "finished"
    judge = acc["judge"]
    assert judge["backend"] == "fake" and judge["prompt_id"] == "eurlex-4k"
    # cycle 0 judges the dev shortlists (40 x 5); every cycle then judges 150 x 5 training pairs
    assert judge["asked"] + judge["cache_hits"] >= 40 * 5 + 150 * 5
    assert acc["cycles"][0]["cycle"] == 0 and 0 <= acc["best_cycle"] <= 2
    assert 0 < acc["judge_threshold"] < 1 and acc["hard_negatives_per_query"] == 0


def test_a_second_run_asks_the_judge_nothing(tiny_recipe, tmp_path):
    first = run(lmtx(tiny_recipe), tmp_path / "a")
    second = run(lmtx(tiny_recipe), tmp_path / "b")
    assert first.record["accounting"]["judge"]["asked"] > 0
    assert second.record["accounting"]["judge"]["asked"] == 0
    assert second.scores["P@1"] == pytest.approx(first.scores["P@1"])


def test_training_labels_never_reach_the_method(tiny_recipe, tmp_path, monkeypatch):
    from xmcbench.methods.lmtx import LmtxMethod

    seen = {}
    real = LmtxMethod.fit

    def spy(self, task, ctx):
        seen["labels"] = task.train_labels
        return real(self, task, ctx)

    monkeypatch.setattr(LmtxMethod, "fit", spy)
    run(lmtx(tiny_recipe, cycles=1), tmp_path)
    assert seen["labels"] is None


def test_lmtx_beats_the_encoder_it_starts_from(tiny_recipe, tmp_path):
    start = run(lmtx(tiny_recipe, cycles=0), tmp_path / "a")
    trained = run(lmtx(tiny_recipe, cycles=3, epochs=8), tmp_path / "b")
    assert trained.record["accounting"]["best_cycle"] >= 1, trained.record["accounting"]["cycles"]
    assert trained.scores["P@1"] > start.scores["P@1"]


def test_otsu_threshold_splits_a_squeezed_judge():
    from xmcbench.methods.lmtx import _accept, otsu_threshold

    p = np.r_[np.full(50, 0.40), np.full(30, 0.62)] + np.linspace(0, 0.01, 80)
    t = otsu_threshold(p)
    assert 0.42 < t < 0.62
    yes = _accept(np.array([[0.7, 0.65, 0.3]]), t, max_positives=1)
    assert yes.tolist() == [[True, False, False]]
