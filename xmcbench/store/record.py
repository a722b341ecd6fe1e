"""The run record (``<run_dir>/record.json``): writing it, reading it, turning it into rows.

The record is the source of truth (see the run-record contract in the README); the database
only indexes it. This module is the format's only owner: the runner creates records with
``new_record`` and writes every change with ``write_record``, which validates first, so a record
the store would reject is never written.
``record_rows`` checks a record enough that nothing wrong lands in the index — required fields
present and of the right type, a known status and schema version — and names the file and the
field when something is off, so a bad run directory is reported and skipped rather than silently
half-ingested.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xmcbench.errors import DataFormatError
from xmcbench.fsutil import atomic_write, pid_alive, to_json, utc_now

RECORD_SCHEMA_VERSION = 1  # the newest record.json schema this code understands
RECORD_FILE = "record.json"
PREDICTIONS_FILE = "predictions.npz"
EVAL_ROWS_FILE = "eval_rows.npy"  # indices of the split's queries evaluated, when only a sample was
STATUSES = ("running", "finished", "failed", "interrupted")
PHASES = ("prepare", "train", "predict", "evaluate")


@dataclass
class RunRows:
    """One record as rows of the store's tables (column name -> value)."""

    run_id: str
    runs: dict[str, Any]
    scores: list[dict[str, Any]] = field(default_factory=list)
    group_scores: list[dict[str, Any]] = field(default_factory=list)
    compute: dict[str, Any] | None = None
    accounting: dict[str, Any] | None = None


def new_record(
    run_id: str,
    *,
    task: dict,
    model: dict,
    provenance: dict | None = None,
    accounting: dict | None = None,
    **extra: Any,
) -> dict:
    """A record for a run that is starting: status "running", no scores yet.

    ``task`` and ``model`` follow the contract (task: dataset, split, supervision, ...; model:
    method, encoder, ...); ``extra`` adds top-level fields (``name``, ``phases_done``). The caller
    fills in scores, groups, compute and accounting as the run goes and rewrites it with
    ``write_record``.
    """
    now = utc_now()
    return {
        "schema_version": RECORD_SCHEMA_VERSION,
        "run_id": run_id,
        **extra,
        "status": "running",
        "created_at": now,
        "updated_at": now,
        "finished_at": None,
        "error": None,
        "task": dict(task),
        "model": dict(model),
        "scores": [],
        "groups": {},
        "provenance": dict(provenance or {}),
        "compute": {},
        "accounting": dict(accounting or {}),
    }


def write_record(run_dir: Path | str, record: dict) -> Path:
    """Check ``record`` and write ``<run_dir>/record.json`` atomically.

    A reader (``xmcbench ingest``, a table) sees either the previous complete record or the new
    one. When the disk is full the atomic route needs space it does not have; the record is then
    rewritten in place, compactly, in the blocks the old one already holds, so a run that failed
    because the disk filled up still ends "failed" rather than "running".
    """
    path = Path(run_dir) / RECORD_FILE
    record_rows(record, run_dir, where=path)  # never write a record the store would reject
    text = to_json(record)
    try:
        atomic_write(path, text + "\n")
    except OSError as exc:
        if exc.errno != errno.ENOSPC or not path.exists():
            raise
        compact = to_json(record, indent=None).encode()
        if len(compact) > path.stat().st_size:
            raise
        with open(path, "r+b") as fh:
            fh.write(compact)
            fh.truncate()
    return path


def load_record(run_dir: Path | str) -> dict:
    """A run's record with its effective status (a killed run reads "interrupted")."""
    record = read_record(Path(run_dir))
    status = effective_status(record)
    if status != record.get("status"):
        record["status"] = status
        record["error"] = record.get("error") or "process ended without recording (killed?)"
    return record


