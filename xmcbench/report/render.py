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
    if column.kind == "number":
        if isinstance(value, int):
            return f"{value:,}"
        if value == 0:
            return "0"
        return f"{value:.3f}" if abs(value) < 0.1 else f"{value:,.1f}"
    return str(value)


def _machine(value: Any) -> Any:
    if isinstance(value, float):  # NaN/inf have no strict-JSON spelling: they mean "no value"
        return round(value, 4) if math.isfinite(value) else None
    return value


def to_rich(table: Table) -> RichTable:
    # Titles and notes carry dataset and run names: escaped so "[" prints instead of styling.
    out = RichTable(title=escape(table.title), caption=escape("; ".join(table.notes)) or None, header_style="bold")
    for column in table.columns:
        out.add_column(escape(column.header), justify="left" if column.kind == "text" else "right", no_wrap=column.kind != "text")
    for i, row in enumerate(table.rows):
        cells = []
        for column in table.columns:
            text = escape(format_cell(column, row.get(column.key)))
            cells.append(f"[bold green]{text}[/]" if table.is_best(i, column.key) else text)
        last_reproduced = row["kind"] == "reproduced" and (i + 1 == len(table.rows) or table.rows[i + 1]["kind"] != "reproduced")
        out.add_row(*cells, end_section=last_reproduced)  # a rule between reproduced and published rows
    return out


def to_markdown(table: Table) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [f"**{cell(table.title)}**", ""]
    lines.append("| " + " | ".join(cell(c.header) for c in table.columns) + " |")
    lines.append("|" + "|".join("---" if c.kind == "text" else "---:" for c in table.columns) + "|")
    for i, row in enumerate(table.rows):
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
    notes = "".join(f"<p class=\"note\">{esc(note)}</p>" for note in table.notes)
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


def render(table: Table, fmt: str, width: int = 200) -> str:
    """The table as text in ``fmt`` (one of ``FORMATS``; "rich" gives plain text at ``width``)."""
    if fmt == "rich":
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(to_rich(table))
        return console.export_text()
    writers = {"markdown": to_markdown, "csv": to_csv, "json": to_json, "html": to_html}
    if fmt not in writers:
        raise XmcbenchError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return writers[fmt](table)
