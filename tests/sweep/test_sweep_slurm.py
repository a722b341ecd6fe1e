"""The Slurm launcher: submitit's local executor runs the real job code; a stand-in sbatch shows the script."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from xmcbench import paths
from xmcbench.errors import XmcbenchError
from xmcbench.run.provenance import billed_gpus
from xmcbench.store.record import read_record
from xmcbench.sweep import SlurmOptions, expand, run_sweep
from xmcbench.sweep.launch import run_command
from xmcbench.sweep.slurm import check_available, parse_time

pytest.importorskip("submitit")


@pytest.mark.slow
def test_the_local_executor_runs_each_run_as_a_job(recipes):
    plan = expand([recipes / "tfidf-a.yaml"], seeds="0,1")
    record = run_sweep(plan, launcher="slurm", slurm=SlurmOptions(executor="local", time="10"), wait=True)
    assert [e["status"] for e in record.entries] == ["finished", "finished"]
    assert all(e["job_id"] and e["P@1"] is not None for e in record.entries)
    for e in record.entries:
        run = read_record(paths.runs_dir() / e["run_id"])
        assert run["status"] == "finished" and run["provenance"]["seed"] == e["seed"]
    again = run_sweep(plan, launcher="slurm", slurm=SlurmOptions(executor="local", time="10"), wait=True)
    assert all(e["kept"] for e in again.entries)  # a rerun submits nothing that finished


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch) -> Path:
    """An ``sbatch`` that keeps the script it is given and answers like Slurm (and an ``srun`` to be found)."""
    bin_dir, scripts = tmp_path / "bin", tmp_path / "scripts"
    bin_dir.mkdir()
    scripts.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\ncp "$1" {scripts}/\necho "Submitted batch job 4242"\n')
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")  # never called at submission
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return scripts


def test_a_multi_node_run_asks_slurm_for_nodes_gpus_and_time(fake_sbatch):
    from xmcbench.run.shipped import recipes_dir

    plan = expand(
        [recipes_dir() / "smoke" / "dexml.yaml"], sets=["hardware.num_gpus=8", "hardware.devices=auto"], seeds="0,1"
    )
    options = SlurmOptions(partition="gpu", time="4:00:00", gpus_per_node=4, account="xmc", cpus_per_task=16)
    record = run_sweep(plan, launcher="slurm", slurm=options, wait=False)
    (script,) = [p.read_text() for p in fake_sbatch.iterdir()]
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=240",
        "#SBATCH --account=xmc",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --array=0-1%",  # both seeds in one array job
        "#SBATCH --signal=USR2@120",  # time for the run to record itself before the limit
    ):
        assert line in script, line
    assert [e["job_id"] for e in record.entries] == ["4242_0", "4242_1"]
    assert {e["status"] for e in record.entries} == {"submitted"}
    assert {e["devices"] for e in record.entries} == {"2×4 GPU"}


def test_the_job_folder_holding_the_real_set_values_is_private(fake_sbatch, recipes):
    """The pickled jobs carry --set values unmasked (the job needs them): only their owner reads them."""
    from xmcbench.sweep.record import sweep_folder, sweep_path

    plan = expand([recipes / "tfidf-a.yaml"], sets=["description=hf_secretXXXX"], seeds="0")
    record = run_sweep(plan, launcher="slurm", slurm=SlurmOptions(time="10"), wait=False)
    folder = sweep_folder(record.sweep_id) / "slurm"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert any(b"hf_secretXXXX" in p.read_bytes() for p in folder.rglob("*.pkl"))  # the job's own
    assert "secretXXXX" not in sweep_path(record.sweep_id).read_text()


def test_a_multi_node_command_meets_at_the_first_host():
    command = run_command(
        "run-1",
        resume=False,
        recipe_path="r.yaml",
        overrides=["training.seed=1"],
        runs_dir=Path("/runs"),
        db=Path("/db"),
        nproc=4,
        nnodes=2,
        rdzv_endpoint="node01:29542",
        rdzv_id="run-1-77",
    )
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    joined = " ".join(command)
    assert "--nproc-per-node 4 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint node01:29542 --rdzv-id run-1-77" in joined
    assert joined.endswith("-m xmcbench run r.yaml --run-id run-1 --set training.seed=1 --db /db --runs-dir /runs")
    single = run_command("run-1", resume=True, recipe_path="r.yaml", overrides=[], runs_dir=Path("/r"), db=Path("/d"))
    assert single == [
        sys.executable,
        "-m",
        "xmcbench",
        "run",
        "--resume",
        "run-1",
        "--db",
        "/d",
        "--runs-dir",
        "/r",
    ]


def test_gpu_hours_count_the_gpus_held():
    assert billed_gpus({"device_type": "cuda", "device_count": 1, "gpus_allocated": 8}) == 8
    assert billed_gpus({"device_type": "cuda", "device_count": 4, "gpus_allocated": None}) == 4
    assert billed_gpus({"device_type": "cpu", "device_count": 1, "gpus_allocated": 8}) == 0


def test_no_sbatch_is_one_clear_error_before_anything(monkeypatch, recipes, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    with pytest.raises(XmcbenchError, match="needs Slurm's sbatch and srun on PATH"):
        run_sweep(expand([recipes / "tfidf-a.yaml"]), launcher="slurm", slurm=SlurmOptions())
    assert not (paths.home() / "sweeps").exists()


def test_no_submitit_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(XmcbenchError, match=r"pip install 'xmcbench\[slurm\]'"):
        check_available(SlurmOptions(executor="local"))


def test_runs_that_do_not_split_over_nodes_are_refused(fake_sbatch):
    from xmcbench.run.shipped import recipes_dir

    plan = expand([recipes_dir() / "smoke" / "dexml.yaml"], sets=["hardware.num_gpus=6", "hardware.devices=auto"])
    with pytest.raises(XmcbenchError, match="do not split evenly"):
        run_sweep(plan, launcher="slurm", slurm=SlurmOptions(gpus_per_node=4), wait=False)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("30:30", 31), ("4:00:00", 240), ("1-00:00:00", 1440), ("2-6", 3240), ("1-01:30", 1530)],
)
def test_slurm_times(text, minutes):
    assert parse_time(text) == minutes


@pytest.mark.parametrize("text", ["", "4h", "0", "1:2:3:4"])
def test_bad_slurm_times(text):
    with pytest.raises(XmcbenchError):
        parse_time(text)


def test_at_the_time_limit_the_run_is_stopped_then_requeued_to_resume():
    import subprocess

    from xmcbench.sweep.slurm import JobSpec, RunJob

    spec = JobSpec("k", "run-1", False, "r.yaml", (), "/runs", "/db", 1, 1, 1)
    job = RunJob()
    job._child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    again = job.checkpoint(spec)
    assert job._child.poll() is not None  # stopped before the requeue, not left running
    assert again.args[0].resume is True and again.args[0].run_id == "run-1"
    assert isinstance(again.function, RunJob)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            'echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2\nexit 1',
            "Invalid partition name specified",
        ),
        ('echo "no job id here"', "Could not make sense of sbatch output"),
    ],
)
def test_sbatch_refusing_is_one_line_and_the_runs_say_not_submitted(fake_sbatch, recipes, answer, reason):
    sbatch = fake_sbatch.parent / "bin" / "sbatch"
    sbatch.write_text(f"#!/bin/sh\n{answer}\n")
    plan = expand([recipes / "tfidf-a.yaml", recipes / "tfidf-b.yaml"])
    with pytest.raises(XmcbenchError) as exc:
        run_sweep(plan, launcher="slurm", slurm=SlurmOptions(partition="nope"), wait=False)
    assert "\n" not in str(exc.value) and reason in str(exc.value) and "run the same command again" in str(exc.value)
    from xmcbench.sweep import SweepRecord

    entries = SweepRecord.load(plan.sweep_id).entries
    assert [e["status"] for e in entries] == ["failed", "failed"]  # not "queued" for ever
    assert all(e["error"].startswith("not submitted: ") and reason in e["error"] for e in entries)
