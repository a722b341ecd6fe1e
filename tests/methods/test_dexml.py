import numpy as np
import pytest
import torch

from xmcbench.losses import decoupled_softmax_loss
from xmcbench.methods.dexml import DexmlMethod
from xmcbench.run import recipe_from_dict, run_recipe


def run(recipe, tmp_path, **kw):
    return run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False, **kw)


@pytest.mark.parametrize("regime", ["hard_negatives", "all_negatives"])
def test_dexml_trains_and_records_pool_accounting(tiny_recipe, tmp_path, regime):
    recipe = tiny_recipe(
        f"{{name: dexml, regime: {regime}, hard_negatives: 2, shortlist_k: 10, refresh_every: 1, "
        f"hard_negative_start_epoch: 0, cluster_start_epoch: 1, cluster_size: 8, gradcache_chunk: 16, "
        f"temperature: 0.1}}"
    )
    result = run(recipe, tmp_path)
    acc = result.record["accounting"]
    assert result.record["status"] == "finished"
    assert acc["batch_size"] == 32 and acc["steps"] == 2 * 10  # 300 labelled queries / 32 -> 10 steps
    if regime == "all_negatives":
        assert acc["pool_size_mean"] == acc["pool_size_max"] == 60  # every label, every step
    else:
        assert 32 <= acc["pool_size_mean"] <= 32 * 3 and acc["hard_negatives_per_query"] == 2.0
    assert result.record["model"]["params_trainable"] > 0
    assert acc["grad_clip"] is None and acc["grad_norm_preclip_mean"] > 0  # no clipping; the norm is recorded
    assert (result.run_dir / "checkpoints" / "train" / "latest").exists()


def test_dexml_beats_its_starting_point(tiny_recipe, tmp_path):
    """Training must move the model: a trained tiny encoder beats the same encoder untrained."""
    untrained = run(tiny_recipe("{name: dexml, regime: hard_negatives}", epochs=0), tmp_path / "a")
    trained = run(
        tiny_recipe(
            "{name: dexml, regime: hard_negatives, refresh_every: 1, hard_negative_start_epoch: 0, temperature: 0.1}",
            epochs=6,
        ),
        tmp_path / "b",
    )
    assert trained.scores["P@1"] > untrained.scores["P@1"] + 10


