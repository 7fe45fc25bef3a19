"""The ``tfpipe`` console script: ``main(argv)`` builds the parser from each package's ``register``
(entry points in group ``tfpipe.commands``) and turns library errors into one line and an exit code; ``run()``
is the script itself: ``main()``, then the process ends with its code (``leave``)."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from importlib.metadata import entry_points

from ..engines.interrupt import set_exit_lines
from ..util.blasprobe import skip_numba_blas_probe
from ..util.errors import TfpipeError
from ..util.version import __version__
from .leave import leave
from .notices import announce_compiles
from .parser import TfpipeParser, add_verbose
from .quiet import lean_tensorflow_import, quiet_tensorflow_import

__all__ = ["main", "run", "build_parser", "register"]

# the command groups, in help order, by their entry-point names (group ``tfpipe.commands`` in setup.cfg): each
# package registers its own, so this package never names one above it
GROUP_ORDER = ("converters", "sharding", "pipeline", "bench")


def _registrars():
    """Each command group's ``register``, found through the ``tfpipe.commands`` entry points."""
    eps = sorted(entry_points(group="tfpipe.commands"),
                 key=lambda e: (GROUP_ORDER.index(e.name) if e.name in GROUP_ORDER else len(GROUP_ORDER), e.name))
    if not eps:
        raise TfpipeError("no tfpipe command groups found (entry points tfpipe.commands): install tfpipe "
                          "(pip install -e .) so its package metadata is there")
    return [ep.load for ep in eps]


def build_parser() -> argparse.ArgumentParser:
    parser = TfpipeParser(
        prog="tfpipe",
        description="Fast, correct TensorFlow input pipelines: convert raw tabular click logs (Criteo "
                    "TSV/CSV/Parquet -> DeepFM/DLRM training sets, 'convert tabular'), LibSVM and Pile-style text "
                    "into TFRecord shards, plan sharding, build tf.data graphs, and measure GPU idle time.")
    parser.add_argument("--version", action="version", version=f"tfpipe {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for load in _registrars():
        load()(sub)
    add_verbose(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ INFO/WARNING lines (CPU feature notes) are noise in a CLI; TF_CPP_MIN_LOG_LEVEL=0 brings
    # them back. Set before any command imports TensorFlow.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = args.verbose + getattr(args, "sub_verbose", 0)  # -v before and after the subcommand
    lean_tensorflow_import()
    skip_numba_blas_probe()
    if not verbose:
        quiet_tensorflow_import()
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    announce_compiles()
    set_exit_lines(_EXIT_LINES)  # an engine's stuck clean-up, ended by its deadline, says the same
    previous = _terminate_cleanly()
    try:
        return int(args.func(args) or 0)
    except TfpipeError as exc:
        print(f"tfpipe: error: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:
        print(f"tfpipe: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the last resort: one line naming the path and the system's reason
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"tfpipe: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2 if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)) else 1
    except MemoryError:
        print("tfpipe: error: out of memory: an option asks for more than this machine has (e.g. --field-size, "
              "--seq-len, --workers); nothing was written", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(_EXIT_LINES[signal.SIGINT], file=sys.stderr)
        return 130
    except _Terminated:
        print(_EXIT_LINES[signal.SIGTERM], file=sys.stderr)
        return 143
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run() -> None:
    """The ``tfpipe`` console script and ``python3 -m converters.cli``: the command, then the process ends
    with its exit code, without the interpreter's teardown of the modules the command loaded."""
    leave(main())


_EXIT_LINES = {signal.SIGINT: "tfpipe: interrupted",
               signal.SIGTERM: "tfpipe: terminated (temporary files removed, no manifest written)"}


class _Terminated(SystemExit):
    """SIGTERM, raised in the main thread so that every ``with`` block cleans up on the way out. A ``SystemExit``
    (code 143): code that swallows every other exception lets it through, as it does ``KeyboardInterrupt`` (seen:
    Beam's IPython probe during a pipeline's construction kept running a conversion that ``kill`` had stopped)."""

    def __init__(self):
        super().__init__(143)


def _terminate_cleanly():
    """Turn SIGTERM (``kill``, a job scheduler stopping the run) into an exception, as Ctrl-C is, so temporary
    files are removed and the output claim released. Returns the previous handler (None if not installed)."""
    def handler(signum, frame):
        raise _Terminated()

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (main() called from a library thread): leave it
        return None


def _one_line(exc: BaseException) -> str:
    """The error in one line, in the command line's spelling where it has one (``cli_message``)."""
    return " ".join((getattr(exc, "cli_message", None) or str(exc)).splitlines())


# -- converters' own subcommands ------------------------------------------------------------------------

def register(sub) -> None:
    """Add ``convert``, ``inspect``, ``verify`` and ``quickstart``."""
    convert = sub.add_parser("convert", help="convert raw click logs (tabular), LibSVM or text/jsonl data into "
                                             "TFRecord shards")
    csub = convert.add_subparsers(dest="format", metavar="FORMAT")
    csub.required = True
    from .. import registry
    from . import index, processing, quickstart, shardset

    for fmt in registry.formats():  # convert <name> for every format with a command line
        fmt.register_cli(csub, sub)
    shardset.register(sub)
    index.register(sub)
    quickstart.register(sub)
    processing.register(sub)
