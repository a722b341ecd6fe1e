"""Run one recipe end to end and leave a self-contained run record.

    check (before any file) -> run folder + lock -> prepare -> train -> predict -> evaluate
    -> record.json at every change (+ recipe.yaml, predictions.npz, checkpoints/) -> database index

The record is written at every status change and phase, and indexed in the database from the
start, so a run that dies is listed. Ctrl-C and SIGTERM are recorded as interrupted and the
phases already done are kept for ``--resume``; a process killed outright leaves "running" with
a dead pid (read as interrupted) and a heartbeat whose time the next attempt recovers. One
killed after saving its finished record but before indexing it leaves the database behind the
record: ``--resume`` of a finished run, and ``xmcbench runs list`` / ``runs show``, index it then.
An exclusive lock on the run folder keeps two attempts of one run from going ahead together.

Under torchrun every rank calls ``run_recipe``; rank 0 alone names the run, holds the lock,
writes the record, predicts and evaluates. ``_agree_on_run`` is the one place the ranks meet
to share the run folder and the phases done.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from xmcbench import paths
from xmcbench.encoders.hub_ref import resolved_revision
from xmcbench.errors import XmcbenchError
from xmcbench.faults import cannot_write, disk_full, exception_chain, first_line
from xmcbench.fsutil import atomic_write, check_name, file_lock, remove_stale_temps, utc_now
from xmcbench.methods import METHODS
from xmcbench.methods.base import RunContext
from xmcbench.recipe import Recipe, RecipeError, missed_floors
from xmcbench.redact import redact, redact_data
from xmcbench.run import phases
from xmcbench.run.check import recipe_from_dict
from xmcbench.run.live_record import LiveRecord
from xmcbench.run.provenance import (
    attempt_facts,
    billed_gpus,
    compute_facts,
    gpu_hours,
    resolve_device,
    update_peak_memory,
)
from xmcbench.store.record import RECORD_FILE, effective_status, load_record, new_record

log = logging.getLogger("xmcbench.run")

RECIPE_FILE = "recipe.yaml"
LOCK_FILE = ".lock"
INDEX_TIMEOUT_S = 10.0  # indexing while running is best effort: a busy database must not stall training


class RunInterrupted(KeyboardInterrupt):
    """Raised from the SIGTERM handler so a terminated run is recorded like Ctrl-C."""


@dataclass
class RunResult:
    run_dir: Path
    record: dict[str, Any]
    index_error: str | None = None  # why the database could not index the run (the record is complete)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def scores(self) -> dict[str, float]:
        return {s["name"]: s["value"] for s in self.record["scores"]}

    def failed_floors(self, expect: dict[str, str]) -> list[str]:
        """The recipe's ``expect`` floors this run misses (a missing metric counts as missed)."""
        return missed_floors(self.scores, expect)


