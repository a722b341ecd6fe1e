"""The dataset registry: what each XC dataset is, where its raw files come from, how to read it.

A ``DatasetSpec`` says everything xmcbench needs to know about one dataset before touching it:
its raw format and files, its download sources (Google Drive by default, or any URL, Hugging Face
Hub repository or local folder), the counts the papers report, which text is the query (title
only, or title + content) and the propensity A/B of the inverse-propensity metrics.

Built-in specs cover the XC repository datasets the five papers evaluate on (numbers and Drive
ids from ``shared/design/evaluation.md``). Local specs (synthetic datasets, user-added data) are
JSON files at ``paths.datasets_dir()/<name>/spec.json``. Names are case-insensitive everywhere::

    >>> get_spec("lf-amazontitles-131k").query_text
    'title'

Raw files live in ``paths.dataset_raw_dir(spec.raw_group)`` (title-only and full-text variants
share one raw folder); the prepared cache in ``paths.dataset_prepared_dir(spec.name)``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from xmcbench import paths
from xmcbench.errors import DataFormatError, XmcbenchError
from xmcbench.registry import Registry, UnknownNameError, did_you_mean

SPEC_FILENAME = "spec.json"
LF_FILES = ["trn.json.gz", "tst.json.gz", "lbl.json.gz", "filter_labels_train.txt", "filter_labels_test.txt"]
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class Source(BaseModel):
    """One place raw files can be fetched from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["gdrive", "url", "hf", "local", "synthetic"]
    ref: str  # drive id | URL | "ORG/REPO" | directory | "" for synthetic
    filename: str | None = None  # name to save as (gdrive/url)
    archive: bool = False  # extract after download (.zip/.tar/.tar.gz/.tgz)
    subdir: str | None = None  # folder inside the archive/repo that holds the files


