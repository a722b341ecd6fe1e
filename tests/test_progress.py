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
