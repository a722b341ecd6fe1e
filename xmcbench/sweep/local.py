"""The local launcher: a queue of runs over the GPUs given (or CPU slots), one process per run.

A run that needs ``n`` GPUs (``hardware.num_gpus``) starts when ``n`` of the sweep's GPUs are
free and sees only those (``CUDA_VISIBLE_DEVICES``); several processes go through torchrun. A
CPU run takes one of ``jobs`` slots and an even share of the CPU threads. Runs start longest
first, by how long their recipe took before (``order.py``), among those that fit what is free: a
smaller run may start while a larger one waits for GPUs.

Each run is a child process in its own session whose output goes to a log file. Ctrl-C or
SIGTERM to the sweep sends SIGTERM to every running run (each records itself "interrupted")
and waits for them; if the sweep is killed outright, Linux sends each child SIGTERM anyway
(``PR_SET_PDEATHSIG``), so no run is left training unseen.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from xmcbench.errors import XmcbenchError
from xmcbench.redact import redact
from xmcbench.run.provenance import GPUS_ALLOCATED_ENV
from xmcbench.sweep.launch import Launch, log_name, outcome, run_command, thread_budget
from xmcbench.sweep.order import longest_first
from xmcbench.sweep.record import SweepRecord, sweep_folder

POLL_S = 0.5
STOP_GRACE_S = 120.0  # a run writes its record and checkpoint when told to stop


def visible_gpus() -> list[str]:
    """The GPU ids this process may use: CUDA_VISIBLE_DEVICES if set, else every GPU torch sees."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no usable torch CUDA means no GPUs, not a failed sweep
        return []


def parse_gpus(text: str | None) -> list[str] | None:
    """``--gpus 0,1,2,3`` -> ids (None: every visible GPU)."""
    if text is None:
        return None
    ids = [g.strip() for g in text.split(",") if g.strip()]
    if not ids or len(set(ids)) != len(ids):
        raise XmcbenchError(f"--gpus {text!r}: give distinct GPU ids, e.g. --gpus 0,1,2,3")
    return ids


@dataclass
class Running:
    launch: Launch
    process: subprocess.Popen
    gpus: list[str]
    cpu_slots: int
    log: Path
    started: float = field(default_factory=time.monotonic)