class DatasetSpec(BaseModel):
    """Everything xmcbench knows about one dataset before reading it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # canonical display name, e.g. "LF-AmazonTitles-131K"
    raw_group: str  # raw folder shared by title/full variants, e.g. "LF-Amazon-131K"
    format: Literal["lf-json", "lf-wikipedia-raw", "eurlex-raw"]
    query_text: Literal["title", "title+content", "text"]
    files: list[str]  # raw files expected after download/extraction
    sources: list[Source]  # first is the default (see default_sources)
    paper_counts: dict[str, int]  # {"train": .., "test": .., "labels": ..} as the papers report
    propensity_a: float
    propensity_b: float
    description: str = ""
    synthetic: dict | None = None  # generator parameters when made by `datasets synth`

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


def _gdrive_archive(drive_id: str, archive_name: str, subdir: str) -> list[Source]:
    return [Source(kind="gdrive", ref=drive_id, filename=archive_name, archive=True, subdir=subdir)]


# Propensity A/B follow DEXML's rule (amazon -> 0.6/2.6; wiki but not wikiseealso -> 0.5/0.4;
# else 0.55/1.5), the most common choice; a recipe may override them.
_BUILTINS: list[DatasetSpec] = [
    DatasetSpec(
        name="LF-AmazonTitles-131K", raw_group="LF-Amazon-131K", format="lf-json", query_text="title",
        files=LF_FILES, sources=_gdrive_archive("1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E", "LF-Amazon-131K.raw.zip", "LF-Amazon-131K"),
        paper_counts={"train": 294_805, "test": 134_835, "labels": 131_073}, propensity_a=0.6, propensity_b=2.6,
        description="Amazon product titles -> titles of related products (short text).",
    ),
    DatasetSpec(
        name="LF-Amazon-131K", raw_group="LF-Amazon-131K", format="lf-json", query_text="title+content",
        files=LF_FILES, sources=_gdrive_archive("1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E", "LF-Amazon-131K.raw.zip", "LF-Amazon-131K"),
        paper_counts={"train": 294_805, "test": 134_835, "labels": 131_073}, propensity_a=0.6, propensity_b=2.6,
        description="Amazon product title + description -> titles of related products.",
    ),
    DatasetSpec(
        name="LF-WikiSeeAlsoTitles-320K", raw_group="LF-WikiSeeAlso-320K", format="lf-json", query_text="title",
        files=LF_FILES, sources=_gdrive_archive("1QZD4dFVxDpskCI2kGH9IbzgQR1JSZT-N", "LF-WikiSeeAlso-320K.raw.zip", "LF-WikiSeeAlso-320K"),
        paper_counts={"train": 693_082, "test": 177_515, "labels": 312_330}, propensity_a=0.55, propensity_b=1.5,
        description="Wikipedia article titles -> 'See also' article titles.",
    ),
    DatasetSpec(
        name="LF-WikiSeeAlso-320K", raw_group="LF-WikiSeeAlso-320K", format="lf-json", query_text="title+content",
        files=LF_FILES, sources=_gdrive_archive("1QZD4dFVxDpskCI2kGH9IbzgQR1JSZT-N", "LF-WikiSeeAlso-320K.raw.zip", "LF-WikiSeeAlso-320K"),
        paper_counts={"train": 693_082, "test": 177_515, "labels": 312_330}, propensity_a=0.55, propensity_b=1.5,
        description="Wikipedia article title + text -> 'See also' article titles.",
    ),
    DatasetSpec(
        name="LF-WikiTitles-500K", raw_group="LF-WikiTitles-500K", format="lf-json", query_text="title",
        files=LF_FILES, sources=_gdrive_archive("1lKUyg4VUYBdILyb6t8gKpOyCz9pdpJQw", "LF-WikiTitles-500K.raw.zip", "LF-WikiTitles-500K"),
        # PRIME reports ~1.8M / ~0.8M; the figures below are LF-Wikipedia-500K's, the same articles.
        paper_counts={"train": 1_813_391, "test": 783_743, "labels": 501_070}, propensity_a=0.5, propensity_b=0.4,
        description="Wikipedia article titles -> Wikipedia categories.",
    ),
    DatasetSpec(
        name="LF-Wikipedia-500K", raw_group="LF-Wikipedia-500K", format="lf-wikipedia-raw", query_text="title+content",
        files=["trn.raw.json.gz", "tst.raw.json.gz", "Yf.txt"],
        sources=[
            Source(kind="gdrive", ref="10RBSf6nC9C38wUMwqWur2Yd8mCwtup5K", filename="trn.raw.json.gz"),
            Source(kind="gdrive", ref="1pEyKXtkwHhinuRxmARhtwEQ39VIughDf", filename="tst.raw.json.gz"),
            Source(kind="gdrive", ref="1ZYTZPlnkPBCMcNqRRO-gNx8EPgtV-GL3", filename="Yf.txt"),
        ],
        # DEXML lists 1,779,881 / 769,421; LMTX and MACLR 1,813,391 / 783,743.
        paper_counts={"train": 1_813_391, "test": 783_743, "labels": 501_070}, propensity_a=0.5, propensity_b=0.4,
        description="Wikipedia article title + text -> Wikipedia categories (raw variant, no filter files).",
    ),
    DatasetSpec(
        name="LF-AmazonTitles-1.3M", raw_group="LF-Amazon-1.3M", format="lf-json", query_text="title",
        files=LF_FILES, sources=_gdrive_archive("12zH4mL2RX8iSvH0VCNnd3QxO4DzuHWnK", "LF-Amazon-1.3M.raw.zip", "LF-Amazon-1.3M"),
        paper_counts={"train": 2_248_619, "test": 970_237, "labels": 1_305_265}, propensity_a=0.6, propensity_b=2.6,
        description="Amazon product titles -> titles of co-purchased/co-viewed products (1.3M labels).",
    ),
    DatasetSpec(
        name="EURLex-4K", raw_group="EURLex-4K", format="eurlex-raw", query_text="text",
        files=["train_raw_texts.txt", "test_raw_texts.txt", "label_map.txt", "Y.trn.npz", "Y.tst.npz"],
        sources=_gdrive_archive("1A_sL_mzpkmnr6g0DSZ0_xJTr4GN-rIfi", "Eurlex-4K.tar.gz", "Eurlex-4K"),
        # Some copies have 3,801 labels (DEXML's table); the XR-Transformer archive has 3,956.
        paper_counts={"train": 15_449, "test": 3_865, "labels": 3_956}, propensity_a=0.55, propensity_b=1.5,
        description="EU law documents -> EuroVoc descriptors (XR-Transformer raw-text variant).",
    ),
]

BUILTIN_DATASETS: Registry[DatasetSpec] = Registry("dataset")
for _spec in _BUILTINS:
    BUILTIN_DATASETS.add(_spec.name, _spec)


def check_dataset_name(name: str) -> str:
    """A name usable as a folder (letters, digits, '.', '_', '-'); raises XmcbenchError otherwise."""
    if not _NAME_RE.match(name):
        raise XmcbenchError(
            f"invalid dataset name {name!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit)"
        )
    return name


def local_spec_path(name: str) -> Path:
    return paths.datasets_dir() / name / SPEC_FILENAME


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


def list_specs() -> list[DatasetSpec]:
    """Built-in specs in registry order, then local specs sorted by name."""
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
    atomic_write_bytes(path, json.dumps(spec.model_dump(mode="json"), indent=2).encode() + b"\n")
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a spec file is readable like any other
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def find_raw_file(raw_dir: Path, filename: str) -> Path | None:
    """Where ``filename`` is in ``raw_dir``, also accepting its uncompressed / gzipped twin.

    Some mirrors ship ``trn.json`` instead of ``trn.json.gz`` (and the readers detect gzip by its
    magic bytes, not by the name), so either spelling satisfies the spec.
    """
    raw_dir = Path(raw_dir)
    candidates = [filename, filename[:-3]] if filename.endswith(".gz") else [filename, filename + ".gz"]
    for candidate in candidates:
        if (raw_dir / candidate).is_file():
            return raw_dir / candidate
    return None


def raw_files(spec: DatasetSpec, raw_dir: Path) -> dict[str, Path]:
    """``{spec file name: path on disk}`` for every file of ``spec``; XmcbenchError naming what is missing."""
    found = {name: find_raw_file(raw_dir, name) for name in spec.files}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise XmcbenchError(
            f"dataset {spec.name}: {', '.join(missing)} missing in {raw_dir}; "
            f"run `xmcbench datasets download {spec.name}`"
        )
    return found  # type: ignore[return-value]