def test_all_negatives_step_equals_plain_decoupled_softmax(tiny_recipe, tmp_path):
    """The gradient-cached all-labels step gives the loss and gradients of plain backpropagation."""
    from xmcbench.methods import dual_encoder as de
    from xmcbench.methods.base import RunContext
    from xmcbench.run.phases import build_train_task, ensure_dataset

    recipe = tiny_recipe("{name: dexml, regime: all_negatives, gradcache_chunk: 7, dropout: 0.0, temperature: 0.1}")
    ds = ensure_dataset(recipe, progress=False)
    task = build_train_task(recipe, ds, np.ones(ds.n_labels))
    ctx = RunContext(run_dir=tmp_path, progress=False)
    method = DexmlMethod(recipe.method_config(), recipe)
    method.encoder = de.build_encoder(recipe)
    tokens = de.tokenise(method.encoder, task, recipe, progress=False)
    rows = de.labelled_rows(task.train_labels)[:16]

    method.encoder.eval()  # BERT's own dropout would draw differently in the two computations
    loss = method._all_negatives_step(rows, task.train_labels, tokens, ctx, world=1, rank=0, epoch=0, step=0)
    cached_grads = [None if p.grad is None else p.grad.clone() for p in method.encoder.parameters()]
    assert sum(g is not None for g in cached_grads) > 10
    method.encoder.zero_grad()

    q = de.embed(method.encoder, tokens.queries, rows, "cpu")
    z = de.embed(method.encoder, tokens.labels, np.arange(ds.n_labels), "cpu")
    plain = decoupled_softmax_loss((q @ z.T) / 0.1, de.target_mask(task.train_labels, rows))
    plain.backward()
    assert loss.item() == pytest.approx(plain.item(), abs=1e-5)
    for got, p in zip(cached_grads, method.encoder.parameters()):
        if got is None:
            assert p.grad is None  # e.g. BERT's pooler, unused by mean pooling
        else:
            torch.testing.assert_close(got, p.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("loss", "grouped"), [("decoupled_softmax", False), ("soft_top_k", False), ("decoupled_softmax", True)]
)
def test_gradient_cached_pool_gives_the_gradients_of_one_graph(tiny_recipe, tmp_path, monkeypatch, loss, grouped):
    """Hard negatives with ``pool_chunk``: the pool embedded in chunks through a gradient cache gives
    the loss and gradients of the pool embedded with one graph (dropout replayed, so left on); also
    when the chunks and the pool are encoded in length groups (the test BERT priced like MiniLM)."""
    from xmcbench.methods import dual_encoder as de
    from xmcbench.train.length_groups import GROUP_COST

    splits = []
    if grouped:
        monkeypatch.setattr(de, "_group_cost", lambda encoder: GROUP_COST / 8)
        real = de.length_groups
        monkeypatch.setattr(de, "length_groups", lambda *a, **k: splits.append(len(g := real(*a, **k))) or g)
    spec = "name: dexml, regime: hard_negatives, hard_negatives: 3, shortlist_k: 10, hard_negative_start_epoch: 0"
    results = []
    for chunk in ("null", 32 if grouped else 5):  # a chunk of 32 rows can split in two groups of 16
        recipe = tiny_recipe(f"{{{spec}, loss: {loss}, temperature: 0.1, pool_chunk: {chunk}}}")
        method, task, tokens, ctx, rows = _method_state(recipe, tmp_path / str(chunk))
        shortlist = np.random.default_rng(0).integers(0, task.n_labels, size=(rows.size, 10))
        torch.manual_seed(0)  # the same dropout draws in both runs (the cache replays them)
        loss_value, pool = method._hard_negative_step(
            rows[:24], np.arange(24), task.train_labels, shortlist, tokens, ctx, epoch=0, step=0, world=1, rank=0
        )
        grads = [None if p.grad is None else p.grad.clone() for p in method.encoder.parameters()]
        results.append((loss_value, pool.size, grads))
    (plain, size, plain_grads), (cached, _, cached_grads) = results
    assert size > (32 if grouped else 5 * 3)  # several chunks
    assert not grouped or max(splits) > 1  # the pool and the chunks were split
    assert cached.item() == pytest.approx(plain.item(), abs=1e-6)
    assert sum(g is not None for g in plain_grads) > 10
    for got, want in zip(cached_grads, plain_grads):
        if want is None:
            assert got is None
        else:
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_interrupted_training_resumes_from_the_epoch_checkpoint(tiny_recipe, tmp_path, interrupt_then_resume):
    recipe = tiny_recipe(
        "{name: dexml, regime: hard_negatives, refresh_every: 1, hard_negative_start_epoch: 1}", epochs=3
    )
    clean = run(recipe, tmp_path / "clean")
    result, _, steps = interrupt_then_resume(DexmlMethod, "_hard_negative_step", recipe, tmp_path)
    assert steps == 2 * 10  # only epochs 2 and 3 ran again
    assert result.record["accounting"]["steps"] == 3 * 10  # accounting covers the whole training
    for key in ("grad_norm_preclip_mean", "grad_norm_preclip_max"):  # every step's norm, not the last attempt's
        assert result.record["accounting"][key] == pytest.approx(clean.record["accounting"][key], rel=1e-6)
    assert result.scores["P@1"] == pytest.approx(clean.scores["P@1"], abs=1e-6)


def test_validation_split_never_touches_test(tiny_recipe, tmp_path):
    recipe = tiny_recipe("{name: dexml, regime: hard_negatives}", epochs=1, extra="")
    data = recipe.model_dump()
    data["training"]["validation_fraction"] = 0.2
    data["method"] = {"name": "dexml"}
    recipe = recipe_from_dict(data)
    result = run(recipe, tmp_path)
    assert result.record["accounting"]["validation_p1"] is not None


