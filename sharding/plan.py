"""Pure planner: a manifest and a topology in, who reads what out. No I/O, no TensorFlow.

Every rank gets a stream (an ordered list of shard files, or a Pipe channel) and optionally a record-level
``shard(n, i)``: keep every n-th record of that stream starting at i. Every rank runs the same number of
steps per epoch, so allreduce never waits for a rank that has run out of data:

* ``remainder="drop"``: ``steps = min over ranks of floor(records / batch_size)``; each rank takes the first
  ``steps * batch_size`` records of its stream (after its shuffle) and leaves the rest for this epoch.
* ``remainder="pad"``: ``steps = max over ranks of ceil(records / batch_size)``; a rank with fewer records
  repeats its own stream from its start until it has ``steps * batch_size`` (``repeat().take(...)``).

The strategies (``hosts`` hosts, ``wph`` workers per host, SageMaker channel settings):

=================================  ===========================  ==========================================
one channel per worker / sharded    strategy                     each rank reads
=================================  ===========================  ==========================================
yes / no (FullyReplicated)          ``channel_per_worker``       its channel ``<name>_<local_rank>``, then
                                                                 ``shard(hosts, rank // wph)``
yes / yes (ShardedByS3Key)          ``channel_per_worker_s3``    its channel's objects on its host; no shard
no / yes                            ``s3_sharded``               its host's objects, ``shard(wph, local_rank)``
no / no                             ``records``                  everything, ``shard(world_size, rank)``
File mode, no channel split         ``files``                    its own files, balanced by records
=================================  ===========================  ==========================================

Impossible plans raise ``PlanError`` with the reason.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from converters.util.checks import as_int, set_int
from converters.util.errors import TfpipeError

from .epochs import epoch_batches
from .topology import MAX_CHANNELS, Topology

__all__ = ["RankPlan", "ShardPlan", "PlanError", "plan", "STRATEGIES", "REMAINDERS", "shard_count",
           "partition_by_records"]

STRATEGIES = ("files", "records", "channel_per_worker", "channel_per_worker_s3", "s3_sharded")
REMAINDERS = ("drop", "pad")


class PlanError(TfpipeError):
    """No plan can give every rank data with equal steps; the message says why and what to change."""

    exit_code = 5


@dataclass(frozen=True)
class RankPlan:
    rank: int
    host: str
    local_rank: int
    channel: str
    files: tuple[str, ...] | None   # ordered shard names this rank's stream holds; None = the whole set
    shard: tuple[int, int] | None   # (n, i): keep every n-th record starting at i; None = keep all
    steps: int

    def __post_init__(self):
        set_int(self, "rank", minimum=0, name="rank and local_rank", must=">= 0")
        set_int(self, "local_rank", minimum=0, name="rank and local_rank", must=">= 0")
        set_int(self, "steps", minimum=0, name=f"rank {self.rank}: steps", must=">= 0")
        if self.files is not None:
            object.__setattr__(self, "files", tuple(self.files))
        if self.shard is not None:
            n, i = self.shard
            if not (n >= 1 and 0 <= i < n):
                raise ValueError(f"rank {self.rank}: shard must be (n, i) with 0 <= i < n, got {self.shard}")
            object.__setattr__(self, "shard", (int(n), int(i)))

    def to_json(self) -> dict:
        return {"rank": self.rank, "host": self.host, "local_rank": self.local_rank, "channel": self.channel,
                "files": list(self.files) if self.files is not None else None,
                "shard": list(self.shard) if self.shard is not None else None, "steps": self.steps}


@dataclass(frozen=True)
class ShardPlan:
    ranks: tuple[RankPlan, ...]
    batch_size: int
    steps_per_epoch: int
    strategy: str
    notes: tuple[str, ...] = ()
    remainder: str = "drop"
    records: int = 0                         # records in the set
    records_per_rank: tuple[int, ...] = ()   # records in each rank's stream after shard(n, i)
    dropped: int = 0                         # records left out per epoch (remainder="drop")
    padded: int = 0                          # records read a second time per epoch (remainder="pad")
    channels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # channel -> the files it carries

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.remainder not in REMAINDERS:
            raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, got {self.remainder!r}")
        set_int(self, "batch_size", minimum=1, must=">= 1")
        object.__setattr__(self, "ranks", tuple(self.ranks))
        for k, r in enumerate(self.ranks):
            if r.rank != k:
                raise ValueError(f"ranks must be listed in order 0..{len(self.ranks) - 1}, found rank {r.rank} at {k}")
            if r.steps != self.steps_per_epoch:
                raise ValueError(f"rank {r.rank} has {r.steps} steps, the plan {self.steps_per_epoch}: "
                                 "every rank must run the same number of steps")
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "records_per_rank", tuple(self.records_per_rank))
        object.__setattr__(self, "channels", dict(self.channels))

    __hash__ = None

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def for_rank(self, rank: int) -> RankPlan:
        if not 0 <= rank < len(self.ranks):
            raise ValueError(f"rank {rank} out of range: the plan has {len(self.ranks)} ranks")
        return self.ranks[rank]

    def to_json(self) -> dict:
        return {
            "ranks": [r.to_json() for r in self.ranks],
            "world_size": self.world_size, "batch_size": self.batch_size,
            "steps_per_epoch": self.steps_per_epoch, "strategy": self.strategy, "remainder": self.remainder,
            "records": self.records, "records_per_rank": list(self.records_per_rank),
            "dropped": self.dropped, "padded": self.padded,
            "channels": {k: list(v) for k, v in self.channels.items()},
            "notes": list(self.notes),
        }

    def to_json_str(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)


# -- pure helpers -------------------------------------------------------------------------------------

def shard_count(total: int, n: int, i: int) -> int:
    """Records that ``shard(n, i)`` keeps out of a stream of ``total``: positions p with p % n == i."""
    return max(0, (total - i + n - 1) // n)


def partition_by_records(counts: Sequence[int], groups: int, *, equal_files: bool = False) -> list[list[int]]:
    """Split file indices into ``groups`` lists balanced by record count (deterministic).

    Largest files first, each to the group with the fewest records (then fewest files, then lowest index);
    with ``equal_files`` every group gets ``len(counts) // groups`` files (snake order). Each group's
    indices come back sorted (manifest order)."""
    order = sorted(range(len(counts)), key=lambda k: (-counts[k], k))
    out: list[list[int]] = [[] for _ in range(groups)]
    if equal_files:
        for pos, k in enumerate(order):
            rnd, off = divmod(pos, groups)
            out[off if rnd % 2 == 0 else groups - 1 - off].append(k)
    else:
        totals = [0] * groups
        for k in order:
            g = min(range(groups), key=lambda j: (totals[j], len(out[j]), j))
            out[g].append(k)
            totals[g] += counts[k]
    return [sorted(g) for g in out]


def _bounds(counts: Sequence[int], k: int) -> tuple[int, int]:
    """Fewest and most records any k of these files can hold (a host's share under ShardedByS3Key,
    whose object-to-host assignment SageMaker does not document)."""
    s = sorted(counts)
    return sum(s[:k]), sum(s[len(s) - k:]) if k else 0


# -- the planner --------------------------------------------------------------------------------------

def plan(manifest: Any, topology: Topology, *, batch_size: int, pipe: bool | None = None,
         s3_sharded: bool | None = None, channel_per_worker: bool | None = None, remainder: str = "drop",
         channel: str = "train", record_sharding: bool = False) -> ShardPlan:
    """Give every rank its files or record slice with equal steps per epoch, or raise ``PlanError``.

    ``manifest`` is a ``converters.Manifest`` (anything with ``.shards`` of ``name``/``records``).
    ``pipe``, ``s3_sharded`` and ``channel_per_worker`` default to what ``topology.channels`` says for
    ``channel`` (channel per worker when channels ``<channel>_0 ... <channel>_<wph-1>`` exist).
    ``record_sharding`` makes plain File mode use ``shard(world_size, rank)`` instead of per-rank files.
    """
    batch_size = as_int(batch_size, "batch_size", minimum=1)
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, got {remainder!r}")
    H, W = topology.num_hosts, topology.workers_per_host
    N = H * W
    per_worker = [f"{channel}_{k}" for k in range(W)]
    if channel_per_worker is None:
        channel_per_worker = W > 1 and all(c in topology.channels for c in per_worker)
    cfg = topology.channel(per_worker[0] if channel_per_worker else channel)
    pipe = cfg.pipe if pipe is None else bool(pipe)
    s3_sharded = cfg.sharded if s3_sharded is None else bool(s3_sharded)

    names = [s.name for s in manifest.shards]
    counts = [int(s.records) for s in manifest.shards]
    F, R = len(names), sum(counts)
    mode = "Pipe" if pipe else "File"
    if F == 0 or R == 0:
        raise PlanError("the shard set holds no records: nothing to plan")
    if R < N:
        raise PlanError(f"more ranks ({N} = {H} host(s) x {W} worker(s)) than records ({R}): some ranks would "
                        "read nothing; use fewer workers or more data")
    notes: list[str] = []

    # -- choose the strategy and each rank's stream (files) and shard -----------------------------------
    # streams[r] = (channel, files tuple or None, shard or None, declared records, lower bound, upper bound)
    streams = []
    channels: dict[str, tuple[str, ...]] = {}
    if channel_per_worker:
        if W > MAX_CHANNELS:
            raise PlanError(f"one channel per worker needs {W} channels, but a SageMaker training job has at most "
                            f"{MAX_CHANNELS}: use fewer workers per host or a single channel")
        if s3_sharded:
            if F % (W * H):
                raise PlanError(
                    f"one channel per worker with ShardedByS3Key needs a file count divisible by workers per host x "
                    f"hosts ({W} x {H} = {W * H}) so that every channel splits evenly across hosts, but the set has "
                    f"{F} files: reshard with `tfpipe reshard --num-shards {_next_multiple(F, W * H)}`")
            strategy = "channel_per_worker_s3"
        else:
            if F < W:
                raise PlanError(f"one channel per worker needs at least one file per channel: {W} channels but "
                                f"only {F} files (reshard with `tfpipe reshard --num-shards {_next_multiple(F, W)}`)")
            strategy = "channel_per_worker"
        groups = partition_by_records(counts, W, equal_files=s3_sharded)
        for k, g in enumerate(groups):
            channels[per_worker[k]] = tuple(names[j] for j in g)
        for r in range(N):
            h, lr = divmod(r, W)
            g = groups[lr]
            if s3_sharded:
                mine = g[h::H]
                declared = sum(counts[j] for j in mine)
                lo, hi = _bounds([counts[j] for j in g], len(g) // H)
                streams.append((per_worker[lr], tuple(names[j] for j in mine), None, declared, lo, hi))
            else:
                total = sum(counts[j] for j in g)
                sh = (H, h) if H > 1 else None
                c = shard_count(total, H, h)
                streams.append((per_worker[lr], tuple(names[j] for j in g), sh, c, c, c))
        notes.append(f"{W} channel(s) {per_worker[0]}..{per_worker[-1]}, one per worker; worker with local rank k "
                     f"reads channel {channel}_k" + (", its objects split across hosts by ShardedByS3Key" if s3_sharded
                                                      else f", every host gets the whole channel and keeps "
                                                           f"shard({H}, host index)"))
    elif s3_sharded:
        if F % H:
            raise PlanError(f"ShardedByS3Key splits objects across hosts and needs a file count divisible by the "
                            f"host count, but the set has {F} files for {H} hosts: reshard with "
                            f"`tfpipe reshard --num-shards {_next_multiple(F, H)}`")
        if pipe and W > 1:
            raise PlanError(_shared_pipe(channel, W))
        strategy = "s3_sharded"
        channels[channel] = tuple(names)
        lo_h, hi_h = _bounds(counts, F // H)
        for r in range(N):
            h, lr = divmod(r, W)
            mine = list(range(h, F, H))
            total = sum(counts[j] for j in mine)
            sh = (W, lr) if W > 1 else None
            streams.append((channel, tuple(names[j] for j in mine), sh, shard_count(total, W, lr),
                            shard_count(lo_h, W, W - 1), -(-hi_h // W)))
    elif pipe or record_sharding:
        if pipe and W > 1:
            raise PlanError(_shared_pipe(channel, W))
        strategy = "records"
        channels[channel] = tuple(names)
        for r in range(N):
            c = shard_count(R, N, r)
            streams.append((channel, None, (N, r) if N > 1 else None, c, c, c))
    else:
        if F < N:
            raise PlanError(f"fewer files ({F}) than readers ({N} = {H} host(s) x {W} worker(s)) with file sharding: "
                            f"reshard with `tfpipe reshard --num-shards {_next_multiple(F, N)}`, or use record "
                            "sharding (--record-sharding: shard(world_size, rank) over all files)")
        strategy = "files"
        channels[channel] = tuple(names)
        groups = partition_by_records(counts, N)
        for r in range(N):
            c = sum(counts[j] for j in groups[r])
            streams.append((channel, tuple(names[j] for j in groups[r]), None, c, c, c))

    # -- equal steps -------------------------------------------------------------------------------------
    lows = [s[4] for s in streams]
    highs = [s[5] for s in streams]
    declared = [s[3] for s in streams]
    worst = min(range(N), key=lambda r: (lows[r], r))
    if lows[worst] == 0:
        raise PlanError(f"rank {worst} could receive no records ({_describe(strategy, H, W)}): use fewer ranks, or "
                        "reshard into files of equal record counts (`tfpipe reshard --num-shards ...`)")
    if remainder == "drop":
        steps = epoch_batches(lows[worst], batch_size, True)
        if steps == 0:
            raise PlanError(f"rank {worst} gets only {lows[worst]} records, fewer than one batch of {batch_size}: "
                            "use a smaller batch size, fewer ranks, or remainder='pad'")
        dropped = sum(d - steps * batch_size for d in declared)
        padded = 0
    else:
        steps = epoch_batches(max(highs), batch_size, False)
        padded = sum(steps * batch_size - d for d in declared)
        dropped = 0
    ranks = tuple(RankPlan(rank=r, host=topology.hosts[r // W], local_rank=r % W, channel=s[0], files=s[1],
                           shard=s[2], steps=steps) for r, s in enumerate(streams))

    notes.insert(0, f"{mode} mode, {_describe(strategy, H, W)}")
    if strategy in ("s3_sharded", "channel_per_worker_s3"):
        notes.append("SageMaker does not document which objects ShardedByS3Key gives each host: the files listed "
                     "per host are the expected (round-robin) split, and steps hold for any split of that many "
                     "files" + ("" if len(set(counts)) == 1 else
                                "; files of unequal record counts widen that margin - reshard to equalize them"))
    if pipe:
        notes.append("Pipe mode: each epoch's FIFO is read once, sequentially; apply shard() before any shuffle")
    if remainder == "drop":
        notes.append(f"remainder=drop: every rank takes {steps} x {batch_size} = {steps * batch_size} records per "
                     f"epoch; {dropped} record(s) left out per epoch")
    else:
        notes.append(f"remainder=pad: every rank reads {steps} x {batch_size} = {steps * batch_size} records per "
                     f"epoch, repeating its own stream as needed; {padded} record(s) read twice per epoch")
    spread = max(declared) - min(declared)
    if spread > batch_size:
        notes.append(f"ranks' record counts differ by {spread} (> one batch): "
                     "reshard to equal files for less "
                     + ("dropped data" if remainder == "drop" else "padding"))
    return ShardPlan(ranks=ranks, batch_size=batch_size, steps_per_epoch=steps, strategy=strategy,
                     notes=tuple(notes), remainder=remainder, records=R, records_per_rank=tuple(declared),
                     dropped=dropped, padded=padded, channels=channels)


def _next_multiple(n: int, m: int) -> int:
    return max(m, -(-n // m) * m)


def _shared_pipe(channel: str, wph: int) -> str:
    return (f"Pipe mode with one channel {channel!r} and {wph} workers per host: workers on one host would share "
            "one FIFO and split its byte stream (and hang); use one channel per worker (--channel-per-worker), "
            "File/FastFile mode, or one worker per host")


def _describe(strategy: str, H: int, W: int) -> str:
    return {
        "files": f"file sharding: each of {H * W} ranks reads its own files",
        "records": f"record sharding: every rank reads the whole stream and keeps shard({H * W}, rank)",
        "channel_per_worker": f"one channel per worker, FullyReplicated: shard({H}, rank // {W})",
        "channel_per_worker_s3": "one channel per worker, ShardedByS3Key: no shard call",
        "s3_sharded": f"one channel, ShardedByS3Key: shard({W}, local_rank)",
    }[strategy]