def run_recipe(
    recipe: Recipe | None,
    *,
    recipe_path: str | None = None,
    runs_dir: str | Path | None = None,
    db: str | Path | None = None,
    resume: str | None = None,
    progress: bool = True,
    command: str | None = None,
    ingest: bool = True,
    run_id: str | None = None,
) -> RunResult:
    """Run ``recipe`` (or resume run ``resume``) and return its directory and record.

    ``run_id`` names the new run folder (default: time-method-dataset-random); a sweep names its
    runs before starting them so that its own record points at them even if it is killed.
    """
    dist = _init_distributed(recipe, resume)
    if not dist.is_main:
        return _run_worker(recipe, dist, progress)

    runs_root = Path(runs_dir or (recipe.output.runs_dir if recipe else None) or paths.runs_dir()).expanduser()
    with ExitStack() as stack:
        run_dir: Path | None = None
        try:
            if resume is not None:
                run_dir = find_run(runs_root, resume, Path(db or paths.default_db_path()).expanduser())
                stack.enter_context(_run_lock(run_dir))
                record = load_record(run_dir)
                _check_resumable(record, run_dir)
                if record["status"] == "finished":
                    raise XmcbenchError(_finished_already(run_dir, record, db, ingest))
                recipe, live = _resume(run_dir, record, command)
            else:
                assert recipe is not None, "run_recipe needs a recipe or a run to resume"
                db_path = _db_path(db, recipe)
                _check_before_start(recipe, runs_root, db_path)
                run_dir = _new_run_dir(runs_root, recipe, run_id)
                stack.enter_context(_run_lock(run_dir))
                live = _start(run_dir, recipe, recipe_path, command)
            remove_stale_temps(run_dir, recursive=True)
            db_path = _db_path(db, recipe)
            indexer = _Indexer(db_path, run_dir) if ingest else None
            live.on_save = indexer.index_quietly if indexer else None
            live.save()
        except OSError as exc:
            if not cannot_write(exc):  # a full disk or a folder that is not writable: the run can go on once fixed
                raise
            where = exc.filename or run_dir or runs_root
            if resume is not None:
                raise XmcbenchError(
                    f"cannot resume run {resume}: {exc.strerror} ({where}); free disk space (or fix permissions) "
                    f"and resume it again"
                ) from None
            if run_dir is not None:  # no record was written: an empty folder is no run, so none is left
                shutil.rmtree(run_dir, ignore_errors=True)
            raise XmcbenchError(
                f"cannot start the run: {exc.strerror} ({where}); free disk space (or fix permissions) and run it again"
            ) from None
        _agree_on_run(run_dir, live.record["phases_done"])
        return _attempt(recipe, live, dist, progress, indexer)


def _attempt(recipe: Recipe, live: LiveRecord, dist, progress: bool, indexer: _Indexer | None) -> RunResult:
    record = live.record
    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if _in_main_thread() else None
    live.start_heartbeat()
    error: BaseException | None = None
    try:
        _execute(recipe, live, progress, dist)
        record["status"] = "finished"
        record["finished_at"] = utc_now()
    except KeyboardInterrupt as exc:
        record["status"] = "interrupted"
        record["error"] = "interrupted (Ctrl-C or SIGTERM); resume with: xmcbench run --resume " + record["run_id"]
        exc.run_id = record["run_id"]  # for the caller's "resume with" line
        error = exc
    except BaseException as exc:
        record["status"] = "failed"
        record["error"] = redact(f"{type(exc).__name__}: {exc}")
        error = exc
    live.stop_heartbeat()
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    try:
        live.save(index=False)
    except OSError as exc:  # the full disk may hold the run folder and not the database: index the end anyway
        error = error or exc
    if indexer is not None:
        indexer.index_finally(record)
    if error is None:
        return RunResult(live.run_dir, record, index_error=indexer.error if indexer else None)
    refused = _write_refused(error, live.run_dir)
    if refused is not None:
        # a full disk or a folder that turned read-only is the machine's state, not a bug: one line
        reason, where = refused
        run_id = record["run_id"]
        if record["status"] == "finished":  # the work is done; its last record could not be saved
            raise XmcbenchError(
                f"run {run_id} finished, but its record could not be saved: {reason} ({where}); free disk space "
                f"(or fix permissions) and `xmcbench run --resume {run_id}` saves it"
            ) from error
        raise XmcbenchError(
            f"run {run_id} stopped: {reason} ({where}); "
            f"free disk space (or fix permissions) and continue it with `xmcbench run --resume {run_id}`"
        ) from error
    raise error


_FULL_BELOW = 64 << 20  # free bytes under which a failed torch.save is taken for a full disk


def _write_refused(error: BaseException, run_dir: Path) -> tuple[str, object] | None:
    """(reason, where) when ``error``, or the error it was raised from, means the disk is full or not
    writable. An error raised while handling another (its context, not its cause) is a fault of its
    own and keeps its traceback."""
    for cur in exception_chain(error, context=False):
        if isinstance(cur, OSError) and cur.errno is not None:
            if cannot_write(cur):
                return cur.strerror, cur.filename or run_dir
            continue
        if cannot_write(cur):  # safetensors, DuckDB: the operating system's words, no errno
            return ("No space left on device" if disk_full(cur) else first_line(cur)), run_dir
        text = str(cur).lower()
        # torch.save on a full disk says only "[enforce fail at inline_container.cc] unexpected pos"
        if isinstance(cur, RuntimeError) and ("inline_container" in text or "pytorchstreamwriter" in text):
            try:
                if shutil.disk_usage(run_dir).free < _FULL_BELOW:
                    return "No space left on device", run_dir
            except OSError:
                pass
    return None


