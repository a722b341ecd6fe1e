"""A dataset's raw files on disk: where they are, their manifest, and whether they are intact.

Raw files live in ``paths.dataset_raw_dir(spec.raw_group)``; ``manifest.json`` there records
every file xmcbench downloaded or made::

    {"trn.json.gz": {"sha256": "...", "size": 123, "source": "gdrive:1Wuq...", "downloaded_at": "..."}, ...}

No official checksums are published for the XC datasets, so the first download is the reference:
``verify_dataset`` recomputes the sha256 of every file against it, ``raw_status`` is the quick
check (presence and size). A spec file ``trn.json.gz`` is also satisfied by its plain twin
``trn.json`` (and the reverse): some mirrors ship them that way, and the readers tell gzip by its
magic bytes, not by the name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from xmcbench import fsutil, paths
from xmcbench.data.catalog import DatasetSpec, resolve_spec
from xmcbench.errors import DownloadError, XmcbenchError
from xmcbench.redact import redact

MANIFEST_NAME = "manifest.json"


def twins(name: str) -> tuple[str, str]:
    """A raw file name and its gzipped/plain twin ('trn.json.gz' -> 'trn.json')."""
    return (name, name[:-3]) if name.endswith(".gz") else (name, name + ".gz")


def find_raw_file(raw_dir: Path, filename: str) -> Path | None:
    """Where ``filename`` is in ``raw_dir``, also accepting its uncompressed / gzipped twin."""
    raw_dir = Path(raw_dir)
    for candidate in twins(filename):
        if (raw_dir / candidate).is_file():
            return raw_dir / candidate
    return None


def raw_files(spec: DatasetSpec, raw_dir: Path) -> dict[str, Path]:
    """``{spec file name: path on disk}`` for every file of ``spec``; XmcbenchError naming what is missing."""
    found = {name: find_raw_file(raw_dir, name) for name in spec.files}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise XmcbenchError(
            f"dataset {spec.name}: {', '.join(missing)} missing in {raw_dir}; "
            f"run `xmcbench datasets download {spec.name}`"
        )
    return found  # type: ignore[return-value]


def raw_complete(spec: DatasetSpec, raw_dir: Path) -> bool:
    """Whether every raw file of ``spec`` (or its twin) is in ``raw_dir``."""
    return all(find_raw_file(raw_dir, name) is not None for name in spec.files)


# --------------------------------------------------------------------------------------------
# the manifest


def read_manifest(raw_dir: str | os.PathLike) -> dict[str, dict]:
    """``{file: {"sha256", "size", "source", "downloaded_at"}}``; ``{}`` when there is none."""
    path = Path(raw_dir) / MANIFEST_NAME
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DownloadError(f"{path} is not readable JSON ({exc}); delete it and download the dataset again") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "sha256" in v for v in data.values()):
        raise DownloadError(f"{path} is not an xmcbench manifest; delete it and download the dataset again")
    return data


def manifest_or_empty(raw_dir: Path) -> dict[str, dict]:
    """``read_manifest``, or {} when the manifest is absent or unreadable."""
    try:
        return read_manifest(raw_dir)
    except XmcbenchError:
        return {}


def save_manifest(raw_dir: Path, entries: dict[str, dict]) -> Path:
    path = Path(raw_dir) / MANIFEST_NAME
    fsutil.write_json(path, dict(sorted(entries.items())))
    return path


def record_manifest(raw_dir: str | os.PathLike, files: list[str], source: str) -> dict[str, dict]:
    """Hash ``files`` (names relative to ``raw_dir``; a gzipped/plain twin counts) and write the manifest.

    For raw files made here rather than downloaded (``datasets synth``, a user's own files).
    Entries whose content did not change keep their original ``downloaded_at``. Returns the entries.
    """
    raw_dir = Path(raw_dir)
    old = read_manifest(raw_dir)
    now = fsutil.utc_now()
    entries = {}
    for name in files:
        path = find_raw_file(raw_dir, name)
        if path is None:
            raise DownloadError(f"cannot record {MANIFEST_NAME}: {name} is missing in {raw_dir}")
        key = path.relative_to(raw_dir).as_posix()
        digest = fsutil.sha256_file(path)
        prev = old.get(key)
        if prev and prev.get("sha256") == digest:
            entries[key] = prev
        else:
            entries[key] = {
                "sha256": digest,
                "size": path.stat().st_size,
                "source": redact(source),
                "downloaded_at": now,
            }
    save_manifest(raw_dir, entries)
    return entries


# --------------------------------------------------------------------------------------------
# verification


@dataclass
class FileCheck:
    name: str
    status: Literal["ok", "missing", "changed", "unrecorded"]
    detail: str = ""


@dataclass
class VerifyReport:
    """Outcome of ``verify_dataset``: one ``FileCheck`` per expected file."""

    dataset: str
    raw_dir: Path
    manifest_found: bool
    files: list[FileCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.manifest_found and all(f.status == "ok" for f in self.files)

    def problems(self) -> list[str]:
        if not self.manifest_found:
            return [f"no {MANIFEST_NAME} in {self.raw_dir}: {self.dataset} was not downloaded by xmcbench here"]
        return [
            f"{f.name}: {f.status}" + (f" ({f.detail})" if f.detail else "") for f in self.files if f.status != "ok"
        ]


def verify_dataset(name: str | DatasetSpec) -> VerifyReport:
    """Recompute size and sha256 of every expected raw file and compare with the manifest."""
    spec = resolve_spec(name)
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    manifest = read_manifest(raw_dir)
    report = VerifyReport(dataset=spec.name, raw_dir=raw_dir, manifest_found=bool(manifest))
    for expected in spec.files:
        path = find_raw_file(raw_dir, expected)
        if path is None:
            report.files.append(FileCheck(expected, "missing", f"expected at {raw_dir / expected}"))
            continue
        key = path.relative_to(raw_dir).as_posix()
        entry = manifest.get(key)
        size = path.stat().st_size
        if entry is None:
            report.files.append(FileCheck(key, "unrecorded", f"not in {MANIFEST_NAME}"))
        elif size != entry.get("size"):
            report.files.append(FileCheck(key, "changed", f"size {size:,}, recorded {entry.get('size'):,}"))
        else:
            digest = fsutil.sha256_file(path)
            if digest != entry["sha256"]:
                report.files.append(
                    FileCheck(key, "changed", f"sha256 {digest[:12]}…, recorded {entry['sha256'][:12]}…")
                )
            else:
                report.files.append(FileCheck(key, "ok"))
    return report


def raw_status(name: str | DatasetSpec) -> Literal["complete", "partial", "missing"]:
    """Quick presence check without hashing: 'complete' when every expected file exists with the
    size its manifest entry records."""
    spec = resolve_spec(name)
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    try:
        manifest = read_manifest(raw_dir)
    except DownloadError:
        return "partial"
    found = [find_raw_file(raw_dir, n) for n in spec.files]
    if not any(found):
        return "missing"
    complete = all(
        p is not None and manifest.get(p.relative_to(raw_dir).as_posix(), {}).get("size") == p.stat().st_size
        for p in found
    )
    return "complete" if complete else "partial"