def _now_ms() -> str:
    """Start and end of a run as the sweep saw them (ms: two runs on one GPU must visibly not overlap)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


HELD = {signal.SIGINT, signal.SIGTERM}


def _child_setup():
    """The pre-exec hook: the child takes signals again, and gets SIGTERM when the sweep dies.

    The sweep holds Ctrl-C and SIGTERM while it starts a run (so a started process is always
    tracked), and a signal mask survives exec: the child unblocks them first. ``PR_SET_PDEATHSIG``
    (Linux) is looked up here, in the parent: loading a library between fork and exec of a
    threaded process can deadlock. A parent that died before the hook ran is noticed by its pid.
    """
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None
    parent = os.getpid()

    def hook() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
        if prctl is not None:
            prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)

    return hook


@contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait while a run is being started or the running ones stopped and recorded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)


class LocalLauncher:
    """Runs the launches of one sweep on this machine; ``on_change`` redraws the status."""

    def __init__(
        self,
        sweep: SweepRecord,
        *,
        gpus: list[str],
        jobs: int,
        runs_dir: Path,
        db: Path,
        on_change: Callable[[], None] = lambda: None,
    ):
        self.sweep, self.gpus, self.jobs = sweep, gpus, max(1, jobs)
        self.runs_dir, self.db, self.on_change = runs_dir, db, on_change
        self.logs = sweep_folder(sweep.sweep_id) / "logs"

    def uses_gpu(self, launch: Launch) -> bool:
        return bool(self.gpus) and launch.run.device != "cpu"

    def check(self, launches: list[Launch]) -> None:
        """Every launch must fit what was given, checked before any starts."""
        problems = []
        for launch in launches:
            run = launch.run
            if run.device == "cuda" and not self.gpus:
                problems.append(f"{run.key}: hardware.devices is cuda but no GPU is given or visible")
            elif self.uses_gpu(launch) and run.gpus > len(self.gpus):
                problems.append(
                    f"{run.key}: needs {run.gpus} GPUs; the sweep was given {len(self.gpus)} ({','.join(self.gpus)})"
                )
            elif not self.uses_gpu(launch) and run.gpus > self.jobs:
                problems.append(
                    f"{run.key}: runs {run.gpus} processes (hardware.num_gpus) on CPU; give --jobs {run.gpus} or more"
                )
        if problems:
            raise XmcbenchError("the sweep was not started:\n  " + "\n  ".join(problems))

    def run(self, launches: list[Launch], seconds: dict[str, float] | None = None) -> None:
        """Run every launch, longest first by ``seconds`` (recipe path -> expected wall time; a run
        finished here replaces its recipe's); returns when all ended. KeyboardInterrupt: running
        runs are stopped and recorded."""
        self.check(launches)
        seconds = dict(seconds or {})
        self.logs.mkdir(parents=True, exist_ok=True)
        queue = list(launches)
        running: list[Running] = []
        free_gpus = list(self.gpus)
        free_cpu = self.jobs
        try:
            while queue or running:
                for launch in longest_first(queue, seconds):
                    need = launch.run.gpus
                    if self.uses_gpu(launch):
                        if need > len(free_gpus):
                            continue
                        ids, free_gpus, slots = free_gpus[:need], free_gpus[need:], 0
                    else:
                        if need > free_cpu:
                            continue
                        ids, slots = [], need
                        free_cpu -= need
                    with _signals_held():  # a started process is always in `running`, so always stopped
                        queue.remove(launch)
                        running.append(self._start(launch, ids, slots))
                    self._started(running[-1])
                for job in [j for j in running if j.process.poll() is not None]:
                    running.remove(job)
                    free_gpus = [g for g in self.gpus if g in free_gpus or g in job.gpus]
                    free_cpu += job.cpu_slots
                    self._ended(job)
                    if job.process.returncode == 0 and not job.launch.resume:  # a resumed run took only the rest
                        seconds[job.launch.run.recipe_path] = time.monotonic() - job.started
                time.sleep(POLL_S if running else 0)
        except BaseException:
            with _signals_held():  # a second Ctrl-C must not leave runs unstopped or unrecorded
                self._stop(running)
            raise

    def _start(self, launch: Launch, gpus: list[str], cpu_slots: int) -> Running:
        log = self.logs / log_name(launch.run.key)
        env = dict(os.environ)
        env.pop("RANK", None), env.pop("WORLD_SIZE", None), env.pop("LOCAL_RANK", None)  # never inherit a rank
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            env[GPUS_ALLOCATED_ENV] = str(len(gpus))
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run never takes a GPU another run was given
            env.pop(GPUS_ALLOCATED_ENV, None)
            env["OMP_NUM_THREADS"] = str(thread_budget(self.jobs))  # per process: jobs share the cores
        command = run_command(
            launch.run_id,
            resume=launch.resume,
            recipe_path=launch.run.recipe_path,
            overrides=launch.run.overrides,
            runs_dir=self.runs_dir,
            db=self.db,
            nproc=launch.run.gpus,
        )
        with open(log, "ab") as out:
            # the log names the command masked; the child gets the real values to download with
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {redact(' '.join(command))}\n".encode())
            out.flush()
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: stopped as a whole, torchrun's workers too
                preexec_fn=_child_setup(),  # noqa: PLW1509 - unblock signals, one prctl call
            )
        return Running(launch, process, gpus, cpu_slots, log)

    def _started(self, job: Running) -> None:
        self.sweep.entry(job.launch.run.key).update(
            run_id=job.launch.run_id,
            status="running",
            started_at=_now_ms(),
            ended_at=None,
            devices=f"GPU {','.join(job.gpus)}" if job.gpus else "cpu",
            error=None,
            log=str(job.log),
        )
        self.sweep.save()
        self.on_change()

    def _ended(self, job: Running) -> None:
        entry = self.sweep.entry(job.launch.run.key)
        entry.update(
            outcome(self.runs_dir, job.launch.run_id, job.process.returncode, job.log, job.launch.run.recipe.expect),
            ended_at=_now_ms(),
        )
        self.sweep.save()
        self.on_change()

    def _stop(self, running: list[Running]) -> None:
        """SIGTERM to every running run's process group, then wait for each to record its end."""
        for job in running:
            try:
                os.killpg(job.process.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + STOP_GRACE_S
        for job in running:
            try:
                job.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(job.process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                job.process.wait()
            entry = self.sweep.entry(job.launch.run.key)
            entry.update(
                outcome(
                    self.runs_dir, job.launch.run_id, job.process.returncode, job.log, job.launch.run.recipe.expect
                ),
                ended_at=_now_ms(),
            )
            if entry["status"] in ("running", "failed") and job.process.returncode in (-15, -9, 143, 130):
                entry["status"] = "interrupted"
        self.sweep.save()
        self.on_change()
