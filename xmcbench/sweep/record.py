"""The sweep record: ``$XMCBENCH_HOME/sweeps/SWEEP_ID.json``, one entry per planned run.

    {"sweep_id", "created_at", "updated_at", "command", "launcher", "runs_dir", "db",
     "runs": [{"key", "recipe", "overrides", "seed", "recipe_hash", "gpus",
               "run_id", "status", "devices", "job_id", "error", "P@1", "log",
               "started_at", "ended_at", "kept"}]}

It is written atomically at every change, so a sweep that is killed leaves a record that names
each run it started; the run folders themselves stay the truth about each run (a rerun reads
their records). Entries are matched to the plan by key and recipe hash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import check_name, file_lock, utc_now, write_json
from xmcbench.redact import redact, redact_data
from xmcbench.sweep.plan import SweepPlan

SWEEP_SCHEMA = 1
CARRIED = (
    "run_id",
    "status",
    "devices",
    "job_id",
    "error",
    "P@1",
    "log",
    "started_at",
    "ended_at",
    "kept",
    "floors_missed",
)


def sweeps_dir() -> Path:
    return paths.home() / "sweeps"


def resolve_sweep_id(sweep_id: str) -> str:
    """``latest`` -> the sweep whose record changed last; any other id as it is."""
    if sweep_id != "latest":
        return sweep_id
    records = (
        sorted(sweeps_dir().glob("sweep-*.json"), key=lambda p: p.stat().st_mtime) if sweeps_dir().is_dir() else []
    )
    if not records:
        raise XmcbenchError(f"no sweeps yet in {sweeps_dir()}; start one with `xmcbench sweep RECIPE...`")
    return records[-1].stem


def sweep_path(sweep_id: str) -> Path:
    return sweeps_dir() / f"{check_name(sweep_id, 'sweep id')}.json"


def sweep_folder(sweep_id: str) -> Path:
    """Logs and scheduler files of one sweep."""
    return sweeps_dir() / check_name(sweep_id, "sweep id")


def sweep_lock(sweep_id: str):
    """Held while a sweep launches runs: the same sweep twice at once would start every run twice."""
    # a second of patience: `sweep --status` holds a shared lock for microseconds while it looks
    return file_lock(_lock_path(sweep_id), timeout=1, what=f"sweep {sweep_id}")


def _lock_path(sweep_id: str) -> Path:
    return sweeps_dir() / f".{sweep_id}.lock"


def sweep_running(sweep_id: str) -> bool | None:
    """Whether a process runs the sweep now (it holds ``sweep_lock``); None when that cannot be told.

    Only looks: the lock file is opened read-only and asked for a shared lock (held for microseconds;
    ``sweep_lock`` waits a second for it), so ``--status`` works on a read-only home.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: filelock's Windows locks cannot be probed this way
        return None
    try:
        fd = os.open(_lock_path(sweep_id), os.O_RDONLY)
    except FileNotFoundError:
        return False  # never locked: no sweep process made it
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # closing drops the shared lock, if it was taken
    return False


class SweepRecord:
    def __init__(self, data: dict[str, Any]):
        self.data = data

    @property
    def sweep_id(self) -> str:
        return self.data["sweep_id"]

    @property
    def entries(self) -> list[dict[str, Any]]:
        return self.data["runs"]

    def entry(self, key: str) -> dict[str, Any]:
        return next(e for e in self.entries if e["key"] == key)

    def save(self) -> None:
        # a run's error can quote what it was given (a URL, a token): masked before it is kept
        for entry in self.entries:
            if isinstance(entry.get("error"), str):
                entry["error"] = redact(entry["error"])
        self.data["updated_at"] = utc_now()
        write_json(sweep_path(self.sweep_id), self.data)

    @classmethod
    def load(cls, sweep_id: str) -> SweepRecord:
        """The record of sweep ``sweep_id`` (or ``latest``)."""
        path = sweep_path(resolve_sweep_id(sweep_id))
        if not path.exists():
            known = sorted(p.stem for p in sweeps_dir().glob("sweep-*.json")) if sweeps_dir().is_dir() else []
            listing = f"; known: {', '.join(known[-5:])}" if known else ""
            raise XmcbenchError(f"no sweep {sweep_id!r} in {sweeps_dir()}{listing}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise XmcbenchError(f"the sweep record {path} cannot be read ({exc}); delete it to start over") from None
        if not isinstance(data, dict) or data.get("schema_version") != SWEEP_SCHEMA or "runs" not in data:
            raise XmcbenchError(f"{path} is not a sweep record this xmcbench reads; delete it to start over")
        return cls(data)

    @classmethod
    def open(
        cls, plan: SweepPlan, *, command: str, launcher: str, runs_dir: Path, db: Path, save: bool = True
    ) -> SweepRecord:
        """The record of ``plan``: the one a previous attempt left (runs matched by key), or a new one.

        ``save=False``: not written until the caller has checked the sweep can start.
        """
        previous = cls.load(plan.sweep_id) if sweep_path(plan.sweep_id).exists() else None
        before = {e["key"]: e for e in previous.entries} if previous else {}
        now = utc_now()
        runs = []
        for run in plan.runs:
            old = before.get(run.key)
            entry = {
                "key": run.key,
                "recipe": run.recipe_path,
                # masked here; the run itself is launched with the plan's real values
                "overrides": [redact(o) for o in run.overrides],
                "seed": run.seed,
                "recipe_hash": run.recipe_hash,
                "gpus": run.gpus,
                "run_id": None,
                "status": "queued",
                "devices": None,
                "job_id": None,
                "error": None,
                "P@1": None,
                "log": None,
                "started_at": None,
                "ended_at": None,
                "kept": False,  # finished earlier (this sweep, or the same recipe, code and data): not run again
                "floors_missed": [],  # the recipe's expect: floors this run misses
                "expect": dict(run.recipe.expect),
            }
            if old is not None and old.get("recipe_hash") == run.recipe_hash:
                entry.update({k: old.get(k, entry[k]) for k in CARRIED})
            runs.append(entry)
        data = {
            "schema_version": SWEEP_SCHEMA,
            "sweep_id": plan.sweep_id,
            "created_at": previous.data["created_at"] if previous else now,
            "updated_at": now,
            "command": redact(command),
            "launcher": launcher,
            "runs_dir": str(runs_dir),
            "db": str(db),
            "sets": [redact(s) for s in plan.sets],
            "grid": redact_data({k: list(v) for k, v in plan.grid}),
            "seeds": list(plan.seeds),
            "runs": runs,
        }
        record = cls(data)
        if save:
            record.save()
        return record

    def below_floor(self) -> list[dict[str, Any]]:
        """Finished runs that miss a floor of their recipe's ``expect``."""
        return [e for e in self.entries if e["status"] == "finished" and e.get("floors_missed")]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.entries:
            out[e["status"]] = out.get(e["status"], 0) + 1
        return out
