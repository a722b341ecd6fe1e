"""The ``zestxml-raw`` format: ZestXML's own release of its GZ datasets (GZ-Amazon-1M, GZ-EURLex-4.3K, ...).

MACLR (App. A): "LF-Amazon-1M ... is available from the ZestXML paper (Gupta et al., 2021)",
https://github.com/nilesh2797/zestxml (README: all datasets in one Google Drive archive,
1Cyi40UP9b527DiPrfJuvqmwm8OUUii0o; GZ-EURLex-4.3K alone as 1j27bQZol6gOQ7AATawShcF4jXJr3Venb).
The built-in LF-Amazon-1M reads MACLR's own copy instead (LF JSON lines, see catalog.yaml); this
format is for a local spec over ZestXML's files.

What the public code shows, per dataset folder:

- ``trn_X_Y.txt`` / ``tst_X_Y.txt``: (documents x labels) relevance matrices in the XC sparse
  text format (README "Text sparse matrix format": a ``rows cols`` header line, then one line per
  row of ``index:value``, indices from 0), read by ``xc_sparse.read_sparse_text``; run.sh passes
  them as ``-trn_X_Y`` / ``-tst_X_Y``;
- ``raw/trn_X.txt``, ``raw/tst_X.txt``, ``raw/Y.txt``: the raw texts, one per line, line i = row i
  of the matrix (its data-process.ipynb reads ``[x.strip() for x in open('<dataset>/raw/trn_X.txt')]``
  and fits its tf-idf on them; ``Y.txt`` gives the label texts the ``__label__<i>__<text>``
  features are made from);
- ``trn_X_Xf.txt``, ``tst_X_Xf.txt``, ``Y_Yf.txt``, ``Xf.txt``, ``Yf.txt``: tf-idf features and
  their vocabularies, not used here.

NOT CHECKED against a real file here (no copy could be fetched), and assumed: whether a raw line
carries a separate title. A line ``title<TAB>content`` (how MACLR's code writes an instance,
``title + '\t' + content``) gives the instance a title (ICT material); a line without a tab is
all content, with no title. The files are read as UTF-8 with HTML entities decoded once, like
every other format. If the release differs, this is the one file to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from xmcbench.data.formats import Format, QueryChunk
from xmcbench.data.formats.lf_json import read_name_lines, read_text_lines
from xmcbench.data.formats.xc_sparse import read_sparse_text
from xmcbench.errors import DataFormatError

_LABEL_FILES = {"train": "trn_X_Y.txt", "test": "tst_X_Y.txt"}
LABEL_TEXTS = "raw/Y.txt"


def split_title(line: str) -> tuple[str, str]:
    """``title<TAB>content`` -> (title, content); a line without a tab has no title."""
    title, tab, content = line.partition("\t")
    return (title.strip(), content.strip()) if tab else ("", line.strip())


def read_titles_and_contents(path: Path) -> tuple[list[str], list[str]]:
    pairs = [split_title(line) for line in read_text_lines(path)]
    return [t for t, _ in pairs], [c for _, c in pairs]


def _read_labels(spec, files: dict[str, Path], progress: bool) -> Iterator[tuple[list[str], list[str]]]:
    names = [line.strip() for line in read_name_lines(files[LABEL_TEXTS])]
    yield names, [""] * len(names)


def _read_split(spec, files: dict[str, Path], split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    texts_path = files[FORMAT.split_files[split]]
    titles, contents = read_titles_and_contents(texts_path)
    labels = read_sparse_text(files[_LABEL_FILES[split]])  # the header's width, checked below
    if labels.shape[1] != n_labels:
        raise DataFormatError(
            files[_LABEL_FILES[split]],
            1,
            f"has {labels.shape[1]} label columns but {LABEL_TEXTS} names {n_labels} labels; "
            "the two files must come from the same release",
        )
    if labels.shape[0] != len(titles):
        raise DataFormatError(
            files[_LABEL_FILES[split]],
            None,
            f"has {labels.shape[0]} rows but {Path(texts_path).name} has {len(titles)} lines",
        )
    labels.eliminate_zeros()  # a stored 0 is not a label: the ground truth is the stored non-zeros
    texts = [f"{t} {c}" if (t and c) else (t or c) for t, c in zip(titles, contents, strict=True)]
    yield QueryChunk(texts, [""] * len(texts), np.diff(labels.indptr), np.asarray(labels.indices, dtype=np.int32))


FORMAT = Format(
    name="zestxml-raw",
    split_files={"train": "raw/trn_X.txt", "test": "raw/tst_X.txt"},
    required_files=("raw/trn_X.txt", "raw/tst_X.txt", LABEL_TEXTS, "trn_X_Y.txt", "tst_X_Y.txt"),
    query_texts=("text",),
    label_text="name",
    read_labels=_read_labels,
    read_split=_read_split,
)
