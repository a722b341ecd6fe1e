"""Test helpers for LF JSON-lines files: write records (as a mirror would) and read them back one by one.

Not part of xmcbench: the package reads these files in chunks (``read_lf_chunks``) and writes them
only from the synthetic generator (``write_lines``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from xmcbench.data.formats.lf_json import orjson, read_lf_chunks, write_lines


def iter_records(path: Path, *, targets: bool = True, n_labels: int | None = None) -> Iterator[dict]:
    """Records one by one as dicts ``{uid, title, content[, target_ind]}`` (decoded texts)."""
    for chunk in read_lf_chunks(path, n_labels=n_labels, targets=targets):
        starts = None
        if chunk.target_counts is not None:
            starts = np.concatenate([[0], np.cumsum(chunk.target_counts)])
        for i in range(len(chunk)):
            record = {"uid": chunk.uids[i], "title": chunk.titles[i], "content": chunk.contents[i]}
            if starts is not None:
                record["target_ind"] = chunk.target_indices[starts[i] : starts[i + 1]].tolist()
            yield record


def write_lf_json(
    path: Path,
    records: Iterable[dict],
    *,
    compress: bool = True,
    escape_html: bool = True,
    compresslevel: int = 6,
) -> Path:
    """Write records as LF JSON lines (gzip unless ``compress=False``), atomically.

    ``escape_html`` escapes ``& < >`` so that the reader's single decoding gives back the texts.
    """
    escape = (lambda t: html.escape(t, quote=False)) if escape_html else (lambda t: t)
    return write_lines(
        path, (encode_record(r, escape) for r in records), compress=compress, compresslevel=compresslevel
    )


def encode_record(record: dict, escape=lambda t: t) -> bytes:
    """One JSON line (with its newline) in the XC field order."""
    out = {
        "uid": str(record.get("uid", "")),
        "title": escape(record["title"]),
        "content": escape(record.get("content") or ""),
    }
    if "target_ind" in record:
        ind = [int(i) for i in record["target_ind"]]
        out["target_ind"] = ind
        out["target_rel"] = [1.0] * len(ind)
    if orjson is not None:
        return orjson.dumps(out) + b"\n"
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
