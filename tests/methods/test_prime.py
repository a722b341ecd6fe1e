import json

import numpy as np
import pytest
import torch

from xmcbench.losses import dynamic_margin_triplet_loss
from xmcbench.methods import dual_encoder as de
from xmcbench.methods.base import RunContext
from xmcbench.methods.prime import (
    LabelPrototypeNetwork,
    PrimeConfig,
    PrimeMethod,
    PrimeModel,
    assign_free_vectors,
    bank_mean,
    centroid_momentum_update,
    initial_centroids,
    positive_pairs,
    prime_objective,
)
from xmcbench.run import run_recipe
from xmcbench.run.phases import build_train_task, ensure_dataset

PRIME = (
    "{name: prime, free_vectors: 16, prototype_ffn: 64, cluster_start_epoch: 1, cluster_size: 8, recluster_every: 1%s}"
)


def run(recipe, tmp_path, **kw):
    return run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False, **kw)


@pytest.fixture(autouse=True)
def _offline_single_thread(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "home"))
    # The tiny model's ops are too small to gain from threads; on a busy machine spinning threads cost 10x.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def prepared(recipe, tmp_path):
    """A PrimeMethod with its model built and initialised (fit's steps 1 and 3), plus what fit uses."""
    ds = ensure_dataset(recipe, progress=False)
    from xmcbench.metrics import inv_propensity

    task = build_train_task(recipe, ds, inv_propensity(ds.labels("train"), 0.55, 1.5))
    ctx = RunContext(run_dir=tmp_path / "run", progress=False)
    method = PrimeMethod(recipe.method_config(), recipe)
    encoder = de.build_encoder(recipe)
    tokens = de.tokenise(encoder, task, recipe, progress=False)
    c = method.config
    net = LabelPrototypeNetwork(encoder.dim, task.n_labels, c.free_vectors, ffn=c.prototype_ffn)
    method.model = PrimeModel(encoder, net)
    rows = de.labelled_rows(task.train_labels)
    method._initialise(tokens, task.train_labels, rows, ctx)
    return method, task, tokens, rows, ctx


# ----------------------------------------------------------------------------------------------
def test_prime_trains_end_to_end_and_records_accounting(tiny_recipe, tmp_path):
    result = run(tiny_recipe(PRIME % ""), tmp_path)
    record, acc = result.record, result.record["accounting"]
    assert record["status"] == "finished"
    assert acc["batch_size"] == 32 and acc["steps"] == 2 * 10  # 300 labelled queries / 32 -> 10 steps
    # Two positives per query: the pool holds at least the batch's distinct labels, at most 2 per query.
    assert 10 <= acc["pool_size_mean"] <= 64 and acc["pool_size_max"] <= 64
    assert acc["positives_per_query"] >= 1.0 and acc["hard_negatives_per_query"] == 0.0
    assert acc["free_vectors"] == 16 and acc["in_batch_negatives_per_query"] > 0
    assert record["model"]["params_trainable"] > 0
    model_dir = result.run_dir / "checkpoints" / "model"
    assert (model_dir / "label_prototypes.npy").exists() and (model_dir / "prototype_network.safetensors").exists()
    assert (result.run_dir / "checkpoints" / "train" / "latest").exists()
    assert result.scores["P@1"] > 0
    epochs = [json.loads(line) for line in (result.run_dir / "train_log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2] and all(e["loss"] > 0 for e in epochs)  # the last step's Eq. 5


def apply_update(c, h, rows, labels, alpha):
    met, new_rows = centroid_momentum_update(c, h, rows, labels, alpha)
    out = c.clone()
    out[met] = new_rows
    return out


@pytest.mark.slow
def test_prime_beats_its_starting_point(tiny_recipe, tmp_path):
    """Training must move the model: trained prototypes beat the untrained encoder's and network's."""
    untrained = run(tiny_recipe(PRIME % "", epochs=0), tmp_path / "a")
    trained = run(tiny_recipe(PRIME % "", epochs=6), tmp_path / "b")
    assert trained.scores["P@1"] > untrained.scores["P@1"] + 10  # measured 11.7 -> 43.3


def test_centroid_update_is_eq4_per_query_label_pair_in_batch_order():
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [5.0, 5.0]])  # (L=4, d=2)
    h = torch.tensor([[2.0, 0.0], [0.0, 4.0], [8.0, 8.0]])  # (b=3, d)
    # query 0 has labels {0, 1}; query 1 {1}; query 2 {1, 2}; label 3 is in no batch query.
    rows, labels = np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 1, 2])
    met, _ = centroid_momentum_update(c, h, rows, labels, alpha=0.5)
    assert met.tolist() == [0, 1, 2]  # only the labels met are touched
    out = apply_update(c, h, rows, labels, alpha=0.5)
    expected = torch.stack(
        [
            0.5 * c[0] + 0.5 * h[0],
            0.125 * c[1] + 0.125 * h[0] + 0.25 * h[1] + 0.5 * h[2],  # Eq. 4 three times: q0, then q1, then q2
            0.5 * c[2] + 0.5 * h[2],
            c[3],
        ]
    )
    torch.testing.assert_close(out, expected)
    assert torch.equal(c[1], torch.tensor([0.0, 1.0]))  # the input is not modified

    # Against a literal loop over the pairs on random data with the paper's alpha.
    gen = torch.Generator().manual_seed(0)
    c, h = torch.randn(20, 8, generator=gen), torch.randn(6, 8, generator=gen)
    rng = np.random.default_rng(0)
    rows = np.sort(rng.integers(0, 6, 40))
    labels = rng.integers(0, 20, 40)
    loop = c.clone()
    for r, l in zip(rows, labels):
        loop[l] = 0.95 * loop[l] + 0.05 * h[r]
    torch.testing.assert_close(apply_update(c, h, rows, labels, 0.95), loop)

    # The network's buffer is updated in place the same way.
    net = LabelPrototypeNetwork(8, n_labels=20, n_free_vectors=0, ffn=16)
    net.centroids.copy_(c)
    net.update_centroids(h, rows, labels, 0.95)
    torch.testing.assert_close(net.centroids, loop)


