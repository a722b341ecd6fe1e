"""What every launcher shares: which runs to start, the command that runs one, and how it ended.

Before launching, each planned run is decided from what the last attempt of the sweep left:

- finished, with the same recipe hash, dataset version and code commit -> skipped;
- interrupted or failed (its process gone) -> resumed with ``xmcbench run --resume``;
- otherwise (never started, ``--force``, other code or data) -> a new run with a new run id.

A run is always its own process (``python -m xmcbench run ...``; ``torchrun`` for several
processes), so a crash, an OOM kill or a stuck run never takes the sweep or the other runs down.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmcbench.cpus import cpu_threads
from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import pid_alive
from xmcbench.recipe import missed_floors
from xmcbench.redact import redact
from xmcbench.run.provenance import git_state
from xmcbench.run.runner import new_run_id
from xmcbench.store.record import RECORD_FILE, effective_status, load_record
from xmcbench.sweep.plan import PlannedRun

WAIT_FOR_DYING_S = 30.0  # a run killed with its sweep records "interrupted" within seconds


@dataclass
class Launch:
    """One run to start: a new one, or the resumption of ``run_id``."""

    run: PlannedRun
    run_id: str
    resume: bool


def code_version() -> str:
    """The code a run is done with: the git commit (``+dirty`` when edited), else the package version."""
    from xmcbench import __version__

    commit, dirty = git_state()
    return f"{commit}{'+dirty' if dirty else ''}" if commit else f"xmcbench {__version__}"


def _recorded_code(record: dict[str, Any]) -> str:
    prov = record.get("provenance") or {}
    commit = prov.get("git_commit")
    if commit:
        return f"{commit}{'+dirty' if prov.get('git_dirty') else ''}"
    return f"xmcbench {prov.get('xmcbench_version')}"


def read_run(runs_dir: Path, run_id: str | None) -> dict[str, Any] | None:
    """The run's record with its effective status, or None when there is no readable record."""
    if not run_id or not (runs_dir / run_id / RECORD_FILE).exists():
        return None
    try:
        return load_record(runs_dir / run_id)
    except XmcbenchError:
        return None


def _alive_here(record: dict[str, Any]) -> bool:
    prov = record.get("provenance") or {}
    return prov.get("host") == socket.gethostname() and pid_running(prov.get("pid"))


def wait_until_stopped(runs_dir: Path, run_id: str, timeout_s: float = WAIT_FOR_DYING_S) -> dict[str, Any] | None:
    """A run whose process on this host is still alive (its sweep was just killed) gets a moment to record its end.

    A run on another host (a Slurm node) is taken at its record's word, without waiting.
    """
    deadline = time.monotonic() + timeout_s
    record = read_run(runs_dir, run_id)
    while (
        record is not None
        and effective_status(record) == "running"
        and _alive_here(record)
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)
        record = read_run(runs_dir, run_id)
    return record


def _same_work(record: dict[str, Any], run: PlannedRun, code: str) -> tuple[bool, bool]:
    """(same recipe and code, same data as the prepared dataset here)."""
    from xmcbench.data.load import prepared_version

    same = (record.get("provenance") or {}).get("recipe_hash") == run.recipe_hash and _recorded_code(record) == code
    version = (record.get("task") or {}).get("dataset_version")
    return same, version is not None and version == prepared_version(run.recipe.dataset.name)


def decide(
    entry: dict[str, Any],
    run: PlannedRun,
    runs_dir: Path,
    *,
    force: bool,
    code: str,
    earlier: list[dict[str, Any]] = (),  # type: ignore[assignment]
    wait_s: float = WAIT_FOR_DYING_S,
) -> tuple[str, Launch, dict[str, Any] | None]:
    """What to do with one planned run: ("skip" | "launch" | "busy", the run, its record when one exists).

    ``entry`` is the run's place in the sweep record (what the last attempt started);
    ``earlier`` are the database's finished runs of the same recipe (by hand, or another sweep):
    one done with the same code on the same data is kept too.
    """
    if not force and entry.get("run_id"):
        record = wait_until_stopped(runs_dir, entry["run_id"], wait_s)
        if record is not None:
            same, same_data = _same_work(record, run, code)
            if record["status"] == "finished" and same and same_data:
                return "skip", Launch(run, record["run_id"], resume=False), record
            if record["status"] == "running":
                return "busy", Launch(run, record["run_id"], resume=False), record
            if record["status"] in ("interrupted", "failed") and same:
                return "launch", Launch(run, record["run_id"], resume=True), record
    if not force:
        for row in earlier:
            folder = Path(row["run_dir"]) if row.get("run_dir") else runs_dir / row["run_id"]
            record = read_run(folder.parent, folder.name)
            if record is not None and record["status"] == "finished" and all(_same_work(record, run, code)):
                return "skip", Launch(run, record["run_id"], resume=False), record
    return "launch", Launch(run, new_run_id(run.recipe), resume=False), None


