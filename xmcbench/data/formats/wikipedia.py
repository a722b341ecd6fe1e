"""The ``lf-wikipedia-raw`` format: LF-Wikipedia-500K's raw variant: ``trn.raw.json.gz``, ``tst.raw.json.gz``, ``Yf.txt``.

The two JSON-lines files have the LF record layout (``uid``, ``title``, ``content``,
``target_ind``) and are read by ``xmcbench.data.formats.lf_json``; ``target_ind`` indexes the lines of
``Yf.txt``. There are no filter files for this variant.

``Yf.txt`` holds one label (a Wikipedia category) per line, its name after ``->``. What stands
before the arrow is kept as the label's uid. Assumptions, since no format description is published:
a line without ``->`` is the name itself; only the first ``->`` splits (a name may contain one);
underscores in names are Wikipedia's spelling of spaces and are read as spaces; names are
HTML-unescaped once like every text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from xmcbench.data.formats import Format, QueryChunk
from xmcbench.data.formats.lf_json import read_name_lines, read_query_chunks

ARROW = "->"


def read_yf(path: Path) -> tuple[list[str], list[str]]:
    """``(uids, names)`` of the labels in ``Yf.txt``, one per line."""
    uids, names = [], []
    for line in read_name_lines(path):
        uid, arrow, name = line.partition(ARROW)
        if not arrow:
            uid, name = "", line
        uids.append(uid.strip())
        names.append(name.replace("_", " ").strip())
    return uids, names


def _read_labels(spec, files: dict[str, Path], progress: bool) -> Iterator[tuple[list[str], list[str]]]:
    uids, names = read_yf(files["Yf.txt"])
    yield names, uids


def _read_split(spec, files: dict[str, Path], split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    return read_query_chunks(spec, files[FORMAT.split_files[split]], split, n_labels, progress)


FORMAT = Format(
    name="lf-wikipedia-raw",
    split_files={"train": "trn.raw.json.gz", "test": "tst.raw.json.gz"},
    required_files=("trn.raw.json.gz", "tst.raw.json.gz", "Yf.txt"),
    query_texts=("title", "title+content"),
    label_text="name",
    read_labels=_read_labels,
    read_split=_read_split,
)
