"""``tfpipe bench ...``: each benchmark lives in its own module with ``add_parser(bench_subparsers)``."""
from __future__ import annotations

import importlib
import logging

from converters.cli.parser import plain

__all__ = ["register"]

# benchmark modules, in help order; each defines add_parser(sub) and imports heavy things lazily
BENCHMARKS = (
    "bench.convert_libsvm",
    "bench.convert_text",
    "bench.pipeline_cmd",
    "bench.tune_cmd",
    "bench.threads_cmd",
    "bench.overhead_cmd",
    "bench.small_files",
    "bench.stream_cmd",
    "bench.all_cmd",
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
        mod.add_parser(bsub)
    for parser in bsub.choices.values():  # help pages read as text: no docstring markup or issue numbers
        if parser.description:
            parser.description = plain(parser.description)
        for action in parser._actions:
            if isinstance(action.help, str):
                action.help = plain(action.help)
