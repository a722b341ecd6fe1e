"""Fixtures for the Hub tests: a local fake Hub the real huggingface_hub client talks to, and
trained tiny runs of each supervised method (trained once per session, read-only).

Nothing reaches a real host: ``HF_ENDPOINT`` and huggingface_hub's own ``constants.ENDPOINT`` both
point at the local server, the token is a fake one the server knows, the stored-login paths point
into a temp folder, and Xet (which would talk to a separate storage service) is switched off so
uploads use the LFS protocol the fake server implements.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_hub import FAKE_TOKEN, FakeHub  # noqa: E402

METHOD_YAML = {
    "dexml": "{name: dexml, regime: hard_negatives, hard_negatives: 2, shortlist_k: 10, refresh_every: 1, temperature: 0.1}",
    "unidec": "{name: unidec, dim: 16, positives_per_query: 1, hard_negatives: 1, shortlist_k: 10, refresh_every: 1}",
    "prime": "{name: prime, free_vectors: 16, prototype_ffn: 64, cluster_start_epoch: 1, cluster_size: 8, recluster_every: 1}",
}


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A started FakeHub (token ``FAKE_TOKEN`` belongs to user ``tester``), with the client pointed at it."""
    import huggingface_hub.constants as c

    server = FakeHub({FAKE_TOKEN: "tester"}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(c, "ENDPOINT", server.url)
    monkeypatch.setattr(c, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(tmp_path / "hf-login" / "token"))
    monkeypatch.setattr(c, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-login" / "stored_tokens"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def trained(tmp_path_factory, tiny_encoder_dir):
    """{method: run folder} of tiny finished runs (1 epoch, 60 labels), plus the home and database they used."""
    from xmcbench.run import load_recipe, run_recipe

    root = tmp_path_factory.mktemp("hub-runs")
    home = root / "home"
    out = {"home": home}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XMCBENCH_HOME", str(home))
        mp.setenv("HF_HUB_OFFLINE", "1")
        # a user who is logged in trains: the token is in the environment of every run, so a record,
        # log or database row that captured the environment would hold it (test_push checks none does)
        mp.setenv("HF_TOKEN", FAKE_TOKEN)
        for method, yaml in METHOD_YAML.items():
            path = root / f"{method}.yaml"
            path.write_text(
                f"name: tiny-{method}\n"
                "dataset: {name: synth-hub, synthetic: {labels: 60, train: 200, test: 60, seed: 1}}\n"
                f"method: {yaml}\n"
                f"encoder: {{name: '{tiny_encoder_dir}', max_length: 16}}\n"
                "training: {epochs: 1, batch_size: 32, lr: 0.001, warmup_ratio: 0.0}\n"
                "evaluation: {k: [1, 5], top_k: 10, bootstrap: 100}\n"
                "hardware: {devices: cpu}\n"
            )
            result = run_recipe(load_recipe(path), runs_dir=root / "runs", db=root / "db.duckdb", progress=False)
            assert result.record["status"] == "finished"
            out[method] = result.run_dir
    out["db"] = root / "db.duckdb"
    return out


@pytest.fixture
def run_copy(trained, tmp_path, monkeypatch):
    """A writable copy of a trained run (tests may damage it), in a home that has its dataset."""
    monkeypatch.setenv("XMCBENCH_HOME", str(trained["home"]))

    def copy(method: str) -> Path:
        target = tmp_path / "runs" / trained[method].name
        shutil.copytree(trained[method], target)
        return target

    return copy
