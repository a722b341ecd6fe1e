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


def test_a_disk_that_fills_up_stops_the_run_with_one_line_and_the_index_still_learns(tmp_path, monkeypatch):
    import errno

    from xmcbench.run import live_record

    db, runs = tmp_path / "r.duckdb", tmp_path / "runs"

    def full(self, texts, k, ctx):
        raise OSError(errno.ENOSPC, "No space left on device")

    real_write = live_record.write_record

    def write_unless_over(run_dir, record):  # the disk stays full: the last record cannot be written either
        if record["status"] != "running":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(run_dir, record)

    monkeypatch.setattr(TfidfMethod, "predict", full)
    monkeypatch.setattr(live_record, "write_record", write_unless_over)
    with pytest.raises(XmcbenchError, match=r"No space left on device .*xmcbench run --resume \S+") as caught:
        run_recipe(make(tmp_path), db=db, runs_dir=runs, progress=False)
    run_id = only_run_dir(runs).name
    assert run_id in str(caught.value)
    with Store.open(db, read_only=True) as store:
        assert [r["status"] for r in store.runs()] == ["failed"]


class SafetensorError(Exception):  # stands in for safetensors' own, which has no errno
    pass


TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"  # torch.save, disk full


@pytest.mark.parametrize(
    ("error", "free", "said"),
    [
        (SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"), 10**12, True),
        (RuntimeError("write failed: Disk quota exceeded"), 10**12, True),
        (RuntimeError(TORCH_FULL), 1 << 20, True),  # torch names no cause: the free space tells
        (RuntimeError(TORCH_FULL), 10**12, False),  # room left: some other fault, shown as it is
    ],
)
def test_a_full_disk_reported_by_a_model_writer_is_the_same_one_line(tmp_path, monkeypatch, error, free, said):
    from collections import namedtuple

    from xmcbench.run import runner

    def save_fails(self, texts, k, ctx):
        raise error

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(TfidfMethod, "predict", save_fails)
    monkeypatch.setattr(runner.shutil, "disk_usage", lambda path: usage(free + 1, 1, free))
    expected = XmcbenchError if said else type(error)
    with pytest.raises(expected) as caught:
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    if said:
        assert "free disk space" in str(caught.value) and "xmcbench run --resume" in str(caught.value)


def test_xmcbench_own_error_naming_permissions_is_not_taken_for_the_disk(tmp_path, monkeypatch):
    from xmcbench.errors import DownloadError

    error = DownloadError("cannot download x: the file is not shared publicly (permission denied); give --source")
    monkeypatch.setattr(TfidfMethod, "predict", lambda self, texts, k, ctx: (_ for _ in ()).throw(error))
    with pytest.raises(DownloadError, match="not shared publicly"):
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)


def test_an_interrupt_carries_the_run_id_for_the_resume_line(tmp_path, monkeypatch):
    monkeypatch.setattr(TfidfMethod, "predict", lambda self, texts, k, ctx: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt) as caught:
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    assert caught.value.run_id == only_run_dir(tmp_path / "runs").name


def test_a_busy_database_is_said_once_per_run_not_at_every_save(tmp_path, monkeypatch, caplog):
    from xmcbench.store import lock

    real_ensure = Store.ensure_schema

    def busy_then_ensure(self):  # every open of the run's index finds the database busy
        self.notify(lock.busy_message(self.path))
        return real_ensure(self)

    monkeypatch.setattr(Store, "ensure_schema", busy_then_ensure)
    with caplog.at_level("INFO", logger="xmcbench.run"):
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    assert sum("is busy" in r.getMessage() for r in caplog.records) == 1


def test_an_unwritable_database_names_the_ingest_once(tmp_path, monkeypatch):
    def cannot_write(self, record, run_dir):
        raise self._write_failed("No space left on device", run_dir)

    monkeypatch.setattr(Store, "ingest_record", cannot_write)
    result = run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    assert result.record["status"] == "finished"
    assert "No space left on device" in result.index_error
    assert result.index_error.count("xmcbench ingest") == 1


