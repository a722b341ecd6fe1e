"""``xmcbench table`` as a new user reads it: curated rows, readable at 80 columns, piped, and wide."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from xmcbench import paths
from xmcbench.cli import app
from xmcbench.store import Store
from xmcbench.store.record import new_record

runner = CliRunner()
WIKI = "LF-Wikipedia-500K"


def _record(run_id: str, method: str, p1: float, dataset: str = WIKI) -> dict:
    record = new_record(
        run_id,
        task={
            "dataset": dataset,
            "dataset_version": "v1",
            "split": "test",
            "n_queries": 1000,
            "n_queries_evaluated": 1000,
            "propensity_a": 0.5,
            "propensity_b": 0.4,
            "supervision": "full",
        },
        model={"method": method},
    )
    record["status"] = "finished"
    record["scores"] = [
        {"name": "P@1", "value": p1, "ci_lo": p1 - 0.4, "ci_hi": p1 + 0.6},
        {"name": "P@5", "value": p1 / 2},
    ]
    return record


@pytest.fixture
def db():
    with Store.open() as store:
        store.ingest_record(_record("20261122-101500-dexml-lf-wikipedia-500k-a1b2c3", "dexml", 84.0), None)
    return paths.default_db_path()


def _invoke(*args: str, columns: int | None = None, terminal: bool = False):
    env = {"COLUMNS": str(columns)} if columns else {}
    if terminal:
        env["TTY_COMPATIBLE"] = "1"  # rich treats stdout as a terminal
        env["TTY_INTERACTIVE"] = "0"
    result = runner.invoke(app, ["table", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def _visible(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _names_whole(text: str) -> None:
    for name in ("DecoupledSoftmax DEXML", "dexml:Table 1", "zero-shot", "few-shot-1%"):
        assert name in text, name
    assert "…" not in text  # nothing cut to "meth…"


@pytest.mark.parametrize("columns", [80, 120])
def test_terminal_fits_its_width_and_keeps_names(db, columns):
    out = _visible(_invoke("--dataset", "lf-wikipedia-500k", columns=columns, terminal=True))
    assert max(len(line) for line in out.splitlines()) <= columns
    _names_whole(out)
    assert "── full ──" in out and "── zero-shot ──" in out
    if columns == 80:
        assert "not shown for lack of width" in " ".join(out.split())  # the dropped columns are named, wrapped anywhere
    assert "84.00" in out  # the reproduced run


def test_piped_is_a_plain_full_width_table(db):
    out = _invoke("--dataset", "lf-wikipedia-500k", columns=80)
    assert "\x1b[" not in out  # no colour codes
    _names_whole(out)
    assert "not shown" not in out and "PSP@5" in out and "GPU-hours" in out
    header = next(line for line in out.splitlines() if "method" in line)
    assert header.startswith("| method")


def test_curated_hides_ablations_and_sorts_sections(db):
    rows = json.loads(_invoke("--dataset", WIKI, "--format", "json"))
    names = [r["method"] for r in rows]
    assert not any("∼" in n or "|" in n for n in names)  # DEXML Table 3's pool-size ablation rows
    assert all(r["source"].split(":")[1] != "Table 5" for r in rows if r["kind"] == "published")
    sections = [r["section"] for r in rows]
    assert sections == sorted(sections, key=["full", "few-shot", "zero-shot"].index)
    full = [r["P@1"] for r in rows if r["section"] == "full" and r["kind"] == "published" and r["P@1"] is not None]
    assert full == sorted(full, reverse=True)
    # no printed method twice in one setting
    keys = [(r["method"], r["setting"]) for r in rows if r["kind"] == "published"]
    assert len(keys) == len(set(keys))
    # the reproduced run sits right after the published row it is compared with, with Δ and its CI
    i = next(i for i, r in enumerate(rows) if r["kind"] == "reproduced")
    ours = rows[i]
    assert rows[i - 1]["kind"] == "published" and ours["delta_vs"].startswith(rows[i - 1]["method"])
    assert ours["P@1 Δ"] == pytest.approx(84.0 - rows[i - 1]["P@1"])
    assert ours["P@1 Δ CI"] == pytest.approx([83.6 - rows[i - 1]["P@1"], 84.6 - rows[i - 1]["P@1"]])
    everything = json.loads(_invoke("--dataset", WIKI, "--format", "json", "--all-published"))
    assert len(everything) > len(rows)
    assert any("∼" in r["method"] or "|" in r["method"] for r in everything)


def test_filters(db):
    rows = json.loads(_invoke("--dataset", WIKI, "--format", "json", "--setting", "zero-shot"))
    assert rows and {r["setting"] for r in rows} == {"zero-shot"}
    rows = json.loads(_invoke("--dataset", WIKI, "--format", "json", "--paper", "maclr"))
    assert {r["source"].split(":")[0] for r in rows if r["kind"] == "published"} == {"maclr"}
    rows = json.loads(_invoke("--dataset", WIKI, "--format", "json", "--method", "dexml"))
    assert rows and all("dexml" in r["method"].lower() for r in rows)
    result = runner.invoke(app, ["table", "--dataset", WIKI, "--paper", "nature"])
    assert result.exit_code == 1 and "prime, unidec" in result.output


def test_overview_without_dataset(db):
    rows = json.loads(_invoke("--format", "json"))
    ours = [r for r in rows if r["kind"] == "reproduced"]
    assert ours and ours[0]["method"] == "dexml" and ours[0][WIKI] == 84.0
    prime = next(r for r in rows if r["method"] == "PRIME" and r["setting"] == "full")
    assert prime["LF-AmazonTitles-131K"] is not None and prime[WIKI] is not None
    out = _visible(_invoke(columns=80, terminal=True))
    assert max(len(line) for line in out.splitlines()) <= 80 and "best P@1 per method" in out


def test_a_result_copied_by_another_paper_is_shown_once(db):
    rows = json.loads(_invoke("--dataset", WIKI, "--format", "json"))
    names = {(r["method"], r["setting"]) for r in rows if r["kind"] == "published"}
    # PRIME's "DEXML ◆" and LMTX's "MACLR*" repeat DEXML's and MACLR's own numbers
    assert ("DecoupledSoftmax DEXML", "full") in names and ("DEXML ◆", "full") not in names
    assert ("MACLR (ours)", "zero-shot") in names and ("MACLR*", "zero-shot") not in names
    assert ("SoftTop-5 DEXML", "full") in names  # same method, other numbers: its own row
    everything = json.loads(_invoke("--dataset", WIKI, "--format", "json", "--all-published"))
    assert any(r["method"] == "DEXML ◆" for r in everything)


def test_terminal_heads_sections_by_setting_instead_of_a_setting_column(db):
    out = _visible(_invoke("--dataset", WIKI, columns=80, terminal=True))
    assert "── few-shot-1% ──" in out and "── few-shot-5% ──" in out
    assert out.index("── few-shot-1% ──") < out.index("── few-shot-5% ──") < out.index("── zero-shot ──")
    header = next(line for line in out.splitlines() if "method" in line)
    assert "setting" not in header and "P@3" in header  # the width went to metrics
    assert "setting" in json.loads(_invoke("--dataset", WIKI, "--format", "json"))[0]  # machine formats keep it


def test_overview_reads_sorted_and_names_no_fake_runs(db):
    rows = json.loads(_invoke("--format", "json"))
    full = [r for r in rows if r["kind"] == "published" and r["setting"] == "full"]
    first = "LF-AmazonTitles-131K"
    with_first = [r[first] for r in full if r.get(first) is not None]
    assert with_first == sorted(with_first, reverse=True)
    assert full[: len(with_first)] == [r for r in full if r.get(first) is not None]  # they come first
    out = _visible(_invoke(columns=80, terminal=True))
    assert "= reproduced" not in out  # no "run 1 = reproduced" legend: the overview has no run ids
