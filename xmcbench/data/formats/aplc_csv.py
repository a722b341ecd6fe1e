"""The ``aplc-csv`` format: the raw-text datasets of the XLNet-APLC repository (Wiki10-31K, AmazonCat-13K).

LMTX (Sec. 2.5): "EURlex-4k, Wiki10-31k, and AmazonCat-13K were obtained from the XLNet-APLC
repository" — https://github.com/huiyegit/APLC_XLNet, README "Prepare Data": preprocessed datasets
in a Google Drive folder (1bRLrc8N3ukzAVn9zyTqr0IqP3fWJUYAt), saved to ``data/``; the run scripts
read ``data/Wiki10`` and ``data/AmazonCat``.

What the public code fixes (checked against APLC_XLNet ``code/utils_multi_label.py``,
``MultiLabelTextProcessor``): ``train.csv`` and ``dev.csv`` (dev = the test split) are read with
``pandas.read_csv(path, na_filter=False)``: the first line is a header, columns are taken by
position (``row[0]`` the id, ``row[1]`` the text, ``row[2]`` the labels), labels are
``row[2].split(',')`` and an empty field means no label; ``labels.txt`` holds one label per line
(``line.strip()``; the README: sorted by decreasing frequency) and a label string indexes it by
name (``label_map[item]``: an unknown name is an error there too). A conversion script for
Wiki10 in this layout (a public copy, found by search) writes the csv with
``pandas.DataFrame(columns=['id', 'text', 'label']).to_csv(index=False)``: header
``id,text,label``, ids the 0-based line numbers of the source text file, fields quoted by the csv
rules (a text may hold commas, quotes and newlines), labels joined by commas.

So this reader: skips the header (and refuses a file whose first line is a data row: an id where
the header should be), takes exactly three fields per record, skips blank lines (as pandas does),
splits labels on commas, drops surrounding spaces and empty names (APLC would fail on them), and
stops with the file and line of a record that names a label ``labels.txt`` lacks. Names are
shown to the encoder with underscores read as spaces (``music_cds`` -> ``music cds``); the name as
written is kept as the label's uid.

NOT CHECKED against a real file here (no copy could be fetched): the exact label spellings (tag
words or ids) and whether empty texts were dropped (the conversion script skips them, so the
counts may be a few rows below LMTX Table 1's). The texts carry no separate title, so MACLR's ICT
cannot run on these datasets (LMTX Sec. 2.8 says the same of Wiki10-31K).
"""

from __future__ import annotations

import csv
import io
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from xmcbench.data.formats import Format, QueryChunk
from xmcbench.data.formats.lf_json import open_maybe_gzip, read_name_lines, unescape_texts
from xmcbench.errors import DataFormatError

N_COLUMNS = 3  # id, text, labels


def read_aplc_csv(path: Path, label_index: dict[str, int]) -> tuple[list[str], list[str], list[list[int]]]:
    """(ids, texts, label indices per row) of one APLC csv file (header row first)."""
    csv.field_size_limit(sys.maxsize)  # whole documents sit in one field
    ids, texts, rows = [], [], []
    try:
        with open_maybe_gzip(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as text:
            reader = csv.reader(text)  # quoted fields may span lines
            header = next(reader, None)
            if header is None:
                raise DataFormatError(
                    path, None, "is empty; expected a header row (id,text,label) and one row per document"
                )
            if len(header) != N_COLUMNS or header[0].strip().isdigit():
                raise DataFormatError(
                    path,
                    1,
                    f"expected the header row id,text,label; got {','.join(header)[:80]!r} "
                    "(XLNet-APLC csv files start with a header, then id, text, comma-joined labels)",
                )
            for record in reader:
                if not record:  # a blank line: pandas skips it too
                    continue
                if len(record) != N_COLUMNS:
                    raise DataFormatError(
                        path, reader.line_num, f"expected 3 fields (id, text, labels), got {len(record)}"
                    )
                names = [x.strip() for x in record[2].split(",") if x.strip()]
                unknown = [x for x in names if x not in label_index]
                if unknown:
                    raise DataFormatError(path, reader.line_num, f"label {unknown[0]!r} is not in labels.txt")
                ids.append(record[0])
                texts.append(record[1])
                rows.append([label_index[x] for x in names])
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, None, f"not valid UTF-8 ({exc.reason}); re-save the file as UTF-8") from None
    except (OSError, EOFError, zlib.error) as exc:  # a truncated or corrupt gzip
        raise DataFormatError(path, None, f"cannot read the file ({exc}); download it again") from None
    except csv.Error as exc:
        raise DataFormatError(path, None, f"not a readable csv file ({exc})") from None
    return ids, unescape_texts(texts), rows


def read_label_names(path: Path) -> list[str]:
    """The label names of ``labels.txt``, one per line, as APLC reads them (``line.strip()``)."""
    return [line.strip() for line in read_name_lines(path)]


def _read_labels(spec, files: dict[str, Path], progress: bool) -> Iterator[tuple[list[str], list[str]]]:
    names = read_label_names(files["labels.txt"])
    yield [n.replace("_", " ") for n in names], names


def _read_split(spec, files: dict[str, Path], split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    # a name listed twice maps to its last line, as APLC's label_map does
    index = {name: i for i, name in enumerate(read_label_names(files["labels.txt"]))}
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
