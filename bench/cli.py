"""``tfpipe bench ...``: each benchmark is one module of ``bench/commands/`` (``bench all``: ``bench/suite/``) with
``add_parser(bench_subparsers) -> parser`` and ``run(args) -> exit code``."""
from __future__ import annotations

import importlib
import logging

from converters.cli.parser import plain

__all__ = ["register"]

# benchmark modules, in help order; each imports heavy things lazily
BENCHMARKS = (
    "bench.commands.convert_libsvm",
    "bench.commands.convert_text",
    "bench.commands.tabular",
    "bench.commands.pipeline",
    "bench.commands.tune",
    "bench.commands.threads",
    "bench.commands.overhead",
    "bench.commands.small_files",
    "bench.commands.stream",
    "bench.commands.offload",
    "bench.commands.layout",
    "bench.commands.resume",
    "bench.suite.command",
)


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: converter speed, pipeline variants, GPU idle time, threads")
    bsub = p.add_subparsers(dest="bench", metavar="BENCHMARK")
    bsub.required = True
    for name in BENCHMARKS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            logging.getLogger(__name__).debug("benchmark module %s not present", name)
            continue
        mod.add_parser(bsub).set_defaults(func=mod.run)
    for parser in bsub.choices.values():  # help pages read as text: no docstring markup
        if parser.description:
            parser.description = plain(parser.description)
        for action in parser._actions:
            if isinstance(action.help, str):
                action.help = plain(action.help)
