"""Where xmcbench keeps things.

Everything xmcbench writes (raw downloads, prepared caches, tokenisation caches, runs, the
results database) lives under one home folder so that users and tests can point it anywhere:
``$XMCBENCH_HOME`` if set, else the platform's user cache directory (``~/.cache/xmcbench``
on Linux, honouring ``$XDG_CACHE_HOME``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def home() -> Path:
    env = os.environ.get("XMCBENCH_HOME")
    if env:
        return Path(env).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "xmcbench"


def datasets_dir() -> Path:
    """Raw files as downloaded, one folder per canonical dataset name."""
    return home() / "datasets"


def dataset_raw_dir(name: str) -> Path:
    return datasets_dir() / name / "raw"


def dataset_prepared_dir(name: str) -> Path:
    return datasets_dir() / name / "prepared"


def runs_dir() -> Path:
    return home() / "runs"


def cache_dir() -> Path:
    """Derived caches that can always be rebuilt (tokenisation, embeddings)."""
    return home() / "cache"


def default_db_path() -> Path:
    return home() / "xmcbench.duckdb"


def locks_dir() -> Path:
    """Lock files that keep two processes from making one dataset at once."""
    return datasets_dir() / ".locks"
