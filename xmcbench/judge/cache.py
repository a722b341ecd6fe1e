"""Every judgement stored once: a DuckDB file beside the results store.

    judgements(dataset_version, doc_id, label_id, prompt_id, model, p_yes, created)
    primary key (dataset_version, doc_id, label_id, prompt_id, model)

``model`` is ``<model id>@<revision>`` so a different file or commit never reuses an answer.
Writers follow the results store's rules: the exclusive ``<db>.lock`` (``fsutil.file_lock``),
then open read-write, retrying while DuckDB's own lock is held by a reader, one transaction,
``INSERT OR IGNORE`` (two runs that judged the same pair concurrently agree; the first wins).
Readers take no lock file and retry on a conflict. The store's schema is untouched.

A damaged file (a disk that filled mid-checkpoint, a copy cut short) costs judgements, never the
run: reads answer nothing from it (every pair is asked again), and the next write moves it aside
(``judgements.duckdb.damaged-<UTC time>``, kept for whoever wants to dig) and starts a fresh file.
A file that cannot be written (full disk, no permission) is one clear error, and what was stored
before stays.

``CachedJudge`` puts the cache in front of any judge: it asks only the pairs not yet stored and
counts cache hits in the judge's stats.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

import duckdb
import numpy as np

from xmcbench.faults import duckdb_conflict, duckdb_damaged, first_line
from xmcbench.fsutil import file_lock
from xmcbench.judge.base import Judge, JudgeError, Prompt
from xmcbench.paths import home

__all__ = ["CachedJudge", "JudgementCache", "default_cache_path"]

T = TypeVar("T")
log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judgements (
    dataset_version VARCHAR NOT NULL,
    doc_id BIGINT NOT NULL,
    label_id BIGINT NOT NULL,
    prompt_id VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    p_yes DOUBLE NOT NULL,
    created TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (dataset_version, doc_id, label_id, prompt_id, model)
)
"""


def default_cache_path() -> Path:
    return home() / "judgements.duckdb"


class DamagedCacheError(JudgeError):
    """The judgement cache file cannot be read as a DuckDB database."""