# --------------------------------------------------------------------------------------------
# Starting and resuming


def _db_path(db: str | Path | None, recipe: Recipe) -> Path:
    return Path(db or recipe.output.db or paths.default_db_path()).expanduser()


def _check_before_start(recipe: Recipe, runs_root: Path, db_path: Path) -> None:
    """What can only be known at run time, checked before the run folder exists."""
    from xmcbench.train.precision import cpu_bf16_setting

    resolve_device(recipe.hardware.devices)
    cpu_bf16_setting()  # a bad XMCBENCH_CPU_BF16 is refused before the run folder exists
    _check_synthetic_dataset(recipe)
    _check_encoder_lengths(recipe)
    why = recipe.method_config().needs_faiss(recipe.supervision.mode)
    if why is not None:
        from xmcbench.search.faiss_loader import faiss_or_error

        faiss_or_error(why)
    if db_path.is_dir():
        raise XmcbenchError(
            f"output.db {db_path} is a folder; give the path of a database file (e.g. {db_path}/xmcbench.duckdb)"
        )
    try:
        runs_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise XmcbenchError(
            f"cannot create the runs folder {runs_root} ({exc.strerror}); set output.runs_dir or XMCBENCH_HOME"
        ) from None
    if not os.access(runs_root, os.W_OK | os.X_OK):
        raise XmcbenchError(f"the runs folder {runs_root} is not writable; set output.runs_dir or XMCBENCH_HOME")


def _check_encoder_lengths(recipe: Recipe) -> None:
    """``encoder.max_length`` (and ``label_max_length``) must leave room for text beside the
    tokenizer's special tokens; the encoder checks that when it is built, which is after the run
    folder exists: checked here too, so a bad value leaves no failed run behind. Only the tokenizer
    is read; one that cannot be read here is left to the run to report."""
    if not METHODS.get(recipe.method.name).uses_encoder:
        return
    from xmcbench.encoders.text_encoder import check_room_for_text, resolve_model_path

    enc = recipe.encoder
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(enc.name, enc.revision), revision=enc.revision)
    except Exception:  # noqa: BLE001 - not downloadable offline, not installed: the run says it better
        return
    for what, length in (("encoder.max_length", enc.max_length), ("encoder.label_max_length", enc.label_max_length)):
        if length is not None:
            check_room_for_text(tokenizer, length, what, enc.name)


def _check_synthetic_dataset(recipe: Recipe) -> None:
    """A synthetic dataset of this name made here with other parameters would stop the run at
    prepare, leaving a failed run behind: refuse before the run folder exists, naming what differs."""
    from xmcbench.data.load import synthetic_conflict

    ds = recipe.dataset
    if ds.synthetic is None:
        return
    differ = synthetic_conflict(ds.name, ds.synthetic.model_dump())
    if differ is not None:
        raise XmcbenchError(
            f"dataset {ds.name} already exists with other parameters ({differ}); give the recipe another "
            f"dataset.name, or delete {paths.datasets_dir() / ds.name} to make it anew"
        )


def new_run_id(recipe: Recipe) -> str:
    """``YYYYmmdd-HHMMSS-method-dataset-xxxxxx``: sorts by time, says what ran, never collides."""
    slug = re.sub(r"[^a-z0-9.]+", "-", recipe.dataset.name.lower())[:60].strip("-.") or "dataset"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return check_name(f"{stamp}-{recipe.method.name.lower()}-{slug}-{secrets.token_hex(3)}", "run id")


