"""Push each supervised method's trained run to a local fake Hub, download it back, check everything."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import yaml
from fake_hub import FAKE_TOKEN
from scipy import sparse

import xmcbench.hub as xh
from xmcbench.errors import XmcbenchError

# every test here pushes a trained run (the session fixture trains three tiny models)
pytestmark = pytest.mark.slow
METHODS = ["dexml", "unidec", "prime"]


def _no_token_in(*places) -> None:
    for place in places:
        if isinstance(place, Path):
            files = [place] if place.is_file() else [p for p in place.rglob("*") if p.is_file()]
            for f in files:
                assert FAKE_TOKEN.encode() not in f.read_bytes(), f
        else:
            assert FAKE_TOKEN not in str(place)


@pytest.mark.parametrize("method", METHODS)
def test_push_download_load_reproduces(method, hub, run_copy, trained, tmp_path, caplog):
    """`xmcbench push` of a trained run, then everything checked from what the server holds."""
    from typer.testing import CliRunner

    from xmcbench.cli import app

    caplog.set_level(logging.DEBUG)  # huggingface_hub's own debug lines too: no token in any of them
    run_dir = run_copy(method)
    record = json.loads((run_dir / "record.json").read_text())
    repo = "tester/tiny-" + method
    upload = tmp_path / "upload"
    res = CliRunner().invoke(app, ["push", str(run_dir), "--repo", repo, "--out", str(upload)])
    assert res.exit_code == 0, res.output
    (push,) = xh.pushes(run_dir)  # hub.json records the push
    assert push["repo"] == repo and push["revision"] == "main" and push["commit"]
    assert f"commit {push['commit']}" in res.output and hub.repos[("model", repo)].branches["main"] == push["commit"]

    # 1. byte for byte: what the server holds is the folder that was built
    remote = hub.files(repo)
    local = {str(p.relative_to(upload)): p.read_bytes() for p in upload.rglob("*") if p.is_file()}
    assert remote == local
    for required in (
        "README.md",
        "record.json",
        "recipe.yaml",
        "modules.json",
        "config_sentence_transformers.json",
        "config.json",
        "model.safetensors",
        "1_Pooling/config.json",
        "xmcbench/model.json",
        "xmcbench/label_embeddings.safetensors",
    ):
        assert required in remote, required
    extra = {
        "unidec": ["xmcbench/heads.safetensors", "xmcbench/unidec.json"],
        "prime": ["xmcbench/prototype_network.safetensors", "xmcbench/prototype_network.json"],
    }.get(method, [])
    for name in extra:
        assert remote[name] == (run_dir / "checkpoints" / "model" / name.split("/")[1]).read_bytes()
    assert (
        remote["model.safetensors"]
        == (run_dir / "checkpoints" / "model" / "encoder" / "model.safetensors").read_bytes()
    )
    assert any(r["method"] == "PUT" and r["path"].startswith("/lfs-objects/") for r in hub.requests)  # LFS really used

    # 2. the card: YAML front matter parses, model-index = the record's scores
    card = remote["README.md"].decode()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "sentence-transformers" and front["pipeline_tag"] == "sentence-similarity"
    assert {"xmcbench", method, "extreme-multi-label"} <= set(front["tags"])
    assert front["datasets"] == ["synth-hub"] and front["license"] == "other"
    (entry,) = front["model-index"]
    (res_entry,) = entry["results"]
    assert res_entry["task"]["type"] == "text-classification"
    assert res_entry["dataset"]["name"] == "synth-hub" and res_entry["dataset"]["split"] == "test"
    card_scores = {m["name"]: m["value"] for m in res_entry["metrics"]}
    assert card_scores == {s["name"]: round(s["value"], 4) for s in record["scores"]}
    assert {m["type"] for m in res_entry["metrics"]} >= {"precision_at_1", "ndcg_at_5"}
    assert "## Recipe (resolved)" in card and f"name: {method}" in card and "GPU-hours" in card
    assert "Labels scored per step" in card
    assert json.loads(remote["record.json"])["scores"] == record["scores"]

    # 3. the predictor rebuilt from the download reproduces the run's predictions and scores
    model = xh.load(repo)
    assert model.commit == push["commit"]
    assert model.path != upload and (model.path / "README.md").read_bytes() == remote["README.md"]
    scores = model.evaluate()
    for s in record["scores"]:
        assert scores[s["name"]] == pytest.approx(s["value"], abs=1e-6), s["name"]
    run_pred = sparse.load_npz(run_dir / "predictions.npz")
    texts, filt = _test_split()
    from xmcbench.search.sparse_topk import remove_pairs

    pred = remove_pairs(model.predict(texts, k=20), filt)
    assert np.array_equal(_top1(pred), _top1(run_pred))

    # 4. the fake token (in the environment of training and of the push) is nowhere: not in the run
    # (record, log, hub.json), the database, the upload folder, the download, the output, the logs,
    # what the server stored or received in a body; it did travel, as the Authorization header
    _no_token_in(run_dir, trained["db"].parent, upload, model.path, res.output, caplog.text, card)
    for data in remote.values():
        assert FAKE_TOKEN.encode() not in data
    for req in hub.requests:
        assert FAKE_TOKEN.encode() not in req["body"]
    assert any(req["headers"].get("authorization") == f"Bearer {FAKE_TOKEN}" for req in hub.requests)


def _test_split():
    from xmcbench.data import load_dataset

    data = load_dataset("synth-hub", progress=False)
    return list(data.query_texts("test")), data.filter("test")


def _top1(pred: sparse.csr_matrix) -> np.ndarray:
    pred = pred.tocsr()
    out = np.full(pred.shape[0], -1)
    for i in range(pred.shape[0]):
        row = slice(pred.indptr[i], pred.indptr[i + 1])
        if pred.indptr[i + 1] > pred.indptr[i]:
            data, idx = pred.data[row], pred.indices[row]
            out[i] = idx[np.lexsort((idx, -data))[0]]
    return out


@pytest.mark.parametrize("method", METHODS)
def test_sentence_transformers_loads_the_download_with_the_same_embeddings(method, hub, run_copy):
    """SentenceTransformer on the downloaded repo = the encoder the run itself trained (its checkpoint,
    loaded by the method with the run's recipe), so a wrong pooling or normalisation in the pushed
    sentence-transformers config would show."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    run_dir = run_copy(method)
    xh.push_run(run_dir, "tester/st-" + method)
    model = xh.load("tester/st-" + method)
    st = SentenceTransformer(str(model.path), device="cpu")
    texts = ["red running shoes", "a history of the roman empire", "usb c cable 2m"]
    theirs = st.encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(theirs, _run_encoder(run_dir).encode(texts), atol=1e-5)
    np.testing.assert_allclose(theirs, model.encoder.encode(texts), atol=1e-5)  # what xmcbench.hub.load searches with


def _run_encoder(run_dir: Path):
    """The query encoder of the run's own saved model (not the pushed copy)."""
    from xmcbench.methods import METHODS
    from xmcbench.run import load_recipe

    recipe = load_recipe(run_dir / "recipe.yaml")
    method = METHODS.get(recipe.method.name)(recipe.method_config(), recipe)
    method.load(run_dir / "checkpoints" / "model")
    return getattr(method, "encoder", None) or method.model.encoder


def test_dry_run_writes_the_folder_and_uploads_nothing(hub, run_copy, tmp_path):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    run_dir = run_copy("dexml")
    out = tmp_path / "dry"
    res = CliRunner().invoke(app, ["push", str(run_dir), "--repo", "tester/dry", "--dry-run", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "would upload" in res.output and "README.md" in res.output and "xmcbench/model.json" in res.output
    assert (out / "README.md").is_file() and (out / "model.safetensors").is_file()
    assert hub.requests == [] and xh.pushes(run_dir) == []


def test_push_to_a_private_branch(hub, run_copy, monkeypatch, tmp_path):
    run_dir = run_copy("dexml")
    result = xh.push_run(run_dir, "tester/branchy", private=True, revision="dev")
    repo = hub.repos[("model", "tester/branchy")]
    assert repo.private and repo.branches["dev"] == result.commit
    assert "README.md" in hub.files("tester/branchy", revision="dev")
    assert hub.files("tester/branchy", revision="main") == {}
    assert xh.pushes(run_dir)[0]["revision"] == "dev"
    assert xh.load("tester/branchy", revision="dev").commit == result.commit
    monkeypatch.delenv("HF_TOKEN")  # a private repo is invisible without a token (from an empty cache)
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "other-home"))
    with pytest.raises(XmcbenchError, match="not found, or private"):
        xh.download_checkpoint("hf://tester/branchy@" + result.commit)


def test_push_again_is_idempotent(hub, run_copy):
    run_dir = run_copy("dexml")
    first = xh.push_run(run_dir, "tester/again")
    seen = len(hub.requests)
    second = xh.push_run(run_dir, "tester/again")
    resent = [r["path"] for r in hub.requests[seen:] if r["method"] == "PUT" or "/commit/" in r["path"]]
    assert resent == [], resent  # nothing re-sent, no empty commit
    assert len(xh.pushes(run_dir)) == 2 and first.commit
    assert second.commit  # unchanged files: no new commit is made, the head is reported
