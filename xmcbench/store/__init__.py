"""The results store: a versioned DuckDB index over run records and published reference results.

- ``schema.py`` — tables and ordered migrations (``SCHEMA_VERSION``).
- ``record.py`` — reading and checking ``record.json``, turning it into rows.
- ``lock.py``   — the write lock and read retries that make concurrent runs safe.
- ``store.py``  — ``Store``: open (to write, or ``read_only``), ingest, load reference results,
  query; its errors (``NoDatabaseError``, ``DamagedDatabaseError``, ``DatabaseWriteError``) are
  one line saying what to do.
"""

from xmcbench.store.lock import DatabaseLockTimeout
from xmcbench.store.record import RECORD_SCHEMA_VERSION, read_record, record_rows
from xmcbench.store.schema import SCHEMA_VERSION
from xmcbench.store.store import (
    COMPARABILITY_KEY,
    DamagedDatabaseError,
    DatabaseWriteError,
    IngestReport,
    NoDatabaseError,
    Store,
)

__all__ = [
    "COMPARABILITY_KEY",
    "RECORD_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "DamagedDatabaseError",
    "DatabaseLockTimeout",
    "DatabaseWriteError",
    "IngestReport",
    "NoDatabaseError",
    "Store",
    "read_record",
    "record_rows",
]
