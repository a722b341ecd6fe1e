"""``xmcbench sweep``: recipes × grid × seeds as runs, on this machine's GPUs (or CPU) or on Slurm."""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from xmcbench.cli._common import console, err_console, handle_errors, print_rich
from xmcbench.errors import UsageError, XmcbenchError
from xmcbench.redact import redact

_STYLE = {
    "finished": "green",
    "running": "cyan",
    "submitted": "cyan",
    "failed": "red",
    "interrupted": "yellow",
    "queued": "dim",
}


def status_table(record, states: dict[str, str | None] | None = None) -> Table:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(record.counts().items()))
    table = Table(title=escape(f"{record.sweep_id} · {record.data['launcher']} · {counts}"), title_justify="left")
    for column in ("run", "status", "on", "P@1", "run id / error"):
        table.add_column(column, justify="right" if column == "P@1" else "left", overflow="fold")
    for e in record.entries:
        status = e["status"] + (" (kept)" if e.get("kept") else "")
        if states and states.get(e["key"]):
            status += f" [{states[e['key']]}]"
        p1 = f"{e['P@1']:.2f}" if isinstance(e.get("P@1"), (int, float)) else ""
        detail = e["error"] if e.get("error") and e["status"] != "finished" else e.get("run_id") or ""
        if e.get("floors_missed"):
            status += " below floor"
            detail = "; ".join(e["floors_missed"])
        table.add_row(
            escape(e["key"]),
            f"[{_STYLE.get(e['status'], '')}]{escape(status)}[/]" if _STYLE.get(e["status"]) else escape(status),
            escape(e.get("devices") or ""),
            p1,
            escape(detail or ""),
        )
    return table


class _Display:
    """A live table in a terminal; one line per change otherwise (a log file stays readable)."""

    def __init__(self, live: bool):
        self.live = None
        self.seen: dict[str, str] = {}
        if live:
            from rich.live import Live

            self.live = Live(console=console, refresh_per_second=2, transient=False)

    def __enter__(self):
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, record) -> None:
        if self.live is not None:
            self.live.update(status_table(record))
            return
        for e in record.entries:
            state = f"{e['status']}|{e.get('run_id')}"
            if self.seen.get(e["key"]) == state:
                continue
            self.seen[e["key"]] = state
            extra = ""
            if e["status"] == "queued":
                continue  # the plan was shown as a whole; a queued run gets a line when it starts
            if e["status"] == "finished" and isinstance(e.get("P@1"), (int, float)):
                extra = f" P@1 {e['P@1']:.2f}" + (" (kept: finished earlier)" if e.get("kept") else "")
                if e.get("floors_missed"):
                    extra += " BELOW FLOOR: " + "; ".join(e["floors_missed"])
            elif e["status"] == "running" and e.get("devices"):
                extra = f" on {e['devices']}"
            elif e.get("error") and e["status"] in ("failed", "interrupted", "running"):
                extra = f": {e['error']}"
            console.print(
                f"{escape(record.sweep_id)}  {escape(e['key'])}: {escape(e['status'])}{escape(extra)}"
                + (f"  [dim]{escape(e['run_id'])}[/]" if e.get("run_id") and e["status"] != "queued" else ""),
                highlight=False,
                soft_wrap=True,
            )


def _show_status(sweep_id: str) -> None:
    from xmcbench.sweep import SweepRecord
    from xmcbench.sweep.launch import outcome, read_run
    from xmcbench.sweep.record import sweep_path, sweep_running
    from xmcbench.sweep.slurm import job_state

    record = SweepRecord.load(sweep_id)
    sweep_id = record.sweep_id  # "latest" resolved
    runs_dir = Path(record.data["runs_dir"])
    states = {}
    for e in record.entries:
        if e.get("run_id") and e["status"] in ("running", "submitted", "queued", "interrupted", "failed"):
            ended = outcome(runs_dir, e["run_id"], None, Path(e["log"]) if e.get("log") else None, e.get("expect"))
            if (runs_dir / e["run_id"]).exists():
                e.update(ended)
        if record.data["launcher"] == "slurm":
            states[e["key"]] = job_state(sweep_id, e.get("job_id"))
    if record.data["launcher"] != "slurm" and sweep_running(sweep_id) is False:
        # a sweep killed outright (SIGKILL, a lost terminal) never wrote how its runs ended
        for e in record.entries:
            if e["status"] in ("running", "queued") and read_run(runs_dir, e.get("run_id")) is None:
                e["status"] = "interrupted"
                e["error"] = "the sweep is no longer running; the same sweep command resumes it"
    print_rich(status_table(record, states))  # piped: whole run ids, one row a line
    console.print(f"sweep record: {escape(str(sweep_path(sweep_id)))}", highlight=False, soft_wrap=True)


