"""Recipe values the data cannot honour: each is said once (which key, asked, used, why) and the
record holds what ran, the batch size above all (never the recipe's 100,000 for 40 queries)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy import sparse

from xmcbench.run import run_recipe

BIG = 100_000  # a batch no tiny dataset fills


def run(recipe, tmp_path):
    return run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)


def said(caplog, start: str) -> list[str]:
    """The warnings whose text starts with ``start``."""
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.getMessage().startswith(start)]


def said_once(caplog, start: str) -> str:
    lines = said(caplog, start)
    assert len(lines) == 1, f"{start!r} was said {len(lines)} times: {lines}"
    return lines[0]


def small(tiny_recipe, method: str, *, epochs: int = 2, extra: str = "", batch_size: int = BIG):
    return tiny_recipe(method, epochs=epochs, labels=20, train=40, test=10, batch_size=batch_size, extra=extra)


# -- the pieces ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("batching", "n", "batch", "largest"),
    [
        ("random", 400, BIG, 400),
        ("clustered", 400, BIG, 400),
        ("one_cluster_per_batch", 400, BIG, 400),
        ("random", 400, 64, 64),
        ("one_cluster_per_batch", 300, 32, 19),  # 16 clusters (a power of two) of 18-19
        ("one_cluster_per_batch", 294_805, 576, 576),  # UniDEC Table 2: 512 clusters of 575-576
    ],
)
def test_the_sampler_knows_the_largest_batch_it_yields(batching, n, batch, largest):
    from xmcbench.methods.dexml import DexmlConfig
    from xmcbench.methods.dual_encoder import make_sampler

    sampler, _ = make_sampler(DexmlConfig(batching=batching), n, batch, seed=0)
    assert sampler.max_batch_size == largest
    if n < 1000:
        sampler.set_epoch(0)
        assert max(len(b) for b in sampler) == largest


def test_one_batch_per_cluster_that_cannot_keep_the_batch_says_so(caplog):
    """Batch 1 over 5 queries: 2-means makes at most 4 clusters (a power of two, one query each at
    least), so some batches hold 2 queries."""
    from xmcbench.methods.dual_encoder import make_sampler
    from xmcbench.methods.unidec import UnidecConfig

    with caplog.at_level(logging.WARNING):
        sampler, _ = make_sampler(UnidecConfig(), 5, 1, seed=0)
    assert sampler.max_batch_size == 2
    line = said_once(caplog, "training.batch_size 1 cannot cut the 5 training queries")
    assert line.endswith("the run uses batches of up to 2 (5 queries in 4 clusters)")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        make_sampler(UnidecConfig(), 8, 1, seed=0)  # 8 clusters of 1: the batch holds
    assert caplog.text == ""


def test_clusters_that_outgrow_the_queries_are_said_once_before_training(caplog):
    from xmcbench.methods.dexml import DexmlConfig
    from xmcbench.methods.dual_encoder import make_sampler

    grows = DexmlConfig(batching="clustered", cluster_size=8, cluster_start_epoch=0)
    with caplog.at_level(logging.WARNING):
        make_sampler(grows, 20, 4, seed=0, epochs=30)  # 8 -> 16 at epoch 10 -> 32 at epoch 20
    line = said_once(caplog, "method.cluster_size 8")
    assert line == (
        "method.cluster_size 8 (grown to 32 from epoch 21 by NGAME's curriculum) is more than the 20 training "
        "queries with labels: the run uses one cluster of all 20 from epoch 21"
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        make_sampler(grows, 20, 4, seed=0, epochs=20)  # ends before the clusters outgrow the queries
        make_sampler(DexmlConfig(batching="clustered", cluster_size=8, cluster_start_epoch=3), 5, 4, seed=0, epochs=2)
    assert caplog.text == ""  # nor is a run that ends before clustering starts
    with caplog.at_level(logging.WARNING):
        make_sampler(DexmlConfig(batching="clustered", cluster_size=8, cluster_start_epoch=0), 5, 4, seed=0, epochs=2)
    assert said_once(caplog, "method.cluster_size 8 is more than the 5 training queries with labels")


def test_shortlist_and_hard_negative_checks(caplog):
    from xmcbench.methods import dual_encoder as de

    labels = sparse.csr_matrix(np.array([[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=np.float32))
    with caplog.at_level(logging.WARNING):
        assert de.clip_shortlist("method.shortlist_k", 100, 6) == 6
        assert de.clip_shortlist("method.shortlist_k", 6, 6) == 6
        de.check_hard_negatives("method.hard_negatives", 3, labels)  # 6 - 3 positives = 3 left: fits
    assert said_once(caplog, "method.shortlist_k") == "method.shortlist_k 100 is more than the 6 labels: the run uses 6"
    assert not said(caplog, "method.hard_negatives")
    with caplog.at_level(logging.WARNING):
        de.check_hard_negatives("method.hard_negatives", 4, labels)
    assert said_once(caplog, "method.hard_negatives") == (
        "method.hard_negatives 4 is more than the 3 labels left after the positives of some training queries: "
        "the run uses as few as 3 for those queries"
    )


def test_a_per_step_warning_is_said_once_per_seen_set(caplog):
    from xmcbench.methods.dual_encoder import warn_clipped

    seen: set[str] = set()
    with caplog.at_level(logging.WARNING):
        for step in range(5):
            warn_clipped("method.max_pool_size", 10, step, "is less than the positives", seen=seen)
    assert said_once(caplog, "method.max_pool_size") == (
        "method.max_pool_size 10 is less than the positives: the run uses 0"
    )


def test_k_doubling_past_the_instances_is_found_before_training():
    from xmcbench.sampling.multiscale import MultiScaleSchedule

    s = MultiScaleSchedule(k0=4, t_k=1, t_update=1, total_steps=20, n_instances=40)
    assert s.first_capped_refresh() == 4  # 4 * 2^4 = 64 > 40
    assert s.requested_clusters(4) == 64 and s.n_clusters(4) == 40
    paper = MultiScaleSchedule(k0=2048, t_k=10_000, t_update=5_000, total_steps=100_000, n_instances=10**6)
    assert paper.first_capped_refresh() is None


# -- the methods, end to end ---------------------------------------------------------------------
def test_dexml_records_the_batch_that_ran_and_says_each_clip_once(tiny_recipe, tmp_path, caplog):
    recipe = small(
        tiny_recipe,
        "{name: dexml, regime: hard_negatives, hard_negatives: 30, shortlist_k: 1000, refresh_every: 1, "
        "hard_negative_start_epoch: 0, batching: clustered, cluster_size: 64, cluster_start_epoch: 0}",
        epochs=3,
    )
    with caplog.at_level(logging.WARNING):
        result = run(recipe, tmp_path)
    acc = result.record["accounting"]
    n = acc["supervision"]["train_queries_with_labels"]
    assert result.record["status"] == "finished" and 0 < n <= 40
    assert acc["batch_size"] == n and acc["steps"] == 3  # one step an epoch, every query in it
    said_once(caplog, f"training.batch_size {BIG:,} is more than the {n} training queries")
    assert (
        said_once(caplog, "method.shortlist_k 1,000")
        == "method.shortlist_k 1,000 is more than the 20 labels: the run uses 20"
    )
    assert "labels left after the positives" in said_once(caplog, "method.hard_negatives 30")
    assert said_once(caplog, "method.cluster_size 64").endswith(f"the run uses one cluster of all {n} from epoch 1")
    assert acc["hard_negatives_per_query"] < 30  # what was drawn, not what was asked


def test_unidec_records_the_batch_that_ran_and_says_each_clip_once(tiny_recipe, tmp_path, caplog):
    recipe = small(
        tiny_recipe,
        "{name: unidec, dim: 16, hard_negatives: 30, refresh_every: 1, max_pool_size: 1, temperature: 0.1}",
        epochs=3,
    )
    with caplog.at_level(logging.WARNING):
        result = run(recipe, tmp_path)
    acc = result.record["accounting"]
    n = acc["supervision"]["train_queries_with_labels"]
    assert result.record["status"] == "finished"
    assert acc["batch_size"] == n and acc["steps"] == 3 and acc["batches_per_epoch"] == 1
    said_once(caplog, f"training.batch_size {BIG:,} is more than the {n} training queries")
    assert said_once(caplog, "method.shortlist_k") == (
        "method.shortlist_k (unset: η·τ = 30·1 = 30) is more than the 20 labels: the run uses 20"
    )
    assert acc["shortlist_size"] == 20  # what was built, not η·τ
    said_once(caplog, "method.hard_negatives 30 is more than the")
    pool = said_once(caplog, "method.max_pool_size 1 is less than the")  # three steps, said at the first
    assert "at step 1)" in pool
    assert acc["pool_size_max"] > 1


def test_prime_records_the_batch_that_ran_and_says_each_clip_once(tiny_recipe, tmp_path, caplog):
    recipe = small(
        tiny_recipe,
        "{name: prime, free_vectors: 64, triplet_reduction: softmax, top_negatives: 1000, positive_sampling: uniform, "
        "batching: random}",
    )
    with caplog.at_level(logging.WARNING):
        result = run(recipe, tmp_path)
    acc = result.record["accounting"]
    n = acc["supervision"]["train_queries_with_labels"]
    assert result.record["status"] == "finished"
    assert acc["batch_size"] == n and acc["steps"] == 2
    said_once(caplog, f"training.batch_size {BIG:,} is more than the {n} training queries")
    assert said_once(caplog, "method.free_vectors 64").endswith("the run uses 16")  # 2^4 <= 20 labels
    assert acc["free_vectors"] == 16
    said_once(caplog, "method.top_negatives 1,000 is at least the")


def test_maclr_records_each_stage_batch_and_says_each_clip_once(tiny_recipe, tmp_path, caplog):
    recipe = small(
        tiny_recipe,
        "{name: maclr, stage1_steps: 10, k0: 4, t_k: 1, t_update: 1, label_negatives: 100, stage2_steps: 2, "
        "pseudo_top_k: 50, projection_dim: 8, finetune_steps: 2, finetune_lr: 0.001, encode_batch_size: 64}",
        extra="supervision: {mode: few_shot, label_fraction: 0.5}\n",
    )
    with caplog.at_level(logging.WARNING):
        result = run(recipe, tmp_path)
    acc = result.record["accounting"]
    assert result.record["status"] == "finished"
    pairs = acc["ict_pairs"]
    by_stage = acc["batch_size_by_stage"]
    assert by_stage == {"stage1": pairs, "stage2": acc["stage2_pseudo_pairs"], "finetune": acc["finetune_pairs"]}
    assert acc["batch_size"] == max(by_stage.values()) < BIG
    for stage, count in by_stage.items():
        said_once(caplog, f"training.batch_size {BIG:,} is more than the {count:,} ")
        assert any(line.endswith(f"of MACLR {stage}: each step takes all of them") for line in said(caplog, "training"))
    assert said_once(caplog, "method.label_negatives 100") == (
        "method.label_negatives 100 is more than the 20 labels: the run uses 20"
    )
    assert acc["label_negatives"] == 20
    said_once(caplog, "method.pseudo_top_k 50 is more than the 20 labels")
    messages = [r.getMessage() for r in caplog.records]
    first = next(i for i, m in enumerate(messages) if "method.pseudo_top_k" in m)
    assert first < next(i for i, m in enumerate(messages) if "method.label_negatives" in m)  # before Stage I
    k = said_once(caplog, "method.k0 4 doubles to")
    assert k.endswith(f"the run uses {pairs} clusters (every instance its own) from then on")


def test_lmtx_records_the_batch_that_ran_and_says_each_clip_once(tiny_recipe, tmp_path, caplog):
    recipe = small(
        tiny_recipe,
        "{name: lmtx, judge: {backend: fake}, shortlist_j: 50, dev_docs: 800, train_docs: 1000, "
        "max_cycles: 2, epochs_per_cycle: 1}",
        extra="supervision: {mode: zero_shot}\n",
    )
    with caplog.at_level(logging.WARNING):
        result = run(recipe, tmp_path)
    acc = result.record["accounting"]
    assert result.record["status"] == "finished"
    assert acc["dev_docs"] == 20 and acc["train_docs"] == 20 and acc["shortlist_j"] == 20
    assert said_once(caplog, "method.dev_docs 800") == (
        "method.dev_docs 800 is more than half the 40 training documents: the run uses 20"
    )
    said_once(caplog, "method.train_docs 1,000 is more than the 20 training documents left after the dev set")
    said_once(caplog, "method.shortlist_j 50 is more than the 20 labels")
    trained = [c for c in acc["cycles"] if "pseudo_positive_docs" in c]
    assert trained, "the fake judge accepted nothing: the batch is never used"
    assert acc["batch_size"] == max(c["pseudo_positive_docs"] for c in trained) <= 20
    said_once(caplog, f"training.batch_size {BIG:,} is more than the ")


def test_dexml_soft_top_k_that_selects_every_label_is_refused_and_small_pools_are_said(tiny_recipe, tmp_path, caplog):
    """SoftTop-k of k >= the labels in the loss is 0 with no gradient: a run that trained nothing and
    passed for one that trained (review 2026-11-28). All negatives: refused; a pool that small: said."""
    from xmcbench.errors import XmcbenchError

    every = small(tiny_recipe, "{name: dexml, regime: all_negatives, loss: soft_top_k, soft_top_k: 20}")
    with pytest.raises(XmcbenchError, match="method.soft_top_k 20 is not below the 20 labels"):
        run(every, tmp_path / "every")
    pools = small(
        tiny_recipe,
        "{name: dexml, regime: hard_negatives, loss: soft_top_k, soft_top_k: 10, hard_negatives: 0}",
        batch_size=4,
    )
    with caplog.at_level(logging.WARNING):
        assert run(pools, tmp_path / "pools").record["status"] == "finished"
    assert "no more than method.soft_top_k = 10: SoftTop-k selects them all" in said_once(caplog, "epoch ")
    with pytest.raises(XmcbenchError, match=r"shortlist_k \(1\) must be at least hard_negatives \(5\)"):
        small(tiny_recipe, "{name: dexml, shortlist_k: 1, hard_negatives: 5}").method_config()


def test_a_validation_split_that_leaves_nothing_names_its_key(tiny_recipe, tmp_path):
    from xmcbench.errors import XmcbenchError

    recipe = small(tiny_recipe, "{name: dexml}", extra="")
    recipe = recipe.model_copy(update={"training": recipe.training.model_copy(update={"validation_fraction": 0.999})})
    with pytest.raises(XmcbenchError, match="training.validation_fraction 0.999 of the 40 training queries"):
        run(recipe, tmp_path)