def _new_run_dir(runs_root: Path, recipe: Recipe, run_id: str | None = None) -> Path:
    run_dir = runs_root / check_name(run_id or new_run_id(recipe), "run id")
    try:
        run_dir.mkdir(parents=False, exist_ok=False)
    except FileExistsError:
        raise XmcbenchError(
            f"a run {run_dir.name} already exists in {runs_root}; continue it with "
            f"`xmcbench run --resume {run_dir.name}` or give another --run-id"
        ) from None
    return run_dir


def _start(run_dir: Path, recipe: Recipe, recipe_path: str | None, command: str | None) -> LiveRecord:
    """Write the resolved recipe and the first record of a new run."""
    resolved = redact_data(recipe.resolved())
    atomic_write(run_dir / RECIPE_FILE, yaml.safe_dump(resolved, sort_keys=False))
    uses_encoder = METHODS.get(recipe.method.name).uses_encoder
    facts = attempt_facts(command)
    record = new_record(
        run_dir.name,
        name=redact(recipe.name),
        phases_done=[],
        task={
            "dataset": recipe.dataset.name,
            "dataset_variant": redact_data(recipe.dataset.variant),
            "split": recipe.evaluation.split,
            "supervision": recipe.supervision.mode,
            "label_fraction": recipe.supervision.label_fraction,
        },
        model={
            "method": recipe.method.name,
            "encoder": recipe.encoder.name if uses_encoder else None,
            # an hf:// encoder is recorded at the commit it resolved to (a branch moves)
            "encoder_revision": resolved_revision(recipe.encoder.name, recipe.encoder.revision)
            if uses_encoder
            else None,
            "params_total": None,
            "params_trainable": None,
        },
        provenance={**facts, "recipe_hash": recipe.hash(), "recipe_path": recipe_path, "seed": recipe.training.seed},
        accounting={
            "batch_size": None,
            "pool_size_mean": None,
            "pool_size_max": None,
            "positives_per_query": None,
            "hard_negatives_per_query": None,
            "refresh_interval": None,
            "steps": None,
        },
    )
    return LiveRecord(run_dir, record)


def _resume(run_dir: Path, record: dict[str, Any], command: str | None) -> tuple[Recipe, LiveRecord]:
    """The recorded recipe and ``record`` (checked, unfinished) of a run, ready for another attempt."""
    recipe = _recorded_recipe(run_dir, record)
    facts = attempt_facts(command)
    # Each resume may run other code: keep what every attempt ran with.
    record.setdefault("attempts", []).append({"resumed_at": utc_now(), **facts})
    record["provenance"].update(pid=facts["pid"], host=facts["host"])
    record.update(status="running", error=None)
    live = LiveRecord(run_dir, record)
    live.recover_lost_time()
    return recipe, live


def _finished_already(run_dir: Path, record: dict[str, Any], db: str | Path | None, ingest: bool) -> str:
    """What ``--resume`` of a finished run says, after indexing it again.

    A run killed between saving its finished record and indexing it (or whose last index failed)
    leaves the database behind its record: listed as running or interrupted, left out of tables,
    run again by sweeps. The index is the record's copy, so indexing it again is harmless; this
    makes ``--resume`` of a finished run the way to bring the database up to date.
    """
    said = f"run {record['run_id']} already finished; nothing to resume"
    if not ingest:
        return said
    try:
        db_path = _db_path(db, _recorded_recipe(run_dir, record))
    except XmcbenchError:  # recipe.yaml gone or damaged: its output.db is unknown, the default is the best guess
        db_path = Path(db or paths.default_db_path()).expanduser()
    error = _Indexer(db_path, run_dir).try_index(record)
    if error is not None:
        return f"{said} ({error})"
    return f"{said}; its record is indexed in {db_path}"


