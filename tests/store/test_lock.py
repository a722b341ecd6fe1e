"""Several processes writing one database at once: nothing lost, nothing corrupted."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import duckdb
import pytest

from xmcbench.store import SCHEMA_VERSION, DatabaseLockTimeout, Store
from xmcbench.store.lock import write_lock

N_WRITERS = 4
RUNS_PER_WRITER = 15

# Each writer opens the store itself (racing to create and migrate it) and ingests its runs one
# write at a time, the way concurrent `xmcbench run` processes record their results.
WRITER = textwrap.dedent(
    """
    import sys
    from xmcbench.store import Store
    from xmcbench.store.record import new_record

    db, worker, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with Store.open(db) as store:
        for i in range(n):
            record = new_record(f"w{worker}-r{i:03d}", task={"dataset": "synth", "split": "test"}, model={"method": f"m{worker}"})
            record["status"] = "finished"
            record["scores"] = [{"name": "P@1", "value": worker * 100.0 + i}, {"name": "P@5", "value": float(i)}]
            record["compute"] = {"device_type": "cpu", "device_count": 1, "gpu_hours": 0.0}
            store.ingest_record(record, None)
    """
)

# A reader polling the database all the while (like `xmcbench table` in a loop): it must never
# see a half-written run and must not starve the writers.
READER = textwrap.dedent(
    """
    import sys, time
    from xmcbench.store import Store

    db, expected = sys.argv[1], int(sys.argv[2])
    deadline = time.monotonic() + 120
    with Store.open(db) as store:
        while time.monotonic() < deadline:
            runs = {r["run_id"] for r in store.runs()}
            scored = {s["run_id"] for s in store.scores()}  # read after runs: a superset if writes are atomic
            assert runs <= scored, "a run was visible without its scores"
            if len(runs) == expected:
                break
            time.sleep(0.01)
    print(len(runs))
    """
)


@pytest.mark.slow
def test_parallel_writers_lose_nothing(tmp_path):
    db = tmp_path / "results.duckdb"
    expected = N_WRITERS * RUNS_PER_WRITER
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(w), str(RUNS_PER_WRITER)], stderr=subprocess.PIPE, text=True
        )
        for w in range(N_WRITERS)
    ]
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(db), str(expected)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err
    assert out.strip() == str(expected)

    with Store.open(db) as store:
        runs = store.runs()
        assert len(runs) == expected and len({r["run_id"] for r in runs}) == expected
        values = {(s["run_id"], s["name"]): s["value"] for s in store.scores()}
        assert len(values) == 2 * expected
        for w in range(N_WRITERS):
            for i in range(RUNS_PER_WRITER):
                assert values[(f"w{w}-r{i:03d}", "P@1")] == w * 100.0 + i
    # the file is a sound database: every table scans, a checkpoint succeeds, versions are single
    con = duckdb.connect(str(db))
    try:
        assert con.execute("SELECT count(*) FROM compute").fetchone()[0] == expected
        assert (
            con.execute("SELECT count(*), count(DISTINCT version) FROM schema_version").fetchone()
            == (SCHEMA_VERSION,) * 2
        )
        con.execute("CHECKPOINT")
    finally:
        con.close()


def test_writer_times_out_with_a_clear_error_while_the_lock_is_held(tmp_path, record_factory):
    db = tmp_path / "results.duckdb"
    with Store.open(db, timeout_s=0.3) as store:
        with write_lock(db):  # another writer (flock conflicts across open files, even in one process)
            with pytest.raises(
                DatabaseLockTimeout, match=r"results.duckdb.lock: could not lock the results database within 0 s"
            ):
                store.ingest_record(record_factory("r1"), None)
        store.ingest_record(record_factory("r1"), None)  # released: the write goes through
        assert [r["run_id"] for r in store.runs()] == ["r1"]


def test_reader_retries_while_a_writer_has_the_file_open(tmp_path, record_factory):
    db = tmp_path / "results.duckdb"
    with Store.open(db) as store:
        store.ingest_record(record_factory("r1"), None)
    # another process holds the file read-write for a moment; the read waits for it
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(db)!r}); print('open', flush=True); time.sleep(0.5); c.close()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "open"
    assert [r["run_id"] for r in Store(db, timeout_s=30).runs()] == ["r1"]
    holder.wait(timeout=30)
    with pytest.raises(DatabaseLockTimeout, match="another process kept the database open"):
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import duckdb, time; c = duckdb.connect({str(db)!r}); print('open', flush=True); time.sleep(1.5)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "open"
            Store(db, timeout_s=0.3).runs()
        finally:
            holder.wait(timeout=30)


def test_a_writer_waiting_for_the_lock_says_so_once(tmp_path, record_factory):
    import threading

    db = tmp_path / "results.duckdb"
    said = []
    with Store.open(db, notify=said.append) as store:
        assert said == []  # nothing to wait for: nothing said
        done = threading.Event()
        with write_lock(db):  # another writer holds it
            worker = threading.Thread(target=lambda: (store.ingest_record(record_factory("r1"), None), done.set()))
            worker.start()
            worker.join(0.5)
            assert not done.is_set()  # waiting ...
        worker.join(30)
        assert done.is_set()
        store.ingest_record(record_factory("r2"), None)
    assert said == [f"the results database {db} is busy (another xmcbench process); waiting …"]
    assert {r["run_id"] for r in Store(db).runs()} == {"r1", "r2"}


def test_waiting_for_duckdbs_own_file_lock_is_said_on_stderr(tmp_path, record_factory, capfd):
    db = tmp_path / "results.duckdb"
    with Store.open(db):
        pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(db)!r}); print('open', flush=True); time.sleep(1); c.close()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        Store(db, timeout_s=30).ingest_record(record_factory("r1"), None)  # the default notify: stderr
    finally:
        holder.wait(timeout=30)
    err = capfd.readouterr().err
    assert err.count("is busy (another xmcbench process); waiting") == 1 and str(db) in err
    assert [r["run_id"] for r in Store(db).runs()] == ["r1"]
