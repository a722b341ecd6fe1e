"""The Slurm launcher: each run a job submitted with submitit; runs of one shape go in one array job.

A run that asks for ``n`` GPUs (``hardware.num_gpus``) gets ``min(n, gpus_per_node)`` GPUs on
each of ``ceil(n / gpus_per_node)`` nodes, one task per node. Inside the job the same command as
the local launcher runs: ``python -m xmcbench run`` for one process, torchrun on one node, and on
several nodes torchrun with a c10d rendezvous at the allocation's first host. GPU-hours count
the GPUs the job was allocated (``XMCBENCH_GPUS_ALLOCATED``).

The job, its log and the run folder live under ``$XMCBENCH_HOME``, which must be on the
filesystem the nodes share. A job that reaches its time limit or is pre-empted is requeued by
submitit and resumes its run (``xmcbench run --resume``).

``executor="local"`` runs the same jobs through submitit's local executor (real processes,
same code path, no scheduler): that is how this path is tested without a cluster.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmcbench.errors import XmcbenchError
from xmcbench.redact import redact
from xmcbench.run.provenance import GPUS_ALLOCATED_ENV
from xmcbench.sweep.launch import Launch, outcome, run_command
from xmcbench.sweep.record import SweepRecord, sweep_folder

RDZV_PORT_BASE = 29_500
SIGNAL_DELAY_S = 120  # Slurm warns the job this long before its time limit
STOP_BEFORE_REQUEUE_S = 100  # of which the run gets this long to record itself and exit


@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    time: str = "24:00:00"  # per run; Slurm's formats: MM, HH:MM:SS, D-HH:MM:SS
    gpus_per_node: int = 8
    cpus_per_task: int | None = None
    mem_gb: int | None = None
    account: str | None = None
    qos: str | None = None
    executor: str = "slurm"  # "local": submitit's local executor (tests, a laptop)


@dataclass(frozen=True)
class JobSpec:
    """What a job needs to run one run (plain data: it is pickled into the job folder)."""

    key: str
    run_id: str
    resume: bool
    recipe_path: str
    overrides: tuple[str, ...]
    runs_dir: str
    db: str
    nodes: int
    gpus_per_node: int  # GPUs requested per node (0 for a CPU run)
    processes_per_node: int


def parse_time(text: str) -> int:
    """Slurm time -> minutes: ``90`` (minutes), ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+(?::\d+){0,2})", text.strip())
    if not m:
        raise XmcbenchError(f"--time {text!r}: use minutes, HH:MM:SS or D-HH:MM:SS (e.g. 4:00:00)")
    parts = [int(p) for p in m[2].split(":")]
    if m[1] is not None:
        hours, minutes, seconds = (parts + [0, 0])[:3]
        total = int(m[1]) * 1440 + hours * 60 + minutes + math.ceil(seconds / 60)
    elif len(parts) == 1:
        total = parts[0]
    elif len(parts) == 2:
        total = parts[0] + math.ceil(parts[1] / 60)
    else:
        total = parts[0] * 60 + parts[1] + math.ceil(parts[2] / 60)
    if total <= 0:
        raise XmcbenchError(f"--time {text!r} is no time at all")
    return total


def shape(launch: Launch, options: SlurmOptions) -> tuple[int, int, int]:
    """(nodes, GPUs per node, processes per node) for one run."""
    run = launch.run
    if run.device == "cpu":
        return 1, 0, run.gpus
    per_node = min(run.gpus, options.gpus_per_node)
    if run.gpus % per_node:
        raise XmcbenchError(
            f"{run.key}: {run.gpus} GPUs do not split evenly over nodes of {options.gpus_per_node}; "
            f"set hardware.num_gpus to a multiple of --gpus-per-node"
        )
    return run.gpus // per_node, per_node, per_node


