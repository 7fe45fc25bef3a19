"""Pure placement for a SageMaker Processing job: which instance does which part of a conversion.

No I/O here (the entry point in ``.instance`` and the launcher are thin shells around it):

* ``Place``: the hosts of the job in their given order and this instance; the first host finalizes.
* ``split_contiguous``: items (work units, shards) in order, cut into one contiguous run per host, balanced by
  weight (bytes), so that concatenating the hosts' runs in host order gives the items back in order.
* ``channel_of`` / ``distribution_of``: which ProcessingInput a path comes from (longest ``LocalPath`` that
  contains it) and the one S3 distribution of a conversion's inputs (a mix is refused).
* ``sharded_layout``: final shard indices for ShardedByS3Key (host order, then each host's shards in order).
* ``run_id``: the name of a conversion's work area, the same for every instance and for a rerun of the job.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["Place", "FULLY_REPLICATED", "SHARDED", "DISTRIBUTIONS", "split_contiguous", "channel_of",
           "distribution_of", "sharded_layout", "run_id", "MAX_HOSTS"]

FULLY_REPLICATED = "FullyReplicated"
SHARDED = "ShardedByS3Key"
DISTRIBUTIONS = (FULLY_REPLICATED, SHARDED)
MAX_HOSTS = 100  # the Processing API's most instances in a job (ClusterConfig.InstanceCount)


@dataclass(frozen=True)
class Place:
    """The job's hosts in the order SageMaker lists them and the host this instance is."""

    hosts: tuple[str, ...]
    current_host: str

    def __post_init__(self):
        hosts = self.hosts
        if isinstance(hosts, str) or not isinstance(hosts, Sequence):
            raise ValueError(f"hosts must be a list of host names, got {hosts!r}")
        if len(hosts) > MAX_HOSTS:  # checked first: an absurd list costs nothing more
            raise ValueError(f"hosts lists {len(hosts):,} hosts; a Processing job has at most {MAX_HOSTS} instances")
        hosts = tuple(hosts)
        if not hosts:
            raise ValueError("hosts must not be empty")
        for h in hosts:
            if not isinstance(h, str) or not h or "/" in h or len(h) > 255:
                raise ValueError(f"host names must be non-empty strings without '/' (at most 255 characters), "
                                 f"got {h if not isinstance(h, str) or len(h) <= 80 else h[:80] + '...'!r}")
        dup = sorted({h for h in hosts if hosts.count(h) > 1})
        if dup:
            raise ValueError(f"hosts must be unique, {', '.join(dup)} repeated")
        if self.current_host not in hosts:
            raise ValueError(f"current_host {self.current_host!r} is not one of hosts {list(hosts)}")
        object.__setattr__(self, "hosts", hosts)

    @property
    def index(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def finalizer(self) -> str:
        """The host that waits for every part and writes the manifest: the first in ``hosts``."""
        return self.hosts[0]

    @property
    def is_finalizer(self) -> bool:
        return self.current_host == self.finalizer


def split_contiguous(weights: Sequence[int], parts: int) -> list[tuple[int, int]]:
    """Cut items ``0..n-1`` into ``parts`` contiguous ranges ``[start, stop)`` of about equal total weight.

    Item ``i`` goes to the part that holds the middle of its weight span (a zero weight counts as 1, so empty
    files spread too); ranges are in order and cover every item once; a part may be empty when there are fewer
    items than parts. Pure and deterministic: every instance computes the same split.
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts must be a positive integer, got {parts!r}")
    w = []
    for x in weights:
        if isinstance(x, bool) or int(x) != x or x < 0:
            raise ValueError(f"weights must be non-negative integers, got {x!r}")
        w.append(max(int(x), 1))
    total = sum(w)
    owner = []
    before = 0
    for x in w:
        # 2 * parts * midpoint // (2 * total): integer arithmetic, no float rounding differences between hosts
        owner.append(min(parts - 1, (parts * (2 * before + x)) // (2 * total)))
        before += x
    out = []
    start = 0
    for p in range(parts):
        stop = start
        while stop < len(owner) and owner[stop] == p:
            stop += 1
        out.append((start, stop))
        start = stop
    return out


def _contains(local_path: str, path: str) -> bool:
    base = posixpath.normpath(local_path)
    p = posixpath.normpath(path)
    return p == base or p.startswith(base.rstrip("/") + "/")


def channel_of(path: str, channels: Mapping[str, str]) -> str | None:
    """The ``LocalPath`` (a key of ``channels``: LocalPath -> distribution) that holds ``path`` (the longest
    one when they nest), or None when ``path`` comes from no ProcessingInput."""
    best = None
    for local in channels:
        if _contains(local, str(path)) and (best is None or len(local) > len(best)):
            best = local
    return best


def distribution_of(inputs: Sequence[str], channels: Mapping[str, str]) -> str:
    """The S3 distribution of a conversion's inputs: ``ShardedByS3Key`` when they all come from sharded
    inputs, ``FullyReplicated`` when none do (a path outside every ProcessingInput is seen by every
    instance). A mix is refused: one conversion has one way to split its work."""
    kinds = {}
    for path in inputs:
        local = channel_of(path, channels)
        kind = channels[local] if local is not None else FULLY_REPLICATED
        if kind not in DISTRIBUTIONS:
            raise ValueError(f"input {path}: unknown S3DataDistributionType {kind!r} "
                             f"(expected {' or '.join(DISTRIBUTIONS)})")
        kinds.setdefault(kind, path)
    if len(kinds) > 1:
        raise ValueError(f"inputs mix {SHARDED} ({kinds[SHARDED]}) and {FULLY_REPLICATED} "
                         f"({kinds[FULLY_REPLICATED]}): convert them in two jobs, or give them one distribution")
    return next(iter(kinds), FULLY_REPLICATED)


def sharded_layout(counts: Sequence[int]) -> list[tuple[int, int]]:
    """For ShardedByS3Key: ``counts[h]`` shards written by host ``h`` (host order) -> for every final shard
    index, ``(h, local index)``: host order first, each host's shards in its own (input) order."""
    out = []
    for h, n in enumerate(counts):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"shard counts must be non-negative integers, got {n!r} for host #{h}")
        out.extend((h, k) for k in range(n))
    return out


def run_id(convert_argv: Sequence[str], hosts: Sequence[str], distribution: str) -> str:
    """A short name for a conversion's work area: a digest of the conversion command, the hosts and the
    distribution, so every instance of a job, and a rerun of the same job, find the same area (and a
    different command never reuses another's parts)."""
    blob = json.dumps({"argv": list(convert_argv), "hosts": list(hosts), "distribution": distribution},
                      sort_keys=True).encode()
    return "proc-" + hashlib.sha256(blob).hexdigest()[:16]
