"""Progress bars: on stderr, and off everywhere (the model libraries' bars too) when the CLI says so."""

from __future__ import annotations

import io

import pytest
import tqdm.std
from typer.testing import CliRunner

from xmcbench import progress
from xmcbench.cli import app


@pytest.fixture
def restored(monkeypatch):
    """Whatever the CLI switches off in this process is switched back on after the test."""
    cls = tqdm.std.tqdm  # an earlier CLI test in this process may have silenced it already
    monkeypatch.setattr(cls, "__init__", vars(cls).get("_xmcbench_unsilenced", vars(cls)["__init__"]))
    monkeypatch.delattr(cls, "_xmcbench_unsilenced", raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    yield
    progress.set_enabled(True)


def test_a_command_with_stderr_not_a_terminal_silences_an_already_imported_tqdm(restored):
    from tqdm.auto import tqdm  # a library's bar: transformers converts GGUF files under one

    assert not tqdm(range(3), file=io.StringIO()).disable  # tqdm was imported before any switch
    result = CliRunner().invoke(app, ["recipes", "list", "--format", "json"])  # CliRunner: no terminal
    assert result.exit_code == 0, result.output
    sink = io.StringIO()
    for _ in tqdm(range(3), desc="Converting", file=sink):
        pass
    assert sink.getvalue() == ""  # nothing redrawn into a log file
    assert tqdm(range(3), file=io.StringIO(), disable=False).disable is False  # an explicit choice still holds


def test_silencing_twice_wraps_once(restored):
    progress.silence_library_bars()
    once = vars(tqdm.std.tqdm)["__init__"]  # the descriptor: attribute access makes a new function each time
    progress.silence_library_bars()
    assert vars(tqdm.std.tqdm)["__init__"] is once


def test_a_users_own_tqdm_setting_is_kept(restored, monkeypatch):
    from tqdm.auto import tqdm

    monkeypatch.setenv("TQDM_DISABLE", "0")  # the user asked for bars, even in a log file
    progress.silence_library_bars()
    assert not tqdm(range(3), file=io.StringIO()).disable


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_with_no_terminal_a_long_task_logs_a_line_a_minute_and_a_short_one_none(monkeypatch, caplog):
    """A log file gets no bar, so an epoch of many minutes said nothing; now it says how far it is
    every XMCBENCH_PROGRESS_SECONDS (60 by default), and a task shorter than that stays silent."""
    clock = _Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    monkeypatch.setattr(progress, "bars_enabled", lambda enabled=True: False)  # stderr is a log file
    monkeypatch.delenv("XMCBENCH_PROGRESS_SECONDS", raising=False)
    caplog.set_level("INFO", logger="xmcbench.progress")
    with progress.task("epoch 1/3", 400) as advance:
        for _ in range(100):
            clock.now += 0.5  # 50 s for 100 steps: no line yet
            advance()
        assert caplog.messages == []
        for _ in range(100):
            clock.now += 0.5
            advance()
    assert caplog.messages == ["epoch 1/3: 120/400 (30%), ~2m20s left, 1m00s so far"]

    caplog.clear()
    monkeypatch.setenv("XMCBENCH_PROGRESS_SECONDS", "10")
    with progress.task("encode labels", None) as advance:
        clock.now += 11
        advance(256)
        clock.now += 3600
        advance(256)
    assert caplog.messages == ["encode labels: 256, 0m11s so far", "encode labels: 512, 1h00m so far"]

    caplog.clear()
    with progress.task("quiet", 10, enabled=False) as advance:  # progress off (--quiet, a library call)
        clock.now += 100
        advance()
    assert caplog.messages == []


@pytest.mark.parametrize("raw", ["", "abc", "0", "-5"])
def test_a_bad_progress_seconds_setting_falls_back_to_a_minute(monkeypatch, raw):
    monkeypatch.setenv("XMCBENCH_PROGRESS_SECONDS", raw)
    assert progress.line_seconds() == 60.0