def test_positive_pairs_cover_every_positive_in_batch_order():
    from scipy import sparse

    y = sparse.csr_matrix(np.array([[1, 0, 1], [0, 1, 0], [1, 1, 1]], dtype=np.float32))
    rows, labels = positive_pairs(y, np.array([2, 0]))
    assert rows.tolist() == [0, 0, 0, 1, 1] and labels.tolist() == [0, 1, 2, 0, 2]


def test_prototype_network_shapes_and_dependence_on_all_three_inputs():
    torch.manual_seed(0)
    net = LabelPrototypeNetwork(8, n_labels=6, n_free_vectors=2, ffn=16)
    with torch.no_grad():
        net.centroids.normal_()
        net.free_vectors.normal_()
        net.vector_of_label.copy_(torch.tensor([0, 0, 0, 1, 1, 1]))
    net.eval()
    h = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    labels = torch.tensor([0, 2, 3, 5])
    assert net.inputs(h, labels).shape == (4, 3, 8)
    z = net(h, labels)
    assert z.shape == (4, 8)
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(4))

    def changed(z_new):
        return (z_new - z).abs().max(dim=-1).values > 1e-4

    assert changed(net(h + 0.5 * torch.randn(4, 8), labels)).all()  # h_l
    with torch.no_grad():
        net.centroids[2] += 1.0
    assert changed(net(h, labels)).tolist() == [False, True, False, False]  # c_l: only label 2
    with torch.no_grad():
        net.centroids[2] -= 1.0
        net.free_vectors[1] += 1.0
    assert changed(net(h, labels)).tolist() == [False, False, True, True]  # v_l: labels 3 and 5 share row 1

    # Ablations of Fig. 3 drop an input from the sequence.
    assert LabelPrototypeNetwork(8, 6, 0, ffn=16).inputs(h, labels).shape == (4, 2, 8)
    assert LabelPrototypeNetwork(8, 6, 2, ffn=16, use_centroids=False).inputs(h, labels).shape == (4, 2, 8)