def check_available(options: SlurmOptions) -> None:
    """submitit installed, and sbatch on PATH for a real cluster: one clear error before anything starts."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise XmcbenchError(
            "--launcher slurm needs submitit: pip install 'xmcbench[slurm]' (or pip install submitit)"
        ) from None
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if options.executor == "slurm" and missing:
        raise XmcbenchError(
            f"--launcher slurm needs Slurm's {' and '.join(missing)} on PATH: run the sweep from a login node "
            "of the cluster (or use --launcher local on this machine)"
        )
    if options.gpus_per_node < 1:
        raise XmcbenchError("--gpus-per-node must be at least 1 (the GPUs each node of the partition has)")
    if options.executor not in ("slurm", "local"):
        raise XmcbenchError(f"unknown Slurm executor {options.executor!r}; use slurm (or local for tests)")


def executor_for(folder: Path, options: SlurmOptions, nodes: int, gpus_per_node: int, name: str):
    """A submitit executor with the sbatch parameters of one run shape."""
    import submitit

    executor = submitit.AutoExecutor(folder=str(folder), cluster=options.executor)
    params: dict[str, Any] = {
        "name": name,
        "timeout_min": parse_time(options.time),
        "tasks_per_node": 1,  # one launcher per node; torchrun starts the per-GPU processes
    }
    if options.executor == "slurm":
        params.update(
            nodes=nodes,
            gpus_per_node=gpus_per_node or None,  # a CPU run asks for no GPU option at all
            cpus_per_task=options.cpus_per_task,
            mem_gb=options.mem_gb,
            slurm_partition=options.partition,
            slurm_account=options.account,
            slurm_qos=options.qos,
            slurm_signal_delay_s=SIGNAL_DELAY_S,  # time for a run to write its record and checkpoint
        )
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return executor


class RunJob:
    """The function a job runs: the run's command, with the allocation's rendezvous (picklable)."""

    def __call__(self, spec: JobSpec) -> dict[str, Any]:
        env = dict(os.environ)
        endpoint, job_id = None, env.get("SLURM_JOB_ID", "local")
        if spec.nodes > 1:
            import submitit

            job = submitit.JobEnvironment()
            port = RDZV_PORT_BASE + int(re.sub(r"\D", "", job.job_id) or 0) % 1000
            endpoint = f"{job.hostnames[0]}:{port}"
            job_id = job.job_id
        env[GPUS_ALLOCATED_ENV] = str(spec.nodes * spec.gpus_per_node)
        if spec.gpus_per_node == 0:
            env["CUDA_VISIBLE_DEVICES"] = ""
        command = run_command(
            spec.run_id,
            resume=spec.resume,
            recipe_path=spec.recipe_path,
            overrides=spec.overrides,
            runs_dir=Path(spec.runs_dir),
            db=Path(spec.db),
            nproc=spec.processes_per_node,
            nnodes=spec.nodes,
            rdzv_endpoint=endpoint,
            rdzv_id=f"{spec.run_id}-{job_id}",
        )
        print("running:", redact(" ".join(command)), flush=True)  # the job's log file keeps this line
        # its own process group: Slurm's warning signal reaches this process (submitit's handler),
        # and the run is then stopped with SIGTERM so it records itself before the requeue
        self._child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        return {"run_id": spec.run_id, "returncode": self._child.wait()}

    def checkpoint(self, spec: JobSpec):
        """At the time limit or on pre-emption: stop the run (it records "interrupted"), requeue, resume."""
        import submitit

        child = getattr(self, "_child", None)
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGTERM)
                child.wait(timeout=STOP_BEFORE_REQUEUE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        resumed = JobSpec(**{**spec.__dict__, "resume": True})
        return submitit.helpers.DelayedSubmission(RunJob(), resumed)

    def __getstate__(self) -> dict:
        return {}  # the child process is this job's, never pickled into the next one


def submit(sweep: SweepRecord, launches: list[Launch], options: SlurmOptions, *, runs_dir: Path, db: Path) -> list[Any]:
    """Submit every launch (one array job per run shape); the sweep record gets each job id."""
    check_available(options)
    specs = []
    for launch in launches:
        nodes, gpus_per_node, procs = shape(launch, options)
        if options.executor == "local" and nodes > 1:
            raise XmcbenchError(f"{launch.run.key}: the local executor runs on one node; it cannot span {nodes}")
        run = launch.run
        specs.append(
            JobSpec(
                run.key,
                launch.run_id,
                launch.resume,
                run.recipe_path,
                tuple(run.overrides),
                str(runs_dir),
                str(db),
                nodes,
                gpus_per_node,
                procs,
            )
        )
    folder = sweep_folder(sweep.sweep_id) / "slurm"
    # The jobs' pickles hold each run's --set values as given (the job needs them, a password in a
    # URL included), which the sweep's own record and logs mask: the folder is its owner's alone,
    # on a cluster's shared file system too.
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    jobs = []
    by_shape: dict[tuple[int, int], list[JobSpec]] = {}
    for spec in specs:
        by_shape.setdefault((spec.nodes, spec.gpus_per_node), []).append(spec)
    for (nodes, gpus_per_node), group in by_shape.items():
        executor = executor_for(folder, options, nodes, gpus_per_node, name=f"xmcbench-{sweep.sweep_id}")
        try:
            with executor.batch():
                submitted = [executor.submit(RunJob(), spec) for spec in group]
        except Exception as exc:  # noqa: BLE001 - sbatch refused (partition, account, limits) or said something unreadable
            reason = _sbatch_reason(exc)
            for spec in group:
                sweep.entry(spec.key).update(status="failed", job_id=None, error=f"not submitted: {reason}")
            sweep.save()
            raise XmcbenchError(
                f"sbatch did not take the sweep's jobs: {reason}. Fix the Slurm options and run the same command "
                f"again (jobs already submitted are not submitted twice; `squeue --me` shows what Slurm has)"
            ) from None
        for spec, job in zip(group, submitted):
            entry = sweep.entry(spec.key)
            entry.update(
                run_id=spec.run_id,
                status="submitted",
                job_id=str(job.job_id),
                devices=f"{nodes}×{gpus_per_node} GPU" if gpus_per_node else "cpu",
                error=None,
                log=str(job.paths.stdout).replace("%j", str(job.job_id)),
            )
            jobs.append((spec, job))
        sweep.save()  # after each array job: a later sbatch failure must not lose these job ids
    return jobs


def _sbatch_reason(exc: BaseException) -> str:
    """The line of sbatch's answer that says why (submitit's error carries all of stderr)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return ((errors or lines or [type(exc).__name__])[0])[:300]


