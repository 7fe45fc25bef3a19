"""``PrepOptions``: what write-time preparation a conversion asks for (shuffle, balance, split by label)."""
from __future__ import annotations

from dataclasses import dataclass

from .balance import BalanceOptions
from .shuffle import WriteShuffleOptions

__all__ = ["PrepOptions", "prep_from_keywords"]


@dataclass(frozen=True)
class PrepOptions:
    """``shuffle``: a global shuffle before sharding; ``balance``: exact label sampling; ``split_by_label``: one
    shard set per label under ``OUT/label=<v>/`` with a group manifest. Order of the stages: balance, then
    shuffle, then split."""

    shuffle: WriteShuffleOptions | None = None
    balance: BalanceOptions | None = None
    split_by_label: bool = False

    def __post_init__(self):
        if self.shuffle is not None and not isinstance(self.shuffle, WriteShuffleOptions):
            raise ValueError(f"shuffle must be a WriteShuffleOptions or None, got {type(self.shuffle).__name__}")
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


def prep_from_keywords(prep: PrepOptions | None = None, *, shuffle=False, seed: int | None = None,
                       shuffle_memory: int | str | None = None, tmp_dir: str | None = None, balance=None,
                       split_by_label: bool = False) -> PrepOptions | None:
    """The ``PrepOptions`` of the Python keyword forms (``convert_libsvm(..., shuffle=True, seed=7)``), the same
    choices as the command line's ``--shuffle --seed --shuffle-memory --tmp-dir --balance --split-by-label``:
    ``shuffle`` True (or a ``WriteShuffleOptions``), ``seed`` (needed by shuffle and balance), ``shuffle_memory`` in
    bytes or as ``"512MiB"``, ``balance`` ``"equal"``, ``"0=0.25,1=1"``, a mapping ``{label: rate}`` or a
    ``BalanceOptions``. ``prep`` (a ready ``PrepOptions``) excludes the keywords. None when nothing is asked."""
    from ..util.units import parse_size
    from .shuffle import DEFAULT_SHUFFLE_MEMORY

    given = [k for k, v in (("shuffle", shuffle), ("seed", seed is not None), ("shuffle_memory", shuffle_memory),
                            ("tmp_dir", tmp_dir), ("balance", balance), ("split_by_label", split_by_label)) if v]
    if prep is not None:
        if not isinstance(prep, PrepOptions):
            raise ValueError(f"prep must be a PrepOptions or None, got {type(prep).__name__}")
        if given:
            raise ValueError(f"pass either prep=PrepOptions(...) or the keywords {', '.join(given)}, not both")
        return prep if prep.active else None
    if not isinstance(shuffle, (bool, WriteShuffleOptions)):
        raise ValueError(f"shuffle must be True/False or a WriteShuffleOptions, got {shuffle!r}")
    needs_seed = shuffle is True or (balance is not None and not isinstance(balance, BalanceOptions))
    if needs_seed and seed is None:
        raise ValueError(f"{'shuffle=True' if shuffle is True else 'balance'} needs seed=S (the same seed gives "
                         "the same bytes)")
    if shuffle is not True and (shuffle_memory is not None or tmp_dir is not None) and balance is None:
        raise ValueError("shuffle_memory/tmp_dir apply to shuffle=True (and balance)")
    if shuffle is True:
        memory = DEFAULT_SHUFFLE_MEMORY if shuffle_memory is None else parse_size(shuffle_memory)
        shuffle = WriteShuffleOptions(seed, memory, None if tmp_dir is None else str(tmp_dir))
    out = PrepOptions(shuffle or None, _balance(balance, seed), split_by_label)
    return out if out.active else None


def _balance(balance, seed: int | None) -> BalanceOptions | None:
    if balance is None or isinstance(balance, BalanceOptions):
        return balance
    if isinstance(balance, str):
        return BalanceOptions.parse(balance, seed)
    if isinstance(balance, dict):
        import numpy as np

        try:
            rates = tuple((float(np.float32(float(k))), float(v)) for k, v in balance.items())
        except (TypeError, ValueError):
            raise ValueError(f"balance rates must map labels to numbers, got {balance!r}") from None
        return BalanceOptions("rates", rates, seed)
    raise ValueError(f"balance must be 'equal', 'LABEL=RATE,...', a dict {{label: rate}} or a BalanceOptions, "
                     f"got {balance!r}")