def test_free_vector_bank_is_shared_along_label_clusters(tiny_recipe, tmp_path):
    from xmcbench.sampling import balanced_kmeans

    recipe = tiny_recipe(PRIME % "")
    method, task, tokens, rows, ctx = prepared(recipe, tmp_path)
    net = method.model.prototypes
    pretrained = de.encode_all(method.model.encoder, tokens.labels, "cpu", "fp32", 256)  # (L, d)
    clusters = balanced_kmeans(pretrained, n_clusters=16, seed=recipe.training.seed, device="cpu")
    assignment = net.vector_of_label.numpy()
    for index, members in enumerate(clusters):
        assert (assignment[members] == index).all()  # one bank row per cluster, shared by its labels
    assert np.array_equal(assignment, assign_free_vectors(pretrained, 16, recipe.training.seed, "cpu"))
    assert np.bincount(assignment, minlength=16).max() - np.bincount(assignment, minlength=16).min() <= 1
    torch.testing.assert_close(net.free_vectors.detach(), torch.from_numpy(bank_mean(pretrained, assignment, 16)))

    # A prototype's gradient reaches exactly its cluster's free vector.
    net.eval()
    label = torch.tensor([7])
    net(torch.from_numpy(pretrained[[7]]), label).sum().backward()
    touched = net.free_vectors.grad.abs().sum(dim=1) > 0
    assert touched.nonzero().flatten().tolist() == [assignment[7]]

    # Centroids start at the normalised mean pre-trained query embedding, or at h_l without queries.
    queries = de.encode_all(method.model.encoder, tokens.queries, "cpu", "fp32", 256, rows=rows)
    expected = initial_centroids(queries, task.train_labels[rows], pretrained)
    torch.testing.assert_close(net.centroids, torch.from_numpy(expected))
    counts = np.diff(task.train_labels.tocsc().indptr)
    for label_id in range(task.n_labels):
        if counts[label_id]:
            mean = queries[task.train_labels[rows][:, label_id].nonzero()[0]].mean(axis=0)
            np.testing.assert_allclose(expected[label_id], mean / np.linalg.norm(mean), atol=1e-5)
        else:
            np.testing.assert_array_equal(expected[label_id], pretrained[label_id])


def _hand_triplets(scores, targets, variant):
    """Eq. 1: the sum over anchors of the sum over their (positive, negative) pairs of the triplet loss."""
    per_anchor = []
    for s, t in zip(scores, targets):
        if t.any() and (~t).any():
            n_pairs = int(t.sum()) * int((~t).sum())  # dynamic_margin_triplet_loss averages the pairs given
            per_anchor.append(dynamic_margin_triplet_loss(s[t][:, None], s[~t][None, :], 0.1, 0.3, variant) * n_pairs)
    return torch.stack(per_anchor).sum()


def _hand_regularizer(s, b, t, margin, variant):
    pos, neg = (s - b + margin)[t], (b - s + margin)[~t]
    if variant == "hinge":
        pos, neg = pos[pos > 0], neg[neg > 0]
    r_p = pos.mean() if pos.numel() else torch.tensor(0.0)
    r_n = neg.mean() if neg.numel() else torch.tensor(0.0)
    return (r_p + r_n) / 2


@pytest.mark.parametrize("variant,regularizer", [("max", "hinge"), ("paper", "paper")])
def test_batch_loss_equals_hand_computation_of_eq5(tiny_recipe, tmp_path, variant, regularizer):
    from xmcbench.sampling import build_label_pool, sample_positives

    recipe = tiny_recipe(PRIME % f", margin_variant: {variant}, regularizer: {regularizer}")
    method, task, tokens, rows, ctx = prepared(recipe, tmp_path)
    labels = task.train_labels
    batch_rows = rows[:24]
    positives = sample_positives(labels, batch_rows, 2, np.random.default_rng(0), weights=task.inv_propensity)
    pool = build_label_pool(labels, batch_rows, positives)
    method.model.eval()  # no dropout, so the two computations see the same embeddings
    loss, terms, _ = method._batch_loss(batch_rows, pool, tokens, ctx)

    enc, net = method.model.encoder, method.model.prototypes
    h_q = de.embed(enc, tokens.queries, batch_rows, "cpu")  # (b, d)
    h_l = de.embed(enc, tokens.labels, pool.labels, "cpu")  # (P, d)
    z = net(h_l, torch.from_numpy(pool.labels))  # (P, d)
    t = torch.from_numpy(pool.targets)
    s, b = h_q @ h_l.T, h_q @ z.T
    expected = {
        "query_prototype": _hand_triplets(b, t, variant),
        "query_label": _hand_triplets(s, t, variant),
        "label_query": _hand_triplets(s.T, t.T, variant),  # each pool label ranks the batch queries
        "regularizer": _hand_regularizer(s, b, t, 0.1, regularizer),
    }
    for name, value in expected.items():
        assert terms[name].item() == pytest.approx(value.item(), abs=1e-5, rel=1e-5), name
    total = sum(expected[k] for k in ("query_prototype", "query_label", "label_query")) + 0.1 * expected["regularizer"]
    assert loss.item() == pytest.approx(total.item(), abs=1e-5, rel=1e-5)
    assert expected["regularizer"].item() > 0 and t.sum() > len(batch_rows)  # a real mix of pairs was tested


