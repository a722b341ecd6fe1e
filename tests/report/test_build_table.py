"""Building results tables from the store: which rows, which columns, Δ and best cells."""

from __future__ import annotations

import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.report import build_table

DATASET = "LF-AmazonTitles-131K"  # the dataset of the `store` fixture (conftest.py)


def _by_source(table):
    return {row["source"]: row for row in table.rows}


def test_rows_best_run_per_method_and_published_rows(store):
    table = build_table(store, "lf-amazontitles-131k")
    assert table.dataset == DATASET
    sources = [row["source"] for row in table.rows]
    assert sources[:2] == ["r-dexml-best", "r-tfidf"]  # reproduced first, older-but-better dexml, failed run left out
    published = [(row["source"], row["method"], row["setting"]) for row in table.rows if row["kind"] == "published"]
    assert published == [
        ("dexml:Table 2", "DEXML", "full"),
        ("dexml:Table 2", "SoftTop-5 DEXML", "full"),
        ("lmtx:Table 2", "LMTX", "full"),
        ("maclr:Table 4", "MACLR", "zero-shot"),
        ("unidec:Table 3", "DEXML", "full"),
        ("unidec:Table 3", "NGAME", "full"),
    ]  # not the row on another copy of the dataset, nor another dataset's
    assert "1 published rows on another copy of the dataset are not shown" in table.notes
    assert table.setting == {
        "split": "test",
        "dataset_version": "abc123",
        "propensity_a": 0.6,
        "propensity_b": 2.6,
        "filter": "filter_labels_test.txt",
    }


def test_default_metrics_are_those_present(store):
    assert build_table(store, DATASET).metrics == ["P@1", "P@5", "PSP@1"]  # no row has P@3 or PSP@3/5


def test_deltas_against_the_methods_own_plain_row(store):
    table = build_table(store, DATASET)
    dexml = _by_source(table)["r-dexml-best"]
    assert dexml["delta_vs"] == "DEXML (dexml:Table 2)"  # own paper, not the SoftTop-5 variant nor UniDEC's copy
    assert (
        dexml["P@1 Δ"] == pytest.approx(1.5)
        and dexml["P@5 Δ"] == pytest.approx(0.4)
        and dexml["PSP@1 Δ"] == pytest.approx(-1.0)
    )
    assert "P@1 Δ" not in _by_source(table)["r-tfidf"]
    headers = [c.header for c in table.columns]
    assert headers.index("P@1 Δ") == headers.index("P@1") + 1


def test_deltas_match_the_setting(store, run_record):
    store.ingest_record(run_record("r-maclr", "maclr", {"P@1": 10.0}, minute=1, supervision="zero_shot"), None)
    store.ingest_record(run_record("r-maclr-full", "maclr", {"P@1": 20.0}, minute=2), None)
    rows = _by_source(build_table(store, DATASET))
    assert rows["r-maclr"]["setting"] == "zero-shot" and rows["r-maclr"]["P@1 Δ"] == pytest.approx(1.0)
    assert rows["r-maclr-full"]["delta_vs"] is None  # MACLR publishes only zero-shot numbers here


def test_best_cells_per_metric_skip_partial_rows(store):
    table = build_table(store, DATASET)
    ngame = next(i for i, r in enumerate(table.rows) if r["method"] == "NGAME")
    lmtx = next(i for i, r in enumerate(table.rows) if r["method"] == "LMTX")
    assert table.rows[lmtx]["P@1"] == 60.0 and not table.rows[lmtx]["ranked"]  # highest, but on 500 queries
    assert table.best == {"P@1": {ngame}, "P@5": {ngame}, "PSP@1": {ngame}}
    assert table.is_best(ngame, "P@1") and not table.is_best(lmtx, "P@1")
    assert "evaluated on 500 test queries" in table.rows[lmtx]["notes"]
    assert "rows evaluated on part of the test set are not ranked" in table.notes


def test_sampled_runs_are_kept_apart_and_not_ranked(store, run_record):
    store.ingest_record(run_record("r-sample", "dexml", {"P@1": 90.0}, minute=3, gpus=1, n_queries_evaluated=100), None)
    table = build_table(store, DATASET)
    rows = _by_source(table)
    assert {"r-dexml-best", "r-sample"} <= set(rows)  # the sample does not displace the full run
    assert rows["r-sample"]["coverage"] == 10.0 and rows["r-sample"]["ranked"] is False
    assert table.rows.index(rows["r-sample"]) not in table.best["P@1"]


def test_compute_columns(store):
    table = build_table(store, DATASET)
    rows = _by_source(table)
    dexml, tfidf = rows["r-dexml-best"], rows["r-tfidf"]
    paper = next(r for r in table.rows if r["source"] == "dexml:Table 2" and r["method"] == "DEXML")
    assert (dexml["gpu_hours"], dexml["gpus"], dexml["batch_size"], dexml["label_pool"]) == (
        1.0,
        "NVIDIA H100 80GB HBM3 × 2",
        256,
        "2,560 (max 2,600)",
    )
    assert (paper["gpu_hours"], paper["gpus"], paper["batch_size"], paper["label_pool"]) == (
        48.0,
        "A100 × 16",
        2048,
        "131,073",
    )
    assert (tfidf["gpus"], tfidf["gpu_hours"], tfidf["coverage"]) == ("CPU", 0.0, 100.0)
    headers = [c.header for c in table.columns]
    assert {"GPU-hours", "GPU × count", "batch size", "label pool", "coverage %", "setting", "source"} <= set(headers)


