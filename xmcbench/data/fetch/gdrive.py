"""The Google Drive transport (gdown): resumable, with quota and permission pages told apart."""

from __future__ import annotations

import errno
import inspect
import os
from pathlib import Path

from xmcbench.data.catalog import DatasetSpec, Source
from xmcbench.data.fetch.common import TIMEOUT_S, byte_bar, disk_full, html_head, page_reason
from xmcbench.data.fetch.sources import SOURCE_HELP
from xmcbench.errors import DownloadError
from xmcbench.redact import redact


def drive_refused(what: str, text: str) -> DownloadError:
    reason = page_reason(text) or "Drive returned a web page instead of the file"
    return DownloadError(
        f"Google Drive refused the download of {what}: {reason}; try again later, or get the files "
        f"elsewhere and {SOURCE_HELP}"
    )


def _unreachable_why(exc: BaseException) -> str:
    """Why a connection failed, in words: requests wraps urllib3's reason in a 'Max retries exceeded'
    sentence that names the URL and the connection pool, not the cause."""
    import requests
    from urllib3.exceptions import MaxRetryError, NameResolutionError, NewConnectionError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    reason = exc.args[0] if exc.args else None
    reason = reason.reason if isinstance(reason, MaxRetryError) else reason
    if isinstance(reason, NameResolutionError):
        return "its name did not resolve: no network, or no DNS"
    # before the timeout: urllib3's NewConnectionError is a kind of ConnectTimeoutError, though most
    # come at once ("No route to host", "Network is unreachable"): the system's words, not a timeout
    if isinstance(reason, NewConnectionError):
        words = str(reason).rpartition("] ")[2].strip() if "[Errno" in str(reason) else ""
        if "refused" in str(reason).lower():
            return "connection refused"
        if words:
            return words[:1].lower() + words[1:]
    if isinstance(exc, requests.Timeout) or isinstance(reason, Urllib3Timeout):
        return f"no answer within {TIMEOUT_S:g} s"
    return type(reason).__name__ if isinstance(reason, BaseException) else type(exc).__name__


def fetch_gdrive(spec: DatasetSpec, src: Source, target: Path, progress: bool) -> Path:
    """Download Drive file ``src.ref`` to ``target``; a web page instead of the file is an error."""
    import gdown  # heavy optional dependency: imported only for a Drive download
    import requests

    # gdown keeps its own resumable '<tmp>*.part' next to this temporary name; the file only gets
    # the final name after we checked it is not an HTML error page.
    tmp = target.with_name(target.name + ".gdown")
    try:
        with byte_bar(progress, spec.name, None) as update:
            # progress/timeout arrived in later gdown releases; pass them where they exist
            accepted = inspect.signature(gdown.download).parameters
            extra = {k: v for k, v in (("progress", update), ("timeout", TIMEOUT_S)) if k in accepted}
            gdown.download(id=src.ref, output=str(tmp), quiet=True, resume=True, **extra)
    except gdown.exceptions.FileURLRetrievalError as exc:
        raise drive_refused(spec.name, str(exc)) from None
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise DownloadError(
            f"cannot download {spec.name} from Google Drive (gdrive:{src.ref}): Google Drive is unreachable "
            f"({_unreachable_why(exc)}); check the network and run the same command again to resume, or {SOURCE_HELP}"
        ) from None
    except (gdown.exceptions.DownloadError, requests.RequestException) as exc:
        raise DownloadError(
            f"cannot download {spec.name} from Google Drive (gdrive:{src.ref}): {redact(str(exc)).splitlines()[0]}; "
            f"run the same command again to resume, or {SOURCE_HELP}"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            for leftover in tmp.parent.glob(tmp.name + "*.part"):
                leftover.unlink(missing_ok=True)
            raise disk_full(f"downloading {spec.name}", tmp.parent, after="; the partial file was deleted") from None
        raise
    if not tmp.is_file():
        raise DownloadError(f"cannot download {spec.name}: gdown wrote nothing for gdrive:{src.ref}; {SOURCE_HELP}")
    page = html_head(tmp)
    if page is not None:
        tmp.unlink()
        raise drive_refused(spec.name, page)
    os.replace(tmp, target)
    return target
