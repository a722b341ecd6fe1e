"""The record of a run while it runs: saved at every change, timed by phase, kept alive by a heartbeat.

A process killed outright (SIGKILL, the OOM killer) cannot write its last record. So that its
time is not lost, a heartbeat thread rewrites the record every ``XMCBENCH_HEARTBEAT_S`` seconds
(default 30) with the phase under way and how long it has run; the next attempt adds that time
to the phase's wall time. The heartbeat's phase is cleared whenever a phase's time is added
normally, so no second is counted twice.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from xmcbench.fsutil import utc_now
from xmcbench.store.record import write_record

DEFAULT_HEARTBEAT_S = 30.0


def heartbeat_interval() -> float:
    try:
        return max(0.05, float(os.environ.get("XMCBENCH_HEARTBEAT_S", DEFAULT_HEARTBEAT_S)))
    except ValueError:
        return DEFAULT_HEARTBEAT_S


class LiveRecord:
    """``record`` (a dict in the record.json format) bound to ``run_dir``, saved through one lock."""

    def __init__(self, run_dir: Path, record: dict[str, Any], on_save: Callable[[dict[str, Any]], None] | None = None):
        self.run_dir = run_dir
        self.record = record
        self.on_save = on_save  # e.g. index the record in the database
        self._lock = threading.RLock()
        self._phase: tuple[str, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def walls(self) -> dict[str, float]:
        return self.record["compute"].setdefault("wall_time_s", {})

    def save(self, *, index: bool = True) -> None:
        with self._lock:
            self.record["updated_at"] = utc_now()
            write_record(self.run_dir, self.record)
        if index and self.on_save is not None:
            self.on_save(self.record)

    def recover_lost_time(self) -> None:
        """Add the time a killed attempt spent in its last phase (from its heartbeat) to that phase."""
        beat = self.record.get("heartbeat") or {}
        phase, elapsed = beat.get("phase"), beat.get("phase_elapsed_s")
        if isinstance(phase, str) and isinstance(elapsed, (int, float)) and elapsed > 0:
            self.walls[phase] = self.walls.get(phase, 0.0) + float(elapsed)
        self.record["heartbeat"] = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block into ``compute.wall_time_s[name]`` (also when it raises)."""
        start = time.perf_counter()
        with self._lock:
            self._phase = (name, start)
        try:
            yield
        finally:
            with self._lock:
                self.walls[name] = self.walls.get(name, 0.0) + time.perf_counter() - start
                self._phase = None
                self.record["heartbeat"] = {"at": utc_now(), "phase": None, "phase_elapsed_s": 0.0}

    def _beat(self) -> None:
        with self._lock:
            phase = self._phase
            self.record["heartbeat"] = {
                "at": utc_now(),
                "phase": phase[0] if phase else None,
                "phase_elapsed_s": round(time.perf_counter() - phase[1], 3) if phase else 0.0,
            }
            try:
                self.save(index=False)
            except Exception:  # noqa: BLE001 - a missed beat (disk briefly full) must not kill the run
                pass

    def start_heartbeat(self) -> None:
        interval = heartbeat_interval()

        def loop() -> None:
            while not self._stop.wait(interval):
                self._beat()

        self._thread = threading.Thread(target=loop, name="xmcbench-heartbeat", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
