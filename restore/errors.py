"""Errors a user can act on. Each message is one sentence naming the file and the problem."""


class RestoreError(Exception):
    """Base class; the CLI prints the message without a traceback."""
    exit_code = 1


class UsageError(RestoreError):
    """The command was asked for something impossible (bad option, output equal to input...)."""
    exit_code = 2


class InputError(RestoreError):
    """An input file cannot be restored (missing, unreadable, empty, too short, not finite...)."""
    exit_code = 1
