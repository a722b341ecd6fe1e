"""``xmcbench.data.load_dataset``: cache reuse, prepare from raw, synthetic regeneration, download."""

from __future__ import annotations

import multiprocessing
import os
import shutil

import pytest

from xmcbench import paths
from xmcbench.data import load_dataset
from xmcbench.errors import XmcbenchError


def test_prepares_then_reuses(synth_dataset):
    ds = load_dataset("SYNTH-TEST", progress=False)
    assert ds.name == "synth-test" and ds.meta["counts"]["train"] == 1000 and ds.n_labels == 200
    meta = paths.dataset_prepared_dir("synth-test") / "meta.json"
    first = meta.stat().st_mtime_ns
    assert load_dataset("synth-test", progress=False).meta == ds.meta
    assert meta.stat().st_mtime_ns == first  # the cache was reused, not rebuilt


def test_changed_raw_file_triggers_prepare(synth_dataset, synth_raw_dir):
    load_dataset("synth-test", progress=False)
    raw = paths.dataset_raw_dir("synth-test")
    lines = (synth_raw_dir / "filter_labels_test.txt").read_text().splitlines()
    (raw / "filter_labels_test.txt").write_text("\n".join(lines[:1]) + "\n")
    ds = load_dataset("synth-test", progress=False)
    assert ds.filter("test").nnz == 1


def test_synthetic_raw_files_are_regenerated(synth_dataset, synth_raw_dir):
    shutil.rmtree(paths.dataset_raw_dir("synth-test"))
    ds = load_dataset("synth-test", progress=False)
    assert ds.meta["counts"]["test"] == 250
    raw = paths.dataset_raw_dir("synth-test")
    assert (raw / "trn.json.gz").read_bytes() == (synth_raw_dir / "trn.json.gz").read_bytes()
    assert (raw / "manifest.json").exists()


def test_not_downloaded_says_how(monkeypatch):
    with pytest.raises(
        XmcbenchError, match=r"not downloaded here; run `xmcbench datasets download LF-AmazonTitles-131K`"
    ):
        load_dataset("lf-amazontitles-131k", progress=False)


def test_download_when_asked(monkeypatch, synth_raw_dir):
    """download=True hands the spec and source to the downloader, then prepares what it fetched."""
    calls = []

    def fake_download(spec, source=None, progress=True):
        calls.append((spec.name, source))
        raw = paths.dataset_raw_dir(spec.raw_group)
        raw.mkdir(parents=True)
        for name in spec.files:
            shutil.copyfile(synth_raw_dir / name, raw / name)
        return raw

    import xmcbench.data.load as load_mod

    monkeypatch.setattr(load_mod, "download_dataset", fake_download)
    ds = load_dataset("LF-AmazonTitles-131K", download=True, source="/some/mirror", progress=False)
    assert calls == [("LF-AmazonTitles-131K", "/some/mirror")]
    assert ds.name == "LF-AmazonTitles-131K" and ds.n_labels == 200 and ds.propensity_a == 0.6


def _count_calls(monkeypatch, tmp_path, module, name):
    """Record each call of ``module.name`` (in any process) as a line in a file; return the file."""
    log = tmp_path / f"{name}.calls"
    real = getattr(module, name)

    def counted(*args, **kwargs):
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return log


def _load_synthetic(params):
    ds = load_dataset("par-synth", synthetic=params, progress=False)
    return ds.meta["counts"]["train"]


def test_parallel_processes_make_a_synthetic_dataset_once(monkeypatch, tmp_path):
    import xmcbench.data.load as load_mod

    generated = _count_calls(monkeypatch, tmp_path, load_mod, "materialize")
    prepared = _count_calls(monkeypatch, tmp_path, load_mod, "prepare")
    params = {"labels": 30, "train": 60, "test": 20, "seed": 3}
    with multiprocessing.get_context("fork").Pool(3) as pool:
        assert pool.map(_load_synthetic, [params] * 3) == [60, 60, 60]
    assert len(generated.read_text().splitlines()) == 1
    assert len(prepared.read_text().splitlines()) == 1
    assert load_dataset("PAR-SYNTH", progress=False).spec.synthetic["n_labels"] == 30


