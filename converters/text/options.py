"""What decides a text conversion's output: ``TextOptions`` (tokenizer, packing, document selection, the shared
``ShardOutputOptions`` and the record layout), recorded in the manifest, and the feature schema it implies."""
from __future__ import annotations

import os
from dataclasses import dataclass, field


from ..util.checks import set_int
from ..shardset.layoutopts import LayoutOptions
from ..shardset.naming import check_plain_name
from ..shardset.options import ShardOutputOptions
from ..tfrecord.schema import FeatureSpec, Schema
from .readers import DocReadOptions, subset_names

__all__ = ["TextOptions", "text_schema", "FEATURE"]

FEATURE = "input_ids"


@dataclass(frozen=True)
class TextOptions:
    """Everything that determines the output bytes (recorded in the manifest), validated up front.

    ``output.on_error`` is also the policy for bad documents (``raise`` or ``skip``)."""

    seq_len: int
    tokenizer: str = "byte"
    eod_token: str | None = None
    text_key: str = "text"
    include_subsets: tuple[str, ...] | None = None
    exclude_subsets: tuple[str, ...] | None = None
    no_cross_doc: bool = False
    pad_last: bool = False
    mask_name: str = "loss_mask"
    txt_mode: str = "block"
    output: ShardOutputOptions = field(default_factory=ShardOutputOptions)

    def __post_init__(self):
        set_int(self, "seq_len", minimum=1)
        for name in ("include_subsets", "exclude_subsets"):
            object.__setattr__(self, name, subset_names(name, getattr(self, name)))
        if not isinstance(self.output, ShardOutputOptions):
            raise ValueError(f"output must be a ShardOutputOptions, got {type(self.output).__name__}")
        self.read_options()  # validates text_key and txt_mode
        try:  # the manifest records the tokenizer's file name: it must read back as one
            check_plain_name(self.to_json()["tokenizer"])
        except ValueError as exc:
            raise ValueError(f"tokenizer {self.tokenizer!r}: its file name cannot be recorded: {exc}") from None

    def read_options(self, batch_chars: int | None = None) -> DocReadOptions:
        extra = {"batch_chars": batch_chars} if batch_chars is not None else {}
        return DocReadOptions(text_key=self.text_key, include_subsets=self.include_subsets,
                           exclude_subsets=self.exclude_subsets, on_error=self.output.on_error,
                           txt_mode=self.txt_mode, **extra)

    def to_json(self) -> dict:
        """The manifest's ``options``: one flat dict (text options and the shard-output options; ``layout`` and
        ``block_rows`` for a columnar set only, so example sets' manifests are as before)."""
        own = {k: getattr(self, k) for k in ("seq_len", "tokenizer", "eod_token", "text_key", "no_cross_doc",
                                              "pad_last", "mask_name", "txt_mode")}
        # the tokenizer's file name, never its path: a manifest names nothing outside its set (its sha256 is in
        # extra.tokenizer), and the output does not depend on where the tokenizer file was
        own["tokenizer"] = os.path.basename(str(self.tokenizer).rstrip("/\\")) or str(self.tokenizer)
        for k in ("include_subsets", "exclude_subsets"):
            v = getattr(self, k)
            own[k] = list(v) if v is not None else None
        return {**own, **self.output.to_json()}

    @property
    def layout(self) -> LayoutOptions:
        """The record layout asked for (``output.layout`` / ``output.block_rows``)."""
        return self.output.layout_options


def text_schema(seq_len: int, mask_name: str | None = None) -> Schema:
    feats = [FeatureSpec(FEATURE, "int64", (seq_len + 1,))]
    if mask_name:
        feats.append(FeatureSpec(mask_name, "int64", (seq_len + 1,)))
    return Schema(tuple(feats))
