"""The ``convert FORMAT INPUT... --out URL [options]`` command line a Processing job runs, parsed exactly as
``tfpipe convert`` parses it into the engine's ``ConvertJob`` (the engine never sees an argv). Every format with
a command line (``converters.registry``) is accepted."""
from __future__ import annotations

import argparse
from typing import Sequence

from converters import registry
from converters.engines.processing.job import ConvertJob

__all__ = ["parse_convert", "conversion_usage"]


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # as tfpipe's own parser: no abbreviated options
        super().__init__(*args, **kwargs)

    def error(self, message):  # a usage error becomes one line, not a usage dump and exit 2 from deep inside
        raise ValueError(f"{self.prog}: {message}")


def _command_formats() -> list[str]:
    return [f.name for f in registry.formats() if f.cli is not None]


def conversion_usage() -> str:
    """``convert {libsvm|text|tabular}``: how a conversion command starts, naming every format with a command
    line."""
    return f"convert {{{'|'.join(_command_formats())}}}"


def _parser() -> argparse.ArgumentParser:
    top = _Parser(prog="tfpipe", add_help=False)
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    convert = sub.add_parser("convert", add_help=False)
    csub = convert.add_subparsers(dest="format", parser_class=_Parser)
    unused = argparse.ArgumentParser(add_help=False).add_subparsers()  # a format's other commands: not needed here
    for fmt in registry.formats():
        fmt.register_cli(csub, unused)
    return top


def parse_convert(argv: Sequence[str]) -> ConvertJob:
    """Parse ``convert FORMAT ...`` exactly as ``tfpipe convert`` does (write-time preparation
    included); a bad command is a ValueError with one line (the same options are valid, with the same
    defaults). Like ``tfpipe convert``, a ``--endpoint-url`` in the command becomes this process's S3 endpoint
    (``$AWS_ENDPOINT_URL_S3``) for the run."""
    argv = [str(a) for a in argv]
    known = _command_formats()
    if len(argv) < 2 or argv[0] != "convert" or argv[1] not in known:
        raise ValueError(f"expected a conversion command '{conversion_usage()} INPUT... --out URL ...', "
                         f"got {' '.join(argv[:3]) or 'nothing'!r}")
    args = _parser().parse_args(argv)
    from converters.cli.types import use_endpoint

    use_endpoint(args)  # --endpoint-url: this instance's S3 endpoint for the run
    if getattr(args, "engine", "local") != "local" or getattr(args, "beam_option", None):
        raise ValueError("--engine/--beam-option do not apply here: the Processing instances are the engine "
                         "(drop them; --workers sets the processes per instance)")
    from converters.cli.types import prep_options

    prep = prep_options(args) if hasattr(args, "shuffle_memory") else None  # formats with --shuffle
    options = registry.get(args.format).options_from_args(args)
    registry.get(args.format).check_layout(options)
    if prep is not None and prep.needs_labels and getattr(options, "multilabel", False):
        raise ValueError(f"{prep.describe()} needs one label per record: --multilabel records have lists")
    return ConvertJob(args.format, tuple(argv), tuple(args.inputs), args.out, options, args.workers,
                      args.overwrite, prep)
