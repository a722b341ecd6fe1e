"""Raw dataset formats, registered by name: how ``prepare`` reads each kind of raw files.

A ``Format`` names the raw file of each split, the files it cannot do without, the query texts it
can give, and two readers that ``prepare`` streams into the cache:

- ``read_labels(spec, files, progress)`` yields ``(texts, uids)`` of the labels, in label order;
- ``read_split(spec, files, split, n_labels, progress)`` yields ``QueryChunk``s of one split.

``files`` maps each spec file name to its path on disk. Formats are registered lazily (the
module is imported on first use) in ``FORMATS``; ``get_format`` raises an XmcbenchError naming
the known formats for an unknown one. Built in: ``lf-json`` (the XC repository's LF datasets, and
MACLR's copy of LF-Amazon-1M), ``lf-wikipedia-raw`` (LF-Wikipedia-500K's raw variant),
``eurlex-raw`` (XR-Transformer's EURLex-4K), ``zestxml-raw`` (ZestXML's own GZ releases, for a
local spec) and ``aplc-csv`` (XLNet-APLC's Wiki10-31K and AmazonCat-13K). A spec file name may
hold a folder (``raw/trn_X.txt``): it is looked up under the raw folder as written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xmcbench.registry import Registry


@dataclass
class QueryChunk:
    """Consecutive queries of a split: texts, uids, and their labels as CSR row lengths + indices."""

    texts: list[str]
    uids: list[str]
    counts: np.ndarray  # (n,) labels per query
    indices: np.ndarray  # (sum of counts,) label indices, query by query


LabelReader = Callable[[Any, dict[str, Path], bool], Iterator[tuple[list[str], list[str]]]]
SplitReader = Callable[[Any, dict[str, Path], str, int, bool], Iterator[QueryChunk]]


@dataclass(frozen=True)
class Format:
    name: str
    split_files: dict[str, str]  # {"train": raw file, "test": raw file}
    required_files: tuple[str, ...]  # the spec's files must include these
    query_texts: tuple[str, ...]  # the spec query_text values this format can give
    label_text: str  # what a label's text is ("title", "name"), recorded in the cache
    read_labels: LabelReader
    read_split: SplitReader


FORMATS: Registry[Format] = Registry("dataset format")
FORMATS.add_lazy("lf-json", "xmcbench.data.formats.lf_json:FORMAT")
FORMATS.add_lazy("lf-wikipedia-raw", "xmcbench.data.formats.wikipedia:FORMAT")
FORMATS.add_lazy("eurlex-raw", "xmcbench.data.formats.eurlex:FORMAT")
FORMATS.add_lazy("zestxml-raw", "xmcbench.data.formats.zestxml:FORMAT")
FORMATS.add_lazy("aplc-csv", "xmcbench.data.formats.aplc_csv:FORMAT")


def get_format(name: str) -> Format:
    """The registered format ``name``; an XmcbenchError listing the known formats otherwise."""
    return FORMATS.get(name)


def compose_query_texts(titles: list[str], contents: list[str], query_text: str) -> list[str]:
    """The query text of each record: its title, or title and content joined by one space."""
    if query_text == "title":
        return titles
    return [f"{t} {c}" if (t and c) else (t or c) for t, c in zip(titles, contents)]
