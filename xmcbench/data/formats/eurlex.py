"""The ``eurlex-raw`` format: the EURLex-4K raw-text variant (the XR-Transformer archive ``Eurlex-4K.tar.gz``).

Files (one folder after extraction):

- ``train_raw_texts.txt`` / ``test_raw_texts.txt``: one document per line (title and body, as
  distributed: lower-cased and stemmed); line i is row i of the label matrix;
- ``label_map.txt``: one EuroVoc descriptor per line (``air_transport``); line j is label j;
- ``Y.trn.npz`` / ``Y.tst.npz``: (documents x labels) label matrices, ``scipy.sparse.save_npz``;
- ``X.{trn,tst}.npz``: tf-idf features, not used by xmcbench.

Texts are HTML-unescaped once, like every other format. Descriptors are identifier-like, so their
underscores are read as spaces (``air transport``), which is what a text encoder should see.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xmcbench.data.formats import Format, QueryChunk
from xmcbench.data.formats.lf_json import read_name_lines, read_text_lines
from xmcbench.data.formats.xc_sparse import load_sparse
from xmcbench.errors import DataFormatError


def read_label_map(path: Path) -> list[str]:
    """Label names, one per line, underscores read as spaces."""
    return [name.replace("_", " ").strip() for name in read_name_lines(path)]


def read_eurlex_split(texts_path: Path, labels_path: Path, n_labels: int) -> tuple[list[str], sp.csr_matrix]:
    """Documents of one split and their (documents x n_labels) binary label matrix.

    Raises DataFormatError when the matrix does not have one row per text line or
    ``n_labels`` columns (the files would then belong to different copies of the dataset).
    """
    texts = read_text_lines(texts_path)
    labels = load_sparse(labels_path)
    if labels.shape[0] != len(texts):
        raise DataFormatError(
            labels_path,
            None,
            f"has {labels.shape[0]} rows but {Path(texts_path).name} has {len(texts)} documents; "
            "the two files must come from the same archive",
        )
    if labels.shape[1] != n_labels:
        raise DataFormatError(
            labels_path,
            None,
            f"has {labels.shape[1]} label columns but label_map.txt names {n_labels} labels; "
            "the two files must come from the same archive",
        )
    labels.eliminate_zeros()  # ground truth is binarised: any stored non-zero is a positive
    binary = sp.csr_matrix((np.ones(labels.nnz, dtype=np.float32), labels.indices, labels.indptr), shape=labels.shape)
    binary.sort_indices()
    return texts, binary


_LABEL_FILES = {"train": "Y.trn.npz", "test": "Y.tst.npz"}


def _read_labels(spec, files: dict[str, Path], progress: bool) -> Iterator[tuple[list[str], list[str]]]:
    names = read_label_map(files["label_map.txt"])
    yield names, [""] * len(names)


def _read_split(spec, files: dict[str, Path], split: str, n_labels: int, progress: bool) -> Iterator[QueryChunk]:
    docs, labels = read_eurlex_split(files[FORMAT.split_files[split]], files[_LABEL_FILES[split]], n_labels)
    yield QueryChunk(docs, [""] * len(docs), np.diff(labels.indptr), np.asarray(labels.indices, dtype=np.int32))


FORMAT = Format(
    name="eurlex-raw",
    split_files={"train": "train_raw_texts.txt", "test": "test_raw_texts.txt"},
    required_files=("train_raw_texts.txt", "test_raw_texts.txt", "label_map.txt", "Y.trn.npz", "Y.tst.npz"),
    query_texts=("text",),
    label_text="name",
    read_labels=_read_labels,
    read_split=_read_split,
)