def _retry(action: Callable[[], T], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            return action()
        except duckdb.Error as exc:
            if not duckdb_conflict(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _first_occurrences(doc_ids: np.ndarray, label_ids: np.ndarray, p_yes: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of the rows to insert, each (doc, label) pair once, at its first occurrence and
    in the given order: what row-by-row ``INSERT OR IGNORE`` kept, which one set-based statement
    does not promise for repeats within itself."""
    keys = np.stack([doc_ids, label_ids], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    if first.size < keys.shape[0]:
        keep = np.sort(first)
        doc_ids, label_ids, p_yes = doc_ids[keep], label_ids[keep], p_yes[keep]
    return {"doc_id": doc_ids, "label_id": label_ids, "p_yes": p_yes}


class JudgementCache:
    def __init__(self, path: Path | None = None, timeout_s: float = 120.0):
        self.path = Path(path) if path is not None else default_cache_path()
        self.timeout_s = timeout_s

    def _check_not_folder(self) -> None:
        if self.path.is_dir():
            raise JudgeError(f"the judgement cache {self.path} is a folder; give a file path (e.g. judgements.duckdb)")

    def _move_aside(self, why: BaseException) -> Path:
        """Keep a damaged file (and its write-ahead log, which must not replay onto a fresh file) beside it."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        os.replace(self.path, aside)
        wal = self.path.with_name(self.path.name + ".wal")
        if wal.exists():
            os.replace(wal, aside.with_name(aside.name + ".wal"))
        log.warning(
            "the judgement cache %s was damaged (%s); moved aside to %s, starting a fresh one "
            "(the judgements stored there will be asked again)",
            self.path,
            first_line(why),
            aside,
        )
        return aside

    def _connect_for_write(self) -> duckdb.DuckDBPyConnection:
        for attempt in (1, 2):
            con = None
            try:
                con = _retry(lambda: duckdb.connect(str(self.path)), self.timeout_s)
                con.execute(_SCHEMA)
                return con
            except duckdb.Error as exc:
                if con is not None:
                    con.close()
                if attempt == 2 or not (duckdb_damaged(exc) and self.path.exists()):
                    raise
                self._move_aside(exc)
        raise AssertionError("unreachable")

    @contextmanager
    def _write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        self._check_not_folder()
        try:  # OSError: its folder or lock file cannot be made (read-only home, a file in the way)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with file_lock(
                self.path.with_name(self.path.name + ".lock"),
                timeout=self.timeout_s,
                what=f"the judgement cache {self.path}",
            ):
                try:
                    con = self._connect_for_write()
                except duckdb.Error as exc:
                    raise JudgeError(self._cannot_write(exc)) from None
                try:
                    yield con
                except duckdb.Error as exc:
                    raise JudgeError(self._cannot_write(exc)) from None
                finally:
                    con.close()
        except OSError as exc:
            raise JudgeError(self._cannot_write(exc)) from None

    def _cannot_write(self, exc: BaseException) -> str:
        if duckdb_conflict(exc):
            return f"the judgement cache {self.path} stayed locked by another process for {self.timeout_s:.0f} s"
        why = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else first_line(exc)
        return (
            f"cannot write the judgement cache {self.path} ({why}); nothing of this write was "
            "stored: free space or fix its permissions, or judge without the cache (cache: false, --no-cache)"
        )

    def _read(self, sql: str, params: list | None = None) -> list[tuple]:
        self._check_not_folder()
        if not self.path.exists():
            return []

        def run() -> list[tuple]:
            con = duckdb.connect(str(self.path), read_only=True)
            try:
                return con.execute(sql, params or []).fetchall()
            except duckdb.CatalogException:  # created but no table yet
                return []
            finally:
                con.close()

        try:
            return _retry(run, self.timeout_s)
        except duckdb.Error as exc:
            if duckdb_damaged(exc):
                raise DamagedCacheError(
                    f"the judgement cache {self.path} is damaged ({first_line(exc)}); the next run that stores "
                    "judgements moves it aside and starts a fresh one, or move it away yourself"
                ) from None
            if duckdb_conflict(exc):
                raise JudgeError(
                    f"the judgement cache {self.path} stayed locked by another process for {self.timeout_s:.0f} s"
                ) from None
            raise

    def lookup(
        self, dataset_version: str, prompt_id: str, model: str, doc_ids: np.ndarray, label_ids: np.ndarray
    ) -> np.ndarray:
        """(n,) stored P(yes) of each pair, NaN where not judged yet."""
        out = np.full(len(doc_ids), np.nan)
        if len(doc_ids) == 0:
            return out
        try:
            rows = self._read(
                "SELECT doc_id, label_id, p_yes FROM judgements WHERE dataset_version = ? AND prompt_id = ? "
                "AND model = ? AND doc_id BETWEEN ? AND ?",
                [dataset_version, prompt_id, model, int(np.min(doc_ids)), int(np.max(doc_ids))],
            )
        except DamagedCacheError as exc:  # a cache: what it cannot answer is asked again
            log.warning("%s", exc)
            return out
        if rows:
            known = {(d, lab): p for d, lab, p in rows}
            for i, (d, lab) in enumerate(zip(doc_ids.tolist(), label_ids.tolist(), strict=False)):
                p = known.get((d, lab))
                if p is not None:
                    out[i] = p
        return out

    def store(
        self,
        dataset_version: str,
        prompt_id: str,
        model: str,
        doc_ids: np.ndarray,
        label_ids: np.ndarray,
        p_yes: np.ndarray,
    ) -> None:
        """Store P(yes) of the pairs (doc_ids[i], label_ids[i]) in one transaction. A pair stored
        before keeps its first answer, and so does a pair given twice here (its first occurrence)."""
        n = min(len(doc_ids), len(label_ids), len(p_yes))  # as zip did: the shortest decides
        if n == 0:
            return
        batch = _first_occurrences(
            np.asarray(doc_ids[:n], dtype=np.int64),
            np.asarray(label_ids[:n], dtype=np.int64),
            np.asarray(p_yes[:n], dtype=np.float64),
        )
        with self._write() as con:
            # One set-based statement over the registered arrays: executemany runs row by row in DuckDB
            # (5,000 rows took seconds; benchmarks/bench_judge_cache.py).
            # A NaN in a scanned numpy column reads as NULL: coalesce stores it as the NaN it was.
            con.register("judge_batch", batch)
            con.execute("BEGIN")
            con.execute(
                "INSERT OR IGNORE INTO judgements (dataset_version, doc_id, label_id, prompt_id, model, p_yes) "
                "SELECT ?, doc_id, label_id, ?, ?, coalesce(p_yes, 'NaN'::DOUBLE) FROM judge_batch",
                [dataset_version, prompt_id, model],
            )
            con.execute("COMMIT")

    def stats(self) -> list[tuple]:
        """(dataset_version, prompt_id, model, judgements, mean P(yes)) per group."""
        return self._read(
            "SELECT dataset_version, prompt_id, model, count(*), avg(p_yes) FROM judgements GROUP BY ALL ORDER BY ALL"
        )

    def export(self, out: Path) -> int:
        """Write every judgement to a CSV or Parquet file (by suffix); the number written. The file
        appears whole or not at all (written beside it, then renamed)."""
        out = Path(out)
        formats = {".parquet": "PARQUET", ".csv": "CSV, HEADER"}
        fmt = formats.get(out.suffix.lower())
        if fmt is None:
            raise JudgeError(f"cannot export to {out}: name a .csv or .parquet file")
        if not self.path.exists():
            raise JudgeError(f"no judgement cache at {self.path}")
        if not out.parent.is_dir():
            raise JudgeError(f"cannot export to {out}: the folder {out.parent} does not exist")
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")

        def run() -> int:
            con = duckdb.connect(str(self.path), read_only=True)
            try:
                n = con.execute("SELECT count(*) FROM judgements").fetchone()[0]
                target = str(tmp).replace("'", "''")  # a quote in the path must not end the SQL string
                con.execute(f"COPY (SELECT * FROM judgements ORDER BY ALL) TO '{target}' (FORMAT {fmt})")
                return int(n)
            finally:
                con.close()

        self._check_not_folder()
        try:
            n = _retry(run, self.timeout_s)
            os.replace(tmp, out)
        except duckdb.CatalogException:
            raise JudgeError(f"{self.path} holds no judgements table: is it a judgement cache?") from None
        except duckdb.Error as exc:
            if duckdb_damaged(exc) and str(tmp) not in str(exc):  # the cache, not the file being written
                raise DamagedCacheError(
                    f"the judgement cache {self.path} is damaged ({first_line(exc)}); nothing was exported"
                ) from None
            raise JudgeError(f"cannot export to {out} ({first_line(exc)}); nothing was written") from None
        except OSError as exc:
            raise JudgeError(f"cannot export to {out} ({exc}); nothing was written") from None
        finally:
            tmp.unlink(missing_ok=True)
        return n

    def clear(self, *, dataset_version: str | None = None, model: str | None = None) -> int:
        """Delete judgements (all, or of one dataset version / model); the number deleted.

        ``model`` is a model key as ``stats`` lists it; its settings in brackets may be left out."""
        clause, params = self._filter(dataset_version, model)
        if not self.path.exists():
            return 0
        with self._write() as con:
            n = con.execute(f"SELECT count(*) FROM judgements{clause}", params).fetchone()[0]
            con.execute(f"DELETE FROM judgements{clause}", params)
        return int(n)

    def count(self, *, dataset_version: str | None = None, model: str | None = None) -> int:
        """How many judgements ``clear`` with the same filters would delete."""
        clause, params = self._filter(dataset_version, model)
        rows = self._read(f"SELECT count(*) FROM judgements{clause}", params)
        return int(rows[0][0]) if rows else 0

    @staticmethod
    def _filter(dataset_version: str | None, model: str | None) -> tuple[str, list]:
        where, params = [], []
        for name, value in (("dataset version", dataset_version), ("model", model)):
            if value is not None and not value.strip():  # an unset $MODEL in a script: never "delete all"
                raise JudgeError(f"the {name} to clear is empty; give one, or leave the option out to clear all")
        if dataset_version is not None:
            where.append("dataset_version = ?")
            params.append(dataset_version)
        if model is not None:
            where.append("(model = ? OR starts_with(model, ?))")
            params += [model, model + " ["]
        return (f" WHERE {' AND '.join(where)}" if where else ""), params


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class CachedJudge:
    """A judge behind the cache: ``judge(...)`` asks the model only about pairs never judged."""

    def __init__(self, judge: Judge, cache: JudgementCache | None, prompt: Prompt):
        self.judge = judge
        self.cache = cache
        self.prompt = prompt
        # Everything that changes an answer keys it: the model, and how much of a document it reads
        # (an answer judged on 100 characters is no answer for 3,000) and in what precision.
        settings = getattr(judge, "answer_settings", "")
        self.model_key = f"{judge.model_id}@{judge.revision}" + (f" [{settings}]" if settings else "")
        # a packaged prompt is named by its id; its text may change with xmcbench's version
        self.prompt_key = prompt.id if "@" in prompt.id else f"{prompt.id}@{_digest(prompt.template)}"
        judge.stats.prompt_id = prompt.id

    @property
    def stats(self):
        return self.judge.stats

    def judge_pairs(
        self,
        dataset_version: str,
        doc_ids: np.ndarray,
        label_ids: np.ndarray,
        doc_texts: Sequence[str],
        label_texts: Sequence[str],
        *,
        chunk: int = 256,
    ) -> np.ndarray:
        """(n,) P(yes) of the pairs (doc_ids[i], label_ids[i]); ``doc_texts[doc_id]`` and
        ``label_texts[label_id]`` are the texts. Answers are stored every ``chunk`` pairs, so an
        interrupted run loses at most one chunk."""
        doc_ids = np.asarray(doc_ids, dtype=np.int64)
        label_ids = np.asarray(label_ids, dtype=np.int64)
        p = (
            self.cache.lookup(dataset_version, self.prompt_key, self.model_key, doc_ids, label_ids)
            if self.cache is not None
            else np.full(len(doc_ids), np.nan)
        )
        hits = int(np.isfinite(p).sum())
        self.stats.cache_hits += hits
        todo = np.flatnonzero(np.isnan(p))
        log.info("judge: %d pairs, %d answered by the cache, %d to ask", len(p), hits, todo.size)
        start = time.monotonic()
        for s in range(0, todo.size, chunk):
            idx = todo[s : s + chunk]
            answers = self.judge.p_yes(
                [doc_texts[d] for d in doc_ids[idx]], [label_texts[lab] for lab in label_ids[idx]], self.prompt
            )
            p[idx] = answers
            if self.cache is not None:
                self.cache.store(
                    dataset_version, self.prompt_key, self.model_key, doc_ids[idx], label_ids[idx], answers
                )
            done, elapsed = s + idx.size, time.monotonic() - start
            rate = done / max(elapsed, 1e-9)
            left = (todo.size - done) / rate
            log.info("judge: %d/%d asked, %.2f/s, %.0fs elapsed, ~%.0fs left", done, todo.size, rate, elapsed, left)
        return p
