"""DEXML under torchrun: 2 CPU processes (gloo) train the same model as 1 process.

Both regimes shard the step's labels (all labels, or the hard-negative pool) over the ranks,
all-gather the query embeddings, all-reduce the softmax sums and sum the gradients (DEXML
Appendix B.5), and every rank draws the same pool and the same one positive per row; so with
dropout off the two-process run must end with the label embeddings of the one-process run.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from xmcbench.run import load_record, run_recipe


@pytest.mark.slow
@pytest.mark.parametrize(
    "regime,loss,pool_chunk",
    [
        ("all_negatives", "decoupled_softmax", "null"),
        ("hard_negatives", "decoupled_softmax", "null"),
        ("hard_negatives", "decoupled_softmax", 7),  # each rank's pool share through a gradient cache
        ("all_negatives", "soft_top_k", "null"),
        ("hard_negatives", "soft_top_k", "null"),
    ],
)
def test_two_process_run_matches_one_process(tiny_recipe, tmp_path, regime, loss, pool_chunk):
    # 300 queries in batches of 30: no ragged last batch, which several ranks would drop.
    # SoftTop-k runs the released variant (≤ k sampled positives, divided by the number sampled).
    recipe = tiny_recipe(
        f"{{name: dexml, regime: {regime}, loss: {loss}, dropout: 0.0, gradcache_chunk: 16, pool_chunk: {pool_chunk}, "
        "temperature: 0.1, batching: random, one_positive: true, hard_negatives: 2, shortlist_k: 10, "
        "hard_negative_start_epoch: 0, soft_top_k_variant: released, positives_per_query: 2}",
        epochs=1,
        batch_size=30,
    )
    path = sorted(tmp_path.glob("recipe-*.yaml"))[-1]
    single = run_recipe(recipe, runs_dir=tmp_path / "one", db=tmp_path / "one.duckdb", progress=False)

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--nnodes",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:0",
        "-m",
        "xmcbench",
        "run",
        str(path),
        "--quiet",
        "--runs-dir",
        str(tmp_path / "two"),
        "--db",
        str(tmp_path / "two.duckdb"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    (run_dir,) = (tmp_path / "two").iterdir()  # one run, named by rank 0
    record = load_record(run_dir)
    assert record["status"] == "finished" and record["compute"]["world_size"] == 2
    assert record["accounting"]["steps"] == single.record["accounting"]["steps"] == 10
    assert record["accounting"]["pool_size_mean"] == single.record["accounting"]["pool_size_mean"]
    one = np.load(single.run_dir / "checkpoints" / "model" / "label_embeddings.npy")
    two = np.load(run_dir / "checkpoints" / "model" / "label_embeddings.npy")
    np.testing.assert_allclose(two, one, atol=2e-4)
    assert record["scores"][0]["value"] == pytest.approx(single.record["scores"][0]["value"], abs=1e-6)