def _recorded_recipe(run_dir: Path, record: dict[str, Any]) -> Recipe:
    recipe_file = run_dir / RECIPE_FILE
    try:
        data = yaml.safe_load(recipe_file.read_text(encoding="utf-8"))
        recipe = recipe_from_dict(data, str(recipe_file))
    except FileNotFoundError:
        raise XmcbenchError(
            f"{recipe_file} is missing, so run {record['run_id']} cannot be resumed; start it again"
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecipeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise XmcbenchError(
            f"{recipe_file} is damaged ({first}), so run {record['run_id']} cannot be resumed; start it again"
        ) from None
    return recipe


def _check_resumable(record: dict[str, Any], run_dir: Path) -> None:
    """Refuse a record edited or damaged into something a resume would crash on, naming the field."""
    from xmcbench.store.record import PHASES, record_rows

    try:
        record_rows(record, run_dir)
        done = record.get("phases_done")
        if not isinstance(done, list) or not all(phase in PHASES for phase in done):
            raise XmcbenchError(f"field phases_done must be a list of {', '.join(PHASES)}, got {done!r}")
        for section in ("provenance", "compute", "accounting"):
            value = record.get(section) or {}
            if not isinstance(value, dict):
                raise XmcbenchError(f"field {section} must be an object, got {value!r}")
            record[section] = value
    except XmcbenchError as exc:
        problem = str(exc).removeprefix(f"{run_dir / RECORD_FILE}: ")
        raise XmcbenchError(f"{run_dir / RECORD_FILE} cannot be resumed ({problem}); start the run again") from None


def find_run(runs_root: Path, run_id: str, db: Path | None = None) -> Path:
    """The folder of run ``run_id`` (a unique prefix is enough; a run folder path also works): under
    ``runs_root``, else where the database ``db`` says it is (a run made with another --runs-dir)."""
    if not run_id or not run_id.strip():
        raise XmcbenchError("--resume needs a run id; list runs with `xmcbench runs list`")
    given = Path(run_id).expanduser()
    if os.sep in run_id or run_id.startswith("."):
        if given.is_dir() and (given / RECORD_FILE).exists():
            return given
        raise XmcbenchError(f"{run_id} is not a run folder (no {RECORD_FILE} in it)")
    check_name(run_id, "run id")
    exact = runs_root / run_id
    if exact.is_dir():
        return exact
    matches = sorted(p for p in runs_root.glob(f"{run_id}*") if p.is_dir()) if runs_root.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        indexed = _indexed_run_dir(db, run_id) if db is not None else None
        if indexed is not None:
            return indexed
        raise XmcbenchError(
            f"no run {run_id!r} under {runs_root}; list runs with `xmcbench runs list`, and give --runs-dir "
            "for a run made in another folder"
        )
    raise XmcbenchError(f"{run_id!r} matches {len(matches)} runs: {', '.join(p.name for p in matches[:5])}")


def _indexed_run_dir(db: Path, run_id: str) -> Path | None:
    """The run folder the database records for ``run_id``, when it is still a run folder."""
    from xmcbench.store import Store

    try:
        with Store.open(db, read_only=True, missing_ok=True) as store:
            if not store.exists:
                return None
            run_dir = store.get_run(run_id).get("run_dir")
    except XmcbenchError:  # not indexed, ambiguous, or no readable database: the caller's message says what to do
        return None
    folder = Path(run_dir) if run_dir else None
    return folder if folder is not None and (folder / RECORD_FILE).is_file() else None


def _run_lock(run_dir: Path):
    """Exclusive for the life of one attempt: a second ``--resume`` of the same run is refused."""
    return file_lock(run_dir / LOCK_FILE, timeout=0, what=f"run {run_dir.name}")


# --------------------------------------------------------------------------------------------
# The database index, kept current while the run goes


class _Indexer:
    def __init__(self, db_path: Path, run_dir: Path):
        self.db_path, self.run_dir = db_path, run_dir
        self.error: str | None = None
        self._warned = False
        self._said_busy = False

    def _say_busy(self, message: str) -> None:
        # Each save opens the database anew; runs finishing together would each say "busy" at
        # every save, for waits of milliseconds. Once per run is news; more is noise.
        if not self._said_busy:
            self._said_busy = True
            log.info("%s", message)

    def _index(self, record: dict[str, Any], timeout_s: float | None) -> None:
        from xmcbench.store import Store

        kwargs = {} if timeout_s is None else {"timeout_s": timeout_s}
        with Store.open(self.db_path, notify=self._say_busy, **kwargs) as store:
            store.ingest_record(record, self.run_dir)

    def index_quietly(self, record: dict[str, Any]) -> None:
        """Index during the run; a busy or broken database is said once and never stops the run."""
        try:
            self._index(record, INDEX_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the record on disk is the truth; the index catches up
            if not self._warned:
                log.warning(
                    "could not index the run in %s yet (%s); the run goes on",
                    self.db_path,
                    redact(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__,
                )
                self._warned = True

    def index_finally(self, record: dict[str, Any]) -> None:
        """Index the end of the run, waiting for a busy database; ``error`` says why it could not."""
        self.error = self.try_index(record)
        if self.error is not None:
            log.error(self.error)

    def try_index(self, record: dict[str, Any]) -> str | None:
        """Index ``record``, waiting for a busy database; None, or why it could not (naming the ingest)."""
        from xmcbench.store import DatabaseWriteError

        try:
            self._index(record, None)
        except Exception as exc:  # noqa: BLE001 - the record on disk is the truth; the index catches up
            reason = redact(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, DatabaseWriteError):  # it already names the run folder and the ingest to run
                return f"the run is recorded in {self.run_dir}, but {reason}"
            return (
                f"the run is recorded in {self.run_dir}, but the database {self.db_path} could not index it "
                f"({reason}); `xmcbench ingest {self.run_dir.parent}` will index it"
            )
        return None


# --------------------------------------------------------------------------------------------
# Distributed hand-off: rank 0 decides, every rank learns


def _init_distributed(recipe: Recipe | None, resume: str | None):
    """Join torchrun's process group when WORLD_SIZE > 1 (one process per GPU), else a no-op."""
    from xmcbench.train import init_distributed

    world = int(os.environ.get("WORLD_SIZE", "1"))
    wanted = recipe.hardware.num_gpus if recipe is not None else None
    if wanted is not None and wanted > 1 and world != wanted:
        raise XmcbenchError(
            f"the recipe asks for hardware.num_gpus={wanted} but this is {world} process(es); launch with "
            f"`torchrun --nproc-per-node {wanted} -m xmcbench run RECIPE`, or set hardware.num_gpus={world}"
        )
    if world <= 1:
        return init_distributed()
    device = recipe.hardware.devices if recipe is not None else "auto"
    return init_distributed(device=None if device == "auto" else device)


def _agree_on_run(run_dir: Path | None, phases_done: list[str] | None = None) -> tuple[Path, list[str]]:
    """Rank 0 names the run and says which phases are done; every rank returns both."""
    from xmcbench.train.distributed import all_gather_objects

    shared = all_gather_objects((str(run_dir) if run_dir else None, list(phases_done or [])))[0]
    return Path(shared[0]), shared[1]


def _run_worker(recipe: Recipe | None, dist, progress: bool) -> RunResult:
    """A non-zero rank under torchrun: train with the others; rank 0 records, predicts and evaluates."""
    from xmcbench.train import barrier

    run_dir, phases_done = _agree_on_run(None)
    if recipe is None:  # resume: rank 0 has checked the run; read the same recorded recipe
        recipe = recipe_from_dict(yaml.safe_load((run_dir / RECIPE_FILE).read_text()), str(run_dir / RECIPE_FILE))
    record = new_record(
        run_dir.name,
        task={"dataset": recipe.dataset.name, "split": recipe.evaluation.split},
        model={"method": recipe.method.name},
        phases_done=list(phases_done),
    )
    live = LiveRecord(run_dir, record)
    if "train" in phases_done:
        barrier()  # matches rank 0's barrier after preparing the dataset; rank 0 loads the trained model
        return RunResult(run_dir, record)
    _execute(recipe, live, False, dist)
    return RunResult(run_dir, record)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum, frame):
    raise RunInterrupted()


# --------------------------------------------------------------------------------------------
# The phases, timed and marked


def _execute(recipe: Recipe, live: LiveRecord, progress: bool, dist) -> None:
    from xmcbench.train import barrier, resolve_precision

    record, run_dir = live.record, live.run_dir
    world_size = dist.world_size
    device = resolve_device(recipe.hardware.devices)
    if device == "cuda" and world_size > 1:
        device = str(dist.device)  # cuda:LOCAL_RANK
    precision = resolve_precision(recipe.training.precision, device)
    ctx = RunContext(
        run_dir=run_dir,
        device=device,
        precision=precision,
        seed=recipe.training.seed,
        progress=progress,
        world_size=world_size,
        accounting=record["accounting"],
    )
    ctx.seed_everything()
    walls = dict(record["compute"].get("wall_time_s", {}))
    peaks = {k: record["compute"].get(k) for k in ("peak_host_mem_gb", "peak_gpu_mem_gb")}
    # A run resumed on another machine may compute in another precision (bf16 -> fp32 on a CPU
    # where bf16 is no faster): the record keeps every precision its attempts used.
    earlier = record["compute"].get("precision")
    history = record["compute"].get("precision_history") or ([earlier] if earlier else [])
    if earlier and earlier != precision:
        log.warning("run %s resumes in %s; its earlier attempts computed in %s", record["run_id"], precision, earlier)
        history = [*history, precision]
    record["compute"] = compute_facts(device, world_size)
    record["compute"].update(wall_time_s=walls, precision=precision, **{k: v for k, v in peaks.items() if v})
    if len(history) > 1:
        record["compute"]["precision_history"] = history
    done: list[str] = record["phases_done"]

    def mark(phase: str) -> None:
        if not dist.is_main:
            return
        if phase not in done:
            done.append(phase)
        compute = record["compute"]
        compute["gpu_hours"], reused = gpu_hours(walls, record["accounting"], billed_gpus(compute))
        if reused:
            compute["gpu_hours_reused"] = reused
        update_peak_memory(compute, device)
        live.save()

    log.info(
        "run %s: %s on %s (%s, %s, world size %d)",
        record["run_id"],
        recipe.method.name,
        (record.get("task") or {}).get("dataset"),
        device,
        precision,
        world_size,
    )
    log.info("phase prepare: starting")
    before = dict(live.walls)  # earlier attempts' time: a phase line tells this attempt's
    with live.phase("prepare"):
        if not dist.is_main:
            barrier()  # rank 0 synthesises / downloads / prepares first
        data = phases.prepare(recipe, record, run_dir, progress)
        if dist.is_main:
            barrier()
    mark("prepare")
    log.info("phase prepare: done in %s; phase train: starting", _took(live, "prepare", before))
    ctx.start_clock()

    with live.phase("train"):
        method = phases.train(recipe, data, ctx, done, dist.is_main)
    if not dist.is_main:
        return  # prediction and evaluation happen once, on rank 0
    record["compute"]["world_size"] = world_size
    total, trainable = method.parameter_counts()
    record["model"].update(params_total=int(total), params_trainable=int(trainable))
    mark("train")
    log.info("phase train: done in %s; phase predict: starting", _took(live, "train", before))

    with live.phase("predict"):
        preds = phases.predict(recipe, method, data, ctx, done)
    mark("predict")
    log.info("phase predict: done in %s; phase evaluate: starting", _took(live, "predict", before))

    with live.phase("evaluate"):
        phases.evaluate(recipe, preds, data, record)
    mark("evaluate")
    log.info(
        "phase evaluate: done in %s: %s",
        _took(live, "evaluate", before),
        ", ".join(f"{s['name']} {s['value']:.2f}" for s in (record.get("scores") or [])[:6]) or "no scores",
    )


def _took(live: LiveRecord, phase: str, before: dict[str, float]) -> str:
    """This attempt's time in ``phase``, and the total with earlier attempts' when there were any."""
    total = live.walls.get(phase, 0.0)
    earlier = before.get(phase, 0.0)
    if earlier <= 0:
        return f"{total:.1f}s"
    return f"{total - earlier:.1f}s ({total:.1f}s with earlier attempts)"


__all__ = ["RunInterrupted", "RunResult", "effective_status", "find_run", "load_record", "run_recipe"]