def read_record(path: Path) -> dict:
    """Parse ``record.json`` (or the ``record.json`` inside a run directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORD_FILE
    if path.exists() and not path.is_file():  # a FIFO would block the read forever
        raise DataFormatError(
            path, None, f"{RECORD_FILE} is not a regular file (a pipe or a device); re-run or delete the run"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataFormatError(path, None, f"cannot read the run record ({exc.strerror})") from None
    try:
        record = json.loads(data)
    except UnicodeDecodeError:
        raise DataFormatError(
            path, None, "not UTF-8 text; the run record is damaged (re-run or delete the run)"
        ) from None
    except json.JSONDecodeError as exc:
        raise DataFormatError(
            path,
            exc.lineno,
            f"invalid JSON ({exc.msg}, column {exc.colno}); the run record is damaged (re-run or delete the run)",
        ) from None
    except ValueError as exc:  # Python refuses an integer of more than 4300 digits
        reason = str(exc).split(":")[0]
        raise DataFormatError(
            path, None, f"unreadable JSON ({reason}); the run record is damaged (re-run or delete the run)"
        ) from None
    except RecursionError:
        raise DataFormatError(
            path,
            None,
            "lists or objects nested too deeply to read; the run record is damaged (re-run or delete the run)",
        ) from None
    if not isinstance(record, dict):
        raise DataFormatError(path, None, f"a run record must be a JSON object, got {type(record).__name__}")
    return record


TRAIN_LOG_FILE = "train_log.jsonl"  # written by xmcbench.methods.base, one object per epoch
_TRAIN_LOG_NUMBERS = ("epoch", "epochs", "step", "loss", "lr", "queries_per_s", "pool_size", "elapsed_s")


def read_train_log(run_dir: Path | str | None) -> list[dict[str, Any]]:
    """The per-epoch facts of a run (``train_log.jsonl`` in its folder); [] when there are none.

    The log is appended to by a process that may be killed mid-line, and people edit files: a damaged
    line (bad bytes, not JSON, not an object) costs that line, and a value that should be a number and
    is not (text, true, NaN) reads as None, so a listing or a plot never ends in a traceback."""
    if not run_dir:
        return []
    try:
        lines = (Path(run_dir) / TRAIN_LOG_FILE).read_bytes().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append({k: None if k in _TRAIN_LOG_NUMBERS and not _is_number(v) else v for k, v in entry.items()})
    return entries


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def effective_status(record: dict) -> str:
    """The record's status, with a "running" run whose process is gone on this host read as "interrupted".

    A run killed outright (SIGKILL, the OOM killer) cannot write its last record; its pid tells.
    Runs on another host are taken at their word: their pids mean nothing here.
    """
    status = record.get("status")
    prov = record.get("provenance") or {}
    pid = prov.get("pid")
    if (
        status == "running"
        and prov.get("host") == socket.gethostname()
        and isinstance(pid, int)
        and not isinstance(pid, bool)
        and not pid_alive(pid)
    ):
        return "interrupted"
    return status


def parse_metric_name(name: str) -> tuple[str, int | None]:
    """'P@5' -> ('P', 5); 'MRR' -> ('MRR', None)."""
    metric, sep, k = name.partition("@")
    if sep and k.isascii() and k.isdigit():  # isdigit alone takes "²", which int() refuses
        return metric, int(k)
    return name, None


class _Fields:
    """Typed access to one section of a record, with errors that name the file and the field."""

    def __init__(self, where: Path | str, section: dict, prefix: str):
        self.where, self.section, self.prefix = where, section, prefix

    def fail(self, key: str, problem: str) -> DataFormatError:
        return DataFormatError(self.where, None, f"field {self.prefix}{key} {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], required: bool = False, bits: int = 64) -> Any:
        """The field's value, checked to be of ``kind`` and storable in the database (an integer
        within ``bits`` bits: BIGINT columns are 64, INTEGER ones 32)."""
        value = self.section.get(key)
        if value is None:
            if required:
                raise self.fail(key, "is missing; the run record is incomplete (re-run or delete the run)")
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python, but a count of True is a broken record
        if isinstance(value, bool) and bool not in kinds:
            raise self.fail(key, f"must be {_kind_names(kinds)}, got {value!r}")
        if float in kinds and isinstance(value, int):
            try:
                value = float(value)
            except OverflowError:  # beyond 1.8e308
                raise self.fail(key, f"is {_shown(value)}, too large for a number; {_DAMAGED}") from None
        if not isinstance(value, kinds):
            raise self.fail(key, f"must be {_kind_names(kinds)}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, got {value!r}")
        # the database refuses what it cannot hold, and a refused row would cost the whole ingest
        if isinstance(value, int) and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise self.fail(
                key, f"is {_shown(value)}, beyond a {bits}-bit integer (what the database holds); {_DAMAGED}"
            )
        if isinstance(value, str) and not _is_unicode(value):
            raise self.fail(key, f"holds an unpaired surrogate (not valid Unicode), got {value[:80]!r}; {_DAMAGED}")
        return value

    def sub(self, key: str, required: bool = False) -> _Fields:
        value = self.get(key, dict, required)
        return _Fields(self.where, value or {}, f"{self.prefix}{key}.")

    def time(self, key: str, required: bool = False) -> datetime | None:
        text = self.get(key, str, required)
        if text is None:
            return None
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError:
            raise self.fail(key, f"must be an ISO-8601 timestamp, got {text!r}") from None
        if stamp.tzinfo is not None:  # the database stores naive UTC
            try:
                stamp = stamp.astimezone(timezone.utc).replace(tzinfo=None)
            except OverflowError:  # year 1 or 9999 moved past the calendar's end by its offset
                raise self.fail(
                    key, f"is a timestamp whose UTC time is out of range, got {text!r}; {_DAMAGED}"
                ) from None
        return stamp


_DAMAGED = "the run record is damaged (re-run or delete the run)"


def _shown(value: int) -> str:
    """An integer as it can be read in a message: a huge one by its size."""
    return str(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"


def _is_unicode(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8: JSON's ``\\ud800`` escapes give Python lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind_names(kinds: tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        dict: "an object",
        list: "a list",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def record_rows(record: dict, run_dir: Path | str | None, where: Path | str | None = None) -> RunRows:
    """Check a parsed record and turn it into rows for runs, scores, compute, accounting."""
    where = where or (Path(run_dir) / RECORD_FILE if run_dir is not None else "<record>")
    top = _Fields(where, record, "")
    version = top.get("schema_version", int, required=True, bits=32)
    if version > RECORD_SCHEMA_VERSION:
        raise top.fail(
            "schema_version",
            f"is {version}, newer than this xmcbench understands ({RECORD_SCHEMA_VERSION}); upgrade xmcbench",
        )
    run_id = top.get("run_id", str, required=True)
    if not run_id.strip() or "/" in run_id or "\\" in run_id:
        raise top.fail("run_id", f"must be a non-empty name without slashes, got {run_id!r}")
    status = top.get("status", str, required=True)
    if status not in STATUSES:
        raise top.fail("status", f"must be one of {', '.join(STATUSES)}, got {status!r}")

    task = top.sub("task", required=True)
    model = top.sub("model", required=True)
    prov = top.sub("provenance")
    runs = {
        "run_id": run_id,
        "record_schema": version,
        "status": status,
        "created_at": top.time("created_at"),
        "updated_at": top.time("updated_at"),
        "finished_at": top.time("finished_at"),
        "error": top.get("error", str),
        "dataset": task.get("dataset", str, required=True),
        "dataset_version": task.get("dataset_version", str),
        "split": task.get("split", str, required=True),
        "n_queries": task.get("n_queries", int),
        "n_queries_evaluated": task.get("n_queries_evaluated", int),
        "n_labels": task.get("n_labels", int),
        "propensity_a": task.get("propensity_a", float),
        "propensity_b": task.get("propensity_b", float),
        "filter": task.get("filter", str),
        "supervision": task.get("supervision", str) or "full",
        "label_fraction": task.get("label_fraction", float),
        "method": model.get("method", str, required=True),
        "encoder": model.get("encoder", str),
        "encoder_revision": model.get("encoder_revision", str),
        "params_total": model.get("params_total", int),
        "params_trainable": model.get("params_trainable", int),
        "xmcbench_version": prov.get("xmcbench_version", str),
        "git_commit": prov.get("git_commit", str),
        "git_dirty": prov.get("git_dirty", bool),
        "recipe_hash": prov.get("recipe_hash", str),
        "recipe_path": prov.get("recipe_path", str),
        "command": prov.get("command", str),
        "seed": prov.get("seed", int),
        "python": prov.get("python", str),
        "platform": prov.get("platform", str),
        "host": prov.get("host", str),
        "run_dir": str(Path(run_dir).resolve()) if run_dir is not None else None,
        "record_sha256": hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest(),
        "record_json": json.dumps(record),  # key order kept, for `runs show`
    }
    rows = RunRows(run_id=run_id, runs=runs)
    rows.scores = _score_rows(top, run_id)
    rows.group_scores = _group_rows(top, run_id)
    if record.get("compute"):
        rows.compute = _compute_row(top.sub("compute"), run_id)
    if record.get("accounting"):
        acc = top.sub("accounting")
        rows.accounting = {
            "run_id": run_id,
            "batch_size": acc.get("batch_size", int),
            "pool_size_mean": acc.get("pool_size_mean", float),
            "pool_size_max": acc.get("pool_size_max", int),
            "positives_per_query": acc.get("positives_per_query", float),
            "hard_negatives_per_query": acc.get("hard_negatives_per_query", float),
            "refresh_interval": acc.get("refresh_interval", int),
            "steps": acc.get("steps", int),
        }
    return rows


def _score_rows(top: _Fields, run_id: str) -> list[dict[str, Any]]:
    scores = top.get("scores", list) or []
    rows, seen = [], set()
    for i, item in enumerate(scores):
        if not isinstance(item, dict):
            raise top.fail(f"scores[{i}]", f"must be an object, got {item!r}")
        entry = _Fields(top.where, item, f"scores[{i}].")
        name = entry.get("name", str, required=True)
        if name in seen:
            raise entry.fail("name", f"repeats the metric {name!r}; each metric appears once")
        seen.add(name)
        cutoff = name.partition("@")[2]
        if cutoff.isascii() and cutoff.isdigit() and len(cutoff.lstrip("0")) > 9:  # the k column holds 32 bits
            raise entry.fail("name", f"has a cutoff k too large for the database, got {name[:40]!r}; {_DAMAGED}")
        metric, k = parse_metric_name(name)
        given_k = entry.get("k", int, bits=32)
        higher = entry.get("higher_is_better", bool)
        rows.append(
            {
                "run_id": run_id,
                "name": name,
                "metric": entry.get("metric", str) or metric,
                "k": k if given_k is None else given_k,
                "value": entry.get("value", float, required=True),
                "ci_lo": entry.get("ci_lo", float),
                "ci_hi": entry.get("ci_hi", float),
                # every XMC metric xmcbench computes is a "more is better" score
                "higher_is_better": True if higher is None else higher,
            }
        )
    return rows


def _group_rows(top: _Fields, run_id: str) -> list[dict[str, Any]]:
    groups = top.sub("groups")
    rows = []
    for grp in groups.section:
        values = groups.sub(grp)
        for name in values.section:
            value = values.get(name, float)
            if value is not None:
                rows.append({"run_id": run_id, "grp": grp, "name": name, "value": value})
    return rows


def _compute_row(comp: _Fields, run_id: str) -> dict[str, Any]:
    names = comp.get("device_names", list)
    if names is not None and not all(isinstance(n, str) for n in names):
        raise comp.fail("device_names", f"must be a list of strings, got {names!r}")
    wall = comp.sub("wall_time_s")
    phases = {phase: wall.get(phase, float) for phase in wall.section}
    return {
        "run_id": run_id,
        "device_type": comp.get("device_type", str),
        "device_names": names,
        "device_count": comp.get("device_count", int, bits=32),
        "cuda_version": comp.get("cuda_version", str),
        "driver_version": comp.get("driver_version", str),
        "cpu": comp.get("cpu", str),
        "ram_gb": comp.get("ram_gb", float),
        **{f"wall_{phase}_s": phases.get(phase) for phase in PHASES},
        "wall_total_s": sum(v for v in phases.values() if v is not None) if phases else None,
        "gpu_hours": comp.get("gpu_hours", float),
        "peak_gpu_mem_gb": comp.get("peak_gpu_mem_gb", float),
        "peak_host_mem_gb": comp.get("peak_host_mem_gb", float),
    }
