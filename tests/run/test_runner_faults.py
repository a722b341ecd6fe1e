"""Runs that must not be lost, doubled, or leave anything behind (issue #9, runner side)."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import file_lock
from xmcbench.methods.tfidf import TfidfMethod
from xmcbench.run import load_record, run_recipe
from xmcbench.run.check import load_recipe
from xmcbench.run.runner import find_run
from xmcbench.store import Store

RECIPE = """
name: t-{tag}
description: "{description}"
dataset: {{name: synth-faults, synthetic: {{labels: 60, train: 200, test: 40, seed: 1}}}}
supervision: {{mode: zero_shot}}
method: {{name: tfidf}}
evaluation: {{k: [1, 3], top_k: 5, bootstrap: 0, groups: false}}
hardware: {{devices: {devices}}}
"""


def make(tmp_path, tag="a", description="", devices="cpu", extra=""):
    path = tmp_path / f"{tag}.yaml"
    path.write_text(RECIPE.format(tag=tag, description=description, devices=devices) + extra)
    return load_recipe(path)


def only_run_dir(runs):
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    return run_dir


def test_the_run_is_indexed_while_it_runs(tmp_path, monkeypatch):
    db, runs = tmp_path / "r.duckdb", tmp_path / "runs"
    seen = {}

    def fit_and_look(self, task, ctx):
        with Store.open(db) as store:
            seen["status"] = [r["status"] for r in store.runs()]
        raise RuntimeError("looked; stop here")

    monkeypatch.setattr(TfidfMethod, "fit", fit_and_look)
    with pytest.raises(RuntimeError, match="stop here"):
        run_recipe(make(tmp_path), db=db, runs_dir=runs, progress=False)
    assert seen["status"] == ["running"]  # indexed before training, not only at the end


def test_a_second_attempt_of_a_locked_run_is_refused(tmp_path, monkeypatch):
    runs = tmp_path / "runs"

    def interrupt(self, texts, k, ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(TfidfMethod, "predict", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    run_dir = only_run_dir(runs)
    # another process holds the run folder's lock: a resume must not go ahead beside it
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from xmcbench.fsutil import file_lock
            with file_lock({str(run_dir / ".lock")!r}):
                print("locked", flush=True)
                time.sleep(30)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(XmcbenchError, match="in use by another xmcbench process"):
            run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name, progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert load_record(run_dir)["status"] == "interrupted"


def test_killed_attempt_keeps_its_time_through_the_heartbeat(tmp_path):
    """SIGKILL mid-training: the next attempt adds the heartbeat's training time."""
    recipe_path = tmp_path / "k.yaml"
    recipe_path.write_text(RECIPE.format(tag="k", description="", devices="cpu"))
    runs = tmp_path / "runs"
    script = textwrap.dedent(f"""
        import time
        from xmcbench.methods.tfidf import TfidfMethod
        from xmcbench.run import load_recipe, run_recipe
        def slow_fit(self, task, ctx):
            print("training", flush=True)
            time.sleep(60)
        TfidfMethod.fit = slow_fit
        run_recipe(load_recipe({str(recipe_path)!r}), runs_dir={str(runs)!r}, db={str(tmp_path / "r.duckdb")!r},
                   progress=False)
    """)
    env = {**os.environ, "XMCBENCH_HEARTBEAT_S": "0.2", "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "training"
    time.sleep(1.5)
    child.kill()
    child.wait()
    run_dir = only_run_dir(runs)
    killed = load_record(run_dir)
    assert killed["status"] == "interrupted"
    assert killed["heartbeat"]["phase"] == "train" and killed["heartbeat"]["phase_elapsed_s"] >= 0.8
    assert "train" not in killed["compute"]["wall_time_s"]  # lost without the heartbeat

    result = run_recipe(None, runs_dir=runs, db=tmp_path / "r.duckdb", resume=run_dir.name, progress=False)
    assert result.record["status"] == "finished"
    assert result.record["compute"]["wall_time_s"]["train"] >= killed["heartbeat"]["phase_elapsed_s"]


def test_stale_temp_files_of_dead_processes_are_cleaned(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setattr(TfidfMethod, "predict", lambda self, texts, k, ctx: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    run_dir = only_run_dir(runs)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = run_dir / f".record.json.{dead.pid}.abcd1234.tmp"
    live = run_dir / f".predictions.npz.{os.getpid()}.abcd1234.tmp"
    stale.write_text("half")
    live.write_text("being written")
    monkeypatch.undo()
    run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name, progress=False)
    assert not stale.exists() and live.exists()


def test_secrets_in_free_text_fields_are_masked_everywhere(tmp_path):
    token = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV"
    db, runs = tmp_path / "r.duckdb", tmp_path / "runs"
    result = run_recipe(
        make(tmp_path, description=f"uses {token}"),
        db=db,
        runs_dir=runs,
        progress=False,
        command=f"xmcbench run x --set description={token}",
    )
    for path in result.run_dir.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".yaml", ".jsonl"):
            assert token not in path.read_text(), path
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        for (table,) in con.execute("select table_name from information_schema.tables").fetchall():
            assert token not in str(con.execute(f'select * from "{table}"').fetchall()), table


def test_a_database_that_cannot_be_written_keeps_the_finished_run(tmp_path):
    db = tmp_path / "not-a-db.duckdb"
    db.write_bytes(b"this is not a duckdb file" * 100)
    result = run_recipe(make(tmp_path), db=db, runs_dir=tmp_path / "runs", progress=False)
    assert result.record["status"] == "finished" and result.scores["P@1"] >= 0
    assert "xmcbench ingest" in result.index_error
    assert load_record(result.run_dir)["status"] == "finished"


@pytest.mark.parametrize(
    "setup, match",
    [
        (lambda tmp: {"db": tmp / "dbdir"}, "is a folder"),
        (lambda tmp: {"runs_dir": tmp / "file" / "runs"}, "cannot create the runs folder"),
    ],
)
def test_checks_before_the_run_folder_exists(tmp_path, setup, match):
    (tmp_path / "dbdir").mkdir()
    (tmp_path / "file").write_text("")
    kwargs = {"db": tmp_path / "r.duckdb", "runs_dir": tmp_path / "runs", **setup(tmp_path)}
    with pytest.raises(XmcbenchError, match=match):
        run_recipe(make(tmp_path), progress=False, **kwargs)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_cuda_without_a_gpu_is_refused_before_anything_is_written(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(XmcbenchError, match="no CUDA GPU"):
        run_recipe(make(tmp_path, devices="cuda"), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert not (tmp_path / "r.duckdb").exists()


@pytest.mark.parametrize("run_id", ["", "   ", "../x", "a/../../b", ".hidden"])
def test_resume_names_that_are_not_runs(tmp_path, run_id):
    (tmp_path / "runs").mkdir()
    with pytest.raises(XmcbenchError):
        find_run(tmp_path / "runs", run_id)


@pytest.mark.parametrize("damage", ["missing", "garbage", "not-a-recipe"])
def test_resume_with_a_damaged_recorded_recipe(tmp_path, monkeypatch, damage):
    runs = tmp_path / "runs"
    monkeypatch.setattr(TfidfMethod, "predict", lambda self, texts, k, ctx: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    run_dir = only_run_dir(runs)
    recipe_file = run_dir / "recipe.yaml"
    if damage == "missing":
        recipe_file.unlink()
    elif damage == "garbage":
        recipe_file.write_bytes(b"\xff\xfe\x00{{{")
    else:
        recipe_file.write_text("name: x\nmethod: {name: no-such-method}\n")
    with pytest.raises(XmcbenchError, match="cannot be resumed"):
        run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name, progress=False)
    assert json.loads((run_dir / "record.json").read_text())["status"] == "interrupted"


def test_run_lock_is_released_after_the_attempt(tmp_path):
    result = run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    with file_lock(result.run_dir / ".lock", timeout=0):
        pass


def test_the_smoke_suite_finds_its_recipes():
    from xmcbench.run.smoke import smoke_recipes

    names = {p.stem for p in smoke_recipes()}
    assert {"tfidf", "zero_shot", "dexml", "unidec", "prime"} <= names
