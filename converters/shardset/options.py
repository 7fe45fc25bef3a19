"""What every converter shares about its output: shard size, compression, shard-name prefix and the policy
for bad input. Validated once, here; the format options embed one ``ShardOutputOptions``."""
from __future__ import annotations

from dataclasses import dataclass

from ..util.checks import set_int
from ..util.units import DEFAULT_SHARD_BYTES, parse_size
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
    it), compression (None or ``"gzip"``), the shard-name prefix and what a bad input record does (``"raise"`` or ``"skip"``)."""

    shard_size: int = DEFAULT_SHARD_BYTES
    compression: str | None = None
    prefix: str = "train"
    on_error: str = "raise"

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

    @property
    def names(self) -> ShardName:
        """The shard-name template: ``{prefix}-00003-of-00128.tfrecord[.gz]``."""
        return ShardName(self.prefix, ".tfrecord.gz" if self.compression else ".tfrecord")

    def to_json(self) -> dict:
        return {"shard_size": self.shard_size, "compression": self.compression, "prefix": self.prefix,
                "on_error": self.on_error}
