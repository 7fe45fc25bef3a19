"""Input sources shared by every format: ``discover`` expands files, directories, globs and URLs (``s3://``,
``gs://``, ...: objects, or every object under a prefix); ``streams`` opens them (plain, .gz, .bz2, multi-frame
.zst, with magic-byte checks; objects through ``storage.objects``) and reads line-aligned blocks or byte
ranges of whole lines (``read_range``)."""
from __future__ import annotations

from ..storage.objects import is_url
from .discover import expand_inputs, refuse_inputs_in
from .streams import (
    COMPRESSED_SUFFIXES,
    compression_of,
    input_size,
    iter_blocks,
    line_start,
    open_input,
    open_raw,
    read_lines,
    read_range,
)

__all__ = ["expand_inputs", "refuse_inputs_in", "open_input", "open_raw", "input_size", "iter_blocks",
           "compression_of", "COMPRESSED_SUFFIXES", "is_url", "read_range", "read_lines",
           "line_start"]
