"""Runs whose record says finished while the database does not: indexed when next read.

A run killed (kill -9, the OOM killer, a lost node) after saving its finished record and before
indexing it, or whose last index failed, leaves the database behind its record, which is the
truth: the run would be listed as interrupted, left out of tables and run again by sweeps. No
order of the two writes survives a kill, so whatever reads the runs next (``runs list`` and
``show``, ``table``, a sweep deciding what to run) indexes them. Only finished records are
indexed: a finished run never changes again, so this cannot write over a later attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmcbench.errors import XmcbenchError
from xmcbench.store.record import RECORD_FILE, read_record
from xmcbench.store.schema import SCHEMA_VERSION

__all__ = ["Behind", "index_finished"]

WAIT_S = 5.0  # a read waits this long for a busy database before leaving the index to `xmcbench ingest`


@dataclass(frozen=True)
class Behind:
    run_id: str
    folder: Path
    problem: str | None  # None: indexed now; else why it could not be


def index_finished(store, runs: list[dict[str, Any]]) -> list[Behind]:
    """Index those of ``runs`` (rows of ``store``, open for reading) whose record.json says finished
    while the database says running; only those runs' records are read. A database that cannot be
    written now (busy, read-only, an older schema that reading does not migrate) is left as it is,
    and each run says why."""
    from xmcbench.store.store import Store

    behind = []
    for run in runs:
        folder = Path(run["run_dir"]) if run.get("run_dir") else None
        if run["status"] in ("finished", "failed") or folder is None or not (folder / RECORD_FILE).is_file():
            continue
        try:
            record = read_record(folder)
        except XmcbenchError:  # a damaged record is `xmcbench ingest`'s to report
            continue
        if record.get("status") == "finished" and record.get("run_id") == run["run_id"]:
            behind.append((folder, record))
    if not behind:
        return []
    problem = None
    indexed: set[str] = set()
    if store.version != SCHEMA_VERSION:
        problem = "its schema is older and reading does not migrate it"
    else:
        try:
            with Store.open(store.path, timeout_s=WAIT_S) as writer:
                for folder, record in behind:
                    writer.ingest_record(record, folder)
                    indexed.add(record["run_id"])
        except Exception as exc:  # noqa: BLE001 - reading must not fail for want of writing; the caller says how
            problem = (str(exc).splitlines() or [type(exc).__name__])[0]
    return [
        Behind(record["run_id"], folder, None if record["run_id"] in indexed else problem) for folder, record in behind
    ]
