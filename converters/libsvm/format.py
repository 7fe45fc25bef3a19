"""The LibSVM format, as the registry (``converters.registry``) knows it: everything an engine, the CLI's
shared code or ``sharding`` needs to know about LibSVM, in one place. Importing this module imports nothing
heavy: the other modules are named as ``"module:attr"`` and loaded on first use."""
from __future__ import annotations

import logging
from typing import Sequence

from ..registry import Format
from .reasons import REASONS

__all__ = ["FORMAT", "LibsvmFormat"]

log = logging.getLogger(__name__)


class LibsvmFormat(Format):
    name = "libsvm"
    summary = "LibSVM text (label id:val ...) -> tf.train.Example records (fixed-width or sparse)"
    options = "converters.libsvm.options:LibsvmOptions"
    convert = "converters.libsvm.convert:run"
    job = "converters.libsvm.job:LibsvmJob"
    cli = "converters.cli.libsvm"
    suffixes = None  # a directory's every file is an input
    extras = ("s3",)
    sums = ("blank_lines",)
    reasons = REASONS
    routine = ("sampled_out",)
    layouts = ("example", "columnar")

    def part(self, files: Sequence[str], out: str, options, *, workers: int | None):
        # an instance whose objects hold no valid line still reports their accounting
        return self.run(list(files), out, options, workers=workers, overwrite=True, allow_empty=True)

    def empty_error(self, inputs):
        from .convert import empty_input

        return empty_input(inputs, what="no instance's input holds a valid line")

    # --index-base auto over every ShardedByS3Key instance's inputs: 0 if any instance saw an index 0, else 1
    def scan_round(self, options) -> str | None:
        return "index-base" if options.index_base == "auto" else None

    def scan(self, options, files: Sequence[str], workers: int | None) -> dict:
        from ..util.system import cpu_count
        from .convert import DEFAULT_BLOCK_BYTES
        from .workers import Pool, resolve_index_base, resolve_parallel

        if not files:
            return {"zero": False}
        workers = workers or cpu_count()
        if workers == 1:
            return {"zero": resolve_index_base(list(files), DEFAULT_BLOCK_BYTES) == 0}
        pool = Pool(workers, options.parse_options(1), options.keys)
        try:
            return {"zero": resolve_parallel(list(files), DEFAULT_BLOCK_BYTES, pool) == 0}
        finally:
            pool.close()

    def agree(self, options, scans: Sequence[dict], hosts: Sequence[str]):
        from dataclasses import replace

        zeros = [h for h, s in zip(hosts, scans) if s.get("zero")]
        log.info("index base auto over %d host(s): %s", len(scans),
                 f"index 0 seen by {', '.join(zeros)} -> zero-based" if zeros else "no index 0 -> one-based")
        return replace(options, index_base=0 if zeros else 1)


FORMAT = LibsvmFormat()