@pytest.mark.parametrize(
    "damage, field",
    [
        (lambda r: r.pop("phases_done"), "phases_done"),
        (lambda r: r.update(phases_done=["train", "dance"]), "phases_done"),
        (lambda r: r.update(compute=5), "compute"),
        (lambda r: r.pop("task"), "task"),
        (lambda r: r.update(status="paused"), "status"),
    ],
)
def test_resume_of_a_damaged_record_names_the_field(tmp_path, monkeypatch, damage, field):
    runs = tmp_path / "runs"
    monkeypatch.setattr(TfidfMethod, "predict", lambda self, texts, k, ctx: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    run_dir = only_run_dir(runs)
    record = json.loads((run_dir / "record.json").read_text())
    damage(record)
    (run_dir / "record.json").write_text(json.dumps(record))
    with pytest.raises(XmcbenchError, match=rf"cannot be resumed \(field {field} "):
        run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name, progress=False)


def test_the_cli_names_the_interrupted_run_to_resume(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(tag="cli", description="", devices="cpu"))
    monkeypatch.setattr(TfidfMethod, "predict", lambda self, texts, k, ctx: (_ for _ in ()).throw(KeyboardInterrupt))
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["run", str(path), "--db", str(tmp_path / "r.duckdb"), "--runs-dir", str(runs), "-q"]
    )
    assert result.exit_code == 130
    assert f"xmcbench run --resume {only_run_dir(runs).name}`" in result.stderr


def test_a_synthetic_dataset_made_with_other_parameters_is_refused_before_the_run_folder(tmp_path):
    runs = tmp_path / "runs"
    run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    other = tmp_path / "other.yaml"
    other.write_text(RECIPE.format(tag="o", description="", devices="cpu").replace("labels: 60", "labels: 70"))
    with pytest.raises(XmcbenchError, match="already exists with other parameters .*n_labels 60 here, 70 asked"):
        run_recipe(load_recipe(other), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    assert len(list(runs.iterdir())) == 1  # no failed run left behind


def test_a_synthetic_dataset_may_not_take_a_built_in_name(tmp_path):
    from xmcbench.run import check_recipe

    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(tag="b", description="", devices="cpu").replace("synth-faults", "EURLex-4K"))
    _, problems = check_recipe(path)
    assert [p.key for p in problems] == ["dataset.name"] and "built-in dataset" in problems[0].message


@pytest.mark.parametrize(("train", "refused"), [(2, True), (3, False)])
def test_a_synthetic_dataset_too_small_to_weigh_is_refused_before_training(tmp_path, train, refused):
    """PSP's inverse propensities need 3 training rows; a run must not train and then fail at evaluation."""
    from xmcbench.run import check_recipe

    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(tag="b", description="", devices="cpu"))
    _, problems = check_recipe(path, overrides=[f"dataset.synthetic.train={train}"])
    assert [p.key for p in problems] == (["dataset.synthetic.train"] if refused else [])


