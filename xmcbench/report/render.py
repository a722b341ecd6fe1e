"""Rendering a ``Table`` as rich (terminal), markdown, csv, json or html.

Human formats (rich, markdown, html) show metrics with two decimals, as the papers do, Δ with a
sign, and the best value of each metric highlighted (bold green in the terminal, bold in
markdown, ``<strong class="best">`` in html). Machine formats (csv, json) keep numbers as numbers
(rounded to 4 decimals); json is a list of row objects keyed by column (metric names as keys),
with ``best`` listing the metrics in which the row is best.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from xmcbench.errors import XmcbenchError
from xmcbench.report.table import Column, Table

FORMATS = ("rich", "markdown", "csv", "json", "html")
EMPTY = "–"


def format_cell(column: Column, value: Any) -> str:
    """A cell as people read it; ``EMPTY`` for no value."""
    if value is None:
        return EMPTY
    if column.kind == "metric":
        return f"{value:.2f}"
    if column.kind == "delta":
        return f"{value:+.2f}"
    if column.kind == "interval":
        return f"[{value[0]:+.2f}, {value[1]:+.2f}]"
    if column.kind == "number":
        if isinstance(value, int):
            return f"{value:,}"
        if value == 0:
            return "0"
        return f"{value:.3f}" if abs(value) < 0.1 else f"{value:,.1f}"
    return str(value)


def _machine(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_machine(v) for v in value]
    if isinstance(value, float):  # NaN/inf have no strict-JSON spelling: they mean "no value"
        return round(value, 4) if math.isfinite(value) else None
    return value


# Columns every reader needs; the rest go, rightmost first, when the terminal is too narrow.
NAME_COLUMNS = ("method", "setting", "source")
NAME_MAX = 32  # a longer name wraps (never below this width)


def fit_columns(table: Table, width: int | None) -> tuple[list[Column], list[Column]]:
    """(columns shown, columns dropped) so that the table fits ``width`` without squeezing names.

    Name columns (method, setting, source) keep their full width (up to ``NAME_MAX``); other
    columns are dropped from the right: first compute and provenance columns, then metrics (a
    metric goes together with its Δ columns). ``width=None``: everything.
    """
    # a column with no value in any row says nothing in a terminal (csv / json keep it)
    columns = [
        c
        for c in table.columns
        if c.key in NAME_COLUMNS or c.kind == "metric" or any(row.get(c.key) is not None for row in table.rows)
    ]
    if width is None:
        return columns, []

    def natural(column: Column) -> int:
        cells = [len(format_cell(column, row.get(column.key))) for row in table.rows]
        size = max([len(column.header), *cells])
        return min(size, NAME_MAX) if column.kind == "text" else size

    def total(cols: list[Column]) -> int:
        return sum(natural(c) + 3 for c in cols) + 1  # "│ " + cell + " " per column, closing "│"

    metric_names = list(table.metrics)
    optional = [c for c in columns if c.key not in NAME_COLUMNS and not _belongs_to_metric(c, metric_names)]
    dropped: list[Column] = []
    shown = list(columns)
    for column in reversed(optional):  # compute columns first, rightmost first
        if total(shown) <= width:
            break
        shown.remove(column)
        dropped.append(column)
    for name in reversed(metric_names[1:]):  # then metrics, rightmost first; the first one always stays
        if total(shown) <= width:
            break
        for column in [c for c in shown if _belongs_to_metric(c, [name])]:
            shown.remove(column)
            dropped.append(column)
    return shown, dropped


def _belongs_to_metric(column: Column, names: list[str]) -> bool:
    """A metric's own value and Δ columns (its Δ interval may go earlier, with the compute columns)."""
    return column.kind != "interval" and any(column.key == n or column.key.startswith(f"{n} Δ") for n in names)


