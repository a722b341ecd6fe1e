"""Sweeps: many runs (recipes × grid × seeds) from one command, on this machine or on Slurm.

    plan = expand([...recipes], sets=[...], grid=["training.lr=1e-4,2e-4"], seeds="0,1")
    record = run_sweep(plan, launcher="local", gpus=["0", "1"], jobs=2)

``plan.py`` expands and validates; ``launch.py`` decides per run (skip / resume / new) and
builds the command; ``local.py`` queues runs over GPUs or CPU slots; ``slurm.py`` submits them
with submitit; ``record.py`` keeps ``$XMCBENCH_HOME/sweeps/SWEEP_ID.json``. The results
database's ``sweeps`` table lists each sweep's runs, so ``xmcbench table --sweep`` shows exactly
that sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.sweep.launch import Launch, code_version, decide, scored
from xmcbench.sweep.plan import PlannedRun, SweepError, SweepPlan, expand, parse_grid, parse_seeds
from xmcbench.sweep.record import SweepRecord, sweep_lock, sweep_path
from xmcbench.sweep.slurm import SlurmOptions, still_queued

__all__ = [
    "PlannedRun",
    "SlurmOptions",
    "SweepError",
    "SweepPlan",
    "SweepRecord",
    "expand",
    "parse_grid",
    "parse_seeds",
    "preview",
    "run_sweep",
]

LAUNCHERS = ("local", "slurm")


def _places(runs_dir: Path | None, db: Path | None) -> tuple[Path, Path]:
    return (
        Path(runs_dir or paths.runs_dir()).expanduser().absolute(),
        Path(db or paths.default_db_path()).expanduser().absolute(),
    )


def preview(
    plan: SweepPlan, *, runs_dir: Path | None = None, db: Path | None = None, force: bool = False
) -> list[tuple[PlannedRun, str]]:
    """What running ``plan`` would do with each run (new / resume RUN / skip (finished RUN)); nothing is written."""
    runs_root, _ = _places(runs_dir, None)
    previous = SweepRecord.load(plan.sweep_id) if sweep_path(plan.sweep_id).exists() else None
    before = {e["key"]: e for e in previous.entries} if previous else {}
    code = code_version()
    earlier = _earlier_runs(plan, db, force)
    out = []
    for run in plan.runs:
        entry = before.get(run.key, {})
        if entry.get("recipe_hash") != run.recipe_hash:
            entry = {}
        action, launch, _ = decide(
            entry, run, runs_root, force=force, code=code, earlier=earlier.get(run.recipe_hash, []), wait_s=0
        )
        if action == "skip":
            out.append((run, f"skip (finished: {launch.run_id})"))
        elif action == "busy":
            out.append((run, f"busy (running: {launch.run_id})"))
        else:
            out.append((run, f"resume {launch.run_id}" if launch.resume else "new run"))
    return out


def _earlier_runs(plan: SweepPlan, db: Path | None, force: bool) -> dict[str, list[dict]]:
    """recipe hash -> the database's finished runs of that recipe (none with ``force``)."""
    import logging

    from xmcbench.store import Store
    from xmcbench.store.heal import index_finished

    if force:
        return {}
    _, db_path = _places(None, db)
    with Store.open(db_path, read_only=True, missing_ok=True) as store:
        if store.exists:  # a run killed between its finished record and its index is finished: not run again
            for run in index_finished(store, store.runs()):  # reads only unfinished runs' records
                if run.problem is not None:
                    logging.getLogger(__name__).warning(
                        "run %s finished but is not indexed (%s); `xmcbench ingest %s` indexes it",
                        run.run_id,
                        run.problem,
                        run.folder,
                    )
        return {h: store.finished_with_recipe(h) for h in {r.recipe_hash for r in plan.runs}}


