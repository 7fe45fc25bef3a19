"""The ``tfpipe`` argument parser and the CLI's one vocabulary (see docs/architecture.md, "CLI vocabulary").

* ``TfpipeParser``: no abbreviated long options (``--work 2`` is refused, not taken as ``--workers``); a usage
  error prints the command's usage, one ``error:`` line and, for a misspelled option or subcommand, one
  ``hint:`` line naming the closest valid one, and exits ``USAGE_EXIT`` (64, distinct from bad input, 2).
  Subparsers are ``TfpipeParser`` too (argparse makes them of the parent's class).
* ``add_set_argument``, ``add_json_option``, ``add_json_out_option``, ``add_endpoint_option``: the positional
  shard set (``SET``), ``--json`` (JSON on stdout), ``--json-out PATH`` (a JSON file) and ``--endpoint-url``,
  spelled and explained the same way in every command.
* ``add_output_file_option`` / ``output_file``: an option naming a file the command writes (``--json-out``,
  ``--markdown``, ``--png``), checked before any work (``converters.util.outfile.check_output``).
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys

from ..util.errors import USAGE_EXIT, OutputError
from ..util.outfile import check_output

__all__ = ["TfpipeParser", "add_set_argument", "add_json_option", "add_json_out_option",
           "add_output_file_option", "output_file",
           "add_endpoint_option", "add_verbose", "closest_option", "plain", "SPELLED", "USAGE_EXIT"]


class TfpipeParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with abbreviations off, usage errors exiting ``USAGE_EXIT`` with a hint."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        ns, extras = super().parse_known_args(args, namespace)
        if extras and not self._subparser_actions():  # a leaf command: its own usage and hint, not the top's
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras

    def error(self, message: str):
        unknown = self._unknown_options()
        if unknown and "unrecognized arguments" not in message:  # a misspelled option is the likelier cause
            message = f"unrecognized arguments: {' '.join(unknown)}"
        hint = self.hint(message)
        self.print_usage(sys.stderr)
        self.exit(USAGE_EXIT, f"{self.prog}: error: {message}\n" + (f"{self.prog}: hint: {hint}\n" if hint else ""))

    def hint(self, message: str) -> str | None:
        """'did you mean --field-size?' for an unknown option or subcommand close to a valid one."""
        m = re.search(r"unrecognized arguments: (.*)", message)
        if m:
            for word in m.group(1).split():
                if word.startswith("--"):
                    close = closest_option(self, word.split("=", 1)[0])
                    if close:
                        return f"did you mean {close}? ({self.prog} --help lists the options)"
            return None
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in m.group(2).split(",")]
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
            if close:
                return f"did you mean {close[0]!r}?"
        return None

    def _unknown_options(self) -> list[str]:
        """The ``--options`` of this parser's arguments that it does not know (before any ``--``)."""
        if self._subparser_actions() or any(a.nargs == argparse.REMAINDER for a in self._actions):
            return []  # a command's own arguments follow (processing run|launch ... convert ...)
        words = getattr(self, "_argv", [])
        words = words[:words.index("--")] if "--" in words else words
        return [w for w in words if w.startswith("--") and w.split("=", 1)[0] not in self._option_string_actions]

    def _subparser_actions(self):
        return [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]


# spellings the vocabulary does not use (docs/architecture.md, "CLI vocabulary") -> the ones it does, in order
SPELLED = {"--repeat": ("--repeats",), "--rounds": ("--repeats",), "--cpus": ("--cores",),
           "--cpu": ("--cores", "--pin-core"), "--threads": ("--workers",), "--num-shards": ("--ranks",),
           "--shard-index": ("--rank",), "--cache-dir": ("--stream-cache-dir",),
           "--cache-limit": ("--stream-cache-limit",)}


def closest_option(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The visible long option of ``parser`` that ``word`` means: its spelling in the vocabulary
    (:data:`SPELLED`) when ``parser`` has it, else the closest by difflib, else None."""
    visible = [s for a in parser._actions if a.help is not argparse.SUPPRESS
               for s in a.option_strings if s.startswith("--")]
    known = next((s for s in SPELLED.get(word, ()) if s in visible), None)
    if known:
        return known
    close = difflib.get_close_matches(word, visible, n=1, cutoff=0.6)
    return close[0] if close else None



def add_set_argument(p: argparse.ArgumentParser, dest: str = "path", *, nargs: str | None = None,
                     help: str = "shard set: a directory (or its index.json) or an s3:// prefix") -> None:
    """The shard-set positional argument, shown as ``SET`` in every command."""
    kwargs = {"nargs": nargs, "default": None} if nargs else {}
    p.add_argument(dest, metavar="SET", help=help, **kwargs)


def add_json_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` as JSON on stdout (instead of the text report)."""
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout")


def output_file(s: str) -> str:
    """argparse ``type=`` of a file a command writes (``converters.util.outfile``): a path that cannot take a
    file (missing or unwritable directory, a directory) is refused before any work starts."""
    try:
        return check_output(s)
    except OutputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_output_file_option(p: argparse.ArgumentParser, flag: str, help: str, metavar: str = "PATH") -> None:
    """An option naming a file the command writes (written with ``converters.util.outfile.write_output``)."""
    p.add_argument(flag, default=None, metavar=metavar, type=output_file, help=help)


def add_json_out_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--json-out PATH``: also write ``what`` as JSON to a file."""
    add_output_file_option(p, "--json-out", f"also write {what} as JSON to PATH")


def add_endpoint_option(p: argparse.ArgumentParser) -> None:
    """``--endpoint-url URL``: the S3 endpoint (``converters.storage.s3.s3_endpoint``'s rule)."""
    p.add_argument("--endpoint-url", default=None, metavar="URL",
                   help="S3-compatible endpoint (default: $AWS_ENDPOINT_URL_S3, else $AWS_ENDPOINT_URL, else AWS)")


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """``-v``/``--verbose`` on every leaf command too, so it works after the subcommand as well as before
    (counted into ``sub_verbose``; ``main`` adds both)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        if "-v" not in parser._option_string_actions:
            parser.add_argument("-v", "--verbose", action="count", default=0, dest="sub_verbose",
                                help="more logging (-vv for debug)")
        return
    seen = set()
    for action in subs:
        for child in action.choices.values():
            if id(child) not in seen:
                seen.add(id(child))
                add_verbose(child)


def plain(doc: str) -> str:
    """A module docstring as a help page shows it: no reStructuredText ``literal`` markup (single backticks
    become quotes)."""
    return doc.replace("``", "").replace("`", "'")
