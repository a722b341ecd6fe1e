import json
import math

import numpy as np
import pytest
import torch

from xmcbench.errors import XmcbenchError
from xmcbench.methods import dual_encoder as de
from xmcbench.methods.base import RunContext
from xmcbench.methods.unidec import UnidecConfig, UnidecMethod
from xmcbench.run import recipe_from_dict, run_recipe
from xmcbench.run.phases import build_train_task, ensure_dataset

FAST = (
    "{name: unidec, dim: 16, positives_per_query: 2, hard_negatives: 2, refresh_every: 1, "
    "cluster_start_epoch: 1, cluster_size: 8, temperature: 0.1, classifier_lr: 0.01}"
)


def run(recipe, tmp_path, **kw):
    return run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False, **kw)


def write_recipe(folder, encoder_dir, method_yaml: str, epochs: int):
    """The conftest's tiny recipe (same dataset and settings), for module-scoped fixtures."""
    from xmcbench.run import load_recipe

    path = folder / "recipe.yaml"
    path.write_text(
        "name: tiny\n"
        "dataset: {name: synth-tiny, synthetic: {labels: 60, train: 300, test: 60, seed: 1}}\n"
        f"method: {method_yaml}\n"
        f"encoder: {{name: '{encoder_dir}', max_length: 16}}\n"
        f"training: {{epochs: {epochs}, batch_size: 32, lr: 0.001, warmup_ratio: 0.0}}\n"
        "evaluation: {k: [1, 5], top_k: 10, bootstrap: 100}\n"
        "hardware: {devices: cpu}\n"
    )
    return load_recipe(path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_encoder_dir):
    """One uninterrupted 2-epoch run, shared by the tests that only read it."""
    folder = tmp_path_factory.mktemp("unidec-run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XMCBENCH_HOME", str(folder / "home"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        recipe = write_recipe(folder, tiny_encoder_dir, FAST, epochs=2)
        result = run(recipe, folder)
        yield recipe, result


def setup_method_state(recipe, tmp_path):
    """A UniDEC method with its model and token caches built, as ``fit`` builds them."""
    ds = ensure_dataset(recipe, progress=False)
    task = build_train_task(recipe, ds, np.ones(ds.n_labels))
    method = UnidecMethod(recipe.method_config(), recipe)
    method.model = method.build_model(task.n_labels)
    tokens = de.tokenise(method.model.encoder, task, recipe, progress=False)
    return method, task, tokens, RunContext(run_dir=tmp_path, progress=False)


def log_softmax_sum(scores: np.ndarray, targets: np.ndarray) -> float:
    """The paper's PSL direction written with loops: sum over rows with positives of
    -(1/|P_i|) Σ_p log(e^{s_ip} / Σ_l e^{s_il})."""
    terms = []
    for i in range(scores.shape[0]):
        positives = np.flatnonzero(targets[i])
        if positives.size == 0:
            continue
        denom = sum(math.exp(v) for v in scores[i])
        terms.append(-sum(math.log(math.exp(scores[i, p]) / denom) for p in positives) / positives.size)
    return sum(terms)


def test_config_defaults_follow_the_paper():
    c = UnidecConfig()
    assert (c.batching, c.psl_reduction, c.max_pool_size) == ("one_cluster_per_batch", "sum", None)
    assert (c.lambda_de, c.lambda_de_q2l, c.lambda_clf_q2l) == (0.5, 0.5, 0.5)
    assert (c.head_lr, c.classifier_lr, c.refresh_every, c.head_dropout) == (2e-4, 1e-3, 5, 0.1)
    assert c.shortlist_size == c.hard_negatives * c.refresh_every  # |H| = η·τ
    assert UnidecConfig(shortlist_k=40).shortlist_size == 40
    with pytest.raises(ValueError, match="shortlist_k"):
        UnidecConfig(hard_negatives=6, shortlist_k=3)
    with pytest.raises(ValueError):
        UnidecConfig(inference="sum")


def test_trains_end_to_end_and_records_accounting(trained):
    _, result = trained
    rec = result.record
    acc = rec["accounting"]
    assert rec["status"] == "finished"
    # one cluster = one batch: 300 labelled queries / 32 -> 9.4 -> 16 clusters (a power of two) of ~19
    assert acc["batch_size"] == 19 and acc["steps"] == 2 * 16  # the largest cluster: ⌈300 / 16⌉
    assert acc["batching"] == "one_cluster_per_batch" and acc["batches_per_epoch"] == 16
    assert acc["pool_size_uncapped_mean"] == acc["pool_size_mean"]  # no max_pool_size
    assert acc["psl_reduction"] == "sum" and acc["grad_clip"] is None and acc["grad_norm_preclip_mean"] > 0
    assert acc["not_reported"]["temperature"] == 0.1
    assert acc["refresh_interval"] == 1 and acc["shortlist_size"] == 2
    epochs = [json.loads(line) for line in (result.run_dir / "train_log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2] and all(e["loss"] > 0 for e in epochs)  # the last step's PSL loss
    assert acc["hard_negatives_per_query"] == 2.0  # the shortlist always yields η negatives here
    # P_i^B holds the sampled positives and any other positive of i that the pool holds
    assert acc["positives_per_query"] >= acc["sampled_positives_per_query"] >= 1.0
    assert 19 <= acc["pool_size_mean"] <= 60 and acc["pool_size_max"] <= 60
    assert acc["inference"] == "concat"
    # encoder + two heads + Ψ (60 labels x 16)
    assert rec["model"]["params_trainable"] > 60 * 16 + 2 * (32 * 16 + 16)
    model_dir = result.run_dir / "checkpoints" / "model"
    assert {"encoder", "heads.safetensors", "label_de.npy", "label_clf.npy", "unidec.json"} <= {
        p.name for p in model_dir.iterdir()
    }
    assert (result.run_dir / "checkpoints" / "train" / "latest").exists()


def test_method_loss_equals_unidec_loss_by_hand(tiny_recipe, tmp_path):
    """The step's loss is λ L_D + (1-λ) L_C of the paper, recomputed with loops from raw texts."""
    recipe = tiny_recipe(
        "{name: unidec, dim: 16, positives_per_query: 2, hard_negatives: 3, temperature: 0.2, "
        "lambda_de: 0.3, lambda_de_q2l: 0.6, lambda_clf_q2l: 0.4}"
    )
    method, task, tokens, ctx = setup_method_state(recipe, tmp_path)
    labels = task.train_labels
    rows = de.labelled_rows(labels)[:12]
    shortlist = np.random.default_rng(0).integers(0, task.n_labels, size=(rows.size, 10))
    pool = method.sample_pool(labels, rows, shortlist, epoch=0, step=0)
    assert pool.hard_negatives.tolist() == [3] * rows.size
    method.model.eval()  # dropout off, so both computations see the same network
    with torch.no_grad():
        got = method.pool_loss(rows, pool, tokens, ctx).item()

        # By hand: embed the raw texts (not the token caches), build scores and targets from the
        # label matrix, and apply the paper's equations with loops.
        m = method.model

        def phi(texts):
            batch = m.encoder.tokenize(texts)
            return m.encoder(batch["input_ids"], batch["attention_mask"])

        q = phi([task.train_texts[i] for i in rows])
        z = phi([task.label_texts[j] for j in pool.labels])
        q_de = torch.tanh(q @ m.de_head[0].weight.T + m.de_head[0].bias)
        q_de = q_de / q_de.norm(dim=1, keepdim=True)
        z_de = torch.tanh(z @ m.de_head[0].weight.T + m.de_head[0].bias)
        z_de = z_de / z_de.norm(dim=1, keepdim=True)
        q_clf = q @ m.clf_head[0].weight.T + m.clf_head[0].bias
        psi = m.classifiers.weight[torch.from_numpy(pool.labels)]
        s_de = (q_de @ z_de.T).double().numpy() / 0.2
        s_clf = (q_clf @ psi.T).double().numpy() / 0.2
    targets = labels[rows][:, pool.labels].toarray() > 0  # P_i ∩ L_B
    assert targets.any(axis=1).all()
    l_d = 0.6 * log_softmax_sum(s_de, targets) + 0.4 * log_softmax_sum(s_de.T, targets.T)
    l_c = 0.4 * log_softmax_sum(s_clf, targets) + 0.6 * log_softmax_sum(s_clf.T, targets.T)
    assert got == pytest.approx(0.3 * l_d + 0.7 * l_c, rel=1e-4)


def test_classifier_rows_outside_the_pool_never_change(tiny_recipe, tmp_path):
    recipe = tiny_recipe("{name: unidec, dim: 16, positives_per_query: 1, hard_negatives: 1}")
    method, task, tokens, ctx = setup_method_state(recipe, tmp_path)
    optimizer, scheduler = method.build_optimizers(total_steps=10)
    labels = task.train_labels
    rows = de.labelled_rows(labels)
    shortlist = np.random.default_rng(1).integers(0, task.n_labels, size=(rows.size, 5))
    before = method.model.classifiers.weight.detach().clone()
    head_before = method.model.de_head[0].weight.detach().clone()
    touched = np.zeros(task.n_labels, dtype=bool)
    method.model.train()
    for step, batch in enumerate([np.arange(0, 6), np.arange(6, 12)]):
        pool = method.sample_pool(labels, rows[batch], shortlist[batch], epoch=0, step=step)
        method.train_step(rows[batch], pool, tokens, ctx, optimizer, scheduler)
        touched[pool.labels] = True
    after = method.model.classifiers.weight.detach()
    assert 0 < touched.sum() < task.n_labels
    assert torch.equal(after[torch.from_numpy(~touched)], before[torch.from_numpy(~touched)])
    assert (after[torch.from_numpy(touched)] != before[torch.from_numpy(touched)]).any(dim=1).all()
    assert not torch.equal(method.model.de_head[0].weight, head_before)  # dense parts do train


def test_inference_modes_save_load_and_concat_by_hand(trained, tmp_path):
    recipe, result = trained
    ctx = RunContext(run_dir=tmp_path, progress=False)
    method = UnidecMethod(recipe.method_config(), recipe)
    method.load(result.run_dir / "checkpoints" / "model")
    ds = ensure_dataset(recipe, progress=False)
    texts = list(ds.query_texts("test"))[:20]
    n_labels, k = ds.n_labels, 7

    preds = {mode: method.predict(texts, k, ctx, inference=mode) for mode in ("concat", "de", "clf")}
    for mode, p in preds.items():
        assert p.shape == (20, n_labels) and (np.diff(p.indptr) == k).all(), mode
        assert np.all(p.indices < n_labels)

    # concat = exact search of [Φ_D(x) ⊕ N(Φ_C(x))] against [Φ_D(z) ⊕ N(Ψ)], built by hand.
    m = method.model.eval()
    with torch.no_grad():
        batch = m.encoder.tokenize(texts)
        phi = m.encoder(batch["input_ids"], batch["attention_mask"])
        q = torch.cat([m.de(phi), torch.nn.functional.normalize(m.clf(phi), dim=1)], dim=1)
        lab = ds.label_texts()
        zb = m.encoder.tokenize(list(lab), max_length=recipe.encoder.max_length)
        z = m.de(m.encoder(zb["input_ids"], zb["attention_mask"]))
        keys = torch.cat([z, torch.nn.functional.normalize(m.classifiers.weight, dim=1)], dim=1)
        scores = (q @ keys.T).numpy()
    for i in range(len(texts)):
        row = preds["concat"][i]
        expected = np.sort(np.argsort(-scores[i], kind="stable")[:k])
        np.testing.assert_array_equal(np.sort(row.indices), expected)
        np.testing.assert_allclose(np.sort(row.data), np.sort(scores[i, expected]), atol=1e-4)
    # The modes differ: they search different spaces.
    assert preds["de"].nnz == preds["clf"].nnz and (preds["de"] != preds["clf"]).nnz > 0

    # Save / load round trip: identical predictions in every mode.
    method.save(tmp_path / "again")
    other = UnidecMethod(recipe.method_config(), recipe)
    other.load(tmp_path / "again")
    for mode in ("concat", "de", "clf"):
        again = other.predict(texts, k, ctx, inference=mode)
        np.testing.assert_array_equal(again.indices, preds[mode].indices)
        np.testing.assert_allclose(again.data, preds[mode].data, rtol=1e-6)


def test_interrupted_training_resumes_onto_the_same_trajectory(
    trained, tiny_encoder_dir, tmp_path, interrupt_then_resume
):
    """Interrupted in epoch 2, resumed: only epoch 2 runs again and the model equals the uninterrupted one."""
    reference_recipe, reference = trained
    recipe = write_recipe(tmp_path, tiny_encoder_dir, FAST, epochs=2)
    assert recipe.hash() == reference_recipe.hash()
    result, run_dir, steps = interrupt_then_resume(UnidecMethod, "train_step", recipe, tmp_path, at=20)
    assert steps == 16  # only epoch 2 ran again
    assert result.record["accounting"]["steps"] == 2 * 16  # pool accounting survives the resume
    for key in ("grad_norm_preclip_mean", "grad_norm_preclip_max"):  # every step's norm, not the last attempt's
        assert result.record["accounting"][key] == pytest.approx(reference.record["accounting"][key], rel=1e-5)
    for name in ("label_de.npy", "label_clf.npy"):
        np.testing.assert_allclose(
            np.load(run_dir / "checkpoints" / "model" / name),
            np.load(reference.run_dir / "checkpoints" / "model" / name),
            atol=1e-5,
        )


def test_validation_split_selects_the_model_on_training_rows(tiny_recipe, tmp_path):
    recipe = tiny_recipe(FAST, epochs=1, extra="")
    data = recipe.model_dump()
    data["training"]["validation_fraction"] = 0.2
    recipe = recipe_from_dict(data)
    result = run(recipe, tmp_path)
    acc = result.record["accounting"]
    assert 0.0 <= acc["validation_p1"] <= 100.0
    assert acc["steps"] == 8  # 240 of the 300 labelled queries train: 240 / 32 -> 7.5 -> 8 clusters
    assert (result.run_dir / "checkpoints" / "best.safetensors").exists()


def test_refuses_several_processes(tiny_recipe, tmp_path, monkeypatch):
    import xmcbench.train as train

    recipe = tiny_recipe(FAST, epochs=1)
    ds = ensure_dataset(recipe, progress=False)
    task = build_train_task(recipe, ds, np.ones(ds.n_labels))
    monkeypatch.setattr(train, "get_world_size", lambda: 2)
    with pytest.raises(XmcbenchError, match="one process"):
        UnidecMethod(recipe.method_config(), recipe).fit(task, RunContext(run_dir=tmp_path, progress=False))


def test_pool_cap_keeps_positives_and_reports_the_uncapped_size(tiny_recipe, tmp_path):
    """max_pool_size (Table 2's |L_B|): sampled positives stay, negatives are dropped to fit."""
    recipe = tiny_recipe("{name: unidec, dim: 16, positives_per_query: 2, hard_negatives: 5, max_pool_size: 20}")
    method, task, tokens, ctx = setup_method_state(recipe, tmp_path)
    labels = task.train_labels
    rows = de.labelled_rows(labels)[:16]
    shortlist = np.random.default_rng(2).integers(0, task.n_labels, size=(rows.size, 10))
    pool = method.sample_pool(labels, rows, shortlist, epoch=0, step=0)
    assert pool.size <= 20 and method._uncapped_pool_sum > 20
    sampled = pool.labels[pool.positive_slots[pool.positive_slots >= 0]]
    assert (pool.positive_slots >= 0).sum() == (pool.sampled_positives).sum()  # no positive was dropped
    assert np.isin(sampled, pool.labels).all()
