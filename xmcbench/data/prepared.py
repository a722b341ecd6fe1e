"""The prepared cache: a dataset converted once from its raw files into memory-mappable arrays.

``prepare(spec, raw_dir, out_dir)`` reads the raw files (streaming: at the 1.3M-label scale no
more than one chunk of JSON records is in memory) and writes, into ``out_dir``::

    meta.json                                   format version, spec, counts, stats, raw sha256s,
                                                the size of every file below
    {train,test}.labels.indptr.npy / .indices.npy   CSR label matrix (values implied 1.0)
    {train,test}.filter.indptr.npy / .indices.npy   filter pairs (only when the dataset has them)
    {train,test}.text.bin + .text.offsets.npy   query texts: utf-8 blob + int64 offsets
    {train,test}.uid.bin + .uid.offsets.npy     query uids
    labels.text.bin + .text.offsets.npy         label texts (titles / names)
    labels.uid.bin + .uid.offsets.npy           label uids

Everything is written into a hidden temp folder next to ``out_dir`` and renamed into place at the
end, so an interrupted prepare leaves nothing that looks complete (and an older cache stays
untouched until the new one is whole). ``meta.json`` records the sha256, size and mtime of every
raw file; ``is_prepared_current`` compares them with the raw folder (and its download manifest),
so a changed raw file invalidates the cache.

``load_prepared(path)`` memory-maps the arrays (``np.load(mmap_mode="r")``): opening a cache of
LF-AmazonTitles-1.3M's size takes milliseconds; texts are decoded only when asked for.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp

from xmcbench import __version__, fsutil
from xmcbench.data.catalog import DatasetSpec
from xmcbench.data.formats import compose_query_texts, get_format
from xmcbench.data.formats.xc_sparse import read_filter_file
from xmcbench.data.raw import MANIFEST_NAME, find_raw_file, manifest_or_empty, raw_files
from xmcbench.data.stats import SplitLabels, dataset_stats
from xmcbench.data.text_blob import EncodedTexts
from xmcbench.errors import DataFormatError, XmcbenchError

__all__ = [
    "FORMAT_VERSION",
    "PreparedDataset",
    "TextColumn",
    "cache_problem",
    "compose_query_texts",
    "is_prepared_current",
    "load_prepared",
    "prepare",
    "read_meta",
]

FORMAT_VERSION = 1
META_NAME = "meta.json"
SPLITS = ("train", "test")
Split = Literal["train", "test"]

_FILTER_FILES = {"train": "filter_labels_train.txt", "test": "filter_labels_test.txt"}


# --------------------------------------------------------------------------------------------
# text columns


class TextColumn:
    """A column of strings stored as one utf-8 blob plus int64 offsets (``n + 1`` of them).

    ``col[i]`` is a str; ``col[a:b]`` and ``col[index_array]`` are lists of str. Nothing is
    decoded until asked for, so a memory-mapped column of millions of texts opens instantly.
    """

    def __init__(self, blob: np.ndarray, offsets: np.ndarray):
        self._blob = blob
        self._offsets = offsets

    @classmethod
    def open(cls, folder: Path, prefix: str) -> TextColumn:
        blob_path = Path(folder) / f"{prefix}.bin"
        try:
            offsets = np.load(Path(folder) / f"{prefix}.offsets.npy", mmap_mode="r")
            if blob_path.stat().st_size == 0:  # np.memmap refuses empty files
                blob = np.empty(0, dtype=np.uint8)
            else:
                blob = np.memmap(blob_path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as exc:
            raise damaged_cache(folder, f"{prefix}: {exc}") from None
        return cls(blob, offsets)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _decode(self, i: int) -> str:
        return self._blob[self._offsets[i] : self._offsets[i + 1]].tobytes().decode("utf-8")

    def __getitem__(self, key):
        n = len(self)
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if i < -n or i >= n:
                raise IndexError(f"index {i} out of range for a column of {n} texts")
            return self._decode(i % n if i < 0 else i)
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                return [self._decode(i) for i in range(start, stop, step)]
            if stop <= start:
                return []
            ends = np.asarray(self._offsets[start : stop + 1]) - int(self._offsets[start])
            data = self._blob[self._offsets[start] : self._offsets[stop]].tobytes()
            return [data[a:b].decode("utf-8") for a, b in zip(ends[:-1].tolist(), ends[1:].tolist())]
        idx = np.asarray(key)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"index out of range for a column of {n} texts")
        return [self._decode(int(i)) for i in idx.ravel()]

    def __iter__(self) -> Iterator[str]:
        step = 65536
        for start in range(0, len(self), step):
            yield from self[start : start + step]

    def to_list(self) -> list[str]:
        return self[:]

    def byte_lengths(self) -> np.ndarray:
        """utf-8 length of every text (0 for an empty text)."""
        return np.diff(np.asarray(self._offsets))


class _FileWriter:
    """A writer of one open file, used in a ``with``: however the block ends (a parse error, a full
    disk), the file is closed, so removing the unfinished cache folder gives its space back.

    The reader feeding them is closed first in the same ``with`` (``_closed_after``), so its parser
    and decompressor threads are joined there and then. A suspended reader kept alive elsewhere (a
    traceback held by the caller) would otherwise be finalised by a later garbage collection, in
    whatever thread that runs, joining threads there: a test that kept one that way hung.
    """

    _file: io.BufferedWriter

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()  # a no-op after close()


class _ColumnWriter(_FileWriter):
    """Appends texts to ``<prefix>.bin`` and writes ``<prefix>.offsets.npy`` on close."""

    def __init__(self, folder: Path, prefix: str):
        self._folder = Path(folder)
        self._prefix = prefix
        self._file = open(self._folder / f"{prefix}.bin", "wb")
        self._lengths: list[np.ndarray] = []

    def write(self, texts: list[str] | EncodedTexts) -> None:
        encoded = texts if isinstance(texts, EncodedTexts) else EncodedTexts.from_strings(texts)
        self._lengths.append(np.asarray(encoded.lengths, dtype=np.int64))
        self._file.write(encoded.data)

    def close(self) -> np.ndarray:
        """Finish the column; returns the byte length of every text."""
        self._file.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.empty(0, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        np.save(self._folder / f"{self._prefix}.offsets.npy", offsets)
        return lengths


class _ArrayWriter(_FileWriter):
    """Appends 1-D chunks to ``path`` (a ``.npy`` file); the header, which holds the length, is
    written over a reserved one on close.

    A split's label indices go to disk block by block as they are parsed, instead of being kept,
    joined into one array and saved at the end: at LF-AmazonTitles-1.3M's size that held three
    180 MB arrays at once, and fresh memory is slow to touch on a virtual machine.
    """

    def __init__(self, path: Path, dtype):
        self._path, self._dtype, self._size = Path(path), np.dtype(dtype), 0
        self._reserved = len(self._header())
        self._file = open(self._path, "wb")
        self._file.write(self._header())

    def _header(self) -> bytes:
        # numpy pads a 1-D header to 128 bytes whatever the length (room to grow), so the final
        # header fits the reserved one; close() checks it
        buffer = io.BytesIO()
        fields = {"descr": np.lib.format.dtype_to_descr(self._dtype), "fortran_order": False, "shape": (self._size,)}
        np.lib.format.write_array_header_1_0(buffer, fields)
        return buffer.getvalue()

    def write(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self._dtype)
        self._file.write(memoryview(chunk).cast("B"))
        self._size += chunk.size

    def close(self) -> int:
        """Finish the file; returns the number of items written."""
        header = self._header()
        if len(header) != self._reserved:  # pragma: no cover - numpy changed its header layout
            raise RuntimeError(f"{self._path}: a .npy header of {len(header)} bytes does not fit {self._reserved}")
        self._file.seek(0)
        self._file.write(header)
        self._file.close()
        return self._size


def _closed_after(items):
    """``items`` for a ``with``: closed at its end where it can be (a generator), else left as it is."""
    return contextlib.closing(items) if hasattr(items, "close") else contextlib.nullcontext(items)


def _rows_canonical(counts: np.ndarray, indices: np.ndarray) -> bool:
    """Whether every row's label indices (``counts`` per row, back to back) strictly increase: sorted,
    no label twice, as ``csr_matrix.has_canonical_format``."""
    if indices.size < 2:
        return True
    falls = np.diff(indices) <= 0  # (nnz - 1,): pair i, i+1
    row_starts = np.cumsum(counts[:-1])  # index of each later row's first label
    falls[row_starts[(row_starts > 0) & (row_starts < indices.size)] - 1] = False  # pairs across rows
    return not falls.any()


def _canonical_rows(counts: np.ndarray, indices: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts, indices) of the same rows, each sorted with every label once (``sum_duplicates``).

    The XC files list each row's labels sorted and once, so this is mostly one check; a block
    that fails it is merged on its own, as it comes.
    """
    if _rows_canonical(counts, indices):
        return counts, indices
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    rows = sp.csr_matrix((np.ones(indices.size, dtype=np.float32), indices, indptr), shape=(len(counts), n_labels))
    rows.sum_duplicates()
    return np.diff(rows.indptr).astype(np.int64), rows.indices.astype(np.int32)


