"""``python -m benchmarks --quick`` on a tiny shape: every row runs and the JSON has the schema (speed is not checked)."""

import json

from benchmarks.runner import ROW_KEYS, SCHEMA_VERSION, main

TINY = {
    "metrics_rows": 400,
    "metrics_labels": 2_000,
    "napkinxc_rows": 100,
    "big_rows": 500,
    "search": (40, 600, 16),
    "prepare_scale": 0.0002,
    "train": {"labels": 60, "train": 128, "batch": 16, "encoder": "tiny", "methods": ["dexml_all", "unidec"]},
}


def test_quick_runner_writes_every_row(tmp_path, capsys):
    out = tmp_path / "bench.json"
    result = main(
        [
            "--quick",
            "--repeat",
            "1",
            "--json",
            str(out),
            "--prepare-dir",
            str(tmp_path / "prep"),
            "--shape",
            json.dumps(TINY),
        ]
    )
    saved = json.loads(out.read_text())
    assert saved["schema_version"] == SCHEMA_VERSION == result["schema_version"]
    assert saved["mode"] == "quick"
    assert {"cpus", "versions", "torch_threads"} <= set(saved["machine"])
    names = [r["name"] for r in saved["rows"]]
    for wanted in (
        "metrics32",
        "metrics64",
        "metrics64_adversarial",
        "metrics1m_float32",
        "metrics1m_float64",
        "search",
        "search_vs_matmul",
        "prepare",
        "train_dexml_all",
        "train_unidec",
        "tokenise",
    ):
        assert wanted in names
    for r in saved["rows"]:
        assert set(ROW_KEYS) <= set(r)
        assert r["xmcbench_s"] > 0
        if r["peer_s"] is not None and r["peer_s"] == r["peer_s"]:  # not NaN
            assert abs(r["ratio"] - r["xmcbench_s"] / r["peer_s"]) < 1e-9
    train = {r["name"]: r for r in saved["rows"]}
    for name in ("train_dexml_all", "train_unidec"):  # a step took time, memory was read, pools were scaled
        assert train[name]["queries_per_s"] > 0 and train[name]["peak_gb"] > 0.05
    assert train["tokenise"]["tokenise_build_s"] > 0 and train["tokenise"]["peer_s"] > 0
    printed = capsys.readouterr().out
    assert "| row | work | xmcbench s | peer / floor |" in printed and "| prepare |" in printed
