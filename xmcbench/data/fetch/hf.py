"""The Hugging Face Hub transport: ``hf://ORG/REPO[/subdir]`` dataset repos via huggingface_hub.

Honours ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE``. The expected raw files are fetched
when the repo has them; otherwise its archives, which the caller extracts.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePosixPath

from xmcbench.data.catalog import DatasetSpec, Source
from xmcbench.data.fetch.common import disk_full, walk
from xmcbench.data.fetch.sources import describe_source
from xmcbench.data.raw import twins
from xmcbench.errors import DownloadError
from xmcbench.faults import network_failure
from xmcbench.redact import redact


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def fetch_hf(spec: DatasetSpec, src: Source, local_dir: Path, progress: bool) -> Path:
    """Snapshot of the expected files (or, failing that, the archives) of a Hub dataset repo."""
    from huggingface_hub import snapshot_download  # heavy optional dependency
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    offline = _env_true("HF_HUB_OFFLINE")
    endpoint = os.environ.get("HF_ENDPOINT") or None
    where = describe_source(src)
    prefix = f"{src.subdir.strip('/')}/" if src.subdir else ""
    wanted = [f"{prefix}*{name}" for f in spec.files for name in twins(PurePosixPath(f).name)]
    archives = [f"{prefix}*{suffix}" for suffix in (".zip", ".tar", ".tar.gz", ".tgz")]
    was_disabled = are_progress_bars_disabled()
    if not progress:
        disable_progress_bars()
    try:
        for patterns in (wanted, archives):  # files first; the archives only when they are absent
            folder = Path(
                snapshot_download(
                    src.ref,
                    repo_type="dataset",
                    allow_patterns=patterns,
                    local_dir=local_dir,
                    local_files_only=offline,
                    endpoint=endpoint,
                )
            )
            names = {p.name for p in walk(folder)}
            if all(any(t in names for t in twins(PurePosixPath(f).name)) for f in spec.files):
                break
        return folder
    except LocalEntryNotFoundError as exc:
        if offline:
            raise DownloadError(
                f"cannot download {spec.name} from {where}: HF_HUB_OFFLINE is set and the files are not "
                "cached; unset HF_HUB_OFFLINE, or pass --source DIR with the files"
            ) from None
        first = redact(str(exc)).splitlines()[0]
        raise DownloadError(
            f"cannot download {spec.name} from {where} ({redact(endpoint or 'huggingface.co')}): {first}"
        ) from None
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise DownloadError(
            f"cannot download {spec.name}: dataset repo {where} not found or not accessible "
            f"({type(exc).__name__}); check the name, or set HF_TOKEN for a private/gated repo"
        ) from None
    except HfHubHTTPError as exc:
        raise DownloadError(f"cannot download {spec.name} from {where}: {redact(str(exc)).splitlines()[0]}") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(f"downloading {spec.name}", local_dir.parent) from None
        raise
    except Exception as exc:
        broken = network_failure(exc)
        if broken is None:
            raise
        # a read timeout or a connection dropped mid-file: the files already complete are kept
        raise DownloadError(
            f"cannot download {spec.name} from {where}: the connection to the Hub failed "
            f"({type(broken).__name__}: {redact(str(broken))}); run the same command again to go on"
        ) from None
    finally:
        if not progress and not was_disabled:
            enable_progress_bars()
