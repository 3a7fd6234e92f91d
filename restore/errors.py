"""Errors a user can act on. Each message is one sentence naming the file and the problem.

An error about an option names it the way its reader gives it: `option("keep_input")` is `keep_input`
in the Python API and `--keep-input` on the command line, which says so with `command_line_words()`.
"""

from __future__ import annotations

from contextlib import contextmanager

_words = "python"  # "cli" while the command line runs


class RestoreError(Exception):
    """Base class; the CLI prints the message without a traceback."""
    exit_code = 1


class UsageError(RestoreError):
    """The command was asked for something impossible (bad option, output equal to input...)."""
    exit_code = 2


class InputError(RestoreError):
    """An input file cannot be restored (missing, unreadable, empty, too short, not finite...)."""
    exit_code = 1


class DiskFullError(InputError):
    """An output does not fit on its disk; a folder run stops at the first one (the rest would not fit either)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command line runs and handled as Ctrl-C is: the file being restored is
    dropped, its temporary files removed, finished outputs kept."""


_UNSET = object()


def option(name: str, value=_UNSET) -> str:
    """An option as an error names it: `name` / `name=value` in Python, `--name` / `--name value` on the
    command line (a switch given as True is the flag alone)."""
    if _words == "cli":
        flag = "--" + name.replace("_", "-")
        return flag if value is _UNSET or value is True else f"{flag} {value}"
    return name if value is _UNSET else f"{name}={value!r}"


@contextmanager
def command_line_words():
    """Errors raised inside name options as the command line's flags."""
    global _words
    before, _words = _words, "cli"
    try:
        yield
    finally:
        _words = before
