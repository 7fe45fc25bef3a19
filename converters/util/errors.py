"""Errors that the CLI turns into one line on stderr and a non-zero exit code."""
from __future__ import annotations

__all__ = ["TfpipeError", "InputError", "OutputExistsError", "OutputInUseError", "OutputError", "IntegrityError",
           "OverlapError"]


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


class OutputExistsError(TfpipeError):
    """Output location is not empty and overwriting was not asked for."""

    exit_code = 3


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
