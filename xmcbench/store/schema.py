"""The results database schema, as an ordered list of migrations.

The database is an index over run directories (see ``record.py``) plus the published reference
results; it can always be rebuilt with ``xmcbench ingest``. Its schema is versioned: the table
``schema_version`` holds one row per applied migration. Opening an older database applies the
missing migrations in order (in one transaction, under the write lock); opening a database made
by a newer xmcbench is refused, because this code cannot know what the newer columns mean.

To change the schema, append a migration; never edit one that has shipped.

All tables are long ("tidy"): one row per run, one row per (run, metric), ... so that new metrics,
phases or settings never need a schema change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import duckdb

from xmcbench.errors import XmcbenchError


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs, scores and compute",
        (
            """
            CREATE TABLE runs (
                run_id              VARCHAR PRIMARY KEY,
                record_schema       INTEGER NOT NULL,   -- schema_version of record.json
                status              VARCHAR NOT NULL,   -- running | finished | failed | interrupted
                created_at          TIMESTAMP,          -- UTC
                updated_at          TIMESTAMP,
                finished_at         TIMESTAMP,
                error               VARCHAR,
                dataset             VARCHAR NOT NULL,
                dataset_version     VARCHAR,
                split               VARCHAR NOT NULL,
                n_queries           BIGINT,
                n_queries_evaluated BIGINT,
                n_labels            BIGINT,
                propensity_a        DOUBLE,
                propensity_b        DOUBLE,
                filter              VARCHAR,
                supervision         VARCHAR,
                label_fraction      DOUBLE,
                method              VARCHAR NOT NULL,
                encoder             VARCHAR,
                encoder_revision    VARCHAR,
                params_total        BIGINT,
                params_trainable    BIGINT,
                xmcbench_version    VARCHAR,
                git_commit          VARCHAR,
                git_dirty           BOOLEAN,
                recipe_hash         VARCHAR,
                recipe_path         VARCHAR,
                command             VARCHAR,
                seed                BIGINT,
                python              VARCHAR,
                platform            VARCHAR,
                host                VARCHAR,
                run_dir             VARCHAR,            -- where record.json and predictions.npz are
                record_sha256       VARCHAR NOT NULL,   -- lets ingest skip unchanged records
                record_json         VARCHAR NOT NULL,   -- the whole record, so `runs show` needs no files
                ingested_at         TIMESTAMP NOT NULL
            )
            """,
            """
            CREATE TABLE scores (
                run_id           VARCHAR NOT NULL,
                name             VARCHAR NOT NULL,      -- "P@1"
                metric           VARCHAR NOT NULL,      -- "P"
                k                INTEGER,
                value            DOUBLE NOT NULL,       -- percent (x100), like the papers
                ci_lo            DOUBLE,                -- 95% bootstrap interval
                ci_hi            DOUBLE,
                higher_is_better BOOLEAN NOT NULL,
                PRIMARY KEY (run_id, name)
            )
            """,
            """
            CREATE TABLE compute (
                run_id           VARCHAR PRIMARY KEY,
                device_type      VARCHAR,               -- cpu | cuda
                device_names     VARCHAR[],
                device_count     INTEGER,
                cuda_version     VARCHAR,
                driver_version   VARCHAR,
                cpu              VARCHAR,
                ram_gb           DOUBLE,
                wall_prepare_s   DOUBLE,
                wall_train_s     DOUBLE,
                wall_predict_s   DOUBLE,
                wall_evaluate_s  DOUBLE,
                wall_total_s     DOUBLE,                -- sum over every recorded phase
                gpu_hours        DOUBLE,                -- (train + predict wall time) x GPUs used
                peak_gpu_mem_gb  DOUBLE,
                peak_host_mem_gb DOUBLE
            )
            """,
        ),
    ),
    Migration(
        2,
        "method accounting, head/torso/tail scores and published reference results",
        (
            """
            CREATE TABLE accounting (
                run_id                   VARCHAR PRIMARY KEY,
                batch_size               BIGINT,
                pool_size_mean           DOUBLE,        -- labels scored per step (in-batch + hard negatives)
                pool_size_max            BIGINT,
                positives_per_query      DOUBLE,
                hard_negatives_per_query DOUBLE,
                refresh_interval         BIGINT,        -- steps between hard-negative refreshes
                steps                    BIGINT
            )
            """,
            """
            CREATE TABLE group_scores (
                run_id VARCHAR NOT NULL,
                grp    VARCHAR NOT NULL,                -- head | torso | tail
                name   VARCHAR NOT NULL,
                value  DOUBLE NOT NULL,
                PRIMARY KEY (run_id, grp, name)
            )
            """,
            """
            CREATE TABLE reference_results (
                paper            VARCHAR NOT NULL,      -- paper id: prime, unidec, dexml, maclr, lmtx
                paper_table      VARCHAR NOT NULL,      -- where in the paper, e.g. "Table 2"
                dataset          VARCHAR NOT NULL,
                dataset_variant  VARCHAR,               -- set when the paper used another copy of the dataset
                method           VARCHAR NOT NULL,      -- the method's own name ("NGAME")
                variant          VARCHAR,               -- what the row adds to it ("(W)", "SoftTop-5")
                printed_name     VARCHAR NOT NULL,      -- the row label as the table prints it
                setting          VARCHAR NOT NULL,      -- full | zero-shot | few-shot-<n>% | few-shot-<n>%-pairs
                metric           VARCHAR NOT NULL,      -- "P@1"
                value            DOUBLE NOT NULL,       -- percent, as printed
                batch_size       BIGINT,
                label_pool       VARCHAR,               -- a count or the printed abbreviation ("~1.3M")
                gpus             INTEGER,
                gpu_type         VARCHAR,
                train_time_hours DOUBLE,                -- wall-clock training time on `gpus` GPUs
                test_queries     BIGINT,                -- set only when not the full test set
                notes            VARCHAR,
                loaded_at        TIMESTAMP NOT NULL
            )
            """,
        ),
    ),
    Migration(
        3,
        "sweeps: which runs each sweep started",
        (
            """
            CREATE TABLE sweeps (
                sweep_id  VARCHAR NOT NULL,
                run_id    VARCHAR NOT NULL,
                run_key   VARCHAR NOT NULL,             -- the run's place in the sweep: "dexml lr=0.0001 seed=1"
                seed      BIGINT,
                launcher  VARCHAR NOT NULL,             -- local | slurm
                added_at  TIMESTAMP NOT NULL,
                PRIMARY KEY (sweep_id, run_id)
            )
            """,
        ),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version


def utcnow() -> datetime:
    """Now in UTC, naive (the database stores every timestamp as naive UTC)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version of an open database; 0 for an empty one."""
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
    ).fetchone()[0]
    if not exists:
        return 0
    version = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    return int(version or 0)


def check_not_newer(version: int, where: str) -> None:
    if version > SCHEMA_VERSION:
        raise XmcbenchError(
            f"{where}: the results database has schema version {version}, newer than this xmcbench "
            f"understands ({SCHEMA_VERSION}); upgrade xmcbench, or point --db at another file "
            f"(the database can be rebuilt from run directories with `xmcbench ingest`)"
        )


def migrate(con: duckdb.DuckDBPyConnection, where: str, target: int | None = None) -> int:
    """Apply the missing migrations up to ``target`` (default: the latest) in one transaction.

    Returns the version the database has afterwards. The caller holds the write lock.
    """
    target = SCHEMA_VERSION if target is None else target
    version = current_version(con)
    check_not_newer(version, where)
    pending = [m for m in MIGRATIONS if version < m.version <= target]
    if not pending:
        return version
    con.execute("BEGIN TRANSACTION")
    try:
        if version == 0:
            con.execute(
                "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description VARCHAR, "
                "applied_at TIMESTAMP NOT NULL)"
            )
        for migration in pending:
            for statement in migration.statements:
                con.execute(statement)
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?)",
                [migration.version, migration.description, utcnow()],
            )
        con.execute("COMMIT")
    except Exception:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # a failed COMMIT (disk full) has ended the transaction already; its error is the one to tell
        raise
    return pending[-1].version
