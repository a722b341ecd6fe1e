"""record.json has one writer, and it refuses to write what the store would reject."""

import errno
import json

import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.store.record import new_record, read_record, write_record


def good():
    return new_record(
        "20261123-000000-tfidf-x-abc123",
        task={"dataset": "x", "split": "test"},
        model={"method": "tfidf"},
        phases_done=[],
    )


def test_a_new_record_round_trips(tmp_path):
    rec = good()
    write_record(tmp_path, rec)
    assert read_record(tmp_path) == rec


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("run_id"),
        lambda r: r.update(status="done"),
        lambda r: r.update(run_id="../escape"),
        lambda r: r["task"].pop("dataset"),
        lambda r: r.update(scores=[{"name": "P@1", "value": "high"}]),
        lambda r: r.update(scores=[{"name": "P@1", "value": 1.0}, {"name": "P@1", "value": 2.0}]),
        lambda r: r.update(schema_version=999),
        lambda r: r["compute"].update(gpu_hours=True),
    ],
)
def test_an_invalid_record_is_never_written(tmp_path, damage):
    write_record(tmp_path, good())
    before = (tmp_path / "record.json").read_bytes()
    bad = good()
    damage(bad)
    with pytest.raises(XmcbenchError):
        write_record(tmp_path, bad)
    assert (tmp_path / "record.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # no temp file left


def test_nan_is_refused_not_written_as_bare_nan(tmp_path):
    rec = good()
    rec["accounting"]["pool_size_mean"] = float("nan")
    with pytest.raises(XmcbenchError):
        write_record(tmp_path, rec)


def test_disk_full_still_ends_the_record(tmp_path, monkeypatch):
    """ENOSPC on the atomic route: the final (smaller) record is written in place."""
    rec = good()
    rec["accounting"]["note"] = "x" * 2000  # the running record is the larger one
    write_record(tmp_path, rec)
    from xmcbench.store import record as record_module

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record_module, "atomic_write", full)
    final = good()
    final.update(status="failed", error="OSError: No space left on device")
    write_record(tmp_path, final)
    assert json.loads((tmp_path / "record.json").read_text())["status"] == "failed"
