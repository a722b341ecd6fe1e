"""Prepared cache: equals the raw content, memory-mapped, atomic, invalidated by raw changes."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import mmap
import os
from pathlib import Path

import numpy as np
import pytest
from lf_json_helpers import iter_records, write_lf_json

from xmcbench.data import prepared as prepared_mod
from xmcbench.data.catalog import LF_FILES, DatasetSpec, Source
from xmcbench.data.prepared import (
    FORMAT_VERSION,
    TextColumn,
    compose_query_texts,
    is_prepared_current,
    load_prepared,
    prepare,
)
from xmcbench.errors import DataFormatError, XmcbenchError


def _spec(query_text: str = "title", files=LF_FILES) -> DatasetSpec:
    return DatasetSpec(
        name="tiny",
        raw_group="tiny",
        format="lf-json",
        query_text=query_text,
        files=list(files),
        sources=[Source(kind="local", ref="")],
        paper_counts={"train": 4, "test": 2, "labels": 5},
        propensity_a=0.55,
        propensity_b=1.5,
    )


def _tiny_raw(raw: Path) -> Path:
    """4 train / 2 test queries, 5 labels; duplicated and unsorted targets, empty texts, entities."""
    raw.mkdir(parents=True, exist_ok=True)
    write_lf_json(
        raw / "lbl.json.gz",
        [
            {"uid": f"L{i}", "title": t, "content": f"about {t}"}
            for i, t in enumerate(["red", "green", "", "B&amp;W", "blue"])
        ],
        escape_html=False,
    )
    write_lf_json(
        raw / "trn.json.gz",
        [
            {"uid": "t0", "title": "red car", "content": "fast", "target_ind": [3, 0, 3]},
            {"uid": "t1", "title": "", "content": "only content", "target_ind": []},
            {"uid": "t2", "title": "green &#8217;tree", "content": "", "target_ind": [1]},
            {"uid": "t3", "title": "sky", "content": "blue sky", "target_ind": [4, 1]},
        ],
        escape_html=False,
    )
    write_lf_json(
        raw / "tst.json",
        [
            {"uid": "s0", "title": "blue", "content": "x", "target_ind": [4]},
            {"uid": "s1", "title": "red", "content": "y", "target_ind": [0, 4]},
        ],
        compress=False,
        escape_html=False,
    )
    (raw / "filter_labels_train.txt").write_text("2 1\n")  # one line: never a 1-D array
    (raw / "filter_labels_test.txt").write_text("")
    return raw


def test_cache_equals_raw_content(tmp_path):
    raw = _tiny_raw(tmp_path / "raw")
    out = prepare(_spec(), raw, tmp_path / "prepared", progress=False)
    ds = load_prepared(out)
    assert ds.n_labels == 5 and ds.meta["counts"]["train"] == 4 and ds.meta["counts"]["test"] == 2
    assert ds.query_texts("train").to_list() == ["red car", "", "green \u2019tree", "sky"]
    assert ds.label_texts().to_list() == ["red", "green", "", "B&W", "blue"]
    assert ds.uids("test").to_list() == ["s0", "s1"] and ds.label_uids()[3] == "L3"
    train = ds.labels("train")
    assert train.dtype == np.float32 and train.has_sorted_indices
    assert train.toarray().tolist() == [
        [1, 0, 0, 1, 0],
        [0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [0, 1, 0, 0, 1],
    ]
    assert ds.meta["counts"]["duplicate_targets_dropped"] == {"train": 1, "test": 0}
    assert ds.filter("train").toarray().nonzero() == ([2], [1])
    assert ds.filter("test").shape == (2, 5) and ds.filter("test").nnz == 0
    assert ds.propensity_a == 0.55 and ds.query_text == "title"
    for name in ("trn.json.gz", "tst.json.gz", "lbl.json.gz"):
        assert len(ds.meta["raw"][name]["sha256"]) == 64
    assert ds.meta["raw"]["tst.json.gz"]["file"] == "tst.json"  # the plain twin was used
    assert len(ds.version) == 16


def test_cache_equals_raw_on_synthetic(tmp_path, synth_raw_dir, synth_params):
    from xmcbench.data.synth import make_synthetic_spec

    spec = make_synthetic_spec("synth-check", query_text="title+content", **synth_params)
    ds = load_prepared(prepare(spec, synth_raw_dir, tmp_path / "p", progress=False))
    for split, file in (("train", "trn.json.gz"), ("test", "tst.json.gz")):
        records = list(iter_records(synth_raw_dir / file))
        assert ds.query_texts(split).to_list() == compose_query_texts(
            [r["title"] for r in records], [r["content"] for r in records], "title+content"
        )
        assert ds.uids(split).to_list() == [r["uid"] for r in records]
        labels = ds.labels(split)
        assert [labels.indices[labels.indptr[i] : labels.indptr[i + 1]].tolist() for i in range(labels.shape[0])] == [
            sorted(set(r["target_ind"])) for r in records
        ]
    assert ds.label_texts().to_list() == [
        r["title"] for r in iter_records(synth_raw_dir / "lbl.json.gz", targets=False)
    ]


def test_title_plus_content():
    assert compose_query_texts(["a", "", "c", ""], ["x", "y", "", ""], "title+content") == ["a x", "y", "c", ""]
    assert compose_query_texts(["a"], ["x"], "title") == ["a"]


def test_text_column_indexing(tmp_path):
    writer = prepared_mod._ColumnWriter(tmp_path, "col")
    writer.write(["α", "", "bc"])
    writer.write(["d😀"])
    assert writer.close().tolist() == [2, 0, 2, 5]
    col = TextColumn.open(tmp_path, "col")
    assert len(col) == 4 and col[0] == "α" and col[-1] == "d😀" and col[1] == ""
    assert col[1:3] == ["", "bc"] and col[::2] == ["α", "bc"] and col[3:1] == []
    assert col[np.array([3, 0])] == ["d😀", "α"] and col[[True, False, False, True]] == ["α", "d😀"]
    assert list(col) == ["α", "", "bc", "d😀"]
    with pytest.raises(IndexError):
        col[4]
    empty = prepared_mod._ColumnWriter(tmp_path, "empty")
    empty.close()
    assert TextColumn.open(tmp_path, "empty").to_list() == []


def test_label_arrays_are_memory_mapped(tmp_path):
    ds = load_prepared(prepare(_spec(), _tiny_raw(tmp_path / "raw"), tmp_path / "p", progress=False))
    matrix = ds.labels("train")
    base = matrix.indices
    while getattr(base, "base", None) is not None and not isinstance(base, mmap.mmap):
        base = base.base
    assert isinstance(base, mmap.mmap)  # backed by the file, not a copy
    assert not matrix.indices.flags.writeable  # a read-only map: changing it needs an explicit copy


def test_interrupted_prepare_leaves_nothing_complete(tmp_path, monkeypatch):
    raw = _tiny_raw(tmp_path / "raw")
    out = tmp_path / "cache" / "prepared"
    real = prepared_mod._write_split

    def failing(spec, files, split, *args):
        if split == "test":
            raise KeyboardInterrupt  # e.g. Ctrl-C half-way
        return real(spec, files, split, *args)

    monkeypatch.setattr(prepared_mod, "_write_split", failing)
    with pytest.raises(KeyboardInterrupt):
        prepare(_spec(), raw, out, progress=False)
    assert list(out.parent.iterdir()) == []  # no cache, no temp folder
    with pytest.raises(XmcbenchError, match="no prepared dataset"):
        load_prepared(out)

    monkeypatch.setattr(prepared_mod, "_write_split", real)
    prepare(_spec(), raw, out, progress=False)
    before = (out / "meta.json").read_bytes()
    monkeypatch.setattr(prepared_mod, "_write_split", failing)
    with pytest.raises(KeyboardInterrupt):
        prepare(_spec(), raw, out, progress=False)
    assert (out / "meta.json").read_bytes() == before  # the older complete cache is untouched
    assert sorted(p.name for p in out.parent.iterdir()) == ["prepared"]


def test_bad_raw_file_aborts_cleanly(tmp_path):
    raw = _tiny_raw(tmp_path / "raw")
    (raw / "filter_labels_test.txt").write_text("0 9\n")
    with pytest.raises(DataFormatError, match="filter_labels_test.txt:1"):
        prepare(_spec(), raw, tmp_path / "p", progress=False)
    assert not (tmp_path / "p").exists() and list(tmp_path.glob(".p.tmp-*")) == []
    with pytest.raises(XmcbenchError, match="missing"):
        prepare(_spec(), tmp_path / "nowhere", tmp_path / "p", progress=False)
    with pytest.raises(XmcbenchError, match="does not apply"):
        prepare(_spec(query_text="text"), raw, tmp_path / "p", progress=False)


def test_currency_follows_raw_files_and_spec(tmp_path):
    raw = _tiny_raw(tmp_path / "raw")
    out = prepare(_spec(), raw, tmp_path / "p", progress=False)
    assert is_prepared_current(_spec(), raw, out)
    assert not is_prepared_current(_spec(query_text="title+content"), raw, out)  # spec changed
    assert not is_prepared_current(_spec(), raw, tmp_path / "elsewhere")
    # touching a file without a manifest entry counts as a change (mtime)
    stat = (raw / "lbl.json.gz").stat()
    os.utime(raw / "lbl.json.gz", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert not is_prepared_current(_spec(), raw, out)
    out = prepare(_spec(), raw, out, progress=False)
    assert is_prepared_current(_spec(), raw, out)
    # with a manifest, the sha256 decides: a re-download of the same bytes keeps the cache
    from xmcbench.data.fetch import record_manifest

    record_manifest(
        raw, ["trn.json.gz", "tst.json", "lbl.json.gz", "filter_labels_train.txt", "filter_labels_test.txt"], "test"
    )
    os.utime(raw / "trn.json.gz")
    assert is_prepared_current(_spec(), raw, out)
    (raw / "filter_labels_train.txt").write_text("3 1\n")  # same size, other content
    manifest = json.loads((raw / "manifest.json").read_text())
    manifest["filter_labels_train.txt"]["sha256"] = "0" * 64
    (raw / "manifest.json").write_text(json.dumps(manifest))
    assert not is_prepared_current(_spec(), raw, out)
    with pytest.raises(XmcbenchError, match="differs from the sha256"):
        prepare(_spec(), raw, out, progress=False)
    # raw files deleted to save space: the cache is used as it is
    for path in raw.iterdir():
        path.unlink()
    assert is_prepared_current(_spec(), raw, out)


def test_format_version_checked(tmp_path):
    out = prepare(_spec(), _tiny_raw(tmp_path / "raw"), tmp_path / "p", progress=False)
    meta = json.loads((out / "meta.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(XmcbenchError, match="prepare it again"):
        load_prepared(out)
    assert not is_prepared_current(_spec(), tmp_path / "raw", out)


def test_unknown_split(tmp_path):
    ds = load_prepared(prepare(_spec(), _tiny_raw(tmp_path / "raw"), tmp_path / "p", progress=False))
    with pytest.raises(XmcbenchError, match="unknown split"):
        ds.labels("val")


def test_dataset_without_filter_files(tmp_path):
    raw = _tiny_raw(tmp_path / "raw")
    spec = _spec(files=["trn.json.gz", "tst.json.gz", "lbl.json.gz"])
    ds = load_prepared(prepare(spec, raw, tmp_path / "p", progress=False))
    assert ds.filter("train") is None and ds.filter("test") is None
    assert ds.meta["filters"] == {"train": None, "test": None}


def test_stale_temp_folders_of_dead_processes_are_removed(tmp_path):
    import subprocess
    import sys

    raw = _tiny_raw(tmp_path / "raw")
    out = tmp_path / "cache" / "prepared"
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = out.parent / f".prepared.{proc.pid}.0123abcd.tmp"  # left by a killed prepare
    live = out.parent / f".prepared.{os.getpid()}.4567cdef.tmp"  # another prepare still writing
    for folder in (dead, live):
        folder.mkdir(parents=True)
        (folder / "train.text.bin").write_bytes(b"half")
    prepare(_spec(), raw, out, progress=False)
    assert not dead.exists() and live.is_dir()
    assert load_prepared(out).n_queries("train") == 4


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_damaged_cache_is_not_current_and_loads_with_one_clear_error(tmp_path, damage):
    raw = _tiny_raw(tmp_path / "raw")
    out = prepare(_spec(), raw, tmp_path / "tiny" / "prepared", progress=False)
    victim = out / "test.labels.indices.npy"
    if damage == "delete":
        victim.unlink()
    else:
        victim.write_bytes(victim.read_bytes()[:100])
    assert not is_prepared_current(_spec(), raw, out)  # so load_dataset prepares it again
    with pytest.raises(XmcbenchError, match=r"damaged \(test.labels.indices.npy .*datasets prepare tiny --force"):
        load_prepared(out)
    out = prepare(_spec(), raw, out, progress=False)
    assert is_prepared_current(_spec(), raw, out) and load_prepared(out).labels("test").nnz == 3


def test_damaged_array_of_an_unchanged_size_is_one_clear_error(tmp_path):
    out = prepare(_spec(), _tiny_raw(tmp_path / "raw"), tmp_path / "tiny" / "prepared", progress=False)
    ds = load_prepared(out)
    for path in (out / "test.labels.indptr.npy", out / "train.text.offsets.npy"):
        data = bytearray(path.read_bytes())
        data[:6] = b"garbag"  # the numpy header, not the size
        path.write_bytes(bytes(data))
    with pytest.raises(XmcbenchError, match=r"damaged \(test.labels: .*--force"):
        ds.labels("test")
    with pytest.raises(XmcbenchError, match=r"damaged \(train.text: .*--force"):
        ds.query_texts("train")


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', "null", '{"format_version": 1}'])
def test_meta_json_that_is_no_cache_meta(tmp_path, content):
    raw = _tiny_raw(tmp_path / "raw")
    out = prepare(_spec(), raw, tmp_path / "tiny" / "prepared", progress=False)
    (out / "meta.json").write_text(content)
    assert not is_prepared_current(_spec(), raw, out)
    with pytest.raises(XmcbenchError, match="no prepared dataset|damaged"):
        load_prepared(out)


def test_full_disk_while_preparing_is_one_clear_error(tmp_path, monkeypatch):
    raw = _tiny_raw(tmp_path / "raw")
    out = tmp_path / "tiny" / "prepared"

    def short_write(file, arr, *args, **kwargs):
        raise OSError("60001 requested and 55792 written")  # what numpy raises on a full disk

    monkeypatch.setattr(prepared_mod.np, "save", short_write)
    with pytest.raises(XmcbenchError, match=r"disk full while preparing tiny in .*bytes free there.*XMCBENCH_HOME"):
        prepare(_spec(), raw, out, progress=False)
    assert list(out.parent.iterdir()) == []  # no cache and no temp folder left


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="lists open files through /proc")
@pytest.mark.parametrize("split", ["train", "test"])
def test_a_full_disk_mid_split_leaves_no_file_open(tmp_path, monkeypatch, split):
    """The folder is removed and its files closed: a deleted file still open would keep its space."""
    from xmcbench.data.formats import lf_json

    raw = _tiny_raw(tmp_path / "raw")
    out = tmp_path / "tiny" / "prepared"
    real = lf_json.FORMAT.read_split

    def read_split(spec, files, which, n_labels, progress):
        with contextlib.closing(real(spec, files, which, n_labels, progress)) as chunks:
            yield next(chunks)
            if which == split:
                raise OSError(errno.ENOSPC, "No space left on device")
            yield from chunks

    failing = dataclasses.replace(lf_json.FORMAT, read_split=read_split)
    monkeypatch.setattr(prepared_mod, "get_format", lambda name: failing)
    with pytest.raises(XmcbenchError, match="disk full while preparing tiny") as caught:
        prepare(_spec(), raw, out, progress=False)
    assert list(out.parent.iterdir()) == []
    # the error is still held (as a sweep holds a failed run's), and with it the frames that wrote
    assert caught.value.__context__ is not None
    assert not [f for f in _open_paths() if str(tmp_path) in f]


def test_a_write_failing_mid_split_joins_the_reader_threads_there(tmp_path, monkeypatch):
    import threading

    from xmcbench.data.formats import lf_json

    monkeypatch.setattr(lf_json, "_CHUNK_BYTES", 64)  # a block per record or two
    monkeypatch.setattr(lf_json, "_READ_SIZE", 50)
    raw = _tiny_raw(tmp_path / "raw")
    train_writes, real_write = [], prepared_mod._ColumnWriter.write

    def write(self, texts):
        if self._prefix == "train.text":
            train_writes.append(texts)
            if len(train_writes) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, texts)

    monkeypatch.setattr(prepared_mod._ColumnWriter, "write", write)
    before = threading.active_count()
    with pytest.raises(XmcbenchError, match="disk full while preparing tiny") as caught:
        prepare(_spec(), raw, tmp_path / "tiny" / "prepared", progress=False)
    assert caught.value.__context__ is not None  # held, with the frames that were reading
    assert threading.active_count() == before  # the parser pool and the decompressor are gone


def test_a_format_may_hand_out_any_iterator(tmp_path, monkeypatch):
    from xmcbench.data.formats import lf_json

    raw = _tiny_raw(tmp_path / "raw")
    expected = load_prepared(prepare(_spec(), raw, tmp_path / "a", progress=False))

    def read_split(*args):
        return iter(list(lf_json.FORMAT.read_split(*args)))  # no close()

    listed = dataclasses.replace(lf_json.FORMAT, read_split=read_split)
    monkeypatch.setattr(prepared_mod, "get_format", lambda name: listed)
    got = load_prepared(prepare(_spec(), raw, tmp_path / "b", progress=False))
    assert (got.labels("train") != expected.labels("train")).nnz == 0
    assert got.query_texts("test").to_list() == expected.query_texts("test").to_list()


def _open_paths() -> list[str]:
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return paths


def test_unwritable_cache_folder_is_one_clear_error(tmp_path, monkeypatch):
    raw = _tiny_raw(tmp_path / "raw")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "tiny"))

    monkeypatch.setattr(prepared_mod.fsutil, "temp_path", lambda path: tmp_path / "tiny" / ".x.1.ab.tmp")
    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(XmcbenchError, match=r"cannot prepare tiny in .*Read-only file system .*writable"):
        prepare(_spec(), raw, tmp_path / "tiny" / "prepared", progress=False)


def test_bad_raw_file_recorded_in_the_manifest_says_how_to_fetch_it_again(tmp_path):
    from xmcbench.data.fetch import record_manifest

    raw = _tiny_raw(tmp_path / "raw")
    (raw / "filter_labels_test.txt").write_text("0 9\n")
    with pytest.raises(DataFormatError, match=r"filter_labels_test.txt:1: pair \(0, 9\) is out of range") as err:
        prepare(_spec(), raw, tmp_path / "p", progress=False)
    assert "delete" not in str(err.value)  # not downloaded: the file is the user's to fix
    record_manifest(raw, ["trn.json.gz", "tst.json", "lbl.json.gz", *LF_FILES[3:]], "https://mirror/x.zip")
    with pytest.raises(DataFormatError, match=r"out of range .*delete .*raw — `datasets download` keeps") as err:
        prepare(_spec(), raw, tmp_path / "p", progress=False)
    assert err.value.line == 1 and "xmcbench datasets download tiny`" in str(err.value)


@pytest.mark.parametrize(("file", "what"), [("lbl.json.gz", "labels"), ("tst.json", "test queries")])
def test_raw_file_without_records_is_refused(tmp_path, file, what):
    raw = _tiny_raw(tmp_path / "raw")
    (raw / file).write_bytes(b"")  # e.g. an empty file in a mirror
    (raw / "filter_labels_train.txt").write_text("")
    with pytest.raises(DataFormatError, match=rf"{file}: holds no {what}; the file is empty"):
        prepare(_spec(), raw, tmp_path / "p", progress=False)
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("chunks", [[], [[]], [[5]], [[1, 2, 3], [], [7, 2**31 - 1], [0] * 1000]])
def test_label_indices_written_block_by_block_load_as_one_array(tmp_path, chunks):
    path = tmp_path / "x.npy"
    writer = prepared_mod._ArrayWriter(path, np.int32)
    for chunk in chunks:
        writer.write(np.array(chunk, dtype=np.int64))
    expected = np.array([x for chunk in chunks for x in chunk], dtype=np.int32)
    assert writer.close() == expected.size
    loaded = np.load(path, mmap_mode="r")
    assert loaded.dtype == np.int32 and loaded.shape == expected.shape and (loaded == expected).all()


def test_rows_checked_and_merged_block_by_block_agree_with_scipy():
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    cases = [([], []), ([0, 0], []), ([1], [4]), ([2, 0, 1], [3, 4, 0]), ([2, 0, 2], [1, 3, 3, 5])]
    for _ in range(300):  # small rows and labels: repeats, unsorted rows and empty rows are all common
        counts = rng.integers(0, 4, rng.integers(1, 6))
        cases.append((counts.tolist(), rng.integers(0, 6, counts.sum()).tolist()))
    seen = set()
    for counts, indices in cases:
        indptr = np.r_[0, np.cumsum(counts, dtype=np.int64)]
        matrix = sp.csr_matrix((np.ones(len(indices)), np.array(indices, dtype=np.int32), indptr), (len(counts), 6))
        got = prepared_mod._rows_canonical(np.array(counts, dtype=np.int64), np.array(indices, dtype=np.int32))
        assert got == matrix.has_canonical_format, (counts, indices)
        seen.add(got)
        merged_counts, merged = prepared_mod._canonical_rows(np.array(counts, np.int64), np.array(indices, np.int32), 6)
        rows = np.split(np.array(indices, dtype=np.int64), np.cumsum(counts)[:-1]) if counts else []
        assert merged_counts.dtype == np.int64 and merged.dtype == np.int32
        assert merged_counts.tolist() == [len(set(r.tolist())) for r in rows]
        assert merged.tolist() == [x for r in rows for x in sorted(set(r.tolist()))]
    assert seen == {True, False}


@pytest.mark.parametrize("bad_row", [12, 40])
def test_unsorted_and_repeated_labels_anywhere_in_a_large_split_are_merged(tmp_path, monkeypatch, bad_row):
    """One row with a repeat, early (clean blocks follow) or last: the matrix and the statistics count it once."""
    from xmcbench.data.formats import lf_json

    monkeypatch.setattr(lf_json, "_CHUNK_BYTES", 64)  # a block every few records
    monkeypatch.setattr(lf_json, "_READ_SIZE", 50)
    blocks, parse = [], lf_json.parse_block
    monkeypatch.setattr(lf_json, "parse_block", lambda block, **kw: blocks.append(block) or parse(block, **kw))
    raw = tmp_path / "raw"
    rows = [sorted([i % 5, (i + 1) % 5]) for i in range(40)]
    rows.insert(bad_row, [3, 1, 3])
    write_lf_json(raw / "trn.json.gz", [{"uid": str(i), "title": f"q{i}", "target_ind": r} for i, r in enumerate(rows)])
    write_lf_json(raw / "tst.json.gz", [{"uid": "t", "title": "t", "target_ind": [0]}])
    write_lf_json(raw / "lbl.json.gz", [{"uid": str(j), "title": f"l{j}"} for j in range(5)])
    ds = load_prepared(prepare(_spec(files=("trn.json.gz", "tst.json.gz", "lbl.json.gz")), raw, tmp_path / "out"))
    labels = ds.labels("train")
    assert [sorted(set(r)) for r in rows] == [
        labels.indices[a:b].tolist() for a, b in zip(labels.indptr, labels.indptr[1:])
    ]
    assert ds.meta["counts"]["duplicate_targets_dropped"] == {"train": 1, "test": 0}
    assert ds.meta["stats"]["train"]["positives"] == labels.nnz == 82
    assert ds.meta["stats"]["labels_without_train_queries"] == 0
    train_blocks = [b for b in blocks if b'"title":"q' in b]
    where = next(i for i, b in enumerate(train_blocks) if b"[3,1,3]" in b)
    assert len(train_blocks) > 3 and 0 < where and (where < len(train_blocks) - 2 or bad_row == 40)
