"""``PrepOptions``: what write-time preparation a conversion asks for (shuffle, balance, split by label)."""
from __future__ import annotations

from dataclasses import dataclass

from .balance import BalanceOptions
from .shuffle import ShuffleOptions

__all__ = ["PrepOptions"]


@dataclass(frozen=True)
class PrepOptions:
    """``shuffle``: a global shuffle before sharding; ``balance``: exact label sampling; ``split_by_label``: one
    shard set per label under ``OUT/label=<v>/`` with a group manifest. Order of the stages: balance, then
    shuffle, then split."""

    shuffle: ShuffleOptions | None = None
    balance: BalanceOptions | None = None
    split_by_label: bool = False

    def __post_init__(self):
        if self.shuffle is not None and not isinstance(self.shuffle, ShuffleOptions):
            raise ValueError(f"shuffle must be a ShuffleOptions or None, got {type(self.shuffle).__name__}")
        if self.balance is not None and not isinstance(self.balance, BalanceOptions):
            raise ValueError(f"balance must be a BalanceOptions or None, got {type(self.balance).__name__}")
        if not isinstance(self.split_by_label, bool):
            raise ValueError(f"split_by_label must be a bool, got {self.split_by_label!r}")

    @property
    def active(self) -> bool:
        return self.shuffle is not None or self.balance is not None or self.split_by_label

    @property
    def needs_labels(self) -> bool:
        return self.balance is not None or self.split_by_label

    def describe(self) -> str:
        """The flags, for messages: ``--shuffle --balance``."""
        return " ".join(f for f, on in (("--shuffle", self.shuffle), ("--balance", self.balance),
                                         ("--split-by-label", self.split_by_label)) if on)

    def to_json(self) -> dict:
        """What the manifest's ``options`` record (only the stages that ran)."""
        out: dict = {}
        if self.shuffle is not None:
            out["shuffle"] = self.shuffle.to_json()
        if self.balance is not None:
            out["balance"] = self.balance.to_json()
        if self.split_by_label:
            out["split_by_label"] = True
        return out