def _method_state(recipe, tmp_path):
    from xmcbench.methods import dual_encoder as de
    from xmcbench.methods.base import RunContext
    from xmcbench.run.phases import build_train_task, ensure_dataset

    ds = ensure_dataset(recipe, progress=False)
    task = build_train_task(recipe, ds, np.ones(ds.n_labels))
    method = DexmlMethod(recipe.method_config(), recipe)
    method.encoder = de.build_encoder(recipe)
    tokens = de.tokenise(method.encoder, task, recipe, progress=False)
    return method, task, tokens, RunContext(run_dir=tmp_path, progress=False), de.labelled_rows(task.train_labels)


def test_one_positive_counts_exactly_the_positive_placed_in_the_pool(tiny_recipe, tmp_path, monkeypatch):
    """Hard-negative regime: every row has exactly one counted positive, and it is a pool column."""
    recipe = tiny_recipe(
        "{name: dexml, regime: hard_negatives, one_positive: true, hard_negatives: 2, "
        "shortlist_k: 10, hard_negative_start_epoch: 0}"
    )
    method, task, tokens, ctx, rows = _method_state(recipe, tmp_path)
    labels = task.train_labels
    assert np.diff(labels[rows].indptr).max() > 1  # several positives per query: the draw matters
    shortlist = np.random.default_rng(0).integers(0, task.n_labels, size=(rows.size, 10))
    seen = {}
    real = DexmlMethod._sharded_loss  # the decoupled softmax's blockwise loss, in one process too

    def spy(self, q, z, targets, counted):
        assert targets.layout == counted.layout == torch.sparse_coo  # no (B, P) mask built
        seen.update(targets=targets.to_dense(), counted=counted.to_dense())
        return real(self, q, z, targets, counted)

    monkeypatch.setattr(DexmlMethod, "_sharded_loss", spy)
    for step in range(3):
        batch = np.arange(32 * step, 32 * (step + 1))
        _, pool = method._hard_negative_step(
            rows[batch], batch, labels, shortlist, tokens, ctx, epoch=0, step=step, world=1, rank=0
        )
        counted, targets = seen["counted"], seen["targets"]
        assert counted.shape == targets.shape == (32, pool.size)
        assert counted.sum(dim=1).tolist() == [1] * 32  # one counted positive per row, in the pool
        assert not (counted & ~targets).any()  # and it is a positive of that row
        # it is the positive sampled into the pool for that row
        cols = counted.int().argmax(dim=1).numpy()
        assert (cols == pool.positive_slots[:, 0]).all()


def test_hard_negatives_start_at_the_configured_epoch(tiny_recipe, tmp_path):
    """Before hard_negative_start_epoch the pool holds only the batch's positives (in-batch negatives)."""
    recipe = tiny_recipe(
        "{name: dexml, regime: hard_negatives, hard_negatives: 2, shortlist_k: 10, hard_negative_start_epoch: 5}"
    )
    method, task, tokens, ctx, rows = _method_state(recipe, tmp_path)
    shortlist = np.random.default_rng(0).integers(0, task.n_labels, size=(rows.size, 10))
    batch = np.arange(32)
    _, early = method._hard_negative_step(
        rows[batch], batch, task.train_labels, shortlist, tokens, ctx, epoch=4, step=0, world=1, rank=0
    )
    _, late = method._hard_negative_step(
        rows[batch], batch, task.train_labels, shortlist, tokens, ctx, epoch=5, step=0, world=1, rank=0
    )
    assert early.hard_negatives.sum() == 0 and late.hard_negatives.tolist() == [2] * 32


def test_soft_top_k_released_variant_trains(tiny_recipe, tmp_path):
    recipe = tiny_recipe(
        "{name: dexml, regime: all_negatives, loss: soft_top_k, soft_top_k: 5, "
        "soft_top_k_variant: released, gradcache_chunk: 16, batching: random}",
        epochs=1,
    )
    result = run(recipe, tmp_path)
    assert result.record["status"] == "finished"
    assert result.record["accounting"]["soft_top_k_variant"] == "released"
