"""Errors that the CLI turns into one line on stderr and a non-zero exit code.

An error whose advice names an option may carry ``cli_message``, the same advice in the command line's
spelling (``--overwrite``) while ``str()`` uses the Python keyword (``overwrite=True``); the CLI prints
``cli_message`` where there is one."""
from __future__ import annotations

__all__ = ["USAGE_EXIT", "TfpipeError", "InputError", "MissingInputError", "OutputExistsError", "OutputInUseError", "OutputError",
           "IntegrityError", "OverlapError", "ServiceError"]

USAGE_EXIT = 64  # the command line cannot be parsed (sysexits' EX_USAGE); bad input is 2, see docs/architecture.md


class TfpipeError(Exception):
    """Base class: a user-facing failure with a message that stands on its own."""

    exit_code = 1


class InputError(TfpipeError):
    """Bad input data, located by file and line (or byte offset)."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 offset: int | None = None, reason: str | None = None):
        self.path = path
        self.line = line
        self.offset = offset
        self.reason = reason
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            elif offset is not None:
                where += f" at byte {offset}"
            where += ": "
        super().__init__(where + message)


class MissingInputError(InputError):
    """The input a command reads is not there: no such file, directory, object or pattern match, or no
    ``index.json`` where a shard set should be. Every command gives it the same exit code as bad input (2)."""


class OutputExistsError(TfpipeError):
    """Output location is not empty and overwriting was not asked for.

    Messages are written with the command line's spelling (``pass --overwrite``), which ``cli_message`` keeps
    (the CLI prints it); ``str()`` — what a Python caller sees — says ``overwrite=True`` instead."""

    exit_code = 3

    def __init__(self, message: str):
        self.cli_message = message
        super().__init__(message.replace("--overwrite", "overwrite=True"))

    def __reduce__(self):  # (raised in a worker process: both spellings survive the trip)
        return type(self), (self.cli_message,)


class OverlapError(OutputExistsError):
    """An output overlaps what the run reads (an input, a source set, the group it is a part of): refused
    before anything is touched."""


class OutputInUseError(TfpipeError):
    """Another run holds the output location (its claim names the process, host and start time)."""

    exit_code = 6


class OutputError(TfpipeError):
    """The output could not be written (read-only file system, disk full, name too long, ...); the message
    names the path and the operating system's reason, and nothing was left under a final name."""

    exit_code = 1


class IntegrityError(TfpipeError):
    """A written shard set does not match its manifest (verify)."""

    exit_code = 4


class ServiceError(TfpipeError):
    """A tf.data service server cannot start or serve: its port is taken, or the dispatcher it needs does not
    answer within the timeout (``tfpipe service dispatcher|worker|auto``)."""

    exit_code = 7
