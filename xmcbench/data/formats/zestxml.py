"""The ``zestxml-raw`` format: the raw-text release of ZestXML's GZ-Amazon-1M, MACLR's "LF-Amazon-1M".

MACLR (App. A): "LF-Amazon-1M ... is available from the ZestXML paper (Gupta et al., 2021)",
https://github.com/nilesh2797/zestxml (README: "GZ-Amazon-1M", 914,179 train / 1,465,767 test
points, 476,381 seen + 483,725 unseen = 960,106 labels; download link in the README).

What the public code shows (``run.sh``): a dataset folder holds ``trn_X_Y.txt`` / ``tst_X_Y.txt``
(label matrices, the XC sparse text format with a ``rows cols`` header, read by
``xc_sparse.read_sparse_text``), ``trn_X_Xf.txt``, ``tst_X_Xf.txt``, ``Y_Yf.txt`` (BoW features,
not used here), ``Xf.txt`` and ``Yf.txt`` (feature vocabularies).

NOT CHECKED against a real file here (no copy was available): the raw texts. This reader expects
``raw/trn_X.txt``, ``raw/tst_X.txt`` and ``raw/Y.txt`` (stored flat as ``trn_X.txt``, ``tst_X.txt``,
``Y.txt``): one text per line, line i = row i of the label matrix; a line ``title<TAB>content``
gives the instance a title (ICT material), a line without a tab is all content. If the release
differs, this is the one file to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from xmcbench.data.formats import Format, QueryChunk
from xmcbench.data.formats.lf_json import read_text_lines
from xmcbench.data.formats.xc_sparse import read_sparse_text
from xmcbench.errors import DataFormatError

_LABEL_FILES = {"train": "trn_X_Y.txt", "test": "tst_X_Y.txt"}


def split_title(line: str) -> tuple[str, str]:
    """``title<TAB>content`` -> (title, content); a line without a tab has no title."""
    title, tab, content = line.partition("\t")
    return (title.strip(), content.strip()) if tab else ("", line.strip())


def read_titles_and_contents(path: Path) -> tuple[list[str], list[str]]:
    pairs = [split_title(line) for line in read_text_lines(path)]
    return [t for t, _ in pairs], [c for _, c in pairs]


def _read_labels(spec, files: dict[str, Path], progress: bool) -> Iterator[tuple[list[str], list[str]]]:
    names = [line.strip() for line in read_text_lines(files["Y.txt"])]
    yield names, [""] * len(names)


def _read_split(spec, files: dict[str, Path], split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    texts_path = files[FORMAT.split_files[split]]
    titles, contents = read_titles_and_contents(texts_path)
    labels = read_sparse_text(files[_LABEL_FILES[split]], n_cols=n_labels)
    if labels.shape[0] != len(titles):
        raise DataFormatError(
            files[_LABEL_FILES[split]],
            None,
            f"has {labels.shape[0]} rows but {Path(texts_path).name} has {len(titles)} lines",
        )
    texts = [f"{t} {c}" if (t and c) else (t or c) for t, c in zip(titles, contents, strict=True)]
    yield QueryChunk(texts, [""] * len(texts), np.diff(labels.indptr), np.asarray(labels.indices, dtype=np.int32))


FORMAT = Format(
    name="zestxml-raw",
    split_files={"train": "trn_X.txt", "test": "tst_X.txt"},
    required_files=("trn_X.txt", "tst_X.txt", "Y.txt", "trn_X_Y.txt", "tst_X_Y.txt"),
    query_texts=("text",),
    label_text="name",
    read_labels=_read_labels,
    read_split=_read_split,
)
