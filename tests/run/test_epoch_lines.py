"""Every trained method's epoch lines carry the facts the issue lists: loss, learning rate, queries/s,
label-pool size, elapsed and remaining time, in the log (stderr) and in ``train_log.jsonl``.

Real (tiny) training runs on the tiny BERT of tests/conftest.py; the last test runs ``xmcbench run``
as a separate process with stdout and stderr sent to files, as a long run under nohup or a
scheduler would, and reads the epoch lines there.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import pytest

from xmcbench.run import load_recipe, run_recipe

FACTS = ("loss", "lr", "queries_per_s", "pool_size", "elapsed_s", "remaining_s")
LINE = re.compile(
    r"epoch (\d+)/(\d+) \| step \d+ \| loss [0-9.]+ \| lr [0-9.e+-]+ \| [0-9,.]+ queries/s \| label pool [0-9,]+ "
    r"\| elapsed \S+ \| remaining ~\S+"
)

METHODS = {
    "dexml-hard-negatives": "{name: dexml, regime: hard_negatives, hard_negatives: 2, shortlist_k: 10, "
    "refresh_every: 1, hard_negative_start_epoch: 0}",
    "dexml-all-negatives": "{name: dexml, regime: all_negatives}",
    "unidec": "{name: unidec, dim: 16, positives_per_query: 2, hard_negatives: 2, refresh_every: 1, "
    "cluster_start_epoch: 1, cluster_size: 8, temperature: 0.1}",
    "prime": "{name: prime, free_vectors: 16, prototype_ffn: 64, cluster_start_epoch: 1, cluster_size: 8, "
    "recluster_every: 1}",
    "maclr": "{name: maclr, stage1_steps: 4, k0: 4, t_k: 1, t_update: 1, label_negatives: 8, stage2_steps: 3, "
    "encode_batch_size: 64}",
    # one cycle of two epochs: more cycles may stop early, before the bound the lines count towards
    "lmtx": "{name: lmtx, judge: {backend: fake}, shortlist_j: 5, dev_docs: 40, train_docs: 150, max_cycles: 1, "
    "epochs_per_cycle: 2}",
}


def _recipe_text(encoder: str, method: str, epochs: int = 2, extra: str = "") -> str:
    return (
        "name: tiny\n"
        "dataset: {name: synth-tiny, synthetic: {labels: 60, train: 300, test: 60, seed: 1}}\n"
        f"method: {method}\n"
        f"encoder: {{name: '{encoder}', max_length: 16}}\n"
        f"training: {{epochs: {epochs}, batch_size: 32, lr: 0.001, warmup_ratio: 0.0}}\n"
        "evaluation: {k: [1, 5], top_k: 10, bootstrap: 100}\n"
        "hardware: {devices: cpu}\n" + extra
    )


@pytest.mark.parametrize("name", list(METHODS))
def test_epoch_lines_carry_every_fact(name, tmp_path, tiny_encoder_dir, caplog):
    extra = "supervision: {mode: zero_shot}\n" if name in ("maclr", "lmtx") else ""
    path = tmp_path / "recipe.yaml"
    path.write_text(_recipe_text(tiny_encoder_dir, METHODS[name], extra=extra))
    with caplog.at_level(logging.INFO, logger="xmcbench"):
        result = run_recipe(load_recipe(path), runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    assert result.record["status"] == "finished"
    entries = [json.loads(line) for line in (result.run_dir / "train_log.jsonl").read_text().splitlines()]
    assert entries, "no epoch was logged"
    for entry in entries:
        missing = [key for key in FACTS if entry.get(key) is None]
        assert not missing, f"{name}: epoch {entry['epoch']} lacks {missing}: {entry}"
        assert entry["pool_size"] > 0 and entry["queries_per_s"] > 0 and entry["elapsed_s"] >= 0
    assert [e["epoch"] for e in entries] == list(range(1, len(entries) + 1))
    assert entries[-1]["epoch"] == entries[-1]["epochs"] and entries[-1]["remaining_s"] == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "xmcbench.train"]
    assert len(lines) == len(entries) and all(LINE.fullmatch(line) for line in lines), lines
    if name == "dexml-all-negatives":
        assert {e["pool_size"] for e in entries} == {60.0}  # every label is in every step's loss
    if name == "maclr":  # steps, not epochs: lines across both stages, each naming its stage
        assert [e["stage"] for e in entries][0] == "stage1" and entries[-1]["stage"] == "stage2"
        assert entries[-1]["step"] == 4 + 3
    if name == "lmtx":
        assert [e["cycle"] for e in entries] == [1, 1]


def test_a_run_piped_to_files_logs_its_epochs_to_stderr(tmp_path, tiny_encoder_dir):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(_recipe_text(tiny_encoder_dir, METHODS["dexml-hard-negatives"], epochs=3))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "80"}
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        done = subprocess.run(
            [sys.executable, "-m", "xmcbench", "run", str(recipe), "--db", str(tmp_path / "db.duckdb")],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=600,
        )
    stdout, stderr = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    assert done.returncode == 0, stderr[-3000:]
    epochs = [m.group(1, 2) for m in LINE.finditer(stderr)]
    assert epochs == [("1", "3"), ("2", "3"), ("3", "3")], stderr[-3000:]
    for phase in ("prepare", "train", "predict", "evaluate"):
        assert f"phase {phase}: done" in stderr
    assert "\r" not in stderr and "━" not in stderr  # no progress-bar redraws in a log file
    assert "epoch" not in stdout and "P@1" in stdout  # stdout holds the results only
    run_id = re.search(r"run (\S+-synth-tiny-\S+):", stderr).group(1)
    assert run_id in stdout  # the id whole on one line, to copy into `runs show`
