"""Datasets: the catalogue, raw files, download, formats, the prepared cache and the synthetic generator.

``load_dataset(name)`` is the one call most code needs::

    from xmcbench.data import load_dataset
    ds = load_dataset("LF-AmazonTitles-131K", download=True)
    ds.query_texts("train")[0], ds.labels("train"), ds.filter("test")

It uses the prepared cache when it matches the raw files, prepares it from the raw files when
they are present, creates or regenerates a synthetic dataset, and downloads only when asked to
(``download=True``), all under a per-dataset lock between processes.

Layout: ``catalog`` (specs, names), ``raw`` (raw files, manifest, verification), ``fetch``
(download: sources, transports, extraction), ``formats`` (readers, by format name),
``prepared`` (the memory-mapped cache), ``stats``, ``synth``, ``tokenized`` (token caches),
``load`` (``load_dataset``).
"""

from __future__ import annotations

from xmcbench.data.catalog import DatasetSpec, Source, check_dataset_name, get_spec, list_specs, save_local_spec
from xmcbench.data.fetch import download_dataset, parse_source
from xmcbench.data.formats import FORMATS, Format, get_format
from xmcbench.data.load import dataset_status, load_dataset, prepared_if_current
from xmcbench.data.prepared import PreparedDataset, TextColumn, is_prepared_current, load_prepared, prepare
from xmcbench.data.raw import VerifyReport, raw_status, verify_dataset
from xmcbench.data.synth import make_synthetic_spec, synthesize

__all__ = [
    "FORMATS",
    "DatasetSpec",
    "Format",
    "PreparedDataset",
    "Source",
    "TextColumn",
    "VerifyReport",
    "check_dataset_name",
    "dataset_status",
    "download_dataset",
    "get_format",
    "get_spec",
    "is_prepared_current",
    "list_specs",
    "load_dataset",
    "load_prepared",
    "make_synthetic_spec",
    "parse_source",
    "prepare",
    "prepared_if_current",
    "raw_status",
    "save_local_spec",
    "synthesize",
    "verify_dataset",
]