@handle_errors
def sweep(
    recipes: Annotated[
        list[str] | None,
        typer.Argument(
            help="Recipe files (or shipped names such as smoke/tfidf); a shell glob works: recipes/smoke/*.yaml."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a key in every run: --set training.epochs=3 (repeatable)."),
    ] = None,
    grid: Annotated[
        list[str] | None,
        typer.Option(help="Values to sweep: --grid training.lr=1e-4,2e-4 (repeatable; runs = product of all grids)."),
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Seeds (training.seed), one run each: 0,1,2 or 0-4. Default: each recipe's seed.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the runs (and what a rerun would skip) and stop.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Run again even runs this sweep already finished.")] = False,
    launcher: Annotated[str, typer.Option(help="local (this machine) or slurm (submit with submitit).")] = "local",
    gpus: Annotated[
        str | None,
        typer.Option(help="GPU ids to queue runs over, e.g. 0,1,2,3 (default: all visible; 'none' for CPU only)."),
    ] = None,
    jobs: Annotated[int, typer.Option(help="CPU runs at once when runs go on CPU (they share the cores).")] = 1,
    partition: Annotated[str | None, typer.Option(help="Slurm partition.")] = None,
    time: Annotated[str, typer.Option(help="Slurm time limit per run (HH:MM:SS or D-HH:MM:SS).")] = "24:00:00",
    gpus_per_node: Annotated[int, typer.Option(help="GPUs on each Slurm node (multi-node runs split over nodes).")] = 8,
    cpus_per_task: Annotated[int | None, typer.Option(help="Slurm CPUs per task.")] = None,
    mem_gb: Annotated[int | None, typer.Option(help="Slurm memory per node, GB.")] = None,
    account: Annotated[str | None, typer.Option(help="Slurm account.")] = None,
    qos: Annotated[str | None, typer.Option(help="Slurm quality of service.")] = None,
    slurm_executor: Annotated[
        str, typer.Option(help="submitit executor: slurm, or local (the Slurm path with local processes; tests).")
    ] = "slurm",
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Slurm: wait for the jobs and record how each ended.")
    ] = False,
    status: Annotated[
        str | None, typer.Option("--status", help="Show where each run of sweep SWEEP_ID ('latest') is, and stop.")
    ] = None,
    db: Annotated[Path | None, typer.Option(help="Results database (default: $XMCBENCH_HOME/xmcbench.duckdb).")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where run folders go (default: $XMCBENCH_HOME/runs).")] = None,
) -> None:
    """Run recipes × grid × seeds: a queue over this machine's GPUs (or CPU with --jobs), or Slurm jobs.

    Every run is validated before any starts. Each run is its own process pinned to its GPUs
    (CUDA_VISIBLE_DEVICES; several GPUs through torchrun). Ctrl-C stops the running runs and
    records them interrupted; the same command again resumes those and skips finished ones (same
    recipe, data and code). `xmcbench table --sweep SWEEP_ID` shows the sweep's results.

    Examples:

      xmcbench sweep recipes/smoke/*.yaml --seeds 0,1 --jobs 2      # CPU, two runs at a time
      xmcbench sweep recipes/dexml.yaml --grid training.lr=1e-4,2e-4 --seeds 0-2 --dry-run
      xmcbench sweep --status latest
    """
    from xmcbench.sweep import LAUNCHERS, SlurmOptions, expand, preview, run_sweep
    from xmcbench.sweep.local import parse_gpus

    if status is not None:
        if recipes:
            raise UsageError("--status shows an existing sweep; give no recipes with it")
        _show_status(status)
        return
    if not recipes:
        raise UsageError("give recipe files to sweep (e.g. recipes/smoke/*.yaml), or --status SWEEP_ID")
    # the options a run would refuse, refused before the plan (a --dry-run checks them too)
    if launcher not in LAUNCHERS:
        raise XmcbenchError(f"unknown --launcher {launcher!r}; use {' or '.join(LAUNCHERS)}")
    if jobs < 1:
        raise XmcbenchError(f"--jobs must be at least 1, got {jobs}")
    gpu_ids = [] if gpus is not None and gpus.strip().lower() in ("none", "cpu", "") else parse_gpus(gpus)
    plan = expand(recipes, sets=set_ or [], grid=grid or [], seeds=seeds)
    if dry_run:
        table = Table(title=escape(f"{plan.sweep_id}: {_runs(len(plan.runs))} (dry run)"), title_justify="left")
        for column in ("#", "run", "GPUs", "overrides", "would"):
            table.add_column(column, overflow="fold")
        for i, (run, action) in enumerate(preview(plan, runs_dir=runs_dir, db=db, force=force), 1):
            table.add_row(
                str(i), escape(run.key), str(run.gpus), escape(redact(" ".join(run.overrides))), escape(action)
            )
        print_rich(table)
        return
    options = SlurmOptions(
        partition=partition,
        time=time,
        gpus_per_node=gpus_per_node,
        cpus_per_task=cpus_per_task,
        mem_gb=mem_gb,
        account=account,
        qos=qos,
        executor=slurm_executor,
    )
    command = "xmcbench " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    console.print(f"sweep {plan.sweep_id}: {_runs(len(plan.runs))}", highlight=False, soft_wrap=True)
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill SWEEP` stops its runs like Ctrl-C
    try:
        with _Display(live=console.is_terminal) as display:
            record = run_sweep(
                plan,
                launcher=launcher,
                gpus=gpu_ids,
                jobs=jobs,
                force=force,
                runs_dir=runs_dir,
                db=db,
                slurm=options,
                wait=wait,
                command=command,
                on_change=display.update,
            )
    except KeyboardInterrupt:
        err_console.print(
            f"[yellow]interrupted[/]: running runs are recorded as interrupted; the same command resumes "
            f"them and skips finished ones (`xmcbench sweep --status {plan.sweep_id}`)",
            highlight=False,
        )
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    counts = record.counts()
    console.print(
        f"sweep {record.sweep_id}: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + f"; results: xmcbench table --sweep {record.sweep_id}",
        highlight=False,
        soft_wrap=True,
    )
    if launcher == "slurm" and not wait:
        console.print(f"follow it with: xmcbench sweep --status {record.sweep_id}", highlight=False, soft_wrap=True)
        return
    for e in record.below_floor():
        err_console.print(f"[red]✗[/] {escape(e['key'])}: {escape('; '.join(e['floors_missed']))}", highlight=False)
    if any(e["status"] != "finished" for e in record.entries) or record.below_floor():
        raise typer.Exit(1)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"
