"""User-facing errors.

An ``XmcbenchError`` carries a message meant for the person at the terminal: what is wrong
and how to fix it. The CLI prints it as one red line and exits with status 1 instead of
showing a traceback; library callers can catch it like any other exception.
"""

from __future__ import annotations


class XmcbenchError(Exception):
    """An error whose message is shown to the user as is (no traceback)."""


class UsageError(XmcbenchError):
    """The command line itself is wrong (a required argument missing, two that do not go together):
    the CLI exits with status 2, as for click's own usage errors, not 1."""


class DataFormatError(XmcbenchError, ValueError):
    """A data file is malformed. The message names the file, the line and the problem."""

    def __init__(self, path, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class DownloadError(XmcbenchError):
    """A download failed; nothing half-written was left behind."""
