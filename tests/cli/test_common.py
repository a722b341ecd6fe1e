"""The CLI's printed paths reach the terminal whole, however narrow it is; the machine's state
(a full disk, a forbidden path, too little memory) is one error line, never a traceback."""

import errno

import pytest
import typer
from typer.testing import CliRunner

from xmcbench import paths
from xmcbench.cli import app
from xmcbench.cli._common import handle_errors


def test_paths_are_never_broken_by_a_newline(tmp_path, monkeypatch):
    """A path wider than the terminal is left to the terminal to fold, so it copies back whole
    (rich would break it with newlines at its width: 40 here, or the COLUMNS its console started with,
    far under the path's 230+ characters)."""
    home = tmp_path / ("a-long-home-folder-" * 8)
    monkeypatch.setenv("XMCBENCH_HOME", str(home))
    runner = CliRunner()
    env = {"COLUMNS": "40"}
    made = runner.invoke(
        app, ["datasets", "synth", "tiny", "--labels", "20", "--train", "60", "--test", "10", "-q"], env=env
    )
    assert made.exit_code == 0, made.output
    raw, prepared = paths.dataset_raw_dir("tiny"), paths.dataset_prepared_dir("tiny")
    assert len(str(raw)) > 200
    assert f"raw files in {raw}, prepared in {prepared}\n" in made.output
    again = runner.invoke(app, ["datasets", "prepare", "tiny"], env=env)
    assert f"up to date in {prepared}\n" in again.output
    info = runner.invoke(app, ["datasets", "info", "tiny"], env=env)
    assert f"\n{prepared}\n" in info.output


def _app_raising(error: BaseException) -> typer.Typer:
    one = typer.Typer()

    @one.command()
    @handle_errors
    def work() -> None:
        raise error

    return one


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/x.npy"),
            "No space left on device: /data/x.npy; free some space",
        ),
        (
            OSError(errno.EACCES, "Permission denied", "/root/out"),
            "Permission denied: /root/out; check that path's permissions",
        ),
        (OSError(errno.ENAMETOOLONG, "File name too long", "/t/" + "n" * 300), "File name too long: /t/nnn"),
        (MemoryError(), "out of memory: the data (or the sizes asked for) do not fit"),
    ],
)
def test_the_machines_state_is_one_error_line(tmp_path, monkeypatch, error, line):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    result = CliRunner().invoke(_app_raising(error), [])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.startswith(f"error: {line}") and len(result.output.strip().splitlines()) == 1


def test_a_forbidden_path_in_the_home_names_the_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    error = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "datasets"))
    result = CliRunner().invoke(_app_raising(error), [])
    assert f"make $XMCBENCH_HOME ({tmp_path}) writable" in result.output


def test_a_closed_pipe_is_not_reported_as_the_disk(tmp_path):
    result = CliRunner().invoke(_app_raising(BrokenPipeError(errno.EPIPE, "Broken pipe")), [])
    # click's own quiet exit for a reader that went away (`| head`), not our "error:" line
    assert result.output == "" and result.exit_code == 1
