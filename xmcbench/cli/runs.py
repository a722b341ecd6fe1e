"""``xmcbench runs list`` and ``xmcbench runs show RUN_ID``: the runs indexed in the results database."""

from __future__ import annotations

from datetime import timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import (
    FormatHelp,
    check_format,
    console,
    emit_rows,
    err_console,
    handle_errors,
    heal_finished_runs,
    print_rich,
    strict_json,
)

app = typer.Typer(help="List and inspect the runs indexed in the results database.", no_args_is_help=True)

DbOption = Annotated[
    Path | None, typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")
]
# record.STATUSES, spelled out so that `xmcbench --help` need not import the store (and DuckDB);
# a test keeps the two equal. As an Enum, click refuses anything else and lists these.
RunStatus = Enum("RunStatus", {name: name for name in ("running", "finished", "failed", "interrupted")}, type=str)
LIST_COLUMNS = ["run_id", "status", "dataset", "split", "method", "encoder", "supervision", "P@1", "created_at"]
_STATUS_STYLE = {"finished": "green", "running": "cyan", "failed": "red", "interrupted": "yellow"}


@app.command("list")
@handle_errors
def list_runs(
    dataset: Annotated[
        str | None, typer.Option("--dataset", "-d", help="Only runs on this dataset (case-insensitive).")
    ] = None,
    method: Annotated[str | None, typer.Option("--method", "-m", help="Only runs of this method.")] = None,
    status: Annotated[
        RunStatus | None,
        typer.Option(help="Only runs with this status (a running run whose process is gone counts as interrupted)."),
    ] = None,
    db: DbOption = None,
    format: Annotated[str, typer.Option("--format", "-f", help=FormatHelp)] = "rich",
) -> None:
    """Indexed runs, newest first, with their status and P@1."""
    from xmcbench.store import Store

    check_format(format)
    with Store.open(db, read_only=True) as store:
        _note(store)
        runs = store.runs(dataset=dataset, method=method)
        if heal_finished_runs(store, runs):
            runs = store.runs(dataset=dataset, method=method)
        if status is not None:  # after indexing: a run the database had as interrupted may be finished
            runs = [r for r in runs if r["status"] == status.value]
        p1 = {s["run_id"]: s["value"] for s in store.scores(dataset=dataset, method=method, names=["P@1"])}
        path = store.path
    if format != "rich":
        emit_rows(
            [
                {
                    "run_id": r["run_id"],
                    "status": r["status"],
                    "dataset": r["dataset"],
                    "split": r["split"],
                    "method": r["method"],
                    "encoder": r["encoder"],
                    "supervision": r.get("supervision"),
                    "P@1": p1.get(r["run_id"]),
                    "created_at": _utc(r["created_at"]),
                }
                for r in runs
            ],
            format,
            columns=LIST_COLUMNS,  # no runs: still the header, so a script reads an empty table
        )
        return
    if not runs:
        console.print(
            f"no runs in {path} match; index run directories with `xmcbench ingest DIR`",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return
    columns = [
        ("run id", "left"),
        ("status", "left"),
        ("dataset", "left"),
        ("split", "left"),
        ("method", "left"),
        ("encoder", "left"),
        ("P@1", "right"),
        ("created (UTC)", "left"),
    ]
    rows = [
        [
            run["run_id"],
            run["status"],
            run["dataset"],
            run["split"],
            run["method"],
            run["encoder"] or "–",
            f"{p1[run['run_id']]:.2f}" if run["run_id"] in p1 else "–",
            f"{run['created_at']:%Y-%m-%d %H:%M}" if run["created_at"] else "–",
        ]
        for run in runs
    ]
    # In a narrow terminal, whole columns go (least needed first) rather than squeezing any: the
    # run id in particular stays whole, for `runs show` and `compare`.
    keep = list(range(len(columns)))
    if console.is_terminal:
        natural = [max(len(columns[i][0]), *(len(r[i]) for r in rows)) + 3 for i in range(len(columns))]
        for drop in (5, 3, 7, 2, 1, 4):  # encoder, split, created, dataset, status, method
            if sum(natural[i] for i in keep) + 1 <= console.width:
                break
            keep.remove(drop)
    table = Table(title=f"{len(runs)} runs in {escape(str(path))}")
    for i in keep:
        header, justify = columns[i]
        table.add_column(
            header, justify=justify, no_wrap=True, min_width=max(len(r[0]) for r in rows) if i == 0 else None
        )
    for run, row in zip(runs, rows, strict=True):
        cells = [escape(row[i]) for i in keep]
        style = _STATUS_STYLE.get(run["status"], "")
        if style and 1 in keep:
            cells[keep.index(1)] = f"[{style}]{cells[keep.index(1)]}[/]"
        table.add_row(*cells)
    if len(keep) < len(columns):
        table.caption = "not shown for lack of width: " + ", ".join(
            columns[i][0] for i in range(len(columns)) if i not in keep
        )
    print_rich(table)


@app.command("show")
@handle_errors
def show(
    run_id: Annotated[str, typer.Argument(help="Run id, or a prefix that matches one run.")],
    db: DbOption = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="rich, markdown, csv or json. json: the run record with "
            "'status' (effective), 'run_dir' and 'train_log' (per-epoch facts) added; "
            "csv / markdown: its scores.",
        ),
    ] = "rich",
) -> None:
    """One run's record: task, scores with 95% CIs, compute, method accounting, provenance, loss curve."""
    from xmcbench.store import Store
    from xmcbench.store.record import read_train_log

    check_format(format)
    with Store.open(db, read_only=True) as store:
        _note(store)
        run = store.get_run(run_id)
        if heal_finished_runs(store, [run]):
            run = store.get_run(run_id)
    record = run["record"]
    train_log = read_train_log(run["run_dir"])
    if format == "json":
        typer.echo(
            strict_json(
                {
                    **record,
                    "status": run["status"],
                    "recorded_status": record.get("status"),
                    "run_dir": str(run["run_dir"]) if run["run_dir"] else None,
                    "train_log": train_log,
                },
                indent=2,
                ensure_ascii=False,
                default=str,
            )
        )
        return
    if format != "rich":
        emit_rows(
            [
                {"metric": s["name"], "value": s["value"], "ci_lo": s.get("ci_lo"), "ci_hi": s.get("ci_hi")}
                for s in record.get("scores") or []
            ],
            format,
        )
        return
    style = _STATUS_STYLE.get(run["status"], "")
    gone = " (recorded as running; its process is gone)" if run["status"] != record["status"] else ""
    console.print(
        f"[bold]{escape(record['run_id'])}[/]  [{style}]{escape(str(run['status']))}[/]{gone}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"created {record.get('created_at')}  finished {record.get('finished_at') or '–'}  dir {escape(str(run['run_dir'] or '–'))}",
        highlight=False,
        soft_wrap=True,
    )
    # piped, each section is printed whole (print_rich): hashes, paths and ids stay on one line
    if record.get("error"):
        console.print(f"[red]error:[/] {escape(record['error'])}", highlight=False, soft_wrap=True)
    print_rich(_fields("task", record.get("task")))
    print_rich(_fields("model", record.get("model")))
    print_rich(_scores(record))
    compute = dict(record.get("compute") or {})
    walls = compute.pop("wall_time_s", None) or {}
    compute.update({f"wall {phase} (s)": seconds for phase, seconds in walls.items()})
    print_rich(_fields("compute", compute))
    print_rich(_fields("accounting", record.get("accounting")))
    provenance = dict(record.get("provenance") or {})
    packages = provenance.pop("packages", None) or {}
    if packages:
        provenance["packages"] = ", ".join(f"{name} {version}" for name, version in sorted(packages.items()))
    print_rich(_fields("provenance", provenance))
    if train_log:
        console.print(loss_curve(train_log), highlight=False, markup=False, soft_wrap=True)