def to_rich(table: Table, width: int | None = None, plain: bool = False):
    """The table for a terminal ``width`` columns wide (None: all columns); ``plain``: no colours or box art.

    Columns that do not fit are dropped (rightmost first, never the names) and named in the caption.
    With a ``width``, reproduced rows name their run "run 1", "run 2"… and the whole run ids (to
    copy into ``runs show`` or ``compare``) are listed under the table.
    """
    from rich import box
    from rich.console import Group
    from rich.text import Text

    run_ids: list[str] = []
    if width is not None:
        rows = []
        for row in table.rows:
            # the overview's reproduced rows say "reproduced": no run id to shorten
            if row["kind"] == "reproduced" and row.get("source") and row["source"] != "reproduced":
                run_ids.append(row["source"])
                row = {**row, "source": f"run {len(run_ids)}"}
            rows.append(row)
        table = Table(**{**table.__dict__, "rows": rows})
    # Sections are headed by their exact setting (few-shot-1% and few-shot-5% apart), so a setting
    # column would only repeat the heading above it: its width goes to metrics instead.
    if any(row.get("section") for row in table.rows):
        table = Table(**{**table.__dict__, "columns": [c for c in table.columns if c.key != "setting"]})
    shown, dropped = fit_columns(table, width)
    notes = list(table.notes)
    if dropped:
        notes.append(
            "not shown for lack of width: "
            + ", ".join(c.header for c in dropped)
            + " (a wider terminal, --metrics or --format csv/json show them)"
        )
    # Titles and notes carry dataset and run names: escaped so "[" prints instead of styling.
    out = RichTable(
        title=escape(table.title),
        caption=escape("\n".join(notes)) or None,  # one note per line: a wall of text hides them
        header_style="" if plain else "bold",
        box=box.ASCII if plain else box.HEAVY_HEAD,
        caption_justify="left",
    )
    for column in shown:
        if column.kind == "text":
            size = max([len(column.header)] + [len(str(row.get(column.key) or "")) for row in table.rows])
            name = column.key in NAME_COLUMNS
            out.add_column(
                escape(column.header), justify="left", min_width=min(size, NAME_MAX) if name else None, overflow="fold"
            )
        else:
            out.add_column(escape(column.header), justify="right", no_wrap=True)
    heading = None
    for i, row in enumerate(table.rows):
        if row.get("section") and _heading(row) != heading:
            heading = _heading(row)
            label = f"── {heading} ──"
            out.add_row(label if plain else f"[bold]{escape(label)}[/]", *([""] * (len(shown) - 1)))
        cells = []
        for column in shown:
            text = escape(format_cell(column, row.get(column.key)))
            best = table.is_best(i, column.key)
            cells.append(f"{text}*" if best and plain else f"[bold green]{text}[/]" if best else text)
        nxt = table.rows[i + 1] if i + 1 < len(table.rows) else None
        if "section" in row:
            end = nxt is not None and _heading(nxt) != _heading(row)
        else:  # a rule between reproduced and published rows
            end = row["kind"] == "reproduced" and (nxt is None or nxt["kind"] != "reproduced")
        out.add_row(*cells, end_section=end)
    if plain and table.best:
        out.caption = escape("\n".join([*notes, "* best value of the column"]))
    if run_ids:
        legend = Text("\n".join(f"run {i} = {run_id}" for i, run_id in enumerate(run_ids, 1)), no_wrap=True)
        return Group(out, legend)
    return out


def _heading(row: dict) -> str | None:
    """A section's heading in text tables: the exact setting (its section when it has none)."""
    return row.get("setting") or row.get("section")


def to_markdown(table: Table) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [f"**{cell(table.title)}**", ""]
    lines.append("| " + " | ".join(cell(c.header) for c in table.columns) + " |")
    lines.append("|" + "|".join("---" if c.kind == "text" else "---:" for c in table.columns) + "|")
    section = None
    for i, row in enumerate(table.rows):
        if row.get("section") and row["section"] != section:
            section = row["section"]
            lines.append("| " + " | ".join([f"_{cell(section)}_", *([""] * (len(table.columns) - 1))]) + " |")
        cells = []
        for column in table.columns:
            text = cell(format_cell(column, row.get(column.key)))
            cells.append(f"**{text}**" if table.is_best(i, column.key) else text)
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *(f"_{cell(note)}_" for note in table.notes)]
    return "\n".join(lines).rstrip() + "\n"


def to_csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.header for c in table.columns])
    for row in table.rows:
        writer.writerow(["" if row.get(c.key) is None else _machine(row.get(c.key)) for c in table.columns])
    return buffer.getvalue()


def to_json(table: Table) -> str:
    records = []
    for i, row in enumerate(table.rows):
        record = {"dataset": table.dataset, "kind": row["kind"], "ranked": row["ranked"]}
        record.update({c.key: _machine(row.get(c.key)) for c in table.columns})
        record["notes"] = row.get("notes")
        if row.get("section"):
            record["section"] = row["section"]
        record["best"] = [name for name in table.metrics if table.is_best(i, name)]
        records.append(record)
    return json.dumps(records, indent=2, ensure_ascii=False, allow_nan=False) + "\n"  # strict JSON only


def to_html(table: Table) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(c.header)}</th>" for c in table.columns)
    body = []
    for i, row in enumerate(table.rows):
        cells = []
        for column in table.columns:
            text = esc(format_cell(column, row.get(column.key)))
            align = "" if column.kind == "text" else ' class="num"'
            if table.is_best(i, column.key):
                text = f'<strong class="best">{text}</strong>'
            cells.append(f"<td{align}>{text}</td>")
        body.append(f'<tr class="{row["kind"]}">' + "".join(cells) + "</tr>")
    notes = "".join(f'<p class="note">{esc(note)}</p>' for note in table.notes)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{esc(table.title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
caption {{ font-weight: bold; text-align: left; padding: 0.4em 0; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.3em 0.7em; white-space: nowrap; }}
th {{ background: #f4f4f4; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
tr.published {{ color: #555; }}
.best {{ color: #0a7d32; }}
.note {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
<table>
<caption>{esc(table.title)}</caption>
<thead><tr>{head}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody>
</table>
{notes}
</body>
</html>
"""


def to_text(table: Table, width: int | None = None) -> str:
    """A plain table (ASCII rules, no colours; ``*`` marks the best values) for pipes and logs.

    ``width=None``: every column, at full width, however wide that is.
    """
    rich_table = to_rich(table, width=width, plain=True)
    console = Console(width=width or 100_000, record=True, file=io.StringIO(), color_system=None)
    console.print(rich_table)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def render(table: Table, fmt: str, width: int = 200) -> str:
    """The table as text in ``fmt`` (one of ``FORMATS``; "rich" gives plain text at ``width``)."""
    if fmt == "rich":
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(to_rich(table, width=width))
        return console.export_text()
    if fmt == "text":
        return to_text(table, width=None)
    writers = {"markdown": to_markdown, "csv": to_csv, "json": to_json, "html": to_html}
    if fmt not in writers:
        raise XmcbenchError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return writers[fmt](table)
