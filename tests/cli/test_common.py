"""The CLI's printed paths reach the terminal whole, however narrow it is."""

from typer.testing import CliRunner

from xmcbench import paths
from xmcbench.cli import app


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
