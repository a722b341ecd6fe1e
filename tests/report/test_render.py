"""Rendering tables: every format carries the numbers, best values are marked."""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser

import pytest
from rich.console import Console

from xmcbench.errors import XmcbenchError
from xmcbench.report import build_table, render, to_rich

DATASET = "LF-AmazonTitles-131K"


@pytest.fixture
def table(store):
    return build_table(store, DATASET)


def test_json_is_a_list_of_rows_keyed_by_metric(table):
    rows = json.loads(render(table, "json"))
    assert isinstance(rows, list) and len(rows) == len(table.rows)
    dexml = next(r for r in rows if r["source"] == "r-dexml-best")
    assert (dexml["P@1"], dexml["P@5"], dexml["PSP@1"]) == (44.0, 21.0, 34.0)
    assert dexml["P@1 Δ"] == 1.5 and dexml["kind"] == "reproduced" and dexml["dataset"] == DATASET
    ngame = next(r for r in rows if r["method"] == "NGAME")
    assert ngame["best"] == ["P@1", "P@5", "PSP@1"] and dexml["best"] == []
    assert ngame["P@1 Δ"] is None  # every row has every column


def test_csv_has_headers_and_raw_numbers(table):
    rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    assert len(rows) == len(table.rows)
    dexml = next(r for r in rows if r["source"] == "r-dexml-best")
    assert (
        float(dexml["P@1"]) == 44.0
        and float(dexml["P@1 Δ"]) == 1.5
        and dexml["GPU × count"] == "NVIDIA H100 80GB HBM3 × 2"
    )
    tfidf = next(r for r in rows if r["source"] == "r-tfidf")
    assert tfidf["P@1 Δ"] == "" and tfidf["batch size"] == ""


def test_markdown_bolds_best_and_aligns(table):
    text = render(table, "markdown")
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| method"))
    assert "| P@1 | P@1 Δ |" in header and "GPU-hours" in header
    ngame = next(line for line in lines if "| NGAME |" in line)
    assert "| **46.00** |" in ngame and "| **38.00** |" in ngame
    dexml = next(line for line in lines if "r-dexml-best" in line)
    assert "| 44.00 | +1.50 |" in dexml and "**" not in dexml
    assert sum(1 for line in lines if line.startswith("| ")) == 1 + len(table.rows)


def test_rich_marks_best_in_bold_green(table):
    console = Console(width=250, record=True, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print(to_rich(table))
    styled = console.export_text(styles=True)
    assert "\x1b[1;32m46.00" in styled  # bold green
    plain = render(table, "rich", width=250)
    assert "r-dexml-best" in plain and "44.00" in plain and "+1.50" in plain and "NGAME" in plain


def test_html_is_a_standalone_table(table):
    text = render(table, "html")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.best, self._in_strong = [], [], False

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            if tag == "strong" and ("class", "best") in attrs:
                self._in_strong = True

        def handle_endtag(self, tag):
            if tag == "strong":
                self._in_strong = False

        def handle_data(self, data):
            if self.rows and data.strip():
                self.rows[-1].append(data.strip())
            if self._in_strong:
                self.best.append(data)

    parser = Cells()
    parser.feed(text)
    assert len(parser.rows) == 1 + len(table.rows)
    assert sorted(parser.best) == ["21.50", "38.00", "46.00"]


def test_text_is_escaped(store, run_record):
    record = run_record("r-<b>|[red]", "m<i>|[bold]x[/]", {"P@1": 1.0}, minute=50)
    store.ingest_record(record, None)
    table = build_table(store, DATASET)
    assert "m&lt;i&gt;" in render(table, "html") and "<i>" not in render(table, "html")
    assert "m<i>\\|[bold]x[/]" in render(table, "markdown")
    assert "m<i>|[bold]x[/]" in render(table, "rich", width=300)


def test_unknown_format(table):
    with pytest.raises(XmcbenchError, match="unknown table format 'xls'"):
        render(table, "xls")
