"""Fast checks without training: the fake Hub against the real client, and the model card on its own."""

from __future__ import annotations

import yaml
from fake_hub import FAKE_TOKEN

from xmcbench.hub.card import base_model, metric_type, render_card

RECORD = {
    "run_id": "20260101-000000-dexml-lf-amazontitles-131k-abcdef",
    "status": "finished",
    "task": {
        "dataset": "LF-AmazonTitles-131K",
        "dataset_version": "abc123",
        "split": "test",
        "n_labels": 131073,
        "n_queries": 134835,
        "n_queries_evaluated": 134835,
        "supervision": "full",
        "propensity_a": 0.6,
        "propensity_b": 2.6,
        "filter": "filter_labels_test.txt",
    },
    "model": {
        "method": "dexml",
        "encoder": "distilbert-base-uncased",
        "encoder_revision": None,
        "params_total": 66362880,
        "params_trainable": 66362880,
    },
    "scores": [
        {"name": "P@1", "value": 43.0, "ci_lo": 42.7, "ci_hi": 43.3},
        {"name": "P@5", "value": 20.9, "ci_lo": 20.8, "ci_hi": 21.0},
    ],
    "compute": {
        "device_type": "cuda",
        "device_names": ["NVIDIA A100-SXM4-80GB"] * 4,
        "device_count": 4,
        "gpu_hours": 12.5,
        "wall_time_s": {"prepare": 60.0, "train": 11000.0, "predict": 250.0},
    },
    "accounting": {
        "batch_size": 4096,
        "pool_size_mean": 131073.0,
        "pool_size_max": 131073,
        "positives_per_query": 2.3,
        "hard_negatives_per_query": 0.0,
        "refresh_interval": None,
        "steps": 7200,
    },
}


def test_card_front_matter_and_body(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    recipe = f"name: x\nencoder: {{name: distilbert-base-uncased}}\nnote: {FAKE_TOKEN}\n"
    card = render_card(
        RECORD, recipe, "org/dexml-131k", repo_url="https://hub.example/org/dexml-131k", license="apache-2.0"
    )
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == "distilbert-base-uncased" and front["license"] == "apache-2.0"
    assert front["datasets"] == ["LF-AmazonTitles-131K"] and "dexml" in front["tags"]
    metrics = front["model-index"][0]["results"][0]["metrics"]
    assert [(m["type"], m["value"]) for m in metrics] == [("precision_at_1", 43.0), ("precision_at_5", 20.9)]
    assert front["model-index"][0]["results"][0]["source"]["url"] == "https://hub.example/org/dexml-131k"
    assert "NVIDIA A100-SXM4-80GB × 4" in card and "GPU-hours:** 12.500" in card
    assert "DEXML Table 2" in card and "+0.48" in card  # published 42.52 for this row
    assert "| P@5 | 20.90 | 20.64 | +0.26 |" in card
    assert FAKE_TOKEN not in card  # a token in the recipe text is masked


def test_a_card_compares_only_with_a_published_row_of_the_runs_setting():
    """A zero-shot or few-shot run is not a full-supervision row's reproduction, nor a run on part of
    the test set anyone's: the card then compares with nothing (DEXML has no zero-shot row)."""
    from xmcbench.hub.card import published_comparison

    assert published_comparison(RECORD)[0]["table"] == "Table 2"
    for task in ({"supervision": "zero_shot"}, {"supervision": "few_shot", "label_fraction": 0.1}):
        assert published_comparison({**RECORD, "task": {**RECORD["task"], **task}}) == (None, [])
    partial = {**RECORD, "task": {**RECORD["task"], "n_queries_evaluated": 500}}
    assert published_comparison(partial) == (None, [])


def test_card_helpers():
    assert metric_type("nDCG@5") == "ndcg_at_5" and metric_type("PSP@3") == "psp_at_3"
    assert base_model("hf://quicktensor/dexml_eurlex-4k@abc") == "quicktensor/dexml_eurlex-4k"
    assert base_model("all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert base_model("/tmp/some/folder") is None and base_model(None) is None


def test_fake_hub_round_trip_with_the_real_client(hub, tmp_path):
    from huggingface_hub import HfApi, snapshot_download

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("hello")
    (src / "sub" / "w.safetensors").write_bytes(bytes(range(256)) * 40)
    api = HfApi(endpoint=hub.url)
    assert api.whoami()["name"] == "tester"
    api.create_repo("tester/rt", exist_ok=True)
    info = api.upload_folder(folder_path=str(src), repo_id="tester/rt")
    assert hub.files("tester/rt") == {"a.txt": b"hello", "sub/w.safetensors": bytes(range(256)) * 40}
    assert {p.path for p in api.get_paths_info("tester/rt", ["a.txt", "sub"])} == {"a.txt", "sub"}
    folder = snapshot_download("tester/rt", endpoint=hub.url, cache_dir=str(tmp_path / "cache"))
    assert folder.endswith(info.oid)
    assert (tmp_path / "cache").exists() and open(f"{folder}/sub/w.safetensors", "rb").read() == bytes(range(256)) * 40