def _save_csr(folder: Path, prefix: str, matrix: sp.csr_matrix) -> None:
    np.save(folder / f"{prefix}.indptr.npy", np.asarray(matrix.indptr, dtype=np.int64))
    np.save(folder / f"{prefix}.indices.npy", np.asarray(matrix.indices, dtype=np.int32))


def _load_csr(folder: Path, prefix: str, shape: tuple[int, int]) -> sp.csr_matrix:
    try:
        indptr = np.load(folder / f"{prefix}.indptr.npy", mmap_mode="r")
        indices = np.load(folder / f"{prefix}.indices.npy", mmap_mode="r")
        matrix = sp.csr_matrix((np.ones(len(indices), dtype=np.float32), indices, indptr), shape=shape, copy=False)
    except (OSError, ValueError) as exc:  # a file deleted, truncated or overwritten since prepare
        raise damaged_cache(folder, f"{prefix}: {exc}") from None
    matrix.has_sorted_indices = True  # written sorted and de-duplicated by prepare
    matrix.has_canonical_format = True
    return matrix


# --------------------------------------------------------------------------------------------
# the prepared dataset


class PreparedDataset:
    """A prepared cache opened for reading (see the module docstring for the layout)."""

    def __init__(self, path: Path, meta: dict):
        self.path = Path(path)
        self.meta = meta
        self.spec = DatasetSpec.model_validate(meta["spec"])
        self.name: str = meta["name"]
        self.n_labels: int = int(meta["counts"]["labels"])
        self.stats: dict = meta["stats"]

    def __repr__(self) -> str:
        c = self.meta["counts"]
        return f"PreparedDataset({self.name!r}, train={c['train']}, test={c['test']}, labels={c['labels']})"

    @property
    def propensity_a(self) -> float:
        return float(self.meta["propensity_a"])

    @property
    def propensity_b(self) -> float:
        return float(self.meta["propensity_b"])

    @property
    def query_text(self) -> str:
        return self.meta["query_text"]

    @property
    def version(self) -> str:
        """Short fingerprint of the raw files this cache was prepared from (sha256 prefix)."""
        return self.meta["dataset_version"]

    def n_queries(self, split: Split) -> int:
        return int(self.meta["counts"][_check_split(split)])

    def query_texts(self, split: Split) -> TextColumn:
        """Query texts: title, or title + content, as the spec's ``query_text`` says."""
        return TextColumn.open(self.path, f"{_check_split(split)}.text")

    def label_texts(self) -> TextColumn:
        return TextColumn.open(self.path, "labels.text")

    def uids(self, split: Split) -> TextColumn:
        return TextColumn.open(self.path, f"{_check_split(split)}.uid")

    def label_uids(self) -> TextColumn:
        return TextColumn.open(self.path, "labels.uid")

    def labels(self, split: Split) -> sp.csr_matrix:
        """(n_split, n_labels) float32 CSR of 1.0 with sorted indices.

        ``indices``/``indptr`` are read-only memory maps; ``.copy()`` before changing them in place.
        """
        split = _check_split(split)
        return _load_csr(self.path, f"{split}.labels", (self.n_queries(split), self.n_labels))

    def filter(self, split: Split) -> sp.csr_matrix | None:
        """(n_split, n_labels) CSR of the split's filter pairs, or None when the dataset has none."""
        split = _check_split(split)
        if self.meta["filters"].get(split) is None:
            return None
        return _load_csr(self.path, f"{split}.filter", (self.n_queries(split), self.n_labels))