def test_synthetic_parameters_create_the_dataset(tmp_path):
    ds = load_dataset("made-here", synthetic={"labels": 20, "train": 40, "test": 10}, progress=False)
    assert ds.n_labels == 20 and ds.spec.synthetic["n_train"] == 40
    with pytest.raises(XmcbenchError, match="already exists with other parameters"):
        load_dataset("made-here", synthetic={"labels": 21, "train": 40, "test": 10}, progress=False)
    ds = load_dataset("made-here", synthetic={"labels": 21, "train": 40, "test": 10}, force=True, progress=False)
    assert ds.n_labels == 21


def test_prepared_if_current_reads_only_what_is_prepared(synth_dataset):
    from xmcbench.data import prepared_if_current

    home = paths.home()
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    assert prepared_if_current("synth-test") is None  # raw files only: nothing is prepared for it
    assert prepared_if_current("no-such-dataset") is None
    assert prepared_if_current("EURLex-4K") is None  # catalogued, not downloaded
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before  # it made nothing
    load_dataset("synth-test", progress=False)
    before = {p.relative_to(home): p.stat().st_mtime_ns for p in home.rglob("*")}
    found = prepared_if_current("SYNTH-TEST")
    assert {p.relative_to(home): p.stat().st_mtime_ns for p in home.rglob("*")} == before  # found: still nothing made
    assert found.meta == load_dataset("synth-test", progress=False).meta


def test_prepared_if_current_checks_synthetic_parameters():
    from xmcbench.data import prepared_if_current

    load_dataset("made-here", synthetic={"labels": 20, "train": 40, "test": 10}, progress=False)
    assert prepared_if_current("made-here", {"labels": 20, "train": 40, "test": 10}).n_labels == 20
    assert prepared_if_current("made-here", {"labels": 21, "train": 40, "test": 10}) is None  # another dataset


def test_damaged_cache_is_prepared_again(synth_dataset):
    load_dataset("synth-test", progress=False)
    cache = paths.dataset_prepared_dir("synth-test")
    (cache / "test.labels.indices.npy").unlink()  # e.g. deleted by a disk clean-up
    ds = load_dataset("synth-test", progress=False)
    assert ds.labels("test").nnz == ds.meta["counts"]["test_positives"]


def test_current_cache_is_read_without_the_lock_and_a_damaged_one_is_named(monkeypatch, synth_raw_dir):
    import xmcbench.data.load as load_mod

    raw = paths.dataset_raw_dir("LF-Amazon-131K")
    shutil.copytree(synth_raw_dir, raw)
    load_dataset("LF-AmazonTitles-131K", progress=False)
    shutil.rmtree(raw)  # deleted to save space: the cache alone serves

    def no_lock(name, progress=True):  # as on a read-only $XMCBENCH_HOME
        raise OSError(30, "Read-only file system")

    with monkeypatch.context() as patched:
        patched.setattr(load_mod, "dataset_lock", no_lock)
        assert load_dataset("lf-amazontitles-131k", progress=False).n_labels == 200
    (paths.dataset_prepared_dir("LF-AmazonTitles-131K") / "train.text.bin").unlink()
    with pytest.raises(
        XmcbenchError,
        match=r"not downloaded here and its prepared cache in .* is damaged \(train.text.bin is missing\); run",
    ):
        load_dataset("LF-AmazonTitles-131K", progress=False)


def test_a_synthetic_dataset_never_replaces_a_local_one_of_the_same_name(tmp_path, monkeypatch):
    import json

    from xmcbench.data import make_synthetic_spec
    from xmcbench.data.catalog import local_spec_path, save_local_spec
    from xmcbench.data.load import synthetic_conflict

    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    mine = save_local_spec(make_synthetic_spec("mydata", n_labels=20, n_train=30, n_test=10))
    assert mine == local_spec_path("mydata")
    text = json.loads(mine.read_text())
    text.pop("synthetic", None)  # the user's own dataset: no generator parameters
    mine.write_text(json.dumps(text))
    before = mine.read_text()
    assert "local dataset of yours" in synthetic_conflict("mydata", {"labels": 20, "train": 30, "test": 10})
    with pytest.raises(XmcbenchError, match="already exists with other parameters"):
        load_dataset("mydata", synthetic={"labels": 20, "train": 30, "test": 10}, progress=False)
    assert mine.read_text() == before
