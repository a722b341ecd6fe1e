"""The ``aplc-csv`` format: the raw-text datasets of the XLNet-APLC repository (Wiki10-31K, AmazonCat-13K).

LMTX (Sec. 4): "EURlex-4k, Wiki10-31k, and AmazonCat-13K were obtained from the XLNet-APLC
repository" — https://github.com/huiyegit/APLC_XLNet, README "Prepare Data": preprocessed datasets
on a Google Drive folder (1bRLrc8N3ukzAVn9zyTqr0IqP3fWJUYAt), one sub-folder per dataset.

What the public code shows (``code/utils_multi_label.py``, ``MultiLabelTextProcessor``):
``train.csv`` and ``dev.csv`` (the test split) are read with ``pandas.read_csv(na_filter=False)``:
a header row, then column 0 an id, column 1 the text, column 2 the labels joined by commas
(empty: no label); ``labels.txt`` names one label per line, sorted by decreasing frequency, and
the label strings of column 2 index it by name.

NOT CHECKED against a real file here (no copy was available): the header's column names and the
label strings' exact spelling. The texts carry no separate title, so MACLR's ICT cannot run on
these datasets (LMTX Sec. 4.3 says the same of Wiki10-31K).
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from xmcbench.data.formats import Format, QueryChunk
from xmcbench.data.formats.lf_json import open_maybe_gzip, read_text_lines
from xmcbench.errors import DataFormatError


def read_aplc_csv(path: Path, label_index: dict[str, int]) -> tuple[list[str], list[str], list[list[int]]]:
    """(ids, texts, label indices per row) of one APLC csv file."""
    csv.field_size_limit(sys.maxsize)  # whole documents sit in one field
    ids, texts, rows = [], [], []
    with open_maybe_gzip(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as text:
        reader = csv.reader(text)  # quoted fields may span lines
        next(reader, None)  # header
        for n, record in enumerate(reader, start=2):
            if len(record) < 3:
                raise DataFormatError(path, n, f"expected 3 columns (id, text, labels), got {len(record)}")
            names = [x.strip() for x in record[2].split(",") if x.strip()]
            unknown = [x for x in names if x not in label_index]
            if unknown:
                raise DataFormatError(path, n, f"label {unknown[0]!r} is not in labels.txt")
            ids.append(record[0])
            texts.append(record[1])
            rows.append([label_index[x] for x in names])
    return ids, texts, rows


def _label_names(files: dict[str, Path]) -> list[str]:
    return [line.strip() for line in read_text_lines(files["labels.txt"])]


def _read_labels(spec, files: dict[str, Path], progress: bool) -> Iterator[tuple[list[str], list[str]]]:
    names = _label_names(files)
    yield [n.replace("_", " ") for n in names], names


def _read_split(spec, files: dict[str, Path], split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    index = {name: i for i, name in enumerate(_label_names(files))}
    ids, texts, rows = read_aplc_csv(files[FORMAT.split_files[split]], index)
    counts = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter((j for r in rows for j in r), dtype=np.int32)
    yield QueryChunk(texts, ids, counts, flat)


FORMAT = Format(
    name="aplc-csv",
    split_files={"train": "train.csv", "test": "dev.csv"},
    required_files=("train.csv", "dev.csv", "labels.txt"),
    query_texts=("text",),
    label_text="name",
    read_labels=_read_labels,
    read_split=_read_split,
)