def loss_curve(entries: list[dict[str, Any]], height: int = 8, width: int = 50) -> str:
    """A small text plot of the loss per epoch, under one line of facts per epoch."""
    from xmcbench.progress import duration

    points = [(e.get("epoch"), e.get("loss")) for e in entries if e.get("loss") is not None]
    lines = ["training (train_log.jsonl)"]
    for e in entries:
        bits = [f"epoch {e.get('epoch')}/{e.get('epochs')}"]
        if e.get("stage"):
            bits.append(str(e["stage"]))
        if e.get("loss") is not None:
            bits.append(f"loss {e['loss']:.4f}")
        if e.get("lr") is not None:
            bits.append(f"lr {e['lr']:.2e}")
        if e.get("queries_per_s") is not None:
            bits.append(f"{e['queries_per_s']:,.1f} queries/s")
        if e.get("pool_size") is not None:
            bits.append(f"label pool {e['pool_size']:,.0f}")
        if e.get("elapsed_s") is not None:
            bits.append(f"elapsed {duration(e['elapsed_s'])}")
        lines.append("  " + " | ".join(bits))
    if len(points) < 2:
        return "\n".join(lines)
    values = [v for _, v in points]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    # a few epochs are spread over the width (a point every few columns), many are sampled
    cols = min(width, max(len(values), 6 * (len(values) - 1) + 1))
    shown = [round(j * (len(values) - 1) / (cols - 1)) for j in range(cols)] if len(values) > cols else None
    grid = [[" "] * cols for _ in range(height)]
    for i, v in enumerate(values if shown is None else [values[j] for j in shown]):
        x = i if shown is not None else round(i * (cols - 1) / (len(values) - 1))
        row = height - 1 - round((v - lo) / span * (height - 1))
        grid[row][x] = "●"
    lines.append(f"loss per epoch ({len(points)} epochs)")
    for r, cells in enumerate(grid):
        label = f"{hi:9.4g}" if r == 0 else f"{lo:9.4g}" if r == height - 1 else " " * 9
        lines.append(f"{label} ┤" + "".join(cells))
    lines.append(" " * 10 + "└" + "─" * cols)
    first, last = points[0][0], points[-1][0]
    lines.append(" " * 11 + f"{first}".ljust(max(cols - len(str(last)), 1)) + f"{last}  (epoch)")
    return "\n".join(lines)


