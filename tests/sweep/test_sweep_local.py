"""The local launcher: GPU pinning, one run per GPU, failures isolated, interrupt and resume."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from sweep_helpers import cli_env, write_recipe, xmcbench

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.store import Store
from xmcbench.store.record import read_record
from xmcbench.sweep import expand, run_sweep
from xmcbench.sweep.order import folder_timings
from xmcbench.sweep.record import SweepRecord, sweep_path


def _records(record: SweepRecord) -> dict[str, dict]:
    return {e["key"]: read_record(paths.runs_dir() / e["run_id"]) for e in record.entries if e.get("run_id")}


def test_each_run_sees_only_its_gpus_and_no_gpu_runs_two_at_once(recipes):
    # fake GPU ids: the runs go on CPU (no CUDA here) but are queued and pinned as on a GPU node
    plan = expand([recipes / "tfidf-a.yaml"], sets=["hardware.devices=auto"], seeds="0,1,2,3")
    record = run_sweep(plan, gpus=["3", "5"], jobs=1)
    assert [e["status"] for e in record.entries] == ["finished"] * 4
    seen = {key: rec["compute"]["visible_devices"] for key, rec in _records(record).items()}
    assert set(seen.values()) <= {"3", "5"} and len(set(seen.values())) == 2  # one id each, both used
    for gpu in ("3", "5"):
        spans = sorted(
            (datetime.fromisoformat(e["started_at"]), datetime.fromisoformat(e["ended_at"]))
            for e in record.entries
            if e["devices"] == f"GPU {gpu}"
        )
        assert all(end <= nxt_start for (_, end), (nxt_start, _) in zip(spans, spans[1:])), spans
    assert {r["run_key"] for r in _sweep_rows(plan.sweep_id)} == {e["key"] for e in record.entries}


def test_cpu_runs_hide_the_gpus_and_share_the_threads(recipes, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    record = run_sweep(expand([recipes / "tfidf-a.yaml"], seeds="0,1"), gpus=[], jobs=2)
    for rec in _records(record).values():
        assert rec["compute"]["visible_devices"] == ""
        assert rec["compute"]["cpu_threads"] == 2  # OMP_NUM_THREADS 4 shared by 2 runs


def test_a_failed_run_does_not_stop_the_others(recipes, tmp_path):
    broken = write_recipe(tmp_path, "not-downloaded", dataset={"name": "LF-AmazonTitles-131K"})
    plan = expand([broken, recipes / "tfidf-a.yaml"])
    record = run_sweep(plan, gpus=[], jobs=1)
    status = {e["key"]: e for e in record.entries}
    assert status["tfidf-a"]["status"] == "finished"  # after the failed one, in plan order
    failed = status["not-downloaded"]
    assert failed["status"] == "failed" and "LF-AmazonTitles-131K" in failed["error"] and "\n" not in failed["error"]


def test_more_gpus_per_run_than_given_is_refused_before_anything_starts(recipes):
    from xmcbench.run.shipped import recipes_dir

    plan = expand([recipes_dir() / "smoke" / "dexml.yaml"], sets=["hardware.num_gpus=4", "hardware.devices=auto"])
    with pytest.raises(XmcbenchError, match="needs 4 GPUs; the sweep was given 2"):
        run_sweep(plan, gpus=["0", "1"])
    assert not paths.runs_dir().exists() or not any(paths.runs_dir().iterdir())
    assert not paths.default_db_path().exists()
    assert not list((paths.home() / "sweeps").glob("*.json"))  # a refused sweep never becomes "latest"


def test_cuda_runs_without_gpus_are_refused(recipes):
    plan = expand([recipes / "tfidf-a.yaml"], sets=["hardware.devices=cuda"])
    with pytest.raises(XmcbenchError, match="no GPU is given or visible"):
        run_sweep(plan, gpus=[])


def test_a_rerun_skips_finished_runs_and_force_runs_them_again(recipes):
    plan = expand([recipes / "tfidf-a.yaml"], seeds="0,1")
    first = run_sweep(plan, gpus=[])
    ids = [e["run_id"] for e in first.entries]
    again = run_sweep(plan, gpus=[])
    assert [e["run_id"] for e in again.entries] == ids and all(e["kept"] for e in again.entries)
    forced = run_sweep(plan, gpus=[], force=True)
    assert not set(e["run_id"] for e in forced.entries) & set(ids)
    with Store.open(read_only=True) as store:
        assert len(store.runs()) == 4  # every run stays indexed...
        rows = store.sweep_runs(plan.sweep_id)  # ...but the sweep is its runs of now, one per key
        assert sorted(r["run_id"] for r in rows) == sorted(e["run_id"] for e in forced.entries)


def _sweep_rows(sweep_id: str) -> list[dict]:
    with Store.open(read_only=True) as store:
        return store.sweep_runs(sweep_id)


def _wait_for(condition, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _status(sweep_id: str, key: str) -> str | None:
    """A run's status in the sweep's record as the sweep last wrote it (None before it is there)."""
    try:
        data = json.loads(sweep_path(sweep_id).read_text())
    except (OSError, ValueError):
        return None
    return next((e["status"] for e in data["runs"] if e["key"] == key), None)


def _waiting_run(sweep_id: str) -> dict | None:
    """The sweep's entry of a run that has said it waits for the dataset lock the test holds."""
    path = sweep_path(sweep_id)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return None
    for e in data["runs"]:
        if (
            e["status"] == "running"
            and e.get("log")
            and "waiting for another xmcbench process" in Path(e["log"]).read_text()
        ):
            return e
    return None


