"""What every converter shares about its output: shard size, compression, shard-name prefix, the policy
for bad input and the record layout (``tfrecord.layout``: one Example per row, or columnar blocks of
``block_rows`` rows). Validated once, here; the format options embed one ``ShardOutputOptions``."""
from __future__ import annotations

from dataclasses import dataclass

from ..tfrecord.layout import COLUMNAR, DEFAULT_BLOCK_ROWS, EXAMPLE
from ..util.checks import set_int
from ..util.units import DEFAULT_SHARD_BYTES, parse_size
from .layoutopts import LayoutOptions
from .naming import ShardName

__all__ = ["ShardOutputOptions", "ON_ERROR", "COMPRESSIONS", "normalize_compression", "check_on_error"]

ON_ERROR = ("raise", "skip")
COMPRESSIONS = ("none", "gzip")


def normalize_compression(value: str | None) -> str | None:
    """``None``/``"none"`` -> None, ``"gzip"`` -> ``"gzip"``; anything else is a ValueError naming it."""
    if value is None or value == "none":
        return None
    if value == "gzip":
        return "gzip"
    raise ValueError(f"compression must be 'none' or 'gzip' (or None), got {value!r}")


def check_on_error(value: str) -> None:
    """The bad-input policy: ``"raise"`` (stop at the first bad record) or ``"skip"`` (count and report it)."""
    if value not in ON_ERROR:
        raise ValueError(f"on_error must be 'raise' or 'skip', got {value!r}")


@dataclass(frozen=True)
class ShardOutputOptions:
    """Shard size (bytes, or a size string such as ``"256MiB"``; a shard is closed before a record would cross
    it), compression (None or ``"gzip"``), the shard-name prefix, what a bad input record does (``"raise"`` or
    ``"skip"``) and the record ``layout`` (``"example"`` or ``"columnar"``; ``block_rows``, rows per columnar
    block, defaults to ``DEFAULT_BLOCK_ROWS`` there and is refused for the example layout)."""

    shard_size: int = DEFAULT_SHARD_BYTES
    compression: str | None = None
    prefix: str = "train"
    on_error: str = "raise"
    layout: str = EXAMPLE
    block_rows: int | None = None

    def __post_init__(self):
        if isinstance(self.shard_size, str):  # "256MiB", "1GiB", as on the command line
            try:
                object.__setattr__(self, "shard_size", parse_size(self.shard_size))
            except ValueError:
                raise ValueError(f"shard_size must be a positive number of bytes or a size such as '256MiB' or "
                                 f"'1GiB', got {self.shard_size!r}") from None
        set_int(self, "shard_size", minimum=1, must="a positive number of bytes")
        object.__setattr__(self, "compression", normalize_compression(self.compression))
        ShardName(self.prefix)  # validates the prefix
        check_on_error(self.on_error)
        if self.layout == COLUMNAR and self.block_rows is None:
            object.__setattr__(self, "block_rows", DEFAULT_BLOCK_ROWS)
        checked = LayoutOptions(self.layout, DEFAULT_BLOCK_ROWS if self.block_rows is None else self.block_rows)
        if self.layout == COLUMNAR:
            object.__setattr__(self, "block_rows", checked.block_rows)
        elif self.block_rows is not None:
            raise ValueError(f"block_rows applies to the columnar layout, got {self.block_rows!r} with layout "
                             f"{self.layout!r}")

    @property
    def columnar(self) -> bool:
        return self.layout == COLUMNAR

    @property
    def layout_options(self) -> LayoutOptions:
        """The layout asked for as a ``LayoutOptions`` (``record_layout(stored)`` builds the ``RecordLayout``)."""
        return LayoutOptions(self.layout, self.block_rows or DEFAULT_BLOCK_ROWS)

    @property
    def names(self) -> ShardName:
        """The shard-name template: ``{prefix}-00003-of-00128.tfrecord[.gz]``."""
        return ShardName(self.prefix, ".tfrecord.gz" if self.compression else ".tfrecord")

    def to_json(self) -> dict:
        """The manifest's options (the layout's keys only for a columnar set: example manifests are unchanged)."""
        own = {"layout": self.layout, "block_rows": self.block_rows} if self.columnar else {}
        return {"shard_size": self.shard_size, "compression": self.compression, "prefix": self.prefix,
                "on_error": self.on_error, **own}
