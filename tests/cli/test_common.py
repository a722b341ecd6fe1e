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


def _app_given_a_path(error: OSError) -> typer.Typer:
    """A command that takes a path (as every real one does) and fails with ``error``; ``-v`` as the root's."""
    from xmcbench.cli import configure_logging

    one = typer.Typer()

    @one.callback()
    def root(verbose: bool = typer.Option(False, "-v")) -> None:
        configure_logging(verbose=verbose)

    @one.command()
    @handle_errors
    def work(
        path: str = typer.Argument(...),
        out: list[str] = typer.Option([], "--out"),
        set_: list[str] = typer.Option([], "--set"),
    ) -> None:
        raise error

    return one


def _invoke(error: OSError, *args: str):
    result = CliRunner().invoke(_app_given_a_path(error), [*args])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    return result


def test_a_missing_path_the_user_gave_is_the_users_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    # given as typed (relative), named by the error in full; and a file inside a folder given to --out
    missing = OSError(errno.ENOENT, "No such file or directory", str(tmp_path / "truth.txt"))
    result = _invoke(missing, "work", "truth.txt")
    assert result.output == f"error: No such file or directory: {tmp_path / 'truth.txt'}\n"
    inside = OSError(errno.ENOTDIR, "Not a directory", str(tmp_path / "site" / "index.html"))
    result = _invoke(inside, "work", "x", "--out", str(tmp_path / "site"))
    assert result.output.startswith("error: Not a directory:") and "unexpected" not in result.output
    # $XMCBENCH_HOME (the user set it) pointing under a file: the error names a path inside the home
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "a-file" / "home"))
    under_a_file = OSError(errno.ENOTDIR, "Not a directory", str(tmp_path / "a-file" / "home" / "datasets" / ".locks"))
    assert _invoke(under_a_file, "work", "x").output == (
        f"error: Not a directory: {tmp_path / 'a-file' / 'home' / 'datasets' / '.locks'}; "
        f"{tmp_path / 'a-file'} is a file where a folder is needed: move it, or give another path\n"
    )


def test_a_missing_file_xmcbench_should_have_made_reads_as_a_bug(tmp_path, monkeypatch):
    """A FileNotFoundError inside the home that no option named is xmcbench's own doing: the line says
    so and how to report it, not as if the user had mistyped a path."""
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    own = tmp_path / "datasets" / "d" / "prepared" / "meta.json"
    result = _invoke(FileNotFoundError(errno.ENOENT, "No such file or directory", str(own)), "work", "d")
    line = result.output.strip()
    assert len(result.output.strip().splitlines()) == 1
    assert line.startswith("error: unexpected FileNotFoundError inside xmcbench (most likely a bug")
    assert f"No such file or directory: {own}" in line and "-v" in line and "report" in line
    # an OSError naming no file and no errno is a library's words (about a model folder a recipe
    # named, say): shown as they are, not called a bug
    assert _invoke(OSError("tokenizer state lost"), "work", "d").output.strip() == "error: tokenizer state lost"
    # nor one naming a file descriptor, or bytes
    assert "unexpected OSError" in _invoke(OSError(errno.EBADF, "Bad file descriptor", 7), "work", "d").output
    as_bytes = OSError(errno.ENOENT, "No such file or directory", str(own).encode())
    assert "unexpected FileNotFoundError" in _invoke(as_bytes, "work", "d").output
    # a path the user gave that merely starts like the named file does not count as the same
    twin = FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "runs-old" / "x"))
    assert "unexpected" in _invoke(twin, "work", str(tmp_path / "runs")).output


def test_a_librarys_own_words_are_shown_as_they_are(tmp_path, monkeypatch):
    """transformers raises a bare OSError (no errno, no file name) for a broken model folder, which a
    --set or the recipe file itself may name: its words are the error line, never called a bug."""
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for named in ("badenc/config.json", tmp_path / "elsewhere" / "config.json"):
        words = OSError(f"It looks like the config file at '{named}' is not a valid JSON file.")
        for args in (("smoke/dexml", "--set", "encoder.name=badenc"), ("recipes/mine.yaml",)):
            line = _invoke(words, "work", *args).output
            assert line == f"error: It looks like the config file at '{named}' is not a valid JSON file.\n"