def _ctrl_c_as_at_a_terminal() -> None:
    """SIGINT back to its default in the sweep, as in a terminal: a test runner started in the
    background of a script inherits SIGINT ignored (POSIX, for jobs without job control), and a
    Python started with it ignored never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_an_interrupted_sweep_resumes_and_records_nothing_twice(recipes, tmp_path, how):
    from xmcbench.data.load import dataset_lock

    # The second run waits for its dataset while this test holds the dataset's lock: it is surely
    # running (its record written, its signal handler set) when the sweep is stopped.
    slow = write_recipe(
        tmp_path, "slow", dataset={"name": "synth-sweep-held", "synthetic": {"labels": 100, "train": 300, "test": 60}}
    )
    args = ["sweep", str(recipes / "tfidf-a.yaml"), str(slow), "--gpus", "none"]
    plan = expand([recipes / "tfidf-a.yaml", slow])
    with dataset_lock("synth-sweep-held", progress=False):
        sweep = subprocess.Popen(
            xmcbench(*args),
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_ctrl_c_as_at_a_terminal,  # noqa: PLW1509 - one signal() call
        )
        try:
            entry = _wait_for(lambda: _waiting_run(plan.sweep_id), "the second run to wait for its dataset")
            # the runs go side by side: on a loaded machine the first may still be running here
            _wait_for(lambda: _status(plan.sweep_id, "tfidf-a") == "finished", "the first run to finish")
            sweep.send_signal(how)
            out = sweep.communicate(timeout=180)[0].decode()
        finally:
            if sweep.poll() is None:
                sweep.kill()
        # the run records its own end (Ctrl-C: told by the sweep; kill -9: by the kernel's parent-death signal)
        record = _wait_for(
            lambda: (r := read_record(paths.runs_dir() / entry["run_id"]))["status"] != "running" and r, "its end"
        )
    assert entry["key"] == "slow" and record["status"] == "interrupted"
    if how == signal.SIGINT:
        assert sweep.returncode == 130, out
        assert SweepRecord.load(plan.sweep_id).entry("slow")["status"] == "interrupted"

    again = subprocess.run(xmcbench(*args), env=cli_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    result = SweepRecord.load(plan.sweep_id)
    assert result.entry("tfidf-a")["kept"] is True  # finished before the interruption: not run again
    resumed = result.entry("slow")
    assert resumed["run_id"] == entry["run_id"] and resumed["status"] == "finished"  # the same run, resumed
    final = read_record(paths.runs_dir() / entry["run_id"])
    assert final["status"] == "finished" and len(final["attempts"]) == 1  # one resume
    with Store.open(read_only=True) as store:
        assert sorted(r["run_id"] for r in store.runs()) == sorted(e["run_id"] for e in result.entries)
        assert len(store.sweep_runs(plan.sweep_id)) == 2
    assert len(list(paths.runs_dir().iterdir())) == 2


def test_a_run_made_by_hand_with_the_same_recipe_code_and_data_is_kept(recipes):
    from xmcbench.run import load_recipe, run_recipe

    by_hand = run_recipe(load_recipe(recipes / "tfidf-a.yaml", ["training.seed=1"]), progress=False)
    record = run_sweep(expand([recipes / "tfidf-a.yaml"], seeds="0,1"), gpus=[])
    kept = record.entry("tfidf-a seed=1")
    assert kept["kept"] is True and kept["run_id"] == by_hand.run_dir.name
    assert kept["P@1"] == by_hand.scores["P@1"]
    assert record.entry("tfidf-a seed=0")["kept"] is False  # seed 0 differs from the run by hand


def test_a_killed_runs_reason_is_its_last_line_that_is_not_information(tmp_path):
    """Run logs hold INFO lines (phases, epochs, progress) now that runs are not --quiet; a run
    killed without a record's error is explained by its last warning or error line, or the exit code."""
    from xmcbench.sweep.launch import outcome

    log = tmp_path / "run.log"
    log.write_text(
        "02:10:48 INFO xmcbench.run.runner: phase train\n"
        "02:10:49 WARNING xmcbench.methods.dual_encoder: training.batch_size 64 is more than the 40 training queries\n"
        "02:11:50 INFO xmcbench.progress: epoch 1/3: 120/400 (30%), ~2m20s left, 1m00s so far\n"
    )
    reason = outcome(tmp_path / "runs", "missing-run", -9, log)["error"]
    assert reason == (
        "02:10:49 WARNING xmcbench.methods.dual_encoder: training.batch_size 64 is more than the 40 training "
        "queries (exit code -9)"
    )
    log.write_text("02:11:50 INFO xmcbench.progress: epoch 1/3: 120/400 (30%)\n")
    assert outcome(tmp_path / "runs", "missing-run", -9, log)["error"] == "exit code -9"