def damaged_cache(folder: Path, problem: str) -> XmcbenchError:
    name = Path(folder).parent.name  # the cache lives in datasets/<name>/prepared
    return XmcbenchError(
        f"the prepared dataset at {folder} is damaged ({problem}); rebuild it with "
        f"`xmcbench datasets prepare {name} --force`"
    )


def cache_problem(path: Path, meta: dict) -> str | None:
    """What is wrong with the cache files ``meta`` lists (one missing, or not the size prepare
    wrote), or None. Caches prepared before the sizes were recorded are not checked."""
    files = meta.get("files")
    if not isinstance(files, dict):
        return None
    for name, size in files.items():
        try:
            actual = (Path(path) / name).stat().st_size
        except OSError:
            return f"{name} is missing"
        if actual != size:
            return f"{name} has {actual:,} bytes, {size:,} when it was prepared"
    return None


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise XmcbenchError(f"unknown split {split!r}; use 'train' or 'test'")
    return split


def load_prepared(path: Path) -> PreparedDataset:
    """Open a prepared cache written by ``prepare`` (memory-mapped, nothing decoded)."""
    path = Path(path)
    meta = read_meta(path)
    if meta is None:
        raise XmcbenchError(f"no prepared dataset at {path}; prepare it with `xmcbench datasets prepare NAME`")
    if meta.get("format_version") != FORMAT_VERSION:
        raise XmcbenchError(
            f"the prepared dataset at {path} has format {meta.get('format_version')}, this xmcbench reads "
            f"format {FORMAT_VERSION}; prepare it again (`xmcbench datasets prepare NAME --force`)"
        )
    problem = cache_problem(path, meta)
    if problem is not None:
        raise damaged_cache(path, problem)
    try:
        return PreparedDataset(path, meta)
    except (KeyError, TypeError, ValueError) as exc:  # meta.json edited by hand or from elsewhere
        raise damaged_cache(path, f"{META_NAME} is not as prepare wrote it: {type(exc).__name__} {exc}") from None