def test_a_path_given_through_a_symbolic_link_is_the_users(tmp_path, monkeypatch):
    """A library that resolves links names the real folder, not the link the user typed."""
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path / "home"))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "real" / "Y.trn.npz"))
    result = _invoke(missing, "work", "x", "--out", str(tmp_path / "link"))
    assert result.output == f"error: No such file or directory: {tmp_path / 'real' / 'Y.trn.npz'}\n"


def test_the_bugs_traceback_is_there_with_v(tmp_path, monkeypatch):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    error = FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "cache" / "x.npy"))
    quiet = _invoke(error, "work", "d")
    assert "Traceback" not in quiet.output
    verbose = _invoke(error, "-v", "work", "d")
    assert "Traceback (most recent call last)" in verbose.stderr and "unexpected FileNotFoundError" in verbose.stderr


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.EIO, "Input/output error", "/data/x"),
        OSError(errno.EMFILE, "Too many open files", "/data/x"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        TimeoutError("timed out"),
        OSError("IO Error: No space left on device"),  # DuckDB's words, no errno
    ],
)
def test_the_machine_and_the_network_are_never_called_a_bug(tmp_path, monkeypatch, error):
    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    result = _invoke(error, "work", "d")
    assert "unexpected" not in result.output and len(result.output.strip().splitlines()) == 1


def test_an_http_clients_error_is_not_called_a_bug(tmp_path, monkeypatch):
    """huggingface_hub's and requests' errors are OSErrors: a server's answer or a lost network."""
    import requests
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    for error in (requests.ConnectionError("Max retries exceeded"), LocalEntryNotFoundError("not in the cache")):
        result = _invoke(error, "work", "d")
        assert "unexpected" not in result.output and result.output.startswith("error: "), result.output


@pytest.mark.parametrize("text", ["1,,5", "1,3,", ",1", "", "1,x", "0,1", "1;3"])
def test_a_list_of_k_with_a_gap_or_a_bad_item_is_refused(text):
    from xmcbench.cli._common import parse_int_list
    from xmcbench.errors import XmcbenchError

    with pytest.raises(XmcbenchError, match="--k expects comma-separated positive integers like 1,3,5"):
        parse_int_list(text)


def test_a_list_of_k_reads_in_order_with_spaces_allowed():
    from xmcbench.cli._common import parse_int_list

    assert parse_int_list(" 1, 3 ,5") == (1, 3, 5)


@pytest.mark.parametrize("width", [30, 60, 200])
def test_a_table_in_a_narrow_terminal_cuts_no_cell(width, monkeypatch):
    """rich fits a table to the terminal by cutting cells to "…" (the smoke summary's P@1 read "40.…");
    print_rich keeps every unwrappable cell whole and folds a text column's long words instead."""
    import io

    from rich.console import Console
    from rich.table import Table

    import xmcbench.cli._common as common

    screen = io.StringIO()
    monkeypatch.setattr(common, "console", Console(file=screen, width=width, force_terminal=True, color_system=None))
    table = Table(title="smoke")
    table.add_column("recipe", no_wrap=True)
    for name in ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("note")  # wraps; its one long word is folded, never cut
    table.add_row("maclr-zero-shot-encoder", "40.90", "12.42", "37.47", "21.19", "60.87", "x" * 40)
    common.print_rich(table)
    text = screen.getvalue()
    assert "…" not in text
    for cell in ("maclr-zero-shot-encoder", "40.90", "12.42", "37.47", "21.19", "60.87", "nDCG@5", "R@100"):
        assert cell in text, text
    assert text.replace("│", "").replace(" ", "").replace("\n", "").count("x") == 40  # folded, all there


def test_an_error_line_never_shows_a_secret(tmp_path, monkeypatch):
    """An error quoting a URL or a value as given (a run's failure, copied into a sweep's log) is masked."""
    from xmcbench.errors import XmcbenchError

    monkeypatch.setenv("XMCBENCH_HOME", str(tmp_path))
    error = XmcbenchError("cannot download https://alice:pw12345678@mirror.example/x.tar.gz (token hf_secretXXXX)")
    result = CliRunner().invoke(_app_raising(error), [])
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot download https://***@mirror.example/x.tar.gz (token hf_***)")
    assert "pw12345678" not in result.output and "secretXXXX" not in result.output
