"""hf:// encoders (published checkpoints in recipes) and shared results (push-results, table --results)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fake_hub import FAKE_TOKEN

import xmcbench.hub as xh
from xmcbench import paths
from xmcbench.errors import XmcbenchError


def _publish_encoder(hub, folder: str, repo: str = "authors/tiny-encoder") -> str:
    files = {str(p.relative_to(folder)): p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}
    return hub.add_repo(repo, files)


def test_parse_hub_ref():
    assert xh.parse_hub_ref("hf://org/name@v1") == xh.HubRef("org/name", "v1")
    assert xh.parse_hub_ref("hf://org/name", revision="abc") == xh.HubRef("org/name", "abc")
    for bad in ("hf://noslash", "hf://org/name@", "hf://a/b/c", "hf://org/../x"):
        with pytest.raises(XmcbenchError, match="hf://ORG/NAME"):
            xh.parse_hub_ref(bad)
    with pytest.raises(XmcbenchError, match="give one"):
        xh.parse_hub_ref("hf://org/name@v1", revision="v2")


@pytest.mark.slow
def test_recipe_with_an_hf_encoder_runs_from_the_hub_and_then_offline(
    hub, run_copy, trained, tiny_encoder_dir, tmp_path, monkeypatch
):
    import huggingface_hub.constants as c

    from xmcbench.encoders import TextEncoder
    from xmcbench.run import load_recipe, run_recipe

    sha = _publish_encoder(hub, tiny_encoder_dir)
    recipe = tmp_path / "zs.yaml"
    recipe.write_text(
        "name: zs-hub\n"
        "dataset: {name: synth-hub, synthetic: {labels: 60, train: 200, test: 60, seed: 1}}\n"
        "supervision: {mode: zero_shot}\n"
        "method: {name: zero_shot}\n"
        "encoder: {name: 'hf://authors/tiny-encoder@main', max_length: 16}\n"
        "evaluation: {k: [1, 5], top_k: 10, bootstrap: 0}\n"
        "hardware: {devices: cpu}\n"
    )
    result = run_recipe(load_recipe(recipe), runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    assert result.record["status"] == "finished"
    assert result.record["model"]["encoder"] == "hf://authors/tiny-encoder@main"
    # the branch named in the recipe moves; the commit it resolved to is what the run records
    assert result.record["model"]["encoder_revision"] == sha
    from xmcbench.store import Store

    with Store.open(tmp_path / "db.duckdb", read_only=True) as store:
        assert store.get_run(result.record["run_id"])["encoder_revision"] == sha
    snapshot = paths.home() / "hub" / "models--authors--tiny-encoder" / "snapshots" / sha
    assert (snapshot / "config.json").is_file()  # cached under $XMCBENCH_HOME, at the commit served
    assert xh.download_checkpoint("hf://authors/tiny-encoder@main").commit == sha
    from xmcbench.encoders.hub_ref import resolved_revision

    assert resolved_revision("hf://authors/tiny-encoder@main") == sha  # what a run should record
    assert resolved_revision("all-MiniLM-L6-v2", "v1") == "v1"

    # same embeddings as the local folder it was published from
    texts = ["red running shoes", "roman history"]
    local = TextEncoder(tiny_encoder_dir, max_length=16).encode(texts)
    np.testing.assert_allclose(TextEncoder("hf://authors/tiny-encoder", max_length=16).encode(texts), local, atol=1e-6)

    # offline: the cache answers, no request is made
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen = len(hub.requests)
    np.testing.assert_allclose(
        TextEncoder(f"hf://authors/tiny-encoder@{sha}", max_length=16).encode(texts), local, atol=1e-6
    )
    assert len(hub.requests) == seen


@pytest.mark.slow
def test_a_supervised_method_starts_from_an_hf_encoder(hub, run_copy, tiny_encoder_dir, tmp_path):
    """hf:// as the initial encoder of a trained method: downloaded, trained from, commit recorded, pushable."""
    from xmcbench.run import load_recipe, run_recipe

    sha = _publish_encoder(hub, tiny_encoder_dir, "authors/base-encoder")
    recipe = tmp_path / "dexml-hf.yaml"
    recipe.write_text(
        "name: dexml-from-hub\n"
        "dataset: {name: synth-hub, synthetic: {labels: 60, train: 200, test: 60, seed: 1}}\n"
        "method: {name: dexml, regime: all_negatives, temperature: 0.1}\n"
        "encoder: {name: 'hf://authors/base-encoder', max_length: 16}\n"
        "training: {epochs: 1, batch_size: 32, lr: 0.001, warmup_ratio: 0.0}\n"
        "evaluation: {k: [1, 5], top_k: 10, bootstrap: 0}\n"
        "hardware: {devices: cpu}\n"
    )
    result = run_recipe(load_recipe(recipe), runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    model = result.record["model"]
    assert result.record["status"] == "finished"
    assert model["encoder"] == "hf://authors/base-encoder" and model["encoder_revision"] == sha
    assert any(r["path"] == f"/authors/base-encoder/resolve/{sha}/config.json" for r in hub.requests)
    # the card of a model trained from a Hub checkpoint names it as its base model
    pushed = xh.push_run(result.run_dir, "tester/from-hub")
    card = hub.files("tester/from-hub")["README.md"].decode()
    assert "base_model: authors/base-encoder" in card and pushed.commit


def test_hf_encoder_errors_are_one_line(hub):
    from xmcbench.encoders import TextEncoder

    with pytest.raises(XmcbenchError) as exc:
        TextEncoder("hf://authors/missing")
    assert "not found" in str(exc.value) and "\n" not in str(exc.value)
    hub.add_repo("authors/present", {"config.json": b"{}"})
    with pytest.raises(XmcbenchError, match="revision does not exist"):
        xh.download_checkpoint("hf://authors/present@nope")


@pytest.mark.slow
def test_a_pushed_model_is_an_hf_encoder(hub, run_copy):
    from xmcbench.encoders import TextEncoder

    run_dir = run_copy("dexml")
    xh.push_run(run_dir, "tester/as-encoder")
    texts = ["red running shoes", "roman history"]
    ours = TextEncoder(str(run_dir / "checkpoints" / "model" / "encoder"), max_length=16).encode(texts)
    theirs = TextEncoder("hf://tester/as-encoder", max_length=16).encode(texts)
    np.testing.assert_allclose(theirs, ours, atol=1e-6)


@pytest.mark.slow
def test_push_results_and_table_with_shared_results(hub, trained, run_copy, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    run_copy("dexml")  # the session home, which has the synthetic dataset
    runner = CliRunner()
    res = runner.invoke(app, ["push-results", "--repo", "tester/results", "--db", str(trained["db"])])
    assert res.exit_code == 0, res.output
    files = hub.files("tester/results", repo_type="dataset")
    run_ids = {trained[m].name for m in ("dexml", "unidec", "prime")}
    assert {f for f in files if f.startswith("runs/")} == {f"runs/{r}.json" for r in run_ids}
    for run_id in run_ids:
        shared = json.loads(files[f"runs/{run_id}.json"])
        local = json.loads((trained[run_id.split("-")[2]] / "record.json").read_text())
        assert shared["scores"] == local["scores"] and shared["run_id"] == run_id
    assert "README.md" in files
    assert all(FAKE_TOKEN.encode() not in data for data in files.values())
    # sharing again with nothing new sends nothing and makes no commit
    seen = len(hub.requests)
    res = runner.invoke(app, ["push-results", "--repo", "tester/results", "--db", str(trained["db"])])
    assert res.exit_code == 0, res.output
    assert [r["path"] for r in hub.requests[seen:] if r["method"] == "PUT" or "/commit/" in r["path"]] == []
    assert hub.commit_count("tester/results", repo_type="dataset") == 1

    records = xh.fetch_results("hf://datasets/tester/results")
    assert {r["run_id"] for r in records} == run_ids

    # an empty local database: the table shows the shared runs
    empty = tmp_path / "empty.duckdb"
    res = runner.invoke(
        app,
        [
            "table",
            "--dataset",
            "synth-hub",
            "--all-runs",
            "--format",
            "json",
            "--db",
            str(empty),
            "--results",
            "hf://datasets/tester/results",
        ],
    )
    assert res.exit_code == 0, res.output
    for run_id in run_ids:
        assert res.output.count(run_id) == 1
    # the same runs locally as well: still once each (de-duplicated by run id), local database untouched
    res = runner.invoke(
        app,
        [
            "table",
            "--dataset",
            "synth-hub",
            "--all-runs",
            "--format",
            "json",
            "--db",
            str(trained["db"]),
            "--results",
            "hf://datasets/tester/results",
        ],
    )
    assert res.exit_code == 0, res.output
    for run_id in run_ids:
        assert res.output.count(run_id) == 1

    res = runner.invoke(app, ["table", "--dataset", "synth-hub", "--results", "hf://authors/model-not-dataset"])
    assert res.exit_code == 1 and "dataset repo" in res.output


RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes" / "hub").glob("*.yaml"))


# The DEXML authors' released checkpoints (github.com/nilesh2797/DEXML README and dexml.ipynb) with the
# encoder settings of their configs: (dataset, max_length = tf_max_len, normalize = norm_embs); CLS pooling.
RELEASED = {
    "quicktensor/dexml_eurlex-4k": ("EURLex-4K", 128, True),
    "quicktensor/dexml_lf-amazontitles-131k": ("LF-AmazonTitles-131K", 32, True),
    "quicktensor/dexml_lf-amazontitles-1.3m": ("LF-AmazonTitles-1.3M", 32, False),
    "quicktensor/dexml_lf-wikipedia-500k": ("LF-Wikipedia-500K", 128, False),
}


def test_hub_recipes_name_released_checkpoints():
    from xmcbench.run import load_recipe

    seen = {}
    for path in RECIPES:
        recipe = load_recipe(path)
        assert recipe.method.name == "zero_shot" and recipe.encoder.pooling == "cls", path
        repo = xh.parse_hub_ref(recipe.encoder.name).repo_id
        seen[repo] = (recipe.dataset.name, recipe.encoder.max_length, recipe.encoder.normalize)
        assert repo in path.read_text().split("Checkpoint: https://huggingface.co/")[1].split()[0], path
    assert seen == RELEASED


@pytest.mark.slow
def test_a_hub_recipe_runs_against_its_checkpoint(hub, run_copy, tiny_encoder_dir, tmp_path):
    """The shipped recipe, unchanged but for the dataset, evaluates the repo it names (here a stand-in)."""
    from xmcbench.run import load_recipe, run_recipe

    path = next(p for p in RECIPES if "131k" in p.name)
    repo = load_recipe(path).encoder.name.removeprefix("hf://")
    sha = _publish_encoder(hub, tiny_encoder_dir, repo)
    recipe = load_recipe(
        path, ["dataset.name=synth-hub", "encoder.max_length=16", "evaluation.bootstrap=0", "hardware.devices=cpu"]
    )
    result = run_recipe(recipe, runs_dir=tmp_path / "runs", db=tmp_path / "db.duckdb", progress=False)
    assert result.record["status"] == "finished" and result.record["model"]["encoder"] == f"hf://{repo}"
    assert any(r["path"].startswith(f"/{repo}/resolve/{sha}/") for r in hub.requests)


def test_plan_reads_an_hf_encoders_config_and_tokenizer_never_its_weights(hub, tiny_encoder_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    from xmcbench.data import load_dataset
    from xmcbench.run import load_recipe
    from xmcbench.run.plan import encoder_size, plan_recipe

    sha = _publish_encoder(hub, tiny_encoder_dir)
    recipe_path = tmp_path / "zs.yaml"
    recipe_path.write_text(
        "name: zs-hub-plan\n"
        "dataset: {name: synth-hub-plan, synthetic: {labels: 40, train: 80, test: 20, seed: 1}}\n"
        "supervision: {mode: zero_shot}\n"
        "method: {name: zero_shot}\n"
        "encoder: {name: 'hf://authors/tiny-encoder@main', max_length: 256}\n"
    )
    recipe = load_recipe(recipe_path)
    load_dataset("synth-hub-plan", synthetic=recipe.dataset.synthetic.model_dump(), progress=False)
    plan = plan_recipe(recipe)
    local = encoder_size(tiny_encoder_dir)
    assert (plan.encoder_params, plan.hidden) == (local.params, local.hidden)
    assert any("measured with hf://authors/tiny-encoder@main's tokenizer" in n for n in plan.notes)
    snapshot = paths.home() / "hub" / "models--authors--tiny-encoder" / "snapshots" / sha
    assert (snapshot / "config.json").is_file() and not (snapshot / "model.safetensors").exists()  # no weights

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: the cached config and tokenizer are enough
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    assert plan_recipe(recipe).per_device_gb == plan.per_device_gb
    missing = tmp_path / "missing.yaml"
    missing.write_text(recipe_path.read_text().replace("authors/tiny-encoder", "authors/not-fetched"))
    with pytest.raises(XmcbenchError, match="HF_HUB_OFFLINE=1 is set"):
        plan_recipe(load_recipe(missing))
