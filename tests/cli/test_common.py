"""The CLI's consoles: long lines reach the terminal whole."""

import pytest

from xmcbench.cli._common import console, err_console


@pytest.mark.parametrize("out", [console, err_console], ids=["stdout", "stderr"])
def test_a_line_wider_than_the_terminal_is_never_broken_by_a_newline(out):
    """A path, run id or command wider than the terminal is left to the terminal to fold, so it
    copies back whole (rich would insert newlines at its width)."""
    path = "/tmp/pytest-of-root/pytest-1/popen-gw0/" + "deep/" * 40 + "raw"
    assert len(path) > out.width
    with out.capture() as captured:
        out.print(f"raw files: {path}", highlight=False, markup=False)
    assert captured.get() == f"raw files: {path}\n"