@pytest.mark.parametrize("key", ["encoder.max_length", "encoder.label_max_length"])
def test_an_encoder_length_with_no_room_for_text_leaves_no_run_behind(tmp_path, tiny_encoder_dir, key):
    from xmcbench.run import load_recipe as load

    path = tmp_path / "z.yaml"
    path.write_text(RECIPE.format(tag="z", description="", devices="cpu").replace("{name: tfidf}", "{name: zero_shot}"))
    recipe = load(path, overrides=[f"encoder.name={tiny_encoder_dir}", f"{key}=2"])
    runs = tmp_path / "runs"
    with pytest.raises(XmcbenchError, match=f"{key} 2 leaves no room for text next to the 2 special tokens"):
        run_recipe(recipe, db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    assert not runs.exists() or list(runs.iterdir()) == []


def test_a_bad_cpu_bf16_setting_leaves_no_run_behind(tmp_path, monkeypatch):
    from xmcbench.run import load_recipe as load

    path = tmp_path / "b.yaml"
    path.write_text(RECIPE.format(tag="b", description="", devices="cpu"))
    monkeypatch.setenv("XMCBENCH_CPU_BF16", "yes please")
    runs = tmp_path / "runs"
    with pytest.raises(XmcbenchError, match="XMCBENCH_CPU_BF16='yes please': use on, off or auto"):
        run_recipe(load(path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    assert not runs.exists() or list(runs.iterdir()) == []


def test_a_full_disk_at_the_start_leaves_no_empty_run_folder(tmp_path, monkeypatch):
    import errno

    from xmcbench.run import runner

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner, "atomic_write", full)
    runs = tmp_path / "runs"
    with pytest.raises(XmcbenchError, match="cannot start the run: No space left on device"):
        run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    assert list(runs.iterdir()) == []


def test_phase_lines_of_a_resumed_run_tell_this_attempts_time(tmp_path, monkeypatch, caplog):
    import re

    from xmcbench.store.record import write_record

    runs = tmp_path / "runs"
    with monkeypatch.context() as m:
        m.setattr(TfidfMethod, "predict", lambda self, texts, k, ctx: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    run_dir = only_run_dir(runs)
    record = load_record(run_dir)
    record["compute"]["wall_time_s"].update(prepare=500.0, train=1000.0)  # earlier attempts' time, larger than any here
    write_record(run_dir, record)
    with caplog.at_level("INFO", logger="xmcbench.run"):
        result = run_recipe(None, db=tmp_path / "r.duckdb", runs_dir=runs, resume=run_dir.name, progress=False)
    lines = {m[1]: m for r in caplog.records if (m := re.match(r"phase (\w+): done in (.*?)(;|:|$)", r.getMessage()))}
    for phase, earlier in (("prepare", 500.0), ("train", 1000.0)):
        said = re.fullmatch(r"([\d.]+)s \(([\d.]+)s with earlier attempts\)", lines[phase][2])
        assert said, lines[phase][0]
        this, total = float(said[1]), float(said[2])
        assert this < 100 and total == pytest.approx(earlier + this, abs=0.11)
        assert result.record["compute"]["wall_time_s"][phase] == pytest.approx(total, abs=0.06)
    assert re.fullmatch(r"[\d.]+s", lines["evaluate"][2])  # no earlier attempt reached it: one figure


@pytest.mark.parametrize(
    ("method", "said"),
    [
        (
            "{name: maclr, stage1_steps: 2, k0: 2}",
            r"MACLR's multi-scale clustering \(method.clustering\) runs faiss K-means",
        ),
        ("{name: zero_shot, search_backend: faiss}", "method.search_backend is 'faiss'"),
    ],
)
def test_a_recipe_needing_faiss_where_it_is_missing_leaves_no_run_behind(tmp_path, monkeypatch, method, said):
    """faiss is an extra: without it, a recipe that needs it is refused at the start, not after training."""
    from xmcbench.run import load_recipe as load
    from xmcbench.search import faiss_loader

    def missing():
        raise ImportError("No module named 'faiss'")

    monkeypatch.setattr(faiss_loader, "import_faiss", missing)
    path = tmp_path / "f.yaml"
    path.write_text(RECIPE.format(tag="f", description="", devices="cpu").replace("{name: tfidf}", method))
    runs = tmp_path / "runs"
    with pytest.raises(
        XmcbenchError, match=rf"{said}, and faiss is not installed: pip install 'xmcbench\[faiss-cpu\]'"
    ):
        run_recipe(load(path), db=tmp_path / "r.duckdb", runs_dir=runs, progress=False)
    assert not runs.exists() or list(runs.iterdir()) == []


def test_a_recipe_that_does_not_need_faiss_runs_without_it(tmp_path, monkeypatch):
    from xmcbench.search import faiss_loader

    monkeypatch.setattr(faiss_loader, "import_faiss", lambda: (_ for _ in ()).throw(ImportError("no faiss")))
    result = run_recipe(make(tmp_path), db=tmp_path / "r.duckdb", runs_dir=tmp_path / "runs", progress=False)
    assert result.record["status"] == "finished"


@pytest.mark.parametrize(
    ("mode", "settings", "needs"),
    [
        ("zero_shot", {}, True),
        ("few_shot", {}, True),  # pretrain: true by default
        ("few_shot", {"pretrain": False}, False),  # fine-tuning only: no Stage I
        ("zero_shot", {"stage1_steps": 0}, False),
        ("zero_shot", {"clustering": False}, False),
        ("zero_shot", {"clustering": False, "search_backend": "faiss"}, True),
    ],
)
def test_maclr_needs_faiss_only_where_it_runs_k_means(mode, settings, needs):
    from xmcbench.methods.maclr import MaclrConfig

    assert (MaclrConfig(**settings).needs_faiss(mode) is not None) is needs