def test_latest_and_all_runs(store):
    assert "r-dexml-new" in _by_source(build_table(store, DATASET, pick="latest"))
    all_rows = _by_source(build_table(store, DATASET, all_runs=True))
    assert {"r-dexml-best", "r-dexml-new", "r-tfidf"} <= set(all_rows) and "r-failed" not in all_rows


def test_best_is_chosen_by_the_first_metric(store):
    by_psp = _by_source(build_table(store, DATASET, metrics=["psp@1", "P@1"]))  # any case
    assert "r-dexml-new" in by_psp and "r-dexml-best" not in by_psp


def test_requested_metrics_case_insensitive_and_missing_noted(store):
    table = build_table(store, DATASET, metrics=["p@1", "P@10"])
    assert table.metrics == ["P@1", "P@10"]
    assert table.notes[0] == "no row has P@10"
    assert all(row["P@10"] is None for row in table.rows)


def test_mixed_dataset_versions_are_refused_then_selectable(store, run_record):
    store.ingest_record(run_record("r-v2", "tfidf", {"P@1": 31.0}, minute=30, dataset_version="def456"), None)
    with pytest.raises(XmcbenchError, match=r"2 different settings.*version abc123.*version def456.*--dataset-version"):
        build_table(store, DATASET)
    table = build_table(store, DATASET, dataset_version="def")
    assert [r["source"] for r in table.rows if r["kind"] == "reproduced"] == ["r-v2"]
    assert table.setting["dataset_version"] == "def456"


def test_the_overview_and_the_site_keep_the_newest_setting_and_say_what_they_left_out(store, run_record):
    """One column of the overview never mixes dataset versions (the best P@1 of either would pass
    for the dataset's): the newest run's setting is kept, and a note says how many runs were not.
    The site's dataset page (no flags to choose with) does the same; the table command refuses."""
    from xmcbench.report.table import build_overview

    store.ingest_record(run_record("r-v2", "tfidf", {"P@1": 31.0}, minute=30, dataset_version="def456"), None)
    overview = build_overview(store)
    tfidf = next(row for row in overview.rows if row["method"] == "tfidf" and row["source"] == "reproduced")
    assert tfidf[DATASET] == 31.0  # the new version's run, not the old version's (whatever its P@1)
    dexml = [row for row in overview.rows if row["method"] == "dexml" and row["source"] == "reproduced"]
    assert dexml == []  # its runs were all made on the old version
    assert any(
        f"{DATASET}: 3 run(s) made under another setting (dataset version abc123" in note for note in overview.notes
    )
    page = build_table(store, DATASET, curated=True, newest_setting=True)
    assert [r["source"] for r in page.rows if r["kind"] == "reproduced"] == ["r-v2"]
    assert any("made under another setting" in note for note in page.notes)
    with pytest.raises(XmcbenchError, match=r"\(2 configurations \(best run of each\)\).*\(1 configurations"):
        build_table(store, DATASET)


def test_mixed_propensity_is_refused_then_selectable(store, run_record):
    store.ingest_record(
        run_record("r-ab", "tfidf", {"P@1": 31.0}, minute=30, propensity_a=0.55, propensity_b=1.5), None
    )
    with pytest.raises(XmcbenchError, match=r"A/B 0.6/2.6.*A/B 0.55/1.5"):
        build_table(store, DATASET)
    table = build_table(store, DATASET, propensity=(0.55, 1.5))
    assert [r["source"] for r in table.rows if r["kind"] == "reproduced"] == ["r-ab"]


def test_lower_is_better_metric_highlights_the_minimum(store, run_record):
    record = run_record("r-loss", "tfidf", {"P@1": 1.0, "loss": 2.0}, minute=40)
    record["scores"][1]["higher_is_better"] = False
    store.ingest_record(record, None)
    record = run_record("r-loss2", "other", {"P@1": 1.0, "loss": 1.0}, minute=41)
    record["scores"][1]["higher_is_better"] = False
    store.ingest_record(record, None)
    table = build_table(store, DATASET, metrics=["loss"], all_runs=True)
    best = [table.rows[i]["source"] for i in table.best["loss"]]
    assert best == ["r-loss2"]


def test_unknown_dataset_is_a_clear_error(store):
    with pytest.raises(XmcbenchError, match="nothing to show for dataset 'nope'"):
        build_table(store, "nope")


def test_published_only_dataset(store):
    table = build_table(store, "LF-WikiSeeAlso-320K")
    assert [r["source"] for r in table.rows] == ["dexml:Table 2"] and table.metrics == ["P@1"]


def test_a_filter_no_run_matches_is_noted_beside_the_published_rows(store):
    table = build_table(store, DATASET, split="train")
    assert {row["kind"] for row in table.rows} == {"published"}
    note = next(n for n in table.notes if n.startswith("no run matches"))
    assert note.startswith("no run matches --split train: published rows only; the runs of LF-AmazonTitles-131K have")
    assert "splits test" in note
    table = build_table(store, DATASET, method="NGAME")  # published, never run here
    assert "no run matches --method NGAME: published rows only; the runs of" in " ".join(table.notes)


def test_a_run_filter_on_a_dataset_without_runs_is_noted(store):
    table = build_table(store, "LF-WikiSeeAlso-320K", split="test")
    assert "no run matches --split test: no finished run of LF-WikiSeeAlso-320K is indexed; published rows only" in (
        table.notes
    )
    assert not any(n.startswith("no run matches") for n in build_table(store, "LF-WikiSeeAlso-320K").notes)
    assert not any(n.startswith("no run matches") for n in build_table(store, DATASET, split="test").notes)
    assert not any(n.startswith("no run matches") for n in build_table(store, DATASET, paper="dexml").notes)