def _utc(moment) -> str | None:
    """ISO 8601 with its offset: the database keeps UTC times without one (record.json has +00:00)."""
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).isoformat()


def _note(store) -> None:
    note = store.schema_note()
    if note:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)


def _fields(title: str, values: dict[str, Any] | None) -> Table:
    table = Table(title=title, show_header=False, title_justify="left", title_style="bold")
    table.add_column("field", style="dim")
    table.add_column("value", overflow="fold")
    for key, value in (values or {}).items():
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, int):
            text = f"{value:,}"
        elif isinstance(value, float):
            text = f"{value:.4g}" if abs(value) < 1 else f"{value:,.2f}".rstrip("0").rstrip(".")
        elif isinstance(value, list):
            text = ", ".join(str(v) for v in value) or "–"
        else:
            text = "–" if value is None else str(value)
        table.add_row(escape(str(key)), escape(text))
    return table


def _scores(record: dict) -> Table:
    groups = record.get("groups") or {}
    table = Table(title="scores (95% bootstrap CI)", title_justify="left", title_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    for name in groups:
        table.add_column(escape(name), justify="right")
    for score in record.get("scores") or []:
        ci = (
            f"{score['ci_lo']:.2f} – {score['ci_hi']:.2f}"
            if score.get("ci_lo") is not None and score.get("ci_hi") is not None
            else "–"
        )
        by_group = [groups[g].get(score["name"]) for g in groups]
        table.add_row(
            escape(score["name"]), f"{score['value']:.2f}", ci, *("–" if v is None else f"{v:.2f}" for v in by_group)
        )
    return table
