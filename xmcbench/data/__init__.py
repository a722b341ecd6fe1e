"""Datasets: registry, download, readers/writers, the prepared cache and the synthetic generator.

``load_dataset(name)`` is the one call most code needs::

    from xmcbench.data import load_dataset
    ds = load_dataset("LF-AmazonTitles-131K", download=True)
    ds.query_texts("train")[0], ds.labels("train"), ds.filter("test")

It uses the prepared cache when it matches the raw files, prepares it from the raw files when
they are present, regenerates a synthetic dataset's raw files from its saved parameters, and
downloads only when asked to (``download=True``).
"""

from __future__ import annotations

from xmcbench import paths
from xmcbench.data.prepared import PreparedDataset, TextColumn, is_prepared_current, load_prepared, prepare
from xmcbench.data.catalog import DatasetSpec, Source, get_spec, list_specs, save_local_spec
from xmcbench.data.synth import make_synthetic_spec, synthesize
from xmcbench.errors import XmcbenchError

__all__ = [
    "DatasetSpec",
    "PreparedDataset",
    "Source",
    "TextColumn",
    "get_spec",
    "is_prepared_current",
    "list_specs",
    "load_dataset",
    "load_prepared",
    "make_synthetic_spec",
    "prepare",
    "save_local_spec",
    "synthesize",
]


def load_dataset(
    name: str, *, download: bool = False, source: str | None = None, progress: bool = True
) -> PreparedDataset:
    """The prepared dataset ``name`` (case-insensitive), preparing or downloading it as needed.

    1. a prepared cache that matches the raw files (or whose raw files were deleted) -> load it;
    2. raw files present -> prepare, then load;
    3. a synthetic dataset -> regenerate its raw files from the saved parameters, prepare, load;
    4. ``download=True`` -> download (from ``source`` if given), prepare, load;
    5. otherwise an XmcbenchError saying how to download it.
    """
    spec = get_spec(name)
    raw_dir = paths.dataset_raw_dir(spec.raw_group)
    prepared_dir = paths.dataset_prepared_dir(spec.name)
    if is_prepared_current(spec, raw_dir, prepared_dir):
        return load_prepared(prepared_dir)
    if not _raw_complete(spec, raw_dir):
        if spec.synthetic is not None:
            from xmcbench.data.fetch import record_manifest

            synthesize(raw_dir, **spec.synthetic)
            record_manifest(raw_dir, list(spec.files), "synthetic")
        elif download:
            from xmcbench.data.fetch import download_dataset

            download_dataset(spec, source=source, progress=progress)
        else:
            raise XmcbenchError(
                f"dataset {spec.name} is not downloaded here; run `xmcbench datasets download {spec.name}`"
            )
    prepare(spec, raw_dir, prepared_dir, progress=progress)
    return load_prepared(prepared_dir)


def _raw_complete(spec: DatasetSpec, raw_dir) -> bool:
    from xmcbench.data.catalog import find_raw_file

    return all(find_raw_file(raw_dir, name) is not None for name in spec.files)
