"""The dataset catalogue: what each XC dataset is, where its raw files come from, how to read it.

A ``DatasetSpec`` says everything xmcbench needs to know about one dataset before touching it:
its raw format and files, its download sources (Google Drive by default, or any URL, Hugging Face
Hub repository or local folder; ``manual`` where the files can only be fetched by hand), the
counts the papers report, which text is the query (title only, or title + content) and the
propensity A/B of the inverse-propensity metrics.

The built-in specs are read from ``catalog.yaml`` beside this module (one entry per raw group,
its title-only and full-text variants listed under it). Local specs (synthetic datasets,
user-added data) are JSON files at ``paths.datasets_dir()/<name>/spec.json``. Names are
case-insensitive everywhere::

    >>> get_spec("lf-amazontitles-131k").query_text
    'title'

Every name that becomes a folder (a dataset name, a raw group) is checked by
``check_dataset_name`` first, so no name can reach outside ``$XMCBENCH_HOME``. Raw files live in
``paths.dataset_raw_dir(spec.raw_group)`` (title-only and full-text variants share one raw
folder); the prepared cache in ``paths.dataset_prepared_dir(spec.name)``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from xmcbench import fsutil, paths
from xmcbench.data.formats import FORMATS
from xmcbench.errors import DataFormatError, XmcbenchError
from xmcbench.registry import Registry, UnknownNameError, did_you_mean

SPEC_FILENAME = "spec.json"
CATALOG_FILE = "catalog.yaml"
LF_FILES = ["trn.json.gz", "tst.json.gz", "lbl.json.gz", "filter_labels_train.txt", "filter_labels_test.txt"]


def check_dataset_name(name: str) -> str:
    """``name`` if it can be a folder under $XMCBENCH_HOME; XmcbenchError otherwise (before any file is made)."""
    return fsutil.check_name(name, "dataset name")


class Source(BaseModel):
    """One place raw files can be fetched from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # manual: no file can be fetched automatically (a Google Drive *folder*); ``ref`` says where
    # to get the files by hand, and a plain download stops with that advice before fetching anything
    kind: Literal["gdrive", "url", "hf", "local", "synthetic", "manual"]
    ref: str  # drive id | URL | "ORG/REPO" | directory | "" for synthetic | where to download by hand
    filename: str | None = None  # name to save as (gdrive/url)
    archive: bool = False  # extract after download (.zip/.tar/.tar.gz/.tgz)
    subdir: str | None = None  # folder inside the archive/repo that holds the files


class DatasetSpec(BaseModel):
    """Everything xmcbench knows about one dataset before reading it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # canonical display name, e.g. "LF-AmazonTitles-131K"
    raw_group: str  # raw folder shared by title/full variants, e.g. "LF-Amazon-131K"
    format: str  # a name in xmcbench.data.formats.FORMATS: "lf-json", "lf-wikipedia-raw", "eurlex-raw"
    query_text: Literal["title", "title+content", "text"]
    files: list[str]  # raw files expected after download/extraction
    sources: list[Source]  # first is the default (see default_sources)
    paper_counts: dict[str, int]  # {"train": .., "test": .., "labels": ..} as the papers report
    propensity_a: float
    propensity_b: float
    description: str = ""
    synthetic: dict | None = None  # generator parameters when made by `datasets synth`

    @field_validator("name", "raw_group")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        try:
            return check_dataset_name(value)
        except XmcbenchError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"unknown format {value!r}; known: {', '.join(FORMATS.names())}")
        return FORMATS.canonical(value)

    def default_sources(self) -> list[Source]:
        """The sources a plain download fetches.

        Usually just ``sources[0]`` (one archive). A dataset that ships as several separate files
        (LF-Wikipedia-500K: trn, tst and Yf on three Drive ids) lists one source per file: then
        the leading run of non-archive sources of the same kind, each naming its ``filename``,
        is fetched together.
        """
        first = self.sources[0]
        if first.archive or first.filename is None:
            return [first]
        parts = []
        for src in self.sources:
            if src.kind != first.kind or src.archive or src.filename is None:
                break
            parts.append(src)
        return parts


def _read_catalog() -> list[DatasetSpec]:
    """The built-in specs of ``catalog.yaml``: each variant merged over its raw group's fields."""
    text = resources.files("xmcbench.data").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    specs = []
    for group in yaml.safe_load(text)["datasets"]:
        group = dict(group)
        variants = group.pop("variants")
        specs += [DatasetSpec(**{**group, **variant}) for variant in variants]
    return specs


BUILTIN_DATASETS: Registry[DatasetSpec] = Registry("dataset")
for _spec in _read_catalog():
    BUILTIN_DATASETS.add(_spec.name, _spec)


def local_spec_path(name: str) -> Path:
    return paths.datasets_dir() / check_dataset_name(name) / SPEC_FILENAME


def _read_spec_file(path: Path) -> DatasetSpec:
    try:
        spec = DatasetSpec.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise DataFormatError(path, None, f"not a valid dataset spec ({problems}); fix or delete the file") from None
    if spec.name != path.parent.name:
        raise DataFormatError(
            path, None, f"spec name {spec.name!r} does not match its folder {path.parent.name!r}; rename one of them"
        )
    return spec


def _local_spec_files() -> list[Path]:
    root = paths.datasets_dir()
    if not root.is_dir():
        return []
    return sorted(p / SPEC_FILENAME for p in root.iterdir() if (p / SPEC_FILENAME).is_file())


def get_spec(name: str) -> DatasetSpec:
    """The spec of a built-in or local dataset, by case-insensitive name."""
    check_dataset_name(name)
    if name in BUILTIN_DATASETS:
        return BUILTIN_DATASETS.get(name)
    local = _local_spec_files()
    for path in local:
        if path.parent.name.lower() == name.lower():
            return _read_spec_file(path)
    known = BUILTIN_DATASETS.names() + [p.parent.name for p in local]
    raise UnknownNameError(
        f"unknown dataset {name!r}{did_you_mean(name, known)}; known: {', '.join(known)} "
        "(`xmcbench datasets list` shows them; `xmcbench datasets synth` makes a synthetic one)"
    )


def resolve_spec(name_or_spec: str | DatasetSpec) -> DatasetSpec:
    """``get_spec(name)``, or the spec itself when given one."""
    return get_spec(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec


def list_specs() -> list[DatasetSpec]:
    """Built-in specs in catalogue order, then local specs sorted by name."""
    builtin = [spec for _, spec in BUILTIN_DATASETS]
    return builtin + [_read_spec_file(p) for p in _local_spec_files() if p.parent.name not in BUILTIN_DATASETS]


def save_local_spec(spec: DatasetSpec) -> Path:
    """Write ``spec`` to ``datasets_dir()/<name>/spec.json`` (atomically) and return the path.

    A local spec may not reuse a built-in name (in any letter case); saving again under the same
    name replaces the earlier spec.
    """
    check_dataset_name(spec.name)
    if spec.name in BUILTIN_DATASETS:
        raise XmcbenchError(f"{spec.name!r} is a built-in dataset; choose another name for a local dataset")
    for path in _local_spec_files():
        if path.parent.name.lower() == spec.name.lower() and path.parent.name != spec.name:
            raise XmcbenchError(
                f"a local dataset {path.parent.name!r} already exists (names are case-insensitive); "
                f"delete {path.parent} or choose another name"
            )
    path = local_spec_path(spec.name)
    fsutil.write_json(path, spec.model_dump(mode="json"))
    return path