def run_command(
    run_id: str,
    *,
    resume: bool,
    recipe_path: str,
    overrides: tuple[str, ...] | list[str],
    runs_dir: Path,
    db: Path,
    nproc: int = 1,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
) -> list[str]:
    """The command that runs (or resumes) one run; several processes go through torchrun."""
    if resume:
        args = ["run", "--resume", run_id]
    else:
        args = ["run", recipe_path, "--run-id", run_id]
        for override in overrides:
            args += ["--set", override]
    # not --quiet: a run's log is where its phases, epochs and progress lines are followed (tail -f)
    args += ["--db", str(db), "--runs-dir", str(runs_dir)]
    if nproc * nnodes <= 1:
        return [sys.executable, "-m", "xmcbench", *args]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise XmcbenchError("a run over several nodes needs a rendezvous endpoint")
        torchrun += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
        torchrun += ["--rdzv-id", rdzv_id or run_id]
    else:
        torchrun.append("--standalone")  # a free port on this node: parallel runs never collide
    return [*torchrun, "-m", "xmcbench", *args]


def scored(record: dict[str, Any] | None, expect: dict[str, str]) -> dict[str, Any]:
    """A finished run's P@1 and the recipe's ``expect`` floors it misses, for the sweep record."""
    scores = {s["name"]: s["value"] for s in (record or {}).get("scores") or []}
    missed = missed_floors(scores, expect) if record is not None and record.get("status") == "finished" else []
    return {"P@1": scores.get("P@1"), "floors_missed": missed}


def outcome(
    runs_dir: Path, run_id: str, returncode: int | None, log: Path | None, expect: dict[str, str] | None = None
) -> dict[str, Any]:
    """How a run ended, for the sweep record: status, P@1, missed floors and a one-line error."""
    record = read_run(runs_dir, run_id)
    if record is None:
        status = "finished" if returncode == 0 else "failed"
        return {"status": status, "P@1": None, "error": None if returncode == 0 else _last_line(log, returncode)}
    status = record["status"]
    if status == "running" and returncode not in (None, 0):  # died before writing its end
        status = "interrupted" if returncode in (-15, -2, 130, 143) else "failed"
    error = record.get("error")
    if status != "finished" and not error:
        error = _last_line(log, returncode)
    return {"status": status, **scored(record, expect or {}), "error": _one_line(error) if error else None}


# a log's informational lines ("12:03:44 INFO xmcbench.progress: epoch 1/3: ...") say where a run was,
# not why it ended: the reason is the last other line (an error, a warning, a traceback's last line)
_INFO_LINE = re.compile(r"^\d\d:\d\d:\d\d (?:INFO|DEBUG) ")


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    reasons = [line for line in lines if not _INFO_LINE.match(line)]
    # masked before it is cut: a cut URL or token would no longer be recognised as one
    return redact(reasons[-1])[:300] if reasons else ""


def _last_line(log: Path | None, returncode: int | None) -> str:
    tail = ""
    if log is not None and log.exists():
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - 4096))
            tail = _one_line(f.read().decode("utf-8", "replace"))
    code = f"exit code {returncode}" if returncode is not None else "no exit code"
    return f"{tail} ({code})" if tail else code


def pid_running(pid: int | None) -> bool:
    return bool(pid) and pid_alive(int(pid))


def log_name(key: str) -> str:
    """A file name for a run's log, from its key."""
    safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in key)
    return f"{safe[:120]}.log"


def thread_budget(jobs: int) -> int:
    """CPU threads per run when ``jobs`` runs share this machine (``cpus.cpu_threads()`` is the total)."""
    return max(1, cpu_threads() // max(1, jobs))
