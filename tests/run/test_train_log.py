"""``RunContext.log_epoch``: one log line per epoch on ``xmcbench.train`` and one JSON object in train_log.jsonl."""

from __future__ import annotations

import json
import logging

from xmcbench.methods.base import TRAIN_LOG, RunContext


class _Scheduler:
    def get_last_lr(self):
        return [2e-4]


class _Joint:
    parts = [_Scheduler()]


def test_log_epoch_logs_and_appends(tmp_path, caplog):
    ctx = RunContext(run_dir=tmp_path)
    ctx.start_clock()
    for step in range(4):
        ctx.record_pool(100 + step)
    with caplog.at_level(logging.INFO, logger="xmcbench.train"):
        first = ctx.log_epoch(1, 3, step=4, loss=2.5, scheduler=_Joint(), queries=256)
        ctx.record_pool(200)
        second = ctx.log_epoch(2, 3, step=5, loss=float("nan"), scheduler=_Scheduler(), queries=256, val_p1=40.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "xmcbench.train"]
    assert len(lines) == 2 and lines[0].startswith("epoch 1/3 | step 4 | loss 2.5000 | lr 2.00e-04")
    assert "queries/s" in lines[0] and "label pool 102" in lines[0] and "remaining ~" in lines[0]
    assert first["pool_size"] == 101.5 and second["pool_size"] == 200.0 and second["loss"] is None
    entries = [json.loads(line) for line in (tmp_path / TRAIN_LOG).read_text().splitlines()]
    assert [e["epoch"] for e in entries] == [1, 2] and entries[1]["val_p1"] == 40.0
    assert set(entries[0]) >= {
        "epoch",
        "epochs",
        "step",
        "loss",
        "lr",
        "queries_per_s",
        "pool_size",
        "elapsed_s",
        "remaining_s",
        "at",
    }


def test_log_epoch_on_other_ranks_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    RunContext(run_dir=tmp_path).log_epoch(1, 1)
    assert not (tmp_path / TRAIN_LOG).exists()
