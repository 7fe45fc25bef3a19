"""LibSVM -> TFRecord, in layers: ``reasons`` (why a line is rejected), ``options``, ``reference`` (the exact
pure-Python parser), ``kernel`` (the compiled parser), ``block`` (the pure block parser every engine calls),
``workers`` (parallel, ordered), ``convert`` (the local converter), ``job`` + ``jobprep`` (the two-pass job the
engines run), ``format`` (what ``converters.registry`` knows of LibSVM) and ``synthetic`` (Criteo-like data)."""
from __future__ import annotations

from ..util.lazy import lazy_exports

__all__ = ["LibsvmOptions", "ParseOptions", "run", "convert_libsvm", "parse_block", "convert_block", "REASONS"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "LibsvmOptions": ".options", "ParseOptions": ".options", "run": ".convert", "convert_libsvm": ".convert",
    "parse_block": ".block", "convert_block": ".block", "REASONS": ".reasons",
}, globals())