def test_runs_start_longest_first_by_what_their_recipe_took_before_on_this_host(recipes, monkeypatch):
    import socket

    import xmcbench.sweep as sweep_module

    plan = expand([recipes / "tfidf-a.yaml", recipes / "tfidf-b.yaml"])
    a, b = (run.recipe_path for run in plan.runs)

    def start_order(record: SweepRecord) -> list[str]:
        return [e["key"] for e in sorted(record.entries, key=lambda e: e["started_at"])]

    assert start_order(run_sweep(plan, gpus=[], jobs=1)) == ["tfidf-a", "tfidf-b"]  # nothing timed: plan order
    with Store.open(paths.default_db_path(), read_only=True) as store:
        seconds = store.typical_wall_s([a, b, str(recipes / "never-run.yaml")], socket.gethostname())
        assert set(seconds) == {a, b} and all(s >= 0 for s in seconds.values())
        assert store.typical_wall_s([a, b], "another-host") == {}  # another machine's times say nothing here

    seen: list[dict] = []
    from_database = sweep_module._typical_wall_s

    def history(launches, db):
        seen.append(from_database(launches, db))
        return {a: 1.0, b: 100.0}  # b took longer before

    monkeypatch.setattr(sweep_module, "_typical_wall_s", history)
    assert start_order(run_sweep(plan, gpus=[], jobs=1, force=True)) == ["tfidf-b", "tfidf-a"]
    assert set(seen[0]) == {a, b}  # the sweep read both recipes' times from the database


def test_a_timings_file_orders_recipes_this_host_never_ran_and_history_here_wins_over_it(recipes, monkeypatch):
    import socket

    import xmcbench.sweep as sweep_module
    from benchmarks.recipe_timings import main as write_timings

    # recipe paths as a user types them, relative to where the sweep starts (the README's command)
    monkeypatch.chdir(recipes.parent)
    write_recipe(recipes, "tfidf-c")  # in the folder, never run here
    with pytest.raises(SystemExit, match="no finished runs"):
        write_timings(["recipes"])  # nothing measured yet: no file is written
    assert not (recipes / "timings.json").exists()
    plan = expand(["recipes/tfidf-a.yaml", "recipes/tfidf-b.yaml"])
    a, b = (run.recipe_path for run in plan.runs)
    assert a == "recipes/tfidf-a.yaml"
    seconds = {"tfidf-a.yaml": 1000.0, "tfidf-b.yaml": 2000.0, "tfidf-c.yaml": 5.0, "gone.yaml": 9.0}
    (recipes / "timings.json").write_text(json.dumps({"seconds": seconds}))
    record = run_sweep(plan, gpus=[], jobs=1)  # an empty home: only the file times them
    assert [e["key"] for e in sorted(record.entries, key=lambda e: e["started_at"])] == ["tfidf-b", "tfidf-a"]
    launches = [SimpleNamespace(run=run) for run in plan.runs]
    db = paths.default_db_path()
    with Store.open(db, read_only=True) as store:
        here = store.typical_wall_s([a, b], socket.gethostname())
    assert set(here) == {a, b} and sweep_module._typical_wall_s(launches, db) == here  # this host's runs, not the file

    write_timings(["recipes"])  # the file again: this host's times, the unmeasured recipe kept, the gone one dropped
    assert folder_timings([a, b, "recipes/tfidf-c.yaml"]) == {
        **{path: round(s, 1) for path, s in here.items()},
        "recipes/tfidf-c.yaml": 5.0,
    }
    assert set(json.loads((recipes / "timings.json").read_text())["seconds"]) == {
        "tfidf-a.yaml",
        "tfidf-b.yaml",
        "tfidf-c.yaml",
    }


def test_a_run_finished_in_this_sweep_times_its_recipes_other_runs(recipes):
    # recipe-major plan: a0 a1 b0 b1. Once a0 has finished, a is timed and goes behind the untimed b.
    plan = expand([recipes / "tfidf-a.yaml", recipes / "tfidf-b.yaml"], seeds="0,1")
    record = run_sweep(plan, gpus=[], jobs=1)
    started = [e["key"] for e in sorted(record.entries, key=lambda e: e["started_at"])]
    assert started[:2] == ["tfidf-a seed=0", "tfidf-b seed=0"], started