@pytest.mark.parametrize("regularizer", ["hinge", "paper"])
def test_objective_has_no_nan_when_the_regulariser_sets_are_empty(regularizer):
    gen = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(1, 8, generator=gen), dim=-1).requires_grad_()
    h = torch.nn.functional.normalize(torch.randn(3, 8, generator=gen), dim=-1).requires_grad_()
    z = h.detach().clone().requires_grad_()  # b == s: with m' = 0 every hinge term is 0
    config = PrimeConfig(reg_margin=0.0, regularizer=regularizer)
    for targets in (torch.tensor([[True, True, True]]), torch.tensor([[True, False, False]])):
        loss, terms = prime_objective(q, h, z, targets, config)
        loss.backward()
        assert torch.isfinite(loss) and all(torch.isfinite(v) for v in terms.values())
        assert terms["regularizer"].item() == 0.0
        for tensor in (q, h, z):
            assert torch.isfinite(tensor.grad).all()
            tensor.grad = None


def test_save_load_round_trip_gives_identical_predictions(tiny_recipe, tmp_path):
    recipe = tiny_recipe(PRIME % "", epochs=1)
    ds = ensure_dataset(recipe, progress=False)
    task = build_train_task(recipe, ds, np.ones(ds.n_labels))
    ctx = RunContext(run_dir=tmp_path / "run", progress=False)
    method = PrimeMethod(recipe.method_config(), recipe)
    method.fit(task, ctx)
    texts = list(ds.query_texts("test"))
    before = method.predict(texts, 10, ctx)
    method.save(tmp_path / "model")
    loaded = PrimeMethod(recipe.method_config(), recipe)
    loaded.load(tmp_path / "model")
    after = loaded.predict(texts, 10, ctx)
    assert (before != after).nnz == 0 and np.array_equal(before.indices, after.indices)
    assert loaded.parameter_counts() == method.parameter_counts()
    for name, tensor in method.model.prototypes.state_dict().items():
        assert torch.equal(tensor, loaded.model.prototypes.state_dict()[name]), name
    from xmcbench.errors import XmcbenchError

    with pytest.raises(XmcbenchError, match="missing prototype_network.json"):
        PrimeMethod(recipe.method_config(), recipe).load(tmp_path)


@pytest.mark.slow
def test_interrupted_training_resumes_from_the_epoch_checkpoint(tiny_recipe, tmp_path, interrupt_then_resume):
    recipe = tiny_recipe(PRIME % "", epochs=3)
    clean = run(recipe, tmp_path / "clean")
    result, _, steps = interrupt_then_resume(PrimeMethod, "_train_step", recipe, tmp_path)
    assert steps == 2 * 10  # only epochs 2 and 3 ran again
    assert result.record["accounting"]["steps"] == 3 * 10  # accounting survives the resume
    for key in ("grad_norm_preclip_mean", "grad_norm_preclip_max"):  # every step's norm, not the last attempt's
        assert result.record["accounting"][key] == pytest.approx(clean.record["accounting"][key], rel=1e-6)
    # The checkpoint carries centroids, bank, optimiser, sampler and RNG: the same trajectory.
    assert result.scores["P@1"] == pytest.approx(clean.scores["P@1"], abs=1e-6)
    assert result.scores["nDCG@5"] == pytest.approx(clean.scores["nDCG@5"], abs=1e-6)


def test_config_rejects_bad_settings():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="power of two"):
        PrimeConfig(free_vectors=1000)
    with pytest.raises(ValidationError, match="gamma_min"):
        PrimeConfig(gamma_min=0.4, gamma_max=0.3)
    with pytest.raises(ValidationError):
        PrimeConfig(centroid_momentum=1.5)
