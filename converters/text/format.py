"""The text format (jsonl / parquet / txt documents -> packed token windows), as the registry
(``converters.registry``) knows it: everything an engine, the CLI's shared code or ``sharding`` needs to know
about it, in one place. The heavy modules (tokenizers, the job) are named as ``"module:attr"`` and loaded on
first use."""
from __future__ import annotations

from ..registry import Format
from .readers import INPUT_SUFFIXES

__all__ = ["FORMAT", "TextFormat", "REASONS"]

# why a document is rejected (--on-error raise names it; skip counts it), in documentation order
REASONS = ("missing_text", "text_not_string", "invalid_json", "not_an_object", "truncated_line", "invalid_utf8",
           "lone_surrogate", "unreadable_file", "truncated_file")


class TextFormat(Format):
    name = "text"
    summary = "jsonl/jsonl.zst/parquet/txt documents -> tokenized, packed windows of token ids"
    options = "converters.text.options:TextOptions"
    convert = "converters.text.convert:run"
    job = "converters.text.job:TextJob"
    cli = "converters.cli.text"
    suffixes = INPUT_SUFFIXES
    extras = ("s3", "text")
    layouts = ("example", "columnar")
    types_before_data = True  # ids stored by the vocabulary's size
    sums = ("documents", "tokens", "tokens_dropped", "padding_tokens", "windows")
    nested_sums = ("subsets",)
    reasons = REASONS
    routine = ("empty_text", "subset_filtered")

    def shared_files(self, options) -> list[tuple[str, str]]:
        return [] if options.tokenizer == "byte" else [("--tokenizer", options.tokenizer)]


FORMAT = TextFormat()