def wait(
    sweep: SweepRecord, jobs: list, *, runs_dir: Path, expect: dict[str, dict] | None = None, on_change=lambda: None
) -> None:
    """Block until every submitted job ended; the sweep record gets each run's outcome (``expect``: floors by run key)."""
    expect = expect or {}
    import time

    pending = list(jobs)
    while pending:
        for spec, job in list(pending):
            if not job.done():
                continue
            pending.remove((spec, job))
            returncode, job_error = None, None
            try:
                returncode = job.result()["returncode"]
            except Exception as exc:  # noqa: BLE001 - the job itself failed (killed, not started): say so
                lines = str(exc).strip().splitlines()
                job_error = f"the Slurm job failed: {lines[-1][:300]}" if lines else "the Slurm job failed"
            entry = sweep.entry(spec.key)
            entry.update(outcome(runs_dir, spec.run_id, returncode, None, expect.get(spec.key)))
            if entry["status"] in ("running", "submitted"):  # the job is over: the run cannot still be going
                entry["status"] = "failed"
                entry["error"] = job_error or "the job ended without the run recording its end (killed by Slurm?)"
            elif job_error and entry["status"] != "finished":
                entry["error"] = job_error
            sweep.save()
            on_change()
        time.sleep(0.5 if pending else 0)


ACTIVE_STATES = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED", "REQUEUE_HOLD")


def still_queued(sweep_id: str, entry: dict[str, Any], runs_dir: Path) -> bool:
    """A submitted run whose job may still start or be running (no record of its end yet)."""
    if entry.get("status") != "submitted" or not entry.get("job_id"):
        return False
    if (runs_dir / (entry.get("run_id") or "-") / "record.json").exists():
        return False  # it started: its record decides
    state = job_state(sweep_id, entry["job_id"])
    return state is None or state.split()[0] in ACTIVE_STATES  # unknown: never submit twice (--force does)


def job_state(sweep_id: str, job_id: str | None) -> str | None:
    """The scheduler's state of a job (sacct through submitit), None where it cannot be asked."""
    if not job_id or shutil.which("sacct") is None:
        return None
    try:
        import submitit

        return submitit.SlurmJob(folder=str(sweep_folder(sweep_id) / "slurm"), job_id=job_id).state
    except Exception:  # noqa: BLE001 - status is informative; a scheduler hiccup must not fail it
        return None
