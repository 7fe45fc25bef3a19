"""Exact label balancing: keep exactly ``k`` records of each label, chosen by a seeded keyed hash.

``--balance equal`` keeps, of every label, as many records as the rarest label has; ``--balance 0=0.25,1=1``
keeps ``round(rate * count)`` records of each named label (labels not named are kept whole). Which records:
for each label, the ``k`` whose key ``record_keys(seed, global index, "balance")`` is smallest — an exact
count, not a Bernoulli approximation, the same for any worker count, and another seed gives another sample.

It takes two passes over the records: the first counts the labels and remembers each record's label in a
temporary file (4 bytes a record); then, per label, the k-th smallest key is found by a radix selection
that streams that file (a histogram of the keys' top 16 bits, then the keys of one histogram bin), so memory
stays bounded; the second pass keeps a record iff its key is at most its label's threshold.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from ..util.checks import set_int
from ..util.errors import InputError
from .keys import record_keys
from .labels import bits_label, bits_name, label_bits, label_name, label_order

__all__ = ["BalanceOptions", "LabelCounts", "label_name"]

_BIN_SHIFT = np.uint64(48)         # top 16 bits of a key select its histogram bin
_CHUNK = 1 << 20                   # records per streamed chunk



@dataclass(frozen=True)
class BalanceOptions:
    """``equal`` or per-label ``rates`` ((label, rate) pairs, rate in [0, 1]) and the sampling ``seed``."""

    mode: str
    rates: tuple[tuple[float, float], ...] = ()
    seed: int = 0

    def __post_init__(self):
        if self.mode not in ("equal", "rates"):
            raise ValueError(f"balance mode must be 'equal' or 'rates', got {self.mode!r}")
        set_int(self, "seed", minimum=0, name="balance seed")
        if self.mode == "rates":
            if not self.rates:
                raise ValueError("balance by rates needs at least one LABEL=RATE")
            seen = set()
            for label, rate in self.rates:
                if not (isinstance(rate, (int, float)) and 0.0 <= rate <= 1.0):
                    raise ValueError(f"balance rate for label {label_name(label)} must be in [0, 1], got {rate!r}")
                if label_name(label) in seen:
                    raise ValueError(f"balance names label {label_name(label)} twice")
                seen.add(label_name(label))
        elif self.rates:
            raise ValueError("balance 'equal' takes no rates")

    @classmethod
    def parse(cls, text: str, seed: int) -> "BalanceOptions":
        """``"equal"`` or ``"LABEL=RATE[,LABEL=RATE...]"`` (the CLI form)."""
        text = text.strip()
        if text == "equal":
            return cls("equal", (), seed)
        rates = []
        for part in text.split(","):
            label, sep, rate = part.partition("=")
            try:
                if not sep:
                    raise ValueError
                rates.append((bits_label(int(label_bits([float(label)])[0])), float(rate)))
            except ValueError:
                raise ValueError(f"balance must be 'equal' or LABEL=RATE[,LABEL=RATE...], got {text!r}") from None
        return cls("rates", tuple(rates), seed)

    def targets(self, counts: dict[int, int]) -> dict[int, int]:
        """Records to keep per label, given the label counts of the input (keys: label identities,
        ``labels.label_bits``; never float values, since a NaN label is not equal to itself)."""
        if not counts:
            return {}
        if self.mode == "equal":
            k = min(counts.values())
            return {bits: k for bits in counts}
        by_name = {bits_name(bits): bits for bits in counts}
        missing = [label_name(label) for label, _ in self.rates if label_name(label) not in by_name]
        if missing:
            raise InputError(f"--balance names label(s) {', '.join(missing)}, which the input does not have "
                             f"(labels: {', '.join(sorted(by_name))})", reason="balance_label")
        out = dict(counts)
        for label, rate in self.rates:
            real = by_name[label_name(label)]
            out[real] = round(rate * counts[real])
        return out

    def to_json(self) -> dict:
        return {"mode": self.mode, "seed": self.seed,
                "rates": {label_name(label): rate for label, rate in self.rates} if self.rates else None}


class LabelCounts:
    """First pass: count labels and remember every record's label (in input order) in a temporary file
    (``path``; None: the caller keeps the labels and streams them to ``thresholds``, as the two-pass engines
    do); then ``thresholds()`` finds each label's keep threshold."""

    def __init__(self, options: BalanceOptions, path: str | None = None):
        self.options = options
        self.path = path
        self._file = open(path, "wb") if path is not None else None
        self.records = 0
        self._counts: dict[int, int] = {}

    def add(self, labels: np.ndarray) -> None:
        bits = label_bits(labels)
        if self._file is not None:
            self._file.write(bits.tobytes())
        self.records += bits.shape[0]
        for b, c in zip(*np.unique(bits, return_counts=True)):
            self._counts[int(b)] = self._counts.get(int(b), 0) + int(c)

    @property
    def counts(self) -> dict[int, int]:
        """Records per label identity (``labels.label_bits``), in label order."""
        return {b: self._counts[b] for b in sorted(self._counts, key=label_order)}

    def thresholds(self, labels: Callable[[], Iterable[np.ndarray]] | None = None) -> "Thresholds":
        """Each label's largest kept key (exact counts), by radix selection over the labels in input order:
        the label file, or ``labels()`` (called once per streaming pass: every record's float32 label, in
        chunks, in input order — what an engine that keeps the labels elsewhere passes)."""
        if self._file is not None:
            self._file.close()
        source = labels if labels is not None else self._file_chunks
        targets = self.options.targets(self.counts)
        partial = {b: k for b, k in targets.items() if 0 < k < self._counts[b]}
        limit = {b: (np.uint64(0xFFFFFFFFFFFFFFFF) if k == self._counts[b] else None) for b, k in targets.items()}
        if partial:
            hist = {b: np.zeros(1 << 16, dtype=np.int64) for b in partial}
            for bits, keys in self._stream(source):
                for b in partial:
                    hist[b] += np.bincount((keys[bits == b] >> _BIN_SHIFT).astype(np.int64), minlength=1 << 16)
            where = {}
            for b, k in partial.items():
                cum = np.cumsum(hist[b])
                bin_ = int(np.searchsorted(cum, k, side="left"))
                where[b] = (bin_, k - (int(cum[bin_ - 1]) if bin_ else 0))
            found: dict[int, list] = {b: [] for b in partial}
            for bits, keys in self._stream(source):
                for b, (bin_, _) in where.items():
                    sel = keys[(bits == b) & ((keys >> _BIN_SHIFT) == np.uint64(bin_))]
                    if sel.shape[0]:
                        found[b].append(sel)
            for b, (bin_, need) in where.items():
                keys = np.sort(np.concatenate(found[b]))
                limit[b] = keys[need - 1]
        if self.path is not None:
            os.unlink(self.path)
        return Thresholds(self.options.seed, limit, dict(targets), self.counts)

    def _file_chunks(self) -> Iterator[np.ndarray]:
        with open(self.path, "rb") as f:
            while True:
                bits = np.fromfile(f, dtype=np.uint32, count=_CHUNK)
                if bits.shape[0] == 0:
                    return
                yield bits.view(np.float32)

    def _stream(self, source: Callable[[], Iterable[np.ndarray]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        start = 0
        for labels in source():
            bits = label_bits(labels)
            idx = np.arange(start, start + bits.shape[0], dtype=np.uint64)
            yield bits, record_keys(self.options.seed, idx, "balance")
            start += bits.shape[0]

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()
        if self.path is not None and os.path.exists(self.path):
            os.unlink(self.path)


@dataclass(frozen=True)
class Thresholds:
    """Second pass: which records to keep. ``limit`` maps a label's uint32 identity to its largest kept key
    (None: keep none of that label)."""

    seed: int
    limit: dict
    kept: dict        # label identity -> records kept
    counts: dict      # label identity -> records in the input

    def keep(self, labels: np.ndarray, first_index: int) -> np.ndarray:
        """Keep mask for consecutive records starting at global index ``first_index``."""
        bits = label_bits(labels)
        keys = record_keys(self.seed, np.arange(first_index, first_index + bits.shape[0], dtype=np.uint64),
                           "balance")
        mask = np.zeros(bits.shape[0], dtype=bool)
        for b in np.unique(bits):
            lim = self.limit.get(int(b), np.uint64(0xFFFFFFFFFFFFFFFF))
            if lim is not None:
                sel = bits == b
                mask[sel] = keys[sel] <= lim
        return mask

    def rule(self) -> "Thresholds":
        """Only what ``keep`` needs (the seed and the limits): the small value an engine ships with a task."""
        return Thresholds(self.seed, dict(self.limit), {}, {})

    def report(self) -> dict:
        return {"counts_in": {bits_name(k): v for k, v in self.counts.items()},
                "counts_out": {bits_name(k): self.kept[k] for k in self.counts},
                "sampled_out": {bits_name(k): self.counts[k] - self.kept[k] for k in self.counts
                                if self.counts[k] != self.kept[k]}}
