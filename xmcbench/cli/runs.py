"""``xmcbench runs list`` and ``xmcbench runs show RUN_ID``: the runs indexed in the results database."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import console, err_console, handle_errors

app = typer.Typer(help="List and inspect the runs indexed in the results database.", no_args_is_help=True)

DbOption = Annotated[Optional[Path], typer.Option(help="DuckDB results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")]
# record.STATUSES, spelled out so that `xmcbench --help` need not import the store (and DuckDB);
# a test keeps the two equal. As an Enum, click refuses anything else and lists these.
RunStatus = Enum("RunStatus", {name: name for name in ("running", "finished", "failed", "interrupted")}, type=str)
_STATUS_STYLE = {"finished": "green", "running": "cyan", "failed": "red", "interrupted": "yellow"}


@app.command("list")
@handle_errors
def list_runs(
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="Only runs on this dataset (case-insensitive).")] = None,
    method: Annotated[Optional[str], typer.Option("--method", "-m", help="Only runs of this method.")] = None,
    status: Annotated[Optional[RunStatus], typer.Option(help="Only runs with this status (a running run whose process is gone counts as interrupted).")] = None,
    db: DbOption = None,
) -> None:
    """Indexed runs, newest first, with their P@1 and GPU-hours."""
    from xmcbench.store import Store

    with Store.open(db, read_only=True) as store:
        _note(store)
        runs = store.runs(dataset=dataset, method=method, status=status.value if status else None)
        p1 = {s["run_id"]: s["value"] for s in store.scores(dataset=dataset, method=method, names=["P@1"])}
        path = store.path
    if not runs:
        console.print(f"no runs in {path} match; index run directories with `xmcbench ingest DIR`", highlight=False, markup=False)
        return
    table = Table(title=f"{len(runs)} runs in {escape(str(path))}")
    for header, justify in (("run id", "left"), ("status", "left"), ("dataset", "left"), ("split", "left"),
                            ("method", "left"), ("encoder", "left"), ("P@1", "right"), ("created (UTC)", "left")):
        table.add_column(header, justify=justify)
    for run in runs:
        style = _STATUS_STYLE.get(run["status"], "")
        table.add_row(
            escape(run["run_id"]),
            f"[{style}]{escape(run['status'])}[/]" if style else escape(run["status"]),
            escape(run["dataset"]),
            escape(run["split"]),
            escape(run["method"]),
            escape(run["encoder"] or "–"),
            f"{p1[run['run_id']]:.2f}" if run["run_id"] in p1 else "–",
            f"{run['created_at']:%Y-%m-%d %H:%M}" if run["created_at"] else "–",
        )
    console.print(table)


@app.command("show")
@handle_errors
def show(
    run_id: Annotated[str, typer.Argument(help="Run id, or a prefix that matches one run.")],
    db: DbOption = None,
) -> None:
    """One run's record: task, scores with 95% CIs, compute, method accounting, provenance."""
    from xmcbench.store import Store

    with Store.open(db, read_only=True) as store:
        _note(store)
        run = store.get_run(run_id)
    record = run["record"]
    style = _STATUS_STYLE.get(run["status"], "")
    gone = " (recorded as running; its process is gone)" if run["status"] != record["status"] else ""
    console.print(f"[bold]{escape(record['run_id'])}[/]  [{style}]{escape(str(run['status']))}[/]{gone}", highlight=False)
    console.print(f"created {record.get('created_at')}  finished {record.get('finished_at') or '–'}  dir {escape(str(run['run_dir'] or '–'))}", highlight=False)
    if record.get("error"):
        console.print(f"[red]error:[/] {escape(record['error'])}", highlight=False)
    console.print(_fields("task", record.get("task")))
    console.print(_fields("model", record.get("model")))
    console.print(_scores(record))
    compute = dict(record.get("compute") or {})
    walls = compute.pop("wall_time_s", None) or {}
    compute.update({f"wall {phase} (s)": seconds for phase, seconds in walls.items()})
    console.print(_fields("compute", compute))
    console.print(_fields("accounting", record.get("accounting")))
    provenance = dict(record.get("provenance") or {})
    packages = provenance.pop("packages", None) or {}
    if packages:
        provenance["packages"] = ", ".join(f"{name} {version}" for name, version in sorted(packages.items()))
    console.print(_fields("provenance", provenance))


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
        ci = f"{score['ci_lo']:.2f} – {score['ci_hi']:.2f}" if score.get("ci_lo") is not None and score.get("ci_hi") is not None else "–"
        by_group = [groups[g].get(score["name"]) for g in groups]
        table.add_row(escape(score["name"]), f"{score['value']:.2f}", ci, *("–" if v is None else f"{v:.2f}" for v in by_group))
    return table
