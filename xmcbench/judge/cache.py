"""Every judgement stored once: a DuckDB file beside the results store.

    judgements(dataset_version, doc_id, label_id, prompt_id, model, p_yes, created)
    primary key (dataset_version, doc_id, label_id, prompt_id, model)

``model`` is ``<model id>@<revision>`` so a different file or commit never reuses an answer.
Writers follow the results store's rules: the exclusive ``<db>.lock`` (``fsutil.file_lock``),
then open read-write, retrying while DuckDB's own lock is held by a reader, one transaction,
``INSERT OR IGNORE`` (two runs that judged the same pair concurrently agree; the first wins).
Readers take no lock file and retry on a conflict. The store's schema is untouched.

``CachedJudge`` puts the cache in front of any judge: it asks only the pairs not yet stored and
counts cache hits in the judge's stats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import duckdb
import numpy as np

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


def _conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, duckdb.IOException) and ("conflicting lock" in text or "could not set lock" in text)


def _retry(action: Callable[[], T], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            return action()
        except duckdb.Error as exc:
            if not _conflict(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


class JudgementCache:
    def __init__(self, path: Path | None = None, timeout_s: float = 120.0):
        self.path = Path(path) if path is not None else default_cache_path()
        self.timeout_s = timeout_s

    @contextmanager
    def _write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(
            self.path.with_name(self.path.name + ".lock"),
            timeout=self.timeout_s,
            what=f"the judgement cache {self.path}",
        ):
            con = _retry(lambda: duckdb.connect(str(self.path)), self.timeout_s)
            try:
                con.execute(_SCHEMA)
                yield con
            finally:
                con.close()

    def _read(self, sql: str, params: list | None = None) -> list[tuple]:
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

        return _retry(run, self.timeout_s)

    def lookup(
        self, dataset_version: str, prompt_id: str, model: str, doc_ids: np.ndarray, label_ids: np.ndarray
    ) -> np.ndarray:
        """(n,) stored P(yes) of each pair, NaN where not judged yet."""
        out = np.full(len(doc_ids), np.nan)
        if len(doc_ids) == 0:
            return out
        rows = self._read(
            "SELECT doc_id, label_id, p_yes FROM judgements WHERE dataset_version = ? AND prompt_id = ? AND model = ? "
            "AND doc_id BETWEEN ? AND ?",
            [dataset_version, prompt_id, model, int(np.min(doc_ids)), int(np.max(doc_ids))],
        )
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
        if len(doc_ids) == 0:
            return
        rows = [
            (dataset_version, int(d), int(lab), prompt_id, model, float(p))
            for d, lab, p in zip(doc_ids, label_ids, p_yes, strict=False)
        ]
        with self._write() as con:
            con.execute("BEGIN")
            con.executemany(
                "INSERT OR IGNORE INTO judgements (dataset_version, doc_id, label_id, prompt_id, model, "
                "p_yes) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            con.execute("COMMIT")

    def stats(self) -> list[tuple]:
        """(dataset_version, prompt_id, model, judgements, mean P(yes)) per group."""
        return self._read(
            "SELECT dataset_version, prompt_id, model, count(*), avg(p_yes) FROM judgements GROUP BY ALL ORDER BY ALL"
        )

    def export(self, out: Path) -> int:
        """Write every judgement to a CSV or Parquet file (by suffix); the number written."""
        fmt = "PARQUET" if out.suffix == ".parquet" else "CSV, HEADER"
        if not self.path.exists():
            raise JudgeError(f"no judgement cache at {self.path}")
        con = _retry(lambda: duckdb.connect(str(self.path), read_only=True), self.timeout_s)
        try:
            n = con.execute("SELECT count(*) FROM judgements").fetchone()[0]
            con.execute(f"COPY (SELECT * FROM judgements ORDER BY ALL) TO '{out}' (FORMAT {fmt})")
        finally:
            con.close()
        return int(n)

    def clear(self, *, dataset_version: str | None = None, model: str | None = None) -> int:
        """Delete judgements (all, or of one dataset version / model); the number deleted."""
        if not self.path.exists():
            return 0
        where, params = [], []
        if dataset_version:
            where.append("dataset_version = ?")
            params.append(dataset_version)
        if model:
            where.append("model = ?")
            params.append(model)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._write() as con:
            n = con.execute(f"SELECT count(*) FROM judgements{clause}", params).fetchone()[0]
            con.execute(f"DELETE FROM judgements{clause}", params)
        return int(n)


class CachedJudge:
    """A judge behind the cache: ``judge(...)`` asks the model only about pairs never judged."""

    def __init__(self, judge: Judge, cache: JudgementCache | None, prompt: Prompt):
        self.judge = judge
        self.cache = cache
        self.prompt = prompt
        self.model_key = f"{judge.model_id}@{judge.revision}"
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
            self.cache.lookup(dataset_version, self.prompt.id, self.model_key, doc_ids, label_ids)
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
                self.cache.store(dataset_version, self.prompt.id, self.model_key, doc_ids[idx], label_ids[idx], answers)
            done, elapsed = s + idx.size, time.monotonic() - start
            rate = done / max(elapsed, 1e-9)
            left = (todo.size - done) / rate
            log.info("judge: %d/%d asked, %.2f/s, %.0fs elapsed, ~%.0fs left", done, todo.size, rate, elapsed, left)
        return p
