"""The smoke suite with several recipes at once: one sweep of the smoke recipes, each run in its
own process (the local launcher splits the cores between them), every run fresh."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xmcbench.errors import XmcbenchError
from xmcbench.run.runner import RunResult
from xmcbench.run.smoke import SmokeOutcome, load_smoke


def run_smoke_together(
    directory: Path | None = None,
    *,
    jobs: int = 2,
    db: Path | None = None,
    runs_dir: Path | None = None,
    only: list[str] | None = None,
    on_change: Callable | None = None,
) -> list[SmokeOutcome]:
    """Run every smoke recipe, ``jobs`` at a time, and check its floors; ``on_change`` gets the
    sweep record as runs start and end."""
    from xmcbench.sweep import expand, run_sweep
    from xmcbench.sweep.launch import read_run

    if jobs < 1:
        raise XmcbenchError("--jobs must be at least 1")
    outcomes, runnable = load_smoke(directory, only)
    if not runnable:
        return outcomes
    plan = expand([str(outcome.recipe) for outcome, _ in runnable])
    record = run_sweep(
        plan,
        gpus=[],
        jobs=jobs,
        force=True,  # a smoke check runs the recipes; it does not reuse an earlier sweep's results
        runs_dir=runs_dir,
        db=db,
        command=f"xmcbench smoke --jobs {jobs}",
        on_change=on_change or (lambda record: None),
    )
    root = Path(record.data["runs_dir"])
    for (outcome, recipe), run in zip(runnable, plan.runs, strict=True):
        entry = record.entry(run.key)
        found = read_run(root, entry["run_id"]) if entry.get("run_id") else None
        if entry["status"] != "finished" or found is None:
            outcome.failures.append(f"run {entry['status']}: {entry.get('error') or 'see its log'}")
            continue
        outcome.result = RunResult(root / entry["run_id"], found)
        outcome.failures = outcome.result.failed_floors(recipe.expect)
    return outcomes
