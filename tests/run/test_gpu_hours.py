"""GPU-hours of a run: the model's training whichever run computed a shared stage, never a wait."""

from __future__ import annotations

import pytest

from xmcbench.run.provenance import gpu_hours


def test_train_and_predict_time_on_every_billed_gpu():
    assert gpu_hours({"train": 3600.0, "predict": 1800.0, "evaluate": 99.0}, {}, 2) == (3.0, 0.0)
    assert gpu_hours({"train": 3600.0}, {}, 0) == (0.0, 0.0)  # a CPU run bills no GPU


def test_a_wait_on_another_run_is_no_training_and_a_reused_stage_is():
    walls = {"train": 7200.0, "predict": 0.0}
    total, reused = gpu_hours(walls, {"waited_s": 3600.0, "reused_wall_s": 5400.0}, 1)
    assert total == pytest.approx(1.0 + 1.5) and reused == pytest.approx(1.5)
    # the run that computed the stage itself, without waiting, reports the same model cost
    assert gpu_hours({"train": 3600.0 + 5400.0}, {}, 1)[0] == pytest.approx(total)
    assert gpu_hours({"train": 10.0}, {"waited_s": 60.0}, 1)[0] == 0.0  # clock noise never goes negative