def _typical_wall_s(launches: list[Launch], db: Path) -> dict[str, float]:
    """recipe path -> how long its finished runs took on this host (the results database), else what a
    ``timings.json`` beside it says (``xmcbench.sweep.order``). Only an order hint: a database that
    cannot be read leaves those recipes to the file or to plan order; it does not stop the sweep."""
    import logging
    import socket

    from xmcbench.store import Store
    from xmcbench.sweep.order import folder_timings

    paths = sorted({launch.run.recipe_path for launch in launches})
    seconds = folder_timings(paths)
    try:
        with Store.open(db, timeout_s=5.0, read_only=True, missing_ok=True) as store:
            seconds.update(store.typical_wall_s(paths, socket.gethostname()))
    except XmcbenchError as exc:
        logging.getLogger(__name__).warning("earlier run times unreadable, runs ordered without them (%s)", exc)
    return seconds


def run_sweep(
    plan: SweepPlan,
    *,
    launcher: str = "local",
    gpus: list[str] | None = None,
    jobs: int = 1,
    force: bool = False,
    runs_dir: Path | None = None,
    db: Path | None = None,
    slurm: SlurmOptions | None = None,
    wait: bool = True,
    command: str = "",
    on_change: Callable[[SweepRecord], None] = lambda record: None,
) -> SweepRecord:
    """Run (or resume) every run of ``plan``; the sweep record says how each one ended.

    ``gpus``: the GPU ids to queue runs over (None: every visible GPU; [] none: CPU runs with
    ``jobs`` at a time). KeyboardInterrupt stops the running runs, which record themselves
    interrupted; running the same plan again resumes them and skips the finished ones.
    """
    from xmcbench.store import Store
    from xmcbench.sweep.local import LocalLauncher, visible_gpus
    from xmcbench.sweep.slurm import check_available, submit
    from xmcbench.sweep.slurm import wait as wait_for_jobs

    if launcher not in LAUNCHERS:
        raise XmcbenchError(f"unknown launcher {launcher!r}; use {' or '.join(LAUNCHERS)}")
    if jobs < 1:
        raise XmcbenchError("--jobs must be at least 1")
    runs_root, db_path = _places(runs_dir, db)
    runs_root.mkdir(parents=True, exist_ok=True)
    slurm = slurm or SlurmOptions()
    if launcher == "slurm":
        check_available(slurm)
    gpu_ids = visible_gpus() if gpus is None else gpus

    with sweep_lock(plan.sweep_id):
        record = SweepRecord.open(plan, command=command, launcher=launcher, runs_dir=runs_root, db=db_path, save=False)
        code = code_version()
        earlier = _earlier_runs(plan, db_path, force)
        launches: list[Launch] = []
        for run in plan.runs:
            entry = record.entry(run.key)
            if not force and still_queued(plan.sweep_id, entry, runs_root):
                entry["error"] = f"job {entry['job_id']} is still queued or running; not submitted twice"
                continue
            action, launch, found = decide(
                entry, run, runs_root, force=force, code=code, earlier=earlier.get(run.recipe_hash, [])
            )
            if action == "skip":
                entry.update(
                    run_id=launch.run_id, status="finished", kept=True, error=None, **scored(found, run.recipe.expect)
                )
            elif action == "busy":
                entry.update(status="running", error="still running in another process; not started twice")
            else:
                entry.update(run_id=launch.run_id, status="queued", error=None, kept=False, job_id=None)
                launches.append(launch)
        local = LocalLauncher(
            record, gpus=gpu_ids, jobs=jobs, runs_dir=runs_root, db=db_path, on_change=lambda: on_change(record)
        )
        if launcher == "local":
            local.check(launches)  # before anything is written to the database
        record.save()
        with Store.open(db_path) as store:
            store.set_sweep_runs(
                plan.sweep_id,
                launcher,
                [(e["run_id"], e["key"], e["seed"]) for e in record.entries if e.get("run_id")],
            )
        on_change(record)
        if launcher == "local":
            local.run(launches, seconds=_typical_wall_s(launches, db_path))
        else:
            jobs_submitted = submit(record, launches, slurm, runs_dir=runs_root, db=db_path)
            on_change(record)
            if wait:
                wait_for_jobs(
                    record,
                    jobs_submitted,
                    runs_dir=runs_root,
                    expect={run.key: run.recipe.expect for run in plan.runs},
                    on_change=lambda: on_change(record),
                )
    return record