def read_meta(path: Path) -> dict | None:
    """The cache's meta.json, or None when it is absent or not a JSON object (never a cache)."""
    try:
        meta = json.loads((Path(path) / META_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


# --------------------------------------------------------------------------------------------
# raw fingerprints and cache validity


def _fingerprint(files: dict[str, Path], raw_dir: Path) -> dict[str, dict]:
    """``{spec file name: {"file" (as found in raw_dir), "sha256", "size", "mtime_ns"}}``."""
    records = {}
    for name, path in files.items():
        st = path.stat()
        records[name] = {
            "file": path.relative_to(raw_dir).as_posix(),
            "sha256": fsutil.sha256_file(path),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
        }
    return records


def is_prepared_current(spec: DatasetSpec, raw_dir: Path, prepared_dir: Path) -> bool:
    """Whether ``prepared_dir`` holds a complete cache of ``spec`` made from the raw files now present.

    A raw file counts as unchanged when its size matches and its sha256 in the download manifest
    matches the one recorded at prepare time (or, without a manifest entry, its mtime matches).
    When no raw file is present at all (deleted to save space), the cache is used as it is.
    A cache with a file missing or cut short since prepare is not current (``cache_problem``).
    """
    raw_dir = Path(raw_dir)
    meta = read_meta(Path(prepared_dir))
    if meta is None or meta.get("format_version") != FORMAT_VERSION:
        return False
    if meta.get("spec") != spec.model_dump(mode="json"):
        return False
    if cache_problem(Path(prepared_dir), meta) is not None:
        return False
    found = {name: find_raw_file(raw_dir, name) for name in spec.files}
    if not any(found.values()):
        return True
    manifest = manifest_or_empty(raw_dir)
    for name, path in found.items():
        recorded = meta["raw"].get(name)
        if path is None or recorded is None:
            return False
        st = path.stat()
        if st.st_size != recorded["size"]:
            return False
        entry = manifest.get(path.relative_to(raw_dir).as_posix())
        if entry is not None:
            if entry.get("sha256") != recorded["sha256"]:
                return False
        elif st.st_mtime_ns != recorded["mtime_ns"]:
            return False
    return True


# --------------------------------------------------------------------------------------------
# prepare


def prepare(spec: DatasetSpec, raw_dir: Path, out_dir: Path, progress: bool = True) -> Path:
    """Convert the raw files of ``spec`` in ``raw_dir`` into a prepared cache at ``out_dir``.

    Replaces an existing cache only once the new one is complete. Raises DataFormatError for
    malformed raw files and XmcbenchError for missing files or files that differ from the
    download manifest.
    """
    started = time.perf_counter()
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    fmt = get_format(spec.format)
    if spec.query_text not in fmt.query_texts:
        raise XmcbenchError(
            f"dataset {spec.name}: query_text {spec.query_text!r} does not apply to format {spec.format!r} "
            f"(use one of {', '.join(fmt.query_texts)})"
        )
    lacking = [name for name in fmt.required_files if name not in spec.files]
    if lacking:
        raise XmcbenchError(
            f"dataset {spec.name}: format {spec.format!r} needs {', '.join(lacking)} in the spec's files"
        )
    files = raw_files(spec, raw_dir)
    tmp = fsutil.temp_path(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        fsutil.remove_stale_temps(out_dir.parent)  # cache folders a killed prepare left behind
        tmp.mkdir()
        # sha256 of the raw files runs on another core while the main thread parses them
        with ThreadPoolExecutor(max_workers=1) as pool:
            hashing = pool.submit(_fingerprint, files, raw_dir)
            label_lengths = _write_labels(spec, files, tmp, progress)
            n_labels = len(label_lengths)
            if n_labels == 0:  # an empty or cut-off file: nothing could be evaluated on it
                raise _empty(spec, files, fmt, "labels")
            labels, text_lengths, duplicates, filters = {}, {}, {}, {}
            for split in SPLITS:
                labels[split], text_lengths[split], duplicates[split] = _write_split(
                    spec, files, split, n_labels, tmp, progress
                )
                if labels[split].n_queries == 0:
                    raise _empty(spec, files, fmt, split)
                filters[split] = _write_filter(files, split, (labels[split].n_queries, n_labels), tmp)
            raw = hashing.result()
        _check_against_manifest(spec, raw_dir, raw)
        stats = dataset_stats(
            labels["train"], labels["test"], text_lengths["train"], text_lengths["test"], label_lengths
        )
        fingerprint = hashlib.sha256(
            json.dumps({name: r["sha256"] for name, r in sorted(raw.items())}).encode()
        ).hexdigest()
        meta = {
            "format_version": FORMAT_VERSION,
            "name": spec.name,
            "spec": spec.model_dump(mode="json"),
            "query_text": spec.query_text,
            "label_text": fmt.label_text,
            "propensity_a": spec.propensity_a,
            "propensity_b": spec.propensity_b,
            "counts": {
                "train": labels["train"].n_queries,
                "test": labels["test"].n_queries,
                "labels": n_labels,
                "train_positives": labels["train"].positives,
                "test_positives": labels["test"].positives,
                "duplicate_targets_dropped": duplicates,
            },
            "paper_counts": dict(spec.paper_counts),
            "filters": {s: (_FILTER_FILES[s] if filters[s] is not None else None) for s in SPLITS},
            "filter_pairs": {s: (filters[s] if filters[s] is not None else 0) for s in SPLITS},
            "raw": raw,
            "dataset_version": fingerprint[:16],
            "stats": stats,
            "prepared_at": fsutil.utc_now(),
            "prepare_seconds": round(time.perf_counter() - started, 3),
            "xmcbench_version": __version__,
            # sizes of the cache's own files: a file deleted or cut short later is noticed
            "files": {p.name: p.stat().st_size for p in sorted(tmp.iterdir())},
        }
        # meta.json last: a folder without it is never taken for a cache
        fsutil.write_json(tmp / META_NAME, meta)
        fsutil.install_dir(tmp, out_dir)
    except OSError as exc:  # a full disk, a read-only or vanished folder: the user's to fix
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_failed(spec, out_dir, exc) from None
    except DataFormatError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _refetch_hint(spec, raw_dir, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _empty(spec: DatasetSpec, files: dict[str, Path], fmt, what: str) -> DataFormatError:
    if what == "labels":  # the file the format's labels come from: the one no split reads
        split_files = set(fmt.split_files.values())
        name = next(n for n in fmt.required_files if n not in split_files)
    else:
        name = fmt.split_files[what]
    noun = "labels" if what == "labels" else f"{what} queries"
    return DataFormatError(files[name], None, f"holds no {noun}; the file is empty or not this dataset's")


def _refetch_hint(spec: DatasetSpec, raw_dir: Path, exc: DataFormatError) -> DataFormatError:
    """``exc`` with the way to replace a bad raw file that its manifest records as verified: a plain
    download would only verify it again and keep it."""
    path = Path(exc.path)
    if not (path.is_relative_to(raw_dir) and path.relative_to(raw_dir).as_posix() in manifest_or_empty(raw_dir)):
        return exc
    return DataFormatError(
        exc.path,
        exc.line,
        f"{exc.problem} (to fetch the files again, delete {raw_dir} — `datasets download` keeps files that "
        f"match its {MANIFEST_NAME} — then run `xmcbench datasets download {spec.name}`, with --source for "
        "another copy)",
    )


def _write_failed(spec: DatasetSpec, out_dir: Path, exc: OSError) -> XmcbenchError:
    folder = out_dir.parent
    # numpy reports a short write as a bare OSError ("N requested and M written"), without errno
    if exc.errno in (errno.ENOSPC, errno.EDQUOT) or (exc.errno is None and "written" in str(exc)):
        try:
            free = f" ({shutil.disk_usage(folder).free:,} bytes free there)"
        except OSError:
            free = ""
        return XmcbenchError(
            f"disk full while preparing {spec.name} in {folder}{free}; nothing was written: free some space "
            "or set XMCBENCH_HOME to a larger disk, then run it again"
        )
    where = f" ({exc.filename})" if exc.filename else ""
    return XmcbenchError(
        f"cannot prepare {spec.name} in {folder}: {exc.strerror or exc}{where}; check that the raw files are "
        "readable and the folder writable (or set XMCBENCH_HOME elsewhere), then run it again"
    )


def _check_against_manifest(spec: DatasetSpec, raw_dir: Path, raw: dict[str, dict]) -> None:
    manifest = manifest_or_empty(raw_dir)
    for record in raw.values():
        entry = manifest.get(record["file"])
        if entry is not None and entry.get("sha256") != record["sha256"]:
            raise XmcbenchError(
                f"{raw_dir / record['file']} differs from the sha256 in {raw_dir / MANIFEST_NAME} (it changed "
                f"after download); run `xmcbench datasets download {spec.name}` to fetch it again"
            )


def _write_labels(spec: DatasetSpec, files: dict[str, Path], tmp: Path, progress: bool) -> np.ndarray:
    """Write the label text and uid columns; returns the byte length of every label text."""
    with (
        _ColumnWriter(tmp, "labels.text") as texts,
        _ColumnWriter(tmp, "labels.uid") as uids,
        _closed_after(get_format(spec.format).read_labels(spec, files, progress)) as blocks,
    ):
        for label_texts, label_uids in blocks:
            texts.write(label_texts)
            uids.write(label_uids)
        uids.close()
        return texts.close()


def _write_split(
    spec: DatasetSpec, files: dict[str, Path], split: str, n_labels: int, tmp: Path, progress: bool
) -> tuple[SplitLabels, np.ndarray, int]:
    """Write one split's texts, uids and label matrix; returns (its labels' statistics input, text byte
    lengths, repeated labels dropped).

    Block by block, as they are parsed: each row's labels sorted with repeats merged (where they
    are not already), written to disk, and counted per label for the statistics.
    """
    counts, per_label, dropped = [], np.zeros(n_labels, dtype=np.int64), 0
    with (
        _ColumnWriter(tmp, f"{split}.text") as texts,
        _ColumnWriter(tmp, f"{split}.uid") as uids,
        _ArrayWriter(tmp / f"{split}.labels.indices.npy", np.int32) as indices,
        _closed_after(get_format(spec.format).read_split(spec, files, split, n_labels, progress)) as chunks,
    ):
        for chunk in chunks:
            texts.write(chunk.texts)
            uids.write(chunk.uids)
            given = np.asarray(chunk.indices, np.int32)
            rows, labels = _canonical_rows(np.asarray(chunk.counts, np.int64), given, n_labels)
            dropped += given.size - labels.size
            counts.append(rows)
            indices.write(labels)
            np.add.at(per_label, labels, 1)  # not bincount: that makes and adds an n_labels array every block
        indices.close()
        uids.close()
        lengths = texts.close()
    indptr = np.zeros(sum(len(c) for c in counts) + 1, dtype=np.int64)
    if counts:
        np.cumsum(np.concatenate(counts), out=indptr[1:])
    np.save(tmp / f"{split}.labels.indptr.npy", indptr)
    return SplitLabels(indptr, per_label), lengths, dropped


def _write_filter(files: dict[str, Path], split: str, shape: tuple[int, int], tmp: Path) -> int | None:
    """Write the split's filter matrix if the dataset has a filter file; returns its pair count."""
    name = _FILTER_FILES[split]
    if name not in files:
        return None
    matrix = sp.csr_matrix(read_filter_file(files[name], shape))
    matrix.sort_indices()
    _save_csr(tmp, f"{split}.filter", matrix)
    return int(matrix.nnz)
