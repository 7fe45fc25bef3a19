"""Pile/jsonl text -> tokenized, packed TFRecord windows, in layers: ``readers`` (streaming jsonl / .zst / .gz /
parquet / txt readers), ``tokenizers`` (byte-level and Hugging Face), ``packing`` (pure window packing),
``options``, ``convert`` (the local converter), ``job`` + ``windows`` (the two-pass job the engines run),
``format`` (what ``converters.registry`` knows of text) and ``synthetic`` (Pile-like documents)."""
from __future__ import annotations

from ..util.lazy import lazy_exports

__all__ = ["TextOptions", "run", "convert_text", "load_tokenizer", "train_bpe", "PackSpec", "Packer"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "TextOptions": ".options", "run": ".convert", "convert_text": ".convert", "load_tokenizer": ".tokenizers",
    "train_bpe": ".tokenizers", "PackSpec": ".packing", "Packer": ".packing",
}, globals())
