"""Input sources shared by every format: ``discover`` expands files, directories and globs; ``streams`` opens
them (plain, .gz, .bz2, multi-frame .zst, with magic-byte checks) and reads line-aligned blocks."""
from __future__ import annotations

from .discover import expand_inputs, refuse_inputs_in
from .streams import COMPRESSED_SUFFIXES, compression_of, iter_blocks, open_input

__all__ = ["expand_inputs", "refuse_inputs_in", "open_input", "iter_blocks", "compression_of", "COMPRESSED_SUFFIXES"]
